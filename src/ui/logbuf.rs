//! Where log records go while the monitor owns the screen: a bounded buffer the app loop takes
//! from before each frame and hands to the reducer (`Msg::Log`), so the Log view draws from the
//! state like every other view (scrolls, wraps at words, snapshot-testable) and no thread wakes
//! up to move records. Sits beside the app loop; the collector and executors only use `log`.

use log::{Level, LevelFilter, Log, Metadata, Record};
use std::collections::VecDeque;
use std::sync::Mutex;

/// One logged record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// When, ms since epoch.
    pub at_ms: u64,
    /// Its level.
    pub level: Level,
    /// The message.
    pub text: String,
}

/// Records not yet taken by the app loop (bounded: a flood drops the oldest, and says so).
static PENDING: Mutex<(VecDeque<LogLine>, u64)> = Mutex::new((VecDeque::new(), 0));

/// How many records wait at most between two frames.
const PENDING_MAX: usize = 2_000;

struct ToView(LevelFilter);

impl Log for ToView {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= self.0
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = LogLine {
            at_ms: crate::collect::clock::now_ms(),
            level: record.level(),
            text: record.args().to_string(),
        };
        if let Ok(mut g) = PENDING.lock() {
            if g.0.len() >= PENDING_MAX {
                g.0.pop_front();
                g.1 += 1;
            }
            g.0.push_back(line);
        }
    }

    fn flush(&self) {}
}

/// Sends `log` records at `level` and above to the Log view (once per process; a second call
/// changes nothing).
pub fn install(level: LevelFilter) {
    if log::set_boxed_logger(Box::new(ToView(level))).is_ok() {
        log::set_max_level(level);
    }
}

/// The records logged since the last call (a note first when some were dropped).
pub fn take() -> Vec<LogLine> {
    let Ok(mut g) = PENDING.lock() else {
        return Vec::new();
    };
    let dropped = std::mem::take(&mut g.1);
    let mut v: Vec<LogLine> = g.0.drain(..).collect();
    if dropped > 0 {
        v.insert(
            0,
            LogLine {
                at_ms: v.first().map_or(0, |l| l.at_ms),
                level: Level::Warn,
                text: format!(
                    "{dropped} log lines were dropped (more than {PENDING_MAX} between two frames)"
                ),
            },
        );
    }
    v
}
