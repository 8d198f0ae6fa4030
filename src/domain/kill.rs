//! A kill is a value before it is an action: the plan lists each target with what the operator
//! needs to judge it (pid, user, name, logical GPUs, VRAM, model) and its identity (pid + start
//! time), and refuses what must never be signalled (partop itself, pid 1).

use super::served::model_of;
use super::snapshot::Snapshot;
use serde::{Deserialize, Serialize};

/// The signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Sig {
    /// SIGTERM: ask it to exit.
    Term,
    /// SIGKILL: end it.
    Kill,
}

impl Sig {
    /// `SIGTERM` / `SIGKILL`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Term => "SIGTERM",
            Self::Kill => "SIGKILL",
        }
    }
}

/// One process to signal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// PID.
    pub pid: u32,
    /// Start time (clock ticks since boot): checked before every signal.
    pub start_ticks: Option<u64>,
    /// User.
    pub user: Option<String>,
    /// Name.
    pub name: Option<String>,
    /// Logical GPUs it uses.
    pub gpus: Vec<u32>,
    /// VRAM over those GPUs.
    pub vram_bytes: u64,
    /// Served model, when it is a model server.
    pub model: Option<String>,
    /// Node agent description.
    pub agent: Option<String>,
}

/// The plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillPlan {
    /// What will be signalled.
    pub targets: Vec<Target>,
    /// What was asked for but refused, with the reason.
    pub refused: Vec<(u32, String)>,
}

/// Plans signalling `pids`, as seen in `snap`. `own` is partop's pid.
pub fn plan(snap: &Snapshot, pids: &[u32], own: u32) -> KillPlan {
    let mut p = KillPlan::default();
    for pid in pids {
        if *pid == own {
            p.refused.push((*pid, "this is partop itself".into()));
        } else if *pid <= 1 {
            p.refused
                .push((*pid, "pid 1 (init) is never signalled".into()));
        } else if let Some(pr) = snap.processes.iter().find(|x| x.pid == *pid) {
            p.targets.push(Target {
                pid: *pid,
                start_ticks: pr.start_ticks,
                user: pr.user.clone(),
                name: pr.name.clone(),
                gpus: pr
                    .gpus
                    .iter()
                    .filter(|u| !u.attached_only())
                    .map(|u| u.gpu_id)
                    .collect(),
                vram_bytes: pr.vram_total(),
                model: pr.command.as_deref().and_then(model_of).map(|(_, m)| m),
                agent: pr.agent.clone(),
            });
        } else {
            p.refused.push((
                *pid,
                "not a GPU process on this node (or it has exited)".into(),
            ));
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::snapshot::{GpuUse, Process};

    #[test]
    fn refuses_self_init_and_strangers() {
        let snap = Snapshot {
            processes: vec![Process {
                pid: 42,
                start_ticks: Some(7),
                command: Some("vllm serve org/m --port 1".into()),
                gpus: vec![GpuUse {
                    gpu_id: 3,
                    vram_bytes: Some(5),
                    ..GpuUse::default()
                }],
                ..Process::default()
            }],
            ..Snapshot::default()
        };
        let p = plan(&snap, &[42, 1, 99, 1000], 1000);
        assert_eq!(p.targets.len(), 1);
        assert_eq!(p.targets[0].gpus, vec![3]);
        assert_eq!(p.targets[0].start_ticks, Some(7));
        assert_eq!(p.targets[0].model.as_deref(), Some("m"));
        assert_eq!(
            p.refused.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![1, 99, 1000]
        );
    }
}
