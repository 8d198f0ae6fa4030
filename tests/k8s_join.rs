//! Who holds each partition, in cluster terms: the simulated node's kubelet twin serves
//! PodResources over its socket (the real gRPC path), the collector joins it to the logical
//! GPUs and their holders, and the snapshot, `/metrics` labels and the Processes filter say
//! namespace/pod/container/resource. Each device-id spelling (PCI BDF, `amdgpu_xcp_N`,
//! `amdgpu_xcp.N`), both resource namings and a DRA claim are covered; the pure join is
//! checked for NVIDIA UUIDs and for holders' pod UIDs.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;

use common::{Node, partop, run, wait_until};
use partop::domain::k8s::{
    Allocation, Device, DeviceNames, NOT_ALLOCATED, NodePod, PodResources, join, name_unallocated,
};
use partop::domain::snapshot::{GpuUse, LogicalGpu, PhysicalGpu, Process, Snapshot};
use serde_json::Value;

fn scenario(kube: &str) -> String {
    format!(
        r#"name = "k8s-dpx"
description = "a DPX/NPS2 Kubernetes node"
product = "mi300x"
gpus = 2
compute = "DPX"
memory = "NPS2"
seed = 3

[kubernetes]
{kube}

[[workload]]
name = "llama"
kind = "model-server"
gpu = 0
partition = 0
vram_gb = 40
busy = 50
port = 0

[[workload]]
name = "qwen"
kind = "model-server"
gpu = 0
partition = 1
vram_gb = 30
busy = 30
port = 0

[[workload]]
name = "finetune"
kind = "batch"
gpu = 1
partition = 1
vram_gb = 30
busy = 90

[[workload]]
name = "exporter"
kind = "agent"
comm = "gpuagent"
"#
    )
}

fn snapshot(node: &Node) -> Value {
    let o = run(
        partop()
            .arg("--sim-state")
            .arg(&node.state)
            .args(["snapshot", "--json"]),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    serde_json::from_str(&o.stdout).unwrap()
}

/// Each logical GPU's pods as `bdf → [ns/pod/container resource]`.
fn pods_by_gpu(s: &Value) -> Vec<(String, Vec<String>)> {
    s["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["partitions"].as_array().unwrap())
        .map(|l| {
            let pods = l["pods"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            format!(
                                "{}/{}/{} {}",
                                p["namespace"].as_str().unwrap(),
                                p["pod"].as_str().unwrap(),
                                p["container"].as_str().unwrap(),
                                p["resource"].as_str().unwrap()
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            (l["bdf"].as_str().unwrap().to_string(), pods)
        })
        .collect()
}

#[test]
fn pods_per_partition_for_each_device_id_spelling_and_a_dra_claim() {
    // 2 nodes: the plugin's `amdgpu_xcp_N` with single naming; the kernel's `amdgpu_xcp.N`
    // (which the real plugin's glob misses) with mixed naming. Both have a DRA claim.
    let cases = [
        (
            "xcp_name = \"underscore\"\nnaming = \"single\"\ndra = [\"finetune\"]",
            "amd.com/gpu",
        ),
        (
            "xcp_name = \"dot\"\nnaming = \"mixed\"\ndra = [\"finetune\"]",
            "amd.com/dpx_nps2",
        ),
    ];
    for (kube, resource) in cases {
        let node = Node::start(&scenario(kube));
        let sock = node.state.with_extension("kubelet.sock");
        wait_until("the kubelet twin's socket", || sock.exists());
        let s = snapshot(&node);
        let want = vec![
            // Partition 0 by its PCI BDF.
            (
                "0000:05:00.0".to_string(),
                vec![format!("sim/llama/server {resource}")],
            ),
            // Partition 1 by its platform device, in the spelling of this case.
            (
                "0000:05:00.1".to_string(),
                vec![format!("sim/qwen/server {resource}")],
            ),
            ("0000:26:00.0".to_string(), vec![]),
            // A DRA device `gpu-<card>-<render>` of gpu.amd.com.
            (
                "0000:26:00.1".to_string(),
                vec!["sim/finetune/trainer gpu.amd.com claim sim/finetune-gpu".to_string()],
            ),
        ];
        assert_eq!(pods_by_gpu(&s), want, "{kube}");
        let k = &s["kubelet"];
        assert_eq!(k["pods_with_devices"], 3, "{kube}: {k}");
        assert_eq!(k["allocatable"][resource], 4, "{kube}: {k}");
        assert!(
            k.get("unmatched").is_none(),
            "{kube}: every device joined: {k}"
        );
        // Each holder process carries its pod (the agent holds /dev/kfd only: no pod).
        let by_name: Vec<(String, String)> = s["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| {
                let pod = p.get("pod")?;
                Some((
                    p["command"].as_str().unwrap_or("").to_string(),
                    format!(
                        "{}/{}",
                        pod["namespace"].as_str().unwrap(),
                        pod["pod"].as_str().unwrap()
                    ),
                ))
            })
            .collect();
        for (cmd_has, pod) in [
            ("llama", "sim/llama"),
            ("qwen", "sim/qwen"),
            ("finetune", "sim/finetune"),
        ] {
            assert!(
                by_name.iter().any(|(c, p)| c.contains(cmd_has) && p == pod),
                "{kube}: a holder of {pod}: {by_name:?}"
            );
        }
        assert_eq!(by_name.len(), 3, "{kube}: {by_name:?}");
    }
}

#[test]
fn a_node_without_kubernetes_has_no_pods_and_says_nothing() {
    let node = Node::start("dpx-nps2-two-models");
    let s = snapshot(&node);
    assert!(s.get("kubelet").is_none(), "{}", s["kubelet"]);
    assert!(
        !s["sources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["name"] == "kubelet"),
        "no kubelet source line"
    );
    assert!(pods_by_gpu(&s).iter().all(|(_, p)| p.is_empty()));
}

fn gpu(bdf: &str, uuid: Option<&str>, parts: Vec<LogicalGpu>) -> PhysicalGpu {
    PhysicalGpu {
        bdf: bdf.into(),
        uuid: uuid.map(Into::into),
        partitions: parts,
        ..Default::default()
    }
}

fn part(gpu_id: u32, partition_id: u32, bdf: &str, render: &str) -> LogicalGpu {
    LogicalGpu {
        gpu_id,
        partition_id,
        bdf: bdf.into(),
        render_node: Some(render.into()),
        ..Default::default()
    }
}

fn alloc(pod: &str, device: Device) -> Allocation {
    Allocation {
        namespace: "ml".into(),
        pod: pod.into(),
        container: "c".into(),
        device,
    }
}

fn plugin(resource: &str, id: &str) -> Device {
    Device::Plugin {
        resource: resource.into(),
        id: id.into(),
    }
}

fn holder(pid: u32, gpus: &[u32], uid: Option<&str>) -> Process {
    Process {
        pid,
        k8s_pod_uid: uid.map(Into::into),
        gpus: gpus
            .iter()
            .map(|g| GpuUse {
                gpu_id: *g,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn nvidia_uuids_join_the_whole_gpu_and_its_mig_instances() {
    let mut mig0 = part(1, 1, "0000:3b:00.0", "renderD129");
    mig0.uuid = Some("MIG-aaaa".into());
    mig0.profile = Some("3g.40gb".into());
    let mut mig1 = part(2, 2, "0000:3b:00.0", "renderD129");
    mig1.uuid = Some("MIG-bbbb".into());
    mig1.profile = Some("3g.40gb".into());
    let mut whole = part(0, 0, "0000:1a:00.0", "renderD128");
    whole.uuid = Some("GPU-1111".into());
    let mut snap = Snapshot {
        gpus: vec![
            gpu("0000:1a:00.0", Some("GPU-1111"), vec![whole]),
            gpu("0000:3b:00.0", Some("GPU-2222"), vec![mig0, mig1]),
        ],
        ..Default::default()
    };
    let pr = PodResources {
        allocations: vec![
            alloc("whole", plugin("nvidia.com/gpu", "GPU-1111")),
            alloc("mig", plugin("nvidia.com/mig-3g.40gb", "MIG-bbbb")),
            // The MIG parent's UUID names no logical GPU: MIG is on, its instances are them.
            alloc("parent", plugin("nvidia.com/gpu", "GPU-2222")),
        ],
        allocatable: None,
        source: "test".into(),
    };
    join(&mut snap, &pr, &DeviceNames::new());
    let pods: Vec<Vec<String>> = snap
        .gpus
        .iter()
        .flat_map(|g| &g.partitions)
        .map(|l| l.pods.iter().map(|p| p.pod.clone()).collect())
        .collect();
    assert_eq!(pods, vec![vec!["whole"], vec![], vec!["mig"]]);
    let k = snap.kubelet.unwrap();
    assert_eq!(k.unmatched, vec!["nvidia.com/gpu GPU-2222"]);
}

#[test]
fn holders_get_their_pod_by_device_and_by_pod_uid() {
    let uid_a = "11111111-2222-3333-4444-555555555555";
    let uid_b = "66666666-7777-8888-9999-000000000000";
    let mut snap = Snapshot {
        gpus: vec![gpu(
            "0000:05:00.0",
            None,
            vec![
                part(0, 0, "0000:05:00.0", "renderD128"),
                part(1, 1, "0000:05:00.1", "renderD129"),
                part(2, 2, "0000:05:00.2", "renderD130"),
            ],
        )],
        processes: vec![
            // Pod a's server on GPU 0; its sidecar holding only /dev/kfd (no GPU).
            holder(10, &[0], Some(uid_a)),
            holder(11, &[], Some(uid_a)),
            // A process of no pod cgroup on pod b's GPU 1: the GPU's pod (allocated to it).
            holder(12, &[1], None),
            // A process on two pods' GPUs with no UID: not one pod, so none said.
            holder(13, &[0, 1], None),
            // A process in a pod whose GPU no allocation names: nothing to say.
            holder(14, &[2], Some(uid_b)),
        ],
        ..Default::default()
    };
    let names: DeviceNames = [("renderD129".to_string(), "amdgpu_xcp.0".to_string())]
        .into_iter()
        .collect();
    let pr = PodResources {
        allocations: vec![
            alloc("a", plugin("amd.com/gpu", "0000:05:00.0")),
            alloc("b", plugin("amd.com/gpu", "amdgpu_xcp_0")),
            alloc("gone", plugin("amd.com/gpu", "amdgpu_xcp_7")),
        ],
        allocatable: Some(
            [(
                "amd.com/gpu".to_string(),
                vec!["0000:05:00.0".to_string(), "amdgpu_xcp_0".to_string()],
            )]
            .into_iter()
            .collect(),
        ),
        source: "test".into(),
    };
    join(&mut snap, &pr, &names);
    let pod = |pid: u32| {
        snap.processes
            .iter()
            .find(|p| p.pid == pid)
            .and_then(|p| p.pod.as_ref())
            .map(|p| p.pod.clone())
    };
    assert_eq!(pod(10).as_deref(), Some("a"), "by device, UID learnt");
    assert_eq!(pod(11).as_deref(), Some("a"), "by the UID learnt from 10");
    assert_eq!(
        pod(12).as_deref(),
        Some("b"),
        "by device, the two spellings the same device"
    );
    assert_eq!(pod(13), None, "two pods' GPUs: not one pod");
    assert_eq!(pod(14), None, "a GPU no allocation names");
    let k = snap.kubelet.unwrap();
    assert_eq!(k.unmatched, vec!["amd.com/gpu amdgpu_xcp_7"]);
    assert_eq!(k.allocatable["amd.com/gpu"], 2);
    assert_eq!(k.pods_with_devices, 3);
}

/// The third source of a holder's pod: a process whose cgroup names a pod UID that no
/// PodResources allocation names (a DaemonSet holding `/dev/kfd`, gpu-operator#421) is named
/// from the API server's pods on the node, its container by the cgroup's container id; every
/// combination of (allocated or not) x (UID known to the API or not) x (container id matched,
/// unmatched, absent) x (UID case) is run.
#[test]
fn holders_no_allocation_names_are_named_by_the_api_servers_pods_on_the_node() {
    let allocated = "11111111-2222-3333-4444-555555555555";
    let exporter = "66666666-7777-8888-9999-000000000000";
    let stranger = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
    let ctr = "3f4e0c5a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f";
    let node_pods = vec![
        NodePod {
            uid: exporter.into(),
            namespace: "kube-amd-gpu".into(),
            name: "metrics-exporter-x7k2p".into(),
            containers: vec![(ctr.into(), "exporter".into())],
            priority_class: None,
        },
        NodePod {
            uid: allocated.into(),
            namespace: "sim".into(),
            name: "api-name-of-a".into(),
            containers: vec![],
            priority_class: None,
        },
    ];
    let mut cases = 0;
    for with_alloc in [false, true] {
        for uid in [allocated, exporter, stranger] {
            for upper in [false, true] {
                for cid in [Some(ctr), Some("0123"), None] {
                    let mut p = holder(20, &[0], Some(uid));
                    if upper {
                        p.k8s_pod_uid = Some(uid.to_ascii_uppercase());
                    }
                    p.container_id = cid.map(Into::into);
                    let mut snap = Snapshot {
                        gpus: vec![gpu(
                            "0000:05:00.0",
                            None,
                            vec![part(0, 0, "0000:05:00.0", "renderD128")],
                        )],
                        processes: vec![p],
                        ..Default::default()
                    };
                    let pr = PodResources {
                        allocations: if with_alloc {
                            vec![alloc("a", plugin("amd.com/gpu", "0000:05:00.0"))]
                        } else {
                            vec![]
                        },
                        source: "test".into(),
                        ..Default::default()
                    };
                    join(&mut snap, &pr, &DeviceNames::default());
                    name_unallocated(&mut snap, &node_pods);
                    let got = snap.processes[0].pod.clone();
                    let what = format!("alloc {with_alloc} uid {uid} upper {upper} cid {cid:?}");
                    cases += 1;
                    if with_alloc {
                        // The kubelet's allocation names the GPU's holder: it is kept.
                        let got = got.unwrap_or_else(|| panic!("{what}: no pod"));
                        assert_eq!(got.pod, "a", "{what}");
                        assert_eq!(got.resource, "amd.com/gpu", "{what}");
                        continue;
                    }
                    match uid {
                        u if u == stranger => assert_eq!(got, None, "{what}: no pod has it"),
                        u if u == exporter => {
                            let got = got.unwrap_or_else(|| panic!("{what}: not named"));
                            assert_eq!(got.label(), "kube-amd-gpu/metrics-exporter-x7k2p");
                            assert_eq!(got.resource, NOT_ALLOCATED, "{what}");
                            let want = if cid == Some(ctr) { "exporter" } else { "" };
                            assert_eq!(got.container, want, "{what}");
                        }
                        _ => {
                            let got = got.unwrap_or_else(|| panic!("{what}: not named"));
                            assert_eq!(got.label(), "sim/api-name-of-a", "{what}");
                            assert_eq!(got.container, "", "{what}");
                        }
                    }
                }
            }
        }
    }
    assert_eq!(cases, 36, "2 x 3 x 2 x 3 cases");
    eprintln!("{cases} holder cases named");
}

#[test]
fn metrics_carry_dme_pod_labels() {
    let mut snap = Snapshot {
        host: "n".into(),
        gpus: vec![gpu(
            "0000:05:00.0",
            None,
            vec![
                part(0, 0, "0000:05:00.0", "renderD128"),
                part(1, 1, "0000:05:00.1", "renderD129"),
            ],
        )],
        ..Default::default()
    };
    // DME's series are written for a device with its identity (serial) only.
    snap.gpus[0].serial = Some("PS1".into());
    for l in &mut snap.gpus[0].partitions {
        l.gfx_busy_percent = Some(10.0);
    }
    let pr = PodResources {
        allocations: vec![alloc("a", plugin("amd.com/gpu", "0000:05:00.0"))],
        allocatable: None,
        source: "test".into(),
    };
    join(&mut snap, &pr, &DeviceNames::new());
    let (text, _) = partop::serve::metrics::render(&partop::serve::metrics::Exported {
        snap: Some(&snap),
        findings: &[],
        apply: None,
        now_ms: 0,
        version: "t",
        cluster: "",
    });
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("gpu_gfx_activity{") || l.starts_with("gpu_gfx_busy"))
        .collect();
    assert!(!lines.is_empty(), "{text}");
    let of = |id: &str| {
        lines
            .iter()
            .find(|l| l.contains(&format!("gpu_id=\"{id}\"")))
            .copied()
            .unwrap_or_else(|| panic!("gpu {id}: {lines:?}"))
    };
    let a = of("0");
    assert!(
        a.contains("pod=\"a\"") && a.contains("namespace=\"ml\"") && a.contains("container=\"c\""),
        "{a}"
    );
    assert!(of("1").contains("pod=\"\""), "{}", of("1"));
}

#[test]
fn a_kubernetes_table_naming_no_workload_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s.toml");
    std::fs::write(&f, scenario("dra = [\"nope\"]")).unwrap();
    let o = run(
        partop()
            .args(["sim", "start"])
            .arg(&f)
            .arg("--state")
            .arg(dir.path().join("n.json")),
        "",
    );
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("\"nope\"") && o.stderr.contains("[[workload]]"),
        "{}",
        o.stderr
    );
    // An unknown key in the table is named too.
    std::fs::write(&f, scenario("xcp_names = \"dot\"")).unwrap();
    let o = run(
        partop()
            .args(["sim", "start"])
            .arg(&f)
            .arg("--state")
            .arg(dir.path().join("n.json")),
        "",
    );
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("xcp_names"), "{}", o.stderr);
}

/// An ordinary user (the one tests/hostile_identity.rs creates) for the socket's permission.
fn ordinary_user() -> (u32, u32) {
    let user = "partop-hid";
    let id = |flag: &str| -> Option<u32> {
        let o = std::process::Command::new("id")
            .args([flag, user])
            .output()
            .ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let _ = std::process::Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                user,
            ])
            .output();
    }
    (id("-u").unwrap(), id("-g").unwrap())
}

/// The kubelet's socket is root's: an ordinary user's partop says so once, naming the socket
/// and the way out, and the rest of the sample (its GPUs) is there.
#[test]
fn a_socket_this_user_may_not_open_is_said_and_the_rest_stands() {
    use std::os::unix::fs::PermissionsExt as _;
    let (uid, gid) = ordinary_user();
    let node = Node::start(&scenario(""));
    let sock = node.state.with_extension("kubelet.sock");
    wait_until("the kubelet twin's socket", || sock.exists());
    let dir = node.state.parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The binary where the user can run it (a checkout under root's home is not searchable).
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("partop");
    std::fs::copy(env!("CARGO_BIN_EXE_partop"), &bin).unwrap();
    let home = bin_dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = run(
        std::process::Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg("--")
            .arg(&bin)
            .env("HOME", &home)
            .env("XDG_STATE_HOME", &home)
            .env("XDG_CONFIG_HOME", &home)
            .arg("--sim-state")
            .arg(&node.state)
            .args(["snapshot", "--json"]),
        "",
    );
    assert_eq!(o.code, 3, "partial: {}", o.stderr);
    let said: Vec<&str> = o.stderr.lines().filter(|l| l.contains("kubelet")).collect();
    assert_eq!(said.len(), 1, "said once: {}", o.stderr);
    assert!(
        said[0].contains(&sock.display().to_string())
            && said[0].contains("permission denied")
            && said[0].contains("run partop as root"),
        "{}",
        said[0]
    );
    let s: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(s["gpus"].as_array().unwrap().len(), 2, "the GPUs stand");
    assert!(s.get("kubelet").is_none());
}
