//! GPUs: every logical GPU as a row: index, identity (BDF.partition), XCDs, CUs, GFX busy with
//! its recent history, VRAM as a bar, CU occupancy, holders, what runs there, and the
//! device-wide power and temperature (on the device's first row only, marked *: the primary
//! partition on AMD, the first GPU instance of a MIG GPU).

use super::fmt::{bar, cut, gib, mark, offset, pct, spark};
use crate::domain::snapshot::{LogicalGpu, PhysicalGpu};
use crate::ui::state::{State, View};
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Row, Table};

/// A logical GPU's identity in the BDF column: `05:00.1` (AMD, the domain left out), or on a
/// MIG GPU `18:00.0/gi3` (the instance id whole, never cut).
fn row_id(bdf: &str) -> String {
    let (dev, inst) = bdf.split_once('/').unwrap_or((bdf, ""));
    let dev = match dev.split(':').collect::<Vec<_>>().as_slice() {
        [domain, bus, rest] if domain.chars().all(|c| c == '0') => format!("{bus}:{rest}"),
        _ => dev.to_string(),
    };
    if inst.is_empty() {
        dev
    } else {
        format!("{dev}/{inst}")
    }
}

/// The text of a logical GPU's row, cell by cell: what the table draws (with styles, a
/// sparkline and a gauge added) and what `/` matches.
struct Texts {
    idx: String,
    id: String,
    xcds: String,
    cus: String,
    gfx: String,
    vram: String,
    cu: String,
    holders: String,
    runs: String,
    pwr: String,
    temp: String,
}

impl Texts {
    /// The row of logical GPU `l` on physical GPU `g`.
    fn of(state: &State, g: &PhysicalGpu, l: &LogicalGpu) -> Self {
        let u = state.gpu_labels.get(&l.gpu_id).cloned().unwrap_or_default();
        let vram = match (l.vram_used_bytes, l.vram_capacity_bytes()) {
            (Some(a), Some(b)) => format!("{:>5}/{:<5}", gib(a), gib(b)),
            _ => "N/A".into(),
        };
        // Device-wide values on the device's first row: a MIG GPU's instances have no
        // partition 0, and its power and temperature still show.
        let first_row = g.partitions.first().is_some_and(|p| std::ptr::eq(p, l));
        let (pwr, temp) = if first_row {
            (
                g.power_watts
                    .map_or_else(|| "N/A".into(), |p| format!("{p:.0}W*")),
                g.hotspot_celsius
                    .map_or_else(|| "N/A".into(), |t| format!("{t:.0}°C*")),
            )
        } else {
            ("·".into(), "·".into())
        };
        let xcds = match (l.xcds.first(), l.xcds.last()) {
            (Some(a), Some(b)) if a == b => a.to_string(),
            (Some(a), Some(b)) => format!("{a}-{b}"),
            _ => "?".into(),
        };
        Self {
            idx: format!("{:>3}", l.gpu_id),
            id: row_id(&l.bdf),
            xcds,
            cus: l.cu_count.map_or_else(|| "N/A".into(), |c| c.to_string()),
            gfx: pct(l.gfx_busy_percent),
            vram,
            cu: pct(u.cu_percent),
            holders: u.holders.to_string(),
            runs: cut(if u.label.is_empty() { "—" } else { &u.label }, 40),
            pwr,
            temp,
        }
    }
}

/// Every word a logical GPU's row shows, at the widest layout: what `/` matches in GPUs.
pub fn words(state: &State, g: &PhysicalGpu, l: &LogicalGpu) -> Vec<String> {
    let t = Texts::of(state, g, l);
    vec![
        t.idx, t.id, t.xcds, t.cus, t.gfx, t.vram, t.cu, t.holders, t.runs, t.pwr, t.temp,
    ]
}

/// The VRAM gauge: the used fraction, in the style of its level.
fn vram_gauge(l: &LogicalGpu) -> (f64, &'static str) {
    let frac = match (l.vram_used_bytes, l.vram_capacity_bytes()) {
        #[expect(clippy::cast_precision_loss, reason = "ratio")]
        (Some(a), Some(b)) if b > 0 => a as f64 / b as f64,
        _ => 0.0,
    };
    let style = if frac > 0.9 {
        "gauge.high"
    } else if frac > 0.7 {
        "gauge.mid"
    } else {
        "gauge.low"
    };
    (frac, style)
}

/// One logical GPU's row: narrow, or with XCDs, CUs, CU%, power and temperature when wide.
fn row<'a>(
    state: &State,
    theme: &Theme,
    (g, l): (&PhysicalGpu, &LogicalGpu),
    selected: bool,
    wide: bool,
) -> Row<'a> {
    let t = Texts::of(state, g, l);
    let (frac, gauge) = vram_gauge(l);
    let hist = spark(&state.history.busy(&l.bdf), if wide { 16 } else { 8 });
    let mut cells = vec![
        Cell::from(Line::from(vec![
            Span::raw(mark(selected)),
            Span::styled(t.idx, theme.partition(l.gpu_id)),
        ])),
        Cell::from(t.id),
    ];
    if wide {
        cells.push(Cell::from(t.xcds));
        cells.push(Cell::from(t.cus));
    }
    cells.push(Cell::from(t.gfx));
    cells.push(Cell::from(Span::styled(hist, theme.get("sparkline"))));
    cells.push(Cell::from(Line::from(vec![
        Span::styled(bar(frac, if wide { 10 } else { 5 }), theme.get(gauge)),
        Span::raw(format!(" {}", t.vram)),
    ])));
    if wide {
        cells.push(Cell::from(t.cu));
    }
    cells.push(Cell::from(t.holders));
    cells.push(Cell::from(t.runs));
    if wide {
        cells.push(Cell::from(t.pwr));
        cells.push(Cell::from(t.temp));
    }
    let style = theme.get(if selected { "table.row.selected" } else { "ui" });
    Row::new(cells).style(style)
}

/// The header and column widths, narrow or wide; `id_width` fits the BDF column.
fn columns(wide: bool, id_width: u16) -> (Vec<&'static str>, Vec<Constraint>) {
    let l = Constraint::Length;
    if wide {
        (
            vec![
                " IDX",
                "BDF.P",
                "XCD",
                "CUs",
                "GFX",
                "GFX history",
                "VRAM GiB used/own",
                "CU%",
                "H",
                "RUNS",
                "PWR*",
                "TEMP*",
            ],
            vec![
                l(4),
                l(id_width),
                l(4),
                l(4),
                l(5),
                l(16),
                l(23),
                l(5),
                l(2),
                Constraint::Min(12),
                l(6),
                l(6),
            ],
        )
    } else {
        (
            vec![" IDX", "BDF.P", "GFX", "history", "VRAM GiB", "H", "RUNS"],
            vec![
                l(4),
                l(id_width),
                l(5),
                l(8),
                l(18),
                l(2),
                Constraint::Min(8),
            ],
        )
    }
}

/// Draws the GPU table: the logical GPUs `/` keeps, in amd-smi order.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let Some(snap) = &state.snapshot else { return };
    let wide = area.width >= 120;
    let visible = usize::from(area.height.saturating_sub(3));
    let order = state.order(View::Gpus);
    let at = order.iter().position(|i| *i == state.gpu_sel).unwrap_or(0);
    let first = offset(at, visible);
    state.hits.rows(crate::ui::hit::Rows {
        y: area.y + 2,
        height: u16::try_from(visible).unwrap_or(0),
        x: (area.x + 1, area.right().saturating_sub(1)),
        first,
        stride: 1,
    });
    // A MIG instance's id (`18:00.0/gi13`) needs more than an AMD partition's (`05:00.1`).
    let id_width: u16 = if snap.gpus.iter().any(|g| g.mig.is_some()) {
        12
    } else {
        9
    };
    let logical: Vec<_> = snap.logical().collect();
    let rows: Vec<Row<'_>> = order
        .iter()
        .skip(first)
        .take(visible)
        .filter_map(|i| Some((*i, *logical.get(*i)?)))
        .map(|(i, gl)| row(state, theme, gl, i == state.gpu_sel, wide))
        .collect();
    let (header, widths) = columns(wide, id_width);
    let filter = state.filter_of(View::Gpus);
    let shown = if filter.is_empty() {
        String::new()
    } else {
        format!(" · {} shown · filter {filter:?}", order.len())
    };
    let title = format!(
        " GPUs: {} logical on {} physical{shown} · * device-wide, shown on the primary partition ",
        snap.logical_count(),
        snap.gpus.len()
    );
    let t = Table::new(rows, widths)
        .header(Row::new(header).style(theme.get("table.header")))
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(cut(&title, usize::from(area.width.saturating_sub(2))))
                .border_style(theme.get("ui.border")),
        );
    frame.render_widget(t, area);
}

#[cfg(test)]
mod tests {
    use super::row_id;

    #[test]
    fn a_row_names_the_partition_or_the_mig_instance_whole() {
        let cases = [
            ("0000:05:00.1", "05:00.1"),
            ("0000:05:00.0", "05:00.0"),
            ("00000000:18:00.0/gi1", "18:00.0/gi1"),
            ("00000000:18:00.0/gi13", "18:00.0/gi13"),
            ("0000:00:06.0", "00:06.0"),
        ];
        for (bdf, want) in cases {
            assert_eq!(row_id(bdf), want, "{bdf}");
        }
    }
}
