//! The reducer, message by message: what a user's keys do to the state.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::nodes::{T, recorded};
use partop::domain::findings::Thresholds;
use partop::ui::command::Command;
use partop::ui::keymap::Keymap;
use partop::ui::state::{DetailTarget, Effect, Group, Msg, ProcRow, SortKey, State, View, update};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::sync::Arc;

fn state(preset: &str, node: &str) -> State {
    let (km, e) = Keymap::load(preset, None, false);
    assert!(e.is_empty());
    let mut s = State::new(km, Thresholds::default(), 1000);
    update(&mut s, Msg::Snapshot(Arc::new(recorded(node))));
    update(&mut s, Msg::Tick(T + 1000));
    s
}

fn key(s: &mut State, c: char) -> Vec<Effect> {
    update(
        s,
        Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)),
    )
}

fn code(s: &mut State, c: KeyCode) -> Vec<Effect> {
    update(s, Msg::Key(KeyEvent::new(c, KeyModifiers::NONE)))
}

#[test]
fn number_keys_switch_views_and_q_quits() {
    let mut s = state("default", "dpx-nps2-two-models");
    assert_eq!(s.view, View::Overview);
    key(&mut s, '3');
    assert_eq!(s.view, View::Processes);
    code(&mut s, KeyCode::Tab);
    assert_eq!(s.view, View::Detail);
    code(&mut s, KeyCode::BackTab);
    assert_eq!(s.view, View::Processes);
    assert_eq!(key(&mut s, 'q'), vec![Effect::Quit]);
    assert_eq!(
        update(
            &mut s,
            Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL))
        ),
        vec![Effect::Quit]
    );
    assert_eq!(key(&mut s, 'r'), vec![Effect::RefreshNow]);
}

#[test]
fn help_is_exclusive() {
    let mut s = state("default", "dpx-nps2-two-models");
    key(&mut s, '?');
    assert!(s.help);
    key(&mut s, '3');
    assert_eq!(
        s.view,
        View::Overview,
        "view keys do not leak through the help overlay"
    );
    assert!(
        key(&mut s, 'q').is_empty(),
        "q closes help instead of quitting"
    );
    assert!(!s.help);
}

#[test]
fn filter_narrows_rows_and_esc_clears() {
    let mut s = state("default", "dpx-nps2-two-models");
    key(&mut s, '3');
    assert_eq!(s.rows.len(), 3);
    key(&mut s, '/');
    assert!(s.editing_filter);
    for c in "qwen".chars() {
        key(&mut s, c);
    }
    assert_eq!(s.rows.len(), 1, "typing filters as you type");
    assert_eq!(key(&mut s, 'q'), vec![], "q is text while typing, not quit");
    code(&mut s, KeyCode::Backspace);
    code(&mut s, KeyCode::Enter);
    assert!(!s.editing_filter);
    assert_eq!(s.filter, "qwen");
    assert_eq!(s.rows.len(), 1);
    code(&mut s, KeyCode::Esc);
    assert!(s.filter.is_empty());
    assert_eq!(s.rows.len(), 3);
}

#[test]
fn sorting_and_grouping() {
    let mut s = state("default", "dpx-nps2-two-models");
    let snap = s.snapshot.clone().unwrap();
    let vram = |s: &State| -> Vec<u64> {
        s.rows
            .iter()
            .filter_map(|r| match r {
                ProcRow::Process { index, .. } => Some(snap.processes[*index].vram_total()),
                ProcRow::Heading(_) => None,
            })
            .collect()
    };
    assert_eq!(s.sort, SortKey::Vram);
    let v = vram(&s);
    assert!(
        v.windows(2).all(|w| w[0] >= w[1]),
        "largest VRAM first: {v:?}"
    );
    key(&mut s, '3');
    key(&mut s, 'S');
    let v = vram(&s);
    assert!(v.windows(2).all(|w| w[0] <= w[1]), "reversed: {v:?}");
    key(&mut s, 's');
    assert_eq!(s.sort, SortKey::Cu);
    key(&mut s, 'g');
    assert_eq!(s.group, Group::Gpu);
    assert!(
        matches!(&s.rows[0], ProcRow::Heading(h) if h.starts_with("GPU 0 (0000:05:00.0)")),
        "{:?}",
        s.rows[0]
    );
    key(&mut s, 'g');
    assert_eq!(s.group, Group::Model);
    assert!(
        s.rows
            .iter()
            .any(|r| matches!(r, ProcRow::Heading(h) if h == "Llama-3.1-70B-Instruct (vllm)")),
        "{:?}",
        s.rows
    );
}

#[test]
fn enter_opens_detail_of_the_selection_and_esc_returns() {
    let mut s = state("default", "dpx-nps2-two-models");
    key(&mut s, '2');
    code(&mut s, KeyCode::Down);
    code(&mut s, KeyCode::Enter);
    assert_eq!(s.view, View::Detail);
    assert_eq!(s.detail, Some(DetailTarget::Gpu("0000:05:00.1".into())));
    code(&mut s, KeyCode::Esc);
    assert_eq!(s.view, View::Gpus);
    key(&mut s, '3');
    code(&mut s, KeyCode::Enter);
    assert!(matches!(s.detail, Some(DetailTarget::Process(_))));
}

#[test]
fn selection_survives_a_shrinking_node() {
    let mut s = state("default", "cpx-nps4-small-models");
    key(&mut s, '2');
    code(&mut s, KeyCode::End);
    assert_eq!(s.gpu_sel, 63);
    update(
        &mut s,
        Msg::Snapshot(Arc::new(recorded("spx-nps1-one-model"))),
    );
    assert_eq!(s.gpu_sel, 7, "clamped to the new last logical GPU");
}

#[test]
fn vim_sequences() {
    let mut s = state("vim", "cpx-nps4-small-models");
    key(&mut s, '2');
    key(&mut s, 'G');
    assert_eq!(s.gpu_sel, 63);
    key(&mut s, 'g');
    assert_eq!(s.gpu_sel, 63, "g alone waits for the next key");
    key(&mut s, 'g');
    assert_eq!(s.gpu_sel, 0);
    key(&mut s, 'j');
    assert_eq!(s.gpu_sel, 1);
}

#[test]
fn every_command_is_handled_without_panicking_in_every_view() {
    for v in [
        Command::ViewOverview,
        Command::ViewGpus,
        Command::ViewProcesses,
        Command::ViewDetail,
        Command::ViewFindings,
        Command::ViewLog,
    ] {
        let mut s = state("default", "cpx-nps4-small-models");
        update(&mut s, Msg::Command(v));
        for c in Command::ALL {
            if *c != Command::Quit {
                update(&mut s, Msg::Command(*c));
            }
        }
    }
}
