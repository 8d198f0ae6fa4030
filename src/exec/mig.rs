//! Applying a confirmed MIG plan with `nvidia-smi`: stop the GPU's processes (SIGTERM, grace,
//! SIGKILL only if allowed), destroy the old instances, set the MIG mode (a mode left pending
//! stops the plan: partop never resets a GPU), create the new instances, verify by reading the
//! node back. nvidia-smi reports some failures with exit status 0, so its text is scanned too.
//! Every step is journaled with the plan's fingerprint; `--resume` skips steps already done.

use super::journal::{self, Entry};
use super::kill::{KillEvent, KillJob};
use crate::collect::nvidia::smi::{NvidiaSmi, parse};
use crate::domain::kill::{Sig, Target};
use crate::domain::mig::{MigPlan, MigStep};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

/// What the executor needs.
#[derive(Debug, Clone)]
pub struct MigCtx {
    /// nvidia-smi.
    pub smi: NvidiaSmi,
    /// The journal.
    pub journal: PathBuf,
    /// SIGTERM grace.
    pub grace: Duration,
    /// SIGKILL allowed after the grace.
    pub kill_after_grace: bool,
    /// /proc.
    pub proc_root: PathBuf,
    /// The node is simulated.
    pub simulated: bool,
}

/// A failed step: the tool's own text and what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step {} ({key}) failed: {message}\nnext: {next}", idx + 1)]
pub struct MigFailed {
    /// Step index.
    pub idx: usize,
    /// Key.
    pub key: String,
    /// What happened.
    pub message: String,
    /// What to do.
    pub next: String,
}

const RESUME: &str = "fix the cause, then: partop mig apply PLAN.json --resume";

fn run(ctx: &MigCtx, cmd: &str) -> Result<String, String> {
    let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
    let (code, out, err) = ctx.smi.run(&args)?;
    let text = format!("{out}{err}");
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("Unable to")
                || l.starts_with("Failed")
                || l.contains("In use by another client")
        })
        .map(str::trim)
        .collect();
    if code != 0 || !bad.is_empty() {
        return Err(if bad.is_empty() {
            format!("`{cmd}` exited with {code}: {}", text.trim())
        } else {
            bad.join("; ")
        });
    }
    Ok(text)
}

fn stop(plan: &MigPlan, ctx: &MigCtx) -> Result<String, (String, String)> {
    let targets: Vec<Target> = plan
        .stops
        .iter()
        .map(|s| Target {
            pid: s.pid,
            start_ticks: s.start_ticks,
            name: Some(s.name.clone()),
            ..Target::default()
        })
        .collect();
    let mut job = KillJob {
        targets,
        sig: Sig::Term,
        grace: ctx.grace,
        proc_root: ctx.proc_root.clone(),
        journal: ctx.journal.clone(),
        simulated: ctx.simulated,
    };
    let mut alive = Vec::new();
    super::kill::run(&job, |e| {
        if let KillEvent::Done { alive: a, .. } = e {
            alive = a;
        }
    });
    if alive.is_empty() {
        return Ok(format!("{} stopped", plan.stops.len()));
    }
    if !ctx.kill_after_grace {
        return Err((
            format!("still running after SIGTERM and {}s: pids {alive:?}", ctx.grace.as_secs()),
            "stop them yourself, or allow SIGKILL: partop mig apply PLAN.json --resume --kill-after-grace".into(),
        ));
    }
    job.targets.retain(|t| alive.contains(&t.pid));
    job.sig = Sig::Kill;
    super::kill::run(&job, |_| {});
    Ok(format!(
        "{} stopped ({} needed SIGKILL)",
        plan.stops.len(),
        alive.len()
    ))
}

fn verify(plan: &MigPlan, ctx: &MigCtx) -> Result<String, (String, String)> {
    let i = plan.draft.gpu.to_string();
    let (_, out, _) = ctx
        .smi
        .run(&["-q", "-x", "-i", &i])
        .map_err(|e| (e, RESUME.to_string()))?;
    let node = parse(&out).map_err(|e| (e, RESUME.to_string()))?;
    let g = node
        .gpus
        .first()
        .ok_or_else(|| ("nvidia-smi lists no GPU".to_string(), RESUME.to_string()))?;
    let want = !plan.after.is_empty();
    let mut wrong = Vec::new();
    if g.mig_enabled != Some(want) {
        wrong.push(format!(
            "MIG is {}, expected {}",
            if g.mig_enabled == Some(true) {
                "on"
            } else {
                "off"
            },
            if want { "on" } else { "off" }
        ));
    }
    if want && g.instances.len() != plan.after.len() {
        wrong.push(format!(
            "{} GPU instances, expected {}",
            g.instances.len(),
            plan.after.len()
        ));
    }
    if wrong.is_empty() {
        Ok(format!(
            "MIG {} with {} instance(s)",
            if want { "on" } else { "off" },
            g.instances.len()
        ))
    } else {
        Err((wrong.join("; "), RESUME.into()))
    }
}

fn step(plan: &MigPlan, ctx: &MigCtx, s: &MigStep) -> Result<String, (String, String)> {
    match s.key.as_str() {
        "stop" => stop(plan, ctx),
        "destroy" | "create" => {
            let mut out = Vec::new();
            for c in &s.commands {
                out.push(run(ctx, c).map_err(|e| (e, RESUME.to_string()))?);
            }
            let n = out
                .iter()
                .map(|t| t.matches("Successfully").count())
                .sum::<usize>();
            Ok(format!("{n} x Successfully"))
        }
        "mig_mode" => {
            let text = run(ctx, &s.commands[0]).map_err(|e| (e, RESUME.to_string()))?;
            if text.contains("pending") {
                return Err((
                    text.lines().next().unwrap_or("").trim().to_string(),
                    "the MIG mode is pending: stop every client of this GPU (CUDA programs, nvidia-persistenced, DCGM, monitors), reset the GPU yourself (partop never resets one), then --resume".into(),
                ));
            }
            Ok(text.lines().next().unwrap_or("").trim().to_string())
        }
        "verify" => verify(plan, ctx),
        other => Err((
            format!("unknown step {other:?}"),
            "use the partop that made the plan".into(),
        )),
    }
}

/// The first step not journaled as done for this plan.
pub fn resume_point(ctx: &MigCtx, fingerprint: &str) -> usize {
    journal::resume_point(&ctx.journal, "mig.step", fingerprint)
}

/// Applies `plan` from step `from`, reporting each step's start and result.
pub fn apply(
    plan: &MigPlan,
    ctx: &MigCtx,
    from: usize,
    mut emit: impl FnMut(usize, &str, Option<Result<&str, &str>>),
) -> Result<(), MigFailed> {
    for (idx, s) in plan.steps.iter().enumerate().skip(from) {
        emit(idx, &s.title, None);
        let r = step(plan, ctx, s);
        let _ = journal::append(
            &ctx.journal,
            &Entry::new(
                "mig.step",
                ctx.simulated,
                json!({"fingerprint": plan.fingerprint, "step": idx, "key": s.key, "gpu": plan.bdf}),
                match &r {
                    Ok(d) => json!({"ok": true, "detail": d}),
                    Err((m, _)) => json!({"ok": false, "detail": m}),
                },
            ),
        );
        match r {
            Ok(d) => emit(idx, &s.title, Some(Ok(&d))),
            Err((message, next)) => {
                emit(idx, &s.title, Some(Err(&message)));
                return Err(MigFailed {
                    idx,
                    key: s.key.clone(),
                    message,
                    next,
                });
            }
        }
    }
    let _ = journal::append(
        &ctx.journal,
        &Entry::new(
            "mig.done",
            ctx.simulated,
            json!({"fingerprint": plan.fingerprint, "gpu": plan.bdf}),
            json!({"ok": true, "after": plan.after}),
        ),
    );
    Ok(())
}
