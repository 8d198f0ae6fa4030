//! The cluster's verbs around a change on a Kubernetes node (issue 25, item 4), through the API
//! server with kube-rs: cordon, evict through the Eviction API (our own `policy/v1` body, so a
//! grace period or dry run reaches the server), a PodDisruptionBudget refusal retried within a
//! bound and named, the wait until each pod is gone, DCM's NoExecute taint for the change
//! window, and the wait until the node advertises the expected allocatable count (restarting the
//! device-plugin pod once). Called by the repartition's steps (`exec::apply`) for one node; a
//! fleet rollout (issue 26) holds one `NodeOps` per node. Every verb is bounded; a refused verb
//! names the RBAC verb and resource the ClusterRole must grant.

use crate::domain::k8s_ops::{self, Access, PodId};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The bounds of the verbs and waits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// One API call.
    pub verb: Duration,
    /// How long an eviction a PodDisruptionBudget refuses is retried.
    pub budget: Duration,
    /// How long evicted pods may take to be gone.
    pub gone: Duration,
    /// How long the device plugin has to re-register before its pod is restarted.
    pub reregister: Duration,
    /// How long the node may take to advertise the expected count, restart included.
    pub allocatable: Duration,
    /// Between two polls.
    pub poll: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            verb: Duration::from_secs(10),
            budget: Duration::from_secs(120),
            gone: Duration::from_secs(120),
            reregister: Duration::from_secs(30),
            allocatable: Duration::from_secs(120),
            poll: Duration::from_millis(250),
        }
    }
}

/// Why a cluster verb did not do what it was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum K8sError {
    /// The API server refused the verb (403).
    #[error(
        "the API server refused to {verb} {resource}{ns}: the ClusterRole needs `{verb}` on `{resource}` (docs/kubernetes.md); {message}",
        ns = namespace.as_deref().map(|n| format!(" in namespace {n}")).unwrap_or_default()
    )]
    Refused {
        /// The RBAC verb.
        verb: String,
        /// The resource (`pods/eviction`, `nodes`).
        resource: String,
        /// Where.
        namespace: Option<String>,
        /// The server's words.
        message: String,
    },
    /// The access review said, before anything changed, that these are not granted.
    #[error(
        "the API server would refuse, so nothing was changed: {}: partop's ClusterRole needs these verbs on these resources (docs/kubernetes.md)",
        .0.join("; ")
    )]
    NotGranted(Vec<String>),
    /// A PodDisruptionBudget kept refusing the eviction for the whole bound.
    #[error(
        "evicting {pod} was refused for {secs} s by the PodDisruptionBudget {budget}: {message}; partop never bypasses it: scale the workload up, relax the budget, or move the pod yourself, then run again"
    )]
    Budget {
        /// `namespace/name`.
        pod: String,
        /// `namespace/name` of the budget (or what the server said of it).
        budget: String,
        /// The server's words.
        message: String,
        /// How long it retried.
        secs: u64,
    },
    /// A wait ran past its bound.
    #[error("{0}")]
    Timeout(String),
    /// Another partop change holds the node (its cordon): nothing was done.
    #[error("{0}")]
    Held(String),
    /// Every write was refused as a conflict (the object kept changing): nothing was done.
    #[error("{0}")]
    Conflict(String),
    /// Anything else the API server or the connection said.
    #[error("{0}")]
    Api(String),
}

/// The taint a change window puts on the node (AMD's Device Config Manager uses the same): pods
/// that do not tolerate it, the metrics exporter's DaemonSet pods among them, leave the node.
pub use crate::domain::k8s_ops::{WINDOW_TAINT_EFFECT, WINDOW_TAINT_KEY, WINDOW_TAINT_VALUE};

/// The cluster verbs for one node.
#[derive(Clone)]
pub struct NodeOps {
    client: kube::Client,
    /// The Node's name.
    pub node: String,
    /// Bounds.
    pub limits: Limits,
}

/// The status code of an API error (None: not an answer of the API server).
pub(crate) fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// An API error as said to the operator: a 403 becomes the RBAC rule to add.
pub(crate) fn said(
    e: &kube::Error,
    verb: &str,
    resource: &str,
    namespace: Option<&str>,
) -> K8sError {
    match e {
        kube::Error::Api(s) if s.code == 403 => K8sError::Refused {
            verb: verb.into(),
            resource: resource.into(),
            namespace: namespace.map(str::to_string),
            message: s.message.clone(),
        },
        kube::Error::Api(s) => K8sError::Api(format!(
            "{verb} {resource}: {} ({}, {})",
            s.message, s.code, s.reason
        )),
        other => K8sError::Api(format!("{verb} {resource}: {other}")),
    }
}

impl NodeOps {
    /// The verbs for `node` through `client`.
    pub fn new(client: kube::Client, node: &str, limits: Limits) -> Self {
        Self {
            client,
            node: node.to_string(),
            limits,
        }
    }

    /// The verbs for `node` of the cluster `t`. kube-rs's own retry of 429 is off: it would
    /// hide a PodDisruptionBudget's refusal (and retry it unbounded by our limits), which must
    /// be retried here, bounded and named.
    pub async fn connect(
        t: &crate::collect::cluster::Target,
        node: &str,
        limits: Limits,
    ) -> Result<Self, K8sError> {
        let mut config = crate::collect::cluster::config(t)
            .await
            .map_err(K8sError::Api)?;
        if let Some(why) = (!node.is_empty())
            .then(|| k8s_ops::name_problem("node", node))
            .flatten()
        {
            return Err(K8sError::Api(why));
        }
        config.default_retry = false;
        let client = kube::Client::try_from(config)
            .map_err(|e| K8sError::Api(format!("Kubernetes client: {e}")))?;
        Ok(Self::new(client, node, limits))
    }

    /// The client its verbs go through.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// One API call within the verb bound; a call past it is said with the verb and resource.
    async fn bounded<T>(
        &self,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
        f: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, K8sError> {
        tokio::time::timeout(self.limits.verb, f)
            .await
            .map_err(|_| {
                K8sError::Timeout(format!(
                    "{verb} {resource}{}: no answer from the API server within {} s",
                    namespace.map(|n| format!(" in {n}")).unwrap_or_default(),
                    self.limits.verb.as_secs()
                ))
            })
    }

    /// Asks the API server (SelfSubjectAccessReview) whether each verb is allowed, before
    /// anything changes: Err names every one refused.
    pub async fn preflight(&self, needs: &[Access]) -> Result<(), K8sError> {
        let api: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        let mut refused = Vec::new();
        for a in needs {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(a.verb.into()),
                        group: Some(a.group.into()),
                        resource: Some(a.resource.into()),
                        subresource: (!a.subresource.is_empty()).then(|| a.subresource.into()),
                        namespace: a.namespace.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let r = self
                .bounded(
                    "create",
                    "selfsubjectaccessreviews",
                    None,
                    api.create(&PostParams::default(), &review),
                )
                .await?
                .map_err(|e| said(&e, "create", "selfsubjectaccessreviews", None))?;
            if !r.status.is_some_and(|s| s.allowed) {
                refused.push(a.clone());
            }
        }
        if refused.is_empty() {
            return Ok(());
        }
        Err(K8sError::NotGranted(
            refused.iter().map(Access::to_string).collect(),
        ))
    }

    /// The Node now.
    pub async fn get_node(&self) -> Result<Node, K8sError> {
        let api: Api<Node> = Api::all(self.client.clone());
        self.bounded("get", "nodes", None, api.get(&self.node))
            .await?
            .map_err(|e| said(&e, "get", "nodes", None))
    }

    /// Marks the node unschedulable (`cordon = true`) or schedulable again. Returns whether it
    /// was unschedulable before, so a run that found it cordoned leaves it so.
    pub async fn set_unschedulable(&self, cordon: bool) -> Result<bool, K8sError> {
        let was = self
            .get_node()
            .await?
            .spec
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"spec": {"unschedulable": cordon}});
        self.bounded(
            "patch",
            "nodes",
            None,
            api.patch(&self.node, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await?
        .map_err(|e| said(&e, "patch", "nodes", None))?;
        Ok(was)
    }

    /// The pods on the node (all namespaces).
    pub async fn pods_on_node(&self, labels: Option<&str>) -> Result<Vec<Pod>, K8sError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let mut lp = ListParams::default().fields(&format!("spec.nodeName={}", self.node));
        if let Some(l) = labels {
            lp = lp.labels(l);
        }
        Ok(self
            .bounded("list", "pods", None, api.list(&lp))
            .await?
            .map_err(|e| said(&e, "list", "pods", None))?
            .items)
    }

    /// A pod's identity now (None: it is gone).
    pub async fn pod_id(&self, namespace: &str, name: &str) -> Result<Option<PodId>, K8sError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match self
            .bounded("get", "pods", Some(namespace), api.get(name))
            .await?
        {
            Ok(p) => Ok(Some(PodId {
                namespace: namespace.into(),
                name: name.into(),
                uid: p.metadata.uid.unwrap_or_default(),
            })),
            Err(e) if code(&e) == Some(404) => Ok(None),
            Err(e) => Err(said(&e, "get", "pods", Some(namespace))),
        }
    }

    /// Sends one Eviction for `pod` (its UID as precondition, so a replacement pod of the same
    /// name is never evicted by mistake). Ok(true): accepted (or dry-run accepted); Ok(false):
    /// the pod is already gone or replaced.
    async fn evict_once(
        &self,
        pod: &PodId,
        grace_secs: Option<i64>,
        dry_run: bool,
    ) -> Result<Result<bool, kube::Error>, K8sError> {
        // A pod gone or replaced is not evicted at all: the server answers a UID precondition
        // that fails only after retrying it for about 10 s.
        if self
            .pod_id(&pod.namespace, &pod.name)
            .await?
            .is_none_or(|now| !pod.uid.is_empty() && now.uid != pod.uid)
        {
            return Ok(Ok(false));
        }
        let body = k8s_ops::eviction_body(pod, grace_secs, dry_run);
        let mut url = format!(
            "/api/v1/namespaces/{}/pods/{}/eviction",
            pod.namespace, pod.name
        );
        if dry_run {
            url.push_str("?dryRun=All");
        }
        let req = http::Request::post(url)
            .header("Content-Type", "application/json")
            .body(body.to_string().into_bytes())
            .map_err(|e| K8sError::Api(format!("eviction request: {e}")))?;
        // The server retries a conflict within an eviction for about 10 s (a replacement
        // racing the check above): the bound leaves it that time.
        let r = tokio::time::timeout(
            self.limits.verb + Duration::from_secs(15),
            self.client.request_text(req),
        )
        .await
        .map_err(|_| {
            K8sError::Timeout(format!(
                "create pods/eviction in {}: no answer from the API server within {} s",
                pod.namespace,
                (self.limits.verb + Duration::from_secs(15)).as_secs()
            ))
        })?;
        Ok(match r {
            Ok(_) => Ok(true),
            // Gone, or its UID precondition failed: a new pod of that name is not ours.
            Err(e) if matches!(code(&e), Some(404 | 409)) => Ok(false),
            Err(e) => Err(e),
        })
    }

    /// Evicts `pod` through the Eviction API, retrying within the budget bound while a
    /// PodDisruptionBudget refuses (429): never bypassed, and named when it does not give way.
    /// `on_blocked` hears each refusal (the budget's name and the server's words) once per
    /// change of words. Ok(false): it was already gone.
    pub async fn evict(
        &self,
        pod: &PodId,
        grace_secs: Option<i64>,
        dry_run: bool,
        mut on_blocked: impl FnMut(&str, &str),
    ) -> Result<bool, K8sError> {
        if let Some(why) = k8s_ops::name_problem("namespace", &pod.namespace)
            .or_else(|| k8s_ops::name_problem("pod", &pod.name))
        {
            return Err(K8sError::Api(why));
        }
        let start = Instant::now();
        let mut last = String::new();
        loop {
            match self.evict_once(pod, grace_secs, dry_run).await? {
                Ok(done) => return Ok(done),
                Err(e) if code(&e) == Some(429) => {
                    let message = match &e {
                        kube::Error::Api(s) => status_words(s),
                        other => other.to_string(),
                    };
                    let budget = self.budget_of(pod).await.unwrap_or_else(|| {
                        k8s_ops::budget_in_words(&message)
                            .unwrap_or_else(|| "(not named by the server)".into())
                    });
                    if message != last {
                        on_blocked(&budget, &message);
                        last.clone_from(&message);
                    }
                    if start.elapsed() >= self.limits.budget {
                        return Err(K8sError::Budget {
                            pod: pod.to_string(),
                            budget,
                            message,
                            secs: start.elapsed().as_secs(),
                        });
                    }
                    tokio::time::sleep(self.limits.poll.max(Duration::from_millis(500))).await;
                }
                Err(e) => return Err(said(&e, "create", "pods/eviction", Some(&pod.namespace))),
            }
        }
    }

    /// The PodDisruptionBudget whose selector takes `pod` (`namespace/name`), as the server
    /// would pick it; None when it cannot be read (the server's words name it then).
    async fn budget_of(&self, pod: &PodId) -> Option<String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let labels = self
            .bounded("get", "pods", Some(&pod.namespace), pods.get(&pod.name))
            .await
            .ok()?
            .ok()?
            .metadata
            .labels
            .unwrap_or_default();
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), &pod.namespace);
        let list = self
            .bounded(
                "list",
                "poddisruptionbudgets",
                Some(&pod.namespace),
                api.list(&ListParams::default()),
            )
            .await
            .ok()?
            .ok()?;
        list.items
            .iter()
            .find(|b| {
                b.spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .is_some_and(|sel| selects(sel, &labels))
            })
            .map(|b| {
                let s = b.status.as_ref();
                format!(
                    "{}/{} (allows {} disruptions: {} healthy of {} desired)",
                    pod.namespace,
                    b.metadata.name.clone().unwrap_or_default(),
                    s.and_then(|s| s.disruptions_allowed).unwrap_or(0),
                    s.and_then(|s| s.current_healthy).unwrap_or(0),
                    s.and_then(|s| s.desired_healthy).unwrap_or(0),
                )
            })
    }

    /// Waits until every pod of `pods` is gone: 404, or its name now holds a new UID.
    pub async fn wait_gone(&self, pods: &[PodId]) -> Result<(), K8sError> {
        let end = Instant::now() + self.limits.gone;
        let mut left: Vec<&PodId> = pods.iter().collect();
        loop {
            let mut still = Vec::new();
            for p in left {
                if self
                    .pod_id(&p.namespace, &p.name)
                    .await?
                    .is_some_and(|now| now.uid == p.uid)
                {
                    still.push(p);
                }
            }
            if still.is_empty() {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(K8sError::Timeout(format!(
                    "{} pod(s) still on the node after {} s: {} (their kubelet has not finished the deletion)",
                    still.len(),
                    self.limits.gone.as_secs(),
                    still
                        .iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            left = still;
            tokio::time::sleep(self.limits.poll).await;
        }
    }

    /// Puts the change window's NoExecute taint on the node (`on`) or takes it off. Returns
    /// whether it was there before. Read-modify-write with the node's resourceVersion, retried
    /// on a conflict (the kubelet writes the node too).
    pub async fn set_window_taint(&self, on: bool) -> Result<bool, K8sError> {
        self.set_window_taint_as(on, "true").await
    }

    /// [`Self::set_window_taint`], the taint marked as the change `owner`'s when added (its
    /// untaint lifts only its own, [`Self::untaint_owned`]).
    pub async fn set_window_taint_as(&self, on: bool, owner: &str) -> Result<bool, K8sError> {
        let api: Api<Node> = Api::all(self.client.clone());
        for _ in 0..5 {
            let mut node = self.get_node().await?;
            let spec = node.spec.get_or_insert_with(Default::default);
            let taints = spec.taints.get_or_insert_with(Vec::new);
            let was = taints.iter().any(is_window_taint);
            if was == on {
                let mark = node
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(TAINTED_BY_PARTOP));
                if on && mark.is_some_and(|m| m != owner) {
                    // A taint there before this change, marked by another (a mark an earlier
                    // run left when its taint was lifted by hand, and DCM's taint put back
                    // since): not this change's, so the mark goes and its untaint leaves it.
                    self.patch_node(
                        &json!({"metadata": {"annotations": {TAINTED_BY_PARTOP: null}}}),
                    )
                    .await?;
                }
                return Ok(was);
            }
            let notes = node.metadata.annotations.get_or_insert_with(BTreeMap::new);
            if on {
                taints.push(Taint {
                    key: WINDOW_TAINT_KEY.into(),
                    value: Some(WINDOW_TAINT_VALUE.into()),
                    effect: WINDOW_TAINT_EFFECT.into(),
                    time_added: None,
                });
                // This change's own: its untaint lifts only a taint it added.
                notes.insert(TAINTED_BY_PARTOP.into(), owner.into());
            } else {
                taints.retain(|t| !is_window_taint(t));
                notes.remove(TAINTED_BY_PARTOP);
            }
            match self
                .bounded(
                    "update",
                    "nodes",
                    None,
                    api.replace(&self.node, &PostParams::default(), &node),
                )
                .await?
            {
                Ok(_) => return Ok(was),
                Err(e) if code(&e) == Some(409) => {}
                Err(e) => return Err(said(&e, "update", "nodes", None)),
            }
        }
        Err(K8sError::Api(format!(
            "the node {} kept changing under the taint's update (5 conflicts)",
            self.node
        )))
    }

    /// Lifts the change window's taint if the change `owner` added it (its annotation names
    /// it; an unnamed mark of an earlier partop counts as any change's); a taint of the same
    /// key that someone else put there (DCM's own flow, an operator, another change) is left,
    /// said. A mark without the taint holds nothing.
    pub async fn untaint_owned(&self, owner: &str) -> Result<String, K8sError> {
        let node = self.get_node().await?;
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(is_window_taint));
        let ours = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TAINTED_BY_PARTOP))
            .is_some_and(|h| owns(h, owner));
        Ok(match (tainted, ours) {
            (true, true) => {
                self.set_window_taint(false).await?;
                "the change window's taint removed".into()
            }
            (true, false) => format!(
                "the {WINDOW_TAINT_KEY} taint on the node is not this change's (it was there before the change, or another's): left"
            ),
            (false, _) => "no change window's taint on the node".into(),
        })
    }

    /// What the node advertises as allocatable per resource now.
    pub async fn allocatable(&self) -> Result<BTreeMap<String, String>, K8sError> {
        Ok(self
            .get_node()
            .await?
            .status
            .and_then(|s| s.allocatable)
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect())
    }

    /// Waits until the node advertises `expected` of each resource (absent: 0). When the
    /// device plugin has not re-registered within `limits.reregister`, its pod on the node
    /// (`collect::cluster::is_device_plugin`: AMD's label, or the registration directory
    /// mounted) is deleted once, as the operator would, and its DaemonSet starts it again.
    /// Ok(true): the plugin was restarted.
    pub async fn wait_allocatable(
        &self,
        expected: &BTreeMap<String, i64>,
    ) -> Result<bool, K8sError> {
        let start = Instant::now();
        let mut restarted = false;
        loop {
            let now = self.allocatable().await?;
            let differ = k8s_ops::allocatable_differs(expected, &now);
            if differ.is_empty() {
                return Ok(restarted);
            }
            if !restarted && start.elapsed() >= self.limits.reregister {
                let pods: Vec<Pod> = self
                    .pods_on_node(None)
                    .await?
                    .into_iter()
                    .filter(|p| {
                        p.metadata.deletion_timestamp.is_none()
                            && crate::collect::cluster::is_device_plugin(p)
                    })
                    .collect();
                if pods.is_empty() {
                    return Err(K8sError::Api(format!(
                        "the node {} advertises {} and no device-plugin pod is on it to restart (one labelled {} or mounting {})",
                        self.node,
                        differ.join(", "),
                        k8s_ops::PLUGIN_LABELS,
                        k8s_ops::DEVICE_PLUGIN_DIR
                    )));
                }
                for p in &pods {
                    let ns = p.metadata.namespace.clone().unwrap_or_default();
                    let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
                    let name = p.metadata.name.clone().unwrap_or_default();
                    let dp = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: p.metadata.uid.clone(),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    match self
                        .bounded("delete", "pods", Some(&ns), api.delete(&name, &dp))
                        .await?
                    {
                        Ok(_) => {}
                        Err(e) if matches!(code(&e), Some(404 | 409)) => {}
                        Err(e) => return Err(said(&e, "delete", "pods", Some(&ns))),
                    }
                }
                restarted = true;
            }
            if start.elapsed() >= self.limits.allocatable {
                return Err(K8sError::Timeout(format!(
                    "the node {} still advertises {} after {} s{}",
                    self.node,
                    differ.join(", "),
                    self.limits.allocatable.as_secs(),
                    if restarted {
                        " and a restart of the device-plugin pod"
                    } else {
                        ""
                    }
                )));
            }
            tokio::time::sleep(self.limits.poll).await;
        }
    }
}

pub use crate::domain::k8s_ops::{CORDONED_BY_PARTOP, TAINTED_BY_PARTOP};

/// Which partop change holds the node's cordon (its annotation's value), if one does.
fn cordon_owner(node: &Node) -> Option<String> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CORDONED_BY_PARTOP))
        .cloned()
}

/// Whether the node is cordoned, and which partop change holds the cordon: the mark holds
/// only while the node is cordoned (one a bare `kubectl uncordon` left holds nothing).
fn cordon_state(node: &Node) -> (bool, Option<String>) {
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    (cordoned, cordon_owner(node).filter(|_| cordoned))
}

/// Whether the cordon held by `held` is `owner`'s: the same change, or a cordon an earlier
/// partop marked without naming its change (`true`), which any change may take over as before.
fn owns(held: &str, owner: &str) -> bool {
    held == owner || held == "true"
}

impl NodeOps {
    /// Cordons the node and marks it as the cordon of partop's change `owner` (the plan's or
    /// the rollout's id, the same when resumed); a node already cordoned by someone else is
    /// left as it is (and so left cordoned at the end); a node cordoned by ANOTHER partop change
    /// (another operator's rollout, an apply on the node itself) is refused: one change at a
    /// time, across machines too.
    pub async fn cordon_owned(&self, owner: &str) -> Result<String, K8sError> {
        self.cordon_claim(owner).await.map(|(said, _)| said)
    }

    /// [`Self::cordon_owned`], with whether the cordon is now this change's (false: the node
    /// was cordoned by someone else, left so).
    pub async fn cordon_claim(&self, owner: &str) -> Result<(String, bool), K8sError> {
        // Read, decide, then patch under the read's resourceVersion: two changes on two
        // machines that both saw the node free cannot both take it (the second gets a 409,
        // reads again and finds the first's mark).
        for _ in 0..5 {
            let node = self.get_node().await?;
            let (cordoned, held) = cordon_state(&node);
            if let Some(other) = held.as_deref().filter(|h| !owns(h, owner)) {
                return Err(K8sError::Held(format!(
                    "{} is cordoned by another partop change ({}): one change at a time; let it finish or resume it (its journal names it), or, if it was abandoned, undo its cordon: kubectl uncordon {}; nothing was changed",
                    self.node,
                    crate::domain::text::escape_controls(
                        &other.chars().take(120).collect::<String>()
                    ),
                    crate::domain::text::shell_quote(&self.node)
                )));
            }
            if cordoned && held.is_none() {
                return Ok((
                    format!(
                        "{} was already cordoned (not by partop): left so, and left cordoned after",
                        self.node
                    ),
                    false,
                ));
            }
            let api: Api<Node> = Api::all(self.client.clone());
            let patch = json!({
                "metadata": {
                    "resourceVersion": node.metadata.resource_version,
                    "annotations": {CORDONED_BY_PARTOP: owner},
                },
                "spec": {"unschedulable": true},
            });
            match self
                .bounded(
                    "patch",
                    "nodes",
                    None,
                    api.patch(&self.node, &PatchParams::default(), &Patch::Merge(&patch)),
                )
                .await?
            {
                Ok(_) => return Ok((format!("{} cordoned", self.node), true)),
                Err(e) if code(&e) == Some(409) => {}
                Err(e) => return Err(said(&e, "patch", "nodes", None)),
            }
        }
        Err(K8sError::Conflict(format!(
            "the node {} kept changing under the cordon (5 conflicts, each refused by the API server): nothing was changed",
            self.node
        )))
    }

    /// For a local change (`partop apply` on the node): a node a DCM profile manages gets that
    /// profile again from DCM, said with the way to make the change stick. Not for a rollout
    /// through DCM, whose change is the profile.
    /// Best effort: it runs after the cordon's patch, so a read that fails here must not fail
    /// the cordon step (the node IS cordoned); the warning then says it could not look.
    pub async fn dcm_warning(&self) -> String {
        let node = match self.get_node().await {
            Ok(n) => n,
            Err(e) => {
                return format!(
                    "; the node's labels could not be read to see whether a DCM profile manages it ({e}): if one does ({}), DCM may revert this local change",
                    k8s_ops::DCM_PROFILE_LABEL
                );
            }
        };
        node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(k8s_ops::DCM_PROFILE_LABEL))
            .map(|p| {
                format!(
                    "; WARNING: the node is managed by the DCM profile {} ({}): DCM may revert this local change; to keep it, make it a DCM profile (`partop plan … --dcm NAME`) and label the node with it",
                    crate::domain::text::escape_controls(p),
                    k8s_ops::DCM_PROFILE_LABEL
                )
            })
            .unwrap_or_default()
    }

    /// Uncordons the node if partop's change `owner` cordoned it (another change's cordon,
    /// or someone else's, is left).
    pub async fn uncordon_owned(&self, owner: &str) -> Result<String, K8sError> {
        let node = self.get_node().await?;
        let (cordoned, held) = cordon_state(&node);
        if let Some(other) = held.as_deref().filter(|h| !owns(h, owner)) {
            return Ok(format!(
                "{} is cordoned by another partop change ({}): left cordoned",
                self.node,
                crate::domain::text::escape_controls(other)
            ));
        }
        if held.is_none() {
            if !cordoned && cordon_owner(&node).is_some_and(|h| owns(&h, owner)) {
                // Its own mark on a node someone uncordoned by hand: taken off, so it cannot
                // name this change on a later cordon that is not this change's.
                self.patch_node(&json!({"metadata": {"annotations": {CORDONED_BY_PARTOP: null}}}))
                    .await?;
            }
            return Ok(if cordoned {
                format!("{} was cordoned before partop: left cordoned", self.node)
            } else {
                format!("{} is schedulable", self.node)
            });
        }
        self.patch_node(&json!({
            "metadata": {"annotations": {CORDONED_BY_PARTOP: null}},
            "spec": {"unschedulable": false},
        }))
        .await?;
        Ok(format!("{} uncordoned", self.node))
    }

    /// A merge patch of the Node (`patch nodes`).
    pub async fn patch_node(&self, patch: &serde_json::Value) -> Result<(), K8sError> {
        let api: Api<Node> = Api::all(self.client.clone());
        self.bounded(
            "patch",
            "nodes",
            None,
            api.patch(&self.node, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await?
        .map_err(|e| said(&e, "patch", "nodes", None))?;
        Ok(())
    }

    /// The pods of `moves` that are still there, and whether a DaemonSet owns each (those are
    /// cleared by the taint: evicted, their DaemonSet would start them again at once).
    async fn present(
        &self,
        moves: &[crate::domain::plan_k8s::PodMove],
    ) -> Result<Vec<(PodId, bool)>, K8sError> {
        let mut out = Vec::new();
        for m in moves {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &m.namespace);
            match self
                .bounded("get", "pods", Some(&m.namespace), api.get(&m.name))
                .await?
            {
                Ok(p) => {
                    let daemon = p
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.kind == "DaemonSet");
                    out.push((
                        PodId {
                            namespace: m.namespace.clone(),
                            name: m.name.clone(),
                            uid: p.metadata.uid.unwrap_or_default(),
                        },
                        daemon,
                    ));
                }
                Err(e) if code(&e) == Some(404) => {}
                Err(e) => return Err(said(&e, "get", "pods", Some(&m.namespace))),
            }
        }
        Ok(out)
    }
}

/// A pod the Findings view offers to evict (a reclaimable partition it holds), as confirmed:
/// its identity when the ask opened, the node partop runs on, the partition it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldPod {
    /// The pod (its UID as read when the ask opened).
    pub pod: PodId,
    /// The Kubernetes node (this host's name: the kubelet's default node name).
    pub node: String,
    /// The partition it holds (BDF with partition function) and its number.
    pub gpu: String,
    /// The partition's logical GPU number.
    pub gpu_id: u32,
}

impl NodeOps {
    /// The pod's UID and node now (None: gone).
    pub async fn placed(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<(String, String)>, K8sError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match self
            .bounded("get", "pods", Some(namespace), api.get(name))
            .await?
        {
            Ok(p) => Ok(Some((
                p.metadata.uid.unwrap_or_default(),
                p.spec.and_then(|s| s.node_name).unwrap_or_default(),
            ))),
            Err(e) if code(&e) == Some(404) => Ok(None),
            Err(e) => Err(said(&e, "get", "pods", Some(namespace))),
        }
    }

    /// Why `held` must not be evicted now (gone, replaced by a pod of another UID, moved to
    /// another node), or None: it is the pod that was confirmed, on this node.
    pub async fn still_the_confirmed(&self, held: &HeldPod) -> Result<Option<String>, K8sError> {
        let p = &held.pod;
        Ok(match self.placed(&p.namespace, &p.name).await? {
            None => Some(format!("{p} is gone: nothing to evict")),
            Some((uid, _)) if uid != p.uid => Some(format!(
                "{p} is another pod now (UID {uid}, confirmed {}): not evicted",
                p.uid
            )),
            Some((_, node)) if node != held.node => Some(format!(
                "{p} is on node {} now, not {}: not evicted",
                if node.is_empty() { "(none)" } else { &node },
                held.node
            )),
            Some(_) => None,
        })
    }
}

/// Evicts a pod the Findings view confirmed, through the one Eviction code (`NodeOps::evict`:
/// the UID as precondition, a PodDisruptionBudget's refusal retried within the bound, said to
/// `on_blocked`, never bypassed; never a delete), then waits until it is gone. The pod is
/// verified first (same UID, still on this node); the intent is journaled before the Eviction
/// is sent (no journal, no eviction), the result after. Ok: what was done; Err: why not.
pub async fn evict_held(
    ops: &NodeOps,
    held: &HeldPod,
    journal: &std::path::Path,
    simulated: bool,
    on_blocked: impl FnMut(&str, &str),
) -> Result<String, String> {
    use crate::domain::journal::EvictEvent;
    if let Some(why) = ops
        .still_the_confirmed(held)
        .await
        .map_err(|e| e.to_string())?
    {
        return Err(why);
    }
    let id = super::journal::new_run_id();
    let p = &held.pod;
    let write = |ev: &EvictEvent| super::runlog::evicted(journal, ev, simulated);
    write(&EvictEvent::Begun {
        id: id.clone(),
        namespace: p.namespace.clone(),
        pod: p.name.clone(),
        uid: p.uid.clone(),
        node: held.node.clone(),
        gpu: held.gpu.clone(),
    })
    .map_err(|e| e.to_string())?;
    let r = match ops.evict(p, None, false, on_blocked).await {
        Ok(true) => ops
            .wait_gone(std::slice::from_ref(p))
            .await
            .map(|()| {
                format!(
                    "{p} evicted and gone: GPU {} ({}) is free for a job that waits",
                    held.gpu_id, held.gpu
                )
            })
            .map_err(|e| e.to_string()),
        Ok(false) => Ok(format!("{p} was already gone or replaced: nothing evicted")),
        Err(e) => Err(e.to_string()),
    };
    let (ok, detail) = match &r {
        Ok(d) => (true, d.clone()),
        Err(e) => (false, e.clone()),
    };
    let ended = write(&EvictEvent::Ended {
        id,
        pod: p.to_string(),
        ok,
        detail,
    });
    match (r, ended) {
        (r, Ok(())) => r,
        (Ok(d), Err(e)) => Err(format!("{d}; but its result could not be journaled: {e}")),
        (Err(d), Err(e)) => Err(format!("{d}; and its result could not be journaled: {e}")),
    }
}

type StepResult = Result<String, (String, String)>;

/// What a failed run left on the node and the exact undo, once the cordon step has begun and
/// until the uncordon has run (None: nothing of the cluster's was touched, or all was undone).
pub fn left_on_node(plan: &crate::domain::plan::Plan, failed: usize) -> Option<String> {
    use crate::domain::journal::StepKind as K;
    let k = plan.kubernetes.as_ref()?;
    let failed = failed.min(plan.steps.len().saturating_sub(1));
    let done = &plan.steps[..failed];
    let has = |steps: &[crate::domain::plan::Step], kind: K| steps.iter().any(|s| s.key == kind);
    // A cordon step that failed is said by the step itself when its patch may have reached
    // the API server (`cordon_step`); a taint step that failed may have tainted (it waits for
    // the DaemonSet pods after).
    let cordoned = has(done, K::Cordon) && !has(done, K::Uncordon);
    let tainted = has(&plan.steps[..=failed], K::Taint) && !has(done, K::Untaint);
    let undo = k8s_ops::undo_commands(&k.node, cordoned, tainted);
    (!undo.is_empty()).then(|| {
        format!(
            "the Kubernetes node {} may be left {}: resume to finish and undo it, or undo by hand:\n  {}",
            k.node,
            match (cordoned, tainted) {
                (true, true) => "cordoned and tainted",
                (true, false) => "cordoned",
                _ => "tainted",
            },
            undo.join("\n  ")
        )
    })
}

/// Performs one of a plan's Kubernetes steps (`plan_k8s`) against the cluster the environment
/// names (KUBECONFIG, ~/.kube/config, or in-cluster), for the plan's node.
pub async fn run_step(
    plan: &crate::domain::plan::Plan,
    kind: crate::domain::journal::StepKind,
    note: &mut (dyn FnMut(String) + Send),
) -> StepResult {
    use crate::domain::journal::StepKind as K;
    let Some(k) = &plan.kubernetes else {
        return Err((
            format!("{kind} is a Kubernetes step, and the plan names no Kubernetes node"),
            "make the plan with `partop plan` on the node".into(),
        ));
    };
    let next = |e: &K8sError| match e {
        K8sError::Refused { .. } | K8sError::NotGranted(_) => {
            "grant the verb to partop's ClusterRole (docs/kubernetes.md), then resume".to_string()
        }
        K8sError::Budget { .. } => {
            "let the budget allow the disruption, then resume (partop never bypasses it)".into()
        }
        _ => "fix the cause (the API server's answer above), then resume".into(),
    };
    let target = crate::collect::cluster::Target::default();
    let ops = NodeOps::connect(&target, &k.node, Limits::default())
        .await
        .map_err(|e| (e.to_string(), next(&e)))?;
    let r = match kind {
        K::Cordon => return cordon_step(&ops, &k.node, &apply_owner(plan), &next).await,
        K::Evict => evict_all(&ops, k, plan.grace_secs, note).await,
        K::Taint => taint_and_clear(&ops, k, &apply_owner(plan)).await,
        K::WaitAllocatable => ops.wait_allocatable(&k.allocatable).await.map(|restarted| {
            format!(
                "the node advertises {}{}",
                k.allocatable
                    .iter()
                    .map(|(r, n)| format!("{r}={n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if restarted {
                    " (after a restart of the device-plugin pod)"
                } else {
                    ""
                }
            )
        }),
        K::Untaint => ops.untaint_owned(&apply_owner(plan)).await,
        K::Uncordon => ops.uncordon_owned(&apply_owner(plan)).await,
        other => Err(K8sError::Api(format!("{other} is not a Kubernetes step"))),
    };
    r.map_err(|e| (e.to_string(), next(&e)))
}

/// The change a node's apply cordons as: its plan (a resume of the plan is the same change).
pub fn apply_owner(plan: &crate::domain::plan::Plan) -> String {
    format!("apply {} on {}", plan.fingerprint, plan.host)
}

/// The cordon step: every verb the drain needs asked first (a refusal changes nothing), then
/// the cordon. A patch whose answer never came (a timeout, a broken connection) may have
/// cordoned the node: the failure says so, with the undo, since the step is not journaled done.
async fn cordon_step(
    ops: &NodeOps,
    node: &str,
    owner: &str,
    next: &dyn Fn(&K8sError) -> String,
) -> StepResult {
    if let Err(e) = ops.preflight(&k8s_ops::drain_access()).await {
        return Err((e.to_string(), next(&e)));
    }
    match ops.cordon_owned(owner).await {
        Ok(done) => Ok(done + &ops.dcm_warning().await),
        Err(e @ (K8sError::Timeout(_) | K8sError::Api(_))) => Err((
            e.to_string(),
            format!(
                "{}\nthe Kubernetes node {node} may be left cordoned (the cordon's answer was lost; partop's annotation {CORDONED_BY_PARTOP} on it says it was applied): resume to finish and undo it, or undo by hand:\n  {}",
                next(&e),
                k8s_ops::undo_commands(node, true, false).join("\n  ")
            ),
        )),
        Err(e) => Err((e.to_string(), next(&e))),
    }
}

/// Evicts the plan's pods (DaemonSet pods are left to the taint), a budget's refusal said as a
/// note while it is retried, then waits until they are gone.
async fn evict_all(
    ops: &NodeOps,
    k: &crate::domain::plan_k8s::KubeChange,
    grace_secs: u32,
    note: &mut (dyn FnMut(String) + Send),
) -> Result<String, K8sError> {
    let present = ops.present(&k.pods).await?;
    let mut evicted = Vec::new();
    let mut daemons = Vec::new();
    for (p, daemon) in present {
        if daemon {
            daemons.push(p.to_string());
            continue;
        }
        let grace = (grace_secs > 0).then_some(i64::from(grace_secs));
        let mut heard = Vec::new();
        let done = ops
            .evict(&p, grace, false, |budget, words| {
                heard.push(format!("{p}: refused by {budget}: {words}; retrying"));
            })
            .await;
        for h in heard {
            note(h);
        }
        if done? {
            evicted.push(p);
        }
    }
    ops.wait_gone(&evicted).await?;
    let mut s = format!(
        "{} pod(s) evicted and gone{}",
        evicted.len(),
        if evicted.is_empty() {
            String::new()
        } else {
            format!(
                ": {}",
                evicted
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    if !daemons.is_empty() {
        s.push_str(&format!(
            "; DaemonSet pods left to the taint: {}",
            daemons.join(", ")
        ));
    }
    Ok(s)
}

/// Taints the node for the change window and waits until the plan's DaemonSet pods left.
async fn taint_and_clear(
    ops: &NodeOps,
    k: &crate::domain::plan_k8s::KubeChange,
    owner: &str,
) -> Result<String, K8sError> {
    let daemons: Vec<PodId> = ops
        .present(&k.pods)
        .await?
        .into_iter()
        .filter_map(|(p, d)| d.then_some(p))
        .collect();
    let was = ops.set_window_taint_as(true, owner).await?;
    ops.wait_gone(&daemons).await?;
    Ok(format!(
        "{}; {} DaemonSet holder(s) left",
        if was {
            "the change window's taint was already on the node"
        } else {
            "tainted for the change window"
        },
        daemons.len()
    ))
}

/// A refusal's words: the message and each cause's (the budget's name is in a cause).
fn status_words(s: &kube::core::Status) -> String {
    let mut out = s.message.clone();
    for c in s.details.iter().flat_map(|d| d.causes.iter()) {
        if !c.message.is_empty() && !out.contains(&c.message) {
            out.push_str(": ");
            out.push_str(&c.message);
        }
    }
    out
}

/// Whether `sel` selects a pod with `labels` (matchLabels and matchExpressions, as the API
/// server evaluates them). An empty selector selects every pod.
pub fn selects(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_label = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expr = sel.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let has = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => has.is_some_and(|v| values.contains(v)),
            "NotIn" => has.is_none_or(|v| !values.contains(v)),
            "Exists" => has.is_some(),
            "DoesNotExist" => has.is_none(),
            _ => false,
        }
    });
    by_label && by_expr
}

/// Whether `t` is the change window's taint.
fn is_window_taint(t: &Taint) -> bool {
    t.key == WINDOW_TAINT_KEY && t.effect == WINDOW_TAINT_EFFECT
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn selectors_as_the_server_reads_them() {
        let labels: BTreeMap<String, String> = [("app", "a"), ("tier", "gpu")]
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        let expr = |op: &str, vals: &[&str]| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: op.into(),
                values: Some(vals.iter().map(|v| (*v).to_string()).collect()),
            }]),
            match_labels: None,
        };
        // 4 operators x (the pod's value listed, not listed), and matchLabels: 10 cases.
        let cases = [
            (expr("In", &["a"]), true),
            (expr("In", &["b"]), false),
            (expr("NotIn", &["a"]), false),
            (expr("NotIn", &["b"]), true),
            (expr("Exists", &[]), true),
            (expr("DoesNotExist", &[]), false),
            (expr("Bogus", &["a"]), false),
            (LabelSelector::default(), true),
            (
                LabelSelector {
                    match_labels: Some([("app".to_string(), "a".to_string())].into()),
                    match_expressions: None,
                },
                true,
            ),
            (
                LabelSelector {
                    match_labels: Some([("app".to_string(), "b".to_string())].into()),
                    match_expressions: None,
                },
                false,
            ),
        ];
        for (i, (sel, want)) in cases.iter().enumerate() {
            assert_eq!(selects(sel, &labels), *want, "case {i} of {}", cases.len());
        }
    }
}
