//! Builds the domain model from parsed amd-smi output. Pure: the inputs are what the commands
//! printed (already parsed) and when; the output is physical GPUs with their logical GPUs, and
//! processes, each value with its provenance.
//!
//! Rules applied here (sources in `docs/reference.md`):
//! - identity is (physical BDF, partition id); the BDF function digit is the partition id;
//! - secondaries that report N/A modes inherit them from their primary;
//! - device-wide values (power, temperature, UMC) live on the primary only;
//! - a secondary's GFX busy comes from the primary's per-XCP `gfx_busy_inst.xcp_N`;
//! - a primary's reported VRAM total is the whole device: its own share comes from the layout.

use super::json::Q;
use super::schema::{ListEntry, MetricEntry, PartitionDoc, ProcessEntry, StaticEntry};
use crate::domain::layout::{PartitionShape, shapes};
use crate::domain::modes::{ComputeMode, MemoryMode, parse_memory_caps};
use crate::domain::product::{self, Profile};
use crate::domain::provenance::{Missing, Provenance, SourceKind, note};
use crate::domain::snapshot::{GpuUse, LogicalGpu, PhysicalGpu, Process};
use std::collections::{BTreeMap, HashMap};

/// The static reads (at start and after a change).
#[derive(Debug, Clone, Default)]
pub struct StaticData {
    /// `list -e`.
    pub list: Vec<ListEntry>,
    /// `static -a -b -v -p -l`.
    pub statics: Vec<StaticEntry>,
    /// `partition -c -m [-a]` (7.x only).
    pub partition: Option<PartitionDoc>,
    /// When read.
    pub at_ms: u64,
}

/// Splits `0000:05:00.1` into (`0000:05:00`, 1).
pub fn split_bdf(bdf: &str) -> (String, Option<u32>) {
    match bdf.rsplit_once('.') {
        Some((phys, f)) => (phys.to_ascii_lowercase(), f.parse().ok()),
        None => (bdf.to_ascii_lowercase(), None),
    }
}

struct Base {
    gpu: u32,
    bdf: String,
    phys: String,
    partition_id: u32,
    list: Option<usize>,
}

const LIST: &str = "amd-smi list -e";
const STATIC: &str = "amd-smi static";
const PARTITION: &str = "amd-smi partition -c -m";
const PROCESS: &str = "amd-smi process";

fn rec<T: ?Sized>(
    prov: &mut Provenance,
    field: &str,
    v: Option<&T>,
    source: SourceKind,
    detail: &str,
    at: u64,
    missing: Missing,
) {
    note(
        prov,
        field,
        source,
        detail,
        at,
        if v.is_some() { None } else { Some(missing) },
    );
}

/// A byte figure under the one range policy: the value, and what its absence means (N/A, or
/// out of range with the reason).
fn checked(q: Option<Q>) -> (Option<u64>, Missing) {
    match q.map(Q::bytes_checked) {
        Some(Ok(v)) => (v, Missing::NotAvailable),
        Some(Err(why)) => (None, Missing::OutOfRange(why)),
        None => (None, Missing::NotAvailable),
    }
}

/// Assembles GPUs and processes.
#[expect(
    clippy::too_many_lines,
    reason = "one pass over the node, kept in reading order"
)]
pub fn assemble(
    st: &StaticData,
    metric: Option<(&[MetricEntry], u64)>,
    process: Option<(&[ProcessEntry], u64)>,
) -> (Vec<PhysicalGpu>, Vec<Process>) {
    let at = st.at_ms;
    let statics: HashMap<u32, &StaticEntry> = st.statics.iter().map(|s| (s.gpu, s)).collect();
    let metrics: HashMap<u32, &MetricEntry> = metric
        .map(|(m, _)| m.iter().map(|e| (e.gpu, e)).collect())
        .unwrap_or_default();
    let m_at = metric.map_or(0, |(_, t)| t);

    // 1. The logical GPUs, from `list` (or `static` when list is missing).
    let mut bases: Vec<Base> = Vec::new();
    for (i, l) in st.list.iter().enumerate() {
        let bdf = l
            .bdf
            .get()
            .map(str::to_string)
            .or_else(|| {
                statics
                    .get(&l.gpu)
                    .and_then(|s| s.bus.as_ref()?.get()?.bdf.0.clone())
            })
            .unwrap_or_else(|| format!("unknown:{}", l.gpu));
        let (phys, func) = split_bdf(&bdf);
        let partition_id = l.partition_id.u32().or(func).unwrap_or(0);
        bases.push(Base {
            gpu: l.gpu,
            bdf,
            phys,
            partition_id,
            list: Some(i),
        });
    }
    if bases.is_empty() {
        for s in &st.statics {
            let bdf = s
                .bus
                .as_ref()
                .and_then(|b| b.get()?.bdf.0.clone())
                .unwrap_or_else(|| format!("unknown:{}", s.gpu));
            let (phys, func) = split_bdf(&bdf);
            let pid = s
                .partition
                .as_ref()
                .and_then(|p| p.get()?.partition_id.u32())
                .or(func)
                .unwrap_or(0);
            bases.push(Base {
                gpu: s.gpu,
                bdf,
                phys,
                partition_id: pid,
                list: None,
            });
        }
    }
    bases.sort_by_key(|b| b.gpu);

    // 2. Group by physical GPU, keeping amd-smi order.
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, Vec<&Base>> = HashMap::new();
    for b in &bases {
        if !groups.contains_key(&b.phys) {
            order.push(b.phys.clone());
        }
        groups.entry(b.phys.clone()).or_default().push(b);
    }

    let mut gpus = Vec::with_capacity(order.len());
    let mut cu_by_gpu: HashMap<u32, u32> = HashMap::new();
    for phys in order {
        let mut members = groups.remove(&phys).unwrap_or_default();
        members.sort_by_key(|b| b.partition_id);
        let primary = members.first().map_or(0, |b| b.gpu);
        let pst = statics.get(&primary).copied();
        let asic = pst.and_then(|s| s.asic.as_ref()?.get());
        let mut g = PhysicalGpu {
            bdf: phys.clone(),
            ..PhysicalGpu::default()
        };
        let prov = &mut g.provenance;

        let name = asic.and_then(|a| a.market_name.get());
        let dev = asic.and_then(|a| a.device_id.get());
        let prod = product::identify(dev, name);
        g.product = name.map_or_else(
            || {
                prod.as_ref()
                    .map_or_else(|| "unknown GPU".to_string(), |p| p.market_name.into())
            },
            str::to_string,
        );
        g.product_key = prod.as_ref().map(|p| p.key.to_string());
        g.device_id = dev.map(str::to_string);
        g.serial = asic.and_then(|a| a.asic_serial.0.clone());
        g.oam_id = asic.and_then(|a| a.oam_id.u32());
        rec(
            prov,
            "product",
            name,
            SourceKind::AmdSmi,
            "amd-smi static -a",
            at,
            Missing::NotAvailable,
        );
        rec(
            prov,
            "oam_id",
            g.oam_id.as_ref(),
            SourceKind::AmdSmi,
            "amd-smi static -a",
            at,
            Missing::NotAvailable,
        );
        if let Some(p) = &prod {
            g.xcd_count = Some(p.xcds);
            g.cu_count = Some(p.cus());
            let d = format!("product table: {}", p.source);
            note(prov, "xcd_count", SourceKind::ProductTable, &d, at, None);
            note(prov, "cu_count", SourceKind::ProductTable, &d, at, None);
        }

        // HBM: the primary reports the whole device.
        let size = pst
            .and_then(|s| s.vram.as_ref()?.get()?.size)
            .and_then(|q| q.bytes());
        g.hbm_bytes = size.or_else(|| prod.as_ref().map(|p| p.vram_mb << 20));
        match (size, &prod) {
            (Some(_), _) => note(
                prov,
                "hbm_bytes",
                SourceKind::AmdSmi,
                "amd-smi static -v (primary: whole device)",
                at,
                None,
            ),
            (None, Some(p)) => note(
                prov,
                "hbm_bytes",
                SourceKind::ProductTable,
                p.source,
                at,
                None,
            ),
            (None, None) => note(
                prov,
                "hbm_bytes",
                SourceKind::AmdSmi,
                STATIC,
                at,
                Some(Missing::NotAvailable),
            ),
        }

        // Modes: partition doc of the primary, else static -p of the primary, else any member.
        let cur = st.partition.as_ref().and_then(|p| {
            p.current_partition
                .iter()
                .find(|r| r.gpu_id.u32() == Some(primary))
        });
        let mut compute: Option<(ComputeMode, &str)> = cur
            .and_then(|r| r.accelerator_type.get()?.parse().ok())
            .map(|m| (m, PARTITION));
        let mut memory: Option<(MemoryMode, &str)> = cur
            .and_then(|r| r.memory.get()?.parse().ok())
            .map(|m| (m, PARTITION));
        for b in &members {
            let sp = statics
                .get(&b.gpu)
                .and_then(|s| s.partition.as_ref()?.get());
            if compute.is_none() {
                compute = sp
                    .and_then(|p| p.compute()?.parse().ok())
                    .map(|m| (m, "amd-smi static -p"));
            }
            if memory.is_none() {
                memory = sp
                    .and_then(|p| p.memory_partition.get()?.parse().ok())
                    .map(|m| (m, "amd-smi static -p"));
            }
        }
        #[expect(
            clippy::cast_possible_truncation,
            reason = "partition counts are small"
        )]
        let n = members.len() as u32;
        if compute.is_none()
            && let Some(p) = &prod
        {
            compute = ComputeMode::ALL
                .into_iter()
                .find(|m| m.partitions(p.xcds) == n)
                .map(|m| (m, "inferred from the number of logical GPUs"));
        }
        g.compute_partition = compute.map(|(m, _)| m);
        g.memory_partition = memory.map(|(m, _)| m);
        let src = |d: &str| {
            if d.starts_with("inferred") {
                SourceKind::Derived
            } else {
                SourceKind::AmdSmi
            }
        };
        match compute {
            Some((_, d)) => note(prov, "compute_partition", src(d), d, at, None),
            None => note(
                prov,
                "compute_partition",
                SourceKind::AmdSmi,
                STATIC,
                at,
                Some(Missing::NotAvailable),
            ),
        }
        match memory {
            Some((_, d)) => note(prov, "memory_partition", SourceKind::AmdSmi, d, at, None),
            None => note(
                prov,
                "memory_partition",
                SourceKind::AmdSmi,
                STATIC,
                at,
                Some(Missing::NotAvailable),
            ),
        }

        // What the device offers: its own caps and profiles when readable, else the table.
        let caps = st.partition.as_ref().and_then(|p| {
            let r = p
                .memory_partition
                .iter()
                .find(|r| r.gpu_id.u32() == Some(primary))?;
            Some(parse_memory_caps(r.memory_partition_caps.get()?))
        });
        let profiles: Vec<Profile> = st
            .partition
            .as_ref()
            .map(|p| {
                // `gpu_id` is printed only on the first row of each GPU's block: carry it.
                let mut owner = None;
                p.partition_profiles
                    .iter()
                    .filter(|r| {
                        if r.gpu_id.0.is_some() {
                            owner = r.gpu_id.u32();
                        }
                        owner == Some(primary)
                    })
                    .filter_map(|r| {
                        Some(Profile {
                            index: r.profile_index.u32()?,
                            compute: r.accelerator_type.get()?.parse().ok()?,
                            memory: parse_memory_caps(r.memory_partition_caps.get()?),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        if profiles.is_empty() {
            if let Some(p) = &prod {
                g.profiles.clone_from(&p.profiles);
                note(
                    prov,
                    "profiles",
                    SourceKind::ProductTable,
                    &format!(
                        "product table: {} (amd-smi partition -a needs root)",
                        p.source
                    ),
                    at,
                    None,
                );
            } else {
                note(
                    prov,
                    "profiles",
                    SourceKind::AmdSmi,
                    "amd-smi partition -a",
                    at,
                    Some(Missing::NeedsRoot),
                );
            }
        } else {
            g.profiles = profiles;
            note(
                prov,
                "profiles",
                SourceKind::AmdSmi,
                "amd-smi partition -a",
                at,
                None,
            );
        }
        match caps {
            Some(c) => {
                g.memory_caps = c;
                note(
                    prov,
                    "memory_caps",
                    SourceKind::AmdSmi,
                    "amd-smi partition -m",
                    at,
                    None,
                );
            }
            None => {
                let mut c: Vec<MemoryMode> =
                    g.profiles.iter().flat_map(|p| p.memory.clone()).collect();
                c.sort();
                c.dedup();
                g.memory_caps = c;
                note(
                    prov,
                    "memory_caps",
                    SourceKind::Derived,
                    "union of the offered profiles",
                    at,
                    None,
                );
            }
        }
        note(
            prov,
            "hive",
            SourceKind::AmdSmi,
            STATIC,
            at,
            Some(Missing::NotReported),
        );

        g.power_cap_watts = pst.and_then(|s| s.limit.as_ref()?.get()?.cap());
        rec(
            prov,
            "power_cap_watts",
            g.power_cap_watts.as_ref(),
            SourceKind::AmdSmi,
            "amd-smi static -l",
            at,
            Missing::NotReported,
        );

        // Device-wide metrics from the primary.
        let pm = metrics.get(&primary).copied();
        if metric.is_some() {
            g.power_watts = pm.and_then(|m| m.power.as_ref()?.get()?.socket_power?.num());
            let t = pm.and_then(|m| m.temperature.as_ref()?.get());
            g.hotspot_celsius = t.and_then(|t| t.hotspot?.num());
            g.mem_celsius = t.and_then(|t| t.mem?.num());
            rec(
                prov,
                "power_watts",
                g.power_watts.as_ref(),
                SourceKind::AmdSmi,
                "amd-smi metric -p (primary)",
                m_at,
                Missing::NotAvailable,
            );
            rec(
                prov,
                "hotspot_celsius",
                g.hotspot_celsius.as_ref(),
                SourceKind::AmdSmi,
                "amd-smi metric -t (primary)",
                m_at,
                Missing::NotAvailable,
            );
            rec(
                prov,
                "mem_celsius",
                g.mem_celsius.as_ref(),
                SourceKind::AmdSmi,
                "amd-smi metric -t (primary)",
                m_at,
                Missing::NotAvailable,
            );
        }
        let xcp_busy = pm
            .and_then(|m| m.usage.as_ref()?.get()?.gfx_busy_inst.as_ref()?.get())
            .cloned()
            .unwrap_or_default();

        // Layout: which XCDs and memory domains each partition owns.
        let layout: Vec<PartitionShape> = match (&prod, g.compute_partition, g.memory_partition) {
            (Some(p), Some(c), Some(m)) if c.partitions(p.xcds) == n => shapes(p, c, m),
            _ => Vec::new(),
        };

        for b in &members {
            let lst = b.list.and_then(|i| st.list.get(i));
            let mut l = LogicalGpu {
                gpu_id: b.gpu,
                partition_id: b.partition_id,
                bdf: b.bdf.clone(),
                ..LogicalGpu::default()
            };
            let lp = &mut l.provenance;
            if let Some(e) = lst {
                l.render_node = e.render.0.clone();
                l.uuid = e.uuid.0.clone();
                l.kfd_id = e.kfd_id.0;
                l.node_id = e.node_id.u32();
                rec(
                    lp,
                    "render_node",
                    l.render_node.as_ref(),
                    SourceKind::AmdSmi,
                    LIST,
                    at,
                    Missing::NotReported,
                );
                rec(
                    lp,
                    "kfd_id",
                    l.kfd_id.as_ref(),
                    SourceKind::AmdSmi,
                    LIST,
                    at,
                    Missing::NotReported,
                );
            }
            let shape = layout.iter().find(|s| s.partition_id == b.partition_id);
            // The one range policy: 1e308 CUs is N/A with the reason, never 4294967295.
            let own_cus = statics
                .get(&b.gpu)
                .and_then(|s| s.asic.as_ref()?.get()?.num_compute_units)
                .map(|q| q.count_checked(crate::domain::sanity::MAX_CUS, "CUs"));
            let (own_cus, cus_absurd) = match own_cus {
                Some(Ok(c)) => (c, None),
                Some(Err(why)) => (None, Some(why)),
                None => (None, None),
            };
            match (own_cus, shape) {
                (Some(c), _) => {
                    l.cu_count = Some(c);
                    note(
                        lp,
                        "cu_count",
                        SourceKind::AmdSmi,
                        "amd-smi static -a num_compute_units",
                        at,
                        None,
                    );
                }
                (None, Some(s)) => {
                    l.cu_count = Some(s.cus);
                    note(
                        lp,
                        "cu_count",
                        SourceKind::Derived,
                        &cus_absurd.map_or_else(
                            || "layout of the current modes".to_string(),
                            |why| {
                                format!(
                                    "layout of the current modes (amd-smi's figure not used: {why})"
                                )
                            },
                        ),
                        at,
                        None,
                    );
                }
                (None, None) => note(
                    lp,
                    "cu_count",
                    SourceKind::AmdSmi,
                    STATIC,
                    at,
                    Some(cus_absurd.map_or(Missing::NotAvailable, Missing::OutOfRange)),
                ),
            }
            if let Some(c) = l.cu_count {
                cu_by_gpu.insert(b.gpu, c);
            }
            if let Some(s) = shape {
                l.xcds.clone_from(&s.xcds);
                l.memory_domains.clone_from(&s.memory_domains);
                l.vram_share_bytes = Some(s.vram_share_mb << 20);
                note(
                    lp,
                    "vram_share_bytes",
                    SourceKind::Derived,
                    "HBM / partitions (even share)",
                    at,
                    None,
                );
            }
            if metric.is_some() {
                let m = metrics.get(&b.gpu).copied();
                let mu = m.and_then(|m| m.mem_usage.as_ref()?.get());
                let (used, used_miss) = checked(mu.and_then(|u| u.used_vram));
                let (total, total_miss) = checked(mu.and_then(|u| u.total_vram));
                l.vram_used_bytes = used;
                l.vram_total_bytes = total;
                rec(
                    lp,
                    "vram_used_bytes",
                    l.vram_used_bytes.as_ref(),
                    SourceKind::AmdSmi,
                    "amd-smi metric -m used_vram",
                    m_at,
                    used_miss,
                );
                rec(
                    lp,
                    "vram_total_bytes",
                    l.vram_total_bytes.as_ref(),
                    SourceKind::AmdSmi,
                    "amd-smi metric -m total_vram",
                    m_at,
                    total_miss,
                );
                let own = m.and_then(|m| m.usage.as_ref()?.get());
                let key = format!("xcp_{}", b.partition_id);
                let from_xcp = if n > 1 {
                    xcp_busy.get(&key).and_then(|v| mean(v))
                } else {
                    None
                };
                if let Some(v) = from_xcp {
                    l.gfx_busy_percent = Some(v);
                    note(
                        lp,
                        "gfx_busy_percent",
                        SourceKind::Derived,
                        &format!(
                            "amd-smi metric -u gfx_busy_inst.{key} (mean of its XCCs, on the primary)"
                        ),
                        m_at,
                        None,
                    );
                } else {
                    l.gfx_busy_percent = own.and_then(|u| u.gfx_activity?.num());
                    let miss = if b.partition_id == 0 {
                        Missing::NotAvailable
                    } else {
                        Missing::SecondaryPartition
                    };
                    rec(
                        lp,
                        "gfx_busy_percent",
                        l.gfx_busy_percent.as_ref(),
                        SourceKind::AmdSmi,
                        "amd-smi metric -u gfx_activity",
                        m_at,
                        miss,
                    );
                }
                l.umc_busy_percent = if b.partition_id == 0 {
                    own.and_then(|u| u.umc_activity?.num())
                } else {
                    None
                };
                let miss = if b.partition_id == 0 {
                    Missing::NotAvailable
                } else {
                    Missing::SecondaryPartition
                };
                rec(
                    lp,
                    "umc_busy_percent",
                    l.umc_busy_percent.as_ref(),
                    SourceKind::AmdSmi,
                    "amd-smi metric -u umc_activity",
                    m_at,
                    miss,
                );
            }
            g.partitions.push(l);
        }
        gpus.push(g);
    }

    let processes = process
        .map(|(p, t)| processes(p, t, &cu_by_gpu))
        .unwrap_or_default();
    (gpus, processes)
}

fn mean(v: &[super::json::Q]) -> Option<f64> {
    let vals: Vec<f64> = v.iter().filter_map(|q| q.num()).collect();
    #[expect(clippy::cast_precision_loss, reason = "at most 8 XCCs")]
    (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
}

fn processes(entries: &[ProcessEntry], at: u64, cus: &HashMap<u32, u32>) -> Vec<Process> {
    let mut by_pid: BTreeMap<u32, Process> = BTreeMap::new();
    for e in entries {
        for slot in &e.process_list {
            let Some(info) = &slot.process_info.0 else {
                continue;
            };
            let p = by_pid.entry(info.pid).or_insert_with(|| {
                let mut p = Process {
                    pid: info.pid,
                    name: info.name.0.clone(),
                    listed_by_amdsmi: true,
                    ..Process::default()
                };
                rec(
                    &mut p.provenance,
                    "name",
                    p.name.as_ref(),
                    SourceKind::AmdSmi,
                    PROCESS,
                    at,
                    Missing::NeedsRoot,
                );
                p
            });
            let mem = info.memory_usage.as_ref().and_then(|m| m.get());
            // The one range policy: -86 GB is N/A with the reason, never 0.0; 1e308 CUs too.
            let (vram, vram_miss) = checked(mem.and_then(|m| m.vram_mem));
            let (gtt, gtt_miss) = checked(mem.and_then(|m| m.gtt_mem));
            let (cu, cu_absurd) = match info
                .cu_occupancy
                .map(|q| q.count_checked(crate::domain::sanity::MAX_CUS, "CUs"))
            {
                Some(Ok(c)) => (c, None),
                Some(Err(why)) => (None, Some(Missing::OutOfRange(why))),
                None => (None, None),
            };
            let cu_percent = cu.zip(cus.get(&e.gpu)).map(|(c, total)| {
                if *total == 0 {
                    0.0
                } else {
                    f64::from(c) * 100.0 / f64::from(*total)
                }
            });
            let gid = e.gpu;
            let miss_mem = |absurd: Missing| {
                if mem.is_none() {
                    Missing::NotReported
                } else {
                    absurd
                }
            };
            rec(
                &mut p.provenance,
                &format!("gpu{gid}.vram_bytes"),
                vram.as_ref(),
                SourceKind::AmdSmi,
                PROCESS,
                at,
                miss_mem(vram_miss),
            );
            rec(
                &mut p.provenance,
                &format!("gpu{gid}.gtt_bytes"),
                gtt.as_ref(),
                SourceKind::AmdSmi,
                PROCESS,
                at,
                miss_mem(gtt_miss),
            );
            let miss_cu = if info.cu_occupancy.is_none() {
                Missing::NotReported
            } else {
                cu_absurd.unwrap_or(Missing::NotAvailable)
            };
            rec(
                &mut p.provenance,
                &format!("gpu{gid}.cu_occupancy"),
                cu.as_ref(),
                SourceKind::AmdSmi,
                PROCESS,
                at,
                miss_cu,
            );
            p.gpus.push(GpuUse {
                gpu_id: gid,
                vram_bytes: vram,
                gtt_bytes: gtt,
                cu_occupancy: cu,
                cu_percent,
                ..GpuUse::default()
            });
        }
    }
    by_pid.into_values().collect()
}
