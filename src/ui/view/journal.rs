//! The Journal view: every action partop took (newest first) as a table of when, who, what
//! and the outcome in words, and below it the selected entry in full (its targets and outcome
//! as `key: value` lines, wrapped, never raw JSON). Enter gives the entry the whole view and
//! the movement keys scroll it; Esc goes back to the list.

use super::fmt::cut;
use crate::exec::journal::Entry;
use crate::ui::scroll::Pane;
use crate::ui::state::State;
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use serde_json::Value;

/// A JSON scalar in words.
fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "—".into(),
        Value::String(s) => crate::domain::text::escape_controls(s).into_owned(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        other => other.to_string(),
    }
}

/// `key: value` lines of a JSON value, nested keys joined with dots.
pub fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, x, out);
            }
        }
        Value::Array(a) if a.is_empty() => out.push((prefix.to_string(), "none".into())),
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
            out.push((
                prefix.to_string(),
                a.iter().map(scalar).collect::<Vec<_>>().join(", "),
            ));
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), x, out);
            }
        }
        other => out.push((prefix.to_string(), scalar(other))),
    }
}

/// The targets in a few words: `pid 4242 python3 (svc-ml, 18.0 GiB)`, a model, a run.
pub fn targets_summary(v: &Value) -> String {
    let one = |t: &Value| -> String {
        if let Some(pid) = t.get("pid").and_then(Value::as_u64) {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("");
            let model = t.get("model").and_then(Value::as_str);
            format!(
                "pid {pid} {}",
                model.map_or_else(|| name.to_string(), |m| format!("{name} [{m}]"))
            )
            .trim_end()
            .to_string()
        } else if let Some(m) = t.get("model").and_then(Value::as_str) {
            format!("model {m}")
        } else if let Some(f) = t.get("fingerprint").and_then(Value::as_str) {
            format!("plan {f}")
        } else {
            scalar(t)
        }
    };
    match v {
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_u64) => format!(
            "pid {}",
            a.iter().map(scalar).collect::<Vec<_>>().join(", ")
        ),
        Value::Array(a) if a.len() == 1 => one(&a[0]),
        Value::Array(a) => format!("{} targets", a.len()),
        Value::Object(_) => one(v),
        other => scalar(other),
    }
}

/// The outcome in a few words.
pub fn outcome_summary(v: &Value) -> String {
    let Value::Object(m) = v else {
        return scalar(v);
    };
    if let Some(e) = m.get("error").filter(|e| !e.is_null()) {
        return format!("failed: {}", scalar(e));
    }
    for k in ["state", "detail", "step", "result"] {
        if let Some(x) = m.get(k).filter(|x| !x.is_null()) {
            return scalar(x);
        }
    }
    if let Some(still) = m.get("still_alive").and_then(Value::as_array) {
        let waited = m.get("waited_ms").and_then(Value::as_u64).unwrap_or(0);
        return if still.is_empty() {
            format!("all exited within {:.1}s", waited as f64 / 1000.0)
        } else {
            format!("{} still running", still.len())
        };
    }
    // Per pid (`{"4242": {"outcome": "sent"}}`).
    if !m.is_empty() && m.keys().all(|k| k.parse::<u32>().is_ok()) {
        return m
            .iter()
            .map(|(pid, o)| {
                let what = o.get("outcome").map_or_else(|| scalar(o), scalar);
                format!("pid {pid}: {what}")
            })
            .collect::<Vec<_>>()
            .join(", ");
    }
    if let Some(ok) = m.get("ok").and_then(Value::as_bool) {
        return if ok { "ok".into() } else { "failed".into() };
    }
    let mut kv = Vec::new();
    flatten("", v, &mut kv);
    kv.iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(" · ")
}

fn who(e: &Entry) -> String {
    e.who
        .sudo_user
        .clone()
        .or_else(|| e.who.user.clone())
        .unwrap_or_else(|| format!("uid {}", e.who.uid))
}

/// The selected entry, in full, as lines.
fn entry_lines(e: &Entry, theme: &Theme) -> Vec<Line<'static>> {
    let k = |s: &str| Span::styled(format!("{s:<20}"), theme.get("table.header"));
    let mut lines = vec![
        Line::from(vec![k("when"), Span::raw(e.at.clone())]),
        Line::from(vec![
            k("who"),
            Span::raw(format!(
                "{} (uid {}) on {}{}",
                who(e),
                e.who.uid,
                e.host,
                if e.simulated {
                    " · simulated node"
                } else {
                    ""
                }
            )),
        ]),
        Line::from(vec![k("action"), Span::raw(e.action.clone())]),
    ];
    for (title, v) in [("target", &e.targets), ("outcome", &e.outcome)] {
        let mut kv = Vec::new();
        flatten("", v, &mut kv);
        for (key, val) in kv {
            let key = if key.is_empty() {
                title.to_string()
            } else {
                format!("{title} {key}")
            };
            lines.push(Line::from(vec![k(&key), Span::raw(val)]));
        }
    }
    lines
}

/// Draws the journal.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let (entries, bad) = &state.journal;
    if entries.is_empty() && bad.is_empty() && state.unfinished.is_none() {
        frame.render_widget(
            Paragraph::new("No action has been journaled yet.")
                .block(
                    Block::default()
                        .borders(Borders::ALL)
                        .title(" Journal ")
                        .border_style(theme.get("ui.border")),
                )
                .style(theme.get("ui.muted")),
            area,
        );
        return;
    }
    let selected = entries.get(state.journal_sel);
    if state.journal_open
        && let Some(e) = selected
    {
        let block = Block::default()
            .borders(Borders::ALL)
            .title(format!(
                " Journal entry {} of {} · Esc back to the list ",
                state.journal_sel + 1,
                entries.len()
            ))
            .border_style(theme.get("ui.border"));
        scrolled_entry(frame, area, state, theme, block, entry_lines(e, theme));
        return;
    }
    let [list, detail] =
        Layout::vertical([Constraint::Percentage(55), Constraint::Min(4)]).areas(area);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" Journal: newest first · Enter opens the entry · partop journal prints it all ")
        .border_style(theme.get("ui.border"));
    let inner = block.inner(list);
    let w = usize::from(inner.width);
    // An unfinished apply first, whole (wrapped), with the command that continues it.
    let mut lines: Vec<Line<'_>> = Vec::new();
    if let Some(u) = &state.unfinished {
        lines.extend(super::fmt::hang(
            Line::styled(format!("UNFINISHED APPLY {u}"), theme.get("status.crit")),
            w,
            2,
        ));
    }
    for b in bad {
        lines.extend(super::fmt::hang(
            Line::styled(format!("unreadable line: {b}"), theme.get("status.warn")),
            w,
            2,
        ));
    }
    let room = usize::from(inner.height).saturating_sub(lines.len());
    let first = super::fmt::offset(state.journal_sel, room);
    state.hits.rows(crate::ui::hit::Rows {
        y: inner.y + u16::try_from(lines.len()).unwrap_or(0),
        height: u16::try_from(room).unwrap_or(0),
        x: (inner.x, inner.right()),
        first,
        stride: 1,
    });
    for (i, e) in entries.iter().enumerate().skip(first).take(room) {
        // Time of day and date apart from the RFC 3339 stamp; the whole stamp is in the entry.
        let when = e.at.get(5..19).unwrap_or(&e.at).replace('T', " ");
        let style = if i == state.journal_sel {
            theme.get("table.row.selected")
        } else {
            theme.get("ui")
        };
        let text = format!(
            "{}{when}  {:<8} {:<22} {}  → {}",
            super::fmt::mark(i == state.journal_sel),
            cut(&who(e), 8),
            cut(&e.action, 22),
            targets_summary(&e.targets),
            outcome_summary(&e.outcome)
        );
        lines.push(Line::styled(cut(&text, w), style));
    }
    frame.render_widget(Paragraph::new(lines).block(block), list);
    if let Some(e) = selected {
        let block = Block::default()
            .borders(Borders::ALL)
            .title(" Selected entry ")
            .border_style(theme.get("ui.border"));
        scrolled_entry(frame, detail, state, theme, block, entry_lines(e, theme));
    }
}

fn scrolled_entry(
    frame: &mut Frame<'_>,
    area: Rect,
    state: &State,
    theme: &Theme,
    block: Block<'_>,
    lines: Vec<Line<'static>>,
) {
    let below = if state.journal_open {
        "↓ more below (Down, PgDn)"
    } else {
        "↓ more: Enter shows it all"
    };
    super::fmt::scrolled(
        frame,
        area,
        &state.scroll,
        Pane::Journal,
        theme,
        block,
        lines,
        20,
        below,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_read_as_words_not_json() {
        assert_eq!(
            targets_summary(&json!([{"pid": 42, "name": "python3", "model": "llama"}])),
            "pid 42 python3 [llama]"
        );
        assert_eq!(targets_summary(&json!([1, 2])), "pid 1, 2");
        assert_eq!(
            outcome_summary(&json!({"still_alive": [], "waited_ms": 150})),
            "all exited within 0.1s"
        );
        assert_eq!(
            outcome_summary(&json!({"ok": false, "error": "boom"})),
            "failed: boom"
        );
        let mut kv = Vec::new();
        flatten("", &json!({"a": {"b": 1, "c": [1, 2]}, "d": null}), &mut kv);
        assert_eq!(
            kv,
            [
                ("a.b".to_string(), "1".to_string()),
                ("a.c".into(), "1, 2".into()),
                ("d".into(), "—".into())
            ]
        );
    }
}
