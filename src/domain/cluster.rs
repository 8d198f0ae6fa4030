//! A Kubernetes cluster's GPU nodes, pure: the node and pod facts the API server gives (read by
//! `collect::cluster`), reduced to what the fleet shows per node (partition labels, allocatable
//! against capacity per GPU resource, cordon and taints, the pods on its GPUs) and the cluster's
//! own signals: a kubelet count that disagrees with the partition labels, a node stuck in a
//! DCM or MIG-manager state, a pod Pending for a partition resource that no node offers.

use super::modes::{ComputeMode, MemoryMode};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The AMD node labeller's partition label (`spx_nps1`, `cpx_nps4`).
pub const AMD_PARTITION: &str = "amd.com/compute-memory-partition";
/// AMD Device Config Manager: the profile a node is asked to take, and how that went.
pub const DCM_PROFILE: &str = "dcm.amd.com/gpu-config-profile";
pub const DCM_STATE: &str = "dcm.amd.com/gpu-config-profile-state";
/// NVIDIA MIG manager: the config a node is asked to take, and how that went.
pub const MIG_CONFIG: &str = "nvidia.com/mig.config";
pub const MIG_STATE: &str = "nvidia.com/mig.config.state";

/// One node as the API server has it (only what the fleet uses).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// GPU resources only (`amd.com/*`, `nvidia.com/gpu`, `nvidia.com/mig-*`): count.
    pub capacity: BTreeMap<String, i64>,
    pub allocatable: BTreeMap<String, i64>,
    /// Cordoned (`spec.unschedulable`).
    pub unschedulable: bool,
    /// `key=value:Effect` of each taint.
    pub taints: Vec<String>,
    /// The `Ready` condition (None: not reported).
    pub ready: Option<bool>,
    /// For each partition manager's state label: when its writer last wrote the node (RFC
    /// 3339, from the Node's managedFields: the API server's own record of who wrote which
    /// field, and when), so a state is said with how long it has been so.
    #[serde(default)]
    pub state_written: BTreeMap<String, String>,
}

/// One pod that asks for a GPU resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuPod {
    pub namespace: String,
    pub name: String,
    /// Where it is bound (None: not scheduled).
    pub node: Option<String>,
    /// `Pending`, `Running`, …
    pub phase: String,
    /// GPU resources its containers request (summed).
    pub requests: BTreeMap<String, i64>,
}

/// Whether a resource name is a GPU (or GPU partition) resource the fleet counts.
pub fn is_gpu_resource(name: &str) -> bool {
    name.starts_with("amd.com/") || name == "nvidia.com/gpu" || name.starts_with("nvidia.com/mig-")
}

/// The partition the AMD node labeller reports (`cpx_nps4` -> CPX/NPS4).
pub fn amd_partition(node: &ClusterNode) -> Option<(ComputeMode, MemoryMode)> {
    let v = node.labels.get(AMD_PARTITION)?;
    let (c, m) = v.split_once('_')?;
    Some((c.parse().ok()?, m.parse().ok()?))
}

/// What the cluster says is wrong with a node, or with a pod that wants a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Signal {
    /// The kubelet advertises a count the partition labels cannot give.
    CountDisagrees {
        node: String,
        resource: String,
        advertised: i64,
        why: String,
    },
    /// Fewer allocatable than capacity: the device plugin marked devices unhealthy.
    Unhealthy {
        node: String,
        resource: String,
        allocatable: i64,
        capacity: i64,
    },
    /// A partition manager reports a failure, or a change under way, on the node.
    ManagerState {
        node: String,
        manager: String,
        asked: String,
        state: String,
        failed: bool,
        /// When the state's writer last wrote the node (None: not known).
        #[serde(default)]
        since: Option<String>,
    },
    /// A pod waits for a GPU resource no node offers.
    PendingUnoffered {
        namespace: String,
        pod: String,
        resource: String,
    },
}

impl Signal {
    /// How bad, smaller first (the live view lists signals worst first): a partition manager
    /// that failed; a kubelet count the labels cannot give; a pod that cannot be placed;
    /// unhealthy devices; a change under way.
    pub const fn severity(&self) -> u8 {
        match self {
            Self::ManagerState { failed: true, .. } => 0,
            Self::CountDisagrees { .. } => 1,
            Self::PendingUnoffered { .. } => 2,
            Self::Unhealthy { .. } => 3,
            Self::ManagerState { failed: false, .. } => 4,
        }
    }

    /// The node it is about (None: a pod's).
    pub fn node(&self) -> Option<&str> {
        match self {
            Self::CountDisagrees { node, .. }
            | Self::Unhealthy { node, .. }
            | Self::ManagerState { node, .. } => Some(node),
            Self::PendingUnoffered { .. } => None,
        }
    }

    /// One line for an operator (names escaped by whoever prints them).
    pub fn text(&self) -> String {
        match self {
            Self::CountDisagrees {
                node,
                resource,
                advertised,
                why,
            } => format!(
                "{node}: the kubelet advertises {advertised} {resource}, {why}; restart the device plugin's pod on the node (it did not re-register after the change)"
            ),
            Self::Unhealthy {
                node,
                resource,
                allocatable,
                capacity,
            } => format!(
                "{node}: {allocatable} of {capacity} {resource} allocatable: the device plugin reports {} unhealthy",
                capacity - allocatable
            ),
            Self::ManagerState {
                node,
                manager,
                asked,
                state,
                failed,
                since,
            } => {
                let since = since
                    .as_deref()
                    .map(|t| format!(" since {t}"))
                    .unwrap_or_default();
                if *failed {
                    format!(
                        "{node}: {manager} failed to apply {asked:?} (state {state:?}{since}); its events on the node say why"
                    )
                } else {
                    format!("{node}: {manager} is applying {asked:?} (state {state:?}{since})")
                }
            }
            Self::PendingUnoffered {
                namespace,
                pod,
                resource,
            } => format!(
                "{namespace}/{pod} is Pending for {resource}, which no node offers: stage that layout on a node, or change the pod's request"
            ),
        }
    }
}

/// How many logical GPUs one physical GPU gives in `c` (CPX: one per XCD; the fleet assumes the
/// MI300-class 8 where the product is not labelled, and says so).
fn per_gpu(c: ComputeMode) -> i64 {
    i64::from(c.partitions(8))
}

/// Checks a node's advertised GPU resources against its partition label. Under the device
/// plugin's `mixed` naming each resource is `amd.com/<compute>_<memory>`: one that names another
/// layout than the label has is stale. Under `single` naming (`amd.com/gpu`) the count must be a
/// non-zero multiple of the partitions per GPU (CPX giving 0 or staying at the GPU count are the
/// plugin's known failures).
pub fn count_signals(node: &ClusterNode) -> Vec<Signal> {
    let mut out = Vec::new();
    let Some((c, m)) = amd_partition(node) else {
        return out;
    };
    let label = format!("{}_{}", c.name().to_lowercase(), m.name().to_lowercase());
    for (r, &n) in &node.capacity {
        let Some(kind) = r.strip_prefix("amd.com/") else {
            continue;
        };
        if kind == "gpu" {
            let k = per_gpu(c);
            if n == 0 || n % k != 0 {
                out.push(Signal::CountDisagrees {
                    node: node.name.clone(),
                    resource: r.clone(),
                    advertised: n,
                    why: format!(
                        "but {c}/{m} gives {k} per GPU, so a multiple of {k} (8 XCDs assumed)"
                    ),
                });
            }
        } else if kind.contains('_') && kind != label && n > 0 {
            out.push(Signal::CountDisagrees {
                node: node.name.clone(),
                resource: r.clone(),
                advertised: n,
                why: format!("but the node is labelled {label}"),
            });
        }
    }
    for (r, &cap) in &node.capacity {
        let alloc = node.allocatable.get(r).copied().unwrap_or(0);
        if alloc < cap {
            out.push(Signal::Unhealthy {
                node: node.name.clone(),
                resource: r.clone(),
                allocatable: alloc,
                capacity: cap,
            });
        }
    }
    out
}

/// A partition manager's state on the node: DCM's `success`/`failure`, the MIG manager's
/// `pending`/`rebooting`/`success`/`failed`. Success says nothing.
pub fn manager_signals(node: &ClusterNode) -> Vec<Signal> {
    let mut out = Vec::new();
    for (manager, ask, state, failed) in [
        ("AMD DCM", DCM_PROFILE, DCM_STATE, "failure"),
        ("the MIG manager", MIG_CONFIG, MIG_STATE, "failed"),
    ] {
        let Some(s) = node.labels.get(state) else {
            continue;
        };
        if s == "success" {
            continue;
        }
        out.push(Signal::ManagerState {
            node: node.name.clone(),
            manager: manager.into(),
            asked: node.labels.get(ask).cloned().unwrap_or_default(),
            state: s.clone(),
            failed: s == failed,
            since: node.state_written.get(state).cloned(),
        });
    }
    out
}

/// Pods Pending for a GPU resource that no node has allocatable.
pub fn pending_signals(nodes: &[ClusterNode], pods: &[GpuPod]) -> Vec<Signal> {
    let offered = |r: &str| {
        nodes
            .iter()
            .any(|n| n.allocatable.get(r).is_some_and(|v| *v > 0))
    };
    let mut out = Vec::new();
    for p in pods.iter().filter(|p| p.phase == "Pending") {
        for r in p.requests.keys().filter(|r| !offered(r)) {
            out.push(Signal::PendingUnoffered {
                namespace: p.namespace.clone(),
                pod: p.name.clone(),
                resource: r.clone(),
            });
        }
    }
    out
}

/// Every signal of the cluster, worst first ([`Signal::severity`]), then in the order of
/// [`signals`].
pub fn signals_worst_first(nodes: &[ClusterNode], pods: &[GpuPod]) -> Vec<Signal> {
    let mut v = signals(nodes, pods);
    v.sort_by_key(Signal::severity);
    v
}

/// Every signal of the cluster, nodes in name order then pods.
pub fn signals(nodes: &[ClusterNode], pods: &[GpuPod]) -> Vec<Signal> {
    let mut out: Vec<Signal> = nodes
        .iter()
        .flat_map(|n| {
            let mut v = count_signals(n);
            v.extend(manager_signals(n));
            v
        })
        .collect();
    out.extend(pending_signals(nodes, pods));
    out
}

/// One node's row in the cluster's fleet view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRow {
    pub name: String,
    /// `CPX/NPS4` from the labeller, else the DCM profile or MIG config asked for.
    pub layout: String,
    /// `amd.com/cpx_nps4 64/64` per GPU resource (allocatable/capacity).
    pub resources: Vec<(String, i64, i64)>,
    /// GPU pods bound to it.
    pub pods: usize,
    pub cordoned: bool,
    pub taints: Vec<String>,
    pub ready: Option<bool>,
    /// Signals about this node.
    pub signals: usize,
}

/// The rows, worst first (not ready, then with signals, then cordoned), then by name.
pub fn rows(nodes: &[ClusterNode], pods: &[GpuPod]) -> Vec<NodeRow> {
    let mut v: Vec<NodeRow> = nodes
        .iter()
        .filter(|n| !n.capacity.is_empty())
        .map(|n| NodeRow {
            name: n.name.clone(),
            layout: amd_partition(n).map_or_else(
                || {
                    n.labels
                        .get(DCM_PROFILE)
                        .or_else(|| n.labels.get(MIG_CONFIG))
                        .cloned()
                        .unwrap_or_default()
                },
                |(c, m)| format!("{c}/{m}"),
            ),
            resources: n
                .capacity
                .iter()
                .map(|(r, c)| (r.clone(), n.allocatable.get(r).copied().unwrap_or(0), *c))
                .collect(),
            pods: pods
                .iter()
                .filter(|p| p.node.as_deref() == Some(n.name.as_str()))
                .count(),
            cordoned: n.unschedulable,
            taints: n.taints.clone(),
            ready: n.ready,
            signals: count_signals(n).len() + manager_signals(n).len(),
        })
        .collect();
    v.sort_by(|a, b| {
        let key = |r: &NodeRow| (r.ready == Some(true), r.signals == 0, !r.cordoned);
        key(a).cmp(&key(b)).then_with(|| a.name.cmp(&b.name))
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, label: Option<&str>, res: &[(&str, i64, i64)]) -> ClusterNode {
        ClusterNode {
            name: name.into(),
            labels: label
                .map(|l| [(AMD_PARTITION.to_string(), l.to_string())].into())
                .unwrap_or_default(),
            capacity: res.iter().map(|(r, _, c)| ((*r).to_string(), *c)).collect(),
            allocatable: res.iter().map(|(r, a, _)| ((*r).to_string(), *a)).collect(),
            unschedulable: false,
            taints: vec![],
            ready: Some(true),
            state_written: BTreeMap::new(),
        }
    }

    #[test]
    fn single_naming_every_layout_and_count() {
        // Every compute x memory label, every count 0..=80 of amd.com/gpu on an 8-GPU node:
        // exactly the counts that are not a non-zero multiple of the partitions per GPU signal.
        let mut cases = 0;
        for c in ComputeMode::ALL {
            for m in MemoryMode::ALL {
                let label = format!("{}_{}", c.name().to_lowercase(), m.name().to_lowercase());
                for n in 0..=80 {
                    let s = count_signals(&node("a", Some(&label), &[("amd.com/gpu", n, n)]));
                    let k = i64::from(c.partitions(8));
                    assert_eq!(!s.is_empty(), n == 0 || n % k != 0, "{label} {n}");
                    cases += 1;
                }
            }
        }
        eprintln!("{cases} label x count cases");
    }

    #[test]
    fn mixed_naming_a_stale_resource_is_named() {
        let n = node(
            "a",
            Some("cpx_nps4"),
            &[("amd.com/cpx_nps4", 64, 64), ("amd.com/spx_nps1", 8, 8)],
        );
        let s = count_signals(&n);
        assert_eq!(s.len(), 1, "{s:?}");
        assert!(s[0].text().contains("amd.com/spx_nps1"), "{}", s[0].text());
        assert!(
            count_signals(&node("a", Some("cpx_nps4"), &[("amd.com/spx_nps1", 0, 0)])).is_empty()
        );
    }

    #[test]
    fn unhealthy_devices_and_manager_states() {
        let n = node("a", Some("spx_nps1"), &[("amd.com/gpu", 6, 8)]);
        assert!(matches!(
            count_signals(&n)[..],
            [Signal::Unhealthy {
                allocatable: 6,
                capacity: 8,
                ..
            }]
        ));
        let mut n = node("b", None, &[("amd.com/gpu", 8, 8)]);
        for (state, failed, any) in [
            ("success", false, false),
            ("failure", true, true),
            ("pending", false, true),
        ] {
            n.labels.insert(DCM_PROFILE.into(), "cpx".into());
            n.labels.insert(DCM_STATE.into(), state.into());
            let s = manager_signals(&n);
            assert_eq!(!s.is_empty(), any, "{state}");
            if let [Signal::ManagerState { failed: f, .. }] = s[..] {
                assert_eq!(f, failed);
            }
        }
        // With the time its writer last wrote the node, the state says since when.
        n.state_written
            .insert(DCM_STATE.into(), "2026-11-26T10:00:00Z".into());
        let s = manager_signals(&n);
        assert!(
            s[0].text()
                .contains("(state \"pending\" since 2026-11-26T10:00:00Z)"),
            "{}",
            s[0].text()
        );
    }

    #[test]
    fn pending_for_a_resource_nobody_offers() {
        let nodes = [node("a", Some("spx_nps1"), &[("amd.com/gpu", 8, 8)])];
        let pod = |r: &str, phase: &str| GpuPod {
            namespace: "ml".into(),
            name: "p".into(),
            node: None,
            phase: phase.into(),
            requests: [(r.to_string(), 1)].into(),
        };
        assert_eq!(
            pending_signals(&nodes, &[pod("amd.com/cpx_nps4", "Pending")]).len(),
            1
        );
        assert!(pending_signals(&nodes, &[pod("amd.com/gpu", "Pending")]).is_empty());
        assert!(pending_signals(&nodes, &[pod("amd.com/cpx_nps4", "Running")]).is_empty());
    }

    #[test]
    fn rows_worst_first() {
        let mut bad = node("z", Some("spx_nps1"), &[("amd.com/gpu", 6, 7)]);
        bad.ready = Some(true);
        let mut down = node("y", None, &[("amd.com/gpu", 8, 8)]);
        down.ready = Some(false);
        let good = node("a", Some("spx_nps1"), &[("amd.com/gpu", 8, 8)]);
        let mut cordoned = node("b", Some("spx_nps1"), &[("amd.com/gpu", 8, 8)]);
        cordoned.unschedulable = true;
        let cpu = node("cpu", None, &[]);
        let r = rows(&[good, bad, down, cordoned, cpu], &[]);
        let names: Vec<&str> = r.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["y", "z", "b", "a"]);
    }
}
