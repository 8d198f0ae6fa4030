//! The cluster as an app of the one app loop (`ui::app::run_app`): `partop fleet --kubernetes`
//! live. Its rows and signals are `domain::cluster`'s, fed by the API server's watch
//! (`collect::cluster`: every watch event wakes the loop, coalesced to its frame rate); it
//! draws the nodes worst first, the cluster's signals worst first, `/` filters both, Enter
//! opens a node's detail.

pub mod app;
pub mod msg;
pub mod rollout;
pub mod stage;
pub mod stage_view;
pub mod state;
pub mod update;
pub mod view;

pub use msg::{ClusterEffect, ClusterMsg};
pub use state::ClusterState;
pub use update::update;
pub use view::render;
