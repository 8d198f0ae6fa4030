//! The simulated node: a product feature for rehearsing repartitions without hardware, and the
//! backbone of partop's tests. A scenario (TOML) describes GPUs, modes and workloads; `start`
//! writes a state file and launches each workload as a real OS process; the fake `amd-smi`
//! (`partop sim amd-smi`) answers from that state with output shaped like the real tool's, and
//! enforces the hardware's rules (see `rules`) at the real tool's cost (`cost`); the kernel
//! twin (`kernel`) shows the same node through the kernel's files.

pub mod amdsmi;
pub mod cluster;
pub mod cost;
pub mod fleet;
pub mod human;
pub mod kernel;
pub mod kubelet;
pub mod load;
pub mod nvidia;
pub mod pyjson;
pub mod replay;
pub mod rules;
pub mod scenario;
pub mod session;
pub mod state;
pub mod workload;
