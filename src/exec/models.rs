//! Starting and stopping served models the way their registry entry says: a detached command
//! (its own process group and session-independent, so it outlives partop and an SSH drop)
//! logging to a file, a systemd unit, or a docker container; then a bounded wait for its
//! `/health`, with progress. Every start and stop is journaled.

use super::journal::{self, Entry};
use crate::collect::served::{http, prober::log_path};
use crate::domain::models::{Launch, ModelSpec};
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
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
    journal::append(
        &ops.journal,
        &Entry::new(
            "model.start",
            ops.simulated,
            json!({"model": spec.name, "devices": devices, "bdfs": bdfs, "command": what}),
            json!({"state": "starting"}),
        ),
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
    let _ = journal::append(
        &ops.journal,
        &Entry::new(
            "model.start.result",
            ops.simulated,
            json!({"model": spec.name, "devices": devices, "bdfs": bdfs, "command": what}),
            match &r {
                Ok(pid) => json!({"ok": true, "pid": pid, "log": log.display().to_string()}),
                Err(e) => json!({"ok": false, "error": e}),
            },
        ),
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
    journal::append(
        &ops.journal,
        &Entry::new(
            "model.stop",
            ops.simulated,
            json!({"model": spec.name, "pid": pid.map(|p| p.0), "command": what}),
            json!({"state": "stopping"}),
        ),
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
    let _ = journal::append(
        &ops.journal,
        &Entry::new(
            "model.stop.result",
            ops.simulated,
            json!({"model": spec.name, "pid": pid.map(|p| p.0), "command": what}),
            match &r {
                Ok(d) => json!({"ok": true, "detail": d}),
                Err(e) => json!({"ok": false, "error": e}),
            },
        ),
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
    loop {
        match http::get(&spec.health_url, Duration::from_millis(800)) {
            Ok(r) if r.status == 200 => return Ok(t0.elapsed()),
            Ok(r) => last = format!("HTTP {}", r.status),
            Err(e) => last = e,
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
