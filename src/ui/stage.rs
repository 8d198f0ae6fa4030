//! Staging a repartition inside the monitor: pick the scope (the selected physical GPU or all)
//! and target modes; the plan is recomputed on every change and every new snapshot; confirming
//! asks for the host name (a reload) or "yes", and a plan that changes while the operator types
//! must be confirmed again. The apply itself runs detached (it survives a dropped SSH session);
//! its progress is followed from the journal.

use crate::domain::journal::Entry;
use crate::domain::plan::{Draft, Plan, Reload, plan};
use crate::domain::snapshot::Snapshot;
use crate::domain::{ComputeMode, MemoryMode};

pub use super::confirm::{Confirming, Typed};

/// A staged change.
#[derive(Clone, Debug, PartialEq)]
pub struct Staging {
    /// The physical GPU the operator started from.
    pub gpu: String,
    /// Other physical GPUs tagged with it (several, not all).
    pub also: Vec<String>,
    /// Apply to every GPU.
    pub all: bool,
    /// Target compute mode.
    pub compute: Option<ComputeMode>,
    /// Target memory mode.
    pub memory: Option<MemoryMode>,
    /// The plan, or why there is none.
    pub result: Result<Plan, Vec<String>>,
    /// The confirmation, once asked for.
    pub confirming: Option<Confirming>,
    /// Why this layout was proposed (placement advice), when it was.
    pub advice: Option<String>,
    /// The advice's candidate layouts (`DPX/NPS2`, best first) and the models it placed: what
    /// this node measured under them is shown beside the estimate.
    pub advice_for: (Vec<String>, Vec<String>),
    /// What this node measured (one line each), once the store is read (None: reading).
    pub measured: Option<Vec<String>>,
    /// Seconds a driver reload is expected to take (the simulator knows its own).
    pub reload_secs: u32,
}

fn cycle<T: Copy + PartialEq>(all: &[T], cur: Option<T>) -> Option<T> {
    match cur.and_then(|c| all.iter().position(|x| *x == c)) {
        None => all.first().copied(),
        Some(i) if i + 1 < all.len() => Some(all[i + 1]),
        Some(_) => None,
    }
}

impl Staging {
    /// Starts staging from a physical GPU.
    pub fn new(gpu: String, snap: &Snapshot, grace_secs: u32) -> Self {
        let mut s = Self {
            gpu,
            also: Vec::new(),
            all: false,
            compute: None,
            memory: None,
            result: Err(vec![
                "choose a compute mode (c) and/or a memory mode (m)".into(),
            ]),
            confirming: None,
            advice: None,
            advice_for: (Vec::new(), Vec::new()),
            measured: None,
            reload_secs: 120,
        };
        s.replan(snap, grace_secs);
        s
    }

    /// The draft.
    pub fn draft(&self) -> Draft {
        Draft {
            gpus: if self.all {
                vec![]
            } else {
                std::iter::once(self.gpu.clone())
                    .chain(self.also.iter().cloned())
                    .collect()
            },
            compute: self.compute,
            memory: self.memory,
        }
    }

    /// Recomputes the plan; a changed fingerprint voids a confirmation in progress.
    pub fn replan(&mut self, snap: &Snapshot, grace_secs: u32) {
        if self.compute.is_none() && self.memory.is_none() {
            self.result = Err(vec![
                "choose a compute mode (c) and/or a memory mode (m)".into(),
            ]);
            return;
        }
        // The kernel is read first; amd-smi's identity read (how this driver reloads, the
        // firmware's partition profiles) follows in the background. No plan is offered for
        // confirmation before it: the plan `apply` re-derives would differ.
        let Some(reload) = snap
            .reload
            .or_else(|| snap.gpus.is_empty().then_some(Reload::ResetReload))
        else {
            self.result = Err(vec![
                "waiting for amd-smi's first read (the reload method and the firmware's partition profiles) before planning; the kernel's values are shown meanwhile".into(),
            ]);
            self.confirming = None;
            return;
        };
        self.result = plan(snap, &self.draft(), reload, self.reload_secs, grace_secs)
            .map_err(|e| e.iter().map(ToString::to_string).collect());
        if let Some(c) = self.confirming.as_mut() {
            match &self.result {
                Ok(p) if p.fingerprint == c.fingerprint => {}
                Ok(p) => {
                    c.notice = Some(format!(
                        "the node changed while you were confirming (plan {} is now {}): review it and confirm again",
                        c.fingerprint, p.fingerprint
                    ));
                    c.fingerprint.clone_from(&p.fingerprint);
                    c.typed.clear();
                }
                Err(_) => self.confirming = None,
            }
        }
    }

    /// `c`.
    pub fn cycle_compute(&mut self) {
        self.compute = cycle(&ComputeMode::ALL, self.compute)
            .filter(|m| *m != ComputeMode::Tpx)
            .or_else(|| {
                if self.compute == Some(ComputeMode::Dpx) {
                    Some(ComputeMode::Qpx)
                } else {
                    None
                }
            });
    }

    /// `m`.
    pub fn cycle_memory(&mut self) {
        self.memory = cycle(
            &[MemoryMode::Nps1, MemoryMode::Nps2, MemoryMode::Nps4],
            self.memory,
        );
    }

    /// What the operator must type.
    pub fn required_word(&self) -> Option<String> {
        let p = self.result.as_ref().ok()?;
        Some(if p.reloads() {
            p.host.clone()
        } else {
            "yes".into()
        })
    }
}

/// A detached apply being followed.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// The plan.
    pub plan: Plan,
    /// Per step: ok, detail (from the journal).
    pub steps: Vec<Option<(bool, String)>>,
    /// Finished: Some(true) applied, Some(false) failed.
    pub finished: Option<bool>,
    /// The overlay is shown.
    pub visible: bool,
    /// The apply's log file.
    pub log: String,
    /// The apply process's pid (to notice it exit without finishing).
    pub pid: Option<u32>,
    /// How the apply process ended, when it exited without finishing.
    pub exit: Option<String>,
    /// The step running: index, when it began (ms since the epoch), its time limit.
    pub running: Option<(usize, u64, Option<u32>)>,
    /// The exact command that resumes the run (from its journaled start).
    pub resume: Option<String>,
}

impl Progress {
    /// Follows a plan.
    pub fn new(plan: Plan, log: String) -> Self {
        let n = plan.steps.len();
        Self {
            plan,
            steps: vec![None; n],
            finished: None,
            visible: true,
            log,
            pid: None,
            exit: None,
            running: None,
            resume: None,
        }
    }

    /// Reads the journal entries of this plan's newest run (see [`Self::follow`]).
    pub fn update(&mut self, entries: &[Entry]) {
        self.follow(&crate::domain::journal::Runs::of(entries));
    }

    /// Reads this plan's newest run from the journal's runs (older runs of a plan with the
    /// same fingerprint are not this one): each step's result, the step running, how it ended.
    pub fn follow(&mut self, runs: &crate::domain::journal::Runs) {
        let Some(run) = runs.following(
            crate::domain::journal::RunKind::Repartition,
            &self.plan.fingerprint,
        ) else {
            return;
        };
        self.resume.clone_from(&run.resume);
        for (i, (ok, detail)) in &run.results {
            if let Some(slot) = self.steps.get_mut(*i) {
                *slot = Some((*ok, detail.clone()));
            }
        }
        if let Some((i, at, limit)) = &run.last_begin {
            let at = humantime::parse_rfc3339_weak(at)
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .and_then(|d| u64::try_from(d.as_millis()).ok())
                .unwrap_or(0);
            self.running = Some((*i, at, *limit));
        }
        if let Some(ended) = run.outcome() {
            self.finished = Some(ended);
        }
    }

    /// The apply process is gone without finishing: say how it ended.
    pub fn exited(&mut self, how: String) {
        if self.finished.is_none() {
            self.finished = Some(false);
            self.visible = true;
            self.exit = Some(how);
        }
    }
}

/// What this node measured under the advice's layouts: the advised one always (said when it
/// has none), the other candidates where a measurement exists, best first.
pub fn measured_lines(
    st: &Staging,
    host: &str,
    store: Result<crate::domain::throughput::Store, String>,
) -> Vec<String> {
    let store = match store {
        Ok(s) => s,
        Err(e) => return vec![format!("no measurement read: {e}")],
    };
    let (layouts, models) = &st.advice_for;
    let shown: Vec<String> = layouts
        .iter()
        .enumerate()
        .filter(|(i, l)| *i == 0 || models.iter().any(|m| store.get(host, l, m).is_some()))
        .map(|(_, l)| l.clone())
        .collect();
    if models.is_empty() {
        return vec!["no registered model: nothing measured".into()];
    }
    crate::domain::throughput::advice_lines(&store, host, &shown, models)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_cycles_through_the_modes_and_back_to_keep() {
        let mut s = Staging {
            reload_secs: 120,
            advice: None,
            advice_for: (Vec::new(), Vec::new()),
            measured: None,
            also: Vec::new(),
            gpu: "x".into(),
            all: false,
            compute: None,
            memory: None,
            result: Err(vec![]),
            confirming: None,
        };
        let mut seen = Vec::new();
        for _ in 0..5 {
            s.cycle_compute();
            seen.push(s.compute);
        }
        assert_eq!(
            seen,
            vec![
                Some(ComputeMode::Spx),
                Some(ComputeMode::Dpx),
                Some(ComputeMode::Qpx),
                Some(ComputeMode::Cpx),
                None
            ]
        );
    }
}
