//! The fleet view's state: one row per node (the one row type: the view, `--once` and the
//! Prometheus view all keep nodes as [`NodeRow`]), the shown order (filtered, worst first by
//! default), tags, and a change being staged. Fed by `update`; drawn by `view`.

use super::msg::Staged;
use crate::domain::fleet::NodeSummary;
use crate::domain::snapshot::Health;
use crate::domain::{ComputeMode, MemoryMode};
use crate::ui::confirm::Confirming;
use crate::ui::keymap::{Key, Keymap};

/// One node as the fleet keeps it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeRow {
    /// What the operator called it.
    pub name: String,
    /// Its last row.
    pub summary: Option<NodeSummary>,
    /// Not reporting, and why.
    pub down: Option<String>,
    /// Connecting (no row yet, or again).
    pub connecting: bool,
    /// When its last row arrived (this machine's clock), ms.
    pub seen_ms: u64,
    /// GFX busy over the last rows.
    pub gfx_history: Vec<u64>,
    /// The last row is settled: no source of it is still on its first read (`--once` waits
    /// for it).
    pub settled: bool,
    /// A change can go to it (partop over ssh, or a rehearsal node); false for a `partop
    /// serve` endpoint or a Prometheus series, which are read only.
    pub changeable: bool,
}

impl NodeRow {
    /// A node not heard from yet.
    pub fn connecting(name: &str, changeable: bool) -> Self {
        Self {
            name: name.to_string(),
            connecting: true,
            changeable,
            ..Self::default()
        }
    }

    /// Its data is older than three of the nodes' sampling periods, or a source says stale.
    pub fn stale(&self, now_ms: u64, refresh: u32) -> bool {
        self.summary.as_ref().is_some_and(|s| {
            s.health == Health::Stale
                || now_ms.saturating_sub(self.seen_ms.max(s.taken_at_ms))
                    > u64::from(refresh.max(1)) * 3000
        })
    }
}

/// Sort columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetSort {
    /// Worst first: down, then findings by severity (an unfinished apply counts as a
    /// warning), then stale data; the rest by name.
    Worst,
    /// Node name.
    Name,
    /// Mean GFX busy.
    Busy,
    /// Findings (warnings, then info).
    Findings,
    /// Data age (unreachable last).
    Age,
    /// Logical GPUs.
    Logical,
}

impl FleetSort {
    /// The order `s` steps through (from worst, the measures in the order they had when the
    /// name came first, so `s` pressed four times still sorts by logical GPUs).
    pub const ORDER: [Self; 6] = [
        Self::Worst,
        Self::Busy,
        Self::Findings,
        Self::Age,
        Self::Logical,
        Self::Name,
    ];

    /// Its label.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Worst => "worst",
            Self::Name => "node",
            Self::Busy => "GFX",
            Self::Findings => "findings",
            Self::Age => "age",
            Self::Logical => "logical GPUs",
        }
    }
}

/// Where a staged fleet change is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Choosing the modes (`c`, `m`).
    Choose,
    /// Every node planning its own change.
    Planning,
    /// The set planned: shown, then its fingerprint typed.
    Review,
    /// Rolling out, node by node.
    Rolling,
    /// Over: rolled out, or why not (planning or the rollout failed).
    Done(Result<(), String>),
}

/// A change staged on some nodes, from the modes asked to the end of its rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetStage {
    /// The nodes, by name.
    pub nodes: Vec<String>,
    /// The compute mode asked (None keeps).
    pub compute: Option<ComputeMode>,
    /// The memory mode asked (None keeps).
    pub memory: Option<MemoryMode>,
    /// Where it is.
    pub phase: Phase,
    /// What planning and the rollout said, line by line (bounded).
    pub log: Vec<String>,
    /// The planned set.
    pub staged: Option<Staged>,
    /// The set's fingerprint being typed.
    pub confirming: Option<Confirming>,
    /// Why the last key did nothing.
    pub notice: Option<String>,
}

impl FleetStage {
    /// Lines kept of what planning and the rollout said.
    pub const MAX_LOG: usize = 4000;

    /// A new stage on `nodes`, modes unchosen.
    pub const fn new(nodes: Vec<String>) -> Self {
        Self {
            nodes,
            compute: None,
            memory: None,
            phase: Phase::Choose,
            log: Vec::new(),
            staged: None,
            confirming: None,
            notice: None,
        }
    }

    /// A line said by planning or the rollout, its control characters escaped.
    pub fn say(&mut self, line: &str) {
        self.log
            .push(crate::domain::text::escape_controls(line).into_owned());
        let over = self.log.len().saturating_sub(Self::MAX_LOG);
        self.log.drain(..over);
    }

    /// Planning or the rollout is running: the view cannot be left.
    pub const fn busy(&self) -> bool {
        matches!(self.phase, Phase::Planning | Phase::Rolling)
    }
}

/// The fleet view's state.
#[derive(Debug)]
pub struct FleetState {
    /// Every node, in the order given.
    pub rows: Vec<NodeRow>,
    /// Derived: indices of `rows` shown, filtered and sorted.
    pub order: Vec<usize>,
    /// Selected position in `order`.
    pub sel: usize,
    /// Sort.
    pub sort: FleetSort,
    /// Descending.
    pub desc: bool,
    /// Filter text.
    pub filter: String,
    /// The filter is being typed.
    pub editing: bool,
    /// Tagged nodes (by name).
    pub tagged: std::collections::BTreeSet<String>,
    /// Now, ms.
    pub now_ms: u64,
    /// Terminal size.
    pub size: (u16, u16),
    /// Help open.
    pub help: bool,
    /// Where rows come from (`ssh`, `http`, `prometheus URL`).
    pub via: String,
    /// Seconds between samples on the nodes.
    pub refresh: u32,
    /// Keys.
    pub keymap: Keymap,
    /// A change being staged.
    pub stage: Option<FleetStage>,
    /// Why the last key did nothing (shown in the footer until the next key).
    pub notice: Option<String>,
    pub(super) pending: Vec<Key>,
}

impl FleetState {
    /// A view of `rows`.
    pub fn new(rows: Vec<NodeRow>, keymap: Keymap, via: String, refresh: u32) -> Self {
        let mut s = Self {
            rows,
            order: Vec::new(),
            sel: 0,
            sort: FleetSort::Worst,
            desc: false,
            filter: String::new(),
            editing: false,
            tagged: std::collections::BTreeSet::new(),
            now_ms: 0,
            size: (80, 24),
            help: false,
            via,
            refresh,
            keymap,
            stage: None,
            notice: None,
            pending: Vec::new(),
        };
        s.derive();
        s
    }

    /// A row arrived for `name` (new nodes, from Prometheus, are added).
    pub fn row(&mut self, name: &str, s: NodeSummary, now_ms: u64) {
        let i = self.index(name);
        let r = &mut self.rows[i];
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "0..=100"
        )]
        r.gfx_history
            .push(s.gfx_mean.unwrap_or(0.0).clamp(0.0, 100.0).round() as u64);
        let over = r.gfx_history.len().saturating_sub(60);
        r.gfx_history.drain(..over);
        r.settled = s.health != Health::Pending;
        r.summary = Some(s);
        r.down = None;
        r.connecting = false;
        r.seen_ms = now_ms;
        self.derive();
    }

    /// Reachability changed for `name`.
    pub fn reach(&mut self, name: &str, down: Option<String>, connecting: bool) {
        let i = self.index(name);
        let r = &mut self.rows[i];
        r.down = down;
        r.connecting = connecting;
        self.derive();
    }

    fn index(&mut self, name: &str) -> usize {
        if let Some(i) = self.rows.iter().position(|r| r.name == name) {
            return i;
        }
        self.rows.push(NodeRow::connecting(name, false));
        self.rows.len() - 1
    }

    /// The selected node's name.
    pub fn selected(&self) -> Option<&str> {
        self.order
            .get(self.sel)
            .map(|i| self.rows[*i].name.as_str())
    }

    /// Some node can take a change (the `p` key is offered).
    pub fn changeable(&self) -> bool {
        self.rows.iter().any(|r| r.changeable)
    }

    /// Recomputes the shown order (filter, sort); the selection stays on its node.
    pub fn derive(&mut self) {
        let keep = self.selected().map(str::to_string);
        // The one filter every list uses (`ui::filter`): the words the row shows.
        let mut idx: Vec<usize> = (0..self.rows.len())
            .filter(|i| {
                crate::ui::filter::keeps(&self.filter, &cells(&self.rows[*i], self.now_ms, 0))
            })
            .collect();
        let (rows, now, refresh, sort) = (&self.rows, self.now_ms, self.refresh, self.sort);
        idx.sort_by(|a, b| {
            let (a, b) = (&rows[*a], &rows[*b]);
            match sort {
                FleetSort::Worst => worst_key(a, now, refresh).cmp(&worst_key(b, now, refresh)),
                _ => measure(sort, a, now).cmp(&measure(sort, b, now)),
            }
            .then_with(|| a.name.cmp(&b.name))
        });
        if self.desc {
            idx.reverse();
        }
        self.order = idx;
        self.sel = keep
            .and_then(|k| self.order.iter().position(|i| self.rows[*i].name == k))
            .unwrap_or(self.sel)
            .min(self.order.len().saturating_sub(1));
    }
}

/// How bad a node looks, smaller first: down; then reporting nodes by findings (warnings,
/// an unfinished apply or a partition that did not come up counting as warnings), then info;
/// then stale data before fresh; nodes not heard from yet last.
fn worst_key(r: &NodeRow, now: u64, refresh: u32) -> (u8, i64, i64, bool) {
    if r.down.is_some() {
        return (0, 0, 0, false);
    }
    let Some(s) = &r.summary else {
        return (2, 0, 0, false);
    };
    let warn = i64::from(s.findings_warn) + i64::from(s.apply.is_some()) + i64::from(s.mismatched);
    (
        1,
        -warn,
        -i64::from(s.findings_info),
        !r.stale(now, refresh),
    )
}

/// The number a column sorts by.
fn measure(sort: FleetSort, r: &NodeRow, now: u64) -> i64 {
    let s = r.summary.as_ref();
    #[expect(clippy::cast_possible_truncation, reason = "percent x 10")]
    match sort {
        FleetSort::Worst | FleetSort::Name => 0,
        FleetSort::Busy => s.and_then(|s| s.gfx_mean).map_or(-1, |g| (g * 10.0) as i64),
        FleetSort::Findings => s.map_or(-1, |s| {
            i64::from(s.findings_warn) * 1000 + i64::from(s.findings_info)
        }),
        FleetSort::Age => {
            if r.down.is_some() || s.is_none() {
                i64::MAX
            } else {
                i64::try_from(now.saturating_sub(r.seen_ms)).unwrap_or(i64::MAX)
            }
        }
        FleetSort::Logical => s.map_or(-1, |s| i64::from(s.logical)),
    }
}

/// The fleet's totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Nodes reporting.
    pub reporting: usize,
    /// Nodes.
    pub nodes: usize,
    /// Logical GPUs on reporting nodes.
    pub logical: u64,
    /// Idle partitions.
    pub idle: u64,
    /// Unfinished applies.
    pub unfinished: usize,
    /// Partitions that did not come up.
    pub mismatched: u64,
}

/// Totals over `rows`.
pub fn totals(rows: &[NodeRow]) -> Totals {
    let mut t = Totals {
        nodes: rows.len(),
        ..Totals::default()
    };
    for r in rows {
        if let (Some(s), None) = (&r.summary, &r.down) {
            t.reporting += 1;
            t.logical += u64::from(s.logical);
            t.idle += u64::from(s.idle_partitions);
            t.mismatched += u64::from(s.mismatched);
            t.unfinished += usize::from(s.apply.is_some());
        }
    }
    t
}

fn age(now: u64, at: u64) -> String {
    let s = now.saturating_sub(at) / 1000;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        _ => format!("{}h", s / 3600),
    }
}

/// The words of one row, column by column (the screen, `--once`, and what `/` matches):
/// node, product, modes, GFX, VRAM, models, findings, data, state.
pub fn cells(r: &NodeRow, now: u64, spark_w: usize) -> [String; 9] {
    let Some(s) = &r.summary else {
        let why = r
            .down
            .as_ref()
            .map_or_else(|| "connecting…".into(), |d| format!("DOWN: {d}"));
        return [
            r.name.clone(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            why,
        ];
    };
    let product = s
        .products
        .iter()
        .map(|p| {
            p.trim_start_matches("AMD Instinct ")
                .trim_start_matches("NVIDIA ")
        })
        .collect::<Vec<_>>()
        .join(",");
    let busy = s
        .gfx_mean
        .map_or_else(|| "N/A".into(), |g| format!("{g:>3.0}%"));
    let spark = crate::ui::view::fmt::spark(&r.gfx_history, spark_w);
    // GiB, said in the column's title (the one unit convention).
    let vram = format!(
        "{}/{}",
        crate::domain::text::gib(s.vram_used),
        crate::domain::text::gib(s.vram_total)
    );
    let health = match s.health {
        Health::Ok => "ok",
        Health::Degraded => "warn",
        Health::Pending => "pending",
        Health::Stale => "STALE",
        Health::Down => "DOWN",
    };
    let reach = match (&r.down, s.apply.as_ref()) {
        (Some(d), _) => format!("DOWN: {d}"),
        (None, Some(a)) => format!("UNFINISHED APPLY {} step {}", a.fingerprint, a.step + 1),
        (None, None) => s.trouble.clone().unwrap_or_default(),
    };
    [
        r.name.clone(),
        product,
        format!("{} ×{}", s.modes, s.logical),
        format!("{busy} {spark}"),
        vram,
        format!("{}/{}", s.models_healthy, s.models_total),
        format!("{}w {}i", s.findings_warn, s.findings_info),
        format!("{health} {}", age(now, r.seen_ms.max(s.taken_at_ms))),
        reach,
    ]
}

/// `a` in the fleet and the cluster view: every node shown tagged; when every one of them
/// already is, all of them untagged.
pub fn tag_all_shown(tagged: &mut std::collections::BTreeSet<String>, shown: Vec<String>) {
    if shown.iter().all(|n| tagged.contains(n)) {
        for n in &shown {
            tagged.remove(n);
        }
    } else {
        tagged.extend(shown);
    }
}
