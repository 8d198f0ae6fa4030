//! The fleet, pure: one node's sample reduced to the row the fleet view shows (modes, logical
//! GPUs, GFX busy and VRAM, models, findings, health, age), the fleet's totals, the refresh that
//! grows with the fleet, and a plan set's fingerprint (what one confirmation covers).

use super::findings::{Finding, Kind, Severity};
use super::snapshot::{Health, Snapshot};
use serde::{Deserialize, Serialize};

/// A repartition unfinished on a node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyInfo {
    /// Its plan's fingerprint.
    pub fingerprint: String,
    /// The step it is at.
    pub step: usize,
    /// That step's key.
    #[serde(default)]
    pub key: String,
}

/// One node in a line: what `partop stream --summary` sends and the fleet view shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSummary {
    /// The node's host name (as it says).
    pub host: String,
    /// Distinct products (`AMD Instinct MI300X`).
    pub products: Vec<String>,
    /// Distinct modes with counts (`CPX/NPS4×8`).
    pub modes: String,
    /// Physical GPUs.
    pub physical: u32,
    /// Logical GPUs.
    pub logical: u32,
    /// Mean GFX busy over the logical GPUs that report it, percent.
    pub gfx_mean: Option<f64>,
    /// VRAM in use, bytes.
    pub vram_used: u64,
    /// VRAM, bytes.
    pub vram_total: u64,
    /// Served models answering their health check.
    pub models_healthy: u32,
    /// Served models.
    pub models_total: u32,
    /// Findings by severity.
    pub findings_warn: u32,
    /// Informational findings.
    pub findings_info: u32,
    /// Idle partitions (memory held, nothing done).
    pub idle_partitions: u32,
    /// Partitions that did not come up (count mismatch findings).
    pub mismatched: u32,
    /// The worst source health.
    pub health: Health,
    /// Sources down or stale, with the first reason.
    pub trouble: Option<String>,
    /// When the sample was taken, ms since epoch (the node's clock).
    pub taken_at_ms: u64,
    /// Its generation.
    pub generation: u64,
    /// An unfinished repartition.
    pub apply: Option<ApplyInfo>,
    /// A simulated node.
    pub simulated: bool,
}

fn rank(h: Health) -> u8 {
    match h {
        Health::Ok => 0,
        Health::Degraded => 1,
        Health::Pending => 2,
        Health::Stale => 3,
        Health::Down => 4,
    }
}

/// Reduces a sample to its fleet row.
pub fn summarize(snap: &Snapshot, findings: &[Finding], apply: Option<ApplyInfo>) -> NodeSummary {
    let mut products: Vec<String> = Vec::new();
    let mut modes: Vec<(String, u32)> = Vec::new();
    for g in &snap.gpus {
        if !products.contains(&g.product) {
            products.push(g.product.clone());
        }
        let m = g.modes_label();
        match modes.iter_mut().find(|(x, _)| *x == m) {
            Some((_, n)) => *n += 1,
            None => modes.push((m, 1)),
        }
    }
    let busy: Vec<f64> = snap
        .logical()
        .filter_map(|(_, l)| l.gfx_busy_percent)
        .collect();
    #[expect(clippy::cast_precision_loss, reason = "a mean of percentages")]
    let gfx_mean = (!busy.is_empty()).then(|| busy.iter().sum::<f64>() / busy.len() as f64);
    // Saturating: a node's figures are outside numbers, and a wrapped sum reads as plausible.
    let vram_used = snap
        .logical()
        .filter_map(|(_, l)| l.vram_used_bytes)
        .fold(0u64, u64::saturating_add);
    let vram_total = snap
        .logical()
        .filter_map(|(_, l)| l.vram_capacity_bytes())
        .fold(0u64, u64::saturating_add);
    let worst = snap
        .sources
        .iter()
        .map(|s| s.status)
        .max_by_key(|h| rank(*h))
        .unwrap_or(Health::Down);
    // A failure first; else a source still on its first read (said, not a failure).
    let why = |s: &super::snapshot::SourceStatus| {
        format!("{}: {}", s.name, s.error.clone().unwrap_or_default())
    };
    let trouble = snap
        .sources
        .iter()
        .find(|s| matches!(s.status, Health::Down | Health::Stale))
        .or_else(|| snap.sources.iter().find(|s| s.status == Health::Pending))
        .map(why);
    let count =
        |k: Kind| u32::try_from(findings.iter().filter(|f| f.kind == k).count()).unwrap_or(0);
    NodeSummary {
        host: snap.host.clone(),
        products,
        modes: modes
            .iter()
            .map(|(m, n)| format!("{m}×{n}"))
            .collect::<Vec<_>>()
            .join(" "),
        physical: u32::try_from(snap.gpus.len()).unwrap_or(u32::MAX),
        logical: u32::try_from(snap.logical_count()).unwrap_or(u32::MAX),
        gfx_mean,
        vram_used,
        vram_total,
        models_healthy: u32::try_from(
            snap.models
                .iter()
                .filter(|m| m.state == super::model_status::ModelState::Healthy)
                .count(),
        )
        .unwrap_or(0),
        models_total: u32::try_from(snap.models.len()).unwrap_or(0),
        findings_warn: u32::try_from(
            findings
                .iter()
                .filter(|f| f.severity == Severity::Warn)
                .count(),
        )
        .unwrap_or(0),
        findings_info: u32::try_from(
            findings
                .iter()
                .filter(|f| f.severity == Severity::Info)
                .count(),
        )
        .unwrap_or(0),
        idle_partitions: count(Kind::IdlePartition),
        mismatched: count(Kind::PartitionMismatch),
        health: worst,
        trouble,
        taken_at_ms: snap.taken_at_ms,
        generation: snap.generation,
        apply,
        simulated: snap.simulated,
    }
}

/// The fleet's refresh for `n` nodes, seconds: it stretches as the fleet grows (as all-smi
/// does), so the fleet view's cost and the nodes' stay bounded.
pub const fn refresh_for(n: usize) -> u32 {
    match n {
        0..=10 => 1,
        11..=50 => 2,
        51..=100 => 3,
        _ => 5,
    }
}

/// The fingerprint of a set of node plans: node names and plan fingerprints, in rollout order
/// (the order is what decides which node goes first and which stay untouched after a failure,
/// so a set reordered after its confirmation is another set). One confirmation covers exactly
/// this set.
pub fn set_fingerprint(plans: &[(String, String)]) -> String {
    let v: Vec<String> = plans.iter().map(|(n, f)| format!("{n}={f}")).collect();
    super::fingerprint::fnv(&v.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_stretches_with_the_fleet() {
        assert_eq!(refresh_for(3), 1);
        assert_eq!(refresh_for(256), 5);
    }

    #[test]
    fn the_set_fingerprint_covers_the_order_and_every_pair() {
        let a = set_fingerprint(&[("n1".into(), "aa".into()), ("n2".into(), "bb".into())]);
        let b = set_fingerprint(&[("n2".into(), "bb".into()), ("n1".into(), "aa".into())]);
        let c = set_fingerprint(&[("n1".into(), "aa".into()), ("n2".into(), "bc".into())]);
        assert_ne!(a, b, "the rollout order is part of the set");
        assert_ne!(a, c);
    }
}
