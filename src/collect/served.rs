//! Served models: discovery of model servers among the GPU processes, the registry file, and
//! the health and Prometheus probes that give each model its state, queue, KV-cache use and
//! token rate. Runs inside each collector sample, after the processes are known; every probe
//! has a short timeout so a hung server only costs its own row.

pub mod http;
pub mod measure;
pub mod metrics;
pub mod prober;

pub use prober::ModelProber;

use crate::domain::models::{Registry, parse};
use std::path::Path;

/// Reads and validates a registry file: the registry, or the located error to show (the
/// monitor keeps running with discovery only).
pub fn load_registry(path: &Path) -> Result<Registry, String> {
    let text = crate::collect::small_file::operator_text(path).map_err(|e| {
        format!(
            "{}: {e}; write one (see docs/models.md) or pass --models FILE",
            path.display()
        )
    })?;
    parse(&path.display().to_string(), &text).map_err(|e| e.to_string())
}
