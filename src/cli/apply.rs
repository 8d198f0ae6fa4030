//! `partop apply`: a saved plan verified (its own fingerprint, this host, re-planned live), confirmed,
//! locked, journaled, executed; `--resume` continues its run (docs/safety.md).

use crate::cli::out::{confirm, out};
use crate::cli::{SourceArgs, exit};
use crate::collect::amdsmi::recording::CommandSource;
use crate::config::Settings;
use crate::domain::journal::StepKind;
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
        journal::latest_run(
            &journal_path,
            crate::domain::journal::RunKind::Repartition,
            &file_plan.fingerprint,
        )
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
        let Some(run) = journal::latest_run(
            &journal_path,
            crate::domain::journal::RunKind::Repartition,
            &file_plan.fingerprint,
        ) else {
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
            .position(|s| s.key == StepKind::Stop)
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
    let resume_command = resume_command(src, &journal_path, path, kill_after_grace, grace);
    if resume {
        log.resumed(from)?;
    } else {
        log.start_resumable(
            &serde_json::to_value(&plan)?,
            Some(path),
            plan.steps.len(),
            Some(&resume_command),
        )?;
    }
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

/// The exact command that resumes this run: every option that chose the node, its tools, the
/// registry and the journal, with absolute paths, so it works pasted into another shell.
fn resume_command(
    src: &SourceArgs,
    journal: &std::path::Path,
    plan: &std::path::Path,
    kill_after_grace: bool,
    grace: f64,
) -> String {
    let abs = |p: &std::path::Path| {
        std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    let mut argv = vec![crate::cli::out::invoked_as()];
    let mut opt = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            argv.push(flag.into());
            argv.push(v);
        }
    };
    opt("--sim-state", src.sim_state.as_deref().map(abs));
    opt("--amd-smi", src.amd_smi.as_deref().map(abs));
    opt("--models", src.models.as_deref().map(abs));
    let default_sys = std::path::Path::new("/sys");
    let default_proc = std::path::Path::new("/proc");
    opt(
        "--sysfs-root",
        (src.sysfs_root != default_sys).then(|| abs(&src.sysfs_root)),
    );
    opt(
        "--proc-root",
        (src.proc_root != default_proc).then(|| abs(&src.proc_root)),
    );
    opt("--journal", Some(abs(journal)));
    argv.push("apply".into());
    argv.push(if plan.as_os_str() == "-" {
        "PLAN.json".into()
    } else {
        abs(plan)
    });
    argv.push("--grace".into());
    argv.push(grace.to_string());
    argv.push("--resume".into());
    if kill_after_grace {
        argv.push("--kill-after-grace".into());
    }
    argv.iter()
        .map(|a| crate::domain::text::shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}
