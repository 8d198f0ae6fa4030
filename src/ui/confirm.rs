//! The one confirmation of a dangerous action, in its two forms: a choice between Cancel and
//! the dangerous button, Cancel focused by default, for a kill and a model action; and a word
//! typed exactly (the host name, or `yes`), bound to the fingerprint of the plan it confirms
//! and void when the plan changes, for a repartition and a MIG layout. The reducer creates a
//! dangerous effect only where one of these says confirmed.

/// Which button has focus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Focus {
    /// Cancel (always the default).
    Cancel,
    /// The dangerous button.
    Confirm,
}

impl Focus {
    /// Tab, arrows: the other button.
    pub const fn toggled(self) -> Self {
        match self {
            Self::Cancel => Self::Confirm,
            Self::Confirm => Self::Cancel,
        }
    }
}

/// The confirmation being typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confirming {
    /// What has been typed.
    pub typed: String,
    /// The plan's fingerprint when confirmation began.
    pub fingerprint: String,
    /// Why it must be confirmed again, if the plan changed.
    pub notice: Option<String>,
}

/// What a key did to a confirmation being typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Typed {
    /// Esc: back to the plan.
    Cancel,
    /// Enter with the required word typed and the plan unchanged.
    Confirmed,
    /// Anything else (typing, or Enter with the wrong word: the notice says so).
    Pending,
}

impl Confirming {
    /// Applies a key: `word` must be typed exactly, and the plan must still be `fingerprint`
    /// (AMD repartitions and MIG layouts confirm the same way).
    pub fn key(
        &mut self,
        k: &ratatui::crossterm::event::KeyEvent,
        word: &str,
        fingerprint: &str,
    ) -> Typed {
        use ratatui::crossterm::event::{KeyCode, KeyModifiers};
        match k.code {
            KeyCode::Esc => return Typed::Cancel,
            KeyCode::Backspace => {
                self.typed.pop();
            }
            KeyCode::Char(ch) if !k.modifiers.contains(KeyModifiers::CONTROL) => {
                self.typed.push(ch);
            }
            KeyCode::Enter => {
                if self.typed == word && self.fingerprint == fingerprint {
                    return Typed::Confirmed;
                }
                self.notice = Some(format!("type {word} exactly to apply"));
            }
            _ => {}
        }
        Typed::Pending
    }
}
