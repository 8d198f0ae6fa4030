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

/// `word` as a POSIX shell reads it back as one word, unchanged: left bare when it holds only
/// characters no shell treats specially, else single-quoted (a `'` inside written `'\''`). The
/// one quoting for every command line partop shows or hands to a shell (ssh's remote command,
/// a launch in a confirmation and a dry run), so what is pasted or run is what was meant.
pub fn shell_quote(word: &str) -> Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./-_".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return Cow::Borrowed(word);
    }
    Cow::Owned(format!("'{}'", word.replace('\'', "'\\''")))
}

/// Words joined into one shell command line, each [`shell_quote`]d.
pub fn shell_line<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w.as_ref()).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
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
}
