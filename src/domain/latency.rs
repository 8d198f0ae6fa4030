//! Latency percentiles from a model server's Prometheus histograms (vLLM's time to first
//! token and end-to-end request latency). The prober (`collect::served`) scrapes the cumulative
//! buckets; this module turns two scrapes into the window between them (bucket deltas, never
//! "since the server started") and that window into p50 and p99 as Prometheus'
//! `histogram_quantile` does. Pure; every number from the server is range-checked and a window
//! that cannot be trusted (a reset counter, a bucket that went down, changed bounds) is N/A
//! with the reason.

use serde::{Deserialize, Serialize};

/// vLLM's histogram of the time to the first token, seconds (its name before `_bucket`).
pub const TTFT: &str = "vllm:time_to_first_token_seconds";
/// vLLM's histogram of a request's end-to-end latency, seconds.
pub const E2E: &str = "vllm:e2e_request_latency_seconds";

/// vLLM's bucket bounds for [`TTFT`] (before `+Inf`), as `vllm/v1/metrics/loggers.py` sets them.
pub const TTFT_BOUNDS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's bucket bounds for [`E2E`] (before `+Inf`).
pub const E2E_BOUNDS: [f64; 21] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// The largest bucket bound believed, seconds (a day): a larger one is not a latency.
pub const MAX_BOUND_SECS: f64 = 86_400.0;
/// The largest bucket count believed (about a million requests a second for thirty years).
pub const MAX_COUNT: f64 = 1e15;

/// Cumulative buckets of one scrape: (upper bound, requests at or below it), `f64::INFINITY`
/// for `+Inf`; sorted by bound, one entry per bound (label sets already added up).
pub type Buckets = Vec<(f64, f64)>;

/// A histogram's buckets as read, each checked: the bound a latency (0..=[`MAX_BOUND_SECS`] or
/// `+Inf`), the count a count (0..=[`MAX_COUNT`]), the counts cumulative. Err says which one is
/// not.
pub fn checked(raw: &[(f64, f64)]) -> Result<Buckets, String> {
    let mut b: Buckets = Vec::with_capacity(raw.len());
    for &(le, c) in raw {
        if !(le == f64::INFINITY || (0.0..=MAX_BOUND_SECS).contains(&le)) {
            return Err(format!(
                "bucket bound {le} out of range (0..={MAX_BOUND_SECS} s or +Inf)"
            ));
        }
        if !(0.0..=MAX_COUNT).contains(&c) {
            return Err(format!(
                "bucket le={le} count {c} out of range (0..={MAX_COUNT})"
            ));
        }
        match b.iter_mut().find(|(x, _)| x.total_cmp(&le).is_eq()) {
            Some(e) => e.1 += c,
            None => b.push((le, c)),
        }
    }
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    if b.windows(2).any(|w| w[1].1 < w[0].1) {
        return Err("buckets are not cumulative (a higher bound counts fewer)".into());
    }
    Ok(b)
}

/// The window between two scrapes of one histogram: each bucket's growth. A bucket that went
/// down is a counter reset (the server restarted) and bounds that changed are another
/// histogram: neither gives a window (Err says which).
pub fn delta(before: &[(f64, f64)], after: &[(f64, f64)]) -> Result<Buckets, String> {
    let (before, after) = (checked(before)?, checked(after)?);
    let same_bounds = before.len() == after.len()
        && before
            .iter()
            .zip(&after)
            .all(|(a, b)| a.0.total_cmp(&b.0).is_eq());
    if !same_bounds {
        return Err("bucket bounds changed between scrapes (another server answers)".into());
    }
    let mut out = Vec::with_capacity(after.len());
    for ((le, a), (_, b)) in before.iter().zip(&after) {
        if b < a {
            return Err(format!(
                "bucket le={le} went down from {a} to {b} (counter reset: the server restarted)"
            ));
        }
        out.push((*le, b - a));
    }
    Ok(out)
}

/// The `q` quantile (0..1) of cumulative buckets, as Prometheus' `histogram_quantile` gives
/// it: linear within the bucket that holds it (from 0 in the first one); the last finite bound
/// when it falls in `+Inf`; None without requests.
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

/// Adds windows up bound by bound (the replicas of a set, the label sets of a server).
pub fn sum<'a>(windows: impl IntoIterator<Item = &'a [(f64, f64)]>) -> Buckets {
    let mut out: Buckets = Vec::new();
    for w in windows {
        for &(le, c) in w {
            match out.iter_mut().find(|(x, _)| x.total_cmp(&le).is_eq()) {
                Some(e) => e.1 += c,
                None => out.push((le, c)),
            }
        }
    }
    out.sort_by(|x, y| x.0.total_cmp(&y.0));
    out
}

/// One histogram over a window: its median and 99th percentile, or why there are none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Median, seconds.
    pub p50: Option<f64>,
    /// 99th percentile, seconds.
    pub p99: Option<f64>,
    /// Requests finished in the window.
    pub requests: f64,
    /// Why there is no figure (N/A): no request finished, a reset, a bad scrape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub na: Option<String>,
    /// The window's buckets (not cumulative over time, cumulative over bounds), kept in memory
    /// so the replicas of a set add up; not serialized (`+Inf` is no JSON number).
    #[serde(skip)]
    pub window: Buckets,
}

impl Quantiles {
    /// The percentiles of a window's buckets.
    pub fn of(window: Buckets) -> Self {
        let requests = window.last().map_or(0.0, |(_, c)| *c);
        let na = (requests <= 0.0).then(|| "no request finished in the window".to_string());
        Self {
            p50: quantile(&window, 0.5),
            p99: quantile(&window, 0.99),
            requests,
            na,
            window,
        }
    }

    /// No figure, for `why`.
    pub fn na(why: impl Into<String>) -> Self {
        Self {
            na: Some(why.into()),
            ..Self::default()
        }
    }

    /// The window from two scrapes, or N/A with the reason.
    pub fn between(before: &[(f64, f64)], after: &[(f64, f64)]) -> Self {
        match delta(before, after) {
            Ok(w) => Self::of(w),
            Err(e) => Self::na(e),
        }
    }

    /// Several servers' windows as one (a replica set): the windows add up; N/A with the first
    /// reason when none has one.
    pub fn merged<'a>(parts: impl IntoIterator<Item = &'a Self>) -> Self {
        let parts: Vec<&Self> = parts.into_iter().collect();
        let with: Vec<&[(f64, f64)]> = parts
            .iter()
            .filter(|q| !q.window.is_empty())
            .map(|q| q.window.as_slice())
            .collect();
        if with.is_empty() {
            return Self::na(
                parts
                    .iter()
                    .find_map(|q| q.na.clone())
                    .unwrap_or_else(|| "no replica has a window yet".into()),
            );
        }
        Self::of(sum(with))
    }

    /// `p50/p99` in seconds for a narrow column (`0.12/0.45`, `3.8/5.9`), `-` when N/A.
    pub fn pair_text(&self) -> String {
        match (self.p50, self.p99) {
            (Some(a), Some(b)) => format!("{}/{}", secs_text(a), secs_text(b)),
            _ => "-".into(),
        }
    }
}

/// Seconds with the digits that matter at that size (`0.045`, `0.45`, `4.5`, `45`).
pub fn secs_text(v: f64) -> String {
    if v < 0.1 {
        format!("{v:.3}")
    } else if v < 1.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A server's (or a set's) latency over a window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Seconds the window spans.
    pub secs: f64,
    /// Time to the first token.
    pub ttft: Quantiles,
    /// End-to-end request latency.
    pub e2e: Quantiles,
}

impl Latency {
    /// Several servers' latencies as one (a replica set).
    pub fn merged<'a>(parts: impl IntoIterator<Item = &'a Self> + Clone) -> Self {
        Self {
            secs: parts
                .clone()
                .into_iter()
                .map(|l| l.secs)
                .fold(0.0, f64::max),
            ttft: Quantiles::merged(parts.clone().into_iter().map(|l| &l.ttft)),
            e2e: Quantiles::merged(parts.into_iter().map(|l| &l.e2e)),
        }
    }

    /// `TTFT p50/p99 0.12/0.45 s · E2E p50/p99 3.8/5.9 s`, or each N/A with its reason.
    pub fn summary(&self) -> String {
        let part = |name: &str, q: &Quantiles| match (&q.na, q.p50, q.p99) {
            (None, Some(_), Some(_)) => format!("{name} p50/p99 {} s", q.pair_text()),
            (why, _, _) => format!(
                "{name} N/A ({})",
                why.as_deref().unwrap_or("no request finished")
            ),
        };
        format!(
            "{} · {} (over {:.0} s)",
            part("TTFT", &self.ttft),
            part("E2E", &self.e2e),
            self.secs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cumulative(per_bucket: &[f64], bounds: &[f64]) -> Buckets {
        let mut c = 0.0;
        let mut out: Buckets = bounds
            .iter()
            .zip(per_bucket)
            .map(|(le, n)| {
                c += n;
                (*le, c)
            })
            .collect();
        c += per_bucket.get(bounds.len()).copied().unwrap_or(0.0);
        out.push((f64::INFINITY, c));
        out
    }

    /// A small deterministic generator (no new dependency for properties).
    fn lcg(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        #[expect(clippy::cast_precision_loss, reason = "a fraction")]
        let f = (*seed >> 11) as f64 / (1u64 << 53) as f64;
        f
    }

    #[test]
    fn quantiles_are_monotone_in_q_and_within_their_bucket() {
        let mut seed = 7;
        let mut cases = 0;
        for bounds in [&TTFT_BOUNDS[..], &E2E_BOUNDS[..]] {
            for _ in 0..500 {
                let per: Vec<f64> = (0..=bounds.len())
                    .map(|_| (lcg(&mut seed) * 50.0).floor() * f64::from(lcg(&mut seed) < 0.5))
                    .collect();
                let b = cumulative(&per, bounds);
                let total = b.last().unwrap().1;
                let mut last = 0.0;
                for k in 0..=100 {
                    let q = f64::from(k) / 100.0;
                    let Some(v) = quantile(&b, q) else {
                        assert!(total <= 0.0, "None only without requests");
                        continue;
                    };
                    assert!(v >= last - 1e-12, "monotone in q: q={q} {v} < {last}");
                    assert!(
                        (0.0..=*bounds.last().unwrap()).contains(&v),
                        "{v} outside 0..last bound"
                    );
                    // Within the bounds of the bucket that holds rank q x total.
                    let rank = q * total;
                    let i = b.iter().position(|(_, c)| *c >= rank).unwrap();
                    let hi = if b[i].0.is_finite() {
                        b[i].0
                    } else {
                        b[i - 1].0
                    };
                    let lo = if i == 0 { 0.0 } else { b[i - 1].0 };
                    assert!(
                        v >= lo - 1e-12 && v <= hi + 1e-12,
                        "{v} not in [{lo}, {hi}]"
                    );
                    last = v;
                    cases += 1;
                }
            }
        }
        assert!(cases > 50_000, "{cases} quantiles checked");
    }

    #[test]
    fn the_window_is_the_bucket_deltas_not_since_start() {
        // 10 000 requests at about 0.05 s before the window; in it, 100 between 0.06 and 2.5 s.
        let before = vec![(0.06, 10_000.0), (2.5, 10_000.0), (f64::INFINITY, 10_000.0)];
        let after = vec![(0.06, 10_000.0), (2.5, 10_100.0), (f64::INFINITY, 10_100.0)];
        let q = Quantiles::between(&before, &after);
        assert_eq!(q.requests, 100.0);
        let p50 = q.p50.unwrap();
        assert!(
            (p50 - 1.28).abs() < 1e-9,
            "{p50}: the window's, not the 0.05 s of before"
        );
        assert!(q.na.is_none());
    }

    #[test]
    fn a_reset_a_bucket_that_goes_down_and_hostile_numbers_are_na_with_the_reason() {
        let a = vec![(1.0, 10.0), (f64::INFINITY, 12.0)];
        let mut cases = 0;
        // Every single bucket going down by one: each is a reset.
        for i in 0..a.len() {
            let mut b = a.clone();
            b[i].1 -= 1.0;
            // Keep it cumulative where the drop is in the first bucket.
            let q = Quantiles::between(&a, &b);
            assert!(q.p50.is_none() && q.p99.is_none(), "case {i}");
            let why = q.na.unwrap();
            assert!(
                why.contains("went down") || why.contains("not cumulative"),
                "{why}"
            );
            cases += 1;
        }
        // A restarted server: every bucket back near 0.
        let q = Quantiles::between(&a, &[(1.0, 1.0), (f64::INFINITY, 1.0)]);
        assert!(q.na.unwrap().contains("counter reset"));
        cases += 1;
        let hostile: [&[(f64, f64)]; 7] = [
            &[(f64::NAN, 1.0)],
            &[(-1.0, 1.0)],
            &[(1e9, 1.0)],
            &[(1.0, -1.0)],
            &[(1.0, f64::NAN)],
            &[(1.0, 1e300)],
            &[(1.0, 5.0), (f64::INFINITY, 4.0)],
        ];
        for h in hostile {
            let q = Quantiles::between(&a, h);
            assert!(q.p50.is_none(), "{h:?}");
            assert!(q.na.is_some(), "{h:?}");
            cases += 1;
        }
        let q = Quantiles::between(&a, &[(2.0, 10.0), (f64::INFINITY, 12.0)]);
        assert!(q.na.unwrap().contains("bounds changed"));
        cases += 1;
        let q = Quantiles::between(&a, &a);
        assert_eq!(q.na.as_deref(), Some("no request finished in the window"));
        assert_eq!(q.pair_text(), "-");
        cases += 1;
        assert_eq!(cases, 12, "cases run");
    }

    #[test]
    fn a_set_adds_its_replicas_windows() {
        let one = Quantiles::of(vec![(1.0, 0.0), (2.0, 10.0), (f64::INFINITY, 10.0)]);
        let two = Quantiles::of(vec![(1.0, 10.0), (2.0, 10.0), (f64::INFINITY, 10.0)]);
        let na = Quantiles::na("counter reset");
        let set = Quantiles::merged([&one, &two, &na]);
        assert_eq!(set.requests, 20.0);
        assert_eq!(set.p50, Some(1.0));
        assert_eq!(
            Quantiles::merged([&na]).na.as_deref(),
            Some("counter reset")
        );
        assert_eq!(
            Latency {
                secs: 60.0,
                ttft: one.clone(),
                e2e: na
            }
            .summary(),
            "TTFT p50/p99 1.5/2.0 s · E2E N/A (counter reset) (over 60 s)"
        );
        assert_eq!(secs_text(0.045), "0.045");
        assert_eq!(secs_text(5.85), "5.8");
    }
}
