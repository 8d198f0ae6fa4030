//! Executors: everything that changes the node (signals now; partition changes next), each step
//! journaled. Only reachable with a plan the operator confirmed.

pub mod apply;
pub mod journal;
pub mod kill;
pub mod mig;
pub mod models;
pub mod signal;
