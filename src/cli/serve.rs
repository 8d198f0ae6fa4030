//! `partop serve`: resolves the node and the settings, binds the listener, and runs
//! `crate::serve` until SIGTERM or SIGINT; a `--sim` node is stopped on the way out.

use crate::cli::args::ServeArgs;
use crate::cli::{Cli, exit};
use anyhow::{Context, Result};
use std::io::Write as _;
use std::time::Duration;

/// Reads the bearer token: one line, trimmed, not empty.
fn token(path: &std::path::Path) -> Result<String> {
    let t = crate::collect::small_file::operator_text(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let t = t.trim().to_string();
    if t.is_empty() || t.len() > 4096 || t.chars().any(char::is_whitespace) {
        anyhow::bail!(
            "{}: the token must be one word of 1-4096 characters",
            path.display()
        );
    }
    Ok(t)
}

/// `partop serve`.
pub fn serve(cli: &Cli, a: &ServeArgs, settings: &crate::config::Settings) -> Result<u8> {
    if a.print_unit {
        std::io::stdout().write_all(crate::serve::UNIT.as_bytes())?;
        return Ok(exit::OK);
    }
    crate::serve::log::install(log::LevelFilter::Info);
    let token = a.token_file.as_deref().map(token).transpose()?;
    let node = crate::node::open(&cli.source)?;
    let refresh = Duration::from_secs_f64(cli.refresh.unwrap_or(settings.config.refresh_secs));
    let mut collector = node.collector();
    collector.refresh = refresh;
    let rt = crate::cli::out::runtime()?;
    let r = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(a.listen)
            .await
            .with_context(|| format!("cannot listen on {}", a.listen))?;
        let at = listener.local_addr()?;
        if at.ip().is_loopback() {
            log::info!("partop serve listening on http://{at} (loopback only)");
        } else {
            log::warn!(
                "partop serve listening on http://{at}: NOT loopback, reachable from the network{}",
                if token.is_some() {
                    "; a bearer token is required"
                } else {
                    " without a token (--token-file)"
                }
            );
        }
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        let stop = async move {
            tokio::select! {
                _ = term.recv() => log::info!("SIGTERM: stopping"),
                _ = int.recv() => log::info!("SIGINT: stopping"),
            }
        };
        let thresholds = settings.thresholds();
        crate::serve::run(
            collector,
            listener,
            crate::serve::ServeSettings {
                refresh,
                journal: settings.journal.clone(),
                node_id: crate::exec::journal::node_id(node.sim_state()),
                thresholds,
                limits: crate::serve::http::Limits {
                    max_connections: usize::from(a.max_connections),
                    stream_stall: Duration::from_secs(u64::from(a.stall_secs)),
                    token,
                    ..crate::serve::http::Limits::default()
                },
                cluster_name: settings.config.cluster_name.clone(),
            },
            stop,
        )
        .await;
        anyhow::Ok(())
    });
    // A kernel read stuck on a blocking file is left behind, never waited for.
    rt.shutdown_timeout(Duration::from_millis(500));
    drop(node);
    r?;
    log::info!("partop serve stopped");
    Ok(exit::OK)
}
