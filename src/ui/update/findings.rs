//! The reducer's part for the Findings view's action on a reclaimable partition: whoever holds
//! it decides the flow. A pod: its eviction, asked after the API server said who the pod is
//! now, confirmed by typing its name (bound to its UID), checked again against the newest
//! sample when confirmed. A model (no Kubernetes): the Models view's stop ask. A bare process:
//! the kill dialog. Every flow ends in the one executor of its kind (`ui::effect`).

use super::super::command::Command;
use super::super::confirm::Typed;
use super::super::dialog::KillDialog;
use super::super::evict_ask::{EvictAsk, EvictProgress, PodAt};
use super::super::model_ask::model_ask;
use super::super::msg::Effect;
use super::super::state::{State, View};
use crate::domain::findings::Kind;
use crate::domain::snapshot::Snapshot;
use ratatui::crossterm::event::KeyEvent;

/// Who holds a reclaimable partition, as the newest sample says.
#[derive(Debug, PartialEq, Eq)]
enum Holder {
    /// One pod (the kubelet's allocation).
    Pod(PodAt),
    /// A registered, running model: its row in the Models view.
    Model(usize),
    /// Bare processes.
    Processes(Vec<u32>),
}

/// Who holds the partition `bdf` now, or why there is nothing to act on.
fn holder(snap: &Snapshot, bdf: &str) -> Result<Holder, String> {
    let Some((_, l)) = snap.logical().find(|(_, l)| l.bdf == bdf) else {
        return Err(format!("GPU {bdf} is not on the node now"));
    };
    let mut pods: Vec<&crate::domain::snapshot::PodRef> = l.pods.iter().collect();
    pods.dedup_by(|a, b| a.namespace == b.namespace && a.pod == b.pod);
    match pods.as_slice() {
        [p] => {
            return Ok(Holder::Pod(PodAt {
                namespace: p.namespace.clone(),
                pod: p.pod.clone(),
                node: snap.host.clone(),
                gpu: l.bdf.clone(),
                gpu_id: l.gpu_id,
            }));
        }
        [] => {}
        many => {
            return Err(format!(
                "GPU {} is allocated to {} pods ({}): evict them one by one with kubectl's eviction, not from here",
                l.gpu_id,
                many.len(),
                many.iter()
                    .map(|p| crate::domain::text::escape_controls(&p.label()).into_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    if let Some(i) = snap
        .models
        .iter()
        .position(|m| m.pid.is_some() && m.spec.is_some() && m.gpus.contains(&l.gpu_id))
    {
        return Ok(Holder::Model(i));
    }
    let pids: Vec<u32> = snap
        .processes
        .iter()
        .filter(|p| {
            p.gpus
                .iter()
                .any(|u| u.gpu_id == l.gpu_id && !u.attached_only())
        })
        .map(|p| p.pid)
        .collect();
    if pids.is_empty() {
        return Err(format!("GPU {} shows no holder now", l.gpu_id));
    }
    Ok(Holder::Processes(pids))
}

/// The action on the selected finding: opens the confirmation its holder's flow uses, or says
/// why there is none.
pub(super) fn act(state: &mut State, _c: Command) -> Vec<Effect> {
    if state.view != View::Findings {
        return Vec::new();
    }
    let (Some(f), Some(snap)) = (
        state.findings.get(state.finding_sel).cloned(),
        state.snapshot.clone(),
    ) else {
        state.notice = Some(("no finding selected".into(), state.now_ms));
        return Vec::new();
    };
    if f.kind != Kind::Reclaimable {
        state.notice = Some((
            format!(
                "no action for a {} finding: only a reclaimable partition is given back from here",
                f.kind.label()
            ),
            state.now_ms,
        ));
        return Vec::new();
    }
    match holder(&snap, &f.subject) {
        Err(why) => {
            state.notice = Some((why, state.now_ms));
            Vec::new()
        }
        Ok(Holder::Pod(at)) => {
            state.eviction = Some(format!("reading pod {} from the API server…", at.label()));
            vec![Effect::LookupPod(at)]
        }
        Ok(Holder::Model(i)) => {
            state.model_ask = model_ask(&snap, i, Command::ModelStop);
            Vec::new()
        }
        Ok(Holder::Processes(pids)) => {
            let plan = crate::domain::kill::plan(&snap, &pids, state.own_pid);
            state.dialog = Some(KillDialog::new(plan, state.grace_ms));
            vec![Effect::ScanHolders]
        }
    }
}

/// The API server's answer about the pod: the ask opens with its UID, or the reason is said.
pub(super) fn looked(state: &mut State, r: Result<(PodAt, String), String>) -> Vec<Effect> {
    match r {
        Ok((at, uid)) => {
            state.eviction = None;
            state.evict_ask = Some(EvictAsk::new(at, uid));
        }
        Err(why) => {
            state.eviction = Some(why.clone());
            state.notice = Some((why, state.now_ms));
        }
    }
    Vec::new()
}

/// Whether the newest sample still shows `at` holding its partition (the kubelet's allocation).
fn still_holds(snap: Option<&Snapshot>, at: &PodAt) -> bool {
    snap.and_then(|s| s.logical().find(|(_, l)| l.bdf == at.gpu))
        .is_some_and(|(_, l)| {
            l.pods
                .iter()
                .any(|p| p.namespace == at.namespace && p.pod == at.pod)
        })
}

/// A key while the eviction is being confirmed.
pub(super) fn key(state: &mut State, k: &KeyEvent) -> Vec<Effect> {
    let Some(ask) = state.evict_ask.as_mut() else {
        return Vec::new();
    };
    match ask.key(k) {
        Typed::Cancel => state.evict_ask = None,
        Typed::Pending => {}
        Typed::Confirmed => {
            let Some(ask) = state.evict_ask.take() else {
                return Vec::new();
            };
            if !still_holds(state.snapshot.as_deref(), &ask.at) {
                let why = format!(
                    "not evicted: {} no longer holds GPU {} ({})",
                    crate::domain::text::escape_controls(&ask.at.label()),
                    ask.at.gpu_id,
                    ask.at.gpu
                );
                state.eviction = Some(why.clone());
                state.notice = Some((why, state.now_ms));
                return Vec::new();
            }
            state.eviction = Some(format!(
                "evicting {} (its PodDisruptionBudget honoured)…",
                crate::domain::text::escape_controls(&ask.at.label())
            ));
            // INVARIANT: the only place an Effect::Evict is created: the pod's name typed, its
            // UID the one the ask showed, and the newest sample still showing it on the GPU.
            return vec![Effect::Evict(ask.at, ask.uid)];
        }
    }
    Vec::new()
}

/// How the eviction goes: said in the Findings view and the footer; the end asks for a fresh
/// sample and journal.
pub(super) fn evicted(state: &mut State, p: EvictProgress) -> Vec<Effect> {
    match p {
        EvictProgress::Blocked(words) => {
            state.eviction = Some(words.clone());
            state.notice = Some((words, state.now_ms));
            Vec::new()
        }
        EvictProgress::Done(r) => {
            let text = match r {
                Ok(d) => d,
                Err(e) => format!("not evicted: {e}"),
            };
            state.eviction = Some(text.clone());
            state.notice = Some((text, state.now_ms));
            vec![Effect::RefreshNow, Effect::LoadJournal]
        }
    }
}
