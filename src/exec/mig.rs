//! Applying a confirmed MIG plan with `nvidia-smi`: stop the GPU's processes (SIGTERM, grace,
//! SIGKILL only if allowed), destroy the old instances, set the MIG mode (a mode left pending
//! stops the plan: partop never resets a GPU), create the new instances one by one at their
//! planned memory slices, verify each instance's profile by reading the node back.
//! nvidia-smi reports some failures with exit status 0, so its text is scanned too. Every step
//! is journaled with the plan's fingerprint; `--resume` skips steps already done, and the steps
//! it repeats are idempotent: destroy has nothing to do once the instances are gone, create
//! makes only the instances the GPU lacks (`-lgi`, against the plan's profiles and starts).

use super::kill::KillJob;
use crate::collect::nvidia::smi::{GpuInstanceRow, RunSmi, parse, parse_lgi};
use crate::domain::journal::StepKind;
use crate::domain::kill::{Sig, Target};
use crate::domain::mig::{MigPlan, MigStep};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What the executor needs.
#[derive(Debug, Clone)]
pub struct MigCtx {
    /// nvidia-smi.
    pub smi: Arc<dyn RunSmi>,
    /// The exact command that continues this run (named in every failure).
    pub resume: String,
    /// The journal.
    pub journal: PathBuf,
    /// SIGTERM grace.
    pub grace: Duration,
    /// SIGKILL allowed after the grace.
    pub kill_after_grace: bool,
    /// /proc.
    pub proc_root: PathBuf,
    /// The node is simulated.
    pub simulated: bool,
}

/// The NVIDIA node a MIG apply changes, as the command layer opened it: its nvidia-smi, and
/// how to read it (sampled once, when the protocol first asks: a resume of a complete run
/// never reads it).
pub struct MigNode<F> {
    /// nvidia-smi.
    pub smi: Arc<dyn RunSmi>,
    /// nvidia-smi as plans name it (what a re-plan must name too).
    pub smi_name: String,
    /// This host's name.
    pub host: String,
    /// Reads the node.
    pub sample: F,
    snap: std::cell::OnceCell<Result<crate::domain::Snapshot, String>>,
}

impl<F: Fn() -> Result<crate::domain::Snapshot, String>> MigNode<F> {
    /// The node, read by `sample` when first asked.
    pub fn new(smi: Arc<dyn RunSmi>, smi_name: String, host: String, sample: F) -> Self {
        Self {
            smi,
            smi_name,
            host,
            sample,
            snap: std::cell::OnceCell::new(),
        }
    }

    fn snap(&self) -> Result<&crate::domain::Snapshot, String> {
        self.snap
            .get_or_init(|| (self.sample)())
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Where an apply of `saved` would start, after every check a real apply makes, without
    /// the lock and without acting (a dry run).
    ///
    /// # Errors
    /// The refusal the apply would give.
    pub fn check(
        &self,
        journal: &std::path::Path,
        saved: &MigPlan,
        resume: bool,
    ) -> Result<super::protocol::Start<MigPlan>, super::protocol::Refused> {
        super::protocol::start(journal, "host", saved, resume, self)
    }
}

impl<F: Fn() -> Result<crate::domain::Snapshot, String>> super::protocol::Node<MigPlan>
    for MigNode<F>
{
    // A fresh run is checked by the re-plan, which must come out identical.
    fn can_start(&self, _plan: &MigPlan) -> Vec<String> {
        Vec::new()
    }

    fn can_resume(&self, plan: &MigPlan, _stop_done: bool, _done: &[usize]) -> Vec<String> {
        match self.snap() {
            Ok(s) => crate::domain::mig::still_valid(plan, s, &self.host),
            Err(e) => vec![e],
        }
    }

    fn replan(&self, saved: &MigPlan) -> Result<MigPlan, String> {
        crate::domain::mig::plan(self.snap()?, &saved.draft, &self.smi_name)
            .map_err(|e| e.join("; "))
    }
}

/// What a MIG step reports: its index and title, then its result (`None` when it begins).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigEvent {
    /// The step's index.
    pub idx: usize,
    /// Its title.
    pub title: String,
    /// `None`: it begins; else what it did, or why it failed.
    pub result: Option<Result<String, String>>,
}

/// A verified MIG plan applied end to end on `node`: the change protocol up to the journal's
/// start (`protocol::open`), then the steps, each reported to `op`.
///
/// # Errors
/// A refusal, the lock held, the journal unwritable, the operator gone: nothing was done.
pub fn execute<F: Fn() -> Result<crate::domain::Snapshot, String>>(
    node: &MigNode<F>,
    req: &super::protocol::Request<'_, MigPlan>,
    grace: Duration,
    kill_after_grace: bool,
    op: &mut impl super::protocol::Operator<MigPlan, Event = MigEvent>,
) -> anyhow::Result<super::protocol::Outcome<MigPlan, ()>> {
    use super::protocol::{Opened, Outcome};
    let running = match super::protocol::open(req, || node, op)? {
        Opened::Complete(run) => return Ok(Outcome::Complete(run)),
        Opened::NotConfirmed => return Ok(Outcome::NotConfirmed),
        Opened::Run(r) => r,
    };
    let ctx = MigCtx {
        smi: Arc::clone(&node.smi),
        resume: req.resume_command.clone(),
        journal: req.journal.to_path_buf(),
        grace,
        kill_after_grace,
        proc_root: "/proc".into(),
        simulated: req.simulated,
    };
    let result = apply(
        &running.plan,
        &ctx,
        &running.log,
        running.from,
        |idx, title, r| {
            op.progress(MigEvent {
                idx,
                title: title.to_string(),
                result: r.map(|r| r.map(str::to_string).map_err(str::to_string)),
            });
        },
    );
    Ok(Outcome::Ran {
        plan: running.plan,
        result,
    })
}

/// A failed MIG step (the same type as an AMD step's).
pub type MigFailed = super::runlog::StepFailed;

impl MigCtx {
    /// What to do after a failure that needs the operator first.
    fn next(&self) -> String {
        format!("fix the cause, then: {}", self.resume)
    }
}

fn run(ctx: &MigCtx, cmd: &str) -> Result<String, String> {
    let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
    let (code, out, err) = ctx.smi.call(&args)?;
    let text = format!("{out}{err}");
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("Unable to")
                || l.starts_with("Failed")
                || l.contains("In use by another client")
        })
        .map(str::trim)
        .collect();
    if code != 0 || !bad.is_empty() {
        return Err(if bad.is_empty() {
            format!("`{cmd}` exited with {code}: {}", text.trim())
        } else {
            bad.join("; ")
        });
    }
    Ok(text)
}

fn stop(plan: &MigPlan, ctx: &MigCtx) -> Result<String, (String, String)> {
    let targets: Vec<Target> = plan
        .stops
        .iter()
        .map(|s| Target {
            pid: s.pid,
            start_ticks: s.start_ticks,
            name: Some(s.name.clone()),
            ..Target::default()
        })
        .collect();
    let job = KillJob {
        targets,
        sig: Sig::Term,
        grace: ctx.grace,
        proc_root: ctx.proc_root.clone(),
        journal: ctx.journal.clone(),
        simulated: ctx.simulated,
    };
    let r = super::kill::term_then_kill(&job, ctx.kill_after_grace, |_| {})
        .map_err(|e| (e.to_string(), ctx.next()))?;
    if r.after_term.is_empty() {
        return Ok(format!("{} stopped", plan.stops.len()));
    }
    if !ctx.kill_after_grace {
        return Err((
            format!(
                "still running after SIGTERM and {}s: pids {:?}",
                ctx.grace.as_secs(),
                r.after_term
            ),
            format!(
                "stop them yourself, or allow SIGKILL: {} --kill-after-grace",
                ctx.resume.trim_end_matches(" --kill-after-grace")
            ),
        ));
    }
    if !r.after_kill.is_empty() {
        return Err((
            format!("still running after SIGKILL: {:?}", r.after_kill),
            ctx.next(),
        ));
    }
    Ok(format!(
        "{} stopped ({} needed SIGKILL)",
        plan.stops.len(),
        r.after_term.len()
    ))
}

/// The GPU instances of GPU `gpu` now (`nvidia-smi mig -i N -lgi`): none with MIG off or no
/// instance (the tool says so with a non-zero status), else the table's rows.
fn instances(ctx: &MigCtx, gpu: u32) -> Result<Vec<GpuInstanceRow>, String> {
    let i = gpu.to_string();
    let (code, out, err) = ctx.smi.call(&["mig", "-i", &i, "-lgi"])?;
    let text = format!("{out}{err}");
    if text.contains("No GPU instances found") || text.contains("No MIG-enabled devices found") {
        return Ok(vec![]);
    }
    if code != 0 {
        return Err(format!(
            "`nvidia-smi mig -i {i} -lgi` exited with {code}: {}",
            text.trim()
        ));
    }
    parse_lgi(&out)
}

/// Destroys the GPU's instances, unless none is left (a resume after they went).
fn destroy(ctx: &MigCtx, plan: &MigPlan, s: &MigStep) -> Result<String, (String, String)> {
    let now = instances(ctx, plan.draft.gpu).map_err(|e| (e, ctx.next()))?;
    if now.is_empty() {
        return Ok("no instance left to destroy".into());
    }
    let mut n = 0;
    for c in &s.commands {
        match run(ctx, c) {
            Ok(text) => n += text.matches("Successfully").count(),
            // A resume after the compute instances went: nothing of that kind is left.
            Err(e) if e.contains("Not Found") => {}
            Err(e) => return Err((e, ctx.next())),
        }
    }
    Ok(format!("{n} x Successfully"))
}

/// Creates the instances the GPU lacks, each at its planned start; one already there (same
/// profile, same start) is kept. An instance the plan did not make stops the step: creating
/// around it would give a layout nobody confirmed.
fn create(ctx: &MigCtx, plan: &MigPlan, s: &MigStep) -> Result<String, (String, String)> {
    let now = instances(ctx, plan.draft.gpu).map_err(|e| (e, ctx.next()))?;
    let foreign: Vec<String> = now
        .iter()
        .filter(|r| {
            !plan
                .create
                .iter()
                .any(|c| c.profile == r.profile && c.start == r.start)
        })
        .map(|r| format!("{} (GI {}) at slice {}", r.name, r.gi, r.start))
        .collect();
    if !foreign.is_empty() {
        return Err((
            format!(
                "GPU {} has instance(s) this plan does not make: {}",
                plan.draft.gpu,
                foreign.join(", ")
            ),
            format!(
                "destroy them (nvidia-smi mig -i {i} -dci; nvidia-smi mig -i {i} -dgi) or make a new plan with `partop mig plan`; then: {}",
                ctx.resume,
                i = plan.draft.gpu
            ),
        ));
    }
    let (mut made, mut kept) = (0, 0);
    for (c, cmd) in plan.create.iter().zip(&s.commands) {
        if now
            .iter()
            .any(|r| r.profile == c.profile && r.start == c.start)
        {
            kept += 1;
            continue;
        }
        run(ctx, cmd).map_err(|e| (e, ctx.next()))?;
        made += 1;
    }
    Ok(if kept == 0 {
        format!("{made} instance(s) created")
    } else {
        format!("{made} instance(s) created, {kept} already there (kept)")
    })
}

/// Reads the GPU back: MIG mode; with MIG on, every instance's profile two ways, both of which
/// must be exactly the confirmed layout: the GPU instances by profile id and start (`-lgi`),
/// and the MIG devices by SMs and memory together (`-q -x`, named against the product's
/// table). Never a count.
fn verify(plan: &MigPlan, ctx: &MigCtx) -> Result<String, (String, String)> {
    let i = plan.draft.gpu.to_string();
    let (_, out, _) = ctx
        .smi
        .call(&["-q", "-x", "-i", &i])
        .map_err(|e| (e, ctx.next()))?;
    let node = parse(&out).map_err(|e| (e, ctx.next()))?;
    let (gpus, _) = crate::collect::nvidia::assemble(&node, 0);
    let g = gpus
        .first()
        .ok_or_else(|| ("nvidia-smi lists no GPU".to_string(), ctx.next()))?;
    let want = !plan.after.is_empty();
    let on = g.mig.as_ref().is_some_and(|m| m.enabled);
    if on != want {
        return Err((
            format!(
                "MIG is {}, expected {}",
                if on { "on" } else { "off" },
                if want { "on" } else { "off" }
            ),
            ctx.next(),
        ));
    }
    if !want {
        return Ok("MIG off".into());
    }
    let mut wrong = Vec::new();
    let rows = instances(ctx, plan.draft.gpu).map_err(|e| (e, ctx.next()))?;
    let mut by_id: Vec<(u32, u32)> = rows.iter().map(|r| (r.profile, r.start)).collect();
    let mut planned: Vec<(u32, u32)> = plan.create.iter().map(|c| (c.profile, c.start)).collect();
    by_id.sort_unstable();
    planned.sort_unstable();
    if by_id != planned {
        wrong.push(format!(
            "GPU instances (profile id:start) are {}, the plan made {}",
            pairs(&by_id),
            pairs(&planned)
        ));
    }
    let has_table = crate::domain::mig::table_profiles(&plan.product).is_some();
    if has_table {
        let mut seen: Vec<String> = crate::domain::mig::instances_now(g);
        seen.sort();
        if seen != plan.after {
            wrong.push(format!(
                "MIG devices read back as {} (by SMs and memory), the plan made {}",
                if seen.is_empty() {
                    "none".into()
                } else {
                    seen.join(", ")
                },
                plan.after.join(", ")
            ));
        }
    }
    if wrong.is_empty() {
        Ok(format!(
            "MIG on with exactly {}{}",
            plan.after.join(", "),
            if has_table {
                " (profile ids and starts, SMs and memory read back)"
            } else {
                " (profile ids and starts read back; no table for this product's SMs)"
            }
        ))
    } else {
        Err((wrong.join("; "), ctx.next()))
    }
}

fn pairs(v: &[(u32, u32)]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter()
        .map(|(p, s)| format!("{p}:{s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn step(plan: &MigPlan, ctx: &MigCtx, s: &MigStep) -> Result<String, (String, String)> {
    match s.key {
        StepKind::Stop => stop(plan, ctx),
        StepKind::Destroy => destroy(ctx, plan, s),
        StepKind::Create => create(ctx, plan, s),
        StepKind::MigMode => {
            let text = run(ctx, &s.commands[0]).map_err(|e| (e, ctx.next()))?;
            if text.contains("pending") {
                return Err((
                    text.lines().next().unwrap_or("").trim().to_string(),
                    format!(
                        "the MIG mode is pending: stop every client of this GPU (CUDA programs, nvidia-persistenced, DCGM, monitors), reset the GPU yourself (partop never resets one), then: {}",
                        ctx.resume
                    ),
                ));
            }
            Ok(text.lines().next().unwrap_or("").trim().to_string())
        }
        StepKind::Verify => verify(plan, ctx),
        // A repartition step in a MIG plan: a plan made by hand.
        other @ (StepKind::WaitIdle
        | StepKind::SetMemory
        | StepKind::Reload
        | StepKind::WaitGpus
        | StepKind::SetCompute
        | StepKind::Relaunch
        | StepKind::BalancerDrain
        | StepKind::BalancerJoin
        | StepKind::Cordon
        | StepKind::Evict
        | StepKind::Taint
        | StepKind::WaitAllocatable
        | StepKind::Untaint
        | StepKind::Uncordon) => Err((
            format!("{other} is a repartition step, not a MIG step"),
            "make the plan with `partop mig plan` (repartition plans are applied with `partop apply`)"
                .into(),
        )),
    }
}

/// Applies `plan` from step `from` under the run `log` (whose start the caller journaled),
/// each step journaled before it acts, reporting each step's start and result.
pub fn apply(
    plan: &MigPlan,
    ctx: &MigCtx,
    log: &super::runlog::RunLog,
    from: usize,
    mut emit: impl FnMut(usize, &str, Option<Result<&str, &str>>),
) -> Result<(), MigFailed> {
    for (idx, s) in plan.steps.iter().enumerate().skip(from) {
        let fail = |message: String, next: String| MigFailed {
            idx,
            key: s.key,
            message,
            next,
        };
        log.step_begin(idx, &s.key)
            .map_err(|e| fail(e.to_string(), ctx.next()))?;
        emit(idx, &s.title, None);
        let r = step(plan, ctx, s);
        let journaled = log.step_end(
            idx,
            &s.key,
            r.is_ok(),
            match &r {
                Ok(d) => d,
                Err((m, _)) => m,
            },
        );
        match r {
            Ok(d) => {
                journaled.map_err(|e| {
                    fail(
                        format!("the step was done, but {e}"),
                        "free the journal, then --resume".into(),
                    )
                })?;
                emit(idx, &s.title, Some(Ok(&d)));
            }
            Err((message, next)) => {
                emit(idx, &s.title, Some(Err(&message)));
                return Err(fail(message, next));
            }
        }
    }
    let _ = log.done();
    Ok(())
}
