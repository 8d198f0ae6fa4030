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
}

/// The kubelet twin's state in the node's state file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimKube {
    /// What the scenario asked for.
    pub spec: KubeSpec,
    /// The devices the plugin registered (per resource), where it does not re-register.
    #[serde(default)]
    pub registered: Vec<(String, Vec<String>)>,
}

impl SimKube {
    /// The twin for `spec` on the node `state` is now.
    pub fn new(spec: KubeSpec, state: &SimState) -> Self {
        let registered = if spec.plugin_stale {
            devices(state, &spec)
        } else {
            Vec::new()
        };
        Self { spec, registered }
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
        let mut c = ContainerResources {
            name: container(w.spec.kind).to_string(),
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
            name: w.spec.name.clone(),
            namespace: namespace(w.spec.kind).to_string(),
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
/// really drains. A stale plugin (`plugin_stale`) keeps what it registered until its pod
/// (`plugin_labels`) is restarted.
pub struct NodeAgent {
    client: kube::Client,
    /// The Node's name.
    pub node: String,
    /// What the node's device plugin would register now, per resource.
    pub advertise: std::sync::Arc<dyn Fn() -> BTreeMap<String, i64> + Send + Sync>,
    /// The plugin does not re-register until its pod restarts.
    pub plugin_stale: bool,
    /// The device-plugin pods' labels (`k=v,…`).
    pub plugin_labels: String,
    /// Called with (namespace, name) when a pod's deletion is finished: the simulated node
    /// stops the workload that is that pod, as a kubelet stops its containers.
    pub on_gone: Option<OnGone>,
}

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
        if w.spec.name == name
            && namespace(w.spec.kind) == ns
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

/// The taint of a node that is not ready.
const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// Whether `labels` carry every `k=v` of `want`.
fn has_labels(labels: Option<&BTreeMap<String, String>>, want: &str) -> bool {
    want.split(',').filter(|kv| !kv.is_empty()).all(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        labels.and_then(|l| l.get(k)).is_some_and(|x| x == v)
    })
}

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
            plugin_labels: crate::domain::k8s_ops::PLUGIN_LABELS.to_string(),
            on_gone: None,
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
                    && has_labels(p.metadata.labels.as_ref(), &self.plugin_labels)
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
                let st = serde_json::json!({"status": {
                    "phase": "Running",
                    "conditions": [
                        {"type": "Ready", "status": "True"},
                        {"type": "ContainersReady", "status": "True"},
                    ],
                }});
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
