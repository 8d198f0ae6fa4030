//! Measuring model servers over a window (`partop models measure`): their counters and latency
//! histogram scraped at its start and end, their queues read each second between. Blocking;
//! each scrape bounded like every probe. What it gives is turned into a measurement by
//! `domain::throughput`.

use crate::domain::throughput::Window;
use std::time::{Duration, Instant};

/// One scrape's counters: generation tokens and the latency buckets (upper bound, count),
/// every label set added up per bound.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    /// Generation tokens so far.
    pub tokens: Option<f64>,
    /// Requests running now.
    pub running: Option<f64>,
    /// Requests waiting now.
    pub waiting: Option<f64>,
    /// Cumulative end-to-end latency buckets.
    pub buckets: Vec<(f64, f64)>,
    /// Cumulative time-to-first-token buckets.
    pub ttft: Vec<(f64, f64)>,
}

/// Reads `text` (Prometheus exposition) through [`super::metrics::parse`].
pub fn counters(text: &str) -> Result<Counters, String> {
    let f = super::metrics::parse(text)?;
    Ok(Counters {
        tokens: f.generation_tokens,
        running: f.running,
        waiting: f.waiting,
        buckets: f.e2e,
        ttft: f.ttft,
    })
}

fn scrape(url: &str) -> Option<Counters> {
    let r = super::http::get(url, Duration::from_millis(800)).ok()?;
    (r.status == 200).then(|| counters(&r.body).ok()).flatten()
}

/// Each server of `urls` over `secs` seconds; a server that does not answer at both ends, or
/// whose counters went down (it restarted), is left out.
pub fn windows(urls: &[String], secs: u64) -> Vec<Window> {
    let start: Vec<Option<Counters>> = urls.iter().map(|u| scrape(u)).collect();
    let t0 = Instant::now();
    let mut queues = vec![(0.0, 0.0, 0u32); urls.len()];
    while t0.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(1).min(Duration::from_secs(secs)));
        for (i, u) in urls.iter().enumerate() {
            if let Some(c) = scrape(u) {
                queues[i].0 += c.running.unwrap_or(0.0);
                queues[i].1 += c.waiting.unwrap_or(0.0);
                queues[i].2 += 1;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    urls.iter()
        .zip(start)
        .zip(queues)
        .filter_map(|((u, a), (run, wait, n))| {
            let (a, b) = (a?, scrape(u)?);
            let tokens = b.tokens? - a.tokens?;
            if tokens < 0.0 {
                return None;
            }
            // A histogram that reset (or reads wrong) gives no latency; tokens still count.
            let window = |x: &[(f64, f64)], y: &[(f64, f64)]| {
                crate::domain::latency::delta(x, y).unwrap_or_default()
            };
            let buckets = window(&a.buckets, &b.buckets);
            let ttft = window(&a.ttft, &b.ttft);
            let n = f64::from(n.max(1));
            Some(Window {
                tokens,
                secs,
                running: run / n,
                waiting: wait / n,
                buckets,
                ttft,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_add_up_across_label_sets_and_bad_lines_are_skipped() {
        let text = "# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"2.5\",model_name=\"m\",engine=\"0\"} 3\nvllm:e2e_request_latency_seconds_bucket{le=\"2.5\",model_name=\"m\",engine=\"1\"} 4\nvllm:e2e_request_latency_seconds_bucket{le=\"+Inf\",model_name=\"m\",engine=\"0\"} 9\nvllm:e2e_request_latency_seconds_bucket{le=\"nan\",model_name=\"m\"} 1\nvllm:e2e_request_latency_seconds_bucket{le=\"5\",model_name=\"m\"} -1\n# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{model_name=\"m\"} 1234\n";
        let c = counters(text).unwrap();
        assert_eq!(c.tokens, Some(1234.0));
        assert_eq!(c.buckets, vec![(2.5, 7.0), (f64::INFINITY, 9.0)]);
    }
}
