//! The one change protocol, below the commands: a saved plan is verified (its content against
//! its fingerprint), the node is locked, a resume is checked against its journaled run and the
//! node as it is now (`still_valid`), a fresh run is re-planned live and must come out
//! identical, the run is journaled before any step acts, then the executor runs the steps (the
//! last of which verifies). Generic over what is changed ([`Change`]: the AMD plan, the MIG
//! plan), so `partop apply` and `partop mig apply` keep only their arguments, prompts and
//! printing, and a new kind of change is one `impl Change`.

use super::journal::{self, Run};
use super::runlog::RunLog;
use crate::domain::journal::{RunKind, StepKind};
use std::path::Path;

/// What a change protocol needs to know of a plan.
pub trait Change: Clone + PartialEq + serde::Serialize + serde::de::DeserializeOwned {
    /// The kind of run its journal entries belong to.
    const RUN: RunKind;
    /// The command that makes such a plan (what a refusal tells the operator to run again).
    const PLAN_COMMAND: &'static str;
    /// Its fingerprint, as saved.
    fn fingerprint(&self) -> &str;
    /// Its content's fingerprint, computed now.
    fn content_fingerprint(&self) -> String;
    /// Its steps' kinds, in order.
    fn step_kinds(&self) -> Vec<StepKind>;
    /// What differs between it and a plan made now, in words (empty when nothing is named).
    fn differences(&self, _now: &Self) -> Vec<String> {
        Vec::new()
    }
}

impl Change for crate::domain::plan::Plan {
    const RUN: RunKind = RunKind::Repartition;
    const PLAN_COMMAND: &'static str = "partop plan … --json";
    fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
    fn content_fingerprint(&self) -> String {
        Self::content_fingerprint(self)
    }
    fn step_kinds(&self) -> Vec<StepKind> {
        self.steps.iter().map(|s| s.key).collect()
    }
    fn differences(&self, now: &Self) -> Vec<String> {
        crate::domain::plan::differences(self, now)
    }
}

impl Change for crate::domain::mig::MigPlan {
    const RUN: RunKind = RunKind::Mig;
    const PLAN_COMMAND: &'static str = "partop mig plan … --json";
    fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
    fn content_fingerprint(&self) -> String {
        Self::content_fingerprint(self)
    }
    fn step_kinds(&self) -> Vec<StepKind> {
        self.steps.iter().map(|s| s.key).collect()
    }
}

/// Why nothing was done: the sentence for the operator, naming the way out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Where a confirmed plan's run starts.
#[derive(Debug, Clone, PartialEq)]
pub enum Start<P> {
    /// A new run: the plan as re-derived from the node now (identical to the saved one).
    Fresh(P),
    /// The journaled run goes on at step `from`, with the plan as it was confirmed.
    Resume {
        /// The journaled plan.
        plan: P,
        /// The first step not done.
        from: usize,
        /// The run.
        run: Box<Run>,
    },
    /// The run of this plan is complete: nothing to do.
    Complete(Box<Run>),
}

/// The saved plan is what was fingerprinted (never trusted: a changed file is refused).
pub fn verify<P: Change>(plan: &P, file: &Path) -> Result<(), Refused> {
    let now = plan.content_fingerprint();
    if now == plan.fingerprint() {
        return Ok(());
    }
    Err(Refused(format!(
        "{} was changed after it was planned: its content no longer matches its fingerprint {} (now {now}). Nothing is applied. Make a new plan with `{}`",
        file.display(),
        plan.fingerprint(),
        P::PLAN_COMMAND
    )))
}

/// The run id this apply journals under: a resume continues the newest run of the plan, a
/// fresh apply starts its own (taken before the lock, which names it).
pub fn run_id<P: Change>(journal_path: &Path, plan: &P, resume: bool) -> String {
    if resume {
        journal::latest_run(journal_path, P::RUN, plan.fingerprint())
            .map(|r| r.run)
            .unwrap_or_default()
    } else {
        journal::new_run_id()
    }
}

/// What the node is now, as the protocol asks it (read under the lock).
pub trait Node<P> {
    /// Why a fresh run of `plan` cannot start on the node as it is now (empty: it can).
    fn can_start(&self, plan: &P) -> Vec<String>;
    /// Why the journaled `plan` cannot be resumed on the node as it is now (`still_valid`;
    /// empty: it can). `stop_done`: its stop step already ran, so its processes are gone;
    /// `done`: the steps the run finished (what the node must show for them).
    fn can_resume(&self, plan: &P, stop_done: bool, done: &[usize]) -> Vec<String>;
    /// The plan made now from the saved plan's request, or why it cannot be made.
    fn replan(&self, saved: &P) -> Result<P, String>;
}

impl<P, N: Node<P>> Node<P> for &N {
    fn can_start(&self, plan: &P) -> Vec<String> {
        (**self).can_start(plan)
    }
    fn can_resume(&self, plan: &P, stop_done: bool, done: &[usize]) -> Vec<String> {
        (**self).can_resume(plan, stop_done, done)
    }
    fn replan(&self, saved: &P) -> Result<P, String> {
        (**self).replan(saved)
    }
}

/// The resume check and the live re-plan, under the lock: where this apply starts, or why it
/// must not. `node` names the node in the journal (its unfinished runs refuse a fresh apply).
pub fn start<P: Change>(
    journal_path: &Path,
    node_id: &str,
    saved: &P,
    resume: bool,
    node: &impl Node<P>,
) -> Result<Start<P>, Refused> {
    if resume {
        return resume_start(journal_path, saved, node);
    }
    if let Some(u) = journal::unfinished_on(journal_path, node_id).first() {
        return Err(Refused(u.describe()));
    }
    let why = node.can_start(saved);
    if !why.is_empty() {
        return Err(Refused(format!("{}\nnothing was changed", why.join("\n"))));
    }
    // The node must still be the node the plan was made for: re-planned here, the plan must
    // come out identical, and the re-derived plan is what runs.
    match node.replan(saved) {
        Ok(now) if now == *saved => Ok(Start::Fresh(now)),
        Ok(now) => {
            let diff = saved.differences(&now);
            Err(Refused(format!(
                "the node changed since this plan was made (plan {}, now {}){}. Review the new plan with `{}` and save it again",
                saved.fingerprint(),
                now.fingerprint(),
                if diff.is_empty() {
                    String::new()
                } else {
                    format!(": {}", diff.join("; "))
                },
                P::PLAN_COMMAND
            )))
        }
        Err(e) => Err(Refused(format!("this plan no longer applies: {e}"))),
    }
}

/// A resume: the newest run of this plan, as journaled, continued where it stopped if the node
/// is in a state the plan can have produced.
fn resume_start<P: Change>(
    journal_path: &Path,
    saved: &P,
    node: &impl Node<P>,
) -> Result<Start<P>, Refused> {
    let Some(run) = journal::latest_run(journal_path, P::RUN, saved.fingerprint()) else {
        return Err(Refused(format!(
            "the journal {} has no run of {} plan {}: there is nothing to resume. Apply it without --resume",
            journal_path.display(),
            P::RUN,
            saved.fingerprint()
        )));
    };
    match run.closed {
        Some(crate::domain::journal::Close::Done) => return Ok(Start::Complete(Box::new(run))),
        Some(crate::domain::journal::Close::Abandoned) => {
            return Err(Refused(format!(
                "run {} of this plan was abandoned; make a new plan with `{}`",
                run.run,
                P::PLAN_COMMAND
            )));
        }
        None => {}
    }
    // The run continues with the plan as it was confirmed and journaled.
    let journaled: P = serde_json::from_value(run.plan.clone()).map_err(|e| {
        Refused(format!(
            "the journaled plan of run {} cannot be read: {e}",
            run.run
        ))
    })?;
    if journaled != *saved {
        return Err(Refused(format!(
            "the plan given differs from the plan run {} confirmed: nothing is resumed",
            run.run
        )));
    }
    let from = run.resume_point();
    let kinds = journaled.step_kinds();
    if from >= kinds.len() {
        return Ok(Start::Complete(Box::new(run)));
    }
    let stop_done = kinds
        .iter()
        .position(|k| *k == StepKind::Stop)
        .is_none_or(|i| run.done.contains(&i));
    let why = node.can_resume(&journaled, stop_done, &run.done);
    if !why.is_empty() {
        return Err(Refused(format!(
            "run {} cannot be resumed on this node as it is now:\n  {}\nnothing was changed",
            run.run,
            why.join("\n  ")
        )));
    }
    Ok(Start::Resume {
        plan: journaled,
        from,
        run: Box::new(run),
    })
}

/// Journal first: the run's start (the whole plan as confirmed, its file, the command that
/// resumes it) or its resumption, before any step acts. Without it nothing is done.
pub fn journal_start<P: Change>(
    log: &RunLog,
    start: &Start<P>,
    plan_file: Option<&Path>,
    resume_command: &str,
) -> Result<(), Refused> {
    let r = match start {
        Start::Fresh(plan) => {
            let value = serde_json::to_value(plan).map_err(|e| Refused(e.to_string()))?;
            log.start_resumable(
                &value,
                plan_file,
                plan.step_kinds().len(),
                Some(resume_command),
            )
        }
        Start::Resume { from, .. } => log.resumed(*from),
        Start::Complete(_) => return Ok(()),
    };
    r.map_err(|e| Refused(e.to_string()))
}

/// A confirmed run's request: the saved (verified) plan and where it is journaled and locked.
/// What the caller knows of the node (its tools, its sample) it hands the executor's entry.
#[derive(Debug, Clone)]
pub struct Request<'a, P> {
    /// The saved plan, verified ([`verify`]).
    pub saved: &'a P,
    /// Its file (journaled with the run; `-` for a plan read from stdin).
    pub file: &'a Path,
    /// Continue the journaled run instead of starting one.
    pub resume: bool,
    /// The journal.
    pub journal: &'a Path,
    /// The node as the journal names it (`journal::node_id`).
    pub node_id: String,
    /// The node lock's file.
    pub lock: &'a Path,
    /// Who holds the lock, in words (`apply`, `mig apply`).
    pub holder: &'static str,
    /// The exact command that resumes this run (journaled, printed with every failure).
    pub resume_command: String,
    /// The node is simulated (journal flag).
    pub simulated: bool,
}

/// How the operator takes part in a run: told where it starts, asked to confirm the plan that
/// will run, told when it is journaled and how its steps go. The command layer prints; the
/// protocol never does.
pub trait Operator<P> {
    /// What the steps report while they run.
    type Event;
    /// Where the run starts (a complete run ends here), before it is confirmed.
    ///
    /// # Errors
    /// Whatever stops the run (the operator's output is gone).
    fn starting(&mut self, _start: &Start<P>) -> anyhow::Result<()> {
        Ok(())
    }
    /// The operator confirms `plan` (false: nothing is done).
    ///
    /// # Errors
    /// The answer could not be read.
    fn confirm(&mut self, plan: &P, start: &Start<P>) -> anyhow::Result<bool>;
    /// The run is journaled; its steps come next.
    ///
    /// # Errors
    /// Whatever stops the run before its first step.
    fn journaled(&mut self, _run: &Running<P>) -> anyhow::Result<()> {
        Ok(())
    }
    /// A step's progress.
    fn progress(&mut self, event: Self::Event);
}

/// A run confirmed and journaled, its lock held: what the executor's steps run under.
pub struct Running<P> {
    /// The plan that runs (re-derived live, or as journaled for a resume).
    pub plan: P,
    /// Its first step to run.
    pub from: usize,
    /// Its journal.
    pub log: RunLog,
    /// The exact command that resumes it.
    pub resume_command: String,
    _lock: super::lock::NodeLock,
}

/// How a request ended before its steps, or that they may run.
pub enum Opened<P> {
    /// The run of this plan is complete: nothing was done.
    Complete(Box<Run>),
    /// The operator did not confirm: nothing was done.
    NotConfirmed,
    /// Confirmed and journaled: the steps run next.
    Run(Running<P>),
}

/// What a whole run came to.
#[derive(Debug)]
pub enum Outcome<P, D> {
    /// The run of this plan was complete already: nothing was done.
    Complete(Box<Run>),
    /// Not confirmed: nothing was done.
    NotConfirmed,
    /// The steps ran: `plan` (as it ran), and what they measured or where they stopped.
    Ran {
        /// The plan that ran.
        plan: P,
        /// Its result.
        result: Result<D, super::runlog::StepFailed>,
    },
}

/// The protocol up to the first step: run id, lock, the node read under it (`node`), resume
/// check or live re-plan, the operator's confirmation, the journal's start.
///
/// # Errors
/// A refusal ([`Refused`]), the lock held elsewhere, the journal unwritable, the operator gone.
pub fn open<P: Change, N: Node<P>>(
    req: &Request<'_, P>,
    node: impl FnOnce() -> N,
    op: &mut impl Operator<P>,
) -> anyhow::Result<Opened<P>> {
    let run = run_id(req.journal, req.saved, req.resume);
    // One change at a time on this node, held until the run ends.
    let lock = super::lock::acquire(
        req.lock,
        &super::lock::Holder::me(req.holder, &run, req.journal),
    )?;
    let start = start(req.journal, &req.node_id, req.saved, req.resume, &node())?;
    op.starting(&start)?;
    let (plan, from) = match start.clone() {
        Start::Complete(run) => return Ok(Opened::Complete(run)),
        Start::Resume { plan, from, .. } => (plan, from),
        Start::Fresh(plan) => (plan, 0),
    };
    if !op.confirm(&plan, &start)? {
        return Ok(Opened::NotConfirmed);
    }
    let log = RunLog {
        node: req.node_id.clone(),
        path: req.journal.to_path_buf(),
        kind: P::RUN.as_str(),
        run,
        fingerprint: plan.fingerprint().to_string(),
        simulated: req.simulated,
    };
    // Journal first: without the run's entry nothing is done.
    journal_start(&log, &start, Some(req.file), &req.resume_command)?;
    let running = Running {
        plan,
        from,
        log,
        resume_command: req.resume_command.clone(),
        _lock: lock,
    };
    op.journaled(&running)?;
    Ok(Opened::Run(running))
}
