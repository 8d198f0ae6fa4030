//! `partop snapshot`: one collection, as a table or the JSON document (docs/json.md).

use crate::cli::out::out;
use crate::cli::{SourceArgs, exit};
use crate::domain::snapshot::Health;
use crate::node::open;
use anyhow::Result;

pub fn snapshot(src: &SourceArgs, json: bool) -> Result<u8> {
    let node = open(src)?;
    let rt = crate::cli::out::runtime()?;
    let mut collector = node.collector();
    let snap = rt.block_on(collector.sample());
    // A kernel read stuck on a blocking file is left behind, never waited for.
    rt.shutdown_background();
    let failed: Vec<String> = snap
        .sources
        .iter()
        .filter(|s| matches!(s.status, Health::Down | Health::Stale))
        .map(|s| format!("{}: {}", s.name, s.error.clone().unwrap_or_default()))
        .collect();
    if snap.gpus.is_empty() && !failed.is_empty() {
        anyhow::bail!("{}", failed.join("\n"));
    }
    // With the findings one sample shows (a partition count mismatch, a holder amd-smi does
    // not list), in the table as in the JSON; those that need time (idle, noisy) need the
    // monitor or serve.
    let findings =
        crate::domain::findings::Tracker::new(crate::domain::findings::Thresholds::default())
            .observe(&snap);
    if json {
        let doc = crate::report::snapshot_document(&snap, &findings, snap.taken_at_ms);
        out(&(serde_json::to_string_pretty(&doc)? + "\n"))?;
    } else {
        out(&crate::report::table(&snap, &findings))?;
    }
    if failed.is_empty() {
        Ok(exit::OK)
    } else {
        #[expect(clippy::print_stderr, reason = "one-shot command")]
        for f in &failed {
            eprintln!("partop: {f}");
        }
        Ok(exit::PARTIAL)
    }
}
