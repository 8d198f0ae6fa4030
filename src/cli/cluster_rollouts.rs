//! How the live cluster view changes the cluster ([`ClusterRollouts`]): the planner of `partop
//! fleet --kubernetes plan` on the tagged nodes (`exec::cluster_rollout::plan_nodes`), its plan
//! printed as that command prints it and saved beside the fleet's sets, and the rollout of
//! `partop fleet --kubernetes apply` (`fleet_cluster::roll_out`: verified, every verb asked,
//! every node compared with its plan, `exec::rollout` with the cluster engine, the fleet
//! journal), its progress converted to the view's messages. Wiring only.

use crate::cli::fleet_cluster::{plan_text, roll_out, stopped_words};
use crate::domain::cluster_rollout::{ClusterPlanSet, NodePlan, Target};
use crate::exec::k8s::Limits;
use crate::exec::rollout::{NodeStart, Outcome, Progress, Start};
use crate::ui::cluster::rollout::ClusterRollouts;
use crate::ui::cluster::stage::{ClusterPlanned, RolloutNote};
use crate::ui::fleet::Staged;
use std::path::PathBuf;

/// The cluster's rollouts for the live view.
pub struct KubeRollouts {
    /// The cluster (kubeconfig, context, selector) the view watches.
    pub target: crate::collect::cluster::Target,
    /// The fleet journal (beside the audit journal).
    pub fleet_journal: PathBuf,
    /// The audit journal (what the printed resume command names).
    pub journal: PathBuf,
    /// Where sets are saved.
    pub dir: PathBuf,
    /// Nodes at a time (`fleet --kubernetes apply`'s default: one).
    pub parallel: usize,
    /// How nodes no manager owns are reached (`--ssh`, `--ssh-user`), as the CLI's planner
    /// reaches them.
    pub reach: crate::exec::cluster_rollout::Reach,
}

impl KubeRollouts {
    /// For the view's cluster, with partop's settings (journal, state directory).
    pub fn new(
        target: crate::collect::cluster::Target,
        settings: &crate::config::Settings,
        reach: crate::exec::cluster_rollout::Reach,
    ) -> Self {
        Self {
            target,
            fleet_journal: settings.fleet_journal(),
            journal: settings.journal.clone(),
            dir: crate::config::paths::state_dir().join("fleet-sets"),
            parallel: 1,
            reach,
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))
}

impl ClusterRollouts for KubeRollouts {
    fn plan(&self, nodes: &[String], target: &Target) -> Result<ClusterPlanned, String> {
        let rt = runtime()?;
        let planned = rt.block_on(crate::exec::cluster_rollout::plan_for(
            &self.target,
            target,
            Limits::default(),
            Some(nodes),
            Some(&self.reach),
        ))?;
        let staged = if planned.set.nodes.is_empty() {
            None
        } else {
            std::fs::create_dir_all(&self.dir)
                .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
            let file = self.dir.join(format!(
                "cluster-set-{}-{}.json",
                planned.set.fingerprint,
                crate::collect::clock::now_ms()
            ));
            let text =
                serde_json::to_string_pretty(&planned.set).map_err(|e| e.to_string())? + "\n";
            crate::exec::safe_file::write_atomic(&file, text.as_bytes())
                .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
            Some(Staged {
                fingerprint: planned.set.fingerprint.clone(),
                file,
            })
        };
        Ok(ClusterPlanned {
            staged,
            lines: plan_text(&planned).lines().map(str::to_string).collect(),
            nodes: planned.set.nodes.iter().map(|n| n.node.clone()).collect(),
            refused: planned.refused,
        })
    }

    fn roll_out(&self, set: &Staged, note: &(dyn Fn(RolloutNote) + Sync)) -> Result<(), String> {
        let mut op = Told {
            again: crate::cli::out::fleet_resume_command(
                &self.journal,
                &[],
                Some(&self.target),
                &set.file,
            ),
            typed: set.fingerprint.clone(),
            note,
        };
        let (_, outcome) = roll_out(
            &self.target,
            self.reach.transport.clone(),
            &set.file,
            self.parallel,
            false,
            &self.fleet_journal,
            &mut op,
        )
        .map_err(|e| format!("{e:#}"))?;
        match outcome {
            Outcome::Done => Ok(()),
            Outcome::NotConfirmed => Err(format!(
                "{} no longer holds set {} (the fingerprint typed): nothing was changed",
                set.file.display(),
                set.fingerprint
            )),
            Outcome::Stopped {
                untouched,
                left_cordoned,
            } => Err(stopped_words(&untouched, &left_cordoned, &op.again)),
        }
    }
}

/// The operator of a rollout confirmed in the view: the fingerprint was typed there, so only
/// the set it names is confirmed; each step told as a message.
struct Told<'a> {
    /// The exact command that continues the rollout.
    again: String,
    typed: String,
    note: &'a (dyn Fn(RolloutNote) + Sync),
}

impl crate::exec::rollout::Operator<ClusterPlanSet> for Told<'_> {
    fn confirm(
        &mut self,
        set: &ClusterPlanSet,
        _: &[&NodePlan],
        _: &Start,
    ) -> anyhow::Result<bool> {
        Ok(set.fingerprint == self.typed)
    }

    fn resume_command(&self, _file: &std::path::Path) -> String {
        self.again.clone()
    }

    fn progress(&mut self, p: Progress) -> anyhow::Result<()> {
        (self.note)(match p {
            Progress::Node { node, how, plan } => RolloutNote::Node {
                node,
                how: match how {
                    NodeStart::Resume => {
                        format!("resuming plan {plan} at the step where it stopped")
                    }
                    _ => format!("rolling out plan {plan}"),
                },
            },
            Progress::Step { node, text } => RolloutNote::Step { node, text },
            Progress::Applied { node, .. } => RolloutNote::Done { node },
            Progress::Failed { node, error } => RolloutNote::Failed { node, error },
        });
        Ok(())
    }
}
