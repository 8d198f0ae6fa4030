//! The cluster view's reducer: keys through the keymap (section `fleet`, the fleet's keys) to
//! the one Command enum, the watch's views, a node's live detail. Pure: it changes the state
//! and returns effects.

use super::msg::{ClusterEffect, ClusterMsg};
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
    }
    Vec::new()
}

/// A key press: the filter being typed first, then the keymap.
pub fn key(s: &mut ClusterState, k: &KeyEvent) -> Vec<ClusterEffect> {
    if k.kind == KeyEventKind::Release {
        return Vec::new();
    }
    s.notice = None;
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
        Command::StageChange | Command::TagNode => {
            s.notice = Some(
                "changes through the cluster (cordon, evict, DCM/MIG-manager labels) are not built yet: this view reads only"
                    .into(),
            );
        }
        _ => {}
    }
    Vec::new()
}
