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

/// The monitor's message for a terminal event: keys, resizes, presses and the wheel (motion,
/// reported while the mouse is captured, would only wake the loop).
fn monitor_input(e: Event) -> Option<Msg> {
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

/// Spawns the input thread of an app (the monitor, the fleet): each terminal event becomes the
/// app's message through `map` (None drops it); it stops when `stop` is set or the channel
/// closes.
pub fn input_thread<M: Send + 'static>(
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

/// Runs the monitor in the real terminal until quit (a key, SIGTERM, SIGHUP or SIGINT): keys
/// from the input thread, SIGTSTP suspends like a shell job.
pub async fn run(
    terminal: &mut DefaultTerminal,
    state: State,
    theme: &Theme,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    requests: mpsc::Sender<Request>,
    exec: ExecSettings,
) -> anyhow::Result<State> {
    let (tx, rx) = mpsc::channel(64);
    let stop = Arc::new(AtomicBool::new(false));
    input_thread(tx.clone(), Arc::clone(&stop), monitor_input);
    let runner = EffectRunner { exec, requests, tx };
    let r = run_with(terminal, state, theme, snapshots, runner, rx, |t| {
        super::terminal::suspend(t)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    r
}

/// The app loop over any ratatui backend and any source of messages (keys, resizes, and what
/// effects send back): the real terminal above, a `TestBackend` and scripted input in the
/// headless tests. Owns the state, draws when something changed, and hands every effect to the
/// runner, which never touches the state. Returns the final state.
pub async fn run_with<B>(
    terminal: &mut Terminal<B>,
    mut state: State,
    theme: &Theme,
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    runner: EffectRunner,
    mut rx: mpsc::Receiver<Msg>,
    mut suspend: impl FnMut(&mut Terminal<B>) -> std::io::Result<()>,
) -> anyhow::Result<State>
where
    B: Backend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let size = terminal.size()?;
    let mut pending: std::collections::VecDeque<Effect> = std::collections::VecDeque::new();
    pending.extend(update(&mut state, Msg::Resize(size.width, size.height)));
    pending.extend(update(&mut state, Msg::Tick(clock::now_ms())));
    let mut signals = super::terminal::QuitSignals::new()?;
    let mut tstp = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(
        nix::sys::signal::Signal::SIGTSTP as i32,
    ))?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut redraw = true;
    let mut last_draw = std::time::Instant::now();
    loop {
        // Every effect is run, whatever caused it and whether or not a frame is drawn. What
        // the effects may read is copied only when there are effects (most messages have none).
        let mut quit = false;
        if !pending.is_empty() {
            let facts = Facts {
                grace_ms: state.grace_ms,
                snapshot: state.snapshot.clone(),
                applying: state.applying.clone(),
            };
            while let Some(e) = pending.pop_front() {
                quit |= runner.run(e, &facts);
            }
        }
        if quit {
            break;
        }
        if redraw {
            let lines = super::logbuf::take();
            if !lines.is_empty() {
                pending.extend(update(&mut state, Msg::Log(lines)));
            }
            terminal.draw(|f| view::render(f, &state, theme))?;
            latency::drawn();
            last_draw = std::time::Instant::now();
        }
        let (effects, draw) = tokio::select! {
            // A sample that is ready is taken before a key that is ready: what the operator acts
            // on next is the newest view of the node (and scripted input is deterministic).
            biased;
            r = snapshots.changed() => {
                if r.is_err() {
                    break;
                }
                let s = Arc::clone(&snapshots.borrow_and_update());
                (update(&mut state, Msg::Snapshot(s)), true)
            }
            Some(m) = rx.recv() => (update(&mut state, m), true),
            _ = tick.tick() => {
                // Ages on screen move once a second: a tick redraws only if nothing else has.
                let e = update(&mut state, Msg::Tick(clock::now_ms()));
                (e, last_draw.elapsed() >= Duration::from_millis(950))
            }
            () = signals.recv() => (vec![Effect::Quit], false),
            _ = tstp.recv() => {
                suspend(terminal)?;
                (Vec::new(), true)
            }
        };
        pending.extend(effects);
        redraw = draw;
    }
    Ok(state)
}
