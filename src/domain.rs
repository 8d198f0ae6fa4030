//! The pure domain model: what a node *is* (physical GPUs, their partitions, the processes on
//! them) and the rules of AMD partitioning. Sits at the centre of the data flow: collectors build
//! [`Snapshot`]s, the UI and planners read them. No I/O, no tokio, no ratatui here; the
//! architecture test in `tests/architecture.rs` enforces that.

pub mod balancer;
pub mod cgroup;
pub mod cluster;
pub mod cluster_rollout;
pub mod findings;
pub mod fingerprint;
pub mod fleet;
pub mod history;
pub mod journal;
pub mod k8s;
pub mod k8s_ops;
pub mod kill;
pub mod label_selector;
pub mod latency;
pub mod layout;
pub mod mig;
pub mod mig_profiles;
pub mod model_status;
pub mod models;
pub mod modes;
pub mod partition_managers;
pub mod placement;
pub mod plan;
pub mod plan_k8s;
pub mod product;
pub mod provenance;
pub mod replica_set;
pub mod replicas;
pub mod sanity;
pub mod served;
pub mod snapshot;
pub mod text;
pub mod throughput;

pub use modes::{ComputeMode, MemoryMode};
pub use provenance::{Missing, Origin, Provenance, SourceKind};
pub use snapshot::{GpuUse, Health, LogicalGpu, PhysicalGpu, Process, Snapshot, SourceStatus};
