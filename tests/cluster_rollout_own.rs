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
use common::env::SimEnv;
use common::fleet_journal;
use common::k8s_node::{K8sNode, trainer_scenario};

#[test]
fn a_node_whose_own_plan_drains_it_is_cordoned_and_evicted_by_its_own_apply_only() {
    let e = SimEnv::new(&trainer_scenario("own-drain"));
    let k = K8sNode::start(&e, false);
    k.run_trainer();
    let (cp, host) = (&k.cp, k.host.as_str());
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
    let j = fleet_journal::steps(&d.join("fleet-journal.jsonl"));
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
    assert_ne!(
        k.node().spec.and_then(|s| s.unschedulable),
        Some(true),
        "uncordoned"
    );
    assert_eq!(
        k.deletions("sim/trainer"),
        1,
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
