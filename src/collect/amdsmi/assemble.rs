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

/// Assembles GPUs and processes: the logical GPUs amd-smi lists, grouped by physical GPU, each
/// physical GPU read from its primary, each logical GPU from its own entry.
pub fn assemble(
    st: &StaticData,
    metric: Option<(&[MetricEntry], u64)>,
    process: Option<(&[ProcessEntry], u64)>,
) -> (Vec<PhysicalGpu>, Vec<Process>) {
    let reads = Reads {
        st,
        statics: st.statics.iter().map(|s| (s.gpu, s)).collect(),
        metrics: metric
            .map(|(m, _)| m.iter().map(|e| (e.gpu, e)).collect())
            .unwrap_or_default(),
        metered: metric.is_some(),
        at: st.at_ms,
        m_at: metric.map_or(0, |(_, t)| t),
    };
    let bases = bases(st, &reads.statics);
    let mut gpus = Vec::new();
    let mut cu_by_gpu: HashMap<u32, u32> = HashMap::new();
    for members in by_physical(&bases) {
        let g = physical(&reads, &members);
        for l in &g.partitions {
            if let Some(c) = l.cu_count {
                cu_by_gpu.insert(l.gpu_id, c);
            }
        }
        gpus.push(g);
    }
    let processes = process
        .map(|(p, t)| processes(p, t, &cu_by_gpu))
        .unwrap_or_default();
    (gpus, processes)
}

/// What one assembly reads from: the parsed outputs by GPU index, and when each was read.
struct Reads<'a> {
    st: &'a StaticData,
    statics: HashMap<u32, &'a StaticEntry>,
    metrics: HashMap<u32, &'a MetricEntry>,
    /// Whether `metric` was read this time (only then are its fields noted, read or N/A).
    metered: bool,
    at: u64,
    m_at: u64,
}

/// The logical GPUs, from `list` (or `static` when list is missing), in amd-smi's index order.
fn bases(st: &StaticData, statics: &HashMap<u32, &StaticEntry>) -> Vec<Base> {
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
    bases
}

/// The logical GPUs grouped by physical GPU, in amd-smi order, each group by partition id
/// (the primary first).
fn by_physical(bases: &[Base]) -> Vec<Vec<&Base>> {
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, Vec<&Base>> = HashMap::new();
    for b in bases {
        if !groups.contains_key(&b.phys) {
            order.push(b.phys.clone());
        }
        groups.entry(b.phys.clone()).or_default().push(b);
    }
    order
        .into_iter()
        .map(|phys| {
            let mut members = groups.remove(&phys).unwrap_or_default();
            members.sort_by_key(|b| b.partition_id);
            members
        })
        .collect()
}

/// One physical GPU from its logical GPUs (`members`, the primary first): device-wide values
/// from the primary, the rest from each member.
fn physical(r: &Reads<'_>, members: &[&Base]) -> PhysicalGpu {
    let primary = members.first().map_or(0, |b| b.gpu);
    let pst = r.statics.get(&primary).copied();
    let mut g = PhysicalGpu {
        bdf: members.first().map(|b| b.phys.clone()).unwrap_or_default(),
        ..PhysicalGpu::default()
    };
    let prod = identity(&mut g, pst, r.at);
    hbm(&mut g, pst, prod.as_ref(), r.at);
    #[expect(
        clippy::cast_possible_truncation,
        reason = "partition counts are small"
    )]
    let n = members.len() as u32;
    modes(&mut g, r, primary, members, prod.as_ref());
    offers(&mut g, r, primary, prod.as_ref());
    note(
        &mut g.provenance,
        "hive",
        SourceKind::AmdSmi,
        STATIC,
        r.at,
        Some(Missing::NotReported),
    );
    g.power_cap_watts = pst.and_then(|s| s.limit.as_ref()?.get()?.cap());
    rec(
        &mut g.provenance,
        "power_cap_watts",
        g.power_cap_watts.as_ref(),
        SourceKind::AmdSmi,
        "amd-smi static -l",
        r.at,
        Missing::NotReported,
    );
    let pm = r.metrics.get(&primary).copied();
    device_metrics(&mut g, r, pm);
    let xcp_busy = pm
        .and_then(|m| m.usage.as_ref()?.get()?.gfx_busy_inst.as_ref()?.get())
        .cloned()
        .unwrap_or_default();
    // Layout: which XCDs and memory domains each partition owns.
    let layout: Vec<PartitionShape> = match (&prod, g.compute_partition, g.memory_partition) {
        (Some(p), Some(c), Some(m)) if c.partitions(p.xcds) == n => shapes(p, c, m),
        _ => Vec::new(),
    };
    for b in members {
        let shape = layout.iter().find(|s| s.partition_id == b.partition_id);
        g.partitions.push(logical(r, b, shape, n, &xcp_busy));
    }
    g
}

/// The product, names and counts, from the primary's `static -a` and the product table.
fn identity(g: &mut PhysicalGpu, pst: Option<&StaticEntry>, at: u64) -> Option<product::Product> {
    let asic = pst.and_then(|s| s.asic.as_ref()?.get());
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
    let prov = &mut g.provenance;
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
    prod
}

/// HBM: the primary reports the whole device; else the product table's size.
fn hbm(g: &mut PhysicalGpu, pst: Option<&StaticEntry>, prod: Option<&product::Product>, at: u64) {
    let size = pst
        .and_then(|s| s.vram.as_ref()?.get()?.size)
        .and_then(|q| q.bytes());
    g.hbm_bytes = size.or_else(|| prod.map(|p| p.vram_mb << 20));
    let prov = &mut g.provenance;
    match (size, prod) {
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
}

/// Modes: the partition doc of the primary, else `static -p` of the primary, else of any
/// member; the compute mode, where no source says it, inferred from the number of logical
/// GPUs.
fn modes(
    g: &mut PhysicalGpu,
    r: &Reads<'_>,
    primary: u32,
    members: &[&Base],
    prod: Option<&product::Product>,
) {
    let cur = r.st.partition.as_ref().and_then(|p| {
        p.current_partition
            .iter()
            .find(|row| row.gpu_id.u32() == Some(primary))
    });
    let mut compute: Option<(ComputeMode, &str)> = cur
        .and_then(|row| row.accelerator_type.get()?.parse().ok())
        .map(|m| (m, PARTITION));
    let mut memory: Option<(MemoryMode, &str)> = cur
        .and_then(|row| row.memory.get()?.parse().ok())
        .map(|m| (m, PARTITION));
    for b in members {
        let sp = r
            .statics
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
        && let Some(p) = prod
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
    let (prov, at) = (&mut g.provenance, r.at);
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
}

/// The primary's profiles in the partition doc. `gpu_id` is printed only on the first row of
/// each GPU's block: it is carried down.
fn device_profiles(doc: &PartitionDoc, primary: u32) -> Vec<Profile> {
    let mut owner = None;
    doc.partition_profiles
        .iter()
        .filter(|row| {
            if row.gpu_id.0.is_some() {
                owner = row.gpu_id.u32();
            }
            owner == Some(primary)
        })
        .filter_map(|row| {
            Some(Profile {
                index: row.profile_index.u32()?,
                compute: row.accelerator_type.get()?.parse().ok()?,
                memory: parse_memory_caps(row.memory_partition_caps.get()?),
            })
        })
        .collect()
}

/// What the device offers: its own caps and profiles when readable, else the product table
/// (the memory caps then the union of the profiles').
fn offers(g: &mut PhysicalGpu, r: &Reads<'_>, primary: u32, prod: Option<&product::Product>) {
    let at = r.at;
    let caps = r.st.partition.as_ref().and_then(|p| {
        let row = p
            .memory_partition
            .iter()
            .find(|row| row.gpu_id.u32() == Some(primary))?;
        Some(parse_memory_caps(row.memory_partition_caps.get()?))
    });
    let profiles =
        r.st.partition
            .as_ref()
            .map(|p| device_profiles(p, primary))
            .unwrap_or_default();
    let prov = &mut g.provenance;
    if !profiles.is_empty() {
        g.profiles = profiles;
        note(
            prov,
            "profiles",
            SourceKind::AmdSmi,
            "amd-smi partition -a",
            at,
            None,
        );
    } else if let Some(p) = prod {
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
    if let Some(c) = caps {
        g.memory_caps = c;
        note(
            prov,
            "memory_caps",
            SourceKind::AmdSmi,
            "amd-smi partition -m",
            at,
            None,
        );
    } else {
        let mut c: Vec<MemoryMode> = g.profiles.iter().flat_map(|p| p.memory.clone()).collect();
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

/// Device-wide metrics, from the primary (`pm`), when `metric` was read.
fn device_metrics(g: &mut PhysicalGpu, r: &Reads<'_>, pm: Option<&MetricEntry>) {
    if !r.metered {
        return;
    }
    g.power_watts = pm.and_then(|m| m.power.as_ref()?.get()?.socket_power?.num());
    let t = pm.and_then(|m| m.temperature.as_ref()?.get());
    g.hotspot_celsius = t.and_then(|t| t.hotspot?.num());
    g.mem_celsius = t.and_then(|t| t.mem?.num());
    let prov = &mut g.provenance;
    for (field, v, detail) in [
        ("power_watts", g.power_watts, "amd-smi metric -p (primary)"),
        (
            "hotspot_celsius",
            g.hotspot_celsius,
            "amd-smi metric -t (primary)",
        ),
        ("mem_celsius", g.mem_celsius, "amd-smi metric -t (primary)"),
    ] {
        rec(
            prov,
            field,
            v.as_ref(),
            SourceKind::AmdSmi,
            detail,
            r.m_at,
            Missing::NotAvailable,
        );
    }
}

/// One logical GPU: its identity from `list`, its CUs and share from the layout (`shape`), its
/// own metrics.
fn logical(
    r: &Reads<'_>,
    b: &Base,
    shape: Option<&PartitionShape>,
    n: u32,
    xcp_busy: &BTreeMap<String, Vec<Q>>,
) -> LogicalGpu {
    let mut l = LogicalGpu {
        gpu_id: b.gpu,
        partition_id: b.partition_id,
        bdf: b.bdf.clone(),
        ..LogicalGpu::default()
    };
    if let Some(e) = b.list.and_then(|i| r.st.list.get(i)) {
        l.render_node = e.render.0.clone();
        l.uuid = e.uuid.0.clone();
        l.kfd_id = e.kfd_id.0;
        l.node_id = e.node_id.u32();
        let lp = &mut l.provenance;
        rec(
            lp,
            "render_node",
            l.render_node.as_ref(),
            SourceKind::AmdSmi,
            LIST,
            r.at,
            Missing::NotReported,
        );
        rec(
            lp,
            "kfd_id",
            l.kfd_id.as_ref(),
            SourceKind::AmdSmi,
            LIST,
            r.at,
            Missing::NotReported,
        );
    }
    logical_cus(&mut l, r, b, shape);
    if let Some(s) = shape {
        l.xcds.clone_from(&s.xcds);
        l.memory_domains.clone_from(&s.memory_domains);
        l.vram_share_bytes = Some(s.vram_share_mb << 20);
        note(
            &mut l.provenance,
            "vram_share_bytes",
            SourceKind::Derived,
            "HBM / partitions (even share)",
            r.at,
            None,
        );
    }
    if r.metered {
        logical_metrics(&mut l, r, b, n, xcp_busy);
    }
    l
}

/// A logical GPU's CUs: amd-smi's own figure, else the layout's.
fn logical_cus(l: &mut LogicalGpu, r: &Reads<'_>, b: &Base, shape: Option<&PartitionShape>) {
    // The one range policy: 1e308 CUs is N/A with the reason, never 4294967295.
    let own_cus = r
        .statics
        .get(&b.gpu)
        .and_then(|s| s.asic.as_ref()?.get()?.num_compute_units)
        .map(|q| q.count_checked(crate::domain::sanity::MAX_CUS, "CUs"));
    let (own_cus, cus_absurd) = match own_cus {
        Some(Ok(c)) => (c, None),
        Some(Err(why)) => (None, Some(why)),
        None => (None, None),
    };
    let lp = &mut l.provenance;
    match (own_cus, shape) {
        (Some(c), _) => {
            l.cu_count = Some(c);
            note(
                lp,
                "cu_count",
                SourceKind::AmdSmi,
                "amd-smi static -a num_compute_units",
                r.at,
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
                    |why| format!("layout of the current modes (amd-smi's figure not used: {why})"),
                ),
                r.at,
                None,
            );
        }
        (None, None) => note(
            lp,
            "cu_count",
            SourceKind::AmdSmi,
            STATIC,
            r.at,
            Some(cus_absurd.map_or(Missing::NotAvailable, Missing::OutOfRange)),
        ),
    }
}

/// A logical GPU's own metrics: VRAM, and busy figures (a secondary's GFX busy from the
/// primary's per-XCP figures; UMC busy is device-wide, on the primary only).
fn logical_metrics(
    l: &mut LogicalGpu,
    r: &Reads<'_>,
    b: &Base,
    n: u32,
    xcp_busy: &BTreeMap<String, Vec<Q>>,
) {
    let m_at = r.m_at;
    let m = r.metrics.get(&b.gpu).copied();
    let mu = m.and_then(|m| m.mem_usage.as_ref()?.get());
    let (used, used_miss) = checked(mu.and_then(|u| u.used_vram));
    let (total, total_miss) = checked(mu.and_then(|u| u.total_vram));
    l.vram_used_bytes = used;
    l.vram_total_bytes = total;
    let lp = &mut l.provenance;
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
    // A secondary's own figure is N/A by design, said as such.
    let miss = if b.partition_id == 0 {
        Missing::NotAvailable
    } else {
        Missing::SecondaryPartition
    };
    if let Some(v) = from_xcp {
        l.gfx_busy_percent = Some(v);
        note(
            lp,
            "gfx_busy_percent",
            SourceKind::Derived,
            &format!("amd-smi metric -u gfx_busy_inst.{key} (mean of its XCCs, on the primary)"),
            m_at,
            None,
        );
    } else {
        l.gfx_busy_percent = own.and_then(|u| u.gfx_activity?.num());
        rec(
            lp,
            "gfx_busy_percent",
            l.gfx_busy_percent.as_ref(),
            SourceKind::AmdSmi,
            "amd-smi metric -u gfx_activity",
            m_at,
            miss.clone(),
        );
    }
    l.umc_busy_percent = if b.partition_id == 0 {
        own.and_then(|u| u.umc_activity?.num())
    } else {
        None
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
            let u = gpu_use(p, info, e.gpu, at, cus.get(&e.gpu).copied());
            p.gpus.push(u);
        }
    }
    by_pid.into_values().collect()
}

/// A process's use of logical GPU `gid` as amd-smi lists it (`cus`: the GPU's CU count, for
/// the occupancy's share), each figure under the one range policy: -86 GB is N/A with the
/// reason, never 0.0; 1e308 CUs too.
fn gpu_use(
    p: &mut Process,
    info: &super::schema::ProcessInfo,
    gid: u32,
    at: u64,
    cus: Option<u32>,
) -> GpuUse {
    let mem = info.memory_usage.as_ref().and_then(|m| m.get());
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
    let cu_percent = cu.zip(cus).map(|(c, total)| {
        if total == 0 {
            0.0
        } else {
            f64::from(c) * 100.0 / f64::from(total)
        }
    });
    let miss_mem = |absurd: Missing| {
        if mem.is_none() {
            Missing::NotReported
        } else {
            absurd
        }
    };
    let miss_cu = if info.cu_occupancy.is_none() {
        Missing::NotReported
    } else {
        cu_absurd.unwrap_or(Missing::NotAvailable)
    };
    for (field, v, miss) in [
        ("vram_bytes", vram, miss_mem(vram_miss)),
        ("gtt_bytes", gtt, miss_mem(gtt_miss)),
        ("cu_occupancy", cu.map(u64::from), miss_cu),
    ] {
        rec(
            &mut p.provenance,
            &format!("gpu{gid}.{field}"),
            v.as_ref(),
            SourceKind::AmdSmi,
            PROCESS,
            at,
            miss,
        );
    }
    GpuUse {
        gpu_id: gid,
        vram_bytes: vram,
        gtt_bytes: gtt,
        cu_occupancy: cu,
        cu_percent,
        ..GpuUse::default()
    }
}
