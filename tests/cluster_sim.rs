//! `partop sim cluster` against a real API server (issue 26): the simulated cluster's Node
//! objects, and its DCM and MIG-manager stand-ins following their documented contracts: a
//! profile asked by label is validated against the ConfigMap, applied on a simulated GPU node
//! only through its amd-smi (the node's own state says so), and reported in the state label,
//! with an event naming DCM's reason on failure; the MIG manager goes pending -> success or
//! failed and the node advertises the mixed strategy's resources. `partop fleet --kubernetes`
//! then reads the outcome as signals.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::control_plane::{ControlPlane, kube, label, node, reasons};
use common::sim_cluster::{start_sim, until_label};
use common::{partop, run};

#[test]
fn the_simulated_cluster_s_managers_follow_their_contracts() {
    let cp = ControlPlane::start();
    let dir = tempfile::tempdir().unwrap();
    // Five nodes: the first a simulated GPU node, the third failing, the last NVIDIA.
    let sim = start_sim(
        &cp,
        dir.path(),
        &[
            "--nodes",
            "5",
            "--gpu-nodes",
            "1",
            "--mig-nodes",
            "1",
            "--mig-gpu-nodes",
            "1",
            "--fail",
            "sim-amd-0002",
        ],
    );
    let said = &sim.said;
    let names: Vec<String> = kube(
        &cp,
        &[
            "get",
            "nodes",
            "-l",
            "partop.sim/cluster=true",
            "-o",
            "name",
        ],
    )
    .lines()
    .map(str::to_string)
    .collect();
    assert_eq!(
        names,
        [
            "node/sim-amd-0000",
            "node/sim-amd-0001",
            "node/sim-amd-0002",
            "node/sim-amd-0003",
            "node/sim-nv-0004"
        ],
    );
    let n = node(&cp, "sim-amd-0001");
    assert_eq!(label(&n, "amd.com/compute-memory-partition"), "spx_nps1");
    assert_eq!(n["status"]["allocatable"]["amd.com/gpu"], "8");
    // Ready, and not left with the not-ready taint the API server puts on a new node.
    assert!(n["spec"]["taints"].is_null(), "{n}");
    assert_eq!(
        node(&cp, "sim-nv-0004")["status"]["capacity"]["nvidia.com/gpu"],
        "8"
    );

    // DCM on the simulated GPU node, tainted first as DCM's flow asks: CPX/NPS4 through its
    // amd-smi; the labeller's label and the device plugin's count follow.
    kube(
        &cp,
        &["taint", "node", "sim-amd-0000", "amd-dcm=up:NoExecute"],
    );
    kube(
        &cp,
        &[
            "label",
            "node",
            "sim-amd-0000",
            "dcm.amd.com/gpu-config-profile=cpx-nps4",
        ],
    );
    until_label(
        &cp,
        "sim-amd-0000",
        "dcm.amd.com/gpu-config-profile-state",
        "success",
        300,
        said,
    );
    let n = node(&cp, "sim-amd-0000");
    assert_eq!(label(&n, "amd.com/compute-memory-partition"), "cpx_nps4");
    assert_eq!(n["status"]["allocatable"]["amd.com/gpu"], "64", "{n}");
    let st = run(
        partop()
            .args(["sim", "status", "--state"])
            .arg(dir.path().join("sim-amd-0000/node.json")),
        "",
    );
    assert!(
        st.stdout.contains("CPX/NPS4") && !st.stdout.contains("SPX/NPS1"),
        "{}",
        st.stdout
    );
    assert!(!reasons(&cp, "sim-amd-0000").contains(&"NodeNotTaintedBeforeParition".to_string()));

    // DCM's refusals, each with its documented event reason and the failure state: a profile
    // not in the ConfigMap; the simulated failure mode; a profile that breaks the rules
    // (added to the ConfigMap: 6 GPUs assigned on an 8-GPU node).
    kube(
        &cp,
        &[
            "label",
            "node",
            "sim-amd-0001",
            "dcm.amd.com/gpu-config-profile=nope",
        ],
    );
    kube(
        &cp,
        &[
            "label",
            "node",
            "sim-amd-0002",
            "dcm.amd.com/gpu-config-profile=dpx-nps2",
        ],
    );
    let cm = kube(
        &cp,
        &[
            "-n",
            "kube-amd-gpu",
            "get",
            "configmap",
            "default-dcm-config",
            "-o",
            "json",
        ],
    );
    let mut cm: serde_json::Value = serde_json::from_str(&cm).unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(cm["data"]["config.json"].as_str().unwrap()).unwrap();
    cfg["gpu-config-profiles"]["short"] = serde_json::json!({"profiles": [
        {"computePartition": "CPX", "memoryPartition": "NPS4", "numGPUsAssigned": 6}]});
    cm["data"]["config.json"] = serde_json::json!(cfg.to_string());
    let f = dir.path().join("cm.json");
    std::fs::write(&f, cm.to_string()).unwrap();
    kube(&cp, &["apply", "-f", f.to_str().unwrap()]);
    kube(
        &cp,
        &[
            "label",
            "node",
            "sim-amd-0003",
            "dcm.amd.com/gpu-config-profile=short",
        ],
    );
    for (name, reason) in [
        ("sim-amd-0001", "NonExistentProfile"),
        ("sim-amd-0002", "PartitionFailure"),
        ("sim-amd-0003", "InvalidProfileInfo"),
    ] {
        until_label(
            &cp,
            name,
            "dcm.amd.com/gpu-config-profile-state",
            "failure",
            60,
            said,
        );
        let r = reasons(&cp, name);
        assert!(r.contains(&reason.to_string()), "{name}: {r:?}");
        // Not tainted before the profile: DCM says that too.
        assert!(
            r.contains(&"NodeNotTaintedBeforeParition".to_string()),
            "{name}: {r:?}"
        );
        assert_eq!(
            label(&node(&cp, name), "amd.com/compute-memory-partition"),
            "spx_nps1",
            "{name}: a failed profile leaves the partition as it was"
        );
    }

    // The MIG manager on the simulated NVIDIA node: pending, then success with the mixed
    // strategy's resources, the instances made through its nvidia-smi; a config naming a
    // profile the GPU does not have fails; all-disabled takes MIG off again.
    kube(
        &cp,
        &[
            "label",
            "node",
            "sim-nv-0004",
            "nvidia.com/mig.config=all-1g.10gb",
        ],
    );
    until_label(
        &cp,
        "sim-nv-0004",
        "nvidia.com/mig.config.state",
        "success",
        60,
        said,
    );
    let n = node(&cp, "sim-nv-0004");
    assert_eq!(
        n["status"]["capacity"]["nvidia.com/mig-1g.10gb"], "56",
        "{n}"
    );
    assert!(n["status"]["capacity"]["nvidia.com/gpu"].is_null(), "{n}");
    let smi = |args: &[&str]| {
        run(
            partop()
                .args(["sim", "nvidia-smi", "--state"])
                .arg(dir.path().join("sim-nv-0004/node.json"))
                .args(args),
            "",
        )
    };
    let listed: Vec<String> = (0..8)
        .map(|i| smi(&["mig", "-i", &i.to_string(), "-lgi"]).stdout)
        .collect();
    let per_gpu: Vec<usize> = listed
        .iter()
        .map(|o| o.matches("MIG 1g.10gb").count())
        .collect();
    assert_eq!(
        per_gpu, [7; 8],
        "the simulated node's own instances: {listed:?}"
    );
    kube(
        &cp,
        &[
            "label",
            "node",
            "sim-nv-0004",
            "--overwrite",
            "nvidia.com/mig.config=all-9g.1tb",
        ],
    );
    until_label(
        &cp,
        "sim-nv-0004",
        "nvidia.com/mig.config.state",
        "failed",
        60,
        said,
    );
    assert!(reasons(&cp, "sim-nv-0004").contains(&"MigConfigFailed".to_string()));
    kube(
        &cp,
        &[
            "label",
            "node",
            "sim-nv-0004",
            "--overwrite",
            "nvidia.com/mig.config=all-disabled",
        ],
    );
    until_label(
        &cp,
        "sim-nv-0004",
        "nvidia.com/mig.config.state",
        "success",
        60,
        said,
    );
    let n = node(&cp, "sim-nv-0004");
    assert_eq!(n["status"]["capacity"]["nvidia.com/gpu"], "8", "{n}");
    assert!(
        n["status"]["capacity"]["nvidia.com/mig-1g.10gb"].is_null(),
        "{n}"
    );
    for i in 0..8 {
        let o = smi(&["mig", "-i", &i.to_string(), "-lgi"]);
        assert!(
            !o.stdout.contains("MIG 1g.10gb"),
            "GPU {i}: {}{}",
            o.stdout,
            o.stderr
        );
    }
    // The fleet sees the MIG manager's last word: success, no signal.
    kube(
        &cp,
        &[
            "label",
            "node",
            "sim-nv-0004",
            "--overwrite",
            "nvidia.com/mig.config=all-9g.1tb",
        ],
    );
    until_label(
        &cp,
        "sim-nv-0004",
        "nvidia.com/mig.config.state",
        "failed",
        60,
        said,
    );

    // The fleet reads the outcome: three DCM failures and a MIG failure as signals.
    let o = run(
        partop()
            .args(["fleet", "--kubernetes", "--kubeconfig"])
            .arg(cp.admin())
            .args(["--once", "--json"]),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let sig: Vec<&str> = v["signals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    for n in ["sim-amd-0001", "sim-amd-0002", "sim-amd-0003"] {
        assert!(
            sig.iter()
                .any(|s| s.starts_with(n) && s.contains("AMD DCM failed")),
            "{n}: {sig:#?}"
        );
    }
    assert!(
        sig.iter()
            .any(|s| s.starts_with("sim-nv-0004") && s.contains("MIG manager failed")),
        "{sig:#?}"
    );
    assert_eq!(v["nodes"].as_array().unwrap().len(), 5);

    // Ended (SIGTERM, as Ctrl-C), the simulated cluster stops the GPU node behind sim-amd-0000
    // with it: its kernel twin gone, the state file kept and saying so.
    let state = dir.path().join("sim-amd-0000").join("node.json");
    let read = || -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap()
    };
    let twin = read()["twin"]["pid"]
        .as_u64()
        .expect("the simulated GPU node runs its kernel twin");
    drop(sim);
    let twin_runs = || {
        std::fs::read_to_string(format!("/proc/{twin}/comm"))
            .is_ok_and(|c| c.starts_with("partop-kernel"))
    };
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while twin_runs() && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(!twin_runs(), "the kernel twin {twin} outlived sim cluster");
    assert!(read()["twin"].is_null(), "{}", read()["twin"]);
}

/// `--read-only` removes the simulated cluster too (it writes Node objects): refused before
/// any connection, saying why.
#[test]
fn read_only_refuses_the_simulated_cluster() {
    let o = run(
        partop().args([
            "--read-only",
            "sim",
            "cluster",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ]),
        "",
    );
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("read"), "{}", o.stderr);
    assert!(
        !o.stderr.contains("kubeconfig"),
        "refused before reading it: {}",
        o.stderr
    );
}
