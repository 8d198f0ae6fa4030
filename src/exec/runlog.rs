//! One apply run in the journal, shared by the AMD and MIG executors: the run starts with an
//! entry holding the whole confirmed plan, each step is journaled *before* it acts and again
//! with its result, and the run ends with `done`. Every step entry carries the run id, so a
//! resume continues exactly this run, and a journal that cannot be written stops the run
//! before the step acts (no journal, no action).

use super::journal::{self, Entry, JournalError};
use crate::domain::journal::{Close, RunEvent, RunKind, RunLine, StepKind};
use std::path::PathBuf;

/// A failed step: the tool's own text and what the operator can do next (AMD and MIG alike).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step {} ({key}) failed: {message}\nnext: {next}", idx + 1)]
pub struct StepFailed {
    /// Index.
    pub idx: usize,
    /// Its kind.
    pub key: StepKind,
    /// What happened (with the tool's text).
    pub message: String,
    /// What to do.
    pub next: String,
}

/// The journal of one run.
#[derive(Debug, Clone)]
pub struct RunLog {
    /// The journal file.
    pub path: PathBuf,
    /// `repartition` or `mig`.
    pub kind: &'static str,
    /// The run id.
    pub run: String,
    /// The plan's fingerprint.
    pub fingerprint: String,
    /// The node is simulated.
    pub simulated: bool,
    /// The node it changes (`journal::node_id`).
    pub node: String,
}

impl RunLog {
    /// Journals one event of this run (the one encoding, `domain::journal::RunLine`).
    fn append(&self, event: RunEvent) -> Result<(), JournalError> {
        let kind = RunKind::from_word(self.kind).ok_or_else(|| JournalError {
            path: self.path.display().to_string(),
            error: format!("{:?} is not a kind of run", self.kind),
        })?;
        let line = RunLine {
            kind,
            run: self.run.clone(),
            fingerprint: self.fingerprint.clone(),
            at: String::new(),
            event,
        };
        let (action, targets, outcome) = line.encode();
        journal::append(
            &self.path,
            &Entry::new(&action, self.simulated, targets, outcome),
        )
    }

    /// The run begins: the whole plan as confirmed, where its file is, who runs it.
    pub fn start(
        &self,
        plan: &serde_json::Value,
        plan_file: Option<&std::path::Path>,
        steps: usize,
    ) -> Result<(), JournalError> {
        self.start_resumable(plan, plan_file, steps, None)
    }

    /// As [`Self::start`], with the exact command that resumes this run (every option it was
    /// started with), which the journal, the footer and every failure print.
    pub fn start_resumable(
        &self,
        plan: &serde_json::Value,
        plan_file: Option<&std::path::Path>,
        steps: usize,
        resume: Option<&str>,
    ) -> Result<(), JournalError> {
        let file = plan_file.map(|p| {
            std::fs::canonicalize(p)
                .unwrap_or_else(|_| p.to_path_buf())
                .display()
                .to_string()
        });
        self.append(RunEvent::Started {
            plan: plan.clone(),
            plan_file: file,
            pid: Some(std::process::id()),
            node: Some(self.node.clone()),
            resume: resume.map(str::to_string),
            steps: u64::try_from(steps).ok(),
        })
    }

    /// A resumed run goes on (same run id).
    pub fn resumed(&self, from: usize) -> Result<(), JournalError> {
        self.append(RunEvent::Resumed {
            pid: Some(std::process::id()),
            from_step: u64::try_from(from).unwrap_or(u64::MAX),
        })
    }

    /// Before step `idx` acts.
    pub fn step_begin(&self, idx: usize, key: &StepKind) -> Result<(), JournalError> {
        self.step_begin_limited(idx, key, None)
    }

    /// Before step `idx` acts, with how long it may take (what progress shows against).
    pub fn step_begin_limited(
        &self,
        idx: usize,
        key: &StepKind,
        limit_secs: Option<u32>,
    ) -> Result<(), JournalError> {
        self.append(RunEvent::StepBegun {
            idx,
            key: (*key).into(),
            limit_secs,
        })
    }

    /// After step `idx`.
    pub fn step_end(
        &self,
        idx: usize,
        key: &StepKind,
        ok: bool,
        detail: &str,
    ) -> Result<(), JournalError> {
        self.append(RunEvent::StepEnded {
            idx,
            key: (*key).into(),
            ok,
            detail: detail.into(),
        })
    }

    /// The run finished.
    pub fn done(&self) -> Result<(), JournalError> {
        self.append(RunEvent::Closed(Close::Done))
    }
}

/// Closes an unfinished run without finishing it (the operator restored the node by hand).
pub fn abandon(
    path: &std::path::Path,
    run: &journal::Run,
    simulated: bool,
) -> Result<(), JournalError> {
    let (action, targets, outcome) = RunLine {
        kind: run.kind,
        run: run.run.clone(),
        fingerprint: run.fingerprint.clone(),
        at: String::new(),
        event: RunEvent::Closed(Close::Abandoned),
    }
    .encode();
    journal::append(path, &Entry::new(&action, simulated, targets, outcome))
}

/// Journals one line of fleet rollout `rollout` (a change whose steps are nodes), in the one
/// encoding (`domain::journal::RolloutEvent`). Journal first: an error stops the rollout
/// before the next node.
pub fn rollout(
    path: &std::path::Path,
    rollout: &str,
    event: &crate::domain::journal::RolloutEvent,
) -> Result<(), JournalError> {
    let (action, targets, outcome) = event.encode(rollout);
    journal::append(path, &Entry::new(action, false, targets, outcome))
}

/// Journals one line of a Findings eviction (the intent before the Eviction is sent, the
/// result after), in the one encoding (`domain::journal::EvictEvent`). Journal first: an
/// error means the Eviction is not sent.
pub fn evicted(
    path: &std::path::Path,
    event: &crate::domain::journal::EvictEvent,
    simulated: bool,
) -> Result<(), JournalError> {
    let (action, targets, outcome) = event.encode();
    journal::append(path, &Entry::new(&action, simulated, targets, outcome))
}

/// Journals one line of a served model's start or stop, in the one encoding
/// (`domain::journal::ModelEvent`). Journal first: an error on the intent means nothing is
/// started or stopped.
pub fn model(
    path: &std::path::Path,
    event: &crate::domain::journal::ModelEvent,
    simulated: bool,
) -> Result<(), JournalError> {
    let (action, targets, outcome) = event.encode();
    journal::append(path, &Entry::new(action, simulated, targets, outcome))
}
