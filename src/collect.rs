//! Collectors: everything that reads the node (runs amd-smi, reads /proc and sysfs) and turns it
//! into [`crate::domain::Snapshot`]s. All I/O lives here and in `exec`; the parsers inside are
//! pure so they can be tested on fixtures.

pub mod amdsmi;
pub mod clock;
pub mod cluster;
pub mod enrich;
pub mod fleet;
pub mod fleet_prometheus;
pub mod holders;
pub mod host;
pub mod kernel;
pub mod kfd;
pub mod kube_node;
pub mod kubelet;
pub mod merge;
pub mod nvidia;
pub mod pipeline;
pub mod podresources;
pub mod ports;
pub mod procinfo;
pub mod served;
pub mod small_file;
pub mod sysfs;
pub mod task;
pub mod usage;
