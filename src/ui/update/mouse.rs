//! The reducer's part for the mouse: the wheel moves the selection (or scrolls the pane the
//! movement keys scroll), a left click on a tab opens that view, on a list row selects it.

use super::super::command::Command;
use super::super::msg::Effect;
use super::super::scroll::Pane;
use super::super::state::{State, View};
use ratatui::crossterm::event::{MouseButton, MouseEvent, MouseEventKind};

/// A click or the wheel. An overlay that takes the keys takes the clicks too (they do nothing
/// under it).
pub(super) fn mouse(state: &mut State, m: MouseEvent) -> Vec<Effect> {
    let exclusive = state.modals().any(|x| x.section().is_some());
    let step = if state.scroll_pane().is_some() { 3 } else { 1 };
    match m.kind {
        MouseEventKind::ScrollDown | MouseEventKind::ScrollUp => {
            let c = if m.kind == MouseEventKind::ScrollDown {
                Command::SelectNext
            } else {
                Command::SelectPrev
            };
            if exclusive && state.scroll_pane().is_none() {
                return Vec::new();
            }
            (0..step).flat_map(|_| super::command(state, c)).collect()
        }
        MouseEventKind::Down(MouseButton::Left) if !exclusive => click(state, m.column, m.row),
        _ => Vec::new(),
    }
}

/// A left click where no overlay takes it: a tab, else a list row.
fn click(state: &mut State, column: u16, row: u16) -> Vec<Effect> {
    if let Some(v) = state.hits.tab_at(column, row) {
        return super::command(state, v.command());
    }
    // The rows drawn are the list's order (a filtered one's kept rows).
    let order = state.order(state.view);
    if let Some(i) = state
        .hits
        .row_at(column, row)
        .and_then(|i| order.get(i).copied())
    {
        let journal = state.view == View::Journal;
        if let Some(sel) = state.sel_mut() {
            *sel = i;
        }
        if journal {
            state.scroll.reset(Pane::Journal);
        }
    }
    Vec::new()
}
