//! `partop fleet --kubernetes`: the cluster's GPU nodes from the API server's watch
//! (`collect::cluster`), as a table or JSON with the cluster's signals (`domain::cluster`).
//! Without `--once`, the live view (`ui::cluster`) on the same watch. Printing and wiring only;
//! the reading and the judging live below.

use crate::cli::args::FleetArgs;
use crate::cli::exit;
use crate::collect::cluster::{self, Target};
use crate::domain::cluster::{NodeRow, rows, signals};
use crate::domain::text::escape_controls as esc;
use anyhow::Result;
use std::fmt::Write as _;

/// `partop fleet --kubernetes`.
pub fn fleet(a: &FleetArgs, settings: &crate::config::Settings) -> Result<u8> {
    if let Some(l) = &a.selector {
        crate::domain::label_selector::check(l)
            .map_err(|e| crate::cli::exit::Usage(format!("-l {}: {}", esc(l), esc(&e))))?;
    }
    let t = Target {
        kubeconfig: a.kubeconfig.clone(),
        context: a.context.clone(),
        selector: a.selector.clone(),
    };
    let limit = std::time::Duration::from_secs(u64::from(a.connect_timeout).max(1) + 20);
    if !a.once {
        return live(&t, limit, a.prometheus.clone(), settings, a);
    }
    let rt = crate::cli::out::runtime()?;
    let (nodes, pods) = rt.block_on(async {
        let client = cluster::client(&t).await.map_err(anyhow::Error::msg)?;
        let w = cluster::start(client, &t);
        w.ready(limit).await.map_err(anyhow::Error::msg)?;
        Ok::<_, anyhow::Error>(w.view())
    })?;
    let table = rows(&nodes, &pods);
    let sig = signals(&nodes, &pods);
    if a.json {
        let doc = serde_json::json!({
            "nodes": table,
            "signals": sig.iter().map(crate::domain::cluster::Signal::text).collect::<Vec<_>>(),
        });
        let mut text = serde_json::to_string_pretty(&doc)?;
        text.push('\n');
        crate::cli::out::out(&text)?;
    } else {
        crate::cli::out::out(&render(&table, &sig))?;
    }
    Ok(exit::OK)
}

/// Where the view says the cluster is.
fn via(t: &Target) -> String {
    let mut v = t.kubeconfig.as_ref().map_or_else(
        || "the default kubeconfig".to_string(),
        |p| format!("kubeconfig {}", p.display()),
    );
    if let Some(c) = &t.context {
        let _ = write!(v, ", context {c}");
    }
    if let Some(l) = &t.selector {
        let _ = write!(v, ", nodes -l {l}");
    }
    v
}

/// The live view: the same watch, its first lists waited for (a refusal is said before the
/// terminal is taken), then the cluster app until quit; a node's live detail through its
/// `partop serve` pod and the API server's pod proxy, or from `prometheus`.
fn live(
    t: &Target,
    limit: std::time::Duration,
    prometheus: Option<String>,
    settings: &crate::config::Settings,
    a: &crate::cli::args::FleetArgs,
) -> Result<u8> {
    // Read only, the keys that stage a rollout are gone and nothing can change the cluster.
    let loaded = crate::ui::config::load(
        &crate::config::paths::config_dir(),
        &settings.config,
        None,
        None,
        settings.read_only,
    );
    let reach = crate::cli::fleet_cluster::reach(a)?;
    let rollouts: Option<std::sync::Arc<dyn crate::ui::cluster::rollout::ClusterRollouts>> =
        (!settings.read_only).then(|| {
            std::sync::Arc::new(crate::cli::cluster_rollouts::KubeRollouts::new(
                t.clone(),
                settings,
                reach,
            )) as _
        });
    let rt = crate::cli::out::runtime()?;
    let r = rt.block_on(async {
        let client = cluster::client(t).await.map_err(anyhow::Error::msg)?;
        let w = std::sync::Arc::new(cluster::start(client, t));
        w.ready(limit).await.map_err(anyhow::Error::msg)?;
        let live = match prometheus {
            Some(url) => live_from_prometheus(url),
            None => live_through_pods(&w),
        };
        let state = crate::ui::cluster::ClusterState::new(loaded.keymap.clone(), via(t));
        let (guard, mut terminal) = crate::ui::terminal::Guard::enter()?;
        let r = crate::ui::cluster::app::run(
            &mut terminal,
            state,
            &loaded.theme,
            &w,
            Some(live),
            rollouts,
        )
        .await;
        drop(guard);
        r.map(|_| ())
    });
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    r?;
    Ok(exit::OK)
}

/// A node's live detail through its `partop serve` pod and the API server's pod proxy.
pub fn live_through_pods(
    w: &std::sync::Arc<cluster::Watch>,
) -> crate::ui::cluster::app::LiveSource {
    let source = std::sync::Arc::clone(w);
    std::sync::Arc::new(move |node: String| -> crate::ui::cluster::app::LiveFuture {
        let w = std::sync::Arc::clone(&source);
        Box::pin(async move {
            w.live(&node).await.map(|row| {
                crate::ui::cluster::view::live_lines(&row, crate::collect::clock::now_ms())
            })
        })
    })
}

/// A node's live detail from Prometheus (read on a blocking thread, 10 s at most).
pub fn live_from_prometheus(url: String) -> crate::ui::cluster::app::LiveSource {
    std::sync::Arc::new(move |node: String| -> crate::ui::cluster::app::LiveFuture {
        let url = url.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                cluster::live_from_prometheus(&url, &node, std::time::Duration::from_secs(10))
            })
            .await
            .map_err(|e| e.to_string())?
            .map(|row| crate::ui::cluster::view::live_lines(&row, crate::collect::clock::now_ms()))
        })
    })
}

fn state(r: &NodeRow) -> String {
    let mut v = Vec::new();
    if r.ready == Some(false) {
        v.push("NOT READY".to_string());
    }
    if r.cordoned {
        v.push("cordoned".into());
    }
    v.extend(r.taints.iter().map(|t| esc(t).into_owned()));
    if v.is_empty() {
        "ok".into()
    } else {
        v.join(" ")
    }
}

/// The table: one line a node (worst first), then the signals.
pub fn render(table: &[NodeRow], sig: &[crate::domain::cluster::Signal]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<28} {:<10} {:<34} {:>4}  STATE",
        "NODE", "LAYOUT", "GPU RESOURCES alloc/cap", "PODS"
    );
    for r in table {
        let res: Vec<String> = r
            .resources
            .iter()
            .map(|(n, a, c)| format!("{} {a}/{c}", esc(n)))
            .collect();
        let _ = writeln!(
            o,
            "{:<28} {:<10} {:<34} {:>4}  {}",
            esc(&r.name),
            esc(&r.layout),
            res.join(" "),
            r.pods,
            state(r)
        );
    }
    let _ = writeln!(o, "\n{} GPU node(s), {} signal(s)", table.len(), sig.len());
    for s in sig {
        let _ = writeln!(o, "  ! {}", esc(&s.text()));
    }
    o
}
