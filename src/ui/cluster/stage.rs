//! A rollout staged from the live cluster view (issue 26, item 2): between the view's tags and
//! `exec::rollout` run with the cluster engine. The layout word typed, the plan from the
//! planner of `fleet --kubernetes plan` (computed off the loop, shown as that command prints
//! it, refused nodes with their reasons), the set's fingerprint typed (`ui::confirm`, the
//! confirmation of the fleet and of one node), then each node's progress. Pure: keys in,
//! effects out; the fleet's `Phase` and `Staged` are reused as they are.

use super::msg::ClusterEffect;
use crate::domain::cluster_rollout::{Target, parse_layout};
use crate::ui::confirm::{Confirming, Typed};
use crate::ui::fleet::{Phase, Staged};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// A planned cluster set, as the overlay shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterPlanned {
    /// The saved set (None: nothing to roll out, every node refused or already there).
    pub staged: Option<Staged>,
    /// The plan as `fleet --kubernetes plan` prints it (per node: engine, evictions and the
    /// budgets allowing them now, capacity after; the DCM profile's diff; refused nodes).
    pub lines: Vec<String>,
    /// Nodes in the set, in rollout order.
    pub nodes: Vec<String>,
    /// Nodes refused, each with its reason (left out of the set, said).
    pub refused: Vec<String>,
}

/// What a rollout says about a node (the executor's `Progress`, converted where it runs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RolloutNote {
    /// The node begins (fresh, or resumed at its step).
    Node {
        /// Its name.
        node: String,
        /// How it begins, in words.
        how: String,
    },
    /// A step said something (done, or a budget's refusal retried).
    Step {
        /// Its name.
        node: String,
        /// What.
        text: String,
    },
    /// Every step done.
    Done {
        /// Its name.
        node: String,
    },
    /// It failed: its step, reason and undo.
    Failed {
        /// Its name.
        node: String,
        /// What failed, where, and what is left with its undo.
        error: String,
    },
}

/// Where one node of the rollout is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Not begun.
    Waiting,
    /// Running; its last word.
    Running(String),
    /// Every step done.
    Done,
    /// Failed, with its reason.
    Failed(String),
}

/// A rollout staged on the tagged nodes, from the layout typed to its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterStage {
    /// The nodes tagged, by name.
    pub nodes: Vec<String>,
    /// The layout typed: `<compute>_<memory>` (through DCM) or a MIG config name.
    pub word: String,
    /// Where it is (the fleet's phases).
    pub phase: Phase,
    /// The plan, once computed.
    pub planned: Option<ClusterPlanned>,
    /// The set's fingerprint being typed.
    pub confirming: Option<Confirming>,
    /// Each node of the set and where it is, in rollout order.
    pub progress: Vec<(String, NodeState)>,
    /// What the rollout said, line by line (bounded).
    pub log: Vec<String>,
    /// Why the last key did nothing.
    pub notice: Option<String>,
    /// The plan's first line shown (a plan of many nodes is longer than the screen).
    pub scroll: usize,
}

impl ClusterStage {
    /// Lines kept of what the rollout said.
    pub const MAX_LOG: usize = 4000;

    /// A new stage on `nodes`, its layout not typed yet.
    pub const fn new(nodes: Vec<String>) -> Self {
        Self {
            nodes,
            word: String::new(),
            phase: Phase::Choose,
            planned: None,
            confirming: None,
            progress: Vec::new(),
            log: Vec::new(),
            notice: None,
            scroll: 0,
        }
    }

    /// Planning or the rollout runs: the view cannot be left.
    pub const fn busy(&self) -> bool {
        matches!(self.phase, Phase::Planning | Phase::Rolling)
    }

    /// What the typed word asks for: a word that reads `<compute>_<memory>` is an AMD layout
    /// through DCM, any other a MIG-manager config name (the overlay says which before Enter).
    pub fn target(&self) -> Option<Target> {
        let w = self.word.trim();
        if w.is_empty() {
            return None;
        }
        Some(match parse_layout(w) {
            Ok((compute, memory)) => Target::Layout { compute, memory },
            Err(_) => Target::MigConfig {
                name: w.to_string(),
            },
        })
    }

    /// The plan came back.
    pub fn planned(&mut self, r: Result<ClusterPlanned, String>) {
        match r {
            Ok(p) => {
                self.progress = p
                    .nodes
                    .iter()
                    .map(|n| (n.clone(), NodeState::Waiting))
                    .collect();
                self.planned = Some(p);
                self.phase = Phase::Review;
            }
            Err(e) => self.phase = Phase::Done(Err(format!("nothing was planned: {e}"))),
        }
    }

    /// A node's progress.
    pub fn note(&mut self, n: RolloutNote) {
        let (node, state, line) = match n {
            RolloutNote::Node { node, how } => {
                let l = format!("{node}: {how}");
                (node, NodeState::Running(how), l)
            }
            RolloutNote::Step { node, text } => {
                let l = format!("{node}: {text}");
                (node, NodeState::Running(text), l)
            }
            RolloutNote::Done { node } => {
                let l = format!("{node}: done");
                (node, NodeState::Done, l)
            }
            RolloutNote::Failed { node, error } => {
                let l = format!("{node}: FAILED {error}");
                (node, NodeState::Failed(error), l)
            }
        };
        match self.progress.iter_mut().find(|(n, _)| *n == node) {
            Some(p) => p.1 = state,
            None => self.progress.push((node, state)),
        }
        self.log.push(line);
        let over = self.log.len().saturating_sub(Self::MAX_LOG);
        self.log.drain(..over);
    }

    /// The rollout ended.
    pub fn rolled_out(&mut self, r: Result<(), String>) {
        self.phase = Phase::Done(r);
    }
}

/// What a key does to the stage; `close` set when the stage is over.
pub struct StageKey {
    /// Effects to run.
    pub effects: Vec<ClusterEffect>,
    /// The stage closes.
    pub close: bool,
}

/// Keys while a rollout is staged: the layout typed and Enter plans; Enter on the plan asks
/// for the set's fingerprint, typed exactly (the one confirmation of `ui::confirm`), which rolls
/// it out; Esc steps back. Planning and the rollout cannot be left while they run.
pub fn key(st: &mut ClusterStage, k: &KeyEvent) -> StageKey {
    let mut out = StageKey {
        effects: Vec::new(),
        close: false,
    };
    st.notice = None;
    match st.phase.clone() {
        Phase::Choose => match k.code {
            KeyCode::Esc => out.close = true,
            KeyCode::Backspace => {
                st.word.pop();
            }
            KeyCode::Enter => match st.target() {
                None => {
                    st.notice = Some(
                        "type the layout: <compute>_<memory> (cpx_nps4, through DCM) or a MIG config name (through the MIG manager)"
                            .into(),
                    );
                }
                Some(target) => {
                    st.phase = Phase::Planning;
                    out.effects.push(ClusterEffect::Plan {
                        nodes: st.nodes.clone(),
                        target,
                    });
                }
            },
            KeyCode::Char(c)
                if !k.modifiers.contains(KeyModifiers::CONTROL)
                    && !c.is_control()
                    && st.word.chars().count() < 63 =>
            {
                st.word.push(c);
            }
            _ => {}
        },
        Phase::Planning | Phase::Rolling => {
            st.notice = Some(if st.phase == Phase::Planning {
                "the planner is reading the cluster; wait for the plan".into()
            } else {
                "the rollout runs node by node; it stops only at a failure (the fleet journal records every step)".into()
            });
        }
        Phase::Review if st.confirming.is_none() && scrolled(st, k.code) => {}
        Phase::Review => {
            let Some(set) = st.planned.as_ref().and_then(|p| p.staged.clone()) else {
                // Nothing to roll out: the plan said why.
                out.close = matches!(k.code, KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q'));
                return out;
            };
            match st.confirming.as_mut() {
                None => match k.code {
                    KeyCode::Enter => {
                        st.confirming = Some(Confirming {
                            typed: String::new(),
                            fingerprint: set.fingerprint.clone(),
                            notice: None,
                        });
                    }
                    KeyCode::Esc | KeyCode::Char('q') => out.close = true,
                    _ => {}
                },
                Some(c) => match c.key(k, &set.fingerprint, &set.fingerprint) {
                    Typed::Cancel => st.confirming = None,
                    Typed::Pending => {}
                    Typed::Confirmed => {
                        st.confirming = None;
                        st.phase = Phase::Rolling;
                        st.log.push(format!("rolling out set {}", set.fingerprint));
                        out.effects.push(ClusterEffect::Rollout(set));
                    }
                },
            }
        }
        Phase::Done(_) => {
            out.close = matches!(k.code, KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q'));
        }
    }
    out
}

/// The plan scrolled by a key (Up, Down, PgUp, PgDn, Home); false for any other key.
fn scrolled(st: &mut ClusterStage, k: KeyCode) -> bool {
    st.scroll = match k {
        KeyCode::Down => st.scroll.saturating_add(1),
        KeyCode::Up => st.scroll.saturating_sub(1),
        KeyCode::PageDown => st.scroll.saturating_add(10),
        KeyCode::PageUp => st.scroll.saturating_sub(10),
        KeyCode::Home => 0,
        _ => return false,
    };
    // Never past the plan's last line: Up moves from what is shown.
    let lines = st.planned.as_ref().map_or(0, |p| p.lines.len());
    st.scroll = st.scroll.min(lines.saturating_sub(1));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    #[test]
    fn the_word_typed_says_the_engine() {
        let mut st = ClusterStage::new(vec!["a".into()]);
        assert!(key(&mut st, &k(KeyCode::Enter)).effects.is_empty());
        assert!(
            st.notice.is_some(),
            "Enter with nothing typed says what to type"
        );
        for c in "cpx_nps4".chars() {
            key(&mut st, &k(KeyCode::Char(c)));
        }
        assert!(matches!(st.target(), Some(Target::Layout { .. })));
        st.word = "all-1g.10gb".into();
        assert_eq!(
            st.target(),
            Some(Target::MigConfig {
                name: "all-1g.10gb".into()
            })
        );
        let e = key(&mut st, &k(KeyCode::Enter)).effects;
        assert!(matches!(&e[..], [ClusterEffect::Plan { nodes, .. }] if nodes == &["a"]));
        assert!(st.busy());
        // While planning, no key leaves.
        assert!(!key(&mut st, &k(KeyCode::Esc)).close);
    }

    #[test]
    fn a_set_rolls_out_only_with_its_fingerprint_typed() {
        let mut st = ClusterStage::new(vec!["a".into(), "b".into()]);
        st.phase = Phase::Planning;
        st.planned(Ok(ClusterPlanned {
            staged: Some(Staged {
                fingerprint: "f00d".into(),
                file: "/x".into(),
            }),
            lines: vec![],
            nodes: vec!["a".into()],
            refused: vec!["b: no manager".into()],
        }));
        assert_eq!(st.progress, [("a".to_string(), NodeState::Waiting)]);
        key(&mut st, &k(KeyCode::Enter));
        for c in "f00".chars() {
            key(&mut st, &k(KeyCode::Char(c)));
        }
        assert!(
            key(&mut st, &k(KeyCode::Enter)).effects.is_empty(),
            "a wrong word"
        );
        key(&mut st, &k(KeyCode::Char('d')));
        let e = key(&mut st, &k(KeyCode::Enter)).effects;
        assert!(matches!(&e[..], [ClusterEffect::Rollout(s)] if s.fingerprint == "f00d"));
        st.note(RolloutNote::Failed {
            node: "a".into(),
            error: "failed at wait_state".into(),
        });
        assert!(matches!(st.progress[0].1, NodeState::Failed(_)));
        st.rolled_out(Err("stopped".into()));
        assert!(key(&mut st, &k(KeyCode::Esc)).close);
    }

    #[test]
    fn a_plan_with_nothing_to_roll_out_only_closes() {
        let mut st = ClusterStage::new(vec!["b".into()]);
        st.planned(Ok(ClusterPlanned {
            staged: None,
            lines: vec![],
            nodes: vec![],
            refused: vec!["b: no manager".into()],
        }));
        assert!(key(&mut st, &k(KeyCode::Char('x'))).effects.is_empty());
        assert!(st.confirming.is_none());
        assert!(key(&mut st, &k(KeyCode::Enter)).close);
    }
}
