//! The non-interactive faces of the executors: `partop kill` (plan printed, "yes" typed, then
//! executed and journaled; `--dry-run` prints only) and `partop journal`.

use crate::cli::out::say;
use crate::cli::{SignalArg, exit};
use crate::domain::kill::{Sig, Target};
use crate::domain::snapshot::Process;
use crate::exec::journal;
use crate::exec::kill::{KillEvent, KillJob, run_pinned};
use crate::exec::signal::target_from_proc;
use anyhow::Result;
use std::path::Path;
use std::time::Duration;

/// One target as the prompt shows it; `shown` is the snapshot's process of the same identity
/// (its GPUs in the snapshot's own words: the prompt says what the screen says), `seen` whether
/// the node could be read at all.
fn describe(t: &Target, shown: Option<&Process>, seen: bool) -> String {
    let gpus = match shown {
        Some(p) => p.gpu_label(),
        None if seen => "not a GPU process on this node".to_string(),
        None => "GPUs not read".to_string(),
    };
    let vram = if t.vram_bytes > 0 {
        format!(" · {} GiB VRAM", crate::domain::text::gib(t.vram_bytes))
    } else {
        String::new()
    };
    let model = t
        .model
        .as_deref()
        .map(|m| format!(" · serves {m}"))
        .unwrap_or_default();
    let agent = t
        .agent
        .as_deref()
        .map(|a| format!(" · node agent: {a}"))
        .unwrap_or_default();
    format!(
        "  pid {:>7}  user {:<10}  {}  {gpus}{vram}{model}{agent}",
        t.pid,
        t.user.as_deref().unwrap_or("?"),
        t.name.as_deref().unwrap_or("?")
    )
}

/// What the node's sources say about `pids` (GPUs, VRAM, model), as the monitor's kill dialog
/// shows it; None when the node cannot be read (the kill still works from /proc alone).
fn seen(src: &crate::cli::SourceArgs) -> Option<Vec<Process>> {
    let node = crate::node::open(src).ok()?;
    let rt = crate::cli::out::runtime().ok()?;
    let mut c = node.collector();
    let snap = rt.block_on(c.sample());
    rt.shutdown_background();
    Some(snap.processes)
}

/// `partop kill`.
pub fn kill(
    src: &crate::cli::SourceArgs,
    pids: &[u32],
    signal: SignalArg,
    grace: f64,
    yes: bool,
    dry_run: bool,
    settings: &crate::config::Settings,
) -> Result<u8> {
    if settings.read_only {
        say(&crate::cli::out::read_only_refusal("signalled"))?;
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
    let known = seen(src);
    // The snapshot's process of the same identity (pid and start time), for each target.
    let shown = |t: &Target| -> Option<Process> {
        known
            .iter()
            .flatten()
            .find(|k| k.pid == t.pid && (k.start_ticks.is_none() || k.start_ticks == t.start_ticks))
            .cloned()
    };
    for pid in pids {
        let Some(mut t) = target_from_proc(proc_root, *pid) else {
            say(&format!("  pid {pid}: no such process\n"))?;
            problems += 1;
            continue;
        };
        // The GPU side as the node's sources see it, for the same process (its start time),
        // planned as the monitor's kill dialog plans it.
        if let Some(p) = shown(&t) {
            let one = crate::domain::Snapshot {
                processes: vec![p],
                ..crate::domain::Snapshot::default()
            };
            if let Some(k) = crate::domain::kill::plan(&one, &[t.pid], std::process::id())
                .targets
                .pop()
            {
                t.gpus = k.gpus;
                t.vram_bytes = k.vram_bytes;
                t.model = k.model;
                t.agent = t.agent.take().or(k.agent);
            }
        }
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
        say(&format!(
            "{}\n",
            describe(t, shown(t).as_ref(), known.is_some())
        ))?;
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
        simulated: src.sim.is_some() || src.sim_state.is_some(),
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
        // Each kind of run is checked with its own tool.
        let check = if run.kind == crate::domain::journal::RunKind::Mig {
            "nvidia-smi --query-gpu=index,mig.mode.current,mig.mode.pending --format=csv; nvidia-smi mig -lgi"
        } else {
            "amd-smi partition -c -m"
        };
        say(&format!(
            "run {id} is closed as abandoned; make sure the node is as you want it ({check})\n"
        ))?;
        return Ok(exit::OK);
    }
    let (entries, bad) = journal::read(&path)?;
    if entries.is_empty() && bad.is_empty() {
        say(&format!("the journal is empty ({})\n", path.display()))?;
        return Ok(exit::OK);
    }
    // The one fold of what was read: the words name each run's steps from it, and the
    // unfinished runs it leaves are said after the entries.
    let runs = crate::domain::journal::Runs::of(&entries);
    if json {
        // The raw entries, one JSON object a line, as journaled.
        for e in &entries {
            say(&(serde_json::to_string(e)? + "\n"))?;
        }
    } else {
        // In words: an apply's steps named and counted from 1, as its log counts them.
        for (e, sentence) in entries
            .iter()
            .zip(crate::report::journal::words(&entries, &runs))
        {
            let sim = if e.simulated { " [simulated]" } else { "" };
            say(&format!(
                "{}  {}@{}{sim}  {sentence}\n",
                crate::domain::text::escape_controls(&e.at),
                e.who.describe(),
                crate::domain::text::escape_controls(&e.host),
            ))?;
        }
    }
    for b in bad {
        #[expect(clippy::print_stderr, reason = "warnings of a one-shot command")]
        {
            eprintln!("partop: warning: {b}");
        }
    }
    for u in runs.unfinished(None) {
        say(&format!("\n{}\n", u.describe()))?;
    }
    Ok(exit::OK)
}
