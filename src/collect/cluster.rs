//! The cluster's GPU nodes and the pods that ask for GPUs, read from the Kubernetes API by
//! watch (kube-rs reflectors: one list, then changes; never a poll), reduced to the pure
//! `domain::cluster` facts the fleet shows. Every call is bounded; a verb the API server
//! refuses is said with the verb and resource the ClusterRole must grant.

use crate::domain::cluster::{ClusterNode, GpuPod, is_gpu_resource};
use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the cluster is, as kubectl takes it.
#[derive(Clone, Debug, Default)]
pub struct Target {
    /// A kubeconfig file (default: `$KUBECONFIG`, `~/.kube/config`, else in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// A context of it (default: its current context).
    pub context: Option<String>,
    /// Only nodes with these labels (`key=value,…`, as `kubectl -l`).
    pub selector: Option<String>,
}

/// How long a first answer may take before the cluster is called unreachable.
pub const CONNECT: Duration = Duration::from_secs(10);

/// A client for `t`.
pub async fn client(t: &Target) -> Result<kube::Client, String> {
    kube::Client::try_from(config(t).await?).map_err(|e| format!("Kubernetes client: {e}"))
}

/// The connection settings for `t`, bounded.
pub async fn config(t: &Target) -> Result<kube::Config, String> {
    let opts = kube::config::KubeConfigOptions {
        context: t.context.clone(),
        ..Default::default()
    };
    let config = match &t.kubeconfig {
        Some(p) => {
            // The bounded reader: a FIFO or a device named by mistake is refused, never read
            // for ever (kube's own reader would block on either).
            let text = crate::collect::small_file::operator_text(p)
                .map_err(|e| format!("kubeconfig {}: {e}", p.display()))?;
            let kc = kube::config::Kubeconfig::from_yaml(&text)
                .map_err(|e| format!("kubeconfig {}: {e}", p.display()))?;
            // A context it does not have is said as such, with those it has (kube-rs calls it
            // "failed to load current context").
            if let Some(c) = &t.context
                && !kc.contexts.iter().any(|n| &n.name == c)
            {
                let have: Vec<String> = kc
                    .contexts
                    .iter()
                    .map(|n| crate::domain::text::escape_controls(&n.name).into_owned())
                    .collect();
                return Err(format!(
                    "kubeconfig {} has no context {} (it has: {})",
                    p.display(),
                    crate::domain::text::escape_controls(c),
                    if have.is_empty() {
                        "none".into()
                    } else {
                        have.join(", ")
                    }
                ));
            }
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", p.display()))?
        }
        None if t.context.is_some() => kube::Config::from_kubeconfig(&opts)
            .await
            .map_err(|e| format!("kubeconfig: {e}"))?,
        None => kube::Config::infer().await.map_err(|e| {
            format!("no cluster found (KUBECONFIG, ~/.kube/config, in-cluster): {e}")
        })?,
    };
    let mut config = config;
    config.connect_timeout = Some(CONNECT);
    config.read_timeout = Some(Duration::from_secs(300));
    Ok(config)
}

/// What the watch has seen so far, and what went wrong last (said once per kind of trouble).
pub struct Watch {
    nodes: Store<Node>,
    pods: Store<Pod>,
    trouble: Arc<Mutex<Option<String>>>,
    /// Bumped on every watch event (a node or pod added, changed or gone, a relist, an
    /// error): what the live view waits on instead of polling the stores.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
    /// The client the watches use (a node's live detail goes through it too).
    client: kube::Client,
}

/// How a failed connection is said (and recognised: it ends the first wait at once).
const UNREACHABLE: &str = "cannot connect to the API server (refused or unreachable)";

/// Names a watch error for an operator: a refused verb becomes the RBAC rule to add.
fn explain(kind: &str, e: &watcher::Error) -> String {
    let text = e.to_string();
    if text.contains("(Connect)") {
        format!("{UNREACHABLE} to list {kind}: {text}")
    } else if text.contains("403") || text.to_lowercase().contains("forbidden") {
        format!(
            "the API server refused to list/watch {kind}: the ClusterRole needs get, list, watch on {kind} (deploy/kubernetes/partop.yaml, partop-fleet-view); {text}"
        )
    } else {
        format!("watching {kind}: {text}")
    }
}

/// Starts the watches (nodes by `t.selector`, every pod) on the current tokio runtime.
pub fn start(client: kube::Client, t: &Target) -> Watch {
    let trouble = Arc::new(Mutex::new(None));
    let changes = Arc::new(tokio::sync::watch::Sender::new(0u64));
    let mut nc = watcher::Config::default();
    if let Some(s) = &t.selector {
        nc = nc.labels(s);
    }
    let (nodes, w) = reflector::store();
    let tr = Arc::clone(&trouble);
    let ch = Arc::clone(&changes);
    let stream = reflector::reflector(
        w,
        watcher(kube::Api::<Node>::all(client.clone()), nc).default_backoff(),
    );
    tokio::spawn(async move {
        let mut s = std::pin::pin!(stream);
        while let Some(ev) = s.next().await {
            {
                let mut t = tr.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                *t = ev.err().map(|e| explain("nodes", &e));
            }
            ch.send_modify(|n| *n = n.wrapping_add(1));
        }
    });
    let (pods, w) = reflector::store();
    let tr = Arc::clone(&trouble);
    let ch = Arc::clone(&changes);
    let stream = reflector::reflector(
        w,
        watcher(
            kube::Api::<Pod>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff(),
    );
    tokio::spawn(async move {
        let mut s = std::pin::pin!(stream);
        while let Some(ev) = s.next().await {
            if let Err(e) = ev {
                let mut t = tr.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                *t = Some(explain("pods", &e));
            }
            ch.send_modify(|n| *n = n.wrapping_add(1));
        }
    });
    Watch {
        nodes,
        pods,
        trouble,
        changes,
        client,
    }
}

impl Watch {
    /// Waits (at most `limit`) for both first lists; Err with the reason when they did not come.
    pub async fn ready(&self, limit: Duration) -> Result<(), String> {
        let both = async {
            let _ = self.nodes.wait_until_ready().await;
            let _ = self.pods.wait_until_ready().await;
        };
        // A refusal does not go away by waiting: said at once, not after the limit.
        let refused = async {
            loop {
                // A refused verb, or a server that refused the connection: neither goes away
                // by waiting.
                if let Some(t) = self.trouble().filter(|t| t.contains("refused")) {
                    return t;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::select! {
            r = tokio::time::timeout(limit, both) => match r {
                Ok(()) => Ok(()),
                Err(_) => Err(self.trouble().unwrap_or_else(|| {
                    format!("no answer from the API server in {}s", limit.as_secs())
                })),
            },
            t = refused => Err(t),
        }
    }

    /// A receiver that wakes on every watch event (its value: how many so far). The live
    /// view rereads [`Watch::view`] when it changes, coalesced to its frame rate.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The pod of the `partop-serve` DaemonSet on `node` (namespace, name), as the watch saw
    /// it: a running one first.
    pub fn serve_pod(&self, node: &str) -> Option<(String, String)> {
        let mut found: Vec<(bool, String, String)> = self
            .pods
            .state()
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                    && p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(SERVE_LABEL.0))
                        .is_some_and(|v| v == SERVE_LABEL.1)
            })
            .map(|p| {
                let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                (
                    !running,
                    p.metadata.namespace.clone().unwrap_or_default(),
                    p.metadata.name.clone().unwrap_or_default(),
                )
            })
            .collect();
        found.sort();
        found.into_iter().next().map(|(_, ns, n)| (ns, n))
    }

    /// `node`'s live detail: its `partop serve`'s `/snapshot` through the API server's pod
    /// proxy (no ssh, no port opened to this machine), reduced to the fleet's row
    /// ([`crate::collect::fleet::parse_line`]: checked and escaped as any node's document).
    ///
    /// # Errors
    /// No `partop-serve` pod on the node, the proxy refused (the verb named), or the node's
    /// answer did not come in time or is not a snapshot.
    pub async fn live(&self, node: &str) -> Result<crate::domain::fleet::NodeSummary, String> {
        let (ns, pod) = self.serve_pod(node).ok_or_else(|| {
            format!(
                "no {}={} pod on {node}: the partop-serve DaemonSet (deploy/kubernetes/partop.yaml) does not run there",
                SERVE_LABEL.0, SERVE_LABEL.1
            )
        })?;
        let body = proxy_get(&self.client, &ns, &pod, SERVE_PORT, "/snapshot").await?;
        crate::collect::fleet::parse_line(&body)
            .map_err(|e| format!("{ns}/{pod}: its /snapshot is not a partop snapshot: {e}"))
    }

    /// The last trouble, if the watches have not recovered since.
    pub fn trouble(&self) -> Option<String> {
        self.trouble
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The nodes with GPU resources and the pods that ask for GPUs, as last seen.
    pub fn view(&self) -> (Vec<ClusterNode>, Vec<GpuPod>) {
        let mut nodes: Vec<ClusterNode> = self.nodes.state().iter().map(|n| node_of(n)).collect();
        nodes.retain(|n| !n.capacity.is_empty());
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let mut pods: Vec<GpuPod> = self.pods.state().iter().filter_map(|p| pod_of(p)).collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        (nodes, pods)
    }
}

/// A quantity's count (`8`, `8k` never occurs for devices): out of range or unparsable is 0,
/// which the signals then name.
fn count(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> i64 {
    q.0.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| (0..=1_000_000).contains(n))
        .unwrap_or(0)
}

fn gpu_quantities(
    m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> BTreeMap<String, i64> {
    m.into_iter()
        .flatten()
        .filter(|(k, _)| is_gpu_resource(k))
        .map(|(k, v)| (k.clone(), count(v)))
        .collect()
}

/// A Node's facts.
pub fn node_of(n: &Node) -> ClusterNode {
    let status = n.status.as_ref();
    let spec = n.spec.as_ref();
    ClusterNode {
        name: n.metadata.name.clone().unwrap_or_default(),
        labels: n.metadata.labels.clone().unwrap_or_default(),
        capacity: gpu_quantities(status.and_then(|s| s.capacity.as_ref())),
        allocatable: gpu_quantities(status.and_then(|s| s.allocatable.as_ref())),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        taints: spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .map(|t| {
                format!(
                    "{}{}:{}",
                    t.key,
                    t.value
                        .as_deref()
                        .map(|v| format!("={v}"))
                        .unwrap_or_default(),
                    t.effect
                )
            })
            .collect(),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status == "True"),
        state_written: state_written(n),
    }
}

/// For each partition manager's state label on the node, the newest time a writer that owns it
/// wrote the node (its managedFields entry: the API server records, per field manager, the
/// fields it set and when it last wrote).
fn state_written(n: &Node) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for label in [
        crate::domain::cluster::DCM_STATE,
        crate::domain::cluster::MIG_STATE,
    ] {
        let key = format!("f:{label}");
        let newest = n
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| {
                m.fields_v1
                    .as_ref()
                    .and_then(|f| f.0.pointer("/f:metadata/f:labels"))
                    .and_then(serde_json::Value::as_object)
                    .is_some_and(|l| l.contains_key(&key))
            })
            .filter_map(|m| m.time.as_ref().map(|t| t.0))
            .max();
        if let Some(t) = newest {
            out.insert(label.to_string(), t.to_string());
        }
    }
    out
}

/// Whether the pod is a device plugin (`domain::k8s_ops::is_device_plugin`: its labels and
/// the host paths it mounts).
pub fn is_device_plugin(p: &Pod) -> bool {
    let empty = BTreeMap::new();
    let spec = p.spec.as_ref();
    let host_paths: Vec<&str> = spec
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| v.host_path.as_ref().map(|h| h.path.as_str()))
        .collect();
    let mut names: Vec<&str> = [&p.metadata.namespace, &p.metadata.name]
        .into_iter()
        .filter_map(|n| n.as_deref())
        .collect();
    names.extend(
        spec.into_iter()
            .flat_map(|s| s.containers.iter())
            .filter_map(|c| c.image.as_deref()),
    );
    crate::domain::k8s_ops::is_device_plugin(&crate::domain::k8s_ops::PluginPod {
        labels: p.metadata.labels.as_ref().unwrap_or(&empty),
        host_paths,
        names,
    })
}

/// A Pod's GPU requests (None: it asks for no GPU).
pub fn pod_of(p: &Pod) -> Option<GpuPod> {
    let mut requests: BTreeMap<String, i64> = BTreeMap::new();
    for c in p
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
    {
        let r = c.resources.as_ref();
        // A device resource's request equals its limit; either may be the one given.
        let asked = r
            .and_then(|r| r.limits.as_ref())
            .or_else(|| r.and_then(|r| r.requests.as_ref()));
        for (k, v) in gpu_quantities(asked) {
            *requests.entry(k).or_default() += v;
        }
    }
    if requests.is_empty() {
        return None;
    }
    Some(GpuPod {
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
        phase: p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".into()),
        requests,
    })
}

/// The pods of the `partop-serve` DaemonSet carry this label (deploy/kubernetes/partop.yaml).
pub const SERVE_LABEL: (&str, &str) = ("app.kubernetes.io/name", "partop-serve");
/// The port `partop serve` listens on in the DaemonSet.
pub const SERVE_PORT: u16 = 9477;
/// The most a node's document may be through the proxy (a large node's snapshot is far less).
const PROXY_LIMIT: usize = 16 << 20;
/// How long a node's answer through the proxy may take.
pub const PROXY_TIMEOUT: Duration = Duration::from_secs(10);

/// GET `path` of `pod`'s `port` through the API server's pod proxy
/// (`/api/v1/namespaces/NS/pods/NAME:PORT/proxy/PATH`), bounded in time and size. The API
/// server connects to the pod's IP itself (it refuses one that is not a global unicast
/// address: "address not allowed"); the caller needs `get` on `pods/proxy`.
///
/// # Errors
/// The proxy's refusal or the pod's error, said with the pod and what to do.
pub async fn proxy_get(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    port: u16,
    path: &str,
) -> Result<String, String> {
    use http_body_util::BodyExt as _;
    let url = format!("/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy{path}");
    let req = http::Request::get(&url)
        .body(kube::client::Body::from(Vec::new()))
        .map_err(|e| format!("{url}: {e}"))?;
    let read = async {
        let resp = client
            .send(req)
            .await
            .map_err(|e| format!("{ns}/{pod}: the API server's pod proxy: {e}"))?;
        let status = resp.status();
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(f) = body.frame().await {
            let f = f.map_err(|e| format!("{ns}/{pod}: reading through the proxy: {e}"))?;
            if let Some(d) = f.data_ref() {
                if buf.len() + d.len() > PROXY_LIMIT {
                    return Err(format!(
                        "{ns}/{pod}: its answer passed {} MiB through the proxy; not read further",
                        PROXY_LIMIT >> 20
                    ));
                }
                buf.extend_from_slice(d);
            }
        }
        Ok((status, String::from_utf8_lossy(&buf).into_owned()))
    };
    let (status, text) = tokio::time::timeout(PROXY_TIMEOUT, read)
        .await
        .map_err(|_| {
            format!(
                "{ns}/{pod}: no answer through the API server's pod proxy in {}s",
                PROXY_TIMEOUT.as_secs()
            )
        })??;
    let said: String = text.trim().chars().take(300).collect();
    match status.as_u16() {
        200 => Ok(text),
        403 => Err(format!(
            "the API server refused get on pods/proxy for {ns}/{pod}: the ClusterRole needs it (partop-fleet-view, deploy/kubernetes/partop.yaml); {said}"
        )),
        code => Err(format!(
            "{ns}/{pod}: its partop serve did not answer through the API server's pod proxy (HTTP {code}): {said}"
        )),
    }
}

/// The names a Prometheus fleet row goes by: its `instance`'s host and the node's own
/// `hostname` (the row says `INSTANCE (HOSTNAME)` when they differ).
fn prometheus_names(host: &str) -> impl Iterator<Item = &str> {
    let (instance, own) = host
        .strip_suffix(')')
        .and_then(|h| h.rsplit_once(" ("))
        .unwrap_or((host, host));
    let instance = instance.rsplit_once(':').map_or(instance, |(h, _)| h);
    [instance, own].into_iter()
}

/// `node`'s live detail from Prometheus (the DaemonSet scraped by it): the fleet's row whose
/// hostname (or instance's host) is the node's name ([`crate::collect::fleet_prometheus::read`], blocking, bounded by
/// `timeout`). A node's name is matched whole, or as the short name of a qualified host.
///
/// # Errors
/// Prometheus cannot be read, or has no series of that node.
pub fn live_from_prometheus(
    url: &str,
    node: &str,
    timeout: Duration,
) -> Result<crate::domain::fleet::NodeSummary, String> {
    let rows = crate::collect::fleet_prometheus::read(url, timeout)?;
    let n = rows.len();
    rows.into_iter()
        .find(|r| prometheus_names(&r.host).any(|h| h == node || h.split('.').next() == Some(node)))
        .ok_or_else(|| {
            format!(
                "Prometheus {url} has no series of {node} (of {n} hosts): its partop serve is not scraped, or its hostname label is not the node's name"
            )
        })
}
