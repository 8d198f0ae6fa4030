//! Log: what partop logged (collector errors, actions), newest at the bottom, each record
//! word-wrapped under its text column, scrolled with the movement keys (it follows new lines
//! until scrolled back).

use crate::ui::scroll::Pane;
use crate::ui::state::State;
use crate::ui::theme::Theme;
use log::Level;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

/// `HH:MM:SS` (UTC) of a time in ms since epoch.
fn clock(ms: u64) -> String {
    let s = ms / 1000 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Draws the Log view.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(
            " Log · {} line{} · times UTC ",
            state.log.len(),
            if state.log.len() == 1 { "" } else { "s" }
        ))
        .border_style(theme.get("ui.border"));
    let inner = block.inner(area);
    let mut lines: Vec<Line<'static>> = Vec::new();
    for l in &state.log {
        let (word, style) = match l.level {
            Level::Error => ("ERROR", "status.crit"),
            Level::Warn => ("WARN ", "status.warn"),
            Level::Info => ("INFO ", "ui"),
            Level::Debug | Level::Trace => ("DEBUG", "ui.muted"),
        };
        let line = Line::from(vec![
            Span::styled(format!("{} ", clock(l.at_ms)), theme.get("ui.hint")),
            Span::styled(format!("{word} "), theme.get(style)),
            Span::styled(
                crate::domain::text::escape_controls(&l.text),
                theme.get(style),
            ),
        ]);
        lines.extend(super::fmt::hang(line, usize::from(inner.width), 15));
    }
    if lines.is_empty() {
        lines.push(Line::styled(
            "Nothing logged yet: collector errors and every action partop takes show here.",
            theme.get("ui.muted"),
        ));
    }
    let top = state.scroll.drawn(Pane::Log, lines.len(), inner.height);
    let block = if state.scroll.more_below(Pane::Log) {
        block.title_bottom(
            Line::styled(
                " ↓ newer lines below (End follows) ",
                theme.get("status.warn"),
            )
            .right_aligned(),
        )
    } else if top > 0 {
        block.title_bottom(
            Line::styled(" ↑ older lines (Up, PgUp, Home) ", theme.get("ui.hint")).right_aligned(),
        )
    } else {
        block
    };
    frame.render_widget(Paragraph::new(lines).block(block).scroll((top, 0)), area);
}

#[cfg(test)]
mod tests {
    #[test]
    fn clock_reads_utc() {
        assert_eq!(super::clock(1_763_000_000_000 + 61_000), "02:14:21");
    }
}
