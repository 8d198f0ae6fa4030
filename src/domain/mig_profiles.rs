//! NVIDIA MIG as a GPU has it: the GPU-instance profiles it offers (with their SM counts and the
//! memory slices each may start at), its MIG state, and NVIDIA's profile tables for when the
//! device cannot be asked. The placement rules (where an instance may start, what overlaps)
//! and the naming of an instance read back (by profile id, else SMs and memory together) live
//! here, so the planner, the collector and the simulated nvidia-smi share one copy. A leaf of
//! the snapshot.

use serde::{Deserialize, Serialize};

/// Memory slices of a MIG GPU (A100, H100, H200: eight; an instance occupies a run of them).
pub const MEMORY_SLICES: u32 = 8;

/// One GPU-instance profile (`nvidia-smi mig -lgip`, `-lgipp`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigProfile {
    /// Profile id (what `-cgi` takes).
    pub id: u32,
    /// Name (`1g.18gb`, `3g.71gb`, `1g.18gb+me`).
    pub name: String,
    /// Compute slices (of 7).
    pub compute_slices: u32,
    /// Memory slices (of 8): also how many slices an instance of it occupies.
    pub memory_slices: u32,
    /// Most instances of it on one GPU.
    pub max_instances: u32,
    /// Its memory, MiB.
    pub memory_mib: u64,
    /// Its streaming multiprocessors (0: not known, as in recordings made before partop read
    /// them).
    #[serde(default)]
    pub sms: u32,
    /// Optical-flow accelerators (1 on the `+me` media-extension profile and on the whole GPU;
    /// what tells `1g.18gb+me` from `1g.18gb`, which have the same SMs and memory).
    #[serde(default)]
    pub ofa: u32,
    /// The memory slices an instance of it may start at (`-lgipp`); empty: NVIDIA's standard
    /// placements for its size ([`standard_placements`]).
    #[serde(default)]
    pub placements: Vec<u32>,
}

impl MigProfile {
    /// Where an instance of this profile may start.
    pub fn starts(&self) -> Vec<u32> {
        if self.placements.is_empty() {
            standard_placements(self.compute_slices, self.memory_slices)
        } else {
            self.placements.clone()
        }
    }
}

/// NVIDIA's placements on an eight-memory-slice GPU, as `nvidia-smi mig -lgipp` lists them on an
/// H100 and an H200 (docs/nvidia.md) and the MIG user guide draws them for the A100: 1-slice
/// instances start anywhere in 0-6, 2-slice ones at 0, 2, 4 (and 6 for the 1g profile with two
/// memory slices), 4-slice ones at 0 or 4 (the 4g only at 0), the whole GPU at 0.
pub fn standard_placements(compute: u32, memory: u32) -> Vec<u32> {
    match (compute, memory) {
        (1, 1) => (0..7).collect(),
        (1, 2) => vec![0, 2, 4, 6],
        (2, 2) => vec![0, 2, 4],
        (3, 4) => vec![0, 4],
        (4, 4) | (7, 8) => vec![0],
        (_, m) if m > 0 && m <= MEMORY_SLICES => {
            (0..=MEMORY_SLICES - m).step_by(m as usize).collect()
        }
        _ => vec![],
    }
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

#[expect(clippy::too_many_arguments, reason = "one row of NVIDIA's table")]
fn p(id: u32, name: &str, c: u32, m: u32, max: u32, mib: u64, sms: u32, ofa: u32) -> MigProfile {
    MigProfile {
        id,
        name: name.into(),
        compute_slices: c,
        memory_slices: m,
        max_instances: max,
        memory_mib: mib,
        sms,
        ofa,
        placements: standard_placements(c, m),
    }
}

/// The products partop has a profile table for (what `partop sim nvidia-init` can simulate).
pub const KNOWN_PRODUCTS: [&str; 4] = [
    "NVIDIA A100-SXM4-40GB",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H200",
];

/// NVIDIA's profiles for products partop knows, used when the device cannot be asked (MIG
/// disabled hides them from `-lgip`; NVML's profile info carries no name), and by the
/// simulated nvidia-smi. H100 and H200: ids, SMs, memory and placements as NVML and
/// `nvidia-smi mig -lgipp` reported them on the lent machines (driver 580.159.04,
/// docs/nvidia.md). A100: the MIG user guide's table and `-lgip` as published (not measured
/// here). A product not matched here (H100 PCIe or NVL, GH200, B200) gets none: its profiles
/// come from NVML, or are not known.
pub fn table_profiles(product: &str) -> Option<Vec<MigProfile>> {
    let n = product.to_ascii_uppercase();
    if n.contains("H200") && !n.contains("NVL") {
        Some(vec![
            p(19, "1g.18gb", 1, 1, 7, 16_384, 16, 0),
            p(20, "1g.18gb+me", 1, 1, 1, 16_384, 16, 1),
            p(15, "1g.35gb", 1, 2, 4, 33_280, 26, 0),
            p(14, "2g.35gb", 2, 2, 3, 33_280, 32, 0),
            p(9, "3g.71gb", 3, 4, 2, 71_424, 60, 0),
            p(5, "4g.71gb", 4, 4, 1, 71_424, 64, 0),
            p(0, "7g.141gb", 7, 8, 1, 143_360, 132, 1),
        ])
    } else if n.contains("H100") && n.contains("80GB") && n.contains("HBM3") {
        Some(vec![
            p(19, "1g.10gb", 1, 1, 7, 9_984, 16, 0),
            p(20, "1g.10gb+me", 1, 1, 1, 9_984, 16, 1),
            p(15, "1g.20gb", 1, 2, 4, 20_096, 26, 0),
            p(14, "2g.20gb", 2, 2, 3, 20_096, 32, 0),
            p(9, "3g.40gb", 3, 4, 2, 40_448, 60, 0),
            p(5, "4g.40gb", 4, 4, 1, 40_448, 64, 0),
            p(0, "7g.80gb", 7, 8, 1, 81_152, 132, 1),
        ])
    } else if n.contains("A100") && n.contains("80GB") {
        Some(vec![
            p(19, "1g.10gb", 1, 1, 7, 9_728, 14, 0),
            p(20, "1g.10gb+me", 1, 1, 1, 9_728, 14, 1),
            p(15, "1g.20gb", 1, 2, 4, 19_968, 14, 0),
            p(14, "2g.20gb", 2, 2, 3, 19_968, 28, 0),
            p(9, "3g.40gb", 3, 4, 2, 40_192, 42, 0),
            p(5, "4g.40gb", 4, 4, 1, 40_192, 56, 0),
            p(0, "7g.80gb", 7, 8, 1, 80_640, 98, 1),
        ])
    } else if n.contains("A100") && n.contains("40GB") {
        Some(vec![
            p(19, "1g.5gb", 1, 1, 7, 4_864, 14, 0),
            p(20, "1g.5gb+me", 1, 1, 1, 4_864, 14, 1),
            p(15, "1g.10gb", 1, 2, 4, 9_856, 14, 0),
            p(14, "2g.10gb", 2, 2, 3, 9_856, 28, 0),
            p(9, "3g.20gb", 3, 4, 2, 19_968, 42, 0),
            p(5, "4g.20gb", 4, 4, 1, 19_968, 56, 0),
            p(0, "7g.40gb", 7, 8, 1, 40_192, 98, 1),
        ])
    } else {
        None
    }
}

/// What a MIG device read back shows of itself (NVML's device attributes, or `-q -x`'s
/// `mig_device`): enough to tell its profile without its name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceShape {
    /// Profile id, when the source names it.
    pub profile_id: Option<u32>,
    /// Compute slices of its GPU instance (NVML; `-q -x` does not say).
    pub slices: Option<u32>,
    /// SMs.
    pub sms: Option<u32>,
    /// Memory, MiB.
    pub memory_mib: Option<u64>,
    /// Optical-flow accelerators.
    pub ofa: Option<u32>,
}

/// A device's reported memory may sit a little below the profile's (reserved MiB); beyond this
/// share it is another profile.
const MEMORY_SLACK: f64 = 0.04;

/// The profile a MIG device is an instance of: by profile id where the source gives one, else by
/// SMs and memory together (and compute slices where known; the optical-flow unit tells the
/// `+me` profile from its plain twin). Never by memory alone: `2g.35gb` and `1g.35gb` have the
/// same memory, `4g.71gb` and `3g.71gb` too. Err says why none or several fit.
pub fn identify<'a>(
    profiles: &'a [MigProfile],
    seen: &InstanceShape,
) -> Result<&'a MigProfile, String> {
    if let Some(id) = seen.profile_id {
        return profiles
            .iter()
            .find(|p| p.id == id)
            .ok_or_else(|| format!("profile id {id} is not among the device's profiles"));
    }
    let (Some(sms), Some(mem)) = (seen.sms, seen.memory_mib) else {
        return Err("the device reports neither its profile nor its SMs and memory".into());
    };
    #[expect(
        clippy::cast_precision_loss,
        reason = "MiB, compared within a few percent"
    )]
    let near = |p: &MigProfile| {
        let want = p.memory_mib as f64;
        mem as f64 <= want * (1.0 + MEMORY_SLACK) && mem as f64 >= want * (1.0 - MEMORY_SLACK)
    };
    let fits: Vec<&MigProfile> = profiles
        .iter()
        .filter(|p| p.sms == sms && near(p))
        .filter(|p| seen.slices.is_none_or(|s| s == p.compute_slices))
        .collect();
    let fits: Vec<&MigProfile> = if fits.len() > 1 {
        let ofa = seen.ofa.unwrap_or(0);
        fits.into_iter()
            .filter(|p| (p.ofa > 0) == (ofa > 0))
            .collect()
    } else {
        fits
    };
    match fits.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "no profile of this device has {sms} SMs and {mem} MiB"
        )),
        many => Err(format!(
            "{sms} SMs and {mem} MiB fit several profiles ({})",
            many.iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Where each instance of a layout starts: one instance per entry of `layout` (profile ids), the
/// memory slices they occupy disjoint and each start one its profile allows. Larger instances
/// are placed first (as mig-parted orders them) and each at the lowest start that leaves the
/// rest placeable; `taken` are slices already occupied. None when the layout cannot be placed.
pub fn place(
    profiles: &[MigProfile],
    layout: &[u32],
    taken: &[(u32, u32)],
) -> Option<Vec<(u32, u32)>> {
    let mut order: Vec<&MigProfile> = layout
        .iter()
        .map(|id| profiles.iter().find(|p| p.id == *id))
        .collect::<Option<_>>()?;
    order.sort_by_key(|p| (std::cmp::Reverse((p.memory_slices, p.compute_slices)), p.id));
    let mut used = [false; MEMORY_SLICES as usize];
    for &(start, size) in taken {
        for s in start..(start + size).min(MEMORY_SLICES) {
            used[s as usize] = true;
        }
    }
    let mut out = Vec::with_capacity(order.len());
    fill(&order, &mut used, &mut out).then_some(out)
}

fn fill(
    order: &[&MigProfile],
    used: &mut [bool; MEMORY_SLICES as usize],
    out: &mut Vec<(u32, u32)>,
) -> bool {
    let Some((p, rest)) = order.split_first() else {
        return true;
    };
    for start in p.starts() {
        let span = start..start + p.memory_slices;
        if span.end > MEMORY_SLICES || span.clone().any(|s| used[s as usize]) {
            continue;
        }
        span.clone().for_each(|s| used[s as usize] = true);
        out.push((p.id, start));
        if fill(rest, used, out) {
            return true;
        }
        out.pop();
        span.for_each(|s| used[s as usize] = false);
    }
    false
}

/// Every layout the device can hold (profile ids, sorted, each multiset once), from its profiles'
/// instance limits and placements; the empty layout first.
pub fn layouts(profiles: &[MigProfile]) -> Vec<Vec<u32>> {
    let mut ids: Vec<u32> = profiles.iter().map(|p| p.id).collect();
    ids.sort_unstable();
    let mut out: Vec<Vec<u32>> = vec![Vec::new()];
    let mut k = 0;
    // Grow the layouts one instance at a time; keep those that place.
    while k < out.len() {
        let base = out[k].clone();
        k += 1;
        for &id in ids
            .iter()
            .filter(|id| base.last().is_none_or(|l| **id >= *l))
        {
            let Some(p) = profiles.iter().find(|p| p.id == id) else {
                continue;
            };
            if base.iter().filter(|x| **x == id).count() >= p.max_instances as usize {
                continue;
            }
            let mut next = base.clone();
            next.push(id);
            if place(profiles, &next, &[]).is_some() {
                out.push(next);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_has_the_measured_geometry() {
        for product in KNOWN_PRODUCTS {
            let t = table_profiles(product).unwrap();
            assert_eq!(t.len(), 7, "{product}");
            // 128 states: MIG on with no instance, and 127 layouts (the same on every product,
            // since they share the geometry).
            assert_eq!(layouts(&t).len(), 128, "{product}");
        }
        assert!(table_profiles("NVIDIA H100 NVL").is_none());
        assert!(table_profiles("NVIDIA H200 NVL").is_none());
        assert!(table_profiles("NVIDIA H100 PCIe").is_none());
    }

    #[test]
    fn instances_are_named_by_sms_and_memory_together() {
        let t = table_profiles("NVIDIA H200").unwrap();
        let seen = |sms, mem, ofa| InstanceShape {
            sms: Some(sms),
            memory_mib: Some(mem),
            ofa: Some(ofa),
            ..InstanceShape::default()
        };
        assert_eq!(identify(&t, &seen(32, 33_280, 0)).unwrap().name, "2g.35gb");
        assert_eq!(identify(&t, &seen(26, 33_280, 0)).unwrap().name, "1g.35gb");
        assert_eq!(identify(&t, &seen(64, 71_424, 0)).unwrap().name, "4g.71gb");
        assert_eq!(identify(&t, &seen(60, 71_424, 0)).unwrap().name, "3g.71gb");
        assert_eq!(
            identify(&t, &seen(16, 16_384, 1)).unwrap().name,
            "1g.18gb+me"
        );
        assert_eq!(identify(&t, &seen(16, 16_384, 0)).unwrap().name, "1g.18gb");
        assert_eq!(
            identify(&t, &seen(132, 143_000, 1)).unwrap().name,
            "7g.141gb"
        );
        assert!(identify(&t, &seen(32, 71_424, 0)).is_err());
        assert!(identify(&t, &InstanceShape::default()).is_err());
        let by_id = InstanceShape {
            profile_id: Some(14),
            ..InstanceShape::default()
        };
        assert_eq!(identify(&t, &by_id).unwrap().name, "2g.35gb");
    }

    #[test]
    fn placement_puts_large_instances_first_and_refuses_what_cannot_fit() {
        let t = table_profiles("NVIDIA H200").unwrap();
        // 1g + 1g + 2g + 3g: the 3g goes to 0 or 4, the rest around it.
        let p = place(&t, &[19, 19, 14, 9], &[]).unwrap();
        assert_eq!(p, [(9, 4), (14, 0), (19, 2), (19, 3)]);
        // With the 3g taken at 0-3 already, the rest must fit in 4-7: 2g at 4, 1g at 6, and
        // no start for a second 1g (slice 7 starts nothing).
        assert!(place(&t, &[19, 19, 14], &[(0, 4)]).is_none());
        assert_eq!(place(&t, &[19, 14], &[(0, 4)]).unwrap(), [(14, 4), (19, 6)]);
        // 4g + 3g fits (0-3 and 4-7); 4g + 2g + 2g + 1g does not (no 2g start in 4-7 for two).
        assert!(place(&t, &[5, 9], &[]).is_some());
        assert!(place(&t, &[5, 14, 14, 19], &[]).is_none());
        // 1g.35gb takes two memory slices: four of them fill the GPU.
        assert!(place(&t, &[15, 15, 15, 15], &[]).is_some());
        assert!(place(&t, &[15, 15, 15, 15, 19], &[]).is_none());
    }
}
