//! The kill dialog as an explicit state machine: Confirm (Cancel focused) → Running (SIGTERM
//! sent, following the grace period) → AskKill (survivors: SIGKILL only after a second
//! confirmation) → Finished. The reducer creates `Effect::Kill` only from a confirmed stage.

use super::msg::KillProgress as KillEvent;
use crate::domain::kill::{KillPlan, Sig, Target};
use std::collections::{BTreeMap, BTreeSet};

pub use super::confirm::Focus;

/// Where the dialog is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Asking to send SIGTERM.
    Confirm,
    /// A signal is out; following the targets.
    Running {
        /// Which signal.
        sig: Sig,
        /// When it was sent (ms since epoch).
        since_ms: u64,
    },
    /// SIGTERM's grace is over and these are alive: asking to send SIGKILL.
    AskKill {
        /// Still alive.
        alive: Vec<u32>,
    },
    /// Done; a summary is shown until dismissed.
    Finished {
        /// Still alive at the end (after SIGKILL: should be none).
        alive: Vec<u32>,
    },
}

/// The dialog's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillDialog {
    /// The plan it shows.
    pub plan: KillPlan,
    /// Focused button.
    pub focus: Focus,
    /// Stage.
    pub stage: Stage,
    /// Per target: what happened so far.
    pub status: BTreeMap<u32, String>,
    /// Targets that vanished from the node while the dialog was open.
    pub gone: BTreeSet<u32>,
    /// Grace period, ms.
    pub grace_ms: u64,
}

/// What activating a button asks the reducer to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    None,
    /// Close the dialog.
    Close,
    /// Signal these.
    Signal(Vec<Target>, Sig),
}

impl KillDialog {
    /// A new dialog for a plan.
    pub fn new(plan: KillPlan, grace_ms: u64) -> Self {
        Self {
            plan,
            focus: Focus::Cancel,
            stage: Stage::Confirm,
            status: BTreeMap::new(),
            gone: BTreeSet::new(),
            grace_ms,
        }
    }

    /// The label of the dangerous button, if the stage has one.
    pub fn danger_label(&self) -> Option<String> {
        let live = self
            .plan
            .targets
            .iter()
            .filter(|t| !self.gone.contains(&t.pid))
            .count();
        match &self.stage {
            Stage::Confirm if live > 0 => Some(format!("Send SIGTERM to {live}")),
            Stage::AskKill { alive } => Some(format!("Send SIGKILL to {}", alive.len())),
            _ => None,
        }
    }

    /// Tab.
    pub fn focus_next(&mut self) {
        self.focus = match (self.focus, self.danger_label()) {
            (Focus::Cancel, Some(_)) => Focus::Confirm,
            _ => Focus::Cancel,
        };
    }

    /// Enter.
    pub fn activate(&mut self, now_ms: u64) -> Action {
        match (&self.stage, self.focus) {
            (Stage::Running { .. }, _) => Action::None,
            (Stage::Finished { .. }, _) | (_, Focus::Cancel) => Action::Close,
            (Stage::Confirm, Focus::Confirm) => {
                let targets: Vec<Target> = self
                    .plan
                    .targets
                    .iter()
                    .filter(|t| !self.gone.contains(&t.pid))
                    .cloned()
                    .collect();
                if targets.is_empty() {
                    return Action::Close;
                }
                self.stage = Stage::Running {
                    sig: Sig::Term,
                    since_ms: now_ms,
                };
                self.focus = Focus::Cancel;
                Action::Signal(targets, Sig::Term)
            }
            (Stage::AskKill { alive }, Focus::Confirm) => {
                let targets: Vec<Target> = self
                    .plan
                    .targets
                    .iter()
                    .filter(|t| alive.contains(&t.pid))
                    .cloned()
                    .collect();
                self.stage = Stage::Running {
                    sig: Sig::Kill,
                    since_ms: now_ms,
                };
                self.focus = Focus::Cancel;
                Action::Signal(targets, Sig::Kill)
            }
        }
    }

    /// Esc: closes unless a signal is in flight.
    pub fn cancel(&self) -> bool {
        !matches!(self.stage, Stage::Running { .. })
    }

    /// Progress from the executor.
    pub fn on_event(&mut self, e: &KillEvent) {
        match e {
            KillEvent::Signalled { sig, results } => {
                for (pid, why_not) in results {
                    let text = why_not
                        .clone()
                        .unwrap_or_else(|| format!("{} sent", sig.name()));
                    self.status.insert(*pid, text);
                }
            }
            KillEvent::Exited(pid) => {
                self.status.insert(*pid, "exited".into());
            }
            KillEvent::Done { sig, alive } => {
                for pid in alive {
                    self.status
                        .insert(*pid, format!("still alive after {}", sig.name()));
                }
                self.stage = if *sig == Sig::Term && !alive.is_empty() {
                    Stage::AskKill {
                        alive: alive.clone(),
                    }
                } else {
                    Stage::Finished {
                        alive: alive.clone(),
                    }
                };
                self.focus = Focus::Cancel;
            }
            KillEvent::JournalError(_) => {}
            KillEvent::Refused(why) => {
                for t in &self.plan.targets {
                    self.status.insert(t.pid, format!("nothing sent: {why}"));
                }
                self.stage = Stage::Finished { alive: Vec::new() };
                self.focus = Focus::Cancel;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dialog() -> KillDialog {
        let plan = KillPlan {
            targets: vec![
                Target {
                    pid: 10,
                    ..Target::default()
                },
                Target {
                    pid: 11,
                    ..Target::default()
                },
            ],
            refused: vec![],
        };
        KillDialog::new(plan, 10_000)
    }

    #[test]
    fn cancel_is_focused_and_enter_on_it_closes() {
        let mut d = dialog();
        assert_eq!(d.focus, Focus::Cancel);
        assert_eq!(d.activate(0), Action::Close);
    }

    #[test]
    fn term_then_second_confirmation_for_kill() {
        let mut d = dialog();
        d.gone.insert(11);
        d.focus_next();
        let Action::Signal(t, Sig::Term) = d.activate(5) else {
            panic!()
        };
        assert_eq!(
            t.iter().map(|t| t.pid).collect::<Vec<_>>(),
            vec![10],
            "a target that left is skipped"
        );
        assert!(!d.cancel(), "a signal in flight cannot be cancelled");
        d.on_event(&KillEvent::Done {
            sig: Sig::Term,
            alive: vec![10],
        });
        assert_eq!(d.stage, Stage::AskKill { alive: vec![10] });
        assert_eq!(
            d.focus,
            Focus::Cancel,
            "the second confirmation starts on Cancel too"
        );
        d.focus_next();
        let Action::Signal(t, Sig::Kill) = d.activate(6) else {
            panic!()
        };
        assert_eq!(t.len(), 1);
        d.on_event(&KillEvent::Done {
            sig: Sig::Kill,
            alive: vec![],
        });
        assert_eq!(d.stage, Stage::Finished { alive: vec![] });
        assert_eq!(d.activate(7), Action::Close);
    }
}
