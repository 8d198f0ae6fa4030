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

/// The collector and what it keeps between samples. The layout (KFD nodes, each device's
/// files and modes) is re-read only when the KFD topology's `generation_id` changes (a reload
/// or repartition rebuilds it); the /proc fd scan runs every `full_scan_every` samples, with
/// new ROCm processes picked up at once from `/sys/class/kfd/kfd/proc`; fdinfo of ROCm
/// processes (whose compute is not in fdinfo) is re-read on full scans only. That keeps a
/// steady-state sample to a few syscalls per GPU and per GPU process.
#[derive(Debug)]
pub struct SysfsCollector {
    /// Roots (`--sysfs-root`, `--proc-root`; `/dev` is only a prefix for fd targets).
    pub roots: Roots,
    /// Full /proc fd scan every this many samples (1 = always).
    pub full_scan_every: u64,
    /// Holders found by a scan made elsewhere, used once instead of scanning again (a caller
    /// that has just scanned /proc; the tests hand in a chosen set).
    pub external_holders: Option<Vec<holders::Holder>>,
    /// Previous engine counters: (pdev, client id, engine) → (ns, monotonic ns of the read).
    prev: HashMap<(String, u64, String), (u64, u64)>,
    layout: Option<(String, Vec<KfdNode>, Vec<DeviceFiles>)>,
    /// KFD nodes of this layout that could not be read, and why.
    layout_errors: Vec<String>,
    holders: Vec<holders::Holder>,
    kfd_ids: HashMap<u32, Vec<u64>>,
    fdinfo_cache: HashMap<(u32, u32), fdinfo::Client>,
    samples: u64,
    generation: u64,
    host: String,
    /// Marks snapshots as simulated.
    pub simulated: bool,
    /// /proc facts of the processes seen (read once per process, dropped on full scans).
    pub procinfo: crate::collect::procinfo::Cache,
    /// Run the full /proc fd scan at the next sample (the kill dialog, staging, a drain).
    pub scan_now: bool,
    /// What the last scan looked at (for sweeps).
    swept: holders::Swept,
}

/// /proc fd scans: one every this many samples (a minute at a 1 s refresh; measured at a
/// quarter of the monitor's own CPU on a 2,000-process host at 30). Most are sweeps
/// (`holders::sweep`: new processes and known holders only); every [`COMPLETE_SCAN_EVERY`]th
/// looks at every process. In between, ROCm processes come and go through KFD's process
/// directory every sample; a process holding only a render node (video decode, no KFD) appears
/// at the next sweep if it is new, else at the next complete scan.
pub const FULL_SCAN_EVERY: u64 = 60;

/// Every this many scans, the scan looks at every process (ten minutes at a 1 s refresh); a
/// repartition, staging, the kill dialog, a plan and a drain ask for one at once.
pub const COMPLETE_SCAN_EVERY: u64 = 10;

/// How a sample finds holders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Every process's fds.
    Complete,
    /// New processes' and known holders' fds.
    Sweep,
    /// KFD's process list only.
    Kfd,
}

/// A device's files and what does not change until the next topology generation.
#[derive(Debug, Clone)]
struct DeviceFiles {
    bdf: String,
    dir: PathBuf,
    device_id: Option<String>,
    compute: Result<String, String>,
    memory: Result<String, String>,
    available_compute: Option<String>,
    available_memory: Option<String>,
    vram_total: Option<u64>,
    hwmon: Option<PathBuf>,
    /// Each partition's own `xcp_metrics`, by partition id.
    xcp_files: Vec<(u32, PathBuf)>,
    /// The ASIC serial as amd-smi writes it (`0xAF54E92B0A5D57C8`), from `unique_id`: read
    /// with the layout so the first sample already carries the identity.
    serial: Option<String>,
    /// `vbios_version`.
    vbios: Option<String>,
    /// amdgpu's module version (`/sys/module/amdgpu/version`; the DKMS driver has one).
    driver: Option<String>,
    /// The PCIe link's top speed, GT/s (`max_link_speed`: `32.0 GT/s PCIe`).
    pcie_max_gts: Option<f64>,
    /// The RAS blocks' error counts (`ras/*_err_count`), read every sample.
    ras: Vec<PathBuf>,
}

/// The RAS blocks' count files of a device (none where RAS is off).
fn ras_files(dev: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dev.join("ras"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.ends_with("_err_count"))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Correctable and uncorrectable errors summed over the RAS blocks (`ue: N` / `ce: N` lines);
/// none when no file could be read.
fn ras_counts(files: &[PathBuf], buf: &mut Vec<u8>) -> (Option<u64>, Option<u64>) {
    let (mut ce, mut ue, mut read) = (0u64, 0u64, false);
    for f in files {
        if read_small(f, buf).is_err() {
            continue;
        }
        let Ok(t) = std::str::from_utf8(buf) else {
            continue;
        };
        read = true;
        for line in t.lines() {
            let (k, v) = line.split_once(':').unwrap_or((line, ""));
            let v: u64 = v.trim().parse().unwrap_or(0);
            match k.trim() {
                "ce" => ce = ce.saturating_add(v),
                "ue" => ue = ue.saturating_add(v),
                _ => {}
            }
        }
    }
    if read {
        (Some(ce), Some(ue))
    } else {
        (None, None)
    }
}

/// `32.0 GT/s PCIe` as GT/s.
fn gts(text: &str) -> Option<f64> {
    text.split_whitespace()
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && (0.0..=1000.0).contains(v))
}

/// amd-smi's `asic_serial` is the driver's `unique_id` (`%016llx`) as `0x%016llX`; anything
/// else in the file is not an identity.
fn serial_of(unique_id: &str) -> Option<String> {
    let t = unique_id.trim();
    if t.is_empty() || t.len() > 16 {
        return None;
    }
    u64::from_str_radix(t, 16)
        .ok()
        .map(|v| format!("0x{v:016X}"))
}

/// A printable version string of at most 64 characters, else none.
fn version_text(p: &Path) -> Option<String> {
    text(p)
        .ok()
        .filter(|v| !v.is_empty() && v.len() <= 64 && v.chars().all(|c| c.is_ascii_graphic()))
}

use crate::collect::small_file::read as read_small;

fn small_num(p: &Path, buf: &mut Vec<u8>) -> Option<u64> {
    read_small(p, buf).ok()?;
    std::str::from_utf8(buf).ok()?.trim().parse().ok()
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
            Err(_) if p.is_file() => crate::collect::small_file::text(&p)
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
    crate::collect::small_file::text(p)
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("{}: {e}", p.display()))
}

fn num(p: &Path) -> Option<u64> {
    text(p).ok()?.parse().ok()
}

fn modes<T: std::str::FromStr>(s: &str) -> Vec<T> {
    s.split(',').filter_map(|m| m.trim().parse().ok()).collect()
}

fn num_hex(p: &Path) -> Option<u64> {
    let t = text(p).ok()?;
    u64::from_str_radix(t.trim_start_matches("0x"), 16).ok()
}

static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// The layout: AMD PCI devices with partition files, their static files, and each
/// partition's own metrics file.
fn device_files(sys: &Path, nodes: &[KfdNode]) -> Vec<DeviceFiles> {
    let dir = sys.join("bus/pci/devices");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<DeviceFiles> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let path = follow(&dir, &name);
            if num_hex(&path.join("vendor")) != Some(0x1002)
                || !path.join("current_compute_partition").exists()
            {
                return None;
            }
            let bdf = name
                .rsplit_once('.')
                .map_or(name.clone(), |(b, _)| b.to_string());
            let mut xcp_files = vec![(0, path.join("xcp/xcp_metrics"))];
            for n in nodes.iter().filter(|n| n.bdf() == bdf && n.partition() > 0) {
                if let Some(m) = n.render_minor {
                    xcp_files.push((
                        n.partition(),
                        follow(sys, &format!("class/drm/renderD{m}/device"))
                            .join("xcp/xcp_metrics"),
                    ));
                }
            }
            Some(DeviceFiles {
                device_id: text(&path.join("device")).ok(),
                compute: text(&path.join("current_compute_partition")),
                memory: text(&path.join("current_memory_partition")),
                available_compute: text(&path.join("available_compute_partition")).ok(),
                available_memory: text(&path.join("available_memory_partition")).ok(),
                vram_total: num(&path.join("mem_info_vram_total")),
                hwmon: std::fs::read_dir(path.join("hwmon"))
                    .ok()
                    .and_then(|mut e| e.find_map(|x| x.ok().map(|x| x.path()))),
                serial: text(&path.join("unique_id"))
                    .ok()
                    .and_then(|u| serial_of(&u)),
                vbios: version_text(&path.join("vbios_version")),
                driver: version_text(&sys.join("module/amdgpu/version")),
                pcie_max_gts: text(&path.join("max_link_speed"))
                    .ok()
                    .and_then(|t| gts(&t)),
                ras: ras_files(&path),
                bdf,
                dir: path,
                xcp_files,
            })
        })
        .collect();
    out.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    out
}

impl SysfsCollector {
    /// A collector under `roots`.
    pub fn new(roots: Roots) -> Self {
        Self {
            roots,
            full_scan_every: FULL_SCAN_EVERY,
            external_holders: None,
            prev: HashMap::new(),
            layout: None,
            layout_errors: Vec::new(),
            holders: Vec::new(),
            kfd_ids: HashMap::new(),
            fdinfo_cache: HashMap::new(),
            samples: 0,
            generation: 0,
            host: host::hostname(),
            simulated: false,
            procinfo: crate::collect::procinfo::Cache::default(),
            scan_now: false,
            swept: holders::Swept::default(),
        }
    }

    /// The KFD topology generation of the layout last read (`generation_id`).
    pub fn topology_generation(&self) -> Option<&str> {
        self.layout.as_ref().map(|(g, _, _)| g.as_str())
    }

    /// Samples now, with each process's /proc facts (user, command, start, container): the
    /// whole kernel read, done on the caller's (blocking) thread.
    pub fn sample(&mut self) -> Snapshot {
        let mono = u64::try_from(
            std::time::Instant::now()
                .duration_since(*START.get_or_init(std::time::Instant::now))
                .as_nanos(),
        )
        .unwrap_or(u64::MAX);
        let mut snap = self.sample_at(mono, clock::now_ms());
        let root = self.roots.proc_root.clone();
        crate::collect::procinfo::enrich_cached(&mut snap, &root, &mut self.procinfo);
        snap
    }

    /// Re-reads the layout when the topology generation changed; true when it did.
    fn refresh_layout(&mut self, buf: &mut Vec<u8>) -> bool {
        let sys = &self.roots.sys_root;
        let gen_id = read_small(&sys.join("class/kfd/kfd/topology/generation_id"), buf)
            .ok()
            .map(|()| String::from_utf8_lossy(buf).trim().to_string())
            .unwrap_or_default();
        if self
            .layout
            .as_ref()
            .is_some_and(|(g, _, _)| *g == gen_id && !g.is_empty())
        {
            return false;
        }
        let (nodes, errors) = kfd::topology_checked(sys);
        for e in &errors {
            log::warn!("{e}");
        }
        self.layout_errors = errors;
        let devices = device_files(sys, &nodes);
        self.layout = Some((gen_id, nodes, devices));
        true
    }

    /// Samples with the given clocks (monotonic ns for rates, wall ms for ages): tests replay
    /// two fdinfo reads a known time apart.
    pub fn sample_at(&mut self, mono_ns: u64, now_ms: u64) -> Snapshot {
        let t0 = std::time::Instant::now();
        self.generation += 1;
        let mut buf = Vec::with_capacity(8192);
        let relaid = self.refresh_layout(&mut buf);
        // Borrowed out for this sample and put back at its end (not cloned every tick).
        let (gen_id, nodes, devices) = self.layout.take().unwrap_or_default();
        let mut gpus = listed_gpus(&nodes, &devices, now_ms);
        let mut warnings = self.layout_errors.clone();
        for g in &mut gpus {
            if let Some(d) = devices.iter().find(|d| d.bdf == g.bdf) {
                read_device(g, d, &nodes, relaid, now_ms, &mut buf, &mut warnings);
            }
        }
        kfd::number_as_amd_smi(&mut gpus);
        let scan = self.next_scan(relaid);
        let processes = self.processes(&nodes, &gpus, mono_ns, now_ms, scan, &mut buf);
        self.layout = Some((gen_id, nodes, devices));
        vram_used(&mut gpus, &processes, now_ms);
        // What permissions hid is said, and the source is not `ok` while partly blind.
        let hidden = self.hidden(&processes);
        if let Some(h) = &hidden {
            warnings.push(h.describe());
        }
        let status = self.status(&gpus, &warnings, now_ms, t0);
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
            host_usage: None,
            hidden,
            kubelet: None,
            throughput: Vec::new(),
        }
    }

    /// How this sample finds holders: a complete scan after a relayout, when asked, or every
    /// [`COMPLETE_SCAN_EVERY`]th scan; a sweep every `full_scan_every` samples; else KFD's
    /// list. A full scan drops the cached /proc facts.
    fn next_scan(&mut self, relaid: bool) -> Scan {
        let complete = relaid
            || std::mem::take(&mut self.scan_now)
            || self.full_scan_every <= 1
            || self
                .samples
                .is_multiple_of(self.full_scan_every.saturating_mul(COMPLETE_SCAN_EVERY));
        let scan = if complete {
            Scan::Complete
        } else if self.samples.is_multiple_of(self.full_scan_every) {
            Scan::Sweep
        } else {
            Scan::Kfd
        };
        if scan != Scan::Kfd {
            self.procinfo.clear();
        }
        self.samples += 1;
        scan
    }

    /// The source's health: down with no GPU, degraded with any warning (the first is said).
    fn status(
        &self,
        gpus: &[PhysicalGpu],
        warnings: &[String],
        now_ms: u64,
        t0: std::time::Instant,
    ) -> SourceStatus {
        SourceStatus {
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
            cadence: None,
        }
    }

    /// What this user could not see: GPU processes seen through KFD only, and processes whose
    /// open files the last scan could not read.
    fn hidden(&self, processes: &[Process]) -> Option<crate::domain::snapshot::Hidden> {
        let seen_by_kfd = processes.iter().filter(|p| p.files_hidden).count();
        let denied = self.swept.denied().count();
        let h = crate::domain::snapshot::Hidden {
            processes: u32::try_from(seen_by_kfd).unwrap_or(u32::MAX),
            unreadable: denied.saturating_sub(u32::try_from(seen_by_kfd).unwrap_or(u32::MAX)),
        };
        (h.processes > 0 || h.unreadable > 0).then_some(h)
    }

    /// Who holds GPUs now: a full fd scan, or the known holders (those still in KFD's process
    /// list, DRM-only ones until their fdinfo disappears) plus any new KFD process.
    fn refresh_holders(&mut self, scan: Scan) {
        let full = scan != Scan::Kfd;
        if let Some(h) = self.external_holders.take() {
            self.holders = h;
            if full {
                self.kfd_ids.clear();
                self.fdinfo_cache.clear();
            }
            return;
        }
        let kfd_pids = holders::kfd_pids(&self.roots.sys_root);
        let own = std::process::id();
        if full {
            self.holders = if scan == Scan::Complete {
                holders::scan_all(&self.roots, &mut self.swept)
            } else {
                let known: Vec<u32> = self.holders.iter().map(|h| h.pid).collect();
                holders::sweep(&self.roots, &mut self.swept, &known)
            };
            self.kfd_ids.clear();
            self.fdinfo_cache.clear();
        } else {
            self.holders.retain(|h| !h.kfd || kfd_pids.contains(&h.pid));
            for &pid in &kfd_pids {
                if pid != own
                    && !self.holders.iter().any(|h| h.pid == pid)
                    && let Some(h) = holders::scan_pid_or_hidden(&self.roots, pid)
                {
                    self.holders.push(h);
                }
            }
        }
        self.holders.sort_by_key(|h| h.pid);
    }

    /// The GPU processes: who holds GPUs now, with each one's use per logical GPU from its KFD
    /// files and DRM fdinfo. A non-ROCm holder whose fdinfo is gone has exited: dropped.
    fn processes(
        &mut self,
        nodes: &[KfdNode],
        gpus: &[PhysicalGpu],
        mono_ns: u64,
        now_ms: u64,
        scan: Scan,
        buf: &mut Vec<u8>,
    ) -> Vec<Process> {
        self.refresh_holders(scan);
        let ids = GpuIds::new(nodes, gpus);
        let mut reads = DrmReads {
            full: scan != Scan::Kfd,
            mono_ns,
            seen_clients: std::collections::HashSet::new(),
            next_prev: HashMap::new(),
        };
        let mut out = Vec::new();
        let holders = std::mem::take(&mut self.holders);
        let mut gone = Vec::new();
        for h in &holders {
            let mut uses: BTreeMap<u32, GpuUse> = BTreeMap::new();
            let unattributed = self.kfd_uses(h, &ids, &mut uses, buf);
            let drm = self.drm_uses(h, &ids, &mut reads, &mut uses, buf);
            if drm.gone {
                gone.push(h.pid);
                continue;
            }
            out.push(process_of(h, uses, unattributed, drm.denied, now_ms));
        }
        self.holders = holders
            .into_iter()
            .filter(|h| !gone.contains(&h.pid))
            .collect();
        self.kfd_ids
            .retain(|pid, _| self.holders.iter().any(|h| h.pid == *pid));
        self.prev = reads.next_prev;
        out
    }

    /// A ROCm process's use from KFD: per-GPU VRAM, SDMA time, CU occupancy (the gpu ids it has
    /// files for are listed once per full scan). The gpu id two nodes claim, if it uses one.
    fn kfd_uses(
        &mut self,
        h: &holders::Holder,
        gpu: &GpuIds,
        uses: &mut BTreeMap<u32, GpuUse>,
        buf: &mut Vec<u8>,
    ) -> Option<u64> {
        if !h.kfd {
            return None;
        }
        let mut unattributed = None;
        let ids = self.kfd_ids.entry(h.pid).or_insert_with(|| {
            kfd::process_use(&self.roots.sys_root, h.pid)
                .unwrap_or_default()
                .into_iter()
                .map(|u| u.gpu_id)
                .collect()
        });
        let pdir = self
            .roots
            .sys_root
            .join("class/kfd/kfd/proc")
            .join(h.pid.to_string());
        for id in ids.iter() {
            let Some((lid, cus)) = gpu.logical.get(id).copied() else {
                if gpu.shared.contains(id) {
                    unattributed = Some(*id);
                }
                continue;
            };
            let u = uses.entry(lid).or_insert_with(|| GpuUse {
                gpu_id: lid,
                ..GpuUse::default()
            });
            u.vram_bytes = small_num(&pdir.join(format!("vram_{id}")), buf);
            u.sdma_us = small_num(&pdir.join(format!("sdma_{id}")), buf);
            u.cu_occupancy = small_num(&pdir.join(format!("stats_{id}/cu_occupancy")), buf)
                .and_then(|v| u32::try_from(v).ok());
            u.cu_percent = match (u.cu_occupancy, cus) {
                (Some(o), Some(c)) if c > 0 => Some(f64::from(o) * 100.0 / f64::from(c)),
                _ => None,
            };
        }
        unattributed
    }

    /// A holder's use from DRM fdinfo: one client per drm-client-id, wherever it appears first.
    /// ROCm processes' fdinfo (no compute time there) is re-read on full scans only.
    fn drm_uses(
        &mut self,
        h: &holders::Holder,
        gpu: &GpuIds,
        reads: &mut DrmReads,
        uses: &mut BTreeMap<u32, GpuUse>,
        buf: &mut Vec<u8>,
    ) -> DrmOutcome {
        let mut outcome = DrmOutcome::default();
        for (fd, minor) in &h.drm_fds {
            let Some(id) = gpu.by_minor.get(minor).copied() else {
                continue;
            };
            let u = uses.entry(id).or_insert_with(|| GpuUse {
                gpu_id: id,
                ..GpuUse::default()
            });
            u.render_open = true;
            let cached = h.kfd && !reads.full && self.fdinfo_cache.contains_key(&(h.pid, *fd));
            let c = match self.fdinfo_cache.get(&(h.pid, *fd)) {
                Some(c) if cached => c.clone(),
                _ => match self.read_fdinfo(h, *fd, buf) {
                    Ok(c) => c,
                    Err(e) => {
                        if e.kind() == std::io::ErrorKind::PermissionDenied {
                            // Another user's process: fdinfo is owner-only (0400).
                            outcome.denied = true;
                        } else if !h.kfd {
                            outcome.gone = true;
                        }
                        continue;
                    }
                },
            };
            let key = (
                c.pdev.clone().unwrap_or_default(),
                c.client_id.unwrap_or(u64::MAX),
            );
            if c.client_id.is_some() && !reads.seen_clients.insert(key.clone()) {
                continue;
            }
            client_use(u, &c);
            self.engine_busy(u, &c, key, cached, reads);
        }
        outcome
    }

    /// Reads and parses the fdinfo of `fd` of `h` (kept for a ROCm process, re-read on full
    /// scans only).
    fn read_fdinfo(
        &mut self,
        h: &holders::Holder,
        fd: u32,
        buf: &mut Vec<u8>,
    ) -> std::io::Result<fdinfo::Client> {
        let rel = format!("{}/fdinfo/{fd}", h.pid);
        let mut read =
            crate::collect::small_file::proc_read(&self.roots.fdinfo_root.join(&rel), buf);
        if read
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            && self.roots.fdinfo_root != self.roots.proc_root
        {
            // A process the simulator's twin does not run (it writes fdinfo for its workloads
            // only): the kernel's own fdinfo of the fd.
            read = crate::collect::small_file::proc_read(&self.roots.proc_root.join(&rel), buf);
        }
        read?;
        let c = fdinfo::parse(&String::from_utf8_lossy(buf));
        if h.kfd {
            self.fdinfo_cache.insert((h.pid, fd), c.clone());
        }
        Ok(c)
    }

    /// Engine busy of client `key` since its previous read; a cached (not re-read) client
    /// keeps its last counter for the next fresh read.
    fn engine_busy(
        &self,
        u: &mut GpuUse,
        c: &fdinfo::Client,
        key: (String, u64),
        cached: bool,
        reads: &mut DrmReads,
    ) {
        for (engine, ns) in &c.engines {
            let k = (key.0.clone(), key.1, engine.clone());
            if cached {
                if let Some(v) = self.prev.get(&k) {
                    reads.next_prev.insert(k, *v);
                }
                continue;
            }
            if let Some((ns0, at0)) = self.prev.get(&k)
                && let Some(p) = fdinfo::busy_percent(*ns0, *ns, reads.mono_ns.saturating_sub(*at0))
            {
                *u.engine_percent.entry(engine.clone()).or_insert(0.0) += p;
            }
            reads.next_prev.insert(k, (*ns, reads.mono_ns));
        }
    }
}

impl DeviceFiles {
    /// The path of the device's file `f`, as provenance names it.
    fn at(&self, f: &str) -> String {
        format!("{}/{f}", self.dir.display())
    }
}

/// The physical GPUs: those of the KFD topology, and those with partition files but no KFD
/// node (KFD not loaded, or a driver reloading), which still show; by BDF.
fn listed_gpus(nodes: &[KfdNode], devices: &[DeviceFiles], now_ms: u64) -> Vec<PhysicalGpu> {
    let mut gpus = kfd::gpus_from_topology(nodes, now_ms);
    for d in devices {
        if !gpus.iter().any(|g| g.bdf == d.bdf) {
            gpus.push(PhysicalGpu {
                bdf: d.bdf.clone(),
                product: "unknown GPU".into(),
                ..PhysicalGpu::default()
            });
        }
    }
    gpus.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    gpus
}

/// One physical GPU's values from its device files: identity, modes, metrics, power cap, and
/// each partition's share and busy. What cannot be read goes to `warnings`.
fn read_device(
    g: &mut PhysicalGpu,
    d: &DeviceFiles,
    nodes: &[KfdNode],
    relaid: bool,
    now_ms: u64,
    buf: &mut Vec<u8>,
    warnings: &mut Vec<String>,
) {
    device_identity(g, d, now_ms, buf);
    device_modes(g, d, now_ms, warnings);
    g.hbm_bytes = d.vram_total;
    let metrics = device_metrics(g, d, now_ms, buf, warnings);
    if relaid || g.power_cap_watts.is_none() {
        g.power_cap_watts = d
            .hwmon
            .as_deref()
            .and_then(|h| small_num(&h.join("power1_cap"), buf))
            .map(|v| v as f64 / 1e6);
    }
    let n = g.partitions.len().max(1);
    // Which XCDs and HBM domains each partition owns follows from the product's geometry and
    // the modes (sysfs does not list them).
    let geometry = g
        .product_key
        .as_deref()
        .and_then(crate::domain::product::by_key)
        .zip(g.compute_partition.zip(g.memory_partition))
        .map(|(p, (c, m))| crate::domain::layout::shapes(&p, c, m))
        .filter(|s| s.len() == g.partitions.len());
    let hbm = g.hbm_bytes;
    for l in &mut g.partitions {
        let shape = geometry
            .as_ref()
            .and_then(|v| v.iter().find(|s| s.partition_id == l.partition_id));
        let share = hbm.map(|t| t / n as u64);
        read_partition(l, d, nodes, shape, share, &metrics, now_ms, buf);
    }
}

/// The product (from the device id), serial, versions, PCIe and RAS counts.
fn device_identity(g: &mut PhysicalGpu, d: &DeviceFiles, now_ms: u64, buf: &mut Vec<u8>) {
    if let Some(p) = crate::domain::product::identify(d.device_id.as_deref(), None) {
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
    g.device_id.clone_from(&d.device_id);
    g.serial.clone_from(&d.serial);
    note(
        &mut g.provenance,
        "serial",
        SourceKind::Sysfs,
        &d.at("unique_id"),
        now_ms,
        d.serial.is_none().then_some(Missing::NotReported),
    );
    g.vbios_version.clone_from(&d.vbios);
    g.driver_version.clone_from(&d.driver);
    g.counters.pcie_max_speed_gts = d.pcie_max_gts;
    (g.counters.ecc_correctable, g.counters.ecc_uncorrectable) = ras_counts(&d.ras, buf);
}

/// The modes and memory caps the device files say; the product table's profiles narrowed to
/// the combinations sysfs says are valid now.
fn device_modes(g: &mut PhysicalGpu, d: &DeviceFiles, now_ms: u64, warnings: &mut Vec<String>) {
    match &d.compute {
        Ok(s) => {
            g.compute_partition = s.parse::<ComputeMode>().ok();
            note(
                &mut g.provenance,
                "compute_partition",
                SourceKind::Sysfs,
                &d.at("current_compute_partition"),
                now_ms,
                None,
            );
        }
        Err(e) => warnings.push(e.clone()),
    }
    match &d.memory {
        Ok(s) => {
            g.memory_partition = s.parse::<MemoryMode>().ok();
            note(
                &mut g.provenance,
                "memory_partition",
                SourceKind::Sysfs,
                &d.at("current_memory_partition"),
                now_ms,
                None,
            );
        }
        Err(e) => warnings.push(e.clone()),
    }
    if let Some(s) = &d.available_memory {
        g.memory_caps = modes(s);
        note(
            &mut g.provenance,
            "memory_caps",
            SourceKind::Sysfs,
            &d.at("available_memory_partition"),
            now_ms,
            None,
        );
    }
    // Only the combinations valid now: sysfs lists the compute modes the current memory mode
    // allows (newer drivers), so keep the table's profiles that agree.
    if let (Some(s), Some(m)) = (&d.available_compute, g.memory_partition) {
        let avail: Vec<ComputeMode> = modes(s);
        if !avail.is_empty() {
            g.profiles
                .retain(|p| !p.memory.contains(&m) || avail.contains(&p.compute));
        }
    }
}

/// Power, temperatures, clocks and I/O from `gpu_metrics`; where it cannot be read (said in
/// `warnings`), power and temperatures from hwmon. The metrics read, for the partitions.
fn device_metrics(
    g: &mut PhysicalGpu,
    d: &DeviceFiles,
    now_ms: u64,
    buf: &mut Vec<u8>,
    warnings: &mut Vec<String>,
) -> Result<GpuMetrics, String> {
    let file = d.at("gpu_metrics");
    let metrics = read_small(&d.dir.join("gpu_metrics"), buf)
        .map_err(|e| format!("{file}: {e}"))
        .and_then(|()| gpu_metrics::parse(buf).map_err(|e| format!("{file}: {e}")));
    match &metrics {
        Ok(m) => {
            let src = format!("{file} v{}.{}", m.revision.0, m.revision.1);
            g.power_watts = m.socket_power.map(f64::from);
            g.hotspot_celsius = m.temperature_hotspot.map(f64::from);
            g.mem_celsius = m.temperature_mem.map(f64::from);
            g.gfx_clock_mhz = m.gfxclk.iter().max().map(|v| u32::from(*v));
            g.mem_clock_mhz = m.uclk.map(u32::from);
            g.gfx_clocks_mhz = m.gfxclk.iter().map(|v| u32::from(*v)).collect();
            io_counters(&mut g.counters, &m.io);
            for f in [
                "power_watts",
                "hotspot_celsius",
                "mem_celsius",
                "gfx_clock_mhz",
                "mem_clock_mhz",
            ] {
                note(&mut g.provenance, f, SourceKind::Sysfs, &src, now_ms, None);
            }
        }
        Err(e) => {
            warnings.push(e.clone());
            let hw = hwmon(d.hwmon.as_deref(), buf);
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
    metrics
}

/// One partition: the XCDs and HBM domains it owns (`shape`), its GFX busy, its VRAM (KFD's
/// figure, else an even `share` of the device's), and UMC busy, device-wide, on the primary.
#[expect(
    clippy::too_many_arguments,
    reason = "the partition, its device's reads and the sample's clock and buffer"
)]
fn read_partition(
    l: &mut crate::domain::snapshot::LogicalGpu,
    d: &DeviceFiles,
    nodes: &[KfdNode],
    shape: Option<&crate::domain::layout::PartitionShape>,
    share: Option<u64>,
    metrics: &Result<GpuMetrics, String>,
    now_ms: u64,
    buf: &mut Vec<u8>,
) {
    if let Some(s) = shape {
        l.xcds.clone_from(&s.xcds);
        l.memory_domains.clone_from(&s.memory_domains);
        for f in ["xcds", "memory_domains"] {
            note(
                &mut l.provenance,
                f,
                SourceKind::Derived,
                "the product's geometry for the current modes",
                now_ms,
                None,
            );
        }
    }
    let node = nodes.iter().find(|k| Some(k.gpu_id) == l.kfd_id);
    // This partition's own metrics file, else its block of gpu_metrics, else the device's XCCs
    // it owns (v1.9).
    let own = d
        .xcp_files
        .iter()
        .find(|(p, _)| *p == l.partition_id)
        .map(|(_, f)| f.as_path());
    let (xccs, src) = partition_busy(own, metrics, &d.dir, node, l.partition_id, buf);
    let busy = mean(&xccs);
    l.gfx_busy_percent = busy;
    l.xcc_busy_percent = xccs;
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
    } else if share.is_some() {
        l.vram_share_bytes = share;
    }
    if l.is_primary() {
        if let Ok(m) = metrics {
            l.umc_busy_percent = m.umc_activity.map(f64::from);
            note(
                &mut l.provenance,
                "umc_busy_percent",
                SourceKind::Sysfs,
                &d.at("gpu_metrics"),
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

/// Per-partition VRAM in use: the sum of what KFD and fdinfo attribute to it (sysfs has only
/// the device-wide figure).
fn vram_used(gpus: &mut [PhysicalGpu], processes: &[Process], now_ms: u64) {
    for l in gpus.iter_mut().flat_map(|g| &mut g.partitions) {
        // Checked: a wrapped total reads as a plausible "1.0 GiB used".
        let used = crate::domain::sanity::sum_bytes(
            processes
                .iter()
                .flat_map(|p| &p.gpus)
                .filter(|u| u.gpu_id == l.gpu_id)
                .filter_map(|u| u.vram_bytes),
        );
        l.vram_used_bytes = used.as_ref().ok().copied();
        note(
            &mut l.provenance,
            "vram_used_bytes",
            SourceKind::Derived,
            "sum of its processes' VRAM (KFD vram_<gpu_id>, DRM fdinfo)",
            now_ms,
            used.err().map(Missing::OutOfRange),
        );
    }
    // A partition one of whose hidden processes' VRAM could not be read has no known sum: N/A
    // with the reason, never a low figure read as fact.
    for l in gpus.iter_mut().flat_map(|g| &mut g.partitions) {
        let unknown = processes
            .iter()
            .filter(|p| p.files_hidden)
            .flat_map(|p| &p.gpus)
            .any(|u| u.gpu_id == l.gpu_id && u.vram_bytes.is_none());
        if unknown {
            l.vram_used_bytes = None;
            note(
                &mut l.provenance,
                "vram_used_bytes",
                SourceKind::Derived,
                "sum of its processes' VRAM: another user's could not be read",
                now_ms,
                Some(Missing::OtherUsersFiles),
            );
        }
    }
}

/// How KFD gpu ids and render minors name this sample's logical GPUs.
struct GpuIds {
    /// Gpu ids two nodes claim: they name no logical GPU (a use there is N/A, never the
    /// first's).
    shared: std::collections::BTreeSet<u64>,
    /// KFD gpu id → (logical GPU, its CUs).
    logical: HashMap<u64, (u32, Option<u32>)>,
    /// Render minor → logical GPU.
    by_minor: HashMap<u32, u32>,
}

impl GpuIds {
    fn new(nodes: &[KfdNode], gpus: &[PhysicalGpu]) -> Self {
        let shared: std::collections::BTreeSet<u64> = kfd::shared_ids(nodes).into_keys().collect();
        let logical: HashMap<u64, (u32, Option<u32>)> = gpus
            .iter()
            .flat_map(|g| &g.partitions)
            .filter_map(|l| Some((l.kfd_id?, (l.gpu_id, l.cu_count))))
            .filter(|(id, _)| !shared.contains(id))
            .collect();
        let by_minor = nodes
            .iter()
            .filter_map(|n| Some((n.render_minor?, logical.get(&n.gpu_id)?.0)))
            .collect();
        Self {
            shared,
            logical,
            by_minor,
        }
    }
}

/// What one sample's fdinfo reads share across holders.
struct DrmReads {
    /// A full scan: ROCm processes' fdinfo is re-read.
    full: bool,
    mono_ns: u64,
    /// (pdev, drm-client-id) already counted.
    seen_clients: std::collections::HashSet<(String, u64)>,
    /// The engine counters for the next sample.
    next_prev: HashMap<(String, u64, String), (u64, u64)>,
}

/// What reading a holder's fdinfo found out about the holder itself.
#[derive(Default)]
struct DrmOutcome {
    /// Another user's: its fdinfo is not readable.
    denied: bool,
    /// A DRM-only holder whose fdinfo is gone: it exited.
    gone: bool,
}

/// What one fdinfo client adds to its GPU's use.
fn client_use(u: &mut GpuUse, c: &fdinfo::Client) {
    // KFD's figure is the process's own; fdinfo fills what KFD does not give.
    if u.vram_bytes.is_none() || u.vram_bytes == Some(0) {
        u.vram_bytes = c.vram_bytes.filter(|v| *v > 0).or(u.vram_bytes);
    }
    // Saturating: a figure near 2^64 must not wrap into a small one (the snapshot's last check
    // makes it N/A with the reason).
    u.gtt_bytes = Some(
        u.gtt_bytes
            .unwrap_or(0)
            .saturating_add(c.gtt_bytes.unwrap_or(0)),
    );
}

/// A holder as a process, its provenance saying where its use comes from and what its owner's
/// permissions hid.
fn process_of(
    h: &holders::Holder,
    uses: BTreeMap<u32, GpuUse>,
    unattributed: Option<u64>,
    denied: bool,
    now_ms: u64,
) -> Process {
    let mut p = Process {
        pid: h.pid,
        name: h.comm.clone(),
        holds_kfd: h.kfd,
        agent: h.agent.clone(),
        visible_devices: h.visible.clone(),
        gpus: uses.into_values().collect(),
        ..Process::default()
    };
    note(
        &mut p.provenance,
        "gpus",
        SourceKind::Sysfs,
        "/sys/class/kfd/kfd/proc (each sample) and /proc/PID/fdinfo (each sample for DRM clients, each full scan for ROCm processes)",
        now_ms,
        None,
    );
    if let Some(id) = unattributed {
        note(
            &mut p.provenance,
            "gpus",
            SourceKind::Sysfs,
            &format!("/sys/class/kfd/kfd/proc/{}/vram_{id}", h.pid),
            now_ms,
            Some(Missing::ReadFailed(kfd::shared_reason(id))),
        );
    }
    if denied || h.files_hidden {
        p.files_hidden = h.files_hidden;
        for f in ["gtt_bytes", "render_open", "engine_percent"] {
            note(
                &mut p.provenance,
                f,
                SourceKind::Procfs,
                "/proc/PID/fd and fdinfo are readable by their owner or root only",
                now_ms,
                Some(Missing::OtherUsersFiles),
            );
        }
        // Unknown, not zero: the table shows N/A with the reason.
        for u in &mut p.gpus {
            u.gtt_bytes = None;
        }
    }
    p
}

struct Hwmon {
    dir: String,
    junction_c: Option<f64>,
    mem_c: Option<f64>,
    power_w: Option<f64>,
}

/// hwmon of a PCI device: `temp2` junction, `temp3` memory (m°C), `power1_*` (µW). MI300 hides
/// `temp1`.
fn hwmon(dir: Option<&Path>, buf: &mut Vec<u8>) -> Hwmon {
    let Some(dir) = dir else {
        return Hwmon {
            dir: "no hwmon directory".into(),
            junction_c: None,
            mem_c: None,
            power_w: None,
        };
    };
    #[expect(clippy::cast_precision_loss, reason = "sensor readings")]
    let mut f = |n: &str, scale: f64| small_num(&dir.join(n), buf).map(|v| v as f64 / scale);
    Hwmon {
        junction_c: f("temp2_input", 1000.0),
        mem_c: f("temp3_input", 1000.0),
        power_w: f("power1_input", 1e6).or_else(|| f("power1_average", 1e6)),
        dir: dir.display().to_string(),
    }
}

/// `gpu_metrics`' energy, PCIe and XGMI counters in the snapshot's units.
#[expect(clippy::cast_precision_loss, reason = "counters as gauges")]
fn io_counters(c: &mut crate::domain::snapshot::DeviceCounters, io: &gpu_metrics::Io) {
    // 2^-16 J per unit.
    c.energy_uj = io.energy_acc.map(|e| e as f64 * 1e6 / 65536.0);
    c.pcie_width = io.pcie_width.map(u32::from);
    c.pcie_speed_gts = io.pcie_speed.map(|s| f64::from(s) / 10.0);
    c.pcie_bandwidth_mbs = io.pcie_bandwidth_inst.map(|b| b as f64 * 1000.0);
    c.pcie_replay = io.pcie_replay;
    c.pcie_replay_rollover = io.pcie_replay_rollover;
    c.pcie_recovery = io.pcie_recovery;
    c.pcie_nak_sent = io.pcie_nak_sent.map(u64::from);
    c.pcie_nak_received = io.pcie_nak_received.map(u64::from);
    c.xgmi_read_kb.clone_from(&io.xgmi_read_kb);
    c.xgmi_write_kb.clone_from(&io.xgmi_write_kb);
}

/// The mean of a partition's XCCs' busy, none when it has none.
fn mean(xccs: &[f64]) -> Option<f64> {
    #[expect(clippy::cast_precision_loss, reason = "small counts")]
    let n = xccs.len() as f64;
    (!xccs.is_empty()).then(|| xccs.iter().sum::<f64>() / n)
}

/// A partition's GFX busy, per XCC it owns, and where it came from.
fn partition_busy(
    own: Option<&Path>,
    metrics: &Result<GpuMetrics, String>,
    dev: &Path,
    node: Option<&KfdNode>,
    partition: u32,
    buf: &mut Vec<u8>,
) -> (Vec<f64>, String) {
    let per_xcc =
        |x: &XcpStats| -> Vec<f64> { x.gfx_busy_inst.iter().map(|v| f64::from(*v)).collect() };
    if let Some(p) = own
        && read_small(p, buf).is_ok()
        && let Ok(x) = gpu_metrics::parse_xcp(buf)
        && !x.gfx_busy_inst.is_empty()
    {
        return (per_xcc(&x), p.display().to_string());
    }
    match metrics {
        Ok(m) if !m.xcp.is_empty() => (
            m.xcp
                .get(partition as usize)
                .map(per_xcc)
                .unwrap_or_default(),
            format!("{}/gpu_metrics xcp_stats[{partition}]", dev.display()),
        ),
        Ok(m) if !m.xcc_busy.is_empty() => {
            let n = node.map_or(1, |k| k.num_xcc.max(1)) as usize;
            let start = partition as usize * n;
            (
                m.xcc_busy
                    .iter()
                    .skip(start)
                    .take(n)
                    .map(|v| f64::from(*v))
                    .collect(),
                format!(
                    "{}/gpu_metrics v1.9 gfx_busy_inst[{start}..{}]",
                    dev.display(),
                    start + n
                ),
            )
        }
        Ok(_) => (
            Vec::new(),
            format!("{}/gpu_metrics has no per-partition block", dev.display()),
        ),
        Err(e) => (Vec::new(), e.clone()),
    }
}

/// Where `--source` takes its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SourceMode {
    /// The kernel first, every sample (sysfs, KFD, fdinfo); amd-smi beside it on its own
    /// cadence for what only it knows (identity, firmware, partition profiles); amd-smi alone
    /// where the kernel shows no AMD GPU; NVIDIA where there is no amd-smi.
    #[default]
    Auto,
    /// amd-smi only.
    AmdSmi,
    /// The kernel only (no amd-smi: partition changes are unavailable).
    Sysfs,
    /// NVIDIA: NVML, else nvidia-smi (`auto` picks it when there is no amd-smi).
    Nvidia,
}
