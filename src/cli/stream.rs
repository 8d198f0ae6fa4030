//! `partop stream`: the collector, headless, one JSON document per line on stdout for each
//! sample (`/snapshot`'s document: the snapshot with findings, age and unfinished apply). What
//! `partop fleet` runs on each node over ssh, so nothing on the node listens on the network.
//! Ends when stdout is closed (the ssh connection went away), on SIGTERM, SIGHUP or SIGINT.

use crate::cli::{Cli, exit};
use anyhow::Result;
use std::time::Duration;
use tokio::io::AsyncWriteExt as _;

/// `partop stream`.
pub fn stream(cli: &Cli, summary: bool, settings: &crate::config::Settings) -> Result<u8> {
    // Logs go to stderr (ssh carries them apart from the documents).
    crate::serve::log::install(log::LevelFilter::Warn);
    let node = crate::node::open(&cli.source)?;
    let refresh = Duration::from_secs_f64(cli.refresh.unwrap_or(settings.config.refresh_secs));
    let mut collector = node.collector();
    collector.refresh = refresh;
    let rt = crate::cli::out::runtime()?;
    let r: Result<()> = rt.block_on(async {
        let thresholds = settings.thresholds();
        let settings = crate::serve::ServeSettings {
            refresh,
            journal: settings.journal.clone(),
            node_id: crate::exec::journal::node_id(node.sim_state()),
            thresholds,
            limits: crate::serve::http::Limits::default(),
            cluster_name: settings.config.cluster_name.clone(),
        };
        let (mut rx, sampler, publisher) = crate::serve::publish(collector, &settings);
        let mut out = tokio::io::stdout();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        loop {
            tokio::select! {
                r = rx.changed() => if r.is_err() { break },
                _ = term.recv() => break,
                _ = hup.recv() => break,
                _ = int.recv() => break,
            }
            let p = std::sync::Arc::clone(&rx.borrow_and_update());
            let line = if summary {
                p.snap
                    .as_ref()
                    .and_then(|s| serde_json::to_string(&crate::serve::summary(s, &p)).ok())
            } else {
                crate::serve::http::snapshot_json(&p, crate::collect::clock::now_ms())
            };
            let Some(mut line) = line else {
                continue;
            };
            line.push('\n');
            // The reader went away (ssh closed): stop sampling.
            if out.write_all(line.as_bytes()).await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
        publisher.abort();
        sampler.abort();
        Ok(())
    });
    rt.shutdown_timeout(Duration::from_millis(500));
    drop(node);
    r?;
    Ok(exit::OK)
}
