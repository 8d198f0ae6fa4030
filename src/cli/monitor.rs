//! Starts the monitor: configuration, logging into the Log view, the data source (and the
//! simulated node), the collector task, the terminal guard and the app loop; then stops it all
//! in reverse order.

use crate::cli::{Cli, exit};
use crate::collect::task;
use crate::ui::config;
use crate::ui::state::State;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// Runs the monitor. Returns the exit code.
pub fn monitor(cli: &Cli, settings: &crate::config::Settings) -> anyhow::Result<u8> {
    // A recording is looked at, never acted on: every mutating command is removed.
    let replay = cli.source.replay.is_some() || cli.source.nvidia_replay.is_some();
    let look_only = settings.read_only || replay;
    let loaded = config::load(
        &crate::config::paths::config_dir(),
        &settings.config,
        cli.theme.as_deref(),
        cli.keymap.as_deref(),
        look_only,
    );
    // Log records go to the Log view; nothing is printed while the screen is ours.
    crate::ui::logbuf::install(log::LevelFilter::Info);
    for e in &loaded.errors {
        log::warn!("config: {e} (using the default)");
    }
    let mut node = crate::node::open(&cli.source)?;
    // Given on the command line wins (even `--refresh 1`); else config.toml (validated).
    let refresh = Duration::from_secs_f64(cli.refresh.unwrap_or(settings.config.refresh_secs));
    // One thread is plenty: collection mostly waits on amd-smi, and input has its own thread.
    let rt = crate::cli::out::runtime()?;
    let mut collector = node.collector();
    collector.refresh = refresh;
    let thresholds = settings.thresholds();
    let mut state = State::new(
        loaded.keymap.clone(),
        thresholds,
        u64::try_from(refresh.as_millis()).unwrap_or(1000),
    );
    state.read_only = look_only;
    // `--source sysfs` allows no partition change: staging says why (as plan and apply do).
    state.no_partition_change = crate::cli::plan::refuse_kernel_only(&cli.source)
        .err()
        .map(|e| e.to_string());
    // A theme or keymap that could not be used is said on screen, not only in the Log.
    if let Some(first) = loaded.errors.first() {
        let more = loaded.errors.len() - 1;
        state.theme_notice = Some(if more == 0 {
            format!("! {first}: defaults in use")
        } else {
            format!("! {first} (+{more} more in 6 Log): defaults in use")
        });
    }
    if let Some(p) = &cli.source.replay {
        state.replay = Some(
            match crate::collect::amdsmi::recording::Recording::load(p) {
                Ok(r) => format!(
                    "of {} recorded {}",
                    crate::domain::text::escape_controls(&r.host),
                    crate::domain::text::escape_controls(&r.recorded_at)
                ),
                Err(_) => format!("of {}", p.display()),
            },
        );
    } else if let Some(p) = &cli.source.nvidia_replay {
        state.replay = Some(nvidia_replay_banner(p));
    }
    state.own_pid = std::process::id();
    state.stops_sim = node.sim.as_ref().is_some_and(|s| s.guard.is_some());
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "ms"
    )]
    {
        state.grace_ms = (settings.config.grace_secs.max(0.0) * 1000.0) as u64;
    }
    let exec = node.exec_settings(settings.journal.clone())?;
    state.nvidia_smi = cli
        .source
        .nvidia_smi
        .as_ref()
        .map_or_else(|| "nvidia-smi".into(), |p| p.display().to_string());
    // An apply started by an earlier partop (the SSH session dropped?) is still running: follow it.
    state.applying = crate::ui::effect::running_apply(&crate::ui::effect::default_apply_dir());
    state.scenario = node.scenario().map(str::to_string);
    // The simulator knows how long its reload takes; a real node gets the planning figure.
    if let Some(st) = node
        .sim_state()
        .and_then(|p| crate::sim::state::SimState::load(p).ok())
    {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "seconds"
        )]
        {
            state.reload_secs = st.reload_secs.ceil() as u32;
        }
    }
    if let Some(s) = node.scenario() {
        log::info!("simulated node: scenario {s}");
    }
    let result = rt.block_on(async {
        let (tx, rx) = tokio::sync::watch::channel(Arc::new(crate::domain::Snapshot::default()));
        let (req_tx, req_rx) = tokio::sync::mpsc::channel(4);
        let handle = task::spawn(collector, refresh, tx, req_rx);
        // The throughput recorder follows the samples; it ends with the collector task.
        crate::exec::throughput::spawn(rx.clone());
        let (guard, mut terminal) = crate::ui::terminal::Guard::enter()?;
        let r = crate::ui::app::run(&mut terminal, state, &loaded.theme, rx, req_tx, exec)
            .await
            .map(|_| ());
        drop(guard);
        handle.abort();
        r
    });
    rt.shutdown_timeout(Duration::from_millis(500));
    // A repartition still running on the simulated node needs the node: leave it running
    // rather than pull it from under the apply, and say how to stop it.
    if crate::ui::effect::running_apply(&crate::ui::effect::default_apply_dir()).is_some()
        && let Some(state) = node
            .sim
            .as_mut()
            .and_then(|s| s.guard.take())
            .map(crate::node::SimGuard::keep)
    {
        let _ = writeln!(
            std::io::stderr(),
            "a repartition is still running on the simulated node; it keeps running. Follow it with `partop --sim-state {0}`, stop it with `partop sim stop --state {0}`",
            state.display()
        );
    }
    // Said, not silent: the node this partop started goes with it (the footer said so too).
    if node.sim.as_ref().is_some_and(|s| s.guard.is_some()) {
        let _ = writeln!(
            std::io::stderr(),
            "stopped the simulated node{} that this partop started; `partop --sim {}` starts a fresh one",
            node.scenario()
                .map_or_else(String::new, |n| format!(" ({n})")),
            node.scenario().unwrap_or("SCENARIO")
        );
    }
    drop(node);
    result.map(|()| exit::OK)
}

/// The REPLAY banner of an NVIDIA recording: its host and time (`partop nvidia record` writes
/// them beside the node); a recording made before it did names its file and says so.
pub fn nvidia_replay_banner(p: &std::path::Path) -> String {
    let doc = crate::collect::small_file::operator_text(p)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    let field = |k: &str| {
        doc.as_ref()
            .and_then(|d| d.get(k))
            .and_then(serde_json::Value::as_str)
            .map(|v| crate::domain::text::escape_controls(v).into_owned())
    };
    match (field("host"), field("recorded_at")) {
        (Some(h), Some(at)) => format!("of {h} recorded {at}"),
        _ => format!(
            "of {} (recorded without its host and time)",
            crate::domain::text::escape_controls(&p.display().to_string())
        ),
    }
}
