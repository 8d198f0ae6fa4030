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

/// What the marks and colours on the screens mean: each in the style the views draw it in.
fn legend(theme: &Theme, inner_w: usize) -> Vec<Line<'static>> {
    let key_w = 14;
    let marks: [(&str, &str, &str); 11] = [
        (
            "▶",
            "ui",
            "the selected row or GPU: what Enter, K, c and the model keys act on",
        ),
        (
            "+",
            "status.warn",
            "tagged: K acts on every tagged process, c stages every tagged GPU",
        ),
        (
            "*name",
            "ui",
            "a process holding the GPU that amd-smi does not list (Processes)",
        ),
        (
            "PWR* TEMP*",
            "ui",
            "device-wide, shown on the primary partition only (GPUs)",
        ),
        (
            "@name",
            "ui",
            "a node agent (exporter, device plugin, gpuagent): it holds /dev/kfd",
        ),
        ("(3)", "ui", "the count of findings, on the Findings tab"),
        ("ok", "status.ok", "healthy, fresh"),
        (
            "warn",
            "status.warn",
            "a warning: a finding, a model starting, a value late",
        ),
        (
            "critical",
            "status.crit",
            "down, failed, or a node half changed",
        ),
        (
            "stale",
            "status.stale",
            "data older than it should be: the source is not answering",
        ),
        (
            "▁▃▅█",
            "sparkline",
            "recent GFX busy, oldest on the left; bars: VRAM used",
        ),
    ];
    let mut lines = vec![Line::styled("legend", theme.get("ui.title"))];
    for (mark, scope, what) in marks {
        let line = Line::from(vec![
            Span::styled(format!("{:<key_w$}", cut(mark, key_w)), theme.get(scope)),
            Span::raw(" "),
            Span::raw(what),
        ]);
        lines.extend(super::fmt::hang(line, inner_w, key_w + 1));
    }
    lines
}

/// Draws the overlay centred on `area`, as wide as the screen allows (up to 120): one entry
/// per command with all its keys, the current view's section first, each doc wrapped under
/// its column; it scrolls with the movement keys when it is taller than the screen.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let w = area.width.saturating_sub(4).clamp(20, 120).min(area.width);
    let inner_w = usize::from(w.saturating_sub(2));
    let key_w = 14;
    let mut lines: Vec<Line<'static>> = Vec::new();
    for section in [state.view.section(), Section::Global] {
        let mut any = false;
        for c in Command::ALL {
            let keys = state.keymap.keys_for(section, *c);
            if keys.is_empty() {
                continue;
            }
            if !any {
                lines.push(Line::styled(
                    format!("{} keys", section.name()),
                    theme.get("ui.title"),
                ));
                any = true;
            }
            let k = keys.join(" ");
            let line = Line::from(vec![
                Span::styled(
                    format!("{:<key_w$} ", cut(&k, key_w)),
                    theme.get("table.header"),
                ),
                Span::raw(c.doc()),
            ]);
            lines.extend(super::fmt::hang(line, inner_w, key_w + 1));
        }
    }
    lines.extend(legend(theme, inner_w));
    let close = state
        .keymap
        .keys_for(Section::Help, Command::ToggleHelp)
        .join("/");
    lines.extend(super::fmt::hang(
        Line::styled(
            format!(
                "keymap {} · {close} closes · Up/Down scroll · docs/keymap.md lists every command",
                state.keymap.preset
            ),
            theme.get("ui.hint"),
        ),
        inner_w,
        0,
    ));
    let h = area
        .height
        .min(u16::try_from(lines.len() + 2).unwrap_or(u16::MAX));
    let rect = super::fmt::centered(area, w, h);
    let top = state.scroll.drawn(
        crate::ui::scroll::Pane::Help,
        lines.len(),
        h.saturating_sub(2),
    );
    let more = lines.len() > usize::from(top) + usize::from(h.saturating_sub(2));
    let mut block = Block::default()
        .borders(Borders::ALL)
        .title(" Help ")
        .border_style(theme.get("ui.border.focused"));
    if more {
        block = block.title_bottom(
            Line::styled(" ↓ more (Down, PgDn) ", theme.get("ui.hint")).right_aligned(),
        );
    }
    frame.render_widget(Clear, rect);
    frame.render_widget(Paragraph::new(lines).block(block).scroll((top, 0)), rect);
}
