//! Key notation: `q`, `ctrl-c`, `pageup`, sequences like `g g`; parsed from keymap files and
//! matched against crossterm key events.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// A key: code plus ctrl/alt (shift is folded into the character or `backtab`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Key code.
    pub code: KeyCodeOrd,
    /// Ctrl held.
    pub ctrl: bool,
    /// Alt held.
    pub alt: bool,
}

/// An orderable key code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyCodeOrd {
    /// A character.
    Char(char),
    /// A function key.
    F(u8),
    /// A named key.
    Named(&'static str),
}

const NAMED: &[(&str, KeyCode)] = &[
    ("enter", KeyCode::Enter),
    ("esc", KeyCode::Esc),
    ("tab", KeyCode::Tab),
    ("backtab", KeyCode::BackTab),
    ("backspace", KeyCode::Backspace),
    ("up", KeyCode::Up),
    ("down", KeyCode::Down),
    ("left", KeyCode::Left),
    ("right", KeyCode::Right),
    ("pageup", KeyCode::PageUp),
    ("pagedown", KeyCode::PageDown),
    ("home", KeyCode::Home),
    ("end", KeyCode::End),
    ("delete", KeyCode::Delete),
];

impl Key {
    /// From a terminal event.
    pub fn from_event(e: &KeyEvent) -> Option<Self> {
        let code = match e.code {
            KeyCode::Char(' ') => KeyCodeOrd::Named("space"),
            KeyCode::Char(c) => KeyCodeOrd::Char(c),
            KeyCode::F(n) => KeyCodeOrd::F(n),
            other => KeyCodeOrd::Named(NAMED.iter().find(|(_, k)| *k == other)?.0),
        };
        Some(Self {
            code,
            ctrl: e.modifiers.contains(KeyModifiers::CONTROL),
            alt: e.modifiers.contains(KeyModifiers::ALT),
        })
    }

    /// Parses `ctrl-c`, `G`, `f5`, `pagedown`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (mut ctrl, mut alt) = (false, false);
        let mut rest = s;
        loop {
            if let Some(r) = rest.strip_prefix("ctrl-") {
                ctrl = true;
                rest = r;
            } else if let Some(r) = rest.strip_prefix("alt-") {
                alt = true;
                rest = r;
            } else if let Some(r) = rest.strip_prefix("shift-") {
                // shift-tab is backtab; shift-x is X.
                rest = r;
                if rest == "tab" {
                    return Ok(Self {
                        code: KeyCodeOrd::Named("backtab"),
                        ctrl,
                        alt,
                    });
                }
                let mut c = rest.chars();
                if let (Some(ch), None) = (c.next(), c.next()) {
                    return Ok(Self {
                        code: KeyCodeOrd::Char(ch.to_ascii_uppercase()),
                        ctrl,
                        alt,
                    });
                }
            } else {
                break;
            }
        }
        let mut chars = rest.chars();
        let code = match (chars.next(), chars.next()) {
            (Some(c), None) => KeyCodeOrd::Char(c),
            _ if rest == "space" => KeyCodeOrd::Named("space"),
            _ if rest.starts_with('f')
                && rest[1..].parse::<u8>().is_ok_and(|n| (1..=12).contains(&n)) =>
            {
                KeyCodeOrd::F(rest[1..].parse().unwrap_or(1))
            }
            _ => KeyCodeOrd::Named(
                NAMED
                    .iter()
                    .find(|(n, _)| *n == rest)
                    .map(|(n, _)| *n)
                    .ok_or_else(|| format!("unknown key {s:?}"))?,
            ),
        };
        Ok(Self { code, ctrl, alt })
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.ctrl {
            f.write_str("ctrl-")?;
        }
        if self.alt {
            f.write_str("alt-")?;
        }
        match self.code {
            KeyCodeOrd::Char(c) => write!(f, "{c}"),
            KeyCodeOrd::F(n) => write!(f, "f{n}"),
            KeyCodeOrd::Named(n) => f.write_str(n),
        }
    }
}

/// Parses a space-separated sequence.
pub fn parse_seq(s: &str) -> Result<Vec<Key>, String> {
    let seq: Result<Vec<Key>, String> = s.split_whitespace().map(Key::parse).collect();
    let seq = seq?;
    if seq.is_empty() {
        return Err("empty key".into());
    }
    Ok(seq)
}
