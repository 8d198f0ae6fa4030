//! The simulated node as a node of a REAL API server, started from the CLI (`partop sim start
//! --kubernetes --kubeconfig F`; issue 25's leftovers): its Node registered with the right
//! allocatable, pods created through the API run as its workloads on the GPUs its device
//! plugin hands out (or stay Pending with the kubelet's reason), the DCM profile that labels
//! the Node said in the snapshot, the plan and the monitor's header, and KServe's pods shown
//! as models. The control plane is `tests/common/control_plane.rs` (etcd, kube-apiserver,
//! kube-controller-manager on loopback); no mock server.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests panic on failure"
)]

mod common;
use common::control_plane::ControlPlane;
use common::k8s_api::{admin, namespace, runtime, until_within};
use common::{Out, partop, run, wait_within};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a wait here may take: the node's twin runs in its own process, started through the
/// CLI, and a snapshot costs a process.
const SLOW_SECS: u64 = 40;

/// A Kubernetes node of `gpus` MI300X in DPX (two logical GPUs each: partition 0 named by its
/// BDF, partition 1 by `amdgpu_xcp_N`), named `node` in the API server, no workload of its own.
fn scenario(node: &str, gpus: u32) -> String {
    format!(
        "name = \"k8s-node\"\ndescription = \"t\"\nproduct = \"mi300x\"\ngpus = {gpus}\ncompute = \"DPX\"\nmemory = \"NPS1\"\nrocm = \"7.0.2\"\nseed = 5\nreload_secs = 6\ntime_scale = 0.01\n\n[kubernetes]\nnode = \"{node}\"\n"
    )
}

/// A simulated node joined to `cp` through the CLI; stopped on drop.
struct SimNode {
    dir: tempfile::TempDir,
    state: PathBuf,
}

impl SimNode {
    fn start(cp: &ControlPlane, node: &str, gpus: u32) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("node.json");
        let sc = dir.path().join("scenario.toml");
        std::fs::write(&sc, scenario(node, gpus)).unwrap();
        let o = run(
            partop()
                .args(["sim", "start"])
                .arg(&sc)
                .arg("--state")
                .arg(&state)
                .arg("--kubernetes")
                .arg("--kubeconfig")
                .arg(cp.admin()),
            "",
        );
        assert_eq!(o.code, 0, "sim start: {}{}", o.stdout, o.stderr);
        assert!(
            o.stdout
                .contains(&format!("Kubernetes node {node} joins the API server of")),
            "sim start says the node joins: {}",
            o.stdout
        );
        Self { dir, state }
    }

    fn cmd(&self) -> std::process::Command {
        let mut c = partop();
        let xdg = self.dir.path().join("xdg");
        c.env("XDG_STATE_HOME", &xdg)
            .env("XDG_CONFIG_HOME", &xdg)
            .env_remove("KUBECONFIG")
            .env_remove("NODE_NAME");
        c.arg("--sim-state").arg(&self.state);
        c
    }

    fn snapshot(&self) -> Value {
        let o = self.cmd().args(["snapshot", "--json"]).output().unwrap();
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "snapshot --json: {e}\n{}",
                String::from_utf8_lossy(&o.stderr)
            )
        })
    }

    fn twin_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("node.logs/kernel-twin.log"))
            .unwrap_or_default()
    }
}

impl Drop for SimNode {
    fn drop(&mut self) {
        let _ = run(
            partop().args(["sim", "stop", "--state"]).arg(&self.state),
            "",
        );
    }
}

async fn allocatable(c: &kube::Client, node: &str) -> Option<String> {
    Api::<Node>::all(c.clone())
        .get_opt(node)
        .await
        .ok()
        .flatten()
        .and_then(|n| n.status)
        .and_then(|s| s.allocatable)
        .and_then(|a| a.get("amd.com/gpu").map(|q| q.0.clone()))
}

/// A pod asking for `gpus` of `amd.com/gpu`, bound to `node`, with `labels`.
fn gpu_pod(ns: &str, name: &str, node: &str, gpus: u32, labels: &Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "rocm/pytorch",
            "resources": {"limits": {"amd.com/gpu": gpus.to_string()}}}]},
    }))
    .unwrap()
}

async fn phase(c: &kube::Client, ns: &str, name: &str) -> (String, String) {
    let p = Api::<Pod>::namespaced(c.clone(), ns)
        .get_opt(name)
        .await
        .unwrap();
    let s = p.and_then(|p| p.status).unwrap_or_default();
    (s.phase.unwrap_or_default(), s.reason.unwrap_or_default())
}

/// The logical GPUs the snapshot's processes of pod `ns/name` hold, with their container.
fn pod_gpus(snap: &Value, ns: &str, name: &str) -> Vec<(u64, String)> {
    snap["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["pod"]["namespace"] == ns && p["pod"]["pod"] == name)
        .flat_map(|p| {
            let c = p["pod"]["container"].as_str().unwrap_or("").to_string();
            p["gpus"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |g| (g["gpu_id"].as_u64().unwrap(), c.clone()))
        })
        .collect()
}

/// Each logical GPU's partition id and the pods the kubelet allocated it to.
fn partitions(snap: &Value) -> Vec<(u64, u64, Vec<String>)> {
    snap["gpus"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["partitions"].as_array().into_iter().flatten())
        .map(|l| {
            (
                l["gpu_id"].as_u64().unwrap(),
                l["partition_id"].as_u64().unwrap(),
                l["pods"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        format!(
                            "{}/{}",
                            p["namespace"].as_str().unwrap(),
                            p["pod"].as_str().unwrap()
                        )
                    })
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn sim_start_joins_the_api_server_and_its_node_advertises_every_logical_gpu() {
    let cp = ControlPlane::start();
    let n = SimNode::start(&cp, "sim-gpu-1", 2);
    runtime().block_on(async {
        let c = admin(&cp).await;
        until_within(
            SLOW_SECS,
            "the Node sim-gpu-1 advertises 4 amd.com/gpu (2 GPUs in DPX)",
            || async { allocatable(&c, "sim-gpu-1").await.as_deref() == Some("4") },
        )
        .await;
        let node: Node = Api::all(c.clone()).get("sim-gpu-1").await.unwrap();
        let st = node.status.unwrap();
        assert!(
            st.conditions
                .unwrap()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
            "the node is Ready"
        );
        assert_eq!(st.capacity.unwrap()["amd.com/gpu"].0, "4");
    });
    assert!(!n.twin_log().contains("cannot join"), "{}", n.twin_log());
}

#[test]
fn sim_start_refuses_a_kubeconfig_it_cannot_read_and_a_context_it_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let sc = dir.path().join("s.toml");
    std::fs::write(&sc, scenario("x", 1)).unwrap();
    let state = dir.path().join("n.json");
    let kc = dir.path().join("kc");
    std::fs::write(&kc, "apiVersion: v1\nkind: Config\nclusters: []\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\nusers: []\ncurrent-context: a\n").unwrap();
    let cases: [(&[&str], &str); 3] = [
        (
            &["--kubeconfig", "/nonexistent/kc"],
            "kubeconfig /nonexistent/kc",
        ),
        (
            &[
                "--kubeconfig",
                kc.to_str().unwrap(),
                "--context",
                "b\x1b[2J",
            ],
            "has no context b\\x1b[2J",
        ),
        (&["--context", "a"], "--kubeconfig"),
    ];
    for (args, said) in cases {
        let o: Out = run(
            partop()
                .args(["sim", "start"])
                .arg(&sc)
                .arg("--state")
                .arg(&state)
                .arg("--kubernetes")
                .args(args),
            "",
        );
        assert_ne!(o.code, 0, "{args:?} refused");
        assert!(
            o.stderr.contains(said) && !o.stderr.contains('\x1b'),
            "{args:?}: says {said:?}, escaped: {}",
            o.stderr
        );
        assert!(!state.exists(), "{args:?}: nothing started");
    }
    eprintln!("{} refusals of sim start", cases.len());
}

fn label_dcm(cp: &ControlPlane, node: &str, profile: &str, state: &str) {
    let (ok, o) = cp.kubectl(
        &cp.admin(),
        &[
            "label",
            "node",
            node,
            "--overwrite",
            &format!("dcm.amd.com/gpu-config-profile={profile}"),
            &format!("dcm.amd.com/gpu-config-profile-state={state}"),
        ],
    );
    assert!(ok, "kubectl label: {o}");
}

/// The header of the monitor drawn over `snap` (the JSON partop wrote), 160 columns.
fn header_of(snap: &Value) -> String {
    use partop::ui::state::{Msg, State, update};
    let s: partop::domain::Snapshot = serde_json::from_value(snap.clone()).unwrap();
    let (km, _) = partop::ui::keymap::Keymap::load("default", None, false);
    let mut st = State::new(km, partop::domain::findings::Thresholds::default(), 1000);
    update(&mut st, Msg::Snapshot(std::sync::Arc::new(s)));
    update(&mut st, Msg::Resize(160, 40));
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(160, 40)).unwrap();
    let th = partop::ui::theme::Theme::load("default", Path::new("/nonexistent")).0;
    t.draw(|f| partop::ui::view::render(f, &st, &th)).unwrap();
    let text = format!("{}", t.backend());
    text.lines().take(4).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_node_managed_by_a_dcm_profile_is_said_in_the_snapshot_the_header_and_the_plan() {
    let cp = ControlPlane::start();
    let n = SimNode::start(&cp, "sim-dcm", 1);
    let rt = runtime();
    rt.block_on(async {
        let c = admin(&cp).await;
        until_within(SLOW_SECS, "the Node registered", || async {
            allocatable(&c, "sim-dcm").await.is_some()
        })
        .await;
    });
    // Not labelled: nothing said.
    let snap = n.snapshot();
    assert_eq!(
        snap["kubelet"]["node"]["name"], "sim-dcm",
        "{}",
        snap["kubelet"]
    );
    assert!(snap["kubelet"]["node"]["dcm_profile"].is_null());
    assert!(!header_of(&snap).contains("DCM:"));
    label_dcm(&cp, "sim-dcm", "cpx-nps4", "success");
    let snap = n.snapshot();
    assert_eq!(snap["kubelet"]["node"]["dcm_profile"], "cpx-nps4");
    assert_eq!(snap["kubelet"]["node"]["dcm_state"], "success");
    let h = header_of(&snap);
    assert!(
        h.contains("DCM:cpx-nps4 success"),
        "the header says it:\n{h}"
    );
    // The plan (text and JSON) warns and names the cluster's way; so does apply's.
    let o = run(n.cmd().args(["plan", "--compute", "SPX"]), "");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains(
            "WARNING: the node sim-dcm is managed by the DCM profile cpx-nps4: DCM may revert a local change"
        ) && o.stdout.contains("--dcm NAME"),
        "the plan warns:\n{}",
        o.stdout
    );
    // The JSON plan is the change only: the warning goes to stderr beside it.
    let o = run(n.cmd().args(["plan", "--compute", "SPX", "--json"]), "");
    let plan: Value = serde_json::from_str(&o.stdout).unwrap();
    assert!(
        plan["kubernetes"]["dcm"].is_null(),
        "{}",
        plan["kubernetes"]
    );
    assert!(
        o.stderr
            .contains("partop: WARNING: the node sim-dcm is managed by the DCM profile cpx-nps4"),
        "{}",
        o.stderr
    );
    assert_eq!(
        plan["kubernetes"]["node"], "sim-dcm",
        "the simulated node's name"
    );
    let p = n.dir.path().join("p.json");
    std::fs::write(&p, &o.stdout).unwrap();
    let o = run(n.cmd().arg("apply").arg(&p), "n\n");
    assert!(
        o.stdout
            .contains("WARNING: the node sim-dcm is managed by the DCM profile cpx-nps4"),
        "apply shows the warning before it asks:\n{}{}",
        o.stdout,
        o.stderr
    );
    // A hostile label value (the API server allows only label characters, so it is the
    // state label made long): bounded in the header.
    label_dcm(&cp, "sim-dcm", "cpx-nps4", &"x".repeat(63));
    let h = header_of(&n.snapshot());
    assert!(
        h.contains(&format!("DCM:cpx-nps4 {}", "x".repeat(63))),
        "{h}"
    );
}

#[test]
fn an_api_server_that_is_absent_says_nothing_and_one_that_refuses_is_said() {
    let cp = ControlPlane::start();
    // Absent: a kubeconfig naming a port nobody listens on.
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let absent = dir.path().join("absent.kubeconfig");
    std::fs::write(
        &absent,
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"),
    )
    .unwrap();
    let rt = runtime();
    let read = |kc: &Path| {
        rt.block_on(async {
            let mut api = partop::collect::kube_node::ApiNode::new(
                partop::collect::cluster::Target {
                    kubeconfig: Some(kc.to_path_buf()),
                    ..Default::default()
                },
                "gpu-x".into(),
            );
            let t = Instant::now();
            let a = api.latest().await;
            (a, t.elapsed())
        })
    };
    let (a, took) = read(&absent);
    assert!(
        a.node.is_none() && a.pods.is_empty() && a.refused.is_none(),
        "{a:?}"
    );
    assert!(took < Duration::from_secs(4), "bounded: {took:?}");
    // Refused: the user without rights; the verb and resource are named.
    let (a, _) = read(&cp.limited());
    let said = a.refused.expect("the refusal is said");
    assert!(
        said.contains("refused to get nodes") && said.contains("grant `get` on `nodes`"),
        "{said}"
    );
    assert!(a.node.is_none());
}

#[test]
fn pods_created_through_the_api_run_on_the_gpus_the_plugin_hands_out_and_stop_when_deleted() {
    let cp = ControlPlane::start();
    let n = SimNode::start(&cp, "sim-pods", 1);
    let rt = runtime();
    let c = rt.block_on(async {
        let c = admin(&cp).await;
        namespace(&c, "team-a").await;
        until_within(SLOW_SECS, "the Node advertises 2", || async {
            allocatable(&c, "sim-pods").await.as_deref() == Some("2")
        })
        .await;
        let pods = Api::<Pod>::namespaced(c.clone(), "team-a");
        for name in ["job-0", "job-1"] {
            pods.create(
                &PostParams::default(),
                &gpu_pod("team-a", name, "sim-pods", 1, &json!({})),
            )
            .await
            .unwrap();
        }
        for name in ["job-0", "job-1"] {
            until_within(SLOW_SECS, &format!("{name} Running"), || async {
                phase(&c, "team-a", name).await.0 == "Running"
            })
            .await;
        }
        // The node's two logical GPUs are taken: a third pod stays Pending with the kubelet's
        // reason; one asking for two is refused as the simulator's limit, said.
        pods.create(
            &PostParams::default(),
            &gpu_pod("team-a", "job-2", "sim-pods", 1, &json!({})),
        )
        .await
        .unwrap();
        until_within(SLOW_SECS, "job-2 Pending OutOfamd.com/gpu", || async {
            let p = phase(&c, "team-a", "job-2").await;
            p == ("Pending".into(), "OutOfamd.com/gpu".into())
        })
        .await;
        c
    });
    // partop sees each pod on its own logical GPU: partition 0 through its BDF, partition 1
    // through amdgpu_xcp_N, both joined (nothing unmatched).
    let mut snap = n.snapshot();
    wait_within("both pods' processes in the snapshot", SLOW_SECS, || {
        snap = n.snapshot();
        !pod_gpus(&snap, "team-a", "job-0").is_empty()
            && !pod_gpus(&snap, "team-a", "job-1").is_empty()
    });
    let a = pod_gpus(&snap, "team-a", "job-0");
    let b = pod_gpus(&snap, "team-a", "job-1");
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(b.len(), 1, "{b:?}");
    assert_ne!(a[0].0, b[0].0, "each pod its own logical GPU");
    assert_eq!(a[0].1, "main", "the container that asked");
    let parts = partitions(&snap);
    let mut ids: Vec<u64> = parts
        .iter()
        .filter(|(_, _, pods)| !pods.is_empty())
        .map(|(_, pid, _)| *pid)
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [0, 1],
        "a pod on partition 0 and one on partition 1: {parts:?}"
    );
    assert!(
        snap["kubelet"]["unmatched"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "every device id the twin handed out names a partition: {}",
        snap["kubelet"]
    );
    assert_eq!(snap["kubelet"]["pods_with_devices"], 2);
    // Deleted: its workload stops and the pending pod takes the GPU freed.
    rt.block_on(async {
        Api::<Pod>::namespaced(c.clone(), "team-a")
            .delete("job-0", &DeleteParams::default())
            .await
            .unwrap();
        until_within(SLOW_SECS, "job-2 Running on the GPU job-0 left", || async {
            phase(&c, "team-a", "job-2").await.0 == "Running"
        })
        .await;
    });
    wait_within(
        "job-0 gone from the snapshot, job-2 on its GPU",
        SLOW_SECS,
        || {
            snap = n.snapshot();
            pod_gpus(&snap, "team-a", "job-0").is_empty()
                && pod_gpus(&snap, "team-a", "job-2").first().map(|g| g.0) == Some(a[0].0)
        },
    );
    rt.block_on(async {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "big", "namespace": "team-a"},
            "spec": {"nodeName": "sim-pods", "containers": [{"name": "main", "image": "x",
                "resources": {"limits": {"amd.com/gpu": "2"}}}]},
        }))
        .unwrap();
        Api::<Pod>::namespaced(c.clone(), "team-a")
            .create(&PostParams::default(), &p)
            .await
            .unwrap();
        until_within(SLOW_SECS, "big Pending, said", || async {
            phase(&c, "team-a", "big").await.1 == "UnexpectedAdmissionError"
        })
        .await;
        let p = Api::<Pod>::namespaced(c.clone(), "team-a")
            .get("big")
            .await
            .unwrap();
        let m = p.status.unwrap().message.unwrap_or_default();
        assert!(m.contains("asks for 2 of amd.com/gpu"), "{m}");
    });
}

#[test]
fn a_deployment_made_by_the_controllers_runs_its_pods_on_the_node() {
    let cp = ControlPlane::start();
    let n = SimNode::start(&cp, "sim-deploy", 2);
    let rt = runtime();
    rt.block_on(async {
        let c = admin(&cp).await;
        namespace(&c, "serving").await;
        until_within(SLOW_SECS, "the Node advertises 4", || async {
            allocatable(&c, "sim-deploy").await.as_deref() == Some("4")
        })
        .await;
        // The Deployment's pods are bound to the node by its template (no scheduler runs on
        // the test control plane); the deployment and replicaset controllers make them.
        let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
            "metadata": {"name": "trainers", "namespace": "serving"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "trainers"}},
                "template": {"metadata": {"labels": {"app": "trainers"}},
                    "spec": {"nodeName": "sim-deploy", "containers": [{"name": "train",
                        "image": "rocm/pytorch",
                        "resources": {"limits": {"amd.com/gpu": "1"}}}]}}},
        }))
        .unwrap();
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(c.clone(), "serving")
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
        until_within(SLOW_SECS, "the Deployment's 3 replicas ready", || async {
            Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(c.clone(), "serving")
                .get("trainers")
                .await
                .ok()
                .and_then(|d| d.status)
                .and_then(|s| s.ready_replicas)
                == Some(3)
        })
        .await;
    });
    let mut held = 0;
    wait_within(
        "three pods of the Deployment hold GPUs in the snapshot",
        SLOW_SECS,
        || {
            let snap = n.snapshot();
            held = partitions(&snap)
                .iter()
                .filter(|(_, _, p)| p.iter().any(|p| p.starts_with("serving/trainers-")))
                .count();
            held == 3
        },
    );
}

#[test]
fn kserve_pods_are_models_with_their_replicas_healthy() {
    let cp = ControlPlane::start();
    let n = SimNode::start(&cp, "sim-kserve", 2);
    let rt = runtime();
    rt.block_on(async {
        let c = admin(&cp).await;
        namespace(&c, "llm").await;
        until_within(SLOW_SECS, "the Node advertises 4", || async {
            allocatable(&c, "sim-kserve").await.as_deref() == Some("4")
        })
        .await;
        let pods = Api::<Pod>::namespaced(c.clone(), "llm");
        let isvc = json!({"serving.kserve.io/inferenceservice": "llama-chat"});
        for name in ["llama-chat-predictor-0", "llama-chat-predictor-1"] {
            pods.create(
                &PostParams::default(),
                &gpu_pod("llm", name, "sim-kserve", 1, &isvc),
            )
            .await
            .unwrap();
        }
        // A replica elsewhere that is not ready: the model's replicas count it.
        let elsewhere: Pod = serde_json::from_value(json!({
            "metadata": {"name": "llama-chat-predictor-2", "namespace": "llm", "labels": isvc},
            "spec": {"containers": [{"name": "kserve-container", "image": "vllm/vllm-openai"}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &elsewhere)
            .await
            .unwrap();
        // A vLLM server recognised by its command, owned by no InferenceService.
        let vllm: Pod = serde_json::from_value(json!({
            "metadata": {"name": "qwen-0", "namespace": "llm", "labels": {"app": "qwen"}},
            "spec": {"nodeName": "sim-kserve", "containers": [{"name": "server",
                "image": "vllm/vllm-openai", "command": ["vllm", "serve"],
                "args": ["Qwen/Qwen3-8B", "--port", "8000"],
                "resources": {"limits": {"amd.com/gpu": "1"}}}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &vllm).await.unwrap();
        for name in ["llama-chat-predictor-0", "llama-chat-predictor-1", "qwen-0"] {
            until_within(SLOW_SECS, &format!("{name} Running"), || async {
                phase(&c, "llm", name).await.0 == "Running"
            })
            .await;
        }
        // A label value cannot carry a control character (the API server refuses it), so a
        // hostile service name reaches partop only by other ways (the header test has one).
        let bad = gpu_pod(
            "llm",
            "bad",
            "sim-kserve",
            1,
            &json!({"serving.kserve.io/inferenceservice": "a\u{1b}[2J"}),
        );
        assert!(pods.create(&PostParams::default(), &bad).await.is_err());
    });
    let mut snap = n.snapshot();
    wait_within("two models in the snapshot", SLOW_SECS, || {
        snap = n.snapshot();
        snap["kubelet"]["models"]
            .as_array()
            .is_some_and(|m| m.len() == 2)
    });
    let models = snap["kubelet"]["models"].as_array().unwrap();
    let llama = models.iter().find(|m| m["name"] == "llama-chat").unwrap();
    assert_eq!(llama["namespace"], "llm");
    assert_eq!(llama["kind"], "kserve");
    assert_eq!(
        (llama["ready"].as_u64(), llama["pods"].as_u64()),
        (Some(2), Some(3)),
        "{llama}"
    );
    assert_eq!(
        llama["gpus"].as_array().unwrap().len(),
        2,
        "its two pods' GPUs: {llama}"
    );
    let qwen = models.iter().find(|m| m["name"] == "qwen").unwrap();
    assert_eq!(qwen["kind"], "vllm");
    assert_eq!(
        (qwen["ready"].as_u64(), qwen["pods"].as_u64()),
        (Some(1), Some(1))
    );
    // The Models view and the map show them.
    let s: partop::domain::Snapshot = serde_json::from_value(snap.clone()).unwrap();
    let text = models_view(s);
    assert!(
        text.contains("llama-chat") && text.contains("2/3") && text.contains("kserve"),
        "{text}"
    );
}

/// The Models view drawn over `snap`, 160 x 40.
fn models_view(snap: partop::domain::Snapshot) -> String {
    use partop::ui::state::{Msg, State, update};
    let (km, _) = partop::ui::keymap::Keymap::load("default", None, false);
    let mut st = State::new(km, partop::domain::findings::Thresholds::default(), 1000);
    update(&mut st, Msg::Snapshot(std::sync::Arc::new(snap)));
    update(&mut st, Msg::Resize(160, 40));
    update(
        &mut st,
        Msg::Command(partop::ui::command::Command::ViewModels),
    );
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(160, 40)).unwrap();
    let th = partop::ui::theme::Theme::load("default", Path::new("/nonexistent")).0;
    t.draw(|f| partop::ui::view::render(f, &st, &th)).unwrap();
    format!("{}", t.backend())
}

/// The recorded DPX/NPS2 node on a Kubernetes node: two pods of a KServe service on its held
/// partitions, the Node managed by a DCM profile whose words are hostile (a value only a
/// non-API-server source could carry: escaped) and long (bounded).
fn dcm_kserve_state(profile: &str, dcm_state: &str) -> partop::ui::state::State {
    use partop::domain::k8s::{Allocation, Device, PodResources, ServingPod, join};
    use partop::ui::state::{Msg, State, update};
    let mut snap = common::nodes::recorded("dpx-nps2-two-models");
    let held: Vec<u32> = snap
        .processes
        .iter()
        .flat_map(|p| p.gpus.iter().map(|u| u.gpu_id))
        .collect();
    let mut allocations = Vec::new();
    let mut pods = Vec::new();
    for g in &snap.gpus {
        // Partition 0 of each GPU held: the device-plugin id is the GPU's BDF.
        for l in g
            .partitions
            .iter()
            .filter(|l| held.contains(&l.gpu_id) && l.partition_id == 0)
        {
            let name = format!("llama-chat-predictor-{}", l.gpu_id);
            allocations.push(Allocation {
                namespace: "llm".into(),
                pod: name.clone(),
                container: "kserve-container".into(),
                device: Device::Plugin {
                    resource: "amd.com/gpu".into(),
                    id: g.bdf.clone(),
                },
            });
            pods.push(ServingPod {
                namespace: "llm".into(),
                name,
                node: Some("gpu-7".into()),
                kind: "kserve".into(),
                service: "llama-chat".into(),
                ready: true,
            });
        }
    }
    // One replica elsewhere, not ready.
    pods.push(ServingPod {
        namespace: "llm".into(),
        name: "llama-chat-predictor-x".into(),
        node: Some("gpu-8".into()),
        kind: "kserve".into(),
        service: "llama-chat".into(),
        ready: false,
    });
    let pr = PodResources {
        allocations,
        allocatable: None,
        source: "test".into(),
    };
    join(&mut snap, &pr, &Default::default());
    let models = partop::domain::k8s::serving_models(&pods, "gpu-7", &snap);
    let k = snap.kubelet.as_mut().unwrap();
    k.node = Some(partop::domain::snapshot::KubeNode {
        name: "gpu-7".into(),
        dcm_profile: Some(profile.into()),
        dcm_state: Some(dcm_state.into()),
    });
    k.models = models;
    let (km, _) = partop::ui::keymap::Keymap::load("default", None, false);
    let mut s = State::new(km, partop::domain::findings::Thresholds::default(), 1000);
    update(&mut s, Msg::Snapshot(std::sync::Arc::new(snap)));
    update(&mut s, Msg::Resize(160, 40));
    update(&mut s, Msg::Tick(common::nodes::T + 1000));
    s
}

fn draw(s: &partop::ui::state::State, w: u16, h: u16) -> String {
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).unwrap();
    let th = partop::ui::theme::Theme::load("default", Path::new("/nonexistent")).0;
    t.draw(|f| partop::ui::view::render(f, s, &th)).unwrap();
    format!("{}", t.backend())
}

#[test]
fn the_header_says_the_dcm_profile_escaped_and_bounded() {
    let s = dcm_kserve_state("cpx-nps4", "success");
    let text = draw(&s, 160, 40);
    let head: String = text.lines().take(4).collect::<Vec<_>>().join("\n");
    insta::assert_snapshot!("dcm_header__160x40", head);
    // Hostile words (an escape sequence, a value far past a label's 63 characters): escaped,
    // cut at 64 characters, and nothing raw reaches the terminal.
    let s = dcm_kserve_state(
        &format!("\u{1b}]0;owned\u{7}{}", "p".repeat(300)),
        "\u{9b}2J",
    );
    let text = draw(&s, 200, 40);
    let head: String = text.lines().take(4).collect::<Vec<_>>().join("\n");
    assert!(
        !head.contains('\u{1b}') && !head.contains('\u{9b}'),
        "{head}"
    );
    assert!(
        head.contains("DCM:\\x1b]0;owned\\x07ppp") && head.contains("\\x9b2J"),
        "{head}"
    );
    assert!(!head.contains(&"p".repeat(65)), "bounded: {head}");
}

#[test]
fn the_models_view_and_the_map_show_the_cluster_served_models() {
    use partop::ui::state::{Msg, update};
    let mut s = dcm_kserve_state("cpx-nps4", "success");
    update(
        &mut s,
        Msg::Command(partop::ui::command::Command::ViewModels),
    );
    let text = draw(&s, 160, 40);
    insta::assert_snapshot!("kserve_models__160x40", text);
    assert!(
        text.contains("kserve llm/llama-chat  replicas 2/3 ready"),
        "{text}"
    );
    update(
        &mut s,
        Msg::Command(partop::ui::command::Command::ViewOverview),
    );
    let text = draw(&s, 160, 40);
    assert!(
        text.contains("llama-chat 2/3"),
        "the map labels its GPUs:\n{text}"
    );
}
