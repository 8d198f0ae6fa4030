//! A fleet rollout, the change protocol whose steps are nodes: the plan set verified (every
//! plan intact, the set's fingerprint over exactly them), the resume decision against the
//! fleet journal, the operator's one confirmation, the rollout journaled, then the nodes one
//! chunk at a time (each its own `partop apply` through `collect::fleet::run_on`, verified by
//! reading it back), stopping at the first failure. Between `partop fleet apply` (which
//! prints) and the transport (ssh, rehearsal), which stays in `collect::fleet`.

use super::journal;
use super::protocol::Refused;
use crate::collect::fleet::{Transport, run_on, ssh_reason};
use crate::domain::journal::{RolloutEvent, RolloutNode, Rollouts};
use crate::domain::plan::Plan;
use serde::{Deserialize, Serialize};
use std::path::Path;
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

/// The saved set is what was fingerprinted: it names a node, every plan is intact and the
/// set's fingerprint is over exactly them (never trusted: a changed file is refused).
///
/// # Errors
/// Why nothing is rolled out.
pub fn verify(set: &PlanSet, file: &Path) -> Result<(), Refused> {
    if set.nodes.is_empty() {
        return Err(Refused(format!(
            "{}: the set names no node; nothing is rolled out",
            file.display()
        )));
    }
    if let Some(n) = set.nodes.iter().find(|n| !n.plan.content_intact()) {
        return Err(Refused(format!(
            "{}: the plan for {} was changed after it was made; nothing is rolled out",
            file.display(),
            n.node
        )));
    }
    if set.computed() != set.fingerprint {
        return Err(Refused(format!(
            "{}: the set's nodes or plans changed since it was made (fingerprint {} now {}); nothing is rolled out",
            file.display(),
            set.fingerprint,
            set.computed()
        )));
    }
    Ok(())
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
    /// It continues a journaled rollout.
    pub resumed: bool,
}

/// The resume decision against the fleet journal `fj`: a resume continues the newest rollout
/// of the set; a fresh rollout is refused while one of the set is unfinished.
///
/// # Errors
/// Nothing to resume, or an unfinished rollout to continue first.
pub fn start(fj: &Path, set: &PlanSet, file: &Path, resume: bool) -> Result<Start, Refused> {
    let (entries, _) = journal::read(fj).unwrap_or_default();
    let latest = Rollouts::of(&entries).latest(&set.fingerprint).cloned();
    if resume {
        let Some(r) = latest else {
            return Err(Refused(format!(
                "no rollout of set {} to resume in {}",
                set.fingerprint,
                fj.display()
            )));
        };
        let attempted = r.attempted();
        return Ok(Start {
            id: r.id,
            done: r.done,
            attempted,
            resumed: true,
        });
    }
    if let Some(r) = latest.filter(|r| !r.finished) {
        return Err(Refused(format!(
            "rollout {} of set {} is unfinished in {}: its done nodes no longer match their plans. Continue it: partop fleet apply {} --resume",
            r.id,
            set.fingerprint,
            fj.display(),
            file.display()
        )));
    }
    Ok(Start {
        id: format!("{}-{}", set.fingerprint, crate::collect::clock::now_ms()),
        done: Vec::new(),
        attempted: Vec::new(),
        resumed: false,
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
pub trait Operator {
    /// The operator confirms rolling out `todo` (the nodes not done before) under `start`.
    ///
    /// # Errors
    /// The answer could not be read.
    fn confirm(&mut self, set: &PlanSet, todo: &[&NodePlan], start: &Start)
    -> anyhow::Result<bool>;
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
    },
}

/// A rollout of a verified `set`, `parallel` nodes at a time over transport `t`, journaled in
/// the fleet journal `fj`.
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
    verify(set, file)?;
    let start = start(fj, set, file, resume)?;
    let todo: Vec<&NodePlan> = set
        .nodes
        .iter()
        .filter(|n| !start.done.contains(&n.node))
        .collect();
    if !op.confirm(set, &todo, &start)? {
        return Ok(Outcome::NotConfirmed);
    }
    let log = |event: &RolloutEvent| journal_or_stop(fj, &start.id, event);
    if !start.resumed {
        log(&RolloutEvent::Started {
            set: set.fingerprint.clone(),
            file: file.display().to_string(),
            nodes: set.nodes.iter().map(rollout_node).collect(),
            parallel,
        })?;
    }
    for chunk in todo.chunks(parallel.max(1)) {
        let mut how = Vec::new();
        for n in chunk {
            let h = node_start(t, n, &start);
            log(&RolloutEvent::NodeStarted {
                node: rollout_node(n),
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
                node: n.node.clone(),
                how: h.clone(),
                plan: n.plan.fingerprint.clone(),
            })?;
            how.push(h);
        }
        let results: Vec<(&NodePlan, Result<String, String>)> = std::thread::scope(|s| {
            let hs: Vec<_> = chunk
                .iter()
                .zip(how)
                .map(|(n, how)| s.spawn(move || (*n, apply_node(t, n, &how))))
                .collect();
            hs.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        let mut stop = false;
        for (n, r) in results {
            match r {
                Ok(o) => {
                    op.progress(Progress::Applied {
                        node: n.node.clone(),
                        steps: step_lines(&o),
                    })?;
                    log(&RolloutEvent::NodeDone {
                        node: n.node.clone(),
                        plan: n.plan.fingerprint.clone(),
                    })?;
                }
                Err(e) => {
                    op.progress(Progress::Failed {
                        node: n.node.clone(),
                        error: e.clone(),
                    })?;
                    log(&RolloutEvent::NodeFailed {
                        node: n.node.clone(),
                        plan: n.plan.fingerprint.clone(),
                        error: e,
                    })?;
                    stop = true;
                }
            }
        }
        if stop {
            // The first failure stops the rollout: the nodes after this chunk stay untouched.
            let untouched: Vec<String> = set
                .nodes
                .iter()
                .skip_while(|x| !chunk.iter().any(|c| c.node == x.node))
                .skip(chunk.len())
                .map(|x| x.node.clone())
                .collect();
            log(&RolloutEvent::Stopped {
                set: set.fingerprint.clone(),
                untouched: untouched.clone(),
            })?;
            return Ok(Outcome::Stopped { untouched });
        }
    }
    log(&RolloutEvent::Done {
        set: set.fingerprint.clone(),
    })?;
    Ok(Outcome::Done)
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
fn apply_node(t: &Transport, n: &NodePlan, how: &NodeStart) -> Result<String, String> {
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

/// The `[i/n] …` lines of a node's apply.
fn step_lines(output: &str) -> Vec<String> {
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
fn node_has_run(t: &Transport, n: &NodePlan) -> Result<bool, String> {
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

/// A node as its rollout journals it.
fn rollout_node(n: &NodePlan) -> RolloutNode {
    RolloutNode {
        node: n.node.clone(),
        dest: n.dest.clone(),
        plan: n.plan.fingerprint.clone(),
    }
}

/// Journals a rollout's line; a journal that cannot be written stops the rollout.
fn journal_or_stop(path: &Path, rollout: &str, event: &RolloutEvent) -> anyhow::Result<()> {
    super::runlog::rollout(path, rollout, event)
        .map_err(|e| anyhow::anyhow!("{e}: nothing more is rolled out"))
}
