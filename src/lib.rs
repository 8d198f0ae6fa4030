//! partop: a terminal console for AMD Instinct GPU nodes.
//!
//! Layers, with arrows pointing one way (see `docs/ARCHITECTURE.md`):
//! - [`domain`]: the pure model and rules (no I/O);
//! - [`collect`]: collectors (amd-smi, /proc) producing [`domain::Snapshot`]s;
//! - [`exec`]: executors that change the node (signals), journaled;
//! - [`sim`]: the simulated node (a fake amd-smi with real workload processes);
//! - [`ui`]: state, reducer, views;
//! - [`cli`]: command-line definitions and the non-interactive commands.

pub mod cli;
pub mod collect;
pub mod commands;
pub mod domain;
pub mod exec;
pub mod exec_cli;
pub mod models_cli;
pub mod nvidia_cli;
pub mod paths;
pub mod report;
pub mod sim;
pub mod ui;
