//! The NVIDIA source of `collect::pipeline`: one read of an [`NvSource`] (NVML, nvidia-smi or a
//! recording) on a blocking thread, assembled into a snapshot; the last good read stays on
//! screen, marked stale with the error, when one fails.

use super::node::{NvSource, Recorded, assemble};
use crate::collect::clock;
use crate::domain::snapshot::{Health, PhysicalGpu, Process, SCHEMA, Snapshot, SourceStatus};

/// Source name in snapshots.
pub const SRC: &str = "nvidia";

/// The NVIDIA reader and its last good read.
#[derive(Debug)]
pub struct Nvidia {
    /// `None` only while a read runs.
    source: Option<Box<dyn NvSource>>,
    last: Option<(Vec<PhysicalGpu>, Vec<Process>)>,
    status: SourceStatus,
}

impl Nvidia {
    /// Reads `source`.
    pub fn new(source: Box<dyn NvSource>) -> Self {
        Self {
            source: Some(source),
            last: None,
            status: SourceStatus::down(SRC, None),
        }
    }

    /// One read, off the async thread (NVML calls are driver ioctls; nvidia-smi is a program).
    pub async fn sample(&mut self) -> Snapshot {
        let t = std::time::Instant::now();
        let src = self
            .source
            .take()
            .unwrap_or_else(|| Box::new(Recorded(Default::default())));
        let (src, read) = tokio::task::spawn_blocking(move || {
            let mut src = src;
            let r = src.read();
            (src, r)
        })
        .await
        .unwrap_or_else(|e| {
            (
                Box::new(Recorded(Default::default())) as Box<dyn NvSource>,
                Err(format!("the NVIDIA reader failed: {e}")),
            )
        });
        self.source = Some(src);
        let now = clock::now_ms();
        let mut snap = Snapshot {
            schema: SCHEMA,
            taken_at: clock::rfc3339(now),
            taken_at_ms: now,
            ..Snapshot::default()
        };
        match read {
            Ok(node) => {
                let (gpus, procs) = assemble(&node, now);
                snap.gpus.clone_from(&gpus);
                snap.processes.clone_from(&procs);
                self.last = Some((gpus, procs));
                self.status.status = Health::Ok;
                self.status.version = Some(node.source.clone());
                self.status.error = None;
                self.status.last_ok_ms = Some(now);
                self.status.took_ms = Some(u64::try_from(t.elapsed().as_millis()).unwrap_or(0));
            }
            Err(e) => {
                if let Some((gpus, procs)) = &self.last {
                    snap.gpus.clone_from(gpus);
                    snap.processes.clone_from(procs);
                }
                self.status.status = if self.last.is_some() {
                    Health::Stale
                } else {
                    Health::Down
                };
                self.status.error = Some(e);
            }
        }
        snap.sources = vec![self.status.clone()];
        snap
    }
}
