//! A repartition on a Kubernetes node goes through the cluster (issue 25, item 4), planned:
//! called by `plan::plan` when the snapshot has a kubelet (PodResources answered), it takes the
//! pods that hold the affected GPUs out of the pids to stop (the kubelet would restart them)
//! and puts them in the plan as pods to move, with the steps around the change: cordon, evict
//! (and wait until gone), the change window's taint before the stop, and after the verify the
//! wait for the new allocatable count, the untaint and the uncordon. `exec::k8s` performs
//! them.

use super::journal::StepKind;
use super::k8s_ops::{PLUGIN_LABELS, WINDOW_TAINT_EFFECT, WINDOW_TAINT_KEY, WINDOW_TAINT_VALUE};
use super::layout::LayoutRow;
use super::modes::{ComputeMode, MemoryMode};
use super::snapshot::Snapshot;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How long the evictions (a PodDisruptionBudget's refusals retried) and the wait until the
/// pods are gone may take.
pub const EVICT_SECS: u32 = 300;
/// How long the node may take to advertise the new count (a device-plugin restart included).
pub const ALLOCATABLE_SECS: u32 = 180;

/// A physical GPU the plan changes: its BDF and its modes after (the planner's `GpuChange`,
/// without importing the planner, which imports this module).
pub type Changed = (String, ComputeMode, MemoryMode);

/// A step the planner puts in the plan (as `plan::Step`, whose module imports this one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepSpec {
    /// What it does.
    pub key: StepKind,
    /// Its title.
    pub title: String,
    /// What it does in kubectl's or the API's words.
    pub commands: Vec<String>,
    /// How long it may take.
    pub limit_secs: u32,
}

/// A pod the plan moves off the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodMove {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The logical GPUs it holds (BDFs with partition function).
    pub gpus: Vec<String>,
}

impl PodMove {
    /// `namespace/name`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What the cluster sees of the change.
#[derive(Clone, Debug, Eq, Serialize, Deserialize)]
pub struct KubeChange {
    /// The Node's name (the kubelet's default: the host name).
    pub node: String,
    /// The pods that hold the affected GPUs: evicted (DaemonSet pods are cleared by the taint).
    pub pods: Vec<PodMove>,
    /// What the node must advertise after, per AMD resource (empty: the kubelet advertised no
    /// AMD resource, so there is nothing to wait for).
    pub allocatable: BTreeMap<String, i64>,
    /// The warning a node managed by a DCM profile carries (DCM may revert the change), as
    /// the API server said when the plan was made. Advice of the moment, not part of the
    /// plan: not saved (a plan file's fingerprint does not cover it), said again from the
    /// live re-plan when a saved plan is applied.
    #[serde(skip)]
    pub dcm: Option<String>,
}

/// Two changes are the same change whatever the DCM warning says: it is advice read from the
/// API server (reachable when planning, perhaps not when applying, or labelled between), not
/// something the plan does, so the re-plan at apply time does not refuse over it.
impl PartialEq for KubeChange {
    fn eq(&self, other: &Self) -> bool {
        self.node == other.node && self.pods == other.pods && self.allocatable == other.allocatable
    }
}

/// The pods allocated the logical GPUs of `changed` (every logical GPU when the memory mode
/// changes: the reload takes them all), and the pods of holder processes on them.
fn pods_on(snap: &Snapshot, changed: &[Changed], all: bool) -> Vec<PodMove> {
    let mut out: Vec<PodMove> = Vec::new();
    let mut add = |namespace: &str, name: &str, gpu: &str| match out
        .iter_mut()
        .find(|p| p.namespace == namespace && p.name == name)
    {
        Some(p) if !p.gpus.iter().any(|g| g == gpu) => p.gpus.push(gpu.to_string()),
        Some(_) => {}
        None => out.push(PodMove {
            namespace: namespace.into(),
            name: name.into(),
            gpus: vec![gpu.to_string()],
        }),
    };
    let affected: Vec<(u32, String)> = snap
        .logical()
        .filter(|(g, _)| all || changed.iter().any(|c| c.0 == g.bdf))
        .map(|(_, l)| {
            for p in &l.pods {
                add(&p.namespace, &p.pod, &l.bdf);
            }
            (l.gpu_id, l.bdf.clone())
        })
        .collect();
    for p in &snap.processes {
        let Some(pod) = &p.pod else { continue };
        for u in &p.gpus {
            if let Some((_, bdf)) = affected.iter().find(|(id, _)| *id == u.gpu_id) {
                add(&pod.namespace, &pod.pod, bdf);
            }
        }
    }
    out
}

/// Whether the process `pid` is in a pod the plan moves (not stopped by pid: the kubelet
/// would start it again).
pub fn moved_with_pod(snap: &Snapshot, pid: u32, k: Option<&KubeChange>) -> bool {
    let Some(KubeChange { pods, .. }) = k else {
        return false;
    };
    snap.processes
        .iter()
        .find(|p| p.pid == pid)
        .and_then(|p| p.pod.as_ref())
        .is_some_and(|r| {
            pods.iter()
                .any(|m| m.namespace == r.namespace && m.name == r.pod)
        })
}

/// What the node must advertise after: `amd.com/gpu` = every logical GPU under the plugin's
/// single naming; under mixed naming one count per `amd.com/<compute>_<memory>` of the after
/// layout, and 0 for a resource of a mode the node leaves.
fn allocatable_after(
    snap: &Snapshot,
    changes: &[Changed],
    after: &[LayoutRow],
) -> BTreeMap<String, i64> {
    let Some(k) = &snap.kubelet else {
        return BTreeMap::new();
    };
    let amd: Vec<&String> = k
        .allocatable
        .keys()
        .filter(|r| r.starts_with("amd.com/"))
        .collect();
    if amd.is_empty() {
        return BTreeMap::new();
    }
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    if amd.iter().any(|r| *r == super::k8s::AMD_SINGLE) {
        return BTreeMap::from([(super::k8s::AMD_SINGLE.to_string(), count(after.len()))]);
    }
    let mut out: BTreeMap<String, i64> = amd.into_iter().map(|r| (r.clone(), 0)).collect();
    for g in snap.gpus.iter().filter(|g| g.mig.is_none()) {
        let modes = changes
            .iter()
            .find(|c| c.0 == g.bdf)
            .map(|c| (c.1, c.2))
            .or_else(|| g.compute_partition.zip(g.memory_partition));
        let Some((c, m)) = modes else { continue };
        let n = after.iter().filter(|r| r.bdf.starts_with(&g.bdf)).count();
        *out.entry(format!("amd.com/{c}_{m}").to_ascii_lowercase())
            .or_insert(0) += count(n);
    }
    out
}

/// The cluster's side of a change, or None off Kubernetes (no kubelet answered).
pub fn change(
    snap: &Snapshot,
    changes: &[Changed],
    memory_change: bool,
    after: &[LayoutRow],
) -> Option<KubeChange> {
    let kubelet = snap.kubelet.as_ref()?;
    let node = kubelet.node.as_ref();
    Some(KubeChange {
        // The node's name as the collector knows it (`$NODE_NAME`, the simulated node's, else
        // the host name: the kubelet's default).
        node: node.map_or_else(|| snap.host.clone(), |n| n.name.clone()),
        pods: pods_on(snap, changes, memory_change),
        allocatable: allocatable_after(snap, changes, after),
        dcm: node.and_then(crate::domain::snapshot::KubeNode::dcm_warning),
    })
}

fn step(key: StepKind, title: String, commands: Vec<String>, limit: Option<u32>) -> StepSpec {
    StepSpec {
        key,
        title,
        commands,
        limit_secs: limit.unwrap_or(60),
    }
}

/// The steps before the stop (cordon, evict, taint) and after the verify (wait for the
/// allocatable count, untaint, uncordon), each with the kubectl equivalent of what it does.
pub fn steps(k: &KubeChange) -> (Vec<StepSpec>, Vec<StepSpec>) {
    let node = &k.node;
    let taint = format!("{WINDOW_TAINT_KEY}={WINDOW_TAINT_VALUE}:{WINDOW_TAINT_EFFECT}");
    let mut before = vec![step(
        StepKind::Cordon,
        format!("cordon the node {node}: no new pod lands during the change"),
        vec![format!("kubectl cordon {node}")],
        Some(30),
    )];
    if !k.pods.is_empty() {
        before.push(step(
            StepKind::Evict,
            format!(
                "evict {} pod(s) through the Eviction API (PodDisruptionBudgets honoured, never bypassed) and wait until they are gone",
                k.pods.len()
            ),
            k.pods
                .iter()
                .map(|p| {
                    format!(
                        "POST /api/v1/namespaces/{}/pods/{}/eviction   (kubectl drain's way)",
                        p.namespace, p.name
                    )
                })
                .collect(),
            Some(EVICT_SECS),
        ));
    }
    before.push(step(
        StepKind::Taint,
        format!("taint the node {taint} for the change window (DaemonSet holders such as the metrics exporter leave, as AMD's DCM does)"),
        vec![format!("kubectl taint nodes {node} {taint}")],
        Some(120),
    ));
    let mut after = Vec::new();
    if !k.allocatable.is_empty() {
        after.push(step(
            StepKind::WaitAllocatable,
            format!(
                "wait until the node advertises {} (the device-plugin pod {PLUGIN_LABELS} is restarted once if it does not re-register)",
                k.allocatable
                    .iter()
                    .map(|(r, n)| format!("{r}={n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            vec![format!(
                "kubectl get node {node} -o jsonpath='{{.status.allocatable}}'"
            )],
            Some(ALLOCATABLE_SECS),
        ));
    }
    after.push(step(
        StepKind::Untaint,
        format!("remove the change window's taint from {node}"),
        vec![format!("kubectl taint nodes {node} {taint}-")],
        Some(30),
    ));
    after.push(step(
        StepKind::Uncordon,
        format!("uncordon the node {node} (only if partop cordoned it)"),
        vec![format!("kubectl uncordon {node}")],
        Some(30),
    ));
    (before, after)
}

/// Each physical GPU's modes after the plan's `changes` (their targets, the others' modes
/// now), in the node's GPU order, as DCM counts them; a GPU whose modes are unknown is left
/// out.
pub fn modes_after(snap: &Snapshot, changes: &[Changed]) -> Vec<(ComputeMode, MemoryMode)> {
    snap.gpus
        .iter()
        .filter(|g| g.mig.is_none())
        .filter_map(|g| {
            changes
                .iter()
                .find(|c| c.0 == g.bdf)
                .map(|c| (c.1, c.2))
                .or_else(|| g.compute_partition.zip(g.memory_partition))
        })
        .collect()
}

/// Whether `name` can be a DCM profile: it is the value of the node label
/// `dcm.amd.com/gpu-config-profile`, so a label value (at most 63 of `A-Za-z0-9-_.`, starting
/// and ending alphanumeric).
pub fn check_profile_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if name.len() <= 63 && ends && name.chars().all(ok_char) {
        Ok(())
    } else {
        Err(format!(
            "--dcm {}: a DCM profile's name is the value of the node label {}, so at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            super::text::escape_controls(name),
            super::k8s_ops::DCM_PROFILE_LABEL
        ))
    }
}

/// The layout `gpus` (each physical GPU's modes, in the node's order) as AMD Device Config
/// Manager's profile `name`: the `gpu-config-profiles` JSON of its ConfigMap. DCM hands out
/// GPUs to its profile entries in order, so each run of equal modes is one entry.
pub fn dcm_profile(name: &str, gpus: &[(ComputeMode, MemoryMode)]) -> serde_json::Value {
    let mut runs: Vec<((ComputeMode, MemoryMode), u32)> = Vec::new();
    for m in gpus {
        match runs.last_mut() {
            Some((last, n)) if last == m => *n += 1,
            _ => runs.push((*m, 1)),
        }
    }
    let profiles: Vec<serde_json::Value> = runs
        .iter()
        .map(|((c, m), n)| {
            serde_json::json!({
                "computePartition": c.to_string(),
                "memoryPartition": m.to_string(),
                "numGPUsAssigned": n,
            })
        })
        .collect();
    serde_json::json!({
        "gpu-config-profiles": {
            name: {"skippedGPUs": {"ids": []}, "profiles": profiles}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_as_a_dcm_profile_keeps_the_gpu_order() {
        use ComputeMode::{Cpx, Dpx, Spx};
        use MemoryMode::{Nps1, Nps4};
        let p = dcm_profile("p", &[(Cpx, Nps4), (Cpx, Nps4), (Spx, Nps1), (Cpx, Nps4)]);
        let entries = p["gpu-config-profiles"]["p"]["profiles"]
            .as_array()
            .unwrap()
            .clone();
        let got: Vec<(String, String, u64)> = entries
            .iter()
            .map(|e| {
                (
                    e["computePartition"].as_str().unwrap().to_string(),
                    e["memoryPartition"].as_str().unwrap().to_string(),
                    e["numGPUsAssigned"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("CPX".into(), "NPS4".into(), 2),
                ("SPX".into(), "NPS1".into(), 1),
                ("CPX".into(), "NPS4".into(), 1)
            ]
        );
        assert_eq!(
            p["gpu-config-profiles"]["p"]["skippedGPUs"]["ids"],
            serde_json::json!([])
        );
        let one = dcm_profile("q", &[(Dpx, Nps1); 8]);
        assert_eq!(
            one["gpu-config-profiles"]["q"]["profiles"][0]["numGPUsAssigned"],
            8
        );
    }

    #[test]
    fn a_profile_name_is_a_label_value() {
        // 4 accepted, 7 refused: 11 names.
        let ok = ["cpx-nps4", "a", "Profile_1.x", &"p".repeat(63)];
        let bad = ["", "-a", "a-", "a b", "a/b", &"p".repeat(64), "a\u{1b}[31m"];
        for n in ok {
            assert!(check_profile_name(n).is_ok(), "{n}");
        }
        for n in bad {
            let e = check_profile_name(n).unwrap_err();
            assert!(!e.contains('\u{1b}'), "escaped: {e}");
        }
    }
}
