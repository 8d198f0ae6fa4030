//! What partop observes of a served model: its state, queue, KV cache, throughput, restarts
//! and log tail, beside its registry entry. A leaf of the snapshot; filled by the prober.

use super::models::ModelSpec;
use serde::{Deserialize, Serialize};

/// A model's observed state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelState {
    /// Its process runs but it does not answer yet (loading weights).
    Starting,
    /// `/health` answered 200.
    Healthy,
    /// It runs but `/health` fails.
    Unhealthy,
    /// No process (registered models only).
    Stopped,
    /// No way to ask it (no port known).
    Unknown,
}

impl ModelState {
    /// Short label.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Healthy => "healthy",
            Self::Unhealthy => "unhealthy",
            Self::Stopped => "stopped",
            Self::Unknown => "unknown",
        }
    }
}

/// One model server as partop sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServedModel {
    /// Registry name, or `server:port` for a discovered one.
    pub name: String,
    /// Model id.
    pub model: String,
    /// Server kind (`vllm`, `sglang`, `llama.cpp`, `tgi`) when recognised.
    pub server: Option<String>,
    /// Its registry entry (None: discovered only).
    pub spec: Option<ModelSpec>,
    /// Server process.
    pub pid: Option<u32>,
    /// Its start time (identity).
    #[serde(default)]
    pub start_ticks: Option<u64>,
    /// Logical GPUs it uses (indices now).
    pub gpus: Vec<u32>,
    /// Their identities.
    pub bdfs: Vec<String>,
    /// HTTP port.
    pub port: Option<u16>,
    /// State.
    pub state: ModelState,
    /// Why the state is what it is (the error text of the last probe).
    pub reason: Option<String>,
    /// Requests in the running batch.
    pub running: Option<f64>,
    /// Requests waiting.
    pub waiting: Option<f64>,
    /// KV-cache use, 0..1.
    pub kv_cache: Option<f64>,
    /// Generation tokens per second (from the counter's rate).
    pub tokens_per_sec: Option<f64>,
    /// Times partop saw it start again (new process for the same model).
    pub restarts: u32,
    /// Its log file.
    pub log: Option<String>,
    /// Last lines of the log.
    #[serde(default)]
    pub log_tail: Vec<String>,
    /// When it was last probed (ms since epoch).
    pub probed_ms: Option<u64>,
    /// Time to first token and end-to-end latency over the prober's last window (p50, p99),
    /// from the server's histograms; None where the server exports none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<super::latency::Latency>,
}

impl ServedModel {
    /// Its logical GPUs as `3,4`, or `-` when it holds none.
    pub fn gpus_label(&self) -> String {
        if self.gpus.is_empty() {
            "-".into()
        } else {
            self.gpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        }
    }

    /// HBM it needs per logical GPU (registry), GB.
    pub fn memory_gb(&self) -> Option<f64> {
        self.spec.as_ref().map(|s| s.memory_gb)
    }
}

/// One server's counters at one scrape, for the throughput recorder (`domain::throughput`),
/// which the app side (the monitor, `partop serve`) runs over the samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading {
    /// The model set (or model) it serves.
    pub set: String,
    /// The server's process (a new one is a restart: its counters start again).
    pub pid: u32,
    /// Generation tokens so far.
    pub tokens: f64,
    /// Requests running now.
    pub running: f64,
    /// Requests waiting now.
    pub waiting: f64,
    /// Cumulative end-to-end latency buckets.
    pub e2e: Vec<(f64, f64)>,
    /// Cumulative time-to-first-token buckets.
    pub ttft: Vec<(f64, f64)>,
}
