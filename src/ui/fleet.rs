//! The fleet view: one row per node (host and product, modes and logical GPUs, GFX busy and
//! VRAM with a spark, models healthy of total, findings by severity, source health and data
//! age, reachability with the reason), the fleet's totals in the header, worst first, filtered
//! by any word shown, tagged, and a change staged on the tagged nodes and rolled out without
//! leaving the view. An app like the monitor: its own state, messages, reducer and view, run by
//! `app` (which opens a node in the monitor's own loop); keys through the same keymap (section
//! `fleet`) and Command enum as the monitor; rows come in as messages from the transports.

pub mod app;
pub mod msg;
pub mod state;
pub mod update;
pub mod view;

pub use msg::{FleetEffect, FleetMsg, Staged};
pub use state::{FleetSort, FleetStage, FleetState, NodeRow, Phase, Totals, cells, totals};
pub use update::{command, key, update};
pub use view::{render, table_text};
