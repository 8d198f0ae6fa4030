//! Confirming the eviction of a pod that holds a reclaimable partition (the Findings view's
//! action): the pod as the API server had it when the ask opened (its UID is what the
//! confirmation is bound to), and the pod's name typed exactly. Sits between the reducer
//! (`update::findings`) and the effect runner, which verifies the pod again and evicts it.

use super::confirm::{Confirming, Typed};
use ratatui::crossterm::event::KeyEvent;

/// A pod on this node holding a partition, as a finding names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAt {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// The Kubernetes node (the host name: the kubelet's default node name).
    pub node: String,
    /// The partition it holds (BDF with partition function).
    pub gpu: String,
    /// Its logical GPU number.
    pub gpu_id: u32,
}

impl PodAt {
    /// `namespace/name`, as kubectl names a pod.
    pub fn label(&self) -> String {
        format!("{}/{}", self.namespace, self.pod)
    }
}

/// An eviction waiting for the operator to type the pod's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvictAsk {
    /// The pod.
    pub at: PodAt,
    /// Its UID when the ask opened: the Eviction's precondition, checked again at confirm.
    pub uid: String,
    /// What is typed, bound to the UID.
    pub confirming: Confirming,
}

impl EvictAsk {
    /// The ask for `at`, whose UID the API server gave as `uid`.
    pub fn new(at: PodAt, uid: String) -> Self {
        Self {
            confirming: Confirming {
                typed: String::new(),
                fingerprint: uid.clone(),
                notice: None,
            },
            at,
            uid,
        }
    }

    /// The title (the pod's words escaped: they come from the kubelet).
    pub fn title(&self) -> String {
        format!(
            "Evict pod {}?",
            crate::domain::text::escape_controls(&self.at.label())
        )
    }

    /// What will be done, line by line (every outside string escaped).
    pub fn lines(&self) -> Vec<String> {
        let esc = |s: &str| crate::domain::text::escape_controls(s).into_owned();
        vec![
            format!(
                "pod {} (UID {}) on node {} holds GPU {} ({}), idle over the reclaim window",
                esc(&self.at.label()),
                esc(&self.uid),
                esc(&self.at.node),
                self.at.gpu_id,
                esc(&self.at.gpu)
            ),
            "evict: POST pods/eviction (the Eviction API, the UID as precondition); then wait until it is gone".into(),
            "its PodDisruptionBudget is honoured: a refusal is retried 120 s and named, never bypassed; never a delete".into(),
            "checked again when you confirm: the same UID, still on this node, still holding that GPU".into(),
        ]
    }

    /// The word to type.
    pub fn word(&self) -> &str {
        &self.at.pod
    }

    /// A key typed into the confirmation.
    pub fn key(&mut self, k: &KeyEvent) -> Typed {
        let word = self.at.pod.clone();
        let uid = self.uid.clone();
        self.confirming.key(k, &word, &uid)
    }
}

/// How an eviction goes, in the monitor's own terms (the runner converts the executor's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictProgress {
    /// A PodDisruptionBudget refused it; retried (the budget and the server's words).
    Blocked(String),
    /// Done: what was done, or why not.
    Done(Result<String, String>),
}
