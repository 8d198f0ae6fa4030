//! What partop reads of an NVIDIA node, in a form that can be recorded as JSON (CI has no GPU),
//! and its assembly into the domain snapshot. The assembly is pure.

use crate::domain::mig::{InstanceShape, MigInfo, MigProfile, identify, table_profiles};
use crate::domain::provenance::{Missing, SourceKind, note};
use crate::domain::snapshot::{DeviceCounters, GpuUse, LogicalGpu, PhysicalGpu, Process};
use serde::{Deserialize, Serialize};

/// One MIG GPU instance.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NvInstance {
    /// GPU instance id.
    pub gi: u32,
    /// Compute instance id.
    pub ci: Option<u32>,
    /// MIG device UUID.
    pub uuid: Option<String>,
    /// Profile name when the source names it.
    pub profile: Option<String>,
    /// Profile id when the source gives it.
    #[serde(default)]
    pub profile_id: Option<u32>,
    /// Compute slices of its GPU instance (NVML's device attributes).
    #[serde(default)]
    pub slices: Option<u32>,
    /// Optical-flow accelerators (tells a `+me` instance from its plain twin).
    #[serde(default)]
    pub ofa: Option<u32>,
    /// Memory, MiB.
    pub mem_total_mib: Option<u64>,
    /// Memory used, MiB.
    pub mem_used_mib: Option<u64>,
    /// SMs.
    pub sms: Option<u32>,
    /// Graphics-engine activity of the instance, % of the time since the last read (NVML's
    /// GPM on Hopper and later; dcgm-exporter's `DCGM_FI_PROF_GR_ENGINE_ACTIVE`).
    #[serde(default)]
    pub gr_engine_active: Option<f64>,
}

/// A process on a GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvProc {
    /// PID.
    pub pid: u32,
    /// Name.
    pub name: Option<String>,
    /// Memory used, MiB.
    pub used_mib: Option<u64>,
    /// GPU instance (MIG).
    pub gi: Option<u32>,
    /// Its share of the SMs' time, % (NVML's per-process utilisation; not on MIG instances).
    #[serde(default)]
    pub sm_util: Option<u32>,
}

/// One GPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NvGpu {
    /// Device index.
    pub index: u32,
    /// PCI bus id, `0000:00:06.0`.
    pub bdf: String,
    /// Product name.
    pub name: String,
    /// UUID.
    pub uuid: Option<String>,
    /// Memory, MiB.
    pub mem_total_mib: Option<u64>,
    /// Memory used, MiB.
    pub mem_used_mib: Option<u64>,
    /// GPU utilisation, %.
    pub util_gpu: Option<f64>,
    /// Memory-controller utilisation, %.
    pub util_mem: Option<f64>,
    /// Power draw, W.
    pub power_w: Option<f64>,
    /// Power limit, W.
    pub power_limit_w: Option<f64>,
    /// GPU temperature, °C.
    pub temp_c: Option<f64>,
    /// Memory temperature, °C.
    pub mem_temp_c: Option<f64>,
    /// SM clock, MHz.
    pub sm_clock_mhz: Option<u32>,
    /// Memory clock, MHz.
    pub mem_clock_mhz: Option<u32>,
    /// MIG mode now (None: not MIG-capable).
    pub mig_enabled: Option<bool>,
    /// MIG mode pending.
    pub mig_pending: Option<bool>,
    /// GPU instances.
    pub instances: Vec<NvInstance>,
    /// Processes.
    pub processes: Vec<NvProc>,
    /// Profiles the device reported (empty: unknown).
    pub profiles: Vec<MigProfile>,
    /// Energy, PCIe, media-engine and memory-repair counters.
    #[serde(default)]
    pub counters: NvCounters,
}

/// What dcgm-exporter's default set charts besides utilisation, memory, power and heat.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NvCounters {
    /// Energy since the driver loaded, mJ (NVML only).
    pub energy_mj: Option<u64>,
    /// PCIe replays.
    pub pcie_replays: Option<u64>,
    /// Encoder utilisation, %.
    pub enc_util: Option<f64>,
    /// Decoder utilisation, %.
    pub dec_util: Option<f64>,
    /// Rows remapped for correctable errors (nvidia-smi only).
    pub remapped_correctable: Option<u64>,
    /// Rows remapped for uncorrectable errors (nvidia-smi only).
    pub remapped_uncorrectable: Option<u64>,
    /// A row remapping failed (nvidia-smi only).
    pub remap_failure: Option<bool>,
    /// Graphics-engine activity, % of the time since the last read (NVML's GPM, Hopper and
    /// later; dcgm-exporter's `DCGM_FI_PROF_GR_ENGINE_ACTIVE`). MIG GPUs: per instance.
    #[serde(default)]
    pub gr_engine_active: Option<f64>,
    /// The last XID error NVML reported since partop began watching (0: none yet); None where
    /// the device gives no XID events.
    #[serde(default)]
    pub xid_last: Option<u64>,
    /// XID errors NVML reported since partop began watching.
    #[serde(default)]
    pub xid_count: Option<u64>,
}

/// The node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NvNode {
    /// `NVML` or `nvidia-smi` (with driver version).
    pub source: String,
    /// Driver version.
    pub driver: Option<String>,
    /// GPUs.
    pub gpus: Vec<NvGpu>,
}

/// Where NVIDIA data comes from.
pub trait NvSource: Send + Sync + std::fmt::Debug {
    /// Reads the node now.
    fn read(&mut self) -> Result<NvNode, String>;
}

/// A recorded node (tests, CI, bug reports).
#[derive(Debug, Clone)]
pub struct Recorded(pub NvNode);

impl NvSource for Recorded {
    fn read(&mut self) -> Result<NvNode, String> {
        Ok(self.0.clone())
    }
}

/// The MIG state of `g`: the profiles the device reported, named as nvidia-smi names them (by
/// profile id in NVIDIA's table for this product; NVML's profile info has no name) and given
/// the table's SMs and placements where the source left them out; else the table itself.
fn mig_info(g: &NvGpu, src: &str) -> MigInfo {
    let table = table_profiles(&g.name).unwrap_or_default();
    let mut reported = g.profiles.clone();
    for p in &mut reported {
        if let Some(t) = table.iter().find(|t| t.id == p.id) {
            p.name.clone_from(&t.name);
            if p.sms == 0 {
                p.sms = t.sms;
                p.ofa = t.ofa;
            }
            if p.placements.is_empty() {
                p.placements.clone_from(&t.placements);
            }
        }
    }
    let enabled = g.mig_enabled.unwrap_or(false);
    let (profiles, profiles_source) = if reported.is_empty() {
        (
            table,
            "partop's table (measured on H100 and H200, NVIDIA's guide for A100: docs/nvidia.md); the device lists its profiles only with MIG enabled".to_string(),
        )
    } else {
        (
            reported,
            format!("{src}; names by profile id, as nvidia-smi shows them"),
        )
    };
    MigInfo {
        enabled,
        pending: g.mig_pending.unwrap_or(enabled),
        profiles,
        profiles_source,
    }
}

/// The profile an instance read back is of: its name where the source gives one that the
/// device offers, else by profile id, else by SMs and memory together (never by memory alone).
fn instance_profile(profiles: &[MigProfile], inst: &NvInstance) -> Result<String, String> {
    if let Some(name) = &inst.profile
        && (profiles.is_empty() || profiles.iter().any(|p| &p.name == name))
    {
        return Ok(name.clone());
    }
    identify(
        profiles,
        &InstanceShape {
            profile_id: inst.profile_id,
            slices: inst.slices,
            sms: inst.sms,
            memory_mib: inst.mem_total_mib,
            ofa: inst.ofa,
        },
    )
    .map(|p| p.name.clone())
    .map_err(|e| format!("profile not known: {e}"))
}

/// The physical and logical GPUs and processes of `n`, as of `at_ms`.
pub fn assemble(n: &NvNode, at_ms: u64) -> (Vec<PhysicalGpu>, Vec<Process>) {
    let mut gpus = Vec::new();
    let mut processes: Vec<Process> = Vec::new();
    let mut next_id = 0u32;
    let src = n.source.as_str();
    for g in &n.gpus {
        let mut pg = physical(n, g, src, at_ms);
        // Each logical GPU's MIG instance (None: the whole GPU) and partop's index for it.
        let mut ids: Vec<(Option<u32>, u32)> = Vec::new();
        if g.mig_enabled == Some(true) && !g.instances.is_empty() {
            for inst in &g.instances {
                let profiles = pg
                    .mig
                    .as_ref()
                    .map(|m| m.profiles.as_slice())
                    .unwrap_or(&[]);
                let l = mig_instance(g, inst, profiles, next_id, src, at_ms);
                ids.push((Some(inst.gi), next_id));
                pg.partitions.push(l);
                next_id += 1;
            }
        } else {
            pg.partitions.push(whole_gpu(g, next_id, src, at_ms));
            ids.push((None, next_id));
            next_id += 1;
        }
        add_processes(&mut processes, g, &ids, src, at_ms);
        gpus.push(pg);
    }
    (gpus, processes)
}

/// The device's own values (the BDF without its function), and its MIG state.
fn physical(n: &NvNode, g: &NvGpu, src: &str, at_ms: u64) -> PhysicalGpu {
    let bdf = g
        .bdf
        .rsplit_once('.')
        .map_or(g.bdf.clone(), |(b, _)| b.to_string());
    let mut pg = PhysicalGpu {
        bdf,
        product: g.name.clone(),
        uuid: g.uuid.clone(),
        driver_version: n.driver.clone(),
        hbm_bytes: g.mem_total_mib.and_then(mib_bytes),
        power_watts: g.power_w,
        power_cap_watts: g.power_limit_w,
        hotspot_celsius: g.temp_c,
        mem_celsius: g.mem_temp_c,
        gfx_clock_mhz: g.sm_clock_mhz,
        mem_clock_mhz: g.mem_clock_mhz,
        counters: DeviceCounters {
            energy_uj: g.counters.energy_mj.map(|m| m as f64 * 1000.0),
            pcie_replay: g.counters.pcie_replays,
            enc_util_percent: g.counters.enc_util,
            dec_util_percent: g.counters.dec_util,
            remapped_rows_correctable: g.counters.remapped_correctable,
            remapped_rows_uncorrectable: g.counters.remapped_uncorrectable,
            row_remap_failure: g.counters.remap_failure,
            xid_last: g.counters.xid_last,
            xid_count: g.counters.xid_count,
            ..DeviceCounters::default()
        },
        ..PhysicalGpu::default()
    };
    for f in [
        "power_watts",
        "power_cap_watts",
        "hotspot_celsius",
        "mem_celsius",
        "hbm_bytes",
        "gfx_clock_mhz",
        "mem_clock_mhz",
    ] {
        note(&mut pg.provenance, f, SourceKind::Nvidia, src, at_ms, None);
    }
    if g.mig_enabled.is_some() {
        pg.mig = Some(mig_info(g, src));
    }
    pg
}

/// A MIG instance as logical GPU `id`, its profile named by the device's own profiles (N/A with
/// the reason where none fits).
fn mig_instance(
    g: &NvGpu,
    inst: &NvInstance,
    profiles: &[MigProfile],
    id: u32,
    src: &str,
    at_ms: u64,
) -> LogicalGpu {
    let named = instance_profile(profiles, inst);
    let mut l = LogicalGpu {
        gpu_id: id,
        partition_id: inst.gi,
        bdf: format!("{}/gi{}", g.bdf, inst.gi),
        vram_total_bytes: inst.mem_total_mib.and_then(mib_bytes),
        vram_share_bytes: inst.mem_total_mib.and_then(mib_bytes),
        vram_used_bytes: inst.mem_used_mib.and_then(mib_bytes),
        cu_count: inst.sms,
        uuid: inst.uuid.clone(),
        profile: named.as_ref().ok().cloned(),
        gr_engine_active_percent: inst.gr_engine_active,
        ..LogicalGpu::default()
    };
    for f in ["vram_total_bytes", "vram_used_bytes", "cu_count"] {
        note(&mut l.provenance, f, SourceKind::Nvidia, src, at_ms, None);
    }
    note(
        &mut l.provenance,
        "profile",
        SourceKind::Nvidia,
        src,
        at_ms,
        named.err().map(Missing::NotApplicable),
    );
    l
}

/// A GPU without MIG instances as one logical GPU, `id`.
fn whole_gpu(g: &NvGpu, id: u32, src: &str, at_ms: u64) -> LogicalGpu {
    let mut l = LogicalGpu {
        gpu_id: id,
        partition_id: 0,
        bdf: g.bdf.clone(),
        vram_total_bytes: g.mem_total_mib.and_then(mib_bytes),
        vram_used_bytes: g.mem_used_mib.and_then(mib_bytes),
        gfx_busy_percent: g.util_gpu,
        umc_busy_percent: g.util_mem,
        gr_engine_active_percent: g.counters.gr_engine_active,
        uuid: g.uuid.clone(),
        ..LogicalGpu::default()
    };
    for f in [
        "vram_total_bytes",
        "vram_used_bytes",
        "gfx_busy_percent",
        "umc_busy_percent",
    ] {
        note(&mut l.provenance, f, SourceKind::Nvidia, src, at_ms, None);
    }
    l
}

/// `g`'s processes into `processes`, each use on the logical GPU of its instance (`ids`); a
/// process on several GPUs is one process with several uses.
fn add_processes(
    processes: &mut Vec<Process>,
    g: &NvGpu,
    ids: &[(Option<u32>, u32)],
    src: &str,
    at_ms: u64,
) {
    for p in &g.processes {
        let id = ids
            .iter()
            .find(|(gi, _)| gi.is_none() || *gi == p.gi)
            .map_or(ids.first().map_or(0, |x| x.1), |x| x.1);
        let u = GpuUse {
            gpu_id: id,
            vram_bytes: p.used_mib.and_then(mib_bytes),
            // NVML's per-process SM share is its graphics/compute engine busy.
            engine_percent: p
                .sm_util
                .map(|v| ("sm".to_string(), f64::from(v.min(100))))
                .into_iter()
                .collect(),
            ..GpuUse::default()
        };
        match processes.iter_mut().find(|x| x.pid == p.pid) {
            Some(x) => x.gpus.push(u),
            None => {
                let mut pr = Process {
                    pid: p.pid,
                    name: p.name.clone(),
                    listed_by_amdsmi: true,
                    gpus: vec![u],
                    ..Process::default()
                };
                note(
                    &mut pr.provenance,
                    "gpus",
                    SourceKind::Nvidia,
                    src,
                    at_ms,
                    None,
                );
                processes.push(pr);
            }
        }
    }
}

/// MiB as bytes, checked: a shift would drop the high bits of an absurd figure and show a
/// plausible one.
fn mib_bytes(m: u64) -> Option<u64> {
    m.checked_mul(1 << 20)
}
