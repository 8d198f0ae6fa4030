//! The dispatcher: resolves the settings once, then runs the monitor or a one-shot command
//! (each in its own file of `src/cli/`).
//! Errors come back as values; only `main.rs` turns them into exit codes.

use crate::cli::out::out;
use crate::cli::{Cli, Cmd, exit};
use crate::config::Settings;
use anyhow::Result;
use clap::CommandFactory;

/// Runs the command line. Returns the exit code.
pub fn main(mut cli: Cli) -> Result<u8> {
    pin_state_paths(&mut cli)?;
    // A configuration that cannot be read stops every command (never a silent default: a
    // `read_only = true` that does not parse must not let `sim stop` kill a workload); only
    // check-config, whose job is to report it, runs on it. A recording is looked at, never
    // acted on: replaying one is read-only for every command (kill, apply, models, MIG, the
    // simulator's mutations), resolved here once.
    let read_only =
        cli.read_only || cli.source.replay.is_some() || cli.source.nvidia_replay.is_some();
    let settings = if matches!(cli.command, Some(Cmd::CheckConfig)) {
        Settings::flags_only(read_only, cli.journal.as_deref())
    } else {
        crate::config::settings::resolve(read_only, cli.journal.as_deref())?
    };
    let settings = &settings;
    match cli.command {
        None => crate::cli::monitor::monitor(&cli, settings),
        Some(Cmd::Serve(ref a)) => super::serve::serve(&cli, a, settings),
        Some(Cmd::Stream { summary }) => super::stream::stream(&cli, summary, settings),
        Some(Cmd::Fleet(ref a)) => super::fleet::fleet(&cli, a, settings),
        Some(Cmd::Snapshot { json }) => super::snapshot::snapshot(&cli.source, json),
        Some(Cmd::Sim { action }) => super::sim::sim(action, settings.read_only),
        Some(Cmd::Record { out: path }) => super::record::record(&cli.source, &path),
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
            dcm,
        }) => super::plan::plan(&cli.source, gpus, compute, memory, json, dcm, settings),
        Some(Cmd::Apply(a)) => super::apply::apply(&cli.source, &a, settings),
        Some(Cmd::Kill {
            pids,
            signal,
            grace,
            yes,
            dry_run,
        }) => crate::cli::kill::kill(&cli.source, &pids, signal, grace, yes, dry_run, settings),
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
                    &settings.config,
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

/// A simulated node's state file is named once, absolutely, with its directory's real path:
/// its device files (`STATE.dev/kfd`) are recognised in holders' fd links, which the kernel
/// gives as real absolute paths, so a relative `--sim-state n.json` saw no holder and `plan`
/// said nothing held the GPUs.
fn pin_state_paths(cli: &mut Cli) -> Result<()> {
    if let Some(p) = cli.source.sim_state.as_mut() {
        *p = pinned(p)?;
    }
    if let Some(Cmd::Sim { action }) = cli.command.as_mut()
        && let Some(p) = action.state_mut()
    {
        *p = pinned(p)?;
    }
    Ok(())
}

/// `path` with its directory resolved (it must exist) and its own name kept (the file may be
/// about to be created, or be a link partop refuses later with its own words).
fn pinned(path: &std::path::Path) -> Result<std::path::PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        crate::cli::exit::Usage(format!(
            "{}: a state file must name a file, not a directory",
            path.display()
        ))
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    match std::fs::canonicalize(dir) {
        Ok(d) => Ok(d.join(name)),
        // `sim start` makes a missing directory: absolute is all that can be said yet.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(std::path::absolute(path)?),
        Err(e) => Err(crate::cli::exit::Usage(format!(
            "{}: its directory {} cannot be resolved: {e}",
            path.display(),
            dir.display()
        ))
        .into()),
    }
}
