//! What a call of the fake amd-smi costs. The real amd-smi is a Python program: on a 16-GPU
//! node one `amd-smi process` takes 0.76 s of wall time and 0.65 s of CPU
//! (ROCm/device-metrics-exporter#565) and a first call about 3 s (ROCm/rocm_smi_lib#151). The
//! simulator burns that much CPU and waits that long, scaled by the node's logical GPU count, so
//! a rehearsal or a benchmark on the simulated node costs what a real node costs. Tests may turn
//! it off (`PARTOP_SIM_AMD_SMI_COST=off` when the node starts, or `amd_smi_cost.enabled =
//! false` in a scenario).

use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Environment variable read when a node starts: `off`, `hang`, or `on` (the default).
pub const ENV: &str = "PARTOP_SIM_AMD_SMI_COST";

/// The cost model: a fixed part (the interpreter starting, the library initialising) and a part
/// per logical GPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AmdSmiCost {
    /// Whether calls cost anything.
    pub enabled: bool,
    /// CPU seconds every call burns.
    pub cpu_fixed_secs: f64,
    /// CPU seconds per logical GPU.
    pub cpu_per_gpu_secs: f64,
    /// Wall time as a multiple of CPU time (waiting on the driver).
    pub wall_factor: f64,
    /// Wall seconds of the first call after the node starts (caches cold), at 16 logical GPUs;
    /// scaled like the rest.
    pub first_call_secs: f64,
}

impl Default for AmdSmiCost {
    fn default() -> Self {
        // 0.25 + 16 x 0.025 = 0.65 CPU-s, x 0.76/0.65 = 0.76 s wall: the published figures.
        Self {
            enabled: true,
            cpu_fixed_secs: 0.25,
            cpu_per_gpu_secs: 0.025,
            wall_factor: 0.76 / 0.65,
            first_call_secs: 3.0,
        }
    }
}

impl AmdSmiCost {
    /// This model, turned off when the environment says so.
    #[must_use]
    pub fn from_env(self) -> Self {
        match std::env::var(ENV).as_deref() {
            Ok("off" | "0" | "false") => Self {
                enabled: false,
                ..self
            },
            // An amd-smi that hangs (a wedged driver): every call waits an hour.
            Ok("hang") => Self {
                enabled: true,
                wall_factor: 1e6,
                first_call_secs: 3600.0,
                ..self
            },
            _ => self,
        }
    }

    /// (CPU seconds, wall seconds) of one call on a node with `gpus` logical GPUs.
    pub fn of(&self, gpus: usize, first: bool) -> (f64, f64) {
        if !self.enabled {
            return (0.0, 0.0);
        }
        // A scenario's figures are bounded (a call never burns more than a minute of CPU or
        // waits more than an hour); a figure that is not a number counts as zero.
        let sane = |v: f64, max: f64| {
            if v.is_finite() {
                v.clamp(0.0, max)
            } else {
                0.0
            }
        };
        #[expect(clippy::cast_precision_loss, reason = "GPU counts")]
        let cpu = sane(
            sane(self.cpu_per_gpu_secs, 60.0).mul_add(gpus as f64, sane(self.cpu_fixed_secs, 60.0)),
            60.0,
        );
        let wall = sane(cpu * self.wall_factor, 3600.0).max(cpu);
        if first {
            let base = self.cpu_per_gpu_secs.mul_add(16.0, self.cpu_fixed_secs);
            let scale = if base > 0.0 && base.is_finite() {
                cpu / base
            } else {
                1.0
            };
            (cpu, sane(self.first_call_secs * scale, 3600.0).max(wall))
        } else {
            (cpu, wall)
        }
    }
}

/// Spends `cpu` seconds of this process's CPU, then waits until `wall` seconds have passed
/// since `start`.
pub fn spend(cpu: f64, wall: f64, start: Instant) {
    let cpu = Duration::from_secs_f64(cpu.max(0.0));
    let used = || {
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
            .map_or(Duration::MAX, Duration::from)
    };
    let base = used();
    let mut x = 0u64;
    while used().saturating_sub(base) < cpu && start.elapsed() < Duration::from_secs(60) {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
        }
    }
    let wall = Duration::from_secs_f64(wall.max(0.0));
    if let Some(rest) = wall.checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_figures_at_16_gpus_and_scaling() {
        let c = AmdSmiCost::default();
        let (cpu, wall) = c.of(16, false);
        assert!((cpu - 0.65).abs() < 1e-9 && (wall - 0.76).abs() < 1e-9);
        let (_, first) = c.of(16, true);
        assert!((first - 3.0).abs() < 1e-9);
        let (cpu64, _) = c.of(64, false);
        assert!(cpu64 > 1.8 && cpu64 < 1.9);
        let off = AmdSmiCost {
            enabled: false,
            ..c
        };
        assert_eq!(off.of(64, true), (0.0, 0.0));
        let absurd = AmdSmiCost {
            cpu_fixed_secs: f64::INFINITY,
            cpu_per_gpu_secs: f64::NAN,
            wall_factor: 1e300,
            first_call_secs: -4.0,
            ..c
        };
        let (cpu, wall) = absurd.of(64, true);
        assert!(cpu == 0.0 && (0.0..=3600.0).contains(&wall), "{cpu} {wall}");
        spend(cpu, 0.0, std::time::Instant::now());
    }
}
