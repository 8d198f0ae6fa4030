//! What the cluster view's reducer receives (keys, the watch's latest view, a node's live
//! detail, a staged rollout's plan and progress) and what it asks the loop for.

use super::stage::{ClusterPlanned, RolloutNote};
use crate::domain::cluster::{ClusterNode, GpuPod};
use crate::domain::cluster_rollout::Target;
use crate::ui::command::Command;
use crate::ui::fleet::Staged;
use ratatui::crossterm::event::KeyEvent;

/// Everything the cluster view's reducer can receive.
#[derive(Clone, Debug)]
pub enum ClusterMsg {
    /// A key press.
    Key(KeyEvent),
    /// A bound command (from a key, or a test).
    Command(Command),
    /// The terminal's new size.
    Resize(u16, u16),
    /// The clock, ms.
    Tick(u64),
    /// The watch saw something (the loop rereads the stores at its next frame).
    Changed,
    /// The cluster as the watch last saw it, and its trouble (None: the watch is healthy).
    View {
        /// GPU nodes, by name.
        nodes: Vec<ClusterNode>,
        /// Pods that ask for a GPU.
        pods: Vec<GpuPod>,
        /// What went wrong last, said once.
        trouble: Option<String>,
    },
    /// A node's live detail (its `partop serve` through the API server's pod proxy): the
    /// lines to show, or why there are none.
    Live(String, Result<Vec<String>, String>),
    /// Planning a staged rollout ended: the plan, or why there is none.
    Planned(Result<ClusterPlanned, String>),
    /// The rollout said something about a node.
    Rollout(RolloutNote),
    /// The rollout ended: done on every node, or where and why it stopped.
    RolledOut(Result<(), String>),
}

/// What the cluster view asks the loop for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterEffect {
    /// Leave.
    Quit,
    /// Read this node's live detail (shown when it comes).
    Live(String),
    /// Plan `target` on these nodes with the planner of `fleet --kubernetes plan` (off the
    /// loop); the plan comes back as [`ClusterMsg::Planned`].
    Plan {
        /// The nodes, by name.
        nodes: Vec<String>,
        /// The layout or MIG config asked.
        target: Target,
    },
    /// Roll out a planned set whose fingerprint was typed, as `fleet --kubernetes apply`
    /// (off the loop); its progress comes back as [`ClusterMsg::Rollout`].
    Rollout(Staged),
}
