//! The UI state and the one reducer: `update(&mut State, Msg) -> Vec<Effect>`. Pure: no I/O, no
//! drawing. Derived data (sorted, filtered, grouped process rows; findings; history) is computed
//! here when its inputs change, never while drawing.

use super::command::Command;
use super::keymap::{Key, Keymap, Resolve};
use crate::domain::findings::{Finding, Thresholds, Tracker};
use crate::domain::history::History;
use crate::domain::served::model_of;
use crate::domain::snapshot::{PodRef, Process, Snapshot};
use ratatui::crossterm::event::{
    KeyCode, KeyEvent, KeyEventKind, MouseButton, MouseEvent, MouseEventKind,
};
use std::sync::Arc;

use super::model_ask::model_ask;
pub use super::model_ask::{ModelAction, ModelAsk};
pub use super::msg::{Effect, Msg};
pub use super::rows::{Col, DetailTarget, GpuUse, Group, ProcRow, SortKey, columns};
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
    /// Process filter text.
    pub filter: String,
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

    fn list_len(&self) -> usize {
        match self.view {
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

    fn sel_mut(&mut self) -> Option<&mut usize> {
        match self.view {
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

    fn set_view(&mut self, v: View) {
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

    /// Recomputes the process rows (filter, sort, group).
    pub fn derive_rows(&mut self) {
        let Some(snap) = self.snapshot.clone() else {
            self.rows.clear();
            return;
        };
        self.gpu_labels.clear();
        for p in &snap.processes {
            let label = Self::label_of(p);
            for g in &p.gpus {
                let e = self.gpu_labels.entry(g.gpu_id).or_default();
                if e.label.is_empty() {
                    e.label.clone_from(&label);
                } else if !e.label.split(", ").any(|x| x == label) {
                    e.label = format!("{}, {label}", e.label);
                }
                e.holders += 1;
                if let Some(c) = g.cu_percent {
                    e.cu_percent = Some(e.cu_percent.unwrap_or(0.0) + c);
                }
            }
        }
        // On a Kubernetes node the pod labels its logical GPUs (`namespace/pod`), in the
        // cluster's terms, whichever of its processes holds them.
        for l in snap.gpus.iter().flat_map(|g| &g.partitions) {
            if !l.pods.is_empty() {
                let mut names: Vec<String> = l.pods.iter().map(PodRef::label).collect();
                names.dedup();
                self.gpu_labels.entry(l.gpu_id).or_default().label = names.join(", ");
            }
        }
        // A served model's own name labels its logical GPUs (the registry's name when it has one).
        for m in &snap.models {
            for g in &m.gpus {
                self.gpu_labels
                    .entry(*g)
                    .or_default()
                    .label
                    .clone_from(&m.name);
            }
        }
        let needle = self.filter.to_lowercase();
        let matches = |p: &Process| {
            let model = self.model_of(p);
            needle.is_empty()
                || [
                    model.as_deref(),
                    p.name.as_deref(),
                    p.command.as_deref(),
                    p.user.as_deref(),
                    p.container_id.as_deref(),
                    p.systemd_unit.as_deref(),
                    p.pod.as_ref().map(|x| x.namespace.as_str()),
                    p.pod.as_ref().map(|x| x.pod.as_str()),
                    p.pod.as_ref().map(|x| x.container.as_str()),
                ]
                .into_iter()
                .flatten()
                .any(|s| s.to_lowercase().contains(&needle))
                || p.pod
                    .as_ref()
                    .is_some_and(|x| x.label().to_lowercase().contains(&needle))
                || p.pid.to_string().contains(&needle)
        };
        let mut idx: Vec<usize> = (0..snap.processes.len())
            .filter(|i| matches(&snap.processes[*i]))
            .collect();
        let key = self.sort;
        idx.sort_by(|a, b| {
            let (p, q) = (&snap.processes[*a], &snap.processes[*b]);
            let cu = |p: &Process| {
                p.gpus
                    .iter()
                    .filter_map(|g| g.cu_percent)
                    .fold(0.0, f64::max)
            };
            let o = match key {
                SortKey::Vram => p.vram_total().cmp(&q.vram_total()),
                SortKey::Cu => cu(p).total_cmp(&cu(q)),
                SortKey::Gtt => p
                    .gpus
                    .iter()
                    .filter_map(|g| g.gtt_bytes)
                    .sum::<u64>()
                    .cmp(&q.gpus.iter().filter_map(|g| g.gtt_bytes).sum::<u64>()),
                SortKey::Gpu => p
                    .gpus
                    .first()
                    .map(|g| g.gpu_id)
                    .cmp(&q.gpus.first().map(|g| g.gpu_id)),
                SortKey::Pid => p.pid.cmp(&q.pid),
                SortKey::User => p.user.cmp(&q.user),
                SortKey::Name => p.name.cmp(&q.name),
                // Longest running first when descending.
                SortKey::Start => q.started_at_ms.cmp(&p.started_at_ms),
                SortKey::Cpu => p
                    .cpu_percent
                    .unwrap_or(-1.0)
                    .total_cmp(&q.cpu_percent.unwrap_or(-1.0)),
                SortKey::Rss => p.rss_bytes.cmp(&q.rss_bytes),
                SortKey::Busy => p
                    .engine_busy_percent()
                    .unwrap_or(-1.0)
                    .total_cmp(&q.engine_busy_percent().unwrap_or(-1.0)),
                SortKey::Model => self.model_of(p).cmp(&self.model_of(q)),
            };
            o.then(p.pid.cmp(&q.pid))
        });
        if self.sort_desc {
            idx.reverse();
        }
        self.rows = match self.group {
            Group::None => idx
                .into_iter()
                .map(|index| ProcRow::Process { index, gpu: None })
                .collect(),
            Group::Gpu => {
                let mut rows = Vec::new();
                for (_, l) in snap.logical() {
                    let members: Vec<usize> = idx
                        .iter()
                        .copied()
                        .filter(|i| snap.processes[*i].gpus.iter().any(|g| g.gpu_id == l.gpu_id))
                        .collect();
                    if members.is_empty() {
                        continue;
                    }
                    rows.push(ProcRow::Heading(format!("GPU {} ({})", l.gpu_id, l.bdf)));
                    rows.extend(members.into_iter().map(|index| ProcRow::Process {
                        index,
                        gpu: Some(l.gpu_id),
                    }));
                }
                // Holders of /dev/kfd alone use no one GPU, and block a reload of every one.
                let kfd_only: Vec<usize> = idx
                    .iter()
                    .copied()
                    .filter(|i| {
                        let p = &snap.processes[*i];
                        p.holds_kfd && p.gpus.is_empty()
                    })
                    .collect();
                if !kfd_only.is_empty() {
                    rows.push(ProcRow::Heading("/dev/kfd only (every GPU)".into()));
                    rows.extend(
                        kfd_only
                            .into_iter()
                            .map(|index| ProcRow::Process { index, gpu: None }),
                    );
                }
                rows
            }
            Group::Model => {
                let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
                for i in idx {
                    let p = &snap.processes[i];
                    let label = p.command.as_deref().and_then(model_of).map_or_else(
                        || "(not a model server)".to_string(),
                        |(k, m)| format!("{m} ({k})"),
                    );
                    match groups.iter_mut().find(|(l, _)| *l == label) {
                        Some((_, v)) => v.push(i),
                        None => groups.push((label, vec![i])),
                    }
                }
                groups.sort_by(|a, b| {
                    a.0.starts_with('(')
                        .cmp(&b.0.starts_with('('))
                        .then(a.0.cmp(&b.0))
                });
                groups
                    .into_iter()
                    .flat_map(|(l, v)| {
                        std::iter::once(ProcRow::Heading(l)).chain(
                            v.into_iter()
                                .map(|index| ProcRow::Process { index, gpu: None }),
                        )
                    })
                    .collect()
            }
        };
        self.proc_sel = self.proc_sel.min(self.rows.len().saturating_sub(1));
    }
}

/// A direct sort key (as htop's and nvitop's): sorts by `key` in its natural order, or
/// reverses the order when it already sorts by it.
fn sort_by(state: &mut State, key: SortKey) {
    if state.sort == key {
        state.sort_desc = !state.sort_desc;
    } else {
        state.sort = key;
        state.sort_desc = key.desc_by_default();
    }
    state.derive_rows();
}

fn command(state: &mut State, c: Command) -> Vec<Effect> {
    // Read-only (and every replay) is checked here, once: no mutating command goes further.
    // Their keys are not bound in a read-only keymap either; a command that still arrives
    // (a user keymap, a script) is said, not silently dropped.
    if state.read_only && c.danger() == super::command::Danger::Mutating {
        state.notice = Some((
            format!("read-only: {} is not available", c.name()),
            state.now_ms,
        ));
        return Vec::new();
    }
    let len = state.list_len();
    let page = state.page();
    match c {
        Command::Quit => return vec![Effect::Quit],
        Command::Back => {
            if !state.go_back() {
                return vec![Effect::Quit];
            }
        }
        Command::RefreshNow => return vec![Effect::RefreshNow],
        Command::ToggleHelp => {
            state.help = !state.help;
            state.scroll.reset(super::scroll::Pane::Help);
        }
        Command::NextView => state.set_view(View::ALL[(state.view.index() + 1) % View::ALL.len()]),
        Command::PrevView => {
            state.set_view(View::ALL[(state.view.index() + View::ALL.len() - 1) % View::ALL.len()])
        }
        Command::ViewOverview => state.set_view(View::Overview),
        Command::ViewGpus => state.set_view(View::Gpus),
        Command::ViewProcesses => state.set_view(View::Processes),
        Command::ViewDetail => state.set_view(View::Detail),
        Command::ViewModels => state.set_view(View::Models),
        Command::ModelRestart | Command::ModelStop | Command::ModelAddToRegistry => {
            if state.view != View::Models {
                return Vec::new();
            }
            let snap = state.snapshot.clone();
            state.model_ask = snap
                .as_deref()
                .and_then(|s| model_ask(s, state.model_sel, c));
            if state.model_ask.is_none() {
                let why = snap
                    .as_deref()
                    .and_then(|s| s.models.get(state.model_sel))
                    .map_or_else(
                        || "no model selected".to_string(),
                        |m| match (c, &m.spec, m.pid) {
                            (Command::ModelAddToRegistry, Some(_), _) => {
                                format!("{} is already in the registry", m.name)
                            }
                            (Command::ModelStop, Some(_), None) => {
                                format!("{} is not running", m.name)
                            }
                            (_, None, _) => {
                                format!("{} is not in the registry: add it first (a)", m.name)
                            }
                            _ => format!("{}: its process is gone", m.name),
                        },
                    );
                state.notice = Some((why, state.now_ms));
            }
        }
        Command::ModelAdvise => {
            if state
                .applying
                .as_ref()
                .is_some_and(|p| p.finished.is_none())
            {
                return Vec::new();
            }
            let Some(snap) = state.snapshot.clone() else {
                return Vec::new();
            };
            match crate::domain::placement::advise_node(&snap) {
                Ok(ranked) => {
                    if let (Some(best), Some(g)) = (ranked.first(), snap.gpus.first()) {
                        log::info!("placement advice: {}", best.summary);
                        let grace = u32::try_from(state.grace_ms / 1000).unwrap_or(10);
                        let mut st = super::stage::Staging::new(g.bdf.clone(), &snap, grace);
                        st.all = true;
                        st.compute = Some(best.compute);
                        st.memory = Some(best.memory);
                        st.advice = Some(best.summary.clone());
                        st.advice_for = (
                            ranked
                                .iter()
                                .map(|p| format!("{}/{}", p.compute, p.memory))
                                .collect(),
                            crate::domain::throughput::model_names(&snap),
                        );
                        st.reload_secs = state.reload_secs;
                        st.replan(&snap, grace);
                        state.staging = Some(st);
                        state.scroll.reset(super::scroll::Pane::Stage);
                        return vec![Effect::LoadThroughput];
                    }
                }
                Err(e) => {
                    log::warn!("placement advice: {e}");
                    state.notice = Some((format!("placement advice: {e}"), state.now_ms));
                }
            }
        }
        Command::ViewFindings => state.set_view(View::Findings),
        Command::ViewLog => state.set_view(View::Log),
        Command::ViewHistory => state.set_view(View::History),
        Command::ViewJournal => {
            state.set_view(View::Journal);
            return vec![Effect::LoadJournal];
        }
        Command::TagProcess => {
            if let (Some(ProcRow::Process { index, .. }), Some(snap)) =
                (state.rows.get(state.proc_sel), &state.snapshot)
                && let Some(p) = snap.processes.get(*index)
                && !state.tagged.remove(&p.pid)
            {
                state.tagged.insert(p.pid);
            }
            let last = state.rows.len().saturating_sub(1);
            state.proc_sel = (state.proc_sel + 1).min(last);
        }
        Command::KillProcess => {
            if state.view != View::Processes {
                return Vec::new();
            }
            let Some(snap) = state.snapshot.clone() else {
                return Vec::new();
            };
            let pids: Vec<u32> = if state.tagged.is_empty() {
                match state.rows.get(state.proc_sel) {
                    Some(ProcRow::Process { index, .. }) => snap
                        .processes
                        .get(*index)
                        .map(|p| vec![p.pid])
                        .unwrap_or_default(),
                    _ => Vec::new(),
                }
            } else {
                state.tagged.iter().copied().collect()
            };
            if pids.is_empty() {
                return Vec::new();
            }
            let plan = crate::domain::kill::plan(&snap, &pids, state.own_pid);
            state.dialog = Some(super::dialog::KillDialog::new(plan, state.grace_ms));
            // The target is pinned and verified by the executor; a fresh full scan shows any
            // other holder by the time the operator decides.
            return vec![Effect::ScanHolders];
        }
        Command::StageChange => {
            if let Some(why) = &state.no_partition_change {
                state.notice = Some((why.clone(), state.now_ms));
                return Vec::new();
            }
            if state
                .applying
                .as_ref()
                .is_some_and(|p| p.finished.is_none())
            {
                return Vec::new();
            }
            let Some(snap) = state.snapshot.clone() else {
                return Vec::new();
            };
            let Some((g, _)) = snap.logical().nth(state.gpu_sel) else {
                return Vec::new();
            };
            if g.mig.is_some() {
                // NVIDIA: a MIG layout, on this GPU.
                let idx = snap
                    .gpus
                    .iter()
                    .filter(|x| x.mig.is_some())
                    .position(|x| x.bdf == g.bdf)
                    .unwrap_or(0);
                state.mig_staging = Some(super::mig_stage::MigStaging::new(
                    u32::try_from(idx).unwrap_or(0),
                    &snap,
                    state.nvidia_smi.clone(),
                ));
                state.scroll.reset(super::scroll::Pane::Stage);
                return Vec::new();
            }
            let grace = u32::try_from(state.grace_ms / 1000).unwrap_or(10);
            // Tagged GPUs (several) when there are any, else the selected one.
            let mut tagged: Vec<String> = state.tagged_gpus.iter().cloned().collect();
            let first = if tagged.is_empty() {
                g.bdf.clone()
            } else {
                tagged.remove(0)
            };
            let mut st = super::stage::Staging::new(first, &snap, grace);
            st.also = tagged;
            st.reload_secs = state.reload_secs;
            st.replan(&snap, grace);
            state.staging = Some(st);
            state.scroll.reset(super::scroll::Pane::Stage);
            // Who must stop: every holder, not only ROCm ones; the plan updates with the scan.
            return vec![Effect::ScanHolders];
        }
        // The fleet view's own; nothing in the monitor.
        Command::TagNode => {}
        Command::TagGpu => {
            if let Some((g, _)) = state
                .snapshot
                .as_ref()
                .and_then(|s| s.logical().nth(state.gpu_sel))
                && !state.tagged_gpus.remove(&g.bdf)
            {
                state.tagged_gpus.insert(g.bdf.clone());
            }
        }
        Command::StageCycleCompute if state.mig_staging.is_some() => {
            if let (Some(st), Some(snap)) = (state.mig_staging.as_mut(), state.snapshot.clone()) {
                st.cycle(&snap);
            }
        }
        Command::StageCycleCompute | Command::StageCycleMemory | Command::StageToggleScope => {
            let grace = u32::try_from(state.grace_ms / 1000).unwrap_or(10);
            if let (Some(st), Some(snap)) = (state.staging.as_mut(), state.snapshot.clone()) {
                match c {
                    Command::StageCycleCompute => st.cycle_compute(),
                    Command::StageCycleMemory => st.cycle_memory(),
                    _ => st.all = !st.all,
                }
                st.replan(&snap, grace);
            }
        }
        Command::StageConfirm if state.mig_staging.is_some() => {
            if let Some(st) = state.mig_staging.as_mut()
                && let Ok(p) = &st.result
            {
                st.confirming = Some(super::stage::Confirming {
                    typed: String::new(),
                    fingerprint: p.fingerprint.clone(),
                    notice: None,
                });
            }
        }
        Command::StageConfirm => {
            if let Some(st) = state.staging.as_mut()
                && let Ok(p) = &st.result
            {
                st.confirming = Some(super::stage::Confirming {
                    typed: String::new(),
                    fingerprint: p.fingerprint.clone(),
                    notice: None,
                });
            }
        }
        Command::ToggleProgress => {
            if let Some(p) = state.applying.as_mut() {
                p.visible = !p.visible;
            }
        }
        Command::DialogFocusNext => {
            if let Some(a) = state.model_ask.as_mut() {
                a.focus = a.focus.toggled();
            }
            if let Some(d) = state.dialog.as_mut() {
                d.focus_next();
            }
        }
        Command::DialogActivate => {
            if let Some(a) = state.model_ask.take() {
                // INVARIANT: the only place an Effect::Model is created, from a confirmed ask.
                return if a.focus == super::confirm::Focus::Confirm {
                    vec![Effect::Model(a.action)]
                } else {
                    Vec::new()
                };
            }
            let now = state.now_ms;
            if let Some(d) = state.dialog.as_mut() {
                // INVARIANT: the only place an Effect::Kill is created, from a confirmed dialog.
                match d.activate(now) {
                    super::dialog::Action::None => {}
                    super::dialog::Action::Close => {
                        state.dialog = None;
                        state.tagged.clear();
                    }
                    super::dialog::Action::Signal(t, sig) => return vec![Effect::Kill(t, sig)],
                }
            }
        }
        Command::SelectNext
        | Command::SelectPrev
        | Command::PageDown
        | Command::PageUp
        | Command::Top
        | Command::Bottom => {
            // An overlay or a text pane that scrolls takes the movement keys.
            if let Some(p) = state.scroll_pane() {
                let page = u16::try_from(page).unwrap_or(u16::MAX);
                state.scroll.step(p, c, page);
                return Vec::new();
            }
            if let Some(sel) = state.sel_mut() {
                let last = len.saturating_sub(1);
                *sel = match c {
                    Command::SelectNext => (*sel + 1).min(last),
                    Command::SelectPrev => sel.saturating_sub(1),
                    Command::PageDown => (*sel + page).min(last),
                    Command::PageUp => sel.saturating_sub(page),
                    Command::Top => 0,
                    _ => last,
                };
            }
            if state.view == View::Journal {
                state.scroll.reset(super::scroll::Pane::Journal);
            }
        }
        Command::OpenDetail if state.view == View::Journal => {
            // A journal entry opens in place (it is not a GPU or a process).
            if !state.journal.0.is_empty() {
                state.journal_open = true;
                state.scroll.reset(super::scroll::Pane::Journal);
            }
        }
        Command::OpenDetail => {
            if let Some(t) = state.selection_target() {
                state.detail = Some(t);
                state.scroll.reset(super::scroll::Pane::Detail);
                state.set_view(View::Detail);
            }
        }
        Command::CycleSort => {
            state.sort = state.sort.next_at(state.size.0);
            state.sort_desc = state.sort.desc_by_default();
            state.derive_rows();
        }
        Command::ReverseSort => {
            state.sort_desc = !state.sort_desc;
            state.derive_rows();
        }
        Command::SortByVram => sort_by(state, SortKey::Vram),
        Command::SortByGpuBusy => sort_by(state, SortKey::Busy),
        Command::SortByCpu => sort_by(state, SortKey::Cpu),
        Command::SortByUptime => sort_by(state, SortKey::Start),
        Command::SortByName => sort_by(state, SortKey::Name),
        Command::CycleGroup => {
            state.group = match state.group {
                Group::None => Group::Gpu,
                Group::Gpu => Group::Model,
                Group::Model => Group::None,
            };
            state.proc_sel = 0;
            state.derive_rows();
        }
        Command::Filter => {
            state.set_view(View::Processes);
            state.editing_filter = true;
        }
        Command::Cancel => {
            if !state.cancel_modal() {
                if !state.filter.is_empty() && state.view == View::Processes {
                    state.filter.clear();
                    state.derive_rows();
                } else if state.view == View::Detail {
                    state.view = state.back;
                } else if state.view == View::Journal && state.journal_open {
                    state.journal_open = false;
                } else if state.embedded {
                    return vec![Effect::Quit];
                }
            }
        }
    }
    Vec::new()
}

/// Typing the host name to apply a staged MIG plan.
fn mig_confirm_key(state: &mut State, k: &KeyEvent) -> Vec<Effect> {
    let Some(st) = state.mig_staging.as_mut() else {
        return Vec::new();
    };
    let Ok(plan) = st.result.clone() else {
        return Vec::new();
    };
    let Some(c) = st.confirming.as_mut() else {
        return Vec::new();
    };
    match c.key(k, &plan.host, &plan.fingerprint) {
        super::stage::Typed::Cancel => st.confirming = None,
        // INVARIANT: the only place an Effect::MigApply is created: the plan on screen, its
        // fingerprint unchanged since confirmation began, and the host name typed.
        super::stage::Typed::Confirmed => {
            state.mig_staging = None;
            state.mig_applying = Some(plan.fingerprint.clone());
            state.mig_process = None;
            state.notice = Some((
                format!(
                    "applying MIG plan {} (detached); the footer says when it ends, the Journal view (7) shows each step",
                    plan.fingerprint
                ),
                state.now_ms,
            ));
            return vec![Effect::MigApply(Box::new(plan))];
        }
        super::stage::Typed::Pending => {}
    }
    Vec::new()
}

/// Typing the confirmation of a staged plan.
fn confirm_key(state: &mut State, k: &KeyEvent) -> Vec<Effect> {
    let Some(st) = state.staging.as_mut() else {
        return Vec::new();
    };
    let (Some(word), Ok(plan)) = (st.required_word(), st.result.clone()) else {
        return Vec::new();
    };
    let Some(c) = st.confirming.as_mut() else {
        return Vec::new();
    };
    match c.key(k, &word, &plan.fingerprint) {
        super::stage::Typed::Cancel => st.confirming = None,
        // INVARIANT: the only place an Effect::Apply is created: the plan on screen, its
        // fingerprint unchanged since confirmation began, and the required word typed.
        super::stage::Typed::Confirmed => {
            state.staging = None;
            state.tagged_gpus.clear();
            return vec![Effect::Apply(Box::new(plan))];
        }
        super::stage::Typed::Pending => {}
    }
    Vec::new()
}

fn filter_key(state: &mut State, k: &KeyEvent) {
    match k.code {
        KeyCode::Enter => state.editing_filter = false,
        KeyCode::Esc => {
            state.editing_filter = false;
            state.filter.clear();
        }
        KeyCode::Backspace => {
            state.filter.pop();
        }
        KeyCode::Char(c)
            if !k
                .modifiers
                .contains(ratatui::crossterm::event::KeyModifiers::CONTROL) =>
        {
            state.filter.push(c)
        }
        _ => return,
    }
    state.proc_sel = 0;
    state.derive_rows();
}

/// The mouse: the wheel moves the selection (or scrolls the pane the movement keys scroll), a
/// left click on a tab opens that view, on a list row selects it. An overlay that takes the
/// keys takes the clicks too (they do nothing under it).
fn mouse(state: &mut State, m: MouseEvent) -> Vec<Effect> {
    let exclusive = state.modals().any(|x| x.section().is_some());
    let step = if state.scroll_pane().is_some() { 3 } else { 1 };
    match m.kind {
        MouseEventKind::ScrollDown | MouseEventKind::ScrollUp => {
            let c = if m.kind == MouseEventKind::ScrollDown {
                Command::SelectNext
            } else {
                Command::SelectPrev
            };
            if exclusive && state.scroll_pane().is_none() {
                return Vec::new();
            }
            (0..step).flat_map(|_| command(state, c)).collect()
        }
        MouseEventKind::Down(MouseButton::Left) if !exclusive => {
            if let Some(v) = state.hits.tab_at(m.column, m.row) {
                return command(state, v.command());
            }
            let len = state.list_len();
            if let Some(i) = state.hits.row_at(m.column, m.row).filter(|i| *i < len) {
                let journal = state.view == View::Journal;
                if let Some(sel) = state.sel_mut() {
                    *sel = i;
                }
                if journal {
                    state.scroll.reset(super::scroll::Pane::Journal);
                }
            }
            Vec::new()
        }
        _ => Vec::new(),
    }
}

/// The reducer.
pub fn update(state: &mut State, msg: Msg) -> Vec<Effect> {
    match msg {
        Msg::Key(k) => {
            if k.kind == KeyEventKind::Release {
                return Vec::new();
            }
            if state
                .staging
                .as_ref()
                .is_some_and(|s| s.confirming.is_some())
            {
                return confirm_key(state, &k);
            }
            if state
                .mig_staging
                .as_ref()
                .is_some_and(|s| s.confirming.is_some())
            {
                return mig_confirm_key(state, &k);
            }
            if state.editing_filter {
                if k.code == KeyCode::Char('c')
                    && k.modifiers
                        .contains(ratatui::crossterm::event::KeyModifiers::CONTROL)
                {
                    return vec![Effect::Quit];
                }
                filter_key(state, &k);
                return Vec::new();
            }
            let Some(key) = Key::from_event(&k) else {
                return Vec::new();
            };
            state.pending.push(key);
            match state.keymap.resolve(&state.sections(), &state.pending) {
                Resolve::Command(c) => {
                    state.pending.clear();
                    command(state, c)
                }
                Resolve::Pending => Vec::new(),
                Resolve::Unbound => {
                    // A key `--read-only` unbound says so instead of doing nothing.
                    if let Some(c) = state.keymap.removed(&state.sections(), &state.pending) {
                        state.notice = Some((
                            format!("read-only: {} is not available", c.name()),
                            state.now_ms,
                        ));
                    }
                    state.pending.clear();
                    Vec::new()
                }
            }
        }
        Msg::Command(c) => command(state, c),
        Msg::Mouse(m) => mouse(state, m),
        Msg::Log(lines) => {
            state.log.extend(lines);
            let over = state.log.len().saturating_sub(LOG_KEEP);
            state.log.drain(..over);
            Vec::new()
        }
        Msg::Resize(w, h) => {
            state.size = (w, h);
            Vec::new()
        }
        Msg::Snapshot(s) => {
            state.history.push(&s);
            state.findings = state.tracker.observe(&s);
            state.now_ms = state.now_ms.max(s.taken_at_ms);
            if let Some(d) = state.dialog.as_mut() {
                for t in &d.plan.targets {
                    if !s.processes.iter().any(|p| p.pid == t.pid) {
                        d.gone.insert(t.pid);
                    }
                }
            }
            state
                .tagged
                .retain(|pid| s.processes.iter().any(|p| p.pid == *pid));
            let grace = u32::try_from(state.grace_ms / 1000).unwrap_or(10);
            if let Some(st) = state.mig_staging.as_mut() {
                st.replan(&s);
            }
            if let Some(st) = state.staging.as_mut() {
                st.replan(&s, grace);
            }
            state.snapshot = Some(s);
            state.derive_rows();
            let n = state.snapshot.as_ref().map_or(0, |s| s.logical_count());
            state.gpu_sel = state.gpu_sel.min(n.saturating_sub(1));
            state.finding_sel = state
                .finding_sel
                .min(state.findings.len().saturating_sub(1));
            Vec::new()
        }
        Msg::Tick(now) => {
            state.now_ms = now;
            // Follow a running apply through the journal it writes.
            // Otherwise every 10 s (and at start), so an unfinished apply left by anyone shows
            // in the header.
            let following = state
                .applying
                .as_ref()
                .is_some_and(|p| p.finished.is_none())
                || state.mig_applying.is_some();
            if following || now.saturating_sub(state.journal_read_ms) >= 10_000 {
                state.journal_read_ms = now;
                vec![Effect::LoadJournal]
            } else {
                Vec::new()
            }
        }
        Msg::Kill(e) => {
            let done = matches!(
                e,
                crate::exec::kill::KillEvent::Done { .. }
                    | crate::exec::kill::KillEvent::Refused(_)
            );
            if let crate::exec::kill::KillEvent::JournalError(j)
            | crate::exec::kill::KillEvent::Refused(j) = &e
            {
                log::error!("{j}");
            }
            if let Some(d) = state.dialog.as_mut() {
                d.on_event(&e);
            }
            if done {
                vec![Effect::RefreshNow, Effect::LoadJournal]
            } else {
                Vec::new()
            }
        }
        Msg::ApplyStarted(r) => {
            match r {
                Ok(p) => {
                    log::info!(
                        "applying plan {} (detached; log {})",
                        p.plan.fingerprint,
                        p.log
                    );
                    state.applying = Some(*p);
                }
                Err(e) => log::error!("{e}"),
            }
            Vec::new()
        }
        Msg::MigApplyStarted(r) => {
            match r {
                Ok(d) => state.mig_process = Some(d),
                // Nothing runs, so nothing is followed: the flag goes with the failure, and the
                // journal is read at the idle pace again.
                Err(e) => {
                    log::error!("{e}");
                    state.notice = Some((e, state.now_ms));
                    state.mig_applying = None;
                    state.mig_process = None;
                }
            }
            Vec::new()
        }
        Msg::Throughput(store) => {
            if let (Some(st), Some(snap)) = (state.staging.as_mut(), state.snapshot.as_ref())
                && st.advice.is_some()
            {
                st.measured = Some(super::stage::measured_lines(st, &snap.host, store));
            }
            Vec::new()
        }
        Msg::Journal(mut entries, bad, unfinished, exited) => {
            let mut effects = Vec::new();
            state.unfinished = unfinished;
            let runs = crate::domain::journal::Runs::of(&entries);
            // A MIG apply is followed through its run in the journal: done, or a failed step.
            if let Some(fp) = state.mig_applying.clone() {
                let run = runs.latest(crate::domain::journal::RunKind::Mig, &fp);
                let end = run.and_then(|r| match (&r.closed, &r.last) {
                    (Some(_), _) => Some(format!("MIG plan {fp} applied")),
                    (None, Some((i, key, Some(false), detail))) => Some(format!(
                        "MIG plan {fp} failed at step {} ({key}): {detail}; partop mig apply … --resume continues it",
                        i + 1
                    )),
                    _ => None,
                });
                // Its process is gone and its run never closed (it refused before journaling, or
                // died): the followed process's end is reported when no repartition is followed.
                let amd_followed = state
                    .applying
                    .as_ref()
                    .is_some_and(|p| p.finished.is_none());
                let end = end.or_else(|| {
                    exited.as_ref().filter(|_| !amd_followed).map(|how| {
                        format!(
                            "the apply of MIG plan {fp} ended without finishing: {how}; the Journal view (7) shows what it did"
                        )
                    })
                });
                if let Some(text) = end {
                    state.notice = Some((text, state.now_ms));
                    state.mig_applying = None;
                    state.mig_process = None;
                    effects.extend([Effect::Rescan, Effect::RefreshNow]);
                }
            }
            if let Some(p) = state.applying.as_mut() {
                let was = p.finished;
                p.follow(&runs);
                if let Some(how) = exited {
                    p.exited(how);
                }
                if was.is_none() && p.finished.is_some() {
                    p.visible = true;
                    effects = vec![Effect::Rescan, Effect::RefreshNow];
                }
            }
            entries.reverse();
            state.journal = (entries, bad);
            state.journal_sel = state
                .journal_sel
                .min(state.journal.0.len().saturating_sub(1));
            effects
        }
    }
}
