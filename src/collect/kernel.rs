//! The kernel source, guarded: each sample of the [`SysfsCollector`] (sysfs, KFD, fdinfo, the
//! holders' /proc facts) runs on a blocking thread under [`LIMIT`]. A file that blocks (a FIFO,
//! a hung driver file) makes the kernel source stale; the pipeline (`collect::pipeline`) never
//! waits on it and shows the last values with the reason.

use crate::collect::sysfs::SysfsCollector;
use crate::collect::sysfs::collector::SRC;
use crate::domain::snapshot::{Health, Snapshot, SourceStatus};
use std::time::{Duration, Instant};

/// How long one kernel sample may take before the kernel source is called stale.
pub const LIMIT: Duration = Duration::from_secs(2);

type Job = tokio::task::JoinHandle<(SysfsCollector, Snapshot)>;

/// The kernel reader and what the guard keeps around it.
#[derive(Debug)]
pub struct Kernel {
    /// The reader; `None` while a read that ran past [`LIMIT`] still holds it.
    reader: Option<SysfsCollector>,
    /// That read, and since when it runs.
    busy: Option<(Job, Instant)>,
    /// When the last sample that completed was taken.
    last_ok_ms: Option<u64>,
    /// The sysfs root, for messages.
    root: String,
    /// A full /proc scan was asked for while the reader was busy: asked again when it returns.
    scan_pending: bool,
    /// The KFD topology generation last seen.
    generation: Option<String>,
    /// Whether the kernel has shown an AMD GPU yet (kernel first leans on amd-smi until then).
    pub seen_gpus: bool,
}

impl Kernel {
    /// Guards `reader`.
    pub fn new(reader: SysfsCollector) -> Self {
        Self {
            root: reader.roots.sys_root.display().to_string(),
            reader: Some(reader),
            busy: None,
            last_ok_ms: None,
            scan_pending: false,
            generation: None,
            seen_gpus: false,
        }
    }

    /// Runs the full /proc fd scan at the next sample (staging, the kill dialog, a drain).
    pub fn scan_now(&mut self) {
        match self.reader.as_mut() {
            Some(r) => r.scan_now = true,
            None => self.scan_pending = true,
        }
    }

    /// One sample. While an earlier read is stuck no other is started; its result is used once
    /// it returns.
    pub async fn sample(&mut self) -> Result<Snapshot, String> {
        let mut job = match self.busy.take() {
            Some((job, since)) if !job.is_finished() => {
                let e = format!(
                    "a kernel file read under {} has not returned for {}s (a blocking file?); showing the last values",
                    self.root,
                    since.elapsed().as_secs()
                );
                self.busy = Some((job, since));
                return Err(e);
            }
            Some((job, _)) => job,
            None => {
                let Some(mut k) = self.reader.take() else {
                    return Err("the kernel reader was lost (a bug): restart partop".into());
                };
                k.scan_now |= std::mem::take(&mut self.scan_pending);
                tokio::task::spawn_blocking(move || {
                    let s = k.sample();
                    (k, s)
                })
            }
        };
        match tokio::time::timeout(LIMIT, &mut job).await {
            Ok(Ok((mut k, snap))) => {
                k.scan_now |= std::mem::take(&mut self.scan_pending);
                self.reader = Some(k);
                self.seen_gpus |= !snap.gpus.is_empty();
                self.last_ok_ms = Some(snap.taken_at_ms);
                Ok(snap)
            }
            Ok(Err(e)) => Err(format!("the kernel reader failed: {e}")),
            Err(_) => {
                self.busy = Some((job, Instant::now()));
                Err(format!(
                    "a kernel file read took over {}s under {}; it is left to finish and the last values are shown",
                    LIMIT.as_secs(),
                    self.root
                ))
            }
        }
    }

    /// The kernel source's status after a failed read.
    pub fn failed(&self, e: &str) -> SourceStatus {
        let last_ok = self.last_ok_ms;
        SourceStatus {
            status: if last_ok.is_some() {
                Health::Stale
            } else {
                Health::Down
            },
            last_ok_ms: last_ok,
            ..SourceStatus::down(SRC, Some(e.to_string()))
        }
    }

    /// The last values (`last`: the pipeline's last sample, which the kernel gave; nothing is
    /// kept here, so a steady tick copies nothing), marked stale with `e`; or an empty sample
    /// marked down.
    pub fn stale(&self, e: &str, last: Option<&Snapshot>) -> Snapshot {
        let mut s = last.cloned().unwrap_or_default();
        s.models.clear();
        s.sources = vec![self.failed(e)];
        s
    }

    /// Whether the KFD topology generation differs from the one last seen (true the first
    /// time): the layout was rebuilt (a reload, a repartition, by partop or anyone).
    pub fn generation_moved(&mut self) -> bool {
        let Some(g) = self
            .reader
            .as_ref()
            .and_then(SysfsCollector::topology_generation)
        else {
            return false;
        };
        if self.generation.as_deref() == Some(g) {
            return false;
        }
        if let Some(old) = &self.generation {
            log::info!(
                "KFD topology generation {old} → {g}: the layout changed; amd-smi is asked again"
            );
        }
        self.generation = Some(g.to_string());
        true
    }
}
