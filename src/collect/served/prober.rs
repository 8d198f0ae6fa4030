//! The model prober: joins the registry with the servers discovered among the processes (by
//! port), asks each its `/health` and `/metrics` (concurrently, each with a short timeout),
//! and keeps what needs memory between samples: token counters for rates, the pid each model
//! had (a new pid is a restart; a vanished one a crash), and the log tail.

use super::{http, metrics};
use crate::domain::model_status::{ModelState, ServedModel};
use crate::domain::models::Registry;
use crate::domain::served::{Discovered, discover};
use crate::domain::snapshot::Snapshot;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Default, Clone)]
struct Seen {
    pid: Option<u32>,
    tokens: Option<(f64, u64)>,
    rate: Option<f64>,
    restarts: u32,
    healthy_once: bool,
    lost: Option<u32>,
    /// The log's length when its tail was last read, and that tail.
    log: Option<(u64, Vec<String>)>,
    /// Latency histograms of recent scrapes (ms, TTFT, E2E), oldest first: the window the
    /// percentiles are taken over runs from the oldest to the newest.
    scrapes: std::collections::VecDeque<Scrape>,
}

/// One scrape's cumulative latency histograms: when (ms), time to first token, end to end.
type Scrape = (u64, Vec<(f64, f64)>, Vec<(f64, f64)>);

/// The window the Models view's latency percentiles span: the scrapes of the last minute.
pub const LATENCY_WINDOW_MS: u64 = 60_000;

/// Scrapes kept per model at most, whatever the sampling rate (a minute at 0.25 s).
const MAX_SCRAPES: usize = 240;

/// The latency over `scrapes` (oldest to newest), after adding the scrape at `now`: the older
/// ones beyond [`LATENCY_WINDOW_MS`] leave, a reset leaves only the newest (the next window
/// starts there). None where the server exports no latency histogram.
fn latency_window(
    scrapes: &mut std::collections::VecDeque<Scrape>,
    now: u64,
    ttft: Vec<(f64, f64)>,
    e2e: Vec<(f64, f64)>,
) -> Option<crate::domain::latency::Latency> {
    use crate::domain::latency::{Latency, Quantiles};
    if ttft.is_empty() && e2e.is_empty() {
        scrapes.clear();
        return None;
    }
    scrapes.push_back((now, ttft, e2e));
    while scrapes.len() > MAX_SCRAPES
        || scrapes
            .get(1)
            .is_some_and(|s| now.saturating_sub(s.0) >= LATENCY_WINDOW_MS)
    {
        scrapes.pop_front();
    }
    let (first, last) = (scrapes.front()?, scrapes.back()?);
    if scrapes.len() < 2 {
        let wait = Quantiles::na("one scrape so far: the window needs two");
        return Some(Latency {
            secs: 0.0,
            ttft: wait.clone(),
            e2e: wait,
        });
    }
    #[expect(clippy::cast_precision_loss, reason = "ms spans")]
    let secs = last.0.saturating_sub(first.0) as f64 / 1000.0;
    let l = Latency {
        secs,
        ttft: Quantiles::between(&first.1, &last.1),
        e2e: Quantiles::between(&first.2, &last.2),
    };
    let reset = |q: &Quantiles| q.na.as_deref().is_some_and(|w| w.contains("went down"));
    if reset(&l.ttft) || reset(&l.e2e) {
        let newest = scrapes.pop_back();
        scrapes.clear();
        scrapes.extend(newest);
    }
    Some(l)
}

/// Probes served models on every sample.
#[derive(Debug)]
pub struct ModelProber {
    /// The registry (None: discovery only).
    pub registry: Option<Registry>,
    /// Why the registry could not be read (shown as a source error).
    pub registry_error: Option<String>,
    /// Where partop-launched models log by default.
    pub log_dir: PathBuf,
    /// /proc root (for a discovered server's log: its stdout).
    pub proc_root: PathBuf,
    /// Per-request timeout.
    pub timeout: Duration,
    seen: HashMap<String, Seen>,
    /// The registry file followed (re-read when it changes: `a` in the Models view adds to it),
    /// whether it must exist, and its (modified, length) when last read.
    watch: Option<(PathBuf, bool, Option<FileStamp>)>,
    /// This sample's readings for the throughput recorder (taken into the sample: the
    /// recorder and its store are the app side's).
    readings: Vec<crate::domain::throughput::Reading>,
}

/// A file's modification time and length: when either changes, it is read again.
type FileStamp = (Option<std::time::SystemTime>, u64);

/// The default log of a registered model.
pub fn log_path(spec: &crate::domain::models::ModelSpec, log_dir: &Path) -> PathBuf {
    if spec.log.is_empty() {
        log_dir.join(format!("{}.log", spec.name))
    } else {
        PathBuf::from(&spec.log)
    }
}

/// The last `n` lines of a file (reads at most its last 16 KiB).
pub fn tail(path: &Path, n: usize) -> Vec<String> {
    let Ok(buf) = crate::collect::small_file::tail(path, 16 << 10) else {
        return vec![];
    };
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| (*l).to_string())
        .collect()
}

struct Probe {
    health: Option<Result<http::Reply, String>>,
    metrics: Option<Result<metrics::Figures, String>>,
}

impl ModelProber {
    /// A prober for `registry`.
    pub fn new(registry: Option<Registry>, registry_error: Option<String>) -> Self {
        Self {
            registry,
            registry_error,
            log_dir: crate::config::paths::state_dir().join("models"),
            proc_root: PathBuf::from("/proc"),
            timeout: Duration::from_millis(800),
            seen: HashMap::new(),
            watch: None,
            readings: Vec::new(),
        }
    }

    /// Follows the registry at `path`: read now and again whenever it changes (one `stat` a
    /// sample), so a server added to it shows as registered on the next sample. A file that is
    /// not `required` (the default path, before anything was added) may be absent.
    #[must_use]
    pub fn following(mut self, path: PathBuf, required: bool) -> Self {
        self.watch = Some((path, required, None));
        self.reread_if_changed();
        self
    }

    fn reread_if_changed(&mut self) {
        let Some((path, required, last)) = &mut self.watch else {
            return;
        };
        let now = std::fs::metadata(&*path)
            .ok()
            .map(|m| (m.modified().ok(), m.len()));
        if last.is_some() && *last == now {
            return;
        }
        *last = now;
        let (reg, err) = match (now, *required) {
            (None, false) => (None, None),
            _ => match super::load_registry(path) {
                Ok(r) => (Some(r), None),
                Err(e) => (None, Some(e)),
            },
        };
        self.registry = reg;
        self.registry_error = err;
    }

    /// Models on the node in `snap`, probed now.
    pub async fn observe(&mut self, snap: &Snapshot) -> Vec<ServedModel> {
        self.reread_if_changed();
        let found = discover(snap);
        let mut models = self.join(snap, &found);
        let timeout = self.timeout;
        let jobs: Vec<_> = models
            .iter()
            .map(|m| {
                let urls = match (&m.spec, m.port, m.pid) {
                    (Some(s), _, Some(_)) => Some((s.health_url.clone(), s.metrics_url.clone())),
                    (None, Some(p), Some(_)) => Some((
                        format!("http://127.0.0.1:{p}/health"),
                        format!("http://127.0.0.1:{p}/metrics"),
                    )),
                    _ => None,
                };
                tokio::task::spawn_blocking(move || {
                    urls.map(|(h, mu)| {
                        let health = http::get(&h, timeout);
                        let metrics = match &health {
                            Ok(r) if r.status == 200 => {
                                Some(http::get(&mu, timeout).and_then(|r| {
                                    if r.status == 200 {
                                        metrics::parse(&r.body)
                                    } else {
                                        Err(format!("GET {mu}: HTTP {}", r.status))
                                    }
                                }))
                            }
                            _ => None,
                        };
                        Probe {
                            health: Some(health),
                            metrics,
                        }
                    })
                })
            })
            .collect();
        let now = snap.taken_at_ms;
        self.readings.clear();
        for (m, job) in models.iter_mut().zip(jobs) {
            let probe = job.await.ok().flatten();
            self.settle(m, probe, snap, now);
        }
        models
    }

    /// This sample's counters for the throughput recorder (registered, healthy servers with a
    /// token counter), taken.
    pub fn take_readings(&mut self) -> Vec<crate::domain::throughput::Reading> {
        std::mem::take(&mut self.readings)
    }

    /// Registered models first (in file order), then discovered servers not in the registry.
    fn join(&self, snap: &Snapshot, found: &[Discovered]) -> Vec<ServedModel> {
        let bdf_of = |id: u32| {
            snap.logical()
                .find(|(_, l)| l.gpu_id == id)
                .map(|(_, l)| l.bdf.clone())
        };
        let proc_of = |pid: u32| snap.processes.iter().find(|p| p.pid == pid);
        let mut out = Vec::new();
        let mut used = Vec::new();
        // A replica set is served as its members on the current layout (one row each).
        let specs: Vec<crate::domain::models::ModelSpec> = self
            .registry
            .iter()
            .flat_map(|r| {
                let rows = crate::domain::layout::layout_rows(snap);
                let taken = crate::domain::replicas::taken_by_others(snap, r);
                crate::domain::replicas::expand(r, &rows, &taken)
            })
            .collect();
        for spec in &specs {
            let d = found.iter().find(|d| d.port == Some(spec.port));
            if let Some(d) = d {
                used.push(d.pid);
            }
            let log = log_path(spec, &self.log_dir);
            out.push(ServedModel {
                name: spec.name.clone(),
                model: spec.model.clone(),
                server: d.map(|d| d.server.to_string()),
                spec: Some(spec.clone()),
                pid: d.map(|d| d.pid),
                start_ticks: d.and_then(|d| proc_of(d.pid)).and_then(|p| p.start_ticks),
                gpus: d.map(|d| d.gpus.clone()).unwrap_or_default(),
                bdfs: d
                    .map(|d| d.gpus.iter().filter_map(|g| bdf_of(*g)).collect())
                    .unwrap_or_default(),
                port: Some(spec.port),
                state: ModelState::Unknown,
                reason: None,
                running: None,
                waiting: None,
                kv_cache: None,
                tokens_per_sec: None,
                restarts: 0,
                log: Some(log.display().to_string()),
                log_tail: vec![],
                probed_ms: None,
                latency: None,
            });
        }
        for d in found.iter().filter(|d| !used.contains(&d.pid)) {
            // A discovered server logs where its stdout goes, when that is a file.
            let log = std::fs::read_link(self.proc_root.join(format!("{}/fd/1", d.pid)))
                .ok()
                .filter(|p| p.is_file());
            out.push(ServedModel {
                name: d.port.map_or_else(
                    || format!("{}@{}", d.server, d.pid),
                    |p| format!("{}:{p}", d.server),
                ),
                model: d.model_id.clone(),
                server: Some(d.server.to_string()),
                spec: None,
                pid: Some(d.pid),
                start_ticks: proc_of(d.pid).and_then(|p| p.start_ticks),
                gpus: d.gpus.clone(),
                bdfs: d.gpus.iter().filter_map(|g| bdf_of(*g)).collect(),
                port: d.port,
                state: ModelState::Unknown,
                reason: None,
                running: None,
                waiting: None,
                kv_cache: None,
                tokens_per_sec: None,
                restarts: 0,
                log: log.map(|p| p.display().to_string()),
                log_tail: vec![],
                probed_ms: None,
                latency: None,
            });
        }
        out
    }

    fn settle(&mut self, m: &mut ServedModel, probe: Option<Probe>, snap: &Snapshot, now: u64) {
        let seen = self.seen.entry(m.name.clone()).or_default();
        // The last live pid is kept: a different one later (even after a crash) is a restart.
        if let Some(p) = m.pid {
            if seen.pid.is_some_and(|old| old != p) {
                seen.restarts += 1;
                seen.tokens = None;
                seen.rate = None;
                seen.healthy_once = false;
                seen.scrapes.clear();
            }
            seen.pid = Some(p);
            seen.lost = None;
        } else if seen.pid.is_some() {
            seen.lost = seen.pid;
        }
        m.restarts = seen.restarts;
        m.probed_ms = Some(now);
        let started = m
            .pid
            .and_then(|pid| snap.processes.iter().find(|p| p.pid == pid))
            .and_then(|p| p.started_at_ms);
        let window_ms = m
            .spec
            .as_ref()
            .map_or(600_000, |s| s.health_timeout_secs * 1000);
        let young = started.is_some_and(|t| now.saturating_sub(t) < window_ms);
        let (health, figures) = match probe {
            Some(p) => (p.health, p.metrics),
            None => (None, None),
        };
        (m.state, m.reason) = match (m.pid, health) {
            (None, _) => (
                ModelState::Stopped,
                Some(seen.lost.map_or_else(
                    || "not running".to_string(),
                    |p| format!("exited (was pid {p}); partop saw it running"),
                )),
            ),
            (Some(_), None) => (
                ModelState::Unknown,
                Some("no port known: add it to models.toml to probe it".into()),
            ),
            (Some(_), Some(Ok(r))) if r.status == 200 => {
                seen.healthy_once = true;
                (ModelState::Healthy, None)
            }
            (Some(_), Some(Ok(r))) if !seen.healthy_once && young => (
                ModelState::Starting,
                Some(format!("/health: HTTP {} (loading)", r.status)),
            ),
            (Some(_), Some(Ok(r))) => (
                ModelState::Unhealthy,
                Some(format!("/health: HTTP {} {}", r.status, r.body.trim())),
            ),
            (Some(_), Some(Err(e))) if !seen.healthy_once && young => {
                (ModelState::Starting, Some(format!("/health: {e}")))
            }
            (Some(_), Some(Err(e))) => (ModelState::Unhealthy, Some(format!("/health: {e}"))),
        };
        match figures {
            Some(Ok(f)) => {
                m.running = f.running;
                m.waiting = f.waiting;
                m.kv_cache = f.kv_cache;
                if let Some(t) = f.generation_tokens {
                    if let Some((t0, at)) = seen.tokens
                        && now > at
                        && t >= t0
                    {
                        #[expect(clippy::cast_precision_loss, reason = "ms intervals")]
                        let dt = (now - at) as f64 / 1000.0;
                        seen.rate = Some((t - t0) / dt);
                    }
                    seen.tokens = Some((t, now));
                }
                m.tokens_per_sec = seen.rate;
                m.latency = latency_window(&mut seen.scrapes, now, f.ttft.clone(), f.e2e.clone());
                // A registered, healthy server with a token counter counts toward its set's
                // throughput record.
                if let (Some(spec), Some(pid), Some(tokens), ModelState::Healthy) =
                    (&m.spec, m.pid, f.generation_tokens, m.state)
                {
                    self.readings.push(crate::domain::throughput::Reading {
                        set: spec
                            .member
                            .as_ref()
                            .map_or_else(|| spec.name.clone(), |w| w.set.clone()),
                        pid,
                        tokens,
                        running: f.running.unwrap_or(0.0),
                        waiting: f.waiting.unwrap_or(0.0),
                        e2e: f.e2e,
                        ttft: f.ttft,
                    });
                }
            }
            Some(Err(e)) => {
                m.reason = Some(format!("/metrics: {e}"));
            }
            None => {}
        }
        // The tail is re-read only when the log grew or shrank: one stat per sample otherwise.
        if let Some(log) = &m.log {
            let len = std::fs::metadata(log).map_or(0, |x| x.len());
            if seen.log.as_ref().is_none_or(|(l, _)| *l != len) {
                seen.log = Some((len, tail(Path::new(log), 12)));
            }
            m.log_tail = seen
                .log
                .as_ref()
                .map(|(_, t)| t.clone())
                .unwrap_or_default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: f64) -> Vec<(f64, f64)> {
        vec![(1.0, n), (f64::INFINITY, n)]
    }

    /// The window spans the last minute of scrapes (bucket growth between its ends); a reset
    /// is N/A with the reason and the next window starts at the reset; a server without the
    /// histograms has no latency.
    #[test]
    fn the_window_is_the_last_minute_and_starts_again_at_a_reset() {
        let mut q = std::collections::VecDeque::new();
        let first = latency_window(&mut q, 0, h(0.0), h(0.0)).unwrap();
        assert!(first.e2e.na.unwrap().contains("two"));
        // 10 requests a second for 2 minutes, a scrape a second.
        let mut last = None;
        for t in 1..=120u64 {
            #[expect(clippy::cast_precision_loss, reason = "small")]
            let n = 10.0 * t as f64;
            last = latency_window(&mut q, t * 1000, h(n), h(n));
            assert!(q.len() <= 62, "at {t} s: {} scrapes kept", q.len());
        }
        let l = last.unwrap();
        assert!((59.0..=61.0).contains(&l.secs), "{l:?}");
        assert!(
            (590.0..=610.0).contains(&l.e2e.requests),
            "the last minute's only: {l:?}"
        );
        // The server restarted: its counters went down.
        let l = latency_window(&mut q, 121_000, h(3.0), h(3.0)).unwrap();
        assert!(l.e2e.na.unwrap().contains("counter reset"));
        assert_eq!(q.len(), 1, "the next window starts at the reset");
        let l = latency_window(&mut q, 122_000, h(13.0), h(13.0)).unwrap();
        assert_eq!(l.e2e.requests, 10.0);
        assert!(latency_window(&mut q, 123_000, vec![], vec![]).is_none());
        assert!(q.is_empty());
    }
}
