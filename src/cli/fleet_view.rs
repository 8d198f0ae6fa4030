//! The fleet view in the terminal: transports feed rows, keys drive `ui::fleet`, frames are
//! drawn at most five times a second (a fleet of 256 nodes sends dozens of rows a second), a
//! key at once. Enter opens the monitor's views on that node's live stream, read only (the
//! node is not this machine); Esc returns. `--prometheus` reads rows from Prometheus instead.

use crate::cli::args::FleetArgs;
use crate::cli::exit;
use crate::collect::fleet::{FleetEvent, NodeSpec, Reach};
use crate::ui::fleet::{FleetEffect, FleetState, NodeRow};
use anyhow::Result;
use ratatui::crossterm::event::{self, Event};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// A line on the plain terminal (between two stays in the view).
fn say(s: &str) {
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(s.as_bytes());
    let _ = o.flush();
}

/// Key-to-screen latency for the benchmark (`PARTOP_KEY_LATENCY_LOG=FILE`, µs per line).
fn latency_log() -> Option<std::fs::File> {
    let p = std::env::var_os("PARTOP_KEY_LATENCY_LOG")?;
    crate::exec::safe_file::append(std::path::Path::new(&p), false).ok()
}

fn input_thread(tx: mpsc::Sender<(Event, std::time::Instant)>, stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match event::poll(Duration::from_millis(250)) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => break,
            }
            let Ok(e) = event::read() else { break };
            if tx.blocking_send((e, std::time::Instant::now())).is_err() {
                break;
            }
        }
    });
}

/// Runs the fleet view until quit.
pub fn run(a: &FleetArgs, nodes: Vec<NodeSpec>, settings: &crate::config::Settings) -> Result<u8> {
    // `--read-only` removes staging (a mutating command) from the fleet's keys too.
    let loaded = crate::ui::config::load(
        &crate::config::paths::config_dir(),
        None,
        None,
        settings.read_only,
    );
    let t = crate::cli::fleet::transport(a, nodes.len());
    let rows: Vec<NodeRow> = nodes
        .iter()
        .map(|n| NodeRow {
            name: n.name.clone(),
            connecting: true,
            ..NodeRow::default()
        })
        .collect();
    let via = if nodes
        .iter()
        .all(|n| matches!(n.target, crate::collect::fleet::Target::Http { .. }))
    {
        "partop serve /events".to_string()
    } else {
        "ssh (partop stream)".to_string()
    };
    let mut state = FleetState::new(rows, loaded.keymap.clone(), via, t.refresh);
    let rt = crate::cli::out::runtime()?;
    let r = rt.block_on(async {
        let (tx, mut rx) = mpsc::channel(4096);
        let tasks = crate::collect::fleet::spawn(&nodes, &t, &tx);
        drop(tx);
        let (ktx, mut krx) = mpsc::channel(64);
        let mut stop_input = Arc::new(AtomicBool::new(false));
        input_thread(ktx, Arc::clone(&stop_input));
        let (guard, mut terminal) = crate::ui::terminal::Guard::enter()?;
        let size = terminal.size()?;
        state.size = (size.width, size.height);
        let mut lat = latency_log();
        let mut dirty = true;
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let mut keys_waiting: Vec<std::time::Instant> = Vec::new();
        let mut signals = crate::ui::terminal::QuitSignals::new()?;
        'outer: loop {
            if dirty || !keys_waiting.is_empty() {
                state.now_ms = crate::collect::clock::now_ms();
                terminal.draw(|f| crate::ui::fleet::render(f, &state, &loaded.theme))?;
                if let Some(f) = lat.as_mut() {
                    use std::io::Write as _;
                    for k in keys_waiting.drain(..) {
                        let _ = writeln!(f, "{}", k.elapsed().as_micros());
                    }
                }
                keys_waiting.clear();
                dirty = false;
            }
            tokio::select! {
                biased;
                k = krx.recv() => {
                    let Some((e, at)) = k else { break };
                    match e {
                        Event::Key(k) => {
                            keys_waiting.push(at);
                            for eff in crate::ui::fleet::update(&mut state, &k) {
                                match eff {
                                    FleetEffect::Quit => break 'outer,
                                    FleetEffect::Stage(names) => {
                                        // The change is planned, confirmed and rolled out on the
                                        // plain terminal, by the same code as `fleet plan` and
                                        // `fleet apply`; the view comes back after.
                                        let picked: Vec<NodeSpec> = nodes
                                            .iter()
                                            .filter(|n| names.contains(&n.name))
                                            .cloned()
                                            .collect();
                                        // The input thread lets go of the terminal first.
                                        stop_input.store(true, Ordering::Relaxed);
                                        tokio::time::sleep(Duration::from_millis(300)).await;
                                        let _ = ratatui::try_restore();
                                        if let Err(e) =
                                            crate::cli::fleet_apply::stage_interactive(&t, picked, settings)
                                        {
                                            say(&format!("{e:#}\n"));
                                        }
                                        say("\nEnter returns to the fleet view ");
                                        let _ = crate::cli::out::answer();
                                        terminal = ratatui::try_init()?;
                                        terminal.clear()?;
                                        let (ktx2, krx2) = mpsc::channel(64);
                                        stop_input = Arc::new(AtomicBool::new(false));
                                        input_thread(ktx2, Arc::clone(&stop_input));
                                        krx = krx2;
                                        dirty = true;
                                    }
                                    FleetEffect::Open(name) => {
                                        if let Some(n) = nodes.iter().find(|n| n.name == name) {
                                            open_node(&mut terminal, n, &t, &loaded, settings, &mut krx).await?;
                                            terminal.clear()?;
                                        }
                                    }
                                }
                            }
                        }
                        Event::Resize(w, h) => {
                            state.size = (w, h);
                            dirty = true;
                        }
                        _ => {}
                    }
                }
                e = rx.recv() => {
                    let Some(e) = e else { break };
                    let now = crate::collect::clock::now_ms();
                    match e {
                        FleetEvent::Row(n, s) => state.row(&n, *s, now),
                        FleetEvent::Reach(n, Reach::Down(why)) => state.reach(&n, Some(why), false),
                        FleetEvent::Reach(n, Reach::Connecting) => {
                            // Keep the last row on screen while reconnecting.
                            let keep = state.rows.iter().find(|r| r.name == n).and_then(|r| r.down.clone());
                            state.reach(&n, keep, true);
                        }
                        FleetEvent::Reach(n, Reach::Up) => state.reach(&n, None, false),
                    }
                    // Coalesced: drawn on the next tick.
                }
                _ = tick.tick() => dirty = true,
                () = signals.recv() => break 'outer,
            }
        }
        stop_input.store(true, Ordering::Relaxed);
        drop(guard);
        for t in tasks {
            t.abort();
        }
        anyhow::Ok(())
    });
    rt.shutdown_timeout(Duration::from_millis(500));
    r?;
    Ok(exit::OK)
}

/// The monitor's views on one node's live stream, read only, until Esc or q.
async fn open_node(
    terminal: &mut ratatui::DefaultTerminal,
    n: &NodeSpec,
    t: &crate::collect::fleet::Transport,
    loaded: &crate::ui::config::Loaded,
    settings: &crate::config::Settings,
    keys: &mut mpsc::Receiver<(Event, std::time::Instant)>,
) -> Result<()> {
    let (stx, srx) = tokio::sync::watch::channel(Arc::new(crate::domain::Snapshot::default()));
    let (t2, target) = (t.clone(), n.target.clone());
    let feed = tokio::spawn(async move {
        let why = crate::collect::fleet::full_stream(&t2, &target, &stx).await;
        log::warn!("{why}");
    });
    let (km, _) = crate::ui::keymap::Keymap::load(&loaded.config.keymap, None, true);
    let mut state =
        crate::ui::state::State::new(km, crate::domain::findings::Thresholds::default(), 1000);
    state.read_only = true;
    state.embedded = true;
    state.theme_notice = Some(format!("{} · Esc: back to the fleet", n.name));
    let (mtx, mrx) = mpsc::channel(64);
    let (rtx, mut rrx) = mpsc::channel(4);
    // Requests from the monitor (refresh, rescans) mean nothing for a remote stream.
    let drain = tokio::spawn(async move { while rrx.recv().await.is_some() {} });
    let runner = crate::ui::effect::EffectRunner {
        exec: crate::ui::effect::ExecSettings {
            // The node's own journal is on the node: `partop journal` there.
            journal: settings.journal.with_extension("fleet-view-none"),
            proc_root: "/nonexistent".into(),
            simulated: false,
            sim_state: None,
            models: None,
            model_log_dir: std::env::temp_dir(),
            nvidia_smi: None,
            nvidia_replay: true,
            exe: std::env::current_exe().unwrap_or_default(),
            apply_dir: std::env::temp_dir().join("partop-fleet-none"),
        },
        requests: rtx,
        tx: mtx.clone(),
    };
    // Keys go to the embedded monitor while it runs.
    let fwd = {
        let mtx = mtx.clone();
        async move {
            while let Some((e, _)) = keys.recv().await {
                let m = match e {
                    Event::Key(k) => crate::ui::state::Msg::Key(k),
                    Event::Resize(w, h) => crate::ui::state::Msg::Resize(w, h),
                    _ => continue,
                };
                if mtx.send(m).await.is_err() {
                    break;
                }
            }
        }
    };
    let app =
        crate::ui::app::run_with(terminal, state, &loaded.theme, srx, runner, mrx, |_| Ok(()));
    tokio::select! {
        r = app => { r?; }
        () = fwd => {}
    }
    feed.abort();
    drain.abort();
    Ok(())
}

/// `--prometheus URL`: rows from Prometheus's query API, read only.
pub fn run_prometheus(a: &FleetArgs) -> Result<u8> {
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
    let loaded = crate::ui::config::load(&crate::config::paths::config_dir(), None, None, true);
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
        let (ktx, mut krx) = mpsc::channel(64);
        let stop = Arc::new(AtomicBool::new(false));
        input_thread(ktx, Arc::clone(&stop));
        let (guard, mut terminal) = crate::ui::terminal::Guard::enter()?;
        let mut every = tokio::time::interval(Duration::from_secs(15));
        let mut signals = crate::ui::terminal::QuitSignals::new()?;
        loop {
            state.now_ms = crate::collect::clock::now_ms();
            terminal.draw(|f| crate::ui::fleet::render(f, &state, &loaded.theme))?;
            tokio::select! {
                k = krx.recv() => {
                    let Some((Event::Key(k), _)) = k else { continue };
                    if crate::ui::fleet::update(&mut state, &k).contains(&FleetEffect::Quit) {
                        break;
                    }
                }
                () = signals.recv() => break,
                _ = every.tick() => {
                    let u = url.clone();
                    if let Ok(Ok(rows)) = tokio::task::spawn_blocking(move || {
                        crate::collect::fleet_prometheus::read(&u, Duration::from_secs(10))
                    }).await {
                        for s in rows {
                            let h = s.host.clone();
                            state.row(&h, s, crate::collect::clock::now_ms());
                        }
                    }
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        drop(guard);
        anyhow::Ok(())
    })?;
    Ok(exit::OK)
}
