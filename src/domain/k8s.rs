//! Kubernetes on the node, pure: the kubelet's device allocations (read by
//! `collect::kubelet` from PodResources) joined to the snapshot's logical GPUs and to each
//! holder process, the way AMD's metrics exporter joins them: by the device id the device
//! plugin advertised (the PCI BDF for partition 0, the platform device `amdgpu_xcp_N` or
//! `amdgpu_xcp.N` for the others), the DRA device `gpu-<card>-<render>` of `gpu.amd.com`, or
//! NVIDIA's GPU and MIG UUIDs. Runs after the enrichers, before the sanity check.

use super::snapshot::{ClusterModel, Kubelet, LogicalGpu, PhysicalGpu, PodRef, Snapshot};
use std::collections::BTreeMap;

/// The AMD DRA driver's name (its DeviceClass too).
pub const AMD_DRA_DRIVER: &str = "gpu.amd.com";

/// One device the kubelet allocated to a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// A device plugin's device: its resource and id.
    Plugin {
        /// `amd.com/gpu`, `amd.com/cpx_nps4`, `nvidia.com/gpu`.
        resource: String,
        /// The id the plugin advertised.
        id: String,
    },
    /// A DRA device of a resource claim.
    Dra {
        /// `gpu.amd.com`.
        driver: String,
        /// `gpu-<card>-<render>`.
        device: String,
        /// `<namespace>/<claim>`.
        claim: String,
    },
}

impl Device {
    /// The resource column: the extended resource, or the DRA driver and claim.
    pub fn resource(&self) -> String {
        match self {
            Self::Plugin { resource, .. } => resource.clone(),
            Self::Dra { driver, claim, .. } => format!("{driver} claim {claim}"),
        }
    }

    fn id(&self) -> &str {
        match self {
            Self::Plugin { id, .. } => id,
            Self::Dra { device, .. } => device,
        }
    }
}

/// One allocation: a pod's container and a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// Namespace.
    pub namespace: String,
    /// Pod.
    pub pod: String,
    /// Container.
    pub container: String,
    /// The device.
    pub device: Device,
}

/// What PodResources answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodResources {
    /// Every allocated device of every container (`List`).
    pub allocations: Vec<Allocation>,
    /// Allocatable device ids per resource (`GetAllocatableResources`); None where the kubelet
    /// did not answer that call.
    pub allocatable: Option<BTreeMap<String, Vec<String>>>,
    /// The socket it came from.
    pub source: String,
}

/// The device-plugin name of each render node's device (`renderD129` → `amdgpu_xcp_0`,
/// `renderD128` → `0000:05:00.0`), read from the kernel's tree by the collector.
pub type DeviceNames = BTreeMap<String, String>;

/// The one spelling of a platform partition device: the kernel's `amdgpu_xcp.N` and the
/// plugin's `amdgpu_xcp_N` are the same device (the plugin's glob misses the first).
fn canonical(id: &str) -> String {
    let id = id.trim().to_ascii_lowercase();
    match id.strip_prefix("amdgpu_xcp.") {
        Some(n) => format!("amdgpu_xcp_{n}"),
        None => id,
    }
}

/// The render number of `renderD129`.
fn render_number(node: &str) -> Option<u32> {
    node.strip_prefix("renderD")?.parse().ok()
}

/// The keys an allocation's device can name: `uuid:` a GPU or MIG UUID, `dev:` a device-plugin
/// id (a PCI BDF or a platform partition device), `render:` the render number of a DRA device.
fn device_key(device: &Device) -> Option<String> {
    match device {
        Device::Plugin { id, .. } => {
            let id = canonical(id);
            Some(if id.starts_with("gpu-") || id.starts_with("mig-") {
                format!("uuid:{id}")
            } else {
                format!("dev:{id}")
            })
        }
        // `gpu-<card>-<render>`: render nodes are unique on a node, so the render number
        // alone names the partition (the card index is not in the snapshot).
        Device::Dra { driver, device, .. } => (driver == AMD_DRA_DRIVER)
            .then(|| {
                device
                    .strip_prefix("gpu-")
                    .and_then(|r| r.split_once('-'))
                    .and_then(|(_, r)| r.parse::<u32>().ok())
            })
            .flatten()
            .map(|r| format!("render:{r}")),
    }
}

/// The keys under which logical GPU `l` of `phys` is named (see [`device_key`]).
fn gpu_keys(phys: &PhysicalGpu, l: &LogicalGpu, names: &DeviceNames) -> Vec<String> {
    let mut keys = Vec::new();
    if let Some(u) = &l.uuid {
        keys.push(format!("uuid:{}", canonical(u)));
    }
    if l.partition_id == 0 {
        if l.profile.is_none()
            && let Some(u) = &phys.uuid
        {
            keys.push(format!("uuid:{}", canonical(u)));
        }
        keys.push(format!("dev:{}", canonical(&phys.bdf)));
        keys.push(format!("dev:{}", canonical(&l.bdf)));
    }
    if let Some(r) = &l.render_node {
        if let Some(n) = names.get(r) {
            keys.push(format!("dev:{}", canonical(n)));
        }
        if let Some(n) = render_number(r) {
            keys.push(format!("render:{n}"));
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// Whether `device` names logical GPU `l` of `phys`.
pub fn names(device: &Device, phys: &PhysicalGpu, l: &LogicalGpu, names: &DeviceNames) -> bool {
    device_key(device).is_some_and(|k| gpu_keys(phys, l, names).contains(&k))
}

/// Joins the kubelet's allocations to the snapshot: each logical GPU's pods, each holder
/// process's pod, the allocatable counts and the allocations that name no GPU here. One index
/// of the logical GPUs' keys, then one look-up per allocation.
pub fn join(snap: &mut Snapshot, pr: &PodResources, device_names: &DeviceNames) {
    let mut index: std::collections::HashMap<String, Vec<(usize, usize)>> =
        std::collections::HashMap::new();
    for (gi, g) in snap.gpus.iter().enumerate() {
        for (li, l) in g.partitions.iter().enumerate() {
            for k in gpu_keys(g, l, device_names) {
                index.entry(k).or_default().push((gi, li));
            }
        }
    }
    let mut unmatched = Vec::new();
    let mut pods = std::collections::BTreeSet::new();
    for a in &pr.allocations {
        pods.insert((a.namespace.as_str(), a.pod.as_str()));
        let pod = PodRef {
            namespace: a.namespace.clone(),
            pod: a.pod.clone(),
            container: a.container.clone(),
            resource: a.device.resource(),
            priority_class: None,
        };
        let found = device_key(&a.device).and_then(|k| index.get(&k));
        let Some(found) = found else {
            unmatched.push(format!("{} {}", a.device.resource(), a.device.id()));
            continue;
        };
        for &(gi, li) in found {
            let l = &mut snap.gpus[gi].partitions[li];
            if !l.pods.contains(&pod) {
                l.pods.push(pod.clone());
            }
        }
    }
    for g in &mut snap.gpus {
        for l in &mut g.partitions {
            l.pods.sort();
        }
    }
    let pods_with_devices = u32::try_from(pods.len()).unwrap_or(u32::MAX);
    attribute_processes(snap);
    snap.kubelet = Some(Kubelet {
        allocatable: pr
            .allocatable
            .iter()
            .flatten()
            .map(|(r, ids)| (r.clone(), u32::try_from(ids.len()).unwrap_or(u32::MAX)))
            .collect(),
        pods_with_devices,
        unmatched,
        source: pr.source.clone(),
        ..Default::default()
    });
}

/// A pod bound to this node as the API server says of it: what names a process whose cgroup
/// carries a pod UID the kubelet's PodResources does not (a pod that holds `/dev/kfd` or a
/// render node without asking the device plugin, such as the metrics exporter's DaemonSet:
/// the holder a busy repartition meets, gpu-operator#421).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePod {
    /// Its UID.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Its containers' runtime ids (without the `containerd://` scheme) and names.
    pub containers: Vec<(String, String)>,
    /// `spec.priorityClassName` (None: it names none).
    pub priority_class: Option<String>,
}

/// What [`PodRef::resource`] says of a pod named by the API server: it holds the GPU without
/// an allocation from the kubelet.
pub const NOT_ALLOCATED: &str = "not allocated by the kubelet";

/// Names, from the API server's pods on this node, each holder process whose cgroup names a
/// pod UID that PodResources did not name (its container by the cgroup's container id). A
/// process already given its pod keeps it: the kubelet's allocation is the better source.
pub fn name_unallocated(snap: &mut Snapshot, pods: &[NodePod]) {
    if pods.is_empty() {
        return;
    }
    for p in snap.processes.iter_mut().filter(|p| p.pod.is_none()) {
        let Some(uid) = p.k8s_pod_uid.as_deref() else {
            continue;
        };
        let Some(pod) = pods.iter().find(|x| x.uid.eq_ignore_ascii_case(uid)) else {
            continue;
        };
        let container = p
            .container_id
            .as_deref()
            .and_then(|id| {
                pod.containers
                    .iter()
                    .find(|(cid, _)| cid.eq_ignore_ascii_case(id))
            })
            .map(|(_, name)| name.clone())
            .unwrap_or_default();
        p.pod = Some(PodRef {
            namespace: pod.namespace.clone(),
            pod: pod.name.clone(),
            container,
            resource: NOT_ALLOCATED.to_string(),
            priority_class: None,
        });
    }
}

/// Each pod named on a partition or a holder process gets its priority class from the API
/// server's pods on this node (matched by namespace and name), which PodResources does not
/// carry: the reclaimable finding says it, as a scheduler's reclaim would weigh it.
pub fn add_priority_classes(snap: &mut Snapshot, pods: &[NodePod]) {
    let class = |r: &PodRef| {
        pods.iter()
            .find(|p| p.namespace == r.namespace && p.name == r.pod)
            .map(|p| p.priority_class.clone().unwrap_or_default())
    };
    for l in snap.gpus.iter_mut().flat_map(|g| g.partitions.iter_mut()) {
        for r in &mut l.pods {
            r.priority_class = class(r);
        }
    }
    for r in snap.processes.iter_mut().filter_map(|p| p.pod.as_mut()) {
        r.priority_class = class(r);
    }
}

/// The KServe label that names a pod's InferenceService.
pub const KSERVE_LABEL: &str = "serving.kserve.io/inferenceservice";

/// A model-serving pod as the API server says of it (`collect::kube_node` recognises it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingPod {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// The node it is bound to.
    pub node: Option<String>,
    /// `kserve` or `vllm`.
    pub kind: String,
    /// The service it serves for (the InferenceService, or the pods' owner).
    pub service: String,
    /// Its Ready condition is True.
    pub ready: bool,
}

/// The models served by pods with at least one pod on `node`: per (namespace, service), the
/// replicas healthy over every pod of it, its pods here and the logical GPUs they hold (from
/// the kubelet's allocations already joined into `snap`).
pub fn serving_models(pods: &[ServingPod], node: &str, snap: &Snapshot) -> Vec<ClusterModel> {
    let mut by: BTreeMap<(String, String), ClusterModel> = BTreeMap::new();
    for p in pods {
        let m = by
            .entry((p.namespace.clone(), p.service.clone()))
            .or_insert_with(|| ClusterModel {
                name: p.service.clone(),
                namespace: p.namespace.clone(),
                kind: p.kind.clone(),
                ..Default::default()
            });
        m.pods = m.pods.saturating_add(1);
        m.ready = m.ready.saturating_add(u32::from(p.ready));
        if p.node.as_deref() == Some(node) {
            m.pods_here.push(p.name.clone());
        }
    }
    let mut out: Vec<ClusterModel> = by
        .into_values()
        .filter(|m| !m.pods_here.is_empty())
        .collect();
    for m in &mut out {
        m.pods_here.sort();
        m.gpus = snap
            .gpus
            .iter()
            .flat_map(|g| &g.partitions)
            .filter(|l| {
                l.pods
                    .iter()
                    .any(|r| r.namespace == m.namespace && m.pods_here.contains(&r.pod))
            })
            .map(|l| l.gpu_id)
            .collect();
        m.gpus.sort_unstable();
        m.gpus.dedup();
    }
    out
}

/// Each holder process gets the pod container whose allocated GPU it holds, where that is one
/// container; a process whose cgroup names a pod UID learnt that way (a second process of the
/// pod, one holding only `/dev/kfd`) gets the same pod. A process whose cgroup names another
/// pod than the allocation's is not given it.
fn attribute_processes(snap: &mut Snapshot) {
    let by_gpu: BTreeMap<u32, Vec<PodRef>> = snap
        .gpus
        .iter()
        .flat_map(|g| &g.partitions)
        .filter(|l| !l.pods.is_empty())
        .map(|l| (l.gpu_id, l.pods.clone()))
        .collect();
    let mut by_uid: BTreeMap<String, Option<PodRef>> = BTreeMap::new();
    let mut pending = Vec::new();
    for (i, p) in snap.processes.iter_mut().enumerate() {
        let mut held: Vec<&PodRef> = p
            .gpus
            .iter()
            .filter_map(|u| by_gpu.get(&u.gpu_id))
            .flatten()
            .collect();
        held.sort();
        held.dedup();
        let one = match held.as_slice() {
            [one] => Some((*one).clone()),
            _ => None,
        };
        match (&p.k8s_pod_uid, one) {
            (Some(uid), Some(pod)) => {
                let known = by_uid
                    .entry(uid.clone())
                    .or_insert_with(|| Some(pod.clone()));
                // Two pods claimed by one UID: not one pod, so neither is said.
                if known.as_ref().is_some_and(|k| k.label() != pod.label()) {
                    *known = None;
                }
                pending.push(i);
            }
            (None, Some(pod)) => p.pod = Some(pod),
            (Some(_), None) => pending.push(i),
            (None, None) => {}
        }
    }
    for i in pending {
        let p = &mut snap.processes[i];
        let Some(uid) = &p.k8s_pod_uid else { continue };
        if let Some(Some(pod)) = by_uid.get(uid) {
            let mut pod = pod.clone();
            // Its own container where the process holds one of the pod's GPUs.
            if let Some(own) = p
                .gpus
                .iter()
                .filter_map(|u| by_gpu.get(&u.gpu_id))
                .flatten()
                .find(|x| x.label() == pod.label())
            {
                pod = own.clone();
            }
            p.pod = Some(pod);
        }
    }
}

/// The AMD device plugin's single resource name.
pub const AMD_SINGLE: &str = "amd.com/gpu";

/// The kernel's logical GPUs per AMD device-plugin resource, as the plugin would advertise
/// them: `single` naming counts every logical GPU as `amd.com/gpu`; `mixed` names each by its
/// modes (`amd.com/cpx_nps4`). NVIDIA GPUs are not counted (MIG strategies name them
/// otherwise).
pub fn kernel_counts(snap: &Snapshot) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for g in snap.gpus.iter().filter(|g| g.mig.is_none()) {
        let n = u32::try_from(g.partitions.len()).unwrap_or(u32::MAX);
        *out.entry(AMD_SINGLE.to_string()).or_insert(0) += n;
        if let (Some(c), Some(m)) = (g.compute_partition, g.memory_partition) {
            let name = format!("amd.com/{c}_{m}").to_ascii_lowercase();
            *out.entry(name).or_insert(0) += n;
        }
    }
    out
}

/// One resource whose allocatable count is not the kernel's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// The resource.
    pub resource: String,
    /// What the kubelet advertises.
    pub kubelet: u32,
    /// What the kernel has.
    pub kernel: u32,
}

/// The AMD resources whose kubelet allocatable count differs from the kernel's logical GPUs:
/// under single naming `amd.com/gpu` against every logical GPU; under mixed naming each
/// `amd.com/<compute>_<memory>` the kubelet or the kernel has (a resource of a mode the node
/// left, still advertised, is drift too). Nothing where the kubelet did not answer
/// `GetAllocatableResources` or advertises no AMD resource (not an AMD node's plugin).
pub fn drift(snap: &Snapshot) -> Vec<Drift> {
    let Some(k) = &snap.kubelet else {
        return Vec::new();
    };
    let amd: BTreeMap<&String, u32> = k
        .allocatable
        .iter()
        .filter(|(r, _)| r.starts_with("amd.com/"))
        .map(|(r, n)| (r, *n))
        .collect();
    if amd.is_empty() {
        return Vec::new();
    }
    let kernel = kernel_counts(snap);
    let mut names: Vec<String> = if amd.contains_key(&AMD_SINGLE.to_string()) {
        vec![AMD_SINGLE.to_string()]
    } else {
        amd.keys()
            .map(|r| (*r).clone())
            .chain(kernel.keys().filter(|r| *r != AMD_SINGLE).cloned())
            .collect()
    };
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|r| {
            let kubelet = amd.get(&r).copied().unwrap_or(0);
            let kernel = kernel.get(&r).copied().unwrap_or(0);
            (kubelet != kernel).then_some(Drift {
                resource: r,
                kubelet,
                kernel,
            })
        })
        .collect()
}
