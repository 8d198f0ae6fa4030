//! The fleet view in the terminal: resolves what feeds it (each node's transport, or
//! Prometheus every 15 s) and what changes nodes ([`super::fleet_rollouts`]), then runs the
//! fleet's app loop (`ui::fleet::app`) until quit. `--prometheus --once` prints one table.

use crate::cli::args::FleetArgs;
use crate::cli::exit;
use crate::collect::fleet::{FleetEvent, NodeSpec, Target};
use crate::ui::fleet::app::{FleetRunner, Rollouts};
use crate::ui::fleet::{FleetMsg, FleetState, NodeRow};
use anyhow::Result;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// A change can go to the node: partop on it over ssh, or a rehearsal node.
fn changeable(n: &NodeSpec) -> bool {
    matches!(n.target, Target::Ssh { .. })
}

/// Where the rows come from, in the header's words.
fn via(nodes: &[NodeSpec]) -> String {
    let all = |f: fn(&Target) -> bool| nodes.iter().all(|n| f(&n.target));
    if all(|t| matches!(t, Target::Http { .. })) {
        "partop serve /events".into()
    } else if all(
        |t| matches!(t, Target::Ssh { dest, .. } if crate::collect::fleet::rehearsal(dest).is_some()),
    ) {
        "rehearsal (this partop on simulated nodes)".into()
    } else {
        "ssh (partop stream)".into()
    }
}

/// The keymap of a monitor opened on a node: read only (the node is not this machine).
fn monitor_keymap(loaded: &crate::ui::config::Loaded) -> crate::ui::keymap::Keymap {
    crate::ui::keymap::Keymap::load(&loaded.config.keymap, None, true).0
}

/// Runs `view` in the real terminal, the terminal restored after.
async fn in_terminal(
    state: FleetState,
    theme: &crate::ui::theme::Theme,
    runner: FleetRunner,
    rx: mpsc::Receiver<FleetMsg>,
) -> Result<()> {
    let (guard, mut terminal) = crate::ui::terminal::Guard::enter()?;
    let r = crate::ui::fleet::app::run(&mut terminal, state, theme, runner, rx).await;
    drop(guard);
    r.map(|_| ())
}

/// Runs the fleet view until quit.
pub fn run(a: &FleetArgs, nodes: Vec<NodeSpec>, settings: &crate::config::Settings) -> Result<u8> {
    // `--read-only` removes staging (a mutating command) from the fleet's keys too.
    let loaded = crate::ui::config::load(
        &crate::config::paths::config_dir(),
        &settings.config,
        None,
        None,
        settings.read_only,
    );
    let t = crate::cli::fleet_nodes::transport(a, nodes.len());
    let rows: Vec<NodeRow> = nodes
        .iter()
        .map(|n| NodeRow::connecting(&n.name, changeable(n) && !settings.read_only))
        .collect();
    let state = FleetState::new(rows, loaded.keymap.clone(), via(&nodes), t.refresh);
    let rollouts = (!settings.read_only && nodes.iter().any(changeable)).then(|| {
        Arc::new(crate::cli::fleet_rollouts::CommandRollouts::new(
            a, &nodes, settings,
        )) as Arc<dyn Rollouts>
    });
    let rt = crate::cli::out::runtime()?;
    let r = rt.block_on(async {
        let (tx, rx) = mpsc::channel(4096);
        let (etx, mut erx) = mpsc::channel::<FleetEvent>(4096);
        let tasks = crate::collect::fleet::spawn(&nodes, &t, &etx);
        drop(etx);
        let fwd = {
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Some(e) = erx.recv().await {
                    if tx.send(FleetMsg::Node(e)).await.is_err() {
                        break;
                    }
                }
            })
        };
        let runner = FleetRunner {
            nodes,
            transport: Some(t),
            rollouts,
            monitor_keymap: monitor_keymap(&loaded),
            tx,
        };
        let r = in_terminal(state, &loaded.theme, runner, rx).await;
        fwd.abort();
        for t in tasks {
            t.abort();
        }
        r
    });
    rt.shutdown_timeout(Duration::from_millis(500));
    r?;
    Ok(exit::OK)
}

/// `--prometheus URL`: rows from Prometheus's query API, read only.
pub fn run_prometheus(a: &FleetArgs, settings: &crate::config::Settings) -> Result<u8> {
    let url = a.prometheus.clone().unwrap_or_default();
    let rows = crate::collect::fleet_prometheus::read(&url, Duration::from_secs(10))
        .map_err(anyhow::Error::msg)?;
    if a.once || a.json {
        if a.json {
            crate::cli::out::out(&(serde_json::to_string_pretty(&rows)? + "\n"))?;
        } else {
            let view: Vec<NodeRow> = rows
                .into_iter()
                .map(|s| NodeRow {
                    name: s.host.clone(),
                    seen_ms: s.taken_at_ms,
                    summary: Some(s),
                    ..NodeRow::default()
                })
                .collect();
            crate::cli::out::out(&crate::ui::fleet::table_text(&view))?;
        }
        return Ok(exit::OK);
    }
    let loaded = crate::ui::config::load(
        &crate::config::paths::config_dir(),
        &settings.config,
        None,
        None,
        true,
    );
    let mut state = FleetState::new(
        Vec::new(),
        loaded.keymap.clone(),
        format!("prometheus {url}"),
        15,
    );
    for s in rows {
        let h = s.host.clone();
        state.row(&h, s, crate::collect::clock::now_ms());
    }
    let rt = crate::cli::out::runtime()?;
    rt.block_on(async {
        let (tx, rx) = mpsc::channel(4096);
        let poll = {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(Duration::from_secs(15));
                every.tick().await;
                loop {
                    every.tick().await;
                    let u = url.clone();
                    let Ok(Ok(rows)) = tokio::task::spawn_blocking(move || {
                        crate::collect::fleet_prometheus::read(&u, Duration::from_secs(10))
                    })
                    .await
                    else {
                        continue;
                    };
                    for s in rows {
                        let e = FleetEvent::Row(s.host.clone(), Box::new(s));
                        if tx.send(FleetMsg::Node(e)).await.is_err() {
                            return;
                        }
                    }
                }
            })
        };
        let runner = FleetRunner {
            nodes: Vec::new(),
            transport: None,
            rollouts: None,
            monitor_keymap: monitor_keymap(&loaded),
            tx,
        };
        let r = in_terminal(state, &loaded.theme, runner, rx).await;
        poll.abort();
        r
    })?;
    Ok(exit::OK)
}
