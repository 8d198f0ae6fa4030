//! The findings Kubernetes adds: the device plugin kept honest (the kubelet's allocatable count
//! against the kernel's logical GPUs, through the simulated node's kubelet twin before and after
//! a repartition, with a plugin that re-registers and one that does not), and reclaimable
//! partitions (busy averaged over the window at or under the threshold, held longer than the
//! minimum age) over a space of holders, loads and ages.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;

use common::{Node, partop, run, wait_until};
use partop::domain::findings::{Kind, Thresholds, Tracker};
use partop::domain::snapshot::{GpuUse, LogicalGpu, PhysicalGpu, PodRef, Process, Snapshot};
use serde_json::Value;

fn node(stale: bool) -> Node {
    let n = Node::start(&format!(
        "name = \"k8s-idle\"\ndescription = \"t\"\nproduct = \"mi300x\"\ngpus = 2\ncompute = \"SPX\"\nmemory = \"NPS1\"\nseed = 1\n\n[kubernetes]\nplugin_stale = {stale}\n"
    ));
    let sock = n.state.with_extension("kubelet.sock");
    wait_until("the kubelet twin's socket", || sock.exists());
    n
}

fn snapshot(n: &Node) -> Value {
    let o = run(
        partop()
            .arg("--sim-state")
            .arg(&n.state)
            .args(["snapshot", "--json"]),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    serde_json::from_str(&o.stdout).unwrap()
}

fn drift_findings(s: &Value) -> Vec<String> {
    s["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "plugin_drift")
        .map(|f| f["saw"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_device_plugin_that_does_not_re_register_is_named_with_both_counts() {
    // 2 cases: a plugin that registers again after the change, and one that keeps its old
    // devices.
    for stale in [false, true] {
        let n = node(stale);
        let before = snapshot(&n);
        assert_eq!(before["kubelet"]["allocatable"]["amd.com/gpu"], 2);
        assert!(
            drift_findings(&before).is_empty(),
            "{:?}",
            drift_findings(&before)
        );
        let o = n.amd("set -C DPX", "");
        assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
        let after = snapshot(&n);
        let f = drift_findings(&after);
        if stale {
            assert_eq!(f.len(), 1, "{f:?}");
            let saw = &f[0];
            for part in [
                "advertises 2 amd.com/gpu",
                "the kernel has 4 logical GPU(s)",
                "did not re-register",
                "Restart the device-plugin pod",
            ] {
                assert!(saw.contains(part), "stale plugin: `{part}` in {saw}");
            }
        } else {
            assert_eq!(after["kubelet"]["allocatable"]["amd.com/gpu"], 4);
            assert!(f.is_empty(), "a plugin that re-registered: {f:?}");
        }
    }
}

const MIN: u64 = 60_000;

fn snap_at(t: u64, busy: f64, pods: bool, holder_started: Option<u64>) -> Snapshot {
    let mut l = LogicalGpu {
        gpu_id: 3,
        bdf: "0000:05:00.3".into(),
        gfx_busy_percent: Some(busy),
        vram_used_bytes: Some(24 << 30),
        ..Default::default()
    };
    if pods {
        l.pods = vec![PodRef {
            namespace: "team-a".into(),
            pod: "notebook-7".into(),
            container: "jupyter".into(),
            resource: "amd.com/cpx_nps4".into(),
            priority_class: None,
        }];
    }
    let processes = holder_started
        .map(|s| Process {
            pid: 4242,
            name: Some("python3".into()),
            started_at_ms: Some(s),
            gpus: vec![GpuUse {
                gpu_id: 3,
                vram_bytes: Some(24 << 30),
                ..Default::default()
            }],
            ..Default::default()
        })
        .into_iter()
        .collect();
    Snapshot {
        taken_at_ms: t,
        gpus: vec![PhysicalGpu {
            bdf: "0000:05:00.0".into(),
            partitions: vec![l],
            ..Default::default()
        }],
        processes,
        ..Default::default()
    }
}

#[test]
fn reclaimable_partitions_over_holders_loads_and_ages() {
    let t0 = 1_800_000_000_000;
    let th = Thresholds {
        reclaim_busy: 2.0,
        reclaim_window_ms: 60 * MIN,
        reclaim_min_age_ms: 90 * MIN,
        ..Thresholds::default()
    };
    let mut cases = 0;
    // Holder: a pod, a process without Kubernetes, or nothing. Load: idle (0 %), at the
    // threshold (2 %), a short burst averaging 1.5 % (a minute at 90 % among sixty at 0 %),
    // above it (5 %). Holder age: 2 h (older than the minimum) or 70 min (younger).
    for holder in ["pod", "process", "none"] {
        for load in ["idle", "at", "burst", "busy"] {
            for old in [true, false] {
                let started = if old { t0 - 120 * MIN } else { t0 - 10 * MIN };
                let mut tr = Tracker::new(th);
                let mut last = Vec::new();
                for m in 0..=61 {
                    let busy = match load {
                        "idle" => 0.0,
                        "at" => 2.0,
                        "burst" => {
                            if m == 30 {
                                90.0
                            } else {
                                0.0
                            }
                        }
                        _ => 5.0,
                    };
                    let snap = snap_at(
                        t0 + m * MIN,
                        busy,
                        holder == "pod",
                        (holder != "none").then_some(started),
                    );
                    last = tr
                        .observe(&snap)
                        .into_iter()
                        .filter(|f| f.kind == Kind::Reclaimable)
                        .collect();
                    if m < 60 {
                        assert!(
                            last.is_empty(),
                            "{holder} {load} old={old}: before the window at minute {m}"
                        );
                    }
                }
                let want = holder != "none" && load != "busy" && old;
                assert_eq!(
                    last.len(),
                    usize::from(want),
                    "{holder} {load} old={old}: {last:?}"
                );
                if want {
                    let saw = &last[0].saw;
                    assert!(saw.contains("holds 24.0 GiB of memory"), "{saw}");
                    assert!(saw.contains("over the last 1h 0m"), "{saw}");
                    if holder == "pod" {
                        for part in [
                            "pod team-a/notebook-7",
                            "container jupyter",
                            "amd.com/cpx_nps4",
                            "priority class",
                            "kubectl -n team-a delete pod notebook-7",
                        ] {
                            assert!(saw.contains(part), "`{part}` in {saw}");
                        }
                    } else {
                        assert!(saw.contains("pid 4242 python3"), "{saw}");
                    }
                }
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 24, "3 holders x 4 loads x 2 ages");
}

#[test]
fn reclaim_thresholds_are_read_from_config_and_range_checked() {
    use partop::config::Config;
    let (c, e) = Config::check(
        "config.toml",
        "reclaim_busy_percent = 3.5\nreclaim_window_minutes = 30\nreclaim_min_age_minutes = 120\n",
    );
    assert!(e.is_empty(), "{e:?}");
    assert_eq!(
        (
            c.reclaim_busy_percent,
            c.reclaim_window_minutes,
            c.reclaim_min_age_minutes
        ),
        (3.5, 30.0, 120.0)
    );
    // 3 values out of their ranges, each said at its line, the defaults kept.
    let (c, e) = Config::check(
        "config.toml",
        "reclaim_busy_percent = 150\nreclaim_window_minutes = 0\nreclaim_min_age_minutes = -1\n",
    );
    assert_eq!(e.len(), 3, "{e:?}");
    for (i, key) in [
        "reclaim_busy_percent",
        "reclaim_window_minutes",
        "reclaim_min_age_minutes",
    ]
    .iter()
    .enumerate()
    {
        let text = e[i].to_string();
        assert!(
            text.contains(key) && text.contains("out of range"),
            "{text}"
        );
        assert!(
            text.starts_with(&format!("config.toml:{}:", i + 1)),
            "{text}"
        );
    }
    assert_eq!(c.reclaim_window_minutes, 60.0, "the default stands in");
}

/// The reclaimable finding says the holding pod's priority class as the API server's pods on
/// the node give it (PodResources does not carry it): a class, none named (the cluster's
/// default), or the pod unknown to the API server's answer; the processes' pods get it too.
/// 3 cases.
#[test]
fn a_reclaimable_pods_priority_class_comes_from_the_api_servers_pods() {
    use partop::domain::k8s::{NodePod, add_priority_classes};
    let t0 = 1_800_000_000_000;
    let th = Thresholds {
        reclaim_busy: 2.0,
        reclaim_window_ms: 60 * MIN,
        reclaim_min_age_ms: 90 * MIN,
        ..Thresholds::default()
    };
    let api_pod = |class: Option<&str>| NodePod {
        uid: "u".into(),
        namespace: "team-a".into(),
        name: "notebook-7".into(),
        containers: Vec::new(),
        priority_class: class.map(Into::into),
    };
    let cases: [(Vec<NodePod>, &str); 3] = [
        (vec![api_pod(Some("batch-low"))], "priority class batch-low"),
        (
            vec![api_pod(None)],
            "no priority class: the cluster's default priority",
        ),
        (Vec::new(), "priority class not known"),
    ];
    for (pods, want) in &cases {
        let mut tr = Tracker::new(th);
        let mut last = Vec::new();
        for m in 0..=61 {
            let mut snap = snap_at(t0 + m * MIN, 0.0, true, Some(t0 - 120 * MIN));
            snap.processes[0].pod = snap.gpus[0].partitions[0].pods.first().cloned();
            add_priority_classes(&mut snap, pods);
            if m == 61 {
                let class = snap.gpus[0].partitions[0].pods[0].priority_class.clone();
                assert_eq!(
                    snap.processes[0].pod.as_ref().unwrap().priority_class,
                    class
                );
            }
            last = tr
                .observe(&snap)
                .into_iter()
                .filter(|f| f.kind == Kind::Reclaimable)
                .collect();
        }
        assert_eq!(last.len(), 1, "{want}");
        assert!(last[0].saw.contains(want), "`{want}` in {}", last[0].saw);
    }
}
