//! Staging a MIG layout inside the monitor (NVIDIA GPUs): `c` cycles through the layouts worth
//! proposing for the device's own profiles, the plan is recomputed on every key and every new
//! sample, and Enter asks for the host name; a plan that changes while it is typed must be
//! confirmed again. The apply runs detached (`partop mig apply`), as AMD repartitions do.

use super::stage::Confirming;
use crate::domain::mig::{MigDraft, MigPlan, plan, presets};
use crate::domain::snapshot::Snapshot;

/// A MIG layout being staged.
#[derive(Clone, Debug, PartialEq)]
pub struct MigStaging {
    /// NVIDIA device index.
    pub gpu: u32,
    /// The layouts to cycle through (empty = MIG off).
    pub presets: Vec<Vec<String>>,
    /// Which one.
    pub choice: usize,
    /// The nvidia-smi the commands name.
    pub smi: String,
    /// The plan, or why there is none.
    pub result: Result<MigPlan, Vec<String>>,
    /// The confirmation, once asked for.
    pub confirming: Option<Confirming>,
}

impl MigStaging {
    /// Starts staging on MIG-capable GPU `gpu` of `snap`.
    pub fn new(gpu: u32, snap: &Snapshot, smi: String) -> Self {
        let profiles = snap
            .gpus
            .iter()
            .filter(|g| g.mig.is_some())
            .nth(gpu as usize)
            .and_then(|g| g.mig.as_ref())
            .map(|m| m.profiles.clone())
            .unwrap_or_default();
        let mut s = Self {
            gpu,
            presets: presets(&profiles),
            choice: 0,
            smi,
            result: Err(vec![]),
            confirming: None,
        };
        s.replan(snap);
        s
    }

    /// The layout chosen.
    pub fn layout(&self) -> Vec<String> {
        self.presets.get(self.choice).cloned().unwrap_or_default()
    }

    /// Next layout.
    pub fn cycle(&mut self, snap: &Snapshot) {
        if !self.presets.is_empty() {
            self.choice = (self.choice + 1) % self.presets.len();
        }
        self.replan(snap);
    }

    /// Recomputes the plan; a changed fingerprint voids a confirmation in progress.
    pub fn replan(&mut self, snap: &Snapshot) {
        let draft = MigDraft {
            gpu: self.gpu,
            instances: self.layout(),
        };
        self.result = plan(snap, &draft, &self.smi);
        if let (Some(c), Ok(p)) = (self.confirming.as_mut(), &self.result)
            && c.fingerprint != p.fingerprint
        {
            c.fingerprint.clone_from(&p.fingerprint);
            c.typed.clear();
            c.notice = Some("the node changed: the plan was recomputed; confirm again".into());
        } else if self.result.is_err() {
            self.confirming = None;
        }
    }
}
