//! How the cluster view's staged rollout reaches the cluster: [`ClusterRollouts`], supplied by
//! the command layer (the planner of `fleet --kubernetes plan`, and `exec::rollout` with the
//! cluster engine as `fleet --kubernetes apply` runs it), called here on a blocking thread so
//! the loop keeps drawing; what it says comes back as the view's messages.

use super::msg::{ClusterEffect, ClusterMsg};
use super::stage::{ClusterPlanned, RolloutNote};
use crate::domain::cluster_rollout::Target;
use crate::ui::fleet::Staged;
use std::sync::Arc;
use tokio::sync::mpsc;

/// How a staged cluster rollout is planned and run. Blocking.
pub trait ClusterRollouts: Send + Sync {
    /// Plans `target` on `nodes` and saves the set; the plan as shown, or why there is none.
    ///
    /// # Errors
    /// The API server refused or could not be reached, or the set cannot be saved.
    fn plan(&self, nodes: &[String], target: &Target) -> Result<ClusterPlanned, String>;

    /// Rolls out a set whose fingerprint was typed, each node's progress told on `note`.
    ///
    /// # Errors
    /// Where the rollout stopped and why (the first failing node stops it), or a refusal
    /// before anything changed.
    fn roll_out(&self, set: &Staged, note: &(dyn Fn(RolloutNote) + Sync)) -> Result<(), String>;
}

/// Runs a planning or rollout effect off the loop; without a way to change the cluster (read
/// only), it is refused as such.
pub fn off_loop(
    rollouts: Option<Arc<dyn ClusterRollouts>>,
    tx: &mpsc::Sender<ClusterMsg>,
    e: ClusterEffect,
) {
    let tx = tx.clone();
    let Some(r) = rollouts else {
        let why = "this view changes nothing: it was started read only".to_string();
        let _ = tx.try_send(match e {
            ClusterEffect::Rollout(_) => ClusterMsg::RolledOut(Err(why)),
            _ => ClusterMsg::Planned(Err(why)),
        });
        return;
    };
    tokio::task::spawn_blocking(move || {
        let end = match e {
            ClusterEffect::Plan { nodes, target } => ClusterMsg::Planned(r.plan(&nodes, &target)),
            ClusterEffect::Rollout(set) => {
                let note = |n: RolloutNote| {
                    let _ = tx.blocking_send(ClusterMsg::Rollout(n));
                };
                ClusterMsg::RolledOut(r.roll_out(&set, &note))
            }
            ClusterEffect::Quit | ClusterEffect::Live(_) => return,
        };
        let _ = tx.blocking_send(end);
    });
}
