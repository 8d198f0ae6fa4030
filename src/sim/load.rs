//! The simulated load: smooth, reproducible variation from a seed. Each workload's GFX busy,
//! VRAM and (for model servers) request queue follow value noise over time, so two runs with
//! the same seed and the same time offsets see the same numbers.

use super::scenario::Kind;
use super::state::SimState;

/// A 64-bit mix (splitmix64 finaliser) of two values.
pub const fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hash to [-1, 1].
#[expect(clippy::cast_precision_loss, reason = "noise")]
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
}

/// Smooth value noise in [-1, 1] for `key` at time `t` seconds (period 4 s).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "t >= 0"
)]
pub fn noise(seed: u64, key: u64, t: f64) -> f64 {
    let x = t.max(0.0) / 4.0;
    let k = x.floor();
    let f = x - k;
    let s = f * f * (3.0 - 2.0 * f);
    let a = unit(mix(seed, key.wrapping_mul(1_000_003) ^ k as u64));
    let b = unit(mix(seed, key.wrapping_mul(1_000_003) ^ (k as u64 + 1)));
    a + (b - a) * s
}

/// Seconds since the scenario started.
#[expect(clippy::cast_precision_loss, reason = "seconds")]
pub fn elapsed(state: &SimState, now_ms: u64) -> f64 {
    now_ms.saturating_sub(state.started_ms) as f64 / 1000.0
}

/// Workload `i`'s GFX busy share of its partition, percent.
pub fn busy(state: &SimState, i: usize, t: f64) -> f64 {
    let w = &state.workloads[i].spec;
    if w.kind == Kind::Agent {
        return 0.0;
    }
    (w.busy + w.swing * noise(state.seed, i as u64, t)).clamp(0.0, 100.0)
}

/// Workload `i`'s VRAM, bytes. A model server holds what it reserved at load (weights and its
/// KV-cache pool) and up to 0.5% more with load, never less: a read at any moment gives the same
/// whole GiB for `models add`.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "bytes"
)]
pub fn vram(state: &SimState, i: usize, t: f64) -> u64 {
    let w = &state.workloads[i].spec;
    let wobble = if w.kind == Kind::ModelServer {
        1.0 + 0.0025 * (1.0 + noise(state.seed, 1000 + i as u64, t))
    } else {
        1.0
    };
    (w.vram_gb * wobble * f64::from(1u32 << 30)).max(0.0) as u64
}

/// Pressure from other workloads sharing an HBM domain with workload `i` (0..1): the
/// noisy-neighbour effect. Partitions of one GPU with memory domains of their own (DPX on
/// NPS2, CPX on NPS4) do not press on each other: AMD's guide measures two DPX/NPS2 servers
/// at 1.2x one SPX server.
pub fn neighbour_pressure(state: &SimState, i: usize, t: f64) -> f64 {
    let me = &state.workloads[i].spec;
    let logical = state.logical();
    let domains = |gpu: u32, partition: u32| -> Vec<u32> {
        logical
            .iter()
            .find(|l| l.phys == gpu as usize && l.shape.partition_id == partition)
            .map(|l| l.shape.memory_domains.clone())
            .unwrap_or_default()
    };
    let mine = domains(me.gpu, me.partition);
    (0..state.workloads.len())
        .filter(|j| *j != i && state.alive(*j))
        .filter(|j| {
            let o = &state.workloads[*j].spec;
            o.kind != Kind::Agent
                && o.gpu == me.gpu
                && o.partition != me.partition
                && domains(o.gpu, o.partition).iter().any(|d| mine.contains(d))
        })
        .map(|j| busy(state, j, t) / 100.0)
        .fold(0.0, f64::max)
}

/// What one physical GPU shows at a moment: the same figures for the fake amd-smi and the
/// kernel twin, so both interfaces of the simulated node agree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceLoad {
    /// Device GFX activity: the mean of its partitions, percent.
    pub busy: f64,
    /// Memory-controller activity, percent.
    pub umc: f64,
    /// Socket power, W.
    pub power: f64,
    /// Junction (hotspot) temperature, °C.
    pub hotspot: f64,
    /// HBM temperature, °C.
    pub mem_temp: f64,
}

/// Per logical GPU busy and VRAM, and per physical GPU figures, at `t` seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeLoad {
    /// GFX busy per logical GPU (amd-smi index), percent, rounded.
    pub busy: Vec<f64>,
    /// VRAM in use per logical GPU, bytes (283 MiB of driver reserve each).
    pub vram: Vec<u64>,
    /// Per physical GPU.
    pub device: Vec<DeviceLoad>,
}

/// The node's load at `t` seconds under its current layout.
pub fn node_load(state: &SimState, logical: &[super::rules::Logical], t: f64) -> NodeLoad {
    let mut busy = vec![0.0; logical.len()];
    let mut vram = vec![283u64 << 20; logical.len()];
    for i in 0..state.workloads.len() {
        if !state.alive(i) {
            continue;
        }
        if let Some(ix) = state.placement_index(i) {
            busy[ix as usize] += self::busy(state, i, t);
            vram[ix as usize] += self::vram(state, i, t);
        }
    }
    for b in &mut busy {
        *b = b.min(100.0).round();
    }
    let prod = state.product();
    let device = (0..state.gpus.len())
        .map(|phys| {
            let mine: Vec<f64> = logical
                .iter()
                .filter(|l| l.phys == phys)
                .map(|l| busy[l.index as usize])
                .collect();
            #[expect(clippy::cast_precision_loss, reason = "small counts")]
            let dev_busy = if mine.is_empty() {
                0.0
            } else {
                mine.iter().sum::<f64>() / mine.len() as f64
            };
            let bandwidth_hog = state.workloads.iter().enumerate().any(|(i, w)| {
                state.alive(i)
                    && w.spec.gpu as usize == phys
                    && w.spec.comm.as_deref() == Some("rocm_bandwidth_")
            });
            let umc = if bandwidth_hog {
                88.0
            } else {
                (dev_busy * 0.4).round()
            };
            let power = (140.0
                + (f64::from(prod.power_cap_w) - 140.0) * 0.85 * dev_busy / 100.0
                + 4.0 * noise(state.seed, 5000 + phys as u64, t))
            .round();
            let frac = power / f64::from(prod.power_cap_w);
            DeviceLoad {
                busy: dev_busy,
                umc,
                power,
                hotspot: (36.0 + 50.0 * frac).round(),
                mem_temp: (33.0 + 32.0 * frac).round(),
            }
        })
        .collect();
    NodeLoad { busy, vram, device }
}

/// What the guide's 12B model serves on one whole MI300X (SPX) at full load, tokens/s: AMD's
/// measurement was 2,457 at its load (about 95% busy).
pub const SPX_PEAK_TOKENS_PER_SEC: f64 = 2_600.0;

/// How a server's throughput follows its partition's compute share: `share^SHARE_EXPONENT`.
/// Calibrated on the guide's experiment: two DPX servers (half a GPU each) give 1.2x one SPX
/// server, so `2 * 0.5^e = 1.2`, `e = ln 0.6 / ln 0.5`. Smaller slices lose less than their
/// share of compute because a decode step is memory-bound.
pub const SHARE_EXPONENT: f64 = 0.736_965_594_166_206_2;

/// Output tokens of one simulated request (the guide's benchmark: long generations, so an SPX
/// server answers in about 3.5 s and a DPX server in about 6 s).
pub const OUTPUT_TOKENS: f64 = 384.0;

/// Prompt tokens of one simulated request.
pub const PROMPT_TOKENS: f64 = 4.0 * OUTPUT_TOKENS;

/// Requests a fully busy server runs at once (its batch).
const BATCH: f64 = 24.0;

/// A server's peak tokens/s on a partition with `share` of its GPU's compute (0..1].
pub fn peak_tokens_per_sec(share: f64) -> f64 {
    SPX_PEAK_TOKENS_PER_SEC * share.clamp(0.0, 1.0).powf(SHARE_EXPONENT)
}

/// Workload `i`'s share of its physical GPU's compute: its partition's XCDs over the GPU's
/// (1 on SPX, 1/2 on DPX, 1/8 on CPX of an MI300X). A server with no partition under the
/// current layout has none.
#[expect(clippy::cast_precision_loss, reason = "XCD counts")]
pub fn compute_share(state: &SimState, i: usize) -> f64 {
    let Some(ix) = state.placement_index(i) else {
        return 0.0;
    };
    let xcds = f64::from(state.product().xcds.max(1));
    state
        .logical()
        .into_iter()
        .find(|l| l.index == ix)
        .map_or(0.0, |l| l.shape.xcds.len() as f64 / xcds)
}

/// A model server's vLLM-style gauges at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelFigures {
    /// `vllm:num_requests_running`.
    pub running: f64,
    /// `vllm:num_requests_waiting`.
    pub waiting: f64,
    /// `vllm:kv_cache_usage_perc` (0..1).
    pub kv_cache: f64,
    /// Generation tokens/s it delivers now.
    pub tokens_per_sec: f64,
    /// Mean end-to-end latency of a request now, seconds (`None` while it serves nothing).
    pub latency: Option<f64>,
    /// Mean time to a request's first token now, seconds: its prompt's prefill, slower with
    /// the same share of compute, longer with the queue ahead of it.
    pub ttft: Option<f64>,
}

/// How much faster a server reads a prompt than it writes output, per token (prefill is
/// compute-bound and batched): a 1,536-token prompt takes about a tenth of the output's time.
const PREFILL_SPEEDUP: f64 = 40.0;

/// Figures for model server `i` at `t`: its throughput is its partition's peak
/// ([`peak_tokens_per_sec`]) times its busy share; a neighbour above 90% busy makes the queue
/// grow and slows it (shared HBM). A request's latency is its output over its own share of the
/// batch's tokens/s.
pub fn model_figures(state: &SimState, i: usize, t: f64) -> ModelFigures {
    let b = busy(state, i, t) / 100.0;
    let p = neighbour_pressure(state, i, t);
    let running = (b * BATCH).round();
    let squeeze = if p > 0.9 { (t / 10.0).min(40.0) } else { 0.0 };
    let waiting =
        (b * 3.0 * (1.0 + noise(state.seed, 2000 + i as u64, t)).max(0.0) + squeeze).round();
    let rate = peak_tokens_per_sec(compute_share(state, i)) * b * (1.0 - 0.5 * p);
    let latency = (rate > 0.0 && b > 0.0).then(|| OUTPUT_TOKENS * b * BATCH / rate);
    ModelFigures {
        running,
        waiting,
        kv_cache: (0.15 + 0.7 * b).min(1.0),
        tokens_per_sec: rate,
        latency,
        ttft: latency
            .map(|l| l * PROMPT_TOKENS / OUTPUT_TOKENS / PREFILL_SPEEDUP * (1.0 + waiting / BATCH)),
    }
}

/// Upper bounds of vLLM's `e2e_request_latency_seconds` histogram buckets (before `+Inf`).
pub const LATENCY_BUCKETS: [f64; 21] = crate::domain::latency::E2E_BOUNDS;

/// Upper bounds of vLLM's `time_to_first_token_seconds` histogram buckets (before `+Inf`).
pub const TTFT_BUCKETS: [f64; 22] = crate::domain::latency::TTFT_BOUNDS;

/// How the requests of a moment spread around its mean latency: (multiple of the mean, share).
const LATENCY_SPREAD: [(f64, f64); 6] = [
    (0.6, 0.1),
    (0.8, 0.2),
    (1.0, 0.4),
    (1.25, 0.2),
    (1.6, 0.09),
    (2.2, 0.01),
];

/// A model server's counters, as vLLM keeps them: they start at 0 when the server process
/// starts and only grow (the Prometheus counter contract `rate()` relies on). The serving
/// process owns one and advances it on each scrape over the time that passed, at the rates of
/// each second of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerCounters {
    /// Simulated seconds up to which the counters are integrated.
    pub at: f64,
    /// `vllm:prompt_tokens_total` (fractional: shown floored).
    pub prompt_tokens: f64,
    /// `vllm:generation_tokens_total`.
    pub generation_tokens: f64,
    /// Requests finished, per latency bucket (the last is `+Inf` only).
    pub buckets: [f64; 22],
    /// Sum of the finished requests' latencies, seconds.
    pub latency_sum: f64,
    /// Requests started, per time-to-first-token bucket (the last is `+Inf` only).
    pub ttft_buckets: [f64; 23],
    /// Sum of their times to the first token, seconds.
    pub ttft_sum: f64,
}

impl ServerCounters {
    /// Counters of a server that started at `t` seconds: all zero.
    pub const fn new(t: f64) -> Self {
        Self {
            at: t,
            prompt_tokens: 0.0,
            generation_tokens: 0.0,
            buckets: [0.0; 22],
            latency_sum: 0.0,
            ttft_buckets: [0.0; 23],
            ttft_sum: 0.0,
        }
    }

    /// Advances to `t` (a `t` before the last one changes nothing): each whole second on the
    /// absolute grid contributes its rate, so what is added never depends on when reads fall.
    pub fn advance(&mut self, state: &SimState, i: usize, t: f64) {
        while self.at < t {
            let next = (self.at.floor() + 1.0).min(t);
            let dt = next - self.at;
            let f = model_figures(state, i, self.at);
            self.generation_tokens += f.tokens_per_sec * dt;
            let requests = f.tokens_per_sec * dt / OUTPUT_TOKENS;
            self.prompt_tokens += requests * PROMPT_TOKENS;
            if let Some(mean) = f.latency {
                spread(
                    &mut self.buckets,
                    &mut self.latency_sum,
                    &LATENCY_BUCKETS,
                    mean,
                    requests,
                );
            }
            if let Some(mean) = f.ttft {
                spread(
                    &mut self.ttft_buckets,
                    &mut self.ttft_sum,
                    &TTFT_BUCKETS,
                    mean,
                    requests,
                );
            }
            self.at = next;
        }
    }

    /// Requests finished.
    pub fn requests(&self) -> f64 {
        self.buckets.iter().sum()
    }

    /// Requests that got their first token.
    pub fn first_tokens(&self) -> f64 {
        self.ttft_buckets.iter().sum()
    }
}

/// Spreads `requests` of `mean` latency over a histogram's buckets as [`LATENCY_SPREAD`] says.
fn spread(buckets: &mut [f64], sum: &mut f64, bounds: &[f64], mean: f64, requests: f64) {
    for (mult, share) in LATENCY_SPREAD {
        let l = mean * mult;
        let b = bounds
            .iter()
            .position(|le| l <= *le)
            .unwrap_or(bounds.len())
            .min(buckets.len() - 1);
        buckets[b] += requests * share;
        *sum += requests * share * l;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_is_reproducible_bounded_and_smooth() {
        for k in 0..50 {
            let t = f64::from(k) * 0.37;
            let a = noise(7, 3, t);
            assert_eq!(a, noise(7, 3, t));
            assert!((-1.0..=1.0).contains(&a));
            assert!((noise(7, 3, t + 0.01) - a).abs() < 0.05);
        }
        assert_ne!(noise(7, 3, 1.0), noise(8, 3, 1.0));
    }

    #[test]
    fn two_dpx_servers_give_1_2x_one_spx_server() {
        let ratio = 2.0 * peak_tokens_per_sec(0.5) / peak_tokens_per_sec(1.0);
        assert!((ratio - 1.2).abs() < 1e-9, "{ratio}");
        // Monotone in the share: a bigger slice never serves less.
        let mut last = 0.0;
        for k in 0..=64 {
            let p = peak_tokens_per_sec(f64::from(k) / 64.0);
            assert!(p >= last, "share {k}/64");
            last = p;
        }
    }
}
