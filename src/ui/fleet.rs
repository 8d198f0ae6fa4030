//! The fleet view: one row per node (host and product, modes and logical GPUs, GFX busy and
//! VRAM with a spark, models healthy of total, findings by severity, source health and data
//! age, reachability with the reason), the fleet's totals in the header, sorted, filtered and
//! tagged. Its own small state and reducer, keys through the same keymap (section `fleet`) and
//! Command enum as the monitor; rows come in as messages from the transports.

use super::command::Command;
use super::keymap::{Key, Keymap, Resolve, Section};
use super::theme::Theme;
use crate::domain::fleet::NodeSummary;
use crate::domain::snapshot::Health;
use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table};

/// One node as the view keeps it.
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
}

/// Sort columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetSort {
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
    const ORDER: [Self; 5] = [
        Self::Name,
        Self::Busy,
        Self::Findings,
        Self::Age,
        Self::Logical,
    ];

    /// Its label.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Name => "node",
            Self::Busy => "GFX",
            Self::Findings => "findings",
            Self::Age => "age",
            Self::Logical => "logical GPUs",
        }
    }
}

/// What the fleet view asks the loop for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetEffect {
    /// Leave.
    Quit,
    /// Open the monitor's views on this node's live stream.
    Open(String),
    /// Stage a change on these nodes: plan on each, show, one typed confirmation, roll out.
    Stage(Vec<String>),
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
    pending: Vec<Key>,
}

impl FleetState {
    /// A view of `rows`.
    pub fn new(rows: Vec<NodeRow>, keymap: Keymap, via: String, refresh: u32) -> Self {
        let mut s = Self {
            rows,
            order: Vec::new(),
            sel: 0,
            sort: FleetSort::Name,
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
        self.rows.push(NodeRow {
            name: name.to_string(),
            connecting: true,
            ..NodeRow::default()
        });
        self.rows.len() - 1
    }

    /// The selected node's name.
    pub fn selected(&self) -> Option<&str> {
        self.order
            .get(self.sel)
            .map(|i| self.rows[*i].name.as_str())
    }

    /// Recomputes the shown order (filter, sort); the selection stays on its node.
    pub fn derive(&mut self) {
        let keep = self.selected().map(str::to_string);
        let needle = self.filter.to_lowercase();
        let mut idx: Vec<usize> = (0..self.rows.len())
            .filter(|i| {
                let r = &self.rows[*i];
                needle.is_empty()
                    || r.name.to_lowercase().contains(&needle)
                    || r.summary.as_ref().is_some_and(|s| {
                        s.modes.to_lowercase().contains(&needle)
                            || s.products
                                .iter()
                                .any(|p| p.to_lowercase().contains(&needle))
                    })
                    || r.down
                        .as_ref()
                        .is_some_and(|d| d.to_lowercase().contains(&needle))
            })
            .collect();
        let rows = &self.rows;
        let now = self.now_ms;
        let key = |i: &usize| -> (i64, String) {
            let r = &rows[*i];
            let s = r.summary.as_ref();
            #[expect(clippy::cast_possible_truncation, reason = "percent x 10")]
            let v = match self.sort {
                FleetSort::Name => 0,
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
            };
            (v, r.name.clone())
        };
        idx.sort_by_key(key);
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

/// The reducer.
pub fn update(s: &mut FleetState, k: &KeyEvent) -> Vec<FleetEffect> {
    if k.kind == KeyEventKind::Release {
        return Vec::new();
    }
    if s.editing {
        match k.code {
            KeyCode::Enter => s.editing = false,
            KeyCode::Esc => {
                s.editing = false;
                s.filter.clear();
            }
            KeyCode::Backspace => {
                s.filter.pop();
            }
            KeyCode::Char(c) => s.filter.push(c),
            _ => {}
        }
        s.sel = 0;
        s.derive();
        return Vec::new();
    }
    let Some(key) = Key::from_event(k) else {
        return Vec::new();
    };
    s.pending.push(key);
    let c = match s.keymap.resolve(&[Section::Fleet], &s.pending) {
        Resolve::Command(c) => c,
        Resolve::Pending => return Vec::new(),
        Resolve::Unbound => {
            s.pending.clear();
            return Vec::new();
        }
    };
    s.pending.clear();
    command(s, c)
}

/// A command in the fleet view.
pub fn command(s: &mut FleetState, c: Command) -> Vec<FleetEffect> {
    let last = s.order.len().saturating_sub(1);
    let page = usize::from(s.size.1.saturating_sub(8)).max(1);
    match c {
        Command::Quit => return vec![FleetEffect::Quit],
        Command::ToggleHelp => s.help = !s.help,
        Command::SelectNext => s.sel = (s.sel + 1).min(last),
        Command::SelectPrev => s.sel = s.sel.saturating_sub(1),
        Command::PageDown => s.sel = (s.sel + page).min(last),
        Command::PageUp => s.sel = s.sel.saturating_sub(page),
        Command::Top => s.sel = 0,
        Command::Bottom => s.sel = last,
        Command::CycleSort => {
            let i = FleetSort::ORDER
                .iter()
                .position(|x| *x == s.sort)
                .unwrap_or(0);
            s.sort = FleetSort::ORDER[(i + 1) % FleetSort::ORDER.len()];
            s.desc = matches!(
                s.sort,
                FleetSort::Busy | FleetSort::Findings | FleetSort::Logical
            );
            s.derive();
        }
        Command::ReverseSort => {
            s.desc = !s.desc;
            s.derive();
        }
        Command::Filter => s.editing = true,
        Command::TagNode => {
            if let Some(n) = s.selected().map(str::to_string)
                && !s.tagged.remove(&n)
            {
                s.tagged.insert(n);
            }
            s.sel = (s.sel + 1).min(last);
        }
        Command::StageChange => {
            let nodes: Vec<String> = if s.tagged.is_empty() {
                s.selected().map(str::to_string).into_iter().collect()
            } else {
                s.tagged.iter().cloned().collect()
            };
            if !nodes.is_empty() {
                return vec![FleetEffect::Stage(nodes)];
            }
        }
        Command::OpenDetail => {
            if let Some(n) = s.selected()
                && s.rows.iter().any(|r| r.name == n && r.summary.is_some())
            {
                return vec![FleetEffect::Open(n.to_string())];
            }
        }
        Command::Cancel => {
            if s.help {
                s.help = false;
            } else if !s.filter.is_empty() {
                s.filter.clear();
                s.derive();
            }
        }
        _ => {}
    }
    Vec::new()
}

fn gib(b: u64) -> String {
    crate::domain::text::gib(b)
}

fn age(now: u64, at: u64) -> String {
    let s = now.saturating_sub(at) / 1000;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        _ => format!("{}h", s / 3600),
    }
}

/// The cells of one row (shared by the screen and `--once`).
fn cells(r: &NodeRow, now: u64, spark_w: usize) -> [String; 9] {
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
    let spark = super::view::fmt::spark(&r.gfx_history, spark_w);
    // GiB, said in the column's title (the one unit convention).
    let vram = format!("{}/{}", gib(s.vram_used), gib(s.vram_total));
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

const HEADS: [&str; 9] = [
    "NODE", "PRODUCT", "MODES", "GFX", "VRAM GiB", "MODELS", "FINDINGS", "DATA", "STATE",
];

/// The fleet as plain text (`partop fleet --once`).
pub fn table_text(rows: &[NodeRow]) -> String {
    let t = totals(rows);
    let now = crate::collect::clock::now_ms();
    let mut o = format!(
        "nodes reporting {} of {} · {} logical GPUs · {} idle partitions · {} unfinished applies\n",
        t.reporting, t.nodes, t.logical, t.idle, t.unfinished
    );
    let all: Vec<[String; 9]> = rows.iter().map(|r| cells(r, now, 0)).collect();
    let mut w = HEADS.map(str::len);
    for c in &all {
        for (i, x) in c.iter().enumerate().take(8) {
            w[i] = w[i].max(x.chars().count());
        }
    }
    let line = |c: &[String]| {
        let mut l = String::new();
        for (i, x) in c.iter().enumerate() {
            if i < 8 {
                l.push_str(&format!("{x:<width$}  ", width = w[i]));
            } else {
                l.push_str(x);
            }
        }
        l.trim_end().to_string() + "\n"
    };
    o.push_str(&line(&HEADS.map(str::to_string)));
    for c in &all {
        o.push_str(&line(c));
    }
    o
}

/// Draws the fleet view.
pub fn render(frame: &mut Frame<'_>, s: &FleetState, theme: &Theme) {
    let area = frame.area();
    frame.render_widget(Block::default().style(theme.get("ui")), area);
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    let t = totals(&s.rows);
    let w = usize::from(area.width);
    let narrow = area.width < 120;
    let first = vec![
        Span::styled(
            if narrow { " fleet " } else { " partop fleet " },
            theme.get("ui.title"),
        ),
        Span::raw(if narrow {
            format!(
                " nodes reporting {} of {} · {} logical · {} idle · ",
                t.reporting, t.nodes, t.logical, t.idle
            )
        } else {
            format!(
                " nodes reporting {} of {} · {} logical GPUs · {} idle partitions · ",
                t.reporting, t.nodes, t.logical, t.idle
            )
        }),
        Span::styled(
            format!("{} unfinished applies", t.unfinished),
            theme.get(if t.unfinished > 0 {
                "status.crit"
            } else {
                "ui"
            }),
        ),
    ];
    let mut second = vec![Span::styled(
        format!(
            " via {} · nodes sample every {}s · sort {}{}",
            s.via,
            s.refresh,
            s.sort.label(),
            if s.desc { "▼" } else { "▲" }
        ),
        theme.get("ui.muted"),
    )];
    if t.mismatched > 0 {
        second.push(Span::styled(
            format!(" · {} partitions did not come up", t.mismatched),
            theme.get("status.crit"),
        ));
    }
    if !s.tagged.is_empty() {
        second.push(Span::styled(
            format!(" · tagged {}", s.tagged.len()),
            theme.get("status.warn"),
        ));
    }
    if !s.filter.is_empty() {
        second.push(Span::styled(
            format!(" · filter {:?}", s.filter),
            theme.get("status.warn"),
        ));
    }
    frame.render_widget(
        Paragraph::new(vec![
            super::view::fmt::fit(first, w),
            super::view::fmt::fit(second, w),
        ]),
        head,
    );
    let wide = area.width >= 140;
    let spark_w = if wide { 10 } else { 0 };
    // The selected node's state in full under the table (the column cuts it with `…`).
    let [body, sel_area] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(2)]).areas(body);
    // Width left for STATE, the last column.
    let fixed: u16 = if wide {
        18 + 10 + 18 + 16 + 14 + 6 + 8 + 9 + 8
    } else {
        14 + 14 + 5 + 11 + 6 + 7 + 6
    };
    let state_w = usize::from(body.width.saturating_sub(2 + fixed)).max(4);
    let visible = usize::from(body.height.saturating_sub(3));
    let off = super::view::fmt::offset(s.sel, visible);
    let mut rows = Vec::new();
    for (pos, i) in s.order.iter().enumerate().skip(off).take(visible) {
        let r = &s.rows[*i];
        let mut c = cells(r, s.now_ms, spark_w);
        let mark = format!(
            "{}{}",
            if pos == s.sel { "▶" } else { " " },
            if s.tagged.contains(&r.name) { "+" } else { " " }
        );
        c[0] = format!(
            "{mark}{}",
            super::view::fmt::cut(&c[0], if wide { 16 } else { 12 })
        );
        c[8] = super::view::fmt::cut(&c[8], state_w);
        let style = if pos == s.sel {
            theme.get("table.row.selected")
        } else if r.down.is_some() {
            theme.get("status.crit")
        } else if r
            .summary
            .as_ref()
            .is_some_and(|x| x.findings_warn > 0 || x.apply.is_some())
        {
            theme.get("status.warn")
        } else {
            theme.get("ui")
        };
        let cols: Vec<Cell<'_>> = if wide {
            c.into_iter().map(Cell::from).collect()
        } else {
            // 80 columns: node, modes, GFX, VRAM, models, findings, state.
            [0, 2, 3, 4, 5, 6, 8]
                .into_iter()
                .map(|k| Cell::from(c[k].clone()))
                .collect()
        };
        rows.push(Row::new(cols).style(style));
    }
    let (widths, heads): (Vec<Constraint>, Vec<&str>) = if wide {
        (
            vec![
                Constraint::Length(18),
                Constraint::Length(10),
                Constraint::Length(18),
                Constraint::Length(16),
                Constraint::Length(14),
                Constraint::Length(6),
                Constraint::Length(8),
                Constraint::Length(9),
                Constraint::Min(10),
            ],
            HEADS.to_vec(),
        )
    } else {
        (
            vec![
                Constraint::Length(14),
                Constraint::Length(14),
                Constraint::Length(5),
                Constraint::Length(11),
                Constraint::Length(6),
                Constraint::Length(7),
                Constraint::Min(8),
            ],
            vec![
                "NODE", "MODES", "GFX", "VRAM GiB", "MODELS", "FINDS", "STATE",
            ],
        )
    };
    frame.render_widget(
        Table::new(rows, widths)
            .header(Row::new(heads).style(theme.get("table.header")))
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(format!(
                        " Nodes: {} of {} shown ",
                        s.order.len(),
                        s.rows.len()
                    ))
                    .border_style(theme.get("ui.border")),
            ),
        body,
    );
    if let Some(i) = s.order.get(s.sel) {
        let r = &s.rows[*i];
        let c = cells(r, s.now_ms, 0);
        let text = if c[8].is_empty() {
            format!("{}: reporting", r.name)
        } else {
            format!("{}: {}", r.name, c[8])
        };
        let lines = super::view::fmt::hang(
            Line::styled(
                text,
                theme.get(if r.down.is_some() {
                    "status.crit"
                } else {
                    "ui.muted"
                }),
            ),
            usize::from(sel_area.width),
            2,
        );
        frame.render_widget(Paragraph::new(lines), sel_area);
    }
    let hint = if s.editing {
        format!(" filter: {}▏  Enter keep · Esc clear", s.filter)
    } else {
        " ↑↓ select · enter open node · space tag · p stage a change on the tagged nodes · s sort · / filter · q quit".into()
    };
    frame.render_widget(
        Paragraph::new(super::view::fmt::fit(
            vec![Span::styled(hint, theme.get("ui.hint"))],
            w,
        )),
        foot,
    );
    if s.help {
        let lines: Vec<Line<'_>> = Command::ALL
            .iter()
            .filter_map(|c| {
                let k = s.keymap.keys_for(Section::Fleet, *c);
                (!k.is_empty()).then(|| Line::raw(format!("{:<14} {}", k.join(" "), c.doc())))
            })
            .collect();
        super::view::fmt::dialog(frame, area, "Fleet keys", lines, theme);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    fn key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    #[test]
    fn keys_sort_tag_filter_and_stage() {
        let (km, e) = Keymap::load("default", None, false);
        assert!(e.is_empty(), "{e:?}");
        let rows = ["b", "a", "c"]
            .iter()
            .map(|n| NodeRow {
                name: (*n).to_string(),
                ..NodeRow::default()
            })
            .collect();
        let mut s = FleetState::new(rows, km, "ssh".into(), 1);
        assert_eq!(s.selected(), Some("a"), "sorted by name");
        assert_eq!(update(&mut s, &key(' ')), []);
        assert!(s.tagged.contains("a"));
        assert_eq!(
            update(&mut s, &key('p')),
            [FleetEffect::Stage(vec!["a".into()])]
        );
        update(&mut s, &key('/'));
        update(&mut s, &key('c'));
        assert_eq!(s.order.len(), 1);
        // Read only: staging is gone from the keys.
        let (km, _) = Keymap::load("default", None, true);
        let mut r = FleetState::new(Vec::new(), km, "ssh".into(), 1);
        assert_eq!(update(&mut r, &key('p')), []);
    }
}
