//! `/`: one filter for every list view, and one way of typing it (`typed`). It keeps the rows that show the text typed: matched
//! case-insensitively against the words the row shows on screen (so `/DOWN` finds the word
//! DOWN, `/warn` a WARN finding), Enter keeps it, Esc clears it. It belongs to the view it was
//! typed in. Computed in the reducer when the list or the filter changes (`State::derive_shown`),
//! never while drawing; the views draw `State::order`, and the selection stays an index into the
//! whole list, so what acts on it (Enter, staging, tagging) is unchanged by filtering.

use super::state::{State, View};
use crate::report::journal::{who, words};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// A key typed while the filter is being edited, in any view that has one (the monitor's
/// lists, the fleet, the cluster): Enter keeps it, Esc clears it, Backspace deletes, a
/// printable character (not Ctrl-held, not a control character) is text. True when it was
/// one of these (the caller re-derives what the filter keeps).
pub fn typed(filter: &mut String, editing: &mut bool, k: &KeyEvent) -> bool {
    match k.code {
        KeyCode::Enter => *editing = false,
        KeyCode::Esc => {
            *editing = false;
            filter.clear();
        }
        KeyCode::Backspace => {
            filter.pop();
        }
        KeyCode::Char(c) if !c.is_control() && !k.modifiers.contains(KeyModifiers::CONTROL) => {
            filter.push(c);
        }
        _ => return false,
    }
    true
}

/// Whether a row showing these words stays: the filter found in them, ignoring case, as they
/// read on screen (joined by spaces). An empty filter keeps every row.
pub fn keeps(filter: &str, words: &[String]) -> bool {
    filter.is_empty()
        || words
            .join(" ")
            .to_lowercase()
            .contains(&filter.to_lowercase())
}

/// The views `/` filters in place (any other view sends `/` to Processes).
pub const FILTERED: [View; 6] = [
    View::Gpus,
    View::Processes,
    View::Models,
    View::Findings,
    View::Journal,
    View::History,
];

/// Whether view `v`'s filter hides rows of the list its selection moves over (Processes has
/// derived rows instead; History's filter keeps processes, its selection steps through GPUs).
pub const fn filters_selection(v: View) -> bool {
    matches!(
        v,
        View::Gpus | View::Models | View::Findings | View::Journal
    )
}

impl State {
    /// The filter of view `v`: its text when it was typed there, else none.
    pub fn filter_of(&self, v: View) -> &str {
        if self.filter_view == v {
            &self.filter
        } else {
            ""
        }
    }

    /// The rows of view `v`'s list in the order drawn, as indices into its whole list: those
    /// its filter keeps. (Processes has its derived rows instead.)
    pub fn order(&self, v: View) -> Vec<usize> {
        if self.filter_of(v).is_empty() || !filters_selection(v) {
            (0..self.len_of(v)).collect()
        } else {
            self.shown.clone()
        }
    }

    /// Recomputes which rows the filter keeps in its view, and moves the selection onto a kept
    /// row when it is on a hidden one.
    pub fn derive_shown(&mut self) {
        let v = self.filter_view;
        if !filters_selection(v) || self.filter.is_empty() {
            self.shown.clear();
            return;
        }
        let all = self.row_words(v);
        self.shown = (0..all.len())
            .filter(|i| keeps(&self.filter, &all[*i]))
            .collect();
        let shown = std::mem::take(&mut self.shown);
        if let (Some(sel), Some(first)) = (self.sel_mut_of(v), shown.first())
            && !shown.contains(sel)
        {
            *sel = *first;
        }
        self.shown = shown;
    }

    /// Every row of view `v`'s list, as the words it shows.
    pub fn row_words(&self, v: View) -> Vec<Vec<String>> {
        let Some(snap) = self.snapshot.as_deref() else {
            return if v == View::Journal {
                self.journal_words()
            } else {
                Vec::new()
            };
        };
        match v {
            View::Gpus => snap
                .logical()
                .map(|(g, l)| super::view::gpus::words(self, g, l))
                .collect(),
            View::Models => snap.models.iter().map(super::view::models::words).collect(),
            View::Findings => self
                .findings
                .iter()
                .map(|f| super::view::findings::words(f, self.now_ms))
                .collect(),
            View::Journal => self.journal_words(),
            _ => Vec::new(),
        }
    }

    /// The journal list's rows: time, who, and the entry said as a sentence.
    fn journal_words(&self) -> Vec<Vec<String>> {
        let entries = &self.journal.0;
        entries
            .iter()
            .zip(words(entries, &self.journal_runs))
            .map(|(e, sentence)| {
                vec![
                    e.at.get(5..19).unwrap_or(&e.at).replace('T', " "),
                    who(e),
                    sentence,
                ]
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::typed;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    /// Every character of the first 0x3000 code points (ASCII and its control characters,
    /// C1 controls, Latin, CJK punctuation) under each modifier: a printable one without Ctrl
    /// is text, nothing else enters the filter; Enter, Esc and Backspace edit it; other keys
    /// are not the filter's.
    #[test]
    fn typing_a_filter_takes_printable_text_only() {
        let mods = [
            KeyModifiers::NONE,
            KeyModifiers::SHIFT,
            KeyModifiers::ALT,
            KeyModifiers::CONTROL,
            KeyModifiers::CONTROL | KeyModifiers::SHIFT,
        ];
        let mut cases = 0;
        for c in (0u32..0x3000).filter_map(char::from_u32) {
            for m in mods {
                let (mut f, mut editing) = ("ab".to_string(), true);
                let took = typed(&mut f, &mut editing, &KeyEvent::new(KeyCode::Char(c), m));
                let text = !c.is_control() && !m.contains(KeyModifiers::CONTROL);
                assert_eq!(took, text, "{c:?} {m:?}");
                assert_eq!(f, if text { format!("ab{c}") } else { "ab".into() });
                assert!(editing);
                cases += 1;
            }
        }
        let key = |code| KeyEvent::new(code, KeyModifiers::NONE);
        let (mut f, mut editing) = ("ab".to_string(), true);
        assert!(typed(&mut f, &mut editing, &key(KeyCode::Backspace)));
        assert_eq!((f.as_str(), editing), ("a", true));
        assert!(typed(&mut f, &mut editing, &key(KeyCode::Enter)));
        assert_eq!((f.as_str(), editing), ("a", false), "Enter keeps it");
        editing = true;
        assert!(typed(&mut f, &mut editing, &key(KeyCode::Esc)));
        assert_eq!((f.as_str(), editing), ("", false), "Esc clears it");
        for code in [KeyCode::Up, KeyCode::Tab, KeyCode::F(1), KeyCode::Delete] {
            assert!(!typed(&mut f, &mut editing, &key(code)), "{code:?}");
        }
        assert!(cases > 50_000, "{cases} characters typed");
    }
}
