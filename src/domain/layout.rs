//! Which XCDs, CUs and HBM domains each logical GPU owns in a given compute x memory mode.
//! Used by the partition map (current and staged layouts) and, later, the planner.

use super::modes::{ComputeMode, MemoryMode};
use super::product::Product;
use super::snapshot::Snapshot;
use serde::{Deserialize, Serialize};

/// The shape of one logical GPU inside its physical GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionShape {
    /// Partition (XCP) index, 0 = primary.
    pub partition_id: u32,
    /// XCD indices it owns (contiguous).
    pub xcds: Vec<u32>,
    /// CUs it owns.
    pub cus: u32,
    /// Memory (NPS) domains it allocates from.
    pub memory_domains: Vec<u32>,
    /// Its even share of HBM in MiB (amd-smi's "MB").
    pub vram_share_mb: u64,
}

/// Why a layout cannot exist.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The product does not offer the combination.
    #[error("{product} does not offer {compute}/{memory}")]
    NotOffered {
        /// Product market name.
        product: String,
        /// Compute mode.
        compute: ComputeMode,
        /// Memory mode.
        memory: MemoryMode,
    },
}

/// The partitions of one physical GPU of `product` in `compute`/`memory`, by geometry alone
/// (profile checks are the caller's: the device's own caps may differ from the table).
pub fn shapes(product: &Product, compute: ComputeMode, memory: MemoryMode) -> Vec<PartitionShape> {
    let n = compute.partitions(product.xcds).max(1);
    let per = (product.xcds / n).max(1);
    let domains = memory.domains();
    (0..n)
        .map(|p| {
            let xcds: Vec<u32> = (p * per..(p + 1) * per).collect();
            // With at least as many partitions as domains, each partition lives in one domain;
            // a partition spanning several domains (fewer partitions than domains) gets them all.
            let memory_domains = if n >= domains {
                vec![p * domains / n]
            } else {
                let per_d = domains / n;
                (p * per_d..(p + 1) * per_d).collect()
            };
            PartitionShape {
                partition_id: p,
                cus: per * product.cus_per_xcd,
                xcds,
                memory_domains,
                vram_share_mb: product.vram_mb / u64::from(n),
            }
        })
        .collect()
}

/// Like [`shapes`], but refuses combinations the product does not offer.
pub fn checked_shapes(
    product: &Product,
    compute: ComputeMode,
    memory: MemoryMode,
) -> Result<Vec<PartitionShape>, LayoutError> {
    if product.offers(compute, memory) {
        Ok(shapes(product, compute, memory))
    } else {
        Err(LayoutError::NotOffered {
            product: product.market_name.to_string(),
            compute,
            memory,
        })
    }
}

/// A logical GPU in a layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutRow {
    /// amd-smi index.
    pub gpu_id: u32,
    /// BDF with partition function.
    pub bdf: String,
    /// CUs.
    pub cus: u32,
    /// Its HBM share, MiB.
    pub vram_mb: u64,
}

/// The node's logical GPUs now, as layout rows.
pub fn layout_rows(snap: &Snapshot) -> Vec<LayoutRow> {
    snap.logical()
        .map(|(_, l)| LayoutRow {
            gpu_id: l.gpu_id,
            bdf: l.bdf.clone(),
            cus: l.cu_count.unwrap_or(0),
            vram_mb: l.vram_capacity_bytes().unwrap_or(0) >> 20,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::product::by_key;

    #[test]
    fn mi300x_dpx_nps2_two_halves_each_in_own_domain() {
        let m = by_key("mi300x").unwrap();
        let s = shapes(&m, ComputeMode::Dpx, MemoryMode::Nps2);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].xcds, vec![0, 1, 2, 3]);
        assert_eq!(s[1].xcds, vec![4, 5, 6, 7]);
        assert_eq!(s[1].cus, 152);
        assert_eq!(s[0].memory_domains, vec![0]);
        assert_eq!(s[1].memory_domains, vec![1]);
        assert_eq!(s[1].vram_share_mb, 98_296);
    }

    #[test]
    fn mi300x_cpx_nps4_pairs_share_a_quadrant() {
        let m = by_key("mi300x").unwrap();
        let s = shapes(&m, ComputeMode::Cpx, MemoryMode::Nps4);
        assert_eq!(s.len(), 8);
        assert!(s.iter().all(|p| p.cus == 38));
        let doms: Vec<u32> = s.iter().map(|p| p.memory_domains[0]).collect();
        assert_eq!(doms, vec![0, 0, 1, 1, 2, 2, 3, 3]);
    }

    #[test]
    fn spx_nps4_is_refused() {
        let m = by_key("mi300x").unwrap();
        assert!(checked_shapes(&m, ComputeMode::Spx, MemoryMode::Nps4).is_err());
        assert!(checked_shapes(&m, ComputeMode::Qpx, MemoryMode::Nps4).is_ok());
    }
}
