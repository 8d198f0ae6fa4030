//! The kubelet enricher of `collect::pipeline`: after the /proc enrichers (each holder's pod UID
//! is known), PodResources `List` and `GetAllocatableResources` are read over the kubelet's
//! socket, each call bounded, and `domain::k8s::join` names the pods of each logical GPU and
//! holder. No socket: nothing is said and no column appears. A socket that refuses, hangs or
//! answers garbage is said once in the log and shown as the `kubelet` source's health; the last
//! good answer is kept (stale) and the rest of the sample is unaffected.

use crate::collect::podresources::{self, CallError, Client};
use crate::domain::k8s::{Allocation, Device, DeviceNames, PodResources};
use crate::domain::snapshot::{Health, Snapshot, SourceStatus};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Each call's limit: the kubelet answers in milliseconds; a tick never waits longer.
pub const CALL_LIMIT: Duration = Duration::from_millis(800);

/// After a failure (other than no socket), the socket is tried again this much later, so a
/// hung kubelet costs one limit per this interval, not one per tick.
pub const RETRY_AFTER: Duration = Duration::from_secs(15);

/// The source's name in the header and the JSON.
pub const SOURCE: &str = "kubelet";

/// The kubelet enricher's state between samples.
#[derive(Debug)]
pub struct Kubelet {
    client: Client,
    /// `/sys`, where each render node's device name is read.
    pub sys_root: PathBuf,
    last_good: Option<(PodResources, u64)>,
    /// The error last said, so a lasting one is said once.
    said: Option<String>,
    retry_at: Option<Instant>,
    names: (Vec<String>, DeviceNames),
    /// Where the node's API server is (default: as kubectl finds it).
    pub cluster: crate::collect::cluster::Target,
    /// The node's name where it is not `$NODE_NAME` or the host name (the simulated node's).
    pub node_name: Option<String>,
    api: Option<crate::collect::kube_node::ApiNode>,
}

impl Kubelet {
    /// The enricher over the socket at `socket`, the kernel's tree at `sys_root`.
    pub fn new(socket: impl Into<PathBuf>, sys_root: impl Into<PathBuf>) -> Self {
        Self {
            client: Client::new(socket, CALL_LIMIT),
            sys_root: sys_root.into(),
            last_good: None,
            said: None,
            retry_at: None,
            names: (Vec::new(), DeviceNames::new()),
            cluster: crate::collect::cluster::Target::default(),
            node_name: None,
            api: None,
        }
    }

    /// The node's kubelet.
    pub fn host() -> Self {
        Self::new(podresources::KUBELET_SOCKET, "/sys")
    }

    /// The socket read.
    pub fn socket(&self) -> &std::path::Path {
        &self.client.socket
    }

    /// Reads the kubelet and joins its answer into `snap`; on a Kubernetes node (the kubelet
    /// answered), adds what the API server says of the node and its serving pods.
    pub async fn enrich(&mut self, snap: &mut Snapshot) {
        self.enrich_kubelet(snap).await;
        if snap.kubelet.is_some() {
            self.enrich_cluster(snap).await;
        }
    }

    /// The node's object (its DCM profile) and the models its pods serve, from the API server
    /// (`collect::kube_node`): the last answer, never waited for after the first.
    async fn enrich_cluster(&mut self, snap: &mut Snapshot) {
        let api = self.api.get_or_insert_with(|| {
            crate::collect::kube_node::ApiNode::new(
                self.cluster.clone(),
                crate::collect::kube_node::node_name(self.node_name.as_deref()),
            )
        });
        let a = api.latest().await;
        let models = crate::domain::k8s::serving_models(&a.pods, &api.name, snap);
        crate::domain::k8s::name_unallocated(snap, &a.node_pods);
        crate::domain::k8s::add_priority_classes(snap, &a.node_pods);
        if let Some(k) = snap.kubelet.as_mut() {
            // The node's name is known whether or not the API server answered, so a plan
            // names the same node either way; its DCM labels only where it answered.
            k.node = Some(a.node.unwrap_or_else(|| crate::domain::snapshot::KubeNode {
                name: api.name.clone(),
                ..Default::default()
            }));
            k.models = models;
        }
    }

    async fn enrich_kubelet(&mut self, snap: &mut Snapshot) {
        if self.retry_at.is_some_and(|t| Instant::now() < t) {
            self.join_last(snap, None);
            return;
        }
        let started = Instant::now();
        match self.read().await {
            Ok(pr) => {
                if self.said.take().is_some() {
                    log::info!("kubelet: {} answers again", self.client.socket.display());
                }
                self.retry_at = None;
                let at = crate::collect::clock::now_ms();
                self.last_good = Some((pr, at));
                let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                self.join_last(snap, Some(took));
            }
            Err(CallError::Absent(_)) => {
                // Not a Kubernetes node (or its kubelet is gone): no pods, no noise.
                self.said = None;
                self.last_good = None;
                self.retry_at = Some(Instant::now() + RETRY_AFTER);
            }
            Err(e) => {
                let text = e.to_string();
                if self.said.as_deref() != Some(text.as_str()) {
                    log::warn!("kubelet: {text}; pods are not shown until it answers");
                    self.said = Some(text.clone());
                }
                self.retry_at = Some(Instant::now() + RETRY_AFTER);
                self.join_last(snap, None);
            }
        }
    }

    /// Joins the last good answer (marked stale when `took` is None) and says the source.
    fn join_last(&mut self, snap: &mut Snapshot, took: Option<u64>) {
        let Some((pr, at)) = &self.last_good else {
            if let Some(e) = &self.said {
                snap.sources
                    .push(SourceStatus::down(SOURCE, Some(e.clone())));
            }
            return;
        };
        let names = device_names(&self.sys_root, snap, &mut self.names);
        crate::domain::k8s::join(snap, pr, names);
        let mut status = SourceStatus::down(SOURCE, self.said.clone());
        status.status = if took.is_some() && self.said.is_none() {
            Health::Ok
        } else {
            Health::Stale
        };
        status.last_ok_ms = Some(*at);
        status.took_ms = took;
        snap.sources.push(status);
    }

    async fn read(&self) -> Result<PodResources, CallError> {
        let list = self.client.list().await?;
        // A kubelet without the allocatable call (an old one, or a feature gate off) still
        // names the pods; the device-plugin check needs it and says so where it is absent.
        let allocatable = match self.client.allocatable().await {
            Ok(a) => Some(allocatable(&a)),
            Err(CallError::Bad(_, e)) => {
                log::debug!("kubelet: GetAllocatableResources: {e}");
                None
            }
            Err(e) => return Err(e),
        };
        Ok(PodResources {
            allocations: allocations(&list),
            allocatable,
            source: self.client.socket.display().to_string(),
        })
    }
}

/// The answer of `List` as the domain's allocations.
pub fn allocations(list: &podresources::ListPodResourcesResponse) -> Vec<Allocation> {
    let mut out = Vec::new();
    for pod in &list.pod_resources {
        for c in &pod.containers {
            let at = |device| Allocation {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                container: c.name.clone(),
                device,
            };
            for d in &c.devices {
                for id in &d.device_ids {
                    out.push(at(Device::Plugin {
                        resource: d.resource_name.clone(),
                        id: id.clone(),
                    }));
                }
            }
            for dr in &c.dynamic_resources {
                for r in &dr.claim_resources {
                    out.push(at(Device::Dra {
                        driver: r.driver_name.clone(),
                        device: r.device_name.clone(),
                        claim: format!("{}/{}", dr.claim_namespace, dr.claim_name),
                    }));
                }
            }
        }
    }
    out
}

/// The answer of `GetAllocatableResources`: device ids per resource.
pub fn allocatable(
    a: &podresources::AllocatableResourcesResponse,
) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in &a.devices {
        out.entry(d.resource_name.clone())
            .or_default()
            .extend(d.device_ids.iter().cloned());
    }
    for ids in out.values_mut() {
        ids.sort();
        ids.dedup();
    }
    out
}

/// Each render node's device name in the kernel's tree (`class/drm/renderDN/device`'s target:
/// the PCI BDF or the platform device `amdgpu_xcp_N`), read again only when the render nodes
/// change.
fn device_names<'a>(
    sys: &std::path::Path,
    snap: &Snapshot,
    cache: &'a mut (Vec<String>, DeviceNames),
) -> &'a DeviceNames {
    let renders: Vec<String> = snap
        .gpus
        .iter()
        .flat_map(|g| &g.partitions)
        .filter_map(|l| l.render_node.clone())
        .collect();
    if cache.0 != renders {
        cache.1 = renders
            .iter()
            .filter(|r| r.starts_with("renderD") && !r.contains('/'))
            .filter_map(|r| {
                let dev =
                    crate::collect::sysfs::collector::follow(sys, &format!("class/drm/{r}/device"));
                let name = dev.file_name()?.to_str()?.to_string();
                (name != "device").then(|| (r.clone(), name))
            })
            .collect();
        cache.0 = renders;
    }
    &cache.1
}
