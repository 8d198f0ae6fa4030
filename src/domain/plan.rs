//! The repartition planner: from a snapshot and a draft (which physical GPUs, which compute and
//! memory mode), the full plan an operator confirms: what changes (a memory-mode change expands
//! to the whole hive), the layouts before and after with the new indices, what must stop, the
//! ordered steps with the exact commands for this amd-smi version, the expected downtime, the
//! warnings, and a fingerprint that changes whenever any of it does. Pure.

use super::journal::StepKind;
use super::layout::shapes;
use super::modes::{ComputeMode, MemoryMode};
use super::product::{self, Profile};
use super::snapshot::{PhysicalGpu, Snapshot};
use serde::{Deserialize, Serialize};

pub use super::layout::{LayoutRow, layout_rows};
pub use super::modes::Reload;

/// What the operator asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Draft {
    /// Physical GPUs by BDF (`0000:05:00`); empty = all.
    pub gpus: Vec<String>,
    /// Target compute mode (None = keep).
    pub compute: Option<ComputeMode>,
    /// Target memory mode (None = keep).
    pub memory: Option<MemoryMode>,
}

/// One physical GPU's change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuChange {
    /// BDF.
    pub bdf: String,
    /// Modes now.
    pub from: (Option<ComputeMode>, Option<MemoryMode>),
    /// Modes after.
    pub to: (ComputeMode, MemoryMode),
    /// Included only because memory modes are hive-wide.
    pub hive_only: bool,
}

/// A process that must stop first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stop {
    /// PID.
    pub pid: u32,
    /// Start time (identity).
    pub start_ticks: Option<u64>,
    /// Name.
    pub name: String,
    /// Agent description, for node agents.
    pub agent: Option<String>,
    /// GPUs it uses.
    pub gpus: Vec<u32>,
    /// Its systemd unit: stopped with systemctl (and started again after) instead of a signal.
    #[serde(default)]
    pub unit: Option<String>,
    /// The registered model it serves: stopped by its registry entry's way, relaunched after.
    #[serde(default)]
    pub model: Option<String>,
}

/// A served model the plan stops and relaunches: where it is, where it goes, the exact
/// commands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelMove {
    /// Registry name.
    pub name: String,
    /// Logical GPUs now (BDFs).
    pub from: Vec<String>,
    /// Logical GPUs after (rows of the new layout); empty: it does not fit.
    pub to: Vec<LayoutRow>,
    /// Why it does not fit.
    pub reason: Option<String>,
    /// How it is stopped.
    pub stop: String,
    /// How it is started again (planned indices; re-read before launching).
    pub launch: String,
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// What it does (the executor dispatches on it; written as its word, `set_memory`).
    pub key: super::journal::StepKind,
    /// What it does.
    pub title: String,
    /// The exact commands it runs, as shown (amd-smi arguments as typed).
    pub commands: Vec<String>,
    /// The amd-smi argument vectors the executor runs, exactly these (set, reset steps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<Vec<String>>,
    /// For `set_compute`: the BDF each index in `argv` must still name when it runs (the
    /// executor checks, and runs nothing if an index moved).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bdfs: Vec<String>,
    /// For `wait_gpus`: the logical GPU count this wait expects (after a reload, the count of
    /// the driver's default compute modes; after the compute modes are set, the final count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// How long the step may take before it fails, in seconds (shown while it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_secs: Option<u32>,
}

impl Step {
    fn amd_smi(key: StepKind, title: String, argv: Vec<Vec<String>>) -> Self {
        Self {
            key,
            title,
            commands: argv
                .iter()
                .map(|a| format!("amd-smi {}", a.join(" ")))
                .collect(),
            argv,
            bdfs: Vec::new(),
            count: None,
            limit_secs: None,
        }
    }

    /// A step that runs no amd-smi command of its own.
    fn plain(key: StepKind, title: String, commands: Vec<String>) -> Self {
        Self {
            key,
            title,
            commands,
            argv: Vec::new(),
            bdfs: Vec::new(),
            count: None,
            limit_secs: None,
        }
    }

    fn limit(mut self, secs: u32) -> Self {
        self.limit_secs = Some(secs);
        self
    }
}

/// How long a wait for the logical GPUs may take (a reload of a real MI300X node takes about
/// two minutes; CPX/NPS4 brings 64 partitions up one by one).
pub const WAIT_GPUS_SECS: u32 = 300;
/// How long the wait for idle GPUs may take.
pub const WAIT_IDLE_SECS: u32 = 60;

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// A plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Changes to the hash of everything below.
    pub fingerprint: String,
    /// Host.
    pub host: String,
    /// The draft it answers.
    pub draft: Draft,
    /// Reload method.
    pub reload: Reload,
    /// Per physical GPU.
    pub changes: Vec<GpuChange>,
    /// Logical GPUs now.
    pub before: Vec<LayoutRow>,
    /// Logical GPUs after (new indices).
    pub after: Vec<LayoutRow>,
    /// What must stop.
    pub stops: Vec<Stop>,
    /// Ordered steps.
    pub steps: Vec<Step>,
    /// Expected downtime, seconds.
    pub downtime_secs: u32,
    /// What the operator should know.
    pub warnings: Vec<String>,
    /// The reload time it assumed (to re-plan identically).
    #[serde(default)]
    pub reload_secs: u32,
    /// The grace period it assumed.
    #[serde(default)]
    pub grace_secs: u32,
    /// Served models it stops and relaunches.
    #[serde(default)]
    pub models: Vec<ModelMove>,
    /// What each replica set becomes (its members are among `models`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sets: Vec<super::replicas::SetChange>,
    /// What each load balancer's upstream becomes (steps `balancer_drain`, `balancer_join`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub balancers: Vec<super::balancer::BalancerChange>,
    /// On a Kubernetes node: the pods it moves and what the node advertises after
    /// (`plan_k8s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<super::plan_k8s::KubeChange>,
}

impl Plan {
    /// The fingerprint of everything in the plan but the fingerprint field itself.
    pub fn content_fingerprint(&self) -> String {
        super::fingerprint::of_content(self, |p| &mut p.fingerprint)
    }

    /// Whether the plan's content still matches its fingerprint (a plan file edited after
    /// planning does not).
    pub fn content_intact(&self) -> bool {
        self.content_fingerprint() == self.fingerprint
    }

    /// Whether it reloads the driver (and so asks for the host name).
    pub fn reloads(&self) -> bool {
        self.steps.iter().any(|s| s.key == StepKind::Reload)
    }
}

/// Why a draft cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The node lists no GPU (the driver is away: a reload in progress, or not loaded).
    #[error(
        "the node lists no GPU right now (a driver reload in progress, or amdgpu not loaded); plan again once `amd-smi list` shows the GPUs"
    )]
    NoGpus,
    /// Nothing to change.
    #[error("nothing to change: the selected GPUs are already in the requested modes")]
    NoChange,
    /// Unknown GPU.
    #[error("no physical GPU {0} on this node")]
    UnknownGpu(String),
    /// Modes unknown.
    #[error("the current modes of {0} are unknown; partop cannot plan from them")]
    UnknownModes(String),
    /// Not offered.
    #[error("{bdf} does not offer {compute}/{memory} (offered: {offered}; source: {source_name})")]
    NotOffered {
        /// GPU.
        bdf: String,
        /// Compute.
        compute: ComputeMode,
        /// Memory.
        memory: MemoryMode,
        /// What is offered.
        offered: String,
        /// Device or product table.
        source_name: String,
    },
}

fn offered(g: &PhysicalGpu) -> (Vec<Profile>, String) {
    let src = g
        .provenance
        .get("profiles")
        .map_or_else(|| "unknown".to_string(), |o| o.detail.clone());
    (g.profiles.clone(), src)
}

/// One warning per (mode now, new memory mode, default) for the GPUs whose kept compute mode
/// the new memory mode does not offer, naming them (or "every GPU").
fn default_warnings(
    to_default: &[(String, ComputeMode, MemoryMode, ComputeMode)],
    gpus: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen: Vec<(ComputeMode, MemoryMode, ComputeMode)> = Vec::new();
    for (_, c, m, d) in to_default {
        if seen.contains(&(*c, *m, *d)) {
            continue;
        }
        seen.push((*c, *m, *d));
        let which: Vec<&str> = to_default
            .iter()
            .filter(|x| (x.1, x.2, x.3) == (*c, *m, *d))
            .map(|x| x.0.as_str())
            .collect();
        let who = if which.len() == gpus {
            "every GPU".to_string()
        } else {
            which.join(", ")
        };
        out.push(format!(
            "{c} is not offered with {m}: the compute mode of {who} returns to the default, {d}"
        ));
    }
    out
}

/// Whether `compute` + `memory` is offered for `g`: by the device's own list where it gave one,
/// else by the product table.
fn offers_with(
    g: &PhysicalGpu,
    prod: Option<&product::Product>,
    compute: ComputeMode,
    memory: MemoryMode,
) -> bool {
    if g.profiles.is_empty() {
        prod.is_some_and(|p| p.offers(compute, memory))
    } else {
        product::offers(&g.profiles, compute, memory)
    }
}

/// Whether `cur` holds the node's modes as they are now (its layout is the real one).
fn cur_is_now(cur: &[Target], snap: &Snapshot) -> bool {
    cur.iter().all(|(bdf, _, c, m, _)| {
        snap.gpus.iter().any(|g| {
            &g.bdf == bdf && g.compute_partition == Some(*c) && g.memory_partition == Some(*m)
        })
    })
}

/// A physical GPU's target: BDF, product key, modes, and its partition count now.
type Target = (String, Option<String>, ComputeMode, MemoryMode, Option<u32>);

fn layout(gpus: &[Target]) -> Vec<LayoutRow> {
    let mut rows = Vec::new();
    let mut id = 0;
    for (bdf, key, c, m, n_now) in gpus {
        let prod = key.as_deref().and_then(product::by_key);
        match prod {
            Some(p) => {
                for s in shapes(&p, *c, *m) {
                    rows.push(LayoutRow {
                        gpu_id: id,
                        bdf: format!("{bdf}.{}", s.partition_id),
                        cus: s.cus,
                        vram_mb: s.vram_share_mb,
                    });
                    id += 1;
                }
            }
            None => {
                for p in 0..n_now.unwrap_or(1) {
                    rows.push(LayoutRow {
                        gpu_id: id,
                        bdf: format!("{bdf}.{p}"),
                        cus: 0,
                        vram_mb: 0,
                    });
                    id += 1;
                }
            }
        }
    }
    rows
}

/// Why the plan may not run (or go on running) on the node in `snap`, whose host is `here`:
/// each reason is a sentence; none means it may. `stop_done` says whether this run already
/// stopped the plan's processes; `done` is the steps this run finished (empty before a fresh
/// apply). Checked before a fresh apply and before every resume:
/// - the plan was made on this host;
/// - every GPU it changes is in a state the plan's run can leave it in at this point: its start,
///   its target, the pending memory mode, the reload's default compute mode; once a
///   `set_compute` step that names the GPU is done, only its target (a GPU set back by hand
///   after that step was once accepted, and every resume then failed on the count);
/// - until the stop step is done, nothing holds the drained GPUs but what the plan stops (a
///   holder that appeared since would make the drain fail after every workload was stopped).
pub fn still_valid(
    plan: &Plan,
    snap: &Snapshot,
    here: &str,
    stop_done: bool,
    done: &[usize],
) -> Vec<String> {
    let mut why = Vec::new();
    if plan.host != here {
        why.push(format!(
            "this plan was made for host {}, and this is {here}: plans are never applied to another node",
            plan.host
        ));
        return why;
    }
    // While the driver is away (a reload under way) nothing is listed: modes are not judged.
    if !snap.gpus.is_empty() {
        for c in &plan.changes {
            let Some(g) = snap.gpus.iter().find(|g| g.bdf == c.bdf) else {
                why.push(format!("{} is not on this node any more", c.bdf));
                continue;
            };
            // The states this plan's own run passes through: where it started, after the
            // reload (the driver's default compute mode for the new memory mode), its target.
            let mut states = vec![(Some(c.to.0), Some(c.to.1))];
            if !compute_set(plan, done, &c.bdf) {
                states.push((c.from.0, c.from.1));
                if c.from.1 != Some(c.to.1) {
                    // Set, not yet reloaded: some versions report the pending memory mode.
                    states.push((c.from.0, Some(c.to.1)));
                }
                if plan.reloads()
                    && let Some(p) = g.product_key.as_deref().and_then(product::by_key)
                {
                    states.push((Some(p.default_compute_for(c.to.1)), Some(c.to.1)));
                }
            }
            let fits = |(sc, sm): &(Option<ComputeMode>, Option<MemoryMode>)| {
                (g.compute_partition.is_none() || g.compute_partition == *sc)
                    && (g.memory_partition.is_none() || g.memory_partition == *sm)
            };
            if !states.iter().any(fits) {
                let name = |(sc, sm): &(Option<ComputeMode>, Option<MemoryMode>)| {
                    format!(
                        "{}/{}",
                        sc.map_or("?".into(), |m| m.to_string()),
                        sm.map_or("?".into(), |m| m.to_string())
                    )
                };
                let mut known: Vec<String> = states.iter().map(name).collect();
                known.dedup();
                why.push(if compute_set(plan, done, &c.bdf) {
                    format!(
                        "{} is {}, but this run already set it to {}: another change ran since; set it back (`amd-smi set -g INDEX -C {}`, INDEX its number in `amd-smi list`) and resume, or abandon the run",
                        c.bdf,
                        name(&(g.compute_partition, g.memory_partition)),
                        known.join(", "),
                        c.to.0
                    )
                } else {
                    format!(
                        "{} is {}, a state this plan's run cannot leave it in (it passes through {}): another change ran since",
                        c.bdf,
                        name(&(g.compute_partition, g.memory_partition)),
                        known.join(", ")
                    )
                });
            }
        }
    }
    if !stop_done
        && let Ok(now) = self::plan(
            snap,
            &plan.draft,
            plan.reload,
            plan.reload_secs,
            plan.grace_secs,
        )
    {
        for s in &now.stops {
            let planned = plan
                .stops
                .iter()
                .any(|p| p.pid == s.pid && p.start_ticks == s.start_ticks);
            if !planned {
                why.push(format!(
                    "pid {} ({}) holds a GPU the plan drains and is not in the plan (it started after planning)",
                    s.pid, s.name
                ));
            }
        }
    }
    why
}

/// Whether a `set_compute` step of `plan` that names `bdf` is among the `done` steps: from
/// then on the GPU is in its target compute mode (no later step of the plan changes it).
fn compute_set(plan: &Plan, done: &[usize], bdf: &str) -> bool {
    plan.steps.iter().enumerate().any(|(i, s)| {
        s.key == StepKind::SetCompute && done.contains(&i) && s.bdfs.iter().any(|b| b == bdf)
    })
}

/// Plans `draft` on the node in `snap`, in the order an operator reads the plan: what each GPU
/// becomes, the layouts, who must stop, where the served models go, the steps, and what the
/// operator is told.
pub fn plan(
    snap: &Snapshot,
    draft: &Draft,
    reload: Reload,
    reload_secs: u32,
    grace_secs: u32,
) -> Result<Plan, Vec<PlanError>> {
    if snap.gpus.is_empty() {
        return Err(vec![PlanError::NoGpus]);
    }
    let memory_change = draft
        .memory
        .is_some_and(|m| snap.gpus.iter().any(|g| g.memory_partition != Some(m)));
    let Targets {
        changes,
        after_in,
        mut warnings,
    } = targets(snap, draft, memory_change)?;
    let before = layout_rows(snap);
    let after = layout(&after_in);
    warnings.extend(layout_warnings(
        snap.gpus.len(),
        memory_change,
        &changes,
        &before,
        &after,
    ));
    let stops = stops(snap, &changes, memory_change);
    let (stops, kube) = moved_through_the_cluster(snap, stops, &changes, memory_change, &after);
    let (models, sets, balancers) = moves(snap, &stops, &before, &after, &changes, &mut warnings);
    let mut p = Plan {
        fingerprint: String::new(),
        host: snap.host.clone(),
        draft: draft.clone(),
        reload,
        changes,
        before,
        after,
        stops,
        steps: Vec::new(),
        downtime_secs: 0,
        warnings,
        reload_secs,
        grace_secs,
        models,
        sets,
        balancers,
        kubernetes: kube,
    };
    let target_m = draft.memory.filter(|_| memory_change);
    let mut step_warnings = Vec::new();
    p.steps = steps(snap, &p, target_m, &after_in, &mut step_warnings);
    p.warnings.extend(step_warnings);
    p.warnings.extend(not_restarted(snap, &p.stops));
    if target_m.is_some() {
        p.warnings.push("secondary partitions report N/A for device-wide values; during the reload every value is unavailable".into());
    }
    p.downtime_secs = if p.stops.is_empty() { 0 } else { grace_secs }
        + if target_m.is_some() { reload_secs } else { 0 }
        + 5;
    p.fingerprint = p.content_fingerprint();
    Ok(p)
}

/// What the draft makes of each physical GPU, before anything is stopped or stepped.
struct Targets {
    /// The GPUs whose modes change.
    changes: Vec<GpuChange>,
    /// Every GPU's target (the layout after is built from them).
    after_in: Vec<Target>,
    /// What the operator should know about the targets.
    warnings: Vec<String>,
}

/// Each GPU's target modes, or every reason the draft cannot be planned (all of them at once,
/// so the operator fixes the draft in one go).
fn targets(snap: &Snapshot, draft: &Draft, memory_change: bool) -> Result<Targets, Vec<PlanError>> {
    let mut errors: Vec<PlanError> = draft
        .gpus
        .iter()
        .filter(|b| !snap.gpus.iter().any(|g| &g.bdf == *b))
        .map(|b| PlanError::UnknownGpu(b.clone()))
        .collect();
    let mut t = Targets {
        changes: Vec::new(),
        after_in: Vec::new(),
        warnings: Vec::new(),
    };
    // GPUs whose kept compute mode the new memory mode does not offer: (BDF, now, memory, default).
    let mut to_default: Vec<(String, ComputeMode, MemoryMode, ComputeMode)> = Vec::new();
    for g in &snap.gpus {
        let in_draft = draft.gpus.is_empty() || draft.gpus.contains(&g.bdf);
        let (Some(c_now), Some(m_now)) = (g.compute_partition, g.memory_partition) else {
            if in_draft || memory_change {
                errors.push(PlanError::UnknownModes(g.bdf.clone()));
            }
            continue;
        };
        let m_to = if memory_change {
            draft.memory.unwrap_or(m_now)
        } else {
            m_now
        };
        let asked = draft.compute.filter(|_| in_draft);
        let c_to = compute_target(g, asked, c_now, m_to, memory_change, &mut to_default);
        if let Err(e) = offer_check(g, c_to, m_to, in_draft, memory_change, &mut t.warnings) {
            errors.push(e);
        }
        if (c_to, m_to) != (c_now, m_now) {
            t.changes.push(GpuChange {
                bdf: g.bdf.clone(),
                from: (Some(c_now), Some(m_now)),
                to: (c_to, m_to),
                hive_only: !in_draft,
            });
        }
        #[expect(clippy::cast_possible_truncation, reason = "partition counts")]
        t.after_in.push((
            g.bdf.clone(),
            g.product_key.clone(),
            c_to,
            m_to,
            Some(g.partitions.len() as u32),
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    if t.changes.is_empty() {
        return Err(vec![PlanError::NoChange]);
    }
    t.warnings
        .extend(default_warnings(&to_default, snap.gpus.len()));
    Ok(t)
}

/// The compute mode `g` ends in. After a reload the compute mode returns to the default. No
/// compute asked (or a GPU outside the draft) means the mode the GPU has now, set again after
/// the reload; only where that mode is not offered with the new memory mode does it take the
/// default, and the GPU goes into `to_default` so the operator is told.
fn compute_target(
    g: &PhysicalGpu,
    asked: Option<ComputeMode>,
    c_now: ComputeMode,
    m_to: MemoryMode,
    memory_change: bool,
    to_default: &mut Vec<(String, ComputeMode, MemoryMode, ComputeMode)>,
) -> ComputeMode {
    let prod = g.product_key.as_deref().and_then(product::by_key);
    let c_default = prod.as_ref().map_or(c_now, |p| p.default_compute_for(m_to));
    match asked {
        Some(c) => c,
        None if !memory_change => c_now,
        None if offers_with(g, prod.as_ref(), c_now, m_to) => c_now,
        None => {
            to_default.push((g.bdf.clone(), c_now, m_to, c_default));
            c_default
        }
    }
}

/// Whether `g` offers `c_to`/`m_to` (judged where it is selected or the memory mode changes
/// hive-wide), and, for a selected GPU, what the operator should know about the answer's
/// source.
fn offer_check(
    g: &PhysicalGpu,
    c_to: ComputeMode,
    m_to: MemoryMode,
    in_draft: bool,
    memory_change: bool,
    warnings: &mut Vec<String>,
) -> Result<(), PlanError> {
    let (profiles, src) = offered(g);
    if in_draft {
        if let Some(p) = profiles.iter().find(|p| p.compute == ComputeMode::Dpx)
            && p.memory == vec![MemoryMode::Nps1]
            && c_to == ComputeMode::Dpx
        {
            warnings.push(format!(
                "{}: this firmware offers DPX with NPS1 only",
                g.bdf
            ));
        }
        if src.contains("product table") {
            warnings.push(format!("{}: the offered combinations come from partop's product table (amd-smi partition -a needs root); the device may offer fewer", g.bdf));
        }
    }
    if (in_draft || memory_change)
        && !profiles.is_empty()
        && !product::offers(&profiles, c_to, m_to)
    {
        return Err(PlanError::NotOffered {
            bdf: g.bdf.clone(),
            compute: c_to,
            memory: m_to,
            offered: product::profiles_text(&profiles),
            source_name: src,
        });
    }
    Ok(())
}

/// What the operator should know about the layout as a whole: a memory mode reaches the whole
/// hive, and indices that move break every workload's `HIP_VISIBLE_DEVICES`.
fn layout_warnings(
    gpus: usize,
    memory_change: bool,
    changes: &[GpuChange],
    before: &[LayoutRow],
    after: &[LayoutRow],
) -> Vec<String> {
    let mut warnings = Vec::new();
    if memory_change && changes.iter().any(|c| c.hive_only) {
        warnings.push(format!("memory (NPS) modes are hive-wide: all {gpus} GPUs change memory mode, not only the selected ones"));
    }
    if before.len() != after.len() || before.iter().zip(after).any(|(a, b)| a.bdf != b.bdf) {
        warnings.push(format!("logical GPUs are renumbered: {} now, {} after; HIP_VISIBLE_DEVICES indices of every workload change", before.len(), after.len()));
    }
    warnings
}

/// Who must stop: for a reload, every GPU process and agent on the node; for compute only,
/// those on the changed GPUs, and agents holding /dev/kfd.
fn stops(snap: &Snapshot, changes: &[GpuChange], memory_change: bool) -> Vec<Stop> {
    let changed_ids: Vec<u32> = snap
        .logical()
        .filter(|(g, _)| changes.iter().any(|c| c.bdf == g.bdf))
        .map(|(_, l)| l.gpu_id)
        .collect();
    snap.processes
        .iter()
        .filter(|p| {
            memory_change
                || p.holds_kfd && p.agent.is_some()
                || p.gpus.iter().any(|u| changed_ids.contains(&u.gpu_id))
        })
        .map(|p| Stop {
            pid: p.pid,
            start_ticks: p.start_ticks,
            name: p.name.clone().unwrap_or_else(|| format!("pid {}", p.pid)),
            agent: p.agent.clone(),
            gpus: p
                .gpus
                .iter()
                .filter(|u| !u.attached_only())
                .map(|u| u.gpu_id)
                .collect(),
            unit: p.systemd_unit.clone().filter(|_| p.agent.is_some()),
            model: snap
                .models
                .iter()
                .find(|m| m.pid == Some(p.pid) && m.spec.is_some())
                .map(|m| m.name.clone()),
        })
        .collect()
}

/// The served models a plan moves, in the order they move (a shrinking set's surplus members
/// first: they leave first; then the registered models; then the sets' other members), with
/// what each replica set and load balancer becomes.
fn moves(
    snap: &Snapshot,
    stops: &[Stop],
    before: &[LayoutRow],
    after: &[LayoutRow],
    changes: &[GpuChange],
    warnings: &mut Vec<String>,
) -> (
    Vec<ModelMove>,
    Vec<super::replicas::SetChange>,
    Vec<super::balancer::BalancerChange>,
) {
    let mut models = model_moves(snap, stops, before, after, warnings);
    let stopped_pids: Vec<u32> = stops.iter().map(|s| s.pid).collect();
    let planned: Vec<String> = models
        .iter()
        .flat_map(|m| m.to.iter().map(|r| r.bdf.clone()))
        .collect();
    let set_plan = super::replicas::plan_sets(
        snap,
        &stopped_pids,
        before,
        after,
        &planned,
        &layout_names(changes),
    );
    let mut ordered: Vec<ModelMove> = set_plan.surplus.into_iter().map(ModelMove::from).collect();
    ordered.append(&mut models);
    ordered.extend(set_plan.moves.into_iter().map(ModelMove::from));
    (ordered, set_plan.changes, set_plan.balancers)
}

/// The ordered steps of plan `p` (everything but its steps filled in): stop, wait idle, the
/// memory mode and reload, the compute modes, wait, verify, relaunch, with the load balancer's
/// drain and join around them.
fn steps(
    snap: &Snapshot,
    p: &Plan,
    target_m: Option<MemoryMode>,
    after_in: &[Target],
    warnings: &mut Vec<String>,
) -> Vec<Step> {
    let mut steps = Vec::new();
    if !p.stops.is_empty() {
        steps.push(stop_step(&p.stops, &p.models, p.grace_secs));
    }
    steps.push(
        Step::plain(
            StepKind::WaitIdle,
            "wait until no process holds an affected GPU (/proc scan)".into(),
            vec![],
        )
        .limit(WAIT_IDLE_SECS),
    );
    let mut cur = reloaded_targets(snap, after_in, target_m);
    if let Some(m) = target_m {
        steps.extend(reload_steps(m, p.reload, &cur));
    }
    let compute = compute_steps(snap, &p.changes, target_m, &p.before, &mut cur, warnings);
    if !compute.is_empty() {
        steps.extend(compute);
        let mut wait = Step::plain(
            StepKind::WaitGpus,
            format!(
                "wait until {} logical GPUs are back in their new compute modes",
                p.after.len()
            ),
            vec!["amd-smi list --json".into()],
        )
        .limit(WAIT_GPUS_SECS);
        wait.count = u32::try_from(p.after.len()).ok();
        steps.push(wait);
    }
    steps.push(Step::plain(
        StepKind::Verify,
        format!("verify: modes and {} logical GPUs read back", p.after.len()),
        vec![
            "amd-smi partition -c -m --json".into(),
            "amd-smi list --json".into(),
        ],
    ));
    if !p.stops.is_empty() {
        steps.push(relaunch_step(snap, &p.stops, &p.models));
    }
    add_balancer_steps(&mut steps, &p.balancers);
    if let Some(k) = &p.kubernetes {
        add_k8s_steps(&mut steps, k);
    }
    steps
}

/// On a Kubernetes node the pods holding the changed GPUs are moved through the cluster
/// (cordon, evict: `plan_k8s`), not stopped by pid (the kubelet would restart them on the same
/// GPU): they leave the stop list.
fn moved_through_the_cluster(
    snap: &Snapshot,
    stops: Vec<Stop>,
    changes: &[GpuChange],
    memory_change: bool,
    after: &[LayoutRow],
) -> (Vec<Stop>, Option<super::plan_k8s::KubeChange>) {
    let changed: Vec<super::plan_k8s::Changed> = changes
        .iter()
        .map(|c| (c.bdf.clone(), c.to.0, c.to.1))
        .collect();
    let kube = super::plan_k8s::change(snap, &changed, memory_change, after);
    let stops = stops
        .into_iter()
        .filter(|s| !super::plan_k8s::moved_with_pod(snap, s.pid, kube.as_ref()))
        .collect();
    (stops, kube)
}

/// Puts a Kubernetes node's steps (`plan_k8s`) into `all`: the cordon, evictions and taint
/// before the stop (or the wait for idle GPUs), the wait for the allocatable count, untaint
/// and uncordon right after the verify.
fn add_k8s_steps(all: &mut Vec<Step>, k: &super::plan_k8s::KubeChange) {
    let to_step =
        |s: super::plan_k8s::StepSpec| Step::plain(s.key, s.title, s.commands).limit(s.limit_secs);
    let (before, after) = super::plan_k8s::steps(k);
    let at = all
        .iter()
        .position(|s| matches!(s.key, StepKind::Stop | StepKind::WaitIdle))
        .unwrap_or(0);
    let n = before.len();
    for (i, s) in before.into_iter().enumerate() {
        all.insert(at + i, to_step(s));
    }
    let verify = all
        .iter()
        .skip(at + n)
        .position(|s| s.key == StepKind::Verify)
        .map_or(all.len(), |i| at + n + i + 1);
    for (i, s) in after.into_iter().enumerate() {
        all.insert(verify + i, to_step(s));
    }
}

/// The layout the compute steps start from. With a reload, the driver comes back in the
/// product's default compute mode for the new memory mode: the steps first wait for *that*
/// layout's count, then set the compute modes. Without one, the modes as they are now.
fn reloaded_targets(
    snap: &Snapshot,
    after_in: &[Target],
    target_m: Option<MemoryMode>,
) -> Vec<Target> {
    after_in
        .iter()
        .map(|(bdf, key, c_to, m_to, n)| {
            let now = snap.gpus.iter().find(|g| &g.bdf == bdf);
            let c = match target_m {
                Some(m) => key
                    .as_deref()
                    .and_then(product::by_key)
                    .map_or(*c_to, |p| p.default_compute_for(m)),
                None => now.and_then(|g| g.compute_partition).unwrap_or(*c_to),
            };
            (bdf.clone(), key.clone(), c, *m_to, *n)
        })
        .collect()
}

/// What does not come back, said before the confirmation (a discovered server outside the
/// registry has its own warning from `model_moves`).
fn not_restarted(snap: &Snapshot, stops: &[Stop]) -> Vec<String> {
    stops
        .iter()
        .filter(|s| {
            s.unit.is_none()
                && s.model.is_none()
                && !snap
                    .models
                    .iter()
                    .any(|m| m.spec.is_none() && m.pid == Some(s.pid))
        })
        .map(|s| format!(
            "{} (pid {}) is stopped and does NOT come back: partop restarts only systemd units and registered models; its owner (a scheduler, a person) must start it again",
            s.name, s.pid
        ))
        .collect()
}

impl From<super::replicas::ModelMove> for ModelMove {
    fn from(m: super::replicas::ModelMove) -> Self {
        Self {
            name: m.name,
            from: m.from,
            to: m.to,
            reason: m.reason,
            stop: m.stop,
            launch: m.launch,
        }
    }
}

/// Puts the load balancer steps into `steps`: the drain just before the stop (members leave
/// the upstream before they stop), the join just after the relaunch (they join once healthy).
/// Nothing when no balancer changes.
fn add_balancer_steps(steps: &mut Vec<Step>, changes: &[super::balancer::BalancerChange]) {
    use super::balancer::{DRAIN_STEP, JOIN_STEP, ports_text};
    if changes.is_empty() {
        return;
    }
    let cmds = |pick: fn(&super::balancer::BalancerChange) -> &Vec<super::balancer::Server>| {
        changes
            .iter()
            .flat_map(|c| {
                [
                    format!(
                        "write {} (servers in service: {})",
                        c.balancer.upstream,
                        ports_text(pick(c))
                    ),
                    super::text::shell_line(&c.balancer.reload),
                ]
            })
            .collect::<Vec<String>>()
    };
    let drain = Step::plain(
        DRAIN_STEP,
        "take the members that stop out of the load balancer's upstream, and reload it".into(),
        cmds(|c| &c.during),
    )
    .limit(60);
    let mut join_cmds = cmds(|c| &c.after);
    join_cmds.extend(changes.iter().map(|c| format!("GET {}", c.balancer.verify)));
    let join = Step::plain(
        JOIN_STEP,
        "put the healthy members into the load balancer's upstream, reload it, and verify a request through it".into(),
        join_cmds,
    )
    .limit(60);
    let at = steps.iter().position(|s| s.key == "stop").unwrap_or(0);
    steps.insert(at, drain);
    let after = steps
        .iter()
        .position(|s| s.key == "relaunch")
        .map_or(steps.len(), |i| i + 1);
    steps.insert(after, join);
}

/// The layout before and after, as a set's change names it (`SPX/NPS1`, `DPX/NPS2`): the
/// first changed GPU's modes.
fn layout_names(changes: &[GpuChange]) -> (String, String) {
    changes.first().map_or_else(
        || ("this layout".into(), "this layout".into()),
        |c| {
            let from = match c.from {
                (Some(a), Some(b)) => format!("{a}/{b}"),
                _ => "the current layout".into(),
            };
            (from, format!("{}/{}", c.to.0, c.to.1))
        },
    )
}

/// The stop step: models by their own stop, units by systemctl, the rest by SIGTERM.
fn stop_step(stops: &[Stop], models: &[ModelMove], grace_secs: u32) -> Step {
    let pids: Vec<String> = stops
        .iter()
        .filter(|s| s.unit.is_none())
        .filter(|s| {
            // Models with their own stop (unit, container, command) are not signalled.
            !models
                .iter()
                .any(|m| Some(&m.name) == s.model.as_ref() && !m.stop.starts_with("kill "))
        })
        .map(|s| s.pid.to_string())
        .collect();
    let units: Vec<String> = stops.iter().filter_map(|s| s.unit.clone()).collect();
    let mut commands: Vec<String> = models
        .iter()
        .filter(|m| !m.stop.is_empty() && !m.stop.starts_with("kill "))
        .map(|m| m.stop.clone())
        .collect();
    if !units.is_empty() {
        commands.push(format!("systemctl stop {}", units.join(" ")));
    }
    if !pids.is_empty() {
        commands.push(format!("kill -TERM {}", pids.join(" ")));
    }
    Step::plain(
        StepKind::Stop,
        format!(
            "stop {} process(es): SIGTERM, {grace_secs}s grace; SIGKILL only if confirmed",
            stops.len()
        ),
        commands,
    )
    .limit(grace_secs.saturating_add(10))
}

/// Set the memory mode, reload, and wait for the layout the reload gives (`cur`: every GPU at
/// the driver's default compute mode for memory mode `m`).
fn reload_steps(m: MemoryMode, reload: Reload, cur: &[Target]) -> Vec<Step> {
    let set = Step::amd_smi(
        StepKind::SetMemory,
        format!("set memory mode {m} on the whole hive (answers the Y/N prompt)"),
        vec![words(&format!("set -M {m}"))],
    );
    let step = match reload {
        Reload::InsideSetMemory => Step::amd_smi(
            StepKind::Reload,
            "the driver reloads inside `set -M` (ROCm 6.x)".to_string(),
            vec![],
        ),
        Reload::ResetReload => Step::amd_smi(
            StepKind::Reload,
            "reload the driver (answers the Y/N prompt)".to_string(),
            vec![words("reset -r")],
        ),
        Reload::Modprobe => Step::plain(
            StepKind::Reload,
            "reload the driver".to_string(),
            vec!["modprobe -r amdgpu && modprobe amdgpu".to_string()],
        ),
    };
    let rows = layout(cur);
    let mut modes: Vec<String> = cur.iter().map(|t| format!("{}", t.2)).collect();
    modes.dedup();
    let mut wait = Step::plain(
        StepKind::WaitGpus,
        format!(
            "wait until {} logical GPUs are back (the driver returns in {}/{m})",
            rows.len(),
            modes.join("+")
        ),
        vec!["amd-smi list --json".into()],
    )
    .limit(WAIT_GPUS_SECS);
    wait.count = u32::try_from(rows.len()).ok();
    vec![set, step.limit(WAIT_GPUS_SECS), wait]
}

/// The `set -C` steps: one per target mode, on primaries by their index in the layout current
/// when each runs (`cur`, updated as each step changes it).
fn compute_steps(
    snap: &Snapshot,
    changes: &[GpuChange],
    target_m: Option<MemoryMode>,
    before: &[LayoutRow],
    cur: &mut [Target],
    warnings: &mut Vec<String>,
) -> Vec<Step> {
    let compute_cmds = compute_to_set(snap, changes, target_m, warnings);
    let mut modes: Vec<ComputeMode> = Vec::new();
    for (_, m) in &compute_cmds {
        if !modes.contains(m) {
            modes.push(*m);
        }
    }
    let mut steps = Vec::new();
    for m in modes {
        let rows = if target_m.is_none() && cur_is_now(cur, snap) {
            before.to_vec()
        } else {
            layout(cur)
        };
        let mut ids = Vec::new();
        let mut bdfs = Vec::new();
        for (bdf, _) in compute_cmds.iter().filter(|(_, x)| *x == m) {
            if let Some(r) = rows.iter().find(|r| r.bdf == format!("{bdf}.0")) {
                ids.push(r.gpu_id.to_string());
                bdfs.push(bdf.clone());
            }
        }
        for t in cur.iter_mut() {
            if bdfs.contains(&t.0) {
                t.2 = m;
            }
        }
        let mut argv = vec!["set".to_string(), "-g".to_string()];
        argv.extend(ids.iter().cloned());
        argv.extend(["-C".to_string(), m.name().to_string()]);
        let mut step = Step::amd_smi(
            StepKind::SetCompute,
            format!(
                "set compute mode {m} on {} GPU(s) (primaries, by their index at that moment)",
                ids.len()
            ),
            vec![argv],
        )
        .limit(WAIT_GPUS_SECS);
        step.bdfs = bdfs;
        steps.push(step);
    }
    steps
}

/// The GPUs whose compute mode a step must set, and to what. With a reload only those whose
/// target is not the driver's default need one, and the operator is told why.
fn compute_to_set(
    snap: &Snapshot,
    changes: &[GpuChange],
    target_m: Option<MemoryMode>,
    warnings: &mut Vec<String>,
) -> Vec<(String, ComputeMode)> {
    let mut compute_cmds: Vec<(String, ComputeMode)> = Vec::new();
    let mut reset_again = Vec::new();
    for c in changes {
        let needed = match target_m {
            Some(m) => {
                let default = snap
                    .gpus
                    .iter()
                    .find(|g| g.bdf == c.bdf)
                    .and_then(|g| g.product_key.as_deref())
                    .and_then(product::by_key)
                    .map(|p| p.default_compute_for(m));
                let needed = default != Some(c.to.0);
                if needed {
                    reset_again.push((c.bdf.clone(), c.to.0));
                }
                needed
            }
            None => c.from.0 != Some(c.to.0),
        };
        if needed {
            compute_cmds.push((c.bdf.clone(), c.to.0));
        }
    }
    if let Some((_, m)) = reset_again.first() {
        let which = if reset_again.len() == snap.gpus.len() {
            "every GPU".to_string()
        } else {
            reset_again
                .iter()
                .map(|(b, _)| b.clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let what = if reset_again.iter().all(|(_, x)| x == m) {
            format!("{m}")
        } else {
            "each GPU's planned compute mode".into()
        };
        warnings.push(format!("after the reload the compute mode returns to the default; partop sets {what} again on {which}"));
    }
    compute_cmds
}

/// Start again what was stopped: units, then registered models on their planned logical GPUs.
fn relaunch_step(snap: &Snapshot, stops: &[Stop], models: &[ModelMove]) -> Step {
    let units: Vec<String> = stops.iter().filter_map(|s| s.unit.clone()).collect();
    let mut commands: Vec<String> = if units.is_empty() {
        vec![]
    } else {
        vec![format!("systemctl start {}", units.join(" "))]
    };
    let going: Vec<&ModelMove> = models.iter().filter(|m| !m.to.is_empty()).collect();
    commands.extend(going.iter().map(|m| m.launch.clone()));
    // The longest health timeout of the models it waits for (they are waited for in turn).
    let limit: u64 = going
        .iter()
        .filter_map(|m| snap.models.iter().find(|s| s.name == m.name))
        .filter_map(|s| s.spec.as_ref())
        .map(|s| s.health_timeout_secs)
        .sum();
    let step = Step::plain(
        StepKind::Relaunch,
        format!(
            "start again what was stopped: {} agent unit(s), {} served model(s) on their new logical GPUs, then wait for their /health",
            units.len(),
            going.len()
        ),
        commands,
    );
    if limit > 0 {
        step.limit(u32::try_from(limit).unwrap_or(u32::MAX))
    } else {
        step
    }
}

/// Where each registered model that the plan stops goes in the new layout. Logical GPUs held by
/// what keeps running are taken; a model that fits nowhere is said so, before confirmation.
fn model_moves(
    snap: &Snapshot,
    stops: &[Stop],
    before: &[LayoutRow],
    after: &[LayoutRow],
    warnings: &mut Vec<String>,
) -> Vec<ModelMove> {
    use super::placement::{Need, gb_to_mb, place};
    let stopped = |pid: Option<u32>| pid.is_some_and(|p| stops.iter().any(|s| s.pid == p));
    let taken: Vec<String> = snap
        .processes
        .iter()
        .filter(|p| !stopped(Some(p.pid)))
        .flat_map(|p| p.gpus.iter().filter(|u| !u.attached_only()))
        .filter_map(|u| before.iter().find(|r| r.gpu_id == u.gpu_id))
        .map(|r| r.bdf.clone())
        .collect();
    // Replica set members are placed as their set ([`super::replicas::plan_sets`]).
    let movers: Vec<&super::model_status::ServedModel> = snap
        .models
        .iter()
        .filter(|m| m.spec.as_ref().is_some_and(|s| s.member.is_none()) && stopped(m.pid))
        .collect();
    for m in snap
        .models
        .iter()
        .filter(|m| m.spec.is_none() && stopped(m.pid))
    {
        warnings.push(format!(
            "{} (pid {}) serves {} but is not in the model registry: it is stopped and NOT relaunched; add it to models.toml first (Models view, `a`)",
            m.name,
            m.pid.unwrap_or(0),
            m.model
        ));
    }
    let needs: Vec<Need> = movers
        .iter()
        .filter_map(|m| {
            let s = m.spec.as_ref()?;
            Some(Need {
                name: m.name.clone(),
                want: s.want.clone(),
                mem_mb: gb_to_mb(s.memory_gb),
                tp: s.tensor_parallel,
                prefer: m.bdfs.clone(),
            })
        })
        .collect();
    let placed = place(&needs, after, &taken);
    movers
        .iter()
        .zip(placed)
        .filter_map(|(m, p)| {
            let s = m.spec.as_ref()?;
            let ids: Vec<u32> = p.to.iter().map(|r| r.gpu_id).collect();
            let bdfs: Vec<String> = p.to.iter().map(|r| r.bdf.clone()).collect();
            if let Some(r) = &p.reason {
                warnings.push(format!(
                    "model {} does not fit the staged layout ({r}): it will be stopped and NOT relaunched",
                    m.name
                ));
            }
            Some(ModelMove {
                name: m.name.clone(),
                from: m.bdfs.clone(),
                stop: s.stop_text(&m.gpus, &m.bdfs, m.pid),
                launch: if ids.is_empty() {
                    String::new()
                } else {
                    s.launch_text(&ids, &bdfs)
                },
                to: p.to,
                reason: p.reason,
            })
        })
        .collect()
}

/// What differs between a plan and the same plan made again now, in words (why an apply
/// refuses a plan the node no longer matches).
pub fn differences(was: &Plan, now: &Plan) -> Vec<String> {
    let mut d = Vec::new();
    let pids = |p: &Plan| -> Vec<(u32, Option<u64>, String)> {
        p.stops
            .iter()
            .map(|s| (s.pid, s.start_ticks, s.name.clone()))
            .collect()
    };
    let (a, b) = (pids(was), pids(now));
    for s in a.iter().filter(|x| !b.contains(x)) {
        d.push(format!("pid {} ({}) is no longer to stop", s.0, s.2));
    }
    for s in b.iter().filter(|x| !a.contains(x)) {
        d.push(format!("pid {} ({}) now holds an affected GPU", s.0, s.2));
    }
    if was.changes != now.changes {
        d.push("the GPUs' modes are not what they were".into());
    }
    if was.before != now.before {
        d.push("the logical GPUs are not what they were".into());
    }
    if was.models != now.models {
        d.push("the served models or where they go changed".into());
    }
    if d.is_empty() && was.stops != now.stops {
        for (x, y) in was.stops.iter().zip(&now.stops) {
            if x.gpus != y.gpus {
                d.push(format!(
                    "pid {} holds GPUs {:?} now, {:?} then",
                    x.pid, y.gpus, x.gpus
                ));
            }
            if x.model != y.model {
                d.push(format!(
                    "pid {} serves registered model {:?} now, {:?} then",
                    x.pid, y.model, x.model
                ));
            }
            if x.unit != y.unit || x.agent != y.agent {
                d.push(format!(
                    "pid {} is a unit or node agent now, not then (or the reverse)",
                    x.pid
                ));
            }
        }
    }
    if d.is_empty() && (was.steps != now.steps || was.warnings != now.warnings) {
        d.push("the steps or warnings differ".into());
    }
    if d.is_empty() {
        d.push("processes or modes differ".into());
    }
    d
}
