//! The Journal view: every action partop took (newest first) as a table of when, who, what
//! and the outcome in words, and below it the selected entry in full (its targets and outcome
//! as `key: value` lines, wrapped, never raw JSON). Enter gives the entry the whole view and
//! the movement keys scroll it; Esc goes back to the list.

use super::fmt::cut;
use crate::domain::journal::Entry;
use crate::report::journal::{flatten, who, words};
use crate::ui::scroll::Pane;
use crate::ui::state::{State, View};
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

/// A journal string made safe to draw (the journal is a file: anyone who can write it could
/// have put control characters in it).
fn esc(s: &str) -> String {
    crate::domain::text::escape_controls(s).into_owned()
}

/// The selected entry, in full, as lines.
fn entry_lines(e: &Entry, said: String, theme: &Theme) -> Vec<Line<'static>> {
    let k = |s: &str| Span::styled(format!("{s:<20}"), theme.get("table.header"));
    let mut lines = vec![
        Line::from(vec![k("when"), Span::raw(esc(&e.at))]),
        Line::from(vec![
            k("who"),
            Span::raw(format!(
                "{} (uid {}) on {}{}",
                who(e),
                e.who.uid,
                esc(&e.host),
                if e.simulated {
                    " · simulated node"
                } else {
                    ""
                }
            )),
        ]),
        Line::from(vec![k("action"), Span::raw(esc(&e.action))]),
        Line::from(vec![k("in words"), Span::raw(said)]),
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

/// The list: an unfinished apply first, whole, then unreadable lines, then the entries the
/// filter keeps, newest first, each as time, who and its sentence.
fn draw_list(frame: &mut Frame<'_>, list: Rect, state: &State, theme: &Theme, said: &[String]) {
    let entries = &state.journal.0;
    let bad = &state.journal.1;
    let block = Block::default()
        .borders(Borders::ALL)
        .title(list_title(state))
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
    let order = state.order(View::Journal);
    let at = order
        .iter()
        .position(|i| *i == state.journal_sel)
        .unwrap_or(0);
    let first = super::fmt::offset(at, room);
    state.hits.rows(crate::ui::hit::Rows {
        y: inner.y + u16::try_from(lines.len()).unwrap_or(0),
        height: u16::try_from(room).unwrap_or(0),
        x: (inner.x, inner.right()),
        first,
        stride: 1,
    });
    for (i, e, sentence) in order
        .iter()
        .skip(first)
        .take(room)
        .filter_map(|i| Some((*i, entries.get(*i)?, said.get(*i)?)))
    {
        // Time of day and date apart from the RFC 3339 stamp; the whole stamp is in the entry.
        let when = e.at.get(5..19).unwrap_or(&e.at).replace('T', " ");
        let style = if i == state.journal_sel {
            theme.get("table.row.selected")
        } else {
            theme.get("ui")
        };
        let text = format!(
            "{}{when}  {:<8} {sentence}",
            super::fmt::mark(i == state.journal_sel),
            cut(&who(e), 8)
        );
        lines.push(Line::styled(cut(&text, w), style));
    }
    frame.render_widget(Paragraph::new(lines).block(block), list);
}

/// The list's title: the order, the keys, and the filter when there is one.
fn list_title(state: &State) -> String {
    let filter = state.filter_of(View::Journal);
    let filter = if filter.is_empty() {
        String::new()
    } else {
        format!(
            "{} of {} · filter {filter:?} · ",
            state.order(View::Journal).len(),
            state.journal.0.len()
        )
    };
    format!(
        " Journal: {filter}newest first · Enter opens the entry · partop journal prints it all "
    )
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
    // Each entry as a sentence: an apply's steps named and counted from 1, as its log counts.
    let said = words(entries, &state.journal_runs);
    let selected = entries.get(state.journal_sel);
    let selected_said = said.get(state.journal_sel).cloned().unwrap_or_default();
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
        scrolled_entry(
            frame,
            area,
            state,
            theme,
            block,
            entry_lines(e, selected_said.clone(), theme),
        );
        return;
    }
    let [list, detail] =
        Layout::vertical([Constraint::Percentage(55), Constraint::Min(4)]).areas(area);
    draw_list(frame, list, state, theme, &said);

    if let Some(e) = selected {
        let block = Block::default()
            .borders(Borders::ALL)
            .title(" Selected entry ")
            .border_style(theme.get("ui.border"));
        scrolled_entry(
            frame,
            detail,
            state,
            theme,
            block,
            entry_lines(e, selected_said.clone(), theme),
        );
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
