//! `/metrics`: one published sample (snapshot, findings, apply state) as Prometheus series,
//! built fresh for every scrape, so a partition or process that is gone has no series left
//! (nitrogen-style stale series are what nvitop-exporter users complained of). Pure: no I/O.
//!
//! Names follow AMD's Device Metrics Exporter (DME) where it has one (`gpu_gfx_activity`,
//! `gpu_used_vram` in MB, …, with its mandatory labels) and dcgm-exporter on NVIDIA nodes
//! (`DCGM_FI_DEV_GPU_UTIL`, …), so their dashboards work unchanged; what only partop knows is
//! under `partop_`. The exposition is prometheus-client's (the Prometheus organisation's crate,
//! OpenMetrics text); it does not escape label values (prometheus/client_rust#151), so every
//! value is escaped here before it is handed over: a process named `a"b` cannot break a scrape.

use crate::domain::findings::{Finding, Kind, Severity};
use crate::domain::snapshot::{Health, LogicalGpu, PhysicalGpu, Snapshot};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(String, String)>;

/// What a scrape renders: the sample and what was derived from it.
#[derive(Debug, Default)]
pub struct Exported<'a> {
    /// The sample.
    pub snap: Option<&'a Snapshot>,
    /// Findings from the tracker that follows every sample.
    pub findings: &'a [Finding],
    /// A repartition running on this node: its plan fingerprint, step index and step key.
    pub apply: Option<(String, usize, String)>,
    /// Now, ms since epoch (ages are computed against it).
    pub now_ms: u64,
    /// partop's version.
    pub version: &'a str,
    /// `cluster_name` from config.toml (AMD's dashboards start at it; empty when not set).
    pub cluster: &'a str,
}

/// Escapes a label value for the text formats (backslash, double quote, line feed) and bounds
/// it (a command line can be megabytes; a label of more than 256 bytes is cut on a character
/// boundary).
pub fn escape(v: &str) -> String {
    let mut end = v.len().min(256);
    while !v.is_char_boundary(end) {
        end -= 1;
    }
    let mut o = String::with_capacity(end + 2);
    for c in v[..end].chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c if c.is_control() => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

fn l(k: &str, v: &str) -> (String, String) {
    (k.to_string(), escape(v))
}

/// One metric family being filled.
struct Fam {
    name: &'static str,
    help: &'static str,
    /// A counter (exposed as `NAME_total`), else a gauge.
    counter: bool,
    rows: Vec<(Labels, f64)>,
}

/// Every family of one scrape, in output order.
#[derive(Default)]
struct Out {
    fams: Vec<Fam>,
}

impl Out {
    fn set(&mut self, name: &'static str, help: &'static str, labels: Labels, v: f64) {
        self.row(name, help, false, labels, v);
    }

    /// A counter's value; `name` without `_total`, which the exposition adds.
    fn count(&mut self, name: &'static str, help: &'static str, labels: Labels, v: f64) {
        if v >= 0.0 {
            self.row(name, help, true, labels, v);
        }
    }

    fn row(
        &mut self,
        name: &'static str,
        help: &'static str,
        counter: bool,
        labels: Labels,
        v: f64,
    ) {
        if !v.is_finite() {
            return;
        }
        match self.fams.iter_mut().find(|f| f.name == name) {
            Some(f) => f.rows.push((labels, v)),
            None => self.fams.push(Fam {
                name,
                help,
                counter,
                rows: vec![(labels, v)],
            }),
        }
    }

    fn opt(&mut self, name: &'static str, help: &'static str, labels: &Labels, v: Option<f64>) {
        if let Some(v) = v {
            self.set(name, help, labels.clone(), v);
        }
    }

    fn registry(self) -> (Registry, usize) {
        let mut reg = Registry::default();
        let mut n = 0;
        for f in self.fams {
            n += f.rows.len();
            if f.counter {
                let fam = Family::<Labels, Counter<f64, AtomicU64>>::default();
                for (labels, v) in f.rows {
                    fam.get_or_create(&labels).inc_by(v);
                }
                reg.register(f.name, f.help, fam);
            } else {
                let fam = Family::<Labels, Gauge<f64, AtomicU64>>::default();
                for (labels, v) in f.rows {
                    fam.get_or_create(&labels).set(v);
                }
                reg.register(f.name, f.help, fam);
            }
        }
        (reg, n)
    }
}

fn lower<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|x| x.to_string().to_lowercase()).unwrap_or_default()
}

#[expect(clippy::cast_precision_loss, reason = "byte and MB counts as gauges")]
fn mb(b: u64) -> f64 {
    (b >> 20) as f64
}

#[expect(clippy::cast_precision_loss, reason = "gauges")]
fn f(v: u64) -> f64 {
    v as f64
}

/// The vendor DME names on `card_vendor` (amd-smi's `vendor_name` for 0x1002).
const AMD_VENDOR: &str = "Advanced Micro Devices, Inc. [AMD/ATI]";

/// DME's labels on every GPU series, for one logical GPU: its mandatory ones, the identity
/// its GPU dashboard filters by (`gpu_uuid`) and the card's, and `cluster_name` (the first
/// variable of every AMD dashboard).
fn dme_labels(
    e: &Exported<'_>,
    snap: &Snapshot,
    g: &PhysicalGpu,
    p: &LogicalGpu,
    holders: &HolderInfo,
) -> Labels {
    vec![
        l("cluster_name", e.cluster),
        l("gpu_id", &p.gpu_id.to_string()),
        l("gpu_uuid", p.uuid.as_deref().unwrap_or("")),
        l("gpu_partition_id", &p.partition_id.to_string()),
        l("gpu_compute_partition_type", &lower(g.compute_partition)),
        l("gpu_memory_partition_type", &lower(g.memory_partition)),
        l("card_model", &g.product),
        l("card_series", &g.product),
        l("card_vendor", AMD_VENDOR),
        l("driver_version", g.driver_version.as_deref().unwrap_or("")),
        l("vbios_version", g.vbios_version.as_deref().unwrap_or("")),
        l("serial_number", g.serial.as_deref().unwrap_or("")),
        l("hostname", &snap.host),
        l("pod", &pods(p, |x| &x.pod)),
        l("namespace", &pods(p, |x| &x.namespace)),
        if p.pods.is_empty() {
            l("container", holders.container.as_deref().unwrap_or(""))
        } else {
            l("container", &pods(p, |x| &x.container))
        },
    ]
}

/// One field of the pods the kubelet allocated a logical GPU to, as DME labels it: the value
/// of its pod, or the distinct values of a shared device joined with `,`.
fn pods(p: &LogicalGpu, field: impl Fn(&crate::domain::snapshot::PodRef) -> &String) -> String {
    let mut v: Vec<&str> = p.pods.iter().map(|x| field(x).as_str()).collect();
    v.sort_unstable();
    v.dedup();
    v.join(",")
}

/// What the holders of one logical GPU tell about it.
#[derive(Default)]
struct HolderInfo {
    /// The container id when every holder is in the same one.
    container: Option<String>,
}

fn holder_info(snap: &Snapshot, gpu_id: u32) -> HolderInfo {
    let mut ids = snap
        .holders(gpu_id)
        .filter(|p| p.agent.is_none())
        .map(|p| p.container_id.clone());
    let first = ids.next().flatten();
    if first.is_some() && ids.all(|c| c == first) {
        HolderInfo { container: first }
    } else {
        HolderInfo::default()
    }
}

/// The served model a process runs, if any (registered name first).
fn model_of(snap: &Snapshot, pid: u32, command: Option<&str>) -> String {
    snap.models
        .iter()
        .find(|m| m.pid == Some(pid))
        .map(|m| m.name.clone())
        .or_else(|| {
            command
                .and_then(crate::domain::served::model_of)
                .map(|(_, m)| m)
        })
        .unwrap_or_default()
}

/// DME's energy, PCIe, XGMI and ECC series of a device (on its primary partition).
fn dme_counters(out: &mut Out, labels: &Labels, c: &crate::domain::snapshot::DeviceCounters) {
    let n = |v: Option<u64>| v.map(f);
    out.opt(
        "gpu_energy_consumed",
        "Energy the device used since the driver loaded, microjoules (primary partition)",
        labels,
        c.energy_uj,
    );
    out.opt(
        "pcie_speed",
        "PCIe link speed now, GT/s (primary partition)",
        labels,
        c.pcie_speed_gts,
    );
    out.opt(
        "pcie_max_speed",
        "PCIe link's top speed, GT/s (primary partition)",
        labels,
        c.pcie_max_speed_gts,
    );
    out.opt(
        "pcie_bandwidth",
        "PCIe bandwidth now, MB/s (primary partition)",
        labels,
        c.pcie_bandwidth_mbs,
    );
    for (name, help, v) in [
        (
            "pcie_replay_count",
            "PCIe replays since the driver loaded",
            c.pcie_replay,
        ),
        (
            "pcie_replay_rollover_count",
            "PCIe replay-counter rollovers since the driver loaded",
            c.pcie_replay_rollover,
        ),
        (
            "pcie_recovery_count",
            "PCIe L0-to-recovery transitions since the driver loaded",
            c.pcie_recovery,
        ),
        (
            "pcie_nack_sent_count",
            "PCIe NAKs sent since the driver loaded",
            c.pcie_nak_sent,
        ),
        (
            "pcie_nack_received_count",
            "PCIe NAKs received since the driver loaded",
            c.pcie_nak_received,
        ),
    ] {
        out.opt(name, help, labels, n(v));
    }
    for (name, help, links) in [
        (
            "gpu_xgmi_link_rx",
            "XGMI data received on the link since the driver loaded, KB",
            &c.xgmi_read_kb,
        ),
        (
            "gpu_xgmi_link_tx",
            "XGMI data sent on the link since the driver loaded, KB",
            &c.xgmi_write_kb,
        ),
    ] {
        for (i, v) in links {
            let mut ll = labels.clone();
            ll.push(l("link_index", &i.to_string()));
            out.set(name, help, ll, f(*v));
        }
    }
    if let Some(v) = c.ecc_correctable {
        out.count(
            "gpu_ecc_correct",
            "Correctable ECC errors of the device, every RAS block (primary partition)",
            labels.clone(),
            f(v),
        );
    }
    if let Some(v) = c.ecc_uncorrectable {
        out.count(
            "gpu_ecc_uncorrect",
            "Uncorrectable ECC errors of the device, every RAS block (primary partition)",
            labels.clone(),
            f(v),
        );
    }
}

/// DME's `gpu_health`: 1 while the logical GPU is there and read, 0 when its device lacks a
/// partition its mode gives or its busy cannot be read.
fn healthy(g: &PhysicalGpu, p: &LogicalGpu) -> bool {
    let expected = g
        .compute_partition
        .zip(g.xcd_count)
        .map(|(c, x)| c.partitions(x) as usize);
    expected.is_none_or(|n| n == g.partitions.len()) && p.gfx_busy_percent.is_some()
}

fn amd_gpu(out: &mut Out, e: &Exported<'_>, snap: &Snapshot, g: &PhysicalGpu, p: &LogicalGpu) {
    // No identity, no DME series: a series first written with `serial_number=""` and then
    // with the serial is two series to Prometheus (and again at every restart).
    if g.serial.is_none() {
        return;
    }
    let h = holder_info(snap, p.gpu_id);
    let labels = dme_labels(e, snap, g, p, &h);
    let primary = p.partition_id == 0;
    out.set(
        "gpu_health",
        "1 while the logical GPU is present and read; 0 when a partition of its device is missing or its busy cannot be read",
        labels.clone(),
        if healthy(g, p) { 1.0 } else { 0.0 },
    );
    for (i, b) in p.xcc_busy_percent.iter().enumerate() {
        let mut xl = labels.clone();
        xl.push(l("xcc_index", &i.to_string()));
        out.set(
            "gpu_gfx_busy_instantaneous",
            "Instantaneous GFX busy of one XCC of the logical GPU, percent (xcc_index within the partition)",
            xl,
            *b,
        );
    }
    // Per partition, every partition (DME leaves the secondaries at 0).
    out.opt(
        "gpu_gfx_activity",
        "GFX activity of the logical GPU, percent (every partition, not only partition 0)",
        &labels,
        p.gfx_busy_percent,
    );
    let share = p.vram_capacity_bytes();
    out.opt(
        "gpu_total_vram",
        "VRAM of the logical GPU (its own share on a partitioned GPU), MB",
        &labels,
        share.map(mb),
    );
    out.opt(
        "gpu_used_vram",
        "VRAM in use on the logical GPU, MB",
        &labels,
        p.vram_used_bytes.map(mb),
    );
    if let (Some(t), Some(u)) = (share, p.vram_used_bytes) {
        out.set(
            "gpu_free_vram",
            "VRAM free on the logical GPU, MB",
            labels.clone(),
            mb(t.saturating_sub(u)),
        );
    }
    // Device-wide values stay on the primary partition, as DME reports them, so a sum over
    // partitions counts a device once.
    if primary {
        out.opt(
            "gpu_umc_activity",
            "Memory controller (HBM bandwidth) activity of the device, percent (primary partition)",
            &labels,
            p.umc_busy_percent,
        );
        out.opt(
            "gpu_package_power",
            "Socket power of the device, W (primary partition)",
            &labels,
            g.power_watts,
        );
        // The SMU's socket power is already its short average on MI300: DME's three power
        // series carry the same reading.
        out.opt(
            "gpu_average_package_power",
            "Socket power of the device as the SMU averages it, W (primary partition)",
            &labels,
            g.power_watts,
        );
        out.opt(
            "gpu_power_usage",
            "Power drawn by the device, W (primary partition)",
            &labels,
            g.power_watts,
        );
        for (i, c) in g.gfx_clocks_mhz.iter().enumerate() {
            let mut cl = labels.clone();
            cl.push(l("clock_type", "GPU_CLOCK_TYPE_SYSTEM"));
            cl.push(l("clock_index", &i.to_string()));
            out.set(
                "gpu_clock",
                "Clock now, MHz (GPU_CLOCK_TYPE_SYSTEM: each XCC's graphics clock; GPU_CLOCK_TYPE_MEMORY: HBM)",
                cl,
                f64::from(*c),
            );
        }
        if let Some(c) = g.mem_clock_mhz {
            let mut cl = labels.clone();
            cl.push(l("clock_type", "GPU_CLOCK_TYPE_MEMORY"));
            cl.push(l("clock_index", "0"));
            out.set(
                "gpu_clock",
                "Clock now, MHz (GPU_CLOCK_TYPE_SYSTEM: each XCC's graphics clock; GPU_CLOCK_TYPE_MEMORY: HBM)",
                cl,
                f64::from(c),
            );
        }
        out.opt(
            "gpu_junction_temperature",
            "Hotspot temperature of the device, Celsius (primary partition)",
            &labels,
            g.hotspot_celsius,
        );
        out.opt(
            "gpu_memory_temperature",
            "HBM temperature of the device, Celsius (primary partition)",
            &labels,
            g.mem_celsius,
        );
        dme_counters(out, &labels, &g.counters);
    }
    for proc_ in snap.holders(p.gpu_id) {
        for u in proc_.gpus.iter().filter(|u| u.gpu_id == p.gpu_id) {
            if let Some(c) = u.cu_occupancy {
                let mut pl = labels.clone();
                pl.push(l("process_id", &proc_.pid.to_string()));
                out.set(
                    "gpu_process_cu_occupancy",
                    "Compute units occupied by the process's waves on the logical GPU",
                    pl,
                    f(u64::from(c)),
                );
            }
        }
    }
}

/// A PCI address in NVML's form (`00000000:18:00.0`: an 8-digit domain, upper-case hex), as
/// dcgm-exporter writes `pci_bus_id`; the function defaults to 0.
pub fn nvml_bus_id(bdf: &str) -> String {
    let (head, func) = bdf.rsplit_once('.').unwrap_or((bdf, "0"));
    let mut parts: Vec<&str> = head.split(':').collect();
    let domain = if parts.len() == 3 {
        parts.remove(0)
    } else {
        "0"
    };
    let domain = u32::from_str_radix(domain, 16).unwrap_or(0);
    format!("{domain:08X}:{}.{func}", parts.join(":").to_uppercase())
}

/// dcgm-exporter's labels for a GPU: on a MIG instance `UUID` stays the parent GPU's (as
/// dcgm-exporter writes it) and the instance is named by `GPU_I_PROFILE` and `GPU_I_ID`.
fn dcgm_labels(snap: &Snapshot, index: usize, g: &PhysicalGpu, mig: Option<&LogicalGpu>) -> Labels {
    let uuid = g
        .uuid
        .as_deref()
        .or_else(|| g.partitions.first().and_then(|p| p.uuid.as_deref()))
        .unwrap_or("");
    let mut labels = vec![
        l("gpu", &index.to_string()),
        l("UUID", uuid),
        l("device", &format!("nvidia{index}")),
        l("modelName", &g.product),
        l("Hostname", &snap.host),
        l("hostname", &snap.host),
        l("pci_bus_id", &nvml_bus_id(&g.bdf)),
        l(
            "DCGM_FI_DRIVER_VERSION",
            g.driver_version.as_deref().unwrap_or(""),
        ),
    ];
    if let Some(p) = mig {
        labels.push(l("GPU_I_PROFILE", p.profile.as_deref().unwrap_or("")));
        labels.push(l("GPU_I_ID", &p.partition_id.to_string()));
    }
    labels
}

/// The device-wide dcgm-exporter series of one GPU (MIG or not): power, temperatures, clocks.
fn nvidia_device(out: &mut Out, snap: &Snapshot, index: usize, g: &PhysicalGpu) {
    let labels = dcgm_labels(snap, index, g, None);
    out.opt(
        "DCGM_FI_DEV_POWER_USAGE",
        "Power draw, W (dcgm-exporter's name)",
        &labels,
        g.power_watts,
    );
    out.opt(
        "DCGM_FI_DEV_GPU_TEMP",
        "GPU temperature, Celsius (dcgm-exporter's name)",
        &labels,
        g.hotspot_celsius,
    );
    out.opt(
        "DCGM_FI_DEV_MEMORY_TEMP",
        "Memory temperature, Celsius (dcgm-exporter's name)",
        &labels,
        g.mem_celsius,
    );
    out.opt(
        "DCGM_FI_DEV_SM_CLOCK",
        "SM clock, MHz (dcgm-exporter's name)",
        &labels,
        g.gfx_clock_mhz.map(f64::from),
    );
    out.opt(
        "DCGM_FI_DEV_MEM_CLOCK",
        "Memory clock, MHz (dcgm-exporter's name)",
        &labels,
        g.mem_clock_mhz.map(f64::from),
    );
    let c = &g.counters;
    out.opt(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Energy since the driver loaded, mJ (dcgm-exporter's name)",
        &labels,
        c.energy_uj.map(|u| (u / 1000.0).floor()),
    );
    out.opt(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "PCIe replays (dcgm-exporter's name)",
        &labels,
        c.pcie_replay.map(f),
    );
    out.opt(
        "DCGM_FI_DEV_ENC_UTIL",
        "Encoder utilization, percent (dcgm-exporter's name)",
        &labels,
        c.enc_util_percent,
    );
    out.opt(
        "DCGM_FI_DEV_DEC_UTIL",
        "Decoder utilization, percent (dcgm-exporter's name)",
        &labels,
        c.dec_util_percent,
    );
    out.opt(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Rows remapped for correctable errors (dcgm-exporter's name)",
        &labels,
        c.remapped_rows_correctable.map(f),
    );
    out.opt(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Rows remapped for uncorrectable errors (dcgm-exporter's name)",
        &labels,
        c.remapped_rows_uncorrectable.map(f),
    );
    out.opt(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "1 when a row remapping failed (dcgm-exporter's name)",
        &labels,
        c.row_remap_failure.map(|b| if b { 1.0 } else { 0.0 }),
    );
    out.opt(
        "DCGM_FI_DEV_XID_ERRORS",
        "Value of the last XID error seen while partop watched, 0 for none (dcgm-exporter's name)",
        &labels,
        c.xid_last.map(f),
    );
}

fn nvidia_gpu(out: &mut Out, snap: &Snapshot, index: usize, g: &PhysicalGpu, p: &LogicalGpu) {
    let mig = g.mig.as_ref().is_some_and(|m| m.enabled);
    let labels = dcgm_labels(snap, index, g, mig.then_some(p));
    out.opt(
        "DCGM_FI_DEV_GPU_UTIL",
        "GPU utilization, percent (dcgm-exporter's name)",
        &labels,
        p.gfx_busy_percent,
    );
    out.opt(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active, 0-1 (dcgm-exporter's name; NVML's GPM)",
        &labels,
        p.gr_engine_active_percent.map(|v| v / 100.0),
    );
    out.opt(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory (copy) utilization, percent (dcgm-exporter's name)",
        &labels,
        p.umc_busy_percent,
    );
    out.opt(
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used, MiB (dcgm-exporter's name)",
        &labels,
        p.vram_used_bytes.map(mb),
    );
    if let (Some(t), Some(u)) = (p.vram_capacity_bytes(), p.vram_used_bytes) {
        out.set(
            "DCGM_FI_DEV_FB_FREE",
            "Framebuffer memory free, MiB (dcgm-exporter's name)",
            labels.clone(),
            mb(t.saturating_sub(u)),
        );
    }
}

fn partop_partition(out: &mut Out, snap: &Snapshot, gi: usize, g: &PhysicalGpu, p: &LogicalGpu) {
    let labels = vec![
        l("hostname", &snap.host),
        l("gpu", &gi.to_string()),
        l("bdf", &p.bdf),
        l("gpu_id", &p.gpu_id.to_string()),
        l("partition", &p.partition_id.to_string()),
        l("compute", &lower(g.compute_partition)),
        l("memory", &lower(g.memory_partition)),
    ];
    out.opt(
        "partop_partition_gfx_busy_percent",
        "GFX busy of every partition (logical GPU), percent, from the kernel's per-partition counters",
        &labels,
        p.gfx_busy_percent,
    );
    out.opt(
        "partop_partition_vram_used_bytes",
        "VRAM in use on the logical GPU",
        &labels,
        p.vram_used_bytes.map(f),
    );
    out.opt(
        "partop_partition_vram_share_bytes",
        "The logical GPU's own share of the device's HBM",
        &labels,
        p.vram_capacity_bytes().map(f),
    );
    out.opt(
        "partop_partition_compute_units",
        "Compute units the logical GPU owns",
        &labels,
        p.cu_count.map(|c| f(u64::from(c))),
    );
    out.set(
        "partop_partition_holders",
        "Processes holding the logical GPU",
        labels,
        f(snap.holders(p.gpu_id).count() as u64),
    );
}

fn partop_device(out: &mut Out, snap: &Snapshot, gi: usize, g: &PhysicalGpu) {
    let expected = g
        .compute_partition
        .filter(|_| g.mig.is_none())
        .zip(g.xcd_count)
        .map(|(c, x)| c.partitions(x));
    out.set(
        "partop_gpu_info",
        "A physical GPU, its product and modes (value 1)",
        vec![
            l("hostname", &snap.host),
            l("gpu", &gi.to_string()),
            l("bdf", &g.bdf),
            l("product", &g.product),
            l("compute", &lower(g.compute_partition)),
            l("memory", &lower(g.memory_partition)),
        ],
        1.0,
    );
    let labels = vec![
        l("hostname", &snap.host),
        l("gpu", &gi.to_string()),
        l("bdf", &g.bdf),
    ];
    out.set(
        "partop_gpu_logical_gpus",
        "Logical GPUs present on the physical GPU",
        labels.clone(),
        f(g.partitions.len() as u64),
    );
    out.opt(
        "partop_gpu_logical_gpus_expected",
        "Logical GPUs its compute mode gives (a difference is a partition that did not come up)",
        &labels,
        expected.map(|e| f(u64::from(e))),
    );
}

fn partop_processes(out: &mut Out, snap: &Snapshot) {
    // Only GPU holders are exported: cardinality stays bounded by what the GPUs can hold.
    for p in snap.processes.iter().filter(|p| !p.gpus.is_empty()) {
        let base = vec![
            l("hostname", &snap.host),
            l("pid", &p.pid.to_string()),
            l("comm", p.name.as_deref().unwrap_or("")),
            l("user", p.user.as_deref().unwrap_or("")),
            l("model", &model_of(snap, p.pid, p.command.as_deref())),
        ];
        out.opt(
            "partop_process_cpu_percent",
            "Host CPU the GPU holder used since the previous sample, percent of one core",
            &base,
            p.cpu_percent,
        );
        out.opt(
            "partop_process_rss_bytes",
            "Resident host memory of the GPU holder",
            &base,
            p.rss_bytes.map(f),
        );
        for u in &p.gpus {
            let mut gl = base.clone();
            gl.push(l("gpu_id", &u.gpu_id.to_string()));
            out.opt(
                "partop_process_vram_bytes",
                "VRAM the process holds on the logical GPU",
                &gl,
                u.vram_bytes.map(f),
            );
            out.opt(
                "partop_process_cu_occupancy",
                "Compute units occupied by the process's waves on the logical GPU",
                &gl,
                u.cu_occupancy.map(|c| f(u64::from(c))),
            );
            for (engine, pct) in &u.engine_percent {
                let mut el = gl.clone();
                el.push(l("engine", engine));
                out.set(
                    "partop_process_engine_busy_percent",
                    "Busy share of one engine (gfx, compute, dma, …) used by the process, percent, from fdinfo",
                    el,
                    *pct,
                );
            }
        }
    }
}

fn partop_models(out: &mut Out, snap: &Snapshot) {
    for m in &snap.models {
        let labels = vec![
            l("hostname", &snap.host),
            l("name", &m.name),
            l("model", &m.model),
            l("server", m.server.as_deref().unwrap_or("")),
            l(
                "gpu_id",
                &m.gpus
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        ];
        let state = m.state.label();
        let mut sl = labels.clone();
        sl.push(l("state", state));
        out.set(
            "partop_model_state",
            "A served model and its state (value 1; healthy, starting, unhealthy, stopped, …)",
            sl,
            1.0,
        );
        out.set(
            "partop_model_up",
            "1 when the served model answers its health check",
            labels.clone(),
            if state == "healthy" { 1.0 } else { 0.0 },
        );
        out.opt(
            "partop_model_requests_running",
            "Requests the model server is running",
            &labels,
            m.running,
        );
        out.opt(
            "partop_model_requests_waiting",
            "Requests queued at the model server",
            &labels,
            m.waiting,
        );
        out.opt(
            "partop_model_kv_cache_usage_ratio",
            "KV cache in use, 0 to 1",
            &labels,
            m.kv_cache,
        );
        out.opt(
            "partop_model_tokens_per_second",
            "Generation throughput of the model server, tokens per second",
            &labels,
            m.tokens_per_sec,
        );
        out.set(
            "partop_model_restarts",
            "Restarts of the model server seen by partop",
            labels,
            f(u64::from(m.restarts)),
        );
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::NoisyNeighbour => "noisy_neighbour",
        Kind::IdlePartition => "idle_partition",
        Kind::UnlistedHolder => "unlisted_holder",
        Kind::PartitionMismatch => "partition_mismatch",
        Kind::KfdOnlyHolder => "kfd_only_holder",
        Kind::HiddenHolders => "hidden_holders",
        Kind::PluginDrift => "plugin_drift",
        Kind::Reclaimable => "reclaimable_partition",
    }
}

fn partop_findings(out: &mut Out, e: &Exported<'_>, host: &str) {
    for fi in e.findings {
        let labels = vec![
            l("hostname", host),
            l("kind", kind_name(fi.kind)),
            l("subject", &fi.subject),
            l("gpu_id", &fi.gpu_id.to_string()),
            l(
                "severity",
                match fi.severity {
                    Severity::Info => "info",
                    Severity::Warn => "warning",
                },
            ),
        ];
        out.set(
            "partop_finding",
            "A finding (noisy neighbour, idle partition, holder amd-smi does not list, partition count mismatch); value 1 while it lasts",
            labels.clone(),
            1.0,
        );
        out.set(
            "partop_finding_age_seconds",
            "How long the finding has lasted",
            labels,
            f(e.now_ms.saturating_sub(fi.since_ms) / 1000),
        );
    }
}

fn partop_sources(out: &mut Out, snap: &Snapshot, now: u64) {
    for s in &snap.sources {
        let labels = vec![l("hostname", &snap.host), l("source", &s.name)];
        out.set(
            "partop_source_up",
            "1 when the source's last read succeeded (ok or with warnings)",
            labels.clone(),
            if matches!(s.status, Health::Ok | Health::Degraded) {
                1.0
            } else {
                0.0
            },
        );
        out.opt(
            "partop_source_age_seconds",
            "Seconds since the source's last good read",
            &labels,
            s.last_ok_ms.map(|t| f(now.saturating_sub(t)) / 1000.0),
        );
        out.opt(
            "partop_source_call_seconds",
            "Wall time of the source's last read",
            &labels,
            s.took_ms.map(|t| f(t) / 1000.0),
        );
        if let Some(c) = &s.cadence {
            out.set(
                "partop_source_interval_seconds",
                "How often the source is read now (amd-smi's interval follows its measured cost)",
                labels.clone(),
                f(c.every_ms) / 1000.0,
            );
            out.set(
                "partop_source_cpu_percent",
                "CPU the source's reads cost, percent of one core (children included)",
                labels,
                c.core_percent,
            );
        }
    }
}

/// The scrape body in OpenMetrics text (what prometheus-client encodes), and the number of
/// series in it.
pub fn render(e: &Exported<'_>) -> (String, usize) {
    let mut out = Out::default();
    let host = e.snap.map_or_else(String::new, |s| s.host.clone());
    out.set(
        "partop_build_info",
        "partop's version (value 1)",
        vec![l("hostname", &host), l("version", e.version)],
        1.0,
    );
    out.set(
        "partop_up",
        "1 once a sample has been taken",
        vec![l("hostname", &host)],
        if e.snap.is_some() { 1.0 } else { 0.0 },
    );
    if let Some(snap) = e.snap {
        out.set(
            "partop_sample_age_seconds",
            "Age of the sample this scrape shows (a hung source never blocks a scrape: its last sample is served with its age)",
            vec![l("hostname", &snap.host)],
            f(e.now_ms.saturating_sub(snap.taken_at_ms)) / 1000.0,
        );
        out.set(
            "partop_sample_generation",
            "The sample's generation (it grows by one per sample; /snapshot and /events carry it)",
            vec![l("hostname", &snap.host)],
            f(snap.generation),
        );
        // DME's `gpu_nodes_total` is left out: a gauge named `_total` fails promtool's lint;
        // `count(gpu_gfx_activity)` or `partop_gpu_logical_gpus` give the same.
        for (gi, g) in snap.gpus.iter().enumerate() {
            partop_device(&mut out, snap, gi, g);
            if g.mig.is_some() {
                nvidia_device(&mut out, snap, gi, g);
            }
            for p in &g.partitions {
                if g.mig.is_some() {
                    nvidia_gpu(&mut out, snap, gi, g, p);
                } else {
                    amd_gpu(&mut out, e, snap, g, p);
                }
                partop_partition(&mut out, snap, gi, g, p);
            }
        }
        partop_processes(&mut out, snap);
        partop_models(&mut out, snap);
        partop_findings(&mut out, e, &snap.host);
        partop_sources(&mut out, snap, e.now_ms);
        if let Some(h) = &snap.host_usage {
            let labels = vec![l("hostname", &snap.host)];
            out.opt(
                "partop_host_cpu_percent",
                "Busy share of all the host's CPUs, percent",
                &labels,
                h.cpu_percent,
            );
            out.set(
                "partop_host_load1",
                "The host's 1-minute load average",
                labels.clone(),
                h.load[0],
            );
            out.set(
                "partop_host_memory_used_bytes",
                "Host memory in use (MemTotal - MemAvailable)",
                labels.clone(),
                f(h.mem_used_bytes),
            );
            out.set(
                "partop_host_memory_total_bytes",
                "Host memory",
                labels,
                f(h.mem_total_bytes),
            );
        }
    }
    let (running, step, key) = match &e.apply {
        Some((fp, i, k)) => (1.0, f(*i as u64), vec![l("fingerprint", fp), l("step", k)]),
        None => (0.0, 0.0, vec![l("fingerprint", ""), l("step", "")]),
    };
    let mut al = vec![l("hostname", &host)];
    al.extend(key);
    out.set(
        "partop_apply_in_progress",
        "1 while a repartition runs on this node, with its plan and current step",
        al.clone(),
        running,
    );
    out.set(
        "partop_apply_step",
        "Index of the running repartition's current step (0 when none runs)",
        al,
        step,
    );
    let (reg, n) = out.registry();
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, &reg);
    (text, n)
}

/// The same body in the Prometheus text format 0.0.4: OpenMetrics without the `# EOF` and
/// `# UNIT` lines, and a counter's `# HELP`/`# TYPE` named as its samples are (`NAME_total`,
/// as the 0.0.4 format names a counter family).
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut o = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        o.push_str(renamed.as_deref().unwrap_or(line));
        o.push('\n');
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_bounded() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let long = "é".repeat(300);
        let e = escape(&long);
        assert!(e.len() <= 256 && e.chars().all(|c| c == 'é'));
    }

    #[test]
    fn an_empty_exporter_still_says_its_version_and_that_it_is_not_up() {
        let (text, n) = render(&Exported {
            version: "9.9.9",
            ..Exported::default()
        });
        assert!(
            text.contains("partop_build_info{hostname=\"\",version=\"9.9.9\"} 1"),
            "{text}"
        );
        assert!(text.contains("partop_up{hostname=\"\"} 0"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        assert!(n >= 3);
        assert!(!to_prometheus_text(&text).contains("# EOF"));
    }

    use crate::domain::mig_profiles::MigInfo;

    #[test]
    fn nvml_bus_ids_have_an_eight_digit_domain_in_upper_case() {
        let cases = [
            ("00000000:18:00.0", "00000000:18:00.0"),
            ("0000:3b:00.0", "00000000:3B:00.0"),
            ("0000:3b:00", "00000000:3B:00.0"),
            ("3b:00.0", "00000000:3B:00.0"),
            ("0001:c1:00.1", "00000001:C1:00.1"),
        ];
        for (bdf, want) in cases {
            assert_eq!(nvml_bus_id(bdf), want, "{bdf}");
        }
    }

    fn mig_node() -> Snapshot {
        let inst = |gi: u32, id: u32| LogicalGpu {
            gpu_id: id,
            partition_id: gi,
            bdf: format!("00000000:18:00.0/gi{gi}"),
            uuid: Some(format!("MIG-{gi}")),
            profile: Some("3g.40gb".into()),
            vram_used_bytes: Some(1 << 30),
            vram_total_bytes: Some(40 << 30),
            ..LogicalGpu::default()
        };
        Snapshot {
            host: "h".into(),
            gpus: vec![PhysicalGpu {
                bdf: "00000000:18:00".into(),
                product: "NVIDIA H100 80GB HBM3".into(),
                uuid: Some("GPU-parent".into()),
                power_watts: Some(120.0),
                hotspot_celsius: Some(40.0),
                mem_celsius: Some(38.0),
                gfx_clock_mhz: Some(1980),
                mem_clock_mhz: Some(2619),
                mig: Some(MigInfo {
                    enabled: true,
                    pending: true,
                    ..MigInfo::default()
                }),
                partitions: vec![inst(1, 0), inst(2, 1)],
                ..PhysicalGpu::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn mig_series_carry_the_parent_uuid_and_the_gpu_keeps_power_and_temperature() {
        let snap = mig_node();
        let (text, _) = render(&Exported {
            snap: Some(&snap),
            ..Exported::default()
        });
        let lines = |name: &str| -> Vec<&str> {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .collect()
        };
        let used = lines("DCGM_FI_DEV_FB_USED");
        assert_eq!(used.len(), 2, "{text}");
        for l in &used {
            assert!(l.contains("UUID=\"GPU-parent\""), "{l}");
            assert!(l.contains("pci_bus_id=\"00000000:18:00.0\""), "{l}");
            assert!(l.contains("GPU_I_PROFILE=\"3g.40gb\""), "{l}");
        }
        for gi in [1, 2] {
            let id = format!("GPU_I_ID=\"{gi}\"");
            assert!(used.iter().any(|l| l.contains(&id)), "{id}: {used:?}");
        }
        for name in [
            "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_MEMORY_TEMP",
            "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_MEM_CLOCK",
        ] {
            let v = lines(name);
            assert_eq!(v.len(), 1, "{name}: {text}");
            assert!(!v[0].contains("GPU_I_ID"), "{}", v[0]);
            assert!(v[0].contains("UUID=\"GPU-parent\""), "{}", v[0]);
        }
    }

    fn amd_node(serial: Option<&str>) -> Snapshot {
        Snapshot {
            host: "h".into(),
            gpus: vec![PhysicalGpu {
                bdf: "0000:05:00".into(),
                product: "AMD Instinct MI300X".into(),
                serial: serial.map(Into::into),
                vbios_version: Some("113-M3000100-103".into()),
                driver_version: Some("6.14.14".into()),
                power_watts: Some(300.0),
                gfx_clocks_mhz: vec![2100, 2100],
                mem_clock_mhz: Some(1300),
                partitions: vec![LogicalGpu {
                    bdf: "0000:05:00.0".into(),
                    uuid: Some("afff74a1-0000-1000-8054-e92b0a5d57c8".into()),
                    gfx_busy_percent: Some(50.0),
                    xcc_busy_percent: vec![40.0, 60.0],
                    ..LogicalGpu::default()
                }],
                ..PhysicalGpu::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn dme_series_come_with_their_identity_or_not_at_all() {
        let snap = amd_node(None);
        let (text, _) = render(&Exported {
            snap: Some(&snap),
            cluster: "lab",
            ..Exported::default()
        });
        assert!(!text.lines().any(|l| l.starts_with("gpu_")), "{text}");
        assert!(
            text.contains("partop_partition_gfx_busy_percent{"),
            "{text}"
        );
        let snap = amd_node(Some("0xAF54E92B0A5D57C8"));
        let (text, _) = render(&Exported {
            snap: Some(&snap),
            cluster: "lab",
            ..Exported::default()
        });
        let act = text
            .lines()
            .find(|l| l.starts_with("gpu_gfx_activity{"))
            .unwrap();
        for want in [
            "cluster_name=\"lab\"",
            "gpu_uuid=\"afff74a1-0000-1000-8054-e92b0a5d57c8\"",
            "card_series=\"AMD Instinct MI300X\"",
            "card_vendor=\"Advanced Micro Devices, Inc. [AMD/ATI]\"",
            "driver_version=\"6.14.14\"",
            "vbios_version=\"113-M3000100-103\"",
            "serial_number=\"0xAF54E92B0A5D57C8\"",
            "hostname=\"h\"",
        ] {
            assert!(act.contains(want), "{want} in {act}");
        }
        let xcc: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("gpu_gfx_busy_instantaneous{"))
            .collect();
        assert_eq!(xcc.len(), 2, "{text}");
        assert!(
            xcc.iter()
                .any(|l| l.contains("xcc_index=\"1\"") && l.ends_with(" 60.0")),
            "{xcc:?}"
        );
        let clocks = text.lines().filter(|l| l.starts_with("gpu_clock{")).count();
        assert_eq!(clocks, 3, "two XCC clocks and the memory clock: {text}");
        for name in [
            "gpu_power_usage{",
            "gpu_average_package_power{",
            "gpu_health{",
        ] {
            assert!(text.contains(name), "{name}: {text}");
        }
    }
}
