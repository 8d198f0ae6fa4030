//! The non-interactive faces of the executors: `partop kill` (plan printed, "yes" typed, then
//! executed and journaled; `--dry-run` prints only) and `partop journal`.

use crate::cli::out::say;
use crate::cli::{SignalArg, exit};
use crate::domain::kill::{Sig, Target};
use crate::exec::journal;
use crate::exec::kill::{KillEvent, KillJob, run_pinned};
use crate::exec::signal::target_from_proc;
use anyhow::Result;
use std::path::Path;
use std::time::Duration;

fn describe(t: &Target) -> String {
    format!(
        "  pid {:>7}  user {:<10}  {}",
        t.pid,
        t.user.as_deref().unwrap_or("?"),
        t.name.as_deref().unwrap_or("?")
    )
}

/// `partop kill`.
pub fn kill(
    pids: &[u32],
    signal: SignalArg,
    grace: f64,
    yes: bool,
    dry_run: bool,
    settings: &crate::config::Settings,
) -> Result<u8> {
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
    if !yes
        && !crate::cli::out::confirm(
            &format!(
                "Type yes to send {} to {} process(es): ",
                sig.name(),
                targets.len()
            ),
            "yes",
        )?
    {
        say("cancelled: nothing sent\n")?;
        return Ok(exit::FAILED);
    }
    let job = KillJob {
        targets,
        sig,
        grace: Duration::from_secs_f64(grace),
        proc_root: proc_root.into(),
        journal: settings.journal.clone(),
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
pub fn journal(
    json: bool,
    abandon: Option<&str>,
    settings: &crate::config::Settings,
) -> Result<u8> {
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
