//! The reducer's part for key presses: a typed confirmation takes every key first, then the
//! filter being typed, then the keymap (sequences, and what `--read-only` unbound).

use super::super::keymap::{Key, Resolve};
use super::super::msg::Effect;
use super::super::stage::Typed;
use super::super::state::{State, View};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// A key press.
pub(super) fn key(state: &mut State, k: &KeyEvent) -> Vec<Effect> {
    if k.kind == KeyEventKind::Release {
        return Vec::new();
    }
    if state.evict_ask.is_some() {
        return super::findings::key(state, k);
    }
    if state
        .staging
        .as_ref()
        .is_some_and(|s| s.confirming.is_some())
    {
        return confirm_key(state, k);
    }
    if state
        .mig_staging
        .as_ref()
        .is_some_and(|s| s.confirming.is_some())
    {
        return mig_confirm_key(state, k);
    }
    if state.editing_filter {
        if k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL) {
            return vec![Effect::Quit];
        }
        filter_key(state, k);
        return Vec::new();
    }
    let Some(key) = Key::from_event(k) else {
        return Vec::new();
    };
    state.pending.push(key);
    match state.keymap.resolve(&state.sections(), &state.pending) {
        Resolve::Command(c) => {
            state.pending.clear();
            super::command(state, c)
        }
        Resolve::Pending => Vec::new(),
        Resolve::Unbound => {
            // A key `--read-only` unbound says so instead of doing nothing.
            if let Some(c) = state.keymap.removed(&state.sections(), &state.pending) {
                state.notice = Some((
                    format!("read-only: {} is not available", c.name()),
                    state.now_ms,
                ));
            }
            state.pending.clear();
            Vec::new()
        }
    }
}

/// Typing the host name to apply a staged MIG plan.
fn mig_confirm_key(state: &mut State, k: &KeyEvent) -> Vec<Effect> {
    let Some(st) = state.mig_staging.as_mut() else {
        return Vec::new();
    };
    let Ok(plan) = st.result.clone() else {
        return Vec::new();
    };
    let Some(c) = st.confirming.as_mut() else {
        return Vec::new();
    };
    match c.key(k, &plan.host, &plan.fingerprint) {
        Typed::Cancel => st.confirming = None,
        // INVARIANT: the only place an Effect::MigApply is created: the plan on screen, its
        // fingerprint unchanged since confirmation began, and the host name typed.
        Typed::Confirmed => {
            state.mig_staging = None;
            state.mig_applying = Some(plan.fingerprint.clone());
            state.mig_process = None;
            state.notice = Some((
                format!(
                    "applying MIG plan {} (detached); the footer says when it ends, the Journal view (7) shows each step",
                    plan.fingerprint
                ),
                state.now_ms,
            ));
            return vec![Effect::MigApply(Box::new(plan))];
        }
        Typed::Pending => {}
    }
    Vec::new()
}

/// Typing the confirmation of a staged plan.
fn confirm_key(state: &mut State, k: &KeyEvent) -> Vec<Effect> {
    let Some(st) = state.staging.as_mut() else {
        return Vec::new();
    };
    let (Some(word), Ok(plan)) = (st.required_word(), st.result.clone()) else {
        return Vec::new();
    };
    let Some(c) = st.confirming.as_mut() else {
        return Vec::new();
    };
    match c.key(k, &word, &plan.fingerprint) {
        Typed::Cancel => st.confirming = None,
        // INVARIANT: the only place an Effect::Apply is created: the plan on screen, its
        // fingerprint unchanged since confirmation began, and the required word typed.
        Typed::Confirmed => {
            state.staging = None;
            state.tagged_gpus.clear();
            return vec![Effect::Apply(Box::new(plan))];
        }
        Typed::Pending => {}
    }
    Vec::new()
}

/// Typing the filter: Enter keeps it, Esc clears it, printable keys are text.
fn filter_key(state: &mut State, k: &KeyEvent) {
    if !super::super::filter::typed(&mut state.filter, &mut state.editing_filter, k) {
        return;
    }
    if state.filter_view == View::Processes {
        state.proc_sel = 0;
    }
    // Also moves another list's selection onto a row the filter keeps.
    state.derive_rows();
}
