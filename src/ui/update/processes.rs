//! The reducer's part for the process table: tagging, the kill dialog, sorting, grouping; and
//! `/`, the filter of every list view.

use super::super::command::Command;
use super::super::dialog::KillDialog;
use super::super::filter::FILTERED;
use super::super::msg::Effect;
use super::super::rows::{Group, ProcRow, SortKey};
use super::super::state::{State, View};

/// A command that acts on the process table.
pub(super) fn command(state: &mut State, c: Command) -> Vec<Effect> {
    match c {
        Command::TagProcess => tag(state),
        Command::KillProcess => return kill(state),
        Command::CycleSort => {
            state.sort = state.sort.next_at(state.size.0);
            state.sort_desc = state.sort.desc_by_default();
            state.derive_rows();
        }
        Command::ReverseSort => {
            state.sort_desc = !state.sort_desc;
            state.derive_rows();
        }
        Command::SortByVram => sort_by(state, SortKey::Vram),
        Command::SortByGpuBusy => sort_by(state, SortKey::Busy),
        Command::SortByCpu => sort_by(state, SortKey::Cpu),
        Command::SortByUptime => sort_by(state, SortKey::Start),
        Command::SortByName => sort_by(state, SortKey::Name),
        Command::CycleGroup => {
            state.group = match state.group {
                Group::None => Group::Gpu,
                Group::Gpu => Group::Model,
                Group::Model => Group::None,
            };
            state.proc_sel = 0;
            state.derive_rows();
        }
        Command::Filter => filter(state),
        _ => {}
    }
    Vec::new()
}

/// `/`: starts typing the filter of this list view (a new one when the filter was another
/// view's); from a view with no list, of Processes.
fn filter(state: &mut State) {
    if !FILTERED.contains(&state.view) {
        state.set_view(View::Processes);
    }
    if state.filter_view != state.view {
        state.filter.clear();
        state.filter_view = state.view;
        state.derive_rows();
    }
    state.editing_filter = true;
}

/// Tags (or untags) the selected process and moves down.
fn tag(state: &mut State) {
    if let (Some(ProcRow::Process { index, .. }), Some(snap)) =
        (state.rows.get(state.proc_sel), &state.snapshot)
        && let Some(p) = snap.processes.get(*index)
        && !state.tagged.remove(&p.pid)
    {
        state.tagged.insert(p.pid);
    }
    let last = state.rows.len().saturating_sub(1);
    state.proc_sel = (state.proc_sel + 1).min(last);
}

/// Opens the kill dialog on the tagged processes, else the selected one.
fn kill(state: &mut State) -> Vec<Effect> {
    if state.view != View::Processes {
        return Vec::new();
    }
    let Some(snap) = state.snapshot.clone() else {
        return Vec::new();
    };
    let pids: Vec<u32> = if state.tagged.is_empty() {
        match state.rows.get(state.proc_sel) {
            Some(ProcRow::Process { index, .. }) => snap
                .processes
                .get(*index)
                .map(|p| vec![p.pid])
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    } else {
        state.tagged.iter().copied().collect()
    };
    if pids.is_empty() {
        return Vec::new();
    }
    let plan = crate::domain::kill::plan(&snap, &pids, state.own_pid);
    state.dialog = Some(KillDialog::new(plan, state.grace_ms));
    // The target is pinned and verified by the executor; a fresh full scan shows any
    // other holder by the time the operator decides.
    vec![Effect::ScanHolders]
}

/// A direct sort key (as htop's and nvitop's): sorts by `key` in its natural order, or
/// reverses the order when it already sorts by it.
fn sort_by(state: &mut State, key: SortKey) {
    if state.sort == key {
        state.sort_desc = !state.sort_desc;
    } else {
        state.sort = key;
        state.sort_desc = key.desc_by_default();
    }
    state.derive_rows();
}
