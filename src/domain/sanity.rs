//! The last check before a snapshot is published: a value no hardware can have (a NaN, a
//! negative or >100 % busy, a temperature of 3000 °C, more VRAM used than exists) becomes N/A
//! for that value only, with the reason in its provenance, so nothing absurd is shown, exported
//! or acted on; and every text that came from outside has its control characters escaped. Pure.

use super::provenance::{Missing, Origin, Provenance, SourceKind};
use super::snapshot::Snapshot;
use super::text::sanitize;

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
            format!("the source reported {x}{unit}, outside {lo} to {hi}{unit}"),
        );
        *v = None;
    }
}

/// Applies the checks to `snap` in place.
pub fn check(snap: &mut Snapshot) {
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
        sanitize(&mut g.serial);
        for l in &mut g.partitions {
            let p = &mut l.provenance;
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
        sanitize(&mut pr.name);
        sanitize(&mut pr.command);
        sanitize(&mut pr.user);
        sanitize(&mut pr.container_id);
        sanitize(&mut pr.systemd_unit);
        sanitize(&mut pr.agent);
        for u in &mut pr.gpus {
            if let Some(c) = u.cu_percent
                && !(c.is_finite() && (0.0..=100.0).contains(&c))
            {
                u.cu_percent = None;
            }
            u.engine_percent
                .retain(|_, v| v.is_finite() && (0.0..=100.0).contains(v));
        }
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
}
