//! The cluster view's reducer: keys through the keymap (section `fleet`, the fleet's keys) to
//! the one Command enum, the watch's views, a node's live detail, tags and a rollout staged on
//! them (its keys in `stage`). Pure: it changes the state and returns effects.

use super::msg::{ClusterEffect, ClusterMsg};
use super::stage::ClusterStage;
use super::state::{ClusterState, Detail};
use crate::ui::command::Command;
use crate::ui::keymap::Section;
use ratatui::crossterm::event::{KeyEvent, KeyEventKind};

/// The reducer.
pub fn update(s: &mut ClusterState, m: ClusterMsg) -> Vec<ClusterEffect> {
    match m {
        ClusterMsg::Key(k) => return key(s, &k),
        ClusterMsg::Command(c) => return command(s, c),
        ClusterMsg::Resize(w, h) => s.size = (w, h),
        ClusterMsg::Tick(now) => s.now_ms = now,
        ClusterMsg::Changed => {}
        ClusterMsg::View {
            nodes,
            pods,
            trouble,
        } => {
            s.trouble = trouble;
            s.set_view(nodes, pods);
        }
        ClusterMsg::Live(node, r) => {
            if let Some(d) = s.detail.as_mut().filter(|d| d.node == node) {
                d.live = Some(r);
            }
        }
        ClusterMsg::Planned(r) => {
            if let Some(st) = s.stage.as_mut() {
                st.planned(r);
            }
        }
        ClusterMsg::Rollout(n) => {
            if let Some(st) = s.stage.as_mut() {
                st.note(n);
            }
        }
        ClusterMsg::RolledOut(r) => {
            if let Some(st) = s.stage.as_mut() {
                st.rolled_out(r);
            }
        }
    }
    Vec::new()
}

/// A key press: the filter being typed first, then the keymap.
pub fn key(s: &mut ClusterState, k: &KeyEvent) -> Vec<ClusterEffect> {
    if k.kind == KeyEventKind::Release {
        return Vec::new();
    }
    s.notice = None;
    if let Some(st) = s.stage.as_mut() {
        let r = super::stage::key(st, k);
        if r.close {
            s.stage = None;
        }
        return r.effects;
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

/// A command in the cluster view.
pub fn command(s: &mut ClusterState, c: Command) -> Vec<ClusterEffect> {
    let last = s.order.len().saturating_sub(1);
    let page = usize::from(s.size.1.saturating_sub(10)).max(1);
    match c {
        Command::Quit if s.stage.as_ref().is_some_and(ClusterStage::busy) => {
            s.notice = Some("a rollout is being planned or runs: it finishes first".into());
        }
        Command::Quit => return vec![ClusterEffect::Quit],
        Command::ToggleHelp => s.help = !s.help,
        Command::SelectNext => s.sel = (s.sel + 1).min(last),
        Command::SelectPrev => s.sel = s.sel.saturating_sub(1),
        Command::PageDown => s.sel = (s.sel + page).min(last),
        Command::PageUp => s.sel = s.sel.saturating_sub(page),
        Command::Top => s.sel = 0,
        Command::Bottom => s.sel = last,
        Command::Filter => s.editing = true,
        Command::OpenDetail => {
            if let Some(n) = s.selected().map(str::to_string) {
                s.detail = Some(Detail {
                    node: n.clone(),
                    live: None,
                });
                return vec![ClusterEffect::Live(n)];
            }
        }
        Command::Cancel => {
            if s.help {
                s.help = false;
            } else if s.detail.is_some() {
                s.detail = None;
            } else if !s.filter.is_empty() {
                s.filter.clear();
                s.derive();
            }
        }
        Command::TagNode => {
            if let Some(n) = s.selected().map(str::to_string)
                && !s.tagged.remove(&n)
            {
                s.tagged.insert(n);
            }
            s.sel = (s.sel + 1).min(last);
        }
        Command::TagAllShown => tag_all_shown(s),
        Command::StageChange => stage(s),
        _ => {}
    }
    Vec::new()
}

/// `a`: every node shown tagged (the fleet's rule).
fn tag_all_shown(s: &mut ClusterState) {
    let shown: Vec<String> = s.order.iter().map(|i| s.rows[*i].name.clone()).collect();
    crate::ui::fleet::state::tag_all_shown(&mut s.tagged, shown);
}

/// `p`: a rollout staged on the tagged nodes (else the selected one). Not offered read only
/// (the keymap drops the key; a command sent otherwise is refused here too).
fn stage(s: &mut ClusterState) {
    if s.keymap
        .keys_for(crate::ui::keymap::Section::Fleet, Command::StageChange)
        .is_empty()
    {
        s.notice = Some("read only: this view stages no rollout".into());
        return;
    }
    let nodes: Vec<String> = if s.tagged.is_empty() {
        s.selected().map(str::to_string).into_iter().collect()
    } else {
        s.tagged.iter().cloned().collect()
    };
    if nodes.is_empty() {
        s.notice = Some("no node to stage a rollout on".into());
        return;
    }
    s.detail = None;
    s.help = false;
    s.stage = Some(ClusterStage::new(nodes));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::cluster::ClusterNode;
    use crate::ui::keymap::Keymap;
    use ratatui::crossterm::event::{KeyCode, KeyModifiers};

    fn key(c: char) -> ClusterMsg {
        ClusterMsg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
    }

    fn state(read_only: bool) -> ClusterState {
        let (km, e) = Keymap::load("default", None, read_only);
        assert!(e.is_empty(), "{e:?}");
        let mut s = ClusterState::new(km, "test".into());
        let nodes = ["a", "b", "c"]
            .iter()
            .map(|n| ClusterNode {
                name: (*n).to_string(),
                capacity: [("amd.com/gpu".to_string(), 8)].into(),
                ready: Some(true),
                ..ClusterNode::default()
            })
            .collect();
        s.set_view(nodes, Vec::new());
        s
    }

    #[test]
    fn tags_one_all_shown_and_stage_on_them() {
        let mut s = state(false);
        update(&mut s, key(' '));
        assert_eq!(s.tagged.iter().collect::<Vec<_>>(), ["a"]);
        // `a` under a filter tags what is shown; again, untags it.
        s.filter = "b".into();
        s.derive();
        update(&mut s, key('a'));
        assert_eq!(s.tagged.iter().collect::<Vec<_>>(), ["a", "b"]);
        update(&mut s, key('a'));
        assert_eq!(s.tagged.iter().collect::<Vec<_>>(), ["a"]);
        s.filter.clear();
        s.derive();
        update(&mut s, key('a'));
        assert_eq!(s.tagged.len(), 3);
        update(&mut s, key('p'));
        assert_eq!(
            s.stage.as_ref().map(|st| st.nodes.clone()),
            Some(vec!["a".into(), "b".into(), "c".into()])
        );
        // Keys go to the stage while it is open: `q` is a letter of the layout.
        update(&mut s, key('q'));
        assert_eq!(s.stage.as_ref().map(|st| st.word.as_str()), Some("q"));
    }

    #[test]
    fn read_only_offers_no_staging() {
        let mut s = state(true);
        update(&mut s, key(' '));
        assert_eq!(update(&mut s, key('p')), []);
        assert!(s.stage.is_none());
        // Nor through a command sent otherwise.
        update(&mut s, ClusterMsg::Command(Command::StageChange));
        assert!(s.stage.is_none());
        assert!(s.notice.as_deref().is_some_and(|n| n.contains("read only")));
    }
}
