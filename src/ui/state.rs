//! The UI state: what the monitor knows and shows, and small accessors over it. The reducer
//! that changes it is `ui::update` (re-exported here as `update`); the rows derived from it
//! (sorted, filtered, grouped) are `ui::derive`'s. Pure: no I/O, no drawing.

use super::keymap::{Key, Keymap};
use crate::domain::findings::{Finding, Thresholds, Tracker};
use crate::domain::history::History;
use crate::domain::served::model_of;
use crate::domain::snapshot::{Process, Snapshot};
use std::sync::Arc;

pub use super::model_ask::{ModelAction, ModelAsk};
pub use super::msg::{Effect, Msg};
pub use super::rows::{Col, DetailTarget, GpuUse, Group, ProcRow, SortKey, columns};
pub use super::update::update;
pub use super::views::View;

/// The UI state.
#[derive(Debug)]
pub struct State {
    /// Latest snapshot.
    pub snapshot: Option<Arc<Snapshot>>,
    /// Busy history for sparklines.
    pub history: History,
    /// Findings tracker.
    pub tracker: Tracker,
    /// Current findings.
    pub findings: Vec<Finding>,
    /// Active view.
    pub view: View,
    /// Where Detail returns to.
    pub back: View,
    /// Help overlay open.
    pub help: bool,
    /// The filter text (`/`), of the list view `filter_view`.
    pub filter: String,
    /// The view the filter was typed in (it filters only that view's list).
    pub filter_view: View,
    /// Derived: the rows of `filter_view`'s list the filter keeps (indices into the whole
    /// list; unused for Processes, whose derived rows are filtered).
    pub shown: Vec<usize>,
    /// The filter is being typed.
    pub editing_filter: bool,
    /// Sort column.
    pub sort: SortKey,
    /// Descending.
    pub sort_desc: bool,
    /// Grouping.
    pub group: Group,
    /// Selected logical GPU (index in amd-smi order).
    pub gpu_sel: usize,
    /// Selected process row.
    pub proc_sel: usize,
    /// Selected finding.
    pub finding_sel: usize,
    /// Detail target.
    pub detail: Option<DetailTarget>,
    /// Derived process rows.
    pub rows: Vec<ProcRow>,
    /// Derived per logical GPU (by amd-smi index): what runs on it.
    pub gpu_labels: std::collections::HashMap<u32, GpuUse>,
    /// Keys of an unfinished sequence.
    pub pending: Vec<Key>,
    /// Wall clock for ages, ms since epoch.
    pub now_ms: u64,
    /// Terminal size.
    pub size: (u16, u16),
    /// Resolved keymap.
    pub keymap: Keymap,
    /// No mutating commands.
    pub read_only: bool,
    /// Looking at a recording (`--replay`): its host and time; every mutation is gone.
    pub replay: Option<String>,
    /// An apply run that did not finish: what to say and the command that continues it.
    pub unfinished: Option<String>,
    /// When the journal was last read (ms).
    pub journal_read_ms: u64,
    /// The simulated scenario, when simulated.
    pub scenario: Option<String>,
    /// Refresh interval (to call data late).
    pub refresh_ms: u64,
    /// Tagged processes (kill acts on them).
    pub tagged: std::collections::BTreeSet<u32>,
    /// The kill dialog, when open.
    pub dialog: Option<super::dialog::KillDialog>,
    /// SIGTERM grace period, ms.
    pub grace_ms: u64,
    /// partop's own pid (never a target).
    pub own_pid: u32,
    /// The journal as last read, newest first, and unreadable lines.
    pub journal: (Vec<crate::domain::journal::Entry>, Vec<String>),
    /// The one fold of the journal as written (its runs, which name each step of the list).
    pub journal_runs: crate::domain::journal::Runs,
    /// Selected journal entry.
    pub journal_sel: usize,
    /// The selected journal entry has the whole view (Enter; Esc goes back).
    pub journal_open: bool,
    /// A partition change being staged.
    pub staging: Option<super::stage::Staging>,
    /// A repartition running (detached), followed from the journal.
    pub applying: Option<super::stage::Progress>,
    /// A MIG apply running (detached): its plan's fingerprint, followed from the journal.
    pub mig_applying: Option<String>,
    /// The process of that MIG apply, once it started.
    pub mig_process: Option<super::msg::Detached>,
    /// Tagged physical GPUs (BDF): staging starts with them.
    pub tagged_gpus: std::collections::BTreeSet<String>,
    /// Seconds a driver reload takes, for plans (120 unless the node says otherwise).
    pub reload_secs: u32,
    /// Why the last command did nothing, and when (shown in the footer for a few seconds).
    pub notice: Option<(String, u64)>,
    /// Why no partition may be changed from here, when none may (`--source sysfs`: amd-smi,
    /// which makes the change, is not run); staging says it instead of opening.
    pub no_partition_change: Option<String>,
    /// A MIG layout being staged (NVIDIA GPUs).
    pub mig_staging: Option<super::mig_stage::MigStaging>,
    /// The nvidia-smi that MIG commands name.
    pub nvidia_smi: String,
    /// Selected model row.
    pub model_sel: usize,
    /// A model action being confirmed.
    pub model_ask: Option<ModelAsk>,
    /// A pod's eviction being confirmed (the Findings view's action).
    pub evict_ask: Option<super::evict_ask::EvictAsk>,
    /// The last eviction from the Findings view: how it goes or how it ended (shown there).
    pub eviction: Option<String>,
    /// A theme or keymap that could not be used: said on screen as long as it lasts (the
    /// default is in use instead).
    pub theme_notice: Option<String>,
    /// The Log view's lines, oldest first (bounded).
    pub log: std::collections::VecDeque<super::logbuf::LogLine>,
    /// Offsets of the panes that scroll.
    pub scroll: super::scroll::Scrolls,
    /// Opened from the fleet view on a remote node's stream: Esc with nothing to close goes
    /// back to the fleet (and the view is read only: the node is not this machine).
    pub embedded: bool,
    /// Quitting stops the simulated node this partop started (`--sim`): the footer says so.
    pub stops_sim: bool,
    /// Where the last frame drew the tabs and the list's rows (for the mouse).
    pub hits: super::hit::Hits,
}

/// Log lines kept for the Log view.
pub const LOG_KEEP: usize = 5_000;

impl State {
    /// The detached apply the monitor follows: an unfinished repartition's process, else a
    /// MIG apply's.
    pub fn followed(&self) -> Option<super::msg::Detached> {
        let amd = self
            .applying
            .as_ref()
            .filter(|p| p.finished.is_none())
            .map(|p| {
                p.pid.map(|pid| super::msg::Detached {
                    pid,
                    log: p.log.clone(),
                })
            });
        match amd {
            Some(d) => d,
            None => self.mig_process.clone(),
        }
    }

    /// A fresh state.
    pub fn new(keymap: Keymap, thresholds: Thresholds, refresh_ms: u64) -> Self {
        Self {
            snapshot: None,
            history: History::for_refresh(refresh_ms),
            tracker: Tracker::new(thresholds),
            findings: Vec::new(),
            view: View::Overview,
            back: View::Overview,
            help: false,
            filter: String::new(),
            filter_view: View::Processes,
            shown: Vec::new(),
            editing_filter: false,
            sort: SortKey::Vram,
            sort_desc: true,
            group: Group::None,
            gpu_sel: 0,
            proc_sel: 0,
            finding_sel: 0,
            detail: None,
            rows: Vec::new(),
            gpu_labels: std::collections::HashMap::new(),
            pending: Vec::new(),
            now_ms: 0,
            size: (80, 24),
            keymap,
            read_only: false,
            replay: None,
            unfinished: None,
            journal_read_ms: 0,
            scenario: None,
            refresh_ms,
            tagged: std::collections::BTreeSet::new(),
            dialog: None,
            grace_ms: 10_000,
            own_pid: 0,
            journal: (Vec::new(), Vec::new()),
            journal_runs: crate::domain::journal::Runs::default(),
            journal_sel: 0,
            journal_open: false,
            staging: None,
            applying: None,
            mig_applying: None,
            mig_process: None,
            tagged_gpus: std::collections::BTreeSet::new(),
            reload_secs: 120,
            notice: None,
            no_partition_change: None,
            mig_staging: None,
            nvidia_smi: "nvidia-smi".into(),
            model_sel: 0,
            model_ask: None,
            evict_ask: None,
            eviction: None,
            theme_notice: None,
            log: std::collections::VecDeque::new(),
            scroll: super::scroll::Scrolls::default(),
            embedded: false,
            stops_sim: false,
            hits: super::hit::Hits::default(),
        }
    }

    /// Rows that fit a page of a list view.
    pub fn page(&self) -> usize {
        usize::from(self.size.1.saturating_sub(9)).max(1)
    }

    /// The current view's selection, where it has a list.
    pub(super) fn sel_mut(&mut self) -> Option<&mut usize> {
        self.sel_mut_of(self.view)
    }

    /// The length of view `v`'s whole list (unfiltered).
    pub(super) fn len_of(&self, v: View) -> usize {
        match v {
            View::Overview | View::Gpus | View::History => {
                self.snapshot.as_ref().map_or(0, |s| s.logical_count())
            }
            View::Processes => self.rows.len(),
            View::Findings => self.findings.len(),
            View::Journal => self.journal.0.len(),
            View::Models => self.snapshot.as_ref().map_or(0, |s| s.models.len()),
            View::Detail | View::Log => 0,
        }
    }

    /// View `v`'s selection (an index into its whole list), where it has a list.
    pub(super) fn sel_mut_of(&mut self, v: View) -> Option<&mut usize> {
        match v {
            View::Overview | View::Gpus | View::History => Some(&mut self.gpu_sel),
            View::Processes => Some(&mut self.proc_sel),
            View::Findings => Some(&mut self.finding_sel),
            View::Journal => Some(&mut self.journal_sel),
            View::Models => Some(&mut self.model_sel),
            View::Detail | View::Log => None,
        }
    }

    /// The pane movement keys scroll now, if any: the topmost overlay that scrolls, else a
    /// text view.
    pub fn scroll_pane(&self) -> Option<super::scroll::Pane> {
        use super::modal::Modal;
        use super::scroll::Pane;
        match self.modals().next() {
            Some(Modal::Stage | Modal::MigStage) => Some(Pane::Stage),
            Some(Modal::Help) => Some(Pane::Help),
            Some(_) => None,
            None => match self.view {
                View::Detail => Some(Pane::Detail),
                View::Log => Some(Pane::Log),
                View::Journal if self.journal_open => Some(Pane::Journal),
                _ => None,
            },
        }
    }

    /// Switches view; Detail remembers where it was opened from and what it shows.
    pub(super) fn set_view(&mut self, v: View) {
        if v == View::Detail && self.view != View::Detail {
            self.back = self.view;
            if self.detail.is_none() {
                self.detail = self.selection_target();
            }
        }
        self.view = v;
    }

    /// Back out of a drill-down: the topmost overlay, else Detail to where it was opened
    /// from, else an open journal entry to the list. False when there is none (`q` quits).
    pub fn go_back(&mut self) -> bool {
        if self.cancel_modal() {
            true
        } else if self.view == View::Detail {
            self.view = self.back;
            true
        } else if self.view == View::Journal && self.journal_open {
            self.journal_open = false;
            true
        } else {
            false
        }
    }

    /// What Enter on the current selection would show.
    pub fn selection_target(&self) -> Option<DetailTarget> {
        let snap = self.snapshot.as_ref()?;
        // A filter that hides every row leaves nothing selected.
        if !self.filter_of(self.view).is_empty()
            && super::filter::filters_selection(self.view)
            && self.shown.is_empty()
        {
            return None;
        }
        match self.view {
            View::Processes => match self.rows.get(self.proc_sel)? {
                ProcRow::Process { index, .. } => {
                    Some(DetailTarget::Process(snap.processes.get(*index)?.pid))
                }
                ProcRow::Heading(_) => None,
            },
            View::Models => {
                let m = snap.models.get(self.model_sel)?;
                match m.pid {
                    Some(pid) => Some(DetailTarget::Process(pid)),
                    None => m.bdfs.first().cloned().map(DetailTarget::Gpu),
                }
            }
            View::Journal | View::Log | View::Detail => None,
            View::Findings => self.findings.get(self.finding_sel).map(|f| {
                match f.subject.strip_prefix("pid ").and_then(|p| p.parse().ok()) {
                    Some(pid) => DetailTarget::Process(pid),
                    None => DetailTarget::Gpu(f.subject.clone()),
                }
            }),
            _ => snap
                .logical()
                .nth(self.gpu_sel)
                .map(|(_, l)| DetailTarget::Gpu(l.bdf.clone())),
        }
    }

    /// The model a process serves: the registry's (or discovery's) name for the server with
    /// its pid, else the model its command line names.
    pub fn model_of(&self, p: &Process) -> Option<String> {
        self.snapshot
            .as_ref()
            .and_then(|s| s.models.iter().find(|m| m.pid == Some(p.pid)))
            .map(|m| m.name.clone())
            .or_else(|| p.command.as_deref().and_then(model_of).map(|(_, m)| m))
    }

    /// The model a process serves, or its name.
    pub fn label_of(p: &Process) -> String {
        p.command
            .as_deref()
            .and_then(model_of)
            .map(|(_, m)| m)
            .or_else(|| p.name.clone())
            .unwrap_or_else(|| format!("pid {}", p.pid))
    }
}
