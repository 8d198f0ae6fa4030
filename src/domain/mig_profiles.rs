//! NVIDIA MIG as a GPU has it: the GPU-instance profiles it offers and its MIG state; and the
//! published profile tables for when the device cannot be asked. A leaf of the snapshot.

use serde::{Deserialize, Serialize};

/// One GPU-instance profile (`nvidia-smi mig -lgip`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigProfile {
    /// Profile id (what `-cgi` takes).
    pub id: u32,
    /// Name (`1g.18gb`, `3g.71gb`, `1g.18gb+me`).
    pub name: String,
    /// Compute slices (of 7).
    pub compute_slices: u32,
    /// Memory slices (of 8).
    pub memory_slices: u32,
    /// Most instances of it on one GPU.
    pub max_instances: u32,
    /// Its memory, MiB.
    pub memory_mib: u64,
}

/// MIG state of one GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInfo {
    /// MIG mode now.
    pub enabled: bool,
    /// MIG mode after the next GPU reset (differs while a change is pending).
    pub pending: bool,
    /// Profiles the device offers.
    pub profiles: Vec<MigProfile>,
    /// Where the profiles came from (NVML, `nvidia-smi mig -lgip`, or partop's table).
    pub profiles_source: String,
}

fn p(id: u32, name: &str, c: u32, m: u32, max: u32, mib: u64) -> MigProfile {
    MigProfile {
        id,
        name: name.into(),
        compute_slices: c,
        memory_slices: m,
        max_instances: max,
        memory_mib: mib,
    }
}

/// NVIDIA's published profiles (MIG user guide, "Supported MIG profiles") for products partop
/// knows, used only when the device cannot be asked (MIG disabled hides them from `-lgip`).
pub fn table_profiles(product: &str) -> Option<Vec<MigProfile>> {
    let n = product.to_ascii_uppercase();
    if n.contains("H200") {
        // Memory as NVML reported it on a real H200 (driver 580.159.04, docs/nvidia.md).
        Some(vec![
            p(19, "1g.18gb", 1, 1, 7, 16_384),
            p(20, "1g.18gb+me", 1, 1, 1, 16_384),
            p(15, "1g.35gb", 1, 2, 4, 33_280),
            p(14, "2g.35gb", 2, 2, 3, 33_280),
            p(9, "3g.71gb", 3, 4, 2, 71_424),
            p(5, "4g.71gb", 4, 4, 1, 71_424),
            p(0, "7g.141gb", 7, 8, 1, 143_360),
        ])
    } else if n.contains("H100") {
        Some(vec![
            p(19, "1g.10gb", 1, 1, 7, 9_856),
            p(20, "1g.10gb+me", 1, 1, 1, 9_856),
            p(15, "1g.20gb", 1, 2, 4, 19_968),
            p(14, "2g.20gb", 2, 2, 3, 19_968),
            p(9, "3g.40gb", 3, 4, 2, 40_192),
            p(5, "4g.40gb", 4, 4, 1, 40_192),
            p(0, "7g.80gb", 7, 8, 1, 80_384),
        ])
    } else {
        None
    }
}
