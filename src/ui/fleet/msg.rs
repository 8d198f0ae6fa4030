//! What the fleet view's reducer receives (keys, commands, node rows and reachability, what
//! planning and a rollout say) and what it asks the app loop for (effects).

use crate::collect::fleet::FleetEvent;
use crate::domain::{ComputeMode, MemoryMode};
use crate::ui::command::Command;
use ratatui::crossterm::event::KeyEvent;
use std::path::PathBuf;

/// Everything the fleet's reducer can receive.
#[derive(Clone, Debug)]
pub enum FleetMsg {
    /// A key press.
    Key(KeyEvent),
    /// A bound command (from a key, or a test).
    Command(Command),
    /// The terminal's new size.
    Resize(u16, u16),
    /// The clock (ages on screen), ms.
    Tick(u64),
    /// A node's row or reachability, from its transport.
    Node(FleetEvent),
    /// A line said by planning or the rollout.
    Said(String),
    /// Planning ended: the set, or why there is none.
    Planned(Result<Staged, String>),
    /// The rollout ended: done on every node, or where and why it stopped.
    RolledOut(Result<(), String>),
    /// For the monitor of the node open from the fleet (its samples, what its effects send
    /// back): the app routes it there; the fleet's reducer does nothing with it.
    Monitor(Box<crate::ui::state::Msg>),
    /// The open node's stream ended (why is logged): the fleet is back, and says so.
    StreamEnded(String),
}

/// A planned set, saved, waiting for its fingerprint typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Staged {
    /// The set's fingerprint (over every node and plan): the word typed to roll it out.
    pub fingerprint: String,
    /// Where the set is saved (what the rollout reads, verified again there).
    pub file: PathBuf,
}

/// What the fleet view asks the loop for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetEffect {
    /// Leave.
    Quit,
    /// Open the monitor's views on this node, read only.
    Open(String),
    /// Every named node plans its own change to these modes (None keeps), as `fleet plan`.
    Plan {
        /// The nodes, by name.
        nodes: Vec<String>,
        /// Compute mode.
        compute: Option<ComputeMode>,
        /// Memory mode.
        memory: Option<MemoryMode>,
    },
    /// Roll out a confirmed set, as `fleet apply` (only ever after its fingerprint was typed).
    Rollout(Staged),
}
