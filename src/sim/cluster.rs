//! `partop sim cluster`: a simulated GPU cluster on a real API server (the tests' control
//! plane, or `scripts/cluster-up.sh` for rehearsal). It creates N Node objects with GPU
//! capacity, allocatable and partition labels (what the AMD node labeller and the device
//! plugin would write), keeps their status as a kubelet would, backs K of them with simulated
//! GPU nodes (`sim start`), and plays DCM and the MIG manager (`domain::partition_managers`: their
//! documented contracts) on every node: a profile or config asked by label is validated,
//! applied (on a simulated node only through its amd-smi), and reported in the state label and,
//! on failure, an event. Runs until SIGTERM or SIGINT.

use crate::collect::cluster::Target;
use crate::domain::cluster::{AMD_PARTITION, DCM_PROFILE, DCM_STATE, MIG_CONFIG, MIG_STATE};
use crate::domain::cluster_rollout::DCM_SELECTOR;
use crate::domain::partition_managers::{
    DCM_CONFIGMAP, DCM_KEY, DCM_NAMESPACE, DCM_TAINT, DEFAULT_MIG_CONFIG, MIG_CONFIGMAP, MIG_KEY,
    MIG_NAMESPACE, MIG_PRODUCT, MigLayout, Refusal, dcm_profile, default_dcm_config, mig_layout,
    mig_resources,
};
use crate::domain::{ComputeMode, MemoryMode};
use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Node};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Every node the simulator made carries this label (what it watches, and what `--delete`
/// would select); with the kubelet version it reports, the mark of a rehearsal node
/// (`domain::cluster_rollout::rehearsal_node`).
pub const SIM_LABEL: &str = crate::domain::cluster_rollout::REHEARSAL_LABEL;
/// A node annotated `partop.sim/fail=true` fails its next partition change, as `--fail` does
/// (the failure mode a rehearsal or a test can clear: take the annotation off).
pub const FAIL_ANNOTATION: &str = "partop.sim/fail";
/// GPUs per simulated node (an MI300X or H100 HGX board).
pub const GPUS: u32 = 8;

/// What `partop sim cluster` was asked for.
#[derive(Clone, Debug)]
pub struct Options {
    pub target: Target,
    /// Nodes in all.
    pub nodes: usize,
    /// Of them, backed by a simulated GPU node (AMD; the first K).
    pub gpu_nodes: usize,
    /// Of them, NVIDIA nodes under the MIG manager (the last M).
    pub mig_nodes: usize,
    /// Of the NVIDIA nodes, backed by a simulated NVIDIA node (the first J; changed through
    /// its nvidia-smi).
    pub mig_gpu_nodes: usize,
    /// Where the simulated nodes' state lives.
    pub dir: PathBuf,
    /// AMD nodes no manager owns: created without DCM's selector label, so the DCM stand-in
    /// never acts on them; a simulated one's Node follows its partitions as its kubelet and
    /// the node labeller would (changed there by partop itself).
    pub unmanaged: Vec<String>,
    /// Nodes whose partition change fails (DCM's `PartitionFailure`, the MIG manager's
    /// `failed`): the failure mode.
    pub fail: Vec<String>,
}

/// A node's name.
pub fn node_name(i: usize, nvidia: bool) -> String {
    format!("sim-{}-{i:04}", if nvidia { "nv" } else { "amd" })
}

/// The simulator's own view of each node's partition (API-only nodes) and state file
/// (simulated ones).
#[derive(Default)]
struct Model {
    /// Node -> its simulated node's state file.
    backed: HashMap<String, PathBuf>,
    /// Node -> the DCM profile or MIG config last handled (not handled again until it changes).
    handled: HashMap<String, String>,
}

fn sim_err(e: impl std::fmt::Display) -> String {
    format!("the API server: {e}")
}

/// Creates what is missing (namespaces, the managers' ConfigMaps, the nodes), then plays the
/// managers until `stop` resolves. Says what it made on `say`.
///
/// # Errors
/// The API server refused or cannot be reached.
pub async fn run(
    o: Options,
    say: impl Fn(String) + Send + Sync + 'static,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let client = crate::collect::cluster::client(&o.target).await?;
    for (ns, cm, key, text) in [
        (
            DCM_NAMESPACE,
            DCM_CONFIGMAP,
            DCM_KEY,
            default_dcm_config(GPUS),
        ),
        (
            MIG_NAMESPACE,
            MIG_CONFIGMAP,
            MIG_KEY,
            DEFAULT_MIG_CONFIG.to_string(),
        ),
    ] {
        ensure_configmap(&client, ns, cm, key, &text).await?;
    }
    let model = Arc::new(Mutex::new(Model::default()));
    let nodes: Api<Node> = Api::all(client.clone());
    let made = futures_util::stream::iter(0..o.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            let nvidia = i >= o.nodes.saturating_sub(o.mig_nodes);
            let name = node_name(i, nvidia);
            let managed = !o.unmanaged.contains(&name);
            async move { create_node(&nodes, &name, nvidia, managed).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    made.into_iter().collect::<Result<Vec<()>, String>>()?;
    back_nodes(&o, &model).await?;
    say(format!(
        "ready: {} nodes ({} AMD under DCM, {} of them simulated GPU nodes; {} NVIDIA under the MIG manager, {} of them simulated; state in {})",
        o.nodes,
        o.nodes - o.mig_nodes.min(o.nodes),
        o.gpu_nodes.min(o.nodes.saturating_sub(o.mig_nodes)),
        o.mig_nodes.min(o.nodes),
        o.mig_gpu_nodes.min(o.mig_nodes.min(o.nodes)),
        o.dir.display(),
    ));
    let say = Arc::new(say);
    let unmanaged: Vec<(String, PathBuf)> = {
        let m = model
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        o.unmanaged
            .iter()
            .filter_map(|n| m.backed.get(n).map(|st| (n.clone(), st.clone())))
            .collect()
    };
    for (n, st) in &unmanaged {
        // How the fleet reaches it: the rehearsal transport names a node by its state.
        say(format!(
            "unmanaged: {n} (no DCM): partop fleet --kubernetes --ssh {n}={}{} …",
            crate::collect::fleet::REHEARSE,
            st.display()
        ));
    }
    let fail = Arc::new(o.fail.clone());
    let cfg = watcher::Config::default().labels(&format!("{SIM_LABEL}=true"));
    let events = watcher(nodes.clone(), cfg)
        .default_backoff()
        .applied_objects();
    let play = async {
        let mut events = std::pin::pin!(events);
        while let Some(ev) = events.next().await {
            let Ok(node) = ev else { continue };
            let Some(job) = wanted(&node, &model) else {
                continue;
            };
            let (client, model, say, fail) = (
                client.clone(),
                Arc::clone(&model),
                Arc::clone(&say),
                Arc::clone(&fail),
            );
            tokio::spawn(async move {
                let r = act(&client, &node, &job, &model, &fail).await;
                let name = node.metadata.name.clone().unwrap_or_default();
                say(match r {
                    Ok(()) => format!("{name}: {} applied", job.asked()),
                    Err(e) => format!("{name}: {} failed: {e}", job.asked()),
                });
            });
        }
    };
    let names: std::collections::HashSet<String> = (0..o.nodes)
        .map(|i| node_name(i, i >= o.nodes.saturating_sub(o.mig_nodes)))
        .collect();
    let ended = tokio::select! {
        () = play => Err("the watch of the simulated nodes ended".into()),
        () = kubelets(client.clone(), names) => Err("the watch of the simulated nodes' pods ended".into()),
        () = follow_unmanaged(nodes.clone(), unmanaged) => Err("the unmanaged nodes' follower ended".into()),
        () = stop => Ok(()),
    };
    stop_backing(&model);
    ended
}

/// The simulated GPU nodes behind the cluster's nodes stop with it: their workloads and kernel
/// twins (`sim stop`'s way), so a rehearsal ended with Ctrl-C leaves no process behind. Their
/// state files stay under `--dir`, as `sim stop` leaves them.
fn stop_backing(model: &Mutex<Model>) {
    let backed: Vec<PathBuf> = model
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .backed
        .values()
        .cloned()
        .collect();
    for state in backed {
        // An NVIDIA node's state has no workloads or twin of this kind: nothing to stop there.
        let _ = crate::sim::session::stop(&state, std::time::Duration::from_secs(3));
    }
}

/// Starts the simulated GPU nodes behind the first K AMD nodes and the first J NVIDIA ones,
/// each state under `--dir`, and keeps which backs which.
async fn back_nodes(o: &Options, model: &Mutex<Model>) -> Result<(), String> {
    for i in 0..o.gpu_nodes.min(o.nodes.saturating_sub(o.mig_nodes)) {
        let name = node_name(i, false);
        let state = o.dir.join(&name).join("node.json");
        let n = name.clone();
        let st = state.clone();
        tokio::task::spawn_blocking(move || start_sim_node(&n, &st))
            .await
            .map_err(|e| e.to_string())??;
        model
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .backed
            .insert(name, state);
    }
    for i in 0..o.mig_gpu_nodes.min(o.mig_nodes.min(o.nodes)) {
        let name = node_name(o.nodes - o.mig_nodes.min(o.nodes) + i, true);
        let state = o.dir.join(&name).join("node.json");
        if let Some(d) = state.parent() {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let st = state.clone();
        tokio::task::spawn_blocking(move || {
            sim_tool(
                "nvidia-init",
                &st,
                &["--product", MIG_PRODUCT, "--gpus", &GPUS.to_string()],
                "",
            )
        })
        .await
        .map_err(|e| e.to_string())??;
        model
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .backed
            .insert(name, state);
    }
    Ok(())
}

/// The kubelets of the simulated nodes, for the pods bound to them: a pod is marked running and
/// ready (what a PodDisruptionBudget counts), and a pod being deleted is finished once its
/// (simulated) containers stopped, so an eviction really drains the node.
async fn kubelets(client: kube::Client, names: std::collections::HashSet<String>) {
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = Api::all(client);
    let events = watcher(pods.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let mut events = std::pin::pin!(events);
    while let Some(ev) = events.next().await {
        let Ok(p) = ev else { continue };
        let on_ours = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some_and(|n| names.contains(n));
        if !on_ours {
            continue;
        }
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(pods.clone().into_client(), &ns);
        if p.metadata.deletion_timestamp.is_some() {
            let dp = kube::api::DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(kube::api::Preconditions {
                    uid: p.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let _ = api.delete(&name, &dp).await;
            continue;
        }
        let running = p
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|ph| ph == "Running");
        if !running {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let st = serde_json::json!({"status": {"phase": "Running", "startTime": now,
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
            let _ = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&st))
                .await;
        }
    }
}

/// What a node's labels ask of a manager.
#[derive(Clone, Debug)]
enum Job {
    Dcm(String),
    Mig(String),
}

impl Job {
    fn asked(&self) -> String {
        match self {
            Self::Dcm(p) => format!("DCM profile {p:?}"),
            Self::Mig(c) => format!("MIG config {c:?}"),
        }
    }
}

/// The job a node's labels ask for that was not handled yet (a relabel to the same value is
/// not a new request, as with the real managers, which act on a change; a label taken off and
/// set again is).
fn wanted(node: &Node, model: &Mutex<Model>) -> Option<Job> {
    let name = node.metadata.name.clone()?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut m = model
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // DCM's DaemonSet runs only on the nodes its selector names: elsewhere no DCM sees a label.
    let dcm_here = labels.get(DCM_SELECTOR.0).map(String::as_str) == Some(DCM_SELECTOR.1);
    let Some(job) = labels
        .get(DCM_PROFILE)
        .filter(|_| dcm_here)
        .map(|p| Job::Dcm(p.clone()))
        .or_else(|| labels.get(MIG_CONFIG).map(|c| Job::Mig(c.clone())))
    else {
        // The label taken off: setting it again is a new request (how an operator asks a
        // manager again after a failure).
        m.handled.remove(&name);
        return None;
    };
    let key = format!("{job:?}");
    if m.handled.get(&name) == Some(&key) {
        return None;
    }
    m.handled.insert(name, key);
    Some(job)
}

async fn ensure_configmap(
    client: &kube::Client,
    ns: &str,
    name: &str,
    key: &str,
    text: &str,
) -> Result<(), String> {
    let nss: Api<Namespace> = Api::all(client.clone());
    let n: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))
        .map_err(|e| e.to_string())?;
    if let Err(e) = nss.create(&PostParams::default(), &n).await
        && !is_conflict(&e)
    {
        return Err(sim_err(e));
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name}, "data": {key: text},
    }))
    .map_err(|e| e.to_string())?;
    match cms.create(&PostParams::default(), &cm).await {
        Err(e) if !is_conflict(&e) => Err(sim_err(e)),
        _ => Ok(()),
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// The node's GPU resources and Ready condition, as its kubelet and device plugin report
/// them, written through the status subresource.
async fn set_status(
    nodes: &Api<Node>,
    name: &str,
    gpu: &BTreeMap<String, i64>,
) -> Result<(), String> {
    let mut res = serde_json::Map::new();
    for (k, v) in gpu {
        res.insert(k.clone(), serde_json::json!(v.to_string()));
    }
    res.insert("cpu".into(), serde_json::json!("192"));
    res.insert("memory".into(), serde_json::json!("2Ti"));
    // The kubelet's own part of the status names this simulator: a rehearsal's mark that a
    // real kubelet would overwrite with its own version.
    let status = serde_json::json!({"status": {
        "capacity": res, "allocatable": res,
        "nodeInfo": {"kubeletVersion": crate::domain::cluster_rollout::REHEARSAL_KUBELET,
                     "operatingSystem": "linux", "architecture": "amd64"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "partop sim cluster"}],
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map(|_| ())
        .map_err(sim_err)
}

async fn create_node(
    nodes: &Api<Node>,
    name: &str,
    nvidia: bool,
    managed: bool,
) -> Result<(), String> {
    let mut labels = if nvidia {
        serde_json::json!({SIM_LABEL: "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                           "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed"})
    } else {
        serde_json::json!({SIM_LABEL: "true", "feature.node.kubernetes.io/amd-gpu": "true",
                           AMD_PARTITION: "spx_nps1",
                           "amd.com/compute-partitioning-supported": "true",
                           "amd.com/memory-partitioning-supported": "true"})
    };
    if !managed && let Some(l) = labels.as_object_mut() {
        l.remove(DCM_SELECTOR.0);
    }
    let n: Node =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name, "labels": labels}}))
            .map_err(|e| e.to_string())?;
    if let Err(e) = nodes.create(&PostParams::default(), &n).await
        && !is_conflict(&e)
    {
        return Err(sim_err(e));
    }
    let gpu: BTreeMap<String, i64> = [(
        if nvidia {
            "nvidia.com/gpu"
        } else {
            "amd.com/gpu"
        }
        .to_string(),
        i64::from(GPUS),
    )]
    .into();
    set_status(nodes, name, &gpu).await?;
    // The API server taints a new node not-ready; the node lifecycle controller lifts it once
    // the node reports Ready. That controller is not part of a test control plane: the
    // simulator does its part (a new node has no other taint).
    let p = serde_json::json!({"spec": {"taints": null}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .map(|_| ())
        .map_err(sim_err)
}

/// The Nodes of unmanaged simulated GPU nodes follow what partop changed on them: every 0.5 s
/// each state is read, and a new layout is written as the node labeller
/// (`amd.com/compute-memory-partition`) and the device plugin (`amd.com/gpu`, one per
/// partition) would. Never ends.
async fn follow_unmanaged(nodes: Api<Node>, backed: Vec<(String, PathBuf)>) {
    let mut last: HashMap<String, (String, i64)> = HashMap::new();
    loop {
        for (name, state) in &backed {
            let Ok(st) = crate::sim::state::SimState::load(state) else {
                continue;
            };
            let Some(g) = st.modes().first().cloned() else {
                continue;
            };
            let now = (
                format!(
                    "{}_{}",
                    g.compute.name().to_lowercase(),
                    g.memory.name().to_lowercase()
                ),
                i64::try_from(st.logical().len()).unwrap_or(0),
            );
            if last.get(name) == Some(&now) {
                continue;
            }
            let ok = set_status(&nodes, name, &[("amd.com/gpu".to_string(), now.1)].into())
                .await
                .is_ok()
                && label_node(&nodes, name, &[(AMD_PARTITION, Some(&now.0))])
                    .await
                    .is_ok();
            if ok {
                last.insert(name.clone(), now);
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// A simulated MI300X node of 8 GPUs in SPX/NPS1, no workloads.
fn start_sim_node(name: &str, state: &std::path::Path) -> Result<(), String> {
    let text = format!(
        "name = \"{name}\"\ndescription = \"a node of partop sim cluster\"\nproduct = \"mi300x\"\ncompute = \"SPX\"\nmemory = \"NPS1\"\nrocm = \"7.0.2\"\nseed = 1\n"
    );
    let sc = crate::sim::scenario::Scenario::parse(name, &text).map_err(|e| e.to_string())?;
    if let Some(d) = state.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    crate::sim::session::start(&sc, state, None)
        .map(|_| ())
        .map_err(|e| format!("{name}: {e}"))
}

/// The simulated node's amd-smi (`partop sim amd-smi --state S ARGS`), as DCM runs the real
/// one: its output when it fails.
fn amd_smi(state: &std::path::Path, args: &[&str], stdin: &str) -> Result<(), String> {
    sim_tool("amd-smi", state, args, stdin).map(|_| ())
}

/// `partop sim VERB --state S ARGS` (the simulated node's tools): its output, or its last line
/// when it fails.
fn sim_tool(
    verb: &str,
    state: &std::path::Path,
    args: &[&str],
    stdin: &str,
) -> Result<String, String> {
    use std::io::Write as _;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut c = std::process::Command::new(exe);
    c.args(["sim", verb, "--state"]).arg(state).args(args);
    let mut child = c
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(stdin.as_bytes());
    }
    let o = child.wait_with_output().map_err(|e| e.to_string())?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        let text = String::from_utf8_lossy(&o.stderr).trim().to_string();
        let last: String = text
            .lines()
            .last()
            .unwrap_or("")
            .chars()
            .take(300)
            .collect();
        Err(format!("{verb} {}: {last}", args.join(" ")))
    }
}

/// DCM's steps on a simulated node: the memory mode, the driver reloaded (DCM's own
/// `modprobe -r amdgpu; modprobe amdgpu`, `partop sim reload` here), then the compute mode;
/// what the node has afterwards is read back from it.
fn apply_on_sim(state: &std::path::Path, c: ComputeMode, m: MemoryMode) -> Result<(), String> {
    let now = crate::sim::state::SimState::load(state).map_err(|e| e.to_string())?;
    let before = now.modes();
    if before.iter().any(|g| g.memory != m) {
        amd_smi(state, &["set", "-M", m.name()], "Y\n")?;
        sim_tool("reload", state, &[], "").map_err(|e| format!("the driver reload: {e}"))?;
    }
    if before.iter().any(|g| g.compute != c) {
        amd_smi(state, &["set", "-C", c.name()], "")?;
    }
    let after = crate::sim::state::SimState::load(state).map_err(|e| e.to_string())?;
    if after
        .modes()
        .iter()
        .all(|g| g.compute == c && g.memory == m)
    {
        Ok(())
    } else {
        Err(format!("the node did not come up in {c}/{m} after amd-smi"))
    }
}

/// mig-parted's steps on a simulated NVIDIA node, through its nvidia-smi: per GPU, the old
/// instances destroyed, MIG mode set, the config's instances created (each with its compute
/// instance); then each GPU's instances read back (`mig -i N -lgi`) and counted against the
/// config.
fn apply_mig_on_sim(state: &std::path::Path, layout: &MigLayout) -> Result<(), String> {
    for (i, g) in layout.iter().enumerate() {
        let i = i.to_string();
        // A GPU without instances makes these fail; there is nothing to destroy then.
        let _ = sim_tool("nvidia-smi", state, &["mig", "-i", &i, "-dci"], "");
        let _ = sim_tool("nvidia-smi", state, &["mig", "-i", &i, "-dgi"], "");
        let mode = if g.is_some() { "1" } else { "0" };
        sim_tool("nvidia-smi", state, &["-i", &i, "-mig", mode], "")?;
        let list: Vec<&str> = g
            .iter()
            .flatten()
            .flat_map(|(p, n)| std::iter::repeat_n(p.as_str(), *n as usize))
            .collect();
        if !list.is_empty() {
            sim_tool(
                "nvidia-smi",
                state,
                &["mig", "-i", &i, "-cgi", &list.join(","), "-C"],
                "",
            )?;
        }
    }
    let want: BTreeMap<String, i64> = mig_resources(layout)
        .into_iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("nvidia.com/mig-")?.to_string(), v)))
        .collect();
    if want.is_empty() {
        return Ok(());
    }
    let mut got: BTreeMap<String, i64> = BTreeMap::new();
    for (i, g) in layout.iter().enumerate() {
        if g.as_ref().is_none_or(BTreeMap::is_empty) {
            continue;
        }
        let listed = sim_tool(
            "nvidia-smi",
            state,
            &["mig", "-i", &i.to_string(), "-lgi"],
            "",
        )?;
        for l in listed.lines() {
            if let Some(p) = l
                .split("MIG ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
            {
                *got.entry(p.to_string()).or_default() += 1;
            }
        }
    }
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "nvidia-smi lists {got:?} after the change, the config asks {want:?}"
        ))
    }
}

/// Whether the node's next partition change fails (`--fail`, or the annotation), and the words
/// its failure adds: the annotation's value when it is not just `true` (what a test uses to
/// put outside text, control characters included, into the manager's event).
fn failure_words(node: &Node, fail: &[String]) -> Option<String> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let said = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FAIL_ANNOTATION))
        .filter(|v| !v.is_empty() && *v != "false");
    match said {
        Some(v) if v == "true" => Some(String::new()),
        Some(v) => Some(format!(": {v}")),
        None => fail.contains(&name).then(String::new),
    }
}

async fn act(
    client: &kube::Client,
    node: &Node,
    job: &Job,
    model: &Mutex<Model>,
    fail: &[String],
) -> Result<(), String> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let nodes: Api<Node> = Api::all(client.clone());
    let failing = failure_words(node, fail);
    match job {
        Job::Dcm(profile) => {
            let cms: Api<ConfigMap> = Api::namespaced(client.clone(), DCM_NAMESPACE);
            let text = cms
                .get_opt(DCM_CONFIGMAP)
                .await
                .map_err(sim_err)?
                .and_then(|c| c.data)
                .and_then(|d| d.get(DCM_KEY).cloned())
                .unwrap_or_default();
            let tainted = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| {
                    t.iter().any(|t| {
                        format!(
                            "{}={}:{}",
                            t.key,
                            t.value.as_deref().unwrap_or(""),
                            t.effect
                        ) == DCM_TAINT
                    })
                });
            if !tainted {
                // DCM's documented flow taints first; it says so when a node was not.
                event(
                    client,
                    &name,
                    "NodeNotTaintedBeforeParition",
                    &format!("{name} was not tainted {DCM_TAINT} before profile {profile:?}"),
                    "device-config-manager",
                )
                .await;
            }
            let r: Result<(ComputeMode, MemoryMode), Refusal> =
                dcm_profile(&text, profile, GPUS).and_then(|(c, m)| {
                    if let Some(why) = &failing {
                        return Err(Refusal {
                            reason: "PartitionFailure",
                            message: format!("{name}: partitioning to {c}/{m} failed (the simulated failure mode){why}"),
                        });
                    }
                    let backed = model
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .backed
                        .get(&name)
                        .cloned();
                    if let Some(st) = backed {
                        apply_on_sim(&st, c, m).map_err(|e| Refusal {
                            reason: "PartitionFailure",
                            message: format!("{name}: {e}"),
                        })?;
                    } else if !crate::domain::product::by_key("mi300x")
                        .is_some_and(|p| p.offers(c, m))
                    {
                        return Err(Refusal {
                            reason: "PartitionFailure",
                            message: format!("{name}: an MI300X does not offer {c}/{m}"),
                        });
                    }
                    Ok((c, m))
                });
            match r {
                Ok((c, m)) => {
                    let label = format!("{}_{}", c.name().to_lowercase(), m.name().to_lowercase());
                    // The device plugin's single naming: every partition an `amd.com/gpu` (8 XCDs).
                    let per = i64::from(GPUS) * i64::from(c.partitions(8));
                    set_status(&nodes, &name, &[("amd.com/gpu".to_string(), per)].into()).await?;
                    label_node(
                        &nodes,
                        &name,
                        &[(AMD_PARTITION, Some(&label)), (DCM_STATE, Some("success"))],
                    )
                    .await
                }
                Err(f) => {
                    event(client, &name, f.reason, &f.message, "device-config-manager").await;
                    label_node(&nodes, &name, &[(DCM_STATE, Some("failure"))]).await?;
                    Err(format!("{}: {}", f.reason, f.message))
                }
            }
        }
        Job::Mig(config) => {
            label_node(&nodes, &name, &[(MIG_STATE, Some("pending"))]).await?;
            let cms: Api<ConfigMap> = Api::namespaced(client.clone(), MIG_NAMESPACE);
            let text = cms
                .get_opt(MIG_CONFIGMAP)
                .await
                .map_err(sim_err)?
                .and_then(|c| c.data)
                .and_then(|d| d.get(MIG_KEY).cloned())
                .unwrap_or_default();
            let backed = model
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .backed
                .get(&name)
                .cloned();
            let r = mig_layout(&text, config, GPUS).and_then(|layout| {
                if let Some(why) = &failing {
                    return Err(format!(
                        "{name}: applying {config:?} failed (the simulated failure mode){why}"
                    ));
                }
                if let Some(st) = backed {
                    apply_mig_on_sim(&st, &layout).map_err(|e| format!("{name}: {e}"))?;
                }
                Ok(mig_resources(&layout))
            });
            match r {
                Ok(res) => {
                    // Every MIG resource of another config goes (null in a merge patch).
                    let old: Vec<String> = node
                        .status
                        .as_ref()
                        .and_then(|s| s.capacity.as_ref())
                        .into_iter()
                        .flatten()
                        .map(|(k, _)| k.clone())
                        .filter(|k| k.starts_with("nvidia.com/") && !res.contains_key(k))
                        .collect();
                    clear_status(&nodes, &name, &old).await?;
                    set_status(&nodes, &name, &res).await?;
                    label_node(&nodes, &name, &[(MIG_STATE, Some("success"))]).await
                }
                Err(e) => {
                    event(client, &name, "MigConfigFailed", &e, "nvidia-mig-manager").await;
                    label_node(&nodes, &name, &[(MIG_STATE, Some("failed"))]).await?;
                    Err(e)
                }
            }
        }
    }
}

async fn clear_status(nodes: &Api<Node>, name: &str, gone: &[String]) -> Result<(), String> {
    if gone.is_empty() {
        return Ok(());
    }
    let nulls: serde_json::Map<String, serde_json::Value> = gone
        .iter()
        .map(|k| (k.clone(), serde_json::Value::Null))
        .collect();
    let p = serde_json::json!({"status": {"capacity": nulls, "allocatable": nulls}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .map(|_| ())
        .map_err(sim_err)
}

async fn label_node(
    nodes: &Api<Node>,
    name: &str,
    labels: &[(&str, Option<&str>)],
) -> Result<(), String> {
    let l: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| {
            (
                (*k).to_string(),
                v.map_or(serde_json::Value::Null, |v| serde_json::json!(v)),
            )
        })
        .collect();
    let p = serde_json::json!({"metadata": {"labels": l}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .map(|_| ())
        .map_err(sim_err)
}

/// A Warning event on the node, as the manager would record it (best effort, as theirs).
async fn event(client: &kube::Client, node: &str, reason: &str, message: &str, component: &str) {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let now = k8s_openapi::jiff::Timestamp::now();
    let e: Result<Event, _> = serde_json::from_value(serde_json::json!({
        "metadata": {"generateName": format!("{node}.")},
        "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
        "reason": reason, "message": message, "type": "Warning",
        "source": {"component": component},
        "firstTimestamp": now.to_string(), "lastTimestamp": now.to_string(), "count": 1,
    }));
    if let Ok(e) = e {
        let _ = events.create(&PostParams::default(), &e).await;
    }
}
