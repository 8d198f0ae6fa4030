//! The hardware's rules, as pure functions over the simulated node's modes. Sources:
//! amd-smi.md §4 and §6 (docs/reference.md):
//! - a compute change takes effect at once, only on a primary, only with a compatible memory
//!   mode (else SETTING_UNAVAILABLE), and is refused with BUSY while any process holds any
//!   partition of that physical GPU;
//! - a memory change is hive-wide, must be one of the device's caps (else INVAL), and stays
//!   pending until a driver reload;
//! - a reload fails with AMDGPU_RESTART_ERR while any process holds any GPU; when it succeeds the
//!   pending memory mode applies and the compute mode returns to the product's default;
//! - logical GPUs are numbered in BDF order, partitions in order, after every change.

use crate::domain::layout::{PartitionShape, shapes};
use crate::domain::product::Product;
use crate::domain::{ComputeMode, MemoryMode};
use serde::{Deserialize, Serialize};

/// One simulated physical GPU's partition state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuModes {
    /// Current compute mode.
    pub compute: ComputeMode,
    /// Current memory mode.
    pub memory: MemoryMode,
    /// Memory mode set but not yet applied by a reload.
    #[serde(default)]
    pub pending_memory: Option<MemoryMode>,
}

/// Why a change was refused, as amd-smi's status names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// `AMDSMI_STATUS_BUSY` (30).
    #[error("AMDSMI_STATUS_BUSY")]
    Busy,
    /// `AMDSMI_STATUS_SETTING_UNAVAILABLE` (55).
    #[error("AMDSMI_STATUS_SETTING_UNAVAILABLE")]
    SettingUnavailable,
    /// `AMDSMI_STATUS_INVAL` (1), with the valid modes.
    #[error("AMDSMI_STATUS_INVAL")]
    Inval {
        /// Modes the device offers.
        valid: Vec<MemoryMode>,
    },
    /// `AMDSMI_STATUS_AMDGPU_RESTART_ERR` (54).
    #[error("AMDSMI_STATUS_AMDGPU_RESTART_ERR")]
    RestartErr,
}

/// Memory modes a product offers (the union of its profiles).
pub fn memory_caps(product: &Product) -> Vec<MemoryMode> {
    let mut c: Vec<MemoryMode> = product
        .profiles
        .iter()
        .flat_map(|p| p.memory.clone())
        .collect();
    c.sort();
    c.dedup();
    c
}

/// Sets the compute mode of one physical GPU. Returns the profile index.
pub fn set_compute(
    product: &Product,
    gpu: &mut GpuModes,
    mode: ComputeMode,
    held: bool,
) -> Result<u32, RuleError> {
    let profile = product
        .profiles
        .iter()
        .find(|p| p.compute == mode)
        .ok_or(RuleError::SettingUnavailable)?;
    if !profile.memory.contains(&gpu.memory) {
        return Err(RuleError::SettingUnavailable);
    }
    if held {
        return Err(RuleError::Busy);
    }
    gpu.compute = mode;
    Ok(profile.index)
}

/// Sets the memory mode of every GPU in the hive (pending until reload).
pub fn set_memory(
    product: &Product,
    hive: &mut [GpuModes],
    mode: MemoryMode,
) -> Result<(), RuleError> {
    let valid = memory_caps(product);
    if !valid.contains(&mode) {
        return Err(RuleError::Inval { valid });
    }
    for g in hive {
        g.pending_memory = Some(mode);
    }
    Ok(())
}

/// Reloads the driver: fails if anything holds a GPU; otherwise applies pending memory modes
/// and returns every GPU to the default compute mode for its memory mode.
pub fn reload(product: &Product, hive: &mut [GpuModes], any_holder: bool) -> Result<(), RuleError> {
    if any_holder {
        return Err(RuleError::RestartErr);
    }
    for g in hive {
        if let Some(m) = g.pending_memory.take() {
            g.memory = m;
        }
        g.compute = product.default_compute_for(g.memory);
    }
    Ok(())
}

/// One logical GPU of the simulated node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logical {
    /// amd-smi index.
    pub index: u32,
    /// Physical GPU index (BDF order).
    pub phys: usize,
    /// Its shape.
    pub shape: PartitionShape,
}

/// Enumerates logical GPUs: physical GPUs in BDF order, then partitions.
pub fn enumerate(product: &Product, gpus: &[GpuModes]) -> Vec<Logical> {
    let mut out = Vec::new();
    let mut index = 0;
    for (phys, g) in gpus.iter().enumerate() {
        for shape in shapes(product, g.compute, g.memory) {
            out.push(Logical { index, phys, shape });
            index += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::product::by_key;
    use ComputeMode::{Cpx, Dpx, Qpx, Spx};
    use MemoryMode::{Nps1, Nps2, Nps4};

    fn node(c: ComputeMode, m: MemoryMode) -> Vec<GpuModes> {
        vec![
            GpuModes {
                compute: c,
                memory: m,
                pending_memory: None
            };
            8
        ]
    }

    #[test]
    fn every_combination_follows_the_product_table() {
        let p = by_key("mi300x").unwrap();
        for m in [Nps1, Nps2, Nps4] {
            for c in [Spx, Dpx, Qpx, Cpx] {
                let mut g = GpuModes {
                    compute: Spx,
                    memory: m,
                    pending_memory: None,
                };
                let r = set_compute(&p, &mut g, c, false);
                assert_eq!(r.is_ok(), p.offers(c, m), "{c}/{m}");
            }
        }
    }

    #[test]
    fn compute_change_is_busy_while_held_and_immediate_otherwise() {
        let p = by_key("mi300x").unwrap();
        let mut g = GpuModes {
            compute: Spx,
            memory: Nps1,
            pending_memory: None,
        };
        assert_eq!(set_compute(&p, &mut g, Dpx, true), Err(RuleError::Busy));
        assert_eq!(g.compute, Spx);
        assert_eq!(set_compute(&p, &mut g, Cpx, false), Ok(3));
        assert_eq!(g.compute, Cpx);
    }

    #[test]
    fn setting_unavailable_beats_busy() {
        let p = by_key("mi300x").unwrap();
        let mut g = GpuModes {
            compute: Cpx,
            memory: Nps4,
            pending_memory: None,
        };
        assert_eq!(
            set_compute(&p, &mut g, Spx, true),
            Err(RuleError::SettingUnavailable)
        );
    }

    #[test]
    fn memory_change_is_pending_hive_wide_until_reload_then_compute_reverts() {
        let p = by_key("mi300x").unwrap();
        let mut hive = node(Dpx, Nps1);
        set_memory(&p, &mut hive, Nps4).unwrap();
        assert!(
            hive.iter()
                .all(|g| g.memory == Nps1 && g.pending_memory == Some(Nps4))
        );
        assert_eq!(reload(&p, &mut hive, true), Err(RuleError::RestartErr));
        assert!(
            hive.iter().all(|g| g.pending_memory == Some(Nps4)),
            "a failed reload keeps it pending"
        );
        reload(&p, &mut hive, false).unwrap();
        assert!(
            hive.iter()
                .all(|g| g.memory == Nps4 && g.compute == Cpx && g.pending_memory.is_none())
        );
        // A plain reload returns compute to the default too.
        let mut hive = node(Dpx, Nps2);
        reload(&p, &mut hive, false).unwrap();
        assert!(hive.iter().all(|g| g.compute == Dpx));
        let mut hive = node(Cpx, Nps1);
        reload(&p, &mut hive, false).unwrap();
        assert!(hive.iter().all(|g| g.compute == Spx));
    }

    #[test]
    fn invalid_memory_mode_lists_valid_ones() {
        let p = by_key("mi300x-dpx-nps1-fw").unwrap();
        let mut hive = node(Dpx, Nps1);
        assert_eq!(
            set_memory(&p, &mut hive, MemoryMode::Nps8),
            Err(RuleError::Inval {
                valid: vec![Nps1, Nps4]
            })
        );
        assert_eq!(
            set_memory(&p, &mut hive, Nps2),
            Err(RuleError::Inval {
                valid: vec![Nps1, Nps4]
            })
        );
    }

    #[test]
    fn renumbering_after_changes() {
        let p = by_key("mi300x").unwrap();
        let mut g = node(Spx, Nps1);
        assert_eq!(enumerate(&p, &g).len(), 8);
        set_compute(&p, &mut g[0], Cpx, false).unwrap();
        let l = enumerate(&p, &g);
        assert_eq!(l.len(), 15);
        // GPU 1's single partition moved from index 1 to index 8.
        assert_eq!(l.iter().find(|x| x.phys == 1).unwrap().index, 8);
        let all_dpx = node(Dpx, Nps2);
        assert_eq!(enumerate(&p, &all_dpx).len(), 16);
        assert_eq!(enumerate(&p, &node(Cpx, Nps4)).len(), 64);
    }
}
