//! The reducer's part for the confirmation dialogs (the kill dialog, a model action's ask):
//! focus and activation, the one place their effects are created.

use super::super::confirm::Focus;
use super::super::dialog::Action;
use super::super::msg::Effect;
use super::super::state::State;

/// Moves the focus between the dialog's buttons.
pub(super) fn focus_next(state: &mut State) -> Vec<Effect> {
    if let Some(a) = state.model_ask.as_mut() {
        a.focus = a.focus.toggled();
    }
    if let Some(d) = state.dialog.as_mut() {
        d.focus_next();
    }
    Vec::new()
}

/// Presses the focused button.
pub(super) fn activate(state: &mut State) -> Vec<Effect> {
    if let Some(a) = state.model_ask.take() {
        // INVARIANT: the only place an Effect::Model is created, from a confirmed ask.
        return if a.focus == Focus::Confirm {
            vec![Effect::Model(a.action)]
        } else {
            Vec::new()
        };
    }
    let now = state.now_ms;
    if let Some(d) = state.dialog.as_mut() {
        // INVARIANT: the only place an Effect::Kill is created, from a confirmed dialog.
        match d.activate(now) {
            Action::None => {}
            Action::Close => {
                state.dialog = None;
                state.tagged.clear();
            }
            Action::Signal(t, sig) => return vec![Effect::Kill(t, sig)],
        }
    }
    Vec::new()
}
