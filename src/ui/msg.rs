//! What the reducer receives (keys, commands, samples, ticks, what effects report) and what it
//! asks for (effects, run by `ui::effect`).

use super::command::Command;
use super::model_ask::ModelAction;
use crate::domain::snapshot::Snapshot;
use ratatui::crossterm::event::{KeyEvent, MouseEvent};
use std::sync::Arc;

/// Everything the reducer can receive.
#[derive(Debug, Clone)]
pub enum Msg {
    /// A key press.
    Key(KeyEvent),
    /// A click or the wheel (presses and the wheel only: motion is dropped where it is read).
    Mouse(MouseEvent),
    /// A bound command (from a key, or a test).
    Command(Command),
    /// The terminal's new size.
    Resize(u16, u16),
    /// A new snapshot from the collector.
    Snapshot(Arc<Snapshot>),
    /// The clock (ages on screen).
    Tick(u64),
    /// Log records since the last frame.
    Log(Vec<super::logbuf::LogLine>),
    /// Progress of a kill job (the effect runner says the executor's events in these terms).
    Kill(KillProgress),
    /// A detached apply was started (what to follow), or could not be.
    ApplyStarted(Result<Box<crate::ui::stage::Progress>, String>),
    /// A detached MIG apply was started (its process, to notice it end), or could not be.
    MigApplyStarted(Result<Detached, String>),
    /// The journal, with an unfinished run nobody works on (its description), and how the
    /// followed apply ended when its process is gone without finishing.
    Journal(
        Vec<crate::domain::journal::Entry>,
        Vec<String>,
        Option<String>,
        Option<String>,
    ),
    /// This node's throughput store (for the placement advice), or why it could not be read.
    Throughput(Result<crate::domain::throughput::Store, String>),
    /// The pod a finding names, as the API server has it now (its UID), or why it cannot be
    /// evicted from here.
    PodLooked(Result<(super::evict_ask::PodAt, String), String>),
    /// How a confirmed eviction goes.
    Evict(super::evict_ask::EvictProgress),
}

/// Progress of a kill job, in the monitor's own terms: the UI's messages and state carry no
/// executor type; `ui::effect` converts the executor's events at the boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillProgress {
    /// The signal went out, or did not: per target, `None` when it was sent, else why not.
    Signalled {
        /// The signal.
        sig: crate::domain::kill::Sig,
        /// Per target pid.
        results: Vec<(u32, Option<String>)>,
    },
    /// A target exited.
    Exited(u32),
    /// The grace period is over (or every target exited); these are still alive.
    Done {
        /// The signal that was sent.
        sig: crate::domain::kill::Sig,
        /// Still alive.
        alive: Vec<u32>,
    },
    /// The journal could not be written after the signals went out.
    JournalError(String),
    /// Nothing was sent: the journal entry could not be written first.
    Refused(String),
}

/// A detached apply the monitor follows (AMD or MIG alike): its process, so an apply that ends
/// without closing its run in the journal is noticed, and its log, for the last line it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detached {
    /// The apply process.
    pub pid: u32,
    /// Its log file.
    pub log: String,
}

/// Side effects, performed by the app loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Leave.
    Quit,
    /// Ask the collector for a sample now.
    RefreshNow,
    /// Signal these processes (only ever from a confirmed dialog).
    Kill(Vec<crate::domain::kill::Target>, crate::domain::kill::Sig),
    /// Read the journal.
    LoadJournal,
    /// Start applying a confirmed plan (detached, so it survives a dropped terminal).
    Apply(Box<crate::domain::plan::Plan>),
    /// Re-read the node's layout (after a repartition).
    Rescan,
    /// Run the full /proc holder scan at the next sample (staging, the kill dialog): between
    /// full scans only ROCm processes are seen at once.
    ScanHolders,
    /// Run a confirmed model action (off the UI thread).
    Model(ModelAction),
    /// Start applying a confirmed MIG plan (detached).
    MigApply(Box<crate::domain::mig::MigPlan>),
    /// Read this node's throughput store (the advice shows what it measured).
    LoadThroughput,
    /// Read the pod a finding names from the API server (its UID, its node): the ask opens
    /// with what it says.
    LookupPod(super::evict_ask::PodAt),
    /// Evict this pod, whose UID the operator confirmed (only ever from a typed confirmation).
    Evict(super::evict_ask::PodAt, String),
}
