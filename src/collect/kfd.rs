//! The KFD view of the node (under a configurable sysfs root): the topology's GPU nodes (gpu_id,
//! render minor, location → BDF and partition) and each process's per-GPU VRAM, SDMA time and CU
//! occupancy from `/sys/class/kfd/kfd/proc/PID/`. Read-only files; partop never opens /dev/kfd.

use std::path::Path;

/// One KFD GPU node (a logical GPU).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfdNode {
    /// Topology node number.
    pub node: u32,
    /// KFD gpu id (amd-smi's `kfd_id`).
    pub gpu_id: u64,
    /// DRM render minor (128 = renderD128).
    pub render_minor: Option<u32>,
    /// PCI domain.
    pub domain: u32,
    /// `(bus << 8) | devfn`, with the partition in the function bits.
    pub location_id: u32,
    /// SIMDs (CUs x 4).
    pub simd_count: u32,
    /// XCCs in this node (partition).
    pub num_xcc: u32,
    /// Its memory bank, bytes (`mem_banks/0/properties size_in_bytes`).
    pub mem_bytes: Option<u64>,
}

impl KfdNode {
    /// The physical GPU's BDF without function (`0000:0c:00`).
    pub fn bdf(&self) -> String {
        let bus = (self.location_id >> 8) & 0xff;
        let dev = (self.location_id >> 3) & 0x1f;
        format!("{:04x}:{bus:02x}:{dev:02x}", self.domain)
    }

    /// The partition (XCP) index: the function bits.
    pub const fn partition(&self) -> u32 {
        self.location_id & 7
    }

    /// CUs.
    pub const fn cus(&self) -> u32 {
        self.simd_count / 4
    }
}

fn props(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// What an unreadable node means on screen.
const NOT_SHOWN: &str =
    "its logical GPU is not shown (its number stays unused: the others keep theirs)";

/// The GPU nodes of the KFD topology (CPU nodes, gpu_id 0, are skipped), by node number.
pub fn topology(sys_root: &Path) -> Vec<KfdNode> {
    topology_checked(sys_root).0
}

/// The GPU nodes, and for each node directory that could not be read, why (a node is never
/// dropped silently: its logical GPU would vanish from the screen without a word).
pub fn topology_checked(sys_root: &Path) -> (Vec<KfdNode>, Vec<String>) {
    let dir = sys_root.join("class/kfd/kfd/topology/nodes");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return (Vec::new(), Vec::new());
    };
    let mut errors = Vec::new();
    let mut nodes: Vec<KfdNode> = entries
        .flatten()
        .filter_map(|e| {
            let node: u32 = e.file_name().to_str()?.parse().ok()?;
            let read = |f: &str| {
                crate::collect::small_file::text(&e.path().join(f)).map_err(|err| {
                    format!("KFD node {node}: {}: {err}", e.path().join(f).display())
                })
            };
            let gpu_id = match read("gpu_id").map(|t| t.trim().parse::<u64>()) {
                Ok(Ok(id)) => id,
                Ok(Err(_)) => {
                    errors.push(format!(
                        "KFD node {node}: gpu_id is not a number; {NOT_SHOWN}"
                    ));
                    return None;
                }
                Err(err) => {
                    errors.push(format!("{err}; {NOT_SHOWN}"));
                    return None;
                }
            };
            if gpu_id == 0 {
                return None;
            }
            let p = match read("properties") {
                Ok(p) => p,
                Err(err) => {
                    errors.push(format!("{err}; {NOT_SHOWN}"));
                    return None;
                }
            };
            let u32_of = |k: &str| props(&p, k).and_then(|v| u32::try_from(v).ok());
            Some(KfdNode {
                node,
                gpu_id,
                render_minor: u32_of("drm_render_minor").filter(|m| *m > 0),
                domain: u32_of("domain").unwrap_or(0),
                location_id: u32_of("location_id").unwrap_or(0),
                simd_count: u32_of("simd_count").unwrap_or(0),
                num_xcc: u32_of("num_xcc").unwrap_or(1),
                mem_bytes: crate::collect::small_file::text(
                    &e.path().join("mem_banks/0/properties"),
                )
                .ok()
                .and_then(|t| props(&t, "size_in_bytes")),
            })
        })
        .collect();
    nodes.sort_by_key(|n| n.node);
    errors.sort();
    for (id, which) in shared_ids(&nodes) {
        errors.push(format!(
            "KFD nodes {} share gpu_id {id}: a process's use of it cannot be told apart, so it is attributed to neither logical GPU (N/A)",
            which
                .iter()
                .map(|n| format!("{} ({}.{})", n.node, n.bdf(), n.partition()))
                .collect::<Vec<_>>()
                .join(" and ")
        ));
    }
    (nodes, errors)
}

/// The gpu ids more than one node claims, and those nodes: KFD's per-process files are keyed by
/// gpu id, so use on a shared one belongs to no logical GPU that can be named.
pub fn shared_ids(nodes: &[KfdNode]) -> std::collections::BTreeMap<u64, Vec<&KfdNode>> {
    let mut by_id: std::collections::BTreeMap<u64, Vec<&KfdNode>> =
        std::collections::BTreeMap::new();
    for n in nodes {
        by_id.entry(n.gpu_id).or_default().push(n);
    }
    by_id.retain(|_, v| v.len() > 1);
    by_id
}

/// Why a process's use of a shared gpu id is not shown on a logical GPU.
pub fn shared_reason(id: u64) -> String {
    format!("KFD gpu_id {id} is claimed by two nodes: which logical GPU it is cannot be told")
}

/// A process's use of one GPU, as KFD reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KfdUse {
    /// KFD gpu id.
    pub gpu_id: u64,
    /// `vram_<gpuid>`, bytes.
    pub vram_bytes: Option<u64>,
    /// `sdma_<gpuid>`, microseconds.
    pub sdma_us: Option<u64>,
    /// `stats_<gpuid>/cu_occupancy`, CUs.
    pub cu_occupancy: Option<u32>,
}

fn num(path: &Path) -> Option<u64> {
    crate::collect::small_file::text(path)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Per-GPU use of `pid` from `/sys/class/kfd/kfd/proc/PID/`; `None` if KFD has no entry for it.
pub fn process_use(sys_root: &Path, pid: u32) -> Option<Vec<KfdUse>> {
    let dir = sys_root.join("class/kfd/kfd/proc").join(pid.to_string());
    let entries = std::fs::read_dir(&dir).ok()?;
    let mut out: Vec<KfdUse> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id: u64 = name.strip_prefix("vram_")?.parse().ok()?;
            Some(KfdUse {
                gpu_id: id,
                vram_bytes: num(&e.path()),
                sdma_us: num(&dir.join(format!("sdma_{id}"))),
                cu_occupancy: num(&dir.join(format!("stats_{id}/cu_occupancy")))
                    .and_then(|v| u32::try_from(v).ok()),
            })
        })
        .collect();
    out.sort_by_key(|u| u.gpu_id);
    Some(out)
}

/// Numbers the logical GPUs as amd-smi does, from identity alone: physical GPUs in BDF order,
/// each taking as many numbers as its compute mode has partitions (or as its highest partition
/// seen, where the mode is not known), a partition's number its GPU's first plus its partition
/// id. A KFD node that could not be read leaves its number unused: every other logical GPU keeps
/// the number amd-smi gives it (counting the nodes read would shift every later one).
pub fn number_as_amd_smi(gpus: &mut [crate::domain::PhysicalGpu]) {
    let mut first = 0u32;
    for g in gpus.iter_mut() {
        let seen = g
            .partitions
            .iter()
            .map(|l| l.partition_id.saturating_add(1))
            .max()
            .unwrap_or(0);
        let by_mode = g
            .compute_partition
            .zip(g.xcd_count)
            .map_or(0, |(c, x)| c.partitions(x));
        for l in &mut g.partitions {
            l.gpu_id = first.saturating_add(l.partition_id);
        }
        first = first.saturating_add(by_mode.max(seen));
    }
}

/// Physical and logical GPUs as the KFD topology describes them (for hosts or captured trees
/// without amd-smi). Logical GPUs are numbered in BDF order, then partition, provisionally:
/// [`number_as_amd_smi`] gives the final numbers once the compute modes are read.
pub fn gpus_from_topology(nodes: &[KfdNode], at_ms: u64) -> Vec<crate::domain::PhysicalGpu> {
    use crate::domain::provenance::{SourceKind, note};
    use crate::domain::snapshot::{LogicalGpu, PhysicalGpu};
    let mut sorted: Vec<&KfdNode> = nodes.iter().collect();
    sorted.sort_by_key(|n| (n.bdf(), n.partition()));
    let mut gpus: Vec<PhysicalGpu> = Vec::new();
    for (i, n) in sorted.into_iter().enumerate() {
        let bdf = n.bdf();
        if gpus.last().is_none_or(|g| g.bdf != bdf) {
            gpus.push(PhysicalGpu {
                bdf: bdf.clone(),
                product: "unknown GPU".into(),
                ..PhysicalGpu::default()
            });
        }
        let mut l = LogicalGpu {
            gpu_id: u32::try_from(i).unwrap_or(u32::MAX),
            partition_id: n.partition(),
            bdf: format!("{bdf}.{}", n.partition()),
            cu_count: Some(n.cus()),
            render_node: n.render_minor.map(|m| format!("renderD{m}")),
            kfd_id: Some(n.gpu_id),
            node_id: Some(n.node),
            ..LogicalGpu::default()
        };
        let d = format!("/sys/class/kfd/kfd/topology/nodes/{}", n.node);
        for f in ["cu_count", "render_node", "kfd_id"] {
            note(&mut l.provenance, f, SourceKind::Sysfs, &d, at_ms, None);
        }
        if let Some(g) = gpus.last_mut() {
            g.partitions.push(l);
        }
    }
    gpus
}

#[cfg(test)]
mod numbering {
    use super::number_as_amd_smi;
    use crate::domain::ComputeMode;
    use crate::domain::snapshot::{LogicalGpu, PhysicalGpu};

    fn node(mode: ComputeMode) -> Vec<PhysicalGpu> {
        (0..8u32)
            .map(|g| PhysicalGpu {
                bdf: format!("0000:{:02x}:00", 0x05 + g * 0x20),
                compute_partition: Some(mode),
                xcd_count: Some(8),
                partitions: (0..mode.partitions(8))
                    .map(|p| LogicalGpu {
                        partition_id: p,
                        ..LogicalGpu::default()
                    })
                    .collect(),
                ..PhysicalGpu::default()
            })
            .collect()
    }

    fn ids(gpus: &[PhysicalGpu]) -> Vec<(String, u32, u32)> {
        gpus.iter()
            .flat_map(|g| {
                g.partitions
                    .iter()
                    .map(|l| (g.bdf.clone(), l.partition_id, l.gpu_id))
            })
            .collect()
    }

    /// Every logical GPU of 8 MI300X in each compute mode removed in turn (8 x (1+2+4+8) = 120
    /// cases): every other keeps the number the whole node gives it.
    #[test]
    fn a_missing_partition_never_renumbers_the_others() {
        let mut cases = 0;
        for mode in [
            ComputeMode::Spx,
            ComputeMode::Dpx,
            ComputeMode::Qpx,
            ComputeMode::Cpx,
        ] {
            let mut whole = node(mode);
            number_as_amd_smi(&mut whole);
            let want = ids(&whole);
            for (n, w) in want.iter().enumerate() {
                assert_eq!(w.2, u32::try_from(n).unwrap(), "BDF order, then partition");
            }
            for (g, p, _) in &want {
                let mut holed = node(mode);
                holed
                    .iter_mut()
                    .find(|x| x.bdf == *g)
                    .unwrap()
                    .partitions
                    .retain(|l| l.partition_id != *p);
                number_as_amd_smi(&mut holed);
                let mut expect = want.clone();
                expect.retain(|(bg, bp, _)| !(bg == g && bp == p));
                assert_eq!(ids(&holed), expect, "{mode:?}: {g}.{p} missing");
                cases += 1;
            }
        }
        assert_eq!(cases, 120);
    }
}
