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

/// Escapes every string of `t`, whatever its type (a snapshot, a fleet row, a journal entry):
/// the one sanitiser for a whole document from outside, so a field added later can never be
/// missed. Free when nothing needs escaping (one serialization, scanned); otherwise the value is
/// rebuilt through JSON with every string and every map key escaped. Returns whether anything
/// changed; a value that does not come back from JSON (a non-finite number where the type has
/// no N/A) is left as it was and `Err` says why.
pub fn escape_all<T>(t: &mut T) -> Result<bool, String>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let json = serde_json::to_string(t).map_err(|e| e.to_string())?;
    if !json_has_controls(&json) {
        return Ok(false);
    }
    let mut v: serde_json::Value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    escape_value(&mut v);
    *t = serde_json::from_value(v).map_err(|e| e.to_string())?;
    Ok(true)
}

/// Escapes control characters in every string and every object key of `v`.
pub fn escape_value(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s) => {
            if let Cow::Owned(o) = escape_controls(s) {
                *s = o;
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(escape_value),
        serde_json::Value::Object(m) => {
            if m.keys().any(|k| k.chars().any(char::is_control)) {
                let old = std::mem::take(m);
                for (k, mut x) in old {
                    escape_value(&mut x);
                    m.insert(escape_controls(&k).into_owned(), x);
                }
            } else {
                m.values_mut().for_each(escape_value);
            }
        }
        _ => {}
    }
}

/// Whether JSON text holds a control character in any string once decoded: an escape for one
/// (`\n`, `\t`, `\r`, `\b`, `\f`, `\u0000`-`\u001f`, `\u007f`-`\u009f`) or a raw DEL or C1
/// character (JSON allows those unescaped).
pub fn json_has_controls(json: &str) -> bool {
    scan_controls(json, false)
}

/// [`json_has_controls`], not counting newlines and tabs (multi-line tool output a journal
/// keeps as it was).
pub fn json_has_controls_besides_newlines(json: &str) -> bool {
    scan_controls(json, true)
}

fn scan_controls(json: &str, newlines_ok: bool) -> bool {
    let b = json.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                match b.get(i + 1) {
                    Some(b'n' | b't') if newlines_ok => {}
                    Some(b'n' | b't' | b'r' | b'b' | b'f') => return true,
                    Some(b'u') => {
                        let code = json
                            .get(i + 2..i + 6)
                            .and_then(|h| u32::from_str_radix(h, 16).ok());
                        let allowed = |c: u32| newlines_ok && (c == 0x0a || c == 0x09);
                        if code.is_some_and(|c| {
                            (c < 0x20 || (0x7f..=0x9f).contains(&c)) && !allowed(c)
                        }) {
                            return true;
                        }
                    }
                    _ => {}
                }
                i += 2;
            }
            0x7f => return true,
            // C1 in UTF-8: C2 80 to C2 9F.
            0xc2 if b.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)) => return true,
            c if c < 0x20 => return true,
            _ => i += 1,
        }
    }
    false
}

/// Levenshtein distance between two short names.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != *cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Whether `short` abbreviates `long`: same first letter, its letters in order (`procs` for
/// `processes`, `cfg` for `config`).
fn abbreviates(short: &str, long: &str) -> bool {
    let mut rest = long.chars();
    short.chars().next() == long.chars().next() && short.chars().all(|c| rest.any(|l| l == c))
}

/// The known name a mistyped `word` most likely meant, for "did you mean": an abbreviation or
/// a prefix first (`procs` means `processes`, not `gpus`), else the fewest edits to the whole
/// name or to its first dotted part (`tabel` means `table.header`); none when nothing is close.
pub fn nearest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let w = word.to_lowercase();
    let score = |k: &str| -> Option<usize> {
        if k == w {
            return Some(0);
        }
        let head = k.split('.').next().unwrap_or(k);
        if k.starts_with(&w) || (w.len() < head.len() && abbreviates(&w, head)) {
            return Some(1);
        }
        let d = edit_distance(&w, k).min(edit_distance(&w, head));
        (d <= (w.chars().count() / 2).max(2)).then_some(d + 1)
    };
    known
        .iter()
        .filter_map(|k| score(k).map(|s| (s, k.len(), *k)))
        .min()
        .map(|(_, _, k)| k)
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

/// The words of a line [`shell_line`] wrote (plain words, `'…'` quoted, `\'` between quotes),
/// or None for anything else: how a journaled command is taken apart to build another from it.
pub fn shell_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(words);
        }
        let mut w = String::new();
        while let Some(&c) = chars.peek() {
            match c {
                ' ' => break,
                '\'' => {
                    chars.next();
                    loop {
                        match chars.next()? {
                            '\'' => break,
                            c => w.push(c),
                        }
                    }
                }
                '\\' => {
                    chars.next();
                    w.push(chars.next()?);
                }
                c => {
                    w.push(c);
                    chars.next();
                }
            }
        }
        words.push(w);
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn nearest_prefers_abbreviations_then_fewest_edits_and_says_nothing_when_far() {
        let sections = [
            "global",
            "overview",
            "gpus",
            "processes",
            "models",
            "detail",
            "findings",
            "log",
            "journal",
            "help",
            "filter",
            "dialog",
            "stage",
            "fleet",
        ];
        let cases = [
            ("procs", Some("processes")),
            ("procesess", Some("processes")),
            ("gpu", Some("gpus")),
            ("jrnl", Some("journal")),
            ("modles", Some("models")),
            ("Help", Some("help")),
            ("xyzzy", None),
        ];
        for (word, want) in cases {
            assert_eq!(nearest(word, &sections), want, "{word}");
        }
        let scopes = [
            "ui",
            "ui.title",
            "table.header",
            "table.row.selected",
            "danger",
        ];
        assert_eq!(nearest("tabel", &scopes), Some("table.header"));
        assert_eq!(nearest("table.hedaer", &scopes), Some("table.header"));
        assert_eq!(nearest("dangr", &scopes), Some("danger"));
    }

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

    /// Every control character (C0, DEL, C1: 65 of them), in a value and in a key, at the start,
    /// middle and end of a string: detected in the JSON and escaped by `escape_all`; plain text
    /// and an escaped backslash are not flagged.
    #[test]
    fn escape_all_finds_and_escapes_every_control_character_anywhere() {
        use std::collections::BTreeMap;
        let controls: Vec<char> = (0u32..0x20)
            .chain(0x7f..0xa0)
            .filter_map(char::from_u32)
            .collect();
        assert_eq!(controls.len(), 65);
        let mut cases = 0;
        for c in &controls {
            for s in [format!("{c}x"), format!("a{c}b"), format!("x{c}")] {
                let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
                m.insert(s.clone(), vec!["ok".into(), s.clone()]);
                assert!(
                    json_has_controls(&serde_json::to_string(&m).unwrap()),
                    "{c:?}"
                );
                assert!(escape_all(&mut m).unwrap());
                let out = serde_json::to_string(&m).unwrap();
                assert!(!json_has_controls(&out), "{c:?}: {out}");
                assert!(
                    !m.keys()
                        .chain(m.values().flatten())
                        .any(|k| k.chars().any(char::is_control))
                );
                cases += 1;
            }
        }
        assert_eq!(cases, 65 * 3);
        let mut plain = vec!["vllm \\x1b already escaped".to_string(), "é ü 漢".into()];
        assert!(!escape_all(&mut plain).unwrap());
    }

    #[test]
    fn shell_quotes_read_back_as_written() {
        assert_eq!(shell_quote("/tmp/a-b_c.json"), "/tmp/a-b_c.json");
        assert_eq!(shell_quote("/tmp/my plan.json"), "'/tmp/my plan.json'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote("$(reboot)"), "'$(reboot)'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn shell_words_reads_back_every_line_shell_line_writes() {
        // Every word of length 0 to 3 over a hostile alphabet, in lines of one to three words.
        let alphabet = ['a', ' ', '\'', '\\', '"', '$', ';', '-', '/'];
        let mut words = vec![String::new()];
        for len in 1..=3 {
            let mut next = Vec::new();
            for w in words.iter().filter(|w| w.chars().count() == len - 1) {
                for c in alphabet {
                    next.push(format!("{w}{c}"));
                }
            }
            words.extend(next);
        }
        let mut cases = 0;
        for (i, a) in words.iter().enumerate() {
            let b = &words[(i * 7 + 3) % words.len()];
            for line in [vec![a.clone()], vec![a.clone(), b.clone(), "apply".into()]] {
                assert_eq!(
                    super::shell_words(&super::shell_line(&line)),
                    Some(line.clone())
                );
                cases += 1;
            }
        }
        assert!(cases > 1_600, "{cases}");
        assert_eq!(super::shell_words("'open"), None);
    }
}
