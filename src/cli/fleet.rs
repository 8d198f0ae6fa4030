//! `partop fleet`: resolves the nodes (arguments, a hosts file, an ssh config, or Prometheus),
//! starts the transports and runs the fleet view, one round for scripts (`--once`), or a
//! rollout (`fleet plan`, `fleet apply`; `cli/fleet_apply.rs`, through the cluster with
//! --kubernetes: `cli/fleet_cluster.rs`).

use crate::cli::args::FleetArgs;
use crate::cli::out::out;
use crate::cli::{Cli, exit};
use crate::collect::fleet::{FleetEvent, NodeSpec, Reach};
use crate::ui::fleet::NodeRow;
use anyhow::Result;
use std::time::Duration;

/// `partop fleet`.
pub fn fleet(cli: &Cli, a: &FleetArgs, settings: &crate::config::Settings) -> Result<u8> {
    if let Some(action) = &a.action {
        if a.kubernetes {
            return crate::cli::fleet_cluster::action(a, action, settings);
        }
        return crate::cli::fleet_apply::action(cli, a, action, settings);
    }
    if a.kubernetes {
        return crate::cli::fleet_kube::fleet(a, settings);
    }
    if a.prometheus.is_some() {
        return crate::cli::fleet_view::run_prometheus(a, settings);
    }
    let nodes = crate::cli::fleet_nodes::nodes(a)?;
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
    let t = crate::cli::fleet_nodes::transport(a, nodes.len());
    let rt = crate::cli::out::runtime()?;
    let rows = rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
        let tasks = crate::collect::fleet::spawn(nodes, &t, &tx);
        drop(tx);
        let mut rows: Vec<NodeRow> = nodes
            .iter()
            .map(|n| NodeRow {
                name: n.name.clone(),
                ..NodeRow::default()
            })
            .collect();
        let deadline = tokio::time::Instant::now() + t.connect_timeout + Duration::from_secs(20);
        let done = |rows: &[NodeRow]| rows.iter().all(|r| r.settled || r.down.is_some());
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
                        r.down = None;
                        r.connecting = false;
                    }
                }
                FleetEvent::Reach(n, reach) => {
                    if let Some(r) = rows.iter_mut().find(|r| r.name == n)
                        && !r.settled
                    {
                        r.connecting = reach == Reach::Connecting;
                        r.down = match reach {
                            Reach::Down(w) => Some(w),
                            _ => None,
                        };
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
                    "reason": match &r.down {
                        Some(w) => Some(w.clone()),
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
        out(&crate::ui::fleet::table_text(&rows))?;
    }
    Ok(if rows.iter().all(|r| r.settled) {
        exit::OK
    } else {
        exit::PARTIAL
    })
}
