//! Text that came from outside (process names, command lines, users, tool output) made safe to
//! print: control characters, escape sequences included, are shown as visible escapes, so a
//! process named `\e]0;owned\a` can neither retitle nor repaint the operator's terminal, in the
//! TUI, the CLI, the JSON snapshot or the journal. Pure.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `s` with every control character (C0, DEL, C1) written as `\xNN` / `\u{NNNN}`; tabs become
/// a space. Text without one is returned as it is, without copying.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\t' => o.push(' '),
            c if c.is_control() && u32::from(c) < 0x100 => {
                let _ = write!(o, "\\x{:02x}", u32::from(c));
            }
            c if c.is_control() => {
                let _ = write!(o, "\\u{{{:04x}}}", u32::from(c));
            }
            c => o.push(c),
        }
    }
    Cow::Owned(o)
}

/// `s` as one word a POSIX shell reads back unchanged: as it is when every character is plain
/// (letters, digits, `_./:=@%+,-`), else in single quotes (a `'` inside written `'\''`). For
/// commands partop prints to be pasted (a resume), whatever the paths hold.
pub fn shell_word(s: &str) -> Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./:=@%+,-".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(format!("'{}'", s.replace('\'', "'\\''")))
}

/// Bytes as GiB, the one memory convention everywhere (tables, plans, findings, advice): one
/// decimal below 100 GiB, none above (`23.5`, `192`).
pub fn gib(b: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let g = b as f64 / f64::from(1u32 << 30);
    if g >= 100.0 {
        format!("{g:.0}")
    } else {
        format!("{g:.1}")
    }
}

/// [`escape_controls`] on an optional owned string, in place.
pub fn sanitize(s: &mut Option<String>) {
    if let Some(v) = s
        && let Cow::Owned(o) = escape_controls(v)
    {
        *v = o;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_terminal_sequences_and_keeps_plain_text() {
        assert_eq!(escape_controls("vllm"), "vllm");
        assert!(matches!(escape_controls("vllm"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("\u{1b}]0;owned\u{7}x\u{9b}2J"),
            "\\x1b]0;owned\\x07x\\x9b2J"
        );
        assert_eq!(escape_controls("a\tb\nc"), "a b\\x0ac");
    }

    #[test]
    fn shell_words_read_back_as_written() {
        assert_eq!(shell_word("/tmp/a-b_c.json"), "/tmp/a-b_c.json");
        assert_eq!(shell_word("/tmp/my plan.json"), "'/tmp/my plan.json'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word("$(reboot)"), "'$(reboot)'");
        assert_eq!(shell_word(""), "''");
    }
}
