//! The tests' own hands on a control plane's API, through kube-rs as partop reaches it: the
//! administrator's client, namespaces with their service account, GPU pods bound to a node,
//! a PodDisruptionBudget once the disruption controller counted it, the kubelet twin of a named
//! node, and `until`, which polls the API server (never a fixed sleep).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::control_plane::ControlPlane;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, PostParams};
use partop::sim::kubelet::NodeAgent;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long `until` waits for the API server, its controllers and the kubelet twin.
pub const SETTLE_SECS: u64 = 30;

/// The runtime the twin's node agents run on while a test waits (two workers: the machine
/// running the suite is small).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// partop's own client for `kubeconfig` (its target, as `--kubeconfig` makes it).
pub async fn client(kubeconfig: &Path) -> kube::Client {
    partop::collect::cluster::client(&target(kubeconfig))
        .await
        .unwrap()
}

/// The cluster target of `kubeconfig`.
pub fn target(kubeconfig: &Path) -> partop::collect::cluster::Target {
    partop::collect::cluster::Target {
        kubeconfig: Some(kubeconfig.to_path_buf()),
        ..Default::default()
    }
}

/// The administrator's client, with the `default` namespace's service account made.
pub async fn admin(cp: &ControlPlane) -> kube::Client {
    let c = client(&cp.admin()).await;
    namespace(&c, "default").await;
    c
}

/// Namespace `ns` with its `default` service account (the serviceaccount controller is not
/// among those the test control plane runs, and a pod is refused without it).
pub async fn namespace(c: &kube::Client, ns: &str) {
    if ns != "default" {
        let n: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
        Api::all(c.clone())
            .create(&PostParams::default(), &n)
            .await
            .unwrap();
    }
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
    Api::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
}

/// Pod `ns/name` with `labels`, asking for one `amd.com/gpu`, bound to `node` (no scheduler
/// runs: the node's kubelet twin runs what is bound to it).
pub async fn make_pod(c: &kube::Client, ns: &str, name: &str, node: &str, labels: &[(&str, &str)]) {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "partop/sim",
            "resources": {"limits": {"amd.com/gpu": "1"}}}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

/// Whether pod `ns/name` exists and is Ready.
pub async fn pod_ready(c: &kube::Client, ns: &str, name: &str) -> bool {
    Api::<Pod>::namespaced(c.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|p| p.status)
        .and_then(|s| s.conditions)
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The PodDisruptionBudget `APP-pdb` in `ns`: `min` available over the pods `app=APP`, waited
/// for until the disruption controller counts `healthy` of them (before that, the budget
/// allows nothing for a reason of its own). Its API, for the test to lift it.
pub async fn budget(
    c: &kube::Client,
    ns: &str,
    app: &str,
    min: i32,
    healthy: i32,
) -> Api<PodDisruptionBudget> {
    let name = format!("{app}-pdb");
    let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minAvailable": min, "selector": {"matchLabels": {"app": app}}},
    }))
    .unwrap();
    let api = Api::<PodDisruptionBudget>::namespaced(c.clone(), ns);
    api.create(&PostParams::default(), &pdb).await.unwrap();
    until("the disruption controller computed the budget", || async {
        api.get(&name)
            .await
            .ok()
            .and_then(|b| b.status)
            .is_some_and(|s| s.current_healthy == Some(healthy))
    })
    .await;
    api
}

/// The kubelet twin of node `name`, with no simulated node behind it: it registers the Node,
/// runs the pods bound to it, finishes their deletion, and advertises `count` of `amd.com/gpu`
/// (changed by the test as a repartition would; `stale`: its device plugin keeps the old count
/// until restarted). Spawned on the current runtime.
pub fn start_node(c: &kube::Client, name: &str, count: &Arc<Mutex<i64>>, stale: bool) {
    let count = Arc::clone(count);
    let advertise =
        Arc::new(move || BTreeMap::from([("amd.com/gpu".to_string(), *count.lock().unwrap())]));
    tokio::spawn(NodeAgent::new(c.clone(), name, advertise, stale).run());
}

/// Polls `f` until it holds, `SETTLE_SECS` at most.
pub async fn until<F, Fut>(what: &str, f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until_within(SETTLE_SECS, what, f).await;
}

/// Polls `f` until it holds, `secs` at most (a node's own twin, started through the CLI, takes
/// longer than one in the test's runtime).
pub async fn until_within<F, Fut>(secs: u64, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not within {secs} s: {what}");
}
