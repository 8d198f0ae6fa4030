//! The fleet view, drawn from `&FleetState`: the fleet's totals, one row per node (the node
//! name keeps the width it needs, cut in the middle only past it), the selected node's state
//! in full, the keys that apply here, and a staged change's dialog over it. Also the plain
//! table of `--once`.

use super::state::{FleetState, NodeRow, Phase, cells, totals};
use crate::ui::command::Command;
use crate::ui::keymap::Section;
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table};

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
            crate::ui::view::fmt::fit(first, w),
            crate::ui::view::fmt::fit(second, w),
        ]),
        head,
    );
    let wide = area.width >= 140;
    let spark_w = if wide { 10 } else { 0 };
    // The selected node's state in full under the table (the column cuts it with `…`).
    let [body, sel_area] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(2)]).areas(body);
    // The node name first: it keeps the width it needs, up to what leaves STATE its least.
    let others: u16 = if wide {
        10 + 18 + 16 + 14 + 6 + 8 + 9 + 8
    } else {
        14 + 5 + 11 + 6 + 7 + 6
    };
    let name_w = node_width(s, body.width.saturating_sub(2), others, wide);
    // Width left for STATE, the last column.
    let state_w = usize::from(body.width.saturating_sub(2 + others + name_w)).max(4);
    let visible = usize::from(body.height.saturating_sub(3));
    let off = crate::ui::view::fmt::offset(s.sel, visible);
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
            crate::ui::view::fmt::cut_middle(&c[0], usize::from(name_w.saturating_sub(2)))
        );
        c[8] = crate::ui::view::fmt::cut(&c[8], state_w);
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
                Constraint::Length(name_w),
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
                Constraint::Length(name_w),
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
        let lines = crate::ui::view::fmt::hang(
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
    let (hint, style) = if s.editing {
        (
            format!(" filter: {}▏  Enter keep · Esc clear", s.filter),
            "ui.hint",
        )
    } else if let Some(n) = &s.notice {
        (format!(" {n}"), "status.warn")
    } else {
        (hints(s), "ui.hint")
    };
    frame.render_widget(
        Paragraph::new(crate::ui::view::fmt::fit(
            vec![Span::styled(hint, theme.get(style))],
            w,
        )),
        foot,
    );
    if s.help {
        let lines: Vec<Line<'_>> = Command::ALL
            .iter()
            .filter(|c| **c != Command::StageChange || s.changeable())
            .filter_map(|c| {
                let k = s.keymap.keys_for(Section::Fleet, *c);
                (!k.is_empty()).then(|| Line::raw(format!("{:<14} {}", k.join(" "), c.doc())))
            })
            .collect();
        crate::ui::view::fmt::dialog(frame, area, "Fleet keys", lines, theme);
    }
    if let Some(st) = &s.stage {
        stage(frame, area, st, theme);
    }
}

/// The NODE column's width (with its two marks): what the longest name needs, at least the
/// column's old width, at most what leaves STATE eight columns.
fn node_width(s: &FleetState, inner: u16, others: u16, wide: bool) -> u16 {
    let least: u16 = if wide { 18 } else { 14 };
    let need = s
        .rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(0)
        .saturating_add(2);
    let most = inner.saturating_sub(others + 8).max(least);
    u16::try_from(need).unwrap_or(u16::MAX).clamp(least, most)
}

/// The keys that apply here: `p` only where a change can go.
fn hints(s: &FleetState) -> String {
    let stage = s.changeable()
        && !s
            .keymap
            .keys_for(Section::Fleet, Command::StageChange)
            .is_empty();
    format!(
        " ↑↓ select · enter open node · space tag · {}s sort · / filter · q quit",
        if stage {
            "p stage a change on the tagged nodes · "
        } else {
            ""
        }
    )
}

/// A staged change's dialog: the modes asked, what every node's plan says, the set's
/// fingerprint typed (the confirmation of one node's apply, `ui::confirm`), the rollout node by
/// node, how it ended.
fn stage(frame: &mut Frame<'_>, area: Rect, st: &super::state::FleetStage, theme: &Theme) {
    let rect = crate::ui::view::fmt::centered(
        area,
        area.width.min(110),
        area.height.saturating_sub(2).max(3),
    );
    frame.render_widget(Clear, rect);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" Stage a change on {} node(s) ", st.nodes.len()))
        .border_style(theme.get("danger"));
    let inner = block.inner(rect);
    frame.render_widget(block, rect);
    let w = usize::from(inner.width);
    let hang = |l: Line<'static>| crate::ui::view::fmt::hang(l, w, 4);
    let mode = |m: Option<String>| m.unwrap_or_else(|| "keep".into());
    let mut head: Vec<Line<'static>> = hang(Line::styled(
        format!("nodes: {}", st.nodes.join(", ")),
        theme.get("ui"),
    ));
    head.push(Line::styled(
        format!(
            "compute {} · memory {}",
            mode(st.compute.map(|m| m.to_string())),
            mode(st.memory.map(|m| m.to_string()))
        ),
        theme.get("ui.title"),
    ));
    let mut bottom: Vec<Line<'static>> = Vec::new();
    if let Some(n) = &st.notice {
        bottom.extend(hang(Line::styled(n.clone(), theme.get("status.warn"))));
    }
    match (&st.phase, &st.staged, &st.confirming) {
        (Phase::Choose, _, _) => {
            bottom.extend(hang(Line::styled(
                "Every node plans its own change (partop plan there); you review every plan, then type the set's fingerprint to roll it out node by node.",
                theme.get("ui.muted"),
            )));
            bottom.push(Line::styled(
                "c compute · m memory · enter plan on every node · esc cancel",
                theme.get("ui.hint"),
            ));
        }
        (Phase::Planning, _, _) => bottom.push(Line::styled(
            format!("planning on {} node(s)…", st.nodes.len()),
            theme.get("status.warn"),
        )),
        (Phase::Review, Some(set), Some(c)) => bottom.extend(crate::ui::view::stage::typed_prompt(
            c,
            format!(
                "Type the set's fingerprint ({}) to roll it out on these {} node(s): ",
                set.fingerprint,
                st.nodes.len()
            ),
            "enter rolls out · esc goes back",
            theme,
            w,
        )),
        (Phase::Review, _, _) => bottom.push(Line::styled(
            "enter: confirm (you will type the set's fingerprint) · esc cancel",
            theme.get("danger"),
        )),
        (Phase::Rolling, _, _) => bottom.push(Line::styled(
            "rolling out node by node… (the first failure stops it)",
            theme.get("status.warn"),
        )),
        (Phase::Done(r), _, _) => {
            bottom.extend(hang(match r {
                Ok(()) => Line::styled(
                    "rolled out and verified on every node",
                    theme.get("status.ok"),
                ),
                // The child's last lines, as it wrote them: escaped as every outside string is.
                Err(e) => Line::styled(
                    crate::domain::text::escape_controls(e).into_owned(),
                    theme.get("status.crit"),
                ),
            }));
            bottom.push(Line::styled(
                "enter or esc: back to the fleet",
                theme.get("ui.hint"),
            ));
        }
    }
    let body: Vec<Line<'static>> = st
        .log
        .iter()
        .flat_map(|l| hang(Line::styled(l.clone(), theme.get("ui"))))
        .collect();
    let hh = u16::try_from(head.len()).unwrap_or(0).min(inner.height);
    let bh = u16::try_from(bottom.len())
        .unwrap_or(0)
        .min(inner.height.saturating_sub(hh));
    let [head_r, body_r, tail_r] = Layout::vertical([
        Constraint::Length(hh),
        Constraint::Min(0),
        Constraint::Length(bh),
    ])
    .areas(inner);
    frame.render_widget(Paragraph::new(head), head_r);
    // The newest lines: what the rollout says last is what the operator acts on.
    let skip = body.len().saturating_sub(usize::from(body_r.height));
    frame.render_widget(
        Paragraph::new(body.into_iter().skip(skip).collect::<Vec<_>>()),
        body_r,
    );
    frame.render_widget(Paragraph::new(bottom), tail_r);
}
