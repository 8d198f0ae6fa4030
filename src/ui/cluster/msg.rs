//! What the cluster view's reducer receives (keys, the watch's latest view, a node's live
//! detail) and what it asks the loop for.

use crate::domain::cluster::{ClusterNode, GpuPod};
use crate::ui::command::Command;
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
}

/// What the cluster view asks the loop for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterEffect {
    /// Leave.
    Quit,
    /// Read this node's live detail (shown when it comes).
    Live(String),
}
