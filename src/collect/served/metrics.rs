//! Model-server figures from Prometheus text, parsed by `prom_text_format_parser` (it accepts
//! the `:` that vLLM and SGLang put in their metric names; `prometheus-parse` drops those lines). Metric names differ
//! by server and by version (vLLM renamed `gpu_cache_usage_perc` to `kv_cache_usage_perc`), so
//! each figure is looked up under every name it is known by. Pure.

/// Figures from one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Requests running.
    pub running: Option<f64>,
    /// Requests waiting.
    pub waiting: Option<f64>,
    /// KV-cache use, 0..1.
    pub kv_cache: Option<f64>,
    /// Generation tokens so far (counter).
    pub generation_tokens: Option<f64>,
    /// Time to first token: cumulative buckets since the server started (label sets added
    /// up), as read; `domain::latency` checks them and takes the window between scrapes.
    pub ttft: Vec<(f64, f64)>,
    /// End-to-end request latency, the same way.
    pub e2e: Vec<(f64, f64)>,
}

/// Distinct bucket bounds kept per histogram: vLLM has 22; a server sending thousands costs
/// no more than this.
pub const MAX_BOUNDS: usize = 64;

/// The cumulative buckets of histogram `name` in `text` (`NAME_bucket{...,le="2.5",...} 17`),
/// every label set added up per bound. A line whose bound or count is not a number is skipped
/// (the rest of the scrape stands); ranges are `domain::latency`'s to judge.
pub fn histogram(text: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket");
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        if !rest.starts_with('{') {
            continue;
        }
        let Some(le) = rest
            .split("le=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|s| {
                if s == "+Inf" {
                    Some(f64::INFINITY)
                } else {
                    s.parse::<f64>().ok().filter(|v| v.is_finite())
                }
            })
        else {
            continue;
        };
        let Some(v) = rest
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
        else {
            continue;
        };
        let full = buckets.len() >= MAX_BOUNDS;
        match buckets.iter_mut().find(|(b, _)| b.total_cmp(&le).is_eq()) {
            Some(b) => b.1 += v,
            None if !full => buckets.push((le, v)),
            None => {}
        }
    }
    buckets
}

/// Names per figure: vLLM (current, then older), SGLang, llama.cpp server, TGI.
const RUNNING: &[&str] = &[
    "vllm:num_requests_running",
    "sglang:num_running_reqs",
    "llamacpp:requests_processing",
    "tgi_batch_current_size",
];
const WAITING: &[&str] = &[
    "vllm:num_requests_waiting",
    "sglang:num_queue_reqs",
    "llamacpp:requests_deferred",
    "tgi_queue_size",
];
const KV: &[&str] = &[
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "sglang:token_usage",
    "llamacpp:kv_cache_usage_ratio",
];
const GEN: &[&str] = &[
    "vllm:generation_tokens_total",
    "vllm:generation_tokens",
    "sglang:generation_tokens_total",
    "llamacpp:tokens_predicted_total",
    "tgi_request_generated_tokens_sum",
];

/// Parses a scrape. A server with several engines (data parallel) reports one sample per
/// engine: counts and tokens add up, the KV-cache use is the highest.
pub fn parse(text: &str) -> Result<Figures, String> {
    use prom_text_format_parser::{Scrape, ValueType};
    if text.trim().is_empty() {
        return Ok(Figures::default());
    }
    let scrape = Scrape::parse(text).map_err(|e| format!("not Prometheus text: {e:?}"))?;
    // (name as exposed, value): histogram and summary sums and counts get their suffix back.
    let samples: Vec<(String, f64)> = scrape
        .metrics
        .iter()
        .flat_map(|m| {
            m.samples.iter().filter_map(move |s| {
                let name = match s.value.value_type {
                    ValueType::Sample => m.name.clone(),
                    ValueType::Sum => format!("{}_sum", m.name),
                    ValueType::Count => format!("{}_count", m.name),
                };
                let v: f64 = s.value.value.parse().ok()?;
                v.is_finite().then_some((name, v))
            })
        })
        .collect();
    let value = |names: &[&str], max: bool| -> Option<f64> {
        names.iter().find_map(|n| {
            let vals = samples.iter().filter(|(k, _)| k == n).map(|(_, v)| *v);
            if max {
                vals.reduce(f64::max)
            } else {
                vals.reduce(|a, b| a + b)
            }
        })
    };
    Ok(Figures {
        running: value(RUNNING, false),
        waiting: value(WAITING, false),
        kv_cache: value(KV, true),
        generation_tokens: value(GEN, false),
        ttft: histogram(text, crate::domain::latency::TTFT),
        e2e: histogram(text, crate::domain::latency::E2E),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_and_older_vllm_names() {
        let new = "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\",engine=\"0\"} 3.0\nvllm:num_requests_running{model_name=\"m\",engine=\"1\"} 2.0\n# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.25\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.5\n# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{model_name=\"m\"} 1234.0\n";
        let f = parse(new).unwrap();
        assert_eq!(f.running, Some(5.0));
        assert_eq!(f.kv_cache, Some(0.5));
        assert_eq!(f.generation_tokens, Some(1234.0));
        assert_eq!(f.waiting, None);
        let old = "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.75\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 7\n";
        let f = parse(old).unwrap();
        assert_eq!((f.kv_cache, f.waiting), (Some(0.75), Some(7.0)));
    }

    #[test]
    fn other_servers() {
        let llama = "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.1\n";
        let f = parse(llama).unwrap();
        assert_eq!((f.running, f.kv_cache), (Some(1.0), Some(0.1)));
        let sg = "sglang:num_queue_reqs{model_name=\"x\"} 4\n";
        assert_eq!(parse(sg).unwrap().waiting, Some(4.0));
        assert_eq!(parse("").unwrap(), Figures::default());
        assert!(parse("<html>not found</html>").is_err());
    }
}
