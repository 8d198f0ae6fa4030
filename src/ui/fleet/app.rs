//! The fleet's app loop: owns the fleet's state, receives keys, node rows and what its effects
//! report as [`FleetMsg`]s, runs the reducer, performs its effects and draws (node rows are
//! coalesced to five frames a second; a key is drawn at once). Enter opens the node in the
//! monitor's own loop (`ui::app::run_with`), read only, on that node's live stream read
//! through the node's own transport; Esc returns. Planning and the rollout run off the loop,
//! through [`Rollouts`], which the command layer supplies.

use super::msg::{FleetEffect, FleetMsg, Staged};
use super::state::FleetState;
use super::update::update;
use super::view::render;
use crate::collect::fleet::{NodeSpec, Remote, Transport};
use crate::domain::{ComputeMode, MemoryMode};
use crate::ui::keymap::Keymap;
use crate::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::Event;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How a fleet change is planned and rolled out: the rollout protocol of `partop fleet plan`
/// and `partop fleet apply`, reached through the command layer. Blocking; each says its
/// progress a line at a time on `say`.
pub trait Rollouts: Send + Sync {
    /// Every node of `nodes` plans its own change; the saved set, or why there is none.
    ///
    /// # Errors
    /// A node that cannot plan (its reason), or the set cannot be saved.
    fn plan(
        &self,
        nodes: &[String],
        compute: Option<ComputeMode>,
        memory: Option<MemoryMode>,
        say: &(dyn Fn(String) + Sync),
    ) -> Result<Staged, String>;

    /// Rolls out a set whose fingerprint was typed, node by node, each verified.
    ///
    /// # Errors
    /// Where the rollout stopped and why (the first failing node stops it).
    fn roll_out(&self, set: &Staged, say: &(dyn Fn(String) + Sync)) -> Result<(), String>;
}

/// What the fleet's effects act on.
#[derive(Clone)]
pub struct FleetRunner {
    /// The nodes as resolved (empty for Prometheus: rows only, nothing to open).
    pub nodes: Vec<NodeSpec>,
    /// How they are read.
    pub transport: Option<Transport>,
    /// How a change goes to them (None: nothing here takes one).
    pub rollouts: Option<Arc<dyn Rollouts>>,
    /// The keymap of a monitor opened on a node (read only).
    pub monitor_keymap: Keymap,
    /// Where what the effects report goes (the loop's own channel).
    pub tx: mpsc::Sender<FleetMsg>,
}

/// The fleet's message for a terminal event: keys and resizes.
fn fleet_input(e: Event) -> Option<FleetMsg> {
    match e {
        Event::Key(k) => Some(FleetMsg::Key(k)),
        Event::Resize(w, h) => Some(FleetMsg::Resize(w, h)),
        _ => None,
    }
}

/// Runs the fleet view in the real terminal until quit (a key, SIGTERM, SIGHUP or SIGINT).
///
/// # Errors
/// The terminal fails.
pub async fn run(
    terminal: &mut ratatui::DefaultTerminal,
    state: FleetState,
    theme: &Theme,
    runner: FleetRunner,
    mut rx: mpsc::Receiver<FleetMsg>,
) -> anyhow::Result<FleetState> {
    let stop = Arc::new(AtomicBool::new(false));
    crate::ui::app::input_thread(runner.tx.clone(), Arc::clone(&stop), fleet_input);
    let r = run_with(terminal, state, theme, &runner, &mut rx).await;
    stop.store(true, Ordering::Relaxed);
    r
}

/// The fleet's loop over any backend and any source of messages: the real terminal above, a
/// `TestBackend` and scripted keys in the headless tests. Returns the final state (the
/// channel stays the caller's: a test runs the loop again on it).
///
/// # Errors
/// The terminal fails.
pub async fn run_with<B>(
    terminal: &mut Terminal<B>,
    mut state: FleetState,
    theme: &Theme,
    runner: &FleetRunner,
    rx: &mut mpsc::Receiver<FleetMsg>,
) -> anyhow::Result<FleetState>
where
    B: Backend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let size = terminal.size()?;
    update(&mut state, FleetMsg::Resize(size.width, size.height));
    update(&mut state, FleetMsg::Tick(crate::collect::clock::now_ms()));
    let mut signals = crate::ui::terminal::QuitSignals::new()?;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let (mut draw, mut dirty) = (true, false);
    loop {
        if draw {
            terminal.draw(|f| render(f, &state, theme))?;
            crate::ui::app::latency::drawn();
            dirty = false;
        }
        let effects = tokio::select! {
            biased;
            () = signals.recv() => vec![FleetEffect::Quit],
            _ = tick.tick() => {
                // Ages and the worst-first order move with the clock; rows that came since the
                // last frame are drawn now.
                update(&mut state, FleetMsg::Tick(crate::collect::clock::now_ms()));
                draw = dirty;
                Vec::new()
            }
            m = rx.recv() => {
                let Some(m) = m else { break };
                // A node's row waits for the next tick (a fleet sends dozens a second); what
                // the operator did is drawn at once.
                let node = matches!(m, FleetMsg::Node(_));
                dirty |= node;
                draw = !node;
                update(&mut state, m)
            }
        };
        for e in effects {
            match e {
                FleetEffect::Quit => return Ok(state),
                FleetEffect::Open(name) => {
                    open_node(terminal, &mut state, theme, runner, &name, rx).await?;
                    terminal.clear()?;
                    draw = true;
                }
                FleetEffect::Plan {
                    nodes,
                    compute,
                    memory,
                } => off_loop(runner, move |r, say| {
                    FleetMsg::Planned(r.plan(&nodes, compute, memory, say))
                }),
                FleetEffect::Rollout(set) => off_loop(runner, move |r, say| {
                    FleetMsg::RolledOut(r.roll_out(&set, say))
                }),
            }
        }
    }
    Ok(state)
}

/// Runs a planning or rollout job on a blocking thread: its lines and its end come back as
/// messages.
fn off_loop(
    runner: &FleetRunner,
    job: impl FnOnce(&dyn Rollouts, &(dyn Fn(String) + Sync)) -> FleetMsg + Send + 'static,
) {
    let tx = runner.tx.clone();
    let Some(r) = runner.rollouts.clone() else {
        let _ = tx.try_send(FleetMsg::Planned(Err(
            "nothing here can be changed: these nodes are read only".into(),
        )));
        return;
    };
    tokio::task::spawn_blocking(move || {
        let say = |l: String| {
            let _ = tx.blocking_send(FleetMsg::Said(l));
        };
        let end = job(r.as_ref(), &say);
        let _ = tx.blocking_send(end);
    });
}

/// The monitor's views on one node, read only, in the monitor's own loop, until it quits (Esc
/// or q): its samples from the node's full stream, its journal and every effect through the
/// node's transport ([`crate::ui::effect::ExecSettings::remote`]). Keys go to it; the fleet's
/// rows keep arriving meanwhile.
async fn open_node<B>(
    terminal: &mut Terminal<B>,
    fleet: &mut FleetState,
    theme: &Theme,
    runner: &FleetRunner,
    name: &str,
    rx: &mut mpsc::Receiver<FleetMsg>,
) -> anyhow::Result<()>
where
    B: Backend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    use crate::ui::state::Msg;
    let (Some(n), Some(t)) = (
        runner.nodes.iter().find(|n| n.name == name),
        runner.transport.as_ref(),
    ) else {
        fleet.notice = Some(format!(
            "{name}: its rows come from Prometheus; there is no stream of it to open"
        ));
        return Ok(());
    };
    let remote = Remote {
        name: n.name.clone(),
        target: n.target.clone(),
        transport: t.clone(),
    };
    let (stx, srx) = watch::channel(Arc::new(crate::domain::Snapshot::default()));
    let feed = {
        let (t, target) = (t.clone(), n.target.clone());
        tokio::spawn(async move {
            let why = crate::collect::fleet::full_stream(&t, &target, &stx).await;
            log::warn!("{why}");
        })
    };
    let mut state = crate::ui::state::State::new(
        runner.monitor_keymap.clone(),
        crate::domain::findings::Thresholds::default(),
        1000,
    );
    state.read_only = true;
    state.embedded = true;
    state.theme_notice = Some(format!(
        "{} · read only, via {} · Esc: back to the fleet",
        n.name,
        remote.via()
    ));
    let (mtx, mrx) = mpsc::channel(64);
    // The monitor's collector requests (refresh, rescans) mean nothing for a remote stream.
    let (rtx, mut rrx) = mpsc::channel(4);
    let drain = tokio::spawn(async move { while rrx.recv().await.is_some() {} });
    let monitor = crate::ui::effect::EffectRunner {
        exec: crate::ui::effect::ExecSettings::remote(remote),
        requests: rtx,
        tx: mtx.clone(),
    };
    let app = crate::ui::app::run_with(terminal, state, theme, srx, monitor, mrx, |_| Ok(()));
    tokio::pin!(app);
    let r = loop {
        tokio::select! {
            r = &mut app => break r.map(|_| ()),
            m = rx.recv() => match m {
                Some(FleetMsg::Key(k)) => {
                    let _ = mtx.send(Msg::Key(k)).await;
                }
                Some(FleetMsg::Resize(w, h)) => {
                    update(fleet, FleetMsg::Resize(w, h));
                    let _ = mtx.send(Msg::Resize(w, h)).await;
                }
                Some(m) => {
                    update(fleet, m);
                }
                None => break Ok(()),
            }
        }
    };
    feed.abort();
    drain.abort();
    r
}
