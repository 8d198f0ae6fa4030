//! Starting and stopping served models the way their registry entry says: a detached command
//! (its own process group and session-independent, so it outlives partop and an SSH drop)
//! logging to a file, a systemd unit, or a docker container; then a bounded wait for its
//! `/health`, with progress. Every start and stop is journaled.

use super::journal;
use super::runlog;
use crate::collect::ports;
use crate::collect::served::{http, prober::log_path};
use crate::domain::journal::{ModelEvent, ModelStart, ModelStop, Runs};
use crate::domain::models::{Launch, ModelSpec};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where and how model starts and stops are done and recorded.
#[derive(Debug, Clone)]
pub struct Ops {
    /// Default log directory of launched models.
    pub log_dir: std::path::PathBuf,
    /// The journal.
    pub journal: std::path::PathBuf,
    /// The node is simulated (journal flag).
    pub simulated: bool,
    /// SIGTERM grace for signal stops.
    pub grace: Duration,
    /// SIGKILL after the grace period is allowed.
    pub kill_after: bool,
}

/// What a launch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launched {
    /// The process partop started (command launches).
    pub pid: Option<u32>,
    /// What was run, as text.
    pub what: String,
    /// The log file.
    pub log: String,
}

fn run_status(argv: &[String]) -> Result<(), String> {
    let (prog, args) = argv.split_first().ok_or("empty command")?;
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{prog}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} exited with {}: {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Starts `spec` on logical GPUs `devices` (indices now) / `bdfs`. Journaled.
pub fn launch(
    ops: &Ops,
    spec: &ModelSpec,
    devices: &[u32],
    bdfs: &[String],
) -> Result<Launched, String> {
    let what = spec.launch_text(devices, bdfs);
    let log = log_path(spec, &ops.log_dir);
    // Its port must be free: a server already there (this model started before, or another
    // program) would make a second start fail, or answer the health check in its place.
    if let Some((pid, _)) = ports::listener(Path::new("/proc"), spec.port) {
        return Err(format!(
            "port {} is already served by pid {pid} ({}): {} runs already, or another program holds its port; nothing was started",
            spec.port,
            process_name(pid),
            spec.name
        ));
    }
    let started = ModelStart {
        model: spec.name.clone(),
        devices: devices.to_vec(),
        bdfs: bdfs.to_vec(),
        command: what.clone(),
    };
    runlog::model(
        &ops.journal,
        &ModelEvent::Starting(started.clone()),
        ops.simulated,
    )
    .map_err(|e| e.to_string())?;
    let r = match &spec.launch {
        Launch::Command { command, env, .. } => (|| {
            if let Some(d) = log.parent() {
                std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
            }
            let out = crate::exec::safe_file::append(&log, false).map_err(|e| e.to_string())?;
            let err = out.try_clone().map_err(|e| e.to_string())?;
            let argv: Vec<String> = command
                .iter()
                .map(|a| spec.expand(a, devices, bdfs))
                .collect();
            let (prog, args) = argv.split_first().ok_or("empty command")?;
            let mut cmd = Command::new(prog);
            cmd.args(args)
                .env(
                    "HIP_VISIBLE_DEVICES",
                    spec.expand("{device}", devices, bdfs),
                )
                .env_remove("ROCR_VISIBLE_DEVICES")
                .envs(env.iter().map(|(k, v)| (k, spec.expand(v, devices, bdfs))))
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                // Its own process group: a Ctrl-C or hang-up in partop's terminal does not
                // reach it; it outlives partop.
                .process_group(0);
            let mut child = cmd.spawn().map_err(|e| format!("{prog}: {e}"))?;
            let pid = child.id();
            std::thread::spawn(move || child.wait());
            Ok(Some(pid))
        })(),
        Launch::Systemd { unit } => run_status(&[
            "systemctl".into(),
            "start".into(),
            spec.expand(unit, devices, bdfs),
        ])
        .map(|()| None),
        // Exactly the argv the confirmation showed (`docker run` with the GPU's devices).
        Launch::Docker { .. } => run_status(&spec.launch_argv(devices, bdfs)).map(|()| None),
    };
    let result = r.clone().map(|pid| (pid, log.display().to_string()));
    let _ = runlog::model(
        &ops.journal,
        &ModelEvent::Started(started, result),
        ops.simulated,
    );
    r.map(|pid| Launched {
        pid,
        what,
        log: log.display().to_string(),
    })
}

/// Stops `spec` by its registry's way (stop command, systemd, docker) or, for a plain
/// command, SIGTERM to `pid` (start time checked), waiting up to `grace` for it to exit and
/// sending SIGKILL after only when `kill_after` is set. Journaled.
pub fn stop(
    ops: &Ops,
    spec: &ModelSpec,
    devices: &[u32],
    bdfs: &[String],
    pid: Option<(u32, Option<u64>)>,
) -> Result<String, String> {
    let what = spec.stop_text(devices, bdfs, pid.map(|p| p.0));
    let stopped = ModelStop {
        model: spec.name.clone(),
        pid: pid.map(|p| p.0),
        command: what,
    };
    runlog::model(
        &ops.journal,
        &ModelEvent::Stopping(stopped.clone()),
        ops.simulated,
    )
    .map_err(|e| e.to_string())?;
    let r = match &spec.launch {
        Launch::Command { stop: Some(s), .. } => {
            let argv: Vec<String> = s.iter().map(|a| spec.expand(a, devices, bdfs)).collect();
            run_status(&argv).map(|()| "stopped by its stop command".to_string())
        }
        Launch::Systemd { unit } => run_status(&[
            "systemctl".into(),
            "stop".into(),
            spec.expand(unit, devices, bdfs),
        ])
        .map(|()| "unit stopped".into()),
        Launch::Docker { container, .. } => run_status(&[
            "docker".into(),
            "stop".into(),
            spec.expand(container, devices, bdfs),
        ])
        .map(|()| "container stopped".into()),
        Launch::Command { stop: None, .. } => match pid {
            None => Ok("not running".into()),
            Some((pid, ticks)) => signal_stop(pid, ticks, ops.grace, ops.kill_after),
        },
    };
    let _ = runlog::model(
        &ops.journal,
        &ModelEvent::Stopped(stopped, r.clone()),
        ops.simulated,
    );
    r
}

fn signal_stop(
    pid: u32,
    ticks: Option<u64>,
    grace: Duration,
    kill_after: bool,
) -> Result<String, String> {
    use crate::domain::kill::{Sig, Target};
    use crate::exec::signal::Outcome;
    let proc_root = Path::new("/proc");
    let t = Target {
        pid,
        start_ticks: ticks,
        user: None,
        name: None,
        gpus: vec![],
        vram_bytes: 0,
        model: None,
        agent: None,
    };
    let pinned = match crate::exec::signal::pin(proc_root, &t) {
        Ok(p) => p,
        Err(Outcome::Gone) => return Ok("already gone".into()),
        Err(other) => return Err(other.explain(pid)),
    };
    match pinned.send(Sig::Term) {
        Outcome::Sent => {}
        Outcome::Gone => return Ok("already gone".into()),
        other => return Err(other.explain(pid)),
    }
    let end = Instant::now() + grace;
    while Instant::now() < end {
        if pinned.exited() {
            return Ok(format!("pid {pid} exited after SIGTERM"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !kill_after {
        return Err(format!(
            "pid {pid} is still running {}s after SIGTERM; SIGKILL was not allowed",
            grace.as_secs()
        ));
    }
    let _ = pinned.send(Sig::Kill);
    std::thread::sleep(Duration::from_millis(100));
    Ok(format!("pid {pid} killed after the grace period"))
}

/// The name of `pid` (its `comm`), or `?`.
fn process_name(pid: u32) -> String {
    crate::collect::small_file::proc_text(&Path::new("/proc").join(pid.to_string()).join("comm"))
        .map_or_else(
            |_| "?".into(),
            |c| crate::domain::text::escape_controls(c.trim()).into_owned(),
        )
}

/// A health answer counts only when it can come from the server partop started: the process
/// listening on the model's port is of the launch's process group (`group`); or the listener
/// is a container's (its cgroup names one, or it is a runtime's port proxy: `docker run`'s
/// server belongs to the runtime, not to the launch) while something of the launch still runs;
/// or no listener can be seen (another network namespace) while something of the launch runs.
/// A plain program that took the port while the launch was starting is refused (it once passed
/// as healthy because the launch was still running). The port was free when the launch began
/// (`launch` refuses a taken one). A launch by systemd or docker (no process of partop's) is
/// taken as it answers.
fn answered_by_ours(spec: &ModelSpec, group: Option<u32>) -> Result<(), String> {
    let Some(g) = group else {
        return Ok(());
    };
    let proc_root = Path::new("/proc");
    let owner = ports::listener(proc_root, spec.port);
    if owner.is_some_and(|(o, og)| o == g || og == Some(g)) {
        return Ok(());
    }
    let ours_alive = crate::exec::signal::start_ticks(proc_root, g).is_some()
        || ports::group_member(proc_root, g).is_some();
    let may_be_ours = owner.is_none_or(|(o, _)| containerised(proc_root, o));
    if ours_alive && may_be_ours {
        return Ok(());
    }
    if ours_alive && let Some((o, _)) = owner {
        return Err(format!(
            "{}: port {} answers, but from pid {o} ({}), not the server partop started (pid {g}, still running); stop that program, then start {} again",
            spec.name,
            spec.port,
            process_name(o),
            spec.name
        ));
    }
    Err(format!(
        "{}: port {} answers, but the server partop started (pid {g}) has exited{}; stop that program, then start {} again",
        spec.name,
        spec.port,
        owner.map_or_else(String::new, |(o, _)| format!(
            " and pid {o} ({}) holds the port",
            process_name(o)
        )),
        spec.name
    ))
}

/// Whether `pid` runs in a container other than partop's own (its cgroup names one: partop
/// itself may run in a pod, where every process around it is in that container) or is a
/// container runtime's port proxy: a server `docker run` (or podman, nerdctl) started for a
/// launch.
fn containerised(proc_root: &Path, pid: u32) -> bool {
    const PROXIES: [&str; 4] = ["docker-proxy", "rootlessport", "conmon", "slirp4netns"];
    let dir = proc_root.join(pid.to_string());
    let theirs = container_of(&dir);
    let in_other_container = theirs.is_some() && theirs != own_container(proc_root);
    in_other_container
        || crate::collect::small_file::proc_text(&dir.join("comm"))
            .is_ok_and(|c| PROXIES.contains(&c.trim()))
}

/// The container a /proc process directory's cgroup names, if any.
fn container_of(dir: &Path) -> Option<String> {
    crate::collect::small_file::proc_text(&dir.join("cgroup"))
        .ok()
        .and_then(|t| crate::domain::cgroup::parse(&t).container_full)
}

/// partop's own container (`self/cgroup` under the proc root), read once per process: a
/// process does not change container, and a health check runs every second while a model
/// starts. Another proc root than the one first asked (a test's) is read each time.
fn own_container(proc_root: &Path) -> Option<String> {
    static OWN: OnceLock<(PathBuf, Option<String>)> = OnceLock::new();
    let (root, own) = OWN.get_or_init(|| {
        (
            proc_root.to_path_buf(),
            container_of(&proc_root.join("self")),
        )
    });
    if root == proc_root {
        own.clone()
    } else {
        container_of(&proc_root.join("self"))
    }
}

/// Waits until `spec`'s `/health` answers 200, at most its `health_timeout_secs` (or `limit`,
/// if shorter), calling `progress` about once a second. On failure, the last error and the
/// log's tail.
pub fn wait_healthy(
    spec: &ModelSpec,
    pid: Option<u32>,
    log_dir: &Path,
    limit: Option<Duration>,
    mut progress: impl FnMut(&str),
) -> Result<Duration, String> {
    let t0 = Instant::now();
    let max = Duration::from_secs(spec.health_timeout_secs);
    let max = limit.map_or(max, |l| l.min(max));
    let mut last;
    let mut told = Instant::now();
    // The process partop started, and its process group: a launch command that forks the
    // server and exits leaves the server in that group, and it is the server then.
    let group = pid;
    let mut pid = pid;
    loop {
        match http::get(&spec.health_url, Duration::from_millis(800)) {
            Ok(r) if r.status == 200 => match answered_by_ours(spec, group) {
                Ok(()) => return Ok(t0.elapsed()),
                Err(e) => return Err(e),
            },
            Ok(r) => last = format!("HTTP {}", r.status),
            Err(e) => last = e,
        }
        if let Some(p) = pid
            && crate::exec::signal::start_ticks(Path::new("/proc"), p).is_none()
            && let Some(member) = group.and_then(|g| ports::group_member(Path::new("/proc"), g))
        {
            progress(&format!(
                "{}: the launch command (pid {p}) exited; pid {member} of its process group runs on: following it",
                spec.name
            ));
            pid = Some(member);
            continue;
        }
        if let Some(p) = pid
            && crate::exec::signal::start_ticks(Path::new("/proc"), p).is_none()
        {
            let tail = crate::collect::served::prober::tail(&log_path(spec, log_dir), 3);
            return Err(format!(
                "{} exited while starting (pid {p}); its log ends: {}",
                spec.name,
                tail.join(" | ")
            ));
        }
        if t0.elapsed() >= max {
            let tail = crate::collect::served::prober::tail(&log_path(spec, log_dir), 3);
            return Err(format!(
                "{} not healthy after {}s ({last}); its log ends: {}",
                spec.name,
                max.as_secs(),
                tail.join(" | ")
            ));
        }
        if told.elapsed() >= Duration::from_secs(1) {
            progress(&format!(
                "{}: waiting for {} ({last}, {}s)",
                spec.name,
                spec.health_url,
                t0.elapsed().as_secs()
            ));
            told = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What a start finds of a model already there (a resumed apply's relaunch: its first run
/// may have started it before it was interrupted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// It serves on its logical GPUs and answers its health check: not started again.
    Serving,
    /// A server partop launched for it (the journal says so) is still loading: waited for.
    Loading(Launched),
    /// Nothing of it: it is started.
    Absent,
}

/// Whether `spec` already serves on logical GPUs `ids` (as `snap` saw the node), or a server
/// partop launched for it is still loading, or neither.
pub fn found(
    ops: &Ops,
    proc_root: &Path,
    snap: &crate::domain::Snapshot,
    spec: &ModelSpec,
    ids: &[u32],
) -> Found {
    if serving_on(snap, spec, ids) && healthy(spec) {
        return Found::Serving;
    }
    match starting_on_port(proc_root, spec)
        .filter(|pid| launched_by_partop(&ops.journal, &spec.name, *pid))
    {
        Some(pid) => Found::Loading(Launched {
            pid: Some(pid),
            what: format!("pid {pid}, already started"),
            log: String::new(),
        }),
        None => Found::Absent,
    }
}

/// Whether `spec`'s `/health` answers 200 now (one bounded request).
pub fn healthy(spec: &ModelSpec) -> bool {
    http::get(&spec.health_url, Duration::from_millis(800)).is_ok_and(|r| r.status == 200)
}

/// Whether a process serving on `spec`'s port holds every one of logical GPUs `ids`.
fn serving_on(snap: &crate::domain::Snapshot, spec: &ModelSpec, ids: &[u32]) -> bool {
    snap.processes.iter().any(|p| {
        p.command
            .as_deref()
            .and_then(|c| {
                let (server, _) = crate::domain::served::model_of(c)?;
                crate::domain::served::port_of(c, server)
            })
            .is_some_and(|port| port == spec.port)
            && ids
                .iter()
                .all(|id| p.gpus.iter().any(|u| u.gpu_id == *id && !u.attached_only()))
    })
}

/// A live process that serves on `spec`'s port by its own command line (a server started
/// before an interruption that has not opened its GPU yet, so the snapshot does not list it;
/// servers often rename themselves, vLLM's `vllm serve MODEL --port P`, so the port is what
/// names it).
fn starting_on_port(proc_root: &Path, spec: &ModelSpec) -> Option<u32> {
    let me = std::process::id();
    std::fs::read_dir(proc_root).ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        if pid == me {
            return None;
        }
        let mut raw = Vec::new();
        crate::collect::small_file::proc_read(&e.path().join("cmdline"), &mut raw).ok()?;
        let line = raw
            .split(|b| *b == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let server = crate::domain::served::model_of(&line).map_or("", |(s, _)| s);
        (crate::domain::served::port_of(&line, server) == Some(spec.port)).then_some(pid)
    })
}

/// Whether the journal says partop launched `pid` for model `name` (a program that took the
/// model's port meanwhile is not the model's server, however it calls itself).
fn launched_by_partop(journal: &Path, name: &str, pid: u32) -> bool {
    journal::read(journal).is_ok_and(|(entries, _)| Runs::of(&entries).launched(name, pid))
}

/// Where a model starts now: the logical GPUs `place_now` finds free for it (ids, BDFs), or
/// why it does not fit.
pub fn place(
    snap: &crate::domain::Snapshot,
    spec: &ModelSpec,
    want: Option<crate::domain::models::Want>,
) -> Result<(Vec<u32>, Vec<String>), String> {
    let placed = crate::domain::placement::place_now(snap, spec, want);
    if placed.to.is_empty() {
        return Err(placed.reason.unwrap_or_default());
    }
    Ok((
        placed.to.iter().map(|r| r.gpu_id).collect(),
        placed.to.iter().map(|r| r.bdf.clone()).collect(),
    ))
}

/// How a model start went wrong: it did not start, or it started and never answered healthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartFailed {
    /// The launch itself failed (nothing runs).
    Launch(String),
    /// It runs but did not answer healthy in time (the last error and the log's tail).
    Unhealthy(String),
}

/// What a model start tells while it runs.
#[derive(Debug, Clone, Copy)]
pub enum Starting<'a> {
    /// Launched; its health is waited for next.
    Launched(&'a Launched),
    /// A line of the health wait's progress.
    Waiting(&'a str),
}

/// The one model start (`partop models start`, the monitor's restart): launched on `ids` /
/// `bdfs` (journaled), then its `/health` waited for, with progress.
pub fn start(
    ops: &Ops,
    spec: &ModelSpec,
    ids: &[u32],
    bdfs: &[String],
    mut progress: impl FnMut(Starting<'_>),
) -> Result<Duration, StartFailed> {
    let l = launch(ops, spec, ids, bdfs).map_err(StartFailed::Launch)?;
    progress(Starting::Launched(&l));
    wait_healthy(spec, l.pid, &ops.log_dir, None, |p| {
        progress(Starting::Waiting(p));
    })
    .map_err(StartFailed::Unhealthy)
}

/// The one model stop, of a model as a sample saw it (its GPUs, and its pid pinned by start
/// time). Journaled.
pub fn stop_served(
    ops: &Ops,
    m: &crate::domain::model_status::ServedModel,
    spec: &ModelSpec,
) -> Result<String, String> {
    stop(
        ops,
        spec,
        &m.gpus,
        &m.bdfs,
        m.pid.map(|p| (p, m.start_ticks)),
    )
}

#[cfg(test)]
mod tests {
    /// partop's own container is read from the proc root once: the file rewritten after the
    /// first question changes nothing (a health check does not read it again); a process in
    /// another container is still told apart, one in partop's own is not.
    #[test]
    fn own_container_is_read_once_per_process() {
        let root = tempfile::tempdir().unwrap();
        let id = |c: char| c.to_string().repeat(64);
        let cgroup = |c: char| format!("0::/system.slice/docker-{}.scope\n", id(c));
        let write = |pid: &str, c: char| {
            let d = root.path().join(pid);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cgroup"), cgroup(c)).unwrap();
            std::fs::write(d.join("comm"), "python3\n").unwrap();
        };
        write("self", 'a');
        write("10", 'a');
        write("11", 'b');
        let own = super::own_container(root.path());
        assert!(
            own.as_deref().is_some_and(|o| o.contains(&id('a'))),
            "{own:?}"
        );
        assert!(
            !super::containerised(root.path(), 10),
            "partop's own container"
        );
        assert!(super::containerised(root.path(), 11), "another container");
        write("self", 'b');
        assert_eq!(super::own_container(root.path()), own, "read once");
        assert!(
            super::containerised(root.path(), 11),
            "still the first answer"
        );
    }
}
