//! The amd-smi parser and assembler on real and source-built outputs (tests/fixtures/amd-smi,
//! copied from shared/fixtures; SOURCES.md says where each comes from).
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

use partop::collect::amdsmi::assemble::{StaticData, assemble};
use partop::collect::amdsmi::error::AmdSmiError;
use partop::collect::amdsmi::json::{parse_gpu_array, parse_object};
use partop::collect::amdsmi::schema::{
    ListEntry, MetricEntry, PartitionDoc, ProcessEntry, StaticEntry, Vram,
};
use partop::domain::provenance::{Missing, SourceKind};
use partop::domain::{ComputeMode, MemoryMode};
use std::path::Path;

fn fx(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/amd-smi")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn list(name: &str) -> Vec<ListEntry> {
    parse_gpu_array(name, &fx(name)).unwrap().0
}
fn statics(name: &str) -> Vec<StaticEntry> {
    parse_gpu_array(name, &fx(name)).unwrap().0
}
fn metric(name: &str) -> Vec<MetricEntry> {
    parse_gpu_array(name, &fx(name)).unwrap().0
}
fn process(name: &str) -> Vec<ProcessEntry> {
    parse_gpu_array(name, &fx(name)).unwrap().0
}

/// Every JSON fixture parses with the type of the command that produced it.
#[test]
fn every_json_fixture_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/amd-smi");
    let mut n = 0;
    for f in std::fs::read_dir(&dir).unwrap() {
        let name = f.unwrap().file_name().to_string_lossy().to_string();
        if !name.ends_with(".json") {
            continue;
        }
        let text = fx(&name);
        let ok = if name.contains("error-json") {
            matches!(
                parse_gpu_array::<ListEntry>(&name, &text),
                Err(AmdSmiError::Cli { .. })
            )
        } else if name.contains("-list") {
            parse_gpu_array::<ListEntry>(&name, &text).is_ok()
        } else if name.contains("-static-vram") {
            serde_json::from_str::<Vram>(&text).is_ok()
        } else if name.contains("-static") {
            parse_gpu_array::<StaticEntry>(&name, &text).is_ok()
        } else if name.contains("-metric") {
            parse_gpu_array::<MetricEntry>(&name, &text).is_ok()
        } else if name.contains("-process") {
            parse_gpu_array::<ProcessEntry>(&name, &text).is_ok()
        } else if name.contains("-partition") {
            parse_object::<PartitionDoc>(&name, &text).is_ok()
        } else if name.contains("-monitor") {
            parse_gpu_array::<serde_json::Value>(&name, &text).is_ok()
        } else {
            panic!("unclassified fixture {name}")
        };
        assert!(ok, "{name} did not parse as expected");
        n += 1;
    }
    assert!(n >= 16, "only {n} JSON fixtures found");
}

/// JSON embedded in verbatim text captures (after the `#`/`$` lines) parses too.
#[test]
fn json_inside_verbatim_captures_parses() {
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with('$'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    // This capture was truncated in its source: the error says so, with line and column.
    let text = strip(&fx("v-metric-usage-json-w7700-rocm6.3or6.4-issue.txt"));
    let e = parse_gpu_array::<MetricEntry>("amd-smi metric -u --json", &text).unwrap_err();
    assert!(matches!(e, AmdSmiError::NotJson { .. }), "{e:?}");
    assert!(
        e.to_string().contains("EOF while parsing") && e.to_string().contains("line 28"),
        "{e}"
    );
    let p = fx("v-process-json-rocm6.2.0-changelog.json");
    let (procs, _) = parse_gpu_array::<ProcessEntry>("process", &p).unwrap();
    assert_eq!(procs[0].process_list.len(), 2);
}

fn dpx_node() -> (
    Vec<partop::domain::PhysicalGpu>,
    Vec<partop::domain::Process>,
) {
    let st = StaticData {
        list: list("synth-list-e-json-16gpu-dpx-nps2-rocm7.0.json"),
        statics: statics("synth-static-a-b-l-v-p-json-16gpu-dpx-nps2-rocm7.0.json"),
        partition: Some(
            parse_object("p", &fx("synth-partition-json-16gpu-dpx-nps2-rocm7.0.json"))
                .unwrap()
                .0,
        ),
        at_ms: 1000,
    };
    let m = metric("synth-metric-u-p-t-e-m-json-16gpu-dpx-nps2-rocm7.0.json");
    let p = process("synth-process-json-16gpu-dpx-rocm7.0.json");
    assemble(&st, Some((&m, 2000)), Some((&p, 2000)))
}

#[test]
fn rocm7_dpx_nps2_node() {
    let (gpus, procs) = dpx_node();
    assert_eq!(gpus.len(), 8);
    assert_eq!(gpus.iter().map(|g| g.partitions.len()).sum::<usize>(), 16);
    for g in &gpus {
        assert_eq!(g.compute_partition, Some(ComputeMode::Dpx), "{}", g.bdf);
        assert_eq!(g.memory_partition, Some(MemoryMode::Nps2));
        assert_eq!(
            g.memory_caps,
            vec![MemoryMode::Nps1, MemoryMode::Nps2, MemoryMode::Nps4]
        );
        assert_eq!(g.product_key.as_deref(), Some("mi300x"));
    }
    let g0 = &gpus[0];
    assert_eq!(g0.bdf, "0000:05:00");
    assert_eq!(g0.hbm_bytes, Some(196_592 << 20));
    assert_eq!(g0.power_watts, Some(480.0));
    assert_eq!(g0.hotspot_celsius, Some(55.0));
    assert_eq!(g0.power_cap_watts, Some(750.0));
    let (p0, p1) = (&g0.partitions[0], &g0.partitions[1]);
    assert_eq!(
        (p0.gpu_id, p0.partition_id, p1.gpu_id, p1.partition_id),
        (0, 0, 1, 1)
    );
    assert_eq!(p1.bdf, "0000:05:00.1");
    assert_eq!(p1.render_node.as_deref(), Some("renderD129"));
    assert_eq!(p0.xcds, vec![0, 1, 2, 3]);
    assert_eq!(p1.xcds, vec![4, 5, 6, 7]);
    assert_eq!(p1.cu_count, Some(152));
    assert_eq!(p1.vram_total_bytes, Some(98_296 << 20));
    assert_eq!(p1.vram_used_bytes, Some(88_000 << 20));
    // The primary reports the whole device as its total; its capacity is its own share.
    assert_eq!(p0.vram_total_bytes, Some(196_592 << 20));
    assert_eq!(p0.vram_capacity_bytes(), Some(98_296 << 20));
    // The secondary's usage is N/A: its busy comes from the primary's xcp_1 list.
    assert_eq!(p1.gfx_busy_percent, Some(60.0));
    assert_eq!(
        p1.provenance["gfx_busy_percent"].source,
        SourceKind::Derived
    );
    assert!(p1.provenance["gfx_busy_percent"].detail.contains("xcp_1"));
    assert_eq!(
        p1.provenance["umc_busy_percent"].missing,
        Some(Missing::SecondaryPartition)
    );
    assert_eq!(p0.umc_busy_percent, Some(20.0));
    // Profiles come from the device (partition -a rows).
    assert_eq!(g0.provenance["profiles"].source, SourceKind::AmdSmi);
    assert!(
        g0.profiles
            .iter()
            .any(|p| p.compute == ComputeMode::Cpx && p.memory.contains(&MemoryMode::Nps4))
    );

    let p = procs.iter().find(|p| p.pid == 90_101).unwrap();
    assert_eq!(p.name.as_deref(), Some("pt_main_thread"));
    assert_eq!(p.gpus.len(), 1);
    assert_eq!(p.gpus[0].gpu_id, 2);
    assert_eq!(p.gpus[0].vram_bytes, Some(64_639_257_804));
    assert_eq!(p.gpus[0].gtt_bytes, Some(2_134_016));
    assert_eq!(p.gpus[0].cu_occupancy, Some(96));
    let pct = p.gpus[0].cu_percent.unwrap();
    assert!((pct - 63.157).abs() < 0.01, "{pct}");
}

#[test]
fn rocm64_spx_node_and_missing_cu_occupancy() {
    let st = StaticData {
        list: list("synth-list-json-8xmi300x-spx-nps1-rocm6.4.json"),
        statics: statics("synth-static-a-b-v-p-json-8xmi300x-spx-nps1-rocm6.4.json"),
        partition: None,
        at_ms: 1,
    };
    let m = metric("synth-metric-u-p-t-e-m-json-8xmi300x-spx-rocm6.4.json");
    let p = process("synth-process-json-8xmi300x-spx-rocm6.4.0.json");
    let (gpus, procs) = assemble(&st, Some((&m, 2)), Some((&p, 2)));
    assert_eq!(gpus.len(), 8);
    assert!(gpus.iter().all(|g| g.partitions.len() == 1));
    assert!(
        gpus.iter()
            .all(|g| g.compute_partition == Some(ComputeMode::Spx)
                && g.memory_partition == Some(MemoryMode::Nps1))
    );
    let g = &gpus[0];
    assert_eq!(g.partitions[0].cu_count, Some(304));
    assert_eq!(g.partitions[0].vram_capacity_bytes(), Some(196_592 << 20));
    // Without `partition -a` the offered profiles come from the product table, and say so.
    assert_eq!(g.provenance["profiles"].source, SourceKind::ProductTable);
    let pr = procs.iter().find(|p| p.pid == 71_200).unwrap();
    assert_eq!(pr.gpus[0].vram_bytes, Some(184_790_967_910));
    assert_eq!(pr.gpus[0].cu_occupancy, None);
    assert_eq!(
        pr.provenance["gpu0.cu_occupancy"].missing,
        Some(Missing::NotReported)
    );
}

#[test]
fn cpx_64_logical_gpus_from_list_alone() {
    let st = StaticData {
        list: list("synth-list-json-64gpu-cpx-nps4-rocm7.0.json"),
        ..StaticData::default()
    };
    let (gpus, _) = assemble(&st, None, None);
    assert_eq!(gpus.len(), 8);
    assert!(gpus.iter().all(|g| g.partitions.len() == 8));
    assert_eq!(gpus[1].partitions[1].gpu_id, 9);
    assert_eq!(gpus[1].partitions[1].bdf, "0000:26:00.1");
    // Nothing says the modes: they are missing, with a reason, not guessed.
    assert_eq!(gpus[0].compute_partition, None);
    assert_eq!(
        gpus[0].provenance["compute_partition"].missing,
        Some(Missing::NotAvailable)
    );
}

#[test]
fn spx_modes_from_partition_current() {
    let doc: PartitionDoc = parse_object(
        "p",
        &fx("synth-partition-c-m-json-8xmi300x-spx-nps1-rocm7.0.json"),
    )
    .unwrap()
    .0;
    assert_eq!(doc.current_partition.len(), 8);
    assert_eq!(doc.current_partition[0].accelerator_type.get(), Some("SPX"));
    assert_eq!(doc.current_partition[0].partition_id.0, Some(0));
}

#[test]
fn bad_input_names_command_and_path() {
    let e = parse_gpu_array::<MetricEntry>(
        "amd-smi metric",
        "[{\"gpu\": 0, \"usage\": {\"gfx_activity\": true}}]",
    )
    .unwrap_err();
    match e {
        AmdSmiError::Shape { command, path, .. } => {
            assert_eq!(command, "amd-smi metric");
            assert_eq!(path, "[0].usage.gfx_activity");
        }
        other => panic!("{other:?}"),
    }
    let e = parse_gpu_array::<MetricEntry>("amd-smi metric", "Traceback: something broke\n")
        .unwrap_err();
    assert!(matches!(e, AmdSmiError::NotJson { .. }), "{e:?}");
    assert!(e.to_string().contains("something broke"));
    let e = parse_gpu_array::<ListEntry>("amd-smi list", "WARNING: User is missing the following required groups: render, video. Please add user to these groups.\n").unwrap_err();
    assert!(matches!(e, AmdSmiError::MissingGroups { .. }));
    assert!(e.to_string().contains("usermod -aG video,render"));
    let e = parse_gpu_array::<ListEntry>(
        "amd-smi set",
        "GPU: 0\n    MEMORY_PARTITION: [AMDSMI_STATUS_BUSY] Unable to set\n",
    )
    .unwrap_err();
    assert!(matches!(e, AmdSmiError::Status { .. }), "{e:?}");
    // A group warning before valid JSON is kept as a warning, and the data parses.
    let (l, ex) = parse_gpu_array::<ListEntry>("amd-smi list", "WARNING: User is missing the following required groups: render, video. Please add user to these groups.\n[{\"gpu\": 0, \"bdf\": \"N/A\", \"uuid\": \"N/A\"}]\n").unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(ex.preamble.len(), 1);
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_text(s in ".{0,400}") {
            let _ = parse_gpu_array::<MetricEntry>("m", &s);
            let _ = parse_gpu_array::<ProcessEntry>("p", &s);
            let _ = parse_object::<PartitionDoc>("c", &s);
        }

        #[test]
        fn truncated_and_mutated_fixtures(cut in 0usize..20_000, flip in 0usize..20_000, byte in any::<u8>()) {
            for name in ["synth-metric-u-p-t-e-m-json-16gpu-dpx-nps2-rocm7.0.json", "synth-process-json-16gpu-dpx-rocm7.0.json", "synth-static-a-b-l-v-p-json-16gpu-dpx-nps2-rocm7.0.json"] {
                let mut b = fx(name).into_bytes();
                b.truncate(cut.min(b.len()));
                if !b.is_empty() {
                    let i = flip % b.len();
                    b[i] = byte;
                }
                let s = String::from_utf8_lossy(&b);
                let _ = parse_gpu_array::<MetricEntry>("m", &s);
                let _ = parse_gpu_array::<ProcessEntry>("p", &s);
                let _ = parse_gpu_array::<StaticEntry>("s", &s);
            }
        }
    }
}
