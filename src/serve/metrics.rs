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
    rows: Vec<(Labels, f64)>,
}

/// Every family of one scrape, in output order.
#[derive(Default)]
struct Out {
    fams: Vec<Fam>,
}

impl Out {
    fn set(&mut self, name: &'static str, help: &'static str, labels: Labels, v: f64) {
        if !v.is_finite() {
            return;
        }
        match self.fams.iter_mut().find(|f| f.name == name) {
            Some(f) => f.rows.push((labels, v)),
            None => self.fams.push(Fam {
                name,
                help,
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
            let fam = Family::<Labels, Gauge<f64, AtomicU64>>::default();
            for (labels, v) in f.rows {
                fam.get_or_create(&labels).set(v);
                n += 1;
            }
            reg.register(f.name, f.help, fam);
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

/// DME's labels on every GPU series, for one logical GPU.
fn dme_labels(snap: &Snapshot, g: &PhysicalGpu, p: &LogicalGpu, holders: &HolderInfo) -> Labels {
    vec![
        l("gpu_id", &p.gpu_id.to_string()),
        l("gpu_partition_id", &p.partition_id.to_string()),
        l("gpu_compute_partition_type", &lower(g.compute_partition)),
        l("gpu_memory_partition_type", &lower(g.memory_partition)),
        l("card_model", &g.product),
        l("serial_number", g.serial.as_deref().unwrap_or("")),
        l("hostname", &snap.host),
        l("pod", ""),
        l("namespace", ""),
        l("container", holders.container.as_deref().unwrap_or("")),
    ]
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

fn amd_gpu(out: &mut Out, snap: &Snapshot, g: &PhysicalGpu, p: &LogicalGpu) {
    let h = holder_info(snap, p.gpu_id);
    let labels = dme_labels(snap, g, p, &h);
    let primary = p.partition_id == 0;
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

fn nvidia_gpu(out: &mut Out, snap: &Snapshot, index: usize, g: &PhysicalGpu, p: &LogicalGpu) {
    let mut labels = vec![
        l("gpu", &index.to_string()),
        l("UUID", p.uuid.as_deref().unwrap_or("")),
        l("device", &format!("nvidia{index}")),
        l("modelName", &g.product),
        l("Hostname", &snap.host),
        l("pci_bus_id", &g.bdf),
    ];
    if g.mig.as_ref().is_some_and(|m| m.enabled) {
        labels.push(l("GPU_I_PROFILE", p.profile.as_deref().unwrap_or("")));
        labels.push(l("GPU_I_ID", &p.partition_id.to_string()));
    }
    out.opt(
        "DCGM_FI_DEV_GPU_UTIL",
        "GPU utilization, percent (dcgm-exporter's name)",
        &labels,
        p.gfx_busy_percent,
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
    if p.partition_id == 0 || g.partitions.len() == 1 {
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
        vec![l("version", e.version)],
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
            for p in &g.partitions {
                if g.mig.is_some() {
                    nvidia_gpu(&mut out, snap, gi, g, p);
                } else {
                    amd_gpu(&mut out, snap, g, p);
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
/// `# UNIT` lines (every series here is a gauge, which both formats write alike).
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut o = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        o.push_str(line);
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
            text.contains("partop_build_info{version=\"9.9.9\"} 1"),
            "{text}"
        );
        assert!(text.contains("partop_up{hostname=\"\"} 0"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        assert!(n >= 3);
        assert!(!to_prometheus_text(&text).contains("# EOF"));
    }
}
