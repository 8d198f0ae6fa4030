//! The overlays, in one place: which are open, which one is on top, what keys reach (the keymap
//! section stack), what Cancel closes, and the order they are drawn in all derive from the one
//! order below, so they can never disagree.

use super::keymap::Section;
use super::state::State;

/// An overlay of the monitor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Modal {
    /// Typing a pod's name to evict it.
    EvictAsk,
    /// Confirming a model action.
    ModelAsk,
    /// The kill dialog.
    Dialog,
    /// Staging a MIG layout (and typing its confirmation).
    MigStage,
    /// Staging a repartition (and typing its confirmation).
    Stage,
    /// An apply's progress (not exclusive: the views' keys still work).
    Progress,
    /// The help.
    Help,
    /// Typing the process filter.
    Filter,
}

impl Modal {
    /// Top first.
    pub const TOP_DOWN: [Self; 8] = [
        Self::EvictAsk,
        Self::ModelAsk,
        Self::Dialog,
        Self::MigStage,
        Self::Stage,
        Self::Progress,
        Self::Help,
        Self::Filter,
    ];

    /// Whether it is open in `s`.
    pub fn is_open(self, s: &State) -> bool {
        match self {
            Self::EvictAsk => s.evict_ask.is_some(),
            Self::ModelAsk => s.model_ask.is_some(),
            Self::Dialog => s.dialog.is_some(),
            Self::MigStage => s.mig_staging.is_some(),
            Self::Stage => s.staging.is_some(),
            Self::Progress => s.applying.as_ref().is_some_and(|p| p.visible),
            Self::Help => s.help,
            Self::Filter => s.editing_filter,
        }
    }

    /// The keymap section that takes every key while it is on top (None: not exclusive).
    pub const fn section(self) -> Option<Section> {
        match self {
            Self::EvictAsk | Self::ModelAsk | Self::Dialog => Some(Section::Dialog),
            Self::MigStage | Self::Stage => Some(Section::Stage),
            Self::Progress => None,
            Self::Help => Some(Section::Help),
            Self::Filter => Some(Section::Filter),
        }
    }
}

impl State {
    /// The open overlays, top first.
    pub fn modals(&self) -> impl DoubleEndedIterator<Item = Modal> + '_ {
        Modal::TOP_DOWN.into_iter().filter(|m| m.is_open(self))
    }

    /// The keymap sections keys are resolved in: the topmost exclusive overlay's alone, else
    /// the view's and the global one.
    pub fn sections(&self) -> Vec<Section> {
        match self.modals().find_map(Modal::section) {
            Some(s) => vec![s],
            None => vec![self.view.section(), Section::Global],
        }
    }

    /// Cancel: closes the topmost overlay that closes (a kill dialog while its signal is out
    /// does not); false when no overlay took it.
    pub fn cancel_modal(&mut self) -> bool {
        let Some(top) = self.modals().next() else {
            return false;
        };
        match top {
            Modal::EvictAsk => self.evict_ask = None,
            Modal::ModelAsk => self.model_ask = None,
            Modal::Dialog => {
                if self
                    .dialog
                    .as_ref()
                    .is_some_and(super::dialog::KillDialog::cancel)
                {
                    self.dialog = None;
                }
            }
            Modal::MigStage => self.mig_staging = None,
            Modal::Stage => self.staging = None,
            Modal::Progress => {
                if let Some(p) = self.applying.as_mut() {
                    p.visible = false;
                }
            }
            Modal::Help => self.help = false,
            Modal::Filter => {
                self.editing_filter = false;
                self.filter.clear();
                self.derive_rows();
            }
        }
        true
    }
}
