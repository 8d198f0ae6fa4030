//! The amd-smi collector: detects the version once, reads static data at start and after a
//! change, and metrics + processes on every tick, concurrently. A failed or late read keeps the
//! last good values (their timestamps age) and marks that source stale with the error.

use super::assemble::{StaticData, assemble};
use super::error::AmdSmiError;
use super::json::{parse_gpu_array, parse_object};
use super::recording::{CommandSource, Recording};
use super::runner::{RawOutput, Runner};
use super::schema::{ListEntry, MetricEntry, PartitionDoc, ProcessEntry, StaticEntry};
use super::version::{AmdSmiVersion, Family};
use crate::collect::{clock, host};
use crate::domain::snapshot::{Health, SCHEMA, Snapshot, SourceStatus};

/// Source names as shown in the header and the JSON.
pub const SRC_STATIC: &str = "amd-smi static";
/// Metrics source.
pub const SRC_METRIC: &str = "amd-smi metric";
/// Processes source.
pub const SRC_PROCESS: &str = "amd-smi process";

type KernelJob = tokio::task::JoinHandle<(crate::collect::sysfs::SysfsCollector, Snapshot)>;

/// How long one kernel sample may take before the kernel source is called stale.
pub const KERNEL_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Collector state.
#[derive(Debug)]
pub struct AmdSmiCollector {
    source: CommandSource,
    recording: Option<Recording>,
    version: Option<AmdSmiVersion>,
    version_tried: bool,
    statics: Option<StaticData>,
    metric: Option<(Vec<MetricEntry>, u64)>,
    process: Option<(Vec<ProcessEntry>, u64)>,
    status: Vec<SourceStatus>,
    generation: u64,
    host: String,
    /// Marks snapshots as simulated.
    pub simulated: bool,
    /// Where to look for GPU holders (None: amd-smi's list only).
    pub holder_roots: Option<crate::collect::holders::Roots>,
    holders: Vec<crate::collect::holders::Holder>,
    kfd_nodes: Vec<crate::collect::kfd::KfdNode>,
    samples: u64,
    /// Served models: registry, discovery and probes (live nodes only).
    pub models: Option<crate::collect::served::ModelProber>,
    /// The kernel collector (`--source auto|sysfs`).
    pub sysfs: Option<crate::collect::sysfs::SysfsCollector>,
    /// `--source sysfs`: amd-smi is never run.
    pub sysfs_only: bool,
    /// A kernel read still running past its limit (a blocking file): its thread, since when.
    kernel_busy: Option<(KernelJob, std::time::Instant)>,
    /// The last kernel snapshot that completed (kept on screen while a read hangs).
    last_kernel: Option<Snapshot>,
    /// `list` and `metric` disagreed: re-read the layout at the next sample.
    reread_static: bool,
    /// An NVIDIA node: NVML or nvidia-smi instead of amd-smi.
    pub nvidia: Option<Box<dyn crate::collect::nvidia::NvSource>>,
    last_nvidia: Option<Snapshot>,
    /// How amd-smi may be used beside the kernel, or alone (`--source auto`).
    pub policy: super::lane::Policy,
    /// The monitor's refresh: the shortest interval amd-smi is read at where it is the only
    /// source.
    pub refresh: std::time::Duration,
    lane: super::lane::Lane,
    kernel_seen: bool,
    kernel_gen: Option<String>,
    /// amd-smi's last identity read, assembled once per read (kernel first merges it each tick).
    identity: Option<Snapshot>,
    /// /proc facts of the NVIDIA path's processes.
    proc_cache: crate::collect::procinfo::Cache,
    /// Host and per-process CPU and memory (live nodes; a replay shows what was recorded).
    usage: Option<crate::collect::usage::Usage>,
    /// amd-smi runs on another machine (over ssh): this machine's /proc says nothing of it.
    remote: bool,
}

/// The full /proc fd scan runs every this many samples; in between, exited holders are dropped.
const HOLDER_SCAN_EVERY: u64 = 5;

fn status(name: &str) -> SourceStatus {
    SourceStatus {
        name: name.to_string(),
        version: None,
        status: Health::Down,
        error: None,
        last_ok_ms: None,
        took_ms: None,
        cadence: None,
    }
}

impl AmdSmiCollector {
    /// A collector running amd-smi through `runner`.
    pub fn new(runner: Runner) -> Self {
        Self::with_source(CommandSource::Live(runner))
    }

    /// A collector reading from `source` (live or a recording).
    pub fn with_source(source: CommandSource) -> Self {
        let host = match &source {
            CommandSource::Replay(r) => r.host.clone(),
            CommandSource::Live(_) => host::hostname(),
        };
        let usage = match &source {
            CommandSource::Live(_) => Some(crate::collect::usage::Usage::new("/proc")),
            CommandSource::Replay(_) => None,
        };
        Self {
            source,
            recording: None,
            version: None,
            version_tried: false,
            statics: None,
            metric: None,
            process: None,
            status: vec![status(SRC_STATIC), status(SRC_METRIC), status(SRC_PROCESS)],
            generation: 0,
            host,
            simulated: false,
            holder_roots: None,
            holders: Vec::new(),
            kfd_nodes: Vec::new(),
            samples: 0,
            models: None,
            sysfs: None,
            sysfs_only: false,
            kernel_busy: None,
            last_kernel: None,
            reread_static: false,
            nvidia: None,
            last_nvidia: None,
            policy: super::lane::Policy::default(),
            refresh: std::time::Duration::from_secs(1),
            lane: super::lane::Lane::default(),
            kernel_seen: false,
            kernel_gen: None,
            identity: None,
            proc_cache: crate::collect::procinfo::Cache::default(),
            usage,
            remote: false,
        }
    }

    /// amd-smi runs on another machine (the fleet's fallback over ssh): nothing of this
    /// machine's /proc is merged into what it reports.
    pub fn remote(&mut self) {
        self.remote = true;
        self.usage = None;
        self.holder_roots = None;
    }

    /// A replayed source: this host's CPU and memory would be a lie beside it.
    pub fn without_host_usage(&mut self) {
        self.usage = None;
    }

    /// The detected version.
    pub const fn version(&self) -> Option<&AmdSmiVersion> {
        self.version.as_ref()
    }

    /// The live runner, if any (executors reuse it for `set`/`reset`).
    pub const fn runner(&self) -> Option<&Runner> {
        match &self.source {
            CommandSource::Live(r) => Some(r),
            CommandSource::Replay(_) => None,
        }
    }

    /// Starts keeping every output read, for `partop record`.
    pub fn start_recording(&mut self, host: String) {
        self.recording = Some(Recording::new(host));
    }

    /// The outputs recorded so far.
    pub fn take_recording(&mut self) -> Option<Recording> {
        self.recording.take()
    }

    async fn call(&self, args: &[&str]) -> Result<RawOutput, AmdSmiError> {
        self.source.call(args).await
    }

    fn keep(&mut self, args: &[&str], out: &Result<RawOutput, AmdSmiError>) {
        if let (Some(rec), Ok(o)) = (self.recording.as_mut(), out) {
            rec.insert(args, o);
        }
    }

    /// Forces a static re-read on the next sample (after a repartition), and a full holder
    /// scan.
    pub fn invalidate_static(&mut self) {
        self.statics = None;
        self.samples = 0;
        self.lane.force = true;
        self.scan_holders_now();
    }

    /// Runs the full /proc fd scan at the next sample (staging, the kill dialog, a drain).
    pub fn scan_holders_now(&mut self) {
        self.samples = 0;
        if let Some(k) = self.sysfs.as_mut() {
            k.scan_now = true;
        }
    }

    /// One kernel sample, read on a blocking thread under [`KERNEL_LIMIT`]: a file that blocks
    /// (a FIFO, a hung driver file) makes the kernel source stale, never the caller wait. While
    /// that read is stuck no other is started; its result is used once it returns.
    async fn kernel_sample(&mut self) -> Result<Snapshot, String> {
        let root =
            |k: &crate::collect::sysfs::SysfsCollector| k.roots.sys_root.display().to_string();
        let mut job = match self.kernel_busy.take() {
            Some((job, since)) if !job.is_finished() => {
                let e = format!(
                    "a kernel file read has not returned for {}s (a blocking file under the sysfs root?); showing the last values",
                    since.elapsed().as_secs()
                );
                self.kernel_busy = Some((job, since));
                return Err(e);
            }
            Some((job, _)) => job,
            None => {
                let Some(mut k) = self.sysfs.take() else {
                    return Err("no kernel collector".into());
                };
                tokio::task::spawn_blocking(move || {
                    let s = k.sample();
                    (k, s)
                })
            }
        };
        match tokio::time::timeout(KERNEL_LIMIT, &mut job).await {
            Ok(Ok((k, snap))) => {
                self.sysfs = Some(k);
                self.last_kernel = Some(snap.clone());
                Ok(snap)
            }
            Ok(Err(e)) => Err(format!("the kernel reader failed: {e}")),
            Err(_) => {
                let e = format!(
                    "a kernel file read took over {}s{}; it is left to finish and the last values are shown",
                    KERNEL_LIMIT.as_secs(),
                    self.sysfs
                        .as_ref()
                        .map(|k| format!(" under {}", root(k)))
                        .unwrap_or_default()
                );
                self.kernel_busy = Some((job, std::time::Instant::now()));
                Err(e)
            }
        }
    }

    /// The last kernel snapshot, marked stale with `e` (or an empty one marked down).
    fn kernel_stale(&self, e: &str) -> Snapshot {
        let mut s = self.last_kernel.clone().unwrap_or_default();
        let last_ok = self.last_kernel.as_ref().map(|k| k.taken_at_ms);
        s.sources
            .retain(|x| x.name != crate::collect::sysfs::collector::SRC);
        s.sources.push(SourceStatus {
            name: crate::collect::sysfs::collector::SRC.into(),
            version: None,
            status: if last_ok.is_some() {
                Health::Stale
            } else {
                Health::Down
            },
            error: Some(e.to_string()),
            last_ok_ms: last_ok,
            took_ms: None,
            cadence: None,
        });
        s
    }

    fn mark(&mut self, name: &str, r: Result<u64, &AmdSmiError>) {
        let version = self.version.as_ref().map(AmdSmiVersion::label);
        let Some(s) = self.status.iter_mut().find(|s| s.name == name) else {
            return;
        };
        s.version = version;
        match r {
            Ok(took) => {
                s.status = Health::Ok;
                s.error = None;
                s.last_ok_ms = Some(clock::now_ms());
                s.took_ms = Some(took);
            }
            Err(e) => {
                s.status = if s.last_ok_ms.is_some() {
                    Health::Stale
                } else {
                    Health::Down
                };
                s.error = Some(e.to_string());
                log::warn!("{name}: {e}");
            }
        }
    }

    fn warn(&mut self, name: &str, warnings: &[String]) {
        if warnings.is_empty() {
            return;
        }
        if let Some(s) = self.status.iter_mut().find(|s| s.name == name) {
            s.status = Health::Degraded;
            s.error = Some(warnings.join("; "));
        }
        for w in warnings {
            log::warn!("{name}: {w}");
        }
    }

    async fn read_version(&mut self) {
        if self.version_tried {
            return;
        }
        self.version_tried = true;
        let out = self.call(&ARGS_VERSION).await;
        self.keep(&ARGS_VERSION, &out);
        match out {
            Ok(out) => {
                self.version = AmdSmiVersion::parse(&out.stdout);
                if self.version.is_none() {
                    log::warn!(
                        "amd-smi version: unrecognised output {:?}",
                        out.stdout.trim()
                    );
                }
            }
            Err(e) => log::warn!("amd-smi version: {e}"),
        }
    }

    async fn read_static(&mut self) -> Result<(StaticData, Vec<String>), AmdSmiError> {
        let family = self
            .version
            .as_ref()
            .map_or(Family::Rocm7, AmdSmiVersion::family);
        // The accelerator profiles (what can be combined) need root.
        let part_args: &[&str] = if nix::unistd::geteuid().is_root() {
            &ARGS_PARTITION_ROOT
        } else {
            &ARGS_PARTITION
        };
        let (list, stat, part) =
            tokio::join!(self.call(&ARGS_LIST), self.call(&ARGS_STATIC), async {
                if family == Family::Rocm7 {
                    Some((part_args, self.call(part_args).await))
                } else {
                    None
                }
            });
        self.keep(&ARGS_LIST, &list);
        self.keep(&ARGS_STATIC, &stat);
        if let Some((args, p)) = &part {
            self.keep(args, p);
        }
        parse_static(list, stat, part.map(|(_, p)| p), clock::now_ms())
    }

    /// One complete collection, for commands that sample once (snapshot, plan, apply, verify):
    /// amd-smi's identity read is awaited when there is none yet or a change asked for one.
    /// Never fails: errors become source health, and the last good values stay.
    pub async fn sample(&mut self) -> Snapshot {
        let mut snap = self.sample_sources(true).await;
        self.observe_usage(&mut snap).await;
        crate::domain::sanity::check(&mut snap);
        snap
    }

    /// Host and per-process CPU and memory, on a blocking thread (a few small /proc files per
    /// GPU holder).
    async fn observe_usage(&mut self, snap: &mut Snapshot) {
        let Some(mut usage) = self.usage.take() else {
            return;
        };
        let mut s = std::mem::take(snap);
        match tokio::task::spawn_blocking(move || {
            usage.observe(&mut s);
            (usage, s)
        })
        .await
        {
            Ok((u, s)) => {
                self.usage = Some(u);
                *snap = s;
            }
            Err(e) => log::warn!("host usage: {e}"),
        }
    }

    /// One tick of the monitor: never waits for amd-smi beside the kernel (its read runs in the
    /// background and is merged when it is done), so the first screen comes from the kernel.
    pub async fn tick(&mut self) -> Snapshot {
        let mut snap = self.sample_sources(false).await;
        self.observe_usage(&mut snap).await;
        crate::domain::sanity::check(&mut snap);
        snap
    }

    /// Kernel first: a live node with a kernel collector, not recording.
    fn kernel_first(&self) -> bool {
        matches!(self.source, CommandSource::Live(_))
            && self.recording.is_none()
            && !self.sysfs_only
            && (self.sysfs.is_some() || self.kernel_busy.is_some())
    }

    async fn sample_sources(&mut self, wait: bool) -> Snapshot {
        if self.nvidia.is_some() {
            return self.sample_nvidia().await;
        }
        if self.sysfs_only && (self.sysfs.is_some() || self.kernel_busy.is_some()) {
            let mut snap = match self.kernel_sample().await {
                Ok(s) => s,
                Err(e) => self.kernel_stale(&e),
            };
            if let Some(prober) = self.models.as_mut() {
                snap.models = prober.observe(&snap).await;
            }
            self.registry_status(&mut snap);
            return snap;
        }
        if self.kernel_first() {
            return self.sample_kernel_first(wait).await;
        }
        self.sample_amd_smi().await
    }

    /// Every tick from the kernel; amd-smi in the background for identity. Where the kernel
    /// shows no AMD GPU (no KFD, a container without /sys), amd-smi is the source, read within
    /// its budget.
    async fn sample_kernel_first(&mut self, wait: bool) -> Snapshot {
        let kernel = self.kernel_sample().await;
        self.kernel_seen |= matches!(&kernel, Ok(k) if !k.gpus.is_empty());
        if !self.kernel_seen {
            return self.sample_budgeted(wait, kernel.err()).await;
        }
        if let Some(g) = self.sysfs.as_ref().and_then(|k| k.topology_generation())
            && self.kernel_gen.as_deref() != Some(g)
        {
            if let Some(old) = &self.kernel_gen {
                log::info!(
                    "KFD topology generation {old} → {g}: the layout changed; amd-smi is asked again"
                );
            }
            self.kernel_gen = Some(g.to_string());
            self.lane.force = true;
        }
        let want = wait && (self.statics.is_none() || self.lane.force);
        self.drive_lane(want, super::lane::Role::Identity).await;
        let mut snap = match kernel {
            Ok(s) => s,
            Err(e) => self.kernel_stale(&e),
        };
        if let Some(amd) = &self.identity {
            crate::collect::sysfs::identity(&mut snap, amd);
            snap.reload = amd.reload;
        }
        if let Some(mut st) = self.status.iter().find(|s| s.name == SRC_STATIC).cloned() {
            st.cadence = self.lane.cadence();
            if st.status == Health::Down && st.error.is_none() {
                st.error = Some(if self.lane.running() {
                    "amd-smi's first read is running; identity and profiles follow".into()
                } else {
                    "not read yet".into()
                });
            }
            snap.sources.push(st);
        }
        if let Some(prober) = self.models.as_mut() {
            snap.models = prober.observe(&snap).await;
        }
        self.registry_status(&mut snap);
        snap
    }

    /// The calls of one background read.
    fn lane_calls(&self, role: super::lane::Role) -> Vec<Vec<&'static str>> {
        let mut calls: Vec<Vec<&'static str>> = Vec::new();
        if !self.version_tried {
            calls.push(ARGS_VERSION.to_vec());
        }
        let statics = role == super::lane::Role::Identity
            || self.statics.is_none()
            || self.reread_static
            || self.lane.force;
        if statics {
            calls.push(ARGS_LIST.to_vec());
            calls.push(ARGS_STATIC.to_vec());
            let family = self
                .version
                .as_ref()
                .map_or(Family::Rocm7, AmdSmiVersion::family);
            if family == Family::Rocm7 {
                calls.push(if nix::unistd::geteuid().is_root() {
                    ARGS_PARTITION_ROOT.to_vec()
                } else {
                    ARGS_PARTITION.to_vec()
                });
            }
        }
        if role == super::lane::Role::Only {
            calls.push(ARGS_METRIC.to_vec());
            calls.push(ARGS_PROCESS.to_vec());
        }
        calls
    }

    /// Takes a finished background read, starts one that is due, and waits for it if `wait`.
    async fn drive_lane(&mut self, wait: bool, role: super::lane::Role) {
        if let Some(out) = self.lane.poll().await {
            self.apply_lane(out, role);
        }
        if self.lane.due(std::time::Instant::now()) {
            let calls = self.lane_calls(role);
            self.lane.start(self.source.clone(), calls);
        }
        if wait && let Some(out) = self.lane.wait().await {
            self.apply_lane(out, role);
        }
    }

    fn apply_lane(&mut self, out: super::lane::LaneOut, role: super::lane::Role) {
        let (min, share) = match role {
            super::lane::Role::Identity => (self.policy.every, self.policy.budget / 5.0),
            super::lane::Role::Only => (self.refresh, self.policy.budget),
        };
        self.lane.schedule(&out, min, share, role);
        let took = u64::try_from(out.wall.as_millis()).unwrap_or(u64::MAX);
        let mut list = None;
        let mut stat = None;
        let mut part = None;
        let mut metric = None;
        let mut process = None;
        for (args, o) in out.outputs {
            match args.first().copied() {
                Some("version") => {
                    self.version_tried = true;
                    match o {
                        Ok(o) => self.version = AmdSmiVersion::parse(&o.stdout),
                        Err(e) => log::warn!("amd-smi version: {e}"),
                    }
                }
                Some("list") => list = Some(o),
                Some("static") => stat = Some(o),
                Some("partition") => part = Some(o),
                Some("metric") => metric = Some(o),
                Some("process") => process = Some(o),
                _ => {}
            }
        }
        if let (Some(list), Some(stat)) = (list, stat) {
            self.reread_static = false;
            match parse_static(list, stat, part, clock::now_ms()) {
                Ok((st, warnings)) => {
                    self.statics = Some(st);
                    self.mark(SRC_STATIC, Ok(took));
                    self.warn(SRC_STATIC, &warnings);
                }
                Err(e) => self.mark(SRC_STATIC, Err(&e)),
            }
        }
        if let (Some(m), Some(p)) = (metric, process) {
            self.apply_dynamic(m, p, took);
        }
        if role == super::lane::Role::Identity && self.statics.is_some() {
            self.identity = Some(self.snapshot());
        }
    }

    /// amd-smi as the only source (the kernel shows no AMD GPU), read in the background no
    /// more often than its budget allows; each sample shows the last values with their age.
    async fn sample_budgeted(&mut self, wait: bool, kernel_err: Option<String>) -> Snapshot {
        let want = wait && (self.statics.is_none() || self.metric.is_none() || self.lane.force);
        self.drive_lane(want, super::lane::Role::Only).await;
        let mut snap = self.snapshot();
        let cadence = self.lane.cadence();
        // One cadence for the pair (they are read together): said once, on `metric`.
        if let Some(s) = snap.sources.iter_mut().find(|s| s.name == SRC_METRIC) {
            s.cadence = cadence;
        }
        let mut snap = self.live_holders(snap).await;
        snap.sources.push(SourceStatus {
            name: crate::collect::sysfs::collector::SRC.into(),
            version: None,
            status: Health::Down,
            error: Some(kernel_err.unwrap_or_else(|| {
                "the kernel shows no AMD GPU (no KFD topology or partition files): amd-smi is read instead, within its CPU budget".into()
            })),
            last_ok_ms: None,
            took_ms: None,
            cadence: None,
        });
        if let Some(prober) = self.models.as_mut() {
            snap.models = prober.observe(&snap).await;
        }
        self.registry_status(&mut snap);
        snap
    }

    /// The registry's error, when it has one, as a source.
    fn registry_status(&self, snap: &mut Snapshot) {
        if let Some(e) = self.models.as_ref().and_then(|p| p.registry_error.as_ref()) {
            snap.sources.push(SourceStatus {
                name: "models registry".into(),
                version: None,
                status: Health::Down,
                error: Some(e.clone()),
                last_ok_ms: None,
                took_ms: None,
                cadence: None,
            });
        }
    }

    /// Holders from the /proc scan (every few samples) and /proc facts, for the amd-smi path:
    /// on a blocking thread, like the kernel sample, never on the runtime that serves keys.
    async fn live_holders(&mut self, snap: Snapshot) -> Snapshot {
        let roots = self.holder_roots.clone();
        let full = self.samples.is_multiple_of(HOLDER_SCAN_EVERY);
        self.samples += 1;
        let mut holders = std::mem::take(&mut self.holders);
        let mut nodes = std::mem::take(&mut self.kfd_nodes);
        let remote = self.remote;
        let job = tokio::task::spawn_blocking(move || {
            let mut snap = snap;
            if let Some(roots) = &roots {
                if full {
                    holders = crate::collect::holders::scan(roots);
                    nodes = crate::collect::kfd::topology(&roots.sys_root);
                } else {
                    holders.retain(|h| roots.proc_root.join(h.pid.to_string()).exists());
                }
                crate::collect::holders::merge(&mut snap, &holders, &nodes, &roots.sys_root);
            }
            if !remote {
                crate::collect::procinfo::enrich(&mut snap, std::path::Path::new("/proc"));
            }
            (snap, holders, nodes)
        });
        match job.await {
            Ok((snap, holders, nodes)) => {
                self.holders = holders;
                self.kfd_nodes = nodes;
                snap
            }
            // The scan panicked (it does not; a bug): the sample goes on without holders.
            Err(e) => {
                log::warn!("the /proc holder scan failed: {e}");
                self.snapshot()
            }
        }
    }

    /// Takes a `metric` and a `process` read: a count that disagrees with the layout keeps the
    /// last consistent values and asks for the layout again.
    fn apply_dynamic(
        &mut self,
        metric: Result<RawOutput, AmdSmiError>,
        process: Result<RawOutput, AmdSmiError>,
        took: u64,
    ) {
        let mut inconsistent = None;
        match metric.and_then(parse_per_gpu::<MetricEntry>) {
            Ok(m) => match self.statics.as_ref().map(|s| s.list.len()) {
                // `metric` lists another GPU count than the layout read with `list`: the node
                // was repartitioned (by partop or anyone), or amd-smi is inconsistent. This
                // sample keeps the last consistent layout and metrics and says so; the layout
                // is re-read at the start of the next sample.
                Some(n) if n > 0 && n != m.len() => {
                    let why = format!(
                        "amd-smi list shows {n} GPUs and amd-smi metric {}: the layout is changing or amd-smi is inconsistent; the last consistent layout is kept and re-read",
                        m.len()
                    );
                    log::warn!("{why}");
                    self.reread_static = true;
                    inconsistent = Some(why);
                }
                _ => {
                    self.metric = Some((m, clock::now_ms()));
                    self.mark(SRC_METRIC, Ok(took));
                }
            },
            Err(e) => self.mark(SRC_METRIC, Err(&e)),
        }
        if let Some(why) = inconsistent {
            let had = self.metric.is_some();
            if let Some(src) = self.status.iter_mut().find(|s| s.name == SRC_METRIC) {
                src.status = if had { Health::Stale } else { Health::Down };
                src.error = Some(why);
            }
        }
        match process.and_then(parse_per_gpu::<ProcessEntry>) {
            Ok(p) => {
                self.process = Some((p, clock::now_ms()));
                self.mark(SRC_PROCESS, Ok(took));
            }
            Err(e) => self.mark(SRC_PROCESS, Err(&e)),
        }
    }

    /// Every tick from amd-smi (`--source amd-smi`, recordings and replays): static data once,
    /// `metric` and `process` each sample, the kernel's fresher values overlaid when it has them.
    async fn sample_amd_smi(&mut self) -> Snapshot {
        self.read_version().await;
        if std::mem::take(&mut self.reread_static) {
            self.statics = None;
        }
        if self.statics.is_none() {
            let t = std::time::Instant::now();
            match self.read_static().await {
                Ok((s, warnings)) => {
                    self.statics = Some(s);
                    self.mark(SRC_STATIC, Ok(ms(t)));
                    self.warn(SRC_STATIC, &warnings);
                }
                Err(e) => self.mark(SRC_STATIC, Err(&e)),
            }
        }
        let t = std::time::Instant::now();
        let (metric, process) = tokio::join!(self.call(&ARGS_METRIC), self.call(&ARGS_PROCESS));
        let took = ms(t);
        self.keep(&ARGS_METRIC, &metric);
        self.keep(&ARGS_PROCESS, &process);
        self.apply_dynamic(metric, process, took);
        let mut snap = self.snapshot();
        // PIDs of a recording belong to another host: only a live node is looked up in /proc;
        // a replay gets the facts its recording kept.
        match &self.source {
            CommandSource::Live(_) => {
                snap = self.live_holders(snap).await;
                if let Some(rec) = self.recording.as_mut() {
                    for p in &snap.processes {
                        rec.processes
                            .insert(p.pid, super::recording::ProcFacts::of(p));
                    }
                }
            }
            CommandSource::Replay(rec) => {
                for p in &mut snap.processes {
                    if let Some(f) = rec.processes.get(&p.pid) {
                        f.apply(p);
                    }
                }
            }
        }
        if matches!(self.source, CommandSource::Live(_))
            && (self.sysfs.is_some() || self.kernel_busy.is_some())
        {
            // The holder scan above already read /proc: hand it over rather than scan twice.
            if let Some(k) = self.sysfs.as_mut()
                && self.holder_roots.is_some()
            {
                k.external_holders = Some(self.holders.clone());
            }
            match self.kernel_sample().await {
                Ok(ks) => crate::collect::sysfs::overlay(&mut snap, &ks),
                Err(e) => snap.sources.push(SourceStatus {
                    name: crate::collect::sysfs::collector::SRC.into(),
                    version: None,
                    status: Health::Stale,
                    error: Some(e),
                    last_ok_ms: self.last_kernel.as_ref().map(|k| k.taken_at_ms),
                    took_ms: None,
                    cadence: None,
                }),
            }
        }
        if let Some(prober) = self.models.as_mut()
            && matches!(self.source, CommandSource::Live(_))
        {
            snap.models = prober.observe(&snap).await;
        }
        self.registry_status(&mut snap);
        snap
    }

    /// One sample of an NVIDIA node (NVML or nvidia-smi, off the async thread); the last good
    /// read stays on screen when one fails.
    async fn sample_nvidia(&mut self) -> Snapshot {
        let Some(mut src) = self.nvidia.take() else {
            return self.snapshot();
        };
        let t = std::time::Instant::now();
        let (src, read) = tokio::task::spawn_blocking(move || {
            let r = src.read();
            (src, r)
        })
        .await
        .unwrap_or_else(|e| {
            (
                Box::new(crate::collect::nvidia::Recorded(Default::default())),
                Err(e.to_string()),
            )
        });
        self.nvidia = Some(src);
        self.generation += 1;
        let now = clock::now_ms();
        let name = "nvidia";
        if !self.status.iter().any(|s| s.name == name) {
            self.status = vec![status(name)];
        }
        let mut snap = Snapshot {
            schema: SCHEMA,
            host: self.host.clone(),
            taken_at: clock::rfc3339(now),
            taken_at_ms: now,
            generation: self.generation,
            simulated: self.simulated,
            ..Snapshot::default()
        };
        match read {
            Ok(node) => {
                let (gpus, procs) = crate::collect::nvidia::assemble(&node, now);
                snap.gpus = gpus;
                snap.processes = procs;
                if let Some(s) = self.status.first_mut() {
                    s.status = Health::Ok;
                    s.version = Some(node.source.clone());
                    s.error = None;
                    s.last_ok_ms = Some(now);
                    s.took_ms = Some(ms(t));
                }
                self.last_nvidia = Some(snap.clone());
            }
            Err(e) => {
                if let Some(last) = &self.last_nvidia {
                    snap.gpus.clone_from(&last.gpus);
                    snap.processes.clone_from(&last.processes);
                }
                if let Some(s) = self.status.first_mut() {
                    s.status = if self.last_nvidia.is_some() {
                        Health::Stale
                    } else {
                        Health::Down
                    };
                    s.error = Some(e);
                }
            }
        }
        snap.sources.clone_from(&self.status);
        // /proc facts once per process (re-read every FULL_SCAN_EVERY samples, against pid
        // reuse): a steady NVIDIA tick reads nothing of /proc for processes it already knows.
        if self
            .generation
            .is_multiple_of(crate::collect::sysfs::collector::FULL_SCAN_EVERY)
        {
            self.proc_cache.clear();
        }
        crate::collect::procinfo::enrich_cached(
            &mut snap,
            std::path::Path::new("/proc"),
            &mut self.proc_cache,
        );
        if let Some(prober) = self.models.as_mut() {
            snap.models = prober.observe(&snap).await;
        }
        snap
    }

    /// The snapshot from what has been read so far.
    pub fn snapshot(&mut self) -> Snapshot {
        self.generation += 1;
        let now = clock::now_ms();
        let (gpus, processes) = self.statics.as_ref().map_or_else(Default::default, |st| {
            assemble(
                st,
                self.metric.as_ref().map(|(m, t)| (m.as_slice(), *t)),
                self.process.as_ref().map(|(p, t)| (p.as_slice(), *t)),
            )
        });
        Snapshot {
            schema: SCHEMA,
            host: self.host.clone(),
            taken_at: clock::rfc3339(now),
            taken_at_ms: now,
            generation: self.generation,
            simulated: self.simulated,
            sources: self.status.clone(),
            reload: self.version.as_ref().map(|v| match v.reload_method() {
                super::version::ReloadMethod::InsideSetMemory => {
                    crate::domain::plan::Reload::InsideSetMemory
                }
                super::version::ReloadMethod::ResetReload => {
                    crate::domain::plan::Reload::ResetReload
                }
                super::version::ReloadMethod::Modprobe => crate::domain::plan::Reload::Modprobe,
            }),
            gpus,
            processes,
            models: Vec::new(),
            host_usage: None,
        }
    }
}

fn ms(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// `amd-smi version`.
pub const ARGS_VERSION: [&str; 1] = ["version"];
/// The list read.
pub const ARGS_LIST: [&str; 5] = ["list", "-e", "--json", "-g", "all"];
/// The static read.
pub const ARGS_STATIC: [&str; 9] = [
    "static", "-a", "-b", "-v", "-p", "-l", "--json", "-g", "all",
];
/// The partition read (7.x).
pub const ARGS_PARTITION: [&str; 4] = ["partition", "-c", "-m", "--json"];
/// The partition read as root (adds the accelerator profiles).
pub const ARGS_PARTITION_ROOT: [&str; 5] = ["partition", "-c", "-m", "-a", "--json"];
/// The metric read.
pub const ARGS_METRIC: [&str; 8] = ["metric", "-u", "-p", "-t", "-m", "--json", "-g", "all"];
/// The process read.
pub const ARGS_PROCESS: [&str; 4] = ["process", "--json", "-g", "all"];

/// Parses a per-GPU JSON output (metric, process).
pub fn parse_per_gpu<T: serde::de::DeserializeOwned>(
    out: RawOutput,
) -> Result<Vec<T>, AmdSmiError> {
    let out = out.json_or_error()?;
    Ok(parse_gpu_array::<T>(&out.command, &out.stdout)?.0)
}

/// Parses the static reads. A failed `partition` read is a warning: the modes are also in
/// `static -p`, and caps fall back to the product table.
pub fn parse_static(
    list: Result<RawOutput, AmdSmiError>,
    stat: Result<RawOutput, AmdSmiError>,
    part: Option<Result<RawOutput, AmdSmiError>>,
    at_ms: u64,
) -> Result<(StaticData, Vec<String>), AmdSmiError> {
    let mut warnings = Vec::new();
    let list = list?.json_or_error()?;
    let (list, ex) = parse_gpu_array::<ListEntry>(&list.command, &list.stdout)?;
    warnings.extend(ex.preamble.into_iter().chain(ex.status_lines));
    let stat = stat?.json_or_error()?;
    let (statics, ex) = parse_gpu_array::<StaticEntry>(&stat.command, &stat.stdout)?;
    warnings.extend(ex.status_lines);
    let partition = match part {
        Some(r) => match r
            .and_then(RawOutput::json_or_error)
            .and_then(|o| parse_object::<PartitionDoc>(&o.command, &o.stdout))
        {
            Ok((p, _)) => Some(p),
            Err(e) => {
                warnings.push(e.to_string());
                None
            }
        },
        None => None,
    };
    Ok((
        StaticData {
            list,
            statics,
            partition,
            at_ms,
        },
        warnings,
    ))
}
