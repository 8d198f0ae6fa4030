//! amd-smi beside the kernel: its reads run as a background job of the collector, on their own
//! cadence, and never hold up a sample. The kernel is read every tick; amd-smi is asked at
//! start (identity, firmware, partition profiles, version), when the KFD topology generation
//! moves, when partop asks after a change, and otherwise no more often than the policy allows:
//! the interval is the larger of the minimum (`amd_smi_every`) and what keeps amd-smi's measured
//! CPU within its share of the budget. Where amd-smi is the only source (no kernel GPUs), the
//! same measurement widens the per-tick interval to keep it within the budget.
//!
//! Cost is measured, not assumed: the CPU of the programs run (getrusage of reaped children
//! around the read; partop runs no other periodic program) and their wall time.

use super::error::AmdSmiError;
use super::recording::CommandSource;
use super::runner::RawOutput;
use crate::domain::snapshot::Cadence;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How amd-smi may be used.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Never more often than this (kernel first), seconds.
    pub every: Duration,
    /// Share of one core amd-smi may use where it is the only source (0.01 = 1 %). Beside the
    /// kernel, where it only refreshes identity, it gets a fifth of it.
    pub budget: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            every: Duration::from_secs(60),
            budget: 0.01,
        }
    }
}

/// What a read is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Beside the kernel: identity, firmware, profiles (`list`, `static`, `partition`).
    Identity,
    /// The only source: also `metric` and `process`.
    Only,
}

/// The outputs of one read.
#[derive(Debug)]
pub struct LaneOut {
    /// (args, output) of each program run, in order.
    pub outputs: Vec<(Vec<&'static str>, Result<RawOutput, AmdSmiError>)>,
    /// CPU of the programs run.
    pub cpu: Duration,
    /// Wall time of the read.
    pub wall: Duration,
}

/// CPU time of this process's reaped children so far.
pub fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(Duration::ZERO, |u| {
        let t = |tv: nix::sys::time::TimeVal| {
            Duration::from_secs(u64::try_from(tv.tv_sec()).unwrap_or(0))
                + Duration::from_micros(u64::try_from(tv.tv_usec()).unwrap_or(0))
        };
        t(u.user_time()) + t(u.system_time())
    })
}

/// Runs `calls` concurrently through `source`, measuring their cost.
pub async fn read(source: CommandSource, calls: Vec<Vec<&'static str>>) -> LaneOut {
    let t = Instant::now();
    let cpu0 = children_cpu();
    let jobs: Vec<_> = calls
        .into_iter()
        .map(|args| {
            let source = source.clone();
            tokio::spawn(async move {
                let out = source.call(&args).await;
                (args, out)
            })
        })
        .collect();
    let mut outputs = Vec::with_capacity(jobs.len());
    for j in jobs {
        if let Ok(o) = j.await {
            outputs.push(o);
        }
    }
    LaneOut {
        outputs,
        cpu: children_cpu().saturating_sub(cpu0),
        wall: t.elapsed(),
    }
}

/// The background read and its schedule.
#[derive(Debug, Default)]
pub struct Lane {
    job: Option<(tokio::task::JoinHandle<LaneOut>, Instant)>,
    next: Option<Instant>,
    /// Read at the next chance, whatever the schedule says (start, topology change, a change
    /// partop made).
    pub force: bool,
    last: Option<(Duration, Duration, u32)>,
    every: Duration,
    why: &'static str,
    runs: VecDeque<(Instant, u32)>,
}

impl Lane {
    /// Whether a read should start now.
    pub fn due(&self, now: Instant) -> bool {
        self.job.is_none() && (self.force || self.next.is_none_or(|n| now >= n))
    }

    /// Whether a read is running.
    pub const fn running(&self) -> bool {
        self.job.is_some()
    }

    /// For how long the running read has been going.
    pub fn running_for(&self) -> Option<Duration> {
        self.job.as_ref().map(|(_, t)| t.elapsed())
    }

    /// Starts a read of `calls`.
    pub fn start(&mut self, source: CommandSource, calls: Vec<Vec<&'static str>>) {
        self.force = false;
        let n = u32::try_from(calls.len()).unwrap_or(u32::MAX);
        self.runs.push_back((Instant::now(), n));
        self.job = Some((tokio::spawn(read(source, calls)), Instant::now()));
    }

    /// The finished read, if it has finished (never waits).
    pub async fn poll(&mut self) -> Option<LaneOut> {
        if self.job.as_ref().is_some_and(|(j, _)| j.is_finished()) {
            return self.wait().await;
        }
        None
    }

    /// Waits for the running read.
    pub async fn wait(&mut self) -> Option<LaneOut> {
        let (job, _) = self.job.take()?;
        job.await.ok()
    }

    /// Schedules the next read after `out`: no sooner than `min`, and late enough that the
    /// measured CPU stays within `share` of one core.
    pub fn schedule(&mut self, out: &LaneOut, min: Duration, share: f64, role: Role) {
        let calls = u32::try_from(out.outputs.len()).unwrap_or(u32::MAX);
        self.last = Some((out.cpu, out.wall, calls));
        let by_budget = if share > 0.0 {
            Duration::from_secs_f64((out.cpu.as_secs_f64() / share).min(86_400.0))
        } else {
            Duration::from_secs(86_400)
        };
        (self.every, self.why) = if by_budget > min {
            (by_budget, "budget")
        } else {
            (
                min,
                match role {
                    Role::Identity => "minimum",
                    Role::Only => "refresh",
                },
            )
        };
        self.next = Some(Instant::now() + self.every);
    }

    /// How often amd-smi is read now and what it costs, for the header and the JSON.
    pub fn cadence(&mut self) -> Option<Cadence> {
        let (cpu, wall, _) = self.last?;
        let minute = Instant::now().checked_sub(Duration::from_secs(60));
        while self
            .runs
            .front()
            .is_some_and(|(t, _)| minute.is_some_and(|m| *t < m))
        {
            self.runs.pop_front();
        }
        let every = self.every.max(Duration::from_millis(1));
        Some(Cadence {
            every_ms: u64::try_from(every.as_millis()).unwrap_or(u64::MAX),
            cpu_ms: u64::try_from(cpu.as_millis()).unwrap_or(u64::MAX),
            wall_ms: u64::try_from(wall.as_millis()).unwrap_or(u64::MAX),
            calls_per_min: self.runs.iter().map(|(_, n)| n).sum(),
            core_percent: cpu.as_secs_f64() / every.as_secs_f64() * 100.0,
            why: self.why.to_string(),
        })
    }
}
