//! The non-interactive faces of the executors: `partop kill` (plan printed, "yes" typed, then
//! executed and journaled; `--dry-run` prints only) and `partop journal`.

use crate::cli::{SignalArg, exit};
use crate::domain::kill::{Sig, Target};
use crate::exec::journal;
use crate::exec::kill::{KillEvent, KillJob, run};
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

/// Whether read-only is on (flag or config).
pub fn read_only(flag: bool) -> bool {
    flag || crate::ui::config::load(&crate::paths::config_dir(), None, None, false)
        .config
        .read_only
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
    if read_only(read_only_flag) {
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
    let mut problems = 0;
    for pid in pids {
        if *pid == std::process::id() || *pid <= 1 {
            say(&format!(
                "  pid {pid}: refused ({})\n",
                if *pid <= 1 {
                    "pid 1 is never signalled"
                } else {
                    "this is partop itself"
                }
            ))?;
            problems += 1;
        } else if let Some(t) = target_from_proc(proc_root, *pid) {
            targets.push(t);
        } else {
            say(&format!("  pid {pid}: no such process\n"))?;
            problems += 1;
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
        "then partop waits up to {grace}s for them to exit. Each pid is checked to still be the same process (start time) before the signal.\n"
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
        grace: Duration::from_secs_f64(grace.max(0.0)),
        proc_root: proc_root.into(),
        journal: journal::default_path(),
        simulated: false,
    };
    let mut lines = Vec::new();
    let mut alive = Vec::new();
    run(&job, |e| match e {
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
        KillEvent::JournalError(e) => lines.push(format!("warning: journal not written: {e}")),
    });
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

/// `partop journal`.
pub fn journal(json: bool) -> Result<u8> {
    let path = journal::default_path();
    let (entries, bad) = journal::read(&path)?;
    if entries.is_empty() && bad.is_empty() {
        say(&format!("the journal is empty ({})\n", path.display()))?;
        return Ok(exit::OK);
    }
    for e in &entries {
        if json {
            say(&(serde_json::to_string(e)? + "\n"))?;
        } else {
            let who = match (&e.who.sudo_user, &e.who.user) {
                (Some(s), Some(u)) => format!("{s} (as {u})"),
                (_, Some(u)) => u.clone(),
                _ => format!("uid {}", e.who.uid),
            };
            let ssh = e
                .who
                .ssh_connection
                .as_deref()
                .map(|s| format!(" from {}", s.split_whitespace().next().unwrap_or(s)))
                .unwrap_or_default();
            let sim = if e.simulated { " [simulated]" } else { "" };
            say(&format!(
                "{}  {}{ssh}@{}  {}{sim}  targets {}  outcome {}\n",
                e.at, who, e.host, e.action, e.targets, e.outcome
            ))?;
        }
    }
    for b in bad {
        say(&format!("{b}\n"))?;
    }
    Ok(exit::OK)
}
