//! The node snapshot: one owned, immutable picture of the node that collectors publish and
//! everything else reads. It serialises to the stable JSON document of `docs/json.md`, so it can
//! travel (a Prometheus exporter, a fleet view over SSH) without change.

use super::modes::{ComputeMode, MemoryMode};
use super::product::Profile;
use super::provenance::{Missing, Provenance, SourceKind};
use serde::{Deserialize, Serialize};

/// Health of one source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Last read succeeded.
    Ok,
    /// Last read succeeded with warnings (e.g. per-GPU status lines).
    Degraded,
    /// Not answered yet, and no read has failed: its first read is still running (amd-smi's
    /// first answer takes 3 to 9 s on a healthy node). Said as `pending`, never as trouble; a
    /// node is judged on a later sample.
    Pending,
    /// Last read failed; values shown are from an older read.
    Stale,
    /// Never read successfully: its reads failed.
    #[default]
    Down,
}

/// One data source (an amd-smi command family, sysfs, ...).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceStatus {
    /// Name (`amd-smi`).
    pub name: String,
    /// Tool version, when known.
    #[serde(default)]
    pub version: Option<String>,
    /// Health.
    pub status: Health,
    /// Last error or warning, verbatim enough to act on.
    #[serde(default)]
    pub error: Option<String>,
    /// When the last successful read finished (ms since epoch).
    #[serde(default)]
    pub last_ok_ms: Option<u64>,
    /// How long the last read took.
    #[serde(default)]
    pub took_ms: Option<u64>,
    /// For a source read on its own cadence (amd-smi beside the kernel): how often and at what
    /// cost, so the header can say what is polled and what it costs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cadence: Option<Cadence>,
}

impl SourceStatus {
    /// A source that has not been read (yet), with why when there is a reason.
    pub fn down(name: &str, error: Option<String>) -> Self {
        Self {
            name: name.to_string(),
            version: None,
            status: Health::Down,
            error,
            last_ok_ms: None,
            took_ms: None,
            cadence: None,
        }
    }

    /// A source whose first read has not answered yet (no failure seen), with what it waits on.
    pub fn pending(name: &str, note: Option<String>) -> Self {
        Self {
            status: Health::Pending,
            ..Self::down(name, note)
        }
    }
}

/// How often a source is read and what it costs (children included).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cadence {
    /// Interval between reads now, ms.
    pub every_ms: u64,
    /// CPU of the last read, ms (the programs it ran included).
    pub cpu_ms: u64,
    /// Wall time of the last read, ms.
    pub wall_ms: u64,
    /// Program runs in the last minute.
    pub calls_per_min: u32,
    /// Share of one core at this interval, percent.
    pub core_percent: f64,
    /// Why the interval is what it is (`budget`, `minimum`, `fallback`).
    pub why: String,
}

/// A logical GPU: one partition (XCP) of a physical GPU. Identity is (physical BDF,
/// partition id); `gpu_id` is amd-smi's index, valid only until the next repartition.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogicalGpu {
    /// amd-smi / HIP index.
    pub gpu_id: u32,
    /// Partition (XCP) index inside the physical GPU; 0 = primary.
    pub partition_id: u32,
    /// Full BDF including the partition function (`0000:05:00.1`).
    pub bdf: String,
    /// CUs owned.
    pub cu_count: Option<u32>,
    /// XCDs owned.
    #[serde(default)]
    pub xcds: Vec<u32>,
    /// Memory domains it allocates from.
    #[serde(default)]
    pub memory_domains: Vec<u32>,
    /// VRAM in use, bytes.
    pub vram_used_bytes: Option<u64>,
    /// VRAM total as reported, bytes. On a multi-partition primary amd-smi reports the whole
    /// device here; see `vram_share_bytes`.
    pub vram_total_bytes: Option<u64>,
    /// This partition's even share of HBM (derived from the layout).
    pub vram_share_bytes: Option<u64>,
    /// Graphics busy, percent.
    pub gfx_busy_percent: Option<f64>,
    /// Instantaneous busy of each of its XCCs, percent, in XCC order (empty where not given).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xcc_busy_percent: Vec<f64>,
    /// Memory-controller busy, percent (device-wide; primary only).
    pub umc_busy_percent: Option<f64>,
    /// Graphics-engine activity, percent of the time since the last sample (NVIDIA's GPM,
    /// Hopper and later: dcgm-exporter's `DCGM_FI_PROF_GR_ENGINE_ACTIVE`; per MIG instance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gr_engine_active_percent: Option<f64>,
    /// DRM render node (`renderD128`).
    pub render_node: Option<String>,
    /// amd-smi UUID (not an identity: shared by partitions before ROCm 7.0).
    pub uuid: Option<String>,
    /// KFD gpu id.
    pub kfd_id: Option<u64>,
    /// KFD topology node.
    pub node_id: Option<u32>,
    /// NVIDIA MIG: the GPU-instance profile (`3g.71gb`); the logical GPU is a GPU instance and
    /// `partition_id` its instance id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The pod containers the kubelet allocated it to (PodResources; empty off Kubernetes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<PodRef>,
    /// Origin of every field above.
    #[serde(default)]
    pub provenance: Provenance,
}

impl PhysicalGpu {
    /// Its partition modes as one label: `CPX/NPS4` (AMD), `MIG 3 GI` / `MIG off` (NVIDIA).
    pub fn modes_label(&self) -> String {
        if let Some(m) = &self.mig {
            let pending = if m.pending == m.enabled {
                ""
            } else if m.pending {
                " (on after reset)"
            } else {
                " (off after reset)"
            };
            return if m.enabled {
                format!("MIG {} GI{pending}", self.partitions.len())
            } else {
                format!("MIG off{pending}")
            };
        }
        format!(
            "{}/{}",
            self.compute_partition.map_or("?", |c| c.name()),
            self.memory_partition.map_or("?", |m| m.name())
        )
    }
}

impl LogicalGpu {
    /// The primary partition carries device-wide metrics.
    pub const fn is_primary(&self) -> bool {
        self.partition_id == 0
    }

    /// VRAM capacity to show in a bar: the partition's own share where the reported total is the
    /// whole device.
    pub fn vram_capacity_bytes(&self) -> Option<u64> {
        match (self.vram_total_bytes, self.vram_share_bytes) {
            (Some(t), Some(s)) if t > s => Some(s),
            (Some(t), _) => Some(t),
            (None, s) => s,
        }
    }
}

/// A device's energy, link and error counters, each N/A where its source does not give it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceCounters {
    /// Energy consumed since the driver loaded, µJ.
    pub energy_uj: Option<f64>,
    /// PCIe link width now, lanes.
    pub pcie_width: Option<u32>,
    /// PCIe link speed now, GT/s.
    pub pcie_speed_gts: Option<f64>,
    /// PCIe link's top speed, GT/s.
    pub pcie_max_speed_gts: Option<f64>,
    /// PCIe bandwidth now, MB/s.
    pub pcie_bandwidth_mbs: Option<f64>,
    /// PCIe replays (accumulated).
    pub pcie_replay: Option<u64>,
    /// PCIe replay-counter rollovers (accumulated).
    pub pcie_replay_rollover: Option<u64>,
    /// PCIe L0-to-recovery transitions (accumulated).
    pub pcie_recovery: Option<u64>,
    /// PCIe NAKs sent (accumulated).
    pub pcie_nak_sent: Option<u64>,
    /// PCIe NAKs received (accumulated).
    pub pcie_nak_received: Option<u64>,
    /// XGMI data read per link, KB (link index, value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xgmi_read_kb: Vec<(u32, u64)>,
    /// XGMI data written per link, KB (link index, value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xgmi_write_kb: Vec<(u32, u64)>,
    /// Correctable ECC errors, every RAS block summed.
    pub ecc_correctable: Option<u64>,
    /// Uncorrectable ECC errors, every RAS block summed.
    pub ecc_uncorrectable: Option<u64>,
    /// Video encoder utilisation, % (NVIDIA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enc_util_percent: Option<f64>,
    /// Video decoder utilisation, % (NVIDIA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dec_util_percent: Option<f64>,
    /// HBM rows remapped for correctable errors (NVIDIA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_rows_correctable: Option<u64>,
    /// HBM rows remapped for uncorrectable errors (NVIDIA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_rows_uncorrectable: Option<u64>,
    /// A row remapping failed (NVIDIA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_remap_failure: Option<bool>,
    /// The last XID error the driver reported while partop watched (0: none) (NVIDIA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid_last: Option<u64>,
    /// XID errors the driver reported while partop watched (NVIDIA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid_count: Option<u64>,
}

impl DeviceCounters {
    /// Nothing known.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A physical GPU (one OAM module) and its partitions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhysicalGpu {
    /// BDF without the partition function (`0000:05:00`).
    pub bdf: String,
    /// Market name.
    pub product: String,
    /// Product-table key when identified (`mi300x`).
    pub product_key: Option<String>,
    /// PCI device id.
    pub device_id: Option<String>,
    /// OAM slot.
    pub oam_id: Option<u32>,
    /// Serial.
    pub serial: Option<String>,
    /// The device's own UUID where it has one apart from its logical GPUs' (NVIDIA `GPU-…`,
    /// the parent of its MIG instances).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// XCDs.
    pub xcd_count: Option<u32>,
    /// Total CUs.
    pub cu_count: Option<u32>,
    /// HBM size, bytes.
    pub hbm_bytes: Option<u64>,
    /// XGMI hive id.
    pub hive: Option<String>,
    /// Current compute (accelerator) mode.
    pub compute_partition: Option<ComputeMode>,
    /// Current memory (NPS) mode.
    pub memory_partition: Option<MemoryMode>,
    /// Memory modes the device offers (`partition --memory` caps).
    #[serde(default)]
    pub memory_caps: Vec<MemoryMode>,
    /// Compute x memory combinations offered.
    #[serde(default)]
    pub profiles: Vec<Profile>,
    /// Graphics (SM / GFX) clock now, MHz (the highest XCC's on AMD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gfx_clock_mhz: Option<u32>,
    /// Memory clock now, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_clock_mhz: Option<u32>,
    /// Graphics clock of each XCC now, MHz, in XCC order (empty where not given).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gfx_clocks_mhz: Vec<u32>,
    /// VBIOS version (`113-M3000100-103`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vbios_version: Option<String>,
    /// Kernel driver version (amdgpu's module version, or NVIDIA's driver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// NVIDIA GPUs: MIG mode and the GPU-instance profiles offered (None on AMD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<super::mig_profiles::MigInfo>,
    /// Socket power, watts (device-wide).
    pub power_watts: Option<f64>,
    /// Power cap, watts.
    pub power_cap_watts: Option<f64>,
    /// Hotspot temperature, °C.
    pub hotspot_celsius: Option<f64>,
    /// HBM temperature, °C.
    pub mem_celsius: Option<f64>,
    /// Energy, PCIe, XGMI and ECC counters (what DME's dashboards chart besides busy and
    /// memory).
    #[serde(default, skip_serializing_if = "DeviceCounters::is_empty")]
    pub counters: DeviceCounters,
    /// Logical GPUs, by partition id.
    pub partitions: Vec<LogicalGpu>,
    /// Origin of every field above.
    #[serde(default)]
    pub provenance: Provenance,
}

/// A process's use of one logical GPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuUse {
    /// amd-smi index of the logical GPU.
    pub gpu_id: u32,
    /// VRAM, bytes.
    pub vram_bytes: Option<u64>,
    /// GTT (system memory mapped for the GPU), bytes.
    pub gtt_bytes: Option<u64>,
    /// CUs occupied by its waves (point sample).
    pub cu_occupancy: Option<u32>,
    /// CU occupancy as a percentage of the logical GPU's CUs.
    pub cu_percent: Option<f64>,
    /// SDMA (copy engine) time, microseconds (KFD).
    #[serde(default)]
    pub sdma_us: Option<u64>,
    /// It has this GPU's render node open.
    #[serde(default)]
    pub render_open: bool,
    /// Busy percent per DRM engine (`dec`, `enc`, `compute`, ...) from fdinfo deltas.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub engine_percent: std::collections::BTreeMap<String, f64>,
}

impl GpuUse {
    /// Its busy on this GPU, percent: the busiest DRM engine (fdinfo), else CU occupancy.
    pub fn busy_percent(&self) -> Option<f64> {
        self.engine_percent
            .values()
            .copied()
            .filter(|v| v.is_finite())
            .reduce(f64::max)
            .or(self.cu_percent)
    }

    /// Attached (a context or an open node) but using nothing: what HIP does to every visible GPU.
    pub fn attached_only(&self) -> bool {
        self.vram_bytes.unwrap_or(0) == 0 && self.cu_occupancy.unwrap_or(0) == 0
    }
}

/// A process holding one or more logical GPUs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Process {
    /// PID.
    pub pid: u32,
    /// Short name.
    pub name: Option<String>,
    /// User.
    #[serde(default)]
    pub user: Option<String>,
    /// Full command line.
    #[serde(default)]
    pub command: Option<String>,
    /// Parent PID.
    #[serde(default)]
    pub ppid: Option<u32>,
    /// Start time, ms since epoch.
    #[serde(default)]
    pub started_at_ms: Option<u64>,
    /// Container id (docker, containerd, podman), from the cgroup.
    #[serde(default)]
    pub container_id: Option<String>,
    /// systemd unit, from the cgroup.
    #[serde(default)]
    pub systemd_unit: Option<String>,
    /// Kubernetes pod UID, from the cgroup.
    #[serde(default)]
    pub k8s_pod_uid: Option<String>,
    /// Start time in clock ticks since boot (/proc/PID/stat): with the pid, the process's
    /// identity, checked before every signal so a reused pid is never hit.
    #[serde(default)]
    pub start_ticks: Option<u64>,
    /// It has /dev/kfd open (a ROCm process, or an agent): it blocks driver reloads.
    #[serde(default)]
    pub holds_kfd: bool,
    /// amd-smi lists it (false: found only from /proc).
    #[serde(default)]
    pub listed_by_amdsmi: bool,
    /// A known node agent (gpuagent, the metrics exporter, the device plugin).
    #[serde(default)]
    pub agent: Option<String>,
    /// HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES, where readable.
    #[serde(default)]
    pub visible_devices: std::collections::BTreeMap<String, String>,
    /// Per logical GPU.
    pub gpus: Vec<GpuUse>,
    /// Host CPU it used since the previous sample, % of one core (a data loader pinning cores
    /// shows here; above 100 on several cores).
    #[serde(default)]
    pub cpu_percent: Option<f64>,
    /// Resident host memory (VmRSS), bytes.
    #[serde(default)]
    pub rss_bytes: Option<u64>,
    /// Seconds since it started, at the sample.
    #[serde(default)]
    pub running_secs: Option<u64>,
    /// Its open files are hidden from this user (another user's process, seen through KFD):
    /// its render nodes, engine use and environment are unknown, shown dimmed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub files_hidden: bool,
    /// The pod container whose allocated GPU it holds (or whose pod UID its cgroup names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
    /// Origin of every field above.
    #[serde(default)]
    pub provenance: Provenance,
}

impl Process {
    /// Which GPUs it holds and how, in words: the one description the snapshot table, the
    /// kill prompt and the kill dialog all show (a confirmation must say what the screen says).
    pub fn gpu_label(&self) -> String {
        let ids = |attached: bool| {
            self.gpus
                .iter()
                .filter(|u| u.attached_only() == attached)
                .map(|u| u.gpu_id.to_string())
                .collect::<Vec<_>>()
        };
        let (active, attached) = (ids(false), ids(true));
        let mut label = if !active.is_empty() {
            format!("logical GPU {}", active.join(","))
        } else if !attached.is_empty() {
            format!("logical GPU {} (attached only)", attached.join(","))
        } else if self.holds_kfd {
            "/dev/kfd only (every GPU)".to_string()
        } else {
            "no GPU".to_string()
        };
        if let Some(m) = self.mark() {
            label.push_str(&format!(" ({m})"));
        }
        label
    }

    /// What a row of it says beside its numbers, if anything: another user's process whose
    /// files are hidden, or one attached to /dev/kfd only (it blocks driver reloads).
    pub fn mark(&self) -> Option<&'static str> {
        if self.files_hidden {
            Some("another user's: files hidden, needs root")
        } else if self.holds_kfd && self.gpus.iter().all(GpuUse::attached_only) {
            Some("attached only: holds /dev/kfd")
        } else {
            None
        }
    }

    /// VRAM over all GPUs.
    pub fn vram_total(&self) -> u64 {
        self.gpus
            .iter()
            .filter_map(|g| g.vram_bytes)
            .fold(0, u64::saturating_add)
    }

    /// VRAM over all GPUs, None where no GPU says.
    pub fn vram_total_bytes(&self) -> Option<u64> {
        self.gpus
            .iter()
            .any(|g| g.vram_bytes.is_some())
            .then(|| self.vram_total())
    }

    /// Its engine busy, percent: the busiest DRM engine of its busiest GPU (fdinfo engine
    /// time; NVML's SM share on NVIDIA). None where no engine counts its work: ROCm compute
    /// goes through KFD queues, which fdinfo does not count.
    pub fn engine_busy_percent(&self) -> Option<f64> {
        self.gpus
            .iter()
            .flat_map(|g| g.engine_percent.values().copied())
            .filter(|v| v.is_finite())
            .reduce(f64::max)
    }

    /// Its GPU busy, percent: the busiest of its GPUs, each read as its busiest DRM engine
    /// (fdinfo engine time, where the kernel counts the work there) or, where no engine is
    /// counted (ROCm compute goes through KFD queues, not DRM), its CU occupancy from KFD or
    /// the share NVML gives. None where no source says.
    pub fn gpu_busy_percent(&self) -> Option<f64> {
        self.gpus
            .iter()
            .filter_map(GpuUse::busy_percent)
            .reduce(f64::max)
    }
}

/// One picture of the node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Format version of this document.
    pub schema: u32,
    /// Host name.
    pub host: String,
    /// RFC 3339 time the collection finished.
    pub taken_at: String,
    /// Same, ms since epoch.
    pub taken_at_ms: u64,
    /// Increases with every snapshot a collector publishes.
    pub generation: u64,
    /// True when the node is partop's simulator.
    #[serde(default)]
    pub simulated: bool,
    /// The sources and their health.
    pub sources: Vec<SourceStatus>,
    /// Physical GPUs in BDF order.
    pub gpus: Vec<PhysicalGpu>,
    /// Processes holding GPUs.
    pub processes: Vec<Process>,
    /// How this node's driver is reloaded after a memory-mode change (from the amd-smi version).
    #[serde(default)]
    pub reload: Option<super::modes::Reload>,
    /// Served models: registered and discovered, with health and load.
    #[serde(default)]
    pub models: Vec<super::model_status::ServedModel>,
    /// The host's CPU and memory beside the GPUs (absent in a replay of an older recording).
    #[serde(default)]
    pub host_usage: Option<HostUsage>,
    /// What permissions hid from this user (absent when nothing was hidden).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<Hidden>,
    /// What the kubelet's PodResources API said (absent off Kubernetes: no socket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<Kubelet>,
    /// This sample's model-server counters for the throughput recorder, filled by the model
    /// prober and read by the app side's recorder (`exec::throughput::spawn`); never part of
    /// the document (the node's own partop records).
    #[serde(skip)]
    pub throughput: Vec<super::model_status::Reading>,
}

/// One container of a pod that holds a device, in cluster terms.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// Extended resource (`amd.com/gpu`, `amd.com/cpx_nps4`, `nvidia.com/gpu`) or, for a DRA
    /// device, `<driver> claim <namespace>/<claim>`.
    pub resource: String,
    /// The pod's priority class, as the API server says (empty: the pod names none, so the
    /// cluster's default applies; None: not known: PodResources does not carry it and the API
    /// server did not answer for the pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
}

impl PodRef {
    /// `namespace/pod`, the way kubectl names a pod.
    pub fn label(&self) -> String {
        format!("{}/{}", self.namespace, self.pod)
    }
}

/// The kubelet's view of the node's devices, from PodResources.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kubelet {
    /// Devices the kubelet can allocate, per resource (`GetAllocatableResources`).
    #[serde(default)]
    pub allocatable: std::collections::BTreeMap<String, u32>,
    /// Pods with at least one device (`List`).
    #[serde(default)]
    pub pods_with_devices: u32,
    /// Allocated device ids that name no GPU partop sees (`resource` and id).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmatched: Vec<String>,
    /// Where the answer came from (the socket path).
    pub source: String,
    /// The node: its name as the collector knows it, and its DCM labels where the API
    /// server answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<KubeNode>,
    /// Model-serving pods on this node, per service (KServe InferenceServices, vLLM
    /// deployments), read from the API server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ClusterModel>,
}

/// The node's object in the API server, as far as partop needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeNode {
    /// The Node's name.
    pub name: String,
    /// The DCM profile that manages the node (label `dcm.amd.com/gpu-config-profile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcm_profile: Option<String>,
    /// DCM's state of it (label `dcm.amd.com/gpu-config-profile-state`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcm_state: Option<String>,
}

impl KubeNode {
    /// The header's words for a DCM-managed node (`DCM:cpx-nps4 success`), escaped and
    /// bounded; None when no DCM profile manages it.
    pub fn dcm_label(&self) -> Option<String> {
        let p = self.dcm_profile.as_deref()?;
        let mut s = format!("DCM:{}", super::text::escape_controls(bounded(p)));
        if let Some(st) = &self.dcm_state {
            s.push(' ');
            s.push_str(&super::text::escape_controls(bounded(st)));
        }
        Some(s)
    }

    /// The warning a local change on a DCM-managed node carries (None: not managed).
    pub fn dcm_warning(&self) -> Option<String> {
        let p = self.dcm_profile.as_deref()?;
        Some(format!(
            "the node {} is managed by the DCM profile {}: DCM may revert a local change; change it the cluster's way: `partop plan --compute … --memory … --dcm NAME` prints the layout as a DCM profile",
            super::text::escape_controls(bounded(&self.name)),
            super::text::escape_controls(bounded(p)),
        ))
    }
}

/// A label value is at most 63 characters; a node name 253. Longer is cut (it is not the API
/// server's, or not sane), so a hostile value cannot fill the header.
fn bounded(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A model served by pods of the cluster (a KServe InferenceService, a vLLM deployment),
/// as the API server says of its pods.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterModel {
    /// The service's name (the InferenceService, or the pods' owner).
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// How it was recognised: `kserve` (the label `serving.kserve.io/inferenceservice`) or
    /// `vllm` (a container running `vllm serve` / vLLM's OpenAI API server).
    pub kind: String,
    /// Its pods that are Ready.
    pub ready: u32,
    /// Its pods (not being deleted).
    pub pods: u32,
    /// Its pods on this node (`namespace/pod` is `namespace` and these names).
    #[serde(default)]
    pub pods_here: Vec<String>,
    /// The logical GPUs its pods on this node hold (from the kubelet's allocations).
    #[serde(default)]
    pub gpus: Vec<u32>,
}

impl ClusterModel {
    /// `ready/pods`, the replicas healthy.
    pub fn replicas(&self) -> String {
        format!("{}/{}", self.ready, self.pods)
    }
}

/// What this user could not see: processes whose open files (`/proc/PID/fd`, `fdinfo`,
/// `environ`) are another user's. A GPU process among them is still seen through KFD's
/// per-process files (world-readable), with its VRAM; one holding only a render node is not.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hidden {
    /// GPU processes seen through KFD only: their device files, render nodes and engine use
    /// are hidden.
    pub processes: u32,
    /// Processes whose open files could not be read at the last complete scan (any of them
    /// may hold a render node).
    pub unreadable: u32,
}

impl Hidden {
    /// Why values are missing.
    pub const WHY: &'static str = "needs root (or CAP_SYS_PTRACE)";

    /// The header's line.
    pub fn describe(&self) -> String {
        format!(
            "{} GPU process(es) seen through KFD only, {} other process(es)' open files hidden: {}; run partop as root to see every holder",
            self.processes,
            self.unreadable,
            Self::WHY
        )
    }
}

/// The host's own load: what a data loader pinning cores or a host-memory hog shows as.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostUsage {
    /// CPUs online.
    pub cpus: u32,
    /// Busy share of all CPUs since the previous sample, % (None on the first sample).
    pub cpu_percent: Option<f64>,
    /// Load averages over 1, 5 and 15 minutes.
    pub load: [f64; 3],
    /// Memory in use (MemTotal - MemAvailable), bytes.
    pub mem_used_bytes: u64,
    /// MemTotal, bytes.
    pub mem_total_bytes: u64,
    /// Where it was read, ms since epoch.
    pub at_ms: u64,
}

/// Current snapshot document version.
pub const SCHEMA: u32 = 1;

impl Snapshot {
    /// All logical GPUs in amd-smi index order.
    pub fn logical(&self) -> impl Iterator<Item = (&PhysicalGpu, &LogicalGpu)> {
        self.gpus
            .iter()
            .flat_map(|g| g.partitions.iter().map(move |p| (g, p)))
    }

    /// Whether amd-smi's process list was read for this sample: only then does "amd-smi does
    /// not list it" mean anything (kernel first and `--source sysfs` do not ask amd-smi for
    /// processes).
    pub fn amdsmi_lists_processes(&self) -> bool {
        self.sources.iter().any(|s| {
            s.name == "amd-smi process" && matches!(s.status, Health::Ok | Health::Degraded)
        })
    }

    /// Number of logical GPUs.
    pub fn logical_count(&self) -> usize {
        self.gpus.iter().map(|g| g.partitions.len()).sum()
    }

    /// Finds a logical GPU by amd-smi index.
    pub fn by_gpu_id(&self, id: u32) -> Option<(&PhysicalGpu, &LogicalGpu)> {
        self.logical().find(|(_, l)| l.gpu_id == id)
    }

    /// Processes using a logical GPU.
    pub fn holders(&self, gpu_id: u32) -> impl Iterator<Item = &Process> {
        self.processes
            .iter()
            .filter(move |p| p.gpus.iter().any(|g| g.gpu_id == gpu_id))
    }

    /// A source by name.
    pub fn source(&self, name: &str) -> Option<&SourceStatus> {
        self.sources.iter().find(|s| s.name == name)
    }
}

/// Convenience used by collectors: the origin of a missing field and of a present one.
pub fn missing_reason_for_secondary(is_primary: bool) -> Missing {
    if is_primary {
        Missing::NotAvailable
    } else {
        Missing::SecondaryPartition
    }
}

/// Re-exported for collectors.
pub const AMD_SMI: SourceKind = SourceKind::AmdSmi;
