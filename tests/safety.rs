//! Dangerous actions under hostile conditions (issue 13), each case through the real binary and
//! the simulator's fake amd-smi as subprocesses, or through the executors on real processes:
//! pid reuse, an unwritable journal, stale, foreign, edited and concurrent plans, resumes of
//! the right run, unfinished applies, a rehearsal doing exactly the plan, absurd flags, hung and
//! endless amd-smi wrappers, blocking kernel files, NaN, escape sequences, the real uid.
//! docs/safety.md lists every case with its outcome.
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::env::SimEnv;
use common::{Out, copy_tree, partop, quick, run, running, wait_until};
use partop::domain::kill::{Sig, Target};
use partop::exec::signal::{Outcome, pin, send, start_ticks, target_from_proc};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MODEL: &str = "[[workload]]\nname = \"m\"\nkind = \"model-server\"\ngpu = 3\nvram_gb = 20\nbusy = 40\nmodel = \"org/model\"\n[[workload]]\nname = \"b\"\nkind = \"batch\"\ngpu = 5\nvram_gb = 10\nbusy = 30\n";

fn alive(pid: u32) -> bool {
    start_ticks(Path::new("/proc"), pid).is_some()
}

fn sleeper() -> Child {
    Command::new("sleep").arg("60").spawn().unwrap()
}

fn output_of(c: Child) -> Out {
    let o = c.wait_with_output().unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Makes the next fork on this machine get `pid` (root: /proc/sys/kernel/ns_last_pid), then
/// spawns `sleep`; returns it if it got that pid.
/// Serialises writes to `ns_last_pid`: two tests setting it at once take each other's pid.
static PID_REUSE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A new process with `pid`, or `None` where the pid was taken by another process meanwhile
/// (the suite spawns in parallel): the caller tries its whole case again with a new pid.
fn spawn_with_pid(pid: u32) -> Option<Child> {
    let _one = PID_REUSE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..50 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).ok()?;
        let c = Command::new("sleep").arg("60").spawn().unwrap();
        if c.id() == pid {
            return Some(c);
        }
        let mut c = c;
        let _ = c.kill();
        let _ = c.wait();
    }
    None
}

fn reap(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

// ---------------------------------------------------------------------------------------------
// Kills

#[test]
fn a_reused_pid_is_never_signalled_even_inside_one_clock_tick() {
    let (pid, pinned, b) = (0..10)
        .find_map(|_| {
            let mut a = sleeper();
            let pid = a.id();
            let ta = target_from_proc(Path::new("/proc"), pid).unwrap();
            let pinned = pin(Path::new("/proc"), &ta).unwrap();
            a.kill().unwrap();
            a.wait().unwrap();
            spawn_with_pid(pid).map(|b| (pid, pinned, b))
        })
        .expect("pid reuse through ns_last_pid (tests run as root), 10 tries");
    // Same pid; even if the start time were identical (same 10 ms tick), the pin holds the
    // first process only.
    assert_eq!(pinned.send(Sig::Term), Outcome::Gone);
    assert!(pinned.exited());
    assert!(
        alive(pid),
        "the new process with the reused pid was not touched"
    );
    reap(b);
}

#[test]
fn partop_kill_signals_the_process_it_showed_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let (pid, mut k, b) = (0..10)
        .find_map(|_| {
            let mut a = sleeper();
            let pid = a.id();
            let mut k = partop()
                .env("XDG_STATE_HOME", dir.path())
                .env("XDG_CONFIG_HOME", dir.path())
                .args(["kill", &pid.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // It has described (and pinned) the target once the journal dir is untouched and
            // the prompt is waiting; give it time to print.
            std::thread::sleep(Duration::from_millis(400));
            a.kill().unwrap();
            a.wait().unwrap();
            match spawn_with_pid(pid) {
                Some(b) => Some((pid, k, b)),
                None => {
                    // Another process took the pid: this kill is answered no, and the case
                    // starts again with a new one.
                    k.stdin.take().unwrap().write_all(b"no\n").unwrap();
                    let _ = k.wait();
                    None
                }
            }
        })
        .expect("pid reuse through ns_last_pid (tests run as root), 10 tries");
    k.stdin.take().unwrap().write_all(b"yes\n").unwrap();
    let o = output_of(k);
    assert!(
        o.stdout.contains("already exited, nothing sent"),
        "{}",
        o.stdout
    );
    assert!(alive(pid), "the process that took the pid over is alive");
    reap(b);
}

#[test]
fn a_target_without_a_verified_start_time_is_refused() {
    let c = sleeper();
    let t = Target {
        pid: c.id(),
        start_ticks: None,
        ..Target::default()
    };
    assert!(
        matches!(send(Path::new("/proc"), &t, Sig::Term), Outcome::Refused(w) if w.contains("start time"))
    );
    assert!(alive(c.id()));
    reap(c);
}

#[test]
fn no_journal_no_kill() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("partop")).unwrap();
    std::fs::write(
        dir.path().join("partop/config.toml"),
        "journal = \"/dev/full\"\n",
    )
    .unwrap();
    let c = sleeper();
    let o = run(
        partop()
            .env("XDG_STATE_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .args(["kill", "--yes", &c.id().to_string()]),
        "",
    );
    assert_ne!(o.code, 0);
    assert!(
        o.stderr
            .contains("cannot write the audit journal /dev/full")
            && o.stderr.contains("Nothing was done"),
        "{}",
        o.stderr
    );
    assert!(alive(c.id()), "nothing was signalled");
    reap(c);
}

#[test]
fn the_journal_names_the_real_user_and_labels_what_the_environment_claims() {
    let dir = tempfile::tempdir().unwrap();
    let c = sleeper();
    let o = run(
        partop()
            .env("XDG_STATE_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .env("USER", "mallory")
            .env("SUDO_USER", "alice\u{1b}[2J")
            .args(["kill", "--yes", "--grace", "2", &c.id().to_string()]),
        "",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let (j, _) = partop::exec::journal::read(&dir.path().join("partop/journal.jsonl")).unwrap();
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .name;
    assert_eq!(j[0].who.user.as_deref(), Some(me.as_str()));
    assert_ne!(j[0].who.user.as_deref(), Some("mallory"));
    assert_eq!(j[0].who.sudo_user.as_deref(), Some("alice\\x1b[2J"));
    let o = run(
        partop()
            .env("XDG_STATE_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .arg("journal"),
        "",
    );
    assert!(
        o.stdout
            .contains(&format!("{me} (SUDO_USER=alice\\x1b[2J)")),
        "{}",
        o.stdout
    );
    assert!(!o.stdout.contains('\u{1b}'));
    let mut c = c;
    let _ = c.wait();
}

#[test]
fn a_process_name_with_escape_sequences_is_printed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let evil = dir.path().join("\u{1b}]0;owned\u{7}x");
    std::fs::copy("/bin/sleep", &evil).unwrap();
    let c = Command::new(&evil).arg("60").spawn().unwrap();
    let o = run(
        partop()
            .env("XDG_STATE_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .args(["kill", "--dry-run", &c.id().to_string()]),
        "",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        !o.stdout.contains('\u{1b}') && !o.stdout.contains('\u{7}'),
        "{:?}",
        o.stdout
    );
    assert!(o.stdout.contains("\\x1b]0;owned\\x07x"), "{}", o.stdout);
    reap(c);
}

// ---------------------------------------------------------------------------------------------
// Repartition

#[test]
fn an_edited_plan_is_refused_and_its_extra_stop_untouched() {
    let e = SimEnv::new(&quick("edited", "7.0.2", "SPX", "NPS1", MODEL));
    let p = e.plan("--memory NPS2", "p.json");
    let victim = sleeper();
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let mut extra = v["stops"][0].clone();
    extra["pid"] = victim.id().into();
    extra["start_ticks"] = start_ticks(Path::new("/proc"), victim.id()).into();
    v["stops"].as_array_mut().unwrap().push(extra);
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let o = e.apply(&p, "--yes", "");
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("was changed after it was planned"),
        "{}",
        o.stderr
    );
    assert!(alive(victim.id()));
    assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
    reap(victim);
}

#[test]
fn a_plan_for_another_host_is_refused_even_with_a_recomputed_fingerprint() {
    let e = SimEnv::new(&quick("foreign", "7.0.2", "SPX", "NPS1", ""));
    let p = e.plan("--memory NPS2", "p.json");
    let mut plan: partop::domain::plan::Plan =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    plan.host = "gpu-node-17".into();
    plan.fingerprint = plan.content_fingerprint();
    std::fs::write(&p, serde_json::to_string(&plan).unwrap()).unwrap();
    let o = e.apply(&p, "--yes", "");
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("made for host gpu-node-17"),
        "{}",
        o.stderr
    );
    assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
}

#[test]
fn two_applies_at_once_one_runs_the_other_is_told_who_holds_the_node() {
    let scenario =
        quick("twice", "7.0.2", "SPX", "NPS1", "").replace("reload_secs = 0.3", "reload_secs = 2");
    let e = SimEnv::new(&scenario);
    let p = e.plan("--memory NPS2", "p.json");
    let q = e.plan("--memory NPS4 --compute CPX", "q.json");
    let first = e.spawn_apply(&p, "--yes");
    wait_until("the first apply to journal its start", || {
        e.journal().iter().any(|j| j.action == "repartition.start")
    });
    let second = e.apply(&q, "--yes", "");
    let same = e.apply(&p, "--yes", "");
    let first = output_of(first);
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    for o in [&second, &same] {
        assert_ne!(o.code, 0);
        assert!(
            o.stderr
                .contains("another change is running on this node: apply"),
            "{}",
            o.stderr
        );
    }
    assert_eq!(e.modes(), ("DPX".into(), "NPS2".into(), 16));
    assert_eq!(
        e.journal()
            .iter()
            .filter(|j| j.action == "repartition.start")
            .count(),
        1
    );
}

#[test]
fn no_journal_no_apply() {
    let e = SimEnv::new(&quick("nojournal", "7.0.2", "SPX", "NPS1", MODEL));
    let p = e.plan("--memory NPS2", "p.json");
    e.config("journal = \"/dev/full\"\n");
    let m = e.pid_of("m");
    let o = e.apply(&p, "--yes", "");
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("cannot write the audit journal"),
        "{}",
        o.stderr
    );
    assert!(alive(m), "no workload was stopped");
    assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
}

#[test]
fn a_config_that_does_not_parse_stops_every_command() {
    let e = SimEnv::new(&quick("badcfg", "7.0.2", "SPX", "NPS1", ""));
    let p = e.plan("--memory NPS2", "p.json");
    e.config("read_only = tru\n");
    let o = e.apply(&p, "--yes", "");
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("config.toml:1:"), "{}", o.stderr);
    assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
    e.config("grace_secs = 1e30\n");
    let o = e.apply(&p, "--yes", "");
    assert!(
        o.stderr
            .contains("grace_secs = 1000000000000000000000000000000 is out of range"),
        "{}",
        o.stderr
    );
}

/// A stuck holder (ignores SIGTERM) leaves a run failed at its stop step.
const STUCK: &str = "[[workload]]\nname = \"stuck\"\nkind = \"batch\"\ngpu = 1\npartition = 0\nvram_gb = 5\nignore_sigterm = true\n";

#[test]
fn a_resume_re_checks_the_node_and_refuses_a_new_holder() {
    let e = SimEnv::new(&quick("stale", "7.0.2", "SPX", "NPS1", STUCK));
    let p = e.plan("--memory NPS2", "p.json");
    let o = e.apply(&p, "--yes --grace 1", "");
    assert!(o.stdout.contains("step 1 (stop) failed"), "{}", o.stdout);
    // Someone starts using the GPUs meanwhile (holds /dev/kfd of the node).
    let kfd = e.node.state.with_extension("dev").join("kfd");
    let newcomer = Command::new("sh")
        .arg("-c")
        .arg(format!("exec 3<'{}'; exec sleep 60", kfd.display()))
        .spawn()
        .unwrap();
    wait_until("the newcomer to hold kfd", || {
        std::fs::read_dir(format!("/proc/{}/fd", newcomer.id()))
            .map(|d| {
                d.flatten()
                    .any(|f| std::fs::read_link(f.path()).is_ok_and(|l| l == kfd))
            })
            .unwrap_or(false)
    });
    let o = e.apply(&p, "--yes --grace 1 --resume --kill-after-grace", "");
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains(&format!("pid {} ", newcomer.id()))
            && o.stderr.contains("started after planning"),
        "{}",
        o.stderr
    );
    assert!(
        alive(newcomer.id()) && alive(e.pid_of("stuck")),
        "nothing stopped"
    );
    assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
    reap(newcomer);
}

#[test]
fn an_unfinished_apply_is_pointed_to_and_its_run_resumed_after_a_b_a() {
    let scenario =
        quick("aba", "7.0.2", "SPX", "NPS1", "").replace("reload_secs = 0.3", "reload_secs = 2");
    let e = SimEnv::new(&scenario);
    let a_to_b = e.plan("--memory NPS2", "ab.json");
    assert_eq!(e.apply(&a_to_b, "--yes", "").code, 0);
    let b_to_a = e.plan("--memory NPS1 --compute SPX", "ba.json");
    assert_eq!(e.apply(&b_to_a, "--yes", "").code, 0);
    // The same change again: same fingerprint as the first run.
    let again = e.plan("--memory NPS2", "ab2.json");
    let fp = |p: &Path| -> String {
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(p).unwrap()).unwrap()
            ["fingerprint"]
            .as_str()
            .unwrap()
            .into()
    };
    assert_eq!(fp(&again), fp(&a_to_b));
    let mut child = e.spawn_apply(&again, "--yes");
    wait_until("set_memory done in the third run", || {
        let j = e.journal();
        let starts = j.iter().filter(|x| x.action == "repartition.start").count();
        starts == 3
            && j.iter().rev().any(|x| {
                x.action == "repartition.step"
                    && x.targets["key"] == "set_memory"
                    && x.outcome["ok"] == true
            })
            && j.iter()
                .filter(|x| {
                    x.action == "repartition.step"
                        && x.targets["key"] == "set_memory"
                        && x.outcome["ok"] == true
                })
                .count()
                == 3
    });
    child.kill().unwrap();
    child.wait().unwrap();
    // The killed run's reload finishes by itself (the driver comes back); then plan.
    wait_until("the driver to be back", || {
        run(
            e.cmd()
                .args(["plan", "--memory", "NPS4", "--compute", "CPX"]),
            "",
        )
        .code
            == 0
    });
    // A fresh apply of anything is refused while a run is unfinished, with the way on.
    let other = e.plan("--memory NPS4 --compute CPX", "other.json");
    let plan_out = run(
        e.cmd()
            .args(["plan", "--memory", "NPS4", "--compute", "CPX"]),
        "",
    );
    assert!(
        plan_out.stderr.contains("unfinished repartition"),
        "{}",
        plan_out.stderr
    );
    let o = e.apply(&other, "--yes", "");
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("unfinished repartition")
            && o.stderr.contains(&format!(
                "--sim-state {} ",
                std::fs::canonicalize(&e.node.state).unwrap().display()
            ))
            && o.stderr.contains(&format!(
                " apply {} --grace 10 --resume`",
                std::fs::canonicalize(&again).unwrap().display()
            )),
        "{}",
        o.stderr
    );
    let j = run(e.cmd().arg("journal"), "");
    assert!(j.stdout.contains("unfinished repartition"), "{}", j.stdout);
    // The resume continues the third run, not the completed first one.
    let o = e.apply(&again, "--yes --resume", "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        !o.stdout.contains("already applied completely"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("at step 3 (reload)"), "{}", o.stdout);
    assert_eq!(e.modes(), ("DPX".into(), "NPS2".into(), 16));
    let o = e.apply(&again, "--yes --resume", "");
    assert!(
        o.stdout.contains("already applied completely"),
        "{}",
        o.stdout
    );
}

#[test]
fn a_resume_during_relaunch_does_not_start_a_model_twice() {
    let e = SimEnv::new(&quick("relaunch", "7.0.2", "SPX", "NPS1", MODEL));
    let p = e.plan("--memory NPS2", "p.json");
    let o = e.apply(&p, "--yes --grace 3", "");
    assert_eq!(o.code, 0, "{}", o.stdout);
    // Cut the journal back to "killed during the relaunch step, after the model started".
    let path = e.journal_path();
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            !(v["action"] == "repartition.done"
                || v["action"] == "repartition.step"
                    && v["targets"]["key"] == "relaunch"
                    && v["outcome"]["ok"].is_boolean())
        })
        .collect();
    std::fs::write(&path, kept.join("\n") + "\n").unwrap();
    let servers = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|d| {
                std::fs::read(d.path().join("environ")).is_ok_and(|env| {
                    String::from_utf8_lossy(&env).contains(&e.node.state.display().to_string())
                }) && std::fs::read_to_string(d.path().join("cmdline"))
                    .is_ok_and(|c| c.contains("vllm") && c.contains("org/model"))
            })
            .count()
    };
    let before = servers();
    let o = e.apply(&p, "--yes --resume", "");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("already healthy on logical GPU"),
        "{}",
        o.stdout
    );
    assert_eq!(servers(), before, "no second server on the same port");
}

#[test]
fn the_rehearsal_restarts_only_what_the_plan_stopped_and_never_on_a_partition_too_small() {
    let big = "[[workload]]\nname = \"big\"\nkind = \"batch\"\ngpu = 2\nvram_gb = 72\nbusy = 30\n";
    let e = SimEnv::new(&quick(
        "exact",
        "7.0.2",
        "SPX",
        "NPS1",
        &format!("{MODEL}{big}"),
    ));
    // The batch job b ends before planning: the plan does not list it.
    let b = e.pid_of("b");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(b).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until("b to end", || !alive(b));
    let p = e.plan("--compute CPX --memory NPS4", "p.json");
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert!(
        !plan["stops"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["pid"] == b)
    );
    let o = e.apply(&p, "--yes --grace 3", "");
    assert_eq!(o.code, 0, "{}", o.stdout);
    let st = e.state();
    let idx = |n: &str| st.workloads.iter().position(|w| w.spec.name == n).unwrap();
    assert!(
        !st.alive(idx("b")),
        "a job the plan did not stop is not started"
    );
    assert!(
        !st.alive(idx("big")),
        "72 GiB does not fit a 24 GiB CPX/NPS4 partition"
    );
    // The plan said so before the confirmation: the batch job it stops does not come back
    // (issue 23: nothing outside the plan changes; a rehearsal restarts nothing it did not say).
    assert!(
        plan["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("does NOT come back")),
        "{}",
        plan["warnings"]
    );
    assert!(
        o.stdout.contains("not restarted, as planned"),
        "{}",
        o.stdout
    );
}

#[test]
fn read_only_removes_the_simulators_mutations_too() {
    let e = SimEnv::new(&quick("ro", "7.0.2", "SPX", "NPS1", MODEL));
    let m = e.pid_of("m");
    let o = run(
        partop()
            .args(["--read-only", "sim", "stop", "--state"])
            .arg(&e.node.state),
        "",
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    let o = run(
        partop()
            .args(["--read-only", "sim", "amd-smi", "--state"])
            .arg(&e.node.state)
            .args(["set", "-M", "NPS2"]),
        "Y\n",
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(alive(m));
    assert_eq!(e.modes(), ("SPX".into(), "NPS1".into(), 8));
}

// ---------------------------------------------------------------------------------------------
// Inputs and processes

#[test]
fn absurd_numbers_are_usage_errors_never_panics() {
    for args in [
        vec!["--refresh", "inf", "snapshot"],
        vec!["--refresh", "0", "snapshot"],
        vec!["--timeout", "1e30", "snapshot"],
        vec!["kill", "--grace", "1e19", "--dry-run", "1234"],
        vec!["kill", "--grace", "NaN", "--dry-run", "1234"],
    ] {
        let o = run(partop().args(&args), "");
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(
            o.stderr.contains("out of range") || o.stderr.contains("not a number"),
            "{args:?}: {}",
            o.stderr
        );
        assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    }
}

fn script(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("amd-smi");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn an_endless_amd_smi_is_capped_and_a_hung_one_is_killed_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let endless = script(dir.path(), "exec yes '{\"x\": 1}'");
    let t = Instant::now();
    let o = run(
        partop()
            .env("XDG_CONFIG_HOME", dir.path())
            .args(["--source", "amd-smi", "--timeout", "20", "--amd-smi"])
            .arg(&endless)
            .arg("snapshot"),
        "",
    );
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("printed more than 64 MiB"),
        "{}",
        o.stderr
    );
    assert!(t.elapsed() < Duration::from_secs(15));
    let marker = "987654";
    let hung = script(dir.path(), &format!("sleep {marker} & sleep {marker}"));
    let o = run(
        partop()
            .env("XDG_CONFIG_HOME", dir.path())
            .args(["--source", "amd-smi", "--timeout", "1", "--amd-smi"])
            .arg(&hung)
            .arg("snapshot"),
        "",
    );
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("timed out after 1s"), "{}", o.stderr);
    assert_eq!(
        running(&format!("sleep {marker}")),
        0,
        "the wrapper's children were killed with it"
    );
}

#[test]
fn a_blocking_kernel_file_makes_the_source_stale_never_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/mi300x-spx-nps1"),
        dir.path(),
    );
    let f = dir
        .path()
        .join("sys/devices/pci0000:00/0000:00:01.1/0000:0c:00.0/gpu_metrics");
    std::fs::remove_file(&f).unwrap();
    nix::unistd::mkfifo(&f, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let t = Instant::now();
    let o = run(
        partop()
            .env("XDG_CONFIG_HOME", dir.path())
            .args(["--source", "sysfs", "--sysfs-root"])
            .arg(dir.path().join("sys"))
            .arg("--proc-root")
            .arg(dir.path().join("proc"))
            .arg("snapshot"),
        "",
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("kernel file read took over 2s"),
        "{}",
        o.stderr
    );
}

/// Records the simulated node, rewrites the stdout of the recorded command starting with
/// `command` through `edit`, and runs `partop --replay` on it with `args`.
fn replay_edited(e: &SimEnv, command: &str, edit: impl Fn(&str) -> String, args: &[&str]) -> Out {
    let rec = e.node.dir.path().join("rec.json");
    let o = run(e.cmd().arg("record").arg("--out").arg(&rec), "");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rec).unwrap()).unwrap();
    let outputs = v["outputs"].as_object_mut().unwrap();
    let key = outputs
        .keys()
        .find(|k| k.starts_with(command))
        .unwrap()
        .clone();
    let edited = edit(outputs[&key]["stdout"].as_str().unwrap());
    outputs.get_mut(&key).unwrap()["stdout"] = edited.into();
    std::fs::write(&rec, serde_json::to_string(&v).unwrap()).unwrap();
    run(
        partop()
            .env("XDG_CONFIG_HOME", e.xdg())
            .arg("--replay")
            .arg(&rec)
            .args(args),
        "",
    )
}

#[test]
fn nan_from_python_json_is_na_for_that_value_only() {
    let e = SimEnv::new(&quick("nan", "7.0.2", "SPX", "NPS1", MODEL));
    // The first GFX activity value becomes Python's NaN.
    let nan = |text: &str| {
        let at = text.find("\"gfx_activity\"").unwrap();
        let vstart = at + text[at..].find("\"value\": ").unwrap() + "\"value\": ".len();
        let vend = vstart + text[vstart..].find([',', '\n']).unwrap();
        format!("{}NaN{}", &text[..vstart], &text[vend..])
    };
    let o = replay_edited(&e, "metric", nan, &["snapshot", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let s: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let busy: Vec<&serde_json::Value> = s["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["partitions"][0]["gfx_busy_percent"])
        .collect();
    assert!(busy[0].is_null(), "the NaN value is N/A");
    assert!(busy[1..].iter().all(|b| b.is_number()), "the others stay");
}

#[test]
fn gpu_count_disagreement_is_said_not_shown_as_zero_gpus() {
    let e = SimEnv::new(&quick("count", "7.0.2", "SPX", "NPS1", ""));
    let one_less = |text: &str| {
        let mut list: serde_json::Value = serde_json::from_str(text).unwrap();
        list.as_array_mut().unwrap().pop();
        serde_json::to_string(&list).unwrap()
    };
    let o = replay_edited(&e, "list", one_less, &["snapshot"]);
    assert!(
        o.stderr
            .contains("amd-smi list shows 7 GPUs and amd-smi metric 8"),
        "{}{}",
        o.stdout,
        o.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// The journal reader

mod journal_reader {
    use partop::exec::journal::{Entry, append, parse, read};
    use proptest::prelude::*;
    use std::io::Write as _;

    fn entry(n: u32) -> Entry {
        Entry::new(
            "kill.sigterm",
            true,
            serde_json::json!([{"pid": n}]),
            serde_json::json!({"n": n}),
        )
    }

    #[test]
    fn a_torn_line_never_swallows_the_next_entry_and_bad_bytes_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal.jsonl");
        append(&p, &entry(1)).unwrap();
        // A crash mid-write: no newline at the end.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"{\"at\": \"2026-11")
            .unwrap();
        append(&p, &entry(2)).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"\xff\xfe not utf-8\n")
            .unwrap();
        append(&p, &entry(3)).unwrap();
        let (e, bad) = read(&p).unwrap();
        assert_eq!(
            e.iter()
                .map(|x| x.outcome["n"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(
            bad.iter().any(|b| b.contains(":2:")) && bad.iter().any(|b| b.contains("not UTF-8"))
        );
    }

    #[test]
    fn an_old_merged_line_gives_back_its_entry() {
        let whole = serde_json::to_string(&entry(7)).unwrap();
        let (e, bad) = parse("j", format!("{{\"at\": \"20{whole}\n").as_bytes());
        assert_eq!(e.len(), 1);
        assert_eq!(bad.len(), 1);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_and_whole_lines_survive(
            junk in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..8),
            n in 1u32..5,
        ) {
            let mut bytes = Vec::new();
            let mut want = 0;
            for (i, j) in junk.iter().enumerate() {
                let clean: Vec<u8> = j.iter().copied().filter(|b| *b != b'\n').collect();
                bytes.extend_from_slice(&clean);
                bytes.push(b'\n');
                if (i as u32) < n {
                    bytes.extend_from_slice(serde_json::to_string(&entry(i as u32)).unwrap().as_bytes());
                    bytes.push(b'\n');
                    want += 1;
                }
            }
            let (e, _) = parse("j", &bytes);
            prop_assert!(e.len() >= want);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The monitor: a recording is look-only; SIGTSTP leaves a usable terminal.

use common::tmux::Session as Tmux;

#[test]
fn a_replay_is_look_only_and_says_so() {
    let e = SimEnv::new(&quick("replay", "7.0.2", "SPX", "NPS1", MODEL));
    let rec = e.node.dir.path().join("rec.json");
    assert_eq!(
        run(e.cmd().arg("record").arg("--out").arg(&rec), "").code,
        0
    );
    let m = e.pid_of("m");
    let t = Tmux::new(
        "replay",
        &format!(
            "env XDG_STATE_HOME={x} XDG_CONFIG_HOME={x} {bin} --replay {rec}; echo EXITED $?; sleep 30",
            x = e.xdg().display(),
            bin = env!("CARGO_BIN_EXE_partop"),
            rec = rec.display()
        ),
        120,
        40,
    );
    t.wait_for("REPLAY of");
    t.wait_for("look only");
    // Processes view, the model server selected, K then confirm: nothing may happen.
    t.keys(&[
        "3", "Down", "Down", "K", "Tab", "Enter", "Enter", "p", "Enter",
    ]);
    std::thread::sleep(Duration::from_millis(500));
    let s = t.screen();
    assert!(!s.contains("Terminate") && !s.contains("Stage a"), "{s}");
    t.keys(&["?"]);
    t.wait_for("Help");
    let help = t.screen();
    assert!(
        !help.contains("terminate"),
        "mutating commands are absent from help: {help}"
    );
    // The Enters above opened Detail: the first q goes back from it, the second quits.
    t.keys(&["Escape", "q", "q"]);
    t.wait_for("EXITED 0");
    assert!(
        alive(m),
        "a live process whose pid was in the recording is untouched"
    );
    assert!(
        e.journal().is_empty(),
        "nothing was journaled, so nothing was done"
    );
}

#[test]
fn sigtstp_then_fg_gives_back_a_working_screen() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tmux::new("tstp", "bash --norc --noprofile -i", 120, 40);
    t.keys(&[
        &format!(
            "XDG_STATE_HOME={d} XDG_CONFIG_HOME={d} {bin} --sim",
            d = dir.path().display(),
            bin = env!("CARGO_BIN_EXE_partop")
        ),
        "Enter",
    ]);
    t.wait_for("SIMULATED");
    let shell = t.pane_pid();
    let partop_pid: u32 = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let state = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(") ").next().and_then(|r| r.chars().next()))
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(partop_pid).unwrap()),
        nix::sys::signal::Signal::SIGTSTP,
    )
    .unwrap();
    t.wait_for("Stopped");
    assert_eq!(state(partop_pid), Some('T'));
    assert!(
        !t.screen().contains("SIMULATED"),
        "the shell's screen is back while stopped"
    );
    t.keys(&["fg", "Enter"]);
    t.wait_for("SIMULATED");
    // Raw mode is back: a single q, without Enter, quits.
    t.keys(&["q"]);
    wait_until("partop to exit on a lone q", || {
        state(partop_pid).is_none_or(|c| c == 'Z')
    });
}

#[test]
fn nvidia_smi_output_larger_than_a_pipe_is_read_and_a_hung_one_is_killed_with_its_group() {
    use partop::collect::nvidia::smi::NvidiaSmi;
    let dir = tempfile::tempdir().unwrap();
    let big = script(dir.path(), "head -c 300000 /dev/zero | tr '\\0' 'x'");
    let smi = NvidiaSmi {
        program: big,
        prefix: vec![],
        timeout: Duration::from_secs(10),
    };
    let t = Instant::now();
    let (code, out, _) = smi.run(&["-q", "-x"]).unwrap();
    assert_eq!((code, out.len()), (0, 300_000));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "no stall on a full pipe"
    );
    let marker = "876543";
    let hung = script(dir.path(), &format!("sleep {marker} & sleep {marker}"));
    let smi = NvidiaSmi {
        program: hung,
        prefix: vec![],
        timeout: Duration::from_secs(1),
    };
    let e = smi.run(&["-q", "-x"]).unwrap_err();
    assert!(e.contains("was killed (with its process group)"), "{e}");
    wait_until("the wrapper's children to be gone", || {
        running(&format!("sleep {marker}")) == 0
    });
}
