//! History: ten minutes of the selected logical GPU as charts (busy, VRAM, and its physical
//! GPU's power and temperature) and of the processes on it (GPU busy over time, now, VRAM);
//! drawn from `State::history`. The chart helpers here also draw Detail's charts and the
//! overview of a node with few GPUs.

use super::fmt::{cut, gib, spark};
use crate::domain::history::{KEEP_MS, Metric, Points};
use crate::domain::snapshot::{LogicalGpu, PhysicalGpu, Process, Snapshot};
use crate::ui::state::State;
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Borders, Chart, Dataset, GraphType, Paragraph};

/// One chart: a title, its points and the top of its scale.
pub struct Series {
    /// Title with the value now (`busy 42%`).
    pub title: String,
    /// The points, x in ms since the oldest sample kept.
    pub points: Points,
    /// Top of the y scale.
    pub top: f64,
    /// Unit shown on the scale.
    pub unit: &'static str,
}

/// Draws `s` as a line chart over the last ten minutes, newest at the right edge.
pub fn chart(frame: &mut Frame<'_>, area: Rect, s: &Series, span_ms: u64, theme: &Theme) {
    #[expect(clippy::cast_precision_loss, reason = "ms within ten minutes")]
    let (right, left) = (span_ms as f64, span_ms as f64 - KEEP_MS as f64);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.get("ui.border"))
        .title(Span::styled(
            format!(" {} ", s.title),
            theme.get("ui.title"),
        ));
    if s.points.is_empty() {
        frame.render_widget(
            Paragraph::new("no samples yet")
                .style(theme.get("ui.muted"))
                .block(block),
            area,
        );
        return;
    }
    let data = [Dataset::default()
        .marker(Marker::Braille)
        .graph_type(GraphType::Line)
        .style(theme.get("sparkline"))
        .data(&s.points)];
    let top = s.top.max(1.0);
    let c = Chart::new(data.to_vec())
        .block(block)
        .x_axis(
            Axis::default()
                .bounds([left, right])
                .style(theme.get("ui.hint"))
                .labels(["-10m", "-5m", "now"]),
        )
        .y_axis(
            Axis::default()
                .bounds([0.0, top])
                .style(theme.get("ui.hint"))
                .labels([format!("0{}", s.unit), format!("{top:.0}{}", s.unit)]),
        );
    frame.render_widget(c, area);
}

fn last(p: &Points) -> Option<f64> {
    p.last().map(|(_, v)| *v)
}

/// The largest value of `p` with headroom, at least `floor`.
fn top_of(p: &Points, floor: f64) -> f64 {
    p.iter().map(|(_, v)| *v).fold(floor, f64::max) * 1.1
}

/// Busy and VRAM of a logical GPU.
pub fn gpu_series(state: &State, l: &LogicalGpu) -> [Series; 2] {
    let h = &state.history;
    let busy = h.logical(&l.bdf, Metric::Busy);
    let vram: Points = h
        .logical(&l.bdf, Metric::Vram)
        .into_iter()
        .map(|(t, b)| (t, b / f64::from(1u32 << 30)))
        .collect();
    #[expect(clippy::cast_precision_loss, reason = "GiB for a scale")]
    let cap = l
        .vram_capacity_bytes()
        .map_or_else(|| top_of(&vram, 1.0), |b| b as f64 / f64::from(1u32 << 30));
    [
        Series {
            title: titled("busy", &busy, |v| format!("{v:.0}%")),
            points: busy,
            top: 100.0,
            unit: "%",
        },
        Series {
            title: titled("VRAM", &vram, |v| format!("{v:.1} GiB")),
            points: vram,
            top: cap,
            unit: "G",
        },
    ]
}

/// A chart's title: its name and the last value, or N/A when there is none yet.
fn titled(name: &str, points: &Points, value: impl Fn(f64) -> String) -> String {
    format!(
        "{name} {}",
        last(points).map_or_else(|| "N/A".into(), value)
    )
}

/// Power and temperature of a physical GPU.
pub fn device_series(state: &State, g: &PhysicalGpu) -> [Series; 2] {
    let h = &state.history;
    let power = h.physical(&g.bdf, Metric::Power);
    let temp = h.physical(&g.bdf, Metric::Temp);
    [
        Series {
            title: titled("power", &power, |v| format!("{v:.0} W")),
            top: g.power_cap_watts.unwrap_or_else(|| top_of(&power, 100.0)),
            points: power,
            unit: "W",
        },
        Series {
            title: titled("temperature", &temp, |v| format!("{v:.0} °C")),
            top: top_of(&temp, 90.0),
            points: temp,
            unit: "°",
        },
    ]
}

/// GPU busy and VRAM of a process.
pub fn process_series(state: &State, p: &Process) -> [Series; 2] {
    let h = &state.history;
    let busy = h.process(p, Metric::Busy);
    let vram: Points = h
        .process(p, Metric::Vram)
        .into_iter()
        .map(|(t, b)| (t, b / f64::from(1u32 << 30)))
        .collect();
    [
        Series {
            title: titled("GPU busy", &busy, |v| format!("{v:.0}%")),
            points: busy,
            top: 100.0,
            unit: "%",
        },
        Series {
            title: titled("VRAM", &vram, |v| format!("{v:.1} GiB")),
            top: top_of(&vram, 1.0),
            points: vram,
            unit: "G",
        },
    ]
}

/// Draws the charts side by side in `area`.
pub fn charts_row(
    frame: &mut Frame<'_>,
    area: Rect,
    series: &[Series],
    state: &State,
    theme: &Theme,
) {
    #[expect(clippy::cast_possible_truncation, reason = "a handful of charts")]
    let n = series.len().max(1) as u32;
    let cols = Layout::horizontal(vec![Constraint::Ratio(1, n); series.len()]).split(area);
    for (s, a) in series.iter().zip(cols.iter()) {
        chart(frame, *a, s, state.history.span_ms(), theme);
    }
}

/// `p` squeezed into `width` buckets over the last ten minutes (each the bucket's highest
/// value: a short burst stays visible), for a sparkline.
pub fn fit(p: &Points, span_ms: u64, width: usize) -> Vec<u64> {
    #[expect(clippy::cast_precision_loss, reason = "ms within ten minutes")]
    let (right, left) = (span_ms as f64, span_ms as f64 - KEEP_MS as f64);
    let mut out: Vec<Option<f64>> = vec![None; width];
    if width == 0 {
        return Vec::new();
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a bucket index within width"
    )]
    for (t, v) in p {
        let i = (((t - left) / (right - left)) * width as f64)
            .floor()
            .max(0.0) as usize;
        let b = &mut out[i.min(width - 1)];
        *b = Some(b.map_or(*v, |x| x.max(*v)));
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "0..=100"
    )]
    out.into_iter()
        .skip_while(Option::is_none)
        .map(|v| v.unwrap_or(0.0).round() as u64)
        .collect()
}

/// The processes on logical GPU `gpu_id`, busiest first.
fn on_gpu(snap: &Snapshot, gpu_id: u32) -> Vec<&Process> {
    let mut ps: Vec<&Process> = snap
        .processes
        .iter()
        .filter(|p| p.gpus.iter().any(|u| u.gpu_id == gpu_id))
        .collect();
    ps.sort_by(|a, b| {
        b.gpu_busy_percent()
            .unwrap_or(-1.0)
            .total_cmp(&a.gpu_busy_percent().unwrap_or(-1.0))
            .then(b.vram_total().cmp(&a.vram_total()))
    });
    ps
}

/// A process's line without its sparkline: pid, model or name, GPU busy now, VRAM.
fn texts(p: &Process) -> [String; 4] {
    [
        format!("{:>8} ", p.pid),
        format!("{:<14} ", cut(&State::label_of(p), 14)),
        format!(
            " {:>4} ",
            p.gpu_busy_percent()
                .map_or("N/A".into(), |v| format!("{v:.0}%"))
        ),
        format!(
            "{:>7}",
            p.vram_total_bytes()
                .map_or("N/A".into(), |b| format!("{}G", gib(b)))
        ),
    ]
}

/// Every word a process's line in History shows: what `/` matches there.
pub fn words(p: &Process) -> Vec<String> {
    texts(p).iter().map(|t| t.trim().to_string()).collect()
}

/// One line per process: pid, name, a sparkline of its GPU busy over ten minutes, now, VRAM.
pub fn process_lines<'a>(
    state: &State,
    ps: &[&Process],
    width: u16,
    theme: &Theme,
) -> Vec<Line<'a>> {
    let spark_w = usize::from(width.saturating_sub(44)).clamp(10, 120);
    ps.iter()
        .map(|p| {
            let busy = state.history.process(p, Metric::Busy);
            let s = spark(&fit(&busy, state.history.span_ms(), spark_w), spark_w);
            let [pid, label, now, vram] = texts(p);
            Line::from(vec![
                Span::styled(pid, theme.get("ui")),
                Span::styled(label, theme.get("ui")),
                Span::styled(s, theme.get("sparkline")),
                Span::styled(now, theme.get("ui")),
                Span::styled(vram, theme.get("ui.muted")),
            ])
        })
        .collect()
}

/// Draws the History view for the selected logical GPU.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let Some(snap) = &state.snapshot else { return };
    let Some((g, l)) = snap.logical().nth(state.gpu_sel) else {
        frame.render_widget(
            Paragraph::new("No GPU to chart.").style(theme.get("ui.muted")),
            area,
        );
        return;
    };
    let h = &state.history;
    let title = format!(
        " History · GPU {} · {} · {} samples of {} ({} KiB kept for the node) · ↑↓ another GPU ",
        l.gpu_id,
        l.bdf,
        h.len(),
        h.capacity(),
        h.sample_bytes().div_ceil(1024),
    );
    let outer = Block::default()
        .borders(Borders::TOP)
        .border_style(theme.get("ui.border"))
        .title(Span::styled(title, theme.get("ui.title")));
    let inner = outer.inner(area);
    frame.render_widget(outer, area);
    let chart_h = if inner.height >= 30 {
        inner.height / 3
    } else {
        (inner.height / 2).max(3)
    };
    let [top, mid, rest] = Layout::vertical([
        Constraint::Length(chart_h),
        Constraint::Length(chart_h),
        Constraint::Min(0),
    ])
    .areas(inner);
    charts_row(frame, top, &gpu_series(state, l), state, theme);
    charts_row(frame, mid, &device_series(state, g), state, theme);
    if rest.height >= 2 {
        // `/` keeps the processes whose line shows the text (the GPUs are stepped through all).
        let filter = state.filter_of(crate::ui::state::View::History);
        let mut ps = on_gpu(snap, l.gpu_id);
        ps.retain(|p| crate::ui::filter::keeps(filter, &words(p)));
        let said = if filter.is_empty() {
            String::new()
        } else {
            format!(" · filter {filter:?}")
        };
        let mut lines = vec![Line::from(Span::styled(
            format!(
                "{:>8} {:<14} GPU busy, last 10 min (the busiest first){said}",
                "PID", "PROCESS"
            ),
            theme.get("table.header"),
        ))];
        if ps.is_empty() {
            lines.push(Line::from(Span::styled(
                if filter.is_empty() {
                    "no process on this GPU".to_string()
                } else {
                    format!("no process on this GPU shows {filter:?}")
                },
                theme.get("ui.muted"),
            )));
        }
        lines.extend(process_lines(state, &ps, rest.width, theme));
        frame.render_widget(Paragraph::new(lines), rest);
    }
}
