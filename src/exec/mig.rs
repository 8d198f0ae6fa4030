//! Applying a confirmed MIG plan with `nvidia-smi`: stop the GPU's processes (SIGTERM, grace,
//! SIGKILL only if allowed), destroy the old instances, set the MIG mode (a mode left pending
//! stops the plan: partop never resets a GPU), create the new instances, verify by reading the
//! node back. nvidia-smi reports some failures with exit status 0, so its text is scanned too.
//! Every step is journaled with the plan's fingerprint; `--resume` skips steps already done.

use super::kill::KillJob;
use crate::collect::nvidia::smi::{NvidiaSmi, parse};
use crate::domain::kill::{Sig, Target};
use crate::domain::mig::{MigPlan, MigStep};
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

/// A failed MIG step (the same type as an AMD step's).
pub type MigFailed = super::runlog::StepFailed;

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
    let job = KillJob {
        targets,
        sig: Sig::Term,
        grace: ctx.grace,
        proc_root: ctx.proc_root.clone(),
        journal: ctx.journal.clone(),
        simulated: ctx.simulated,
    };
    let r = super::kill::term_then_kill(&job, ctx.kill_after_grace, |_| {})
        .map_err(|e| (e.to_string(), RESUME.to_string()))?;
    if r.after_term.is_empty() {
        return Ok(format!("{} stopped", plan.stops.len()));
    }
    if !ctx.kill_after_grace {
        return Err((
            format!("still running after SIGTERM and {}s: pids {:?}", ctx.grace.as_secs(), r.after_term),
            "stop them yourself, or allow SIGKILL: partop mig apply PLAN.json --resume --kill-after-grace".into(),
        ));
    }
    if !r.after_kill.is_empty() {
        return Err((
            format!("still running after SIGKILL: {:?}", r.after_kill),
            RESUME.into(),
        ));
    }
    Ok(format!(
        "{} stopped ({} needed SIGKILL)",
        plan.stops.len(),
        r.after_term.len()
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

/// Applies `plan` from step `from` under the run `log` (whose start the caller journaled),
/// each step journaled before it acts, reporting each step's start and result.
pub fn apply(
    plan: &MigPlan,
    ctx: &MigCtx,
    log: &super::runlog::RunLog,
    from: usize,
    mut emit: impl FnMut(usize, &str, Option<Result<&str, &str>>),
) -> Result<(), MigFailed> {
    for (idx, s) in plan.steps.iter().enumerate().skip(from) {
        let fail = |message: String, next: String| MigFailed {
            idx,
            key: s.key.clone(),
            message,
            next,
        };
        log.step_begin(idx, &s.key)
            .map_err(|e| fail(e.to_string(), RESUME.into()))?;
        emit(idx, &s.title, None);
        let r = step(plan, ctx, s);
        let journaled = log.step_end(
            idx,
            &s.key,
            r.is_ok(),
            match &r {
                Ok(d) => d,
                Err((m, _)) => m,
            },
        );
        match r {
            Ok(d) => {
                journaled.map_err(|e| {
                    fail(
                        format!("the step was done, but {e}"),
                        "free the journal, then --resume".into(),
                    )
                })?;
                emit(idx, &s.title, Some(Ok(&d)));
            }
            Err((message, next)) => {
                emit(idx, &s.title, Some(Err(&message)));
                return Err(fail(message, next));
            }
        }
    }
    let _ = log.done();
    Ok(())
}
