//! A rollout through a Kubernetes cluster, pure (issue 26, item 2): what one node's plan is
//! (the pods evicted and the PodDisruptionBudgets that allow it now, the engine that changes
//! the partitions: a DCM profile or a MIG-manager config, the capacity expected afterwards, the
//! partition labels it was planned against), the set's fingerprint, the DCM profile written
//! into its ConfigMap, the steps each node goes through and where a resumed node continues.
//! Planned by `exec::cluster_rollout` from what the API server says; rolled out by
//! `exec::rollout` with that module as its node engine.

use super::cluster::{AMD_PARTITION, ClusterNode, DCM_PROFILE, DCM_STATE, MIG_CONFIG, MIG_STATE};
use super::k8s_ops::Access;
use super::modes::{ComputeMode, MemoryMode};
use super::partition_managers::{
    DCM_CONFIGMAP, DCM_KEY, DCM_NAMESPACE, MIG_CONFIGMAP, MIG_KEY, MIG_NAMESPACE, mig_layout,
    mig_resources,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// XCDs per GPU the node labels cannot tell (an MI300X's 8; the fleet view assumes the same).
pub const XCDS: u32 = 8;

/// What the set asks of every node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// An AMD layout (`cpx_nps4`), through DCM.
    Layout {
        /// Compute mode.
        compute: ComputeMode,
        /// Memory mode.
        memory: MemoryMode,
    },
    /// A config of the MIG manager's mig-parted file.
    MigConfig {
        /// Its name.
        name: String,
    },
}

impl Target {
    /// `cpx_nps4` or `mig config all-1g.10gb`.
    pub fn words(&self) -> String {
        match self {
            Self::Layout { compute, memory } => layout_label(*compute, *memory),
            Self::MigConfig { name } => format!("MIG config {name}"),
        }
    }
}

/// `<compute>_<memory>` as the AMD node labeller writes it.
pub fn layout_label(c: ComputeMode, m: MemoryMode) -> String {
    format!("{}_{}", c.name().to_lowercase(), m.name().to_lowercase())
}

/// Parses `cpx_nps4`.
///
/// # Errors
/// Not `<compute>_<memory>` of known modes.
pub fn parse_layout(s: &str) -> Result<(ComputeMode, MemoryMode), String> {
    let (c, m) = s
        .split_once('_')
        .ok_or_else(|| format!("{s:?}: a layout is <compute>_<memory>, as cpx_nps4"))?;
    let c = c
        .parse()
        .map_err(|_| format!("{s:?}: {c:?} is not a compute mode (spx dpx tpx qpx cpx)"))?;
    let m = m
        .parse()
        .map_err(|_| format!("{s:?}: {m:?} is not a memory mode (nps1 nps2 nps4 nps8)"))?;
    Ok((c, m))
}

/// The engine that changes a node's partitions: the cluster's own manager, asked by label.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Engine {
    /// AMD's Device Config Manager: the node labelled with a profile of its ConfigMap.
    Dcm {
        /// The profile.
        profile: String,
    },
    /// NVIDIA's MIG manager: the node labelled with a mig-parted config.
    MigManager {
        /// The config.
        config: String,
    },
    /// No manager owns the node: partop's own plan made on the node (`partop plan` over the
    /// fleet's transport, fingerprinted, embedded here) and applied there by `partop apply`.
    PartopApply {
        /// Where it is reached: an ssh destination, or `rehearse:STATE` for a simulated node.
        dest: String,
        /// The partop on the node.
        partop: String,
        /// The node's own plan, as it made it.
        plan: Box<super::plan::Plan>,
    },
}

impl Engine {
    /// The node label that asks the manager, and its value (None: `partop apply`, asked by no
    /// label).
    pub fn label(&self) -> Option<(&'static str, &str)> {
        match self {
            Self::Dcm { profile } => Some((DCM_PROFILE, profile)),
            Self::MigManager { config } => Some((MIG_CONFIG, config)),
            Self::PartopApply { .. } => None,
        }
    }

    /// The label the manager answers in (`partop apply` answers itself: none).
    pub const fn state_label(&self) -> &'static str {
        match self {
            Self::Dcm { .. } => DCM_STATE,
            Self::MigManager { .. } => MIG_STATE,
            Self::PartopApply { .. } => "",
        }
    }

    /// The component whose events give its reason.
    pub const fn component(&self) -> &'static str {
        match self {
            Self::Dcm { .. } => "device-config-manager",
            Self::MigManager { .. } => "nvidia-mig-manager",
            Self::PartopApply { .. } => "partop",
        }
    }

    /// `DCM profile partop-cpx-nps4`, `partop apply over ssh node07 (plan 1a2b…)`.
    pub fn words(&self) -> String {
        match self {
            Self::Dcm { profile } => format!("DCM profile {profile}"),
            Self::MigManager { config } => format!("MIG-manager config {config}"),
            Self::PartopApply { dest, plan, .. } => format!(
                "partop apply {} (its own plan {}: {} GPU(s) changed{})",
                reach_words(dest),
                plan.fingerprint,
                plan.changes.len(),
                if plan.kubernetes.is_some() {
                    "; it cordons and evicts itself"
                } else {
                    ""
                }
            ),
        }
    }

    /// Who cordons and evicts a node of this engine: the rollout (`true`), or, for a
    /// `partop apply` whose own plan is a Kubernetes plan (its partop sees its kubelet), that
    /// apply, which cordons, evicts, journals and resumes its drain on the node itself.
    /// Never both: a second cordon would be one the node's apply did not make, so it would
    /// leave it (partop lifts only its own), and the pods would be evicted twice over.
    pub fn rollout_drains(&self) -> bool {
        match self {
            Self::PartopApply { plan, .. } => plan.kubernetes.is_none(),
            _ => true,
        }
    }
}

/// Why the node's own plan cannot be applied as `node`'s (None: it can): a Kubernetes plan
/// drains the Node its partop names (its kubelet's, the host name), and draining another Node
/// than the one planned would cordon and evict the wrong node.
pub fn own_plan_refusal(node: &str, plan: &super::plan::Plan) -> Option<String> {
    let k = plan.kubernetes.as_ref()?;
    (k.node != node).then(|| {
        format!(
            "{node}'s own plan is for the Kubernetes node {:?} (its partop's host name): it would cordon and evict that node, not {node}; reach {node} at its own destination",
            k.node
        )
    })
}

/// `over ssh DEST`, or `on the rehearsal node STATE`.
pub fn reach_words(dest: &str) -> String {
    match dest.strip_prefix("rehearse:") {
        Some(state) => format!("on the rehearsal node {state}"),
        None => format!("over ssh {dest}"),
    }
}

/// The label DCM's DaemonSet selects its nodes by (the AMD GPU operator's default selector of
/// a DeviceConfig): a node without it has no DCM running on it, whatever the ConfigMap says.
pub const DCM_SELECTOR: (&str, &str) = ("feature.node.kubernetes.io/amd-gpu", "true");

/// Whether DCM manages `node`: its ConfigMap exists (`dcm`) and the node is one its DaemonSet
/// runs on (selected by [`DCM_SELECTOR`]) or one it already answered or was asked on (a DCM
/// label in use).
pub fn dcm_manages(node: &ClusterNode, dcm: bool) -> bool {
    dcm && (node.labels.get(DCM_SELECTOR.0).map(String::as_str) == Some(DCM_SELECTOR.1)
        || node.labels.contains_key(DCM_PROFILE)
        || node.labels.contains_key(DCM_STATE))
}

/// What the manager's state label says now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// No answer yet (absent, `pending`, `rebooting`).
    Waiting,
    /// `success`.
    Success,
    /// `failure` (DCM) or `failed` (MIG manager): the state's word.
    Failed(String),
}

/// The manager's answer in `labels`.
pub fn answer(engine: &Engine, labels: &BTreeMap<String, String>) -> Answer {
    match labels.get(engine.state_label()).map(String::as_str) {
        Some("success") => Answer::Success,
        Some(s @ ("failure" | "failed")) => Answer::Failed(s.to_string()),
        _ => Answer::Waiting,
    }
}

/// A PodDisruptionBudget that selects a pod, as it stood at planning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Its name (in the pod's namespace).
    pub name: String,
    /// Disruptions it allowed then (`status.disruptionsAllowed`).
    pub allowed: i32,
}

/// A pod the rollout evicts from a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Eviction {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its UID at planning (a new pod of that name is another pod, never evicted by this plan).
    pub uid: String,
    /// The GPU resources it asks for.
    pub requests: BTreeMap<String, i64>,
    /// The budgets that select it.
    pub budgets: Vec<Budget>,
}

impl Eviction {
    /// `namespace/name`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// What the budgets allow now, in words.
    pub fn budget_words(&self) -> String {
        if self.budgets.is_empty() {
            return "no PodDisruptionBudget".into();
        }
        self.budgets
            .iter()
            .map(|b| format!("PDB {} allows {} now", b.name, b.allowed))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One node's part of a cluster rollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlan {
    /// The Node's name.
    pub node: String,
    /// What changes its partitions.
    pub engine: Engine,
    /// The pods on its GPUs, evicted through the Eviction API.
    pub pods: Vec<Eviction>,
    /// What it must advertise allocatable afterwards, per GPU resource (0: no longer).
    pub expected: BTreeMap<String, i64>,
    /// Its partition labels at planning (verified before it is touched).
    pub labels: BTreeMap<String, String>,
    /// Over all of the above (`fingerprint::fnv` of its JSON without this field).
    pub fingerprint: String,
}

impl NodePlan {
    /// The fingerprint of its content now.
    pub fn computed(&self) -> String {
        let mut c = self.clone();
        c.fingerprint = String::new();
        super::fingerprint::fnv(&serde_json::to_string(&c).unwrap_or_default())
    }
}

/// The DCM profile a rollout writes into DCM's ConfigMap (shown in the plan as a diff).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileChange {
    /// The profile's name.
    pub profile: String,
    /// It as it was at planning (None: absent, or no ConfigMap).
    pub before: Option<Value>,
    /// It as the rollout writes it.
    pub after: Value,
}

impl ProfileChange {
    /// Whether the ConfigMap must be written.
    pub fn writes(&self) -> bool {
        self.before.as_ref() != Some(&self.after)
    }

    /// The diff in lines (`- old`, `+ new`), or that it is already there.
    pub fn diff(&self) -> Vec<String> {
        let at = format!("{DCM_NAMESPACE}/{DCM_CONFIGMAP} {DCM_KEY} gpu-config-profiles");
        if !self.writes() {
            return vec![format!(
                "{at}.{} is already as planned: not written",
                self.profile
            )];
        }
        let mut v = vec![format!(
            "{at}.{} {}:",
            self.profile,
            if self.before.is_some() {
                "changes"
            } else {
                "is created"
            }
        )];
        if let Some(b) = &self.before {
            v.push(format!("- {b}"));
        }
        v.push(format!("+ {}", self.after));
        v
    }
}

/// What `partop fleet --kubernetes plan` saves and `… apply` rolls out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterPlanSet {
    /// Over the node order, every node's plan and the profile written.
    pub fingerprint: String,
    /// When it was made.
    pub created_at: String,
    /// What it asks.
    pub target: Target,
    /// The DCM profile written first (None: a MIG config, which the MIG manager's own file
    /// must already have).
    pub profile: Option<ProfileChange>,
    /// The nodes in rollout order.
    pub nodes: Vec<NodePlan>,
}

impl ClusterPlanSet {
    /// The fingerprint of its content now: the nodes in order with their plans, the target and
    /// the profile.
    pub fn computed(&self) -> String {
        let mut pairs: Vec<(String, String)> = self
            .nodes
            .iter()
            .map(|n| (n.node.clone(), n.computed()))
            .collect();
        pairs.push((
            "target".into(),
            super::fingerprint::fnv(&serde_json::to_string(&self.target).unwrap_or_default()),
        ));
        pairs.push((
            "profile".into(),
            super::fingerprint::fnv(&serde_json::to_string(&self.profile).unwrap_or_default()),
        ));
        super::fleet::set_fingerprint(&pairs)
    }

    /// Why the saved set is not what was fingerprinted (None: intact).
    pub fn tampered(&self) -> Option<String> {
        if self.nodes.is_empty() {
            return Some("the set names no node".into());
        }
        // Names go into API paths and field selectors: only Kubernetes names.
        let named = self.nodes.iter().find_map(|n| {
            super::k8s_ops::name_problem("node", &n.node).or_else(|| {
                n.pods.iter().find_map(|p| {
                    super::k8s_ops::name_problem("namespace", &p.namespace)
                        .or_else(|| super::k8s_ops::name_problem("pod", &p.name))
                })
            })
        });
        if named.is_some() {
            return named;
        }
        if let Some(n) = self.nodes.iter().find(|n| {
            n.computed() != n.fingerprint
                || matches!(&n.engine, Engine::PartopApply { plan, .. } if !plan.content_intact())
        }) {
            return Some(format!(
                "the plan for {} was changed after it was made",
                n.node
            ));
        }
        let now = self.computed();
        (now != self.fingerprint).then(|| {
            format!(
                "the set's nodes, their order or the profile changed since it was made (fingerprint {} now {now})",
                self.fingerprint
            )
        })
    }
}

/// The steps of one node, in order. Each is journaled before and after it acts, so a resumed
/// rollout continues at the step where it stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// Marked unschedulable, as partop's own cordon.
    Cordon,
    /// The planned pods evicted through the Eviction API (budgets honoured) and gone.
    Evict,
    /// The manager asked: the DCM profile written (if the plan says so), the node labelled.
    Label,
    /// The manager's state label says `success` (a failure stops with its reason).
    WaitState,
    /// The kubelet advertises the expected allocatable.
    WaitAllocatable,
    /// Schedulable again (only a cordon of partop's is lifted).
    Uncordon,
}

impl Step {
    /// Every step in order.
    pub const ALL: [Self; 6] = [
        Self::Cordon,
        Self::Evict,
        Self::Label,
        Self::WaitState,
        Self::WaitAllocatable,
        Self::Uncordon,
    ];

    /// Its journal key.
    pub const fn key(self) -> &'static str {
        match self {
            Self::Cordon => "cordon",
            Self::Evict => "evict",
            Self::Label => "label",
            Self::WaitState => "wait_state",
            Self::WaitAllocatable => "wait_allocatable",
            Self::Uncordon => "uncordon",
        }
    }

    /// The step of a journal key.
    pub fn of_key(k: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.key() == k)
    }

    /// The steps the rollout takes on a node of `engine`: all of them, but for a `partop
    /// apply` that drains the node itself, none of the cordon, the eviction and the uncordon
    /// (its own apply does them; see [`Engine::rollout_drains`]).
    pub fn of_engine(engine: &Engine) -> Vec<Self> {
        let drains = engine.rollout_drains();
        Self::ALL
            .into_iter()
            .filter(|s| drains || !matches!(s, Self::Cordon | Self::Evict | Self::Uncordon))
            .collect()
    }

    /// Where a node of `steps` (its engine's, [`Self::of_engine`]) whose steps `done` were
    /// journaled done continues: the first of its steps not done (a node whose own apply drains
    /// has no cordon to begin again at); a manager's answer that did not come (or was a
    /// failure) asks the manager again, since only a new label makes it act.
    pub fn resume_at(steps: &[Self], done: &[Self]) -> Option<Self> {
        let next = steps.iter().copied().find(|s| !done.contains(s))?;
        Some(if next == Self::WaitState {
            Self::Label
        } else {
            next
        })
    }
}

/// The journal's word for a cordon step that found the node cordoned by someone else (left so)
/// or held by another partop change (refused): the rollout holds no cordon there.
pub const CORDON_NOT_OURS: &str = "cordon_not_ours";

/// The nodes a journaled rollout left cordoned, or may have, read in the order the lines were
/// written (`trail`: node, step, done): a cordon begun (done or not: a cordon killed or failed
/// after its patch may have acted) is the rollout's until its uncordon is journaled done, or
/// the same attempt says the cordon was not its own ([`CORDON_NOT_OURS`]: someone else's, or
/// another change's); a later cordon begun (a resume) counts again. Whatever stopped the
/// rollout: a failure, a kill, a lost terminal.
pub fn left_cordoned(trail: &[(String, String, bool)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (node, step, done) in trail {
        if step == Step::Cordon.key() && !done {
            if !out.contains(node) {
                out.push(node.clone());
            }
        } else if *done && (step == Step::Uncordon.key() || step == CORDON_NOT_OURS) {
            out.retain(|n| n != node);
        }
    }
    out
}

/// [`left_cordoned`] of a rollout, each with its undo (an ssh rollout's nodes drain themselves:
/// none).
pub fn left_cordoned_with_undo(r: &crate::domain::journal::Rollout) -> Vec<String> {
    left_cordoned(&r.trail)
        .into_iter()
        .map(|n| {
            format!(
                "{n} (undo: {})",
                crate::domain::k8s_ops::undo_commands(&n, true, false).join("; ")
            )
        })
        .collect()
}

/// The GPU resources a node advertises (capacity), by vendor.
fn has_amd(node: &ClusterNode) -> bool {
    node.capacity.keys().any(|k| k.starts_with("amd.com/"))
}

fn has_nvidia(node: &ClusterNode) -> bool {
    node.capacity.keys().any(|k| k.starts_with("nvidia.com/"))
}

/// The physical GPUs of an AMD node: its advertised partitions over the partitions per GPU of
/// its labelled layout (`XCDS` XCDs a GPU assumed, as the fleet view does).
///
/// # Errors
/// No partition label, or a count it cannot give.
pub fn amd_physical(node: &ClusterNode) -> Result<u32, String> {
    let (c, _) = super::cluster::amd_partition(node).ok_or_else(|| {
        format!(
            "{} has no {AMD_PARTITION} label: its physical GPUs cannot be told from its resources",
            node.name
        )
    })?;
    let per = i64::from(c.partitions(XCDS));
    let total: i64 = node
        .capacity
        .iter()
        .filter(|(k, _)| k.starts_with("amd.com/"))
        .map(|(_, v)| *v)
        .sum();
    if total <= 0 || total % per != 0 {
        return Err(format!(
            "{} advertises {total} AMD partitions, not a multiple of {per} ({c} on {XCDS} XCDs): fix its device plugin first",
            node.name
        ));
    }
    u32::try_from(total / per).map_err(|_| format!("{}: {total} partitions", node.name))
}

/// What an AMD node advertises after `c`/`m`: the device plugin's `single` naming
/// (`amd.com/gpu`, every partition one) or its `mixed` naming (`amd.com/<c>_<m>`, and the old
/// layout's resource no longer).
///
/// # Errors
/// As [`amd_physical`].
pub fn amd_expected(
    node: &ClusterNode,
    c: ComputeMode,
    m: MemoryMode,
) -> Result<BTreeMap<String, i64>, String> {
    let n = i64::from(amd_physical(node)?) * i64::from(c.partitions(XCDS));
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    if node.capacity.contains_key("amd.com/gpu") {
        out.insert("amd.com/gpu".into(), n);
        return Ok(out);
    }
    for k in node.capacity.keys().filter(|k| k.starts_with("amd.com/")) {
        out.insert(k.clone(), 0);
    }
    out.insert(format!("amd.com/{}", layout_label(c, m)), n);
    Ok(out)
}

/// What an NVIDIA node advertises after the MIG config (the `mixed` strategy), every resource
/// of its old config at 0.
///
/// # Errors
/// The config is absent from the file or asks what the GPUs cannot give.
pub fn mig_expected(
    node: &ClusterNode,
    mig_file: &str,
    config: &str,
) -> Result<BTreeMap<String, i64>, String> {
    let gpus: i64 = node
        .capacity
        .iter()
        .filter(|(k, _)| *k == "nvidia.com/gpu" || k.starts_with("nvidia.com/mig-"))
        .map(|(k, v)| if *k == "nvidia.com/gpu" { *v } else { 0 })
        .sum::<i64>()
        .max(0);
    // A node already in MIG mode advertises instances, not GPUs: its GPU product label's
    // count is not on the node, so the MIG manager's default board of 8 is said, not guessed.
    let gpus = if gpus == 0 { 8 } else { gpus };
    let layout = mig_layout(mig_file, config, u32::try_from(gpus).unwrap_or(8))?;
    let mut out: BTreeMap<String, i64> = node
        .capacity
        .keys()
        .filter(|k| k.starts_with("nvidia.com/"))
        .map(|k| (k.clone(), 0))
        .collect();
    out.extend(mig_resources(&layout));
    Ok(out)
}

/// The profile DCM is given for `c`/`m` on nodes of `gpus` GPUs (every GPU alike, none
/// skipped), and its name.
pub fn dcm_profile(c: ComputeMode, m: MemoryMode, gpus: u32) -> (String, Value) {
    (
        format!(
            "partop-{}-{}",
            c.name().to_lowercase(),
            m.name().to_lowercase()
        ),
        json!({"skippedGPUs": {"ids": []},
               "profiles": [{"computePartition": c.name(), "memoryPartition": m.name(),
                             "numGPUsAssigned": gpus}]}),
    )
}

/// A profile as DCM's ConfigMap document has it now (None: absent).
///
/// # Errors
/// The document is not a JSON object.
pub fn profile_in(config: Option<&str>, name: &str) -> Result<Option<Value>, String> {
    let Some(text) = config else { return Ok(None) };
    let v: Value = serde_json::from_str(text)
        .map_err(|e| format!("{DCM_NAMESPACE}/{DCM_CONFIGMAP} {DCM_KEY} is not DCM's JSON: {e}"))?;
    Ok(v.get("gpu-config-profiles")
        .and_then(|p| p.get(name))
        .cloned())
}

/// DCM's ConfigMap document with `profile` set to `doc`, everything else kept as it was.
///
/// # Errors
/// The document is not a JSON object.
pub fn with_profile(config: Option<&str>, profile: &str, doc: &Value) -> Result<String, String> {
    let mut v: Value = match config {
        Some(t) => serde_json::from_str(t).map_err(|e| {
            format!("{DCM_NAMESPACE}/{DCM_CONFIGMAP} {DCM_KEY} is not DCM's JSON: {e}")
        })?,
        None => json!({}),
    };
    let o = v
        .as_object_mut()
        .ok_or_else(|| format!("{DCM_NAMESPACE}/{DCM_CONFIGMAP} {DCM_KEY} is not a JSON object"))?;
    let profiles = o
        .entry("gpu-config-profiles")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| "gpu-config-profiles is not a JSON object".to_string())?;
    profiles.insert(profile.to_string(), doc.clone());
    serde_json::to_string_pretty(&v).map_err(|e| e.to_string())
}

/// Whether `node` is an AMD node no manager owns under `target`: its engine is `partop apply`
/// on the node, where the node can be reached (else [`engine_for`] refuses it, saying how).
pub fn own_apply(node: &ClusterNode, target: &Target, dcm: bool) -> bool {
    matches!(target, Target::Layout { .. }) && has_amd(node) && !dcm_manages(node, dcm)
}

/// The engine for `node` under `target`, or why it cannot be rolled out through the cluster.
/// `dcm` and `mig` say whether each manager's ConfigMap is there (where it is, it is managed).
///
/// # Errors
/// Not a node of that vendor, or not managed.
pub fn engine_for(
    node: &ClusterNode,
    target: &Target,
    dcm: bool,
    mig: bool,
) -> Result<Engine, String> {
    match target {
        Target::Layout { compute, memory } => {
            if !has_amd(node) {
                return Err(format!(
                    "{} advertises no AMD GPU resource: a layout is for AMD nodes",
                    node.name
                ));
            }
            if !dcm_manages(node, dcm) {
                return Err(format!(
                    "{} is not managed by AMD's Device Config Manager (no {DCM_NAMESPACE}/{DCM_CONFIGMAP} ConfigMap, or the node is not labelled {}={} nor carries a DCM label) and no way to reach it is known: give its ssh destination (--ssh {}=DEST, or --ssh-user USER for its InternalIP) and partop applies its own plan there",
                    node.name, DCM_SELECTOR.0, DCM_SELECTOR.1, node.name
                ));
            }
            Ok(Engine::Dcm {
                profile: dcm_profile(*compute, *memory, 0).0,
            })
        }
        Target::MigConfig { name } => {
            if !has_nvidia(node) {
                return Err(format!(
                    "{} advertises no NVIDIA GPU resource: a MIG config is for NVIDIA nodes",
                    node.name
                ));
            }
            if !mig
                || node
                    .labels
                    .get("nvidia.com/mig.capable")
                    .map(String::as_str)
                    != Some("true")
            {
                return Err(format!(
                    "{} is not managed by the MIG manager (no {MIG_NAMESPACE}/{MIG_CONFIGMAP} ConfigMap, or not labelled nvidia.com/mig.capable=true): change it on the node instead (partop mig)",
                    node.name
                ));
            }
            Ok(Engine::MigManager {
                config: name.clone(),
            })
        }
    }
}

/// Whether the node already is where its plan takes it: its manager's label asks for it, the
/// manager answered `success`, and the node advertises the expected capacity. A rollout has
/// nothing to do there (draining it to relabel it the same would only disrupt its pods).
pub fn at_target(plan: &NodePlan, node: &ClusterNode) -> bool {
    let Some((k, v)) = plan.engine.label() else {
        // The node's own plan changes nothing: it is there already.
        return matches!(&plan.engine, Engine::PartopApply { plan, .. } if plan.changes.is_empty());
    };
    node.labels.get(k).map(String::as_str) == Some(v)
        && answer(&plan.engine, &node.labels) == Answer::Success
        && plan
            .expected
            .iter()
            .all(|(r, n)| node.allocatable.get(r).copied().unwrap_or(0) == *n)
}

/// The partition labels of a node that a plan is made against (a change to any is a node
/// changed since the plan).
pub fn partition_labels(node: &ClusterNode) -> BTreeMap<String, String> {
    [AMD_PARTITION, DCM_PROFILE, DCM_STATE, MIG_CONFIG, MIG_STATE]
        .iter()
        .filter_map(|k| node.labels.get(*k).map(|v| ((*k).to_string(), v.clone())))
        .collect()
}

/// Why a node is not as it was planned (None: it is): its partition labels, or the pods on its
/// GPUs (`namespace/name` and UID), differ.
pub fn changed_since(
    plan: &NodePlan,
    labels: &BTreeMap<String, String>,
    pods: &[(String, String)],
) -> Option<String> {
    if *labels != plan.labels {
        return Some(format!(
            "its partition labels changed since the plan: {} then, {} now",
            words_of(&plan.labels),
            words_of(labels)
        ));
    }
    let mut then: Vec<(String, String)> = plan
        .pods
        .iter()
        .map(|p| (p.label(), p.uid.clone()))
        .collect();
    let mut now = pods.to_vec();
    then.sort();
    now.sort();
    (then != now).then(|| {
        let new: Vec<&str> = now
            .iter()
            .filter(|p| !then.contains(p))
            .map(|p| p.0.as_str())
            .collect();
        let gone: Vec<&str> = then
            .iter()
            .filter(|p| !now.contains(p))
            .map(|p| p.0.as_str())
            .collect();
        format!(
            "the pods on its GPUs changed since the plan (new: {}; gone: {})",
            list_or_none(&new),
            list_or_none(&gone)
        )
    })
}

fn words_of(m: &BTreeMap<String, String>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn list_or_none(v: &[&str]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Every RBAC permission a cluster rollout needs, asked before anything changes.
pub fn rollout_access(dcm: bool) -> Vec<Access> {
    let mut v = super::k8s_ops::drain_access();
    // The device plugin is the manager's to restart here, and the taint is DCM's own flow's.
    v.retain(|a| !(a.verb == "delete" && a.resource == "pods") && a.verb != "update");
    v.push(Access {
        verb: "list",
        group: "",
        resource: "events",
        subresource: "",
        namespace: None,
    });
    if dcm {
        for verb in ["get", "patch"] {
            v.push(Access {
                verb,
                group: "",
                resource: "configmaps",
                subresource: "",
                namespace: Some(DCM_NAMESPACE.into()),
            });
        }
    }
    v
}

/// The manager's reason for a failure: the newest of its events on the node (reason: message),
/// else the state label's word.
pub fn failure_reason(engine: &Engine, state: &str, events: &[(String, String, String)]) -> String {
    let own: Vec<&(String, String, String)> = events
        .iter()
        .filter(|(_, _, component)| component == engine.component())
        .collect();
    match own.last() {
        Some((reason, message, _)) => format!(
            "{} says {}={state}: {reason}: {message}",
            engine.words(),
            engine.state_label()
        ),
        None => format!(
            "{} says {}={state} (no event of {} on the node says why)",
            engine.words(),
            engine.state_label(),
            engine.component()
        ),
    }
}

/// The config name the MIG manager's file must have; where its file is.
pub const MIG_FILE: (&str, &str, &str) = (MIG_NAMESPACE, MIG_CONFIGMAP, MIG_KEY);
/// DCM's ConfigMap.
pub const DCM_FILE: (&str, &str, &str) = (DCM_NAMESPACE, DCM_CONFIGMAP, DCM_KEY);

/// The label `partop sim cluster` puts on every Node it makes (what it watches).
pub const REHEARSAL_LABEL: &str = "partop.sim/cluster";
/// The kubelet version `partop sim cluster` reports in its Nodes' `status.nodeInfo`: with
/// [`REHEARSAL_LABEL`], the mark of a rehearsal node. A real node's kubelet owns its status and
/// writes its own version there on every status update (a forged value is put back within its
/// update period), so a Node of a real cluster never keeps this mark.
pub const REHEARSAL_KUBELET: &str = "partop-sim-cluster";

/// Whether a Node with these labels and reported kubelet version is one `partop sim cluster`
/// made and keeps (both marks; either alone is not enough).
pub fn rehearsal_node(labels: &BTreeMap<String, String>, kubelet: Option<&str>) -> bool {
    labels.get(REHEARSAL_LABEL).map(String::as_str) == Some("true")
        && kubelet == Some(REHEARSAL_KUBELET)
}

/// Where a rehearsed rollout may be killed (`PARTOP_SIM_CRASH_AT`, see
/// `exec::cluster_rollout::ClusterEngine::crash_point`): `WHEN:NODE:STEP` at a step of a node
/// (`begin`: journaled begun, not acted; `acted`: acted, its result not journaled; `end`: its
/// result journaled), `end:NODE:node.EVENT` after a node's line of the rollout (`node.start`,
/// `node.done`, `node.failed`), `end:rollout.EVENT` after the set's own (`rollout.start`,
/// `rollout.done`; a stop is the rollout's last line, with nothing after it to kill). A node name has no `:` and a step key no `.`: the three
/// shapes never meet.
pub fn crash_key(when: &str, node: Option<&str>, what: &str) -> String {
    match node {
        Some(n) => format!("{when}:{n}:{what}"),
        None => format!("{when}:{what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rehearsal node needs both marks (4 cases): the simulator's label and the kubelet
    /// version only it reports; a real kubelet's version, or the label missing or not `true`,
    /// is not one.
    #[test]
    fn a_rehearsal_node_has_the_simulator_s_label_and_kubelet() {
        let l = |v: Option<&str>| -> BTreeMap<String, String> {
            v.map(|v| (REHEARSAL_LABEL.to_string(), v.to_string()))
                .into_iter()
                .collect()
        };
        assert!(rehearsal_node(&l(Some("true")), Some(REHEARSAL_KUBELET)));
        assert!(!rehearsal_node(&l(Some("true")), Some("v1.37.2")));
        assert!(!rehearsal_node(&l(None), Some(REHEARSAL_KUBELET)));
        assert!(!rehearsal_node(&l(Some("false")), Some(REHEARSAL_KUBELET)));
    }

    /// Every prefix of steps done (7 cases): a resumed node continues at the first step not
    /// done, a manager not answered is asked again, and a node done needs nothing.
    #[test]
    fn a_resumed_node_continues_where_it_stopped() {
        let want = [
            Some(Step::Cordon),
            Some(Step::Evict),
            Some(Step::Label),
            Some(Step::Label),
            Some(Step::WaitAllocatable),
            Some(Step::Uncordon),
            None,
        ];
        for (i, w) in want.iter().enumerate() {
            assert_eq!(
                Step::resume_at(&Step::ALL, &Step::ALL[..i]),
                *w,
                "{i} of 7 steps done"
            );
        }
        // A node whose own apply drains has three steps; with all done nothing is left (it
        // began at the cordon it does not have, and ran its apply again), with none or some
        // done it continues at its first not done (4 cases).
        let steps = Step::of_engine(&own(Some("n")));
        assert_eq!(steps, [Step::Label, Step::WaitState, Step::WaitAllocatable]);
        for (i, w) in [
            Some(Step::Label),
            Some(Step::Label),
            Some(Step::WaitAllocatable),
            None,
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(Step::resume_at(&steps, &steps[..i]), *w, "{i} of 3 done");
        }
    }

    /// Cordoned (or may be) and not uncordoned, wherever each of two nodes stopped: every point
    /// of node a's twelve journal lines (each of its six steps begun, then done) against every
    /// point of node b's, interleaved (169 cases). A cordon begun and never done counts: its
    /// patch may have acted.
    #[test]
    fn a_cordon_is_left_from_its_begin_until_its_uncordon_is_journaled_done() {
        let mut cases = 0;
        let lines = 2 * Step::ALL.len();
        for k in 0..=lines {
            for m in 0..=lines {
                let mut trail = Vec::new();
                for i in 0..lines {
                    for (node, upto) in [("a", k), ("b", m)] {
                        if i < upto {
                            trail.push((
                                node.to_string(),
                                Step::ALL[i / 2].key().to_string(),
                                i % 2 == 1,
                            ));
                        }
                    }
                }
                let want: Vec<String> = [("a", k), ("b", m)]
                    .iter()
                    .filter(|(_, n)| (1..lines).contains(n))
                    .map(|(x, _)| (*x).to_string())
                    .collect();
                assert_eq!(left_cordoned(&trail), want, "a at {k}, b at {m}");
                cases += 1;
            }
        }
        assert_eq!(cases, 169);
        // A cordon that was not the rollout's (the node cordoned by someone else, or held by
        // another partop change) is not said as its own, whether the step went on or failed.
        let line = |n: &str, s: &str, done: bool| (n.to_string(), s.to_string(), done);
        let trail = vec![
            line("a", "cordon", false),
            line("a", CORDON_NOT_OURS, true),
            line("a", "cordon", true),
            line("b", "cordon", false),
            line("b", CORDON_NOT_OURS, true),
        ];
        assert!(left_cordoned(&trail).is_empty());
        // A resume whose cordon is then its own counts again: b was held by another change,
        // the other change ended, the resume cordoned b and stopped before its uncordon.
        let mut resumed = trail.clone();
        resumed.extend([line("b", "cordon", false), line("b", "cordon", true)]);
        assert_eq!(left_cordoned(&resumed), ["b"]);
    }

    /// A node's own plan, empty but for its Kubernetes part (`kube`: the Node it drains).
    fn own(kube: Option<&str>) -> Engine {
        let plan = crate::domain::plan::Plan {
            fingerprint: String::new(),
            host: "h".into(),
            draft: crate::domain::plan::Draft {
                gpus: Vec::new(),
                compute: Some(ComputeMode::Cpx),
                memory: Some(MemoryMode::Nps4),
            },
            reload: crate::domain::modes::Reload::Modprobe,
            changes: Vec::new(),
            before: Vec::new(),
            after: Vec::new(),
            stops: Vec::new(),
            steps: Vec::new(),
            downtime_secs: 0,
            warnings: Vec::new(),
            reload_secs: 0,
            grace_secs: 0,
            models: Vec::new(),
            sets: Vec::new(),
            balancers: Vec::new(),
            kubernetes: kube.map(|n| crate::domain::plan_k8s::KubeChange {
                node: n.into(),
                pods: Vec::new(),
                allocatable: BTreeMap::new(),
                dcm: None,
            }),
        };
        Engine::PartopApply {
            dest: "rehearse:/s".into(),
            partop: "partop".into(),
            plan: Box::new(plan),
        }
    }

    /// Who owns an AMD node, over the whole space the planner reads (96 cases): vendor (AMD,
    /// NVIDIA, none) x DCM's ConfigMap x DCM's selector label x a DCM profile label x a DCM
    /// state label x the target (a layout, a MIG config). DCM owns it where its ConfigMap is and
    /// its DaemonSet selects the node or a DCM label is in use; an AMD node it does not own is
    /// `partop apply`'s (where reachable), and refused saying how to reach it otherwise.
    #[test]
    fn an_amd_node_no_manager_owns_is_partop_apply_s_and_refused_saying_how_to_reach_it() {
        let mut cases = 0;
        for vendor in ["amd.com/gpu", "nvidia.com/gpu", "cpu-only/none"] {
            for bits in 0..16u8 {
                let (cm, sel, prof, state) =
                    (bits & 1 != 0, bits & 2 != 0, bits & 4 != 0, bits & 8 != 0);
                let mut n = ClusterNode {
                    name: "n1".into(),
                    capacity: [(vendor.to_string(), 8)].into(),
                    ..ClusterNode::default()
                };
                for (on, k, v) in [
                    (sel, DCM_SELECTOR.0, DCM_SELECTOR.1),
                    (prof, DCM_PROFILE, "p"),
                    (state, DCM_STATE, "success"),
                ] {
                    if on {
                        n.labels.insert(k.into(), v.into());
                    }
                }
                let amd = vendor.starts_with("amd.com/");
                let managed = cm && (sel || prof || state);
                let layout = Target::Layout {
                    compute: ComputeMode::Cpx,
                    memory: MemoryMode::Nps4,
                };
                let what =
                    format!("{vendor} configmap={cm} selector={sel} profile={prof} state={state}");
                assert_eq!(own_apply(&n, &layout, cm), amd && !managed, "{what}");
                assert_eq!(dcm_manages(&n, cm), managed, "{what}");
                match engine_for(&n, &layout, cm, false) {
                    Ok(e) => assert!(amd && managed && matches!(e, Engine::Dcm { .. }), "{what}"),
                    Err(why) if amd => {
                        assert!(!managed && why.contains("--ssh n1=DEST"), "{what}: {why}");
                    }
                    Err(why) => assert!(why.contains("advertises no AMD"), "{what}: {why}"),
                }
                cases += 1;
                let mig = Target::MigConfig {
                    name: "all-1g.10gb".into(),
                };
                assert!(
                    !own_apply(&n, &mig, cm),
                    "a MIG config is never partop apply's: {what}"
                );
                cases += 1;
            }
        }
        assert_eq!(cases, 96);
    }

    /// The rollout drains a node unless the node's own apply does (never both), and a node's
    /// own Kubernetes plan for another Node is refused (4 engines, 3 plans).
    #[test]
    fn the_cordon_has_one_owner() {
        let all = Step::ALL.to_vec();
        let dcm = Engine::Dcm {
            profile: "p".into(),
        };
        let mig = Engine::MigManager { config: "c".into() };
        assert_eq!(Step::of_engine(&dcm), all);
        assert_eq!(Step::of_engine(&mig), all);
        assert_eq!(
            Step::of_engine(&own(None)),
            all,
            "its plan has no Kubernetes part"
        );
        assert_eq!(
            Step::of_engine(&own(Some("n1"))),
            vec![Step::Label, Step::WaitState, Step::WaitAllocatable],
            "its own apply cordons, evicts and uncordons"
        );
        assert!(
            own(Some("n1"))
                .words()
                .contains("it cordons and evicts itself")
        );
        let plan = |e: Engine| match e {
            Engine::PartopApply { plan, .. } => plan,
            _ => unreachable!(),
        };
        assert_eq!(own_plan_refusal("n1", &plan(own(None))), None);
        assert_eq!(own_plan_refusal("n1", &plan(own(Some("n1")))), None);
        let why = own_plan_refusal("n1", &plan(own(Some("gpu-host-7")))).unwrap();
        assert!(
            why.contains("\"gpu-host-7\"") && why.contains("not n1"),
            "{why}"
        );
    }

    #[test]
    fn layouts_parse_as_the_labeller_writes_them() {
        assert_eq!(
            parse_layout("cpx_nps4"),
            Ok((ComputeMode::Cpx, MemoryMode::Nps4))
        );
        for bad in ["cpx", "hpx_nps4", "cpx_nps3", ""] {
            assert!(parse_layout(bad).is_err(), "{bad}");
        }
    }

    fn node(cap: &[(&str, i64)], layout: &str) -> ClusterNode {
        ClusterNode {
            name: "n".into(),
            labels: [(AMD_PARTITION.to_string(), layout.to_string())].into(),
            capacity: cap.iter().map(|(k, v)| ((*k).to_string(), *v)).collect(),
            ..ClusterNode::default()
        }
    }

    #[test]
    fn the_expected_capacity_follows_the_plugin_s_naming() {
        let single = node(&[("amd.com/gpu", 8)], "spx_nps1");
        assert_eq!(
            amd_expected(&single, ComputeMode::Cpx, MemoryMode::Nps4).unwrap(),
            [("amd.com/gpu".to_string(), 64)].into()
        );
        let mixed = node(&[("amd.com/cpx_nps4", 64)], "cpx_nps4");
        assert_eq!(
            amd_expected(&mixed, ComputeMode::Dpx, MemoryMode::Nps2).unwrap(),
            [
                ("amd.com/cpx_nps4".to_string(), 0),
                ("amd.com/dpx_nps2".to_string(), 16)
            ]
            .into()
        );
        assert!(amd_physical(&node(&[("amd.com/gpu", 7)], "cpx_nps4")).is_err());
    }

    #[test]
    fn a_profile_is_merged_into_dcm_s_document_keeping_the_rest() {
        let (name, doc) = dcm_profile(ComputeMode::Cpx, MemoryMode::Nps4, 8);
        let before = r#"{"gpu-config-profiles": {"a": {"profiles": []}}, "gpuClientSystemdServices": {"names": ["x"]}}"#;
        let after = with_profile(Some(before), &name, &doc).unwrap();
        assert_eq!(profile_in(Some(&after), &name).unwrap(), Some(doc.clone()));
        assert!(profile_in(Some(&after), "a").unwrap().is_some());
        assert!(after.contains("gpuClientSystemdServices"));
        assert!(with_profile(Some("[1]"), &name, &doc).is_err());
        assert!(
            super::super::partition_managers::dcm_profile(&after, &name, 8).is_ok(),
            "DCM's own rules accept the profile partop writes"
        );
    }
}
