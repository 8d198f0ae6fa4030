//! The repartition planner on recorded nodes (real parser output): staging rules, hive-wide
//! memory changes, layouts and renumbering, what must stop, the steps per ROCm family, the
//! fingerprint.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::nodes::recorded;
use partop::domain::plan::{Draft, PlanError, Reload, plan};
use partop::domain::{ComputeMode, MemoryMode};

fn draft(gpus: &[&str], c: Option<ComputeMode>, m: Option<MemoryMode>) -> Draft {
    Draft {
        gpus: gpus.iter().map(|s| (*s).to_string()).collect(),
        compute: c,
        memory: m,
    }
}

fn keys(p: &partop::domain::plan::Plan) -> Vec<&str> {
    p.steps.iter().map(|s| s.key.as_str()).collect()
}

#[test]
fn a_memory_change_is_hive_wide_and_reloads() {
    let snap = recorded("spx-nps1-one-model");
    let p = plan(
        &snap,
        &draft(
            &["0000:05:00"],
            Some(ComputeMode::Dpx),
            Some(MemoryMode::Nps2),
        ),
        Reload::ResetReload,
        120,
        10,
    )
    .unwrap();
    assert_eq!(p.changes.len(), 8);
    assert_eq!(p.changes.iter().filter(|c| c.hive_only).count(), 7);
    assert!(p.warnings.iter().any(|w| w.contains("hive-wide")));
    assert_eq!((p.before.len(), p.after.len()), (8, 16));
    assert_eq!(p.after[1].bdf, "0000:05:00.1");
    assert_eq!((p.after[1].cus, p.after[1].vram_mb), (152, 98_296));
    assert_eq!(p.stops.len(), 1, "the model server must stop");
    assert_eq!(
        keys(&p),
        vec![
            "stop",
            "wait_idle",
            "set_memory",
            "reload",
            "wait_gpus",
            "verify",
            "relaunch"
        ],
        "DPX is the default after reloading into NPS2"
    );
    assert_eq!(p.steps[2].commands, vec!["amd-smi set -M NPS2"]);
    assert_eq!(p.steps[3].commands, vec!["amd-smi reset -r"]);
    assert_eq!(p.downtime_secs, 135);
}

#[test]
fn the_reload_method_follows_the_amd_smi_version() {
    let snap = recorded("spx-nps1-one-model");
    let d = draft(&[], None, Some(MemoryMode::Nps4));
    let six = plan(&snap, &d, Reload::InsideSetMemory, 120, 10).unwrap();
    assert!(
        six.steps
            .iter()
            .find(|s| s.key == "reload")
            .unwrap()
            .commands
            .is_empty(),
        "6.x reloads inside set -M"
    );
    let late = plan(&snap, &d, Reload::Modprobe, 120, 10).unwrap();
    assert_eq!(
        late.steps
            .iter()
            .find(|s| s.key == "reload")
            .unwrap()
            .commands,
        vec!["modprobe -r amdgpu && modprobe amdgpu"]
    );
    assert_eq!(late.after.len(), 64, "NPS4 brings MI300X to CPX");
}

#[test]
fn compute_returns_to_default_after_a_reload_and_is_set_again() {
    let snap = recorded("cpx-nps4-small-models");
    let p = plan(
        &snap,
        &draft(&[], Some(ComputeMode::Dpx), Some(MemoryMode::Nps1)),
        Reload::ResetReload,
        120,
        10,
    )
    .unwrap();
    let set = p.steps.iter().find(|s| s.key == "set_compute").unwrap();
    assert_eq!(
        set.commands,
        vec!["amd-smi set -g 0 1 2 3 4 5 6 7 -C DPX"],
        "primaries, by their index when the command runs: after the reload every GPU is back in \
         SPX (the NPS1 default), one logical GPU each; the confirmed command is the one run"
    );
    assert_eq!(
        set.argv,
        vec![
            [
                "set", "-g", "0", "1", "2", "3", "4", "5", "6", "7", "-C", "DPX"
            ]
            .map(String::from)
            .to_vec()
        ]
    );
    assert_eq!(
        set.bdfs.len(),
        8,
        "each index is checked against its BDF before running"
    );
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("returns to the default") && w.contains("every GPU"))
    );
    assert_eq!(
        p.stops.len(),
        snap.processes.len(),
        "a reload stops every GPU process"
    );
}

#[test]
fn a_compute_only_change_touches_one_gpu() {
    let snap = recorded("spx-nps1-one-model");
    let p = plan(
        &snap,
        &draft(&["0000:65:00"], Some(ComputeMode::Cpx), None),
        Reload::ResetReload,
        120,
        10,
    )
    .unwrap();
    assert_eq!(p.changes.len(), 1);
    assert_eq!(
        keys(&p),
        vec!["wait_idle", "set_compute", "wait_gpus", "verify"],
        "nothing runs on GPU 3: nothing to stop, no reload; the new partitions are waited for before the read-back"
    );
    assert_eq!(p.steps[2].count, Some(15));
    assert_eq!(p.steps[1].commands, vec!["amd-smi set -g 3 -C CPX"]);
    assert_eq!(p.after.len(), 15);
    assert_eq!(
        p.after[11].bdf, "0000:85:00.0",
        "GPU 4 moves from index 4 to 11"
    );
    assert!(p.warnings.iter().any(|w| w.contains("renumbered")));
    assert_eq!(p.downtime_secs, 5);
}

#[test]
fn combinations_the_device_does_not_offer_are_refused_at_staging() {
    let snap = recorded("dpx-nps2-two-models");
    let e = plan(
        &snap,
        &draft(&["0000:26:00"], Some(ComputeMode::Cpx), None),
        Reload::ResetReload,
        120,
        10,
    )
    .unwrap_err();
    assert!(
        matches!(
            &e[0],
            PlanError::NotOffered {
                compute: ComputeMode::Cpx,
                memory: MemoryMode::Nps2,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e[0].to_string().contains("CPX:NPS1/NPS4")
            && e[0].to_string().contains("amd-smi partition -a"),
        "{}",
        e[0]
    );
    let e = plan(
        &snap,
        &draft(&["0000:99:00"], Some(ComputeMode::Spx), None),
        Reload::ResetReload,
        120,
        10,
    )
    .unwrap_err();
    assert_eq!(e[0], PlanError::UnknownGpu("0000:99:00".into()));
    let e = plan(
        &snap,
        &draft(&[], Some(ComputeMode::Dpx), Some(MemoryMode::Nps2)),
        Reload::ResetReload,
        120,
        10,
    )
    .unwrap_err();
    assert_eq!(e, vec![PlanError::NoChange]);
}

#[test]
fn a_dpx_nps1_only_firmware_refuses_nps2() {
    let mut snap = recorded("dpx-nps2-two-models");
    for g in &mut snap.gpus {
        g.memory_partition = Some(MemoryMode::Nps1);
        for p in &mut g.profiles {
            if p.compute == ComputeMode::Dpx {
                p.memory = vec![MemoryMode::Nps1];
            }
        }
    }
    let e = plan(
        &snap,
        &draft(&[], Some(ComputeMode::Dpx), Some(MemoryMode::Nps2)),
        Reload::ResetReload,
        120,
        10,
    )
    .unwrap_err();
    assert!(matches!(e[0], PlanError::NotOffered { .. }));
    let p = plan(
        &snap,
        &draft(&["0000:05:00"], Some(ComputeMode::Spx), None),
        Reload::ResetReload,
        120,
        10,
    )
    .unwrap();
    assert!(
        !p.warnings.iter().any(|w| w.contains("DPX with NPS1 only")),
        "SPX is unaffected"
    );
    let p = plan(
        &snap,
        &draft(&[], Some(ComputeMode::Cpx), None),
        Reload::ResetReload,
        120,
        10,
    )
    .unwrap();
    assert!(p.changes.iter().all(|c| c.to.0 == ComputeMode::Cpx));
}

#[test]
fn the_fingerprint_changes_when_the_node_does() {
    let snap = recorded("dpx-nps2-two-models");
    let d = draft(&[], Some(ComputeMode::Cpx), Some(MemoryMode::Nps4));
    let a = plan(&snap, &d, Reload::ResetReload, 120, 10).unwrap();
    assert_eq!(
        a.fingerprint,
        plan(&snap, &d, Reload::ResetReload, 120, 10)
            .unwrap()
            .fingerprint,
        "deterministic"
    );
    let mut more = snap.clone();
    let mut p = more.processes[0].clone();
    p.pid = 99_999;
    more.processes.push(p);
    let b = plan(&more, &d, Reload::ResetReload, 120, 10).unwrap();
    assert_ne!(
        a.fingerprint, b.fingerprint,
        "a new process must invalidate a confirmation"
    );
}

#[test]
fn partop_plan_on_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let o = common::run(
        common::partop().env("XDG_STATE_HOME", dir.path()).args([
            "plan",
            "--sim",
            "spx-nps1-one-model",
            "--memory",
            "NPS4",
            "--json",
        ]),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["after"].as_array().unwrap().len(), 64);
    assert!(v["fingerprint"].as_str().unwrap().len() == 16);
    let o = common::run(
        common::partop().env("XDG_STATE_HOME", dir.path()).args([
            "plan",
            "--sim",
            "dpx-nps2-two-models",
            "--gpu",
            "0000:26:00",
            "--compute",
            "CPX",
        ]),
        "",
    );
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("does not offer CPX/NPS2"), "{}", o.stderr);
}

#[test]
fn a_node_listing_no_gpu_is_not_nothing_to_change() {
    let e = plan(
        &partop::domain::Snapshot::default(),
        &draft(&[], None, Some(MemoryMode::Nps2)),
        Reload::ResetReload,
        120,
        10,
    )
    .unwrap_err();
    assert_eq!(e, vec![partop::domain::plan::PlanError::NoGpus]);
    assert!(e[0].to_string().contains("driver reload in progress"));
}

/// A wait for the logical GPUs that fails says what the node shows and a hint that fits the
/// case, never one text for every failure (issue 23): the driver not back, a memory mode the
/// reload did not take, CPX partitions missing, and modes not what the step waits for; each
/// said "after Ns" or, when the count had settled, "unchanged for the last part of Ns"
/// (4 cases x 2 = 8).
#[test]
fn a_failed_wait_gives_the_hint_that_fits() {
    use partop::exec::apply::wait_failure;
    use std::time::Duration;
    let snap = recorded("spx-nps1-one-model");
    let all: Vec<&str> = snap.gpus.iter().map(|g| g.bdf.as_str()).collect();
    let to = |c, m| plan(&snap, &draft(&all, c, m), Reload::ResetReload, 120, 10).unwrap();
    let nps2 = to(Some(ComputeMode::Dpx), Some(MemoryMode::Nps2));
    let cpx = to(Some(ComputeMode::Cpx), None);
    let dpx = to(Some(ComputeMode::Dpx), None);
    let cases = [
        (&nps2, None, "the driver has not come back"),
        (&nps2, Some(8), "the memory mode did not take effect"),
        (&cpx, Some(60), "another DRM driver (ast)"),
        (
            &dpx,
            Some(15),
            "the modes read back are not what this step waits for",
        ),
    ];
    let mut n = 0;
    for (p, last, hint_has) in cases {
        for settled in [false, true] {
            let want = p.after.len();
            let (message, hint) =
                wait_failure(p, &snap, want, last, Duration::from_secs(42), settled);
            assert!(hint.contains(hint_has), "{last:?}: {hint}");
            assert!(
                message.contains(&format!("expected {want} logical GPUs")),
                "{message}"
            );
            assert!(message.contains("0000:05:00 SPX/NPS1"), "{message}");
            let how = if settled {
                "unchanged for the last part of 42s"
            } else {
                "after 42s"
            };
            assert!(message.contains(how), "{message}");
            n += 1;
        }
    }
    assert_eq!(n, 8);
}
