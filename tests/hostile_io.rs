//! Hostile conditions, second pass (issue 28), the families of files, reads, strings and
//! numbers, each through the real binary: files partop writes are never followed through a
//! link nor are they FIFOs, devices or hard links; everything read from outside is bounded and
//! a FIFO or device named by the operator is refused at once; every outside string is escaped
//! on every output path; every outside number is range-checked (N/A with the reason).
//! docs/safety.md ("Hostile conditions, second pass: files, reads, strings, numbers") lists the
//! cases.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::env::SimEnv;
use common::{Out, copy_tree, partop, quick};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The hostile kinds of path a written file may be, made at `p` (pointing at `victim`).
const WRITE_KINDS: [&str; 3] = ["symlink", "fifo", "hardlink"];

fn make_hostile(kind: &str, p: &Path, victim: &Path) {
    let _ = std::fs::remove_file(p);
    match kind {
        "symlink" => std::os::unix::fs::symlink(victim, p).unwrap(),
        "fifo" => nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap(),
        "hardlink" => std::fs::hard_link(victim, p).unwrap(),
        other => panic!("unknown kind {other}"),
    }
}

/// Runs `cmd` with a deadline: a command that blocks (on a FIFO) fails the test instead of
/// hanging it.
fn run_within(cmd: &mut Command, secs: u64) -> (Out, Duration) {
    run_within_stdin(cmd, secs, Stdio::null())
}

/// [`run_within`] with `stdin` as the command's standard input. Its output is read while it
/// runs: a command that writes more than a pipe holds (64 KiB: a snapshot's JSON) would
/// otherwise block on the pipe and read as a hang.
fn run_within_stdin(cmd: &mut Command, secs: u64, stdin: Stdio) -> (Out, Duration) {
    use std::io::Read as _;
    let t = Instant::now();
    let mut child = cmd
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = t + Duration::from_secs(secs);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "still running after {secs} s (blocked?): {}",
                String::from_utf8_lossy(&err.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    (
        Out {
            code: status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        },
        t.elapsed(),
    )
}

fn sleeper() -> std::process::Child {
    Command::new("sleep").arg("60").spawn().unwrap()
}

fn alive(pid: u32) -> bool {
    partop::exec::signal::start_ticks(Path::new("/proc"), pid).is_some()
}

// ---------------------------------------------------------------------------------------------
// Files partop writes are opened safely.

/// `partop kill PID --yes --journal J`, J a symlink to a file (as root: /etc/passwd), a FIFO or
/// a hard link to it: refused before anything is signalled, the file untouched (3 cases).
#[test]
fn a_journal_that_is_a_link_or_a_fifo_is_refused_and_nothing_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("passwd");
    std::fs::write(&victim, "root:x:0:0::/root:/bin/sh\n").unwrap();
    let mut cases = 0;
    for kind in WRITE_KINDS {
        let j = dir.path().join(format!("journal-{kind}.jsonl"));
        make_hostile(kind, &j, &victim);
        let mut c = sleeper();
        let (o, _) = run_within(
            partop()
                .env("XDG_STATE_HOME", dir.path())
                .env("XDG_CONFIG_HOME", dir.path())
                .arg("--journal")
                .arg(&j)
                .args(["kill", "--yes", &c.id().to_string()]),
            20,
        );
        assert_ne!(o.code, 0, "{kind}: {}", o.stdout);
        assert!(
            o.stderr.contains("cannot write the audit journal")
                && o.stderr.contains("Nothing was done")
                && o.stderr.contains(&j.display().to_string()),
            "{kind}: {}",
            o.stderr
        );
        assert!(alive(c.id()), "{kind}: the process was signalled");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "root:x:0:0::/root:/bin/sh\n",
            "{kind}: the linked file was written"
        );
        let _ = c.kill();
        let _ = c.wait();
        let _ = std::fs::remove_file(&j);
        cases += 1;
    }
    assert_eq!(cases, WRITE_KINDS.len(), "one case per hostile kind");
}

/// The other files partop writes, each with every hostile kind (2 writers × 3 kinds = 6 cases):
/// a recording (`record --out`) and the node lock of an apply. A symlink or FIFO is refused
/// with the path named; a hard link is never written through (a whole-file write replaces the
/// link); the linked file is untouched and the node unchanged.
#[test]
fn recordings_and_the_node_lock_are_never_written_through_a_link() {
    let e = SimEnv::new(&quick("hio-write", "7.0.2", "SPX", "NPS1", ""));
    let dir = e.node.dir.path();
    let victim = dir.join("victim");
    let original = "precious\n";
    let plan = e.plan("--memory NPS2", "p.json");
    let lock = partop::exec::lock::sim_path(&e.node.state);
    let mut cases = 0;
    for kind in WRITE_KINDS {
        std::fs::write(&victim, original).unwrap();
        // A recording.
        let rec = dir.join(format!("rec-{kind}.json"));
        make_hostile(kind, &rec, &victim);
        let (o, _) = run_within(e.cmd().arg("record").arg("--out").arg(&rec), 30);
        if kind == "hardlink" {
            assert_eq!(o.code, 0, "{kind}: {}", o.stderr);
        } else {
            assert_ne!(o.code, 0, "record onto a {kind}");
            assert!(
                o.stderr.contains(&rec.display().to_string()),
                "{kind}: {}",
                o.stderr
            );
        }
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            original,
            "record, {kind}"
        );
        cases += 1;
        // The node lock.
        let _ = std::fs::remove_file(&victim);
        std::fs::write(&victim, original).unwrap();
        make_hostile(kind, &lock, &victim);
        let (o, _) = run_within(e.cmd().arg("apply").arg(&plan).arg("--yes"), 30);
        assert_ne!(o.code, 0, "apply with its lock a {kind}: {}", o.stdout);
        assert!(
            o.stderr.contains("lock file") && o.stderr.contains(&lock.display().to_string()),
            "{kind}: {}",
            o.stderr
        );
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            original,
            "lock, {kind}"
        );
        assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8), "lock, {kind}");
        std::fs::remove_file(&lock).unwrap();
        cases += 1;
    }
    assert_eq!(cases, 2 * WRITE_KINDS.len(), "2 writers × 3 hostile kinds");
}

// ---------------------------------------------------------------------------------------------
// Everything read from outside is bounded and never blocks for ever.

/// Every file an operator names on the command line, given as a FIFO (no writer: a plain open
/// blocks for ever) and as /dev/zero (endless): refused at once with what it is. 6 commands × 2
/// kinds = 12 cases.
#[test]
fn operator_files_that_are_fifos_or_devices_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let zero = PathBuf::from("/dev/zero");
    type Argv = fn(&Path) -> Vec<String>;
    let commands: [(&str, Argv); 6] = [
        ("serve --token-file", |f| {
            [
                "--sim",
                "spx-nps1-one-model",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--token-file",
            ]
            .iter()
            .map(ToString::to_string)
            .chain([f.display().to_string()])
            .collect()
        }),
        ("--replay", |f| {
            vec![
                "--replay".into(),
                f.display().to_string(),
                "snapshot".into(),
            ]
        }),
        ("sim fleet --template", |f| {
            vec![
                "sim".into(),
                "fleet".into(),
                "--template".into(),
                f.display().to_string(),
            ]
        }),
        ("fleet --hosts-file", |f| {
            vec![
                "fleet".into(),
                "--once".into(),
                "--hosts-file".into(),
                f.display().to_string(),
            ]
        }),
        ("apply PLAN", |f| {
            vec![
                "--sim".into(),
                "spx-nps1-one-model".into(),
                "apply".into(),
                f.display().to_string(),
            ]
        }),
        ("--models", |f| {
            vec![
                "--sim".into(),
                "spx-nps1-one-model".into(),
                "--models".into(),
                f.display().to_string(),
                "models".into(),
                "list".into(),
            ]
        }),
    ];
    let mut cases = 0;
    for (what, args) in commands {
        for (file, words) in [(&fifo, "FIFO"), (&zero, "character device")] {
            let (o, took) = run_within(
                partop()
                    .env("XDG_STATE_HOME", dir.path())
                    .env("XDG_CONFIG_HOME", dir.path())
                    .args(args(file)),
                20,
            );
            assert!(
                o.stderr.contains(words) && o.stderr.contains(&file.display().to_string()),
                "{what} {}: exit {}, {}",
                file.display(),
                o.code,
                o.stderr
            );
            assert!(
                took < Duration::from_secs(10),
                "{what} {}: took {took:?}",
                file.display()
            );
            cases += 1;
        }
    }
    assert_eq!(cases, 12, "6 commands × 2 kinds");
}

/// A captured --proc-root whose holder's /proc files are /dev/zero (endless) or a FIFO (an open
/// that blocks): each file read bounded and without blocking; the snapshot still comes, with
/// the other holder. 7 files × 2 kinds = 14 cases.
#[test]
fn proc_files_that_are_endless_or_block_are_read_bounded() {
    let files = [
        "cmdline", "environ", "cgroup", "status", "stat", "comm", "fdinfo/3",
    ];
    let mut cases = 0;
    for kind in ["zero", "fifo"] {
        for f in files {
            let dir = tempfile::tempdir().unwrap();
            copy_tree(
                &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/mi300x-spx-nps1"),
                dir.path(),
            );
            let p = dir.path().join("proc/7001").join(f);
            let _ = std::fs::remove_file(&p);
            if kind == "zero" {
                std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
            } else {
                nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
            }
            let (o, took) = run_within(
                partop()
                    .env("XDG_CONFIG_HOME", dir.path())
                    .env("XDG_STATE_HOME", dir.path())
                    .args(["--source", "sysfs", "--sysfs-root"])
                    .arg(dir.path().join("sys"))
                    .arg("--proc-root")
                    .arg(dir.path().join("proc"))
                    .args(["snapshot", "--json"]),
                30,
            );
            assert_eq!(o.code, 0, "{f} as {kind}: {}", o.stderr);
            let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
            let pids: Vec<u64> = v["processes"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p["pid"].as_u64())
                .collect();
            assert!(pids.contains(&7002), "{f} as {kind}: {pids:?}");
            assert!(
                took < Duration::from_secs(10),
                "{f} as {kind}: took {took:?}"
            );
            cases += 1;
        }
    }
    assert_eq!(cases, 14, "7 /proc files × 2 kinds");
}

// ---------------------------------------------------------------------------------------------
// Every string from outside is escaped on every output path.

/// Records the simulated node and returns the recording after `edit`.
fn edited_recording(e: &SimEnv, name: &str, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
    let rec = e.node.dir.path().join(name);
    let (o, _) = run_within(e.cmd().arg("record").arg("--out").arg(&rec), 60);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rec).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&rec, serde_json::to_string(&v).unwrap()).unwrap();
    rec
}

/// The recorded stdout of the amd-smi command starting with `command`.
fn output<'a>(v: &'a mut serde_json::Value, command: &str) -> &'a mut serde_json::Value {
    let outputs = v["outputs"].as_object_mut().unwrap();
    let key = outputs
        .keys()
        .find(|k| k.starts_with(command))
        .unwrap_or_else(|| panic!("no output for {command}"))
        .clone();
    &mut outputs.get_mut(&key).unwrap()["stdout"]
}

/// Edits the text of a recorded amd-smi output.
fn edit_text(v: &mut serde_json::Value, command: &str, from: &str, to: &str) {
    let s = output(v, command);
    let t = s.as_str().unwrap().to_string();
    assert!(t.contains(from), "{command}: no {from:?}");
    *s = t.replacen(from, to, 1).into();
}

/// Edits a recorded amd-smi JSON output as JSON.
fn edit_json(v: &mut serde_json::Value, command: &str, f: impl Fn(&mut serde_json::Value)) {
    let s = output(v, command);
    let mut doc: serde_json::Value = serde_json::from_str(s.as_str().unwrap()).unwrap();
    f(&mut doc);
    *s = serde_json::to_string_pretty(&doc).unwrap().into();
}

fn replay(e: &SimEnv, rec: &Path, args: &[&str]) -> Out {
    run_within(
        partop()
            .env("XDG_STATE_HOME", e.xdg())
            .env("XDG_CONFIG_HOME", e.xdg())
            .arg("--replay")
            .arg(rec)
            .args(args),
        60,
    )
    .0
}

/// No terminal control reaches an output: ESC, BEL, CSI (C1).
fn assert_no_raw_controls(what: &str, text: &str) {
    for c in ['\u{1b}', '\u{7}', '\u{9b}'] {
        assert!(!text.contains(c), "{what}: raw {c:?} in {text:?}");
    }
}

/// Seven families of outside strings, each carrying a terminal escape sequence, in one
/// recording: amd-smi's product name, serial, process name and version text (amd-smi's own
/// output), the recording's host name, and the /proc facts it kept (command line, user). Four
/// commands replay it: `snapshot`, `snapshot --json`, `plan`, `models list` (7 × 4 = 28
/// checks); no raw ESC, BEL or CSI reaches stdout or stderr, and each string arrives escaped.
#[test]
fn every_outside_string_is_escaped_in_every_command_of_a_replay() {
    let e = SimEnv::new("spx-nps1-one-model");
    let pid = e.pid_of("llama-405b");
    let rec = edited_recording(&e, "evil.json", |v| {
        edit_text(
            v,
            "static",
            "\"market_name\": \"AMD Instinct MI300X\"",
            "\"market_name\": \"AMD Instinct MI300X\\u001b]0;owned\\u0007\"",
        );
        edit_text(
            v,
            "static",
            "\"asic_serial\": \"",
            "\"asic_serial\": \"\\u009b2J",
        );
        edit_text(
            v,
            "process",
            "\"name\": \"python3\"",
            "\"name\": \"py\\u001b[31mthon3\"",
        );
        edit_text(
            v,
            "version",
            "AMDSMI Tool: ",
            "AMDSMI Tool: \u{1b}]0;v\u{7}",
        );
        v["host"] = "node\u{1b}]0;h\u{7}".into();
        let p = &mut v["processes"][pid.to_string()];
        p["command"] = "vllm\u{1b}[2J serve".into();
        p["user"] = "ro\u{1b}[8mot".into();
    });
    let families = 7;
    let mut checks = 0;
    for args in [
        &["snapshot"][..],
        &["snapshot", "--json"],
        &["plan", "--compute", "DPX"],
        &["models", "list"],
    ] {
        let o = replay(&e, &rec, args);
        assert_no_raw_controls(&format!("{args:?} stdout"), &o.stdout);
        assert_no_raw_controls(&format!("{args:?} stderr"), &o.stderr);
        checks += families;
    }
    assert_eq!(checks, 28, "7 string families × 4 commands");
    // Each family arrived, escaped (so the checks above looked at it).
    let o = replay(&e, &rec, &["snapshot", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert!(
        v["gpus"][0]["product"]
            .as_str()
            .unwrap()
            .contains("\\x1b]0;owned\\x07"),
        "{}",
        v["gpus"][0]["product"]
    );
    assert!(
        v["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["serial"].as_str().is_some_and(|s| s.contains("\\x9b2J"))),
        "serials: {:?}",
        v["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| &g["serial"])
            .collect::<Vec<_>>()
    );
    let p = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap();
    assert_eq!(p["name"], "py\\x1b[31mthon3");
    assert_eq!(p["command"], "vllm\\x1b[2J serve");
    assert_eq!(p["user"], "ro\\x1b[8mot");
    assert!(
        v["host"].as_str().unwrap().contains("\\x1b]0;h\\x07"),
        "{}",
        v["host"]
    );
    let table = replay(&e, &rec, &["snapshot"]).stdout;
    assert!(table.contains("MI300X\\x1b]0;owned\\x07"), "{table}");
}

/// `partop fleet --once` over a node (a `partop serve` endpoint of `sim fleet`) whose sample
/// carries escape sequences in its product and a source's error: the table and the JSON print
/// them escaped (2 outputs × 4 checks = 8); its 2^62-byte partitions never reach the row as
/// more than 8 PiB nor as a wrapped sum.
#[test]
fn fleet_rows_from_a_node_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let (o, _) = run_within(
        partop()
            .env("XDG_STATE_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .args(["--sim", "spx-nps1-one-model", "snapshot", "--json"]),
        60,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut t: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    for g in t["gpus"].as_array_mut().unwrap() {
        g["product"] = "MI300X\u{1b}]0;fleet-owned\u{7}".into();
        // And figures no node has: 2^62 bytes per partition (their sum wraps a u64).
        for l in g["partitions"].as_array_mut().unwrap() {
            l["vram_used_bytes"] = (1u64 << 62).into();
            l["vram_total_bytes"] = (1u64 << 62).into();
            l["vram_share_bytes"] = (1u64 << 62).into();
        }
    }
    t["sources"][0]["status"] = "down".into();
    t["sources"][0]["error"] = "broken\u{1b}[2J".into();
    let template = dir.path().join("template.json");
    std::fs::write(&template, serde_json::to_string(&t).unwrap()).unwrap();
    let hosts = dir.path().join("hosts");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut fleet = partop()
        .env("XDG_STATE_HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        .args([
            "sim",
            "fleet",
            "--nodes",
            "1",
            "--every",
            "1",
            "--base-port",
        ])
        .arg(port.to_string())
        .arg("--template")
        .arg(&template)
        .arg("--hosts-out")
        .arg(&hosts)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_until("the hosts file", || hosts.exists());
    let mut checks = 0;
    for json in [false, true] {
        let mut c = partop();
        c.env("XDG_STATE_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .args(["fleet", "--hosts-file"])
            .arg(&hosts)
            .arg("--once");
        if json {
            c.arg("--json");
        }
        let (o, _) = run_within(&mut c, 60);
        assert_no_raw_controls("fleet --once stdout", &o.stdout);
        assert_no_raw_controls("fleet --once stderr", &o.stderr);
        assert!(o.stdout.contains("fleet-owned"), "{}", o.stdout);
        if json {
            let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
            let s = &v[0]["summary"];
            for f in ["vram_used", "vram_total"] {
                assert!(
                    s[f].as_u64().unwrap() <= partop::domain::sanity::MAX_BYTES,
                    "{f}: {s}"
                );
            }
        }
        checks += 4;
    }
    let _ = fleet.kill();
    let _ = fleet.wait();
    assert_eq!(checks, 8, "2 outputs × 4 strings");
}

// ---------------------------------------------------------------------------------------------
// Every number from outside is checked: N/A with the reason.

/// amd-smi reports a process's VRAM as -86 GB, its CU occupancy as 1e308 and a GPU's CU count as
/// 1e308 (3 cases): each is N/A with the reason, never 0.0 or 4294967295.
#[test]
fn absurd_amd_smi_numbers_are_na_with_the_reason() {
    let e = SimEnv::new("spx-nps1-one-model");
    let pid = e.pid_of("llama-405b");
    let rec = edited_recording(&e, "absurd.json", |v| {
        edit_json(v, "process", |d| {
            let info = &mut d[0]["process_list"][0]["process_info"];
            info["memory_usage"]["vram_mem"] = serde_json::json!({"value": -86, "unit": "GB"});
            info["cu_occupancy"] = serde_json::json!({"value": 1e308, "unit": ""});
        });
        edit_json(v, "static", |d| {
            d["gpu_data"][0]["asic"]["num_compute_units"] = serde_json::json!(1e308);
        });
    });
    let o = replay(&e, &rec, &["snapshot", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        !o.stdout.contains("4294967295"),
        "a saturated cast is shown"
    );
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let p = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap();
    let g = p["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["gpu_id"] == 0)
        .unwrap();
    assert!(g["vram_bytes"].is_null(), "{g}");
    assert!(g["cu_occupancy"].is_null(), "{g}");
    let prov = p["provenance"].to_string();
    assert!(prov.contains("-86 GB"), "{prov}");
    assert!(prov.contains("1e308 CUs"), "{prov}");
    let l = &v["gpus"][0]["partitions"][0];
    assert_ne!(l["cu_count"], 4_294_967_295u64);
    assert!(
        l["provenance"]["cu_count"].to_string().contains("1e308"),
        "{}",
        l["provenance"]
    );
    let table = replay(&e, &rec, &["snapshot"]).stdout;
    assert!(!table.contains("4294967295"), "{table}");
}

/// fdinfo and KFD VRAM figures near 2^64 for both holders of a captured node (2 figures and
/// their sum): each process's VRAM and the partition's total are N/A with the reason, never
/// 8 EiB nor a wrapped "1.0 GiB used".
#[test]
fn vram_figures_near_2_to_the_64_and_their_sum_are_na_never_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/mi300x-spx-nps1"),
        dir.path(),
    );
    let huge = "18446744073709551000";
    let mut edited = 0;
    for entry in walk(dir.path()) {
        let name = entry.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        if name.starts_with("vram_") && entry.to_string_lossy().contains("kfd/proc") {
            std::fs::write(&entry, format!("{huge}\n")).unwrap();
            edited += 1;
        } else if text.contains("drm-memory-vram:") {
            let t: String = text
                .lines()
                .map(|l| {
                    if l.starts_with("drm-memory-vram:") || l.starts_with("drm-resident-vram:") {
                        format!("{}:\t{huge}\n", l.split(':').next().unwrap())
                    } else {
                        format!("{l}\n")
                    }
                })
                .collect();
            std::fs::write(&entry, t).unwrap();
            edited += 1;
        }
    }
    assert!(edited >= 2, "{edited} figures edited");
    let (o, _) = run_within(
        partop()
            .env("XDG_CONFIG_HOME", dir.path())
            .env("XDG_STATE_HOME", dir.path())
            .args(["--source", "sysfs", "--sysfs-root"])
            .arg(dir.path().join("sys"))
            .arg("--proc-root")
            .arg(dir.path().join("proc"))
            .args(["snapshot", "--json"]),
        30,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let max = partop::domain::sanity::MAX_BYTES;
    let mut figures = 0;
    for p in v["processes"].as_array().unwrap() {
        for g in p["gpus"].as_array().unwrap() {
            assert!(
                g["vram_bytes"].as_u64().is_none_or(|b| b <= max),
                "pid {}: {g}",
                p["pid"]
            );
            figures += 1;
        }
    }
    assert!(figures >= 2, "{figures} process figures");
    for g in v["gpus"].as_array().unwrap() {
        for l in g["partitions"].as_array().unwrap() {
            let used = l["vram_used_bytes"].as_u64();
            assert!(used.is_none_or(|u| u <= max), "{l}");
        }
    }
    let l = &v["gpus"][0]["partitions"][0];
    assert!(l["vram_used_bytes"].is_null(), "{l}");
    assert!(
        l["provenance"]["vram_used_bytes"]
            .to_string()
            .contains("8 PiB"),
        "{}",
        l["provenance"]
    );
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_symlink() {
            continue;
        }
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A model server whose /metrics says 1e30 requests running, -5 waiting and a KV cache 750 %
/// full (3 cases): `models list` and the JSON show each as N/A and say why.
#[test]
fn absurd_model_server_figures_are_na_with_the_reason() {
    let scenario = quick(
        "hio-metrics",
        "7.0.2",
        "SPX",
        "NPS1",
        "[[workload]]\nname = \"m\"\nkind = \"model-server\"\ngpu = 0\nvram_gb = 20\nbusy = 40\nmodel = \"org/model\"\nmetrics = \"# TYPE vllm:num_requests_running gauge\\nvllm:num_requests_running 1e30\\n# TYPE vllm:num_requests_waiting gauge\\nvllm:num_requests_waiting -5\\n# TYPE vllm:kv_cache_usage_perc gauge\\nvllm:kv_cache_usage_perc 7.5\\n\"\n",
    );
    let e = SimEnv::new(&scenario);
    let mut last = String::new();
    common::wait_until("the model to answer", || {
        let (o, _) = run_within(e.cmd().args(["snapshot", "--json"]), 60);
        last = o.stdout;
        last.contains("outside 0 to")
    });
    let v: serde_json::Value = serde_json::from_str(&last).unwrap();
    let m = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "m")
        .unwrap();
    let mut cases = 0;
    for (field, said) in [
        ("running", "requests running 1e30"),
        ("waiting", "requests waiting -5"),
        ("kv_cache", "KV-cache use 7.5"),
    ] {
        assert!(m[field].is_null(), "{field}: {m}");
        assert!(m["reason"].as_str().unwrap().contains(said), "{said}: {m}");
        cases += 1;
    }
    assert_eq!(cases, 3);
    let (o, _) = run_within(e.cmd().args(["models", "list"]), 60);
    assert!(
        o.stdout.contains("N/A") || o.stdout.contains("outside 0 to"),
        "{}",
        o.stdout
    );
    assert!(!o.stdout.contains("750"), "{}", o.stdout);
}

/// A journal edited by someone else, with escape sequences in its user, host, action, targets
/// (4 strings): `partop journal` prints every one escaped.
#[test]
fn a_tampered_journal_is_printed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("journal.jsonl");
    std::fs::write(
        &j,
        "{\"at\":\"2026-01-01T00:00:00Z\",\"who\":{\"user\":\"ev\\u001b]0;x\\u0007il\",\"uid\":0},\"host\":\"h\\u009b2J\",\"action\":\"kill.sigterm\\u001b[2J\",\"simulated\":false,\"targets\":{\"name\":\"a\\u001bb\"},\"outcome\":{\"detail\":\"line1\\nline2\"}}\n",
    )
    .unwrap();
    let (o, _) = run_within(
        partop()
            .env("XDG_STATE_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .arg("--journal")
            .arg(&j)
            .arg("journal"),
        20,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_no_raw_controls("journal", &o.stdout);
    let mut cases = 0;
    for escaped in [
        "ev\\x1b]0;x\\x07il",
        "h\\x9b2J",
        "kill.sigterm\\x1b[2J",
        "a\\\\x1bb",
    ] {
        assert!(o.stdout.contains(escaped), "{escaped}: {}", o.stdout);
        cases += 1;
    }
    assert_eq!(cases, 4);
}

/// A captured /proc whose numbers are near 2^64: a holder's utime, stime, start time and RSS,
/// the CPU counters of /proc/stat, MemTotal (6 figures). Nothing wraps nor panics: the
/// snapshot comes, the other holder keeps its start time, and no figure derived from the
/// absurd ones is shown as fact.
#[test]
fn proc_numbers_near_2_to_the_64_never_wrap() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/mi300x-spx-nps1"),
        dir.path(),
    );
    let max = u64::MAX.to_string();
    let stat = dir.path().join("proc/7001/stat");
    let text = std::fs::read_to_string(&stat).unwrap();
    let mut figures = 0;
    let mut t = text.clone();
    for f in [" 987654 ", " 12345 ", " 1234567 ", " 575308 "] {
        assert!(t.contains(f), "{f}");
        t = t.replacen(f, &format!(" {max} "), 1);
        figures += 1;
    }
    std::fs::write(&stat, t).unwrap();
    std::fs::write(
        dir.path().join("proc/stat"),
        format!(
            "cpu  {max} {max} {max} {max} {max} 0 0 0 0 0\ncpu0 1 1 1 1 1 0 0 0 0 0\nintr 0\nctxt 0\nbtime 1700000000\nprocesses 1\nprocs_running 1\nprocs_blocked 0\nsoftirq 0\n"
        ),
    )
    .unwrap();
    figures += 1;
    std::fs::write(
        dir.path().join("proc/meminfo"),
        format!("MemTotal: {max} kB\nMemAvailable: 1 kB\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("proc/loadavg"), "0.5 0.5 0.5 1/100 1\n").unwrap();
    figures += 1;
    assert_eq!(figures, 6);
    let (o, _) = run_within(
        partop()
            .env("XDG_CONFIG_HOME", dir.path())
            .env("XDG_STATE_HOME", dir.path())
            .args(["--source", "sysfs", "--sysfs-root"])
            .arg(dir.path().join("sys"))
            .arg("--proc-root")
            .arg(dir.path().join("proc"))
            .args(["snapshot", "--json"]),
        30,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let p = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == 7001)
        .unwrap();
    // The rest of its /proc facts still came (no read of them was lost to a panic).
    assert!(p["command"].as_str().is_some_and(|c| !c.is_empty()), "{p}");
    let bytes_max = partop::domain::sanity::MAX_BYTES;
    assert!(
        p["rss_bytes"].as_u64().is_none_or(|b| b <= bytes_max),
        "{p}"
    );
    assert!(p["started_at_ms"].is_null(), "a wrapped start time: {p}");
    let other = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == 7002)
        .unwrap();
    assert!(other["started_at_ms"].as_u64().is_some(), "{other}");
    assert!(
        v["host_usage"]["mem_total_bytes"]
            .as_u64()
            .is_none_or(|b| b <= bytes_max),
        "{}",
        v["host_usage"]
    );
}

/// Confirmations read from stdin when stdin never ends (/dev/zero): `partop kill PID` and the
/// simulator's `amd-smi set` (2 commands) read one bounded line, decline, and change nothing.
#[test]
fn a_confirmation_from_an_endless_stdin_is_bounded_and_declines() {
    let e = SimEnv::new(&quick("hio-stdin", "7.0.2", "SPX", "NPS1", ""));
    let mut c = sleeper();
    let zero = || std::fs::File::open("/dev/zero").unwrap();
    let mut cases = 0;
    let mut kill = partop();
    kill.env("XDG_STATE_HOME", e.xdg())
        .env("XDG_CONFIG_HOME", e.xdg())
        .args(["kill", &c.id().to_string()]);
    let mut set = partop();
    set.args(["sim", "amd-smi", "--state"])
        .arg(&e.node.state)
        .args(["set", "-g", "0", "-M", "NPS2"]);
    for (what, cmd) in [("kill", &mut kill), ("amd-smi set", &mut set)] {
        let (o, took) = run_within_stdin(cmd, 20, zero().into());
        assert!(took < Duration::from_secs(10), "{what}: {took:?}");
        assert_ne!(o.code, 0, "{what} went on: {}", o.stdout);
        cases += 1;
    }
    assert!(alive(c.id()), "the process was signalled");
    assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
    let _ = c.kill();
    let _ = c.wait();
    assert_eq!(cases, 2);
}

/// An NVIDIA node whose every MiB figure (total, used, per instance, per process) is 2^50 MiB:
/// as bytes each passes 8 PiB, and a shift would drop the high bits and show 0. Each is N/A.
#[test]
fn nvidia_mib_figures_that_overflow_as_bytes_are_na_never_zero() {
    let dir = tempfile::tempdir().unwrap();
    let mut v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/nvidia-smi/h200-nvml-record.json"),
        )
        .unwrap(),
    )
    .unwrap();
    fn absurd(v: &mut serde_json::Value, n: &mut usize) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if k.ends_with("_mib") && x.is_u64() {
                        *x = (1u64 << 50).into();
                        *n += 1;
                    } else {
                        absurd(x, n);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| absurd(x, n)),
            _ => {}
        }
    }
    let mut figures = 0;
    absurd(&mut v, &mut figures);
    assert!(figures >= 3, "{figures} MiB figures");
    let f = dir.path().join("rec.json");
    std::fs::write(&f, v.to_string()).unwrap();
    let (o, _) = run_within(
        partop()
            .env("XDG_STATE_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .arg("--nvidia-replay")
            .arg(&f)
            .args(["snapshot", "--json"]),
        30,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let s: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let mut shown = Vec::new();
    for g in s["gpus"].as_array().unwrap() {
        shown.push(("hbm_bytes", g["hbm_bytes"].clone()));
        for l in g["partitions"].as_array().unwrap() {
            for k in ["vram_used_bytes", "vram_total_bytes", "vram_share_bytes"] {
                shown.push((k, l[k].clone()));
            }
        }
    }
    for p in s["processes"].as_array().unwrap() {
        for u in p["gpus"].as_array().unwrap() {
            shown.push(("vram_bytes", u["vram_bytes"].clone()));
        }
    }
    assert!(shown.len() >= 5, "{shown:?}");
    for (k, x) in &shown {
        assert!(
            x.is_null(),
            "{k} = {x} from a 2^50 MiB figure ({} figures)",
            figures
        );
    }
}
