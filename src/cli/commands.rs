//! The dispatcher: resolves the settings once, then runs the monitor or a one-shot command
//! (each in its own file of `src/cli/`).
//! Errors come back as values; only `main.rs` turns them into exit codes.

use crate::cli::out::out;
use crate::cli::{Cli, Cmd, exit};
use crate::config::Settings;
use anyhow::Result;
use clap::CommandFactory;

/// Runs the command line. Returns the exit code.
pub fn main(cli: Cli) -> Result<u8> {
    // A configuration that cannot be read stops every command that acts or reports (never a
    // silent default); check-config reports it, and the simulator's own tools do not read it.
    // A recording is looked at, never acted on: replaying one is read-only for every command
    // (kill, apply, models, MIG), resolved here once.
    let read_only =
        cli.read_only || cli.source.replay.is_some() || cli.source.nvidia_replay.is_some();
    let settings = if matches!(
        cli.command,
        Some(Cmd::CheckConfig | Cmd::Completions { .. } | Cmd::Man | Cmd::Sim { .. })
    ) {
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
        }) => super::plan::plan(&cli.source, gpus, compute, memory, json, settings),
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
