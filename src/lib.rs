//! partop: a terminal console for AMD Instinct GPU nodes.
//!
//! Layers, with arrows pointing one way (see `docs/ARCHITECTURE.md`):
//! - [`domain`]: the pure model and rules (no I/O);
//! - [`collect`]: collectors (amd-smi, /proc) producing [`domain::Snapshot`]s;
//! - [`exec`]: executors that change the node (signals), journaled;
//! - [`sim`]: the simulated node (a fake amd-smi with real workload processes);
//! - [`ui`]: state, reducer, views;
//! - [`serve`]: the headless service: Prometheus metrics, JSON and events over HTTP;
//! - [`config`]: paths and settings, resolved once;
//! - [`node`]: the data source, chosen once;
//! - [`cli`]: command-line definitions, the dispatcher and every command (the monitor too).

pub mod cli;
pub mod collect;
pub mod config;
pub mod domain;
pub mod exec;
pub mod node;
pub mod report;
pub mod serve;
pub mod sim;
pub mod ui;
