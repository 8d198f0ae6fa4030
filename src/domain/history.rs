//! Recent GFX-busy history per logical GPU, keyed by identity (its BDF with the partition
//! function), so renumbering does not mix series; cleared for a physical GPU whose layout
//! changes. Feeds the sparklines.

use super::snapshot::Snapshot;
use std::collections::{HashMap, VecDeque};

/// Ring buffers of busy samples.
#[derive(Debug, Clone, Default)]
pub struct History {
    cap: usize,
    series: HashMap<String, VecDeque<u64>>,
    layout: HashMap<String, usize>,
}

impl History {
    /// Keeps the last `cap` samples.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            ..Self::default()
        }
    }

    /// Adds one sample per logical GPU (missing values are not recorded).
    pub fn push(&mut self, snap: &Snapshot) {
        for g in &snap.gpus {
            let n = g.partitions.len();
            if self
                .layout
                .insert(g.bdf.clone(), n)
                .is_some_and(|old| old != n)
            {
                let prefix = g.bdf.clone();
                self.series.retain(|k, _| !k.starts_with(&prefix));
            }
            for l in &g.partitions {
                let Some(b) = l.gfx_busy_percent else {
                    continue;
                };
                let s = self.series.entry(l.bdf.clone()).or_default();
                if s.len() == self.cap {
                    s.pop_front();
                }
                #[expect(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "0..=100"
                )]
                s.push_back(b.clamp(0.0, 100.0).round() as u64);
            }
        }
    }

    /// The series for a logical GPU, oldest first.
    pub fn busy(&self, bdf: &str) -> Vec<u64> {
        self.series
            .get(bdf)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }
}
