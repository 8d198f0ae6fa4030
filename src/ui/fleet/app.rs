//! The fleet as an app of the one app loop (`ui::app::run_app`, which runs the monitor too):
//! keys, node rows and what its effects report arrive as [`FleetMsg`]s; it reduces them, runs
//! its effects and draws (node rows coalesced to five frames a second; a key drawn at once).
//! Enter runs the monitor on the node in the same loop function and terminal, read only, on
//! that node's live stream read through the node's own transport; Esc returns. Planning and
//! the rollout run off the loop, through [`Rollouts`], which the command layer supplies.

use super::msg::{FleetEffect, FleetMsg, Staged};
use super::state::FleetState;
use super::update::update;
use super::view::render;
use crate::collect::fleet::{NodeSpec, Remote, Transport};
use crate::domain::{ComputeMode, MemoryMode};
use crate::ui::app::{App, Flow};
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

/// Runs the fleet view in the real terminal until quit (a key, SIGTERM, SIGHUP or SIGINT);
/// SIGTSTP suspends it like a shell job.
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
    let mut app = Fleet {
        state,
        theme,
        runner: &runner,
        dirty: false,
    };
    let r = crate::ui::app::run_app(terminal, &mut app, &mut rx, |t| {
        crate::ui::terminal::suspend(t)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    r.map(|()| app.state)
}

/// The fleet in the one app loop (`ui::app::run_app`) over any backend and any source of
/// messages: the real terminal above, a `TestBackend` and scripted keys in the headless tests.
/// Returns the final state (the channel stays the caller's: a test runs the loop again on it).
///
/// # Errors
/// The terminal fails.
pub async fn run_with<B>(
    terminal: &mut Terminal<B>,
    state: FleetState,
    theme: &Theme,
    runner: &FleetRunner,
    rx: &mut mpsc::Receiver<FleetMsg>,
) -> anyhow::Result<FleetState>
where
    B: Backend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let mut app = Fleet {
        state,
        theme,
        runner,
        dirty: false,
    };
    crate::ui::app::run_app(terminal, &mut app, rx, |_| Ok(())).await?;
    Ok(app.state)
}

/// The fleet as an app of the one loop: its state and reducer, no feed besides its channel
/// (node rows come as messages), its effects run here.
struct Fleet<'a> {
    state: FleetState,
    theme: &'a Theme,
    runner: &'a FleetRunner,
    /// Rows came since the last frame.
    dirty: bool,
}

impl<B> App<B> for Fleet<'_>
where
    B: Backend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Msg = FleetMsg;
    // Rows are coalesced to five frames a second.
    const TICK: Duration = Duration::from_millis(200);

    async fn feed(&mut self) -> Option<FleetMsg> {
        std::future::pending().await
    }

    fn resize(w: u16, h: u16) -> FleetMsg {
        FleetMsg::Resize(w, h)
    }

    fn tick(now_ms: u64) -> FleetMsg {
        FleetMsg::Tick(now_ms)
    }

    async fn step(
        &mut self,
        m: FleetMsg,
        terminal: &mut Terminal<B>,
        rx: &mut mpsc::Receiver<FleetMsg>,
    ) -> anyhow::Result<Flow> {
        // A node's row waits for the next tick (a fleet sends dozens a second); the clock
        // draws what came; what the operator did is drawn at once.
        let flow = match m {
            FleetMsg::Node(_) => {
                self.dirty = true;
                Flow::Wait
            }
            FleetMsg::Tick(_) if !self.dirty => Flow::Wait,
            _ => Flow::Draw,
        };
        for e in update(&mut self.state, m) {
            match e {
                FleetEffect::Quit => return Ok(Flow::Quit),
                FleetEffect::Open(name) => {
                    open_node(
                        terminal,
                        &mut self.state,
                        self.theme,
                        self.runner,
                        &name,
                        rx,
                    )
                    .await?;
                    terminal.clear()?;
                    return Ok(Flow::Draw);
                }
                FleetEffect::Plan {
                    nodes,
                    compute,
                    memory,
                } => off_loop(self.runner, move |r, say| {
                    FleetMsg::Planned(r.plan(&nodes, compute, memory, say))
                }),
                FleetEffect::Rollout(set) => off_loop(self.runner, move |r, say| {
                    FleetMsg::RolledOut(r.roll_out(&set, say))
                }),
            }
        }
        Ok(flow)
    }

    fn view(&mut self, frame: &mut ratatui::Frame<'_>) {
        self.dirty = false;
        render(frame, &self.state, self.theme);
    }
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
