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
        write!(f, " (over {:.0} s)", self.secs)
    }
}

/// The `q` quantile (0..1) of cumulative buckets, as Prometheus's `histogram_quantile` gives
/// it: linear within the bucket that holds it; the last finite bound when it falls in `+Inf`;
/// None without requests.
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let mut sorted = buckets.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = sorted.last().map(|(_, c)| *c).filter(|t| *t > 0.0)?;
    let rank = q.clamp(0.0, 1.0) * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for (le, c) in sorted {
        if c >= rank {
            if !le.is_finite() {
                return Some(lower);
            }
            let share = if c > below {
                (rank - below) / (c - below)
            } else {
                1.0
            };
            return Some(lower + (le - lower) * share);
        }
        (lower, below) = (le, c);
    }
    None
}

/// One model's servers' windows as one measurement (tokens/s and queues add up, latency
/// buckets add up per bound).
pub fn measure(node: &str, layout: &str, model: &str, windows: &[Window]) -> Option<Measured> {
    let secs = windows.iter().map(|w| w.secs).fold(0.0, f64::max);
    if windows.is_empty() || secs <= 0.0 {
        return None;
    }
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for w in windows {
        for (le, c) in &w.buckets {
            match buckets.iter_mut().find(|(b, _)| b.total_cmp(le).is_eq()) {
                Some(b) => b.1 += c,
                None => buckets.push((*le, *c)),
            }
        }
    }
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
            secs: total,
            replicas: m.replicas,
            ..m
        };
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
}
