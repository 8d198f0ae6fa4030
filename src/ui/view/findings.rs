//! Findings: what was seen, where, and for how long.

use crate::domain::findings::{Finding, Severity, duration};
use crate::ui::state::{State, View};
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};

/// A finding as its row says it: what, where, for how long.
fn said(f: &Finding, now_ms: u64) -> String {
    let kind = f.kind.label();
    let since = duration(now_ms.saturating_sub(f.since_ms));
    if f.kind.about_a_process() {
        format!("{kind} · {} · since {since} ago", f.subject)
    } else {
        format!(
            "{kind} · GPU {} ({}) · since {since} ago",
            f.gpu_id, f.subject
        )
    }
}

/// The severity's word and its style.
fn severity(f: &Finding) -> (&'static str, &'static str) {
    match f.severity {
        Severity::Warn => ("WARN", "finding.warn"),
        Severity::Info => ("INFO", "finding.info"),
    }
}

/// Every word a finding's row shows (its severity, what and where, and what was seen): what
/// `/` matches in Findings.
pub fn words(f: &Finding, now_ms: u64) -> Vec<String> {
    vec![severity(f).0.to_string(), said(f, now_ms), f.saw.clone()]
}

/// Draws the findings list: those `/` keeps.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" Findings ")
        .border_style(theme.get("ui.border"));
    if state.findings.is_empty() {
        let t = state.tracker.thresholds;
        let text = format!(
            "Nothing to report.\n\nWatching for: noisy neighbours (a partition at >= {:.0}% GFX while the device's HBM bandwidth is >= {:.0}% for {}, next to a busy sibling in the same memory domain) and idle partitions (>= {} held with GFX below 1% for {}).",
            t.hot_busy,
            t.hot_umc,
            duration(t.hot_after_ms),
            super::fmt::gib(t.idle_vram_bytes) + " GiB",
            duration(t.idle_after_ms)
        );
        frame.render_widget(
            Paragraph::new(text)
                .block(block)
                .style(theme.get("ui.muted"))
                .wrap(Wrap { trim: true }),
            area,
        );
        return;
    }
    let mut lines = Vec::new();
    if let Some(e) = &state.eviction {
        lines.push(Line::styled(
            format!("eviction: {}", crate::domain::text::escape_controls(e)),
            theme.get("status.warn"),
        ));
    }
    for i in state.order(View::Findings) {
        let Some(f) = state.findings.get(i) else {
            continue;
        };
        let (word, style) = severity(f);
        let style = theme.get(style);
        let sel = if i == state.finding_sel {
            theme.get("table.row.selected")
        } else {
            theme.get("ui")
        };
        lines.push(Line::from(vec![
            Span::raw(super::fmt::mark(i == state.finding_sel)),
            Span::styled(format!("{word} "), style),
            Span::styled(said(f, state.now_ms), sel),
        ]));
        lines.push(Line::styled(
            format!("      {}", f.saw),
            theme.get("ui.hint"),
        ));
    }
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}

/// The eviction's confirmation: what will be done, and the pod's name typed.
pub fn ask(frame: &mut Frame<'_>, area: Rect, a: &crate::ui::evict_ask::EvictAsk, theme: &Theme) {
    let mut lines: Vec<Line<'_>> = a.lines().into_iter().map(Line::raw).collect();
    lines.push(Line::raw(""));
    lines.push(Line::from(vec![
        Span::styled(
            format!(
                "Type {} to evict it: ",
                crate::domain::text::escape_controls(a.word())
            ),
            theme.get("danger"),
        ),
        Span::raw(format!(
            "{}_",
            crate::domain::text::escape_controls(&a.confirming.typed)
        )),
    ]));
    if let Some(n) = &a.confirming.notice {
        lines.push(Line::styled(
            crate::domain::text::escape_controls(n).into_owned(),
            theme.get("status.warn"),
        ));
    }
    lines.push(Line::styled(
        "enter evicts · esc cancels · journaled before it is sent",
        theme.get("ui.hint"),
    ));
    super::fmt::dialog(frame, area, &a.title(), lines, theme);
}
