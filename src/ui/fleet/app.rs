//! The fleet as an app of the one app loop (`ui::app`, which runs the monitor too): keys,
//! node rows and what its effects report arrive as [`FleetMsg`]s; it reduces them, runs its
//! effects and draws (node rows coalesced to five frames a second; a key drawn at once).
//! Enter makes the node's monitor the active app of the same loop (one terminal, one input
//! thread, one clock), read only, on that node's live stream read through the node's own
//! transport; Esc returns to the fleet as it was left. Planning and
//! the rollout run off the loop, through [`Rollouts`], which the command layer supplies.

use super::msg::{FleetEffect, FleetMsg, Staged};
use super::state::FleetState;
use super::update::update;
use super::view::render;
use crate::collect::fleet::{NodeSpec, Remote, Transport};
use crate::collect::task::Request;
use crate::domain::{ComputeMode, MemoryMode};
use crate::ui::app::{App, Flow, Monitor};
use crate::ui::effect::{EffectRunner, ExecSettings};
use crate::ui::keymap::Keymap;
use crate::ui::state::{Msg, State};
use crate::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::Event;
use std::sync::Arc;
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
    let mut app = Fleet::new(state, theme, &runner);
    crate::ui::app::run_in_terminal(terminal, &mut app, runner.tx.clone(), &mut rx).await?;
    Ok(app.state)
}

/// The fleet in the one app loop over any backend and any source of messages: the real
/// terminal above, a `TestBackend` and scripted keys in the headless tests. Returns the final
/// state (the channel stays the caller's: a test runs the loop again on it).
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
    let mut app = Fleet::new(state, theme, runner);
    crate::ui::app::run_headless(terminal, &mut app, rx).await?;
    Ok(app.state)
}

/// The fleet as an app of the one loop: its state and reducer, no feed besides its channel
/// (node rows come as messages) unless a node is open, its effects run here. A node opened is
/// its active app: keys, the screen and the open node's samples go to that node's monitor
/// until it quits; the fleet's rows keep arriving meanwhile.
struct Fleet<'a> {
    state: FleetState,
    theme: &'a Theme,
    runner: &'a FleetRunner,
    /// Rows came since the last frame.
    dirty: bool,
    /// The node open in the monitor, if one is.
    open: Option<OpenNode<'a>>,
}

/// A node open from the fleet: the monitor's views on it, read only, fed by its full stream
/// through the node's own transport, its effects through that transport
/// ([`crate::ui::effect::ExecSettings::Remote`]: nothing that changes a node can be built on
/// it).
struct OpenNode<'a> {
    name: String,
    monitor: Monitor<'a>,
    /// What the monitor's effects send back.
    said: mpsc::Receiver<Msg>,
    /// The monitor's collector requests (refresh, rescans): they mean nothing for a remote
    /// stream, and are dropped as they come.
    requests: mpsc::Receiver<Request>,
    /// The task reading the node's stream.
    stream: tokio::task::JoinHandle<()>,
    /// When the monitor's clock last ticked (it ticks once a second, the fleet's five times).
    ticked_ms: u64,
}

impl Drop for OpenNode<'_> {
    fn drop(&mut self) {
        self.stream.abort();
    }
}

impl<'a> Fleet<'a> {
    fn new(state: FleetState, theme: &'a Theme, runner: &'a FleetRunner) -> Self {
        Fleet {
            state,
            theme,
            runner,
            dirty: false,
            open: None,
        }
    }

    /// Opens node `name`'s monitor as the active app; the fleet says why not where it cannot.
    fn open(&mut self, name: &str) {
        let runner = self.runner;
        let (Some(n), Some(t)) = (
            runner.nodes.iter().find(|n| n.name == name),
            runner.transport.as_ref(),
        ) else {
            self.state.notice = Some(format!(
                "{name}: its rows come from Prometheus; there is no stream of it to open"
            ));
            return;
        };
        let remote = Remote {
            name: n.name.clone(),
            target: n.target.clone(),
            transport: t.clone(),
        };
        let (stx, srx) = watch::channel(Arc::new(crate::domain::Snapshot::default()));
        let stream = {
            let (t, target) = (t.clone(), n.target.clone());
            tokio::spawn(async move {
                let why = crate::collect::fleet::full_stream(&t, &target, &stx).await;
                log::warn!("{why}");
            })
        };
        let state = remote_monitor(&runner.monitor_keymap, &remote);
        let (mtx, said) = mpsc::channel(64);
        let (rtx, requests) = mpsc::channel(4);
        let runner = EffectRunner {
            exec: ExecSettings::Remote(remote),
            requests: rtx,
            tx: mtx,
        };
        let mut monitor = Monitor::new(state, self.theme, srx, runner);
        // As the loop starts an app: its size, then its clock.
        let (w, h) = self.state.size;
        let now = self.state.now_ms;
        let mut quit = monitor.step(Msg::Resize(w, h)) == Flow::Quit;
        quit |= monitor.step(Msg::Tick(now)) == Flow::Quit;
        if !quit {
            self.open = Some(OpenNode {
                name: name.to_string(),
                monitor,
                said,
                requests,
                stream,
                ticked_ms: now,
            });
        }
    }

    /// A message while a node is open: keys, the screen and its samples go to its monitor,
    /// rows to the fleet (whose effects wait until the node is closed); the monitor quitting
    /// (Esc, q) brings the fleet back as it was.
    fn step_open(&mut self, m: FleetMsg) -> Flow {
        let Some(open) = self.open.as_mut() else {
            return Flow::Draw;
        };
        let to_monitor = match m {
            FleetMsg::Key(k) => Msg::Key(k),
            FleetMsg::Monitor(m) => *m,
            FleetMsg::Resize(w, h) => {
                update(&mut self.state, FleetMsg::Resize(w, h));
                Msg::Resize(w, h)
            }
            FleetMsg::Tick(now) => {
                update(&mut self.state, FleetMsg::Tick(now));
                if now.saturating_sub(open.ticked_ms) < 1000 {
                    return Flow::Wait;
                }
                open.ticked_ms = now;
                Msg::Tick(now)
            }
            FleetMsg::StreamEnded(name) => {
                self.close();
                update(&mut self.state, FleetMsg::StreamEnded(name));
                return Flow::Draw;
            }
            m => {
                update(&mut self.state, m);
                return Flow::Wait;
            }
        };
        match open.monitor.step(to_monitor) {
            Flow::Quit => {
                self.close();
                Flow::Draw
            }
            f => f,
        }
    }

    /// The open node's monitor quits: the fleet is the active app again, as it was left.
    fn close(&mut self) {
        self.open = None;
        self.dirty = true;
    }
}

impl App for Fleet<'_> {
    type Msg = FleetMsg;
    // Rows are coalesced to five frames a second.
    const TICK: Duration = Duration::from_millis(200);

    /// Nothing of its own; while a node is open, that node's samples and what its monitor's
    /// effects send back.
    async fn feed(&mut self) -> Option<FleetMsg> {
        let Some(open) = self.open.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            tokio::select! {
                biased;
                m = open.monitor.feed() => {
                    return Some(match m {
                        Some(m) => FleetMsg::Monitor(Box::new(m)),
                        None => FleetMsg::StreamEnded(open.name.clone()),
                    });
                }
                Some(m) = open.said.recv() => return Some(FleetMsg::Monitor(Box::new(m))),
                Some(_) = open.requests.recv() => {}
            }
        }
    }

    /// Keys and resizes.
    fn input(e: Event) -> Option<FleetMsg> {
        match e {
            Event::Key(k) => Some(FleetMsg::Key(k)),
            Event::Resize(w, h) => Some(FleetMsg::Resize(w, h)),
            _ => None,
        }
    }

    fn resize(w: u16, h: u16) -> FleetMsg {
        FleetMsg::Resize(w, h)
    }

    fn tick(now_ms: u64) -> FleetMsg {
        FleetMsg::Tick(now_ms)
    }

    fn step(&mut self, m: FleetMsg) -> Flow {
        if self.open.is_some() {
            return self.step_open(m);
        }
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
                FleetEffect::Quit => return Flow::Quit,
                FleetEffect::Open(name) => {
                    self.open(&name);
                    return Flow::Draw;
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
        flow
    }

    fn before_draw(&mut self) -> Flow {
        if let Some(open) = self.open.as_mut()
            && open.monitor.before_draw() == Flow::Quit
        {
            self.close();
        }
        Flow::Wait
    }

    fn view(&mut self, frame: &mut ratatui::Frame<'_>) {
        if let Some(open) = self.open.as_mut() {
            open.monitor.view(frame);
            return;
        }
        self.dirty = false;
        render(frame, &self.state, self.theme);
    }
}

/// The monitor's state for a node opened from the fleet: read only whatever keymap it was
/// given (the node is not this machine), drawn inside the fleet, its banner saying so.
pub fn remote_monitor(keymap: &Keymap, remote: &Remote) -> State {
    let mut state = State::new(
        keymap.clone().read_only(),
        crate::domain::findings::Thresholds::default(),
        1000,
    );
    state.read_only = true;
    state.embedded = true;
    state.theme_notice = Some(format!(
        "{} · read only, via {} · Esc: back to the fleet",
        remote.name,
        remote.via()
    ));
    state
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
