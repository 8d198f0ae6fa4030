//! Applying a confirmed repartition plan, step by step: stop the holders (SIGTERM, grace,
//! SIGKILL only if the operator allowed it), wait until nothing holds the GPUs, set the memory
//! mode, reload the driver by the method of this amd-smi version, wait for the logical GPUs,
//! set the compute mode (indices re-read), verify by reading back, start again what was
//! stopped. amd-smi often fails with exit status 0, so its text is scanned. Every step is
//! journaled with the plan's fingerprint, so an interrupted apply resumes where it stopped.

use super::kill::{KillEvent, KillJob};
use super::runlog::RunLog;
use crate::collect::pipeline::Collector;
use crate::domain::journal::StepKind;

use crate::collect::amdsmi::runner::{RawOutput, Runner};
use crate::collect::holders::Roots;
use crate::domain::kill::{Sig, Target};
use crate::domain::modes::ComputeMode;
use crate::domain::plan::{Plan, Reload, Step};
use crate::domain::snapshot::Snapshot;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Everything the executor needs.
#[derive(Debug, Clone)]
pub struct ApplyCtx {
    /// amd-smi (the real tool, or the simulator's).
    pub runner: Runner,
    /// The command that reloads the driver on 7.12+ (argv).
    pub reload_cmd: Vec<String>,
    /// Where holders are looked for.
    pub roots: Roots,
    /// The journal.
    pub journal: PathBuf,
    /// SIGTERM grace.
    pub grace: Duration,
    /// The operator allowed SIGKILL for processes that survive the grace.
    pub kill_after_grace: bool,
    /// The simulated node's state (journal flag).
    pub sim_state: Option<PathBuf>,
    /// How long to wait for idle GPUs.
    pub wait_idle: Duration,
    /// How long to wait for the logical GPUs after a reload.
    pub wait_gpus: Duration,
    /// The served-model registry (stop and relaunch models its way).
    pub registry: Option<crate::domain::models::Registry>,
    /// Where partop-launched models log.
    pub model_log_dir: PathBuf,
    /// How often waits look again (shorter on a simulated node whose time is scaled).
    pub poll: Duration,
    /// How long a wrong logical GPU count must stay unchanged before a wait gives up early.
    pub settle: Duration,
    /// This run continues an interrupted one: `set -C` indices are read again from the node
    /// (the interruption may have left some GPUs set, so the planned indices moved).
    pub resumed: bool,
    /// The exact command that resumes this run (printed with every failure).
    pub resume_command: String,
}

impl ApplyCtx {
    fn ops(&self) -> super::models::Ops {
        super::models::Ops {
            log_dir: self.model_log_dir.clone(),
            journal: self.journal.clone(),
            simulated: self.sim_state.is_some(),
            grace: self.grace,
            kill_after: self.kill_after_grace,
        }
    }

    /// A registry entry, or a replica set's member by its name (`set#k`).
    fn spec(&self, name: &str) -> Option<crate::domain::models::ModelSpec> {
        self.registry
            .as_ref()
            .and_then(|r| crate::domain::replicas::resolve(r, name))
    }
}

/// The node an AMD apply changes, as the command layer opened it: its tools and where things
/// are. [`run`] makes the executor's settings from it (the caller never builds an [`ApplyCtx`]).
pub struct AmdNode {
    /// amd-smi (the real tool, or the simulator's).
    pub runner: Runner,
    /// Its collector (the node read under the lock, for the resume check or the re-plan).
    pub collector: Collector,
    /// Where holders are looked for.
    pub roots: Roots,
    /// The simulated node's state, when it is one.
    pub sim_state: Option<PathBuf>,
    /// A simulated node's speed (its scenario's `time_scale`, 1 on a real node): the waits
    /// scale with it, the limits stay those of a real node.
    pub time_scale: f64,
    /// The served-model registry.
    pub registry: Option<crate::domain::models::Registry>,
    /// Where partop-launched models log.
    pub model_log_dir: PathBuf,
    /// This host's name (what the plan must name, and what a reload's confirmation types).
    pub host: String,
}

/// How the operator let the apply stop processes.
#[derive(Debug, Clone, Copy)]
pub struct StopPolicy {
    /// SIGTERM grace.
    pub grace: Duration,
    /// SIGKILL for processes that survive the grace.
    pub kill_after_grace: bool,
}

impl AmdNode {
    /// The executor's settings for a run of this node.
    fn ctx(&self, stop: StopPolicy, req: &super::protocol::Request<'_, Plan>) -> ApplyCtx {
        let scale = self.time_scale.clamp(0.001, 1.0);
        ApplyCtx {
            runner: self.runner.clone(),
            reload_cmd: self.reload_cmd(),
            roots: self.roots.clone(),
            journal: req.journal.to_path_buf(),
            grace: stop.grace,
            kill_after_grace: stop.kill_after_grace,
            sim_state: self.sim_state.clone(),
            wait_idle: Duration::from_secs(u64::from(crate::domain::plan::WAIT_IDLE_SECS)),
            wait_gpus: Duration::from_secs(u64::from(crate::domain::plan::WAIT_GPUS_SECS)),
            registry: self.registry.clone(),
            model_log_dir: self.model_log_dir.clone(),
            poll: Duration::from_secs_f64((0.5 * scale).max(0.02)),
            settle: Duration::from_secs_f64((60.0 * scale).max(5.0)),
            resumed: req.resume,
            resume_command: req.resume_command.clone(),
        }
    }

    /// How the driver is reloaded (amd-smi 7.12+): the simulator's reload on a simulated node.
    fn reload_cmd(&self) -> Vec<String> {
        match &self.sim_state {
            Some(s) => vec![
                std::env::current_exe()
                    .map_or_else(|_| "partop".into(), |e| e.display().to_string()),
                "sim".into(),
                "reload".into(),
                "--state".into(),
                s.display().to_string(),
            ],
            None => vec![
                "sh".into(),
                "-c".into(),
                "modprobe -r amdgpu && modprobe amdgpu".into(),
            ],
        }
    }
}

/// The node as the AMD protocol asks it: its sample under the lock, and this host's name.
struct NodeNow<'a> {
    snap: Snapshot,
    here: &'a str,
}

impl super::protocol::Node<Plan> for NodeNow<'_> {
    fn can_start(&self, plan: &Plan) -> Vec<String> {
        crate::domain::plan::still_valid(plan, &self.snap, self.here, false, &[])
    }

    fn can_resume(&self, plan: &Plan, stop_done: bool, done: &[usize]) -> Vec<String> {
        crate::domain::plan::still_valid(plan, &self.snap, self.here, stop_done, done)
    }

    fn replan(&self, saved: &Plan) -> Result<Plan, String> {
        crate::domain::plan::plan(
            &self.snap,
            &saved.draft,
            saved.reload,
            saved.reload_secs,
            saved.grace_secs,
        )
        .map_err(|e| {
            e.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// A verified AMD plan applied end to end on `node`: the change protocol up to the journal's
/// start (`protocol::open`), then the steps, each reported to `op` as it goes.
///
/// # Errors
/// A refusal, the lock held, the journal unwritable, the operator gone: nothing was done.
pub fn execute(
    mut node: AmdNode,
    req: &super::protocol::Request<'_, Plan>,
    stop: StopPolicy,
    op: &mut (impl super::protocol::Operator<Plan, Event = ApplyEvent> + Send),
) -> anyhow::Result<super::protocol::Outcome<Plan, Applied>> {
    use super::protocol::{Opened, Outcome};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let opened = super::protocol::open(
        req,
        || NodeNow {
            snap: rt.block_on(node.collector.sample()),
            here: &node.host,
        },
        op,
    )?;
    let running = match opened {
        Opened::Complete(run) => return Ok(Outcome::Complete(run)),
        Opened::NotConfirmed => return Ok(Outcome::NotConfirmed),
        Opened::Run(r) => r,
    };
    let ctx = node.ctx(stop, req);
    let mut emit = |e: ApplyEvent| op.progress(e);
    let result = rt.block_on(apply(
        &running.plan,
        &ctx,
        &running.log,
        running.from,
        &mut emit,
    ));
    Ok(Outcome::Ran {
        plan: running.plan,
        result,
    })
}

/// Progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyEvent {
    /// A step begins.
    Started {
        /// Index.
        idx: usize,
        /// Its title.
        title: String,
        /// How long it may take, seconds.
        limit_secs: Option<u32>,
    },
    /// A step succeeded.
    Done {
        /// Index.
        idx: usize,
        /// What it found or did.
        detail: String,
        /// How long it took.
        took: Duration,
    },
    /// Something worth showing while a step runs.
    Note(String),
}

pub use super::runlog::StepFailed;

/// Scans the output of `amd-smi set`/`reset` (exit status is unreliable): any
/// `[AMDSMI_STATUS_*]` other than NOT_SUPPORTED (printed for secondaries) is a failure, as is a
/// non-zero exit or the absence of the success line.
pub fn check_output(out: &RawOutput, success: &str) -> Result<String, String> {
    let text = format!("{}\n{}", out.stdout, out.stderr);
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("[AMDSMI_STATUS_") && !l.contains("NOT_SUPPORTED"))
        .map(str::trim)
        .collect();
    if !bad.is_empty() {
        // One line per GPU is common: say each distinct line once, with its count.
        let mut distinct: Vec<(&str, usize)> = Vec::new();
        for b in &bad {
            match distinct.iter_mut().find(|(l, _)| l == b) {
                Some((_, n)) => *n += 1,
                None => distinct.push((b, 1)),
            }
        }
        let mut msg = distinct
            .iter()
            .map(|(l, n)| {
                if *n > 1 {
                    format!("{l} (x{n})")
                } else {
                    (*l).to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("; ");
        // amd-smi wraps its long lines: keep the continuation of the first one.
        if let Some(next) = text.lines().skip_while(|l| !l.contains(bad[0])).nth(1)
            && next.starts_with("        ")
        {
            msg = format!("{msg} {}", next.trim());
        }
        return Err(msg);
    }
    if out.code != Some(0) {
        let tail: Vec<&str> = out.stderr.lines().rev().take(3).collect();
        return Err(format!(
            "`{}` exited with {:?}: {}",
            out.command,
            out.code,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    let n = text.matches(success).count();
    if n == 0 {
        return Err(format!("`{}` printed no \"{success}\" line", out.command));
    }
    Ok(format!("{n} x {success}"))
}

/// Reads the node for a step. A read amd-smi did not answer (a timeout on a loaded machine) is
/// tried again, a few times within a bound: a step must not judge the node from a read that
/// failed (it would see "0 logical GPUs"). What is still unread is said by [`unread`].
async fn sample(ctx: &ApplyCtx) -> Snapshot {
    let mut c = Collector::amd_smi(ctx.runner.clone());
    c.enrich.roots = Some(ctx.roots.clone());
    let mut snap = c.sample().await;
    for _ in 1..READ_TRIES {
        if unread(&snap).is_none() {
            break;
        }
        tokio::time::sleep(ctx.poll.max(Duration::from_millis(200))).await;
        snap = c.sample().await;
    }
    snap
}

/// How many times a step reads the node before it says amd-smi did not answer.
const READ_TRIES: usize = 3;

/// Why the node could not be read (amd-smi's error), when it could not: a step then says so
/// instead of judging an empty read.
fn unread(snap: &Snapshot) -> Option<String> {
    snap.sources
        .iter()
        .find(|s| s.name == crate::collect::amdsmi::reader::SRC_STATIC)
        .filter(|s| {
            matches!(
                s.status,
                crate::domain::snapshot::Health::Down | crate::domain::snapshot::Health::Stale
            )
        })
        .map(|s| {
            format!(
                "amd-smi could not be read ({} tries): {}",
                READ_TRIES,
                s.error.as_deref().unwrap_or("no answer")
            )
        })
}

fn long(r: &Runner) -> Runner {
    Runner {
        timeout: Duration::from_secs(300),
        ..r.clone()
    }
}

/// What an apply measured: how long the services were down (from the stop step to the end of
/// the relaunch, in this process), against the plan's estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Measured downtime in this run (None: the stop step ran in an earlier, interrupted run).
    pub downtime: Option<Duration>,
    /// The whole run in this process.
    pub took: Duration,
}

async fn count_gpus(ctx: &ApplyCtx) -> Option<usize> {
    let out = ctx.runner.run(&["list", "--json"]).await.ok()?;
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).ok()?;
    v.as_array().map(Vec::len)
}

/// Applies `plan` from step `from` under the run `log` (whose start the caller journaled).
/// Each step is journaled before it acts: a journal that cannot be written stops the apply
/// there. Blocking steps (signals, waits) run inline: call this from a task that may block.
pub async fn apply(
    plan: &Plan,
    ctx: &ApplyCtx,
    log: &RunLog,
    from: usize,
    emit: &mut (dyn FnMut(ApplyEvent) + Send),
) -> Result<Applied, StepFailed> {
    let t0 = Instant::now();
    let mut down_since = None;
    for (idx, step) in plan.steps.iter().enumerate().skip(from) {
        let fail = |message: String, next: &str| StepFailed {
            idx,
            key: step.key,
            message,
            next: if next.contains(&ctx.resume_command) {
                next.to_string()
            } else {
                format!("{next}\nresume with: {}", ctx.resume_command)
            },
        };
        log.step_begin_limited(idx, &step.key, step.limit_secs)
            .map_err(|e| {
                fail(
                    format!("{e}; nothing was done in this step"),
                    "free the journal (its directory must be writable, the disk not full)",
                )
            })?;
        crash_point(ctx, "begin", idx);
        emit(ApplyEvent::Started {
            idx,
            title: step.title.clone(),
            limit_secs: step.limit_secs,
        });
        let t_step = Instant::now();
        if step.key == StepKind::Stop {
            down_since = Some(t_step);
        }
        let result = run_step(plan, ctx, step, emit)
            .await
            .map_err(|(m, n)| fail(m, &n));
        if result.is_ok() {
            crash_point(ctx, "acted", idx);
        }
        match result {
            Ok(detail) => {
                log.step_end(idx, &step.key, true, &detail).map_err(|e| {
                    fail(
                        format!(
                            "the step was done ({detail}), but its result could not be written to the journal {}: {}. The node WAS changed by this step",
                            e.path, e.error
                        ),
                        "free space or fix the journal's permissions, then resume (this step runs again; it is safe to)",
                    )
                })?;
                emit(ApplyEvent::Done {
                    idx,
                    detail,
                    took: t_step.elapsed(),
                });
                crash_point(ctx, "end", idx);
            }
            Err(mut e) => {
                let _ = log.step_end(idx, &step.key, false, &e.message);
                // Services are down once the stop step has run: say how to bring them back
                // without finishing the plan.
                if plan.steps[..idx].iter().any(|s| s.key == StepKind::Stop)
                    && let Some(r) = restore_text(plan, &ctx.resume_command)
                {
                    e.next = format!("{}\nor abort and restore services now:\n{r}", e.next);
                }
                if let Some(k) = super::k8s::left_on_node(plan, idx) {
                    e.next = format!("{}\n{k}", e.next);
                }
                return Err(e);
            }
        }
    }
    let _ = log.done();
    Ok(Applied {
        downtime: down_since.map(|t| t.elapsed()),
        took: t0.elapsed(),
    })
}

/// Rehearsing an interruption on a simulated node: `PARTOP_SIM_CRASH_AT=WHEN:STEP` (WHEN is
/// `begin`, after the step's first journal entry and before it acts; `acted`, after it acted
/// and before its result is journaled; `end`, after its result is journaled) makes this
/// process SIGKILL itself there, as a power cut or an OOM kill would. Never on a real node.
fn crash_point(ctx: &ApplyCtx, when: &str, idx: usize) {
    if ctx.sim_state.is_none() {
        return;
    }
    let Ok(at) = std::env::var(CRASH_ENV) else {
        return;
    };
    if at == format!("{when}:{}", idx + 1) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

/// The variable that injects a crash of the apply on a simulated node ([`crash_point`]).
pub const CRASH_ENV: &str = "PARTOP_SIM_CRASH_AT";

/// How to start again what the plan stopped, in the layout as it was (an abort).
/// The model starts carry the run's own global options (`--sim-state`, `--models`, …, from
/// `resume`), so each line works when pasted.
pub fn restore_text(plan: &Plan, resume: &str) -> Option<String> {
    let partop = crate::domain::text::shell_line(&crate::domain::journal::command_prefix(resume));
    let mut lines = Vec::new();
    let units: Vec<&str> = plan
        .stops
        .iter()
        .filter_map(|s| s.unit.as_deref())
        .collect();
    if !units.is_empty() {
        lines.push(format!("  systemctl start {}", units.join(" ")));
    }
    for m in &plan.models {
        lines.push(format!(
            "  {partop} models start {} --gpu {}   (it ran on {})",
            crate::domain::text::shell_quote(&m.name),
            m.from.first().map_or("BDF", String::as_str),
            m.from.join(",")
        ));
    }
    let others = plan
        .stops
        .iter()
        .filter(|s| s.unit.is_none() && s.model.is_none())
        .map(|s| format!("{} (pid {})", s.name, s.pid))
        .collect::<Vec<_>>();
    if !others.is_empty() {
        lines.push(format!("  restart by their owners: {}", others.join(", ")));
    }
    (!lines.is_empty()).then(|| {
        lines.push("  check the modes first: amd-smi partition -c -m (a memory mode may be pending until the next reload)".into());
        lines.join("\n")
    })
}

type StepResult = Result<String, (String, String)>;

/// The resume command with SIGKILL allowed.
fn with_kill(resume: &str) -> String {
    if resume.contains("--kill-after-grace") {
        resume.to_string()
    } else {
        format!("{resume} --kill-after-grace")
    }
}

const RESUME: &str = "fix the cause, then resume (completed steps are skipped)";

async fn run_step(
    plan: &Plan,
    ctx: &ApplyCtx,
    step: &Step,
    emit: &mut (dyn FnMut(ApplyEvent) + Send),
) -> StepResult {
    match step.key {
        StepKind::Stop => {
            // Who each stopped process is, for the journal: user, VRAM, model, read now (the
            // plan keeps only identity, so what moves or is read late cannot void it).
            let seen: std::collections::HashMap<u32, (Option<String>, u64, Option<String>)> =
                sample(ctx)
                    .await
                    .processes
                    .iter()
                    .map(|p| {
                        let model = p
                            .command
                            .as_deref()
                            .and_then(crate::domain::served::model_of)
                            .map(|(_, m)| m);
                        (p.pid, (p.user.clone(), p.vram_total(), model))
                    })
                    .collect();
            stop(plan, ctx, &seen, emit)
        }
        StepKind::WaitIdle => wait_idle(plan, ctx).await,
        StepKind::SetMemory => {
            let m = plan.draft.memory.map(|m| m.name()).unwrap_or_default();
            let out = run_confirmed(ctx, step, Some("Y\n")).await?;
            let marker = if plan.reload == Reload::InsideSetMemory {
                format!("Successfully set memory partition to {m}")
            } else {
                "Successfully set memory partition".into()
            };
            check_output(&out, &marker).map_err(|m| (m, "the memory mode may be pending: fix the cause, then resume; `amd-smi partition -c -m` shows the state".into()))
        }
        StepKind::Reload => {
            if plan.reload == Reload::InsideSetMemory {
                return Ok("done by set -M (ROCm 6.x)".into());
            }
            // After an interruption the reload may be under way (the driver is away) or done:
            // wait for the driver, and do not reload twice.
            let end = Instant::now() + ctx.wait_gpus;
            while count_gpus(ctx).await.is_none() && Instant::now() < end {
                emit(ApplyEvent::Note(
                    "the driver is not loaded (a reload in progress?): waiting".into(),
                ));
                tokio::time::sleep(ctx.poll.max(Duration::from_millis(100))).await;
            }
            let snap = sample(ctx).await;
            let applied = !plan.changes.is_empty()
                && plan.changes.iter().all(|c| {
                    snap.gpus
                        .iter()
                        .any(|g| g.bdf == c.bdf && g.memory_partition == Some(c.to.1))
                });
            if applied {
                return Ok("already reloaded: the memory mode is applied".into());
            }
            reload(plan, ctx).await
        }
        StepKind::WaitGpus => wait_gpus(plan, ctx, step, emit).await,
        StepKind::SetCompute => set_compute(ctx, step).await,
        StepKind::Verify => verify(plan, ctx).await,
        StepKind::Relaunch => relaunch(plan, ctx, emit).await,
        StepKind::BalancerDrain => super::balancer::drain(plan, ctx.registry.as_ref()),
        StepKind::BalancerJoin => super::balancer::join(plan, ctx.registry.as_ref()),
        k @ (StepKind::Cordon
        | StepKind::Evict
        | StepKind::Taint
        | StepKind::WaitAllocatable
        | StepKind::Untaint
        | StepKind::Uncordon) => {
            super::k8s::run_step(plan, k, &mut |n| emit(ApplyEvent::Note(n))).await
        }
        // A MIG step in a repartition plan: an edited plan file (a changed plan no longer
        // matches its fingerprint, so this is a plan made by hand).
        other @ (StepKind::MigMode | StepKind::Destroy | StepKind::Create) => Err((
            format!("{other} is a MIG step, not a repartition step"),
            "make the plan with `partop plan` (MIG plans are applied with `partop mig apply`)"
                .into(),
        )),
    }
}

/// Waits until amd-smi lists the step's logical GPU count. Gives up at the time limit, or
/// earlier when a wrong count has stayed the same for `ctx.settle` (the driver is up and
/// settled: waiting longer changes nothing), with a hint that fits what the node shows.
async fn wait_gpus(
    plan: &Plan,
    ctx: &ApplyCtx,
    step: &Step,
    emit: &mut (dyn FnMut(ApplyEvent) + Send),
) -> StepResult {
    let want = step.count.map_or(plan.after.len(), |c| c as usize);
    let t0 = Instant::now();
    let end = t0 + ctx.wait_gpus;
    let mut last: Option<usize> = None;
    let mut since = Instant::now();
    let mut told = Instant::now();
    loop {
        let now = count_gpus(ctx).await;
        if now == Some(want) {
            return Ok(format!(
                "{want} logical GPUs after {:.1}s",
                t0.elapsed().as_secs_f64()
            ));
        }
        if now != last {
            since = Instant::now();
            last = now;
        }
        let settled = last.is_some() && since.elapsed() >= ctx.settle;
        if settled || Instant::now() >= end {
            let snap = sample(ctx).await;
            return Err(wait_failure(plan, &snap, want, last, t0.elapsed(), settled));
        }
        if told.elapsed() >= Duration::from_secs(10) {
            emit(ApplyEvent::Note(format!(
                "waiting: {}s of {}s; amd-smi lists {} of {want}",
                t0.elapsed().as_secs(),
                ctx.wait_gpus.as_secs(),
                last.map_or_else(|| "none (driver away)".into(), |n| n.to_string())
            )));
            told = Instant::now();
        }
        tokio::time::sleep(ctx.poll).await;
    }
}

/// Why a wait for the logical GPUs failed, and what to do, from what the node shows.
pub fn wait_failure(
    plan: &Plan,
    snap: &Snapshot,
    want: usize,
    last: Option<usize>,
    waited: Duration,
    settled: bool,
) -> (String, String) {
    let modes: Vec<String> = snap
        .gpus
        .iter()
        .map(|g| {
            format!(
                "{} {}/{}",
                g.bdf,
                g.compute_partition.map_or("?".into(), |m| m.to_string()),
                g.memory_partition.map_or("?".into(), |m| m.to_string())
            )
        })
        .collect();
    let how = if settled {
        format!("unchanged for the last part of {}s", waited.as_secs())
    } else {
        format!("after {}s", waited.as_secs())
    };
    let message = format!(
        "expected {want} logical GPUs, amd-smi lists {} ({how}); the node shows {}",
        last.map_or_else(|| "none".into(), |n| n.to_string()),
        if modes.is_empty() {
            "no GPU".into()
        } else {
            modes.join(", ")
        }
    );
    let memory_pending = plan.changes.iter().any(|c| {
        snap.gpus
            .iter()
            .any(|g| g.bdf == c.bdf && g.memory_partition.is_some_and(|m| m != c.to.1))
    });
    let cpx_short =
        plan.changes.iter().any(|c| c.to.0 == ComputeMode::Cpx) && last.is_some_and(|n| n < want);
    let hint = if last.is_none() {
        "the driver has not come back: check `dmesg | grep amdgpu` and `lsmod | grep amdgpu`, load it (`modprobe amdgpu`), then resume".to_string()
    } else if memory_pending {
        "the memory mode did not take effect in the reload: `amd-smi partition -m` shows the current and pending modes; reload the driver once more (nothing may hold it), then resume".to_string()
    } else if cpx_short {
        "partitions are missing: another DRM driver (ast) may use the render minors partop's CPX partitions need (docs/reference.md), or the driver logged why (`dmesg | grep amdgpu`); then resume".to_string()
    } else {
        "the modes read back are not what this step waits for: compare with the plan (`partop plan`) and `amd-smi partition -c -m`; if another change ran, abandon this run (`partop journal --abandon RUN`) and plan again; else resume".to_string()
    };
    (message, hint)
}

async fn reload(plan: &Plan, ctx: &ApplyCtx) -> StepResult {
    match plan.reload {
        Reload::InsideSetMemory => Ok("done by set -M (ROCm 6.x)".into()),
        Reload::ResetReload => {
            let step = plan
                .steps
                .iter()
                .find(|s| s.key == StepKind::Reload)
                .ok_or_else(|| {
                    (
                        "the plan has no reload step".to_string(),
                        RESUME.to_string(),
                    )
                })?;
            let out = run_confirmed(ctx, step, Some("Y\n")).await?;
            check_output(&out, "Successfully reloaded driver").map_err(|m| (m, "something still holds a GPU (see `partop` Processes, or lsof /dev/kfd); stop it, then resume".into()))
        }
        Reload::Modprobe => {
            let (prog, args) = ctx.reload_cmd.split_first().ok_or_else(|| {
                (
                    "no reload command configured".to_string(),
                    RESUME.to_string(),
                )
            })?;
            let out = tokio::process::Command::new(prog)
                .args(args)
                .kill_on_drop(true)
                .output()
                .await
                .map_err(|e| (e.to_string(), RESUME.into()))?;
            if out.status.success() {
                Ok(format!("`{}` succeeded", ctx.reload_cmd.join(" ")))
            } else {
                Err((
                    format!(
                        "`{}` failed: {}",
                        ctx.reload_cmd.join(" "),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                    "something still holds the amdgpu module; stop it, then resume".into(),
                ))
            }
        }
    }
}

fn stop(
    plan: &Plan,
    ctx: &ApplyCtx,
    seen: &std::collections::HashMap<u32, (Option<String>, u64, Option<String>)>,
    emit: &mut (dyn FnMut(ApplyEvent) + Send),
) -> StepResult {
    for unit in plan.stops.iter().filter_map(|s| s.unit.as_deref()) {
        let st = std::process::Command::new("systemctl")
            .args(["stop", unit])
            .status();
        emit(ApplyEvent::Note(format!(
            "systemctl stop {unit}: {}",
            st.map_or_else(|e| e.to_string(), |s| s.to_string())
        )));
    }
    // Registered models with their own stop (a stop command, a unit, a container) are stopped
    // that way; the rest are signalled below.
    let mut own_stop = Vec::new();
    for s in &plan.stops {
        let Some(spec) = s.model.as_deref().and_then(|m| ctx.spec(m)) else {
            continue;
        };
        let spec = &spec;
        if matches!(
            spec.launch,
            crate::domain::models::Launch::Command { stop: None, .. }
        ) {
            continue;
        }
        own_stop.push(s.pid);
        let r = super::models::stop(&ctx.ops(), spec, &s.gpus, &[], Some((s.pid, s.start_ticks)));
        emit(ApplyEvent::Note(format!(
            "{}: {}",
            spec.name,
            r.clone().unwrap_or_else(|e| e)
        )));
        if let Err(e) = r {
            return Err((format!("stopping model {}: {e}", spec.name), RESUME.into()));
        }
    }
    let targets: Vec<Target> = plan
        .stops
        .iter()
        .filter(|s| s.unit.is_none() && !own_stop.contains(&s.pid))
        .map(|s| Target {
            pid: s.pid,
            start_ticks: s.start_ticks,
            name: Some(s.name.clone()),
            gpus: s.gpus.clone(),
            agent: s.agent.clone(),
            user: seen.get(&s.pid).and_then(|x| x.0.clone()),
            vram_bytes: seen.get(&s.pid).map_or(0, |x| x.1),
            model: s
                .model
                .clone()
                .or_else(|| seen.get(&s.pid).and_then(|x| x.2.clone())),
        })
        .collect();
    let job = KillJob {
        targets,
        sig: Sig::Term,
        grace: ctx.grace,
        proc_root: ctx.roots.proc_root.clone(),
        journal: ctx.journal.clone(),
        simulated: ctx.sim_state.is_some(),
    };
    let r = super::kill::term_then_kill(&job, ctx.kill_after_grace, |e| {
        if let KillEvent::Signalled { results, .. } = e {
            for (pid, o) in results {
                emit(ApplyEvent::Note(o.explain(pid)));
            }
        }
    })
    .map_err(|e| (e.to_string(), RESUME.to_string()))?;
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
                "stop them yourself and resume, or allow SIGKILL: {}",
                with_kill(&ctx.resume_command)
            ),
        ));
    }
    if r.after_kill.is_empty() {
        Ok(format!(
            "{} stopped ({} needed SIGKILL)",
            plan.stops.len(),
            r.after_term.len()
        ))
    } else {
        Err((
            format!("still running after SIGKILL: {:?}", r.after_kill),
            RESUME.into(),
        ))
    }
}

async fn wait_idle(plan: &Plan, ctx: &ApplyCtx) -> StepResult {
    let reload = plan.reloads();
    let changed: Vec<&str> = plan.changes.iter().map(|c| c.bdf.as_str()).collect();
    let end = Instant::now() + ctx.wait_idle;
    loop {
        let snap = sample(ctx).await;
        let ids: Vec<u32> = snap
            .logical()
            .filter(|(g, _)| changed.contains(&g.bdf.as_str()))
            .map(|(_, l)| l.gpu_id)
            .collect();
        let blockers: Vec<String> = snap
            .processes
            .iter()
            .filter(|p| {
                reload && (p.holds_kfd || !p.gpus.is_empty())
                    || p.agent.is_some() && p.holds_kfd
                    || p.gpus.iter().any(|u| ids.contains(&u.gpu_id))
            })
            .map(|p| format!("{} {}", p.pid, p.name.as_deref().unwrap_or("?")))
            .collect();
        if blockers.is_empty() {
            return Ok("no process holds the affected GPUs".into());
        }
        if Instant::now() >= end {
            return Err((
                format!(
                    "still held after {}s by: {}",
                    ctx.wait_idle.as_secs(),
                    blockers.join(", ")
                ),
                RESUME.into(),
            ));
        }
        tokio::time::sleep(ctx.poll).await;
    }
}

async fn set_compute(ctx: &ApplyCtx, step: &Step) -> StepResult {
    // The confirmed command names GPUs by index; an index is only valid for the layout of
    // that moment. Before running it, each index must still name the BDF planned for it;
    // otherwise nothing is run (what runs is what was confirmed, or nothing). After an
    // interruption the same GPUs and mode are what was confirmed: GPUs already in the mode
    // are done, and the others' indices are read again from the node.
    let argv = step.argv.first().ok_or_else(|| {
        (
            "the plan's set_compute step has no command".to_string(),
            RESUME.to_string(),
        )
    })?;
    let ids: Vec<&String> = argv
        .iter()
        .skip(2)
        .take_while(|a| a.as_str() != "-C")
        .collect();
    let mode = argv.last().cloned().unwrap_or_default();
    let list = list_bdfs(ctx).await?;
    if ctx.resumed {
        let snap = sample(ctx).await;
        let todo: Vec<&String> = step
            .bdfs
            .iter()
            .filter(|b| {
                !snap.gpus.iter().any(|g| {
                    &&g.bdf == b
                        && g.compute_partition
                            .is_some_and(|c| c.name() == mode.as_str())
                })
            })
            .collect();
        if todo.is_empty() {
            return Ok(format!(
                "{} already in {mode} (set before the interruption): nothing to run",
                step.bdfs.join(", ")
            ));
        }
        let now_ids: Option<Vec<String>> = todo
            .iter()
            .map(|b| index_of(&list, b).map(|i| i.to_string()))
            .collect();
        let Some(now_ids) = now_ids else {
            return Err((
                format!(
                    "after the interruption, {} are not all listed by amd-smi; nothing was run",
                    todo.iter()
                        .map(|b| b.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "check `amd-smi list`, then resume".into(),
            ));
        };
        let planned: Vec<String> = ids.iter().map(|s| (*s).clone()).collect();
        if now_ids != planned {
            let mut again = vec!["set".to_string(), "-g".to_string()];
            again.extend(now_ids.iter().cloned());
            again.extend(["-C".to_string(), mode.clone()]);
            let args: Vec<&str> = again.iter().map(String::as_str).collect();
            let out = long(&ctx.runner)
                .run_with_input(&args, None)
                .await
                .map_err(|e| (e.to_string(), RESUME.into()))?;
            return check_output(&out, "Successfully set accelerator partition")
                .map(|d| {
                    format!(
                        "{d} (resumed: the same GPUs {} by their indices now, `amd-smi {}`)",
                        todo.iter()
                            .map(|b| b.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                        again.join(" ")
                    )
                })
                .map_err(|m| (m, "a process may hold the GPU (BUSY); then resume".into()));
        }
    }
    let mut moved = Vec::new();
    for (id, bdf) in ids.iter().zip(&step.bdfs) {
        let now = list
            .iter()
            .find(|(g, _)| g.to_string() == **id)
            .map(|(_, b)| b.as_str());
        let want = format!("{bdf}.0");
        if !now.is_some_and(|b| b.eq_ignore_ascii_case(&want)) {
            moved.push(format!(
                "index {id} is {} now, the plan means {want}",
                now.unwrap_or("absent")
            ));
        }
    }
    if ids.len() != step.bdfs.len() || !moved.is_empty() {
        return Err((
            format!(
                "the confirmed `{}` would not act on the planned GPUs: {}; nothing was run",
                step.commands.first().map_or("", String::as_str),
                moved.join("; ")
            ),
            "the layout is not what the plan expected at this step: check `amd-smi list`, then plan again".into(),
        ));
    }
    let out = run_confirmed(ctx, step, None).await?;
    check_output(&out, "Successfully set accelerator partition").map_err(|m| (m, "a process may hold the GPU (BUSY), or the memory mode does not allow this compute mode; then resume".into()))
}

/// `amd-smi list`: each logical GPU's index and BDF.
async fn list_bdfs(ctx: &ApplyCtx) -> Result<Vec<(u64, String)>, (String, String)> {
    let out = ctx
        .runner
        .run(&["list", "--json"])
        .await
        .map_err(|e| (e.to_string(), RESUME.into()))?;
    let list: serde_json::Value = serde_json::from_str(out.stdout.trim())
        .map_err(|e| (format!("amd-smi list: {e}"), RESUME.into()))?;
    Ok(list
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| Some((e["gpu"].as_u64()?, e["bdf"].as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default())
}

/// The index of physical GPU `bdf`'s primary partition in `list`.
fn index_of(list: &[(u64, String)], bdf: &str) -> Option<u64> {
    let want = format!("{bdf}.0");
    list.iter()
        .find(|(_, b)| b.eq_ignore_ascii_case(&want))
        .map(|(g, _)| *g)
}

/// Runs the step's confirmed amd-smi argv, exactly (one command per step here).
async fn run_confirmed(
    ctx: &ApplyCtx,
    step: &Step,
    input: Option<&str>,
) -> Result<RawOutput, (String, String)> {
    let [argv] = step.argv.as_slice() else {
        return Err((
            format!(
                "step {} carries {} commands; partop runs exactly one here",
                step.key,
                step.argv.len()
            ),
            "make the plan again with this partop".into(),
        ));
    };
    let args: Vec<&str> = argv.iter().map(String::as_str).collect();
    long(&ctx.runner)
        .run_with_input(&args, input)
        .await
        .map_err(|e| (e.to_string(), RESUME.into()))
}

async fn verify(plan: &Plan, ctx: &ApplyCtx) -> StepResult {
    let snap = sample(ctx).await;
    if let Some(why) = unread(&snap) {
        return Err((
            format!("{why}; the modes could not be checked"),
            RESUME.into(),
        ));
    }
    let mut wrong = Vec::new();
    for c in &plan.changes {
        match snap.gpus.iter().find(|g| g.bdf == c.bdf) {
            Some(g)
                if g.compute_partition == Some(c.to.0) && g.memory_partition == Some(c.to.1) => {}
            Some(g) => wrong.push(format!(
                "{} is {}/{}, expected {}/{}",
                c.bdf,
                g.compute_partition.map_or("?".into(), |m| m.to_string()),
                g.memory_partition.map_or("?".into(), |m| m.to_string()),
                c.to.0,
                c.to.1
            )),
            None => wrong.push(format!("{} is missing", c.bdf)),
        }
    }
    if snap.logical_count() != plan.after.len() {
        wrong.push(format!(
            "{} logical GPUs, expected {}",
            snap.logical_count(),
            plan.after.len()
        ));
    }
    if wrong.is_empty() {
        Ok(format!(
            "{} logical GPUs in the planned modes",
            snap.logical_count()
        ))
    } else {
        Err((wrong.join("; "), RESUME.into()))
    }
}

async fn relaunch(
    plan: &Plan,
    ctx: &ApplyCtx,
    emit: &mut (dyn FnMut(ApplyEvent) + Send),
) -> StepResult {
    let mut done = Vec::new();
    for unit in plan.stops.iter().filter_map(|s| s.unit.as_deref()) {
        let ok = std::process::Command::new("systemctl")
            .args(["start", unit])
            .status()
            .is_ok_and(|s| s.success());
        done.push(format!(
            "{unit}: {}",
            if ok { "started" } else { "FAILED to start" }
        ));
    }
    // Served models: on their planned logical GPUs, by identity (BDF); the index is re-read
    // now, since it is what HIP_VISIBLE_DEVICES means.
    let going: Vec<&crate::domain::plan::ModelMove> =
        plan.models.iter().filter(|m| !m.to.is_empty()).collect();
    let mut failed = Vec::new();
    if !going.is_empty() {
        let snap = sample(ctx).await;
        if let Some(why) = unread(&snap) {
            return Err((
                format!("{why}; no model was started (their logical GPUs could not be found)"),
                RESUME.into(),
            ));
        }
        let mut started = Vec::new();
        for m in &going {
            let Some(spec) = ctx.spec(&m.name) else {
                failed.push(format!("{}: not in the registry any more", m.name));
                continue;
            };
            let spec = &spec;
            let bdfs: Vec<String> = m.to.iter().map(|r| r.bdf.clone()).collect();
            let ids: Option<Vec<u32>> = bdfs
                .iter()
                .map(|b| {
                    snap.logical()
                        .find(|(_, l)| &l.bdf == b)
                        .map(|(_, l)| l.gpu_id)
                })
                .collect();
            let Some(ids) = ids else {
                failed.push(format!(
                    "{}: {} not found after the change",
                    m.name,
                    bdfs.join(",")
                ));
                continue;
            };
            // Idempotent on resume: a model already serving on its target is not started a
            // second time on the same port; one this run started before an interruption, still
            // loading, is waited for rather than started again on the same port and GPU.
            match super::models::found(&ctx.ops(), &ctx.roots.proc_root, &snap, spec, &ids) {
                super::models::Found::Serving => {
                    done.push(format!(
                        "{} already healthy on logical GPU {} (not started again)",
                        spec.name,
                        ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                    ));
                    continue;
                }
                super::models::Found::Loading(l) => {
                    emit(ApplyEvent::Note(format!(
                        "{}: pid {} (started before the interruption) is still loading: waiting for it, not starting another",
                        m.name,
                        l.pid.unwrap_or_default()
                    )));
                    started.push((spec.clone(), l, ids));
                    continue;
                }
                super::models::Found::Absent => {}
            }
            match super::models::launch(&ctx.ops(), spec, &ids, &bdfs) {
                Ok(l) => {
                    emit(ApplyEvent::Note(format!("{}: started: {}", m.name, l.what)));
                    started.push((spec.clone(), l, ids));
                }
                Err(e) => failed.push(format!("{}: {e}", m.name)),
            }
        }
        for (spec, l, ids) in started {
            let (tx, rx) = std::sync::mpsc::channel();
            let dir = ctx.model_log_dir.clone();
            let spec2 = spec.clone();
            let waiter = tokio::task::spawn_blocking(move || {
                super::models::wait_healthy(&spec2, l.pid, &dir, None, |p| {
                    let _ = tx.send(p.to_string());
                })
            });
            while !waiter.is_finished() {
                while let Ok(p) = rx.try_recv() {
                    emit(ApplyEvent::Note(p));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            match waiter.await {
                Ok(Ok(t)) => done.push(format!(
                    "{} healthy on logical GPU {} after {}s",
                    spec.name,
                    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
                    t.as_secs()
                )),
                Ok(Err(e)) => failed.push(e),
                Err(e) => failed.push(format!("{}: {e}", spec.name)),
            }
        }
    }
    for m in plan.models.iter().filter(|m| m.to.is_empty()) {
        done.push(format!(
            "{} not relaunched: {}",
            m.name,
            m.reason.as_deref().unwrap_or("does not fit")
        ));
    }
    // Nothing outside the plan is started: processes stopped by signal that are neither units
    // nor registered models stay stopped (the plan said so before the confirmation).
    let others: Vec<String> = plan
        .stops
        .iter()
        .filter(|s| s.unit.is_none() && s.model.is_none())
        .map(|s| format!("{} (pid {})", s.name, s.pid))
        .collect();
    if !others.is_empty() {
        done.push(format!(
            "not restarted, as planned: {} (their owners start them again)",
            others.join(", ")
        ));
    }
    if failed.is_empty() {
        Ok(done.join("; "))
    } else {
        Err((
            failed.join("; "),
            "the modes are applied; see the model's log (Models view), fix its entry in models.toml, and start it from the Models view or with `partop models start NAME`".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::snapshot::{Health, SourceStatus};

    fn with(status: Health) -> Snapshot {
        let mut s = Snapshot::default();
        let mut src = SourceStatus::down(crate::collect::amdsmi::reader::SRC_STATIC, None);
        src.status = status;
        src.error = Some("timed out after 10s".into());
        s.sources.push(src);
        s
    }

    #[test]
    fn a_step_never_judges_a_read_that_failed() {
        // Every health: only the two that mean "this read failed" stop a step, with the error.
        for (h, stops) in [
            (Health::Ok, false),
            (Health::Degraded, false),
            (Health::Pending, false),
            (Health::Stale, true),
            (Health::Down, true),
        ] {
            let why = unread(&with(h));
            assert_eq!(why.is_some(), stops, "{h:?}");
            if let Some(w) = why {
                assert!(w.contains("timed out after 10s"), "{w}");
            }
        }
        assert!(unread(&Snapshot::default()).is_none());
    }
}
