//! `partop fleet --kubernetes` against a real API server (issue 26): GPU nodes and pods are real
//! API objects (no kubelet: their status is written through the status subresource, as a
//! kubelet and device plugin would), read by partop's watch through kube-rs. Covers each signal
//! (a kubelet count the labels cannot give, a stale mixed resource, unhealthy devices, a DCM
//! failure, a MIG change under way, a pod Pending for a resource no node offers), worst-first
//! rows, a label selector, and RBAC: a user without the fleet-view role is refused before
//! anything is shown, naming the verb and the resource.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::control_plane::{ControlPlane, LIMITED_USER, apply_yaml, kube, patch_status};
use common::{partop, run};

/// (name, labels, [(resource, allocatable, capacity)], cordoned, taint)
type NodeSpec<'a> = (
    &'a str,
    &'a [(&'a str, &'a str)],
    &'a [(&'a str, i64, i64)],
    bool,
    Option<&'a str>,
);

const NODES: &[NodeSpec<'static>] = &[
    (
        "gpu-ok",
        &[("amd.com/compute-memory-partition", "spx_nps1")],
        &[("amd.com/gpu", 8, 8)],
        false,
        None,
    ),
    // CPX with the single naming and a count of 0: the device plugin's known failure.
    (
        "gpu-cpx-zero",
        &[("amd.com/compute-memory-partition", "cpx_nps4")],
        &[("amd.com/gpu", 0, 0)],
        false,
        None,
    ),
    // Mixed naming: the node is CPX/NPS4 but still advertises its old SPX resource.
    (
        "gpu-stale",
        &[("amd.com/compute-memory-partition", "cpx_nps4")],
        &[("amd.com/cpx_nps4", 64, 64), ("amd.com/spx_nps1", 8, 8)],
        false,
        None,
    ),
    (
        "gpu-dcm-failed",
        &[
            ("dcm.amd.com/gpu-config-profile", "cpx-nps4"),
            ("dcm.amd.com/gpu-config-profile-state", "failure"),
        ],
        &[("amd.com/gpu", 8, 8)],
        false,
        None,
    ),
    (
        "gpu-mig-pending",
        &[
            ("nvidia.com/mig.config", "all-1g.10gb"),
            ("nvidia.com/mig.config.state", "pending"),
        ],
        &[("nvidia.com/gpu", 8, 8)],
        false,
        None,
    ),
    (
        "gpu-cordoned",
        &[("amd.com/compute-memory-partition", "spx_nps1")],
        &[("amd.com/gpu", 6, 8)],
        true,
        Some("amd-dcm=up:NoExecute"),
    ),
    ("cpu-only", &[], &[], false, None),
];

fn make_nodes(cp: &ControlPlane) {
    for (name, labels, res, cordoned, taint) in NODES {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), serde_json::json!(v)))
            .chain([(
                "pool".to_string(),
                serde_json::json!(if name.starts_with("gpu") {
                    "gpu"
                } else {
                    "cpu"
                }),
            )])
            .collect();
        let taints: Vec<serde_json::Value> = taint
            .iter()
            .map(|t| {
                let (kv, effect) = t.split_once(':').unwrap();
                let (k, v) = kv.split_once('=').unwrap();
                serde_json::json!({"key": k, "value": v, "effect": effect})
            })
            .collect();
        let node = serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": cordoned, "taints": taints},
        });
        apply_yaml(cp, cp.dir.path(), &node.to_string());
        let cap: serde_json::Map<String, serde_json::Value> = res
            .iter()
            .map(|(r, _, c)| ((*r).to_string(), serde_json::json!(c.to_string())))
            .chain([
                ("cpu".into(), serde_json::json!("96")),
                ("memory".into(), serde_json::json!("1Ti")),
            ])
            .collect();
        let alloc: serde_json::Map<String, serde_json::Value> = res
            .iter()
            .map(|(r, a, _)| ((*r).to_string(), serde_json::json!(a.to_string())))
            .chain([
                ("cpu".into(), serde_json::json!("96")),
                ("memory".into(), serde_json::json!("1Ti")),
            ])
            .collect();
        let status = serde_json::json!({"status": {
            "capacity": cap, "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}],
        }});
        patch_status(cp, name, &status);
    }
}

fn make_pods(cp: &ControlPlane) {
    kube(cp, &["create", "namespace", "ml"]);
    // The pods' service account (the serviceaccount controller is not among those run).
    kube(cp, &["-n", "ml", "create", "serviceaccount", "default"]);
    for (name, resource, node) in [
        ("waits-for-qpx", "amd.com/qpx_nps1", None),
        ("waits-for-gpu", "amd.com/gpu", None),
        ("runs-on-ok", "amd.com/gpu", Some("gpu-ok")),
        ("no-gpu", "", Some("gpu-ok")),
    ] {
        let mut c = serde_json::json!({"name": "c", "image": "vllm/vllm-openai:latest"});
        if !resource.is_empty() {
            c["resources"] = serde_json::json!({"limits": {resource: "1"}});
        }
        let mut pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"containers": [c]},
        });
        if let Some(n) = node {
            pod["spec"]["nodeName"] = serde_json::json!(n);
        }
        apply_yaml(cp, cp.dir.path(), &pod.to_string());
    }
}

fn fleet(kubeconfig: &std::path::Path, extra: &[&str]) -> common::Out {
    let mut c = partop();
    c.args(["fleet", "--kubernetes", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--once", "--connect-timeout", "5"])
        .args(extra);
    run(&mut c, "")
}

#[test]
fn the_cluster_s_gpu_nodes_and_signals_by_watch() {
    let cp = ControlPlane::start();
    make_nodes(&cp);
    make_pods(&cp);
    let o = fleet(&cp.admin(), &["--json"]);
    assert_eq!(o.code, 0, "{}{}\n{}", o.stdout, o.stderr, cp.logs());
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let names: Vec<&str> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    // Every GPU node, none without GPUs; nodes with signals first, the cordoned one next, the
    // healthy one last.
    assert_eq!(names.len(), 6, "{names:?}");
    assert!(!names.contains(&"cpu-only"));
    assert_eq!(names.last(), Some(&"gpu-ok"), "{names:?}");
    let signals: Vec<&str> = v["signals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let has = |node: &str, word: &str| {
        signals
            .iter()
            .any(|s| s.starts_with(node) && s.contains(word))
    };
    assert!(
        has("gpu-cpx-zero", "advertises 0 amd.com/gpu"),
        "{signals:#?}"
    );
    assert!(has("gpu-stale", "amd.com/spx_nps1"), "{signals:#?}");
    assert!(has("gpu-dcm-failed", "AMD DCM failed"), "{signals:#?}");
    // Since when, as the API server's managedFields record the state label's last writer.
    let year = format!(
        " since {}-",
        &partop::collect::clock::rfc3339(partop::collect::clock::now_ms())[..4]
    );
    assert!(has("gpu-dcm-failed", &year), "{signals:#?}");
    assert!(has("gpu-mig-pending", &year), "{signals:#?}");
    assert!(
        has("gpu-mig-pending", "MIG manager is applying"),
        "{signals:#?}"
    );
    assert!(
        has("gpu-cordoned", "6 of 8 amd.com/gpu allocatable"),
        "{signals:#?}"
    );
    assert!(has("ml/waits-for-qpx", "no node offers"), "{signals:#?}");
    assert!(
        !signals.iter().any(|s| s.contains("waits-for-gpu")),
        "{signals:#?}"
    );
    assert!(
        !signals.iter().any(|s| s.starts_with("gpu-ok")),
        "{signals:#?}"
    );
    assert_eq!(signals.len(), 6, "{signals:#?}");
    let ok = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "gpu-ok")
        .unwrap();
    assert_eq!(ok["pods"], 1, "one GPU pod is bound to gpu-ok: {ok}");
    let cordoned = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "gpu-cordoned")
        .unwrap();
    assert_eq!(cordoned["cordoned"], true);
    assert_eq!(cordoned["taints"][0], "amd-dcm=up:NoExecute");
    // The table says the same, one line a node.
    let o = fleet(&cp.admin(), &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("6 GPU node(s), 6 signal(s)"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("cordoned amd-dcm=up:NoExecute"),
        "{}",
        o.stdout
    );
    // A label selector, as kubectl -l.
    let o = fleet(
        &cp.admin(),
        &["--json", "-l", "amd.com/compute-memory-partition=spx_nps1"],
    );
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["nodes"].as_array().unwrap().len(), 2, "{}", o.stdout);
}

#[test]
fn a_user_without_the_role_is_refused_naming_the_verb() {
    let cp = ControlPlane::start();
    make_nodes(&cp);
    let o = fleet(&cp.limited(), &[]);
    assert_ne!(o.code, 0, "{}", o.stdout);
    assert!(
        o.stderr.contains("list/watch") && o.stderr.contains("ClusterRole"),
        "{}",
        o.stderr
    );
    // With the fleet-view role of deploy/kubernetes/partop.yaml it reads the fleet.
    let m = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubernetes/partop.yaml"
    ))
    .unwrap();
    let role = m
        .split("\n---\n")
        .find(|d| d.contains("name: partop-fleet-view"))
        .unwrap();
    apply_yaml(&cp, cp.dir.path(), role);
    kube(
        &cp,
        &[
            "create",
            "clusterrolebinding",
            "fv",
            "--clusterrole=partop-fleet-view",
            &format!("--user={LIMITED_USER}"),
        ],
    );
    let o = fleet(&cp.limited(), &["--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("gpu-ok"), "{}", o.stdout);
}

/// The API server's absent or broken forms, each refused within the bound with the source named:
/// nothing listening, a server that accepts and never answers, a kubeconfig that is not one
/// (garbage with escape sequences, a directory, a FIFO, /dev/zero).
#[test]
fn an_absent_hung_or_garbage_cluster_is_refused_within_the_bound() {
    let d = tempfile::tempdir().unwrap();
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let kc = |name: &str, server: &str| {
        let p = d.path().join(name);
        std::fs::write(
            &p,
            format!("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"),
        )
        .unwrap();
        p
    };
    let garbage = d.path().join("garbage");
    std::fs::write(&garbage, b"\x1b[31mEVIL\x07\x00\xff").unwrap();
    let fifo = d.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let cases: Vec<(&str, std::path::PathBuf)> = vec![
        ("nothing listening", kc("closed", "https://127.0.0.1:1")),
        (
            "accepts, never answers",
            kc("hung", &format!("https://{}", hung.local_addr().unwrap())),
        ),
        ("garbage", garbage),
        ("a directory", d.path().to_path_buf()),
        ("a FIFO", fifo),
        ("/dev/zero", "/dev/zero".into()),
    ];
    for (what, path) in &cases {
        let t = std::time::Instant::now();
        let o = fleet(path, &[]);
        assert_ne!(o.code, 0, "{what}: {}", o.stdout);
        assert!(!o.stderr.contains("panicked"), "{what}: {}", o.stderr);
        assert!(
            !o.stderr.contains('\x1b'),
            "{what}: escape sequence printed: {}",
            o.stderr
        );
        assert!(!o.stderr.trim().is_empty(), "{what}: no reason given");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(40),
            "{what}: {:?}",
            t.elapsed()
        );
    }
    eprintln!("{} absent or broken clusters refused", cases.len());
}
