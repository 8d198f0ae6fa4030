//! The direct kernel collector: one sample of the node from sysfs and /proc under configurable
//! roots, without amd-smi. Physical GPUs from the PCI devices that carry partition files;
//! logical GPUs from the KFD topology (render minor, location → BDF and partition); per
//! partition busy from `xcp_metrics` or the per-XCP block of `gpu_metrics`; power and
//! temperatures from `gpu_metrics`, else hwmon; processes from the /proc fd scan, their KFD
//! files and their DRM fdinfo (clients de-duplicated by `drm-client-id`, the partition taken
//! from the fd's render minor, engine busy from the previous sample). It never opens a device
//! node. Every value carries its file as provenance; a file it cannot read leaves the value
//! N/A with the reason.

use super::fdinfo;
use super::gpu_metrics::{self, GpuMetrics, XcpStats};
use crate::collect::holders::{self, Roots};
use crate::collect::kfd::{self, KfdNode};
use crate::collect::{clock, host};
use crate::domain::ComputeMode;
use crate::domain::MemoryMode;
use crate::domain::provenance::{Missing, SourceKind, note};
use crate::domain::snapshot::{
    GpuUse, Health, PhysicalGpu, Process, SCHEMA, Snapshot, SourceStatus,
};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Source name in snapshots.
pub const SRC: &str = "sysfs";

/// The collector and what it keeps between samples (engine counters for busy percent).
#[derive(Debug)]
pub struct SysfsCollector {
    /// Roots (`--sysfs-root`, `--proc-root`; `/dev` is only a prefix for fd targets).
    pub roots: Roots,
    /// Previous engine counters: (pdev, client id, engine) → (ns, monotonic ns of the read).
    prev: HashMap<(String, u64, String), (u64, u64)>,
    generation: u64,
    host: String,
    /// Marks snapshots as simulated.
    pub simulated: bool,
}

/// Follows `rel` from `base` one component at a time through symlinks, and through their
/// stand-ins in captured trees (a small file holding the link's relative target, as git and
/// copies keep them).
pub fn follow(base: &Path, rel: &str) -> PathBuf {
    let mut p = base.to_path_buf();
    for c in rel.split('/').filter(|c| !c.is_empty()) {
        p.push(c);
        let target = match std::fs::read_link(&p) {
            Ok(t) => Some(t),
            Err(_) if p.is_file() => std::fs::read_to_string(&p)
                .ok()
                .map(|t| t.trim().to_string())
                .filter(|t| t.starts_with("../") || t == "..")
                .map(PathBuf::from),
            Err(_) => None,
        };
        if let Some(t) = target {
            let parent = p.parent().map(Path::to_path_buf).unwrap_or_default();
            p = if t.is_absolute() {
                t
            } else {
                normalize(&parent.join(t))
            };
        }
    }
    p
}

fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn text(p: &Path) -> Result<String, String> {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("{}: {e}", p.display()))
}

fn num(p: &Path) -> Option<u64> {
    text(p).ok()?.parse().ok()
}

fn modes<T: std::str::FromStr>(s: &str) -> Vec<T> {
    s.split(',').filter_map(|m| m.trim().parse().ok()).collect()
}

/// One PCI GPU device as sysfs shows it.
struct Device {
    bdf: String,
    dir: PathBuf,
    metrics: Result<GpuMetrics, String>,
}

impl SysfsCollector {
    /// A collector under `roots`.
    pub fn new(roots: Roots) -> Self {
        Self {
            roots,
            prev: HashMap::new(),
            generation: 0,
            host: host::hostname(),
            simulated: false,
        }
    }

    fn devices(&self) -> Vec<Device> {
        let dir = self.roots.sys_root.join("bus/pci/devices");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut out: Vec<Device> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let path = follow(&dir, &name);
                (num_hex(&path.join("vendor")) == Some(0x1002)
                    && path.join("current_compute_partition").exists())
                .then(|| {
                    let metrics = std::fs::read(path.join("gpu_metrics"))
                        .map_err(|e| format!("{}/gpu_metrics: {e}", path.display()))
                        .and_then(|b| {
                            gpu_metrics::parse(&b)
                                .map_err(|e| format!("{}/gpu_metrics: {e}", path.display()))
                        });
                    Device {
                        bdf: name
                            .rsplit_once('.')
                            .map_or(name.clone(), |(b, _)| b.to_string()),
                        dir: path,
                        metrics,
                    }
                })
            })
            .collect();
        out.sort_by(|a, b| a.bdf.cmp(&b.bdf));
        out
    }

    /// Samples now.
    pub fn sample(&mut self) -> Snapshot {
        let mono = u64::try_from(
            std::time::Instant::now()
                .duration_since(*START.get_or_init(std::time::Instant::now))
                .as_nanos(),
        )
        .unwrap_or(u64::MAX);
        self.sample_at(mono, clock::now_ms())
    }

    /// Samples with the given clocks (monotonic ns for rates, wall ms for ages): tests replay
    /// two fdinfo reads a known time apart.
    #[expect(
        clippy::too_many_lines,
        reason = "one pass over the tree, in reading order"
    )]
    pub fn sample_at(&mut self, mono_ns: u64, now_ms: u64) -> Snapshot {
        let t0 = std::time::Instant::now();
        self.generation += 1;
        let sys = self.roots.sys_root.clone();
        let nodes = kfd::topology(&sys);
        let devices = self.devices();
        let mut gpus = kfd::gpus_from_topology(&nodes, now_ms);
        // Physical GPUs with no KFD node (KFD not loaded, or a driver reloading) still show.
        for d in &devices {
            if !gpus.iter().any(|g| g.bdf == d.bdf) {
                gpus.push(PhysicalGpu {
                    bdf: d.bdf.clone(),
                    product: "unknown GPU".into(),
                    ..PhysicalGpu::default()
                });
            }
        }
        gpus.sort_by(|a, b| a.bdf.cmp(&b.bdf));
        let mut warnings = Vec::new();
        for g in &mut gpus {
            let Some(d) = devices.iter().find(|d| d.bdf == g.bdf) else {
                continue;
            };
            let at = |f: &str| format!("{}/{f}", d.dir.display());
            let dev_id = text(&d.dir.join("device")).ok();
            if let Some(p) = crate::domain::product::identify(dev_id.as_deref(), None) {
                g.product = p.market_name.to_string();
                g.product_key = Some(p.key.to_string());
                g.xcd_count = Some(p.xcds);
                g.cu_count = Some(p.cus());
                g.profiles.clone_from(&p.profiles);
                note(
                    &mut g.provenance,
                    "profiles",
                    SourceKind::ProductTable,
                    &format!(
                        "partop's product table ({}; sysfs lists modes, not combinations)",
                        p.source
                    ),
                    now_ms,
                    None,
                );
            }
            g.device_id = dev_id;
            match text(&d.dir.join("current_compute_partition")) {
                Ok(s) => {
                    g.compute_partition = s.parse::<ComputeMode>().ok();
                    note(
                        &mut g.provenance,
                        "compute_partition",
                        SourceKind::Sysfs,
                        &at("current_compute_partition"),
                        now_ms,
                        None,
                    );
                }
                Err(e) => warnings.push(e),
            }
            match text(&d.dir.join("current_memory_partition")) {
                Ok(s) => {
                    g.memory_partition = s.parse::<MemoryMode>().ok();
                    note(
                        &mut g.provenance,
                        "memory_partition",
                        SourceKind::Sysfs,
                        &at("current_memory_partition"),
                        now_ms,
                        None,
                    );
                }
                Err(e) => warnings.push(e),
            }
            if let Ok(s) = text(&d.dir.join("available_memory_partition")) {
                g.memory_caps = modes(&s);
                note(
                    &mut g.provenance,
                    "memory_caps",
                    SourceKind::Sysfs,
                    &at("available_memory_partition"),
                    now_ms,
                    None,
                );
            }
            // Only the combinations valid now: sysfs lists the compute modes the current memory
            // mode allows (newer drivers), so keep the table's profiles that agree.
            if let (Ok(s), Some(m)) = (
                text(&d.dir.join("available_compute_partition")),
                g.memory_partition,
            ) {
                let avail: Vec<ComputeMode> = modes(&s);
                if !avail.is_empty() {
                    g.profiles
                        .retain(|p| !p.memory.contains(&m) || avail.contains(&p.compute));
                }
            }
            g.hbm_bytes = num(&d.dir.join("mem_info_vram_total"));
            let hw = hwmon(&d.dir);
            match &d.metrics {
                Ok(m) => {
                    let src = format!("{} v{}.{}", at("gpu_metrics"), m.revision.0, m.revision.1);
                    g.power_watts = m.socket_power.map(f64::from);
                    g.hotspot_celsius = m.temperature_hotspot.map(f64::from);
                    g.mem_celsius = m.temperature_mem.map(f64::from);
                    for f in ["power_watts", "hotspot_celsius", "mem_celsius"] {
                        note(&mut g.provenance, f, SourceKind::Sysfs, &src, now_ms, None);
                    }
                }
                Err(e) => {
                    warnings.push(e.clone());
                    g.power_watts = hw.power_w;
                    g.hotspot_celsius = hw.junction_c;
                    g.mem_celsius = hw.mem_c;
                    for f in ["power_watts", "hotspot_celsius", "mem_celsius"] {
                        note(
                            &mut g.provenance,
                            f,
                            SourceKind::Sysfs,
                            &hw.dir,
                            now_ms,
                            None,
                        );
                    }
                }
            }
            g.power_cap_watts = hw.cap_w;
            let n = g.partitions.len().max(1);
            for l in &mut g.partitions {
                let node = nodes.iter().find(|k| Some(k.gpu_id) == l.kfd_id);
                // This partition's own metrics file, else its block of gpu_metrics, else the
                // device's XCCs it owns (v1.9).
                let (busy, src) = partition_busy(&sys, d, node, l.partition_id);
                l.gfx_busy_percent = busy;
                note(
                    &mut l.provenance,
                    "gfx_busy_percent",
                    SourceKind::Sysfs,
                    &src,
                    now_ms,
                    busy.is_none().then_some(Missing::NotReported),
                );
                if let Some(b) = node.and_then(|k| k.mem_bytes) {
                    l.vram_total_bytes = Some(b);
                    l.vram_share_bytes = Some(b);
                    note(
                        &mut l.provenance,
                        "vram_total_bytes",
                        SourceKind::Sysfs,
                        &format!(
                            "/sys/class/kfd/kfd/topology/nodes/{}/mem_banks/0/properties",
                            node.map_or(0, |k| k.node)
                        ),
                        now_ms,
                        None,
                    );
                } else if let Some(t) = g.hbm_bytes {
                    l.vram_share_bytes = Some(t / n as u64);
                }
                if l.is_primary() {
                    if let Ok(m) = &d.metrics {
                        l.umc_busy_percent = m.umc_activity.map(f64::from);
                        note(
                            &mut l.provenance,
                            "umc_busy_percent",
                            SourceKind::Sysfs,
                            &at("gpu_metrics"),
                            now_ms,
                            None,
                        );
                    }
                } else {
                    note(
                        &mut l.provenance,
                        "umc_busy_percent",
                        SourceKind::Sysfs,
                        "device-wide: on the primary partition",
                        now_ms,
                        Some(Missing::SecondaryPartition),
                    );
                }
            }
        }
        let processes = self.processes(&nodes, &gpus, mono_ns, now_ms);
        // Per-partition VRAM in use: the sum of what KFD and fdinfo attribute to it (sysfs has
        // only the device-wide figure).
        for g in &mut gpus {
            for l in &mut g.partitions {
                let used: u64 = processes
                    .iter()
                    .flat_map(|p| &p.gpus)
                    .filter(|u| u.gpu_id == l.gpu_id)
                    .filter_map(|u| u.vram_bytes)
                    .sum();
                l.vram_used_bytes = Some(used);
                note(
                    &mut l.provenance,
                    "vram_used_bytes",
                    SourceKind::Derived,
                    "sum of its processes' VRAM (KFD vram_<gpu_id>, DRM fdinfo)",
                    now_ms,
                    None,
                );
            }
        }
        let status = SourceStatus {
            name: SRC.into(),
            version: None,
            status: if gpus.is_empty() {
                Health::Down
            } else if warnings.is_empty() {
                Health::Ok
            } else {
                Health::Degraded
            },
            error: if gpus.is_empty() {
                Some(format!(
                    "no AMD GPU with partition files under {}",
                    self.roots.sys_root.display()
                ))
            } else {
                warnings.first().cloned()
            },
            last_ok_ms: (!gpus.is_empty()).then_some(now_ms),
            took_ms: u64::try_from(t0.elapsed().as_millis()).ok(),
        };
        Snapshot {
            schema: SCHEMA,
            host: self.host.clone(),
            taken_at: clock::rfc3339(now_ms),
            taken_at_ms: now_ms,
            generation: self.generation,
            simulated: self.simulated,
            sources: vec![status],
            gpus,
            processes,
            reload: None,
            models: Vec::new(),
        }
    }

    fn processes(
        &mut self,
        nodes: &[KfdNode],
        gpus: &[PhysicalGpu],
        mono_ns: u64,
        now_ms: u64,
    ) -> Vec<Process> {
        let logical_of_minor = |minor: u32| {
            let node = nodes.iter().find(|n| n.render_minor == Some(minor))?;
            gpus.iter()
                .flat_map(|g| &g.partitions)
                .find(|l| l.kfd_id == Some(node.gpu_id))
                .map(|l| l.gpu_id)
        };
        let logical_of_kfd = |id: u64| {
            gpus.iter()
                .flat_map(|g| &g.partitions)
                .find(|l| l.kfd_id == Some(id))
                .map(|l| (l.gpu_id, l.cu_count))
        };
        let holders = holders::scan(&self.roots);
        let mut seen_clients: Vec<(String, u64)> = Vec::new();
        let mut next_prev = HashMap::new();
        let mut out = Vec::new();
        for h in &holders {
            let mut uses: BTreeMap<u32, GpuUse> = BTreeMap::new();
            // KFD: per-GPU VRAM, SDMA time, CU occupancy.
            for k in kfd::process_use(&self.roots.sys_root, h.pid).unwrap_or_default() {
                let Some((id, cus)) = logical_of_kfd(k.gpu_id) else {
                    continue;
                };
                let u = uses.entry(id).or_insert_with(|| GpuUse {
                    gpu_id: id,
                    ..GpuUse::default()
                });
                u.vram_bytes = k.vram_bytes;
                u.sdma_us = k.sdma_us;
                u.cu_occupancy = k.cu_occupancy;
                u.cu_percent = match (k.cu_occupancy, cus) {
                    (Some(o), Some(c)) if c > 0 => Some(f64::from(o) * 100.0 / f64::from(c)),
                    _ => None,
                };
            }
            // DRM fdinfo: one client per drm-client-id, wherever it appears first.
            for (fd, minor) in &h.drm_fds {
                let Some(id) = logical_of_minor(*minor) else {
                    continue;
                };
                let u = uses.entry(id).or_insert_with(|| GpuUse {
                    gpu_id: id,
                    ..GpuUse::default()
                });
                u.render_open = true;
                let path = self.roots.proc_root.join(format!("{}/fdinfo/{fd}", h.pid));
                let Ok(t) = std::fs::read_to_string(&path) else {
                    continue;
                };
                let c = fdinfo::parse(&t);
                let key = (
                    c.pdev.clone().unwrap_or_default(),
                    c.client_id.unwrap_or(u64::MAX),
                );
                if c.client_id.is_some() {
                    if seen_clients.contains(&key) {
                        continue;
                    }
                    seen_clients.push(key.clone());
                }
                // KFD's figure is the process's own; fdinfo fills what KFD does not give.
                if u.vram_bytes.is_none() || u.vram_bytes == Some(0) {
                    u.vram_bytes = c.vram_bytes.filter(|v| *v > 0).or(u.vram_bytes);
                }
                u.gtt_bytes = Some(u.gtt_bytes.unwrap_or(0) + c.gtt_bytes.unwrap_or(0));
                for (engine, ns) in &c.engines {
                    let k = (key.0.clone(), key.1, engine.clone());
                    if let Some((ns0, at0)) = self.prev.get(&k)
                        && let Some(p) =
                            fdinfo::busy_percent(*ns0, *ns, mono_ns.saturating_sub(*at0))
                    {
                        *u.engine_percent.entry(engine.clone()).or_insert(0.0) += p;
                    }
                    next_prev.insert(k, (*ns, mono_ns));
                }
            }
            let gpus_used: Vec<GpuUse> = uses.into_values().collect();
            let mut p = Process {
                pid: h.pid,
                name: h.comm.clone(),
                holds_kfd: h.kfd,
                agent: h.agent.clone(),
                visible_devices: h.visible.clone(),
                gpus: gpus_used,
                ..Process::default()
            };
            note(
                &mut p.provenance,
                "gpus",
                SourceKind::Sysfs,
                "/sys/class/kfd/kfd/proc and /proc/PID/fdinfo",
                now_ms,
                None,
            );
            out.push(p);
        }
        self.prev = next_prev;
        out
    }
}

static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

fn num_hex(p: &Path) -> Option<u64> {
    let t = text(p).ok()?;
    u64::from_str_radix(t.trim_start_matches("0x"), 16).ok()
}

struct Hwmon {
    dir: String,
    junction_c: Option<f64>,
    mem_c: Option<f64>,
    power_w: Option<f64>,
    cap_w: Option<f64>,
}

/// hwmon of a PCI device: `temp2` junction, `temp3` memory (m°C), `power1_*` (µW). MI300 hides
/// `temp1`.
fn hwmon(dev: &Path) -> Hwmon {
    let dir = std::fs::read_dir(dev.join("hwmon"))
        .ok()
        .and_then(|mut e| e.find_map(|x| x.ok().map(|x| x.path())));
    let Some(dir) = dir else {
        return Hwmon {
            dir: format!("{}/hwmon: none", dev.display()),
            junction_c: None,
            mem_c: None,
            power_w: None,
            cap_w: None,
        };
    };
    #[expect(clippy::cast_precision_loss, reason = "sensor readings")]
    let f = |n: &str, scale: f64| num(&dir.join(n)).map(|v| v as f64 / scale);
    Hwmon {
        junction_c: f("temp2_input", 1000.0),
        mem_c: f("temp3_input", 1000.0),
        power_w: f("power1_input", 1e6).or_else(|| f("power1_average", 1e6)),
        cap_w: f("power1_cap", 1e6),
        dir: dir.display().to_string(),
    }
}

/// A partition's GFX busy and where it came from.
fn partition_busy(
    sys: &Path,
    d: &Device,
    node: Option<&KfdNode>,
    partition: u32,
) -> (Option<f64>, String) {
    // The partition's own xcp_metrics: XCP 0 under the PCI device, XCP i under the platform
    // device that carries its render node.
    let own = if partition == 0 {
        Some(d.dir.join("xcp/xcp_metrics"))
    } else {
        node.and_then(|n| n.render_minor)
            .map(|m| follow(sys, &format!("class/drm/renderD{m}/device")).join("xcp/xcp_metrics"))
    };
    if let Some(p) = own
        && let Ok(b) = std::fs::read(&p)
        && let Ok(x) = gpu_metrics::parse_xcp(&b)
        && let Some(v) = x.gfx_busy()
    {
        return (Some(v), p.display().to_string());
    }
    match &d.metrics {
        Ok(m) if !m.xcp.is_empty() => {
            let v = m.xcp.get(partition as usize).and_then(XcpStats::gfx_busy);
            (
                v,
                format!("{}/gpu_metrics xcp_stats[{partition}]", d.dir.display()),
            )
        }
        Ok(m) if !m.xcc_busy.is_empty() => {
            let n = node.map_or(1, |k| k.num_xcc.max(1)) as usize;
            let start = partition as usize * n;
            let mine: Vec<f64> = m
                .xcc_busy
                .iter()
                .skip(start)
                .take(n)
                .map(|v| f64::from(*v))
                .collect();
            #[expect(clippy::cast_precision_loss, reason = "small counts")]
            let v = (!mine.is_empty()).then(|| mine.iter().sum::<f64>() / mine.len() as f64);
            (
                v,
                format!(
                    "{}/gpu_metrics v1.9 gfx_busy_inst[{start}..{}]",
                    d.dir.display(),
                    start + n
                ),
            )
        }
        Ok(_) => (
            None,
            format!("{}/gpu_metrics has no per-partition block", d.dir.display()),
        ),
        Err(e) => (None, e.clone()),
    }
}

/// Where `--source` takes its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SourceMode {
    /// amd-smi, overlaid with what the kernel gives fresher or more precisely (per-partition
    /// busy, power, temperatures, engine use).
    #[default]
    Auto,
    /// amd-smi only.
    AmdSmi,
    /// The kernel only (no amd-smi: partition changes are unavailable).
    Sysfs,
}

/// Overlays the kernel's values on an amd-smi snapshot (`--source auto`), by logical GPU
/// identity: per-partition GFX busy (amd-smi has none for secondaries), power and temperatures
/// (one binary read, fresher than amd-smi's), and per-process engine use. Provenance follows
/// the value.
pub fn overlay(amd: &mut Snapshot, k: &Snapshot) {
    for g in &mut amd.gpus {
        let Some(kg) = k.gpus.iter().find(|x| x.bdf == g.bdf) else {
            continue;
        };
        for (f, v, kv) in [
            ("power_watts", &mut g.power_watts, kg.power_watts),
            (
                "hotspot_celsius",
                &mut g.hotspot_celsius,
                kg.hotspot_celsius,
            ),
            ("mem_celsius", &mut g.mem_celsius, kg.mem_celsius),
        ] {
            if kv.is_some() {
                *v = kv;
                if let Some(o) = kg.provenance.get(f) {
                    g.provenance.insert(f.into(), o.clone());
                }
            }
        }
        for l in &mut g.partitions {
            let Some(kl) = kg.partitions.iter().find(|x| x.bdf == l.bdf) else {
                continue;
            };
            if kl.gfx_busy_percent.is_some() {
                l.gfx_busy_percent = kl.gfx_busy_percent;
                if let Some(o) = kl.provenance.get("gfx_busy_percent") {
                    l.provenance.insert("gfx_busy_percent".into(), o.clone());
                }
            }
            if l.kfd_id.is_none() {
                l.kfd_id = kl.kfd_id;
            }
        }
    }
    for p in &mut amd.processes {
        let Some(kp) = k.processes.iter().find(|x| x.pid == p.pid) else {
            continue;
        };
        for u in &mut p.gpus {
            if let Some(ku) = kp.gpus.iter().find(|x| x.gpu_id == u.gpu_id) {
                u.engine_percent.clone_from(&ku.engine_percent);
                if u.gtt_bytes.is_none() {
                    u.gtt_bytes = ku.gtt_bytes;
                }
            }
        }
    }
    if !k.gpus.is_empty() {
        amd.sources.extend(k.sources.iter().cloned());
    }
}
