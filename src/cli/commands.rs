//! The dispatcher: resolves the settings once, then runs the monitor or a one-shot command
//! (snapshot, plan, apply, record, sim here; kill, journal, models, mig in their own files).
//! Errors come back as values; only `main.rs` turns them into exit codes.

use crate::cli::out::{confirm, out};
use crate::cli::{Cli, Cmd, SimCmd, SourceArgs, exit};
use crate::collect::amdsmi::recording::CommandSource;
use crate::config::Settings;
use crate::domain::snapshot::Health;
use crate::node::{lock_path, open};
use crate::sim::scenario::{BUILTIN, Scenario};
use crate::sim::session;
use anyhow::{Context, Result};
use clap::CommandFactory;
use std::io::Write;
use std::time::Duration;

/// Runs the command line. Returns the exit code.
pub fn main(cli: Cli) -> Result<u8> {
    // A configuration that cannot be read stops every command that acts or reports (never a
    // silent default); check-config reports it, and the simulator's own tools do not read it.
    let settings = if matches!(
        cli.command,
        Some(Cmd::CheckConfig | Cmd::Completions { .. } | Cmd::Man | Cmd::Sim { .. })
    ) {
        Settings::flags_only(cli.read_only, cli.journal.as_deref())
    } else {
        crate::config::settings::resolve(cli.read_only, cli.journal.as_deref())?
    };
    let settings = &settings;
    match cli.command {
        None => crate::cli::monitor::monitor(&cli, settings),
        Some(Cmd::Snapshot { json }) => snapshot(&cli.source, json),
        Some(Cmd::Sim { action }) => sim(action, settings.read_only),
        Some(Cmd::Record { out: path }) => record(&cli.source, &path),
        Some(Cmd::CheckConfig) => {
            crate::cli::check_config::check_config(cli.source.models.as_deref())
        }
        Some(Cmd::Completions { shell }) => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "partop", &mut std::io::stdout());
            Ok(exit::OK)
        }
        Some(Cmd::Plan {
            gpus,
            compute,
            memory,
            json,
        }) => plan(&cli.source, gpus, compute, memory, json, settings),
        Some(Cmd::Apply(a)) => apply(&cli.source, &a, settings),
        Some(Cmd::Kill {
            pids,
            signal,
            grace,
            yes,
            dry_run,
        }) => crate::cli::kill::kill(&pids, signal, grace, yes, dry_run, settings),
        Some(Cmd::Mig { action }) => crate::cli::mig::mig(&cli.source, action, settings),
        Some(Cmd::Nvidia { action }) => crate::cli::mig::nvidia(&cli.source, action),
        Some(Cmd::Models { action }) => crate::cli::models::models(&cli.source, action, settings),
        Some(Cmd::Journal { json, abandon }) => {
            crate::cli::kill::journal(json, abandon.as_deref(), settings)
        }
        Some(Cmd::Keys { markdown }) => {
            if markdown {
                out(&crate::ui::keymap::reference_markdown())?;
            } else {
                let loaded = crate::ui::config::load(
                    &crate::config::paths::config_dir(),
                    cli.theme.as_deref(),
                    cli.keymap.as_deref(),
                    cli.read_only,
                );
                out(&crate::ui::keymap::effective_text(&loaded.keymap))?;
            }
            Ok(exit::OK)
        }
        Some(Cmd::Man) => {
            clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout())?;
            Ok(exit::OK)
        }
    }
}

fn snapshot(src: &SourceArgs, json: bool) -> Result<u8> {
    let node = open(src)?;
    let rt = crate::cli::out::runtime()?;
    let mut collector = node.collector();
    let snap = rt.block_on(collector.sample());
    // A kernel read stuck on a blocking file is left behind, never waited for.
    rt.shutdown_background();
    let failed: Vec<String> = snap
        .sources
        .iter()
        .filter(|s| matches!(s.status, Health::Down | Health::Stale))
        .map(|s| format!("{}: {}", s.name, s.error.clone().unwrap_or_default()))
        .collect();
    if snap.gpus.is_empty() && !failed.is_empty() {
        anyhow::bail!("{}", failed.join("\n"));
    }
    if json {
        out(&(serde_json::to_string_pretty(&snap)? + "\n"))?;
    } else {
        out(&crate::report::table(&snap))?;
    }
    if failed.is_empty() {
        Ok(exit::OK)
    } else {
        #[expect(clippy::print_stderr, reason = "one-shot command")]
        for f in &failed {
            eprintln!("partop: {f}");
        }
        Ok(exit::PARTIAL)
    }
}

fn plan(
    src: &SourceArgs,
    gpus: Vec<String>,
    compute: Option<crate::domain::ComputeMode>,
    memory: Option<crate::domain::MemoryMode>,
    json: bool,
    settings: &Settings,
) -> Result<u8> {
    use crate::domain::plan::{Draft, Reload, plan};
    if compute.is_none() && memory.is_none() {
        anyhow::bail!(
            "say what to change: --compute SPX|DPX|QPX|CPX and/or --memory NPS1|NPS2|NPS4"
        );
    }
    let node = open(src)?;
    let rt = crate::cli::out::runtime()?;
    let mut collector = node.collector();
    let snap = rt.block_on(collector.sample());
    rt.shutdown_background();
    let reload = match collector
        .version()
        .map(crate::collect::amdsmi::AmdSmiVersion::reload_method)
    {
        Some(crate::collect::amdsmi::version::ReloadMethod::InsideSetMemory) => {
            Reload::InsideSetMemory
        }
        Some(crate::collect::amdsmi::version::ReloadMethod::Modprobe) => Reload::Modprobe,
        _ => Reload::ResetReload,
    };
    // A real reload of 8 MI300X is not documented anywhere; 120 s is the planning figure
    // (amd-smi's own progress bar allows 140 s). The simulator knows its own.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "seconds"
    )]
    let reload_secs = node
        .sim_state()
        .and_then(|s| crate::sim::state::SimState::load(s).ok())
        .map_or(120, |s| s.reload_secs.ceil() as u32);
    let draft = Draft {
        gpus: gpus.into_iter().filter(|g| g != "all").collect(),
        compute,
        memory,
    };
    // An apply that did not finish comes first: planning over a half-changed node misleads.
    for u in crate::exec::journal::unfinished(&settings.journal) {
        let mut e = std::io::stderr();
        let _ = writeln!(e, "partop: warning: {}", u.describe());
    }
    match plan(&snap, &draft, reload, reload_secs, 10) {
        Ok(p) => {
            if json {
                out(&(serde_json::to_string_pretty(&p)? + "\n"))?;
            } else {
                out(&crate::report::plan_text(&p))?;
            }
            Ok(exit::OK)
        }
        Err(errors) => {
            let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
            anyhow::bail!("cannot plan this change:\n  {}", text.join("\n  "))
        }
    }
}

fn apply(src: &SourceArgs, args: &crate::cli::ApplyArgs, settings: &Settings) -> Result<u8> {
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
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
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
        out("partop is read-only (--read-only, or read_only = true): nothing is applied\n")?;
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
        if let Some(u) = journal::unfinished(&journal_path).first() {
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
                "the node changed since this plan was made (plan {}, now {}): processes or modes differ. Review the new plan with `partop plan` and save it again",
                file_plan.fingerprint,
                now.fingerprint
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

fn record(src: &SourceArgs, path: &std::path::Path) -> Result<u8> {
    let node = open(src)?;
    let rt = crate::cli::out::runtime()?;
    let mut collector = node.collector();
    collector.start_recording(crate::collect::host::hostname());
    let snap = rt.block_on(collector.sample());
    let mut rec = collector.take_recording().unwrap_or_default();
    if node.sim.is_none() {
        rec.add_partition_files(std::path::Path::new("/sys"));
    }
    if let Some(s) = node.scenario() {
        rec.host = format!("simulated:{s}");
    }
    std::fs::write(path, serde_json::to_string_pretty(&rec)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    out(&format!(
        "recorded {} amd-smi outputs and {} partition files ({} GPUs, {} logical) to {}\n",
        rec.outputs.len(),
        rec.files.len(),
        snap.gpus.len(),
        snap.logical_count(),
        path.display()
    ))?;
    Ok(exit::OK)
}

/// Whether a `partop sim` command changes a simulated node (what `--read-only` removes).
fn sim_mutates(action: &SimCmd) -> bool {
    match action {
        SimCmd::Stop { .. }
        | SimCmd::Resume { .. }
        | SimCmd::Reload { .. }
        | SimCmd::NvidiaAttach { .. } => true,
        SimCmd::AmdSmi { args, .. } => args.first().is_some_and(|a| a == "set" || a == "reset"),
        SimCmd::NvidiaSmi { args, .. } => args.iter().any(|a| {
            matches!(
                a.as_str(),
                "-mig"
                    | "--multi-instance-gpu"
                    | "-cgi"
                    | "-dgi"
                    | "-cci"
                    | "-dci"
                    | "-r"
                    | "--gpu-reset"
            ) || a.starts_with("--create-gpu-instance")
                || a.starts_with("--destroy-gpu-instance")
        }),
        _ => false,
    }
}

fn sim(action: SimCmd, read_only: bool) -> Result<u8> {
    if read_only && sim_mutates(&action) {
        let mut e = std::io::stderr();
        let _ = writeln!(
            e,
            "partop: read-only (--read-only): this command would change the simulated node; nothing was done"
        );
        return Ok(exit::USAGE);
    }
    match action {
        SimCmd::List => {
            let mut s = String::new();
            for (name, text) in BUILTIN {
                let d = Scenario::parse(name, text)
                    .map(|s| s.description)
                    .unwrap_or_default();
                s.push_str(&format!("{name:<24} {d}\n"));
            }
            out(&s)?;
            Ok(exit::OK)
        }
        SimCmd::Start {
            scenario,
            state,
            seed,
        } => {
            let sc = Scenario::load(&scenario)?;
            let st = session::start(&sc, &state, seed)?;
            out(&session::status(&st))?;
            Ok(exit::OK)
        }
        SimCmd::Stop { state } => {
            for s in session::stop(&state, Duration::from_secs(3))? {
                let how = if s.killed {
                    "did not exit on SIGTERM; sent SIGKILL"
                } else {
                    "stopped"
                };
                out(&format!("{}: {how}\n", s.name))?;
            }
            Ok(exit::OK)
        }
        SimCmd::Resume { state } => {
            for r in session::resume(&state, &[], None)? {
                out(&format!("{r}\n"))?;
            }
            Ok(exit::OK)
        }
        SimCmd::Status { state } => {
            let st = crate::sim::state::SimState::load(&state)?;
            out(&session::status(&st))?;
            Ok(exit::OK)
        }
        SimCmd::AmdSmi { state, args } => {
            let stdin = std::io::stdin();
            let mut input = stdin.lock();
            let mut o = std::io::stdout();
            let mut e = std::io::stderr();
            let code = crate::sim::amdsmi::main(&state, &args, &mut input, &mut o, &mut e);
            Ok(u8::try_from(code.rem_euclid(256)).unwrap_or(1))
        }
        SimCmd::NvidiaInit {
            state,
            product,
            gpus,
        } => {
            crate::sim::nvidia::NvSimState::new(&product, gpus)
                .save(&state)
                .map_err(anyhow::Error::msg)?;
            out(&format!(
                "{gpus} x {product} (MIG off) in {}\nuse it: partop --source nvidia --nvidia-smi SCRIPT, where SCRIPT runs `partop sim nvidia-smi --state {} \"$@\"`\n",
                state.display(),
                state.display()
            ))?;
            Ok(exit::OK)
        }
        SimCmd::NvidiaAttach {
            state,
            pid,
            gpu,
            gi,
            mib,
        } => {
            let mut s = crate::sim::nvidia::NvSimState::load(&state).map_err(anyhow::Error::msg)?;
            let g = s
                .gpus
                .get_mut(gpu)
                .with_context(|| format!("no simulated NVIDIA GPU {gpu}"))?;
            g.procs.push(crate::sim::nvidia::NvSimProc {
                pid,
                start_ticks: crate::sim::state::process_start(pid),
                gi,
                used_mib: mib,
            });
            s.save(&state).map_err(anyhow::Error::msg)?;
            Ok(exit::OK)
        }
        SimCmd::NvidiaSmi { state, args } => {
            let (code, o, e) = crate::sim::nvidia::main(&state, &args);
            out(&o)?;
            let _ = std::io::stderr().write_all(e.as_bytes());
            Ok(u8::try_from(code).unwrap_or(1))
        }
        SimCmd::Serve { state, name, port } => {
            // Returns only on failure (it becomes the server otherwise); the message goes to
            // the model's log, where a real vLLM's traceback would be.
            Err(session::serve(&state, &name, port).into())
        }
        SimCmd::Reload { state } => {
            let code = crate::sim::amdsmi::changes::modprobe_reload(
                &state,
                &mut std::io::stderr(),
                &mut std::io::stderr(),
            );
            Ok(u8::try_from(code).unwrap_or(1))
        }
    }
}
