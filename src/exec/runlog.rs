//! One apply run in the journal, shared by the AMD and MIG executors: the run starts with an
//! entry holding the whole confirmed plan, each step is journaled *before* it acts and again
//! with its result, and the run ends with `done`. Every step entry carries the run id, so a
//! resume continues exactly this run, and a journal that cannot be written stops the run
//! before the step acts (no journal, no action).

use super::journal::{self, Entry, JournalError};
use serde_json::json;
use std::path::PathBuf;

/// A failed step: the tool's own text and what the operator can do next (AMD and MIG alike).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step {} ({key}) failed: {message}\nnext: {next}", idx + 1)]
pub struct StepFailed {
    /// Index.
    pub idx: usize,
    /// Step key.
    pub key: String,
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
    fn append(
        &self,
        what: &str,
        mut targets: serde_json::Value,
        outcome: serde_json::Value,
    ) -> Result<(), JournalError> {
        targets["run"] = json!(self.run);
        targets["fingerprint"] = json!(self.fingerprint);
        journal::append(
            &self.path,
            &Entry::new(
                &format!("{}.{what}", self.kind),
                self.simulated,
                targets,
                outcome,
            ),
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

    /// The run begins, with the exact command that continues it (what `partop journal`, an
    /// apply's refusal and the monitor's footer then print).
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
        self.append(
            "start",
            json!({"plan": plan, "plan_file": file, "pid": std::process::id(), "node": self.node, "resume": resume}),
            json!({"steps": steps}),
        )
    }

    /// A resumed run goes on (same run id).
    pub fn resumed(&self, from: usize) -> Result<(), JournalError> {
        self.append(
            "resume",
            json!({"pid": std::process::id()}),
            json!({"from_step": from}),
        )
    }

    /// Before step `idx` acts.
    pub fn step_begin(&self, idx: usize, key: &str) -> Result<(), JournalError> {
        self.append(
            "step",
            json!({"step": idx, "key": key}),
            json!({"state": "begin"}),
        )
    }

    /// After step `idx`.
    pub fn step_end(
        &self,
        idx: usize,
        key: &str,
        ok: bool,
        detail: &str,
    ) -> Result<(), JournalError> {
        self.append(
            "step",
            json!({"step": idx, "key": key}),
            json!({"ok": ok, "detail": detail}),
        )
    }

    /// The run finished.
    pub fn done(&self) -> Result<(), JournalError> {
        self.append("done", json!({}), json!({"ok": true}))
    }
}

/// Closes an unfinished run without finishing it (the operator restored the node by hand).
pub fn abandon(
    path: &std::path::Path,
    run: &journal::Run,
    simulated: bool,
) -> Result<(), JournalError> {
    journal::append(
        path,
        &Entry::new(
            &format!("{}.abandoned", run.kind),
            simulated,
            json!({"run": run.run, "fingerprint": run.fingerprint}),
            json!({"ok": true}),
        ),
    )
}
