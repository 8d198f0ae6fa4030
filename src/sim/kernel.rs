//! The simulated node's kernel twin: the files a real node's kernel shows (`STATE.sys/`), kept
//! current by a small detached process while the node runs. PCI devices with their partition
//! files, `gpu_metrics` v1.8 and hwmon; one `xcp_metrics` per partition behind its render
//! node; the KFD topology (gpu_id, properties, mem_banks, a `generation_id` that moves when the
//! layout is rebuilt); and KFD's per-process files for the workloads, which hold the twin's
//! device files (`STATE.dev/`) open. A repartition or a reload rebuilds the layout as the driver
//! does: during a reload the GPUs vanish, after it the nodes come back renumbered with new
//! gpu_ids. Values come from the same load model as the fake amd-smi, so both interfaces agree.
//!
//! Data flow: state file (modes, workloads) + load model → twin files → partop's kernel reader.

pub mod fdinfo;
pub mod tables;

use super::load::{self, NodeLoad};
use super::rules::Logical;
use super::scenario::Kind;
use super::state::SimState;
use crate::collect::clock;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Environment variable that makes a partop process the twin of the node in this state file.
pub const ENV_STATE: &str = "PARTOP_SIM_KERNEL_STATE";

/// The twin's own note of the layout its tree shows (not a kernel file).
const LAYOUT_FILE: &str = ".twin-layout";

/// How often the twin rewrites the live files (the kernel's tables refresh faster; partop
/// samples at 1 s or slower).
pub const EVERY: Duration = Duration::from_millis(500);

/// Where a node's twin lives.
pub fn root(state_path: &Path) -> PathBuf {
    state_path.with_extension("sys")
}

/// Where a twin writes its workloads' DRM fdinfo (`STATE.fdinfo/PID/fdinfo/FD`).
pub fn fdinfo_root(state_path: &Path) -> PathBuf {
    state_path.with_extension("fdinfo")
}

/// Where a twin keeps its generations (`STATE.sys.d/`).
fn gens_dir(root: &Path) -> PathBuf {
    root.with_extension("sys.d")
}

/// Removes a node's twin (the link and every generation).
pub fn remove(state_path: &Path) {
    let root = root(state_path);
    let _ = std::fs::remove_file(&root);
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(gens_dir(&root));
    let _ = std::fs::remove_file(root.with_extension("sys-link"));
    let _ = std::fs::remove_dir_all(fdinfo_root(state_path));
}

/// The render minor of partition `p` of physical GPU `phys`: the driver steps by 8 per device
/// (seen on a real 8x MI308X CPX node, `fixtures/kfd-real`).
pub const fn render_minor(phys: usize, p: u32) -> u32 {
    128 + 8 * phys as u32 + p
}

/// A KFD gpu_id: the driver derives it from the device and partition and it changes when the
/// layout is rebuilt; here a hash of the serial, partition and layout generation.
/// The simulated VBIOS, in the form an MI300X reports (`113-M3000100-103`).
pub const SIM_VBIOS: &str = "113-M3000100-103";

/// The simulated amdgpu module version (a ROCm 7.0 DKMS driver's form).
pub const SIM_DRIVER: &str = "6.14.14";

fn gpu_id(serial: &str, partition: u32, generation: u64) -> u64 {
    let h = serial.bytes().fold(0u64, |a, b| load::mix(a, u64::from(b)));
    (load::mix(h, u64::from(partition) ^ (generation << 8)) % 65_000) + 500
}

/// Where a partition's device lives in the tree: partition 0 is the PCI device itself; the
/// others are platform devices `amdgpu_xcp_<n>`, numbered across the node in logical GPU order
/// (the captured tree's off-by-one: XCP 1 is `amdgpu_xcp_0`).
fn device_rel(state: &SimState, logical: &[Logical], l: &Logical) -> String {
    if l.shape.partition_id == 0 {
        format!("devices/pci0000:00/{}", state.gpus[l.phys].bdf(0))
    } else {
        let n = logical
            .iter()
            .filter(|x| x.index < l.index && x.shape.partition_id > 0)
            .count();
        format!("devices/platform/amdgpu_xcp_{n}")
    }
}

/// A partition's device name in the tree, the id the device plugin advertises for it: the PCI
/// BDF for partition 0, `amdgpu_xcp_<n>` for the others.
pub fn device_name(state: &SimState, logical: &[Logical], l: &Logical) -> String {
    let rel = device_rel(state, logical, l);
    rel.rsplit('/').next().unwrap_or_default().to_string()
}

/// The twin's writer: what it wrote last, so only a layout change rebuilds the tree.
#[derive(Debug)]
pub struct Twin {
    /// `STATE.sys`: a symbolic link to the current generation's tree, swapped atomically when
    /// the layout is rebuilt, so a reader sees the old layout or the new one, never half.
    root: PathBuf,
    /// The current generation's directory (`STATE.sys.d/gen-N`).
    dir: PathBuf,
    /// What each live file holds now: a file whose value did not change is not written again
    /// (most partitions of a node are idle; the twin is the simulated kernel and should cost
    /// next to nothing beside the monitor it is measured with).
    written: std::collections::HashMap<PathBuf, Vec<u8>>,
    layout: Option<String>,
    generation: u64,
    pids: BTreeSet<u32>,
    /// Energy each device has used, joules, and the time of the last sample (the SMU's
    /// accumulator only grows).
    energy_j: Vec<f64>,
    last_t: Option<f64>,
    /// The generation being built, while a layout change writes it.
    building: Option<Building>,
}

fn io_err(p: &Path, e: &std::io::Error) -> String {
    format!("{}: {e}", p.display())
}

/// The generation being built, not yet visible to readers (`STATE.sys` still points at the
/// last one), and the directories already made in it: its files are written in place, each
/// directory made once, so a layout change costs a fraction of the system calls.
#[derive(Debug)]
struct Building {
    dir: PathBuf,
    made: std::collections::HashSet<PathBuf>,
}

impl Building {
    /// Writes `bytes` in place when `p` is inside the generation being built; `Some(result)`,
    /// or None when `p` is in the published tree (readers may be inside it: written
    /// atomically).
    fn put_fresh(&mut self, p: &Path, bytes: &[u8]) -> Option<Result<(), String>> {
        if !p.starts_with(self.dir.as_path()) {
            return None;
        }
        Some((|| {
            if let Some(d) = p.parent()
                && !self.made.contains(d)
            {
                std::fs::create_dir_all(d).map_err(|e| io_err(d, &e))?;
                self.made.insert(d.to_path_buf());
            }
            // A fresh file in a fresh directory: made with O_EXCL, never through a link.
            crate::exec::safe_file::create_new(p)
                .and_then(|mut f| std::io::Write::write_all(&mut f, bytes))
                .map_err(|e| io_err(p, &e))
        })())
    }
}

fn link(target: &str, at: &Path) -> Result<(), String> {
    if let Some(d) = at.parent() {
        std::fs::create_dir_all(d).map_err(|e| io_err(d, &e))?;
    }
    let _ = std::fs::remove_file(at);
    std::os::unix::fs::symlink(target, at).map_err(|e| io_err(at, &e))
}

impl Twin {
    /// Writes a file as the kernel presents it: whole, never half (in place inside the
    /// generation being built, else temp file + rename).
    fn put(&mut self, p: &Path, bytes: &[u8]) -> Result<(), String> {
        if let Some(r) = self.building.as_mut().and_then(|b| b.put_fresh(p, bytes)) {
            return r;
        }
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).map_err(|e| io_err(d, &e))?;
        }
        crate::exec::safe_file::replace(p, bytes).map_err(|e| e.to_string())
    }

    fn put_text(&mut self, p: &Path, s: &str) -> Result<(), String> {
        self.put(p, format!("{s}\n").as_bytes())
    }

    /// A writer for the tree under `root`, continuing the generation it finds there.
    pub fn new(root: PathBuf) -> Self {
        let dir = std::fs::read_link(&root)
            .map(|t| root.parent().map_or_else(|| t.clone(), |p| p.join(&t)))
            .unwrap_or_else(|_| root.clone());
        let generation = std::fs::read_to_string(root.join("class/kfd/kfd/topology/generation_id"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        // The layout the tree was last built for: a twin taking over a current tree (the process
        // `sim start` launches, after writing it once) does not tear it down and rebuild it
        // under a reader's feet.
        let layout = std::fs::read_to_string(dir.join(LAYOUT_FILE)).ok();
        Self {
            root,
            dir,
            written: std::collections::HashMap::new(),
            layout,
            generation,
            pids: BTreeSet::new(),
            energy_j: Vec::new(),
            last_t: None,
            building: None,
        }
    }

    /// Writes a live file unless it already holds `bytes`.
    fn put_live(&mut self, p: PathBuf, bytes: Vec<u8>) -> Result<(), String> {
        if self.written.get(&p) == Some(&bytes) {
            return Ok(());
        }
        self.put(&p, &bytes)?;
        self.written.insert(p, bytes);
        Ok(())
    }

    fn put_live_text(&mut self, p: PathBuf, s: &str) -> Result<(), String> {
        self.put_live(p, format!("{s}\n").into_bytes())
    }

    /// The topology generation last written.
    pub const fn generation(&self) -> u64 {
        self.generation
    }

    fn pci_dir(&self, bdf: &str) -> PathBuf {
        self.dir.join("devices/pci0000:00").join(bdf)
    }

    /// Brings the tree up to date with `state` at `now_ms`; true when the layout was rebuilt.
    pub fn refresh(&mut self, state: &SimState, now_ms: u64) -> Result<bool, String> {
        let logical = state.logical();
        let key = format!(
            "{:?}|{}",
            state
                .gpus
                .iter()
                .map(|g| (g.modes.compute, g.modes.memory))
                .collect::<Vec<_>>(),
            state.reloading.is_some()
        );
        let relaid = self.layout.as_deref() != Some(key.as_str());
        if relaid {
            self.rebuild(state, &logical)?;
        }
        if state.reloading.is_none() {
            let t = load::elapsed(state, now_ms);
            let ld = load::node_load(state, &logical, t);
            self.live(state, &logical, &ld, t)?;
        }
        self.processes(state, &logical, now_ms)?;
        if relaid {
            self.put(&self.dir.join(LAYOUT_FILE), key.as_bytes())?;
            self.building = None;
            self.swap()?;
            self.layout = Some(key);
        }
        Ok(relaid)
    }

    /// Points `STATE.sys` at the new generation (one rename: atomic for readers) and removes
    /// generations older than the one just replaced (a reader may still be inside it).
    fn swap(&self) -> Result<(), String> {
        let name = self
            .dir
            .strip_prefix(self.root.parent().unwrap_or(Path::new("/")))
            .map_or_else(|_| self.dir.clone(), Path::to_path_buf);
        let tmp = self.root.with_extension("sys-link");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&name, &tmp).map_err(|e| io_err(&tmp, &e))?;
        if std::fs::symlink_metadata(&self.root).is_ok_and(|m| m.is_dir()) {
            // A tree from before generations were kept apart.
            let _ = std::fs::remove_dir_all(&self.root);
        }
        std::fs::rename(&tmp, &self.root).map_err(|e| io_err(&self.root, &e))
    }

    /// Removes generations older than the one just replaced (a reader may still be inside
    /// that one). Done after the new one is published: nobody waits for it.
    pub fn prune(&self) {
        let keep = self.generation.saturating_sub(1);
        if let Some(gens) = self.dir.parent()
            && let Ok(entries) = std::fs::read_dir(gens)
        {
            for e in entries.flatten() {
                if e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("gen-"))
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|g| g < keep)
                {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }

    /// Rewrites the layout: PCI partition files, partition devices, render nodes, KFD nodes.
    fn rebuild(&mut self, state: &SimState, logical: &[Logical]) -> Result<(), String> {
        let prod = state.product();
        let reloading = state.reloading.is_some();
        // Each layout is a new tree, as the driver builds one on load; it replaces the old one
        // in one step (`swap`).
        self.generation += 1;
        self.written.clear();
        self.dir = gens_dir(&self.root).join(format!("gen-{}", self.generation));
        let _ = std::fs::remove_dir_all(&self.dir);
        self.building = Some(Building {
            dir: self.dir.clone(),
            made: std::collections::HashSet::new(),
        });
        self.pids.clear();
        let topo = self.dir.join("class/kfd/kfd/topology");
        self.put_text(
            &topo.join("system_properties"),
            "platform_oem 0\nplatform_id 0\nplatform_rev 0",
        )?;
        self.put_text(&topo.join("nodes/0/gpu_id"), "0")?;
        self.put_text(
            &topo.join("nodes/0/properties"),
            "cpu_cores_count 96\nsimd_count 0\nmem_banks_count 1\nlocation_id 0\ndrm_render_minor 0\ndomain 0",
        )?;
        std::fs::create_dir_all(self.dir.join("class/kfd/kfd/proc"))
            .map_err(|e| io_err(&self.dir, &e))?;
        // The DKMS driver's module version (what DME's `driver_version` carries).
        self.put_text(&self.dir.join("module/amdgpu/version"), SIM_DRIVER)?;
        for (phys, g) in state.gpus.iter().enumerate() {
            let bdf = g.bdf(0);
            let dir = self.pci_dir(&bdf);
            let _ = std::fs::create_dir_all(&dir);
            link(
                &format!("../../../devices/pci0000:00/{bdf}"),
                &self.dir.join("bus/pci/devices").join(&bdf),
            )?;
            self.put_text(&dir.join("vendor"), "0x1002")?;
            self.put_text(&dir.join("device"), prod.device_id)?;
            self.put_text(&dir.join("class"), "0x120000")?;
            let part_files = [
                "current_compute_partition",
                "current_memory_partition",
                "available_compute_partition",
                "available_memory_partition",
                "mem_info_vram_total",
                "mem_info_vram_used",
                "gpu_metrics",
                "unique_id",
                "vbios_version",
                "max_link_speed",
            ];
            if reloading {
                // The driver is unbound: its attributes are gone, the PCI device stays.
                for f in part_files {
                    let _ = std::fs::remove_file(dir.join(f));
                }
                let _ = std::fs::remove_dir_all(dir.join("xcp"));
                let _ = std::fs::remove_dir_all(dir.join("hwmon"));
                let _ = std::fs::remove_dir_all(dir.join("ras"));
                continue;
            }
            self.put_text(
                &dir.join("current_compute_partition"),
                &g.modes.compute.to_string(),
            )?;
            self.put_text(
                &dir.join("current_memory_partition"),
                &g.modes.memory.to_string(),
            )?;
            let compute: Vec<String> = prod
                .profiles
                .iter()
                .filter(|p| p.memory.contains(&g.modes.memory))
                .map(|p| p.compute.to_string())
                .collect();
            self.put_text(
                &dir.join("available_compute_partition"),
                &compute.join(", "),
            )?;
            let memory: Vec<String> = super::rules::memory_caps(&prod)
                .iter()
                .map(ToString::to_string)
                .collect();
            self.put_text(&dir.join("available_memory_partition"), &memory.join(", "))?;
            self.put_text(
                &dir.join("mem_info_vram_total"),
                &(prod.vram_mb << 20).to_string(),
            )?;
            self.put_text(
                &dir.join("unique_id"),
                &g.serial.trim_start_matches("0x").to_ascii_lowercase(),
            )?;
            self.put_text(&dir.join("vbios_version"), SIM_VBIOS)?;
            self.put_text(&dir.join("max_link_speed"), "32.0 GT/s PCIe")?;
            // RAS on, no errors: the format of amdgpu_ras_sysfs_read.
            self.put_text(&dir.join("ras/umc_err_count"), "ue: 0\nce: 0")?;
            let hw = dir.join(format!("hwmon/hwmon{phys}"));
            self.put_text(&hw.join("name"), "amdgpu")?;
            self.put_text(
                &hw.join("power1_cap"),
                &(u64::from(prod.power_cap_w) * 1_000_000).to_string(),
            )?;
            for l in logical.iter().filter(|l| l.phys == phys) {
                let p = l.shape.partition_id;
                let minor = render_minor(phys, p);
                let rel = device_rel(state, logical, l);
                let _ = std::fs::create_dir_all(self.dir.join(&rel));
                let dev_dir = format!("../../../{rel}");
                link(
                    &dev_dir,
                    &self.dir.join(format!("class/drm/renderD{minor}/device")),
                )?;
                let id = gpu_id(&g.serial, p, self.generation);
                let node = topo.join(format!("nodes/{}", l.index + 1));
                self.put_text(&node.join("gpu_id"), &id.to_string())?;
                self.put_text(&node.join("name"), "ip discovery")?;
                let bus = u32::from_str_radix(&g.bus, 16).unwrap_or(0);
                let device_id =
                    u32::from_str_radix(prod.device_id.trim_start_matches("0x"), 16).unwrap_or(0);
                self.put_text(
                    &node.join("properties"),
                    &format!(
                        "cpu_cores_count 0\nsimd_count {}\nmem_banks_count 1\ncaches_count 0\nio_links_count 1\ncpu_core_id_base 0\nsimd_id_base 2147487744\nmax_waves_per_simd 8\nlds_size_in_kb 64\ngds_size_in_kb 0\nnum_gws 64\nwave_front_size 64\narray_count {}\nsimd_arrays_per_engine 1\ncu_per_simd_array {}\nsimd_per_cu 4\nmax_slots_scratch_cu 32\ngfx_target_version 90402\nvendor_id 4098\ndevice_id {device_id}\nlocation_id {}\ndomain 0\ndrm_render_minor {minor}\nhive_id 0\nnum_sdma_engines 2\nnum_sdma_xgmi_engines 6\nnum_xcc {}\nunique_id {}",
                        l.shape.cus * 4,
                        l.shape.xcds.len() * 4,
                        prod.cus_per_xcd,
                        (bus << 8) | p,
                        l.shape.xcds.len(),
                        gpu_id(&g.serial, 100 + p, 0),
                    ),
                )?;
                self.put_text(
                    &node.join("mem_banks/0/properties"),
                    &format!(
                        "heap_type 1\nsize_in_bytes {}\nflags 0\nwidth 8192\nmem_clk_max 1300",
                        l.shape.vram_share_mb << 20
                    ),
                )?;
            }
        }
        self.put_text(&topo.join("generation_id"), &self.generation.to_string())?;
        Ok(())
    }

    /// The live files: `gpu_metrics`, each `xcp_metrics`, hwmon, VRAM in use.
    fn live(
        &mut self,
        state: &SimState,
        logical: &[Logical],
        ld: &NodeLoad,
        t: f64,
    ) -> Result<(), String> {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "percent and counters, non-negative and small"
        )]
        let part = |l: &Logical| {
            let busy = ld.busy[l.index as usize];
            tables::PartitionLoad {
                gfx_busy: vec![busy as u32; l.shape.xcds.len().max(1)],
                gfx_busy_acc: vec![(busy * t * 10.0) as u64; l.shape.xcds.len().max(1)],
                gfxclk: if busy > 0.0 { 2100 } else { 145 },
            }
        };
        let dt = self.last_t.map_or(0.0, |l| (t - l).max(0.0));
        self.last_t = Some(t);
        self.energy_j.resize(state.gpus.len(), 0.0);
        for (e, d) in self.energy_j.iter_mut().zip(&ld.device) {
            *e += d.power.max(0.0) * dt;
        }
        let energy = self.energy_j.clone();
        for (phys, g) in state.gpus.iter().enumerate() {
            let dir = self.pci_dir(&g.bdf(0));
            let dev = ld.device[phys];
            let mine: Vec<&Logical> = logical.iter().filter(|l| l.phys == phys).collect();
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "sensor values, non-negative and small"
            )]
            let table = tables::DeviceTable {
                hotspot: dev.hotspot as u16,
                mem_temp: dev.mem_temp as u16,
                power: dev.power as u16,
                gfx_activity: dev.busy.round() as u16,
                umc_activity: dev.umc as u16,
                uclk: 1300,
                energy: (energy[phys] * 65536.0) as u64,
                // Host traffic and peer traffic follow the device's busy.
                pcie_gbs: (dev.busy / 10.0) as u64,
                xgmi_kb: [((energy[phys] * 64.0) as u64, (energy[phys] * 32.0) as u64); 8],
                partitions: mine.iter().copied().map(part).collect(),
            };
            self.put_live(dir.join("gpu_metrics"), tables::gpu_metrics_v1_8(&table))?;
            for l in &mine {
                self.put_live(
                    self.dir
                        .join(device_rel(state, logical, l))
                        .join("xcp/xcp_metrics"),
                    tables::xcp_metrics_v1_0(&part(l)),
                )?;
            }
            let hw = dir.join(format!("hwmon/hwmon{phys}"));
            #[expect(
                clippy::cast_possible_truncation,
                reason = "sensor values in milli-units"
            )]
            let milli = |v: f64, scale: f64| format!("{}", (v * scale) as i64);
            self.put_live_text(hw.join("temp2_input"), &milli(dev.hotspot, 1000.0))?;
            self.put_live_text(hw.join("temp3_input"), &milli(dev.mem_temp, 1000.0))?;
            self.put_live_text(hw.join("power1_input"), &milli(dev.power, 1e6))?;
            self.put_live_text(hw.join("power1_average"), &milli(dev.power, 1e6))?;
            let used: u64 = mine.iter().map(|l| ld.vram[l.index as usize]).sum();
            self.put_live_text(dir.join("mem_info_vram_used"), &used.to_string())?;
        }
        Ok(())
    }

    fn fdinfo_dir(&self) -> PathBuf {
        self.root.with_extension("fdinfo")
    }

    /// The DRM fdinfo of each render-node fd workload `pid` holds open: the kernel's own lines
    /// of that fd, then what amdgpu would print for a ROCm client of `pdev` holding `vram`
    /// (its KFD allocations are in the render fd's VM; its compute is not counted there).
    fn drm_fdinfo(&mut self, pid: u32, pdev: &str, vram: u64) -> Result<(), String> {
        let render = self.root.with_extension("dev").join("dri/renderD");
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let Ok(fds) = std::fs::read_dir(proc.join("fd")) else {
            return Ok(());
        };
        for e in fds.flatten() {
            let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(target) = std::fs::read_link(e.path()) else {
                continue;
            };
            if !target
                .as_os_str()
                .as_encoded_bytes()
                .starts_with(render.as_os_str().as_encoded_bytes())
            {
                continue;
            }
            let mut buf = Vec::new();
            let header =
                crate::collect::small_file::proc_read(&proc.join(format!("fdinfo/{fd}")), &mut buf)
                    .map(|()| {
                        String::from_utf8_lossy(&buf)
                            .lines()
                            .take(4)
                            .map(|l| format!("{l}\n"))
                            .collect::<String>()
                    })
                    .unwrap_or_default();
            let c = fdinfo::DrmClient {
                client_id: u64::from(pid) * 64 + u64::from(fd),
                pdev: pdev.to_string(),
                pasid: 32_768 + pid % 32_768,
                vram,
                gtt: 2 << 20,
                engines: Vec::new(),
            };
            let p = self.fdinfo_dir().join(format!("{pid}/fdinfo/{fd}"));
            self.put_live(p, fdinfo::text(&header, &c).into_bytes())?;
        }
        Ok(())
    }

    /// KFD's per-process files: one directory per live workload (agents too: they opened
    /// /dev/kfd), with VRAM, SDMA time and CU occupancy for the GPU it computes on.
    fn processes(
        &mut self,
        state: &SimState,
        logical: &[Logical],
        now_ms: u64,
    ) -> Result<(), String> {
        let dir = self.dir.join("class/kfd/kfd/proc");
        let t = load::elapsed(state, now_ms);
        let mut now = BTreeSet::new();
        if state.reloading.is_none() {
            for (i, w) in state.workloads.iter().enumerate() {
                let Some(pid) = w.pid.filter(|_| state.alive(i)) else {
                    continue;
                };
                now.insert(pid);
                let pdir = dir.join(pid.to_string());
                self.put_live_text(pdir.join("pasid"), "0")?;
                if w.spec.kind == Kind::Agent {
                    continue;
                }
                let Some(ix) = state.placement_index(i) else {
                    continue;
                };
                let Some(l) = logical.iter().find(|l| l.index == ix) else {
                    continue;
                };
                let id = gpu_id(
                    &state.gpus[l.phys].serial,
                    l.shape.partition_id,
                    self.generation,
                );
                let busy = load::busy(state, i, t);
                let vram = load::vram(state, i, t);
                self.put_live_text(pdir.join(format!("vram_{id}")), &vram.to_string())?;
                self.drm_fdinfo(pid, &state.gpus[l.phys].bdf(0), vram)?;
                #[expect(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "microseconds and CUs, non-negative"
                )]
                {
                    self.put_live_text(
                        pdir.join(format!("sdma_{id}")),
                        &((t * 1e6 * busy / 400.0) as u64).to_string(),
                    )?;
                    self.put_live_text(
                        pdir.join(format!("stats_{id}/cu_occupancy")),
                        &((busy / 100.0 * f64::from(l.shape.cus)).round() as u32).to_string(),
                    )?;
                }
            }
        }
        for gone in self.pids.difference(&now) {
            for d in [
                dir.join(gone.to_string()),
                self.fdinfo_dir().join(gone.to_string()),
            ] {
                let _ = std::fs::remove_dir_all(&d);
                // A pid can come back: what was written under it is gone from disk.
                self.written.retain(|k, _| !k.starts_with(&d));
            }
        }
        // A restarted twin does not know what the last one wrote: clear strangers once.
        if self.pids.is_empty()
            && let Ok(entries) = std::fs::read_dir(&dir)
        {
            for e in entries.flatten() {
                if e.file_name()
                    .to_str()
                    .and_then(|s| s.parse::<u32>().ok())
                    .is_some_and(|p| !now.contains(&p))
                {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        self.pids = now;
        Ok(())
    }
}

/// If this process was started as a node's kernel twin, runs it and returns its exit status.
pub fn from_env() -> Option<i32> {
    let state = std::env::var_os(ENV_STATE)?;
    run(Path::new(&state));
    Some(0)
}

/// The twin's loop: settles a reload whose time has come (nobody else may be calling amd-smi
/// now that partop reads the kernel), refreshes the files, and ends when the node is stopped
/// (its state file gone, or another twin recorded in it).
pub fn run(state_path: &Path) {
    let mut twin = Twin::new(root(state_path));
    let me = std::process::id();
    let mut kubelet_served = false;
    loop {
        let loaded_at = clock::now_ms();
        let mut state = match SimState::load(state_path) {
            Ok(s) => s,
            Err(e) => return say_why(&format!("the node's state is unreadable ({e}): stopped")),
        };
        if let Some(t) = state.twin.as_ref().filter(|t| t.pid != me) {
            return say_why(&format!(
                "another twin (pid {}) serves this node: stopped",
                t.pid
            ));
        }
        // A `--sim` node whose partop died without cleaning up (SIGKILL, a crash): the twin
        // does what its exit would have done, so no workload or file outlives it. It steps out
        // of the state first, so stopping the node does not signal the twin itself.
        if let Some(o) = state.owner
            && super::state::process_start(o.pid) != o.start_ticks
        {
            // A repartition still running on it needs the node: it is kept, owned by nobody,
            // as `partop --sim` keeps it when it quits during one (`partop sim stop` ends it).
            if crate::exec::lock::holder(&crate::exec::lock::sim_path(state_path)).is_some() {
                let _ = SimState::update(state_path, |s| {
                    s.owner = None;
                    Ok(())
                });
                continue;
            }
            let _ = SimState::update(state_path, |s| {
                s.twin = None;
                Ok(())
            });
            super::session::discard(state_path);
            return say_why(&format!(
                "the node's owner (pid {}) is gone: node stopped",
                o.pid
            ));
        }
        if state.kubernetes.is_some() && !kubelet_served {
            kubelet_served = true;
            if let Err(e) = super::kubelet::serve(state_path) {
                #[expect(clippy::print_stderr, reason = "the twin's log")]
                {
                    eprintln!("kubelet twin: {e}");
                }
            }
            // A node that joins an API server runs its node agent beside PodResources.
            if state.kubernetes.as_ref().is_some_and(|k| k.api.is_some())
                && let Err(e) = super::kubelet::join(state_path)
            {
                #[expect(clippy::print_stderr, reason = "the twin's log")]
                {
                    eprintln!("kubelet twin: cannot join the API server: {e}");
                }
            }
        }
        let now = clock::now_ms();
        if state.reloading.is_some_and(|r| now >= r.until_ms) {
            match SimState::update(state_path, |s| {
                s.settle(now);
                Ok(s.clone())
            }) {
                Ok(s) => state = s,
                Err(e) => return say_why(&format!("could not settle the reload ({e}): stopped")),
            }
        }
        if let Err(e) = twin.refresh(&state, now) {
            // Its log file is the twin's stderr (beside the workloads' logs).
            #[expect(clippy::print_stderr, reason = "the twin's log")]
            {
                eprintln!("kernel twin: {e}");
            }
        } else {
            let _ = std::fs::write(published_path(state_path), loaded_at.to_string());
            twin.prune();
        }
        // The files follow a change of the node at once, as the kernel's do: a changed state
        // file ends the wait early.
        let seen = modified(state_path);
        let until = std::time::Instant::now() + EVERY;
        while std::time::Instant::now() < until && modified(state_path) == seen {
            std::thread::sleep(WATCH);
        }
    }
}

/// Says in the twin's log why it stopped (its stderr is `kernel-twin.log` beside the workloads'
/// logs): a twin that ends leaves the kernel files frozen, and whoever reads them needs to know.
fn say_why(why: &str) {
    #[expect(clippy::print_stderr, reason = "the twin's log")]
    {
        eprintln!("kernel twin: {why}");
    }
}

/// How often the twin looks for a change of its node between refreshes.
const WATCH: Duration = Duration::from_millis(25);

fn modified(p: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Where the twin says which state it last published (the time it read it, ms).
fn published_path(state_path: &Path) -> PathBuf {
    gens_dir(&root(state_path)).join("published_ms")
}

/// Waits until the node's twin has published a state it began reading after `since_ms` (the
/// end of this command's last write): the fake amd-smi returns from a change only once the
/// kernel files show it, as the real driver's do when amd-smi returns. A loaded machine can
/// hold the twin up for many seconds, and returning earlier would let a reader see the old
/// layout after amd-smi said it changed (CI saw a plan made from such files); so the wait lasts
/// as long as the twin lives, with a long bound only for a twin that is alive but stuck. No
/// twin running (the node's workloads were stopped with `sim stop`, or the twin died): this
/// command writes the kernel files itself, so they follow the change at once as the docs say
/// (they once stayed at the old layout for ever while amd-smi reported the new one).
pub fn await_published(state_path: &Path, since_ms: u64) {
    let Some(t) = SimState::load(state_path).ok().and_then(|s| s.twin) else {
        publish_now(state_path);
        return;
    };
    let end = std::time::Instant::now() + STUCK;
    while std::time::Instant::now() < end {
        if super::state::process_start(t.pid) != t.start_ticks {
            publish_now(state_path);
            return;
        }
        let published = std::fs::read_to_string(published_path(state_path))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(0);
        // Strictly after: a read begun in the same millisecond as the write may predate it.
        if published > since_ms {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes the node's kernel files from its state now, in place of a twin that is not running.
fn publish_now(state_path: &Path) {
    if let Ok(state) = SimState::load(state_path) {
        let _ = Twin::new(root(state_path)).refresh(&state, clock::now_ms());
    }
}

/// How long amd-smi waits for a twin that lives but does not publish (stopped with SIGSTOP, a
/// machine thrashing): past it, the command returns and the files lag, as they would.
const STUCK: Duration = Duration::from_secs(120);
