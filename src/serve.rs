//! `partop serve`: the collector run headless as a long-lived service, its samples published to
//! HTTP (`serve::http`) as Prometheus series (`serve::metrics`), JSON and server-sent events.
//! Sits beside the UI: it takes a collector (built by the command layer) and a listener, runs
//! the same findings tracker as the monitor, follows unfinished applies through the journal,
//! and never changes the node.

pub mod http;
pub mod log;
pub mod metrics;

use crate::collect::pipeline::Collector;
use crate::domain::findings::{Thresholds, Tracker};
use http::{Limits, Published, Stats};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What the service needs besides the collector and the listener.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// Sampling interval.
    pub refresh: Duration,
    /// The journal (unfinished applies are exported).
    pub journal: PathBuf,
    /// This node's id in the journal.
    pub node_id: String,
    /// Findings thresholds.
    pub thresholds: Thresholds,
    /// HTTP bounds and token.
    pub limits: Limits,
    /// `cluster_name` on the DME series (config.toml; empty when not set).
    pub cluster_name: String,
}

/// The GPUs' identity is known: every AMD GPU has its serial (the kernel's `unique_id`) and
/// every logical GPU its UUID (amd-smi's), or amd-smi, which gives the UUIDs, has answered or
/// failed. Until then nothing is published: a series first written without its identity and
/// then with it would be two series to Prometheus, again at every restart.
pub fn identity_settled(s: &crate::domain::Snapshot) -> bool {
    let complete = s
        .gpus
        .iter()
        .filter(|g| g.mig.is_none())
        .all(|g| g.serial.is_some() && g.partitions.iter().all(|p| p.uuid.is_some()));
    complete
        || !s
            .sources
            .iter()
            .any(crate::collect::amdsmi::reader::identity_pending)
}

/// Samples every `refresh` and publishes each sample with its findings and the node's
/// unfinished apply (the journal is read every 10 s, off the runtime thread). The tasks end
/// when the returned receiver and its clones are gone.
pub fn publish(
    collector: Collector,
    settings: &ServeSettings,
) -> (
    watch::Receiver<Arc<Published>>,
    tokio::task::JoinHandle<()>,
    tokio::task::JoinHandle<()>,
) {
    let (snap_tx, mut snap_rx) = watch::channel(Arc::new(crate::domain::Snapshot::default()));
    let (req_tx, req_rx) = tokio::sync::mpsc::channel(4);
    let sampler = crate::collect::task::spawn(collector, settings.refresh, snap_tx, req_rx);
    // The throughput recorder follows the samples; it ends with the sampler.
    crate::exec::throughput::spawn(snap_rx.clone());
    let (pub_tx, pub_rx) = watch::channel(Arc::new(Published::default()));
    let journal = settings.journal.clone();
    let node = settings.node_id.clone();
    let thresholds = settings.thresholds;
    let cluster = settings.cluster_name.clone();
    let publisher = tokio::spawn(async move {
        // Kept so the sampler's request channel stays open (it samples on its tick only).
        let _requests = req_tx;
        let mut tracker = Tracker::new(thresholds);
        let mut apply = None;
        let mut journal_read: Option<std::time::Instant> = None;
        while snap_rx.changed().await.is_ok() {
            let s = Arc::clone(&snap_rx.borrow_and_update());
            if !identity_settled(&s) {
                continue;
            }
            let findings = tracker.observe(&s);
            if journal_read.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                journal_read = Some(std::time::Instant::now());
                let (j, n) = (journal.clone(), node.clone());
                apply = tokio::task::spawn_blocking(move || {
                    crate::exec::journal::unfinished_on(&j, &n)
                        .into_iter()
                        .last()
                        .map(|r| {
                            let key = r.last.as_ref().map(|l| l.1.to_string()).unwrap_or_default();
                            (r.fingerprint.clone(), r.resume_point(), key)
                        })
                })
                .await
                .unwrap_or(None);
            }
            let p = Published {
                snap: Some(s),
                findings,
                apply: apply.clone(),
                cluster: cluster.clone(),
            };
            if pub_tx.send(Arc::new(p)).is_err() {
                break;
            }
        }
    });
    (pub_rx, sampler, publisher)
}

/// Samples every `refresh`, publishes each sample with its findings, and serves HTTP until
/// `stop` resolves.
pub async fn run(
    collector: Collector,
    listener: tokio::net::TcpListener,
    settings: ServeSettings,
    stop: impl std::future::Future<Output = ()>,
) {
    let (pub_rx, sampler, publisher) = publish(collector, &settings);
    http::serve(
        listener,
        pub_rx,
        settings.limits,
        Arc::new(Stats::default()),
        env!("CARGO_PKG_VERSION"),
        stop,
    )
    .await;
    publisher.abort();
    sampler.abort();
}

/// A published sample as its fleet row.
pub fn summary(s: &crate::domain::Snapshot, p: &Published) -> crate::domain::fleet::NodeSummary {
    crate::domain::fleet::summarize(
        s,
        &p.findings,
        p.apply
            .as_ref()
            .map(|(f, i, k)| crate::domain::fleet::ApplyInfo {
                fingerprint: f.clone(),
                step: *i,
                key: k.clone(),
            }),
    )
}

/// The systemd unit `partop serve --print-unit` prints (also `docs/partop-serve.service`).
pub const UNIT: &str = include_str!("../docs/partop-serve.service");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::amdsmi::reader::{FIRST_READ_RUNNING, NOT_READ_YET, SRC_STATIC};
    use crate::domain::snapshot::{Health, LogicalGpu, PhysicalGpu, Snapshot, SourceStatus};

    #[test]
    fn nothing_is_published_while_the_identity_is_pending() {
        // Every combination of serial, UUID and the identity read's state: 2 x 2 x 6 cases.
        let states: [(&str, Option<SourceStatus>, bool); 6] = [
            ("no amd-smi", None, false),
            (
                "before its first call",
                Some(SourceStatus::down(SRC_STATIC, None)),
                true,
            ),
            (
                "not read yet",
                Some(SourceStatus::down(SRC_STATIC, Some(NOT_READ_YET.into()))),
                true,
            ),
            (
                "first read running",
                Some(SourceStatus::down(
                    SRC_STATIC,
                    Some(FIRST_READ_RUNNING.into()),
                )),
                true,
            ),
            (
                "timed out",
                Some(SourceStatus::down(
                    SRC_STATIC,
                    Some("timed out after 2s".into()),
                )),
                false,
            ),
            (
                "answered",
                Some(SourceStatus {
                    status: Health::Ok,
                    last_ok_ms: Some(1),
                    ..SourceStatus::down(SRC_STATIC, None)
                }),
                false,
            ),
        ];
        let mut n = 0;
        for serial in [None, Some("0x1")] {
            for uuid in [None, Some("u")] {
                for (what, st, pending) in &states {
                    let s = Snapshot {
                        gpus: vec![PhysicalGpu {
                            serial: serial.map(Into::into),
                            partitions: vec![LogicalGpu {
                                uuid: uuid.map(Into::into),
                                ..LogicalGpu::default()
                            }],
                            ..PhysicalGpu::default()
                        }],
                        sources: st.iter().cloned().collect(),
                        ..Snapshot::default()
                    };
                    let complete = serial.is_some() && uuid.is_some();
                    assert_eq!(
                        identity_settled(&s),
                        complete || !pending,
                        "serial {serial:?}, uuid {uuid:?}, amd-smi {what}"
                    );
                    n += 1;
                }
            }
        }
        assert_eq!(n, 24, "cases");
    }
}
