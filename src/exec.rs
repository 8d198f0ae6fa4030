//! Executors: everything that changes the node (signals, partition changes, MIG, models), each
//! step journaled before it acts, one change at a time per node (`lock`). Only reachable with a
//! plan the operator confirmed.

pub mod apply;
pub mod balancer;
pub mod cluster_rollout;
pub mod journal;
pub mod k8s;
pub mod kill;
pub mod lock;
pub mod mig;
pub mod models;
pub mod protocol;
pub mod registry;
pub mod rollout;
pub mod runlog;
pub mod safe_file;
pub mod signal;
pub mod throughput;
