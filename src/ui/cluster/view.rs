//! The cluster view, drawn from `&ClusterState`: the cluster's totals, one row per GPU node
//! (worst first; only the rows that fit are built, so a thousand nodes cost a screenful), the
//! cluster's signals worst first, a node's detail over them, the keys. Every string from the
//! API server is escaped here, on its way to the screen.

use super::state::{ClusterState, Detail, cells, totals};
use crate::domain::text::escape_controls as esc;
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, Wrap};

const HEADS: [&str; 6] = [
    "NODE",
    "LAYOUT",
    // 23 characters: whole in the column's 24 at 80 columns (tested below).
    "GPU RESOURCES alloc/cap",
    "PODS",
    "SIG",
    "STATE",
];

/// Draws the cluster view.
pub fn render(frame: &mut Frame<'_>, s: &ClusterState, theme: &Theme) {
    let area = frame.area();
    frame.render_widget(Block::default().style(theme.get("ui")), area);
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    header(frame, head, s, theme);
    if let Some(d) = &s.detail {
        detail(frame, body, s, d, theme);
    } else if s.help {
        help(frame, body, theme);
    } else {
        let sig_h = u16::try_from(s.shown_signals.len())
            .unwrap_or(u16::MAX)
            .saturating_add(2)
            .min(body.height / 3)
            .max(3);
        let [table_area, sig_area] =
            Layout::vertical([Constraint::Min(3), Constraint::Length(sig_h)]).areas(body);
        table(frame, table_area, s, theme);
        signals(frame, sig_area, s, theme);
    }
    footer(frame, foot, s, theme);
    if let Some(st) = &s.stage {
        super::stage_view::render(frame, area, st, theme);
    }
}

fn header(frame: &mut Frame<'_>, area: Rect, s: &ClusterState, theme: &Theme) {
    let t = totals(s);
    let res: Vec<String> = t
        .resources
        .iter()
        .map(|(n, (a, c))| format!("{} {a}/{c}", esc(n)))
        .collect();
    let first = Line::from(vec![
        Span::styled(" partop cluster ", theme.get("ui.title")),
        Span::raw(format!(
            " {} GPU nodes · {} ready · {} cordoned · {} · GPU pods {} running, {} pending · {} signals",
            t.nodes,
            t.ready,
            t.cordoned,
            if res.is_empty() {
                "no GPU resources".into()
            } else {
                res.join(" ")
            },
            t.running,
            t.pending,
            s.signals.len()
        )),
    ]);
    let second = match (&s.trouble, s.listed) {
        (Some(t), _) => Line::styled(format!(" {}", esc(t)), theme.get("status.crit")),
        (None, false) => Line::styled(
            format!(" listing nodes and pods from {}…", esc(&s.via)),
            theme.get("ui.muted"),
        ),
        (None, true) => Line::styled(
            format!(" {} · by watch", esc(&s.via)),
            theme.get("ui.muted"),
        ),
    };
    frame.render_widget(Paragraph::new(vec![first, second]), area);
}

/// The first row shown so that `sel` is on screen, `h` rows at a time.
fn window(sel: usize, len: usize, h: usize) -> usize {
    if h == 0 || len <= h {
        return 0;
    }
    sel.saturating_sub(h / 2).min(len - h)
}

fn table(frame: &mut Frame<'_>, area: Rect, s: &ClusterState, theme: &Theme) {
    let h = usize::from(area.height.saturating_sub(3));
    let first = window(s.sel, s.order.len(), h);
    let rows: Vec<Row<'_>> = s
        .order
        .iter()
        .enumerate()
        .skip(first)
        .take(h)
        .map(|(pos, i)| {
            let r = &s.rows[*i];
            let style = if pos == s.sel {
                theme.get("table.row.selected")
            } else if r.ready != Some(true) {
                theme.get("status.crit")
            } else if r.signals > 0 || r.cordoned {
                theme.get("status.warn")
            } else {
                theme.get("ui")
            };
            let mut c = cells(r);
            // The tag mark, as in the fleet view.
            c[0] = format!(
                "{}{}",
                if s.tagged.contains(&r.name) {
                    "* "
                } else {
                    "  "
                },
                c[0]
            );
            Row::new(c.map(|c| Cell::from(esc(&c).into_owned()))).style(style)
        })
        .collect();
    let mut title = if s.filter.is_empty() {
        format!(" nodes ({}", s.order.len())
    } else {
        format!(" nodes ({} of {}", s.order.len(), s.rows.len())
    };
    if !s.tagged.is_empty() {
        title.push_str(&format!(" · {} tagged", s.tagged.len()));
    }
    title.push_str(") ");
    let t = Table::new(
        rows,
        [
            Constraint::Min(18),
            Constraint::Length(12),
            Constraint::Min(24),
            Constraint::Length(4),
            Constraint::Length(4),
            Constraint::Min(8),
        ],
    )
    .header(Row::new(HEADS).style(theme.get("table.header")))
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title(title)
            .border_style(theme.get("ui.border")),
    );
    frame.render_widget(t, area);
}

fn signals(frame: &mut Frame<'_>, area: Rect, s: &ClusterState, theme: &Theme) {
    let h = usize::from(area.height.saturating_sub(2));
    let mut lines: Vec<Line<'_>> = s
        .shown_signals
        .iter()
        .take(h)
        .map(|i| {
            let sig = &s.signals[*i];
            let style = if sig.severity() <= 1 {
                theme.get("status.crit")
            } else {
                theme.get("status.warn")
            };
            Line::styled(format!("! {}", esc(&sig.text())), style)
        })
        .collect();
    if s.shown_signals.len() > h && h > 0 {
        lines.truncate(h - 1);
        lines.push(Line::styled(
            format!(
                "… {} more (/ filters them)",
                s.shown_signals.len() - (h - 1)
            ),
            theme.get("ui.muted"),
        ));
    }
    if lines.is_empty() && s.listed {
        lines.push(Line::styled("none", theme.get("status.ok")));
    }
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(
                    " signals, worst first ({}) ",
                    s.shown_signals.len()
                ))
                .border_style(theme.get("ui.border")),
        ),
        area,
    );
}

/// A node's detail: every label, its GPU resources, cordon and taints, the pods on its GPUs,
/// its signals, and its live detail when it came.
pub fn detail_lines(s: &ClusterState, d: &Detail) -> Vec<String> {
    let mut o = Vec::new();
    let Some(n) = s.node(&d.node) else {
        o.push(format!(
            "{}: gone from the cluster (deleted, or no longer has GPU resources)",
            d.node
        ));
        return o;
    };
    o.push(format!(
        "ready: {} · cordoned: {} · taints: {}",
        n.ready
            .map_or("not reported", |r| if r { "yes" } else { "NO" }),
        if n.unschedulable { "yes" } else { "no" },
        if n.taints.is_empty() {
            "none".into()
        } else {
            n.taints.join(", ")
        }
    ));
    o.push("GPU resources (allocatable/capacity):".into());
    for (r, c) in &n.capacity {
        o.push(format!(
            "  {r} {}/{c}",
            n.allocatable.get(r).copied().unwrap_or(0)
        ));
    }
    o.push("labels:".into());
    for (k, v) in &n.labels {
        o.push(format!("  {k}={v}"));
    }
    let pods: Vec<_> = s
        .pods
        .iter()
        .filter(|p| p.node.as_deref() == Some(n.name.as_str()))
        .collect();
    o.push(format!("GPU pods ({}):", pods.len()));
    for p in pods {
        let req: Vec<String> = p.requests.iter().map(|(r, k)| format!("{r} {k}")).collect();
        o.push(format!(
            "  {}/{} {} {}",
            p.namespace,
            p.name,
            p.phase,
            req.join(" ")
        ));
    }
    let sig: Vec<_> = s
        .signals
        .iter()
        .filter(|x| x.node() == Some(n.name.as_str()))
        .collect();
    o.push(format!("signals ({}):", sig.len()));
    for x in sig {
        o.push(format!("  ! {}", x.text()));
    }
    match &d.live {
        None => o.push("live: asking the node's partop serve…".into()),
        Some(Err(e)) => o.push(format!("live: {e}")),
        Some(Ok(lines)) => {
            o.push("live (partop serve on the node):".into());
            o.extend(lines.iter().map(|l| format!("  {l}")));
        }
    }
    o
}

fn detail(frame: &mut Frame<'_>, area: Rect, s: &ClusterState, d: &Detail, theme: &Theme) {
    let lines: Vec<Line<'_>> = detail_lines(s, d)
        .into_iter()
        .map(|l| Line::raw(esc(&l).into_owned()))
        .collect();
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" {} · Esc: back ", esc(&d.node)))
                .border_style(theme.get("ui.border")),
        ),
        area,
    );
}

fn help(frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
    let lines = [
        "↑↓ PgUp PgDn Home End: select a node",
        "Enter: the node's detail (labels, resources, pods, signals, live from its partop serve)",
        "/: filter nodes and signals by any word shown (Enter keeps it, Esc clears it)",
        "space: tag or untag the node · a: tag every node shown (again: untag them)",
        "p: roll out a layout on the tagged nodes (or the selected one) through the cluster: type cpx_nps4 (DCM) or a MIG config name, review the plan, type its fingerprint (not offered read only)",
        "Esc: close · q: quit",
        "Rows: not ready first, then nodes with signals, then cordoned, then by name.",
    ];
    frame.render_widget(
        Paragraph::new(lines.map(Line::raw).to_vec()).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" keys ")
                .border_style(theme.get("ui.border")),
        ),
        area,
    );
}

fn footer(frame: &mut Frame<'_>, area: Rect, s: &ClusterState, theme: &Theme) {
    let line = if s.editing {
        Line::styled(format!(" /{}▏", esc(&s.filter)), theme.get("ui.hint"))
    } else if let Some(n) = &s.notice {
        Line::styled(format!(" {}", esc(n)), theme.get("status.warn"))
    } else {
        let f = if s.filter.is_empty() {
            String::new()
        } else {
            format!(" filter: {} ·", esc(&s.filter))
        };
        let stage = if s
            .keymap
            .keys_for(
                crate::ui::keymap::Section::Fleet,
                crate::ui::command::Command::StageChange,
            )
            .is_empty()
        {
            ""
        } else {
            "p roll out on the tagged · "
        };
        Line::styled(
            format!(
                "{f} ↑↓ select · enter node detail · space tag · a tag shown · {stage}/ filter · ? help · q quit"
            ),
            theme.get("ui.hint"),
        )
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// A node's live detail as lines: the fleet's row of it (`ui::fleet::cells`, the same words
/// the fleet view shows for a node), one `COLUMN: value` a line.
pub fn live_lines(row: &crate::domain::fleet::NodeSummary, now_ms: u64) -> Vec<String> {
    const COLUMNS: [&str; 9] = [
        "node", "product", "modes", "GFX", "VRAM GiB", "models", "findings", "data", "state",
    ];
    let r = crate::ui::fleet::NodeRow {
        name: row.host.clone(),
        seen_ms: row.taken_at_ms,
        summary: Some(row.clone()),
        ..crate::ui::fleet::NodeRow::default()
    };
    COLUMNS
        .iter()
        .zip(crate::ui::fleet::cells(&r, now_ms, 0))
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| format!("{k}: {v}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::cluster::ClusterNode;
    use ratatui::{Terminal, backend::TestBackend};

    /// Every column's head is drawn whole at every width from 80 to 200 columns (121 widths):
    /// the resources head was cut at 80 (`GPU RESOURCES (alloc/cap` with no close).
    #[test]
    fn every_column_head_is_whole_from_80_columns() {
        let (km, _) = crate::ui::keymap::Keymap::load("default", None, true);
        let mut s = ClusterState::new(km, "test".into());
        let nodes = vec![ClusterNode {
            name: "gpu-node-with-a-long-name-0001".into(),
            capacity: [("amd.com/gpu".to_string(), 8)].into(),
            allocatable: [("amd.com/gpu".to_string(), 8)].into(),
            ready: Some(true),
            ..ClusterNode::default()
        }];
        s.set_view(nodes, Vec::new());
        let theme = Theme::load("default", std::path::Path::new("/nonexistent")).0;
        let mut widths = 0;
        for w in 80..=200u16 {
            let mut t = Terminal::new(TestBackend::new(w, 24)).unwrap();
            t.draw(|f| render(f, &s, &theme)).unwrap();
            let text: String = t
                .backend()
                .buffer()
                .content()
                .iter()
                .map(ratatui::buffer::Cell::symbol)
                .collect();
            for h in HEADS {
                assert!(text.contains(h), "{w} columns: {h:?} cut");
            }
            widths += 1;
        }
        assert_eq!(widths, 121);
    }
}
