//! Overview: every physical GPU as a partition map, labelled with what runs on each logical GPU
//! and its load; modes, power and temperature (device-wide, marked *). Cards in a grid when the
//! terminal is large, two lines per GPU when it is small. A node of one or two logical GPUs
//! uses the rest of the screen for the selected GPU's last ten minutes and the busiest
//! processes (the History view's charts).

use super::fmt::{gib, pct, spark};
use super::partition_map::PartitionMap;
use crate::domain::snapshot::PhysicalGpu;
use crate::ui::state::State;
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

fn title(i: usize, g: &PhysicalGpu) -> String {
    let modes = g.modes_label();
    let power = g
        .power_watts
        .map_or_else(|| "N/A".into(), |p| format!("{p:.0}W"));
    let temp = g
        .hotspot_celsius
        .map_or_else(|| "N/A".into(), |t| format!("{t:.0}°C"));
    let short = g.product.trim_start_matches("AMD Instinct ");
    format!(
        "GPU{i} {} {short} {modes} {power}* {temp}*",
        g.bdf.trim_start_matches("0000:")
    )
}

/// Draws the overview.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let Some(snap) = &state.snapshot else {
        frame.render_widget(Paragraph::new("No data yet: the first sample is on its way. If it takes long, see the Log view (6).").style(theme.get("ui.muted")), area);
        return;
    };
    if snap.gpus.is_empty() {
        frame.render_widget(
            Paragraph::new(
                "No GPUs reported. Check the header for the source's error, or the Log view (6).",
            )
            .style(theme.get("status.warn")),
            area,
        );
        return;
    }
    let compact = area.height < 30 || area.width < 100;
    // A node of few logical GPUs (one H100, an SPX MI300X) fills the screen the map leaves
    // with the selected GPU's last ten minutes and the busiest processes.
    let map_h = map_height(snap, area, compact);
    if snap.logical_count() <= FEW && area.height >= map_h + SMALL_NODE_MIN {
        let [map, rest] =
            Layout::vertical([Constraint::Length(map_h), Constraint::Min(0)]).areas(area);
        render_map(frame, map, state, theme, compact);
        small_node(frame, rest, state, theme);
        return;
    }
    render_map(frame, area, state, theme, compact);
}

/// Logical GPUs up to which the overview charts below the map.
const FEW: usize = 2;

/// Rows the charts and processes need below the map.
const SMALL_NODE_MIN: u16 = 8;

/// Rows the map takes: three lines per GPU compact, else its rows of cards.
fn map_height(snap: &crate::domain::Snapshot, area: Rect, compact: bool) -> u16 {
    let n = u16::try_from(snap.gpus.len()).unwrap_or(u16::MAX);
    if compact {
        return n.saturating_mul(3);
    }
    let cols = (usize::from(area.width) / 84).clamp(1, 4);
    let card_w = area.width / u16::try_from(cols).unwrap_or(1);
    let per_line = (usize::from(card_w.saturating_sub(2)) / 40).max(1);
    let row_h = snap
        .gpus
        .iter()
        .map(|g| 4 + u16::try_from(g.partitions.len().div_ceil(per_line)).unwrap_or(8))
        .max()
        .unwrap_or(6);
    row_h.saturating_mul(u16::try_from(snap.gpus.len().div_ceil(cols)).unwrap_or(u16::MAX))
}

/// The selected logical GPU's charts and the node's busiest processes.
fn small_node(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let Some(snap) = &state.snapshot else { return };
    let Some((g, l)) = snap.logical().nth(state.gpu_sel) else {
        return;
    };
    let chart_h = (area.height / 2).clamp(6, 12);
    let [charts, rest] =
        Layout::vertical([Constraint::Length(chart_h), Constraint::Min(0)]).areas(area);
    let [busy, vram] = super::history::gpu_series(state, l);
    let [power, temp] = super::history::device_series(state, g);
    super::history::charts_row(frame, charts, &[busy, vram, power, temp], state, theme);
    let mut ps: Vec<&crate::domain::snapshot::Process> = snap
        .processes
        .iter()
        .filter(|p| !p.gpus.is_empty())
        .collect();
    ps.sort_by(|a, b| {
        b.gpu_busy_percent()
            .unwrap_or(-1.0)
            .total_cmp(&a.gpu_busy_percent().unwrap_or(-1.0))
            .then(b.vram_total().cmp(&a.vram_total()))
    });
    let mut lines = vec![Line::from(Span::styled(
        format!(
            "{:>8} {:<14} busiest processes: GPU busy, last 10 min (9 History for more)",
            "PID", "PROCESS"
        ),
        theme.get("table.header"),
    ))];
    if ps.is_empty() {
        lines.push(Line::from(Span::styled(
            "no process holds a GPU",
            theme.get("ui.muted"),
        )));
    }
    ps.truncate(usize::from(rest.height.saturating_sub(1)));
    lines.extend(super::history::process_lines(state, &ps, rest.width, theme));
    frame.render_widget(Paragraph::new(lines), rest);
}

/// The partition map: a card per GPU, or three lines each when `compact`.
fn render_map(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme, compact: bool) {
    let Some(snap) = &state.snapshot else { return };
    let selected_bdf = snap
        .logical()
        .nth(state.gpu_sel)
        .map(|(g, _)| g.bdf.clone());
    let sel_id = snap.logical().nth(state.gpu_sel).map(|(_, l)| l.gpu_id);
    if compact {
        render_compact(frame, area, state, theme, selected_bdf.as_deref());
        return;
    }
    let cols = (usize::from(area.width) / 84).clamp(1, 4);
    let card_w = area.width / u16::try_from(cols).unwrap_or(1);
    let per_line = (usize::from(card_w.saturating_sub(2)) / 40).max(1);
    let heights: Vec<u16> = snap
        .gpus
        .iter()
        .map(|g| 4 + u16::try_from(g.partitions.len().div_ceil(per_line)).unwrap_or(8))
        .collect();
    let row_h = heights.iter().copied().max().unwrap_or(6);
    let sel_gpu = snap
        .gpus
        .iter()
        .position(|g| Some(&g.bdf) == selected_bdf.as_ref())
        .unwrap_or(0);
    let rows_fit = usize::from(area.height / row_h).max(1);
    let first_row = (sel_gpu / cols).saturating_sub(rows_fit - 1);
    for (i, g) in snap.gpus.iter().enumerate() {
        let r = i / cols;
        if r < first_row || r >= first_row + rows_fit {
            continue;
        }
        let c = i % cols;
        let rect = Rect {
            x: area.x + card_w * u16::try_from(c).unwrap_or(0),
            y: area.y + row_h * u16::try_from(r - first_row).unwrap_or(0),
            width: card_w,
            height: row_h,
        };
        let focused = Some(&g.bdf) == selected_bdf.as_ref();
        let block = Block::default()
            .borders(Borders::ALL)
            .title(format!(
                " {}{}{} ",
                if focused { "▶ " } else { "" },
                if state.tagged_gpus.contains(&g.bdf) {
                    "+tagged "
                } else {
                    ""
                },
                title(i, g)
            ))
            .border_style(if focused {
                theme.get("ui.border.focused")
            } else {
                theme.get("ui.border")
            });
        let inner = block.inner(rect);
        frame.render_widget(block, rect);
        let mut map = PartitionMap::from_gpu(g, theme);
        map.selected = sel_id;
        frame.render_widget(
            &map,
            Rect {
                height: 2.min(inner.height),
                ..inner
            },
        );
        let mut lines = Vec::new();
        let cell = usize::from(inner.width) / per_line;
        for chunk in g.partitions.chunks(per_line) {
            let mut spans = Vec::new();
            for l in chunk {
                let label = state
                    .gpu_labels
                    .get(&l.gpu_id)
                    .map_or_else(|| "idle".to_string(), |u| u.label.clone());
                let vram = match (l.vram_used_bytes, l.vram_capacity_bytes()) {
                    (Some(u), Some(c)) => format!("{}/{}GiB", gib(u), gib(c)),
                    _ => "N/A".into(),
                };
                let head = format!("{:>2} ", l.gpu_id);
                let body = format!(
                    "{} {:>4} {} {}",
                    super::fmt::cut(&label, cell.saturating_sub(29).max(4)),
                    pct(l.gfx_busy_percent),
                    spark(&state.history.busy(&l.bdf), 5),
                    vram
                );
                let style = if Some(l.gpu_id) == sel_id {
                    theme.get("table.row.selected")
                } else {
                    theme.get("ui")
                };
                spans.push(Span::styled(head, theme.partition(l.gpu_id)));
                let text = format!("{}{body}", super::fmt::mark(Some(l.gpu_id) == sel_id));
                let pad = cell.saturating_sub(3 + text.chars().count());
                spans.push(Span::styled(text, style));
                spans.push(Span::raw(" ".repeat(pad)));
            }
            lines.push(Line::from(spans));
        }
        let rest = Rect {
            y: inner.y + 2,
            height: inner.height.saturating_sub(2),
            ..inner
        };
        frame.render_widget(Paragraph::new(lines), rest);
    }
}

fn render_compact(
    frame: &mut Frame<'_>,
    area: Rect,
    state: &State,
    theme: &Theme,
    selected: Option<&str>,
) {
    let Some(snap) = &state.snapshot else { return };
    let sel_id = snap.logical().nth(state.gpu_sel).map(|(_, l)| l.gpu_id);
    // Three lines per GPU (title, XCDs, HBM) when they fit, else two (HBM summarised).
    let per: u16 = if usize::from(area.height) >= snap.gpus.len() * 3 {
        3
    } else {
        2
    };
    let fit = usize::from(area.height / per).max(1);
    let sel = snap
        .gpus
        .iter()
        .position(|g| Some(g.bdf.as_str()) == selected)
        .unwrap_or(0);
    let first = sel.saturating_sub(fit - 1);
    for (row, (i, g)) in snap
        .gpus
        .iter()
        .enumerate()
        .skip(first)
        .take(fit)
        .enumerate()
    {
        let y = area.y + per * u16::try_from(row).unwrap_or(0);
        let focused = Some(g.bdf.as_str()) == selected;
        let tagged = state.tagged_gpus.contains(&g.bdf);
        // The selection and tags are marked in characters, not only colour: `▶` the GPU
        // holding the selected logical GPU, `+` a tagged one.
        let mut spans = vec![
            Span::styled(
                format!(
                    "{}{}",
                    if focused { "▶" } else { " " },
                    if tagged { "+" } else { " " }
                ),
                theme.get(if tagged { "status.warn" } else { "ui.title" }),
            ),
            Span::styled(
                title(i, g),
                if focused {
                    theme
                        .get("ui.border.focused")
                        .add_modifier(ratatui::style::Modifier::REVERSED)
                } else {
                    theme.get("ui.title")
                },
            ),
        ];
        for l in &g.partitions {
            let label = state.gpu_labels.get(&l.gpu_id).map(|u| u.label.clone());
            let is_sel = Some(l.gpu_id) == sel_id;
            if label.is_none() && !is_sel {
                continue;
            }
            spans.push(Span::raw(" "));
            let text = format!(
                "{}:{} {}",
                l.gpu_id,
                label.unwrap_or_else(|| "idle".into()),
                pct(l.gfx_busy_percent)
            );
            spans.push(if is_sel {
                Span::styled(format!("[{text}]"), theme.get("table.row.selected"))
            } else {
                Span::styled(text, theme.get("ui"))
            });
        }
        frame.render_widget(
            Paragraph::new(super::fmt::fit(spans, usize::from(area.width))),
            Rect {
                x: area.x,
                y,
                width: area.width,
                height: 1,
            },
        );
        let mut map = PartitionMap::from_gpu(g, theme);
        map.selected = sel_id;
        // Two-line layout: leave room for the HBM summary after the map.
        let map_w = if per == 2 {
            area.width.saturating_sub(15).min(76)
        } else {
            area.width.min(76)
        };
        frame.render_widget(
            &map,
            Rect {
                x: area.x,
                y: y + 1,
                width: map_w,
                height: per - 1,
            },
        );
        if per == 2 && area.width > map_w + 2 {
            let n_dom = g.memory_partition.map_or(1, |m| m.domains());
            let mem = format!(" HBM {} domain{}", n_dom, if n_dom == 1 { "" } else { "s" });
            frame.render_widget(
                Paragraph::new(mem).style(theme.get("ui.muted")),
                Rect {
                    x: area.x + map_w,
                    y: y + 1,
                    width: area.width - map_w,
                    height: 1,
                },
            );
        }
    }
    if snap.gpus.len() > fit {
        let more = format!(
            "{}-{} of {} GPUs (↓/↑ to scroll)",
            first + 1,
            (first + fit).min(snap.gpus.len()),
            snap.gpus.len()
        );
        let y = area.y + area.height.saturating_sub(1);
        let w = u16::try_from(more.chars().count())
            .unwrap_or(0)
            .min(area.width);
        frame.render_widget(
            Paragraph::new(more).style(theme.get("ui.hint")),
            Rect {
                x: area.x + area.width - w,
                y,
                width: w,
                height: 1,
            },
        );
    }
}
