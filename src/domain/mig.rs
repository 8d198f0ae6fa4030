//! NVIDIA MIG, the other hardware partitioning: the GPU-instance profiles a device offers, and
//! the MIG planner (a target list of instances on one GPU → the exact `nvidia-smi` commands,
//! what must stop, warnings, a fingerprint), the same stage → plan → confirm → execute as AMD
//! repartitions. Pure.

use super::snapshot::Snapshot;
use serde::{Deserialize, Serialize};

pub use super::mig_profiles::{MigInfo, MigProfile, table_profiles};

/// What the operator asks for on one GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigDraft {
    /// NVIDIA device index.
    pub gpu: u32,
    /// Target GPU instances by profile name; empty disables MIG.
    pub instances: Vec<String>,
}

/// A process that must stop first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigStop {
    /// PID.
    pub pid: u32,
    /// Start time.
    pub start_ticks: Option<u64>,
    /// Name.
    pub name: String,
}

/// One step (same keys as the executor's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigStep {
    /// `stop`, `mig_mode`, `destroy`, `create`, `verify`.
    pub key: String,
    /// What it does.
    pub title: String,
    /// Exact commands.
    pub commands: Vec<String>,
}

/// A MIG plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigPlan {
    /// Changes with anything below.
    pub fingerprint: String,
    /// Host.
    pub host: String,
    /// The draft.
    pub draft: MigDraft,
    /// The GPU's BDF.
    pub bdf: String,
    /// Its product.
    pub product: String,
    /// Instances now (profile names; empty when MIG is off).
    pub before: Vec<String>,
    /// Instances after.
    pub after: Vec<String>,
    /// Profile ids to create, in order.
    pub create: Vec<u32>,
    /// MIG mode must change: Some(true) enable, Some(false) disable.
    pub set_mode: Option<bool>,
    /// What must stop.
    pub stops: Vec<MigStop>,
    /// Ordered steps.
    pub steps: Vec<MigStep>,
    /// What the operator should know.
    pub warnings: Vec<String>,
}

impl MigPlan {
    /// The fingerprint of everything in the plan but the fingerprint field itself.
    pub fn content_fingerprint(&self) -> String {
        super::fingerprint::of_content(self, |p| &mut p.fingerprint)
    }

    /// Whether the plan's content still matches its fingerprint.
    pub fn content_intact(&self) -> bool {
        self.content_fingerprint() == self.fingerprint
    }
}

/// Plans `draft` on the node in `snap`, with `smi` as the command name printed.
pub fn plan(snap: &Snapshot, draft: &MigDraft, smi: &str) -> Result<MigPlan, Vec<String>> {
    let Some(g) = snap
        .gpus
        .iter()
        .filter(|g| g.mig.is_some())
        .nth(draft.gpu as usize)
    else {
        return Err(vec![format!(
            "no NVIDIA GPU {} on this node (MIG-capable GPUs: {})",
            draft.gpu,
            snap.gpus.iter().filter(|g| g.mig.is_some()).count()
        )]);
    };
    let mig = g.mig.clone().unwrap_or_default();
    let mut errors = Vec::new();
    let mut create = Vec::new();
    let (mut c, mut m) = (0, 0);
    for name in &draft.instances {
        match mig.profiles.iter().find(|p| &p.name == name) {
            None => errors.push(format!(
                "{} does not offer profile {name} (offered: {}; source: {})",
                g.product,
                mig.profiles
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
                mig.profiles_source
            )),
            Some(p) => {
                c += p.compute_slices;
                m += p.memory_slices;
                create.push(p.id);
            }
        }
    }
    for p in &mig.profiles {
        let n = draft.instances.iter().filter(|x| **x == p.name).count();
        if n > p.max_instances as usize {
            errors.push(format!(
                "{}: at most {} instance(s) per GPU, {n} asked",
                p.name, p.max_instances
            ));
        }
    }
    if c > 7 || m > 8 {
        errors.push(format!(
            "the instances need {c} of 7 compute slices and {m} of 8 memory slices"
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let before: Vec<String> = if mig.enabled {
        g.partitions
            .iter()
            .filter_map(|l| l.profile.clone())
            .collect()
    } else {
        vec![]
    };
    let mut after = draft.instances.clone();
    after.sort();
    let mut sorted_before = before.clone();
    sorted_before.sort();
    let want_mig = !draft.instances.is_empty();
    if sorted_before == after && want_mig == mig.enabled {
        return Err(vec![
            "nothing to change: the GPU already has these instances".into(),
        ]);
    }
    let ids: Vec<u32> = g.partitions.iter().map(|l| l.gpu_id).collect();
    let stops: Vec<MigStop> = snap
        .processes
        .iter()
        .filter(|p| p.gpus.iter().any(|u| ids.contains(&u.gpu_id)))
        .map(|p| MigStop {
            pid: p.pid,
            start_ticks: p.start_ticks,
            name: p.name.clone().unwrap_or_else(|| format!("pid {}", p.pid)),
        })
        .collect();
    let i = draft.gpu;
    let mut steps = Vec::new();
    let mut warnings = Vec::new();
    if !stops.is_empty() {
        steps.push(MigStep {
            key: "stop".into(),
            title: format!(
                "stop {} process(es) on GPU {i}: SIGTERM, then wait; SIGKILL only if confirmed",
                stops.len()
            ),
            commands: vec![format!(
                "kill -TERM {}",
                stops
                    .iter()
                    .map(|s| s.pid.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            )],
        });
    }
    if mig.enabled && !before.is_empty() {
        steps.push(MigStep {
            key: "destroy".into(),
            title: format!("destroy the {} existing instance(s)", before.len()),
            commands: vec![
                format!("{smi} mig -i {i} -dci"),
                format!("{smi} mig -i {i} -dgi"),
            ],
        });
    }
    let set_mode = (want_mig != mig.enabled).then_some(want_mig);
    if let Some(on) = set_mode {
        steps.push(MigStep {
            key: "mig_mode".into(),
            title: format!("{} MIG mode", if on { "enable" } else { "disable" }),
            commands: vec![format!("{smi} -i {i} -mig {}", u8::from(on))],
        });
        warnings.push(format!(
            "changing MIG mode needs an idle GPU and may stay pending until a GPU reset; partop never resets a GPU: if it stays pending, stop every client of GPU {i} (nvidia-persistenced, DCGM, monitoring agents) and reset it yourself, then apply again"
        ));
    }
    if !create.is_empty() {
        steps.push(MigStep {
            key: "create".into(),
            title: format!(
                "create {} GPU instance(s) with a compute instance each",
                create.len()
            ),
            commands: vec![format!(
                "{smi} mig -i {i} -cgi {} -C",
                create
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )],
        });
    }
    steps.push(MigStep {
        key: "verify".into(),
        title: format!(
            "verify: MIG {} with {} instance(s) read back",
            if want_mig { "on" } else { "off" },
            after.len()
        ),
        commands: vec![format!("{smi} -q -x -i {i}")],
    });
    if want_mig {
        warnings.push(
            "MIG devices get new UUIDs: CUDA_VISIBLE_DEVICES=MIG-… of every workload changes"
                .into(),
        );
    }
    let mut plan = MigPlan {
        fingerprint: String::new(),
        host: snap.host.clone(),
        draft: draft.clone(),
        bdf: g.bdf.clone(),
        product: g.product.clone(),
        before,
        after,
        create,
        set_mode,
        stops,
        steps,
        warnings,
    };
    plan.fingerprint = plan.content_fingerprint();
    Ok(plan)
}

/// Layouts worth proposing for a GPU with `profiles`: each profile repeated as often as it
/// fits, the big-plus-small mixes (the largest that leaves room, filled with the smallest), and
/// MIG off (empty). The operator cycles through them in the staging overlay.
pub fn presets(profiles: &[MigProfile]) -> Vec<Vec<String>> {
    let plain: Vec<&MigProfile> = profiles.iter().filter(|p| !p.name.contains('+')).collect();
    let fits = |p: &MigProfile, c: u32, m: u32| {
        p.max_instances
            .min((7 - c.min(7)) / p.compute_slices.max(1))
            .min((8 - m.min(8)) / p.memory_slices.max(1))
    };
    let mut out: Vec<Vec<String>> = Vec::new();
    for p in &plain {
        let n = fits(p, 0, 0);
        if n > 0 {
            out.push(vec![p.name.clone(); n as usize]);
        }
    }
    let smallest = plain
        .iter()
        .min_by_key(|p| (p.compute_slices, p.memory_slices))
        .copied();
    for big in plain
        .iter()
        .filter(|p| p.compute_slices >= 3 && p.compute_slices < 7)
    {
        let mut l = vec![big.name.clone()];
        let (mut c, mut m) = (big.compute_slices, big.memory_slices);
        for other in plain
            .iter()
            .filter(|p| p.compute_slices < big.compute_slices)
            .rev()
        {
            let n = fits(other, c, m).min(1);
            for _ in 0..n {
                l.push(other.name.clone());
                c += other.compute_slices;
                m += other.memory_slices;
            }
        }
        if let Some(s) = smallest {
            let used = l.iter().filter(|x| **x == s.name).count() as u32;
            let n = fits(s, c, m).min(s.max_instances.saturating_sub(used));
            l.extend(std::iter::repeat_n(s.name.clone(), n as usize));
        }
        if l.len() > 1 && !out.contains(&l) {
            out.push(l);
        }
    }
    out.push(Vec::new());
    out
}

/// Parses `1g.18gb,1g.18gb,3g.71gb` or `3x1g.18gb,3g.71gb`.
pub fn parse_instances(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .flat_map(|x| match x.split_once('x') {
            Some((n, name)) if n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty() => {
                vec![name.to_string(); n.parse().unwrap_or(1)]
            }
            _ => vec![x.to_string()],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::snapshot::{LogicalGpu, PhysicalGpu};

    fn node(enabled: bool, instances: &[&str]) -> Snapshot {
        let parts: Vec<LogicalGpu> = if enabled {
            instances
                .iter()
                .enumerate()
                .map(|(k, n)| LogicalGpu {
                    gpu_id: k as u32,
                    profile: Some((*n).to_string()),
                    ..LogicalGpu::default()
                })
                .collect()
        } else {
            vec![LogicalGpu::default()]
        };
        Snapshot {
            host: "h".into(),
            gpus: vec![PhysicalGpu {
                bdf: "0000:00:06".into(),
                product: "NVIDIA H200".into(),
                mig: Some(MigInfo {
                    enabled,
                    pending: enabled,
                    profiles: table_profiles("NVIDIA H200").unwrap(),
                    profiles_source: "table".into(),
                }),
                partitions: parts,
                ..PhysicalGpu::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn enabling_mig_with_instances() {
        let d = MigDraft {
            gpu: 0,
            instances: parse_instances("2x1g.18gb,3g.71gb"),
        };
        let p = plan(&node(false, &[]), &d, "nvidia-smi").unwrap();
        let cmds: Vec<&str> = p
            .steps
            .iter()
            .flat_map(|s| s.commands.iter().map(String::as_str))
            .collect();
        assert_eq!(
            cmds,
            [
                "nvidia-smi -i 0 -mig 1",
                "nvidia-smi mig -i 0 -cgi 19,19,9 -C",
                "nvidia-smi -q -x -i 0"
            ]
        );
        assert_eq!(p.set_mode, Some(true));
    }

    #[test]
    fn capacity_and_offer_are_checked() {
        let d = MigDraft {
            gpu: 0,
            instances: parse_instances("3g.71gb,3g.71gb,1g.18gb"),
        };
        let e = plan(&node(false, &[]), &d, "nvidia-smi").unwrap_err();
        assert_eq!(
            e,
            ["the instances need 7 of 7 compute slices and 9 of 8 memory slices"]
        );
        let d = MigDraft {
            gpu: 0,
            instances: vec!["1g.10gb".into()],
        };
        let e = plan(&node(false, &[]), &d, "nvidia-smi").unwrap_err();
        assert!(e[0].contains("does not offer profile 1g.10gb"), "{e:?}");
        let d = MigDraft {
            gpu: 0,
            instances: parse_instances("8x1g.18gb"),
        };
        assert!(plan(&node(false, &[]), &d, "nvidia-smi").is_err());
    }

    #[test]
    fn presets_are_all_plannable() {
        let n = node(false, &[]);
        let ps = presets(&table_profiles("NVIDIA H200").unwrap());
        assert!(ps.contains(&vec!["1g.18gb".to_string(); 7]));
        assert!(ps.contains(&vec!["3g.71gb".to_string(); 2]));
        assert!(ps.contains(&vec!["7g.141gb".to_string()]));
        assert_eq!(ps.last(), Some(&vec![]), "MIG off last");
        for p in ps.iter().filter(|p| !p.is_empty()) {
            let d = MigDraft {
                gpu: 0,
                instances: p.clone(),
            };
            assert!(plan(&n, &d, "smi").is_ok(), "{p:?}");
        }
    }

    #[test]
    fn relayout_destroys_first_and_disable() {
        let d = MigDraft {
            gpu: 0,
            instances: parse_instances("7g.141gb"),
        };
        let p = plan(&node(true, &["3g.71gb", "3g.71gb"]), &d, "smi").unwrap();
        assert_eq!(
            p.steps[0].commands,
            ["smi mig -i 0 -dci", "smi mig -i 0 -dgi"]
        );
        assert_eq!(p.set_mode, None);
        let off = MigDraft {
            gpu: 0,
            instances: vec![],
        };
        let p = plan(&node(true, &["7g.141gb"]), &off, "smi").unwrap();
        assert_eq!(p.set_mode, Some(false));
        assert_eq!(p.steps[1].commands, ["smi -i 0 -mig 0"]);
    }
}
