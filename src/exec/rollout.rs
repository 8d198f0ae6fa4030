//! A fleet rollout, the change protocol whose steps are nodes: the plan set verified (every
//! plan intact, the set's fingerprint over exactly them in their order), the resume decision
//! against the fleet journal, the operator's one confirmation, the rollout journaled, then the
//! nodes one chunk at a time, each done by the set's node engine, stopping at the first
//! failure. Two engines: `partop apply` on the node over `collect::fleet`'s transport (ssh,
//! rehearsal; here), and the cluster's own managers through the API server
//! (`exec::cluster_rollout`: cordon, evict, label, wait, uncordon, each step journaled).
//! Between `partop fleet [--kubernetes] apply` (which prints) and the engines.

use super::journal;
use super::protocol::Refused;
use crate::collect::fleet::{Transport, run_on, ssh_reason};
use crate::domain::cluster_rollout::{ClusterPlanSet, NodePlan as ClusterNodePlan};
use crate::domain::journal::{RolloutEvent, RolloutNode, Rollouts};
use crate::domain::plan::Plan;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One node's plan in a set.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodePlan {
    /// The node's name.
    pub node: String,
    /// The ssh destination.
    pub dest: String,
    /// The partop on it.
    pub partop: String,
    /// Its plan, as it made it.
    pub plan: Plan,
}

/// What `fleet plan` saves and `fleet apply` rolls out.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanSet {
    /// Over every node and plan fingerprint (`domain::fleet::set_fingerprint`).
    pub fingerprint: String,
    /// When it was made.
    pub created_at: String,
    /// The nodes in rollout order.
    pub nodes: Vec<NodePlan>,
}

impl PlanSet {
    /// The fingerprint of its nodes and plans as they are now.
    pub fn computed(&self) -> String {
        crate::domain::fleet::set_fingerprint(
            &self
                .nodes
                .iter()
                .map(|n| (n.node.clone(), n.plan.fingerprint.clone()))
                .collect::<Vec<_>>(),
        )
    }
}

/// A set of node plans one confirmation covers, whatever engine changes its nodes.
pub trait Set {
    /// One node's plan.
    type Node: Sync;
    /// The set's fingerprint as saved.
    fn fingerprint(&self) -> &str;
    /// Its nodes in rollout order.
    fn nodes(&self) -> &[Self::Node];
    /// A node as the rollout journals it (name, where it is reached, its plan's fingerprint).
    fn journaled(n: &Self::Node) -> RolloutNode;
    /// Why the saved set is not what was fingerprinted (None: intact).
    fn tampered(&self) -> Option<String>;
    /// The command that continues a rollout of the set saved in `file`.
    fn resume_command(file: &Path) -> String;
}

impl Set for PlanSet {
    type Node = NodePlan;

    fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    fn nodes(&self) -> &[NodePlan] {
        &self.nodes
    }

    fn journaled(n: &NodePlan) -> RolloutNode {
        RolloutNode {
            node: n.node.clone(),
            dest: n.dest.clone(),
            plan: n.plan.fingerprint.clone(),
        }
    }

    fn tampered(&self) -> Option<String> {
        if self.nodes.is_empty() {
            return Some("the set names no node".into());
        }
        if let Some(n) = self.nodes.iter().find(|n| !n.plan.content_intact()) {
            return Some(format!(
                "the plan for {} was changed after it was made",
                n.node
            ));
        }
        (self.computed() != self.fingerprint).then(|| {
            format!(
                "the set's nodes or plans changed since it was made, their order included (fingerprint {} now {})",
                self.fingerprint,
                self.computed()
            )
        })
    }

    fn resume_command(file: &Path) -> String {
        format!(
            "partop fleet apply {} --resume",
            crate::domain::text::shell_quote(&file.display().to_string())
        )
    }
}

impl Set for ClusterPlanSet {
    type Node = ClusterNodePlan;

    fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    fn nodes(&self) -> &[ClusterNodePlan] {
        &self.nodes
    }

    fn journaled(n: &ClusterNodePlan) -> RolloutNode {
        RolloutNode {
            node: n.node.clone(),
            dest: format!("kubernetes: {}", n.engine.words()),
            plan: n.fingerprint.clone(),
        }
    }

    fn tampered(&self) -> Option<String> {
        ClusterPlanSet::tampered(self)
    }

    fn resume_command(file: &Path) -> String {
        format!(
            "partop fleet --kubernetes apply {} --resume",
            crate::domain::text::shell_quote(&file.display().to_string())
        )
    }
}

/// What does one node's part of a rollout.
pub trait Engine<S: Set>: Sync {
    /// Why the rollout cannot start at all, asked before its resume is decided (the cluster
    /// engine: a verb the API server does not grant). Ok: it can.
    ///
    /// # Errors
    /// What is missing, in words naming the way out.
    fn can_start(&self, _set: &S) -> Result<(), String> {
        Ok(())
    }
    /// The nodes not in `skip` (done or attempted before) are still as planned, read now: a
    /// node changed since the plan refuses the whole rollout before anything acts (the ssh
    /// engine's nodes each re-plan live in their own apply, so it has nothing to read here).
    ///
    /// # Errors
    /// The first node changed or gone, said.
    fn still_valid(&self, _set: &S, _skip: &[String]) -> Result<(), String> {
        Ok(())
    }
    /// How an attempted node begins again (asked of the node or of the journal, not guessed).
    fn node_start(&self, n: &S::Node, start: &Start) -> NodeStart;
    /// Does the node's part: the lines it says, or where and why it failed.
    ///
    /// # Errors
    /// The node's failure, in words (its step and the reason).
    fn run(&self, n: &S::Node, how: &NodeStart, log: &StepLog) -> Result<Vec<String>, String>;
    /// One of the rollout's own lines was journaled (a rehearsal's crash injection hooks here:
    /// `cluster_rollout::ClusterEngine`); nothing by default.
    fn journaled(&self, _event: &RolloutEvent) {}
}

/// A node's steps as its engine journals and tells them: each step in the fleet journal before
/// it acts and when it is done (what a resume continues from), and to the operator as it goes.
pub struct StepLog {
    fj: PathBuf,
    rollout: String,
    node: String,
    plan: String,
    tx: std::sync::mpsc::Sender<Progress>,
    /// The step keys of this node journaled done by the rollout before (a resume's).
    pub done_before: Vec<String>,
}

impl StepLog {
    fn line(&self, step: &str, done: bool, text: Option<String>) -> Result<(), String> {
        super::runlog::rollout(
            &self.fj,
            &self.rollout,
            &RolloutEvent::NodeStep {
                node: self.node.clone(),
                plan: self.plan.clone(),
                step: step.to_string(),
                done,
                text,
            },
        )
        .map_err(|e| format!("{e}: nothing more is done"))
    }

    /// Journals that `step` begins (before it acts).
    ///
    /// # Errors
    /// The fleet journal cannot be written: the step must not act.
    pub fn begin(&self, step: &str) -> Result<(), String> {
        self.line(step, false, None)
    }

    /// Journals that `step` is done, with what it did, and tells the operator.
    ///
    /// # Errors
    /// The fleet journal cannot be written.
    pub fn done(&self, step: &str, text: &str) -> Result<(), String> {
        self.line(step, true, Some(text.to_string()))?;
        self.note(format!("{step}: {text}"));
        Ok(())
    }

    /// The change this rollout is, as it marks what it holds on a node (its cordon): the
    /// rollout's id, the same when it is resumed.
    pub fn owner(&self) -> String {
        format!("fleet rollout {}", self.rollout)
    }

    /// Journals a word about the node's step that the operator is told otherwise (the step's
    /// own failure says it): `done`, without a note.
    ///
    /// # Errors
    /// The fleet journal cannot be written.
    pub fn mark(&self, step: &str, text: &str) -> Result<(), String> {
        self.line(step, true, Some(text.to_string()))
    }

    /// Tells the operator something while a step runs (a budget's refusal being retried).
    pub fn note(&self, text: String) {
        let _ = self.tx.send(Progress::Step {
            node: self.node.clone(),
            text,
        });
    }
}

/// The saved set is what was fingerprinted: it names a node, every plan is intact and the
/// set's fingerprint is over exactly them, in their order (never trusted: a changed file is
/// refused).
///
/// # Errors
/// Why nothing is rolled out.
pub fn verify<S: Set>(set: &S, file: &Path) -> Result<(), Refused> {
    match set.tampered() {
        None => Ok(()),
        Some(why) => Err(Refused(format!(
            "{}: {why}; nothing is rolled out",
            file.display()
        ))),
    }
}

/// Where a rollout starts: its id, the nodes an interrupted rollout of the set finished, and
/// those it attempted without finishing (each continues its own run on the node, if it has one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The rollout's id.
    pub id: String,
    /// Nodes done before: skipped.
    pub done: Vec<String>,
    /// Nodes that failed, or were started and never reported (the rollout was killed under them).
    pub attempted: Vec<String>,
    /// The steps journaled done before: (node, step key).
    pub steps: Vec<(String, String)>,
    /// It continues a journaled rollout.
    pub resumed: bool,
}

/// The resume decision against the fleet journal `fj`: a resume continues the newest rollout
/// of the set; a fresh rollout is refused while one of the set is unfinished.
///
/// # Errors
/// Nothing to resume, or an unfinished rollout to continue first.
pub fn start<S: Set>(
    fj: &Path,
    set: &S,
    resume_command: &str,
    resume: bool,
) -> Result<Start, Refused> {
    // A journal that cannot be read is not "no rollout": nothing is decided on it.
    let (entries, _) = journal::read(fj).map_err(|e| {
        Refused(format!(
            "the fleet journal {} cannot be read ({e}): where a rollout of this set stands is unknown; nothing was done",
            fj.display()
        ))
    })?;
    let latest = Rollouts::of(&entries).latest(set.fingerprint()).cloned();
    if resume {
        let Some(r) = latest else {
            return Err(Refused(format!(
                "no rollout of set {} to resume in {}",
                set.fingerprint(),
                fj.display()
            )));
        };
        let attempted = r.attempted();
        return Ok(Start {
            id: r.id,
            done: r.done,
            attempted,
            steps: r.steps,
            resumed: true,
        });
    }
    if let Some(r) = latest.filter(|r| !r.finished) {
        // What it left cordoned is said with the undo of each (empty for an ssh rollout,
        // whose nodes drain themselves).
        let left = crate::domain::cluster_rollout::left_cordoned_with_undo(&r);
        // What it left cordoned first, so the refusal's line ends with the command that
        // continues it (pasted whole, a line going on after the command does not run).
        return Err(Refused(format!(
            "{}rollout {} of set {} is unfinished in {}: a fresh apply would start its nodes over. Continue it: {}",
            if left.is_empty() {
                String::new()
            } else {
                format!(
                    "it left cordoned: {}; ",
                    crate::domain::text::escape_controls(&left.join(", "))
                )
            },
            r.id,
            set.fingerprint(),
            fj.display(),
            resume_command
        )));
    }
    Ok(Start {
        id: format!("{}-{}", set.fingerprint(), crate::collect::clock::now_ms()),
        done: Vec::new(),
        attempted: Vec::new(),
        steps: Vec::new(),
        resumed: false,
    })
}

/// The lock of the rollouts journaled in the fleet journal `fj` (beside it).
pub fn lock_path(fj: &Path) -> PathBuf {
    fj.with_extension("lock")
}

/// Takes the rollout lock, or says who holds it and how to follow them.
fn lock<S: Set>(fj: &Path, set: &S) -> Result<super::lock::NodeLock, Refused> {
    let path = lock_path(fj);
    let me = super::lock::Holder::me("fleet rollout of set", set.fingerprint(), fj);
    super::lock::acquire(&path, &me).map_err(|e| match e {
        super::lock::LockError::Busy(h) => Refused(format!(
            "another rollout is running from this fleet journal: {} {} since {}, pid {}. One change at a time: wait for it to end (its progress is in {}), then run this again; nothing was done",
            h.what, h.id, h.since, h.pid, h.journal
        )),
        e @ super::lock::LockError::Io { .. } => Refused(e.to_string()),
    })
}

/// How a node of the rollout begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeStart {
    /// A fresh apply of its plan.
    Apply,
    /// Its last attempt stopped before the node's first step (no run there): applied afresh.
    ApplyAgain,
    /// It continues its own run of the plan on the node.
    Resume,
    /// Whether it has a run could not be read: it fails before its first step.
    Unknown(String),
}

/// What a rollout tells while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// A node begins.
    Node {
        /// Its name.
        node: String,
        /// How.
        how: NodeStart,
        /// Its plan's fingerprint.
        plan: String,
    },
    /// A step of a node's engine said something (a step done, a budget's refusal retried).
    Step {
        /// Its name.
        node: String,
        /// What.
        text: String,
    },
    /// A node applied its plan and reads back what it says.
    Applied {
        /// Its name.
        node: String,
        /// Its apply's step lines (`[i/n] …`).
        steps: Vec<String>,
    },
    /// A node failed: its step and text.
    Failed {
        /// Its name.
        node: String,
        /// What failed, where.
        error: String,
    },
}

/// How the operator takes part in a rollout: shown what will run, asked once for the set,
/// told each node's progress.
pub trait Operator<S: Set = PlanSet> {
    /// The operator confirms rolling out `todo` (the nodes not done before) under `start`.
    ///
    /// # Errors
    /// The answer could not be read.
    fn confirm(&mut self, set: &S, todo: &[&S::Node], start: &Start) -> anyhow::Result<bool>;
    /// The exact command that continues a rollout of the set saved in `file` (the command
    /// layer's carries its journal and cluster options; by default the set's bare command).
    fn resume_command(&self, file: &Path) -> String {
        S::resume_command(file)
    }
    /// A node's progress.
    ///
    /// # Errors
    /// The operator's output is gone.
    fn progress(&mut self, p: Progress) -> anyhow::Result<()>;
}

/// What a rollout came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not confirmed: nothing was changed.
    NotConfirmed,
    /// Every node applied and verified.
    Done,
    /// Stopped at the first failure; these nodes were not touched.
    Stopped {
        /// The nodes after the failing chunk.
        untouched: Vec<String>,
        /// The nodes it left cordoned, or may have, each with its undo (from the fleet
        /// journal's fold, not a live read that the failing API server may not answer).
        left_cordoned: Vec<String>,
    },
}

/// A rollout of a verified `set` of ssh nodes, `parallel` nodes at a time over transport `t`,
/// journaled in the fleet journal `fj`: each node's own `partop apply`.
///
/// # Errors
/// A refusal before anything ran, or the fleet journal unwritable (nothing more is rolled out).
pub fn execute(
    t: &Transport,
    set: &PlanSet,
    file: &Path,
    parallel: usize,
    resume: bool,
    fj: &Path,
    op: &mut impl Operator,
) -> anyhow::Result<Outcome> {
    run(&SshApply { t }, set, file, parallel, resume, fj, op)
}

/// The rollout protocol over any engine: verified, resume decided, confirmed once, journaled,
/// then chunk by chunk until the first failure.
///
/// # Errors
/// A refusal before anything ran, or the fleet journal unwritable (nothing more is rolled out).
pub fn run<S: Set, E: Engine<S>>(
    engine: &E,
    set: &S,
    file: &Path,
    parallel: usize,
    resume: bool,
    fj: &Path,
    op: &mut impl Operator<S>,
) -> anyhow::Result<Outcome> {
    verify(set, file)?;
    // One rollout at a time per fleet journal, held until it ends: a second operator (the
    // CLI beside the live view, two shells) is refused, told who runs it.
    let _lock = lock(fj, set)?;
    // The engines' words carry the API server's: escaped.
    let said = |e: String| Refused(crate::domain::text::escape_controls(&e).into_owned());
    engine.can_start(set).map_err(said)?;
    let start = start(fj, set, &op.resume_command(file), resume)?;
    // Every node not touched before is re-read against its plan before anything acts.
    let mut skip = start.done.clone();
    skip.extend(start.attempted.iter().cloned());
    engine.still_valid(set, &skip).map_err(said)?;
    let todo: Vec<&S::Node> = set
        .nodes()
        .iter()
        .filter(|n| !start.done.contains(&S::journaled(n).node))
        .collect();
    if !op.confirm(set, &todo, &start)? {
        return Ok(Outcome::NotConfirmed);
    }
    let log = |e: &RolloutEvent| journal_or_stop(fj, &start.id, e).map(|()| engine.journaled(e));
    if !start.resumed {
        log(&RolloutEvent::Started {
            set: set.fingerprint().to_string(),
            file: file.display().to_string(),
            nodes: set.nodes().iter().map(S::journaled).collect(),
            parallel,
        })?;
    }
    for chunk in todo.chunks(parallel.max(1)) {
        let mut how = Vec::new();
        for n in chunk {
            let j = S::journaled(n);
            let h = engine.node_start(n, &start);
            log(&RolloutEvent::NodeStarted {
                node: j.clone(),
                resume: match &h {
                    NodeStart::Resume => Some(true),
                    NodeStart::Apply | NodeStart::ApplyAgain => Some(false),
                    NodeStart::Unknown(_) => None,
                },
                error: match &h {
                    NodeStart::Unknown(e) => Some(e.clone()),
                    _ => None,
                },
            })?;
            op.progress(Progress::Node {
                node: j.node,
                how: h.clone(),
                plan: j.plan,
            })?;
            how.push(h);
        }
        let results = run_chunk(engine, chunk, how, fj, &start, op)?;
        let mut stop = false;
        for (n, r) in results {
            let j = S::journaled(n);
            match r {
                Ok(lines) => {
                    op.progress(Progress::Applied {
                        node: j.node.clone(),
                        steps: lines,
                    })?;
                    log(&RolloutEvent::NodeDone {
                        node: j.node,
                        plan: j.plan,
                    })?;
                }
                Err(e) => {
                    op.progress(Progress::Failed {
                        node: j.node.clone(),
                        error: e.clone(),
                    })?;
                    log(&RolloutEvent::NodeFailed {
                        node: j.node,
                        plan: j.plan,
                        error: e,
                    })?;
                    stop = true;
                }
            }
        }
        if stop {
            return stopped(set, chunk, fj, &start.id);
        }
    }
    log(&RolloutEvent::Done {
        set: set.fingerprint().to_string(),
    })?;
    Ok(Outcome::Done)
}

/// The first failure stops the rollout (in chunk `chunk`): the nodes after the chunk stay
/// untouched; the stop is journaled, and what the rollout left cordoned is read back from the
/// journal's fold (not from the cluster, which may be what failed).
fn stopped<S: Set>(set: &S, chunk: &[&S::Node], fj: &Path, id: &str) -> anyhow::Result<Outcome> {
    let names: Vec<String> = chunk.iter().map(|c| S::journaled(c).node).collect();
    let untouched: Vec<String> = set
        .nodes()
        .iter()
        .map(|x| S::journaled(x).node)
        .skip_while(|x| !names.contains(x))
        .skip(chunk.len())
        .collect();
    journal_or_stop(
        fj,
        id,
        &RolloutEvent::Stopped {
            set: set.fingerprint().to_string(),
            untouched: untouched.clone(),
        },
    )?;
    let left_cordoned = match journal::read(fj) {
        Ok((entries, _)) => Rollouts::of(&entries)
            .rollouts
            .iter()
            .rev()
            .find(|r| r.id == id)
            .map(crate::domain::cluster_rollout::left_cordoned_with_undo)
            .unwrap_or_default(),
        Err(e) => vec![format!(
            "not known: the fleet journal {} cannot be read back ({e}); `kubectl get nodes` shows which nodes are cordoned",
            fj.display()
        )],
    };
    Ok(Outcome::Stopped {
        untouched,
        left_cordoned,
    })
}

/// A node and what its engine came to: its lines, or where and why it failed.
type NodeResult<'a, S> = (&'a <S as Set>::Node, Result<Vec<String>, String>);

/// One chunk's nodes at once, each on its own thread; what their steps say reaches the
/// operator as it happens.
fn run_chunk<'a, S: Set, E: Engine<S>>(
    engine: &E,
    chunk: &[&'a S::Node],
    how: Vec<NodeStart>,
    fj: &Path,
    start: &Start,
    op: &mut impl Operator<S>,
) -> anyhow::Result<Vec<NodeResult<'a, S>>> {
    let (tx, rx) = std::sync::mpsc::channel::<Progress>();
    let mut said = Ok(());
    let results = std::thread::scope(|s| {
        let hs: Vec<_> = chunk
            .iter()
            .zip(how)
            .map(|(n, how)| {
                let j = S::journaled(n);
                let log = StepLog {
                    fj: fj.to_path_buf(),
                    rollout: start.id.clone(),
                    done_before: start
                        .steps
                        .iter()
                        .filter(|(x, _)| *x == j.node)
                        .map(|(_, k)| k.clone())
                        .collect(),
                    node: j.node,
                    plan: j.plan,
                    tx: tx.clone(),
                };
                s.spawn(move || (*n, engine.run(n, &how, &log)))
            })
            .collect();
        drop(tx);
        // Ends when every node's thread is done (its log, the last sender, dropped).
        for p in rx {
            if said.is_ok() {
                said = op.progress(p);
            }
        }
        hs.into_iter()
            .filter_map(|h| h.join().ok())
            .collect::<Vec<_>>()
    });
    said.map(|()| results)
}

/// The ssh engine: each node's own `partop apply` through `collect::fleet::run_on`, read back.
struct SshApply<'a> {
    t: &'a Transport,
}

impl Engine<PlanSet> for SshApply<'_> {
    fn node_start(&self, n: &NodePlan, start: &Start) -> NodeStart {
        node_start(self.t, n, start)
    }

    fn run(&self, n: &NodePlan, how: &NodeStart, _log: &StepLog) -> Result<Vec<String>, String> {
        apply_node(self.t, n, how).map(|o| step_lines(&o))
    }
}

/// A node attempted before continues its own run when the node has one; an attempt that never
/// reached its first step starts afresh (asked of the node, not guessed).
fn node_start(t: &Transport, n: &NodePlan, start: &Start) -> NodeStart {
    if !start.attempted.contains(&n.node) {
        return NodeStart::Apply;
    }
    match node_has_run(t, n) {
        Ok(true) => NodeStart::Resume,
        Ok(false) => NodeStart::ApplyAgain,
        Err(e) => NodeStart::Unknown(e),
    }
}

/// One node's step of the rollout: its own `partop apply` (the plan on stdin, `--yes`: the
/// fleet's confirmation covers it), then read back. Its output, or where and why it failed.
pub(crate) fn apply_node(t: &Transport, n: &NodePlan, how: &NodeStart) -> Result<String, String> {
    if let NodeStart::Unknown(e) = how {
        return Err(format!("failed before its first step: {e}"));
    }
    let plan = serde_json::to_string(&n.plan).unwrap_or_default();
    let mut remote = vec![n.partop.clone(), "apply".into(), "-".into(), "--yes".into()];
    if *how == NodeStart::Resume {
        remote.push("--resume".into());
    }
    let (code, o, e) = run_on(t, &n.dest, &remote, &plan, Duration::from_secs(3600));
    if code == Some(0) {
        return verify_node(t, n).map(|()| o);
    }
    // Its step: the last `[i/n]` line; its text: the end of what it said.
    let step = o
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('['))
        .unwrap_or("before its first step")
        .trim()
        .to_string();
    // What it said on stderr (its error and what to do), else stdout.
    let src = if e.trim().is_empty() { &o } else { &e };
    let tail: Vec<&str> = src.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = tail[tail.len().saturating_sub(4)..].join(" / ");
    Err(format!(
        "failed at {step}: {} (exit {})",
        tail.trim(),
        code.map_or_else(|| "none".into(), |c| c.to_string())
    ))
}

/// The node's own plan of `compute`/`memory` on every GPU (`partop plan --json` run there over
/// `t`): what the fleet embeds, fingerprinted by the node, in a set. Its reason when it could
/// not be made.
///
/// # Errors
/// The node could not be reached, refused to plan, or answered what is not a plan.
pub fn plan_on(
    t: &Transport,
    dest: &str,
    partop: &str,
    compute: Option<&str>,
    memory: Option<&str>,
) -> Result<Plan, String> {
    let mut remote = vec![
        partop.to_string(),
        "plan".into(),
        "--gpu".into(),
        "all".into(),
    ];
    if let Some(c) = compute {
        remote.extend(["--compute".into(), c.to_string()]);
    }
    if let Some(m) = memory {
        remote.extend(["--memory".into(), m.to_string()]);
    }
    remote.push("--json".into());
    let (code, o, e) = run_on(t, dest, &remote, "", Duration::from_secs(120));
    if code == Some(0) {
        return serde_json::from_str::<Plan>(&o).map_err(|x| format!("not a plan: {x}"));
    }
    // The reason already names the node's last line: said once.
    Err(ssh_reason(code, &e, false).replace(" before a sample", ""))
}

/// The `[i/n] …` lines of a node's apply.
pub(crate) fn step_lines(output: &str) -> Vec<String> {
    output
        .lines()
        .filter(|l| l.trim_start().starts_with('['))
        .map(str::to_string)
        .collect()
}

/// Whether the node's own journal (`partop journal --json`) has a run of `n`'s plan: the fleet
/// asks before it continues a node it attempted, since an attempt that failed before the
/// node's first step (ssh refused, the node's partop refused before journaling) left no run
/// there to resume.
pub(crate) fn node_has_run(t: &Transport, n: &NodePlan) -> Result<bool, String> {
    let remote = vec![n.partop.clone(), "journal".into(), "--json".into()];
    let (code, o, e) = run_on(t, &n.dest, &remote, "", Duration::from_secs(120));
    if code != Some(0) {
        return Err(format!(
            "cannot read its journal to know where it stopped: {}",
            ssh_reason(code, &e, false)
        ));
    }
    let (entries, _) = journal::parse(&n.node, o.as_bytes());
    Ok(crate::domain::journal::Runs::of(&entries)
        .latest(
            crate::domain::journal::RunKind::Repartition,
            &n.plan.fingerprint,
        )
        .is_some())
}

/// The node reads back what its plan says, within a minute (its kernel files follow a reload
/// within seconds; a node that still reads the old layout after that has not changed).
fn verify_node(t: &Transport, n: &NodePlan) -> Result<(), String> {
    let end = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match verify_once(t, n) {
            Ok(()) => return Ok(()),
            Err(e) if std::time::Instant::now() >= end => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_secs(2)),
        }
    }
}

/// One read-back: modes on each changed GPU and the logical GPU count.
fn verify_once(t: &Transport, n: &NodePlan) -> Result<(), String> {
    let remote = vec![n.partop.clone(), "snapshot".into(), "--json".into()];
    let (code, o, e) = run_on(t, &n.dest, &remote, "", Duration::from_secs(120));
    if !matches!(code, Some(0 | 3)) {
        return Err(format!("verify: snapshot failed: {}", e.trim()));
    }
    let snap: crate::domain::Snapshot =
        serde_json::from_str(&o).map_err(|x| format!("verify: not a snapshot: {x}"))?;
    for c in &n.plan.changes {
        let g = snap
            .gpus
            .iter()
            .find(|g| g.bdf == c.bdf)
            .ok_or_else(|| format!("verify: {} is gone", c.bdf))?;
        if g.compute_partition != Some(c.to.0) || g.memory_partition != Some(c.to.1) {
            return Err(format!(
                "verify: {} reads {}, expected {}/{}",
                c.bdf,
                g.modes_label(),
                c.to.0,
                c.to.1
            ));
        }
    }
    if snap.logical_count() != n.plan.after.len() {
        return Err(format!(
            "verify: {} logical GPUs, the plan expects {}",
            snap.logical_count(),
            n.plan.after.len()
        ));
    }
    Ok(())
}

/// Journals a rollout's line; a journal that cannot be written stops the rollout.
fn journal_or_stop(path: &Path, rollout: &str, event: &RolloutEvent) -> anyhow::Result<()> {
    super::runlog::rollout(path, rollout, event)
        .map_err(|e| anyhow::anyhow!("{e}: nothing more is rolled out"))
}
