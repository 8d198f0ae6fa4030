//! The kill job: signal every target (each checked first), journal it, then follow them through
//! the grace period and report who is still alive. The caller decides whether SIGKILL follows
//! (the UI asks for a second confirmation).

use super::journal::{self, Entry};
use super::signal::{Outcome, Pinned, pin};
use crate::domain::kill::{Sig, Target};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Progress of a kill job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KillEvent {
    /// The signal went out (or did not), per target.
    Signalled {
        /// The signal.
        sig: Sig,
        /// Per target.
        results: Vec<(u32, Outcome)>,
    },
    /// A target exited.
    Exited(u32),
    /// The grace period is over (or every target exited); these are still alive.
    Done {
        /// The signal that was sent.
        sig: Sig,
        /// Still alive.
        alive: Vec<u32>,
    },
    /// The journal could not be written after the signals went out.
    JournalError(String),
    /// Nothing was sent: the journal entry could not be written first.
    Refused(String),
}

/// Where and how.
#[derive(Clone, Debug)]
pub struct KillJob {
    /// Targets.
    pub targets: Vec<Target>,
    /// Signal.
    pub sig: Sig,
    /// How long to wait for them to exit.
    pub grace: Duration,
    /// `/proc`.
    pub proc_root: PathBuf,
    /// Journal file.
    pub journal: PathBuf,
    /// The node is simulated (noted in the journal).
    pub simulated: bool,
}

/// Runs the job, reporting through `emit`. Blocks for up to the grace period. Pins every target
/// first (see [`super::signal::pin`]); use [`run_pinned`] to keep pins taken earlier.
pub fn run(job: &KillJob, emit: impl FnMut(KillEvent)) -> Result<(), journal::JournalError> {
    let pins = job.targets.iter().map(|t| pin(&job.proc_root, t)).collect();
    run_pinned(job, pins, emit)
}

/// Runs the job on targets pinned earlier (one result per target of `job`, in order). Journal
/// first: the entry naming the signal and every target is written and fsynced before the
/// first signal; if it cannot be written nothing is sent and the error is returned.
pub fn run_pinned(
    job: &KillJob,
    pins: Vec<Result<Pinned, Outcome>>,
    mut emit: impl FnMut(KillEvent),
) -> Result<(), journal::JournalError> {
    let action = match job.sig {
        Sig::Term => "kill.sigterm",
        Sig::Kill => "kill.sigkill",
    };
    let intent = Entry::new(
        action,
        job.simulated,
        json!(job.targets),
        json!({"state": "sending"}),
    );
    if let Err(e) = journal::append(&job.journal, &intent) {
        emit(KillEvent::Refused(e.to_string()));
        return Err(e);
    }
    let results: Vec<(u32, Outcome)> = job
        .targets
        .iter()
        .zip(&pins)
        .map(|(t, p)| {
            (
                t.pid,
                match p {
                    Ok(p) => p.send(job.sig),
                    Err(o) => o.clone(),
                },
            )
        })
        .collect();
    let outcome: serde_json::Map<String, serde_json::Value> = results
        .iter()
        .map(|(p, o)| (p.to_string(), serde_json::to_value(o).unwrap_or_default()))
        .collect();
    let sent = Entry::new(
        &format!("{action}.sent"),
        job.simulated,
        json!(job.targets.iter().map(|t| t.pid).collect::<Vec<_>>()),
        serde_json::Value::Object(outcome),
    );
    if let Err(e) = journal::append(&job.journal, &sent) {
        emit(KillEvent::JournalError(e.to_string()));
    }
    emit(KillEvent::Signalled {
        sig: job.sig,
        results: results.clone(),
    });
    let mut waiting: Vec<&Pinned> = pins
        .iter()
        .zip(&results)
        .filter(|(_, (_, o))| *o == Outcome::Sent)
        .filter_map(|(p, _)| p.as_ref().ok())
        .collect();
    let start = Instant::now();
    let end = start + job.grace;
    while !waiting.is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
        waiting.retain(|p| {
            let gone = p.exited();
            if gone {
                emit(KillEvent::Exited(p.target.pid));
            }
            !gone
        });
    }
    let still: Vec<u32> = waiting.iter().map(|p| p.target.pid).collect();
    let done = Entry::new(
        &format!("{action}.result"),
        job.simulated,
        json!(job.targets.iter().map(|t| t.pid).collect::<Vec<_>>()),
        json!({"still_alive": still, "waited_ms": start.elapsed().as_millis()}),
    );
    if let Err(e) = journal::append(&job.journal, &done) {
        emit(KillEvent::JournalError(e.to_string()));
    }
    emit(KillEvent::Done {
        sig: job.sig,
        alive: still,
    });
    Ok(())
}

/// What [`term_then_kill`] ended with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stopped {
    /// Still alive after SIGTERM and the grace period.
    pub after_term: Vec<u32>,
    /// Still alive after SIGKILL (when it was allowed and sent).
    pub after_kill: Vec<u32>,
}

/// Stops `job.targets` for a drain: every target pinned once, SIGTERM, the grace period, then
/// SIGKILL through the same pins to those still alive when `kill_after` allows it (a pid
/// reused during the grace period is never hit). Journaled first, as every kill.
pub fn term_then_kill(
    job: &KillJob,
    kill_after: bool,
    mut emit: impl FnMut(KillEvent),
) -> Result<Stopped, journal::JournalError> {
    let pins: Vec<Result<Pinned, Outcome>> =
        job.targets.iter().map(|t| pin(&job.proc_root, t)).collect();
    let kept: Vec<Option<Pinned>> = pins
        .iter()
        .map(|p| p.as_ref().ok().and_then(|p| p.try_clone().ok()))
        .collect();
    let term = KillJob {
        sig: Sig::Term,
        ..job.clone()
    };
    let mut out = Stopped::default();
    run_pinned(&term, pins, |e| {
        if let KillEvent::Done { alive, .. } = &e {
            out.after_term.clone_from(alive);
        }
        emit(e);
    })?;
    if out.after_term.is_empty() || !kill_after {
        return Ok(out);
    }
    let mut targets = Vec::new();
    let mut again = Vec::new();
    for (t, p) in job.targets.iter().zip(kept) {
        if out.after_term.contains(&t.pid)
            && let Some(p) = p
        {
            targets.push(t.clone());
            again.push(Ok(p));
        }
    }
    let kill = KillJob {
        targets,
        sig: Sig::Kill,
        grace: Duration::from_secs(2),
        ..job.clone()
    };
    run_pinned(&kill, again, |e| {
        if let KillEvent::Done { alive, .. } = &e {
            out.after_kill.clone_from(alive);
        }
        emit(e);
    })?;
    Ok(out)
}
