//! One collection pipeline for every node partop reads. A [`Source`] (the kernel first with
//! amd-smi beside it, the kernel alone, amd-smi alone, NVIDIA, or a recording) gives each
//! sample; the enrichers ([`Enrich`]: holders, /proc facts, host usage, model probes, the
//! registry's status) run on it the same way whatever the source, off the UI's thread; values
//! read two ways are merged by one policy (`collect::merge`); the result is stamped and
//! sanity-checked, then published by the collector task (`collect::task`) as an owned
//! snapshot.

use crate::collect::amdsmi::lane::Role;
use crate::collect::amdsmi::reader::AmdSmi;
use crate::collect::amdsmi::recording::{CommandSource, ProcFacts, Recording};
use crate::collect::amdsmi::{AmdSmiVersion, Runner};
use crate::collect::enrich::{Enrich, Need};
use crate::collect::kernel::Kernel;
use crate::collect::merge::{Reader, merge};
use crate::collect::nvidia::reader::Nvidia;
use crate::domain::snapshot::{SCHEMA, Snapshot, SourceStatus};
use std::sync::Arc;
use std::time::Duration;

/// Where a node's values come from.
#[derive(Debug)]
pub enum Source {
    /// `--source auto` on a live node: the kernel every tick; amd-smi in the background for
    /// what only it knows, on its own cadence; amd-smi alone, within its CPU budget, while the
    /// kernel shows no AMD GPU (no KFD, a container without /sys).
    KernelFirst {
        /// The kernel reader.
        kernel: Kernel,
        /// amd-smi beside it.
        amd: AmdSmi,
    },
    /// `--source sysfs`: the kernel only (no partition changes).
    Kernel(Kernel),
    /// `--source amd-smi`, `partop record`, a node over ssh without partop, the executors'
    /// checks: amd-smi on every sample, the kernel's values merged where there is one.
    AmdSmi {
        /// The reader.
        amd: AmdSmi,
        /// The kernel beside it, if read.
        kernel: Option<Kernel>,
    },
    /// An NVIDIA node: NVML, nvidia-smi, or a recording of either.
    Nvidia(Nvidia),
    /// A recording made by `partop record`: amd-smi's outputs and each process's facts.
    Replay(AmdSmi),
}

impl Source {
    /// amd-smi on every sample through `runner`.
    pub fn amd_smi(runner: Runner) -> Self {
        Self::AmdSmi {
            amd: AmdSmi::new(CommandSource::Live(runner)),
            kernel: None,
        }
    }

    /// A recording.
    pub fn replay(rec: Recording) -> Self {
        Self::Replay(AmdSmi::new(CommandSource::Replay(std::sync::Arc::new(rec))))
    }

    /// The amd-smi reader, where there is one.
    pub const fn amd(&self) -> Option<&AmdSmi> {
        match self {
            Self::KernelFirst { amd, .. } | Self::AmdSmi { amd, .. } | Self::Replay(amd) => {
                Some(amd)
            }
            Self::Kernel(_) | Self::Nvidia(_) => None,
        }
    }

    const fn amd_mut(&mut self) -> Option<&mut AmdSmi> {
        match self {
            Self::KernelFirst { amd, .. } | Self::AmdSmi { amd, .. } | Self::Replay(amd) => {
                Some(amd)
            }
            Self::Kernel(_) | Self::Nvidia(_) => None,
        }
    }

    const fn kernel_mut(&mut self) -> Option<&mut Kernel> {
        match self {
            Self::KernelFirst { kernel, .. }
            | Self::Kernel(kernel)
            | Self::AmdSmi {
                kernel: Some(kernel),
                ..
            } => Some(kernel),
            Self::AmdSmi { kernel: None, .. } | Self::Nvidia(_) | Self::Replay(_) => None,
        }
    }
}

/// A source and the pipeline around it.
#[derive(Debug)]
pub struct Collector {
    /// Where values come from.
    pub source: Source,
    /// What runs on each sample whatever the source.
    pub enrich: Enrich,
    host: String,
    generation: u64,
    /// Marks snapshots as simulated.
    pub simulated: bool,
    /// The monitor's refresh: the shortest interval amd-smi is read at where it is the only
    /// source.
    pub refresh: Duration,
    /// The last sample published by [`Collector::tick`]: shown again, marked stale, while a
    /// kernel read hangs.
    last: Option<Arc<Snapshot>>,
}

impl Collector {
    /// The pipeline around `source`, with the enrichers a live local node has (host usage;
    /// the caller adds holder roots and models).
    pub fn new(source: Source) -> Self {
        let mut enrich = Enrich::default();
        let host = match &source {
            Source::Replay(amd) => match amd.source() {
                CommandSource::Replay(r) => r.host.clone(),
                CommandSource::Live(_) => crate::collect::host::hostname(),
            },
            _ => crate::collect::host::hostname(),
        };
        if matches!(source, Source::Replay(_)) {
            // This host's CPU and memory would be a lie beside a recording of another, and
            // its model servers are not here.
            enrich.usage = None;
            enrich.probe_models = false;
            enrich.kubelet = None;
        }
        Self {
            source,
            enrich,
            host,
            generation: 0,
            simulated: false,
            refresh: Duration::from_secs(1),
            last: None,
        }
    }

    /// amd-smi on every sample through `runner` (a shortcut for [`Source::amd_smi`]).
    pub fn amd_smi(runner: Runner) -> Self {
        Self::new(Source::amd_smi(runner))
    }

    /// The node is another machine (amd-smi over ssh): nothing of this machine's /proc is
    /// merged into what it reports.
    pub fn remote(&mut self) {
        self.enrich.remote = true;
        self.enrich.usage = None;
        self.enrich.roots = None;
        self.enrich.probe_models = false;
        self.enrich.kubelet = None;
    }

    /// A recorded source read as if live (an NVIDIA recording): nothing of this host is mixed
    /// in.
    pub fn without_host_usage(&mut self) {
        self.enrich.usage = None;
        self.enrich.probe_models = false;
        self.enrich.kubelet = None;
    }

    /// The detected amd-smi version.
    pub fn version(&self) -> Option<&AmdSmiVersion> {
        self.source.amd().and_then(AmdSmi::version)
    }

    /// The live amd-smi runner, if any (executors reuse it for `set`/`reset`).
    pub fn runner(&self) -> Option<&Runner> {
        match self.source.amd()?.source() {
            CommandSource::Live(r) => Some(r),
            CommandSource::Replay(_) => None,
        }
    }

    /// Starts keeping every amd-smi output read, for `partop record` (a source that reads
    /// amd-smi on every sample: [`Source::AmdSmi`]; see `Node::recorder`).
    pub fn start_recording(&mut self, host: String) {
        if let Some(amd) = self.source.amd_mut() {
            amd.start_recording(host);
        }
    }

    /// The outputs recorded so far.
    pub fn take_recording(&mut self) -> Option<Recording> {
        self.source.amd_mut().and_then(AmdSmi::take_recording)
    }

    /// After a change partop made: amd-smi's identity is read again at the next sample, and
    /// holders are scanned in full.
    pub fn invalidate_static(&mut self) {
        if let Some(amd) = self.source.amd_mut() {
            amd.invalidate();
        }
        self.scan_holders_now();
    }

    /// Runs the full /proc fd scan at the next sample (staging, the kill dialog, a drain).
    pub fn scan_holders_now(&mut self) {
        self.enrich.scan_now();
        if let Some(k) = self.source.kernel_mut() {
            k.scan_now();
        }
    }

    /// One complete collection, for commands that sample once (snapshot, plan, apply, verify):
    /// amd-smi's identity read is awaited when there is none yet or a change asked for one.
    /// Never fails: errors become source health, and the last good values stay.
    pub async fn sample(&mut self) -> Snapshot {
        self.collect(true).await
    }

    /// One tick of the monitor: never waits for amd-smi beside the kernel (its read runs in the
    /// background and is merged when it is done), so the first screen comes from the kernel.
    pub async fn tick(&mut self) -> Arc<Snapshot> {
        let snap = Arc::new(self.collect(false).await);
        self.last = Some(Arc::clone(&snap));
        snap
    }

    async fn collect(&mut self, wait: bool) -> Snapshot {
        let (snap, need) = self.read(wait).await;
        let mut snap = self.enrich.proc(snap, need).await;
        self.after_enrich(&mut snap).await;
        self.enrich.kubelet(&mut snap).await;
        self.enrich.models(&mut snap).await;
        self.generation += 1;
        snap.schema = SCHEMA;
        snap.host.clone_from(&self.host);
        snap.generation = self.generation;
        snap.simulated = self.simulated;
        crate::domain::sanity::check(&mut snap);
        snap
    }

    /// The source's sample, and what it leaves to the enrichers.
    async fn read(&mut self, wait: bool) -> (Snapshot, Need) {
        let refresh = self.refresh;
        let last = self.last.as_deref();
        match &mut self.source {
            Source::Kernel(kernel) => {
                let snap = match kernel.sample().await {
                    Ok(s) => s,
                    Err(e) => kernel.stale(&e, last),
                };
                (snap, Need::Nothing)
            }
            Source::KernelFirst { kernel, amd } => {
                kernel_first(kernel, amd, wait, refresh, last).await
            }
            Source::AmdSmi { amd, .. } => {
                amd.read_now().await;
                (amd.snapshot(), Need::Holders)
            }
            Source::Nvidia(n) => (n.sample().await, Need::Facts),
            Source::Replay(amd) => {
                amd.read_now().await;
                let mut snap = amd.snapshot();
                // PIDs of a recording belong to another host: the facts it kept are used.
                if let CommandSource::Replay(rec) = amd.source() {
                    for p in &mut snap.processes {
                        if let Some(f) = rec.processes.get(&p.pid) {
                            f.apply(p);
                        }
                    }
                }
                (snap, Need::Nothing)
            }
        }
    }

    /// What a source does once holders and facts are known: amd-smi every tick merges the
    /// kernel's values (per-process engine use needs the holders), and a recording keeps each
    /// process's facts.
    async fn after_enrich(&mut self, snap: &mut Snapshot) {
        let Source::AmdSmi { amd, kernel } = &mut self.source else {
            return;
        };
        if let Some(rec) = amd.recording_mut() {
            for p in &snap.processes {
                rec.processes.insert(p.pid, ProcFacts::of(p));
            }
        }
        let Some(kernel) = kernel else {
            return;
        };
        match kernel.sample().await {
            Ok(k) => {
                merge(snap, Reader::AmdSmi, &k);
                if !k.gpus.is_empty() {
                    snap.sources.extend(k.sources);
                }
            }
            Err(e) => snap.sources.push(kernel.failed(&e)),
        }
    }
}

/// Kernel first: the kernel's sample with amd-smi's last identity read merged; amd-smi alone,
/// within its budget, until the kernel shows an AMD GPU.
async fn kernel_first(
    kernel: &mut Kernel,
    amd: &mut AmdSmi,
    wait: bool,
    refresh: Duration,
    last: Option<&Snapshot>,
) -> (Snapshot, Need) {
    let read = kernel.sample().await;
    if !kernel.seen_gpus {
        amd.drive_lane(wait && amd.must_wait(Role::Only), Role::Only, refresh)
            .await;
        let mut snap = amd.snapshot_budgeted();
        let why = read.err().unwrap_or_else(|| {
            "the kernel shows no AMD GPU (no KFD topology or partition files): amd-smi is read instead, within its CPU budget".into()
        });
        snap.sources.push(SourceStatus::down(
            crate::collect::sysfs::collector::SRC,
            Some(why),
        ));
        return (snap, Need::Holders);
    }
    if kernel.generation_moved() {
        amd.force();
    }
    amd.drive_lane(
        wait && amd.must_wait(Role::Identity),
        Role::Identity,
        refresh,
    )
    .await;
    let mut snap = match read {
        Ok(s) => s,
        Err(e) => kernel.stale(&e, last),
    };
    if let Some(id) = amd.identity() {
        merge(&mut snap, Reader::Kernel, id);
    }
    if let Some(st) = amd.identity_status() {
        snap.sources.push(st);
    }
    (snap, Need::Nothing)
}
