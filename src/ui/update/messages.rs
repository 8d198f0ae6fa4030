//! The reducer's part for what arrives without a key: samples, the clock, a kill job's
//! progress, a detached apply starting, and the journal (which follows a running apply).

use super::super::msg::KillProgress as KillEvent;
use super::super::msg::{Detached, Effect};
use super::super::stage::Progress;
use super::super::state::State;
use crate::domain::journal::{Close, Entry, RunKind, Runs};
use crate::domain::snapshot::Snapshot;
use std::sync::Arc;

/// A new sample: history, findings, what dialogs and staged plans know, the derived rows.
pub(super) fn snapshot(state: &mut State, s: Arc<Snapshot>) -> Vec<Effect> {
    state.history.push(&s);
    state.findings = state.tracker.observe(&s);
    state.now_ms = state.now_ms.max(s.taken_at_ms);
    if let Some(d) = state.dialog.as_mut() {
        for t in &d.plan.targets {
            if !s.processes.iter().any(|p| p.pid == t.pid) {
                d.gone.insert(t.pid);
            }
        }
    }
    state
        .tagged
        .retain(|pid| s.processes.iter().any(|p| p.pid == *pid));
    let grace = u32::try_from(state.grace_ms / 1000).unwrap_or(10);
    if let Some(st) = state.mig_staging.as_mut() {
        st.replan(&s);
    }
    if let Some(st) = state.staging.as_mut() {
        st.replan(&s, grace);
    }
    state.snapshot = Some(s);
    state.derive_rows();
    let n = state.snapshot.as_ref().map_or(0, |s| s.logical_count());
    state.gpu_sel = state.gpu_sel.min(n.saturating_sub(1));
    state.finding_sel = state
        .finding_sel
        .min(state.findings.len().saturating_sub(1));
    Vec::new()
}

/// The clock: follow a running apply through the journal it writes; otherwise read the
/// journal every 10 s (and at start), so an unfinished apply left by anyone shows in the
/// header.
pub(super) fn tick(state: &mut State, now: u64) -> Vec<Effect> {
    state.now_ms = now;
    let following = state
        .applying
        .as_ref()
        .is_some_and(|p| p.finished.is_none())
        || state.mig_applying.is_some();
    if following || now.saturating_sub(state.journal_read_ms) >= 10_000 {
        state.journal_read_ms = now;
        vec![Effect::LoadJournal]
    } else {
        Vec::new()
    }
}

/// A kill job's progress, for its dialog; when it ends, a fresh sample and journal.
pub(super) fn kill(state: &mut State, e: &KillEvent) -> Vec<Effect> {
    let done = matches!(e, KillEvent::Done { .. } | KillEvent::Refused(_));
    if let KillEvent::JournalError(j) | KillEvent::Refused(j) = e {
        log::error!("{j}");
    }
    if let Some(d) = state.dialog.as_mut() {
        d.on_event(e);
    }
    if done {
        vec![Effect::RefreshNow, Effect::LoadJournal]
    } else {
        Vec::new()
    }
}

/// A detached repartition started (what to follow), or could not.
pub(super) fn apply_started(state: &mut State, r: Result<Box<Progress>, String>) -> Vec<Effect> {
    match r {
        Ok(p) => {
            log::info!(
                "applying plan {} (detached; log {})",
                p.plan.fingerprint,
                p.log
            );
            state.applying = Some(*p);
        }
        Err(e) => log::error!("{e}"),
    }
    Vec::new()
}

/// A detached MIG apply started (its process), or could not.
pub(super) fn mig_apply_started(state: &mut State, r: Result<Detached, String>) -> Vec<Effect> {
    match r {
        Ok(d) => state.mig_process = Some(d),
        // Nothing runs, so nothing is followed: the flag goes with the failure, and the
        // journal is read at the idle pace again.
        Err(e) => {
            log::error!("{e}");
            state.notice = Some((e, state.now_ms));
            state.mig_applying = None;
            state.mig_process = None;
        }
    }
    Vec::new()
}

/// The journal as read: what the Journal view lists, and how the followed applies stand.
pub(super) fn journal(
    state: &mut State,
    mut entries: Vec<Entry>,
    bad: Vec<String>,
    unfinished: Option<String>,
    exited: Option<String>,
) -> Vec<Effect> {
    let mut effects = Vec::new();
    state.unfinished = unfinished;
    let runs = Runs::of(&entries);
    if follow_mig(state, &runs, exited.as_deref()) {
        effects.extend([Effect::Rescan, Effect::RefreshNow]);
    }
    if let Some(p) = state.applying.as_mut() {
        let was = p.finished;
        p.follow(&runs);
        if let Some(how) = exited {
            p.exited(how);
        }
        if was.is_none() && p.finished.is_some() {
            p.visible = true;
            effects = vec![Effect::Rescan, Effect::RefreshNow];
        }
    }
    entries.reverse();
    state.journal = (entries, bad);
    state.journal_runs = runs;
    state.journal_sel = state
        .journal_sel
        .min(state.journal.0.len().saturating_sub(1));
    state.derive_shown();
    effects
}

/// A MIG apply is followed through its run in the journal: done, or a failed step, or its
/// process gone with its run never closed. True when it ended (and is no longer followed).
fn follow_mig(state: &mut State, runs: &Runs, exited: Option<&str>) -> bool {
    let Some(fp) = state.mig_applying.clone() else {
        return false;
    };
    let run = runs.latest(RunKind::Mig, &fp);
    let end = run.and_then(|r| match (r.closed, &r.last) {
        (Some(Close::Done), _) => Some(format!("MIG plan {fp} applied")),
        (Some(Close::Abandoned), _) => Some(format!(
            "the run of MIG plan {fp} was closed as abandoned: it did not finish"
        )),
        (None, Some((i, key, Some(false), detail))) => Some(format!(
            "MIG plan {fp} failed at step {} ({key}): {detail}; partop mig apply … --resume continues it",
            i + 1
        )),
        _ => None,
    });
    // Its process is gone and its run never closed (it refused before journaling, or died):
    // the followed process's end is reported when no repartition is followed.
    let amd_followed = state
        .applying
        .as_ref()
        .is_some_and(|p| p.finished.is_none());
    let end = end.or_else(|| {
        exited.filter(|_| !amd_followed).map(|how| {
            format!(
                "the apply of MIG plan {fp} ended without finishing: {how}; the Journal view (7) shows what it did"
            )
        })
    });
    let Some(text) = end else {
        return false;
    };
    state.notice = Some((text, state.now_ms));
    state.mig_applying = None;
    state.mig_process = None;
    true
}
