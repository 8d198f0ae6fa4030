//! The reducer's part for partition changes: staging a plan (AMD partitions or a MIG layout),
//! cycling its choices, starting its typed confirmation, the placement advice that stages one,
//! and the progress of an apply.

use super::super::command::Command;
use super::super::mig_stage::MigStaging;
use super::super::msg::Effect;
use super::super::scroll::Pane;
use super::super::stage::{Confirming, Staging};
use super::super::state::State;

/// A command that stages or confirms a change.
pub(super) fn command(state: &mut State, c: Command) -> Vec<Effect> {
    let grace = grace_secs(state);
    match c {
        Command::StageChange => return stage(state),
        Command::TagGpu => tag_gpu(state),
        Command::StageCycleCompute if state.mig_staging.is_some() => {
            if let (Some(st), Some(snap)) = (state.mig_staging.as_mut(), state.snapshot.clone()) {
                st.cycle(&snap);
            }
        }
        Command::StageCycleCompute | Command::StageCycleMemory | Command::StageToggleScope => {
            if let (Some(st), Some(snap)) = (state.staging.as_mut(), state.snapshot.clone()) {
                match c {
                    Command::StageCycleCompute => st.cycle_compute(),
                    Command::StageCycleMemory => st.cycle_memory(),
                    _ => st.all = !st.all,
                }
                st.replan(&snap, grace);
            }
        }
        Command::StageConfirm if state.mig_staging.is_some() => {
            if let Some(st) = state.mig_staging.as_mut()
                && let Ok(p) = &st.result
            {
                st.confirming = Some(confirming(&p.fingerprint));
            }
        }
        Command::StageConfirm => {
            if let Some(st) = state.staging.as_mut()
                && let Ok(p) = &st.result
            {
                st.confirming = Some(confirming(&p.fingerprint));
            }
        }
        Command::ToggleProgress => {
            if let Some(p) = state.applying.as_mut() {
                p.visible = !p.visible;
            }
        }
        _ => {}
    }
    Vec::new()
}

/// The SIGTERM grace period plans give holders, in seconds.
fn grace_secs(state: &State) -> u32 {
    u32::try_from(state.grace_ms / 1000).unwrap_or(10)
}

/// A typed confirmation starting, bound to the plan's fingerprint.
fn confirming(fingerprint: &str) -> Confirming {
    Confirming {
        typed: String::new(),
        fingerprint: fingerprint.to_string(),
        notice: None,
    }
}

/// A repartition runs: nothing else may be staged until it ends.
fn applying(state: &State) -> bool {
    state
        .applying
        .as_ref()
        .is_some_and(|p| p.finished.is_none())
}

/// `p`: stages a change of the selected GPU (a MIG layout on NVIDIA), or of the tagged ones.
fn stage(state: &mut State) -> Vec<Effect> {
    if let Some(why) = &state.no_partition_change {
        state.notice = Some((why.clone(), state.now_ms));
        return Vec::new();
    }
    if applying(state) {
        return Vec::new();
    }
    let Some(snap) = state.snapshot.clone() else {
        return Vec::new();
    };
    let Some((g, _)) = snap.logical().nth(state.gpu_sel) else {
        return Vec::new();
    };
    if g.mig.is_some() {
        // NVIDIA: a MIG layout, on this GPU.
        let idx = snap
            .gpus
            .iter()
            .filter(|x| x.mig.is_some())
            .position(|x| x.bdf == g.bdf)
            .unwrap_or(0);
        state.mig_staging = Some(MigStaging::new(
            u32::try_from(idx).unwrap_or(0),
            &snap,
            state.nvidia_smi.clone(),
        ));
        state.scroll.reset(Pane::Stage);
        return Vec::new();
    }
    let grace = grace_secs(state);
    // Tagged GPUs (several) when there are any, else the selected one.
    let mut tagged: Vec<String> = state.tagged_gpus.iter().cloned().collect();
    let first = if tagged.is_empty() {
        g.bdf.clone()
    } else {
        tagged.remove(0)
    };
    let mut st = Staging::new(first, &snap, grace);
    st.also = tagged;
    st.reload_secs = state.reload_secs;
    st.replan(&snap, grace);
    state.staging = Some(st);
    state.scroll.reset(Pane::Stage);
    // Who must stop: every holder, not only ROCm ones; the plan updates with the scan.
    vec![Effect::ScanHolders]
}

/// Tags (or untags) the selected physical GPU: staging starts with the tagged ones.
fn tag_gpu(state: &mut State) {
    if let Some((g, _)) = state
        .snapshot
        .as_ref()
        .and_then(|s| s.logical().nth(state.gpu_sel))
        && !state.tagged_gpus.remove(&g.bdf)
    {
        state.tagged_gpus.insert(g.bdf.clone());
    }
}

/// The placement advice for the models that run: stages its best layout on every GPU, or says
/// why there is none.
pub(super) fn advise(state: &mut State) -> Vec<Effect> {
    if applying(state) {
        return Vec::new();
    }
    let Some(snap) = state.snapshot.clone() else {
        return Vec::new();
    };
    match crate::domain::placement::advise_node(&snap) {
        Ok(ranked) => {
            if let (Some(best), Some(g)) = (ranked.first(), snap.gpus.first()) {
                log::info!("placement advice: {}", best.summary);
                let grace = grace_secs(state);
                let mut st = Staging::new(g.bdf.clone(), &snap, grace);
                st.all = true;
                st.compute = Some(best.compute);
                st.memory = Some(best.memory);
                st.advice = Some(best.summary.clone());
                st.advice_for = (
                    ranked
                        .iter()
                        .map(|p| format!("{}/{}", p.compute, p.memory))
                        .collect(),
                    crate::domain::throughput::model_names(&snap),
                );
                st.reload_secs = state.reload_secs;
                st.replan(&snap, grace);
                state.staging = Some(st);
                state.scroll.reset(Pane::Stage);
                return vec![Effect::LoadThroughput];
            }
        }
        Err(e) => {
            log::warn!("placement advice: {e}");
            state.notice = Some((format!("placement advice: {e}"), state.now_ms));
        }
    }
    Vec::new()
}
