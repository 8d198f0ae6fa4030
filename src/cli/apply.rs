//! `partop apply`: a saved plan verified (its own fingerprint, this host, re-planned live), confirmed,
//! locked, journaled, executed; `--resume` continues its run (docs/safety.md).

use crate::cli::out::{confirm, out};
use crate::cli::{SourceArgs, exit};
use crate::collect::amdsmi::recording::CommandSource;
use crate::config::Settings;
use crate::domain::journal::StepKind;
use crate::exec::protocol;
use crate::node::{lock_path, open};
use anyhow::{Context, Result};
use std::time::Duration;

pub fn apply(src: &SourceArgs, args: &crate::cli::ApplyArgs, settings: &Settings) -> Result<u8> {
    use crate::exec::apply::{ApplyCtx, ApplyEvent, apply};
    use crate::exec::journal;
    let crate::cli::ApplyArgs {
        plan: path,
        yes,
        dry_run,
        resume,
        kill_after_grace,
        grace,
    } = args.clone();
    let path = path.as_path();
    crate::cli::plan::refuse_kernel_only(src)?;
    // `-`: the plan on stdin (how a fleet rollout hands a node its plan over ssh); the
    // confirmation then was the fleet's, so --yes is required.
    if path.as_os_str() == "-" && !yes && !dry_run {
        anyhow::bail!(
            "a plan read from stdin (`-`) needs --yes: the confirmation is the caller's (partop fleet apply)"
        );
    }
    let text = if path.as_os_str() == "-" {
        let mut t = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(std::io::stdin().lock(), 16 << 20),
            &mut t,
        )
        .context("cannot read the plan from stdin")?;
        t
    } else {
        crate::collect::small_file::operator_text(path)
            .with_context(|| format!("cannot read {}", path.display()))?
    };
    let file_plan: crate::domain::plan::Plan = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a plan made by `partop plan --json`",
            path.display()
        )
    })?;
    // The file is verified, never trusted: its content must be what was fingerprinted.
    protocol::verify(&file_plan, path)?;
    let here = crate::collect::host::hostname();
    out(&crate::report::plan_text(&file_plan))?;
    if dry_run {
        out("\ndry run: nothing changed\n")?;
        return Ok(exit::OK);
    }
    if settings.read_only {
        out(&crate::cli::out::read_only_refusal("applied"))?;
        return Ok(exit::USAGE);
    }
    let node = open(src)?;
    let CommandSource::Live(runner) = node.source.clone() else {
        anyhow::bail!("a recording cannot be changed: apply on a live or simulated node")
    };
    let journal_path = settings.journal.clone();
    let run_id = protocol::run_id(&journal_path, &file_plan, resume);
    // One change at a time on this node, held until this process exits.
    let _lock = crate::exec::lock::acquire(
        &lock_path(&node),
        &crate::exec::lock::Holder::me("apply", &run_id, &journal_path),
    )?;
    let rt = crate::cli::out::runtime()?;
    let snap = rt.block_on(node.collector().sample());
    let now = AmdNode {
        snap: &snap,
        here: &here,
    };
    let start = protocol::start(
        &journal_path,
        &journal::node_id(node.sim_state()),
        &file_plan,
        resume,
        &now,
    )?;
    let (plan, from) = match &start {
        protocol::Start::Complete(run) => {
            out(&format!(
                "plan {} was already applied completely (run {}, started {})\n",
                run.fingerprint, run.run, run.started_at
            ))?;
            return Ok(exit::OK);
        }
        protocol::Start::Resume { plan, from, run } => {
            out(&format!(
                "\nresuming run {} of plan {} at step {} ({})\n",
                run.run,
                plan.fingerprint,
                from + 1,
                plan.steps[*from].key
            ))?;
            (plan.clone(), *from)
        }
        protocol::Start::Fresh(plan) => (plan.clone(), 0),
    };
    if !yes {
        // The word typed is this machine's name, checked against this machine, not the file.
        let (word, what) = if plan.reloads() {
            (here.clone(), "this machine's host name")
        } else {
            ("yes".to_string(), "yes")
        };
        if !confirm(
            &format!(
                "\nType {what} ({word}) to apply plan {}: ",
                plan.fingerprint
            ),
            &word,
        )? {
            out("not confirmed: nothing changed\n")?;
            return Ok(exit::FAILED);
        }
    }
    let log = crate::exec::runlog::RunLog {
        node: crate::exec::journal::node_id(node.sim_state()),
        path: journal_path.clone(),
        kind: "repartition",
        run: run_id,
        fingerprint: plan.fingerprint.clone(),
        simulated: node.sim.is_some(),
    };
    // Journal first: without the run's entry nothing is done.
    let resume_command = crate::cli::out::resume_command(
        src,
        &journal_path,
        &["apply"],
        path,
        kill_after_grace,
        grace,
    );
    protocol::journal_start(&log, &start, Some(path), &resume_command)?;
    // A simulated node may run faster than real time (its scenario's time_scale): the waits
    // scale with it; the limits stay those of a real node.
    let scale = node
        .sim_state()
        .and_then(|s| crate::sim::state::SimState::load(s).ok())
        .map_or(1.0, |s| s.time_scale.clamp(0.001, 1.0));
    let exe = std::env::current_exe()?;
    let reload_cmd = match node.sim_state() {
        Some(s) => vec![
            exe.display().to_string(),
            "sim".into(),
            "reload".into(),
            "--state".into(),
            s.display().to_string(),
        ],
        None => vec![
            "sh".into(),
            "-c".into(),
            "modprobe -r amdgpu && modprobe amdgpu".into(),
        ],
    };
    let ctx = ApplyCtx {
        runner,
        reload_cmd,
        roots: node
            .roots
            .clone()
            .unwrap_or_else(crate::collect::holders::Roots::host),
        journal: journal_path,
        grace: Duration::from_secs_f64(grace),
        kill_after_grace,
        sim_state: node.sim_state().map(std::path::Path::to_path_buf),
        wait_idle: Duration::from_secs(u64::from(crate::domain::plan::WAIT_IDLE_SECS)),
        wait_gpus: Duration::from_secs(u64::from(crate::domain::plan::WAIT_GPUS_SECS)),
        registry: node.registry().ok().flatten(),
        model_log_dir: node.model_log_dir(),
        poll: Duration::from_secs_f64((0.5 * scale).max(0.02)),
        settle: Duration::from_secs_f64((60.0 * scale).max(5.0)),
        resumed: resume,
        resume_command,
    };
    let mut show = |e: ApplyEvent| {
        let line = match e {
            ApplyEvent::Started {
                idx,
                title,
                limit_secs,
            } => format!(
                "[{}/{}] {title}{}",
                idx + 1,
                plan.steps.len(),
                limit_secs.map_or_else(String::new, |l| format!(" (limit {l}s)"))
            ),
            ApplyEvent::Done { detail, took, .. } => {
                format!("      ok: {detail} ({:.1}s)", took.as_secs_f64())
            }
            ApplyEvent::Note(n) => format!("      {n}"),
        };
        let _ = out(&(line + "\n"));
    };
    match rt.block_on(apply(&plan, &ctx, &log, from, &mut show)) {
        Ok(a) => {
            let stops = plan.steps.iter().position(|s| s.key == StepKind::Stop);
            let down = match (a.downtime, stops) {
                (Some(d), _) => format!("services down {:.1}s", d.as_secs_f64()),
                (None, Some(_)) => "the services went down in the interrupted run".to_string(),
                (None, None) => "no service was stopped".to_string(),
            };
            out(&format!(
                "applied plan {}: {} logical GPUs; {down} (estimated {}s), {:.1}s in all\n",
                plan.fingerprint,
                plan.after.len(),
                plan.downtime_secs,
                a.took.as_secs_f64()
            ))?;
            Ok(exit::OK)
        }
        Err(e) => {
            out(&format!("{e}\n"))?;
            Ok(exit::FAILED)
        }
    }
}

/// The node as the AMD protocol asks it: its sample under the lock, and this host's name.
struct AmdNode<'a> {
    snap: &'a crate::domain::Snapshot,
    here: &'a str,
}

impl protocol::Node<crate::domain::plan::Plan> for AmdNode<'_> {
    fn can_start(&self, plan: &crate::domain::plan::Plan) -> Vec<String> {
        crate::domain::plan::still_valid(plan, self.snap, self.here, false)
    }

    fn can_resume(&self, plan: &crate::domain::plan::Plan, stop_done: bool) -> Vec<String> {
        crate::domain::plan::still_valid(plan, self.snap, self.here, stop_done)
    }

    fn replan(
        &self,
        saved: &crate::domain::plan::Plan,
    ) -> Result<crate::domain::plan::Plan, String> {
        crate::domain::plan::plan(
            self.snap,
            &saved.draft,
            saved.reload,
            saved.reload_secs,
            saved.grace_secs,
        )
        .map_err(|e| {
            e.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}
