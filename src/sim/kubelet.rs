//! The simulated node's kubelet twin (`partop sim start --kubernetes`, or a scenario with a
//! `[kubernetes]` table): the node's workloads are its pods, and the kernel twin's process
//! serves the kubelet's PodResources API for them on `STATE.kubelet.sock`, through the same
//! proto and tonic code the collector reads with (`collect::podresources`). Each answer is
//! computed from the state file at the call, so a repartition or a stopped workload shows at
//! once, as the real kubelet's does.

use super::scenario::Kind;
use super::state::SimState;
use crate::collect::podresources::{
    AllocatableResourcesResponse, ClaimResource, ContainerDevices, ContainerResources,
    DynamicResource, ListPodResourcesResponse, Lister, PodResources,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How the simulated node's device plugin names partitions other than 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum XcpName {
    /// `amdgpu_xcp_N` (the plugin's glob).
    #[default]
    Underscore,
    /// `amdgpu_xcp.N` (what some kernels name the platform device).
    Dot,
}

/// The device plugin's resource naming strategy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Naming {
    /// Everything `amd.com/gpu`.
    #[default]
    Single,
    /// `amd.com/<compute>_<memory>`.
    Mixed,
}

/// The `[kubernetes]` table of a scenario: the simulated node is a Kubernetes node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeSpec {
    /// Partition device names (`underscore`, `dot`).
    #[serde(default)]
    pub xcp_name: XcpName,
    /// Resource naming (`single`, `mixed`).
    #[serde(default)]
    pub naming: Naming,
    /// Workloads whose GPU is a DRA claim of `gpu.amd.com` rather than a plugin device.
    #[serde(default)]
    pub dra: Vec<String>,
    /// The device plugin keeps the devices it registered at start (it does not re-register
    /// after a repartition), so the kubelet's allocatable count goes stale.
    #[serde(default)]
    pub plugin_stale: bool,
    /// The Node's name in the API server (default: the host name, the kubelet's default).
    #[serde(default)]
    pub node: Option<String>,
}

/// The API server the simulated node joins (`partop sim start --kubernetes --kubeconfig F`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimApi {
    /// The kubeconfig (absolute: the kernel twin's process reads it).
    pub kubeconfig: PathBuf,
    /// Its context (default: its current one).
    #[serde(default)]
    pub context: Option<String>,
}

impl SimApi {
    /// The API server of `kubeconfig` (made absolute) and `context`, checked as partop reads
    /// it (the bounded reader, the context present), so a mistake is said at `sim start`.
    ///
    /// # Errors
    /// The kubeconfig is unreadable, not one, or lacks the context.
    pub fn new(kubeconfig: &Path, context: Option<String>) -> Result<Self, String> {
        let kubeconfig = std::path::absolute(kubeconfig)
            .map_err(|e| format!("kubeconfig {}: {e}", kubeconfig.display()))?;
        let api = Self {
            kubeconfig,
            context,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(crate::collect::cluster::config(&api.target()))?;
        Ok(api)
    }

    /// As partop's cluster reads take it.
    pub fn target(&self) -> crate::collect::cluster::Target {
        crate::collect::cluster::Target {
            kubeconfig: Some(self.kubeconfig.clone()),
            context: self.context.clone(),
            selector: None,
        }
    }
}

/// A pod of the API server that a workload of the simulated node runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its UID (a pod of the same name made again is another pod).
    pub uid: String,
    /// The container that asked for the GPU.
    pub container: String,
    /// The resource it asked for.
    pub resource: String,
}

/// The kubelet twin's state in the node's state file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimKube {
    /// What the scenario asked for.
    pub spec: KubeSpec,
    /// The devices the plugin registered (per resource), where it does not re-register.
    #[serde(default)]
    pub registered: Vec<(String, Vec<String>)>,
    /// The API server it joins, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<SimApi>,
}

impl SimKube {
    /// The Node's name: the scenario's, else the host name (the kubelet's default).
    pub fn node_name(&self) -> String {
        self.spec
            .node
            .clone()
            .unwrap_or_else(crate::collect::host::hostname)
    }
}

impl SimKube {
    /// The twin for `spec` on the node `state` is now.
    pub fn new(spec: KubeSpec, state: &SimState) -> Self {
        let registered = if spec.plugin_stale {
            devices(state, &spec)
        } else {
            Vec::new()
        };
        Self {
            spec,
            registered,
            api: None,
        }
    }
}

/// The namespace of the node's pods: workloads in `sim`, agents (the metrics exporter's
/// DaemonSet) in the GPU operator's.
fn namespace(kind: Kind) -> &'static str {
    if kind == Kind::Agent {
        "kube-amd-gpu"
    } else {
        "sim"
    }
}

/// The container of a workload's pod.
fn container(kind: Kind) -> &'static str {
    match kind {
        Kind::ModelServer => "server",
        Kind::Batch => "trainer",
        Kind::Agent => "exporter",
    }
}

/// The pod a workload is: (namespace, name, container): the API server's pod it runs, else
/// its own under the twin's names.
fn pod_of(w: &super::state::SimWorkload) -> (String, String, String) {
    match &w.pod {
        Some(p) => (p.namespace.clone(), p.name.clone(), p.container.clone()),
        None => (
            namespace(w.spec.kind).to_string(),
            w.spec.name.clone(),
            container(w.spec.kind).to_string(),
        ),
    }
}

/// Logical GPU `index`'s resource and device-plugin id on the node as it is now, and its DRA
/// device name `gpu-<card>-<render>`.
fn device_of(state: &SimState, spec: &KubeSpec, index: u32) -> Option<(String, String, String)> {
    let logical = state.logical();
    let l = logical.iter().find(|l| l.index == index)?;
    let g = state.gpus.get(l.phys)?;
    let resource = match spec.naming {
        Naming::Single => "amd.com/gpu".to_string(),
        Naming::Mixed => format!("amd.com/{}_{}", g.modes.compute, g.modes.memory).to_lowercase(),
    };
    let name = super::kernel::device_name(state, &logical, l);
    let id = match (spec.xcp_name, name.strip_prefix("amdgpu_xcp_")) {
        (XcpName::Dot, Some(n)) => format!("amdgpu_xcp.{n}"),
        _ => name,
    };
    let render = super::kernel::render_minor(l.phys, l.shape.partition_id);
    let card = u32::try_from(l.phys).unwrap_or(0) * 8 + l.shape.partition_id;
    Some((resource, id, format!("gpu-{card}-{render}")))
}

/// Every logical GPU's device per resource, as the plugin registers them.
fn devices(state: &SimState, spec: &KubeSpec) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for l in state.logical() {
        if let Some((resource, id, _)) = device_of(state, spec, l.index) {
            match out.iter_mut().find(|(r, _)| *r == resource) {
                Some((_, ids)) => ids.push(id),
                None => out.push((resource, vec![id])),
            }
        }
    }
    out
}

/// The pods of the node: one per launched workload.
pub fn pods(state: &SimState, spec: &KubeSpec) -> Vec<PodResources> {
    let mut out = Vec::new();
    for (i, w) in state.workloads.iter().enumerate() {
        if w.pid.is_none() || !state.alive(i) {
            continue;
        }
        let (pod_ns, pod_name, pod_container) = pod_of(w);
        let mut c = ContainerResources {
            name: pod_container,
            ..Default::default()
        };
        if let Some((resource, id, dra)) = state
            .placement_index(i)
            .and_then(|index| device_of(state, spec, index))
        {
            if spec.dra.contains(&w.spec.name) {
                c.dynamic_resources.push(DynamicResource {
                    claim_name: format!("{}-gpu", w.spec.name),
                    claim_namespace: namespace(w.spec.kind).to_string(),
                    claim_resources: vec![ClaimResource {
                        driver_name: crate::domain::k8s::AMD_DRA_DRIVER.to_string(),
                        pool_name: state.gpus.first().map(|g| g.bdf(0)).unwrap_or_default(),
                        device_name: dra,
                        cdi_devices: Vec::new(),
                    }],
                });
            } else {
                c.devices.push(ContainerDevices {
                    resource_name: resource,
                    device_ids: vec![id],
                    topology: None,
                });
            }
        }
        out.push(PodResources {
            name: pod_name,
            namespace: pod_ns,
            containers: vec![c],
        });
    }
    out
}

/// The PodResources answers of the node at `state_path`, read at each call.
#[derive(Debug)]
pub struct Twin {
    state_path: PathBuf,
}

impl Twin {
    fn now(&self) -> Option<(SimState, SimKube)> {
        let s = SimState::load(&self.state_path).ok()?;
        let k = s.kubernetes.clone()?;
        Some((s, k))
    }
}

impl Lister for Twin {
    fn list(&self) -> ListPodResourcesResponse {
        ListPodResourcesResponse {
            pod_resources: self
                .now()
                .map(|(s, k)| pods(&s, &k.spec))
                .unwrap_or_default(),
        }
    }

    fn allocatable(&self) -> AllocatableResourcesResponse {
        let registered = self
            .now()
            .map(|(s, k)| {
                if k.spec.plugin_stale {
                    k.registered
                } else {
                    devices(&s, &k.spec)
                }
            })
            .unwrap_or_default();
        AllocatableResourcesResponse {
            devices: registered
                .into_iter()
                .map(|(resource_name, device_ids)| ContainerDevices {
                    resource_name,
                    device_ids,
                    topology: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn get(&self, namespace: &str, pod: &str) -> Option<PodResources> {
        self.list()
            .pod_resources
            .into_iter()
            .find(|p| p.namespace == namespace && p.name == pod)
    }
}

/// Serves PodResources for the node at `state_path` on a thread of this process (the kernel
/// twin's) until the process ends. A socket left by an earlier twin is replaced; anything else
/// at that path is left alone and the error said.
pub fn serve(state_path: &Path) -> std::io::Result<()> {
    let socket = super::session::kubelet_socket(state_path);
    if let Ok(m) = std::fs::symlink_metadata(&socket) {
        use std::os::unix::fs::FileTypeExt as _;
        if !m.file_type().is_socket() {
            return Err(std::io::Error::other(format!(
                "{} exists and is not a socket: not replaced",
                socket.display()
            )));
        }
        std::fs::remove_file(&socket)?;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let twin = Twin {
        state_path: state_path.to_path_buf(),
    };
    // Bound before the thread starts, so a caller that sees the socket can connect.
    let listener = rt.block_on(async { tokio::net::UnixListener::bind(&socket) })?;
    std::thread::spawn(move || {
        let r = rt.block_on(crate::collect::podresources::serve_on(
            twin,
            listener,
            std::future::pending(),
        ));
        if let Err(e) = r {
            #[expect(clippy::print_stderr, reason = "the twin's log")]
            {
                eprintln!("kubelet twin: {e}");
            }
        }
    });
    Ok(())
}

/// The kubelet twin as a node of a real API server (issue 25, item 4): it registers its Node
/// with the GPU resources its device plugin advertises, marks the pods bound to it running and
/// ready, binds the DaemonSet pods pinned to it (there is no scheduler on a test control
/// plane), and finishes each deletion as a kubelet does once the containers stopped, so a drain
/// really drains. A stale plugin (`plugin_stale`) keeps what it registered until its pod (a pod
/// `domain::k8s_ops::is_device_plugin` knows, as the kubelet knows a plugin by its
/// registration) is restarted.
pub struct NodeAgent {
    client: kube::Client,
    /// The Node's name.
    pub node: String,
    /// What the node's device plugin would register now, per resource.
    pub advertise: std::sync::Arc<dyn Fn() -> BTreeMap<String, i64> + Send + Sync>,
    /// The plugin does not re-register until its pod restarts.
    pub plugin_stale: bool,
    /// Called with (namespace, name) when a pod's deletion is finished: the simulated node
    /// stops the workload that is that pod, as a kubelet stops its containers.
    pub on_gone: Option<OnGone>,
    /// Called for each pod bound to the node that does not run yet: the simulated node admits
    /// it (allocates its GPUs and starts its workload) or says why not. None: every pod is
    /// marked running as it comes.
    pub on_pod: Option<OnPod>,
}

/// What a node agent asks the node of a pod bound to it that does not run yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodAsk {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Its containers' GPU requests: (container, resource, count), limits first as the kubelet
    /// takes a device resource's.
    pub gpus: Vec<(String, String, i64)>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// The node's answer to a pod: it runs, or it stays Pending with the kubelet's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Started (or already running).
    Running,
    /// Not started: `reason` (`OutOfamd.com/gpu`, `UnexpectedAdmissionError`) and message.
    Rejected(String, String),
}

/// What a node agent calls for a pod that does not run yet.
pub type OnPod = std::sync::Arc<dyn Fn(&PodAsk) -> Admission + Send + Sync>;

/// What a node agent calls when a pod's deletion is finished: (namespace, name).
pub type OnGone = std::sync::Arc<dyn Fn(&str, &str) + Send + Sync>;

/// What the simulated node's device plugin registers now, per resource (counts).
pub fn advertised(state_path: &Path) -> BTreeMap<String, i64> {
    let Ok(s) = SimState::load(state_path) else {
        return BTreeMap::new();
    };
    let Some(k) = &s.kubernetes else {
        return BTreeMap::new();
    };
    devices(&s, &k.spec)
        .into_iter()
        .map(|(r, ids)| (r, i64::try_from(ids.len()).unwrap_or(i64::MAX)))
        .collect()
}

/// Stops the simulated node's workload that is the pod `namespace/name` (SIGTERM to its
/// process, whose start time is checked first), as the kubelet stops a deleted pod's
/// containers.
pub fn stop_pod(state_path: &Path, ns: &str, name: &str) {
    let Ok(s) = SimState::load(state_path) else {
        return;
    };
    for (i, w) in s.workloads.iter().enumerate() {
        let (pns, pname, _) = pod_of(w);
        if pname == name
            && pns == ns
            && s.alive(i)
            && let Some(pid) = w.pid.and_then(|p| i32::try_from(p).ok())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

/// What a pod asks of the node: its containers' GPU requests and its labels.
fn ask_of(p: &k8s_openapi::api::core::v1::Pod) -> PodAsk {
    let mut gpus = Vec::new();
    for c in p.spec.iter().flat_map(|s| &s.containers) {
        let r = c.resources.as_ref();
        let asked = r
            .and_then(|r| r.limits.as_ref())
            .or_else(|| r.and_then(|r| r.requests.as_ref()));
        for (k, v) in asked.into_iter().flatten() {
            if crate::domain::cluster::is_gpu_resource(k) {
                let n = v.0.trim().parse::<i64>().unwrap_or(-1);
                gpus.push((c.name.clone(), k.clone(), n));
            }
        }
    }
    PodAsk {
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        gpus,
        labels: p.metadata.labels.clone().unwrap_or_default(),
    }
}

/// A free logical GPU of `resource` for one pod, as the kubelet's admission and the device
/// plugin's Allocate decide: Err with the kubelet's reason when there is none.
fn allocate(s: &SimState, k: &SimKube, resource: &str) -> Result<super::rules::Logical, Admission> {
    let reject = |reason: &str, message: String| Admission::Rejected(reason.into(), message);
    let capacity = if k.spec.plugin_stale {
        k.registered.clone()
    } else {
        devices(s, &k.spec)
    }
    .into_iter()
    .find(|(r, _)| r == resource)
    .map_or(0, |(_, ids)| ids.len());
    let taken: Vec<u32> = (0..s.workloads.len())
        .filter(|i| s.alive(*i))
        .filter_map(|i| s.placement_index(i))
        .collect();
    let of_resource = |i: u32| device_of(s, &k.spec, i).is_some_and(|(r, _, _)| r == resource);
    let used = taken.iter().filter(|i| of_resource(**i)).count();
    // The kubelet's admission: what the plugin advertised against what its pods use.
    if used + 1 > capacity {
        return Err(reject(
            &format!("OutOf{resource}"),
            format!(
                "Pod was rejected: Node didn't have enough resource: {resource}, requested: 1, used: {used}, capacity: {capacity}"
            ),
        ));
    }
    // The plugin's Allocate: a device that exists now (a stale plugin advertises gone ones).
    s.logical()
        .into_iter()
        .find(|l| !taken.contains(&l.index) && of_resource(l.index))
        .ok_or_else(|| {
            reject(
                "UnexpectedAdmissionError",
                format!(
                    "Allocate failed due to requested number of devices unavailable for {resource}. Requested: 1, Available: 0, which is unexpected"
                ),
            )
        })
}

/// The workload that runs pod `ask` on logical GPU `l`: a model server (`vllm serve`) for a
/// KServe InferenceService's pod, else a batch job.
fn pod_workload(
    ask: &PodAsk,
    l: &super::rules::Logical,
    container: &str,
    resource: &str,
) -> super::state::SimWorkload {
    let model = ask
        .labels
        .get(crate::domain::k8s::KSERVE_LABEL)
        .filter(|m| !m.is_empty())
        .cloned();
    let short: String = ask.uid.chars().take(8).collect();
    let spec = super::scenario::WorkloadSpec {
        name: format!("{}-{}-{short}", ask.namespace, ask.name),
        kind: if model.is_some() {
            Kind::ModelServer
        } else {
            Kind::Batch
        },
        gpu: u32::try_from(l.phys).unwrap_or(0),
        partition: l.shape.partition_id,
        vram_gb: 1.0,
        busy: 40.0,
        swing: 10.0,
        comm: Some(if model.is_some() { "vllm" } else { "python3" }.into()),
        model,
        port: 0,
        ignore_sigterm: false,
        metrics: None,
    };
    super::state::SimWorkload {
        spec,
        pid: None,
        start_ticks: None,
        port: 0,
        started_ms: 0,
        pod: Some(SimPod {
            namespace: ask.namespace.clone(),
            name: ask.name.clone(),
            uid: ask.uid.clone(),
            container: container.to_string(),
            resource: resource.to_string(),
        }),
    }
}

/// The simulated node admits `ask` as a kubelet with AMD's device plugin does: a pod that
/// asks for no GPU runs (there is no process for it); one that asks for one GPU of a resource
/// the node advertises gets a free logical GPU of it (the device the plugin would hand out)
/// and a REAL process, the node's workload, started on it; a pod of a KServe
/// InferenceService runs as a model server (`vllm serve`). Already started: Running again.
/// No free GPU: `OutOf<resource>` with the kubelet's message (or `UnexpectedAdmissionError`
/// where the plugin advertises devices that are gone).
pub fn admit(state_path: &Path, ask: &PodAsk) -> Admission {
    let reject = |reason: &str, message: String| Admission::Rejected(reason.into(), message);
    let Ok(now) = SimState::load(state_path) else {
        return reject(
            "UnexpectedAdmissionError",
            "the simulated node's state is unreadable".into(),
        );
    };
    let started = |s: &SimState| {
        s.workloads.iter().enumerate().any(|(i, w)| {
            s.alive(i) && w.pod.as_ref().is_some_and(|p| p.uid == ask.uid)
                || (w.pod.is_none()
                    && s.alive(i)
                    && pod_of(w).0 == ask.namespace
                    && pod_of(w).1 == ask.name)
        })
    };
    if started(&now) || ask.gpus.is_empty() {
        return Admission::Running;
    }
    let [(container_name, resource, count)] = ask.gpus.as_slice() else {
        return reject(
            "UnexpectedAdmissionError",
            format!(
                "the simulated node runs a pod on one logical GPU of one container; this one asks for {} GPU resources",
                ask.gpus.len()
            ),
        );
    };
    if *count != 1 {
        return reject(
            "UnexpectedAdmissionError",
            format!(
                "the simulated node runs a pod on one logical GPU; this one asks for {count} of {resource}"
            ),
        );
    }
    let r = SimState::update(state_path, |s| {
        if started(s) {
            return Ok(Admission::Running);
        }
        let Some(k) = s.kubernetes.clone() else {
            return Ok(reject(
                "UnexpectedAdmissionError",
                "not a Kubernetes node".into(),
            ));
        };
        let l = match allocate(s, &k, resource) {
            Ok(l) => l,
            Err(a) => return Ok(a),
        };
        // The pods of this node that ended leave the state (their GPUs were freed at their end).
        let dead: Vec<usize> = (0..s.workloads.len())
            .filter(|i| s.workloads[*i].pod.is_some() && !s.alive(*i))
            .collect();
        for i in dead.into_iter().rev() {
            s.workloads.remove(i);
        }
        s.workloads
            .push(pod_workload(ask, &l, container_name, resource));
        // Saved before the process starts: it finds itself in the state by name.
        s.save(state_path)?;
        let i = s.workloads.len() - 1;
        Ok(match super::session::launch(s, i, state_path) {
            Ok(()) => Admission::Running,
            Err(e) => reject("UnexpectedAdmissionError", e.to_string()),
        })
    });
    r.unwrap_or_else(|e| reject("UnexpectedAdmissionError", e.to_string()))
}

/// Runs the simulated node's agent in the API server its state names (`sim start
/// --kubernetes --kubeconfig F`), on a thread of the kernel twin's process until it ends: the
/// Node registered with what the plugin advertises, pods bound to it admitted as workloads,
/// deletions finished by stopping them.
///
/// # Errors
/// No API server named, or the client cannot be made (said in the twin's log).
pub fn join(state_path: &Path) -> Result<(), String> {
    let s = SimState::load(state_path).map_err(|e| e.to_string())?;
    let Some(k) = s.kubernetes else {
        return Err("not a Kubernetes node".into());
    };
    let Some(api) = k.api.clone() else {
        return Err("no API server to join".into());
    };
    let node = k.node_name();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let client = rt.block_on(crate::collect::cluster::client(&api.target()))?;
    let st = state_path.to_path_buf();
    let mut agent = NodeAgent::new(
        client,
        &node,
        std::sync::Arc::new(move || advertised(&st)),
        k.spec.plugin_stale,
    );
    let st = state_path.to_path_buf();
    agent.on_gone = Some(std::sync::Arc::new(move |ns: &str, name: &str| {
        stop_pod(&st, ns, name);
    }));
    let st = state_path.to_path_buf();
    agent.on_pod = Some(std::sync::Arc::new(move |ask: &PodAsk| admit(&st, ask)));
    std::thread::spawn(move || rt.block_on(agent.run()));
    Ok(())
}

/// The taint of a node that is not ready.
const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// The node a pending pod's required affinity pins it to (a DaemonSet's pods are pinned so).
fn pinned_node(p: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let terms = &p
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_fields.iter().flatten().find_map(|f| {
            (f.key == "metadata.name" && f.operator == "In")
                .then(|| f.values.as_ref()?.first().cloned())
                .flatten()
        })
    })
}

impl NodeAgent {
    /// An agent for `node` through `client`.
    pub fn new(
        client: kube::Client,
        node: &str,
        advertise: std::sync::Arc<dyn Fn() -> BTreeMap<String, i64> + Send + Sync>,
        plugin_stale: bool,
    ) -> Self {
        Self {
            client,
            node: node.to_string(),
            advertise,
            plugin_stale,
            on_gone: None,
            on_pod: None,
        }
    }

    /// Runs until the task is dropped; each round's trouble is printed once per change of words.
    pub async fn run(self) {
        let mut registered = (self.advertise)();
        let mut plugin_uids: Option<Vec<String>> = None;
        let mut last = String::new();
        loop {
            let r = self.round(&mut registered, &mut plugin_uids).await;
            let words = r.err().unwrap_or_default();
            if words != last && !words.is_empty() {
                #[expect(clippy::print_stderr, reason = "the twin's log")]
                {
                    eprintln!("kubelet twin {}: {words}", self.node);
                }
            }
            last = words;
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    async fn round(
        &self,
        registered: &mut BTreeMap<String, i64>,
        plugin_uids: &mut Option<Vec<String>>,
    ) -> Result<(), String> {
        use k8s_openapi::api::core::v1::{Node, Pod};
        use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
        let nodes: Api<Node> = Api::all(self.client.clone());
        let pods: Api<Pod> = Api::all(self.client.clone());
        if nodes
            .get_opt(&self.node)
            .await
            .map_err(|e| e.to_string())?
            .is_none()
        {
            let n: Node = serde_json::from_value(serde_json::json!({
                "metadata": {"name": self.node, "labels": {"kubernetes.io/hostname": self.node}},
            }))
            .map_err(|e| e.to_string())?;
            nodes
                .create(&PostParams::default(), &n)
                .await
                .map_err(|e| e.to_string())?;
        }
        let on_node = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={}", self.node)))
            .await
            .map_err(|e| e.to_string())?
            .items;
        // The plugin registers at start and again whenever its pod is replaced.
        let mut uids: Vec<String> = on_node
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && crate::collect::cluster::is_device_plugin(p)
            })
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        uids.sort();
        if !self.plugin_stale || plugin_uids.as_ref().is_some_and(|u| *u != uids) {
            *registered = (self.advertise)();
        }
        *plugin_uids = Some(uids);
        let mut res = serde_json::Map::new();
        for (k, v) in registered.iter() {
            res.insert(k.clone(), serde_json::json!(v.to_string()));
        }
        res.insert("pods".into(), serde_json::json!("110"));
        let status = serde_json::json!({"status": {
            "capacity": res, "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "partop's kubelet twin"}],
        }});
        let node = nodes
            .patch_status(&self.node, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| e.to_string())?;
        // The API server taints a new node not-ready (TaintNodesByCondition); the node
        // lifecycle controller lifts it once the node says Ready, as the twin's does. None
        // runs beside a test control plane, so the twin lifts it itself.
        let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
        if taints.iter().any(|t| t.key == NOT_READY) {
            let kept: Vec<_> = taints.into_iter().filter(|t| t.key != NOT_READY).collect();
            let patch = serde_json::json!({"spec": {"taints": kept}});
            nodes
                .patch(&self.node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| e.to_string())?;
        }
        for p in &on_node {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let name = p.metadata.name.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            if p.metadata.deletion_timestamp.is_some() {
                // The containers stopped: the kubelet removes the pod for good.
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(kube::api::Preconditions {
                        uid: p.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                if let Some(f) = &self.on_gone {
                    f(&ns, &name);
                }
                let _ = api.delete(&name, &dp).await;
                continue;
            }
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if !ready {
                let admission = self
                    .on_pod
                    .as_ref()
                    .map_or(Admission::Running, |f| f(&ask_of(p)));
                let st = match &admission {
                    Admission::Running => serde_json::json!({"status": {
                        "phase": "Running",
                        "reason": null, "message": null,
                        "conditions": [
                            {"type": "Ready", "status": "True"},
                            {"type": "ContainersReady", "status": "True"},
                        ],
                    }}),
                    Admission::Rejected(reason, message) => {
                        let said = p.status.as_ref().and_then(|s| s.reason.as_deref());
                        if said == Some(reason.as_str()) {
                            continue;
                        }
                        // The kubelet's words; the pod stays Pending, so it starts once a GPU
                        // is free (a real kubelet fails it: see docs/kubernetes.md).
                        serde_json::json!({"status": {
                            "phase": "Pending",
                            "reason": reason, "message": message,
                            "conditions": [
                                {"type": "Ready", "status": "False", "reason": reason},
                            ],
                        }})
                    }
                };
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&st))
                    .await
                    .map_err(|e| format!("{ns}/{name}: {e}"))?;
            }
        }
        let pending = pods
            .list(&ListParams::default().fields("spec.nodeName="))
            .await
            .map_err(|e| e.to_string())?
            .items;
        for p in pending
            .iter()
            .filter(|p| pinned_node(p).as_deref() == Some(self.node.as_str()))
        {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let name = p.metadata.name.clone().unwrap_or_default();
            let body = serde_json::json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": ns},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}});
            let req = http::Request::post(format!("/api/v1/namespaces/{ns}/pods/{name}/binding"))
                .header("Content-Type", "application/json")
                .body(body.to_string().into_bytes())
                .map_err(|e| e.to_string())?;
            let _ = self.client.request_text(req).await;
        }
        Ok(())
    }
}
