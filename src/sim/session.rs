//! Starting and stopping a simulated node: writes the state file and launches each workload as
//! a real, detached OS process (its own process group, so a Ctrl-C in the terminal does not
//! reach it), logging to a file beside the state; stopping sends SIGTERM, waits, then SIGKILL.

use super::scenario::{Kind, Scenario};
use super::state::{SimState, StateError, process_start};
use crate::collect::clock;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A simulator lifecycle error.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// State file problem.
    #[error(transparent)]
    State(#[from] StateError),
    /// Already running.
    #[error(
        "a simulated node is already running from {path} ({holders}); stop it with `partop sim stop --state {path}`"
    )]
    Running {
        /// Path.
        path: String,
        /// Live workloads.
        holders: String,
    },
    /// Could not launch.
    #[error("could not start workload {name}: {error}")]
    Spawn {
        /// Workload.
        name: String,
        /// Why.
        error: String,
    },
}

/// A free port for a simulated model server, as an operator's registry fixes one: outside
/// Linux's ephemeral range (32768-60999), so no connection's port and no `bind(0)` of another
/// program takes it while the server is stopped for a change (a registry's port is the model's
/// for good); drawn at random so simulated nodes side by side do not pick the same one.
fn free_port() -> u16 {
    let mut x = crate::collect::clock::now_ms() ^ (u64::from(std::process::id()) << 20);
    for _ in 0..64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let port = 20_000 + u16::try_from(x % 12_768).unwrap_or(0);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map_or(0, |a| a.port())
}

/// Ports a simulated replica set's range holds: one per logical GPU of the largest layout (8
/// MI300X in CPX give 64), so a `fill` set grows into any layout.
pub const SET_PORTS: u16 = 64;

/// The set a workload named `SET#k` is a member of, and k.
fn member_of(name: &str) -> Option<(&str, u16)> {
    let (set, k) = name.rsplit_once(crate::domain::replicas::MEMBER_SEP)?;
    Some((set, k.parse().ok().filter(|k| (1..=SET_PORTS).contains(k))?))
}

/// The first port of a free range of [`SET_PORTS`] ports, outside the ephemeral range like
/// [`free_port`]'s.
fn free_range() -> u16 {
    let mut x = crate::collect::clock::now_ms() ^ (u64::from(std::process::id()) << 24);
    for _ in 0..64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let base = 20_000 + u16::try_from(x % (12_768 - u64::from(SET_PORTS))).unwrap_or(0);
        if (base..base + SET_PORTS).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
    20_000
}

/// Gives each replica set's members (workloads named `SET#k` with no port) the ports of one
/// free range, member k on the range's k-th port, as the registry's `ports` says.
fn set_ports(state: &mut SimState) {
    let mut bases: Vec<(String, u16)> = Vec::new();
    for i in 0..state.workloads.len() {
        let w = &state.workloads[i];
        if w.spec.kind != Kind::ModelServer || w.port != 0 {
            continue;
        }
        let Some((set, k)) = member_of(&w.spec.name) else {
            continue;
        };
        let base = if let Some((_, b)) = bases.iter().find(|(s, _)| s == set) {
            *b
        } else {
            let b = free_range();
            bases.push((set.to_string(), b));
            b
        };
        state.workloads[i].port = base + k - 1;
    }
}

/// The command line a workload shows in `ps` (what discovery and operators see).
fn shown(w: &super::scenario::WorkloadSpec, port: u16) -> Vec<String> {
    match w.kind {
        Kind::ModelServer => {
            let model = w.model.clone().unwrap_or_else(|| w.name.clone());
            vec![
                "vllm".into(),
                "serve".into(),
                model,
                "--host".into(),
                "127.0.0.1".into(),
                "--port".into(),
                port.to_string(),
            ]
        }
        Kind::Batch => vec![
            "python3".into(),
            "train.py".into(),
            "--job".into(),
            w.name.clone(),
        ],
        Kind::Agent => vec![w.comm.clone().unwrap_or_else(|| "gpuagent".into())],
    }
}

/// Starts `scenario`: writes `state_path` and launches the workloads.
pub fn start(
    scenario: &Scenario,
    state_path: &Path,
    seed: Option<u64>,
) -> Result<SimState, SessionError> {
    start_with(scenario, state_path, seed, None)
}

/// [`start`], the Kubernetes node joining the API server `api` (its kernel twin's process
/// runs the node agent: `sim::kubelet::NodeAgent`).
pub fn start_with(
    scenario: &Scenario,
    state_path: &Path,
    seed: Option<u64>,
    api: Option<super::kubelet::SimApi>,
) -> Result<SimState, SessionError> {
    if let Ok(old) = SimState::load(state_path)
        && old.any_held()
    {
        return Err(SessionError::Running {
            path: state_path.display().to_string(),
            holders: old.holder_names().join(", "),
        });
    }
    if let Some(dir) = state_path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let log_dir = state_path.with_extension("logs");
    let _ = std::fs::create_dir_all(&log_dir);
    let mut state = SimState::from_scenario(
        scenario,
        seed.unwrap_or(scenario.seed),
        log_dir,
        clock::now_ms(),
    );
    set_ports(&mut state);
    if let Some(k) = state.kubernetes.as_mut() {
        k.api = api;
    }
    state.save(state_path)?;
    for i in 0..state.workloads.len() {
        launch(&mut state, i, state_path)?;
    }
    state.save(state_path)?;
    write_registry(&state, state_path)?;
    start_twin(state_path)?;
    Ok(state)
}

/// Writes the kernel twin once (so the files exist when `start` returns) and starts the
/// detached process that keeps them current; records it in the state file.
pub fn start_twin(state_path: &Path) -> Result<(), SessionError> {
    let state = SimState::load(state_path)?;
    if let Some(t) = state.twin
        && t.start_ticks.is_some()
        && process_start(t.pid) == t.start_ticks
    {
        return Ok(());
    }
    let spawn_err = |e: std::io::Error| SessionError::Spawn {
        name: "kernel twin".into(),
        error: e.to_string(),
    };
    super::kernel::Twin::new(super::kernel::root(state_path))
        .refresh(&state, clock::now_ms())
        .map_err(|e| SessionError::Spawn {
            name: "kernel twin".into(),
            error: e,
        })?;
    let exe = std::env::current_exe().map_err(spawn_err)?;
    let _ = std::fs::create_dir_all(&state.log_dir);
    let out = crate::exec::safe_file::append(&state.log_dir.join("kernel-twin.log"), false)
        .map_err(spawn_err)?;
    let errf = out.try_clone().map_err(spawn_err)?;
    let mut cmd = Command::new(exe);
    cmd.arg0("partop-kernel-twin")
        .env(super::kernel::ENV_STATE, state_path)
        .env_remove(super::workload::ENV_NAME)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(errf)
        .process_group(0);
    let mut child = cmd.spawn().map_err(spawn_err)?;
    let pid = child.id();
    let start_ticks = process_start(pid);
    SimState::update(state_path, |s| {
        s.twin = Some(super::state::TwinProc { pid, start_ticks });
        Ok(())
    })?;
    std::thread::spawn(move || child.wait());
    Ok(())
}

/// Stops the kernel twin's process and writes the tree one last time (the processes that
/// ended leave KFD's process list, as on a real node).
pub fn stop_twin(state_path: &Path) {
    let Ok(state) = SimState::load(state_path) else {
        return;
    };
    if let Some(t) = state.twin {
        signal(t.pid, t.start_ticks, Signal::SIGKILL);
    }
    let _ = SimState::update(state_path, |s| {
        s.twin = None;
        Ok(())
    });
    let _ =
        super::kernel::Twin::new(super::kernel::root(state_path)).refresh(&state, clock::now_ms());
}

/// The model registry of a simulated node (`STATE.models.toml`): one entry per model server,
/// launched through `partop sim serve`, exactly as an operator's registry launches vLLM.
pub fn registry_path(state_path: &Path) -> PathBuf {
    state_path.with_extension("models.toml")
}

fn write_registry(state: &SimState, state_path: &Path) -> Result<(), SessionError> {
    use std::fmt::Write as _;
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "partop".into());
    let mut o = String::from(
        "# Written by `partop sim start`: the simulated node's model servers, launched through\n# `partop sim serve` (a stand-in for `vllm serve`). Edit freely; `partop check-config --models FILE`.\n",
    );
    let mut sets_written: Vec<&str> = Vec::new();
    for w in state
        .workloads
        .iter()
        .filter(|w| w.spec.kind == Kind::ModelServer)
    {
        // A replica set's members are one entry: `replicas = "fill"` over the set's range.
        if let Some((set, k)) = member_of(&w.spec.name) {
            if sets_written.contains(&set) {
                continue;
            }
            sets_written.push(set);
            let model = w.spec.model.clone().unwrap_or_else(|| set.to_string());
            let first = w.port + 1 - k;
            let _ = write!(
                o,
                "\n[[model]]\nname = {set:?}\nmodel = {model:?}\nreplicas = \"fill\"\nports = \"{first}-{last}\"\nmemory_gb = {mem}\nhealth_timeout_secs = 60\nlaunch.command = [{exe:?}, \"sim\", \"serve\", \"--state\", {state:?}, \"--name\", \"{{name}}\", \"--port\", \"{{port}}\"]\n",
                last = first + SET_PORTS - 1,
                mem = w.spec.vram_gb,
                state = state_path.display().to_string(),
            );
            continue;
        }
        let model = w.spec.model.clone().unwrap_or_else(|| w.spec.name.clone());
        let _ = write!(
            o,
            "\n[[model]]\nname = {name:?}\nmodel = {model:?}\nport = {port}\nmemory_gb = {mem}\nhealth_timeout_secs = 60\nlog = {log:?}\nlaunch.command = [{exe:?}, \"sim\", \"serve\", \"--state\", {state:?}, \"--name\", \"{{name}}\", \"--port\", \"{{port}}\"]\n",
            name = w.spec.name,
            port = w.port,
            mem = w.spec.vram_gb,
            log = state
                .log_dir
                .join(format!("{}.log", w.spec.name))
                .display()
                .to_string(),
            state = state_path.display().to_string(),
        );
    }
    crate::exec::safe_file::write_atomic(&registry_path(state_path), o.as_bytes()).map_err(|e| {
        SessionError::Spawn {
            name: "models.toml".into(),
            error: e.to_string(),
        }
    })
}

/// `partop sim serve`: the simulated node's stand-in for `vllm serve`. Takes its device from
/// `HIP_VISIBLE_DEVICES` under the current layout (as HIP does), fails like vLLM when there is
/// no such device or too little HBM, registers its pid in the state, then becomes the model
/// server (same pid, `vllm serve ...` command line).
pub fn serve(state_path: &Path, name: &str, port: u16) -> SessionError {
    let device = std::env::var("HIP_VISIBLE_DEVICES").ok();
    let me = std::process::id();
    let fail = |error: String| SessionError::Spawn {
        name: name.to_string(),
        error,
    };
    let placed = SimState::update(state_path, |state| {
        let found = state
            .workloads
            .iter()
            .position(|w| w.spec.name == name && w.spec.kind == Kind::ModelServer);
        // A new member of a replica set (a set that grows into a new layout) is served as its
        // set's members are: the same model, memory and load.
        let found = found.or_else(|| {
            let (set, _) = member_of(name)?;
            let template = state.workloads.iter().find(|w| {
                w.spec.kind == Kind::ModelServer
                    && member_of(&w.spec.name).is_some_and(|(s, _)| s == set)
            })?;
            let mut spec = template.spec.clone();
            spec.name = name.to_string();
            state.workloads.push(super::state::SimWorkload {
                spec,
                pid: None,
                start_ticks: None,
                port,
                started_ms: 0,
                pod: None,
            });
            Some(state.workloads.len() - 1)
        });
        let Some(i) = found else {
            return Ok(Err(format!(
                "the simulated node has no model server {name:?}"
            )));
        };
        if state.reloading.is_some() {
            return Ok(Err(
                "RuntimeError: No HIP GPUs are available (the driver is reloading)".into(),
            ));
        }
        let Some(ix) = device
            .as_deref()
            .and_then(|d| d.split(',').next())
            .and_then(|d| d.trim().parse::<u32>().ok())
        else {
            return Ok(Err(
                "set HIP_VISIBLE_DEVICES to the logical GPU to serve on".into(),
            ));
        };
        let logical = state.logical();
        let Some(l) = logical.iter().find(|l| l.index == ix) else {
            return Ok(Err(format!(
                "RuntimeError: HIP_VISIBLE_DEVICES={ix}: no such device (the node has {} logical GPUs)",
                logical.len()
            )));
        };
        #[expect(clippy::cast_precision_loss, reason = "MiB of HBM")]
        let have_gib = l.shape.vram_share_mb as f64 / 1024.0;
        let w = &mut state.workloads[i];
        if w.spec.vram_gb > have_gib {
            return Ok(Err(format!(
                "torch.OutOfMemoryError: HIP out of memory. Tried to allocate {:.1} GiB. GPU {ix} has a total capacity of {have_gib:.1} GiB",
                w.spec.vram_gb
            )));
        }
        w.spec.gpu = u32::try_from(l.phys).unwrap_or(0);
        w.spec.partition = l.shape.partition_id;
        w.port = port;
        w.pid = Some(me);
        w.start_ticks = process_start(me);
        w.started_ms = clock::now_ms();
        Ok(Ok(i))
    });
    let i = match placed {
        Ok(Ok(i)) => i,
        Ok(Err(e)) => return fail(e),
        Err(e) => return SessionError::State(e),
    };
    let state = match SimState::load(state_path) {
        Ok(s) => s,
        Err(e) => return SessionError::State(e),
    };
    let devices = device_files(&state, i, state_path);
    let shown = shown(&state.workloads[i].spec, port);
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(e.to_string()),
    };
    let err = Command::new(exe)
        .arg0(&shown[0])
        .args(&shown[1..])
        .env(super::workload::ENV_NAME, name)
        .env(super::workload::ENV_STATE, state_path)
        .env(
            super::workload::ENV_DEVICES,
            std::env::join_paths(&devices).unwrap_or_default(),
        )
        .exec();
    fail(format!("exec: {err}"))
}

/// Launches workload `i` (detached) and records its pid and start time.
pub fn launch(state: &mut SimState, i: usize, state_path: &Path) -> Result<(), SessionError> {
    let exe = std::env::current_exe().map_err(|e| SessionError::Spawn {
        name: "partop".into(),
        error: e.to_string(),
    })?;
    let index = state.placement_index(i);
    let devices = device_files(state, i, state_path);
    if state.workloads[i].spec.kind == Kind::ModelServer && state.workloads[i].port == 0 {
        // The workload reads its port from the state file: write it before spawning.
        state.workloads[i].port = free_port();
        state.save(state_path)?;
    }
    let w = &mut state.workloads[i];
    let log = state.log_dir.join(format!("{}.log", w.spec.name));
    let spawn_err = |e: std::io::Error| SessionError::Spawn {
        name: w.spec.name.clone(),
        error: e.to_string(),
    };
    let out = crate::exec::safe_file::append(&log, false).map_err(spawn_err)?;
    let errf = out.try_clone().map_err(spawn_err)?;
    // The workload shows the command line of the server it stands for (`vllm serve ...`) in
    // /proc, exactly as discovery and operators see real ones; partop recognises itself by the
    // environment marker.
    let shown = shown(&w.spec, w.port);
    let mut cmd = Command::new(exe);
    cmd.arg0(&shown[0]).args(&shown[1..]);
    // Launched from the kernel twin's process too (a pod its node agent admitted): the
    // twin's own marker is not passed on, or the workload would start as a second twin.
    cmd.env_remove(super::kernel::ENV_STATE)
        .env(super::workload::ENV_NAME, &w.spec.name)
        .env(super::workload::ENV_STATE, state_path)
        .env(
            super::workload::ENV_DEVICES,
            std::env::join_paths(&devices).unwrap_or_default(),
        );
    if let Some(ix) = index {
        cmd.env("HIP_VISIBLE_DEVICES", ix.to_string());
    }
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(errf)
        .process_group(0);
    let mut child = cmd.spawn().map_err(|e| SessionError::Spawn {
        name: w.spec.name.clone(),
        error: e.to_string(),
    })?;
    let pid = child.id();
    wait_ready(pid);
    w.pid = Some(pid);
    w.start_ticks = process_start(pid);
    w.started_ms = clock::now_ms();
    // Reap it when it exits, so a stopped workload does not linger as a zombie.
    std::thread::spawn(move || child.wait());
    Ok(())
}

/// Waits (at most 2 s) until the workload catches SIGTERM, so a started node behaves as its
/// scenario says from the first signal on.
fn wait_ready(pid: u32) {
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        let caught = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                let hex = s
                    .lines()
                    .find_map(|l| l.strip_prefix("SigCgt:"))?
                    .trim()
                    .to_string();
                u64::from_str_radix(&hex, 16).ok()
            });
        // SIGTERM is signal 15: bit 14 of the mask.
        if caught.is_some_and(|m| m & (1 << 14) != 0) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Signals a pid only if it still is the process we started (same start time).
fn signal(pid: u32, ticks: Option<u64>, sig: Signal) -> bool {
    if process_start(pid) != ticks || ticks.is_none() {
        return false;
    }
    i32::try_from(pid).is_ok_and(|p| kill(Pid::from_raw(p), sig).is_ok())
}

/// What `stop` did to each workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// Workload name.
    pub name: String,
    /// Whether SIGKILL was needed.
    pub killed: bool,
}

/// Stops every live workload: SIGTERM, a grace period, then SIGKILL. The state file stays.
pub fn stop(state_path: &Path, grace: Duration) -> Result<Vec<Stopped>, SessionError> {
    let mut state = SimState::load(state_path)?;
    let live: Vec<usize> = (0..state.workloads.len())
        .filter(|i| state.alive(*i))
        .collect();
    for &i in &live {
        let w = &state.workloads[i];
        signal(w.pid.unwrap_or(0), w.start_ticks, Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && live.iter().any(|i| state.alive(*i)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut report = Vec::new();
    for &i in &live {
        let killed = state.alive(i);
        if killed {
            let w = &state.workloads[i];
            signal(w.pid.unwrap_or(0), w.start_ticks, Signal::SIGKILL);
        }
        report.push(Stopped {
            name: state.workloads[i].spec.name.clone(),
            killed,
        });
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && live.iter().any(|i| state.alive(*i)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for w in &mut state.workloads {
        w.pid = None;
        w.start_ticks = None;
    }
    state.save(state_path)?;
    stop_twin(state_path);
    Ok(report)
}

/// Ends a node for good: its workloads stopped, then every file of it removed (state, logs,
/// device files, kernel twin, call log, registry, locks). What `partop --sim` does on exit, and
/// what its kernel twin does when that partop died without doing it.
pub fn discard(state_path: &Path) {
    let _ = stop(state_path, Duration::from_secs(2));
    let _ = std::fs::remove_file(state_path);
    let _ = std::fs::remove_dir_all(state_path.with_extension("logs"));
    let _ = std::fs::remove_dir_all(state_path.with_extension("dev"));
    super::kernel::remove(state_path);
    let _ = std::fs::remove_file(state_path.with_extension("amdsmi-warm"));
    let _ = std::fs::remove_file(super::amdsmi::calls_log(state_path));
    let _ = std::fs::remove_file(registry_path(state_path));
    let _ = std::fs::remove_file(kubelet_socket(state_path));
    let _ = std::fs::remove_file(state_path.with_extension("lock"));
    let _ = std::fs::remove_file(crate::exec::lock::sim_path(state_path));
}

/// What `resume` did with each stopped workload.
#[derive(Debug, Clone, PartialEq)]
pub enum Resumed {
    /// Started again.
    Started(String),
    /// Its partition does not exist in the current layout.
    NoPlace(String),
    /// It needs more HBM (GiB) than its partition has now (GiB).
    TooBig(String, f64, f64),
}

impl std::fmt::Display for Resumed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Started(n) => write!(f, "{n}: started"),
            Self::NoPlace(n) => write!(
                f,
                "{n}: not started: its partition does not exist in the current layout"
            ),
            Self::TooBig(n, need, have) => write!(
                f,
                "{n}: not started: it needs {need:.1} GiB and its partition has {have:.1} GiB"
            ),
        }
    }
}

/// Starts every stopped workload whose partition exists in the current layout (after a
/// rehearsed repartition, or after `stop`).
/// Workloads named in `skip` are left alone (model servers the registry relaunches).
pub fn resume(
    state_path: &Path,
    skip: &[String],
    only: Option<&[(u32, Option<u64>)]>,
) -> Result<Vec<Resumed>, SessionError> {
    let mut state = SimState::load(state_path)?;
    let mut out = Vec::new();
    for i in 0..state.workloads.len() {
        if state.alive(i) || skip.contains(&state.workloads[i].spec.name) {
            continue;
        }
        // A rehearsal does exactly what the plan says: only the processes the plan stopped
        // come back (a job that ended before planning stays ended).
        let w = &state.workloads[i];
        if let Some(only) = only
            && !only
                .iter()
                .any(|(pid, st)| w.pid == Some(*pid) && (st.is_none() || *st == w.start_ticks))
        {
            continue;
        }
        let name = state.workloads[i].spec.name.clone();
        let placed =
            state.workloads[i].spec.kind == Kind::Agent || state.placement_index(i).is_some();
        // The hardware's rule: a job that needs more HBM than its partition has fails to
        // allocate; it is not started on a partition it cannot run on.
        let share_gb = state.placement_index(i).and_then(|idx| {
            state
                .logical()
                .into_iter()
                .find(|l| l.index == idx)
                .map(|l| l.shape.vram_share_mb as f64 / 1024.0)
        });
        let needs = state.workloads[i].spec.vram_gb;
        if let Some(have) = share_gb
            && needs > have
        {
            out.push(Resumed::TooBig(name, needs, have));
            continue;
        }
        if placed {
            launch(&mut state, i, state_path)?;
            out.push(Resumed::Started(name));
        } else {
            out.push(Resumed::NoPlace(name));
        }
    }
    state.save(state_path)?;
    start_twin(state_path)?;
    Ok(out)
}

/// A human summary of the node.
pub fn status(state: &SimState) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let prod = state.product();
    let _ = writeln!(
        o,
        "scenario {}  product {}  ROCm {}  seed {}",
        state.scenario, prod.market_name, state.rocm, state.seed
    );
    for (i, g) in state.gpus.iter().enumerate() {
        let pending = g
            .modes
            .pending_memory
            .map(|m| format!(" (pending {m} until reload)"))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "  GPU {i} {}  {}/{}{pending}",
            g.bdf(0),
            g.modes.compute,
            g.modes.memory
        );
    }
    let _ = writeln!(o, "  {} logical GPUs", state.logical().len());
    if state.reloading.is_some() {
        let _ = writeln!(o, "  driver reloading");
    }
    for (i, w) in state.workloads.iter().enumerate() {
        let alive = if state.alive(i) {
            format!("pid {}", w.pid.unwrap_or(0))
        } else {
            "stopped".into()
        };
        let port = if w.port > 0 {
            format!(" port {}", w.port)
        } else {
            String::new()
        };
        let place = state.placement_index(i).map_or_else(
            || "all GPUs (/dev/kfd)".into(),
            |x| format!("logical GPU {x}"),
        );
        let _ = writeln!(
            o,
            "  {:<18} {:<13} {:<22} {alive}{port}",
            w.spec.name,
            format!("{:?}", w.spec.kind),
            place
        );
    }
    o
}

/// Where the simulated node's device files live (`STATE.dev/kfd`, `STATE.dev/dri/renderD*`):
/// workloads hold them open, so partop's /proc scan finds them exactly as on a real node.
pub fn roots(state_path: &Path) -> crate::collect::holders::Roots {
    crate::collect::holders::Roots {
        proc_root: "/proc".into(),
        sys_root: state_path.with_extension("sys"),
        dev_root: state_path.with_extension("dev"),
        fdinfo_root: state_path.with_extension("fdinfo"),
    }
}

/// Where the simulated node's kubelet twin serves PodResources (`partop sim start
/// --kubernetes`), beside the state file as the kubelet's socket is beside its state.
pub fn kubelet_socket(state_path: &Path) -> PathBuf {
    state_path.with_extension("kubelet.sock")
}

/// Creates the device files a workload opens: /dev/kfd for all, plus its render node.
fn device_files(state: &SimState, i: usize, state_path: &Path) -> Vec<PathBuf> {
    let dev = state_path.with_extension("dev");
    let _ = std::fs::create_dir_all(dev.join("dri"));
    let mut files = vec![dev.join("kfd")];
    let w = &state.workloads[i];
    if w.spec.kind != Kind::Agent && state.placement_index(i).is_some() {
        files.push(dev.join(format!(
            "dri/renderD{}",
            128 + 8 * w.spec.gpu + w.spec.partition
        )));
    }
    for f in &files {
        let _ = crate::exec::safe_file::append(f, false);
    }
    files
}

/// The state file `--sim` uses: one per partop process, under the XDG state dir.
pub fn ephemeral_state_path() -> PathBuf {
    crate::config::paths::state_dir()
        .join("sim")
        .join(format!("node-{}.json", std::process::id()))
}
