//! The cluster view's state: the watch's last view of the cluster (GPU nodes, GPU pods), its
//! rows worst first and signals worst first (both `domain::cluster`'s), the shown subset under
//! the `/` filter, the selection (kept on its node as rows move), an open node's detail, the
//! tagged nodes and a rollout staged on them (`stage`).

use crate::domain::cluster::{ClusterNode, GpuPod, NodeRow, Signal, rows, signals_worst_first};
use crate::ui::keymap::{Key, Keymap};

/// A node's detail, open over the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detail {
    /// The node.
    pub node: String,
    /// Its live detail: None while asked, then the lines or why there are none.
    pub live: Option<Result<Vec<String>, String>>,
}

/// The cluster view's state.
#[derive(Debug)]
pub struct ClusterState {
    /// The GPU nodes as last seen.
    pub nodes: Vec<ClusterNode>,
    /// The pods that ask for a GPU.
    pub pods: Vec<GpuPod>,
    /// Derived: every GPU node's row, worst first.
    pub rows: Vec<NodeRow>,
    /// Derived: every signal, worst first.
    pub signals: Vec<Signal>,
    /// Derived: indices of `rows` shown under the filter.
    pub order: Vec<usize>,
    /// Derived: indices of `signals` shown under the filter.
    pub shown_signals: Vec<usize>,
    /// Selected position in `order`.
    pub sel: usize,
    /// Filter text (matched against every word a row or a signal shows).
    pub filter: String,
    /// The filter is being typed.
    pub editing: bool,
    /// A node's detail, open.
    pub detail: Option<Detail>,
    /// Help open.
    pub help: bool,
    /// The watch's trouble, said until it recovers.
    pub trouble: Option<String>,
    /// A first view has come (before it: "listing…").
    pub listed: bool,
    /// Where the cluster is (the API server's address).
    pub via: String,
    /// Terminal size.
    pub size: (u16, u16),
    /// Now, ms.
    pub now_ms: u64,
    /// Views taken from the watch (each a coalesced batch of watch events).
    pub views: u64,
    /// Why the last key did nothing.
    pub notice: Option<String>,
    /// Keys (section `fleet`).
    pub keymap: Keymap,
    /// Tagged nodes (by name): a rollout is staged on them.
    pub tagged: std::collections::BTreeSet<String>,
    /// A rollout staged on the tagged nodes.
    pub stage: Option<super::stage::ClusterStage>,
    pub(super) pending: Vec<Key>,
}

impl ClusterState {
    /// An empty view of the cluster at `via`, waiting for the watch.
    pub fn new(keymap: Keymap, via: String) -> Self {
        Self {
            nodes: Vec::new(),
            pods: Vec::new(),
            rows: Vec::new(),
            signals: Vec::new(),
            order: Vec::new(),
            shown_signals: Vec::new(),
            sel: 0,
            filter: String::new(),
            editing: false,
            detail: None,
            help: false,
            trouble: None,
            listed: false,
            via,
            size: (80, 24),
            now_ms: 0,
            views: 0,
            notice: None,
            keymap,
            tagged: std::collections::BTreeSet::new(),
            stage: None,
            pending: Vec::new(),
        }
    }

    /// The watch's view replaces the last one; rows and signals are derived again.
    pub fn set_view(&mut self, nodes: Vec<ClusterNode>, pods: Vec<GpuPod>) {
        self.rows = rows(&nodes, &pods);
        self.signals = signals_worst_first(&nodes, &pods);
        self.nodes = nodes;
        self.pods = pods;
        self.listed = true;
        self.views += 1;
        self.derive();
    }

    /// The selected node's name.
    pub fn selected(&self) -> Option<&str> {
        self.order
            .get(self.sel)
            .map(|i| self.rows[*i].name.as_str())
    }

    /// Recomputes what the filter shows; the selection stays on its node.
    pub fn derive(&mut self) {
        let keep = self.selected().map(str::to_string);
        let needle = self.filter.to_lowercase();
        self.order = (0..self.rows.len())
            .filter(|i| needle.is_empty() || row_text(&self.rows[*i]).contains(&needle))
            .collect();
        self.shown_signals = (0..self.signals.len())
            .filter(|i| {
                needle.is_empty() || self.signals[*i].text().to_lowercase().contains(&needle)
            })
            .collect();
        self.sel = keep
            .and_then(|k| self.order.iter().position(|i| self.rows[*i].name == k))
            .unwrap_or(self.sel)
            .min(self.order.len().saturating_sub(1));
    }

    /// The node's facts and pods, for its detail.
    pub fn node(&self, name: &str) -> Option<&ClusterNode> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// A row's state words: `NOT READY`, `cordoned`, its taints; `ok` when none.
pub fn state_words(r: &NodeRow) -> String {
    let mut v = Vec::new();
    if r.ready == Some(false) {
        v.push("NOT READY".to_string());
    }
    if r.ready.is_none() {
        v.push("readiness unknown".to_string());
    }
    if r.cordoned {
        v.push("cordoned".into());
    }
    v.extend(r.taints.iter().cloned());
    if v.is_empty() {
        "ok".into()
    } else {
        v.join(" ")
    }
}

/// The words of one row, column by column (the screen and what `/` matches): node, layout,
/// GPU resources (allocatable/capacity), GPU pods, signals, state. Not escaped: the view
/// escapes what it draws.
pub fn cells(r: &NodeRow) -> [String; 6] {
    [
        r.name.clone(),
        r.layout.clone(),
        r.resources
            .iter()
            .map(|(n, a, c)| format!("{n} {a}/{c}"))
            .collect::<Vec<_>>()
            .join(" "),
        r.pods.to_string(),
        if r.signals == 0 {
            String::new()
        } else {
            format!("{}!", r.signals)
        },
        state_words(r),
    ]
}

fn row_text(r: &NodeRow) -> String {
    cells(r).join(" ").to_lowercase()
}

/// The cluster's totals: nodes, ready, cordoned, per GPU resource allocatable/capacity, GPU
/// pods running and pending.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// GPU nodes.
    pub nodes: usize,
    /// Of them, ready.
    pub ready: usize,
    /// Of them, cordoned.
    pub cordoned: usize,
    /// Per GPU resource: allocatable, capacity (summed over nodes).
    pub resources: std::collections::BTreeMap<String, (i64, i64)>,
    /// GPU pods running.
    pub running: usize,
    /// GPU pods pending.
    pub pending: usize,
}

/// Totals over the whole cluster (the filter does not change them).
pub fn totals(s: &ClusterState) -> Totals {
    let mut t = Totals {
        nodes: s.rows.len(),
        ..Totals::default()
    };
    for r in &s.rows {
        t.ready += usize::from(r.ready == Some(true));
        t.cordoned += usize::from(r.cordoned);
        for (n, a, c) in &r.resources {
            let e = t.resources.entry(n.clone()).or_default();
            e.0 = e.0.saturating_add(*a);
            e.1 = e.1.saturating_add(*c);
        }
    }
    t.running = s.pods.iter().filter(|p| p.phase == "Running").count();
    t.pending = s.pods.iter().filter(|p| p.phase == "Pending").count();
    t
}
