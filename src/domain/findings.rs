//! Findings: trouble worth an operator's attention, each saying what was seen and for how long.
//! Pure: fed one snapshot at a time, it keeps only the "since when" state it needs.
//!
//! - Noisy neighbour: on a physical GPU split into partitions that share an HBM (NPS) domain, one
//!   partition runs hot (GFX >= 90%) while the device's memory controller is saturated
//!   (UMC >= 80%) and a sibling in the same domain is doing work. Partitions in separate NPS
//!   domains do not compete for bandwidth, so they are not flagged.
//! - Idle partition: a logical GPU holding VRAM with GFX below 1% for the idle time.
//! - Partition mismatch: a physical GPU whose logical GPU count differs from what its compute
//!   mode gives (CPX on an 8-XCD device is 8), named with both counts.
//! - Unlisted holder: a process holding a GPU's device files that amd-smi does not list
//!   (needs the /proc holder scan; reported when the snapshot carries holder data).
//!
//! - Device plugin out of date (Kubernetes): the kubelet's allocatable count of an AMD resource
//!   differs from the kernel's logical GPUs, named with the resource, both counts and the fix.
//! - Reclaimable partition: a held partition (by a pod, else a process or model) whose GFX busy
//!   averaged over the window stayed at or under the threshold, held longer than the minimum
//!   age (the HPE reclaim scheduler plugin's rule; default 0 % over an hour).
//!
//! Every finding on a logical GPU names who holds it (pid, name, the model it serves and its
//! pod where known) and what to do, so the header badge, the Findings view, `partop snapshot`
//! and `/snapshot` all say the same whole sentence.

use super::snapshot::{GpuUse, LogicalGpu, PhysicalGpu, Snapshot};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// How bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing.
    Info,
    /// Costs capacity or latency.
    Warn,
}

/// What kind of trouble.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A partition starving its siblings of shared bandwidth.
    NoisyNeighbour,
    /// Memory held, nothing done.
    IdlePartition,
    /// A process holds GPU device files but amd-smi does not list it (it still blocks reloads).
    UnlistedHolder,
    /// A physical GPU shows another number of logical GPUs than its compute mode gives: a
    /// partition that failed to come up, or a change applied halfway.
    PartitionMismatch,
    /// A process holds /dev/kfd and uses no GPU (an agent, a HIP runtime idling): it blocks
    /// driver reloads, so a repartition must stop it, whoever lists it.
    KfdOnlyHolder,
    /// Processes hold GPUs but permissions hide them (or their files) from this user.
    HiddenHolders,
    /// The kubelet advertises another count of an AMD resource than the kernel's logical GPUs.
    PluginDrift,
    /// A held partition idle over the reclaim window.
    Reclaimable,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Kind.
    pub kind: Kind,
    /// Severity.
    pub severity: Severity,
    /// The logical GPU's identity (BDF with partition function).
    pub subject: String,
    /// The amd-smi index at the time.
    pub gpu_id: u32,
    /// What was seen.
    pub saw: String,
    /// Since when (ms since epoch).
    pub since_ms: u64,
}

impl Kind {
    /// The kind in a few words (the Findings view, the header badge, `partop snapshot`).
    pub const fn label(self) -> &'static str {
        match self {
            Self::NoisyNeighbour => "noisy neighbour",
            Self::IdlePartition => "idle partition",
            Self::UnlistedHolder => "holder amd-smi does not list",
            Self::PartitionMismatch => "partitions missing",
            Self::KfdOnlyHolder => "holds /dev/kfd only",
            Self::HiddenHolders => "hidden from this user",
            Self::PluginDrift => "device plugin out of date",
            Self::Reclaimable => "reclaimable partition",
        }
    }

    /// It names a process (or the node), not a logical GPU.
    pub const fn about_a_process(self) -> bool {
        matches!(
            self,
            Self::UnlistedHolder | Self::KfdOnlyHolder | Self::HiddenHolders | Self::PluginDrift
        )
    }
}

impl Finding {
    /// The node itself is wrong (a partition missing): said in the critical style, before any
    /// source error.
    pub fn critical(&self) -> bool {
        self.kind == Kind::PartitionMismatch
    }

    /// Where, in a few words: `noisy neighbour on GPU 3`, `holds /dev/kfd only: pid 77`.
    pub fn headline(&self) -> String {
        if self.kind.about_a_process() {
            format!("{}: {}", self.kind.label(), self.subject)
        } else if self.kind == Kind::PartitionMismatch {
            format!("{} on {}", self.kind.label(), self.subject)
        } else {
            format!("{} on GPU {}", self.kind.label(), self.gpu_id)
        }
    }
}

/// The findings in the order to say them: critical before warn before info, then the oldest.
pub fn by_urgency(findings: &[Finding]) -> Vec<&Finding> {
    let mut v: Vec<&Finding> = findings.iter().collect();
    v.sort_by_key(|f| (!f.critical(), std::cmp::Reverse(f.severity), f.since_ms));
    v
}

/// The finding to say first (the header badge).
pub fn worst(findings: &[Finding]) -> Option<&Finding> {
    by_urgency(findings).first().copied()
}

/// Who works on logical GPU `gpu_id`, in words: `pid 4242 python3 (model qwen-32b, pod 1f2e…)`
/// for each process using it (memory or compute units), the model it serves and its
/// Kubernetes pod where known; `None` when no process is seen on it.
pub fn holders_of(snap: &Snapshot, gpu_id: u32) -> Option<String> {
    let named: Vec<String> = snap
        .processes
        .iter()
        .filter(|p| {
            p.gpus
                .iter()
                .any(|u| u.gpu_id == gpu_id && !u.attached_only())
        })
        .map(|p| holder(snap, p))
        .collect();
    (!named.is_empty()).then(|| named.join(", "))
}

/// One process in words: pid, name, and in brackets the model it serves and its pod.
fn holder(snap: &Snapshot, p: &super::snapshot::Process) -> String {
    let name = super::text::escape_controls(p.name.as_deref().unwrap_or("?")).into_owned();
    let mut about = Vec::new();
    if let Some(m) = snap.models.iter().find(|m| m.pid == Some(p.pid)) {
        about.push(format!("model {}", super::text::escape_controls(&m.name)));
    }
    if let Some(pod) = &p.k8s_pod_uid {
        about.push(format!("pod {}", super::text::escape_controls(pod)));
    }
    if about.is_empty() {
        format!("pid {} {name}", p.pid)
    } else {
        format!("pid {} {name} ({})", p.pid, about.join(", "))
    }
}

/// A process holding device files in a few words: the agent it is, else its name, and its pod
/// where known.
fn process_words(p: &super::snapshot::Process) -> String {
    let what = p
        .agent
        .clone()
        .unwrap_or_else(|| p.name.clone().unwrap_or_else(|| "a process".into()));
    let what = super::text::escape_controls(&what).into_owned();
    match &p.k8s_pod_uid {
        Some(pod) => format!("{what} (pod {})", super::text::escape_controls(pod)),
        None => what,
    }
}

/// "GPU 3 is held by pid 4242 python3 (model m)", or why no holder is named.
fn held_by(snap: &Snapshot, gpu_id: u32) -> String {
    holders_of(snap, gpu_id).map_or_else(
        || format!("GPU {gpu_id} shows no process (one hidden from this user, or memory an exited one left)"),
        |h| format!("GPU {gpu_id} is held by {h}"),
    )
}

/// Thresholds (from config).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Idle this long before it is a finding.
    pub idle_after_ms: u64,
    /// VRAM above this counts as "held".
    pub idle_vram_bytes: u64,
    /// GFX busy that counts as hot.
    pub hot_busy: f64,
    /// Device UMC busy that counts as saturated.
    pub hot_umc: f64,
    /// Hot this long before it is a finding.
    pub hot_after_ms: u64,
    /// A sibling busier than this is "doing work".
    pub sibling_active: f64,
    /// Reclaimable: GFX busy averaged over the window at or under this, percent.
    pub reclaim_busy: f64,
    /// Reclaimable: the window the busy is averaged over.
    pub reclaim_window_ms: u64,
    /// Reclaimable: held at least this long.
    pub reclaim_min_age_ms: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            idle_after_ms: 10 * 60 * 1000,
            idle_vram_bytes: 2 << 30,
            hot_busy: 90.0,
            hot_umc: 80.0,
            hot_after_ms: 30 * 1000,
            sibling_active: 5.0,
            reclaim_busy: 0.0,
            reclaim_window_ms: 60 * 60 * 1000,
            reclaim_min_age_ms: 60 * 60 * 1000,
        }
    }
}

/// Remembers since when each condition holds.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    /// Thresholds in force.
    pub thresholds: Thresholds,
    idle_since: HashMap<String, u64>,
    hot_since: HashMap<String, u64>,
    unlisted_since: HashMap<u32, u64>,
    mismatch_since: HashMap<String, u64>,
    /// Per held partition: when it was first seen held, and its busy samples in the window.
    held: HashMap<String, (u64, std::collections::VecDeque<(u64, f64)>)>,
    drift_since: HashMap<String, u64>,
}

/// "12m 5s", "40s".
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

fn gib(b: u64) -> String {
    format!("{} GiB", super::text::gib(b))
}

fn shares_domain(a: &LogicalGpu, b: &LogicalGpu) -> bool {
    // Unknown layout: assume shared (NPS1 is the common case and the safe guess).
    a.memory_domains.is_empty()
        || b.memory_domains.is_empty()
        || a.memory_domains
            .iter()
            .any(|d| b.memory_domains.contains(d))
}

impl Tracker {
    /// A tracker with thresholds.
    pub fn new(thresholds: Thresholds) -> Self {
        Self {
            thresholds,
            ..Self::default()
        }
    }

    /// Takes in one snapshot; returns the findings that hold now.
    pub fn observe(&mut self, snap: &Snapshot) -> Vec<Finding> {
        let now = snap.taken_at_ms;
        let t = self.thresholds;
        let mut out = self.mismatches(snap);
        out.extend(self.drift(snap));
        out.extend(self.reclaimable(snap));
        let mut seen_idle = Vec::new();
        let mut seen_hot = Vec::new();
        for g in &snap.gpus {
            let umc = g
                .partitions
                .iter()
                .find(|l| l.is_primary())
                .and_then(|l| l.umc_busy_percent);
            for l in &g.partitions {
                let busy = l.gfx_busy_percent;
                // Idle: memory held beyond the driver's own reservation, no GFX work.
                if let (Some(b), Some(v)) = (busy, l.vram_used_bytes)
                    && b < 1.0
                    && v >= t.idle_vram_bytes
                {
                    let since = *self.idle_since.entry(l.bdf.clone()).or_insert(now);
                    seen_idle.push(l.bdf.clone());
                    if now.saturating_sub(since) >= t.idle_after_ms {
                        out.push(Finding {
                            kind: Kind::IdlePartition,
                            severity: Severity::Info,
                            subject: l.bdf.clone(),
                            gpu_id: l.gpu_id,
                            saw: format!(
                                "holds {} with GFX busy below 1% for {}; {}. If its work is done, stop it (`partop kill PID`, or K in Processes) to give the partition to a job that waits",
                                gib(v),
                                duration(now - since),
                                held_by(snap, l.gpu_id)
                            ),
                            since_ms: since,
                        });
                    }
                }
                if let Some(f) = self.hot(g, l, umc, now, &mut seen_hot, snap) {
                    out.push(f);
                }
            }
        }
        self.idle_since.retain(|k, _| seen_idle.contains(k));
        self.hot_since.retain(|k, _| seen_hot.contains(k));
        let mut seen_pids = Vec::new();
        // "amd-smi does not list it" means something only where amd-smi's process list was read
        // (not with --source sysfs).
        let amdsmi_lists = snap.amdsmi_lists_processes();
        for p in snap.processes.iter().filter(|_| amdsmi_lists) {
            let nodes = p.gpus.iter().filter(|u| u.render_open).count();
            if p.listed_by_amdsmi || (!p.holds_kfd && nodes == 0) {
                continue;
            }
            let since = *self.unlisted_since.entry(p.pid).or_insert(now);
            seen_pids.push(p.pid);
            let what = process_words(p);
            let holds = match (p.holds_kfd, nodes) {
                (true, 0) => "/dev/kfd (every GPU)".to_string(),
                (true, n) => format!("/dev/kfd and {n} render node(s)"),
                (false, n) => format!("{n} render node(s)"),
            };
            out.push(Finding {
                kind: Kind::UnlistedHolder,
                severity: if p.agent.is_some() { Severity::Info } else { Severity::Warn },
                subject: format!("pid {}", p.pid),
                gpu_id: p.gpus.first().map_or(0, |u| u.gpu_id),
                saw: format!("pid {} {what} holds {holds} but amd-smi does not list it; it blocks driver reloads and partition changes until it stops ({})", p.pid, duration(now - since)),
                since_ms: since,
            });
        }
        // Holding /dev/kfd alone is a stop in every repartition plan: it is said whether or not
        // amd-smi lists it (an unlisted one was said above).
        for p in &snap.processes {
            let kfd_only = p.holds_kfd && p.gpus.iter().all(GpuUse::attached_only);
            if !kfd_only || seen_pids.contains(&p.pid) {
                continue;
            }
            let since = *self.unlisted_since.entry(p.pid).or_insert(now);
            seen_pids.push(p.pid);
            let what = process_words(p);
            out.push(Finding {
                kind: Kind::KfdOnlyHolder,
                severity: Severity::Info,
                subject: format!("pid {}", p.pid),
                gpu_id: p.gpus.first().map_or(0, |u| u.gpu_id),
                saw: format!("pid {} {what} holds /dev/kfd (every GPU) and uses no GPU memory; it blocks driver reloads and partition changes, so a repartition stops it ({})", p.pid, duration(now - since)),
                since_ms: since,
            });
        }
        self.unlisted_since.retain(|k, _| seen_pids.contains(k));
        if let Some(h) = snap.hidden.as_ref().filter(|h| h.processes > 0) {
            out.push(Finding {
                kind: Kind::HiddenHolders,
                severity: Severity::Warn,
                subject: "node".into(),
                gpu_id: 0,
                saw: h.describe(),
                since_ms: now,
            });
        }
        out
    }

    /// The kubelet's allocatable count of an AMD resource against the kernel's.
    fn drift(&mut self, snap: &Snapshot) -> Vec<Finding> {
        let now = snap.taken_at_ms;
        let unmatched = snap
            .kubelet
            .as_ref()
            .map(|k| {
                k.unmatched
                    .iter()
                    .filter(|u| u.contains("amdgpu_xcp"))
                    .count()
            })
            .unwrap_or(0);
        let out: Vec<Finding> = super::k8s::drift(snap)
            .into_iter()
            .map(|d| {
                let since = *self.drift_since.entry(d.resource.clone()).or_insert(now);
                let why = if d.kubelet < d.kernel && unmatched > 0 {
                    format!(
                        "the device plugin misses partitions ({unmatched} allocated amdgpu_xcp id(s) name no partition here: a kernel that names them amdgpu_xcp.N)"
                    )
                } else {
                    "the device plugin did not re-register after the partition change".to_string()
                };
                Finding {
                    kind: Kind::PluginDrift,
                    severity: Severity::Warn,
                    subject: super::text::escape_controls(&d.resource).into_owned(),
                    gpu_id: 0,
                    saw: format!(
                        "the kubelet advertises {} {} but the kernel has {} logical GPU(s) of it: {why}; pods are scheduled against the wrong count. Restart the device-plugin pod on this node (`kubectl -n <its namespace> delete pod <device-plugin pod on this node>`: its DaemonSet starts it again and it registers what the kernel has) ({})",
                        d.kubelet,
                        super::text::escape_controls(&d.resource),
                        d.kernel,
                        duration(now.saturating_sub(since))
                    ),
                    since_ms: since,
                }
            })
            .collect();
        self.drift_since
            .retain(|k, _| out.iter().any(|f| &f.subject == k));
        out
    }

    /// Held partitions whose busy, averaged over the window, stayed at or under the threshold.
    fn reclaimable(&mut self, snap: &Snapshot) -> Vec<Finding> {
        let now = snap.taken_at_ms;
        let t = self.thresholds;
        let mut out = Vec::new();
        let mut seen = Vec::new();
        for l in snap.gpus.iter().flat_map(|g| &g.partitions) {
            let holders: Vec<&super::snapshot::Process> = snap
                .processes
                .iter()
                .filter(|p| {
                    p.gpus
                        .iter()
                        .any(|u| u.gpu_id == l.gpu_id && !u.attached_only())
                })
                .collect();
            let (Some(busy), true) = (
                l.gfx_busy_percent,
                !l.pods.is_empty() || !holders.is_empty(),
            ) else {
                continue;
            };
            seen.push(l.bdf.clone());
            let (first, samples) = self
                .held
                .entry(l.bdf.clone())
                .or_insert_with(|| (now, std::collections::VecDeque::new()));
            samples.push_back((now, busy));
            while samples
                .front()
                .is_some_and(|(at, _)| now.saturating_sub(*at) > t.reclaim_window_ms)
            {
                samples.pop_front();
            }
            // The whole window must have been watched: an average of a minute is not an hour's.
            if now.saturating_sub(*first) < t.reclaim_window_ms || samples.is_empty() {
                continue;
            }
            #[expect(clippy::cast_precision_loss, reason = "a count of samples")]
            let avg = samples.iter().map(|(_, b)| b).sum::<f64>() / samples.len() as f64;
            if avg > t.reclaim_busy + 1e-9 {
                continue;
            }
            // Held since the oldest holder started (or since partop first saw it held).
            let since = holders
                .iter()
                .filter_map(|p| p.started_at_ms)
                .min()
                .unwrap_or(*first)
                .min(*first);
            let age = now.saturating_sub(since);
            if age < t.reclaim_min_age_ms {
                continue;
            }
            let memory = l.vram_used_bytes.map_or_else(
                || "memory N/A".to_string(),
                |v| format!("{} of memory", gib(v)),
            );
            let who = if l.pods.is_empty() {
                format!(
                    "{}; stop it (K in Processes, or `partop models stop NAME` for a model) to give the partition to a job that waits",
                    held_by(snap, l.gpu_id)
                )
            } else {
                let pods: Vec<String> = l
                    .pods
                    .iter()
                    .map(|p| {
                        format!(
                            "pod {} (container {}, {}; {})",
                            super::text::escape_controls(&p.label()),
                            super::text::escape_controls(&p.container),
                            super::text::escape_controls(&p.resource),
                            match p.priority_class.as_deref() {
                                None => "priority class not known: PodResources does not carry it and the API server did not say".to_string(),
                                Some("") => "no priority class: the cluster's default priority".to_string(),
                                Some(c) => format!("priority class {}", super::text::escape_controls(c)),
                            }
                        )
                    })
                    .collect();
                format!(
                    "GPU {} is allocated to {}; evict it through the Eviction API to give the partition back (it honours the pod's PodDisruptionBudget; `kubectl -n {} delete pod {}` does not)",
                    l.gpu_id,
                    pods.join(", "),
                    super::text::escape_controls(&l.pods[0].namespace),
                    super::text::escape_controls(&l.pods[0].pod)
                )
            };
            out.push(Finding {
                kind: Kind::Reclaimable,
                severity: Severity::Info,
                subject: l.bdf.clone(),
                gpu_id: l.gpu_id,
                saw: format!(
                    "holds {memory} with GFX busy averaging {avg:.1}% (at most {:.1}%) over the last {}, held for {}; {who}",
                    t.reclaim_busy,
                    duration(t.reclaim_window_ms),
                    duration(age)
                ),
                since_ms: since,
            });
        }
        self.held.retain(|k, _| seen.contains(k));
        out
    }

    /// Physical GPUs whose logical GPU count is not what their compute mode gives.
    fn mismatches(&mut self, snap: &Snapshot) -> Vec<Finding> {
        let now = snap.taken_at_ms;
        let mut out = Vec::new();
        for g in &snap.gpus {
            let (Some(c), Some(xcds)) = (g.compute_partition, g.xcd_count) else {
                continue;
            };
            let want = c.partitions(xcds) as usize;
            let have = g.partitions.len();
            if have == want {
                continue;
            }
            let since = *self.mismatch_since.entry(g.bdf.clone()).or_insert(now);
            let missing: Vec<String> = (0..u32::try_from(want).unwrap_or(0))
                .filter(|p| !g.partitions.iter().any(|l| l.partition_id == *p))
                .map(|p| p.to_string())
                .collect();
            out.push(Finding {
                kind: Kind::PartitionMismatch,
                severity: Severity::Warn,
                subject: g.bdf.clone(),
                gpu_id: g.partitions.first().map_or(0, |l| l.gpu_id),
                saw: format!(
                    "GPU {} is in {c} ({want} logical GPUs) but {have} {} present{}: a partition failed to come up or a change was applied halfway; re-apply the layout or reload the driver ({})",
                    g.bdf,
                    if have == 1 { "is" } else { "are" },
                    if missing.is_empty() {
                        String::new()
                    } else {
                        format!(", missing partition {}", missing.join(", "))
                    },
                    duration(now.saturating_sub(since))
                ),
                since_ms: since,
            });
        }
        self.mismatch_since
            .retain(|k, _| out.iter().any(|f| &f.subject == k));
        out
    }

    fn hot(
        &mut self,
        g: &PhysicalGpu,
        l: &LogicalGpu,
        umc: Option<f64>,
        now: u64,
        seen: &mut Vec<String>,
        snap: &Snapshot,
    ) -> Option<Finding> {
        let models = &snap.models;
        let t = self.thresholds;
        if g.partitions.len() < 2 || l.gfx_busy_percent? < t.hot_busy || umc? < t.hot_umc {
            return None;
        }
        let victims: Vec<&LogicalGpu> = g
            .partitions
            .iter()
            .filter(|s| s.bdf != l.bdf && shares_domain(l, s))
            .filter(|s| s.gfx_busy_percent.is_some_and(|b| b >= t.sibling_active))
            .collect();
        if victims.is_empty() {
            return None;
        }
        let since = *self.hot_since.entry(l.bdf.clone()).or_insert(now);
        seen.push(l.bdf.clone());
        if now.saturating_sub(since) < t.hot_after_ms {
            return None;
        }
        // A sibling serving a model says what it costs: its queue (from the model's /metrics).
        let names: Vec<String> = victims
            .iter()
            .map(|v| {
                match models
                    .iter()
                    .find(|m| m.gpus.contains(&v.gpu_id) && m.waiting.is_some())
                {
                    Some(m) => format!(
                        "GPU {} (model {}: {:.0} request(s) waiting)",
                        v.gpu_id,
                        m.name,
                        m.waiting.unwrap_or(0.0)
                    ),
                    None => format!("GPU {}", v.gpu_id),
                }
            })
            .collect();
        Some(Finding {
            kind: Kind::NoisyNeighbour,
            severity: Severity::Warn,
            subject: l.bdf.clone(),
            gpu_id: l.gpu_id,
            saw: format!(
                "GFX {:.0}% with the device's HBM bandwidth at {:.0}% for {}, sharing its memory domain with busy {}; {}. Move it or its neighbour to a partition in another memory domain (a finer NPS mode keeps them apart), or limit it",
                l.gfx_busy_percent.unwrap_or(0.0),
                umc.unwrap_or(0.0),
                duration(now - since),
                names.join(", "),
                held_by(snap, l.gpu_id)
            ),
            since_ms: since,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::snapshot::{LogicalGpu, PhysicalGpu};

    fn node(busy: [f64; 2], umc: f64, domains: [u32; 2], vram: u64, at: u64) -> Snapshot {
        let l = |i: u32| LogicalGpu {
            gpu_id: i,
            partition_id: i,
            bdf: format!("0000:05:00.{i}"),
            gfx_busy_percent: Some(busy[i as usize]),
            umc_busy_percent: (i == 0).then_some(umc),
            vram_used_bytes: Some(vram),
            memory_domains: vec![domains[i as usize]],
            ..LogicalGpu::default()
        };
        Snapshot {
            taken_at_ms: at,
            gpus: vec![PhysicalGpu {
                bdf: "0000:05:00".into(),
                partitions: vec![l(0), l(1)],
                ..PhysicalGpu::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_gpu_with_fewer_partitions_than_its_mode_gives_is_a_finding() {
        let mut n = node([10.0, 10.0], 10.0, [0, 1], 0, 1000);
        n.gpus[0].compute_partition = Some(crate::domain::ComputeMode::Cpx);
        n.gpus[0].xcd_count = Some(8);
        let f = Tracker::default().observe(&n);
        let m: Vec<&Finding> = f
            .iter()
            .filter(|f| f.kind == Kind::PartitionMismatch)
            .collect();
        assert_eq!(m.len(), 1, "{f:?}");
        assert!(
            m[0].saw.contains("CPX (8 logical GPUs) but 2 are present")
                && m[0].saw.contains("missing partition 2, 3, 4, 5, 6, 7"),
            "{}",
            m[0].saw
        );
        n.gpus[0].compute_partition = Some(crate::domain::ComputeMode::Dpx);
        assert!(
            Tracker::default()
                .observe(&n)
                .iter()
                .all(|f| f.kind != Kind::PartitionMismatch)
        );
    }

    #[test]
    fn noisy_neighbour_needs_shared_domain_and_time() {
        let mut t = Tracker::default();
        assert!(
            t.observe(&node([30.0, 99.0], 88.0, [0, 0], 0, 0))
                .is_empty(),
            "not yet 30 s"
        );
        let f = t.observe(&node([30.0, 99.0], 88.0, [0, 0], 0, 45_000));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, Kind::NoisyNeighbour);
        assert_eq!(f[0].gpu_id, 1);
        assert!(
            f[0].saw.contains("for 45s") && f[0].saw.contains("GPU 0"),
            "{}",
            f[0].saw
        );
        // Separate NPS domains: no contention for bandwidth.
        let mut t = Tracker::default();
        t.observe(&node([30.0, 99.0], 88.0, [0, 1], 0, 0));
        assert!(
            t.observe(&node([30.0, 99.0], 88.0, [0, 1], 0, 60_000))
                .is_empty()
        );
        // It resets when the condition stops.
        let mut t = Tracker::default();
        t.observe(&node([30.0, 99.0], 88.0, [0, 0], 0, 0));
        t.observe(&node([30.0, 50.0], 40.0, [0, 0], 0, 10_000));
        assert!(
            t.observe(&node([30.0, 99.0], 88.0, [0, 0], 0, 40_000))
                .is_empty()
        );
    }

    #[test]
    fn noisy_neighbour_names_the_siblings_model_queue() {
        let mut t = Tracker::default();
        let with_model = |at| {
            let mut n = node([30.0, 99.0], 88.0, [0, 0], 0, at);
            n.models = vec![crate::domain::model_status::ServedModel {
                name: "qwen-32b".into(),
                model: "Qwen/Qwen2.5-32B-Instruct".into(),
                server: Some("vllm".into()),
                spec: None,
                pid: Some(7),
                start_ticks: None,
                gpus: vec![0],
                bdfs: vec![],
                port: None,
                state: crate::domain::model_status::ModelState::Healthy,
                reason: None,
                running: Some(4.0),
                waiting: Some(12.0),
                kv_cache: None,
                tokens_per_sec: None,
                restarts: 0,
                log: None,
                log_tail: vec![],
                probed_ms: None,
                latency: None,
            }];
            n
        };
        t.observe(&with_model(0));
        let f = t.observe(&with_model(45_000));
        assert!(
            f[0].saw
                .contains("GPU 0 (model qwen-32b: 12 request(s) waiting)"),
            "{}",
            f[0].saw
        );
    }

    #[test]
    fn an_unlisted_holder_only_where_amd_smi_lists_processes() {
        use crate::domain::snapshot::{Health, Process, SourceStatus};
        let mut n = node([0.0, 0.0], 0.0, [0, 0], 0, 1_000);
        n.processes = vec![Process {
            pid: 77,
            name: Some("gpuagent".into()),
            holds_kfd: true,
            agent: Some("AMD GPU agent".into()),
            ..Process::default()
        }];
        // --source sysfs: no amd-smi process list, so nothing to be missing from; holding
        // /dev/kfd alone is still said (issue 28: it is a stop in every plan).
        let f = Tracker::default().observe(&n);
        assert!(f.iter().all(|f| f.kind != Kind::UnlistedHolder));
        assert_eq!(
            f.iter().map(|f| f.kind).collect::<Vec<_>>(),
            vec![Kind::KfdOnlyHolder]
        );
        n.sources = vec![SourceStatus {
            name: "amd-smi process".into(),
            version: None,
            status: Health::Ok,
            error: None,
            last_ok_ms: Some(1_000),
            took_ms: None,
            cadence: None,
        }];
        let f = Tracker::default().observe(&n);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, Kind::UnlistedHolder);
        assert_eq!(f[0].severity, Severity::Info, "an agent is information");
        assert!(
            f[0].saw
                .contains("holds /dev/kfd (every GPU) but amd-smi does not list it"),
            "{}",
            f[0].saw
        );
    }

    #[test]
    fn idle_partition_after_the_idle_time() {
        let mut t = Tracker::new(Thresholds {
            idle_after_ms: 60_000,
            ..Thresholds::default()
        });
        assert!(
            t.observe(&node([0.0, 0.0], 0.0, [0, 1], 70 << 30, 0))
                .is_empty()
        );
        let f = t.observe(&node([0.0, 0.0], 0.0, [0, 1], 70 << 30, 125_000));
        assert_eq!(f.len(), 2);
        assert!(
            f[0].saw.contains("holds 70.0 GiB") && f[0].saw.contains("2m 5s"),
            "{}",
            f[0].saw
        );
        // Little memory held is not a finding.
        let mut t = Tracker::new(Thresholds {
            idle_after_ms: 0,
            ..Thresholds::default()
        });
        assert!(
            t.observe(&node([0.0, 0.0], 0.0, [0, 1], 283 << 20, 0))
                .is_empty()
        );
    }

    #[test]
    fn idle_and_noisy_findings_name_the_holder_and_the_action() {
        use crate::domain::snapshot::Process;
        let with_holder = |busy, umc, vram, at| {
            let mut n = node(busy, umc, [0, 0], vram, at);
            n.processes = vec![Process {
                pid: 4242,
                name: Some("python3".into()),
                k8s_pod_uid: Some("1f2e3d4c-aaaa".into()),
                gpus: vec![GpuUse {
                    gpu_id: 1,
                    vram_bytes: Some(vram),
                    cu_occupancy: Some(150),
                    ..GpuUse::default()
                }],
                ..Process::default()
            }];
            n.models = vec![crate::domain::model_status::ServedModel {
                name: "chat-model".into(),
                model: "Qwen/Qwen2.5-7B-Instruct".into(),
                server: Some("vllm".into()),
                spec: None,
                pid: Some(4242),
                start_ticks: None,
                gpus: vec![1],
                bdfs: vec![],
                port: None,
                state: crate::domain::model_status::ModelState::Healthy,
                reason: None,
                running: None,
                waiting: None,
                kv_cache: None,
                tokens_per_sec: None,
                restarts: 0,
                log: None,
                log_tail: vec![],
                probed_ms: None,
                latency: None,
            }];
            n
        };
        let mut t = Tracker::new(Thresholds {
            idle_after_ms: 60_000,
            ..Thresholds::default()
        });
        t.observe(&with_holder([0.0, 0.0], 0.0, 70 << 30, 0));
        let f = t.observe(&with_holder([0.0, 0.0], 0.0, 70 << 30, 61_000));
        let idle = f.iter().find(|f| f.gpu_id == 1).unwrap();
        assert!(
            idle.saw.contains(
                "GPU 1 is held by pid 4242 python3 (model chat-model, pod 1f2e3d4c-aaaa)"
            ) && idle.saw.contains("stop it (`partop kill PID`"),
            "{}",
            idle.saw
        );
        // GPU 0 has memory but no process seen: said, not left blank.
        let other = f.iter().find(|f| f.gpu_id == 0).unwrap();
        assert!(
            other.saw.contains("GPU 0 shows no process"),
            "{}",
            other.saw
        );
        let mut t = Tracker::default();
        t.observe(&with_holder([30.0, 99.0], 88.0, 0, 0));
        let f = t.observe(&with_holder([30.0, 99.0], 88.0, 0, 45_000));
        assert!(
            f[0].saw
                .contains("GPU 1 is held by pid 4242 python3 (model chat-model")
                && f[0].saw.contains("another memory domain"),
            "{}",
            f[0].saw
        );
        assert_eq!(f[0].headline(), "noisy neighbour on GPU 1");
    }

    #[test]
    fn the_worst_finding_is_critical_then_warn_then_the_oldest() {
        let f = |kind, severity, since_ms| Finding {
            kind,
            severity,
            subject: "s".into(),
            gpu_id: 0,
            saw: String::new(),
            since_ms,
        };
        let all = [
            f(Kind::KfdOnlyHolder, Severity::Info, 1),
            f(Kind::NoisyNeighbour, Severity::Warn, 9),
            f(Kind::HiddenHolders, Severity::Warn, 5),
            f(Kind::PartitionMismatch, Severity::Warn, 20),
        ];
        let order: Vec<Kind> = by_urgency(&all).iter().map(|f| f.kind).collect();
        assert_eq!(
            order,
            [
                Kind::PartitionMismatch,
                Kind::HiddenHolders,
                Kind::NoisyNeighbour,
                Kind::KfdOnlyHolder
            ]
        );
        assert_eq!(worst(&all[..2]).map(|f| f.kind), Some(Kind::NoisyNeighbour));
        assert!(worst(&[]).is_none());
    }

    #[test]
    fn a_kfd_holder_names_its_pod() {
        use crate::domain::snapshot::Process;
        let mut n = node([0.0, 0.0], 0.0, [0, 0], 0, 1_000);
        n.processes = vec![Process {
            pid: 91,
            name: Some("device-plugin".into()),
            holds_kfd: true,
            k8s_pod_uid: Some("5e6f-77".into()),
            ..Process::default()
        }];
        let f = Tracker::default().observe(&n);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].saw
                .starts_with("pid 91 device-plugin (pod 5e6f-77) holds /dev/kfd"),
            "{}",
            f[0].saw
        );
    }
}
