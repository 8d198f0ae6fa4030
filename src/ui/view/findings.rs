//! Findings: what was seen, where, and for how long.

use crate::domain::findings::{Severity, duration};
use crate::ui::state::State;
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};

/// Draws the findings list.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" Findings ")
        .border_style(theme.get("ui.border"));
    if state.findings.is_empty() {
        let t = state.tracker.thresholds;
        let text = format!(
            "Nothing to report.\n\nWatching for: noisy neighbours (a partition at >= {:.0}% GFX while the device's HBM bandwidth is >= {:.0}% for {}, next to a busy sibling in the same memory domain) and idle partitions (>= {} held with GFX below 1% for {}).",
            t.hot_busy,
            t.hot_umc,
            duration(t.hot_after_ms),
            super::fmt::gib(t.idle_vram_bytes) + " GiB",
            duration(t.idle_after_ms)
        );
        frame.render_widget(
            Paragraph::new(text)
                .block(block)
                .style(theme.get("ui.muted"))
                .wrap(Wrap { trim: true }),
            area,
        );
        return;
    }
    let mut lines = Vec::new();
    for (i, f) in state.findings.iter().enumerate() {
        let (word, style) = match f.severity {
            Severity::Warn => ("WARN", theme.get("finding.warn")),
            Severity::Info => ("INFO", theme.get("finding.info")),
        };
        let kind = f.kind.label();
        let sel = if i == state.finding_sel {
            theme.get("table.row.selected")
        } else {
            theme.get("ui")
        };
        lines.push(Line::from(vec![
            Span::raw(super::fmt::mark(i == state.finding_sel)),
            Span::styled(format!("{word} "), style),
            Span::styled(
                if f.kind.about_a_process() {
                    format!(
                        "{kind} · {} · since {} ago",
                        f.subject,
                        duration(state.now_ms.saturating_sub(f.since_ms))
                    )
                } else {
                    format!(
                        "{kind} · GPU {} ({}) · since {} ago",
                        f.gpu_id,
                        f.subject,
                        duration(state.now_ms.saturating_sub(f.since_ms))
                    )
                },
                sel,
            ),
        ]));
        lines.push(Line::styled(
            format!("      {}", f.saw),
            theme.get("ui.hint"),
        ));
    }
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}
