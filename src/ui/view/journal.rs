//! The Journal view: every action partop took (newest first), who did it, and the outcome.

use super::fmt::cut;
use crate::ui::state::State;
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph};

/// Draws the journal.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" Journal (newest first; partop journal prints it all) ")
        .border_style(theme.get("ui.border"));
    let (entries, bad) = &state.journal;
    if entries.is_empty() && bad.is_empty() {
        frame.render_widget(
            Paragraph::new("No action has been journaled yet.")
                .block(block)
                .style(theme.get("ui.muted")),
            area,
        );
        return;
    }
    let w = usize::from(area.width.saturating_sub(2));
    let visible = usize::from(area.height.saturating_sub(2));
    let first = super::fmt::offset(state.journal_sel, visible);
    // An unfinished apply first, whole (wrapped), with the command that continues it.
    let mut lines: Vec<Line<'_>> = Vec::new();
    if let Some(u) = &state.unfinished {
        let text = format!("UNFINISHED APPLY {u}");
        for chunk in text.chars().collect::<Vec<_>>().chunks(w.max(1)) {
            lines.push(Line::styled(
                chunk.iter().collect::<String>(),
                theme.get("status.crit"),
            ));
        }
    }
    lines.extend(
        bad.iter()
            .map(|b| Line::styled(cut(b, w), theme.get("status.warn"))),
    );
    for (i, e) in entries
        .iter()
        .enumerate()
        .skip(first)
        .take(visible.saturating_sub(lines.len()))
    {
        let who = e
            .who
            .sudo_user
            .clone()
            .or_else(|| e.who.user.clone())
            .unwrap_or_else(|| format!("uid {}", e.who.uid));
        let sim = if e.simulated { " [sim]" } else { "" };
        let text = format!(
            "{}  {who}@{}  {}{sim}  {}  → {}",
            e.at, e.host, e.action, e.targets, e.outcome
        );
        let style = if i == state.journal_sel {
            theme.get("table.row.selected")
        } else {
            theme.get("ui")
        };
        lines.push(Line::styled(cut(&text, w), style));
    }
    frame.render_widget(Paragraph::new(lines).block(block), area);
}
