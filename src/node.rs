//! The node partop looks at, chosen once from the flags: a real node (amd-smi, the kernel, or
//! NVIDIA), the simulated node (`--sim`, `--sim-state`), or a recording (`--replay`); and the
//! collector, registry and lock that go with it. Every command and the monitor open it here.

use crate::collect::amdsmi::recording::{CommandSource, Recording};
use crate::collect::amdsmi::runner::{Runner, locate};
use crate::collect::pipeline::{Collector, Source};
use crate::sim::scenario::Scenario;
use crate::sim::session;
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Source selection shared by the monitor and `snapshot`.
#[derive(Debug, Args, Clone, Default)]
pub struct SourceArgs {
    /// Run on partop's simulated node (optionally naming a scenario; see `partop sim list`).
    #[arg(long, value_name = "SCENARIO", num_args = 0..=1, default_missing_value = crate::sim::scenario::DEFAULT, global = true)]
    pub sim: Option<String>,
    /// Path of the amd-smi executable (default: searched on PATH, then /opt/rocm/bin).
    #[arg(long, value_name = "PATH", global = true)]
    pub amd_smi: Option<PathBuf>,
    /// Attach to a simulated node started with `partop sim start` (it keeps running on exit).
    #[arg(long, value_name = "FILE", global = true, env = "PARTOP_SIM_STATE", conflicts_with_all = ["sim", "replay"])]
    pub sim_state: Option<PathBuf>,
    /// Read from a recording made by `partop record` instead of a live node.
    #[arg(long, value_name = "FILE", global = true, conflicts_with = "sim")]
    pub replay: Option<PathBuf>,
    /// The served-model registry (default: models.toml in the config dir; a simulated node
    /// brings its own).
    #[arg(long, value_name = "FILE", global = true)]
    pub models: Option<PathBuf>,
    /// Where values come from: the kernel first with amd-smi beside it for identity, firmware
    /// and profiles (auto), amd-smi only, or the kernel only (sysfs, KFD, fdinfo; no partition
    /// changes).
    #[arg(long, value_enum, default_value_t = crate::collect::sysfs::SourceMode::Auto, global = true)]
    pub source: crate::collect::sysfs::SourceMode,
    /// Root of sysfs for the kernel collector (a captured tree, for tests and bug reports).
    #[arg(long, value_name = "DIR", default_value = "/sys", global = true)]
    pub sysfs_root: PathBuf,
    /// Root of procfs for the kernel collector.
    #[arg(long, value_name = "DIR", default_value = "/proc", global = true)]
    pub proc_root: PathBuf,
    /// The nvidia-smi executable (NVIDIA nodes without NVML, and MIG changes).
    #[arg(long, value_name = "PATH", global = true)]
    pub nvidia_smi: Option<PathBuf>,
    /// Read an NVIDIA node recorded with `partop nvidia record`.
    #[arg(long, value_name = "FILE", global = true)]
    pub nvidia_replay: Option<PathBuf>,
    /// Beside the kernel, amd-smi (identity, firmware, profiles) is read no more often than
    /// every this many seconds; less often when its measured cost needs it.
    #[arg(long, default_value_t = 60.0, value_name = "SECS", global = true, value_parser = crate::config::file::timeout_secs)]
    pub amd_smi_every: f64,
    /// Share of one core (percent) amd-smi may use where it is the only source (no kernel
    /// GPUs); beside the kernel it gets a fifth of it. partop widens its interval to stay within.
    #[arg(long, default_value_t = 1.0, value_name = "PERCENT", global = true, value_parser = budget_percent)]
    pub amd_smi_budget: f64,
    /// Per-call amd-smi time limit in seconds.
    #[arg(long, default_value_t = 10.0, value_name = "SECS", global = true, value_parser = crate::config::file::timeout_secs)]
    pub timeout: f64,
}

/// A simulated node started for this process; stopped (workloads ended, state removed) on drop.
#[derive(Debug)]
pub struct SimGuard {
    /// Its state file.
    pub state: PathBuf,
}

impl SimGuard {
    /// Keeps the simulated node running after partop exits; returns its state file.
    pub fn keep(self) -> PathBuf {
        let state = self.state.clone();
        // Nobody owns it now: its kernel twin goes on (a twin whose owner died discards the
        // node), and `partop sim stop` ends it.
        let _ = crate::sim::state::SimState::update(&state, |s| {
            s.owner = None;
            Ok(())
        });
        std::mem::forget(self);
        state
    }
}

impl Drop for SimGuard {
    fn drop(&mut self) {
        session::discard(&self.state);
    }
}

fn budget_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of percent"))?;
    if v.is_finite() && (0.01..=100.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{s} % is outside 0.01-100 % of one core (1 is the default)"
        ))
    }
}

/// A simulated node: its state file, its scenario, and, when partop started it (`--sim`), the
/// guard that stops it.
#[derive(Debug)]
pub struct Simulated {
    /// The state file.
    pub state: PathBuf,
    /// Its scenario.
    pub scenario: String,
    /// Set when this partop started it and stops it on exit.
    pub guard: Option<SimGuard>,
}

/// Where snapshots come from.
#[derive(Debug)]
pub struct Node {
    /// Where amd-smi output comes from (the real tool, `partop sim amd-smi`, or a recording).
    pub source: CommandSource,
    /// The simulated node, when it is one (`--sim`, `--sim-state`).
    pub sim: Option<Simulated>,
    /// Where GPU holders are looked for (None for a recording).
    pub roots: Option<crate::collect::holders::Roots>,
    /// The served-model registry, when there is one.
    pub models: Option<PathBuf>,
    /// Where values come from, and the kernel collector's roots.
    pub kernel: Option<(
        crate::collect::sysfs::SourceMode,
        crate::collect::holders::Roots,
    )>,
    /// An NVIDIA node, and how it is read.
    pub nvidia: Option<NvidiaAccess>,
    /// The nvidia-smi to run.
    pub nvidia_smi: crate::collect::nvidia::smi::NvidiaSmi,
    /// How amd-smi may be used (`--amd-smi-every`, `--amd-smi-budget`).
    pub policy: crate::collect::amdsmi::lane::Policy,
}

/// How an NVIDIA node is read.
#[derive(Debug, Clone)]
pub enum NvidiaAccess {
    /// NVML (loaded at run time).
    Nvml,
    /// nvidia-smi -q -x.
    Smi(crate::collect::nvidia::smi::NvidiaSmi),
    /// A recording.
    Recorded(crate::collect::nvidia::NvNode),
}

impl NvidiaAccess {
    /// A source for a collector (NVML falls back to nvidia-smi when it cannot be loaded).
    pub fn source(
        &self,
        smi: &crate::collect::nvidia::smi::NvidiaSmi,
    ) -> Box<dyn crate::collect::nvidia::NvSource> {
        match self {
            Self::Nvml => match crate::collect::nvidia::nvml::NvmlSource::open() {
                Ok(s) => Box::new(s),
                Err(e) => {
                    log::warn!("{e}; reading nvidia-smi instead");
                    Box::new(smi.clone())
                }
            },
            Self::Smi(s) => Box::new(s.clone()),
            Self::Recorded(n) => Box::new(crate::collect::nvidia::Recorded(n.clone())),
        }
    }
}

/// The nvidia-smi to run (`--nvidia-smi`, else on PATH).
pub fn nvidia_smi(src: &SourceArgs) -> crate::collect::nvidia::smi::NvidiaSmi {
    crate::collect::nvidia::smi::NvidiaSmi {
        program: src
            .nvidia_smi
            .clone()
            .unwrap_or_else(|| PathBuf::from("nvidia-smi")),
        prefix: vec![],
        timeout: Duration::from_secs_f64(src.timeout.max(0.1)),
    }
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

impl Node {
    /// A node read through `source`, with no holders, registry, kernel or NVIDIA access yet.
    fn new(source: CommandSource, src: &SourceArgs) -> Self {
        Self {
            source,
            sim: None,
            roots: None,
            models: src.models.clone(),
            kernel: None,
            nvidia: None,
            nvidia_smi: nvidia_smi(src),
            policy: crate::collect::amdsmi::lane::Policy {
                every: Duration::from_secs_f64(src.amd_smi_every),
                budget: src.amd_smi_budget / 100.0,
            },
        }
    }

    /// A simulated node read through its kernel twin and the simulator's amd-smi, as a real
    /// node is read through its kernel and amd-smi.
    fn simulated(runner: Runner, src: &SourceArgs, sim: Simulated) -> Self {
        let roots = session::roots(&sim.state);
        Self {
            kernel: Some((src.source, roots.clone())),
            roots: Some(roots),
            models: Some(
                src.models
                    .clone()
                    .unwrap_or_else(|| session::registry_path(&sim.state)),
            ),
            sim: Some(sim),
            ..Self::new(CommandSource::Live(runner), src)
        }
    }

    /// The simulated node's state file, when it is one.
    pub fn sim_state(&self) -> Option<&std::path::Path> {
        self.sim.as_ref().map(|s| s.state.as_path())
    }

    /// The simulated node's scenario, when it is one.
    pub fn scenario(&self) -> Option<&str> {
        self.sim.as_ref().map(|s| s.scenario.as_str())
    }

    /// A collector for this node: its source, its holder scan, its models, marked simulated
    /// when it is.
    pub fn collector(&self) -> Collector {
        self.build(false)
    }

    /// A collector for `partop record`: amd-smi on every sample (a recording is of amd-smi),
    /// the kernel's values merged where it has them, every output kept.
    pub fn recorder(&self, host: String) -> Collector {
        let mut c = self.build(true);
        c.start_recording(host);
        c
    }

    fn build(&self, recording: bool) -> Collector {
        use crate::collect::amdsmi::reader::AmdSmi;
        use crate::collect::sysfs::SourceMode;
        let kernel = self.kernel.as_ref().and_then(|(mode, roots)| {
            (*mode != SourceMode::AmdSmi).then(|| {
                (
                    *mode,
                    crate::collect::kernel::Kernel::new(
                        crate::collect::sysfs::SysfsCollector::new(roots.clone()),
                    ),
                )
            })
        });
        let mut amd = AmdSmi::new(self.source.clone());
        amd.policy = self.policy;
        let live = matches!(self.source, CommandSource::Live(_));
        let source = if let Some(n) = &self.nvidia {
            Source::Nvidia(crate::collect::nvidia::reader::Nvidia::new(
                n.source(&self.nvidia_smi),
            ))
        } else if !live {
            Source::Replay(amd)
        } else {
            match kernel {
                Some((SourceMode::Sysfs, k)) => Source::Kernel(k),
                Some((_, k)) if !recording => Source::KernelFirst { kernel: k, amd },
                k => Source::AmdSmi {
                    amd,
                    kernel: k.map(|(_, k)| k),
                },
            }
        };
        let mut c = Collector::new(source);
        c.simulated = self.sim.is_some();
        c.enrich.roots.clone_from(&self.roots);
        c.enrich.models = Some(self.prober());
        if let Some(k) = c.enrich.kubelet.as_mut() {
            // The simulated node's pods are its kubelet twin's, never the host's kubelet's.
            if let Some(sim) = &self.sim {
                *k =
                    crate::collect::kubelet::Kubelet::new(session::kubelet_socket(&sim.state), "/");
                // Its Node is the one its agent registered, in the API server it joined.
                if let Some(kube) = crate::sim::state::SimState::load(&sim.state)
                    .ok()
                    .and_then(|s| s.kubernetes)
                {
                    k.node_name = Some(kube.node_name());
                    if let Some(api) = &kube.api {
                        k.cluster = api.target();
                    }
                }
            }
            if let Some(r) = &self.roots {
                k.sys_root.clone_from(&r.sys_root);
            }
        }
        if matches!(self.nvidia, Some(NvidiaAccess::Recorded(_))) {
            c.without_host_usage();
        }
        c
    }

    /// The served-model prober: the registry (a bad one is reported, not fatal) and where
    /// partop-launched models log.
    pub fn prober(&self) -> crate::collect::served::ModelProber {
        // The file `a` adds to when none was given (ui::effect): followed, absent or not.
        let (path, required) = self.models.clone().map_or_else(
            || {
                (
                    crate::config::paths::config_dir().join("models.toml"),
                    false,
                )
            },
            |p| (p, true),
        );
        let mut m = crate::collect::served::ModelProber::new(None, None).following(path, required);
        if let Some(roots) = &self.roots {
            m.proc_root.clone_from(&roots.proc_root);
        }
        m.log_dir = self.model_log_dir();
        m
    }

    /// Where partop-launched models log: beside a simulated node's state, else the state dir.
    pub fn model_log_dir(&self) -> PathBuf {
        self.sim_state().map_or_else(
            || crate::config::paths::state_dir().join("models"),
            |st| st.with_extension("logs"),
        )
    }

    /// What the monitor's effect runner needs of this node, derived from the node itself in
    /// this one place: its journal, simulated state, registry, model logs, nvidia-smi, and
    /// whether it is a recording. (A node opened from the fleet is not one of these: the
    /// fleet gives its monitor `ExecSettings::Remote`.)
    pub fn exec_settings(
        &self,
        journal: PathBuf,
    ) -> std::io::Result<crate::ui::effect::ExecSettings> {
        Ok(crate::ui::effect::ExecSettings::Local(
            crate::ui::effect::LocalNode {
                journal,
                proc_root: "/proc".into(),
                sim_state: self.sim_state().map(std::path::Path::to_path_buf),
                models: self.models.clone(),
                model_log_dir: self.model_log_dir(),
                nvidia_smi: Some(self.nvidia_smi.program.clone()),
                nvidia_replay: matches!(self.nvidia, Some(NvidiaAccess::Recorded(_))),
                exe: std::env::current_exe()?,
                apply_dir: crate::ui::effect::default_apply_dir(),
                kube: crate::collect::cluster::Target::default(),
            },
        ))
    }

    /// The registry itself (for planning and launching), or its error.
    pub fn registry(&self) -> Result<Option<crate::domain::models::Registry>> {
        self.models
            .as_ref()
            .map(|p| crate::collect::served::load_registry(p).map_err(anyhow::Error::msg))
            .transpose()
    }
}

/// A runner for the simulator's amd-smi on the node in `state`.
fn sim_runner(exe: &std::path::Path, state: &std::path::Path, timeout: Duration) -> Result<Runner> {
    Ok(Runner {
        program: exe.to_path_buf(),
        prefix: vec![
            "sim".into(),
            "amd-smi".into(),
            "--state".into(),
            state.display().to_string(),
        ],
        timeout,
    })
}

/// Opens the source the flags name.
pub fn open(src: &SourceArgs) -> Result<Node> {
    let exe = std::env::current_exe().context("cannot find partop's own executable")?;
    open_with(src, &exe)
}

/// Opens the source the flags name, with `exe` as the partop whose `sim amd-smi` stands in for
/// amd-smi on a simulated node (the headless tests run inside another binary).
pub fn open_with(src: &SourceArgs, exe: &std::path::Path) -> Result<Node> {
    let timeout = Duration::from_secs_f64(src.timeout.max(0.1));
    if let Some(name) = &src.sim {
        let scenario = Scenario::load(name)?;
        let state = session::ephemeral_state_path();
        session::start(&scenario, &state, None)?;
        let me = std::process::id();
        crate::sim::state::SimState::update(&state, |s| {
            s.owner = Some(crate::sim::state::TwinProc {
                pid: me,
                start_ticks: crate::sim::state::process_start(me),
            });
            Ok(())
        })?;
        let runner = sim_runner(exe, &state, timeout)?;
        return Ok(Node::simulated(
            runner,
            src,
            Simulated {
                guard: Some(SimGuard {
                    state: state.clone(),
                }),
                state,
                scenario: scenario.name,
            },
        ));
    }
    if let Some(state) = &src.sim_state {
        let st = crate::sim::state::SimState::load(state)?;
        let runner = sim_runner(exe, state, timeout)?;
        return Ok(Node::simulated(
            runner,
            src,
            Simulated {
                state: state.clone(),
                scenario: st.scenario,
                guard: None,
            },
        ));
    }
    if let Some(path) = &src.replay {
        let rec = Recording::load(path)?;
        return Ok(Node::new(
            CommandSource::Replay(std::sync::Arc::new(rec)),
            src,
        ));
    }
    // Where amd-smi is never run (the kernel only, NVIDIA) the runner is a placeholder.
    let unused_amd_smi = || Runner {
        timeout,
        ..Runner::new(PathBuf::from("amd-smi"))
    };
    let kernel_roots = crate::collect::holders::Roots {
        proc_root: src.proc_root.clone(),
        sys_root: src.sysfs_root.clone(),
        dev_root: "/dev".into(),
        fdinfo_root: src.proc_root.clone(),
    };
    if src.source == crate::collect::sysfs::SourceMode::Sysfs {
        // The kernel only: amd-smi is never run (and need not exist).
        return Ok(Node {
            roots: Some(kernel_roots.clone()),
            kernel: Some((src.source, kernel_roots)),
            ..Node::new(CommandSource::Live(unused_amd_smi()), src)
        });
    }
    // NVIDIA: asked for, recorded, or found where amd-smi is not.
    let nvidia = if let Some(f) = &src.nvidia_replay {
        let text = crate::collect::small_file::operator_text(f)
            .with_context(|| format!("cannot read {}", f.display()))?;
        Some(NvidiaAccess::Recorded(
            serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is not an NVIDIA recording made by `partop nvidia record`",
                    f.display()
                )
            })?,
        ))
    } else if src.source == crate::collect::sysfs::SourceMode::Nvidia {
        Some(if src.nvidia_smi.is_some() {
            NvidiaAccess::Smi(nvidia_smi(src))
        } else {
            NvidiaAccess::Nvml
        })
    } else if src.source == crate::collect::sysfs::SourceMode::Auto
        && src.amd_smi.is_none()
        && locate(None).is_err()
        && (crate::collect::nvidia::nvml::NvmlSource::open().is_ok() || on_path("nvidia-smi"))
    {
        Some(NvidiaAccess::Nvml)
    } else {
        None
    };
    if nvidia.is_some() {
        return Ok(Node {
            roots: Some(crate::collect::holders::Roots::host()),
            nvidia,
            ..Node::new(CommandSource::Live(unused_amd_smi()), src)
        });
    }
    let program = locate(src.amd_smi.as_deref())?;
    Ok(Node {
        roots: Some(crate::collect::holders::Roots::host()),
        kernel: Some((src.source, kernel_roots)),
        models: src.models.clone().or_else(|| {
            let p = crate::config::paths::config_dir().join("models.toml");
            p.exists().then_some(p)
        }),
        ..Node::new(
            CommandSource::Live(Runner {
                timeout,
                ..Runner::new(program)
            }),
            src,
        )
    })
}

/// The lock file of the node `node` is.
pub fn lock_path(node: &Node) -> PathBuf {
    node.sim_state()
        .map_or_else(crate::exec::lock::host_path, crate::exec::lock::sim_path)
}
