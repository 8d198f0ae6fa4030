//! The live cluster view (`partop fleet --kubernetes` without `--once`, issue 26) as an app of
//! the one loop, headless: `ui::cluster::app::run_with` over a `TestBackend` with scripted keys,
//! fed by partop's own watch of a real kube-apiserver on loopback (no mock). Nodes are created,
//! relabelled and deleted through the API while the loop runs; each change must reach the
//! screen through the watch (no polling: an idle cluster costs no rereads). Also the per-node
//! live detail through the API server's pod proxy, and what the real API server says when the
//! pod's address is loopback.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::control_plane::{ControlPlane, apply_yaml, kube, patch_status};
use common::free_port;
use common::k8s_api::runtime;
use partop::collect::cluster::{self, Target, Watch};
use partop::domain::cluster::ClusterNode;
use partop::ui::cluster::app::{LiveFuture, LiveSource};
use partop::ui::cluster::{ClusterMsg, ClusterState};
use partop::ui::keymap::Keymap;
use partop::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// A GPU node as a kubelet and device plugin would leave it: labels, then capacity,
/// allocatable and Ready through the status subresource.
fn gpu_node(cp: &ControlPlane, name: &str, labels: &[(&str, &str)], gpus: i64, ready: bool) {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_string(), serde_json::json!(v)))
        .collect();
    let node = serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
    });
    apply_yaml(cp, cp.dir.path(), &node.to_string());
    let res = serde_json::json!({"amd.com/gpu": gpus.to_string(), "cpu": "96"});
    let status = serde_json::json!({"status": {
        "capacity": res, "allocatable": res,
        "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                        "reason": "Test", "message": "test"}],
    }});
    patch_status(cp, name, &status);
}

/// A pod of the `partop-serve` DaemonSet on `node` (as deploy/kubernetes/partop.yaml labels
/// it), its status as a kubelet would write it: Running at `ip`.
fn serve_pod(cp: &ControlPlane, node: &str, ip: &str) {
    if !kube(cp, &["get", "namespaces", "-o", "name"]).contains("namespace/partop") {
        kube(cp, &["create", "namespace", "partop"]);
        kube(cp, &["-n", "partop", "create", "serviceaccount", "default"]);
    }
    let name = format!("serve-{node}");
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "partop",
                     "labels": {"app.kubernetes.io/name": "partop-serve"}},
        "spec": {"nodeName": node, "containers": [{"name": "serve", "image": "partop:latest",
                 "ports": [{"containerPort": 9477}]}]},
    });
    apply_yaml(cp, cp.dir.path(), &pod.to_string());
    let status =
        serde_json::json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}});
    kube(
        cp,
        &[
            "-n",
            "partop",
            "patch",
            "pod",
            &name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ],
    );
}

fn key(c: KeyCode) -> ClusterMsg {
    ClusterMsg::Key(KeyEvent::new(c, KeyModifiers::NONE))
}

fn typed(text: &str) -> Vec<ClusterMsg> {
    text.chars().map(|c| key(KeyCode::Char(c))).collect()
}

/// Waits (at most 30 s) until partop's watch has seen what `pred` asks for.
fn until_watched(w: &Watch, what: &str, pred: impl Fn(&[ClusterNode]) -> bool) {
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        if pred(&w.view().0) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the watch never saw {what}: {:?}", w.view().0);
}

/// One phase of the live loop: the loop runs while another thread changes the cluster through
/// the API (`act`), waits until the watch has it (`seen`), then sends `keys` and quits. Returns
/// the state and the screen. Nothing is sent to the loop about the change: it comes through
/// the watch alone.
#[expect(clippy::too_many_arguments, reason = "one phase's whole script")]
fn phase(
    rt: &tokio::runtime::Runtime,
    w: &Watch,
    state: ClusterState,
    live: Option<LiveSource>,
    act: impl FnOnce() + Send,
    seen: impl Fn(&[ClusterNode]) -> bool + Send + Sync,
    what: &str,
    keys: Vec<ClusterMsg>,
) -> (ClusterState, String) {
    let (tx, mut rx) = mpsc::channel(64);
    let theme = Theme::load("default", std::path::Path::new("/nonexistent")).0;
    std::thread::scope(|sc| {
        let script_tx = tx.clone();
        sc.spawn(move || {
            // The loop starts first: what the change does, it learns from its feed.
            std::thread::sleep(Duration::from_millis(300));
            act();
            until_watched(w, what, &seen);
            // Keys are taken after the watch's wake-up (its feed comes first in the loop).
            std::thread::sleep(Duration::from_millis(300));
            for k in keys {
                script_tx.blocking_send(k).unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
            // Time for a live detail to come back (a pod proxy, or Prometheus's queries).
            std::thread::sleep(Duration::from_millis(1500));
            script_tx.blocking_send(key(KeyCode::Char('q'))).unwrap();
        });
        rt.block_on(async {
            let mut term = Terminal::new(TestBackend::new(140, 30)).unwrap();
            let run =
                partop::ui::cluster::app::run_with(&mut term, state, &theme, w, live, tx, &mut rx);
            let s = tokio::time::timeout(Duration::from_secs(60), run)
                .await
                .expect("the phase ends within a minute")
                .unwrap();
            (s, format!("{}", term.backend()))
        })
    })
}

fn has(nodes: &[ClusterNode], name: &str) -> bool {
    nodes.iter().any(|n| n.name == name)
}

/// The live view through its whole loop against a real API server: the first list worst
/// first with the cluster's signals; an idle cluster rereads nothing; a node added appears
/// (not ready: on top); a label change moves a signal from one node to another; `/` filters
/// nodes and signals; Enter opens a node's detail (its labels, its live detail's reason);
/// a deleted node leaves the screen.
#[test]
fn the_live_view_follows_the_cluster_through_its_watch() {
    let cp = ControlPlane::start();
    let part = ("amd.com/compute-memory-partition", "spx_nps1");
    gpu_node(&cp, "gpu-a", &[part], 8, true);
    gpu_node(
        &cp,
        "gpu-b",
        &[
            part,
            ("dcm.amd.com/gpu-config-profile", "cpx-nps4"),
            ("dcm.amd.com/gpu-config-profile-state", "failure"),
        ],
        8,
        true,
    );
    let rt = runtime();
    let t = Target {
        kubeconfig: Some(cp.admin()),
        ..Target::default()
    };
    let w = rt.block_on(async {
        let c = cluster::client(&t).await.unwrap();
        let w = cluster::start(c, &t);
        w.ready(Duration::from_secs(30)).await.unwrap();
        w
    });
    let w = Arc::new(w);
    let source = Arc::clone(&w);
    let live: LiveSource = Arc::new(move |node: String| -> LiveFuture {
        let w = Arc::clone(&source);
        Box::pin(async move {
            w.live(&node)
                .await
                .map(|r| partop::ui::cluster::view::live_lines(&r, 0))
        })
    });
    let state = ClusterState::new(Keymap::load("default", None, true).0, "test cluster".into());

    // The first list: the failed DCM node first, its signal in the panel.
    let (s, screen) = phase(
        &rt,
        &w,
        state,
        Some(live.clone()),
        || {},
        |n| n.len() == 2,
        "two nodes",
        vec![],
    );
    let names: Vec<&str> = s.rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["gpu-b", "gpu-a"], "{screen}");
    assert!(screen.contains("gpu-b: AMD DCM failed"), "{screen}");
    assert!(screen.contains("2 GPU nodes · 2 ready"), "{screen}");

    // Idle: the watch sends nothing, the view rereads nothing (no polling).
    let before = s.views;
    let (s, _) = phase(
        &rt,
        &w,
        s,
        Some(live.clone()),
        || std::thread::sleep(Duration::from_secs(2)),
        |_| true,
        "nothing",
        vec![],
    );
    assert!(
        s.views <= before + 1,
        "an idle cluster was reread {} times in 2.6 s",
        s.views - before
    );

    // A node added, not ready: it appears, on top.
    let (s, screen) = phase(
        &rt,
        &w,
        s,
        Some(live.clone()),
        || gpu_node(&cp, "gpu-new", &[part], 8, false),
        |n| has(n, "gpu-new"),
        "gpu-new",
        vec![],
    );
    assert_eq!(s.rows[0].name, "gpu-new", "{screen}");
    assert!(
        screen.contains("gpu-new") && screen.contains("NOT READY"),
        "{screen}"
    );

    // A label change moves the signal: gpu-b's DCM succeeds, gpu-a's fails.
    let (s, screen) = phase(
        &rt,
        &w,
        s,
        Some(live.clone()),
        || {
            kube(
                &cp,
                &[
                    "label",
                    "node",
                    "gpu-b",
                    "--overwrite",
                    "dcm.amd.com/gpu-config-profile-state=success",
                ],
            );
            kube(
                &cp,
                &[
                    "label",
                    "node",
                    "gpu-a",
                    "--overwrite",
                    "dcm.amd.com/gpu-config-profile=cpx-nps4",
                    "dcm.amd.com/gpu-config-profile-state=failure",
                ],
            );
        },
        |n| {
            n.iter().any(|x| {
                x.name == "gpu-a"
                    && x.labels
                        .get("dcm.amd.com/gpu-config-profile-state")
                        .map(String::as_str)
                        == Some("failure")
            }) && n.iter().any(|x| {
                x.name == "gpu-b"
                    && x.labels
                        .get("dcm.amd.com/gpu-config-profile-state")
                        .map(String::as_str)
                        == Some("success")
            })
        },
        "the relabelled nodes",
        vec![],
    );
    assert!(screen.contains("gpu-a: AMD DCM failed"), "{screen}");
    assert!(!screen.contains("gpu-b: AMD DCM failed"), "{screen}");
    let names: Vec<&str> = s.rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["gpu-new", "gpu-a", "gpu-b"], "{screen}");

    // gpu-a runs the partop-serve DaemonSet's pod; without a kubelet its address is written as
    // a kubelet would, and loopback is the only one a test may serve on.
    serve_pod(&cp, "gpu-a", "127.0.0.1");
    // `/` filters nodes and signals; Enter opens the node's detail: its labels, and its live
    // detail asked through the real API server's pod proxy, which refuses a loopback pod
    // address ("address not allowed": it proxies only to a global unicast pod IP, and dials it
    // itself, no kubelet involved). partop says so, naming the pod.
    let mut keys = typed("/gpu-a");
    keys.push(key(KeyCode::Enter));
    keys.push(key(KeyCode::Enter));
    let (s, screen) = phase(
        &rt,
        &w,
        s,
        Some(live.clone()),
        || {},
        |_| true,
        "nothing",
        keys,
    );
    assert_eq!(s.order.len(), 1, "{screen}");
    assert_eq!(s.shown_signals.len(), 1, "{screen}");
    assert!(s.detail.is_some(), "{screen}");
    assert!(
        screen.contains("dcm.amd.com/gpu-config-profile-state=failure"),
        "{screen}"
    );
    let got = s.detail.as_ref().unwrap().live.clone();
    let Some(Err(why)) = got else {
        panic!("the live detail came back as {got:?}\n{screen}")
    };
    assert!(
        why.contains("partop/serve-gpu-a")
            && why.contains("HTTP 400")
            && why.contains("address not allowed"),
        "{why}"
    );
    assert!(screen.contains("address not allowed"), "{screen}");

    // Esc closes the detail, Esc clears the filter; a deleted node leaves.
    let (s, screen) = phase(
        &rt,
        &w,
        s,
        Some(live),
        || {
            kube(&cp, &["delete", "node", "gpu-new"]);
        },
        |n| !has(n, "gpu-new"),
        "gpu-new gone",
        vec![key(KeyCode::Esc), key(KeyCode::Esc)],
    );
    assert!(s.detail.is_none() && s.filter.is_empty(), "{screen}");
    assert!(!screen.contains("gpu-new"), "{screen}");
    assert_eq!(s.rows.len(), 2, "{screen}");
}

/// Ends a process started here when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A node's live detail from a real Prometheus (the other source where the API server cannot
/// reach the pods): `partop serve` of a simulated node on loopback, scraped every second; the
/// cluster has a Node of that host's name and one Prometheus never scraped. Enter on each: the
/// scraped one shows the fleet's row of it (modes, host), the other says Prometheus has no
/// series of it. The source is the command layer's own (`fleet --kubernetes --prometheus`).
#[test]
fn a_node_s_live_detail_from_prometheus() {
    let cp = ControlPlane::start();
    let home = tempfile::tempdir().unwrap();
    let port = free_port();
    let _serve = Killed(
        common::partop()
            .env("XDG_STATE_HOME", home.path().join("state"))
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("PARTOP_SIM_AMD_SMI_COST", "off")
            .args([
                "--sim",
                "spx-nps1-one-model",
                "--refresh",
                "1",
                "serve",
                "--listen",
            ])
            .arg(format!("127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let prom_port = free_port();
    let cfg = home.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: partop\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"),
    )
    .unwrap();
    let _prom = Killed(
        std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", home.path().join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("prometheus is not installed (scripts/test installs it; or apt-get install prometheus)"),
    );
    let url = format!("http://127.0.0.1:{prom_port}");
    let end = Instant::now() + Duration::from_secs(60);
    let host = loop {
        if let Ok(rows) = partop::collect::fleet_prometheus::read(&url, Duration::from_secs(5))
            && let Some(r) = rows
                .into_iter()
                .find(|r| !r.host.is_empty() && r.physical > 0)
        {
            // The row is named `INSTANCE (HOSTNAME)`: the Node takes the host's own name.
            break r
                .host
                .strip_suffix(')')
                .and_then(|h| h.rsplit_once(" ("))
                .map_or(r.host.clone(), |(_, h)| h.to_string());
        }
        assert!(
            Instant::now() < end,
            "Prometheus never scraped partop serve"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let part = ("amd.com/compute-memory-partition", "spx_nps1");
    gpu_node(&cp, &host, &[part], 8, true);
    gpu_node(&cp, "a-node-not-scraped", &[part], 8, true);
    let rt = runtime();
    let t = Target {
        kubeconfig: Some(cp.admin()),
        ..Target::default()
    };
    let w = rt.block_on(async {
        let c = cluster::client(&t).await.unwrap();
        let w = cluster::start(c, &t);
        w.ready(Duration::from_secs(30)).await.unwrap();
        w
    });
    let live = partop::cli::fleet_kube::live_from_prometheus(url.clone());
    let state = ClusterState::new(Keymap::load("default", None, true).0, "test".into());
    // Rows by name: the unscraped node first.
    let (s, screen) = phase(
        &rt,
        &w,
        state,
        Some(live.clone()),
        || {},
        |n| n.len() == 2,
        "both nodes",
        vec![key(KeyCode::Enter)],
    );
    let got = s.detail.as_ref().unwrap().live.clone();
    let Some(Err(why)) = got else {
        panic!("the unscraped node's detail came back as {got:?}\n{screen}")
    };
    assert!(why.contains("has no series of a-node-not-scraped"), "{why}");
    let (s, screen) = phase(
        &rt,
        &w,
        s,
        Some(live),
        || {},
        |_| true,
        "nothing",
        vec![key(KeyCode::Esc), key(KeyCode::Down), key(KeyCode::Enter)],
    );
    let d = s.detail.as_ref().unwrap();
    assert_eq!(d.node, host, "{screen}");
    let Some(Ok(lines)) = &d.live else {
        panic!(
            "the scraped node's detail came back as {:?}\n{screen}",
            d.live
        )
    };
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("node: ") && l.ends_with(&format!("({host})"))),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("modes: SPX/NPS1")),
        "{lines:?}"
    );
    assert!(
        screen.contains("live (partop serve on the node):"),
        "{screen}"
    );
}
