//! Ten minutes of what an on-call engineer charts, kept at the sampling rate: per logical GPU
//! (keyed by identity, its BDF with the partition function, so renumbering does not mix
//! series; cleared for a physical GPU whose layout changes) its busy and VRAM; per physical GPU
//! its power and temperature; per GPU process (keyed by pid and start time, so a reused pid
//! starts afresh) its GPU busy and VRAM. Each series is a ring of small integers of a fixed
//! capacity, so memory is bounded whatever runs: [`BYTES_PER_SAMPLE_LOGICAL`] bytes a sample
//! for each logical GPU, as many for each physical GPU and each process (1.8 KiB each for ten
//! minutes at 1 s), at most [`MAX_PROCESSES`] processes. Fed by each snapshot; read by the
//! sparklines and the charts (GPUs, Detail, History, and the overview of a small node).

use super::snapshot::{Process, Snapshot};
use std::collections::{HashMap, VecDeque};

/// How much history is kept.
pub const KEEP_MS: u64 = 10 * 60 * 1000;

/// Most samples a series keeps, whatever the refresh (a 0.1 s refresh keeps 10 minutes too).
pub const MAX_SAMPLES: usize = 6000;

/// Processes followed at once; beyond, the ones using the least VRAM are not recorded.
pub const MAX_PROCESSES: usize = 256;

/// Bytes a sample costs for a logical GPU (busy 1, VRAM 2), a physical GPU (power 2,
/// temperature 1) or a process (busy 1, VRAM 2).
pub const BYTES_PER_SAMPLE_LOGICAL: usize = 3;

/// VRAM is kept in units of this many bytes (16 MiB: a 2-byte sample reaches 1 TiB).
const VRAM_UNIT: u64 = 16 << 20;

/// A value kept in a small integer; `MAX` means "not known at this sample".
trait Small: Copy {
    const NONE: Self;
    fn get(self) -> Option<f64>;
}

impl Small for u8 {
    const NONE: Self = u8::MAX;
    fn get(self) -> Option<f64> {
        (self != Self::NONE).then_some(f64::from(self))
    }
}

impl Small for u16 {
    const NONE: Self = u16::MAX;
    fn get(self) -> Option<f64> {
        (self != Self::NONE).then_some(f64::from(self))
    }
}

/// A fixed-capacity ring, oldest first.
#[derive(Debug, Clone)]
struct Ring<T> {
    cap: usize,
    v: VecDeque<T>,
}

impl<T: Small> Ring<T> {
    fn new(cap: usize) -> Self {
        Self {
            cap,
            v: VecDeque::new(),
        }
    }

    fn push(&mut self, x: T) {
        if self.v.len() == self.cap {
            self.v.pop_front();
        }
        self.v.push_back(x);
    }

    fn values(&self) -> Vec<Option<f64>> {
        self.v.iter().map(|x| x.get()).collect()
    }
}

/// Percent in 0..=100 as one byte (rounded); None (or NaN) is not known.
fn pct(v: Option<f64>) -> u8 {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "clamped to 0..=100"
    )]
    v.filter(|x| x.is_finite())
        .map_or(u8::NONE, |x| x.clamp(0.0, 100.0).round() as u8)
}

/// Bytes in 16 MiB units, saturating below the "not known" mark.
fn vram(b: Option<u64>) -> u16 {
    b.map_or(u16::NONE, |b| {
        u16::try_from(b.div_ceil(VRAM_UNIT)).unwrap_or(u16::NONE - 1)
    })
}

/// Watts or degrees as whole units, clamped to what the integer holds.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "clamped to the type's range"
)]
fn whole<T: Small + TryFrom<u16>>(v: Option<f64>, max: f64) -> T {
    v.filter(|x| x.is_finite())
        .and_then(|x| T::try_from(x.clamp(0.0, max).round() as u16).ok())
        .unwrap_or(T::NONE)
}

/// A logical GPU's series.
#[derive(Debug, Clone)]
struct LogicalSeries {
    busy: Ring<u8>,
    vram: Ring<u16>,
}

/// A physical GPU's series.
#[derive(Debug, Clone)]
struct PhysicalSeries {
    power: Ring<u16>,
    temp: Ring<u8>,
}

/// A process's series.
#[derive(Debug, Clone)]
struct ProcessSeries {
    busy: Ring<u8>,
    vram: Ring<u16>,
}

/// Which quantity of a series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Busy, percent.
    Busy,
    /// VRAM used, bytes.
    Vram,
    /// Power, W (physical GPU).
    Power,
    /// Temperature, °C (physical GPU).
    Temp,
}

/// One series ready to chart: (ms since the oldest sample kept, value), oldest first; samples
/// where the value was not known are left out.
pub type Points = Vec<(f64, f64)>;

/// Ring buffers of the charted values.
#[derive(Debug, Clone, Default)]
pub struct History {
    cap: usize,
    /// Sample times (ms since epoch), one per snapshot pushed.
    at: VecDeque<u64>,
    logical: HashMap<String, LogicalSeries>,
    physical: HashMap<String, PhysicalSeries>,
    processes: HashMap<(u32, Option<u64>), ProcessSeries>,
    layout: HashMap<String, usize>,
}

/// The identity a process's history is kept under.
fn process_key(p: &Process) -> (u32, Option<u64>) {
    (p.pid, p.start_ticks)
}

impl History {
    /// Keeps the last `cap` samples.
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.clamp(2, MAX_SAMPLES),
            ..Self::default()
        }
    }

    /// Keeps [`KEEP_MS`] at a refresh of `refresh_ms`.
    pub fn for_refresh(refresh_ms: u64) -> Self {
        let n = KEEP_MS.div_ceil(refresh_ms.max(1));
        Self::new(usize::try_from(n).unwrap_or(MAX_SAMPLES))
    }

    /// Samples each series keeps.
    pub const fn capacity(&self) -> usize {
        self.cap
    }

    /// Adds one sample of every GPU and GPU process (a value not known is kept as such, so
    /// the series stay aligned in time).
    pub fn push(&mut self, snap: &Snapshot) {
        let cap = self.cap;
        if self.at.len() == cap {
            self.at.pop_front();
        }
        self.at.push_back(snap.taken_at_ms);
        for g in &snap.gpus {
            let n = g.partitions.len();
            if self
                .layout
                .insert(g.bdf.clone(), n)
                .is_some_and(|old| old != n)
            {
                let prefix = g.bdf.clone();
                self.logical.retain(|k, _| !k.starts_with(&prefix));
            }
            let ps = self
                .physical
                .entry(g.bdf.clone())
                .or_insert_with(|| PhysicalSeries {
                    power: Ring::new(cap),
                    temp: Ring::new(cap),
                });
            ps.power.push(whole(g.power_watts, 65_534.0));
            ps.temp.push(whole(g.hotspot_celsius, 254.0));
            for l in &g.partitions {
                let s = self
                    .logical
                    .entry(l.bdf.clone())
                    .or_insert_with(|| LogicalSeries {
                        busy: Ring::new(cap),
                        vram: Ring::new(cap),
                    });
                s.busy.push(pct(l.gfx_busy_percent));
                s.vram.push(vram(l.vram_used_bytes));
            }
        }
        self.push_processes(snap);
    }

    /// Records the GPU processes (the [`MAX_PROCESSES`] using the most VRAM); a process gone
    /// from the snapshot takes its history with it.
    fn push_processes(&mut self, snap: &Snapshot) {
        let cap = self.cap;
        let mut ps: Vec<&Process> = snap
            .processes
            .iter()
            .filter(|p| !p.gpus.is_empty())
            .collect();
        if ps.len() > MAX_PROCESSES {
            ps.sort_by_key(|p| std::cmp::Reverse(p.vram_total_bytes()));
            ps.truncate(MAX_PROCESSES);
        }
        let keep: std::collections::HashSet<_> = ps.iter().map(|p| process_key(p)).collect();
        self.processes.retain(|k, _| keep.contains(k));
        for p in ps {
            let s = self
                .processes
                .entry(process_key(p))
                .or_insert_with(|| ProcessSeries {
                    busy: Ring::new(cap),
                    vram: Ring::new(cap),
                });
            s.busy.push(pct(p.gpu_busy_percent()));
            s.vram.push(vram(p.vram_total_bytes()));
        }
    }

    /// The busy series of a logical GPU, oldest first, samples not known left out (the
    /// sparklines).
    pub fn busy(&self, bdf: &str) -> Vec<u64> {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "0..=100"
        )]
        self.logical
            .get(bdf)
            .map(|s| {
                s.busy
                    .values()
                    .into_iter()
                    .flatten()
                    .map(|v| v as u64)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Turns a series' samples into chart points, aligned on the newest sample.
    fn points(&self, values: Vec<Option<f64>>, scale: f64) -> Points {
        let t0 = self.at.front().copied().unwrap_or(0);
        let skip = self.at.len().saturating_sub(values.len());
        #[expect(clippy::cast_precision_loss, reason = "ms within ten minutes")]
        self.at
            .iter()
            .skip(skip)
            .zip(values)
            .filter_map(|(t, v)| Some(((t - t0) as f64, v? * scale)))
            .collect()
    }

    /// A logical GPU's series of `m` (Busy or Vram; power and heat are the physical GPU's).
    pub fn logical(&self, bdf: &str, m: Metric) -> Points {
        let Some(s) = self.logical.get(bdf) else {
            return Vec::new();
        };
        #[expect(clippy::cast_precision_loss, reason = "a 16 MiB unit")]
        match m {
            Metric::Busy => self.points(s.busy.values(), 1.0),
            Metric::Vram => self.points(s.vram.values(), VRAM_UNIT as f64),
            Metric::Power | Metric::Temp => {
                let phys = bdf.rsplit_once('.').map_or(bdf, |(b, _)| b);
                self.physical(phys, m)
            }
        }
    }

    /// A physical GPU's series of `m` (Power or Temp).
    pub fn physical(&self, bdf: &str, m: Metric) -> Points {
        let Some(s) = self.physical.get(bdf) else {
            return Vec::new();
        };
        match m {
            Metric::Power => self.points(s.power.values(), 1.0),
            Metric::Temp => self.points(s.temp.values(), 1.0),
            Metric::Busy | Metric::Vram => Vec::new(),
        }
    }

    /// A process's series of `m` (Busy or Vram).
    pub fn process(&self, p: &Process, m: Metric) -> Points {
        let Some(s) = self.processes.get(&process_key(p)) else {
            return Vec::new();
        };
        #[expect(clippy::cast_precision_loss, reason = "a 16 MiB unit")]
        match m {
            Metric::Busy => self.points(s.busy.values(), 1.0),
            Metric::Vram => self.points(s.vram.values(), VRAM_UNIT as f64),
            Metric::Power | Metric::Temp => Vec::new(),
        }
    }

    /// How long the kept samples span, ms.
    pub fn span_ms(&self) -> u64 {
        match (self.at.front(), self.at.back()) {
            (Some(a), Some(b)) => b.saturating_sub(*a),
            _ => 0,
        }
    }

    /// Samples kept now (the longest series).
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// No sample yet.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// Bytes the samples take now (the bound the module's doc states, without the maps'
    /// own overhead).
    pub fn sample_bytes(&self) -> usize {
        let per: usize = self
            .logical
            .values()
            .map(|s| s.busy.v.len() + 2 * s.vram.v.len())
            .sum::<usize>()
            + self
                .physical
                .values()
                .map(|s| 2 * s.power.v.len() + s.temp.v.len())
                .sum::<usize>()
            + self
                .processes
                .values()
                .map(|s| s.busy.v.len() + 2 * s.vram.v.len())
                .sum::<usize>();
        per + 8 * self.at.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::snapshot::{GpuUse, LogicalGpu, PhysicalGpu};

    fn snap(at: u64, busy: Option<f64>, power: Option<f64>, procs: u32) -> Snapshot {
        Snapshot {
            taken_at_ms: at,
            gpus: vec![PhysicalGpu {
                bdf: "0000:05:00".into(),
                power_watts: power,
                hotspot_celsius: Some(61.0),
                partitions: vec![LogicalGpu {
                    bdf: "0000:05:00.0".into(),
                    gfx_busy_percent: busy,
                    vram_used_bytes: Some(3 << 30),
                    ..LogicalGpu::default()
                }],
                ..PhysicalGpu::default()
            }],
            processes: (0..procs)
                .map(|i| Process {
                    pid: 1000 + i,
                    start_ticks: Some(7),
                    gpus: vec![GpuUse {
                        gpu_id: 0,
                        vram_bytes: Some(u64::from(i) << 24),
                        cu_percent: Some(f64::from(i % 101)),
                        ..GpuUse::default()
                    }],
                    ..Process::default()
                })
                .collect(),
            ..Snapshot::default()
        }
    }

    #[test]
    fn ten_minutes_at_the_refresh_and_never_more() {
        // Every refresh from 100 ms to 10 s keeps ten minutes (within one sample); a series
        // never grows past its capacity however long partop runs.
        let mut n = 0;
        for refresh in [100u64, 250, 500, 1000, 2000, 3000, 5000, 10_000] {
            let mut h = History::for_refresh(refresh);
            for i in 0..(h.capacity() as u64 * 2 + 7) {
                h.push(&snap(i * refresh, Some(50.0), Some(300.0), 2));
            }
            assert_eq!(h.len(), h.capacity(), "refresh {refresh}");
            assert_eq!(h.busy("0000:05:00.0").len(), h.capacity());
            let span = h.span_ms() + refresh;
            assert!(
                span >= KEEP_MS && span < KEEP_MS + refresh,
                "refresh {refresh}: {span}"
            );
            // 3 bytes a sample for the logical GPU, the physical GPU and each process, and the
            // sample times.
            assert_eq!(h.sample_bytes(), h.capacity() * (3 * (1 + 1 + 2) + 8));
            n += 1;
        }
        assert_eq!(n, 8, "8 refresh rates checked");
    }

    #[test]
    fn a_value_not_known_keeps_its_place_in_time() {
        let mut h = History::new(10);
        h.push(&snap(0, Some(10.0), Some(100.0), 0));
        h.push(&snap(1000, None, None, 0));
        h.push(&snap(2000, Some(30.0), Some(300.0), 0));
        assert_eq!(h.busy("0000:05:00.0"), vec![10, 30]);
        assert_eq!(
            h.logical("0000:05:00.0", Metric::Busy),
            vec![(0.0, 10.0), (2000.0, 30.0)]
        );
        assert_eq!(
            h.logical("0000:05:00.0", Metric::Power),
            vec![(0.0, 100.0), (2000.0, 300.0)]
        );
        let vram = h.logical("0000:05:00.0", Metric::Vram);
        assert_eq!(vram.len(), 3);
        assert!(
            vram.iter()
                .all(|(_, b)| (*b - f64::from(3u32 << 30)).abs() < 1.0)
        );
    }

    #[test]
    fn hostile_values_are_clamped_or_not_known() {
        // Every kind of hostile number a collector could pass: each lands inside the range
        // its integer holds, or as "not known"; none panics.
        let cases: [(Option<f64>, Option<f64>); 9] = [
            (Some(f64::NAN), None),
            (Some(f64::INFINITY), None),
            (Some(f64::NEG_INFINITY), None),
            (Some(-5.0), Some(0.0)),
            (Some(100.4), Some(100.0)),
            (Some(1e300), Some(100.0)),
            (Some(-0.0), Some(0.0)),
            (Some(42.6), Some(43.0)),
            (None, None),
        ];
        for (i, (input, want)) in cases.iter().enumerate() {
            let mut h = History::new(4);
            h.push(&snap(0, *input, *input, 0));
            let got = h.logical("0000:05:00.0", Metric::Busy).first().map(|p| p.1);
            assert_eq!(got, *want, "case {i}: {input:?}");
            let power = h
                .logical("0000:05:00.0", Metric::Power)
                .first()
                .map(|p| p.1);
            assert!(
                power.is_none_or(|w| (0.0..=65_534.0).contains(&w)),
                "case {i}"
            );
        }
        assert_eq!(vram(Some(u64::MAX)), u16::MAX - 1, "huge VRAM saturates");
        assert_eq!(cases.len(), 9, "9 hostile values checked");
    }

    #[test]
    fn processes_are_kept_by_identity_and_bounded() {
        let mut h = History::new(10);
        let mut s = snap(0, Some(1.0), None, (MAX_PROCESSES + 40) as u32);
        h.push(&s);
        assert_eq!(h.processes.len(), MAX_PROCESSES);
        // The biggest VRAM users are the ones followed.
        let top = s.processes.last().cloned().unwrap_or_default();
        assert_eq!(h.process(&top, Metric::Busy).len(), 1);
        assert!(h.process(&s.processes[0], Metric::Busy).is_empty());
        // The same pid with another start time is another process: it starts afresh.
        s.taken_at_ms = 1000;
        h.push(&s);
        assert_eq!(h.process(&top, Metric::Busy).len(), 2);
        let mut reborn = top.clone();
        reborn.start_ticks = Some(8);
        s.processes.retain(|p| p.pid != top.pid);
        s.processes.push(reborn.clone());
        h.push(&s);
        assert_eq!(h.process(&reborn, Metric::Busy).len(), 1);
        assert!(
            h.process(&top, Metric::Busy).is_empty(),
            "the old one is gone"
        );
    }

    #[test]
    fn a_layout_change_clears_the_gpus_series() {
        let mut h = History::new(10);
        let s = snap(0, Some(20.0), None, 0);
        h.push(&s);
        let mut two = snap(1000, Some(20.0), None, 0);
        let mut second = two.gpus[0].partitions[0].clone();
        second.bdf = "0000:05:00.1".into();
        two.gpus[0].partitions.push(second);
        h.push(&two);
        assert_eq!(
            h.busy("0000:05:00.0").len(),
            1,
            "cleared, then one new sample"
        );
        assert_eq!(h.busy("0000:05:00.1").len(), 1);
    }
}
