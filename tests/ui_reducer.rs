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
fn every_command_in_every_view_keeps_the_state_consistent() {
    for v in [
        Command::ViewOverview,
        Command::ViewGpus,
        Command::ViewProcesses,
        Command::ViewDetail,
        Command::ViewFindings,
        Command::ViewLog,
        Command::ViewJournal,
        Command::ViewModels,
    ] {
        let mut s = state("default", "cpx-nps4-small-models");
        update(&mut s, Msg::Command(v));
        for c in Command::ALL {
            if *c == Command::Quit {
                assert_eq!(update(&mut s, Msg::Command(*c)), vec![Effect::Quit]);
                continue;
            }
            update(&mut s, Msg::Command(*c));
            // Whatever ran, the selection stays within what is listed, and at most one
            // exclusive overlay takes the keys.
            assert!(s.gpu_sel < 64, "{c:?} in {v:?}: gpu_sel {}", s.gpu_sel);
            assert!(
                s.proc_sel <= s.rows.len(),
                "{c:?} in {v:?}: proc_sel {} of {}",
                s.proc_sel,
                s.rows.len()
            );
            assert_eq!(
                s.sections().len(),
                if s.modals().any(|m| m.section().is_some()) {
                    1
                } else {
                    2
                }
            );
            // Cancel always makes progress towards the plain view.
            let before = s.modals().count();
            update(&mut s, Msg::Command(Command::Cancel));
            assert!(
                s.modals().count() < before || before == 0 || s.dialog.is_some(),
                "{c:?} in {v:?}: Cancel closed nothing of {before}"
            );
        }
    }
}

#[test]
fn overlays_agree_on_their_order_and_read_only_says_why() {
    let mut s = state("default", "spx-nps1-one-model");
    key(&mut s, 'p');
    assert!(s.staging.is_some());
    update(&mut s, Msg::Command(Command::ToggleHelp));
    // Staging is above help: keys go to it, Cancel closes it first, it is drawn last.
    assert_eq!(s.sections(), vec![partop::ui::keymap::Section::Stage]);
    let order: Vec<_> = s.modals().collect();
    assert_eq!(
        order,
        [
            partop::ui::modal::Modal::Stage,
            partop::ui::modal::Modal::Help
        ]
    );
    update(&mut s, Msg::Command(Command::Cancel));
    assert!(s.staging.is_none() && s.help);
    update(&mut s, Msg::Command(Command::Cancel));
    assert!(!s.help);
    let mut r = state("default", "spx-nps1-one-model");
    r.read_only = true;
    assert!(update(&mut r, Msg::Command(Command::StageChange)).is_empty());
    assert!(r.staging.is_none());
    let notice = r.notice.as_ref().map(|n| n.0.clone()).unwrap_or_default();
    assert!(notice.contains("read-only: stage_change"), "{notice}");
}

fn to_processes(s: &mut State) {
    key(s, '3');
}

#[test]
fn kill_opens_a_dialog_with_cancel_focused_and_enter_cancels() {
    let mut s = state("default", "dpx-nps2-two-models");
    s.own_pid = 1;
    to_processes(&mut s);
    key(&mut s, 'K');
    let d = s.dialog.as_ref().expect("dialog open");
    assert_eq!(d.focus, partop::ui::dialog::Focus::Cancel);
    assert_eq!(d.plan.targets.len(), 1);
    assert!(
        key(&mut s, 'q').is_empty() && s.dialog.is_some(),
        "the dialog is exclusive: q does not quit"
    );
    assert!(
        code(&mut s, KeyCode::Enter).is_empty(),
        "Enter on Cancel sends nothing"
    );
    assert!(s.dialog.is_none());
}

#[test]
fn tagged_processes_are_signalled_only_after_confirmation() {
    let mut s = state("default", "dpx-nps2-two-models");
    to_processes(&mut s);
    code(&mut s, KeyCode::Char(' '));
    code(&mut s, KeyCode::Char(' '));
    assert_eq!(s.tagged.len(), 2);
    key(&mut s, 'K');
    assert_eq!(s.dialog.as_ref().unwrap().plan.targets.len(), 2);
    code(&mut s, KeyCode::Tab);
    let e = code(&mut s, KeyCode::Enter);
    match e.as_slice() {
        [Effect::Kill(t, partop::domain::kill::Sig::Term)] => assert_eq!(t.len(), 2),
        other => panic!("{other:?}"),
    }
    // While the signal is out, Esc does not close and Enter does nothing.
    code(&mut s, KeyCode::Esc);
    assert!(s.dialog.is_some());
    let pids: Vec<u32> = s.tagged.iter().copied().collect();
    update(
        &mut s,
        Msg::Kill(partop::ui::msg::KillProgress::Done {
            sig: partop::domain::kill::Sig::Term,
            alive: vec![pids[0]],
        }),
    );
    code(&mut s, KeyCode::Tab);
    match code(&mut s, KeyCode::Enter).as_slice() {
        [Effect::Kill(t, partop::domain::kill::Sig::Kill)] => {
            assert_eq!(t.iter().map(|t| t.pid).collect::<Vec<_>>(), vec![pids[0]])
        }
        other => panic!("SIGKILL needs the second confirmation: {other:?}"),
    }
}

#[test]
fn a_target_leaving_the_node_while_the_dialog_is_open_is_skipped() {
    let mut s = state("default", "dpx-nps2-two-models");
    to_processes(&mut s);
    key(&mut s, 'K');
    let pid = s.dialog.as_ref().unwrap().plan.targets[0].pid;
    let mut snap = (*s.snapshot.clone().unwrap()).clone();
    snap.processes.retain(|p| p.pid != pid);
    update(&mut s, Msg::Snapshot(Arc::new(snap)));
    assert!(s.dialog.as_ref().unwrap().gone.contains(&pid));
    assert!(
        s.dialog.as_ref().unwrap().danger_label().is_none(),
        "nothing left to signal"
    );
    code(&mut s, KeyCode::Tab);
    assert!(code(&mut s, KeyCode::Enter).is_empty());
}

#[test]
fn read_only_removes_kill() {
    let (km, _) = Keymap::load("default", None, true);
    assert!(
        km.keys_for(partop::ui::keymap::Section::Processes, Command::KillProcess)
            .is_empty()
    );
    let mut s = State::new(km, Thresholds::default(), 1000);
    s.read_only = true;
    update(
        &mut s,
        Msg::Snapshot(Arc::new(recorded("dpx-nps2-two-models"))),
    );
    key(&mut s, '3');
    key(&mut s, 'K');
    update(&mut s, Msg::Command(Command::KillProcess));
    assert!(s.dialog.is_none());
}

#[test]
fn dialog_buttons_cannot_be_bound_outside_the_dialog() {
    let (_, errors) = Keymap::load(
        "default",
        Some(("keymap.toml", "[processes]\n\"y\" = \"dialog_activate\"\n")),
        false,
    );
    assert!(
        errors.iter().any(|e| e
            .to_string()
            .contains("dialog_activate may only be bound in [dialog]")),
        "{errors:?}"
    );
}

#[test]
fn staging_plans_live_and_confirming_needs_the_host_name() {
    let mut s = state("default", "spx-nps1-one-model");
    key(&mut s, 'p');
    let st = s.staging.as_ref().expect("staging open");
    assert!(st.result.is_err(), "nothing chosen yet");
    key(&mut s, 'm');
    key(&mut s, 'm');
    let p = s.staging.as_ref().unwrap().result.clone().unwrap();
    assert_eq!(p.after.len(), 16, "NPS2 (hive-wide) gives DPX everywhere");
    assert!(
        key(&mut s, 'q').is_empty() || s.staging.is_none(),
        "q cancels staging, never quits from it"
    );
    key(&mut s, 'p');
    key(&mut s, 'm');
    key(&mut s, 'm');
    code(&mut s, KeyCode::Enter);
    assert!(s.staging.as_ref().unwrap().confirming.is_some());
    for c in "yes".chars() {
        key(&mut s, c);
    }
    assert!(
        code(&mut s, KeyCode::Enter).is_empty(),
        "a reload needs the host name, not yes"
    );
    let host = p.host.clone();
    for _ in 0..3 {
        code(&mut s, KeyCode::Backspace);
    }
    for c in host.chars() {
        key(&mut s, c);
    }
    match code(&mut s, KeyCode::Enter).as_slice() {
        [Effect::Apply(plan)] => assert_eq!(plan.fingerprint, p.fingerprint),
        other => panic!("{other:?}"),
    }
    assert!(s.staging.is_none());
}

#[test]
fn a_plan_that_changes_while_confirming_must_be_confirmed_again() {
    let mut s = state("default", "spx-nps1-one-model");
    key(&mut s, 'p');
    key(&mut s, 'm');
    key(&mut s, 'm');
    code(&mut s, KeyCode::Enter);
    let host = s.staging.as_ref().unwrap().result.clone().unwrap().host;
    for c in host.chars() {
        key(&mut s, c);
    }
    // A new process appears on the node before Enter.
    let mut snap = (*s.snapshot.clone().unwrap()).clone();
    let mut p = snap.processes[0].clone();
    p.pid = 424_242;
    snap.processes.push(p);
    update(&mut s, Msg::Snapshot(Arc::new(snap)));
    let c = s.staging.as_ref().unwrap().confirming.clone().unwrap();
    assert!(
        c.typed.is_empty() && c.notice.as_deref().unwrap().contains("confirm again"),
        "{c:?}"
    );
    assert!(code(&mut s, KeyCode::Enter).is_empty());
}

#[test]
fn read_only_cannot_stage() {
    let (km, _) = Keymap::load("default", None, true);
    let mut s = State::new(km, Thresholds::default(), 1000);
    s.read_only = true;
    update(
        &mut s,
        Msg::Snapshot(Arc::new(recorded("spx-nps1-one-model"))),
    );
    key(&mut s, 'p');
    update(&mut s, Msg::Command(Command::StageChange));
    assert!(s.staging.is_none());
}

#[test]
fn progress_follows_the_journal() {
    let mut s = state("default", "spx-nps1-one-model");
    let plan = partop::domain::plan::plan(
        s.snapshot.as_ref().unwrap(),
        &partop::domain::plan::Draft {
            gpus: vec![],
            compute: None,
            memory: Some(partop::domain::MemoryMode::Nps2),
        },
        partop::domain::plan::Reload::ResetReload,
        120,
        10,
    )
    .unwrap();
    s.applying = Some(partop::ui::stage::Progress::new(plan.clone(), "log".into()));
    assert_eq!(
        update(&mut s, Msg::Tick(T + 5000)),
        vec![Effect::LoadJournal]
    );
    let step = |i: usize, ok: bool| {
        partop::exec::journal::Entry::new(
            "repartition.step",
            true,
            serde_json::json!({"fingerprint": plan.fingerprint, "step": i, "key": "x"}),
            serde_json::json!({"ok": ok, "detail": "d"}),
        )
    };
    update(
        &mut s,
        Msg::Journal(vec![step(0, true), step(1, true)], vec![], None, None),
    );
    assert_eq!(
        s.applying
            .as_ref()
            .unwrap()
            .steps
            .iter()
            .filter(|x| x.is_some())
            .count(),
        2
    );
    let done = partop::exec::journal::Entry::new(
        "repartition.done",
        true,
        serde_json::json!({"fingerprint": plan.fingerprint}),
        serde_json::json!({"ok": true}),
    );
    let e = update(
        &mut s,
        Msg::Journal(vec![step(0, true), done], vec![], None, None),
    );
    assert!(
        e.contains(&Effect::Rescan),
        "the layout is re-read after a repartition"
    );
    assert_eq!(s.applying.as_ref().unwrap().finished, Some(true));
    assert!(
        update(&mut s, Msg::Tick(T + 9000)).is_empty(),
        "no more polling once finished"
    );
}

#[test]
fn several_tagged_gpus_are_staged_together() {
    let mut s = state("default", "spx-nps1-one-model");
    // Logical GPUs 0 and 2 are physical GPUs 0 and 2 in SPX.
    code(&mut s, KeyCode::Char(' '));
    code(&mut s, KeyCode::Down);
    code(&mut s, KeyCode::Down);
    code(&mut s, KeyCode::Char(' '));
    assert_eq!(s.tagged_gpus.len(), 2);
    key(&mut s, 'p');
    key(&mut s, 'c');
    key(&mut s, 'c');
    let p = s.staging.as_ref().unwrap().result.clone().unwrap();
    assert_eq!(p.draft.gpus.len(), 2, "{:?}", p.draft);
    assert_eq!(p.changes.len(), 2);
    assert_eq!(p.after.len(), 10, "two GPUs in DPX, six in SPX");
    // Untagging one leaves the other.
    code(&mut s, KeyCode::Esc);
    code(&mut s, KeyCode::Char(' '));
    assert_eq!(s.tagged_gpus.len(), 1);
}

#[test]
fn staged_plans_use_the_nodes_reload_time() {
    let mut s = state("default", "spx-nps1-one-model");
    s.reload_secs = 6;
    key(&mut s, 'p');
    key(&mut s, 'm');
    key(&mut s, 'm');
    let p = s.staging.as_ref().unwrap().result.clone().unwrap();
    assert_eq!(
        p.reload_secs, 6,
        "the simulated node's own figure, not 120 s"
    );
    assert!(p.downtime_secs < 60, "{}", p.downtime_secs);
}

mod invariants {
    use super::*;
    use proptest::prelude::*;

    fn dangerous(e: &Effect) -> bool {
        matches!(
            e,
            Effect::Kill(..)
                | Effect::Apply(_)
                | Effect::Model(_)
                | Effect::MigApply(_)
                | Effect::Evict(..)
        )
    }

    fn msg(i: usize, c: char, which: u8) -> Msg {
        match which {
            0 => Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)),
            1 => Msg::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)),
            _ => Msg::Command(Command::ALL[i % Command::ALL.len()]),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Without the confirming press (the dialog button) and without typing, no sequence of
        /// commands, in any view, over any node, starts a kill, an apply, a model action or a
        /// MIG apply.
        #[test]
        fn nothing_dangerous_without_the_confirmation(
            seq in proptest::collection::vec(0usize..1000, 1..60),
            node in prop::sample::select(vec!["dpx-nps2-two-models", "cpx-nps4-small-models", "spx-nps1-one-model", "noisy-neighbour"]),
        ) {
            let mut s = state("default", node);
            for i in seq {
                let c = Command::ALL[i % Command::ALL.len()];
                if c == Command::DialogActivate {
                    continue;
                }
                let effects = update(&mut s, Msg::Command(c));
                prop_assert!(!effects.iter().any(dangerous), "{c:?} emitted {effects:?}");
            }
        }

        /// Read-only (and so every replay): nothing dangerous, whatever is pressed or typed,
        /// confirmations included.
        #[test]
        fn read_only_never_emits_a_dangerous_effect(
            seq in proptest::collection::vec((0usize..1000, prop::sample::select(vec!['v', 'm', 'y', 'e', 's', 'K', 'p', 'x', 'R']), 0u8..4), 1..80),
        ) {
            let mut s = state("default", "dpx-nps2-two-models");
            s.read_only = true;
            for (i, c, which) in seq {
                let effects = update(&mut s, msg(i, c, which));
                prop_assert!(!effects.iter().any(dangerous), "emitted {effects:?}");
            }
        }
    }
}

#[test]
fn a_mig_apply_is_followed_to_its_end() {
    use partop::exec::journal::Entry;
    let mut s = state("default", "dpx-nps2-two-models");
    s.mig_applying = Some("f00d".into());
    assert!(update(&mut s, Msg::Tick(T + 20_000)).contains(&Effect::LoadJournal));
    let start = Entry::new(
        "mig.start",
        false,
        serde_json::json!({"run": "r1", "fingerprint": "f00d", "plan": {}}),
        serde_json::json!({"steps": 4}),
    );
    let failed = Entry::new(
        "mig.step",
        false,
        serde_json::json!({"run": "r1", "fingerprint": "f00d", "step": 2, "key": "mig_mode"}),
        serde_json::json!({"ok": false, "detail": "pending"}),
    );
    let e = update(
        &mut s,
        Msg::Journal(vec![start.clone(), failed], vec![], None, None),
    );
    assert!(e.contains(&Effect::Rescan));
    let notice = s.notice.clone().unwrap().0;
    assert!(
        notice.contains("failed at step 3 (mig_mode): pending"),
        "{notice}"
    );
    assert!(s.mig_applying.is_none());
    s.mig_applying = Some("f00d".into());
    let done = Entry::new(
        "mig.done",
        false,
        serde_json::json!({"run": "r1", "fingerprint": "f00d"}),
        serde_json::json!({"ok": true}),
    );
    update(&mut s, Msg::Journal(vec![start, done], vec![], None, None));
    assert!(
        s.notice
            .clone()
            .unwrap()
            .0
            .contains("MIG plan f00d applied")
    );
}

/// A followed MIG run closed as abandoned (`partop journal --abandon` from another terminal)
/// ends the follow and says so; it is not reported as applied (the follow matched any close).
#[test]
fn a_followed_mig_run_closed_as_abandoned_is_not_said_applied() {
    use partop::exec::journal::Entry;
    let mut s = state("default", "dpx-nps2-two-models");
    s.mig_applying = Some("f00d".into());
    let start = Entry::new(
        "mig.start",
        false,
        serde_json::json!({"run": "r1", "fingerprint": "f00d", "plan": {}}),
        serde_json::json!({"steps": 4}),
    );
    let abandoned = Entry::new(
        "mig.abandoned",
        false,
        serde_json::json!({"run": "r1", "fingerprint": "f00d"}),
        serde_json::json!({"ok": true}),
    );
    let e = update(
        &mut s,
        Msg::Journal(vec![start, abandoned], vec![], None, None),
    );
    assert!(e.contains(&Effect::Rescan), "{e:?}");
    let notice = s.notice.clone().unwrap().0;
    assert!(notice.contains("closed as abandoned"), "{notice}");
    assert!(!notice.contains("applied"), "{notice}");
    assert!(s.mig_applying.is_none());
}

/// `q` goes back from every drill-down (Detail opened from each list, an open journal entry,
/// the help, the staging overlay) and quits only where there is nothing to go back from.
#[test]
fn q_goes_back_from_every_drill_down_and_quits_only_at_the_top() {
    let mut cases = 0;
    for from in [
        View::Overview,
        View::Gpus,
        View::Processes,
        View::Models,
        View::Findings,
    ] {
        let mut s = state("default", "dpx-nps2-two-models");
        update(&mut s, Msg::Command(from.command()));
        update(&mut s, Msg::Command(Command::ViewDetail));
        assert_eq!(s.view, View::Detail);
        assert!(
            key(&mut s, 'q').is_empty(),
            "q in Detail from {from:?} quit"
        );
        assert_eq!(s.view, from, "q goes back to {from:?}");
        assert_eq!(key(&mut s, 'q'), vec![Effect::Quit], "then q quits");
        cases += 1;
    }
    // An open journal entry closes; the list stays.
    let mut s = state("default", "dpx-nps2-two-models");
    update(&mut s, Msg::Command(Command::ViewJournal));
    let e = partop::exec::journal::Entry::new(
        "kill",
        false,
        serde_json::json!({}),
        serde_json::json!({}),
    );
    update(&mut s, Msg::Journal(vec![e], vec![], None, None));
    update(&mut s, Msg::Command(Command::OpenDetail));
    assert!(s.journal_open);
    assert!(key(&mut s, 'q').is_empty());
    assert!(!s.journal_open && s.view == View::Journal);
    assert_eq!(key(&mut s, 'q'), vec![Effect::Quit]);
    cases += 1;
    // Overlays: help, and staging (its own section binds q to cancel).
    let mut s = state("default", "dpx-nps2-two-models");
    key(&mut s, '?');
    assert!(key(&mut s, 'q').is_empty() && !s.help);
    key(&mut s, 'p');
    assert!(s.staging.is_some());
    assert!(key(&mut s, 'q').is_empty() && s.staging.is_none());
    assert_eq!(key(&mut s, 'q'), vec![Effect::Quit]);
    cases += 2;
    // ctrl-c quits from a drill-down too.
    let mut s = state("default", "dpx-nps2-two-models");
    update(&mut s, Msg::Command(Command::ViewDetail));
    assert_eq!(
        update(
            &mut s,
            Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL))
        ),
        vec![Effect::Quit]
    );
    cases += 1;
    assert_eq!(cases, 9, "drill-downs walked");
}

fn drawn(s: &State, w: u16, h: u16) -> String {
    let th = partop::ui::theme::Theme::load("default", std::path::Path::new("/nonexistent")).0;
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).unwrap();
    t.draw(|f| partop::ui::view::render(f, s, &th)).unwrap();
    format!("{}", t.backend())
}

fn mouse(s: &mut State, kind: ratatui::crossterm::event::MouseEventKind, x: u16, y: u16) {
    update(
        s,
        Msg::Mouse(ratatui::crossterm::event::MouseEvent {
            kind,
            column: x,
            row: y,
            modifiers: KeyModifiers::NONE,
        }),
    );
}

/// A click on each tab opens its view; a click on every drawn row of each list selects that
/// row (the one marked ▶ after the next frame); the wheel moves the selection; a click under an
/// overlay that takes the keys does nothing.
#[test]
fn mouse_clicks_tabs_and_rows_and_the_wheel_scrolls() {
    use ratatui::crossterm::event::{MouseButton, MouseEventKind};
    let click = MouseEventKind::Down(MouseButton::Left);
    let (w, h) = (120, 40);
    let mut s = state("default", "cpx-nps4-small-models");
    update(&mut s, Msg::Resize(w, h));
    // Tabs: every view, by clicking the first cell of its title on the tab row.
    let mut tabs = 0;
    for v in View::ALL {
        let text = drawn(&s, w, h);
        let row = text.lines().nth(3).unwrap().trim_matches('"').to_string();
        // ` 2 GPUs `: the title after its key, long or short as drawn.
        let x = [v.title(), v.short_title()]
            .iter()
            .find_map(|t| row.find(&format!(" {t}")))
            .unwrap_or_else(|| panic!("{v:?} in {row}"));
        let x = u16::try_from(row[..x].chars().count() + 1).unwrap();
        mouse(&mut s, click, x, 3);
        assert_eq!(s.view, v, "click at {x} on the {v:?} tab");
        tabs += 1;
    }
    // Rows: each list view, every row drawn.
    let mut rows = 0;
    for v in [View::Gpus, View::Processes] {
        update(&mut s, Msg::Command(v.command()));
        update(&mut s, Msg::Command(Command::Top));
        drawn(&s, w, h);
        // The first list row is under the table's header (row 4 border, 5 header).
        let len = match v {
            View::Gpus => 64,
            _ => s.rows.len(),
        };
        let shown = len.min(usize::from(h) - 4 - 1 - 3);
        for i in 0..shown {
            let y = 6 + u16::try_from(i).unwrap();
            mouse(&mut s, click, 10, y);
            let sel = if v == View::Gpus {
                s.gpu_sel
            } else {
                s.proc_sel
            };
            assert_eq!(sel, i, "{v:?}: click on screen row {y}");
            let after = drawn(&s, w, h);
            let marked = after.lines().nth(usize::from(y)).unwrap();
            assert!(marked.contains('▶'), "{v:?} row {i} marked: {marked}");
            rows += 1;
        }
        // Below the last row: nothing changes.
        let before = if v == View::Gpus {
            s.gpu_sel
        } else {
            s.proc_sel
        };
        mouse(&mut s, click, 10, h - 2);
        let after = if v == View::Gpus {
            s.gpu_sel
        } else {
            s.proc_sel
        };
        if shown < len {
            // The list fills the screen: the last row drawn is still a row.
        } else {
            assert_eq!(before, after, "{v:?}: a click below the rows");
        }
    }
    // The wheel: down 5, up 2.
    update(&mut s, Msg::Command(Command::ViewGpus));
    update(&mut s, Msg::Command(Command::Top));
    for _ in 0..5 {
        mouse(&mut s, MouseEventKind::ScrollDown, 10, 10);
    }
    for _ in 0..2 {
        mouse(&mut s, MouseEventKind::ScrollUp, 10, 10);
    }
    assert_eq!(s.gpu_sel, 3);
    // Under the help (it takes the keys) a click on a tab does nothing.
    drawn(&s, w, h);
    update(&mut s, Msg::Command(Command::ToggleHelp));
    drawn(&s, w, h);
    mouse(&mut s, click, 2, 3);
    assert_eq!(s.view, View::Gpus);
    eprintln!("{tabs} tabs and {rows} rows clicked");
    assert_eq!(tabs, View::ALL.len());
    assert!(rows > 30, "{rows} rows clicked");
}

#[test]
fn direct_sort_keys_sort_and_a_second_press_reverses() {
    // Every direct sort key of the default keymap, on the processes of a two-model node: the
    // first press sorts by its column in the column's natural order, a second reverses.
    let cases = [
        ('M', SortKey::Vram, true),
        ('U', SortKey::Busy, true),
        ('C', SortKey::Cpu, true),
        ('T', SortKey::Start, true),
        ('N', SortKey::Name, false),
    ];
    for (k, sort, desc) in cases {
        let mut s = state("default", "dpx-nps2-two-models");
        key(&mut s, '3');
        // Start from another sort, so the first press is a change.
        key(&mut s, if sort == SortKey::Name { 'M' } else { 'N' });
        key(&mut s, k);
        assert_eq!((s.sort, s.sort_desc), (sort, desc), "{k}");
        let snap = s.snapshot.clone().unwrap();
        let names: Vec<Option<String>> = s
            .rows
            .iter()
            .filter_map(|r| match r {
                ProcRow::Process { index, .. } => Some(snap.processes[*index].name.clone()),
                ProcRow::Heading(_) => None,
            })
            .collect();
        key(&mut s, k);
        assert_eq!((s.sort, s.sort_desc), (sort, !desc), "{k} again reverses");
        if sort == SortKey::Name {
            let mut sorted = names.clone();
            sorted.sort();
            assert_eq!(names, sorted, "names ascending");
        }
    }
    assert_eq!(cases.len(), 5, "5 direct sort keys checked");
}
