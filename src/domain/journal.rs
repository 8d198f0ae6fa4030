//! The journal's contract, typed. `exec::journal` writes and reads the lines (`Entry`, one JSON
//! object a line); this module says what an apply run's lines mean (`RunEvent`, decoded and
//! encoded in one place) and folds them into runs with ONE pure fold (`Runs`) that every reader
//! uses: resume and the lock's refusals (`exec::journal`), the monitor's progress (`ui::stage`),
//! `partop journal` and the monitor's Journal view (`report::journal`: a step's title and the
//! run's step count come from the fold's `Run`), and the fleet (`Rollouts`). Readers match the
//! typed events and states here (`Close`, `StepKey`), never an action's or a state's word. The
//! JSON shape on disk is the one partop always wrote, so old journals and saved plans still read.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Who acted: the real uid and its name from the system's user database. `SUDO_USER` and
/// `SSH_CONNECTION` are environment variables anyone can set, so they are kept only as extra,
/// labelled fields, never as the actor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Who {
    /// The real uid's name from the user database (None when it has no entry).
    pub user: Option<String>,
    /// `SUDO_USER` as the environment claims it (unverified).
    pub sudo_user: Option<String>,
    /// `SSH_CONNECTION` as the environment claims it (unverified).
    pub ssh_connection: Option<String>,
    /// Real uid.
    pub uid: u32,
    /// Effective uid, when it differs from the real one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub euid: Option<u32>,
}

impl Who {
    /// How the journal shows the actor: the system's name, with the unverified claims labelled.
    pub fn describe(&self) -> String {
        let mut s = self
            .user
            .clone()
            .unwrap_or_else(|| format!("uid {}", self.uid));
        if let Some(u) = &self.sudo_user {
            s.push_str(&format!(" (SUDO_USER={u})"));
        }
        if let Some(c) = &self.ssh_connection {
            s.push_str(&format!(
                " (ssh from {})",
                c.split_whitespace().next().unwrap_or(c)
            ));
        }
        s
    }
}

/// One journal line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// RFC 3339 time.
    pub at: String,
    /// Who.
    pub who: Who,
    /// Host.
    pub host: String,
    /// What (`kill.sigterm`, `repartition.step`, …).
    pub action: String,
    /// Whether the node is simulated.
    #[serde(default)]
    pub simulated: bool,
    /// The targets with their details.
    pub targets: Value,
    /// What happened.
    pub outcome: Value,
}

/// What a plan step does. The executors dispatch on it, the journal names it, and a new kind of
/// step is one variant here plus the one function that performs it (`exec::apply::run_step` or
/// `exec::mig::step`): the compiler then names every place that must know it. Written as the
/// words partop always wrote (`"set_memory"`), so saved plans and old journals still read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// Stop the processes holding the GPUs.
    Stop,
    /// Wait until the GPUs are idle.
    WaitIdle,
    /// Set the memory partition mode.
    SetMemory,
    /// Reload the driver.
    Reload,
    /// Wait for the GPUs to come back.
    WaitGpus,
    /// Set the compute partition mode.
    SetCompute,
    /// Check the result.
    Verify,
    /// Start the stopped models again.
    Relaunch,
    /// MIG: switch the MIG mode.
    MigMode,
    /// MIG: destroy instances.
    Destroy,
    /// MIG: create instances.
    Create,
    /// Take the members that stop out of the load balancer's upstream.
    BalancerDrain,
    /// Put the healthy members into the load balancer's upstream and verify through it.
    BalancerJoin,
    /// Kubernetes: mark the node unschedulable (`plan_k8s`).
    Cordon,
    /// Kubernetes: evict the pods holding the affected GPUs and wait until they are gone.
    Evict,
    /// Kubernetes: the change window's NoExecute taint (clears DaemonSet holders).
    Taint,
    /// Kubernetes: wait until the node advertises the new allocatable count.
    WaitAllocatable,
    /// Kubernetes: remove the change window's taint.
    Untaint,
    /// Kubernetes: mark the node schedulable again.
    Uncordon,
}

impl StepKind {
    /// Every kind (tests enumerate them).
    pub const ALL: [Self; 19] = [
        Self::Stop,
        Self::WaitIdle,
        Self::SetMemory,
        Self::Reload,
        Self::WaitGpus,
        Self::SetCompute,
        Self::Verify,
        Self::Relaunch,
        Self::MigMode,
        Self::Destroy,
        Self::Create,
        Self::BalancerDrain,
        Self::BalancerJoin,
        Self::Cordon,
        Self::Evict,
        Self::Taint,
        Self::WaitAllocatable,
        Self::Untaint,
        Self::Uncordon,
    ];

    /// The word plans and the journal hold.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::WaitIdle => "wait_idle",
            Self::SetMemory => "set_memory",
            Self::Reload => "reload",
            Self::WaitGpus => "wait_gpus",
            Self::SetCompute => "set_compute",
            Self::Verify => "verify",
            Self::Relaunch => "relaunch",
            Self::MigMode => "mig_mode",
            Self::Destroy => "destroy",
            Self::Create => "create",
            Self::BalancerDrain => "balancer_drain",
            Self::BalancerJoin => "balancer_join",
            Self::Cordon => "cordon",
            Self::Evict => "evict",
            Self::Taint => "taint",
            Self::WaitAllocatable => "wait_allocatable",
            Self::Untaint => "untaint",
            Self::Uncordon => "uncordon",
        }
    }

    /// The kind a word names (None for a word no kind has).
    pub fn from_word(w: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == w)
    }
}

impl std::fmt::Display for StepKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for StepKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A step's kind as a journal line names it: a kind this partop knows, or a word it does not (a
/// newer partop's kind, a line edited by hand), kept as read so the journal still says it and
/// the line still folds. Written as the kind's word, as partop always wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StepKey {
    /// A kind this partop performs.
    Known(StepKind),
    /// A word no kind of this partop has.
    Unknown(String),
}

impl StepKey {
    /// The key a line's `key` holds (`?` where it holds no string).
    fn read(v: &Value) -> Self {
        let w = v.as_str().unwrap_or("?");
        StepKind::from_word(w).map_or_else(|| Self::Unknown(w.to_string()), Self::Known)
    }

    /// The word the journal holds.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Known(k) => k.as_str(),
            Self::Unknown(w) => w,
        }
    }

    /// The kind, when this partop knows it.
    pub const fn kind(&self) -> Option<StepKind> {
        match self {
            Self::Known(k) => Some(*k),
            Self::Unknown(_) => None,
        }
    }
}

impl From<StepKind> for StepKey {
    fn from(k: StepKind) -> Self {
        Self::Known(k)
    }
}

impl std::fmt::Display for StepKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<StepKind> for StepKey {
    fn eq(&self, other: &StepKind) -> bool {
        self.kind() == Some(*other)
    }
}

/// Which executor a run belongs to (the action's prefix: `repartition.step`, `mig.step`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunKind {
    /// An AMD repartition.
    Repartition,
    /// An NVIDIA MIG layout.
    Mig,
}

impl RunKind {
    /// The action's prefix.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Repartition => "repartition",
            Self::Mig => "mig",
        }
    }

    /// The kind an action's prefix names.
    pub fn from_word(w: &str) -> Option<Self> {
        match w {
            "repartition" => Some(Self::Repartition),
            "mig" => Some(Self::Mig),
            _ => None,
        }
    }
}

impl std::fmt::Display for RunKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for RunKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// How a run was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// Every step done.
    Done,
    /// Closed by hand after the operator restored the node.
    Abandoned,
}

impl Close {
    /// The action's suffix.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Abandoned => "abandoned",
        }
    }

    /// The close an action's suffix names.
    pub fn from_word(w: &str) -> Option<Self> {
        [Self::Done, Self::Abandoned]
            .into_iter()
            .find(|c| c.as_str() == w)
    }
}

impl std::fmt::Display for Close {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one journal line of an apply run says.
#[derive(Clone, Debug, PartialEq)]
pub enum RunEvent {
    /// The run begins: the whole plan as confirmed, where its file is, who runs it, how it is
    /// resumed.
    Started {
        /// The plan as confirmed.
        plan: Value,
        /// Where its file was, when it came from one.
        plan_file: Option<String>,
        /// The pid of the partop that runs it.
        pid: Option<u32>,
        /// The node it changes.
        node: Option<String>,
        /// The exact command that resumes it.
        resume: Option<String>,
        /// How many steps.
        steps: Option<u64>,
    },
    /// A resumed run goes on (same run id).
    Resumed {
        /// The pid of the partop that resumed it.
        pid: Option<u32>,
        /// The first step it runs.
        from_step: u64,
    },
    /// A step is about to act (journaled before it does).
    StepBegun {
        /// Its index.
        idx: usize,
        /// Its kind (a word this partop does not know is kept as read).
        key: StepKey,
        /// How long it may take.
        limit_secs: Option<u32>,
    },
    /// A step acted.
    StepEnded {
        /// Its index.
        idx: usize,
        /// Its kind.
        key: StepKey,
        /// Whether it did what it should.
        ok: bool,
        /// What happened (the tool's text).
        detail: String,
    },
    /// The run is closed.
    Closed(Close),
}

/// One journal line of an apply run: whose, when, and what it says.
#[derive(Clone, Debug, PartialEq)]
pub struct RunLine {
    /// The executor.
    pub kind: RunKind,
    /// The run id.
    pub run: String,
    /// The plan's fingerprint.
    pub fingerprint: String,
    /// When (RFC 3339).
    pub at: String,
    /// What.
    pub event: RunEvent,
}

fn small(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

fn text(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

impl RunEvent {
    /// The action's suffix, the targets and the outcome this event is written as (the run id
    /// and fingerprint are added by [`RunLine::encode`]).
    pub fn encode(&self) -> (&'static str, Value, Value) {
        match self {
            Self::Started {
                plan,
                plan_file,
                pid,
                node,
                resume,
                steps,
            } => (
                "start",
                json!({"plan": plan, "plan_file": plan_file, "pid": pid, "node": node, "resume": resume}),
                json!({"steps": steps}),
            ),
            Self::Resumed { pid, from_step } => (
                "resume",
                json!({"pid": pid}),
                json!({"from_step": from_step}),
            ),
            Self::StepBegun {
                idx,
                key,
                limit_secs,
            } => {
                let mut outcome = json!({"state": "begin"});
                if let Some(l) = limit_secs {
                    outcome["limit_secs"] = json!(l);
                }
                ("step", json!({"step": idx, "key": key}), outcome)
            }
            Self::StepEnded {
                idx,
                key,
                ok,
                detail,
            } => (
                "step",
                json!({"step": idx, "key": key}),
                json!({"ok": ok, "detail": detail}),
            ),
            Self::Closed(c) => (c.as_str(), json!({}), json!({"ok": true})),
        }
    }
}

impl RunLine {
    /// The action, targets and outcome of its journal line: the shape partop always wrote
    /// (keys in the same order, so what `partop journal` shows does not move).
    pub fn encode(&self) -> (String, Value, Value) {
        let (what, mut targets, outcome) = self.event.encode();
        targets["run"] = json!(self.run);
        targets["fingerprint"] = json!(self.fingerprint);
        (format!("{}.{what}", self.kind), targets, outcome)
    }

    /// What a journal line says about a run; None for a line of no run (a kill, a model
    /// action, a fleet rollout) or one whose run id is not a string.
    pub fn decode(e: &Entry) -> Option<Self> {
        let (kind, what) = e.action.split_once('.')?;
        let kind = RunKind::from_word(kind)?;
        // Lines of an older partop carry no run id: read as run "" (see `Runs::unnamed`).
        let run = match &e.targets["run"] {
            Value::Null => String::new(),
            v => v.as_str()?.to_string(),
        };
        let t = &e.targets;
        let o = &e.outcome;
        let event = match what {
            "start" => RunEvent::Started {
                plan: t["plan"].clone(),
                plan_file: text(&t["plan_file"]),
                pid: small(&t["pid"]),
                node: text(&t["node"]),
                resume: text(&t["resume"]),
                steps: o["steps"].as_u64(),
            },
            "resume" => RunEvent::Resumed {
                pid: small(&t["pid"]),
                from_step: o["from_step"].as_u64().unwrap_or(0),
            },
            "step" => {
                let idx = t["step"]
                    .as_u64()
                    .and_then(|s| usize::try_from(s).ok())
                    .unwrap_or(0);
                let key = StepKey::read(&t["key"]);
                match o["ok"].as_bool() {
                    Some(ok) => RunEvent::StepEnded {
                        idx,
                        key,
                        ok,
                        detail: o["detail"]
                            .as_str()
                            .or_else(|| o["error"].as_str())
                            .unwrap_or("")
                            .to_string(),
                    },
                    None => RunEvent::StepBegun {
                        idx,
                        key,
                        limit_secs: small(&o["limit_secs"]),
                    },
                }
            }
            w => RunEvent::Closed(Close::from_word(w)?),
        };
        Some(Self {
            kind,
            run,
            fingerprint: e.targets["fingerprint"].as_str().unwrap_or("").to_string(),
            at: e.at.clone(),
            event,
        })
    }
}

/// A pod evicted from the Findings view (a reclaimable partition given back), as one line of
/// the journal says it: the intent, written before the Eviction is sent, and its result. Not a
/// run: nothing resumes it (an eviction cut short is sent again by acting again), so the run
/// refusals never count it; the one fold (`Runs`) keeps it beside the runs for the readers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictEvent {
    /// About to send the Eviction (journaled first: no journal, no eviction).
    Begun {
        /// The eviction's id (its result names it).
        id: String,
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        pod: String,
        /// The pod's UID as confirmed (the Eviction's precondition).
        uid: String,
        /// The Kubernetes node it was on.
        node: String,
        /// The partition it held (BDF with partition function).
        gpu: String,
    },
    /// What came of it: evicted and gone, or refused (a budget, a pod replaced) with why.
    Ended {
        /// The eviction's id.
        id: String,
        /// `namespace/name` of the pod (so the line reads alone).
        pod: String,
        /// Evicted and gone.
        ok: bool,
        /// What happened, in words.
        detail: String,
    },
}

impl EvictEvent {
    /// The action word of the intent; the result's is this with `.result`.
    pub const ACTION: &'static str = "pod.evict";

    /// The action, targets and outcome of its journal line.
    pub fn encode(&self) -> (String, Value, Value) {
        match self {
            Self::Begun {
                id,
                namespace,
                pod,
                uid,
                node,
                gpu,
            } => (
                Self::ACTION.into(),
                json!({"eviction": id, "namespace": namespace, "pod": pod, "uid": uid, "node": node, "gpu": gpu}),
                json!({"state": "begin"}),
            ),
            Self::Ended {
                id,
                pod,
                ok,
                detail,
            } => (
                format!("{}.result", Self::ACTION),
                json!({"eviction": id, "pod": pod}),
                json!({"ok": ok, "detail": detail}),
            ),
        }
    }

    /// What a journal line says about an eviction; None for any other line.
    pub fn decode(e: &Entry) -> Option<Self> {
        let t = &e.targets;
        let s = |k: &str| t[k].as_str().map(str::to_string);
        let id = s("eviction")?;
        if e.action == Self::ACTION {
            return Some(Self::Begun {
                id,
                namespace: s("namespace")?,
                pod: s("pod")?,
                uid: s("uid").unwrap_or_default(),
                node: s("node").unwrap_or_default(),
                gpu: s("gpu").unwrap_or_default(),
            });
        }
        (e.action == format!("{}.result", Self::ACTION)).then(|| Self::Ended {
            id,
            pod: s("pod").unwrap_or_default(),
            ok: e.outcome["ok"].as_bool().unwrap_or(false),
            detail: e.outcome["detail"].as_str().unwrap_or("").to_string(),
        })
    }
}

/// A served model's start as its lines name it: the model, where, and the command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelStart {
    /// The model's name in models.toml.
    pub model: String,
    /// The logical GPUs (HIP indices) it is given.
    pub devices: Vec<u32>,
    /// Their BDFs.
    pub bdfs: Vec<String>,
    /// What is run, in words (the confirmation's text).
    pub command: String,
}

/// A served model's stop as its lines name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelStop {
    /// The model's name.
    pub model: String,
    /// The pid signalled (None where a unit, a container or a stop command stops it).
    pub pid: Option<u32>,
    /// What is run, in words.
    pub command: String,
}

/// What one journal line of a served model's start or stop says (`exec::models`): the intent,
/// journaled before it acts, then its result. Not a run (nothing resumes it); the one fold
/// keeps the servers partop launched (`Runs::launched`), which a stop checks before it signals
/// a pid that took the model's port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelEvent {
    /// About to start it (journaled first: no journal, no start).
    Starting(ModelStart),
    /// What came of the start: the pid of the command it launched (None for a unit or a
    /// container) and its log, or why it did not start.
    Started(ModelStart, Result<(Option<u32>, String), String>),
    /// About to stop it.
    Stopping(ModelStop),
    /// What came of the stop: what was done, or why not.
    Stopped(ModelStop, Result<String, String>),
}

impl ModelStart {
    fn targets(&self) -> Value {
        json!({"model": self.model, "devices": self.devices, "bdfs": self.bdfs, "command": self.command})
    }

    fn read(t: &Value) -> Option<Self> {
        Some(Self {
            model: t["model"].as_str()?.to_string(),
            devices: t["devices"]
                .as_array()
                .map(|a| a.iter().filter_map(small).collect())
                .unwrap_or_default(),
            bdfs: t["bdfs"]
                .as_array()
                .map(|a| a.iter().filter_map(text).collect())
                .unwrap_or_default(),
            command: text(&t["command"]).unwrap_or_default(),
        })
    }
}

impl ModelStop {
    fn targets(&self) -> Value {
        json!({"model": self.model, "pid": self.pid, "command": self.command})
    }

    fn read(t: &Value) -> Option<Self> {
        Some(Self {
            model: t["model"].as_str()?.to_string(),
            pid: small(&t["pid"]),
            command: text(&t["command"]).unwrap_or_default(),
        })
    }
}

impl ModelEvent {
    /// The action, targets and outcome of its journal line: the shape partop always wrote.
    pub fn encode(&self) -> (&'static str, Value, Value) {
        let failed = |e: &String| json!({"ok": false, "error": e});
        match self {
            Self::Starting(m) => ("model.start", m.targets(), json!({"state": "starting"})),
            Self::Started(m, r) => (
                "model.start.result",
                m.targets(),
                r.as_ref().map_or_else(
                    failed,
                    |(pid, log)| json!({"ok": true, "pid": pid, "log": log}),
                ),
            ),
            Self::Stopping(m) => ("model.stop", m.targets(), json!({"state": "stopping"})),
            Self::Stopped(m, r) => (
                "model.stop.result",
                m.targets(),
                r.as_ref()
                    .map_or_else(failed, |d| json!({"ok": true, "detail": d})),
            ),
        }
    }

    /// What a journal line says about a model's start or stop; None for any other line.
    pub fn decode(e: &Entry) -> Option<Self> {
        let o = &e.outcome;
        let result = || match o["ok"].as_bool() {
            Some(true) => Ok(()),
            _ => Err(text(&o["error"]).unwrap_or_default()),
        };
        Some(match e.action.as_str() {
            "model.start" => Self::Starting(ModelStart::read(&e.targets)?),
            "model.start.result" => Self::Started(
                ModelStart::read(&e.targets)?,
                result().map(|()| (small(&o["pid"]), text(&o["log"]).unwrap_or_default())),
            ),
            "model.stop" => Self::Stopping(ModelStop::read(&e.targets)?),
            "model.stop.result" => Self::Stopped(
                ModelStop::read(&e.targets)?,
                result().map(|()| text(&o["detail"]).unwrap_or_default()),
            ),
            _ => return None,
        })
    }
}

/// One eviction as the journal tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    /// Its id.
    pub id: String,
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The pod's UID as confirmed.
    pub uid: String,
    /// The node.
    pub node: String,
    /// The partition it held.
    pub gpu: String,
    /// When it began.
    pub at: String,
    /// Its result (None: cut short before its result was written).
    pub outcome: Option<(bool, String)>,
}

/// One apply run (AMD repartition or MIG), as the journal tells it.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The executor.
    pub kind: RunKind,
    /// Its id.
    pub run: String,
    /// The plan's fingerprint.
    pub fingerprint: String,
    /// The plan as confirmed (journaled at the start).
    pub plan: Value,
    /// Where the plan file was, when it came from one.
    pub plan_file: Option<String>,
    /// When it started.
    pub started_at: String,
    /// The pid of the partop that ran it.
    pub pid: Option<u32>,
    /// The node it changes; None for runs journaled before partop recorded it.
    pub node: Option<String>,
    /// How many steps its start said it has.
    pub steps: Option<u64>,
    /// Each step's title in the plan as confirmed, by index ("" where the plan gives none):
    /// what the journal's words name a step by.
    pub titles: Vec<String>,
    /// Steps done (ok), by index, in the order they were.
    pub done: Vec<usize>,
    /// Each step's latest result: ok and detail, by index.
    pub results: std::collections::BTreeMap<usize, (bool, String)>,
    /// A step failed in this run (a resume may have gone on since).
    pub failed: bool,
    /// The last step entry: index, kind, ok, detail.
    pub last: Option<(usize, StepKey, Option<bool>, String)>,
    /// It finished or was abandoned.
    pub closed: Option<Close>,
    /// The exact command that resumes it, as its start journaled it (every option it ran
    /// with); None for runs journaled before partop recorded it.
    pub resume: Option<String>,
    /// The last step that began: its index, when, and how long it may take (progress:
    /// elapsed against limit).
    pub last_begin: Option<(usize, String, Option<u32>)>,
}

/// The program and global options of a journaled command (`partop --sim-state S --journal J
/// --models M`), up to its subcommand (`apply`, `mig apply`): what another command about the
/// same node and journal starts with, so that it works when pasted.
pub fn command_prefix(command: &str) -> Vec<String> {
    let mut words = super::text::shell_words(command).unwrap_or_default();
    let sub = words
        .iter()
        .position(|w| w == "apply" || w == "mig")
        .unwrap_or(words.len());
    words.truncate(sub);
    if words.is_empty() {
        words.push("partop".into());
    }
    words
}

/// The title of each step of a plan as its run's start journaled it (AMD and MIG plans alike
/// list `steps` with a `title`); a step without a string title is "" (named by its key).
fn step_titles(plan: &Value) -> Vec<String> {
    plan.get("steps")
        .and_then(Value::as_array)
        .map(|steps| {
            steps
                .iter()
                .map(|s| {
                    s.get("title")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

impl Run {
    fn started(line: &RunLine) -> Option<Self> {
        let RunEvent::Started {
            plan,
            plan_file,
            pid,
            node,
            resume,
            steps,
        } = &line.event
        else {
            return None;
        };
        Some(Self {
            kind: line.kind,
            run: line.run.clone(),
            fingerprint: line.fingerprint.clone(),
            plan: plan.clone(),
            plan_file: plan_file.clone(),
            started_at: line.at.clone(),
            pid: *pid,
            node: node.clone(),
            steps: *steps,
            titles: step_titles(plan),
            done: Vec::new(),
            results: std::collections::BTreeMap::new(),
            failed: false,
            last: None,
            closed: None,
            resume: resume.clone(),
            last_begin: None,
        })
    }

    /// One more line of this run.
    fn apply(&mut self, line: &RunLine) {
        match &line.event {
            RunEvent::Started { .. } | RunEvent::Resumed { .. } => {}
            RunEvent::StepBegun {
                idx,
                key,
                limit_secs,
            } => {
                self.last_begin = Some((*idx, line.at.clone(), *limit_secs));
                self.last = Some((*idx, key.clone(), None, String::new()));
            }
            RunEvent::StepEnded {
                idx,
                key,
                ok,
                detail,
            } => {
                if *ok {
                    self.done.push(*idx);
                } else {
                    self.failed = true;
                }
                self.results.insert(*idx, (*ok, detail.clone()));
                self.last = Some((*idx, key.clone(), Some(*ok), detail.clone()));
            }
            RunEvent::Closed(c) => self.closed = Some(*c),
        }
    }

    /// How many steps it has: as its start said, else as its plan lists them.
    pub fn total(&self) -> Option<u64> {
        self.steps
            .or_else(|| u64::try_from(self.titles.len()).ok().filter(|n| *n > 0))
    }

    /// The title of step `idx` in the plan as confirmed (None where it has none).
    pub fn title(&self, idx: usize) -> Option<&str> {
        self.titles
            .get(idx)
            .map(String::as_str)
            .filter(|t| !t.is_empty())
    }

    /// The first step not done (where a resume continues).
    pub fn resume_point(&self) -> usize {
        self.done.iter().max().map_or(0, |s| s + 1)
    }

    /// How it ended, as far as the journal says: applied, failed at a step, or still open.
    pub fn outcome(&self) -> Option<bool> {
        match (self.closed, self.failed) {
            (Some(Close::Done), _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        }
    }

    /// The command that continues it: the one its start journaled, else rebuilt from the plan
    /// file (without the options an older partop did not record).
    pub fn resume_command(&self) -> String {
        if let Some(r) = &self.resume {
            return r.clone();
        }
        let sub = match self.kind {
            RunKind::Mig => "partop mig apply",
            RunKind::Repartition => "partop apply",
        };
        format!(
            "{sub} {} --resume",
            self.plan_file.as_deref().unwrap_or("PLAN.json")
        )
    }

    /// The command that closes it as abandoned, with the options its resume command carries
    /// before the subcommand (`--journal`, `--sim-state`, …): pasted, it acts on the same
    /// journal (a bare `partop journal --abandon RUN` looked in the default journal and said
    /// there was no such run).
    pub fn abandon_command(&self) -> String {
        let mut words = command_prefix(&self.resume_command());
        words.extend(["journal".into(), "--abandon".into(), self.run.clone()]);
        super::text::shell_line(&words)
    }

    /// Where it stopped, in a few words.
    fn stopped_at(&self) -> String {
        match &self.last {
            Some((i, key, Some(false), _)) => format!("failed at step {} ({key})", i + 1),
            Some((i, key, None, _)) => format!("stopped during step {} ({key})", i + 1),
            Some((i, key, Some(true), _)) => format!("stopped after step {} ({key})", i + 1),
            None => "stopped before its first step".into(),
        }
    }

    /// One line for a header: what, where it stopped, the command that continues it.
    pub fn headline(&self) -> String {
        format!(
            "{} {} {} · {}",
            self.kind,
            self.run,
            self.stopped_at(),
            self.resume_command()
        )
    }

    /// One sentence for the operator.
    pub fn describe(&self) -> String {
        let step = match &self.last {
            Some((i, key, Some(false), detail)) => {
                format!("failed at step {} ({key}): {detail}", i + 1)
            }
            _ => self.stopped_at(),
        };
        format!(
            "unfinished {} {} (plan {}, started {}): {step}. Continue it with `{}`, or after restoring the node by hand close it with `{}`",
            self.kind,
            self.run,
            self.fingerprint,
            self.started_at,
            self.resume_command(),
            self.abandon_command()
        )
    }
}

/// The one fold: journal lines in, runs out (oldest first). Fed line by line, so a reader
/// that holds it can go on with what was appended since.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Runs {
    /// Every run so far, oldest first.
    pub runs: Vec<Run>,
    /// Lines journaled without a run id (an older partop), as runs of their plan: only the
    /// monitor's progress reads them; resume and the refusals never count them.
    pub unnamed: Vec<Run>,
    /// Pods evicted from the Findings view, oldest first (not runs: never resumed).
    pub evictions: Vec<Eviction>,
    /// The model servers partop launched (a command's process): model and pid, oldest first.
    pub launched: Vec<(String, u32)>,
}

impl Runs {
    /// One more run line: a start opens a run; any other line goes to the newest run of its
    /// id (a line of a run whose start is not in the journal is dropped).
    pub fn apply(&mut self, line: &RunLine) {
        if line.run.is_empty() {
            return self.apply_unnamed(line);
        }
        if let Some(r) = Run::started(line) {
            self.runs.push(r);
        } else if let Some(r) = self.runs.iter_mut().rev().find(|r| r.run == line.run) {
            r.apply(line);
        }
    }

    fn apply_unnamed(&mut self, line: &RunLine) {
        if let Some(r) = Run::started(line) {
            self.unnamed.push(r);
            return;
        }
        let at = self
            .unnamed
            .iter()
            .rposition(|r| r.kind == line.kind && r.fingerprint == line.fingerprint);
        let r = match at {
            Some(i) => &mut self.unnamed[i],
            None => {
                let opened = RunLine {
                    event: RunEvent::Started {
                        plan: Value::Null,
                        plan_file: None,
                        pid: None,
                        node: None,
                        resume: None,
                        steps: None,
                    },
                    ..line.clone()
                };
                let Some(r) = Run::started(&opened) else {
                    return;
                };
                self.unnamed.push(r);
                let last = self.unnamed.len() - 1;
                &mut self.unnamed[last]
            }
        };
        r.apply(line);
    }

    /// One more journal line (lines of no run, no eviction and no model are skipped).
    pub fn feed(&mut self, e: &Entry) {
        if let Some(line) = RunLine::decode(e) {
            self.apply(&line);
        } else if let Some(ev) = EvictEvent::decode(e) {
            self.evicted(&ev, &e.at);
        } else if let Some(ev) = ModelEvent::decode(e) {
            self.model(&ev);
        }
    }

    /// One more model line: a start that launched a process records its pid.
    pub fn model(&mut self, ev: &ModelEvent) {
        if let ModelEvent::Started(m, Ok((Some(pid), _))) = ev {
            self.launched.push((m.model.clone(), *pid));
        }
    }

    /// Whether partop launched `pid` as model `model`'s server (a program that took the
    /// model's port meanwhile is not the model's server, however it calls itself).
    pub fn launched(&self, model: &str, pid: u32) -> bool {
        self.launched.iter().any(|(m, p)| m == model && *p == pid)
    }

    /// One more eviction line: a begin opens one; a result closes the newest of its id.
    pub fn evicted(&mut self, ev: &EvictEvent, at: &str) {
        match ev {
            EvictEvent::Begun {
                id,
                namespace,
                pod,
                uid,
                node,
                gpu,
            } => self.evictions.push(Eviction {
                id: id.clone(),
                pod: format!("{namespace}/{pod}"),
                uid: uid.clone(),
                node: node.clone(),
                gpu: gpu.clone(),
                at: at.to_string(),
                outcome: None,
            }),
            EvictEvent::Ended { id, ok, detail, .. } => {
                if let Some(x) = self.evictions.iter_mut().rev().find(|x| &x.id == id) {
                    x.outcome = Some((*ok, detail.clone()));
                }
            }
        }
    }

    /// The runs of these lines.
    pub fn of(entries: &[Entry]) -> Self {
        let mut s = Self::default();
        for e in entries {
            s.feed(e);
        }
        s
    }

    /// The newest run of `kind` for `fingerprint`, else the lines of that plan an older
    /// partop journaled without a run id (what the monitor's progress follows).
    pub fn following(&self, kind: RunKind, fingerprint: &str) -> Option<&Run> {
        self.latest(kind, fingerprint).or_else(|| {
            self.unnamed
                .iter()
                .rev()
                .find(|r| r.kind == kind && r.fingerprint == fingerprint)
        })
    }

    /// The newest run with id `run`.
    pub fn run(&self, run: &str) -> Option<&Run> {
        self.runs.iter().rev().find(|r| r.run == run)
    }

    /// The newest run of `kind` for `fingerprint`.
    pub fn latest(&self, kind: RunKind, fingerprint: &str) -> Option<&Run> {
        self.runs
            .iter()
            .rev()
            .find(|r| r.kind == kind && r.fingerprint == fingerprint)
    }

    /// The unfinished runs of `node` (or of every node; a run journaled before partop recorded
    /// its node counts for every node), newest first.
    pub fn unfinished(&self, node: Option<&str>) -> Vec<Run> {
        self.runs
            .iter()
            .rev()
            .filter(|r| r.closed.is_none())
            .filter(|r| node.is_none_or(|n| r.node.as_deref().is_none_or(|m| m == n)))
            .cloned()
            .collect()
    }
}

/// A node of a fleet rollout, as its start journals it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutNode {
    /// Its name.
    pub node: String,
    /// Where ssh reaches it.
    pub dest: String,
    /// Its plan's fingerprint.
    pub plan: String,
}

/// What one journal line of a fleet rollout says (a rollout is a change whose steps are nodes:
/// each node runs its own `partop apply`, journaled on the node).
#[derive(Clone, Debug, PartialEq)]
pub enum RolloutEvent {
    /// The rollout of a plan set begins.
    Started {
        /// The set's fingerprint.
        set: String,
        /// The set's file.
        file: String,
        /// Its nodes, in order.
        nodes: Vec<RolloutNode>,
        /// How many nodes at a time.
        parallel: usize,
    },
    /// A node's apply is about to start: afresh, resuming its run, or unknown (`error`).
    NodeStarted {
        /// The node.
        node: RolloutNode,
        /// It resumes its own run on the node.
        resume: Option<bool>,
        /// Why it could not be asked whether it has a run.
        error: Option<String>,
    },
    /// One step of a node's change through the cluster (`domain::cluster_rollout::Step`),
    /// journaled when it begins (`done` false) and when it is done (`done` true), so a resume
    /// continues at the step where it stopped.
    NodeStep {
        /// The node.
        node: String,
        /// Its plan.
        plan: String,
        /// The step's key.
        step: String,
        /// Begun (false) or done (true).
        done: bool,
        /// What it did, in words (when done).
        text: Option<String>,
    },
    /// A node applied and verified its plan.
    NodeDone {
        /// The node.
        node: String,
        /// Its plan.
        plan: String,
    },
    /// A node's apply failed.
    NodeFailed {
        /// The node.
        node: String,
        /// Its plan.
        plan: String,
        /// What it said.
        error: String,
    },
    /// The rollout stopped at a failure; these nodes were not touched.
    Stopped {
        /// The set.
        set: String,
        /// The nodes left.
        untouched: Vec<String>,
    },
    /// Every node applied and verified.
    Done {
        /// The set.
        set: String,
    },
}

impl RolloutEvent {
    /// The action, targets and outcome of this event's journal line in rollout `rollout`: the
    /// shape partop always wrote.
    pub fn encode(&self, rollout: &str) -> (&'static str, Value, Value) {
        match self {
            Self::Started {
                set,
                file,
                nodes,
                parallel,
            } => (
                "fleet.rollout.start",
                json!({"set": set, "file": file,
                       "nodes": nodes.iter().map(|n| json!({"node": n.node, "dest": n.dest, "plan": n.plan})).collect::<Vec<_>>()}),
                json!({"rollout": rollout, "parallel": parallel}),
            ),
            Self::NodeStarted {
                node,
                resume,
                error,
            } => (
                "fleet.node.start",
                json!({"node": node.node, "dest": node.dest, "plan": node.plan}),
                json!({"rollout": rollout, "resume": resume, "error": error}),
            ),
            Self::NodeStep {
                node,
                plan,
                step,
                done,
                text,
            } => (
                "fleet.node.step",
                json!({"node": node, "plan": plan, "step": step}),
                json!({"rollout": rollout, "ok": done.then_some(true), "text": text}),
            ),
            Self::NodeDone { node, plan } => (
                "fleet.node.done",
                json!({"node": node, "plan": plan}),
                json!({"rollout": rollout, "ok": true}),
            ),
            Self::NodeFailed { node, plan, error } => (
                "fleet.node.failed",
                json!({"node": node, "plan": plan}),
                json!({"rollout": rollout, "ok": false, "error": error}),
            ),
            Self::Stopped { set, untouched } => (
                "fleet.rollout.stopped",
                json!({"set": set}),
                json!({"rollout": rollout, "untouched": untouched}),
            ),
            Self::Done { set } => (
                "fleet.rollout.done",
                json!({"set": set}),
                json!({"rollout": rollout, "ok": true}),
            ),
        }
    }

    /// What a journal line says about a rollout (its id and the event); None for a line of no
    /// rollout.
    pub fn decode(e: &Entry) -> Option<(String, Self)> {
        let t = &e.targets;
        let rollout = e.outcome["rollout"].as_str()?.to_string();
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let node = |v: &Value| RolloutNode {
            node: s(&v["node"]),
            dest: s(&v["dest"]),
            plan: s(&v["plan"]),
        };
        let ev = match e.action.as_str() {
            "fleet.rollout.start" => Self::Started {
                set: s(&t["set"]),
                file: s(&t["file"]),
                nodes: t["nodes"]
                    .as_array()
                    .map(|a| a.iter().map(node).collect())
                    .unwrap_or_default(),
                parallel: e.outcome["parallel"]
                    .as_u64()
                    .and_then(|p| usize::try_from(p).ok())
                    .unwrap_or(1),
            },
            "fleet.node.start" => Self::NodeStarted {
                node: node(t),
                resume: e.outcome["resume"].as_bool(),
                error: text(&e.outcome["error"]),
            },
            "fleet.node.step" => Self::NodeStep {
                node: s(&t["node"]),
                plan: s(&t["plan"]),
                step: s(&t["step"]),
                done: e.outcome["ok"].as_bool() == Some(true),
                text: text(&e.outcome["text"]),
            },
            "fleet.node.done" => Self::NodeDone {
                node: s(&t["node"]),
                plan: s(&t["plan"]),
            },
            "fleet.node.failed" => Self::NodeFailed {
                node: s(&t["node"]),
                plan: s(&t["plan"]),
                error: s(&e.outcome["error"]),
            },
            "fleet.rollout.stopped" => Self::Stopped {
                set: s(&t["set"]),
                untouched: e.outcome["untouched"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            "fleet.rollout.done" => Self::Done { set: s(&t["set"]) },
            _ => return None,
        };
        Some((rollout, ev))
    }
}

/// One fleet rollout, as the fleet journal tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollout {
    /// Its id.
    pub id: String,
    /// The plan set's fingerprint.
    pub set: String,
    /// Nodes applied and verified.
    pub done: Vec<String>,
    /// Nodes that failed, then nodes started that never reported (the rollout was killed under
    /// them): each continues its own run on the node when resumed.
    pub failed: Vec<String>,
    /// Nodes started.
    pub started: Vec<String>,
    /// The steps of a change through the cluster journaled done: (node, step key), in order.
    pub steps: Vec<(String, String)>,
    /// Every step line in the order written: (node, step key, done). What a step begun and
    /// never done may have done (a cordon whose answer was lost, a kill before its result was
    /// journaled) is read from it in order.
    pub trail: Vec<(String, String, bool)>,
    /// Every node done.
    pub finished: bool,
}

impl Rollout {
    /// The step keys journaled done for `node`.
    pub fn steps_done(&self, node: &str) -> Vec<String> {
        self.steps
            .iter()
            .filter(|(n, _)| n == node)
            .map(|(_, s)| s.clone())
            .collect()
    }

    /// The nodes to treat as attempted before: failed, or started and never done.
    pub fn attempted(&self) -> Vec<String> {
        let mut v = self.failed.clone();
        v.extend(
            self.started
                .iter()
                .filter(|n| !self.done.contains(n))
                .cloned(),
        );
        v.dedup();
        v
    }
}

/// The fold of the fleet journal: its rollouts, oldest first (the same fold shape as `Runs`:
/// a start opens one, the other lines go to the newest rollout of their id).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollouts {
    /// Every rollout, oldest first.
    pub rollouts: Vec<Rollout>,
}

impl Rollouts {
    /// The rollouts of these lines.
    pub fn of(entries: &[Entry]) -> Self {
        let mut s = Self::default();
        for (id, ev) in entries.iter().filter_map(RolloutEvent::decode) {
            s.apply(&id, &ev);
        }
        s
    }

    /// One more rollout line.
    pub fn apply(&mut self, id: &str, ev: &RolloutEvent) {
        if let RolloutEvent::Started { set, .. } = ev {
            self.rollouts.push(Rollout {
                id: id.to_string(),
                set: set.clone(),
                done: Vec::new(),
                failed: Vec::new(),
                started: Vec::new(),
                steps: Vec::new(),
                trail: Vec::new(),
                finished: false,
            });
            return;
        }
        let Some(r) = self.rollouts.iter_mut().rev().find(|r| r.id == id) else {
            return;
        };
        match ev {
            RolloutEvent::Started { .. } | RolloutEvent::Stopped { .. } => {}
            RolloutEvent::NodeStarted { node, .. } => r.started.push(node.node.clone()),
            RolloutEvent::NodeStep {
                node, step, done, ..
            } => {
                r.trail.push((node.clone(), step.clone(), *done));
                if *done {
                    r.steps.push((node.clone(), step.clone()));
                }
            }
            RolloutEvent::NodeDone { node, .. } => r.done.push(node.clone()),
            RolloutEvent::NodeFailed { node, .. } => r.failed.push(node.clone()),
            RolloutEvent::Done { .. } => r.finished = true,
        }
    }

    /// The newest rollout of plan set `set`.
    pub fn latest(&self, set: &str) -> Option<&Rollout> {
        self.rollouts.iter().rev().find(|r| r.set == set)
    }
}

#[cfg(test)]
mod tests {
    /// An eviction's two lines round-trip through their encoding and fold into one closed
    /// eviction beside the runs; a result whose begin is not in the journal opens nothing; a
    /// begin alone is an eviction cut short (3 cases).
    #[test]
    fn an_eviction_folds_beside_the_runs_never_as_one() {
        use super::{Entry, EvictEvent, Runs, Who};
        let line = |ev: &EvictEvent| {
            let (action, targets, outcome) = ev.encode();
            let e = Entry {
                at: "2026-01-01T00:00:00Z".into(),
                who: Who::default(),
                host: "h".into(),
                action,
                simulated: true,
                targets,
                outcome,
            };
            assert_eq!(EvictEvent::decode(&e).as_ref(), Some(ev), "round trip");
            e
        };
        let begun = EvictEvent::Begun {
            id: "e1".into(),
            namespace: "ns".into(),
            pod: "p".into(),
            uid: "u".into(),
            node: "n".into(),
            gpu: "0000:05:00.0".into(),
        };
        let ended = |id: &str| EvictEvent::Ended {
            id: id.into(),
            pod: "ns/p".into(),
            ok: true,
            detail: "gone".into(),
        };
        let runs = Runs::of(&[line(&begun), line(&ended("e1"))]);
        assert!(runs.runs.is_empty() && runs.unfinished(None).is_empty());
        assert_eq!(runs.evictions.len(), 1);
        assert_eq!(runs.evictions[0].pod, "ns/p");
        assert_eq!(runs.evictions[0].outcome, Some((true, "gone".into())));
        assert!(Runs::of(&[line(&ended("e9"))]).evictions.is_empty());
        let cut = Runs::of(&[line(&begun)]);
        assert_eq!(cut.evictions[0].outcome, None);
    }

    /// A step line is read into a typed key: each of the 19 kinds from its word, and a word
    /// this partop has no kind for (a newer partop's, a line edited by hand; 3 cases) kept as
    /// read, so the line still folds and is written back as the same word.
    #[test]
    fn a_step_key_is_typed_and_an_unknown_word_is_kept_as_read() {
        use super::{Entry, RunEvent, RunLine, StepKey, StepKind, Who};
        use serde_json::json;
        let line = |key: serde_json::Value| Entry {
            at: "2026-01-01T00:00:00Z".into(),
            who: Who::default(),
            host: "h".into(),
            action: "repartition.step".into(),
            simulated: true,
            targets: json!({"run": "r1", "fingerprint": "f", "step": 2, "key": key}),
            outcome: json!({"state": "begin"}),
        };
        let key_of = |e: &Entry| match RunLine::decode(e).map(|l| l.event) {
            Some(RunEvent::StepBegun { key, .. }) => key,
            other => panic!("{other:?}"),
        };
        for k in StepKind::ALL {
            let key = key_of(&line(json!(k.as_str())));
            assert_eq!(key, StepKey::Known(k));
            assert!(key == k);
        }
        for (word, kept) in [
            (json!("drain_v2"), "drain_v2"),
            (json!("\u{1b}[2J"), "\u{1b}[2J"),
            (json!(7), "?"),
        ] {
            let e = line(word);
            let key = key_of(&e);
            assert_eq!(key, StepKey::Unknown(kept.into()));
            assert_eq!(key.kind(), None);
            let (_, targets, _) = RunLine::decode(&e).unwrap().encode();
            assert_eq!(targets["key"], json!(kept), "written back as read");
        }
    }

    /// The four lines of a model's start and stop, as partop wrote them before they were typed
    /// (each key in its place), read into `ModelEvent`s and written back byte for byte; a start
    /// that launched a process is kept by the fold, one that launched none or failed is not
    /// (6 lines).
    #[test]
    fn model_lines_read_typed_and_write_as_they_always_did() {
        use super::{Entry, ModelEvent, Runs, Who};
        use serde_json::json;
        let start = json!({"model": "llama", "devices": [1, 2], "bdfs": ["0000:05:00.1", "0000:05:00.2"], "command": "vllm serve"});
        let stop = json!({"model": "llama", "pid": 4242, "command": "SIGTERM 4242"});
        let lines = [
            ("model.start", start.clone(), json!({"state": "starting"})),
            (
                "model.start.result",
                start.clone(),
                json!({"ok": true, "pid": 4242, "log": "/l/llama.log"}),
            ),
            (
                "model.start.result",
                start.clone(),
                json!({"ok": true, "pid": null, "log": "/l/llama.log"}),
            ),
            (
                "model.start.result",
                start,
                json!({"ok": false, "error": "port taken"}),
            ),
            ("model.stop", stop.clone(), json!({"state": "stopping"})),
            (
                "model.stop.result",
                stop,
                json!({"ok": true, "detail": "stopped"}),
            ),
        ];
        let mut entries = Vec::new();
        for (action, targets, outcome) in lines {
            let e = Entry {
                at: "2026-01-01T00:00:00Z".into(),
                who: Who::default(),
                host: "h".into(),
                action: action.into(),
                simulated: false,
                targets,
                outcome,
            };
            let ev = ModelEvent::decode(&e).unwrap_or_else(|| panic!("{action} not read"));
            let (a, t, o) = ev.encode();
            assert_eq!(a, action);
            assert_eq!(t.to_string(), e.targets.to_string(), "{action}");
            assert_eq!(o.to_string(), e.outcome.to_string(), "{action}");
            entries.push(e);
        }
        let runs = Runs::of(&entries);
        assert_eq!(runs.launched, [("llama".to_string(), 4242)]);
        assert!(runs.launched("llama", 4242) && !runs.launched("other", 4242));
        assert!(runs.runs.is_empty() && runs.evictions.is_empty());
    }

    /// The abandon command keeps the resume command's global options (the journal, the node),
    /// quoted as they were, for AMD and MIG runs (2 cases), and a bare one without a prefix.
    #[test]
    fn the_abandon_command_acts_on_the_runs_own_journal() {
        let cases = [
            (
                "/bin/partop --sim-state '/tmp/a b' --journal /tmp/j.jsonl apply /tmp/p.json --resume",
                "/bin/partop --sim-state '/tmp/a b' --journal /tmp/j.jsonl journal --abandon r1",
            ),
            (
                "partop --journal /j mig apply /p.json --resume",
                "partop --journal /j journal --abandon r1",
            ),
            ("apply p.json --resume", "partop journal --abandon r1"),
        ];
        for (resume, want) in cases {
            let words = super::command_prefix(resume);
            let mut all = words.clone();
            all.extend(["journal".into(), "--abandon".into(), "r1".into()]);
            assert_eq!(super::super::text::shell_line(&all), want, "{resume}");
        }
    }
}
