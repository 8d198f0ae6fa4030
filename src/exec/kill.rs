//! The kill job: signal every target (each checked first), journal it, then follow them through
//! the grace period and report who is still alive. The caller decides whether SIGKILL follows
//! (the UI asks for a second confirmation).

use super::journal::{self, Entry};
use super::signal::{Outcome, alive, send};
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
    /// The journal could not be written (the action still happened).
    JournalError(String),
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

/// Runs the job, reporting through `emit`. Blocks for up to the grace period.
pub fn run(job: &KillJob, mut emit: impl FnMut(KillEvent)) {
    let results: Vec<(u32, Outcome)> = job
        .targets
        .iter()
        .map(|t| (t.pid, send(&job.proc_root, t, job.sig)))
        .collect();
    let action = match job.sig {
        Sig::Term => "kill.sigterm",
        Sig::Kill => "kill.sigkill",
    };
    let outcome: serde_json::Map<String, serde_json::Value> = results
        .iter()
        .map(|(p, o)| (p.to_string(), serde_json::to_value(o).unwrap_or_default()))
        .collect();
    let entry = Entry::new(
        action,
        job.simulated,
        json!(job.targets),
        serde_json::Value::Object(outcome),
    );
    if let Err(e) = journal::append(&job.journal, &entry) {
        emit(KillEvent::JournalError(format!(
            "{}: {e}",
            job.journal.display()
        )));
    }
    emit(KillEvent::Signalled {
        sig: job.sig,
        results: results.clone(),
    });
    let mut waiting: Vec<&Target> = job
        .targets
        .iter()
        .filter(|t| {
            results
                .iter()
                .any(|(p, o)| *p == t.pid && *o == Outcome::Sent)
        })
        .collect();
    let end = Instant::now() + job.grace;
    while !waiting.is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        waiting.retain(|t| {
            let a = alive(&job.proc_root, t);
            if !a {
                emit(KillEvent::Exited(t.pid));
            }
            a
        });
    }
    let still: Vec<u32> = waiting.iter().map(|t| t.pid).collect();
    let done = Entry::new(
        &format!("{action}.result"),
        job.simulated,
        json!(job.targets.iter().map(|t| t.pid).collect::<Vec<_>>()),
        json!({"still_alive": still, "waited_ms": job.grace.as_millis()}),
    );
    if let Err(e) = journal::append(&job.journal, &done) {
        emit(KillEvent::JournalError(format!(
            "{}: {e}",
            job.journal.display()
        )));
    }
    emit(KillEvent::Done {
        sig: job.sig,
        alive: still,
    });
}
