//! Applying a confirmed repartition plan, step by step: stop the holders (SIGTERM, grace,
//! SIGKILL only if the operator allowed it), wait until nothing holds the GPUs, set the memory
//! mode, reload the driver by the method of this amd-smi version, wait for the logical GPUs,
//! set the compute mode (indices re-read), verify by reading back, start again what was
//! stopped. amd-smi often fails with exit status 0, so its text is scanned. Every step is
//! journaled with the plan's fingerprint, so an interrupted apply resumes where it stopped.

use super::kill::{KillEvent, KillJob};
use super::runlog::RunLog;
use crate::collect::pipeline::Collector;

use crate::collect::amdsmi::runner::{RawOutput, Runner};
use crate::collect::holders::Roots;
use crate::domain::kill::{Sig, Target};
use crate::domain::plan::{Plan, Reload, Step};
use crate::domain::snapshot::Snapshot;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Who restarts the processes a plan stopped that are neither units nor registered models. On a
/// real node their owners do (partop says so); on a simulated node the simulator stands in for
/// them, given here by the command layer (the executor does not know the simulator): it gets
/// the stopped (pid, start time) pairs and the registered model names to leave alone, and
/// answers one line per process.
#[derive(Clone)]
pub struct OwnersRestart(pub std::sync::Arc<RestartFn>);

/// (stopped pid, start time) pairs, model names to skip → one line per process, or an error.
pub type RestartFn =
    dyn Fn(&[(u32, Option<u64>)], &[String]) -> Result<Vec<String>, String> + Send + Sync;

impl std::fmt::Debug for OwnersRestart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnersRestart")
    }
}

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
    /// Restarts the stopped processes that are not units or models (the simulator only).
    pub restart_owners: Option<OwnersRestart>,
    /// How long to wait for idle GPUs.
    pub wait_idle: Duration,
    /// How long to wait for the logical GPUs after a reload.
    pub wait_gpus: Duration,
    /// The served-model registry (stop and relaunch models its way).
    pub registry: Option<crate::domain::models::Registry>,
    /// Where partop-launched models log.
    pub model_log_dir: PathBuf,
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

    fn spec(&self, name: &str) -> Option<&crate::domain::models::ModelSpec> {
        self.registry
            .as_ref()
            .and_then(|r| r.models.iter().find(|m| m.name == name))
    }
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
    },
    /// A step succeeded.
    Done {
        /// Index.
        idx: usize,
        /// What it found or did.
        detail: String,
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

async fn sample(ctx: &ApplyCtx) -> Snapshot {
    let mut c = Collector::amd_smi(ctx.runner.clone());
    c.enrich.roots = Some(ctx.roots.clone());
    c.sample().await
}

fn long(r: &Runner) -> Runner {
    Runner {
        timeout: Duration::from_secs(300),
        ..r.clone()
    }
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
) -> Result<(), StepFailed> {
    for (idx, step) in plan.steps.iter().enumerate().skip(from) {
        let fail = |message: String, next: &str| StepFailed {
            idx,
            key: step.key.clone(),
            message,
            next: next.to_string(),
        };
        log.step_begin(idx, &step.key)
            .map_err(|e| fail(e.to_string(), RESUME))?;
        emit(ApplyEvent::Started {
            idx,
            title: step.title.clone(),
        });
        let result = run_step(plan, ctx, step, emit)
            .await
            .map_err(|(m, n)| fail(m, &n));
        match result {
            Ok(detail) => {
                log.step_end(idx, &step.key, true, &detail).map_err(|e| {
                    fail(
                        format!("the step was done, but {e}"),
                        "free the journal, then --resume (the step is safe to run again)",
                    )
                })?;
                emit(ApplyEvent::Done { idx, detail });
            }
            Err(mut e) => {
                let _ = log.step_end(idx, &step.key, false, &e.message);
                // Services are down once the stop step has run: say how to bring them back
                // without finishing the plan.
                if plan.steps[..idx].iter().any(|s| s.key == "stop")
                    && let Some(r) = restore_text(plan)
                {
                    e.next = format!("{}\nor abort and restore services now:\n{r}", e.next);
                }
                return Err(e);
            }
        }
    }
    let _ = log.done();
    Ok(())
}

/// How to start again what the plan stopped, in the layout as it was (an abort).
pub fn restore_text(plan: &Plan) -> Option<String> {
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
            "  partop models start {} --gpu {}   (it ran on {})",
            m.name,
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

const RESUME: &str =
    "fix the cause, then: partop apply PLAN.json --resume (completed steps are skipped)";

async fn run_step(
    plan: &Plan,
    ctx: &ApplyCtx,
    step: &Step,
    emit: &mut (dyn FnMut(ApplyEvent) + Send),
) -> StepResult {
    match step.key.as_str() {
        "stop" => {
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
        "wait_idle" => wait_idle(plan, ctx).await,
        "set_memory" => {
            let m = plan.draft.memory.map(|m| m.name()).unwrap_or_default();
            let out = run_confirmed(ctx, step, Some("Y\n")).await?;
            let marker = if plan.reload == Reload::InsideSetMemory {
                format!("Successfully set memory partition to {m}")
            } else {
                "Successfully set memory partition".into()
            };
            check_output(&out, &marker).map_err(|m| (m, "the memory mode may be pending: run the same plan again with --resume after fixing the cause; `amd-smi partition -c -m` shows the state".into()))
        }
        "reload" => {
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
                tokio::time::sleep(Duration::from_millis(500)).await;
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
        "wait_gpus" => {
            let want = plan.after.len();
            let end = Instant::now() + ctx.wait_gpus;
            let mut last = None;
            while Instant::now() < end {
                last = count_gpus(ctx).await;
                if last == Some(want) {
                    return Ok(format!("{want} logical GPUs"));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err((format!("expected {want} logical GPUs, amd-smi lists {last:?} after {}s", ctx.wait_gpus.as_secs()), "if fewer than 64 appear in CPX, another DRM driver (ast) may use the minors: see docs/reference.md; then --resume".into()))
        }
        "set_compute" => set_compute(ctx, step).await,
        "verify" => verify(plan, ctx).await,
        "relaunch" => relaunch(plan, ctx, emit).await,
        other => Err((
            format!("unknown step {other:?}"),
            "use the partop version that made the plan".into(),
        )),
    }
}

async fn reload(plan: &Plan, ctx: &ApplyCtx) -> StepResult {
    match plan.reload {
        Reload::InsideSetMemory => Ok("done by set -M (ROCm 6.x)".into()),
        Reload::ResetReload => {
            let step = plan
                .steps
                .iter()
                .find(|s| s.key == "reload")
                .ok_or_else(|| {
                    (
                        "the plan has no reload step".to_string(),
                        RESUME.to_string(),
                    )
                })?;
            let out = run_confirmed(ctx, step, Some("Y\n")).await?;
            check_output(&out, "Successfully reloaded driver").map_err(|m| (m, "something still holds a GPU (see `partop` Processes, or lsof /dev/kfd); stop it, then --resume".into()))
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
                    "something still holds the amdgpu module; stop it, then --resume".into(),
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
        return Err((format!("still running after SIGTERM and {}s: pids {:?}", ctx.grace.as_secs(), r.after_term), "stop them yourself, or allow SIGKILL: partop apply PLAN.json --resume --kill-after-grace".into()));
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
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn set_compute(ctx: &ApplyCtx, step: &Step) -> StepResult {
    // The confirmed command names GPUs by index; an index is only valid for the layout of
    // that moment. Before running it, each index must still name the BDF planned for it;
    // otherwise nothing is run (what runs is what was confirmed, or nothing).
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
    let out = ctx
        .runner
        .run(&["list", "--json"])
        .await
        .map_err(|e| (e.to_string(), RESUME.into()))?;
    let list: serde_json::Value = serde_json::from_str(out.stdout.trim())
        .map_err(|e| (format!("amd-smi list: {e}"), RESUME.into()))?;
    let mut moved = Vec::new();
    for (id, bdf) in ids.iter().zip(&step.bdfs) {
        let want = format!("{bdf}.0");
        let now = list.as_array().and_then(|a| {
            a.iter()
                .find(|e| e["gpu"].as_u64().is_some_and(|g| g.to_string() == **id))
                .and_then(|e| e["bdf"].as_str())
        });
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
    check_output(&out, "Successfully set accelerator partition").map_err(|m| (m, "a process may hold the GPU (BUSY), or the memory mode does not allow this compute mode; then --resume".into()))
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
    let mut wrong = Vec::new();
    for c in &plan.changes {
        match snap.gpus.iter().find(|g| g.bdf == c.bdf) {
            Some(g)
                if g.compute_partition == Some(c.to.0) && g.memory_partition == Some(c.to.1) => {}
            Some(g) => wrong.push(format!(
                "{} is {:?}/{:?}, expected {}/{}",
                c.bdf, g.compute_partition, g.memory_partition, c.to.0, c.to.1
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
        let mut started = Vec::new();
        for m in &going {
            let Some(spec) = ctx.spec(&m.name) else {
                failed.push(format!("{}: not in the registry any more", m.name));
                continue;
            };
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
            // second time on the same port.
            if already_serving(&snap, spec, &ids) {
                done.push(format!(
                    "{} already healthy on logical GPU {} (not started again)",
                    spec.name,
                    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                ));
                continue;
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
    if let Some(restart) = &ctx.restart_owners {
        // The simulated node's other workloads (jobs, agents); its model servers are the
        // registry's.
        let skip: Vec<String> = ctx
            .registry
            .iter()
            .flat_map(|r| r.models.iter().map(|m| m.name.clone()))
            .collect();
        let only: Vec<(u32, Option<u64>)> = plan
            .stops
            .iter()
            .filter(|s| s.model.is_none())
            .map(|s| (s.pid, s.start_ticks))
            .collect();
        match (restart.0)(&only, &skip) {
            Ok(r) => done.extend(r),
            Err(e) => return Err((e, RESUME.into())),
        }
    } else if plan
        .stops
        .iter()
        .any(|s| s.unit.is_none() && s.model.is_none())
    {
        done.push("processes stopped by signal that are not registered models are not restarted (their owners restart them)".into());
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

/// Whether `spec` already runs on logical GPUs `ids` and answers its health check.
fn already_serving(snap: &Snapshot, spec: &crate::domain::models::ModelSpec, ids: &[u32]) -> bool {
    let on_target = snap.processes.iter().any(|p| {
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
    });
    on_target
        && crate::collect::served::http::get(&spec.health_url, Duration::from_millis(800))
            .is_ok_and(|r| r.status == 200)
}
