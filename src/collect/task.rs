//! The collector task: polls a collector on an interval and publishes each snapshot on a watch
//! channel. The UI never awaits a collector; a hung amd-smi only delays the next snapshot, and
//! each call has its own timeout.

use super::pipeline::Collector;
use crate::domain::Snapshot;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Requests the UI can send to the collector task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Sample now.
    RefreshNow,
    /// Re-read static data (after a repartition), then sample.
    Rescan,
    /// Run the full /proc holder scan now (staging, the kill dialog), then sample.
    ScanHolders,
}

/// Spawns the polling loop. It ends when every receiver is gone.
pub fn spawn(
    mut collector: Collector,
    every: Duration,
    tx: watch::Sender<Arc<Snapshot>>,
    mut requests: mpsc::Receiver<Request>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut open = true;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                r = requests.recv(), if open => match r {
                    Some(Request::Rescan) => collector.invalidate_static(),
                    Some(Request::ScanHolders) => collector.scan_holders_now(),
                    Some(Request::RefreshNow) => {}
                    // No one asks any more: sample on the tick only (never spin).
                    None => open = false,
                },
            }
            let snap = collector.tick().await;
            if tx.send(snap).is_err() {
                break;
            }
        }
    })
}
