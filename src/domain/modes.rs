//! Compute (accelerator) and memory (NPS) partition modes, with the names amd-smi prints.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Compute (accelerator) partition mode: how the XCDs of one physical GPU are grouped into
/// logical GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ComputeMode {
    /// Single partition: all XCDs are one logical GPU.
    Spx,
    /// Dual.
    Dpx,
    /// Triple (MI300A only).
    Tpx,
    /// Quad.
    Qpx,
    /// Core: one logical GPU per XCD.
    Cpx,
}

/// Memory (NPS) partition mode: how HBM is split into NUMA domains. Hive-wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum MemoryMode {
    /// One memory domain.
    Nps1,
    /// Two.
    Nps2,
    /// Four.
    Nps4,
    /// Eight (defined, not offered on MI300X).
    Nps8,
}

impl ComputeMode {
    /// All modes in partition-count order.
    pub const ALL: [Self; 5] = [Self::Spx, Self::Dpx, Self::Tpx, Self::Qpx, Self::Cpx];

    /// The amd-smi spelling.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Spx => "SPX",
            Self::Dpx => "DPX",
            Self::Tpx => "TPX",
            Self::Qpx => "QPX",
            Self::Cpx => "CPX",
        }
    }

    /// Logical GPUs per physical GPU in this mode, given the device's XCD count (CPX = one per
    /// XCD, so it depends on the product: 8 on MI300X, 4 on MI308X).
    pub const fn partitions(self, xcds: u32) -> u32 {
        match self {
            Self::Spx => 1,
            Self::Dpx => 2,
            Self::Tpx => 3,
            Self::Qpx => 4,
            Self::Cpx => xcds,
        }
    }
}

impl MemoryMode {
    /// All modes.
    pub const ALL: [Self; 4] = [Self::Nps1, Self::Nps2, Self::Nps4, Self::Nps8];

    /// The amd-smi spelling.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Nps1 => "NPS1",
            Self::Nps2 => "NPS2",
            Self::Nps4 => "NPS4",
            Self::Nps8 => "NPS8",
        }
    }

    /// Number of memory domains.
    pub const fn domains(self) -> u32 {
        match self {
            Self::Nps1 => 1,
            Self::Nps2 => 2,
            Self::Nps4 => 4,
            Self::Nps8 => 8,
        }
    }
}

impl fmt::Display for ComputeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for MemoryMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A mode name that is not one amd-smi knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown partition mode {0:?}")]
pub struct UnknownMode(pub String);

impl FromStr for ComputeMode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // amd-smi marks the current profile with a trailing '*' ("DPX*").
        let t = s.trim().trim_end_matches('*');
        Self::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| UnknownMode(s.to_string()))
    }
}

impl FromStr for MemoryMode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().trim_end_matches('*');
        Self::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| UnknownMode(s.to_string()))
    }
}

/// Parses amd-smi's comma-separated caps list ("NPS1,NPS2,NPS4"); unknown names are skipped.
pub fn parse_memory_caps(s: &str) -> Vec<MemoryMode> {
    s.split(',').filter_map(|p| p.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_accept_current_marker() {
        for m in ComputeMode::ALL {
            assert_eq!(m.name().parse::<ComputeMode>(), Ok(m));
        }
        assert_eq!("dpx*".parse::<ComputeMode>(), Ok(ComputeMode::Dpx));
        assert!("XPX".parse::<ComputeMode>().is_err());
        assert_eq!(
            parse_memory_caps("NPS1,NPS4"),
            vec![MemoryMode::Nps1, MemoryMode::Nps4]
        );
    }

    #[test]
    fn cpx_partition_count_follows_xcds() {
        assert_eq!(ComputeMode::Cpx.partitions(8), 8);
        assert_eq!(ComputeMode::Cpx.partitions(4), 4);
        assert_eq!(ComputeMode::Dpx.partitions(8), 2);
    }
}

/// How the driver is reloaded after a memory-mode change (from the amd-smi version).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reload {
    /// ROCm 6.3/6.4: `set -M` reloads by itself.
    InsideSetMemory,
    /// ROCm 7.0-7.11: `amd-smi reset -r`.
    ResetReload,
    /// ROCm 7.12+: `modprobe -r amdgpu && modprobe amdgpu`.
    Modprobe,
}
