//! Rendering: `render(&State, &Theme, &mut Frame)` draws the header, the active view, the footer
//! and any overlay. Views read `&State` only: no I/O, no locks, no sorting.

pub mod chrome;
pub mod detail;
pub mod dialog;
pub mod findings;
pub mod fmt;
pub mod gpus;
pub mod help;
pub mod history;
pub mod journal;
pub mod log;
pub mod models;
pub mod overview;
pub mod partition_map;
pub mod processes;
pub mod stage;

use super::state::{State, View};
use super::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::widgets::Block;

/// Draws one frame.
pub fn render(frame: &mut Frame<'_>, state: &State, theme: &Theme) {
    let area = frame.area();
    state.hits.clear();
    frame.render_widget(Block::default().style(theme.get("ui")), area);
    let [header, tabs, body, footer] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    chrome::header(frame, header, state, theme);
    chrome::tabs(frame, tabs, state, theme);
    match state.view {
        View::Overview => overview::render(frame, body, state, theme),
        View::Gpus => gpus::render(frame, body, state, theme),
        View::Processes => processes::render(frame, body, state, theme),
        View::Detail => detail::render(frame, body, state, theme),
        View::Journal => journal::render(frame, body, state, theme),
        View::Models => models::render(frame, body, state, theme),
        View::Findings => findings::render(frame, body, state, theme),
        View::Log => log::render(frame, body, state, theme),
        View::History => history::render(frame, body, state, theme),
    }
    chrome::footer(frame, footer, state, theme);
    // Overlays bottom-up, in the one order of `ui::modal`.
    for m in state.modals().rev() {
        use crate::ui::modal::Modal;
        match m {
            Modal::Help => help::render(frame, area, state, theme),
            Modal::Progress => {
                if let Some(p) = &state.applying {
                    stage::progress(frame, area, p, state.now_ms, theme);
                }
            }
            Modal::Stage => {
                if let Some(st) = &state.staging {
                    stage::render(frame, area, st, state, theme);
                }
            }
            Modal::MigStage => {
                if let Some(st) = &state.mig_staging {
                    stage::render_mig(frame, area, st, state, theme);
                }
            }
            Modal::Dialog => {
                if let Some(d) = &state.dialog {
                    dialog::render(frame, area, d, state, theme);
                }
            }
            Modal::EvictAsk => {
                if let Some(a) = &state.evict_ask {
                    findings::ask(frame, area, a, theme);
                }
            }
            Modal::ModelAsk => {
                if let Some(a) = &state.model_ask {
                    models::ask(frame, area, a, theme);
                }
            }
            Modal::Filter => {}
        }
    }
}
