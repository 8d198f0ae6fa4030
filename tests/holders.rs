//! Holder discovery on the captured sysfs/procfs trees (tests/fixtures/sysfs, from
//! shared/fixtures): the mappings and figures their LAYOUT.md gives.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

use partop::collect::holders::{Roots, merge, scan};
use partop::collect::kfd::{gpus_from_topology, process_use, topology};
use partop::domain::Snapshot;
use std::path::{Path, PathBuf};

fn roots(tree: &str) -> Roots {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(tree);
    Roots {
        proc_root: base.join("proc"),
        sys_root: base.join("sys"),
        dev_root: PathBuf::from("/dev"),
        fdinfo_root: base.join("proc"),
    }
}

fn node(tree: &str) -> Snapshot {
    let r = roots(tree);
    let nodes = topology(&r.sys_root);
    let mut s = Snapshot {
        gpus: gpus_from_topology(&nodes, 1),
        taken_at_ms: 1,
        ..Snapshot::default()
    };
    merge(&mut s, &scan(&r), &nodes, &r.sys_root);
    s
}

#[test]
fn cpx_topology_maps_render_minors_gpu_ids_and_partitions() {
    let nodes = topology(&roots("mi300x-cpx-nps4").sys_root);
    assert_eq!(nodes.len(), 8, "node 0 is the CPU");
    let expect = [
        (0, 128, 45815, 3072),
        (1, 129, 12093, 3073),
        (2, 130, 60331, 3074),
        (7, 135, 39966, 3079),
    ];
    for (xcp, minor, gpu_id, loc) in expect {
        let n = nodes.iter().find(|n| n.partition() == xcp).unwrap();
        assert_eq!(
            (n.render_minor, n.gpu_id, n.location_id),
            (Some(minor), gpu_id, loc),
            "XCP {xcp}"
        );
        assert_eq!(n.bdf(), "0000:0c:00");
        assert_eq!(n.cus(), 38);
    }
    let s = node("mi300x-cpx-nps4");
    assert_eq!(s.logical_count(), 8);
    assert_eq!(
        s.gpus[0].partitions[1].render_node.as_deref(),
        Some("renderD129")
    );
}

#[test]
fn cpx_holders_kfd_and_render_nodes() {
    let holders = scan(&roots("mi300x-cpx-nps4"));
    assert_eq!(
        holders.iter().map(|h| h.pid).collect::<Vec<_>>(),
        vec![4242, 5151]
    );
    let h = &holders[0];
    assert!(h.kfd);
    assert_eq!(
        h.render_minors,
        (128..=135).collect::<Vec<_>>(),
        "ROCm opens every visible render node"
    );
    assert_eq!(h.comm.as_deref(), Some("python3"));
    assert!(
        h.environ_error.is_some(),
        "no environ in the tree: the reason is kept"
    );
    assert!(!holders[1].kfd);
    assert_eq!(
        holders[1].render_minors,
        vec![130],
        "fd 5 and its dup fd 6 count once"
    );

    let s = node("mi300x-cpx-nps4");
    let p = s.processes.iter().find(|p| p.pid == 4242).unwrap();
    assert!(p.holds_kfd && !p.listed_by_amdsmi);
    assert_eq!(p.gpus.len(), 8);
    let x1 = p.gpus.iter().find(|u| u.gpu_id == 1).unwrap();
    assert_eq!(x1.vram_bytes, Some(17_188_257_792));
    assert_eq!(x1.sdma_us, Some(4_812_331));
    assert_eq!(x1.cu_occupancy, Some(38));
    assert_eq!(x1.cu_percent, Some(100.0));
    assert!(x1.render_open && !x1.attached_only());
    assert!(
        p.gpus
            .iter()
            .filter(|u| u.gpu_id != 1)
            .all(|u| u.attached_only()),
        "attached to the other seven, using nothing"
    );
    assert_eq!(
        p.provenance["gpu1.vram_bytes"].detail,
        "/sys/class/kfd/kfd/proc/4242/vram_12093"
    );
    let v = s.processes.iter().find(|p| p.pid == 5151).unwrap();
    assert!(!v.holds_kfd);
    assert_eq!(v.gpus.len(), 1);
    assert_eq!(v.gpus[0].gpu_id, 2, "renderD130 is XCP 2");
    assert!(v.gpus[0].render_open);
}

#[test]
fn spx_holders_and_spare_render_nodes_are_not_gpus() {
    let s = node("mi300x-spx-nps1");
    assert_eq!(
        s.logical_count(),
        1,
        "renderD129..135 of the spare XCP devices are not GPUs"
    );
    let p = s.processes.iter().find(|p| p.pid == 7001).unwrap();
    assert!(p.holds_kfd);
    assert_eq!(p.gpus[0].vram_bytes, Some(51_539_607_552));
    assert_eq!(p.gpus[0].cu_occupancy, Some(296));
    assert!((p.gpus[0].cu_percent.unwrap() - 97.37).abs() < 0.01);
    let v = s.processes.iter().find(|p| p.pid == 7002).unwrap();
    assert!(!v.holds_kfd && v.gpus[0].render_open);
    assert!(
        process_use(&roots("mi300x-spx-nps1").sys_root, 7002).is_none(),
        "no KFD entry for a DRM-only process"
    );
}

/// A shell running `script`, on this machine's real /proc.
fn sh(script: &str) -> std::process::Child {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .spawn()
        .unwrap()
}

fn holds(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}/fd/3")).exists()
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    for _ in 0..200 {
        if ok() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    panic!("timed out waiting for {what}");
}

/// The periodic sweep looks at new processes and known holders only; a reused pid is a new
/// process (its /proc directory has a new inode) and is looked at; a process seen before that
/// opens a device later is found by the next complete scan. On the real /proc, with real
/// processes holding a stand-in device file, and a real pid reuse (ns_last_pid, root).
#[test]
fn a_sweep_looks_at_new_processes_and_reused_pids_a_complete_scan_at_all() {
    use partop::collect::holders::{Swept, scan_all, sweep};
    let dev = tempfile::tempdir().unwrap();
    let kfd = dev.path().join("kfd");
    std::fs::write(&kfd, "").unwrap();
    let roots = Roots {
        proc_root: PathBuf::from("/proc"),
        sys_root: PathBuf::from("/nonexistent"),
        dev_root: dev.path().to_path_buf(),
        fdinfo_root: PathBuf::from("/proc"),
    };
    let open = format!("exec 3<{}; exec sleep 60", kfd.display());
    let mut swept = Swept::default();
    // Opens the device a moment after the first scan has looked at it.
    let mut late = sh(&format!("sleep 1; {open}"));
    wait_for("the late shell", || {
        Path::new(&format!("/proc/{}", late.id())).exists()
    });
    let first = scan_all(&roots, &mut swept);
    assert!(!first.iter().any(|h| h.pid == late.id()));
    let mut fresh = sh(&open);
    wait_for("both to hold the device", || {
        holds(fresh.id()) && holds(late.id())
    });
    let h = sweep(&roots, &mut swept, &[]);
    assert!(
        h.iter().any(|h| h.pid == fresh.id() && h.kfd),
        "a new process is looked at"
    );
    assert!(
        !h.iter().any(|h| h.pid == late.id()),
        "a process seen before is left to the complete scan"
    );
    let all = scan_all(&roots, &mut swept);
    assert!(all.iter().any(|h| h.pid == late.id()));
    // A known holder is looked at again each sweep: one that closed its device is dropped.
    let known: Vec<u32> = all.iter().map(|h| h.pid).collect();
    let h = sweep(&roots, &mut swept, &known);
    assert!(h.iter().any(|h| h.pid == late.id()) && h.iter().any(|h| h.pid == fresh.id()));
    // The same pid, another process: the sweep looks at it.
    let pid = fresh.id();
    fresh.kill().unwrap();
    fresh.wait().unwrap();
    let mut reused = None;
    for _ in 0..50 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).expect(
            "pid reuse through /proc/sys/kernel/ns_last_pid needs root (tests run as root)",
        );
        let mut c = sh(&open);
        if c.id() == pid {
            reused = Some(c);
            break;
        }
        let _ = c.kill();
        let _ = c.wait();
    }
    let mut reused = reused.expect("the pid was reused");
    wait_for("the reused pid to hold the device", || holds(pid));
    let h = sweep(&roots, &mut swept, &[]);
    assert!(
        h.iter().any(|h| h.pid == pid && h.kfd),
        "a reused pid is a new process: {h:?}"
    );
    for c in [&mut late, &mut reused] {
        let _ = c.kill();
        let _ = c.wait();
    }
}
