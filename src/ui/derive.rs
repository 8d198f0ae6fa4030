//! The rows the views show, derived from the state when its inputs change (a snapshot, the
//! filter, the sort, the grouping), never while drawing: what runs on each logical GPU, and
//! the process table's rows, filtered, sorted and grouped. Sits between the reducer
//! (`ui::update`, which calls it) and the views (which only read the result).

use super::filter::keeps;
use super::rows::{GpuUse, Group, ProcRow, SortKey};
use super::state::{State, View};
use crate::domain::served::model_of;
use crate::domain::snapshot::{PodRef, Process, Snapshot};
use std::cmp::Ordering;
use std::collections::HashMap;

impl State {
    /// Recomputes the derived rows: the GPU labels, and the process rows (filter, sort, group).
    pub fn derive_rows(&mut self) {
        let Some(snap) = self.snapshot.clone() else {
            self.rows.clear();
            return;
        };
        self.gpu_labels = gpu_uses(&snap);
        let mut idx: Vec<usize> = (0..snap.processes.len())
            .filter(|i| self.process_matches(&snap.processes[*i]))
            .collect();
        idx.sort_by(|a, b| self.process_order(&snap.processes[*a], &snap.processes[*b]));
        if self.sort_desc {
            idx.reverse();
        }
        self.rows = match self.group {
            Group::None => idx
                .into_iter()
                .map(|index| ProcRow::Process { index, gpu: None })
                .collect(),
            Group::Gpu => grouped_by_gpu(&snap, &idx),
            Group::Model => grouped_by_model(&snap, idx),
        };
        self.proc_sel = self.proc_sel.min(self.rows.len().saturating_sub(1));
        self.derive_shown();
    }

    /// Whether the process filter keeps this process (every process when it is empty): the
    /// words its row shows, or a field it names (the whole command line, the container).
    fn process_matches(&self, p: &Process) -> bool {
        let needle = self.filter_of(View::Processes).to_lowercase();
        if needle.is_empty() {
            return true;
        }
        let model = self.model_of(p);
        [
            model.as_deref(),
            p.name.as_deref(),
            p.command.as_deref(),
            p.user.as_deref(),
            p.container_id.as_deref(),
            p.systemd_unit.as_deref(),
            p.pod.as_ref().map(|x| x.namespace.as_str()),
            p.pod.as_ref().map(|x| x.pod.as_str()),
            p.pod.as_ref().map(|x| x.container.as_str()),
        ]
        .into_iter()
        .flatten()
        .any(|s| s.to_lowercase().contains(&needle))
            || p.pod
                .as_ref()
                .is_some_and(|x| x.label().to_lowercase().contains(&needle))
            || p.pid.to_string().contains(&needle)
            || keeps(&needle, &super::view::processes::words(self, p))
    }

    /// The order of two processes by the sort key, ascending; ties by pid.
    fn process_order(&self, p: &Process, q: &Process) -> Ordering {
        let o = match self.sort {
            SortKey::Model => self.model_of(p).cmp(&self.model_of(q)),
            key => measure_order(key, p, q),
        };
        o.then(p.pid.cmp(&q.pid))
    }
}

/// What runs on each logical GPU (by amd-smi index): the holders' models or names, then a
/// pod's name on a Kubernetes node, then a served model's own name, each over the one before.
fn gpu_uses(snap: &Snapshot) -> HashMap<u32, GpuUse> {
    let mut uses: HashMap<u32, GpuUse> = HashMap::new();
    for p in &snap.processes {
        let label = State::label_of(p);
        for g in &p.gpus {
            let e = uses.entry(g.gpu_id).or_default();
            if e.label.is_empty() {
                e.label.clone_from(&label);
            } else if !e.label.split(", ").any(|x| x == label) {
                e.label = format!("{}, {label}", e.label);
            }
            e.holders += 1;
            if let Some(c) = g.cu_percent {
                e.cu_percent = Some(e.cu_percent.unwrap_or(0.0) + c);
            }
        }
    }
    // On a Kubernetes node the pod labels its logical GPUs (`namespace/pod`), in the
    // cluster's terms, whichever of its processes holds them.
    for l in snap.gpus.iter().flat_map(|g| &g.partitions) {
        if !l.pods.is_empty() {
            let mut names: Vec<String> = l.pods.iter().map(PodRef::label).collect();
            names.dedup();
            uses.entry(l.gpu_id).or_default().label = names.join(", ");
        }
    }
    // A served model's own name labels its logical GPUs (the registry's name when it has one).
    for m in &snap.models {
        for g in &m.gpus {
            uses.entry(*g).or_default().label.clone_from(&m.name);
        }
    }
    // A model the cluster serves (a KServe InferenceService) names its pods' GPUs with its
    // replicas healthy: the service is what the operator deployed.
    for m in snap.kubelet.iter().flat_map(|k| &k.models) {
        for g in &m.gpus {
            uses.entry(*g).or_default().label = format!("{} {}", m.name, m.replicas());
        }
    }
    uses
}

/// The order of two processes by a measured key (every key but the model's), ascending.
fn measure_order(key: SortKey, p: &Process, q: &Process) -> Ordering {
    let cu = |p: &Process| {
        p.gpus
            .iter()
            .filter_map(|g| g.cu_percent)
            .fold(0.0, f64::max)
    };
    let gtt = |p: &Process| p.gpus.iter().filter_map(|g| g.gtt_bytes).sum::<u64>();
    match key {
        SortKey::Vram => p.vram_total().cmp(&q.vram_total()),
        SortKey::Cu => cu(p).total_cmp(&cu(q)),
        SortKey::Gtt => gtt(p).cmp(&gtt(q)),
        SortKey::Gpu => p
            .gpus
            .first()
            .map(|g| g.gpu_id)
            .cmp(&q.gpus.first().map(|g| g.gpu_id)),
        SortKey::Pid => p.pid.cmp(&q.pid),
        SortKey::User => p.user.cmp(&q.user),
        SortKey::Name => p.name.cmp(&q.name),
        // Longest running first when descending.
        SortKey::Start => q.started_at_ms.cmp(&p.started_at_ms),
        SortKey::Cpu => p
            .cpu_percent
            .unwrap_or(-1.0)
            .total_cmp(&q.cpu_percent.unwrap_or(-1.0)),
        SortKey::Rss => p.rss_bytes.cmp(&q.rss_bytes),
        SortKey::Busy => p
            .engine_busy_percent()
            .unwrap_or(-1.0)
            .total_cmp(&q.engine_busy_percent().unwrap_or(-1.0)),
        SortKey::Model => Ordering::Equal,
    }
}

/// The sorted processes under a heading per logical GPU they hold, then those that hold only
/// /dev/kfd.
fn grouped_by_gpu(snap: &Snapshot, idx: &[usize]) -> Vec<ProcRow> {
    let mut rows = Vec::new();
    for (_, l) in snap.logical() {
        let members: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|i| snap.processes[*i].gpus.iter().any(|g| g.gpu_id == l.gpu_id))
            .collect();
        if members.is_empty() {
            continue;
        }
        rows.push(ProcRow::Heading(format!("GPU {} ({})", l.gpu_id, l.bdf)));
        rows.extend(members.into_iter().map(|index| ProcRow::Process {
            index,
            gpu: Some(l.gpu_id),
        }));
    }
    // Holders of /dev/kfd alone use no one GPU, and block a reload of every one.
    let kfd_only: Vec<usize> = idx
        .iter()
        .copied()
        .filter(|i| {
            let p = &snap.processes[*i];
            p.holds_kfd && p.gpus.is_empty()
        })
        .collect();
    if !kfd_only.is_empty() {
        rows.push(ProcRow::Heading("/dev/kfd only (every GPU)".into()));
        rows.extend(
            kfd_only
                .into_iter()
                .map(|index| ProcRow::Process { index, gpu: None }),
        );
    }
    rows
}

/// The sorted processes under a heading per model they serve (by name), those that serve
/// none last.
fn grouped_by_model(snap: &Snapshot, idx: Vec<usize>) -> Vec<ProcRow> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for i in idx {
        let p = &snap.processes[i];
        let label = p.command.as_deref().and_then(model_of).map_or_else(
            || "(not a model server)".to_string(),
            |(k, m)| format!("{m} ({k})"),
        );
        match groups.iter_mut().find(|(l, _)| *l == label) {
            Some((_, v)) => v.push(i),
            None => groups.push((label, vec![i])),
        }
    }
    groups.sort_by(|a, b| {
        a.0.starts_with('(')
            .cmp(&b.0.starts_with('('))
            .then(a.0.cmp(&b.0))
    });
    groups
        .into_iter()
        .flat_map(|(l, v)| {
            std::iter::once(ProcRow::Heading(l)).chain(
                v.into_iter()
                    .map(|index| ProcRow::Process { index, gpu: None }),
            )
        })
        .collect()
}
