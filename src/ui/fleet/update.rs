//! The fleet view's reducer: keys through the keymap (section `fleet`) to the same Command enum
//! as the monitor, node rows from the transports, and a staged change from the modes chosen to
//! the end of its rollout (plan → show → the set's fingerprint typed → roll out). Pure: it
//! changes the state and returns effects.

use super::msg::{FleetEffect, FleetMsg, Staged};
use super::state::{FleetSort, FleetStage, FleetState, Phase};
use crate::collect::fleet::{FleetEvent, Reach};
use crate::domain::{ComputeMode, MemoryMode};
use crate::ui::command::Command;
use crate::ui::confirm::{Confirming, Typed};
use crate::ui::keymap::Section;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind};

/// The reducer.
pub fn update(s: &mut FleetState, m: FleetMsg) -> Vec<FleetEffect> {
    match m {
        FleetMsg::Key(k) => return key(s, &k),
        FleetMsg::Command(c) => return command(s, c),
        FleetMsg::Resize(w, h) => s.size = (w, h),
        FleetMsg::Tick(now) => {
            // Data goes stale with the clock: the worst-first order and the filter follow.
            s.now_ms = now;
            s.derive();
        }
        // A row is stamped with the loop's clock (the last tick, at most 200 ms old): the
        // reducer reads no clock of its own.
        FleetMsg::Node(e) => {
            let now = s.now_ms;
            node(s, e, now);
        }
        FleetMsg::Said(l) => {
            if let Some(st) = s.stage.as_mut() {
                st.say(&l);
            }
        }
        FleetMsg::Planned(r) => planned(s, r),
        FleetMsg::RolledOut(r) => {
            if let Some(st) = s.stage.as_mut() {
                st.phase = Phase::Done(r);
            }
        }
        FleetMsg::Monitor(_) => {}
        FleetMsg::StreamEnded(name) => {
            s.notice = Some(format!(
                "{name}: its stream ended (the log says why); back to the fleet"
            ));
        }
    }
    Vec::new()
}

/// A transport's report.
fn node(s: &mut FleetState, e: FleetEvent, now: u64) {
    match e {
        FleetEvent::Row(n, r) => s.row(&n, *r, now),
        FleetEvent::Reach(n, Reach::Down(why)) => s.reach(&n, Some(why), false),
        FleetEvent::Reach(n, Reach::Connecting) => {
            // The last row stays on screen while reconnecting.
            let keep = s
                .rows
                .iter()
                .find(|r| r.name == n)
                .and_then(|r| r.down.clone());
            s.reach(&n, keep, true);
        }
        FleetEvent::Reach(n, Reach::Up) => s.reach(&n, None, false),
    }
}

fn planned(s: &mut FleetState, r: Result<Staged, String>) {
    let Some(st) = s.stage.as_mut() else { return };
    match r {
        Ok(set) => {
            st.phase = Phase::Review;
            st.staged = Some(set);
        }
        Err(e) => st.phase = Phase::Done(Err(format!("nothing was planned: {e}"))),
    }
}

/// A key press: the staged change's dialog first, then the filter being typed, then the keymap.
pub fn key(s: &mut FleetState, k: &KeyEvent) -> Vec<FleetEffect> {
    if k.kind == KeyEventKind::Release {
        return Vec::new();
    }
    s.notice = None;
    if s.stage.is_some() {
        return stage_key(s, k);
    }
    if s.editing {
        crate::ui::filter::typed(&mut s.filter, &mut s.editing, k);
        s.sel = 0;
        s.derive();
        return Vec::new();
    }
    let Some(c) = s.keymap.press(&[Section::Fleet], &mut s.pending, k) else {
        return Vec::new();
    };
    command(s, c)
}

/// The next of `all` after `cur` (None, then each, then None again: None keeps the mode).
fn next_of<T: Copy + PartialEq>(all: &[T], cur: Option<T>) -> Option<T> {
    match cur {
        None => all.first().copied(),
        Some(c) => all
            .iter()
            .position(|x| *x == c)
            .and_then(|i| all.get(i + 1))
            .copied(),
    }
}

/// Keys while a change is staged: `c`/`m` choose the modes and Enter plans; Enter again asks
/// for the set's fingerprint, typed exactly (the one confirmation of `ui::confirm`), which
/// rolls it out; Esc steps back. Planning and the rollout cannot be left while they run.
fn stage_key(s: &mut FleetState, k: &KeyEvent) -> Vec<FleetEffect> {
    let Some(st) = s.stage.as_mut() else {
        return Vec::new();
    };
    st.notice = None;
    match st.phase.clone() {
        Phase::Choose => match k.code {
            KeyCode::Char('c') => st.compute = next_of(&ComputeMode::ALL, st.compute),
            KeyCode::Char('m') => st.memory = next_of(&MemoryMode::ALL, st.memory),
            KeyCode::Esc | KeyCode::Char('q') => s.stage = None,
            KeyCode::Enter if st.compute.is_none() && st.memory.is_none() => {
                st.notice = Some(
                    "nothing staged yet: c chooses the compute mode, m the memory mode".into(),
                );
            }
            KeyCode::Enter => {
                st.phase = Phase::Planning;
                return vec![FleetEffect::Plan {
                    nodes: st.nodes.clone(),
                    compute: st.compute,
                    memory: st.memory,
                }];
            }
            _ => {}
        },
        Phase::Planning | Phase::Rolling => {
            st.notice = Some(if st.phase == Phase::Planning {
                "the nodes are planning; wait for their plans".into()
            } else {
                "the rollout is running node by node; it stops only at a failure (the fleet journal records it)".into()
            });
        }
        Phase::Review => {
            let Some(set) = st.staged.clone() else {
                return Vec::new();
            };
            match st.confirming.as_mut() {
                None => match k.code {
                    KeyCode::Enter => {
                        st.confirming = Some(Confirming {
                            typed: String::new(),
                            fingerprint: set.fingerprint.clone(),
                            notice: None,
                        });
                    }
                    KeyCode::Esc | KeyCode::Char('q') => s.stage = None,
                    _ => {}
                },
                Some(c) => match c.key(k, &set.fingerprint, &set.fingerprint) {
                    Typed::Cancel => st.confirming = None,
                    Typed::Pending => {}
                    Typed::Confirmed => {
                        st.confirming = None;
                        st.phase = Phase::Rolling;
                        st.say(&format!("rolling out set {}", set.fingerprint));
                        return vec![FleetEffect::Rollout(set)];
                    }
                },
            }
        }
        Phase::Done(_) => {
            if matches!(k.code, KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q')) {
                s.stage = None;
            }
        }
    }
    Vec::new()
}

/// The nodes a change would go to: the tagged ones, else the selected one.
fn picked(s: &FleetState) -> Vec<String> {
    if s.tagged.is_empty() {
        s.selected().map(str::to_string).into_iter().collect()
    } else {
        s.tagged.iter().cloned().collect()
    }
}

/// A command in the fleet view.
pub fn command(s: &mut FleetState, c: Command) -> Vec<FleetEffect> {
    let last = s.order.len().saturating_sub(1);
    let page = usize::from(s.size.1.saturating_sub(8)).max(1);
    match c {
        Command::Quit => {
            if s.stage.as_ref().is_some_and(FleetStage::busy) {
                s.notice =
                    Some("a change is being planned or rolled out: it finishes first".into());
                return Vec::new();
            }
            return vec![FleetEffect::Quit];
        }
        Command::ToggleHelp => s.help = !s.help,
        Command::SelectNext => s.sel = (s.sel + 1).min(last),
        Command::SelectPrev => s.sel = s.sel.saturating_sub(1),
        Command::PageDown => s.sel = (s.sel + page).min(last),
        Command::PageUp => s.sel = s.sel.saturating_sub(page),
        Command::Top => s.sel = 0,
        Command::Bottom => s.sel = last,
        Command::CycleSort => {
            let i = FleetSort::ORDER
                .iter()
                .position(|x| *x == s.sort)
                .unwrap_or(0);
            s.sort = FleetSort::ORDER[(i + 1) % FleetSort::ORDER.len()];
            s.desc = matches!(
                s.sort,
                FleetSort::Busy | FleetSort::Findings | FleetSort::Logical
            );
            s.derive();
        }
        Command::ReverseSort => {
            s.desc = !s.desc;
            s.derive();
        }
        Command::Filter => s.editing = true,
        Command::TagNode => {
            if let Some(n) = s.selected().map(str::to_string)
                && !s.tagged.remove(&n)
            {
                s.tagged.insert(n);
            }
            s.sel = (s.sel + 1).min(last);
        }
        Command::TagAllShown => {
            let shown: Vec<String> = s.order.iter().map(|i| s.rows[*i].name.clone()).collect();
            super::state::tag_all_shown(&mut s.tagged, shown);
        }
        Command::StageChange => stage(s),
        Command::OpenDetail => {
            if let Some(n) = s.selected()
                && s.rows.iter().any(|r| r.name == n && r.summary.is_some())
            {
                return vec![FleetEffect::Open(n.to_string())];
            }
        }
        Command::Cancel => {
            if s.help {
                s.help = false;
            } else if !s.filter.is_empty() {
                s.filter.clear();
                s.derive();
            }
        }
        _ => {}
    }
    Vec::new()
}

/// `p`: a change staged on the picked nodes, when every one of them can take it.
fn stage(s: &mut FleetState) {
    let nodes = picked(s);
    if nodes.is_empty() {
        return;
    }
    let fixed: Vec<&str> = s
        .rows
        .iter()
        .filter(|r| nodes.contains(&r.name) && !r.changeable)
        .map(|r| r.name.as_str())
        .collect();
    if !fixed.is_empty() {
        s.notice = Some(format!(
            "{} read only here ({}): changes go to nodes reached over ssh or rehearsal nodes",
            fixed.join(", "),
            s.via
        ));
        return;
    }
    s.stage = Some(FleetStage::new(nodes));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ui::fleet::state::NodeRow;
    use crate::ui::keymap::Keymap;
    use ratatui::crossterm::event::KeyModifiers;

    fn key(c: char) -> FleetMsg {
        FleetMsg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
    }

    #[test]
    fn keys_sort_tag_filter_and_stage() {
        let (km, e) = Keymap::load("default", None, false);
        assert!(e.is_empty(), "{e:?}");
        let rows = ["b", "a", "c"]
            .iter()
            .map(|n| NodeRow::connecting(n, true))
            .collect();
        let mut s = FleetState::new(rows, km, "ssh".into(), 1);
        assert_eq!(s.selected(), Some("a"), "none worse than another: by name");
        assert_eq!(update(&mut s, key(' ')), []);
        assert!(s.tagged.contains("a"));
        // p stages on the tagged node; the plan is asked once the modes are chosen.
        assert_eq!(update(&mut s, key('p')), []);
        assert_eq!(
            s.stage.as_ref().map(|x| x.nodes.clone()),
            Some(vec!["a".into()])
        );
        update(&mut s, key('c'));
        assert_eq!(
            update(
                &mut s,
                FleetMsg::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE))
            ),
            [FleetEffect::Plan {
                nodes: vec!["a".into()],
                compute: Some(ComputeMode::Spx),
                memory: None
            }]
        );
        update(&mut s, FleetMsg::Planned(Err("refused".into())));
        update(
            &mut s,
            FleetMsg::Key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE)),
        );
        assert!(s.stage.is_none());
        // (`c` would keep all three: each row shows `connecting…`.)
        update(&mut s, key('/'));
        update(&mut s, key('b'));
        assert_eq!(s.order.len(), 1);
        // Read only: staging is gone from the keys.
        let (km, _) = Keymap::load("default", None, true);
        let mut r = FleetState::new(vec![NodeRow::connecting("a", true)], km, "ssh".into(), 1);
        assert_eq!(update(&mut r, key('p')), []);
        assert!(r.stage.is_none());
    }
}
