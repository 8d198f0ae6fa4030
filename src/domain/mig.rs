//! NVIDIA MIG, the other hardware partitioning: the GPU-instance profiles a device offers, and
//! the MIG planner (a target list of instances on one GPU → where each instance goes, the exact
//! `nvidia-smi` commands, what must stop, warnings, a fingerprint), the same stage → plan →
//! confirm → execute as AMD repartitions; and what a resume may find on the GPU
//! ([`still_valid`]). Pure.

use super::snapshot::{PhysicalGpu, Snapshot};
use serde::{Deserialize, Serialize};

pub use super::mig_profiles::{
    InstanceShape, KNOWN_PRODUCTS, MEMORY_SLICES, MigInfo, MigProfile, identify, layouts, place,
    table_profiles,
};

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
    /// What it does (the executor dispatches on it; written as its word, `set_memory`).
    pub key: super::journal::StepKind,
    /// What it does.
    pub title: String,
    /// Exact commands.
    pub commands: Vec<String>,
}

/// One GPU instance to create, where it goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigCreate {
    /// Profile id.
    pub profile: u32,
    /// Profile name.
    pub name: String,
    /// First memory slice (`-cgi ID:START`).
    pub start: u32,
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
    /// The instances to create, in order (largest first), each at its planned start.
    pub create: Vec<MigCreate>,
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

/// The GPU `draft.gpu` names: the n-th MIG-capable GPU of the node.
fn mig_gpu(snap: &Snapshot, gpu: u32) -> Result<&PhysicalGpu, String> {
    snap.gpus
        .iter()
        .filter(|g| g.mig.is_some())
        .nth(gpu as usize)
        .ok_or_else(|| {
            format!(
                "no NVIDIA GPU {gpu} on this node (MIG-capable GPUs: {})",
                snap.gpus.iter().filter(|g| g.mig.is_some()).count()
            )
        })
}

/// The instances a GPU has now, by profile name (`?` for one whose profile is not known);
/// empty with MIG off.
pub fn instances_now(g: &PhysicalGpu) -> Vec<String> {
    if !g.mig.as_ref().is_some_and(|m| m.enabled) {
        return vec![];
    }
    // With MIG on and no instance, the whole GPU is listed as one logical GPU; the instances
    // are the logical GPUs named after their GPU instance (`BDF/giN`).
    g.partitions
        .iter()
        .filter(|l| l.bdf.contains("/gi"))
        .map(|l| l.profile.clone().unwrap_or_else(|| "?".into()))
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Where each instance of `names` goes on a GPU with `profiles`: the largest first, each at a
/// start its profile allows, none overlapping. Errors name what is not offered, what exceeds a
/// profile's limit or the GPU's slices, and a layout no placement holds.
fn placed(g: &PhysicalGpu, mig: &MigInfo, names: &[String]) -> Result<Vec<MigCreate>, Vec<String>> {
    let mut errors = Vec::new();
    let mut ids = Vec::new();
    let (mut c, mut m) = (0, 0);
    for name in names {
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
                ids.push(p.id);
            }
        }
    }
    for p in &mig.profiles {
        let n = names.iter().filter(|x| **x == p.name).count();
        if n > p.max_instances as usize {
            errors.push(format!(
                "{}: at most {} instance(s) per GPU, {n} asked",
                p.name, p.max_instances
            ));
        }
    }
    if c > 7 || m > MEMORY_SLICES {
        errors.push(format!(
            "the instances need {c} of 7 compute slices and {m} of {MEMORY_SLICES} memory slices"
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let Some(at) = place(&mig.profiles, &ids, &[]) else {
        return Err(vec![format!(
            "{} cannot be placed on this GPU: each profile may start only at certain memory slices (`nvidia-smi mig -lgipp`), and no choice of starts keeps these instances apart",
            names.join(", ")
        )]);
    };
    Ok(at
        .into_iter()
        .filter_map(|(id, start)| {
            let p = mig.profiles.iter().find(|p| p.id == id)?;
            Some(MigCreate {
                profile: id,
                name: p.name.clone(),
                start,
            })
        })
        .collect())
}

/// Plans `draft` on the node in `snap`, with `smi` as the command name printed.
pub fn plan(snap: &Snapshot, draft: &MigDraft, smi: &str) -> Result<MigPlan, Vec<String>> {
    let g = mig_gpu(snap, draft.gpu).map_err(|e| vec![e])?;
    let mig = g.mig.clone().unwrap_or_default();
    let create = placed(g, &mig, &draft.instances)?;
    let before = instances_now(g);
    let after = sorted(draft.instances.clone());
    let want_mig = !draft.instances.is_empty();
    if sorted(before.clone()) == after && want_mig == mig.enabled {
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
            key: super::journal::StepKind::Stop,
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
            key: super::journal::StepKind::Destroy,
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
            key: super::journal::StepKind::MigMode,
            title: format!("{} MIG mode", if on { "enable" } else { "disable" }),
            commands: vec![format!("{smi} -i {i} -mig {}", u8::from(on))],
        });
        warnings.push(format!(
            "changing MIG mode needs an idle GPU and may stay pending until a GPU reset; partop never resets a GPU: if it stays pending, stop every client of GPU {i} (nvidia-persistenced, DCGM, monitoring agents) and reset it yourself, then apply again"
        ));
    }
    if !create.is_empty() {
        steps.push(MigStep {
            key: super::journal::StepKind::Create,
            title: format!(
                "create {} GPU instance(s), largest first, each at its memory slice, with a compute instance each (one already there at its slice is kept, not made twice)",
                create.len()
            ),
            commands: create
                .iter()
                .map(|c| format!("{smi} mig -i {i} -cgi {}:{} -C", c.profile, c.start))
                .collect(),
        });
    }
    steps.push(MigStep {
        key: super::journal::StepKind::Verify,
        title: if want_mig {
            format!(
                "verify: MIG on with exactly {} (each instance's profile read back)",
                after.join(", ")
            )
        } else {
            "verify: MIG off".into()
        },
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

/// Whether a run of `plan` may go on with the node as `snap` shows it (a resume): the same host
/// and GPU; the GPU's MIG mode where the plan started or where it goes; its instances those the
/// plan started from, or some of its target (none yet, or a create cut short), or the target;
/// and no process on the GPU but those the plan stops. Each finding names what differs; empty
/// when it may go on.
pub fn still_valid(plan: &MigPlan, snap: &Snapshot, host: &str) -> Vec<String> {
    let mut why = Vec::new();
    if plan.host != host {
        why.push(format!(
            "this plan was made for host {}, and this is {host}",
            plan.host
        ));
    }
    let g = match mig_gpu(snap, plan.draft.gpu) {
        Ok(g) if g.bdf == plan.bdf => g,
        Ok(g) => {
            why.push(format!(
                "NVIDIA GPU {} is {} now, the plan was made for {}",
                plan.draft.gpu, g.bdf, plan.bdf
            ));
            return why;
        }
        Err(e) => {
            why.push(e);
            return why;
        }
    };
    let Some(mig) = &g.mig else {
        return why;
    };
    let started_on = plan.set_mode.map_or(!plan.after.is_empty(), |on| !on);
    let goes_to = !plan.after.is_empty();
    if mig.enabled != started_on && mig.enabled != goes_to {
        why.push(format!(
            "MIG is {} on GPU {}, neither where the plan started nor its target",
            if mig.enabled { "on" } else { "off" },
            plan.draft.gpu
        ));
    }
    let now = sorted(instances_now(g));
    let mut left = plan.after.clone();
    let part_of_target = now.iter().all(|n| {
        left.iter()
            .position(|x| x == n)
            .map(|k| left.remove(k))
            .is_some()
    });
    if now != sorted(plan.before.clone()) && !part_of_target {
        why.push(format!(
            "GPU {} has {} now: neither the instances the plan started from ({}) nor part of its target ({}); another change ran since",
            plan.draft.gpu,
            if now.is_empty() { "no instance".to_string() } else { now.join(", ") },
            if plan.before.is_empty() { "none".to_string() } else { plan.before.join(", ") },
            plan.after.join(", ")
        ));
    }
    let ids: Vec<u32> = g.partitions.iter().map(|l| l.gpu_id).collect();
    for p in snap
        .processes
        .iter()
        .filter(|p| p.gpus.iter().any(|u| ids.contains(&u.gpu_id)))
    {
        let planned = plan
            .stops
            .iter()
            .any(|s| s.pid == p.pid && (s.start_ticks.is_none() || s.start_ticks == p.start_ticks));
        if !planned {
            why.push(format!(
                "pid {} ({}) uses GPU {} and is not among the processes the plan stops",
                p.pid,
                super::text::escape_controls(p.name.as_deref().unwrap_or("?")),
                plan.draft.gpu
            ));
        }
    }
    why
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
    // Only what places: a mix that fits the slice counts may still find no starts.
    out.retain(|l| {
        let ids: Option<Vec<u32>> = l
            .iter()
            .map(|n| profiles.iter().find(|p| &p.name == n).map(|p| p.id))
            .collect();
        ids.is_some_and(|ids| place(profiles, &ids, &[]).is_some())
    });
    out.push(Vec::new());
    out
}

/// Most GPU instances a MIG GPU holds (seven compute slices).
pub const MAX_INSTANCES: usize = 7;

/// Parses `1g.18gb,1g.18gb,3g.71gb` or `3x1g.18gb,3g.71gb`. A count must be a number of
/// instances a GPU can hold (1-7), and so must the total: `99999999999x1g.18gb` is an error
/// naming the limit, never an allocation.
pub fn parse_instances(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for x in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let (n, name) = match x.split_once('x') {
            Some((n, name)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => {
                let k = n
                    .parse::<usize>()
                    .ok()
                    .filter(|k| (1..=MAX_INSTANCES).contains(k))
                    .ok_or_else(|| {
                        format!(
                            "{x:?}: a GPU holds 1 to {MAX_INSTANCES} instances, not {}",
                            super::text::escape_controls(n)
                        )
                    })?;
                (k, name)
            }
            _ => (1, x),
        };
        if out.len() + n > MAX_INSTANCES {
            return Err(format!(
                "{} instances asked: a MIG GPU holds at most {MAX_INSTANCES}",
                out.len() + n
            ));
        }
        out.extend(std::iter::repeat_n(name.to_string(), n));
    }
    Ok(out)
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
                    bdf: format!("0000:00:06.0/gi{}", k + 1),
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
            instances: parse_instances("2x1g.18gb,3g.71gb").unwrap(),
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
                "nvidia-smi mig -i 0 -cgi 9:0 -C",
                "nvidia-smi mig -i 0 -cgi 19:4 -C",
                "nvidia-smi mig -i 0 -cgi 19:5 -C",
                "nvidia-smi -q -x -i 0"
            ]
        );
        assert_eq!(p.set_mode, Some(true));
    }

    #[test]
    fn capacity_and_offer_are_checked() {
        let d = MigDraft {
            gpu: 0,
            instances: parse_instances("3g.71gb,3g.71gb,1g.18gb").unwrap(),
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
        assert!(parse_instances("8x1g.18gb").is_err());
        assert!(parse_instances("99999999999x1g.18gb").is_err());
        assert!(parse_instances("99999999999999999999999x1g.18gb").is_err());
        assert!(parse_instances("4x1g.18gb,4x1g.18gb").is_err());
        assert!(parse_instances("0x1g.18gb").is_err());
        assert_eq!(parse_instances("7x1g.18gb").unwrap().len(), 7);
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
            instances: parse_instances("7g.141gb").unwrap(),
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
