//! One simulated workload process (`partop sim workload`). It is a real process: it holds its
//! place until signalled, honours or ignores SIGTERM as its scenario says, and model servers
//! answer HTTP on 127.0.0.1 like vLLM: `/health`, `/v1/models`, `/v1/completions` (naming the
//! server that answered) and `/metrics` in Prometheus text, counters kept by the process.

use super::load;
use super::scenario::Kind;
use super::state::SimState;
use crate::collect::clock;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Environment variable naming the workload a process runs (set by `sim start`).
pub const ENV_NAME: &str = "PARTOP_SIM_WORKLOAD";
/// Environment variable with the state file of that workload.
pub const ENV_STATE: &str = "PARTOP_SIM_WORKLOAD_STATE";

/// Environment variable with the device files the workload holds open (`:`-separated).
pub const ENV_DEVICES: &str = "PARTOP_SIM_WORKLOAD_DEVICES";

/// If this process was started as a simulated workload, runs it and returns its exit status.
pub fn from_env() -> Option<i32> {
    let name = std::env::var(ENV_NAME).ok()?;
    let state = std::env::var_os(ENV_STATE)?;
    // Hold the simulated device files open for the process's life, as a ROCm process holds
    // /dev/kfd and its render node; opened first, so that by the time `sim start` sees the
    // process ready (below) it holds them, as KFD lists a process only once it opened /dev/kfd.
    let _held: Vec<std::fs::File> = std::env::var_os(ENV_DEVICES)
        .map(|v| {
            std::env::split_paths(&v)
                .filter_map(|p| std::fs::File::open(p).ok())
                .collect()
        })
        .unwrap_or_default();
    // Catch SIGTERM before anything else: `sim start` waits for this (see session::launch).
    let term = Arc::new(AtomicBool::new(false));
    if signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&term)).is_err() {
        return Some(1);
    }
    Some(run(Path::new(&state), &name, &term))
}

/// Prometheus text for model server `i`, as vLLM names its metrics. `counters` are the serving
/// process's own (they start at 0 with it), advanced to `now_ms` first.
pub fn metrics_text(
    state: &SimState,
    i: usize,
    counters: &mut load::ServerCounters,
    now_ms: u64,
) -> String {
    if let Some(text) = &state.workloads[i].spec.metrics {
        return text.clone();
    }
    let t = load::elapsed(state, now_ms);
    counters.advance(state, i, t);
    let f = load::model_figures(state, i, t);
    let model = state.workloads[i].spec.model.clone().unwrap_or_default();
    let l = format!("{{model_name=\"{model}\"}}");
    let mut o = String::new();
    let mut g = |name: &str, help: &str, kind: &str, v: f64| {
        let _ = writeln!(
            o,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{l} {v}"
        );
    };
    g(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        "gauge",
        f.running,
    );
    g(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        "gauge",
        f.waiting,
    );
    g(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        "gauge",
        f.kv_cache,
    );
    // Counters are whole numbers, floored: a floor of a growing figure never goes down.
    g(
        "vllm:prompt_tokens_total",
        "Number of prefill tokens processed.",
        "counter",
        counters.prompt_tokens.floor(),
    );
    g(
        "vllm:generation_tokens_total",
        "Number of generation tokens processed.",
        "counter",
        counters.generation_tokens.floor(),
    );
    latency_histogram(&mut o, &model, counters);
    o
}

/// `vllm:e2e_request_latency_seconds` and `vllm:time_to_first_token_seconds` as vLLM exposes
/// them: cumulative buckets, sum and count.
fn latency_histogram(o: &mut String, model: &str, c: &load::ServerCounters) {
    histogram(
        o,
        model,
        crate::domain::latency::E2E,
        "Histogram of end to end request latency in seconds.",
        (&load::LATENCY_BUCKETS, &c.buckets),
        c.latency_sum,
    );
    histogram(
        o,
        model,
        crate::domain::latency::TTFT,
        "Histogram of time to first token in seconds.",
        (&load::TTFT_BUCKETS, &c.ttft_buckets),
        c.ttft_sum,
    );
}

/// One histogram: per-bucket counts (the last one `+Inf` only) written cumulative and floored
/// (a floor of a growing figure never goes down).
fn histogram(o: &mut String, model: &str, name: &str, help: &str, b: (&[f64], &[f64]), sum: f64) {
    let (bounds, counts) = b;
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} histogram");
    let mut cumulative = 0.0;
    for (le, n) in bounds.iter().zip(counts) {
        cumulative += n;
        let _ = writeln!(
            o,
            "{name}_bucket{{le=\"{le:?}\",model_name=\"{model}\"}} {}",
            cumulative.floor()
        );
    }
    let total: f64 = counts.iter().sum::<f64>().floor();
    let _ = writeln!(
        o,
        "{name}_bucket{{le=\"+Inf\",model_name=\"{model}\"}} {total}\n{name}_sum{{model_name=\"{model}\"}} {sum}\n{name}_count{{model_name=\"{model}\"}} {total}"
    );
}

/// Says why the workload cannot run, on its stderr (its log, as a real server's would be). Not
/// through `log`: a workload process installs no logger, and what it said was lost (an apply
/// then reported a relaunch that "exited while starting" with nothing in its log).
fn fail(msg: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "ERROR: {msg}");
}

/// Runs workload `name` until terminated. Returns the exit status.
pub fn run(state_path: &Path, name: &str, term: &AtomicBool) -> i32 {
    let state = match SimState::load(state_path) {
        Ok(s) => s,
        Err(e) => {
            fail(&e.to_string());
            return 1;
        }
    };
    let Some(i) = state.workloads.iter().position(|w| w.spec.name == name) else {
        fail(&format!("no workload {name} in {}", state_path.display()));
        return 1;
    };
    let spec = state.workloads[i].spec.clone();
    // comm (what amd-smi and top show) as the real process would have it.
    if let Ok(c) = std::ffi::CString::new(spec.comm.clone().unwrap_or_else(|| "python3".into())) {
        let _ = nix::sys::prctl::set_name(&c);
    }
    let server = if spec.kind == Kind::ModelServer {
        match tiny_http::Server::http(("127.0.0.1", state.workloads[i].port)) {
            Ok(s) => Some(s),
            Err(e) => {
                fail(&format!(
                    "{name}: cannot listen on port {}: {e}",
                    state.workloads[i].port
                ));
                return 1;
            }
        }
    } else {
        None
    };
    if server.is_some() {
        // What vLLM prints while it starts, so the Models view has a log tail to show.
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "INFO {}: vLLM API server (partop simulator) serving {} on logical GPU {}\nINFO: Started server process [{}]\nINFO: Uvicorn running on http://127.0.0.1:{} (Press CTRL+C to quit)",
            clock::rfc3339(clock::now_ms()),
            spec.model.clone().unwrap_or_default(),
            std::env::var("HIP_VISIBLE_DEVICES").unwrap_or_else(|_| "?".into()),
            std::process::id(),
            state.workloads[i].port
        );
        let _ = out.flush();
    }
    // vLLM's counters live in its process: they start at 0 with it.
    let mut counters = load::ServerCounters::new(load::elapsed(&state, clock::now_ms()));
    let mut checked = std::time::Instant::now();
    loop {
        // A node whose state file is gone no longer exists (its owner was killed and its files
        // removed before its twin could stop it): nothing can stop this workload any more, so
        // it ends rather than run on as an orphan.
        if checked.elapsed() >= Duration::from_secs(2) {
            checked = std::time::Instant::now();
            if !state_path.exists() {
                fail(&format!(
                    "{} is gone: the simulated node no longer exists",
                    state_path.display()
                ));
                return 0;
            }
        }
        if term.swap(false, Ordering::SeqCst) {
            if spec.ignore_sigterm {
                continue;
            }
            return 0;
        }
        match &server {
            Some(s) => {
                if let Ok(Some(req)) = s.recv_timeout(Duration::from_millis(200)) {
                    respond(state_path, i, &mut counters, req);
                }
            }
            None => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "seconds"
)]
fn load_ms(s: &SimState) -> u64 {
    (s.model_load_secs.max(0.0) * 1000.0) as u64
}

fn respond(
    state_path: &Path,
    i: usize,
    counters: &mut load::ServerCounters,
    req: tiny_http::Request,
) {
    // Re-read the node so neighbours' load (the noisy-neighbour effect) is current.
    let state = SimState::load(state_path);
    let url = req.url().split('?').next().unwrap_or("").to_string();
    let (code, body, ctype) = match (&state, url.as_str()) {
        // Like vLLM loading weights: not healthy until the model is loaded.
        (Ok(s), "/health")
            if clock::now_ms().saturating_sub(s.workloads[i].started_ms) < load_ms(s) =>
        {
            (503, "loading model".into(), "text/plain")
        }
        (Ok(_), "/health") => (200, String::new(), "text/plain"),
        (Ok(s), "/v1/models") => {
            let model = s.workloads[i].spec.model.clone().unwrap_or_default();
            let body = serde_json::json!({"object": "list", "data": [{"id": model, "object": "model", "owned_by": "vllm", "root": model, "max_model_len": 32768}]});
            (200, body.to_string(), "application/json")
        }
        // A completion answers at once and says which server gave it, so a request through a
        // load balancer shows the replica it reached (the simulated load stands for the work).
        (Ok(s), "/v1/completions" | "/v1/chat/completions") => {
            let w = &s.workloads[i];
            let body = serde_json::json!({"object": "text_completion", "model": w.spec.model.clone().unwrap_or_default(), "served_by": w.spec.name, "port": w.port, "choices": [{"index": 0, "text": " (simulated)", "finish_reason": "length"}]});
            (200, body.to_string(), "application/json")
        }
        (Ok(s), "/metrics") => (
            200,
            metrics_text(s, i, counters, clock::now_ms()),
            "text/plain; version=0.0.4",
        ),
        (Err(_), _) => (503, "simulator state unavailable".into(), "text/plain"),
        _ => (404, "not found".into(), "text/plain"),
    };
    let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes()).ok();
    let mut resp = tiny_http::Response::from_string(body).with_status_code(code);
    if let Some(h) = header {
        resp = resp.with_header(h);
    }
    let _ = req.respond(resp);
}
