//! The simulated node's state file: modes, pending changes, workloads and their PIDs. Written
//! atomically (temp file + rename) so a concurrent reader never sees half a file; read by every
//! fake amd-smi call. Liveness of workloads is checked against /proc (pid + start time), so a
//! killed workload stops holding its GPU at once, exactly as on a real node.

use super::rules::{GpuModes, Logical, enumerate};
use super::scenario::{Kind, Scenario, WorkloadSpec};
use crate::domain::product::{self, Product};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Buses of the 8 OAM GPUs on a real MI300X node (ROCm/amdsmi#132), extended for larger nodes.
const BUSES: [&str; 16] = [
    "05", "26", "46", "65", "85", "a6", "c6", "e5", "0d", "2e", "4e", "6d", "8d", "ae", "ce", "ed",
];
const OAM: [u32; 16] = [7, 6, 4, 5, 3, 2, 0, 1, 15, 14, 12, 13, 11, 10, 8, 9];

/// One physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimGpu {
    /// PCI bus (`05`).
    pub bus: String,
    /// OAM slot.
    pub oam_id: u32,
    /// Serial (`0xAF54E92B0A5D57C8`).
    pub serial: String,
    /// Modes.
    #[serde(flatten)]
    pub modes: GpuModes,
}

impl SimGpu {
    /// BDF of partition `p` (`0000:05:00.1`).
    pub fn bdf(&self, p: u32) -> String {
        format!("0000:{}:00.{p}", self.bus)
    }
}

/// One workload and its process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimWorkload {
    /// What it is.
    pub spec: WorkloadSpec,
    /// Its PID while started.
    #[serde(default)]
    pub pid: Option<u32>,
    /// Its start time in clock ticks since boot (/proc/PID/stat field 22), to detect PID reuse.
    #[serde(default)]
    pub start_ticks: Option<u64>,
    /// Its HTTP port (model servers).
    #[serde(default)]
    pub port: u16,
    /// When it was started (ms since epoch).
    #[serde(default)]
    pub started_ms: u64,
    /// The pod of the API server it runs (a pod bound to the node and started by the kubelet
    /// twin); None for the scenario's own workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<super::kubelet::SimPod>,
}

/// A reload in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloading {
    /// When it completes (ms since epoch).
    pub until_ms: u64,
}

/// The whole node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimState {
    /// File format version.
    pub format: u32,
    /// Scenario name.
    pub scenario: String,
    /// Product key.
    pub product: String,
    /// ROCm version emulated.
    pub rocm: String,
    /// Load seed.
    pub seed: u64,
    /// When the scenario started (the load's time origin).
    pub started_ms: u64,
    /// Seconds a reload takes.
    pub reload_secs: f64,
    /// Physical GPUs.
    pub gpus: Vec<SimGpu>,
    /// Workloads.
    pub workloads: Vec<SimWorkload>,
    /// A reload in progress.
    #[serde(default)]
    pub reloading: Option<Reloading>,
    /// Where workloads log.
    pub log_dir: PathBuf,
    /// Seconds a model server takes to load before `/health` answers 200.
    #[serde(default = "default_model_load")]
    pub model_load_secs: f64,
    /// Simulated time against real time (the scenario's `time_scale`): reloads and model
    /// loads are already scaled by it; an apply on this node scales its waits by it.
    #[serde(default = "super::scenario::default_time_scale")]
    pub time_scale: f64,
    /// Reloads still to fail (fault injection from the scenario).
    #[serde(default)]
    pub fail_reloads: u32,
    /// What each fake amd-smi call costs.
    #[serde(default)]
    pub amd_smi_cost: super::cost::AmdSmiCost,
    /// The kernel twin's process, while the node runs.
    #[serde(default)]
    pub twin: Option<TwinProc>,
    /// The partop that started this node for itself (`--sim`): when it is gone, so is the
    /// node's twin.
    #[serde(default)]
    pub owner: Option<TwinProc>,
    /// The kubelet twin, where the node is a Kubernetes node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<super::kubelet::SimKube>,
}

/// The process keeping the kernel twin current.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwinProc {
    /// Its pid.
    pub pid: u32,
    /// Its start time (clock ticks since boot), against pid reuse.
    pub start_ticks: Option<u64>,
}

const fn default_model_load() -> f64 {
    1.0
}

/// A state-file problem, with the way out.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// No file.
    #[error(
        "simulator state {path} does not exist; start a node with `partop sim start SCENARIO --state {path}`"
    )]
    Missing {
        /// Path.
        path: String,
    },
    /// Unreadable or corrupt.
    #[error(
        "simulator state {path} is unreadable ({error}); remove it and run `partop sim start SCENARIO --state {path}`"
    )]
    Corrupt {
        /// Path.
        path: String,
        /// Why.
        error: String,
    },
    /// Unknown product.
    #[error("simulator state names unknown product {0:?}")]
    Product(String),
    /// Write failed.
    #[error("cannot write simulator state {path}: {error}")]
    Write {
        /// Path.
        path: String,
        /// Why.
        error: String,
    },
}

/// Deterministic serial per GPU.
fn serial(seed: u64, i: usize) -> String {
    let x = super::load::mix(seed ^ 0x5eed, i as u64);
    format!("0x{x:016X}")
}

impl SimState {
    /// A fresh node from a scenario (workloads not started).
    pub fn from_scenario(s: &Scenario, seed: u64, log_dir: PathBuf, now_ms: u64) -> Self {
        let gpus = (0..s.gpus as usize)
            .map(|i| SimGpu {
                bus: BUSES[i % BUSES.len()].to_string(),
                oam_id: OAM[i % OAM.len()],
                serial: serial(seed, i),
                modes: GpuModes {
                    compute: s.compute,
                    memory: s.memory,
                    pending_memory: None,
                },
            })
            .collect();
        let workloads = s
            .workloads
            .iter()
            .map(|w| SimWorkload {
                spec: w.clone(),
                pid: None,
                start_ticks: None,
                port: w.port,
                started_ms: 0,
                pod: None,
            })
            .collect();
        Self {
            format: 1,
            scenario: s.name.clone(),
            product: s.product.clone(),
            rocm: s.rocm.clone(),
            seed,
            started_ms: now_ms,
            reload_secs: s.reload_secs * s.time_scale,
            gpus,
            workloads,
            reloading: None,
            log_dir,
            model_load_secs: default_model_load() * s.time_scale,
            time_scale: s.time_scale,
            fail_reloads: s.fail_reloads,
            amd_smi_cost: s.amd_smi_cost.from_env(),
            twin: None,
            owner: None,
            kubernetes: None,
        }
        .with_kubernetes(s.kubernetes.clone())
    }

    /// The node as a Kubernetes node (`spec`), its device plugin registered as it is now.
    pub fn with_kubernetes(mut self, spec: Option<super::kubelet::KubeSpec>) -> Self {
        self.kubernetes = spec.map(|k| super::kubelet::SimKube::new(k, &self));
        self
    }

    /// Reads a state file.
    pub fn load(path: &Path) -> Result<Self, StateError> {
        let p = path.display().to_string();
        let text = crate::collect::small_file::operator_text(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                StateError::Missing { path: p.clone() }
            } else {
                StateError::Corrupt {
                    path: p.clone(),
                    error: e.to_string(),
                }
            }
        })?;
        let s: Self = serde_json::from_str(&text).map_err(|e| StateError::Corrupt {
            path: p.clone(),
            error: e.to_string(),
        })?;
        if product::by_key(&s.product).is_none() {
            return Err(StateError::Product(s.product));
        }
        Ok(s)
    }

    /// Reads, changes and writes the state under an exclusive lock (`STATE.lock`), so processes
    /// that change it at the same time (model servers registering, the fake amd-smi) do not
    /// lose each other's changes.
    pub fn update<T>(
        path: &Path,
        f: impl FnOnce(&mut Self) -> Result<T, StateError>,
    ) -> Result<T, StateError> {
        let lock_path = path.with_extension("lock");
        let file =
            crate::exec::safe_file::open_rw(&lock_path, true).map_err(|e| StateError::Write {
                path: lock_path.display().to_string(),
                error: e.to_string(),
            })?;
        let _lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(
            |(_, e)| StateError::Write {
                path: lock_path.display().to_string(),
                error: e.to_string(),
            },
        )?;
        let mut state = Self::load(path)?;
        let out = f(&mut state)?;
        state.save(path)?;
        Ok(out)
    }

    /// Writes what the driver owns (the GPUs' modes, a reload under way, reload faults) into
    /// the state under its lock, leaving what others own (workloads registering, the twin)
    /// as they wrote it: the fake amd-smi read the state before it acted, and a whole-file
    /// write of that copy would undo a change made meanwhile.
    pub fn save_driver(&self, path: &Path) -> Result<(), StateError> {
        Self::update(path, |s| {
            s.gpus.clone_from(&self.gpus);
            s.reloading = self.reloading;
            s.fail_reloads = self.fail_reloads;
            Ok(())
        })
    }

    /// Writes atomically.
    pub fn save(&self, path: &Path) -> Result<(), StateError> {
        let err = |e: std::io::Error| StateError::Write {
            path: path.display().to_string(),
            error: e.to_string(),
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| StateError::Write {
            path: path.display().to_string(),
            error: e.to_string(),
        })?;
        crate::exec::safe_file::replace(path, text.as_bytes()).map_err(err)
    }

    /// The product.
    pub fn product(&self) -> Product {
        // INVARIANT: checked in `load` and by scenario validation.
        product::by_key(&self.product).unwrap_or_else(|| product::all().remove(0))
    }

    /// The modes of every GPU.
    pub fn modes(&self) -> Vec<GpuModes> {
        self.gpus.iter().map(|g| g.modes.clone()).collect()
    }

    /// Writes modes back.
    pub fn set_modes(&mut self, modes: Vec<GpuModes>) {
        for (g, m) in self.gpus.iter_mut().zip(modes) {
            g.modes = m;
        }
    }

    /// Logical GPUs, numbered.
    pub fn logical(&self) -> Vec<Logical> {
        enumerate(&self.product(), &self.modes())
    }

    /// Whether workload `i`'s process is alive (same pid and start time, not a zombie).
    pub fn alive(&self, i: usize) -> bool {
        let Some(w) = self.workloads.get(i) else {
            return false;
        };
        let (Some(pid), Some(ticks)) = (w.pid, w.start_ticks) else {
            return false;
        };
        process_start(pid).is_some_and(|t| t == ticks)
    }

    /// The physical GPUs a live workload holds (`None` = every GPU, for agents on /dev/kfd).
    pub fn holds(&self, i: usize) -> Option<Option<usize>> {
        let w = self.workloads.get(i)?;
        if !self.alive(i) {
            return None;
        }
        Some(if w.spec.kind == Kind::Agent {
            None
        } else {
            Some(w.spec.gpu as usize)
        })
    }

    /// Whether anything holds physical GPU `phys`.
    pub fn is_held(&self, phys: usize) -> bool {
        (0..self.workloads.len())
            .any(|i| matches!(self.holds(i), Some(None)) || self.holds(i) == Some(Some(phys)))
    }

    /// Whether anything holds any GPU.
    pub fn any_held(&self) -> bool {
        (0..self.workloads.len()).any(|i| self.holds(i).is_some())
    }

    /// Names of live holders (for messages).
    pub fn holder_names(&self) -> Vec<String> {
        (0..self.workloads.len())
            .filter(|i| self.alive(*i))
            .map(|i| {
                let w = &self.workloads[i];
                format!("{} (pid {})", w.spec.name, w.pid.unwrap_or(0))
            })
            .collect()
    }

    /// Completes a reload whose time has passed (a reload survives its CLI being killed).
    pub fn settle(&mut self, now_ms: u64) -> bool {
        if let Some(r) = self.reloading
            && now_ms >= r.until_ms
        {
            self.reloading = None;
            let mut modes = self.modes();
            // Holders were checked when the reload started.
            let _ = super::rules::reload(&self.product(), &mut modes, false);
            self.set_modes(modes);
            return true;
        }
        false
    }

    /// The logical GPU index of a workload's placement under the current modes.
    pub fn placement_index(&self, i: usize) -> Option<u32> {
        let w = self.workloads.get(i)?;
        if w.spec.kind == Kind::Agent {
            return None;
        }
        self.logical()
            .into_iter()
            .find(|l| l.phys == w.spec.gpu as usize && l.shape.partition_id == w.spec.partition)
            .map(|l| l.index)
    }
}

/// A process's start time in clock ticks (`/proc/PID/stat` field 22); `None` if gone or a zombie.
pub fn process_start(pid: u32) -> Option<u64> {
    let p = procfs::process::Process::new(i32::try_from(pid).ok()?).ok()?;
    let st = p.stat().ok()?;
    (st.state != 'Z' && st.state != 'X').then_some(st.starttime)
}
