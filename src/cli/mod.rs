//! The command layer, on top of everything: the clap definitions (`args`), the dispatcher
//! (`commands`), one file per group of subcommands, and the monitor's wiring. Nothing below
//! imports this module (`tests/architecture.rs`).

pub mod args;
pub mod check_config;
pub mod commands;
pub mod kill;
pub mod mig;
pub mod models;
pub mod monitor;
pub mod out;

pub use args::*;
