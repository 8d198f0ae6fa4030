//! The fleet from Prometheus (`partop fleet --prometheus URL`), read only: a handful of
//! aggregate queries grouped by `hostname` (partop's series, or AMD's Device Metrics
//! Exporter's for nodes that run only that), turned into fleet rows. For the thousand-node
//! case: one query answers for every node. Blocking (ureq): called on a blocking thread.

use crate::domain::fleet::NodeSummary;
use crate::domain::snapshot::Health;
use std::collections::BTreeMap;
use std::time::Duration;

fn enc(q: &str) -> String {
    q.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A result's labels.
type Labels = BTreeMap<String, String>;

/// How one query's results fill the rows.
type Fill<'a> = &'a dyn Fn(&mut NodeSummary, &Labels, f64);

/// One instant query: (labels, value) per result.
fn query(base: &str, q: &str, timeout: Duration) -> Result<Vec<(Labels, f64)>, String> {
    let url = format!(
        "{}/api/v1/query?query={}",
        base.trim_end_matches('/'),
        enc(q)
    );
    let r = super::served::http::get(&url, timeout).map_err(|e| format!("{url}: {e}"))?;
    if r.status != 200 {
        return Err(format!("{url}: HTTP {}: {}", r.status, r.body.trim()));
    }
    let v: serde_json::Value =
        serde_json::from_str(&r.body).map_err(|e| format!("{url}: not Prometheus's API: {e}"))?;
    let mut out = Vec::new();
    for x in v["data"]["result"].as_array().into_iter().flatten() {
        let labels: BTreeMap<String, String> = x["metric"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
            .collect();
        let val = x["value"][1]
            .as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(f64::NAN);
        out.push((labels, val));
    }
    Ok(out)
}

/// Every node Prometheus knows, as fleet rows.
pub fn read(base: &str, timeout: Duration) -> Result<Vec<NodeSummary>, String> {
    let mut rows: BTreeMap<String, NodeSummary> = BTreeMap::new();
    node_rows(base, timeout, &mut rows)?;
    let figures: [(&str, Fill<'_>); 11] = [
        (
            "count by (instance) (partop_partition_gfx_busy_percent)",
            &|r, _, v| r.logical = to_u32(v),
        ),
        (
            "avg by (instance) (partop_partition_gfx_busy_percent) or avg by (instance) (gpu_gfx_activity)",
            &|r, _, v| r.gfx_mean = v.is_finite().then_some(v),
        ),
        (
            "sum by (instance) (partop_partition_vram_used_bytes) or sum by (instance) (gpu_used_vram) * 1048576",
            &|r, _, v| r.vram_used = to_u64(v),
        ),
        (
            "sum by (instance) (partop_partition_vram_share_bytes) or sum by (instance) (gpu_total_vram) * 1048576",
            &|r, _, v| r.vram_total = to_u64(v),
        ),
        (
            "count by (instance, severity) (partop_finding)",
            &|r, l, v| match l.get("severity").map(String::as_str) {
                Some("warning") => r.findings_warn = to_u32(v),
                _ => r.findings_info = to_u32(v),
            },
        ),
        (
            "count by (instance) (partop_finding{kind=\"idle_partition\"})",
            &|r, _, v| r.idle_partitions = to_u32(v),
        ),
        ("sum by (instance) (partop_model_up)", &|r, _, v| {
            r.models_healthy = to_u32(v)
        }),
        ("count by (instance) (partop_model_up)", &|r, _, v| {
            r.models_total = to_u32(v)
        }),
        (
            "max by (instance) (partop_apply_in_progress)",
            &|r, _, v| {
                if v > 0.0 {
                    r.apply = Some(crate::domain::fleet::ApplyInfo::default());
                }
            },
        ),
        ("min by (instance) (partop_source_up)", &|r, _, v| {
            if v < 1.0 {
                r.health = Health::Degraded;
            }
        }),
        (
            "max by (instance) (partop_sample_age_seconds)",
            &|r, _, v| {
                r.taken_at_ms = crate::collect::clock::now_ms().saturating_sub(to_u64(v * 1000.0));
            },
        ),
    ];
    // Each figure only for the nodes found above (a series of an unknown instance is not a
    // node).
    for (q, f) in figures {
        for (l, v) in query(base, q, timeout)? {
            if let Some(r) = rows.get_mut(&instance(&l)) {
                f(r, &l, v);
            }
        }
    }
    Ok(rows
        .into_iter()
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, mut r)| {
            // The row's name is the instance; the node's own name follows it.
            if r.host != k {
                r.host = format!("{k} ({})", r.host);
            }
            // Labels are anyone's text: escaped like every row from a node.
            super::fleet::escape_row(&mut r);
            r
        })
        .collect())
}

/// One exporter per node: rows are keyed by Prometheus's `instance` (two nodes that call
/// themselves alike stay apart); the row shows the node's own `hostname`.
fn instance(l: &Labels) -> String {
    l.get("instance").cloned().unwrap_or_default()
}

/// The nodes: those with partop's own series (their GPUs, products and modes), then those
/// with only the Device Metrics Exporter (their logical GPU count).
fn node_rows(
    base: &str,
    timeout: Duration,
    rows: &mut BTreeMap<String, NodeSummary>,
) -> Result<(), String> {
    let row = |l: &Labels| -> NodeSummary {
        NodeSummary {
            host: instance(l),
            health: Health::Ok,
            ..NodeSummary::default()
        }
    };
    for (l, _) in query(base, "partop_gpu_info", timeout)? {
        let r = rows.entry(instance(&l)).or_insert_with(|| row(&l));
        if let Some(h) = l.get("hostname") {
            r.host.clone_from(h);
        }
        r.physical += 1;
        let p = l.get("product").cloned().unwrap_or_default();
        if !r.products.contains(&p) {
            r.products.push(p);
        }
        let m = format!(
            "{}/{}",
            l.get("compute")
                .map(|s| s.to_uppercase())
                .unwrap_or_default(),
            l.get("memory")
                .map(|s| s.to_uppercase())
                .unwrap_or_default()
        );
        r.modes = merge_modes(&r.modes, &m);
    }
    for (l, v) in query(
        base,
        "count by (instance, hostname) (gpu_gfx_activity)",
        timeout,
    )? {
        let r = rows.entry(instance(&l)).or_insert_with(|| row(&l));
        if let Some(h) = l.get("hostname") {
            r.host.clone_from(h);
        }
        if r.logical == 0 {
            r.logical = to_u32(v);
        }
    }
    Ok(())
}

#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "counts"
)]
fn to_u32(v: f64) -> u32 {
    if v.is_finite() {
        v.max(0.0).round() as u32
    } else {
        0
    }
}

#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "bytes"
)]
fn to_u64(v: f64) -> u64 {
    if v.is_finite() {
        v.max(0.0).round() as u64
    } else {
        0
    }
}

/// `CPX/NPS4×7` + `CPX/NPS4` = `CPX/NPS4×8`.
fn merge_modes(have: &str, m: &str) -> String {
    let mut v: Vec<(String, u32)> = have
        .split_whitespace()
        .filter_map(|x| {
            let (a, n) = x.rsplit_once('×')?;
            Some((a.to_string(), n.parse().ok()?))
        })
        .collect();
    match v.iter_mut().find(|(a, _)| a == m) {
        Some((_, n)) => *n += 1,
        None => v.push((m.to_string(), 1)),
    }
    v.iter()
        .map(|(a, n)| format!("{a}×{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn modes_merge() {
        assert_eq!(super::merge_modes("", "CPX/NPS4"), "CPX/NPS4×1");
        assert_eq!(super::merge_modes("CPX/NPS4×7", "CPX/NPS4"), "CPX/NPS4×8");
        assert_eq!(
            super::merge_modes("CPX/NPS4×7", "SPX/NPS1"),
            "CPX/NPS4×7 SPX/NPS1×1"
        );
    }
}
