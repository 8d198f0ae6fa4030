//! `partop apply`: a saved plan verified (its own fingerprint, this host, re-planned live), confirmed,
//! locked, journaled, executed; `--resume` continues its run (docs/safety.md).

use crate::cli::out::{confirm, out};
use crate::cli::{SourceArgs, exit};
use crate::collect::amdsmi::recording::CommandSource;
use crate::config::Settings;
use crate::domain::journal::StepKind;
use crate::domain::plan::Plan;
use crate::exec::apply::{AmdNode, ApplyEvent, StopPolicy, execute};
use crate::exec::protocol::{self, Outcome, Start};
use crate::node::{lock_path, open};
use anyhow::Result;
use std::time::Duration;

pub fn apply(src: &SourceArgs, args: &crate::cli::ApplyArgs, settings: &Settings) -> Result<u8> {
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
    let file_plan: Plan =
        crate::cli::out::read_document(path, true, "a plan made by `partop plan --json`")?;
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
    let journal = &settings.journal;
    let lock = lock_path(&node);
    let req = protocol::Request {
        saved: &file_plan,
        file: path,
        resume,
        journal,
        node_id: crate::exec::journal::node_id(node.sim_state()),
        lock: &lock,
        holder: "apply",
        resume_command: crate::cli::out::resume_command(
            src,
            journal,
            &["apply"],
            path,
            kill_after_grace,
            grace,
        ),
        simulated: node.sim.is_some(),
    };
    let amd = AmdNode {
        runner,
        collector: node.collector(),
        roots: node
            .roots
            .clone()
            .unwrap_or_else(crate::collect::holders::Roots::host),
        sim_state: node.sim_state().map(std::path::Path::to_path_buf),
        time_scale: node
            .sim_state()
            .and_then(|s| crate::sim::state::SimState::load(s).ok())
            .map_or(1.0, |s| s.time_scale),
        registry: node.registry().ok().flatten(),
        model_log_dir: node.model_log_dir(),
        host: here,
    };
    let mut op = Operator {
        yes,
        steps: file_plan.steps.len(),
        here: amd.host.clone(),
    };
    let stop = StopPolicy {
        grace: Duration::from_secs_f64(grace),
        kill_after_grace,
    };
    match execute(amd, &req, stop, &mut op)? {
        Outcome::Complete(_) => Ok(exit::OK),
        Outcome::NotConfirmed => {
            out("not confirmed: nothing changed\n")?;
            Ok(exit::FAILED)
        }
        Outcome::Ran {
            plan,
            result: Ok(a),
        } => {
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
        Outcome::Ran { result: Err(e), .. } => {
            out(&format!("{e}\n"))?;
            Ok(exit::FAILED)
        }
    }
}

/// The operator of `partop apply`: where the run starts and each step, printed; the typed
/// confirmation read from stdin (none with --yes).
struct Operator {
    yes: bool,
    steps: usize,
    here: String,
}

impl protocol::Operator<Plan> for Operator {
    type Event = ApplyEvent;

    fn starting(&mut self, start: &Start<Plan>) -> Result<()> {
        match start {
            Start::Complete(run) => out(&format!(
                "plan {} was already applied completely (run {}, started {})\n",
                run.fingerprint, run.run, run.started_at
            )),
            Start::Resume { plan, from, run } => out(&format!(
                "\nresuming run {} of plan {} at step {} ({})\n",
                run.run,
                plan.fingerprint,
                from + 1,
                plan.steps[*from].key
            )),
            Start::Fresh(_) => Ok(()),
        }
    }

    fn confirm(&mut self, plan: &Plan, _start: &Start<Plan>) -> Result<bool> {
        // A node a DCM profile manages (the live re-plan read its labels): said before the
        // change is confirmed, not only when the cordon runs.
        if let Some(w) = plan.kubernetes.as_ref().and_then(|k| k.dcm.as_ref()) {
            out(&format!(
                "\nWARNING: {}\n",
                crate::domain::text::escape_controls(w)
            ))?;
        }
        if self.yes {
            return Ok(true);
        }
        // The word typed is this machine's name, checked against this machine, not the file.
        let (word, what) = if plan.reloads() {
            (self.here.clone(), "this machine's host name")
        } else {
            ("yes".to_string(), "yes")
        };
        confirm(
            &format!(
                "\nType {what} ({word}) to apply plan {}: ",
                plan.fingerprint
            ),
            &word,
        )
    }

    fn progress(&mut self, e: ApplyEvent) {
        let line = match e {
            ApplyEvent::Started {
                idx,
                title,
                limit_secs,
            } => format!(
                "[{}/{}] {title}{}",
                idx + 1,
                self.steps,
                limit_secs.map_or_else(String::new, |l| format!(" (limit {l}s)"))
            ),
            ApplyEvent::Done { detail, took, .. } => {
                format!("      ok: {detail} ({:.1}s)", took.as_secs_f64())
            }
            ApplyEvent::Note(n) => format!("      {n}"),
        };
        let _ = out(&(line + "\n"));
    }
}
