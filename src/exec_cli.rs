//! The non-interactive faces of the executors: `partop kill` (plan printed, "yes" typed, then
//! executed and journaled; `--dry-run` prints only) and `partop journal`.

use crate::cli::{SignalArg, exit};
use crate::domain::kill::{Sig, Target};
use crate::exec::journal;
use crate::exec::kill::{KillEvent, KillJob, run_pinned};
use crate::exec::signal::target_from_proc;
use anyhow::Result;
use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

fn say(s: &str) -> Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_all(s.as_bytes())?;
    o.flush()?;
    Ok(())
}

fn describe(t: &Target) -> String {
    format!(
        "  pid {:>7}  user {:<10}  {}",
        t.pid,
        t.user.as_deref().unwrap_or("?"),
        t.name.as_deref().unwrap_or("?")
    )
}

/// What every command needs from the configuration, resolved once.
#[derive(Debug, Clone)]
pub struct Settings {
    /// No mutation at all (flag or config).
    pub read_only: bool,
    /// The audit journal.
    pub journal: std::path::PathBuf,
    /// The whole config.toml.
    pub config: crate::ui::config::Config,
}

/// Resolves the settings from the flag and `config.toml`. A config file that cannot be read
/// or parsed, or holds an absurd value, is an error for every command: a broken file must
/// never silently turn read-only off or move the journal.
pub fn settings(read_only_flag: bool) -> Result<Settings> {
    let path = crate::paths::config_dir().join("config.toml");
    let config = match std::fs::read_to_string(&path) {
        Ok(text) => {
            let c: crate::ui::config::Config = toml::from_str(&text).map_err(|e| {
                anyhow::anyhow!(
                    "{}\nfix it (`partop check-config` lists every problem) or move it away; partop does not run on a configuration it cannot read",
                    crate::ui::config::ConfigError::from_toml(&path.display().to_string(), &text, &e)
                )
            })?;
            c.validate(&path.display().to_string())
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            c
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => crate::ui::config::Config::default(),
        Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
    };
    Ok(Settings {
        read_only: read_only_flag || config.read_only,
        journal: config.journal.clone().unwrap_or_else(journal::default_path),
        config,
    })
}

/// `partop kill`.
pub fn kill(
    pids: &[u32],
    signal: SignalArg,
    grace: f64,
    yes: bool,
    dry_run: bool,
    read_only_flag: bool,
) -> Result<u8> {
    let settings = settings(read_only_flag)?;
    if settings.read_only {
        say(
            "partop is read-only (--read-only, or read_only = true in config.toml): nothing is signalled\n",
        )?;
        return Ok(exit::USAGE);
    }
    let proc_root = Path::new("/proc");
    let sig = match signal {
        SignalArg::Term => Sig::Term,
        SignalArg::Kill => Sig::Kill,
    };
    let mut targets = Vec::new();
    let mut pins = Vec::new();
    let mut problems = 0;
    for pid in pids {
        let Some(t) = target_from_proc(proc_root, *pid) else {
            say(&format!("  pid {pid}: no such process\n"))?;
            problems += 1;
            continue;
        };
        // Pinned now, while it is the process described below: the signal after the
        // confirmation goes to this process or to none.
        match crate::exec::signal::pin(proc_root, &t) {
            Ok(p) => {
                targets.push(t);
                pins.push(Ok(p));
            }
            Err(o) => {
                say(&format!("  {}\n", o.explain(*pid)))?;
                problems += 1;
            }
        }
    }
    if targets.is_empty() {
        return Ok(exit::FAILED);
    }
    say(&format!("{} will be sent to:\n", sig.name()))?;
    for t in &targets {
        say(&format!("{}\n", describe(t)))?;
    }
    say(&format!(
        "then partop waits up to {grace}s for them to exit. Each process is held by a pidfd from now on, so a pid reused meanwhile is never signalled.\n"
    ))?;
    if dry_run {
        say("dry run: nothing sent\n")?;
        return Ok(exit::OK);
    }
    if !yes {
        say(&format!(
            "Type yes to send {} to {} process(es): ",
            sig.name(),
            targets.len()
        ))?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if answer.trim() != "yes" {
            say("cancelled: nothing sent\n")?;
            return Ok(exit::FAILED);
        }
    }
    let job = KillJob {
        targets,
        sig,
        grace: Duration::from_secs_f64(grace),
        proc_root: proc_root.into(),
        journal: settings.journal,
        simulated: false,
    };
    let mut lines = Vec::new();
    let mut alive = Vec::new();
    let r = run_pinned(&job, pins, |e| match e {
        KillEvent::Signalled { results, .. } => {
            for (pid, o) in results {
                if o != crate::exec::signal::Outcome::Sent {
                    problems += 1;
                }
                lines.push(o.explain(pid));
            }
        }
        KillEvent::Exited(pid) => lines.push(format!("pid {pid}: exited")),
        KillEvent::Done { alive: a, .. } => alive = a,
        KillEvent::JournalError(e) => lines.push(format!("warning: {e}")),
        KillEvent::Refused(_) => {}
    });
    if let Err(e) = r {
        anyhow::bail!("{e}");
    }
    for l in lines {
        say(&format!("{l}\n"))?;
    }
    if !alive.is_empty() {
        say(&format!(
            "still alive after {grace}s: {:?}. To end them: partop kill --signal kill {}\n",
            alive,
            alive
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        ))?;
        problems += 1;
    }
    Ok(if problems == 0 {
        exit::OK
    } else {
        exit::FAILED
    })
}

/// `partop journal`, `partop journal --abandon RUN`.
pub fn journal(json: bool, abandon: Option<&str>, read_only_flag: bool) -> Result<u8> {
    let settings = settings(read_only_flag)?;
    let path = settings.journal.clone();
    if let Some(id) = abandon {
        if settings.read_only {
            say("partop is read-only: nothing is written\n")?;
            return Ok(exit::USAGE);
        }
        let Some(run) = journal::unfinished(&path).into_iter().find(|r| r.run == id) else {
            anyhow::bail!("no unfinished run {id} in {}", path.display());
        };
        crate::exec::runlog::abandon(&path, &run, false)?;
        say(&format!(
            "run {id} is closed as abandoned; make sure the node is as you want it (amd-smi partition -c -m)\n"
        ))?;
        return Ok(exit::OK);
    }
    let (entries, bad) = journal::read(&path)?;
    if entries.is_empty() && bad.is_empty() {
        say(&format!("the journal is empty ({})\n", path.display()))?;
        return Ok(exit::OK);
    }
    for e in &entries {
        if json {
            say(&(serde_json::to_string(e)? + "\n"))?;
        } else {
            let sim = if e.simulated { " [simulated]" } else { "" };
            say(&format!(
                "{}  {}@{}  {}{sim}  targets {}  outcome {}\n",
                e.at,
                e.who.describe(),
                crate::domain::text::escape_controls(&e.host),
                crate::domain::text::escape_controls(&e.action),
                e.targets,
                e.outcome
            ))?;
        }
    }
    for b in bad {
        #[expect(clippy::print_stderr, reason = "warnings of a one-shot command")]
        {
            eprintln!("partop: warning: {b}");
        }
    }
    for u in journal::unfinished(&path) {
        say(&format!("\n{}\n", u.describe()))?;
    }
    Ok(exit::OK)
}
