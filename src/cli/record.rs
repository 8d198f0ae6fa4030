//! `partop record`: the node's raw outputs captured for a bug report or a rehearsal.

use crate::cli::out::out;
use crate::cli::{SourceArgs, exit};
use crate::node::open;
use anyhow::{Context, Result};

pub fn record(src: &SourceArgs, path: &std::path::Path) -> Result<u8> {
    let node = open(src)?;
    let rt = crate::cli::out::runtime()?;
    let mut collector = node.recorder(crate::collect::host::hostname());
    let snap = rt.block_on(collector.sample());
    let mut rec = collector.take_recording().unwrap_or_default();
    if node.sim.is_none() {
        rec.add_partition_files(std::path::Path::new("/sys"));
    }
    if let Some(s) = node.scenario() {
        rec.host = format!("simulated:{s}");
    }
    crate::exec::safe_file::write_atomic(
        path,
        (serde_json::to_string_pretty(&rec)? + "\n").as_bytes(),
    )
    .with_context(|| format!("cannot write {}", path.display()))?;
    out(&format!(
        "recorded {} amd-smi outputs and {} partition files ({} GPUs, {} logical) to {}\n",
        rec.outputs.len(),
        rec.files.len(),
        snap.gpus.len(),
        snap.logical_count(),
        path.display()
    ))?;
    Ok(exit::OK)
}
