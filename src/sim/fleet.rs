//! The fleet simulator's samples: many nodes from one template sample (a `partop snapshot
//! --json` document of a simulated or real node), each with its own host name and its own
//! load moving over time, cheap enough to run 256 of them on one machine. The command layer
//! serves each behind its own loopback `partop serve` endpoint.

use crate::domain::Snapshot;

/// A small deterministic noise in 0..1 from (node, partition, tick).
fn noise(a: u64, b: u64, t: u64) -> f64 {
    let mut x = a
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(b.wrapping_mul(0xbf58_476d_1ce4_e5b9))
        .wrapping_add(t.wrapping_mul(0x94d0_49bb_1331_11eb));
    x ^= x >> 31;
    x = x.wrapping_mul(0xd6e8_feca_66d6_99f5);
    x ^= x >> 29;
    #[expect(clippy::cast_precision_loss, reason = "a fraction")]
    let f = (x >> 11) as f64 / (1u64 << 53) as f64;
    f
}

/// Node `i`'s sample at `tick`: the template under the name `sim-node-NNN`, every partition's
/// GFX busy and VRAM in use moved by that node's own load.
pub fn node_sample(template: &Snapshot, i: usize, tick: u64, now_ms: u64) -> Snapshot {
    let mut s = template.clone();
    s.host = format!("sim-node-{i:03}");
    s.simulated = true;
    s.generation = tick + 1;
    s.taken_at = crate::collect::clock::rfc3339(now_ms);
    s.taken_at_ms = now_ms;
    let node = i as u64;
    // A quarter of the nodes are busy, a few idle.
    let level = match i % 8 {
        0 | 1 => 80.0,
        7 => 0.5,
        _ => 30.0,
    };
    for g in &mut s.gpus {
        for p in &mut g.partitions {
            let n = noise(node, u64::from(p.gpu_id), tick);
            p.gfx_busy_percent = Some((level + (n - 0.5) * 20.0).clamp(0.0, 100.0));
            if let (Some(used), Some(cap)) = (p.vram_used_bytes, p.vram_capacity_bytes()) {
                #[expect(
                    clippy::cast_precision_loss,
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "bytes"
                )]
                let moved = (used as f64 * (0.95 + n * 0.1)).min(cap as f64) as u64;
                p.vram_used_bytes = Some(moved);
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn nodes_differ_and_move() {
        let mut t = crate::domain::Snapshot::default();
        t.gpus.push(crate::domain::snapshot::PhysicalGpu {
            partitions: vec![crate::domain::snapshot::LogicalGpu::default()],
            ..Default::default()
        });
        let a = super::node_sample(&t, 0, 1, 1000);
        let b = super::node_sample(&t, 2, 1, 1000);
        let a2 = super::node_sample(&t, 0, 2, 2000);
        assert_eq!(a.host, "sim-node-000");
        assert_ne!(
            a.gpus[0].partitions[0].gfx_busy_percent,
            b.gpus[0].partitions[0].gfx_busy_percent
        );
        assert_ne!(
            a.gpus[0].partitions[0].gfx_busy_percent,
            a2.gpus[0].partitions[0].gfx_busy_percent
        );
    }
}
