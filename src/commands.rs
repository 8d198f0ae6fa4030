//! Runs the chosen command: sets up the data source (a real amd-smi, or the simulated node with
//! its fake amd-smi), then the monitor or a one-shot command. Errors come back as values; only
//! `main` turns them into exit codes.

use crate::cli::{Cli, Cmd, SimCmd, SourceArgs, exit};
use crate::collect::amdsmi::AmdSmiCollector;
use crate::collect::amdsmi::recording::{CommandSource, Recording};
use crate::collect::amdsmi::runner::{Runner, locate};
use crate::domain::snapshot::Health;
use crate::sim::scenario::{BUILTIN, Scenario};
use crate::sim::session;
use anyhow::{Context, Result};
use clap::CommandFactory;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// A simulated node started for this process; stopped (workloads ended, state removed) on drop.
#[derive(Debug)]
pub struct SimGuard {
    /// Its state file.
    pub state: PathBuf,
}

impl Drop for SimGuard {
    fn drop(&mut self) {
        let _ = session::stop(&self.state, Duration::from_secs(2));
        let _ = std::fs::remove_file(&self.state);
        let _ = std::fs::remove_dir_all(self.state.with_extension("logs"));
        let _ = std::fs::remove_dir_all(self.state.with_extension("dev"));
    }
}

/// Where snapshots come from.
#[derive(Debug)]
pub struct Node {
    /// Where amd-smi output comes from (the real tool, `partop sim amd-smi`, or a recording).
    pub source: CommandSource,
    /// The simulated node, when `--sim`.
    pub sim: Option<SimGuard>,
    /// Scenario name, when simulated.
    pub scenario: Option<String>,
    /// Where GPU holders are looked for (None for a recording).
    pub roots: Option<crate::collect::holders::Roots>,
}

/// Opens the source the flags name.
pub fn open(src: &SourceArgs) -> Result<Node> {
    let timeout = Duration::from_secs_f64(src.timeout.max(0.1));
    if let Some(name) = &src.sim {
        let scenario = Scenario::load(name)?;
        let state = session::ephemeral_state_path();
        session::start(&scenario, &state, None)?;
        let exe = std::env::current_exe().context("cannot find partop's own executable")?;
        let runner = Runner {
            program: exe,
            prefix: vec![
                "sim".into(),
                "amd-smi".into(),
                "--state".into(),
                state.display().to_string(),
            ],
            timeout,
        };
        return Ok(Node {
            source: CommandSource::Live(runner),
            roots: Some(crate::sim::session::roots(&state)),
            sim: Some(SimGuard { state }),
            scenario: Some(scenario.name),
        });
    }
    if let Some(path) = &src.replay {
        let rec = Recording::load(path)?;
        return Ok(Node {
            source: CommandSource::Replay(std::sync::Arc::new(rec)),
            sim: None,
            scenario: None,
            roots: None,
        });
    }
    let program = locate(src.amd_smi.as_deref())?;
    Ok(Node {
        source: CommandSource::Live(Runner {
            timeout,
            ..Runner::new(program)
        }),
        sim: None,
        scenario: None,
        roots: Some(crate::collect::holders::Roots::host()),
    })
}

fn out(text: &str) -> Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes())?;
    o.flush()?;
    Ok(())
}

/// Runs the command line. Returns the exit code.
pub fn main(cli: Cli) -> Result<u8> {
    match cli.command {
        None => crate::ui::run::monitor(&cli),
        Some(Cmd::Snapshot { json }) => snapshot(&cli.source, json),
        Some(Cmd::Sim { action }) => sim(action),
        Some(Cmd::Record { out: path }) => record(&cli.source, &path),
        Some(Cmd::CheckConfig) => crate::ui::config::check_config(),
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
        }) => plan(&cli.source, gpus, compute, memory, json),
        Some(Cmd::Kill {
            pids,
            signal,
            grace,
            yes,
            dry_run,
        }) => crate::exec_cli::kill(&pids, signal, grace, yes, dry_run, cli.read_only),
        Some(Cmd::Journal { json }) => crate::exec_cli::journal(json),
        Some(Cmd::Keys { markdown }) => {
            if markdown {
                out(&crate::ui::keymap::reference_markdown())?;
            } else {
                let loaded = crate::ui::config::load(
                    &crate::paths::config_dir(),
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut collector = AmdSmiCollector::with_source(node.source.clone());
    collector.simulated = node.sim.is_some();
    collector.holder_roots.clone_from(&node.roots);
    let snap = rt.block_on(collector.sample());
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
) -> Result<u8> {
    use crate::domain::plan::{Draft, Reload, plan};
    if compute.is_none() && memory.is_none() {
        anyhow::bail!(
            "say what to change: --compute SPX|DPX|QPX|CPX and/or --memory NPS1|NPS2|NPS4"
        );
    }
    let node = open(src)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut collector = AmdSmiCollector::with_source(node.source.clone());
    collector.simulated = node.sim.is_some();
    collector.holder_roots.clone_from(&node.roots);
    let snap = rt.block_on(collector.sample());
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
    let reload_secs = node
        .sim
        .as_ref()
        .and_then(|g| crate::sim::state::SimState::load(&g.state).ok())
        .map_or(120, |s| s.reload_secs.ceil() as u32);
    let draft = Draft {
        gpus: gpus.into_iter().filter(|g| g != "all").collect(),
        compute,
        memory,
    };
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

fn record(src: &SourceArgs, path: &std::path::Path) -> Result<u8> {
    let node = open(src)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut collector = AmdSmiCollector::with_source(node.source.clone());
    collector.holder_roots.clone_from(&node.roots);
    collector.start_recording(crate::collect::host::hostname());
    let snap = rt.block_on(collector.sample());
    let mut rec = collector.take_recording().unwrap_or_default();
    if node.sim.is_none() {
        rec.add_partition_files(std::path::Path::new("/sys"));
    }
    if let Some(s) = &node.scenario {
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

fn sim(action: SimCmd) -> Result<u8> {
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
            for r in session::resume(&state)? {
                match r {
                    session::Resumed::Started(n) => out(&format!("{n}: started\n"))?,
                    session::Resumed::NoPlace(n) => out(&format!(
                        "{n}: not started: its partition does not exist in the current layout\n"
                    ))?,
                }
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
