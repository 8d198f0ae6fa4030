//! Typed views of the amd-smi JSON partop reads. Only the fields partop uses are named; serde
//! skips the rest without allocating, which keeps a 64-GPU parse well under a millisecond.

use super::json::{Id, Q, Section, Text};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;

/// `amd-smi list [-e] --json`, one element.
#[derive(Debug, Clone, Deserialize)]
pub struct ListEntry {
    /// amd-smi index.
    pub gpu: u32,
    /// Full BDF with partition function.
    #[serde(default)]
    pub bdf: Text,
    /// UUID.
    #[serde(default)]
    pub uuid: Text,
    /// KFD gpu id (6.3+).
    #[serde(default)]
    pub kfd_id: Id,
    /// KFD node (6.3+).
    #[serde(default)]
    pub node_id: Id,
    /// Partition id (6.3+).
    #[serde(default)]
    pub partition_id: Id,
    /// Render node (`list -e`, 6.4+).
    #[serde(default)]
    pub render: Text,
}

/// `amd-smi static -a -b -v -p [-l] --json`, one element.
#[derive(Debug, Clone, Deserialize)]
pub struct StaticEntry {
    /// amd-smi index.
    pub gpu: u32,
    /// ASIC.
    #[serde(default)]
    pub asic: Option<Section<Asic>>,
    /// Bus.
    #[serde(default)]
    pub bus: Option<Section<Bus>>,
    /// VRAM.
    #[serde(default)]
    pub vram: Option<Section<Vram>>,
    /// Partition modes.
    #[serde(default)]
    pub partition: Option<Section<StaticPartition>>,
    /// Power and temperature limits.
    #[serde(default)]
    pub limit: Option<Section<Limit>>,
}

/// `static.asic`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Asic {
    /// Market name.
    #[serde(default)]
    pub market_name: Text,
    /// PCI device id.
    #[serde(default)]
    pub device_id: Text,
    /// Serial.
    #[serde(default)]
    pub asic_serial: Text,
    /// OAM slot.
    #[serde(default)]
    pub oam_id: Id,
    /// CUs of this logical GPU.
    #[serde(default)]
    pub num_compute_units: Option<Q>,
}

/// `static.bus`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Bus {
    /// BDF.
    #[serde(default)]
    pub bdf: Text,
}

/// `static.vram`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Vram {
    /// Size.
    #[serde(default)]
    pub size: Option<Q>,
}

/// `static.partition` (6.3-6.4.1 `compute_partition`; 6.4.2+ `accelerator_partition`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StaticPartition {
    /// Old key.
    #[serde(default)]
    pub compute_partition: Text,
    /// New key.
    #[serde(default)]
    pub accelerator_partition: Text,
    /// Memory mode.
    #[serde(default)]
    pub memory_partition: Text,
    /// Partition id.
    #[serde(default)]
    pub partition_id: Id,
}

impl StaticPartition {
    /// The compute mode under either key.
    pub fn compute(&self) -> Option<&str> {
        self.accelerator_partition
            .get()
            .or_else(|| self.compute_partition.get())
    }
}

/// `static.limit` (7.0/7.1 flat keys; 7.2+ `ppt0`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Limit {
    /// 7.0/7.1.
    #[serde(default)]
    pub socket_power: Option<Q>,
    /// 7.2+.
    #[serde(default)]
    pub ppt0: Option<Section<Ppt>>,
}

/// `static.limit.ppt0`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Ppt {
    /// Current cap.
    #[serde(default)]
    pub socket_power_limit: Option<Q>,
}

impl Limit {
    /// Power cap in W under either layout.
    pub fn cap(&self) -> Option<f64> {
        self.socket_power.and_then(Q::num).or_else(|| {
            self.ppt0
                .as_ref()?
                .get()?
                .socket_power_limit
                .and_then(Q::num)
        })
    }
}

/// `amd-smi metric -u -p -t -m --json`, one element.
#[derive(Debug, Clone, Deserialize)]
pub struct MetricEntry {
    /// amd-smi index.
    pub gpu: u32,
    /// Usage.
    #[serde(default)]
    pub usage: Option<Section<Usage>>,
    /// Power.
    #[serde(default)]
    pub power: Option<Section<Power>>,
    /// Temperatures.
    #[serde(default)]
    pub temperature: Option<Section<Temperature>>,
    /// Memory use.
    #[serde(default)]
    pub mem_usage: Option<Section<MemUsage>>,
}

/// `metric.usage`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Usage {
    /// GFX busy.
    #[serde(default)]
    pub gfx_activity: Option<Q>,
    /// Memory controller busy.
    #[serde(default)]
    pub umc_activity: Option<Q>,
    /// Per-XCP, per-XCC busy (`xcp_N` → list), on the primary only.
    #[serde(default)]
    pub gfx_busy_inst: Option<Section<BTreeMap<String, Vec<Q>>>>,
}

/// `metric.power`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Power {
    /// Socket power.
    #[serde(default)]
    pub socket_power: Option<Q>,
}

/// `metric.temperature`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Temperature {
    /// Edge (N/A on MI300).
    #[serde(default)]
    pub edge: Option<Q>,
    /// Hotspot.
    #[serde(default)]
    pub hotspot: Option<Q>,
    /// HBM.
    #[serde(default)]
    pub mem: Option<Q>,
}

/// `metric.mem_usage`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct MemUsage {
    /// Total VRAM.
    #[serde(default)]
    pub total_vram: Option<Q>,
    /// Used VRAM.
    #[serde(default)]
    pub used_vram: Option<Q>,
}

/// `amd-smi process --json`, one element per logical GPU.
#[derive(Debug, Clone, Deserialize)]
pub struct ProcessEntry {
    /// amd-smi index.
    pub gpu: u32,
    /// Processes; empty slots are dropped.
    #[serde(default)]
    pub process_list: Vec<ProcessSlot>,
}

/// One `process_list` element: `{"process_info": {...}}` or the "No running processes detected"
/// string in its place.
#[derive(Debug, Clone, Deserialize)]
pub struct ProcessSlot {
    /// The process, if any.
    pub process_info: ProcessInfoOrNone,
}

/// The process info or the no-process string.
#[derive(Debug, Clone)]
pub struct ProcessInfoOrNone(pub Option<ProcessInfo>);

impl<'de> Deserialize<'de> for ProcessInfoOrNone {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ProcessInfoOrNone;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a process object or \"No running processes detected\"")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(ProcessInfoOrNone(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                ProcessInfo::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|p| ProcessInfoOrNone(Some(p)))
            }
        }
        d.deserialize_any(V)
    }
}

/// `process_info`.
#[derive(Debug, Clone, Deserialize)]
pub struct ProcessInfo {
    /// Name (`N/A` for other users' processes without root).
    #[serde(default)]
    pub name: Text,
    /// PID.
    pub pid: u32,
    /// Memory by kind.
    #[serde(default)]
    pub memory_usage: Option<Section<ProcessMemory>>,
    /// Sum of gtt + cpu + vram.
    #[serde(default)]
    pub mem_usage: Option<Q>,
    /// CUs in use (6.4.2+; bare int or N/A).
    #[serde(default)]
    pub cu_occupancy: Option<Q>,
}

/// `process_info.memory_usage`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ProcessMemory {
    /// GTT.
    #[serde(default)]
    pub gtt_mem: Option<Q>,
    /// CPU.
    #[serde(default)]
    pub cpu_mem: Option<Q>,
    /// VRAM.
    #[serde(default)]
    pub vram_mem: Option<Q>,
}

/// `amd-smi partition -c -m [-a] --json`, either shape: 7.x prints one object of arrays, 6.x
/// (like its other commands) a top-level array of per-GPU rows carrying the current modes (and,
/// where printed, the memory caps). Both are read into the 7.x form.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PartitionDoc {
    /// Current modes.
    #[serde(default)]
    pub current_partition: Vec<CurrentRow>,
    /// Memory caps.
    #[serde(default)]
    pub memory_partition: Vec<MemoryRow>,
    /// Accelerator profiles (root only).
    #[serde(default)]
    pub partition_profiles: Vec<ProfileRow>,
}

/// A 6.x per-GPU partition row: the current modes, and the memory caps where it has them.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PerGpuPartitionRow {
    /// The current modes.
    #[serde(flatten)]
    pub current: CurrentRow,
    /// The GPU index under 6.x's other commands' key, where the row has no `gpu_id`.
    #[serde(default)]
    pub gpu: Id,
    /// `"NPS1,NPS2,NPS4"`, where printed.
    #[serde(default)]
    pub memory_partition_caps: Text,
    /// The current memory mode, where printed under this key.
    #[serde(default)]
    pub current_memory_partition: Text,
}

impl PartitionDoc {
    /// The 7.x form of 6.x's per-GPU rows (no profiles: 6.x prints them only as a table).
    pub fn from_rows(mut rows: Vec<PerGpuPartitionRow>) -> Self {
        for r in &mut rows {
            if r.current.gpu_id.0.is_none() {
                r.current.gpu_id = r.gpu;
            }
        }
        let memory_partition = rows
            .iter()
            .filter(|r| {
                r.memory_partition_caps.get().is_some()
                    || r.current_memory_partition.get().is_some()
            })
            .map(|r| MemoryRow {
                gpu_id: r.current.gpu_id,
                memory_partition_caps: r.memory_partition_caps.clone(),
                current_memory_partition: r.current_memory_partition.clone(),
            })
            .collect();
        Self {
            current_partition: rows.into_iter().map(|r| r.current).collect(),
            memory_partition,
            partition_profiles: Vec::new(),
        }
    }
}

/// `current_partition` row.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CurrentRow {
    /// amd-smi index.
    #[serde(default)]
    pub gpu_id: Id,
    /// Memory mode.
    #[serde(default)]
    pub memory: Text,
    /// Compute mode.
    #[serde(default)]
    pub accelerator_type: Text,
    /// Profile index.
    #[serde(default)]
    pub accelerator_profile_index: Id,
    /// Partition id (a string).
    #[serde(default)]
    pub partition_id: Id,
}

/// `memory_partition` row.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct MemoryRow {
    /// amd-smi index.
    #[serde(default)]
    pub gpu_id: Id,
    /// `"NPS1,NPS2,NPS4"`.
    #[serde(default)]
    pub memory_partition_caps: Text,
    /// Current.
    #[serde(default)]
    pub current_memory_partition: Text,
}

/// `partition_profiles` row; continuation rows have `""` in the leading fields.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ProfileRow {
    /// amd-smi index.
    #[serde(default)]
    pub gpu_id: Id,
    /// Profile index.
    #[serde(default)]
    pub profile_index: Id,
    /// Memory caps for this profile.
    #[serde(default)]
    pub memory_partition_caps: Text,
    /// Compute mode (`DPX*` marks the current one).
    #[serde(default)]
    pub accelerator_type: Text,
    /// Partitions in this profile.
    #[serde(default)]
    pub num_partitions: Id,
}
