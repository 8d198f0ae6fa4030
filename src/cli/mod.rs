//! The command layer, on top of everything: the clap definitions (`args`), the dispatcher
//! (`commands`), one file per group of subcommands, and the monitor's wiring. Nothing below
//! imports this module (`tests/architecture.rs`).

pub mod apply;
pub mod args;
pub mod check_config;
pub mod cluster_rollouts;
pub mod commands;
pub mod fleet;
pub mod fleet_apply;
pub mod fleet_cluster;
pub mod fleet_kube;
pub mod fleet_nodes;
pub mod fleet_rollouts;
pub mod fleet_view;
pub mod kill;
pub mod mig;
pub mod models;
pub mod monitor;
pub mod out;
pub mod plan;
pub mod record;
pub mod serve;
pub mod sim;
pub mod snapshot;
pub mod stream;

pub use args::*;
