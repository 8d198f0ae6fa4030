//! The reducer's part for the Models view's actions (restart, stop, add to the registry):
//! the ask that confirms one, or why there is none.

use super::super::command::Command;
use super::super::model_ask::model_ask;
use super::super::msg::Effect;
use super::super::state::{State, View};

/// Opens the ask for a model action on the selected model, or says why it cannot.
pub(super) fn ask(state: &mut State, c: Command) -> Vec<Effect> {
    if state.view != View::Models {
        return Vec::new();
    }
    let snap = state.snapshot.clone();
    state.model_ask = snap
        .as_deref()
        .and_then(|s| model_ask(s, state.model_sel, c));
    if state.model_ask.is_none() {
        let why = snap
            .as_deref()
            .and_then(|s| s.models.get(state.model_sel))
            .map_or_else(
                || "no model selected".to_string(),
                |m| match (c, &m.spec, m.pid) {
                    (Command::ModelAddToRegistry, Some(_), _) => {
                        format!("{} is already in the registry", m.name)
                    }
                    (Command::ModelStop, Some(_), None) => format!("{} is not running", m.name),
                    (_, None, _) => {
                        format!("{} is not in the registry: add it first (a)", m.name)
                    }
                    _ => format!("{}: its process is gone", m.name),
                },
            );
        state.notice = Some((why, state.now_ms));
    }
    Vec::new()
}
