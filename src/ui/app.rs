//! The app loop: owns the state, receives input, snapshots and ticks, runs the reducer, performs
//! its effects, and draws when something changed. Input is read on its own thread, so a slow
//! collector can never delay a key press.

use super::effect::{EffectRunner, ExecSettings, Facts};
use super::state::{Effect, Msg, State, update};
use super::theme::Theme;
use super::view;
use crate::collect::clock;
use crate::collect::task::Request;
use crate::domain::Snapshot;
use ratatui::backend::Backend;
use ratatui::crossterm::event::{self, Event};
use ratatui::{DefaultTerminal, Terminal};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Key-to-screen latency, for the benchmark (`PARTOP_KEY_LATENCY_LOG=FILE`): the input thread
/// notes when it read each key, the loop writes how long until the next frame was on the
/// terminal (µs, one per line). Off (one relaxed load per key) unless the variable is set.
pub(crate) mod latency {
    use std::collections::VecDeque;
    use std::io::Write as _;
    use std::sync::{Mutex, OnceLock};
    use std::time::Instant;

    /// The log file and the keys read since the last frame.
    type Pending = Mutex<(std::fs::File, VecDeque<Instant>)>;

    static LOG: OnceLock<Option<Pending>> = OnceLock::new();

    fn log() -> Option<&'static Pending> {
        LOG.get_or_init(|| {
            let p = std::env::var_os("PARTOP_KEY_LATENCY_LOG")?;
            let f = crate::exec::safe_file::append(std::path::Path::new(&p), false).ok()?;
            Some(Mutex::new((f, VecDeque::new())))
        })
        .as_ref()
    }

    /// A key was read now.
    pub fn key() {
        if let Some(m) = log()
            && let Ok(mut g) = m.lock()
        {
            g.1.push_back(Instant::now());
        }
    }

    /// A frame was drawn now.
    pub fn drawn() {
        if let Some(m) = log()
            && let Ok(mut g) = m.lock()
        {
            let (f, q) = &mut *g;
            while let Some(t) = q.pop_front() {
                let _ = writeln!(f, "{}", t.elapsed().as_micros());
            }
        }
    }
}

/// Spawns the input thread of an app: each terminal event becomes the app's message through
/// `map` (None drops it); it stops when `stop` is set or the channel closes.
fn input_thread<M: Send + 'static>(
    tx: mpsc::Sender<M>,
    stop: Arc<AtomicBool>,
    map: fn(Event) -> Option<M>,
) {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match event::poll(Duration::from_millis(250)) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => break,
            }
            let e = match event::read() {
                Ok(e) => e,
                Err(_) => break,
            };
            if matches!(e, Event::Key(_)) {
                latency::key();
            }
            let Some(msg) = map(e) else { continue };
            if tx.blocking_send(msg).is_err() {
                break;
            }
        }
    });
}

/// Sets the input thread's stop flag when the loop is left, however it is left.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `app` in the real terminal until it quits (a key, SIGTERM, SIGHUP or SIGINT): the one
/// input thread turns terminal events into its messages on `tx` (stopped when the loop ends),
/// the loop reads them from `rx` with what its effects send back; SIGTSTP suspends like a
/// shell job. Every app's terminal entry (the monitor, the fleet, the cluster) is this.
///
/// # Errors
/// The terminal fails.
pub(crate) async fn run_in_terminal<A: App>(
    terminal: &mut DefaultTerminal,
    app: &mut A,
    tx: mpsc::Sender<A::Msg>,
    rx: &mut mpsc::Receiver<A::Msg>,
) -> anyhow::Result<()> {
    let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
    input_thread(tx, Arc::clone(&stop.0), A::input);
    run_app(terminal, app, rx, super::terminal::suspend).await
}

/// Runs `app` over any backend and any source of messages (the headless tests: a
/// `TestBackend`, scripted messages on `rx`) until it quits; nothing suspends it.
///
/// # Errors
/// The backend fails.
pub(crate) async fn run_headless<A, B>(
    terminal: &mut Terminal<B>,
    app: &mut A,
    rx: &mut mpsc::Receiver<A::Msg>,
) -> anyhow::Result<()>
where
    A: App,
    B: Backend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    run_app(terminal, app, rx, |_| Ok(())).await
}

/// Runs the monitor in the real terminal until quit (a key, SIGTERM, SIGHUP or SIGINT).
pub async fn run(
    terminal: &mut DefaultTerminal,
    state: State,
    theme: &Theme,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    requests: mpsc::Sender<Request>,
    exec: ExecSettings,
) -> anyhow::Result<State> {
    let (tx, mut rx) = mpsc::channel(64);
    let runner = EffectRunner {
        exec,
        requests,
        tx: tx.clone(),
    };
    let mut app = Monitor::new(state, theme, snapshots, runner);
    run_in_terminal(terminal, &mut app, tx, &mut rx).await?;
    Ok(app.state)
}

/// What the loop does after a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Leave.
    Quit,
    /// Draw now.
    Draw,
    /// Draw only if no frame was drawn for most of a second (ages on screen move).
    DrawIfStale,
    /// Nothing to draw yet.
    Wait,
}

/// An app the one loop runs (the monitor, the fleet, the cluster): its own state, messages,
/// reducer, view and effect runner. The loop owns the terminal, the input and the clock, and
/// the order of what arrives; the app reduces, runs its effects and draws. An app may hold
/// another as its active one (the fleet, a node's monitor): it routes messages, feed and
/// drawing to it, in the same loop.
pub(crate) trait App {
    /// What its reducer receives.
    type Msg: Send + 'static;
    /// How often its clock ticks.
    const TICK: Duration;
    /// Its feed besides its channel (the monitor's samples), taken before anything else that
    /// is ready; never ready for an app without one. None: the feed is gone, the loop ends.
    async fn feed(&mut self) -> Option<Self::Msg>;
    /// Its message for a terminal event (None: it has no use for it).
    fn input(e: Event) -> Option<Self::Msg>;
    /// The message for a new terminal size.
    fn resize(w: u16, h: u16) -> Self::Msg;
    /// The message for the clock.
    fn tick(now_ms: u64) -> Self::Msg;
    /// Reduces one message and runs its effects.
    fn step(&mut self, m: Self::Msg) -> Flow;
    /// Just before a frame: what arrived outside the messages (the monitor's log records).
    fn before_draw(&mut self) -> Flow {
        Flow::Wait
    }
    /// Draws a frame.
    fn view(&mut self, frame: &mut ratatui::Frame<'_>);
}

/// The one app loop, over any ratatui backend and any source of messages (keys, resizes, and
/// what effects send back): the real terminal, a `TestBackend` and scripted input in the
/// headless tests. A feed ready is taken before a message, a message before the clock, and a
/// quit signal (SIGTERM, SIGINT, SIGHUP) ends it; SIGTSTP suspends like a shell job.
async fn run_app<A, B>(
    terminal: &mut Terminal<B>,
    app: &mut A,
    rx: &mut mpsc::Receiver<A::Msg>,
    mut suspend: impl FnMut(&mut Terminal<B>) -> std::io::Result<()>,
) -> anyhow::Result<()>
where
    A: App,
    B: Backend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let size = terminal.size()?;
    for m in [A::resize(size.width, size.height), A::tick(clock::now_ms())] {
        if app.step(m) == Flow::Quit {
            return Ok(());
        }
    }
    let mut signals = super::terminal::QuitSignals::new()?;
    let mut tstp = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(
        nix::sys::signal::Signal::SIGTSTP as i32,
    ))?;
    let mut tick = tokio::time::interval(A::TICK);
    let mut redraw = true;
    let mut last_draw = std::time::Instant::now();
    loop {
        if redraw {
            if app.before_draw() == Flow::Quit {
                break;
            }
            terminal.draw(|f| app.view(f))?;
            latency::drawn();
            last_draw = std::time::Instant::now();
        }
        let m = tokio::select! {
            // A sample that is ready is taken before a key that is ready: what the operator acts
            // on next is the newest view of the node (and scripted input is deterministic).
            biased;
            m = app.feed() => match m {
                Some(m) => m,
                None => break,
            },
            Some(m) = rx.recv() => m,
            _ = tick.tick() => A::tick(clock::now_ms()),
            () = signals.recv() => break,
            _ = tstp.recv() => {
                suspend(terminal)?;
                redraw = true;
                continue;
            }
        };
        redraw = match app.step(m) {
            Flow::Quit => break,
            Flow::Draw => true,
            // Ages on screen move once a second: a tick redraws only if nothing else has.
            Flow::DrawIfStale => last_draw.elapsed() >= Duration::from_millis(950),
            Flow::Wait => false,
        };
    }
    Ok(())
}

/// The monitor as an app of the loop: its state and reducer, its samples as its feed, its
/// effects through the runner (which never touches the state). The fleet holds one as its
/// active app while a node is open.
pub(crate) struct Monitor<'a> {
    /// Its state (returned when the loop ends).
    pub(crate) state: State,
    theme: &'a Theme,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    runner: EffectRunner,
}

impl<'a> Monitor<'a> {
    /// The monitor over these samples, its effects run by `runner`.
    pub(crate) fn new(
        state: State,
        theme: &'a Theme,
        snapshots: watch::Receiver<Arc<Snapshot>>,
        runner: EffectRunner,
    ) -> Self {
        Monitor {
            state,
            theme,
            snapshots,
            runner,
        }
    }

    /// Runs every effect, whatever caused it; true when one is Quit. What the effects may read
    /// is copied only when there are effects (most messages have none).
    fn run(&self, effects: Vec<Effect>) -> bool {
        if effects.is_empty() {
            return false;
        }
        let facts = Facts {
            grace_ms: self.state.grace_ms,
            snapshot: self.state.snapshot.clone(),
            followed: self.state.followed(),
        };
        let mut quit = false;
        for e in effects {
            quit |= self.runner.run(e, &facts);
        }
        quit
    }
}

impl App for Monitor<'_> {
    type Msg = Msg;
    const TICK: Duration = Duration::from_secs(1);

    async fn feed(&mut self) -> Option<Msg> {
        self.snapshots.changed().await.ok()?;
        Some(Msg::Snapshot(Arc::clone(
            &self.snapshots.borrow_and_update(),
        )))
    }

    /// Keys, resizes, presses and the wheel (motion, reported while the mouse is captured,
    /// would only wake the loop).
    fn input(e: Event) -> Option<Msg> {
        match e {
            Event::Key(k) => Some(Msg::Key(k)),
            Event::Resize(w, h) => Some(Msg::Resize(w, h)),
            Event::Mouse(m)
                if matches!(
                    m.kind,
                    event::MouseEventKind::Down(_)
                        | event::MouseEventKind::ScrollDown
                        | event::MouseEventKind::ScrollUp
                ) =>
            {
                Some(Msg::Mouse(m))
            }
            _ => None,
        }
    }

    fn resize(w: u16, h: u16) -> Msg {
        Msg::Resize(w, h)
    }

    fn tick(now_ms: u64) -> Msg {
        Msg::Tick(now_ms)
    }

    fn step(&mut self, m: Msg) -> Flow {
        let tick = matches!(m, Msg::Tick(_));
        let effects = update(&mut self.state, m);
        if self.run(effects) {
            Flow::Quit
        } else if tick {
            Flow::DrawIfStale
        } else {
            Flow::Draw
        }
    }

    fn before_draw(&mut self) -> Flow {
        let lines = super::logbuf::take();
        if !lines.is_empty() {
            let effects = update(&mut self.state, Msg::Log(lines));
            if self.run(effects) {
                return Flow::Quit;
            }
        }
        Flow::Wait
    }

    fn view(&mut self, frame: &mut ratatui::Frame<'_>) {
        view::render(frame, &self.state, self.theme);
    }
}

/// The monitor in the one app loop, over any ratatui backend and any source of messages: the
/// real terminal above, a `TestBackend` and scripted input in the headless tests. Returns the
/// final state.
pub async fn run_with<B>(
    terminal: &mut Terminal<B>,
    state: State,
    theme: &Theme,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    runner: EffectRunner,
    mut rx: mpsc::Receiver<Msg>,
    suspend: impl FnMut(&mut Terminal<B>) -> std::io::Result<()>,
) -> anyhow::Result<State>
where
    B: Backend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let mut app = Monitor::new(state, theme, snapshots, runner);
    run_app(terminal, &mut app, &mut rx, suspend).await?;
    Ok(app.state)
}
