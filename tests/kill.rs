//! Terminating processes, against real processes the tests start: the executor's checks and the
//! `partop kill` command (plan, "yes", dry run, read-only, permission errors, journal).
#![allow(clippy::unwrap_used, reason = "tests panic on failure")]

mod common;
use common::{partop, run, wait_until};
use partop::domain::kill::{Sig, Target};
use partop::exec::kill::{KillEvent, KillJob};
use partop::exec::signal::{Outcome, send, start_ticks, target_from_proc};
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

fn proc_root() -> &'static Path {
    Path::new("/proc")
}

fn sleeper() -> Child {
    Command::new("sleep").arg("60").spawn().unwrap()
}

/// A shell that ignores SIGTERM (only SIGKILL ends it).
fn stubborn() -> Child {
    let mut c = Command::new("sh")
        .args([
            "-c",
            "trap '' TERM; echo ready; while :; do sleep 0.1; done",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // It ignores SIGTERM once it has said so: wait for its "ready", never a fixed sleep.
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(c.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ready");
    c
}

fn target(c: &Child) -> Target {
    target_from_proc(proc_root(), c.id()).unwrap()
}

fn job(
    targets: Vec<Target>,
    sig: Sig,
    grace_ms: u64,
    dir: &Path,
) -> (Vec<KillEvent>, std::path::PathBuf) {
    let journal = dir.join("journal.jsonl");
    let j = KillJob {
        targets,
        sig,
        grace: Duration::from_millis(grace_ms),
        proc_root: proc_root().into(),
        journal: journal.clone(),
        simulated: false,
    };
    let mut ev = Vec::new();
    partop::exec::kill::run(&j, |e| ev.push(e)).unwrap();
    (ev, journal)
}

#[test]
fn sigterm_ends_a_process_that_honours_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = sleeper();
    let pid = c.id();
    let (ev, journal) = job(vec![target(&c)], Sig::Term, 5000, dir.path());
    assert!(
        ev.contains(&KillEvent::Signalled {
            sig: Sig::Term,
            results: vec![(pid, Outcome::Sent)]
        }),
        "{ev:?}"
    );
    assert!(ev.contains(&KillEvent::Exited(pid)));
    assert_eq!(
        ev.last(),
        Some(&KillEvent::Done {
            sig: Sig::Term,
            alive: vec![]
        })
    );
    c.wait().unwrap();
    let (entries, bad) = partop::exec::journal::read(&journal).unwrap();
    assert!(bad.is_empty());
    assert_eq!(
        entries
            .iter()
            .map(|e| e.action.as_str())
            .collect::<Vec<_>>(),
        vec!["kill.sigterm", "kill.sigterm.sent", "kill.sigterm.result"],
        "journal first: the intent before the signal, then what happened"
    );
    assert_eq!(entries[0].targets[0]["pid"], pid);
    assert_eq!(entries[0].outcome["state"], "sending");
    assert_eq!(entries[1].outcome[pid.to_string()]["outcome"], "sent");
}

#[test]
fn a_process_ignoring_sigterm_needs_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = stubborn();
    let t = target(&c);
    let (ev, _) = job(vec![t.clone()], Sig::Term, 600, dir.path());
    assert_eq!(
        ev.last(),
        Some(&KillEvent::Done {
            sig: Sig::Term,
            alive: vec![c.id()]
        }),
        "still alive after the grace"
    );
    let (ev, _) = job(vec![t], Sig::Kill, 3000, dir.path());
    assert_eq!(
        ev.last(),
        Some(&KillEvent::Done {
            sig: Sig::Kill,
            alive: vec![]
        })
    );
    c.wait().unwrap();
}

#[test]
fn a_reused_pid_is_never_signalled() {
    let mut c = sleeper();
    let mut t = target(&c);
    // The operator saw a process with another start time under this pid.
    t.start_ticks = t.start_ticks.map(|s| s + 1);
    assert_eq!(send(proc_root(), &t, Sig::Kill), Outcome::Reused);
    assert!(
        start_ticks(proc_root(), c.id()).is_some(),
        "the process that now has the pid is untouched"
    );
    c.kill().unwrap();
    c.wait().unwrap();
}

#[test]
fn a_target_that_exited_by_itself_is_reported_not_signalled() {
    let mut c = sleeper();
    let t = Target {
        pid: c.id(),
        start_ticks: start_ticks(proc_root(), c.id()),
        ..Target::default()
    };
    assert!(t.start_ticks.is_some());
    c.kill().unwrap();
    c.wait().unwrap();
    assert_eq!(send(proc_root(), &t, Sig::Term), Outcome::Gone);
}

#[test]
fn partop_itself_and_init_are_refused() {
    let me = target_from_proc(proc_root(), std::process::id()).unwrap();
    // The executor's own process is the test binary here; partop refuses its own pid.
    assert!(matches!(
        send(proc_root(), &me, Sig::Term),
        Outcome::Refused(_)
    ));
    assert!(matches!(
        send(
            proc_root(),
            &Target {
                pid: 1,
                ..Target::default()
            },
            Sig::Term
        ),
        Outcome::Refused(_)
    ));
    let o = run(partop().args(["kill", "--yes", "1"]), "");
    assert_eq!(o.code, 1);
    assert!(
        o.stdout.contains("pid 1 (init) is never signalled"),
        "{}",
        o.stdout
    );
}

#[test]
fn the_cli_shows_the_plan_and_needs_yes() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = sleeper();
    let pid = c.id().to_string();
    let env = |cmd: &mut Command| {
        cmd.env("XDG_STATE_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path());
    };
    let mut k = partop();
    env(&mut k);
    let o = run(k.args(["kill", "--dry-run", &pid]), "");
    assert_eq!(o.code, 0);
    assert!(
        o.stdout.contains("SIGTERM will be sent to")
            && o.stdout.contains("sleep")
            && o.stdout.contains("dry run: nothing sent"),
        "{}",
        o.stdout
    );
    let mut k = partop();
    env(&mut k);
    let o = run(k.args(["kill", &pid]), "no\n");
    assert_eq!(o.code, 1);
    assert!(o.stdout.contains("cancelled: nothing sent"));
    let mut k = partop();
    env(&mut k);
    let o = run(k.args(["--read-only", "kill", "--yes", &pid]), "");
    assert_eq!(o.code, 2);
    assert!(o.stdout.contains("read-only"));
    assert!(
        start_ticks(proc_root(), c.id()).is_some(),
        "still running after dry run, no and read-only"
    );
    let mut k = partop();
    env(&mut k);
    let o = run(k.args(["kill", "--grace", "5", &pid]), "yes\n");
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert!(
        o.stdout.contains("signal sent") && o.stdout.contains("exited"),
        "{}",
        o.stdout
    );
    c.wait().unwrap();
    let mut k = partop();
    env(&mut k);
    let o = run(k.arg("journal"), "");
    assert!(
        o.stdout.contains("kill.sigterm") && o.stdout.contains(&pid),
        "{}",
        o.stdout
    );
}

#[test]
fn permission_denied_is_explained() {
    if Command::new("setpriv").arg("--version").output().is_err()
        || !nix::unistd::geteuid().is_root()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root with setpriv available"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let mut c = sleeper();
    let o = run(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                env!("CARGO_BIN_EXE_partop"),
                "kill",
                "--yes",
                "--grace",
                "1",
            ])
            .arg(c.id().to_string())
            .env("HOME", dir.path())
            .env("XDG_STATE_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path()),
        "",
    );
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("permission denied") && o.stdout.contains("sudo"),
        "{}",
        o.stdout
    );
    assert!(start_ticks(proc_root(), c.id()).is_some());
    c.kill().unwrap();
    c.wait().unwrap();
}

#[test]
fn the_simulator_stubborn_workload_through_the_executor() {
    let n = common::Node::start("stubborn-process");
    let st = partop::sim::state::SimState::load(&n.state).unwrap();
    let pid = st.workloads[0].pid.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let t = target_from_proc(proc_root(), pid).unwrap();
    let (ev, _) = job(vec![t.clone()], Sig::Term, 500, dir.path());
    assert_eq!(
        ev.last(),
        Some(&KillEvent::Done {
            sig: Sig::Term,
            alive: vec![pid]
        })
    );
    // While it lives, the simulated node refuses a compute change (BUSY; in NPS2 only DPX is valid).
    assert!(
        n.amd("set -g 2 -C DPX", "")
            .stderr
            .contains("AMDSMI_STATUS_BUSY")
    );
    job(vec![t], Sig::Kill, 3000, dir.path());
    wait_until("the workload to be gone", || {
        !partop::sim::state::SimState::load(&n.state)
            .unwrap()
            .alive(0)
    });
    assert_eq!(n.amd("set -g 2 -C DPX", "").code, 0);
}
