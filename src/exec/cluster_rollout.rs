//! A rollout through a Kubernetes cluster (issue 26, item 2): the node engine of
//! `exec::rollout` that changes a node through the cluster's own partition manager, and the
//! planner that reads what such a plan needs from the API server. Per node, each step
//! journaled before and after it acts (`rollout::StepLog`): cordon (partop's own, `NodeOps`),
//! the planned pods evicted through the Eviction API (PodDisruptionBudgets honoured, retried
//! within a bound and named) and gone, the manager asked by label (the DCM profile written
//! into its ConfigMap first when the plan says so), its state label waited for (a failure
//! stops with its own reason: its newest event on the node), the kubelet's allocatable waited
//! for, uncordon. A node no manager owns has a third engine: partop's own plan, made on the
//! node over `collect::fleet`'s transport when the set is planned, applied there by `partop
//! apply` (`exec::rollout`'s ssh engine code) in place of the label and the manager's answer;
//! the rollout drains it only when the node's own plan does not (`Engine::rollout_drains`).
//! The pure part is `domain::cluster_rollout`.

use super::k8s::{K8sError, Limits, NodeOps, said, selects};
use super::rollout::{Engine, NodeStart, Start, StepLog};
use crate::collect::cluster::{node_of, pod_of};
use crate::collect::fleet::Transport;
use crate::domain::cluster_rollout::{
    Answer, Budget, ClusterPlanSet, DCM_FILE, Engine as Manager, Eviction, MIG_FILE, NodePlan,
    ProfileChange, Step, Target, amd_expected, amd_physical, answer, changed_since, dcm_profile,
    engine_for, failure_reason, own_apply, partition_labels, profile_in, with_profile,
};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a manager may take to answer in its state label, and the kubelet to advertise the
/// expected allocatable after it.
pub const MANAGER_WAIT: Duration = Duration::from_secs(600);

/// The cluster engine: one client, its own runtime (the rollout's node threads block on it).
pub struct ClusterEngine {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    /// Bounds of each verb and wait.
    pub limits: Limits,
    /// How long the manager and the kubelet may take.
    pub manager_wait: Duration,
    profile: Option<ProfileChange>,
    /// Held while the profile is written: nodes labelled at once (`--parallel`) write it once,
    /// the others find it as planned (two writers would race on the ConfigMap's version).
    profile_lock: tokio::sync::Mutex<()>,
    /// How nodes applied by `partop apply` are reached (None: the set has none).
    transport: Option<Transport>,
    /// Where a rehearsal is killed (`PARTOP_SIM_CRASH_AT`): only when every node of the set is
    /// one of `partop sim cluster`'s ([`rehearsal`]); None on any other cluster.
    crash_at: Option<String>,
}

/// How the planner reaches an AMD node no manager owns, to make and later apply partop's own
/// plan there.
#[derive(Clone, Debug)]
pub struct Reach {
    /// The fleet's transport (ssh, or the rehearsal transport for `rehearse:STATE`).
    pub transport: Transport,
    /// Node -> destination, as the operator named them (`--ssh NODE=DEST`).
    pub dests: BTreeMap<String, String>,
    /// Else `USER@` the Node's InternalIP (`--ssh-user`).
    pub user: Option<String>,
    /// The partop on the nodes.
    pub partop: String,
}

impl Reach {
    /// Where `node` is reached: the operator's mapping first, else its InternalIP with the
    /// user given (None: neither).
    pub fn dest_of(&self, node: &Node) -> Option<String> {
        let name = node.metadata.name.as_deref()?;
        if let Some(d) = self.dests.get(name) {
            return Some(d.clone());
        }
        let user = self.user.as_ref()?;
        let ip = node
            .status
            .as_ref()?
            .addresses
            .as_ref()?
            .iter()
            .find(|a| a.type_ == "InternalIP")?;
        Some(format!("{user}@{}", ip.address))
    }
}

impl ClusterEngine {
    /// An engine on the cluster `t` for `set` (its DCM profile written once, before the first
    /// label). kube-rs's own retry of 429 is off, as for every drain: a budget's refusal is
    /// retried here, bounded and named.
    ///
    /// # Errors
    /// The kubeconfig or the runtime.
    pub fn connect(
        t: &crate::collect::cluster::Target,
        set: &ClusterPlanSet,
        limits: Limits,
    ) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        let ops = rt
            .block_on(NodeOps::connect(t, "", limits))
            .map_err(|e| e.to_string())?;
        let crash_at = match std::env::var(super::apply::CRASH_ENV) {
            Ok(at) if rt.block_on(rehearsal(&ops.client(), set)) => Some(at),
            _ => None,
        };
        Ok(Self {
            client: ops.client(),
            rt,
            limits,
            manager_wait: MANAGER_WAIT,
            profile: set.profile.clone(),
            profile_lock: tokio::sync::Mutex::new(()),
            transport: None,
            crash_at,
        })
    }

    /// The engine reaching the set's `partop apply` nodes over `t`.
    #[must_use]
    pub fn over(mut self, t: Transport) -> Self {
        self.transport = Some(t);
        self
    }

    /// Rehearsing an interruption: the process is killed (SIGKILL, as a power cut or an OOM
    /// kill would) at the point `PARTOP_SIM_CRASH_AT` names (`domain::cluster_rollout::
    /// crash_key`), in a rehearsal only. The one place a cluster rollout is killed: at each
    /// step's boundaries ([`Self::steps_from`]) and after each line of the rollout itself
    /// ([`Engine::journaled`]).
    fn crash_point(&self, when: &str, node: Option<&str>, what: &str) {
        if self.crash_at.as_deref()
            == Some(crate::domain::cluster_rollout::crash_key(when, node, what).as_str())
        {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
    }

    fn ops(&self, node: &str) -> NodeOps {
        NodeOps::new(self.client.clone(), node, self.limits)
    }

    /// Asks the API server whether every verb the rollout needs is granted, before anything
    /// changes; Err names each refused verb and resource.
    ///
    /// # Errors
    /// The verbs not granted.
    pub fn preflight(&self, set: &ClusterPlanSet) -> Result<(), String> {
        let dcm = set.profile.is_some();
        self.rt
            .block_on(
                self.ops("")
                    .preflight(&crate::domain::cluster_rollout::rollout_access(dcm)),
            )
            .map_err(|e| e.to_string())
    }

    /// Every node of `set` not in `skip` is as it was planned (labels, pods on its GPUs), read
    /// now: a node changed since the plan is refused, not trusted.
    ///
    /// # Errors
    /// The first node changed or gone, said.
    pub fn check_nodes(&self, set: &ClusterPlanSet, skip: &[String]) -> Result<(), String> {
        for n in set.nodes.iter().filter(|n| !skip.contains(&n.node)) {
            self.rt.block_on(self.unchanged(n))?;
        }
        Ok(())
    }

    async fn unchanged(&self, n: &NodePlan) -> Result<(), String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = match within(self.limits.verb, "get nodes", nodes.get_opt(&n.node)).await? {
            Ok(Some(x)) => x,
            Ok(None) => {
                return Err(format!(
                    "the node {} is gone from the cluster (deleted since the plan): nothing was done to it",
                    n.node
                ));
            }
            Err(e) => return Err(said(&e, "get", "nodes", None).to_string()),
        };
        let labels = partition_labels(&node_of(&node));
        let pods = gpu_pods(&self.ops(&n.node))
            .await
            .map_err(|e| e.to_string())?;
        let ids: Vec<(String, String)> = pods
            .iter()
            .map(|p| (format!("{}/{}", p.0, p.1), p.2.clone()))
            .collect();
        match changed_since(n, &labels, &ids) {
            None => Ok(()),
            Some(why) => Err(format!(
                "the node {} is refused: {why}; nothing was done to it. Plan again: partop fleet --kubernetes plan",
                n.node
            )),
        }
    }

    /// The steps from `first` on, each journaled before and after it acts.
    fn steps_from(
        &self,
        n: &NodePlan,
        first: Step,
        attempted: bool,
        log: &StepLog,
    ) -> Result<Vec<String>, String> {
        let mut said = Vec::new();
        for step in Step::of_engine(&n.engine)
            .into_iter()
            .filter(|s| *s >= first)
        {
            log.begin(step.key())?;
            self.crash_point("begin", Some(&n.node), step.key());
            let r = match (&n.engine, step) {
                (Manager::PartopApply { .. }, Step::Label) => self.apply_own(n, attempted, log),
                (Manager::PartopApply { .. }, Step::WaitState) => {
                    Ok("the node's own apply read its layout back".into())
                }
                _ => self.rt.block_on(self.step(n, step, log)),
            };
            if r.is_ok() {
                self.crash_point("acted", Some(&n.node), step.key());
            }
            match r {
                Ok(text) => {
                    log.done(step.key(), &text)?;
                    self.crash_point("end", Some(&n.node), step.key());
                    said.push(format!("{}: {text}", step.key()));
                }
                Err(e) => return Err(self.failed_at(n, step, &e, log)),
            }
        }
        Ok(said)
    }

    /// A failed step in words: the step, the reason, and what is left on the node with its undo.
    fn failed_at(&self, n: &NodePlan, step: Step, e: &str, log: &StepLog) -> String {
        let mut s = format!("failed at {}: {e}", step.key());
        if step > Step::Cordon
            && let Some(left) = self
                .rt
                .block_on(cordon_undo(&self.ops(&n.node), &log.owner()))
        {
            s.push_str(&format!(
                "; the node {} is left cordoned by this rollout: resume to finish, or undo: {left}",
                n.node
            ));
        }
        s
    }

    /// A node no manager owns: its own plan applied there by `partop apply` (the ssh engine's
    /// code: the plan on stdin, `--yes`, read back). A node attempted before continues its own
    /// run when its journal has one, else applies afresh: the node's journal decides.
    fn apply_own(&self, n: &NodePlan, attempted: bool, log: &StepLog) -> Result<String, String> {
        let Manager::PartopApply { dest, partop, plan } = &n.engine else {
            return Err("not a partop apply node".into());
        };
        let t = self.transport.as_ref().ok_or_else(|| {
            "no transport to reach the node (the engine was not given one)".to_string()
        })?;
        let ssh = super::rollout::NodePlan {
            node: n.node.clone(),
            dest: dest.clone(),
            partop: partop.clone(),
            plan: (**plan).clone(),
        };
        let how = if attempted {
            match super::rollout::node_has_run(t, &ssh) {
                Ok(true) => NodeStart::Resume,
                Ok(false) => NodeStart::ApplyAgain,
                Err(e) => NodeStart::Unknown(e),
            }
        } else {
            NodeStart::Apply
        };
        if how == NodeStart::Resume {
            log.note(
                "its own journal has a run of this plan: continued (partop apply --resume)".into(),
            );
        }
        let o = super::rollout::apply_node(t, &ssh, &how)?;
        let steps = super::rollout::step_lines(&o);
        Ok(format!(
            "partop apply {}: {} step(s) done, read back",
            crate::domain::cluster_rollout::reach_words(dest),
            steps.len()
        ))
    }

    async fn step(&self, n: &NodePlan, step: Step, log: &StepLog) -> Result<String, String> {
        let ops = self.ops(&n.node);
        let e = |e: K8sError| e.to_string();
        match step {
            Step::Cordon => cordon(&ops, log).await,
            Step::Evict => evict(&ops, &n.pods, log).await.map_err(e),
            Step::Label => self.label(&ops, &n.engine).await,
            Step::WaitState => self.wait_state(&ops, &n.engine).await,
            Step::WaitAllocatable => self.wait_allocatable(&ops, &n.expected).await,
            Step::Uncordon => ops.uncordon_owned(&log.owner()).await.map_err(e),
        }
    }

    /// Writes the DCM profile if the plan says so (only over what the plan saw), then labels
    /// the node for its manager; a manager that answered a failure to the same label is asked
    /// again by taking the label off first (only a change makes it act). The old answer is
    /// cleared so the next one is to this request.
    async fn label(&self, ops: &NodeOps, engine: &Manager) -> Result<String, String> {
        let mut said = Vec::new();
        if let (Manager::Dcm { .. }, Some(p)) = (engine, &self.profile) {
            let _one = self.profile_lock.lock().await;
            said.push(self.write_profile(p).await?);
        }
        let node = ops.get_node().await.map_err(|e| gone_or(&ops.node, &e))?;
        let labels = node_of(&node).labels;
        let Some((key, value)) = engine.label() else {
            return Err(format!("{} is asked by no label", engine.words()));
        };
        if labels.get(key).map(String::as_str) == Some(value) {
            patch_labels(ops, &[(key, None), (engine.state_label(), None)]).await?;
            said.push(format!("{key} taken off to ask again"));
        }
        patch_labels(ops, &[(key, Some(value)), (engine.state_label(), None)]).await?;
        said.push(format!("labelled {key}={value}"));
        Ok(said.join("; "))
    }

    async fn write_profile(&self, p: &ProfileChange) -> Result<String, String> {
        let (ns, name, key) = DCM_FILE;
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let cm = within(self.limits.verb, "get configmaps", api.get_opt(name))
            .await?
            .map_err(|e| said(&e, "get", "configmaps", Some(ns)).to_string())?;
        let text = cm
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(key).cloned());
        let now = profile_in(text.as_deref(), &p.profile)?;
        if now.as_ref() == Some(&p.after) {
            return Ok(format!("DCM profile {} already as planned", p.profile));
        }
        if now != p.before {
            return Err(format!(
                "{ns}/{name} profile {} changed since the plan (it is not what the plan showed): nothing written; plan again",
                p.profile
            ));
        }
        let doc = with_profile(text.as_deref(), &p.profile, &p.after)?;
        let Some(cm) = cm else {
            return Err(format!(
                "{ns}/{name} is gone since the plan: DCM reads its profiles there; nothing written"
            ));
        };
        // The read's resourceVersion goes with the patch: an edit in between is a conflict
        // (409), never overwritten.
        let patch = json!({"metadata": {"resourceVersion": cm.metadata.resource_version},
                           "data": {key: doc}});
        within(
            self.limits.verb,
            "patch configmaps",
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await?
        .map_err(|e| said(&e, "patch", "configmaps", Some(ns)).to_string())?;
        Ok(format!("DCM profile {} written to {ns}/{name}", p.profile))
    }

    async fn wait_state(&self, ops: &NodeOps, engine: &Manager) -> Result<String, String> {
        let end = Instant::now() + self.manager_wait;
        loop {
            let node = ops.get_node().await.map_err(|e| gone_or(&ops.node, &e))?;
            match answer(engine, &node_of(&node).labels) {
                Answer::Success => {
                    return Ok(format!("{}=success", engine.state_label()));
                }
                Answer::Failed(state) => {
                    let events = within(
                        self.limits.verb,
                        "list events",
                        manager_events(&self.client, &ops.node),
                    )
                    .await
                    .unwrap_or_default();
                    return Err(failure_reason(engine, &state, &events));
                }
                Answer::Waiting if Instant::now() >= end => {
                    return Err(format!(
                        "{} did not answer in {} within {} s",
                        engine.words(),
                        engine.state_label(),
                        self.manager_wait.as_secs()
                    ));
                }
                Answer::Waiting => tokio::time::sleep(self.limits.poll).await,
            }
        }
    }

    async fn wait_allocatable(
        &self,
        ops: &NodeOps,
        expected: &BTreeMap<String, i64>,
    ) -> Result<String, String> {
        let end = Instant::now() + self.manager_wait;
        loop {
            let now = ops
                .allocatable()
                .await
                .map_err(|e| gone_or(&ops.node, &e))?;
            let differ = crate::domain::k8s_ops::allocatable_differs(expected, &now);
            if differ.is_empty() {
                return Ok(format!(
                    "the kubelet advertises {}",
                    expected
                        .iter()
                        .map(|(r, n)| format!("{r}={n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            if Instant::now() >= end {
                return Err(format!(
                    "the node {} still advertises {} after {} s: its device plugin did not re-register (restart its pod)",
                    ops.node,
                    differ.join(", "),
                    self.manager_wait.as_secs()
                ));
            }
            tokio::time::sleep(self.limits.poll).await;
        }
    }
}

impl Engine<ClusterPlanSet> for ClusterEngine {
    fn can_start(&self, set: &ClusterPlanSet) -> Result<(), String> {
        self.preflight(set)
    }

    fn still_valid(&self, set: &ClusterPlanSet, skip: &[String]) -> Result<(), String> {
        self.check_nodes(set, skip)
    }

    fn node_start(&self, n: &NodePlan, start: &Start) -> NodeStart {
        if start.attempted.contains(&n.node) {
            NodeStart::Resume
        } else {
            NodeStart::Apply
        }
    }

    fn run(&self, n: &NodePlan, how: &NodeStart, log: &StepLog) -> Result<Vec<String>, String> {
        let done: Vec<Step> = log
            .done_before
            .iter()
            .filter_map(|k| Step::of_key(k))
            .collect();
        let first = match how {
            NodeStart::Resume => Step::resume_at(&Step::of_engine(&n.engine), &done),
            _ => Some(Step::Cordon),
        };
        let Some(first) = first else {
            return Ok(vec!["every step was done before".into()]);
        };
        let own_drain_begun = *how == NodeStart::Resume && !n.engine.rollout_drains();
        if first == Step::Cordon && !own_drain_begun {
            // Not touched yet: it must be as planned (a node whose own apply drains may have
            // begun it: its journal decides, in `apply_own`).
            self.rt.block_on(self.unchanged(n))?;
        }
        self.steps_from(n, first, *how == NodeStart::Resume, log)
    }

    fn journaled(&self, event: &crate::domain::journal::RolloutEvent) {
        if self.crash_at.is_none() {
            return;
        }
        let (action, targets, _) = event.encode("");
        let what = action.strip_prefix("fleet.").unwrap_or(action);
        self.crash_point("end", targets["node"].as_str(), what);
    }
}

/// Whether every node of `set` is a rehearsal node, one `partop sim cluster` made and keeps
/// (`domain::cluster_rollout::rehearsal_node`: its label and the kubelet version it reports):
/// what arms the crash injection. A node that cannot be read is not one.
async fn rehearsal(client: &kube::Client, set: &ClusterPlanSet) -> bool {
    let nodes: Api<Node> = Api::all(client.clone());
    for n in &set.nodes {
        let Ok(Some(node)) = nodes.get_opt(&n.node).await else {
            return false;
        };
        let kubelet = node
            .status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.kubelet_version.as_str());
        if !crate::domain::cluster_rollout::rehearsal_node(
            &node.metadata.labels.unwrap_or_default(),
            kubelet,
        ) {
            return false;
        }
    }
    !set.nodes.is_empty()
}

/// A node error as said: a node gone is said as such.
fn gone_or(node: &str, e: &K8sError) -> String {
    if e.to_string().contains("(404") || e.to_string().contains("not found") {
        format!("the node {node} is gone from the cluster (deleted during the rollout)")
    } else {
        e.to_string()
    }
}

/// The undo of a cordon partop left (None: the node is not cordoned by partop, or gone).
async fn cordon_undo(ops: &NodeOps, owner: &str) -> Option<String> {
    let n = ops.get_node().await.ok()?;
    let ours = n
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(super::k8s::CORDONED_BY_PARTOP))
        .is_some_and(|h| h == owner || h == "true");
    let cordoned = n.spec.and_then(|s| s.unschedulable).unwrap_or(false);
    (ours && cordoned)
        .then(|| crate::domain::k8s_ops::undo_commands(&ops.node, true, false).join("; "))
}

async fn patch_labels(ops: &NodeOps, labels: &[(&str, Option<&str>)]) -> Result<(), String> {
    let l: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| {
            (
                (*k).to_string(),
                v.map_or(serde_json::Value::Null, |v| json!(v)),
            )
        })
        .collect();
    ops.patch_node(&json!({"metadata": {"labels": l}}))
        .await
        .map_err(|e| gone_or(&ops.node, &e))
}

/// The planned pods evicted (each by its planned UID; one gone or replaced is not evicted), a
/// budget's refusal told while it is retried, then waited until gone.
async fn evict(ops: &NodeOps, pods: &[Eviction], log: &StepLog) -> Result<String, K8sError> {
    let mut evicted = Vec::new();
    for p in pods {
        let id = crate::domain::k8s_ops::PodId {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
        };
        let done = ops
            .evict(&id, None, false, |budget, words| {
                log.note(format!(
                    "evict {}: refused by {budget}: {words}; retrying",
                    p.label()
                ));
            })
            .await?;
        if done {
            evicted.push(id);
        }
    }
    ops.wait_gone(&evicted).await?;
    Ok(if evicted.is_empty() {
        "no pod to evict".into()
    } else {
        format!(
            "{} pod(s) evicted and gone: {}",
            evicted.len(),
            evicted
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// The rollout's cordon of a node, the journal told when the cordon is not this rollout's (the
/// node was cordoned by someone else, or another partop change holds it): what it left
/// cordoned is then not said as its own, with an undo that would lift another's cordon.
async fn cordon(ops: &NodeOps, log: &StepLog) -> Result<String, String> {
    let not_ours = |why: &str| log.mark(crate::domain::cluster_rollout::CORDON_NOT_OURS, why);
    match ops.cordon_claim(&log.owner()).await {
        Ok((said, true)) => Ok(said),
        Ok((said, false)) => {
            not_ours(&said)?;
            Ok(said)
        }
        Err(e @ K8sError::Held(_)) => {
            let said = e.to_string();
            not_ours(&said)?;
            Err(said)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// An API call bounded like every verb of a drain (`Limits::verb`): a hung API server fails
/// the step, named, instead of holding the rollout for the client's own 300 s read timeout.
async fn within<T>(
    limit: Duration,
    what: &str,
    f: impl std::future::Future<Output = T>,
) -> Result<T, String> {
    tokio::time::timeout(limit, f).await.map_err(|_| {
        format!(
            "{what}: no answer from the API server within {} s",
            limit.as_secs()
        )
    })
}

/// The manager's Warning events on the node, oldest first: (reason, message, component).
async fn manager_events(client: &kube::Client, node: &str) -> Vec<(String, String, String)> {
    let api: Api<Event> = Api::all(client.clone());
    let lp = ListParams::default().fields(&format!(
        "involvedObject.kind=Node,involvedObject.name={node}"
    ));
    let Ok(list) = api.list(&lp).await else {
        return Vec::new();
    };
    let mut v: Vec<(u64, Event)> = list
        .items
        .into_iter()
        .map(|e| {
            let rv = e
                .metadata
                .resource_version
                .as_deref()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            (rv, e)
        })
        .collect();
    // The API server's resourceVersions grow with each write: the newest event last.
    v.sort_by_key(|(rv, _)| *rv);
    v.into_iter()
        .map(|(_, e)| {
            (
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.source.and_then(|s| s.component).unwrap_or_default(),
            )
        })
        .collect()
}

/// The pods on the node's GPUs that the rollout evicts: (namespace, name, UID, requests, pod).
/// DaemonSet pods are not among them (an evicted one would come back at once; the plan names
/// them), nor pods already finished.
async fn gpu_pods(
    ops: &NodeOps,
) -> Result<Vec<(String, String, String, BTreeMap<String, i64>, Pod)>, K8sError> {
    Ok(ops
        .pods_on_node(None)
        .await?
        .into_iter()
        .filter(|p| {
            !p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "DaemonSet")
                && p.metadata.deletion_timestamp.is_none()
                && !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
        })
        .filter_map(|p| {
            let g = pod_of(&p)?;
            Some((
                g.namespace,
                g.name,
                p.metadata.uid.clone().unwrap_or_default(),
                g.requests,
                p,
            ))
        })
        .collect())
}

/// What a plan is made of, read from the cluster, and the nodes it could not plan (why).
pub struct Planned {
    /// The set (its fingerprint computed).
    pub set: ClusterPlanSet,
    /// Nodes refused, each with its reason.
    pub refused: Vec<String>,
    /// DaemonSet pods on the nodes' GPUs, left where they are: (node, pod).
    pub daemons: Vec<(String, String)>,
    /// Nodes already at the target (labelled, answered, advertising it; or, for a node no
    /// manager owns, its own plan changes nothing): not in the set.
    pub already: Vec<String>,
}

/// Plans `target` on every GPU node of `t` (its selector), in name order.
///
/// # Errors
/// The API server refused or could not be reached.
pub async fn plan(
    t: &crate::collect::cluster::Target,
    target: &Target,
    limits: Limits,
) -> Result<Planned, String> {
    plan_for(t, target, limits, None, None).await
}

/// Plans `target` on the GPU nodes of `t` named in `only` (None: every one), in name order:
/// the nodes tagged in the live cluster view. A name that is no GPU node under the selector is
/// refused with that reason, never dropped.
///
/// # Errors
/// The API server refused or could not be reached.
pub async fn plan_nodes(
    t: &crate::collect::cluster::Target,
    target: &Target,
    limits: Limits,
    only: Option<&[String]>,
) -> Result<Planned, String> {
    plan_for(t, target, limits, only, None).await
}

/// Plans `target` as [`plan`] does; an AMD node no manager owns that `reach` can reach gets
/// partop's own plan, made on the node (its engine `partop apply`), and one it cannot reach
/// is refused saying how to give its destination.
///
/// # Errors
/// The API server refused or could not be reached.
pub async fn plan_reaching(
    t: &crate::collect::cluster::Target,
    target: &Target,
    limits: Limits,
    reach: Option<&Reach>,
) -> Result<Planned, String> {
    plan_for(t, target, limits, None, reach).await
}

/// The planner behind [`plan`], [`plan_nodes`] and [`plan_reaching`]: the nodes in `only`
/// (None: every GPU node), the unmanaged ones reached through `reach`.
///
/// # Errors
/// The API server refused or could not be reached.
pub async fn plan_for(
    t: &crate::collect::cluster::Target,
    target: &Target,
    limits: Limits,
    only: Option<&[String]>,
    reach: Option<&Reach>,
) -> Result<Planned, String> {
    let ops = NodeOps::connect(t, "", limits)
        .await
        .map_err(|e| e.to_string())?;
    let client = ops.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let mut lp = ListParams::default();
    if let Some(s) = &t.selector {
        lp = lp.labels(s);
    }
    let mut list: Vec<Node> = nodes
        .list(&lp)
        .await
        .map_err(|e| said(&e, "list", "nodes", None).to_string())?
        .items;
    list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let dcm = configmap_text(&client, DCM_FILE).await?;
    let mig = configmap_text(&client, MIG_FILE).await?;
    let budgets: Api<PodDisruptionBudget> = Api::all(client.clone());
    let budgets = budgets
        .list(&ListParams::default())
        .await
        .map_err(|e| said(&e, "list", "poddisruptionbudgets", None).to_string())?
        .items;
    let mut out = Planned {
        set: ClusterPlanSet {
            fingerprint: String::new(),
            created_at: crate::collect::clock::rfc3339(crate::collect::clock::now_ms()),
            target: target.clone(),
            profile: None,
            nodes: Vec::new(),
        },
        refused: Vec::new(),
        daemons: Vec::new(),
        already: Vec::new(),
    };
    let mut gpus_of_profile: Option<u32> = None;
    let gpu_nodes: Vec<_> = list
        .iter()
        .map(|n| (n, node_of(n)))
        .filter(|(_, n)| !n.capacity.is_empty())
        .filter(|(_, n)| only.is_none_or(|o| o.contains(&n.name)))
        .collect();
    for name in only.unwrap_or_default() {
        if !gpu_nodes.iter().any(|(_, n)| &n.name == name) {
            out.refused.push(format!(
                "{name} is no GPU node under this selector (deleted, or it advertises no GPU resource)"
            ));
        }
    }
    for (raw, node) in gpu_nodes {
        let own = reach
            .filter(|_| own_apply(&node, target, dcm.is_some()))
            .and_then(|r| r.dest_of(raw).map(|d| (r, d)));
        let planned = plan_node(&ops, &node, target, (dcm.as_deref(), mig.as_deref()), &budgets, own)
            .await
            .and_then(|(p, d, gpus)| {
                match (gpus, gpus_of_profile) {
                    (Some(g), Some(h)) if g != h => {
                        return Err(NotPlanned::Refused(format!(
                            "{} has {g} GPUs where the set's other nodes have {h}: one DCM profile gives a count of GPUs; plan it in its own set (-l)",
                            node.name
                        )));
                    }
                    (Some(g), _) => gpus_of_profile = Some(g),
                    _ => {}
                }
                Ok((p, d))
            });
        match planned {
            Ok((p, _)) if crate::domain::cluster_rollout::at_target(&p, &node) => {
                out.already.push(p.node);
            }
            Ok((p, d)) => {
                out.daemons
                    .extend(d.into_iter().map(|x| (p.node.clone(), x)));
                out.set.nodes.push(p);
            }
            Err(NotPlanned::AtTarget) => out.already.push(node.name.clone()),
            Err(NotPlanned::Refused(why)) => out.refused.push(why),
        }
    }
    if let (Target::Layout { compute, memory }, Some(g)) = (target, gpus_of_profile) {
        let (name, after) = dcm_profile(*compute, *memory, g);
        out.set.profile = Some(ProfileChange {
            before: profile_in(dcm.as_deref(), &name)?,
            profile: name,
            after,
        });
    }
    out.set.fingerprint = out.set.computed();
    Ok(out)
}

type NodePlanned = (NodePlan, Vec<String>, Option<u32>);

/// Why a node is not in the set.
enum NotPlanned {
    /// It cannot be rolled out: the reason.
    Refused(String),
    /// Its own plan changes nothing: it is at the target already.
    AtTarget,
}

impl From<String> for NotPlanned {
    fn from(why: String) -> Self {
        Self::Refused(why)
    }
}

/// One node's plan: its engine, the pods on its GPUs with the budgets that select them, the
/// capacity expected after; the DaemonSet pods left; its GPUs (for DCM's profile).
async fn plan_node(
    ops: &NodeOps,
    node: &crate::domain::cluster::ClusterNode,
    target: &Target,
    (dcm, mig): (Option<&str>, Option<&str>),
    budgets: &[PodDisruptionBudget],
    own: Option<(&Reach, String)>,
) -> Result<NodePlanned, NotPlanned> {
    let engine = match (own, target) {
        (Some((r, dest)), Target::Layout { compute, memory }) => {
            own_plan(r, &node.name, dest, *compute, *memory).await?
        }
        _ => engine_for(node, target, dcm.is_some(), mig.is_some())?,
    };
    let (expected, gpus) = match target {
        Target::Layout { compute, memory } => (
            match &engine {
                // The node's own Kubernetes plan counts its partitions from its GPUs, not from
                // labels a labeller may not have written.
                Manager::PartopApply { plan, .. } if plan.kubernetes.is_some() => plan
                    .kubernetes
                    .as_ref()
                    .map(|k| k.allocatable.clone())
                    .unwrap_or_default(),
                _ => amd_expected(node, *compute, *memory)?,
            },
            // Only a DCM node counts towards the profile's GPUs.
            matches!(engine, Manager::Dcm { .. })
                .then(|| amd_physical(node))
                .transpose()?,
        ),
        Target::MigConfig { name } => (
            crate::domain::cluster_rollout::mig_expected(node, mig.unwrap_or_default(), name)?,
            None,
        ),
    };
    let on = NodeOps::new(ops.client(), &node.name, ops.limits);
    let all = on.pods_on_node(None).await.map_err(|e| e.to_string())?;
    let daemons: Vec<String> = all
        .iter()
        .filter(|p| {
            pod_of(p).is_some()
                && p.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == "DaemonSet")
        })
        .map(|p| {
            format!(
                "{}/{}",
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default()
            )
        })
        .collect();
    let pods = gpu_pods(&on)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(namespace, name, uid, requests, pod)| {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            let budgets = budgets
                .iter()
                .filter(|b| b.metadata.namespace.as_deref() == Some(namespace.as_str()))
                .filter(|b| {
                    b.spec
                        .as_ref()
                        .and_then(|s| s.selector.as_ref())
                        .is_some_and(|sel| selects(sel, &labels))
                })
                .map(|b| Budget {
                    name: b.metadata.name.clone().unwrap_or_default(),
                    allowed: b
                        .status
                        .as_ref()
                        .and_then(|s| s.disruptions_allowed)
                        .unwrap_or(0),
                })
                .collect();
            Eviction {
                namespace,
                name,
                uid,
                requests,
                budgets,
            }
        })
        .collect();
    let mut p = NodePlan {
        node: node.name.clone(),
        engine,
        pods,
        expected,
        labels: partition_labels(node),
        fingerprint: String::new(),
    };
    p.fingerprint = p.computed();
    Ok((p, daemons, gpus))
}

/// The `partop apply` engine of `node` at `dest`: the node's own plan of the layout, made there
/// (blocking, off the runtime's workers). Its reason, naming the node, when it could not.
async fn own_plan(
    r: &Reach,
    node: &str,
    dest: String,
    compute: crate::domain::ComputeMode,
    memory: crate::domain::MemoryMode,
) -> Result<Manager, NotPlanned> {
    let (t, partop) = (r.transport.clone(), r.partop.clone());
    let d = dest.clone();
    let plan = tokio::task::spawn_blocking(move || {
        super::rollout::plan_on(
            &t,
            &d,
            &partop,
            Some(compute.name()),
            Some(memory.name()),
        )
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| {
        // The node's planner says so when its GPUs are in the modes already (its own words).
        if e.contains(&crate::domain::plan::PlanError::NoChange.to_string()) {
            NotPlanned::AtTarget
        } else {
            NotPlanned::Refused(format!(
                "{node} is not managed by a partition manager, and its own plan at {dest} could not be made: {e}"
            ))
        }
    })?;
    if let Some(why) = crate::domain::cluster_rollout::own_plan_refusal(node, &plan) {
        return Err(NotPlanned::Refused(why));
    }
    Ok(Manager::PartopApply {
        dest,
        partop: r.partop.clone(),
        plan: Box::new(plan),
    })
}

/// A manager's ConfigMap document (None: no such ConfigMap, so no such manager).
async fn configmap_text(
    client: &kube::Client,
    (ns, name, key): (&str, &str, &str),
) -> Result<Option<String>, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = api
        .get_opt(name)
        .await
        .map_err(|e| said(&e, "get", "configmaps", Some(ns)).to_string())?;
    Ok(cm.map(|c| c.data.and_then(|d| d.get(key).cloned()).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(addresses: &[(&str, &str)]) -> Node {
        let a: Vec<serde_json::Value> = addresses
            .iter()
            .map(|(t, a)| json!({"type": t, "address": a}))
            .collect();
        serde_json::from_value(json!({"metadata": {"name": "n1"}, "status": {"addresses": a}}))
            .unwrap_or_default()
    }

    fn reach(dests: &[(&str, &str)], user: Option<&str>) -> Reach {
        Reach {
            transport: Transport {
                ssh: "ssh".into(),
                ssh_config: None,
                control_dir: "/nonexistent".into(),
                connect_timeout: Duration::from_secs(1),
                refresh: 1,
                concurrency: 1,
                local: "partop".into(),
            },
            dests: dests
                .iter()
                .map(|(n, d)| ((*n).to_string(), (*d).to_string()))
                .collect(),
            user: user.map(str::to_string),
            partop: "partop".into(),
        }
    }

    /// Where a node no manager owns is reached (6 cases): the operator's mapping first, else
    /// USER@ its InternalIP, never an ExternalIP or a guess.
    #[test]
    fn a_node_s_destination_is_the_mapping_or_its_internal_ip_with_the_user() {
        let internal = node(&[("ExternalIP", "203.0.113.9"), ("InternalIP", "10.0.0.7")]);
        let external = node(&[("ExternalIP", "203.0.113.9"), ("Hostname", "n1")]);
        let cases = [
            (
                reach(&[("n1", "gpu07")], Some("ops")),
                &internal,
                Some("gpu07"),
            ),
            (
                reach(&[("n1", "rehearse:/s")], None),
                &external,
                Some("rehearse:/s"),
            ),
            (
                reach(&[("n2", "gpu08")], Some("ops")),
                &internal,
                Some("ops@10.0.0.7"),
            ),
            (reach(&[], None), &internal, None),
            (reach(&[], Some("ops")), &external, None),
            (reach(&[("n2", "gpu08")], None), &internal, None),
        ];
        for (i, (r, n, want)) in cases.iter().enumerate() {
            assert_eq!(r.dest_of(n).as_deref(), *want, "case {i} of 6");
        }
    }
}
