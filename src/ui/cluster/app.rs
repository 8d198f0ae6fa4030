//! The cluster view as an app of the one app loop (`ui::app`): its feed is the API
//! server's watch (`collect::cluster::Watch::changes` wakes it on every event; the stores are
//! reread at most once a frame, so a burst of a thousand node updates costs one reread); keys
//! and a node's live detail arrive on its channel.

use super::msg::{ClusterEffect, ClusterMsg};
use super::rollout::{ClusterRollouts, off_loop};
use super::state::ClusterState;
use super::update::update;
use super::view::render;
use crate::collect::cluster::Watch;
use crate::ui::app::{App, Flow};
use crate::ui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::Event;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// A node's live detail: the lines to show, or why there are none.
pub type LiveFuture = Pin<Box<dyn Future<Output = Result<Vec<String>, String>> + Send>>;

/// Where a node's live detail comes from (its `partop serve` through the API server's pod
/// proxy, supplied by the command layer); None: the view says there is none.
pub type LiveSource = Arc<dyn Fn(String) -> LiveFuture + Send + Sync>;

/// The cluster view in the one loop.
struct Cluster<'a> {
    state: ClusterState,
    theme: &'a Theme,
    watch: &'a Watch,
    changes: tokio::sync::watch::Receiver<u64>,
    live: Option<LiveSource>,
    /// How a staged rollout reaches the cluster (None: read only).
    rollouts: Option<Arc<dyn ClusterRollouts>>,
    tx: mpsc::Sender<ClusterMsg>,
    /// The watch saw something since the last reread.
    dirty: bool,
}

impl<'a> Cluster<'a> {
    /// The view over `watch`, what it has read taken at its first frame.
    fn new(
        state: ClusterState,
        theme: &'a Theme,
        watch: &'a Watch,
        live: Option<LiveSource>,
        rollouts: Option<Arc<dyn ClusterRollouts>>,
        tx: mpsc::Sender<ClusterMsg>,
    ) -> Self {
        Cluster {
            state,
            theme,
            watch,
            changes: watch.changes(),
            live,
            rollouts,
            tx,
            dirty: true,
        }
    }

    /// The watch's view, as a message.
    fn reread(&self) -> ClusterMsg {
        let (nodes, pods) = self.watch.view();
        ClusterMsg::View {
            nodes,
            pods,
            trouble: self.watch.trouble(),
        }
    }
}

impl App for Cluster<'_> {
    type Msg = ClusterMsg;
    // Watch events are coalesced to five frames a second.
    const TICK: Duration = Duration::from_millis(200);

    async fn feed(&mut self) -> Option<ClusterMsg> {
        if self.changes.changed().await.is_err() {
            // The watch's sender lives as long as the Watch: never here, but never spin.
            std::future::pending::<()>().await;
        }
        Some(ClusterMsg::Changed)
    }

    /// Keys and resizes.
    fn input(e: Event) -> Option<ClusterMsg> {
        match e {
            Event::Key(k) => Some(ClusterMsg::Key(k)),
            Event::Resize(w, h) => Some(ClusterMsg::Resize(w, h)),
            _ => None,
        }
    }

    fn resize(w: u16, h: u16) -> ClusterMsg {
        ClusterMsg::Resize(w, h)
    }

    fn tick(now_ms: u64) -> ClusterMsg {
        ClusterMsg::Tick(now_ms)
    }

    fn step(&mut self, m: ClusterMsg) -> Flow {
        if matches!(m, ClusterMsg::Changed) {
            self.dirty = true;
            return Flow::Wait;
        }
        // What the watch saw is taken at the next frame, or before a key: what the operator
        // acts on is the newest view of the cluster.
        let flow = if matches!(m, ClusterMsg::Tick(_)) && !self.dirty {
            Flow::Wait
        } else {
            Flow::Draw
        };
        if self.dirty {
            self.dirty = false;
            let v = self.reread();
            update(&mut self.state, v);
        }
        for e in update(&mut self.state, m) {
            match e {
                ClusterEffect::Quit => return Flow::Quit,
                ClusterEffect::Live(node) => self.ask_live(node),
                e => off_loop(self.rollouts.clone(), &self.tx, e),
            }
        }
        flow
    }

    fn view(&mut self, frame: &mut ratatui::Frame<'_>) {
        render(frame, &self.state, self.theme);
    }
}

impl Cluster<'_> {
    /// Asks the live source for `node`'s detail off the loop; it comes back as a message.
    fn ask_live(&self, node: String) {
        let tx = self.tx.clone();
        let Some(live) = self.live.clone() else {
            let _ = tx.try_send(ClusterMsg::Live(
                node,
                Err("no live source: the view was started without one".into()),
            ));
            return;
        };
        tokio::spawn(async move {
            let r = live(node.clone()).await;
            let _ = tx.send(ClusterMsg::Live(node, r)).await;
        });
    }
}

/// Runs the cluster view in the real terminal until quit (a key, SIGTERM, SIGHUP or SIGINT).
///
/// # Errors
/// The terminal fails.
pub async fn run(
    terminal: &mut ratatui::DefaultTerminal,
    state: ClusterState,
    theme: &Theme,
    watch: &Watch,
    live: Option<LiveSource>,
    rollouts: Option<Arc<dyn ClusterRollouts>>,
) -> anyhow::Result<ClusterState> {
    let (tx, mut rx) = mpsc::channel(256);
    let mut app = Cluster::new(state, theme, watch, live, rollouts, tx.clone());
    crate::ui::app::run_in_terminal(terminal, &mut app, tx, &mut rx).await?;
    Ok(app.state)
}

/// The cluster view in the one app loop over any backend and any source of messages (the
/// headless tests: a `TestBackend`, scripted keys on `tx`/`rx`). Returns the final state.
///
/// # Errors
/// The terminal fails.
pub async fn run_with<B>(
    terminal: &mut Terminal<B>,
    state: ClusterState,
    theme: &Theme,
    watch: &Watch,
    live: Option<LiveSource>,
    tx: mpsc::Sender<ClusterMsg>,
    rx: &mut mpsc::Receiver<ClusterMsg>,
) -> anyhow::Result<ClusterState>
where
    B: Backend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    run_staging(terminal, state, theme, watch, live, None, tx, rx).await
}

/// [`run_with`] with a way to change the cluster: a rollout staged in the view plans and runs
/// through `rollouts` (the headless tests hand it the command layer's, as `run` does).
///
/// # Errors
/// The terminal fails.
#[expect(clippy::too_many_arguments, reason = "run_with's, and the rollouts")]
pub async fn run_staging<B>(
    terminal: &mut Terminal<B>,
    state: ClusterState,
    theme: &Theme,
    watch: &Watch,
    live: Option<LiveSource>,
    rollouts: Option<Arc<dyn ClusterRollouts>>,
    tx: mpsc::Sender<ClusterMsg>,
    rx: &mut mpsc::Receiver<ClusterMsg>,
) -> anyhow::Result<ClusterState>
where
    B: Backend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let mut app = Cluster::new(state, theme, watch, live, rollouts, tx);
    crate::ui::app::run_headless(terminal, &mut app, rx).await?;
    Ok(app.state)
}
