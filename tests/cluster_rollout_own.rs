//! The third engine of a cluster rollout when the node's own partop sees its kubelet (issue 26
//! item 2): against a REAL control plane on loopback and the kubelet twin of a simulated
//! Kubernetes node (`[kubernetes]`: its pods on its PodResources socket, its Node registered
//! and kept by `sim::kubelet::NodeAgent` under this host's name), with no partition manager in
//! the cluster. `partop fleet --kubernetes plan` makes the node's own plan on it through the
//! rehearsal transport; that plan is a Kubernetes plan, so its own `partop apply` owns the
//! cordon and the eviction, and the rollout does neither (one owner): the fleet journal has no
//! cordon, evict or uncordon step for it, the node's journal has them, the pod is evicted once
//! through the API, the node ends in DPX, uncordoned. Its own apply killed mid-eviction stops
//! the set, and `--resume` continues the node's own run (its journal decides). No mock server.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests panic on failure"
)]

mod common;
use common::control_plane::ControlPlane;
use common::env::SimEnv;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use partop::sim::kubelet::NodeAgent;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A simulated Kubernetes node of 2 MI300X with a training pod on GPU 0.
const SIM_NODE: &str = "name = \"own-drain\"\ndescription = \"t\"\nproduct = \"mi300x\"\ngpus = 2\ncompute = \"SPX\"\nmemory = \"NPS1\"\nrocm = \"7.0.2\"\nseed = 5\nreload_secs = 6\ntime_scale = 0.01\n\n[[workload]]\nname = \"trainer\"\nkind = \"batch\"\ngpu = 0\nvram_gb = 20\nbusy = 80\ncomm = \"python3\"\n\n[kubernetes]\n";

async fn until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not within 30 s: {what}");
}

async fn namespace(c: &kube::Client, ns: &str) {
    if ns != "default" {
        let n: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
        Api::all(c.clone())
            .create(&PostParams::default(), &n)
            .await
            .unwrap();
    }
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
    Api::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
}

async fn ready(c: &kube::Client) -> bool {
    Api::<Pod>::namespaced(c.clone(), "sim")
        .get_opt("trainer")
        .await
        .unwrap()
        .and_then(|p| p.status)
        .and_then(|s| s.conditions)
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn host_of(e: &SimEnv) -> String {
    let sock = e.node.state.with_extension("kubelet.sock");
    common::wait_until("the kubelet twin's socket", || sock.exists());
    let o = common::run(e.cmd().args(["snapshot", "--json"]), "");
    let snap: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    snap["host"].as_str().unwrap().to_string()
}

/// The fleet journal's node steps: (action, node, step[:done]).
fn fleet_steps(path: &std::path::Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            let s = |x: &serde_json::Value| x.as_str().unwrap_or("").to_string();
            let step = if v["outcome"]["ok"] == true {
                format!("{}:done", s(&v["targets"]["step"]))
            } else {
                s(&v["targets"]["step"])
            };
            (s(&v["action"]), s(&v["targets"]["node"]), step)
        })
        .collect()
}

#[test]
fn a_node_whose_own_plan_drains_it_is_cordoned_and_evicted_by_its_own_apply_only() {
    let cp = ControlPlane::start();
    let e = SimEnv::new(SIM_NODE);
    let host = host_of(&e);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let gone: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let c = rt.block_on(async {
        let c = partop::collect::cluster::client(&partop::collect::cluster::Target {
            kubeconfig: Some(cp.admin()),
            ..Default::default()
        })
        .await
        .unwrap();
        namespace(&c, "default").await;
        namespace(&c, "sim").await;
        let st = e.node.state.clone();
        let mut agent = NodeAgent::new(
            c.clone(),
            &host,
            Arc::new(move || partop::sim::kubelet::advertised(&st)),
            false,
        );
        let (st, count) = (e.node.state.clone(), Arc::clone(&gone));
        agent.on_gone = Some(Arc::new(move |ns: &str, name: &str| {
            *count
                .lock()
                .unwrap()
                .entry(format!("{ns}/{name}"))
                .or_default() += 1;
            partop::sim::kubelet::stop_pod(&st, ns, name);
        }));
        tokio::spawn(agent.run());
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "trainer", "namespace": "sim", "labels": {"app": "trainer"}},
            "spec": {"nodeName": host, "containers": [{"name": "c", "image": "partop/sim",
                "resources": {"limits": {"amd.com/gpu": "1"}}}]},
        }))
        .unwrap();
        until("the Node is registered", || async {
            Api::<Node>::all(c.clone())
                .get_opt(&host)
                .await
                .unwrap()
                .is_some()
        })
        .await;
        Api::<Pod>::namespaced(c.clone(), "sim")
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        until("the trainer pod runs", || ready(&c)).await;
        c
    });
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let set = d.join("set.json");
    let dest = format!("{host}=rehearse:{}", e.node.state.display());
    let fleet = |args: &[&str]| {
        let mut cmd = common::partop();
        // The node's own partop reaches the API server as a node's would: its KUBECONFIG.
        cmd.env("KUBECONFIG", cp.admin())
            .arg("--journal")
            .arg(d.join("journal.jsonl"))
            .args(["fleet", "--kubernetes", "--kubeconfig"])
            .arg(cp.admin())
            .args(["--ssh", &dest])
            .args(args);
        cmd
    };
    // The node's own plan sees the trainer's pod on its GPU (its kubelet may take a moment).
    let mut p = common::run(
        fleet(&["plan", "--layout", "dpx_nps1", "--out"]).arg(&set),
        "",
    );
    common::wait_until("the node's own plan moves sim/trainer", || {
        p = common::run(
            fleet(&["plan", "--layout", "dpx_nps1", "--out"]).arg(&set),
            "",
        );
        p.code == 0 && p.stdout.contains("evict sim/trainer")
    });
    assert!(
        p.stdout
            .contains(&format!("{host}: partop apply on the rehearsal node"))
            && p.stdout.contains("it cordons and evicts itself")
            && p.stdout.contains("allocatable after: amd.com/gpu=4"),
        "{}",
        p.stdout
    );
    // The node's own apply killed after its eviction acted, before its result is journaled
    // (the simulated node's crash injection, as a power cut would): the set stops with it.
    let saved: partop::domain::cluster_rollout::ClusterPlanSet =
        serde_json::from_str(&std::fs::read_to_string(&set).unwrap()).unwrap();
    let partop::domain::cluster_rollout::Engine::PartopApply { plan, .. } = &saved.nodes[0].engine
    else {
        panic!("not a partop apply node: {:?}", saved.nodes[0].engine);
    };
    let evict = 1 + plan
        .steps
        .iter()
        .position(|s| s.key == partop::domain::journal::StepKind::Evict)
        .expect("the node's own plan evicts");
    let r = common::run(
        fleet(&["apply", "--yes"])
            .env(partop::exec::apply::CRASH_ENV, format!("acted:{evict}"))
            .arg(&set),
        "",
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stdout.contains(&format!("{host}: failed at label")) && r.stdout.contains("exit none"),
        "the node's own failure: {r:?}"
    );
    // Resumed: the node's own journal has a run of the plan, so its apply continues it.
    let r = common::run(fleet(&["apply", "--yes", "--resume"]).arg(&set), "");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("its own journal has a run of this plan: continued (partop apply --resume)"),
        "{r:?}"
    );
    assert_eq!(e.modes().0, "DPX", "{r:?}");
    let j = fleet_steps(&d.join("fleet-journal.jsonl"));
    for step in ["cordon", "evict", "uncordon"] {
        assert!(
            !j.iter().any(|x| x.1 == host && x.2.starts_with(step)),
            "the rollout never does {step} on a node whose own apply drains it: {j:?}"
        );
    }
    for step in ["label:done", "wait_state:done", "wait_allocatable:done"] {
        assert!(
            j.iter().any(|x| x.1 == host && x.2 == step),
            "{step}: {j:?}"
        );
    }
    let own: Vec<String> = partop::exec::journal::read(
        &partop::collect::fleet::rehearsal_home(&e.node.state).join("state/partop/journal.jsonl"),
    )
    .map(|(entries, _)| {
        entries
            .iter()
            .map(|x| format!("{} {}", x.action, x.targets))
            .collect()
    })
    .unwrap_or_default();
    assert!(
        own.iter().any(|a| a.contains("\"cordon\""))
            && own.iter().any(|a| a.contains("\"evict\""))
            && own.iter().any(|a| a.contains("\"uncordon\"")),
        "the node's own journal has its cordon and eviction: {own:?}"
    );
    let node: Node = rt.block_on(Api::all(c.clone()).get(&host)).unwrap();
    assert_ne!(
        node.spec.and_then(|s| s.unschedulable),
        Some(true),
        "uncordoned"
    );
    assert_eq!(
        gone.lock().unwrap().get("sim/trainer").copied(),
        Some(1),
        "the pod was evicted once, through the API"
    );
    // Planned again, the node's own planner says its GPUs are there: not in a set.
    let again = common::run(
        fleet(&["plan", "--layout", "dpx_nps1", "--out"]).arg(d.join("again.json")),
        "",
    );
    assert_eq!(again.code, 0, "{again:?}");
    assert!(
        again
            .stdout
            .contains(&format!("already at the target: {host}"))
            && again.stdout.contains("every node is already at the target"),
        "{}",
        again.stdout
    );
}
