//! The enrichers of `collect::pipeline`, the same whatever the source: who holds each GPU (the
//! /proc fd scan, where the source does not know), each holder's /proc facts (user, command,
//! start, container), host and per-process CPU and memory, then the served models' probes and
//! the registry's status. The /proc work runs as one job on a blocking thread, never on the
//! runtime that serves keys.

use crate::collect::holders::{self, Holder, Roots};
use crate::collect::kfd::KfdNode;
use crate::collect::procinfo::Cache;
use crate::collect::served::ModelProber;
use crate::collect::usage::Usage;
use crate::domain::snapshot::{Snapshot, SourceStatus};
use std::path::PathBuf;

/// What a source leaves to the enrichers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The holders (a /proc fd scan) and their /proc facts: amd-smi lists only what it sees.
    Holders,
    /// The /proc facts of the processes the source names (NVIDIA: the driver lists them).
    Facts,
    /// Nothing of /proc: the source read it (the kernel), or it is not this host's (a
    /// recording carries its own facts).
    Nothing,
}

/// The full /proc fd scan runs every this many samples where amd-smi is the source; in
/// between, exited holders are dropped.
pub const HOLDER_SCAN_EVERY: u64 = 5;

/// What the enrichers keep between samples.
#[derive(Debug)]
pub struct Enrich {
    /// Where GPU holders are looked for (None: the source's own list only).
    pub roots: Option<Roots>,
    holders: Vec<Holder>,
    kfd_nodes: Vec<KfdNode>,
    swept: holders::Swept,
    samples: u64,
    facts: Cache,
    /// Host and per-process CPU and memory (a live, local node only).
    pub usage: Option<Usage>,
    /// Served models: registry, discovery and probes.
    pub models: Option<ModelProber>,
    /// Whether the models found are probed (never for a recording: its ports are not here).
    pub probe_models: bool,
    /// The node is another machine (amd-smi over ssh): nothing of this host is merged.
    pub remote: bool,
    /// The kubelet's PodResources (None: not this host's processes, or not asked for).
    pub kubelet: Option<crate::collect::kubelet::Kubelet>,
}

impl Default for Enrich {
    fn default() -> Self {
        Self {
            roots: None,
            holders: Vec::new(),
            kfd_nodes: Vec::new(),
            swept: holders::Swept::default(),
            samples: 0,
            facts: Cache::default(),
            usage: Some(Usage::new("/proc")),
            models: None,
            probe_models: true,
            remote: false,
            kubelet: Some(crate::collect::kubelet::Kubelet::host()),
        }
    }
}

/// The /proc work of one sample.
struct Job {
    roots: Option<Roots>,
    proc_root: PathBuf,
    need: Need,
    full: bool,
    remote: bool,
    holders: Vec<Holder>,
    nodes: Vec<KfdNode>,
    swept: holders::Swept,
    facts: Cache,
    usage: Option<Usage>,
}

impl Job {
    fn run(mut self, snap: &mut Snapshot) -> Self {
        if self.need == Need::Holders
            && let Some(roots) = &self.roots
        {
            if self.full {
                self.holders = holders::scan_all(roots, &mut self.swept);
                self.nodes = crate::collect::kfd::topology(&roots.sys_root);
            } else {
                self.holders
                    .retain(|h| roots.proc_root.join(h.pid.to_string()).exists());
            }
            holders::merge(snap, &self.holders, &self.nodes, &roots.sys_root);
            holders::say_hidden(snap, self.swept.denied());
            holders::say_shared(snap, &self.nodes);
        }
        if self.remote {
            return self;
        }
        if self.need != Need::Nothing {
            // Against pid reuse, the cached facts are read again with each full scan.
            if self.full {
                self.facts.clear();
            }
            crate::collect::procinfo::enrich_cached(snap, &self.proc_root, &mut self.facts);
        }
        if let Some(u) = self.usage.as_mut() {
            u.observe(snap);
        }
        self
    }
}

impl Enrich {
    /// A full holder scan at the next sample (staging, the kill dialog, a drain).
    pub const fn scan_now(&mut self) {
        self.samples = 0;
    }

    /// The /proc enrichers for `need`, on a blocking thread.
    pub async fn proc(&mut self, snap: Snapshot, need: Need) -> Snapshot {
        let full = match need {
            Need::Holders => self.samples.is_multiple_of(HOLDER_SCAN_EVERY),
            Need::Facts => self
                .samples
                .is_multiple_of(crate::collect::sysfs::collector::FULL_SCAN_EVERY),
            Need::Nothing => false,
        };
        self.samples += 1;
        let had_usage = self.usage.is_some();
        let job = Job {
            proc_root: self
                .roots
                .as_ref()
                .map_or_else(|| PathBuf::from("/proc"), |r| r.proc_root.clone()),
            roots: self.roots.clone(),
            need,
            full,
            remote: self.remote,
            holders: std::mem::take(&mut self.holders),
            nodes: std::mem::take(&mut self.kfd_nodes),
            swept: std::mem::take(&mut self.swept),
            facts: std::mem::take(&mut self.facts),
            usage: self.usage.take(),
        };
        let work = tokio::task::spawn_blocking(move || {
            let mut snap = snap;
            // A panic here would be a bug: the sample goes on without what the job adds, and
            // the enrichers start afresh.
            let job = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(&mut snap)));
            (snap, job.ok())
        });
        match work.await {
            Ok((snap, Some(job))) => {
                self.holders = job.holders;
                self.kfd_nodes = job.nodes;
                self.swept = job.swept;
                self.facts = job.facts;
                self.usage = job.usage;
                snap
            }
            Ok((snap, None)) => {
                log::warn!("the /proc enrichers failed; they start afresh at the next sample");
                self.usage = had_usage.then(|| Usage::new("/proc"));
                snap
            }
            Err(e) => {
                log::warn!("the /proc enrichers failed: {e}");
                self.usage = had_usage.then(|| Usage::new("/proc"));
                Snapshot::default()
            }
        }
    }

    /// The pods of each logical GPU and holder, where the node has a kubelet.
    pub async fn kubelet(&mut self, snap: &mut Snapshot) {
        if let Some(k) = self.kubelet.as_mut() {
            k.enrich(snap).await;
        }
    }

    /// The served models on the node in `snap`, and the registry's status whatever the source.
    pub async fn models(&mut self, snap: &mut Snapshot) {
        let Some(prober) = self.models.as_mut() else {
            return;
        };
        if self.probe_models {
            snap.models = prober.observe(snap).await;
            snap.throughput = prober.take_readings();
        }
        if let Some(e) = &prober.registry_error {
            snap.sources
                .push(SourceStatus::down("models registry", Some(e.clone())));
        }
    }
}
