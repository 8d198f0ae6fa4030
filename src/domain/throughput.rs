//! Throughput per layout: what each model (a replica set as a whole) delivered on this node
//! under each layout it ran, kept in a small local store (`exec::throughput` reads and writes
//! it) and shown beside the placement advice. Pure: a measurement from two scrapes of each
//! server's counters and histogram, the store's merge, the advice's words.

use serde::{Deserialize, Serialize};

/// One server between two scrapes (counters and latency histogram differences).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Window {
    /// Generation tokens in the window.
    pub tokens: f64,
    /// Seconds it lasted.
    pub secs: f64,
    /// Requests running and waiting, averaged over the window's reads.
    pub running: f64,
    /// See `running`.
    pub waiting: f64,
    /// Requests finished per latency bucket (upper bound, count), cumulative as Prometheus
    /// gives them; `f64::INFINITY` for `+Inf`.
    pub buckets: Vec<(f64, f64)>,
    /// The same for the time to the first token (empty where the server has no such
    /// histogram).
    pub ttft: Vec<(f64, f64)>,
}

/// Why a measurement read from the store cannot be believed, if it cannot: every figure must
/// be finite and in range (the store is a file anyone with the account can edit; a figure of
/// 1e308 tokens/s or -5 requests was once shown as fact).
pub fn out_of_range(m: &Measured) -> Option<String> {
    let figures = [
        ("tokens_per_sec", Some(m.tokens_per_sec), 1e9),
        ("running", Some(m.running), 1e6),
        ("waiting", Some(m.waiting), 1e6),
        ("secs", Some(m.secs), 1e10),
        ("p50", m.p50, 1e6),
        ("p99", m.p99, 1e6),
        ("ttft_p50", m.ttft_p50, 1e6),
        ("ttft_p99", m.ttft_p99, 1e6),
    ];
    figures.iter().find_map(|(name, v, max)| {
        let v = (*v)?;
        (!(v.is_finite() && (0.0..=*max).contains(&v)))
            .then(|| format!("{name} {v} is outside 0 to {max}"))
    })
}

/// What a model (all its replicas together) delivered under one layout on one node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Host.
    pub node: String,
    /// Layout (`DPX/NPS2`).
    pub layout: String,
    /// Model or replica set name.
    pub model: String,
    /// Servers measured.
    pub replicas: u32,
    /// Generation tokens/s, all replicas together.
    pub tokens_per_sec: f64,
    /// Requests running, all replicas together (mean).
    pub running: f64,
    /// Requests waiting, all replicas together (mean).
    pub waiting: f64,
    /// Median end-to-end latency, seconds (upper bound of its histogram bucket).
    pub p50: Option<f64>,
    /// 99th percentile end-to-end latency, seconds.
    pub p99: Option<f64>,
    /// Seconds measured in all (merged measurements add up).
    pub secs: f64,
    /// Median time to the first token, seconds (older stores have none).
    #[serde(default)]
    pub ttft_p50: Option<f64>,
    /// 99th percentile time to the first token, seconds.
    #[serde(default)]
    pub ttft_p99: Option<f64>,
    /// When it was last added to (ms since epoch; older stores have none): the store drops
    /// the least recently added to when it is full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_ms: Option<u64>,
}

impl std::fmt::Display for Measured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} tokens/s with {} replica{}",
            self.layout,
            super::replicas::rate_text(Some(self.tokens_per_sec)),
            self.replicas,
            if self.replicas == 1 { "" } else { "s" }
        )?;
        if let Some(p) = self.p50 {
            write!(f, ", p50 {p:.1} s")?;
        }
        if let Some(p) = self.p99 {
            write!(f, ", p99 {p:.1} s")?;
        }
        if let Some(p) = self.ttft_p99 {
            write!(f, ", TTFT p99 {} s", super::latency::secs_text(p))?;
        }
        write!(f, " (over {:.0} s)", self.secs)
    }
}

/// The `q` quantile of cumulative buckets (`domain::latency::quantile`, as Prometheus'
/// `histogram_quantile`).
pub use super::latency::quantile;

/// One model's servers' windows as one measurement (tokens/s and queues add up, latency
/// buckets add up per bound).
pub fn measure(node: &str, layout: &str, model: &str, windows: &[Window]) -> Option<Measured> {
    let secs = windows.iter().map(|w| w.secs).fold(0.0, f64::max);
    if windows.is_empty() || secs <= 0.0 {
        return None;
    }
    let buckets = super::latency::sum(windows.iter().map(|w| w.buckets.as_slice()));
    let ttft = super::latency::sum(windows.iter().map(|w| w.ttft.as_slice()));
    Some(Measured {
        node: node.into(),
        layout: layout.into(),
        model: model.into(),
        replicas: u32::try_from(windows.len()).unwrap_or(u32::MAX),
        tokens_per_sec: windows
            .iter()
            .filter(|w| w.secs > 0.0)
            .map(|w| w.tokens / w.secs)
            .sum(),
        running: windows.iter().map(|w| w.running).sum(),
        waiting: windows.iter().map(|w| w.waiting).sum(),
        p50: quantile(&buckets, 0.5),
        p99: quantile(&buckets, 0.99),
        secs,
        ttft_p50: quantile(&ttft, 0.5),
        ttft_p99: quantile(&ttft, 0.99),
        updated_ms: None,
    })
}

/// The node's layout as the store keys it: the first GPU's modes (`DPX/NPS2`).
pub fn layout_of(snap: &super::snapshot::Snapshot) -> Option<String> {
    let g = snap.gpus.first()?;
    Some(format!("{}/{}", g.compute_partition?, g.memory_partition?))
}

/// The registered models a measurement covers, each with the metrics URLs of its running
/// servers: a replica set as one (all its members), another model alone.
pub fn measured_models(snap: &super::snapshot::Snapshot) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for m in snap.models.iter().filter(|m| m.pid.is_some()) {
        let Some(spec) = &m.spec else { continue };
        let name = spec
            .member
            .as_ref()
            .map_or_else(|| spec.name.clone(), |w| w.set.clone());
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, urls)) => urls.push(spec.metrics_url.clone()),
            None => out.push((name, vec![spec.metrics_url.clone()])),
        }
    }
    out
}

/// The names the advice shows measurements for: every registered model, a set once.
pub fn model_names(snap: &super::snapshot::Snapshot) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for spec in snap.models.iter().filter_map(|m| m.spec.as_ref()) {
        let name = spec
            .member
            .as_ref()
            .map_or_else(|| spec.name.clone(), |w| w.set.clone());
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// Measurements a store keeps (node x layout x model): a few hundred bytes each, so the file
/// stays under about 100 KiB whatever runs for how long.
pub const MAX_ENTRIES: usize = 256;

/// Every measurement this node's partop kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Store {
    /// Format version.
    #[serde(default)]
    pub format: u32,
    /// One per (node, layout, model).
    #[serde(default)]
    pub entries: Vec<Measured>,
}

impl Store {
    /// Adds `m`: merged with the same node, layout and model, weighted by the seconds each
    /// measured (the replica count is the latest).
    pub fn record(&mut self, m: Measured) {
        let same =
            |e: &&mut Measured| e.node == m.node && e.layout == m.layout && e.model == m.model;
        let Some(e) = self.entries.iter_mut().find(same) else {
            self.entries.push(m);
            self.trim();
            return;
        };
        let total = e.secs + m.secs;
        if total <= 0.0 {
            return;
        }
        let mix = |a: f64, b: f64| (a * e.secs + b * m.secs) / total;
        let mixo = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some(mix(a, b)),
            (a, b) => b.or(a),
        };
        *e = Measured {
            tokens_per_sec: mix(e.tokens_per_sec, m.tokens_per_sec),
            running: mix(e.running, m.running),
            waiting: mix(e.waiting, m.waiting),
            p50: mixo(e.p50, m.p50),
            p99: mixo(e.p99, m.p99),
            ttft_p50: mixo(e.ttft_p50, m.ttft_p50),
            ttft_p99: mixo(e.ttft_p99, m.ttft_p99),
            secs: total,
            replicas: m.replicas,
            updated_ms: m.updated_ms.or(e.updated_ms),
            ..m
        };
    }

    /// Keeps the store within [`MAX_ENTRIES`]: the least recently added to go first.
    fn trim(&mut self) {
        while self.entries.len() > MAX_ENTRIES {
            let oldest = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.updated_ms.unwrap_or(0))
                .map_or(0, |(i, _)| i);
            self.entries.remove(oldest);
        }
    }

    /// What `node` measured for `model` under `layout`.
    pub fn get(&self, node: &str, layout: &str, model: &str) -> Option<&Measured> {
        self.entries
            .iter()
            .find(|e| e.node == node && e.layout == layout && e.model == model)
    }
}

/// The advice's words for each candidate layout and model: what this node measured, or that
/// it has no measurement.
pub fn advice_lines(
    store: &Store,
    node: &str,
    layouts: &[String],
    models: &[String],
) -> Vec<String> {
    let mut out = Vec::new();
    for model in models {
        if !layouts.iter().any(|l| store.get(node, l, model).is_some()) {
            out.push(format!("{model}: no measurement on this node"));
            continue;
        }
        out.push(format!("{model}:"));
        out.extend(layouts.iter().map(|l| {
            store.get(node, l, model).map_or_else(
                || format!("  {l}: no measurement on this node"),
                |m| format!("  {m}"),
            )
        }));
    }
    out
}

/// How long a window must run at a steady layout, with the same servers, before the monitor
/// or `partop serve` records it (the default; `PARTOP_THROUGHPUT_WINDOW_SECS` changes it).
pub const RECORD_WINDOW_SECS: u64 = 300;

/// One server's counters at one scrape, for the recorder (it travels in the sample:
/// `Snapshot::throughput`).
pub use super::model_status::Reading;

/// A set's window in progress: the layout and servers it holds for, its first and latest
/// readings, its queue sums.
#[derive(Clone, Debug, PartialEq)]
struct Open {
    layout: String,
    pids: Vec<u32>,
    start_ms: u64,
    last_ms: u64,
    first: Vec<Reading>,
    last: Vec<Reading>,
    queues: Vec<(f64, f64)>,
    reads: u32,
}

/// Records throughput while partop runs: per model set, a window opens when its layout and
/// servers are known and closes after `window_ms` at that layout with the same servers (a
/// layout change, a server that starts, stops or restarts, a counter that goes down: the
/// window starts again). Each closed window is a [`Measured`] to keep. Pure: the prober feeds
/// it each sample's readings.
#[derive(Clone, Debug)]
pub struct Recorder {
    /// How long a window lasts, ms.
    pub window_ms: u64,
    open: Vec<(String, Open)>,
}

impl Recorder {
    /// A recorder with windows of `window_secs`.
    pub fn new(window_secs: u64) -> Self {
        Self {
            window_ms: window_secs.saturating_mul(1000),
            open: Vec::new(),
        }
    }

    /// The window's length from `PARTOP_THROUGHPUT_WINDOW_SECS` as given (10..=86400), or the
    /// default with why the value was not taken.
    pub fn window_from(value: Option<&str>) -> (u64, Option<String>) {
        match value.map(str::trim) {
            None | Some("") => (RECORD_WINDOW_SECS, None),
            Some(v) => match v.parse::<u64>() {
                Ok(n) if (10..=86_400).contains(&n) => (n, None),
                _ => (
                    RECORD_WINDOW_SECS,
                    Some(format!(
                        "PARTOP_THROUGHPUT_WINDOW_SECS={}: not a number of seconds in 10..=86400; {RECORD_WINDOW_SECS} s used",
                        super::text::escape_controls(v)
                    )),
                ),
            },
        }
    }

    /// This sample's readings (`layout` None: unknown, nothing is recorded): the windows that
    /// closed, as measurements for `node`.
    pub fn observe(
        &mut self,
        node: &str,
        layout: Option<&str>,
        now_ms: u64,
        readings: &[Reading],
    ) -> Vec<Measured> {
        let Some(layout) = layout else {
            self.open.clear();
            return Vec::new();
        };
        let mut sets: Vec<&str> = Vec::new();
        for r in readings {
            if !sets.contains(&r.set.as_str()) {
                sets.push(&r.set);
            }
        }
        // A set no longer served has no window.
        self.open.retain(|(n, _)| sets.contains(&n.as_str()));
        let mut out = Vec::new();
        for set in sets {
            // In pid order, so a window's first and last readings pair up server by server.
            let mut mine: Vec<Reading> =
                readings.iter().filter(|r| r.set == set).cloned().collect();
            mine.sort_by_key(|r| r.pid);
            let pids: Vec<u32> = mine.iter().map(|r| r.pid).collect();
            let fresh = Open {
                layout: layout.to_string(),
                pids: pids.clone(),
                start_ms: now_ms,
                last_ms: now_ms,
                first: mine.clone(),
                last: mine.clone(),
                queues: mine.iter().map(|r| (r.running, r.waiting)).collect(),
                reads: 1,
            };
            let Some(i) = self.open.iter().position(|(n, _)| n == set) else {
                self.open.push((set.to_string(), fresh));
                continue;
            };
            let o = &mut self.open[i].1;
            let went_down = o.first.iter().zip(&mine).any(|(a, b)| {
                b.tokens < a.tokens || super::latency::delta(&a.e2e, &b.e2e).is_err()
            });
            if o.layout != layout || o.pids != pids || went_down || now_ms < o.start_ms {
                *o = fresh;
                continue;
            }
            o.last.clone_from(&mine);
            o.last_ms = now_ms;
            for (q, r) in o.queues.iter_mut().zip(&mine) {
                q.0 += r.running;
                q.1 += r.waiting;
            }
            o.reads += 1;
            if now_ms - o.start_ms >= self.window_ms {
                if let Some(mut m) = close(node, set, o) {
                    m.updated_ms = Some(now_ms);
                    out.push(m);
                }
                *o = fresh;
            }
        }
        out
    }
}

/// A window's measurement: each server's growth between its first and last reading.
fn close(node: &str, set: &str, o: &Open) -> Option<Measured> {
    #[expect(clippy::cast_precision_loss, reason = "ms spans")]
    let secs = o.last_ms.saturating_sub(o.start_ms) as f64 / 1000.0;
    let reads = f64::from(o.reads.max(1));
    let windows: Vec<Window> = o
        .first
        .iter()
        .zip(&o.last)
        .zip(&o.queues)
        .map(|((a, b), q)| Window {
            tokens: b.tokens - a.tokens,
            secs,
            running: q.0 / reads,
            waiting: q.1 / reads,
            buckets: super::latency::delta(&a.e2e, &b.e2e).unwrap_or_default(),
            ttft: super::latency::delta(&a.ttft, &b.ttft).unwrap_or_default(),
        })
        .collect();
    measure(node, &o.layout, set, &windows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(tokens: f64, buckets: &[(f64, f64)]) -> Window {
        Window {
            tokens,
            secs: 10.0,
            running: 20.0,
            waiting: 2.0,
            buckets: buckets.to_vec(),
            ttft: vec![],
        }
    }

    #[test]
    fn replicas_add_up_and_latency_comes_from_the_buckets() {
        let b = [
            (2.5, 10.0),
            (5.0, 90.0),
            (10.0, 100.0),
            (f64::INFINITY, 100.0),
        ];
        let m = measure("n", "DPX/NPS2", "m", &[w(15_230.0, &b), w(15_230.0, &b)]).unwrap();
        assert_eq!(m.replicas, 2);
        assert!((m.tokens_per_sec - 3_046.0).abs() < 1e-9);
        // Linear within the bucket, as histogram_quantile: 2.5 + 2.5 x 40/80, 5 + 5 x 9/10.
        assert_eq!((m.p50, m.p99), (Some(3.75), Some(9.5)));
        assert_eq!(
            m.to_string(),
            "DPX/NPS2: 3,046 tokens/s with 2 replicas, p50 3.8 s, p99 9.5 s (over 10 s)"
        );
        assert_eq!(quantile(&[(1.0, 0.0), (f64::INFINITY, 0.0)], 0.5), None);
        assert_eq!(
            quantile(&[(1.0, 0.0), (f64::INFINITY, 5.0)], 0.5),
            Some(1.0),
            "beyond the last bound: the last finite one"
        );
        assert!(measure("n", "l", "m", &[]).is_none());
    }

    #[test]
    fn the_store_merges_by_node_layout_and_model_and_says_what_it_lacks() {
        let mut s = Store::default();
        let b = [(5.0, 10.0), (f64::INFINITY, 10.0)];
        s.record(measure("n", "SPX/NPS1", "m", &[w(24_000.0, &b)]).unwrap());
        s.record(measure("n", "SPX/NPS1", "m", &[w(26_000.0, &b)]).unwrap());
        s.record(measure("other", "SPX/NPS1", "m", &[w(1.0, &b)]).unwrap());
        assert_eq!(s.entries.len(), 2);
        let e = s.get("n", "SPX/NPS1", "m").unwrap();
        assert!((e.tokens_per_sec - 2_500.0).abs() < 1e-9);
        assert!((e.secs - 20.0).abs() < 1e-9);
        let lines = advice_lines(
            &s,
            "n",
            &["DPX/NPS2".into(), "SPX/NPS1".into()],
            &["m".into()],
        );
        assert_eq!(
            advice_lines(&s, "n", &["DPX/NPS2".into()], &["m".into()]),
            vec!["m: no measurement on this node".to_string()]
        );
        assert_eq!(
            lines,
            vec![
                "m:".to_string(),
                "  DPX/NPS2: no measurement on this node".into(),
                "  SPX/NPS1: 2,500 tokens/s with 1 replica, p50 2.5 s, p99 5.0 s (over 20 s)"
                    .into()
            ]
        );
    }

    fn reading(pid: u32, t: f64) -> Reading {
        // t seconds in at 100 tokens/s; one request a second, each 2 s end to end.
        Reading {
            set: "m".into(),
            pid,
            tokens: 100.0 * t,
            running: 4.0,
            waiting: 1.0,
            e2e: vec![(1.0, 0.0), (2.5, t), (f64::INFINITY, t)],
            ttft: vec![(0.1, t), (f64::INFINITY, t)],
        }
    }

    #[test]
    fn the_recorder_keeps_a_window_only_at_a_steady_layout_with_the_same_servers() {
        let mut r = Recorder::new(60);
        let at = |s: u64| s * 1000;
        let mut closed = Vec::new();
        // Two servers, sampled every 2 s for 3 minutes: windows close at 60 s and 120 s, 180 s.
        for k in 0..=90u32 {
            let t = f64::from(k) * 2.0;
            let rs = [reading(10, 1000.0 + t), reading(11, t)];
            closed.extend(r.observe("n", Some("DPX/NPS2"), at(u64::from(k) * 2), &rs));
        }
        assert_eq!(closed.len(), 3, "{closed:?}");
        let m = &closed[0];
        assert_eq!((m.replicas, m.layout.as_str()), (2, "DPX/NPS2"));
        assert!((m.tokens_per_sec - 200.0).abs() < 1e-9, "{m}");
        assert!((m.secs - 60.0).abs() < 1e-9);
        assert!((m.running - 8.0).abs() < 1e-9 && (m.waiting - 2.0).abs() < 1e-9);
        assert!(m.p99.is_some_and(|p| (1.0..=2.5).contains(&p)), "{m}");
        assert!(m.ttft_p99.is_some_and(|p| p <= 0.1), "{m}");
        assert_eq!(m.updated_ms, Some(60_000));

        // Every kind of change starts the window again: nothing closes before 60 s after it.
        let changes: [(&str, &[Reading]); 4] = [
            ("SPX/NPS1", &[reading(10, 2000.0), reading(11, 1000.0)]),
            ("DPX/NPS2", &[reading(10, 2000.0)]),
            ("DPX/NPS2", &[reading(10, 2000.0), reading(12, 0.0)]),
            ("DPX/NPS2", &[reading(10, 5.0), reading(11, 1000.0)]),
        ];
        for (case, (layout, rs)) in changes.iter().enumerate() {
            let mut r = Recorder::new(60);
            let base = [reading(10, 1900.0), reading(11, 900.0)];
            assert!(r.observe("n", Some("DPX/NPS2"), 0, &base).is_empty());
            assert!(
                r.observe("n", Some(layout), 50_000, rs).is_empty(),
                "case {case}"
            );
            assert!(
                r.observe("n", Some(layout), 100_000, rs).is_empty(),
                "case {case}: restarted at 50 s"
            );
            assert!(
                !r.observe("n", Some(layout), 110_000, rs).is_empty(),
                "case {case}"
            );
        }
        // An unknown layout records nothing.
        let mut r = Recorder::new(10);
        for k in 0..20 {
            assert!(
                r.observe("n", None, k * 1000, &[reading(1, 0.0)])
                    .is_empty()
            );
        }
        assert_eq!(Recorder::window_from(None), (RECORD_WINDOW_SECS, None));
        assert_eq!(Recorder::window_from(Some("30")), (30, None));
        for bad in ["0", "9", "86401", "-5", "x", "1e3", "\u{1b}[31m"] {
            let (n, why) = Recorder::window_from(Some(bad));
            assert_eq!(n, RECORD_WINDOW_SECS, "{bad}");
            assert!(why.is_some_and(|w| !w.contains('\u{1b}')), "{bad}");
        }
    }

    #[test]
    fn the_store_stays_bounded() {
        let mut s = Store::default();
        let b = [(5.0, 10.0), (f64::INFINITY, 10.0)];
        for k in 0..(MAX_ENTRIES as u64 + 40) {
            let mut m = measure("n", &format!("L{k}"), "m", &[w(1.0, &b)]).unwrap();
            m.updated_ms = Some(k);
            s.record(m);
        }
        assert_eq!(s.entries.len(), MAX_ENTRIES);
        assert!(s.get("n", "L0", "m").is_none(), "the oldest left first");
        assert!(s.get("n", &format!("L{}", MAX_ENTRIES + 39), "m").is_some());
    }
}
