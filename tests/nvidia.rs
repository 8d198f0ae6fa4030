//! NVIDIA: the real H200 capture parsed and assembled into the same snapshot as AMD nodes; the
//! recorded-NVML path (`--nvidia-replay`); MIG plans applied through the fake nvidia-smi as a
//! real subprocess (enable + create, relayout, disable, a holder that ignores SIGTERM, a plan
//! invalidated by a new process, dry run).
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
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
    let o = run(
        partop()
            .arg("--nvidia-replay")
            .arg(&f)
            .args(["snapshot", "--json"]),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let s: partop::domain::Snapshot = serde_json::from_str(&o.stdout).unwrap();
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
        s.gpus[0]
            .partitions
            .iter()
            .filter_map(|l| l.profile.clone())
            .collect()
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
            .contains(&format!("$ {} mig -i 0 -cgi 19,19,9 -C", f.smi.display())),
        "{}",
        o.stdout
    );
    assert!(f.instances().is_empty());
    let o = f.apply(&p, "--yes --grace 3");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("ok: MIG on with 3 instance(s)"),
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
    let (o, _) = f.plan("3g.71gb,3g.71gb,1g.18gb");
    assert_eq!(o.code, 2);
    assert!(o.stdout.contains("9 of 8 memory slices"), "{}", o.stdout);
    let (o, _) = f.plan("2g.20gb");
    assert!(
        o.stdout.contains("does not offer profile 2g.20gb"),
        "{}",
        o.stdout
    );
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
    let o = run(
        partop()
            .arg("--nvidia-replay")
            .arg(&f)
            .args(["snapshot", "--json"]),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let s: partop::domain::Snapshot = serde_json::from_str(&o.stdout).unwrap();
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
        o.stdout.contains("nvidia-smi mig -i 0 -cgi 19,19,15,9 -C"),
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
