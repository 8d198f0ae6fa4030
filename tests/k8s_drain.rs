//! The cluster's verbs around a repartition on a Kubernetes node (issue 25, item 4), against a
//! REAL control plane on loopback (etcd, kube-apiserver, kube-controller-manager: the
//! disruption and DaemonSet controllers decide what a budget allows and where a DaemonSet
//! runs). The node is the kubelet twin's (`sim::kubelet::NodeAgent`): it registers the Node,
//! runs the pods bound to it and finishes their deletion as a kubelet does. No mock server.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests panic on failure"
)]

mod common;
use common::control_plane::{ControlPlane, LIMITED_USER};
use common::k8s_api::{
    admin, budget, make_pod, namespace, pod_ready, runtime, start_node, target, until,
};
use common::k8s_node::{K8sNode, apply, plan_moving_trainer, trainer_scenario};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use partop::domain::k8s_ops::{self, PodId};
use partop::exec::k8s::{K8sError, Limits, NodeOps};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The verbs as partop's steps hold them (kube-rs's own retry of 429 off).
async fn ops_for(cp: &ControlPlane, node: &str, limits: Limits) -> NodeOps {
    NodeOps::connect(&target(&cp.admin()), node, limits)
        .await
        .unwrap()
}

fn quick() -> Limits {
    Limits {
        verb: Duration::from_secs(10),
        budget: Duration::from_secs(60),
        gone: Duration::from_secs(30),
        reregister: Duration::from_secs(2),
        allocatable: Duration::from_secs(30),
        poll: Duration::from_millis(100),
    }
}

async fn id(ops: &NodeOps, ns: &str, name: &str) -> PodId {
    ops.pod_id(ns, name).await.unwrap().expect("the pod exists")
}

#[test]
fn a_budget_that_blocks_then_allows_is_retried_and_named() {
    let cp = ControlPlane::start();
    runtime().block_on(async {
        let c = admin(&cp).await;
        start_node(&c, "gpu-a", &Arc::new(Mutex::new(8)), false);
        for p in ["web-0", "web-1"] {
            make_pod(&c, "default", p, "gpu-a", &[("app", "web")]).await;
        }
        until("both pods ready", || async {
            pod_ready(&c, "default", "web-0").await && pod_ready(&c, "default", "web-1").await
        })
        .await;
        budget(&c, "default", "web", 2, 2).await;
        let ops = ops_for(&cp, "gpu-a", quick()).await;
        assert!(
            !ops.set_unschedulable(true).await.unwrap(),
            "was schedulable"
        );
        let victim = id(&ops, "default", "web-0").await;
        let heard: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let h = Arc::clone(&heard);
        let evicting = {
            let ops = ops.clone();
            let victim = victim.clone();
            tokio::spawn(async move {
                ops.evict(&victim, None, false, |b, m| {
                    h.lock().unwrap().push((b.into(), m.into()));
                })
                .await
            })
        };
        until("the budget refused the eviction", || async {
            !heard.lock().unwrap().is_empty()
        })
        .await;
        // The workload grows: the budget now allows one disruption, and the retry goes through.
        make_pod(&c, "default", "web-2", "gpu-a-other", &[("app", "web")]).await;
        start_node(&c, "gpu-a-other", &Arc::new(Mutex::new(8)), false);
        let r = tokio::time::timeout(Duration::from_secs(60), evicting)
            .await
            .expect("the eviction retried within its bound")
            .unwrap();
        assert_eq!(r, Ok(true), "evicted once the budget allowed it");
        let heard = heard.lock().unwrap().clone();
        assert!(
            heard[0].0.contains("default/web-pdb") && heard[0].0.contains("allows 0"),
            "the refusal names the budget and what it allows: {heard:?}"
        );
        ops.wait_gone(std::slice::from_ref(&victim)).await.unwrap();
        assert!(ops.pod_id("default", "web-0").await.unwrap().is_none());
        assert!(ops.set_unschedulable(false).await.unwrap(), "was cordoned");
    });
}

#[test]
fn a_budget_that_never_allows_fails_named_within_the_bound_and_the_pod_stays() {
    let cp = ControlPlane::start();
    runtime().block_on(async {
        let c = admin(&cp).await;
        start_node(&c, "gpu-b", &Arc::new(Mutex::new(8)), false);
        make_pod(&c, "default", "web-0", "gpu-b", &[("app", "web")]).await;
        until("pod ready", || pod_ready(&c, "default", "web-0")).await;
        budget(&c, "default", "web", 1, 1).await;
        let mut limits = quick();
        limits.budget = Duration::from_secs(3);
        let ops = ops_for(&cp, "gpu-b", limits).await;
        let victim = id(&ops, "default", "web-0").await;
        let t = Instant::now();
        let r = ops.evict(&victim, None, false, |_, _| {}).await;
        let Err(K8sError::Budget { budget, pod, .. }) = &r else {
            panic!("refused by the budget: {r:?}");
        };
        assert!(
            budget.contains("web-pdb") && pod == "default/web-0",
            "{r:?}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "bounded: {:?}",
            t.elapsed()
        );
        let text = r.unwrap_err().to_string();
        assert!(text.contains("never bypasses"), "{text}");
        assert_eq!(
            ops.pod_id("default", "web-0").await.unwrap(),
            Some(victim),
            "never bypassed: the pod is still there"
        );
    });
}

#[test]
fn the_eviction_body_reaches_the_server_whole() {
    let cp = ControlPlane::start();
    runtime().block_on(async {
        let c = admin(&cp).await;
        // A node whose kubelet never finishes a deletion: what the server recorded stays.
        let ops = ops_for(&cp, "gpu-silent", quick()).await;
        make_pod(&c, "default", "p", "gpu-silent", &[]).await;
        let p = id(&ops, "default", "p").await;
        let pods = Api::<Pod>::namespaced(c.clone(), "default");
        // Dry run: accepted, nothing deleted.
        assert_eq!(ops.evict(&p, Some(7), true, |_, _| {}).await, Ok(true));
        let now = pods.get("p").await.unwrap();
        assert!(
            now.metadata.deletion_timestamp.is_none(),
            "a dry-run eviction deleted nothing"
        );
        // A UID that is not the pod's: nothing happens (a replacement is never evicted).
        let other = PodId {
            uid: "00000000-0000-0000-0000-000000000000".into(),
            ..p.clone()
        };
        assert_eq!(
            ops.evict(&other, Some(7), false, |_, _| {}).await,
            Ok(false)
        );
        assert!(
            pods.get("p")
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_none()
        );
        // The grace period arrives.
        assert_eq!(ops.evict(&p, Some(7), false, |_, _| {}).await, Ok(true));
        let now = pods.get("p").await.unwrap();
        assert!(now.metadata.deletion_timestamp.is_some());
        assert_eq!(
            now.metadata.deletion_grace_period_seconds,
            Some(7),
            "the grace period partop sent is the one the server applied"
        );
        // Already gone (404): said as such.
        let ghost = PodId {
            name: "never-was".into(),
            ..p.clone()
        };
        assert_eq!(ops.evict(&ghost, None, false, |_, _| {}).await, Ok(false));
    });
}

#[test]
fn a_daemonset_holder_leaves_under_the_taint_and_comes_back_after() {
    let cp = ControlPlane::start();
    runtime().block_on(async {
        let c = admin(&cp).await;
        start_node(&c, "gpu-d", &Arc::new(Mutex::new(8)), false);
        let ds: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "exporter", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "exporter"}},
                "template": {"metadata": {"labels": {"app": "exporter"}},
                    "spec": {"containers": [{"name": "c", "image": "partop/sim"}]}}},
        }))
        .unwrap();
        Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(c.clone(), "default")
            .create(&PostParams::default(), &ds)
            .await
            .unwrap();
        let ops = ops_for(&cp, "gpu-d", quick()).await;
        let exporters = || async {
            ops.pods_on_node(Some("app=exporter"))
                .await
                .unwrap()
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count()
        };
        until("the DaemonSet's pod runs on the node", || async {
            exporters().await == 1
        })
        .await;
        ops.set_unschedulable(true).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            exporters().await,
            1,
            "a cordon leaves DaemonSet pods in place"
        );
        assert!(
            !ops.set_window_taint(true).await.unwrap(),
            "was not tainted"
        );
        assert!(ops.set_window_taint(true).await.unwrap(), "idempotent");
        until("the taint cleared the DaemonSet holder", || async {
            ops.pods_on_node(Some("app=exporter"))
                .await
                .unwrap()
                .is_empty()
        })
        .await;
        assert!(ops.set_window_taint(false).await.unwrap(), "was tainted");
        let node: Node = Api::all(c.clone()).get("gpu-d").await.unwrap();
        assert!(
            !node
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == k8s_ops::WINDOW_TAINT_KEY),
            "the taint is gone"
        );
        until("the DaemonSet's pod is back", || async {
            exporters().await == 1
        })
        .await;

        // Ownership, as for the cordon: the untaint step lifts the window taint its change
        // added, and leaves one of the same key that someone else put there (DCM's own flow)
        // or another change marked. 4 cases.
        assert!(!ops.set_window_taint(true).await.unwrap());
        assert_eq!(
            ops.untaint_owned("apply P on gpu-d").await.unwrap(),
            "the change window's taint removed"
        );
        let nodes: Api<Node> = Api::all(c.clone());
        let mut n = nodes.get("gpu-d").await.unwrap();
        n.spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new)
            .push(k8s_openapi::api::core::v1::Taint {
                key: k8s_ops::WINDOW_TAINT_KEY.into(),
                value: Some(k8s_ops::WINDOW_TAINT_VALUE.into()),
                effect: k8s_ops::WINDOW_TAINT_EFFECT.into(),
                time_added: None,
            });
        nodes
            .replace("gpu-d", &PostParams::default(), &n)
            .await
            .unwrap();
        let said = ops.untaint_owned("apply P on gpu-d").await.unwrap();
        assert!(said.contains("not this change's"), "{said}");
        let n = nodes.get("gpu-d").await.unwrap();
        assert!(
            n.spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == k8s_ops::WINDOW_TAINT_KEY),
            "someone else's taint is left"
        );
        // 3. Marked as another change's (a mark an earlier run left, a taint DCM re-added
        //    since): left too.
        ops.patch_node(&serde_json::json!({
            "metadata": {"annotations": {partop::exec::k8s::TAINTED_BY_PARTOP: "apply Q on gpu-d"}}
        }))
        .await
        .unwrap();
        let said = ops.untaint_owned("apply P on gpu-d").await.unwrap();
        assert!(said.contains("not this change's"), "{said}");
        assert_eq!(
            ops.untaint_owned("apply Q on gpu-d").await.unwrap(),
            "the change window's taint removed"
        );
    });
}

/// A device-plugin pod on `node` in `kube-amd-gpu`: AMD's DaemonSet's label, or (the GPU
/// operator's shape) another label and the kubelet's device-plugin directory mounted from the
/// host, which is how the kubelet knows a plugin.
async fn plugin_pod(c: &kube::Client, node: &str, by_mount: bool) {
    let mut pod = serde_json::json!({
        "metadata": {"name": "dp", "namespace": "kube-amd-gpu",
                     "labels": {"name": "amdgpu-dp-ds"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "partop/sim"}]},
    });
    if by_mount {
        pod["metadata"]["labels"] = serde_json::json!({"app.kubernetes.io/name": "device-plugin"});
        pod["spec"]["volumes"] = serde_json::json!([{"name": "dp",
            "hostPath": {"path": k8s_ops::DEVICE_PLUGIN_DIR}}]);
        pod["spec"]["containers"][0]["volumeMounts"] =
            serde_json::json!([{"name": "dp", "mountPath": k8s_ops::DEVICE_PLUGIN_DIR}]);
    }
    let pod: Pod = serde_json::from_value(pod).unwrap();
    Api::<Pod>::namespaced(c.clone(), "kube-amd-gpu")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

/// A plugin that keeps its old registration after the change is restarted once, then the new
/// count is advertised; the plugin known by AMD's label and, under the GPU operator's labels,
/// by the registration directory it mounts (2 cases); with no plugin pod left, the wait says
/// so, naming both ways it looks.
#[test]
fn a_device_plugin_that_does_not_reregister_is_restarted_once() {
    let cp = ControlPlane::start();
    runtime().block_on(async {
        let c = admin(&cp).await;
        namespace(&c, "kube-amd-gpu").await;
        for (node, by_mount) in [("gpu-p", false), ("gpu-q", true)] {
            let count = Arc::new(Mutex::new(8));
            start_node(&c, node, &count, true);
            if by_mount {
                // One pod name per namespace: the first case's plugin goes first.
                Api::<Pod>::namespaced(c.clone(), "kube-amd-gpu")
                    .delete("dp", &Default::default())
                    .await
                    .unwrap();
                let ops = ops_for(&cp, "gpu-p", quick()).await;
                until("the first plugin pod is gone", || async {
                    ops.pod_id("kube-amd-gpu", "dp").await.unwrap().is_none()
                })
                .await;
            }
            plugin_pod(&c, node, by_mount).await;
            let ops = ops_for(&cp, node, quick()).await;
            let want8 = BTreeMap::from([("amd.com/gpu".to_string(), 8)]);
            let want64 = BTreeMap::from([("amd.com/gpu".to_string(), 64)]);
            assert_eq!(
                ops.wait_allocatable(&want8).await,
                Ok(false),
                "{node}: advertised as registered, no restart"
            );
            // The plugin registered (the twin marks its pod ready in the round it registers).
            until("the plugin runs", || pod_ready(&c, "kube-amd-gpu", "dp")).await;
            let plugin = id(&ops, "kube-amd-gpu", "dp").await;
            // The repartition: the kernel now has 64, the plugin keeps its 8.
            *count.lock().unwrap() = 64;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = ops.allocatable().await.unwrap();
            assert_eq!(
                now["amd.com/gpu"], "8",
                "{node}: stale until restarted: {now:?}"
            );
            // The plugin's DaemonSet starts it again (here: the test, as its controller would).
            let restarter = {
                let c = c.clone();
                let ops = ops.clone();
                tokio::spawn(async move {
                    until("the plugin pod was deleted", || async {
                        ops.pod_id("kube-amd-gpu", "dp").await.unwrap().is_none()
                    })
                    .await;
                    plugin_pod(&c, node, by_mount).await;
                })
            };
            let t = Instant::now();
            assert_eq!(
                ops.wait_allocatable(&want64).await,
                Ok(true),
                "{node}: restarted once, then advertised"
            );
            assert!(
                t.elapsed() >= Duration::from_secs(2),
                "waited for a re-registration first"
            );
            restarter.await.unwrap();
            until("the new plugin runs", || {
                pod_ready(&c, "kube-amd-gpu", "dp")
            })
            .await;
            assert_ne!(id(&ops, "kube-amd-gpu", "dp").await.uid, plugin.uid);
            if by_mount {
                // No plugin pod left to restart: said, naming the resource and both ways.
                Api::<Pod>::namespaced(c.clone(), "kube-amd-gpu")
                    .delete("dp", &Default::default())
                    .await
                    .unwrap();
                until("the plugin pod is gone", || async {
                    ops.pod_id("kube-amd-gpu", "dp").await.unwrap().is_none()
                })
                .await;
                // The twin saw it go (a changed set of plugins registers again) before the
                // kernel's count changes.
                tokio::time::sleep(Duration::from_millis(1500)).await;
                *count.lock().unwrap() = 16;
                let mut limits = quick();
                limits.reregister = Duration::from_millis(300);
                let lonely = ops_for(&cp, node, limits).await;
                let r = lonely
                    .wait_allocatable(&BTreeMap::from([("amd.com/gpu".to_string(), 16)]))
                    .await;
                let text = r.unwrap_err().to_string();
                assert!(
                    text.contains("amd.com/gpu 64 (expected 16)")
                        && text.contains("no device-plugin pod")
                        && text.contains(k8s_ops::PLUGIN_LABELS)
                        && text.contains(k8s_ops::DEVICE_PLUGIN_DIR),
                    "{text}"
                );
            }
        }
    });
}

#[test]
fn a_user_without_the_verbs_is_refused_before_anything_changes() {
    let cp = ControlPlane::start();
    runtime().block_on(async {
        let admin = admin(&cp).await;
        start_node(&admin, "gpu-r", &Arc::new(Mutex::new(8)), false);
        let ops = NodeOps::connect(&target(&cp.limited()), "gpu-r", quick())
            .await
            .unwrap();
        let needs = k8s_ops::drain_access();
        let r = ops.preflight(&needs).await;
        let Err(K8sError::NotGranted(refused)) = &r else {
            panic!("refused: {r:?}");
        };
        // Every one of the drain's verbs is named.
        let words = r.clone().unwrap_err().to_string();
        assert_eq!(refused.len(), needs.len(), "{words}");
        for a in &needs {
            assert!(words.contains(&a.to_string()), "{a} named in {words}");
        }
        // Grant everything but the eviction: only that one is named.
        let role = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "partop-drain-partial"},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch", "update"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
                {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list"]},
            ],
        });
        let f = cp.dir.path().join("role.json");
        std::fs::write(&f, role.to_string()).unwrap();
        let (ok, out) = cp.kubectl(&cp.admin(), &["apply", "-f", f.to_str().unwrap()]);
        assert!(ok, "{out}");
        let (ok, out) = cp.kubectl(
            &cp.admin(),
            &[
                "create",
                "clusterrolebinding",
                "partial",
                "--clusterrole=partop-drain-partial",
                &format!("--user={LIMITED_USER}"),
            ],
        );
        assert!(ok, "{out}");
        let r = ops.preflight(&needs).await;
        let text = r.unwrap_err().to_string();
        assert!(
            text.contains("nothing was changed: create pods/eviction: "),
            "only the eviction is named: {text}"
        );
        let node: Node = Api::all(admin.clone()).get("gpu-r").await.unwrap();
        assert_ne!(
            node.spec.and_then(|s| s.unschedulable),
            Some(true),
            "nothing changed: the node is not cordoned"
        );
    });
}

/// The drain of 10 bare pods on the twin's node: cordon, ten evictions, the wait until all are
/// gone, uncordon. Printed for docs/performance.md.
#[test]
fn a_drain_of_ten_bare_pods_is_measured() {
    let cp = ControlPlane::start();
    runtime().block_on(async {
        let c = admin(&cp).await;
        start_node(&c, "gpu-m", &Arc::new(Mutex::new(8)), false);
        let names: Vec<String> = (0..10).map(|i| format!("job-{i}")).collect();
        for n in &names {
            make_pod(&c, "default", n, "gpu-m", &[("app", "job")]).await;
        }
        for n in &names {
            until("pod ready", || pod_ready(&c, "default", n)).await;
        }
        let ops = ops_for(&cp, "gpu-m", quick()).await;
        let mut ids = Vec::new();
        for n in &names {
            ids.push(id(&ops, "default", n).await);
        }
        let t = Instant::now();
        ops.set_unschedulable(true).await.unwrap();
        for p in &ids {
            assert_eq!(ops.evict(p, None, false, |_, _| {}).await, Ok(true));
        }
        let evicted = t.elapsed();
        ops.wait_gone(&ids).await.unwrap();
        ops.set_unschedulable(false).await.unwrap();
        let all = t.elapsed();
        assert!(ops.pods_on_node(Some("app=job")).await.unwrap().is_empty());
        println!(
            "drain of {} pods: {:.2} s (evictions sent in {:.2} s)",
            ids.len(),
            all.as_secs_f64(),
            evicted.as_secs_f64()
        );
    });
}

#[test]
fn a_repartition_moves_the_pods_through_the_cluster_and_a_crash_resumes_and_uncordons() {
    let e = common::env::SimEnv::new(&trainer_scenario("k8s-drain"));
    let k = K8sNode::start(&e, false);
    k.run_trainer();
    let K8sNode {
        cp, rt, c, host, ..
    } = k;
    // The plan shows the pod to move, not its pid.
    let (path, plan) = plan_moving_trainer(&e);
    let k = plan.kubernetes.clone().unwrap();
    assert_eq!(k.node, host);
    let text = common::run(e.cmd().args(["plan", "--compute", "DPX"]), "").stdout;
    assert!(
        text.contains(&format!(
            "pods to move off the node {host} (1), by eviction:"
        )) && text.contains("sim/trainer")
            && text.contains("nothing else holds the affected GPUs"),
        "the plan shows the pod to move:\n{text}"
    );
    assert_eq!(
        k.allocatable,
        BTreeMap::from([("amd.com/gpu".to_string(), 4)]),
        "2 GPUs in DPX"
    );
    assert!(
        plan.stops.iter().all(|s| s.name != "python3"),
        "the pod's process is not stopped by pid: {:?}",
        plan.stops
    );
    let keys: Vec<&str> = plan.steps.iter().map(|s| s.key.as_str()).collect();
    let at = |k: &str| {
        keys.iter()
            .position(|x| *x == k)
            .unwrap_or_else(|| panic!("{k} in {keys:?}"))
    };
    assert!(
        at("cordon") < at("evict") && at("evict") < at("taint"),
        "{keys:?}"
    );
    assert!(at("taint") < at("wait_idle") && at("verify") < at("wait_allocatable"));
    assert!(at("wait_allocatable") < at("untaint") && at("untaint") < at("uncordon"));
    // Killed right after the evictions: the node is left cordoned, the pod gone.
    let evict = at("evict");
    let o = common::run(
        apply(&e, &cp.admin(), &path, &[])
            .env(partop::exec::apply::CRASH_ENV, format!("end:{}", evict + 1)),
        "",
    );
    assert_ne!(o.code, 0, "killed: {}{}", o.stdout, o.stderr);
    rt.block_on(async {
        let node: Node = Api::all(c.clone()).get(&host).await.unwrap();
        assert_eq!(
            node.spec.and_then(|s| s.unschedulable),
            Some(true),
            "left cordoned"
        );
        assert!(
            Api::<Pod>::namespaced(c.clone(), "sim")
                .get_opt("trainer")
                .await
                .unwrap()
                .is_none(),
            "the pod was evicted"
        );
    });
    // `partop journal` says the run is unfinished; the resume finishes and uncordons.
    let j = common::run(e.cmd().arg("journal"), "");
    assert!(
        format!("{}{}", j.stdout, j.stderr).contains("Continue it with"),
        "{}{}",
        j.stdout,
        j.stderr
    );
    let o = common::run(&mut apply(&e, &cp.admin(), &path, &["--resume"]), "");
    assert_eq!(o.code, 0, "resumed: {}{}", o.stdout, o.stderr);
    assert_eq!(e.modes().0, "DPX");
    rt.block_on(async {
        let node: Node = Api::all(c.clone()).get(&host).await.unwrap();
        let spec = node.spec.clone().unwrap_or_default();
        assert_ne!(spec.unschedulable, Some(true), "uncordoned");
        assert!(
            !spec
                .taints
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == k8s_ops::WINDOW_TAINT_KEY),
            "untainted"
        );
        assert_eq!(
            node.status.unwrap().allocatable.unwrap()["amd.com/gpu"].0,
            "4",
            "the node advertises the new count"
        );
    });
}

#[test]
fn a_user_without_the_verbs_is_refused_at_the_cordon_and_nothing_changes() {
    let e = common::env::SimEnv::new(&trainer_scenario("k8s-drain"));
    let k = K8sNode::start(&e, false);
    k.run_trainer();
    let K8sNode {
        cp, rt, c, host, ..
    } = k;
    let (path, _) = plan_moving_trainer(&e);
    let o = common::run(&mut apply(&e, &cp.limited(), &path, &[]), "");
    let text = format!("{}{}", o.stdout, o.stderr);
    assert_ne!(o.code, 0, "{text}");
    assert!(
        text.contains("create pods/eviction") && text.contains("patch nodes"),
        "the refused verbs are named: {text}"
    );
    assert!(
        text.contains("nothing was changed") && !text.contains("may be left"),
        "nothing was cordoned, so no undo is offered: {text}"
    );
    assert_eq!(e.modes().0, "SPX", "the GPUs were not touched");
    rt.block_on(async {
        let node: Node = Api::all(c.clone()).get(&host).await.unwrap();
        assert_ne!(node.spec.and_then(|s| s.unschedulable), Some(true));
        assert!(
            Api::<Pod>::namespaced(c.clone(), "sim")
                .get_opt("trainer")
                .await
                .unwrap()
                .is_some(),
            "the pod stays"
        );
    });
}

#[test]
fn a_plugin_that_does_not_reregister_fails_saying_what_the_node_is_left_with_then_resumes() {
    let e = common::env::SimEnv::new(&trainer_scenario("k8s-drain"));
    let k = K8sNode::start(&e, true);
    k.run_trainer();
    let K8sNode {
        cp, rt, c, host, ..
    } = k;
    let (path, _) = plan_moving_trainer(&e);
    // The node is a DCM profile's: the local change is said to be at risk.
    let (ok, out) = cp.kubectl(
        &cp.admin(),
        &[
            "label",
            "node",
            &host,
            "dcm.amd.com/gpu-config-profile=spx-profile",
        ],
    );
    assert!(ok, "{out}");
    // No device-plugin pod on the node: after the change, the wait for the new count fails
    // once the plugin had its time to re-register (30 s).
    let o = common::run(&mut apply(&e, &cp.admin(), &path, &[]), "");
    let text = format!("{}{}", o.stdout, o.stderr);
    assert_ne!(o.code, 0, "{text}");
    for part in [
        "(wait_allocatable) failed",
        "amd.com/gpu 2 (expected 4)",
        "no device-plugin pod is on it to restart (one labelled name=amdgpu-dp-ds or mounting /var/lib/kubelet/device-plugins)",
        "may be left cordoned and tainted",
        "managed by the DCM profile spx-profile",
        "DCM may revert this local change",
        &format!("kubectl taint nodes {host} amd-dcm=up:NoExecute-"),
        &format!("kubectl uncordon {host}"),
    ] {
        assert!(text.contains(part), "`{part}` in:\n{text}");
    }
    assert_eq!(e.modes().0, "DPX", "the change itself was made");
    // The operator starts the plugin; the resume finishes, untaints and uncordons.
    rt.block_on(async {
        namespace(&c, "kube-amd-gpu").await;
        make_pod(&c, "kube-amd-gpu", "dp", &host, &[("name", "amdgpu-dp-ds")]).await;
    });
    let o = common::run(&mut apply(&e, &cp.admin(), &path, &["--resume"]), "");
    assert_eq!(o.code, 0, "resumed: {}{}", o.stdout, o.stderr);
    rt.block_on(async {
        let node: Node = Api::all(c.clone()).get(&host).await.unwrap();
        let spec = node.spec.clone().unwrap_or_default();
        assert_ne!(spec.unschedulable, Some(true), "uncordoned");
        assert!(spec.taints.unwrap_or_default().is_empty(), "untainted");
    });
}

#[test]
fn the_staged_layout_prints_as_a_dcm_profile() {
    let e = common::env::SimEnv::new(&trainer_scenario("k8s-drain"));
    let o = common::run(
        e.cmd().args([
            "plan",
            "--gpu",
            "0000:05:00",
            "--compute",
            "DPX",
            "--dcm",
            "mixed-1",
        ]),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"gpu-config-profiles": {"mixed-1": {
            "skippedGPUs": {"ids": []},
            "profiles": [
                {"computePartition": "DPX", "memoryPartition": "NPS1", "numGPUsAssigned": 1},
                {"computePartition": "SPX", "memoryPartition": "NPS1", "numGPUsAssigned": 1},
            ],
        }}}),
        "the first GPU staged to DPX, the second kept in SPX"
    );
    let o = common::run(
        e.cmd()
            .args(["plan", "--compute", "DPX", "--dcm", "bad name\u{1b}[2J"]),
        "",
    );
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("label") && !o.stderr.contains('\u{1b}'),
        "refused, escaped: {}",
        o.stderr
    );
}

/// One change at a time across machines: a node cordoned by one partop change (a rollout from
/// an operator's laptop, an apply on the node) refuses another's cordon, nothing changed, and
/// the other's uncordon leaves it; the holder's own cordon (a resume of the same change) and
/// uncordon act; a cordon marked by an earlier partop without its change's name is taken over
/// as before; a mark a `kubectl uncordon` left holds nothing. 6 cases.
#[test]
fn a_node_cordoned_by_one_partop_change_is_refused_to_another() {
    let cp = ControlPlane::start();
    runtime().block_on(async {
        let c = admin(&cp).await;
        let count = Arc::new(Mutex::new(8));
        start_node(&c, "gpu-o", &count, false);
        let ops = ops_for(&cp, "gpu-o", quick()).await;
        until("the node registers", || async {
            ops.allocatable().await.is_ok()
        })
        .await;
        let holder = |n: &Node| {
            n.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(partop::exec::k8s::CORDONED_BY_PARTOP))
                .cloned()
        };
        let nodes: Api<Node> = Api::all(c.clone());
        assert_eq!(
            ops.cordon_owned("fleet rollout A").await.unwrap(),
            "gpu-o cordoned"
        );
        // 1. Another change's cordon: refused, nothing changed.
        let e = ops.cordon_owned("apply P on gpu-o").await.unwrap_err();
        assert!(matches!(e, K8sError::Held(_)), "{e}");
        assert!(e.to_string().contains("fleet rollout A"), "{e}");
        let n = nodes.get("gpu-o").await.unwrap();
        assert_eq!(holder(&n).as_deref(), Some("fleet rollout A"));
        // 2. Its uncordon leaves the holder's cordon.
        let said = ops.uncordon_owned("apply P on gpu-o").await.unwrap();
        assert!(said.contains("another partop change"), "{said}");
        let n = nodes.get("gpu-o").await.unwrap();
        assert_eq!(n.spec.and_then(|s| s.unschedulable), Some(true));
        // 3. The holder again (a resume): its cordon stands; 4. its uncordon lifts it.
        ops.cordon_owned("fleet rollout A").await.unwrap();
        assert_eq!(
            ops.uncordon_owned("fleet rollout A").await.unwrap(),
            "gpu-o uncordoned"
        );
        let n = nodes.get("gpu-o").await.unwrap();
        assert_ne!(n.spec.as_ref().and_then(|s| s.unschedulable), Some(true));
        assert_eq!(holder(&n), None);
        // 5. An earlier partop's unnamed mark is taken over.
        ops.patch_node(&serde_json::json!({
            "metadata": {"annotations": {partop::exec::k8s::CORDONED_BY_PARTOP: "true"}},
            "spec": {"unschedulable": true},
        }))
        .await
        .unwrap();
        ops.cordon_owned("apply P on gpu-o").await.unwrap();
        let n = nodes.get("gpu-o").await.unwrap();
        assert_eq!(holder(&n).as_deref(), Some("apply P on gpu-o"));
        // 6. A mark left by a bare `kubectl uncordon` (the annotation stays)
        //    holds nothing: another change cordons.
        ops.set_unschedulable(false).await.unwrap();
        ops.cordon_owned("fleet rollout B").await.unwrap();
        let n = nodes.get("gpu-o").await.unwrap();
        assert_eq!(holder(&n).as_deref(), Some("fleet rollout B"));
        ops.uncordon_owned("fleet rollout B").await.unwrap();
    });
}
