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
