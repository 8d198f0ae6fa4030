//! The reducer's part for moving around: switching views, the movement keys (the selection of
//! a list, or the pane that scrolls), opening Detail, and backing out.

use super::super::command::Command;
use super::super::filter::FILTERED;
use super::super::msg::Effect;
use super::super::scroll::Pane;
use super::super::state::{State, View};

/// A command that switches view (or toggles help).
pub(super) fn view(state: &mut State, c: Command) -> Vec<Effect> {
    let n = View::ALL.len();
    let to = match c {
        Command::ToggleHelp => {
            state.help = !state.help;
            state.scroll.reset(Pane::Help);
            return Vec::new();
        }
        Command::NextView => View::ALL[(state.view.index() + 1) % n],
        Command::PrevView => View::ALL[(state.view.index() + n - 1) % n],
        Command::ViewOverview => View::Overview,
        Command::ViewGpus => View::Gpus,
        Command::ViewProcesses => View::Processes,
        Command::ViewDetail => View::Detail,
        Command::ViewModels => View::Models,
        Command::ViewFindings => View::Findings,
        Command::ViewLog => View::Log,
        Command::ViewHistory => View::History,
        Command::ViewJournal => {
            state.set_view(View::Journal);
            return vec![Effect::LoadJournal];
        }
        _ => return Vec::new(),
    };
    state.set_view(to);
    Vec::new()
}

/// A movement key: an overlay or a text pane that scrolls takes it, else the list's selection.
pub(super) fn movement(state: &mut State, c: Command) -> Vec<Effect> {
    let page = state.page();
    if let Some(p) = state.scroll_pane() {
        let page = u16::try_from(page).unwrap_or(u16::MAX);
        state.scroll.step(p, c, page);
        return Vec::new();
    }
    // A filtered list moves over the rows it shows (an unfiltered one's order is every row).
    let order = state.order(state.view);
    if let Some(sel) = state.sel_mut() {
        let last = order.len().saturating_sub(1);
        let at = order.iter().position(|i| i == sel).unwrap_or(*sel);
        let to = match c {
            Command::SelectNext => (at + 1).min(last),
            Command::SelectPrev => at.saturating_sub(1),
            Command::PageDown => (at + page).min(last),
            Command::PageUp => at.saturating_sub(page),
            Command::Top => 0,
            _ => last,
        };
        *sel = order.get(to).copied().unwrap_or(to);
    }
    if state.view == View::Journal {
        state.scroll.reset(Pane::Journal);
    }
    Vec::new()
}

/// Enter: a journal entry opens in place (it is not a GPU or a process); anything else in
/// Detail.
pub(super) fn open(state: &mut State) -> Vec<Effect> {
    if state.view == View::Journal {
        if !state.journal.0.is_empty() {
            state.journal_open = true;
            state.scroll.reset(Pane::Journal);
        }
    } else if let Some(t) = state.selection_target() {
        state.detail = Some(t);
        state.scroll.reset(Pane::Detail);
        state.set_view(View::Detail);
    }
    Vec::new()
}

/// `q`: back out of a drill-down, else quit.
pub(super) fn back(state: &mut State) -> Vec<Effect> {
    if state.go_back() {
        Vec::new()
    } else {
        vec![Effect::Quit]
    }
}

/// Esc: the topmost overlay, else the filter, else a drill-down; in a monitor opened from the
/// fleet, with nothing to close, back to the fleet.
pub(super) fn cancel(state: &mut State) -> Vec<Effect> {
    if state.cancel_modal() {
        return Vec::new();
    }
    let open_entry = state.view == View::Journal && state.journal_open;
    if !state.filter_of(state.view).is_empty() && FILTERED.contains(&state.view) && !open_entry {
        state.filter.clear();
        state.derive_rows();
    } else if state.view == View::Detail {
        state.view = state.back;
    } else if state.view == View::Journal && state.journal_open {
        state.journal_open = false;
    } else if state.embedded {
        return vec![Effect::Quit];
    }
    Vec::new()
}
