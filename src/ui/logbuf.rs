//! Where log records go while the monitor owns the screen: tui-logger's buffer, which the Log
//! view (6) draws. Records are handed to tui-logger's `Drain` as they are logged and moved into
//! the view's buffer by the app loop before each frame, so no thread wakes up to move them:
//! tui-logger's own `init_logger` starts one that wakes every 10 ms (100 times a second, measured
//! as part of the monitor's idle CPU). Sits beside the app loop; the collector and executors only
//! use `log`.

use log::{LevelFilter, Log, Metadata, Record};

struct ToView(LevelFilter);

impl Log for ToView {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= self.0
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            tui_logger::Drain::new().log(record);
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

/// Moves the records logged since the last call into the Log view's buffer (before a frame).
pub fn collect() {
    tui_logger::move_events();
}
