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
    let t = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = t + Duration::from_secs(secs);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "still running after {secs} s (blocked?): {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    (
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
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
