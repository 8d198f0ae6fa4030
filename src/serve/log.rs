//! Log records of `partop serve` on stderr, one line each, prefixed with the syslog priority
//! (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug) that journald reads from a service's
//! stderr (SyslogLevelPrefix=, on by default), so `journalctl -p warning -u partop-serve` works.

use log::{Level, LevelFilter, Log, Metadata, Record};
use std::io::Write as _;

struct Stderr(LevelFilter);

impl Log for Stderr {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= self.0
    }

    fn log(&self, r: &Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let p = match r.level() {
            Level::Error => 3,
            Level::Warn => 4,
            Level::Info => 6,
            Level::Debug | Level::Trace => 7,
        };
        // One write per line, newlines inside the message escaped: one record, one line.
        let line = format!("<{p}>{}\n", r.args().to_string().replace('\n', "\\n"));
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// Sends `log` records at `level` and above to stderr (once per process).
pub fn install(level: LevelFilter) {
    if log::set_boxed_logger(Box::new(Stderr(level))).is_ok() {
        log::set_max_level(level);
    }
}
