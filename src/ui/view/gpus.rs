//! GPUs: every logical GPU as a row: index, identity (BDF.partition), XCDs, CUs, GFX busy with
//! its recent history, VRAM as a bar, CU occupancy, holders, what runs there, and the
//! device-wide power and temperature (on the device's first row only, marked *: the primary
//! partition on AMD, the first GPU instance of a MIG GPU).

use super::fmt::{bar, cut, gib, mark, offset, pct, spark};
use crate::ui::state::State;
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

/// Draws the GPU table.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let Some(snap) = &state.snapshot else { return };
    let wide = area.width >= 120;
    let visible = usize::from(area.height.saturating_sub(3));
    let first = offset(state.gpu_sel, visible);
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
    let mut rows = Vec::new();
    for (i, (g, l)) in snap.logical().enumerate().skip(first).take(visible) {
        let u = state.gpu_labels.get(&l.gpu_id).cloned().unwrap_or_default();
        let cap = l.vram_capacity_bytes();
        let frac = match (l.vram_used_bytes, cap) {
            #[expect(clippy::cast_precision_loss, reason = "ratio")]
            (Some(a), Some(b)) if b > 0 => a as f64 / b as f64,
            _ => 0.0,
        };
        let gauge = if frac > 0.9 {
            "gauge.high"
        } else if frac > 0.7 {
            "gauge.mid"
        } else {
            "gauge.low"
        };
        let vram_text = match (l.vram_used_bytes, cap) {
            (Some(a), Some(b)) => format!("{:>5}/{:<5}", gib(a), gib(b)),
            _ => "N/A".into(),
        };
        let hist = spark(&state.history.busy(&l.bdf), if wide { 16 } else { 8 });
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
        let mut cells = vec![
            Cell::from(Line::from(vec![
                Span::raw(mark(i == state.gpu_sel)),
                Span::styled(format!("{:>3}", l.gpu_id), theme.partition(l.gpu_id)),
            ])),
            Cell::from(row_id(&l.bdf)),
        ];
        if wide {
            let xcds = match (l.xcds.first(), l.xcds.last()) {
                (Some(a), Some(b)) if a == b => a.to_string(),
                (Some(a), Some(b)) => format!("{a}-{b}"),
                _ => "?".into(),
            };
            cells.push(Cell::from(xcds));
            cells.push(Cell::from(
                l.cu_count.map_or_else(|| "N/A".into(), |c| c.to_string()),
            ));
        }
        cells.push(Cell::from(pct(l.gfx_busy_percent)));
        cells.push(Cell::from(Span::styled(hist, theme.get("sparkline"))));
        cells.push(Cell::from(Line::from(vec![
            Span::styled(bar(frac, if wide { 10 } else { 5 }), theme.get(gauge)),
            Span::raw(format!(" {vram_text}")),
        ])));
        if wide {
            cells.push(Cell::from(pct(u.cu_percent)));
        }
        cells.push(Cell::from(u.holders.to_string()));
        cells.push(Cell::from(cut(
            if u.label.is_empty() { "—" } else { &u.label },
            40,
        )));
        if wide {
            cells.push(Cell::from(pwr));
            cells.push(Cell::from(temp));
        }
        let style = if i == state.gpu_sel {
            theme.get("table.row.selected")
        } else {
            theme.get("ui")
        };
        rows.push(Row::new(cells).style(style));
    }
    let (header, widths): (Vec<&str>, Vec<Constraint>) = if wide {
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
                Constraint::Length(4),
                Constraint::Length(id_width),
                Constraint::Length(4),
                Constraint::Length(4),
                Constraint::Length(5),
                Constraint::Length(16),
                Constraint::Length(23),
                Constraint::Length(5),
                Constraint::Length(2),
                Constraint::Min(12),
                Constraint::Length(6),
                Constraint::Length(6),
            ],
        )
    } else {
        (
            vec![" IDX", "BDF.P", "GFX", "history", "VRAM GiB", "H", "RUNS"],
            vec![
                Constraint::Length(4),
                Constraint::Length(id_width),
                Constraint::Length(5),
                Constraint::Length(8),
                Constraint::Length(18),
                Constraint::Length(2),
                Constraint::Min(8),
            ],
        )
    };
    let title = format!(
        " GPUs: {} logical on {} physical · * device-wide, shown on the primary partition ",
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
