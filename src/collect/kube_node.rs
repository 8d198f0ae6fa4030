//! The node's own object and the cluster's model-serving pods, read from the API server for the
//! kubelet enricher (`collect::kubelet`), which puts them in the snapshot's `kubelet` object:
//! the DCM profile that manages the node (header, plan, staging) and the KServe or vLLM
//! services whose pods run here (Models view, map, JSON). Read by a background task every
//! [`READ_EVERY`], each call bounded; a sample takes the last answer and never waits for the
//! API server, except once, bounded, for the first answer, so a one-shot `snapshot` or `plan`
//! has it. No cluster configuration, or an API server that does not answer: nothing is shown
//! and nothing said (a node need not reach its API server). A refused verb is said once,
//! naming the verb and resource to grant.

use crate::collect::cluster::Target;
use crate::domain::k8s::{KSERVE_LABEL, NodePod, ServingPod};
use crate::domain::snapshot::KubeNode;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the node and the serving pods are read again.
pub const READ_EVERY: Duration = Duration::from_secs(10);
/// Each call's limit.
pub const CALL_LIMIT: Duration = Duration::from_secs(5);
/// How long the first sample waits for the first answer (once per process).
pub const FIRST_WAIT: Duration = Duration::from_secs(3);
/// The most pods taken from one list: the first page of a larger answer is what is counted
/// (a cluster of more than 5000 KServe pods shows at most these), so a list stays bounded.
const MAX_PODS: usize = 5000;

/// The environment variable a DaemonSet sets to the node's name (downward API
/// `spec.nodeName`), as the kubelet's node name may differ from the host name.
pub const NODE_NAME_ENV: &str = "NODE_NAME";

/// What the API server said last.
#[derive(Debug, Default, Clone)]
pub struct Answer {
    /// The node's object (None: not read, or absent).
    pub node: Option<KubeNode>,
    /// The model-serving pods of the cluster.
    pub pods: Vec<ServingPod>,
    /// Every pod bound to this node (names the holders PodResources does not).
    pub node_pods: Vec<NodePod>,
    /// The refusal last said (a verb partop's identity lacks), until a round succeeds.
    pub refused: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    answer: Answer,
}

/// The reader of the node's object: started on the first sample that has a kubelet.
#[derive(Debug)]
pub struct ApiNode {
    /// Where the cluster is (default: as kubectl finds it).
    pub target: Target,
    /// The node's name.
    pub name: String,
    shared: Arc<Mutex<Shared>>,
    wake: Arc<tokio::sync::Notify>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for ApiNode {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// The node's name: `given` (the simulated node's), else `$NODE_NAME`, else the host name
/// (the kubelet's default).
pub fn node_name(given: Option<&str>) -> String {
    given
        .map(str::to_string)
        .or_else(|| {
            std::env::var(NODE_NAME_ENV)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(crate::collect::host::hostname)
}

impl ApiNode {
    /// A reader for `name` in the cluster of `target`; nothing runs until [`ApiNode::latest`].
    pub fn new(target: Target, name: String) -> Self {
        Self {
            target,
            name,
            shared: Arc::default(),
            wake: Arc::default(),
            task: None,
        }
    }

    /// The last answer; the first call starts the reader and waits (at most [`FIRST_WAIT`])
    /// for its first round.
    pub async fn latest(&mut self) -> Answer {
        if self.task.is_none() {
            let shared = Arc::clone(&self.shared);
            let wake = Arc::clone(&self.wake);
            let target = self.target.clone();
            let name = self.name.clone();
            self.task = Some(tokio::spawn(read_loop(target, name, shared, wake)));
            let _ = tokio::time::timeout(FIRST_WAIT, self.wake.notified()).await;
        }
        self.lock().answer.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Why a round failed: said (once) or not.
enum Trouble {
    /// Not worth a word: no configuration, an API server that does not answer.
    Quiet(String),
    /// A refusal the operator can fix.
    Say(String),
}

async fn read_loop(
    target: Target,
    name: String,
    shared: Arc<Mutex<Shared>>,
    wake: Arc<tokio::sync::Notify>,
) {
    let mut client: Option<kube::Client> = None;
    let mut said: Option<String> = None;
    loop {
        let r = round(&target, &name, &mut client).await;
        {
            let mut s = shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match r {
                Ok(a) => {
                    if said.take().is_some() {
                        log::info!("Kubernetes API: the node {name} is read again");
                    }
                    s.answer = a;
                }
                Err(Trouble::Quiet(e)) => {
                    log::debug!("Kubernetes API: {e}");
                    s.answer = Answer::default();
                }
                Err(Trouble::Say(e)) => {
                    if said.as_deref() != Some(e.as_str()) {
                        log::warn!("Kubernetes API: {e}");
                        said = Some(e.clone());
                    }
                    s.answer = Answer {
                        refused: Some(e),
                        ..Answer::default()
                    };
                }
            }
        }
        wake.notify_waiters();
        wake.notify_one();
        tokio::time::sleep(READ_EVERY).await;
    }
}

/// A refused verb becomes the rule to add; anything else is quiet.
fn judge(verb: &str, what: &str, e: &kube::Error) -> Trouble {
    if let kube::Error::Api(r) = e
        && r.code == 403
    {
        return Trouble::Say(format!(
            "the API server refused to {verb} {what}: grant `{verb}` on `{what}` to partop's identity (docs/kubernetes.md); {}",
            crate::domain::text::escape_controls(&r.message)
        ));
    }
    Trouble::Quiet(format!("{verb} {what}: {e}"))
}

async fn bounded<T>(
    verb: &str,
    what: &str,
    f: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, Trouble> {
    match tokio::time::timeout(CALL_LIMIT, f).await {
        Ok(r) => r.map_err(|e| judge(verb, what, &e)),
        Err(_) => Err(Trouble::Quiet(format!(
            "{verb} {what}: no answer within {}s",
            CALL_LIMIT.as_secs()
        ))),
    }
}

async fn round(
    target: &Target,
    name: &str,
    client: &mut Option<kube::Client>,
) -> Result<Answer, Trouble> {
    if client.is_none() {
        let config = crate::collect::cluster::config(target)
            .await
            .map_err(Trouble::Quiet)?;
        let mut config = config;
        config.read_timeout = Some(CALL_LIMIT);
        *client = Some(
            kube::Client::try_from(config).map_err(|e| Trouble::Quiet(format!("client: {e}")))?,
        );
    }
    let Some(c) = client.clone() else {
        return Err(Trouble::Quiet("no client".into()));
    };
    let nodes: Api<Node> = Api::all(c.clone());
    let node = bounded("get", "nodes", nodes.get_opt(name))
        .await?
        .map(|n| node_of(name, &n));
    let pods: Api<Pod> = Api::all(c);
    // KServe's pods anywhere (their replicas count over the cluster); the pods on this node
    // for the servers recognised by their command.
    let lp = ListParams::default()
        .labels(KSERVE_LABEL)
        .limit(MAX_PODS as u32);
    let mut all = bounded("list", "pods", pods.list(&lp)).await?.items;
    let here = ListParams::default()
        .fields(&format!("spec.nodeName={name}"))
        .limit(MAX_PODS as u32);
    let on_node = bounded("list", "pods", pods.list(&here)).await?.items;
    let node_pods = on_node.iter().filter_map(node_pod).collect();
    all.extend(on_node);
    let mut seen = std::collections::BTreeSet::new();
    let pods = all
        .iter()
        .filter(|p| seen.insert(p.metadata.uid.clone()))
        .filter_map(serving_pod)
        .collect();
    Ok(Answer {
        node,
        pods,
        node_pods,
        refused: None,
    })
}

/// The node's DCM facts.
fn node_of(name: &str, n: &Node) -> KubeNode {
    let label = |k: &str| {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(k))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    KubeNode {
        name: name.to_string(),
        dcm_profile: label(crate::domain::cluster::DCM_PROFILE),
        dcm_state: label(crate::domain::cluster::DCM_STATE),
    }
}

/// Whether a container runs vLLM's OpenAI server: `vllm serve …`, or
/// `python -m vllm.entrypoints.openai.api_server …` (its command and args, as the pod spec
/// gives them; an image name alone says nothing of what runs).
fn runs_vllm(c: &k8s_openapi::api::core::v1::Container) -> bool {
    let words: Vec<&str> = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .flat_map(|w| w.split_whitespace())
        .collect();
    words.windows(2).any(|w| {
        (w[0].rsplit('/').next() == Some("vllm") && w[1] == "serve")
            || (w[0] == "-m" && w[1] == "vllm.entrypoints.openai.api_server")
    })
}

/// The service a vLLM pod serves for: its `app.kubernetes.io/name` or `app` label, else its
/// controller's name (a ReplicaSet's without its template hash: the Deployment), else itself.
fn owner_of(p: &Pod) -> String {
    let labels = p.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).cloned();
    if let Some(v) = label("app.kubernetes.io/name").or_else(|| label("app")) {
        return v;
    }
    let owner = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match (owner, label("pod-template-hash")) {
        (Some(o), Some(h)) if o.kind == "ReplicaSet" => o
            .name
            .strip_suffix(&format!("-{h}"))
            .unwrap_or(&o.name)
            .to_string(),
        (Some(o), _) => o.name.clone(),
        _ => p.metadata.name.clone().unwrap_or_default(),
    }
}

/// A pod on this node by UID, its containers by runtime id (None: it has no UID).
pub fn node_pod(p: &Pod) -> Option<NodePod> {
    let statuses = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    let containers = statuses
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let id = c.container_id.as_deref()?;
            // `containerd://<id>`, `cri-o://<id>`, `docker://<id>`: the cgroup has the id alone.
            let id = id.split_once("://").map_or(id, |(_, id)| id);
            Some((id.to_string(), c.name.clone()))
        })
        .collect();
    Some(NodePod {
        uid: p.metadata.uid.clone()?,
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        containers,
        priority_class: p
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.clone())
            .filter(|c| !c.is_empty()),
    })
}

/// A pod that serves a model (None: it does not, or it is being deleted).
pub fn serving_pod(p: &Pod) -> Option<ServingPod> {
    if p.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let kserve = p
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(KSERVE_LABEL))
        .filter(|v| !v.is_empty())
        .cloned();
    let (kind, service) = match kserve {
        Some(s) => ("kserve", s),
        None => {
            let spec = p.spec.as_ref()?;
            if !spec.containers.iter().any(runs_vllm) {
                return None;
            }
            ("vllm", owner_of(p))
        }
    };
    let ready = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Some(ServingPod {
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
        kind: kind.to_string(),
        service,
        ready,
    })
}

#[cfg(test)]
mod tests {
    use super::node_pod;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn a_pods_containers_are_keyed_by_the_id_the_cgroup_carries() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "exporter-1", "namespace": "kube-amd-gpu", "uid": "u-1"},
            "status": {"containerStatuses": [
                {"name": "exporter", "containerID": "containerd://abc123", "image": "i",
                 "imageID": "", "ready": true, "restartCount": 0},
                {"name": "sidecar", "containerID": "cri-o://def456", "image": "i",
                 "imageID": "", "ready": true, "restartCount": 0},
                {"name": "waiting", "image": "i", "imageID": "", "ready": false,
                 "restartCount": 0}
            ]}
        }))
        .unwrap();
        let p = node_pod(&pod).unwrap();
        assert_eq!((p.uid.as_str(), p.name.as_str()), ("u-1", "exporter-1"));
        assert_eq!(
            p.containers,
            vec![
                ("abc123".to_string(), "exporter".to_string()),
                ("def456".to_string(), "sidecar".to_string())
            ]
        );
        assert_eq!(p.priority_class, None, "no spec: none named");
        // The priority class the pod names; an empty one names none.
        for (class, want) in [("batch-low", Some("batch-low")), ("", None)] {
            let mut with = pod.clone();
            with.spec = Some(k8s_openapi::api::core::v1::PodSpec {
                priority_class_name: Some(class.into()),
                ..Default::default()
            });
            assert_eq!(node_pod(&with).unwrap().priority_class.as_deref(), want);
        }
        let mut no_uid = pod;
        no_uid.metadata.uid = None;
        assert_eq!(node_pod(&no_uid), None);
    }
}
