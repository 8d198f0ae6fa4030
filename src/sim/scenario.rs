//! Scenario files: a node (product, GPU count, modes, ROCm family) and its workloads. Built-in
//! scenarios live in `scenarios/` and are embedded in the binary.

use crate::domain::{ComputeMode, MemoryMode};
use serde::Deserialize;
use std::path::Path;

/// The scenario `--sim` starts without a name.
pub const DEFAULT: &str = "dpx-nps2-two-models";

/// Built-in scenarios, embedded (a test checks every file in `scenarios/` is listed).
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "spx-nps1-one-model",
        include_str!("../../scenarios/spx-nps1-one-model.toml"),
    ),
    (
        "dpx-nps2-two-models",
        include_str!("../../scenarios/dpx-nps2-two-models.toml"),
    ),
    (
        "cpx-nps4-small-models",
        include_str!("../../scenarios/cpx-nps4-small-models.toml"),
    ),
    (
        "noisy-neighbour",
        include_str!("../../scenarios/noisy-neighbour.toml"),
    ),
    (
        "idle-partition",
        include_str!("../../scenarios/idle-partition.toml"),
    ),
    (
        "agent-holds-kfd",
        include_str!("../../scenarios/agent-holds-kfd.toml"),
    ),
    (
        "stubborn-process",
        include_str!("../../scenarios/stubborn-process.toml"),
    ),
    (
        "rocm64-spx",
        include_str!("../../scenarios/rocm64-spx.toml"),
    ),
    (
        "dpx-nps1-firmware",
        include_str!("../../scenarios/dpx-nps1-firmware.toml"),
    ),
    (
        "cpx-64-busy",
        include_str!("../../scenarios/cpx-64-busy.toml"),
    ),
    (
        "guide-12b-spx",
        include_str!("../../scenarios/guide-12b-spx.toml"),
    ),
];

/// What a workload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// An HTTP model server answering like vLLM.
    ModelServer,
    /// A batch/training job.
    Batch,
    /// An agent holding `/dev/kfd` on every GPU (gpuagent, metrics exporter).
    Agent,
}

/// One workload.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Unique name.
    pub name: String,
    /// Kind.
    pub kind: Kind,
    /// Physical GPU index (BDF order); ignored for agents.
    #[serde(default)]
    pub gpu: u32,
    /// Partition on that GPU.
    #[serde(default)]
    pub partition: u32,
    /// VRAM it holds, GiB.
    #[serde(default)]
    pub vram_gb: f64,
    /// Mean GFX busy, percent of its partition.
    #[serde(default)]
    pub busy: f64,
    /// How much the load swings around the mean (percent points).
    #[serde(default = "default_swing")]
    pub swing: f64,
    /// Process name amd-smi shows (comm).
    #[serde(default)]
    pub comm: Option<String>,
    /// Model id (model servers).
    #[serde(default)]
    pub model: Option<String>,
    /// HTTP port on 127.0.0.1 (model servers); 0 picks a free one.
    #[serde(default)]
    pub port: u16,
    /// Ignore SIGTERM (needs SIGKILL).
    #[serde(default)]
    pub ignore_sigterm: bool,
    /// Prometheus text a model server answers on `/metrics` instead of its load's figures: a
    /// broken or hostile server (1e30 requests running, a KV cache 750 % full) to rehearse
    /// against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
}

const fn default_swing() -> f64 {
    10.0
}

/// A scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// One line shown by `sim list`.
    pub description: String,
    /// Product key (`mi300x`, `mi325x`, `mi308x`, `mi350x`, `mi355x`, `mi300x-dpx-nps1-fw`).
    pub product: String,
    /// Physical GPUs.
    #[serde(default = "default_gpus")]
    pub gpus: u32,
    /// Compute mode at start.
    pub compute: ComputeMode,
    /// Memory mode at start.
    pub memory: MemoryMode,
    /// ROCm version the fake amd-smi emulates (6.4.x or 7.x).
    #[serde(default = "default_rocm")]
    pub rocm: String,
    /// Seed for the simulated load.
    #[serde(default)]
    pub seed: u64,
    /// Seconds a driver reload takes.
    #[serde(default = "default_reload")]
    pub reload_secs: f64,
    /// Simulated time against real time, 0.001 to 1 (default 1: real speed). A reload, a model
    /// loading its weights and the waits of an apply on this node all take this fraction of
    /// their real time, so a rehearsal or a test of many transitions runs in seconds; the
    /// rules and the order of events are unchanged.
    #[serde(default = "default_time_scale")]
    pub time_scale: f64,
    /// Fault injection: this many driver reloads fail with AMDGPU_RESTART_ERR (as a driver
    /// that does not come back would), to rehearse the failure path.
    #[serde(default)]
    pub fail_reloads: u32,
    /// What each fake amd-smi call costs (default: the real tool's published cost).
    #[serde(default)]
    pub amd_smi_cost: super::cost::AmdSmiCost,
    /// Workloads.
    #[serde(default, rename = "workload")]
    pub workloads: Vec<WorkloadSpec>,
    /// The node is a Kubernetes node: its workloads are pods of a kubelet twin.
    #[serde(default)]
    pub kubernetes: Option<super::kubelet::KubeSpec>,
}

const fn default_gpus() -> u32 {
    8
}
fn default_rocm() -> String {
    "7.0.2".into()
}
const fn default_reload() -> f64 {
    6.0
}
/// Real speed.
pub const fn default_time_scale() -> f64 {
    1.0
}

/// A scenario that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Unknown name.
    #[error("unknown scenario {name:?}; available: {available}")]
    Unknown {
        /// Asked for.
        name: String,
        /// Built-ins.
        available: String,
    },
    /// TOML error, with location.
    #[error("{origin}:{line}:{column}: {message}")]
    Parse {
        /// File or built-in name.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// Semantically wrong.
    #[error("{origin}: {message}")]
    Invalid {
        /// File or built-in name.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// Could not read the file.
    #[error("{path}: {error}")]
    Io {
        /// Path.
        path: String,
        /// OS error.
        error: String,
    },
}

pub use crate::domain::models::line_col;

/// Where `key` is written: at the top of the file (before any table; `[amd_smi_cost]` keys in
/// that table) or in the `workload`-th `[[workload]]` table; 1-based line and column. None when
/// written another way (an inline table): the error then names the key without a place.
fn key_position(text: &str, workload: Option<usize>, key: &str) -> Option<(usize, usize)> {
    let mut table = String::new();
    let mut nth: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("[[workload]]") {
            nth = Some(nth.map_or(0, |n| n + 1));
            table = "workload".into();
            continue;
        }
        if let Some(h) = t.strip_prefix('[') {
            table = h.trim_end().trim_end_matches(']').trim().to_string();
            continue;
        }
        let here = match workload {
            Some(w) => table == "workload" && nth == Some(w),
            None => table.is_empty() || table == "amd_smi_cost",
        };
        if here
            && let Some(rest) = t.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            return Some((i + 1, line.len() - t.len() + 1));
        }
    }
    None
}

/// Parses TOML text into `T`, with file:line:column errors.
pub fn parse_toml<T: serde::de::DeserializeOwned>(
    origin: &str,
    text: &str,
) -> Result<T, ScenarioError> {
    toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map_or((1, 1), |s| line_col(text, s.start));
        ScenarioError::Parse {
            origin: origin.to_string(),
            line,
            column,
            message: e.message().to_string(),
        }
    })
}

impl Scenario {
    /// Loads a built-in by name, or a file by path.
    pub fn load(name_or_path: &str) -> Result<Self, ScenarioError> {
        if let Some((n, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(n, text);
        }
        let p = Path::new(name_or_path);
        if p.extension().is_some_and(|e| e == "json") {
            return super::replay::scenario_from_recording(p);
        }
        if p.extension().is_some_and(|e| e == "toml") || p.exists() {
            let text =
                crate::collect::small_file::operator_text(p).map_err(|e| ScenarioError::Io {
                    path: p.display().to_string(),
                    error: e.to_string(),
                })?;
            return Self::parse(&p.display().to_string(), &text);
        }
        Err(ScenarioError::Unknown {
            name: name_or_path.to_string(),
            available: BUILTIN
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Parses and validates.
    pub fn parse(origin: &str, text: &str) -> Result<Self, ScenarioError> {
        let s: Self = parse_toml(origin, text)?;
        s.check_numbers(origin, text)?;
        s.validate(origin)?;
        Ok(s)
    }

    /// Every number of the scenario, finite and within its range, or refused where it is
    /// written (file:line:column and the key): `reload_secs = inf` used to be taken, written to
    /// the node's state file as `null`, and `sim start` then called its own file unreadable.
    fn check_numbers(&self, origin: &str, text: &str) -> Result<(), ScenarioError> {
        let c = &self.amd_smi_cost;
        let mut numbers: Vec<(Option<usize>, &str, f64, f64, f64)> = vec![
            (None, "reload_secs", self.reload_secs, 0.0, 3600.0),
            (None, "time_scale", self.time_scale, 0.001, 1.0),
            (None, "cpu_fixed_secs", c.cpu_fixed_secs, 0.0, 60.0),
            (None, "cpu_per_gpu_secs", c.cpu_per_gpu_secs, 0.0, 60.0),
            (None, "wall_factor", c.wall_factor, 0.0, 100.0),
            (None, "first_call_secs", c.first_call_secs, 0.0, 600.0),
        ];
        for (i, w) in self.workloads.iter().enumerate() {
            numbers.push((Some(i), "vram_gb", w.vram_gb, 0.0, 4096.0));
            numbers.push((Some(i), "busy", w.busy, 0.0, 100.0));
            numbers.push((Some(i), "swing", w.swing, 0.0, 100.0));
        }
        for (workload, key, v, lo, hi) in numbers {
            if v.is_finite() && (lo..=hi).contains(&v) {
                continue;
            }
            let whose = workload.map_or_else(String::new, |i| {
                format!("workload {:?}: ", self.workloads[i].name)
            });
            let message = format!("{whose}{key} = {v}: must be a number from {lo} to {hi}");
            return Err(match key_position(text, workload, key) {
                Some((line, column)) => ScenarioError::Parse {
                    origin: origin.into(),
                    line,
                    column,
                    message,
                },
                None => ScenarioError::Invalid {
                    origin: origin.into(),
                    message,
                },
            });
        }
        Ok(())
    }

    fn validate(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad = |m: String| {
            Err(ScenarioError::Invalid {
                origin: origin.into(),
                message: m,
            })
        };
        let Some(prod) = crate::domain::product::by_key(&self.product) else {
            let known: Vec<_> = crate::domain::product::all()
                .iter()
                .map(|p| p.key)
                .collect();
            return bad(format!(
                "unknown product {:?}; known: {}",
                self.product,
                known.join(", ")
            ));
        };
        if !prod.offers(self.compute, self.memory) {
            return bad(format!(
                "{} does not offer {}/{}",
                prod.market_name, self.compute, self.memory
            ));
        }
        if self.gpus == 0 || self.gpus > 16 {
            return bad(format!("gpus must be 1..=16, not {}", self.gpus));
        }
        let parts = self.compute.partitions(prod.xcds);
        let mut names = std::collections::HashSet::new();
        for w in &self.workloads {
            if !names.insert(&w.name) {
                return bad(format!("workload {:?} is defined twice", w.name));
            }
            if w.kind != Kind::Agent && (w.gpu >= self.gpus || w.partition >= parts) {
                return bad(format!(
                    "workload {:?} is placed on GPU {} partition {}, but the node has {} GPUs of {} partitions",
                    w.name, w.gpu, w.partition, self.gpus, parts
                ));
            }
        }
        // A DRA claim is a workload's GPU: the name must be a workload that has one.
        for d in self.kubernetes.iter().flat_map(|k| &k.dra) {
            if !self
                .workloads
                .iter()
                .any(|w| &w.name == d && w.kind != Kind::Agent)
            {
                return bad(format!(
                    "[kubernetes] dra names {d:?}, which is no workload placed on a GPU; name one of the [[workload]] entries"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_and_every_file_is_registered() {
        for (n, t) in BUILTIN {
            Scenario::parse(n, t).unwrap_or_else(|e| panic!("{e}"));
        }
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios");
        for f in std::fs::read_dir(dir).unwrap() {
            let f = f.unwrap().path();
            let stem = f.file_stem().unwrap().to_string_lossy().to_string();
            assert!(
                BUILTIN.iter().any(|(n, _)| *n == stem),
                "{stem} not registered in BUILTIN"
            );
        }
    }

    /// Every checked number, written in a file at a hostile value, is refused with
    /// file:line:column and the key: 5 keys x 5 values (inf, -inf, NaN, negative, huge), and the
    /// other 3 cost keys at inf: 28 cases.
    #[test]
    fn every_number_out_of_range_is_refused_with_file_line_and_key() {
        let base = "name = \"x\"\ndescription = \"t\"\nproduct = \"mi300x\"\ncompute = \"SPX\"\nmemory = \"NPS1\"\nreload_secs = 1\n\n[amd_smi_cost]\nwall_factor = 1\n\n[[workload]]\nname = \"a\"\nkind = \"batch\"\n\n[[workload]]\nname = \"b\"\nkind = \"batch\"\nvram_gb = 1\nbusy = 1\nswing = 1\n";
        Scenario::parse("s.toml", base).unwrap();
        let keys = [
            ("reload_secs", 6, "reload_secs = 1"),
            // Written where reload_secs was (its default then applies).
            ("time_scale", 6, "reload_secs = 1"),
            ("wall_factor", 9, "wall_factor = 1"),
            ("vram_gb", 18, "vram_gb = 1"),
            ("busy", 19, "busy = 1"),
            ("swing", 20, "swing = 1"),
        ];
        let values = ["inf", "-inf", "nan", "-5", "1e300"];
        let mut ran = 0;
        for (key, line, written) in keys {
            for v in values {
                let text = base.replacen(written, &format!("{key} = {v}"), 1);
                let e = Scenario::parse("s.toml", &text).unwrap_err().to_string();
                assert!(
                    e.starts_with(&format!("s.toml:{line}:1: ")) && e.contains(key),
                    "{key} = {v}: {e}"
                );
                ran += 1;
            }
        }
        // Keys left to their defaults are in range; written ones are checked wherever they are.
        for key in ["cpu_fixed_secs", "cpu_per_gpu_secs", "first_call_secs"] {
            let text = base.replacen("wall_factor = 1", &format!("{key} = inf"), 1);
            let e = Scenario::parse("s.toml", &text).unwrap_err().to_string();
            assert!(e.starts_with("s.toml:9:1: ") && e.contains(key), "{e}");
            ran += 1;
        }
        assert_eq!(ran, 33, "{ran} cases");
    }

    #[test]
    fn errors_name_location_and_alternatives() {
        let e = Scenario::parse("x.toml", "name = \"a\"\ndescription = 3\n").unwrap_err();
        assert!(e.to_string().starts_with("x.toml:2:"), "{e}");
        let e = Scenario::load("no-such").unwrap_err().to_string();
        assert!(e.contains("dpx-nps2-two-models"), "{e}");
        let e = Scenario::parse(
            "y",
            "name='y'\ndescription='d'\nproduct='mi300x'\ncompute='SPX'\nmemory='NPS4'\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("does not offer SPX/NPS4"), "{e}");
    }
}
