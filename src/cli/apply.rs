//! `partop apply`: a saved plan verified (its own fingerprint, this host, re-planned live), confirmed,
//! locked, journaled, executed; `--resume` continues its run (docs/safety.md).

use crate::cli::out::{confirm, out};
use crate::cli::{SourceArgs, exit};
use crate::collect::amdsmi::recording::CommandSource;
use crate::config::Settings;
use crate::node::{lock_path, open};
use crate::sim::session;
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
    if !file_plan.content_intact() {
        anyhow::bail!(
            "{} was changed after it was planned: its content no longer matches its fingerprint {} (now {}). Nothing is applied. Make a new plan with `partop plan … --json`",
            path.display(),
            file_plan.fingerprint,
            file_plan.content_fingerprint()
        );
    }
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
    let run_id = if resume {
        journal::latest_run(&journal_path, "repartition", &file_plan.fingerprint)
            .map(|r| r.run)
            .unwrap_or_default()
    } else {
        journal::new_run_id()
    };
    // One change at a time on this node, held until this process exits.
    let _lock = crate::exec::lock::acquire(
        &lock_path(&node),
        &crate::exec::lock::Holder::me("apply", &run_id, &journal_path),
    )?;
    let rt = crate::cli::out::runtime()?;
    let snap = rt.block_on(node.collector().sample());
    let (plan, from) = if resume {
        let Some(run) = journal::latest_run(&journal_path, "repartition", &file_plan.fingerprint)
        else {
            anyhow::bail!(
                "the journal {} has no run of plan {}: there is nothing to resume. Apply it without --resume",
                journal_path.display(),
                file_plan.fingerprint
            );
        };
        if run.closed.as_deref() == Some("done") {
            out(&format!(
                "plan {} was already applied completely (run {}, started {})\n",
                run.fingerprint, run.run, run.started_at
            ))?;
            return Ok(exit::OK);
        }
        if run.closed.is_some() {
            anyhow::bail!(
                "run {} of this plan was abandoned; make a new plan with `partop plan`",
                run.run
            );
        }
        // The run continues with the plan as it was confirmed and journaled.
        let journaled: crate::domain::plan::Plan = serde_json::from_value(run.plan.clone())
            .context("the journaled plan of this run cannot be read")?;
        if journaled != file_plan {
            anyhow::bail!(
                "{} differs from the plan run {} confirmed: nothing is resumed",
                path.display(),
                run.run
            );
        }
        let from = run.resume_point();
        if from >= journaled.steps.len() {
            out(&format!(
                "plan {} was already applied completely (run {})\n",
                journaled.fingerprint, run.run
            ))?;
            return Ok(exit::OK);
        }
        let stop_done = journaled
            .steps
            .iter()
            .position(|s| s.key == "stop")
            .is_none_or(|i| run.done.contains(&i));
        let why = crate::domain::plan::still_valid(&journaled, &snap, &here, stop_done);
        if !why.is_empty() {
            anyhow::bail!(
                "run {} cannot be resumed on this node as it is now:\n  {}\nnothing was changed",
                run.run,
                why.join("\n  ")
            );
        }
        out(&format!(
            "\nresuming run {} of plan {} at step {} ({})\n",
            run.run,
            journaled.fingerprint,
            from + 1,
            journaled.steps[from].key
        ))?;
        (journaled, from)
    } else {
        if let Some(u) =
            journal::unfinished_on(&journal_path, &journal::node_id(node.sim_state())).first()
        {
            anyhow::bail!("{}", u.describe());
        }
        let why = crate::domain::plan::still_valid(&file_plan, &snap, &here, false);
        if !why.is_empty() {
            anyhow::bail!("{}\nnothing was changed", why.join("\n"));
        }
        // The node must still be the node the plan was made for: re-planned here, the plan
        // must come out identical, and the re-derived plan is what runs.
        match crate::domain::plan::plan(
            &snap,
            &file_plan.draft,
            file_plan.reload,
            file_plan.reload_secs,
            file_plan.grace_secs,
        ) {
            Ok(now) if now == file_plan => (now, 0),
            Ok(now) => anyhow::bail!(
                "the node changed since this plan was made (plan {}, now {}): {}. Review the new plan with `partop plan` and save it again",
                file_plan.fingerprint,
                now.fingerprint,
                crate::domain::plan::differences(&file_plan, &now).join("; ")
            ),
            Err(e) => anyhow::bail!(
                "this plan no longer applies: {}",
                e.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
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
    if resume {
        log.resumed(from)?;
    } else {
        log.start(&serde_json::to_value(&plan)?, Some(path), plan.steps.len())?;
    }
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
        restart_owners: node
            .sim_state()
            .map(std::path::Path::to_path_buf)
            .map(|st| {
                crate::exec::apply::OwnersRestart(std::sync::Arc::new(move |only, skip| {
                    session::resume(&st, skip, Some(only))
                        .map(|r| r.iter().map(ToString::to_string).collect())
                        .map_err(|e| e.to_string())
                }))
            }),
        wait_idle: Duration::from_secs(60),
        wait_gpus: Duration::from_secs(300),
        registry: node.registry().ok().flatten(),
        model_log_dir: node.model_log_dir(),
    };
    let mut show = |e: ApplyEvent| {
        let line = match e {
            ApplyEvent::Started { idx, title } => {
                format!("[{}/{}] {title}", idx + 1, plan.steps.len())
            }
            ApplyEvent::Done { detail, .. } => format!("      ok: {detail}"),
            ApplyEvent::Note(n) => format!("      {n}"),
        };
        let _ = out(&(line + "\n"));
    };
    match rt.block_on(apply(&plan, &ctx, &log, from, &mut show)) {
        Ok(()) => {
            out(&format!(
                "applied plan {}: {} logical GPUs\n",
                plan.fingerprint,
                plan.after.len()
            ))?;
            Ok(exit::OK)
        }
        Err(e) => {
            out(&format!("{e}\n"))?;
            Ok(exit::FAILED)
        }
    }
}
