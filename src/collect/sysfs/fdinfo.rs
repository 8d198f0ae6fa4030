//! DRM fdinfo (`/proc/PID/fdinfo/FD` of a render node): the client id, the physical device,
//! memory per region in its own unit, and engine busy nanoseconds; every driver generation's
//! keys (current `drm-total/resident-*`, legacy `drm-memory-*`, flat `amd-*`), duplicates
//! tolerated (the first wins). Utilisation comes from two samples. Pure.

use std::collections::BTreeMap;

/// One DRM client as one fd shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Client {
    /// `drm-driver`.
    pub driver: Option<String>,
    /// `drm-client-id`: several fds (dup, fork) can show the same client.
    pub client_id: Option<u64>,
    /// `drm-pdev`: always the physical GPU, also for partition render nodes.
    pub pdev: Option<String>,
    /// `pasid`.
    pub pasid: Option<u32>,
    /// Resident VRAM, bytes.
    pub vram_bytes: Option<u64>,
    /// Resident GTT, bytes.
    pub gtt_bytes: Option<u64>,
    /// Busy time per engine (`dec`, `enc`, `compute`, ...), ns.
    pub engines: BTreeMap<String, u64>,
}

/// A size with its unit (`123`, `12 KiB`, `5 MiB`), in bytes.
fn size(v: &str) -> Option<u64> {
    let mut it = v.split_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    let mult = match it.next() {
        None => 1,
        Some("KiB") => 1 << 10,
        Some("MiB") => 1 << 20,
        Some("GiB") => 1 << 30,
        Some(_) => return None,
    };
    n.checked_mul(mult)
}

/// Parses one fdinfo text.
pub fn parse(text: &str) -> Client {
    let mut kv: BTreeMap<&str, &str> = BTreeMap::new();
    for l in text.lines() {
        if let Some((k, v)) = l.split_once(':') {
            kv.entry(k.trim()).or_insert(v.trim());
        }
    }
    let get = |k: &str| kv.get(k).copied();
    let engines = kv
        .iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix("drm-engine-")?;
            if name.starts_with("capacity-") {
                return None;
            }
            let ns: u64 = v.strip_suffix("ns")?.trim().parse().ok()?;
            Some((name.to_string(), ns))
        })
        .collect();
    Client {
        driver: get("drm-driver").map(str::to_string),
        client_id: get("drm-client-id").and_then(|v| v.parse().ok()),
        pdev: get("drm-pdev").map(str::to_string),
        pasid: get("pasid").and_then(|v| v.parse().ok()),
        vram_bytes: get("drm-resident-vram")
            .or_else(|| get("drm-memory-vram"))
            .and_then(size),
        gtt_bytes: get("drm-resident-gtt")
            .or_else(|| get("drm-memory-gtt"))
            .and_then(size),
        engines,
    }
}

/// Busy percent of one engine between two reads `wall_ns` apart: clamped to 0..100, `None`
/// when the counter went backwards (the client id was reused).
pub fn busy_percent(ns_before: u64, ns_after: u64, wall_ns: u64) -> Option<f64> {
    if ns_after < ns_before || wall_ns == 0 {
        return None;
    }
    #[expect(clippy::cast_precision_loss, reason = "nanosecond deltas")]
    let p = (ns_after - ns_before) as f64 * 100.0 / wall_ns as f64;
    Some(p.clamp(0.0, 100.0))
}
