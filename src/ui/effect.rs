//! The effect runner: what the reducer asks for (signals, applies, model actions, journal
//! reads, collector requests) done off the UI task, with every result coming back as a message.
//! Sits between the pure reducer (`state`) and the executors (`exec`).

use super::state::{Effect, Msg};
use crate::collect::task::Request;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// What the executors need of the node the monitor watches, and so what can be done to it.
/// Every executor that changes a node (a kill, an apply, a model action, an eviction) takes a
/// [`LocalNode`]: a node opened from the fleet has none, so no change can be built for it.
#[derive(Debug, Clone)]
pub enum ExecSettings {
    /// This machine's node, which the monitor may change (`Node::exec_settings`).
    Local(LocalNode),
    /// A node opened from the fleet: read through this target and transport, its journal
    /// read there; nothing is signalled, applied, started or evicted from here.
    Remote(crate::collect::fleet::Remote),
}

/// This machine's node as its executors act on it, derived from `node::Node` in one place
/// (`Node::exec_settings`).
#[derive(Debug, Clone)]
pub struct LocalNode {
    /// The journal file.
    pub journal: std::path::PathBuf,
    /// `/proc`.
    pub proc_root: std::path::PathBuf,
    /// The simulated node's state file, when it is one (passed to a detached apply; its
    /// changes are journaled as simulated and hold its own lock).
    pub sim_state: Option<std::path::PathBuf>,
    /// The served-model registry file (passed to a detached apply; where "add" writes).
    pub models: Option<std::path::PathBuf>,
    /// Where partop-launched models log.
    pub model_log_dir: std::path::PathBuf,
    /// The nvidia-smi given with `--nvidia-smi` (passed to a detached MIG apply).
    pub nvidia_smi: Option<std::path::PathBuf>,
    /// The node is an NVIDIA recording (nothing can be applied).
    pub nvidia_replay: bool,
    /// The partop executable a detached apply runs.
    pub exe: std::path::PathBuf,
    /// Where detached applies keep their plan, log and exit status.
    pub apply_dir: std::path::PathBuf,
    /// The cluster a pod is evicted through (default: the kubeconfig the environment names,
    /// as a repartition's steps find it).
    pub kube: crate::collect::cluster::Target,
}

impl LocalNode {
    /// The node is simulated (noted in the journal).
    pub const fn simulated(&self) -> bool {
        self.sim_state.is_some()
    }

    /// The lock every change to this node holds (one change at a time).
    fn lock_path(&self) -> std::path::PathBuf {
        self.sim_state
            .as_deref()
            .map_or_else(crate::exec::lock::host_path, crate::exec::lock::sim_path)
    }
}

/// A remote node's journal, read where the node was read: `partop journal --json` through its
/// transport (ssh, or this partop on a rehearsal node's state); a `partop serve` endpoint does
/// not publish its journal, which is said.
fn remote_journal(r: &crate::collect::fleet::Remote) -> Msg {
    use crate::collect::fleet::Target;
    let why = match &r.target {
        Target::Ssh { dest, partop } => {
            let remote = [partop.clone(), "journal".into(), "--json".into()];
            let (code, out, err) = crate::collect::fleet::run_on(
                &r.transport,
                dest,
                &remote,
                "",
                Duration::from_secs(30),
            );
            if code == Some(0) {
                let (entries, bad) = crate::exec::journal::parse(&r.name, out.as_bytes());
                let unfinished = crate::exec::journal::unfinished_in(&entries, None)
                    .first()
                    .map(crate::exec::journal::Run::headline);
                return Msg::Journal(entries, bad, unfinished, None);
            }
            format!(
                "cannot read its journal: {}",
                crate::collect::fleet::ssh_reason(code, &err, false)
            )
        }
        Target::SshAmdSmi { .. } => "partop is not installed there: it keeps no journal".into(),
        Target::Http { addr } => format!(
            "read through partop serve at {addr}, which does not publish the journal: partop journal on the node"
        ),
    };
    Msg::Journal(
        Vec::new(),
        vec![crate::domain::text::escape_controls(&format!("{}: {why}", r.name)).into_owned()],
        None,
        None,
    )
}

/// Runs a confirmed model action (blocking: signals, launches, the health wait), reporting in
/// the log view.
fn model_action(
    action: &crate::ui::state::ModelAction,
    snap: Option<&crate::domain::Snapshot>,
    exec: &LocalNode,
    grace_ms: u64,
) {
    use crate::exec::models::{Ops, Starting};
    use crate::ui::state::ModelAction;
    let ops = Ops {
        log_dir: exec.model_log_dir.clone(),
        journal: exec.journal.clone(),
        simulated: exec.simulated(),
        grace: Duration::from_millis(grace_ms),
        kill_after: false,
    };
    // A model start or stop is a change to the node: one at a time, never during an apply.
    let _lock = match crate::exec::lock::acquire(
        &exec.lock_path(),
        &crate::exec::lock::Holder::me("model action (monitor)", "", &exec.journal),
    ) {
        Ok(l) => l,
        Err(e) => {
            log::error!("{e}");
            return;
        }
    };
    let stop_model = |m: &crate::domain::model_status::ServedModel,
                      spec: &crate::domain::models::ModelSpec| {
        crate::exec::models::stop_served(&ops, m, spec)
    };
    let find = |name: &str| {
        snap.and_then(|s| s.models.iter().find(|m| m.name == name).cloned())
            .and_then(|m| m.spec.clone().map(|spec| (m, spec)))
    };
    match action {
        ModelAction::AddToRegistry { entry } => {
            let path = exec
                .models
                .clone()
                .unwrap_or_else(|| crate::config::paths::config_dir().join("models.toml"));
            match crate::exec::registry::append_entry(&path, entry, &exec.journal) {
                Ok(crate::exec::registry::Added::Written) => {
                    log::info!("added to {}", path.display());
                }
                Ok(crate::exec::registry::Added::AlreadyThere) => {
                    log::info!("already in {}: nothing to add", path.display());
                }
                Err(e) => log::error!("{e}"),
            }
        }
        ModelAction::Stop { name } => {
            let Some((m, spec)) = find(name) else { return };
            match stop_model(&m, &spec) {
                Ok(d) => log::info!("{name}: {d}"),
                Err(e) => log::error!("{name}: {e}"),
            }
        }
        ModelAction::Restart { name } => {
            let Some((m, spec)) = find(name) else { return };
            if m.pid.is_some() {
                match stop_model(&m, &spec) {
                    Ok(d) => log::info!("{name}: {d}"),
                    Err(e) => {
                        log::error!("{name}: {e}; not restarted");
                        return;
                    }
                }
            }
            let (ids, bdfs) = if m.gpus.is_empty() {
                let Some(s) = snap else { return };
                match crate::exec::models::place(s, &spec, None) {
                    Ok(p) => p,
                    Err(why) => {
                        log::error!("{name}: {why}");
                        return;
                    }
                }
            } else {
                (m.gpus.clone(), m.bdfs.clone())
            };
            let started = crate::exec::models::start(&ops, &spec, &ids, &bdfs, |p| match p {
                Starting::Launched(l) => log::info!(
                    "{name}: started ({}); waiting for {}",
                    l.what,
                    spec.health_url
                ),
                Starting::Waiting(p) => log::info!("{p}"),
            });
            match started {
                Ok(t) => log::info!("{name}: healthy after {}s", t.as_secs()),
                Err(crate::exec::models::StartFailed::Launch(e)) => log::error!("{name}: {e}"),
                Err(crate::exec::models::StartFailed::Unhealthy(e)) => log::error!("{e}"),
            }
        }
    }
}

/// Where detached applies keep their plan, log and the pointer to the current one, by default.
pub fn default_apply_dir() -> std::path::PathBuf {
    crate::config::paths::state_dir().join("apply")
}

/// Writes `plan` under the apply directory as `NAME.json` and starts partop with `args` and
/// that file, detached (its own process group, so it survives the terminal or the SSH session
/// going away), logging to `NAME.log`. Returns (pid, plan file, log).
fn spawn_detached(
    exec: &LocalNode,
    name: &str,
    plan: &impl serde::Serialize,
    args: &[std::ffi::OsString],
) -> std::io::Result<(u32, std::path::PathBuf, std::path::PathBuf)> {
    use std::os::unix::process::CommandExt;
    let dir = exec.apply_dir.clone();
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("{name}.json"));
    crate::exec::safe_file::write_atomic(
        &file,
        serde_json::to_string_pretty(plan)
            .map_err(std::io::Error::other)?
            .as_bytes(),
    )?;
    let log = dir.join(format!("{name}.log"));
    let out = crate::exec::safe_file::truncate(&log)?;
    let mut child = std::process::Command::new(&exec.exe)
        .arg("--journal")
        .arg(&exec.journal)
        .args(args)
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0)
        .spawn()?;
    let pid = child.id();
    // Its exit status, for a monitor that sees it end without finishing.
    let exit_file = dir.join(format!("{name}.exit"));
    std::thread::spawn(move || {
        if let Ok(st) = child.wait() {
            let _ = crate::exec::safe_file::write_atomic(&exit_file, st.to_string().as_bytes());
        }
    });
    Ok((pid, file, log))
}

/// Starts `partop apply` for a confirmed plan, detached, and returns what to follow.
fn spawn_apply(
    plan: &crate::domain::plan::Plan,
    exec: &LocalNode,
    grace_ms: u64,
) -> std::io::Result<crate::ui::stage::Progress> {
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    if let Some(s) = &exec.sim_state {
        args.extend(["--sim-state".into(), s.into()]);
    }
    if let Some(m) = &exec.models {
        args.extend(["--models".into(), m.into()]);
    }
    args.extend(["apply", "--yes", "--grace"].map(Into::into));
    args.push(format!("{}", grace_ms / 1000).into());
    let _ = std::fs::remove_file(exec.apply_dir.join(format!("{}.exit", plan.fingerprint)));
    let (pid, file, log) = spawn_detached(exec, &plan.fingerprint, plan, &args)?;
    let pointer =
        serde_json::json!({"fingerprint": plan.fingerprint, "pid": pid, "plan": file, "log": log});
    crate::exec::safe_file::write_atomic(
        &exec.apply_dir.join("current.json"),
        pointer.to_string().as_bytes(),
    )?;
    let mut p = crate::ui::stage::Progress::new(plan.clone(), log.display().to_string());
    p.pid = Some(pid);
    Ok(p)
}

/// The executor's kill event in the monitor's terms (its messages carry no executor type).
fn kill_progress(e: crate::exec::kill::KillEvent) -> crate::ui::msg::KillProgress {
    use crate::exec::kill::KillEvent as E;
    use crate::exec::signal::Outcome;
    use crate::ui::msg::KillProgress as P;
    match e {
        E::Signalled { sig, results } => P::Signalled {
            sig,
            results: results
                .into_iter()
                .map(|(pid, o)| (pid, (o != Outcome::Sent).then(|| o.explain(pid))))
                .collect(),
        },
        E::Exited(pid) => P::Exited(pid),
        E::Done { sig, alive } => P::Done { sig, alive },
        E::JournalError(j) => P::JournalError(j),
        E::Refused(why) => P::Refused(why),
    }
}

/// Starts `partop mig apply` for a confirmed MIG plan, detached; returns its process and log.
fn spawn_mig_apply(
    plan: &crate::domain::mig::MigPlan,
    exec: &LocalNode,
    grace_ms: u64,
) -> std::io::Result<crate::ui::msg::Detached> {
    if exec.nvidia_replay {
        return Err(std::io::Error::other("a recording cannot be changed"));
    }
    let mut args: Vec<std::ffi::OsString> = vec!["--source".into(), "nvidia".into()];
    if let Some(s) = &exec.nvidia_smi {
        args.extend(["--nvidia-smi".into(), s.into()]);
    }
    args.extend(["mig", "apply", "--yes", "--grace"].map(Into::into));
    args.push(format!("{}", grace_ms / 1000).into());
    let (pid, _, log) = spawn_detached(exec, &format!("mig-{}", plan.fingerprint), plan, &args)?;
    Ok(crate::ui::msg::Detached {
        pid,
        log: log.display().to_string(),
    })
}

/// Reads the journal for the views, with what only I/O can tell: whether the apply being
/// followed still runs (else how it ended and its last log line), and an unfinished run that
/// no partop is working on (no one holds the node lock).
pub fn load_journal(exec: &LocalNode, followed: Option<&crate::ui::msg::Detached>) -> Msg {
    // Whether the followed process is gone is asked before the journal is read: a process
    // gone by then wrote all it ever will, so a run it closed is in what is read next.
    let gone = followed.filter(|d| {
        crate::exec::signal::start_ticks(std::path::Path::new("/proc"), d.pid).is_none()
    });
    let (entries, bad) = match crate::exec::journal::read_appended(&exec.journal) {
        Ok(x) => x,
        Err(e) => (Vec::new(), vec![format!("{}: {e}", exec.journal.display())]),
    };
    let holder = crate::exec::lock::holder(&exec.lock_path());
    let node = crate::exec::journal::node_id(exec.sim_state.as_deref());
    let unfinished = crate::exec::journal::unfinished_in(&entries, Some(&node))
        .into_iter()
        .find(|r| holder.as_ref().is_none_or(|h| h.id != r.run))
        .map(|r| r.headline());
    let exited = gone.map(|d| {
        let pid = d.pid;
        let log = std::path::Path::new(&d.log);
        let status = crate::collect::small_file::operator_text(&log.with_extension("exit"))
            .map_or_else(
                |_| "exit status unknown".into(),
                |s| crate::domain::text::escape_controls(s.trim()).into_owned(),
            );
        let last = crate::collect::small_file::tail(log, 16 << 10)
            .ok()
            .and_then(|t| {
                String::from_utf8_lossy(&t)
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(str::to_string)
            })
            .unwrap_or_default();
        format!(
            "pid {pid} {status}; last line: {}",
            crate::domain::text::escape_controls(&last)
        )
    });
    Msg::Journal(entries, bad, unfinished, exited)
}

/// A detached apply still running from an earlier partop, to attach to.
pub fn running_apply(dir: &std::path::Path) -> Option<crate::ui::stage::Progress> {
    let v: serde_json::Value = serde_json::from_str(
        &crate::collect::small_file::operator_text(&dir.join("current.json")).ok()?,
    )
    .ok()?;
    let pid = u32::try_from(v["pid"].as_u64()?).ok()?;
    crate::exec::signal::start_ticks(std::path::Path::new("/proc"), pid)?;
    let plan = serde_json::from_str(
        &crate::collect::small_file::operator_text(std::path::Path::new(v["plan"].as_str()?))
            .ok()?,
    )
    .ok()?;
    let mut p = crate::ui::stage::Progress::new(plan, v["log"].as_str()?.to_string());
    p.pid = Some(pid);
    Some(p)
}

/// The cluster's verbs for the node a finding's pod is on (the kubeconfig the environment
/// names, as a repartition's steps use).
async fn node_ops(
    kube: &crate::collect::cluster::Target,
    node: &str,
) -> Result<crate::exec::k8s::NodeOps, String> {
    crate::exec::k8s::NodeOps::connect(kube, node, crate::exec::k8s::Limits::default())
        .await
        .map_err(|e| e.to_string())
}

/// Reads the pod a finding names: its UID, and that it is on this node.
async fn lookup_pod(kube: crate::collect::cluster::Target, at: crate::ui::evict_ask::PodAt) -> Msg {
    let r = async {
        let ops = node_ops(&kube, &at.node).await?;
        match ops
            .placed(&at.namespace, &at.pod)
            .await
            .map_err(|e| e.to_string())?
        {
            None => Err(format!(
                "pod {} is gone from the API server: nothing to evict",
                at.label()
            )),
            Some((_, node)) if node != at.node => Err(format!(
                "pod {} is on node {node}, not this node {}: not evicted from here",
                at.label(),
                at.node
            )),
            Some((uid, _)) => Ok((at.clone(), uid)),
        }
    }
    .await
    .map_err(|e| crate::domain::text::escape_controls(&e).into_owned());
    Msg::PodLooked(r)
}

/// Evicts a confirmed pod through the one Eviction code (`exec::k8s::evict_held`), under the
/// node lock (one change at a time: never during an apply), its progress back as messages.
async fn evict(
    at: crate::ui::evict_ask::PodAt,
    uid: String,
    exec: LocalNode,
    tx: mpsc::Sender<Msg>,
) {
    use crate::ui::evict_ask::EvictProgress;
    let r = async {
        let _lock = crate::exec::lock::acquire(
            &exec.lock_path(),
            &crate::exec::lock::Holder::me("pod eviction (monitor)", "", &exec.journal),
        )
        .map_err(|e| e.to_string())?;
        let ops = node_ops(&exec.kube, &at.node).await?;
        let held = crate::exec::k8s::HeldPod {
            pod: crate::domain::k8s_ops::PodId {
                namespace: at.namespace.clone(),
                name: at.pod.clone(),
                uid,
            },
            node: at.node.clone(),
            gpu: at.gpu.clone(),
            gpu_id: at.gpu_id,
        };
        let blocked = tx.clone();
        crate::exec::k8s::evict_held(
            &ops,
            &held,
            &exec.journal,
            exec.simulated(),
            |budget, words| {
                let _ = blocked.try_send(Msg::Evict(EvictProgress::Blocked(
                    crate::domain::text::escape_controls(&format!(
                        "{}: refused by the PodDisruptionBudget {budget}: {words}; retrying (never bypassed)",
                        at.label()
                    ))
                    .into_owned(),
                )));
            },
        )
        .await
    }
    .await;
    // The pod's words come from the kubelet and the API server: escaped before the screen.
    let esc = |t: String| crate::domain::text::escape_controls(&t).into_owned();
    let r = r.map(esc).map_err(esc);
    match &r {
        Ok(d) => log::info!("{d}"),
        Err(e) => log::error!("eviction of {}: {e}", at.label()),
    }
    let _ = tx.send(Msg::Evict(EvictProgress::Done(r))).await;
}

/// Performs the reducer's effects. It never touches the state: what an effect produces comes
/// back as a message on `tx` (journal contents, an apply started, a kill's progress), and the
/// reducer decides what it means. File I/O and blocking work run on blocking threads, never on
/// the task that owns the state and draws.
#[derive(Debug, Clone)]
pub struct EffectRunner {
    /// How executors are set up.
    pub exec: ExecSettings,
    /// Requests to the collector.
    pub requests: mpsc::Sender<Request>,
    /// Messages back to the app loop.
    pub tx: mpsc::Sender<Msg>,
}

/// What an effect may read of the state when it is run (a copy; the state stays the loop's).
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// SIGTERM grace, ms.
    pub grace_ms: u64,
    /// The latest snapshot.
    pub snapshot: Option<Arc<crate::domain::Snapshot>>,
    /// The detached apply being followed (a repartition's, else a MIG apply's).
    pub followed: Option<crate::ui::msg::Detached>,
}

impl EffectRunner {
    /// Runs one effect; true when it is Quit. What it may do is what the node is: this
    /// machine's node is changed through its executors; a node opened from the fleet is only
    /// read.
    pub fn run(&self, e: Effect, facts: &Facts) -> bool {
        match &self.exec {
            ExecSettings::Local(node) => self.on_local(node, e, facts),
            ExecSettings::Remote(r) => self.on_remote(r, e),
        }
    }

    /// Asks the collector (a remote node's monitor drops what it asks: its stream is the
    /// node's own).
    fn ask(&self, r: Request) {
        let _ = self.requests.try_send(r);
    }

    /// An effect on a node read through another (a fleet's node). Every effect is named here,
    /// so a new one is decided for a remote node too: what would change the node is refused,
    /// said in the log (its keys and commands are refused before, in the reducer: this is
    /// what holds if one still comes); the throughput store and the journal are the node's
    /// own. True when it is Quit.
    fn on_remote(&self, r: &crate::collect::fleet::Remote, e: Effect) -> bool {
        match e {
            Effect::Quit => return true,
            Effect::RefreshNow => self.ask(Request::RefreshNow),
            Effect::ScanHolders => self.ask(Request::ScanHolders),
            Effect::Rescan => self.ask(Request::Rescan),
            Effect::Kill(..)
            | Effect::Apply(_)
            | Effect::MigApply(_)
            | Effect::Model(_)
            | Effect::LookupPod(_)
            | Effect::Evict(..) => {
                log::error!(
                    "{} is read through {}: it is changed on the node (or with partop fleet), not from here",
                    r.name,
                    r.via()
                );
            }
            Effect::LoadThroughput => {
                let _ = self.tx.try_send(Msg::Throughput(Err(format!(
                    "{} keeps its own measurements: partop models advise there",
                    r.name
                ))));
            }
            Effect::LoadJournal => {
                let (r, tx) = (r.clone(), self.tx.clone());
                tokio::task::spawn_blocking(move || {
                    let _ = tx.blocking_send(remote_journal(&r));
                });
            }
        }
        false
    }

    /// The kill job, off the loop: signals and the grace wait block. A journal that cannot be
    /// written stops the kill before any signal; the dialog hears it as Refused.
    fn kill(
        &self,
        node: &LocalNode,
        targets: Vec<crate::domain::kill::Target>,
        sig: crate::domain::kill::Sig,
        facts: &Facts,
    ) {
        let job = crate::exec::kill::KillJob {
            targets,
            sig,
            grace: Duration::from_millis(facts.grace_ms),
            proc_root: node.proc_root.clone(),
            journal: node.journal.clone(),
            simulated: node.simulated(),
        };
        log::info!(
            "{} to {:?}",
            sig.name(),
            job.targets.iter().map(|t| t.pid).collect::<Vec<_>>()
        );
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            let _ = crate::exec::kill::run(&job, |e| {
                let _ = tx.blocking_send(Msg::Kill(kill_progress(e)));
            });
        });
    }

    /// An effect on this machine's node, through its executors. True when it is Quit.
    fn on_local(&self, node: &LocalNode, e: Effect, facts: &Facts) -> bool {
        match e {
            Effect::Quit => return true,
            Effect::RefreshNow => self.ask(Request::RefreshNow),
            Effect::ScanHolders => self.ask(Request::ScanHolders),
            Effect::Rescan => self.ask(Request::Rescan),
            Effect::Kill(targets, sig) => self.kill(node, targets, sig, facts),
            Effect::LoadThroughput => {
                let tx = self.tx.clone();
                tokio::task::spawn_blocking(move || {
                    let store = crate::exec::throughput::load(&crate::exec::throughput::path());
                    let _ = tx.blocking_send(Msg::Throughput(store));
                });
            }
            Effect::MigApply(plan) => {
                let node = node.clone();
                let grace = facts.grace_ms;
                let tx = self.tx.clone();
                // Started or not, the reducer hears it: a failed start clears what it follows.
                tokio::task::spawn_blocking(move || {
                    let r = spawn_mig_apply(&plan, &node, grace)
                        .inspect(|d| {
                            log::info!(
                                "applying MIG plan {} (detached; log {}; the Journal view follows it)",
                                plan.fingerprint,
                                d.log
                            );
                        })
                        .map_err(|e| {
                            format!(
                                "could not start the apply of MIG plan {}: {e}",
                                plan.fingerprint
                            )
                        });
                    let _ = tx.blocking_send(Msg::MigApplyStarted(r));
                });
            }
            Effect::Model(action) => {
                let snap = facts.snapshot.clone();
                let node = node.clone();
                let grace = facts.grace_ms;
                let requests = self.requests.clone();
                tokio::task::spawn_blocking(move || {
                    model_action(&action, snap.as_deref(), &node, grace);
                    let _ = requests.try_send(Request::RefreshNow);
                });
            }
            Effect::Apply(plan) => {
                let node = node.clone();
                let grace = facts.grace_ms;
                let tx = self.tx.clone();
                tokio::task::spawn_blocking(move || {
                    let r = spawn_apply(&plan, &node, grace).map(Box::new).map_err(|e| {
                        format!(
                            "could not start the apply of plan {}: {e}",
                            plan.fingerprint
                        )
                    });
                    let _ = tx.blocking_send(Msg::ApplyStarted(r));
                });
            }
            Effect::LookupPod(at) => {
                let (tx, kube) = (self.tx.clone(), node.kube.clone());
                tokio::spawn(async move {
                    let _ = tx.send(lookup_pod(kube, at).await).await;
                });
            }
            // Async, never a blocking thread: a budget's retries are cancelled with the loop.
            Effect::Evict(at, uid) => {
                tokio::spawn(evict(at, uid, node.clone(), self.tx.clone()));
            }
            Effect::LoadJournal => {
                let node = node.clone();
                let followed = facts.followed.clone();
                let tx = self.tx.clone();
                tokio::task::spawn_blocking(move || {
                    let _ = tx.blocking_send(load_journal(&node, followed.as_ref()));
                });
            }
        }
        false
    }
}
