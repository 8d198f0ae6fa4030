//! The product table: real figures for the Instinct parts partop knows, and the partition
//! combinations each offers. This is a *fallback*: when the device can be asked
//! (`amd-smi partition --accelerator` / `--memory`), its own answer wins, and every use of this
//! table is marked with [`SourceKind::ProductTable`](super::SourceKind) so the screen can say so.
//! Figures and sources: `docs/reference.md` (from amd-smi.md §6.1).

use super::modes::{ComputeMode, MemoryMode};
use serde::{Deserialize, Serialize};

/// One compute mode and the memory modes it may be combined with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    /// amd-smi's profile index (what `set -C` echoes as `profile #N`).
    pub index: u32,
    /// The compute mode.
    pub compute: ComputeMode,
    /// The memory modes allowed with it.
    pub memory: Vec<MemoryMode>,
}

/// A product's fixed figures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Product {
    /// Short key used in scenario files (`mi300x`).
    pub key: &'static str,
    /// Market name as amd-smi prints it.
    pub market_name: &'static str,
    /// PCI device id (`0x74a1`).
    pub device_id: &'static str,
    /// gfx target.
    pub arch: &'static str,
    /// XCDs (accelerator complex dies) per physical GPU.
    pub xcds: u32,
    /// CUs per XCD.
    pub cus_per_xcd: u32,
    /// VRAM total as amd-smi reports it, in MiB ("MB" in its output).
    pub vram_mb: u64,
    /// Board power cap in watts (typical).
    pub power_cap_w: u32,
    /// Offered profiles, in profile-index order.
    pub profiles: Vec<Profile>,
    /// The compute mode the driver starts in after a reload, per memory mode.
    pub default_compute: Vec<(MemoryMode, ComputeMode)>,
    /// Where the figures come from.
    pub source: &'static str,
}

impl Product {
    /// Total CUs.
    pub const fn cus(&self) -> u32 {
        self.xcds * self.cus_per_xcd
    }

    /// Whether `compute` + `memory` is offered.
    pub fn offers(&self, compute: ComputeMode, memory: MemoryMode) -> bool {
        offers(&self.profiles, compute, memory)
    }

    /// The compute mode after a driver reload into `memory`.
    pub fn default_compute_for(&self, memory: MemoryMode) -> ComputeMode {
        self.default_compute
            .iter()
            .find(|(m, _)| *m == memory)
            .map_or(ComputeMode::Spx, |(_, c)| *c)
    }
}

/// Profiles as text: `SPX:NPS1 DPX:NPS1/NPS2 …`.
pub fn profiles_text(profiles: &[Profile]) -> String {
    profiles
        .iter()
        .map(|p| {
            format!(
                "{}:{}",
                p.compute,
                p.memory
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("/")
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a profile list allows the combination.
pub fn offers(profiles: &[Profile], compute: ComputeMode, memory: MemoryMode) -> bool {
    profiles
        .iter()
        .any(|p| p.compute == compute && p.memory.contains(&memory))
}

fn p(index: u32, compute: ComputeMode, memory: &[MemoryMode]) -> Profile {
    Profile {
        index,
        compute,
        memory: memory.to_vec(),
    }
}

use ComputeMode::{Cpx, Dpx, Qpx, Spx};
use MemoryMode::{Nps1, Nps2, Nps4};

/// MI300X reload defaults: NPS4 moves the device to CPX (QSG tip); otherwise the mode with as
/// many partitions as memory domains.
fn mi300_defaults() -> Vec<(MemoryMode, ComputeMode)> {
    vec![(Nps1, Spx), (Nps2, Dpx), (Nps4, Cpx)]
}

/// Every product partop knows.
pub fn all() -> Vec<Product> {
    vec![
        Product {
            key: "mi300x",
            market_name: "AMD Instinct MI300X",
            device_id: "0x74a1",
            arch: "gfx942",
            xcds: 8,
            cus_per_xcd: 38,
            vram_mb: 196_592,
            power_cap_w: 750,
            profiles: vec![
                p(0, Spx, &[Nps1]),
                p(1, Dpx, &[Nps1, Nps2]),
                p(2, Qpx, &[Nps1, Nps4]),
                p(3, Cpx, &[Nps1, Nps4]),
            ],
            default_compute: mi300_defaults(),
            source: "AMD partition guide (amd-smi docs partition.md, MI300X overview)",
        },
        Product {
            key: "mi300x-dpx-nps1-fw",
            market_name: "AMD Instinct MI300X",
            device_id: "0x74a1",
            arch: "gfx942",
            xcds: 8,
            cus_per_xcd: 38,
            vram_mb: 196_592,
            power_cap_w: 750,
            profiles: vec![
                p(0, Spx, &[Nps1]),
                p(1, Dpx, &[Nps1]),
                p(2, Qpx, &[Nps1, Nps4]),
                p(3, Cpx, &[Nps1, Nps4]),
            ],
            default_compute: mi300_defaults(),
            source: "real MI300X node whose firmware lists DPX with NPS1 only (ROCm/amdsmi#132)",
        },
        Product {
            key: "mi325x",
            market_name: "AMD Instinct MI325X",
            device_id: "0x74a5",
            arch: "gfx942",
            xcds: 8,
            cus_per_xcd: 38,
            vram_mb: 262_128,
            power_cap_w: 1000,
            profiles: vec![
                p(0, Spx, &[Nps1]),
                p(1, Dpx, &[Nps1, Nps2]),
                p(2, Qpx, &[Nps1, Nps4]),
                p(3, Cpx, &[Nps1, Nps4]),
            ],
            default_compute: mi300_defaults(),
            source: "ROCm GPU specs (256 GB); profiles as MI300X per rocprofiler-compute mi_gpu_spec",
        },
        Product {
            key: "mi308x",
            market_name: "AMD Instinct MI308X",
            device_id: "0x74a2",
            arch: "gfx942",
            xcds: 4,
            cus_per_xcd: 20,
            vram_mb: 196_592,
            power_cap_w: 650,
            profiles: vec![
                p(0, Spx, &[Nps1]),
                p(1, Dpx, &[Nps1]),
                p(2, Cpx, &[Nps1, Nps4]),
            ],
            default_compute: vec![(Nps1, Spx), (Nps4, Cpx)],
            source: "rocprofiler-compute mi_gpu_spec (4 XCD x 20 CU); VRAM size assumed",
        },
        Product {
            key: "mi350x",
            market_name: "AMD Instinct MI350X",
            device_id: "0x75a0",
            arch: "gfx950",
            xcds: 8,
            cus_per_xcd: 32,
            vram_mb: 294_896,
            power_cap_w: 1000,
            profiles: vec![p(0, Spx, &[Nps1]), p(1, Dpx, &[Nps2]), p(2, Qpx, &[Nps2])],
            default_compute: vec![(Nps1, Spx), (Nps2, Dpx)],
            source: "AMD partitioning index (SPX/NPS1, DPX/NPS2; QPX/NPS2 from ROCm 7.13)",
        },
        Product {
            key: "mi355x",
            market_name: "AMD Instinct MI355X",
            device_id: "0x75a3",
            arch: "gfx950",
            xcds: 8,
            cus_per_xcd: 32,
            vram_mb: 294_896,
            power_cap_w: 1400,
            profiles: vec![p(0, Spx, &[Nps1]), p(1, Dpx, &[Nps2]), p(2, Qpx, &[Nps2])],
            default_compute: vec![(Nps1, Spx), (Nps2, Dpx)],
            source: "AMD partitioning index (SPX/NPS1, DPX/NPS2; QPX/NPS2 from ROCm 7.13)",
        },
    ]
}

/// Looks a product up by scenario key.
pub fn by_key(key: &str) -> Option<Product> {
    all().into_iter().find(|p| p.key.eq_ignore_ascii_case(key))
}

/// Looks a product up by PCI device id or market name (what amd-smi tells us). Prefers the
/// standard firmware variant.
pub fn identify(device_id: Option<&str>, market_name: Option<&str>) -> Option<Product> {
    let all = all();
    if let Some(id) = device_id
        && let Some(p) = all.iter().find(|p| p.device_id.eq_ignore_ascii_case(id))
    {
        return Some(p.clone());
    }
    let name = market_name?.to_ascii_uppercase();
    all.into_iter().find(|p| {
        let short = p
            .market_name
            .trim_start_matches("AMD Instinct ")
            .to_ascii_uppercase();
        name.contains(&short)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mi300x_figures_and_rules() {
        let m = by_key("mi300x").unwrap();
        assert_eq!(m.cus(), 304);
        assert_eq!(m.vram_mb, 196_592);
        assert!(m.offers(Spx, Nps1));
        assert!(!m.offers(Spx, Nps4), "SPX+NPS4 is invalid");
        assert!(m.offers(Dpx, Nps2));
        assert!(m.offers(Cpx, Nps4));
        assert!(
            !m.offers(Dpx, Nps4),
            "memory partitions cannot exceed compute partitions"
        );
        let fw = by_key("mi300x-dpx-nps1-fw").unwrap();
        assert!(!fw.offers(Dpx, Nps2));
    }

    #[test]
    fn every_product_obeys_domains_le_partitions() {
        for prod in all() {
            for prof in &prod.profiles {
                for m in &prof.memory {
                    assert!(
                        m.domains() <= prof.compute.partitions(prod.xcds),
                        "{} {} {m}",
                        prod.key,
                        prof.compute
                    );
                }
            }
        }
    }

    #[test]
    fn identify_by_device_id_or_name() {
        assert_eq!(identify(Some("0x74A1"), None).unwrap().key, "mi300x");
        assert_eq!(identify(None, Some("MI300X-O")).unwrap().key, "mi300x");
        assert_eq!(
            identify(None, Some("AMD Instinct MI355X")).unwrap().key,
            "mi355x"
        );
        assert!(identify(Some("0x1234"), Some("Radeon")).is_none());
    }
}
