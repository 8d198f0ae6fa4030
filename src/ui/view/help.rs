//! The help overlay, generated from the keymap and the command docs, so it cannot drift.

use super::fmt::cut;
use crate::ui::command::Command;
use crate::ui::keymap::Section;
use crate::ui::state::State;
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

/// Draws the overlay centred on `area`: one entry per command (all its keys), the current
/// view's section first; two columns when one does not fit.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let mut entries: Vec<(String, &'static str)> = Vec::new();
    let mut headings = Vec::new();
    for section in [state.view.section(), Section::Global] {
        let mut any = false;
        for c in Command::ALL {
            let keys = state.keymap.keys_for(section, *c);
            if keys.is_empty() {
                continue;
            }
            if !any {
                headings.push(entries.len());
                entries.push((format!("{} keys", section.name()), ""));
                any = true;
            }
            entries.push((keys.join(" "), c.doc()));
        }
    }
    let inner_h = usize::from(area.height.saturating_sub(4)).max(1);
    let cols = if entries.len() > inner_h && area.width >= 70 {
        2
    } else {
        1
    };
    let per_col = entries.len().div_ceil(cols);
    let w = area.width.min(if cols == 2 { 118 } else { 76 });
    let col_w = usize::from(w.saturating_sub(2)) / cols;
    let mut lines: Vec<Line<'_>> = Vec::new();
    for r in 0..per_col.min(inner_h) {
        let mut spans = Vec::new();
        for c in 0..cols {
            let Some((k, doc)) = entries.get(c * per_col + r) else {
                continue;
            };
            let text = if headings.contains(&(c * per_col + r)) {
                spans.push(Span::styled(
                    format!("{:<col_w$}", cut(k, col_w)),
                    theme.get("ui.title"),
                ));
                continue;
            } else {
                format!("{:<11} {doc}", cut(k, 11))
            };
            let t = cut(&text, col_w.saturating_sub(1));
            spans.push(Span::styled(
                format!("{:<11}", cut(k, 11)),
                theme.get("table.header"),
            ));
            spans.push(Span::raw(format!(
                "{:<width$}",
                t.chars().skip(11).collect::<String>(),
                width = col_w.saturating_sub(11)
            )));
        }
        lines.push(Line::from(spans));
    }
    let close = state
        .keymap
        .keys_for(Section::Help, Command::ToggleHelp)
        .join("/");
    lines.push(Line::styled(
        format!(
            "keymap {} · {close} closes · docs/keymap.md lists every command",
            state.keymap.preset
        ),
        theme.get("ui.hint"),
    ));
    let h = area
        .height
        .min(u16::try_from(lines.len() + 2).unwrap_or(u16::MAX));
    let rect = super::fmt::centered(area, w, h);
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" Help ")
                .border_style(theme.get("ui.border.focused")),
        ),
        rect,
    );
}
