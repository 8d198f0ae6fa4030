//! `partop fleet`: resolves the nodes (arguments, a hosts file, an ssh config, or Prometheus),
//! starts the transports and runs the fleet view, one round for scripts (`--once`), or a
//! rollout (`fleet plan`, `fleet apply`; `cli/fleet_apply.rs`).

use crate::cli::args::FleetArgs;
use crate::cli::out::out;
use crate::cli::{Cli, exit};
use crate::collect::fleet::{FleetEvent, NodeSpec, Reach, Transport};
use crate::domain::fleet::NodeSummary;
use anyhow::{Context, Result};
use std::time::Duration;

/// The nodes the arguments name.
pub fn nodes(a: &FleetArgs) -> Result<Vec<NodeSpec>> {
    let mut v = Vec::new();
    for h in &a.hosts {
        v.push(crate::collect::fleet::spec(h, &a.remote_partop).map_err(exit::Usage)?);
    }
    if let Some(f) = &a.hosts_file {
        let text = crate::collect::small_file::operator_text(f)
            .with_context(|| format!("cannot read the hosts file {}", f.display()))?;
        v.extend(
            crate::collect::fleet::parse_hosts(&text, &a.remote_partop)
                .map_err(|e| exit::Usage(format!("{}: {e}", f.display())))?,
        );
    }
    // The ssh config names the nodes only when nothing else does (it is always ssh's -F).
    if let Some(c) = a.ssh_config.as_ref().filter(|_| v.is_empty()) {
        let text = crate::collect::small_file::operator_text(c)
            .with_context(|| format!("cannot read the ssh config {}", c.display()))?;
        for h in crate::collect::fleet::hosts_of_ssh_config(&text) {
            v.push(crate::collect::fleet::spec(&h, &a.remote_partop).map_err(exit::Usage)?);
        }
    }
    let mut seen = std::collections::HashSet::new();
    v.retain(|n| seen.insert(n.name.clone()));
    Ok(v)
}

/// How the nodes are read.
pub fn transport(a: &FleetArgs, n: usize) -> Transport {
    let control_dir = crate::config::paths::state_dir().join("ssh");
    let _ = std::fs::create_dir_all(&control_dir);
    Transport {
        ssh: std::env::var("PARTOP_SSH").unwrap_or_else(|_| "ssh".into()),
        ssh_config: a.ssh_config.clone(),
        control_dir,
        connect_timeout: Duration::from_secs(u64::from(a.connect_timeout.clamp(1, 120))),
        refresh: crate::domain::fleet::refresh_for(n),
        concurrency: usize::from(a.concurrency),
    }
}

/// One node's state as the view keeps it.
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// Its name.
    pub name: String,
    /// Its last row.
    pub summary: Option<NodeSummary>,
    /// Reachability.
    pub reach: Option<Reach>,
    /// When the last row arrived (this machine's clock), ms.
    pub seen_ms: u64,
    /// The last row is settled: no source of it is still on its first read.
    pub settled: bool,
}

/// `partop fleet`.
pub fn fleet(cli: &Cli, a: &FleetArgs, settings: &crate::config::Settings) -> Result<u8> {
    if let Some(action) = &a.action {
        return crate::cli::fleet_apply::action(cli, a, action, settings);
    }
    if a.prometheus.is_some() {
        return crate::cli::fleet_view::run_prometheus(a);
    }
    if a.kubernetes {
        return crate::cli::fleet_kube::fleet(a);
    }
    let nodes = nodes(a)?;
    if nodes.is_empty() {
        return Err(exit::Usage(
            "no nodes: name them (partop fleet node01 node02), or give --hosts-file, --ssh-config or --prometheus".into(),
        )
        .into());
    }
    if a.once {
        return once(a, &nodes);
    }
    crate::cli::fleet_view::run(a, nodes, settings)
}

/// Every node once, judged on its first settled row (one no source of which is still on its
/// first read: a node's first sample is taken while amd-smi warms up), or why none came, within
/// the connect timeout and 20 s; a node still pending then is said as pending, not down. Then a
/// table or JSON.
fn once(a: &FleetArgs, nodes: &[NodeSpec]) -> Result<u8> {
    let t = transport(a, nodes.len());
    let rt = crate::cli::out::runtime()?;
    let rows = rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
        let tasks = crate::collect::fleet::spawn(nodes, &t, &tx);
        drop(tx);
        let mut rows: Vec<Row> = nodes
            .iter()
            .map(|n| Row {
                name: n.name.clone(),
                ..Row::default()
            })
            .collect();
        let deadline = tokio::time::Instant::now() + t.connect_timeout + Duration::from_secs(20);
        let done = |rows: &[Row]| {
            rows.iter()
                .all(|r| r.settled || matches!(r.reach, Some(Reach::Down(_))))
        };
        while !done(&rows) {
            let Ok(Some(e)) = tokio::time::timeout_at(deadline, rx.recv()).await else {
                break;
            };
            match e {
                FleetEvent::Row(n, s) => {
                    if let Some(r) = rows.iter_mut().find(|r| r.name == n)
                        && !r.settled
                    {
                        r.settled = s.health != crate::domain::snapshot::Health::Pending;
                        r.summary = Some(*s);
                        r.reach = Some(Reach::Up);
                    }
                }
                FleetEvent::Reach(n, reach) => {
                    if let Some(r) = rows.iter_mut().find(|r| r.name == n)
                        && !r.settled
                    {
                        r.reach = Some(reach);
                    }
                }
            }
        }
        for t in tasks {
            t.abort();
        }
        rows
    });
    rt.shutdown_timeout(Duration::from_millis(500));
    if a.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "node": r.name,
                    "reporting": r.summary.is_some(),
                    "settled": r.settled,
                    "reason": match &r.reach {
                        Some(Reach::Down(w)) => Some(w.clone()),
                        _ if r.summary.is_some() && !r.settled => Some(format!(
                            "pending: no settled sample within {}s ({})",
                            (t.connect_timeout + Duration::from_secs(20)).as_secs(),
                            r.summary.as_ref().and_then(|s| s.trouble.clone()).unwrap_or_default()
                        )),
                        _ => None,
                    },
                    "summary": r.summary,
                })
            })
            .collect();
        out(&(serde_json::to_string_pretty(&v)? + "\n"))?;
    } else {
        out(&crate::ui::fleet::table_text(&rows_to_view(&rows)))?;
    }
    Ok(if rows.iter().all(|r| r.settled) {
        exit::OK
    } else {
        exit::PARTIAL
    })
}

/// The view's rows from the command's.
pub fn rows_to_view(rows: &[Row]) -> Vec<crate::ui::fleet::NodeRow> {
    rows.iter()
        .map(|r| crate::ui::fleet::NodeRow {
            name: r.name.clone(),
            summary: r.summary.clone(),
            down: match &r.reach {
                Some(Reach::Down(w)) => Some(w.clone()),
                _ => None,
            },
            connecting: matches!(r.reach, Some(Reach::Connecting) | None),
            seen_ms: r.seen_ms,
            gfx_history: Vec::new(),
        })
        .collect()
}
