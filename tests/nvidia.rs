//! NVIDIA: the real H200 capture parsed and assembled into the same snapshot as AMD nodes; the
//! recorded-NVML path (`--nvidia-replay`); MIG plans applied through the fake nvidia-smi as a
//! real subprocess (enable + create, relayout, disable, a holder that ignores SIGTERM, a plan
//! invalidated by a new process, dry run).
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::serve::{dcgm_names, replay_served, replayed_snapshot, scrape_once};
use common::{Out, partop, run};
use partop::collect::nvidia::{NvNode, assemble, smi};
use std::path::{Path, PathBuf};

fn capture() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/nvidia-smi/h200-one-process-q.xml"),
    )
    .unwrap()
}

#[test]
fn the_real_h200_capture() {
    let n = smi::parse(&capture()).unwrap();
    assert_eq!(n.driver.as_deref(), Some("580.159.04"));
    let g = &n.gpus[0];
    assert_eq!(g.bdf, "0000:00:06.0");
    assert_eq!(g.name, "NVIDIA H200");
    assert_eq!(
        (g.mem_total_mib, g.mem_used_mib),
        (Some(143_771), Some(5297))
    );
    assert_eq!((g.power_w, g.power_limit_w), (Some(126.58), Some(700.0)));
    assert_eq!((g.temp_c, g.mem_temp_c), (Some(43.0), Some(39.0)));
    assert_eq!((g.sm_clock_mhz, g.mem_clock_mhz), (Some(1980), Some(3201)));
    assert_eq!((g.mig_enabled, g.mig_pending), (Some(false), Some(false)));
    assert_eq!(g.processes.len(), 1);
    assert_eq!(g.processes[0].pid, 402);
    assert_eq!(g.processes[0].used_mib, Some(5288));
    let (gpus, procs) = assemble(&n, 1);
    assert_eq!(gpus[0].bdf, "0000:00:06");
    assert_eq!(gpus[0].modes_label(), "MIG off");
    assert_eq!(
        (gpus[0].gfx_clock_mhz, gpus[0].mem_clock_mhz),
        (Some(1980), Some(3201))
    );
    let mig = gpus[0].mig.as_ref().unwrap();
    assert_eq!(
        mig.profiles.len(),
        7,
        "H200 profiles from the table while MIG is off"
    );
    assert!(mig.profiles_source.contains("table"));
    assert_eq!(gpus[0].partitions[0].vram_used_bytes, Some(5297 << 20));
    assert_eq!(procs[0].gpus[0].vram_bytes, Some(5288 << 20));
}

#[test]
fn a_recorded_node_replays_without_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("rec.json");
    let n: NvNode = smi::parse(&capture()).unwrap();
    std::fs::write(&f, serde_json::to_string(&n).unwrap()).unwrap();
    let s = replayed_snapshot(&f);
    assert_eq!(s.gpus[0].product, "NVIDIA H200");
    assert_eq!(s.processes[0].pid, 402);
    assert_eq!(s.sources[0].name, "nvidia");
    let o = run(
        partop()
            .arg("--nvidia-replay")
            .arg(dir.path())
            .arg("snapshot"),
        "",
    );
    assert_ne!(o.code, 0);
}

struct Fake {
    dir: tempfile::TempDir,
    state: PathBuf,
    smi: PathBuf,
}

impl Fake {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("nv.json");
        assert_eq!(
            run(
                partop().args(["sim", "nvidia-init", "--state"]).arg(&state),
                ""
            )
            .code,
            0
        );
        let smi = dir.path().join("nvidia-smi");
        std::fs::write(
            &smi,
            format!(
                "#!/bin/sh\nexec {} sim nvidia-smi --state {} \"$@\"\n",
                env!("CARGO_BIN_EXE_partop"),
                state.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
        Self { dir, state, smi }
    }

    fn partop(&self) -> std::process::Command {
        let mut c = partop();
        c.env("XDG_STATE_HOME", self.dir.path().join("xdg"))
            .env("PARTOP_LOCK", self.dir.path().join("node.lock"))
            .args(["--source", "nvidia", "--nvidia-smi"])
            .arg(&self.smi);
        c
    }

    fn plan(&self, instances: &str) -> (Out, PathBuf) {
        let o = run(
            self.partop()
                .args(["mig", "plan", "--instances", instances, "--json"]),
            "",
        );
        let p = self.dir.path().join("plan.json");
        std::fs::write(&p, &o.stdout).unwrap();
        (o, p)
    }

    fn apply(&self, p: &Path, flags: &str) -> Out {
        run(
            self.partop()
                .args(["mig", "apply"])
                .arg(p)
                .args(flags.split_whitespace()),
            "",
        )
    }

    fn attach(&self, child: &std::process::Child) {
        let o = run(
            partop()
                .args(["sim", "nvidia-attach", "--state"])
                .arg(&self.state)
                .args(["--pid", &child.id().to_string()]),
            "",
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
    }

    fn instances(&self) -> Vec<String> {
        let o = run(self.partop().args(["snapshot", "--json"]), "");
        let s: partop::domain::Snapshot = serde_json::from_str(&o.stdout).unwrap();
        // The layout, as a sorted list (the order devices are listed in is the tool's).
        let mut v: Vec<String> = s.gpus[0]
            .partitions
            .iter()
            .filter_map(|l| l.profile.clone())
            .collect();
        v.sort();
        v
    }
}

#[test]
fn mig_enable_create_relayout_disable_through_the_fake_nvidia_smi() {
    let f = Fake::new();
    let mut job = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    f.attach(&job);
    let (o, p) = f.plan("2x1g.18gb,3g.71gb");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // Dry run: every command, nothing changed.
    let o = f.apply(&p, "--dry-run");
    assert!(
        o.stdout
            .contains(&format!("$ {} mig -i 0 -cgi 9:0 -C", f.smi.display())),
        "{}",
        o.stdout
    );
    assert!(f.instances().is_empty());
    let o = f.apply(&p, "--yes --grace 3");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout
            .contains("ok: MIG on with exactly 1g.18gb, 1g.18gb, 3g.71gb"),
        "{}",
        o.stdout
    );
    let _ = job.wait();
    assert_eq!(f.instances(), ["1g.18gb", "1g.18gb", "3g.71gb"]);
    // Relayout: the old instances are destroyed first.
    let (_, p) = f.plan("7g.141gb");
    let o = f.apply(&p, "--yes");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(f.instances(), ["7g.141gb"]);
    // Disable.
    let (_, p) = f.plan("none");
    let o = f.apply(&p, "--yes");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let o = run(f.partop().arg("snapshot"), "");
    assert!(o.stdout.contains("MIG off"), "{}", o.stdout);
    // Journaled.
    let j = partop::exec::journal::read(&f.dir.path().join("xdg/partop/journal.jsonl"))
        .unwrap()
        .0;
    assert_eq!(j.iter().filter(|e| e.action == "mig.done").count(), 3);
}

#[test]
fn impossible_layouts_are_refused_at_planning() {
    let f = Fake::new();
    // Refusals go to stderr: with --json, stdout holds a plan or nothing.
    let (o, _) = f.plan("3g.71gb,3g.71gb,1g.18gb");
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("9 of 8 memory slices"), "{}", o.stderr);
    assert_eq!(o.stdout, "");
    let (o, _) = f.plan("2g.20gb");
    assert!(
        o.stderr.contains("does not offer profile 2g.20gb"),
        "{}",
        o.stderr
    );
    assert_eq!(o.stdout, "");
}

#[test]
fn a_holder_ignoring_sigterm_stops_the_plan_until_sigkill_is_allowed() {
    let f = Fake::new();
    let mut stubborn = std::process::Command::new("sh")
        .args(["-c", "trap '' TERM; sleep 60 & wait"])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    f.attach(&stubborn);
    let (_, p) = f.plan("7g.141gb");
    let o = f.apply(&p, "--yes --grace 1");
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stdout.contains("still running after SIGTERM") && o.stdout.contains("--kill-after-grace"),
        "{}",
        o.stdout
    );
    assert!(f.instances().is_empty(), "nothing changed while it runs");
    let o = f.apply(&p, "--yes --resume --grace 1 --kill-after-grace");
    assert_eq!(o.code, 0, "{}", o.stdout);
    let _ = stubborn.wait();
    assert_eq!(f.instances(), ["7g.141gb"]);
}

#[test]
fn a_plan_is_refused_when_a_process_appeared() {
    let f = Fake::new();
    let (_, p) = f.plan("7g.141gb");
    let mut job = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    f.attach(&job);
    let o = f.apply(&p, "--yes");
    assert_ne!(o.code, 0);
    assert!(
        o.stderr
            .contains("the node changed since this plan was made"),
        "{}",
        o.stderr
    );
    let _ = job.kill();
    let _ = job.wait();
}

#[test]
fn the_recorded_nvml_read_of_the_h200() {
    // Recorded on the lent H200 with `partop nvidia record` (docs/nvidia.md): NVML's own profile
    // list, named as nvidia-smi names them, and a real PyTorch process's memory.
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nvidia-smi/h200-nvml-record.json");
    let s = replayed_snapshot(&f);
    let mig = s.gpus[0].mig.as_ref().unwrap();
    assert!(
        mig.profiles_source.starts_with("NVML (driver 580.159.04)"),
        "{}",
        mig.profiles_source
    );
    let names: Vec<&str> = mig.profiles.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "1g.18gb",
            "2g.35gb",
            "3g.71gb",
            "4g.71gb",
            "7g.141gb",
            "1g.18gb+me",
            "1g.35gb"
        ]
    );
    assert_eq!(s.processes[0].name.as_deref(), Some("python3"));
    assert_eq!(s.processes[0].gpus[0].vram_bytes, Some(13_290 << 20));
    let o = run(
        partop().arg("--nvidia-replay").arg(&f).args([
            "mig",
            "plan",
            "--instances",
            "2x1g.18gb,1g.35gb,3g.71gb",
        ]),
        "",
    );
    assert!(
        ["9:0", "15:6", "19:4", "19:5"].iter().all(|c| o
            .stdout
            .contains(&format!("nvidia-smi mig -i 0 -cgi {c} -C"))),
        "{}",
        o.stdout
    );
    // The busy capture through the nvidia-smi path agrees on the process.
    let x = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nvidia-smi/h200-busy-q.xml"),
    )
    .unwrap();
    let n = smi::parse(&x).unwrap();
    assert_eq!(n.gpus[0].processes[0].pid, 469);
}

#[test]
fn a_mig_dry_run_makes_the_apply_checks_and_says_it_would_refuse() {
    let f = Fake::new();
    let (_, p) = f.plan("3g.71gb,2g.35gb,1g.18gb");
    let o = f.apply(&p, "--dry-run");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("dry run: the node is as planned"),
        "{}",
        o.stdout
    );
    // The node changes (a process appears): the dry run refuses as the apply would.
    let mut job = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    f.attach(&job);
    let o = f.apply(&p, "--dry-run");
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr
            .contains("the node changed since this plan was made"),
        "{}",
        o.stderr
    );
    assert!(!o.stdout.contains("nothing changed"), "{}", o.stdout);
    let o = f.apply(&p, "--yes");
    assert_eq!(o.code, 1, "the apply refuses alike: {}", o.stderr);
    let _ = job.kill();
    let _ = job.wait();
}

#[test]
fn mig_plan_refusals_go_to_stderr_and_absurd_counts_are_usage_errors() {
    let f = Fake::new();
    for (asked, says) in [
        ("99999999999x1g.18gb", "a GPU holds 1 to 7 instances"),
        (
            "999999999999999999999999999x1g.18gb",
            "a GPU holds 1 to 7 instances",
        ),
        ("0x1g.18gb", "a GPU holds 1 to 7 instances"),
        ("4x1g.18gb,4x1g.18gb", "at most 7"),
        ("8x1g.18gb", "a GPU holds 1 to 7 instances"),
        ("7g.141gb,1g.18gb", "compute slices"),
    ] {
        let (o, _) = f.plan(asked);
        assert_eq!(o.code, 2, "{asked}: {}{}", o.stdout, o.stderr);
        assert_eq!(o.stdout, "", "{asked}: --json prints a plan or nothing");
        assert!(o.stderr.contains(says), "{asked}: {}", o.stderr);
    }
}

#[test]
fn a_mig_resume_asks_for_the_host_and_refuses_a_state_the_plan_cannot_have_made() {
    let f = Fake::new();
    let mut stubborn = std::process::Command::new("sh")
        .args(["-c", "trap '' TERM; sleep 60 & wait"])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    f.attach(&stubborn);
    let (_, p) = f.plan("3g.71gb,3g.71gb");
    let o = f.apply(&p, "--yes --grace 1");
    assert_eq!(o.code, 1, "{}", o.stdout);
    // The resume is confirmed like the apply: a wrong host name changes nothing.
    let o = run(
        f.partop().args(["mig", "apply"]).arg(&p).args([
            "--resume",
            "--kill-after-grace",
            "--grace",
            "1",
        ]),
        "not-this-host\n",
    );
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(o.stdout.contains("not confirmed"), "{}", o.stdout);
    assert!(f.instances().is_empty());
    let _ = stubborn.kill();
    let _ = stubborn.wait();
    // Someone enables MIG and makes an instance by hand: not a state of this plan.
    for args in [
        vec!["-i", "0", "-mig", "1"],
        vec!["mig", "-i", "0", "-cgi", "19:6", "-C"],
    ] {
        let o = run(
            partop()
                .args(["sim", "nvidia-smi", "--state"])
                .arg(&f.state)
                .args(&args),
            "",
        );
        assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    }
    let o = f.apply(&p, "--yes --resume --kill-after-grace --grace 1");
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr.contains("cannot be resumed") && o.stderr.contains("1g.18gb"),
        "{}",
        o.stderr
    );
    // Closing it by hand: the hint names NVIDIA's tool, not amd-smi.
    let j = partop::exec::journal::unfinished(&f.dir.path().join("xdg/partop/journal.jsonl"));
    let o = run(f.partop().args(["journal", "--abandon", &j[0].run]), "");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("nvidia-smi") && !o.stdout.contains("amd-smi"),
        "{}",
        o.stdout
    );
}

#[test]
fn the_simulated_nvidia_smi_has_nvidias_placement_rules() {
    // Instances created in the order typed, with no start, take the lowest free start: a small
    // instance first leaves no room for the 4g, "Insufficient Resources" as on hardware; the
    // planner's order and starts place it.
    let f = Fake::new();
    let smi = |args: &[&str]| {
        run(
            partop()
                .args(["sim", "nvidia-smi", "--state"])
                .arg(&f.state)
                .args(args),
            "",
        )
    };
    assert_eq!(smi(&["-i", "0", "-mig", "1"]).code, 0);
    let o = smi(&["mig", "-i", "0", "-cgi", "19,14,5", "-C"]);
    assert_ne!(o.code, 0, "{}", o.stdout);
    assert!(o.stderr.contains("Insufficient Resources"), "{}", o.stderr);
    // A start the profile does not allow is refused.
    let o = smi(&["mig", "-i", "0", "-cgi", "9:2", "-C"]);
    assert!(o.stderr.contains("Invalid Argument"), "{}", o.stderr);
    let o = smi(&["mig", "-lgipp"]);
    assert!(
        o.stdout.contains("Profile ID  9 Placements: {0,4}:4"),
        "{}",
        o.stdout
    );
    let o = smi(&["mig", "-i", "0", "-lgi"]);
    let rows = smi::parse_lgi(&o.stdout).unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (r.profile, r.start))
            .collect::<Vec<_>>(),
        [(19, 0), (14, 2)]
    );
    // An unknown product is refused, not given made-up placements.
    let o = run(
        partop()
            .args(["sim", "nvidia-init", "--product", "NVIDIA B200", "--state"])
            .arg(f.dir.path().join("b200.json")),
        "",
    );
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("no MIG profile table"), "{}", o.stderr);
}

#[test]
fn the_profile_tables_are_what_the_lent_cards_reported() {
    // The raw read-only outputs of the lent H100 and H200 (NVML's profile info and possible
    // placements, and `nvidia-smi mig -lgipp`): partop's tables must say the same, profile by
    // profile, and the simulated nvidia-smi must print the same -lgipp.
    for (file, product) in [
        ("h100-mig-profiles.txt", "NVIDIA H100 80GB HBM3"),
        ("h200-mig-profiles.txt", "NVIDIA H200"),
    ] {
        let raw = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/nvidia-smi")
                .join(file),
        )
        .unwrap();
        let table = partop::domain::mig::table_profiles(product).unwrap();
        let mut seen = 0;
        for line in raw
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == Some("id"))
        {
            let w: Vec<&str> = line.split_whitespace().collect();
            let field = |k: &str| -> u64 {
                let i = w.iter().position(|x| *x == k).unwrap();
                w[i + 1].parse().unwrap()
            };
            let p = table
                .iter()
                .find(|p| u64::from(p.id) == field("id"))
                .unwrap_or_else(|| panic!("{product}: no profile {line}"));
            assert_eq!(u64::from(p.compute_slices), field("sl"), "{product} {line}");
            assert_eq!(
                u64::from(p.max_instances),
                field("inst"),
                "{product} {line}"
            );
            assert_eq!(u64::from(p.sms), field("sm"), "{product} {line}");
            assert_eq!(p.memory_mib, field("mem"), "{product} {line}");
            assert_eq!(u64::from(p.ofa), field("ofa"), "{product} {line}");
            let placements = &line[line.find('[').unwrap()..];
            let want: String = p
                .starts()
                .iter()
                .map(|s| format!("({s}, {})", p.memory_slices))
                .collect::<Vec<_>>()
                .join(", ");
            assert_eq!(placements, format!("[{want}]"), "{product} {line}");
            seen += 1;
        }
        assert_eq!(seen, table.len(), "{product}: every profile measured");
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("nv.json");
        let o = run(
            partop()
                .args(["sim", "nvidia-init", "--product", product, "--state"])
                .arg(&state),
            "",
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        let o = run(
            partop()
                .args(["sim", "nvidia-smi", "--state"])
                .arg(&state)
                .args(["mig", "-lgipp"]),
            "",
        );
        let measured: Vec<&str> = raw.lines().filter(|l| l.starts_with("GPU ")).collect();
        let simulated: Vec<&str> = o.stdout.lines().collect();
        assert_eq!(simulated, measured, "{product}: -lgipp");
    }
}

/// `partop nvidia record` writes the host and time beside the node, so the replay's REPLAY
/// banner names the recording's host and time, not the file (safety.md, rule 9); a recording
/// made before it did still replays and its banner says what it lacks.
#[test]
fn an_nvidia_replay_banner_names_the_recordings_host_and_time() {
    let f = Fake::new();
    let rec = f.dir.path().join("rec.json");
    let o = run(f.partop().args(["nvidia", "record", "--out"]).arg(&rec), "");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let banner = partop::cli::monitor::nvidia_replay_banner(&rec);
    let host = partop::collect::host::hostname();
    assert!(
        banner.starts_with(&format!("of {host} recorded 20")) && !banner.contains("rec.json"),
        "{banner}"
    );
    // It still replays.
    let o = run(
        partop()
            .arg("--nvidia-replay")
            .arg(&rec)
            .args(["snapshot", "--json"]),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    // An older recording: the node alone.
    let old = f.dir.path().join("old.json");
    let n: NvNode = smi::parse(&capture()).unwrap();
    std::fs::write(&old, serde_json::to_string(&n).unwrap()).unwrap();
    let banner = partop::cli::monitor::nvidia_replay_banner(&old);
    assert!(
        banner.contains("old.json (recorded without its host and time)"),
        "{banner}"
    );
}

#[test]
fn serve_on_a_mig_node_gives_dcgm_exporters_series_with_the_parent_uuid() {
    let f = Fake::new();
    let (o, p) = f.plan("2x1g.18gb,3g.71gb");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let o = f.apply(&p, "--yes");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let mut serve = f.partop();
    serve.args(["--refresh", "0.5", "serve"]);
    let body = scrape_once(serve);
    let lines = |name: &str| -> Vec<&str> {
        body.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .collect()
    };
    // The GPU's own UUID, from the same read.
    let snap = run(f.partop().args(["snapshot", "--json"]), "");
    let s: partop::domain::Snapshot = serde_json::from_str(&snap.stdout).unwrap();
    let parent = s.gpus[0].uuid.clone().expect("the GPU's UUID");
    assert!(parent.starts_with("GPU-"), "{parent}");
    // Per instance: three instances, each with the parent's UUID and its GPU_I_ID.
    let used = lines("DCGM_FI_DEV_FB_USED");
    assert_eq!(used.len(), 3, "{body}");
    for l in &used {
        assert!(l.contains(&format!("UUID=\"{parent}\"")), "{l}");
        assert!(
            l.contains("GPU_I_ID=\"") && l.contains("GPU_I_PROFILE=\""),
            "{l}"
        );
        let bus = l
            .split("pci_bus_id=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert!(
            bus.len() == 16 && bus.starts_with("00000000:") && bus.ends_with(".0"),
            "NVML's form: {bus}"
        );
    }
    // Per GPU, kept in MIG mode: power, temperatures, clocks, PCIe replays, the media engines
    // and remapped rows (what the fake nvidia-smi gives, as the real one does).
    let per_gpu = [
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    ];
    for n in per_gpu {
        let v = lines(n);
        assert_eq!(v.len(), 1, "{n} once for the GPU: {body}");
        assert!(!v[0].contains("GPU_I_ID"), "{}", v[0]);
        assert!(v[0].contains(&format!("UUID=\"{parent}\"")), "{}", v[0]);
    }
    eprintln!(
        "{} per-GPU dcgm-exporter series and 3 instances checked",
        per_gpu.len()
    );
}

#[test]
fn gpm_activity_xid_and_per_process_sm_share_from_the_h200_under_load() {
    // NVML on the lent H200 under a PyTorch bf16 matrix-product loop, read with pynvml
    // (scripts/nvidia-capture-pynvml.py: the device tool copies the lead's checkout, not this
    // branch, so partop's own binary could not run there): two GPM samples a second apart gave
    // graphics activity 99.99 % (nvidia-smi dmon's GPM column said 99 % at the same time,
    // h200-dmon-gpm.txt), the XID event set registered with no event, and NVML's per-process
    // samples gave the PyTorch process 86 % of the SMs.
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nvidia-smi/h200-nvml-gpm-xid-record.json");
    let s = replayed_snapshot(&f);
    let g = &s.gpus[0];
    let gr = g.partitions[0].gr_engine_active_percent.unwrap();
    assert!((99.0..=100.0).contains(&gr), "{gr}");
    assert_eq!(
        (g.counters.xid_last, g.counters.xid_count),
        (Some(0), Some(0))
    );
    let p = &s.processes[0];
    assert_eq!(p.engine_busy_percent(), Some(86.0));
    // Served as dcgm-exporter names them: the profiling field as a 0-1 ratio.
    let body = replay_served(&f);
    let value = |name: &str| -> Vec<f64> {
        body.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect()
    };
    let gr = value("DCGM_FI_PROF_GR_ENGINE_ACTIVE");
    assert_eq!(gr.len(), 1, "{body}");
    assert!((0.99..=1.0).contains(&gr[0]), "{gr:?}");
    assert_eq!(value("DCGM_FI_DEV_XID_ERRORS"), vec![0.0], "{body}");
    let help = body
        .lines()
        .filter(|l| {
            l.starts_with("# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE")
                || l.starts_with("# HELP DCGM_FI_DEV_XID_ERRORS")
        })
        .count();
    assert_eq!(help, 2, "each described once: {body}");
}

/// partop's own NVML reader on the lent H200 (release binary carried to the device,
/// `scripts/nvidia-capture.sh`, 2026-11-26) under a PyTorch bf16 matrix-product loop: its
/// recording replays to the same facts (the PyTorch process with its 966 MiB and 100 % of the
/// SMs, graphics-engine activity through GPM 100 %, no XID), and the replay serves exactly the
/// dcgm-exporter series the live `partop serve` served there (14 names, h200-partop-metrics.txt).
#[test]
fn partops_own_h200_capture_replays_to_what_it_served_live() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nvidia-smi");
    let f = dir.join("h200-partop-record-busy.json");
    let s = replayed_snapshot(&f);
    let g = &s.gpus[0];
    assert_eq!(g.partitions[0].gr_engine_active_percent, Some(100.0));
    assert_eq!(
        (g.counters.xid_last, g.counters.xid_count),
        (Some(0), Some(0))
    );
    let p = s
        .processes
        .iter()
        .find(|p| p.name.as_deref() == Some("python3"))
        .unwrap();
    assert_eq!(p.engine_busy_percent(), Some(100.0));
    assert_eq!(p.gpus[0].vram_bytes, Some(966 << 20));
    let names = dcgm_names;
    let live = names(&std::fs::read_to_string(dir.join("h200-partop-metrics.txt")).unwrap());
    assert_eq!(live.len(), 14, "{live:?}");
    let body = replay_served(&f);
    assert_eq!(names(&body), live, "{body}");
}

/// The same binary after it read NVML's field values (nvmlDeviceGetFieldValues: memory
/// temperature, the row remapper), on the same H200, idle: 36 °C HBM and no remapped row, as
/// nvidia-smi dmon's `mtemp` and pynvml said; the replay serves the 18 series the live run served
/// (the 14 before plus DCGM_FI_DEV_MEMORY_TEMP and the three remapped-row series).
#[test]
fn nvml_field_values_from_the_h200_replay_to_what_was_served_live() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nvidia-smi");
    let f = dir.join("h200-partop-record-fields.json");
    let s = replayed_snapshot(&f);
    let g = &s.gpus[0];
    assert_eq!(g.mem_celsius, Some(36.0));
    assert_eq!(g.counters.row_remap_failure, Some(false));
    let names = dcgm_names;
    let live = names(&std::fs::read_to_string(dir.join("h200-partop-metrics-fields.txt")).unwrap());
    assert_eq!(live.len(), 18, "{live:?}");
    for n in [
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    ] {
        assert!(live.contains(n), "{n}");
    }
    let body = replay_served(&f);
    assert_eq!(names(&body), live, "{body}");
}
