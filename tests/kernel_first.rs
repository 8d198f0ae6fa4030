//! Kernel first, through the real code paths: the simulator's kernel twin read by the same
//! reader as the captured fixture trees; a repartition followed entirely by the kernel path with
//! amd-smi asked only at start and when the topology generation moves; the fallback cadence
//! widening under a costly amd-smi; a partition that is missing, reported.

#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;

use common::{Node, partop, run, wait_until};
use partop::collect::pipeline::Collector;
use partop::collect::sysfs::SysfsCollector;
use partop::domain::Snapshot;
use partop::domain::findings::{Kind, Tracker};
use partop::node::SourceArgs;
use std::path::Path;

fn args(state: &Path) -> SourceArgs {
    SourceArgs {
        sim_state: Some(state.to_path_buf()),
        timeout: 20.0,
        amd_smi_every: 60.0,
        amd_smi_budget: 1.0,
        ..SourceArgs::default()
    }
}

fn collector(state: &Path) -> Collector {
    partop::node::open_with(&args(state), Path::new(env!("CARGO_BIN_EXE_partop")))
        .unwrap()
        .collector()
}

/// The fake amd-smi calls this process made (the log names each caller).
fn my_calls(state: &Path) -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_to_string(partop::sim::amdsmi::calls_log(state))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some(me.as_str()))
        .map(|l| l.splitn(3, ' ').nth(2).unwrap_or("").to_string())
        .collect()
}

#[test]
fn the_twin_reads_like_the_captured_cpx_nps4_tree() {
    let node = Node::start("cpx-nps4-small-models");
    let twin = partop::sim::kernel::root(&node.state);
    let mut k = SysfsCollector::new(partop::sim::session::roots(&node.state));
    let snap = k.sample();
    let mut f = SysfsCollector::new(partop::collect::holders::Roots {
        sys_root: "tests/fixtures/sysfs/mi300x-cpx-nps4/sys".into(),
        proc_root: "tests/fixtures/sysfs/mi300x-cpx-nps4/proc".into(),
        dev_root: "/dev".into(),
        fdinfo_root: "tests/fixtures/sysfs/mi300x-cpx-nps4/proc".into(),
    });
    let fix = f.sample_at(0, 0);
    assert_eq!(snap.gpus.len(), 8, "{:?}", twin);
    // Same shape per physical GPU as the real-format fixture: 8 partitions of 38 CUs, render
    // nodes stepping by one, partition 0 on the PCI device and the others on platform devices.
    for (g, want) in snap.gpus.iter().zip(std::iter::repeat(&fix.gpus[0])) {
        assert_eq!(g.compute_partition, want.compute_partition);
        assert_eq!(g.memory_partition, want.memory_partition);
        assert_eq!(g.partitions.len(), want.partitions.len());
        assert_eq!(g.product, want.product);
        for (l, w) in g.partitions.iter().zip(&want.partitions) {
            assert_eq!(l.partition_id, w.partition_id);
            assert_eq!(l.cu_count, w.cu_count);
            assert!(l.gfx_busy_percent.is_some(), "{l:?}");
            let src = |x: &partop::domain::LogicalGpu| {
                x.provenance
                    .get("gfx_busy_percent")
                    .map(|o| o.detail.clone())
                    .unwrap_or_default()
            };
            // Both read each partition's own xcp_metrics, through the same kind of path.
            let kind = |s: String| {
                if s.contains("amdgpu_xcp_") {
                    "platform"
                } else if s.contains("xcp_metrics") {
                    "pci"
                } else {
                    "other"
                }
            };
            assert_eq!(kind(src(l)), kind(src(w)), "{} vs {}", src(l), src(w));
        }
        assert!(
            g.provenance["power_watts"]
                .detail
                .contains("gpu_metrics v1.8"),
            "{:?}",
            g.provenance["power_watts"]
        );
    }
    // The workloads are found through KFD's process files and their open device files, with
    // the VRAM the fake amd-smi reports for them.
    let amd = node.json("process --json -g all");
    let mut amd_pids: Vec<u64> = amd
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["process_list"].as_array().unwrap().clone())
        .filter_map(|p| p["process_info"]["pid"].as_u64())
        .collect();
    amd_pids.sort_unstable();
    let mut kernel_pids: Vec<u64> = snap
        .processes
        .iter()
        .filter(|p| p.gpus.iter().any(|u| u.vram_bytes.unwrap_or(0) > 0))
        .map(|p| u64::from(p.pid))
        .collect();
    kernel_pids.sort_unstable();
    assert_eq!(kernel_pids, amd_pids);
    assert!(
        snap.processes
            .iter()
            .all(|p| p.command.is_some() && p.user.is_some()),
        "the /proc facts come with the kernel sample"
    );
}

#[test]
fn the_twin_reads_like_the_captured_spx_nps1_tree() {
    let node = Node::start("spx-nps1-one-model");
    let snap = SysfsCollector::new(partop::sim::session::roots(&node.state)).sample();
    let fix = SysfsCollector::new(partop::collect::holders::Roots {
        sys_root: "tests/fixtures/sysfs/mi300x-spx-nps1/sys".into(),
        proc_root: "tests/fixtures/sysfs/mi300x-spx-nps1/proc".into(),
        dev_root: "/dev".into(),
        fdinfo_root: "tests/fixtures/sysfs/mi300x-spx-nps1/proc".into(),
    })
    .sample_at(0, 0);
    let want = &fix.gpus[0];
    assert!(!snap.gpus.is_empty());
    for g in &snap.gpus {
        // One partition owning the whole device, as the captured SPX/NPS1 node shows it.
        assert_eq!(
            (g.compute_partition, g.memory_partition, g.partitions.len()),
            (
                want.compute_partition,
                want.memory_partition,
                want.partitions.len()
            )
        );
        assert_eq!(g.product, want.product);
        let (l, w) = (&g.partitions[0], &want.partitions[0]);
        assert_eq!((l.partition_id, l.cu_count), (w.partition_id, w.cu_count));
        assert_eq!(l.vram_total_bytes.is_some(), w.vram_total_bytes.is_some());
        assert!(l.gfx_busy_percent.is_some() && w.gfx_busy_percent.is_some());
        assert!(g.power_watts.is_some() && g.hotspot_celsius.is_some());
    }
    // The model server is seen through KFD with its VRAM, as amd-smi sees it.
    let server = snap
        .processes
        .iter()
        .find(|p| {
            p.command
                .as_deref()
                .is_some_and(|c| c.contains("vllm serve"))
        })
        .expect("the model server");
    assert!(server.holds_kfd);
    assert!(
        server
            .gpus
            .iter()
            .any(|u| u.vram_bytes.unwrap_or(0) > 1 << 30)
    );
}

fn tick(rt: &tokio::runtime::Runtime, c: &mut Collector) -> Snapshot {
    (*rt.block_on(c.tick())).clone()
}

#[test]
fn a_repartition_is_followed_by_the_kernel_and_amd_smi_is_asked_only_when_the_topology_moves() {
    let node = Node::start(
        "name = \"kf\"\ndescription = \"kernel first\"\nproduct = \"mi300x\"\ncompute = \"SPX\"\nmemory = \"NPS1\"\nreload_secs = 2.0\n",
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut c = collector(&node.state);
    // The first tick comes from the kernel without waiting for amd-smi.
    let first = tick(&rt, &mut c);
    assert_eq!(first.logical_count(), 8);
    assert!(first.sources.iter().any(|s| s.name == "sysfs"));
    wait_until("amd-smi's identity read", || {
        tick(&rt, &mut c).reload.is_some()
    });
    let at_start = my_calls(&node.state);
    let mut verbs: Vec<&str> = at_start
        .iter()
        .map(|c| c.split(' ').next().unwrap())
        .collect();
    verbs.sort_unstable();
    assert_eq!(
        verbs,
        ["list", "partition", "static", "version"],
        "{at_start:?}"
    );
    let gen0 = std::fs::read_to_string(
        partop::sim::kernel::root(&node.state).join("class/kfd/kfd/topology/generation_id"),
    )
    .unwrap();
    for _ in 0..5 {
        tick(&rt, &mut c);
    }
    assert_eq!(
        my_calls(&node.state),
        at_start,
        "steady ticks ask amd-smi nothing"
    );
    let ids0: Vec<Option<u64>> = first.gpus[0].partitions.iter().map(|l| l.kfd_id).collect();
    // Another operator repartitions the node (a real apply through the simulator).
    let plan = run(
        partop().arg("--sim-state").arg(&node.state).args([
            "plan",
            "--memory",
            "NPS2",
            "--compute",
            "DPX",
            "--json",
        ]),
        "",
    );
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let pf = node.dir.path().join("plan.json");
    std::fs::write(&pf, plan.stdout).unwrap();
    let o = run(
        partop()
            .arg("--sim-state")
            .arg(&node.state)
            .arg("apply")
            .arg(&pf)
            .arg("--yes"),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let mut after = Snapshot::default();
    wait_until("the kernel to show the new layout", || {
        after = tick(&rt, &mut c);
        after.logical_count() == 16 && after.reload.is_some()
    });
    assert_eq!(
        after.gpus[0]
            .compute_partition
            .map(|m| m.to_string())
            .as_deref(),
        Some("DPX")
    );
    let gen1 = std::fs::read_to_string(
        partop::sim::kernel::root(&node.state).join("class/kfd/kfd/topology/generation_id"),
    )
    .unwrap();
    assert_ne!(gen0, gen1, "a reload rebuilds the topology");
    let ids1: Vec<Option<u64>> = after.gpus[0].partitions.iter().map(|l| l.kfd_id).collect();
    assert_ne!(ids0[0], ids1[0], "KFD renumbers its nodes");
    // Let a read the last generation change started finish.
    for _ in 0..6 {
        std::thread::sleep(std::time::Duration::from_millis(250));
        tick(&rt, &mut c);
    }
    // amd-smi was asked again only because the generation moved: identity reads, no metric or
    // process read ever.
    let calls = my_calls(&node.state);
    let later = &calls[at_start.len()..];
    assert!(!later.is_empty(), "a new topology asks amd-smi again");
    assert!(
        later
            .iter()
            .all(|c| ["list", "static", "partition"].contains(&c.split(' ').next().unwrap())),
        "{later:?}"
    );
    assert!(
        calls
            .iter()
            .all(|c| !c.starts_with("metric") && !c.starts_with("process"))
    );
    let settled = calls.len();
    for _ in 0..3 {
        tick(&rt, &mut c);
    }
    assert_eq!(my_calls(&node.state).len(), settled);
}

#[test]
fn without_kernel_gpus_amd_smi_is_read_within_its_budget() {
    // A costly amd-smi: 0.15 CPU-s a call, whatever the GPU count.
    let node = Node::start(
        "name = \"fb\"\ndescription = \"fallback\"\nproduct = \"mi300x\"\ngpus = 1\ncompute = \"SPX\"\nmemory = \"NPS1\"\n[amd_smi_cost]\ncpu_fixed_secs = 0.15\ncpu_per_gpu_secs = 0.0\nwall_factor = 1.0\nfirst_call_secs = 0.15\n",
    );
    partop::sim::state::SimState::update(&node.state, |s| {
        s.amd_smi_cost.enabled = true;
        Ok(())
    })
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut n =
        partop::node::open_with(&args(&node.state), Path::new(env!("CARGO_BIN_EXE_partop")))
            .unwrap();
    // A node whose kernel shows no AMD GPU (a container without /sys).
    let empty = tempfile::tempdir().unwrap();
    if let Some((_, roots)) = n.kernel.as_mut() {
        roots.sys_root = empty.path().to_path_buf();
    }
    let mut c = n.collector();
    c.refresh = std::time::Duration::from_secs(1);
    let s = rt.block_on(c.sample());
    assert_eq!(
        s.logical_count(),
        1,
        "amd-smi is the source: {:?}",
        s.sources
    );
    let metric = s
        .sources
        .iter()
        .find(|x| x.name == "amd-smi metric")
        .unwrap();
    let cad = metric.cadence.clone().expect("the cadence is reported");
    // Two calls a tick at 0.15 CPU-s within 1 % of a core: about 30 s apart, not 1 s.
    assert_eq!(cad.why, "budget", "{cad:?}");
    assert!(cad.every_ms >= 20_000, "{cad:?}");
    assert!(cad.cpu_ms >= 250, "{cad:?}");
    assert!((cad.core_percent - 1.0).abs() < 0.2, "{cad:?}");
    let kernel = s.sources.iter().find(|x| x.name == "sysfs").unwrap();
    assert!(kernel.error.as_deref().unwrap_or("").contains("no AMD GPU"));
    let before = my_calls(&node.state).len();
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let s = tick(&rt, &mut c);
        assert_eq!(s.logical_count(), 1, "the last values stay on screen");
    }
    assert_eq!(
        my_calls(&node.state).len(),
        before,
        "no call before the interval"
    );
}

#[test]
fn a_partition_that_did_not_come_up_is_a_finding_and_its_node_is_named() {
    let node = Node::start("cpx-nps4-small-models");
    let root = partop::sim::kernel::root(&node.state);
    // Stop the twin so it does not repair the tree, then break one KFD node: its properties
    // cannot be read, and the topology moves on.
    run(
        partop().args(["sim", "stop", "--state"]).arg(&node.state),
        "",
    );
    let topo = root.join("class/kfd/kfd/topology");
    std::fs::remove_file(topo.join("nodes/4/properties")).unwrap();
    std::fs::write(topo.join("generation_id"), "999\n").unwrap();
    let mut k = SysfsCollector::new(partop::sim::session::roots(&node.state));
    let snap = k.sample();
    let sysfs = &snap.sources[0];
    assert!(
        sysfs.error.as_deref().unwrap_or("").contains("KFD node 4")
            && sysfs.error.as_deref().unwrap_or("").contains("not shown"),
        "{sysfs:?}"
    );
    let f = Tracker::default().observe(&snap);
    let m: Vec<_> = f
        .iter()
        .filter(|f| f.kind == Kind::PartitionMismatch)
        .collect();
    assert_eq!(m.len(), 1, "{f:?}");
    assert!(
        m[0].saw.contains("CPX (8 logical GPUs) but 7 are present")
            && m[0].saw.contains("missing partition 3")
            && m[0].subject == snap.gpus[0].bdf,
        "{}",
        m[0].saw
    );
}

/// One pipeline: whichever source a node is read from (kernel first, the kernel alone, amd-smi
/// alone, an amd-smi recording, an NVIDIA recording), the same enrichers run, and a broken
/// model registry is reported as a source naming the file, never dropped (the monitor and
/// `partop serve` keep running with discovery only).
#[test]
fn every_source_reports_a_broken_registry_and_runs_the_same_enrichers() {
    use partop::collect::sysfs::SourceMode;
    let node = Node::start("spx-nps1-one-model");
    let dir = tempfile::tempdir().unwrap();
    let reg = dir.path().join("models.toml");
    std::fs::write(&reg, "[[model]]\nname = \"m\"\nmemory_gb = -5\n").unwrap();
    let nv = dir.path().join("nv.json");
    let h200: partop::collect::nvidia::NvNode = partop::collect::nvidia::smi::parse(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/nvidia-smi/h200-one-process-q.xml"),
        )
        .unwrap(),
    )
    .unwrap();
    std::fs::write(&nv, serde_json::to_string(&h200).unwrap()).unwrap();
    let rec = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/recordings/spx-nps1-one-model.json");
    let live = |mode| SourceArgs {
        source: mode,
        models: Some(reg.clone()),
        ..args(&node.state)
    };
    let cases = [
        ("kernel first", live(SourceMode::Auto)),
        ("kernel only", live(SourceMode::Sysfs)),
        ("amd-smi only", live(SourceMode::AmdSmi)),
        (
            "amd-smi recording",
            SourceArgs {
                replay: Some(rec),
                models: Some(reg.clone()),
                ..SourceArgs::default()
            },
        ),
        (
            "NVIDIA recording",
            SourceArgs {
                nvidia_replay: Some(nv),
                models: Some(reg.clone()),
                ..SourceArgs::default()
            },
        ),
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (what, a) in cases {
        let mut c = partop::node::open_with(&a, Path::new(env!("CARGO_BIN_EXE_partop")))
            .unwrap()
            .collector();
        let s = rt.block_on(c.sample());
        let r = s
            .sources
            .iter()
            .find(|x| x.name == "models registry")
            .unwrap_or_else(|| panic!("{what}: no registry status in {:?}", s.sources));
        let e = r.error.as_deref().unwrap_or("");
        assert!(e.contains("models.toml:"), "{what}: {e}");
        assert!(!s.gpus.is_empty(), "{what}: no GPUs");
        assert!(!s.processes.is_empty(), "{what}: no processes");
        // Every process has its /proc facts: read here on a live node, kept by a recording.
        for p in &s.processes {
            assert!(
                p.command.is_some() || p.name.is_some(),
                "{what}: pid {} has no command: {p:?}",
                p.pid
            );
        }
        assert!(
            s.generation > 0 && !s.host.is_empty(),
            "{what}: not stamped"
        );
    }
}

#[test]
fn the_twin_writes_each_workloads_render_fdinfo_as_amdgpu_prints_it() {
    // The workloads hold the twin's device files, which are not DRM devices: the twin writes
    // the fdinfo amdgpu would show behind each render-node fd (kernel-interfaces.md §3.1), and
    // the kernel reader takes memory from it as on a real node.
    let node = Node::start("cpx-nps4-small-models");
    let roots = partop::sim::session::roots(&node.state);
    let mut k = SysfsCollector::new(roots.clone());
    wait_until("the twin's fdinfo behind every render fd", || {
        let s = k.sample();
        let users: Vec<_> = s
            .processes
            .iter()
            .flat_map(|p| p.gpus.iter().filter(|u| u.render_open))
            .collect();
        !users.is_empty() && users.iter().all(|u| u.gtt_bytes == Some(2 << 20))
    });
    let s = k.sample();
    let mut files = 0;
    for p in s
        .processes
        .iter()
        .filter(|p| p.gpus.iter().any(|u| u.render_open))
    {
        let dir = roots.fdinfo_root.join(format!("{}/fdinfo", p.pid));
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap();
            // The kernel's own lines of that fd first, then amdgpu's, in its order.
            let keys: Vec<&str> = text.lines().map(|l| l.split(':').next().unwrap()).collect();
            assert_eq!(keys[..4], ["pos", "flags", "mnt_id", "ino"], "{text}");
            assert_eq!(
                keys[4..8],
                ["drm-driver", "drm-client-id", "drm-pdev", "pasid"],
                "{text}"
            );
            assert!(text.contains("drm-memory-gtt: \t2048 KiB\n"), "{text}");
            assert!(text.contains("drm-total-gtt:\t2 MiB\n"), "{text}");
            // A ROCm client's compute is on KFD queues: no engine is counted.
            assert!(!text.contains("drm-engine-"), "{text}");
            let c = partop::collect::sysfs::fdinfo::parse(&text);
            let pdev = c.pdev.unwrap();
            assert!(
                s.gpus.iter().any(|g| pdev == format!("{}.0", g.bdf)),
                "drm-pdev {pdev} is a physical GPU of the node"
            );
            assert!(c.vram_bytes.unwrap() > 1 << 30, "{text}");
            files += 1;
        }
        // No engine counted: the GPU% column says so rather than 0 %.
        assert_eq!(p.engine_busy_percent(), None);
    }
    eprintln!("{files} fdinfo files checked");
    assert!(files >= 4, "{files}");
}
