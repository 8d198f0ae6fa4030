//! The last check before a snapshot is published: a value no hardware can have (a NaN, a
//! negative or >100 % busy, a temperature of 3000 °C, more VRAM used than exists) becomes N/A
//! for that value only, with the reason in its provenance, so nothing absurd is shown, exported
//! or acted on; and every text that came from outside (every string of the snapshot, by
//! [`escape_all`], whatever field it sits in) has its control characters escaped. Pure.

use super::provenance::{Missing, Origin, Provenance, SourceKind};
use super::snapshot::Snapshot;
use super::text::{escape_all, sanitize};

/// The most one memory figure may be: 8 PiB. No GPU or node holds that much, sums of a few
/// thousand such figures cannot overflow a u64, and an f64 is still exact there; a figure
/// beyond it (a negative number read as unsigned, a value near 2^64) is an error in its source.
pub const MAX_BYTES: u64 = 1 << 53;

/// The most compute units one GPU or partition may have (an MI300X has 304, an MI355X 256).
pub const MAX_CUS: u32 = 4096;

/// The most requests a model server may report running or waiting at once.
pub const MAX_REQUESTS: f64 = 1e7;

/// The most tokens per second a model server may report.
pub const MAX_TOKENS_PER_SEC: f64 = 1e9;

/// The one range policy for a byte figure read from outside as a number and a unit (`-86`,
/// `GB`): finite, not negative, at most [`MAX_BYTES`]; otherwise the reason, in words.
pub fn bytes_of(x: f64, multiplier: u64, unit: &str) -> Result<u64, String> {
    #[expect(
        clippy::cast_precision_loss,
        reason = "unit multipliers are powers of two"
    )]
    let b = x * multiplier as f64;
    #[expect(clippy::cast_precision_loss, reason = "2^53 is exact")]
    let max = MAX_BYTES as f64;
    if !b.is_finite() || b < 0.0 || b > max {
        return Err(format!(
            "the source reported {} {unit}, outside 0 to 8 PiB",
            shown(x)
        ));
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked above"
    )]
    Ok(b.round() as u64)
}

/// [`bytes_of`] for a figure read as an integer (fdinfo, KFD): at most [`MAX_BYTES`].
pub fn bytes_in_range(n: u64) -> Result<u64, String> {
    if n > MAX_BYTES {
        return Err(format!("the source reported {n} bytes, outside 0 to 8 PiB"));
    }
    Ok(n)
}

/// The one range policy for a count read from outside as a number (CUs, occupancy): finite,
/// 0 to `max` (rounded); otherwise the reason. A cast would turn 1e308 into 4294967295 and -5
/// into 0.
pub fn count_of(x: f64, max: u32, what: &str) -> Result<u32, String> {
    if !x.is_finite() || x < 0.0 || x > f64::from(max) {
        return Err(format!(
            "the source reported {} {what}, outside 0 to {max}",
            shown(x)
        ));
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked above"
    )]
    Ok(x.round() as u32)
}

/// A sum of byte figures: checked, never wrapped (a wrapped total reads as a plausible small
/// number); the reason when it would pass [`MAX_BYTES`].
pub fn sum_bytes(figures: impl IntoIterator<Item = u64>) -> Result<u64, String> {
    let mut total: u64 = 0;
    for f in figures {
        total = total
            .checked_add(f)
            .filter(|t| *t <= MAX_BYTES)
            .ok_or_else(|| {
                "the sum of the figures passes 8 PiB: one of them is wrong".to_string()
            })?;
    }
    Ok(total)
}

/// A number as a reason shows it: `1e308`, not 309 digits.
pub fn shown(x: f64) -> String {
    if x != 0.0 && x.is_finite() && !(1e-4..1e15).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

fn reject(prov: &mut Provenance, field: &str, why: String) {
    let o = prov.entry(field.to_string()).or_insert_with(|| Origin {
        source: SourceKind::Derived,
        detail: String::new(),
        at_ms: 0,
        missing: None,
    });
    o.missing = Some(Missing::OutOfRange(why));
}

fn range(v: &mut Option<f64>, lo: f64, hi: f64, prov: &mut Provenance, field: &str, unit: &str) {
    if let Some(x) = *v
        && !(x.is_finite() && (lo..=hi).contains(&x))
    {
        reject(
            prov,
            field,
            format!(
                "the source reported {}{unit}, outside {lo} to {hi}{unit}",
                shown(x)
            ),
        );
        *v = None;
    }
}

/// Applies the checks to `snap` in place.
pub fn check(snap: &mut Snapshot) {
    numbers(snap);
    // The recorder's counters are not part of the document the escape round-trips.
    let readings = std::mem::take(&mut snap.throughput);
    let escaped = escape_all(snap);
    snap.throughput = readings;
    if escaped.is_err() {
        // Only a value JSON cannot carry stops the whole pass: escape the outside texts by name.
        escape_named(snap);
    }
}

/// The texts known to come from outside, escaped field by field (the fallback of [`check`]).
fn escape_named(snap: &mut Snapshot) {
    let text = |s: &mut String| {
        if let std::borrow::Cow::Owned(o) = super::text::escape_controls(s) {
            *s = o;
        }
    };
    text(&mut snap.host);
    for g in &mut snap.gpus {
        text(&mut g.product);
        text(&mut g.bdf);
        sanitize(&mut g.serial);
        sanitize(&mut g.product_key);
        sanitize(&mut g.device_id);
        sanitize(&mut g.hive);
    }
    for pr in &mut snap.processes {
        sanitize(&mut pr.name);
        sanitize(&mut pr.command);
        sanitize(&mut pr.user);
        sanitize(&mut pr.container_id);
        sanitize(&mut pr.systemd_unit);
        sanitize(&mut pr.agent);
        if let Some(pod) = pr.pod.as_mut() {
            pod_texts(pod, text);
        }
    }
    for l in snap.gpus.iter_mut().flat_map(|g| &mut g.partitions) {
        for pod in &mut l.pods {
            pod_texts(pod, text);
        }
    }
    for s in &mut snap.sources {
        sanitize(&mut s.error);
        sanitize(&mut s.version);
    }
}

/// A pod's names come from the kubelet: escaped like every outside text.
fn pod_texts(pod: &mut super::snapshot::PodRef, text: impl Fn(&mut String)) {
    text(&mut pod.namespace);
    text(&mut pod.pod);
    text(&mut pod.container);
    text(&mut pod.resource);
}

/// Every number from outside in its range: N/A with the reason otherwise.
fn numbers(snap: &mut Snapshot) {
    for g in &mut snap.gpus {
        let p = &mut g.provenance;
        range(&mut g.power_watts, 0.0, 5000.0, p, "power_watts", " W");
        range(
            &mut g.power_cap_watts,
            0.0,
            5000.0,
            p,
            "power_cap_watts",
            " W",
        );
        range(
            &mut g.hotspot_celsius,
            -60.0,
            200.0,
            p,
            "hotspot_celsius",
            " °C",
        );
        range(&mut g.mem_celsius, -60.0, 200.0, p, "mem_celsius", " °C");
        cap(&mut g.cu_count, MAX_CUS, p, "cu_count", "CUs");
        cap(&mut g.hbm_bytes, MAX_BYTES, p, "hbm_bytes", "bytes");
        for l in &mut g.partitions {
            let p = &mut l.provenance;
            cap(&mut l.cu_count, MAX_CUS, p, "cu_count", "CUs");
            cap(
                &mut l.vram_used_bytes,
                MAX_BYTES,
                p,
                "vram_used_bytes",
                "bytes",
            );
            cap(
                &mut l.vram_total_bytes,
                MAX_BYTES,
                p,
                "vram_total_bytes",
                "bytes",
            );
            cap(
                &mut l.vram_share_bytes,
                MAX_BYTES,
                p,
                "vram_share_bytes",
                "bytes",
            );
            range(
                &mut l.gfx_busy_percent,
                0.0,
                100.0,
                p,
                "gfx_busy_percent",
                " %",
            );
            range(
                &mut l.umc_busy_percent,
                0.0,
                100.0,
                p,
                "umc_busy_percent",
                " %",
            );
            if let (Some(u), Some(t)) = (l.vram_used_bytes, l.vram_total_bytes)
                && u > t
            {
                reject(
                    p,
                    "vram_used_bytes",
                    format!("the source reported {u} bytes used of {t}"),
                );
                l.vram_used_bytes = None;
            }
        }
    }
    for pr in &mut snap.processes {
        let p = &mut pr.provenance;
        cap(&mut pr.rss_bytes, MAX_BYTES, p, "rss_bytes", "bytes");
        for u in &mut pr.gpus {
            let g = u.gpu_id;
            cap(
                &mut u.vram_bytes,
                MAX_BYTES,
                p,
                &format!("gpu{g}.vram_bytes"),
                "bytes",
            );
            cap(
                &mut u.gtt_bytes,
                MAX_BYTES,
                p,
                &format!("gpu{g}.gtt_bytes"),
                "bytes",
            );
            cap(
                &mut u.cu_occupancy,
                MAX_CUS,
                p,
                &format!("gpu{g}.cu_occupancy"),
                "CUs",
            );
            range(
                &mut u.cu_percent,
                0.0,
                100.0,
                p,
                &format!("gpu{g}.cu_percent"),
                " %",
            );
            u.engine_percent
                .retain(|_, v| v.is_finite() && (0.0..=100.0).contains(v));
        }
    }
    for m in &mut snap.models {
        let mut why = Vec::new();
        let mut check = |v: &mut Option<f64>, hi: f64, what: &str| {
            if let Some(x) = *v
                && !(x.is_finite() && (0.0..=hi).contains(&x))
            {
                why.push(format!("{what} {} is outside 0 to {}", shown(x), shown(hi)));
                *v = None;
            }
        };
        check(&mut m.running, MAX_REQUESTS, "requests running");
        check(&mut m.waiting, MAX_REQUESTS, "requests waiting");
        check(&mut m.kv_cache, 1.0, "KV-cache use");
        check(&mut m.tokens_per_sec, MAX_TOKENS_PER_SEC, "tokens/s");
        if !why.is_empty() {
            // A served model has no per-field provenance: its reason says what was not shown.
            let said = format!("/metrics not shown (N/A): {}", why.join(", "));
            m.reason = Some(match m.reason.take() {
                Some(r) => format!("{r}; {said}"),
                None => said,
            });
        }
    }
}

/// The last check of a fleet row a node sent (its own sample reduced, or a Prometheus query):
/// every string escaped, and figures no node can have not shown. A row has no per-field
/// reasons, so what was dropped is said in its `trouble`.
pub fn check_row(row: &mut super::fleet::NodeSummary) {
    let mut why = Vec::new();
    if let Some(g) = row.gfx_mean
        && !(g.is_finite() && (0.0..=100.0).contains(&g))
    {
        why.push(format!("GFX busy {} %", shown(g)));
        row.gfx_mean = None;
    }
    // A fleet of a few thousand nodes still sums without overflow below this.
    let node_max = MAX_BYTES;
    if row.vram_used > node_max || row.vram_total > node_max {
        why.push(format!(
            "VRAM {} of {} bytes",
            row.vram_used, row.vram_total
        ));
        row.vram_used = 0;
        row.vram_total = 0;
    }
    if !why.is_empty() {
        let said = format!(
            "the node sent figures no node can have, not shown: {}",
            why.join(", ")
        );
        row.trouble = Some(match row.trouble.take() {
            Some(t) => format!("{t}; {said}"),
            None => said,
        });
    }
    if escape_all(row).is_err() {
        // Only a value JSON cannot carry stops the whole pass; the texts are dropped.
        row.host = super::text::escape_controls(&row.host).into_owned();
        row.products.clear();
        row.modes.clear();
        row.trouble = Some("the node sent a row partop cannot show".into());
    }
}

/// An integer figure above `max` becomes N/A with the reason.
fn cap<T: Copy + PartialOrd + std::fmt::Display>(
    v: &mut Option<T>,
    max: T,
    prov: &mut Provenance,
    field: &str,
    unit: &str,
) {
    if let Some(x) = *v
        && x > max
    {
        reject(
            prov,
            field,
            format!("the source reported {x} {unit}, outside 0 to {max}"),
        );
        *v = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::snapshot::{LogicalGpu, PhysicalGpu, Process};

    #[test]
    fn absurd_values_become_na_with_the_reason_and_names_are_escaped() {
        let mut s = Snapshot {
            gpus: vec![PhysicalGpu {
                hotspot_celsius: Some(3000.0),
                power_watts: Some(-5.0),
                mem_celsius: Some(f64::NAN),
                partitions: vec![LogicalGpu {
                    gfx_busy_percent: Some(250.0),
                    umc_busy_percent: Some(12.0),
                    ..LogicalGpu::default()
                }],
                ..PhysicalGpu::default()
            }],
            processes: vec![Process {
                name: Some("\u{1b}[2Jevil".into()),
                ..Process::default()
            }],
            ..Snapshot::default()
        };
        check(&mut s);
        let g = &s.gpus[0];
        assert_eq!(g.hotspot_celsius, None);
        assert_eq!(g.power_watts, None);
        assert_eq!(g.mem_celsius, None);
        assert!(matches!(
            g.provenance["hotspot_celsius"].missing,
            Some(Missing::OutOfRange(ref w)) if w.contains("3000")
        ));
        assert_eq!(g.partitions[0].gfx_busy_percent, None);
        assert_eq!(g.partitions[0].umc_busy_percent, Some(12.0));
        assert_eq!(s.processes[0].name.as_deref(), Some("\\x1b[2Jevil"));
    }

    /// The range policy over the edges of each kind of figure: 11 byte figures, 8 counts, 4 sums.
    #[test]
    fn the_range_policy_refuses_every_absurd_figure_and_keeps_every_plausible_one() {
        #[expect(clippy::cast_precision_loss, reason = "2^53 is exact")]
        let max = MAX_BYTES as f64;
        let bytes = [
            (0.0, 1, Some(0)),
            (1.5, 1 << 30, Some(1_610_612_736)),
            (192.0, 1 << 30, Some(192 << 30)),
            (max, 1, Some(MAX_BYTES)),
            (max + 4096.0, 1, None),
            (-86.0, 1 << 30, None),
            (-0.5, 1, None),
            (1e308, 1, None),
            (f64::NAN, 1, None),
            (f64::INFINITY, 1, None),
            (f64::NEG_INFINITY, 1, None),
        ];
        for (x, m, want) in bytes {
            let got = bytes_of(x, m, "B");
            assert_eq!(got.as_ref().ok().copied(), want, "{x} × {m}: {got:?}");
            if let Err(why) = got {
                assert!(why.contains(&shown(x)), "{why}");
            }
        }
        let counts = [
            (0.0, Some(0)),
            (304.0, Some(304)),
            (12.4, Some(12)),
            (4096.0, Some(4096)),
            (4097.0, None),
            (-5.0, None),
            (1e308, None),
            (f64::NAN, None),
        ];
        for (x, want) in counts {
            assert_eq!(count_of(x, MAX_CUS, "CUs").ok(), want, "{x}");
        }
        assert_eq!(
            count_of(1e308, MAX_CUS, "CUs").unwrap_err(),
            "the source reported 1e308 CUs, outside 0 to 4096"
        );
        assert_eq!(sum_bytes([1, 2, 3]), Ok(6));
        assert_eq!(sum_bytes([]), Ok(0));
        assert!(
            sum_bytes([u64::MAX - 10, 1 << 30]).is_err(),
            "a wrapping sum"
        );
        assert!(sum_bytes([MAX_BYTES, 1]).is_err(), "a sum past 8 PiB");
        assert_eq!(bytes_in_range(u64::MAX - 615).ok(), None);
        assert_eq!(bytes.len() + counts.len() + 4, 23);
    }
}
