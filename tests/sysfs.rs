//! The kernel collector on the two captured trees, asserting every mapping and figure their
//! LAYOUT.md gives: partition modes, KFD → render node → partition, per-partition busy from
//! xcp_metrics and gpu_metrics, hwmon, per-process VRAM/GTT/CU from KFD and fdinfo with
//! duplicate clients counted once, engine busy from two fdinfo samples (50 % and 12.5 %); the
//! binary parsers on the real layouts, truncated and wrong-revision files.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::copy_tree;
use partop::collect::holders::Roots;
use partop::collect::merge::{Reader, merge};
use partop::collect::sysfs::SysfsCollector;
use partop::collect::sysfs::gpu_metrics::{self, MetricsError};
use partop::domain::provenance::SourceKind;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

fn collector(root: &Path) -> SysfsCollector {
    SysfsCollector::new(Roots {
        proc_root: root.join("proc"),
        sys_root: root.join("sys"),
        dev_root: "/dev".into(),
        fdinfo_root: root.join("proc"),
    })
}

const PCI: &str = "sys/devices/pci0000:00/0000:00:01.1/0000:0c:00.0";

#[test]
fn cpx_nps4_tree_maps_every_partition_and_process() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture("mi300x-cpx-nps4"), dir.path());
    let mut c = collector(dir.path());
    let s = c.sample_at(1_000_000_000, 1_000);
    assert_eq!(s.gpus.len(), 1);
    let g = &s.gpus[0];
    assert_eq!(g.bdf, "0000:0c:00");
    assert_eq!(g.product_key.as_deref(), Some("mi300x"));
    assert_eq!(
        (
            g.compute_partition.unwrap().to_string(),
            g.memory_partition.unwrap().to_string()
        ),
        ("CPX".into(), "NPS4".into())
    );
    assert_eq!(g.memory_caps.len(), 2);
    assert_eq!((g.gfx_clock_mhz, g.mem_clock_mhz), (Some(2100), Some(1300)));
    // available_compute_partition is "QPX, CPX" while NPS4: only those profiles stay for NPS4.
    assert!(
        g.profiles
            .iter()
            .all(|p| !p.memory.contains(&partop::domain::MemoryMode::Nps4)
                || matches!(p.compute.to_string().as_str(), "QPX" | "CPX"))
    );
    assert_eq!(
        (
            g.hotspot_celsius,
            g.mem_celsius,
            g.power_watts,
            g.power_cap_watts
        ),
        (Some(52.0), Some(44.0), Some(312.0), Some(750.0))
    );
    type Row<'a> = (u32, &'a str, Option<&'a str>, Option<u64>, Option<u32>);
    let rows: Vec<Row<'_>> = g
        .partitions
        .iter()
        .map(|l| {
            (
                l.partition_id,
                l.bdf.as_str(),
                l.render_node.as_deref(),
                l.kfd_id,
                l.cu_count,
            )
        })
        .collect();
    let want = [
        (0, "0000:0c:00.0", "renderD128", 45815),
        (1, "0000:0c:00.1", "renderD129", 12093),
        (2, "0000:0c:00.2", "renderD130", 60331),
        (3, "0000:0c:00.3", "renderD131", 7421),
        (4, "0000:0c:00.4", "renderD132", 33602),
        (5, "0000:0c:00.5", "renderD133", 51277),
        (6, "0000:0c:00.6", "renderD134", 20148),
        (7, "0000:0c:00.7", "renderD135", 39966),
    ];
    for (row, (p, bdf, rn, id)) in rows.iter().zip(want) {
        assert_eq!(*row, (p, bdf, Some(rn), Some(id), Some(38)));
    }
    // Busy per partition from each partition's own xcp_metrics.
    let busy: Vec<f64> = g
        .partitions
        .iter()
        .map(|l| l.gfx_busy_percent.unwrap())
        .collect();
    assert_eq!(busy, [0.0, 98.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    let o = &g.partitions[1].provenance["gfx_busy_percent"];
    assert_eq!(o.source, SourceKind::Sysfs);
    assert!(
        o.detail
            .ends_with("devices/platform/amdgpu_xcp_0/xcp/xcp_metrics"),
        "{}",
        o.detail
    );
    assert_eq!(g.partitions[3].vram_total_bytes, Some(25_727_860_736));
    // XCDs and HBM domains from the product's geometry: XCP 5 owns XCD 5, NPS domain 2.
    assert_eq!(
        (
            g.partitions[5].xcds.clone(),
            g.partitions[5].memory_domains.clone()
        ),
        (vec![5], vec![2])
    );
    assert_eq!(g.partitions[0].umc_busy_percent, Some(9.0));
    // pid 4242: KFD VRAM on XCP1, 38 of 38 CUs; GTT from its render fds, 12 KiB elsewhere.
    let p = s.processes.iter().find(|p| p.pid == 4242).unwrap();
    assert!(p.holds_kfd);
    let u1 = p.gpus.iter().find(|u| u.gpu_id == 1).unwrap();
    assert_eq!(u1.vram_bytes, Some(17_188_257_792));
    assert_eq!(u1.gtt_bytes, Some(2052 << 10));
    assert_eq!(u1.cu_percent, Some(100.0));
    assert_eq!(u1.sdma_us, Some(4_812_331));
    assert!(
        p.gpus
            .iter()
            .filter(|u| u.gpu_id != 1)
            .all(|u| u.gtt_bytes == Some(12 << 10) && u.vram_bytes == Some(0))
    );
    // pid 5151: fds 5 and 6 are one client (57): counted once, on XCP2 (its render minor).
    let p = s.processes.iter().find(|p| p.pid == 5151).unwrap();
    assert_eq!(p.gpus.len(), 1);
    assert_eq!(p.gpus[0].gpu_id, 2);
    assert_eq!(p.gpus[0].vram_bytes, Some(512 << 20));
    assert_eq!(p.gpus[0].gtt_bytes, Some(64 << 20));
    assert_eq!(s.gpus[0].partitions[2].vram_used_bytes, Some(512 << 20));
    // One second later the decoder counter moved 500 ms: 50 %.
    std::fs::copy(
        dir.path().join("samples/proc-5151-fdinfo-5.t1"),
        dir.path().join("proc/5151/fdinfo/5"),
    )
    .unwrap();
    std::fs::copy(
        dir.path().join("samples/proc-5151-fdinfo-5.t1"),
        dir.path().join("proc/5151/fdinfo/6"),
    )
    .unwrap();
    let s = c.sample_at(2_000_000_000, 2_000);
    let p = s.processes.iter().find(|p| p.pid == 5151).unwrap();
    assert_eq!(p.gpus[0].engine_percent.get("dec"), Some(&50.0));
}

#[test]
fn spx_nps1_tree_older_driver() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture("mi300x-spx-nps1"), dir.path());
    let mut c = collector(dir.path());
    let s = c.sample_at(10_000_000_000, 10_000);
    let g = &s.gpus[0];
    assert_eq!(g.compute_partition.unwrap().to_string(), "SPX");
    // One logical GPU: the seven spare XCP render nodes have no KFD node and are not GPUs.
    assert_eq!(g.partitions.len(), 1);
    let l = &g.partitions[0];
    assert_eq!(
        (l.render_node.as_deref(), l.kfd_id, l.cu_count),
        (Some("renderD128"), Some(28415), Some(304))
    );
    // gpu_metrics v1.6, one partition of 8 XCCs: the mean of [97, 96, 95, 97, 96, 95, 96, 97].
    assert_eq!(l.gfx_busy_percent, Some(96.125));
    assert!(
        l.provenance["gfx_busy_percent"]
            .detail
            .ends_with("gpu_metrics xcp_stats[0]")
    );
    assert_eq!(
        (g.hotspot_celsius, g.mem_celsius, g.power_watts),
        (Some(78.0), Some(61.0), Some(684.0))
    );
    let p = s.processes.iter().find(|p| p.pid == 7001).unwrap();
    assert_eq!(p.gpus[0].vram_bytes, Some(51_539_607_552));
    assert_eq!(p.gpus[0].gtt_bytes, Some(6144 << 10));
    let cu = p.gpus[0].cu_percent.unwrap();
    assert!((cu - 97.37).abs() < 0.01, "{cu}");
    let p = s.processes.iter().find(|p| p.pid == 7002).unwrap();
    assert_eq!(p.gpus[0].vram_bytes, Some(262_144 << 10));
    // Two seconds later: 250 ms of decode = 12.5 %.
    std::fs::copy(
        dir.path().join("samples/proc-7002-fdinfo-5.t1"),
        dir.path().join("proc/7002/fdinfo/5"),
    )
    .unwrap();
    let s = c.sample_at(12_000_000_000, 12_000);
    let p = s.processes.iter().find(|p| p.pid == 7002).unwrap();
    assert_eq!(p.gpus[0].engine_percent.get("dec"), Some(&12.5));
}

#[test]
fn binary_tables_parse_to_the_layout_values() {
    let cpx = std::fs::read(fixture("mi300x-cpx-nps4").join(PCI).join("gpu_metrics")).unwrap();
    let m = gpu_metrics::parse(&cpx).unwrap();
    assert_eq!(m.revision, (1, 8));
    assert_eq!(
        (
            m.temperature_hotspot,
            m.temperature_mem,
            m.socket_power,
            m.gfx_activity,
            m.umc_activity
        ),
        (Some(52), Some(44), Some(312), Some(13), Some(9))
    );
    assert_eq!(m.gfxclk, [1423, 2100, 1750, 1423, 1423, 1423, 1423, 1423]);
    assert_eq!((m.uclk, m.num_partition), (Some(1300), Some(8)));
    let busy: Vec<u32> = m.xcp.iter().map(|x| x.gfx_busy_inst[0]).collect();
    assert_eq!(busy, [0, 98, 5, 0, 0, 0, 0, 0]);
    assert!(
        m.xcp.iter().all(|x| x.gfx_busy_inst.len() == 1),
        "0xFFFFFFFF slots dropped"
    );
    assert_eq!((m.xcp[2].vcn_busy[0], m.xcp[3].vcn_busy[0]), (41, 41));
    assert_eq!(m.xcp[1].gfx_busy_acc[0], 987_654_321);
    assert_eq!(m.xcp[0].jpeg_busy.len(), 8, "jpeg_busy[8..39] are 0xFFFF");
    let x = std::fs::read(
        fixture("mi300x-cpx-nps4").join("sys/devices/platform/amdgpu_xcp_1/xcp/xcp_metrics"),
    )
    .unwrap();
    assert_eq!(x.len(), 488);
    let x = gpu_metrics::parse_xcp(&x).unwrap();
    assert_eq!((x.gfx_busy_inst[0], x.vcn_busy[0]), (5, 41));
    let spx = std::fs::read(fixture("mi300x-spx-nps1").join(PCI).join("gpu_metrics")).unwrap();
    let m = gpu_metrics::parse(&spx).unwrap();
    assert_eq!(
        (m.revision, m.num_partition, m.gfx_activity),
        ((1, 6), Some(1), Some(96))
    );
    assert_eq!(m.xcp[0].gfx_busy_inst, [97, 96, 95, 97, 96, 95, 96, 97]);
    assert_eq!(m.xcp[0].vcn_busy, [12, 0, 0, 0]);
    // Truncated, or a revision with another size: an error naming it, never a panic.
    assert_eq!(
        gpu_metrics::parse(&cpx[..1000]),
        Err(MetricsError::Truncated {
            have: 1000,
            need: 3872
        })
    );
    let mut wrong = cpx.clone();
    wrong[3] = 6;
    assert_eq!(
        gpu_metrics::parse(&wrong).unwrap_err().to_string(),
        "revision 1.6 should be 1664 bytes, the header says 3872"
    );
    wrong[2] = 3;
    assert!(matches!(
        gpu_metrics::parse(&wrong),
        Err(MetricsError::Unknown { .. })
    ));
}

#[test]
fn a_broken_gpu_metrics_leaves_values_na_with_the_reason_and_falls_back_to_hwmon() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture("mi300x-cpx-nps4"), dir.path());
    let f = dir.path().join(PCI).join("gpu_metrics");
    let b = std::fs::read(&f).unwrap();
    std::fs::write(&f, &b[..100]).unwrap();
    let s = collector(dir.path()).sample_at(1, 1);
    let g = &s.gpus[0];
    assert_eq!(
        (g.hotspot_celsius, g.power_watts),
        (Some(52.0), Some(312.0)),
        "from hwmon"
    );
    assert!(g.provenance["power_watts"].detail.contains("hwmon3"));
    let src = &s.sources[0];
    assert!(
        src.error
            .as_deref()
            .unwrap()
            .contains("gpu_metrics: truncated: 100 bytes, the table needs 3872"),
        "{src:?}"
    );
    // Busy still comes from each partition's own xcp_metrics.
    assert_eq!(g.partitions[1].gfx_busy_percent, Some(98.0));
}

#[test]
fn auto_overlays_partition_busy_on_amd_smi_values() {
    let k = collector(&fixture("mi300x-cpx-nps4")).sample_at(1, 1);
    // amd-smi's view of the same node: secondaries have no busy value.
    let mut amd = k.clone();
    for l in &mut amd.gpus[0].partitions {
        l.gfx_busy_percent = None;
        l.provenance.clear();
    }
    amd.gpus[0].power_watts = Some(300.0);
    amd.sources.clear();
    merge(&mut amd, Reader::AmdSmi, &k);
    assert_eq!(amd.gpus[0].partitions[1].gfx_busy_percent, Some(98.0));
    assert_eq!(
        amd.gpus[0].partitions[1].provenance["gfx_busy_percent"].source,
        SourceKind::Sysfs
    );
    assert_eq!(amd.gpus[0].power_watts, Some(312.0));
}

#[test]
fn source_sysfs_needs_no_amd_smi() {
    let f = fixture("mi300x-cpx-nps4");
    let o = common::run(
        common::partop()
            .env("PATH", "/nonexistent")
            .args(["--source", "sysfs", "--sysfs-root"])
            .arg(f.join("sys"))
            .arg("--proc-root")
            .arg(f.join("proc"))
            .args(["snapshot"]),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("CPX/NPS4") && o.stdout.contains("renderD135"),
        "{}",
        o.stdout
    );
}

#[test]
fn holders_from_another_scan_are_used_instead_of_scanning_again() {
    // `--source auto`: the amd-smi path has scanned /proc; the kernel collector takes its list.
    let root = fixture("mi300x-cpx-nps4");
    let mut c = collector(&root);
    let all = partop::collect::holders::scan(&c.roots);
    c.external_holders = Some(all.into_iter().filter(|h| h.pid == 5151).collect());
    let s = c.sample_at(1, 1);
    let pids: Vec<u32> = s.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [5151]);
    assert_eq!(s.processes[0].gpus[0].vram_bytes, Some(512 << 20));
}

#[test]
fn identity_and_counters_come_with_the_first_sample() {
    // The first sample carries the serial (amd-smi's asic_serial is the driver's unique_id,
    // written 0x%016llX), so `partop serve` never exports a series without it; per-XCC busy and
    // gpu_metrics' counters come with it; files the fixture lacks (vbios_version, RAS,
    // max_link_speed) are N/A, not invented.
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture("mi300x-spx-nps1"), dir.path());
    let s = collector(dir.path()).sample_at(10_000_000_000, 10_000);
    let g = &s.gpus[0];
    assert_eq!(g.serial.as_deref(), Some("0x6D9A2B1C0E4F3A21"));
    assert!(g.provenance["serial"].detail.ends_with("unique_id"));
    assert_eq!(
        g.partitions[0].xcc_busy_percent,
        vec![97.0, 96.0, 95.0, 97.0, 96.0, 95.0, 96.0, 97.0]
    );
    assert_eq!(g.gfx_clocks_mhz.len(), 8);
    assert_eq!(
        (
            &g.vbios_version,
            g.counters.ecc_correctable,
            g.counters.pcie_max_speed_gts
        ),
        (&None, None, None)
    );
    // A unique_id that is not one 64-bit hex number is no identity.
    let uid = dir.path().join(PCI).join("unique_id");
    for (bad, n) in [
        ("", 0),
        ("zz\n", 1),
        ("123456789abcdef01\n", 2),
        ("-1\n", 3),
    ] {
        std::fs::write(&uid, bad).unwrap();
        let s = collector(dir.path()).sample_at(10_000_000_000, 10_000);
        assert_eq!(s.gpus[0].serial, None, "case {n}: {bad:?}");
    }
    // RAS counts summed over the blocks, with the driver's `ue: N` / `ce: N` lines.
    std::fs::create_dir_all(dir.path().join(PCI).join("ras")).unwrap();
    std::fs::write(
        dir.path().join(PCI).join("ras/umc_err_count"),
        "ue: 1\nce: 5\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join(PCI).join("ras/gfx_err_count"),
        "ue: 0\nce: 2\nde: 0\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join(PCI).join("max_link_speed"),
        "32.0 GT/s PCIe\n",
    )
    .unwrap();
    let s = collector(dir.path()).sample_at(10_000_000_000, 10_000);
    let c = &s.gpus[0].counters;
    assert_eq!(
        (c.ecc_correctable, c.ecc_uncorrectable, c.pcie_max_speed_gts),
        (Some(7), Some(1), Some(32.0))
    );
}

#[test]
fn gpu_metrics_counters_are_read_at_the_kernels_offsets() {
    // Both fixture tables were laid out from the kernel's structs with gcc's offsets (v1.6 and
    // v1.8: the counters move by 8 bytes between them): each counter reads back as written.
    for (tree, rev, energy, bw, xgmi_r0, xgmi_w7) in [
        (
            "mi300x-spx-nps1",
            (1, 6),
            0xe5_f4c8_f3ca_u64,
            11,
            5000,
            36000,
        ),
        ("mi300x-cpx-nps4", (1, 8), 0x1c_be99_1a14_u64, 3, 1000, 7200),
    ] {
        let b = std::fs::read(fixture(tree).join(PCI).join("gpu_metrics")).unwrap();
        let m = partop::collect::sysfs::gpu_metrics::parse(&b).unwrap();
        assert_eq!(m.revision, rev, "{tree}");
        let io = &m.io;
        assert_eq!(io.energy_acc, Some(energy), "{tree}");
        assert_eq!(
            (io.pcie_width, io.pcie_speed),
            (Some(16), Some(320)),
            "{tree}"
        );
        assert_eq!(io.pcie_bandwidth_inst, Some(bw), "{tree}");
        assert_eq!(
            (io.pcie_recovery, io.pcie_replay, io.pcie_replay_rollover),
            (Some(0), Some(0), Some(0)),
            "{tree}"
        );
        assert_eq!(
            (io.pcie_nak_sent, io.pcie_nak_received),
            (Some(0), Some(0)),
            "{tree}"
        );
        assert_eq!(io.xgmi_read_kb.len(), 8, "{tree}");
        assert_eq!(io.xgmi_read_kb[0], (0, xgmi_r0), "{tree}");
        assert_eq!(io.xgmi_write_kb[7], (7, xgmi_w7), "{tree}");
    }
}
