//! The one reducer: `update(&mut State, Msg) -> Vec<Effect>`. Pure: no I/O, no drawing. Messages
//! come from the app loop (keys, the mouse, samples, ticks, what effects report); this file
//! routes each to the module of its concern, and each bound command to the module of what it
//! acts on. Derived rows are recomputed (`ui::derive`) when their inputs change.

mod dialog;
mod findings;
mod keys;
mod messages;
mod models;
mod mouse;
mod navigate;
mod processes;
mod staging;

use super::command::{Command, Danger};
use super::msg::{Effect, Msg};
use super::state::{LOG_KEEP, State};

/// The reducer.
pub fn update(state: &mut State, msg: Msg) -> Vec<Effect> {
    match msg {
        Msg::Key(k) => keys::key(state, &k),
        Msg::Command(c) => command(state, c),
        Msg::Mouse(m) => mouse::mouse(state, m),
        Msg::Log(lines) => {
            state.log.extend(lines);
            let over = state.log.len().saturating_sub(LOG_KEEP);
            state.log.drain(..over);
            Vec::new()
        }
        Msg::Resize(w, h) => {
            state.size = (w, h);
            Vec::new()
        }
        Msg::Snapshot(s) => messages::snapshot(state, s),
        Msg::Tick(now) => messages::tick(state, now),
        Msg::Kill(e) => messages::kill(state, &e),
        Msg::ApplyStarted(r) => messages::apply_started(state, r),
        Msg::MigApplyStarted(r) => messages::mig_apply_started(state, r),
        Msg::Journal(entries, bad, unfinished, exited) => {
            messages::journal(state, entries, bad, unfinished, exited)
        }
        Msg::PodLooked(r) => findings::looked(state, r),
        Msg::Evict(p) => findings::evicted(state, p),
        Msg::Throughput(store) => {
            if let (Some(st), Some(snap)) = (state.staging.as_mut(), state.snapshot.as_ref())
                && st.advice.is_some()
            {
                st.measured = Some(super::stage::measured_lines(st, &snap.host, store));
            }
            Vec::new()
        }
    }
}

/// A bound command, from a key, the mouse or a script.
fn command(state: &mut State, c: Command) -> Vec<Effect> {
    // Read-only (and every replay) is checked here, once: no mutating command goes further.
    // Their keys are not bound in a read-only keymap either; a command that still arrives
    // (a user keymap, a script) is said, not silently dropped.
    if state.read_only && c.danger() == Danger::Mutating {
        state.notice = Some((
            format!("read-only: {} is not available", c.name()),
            state.now_ms,
        ));
        return Vec::new();
    }
    match c {
        Command::Quit => vec![Effect::Quit],
        Command::Back => navigate::back(state),
        Command::RefreshNow => vec![Effect::RefreshNow],
        Command::Cancel => navigate::cancel(state),
        Command::ToggleHelp
        | Command::NextView
        | Command::PrevView
        | Command::ViewOverview
        | Command::ViewGpus
        | Command::ViewProcesses
        | Command::ViewDetail
        | Command::ViewModels
        | Command::ViewFindings
        | Command::ViewLog
        | Command::ViewHistory
        | Command::ViewJournal => navigate::view(state, c),
        Command::SelectNext
        | Command::SelectPrev
        | Command::PageDown
        | Command::PageUp
        | Command::Top
        | Command::Bottom => navigate::movement(state, c),
        Command::OpenDetail => navigate::open(state),
        Command::ModelRestart | Command::ModelStop | Command::ModelAddToRegistry => {
            models::ask(state, c)
        }
        Command::ModelAdvise => staging::advise(state),
        Command::FindingAct => findings::act(state, c),
        Command::TagProcess
        | Command::KillProcess
        | Command::CycleSort
        | Command::ReverseSort
        | Command::SortByVram
        | Command::SortByGpuBusy
        | Command::SortByCpu
        | Command::SortByUptime
        | Command::SortByName
        | Command::CycleGroup
        | Command::Filter => processes::command(state, c),
        Command::StageChange
        | Command::TagGpu
        | Command::StageCycleCompute
        | Command::StageCycleMemory
        | Command::StageToggleScope
        | Command::StageConfirm
        | Command::ToggleProgress => staging::command(state, c),
        // The fleet view's own; nothing in the monitor.
        Command::TagNode | Command::TagAllShown => Vec::new(),
        Command::DialogFocusNext => dialog::focus_next(state),
        Command::DialogActivate => dialog::activate(state),
    }
}
