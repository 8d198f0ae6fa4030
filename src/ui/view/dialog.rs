//! The kill dialog: every target with what it is, the refusals, the progress after the signal,
//! and two buttons, Cancel focused. Drawn in the danger style so it reads as dangerous even in
//! the monochrome theme.

use super::fmt::{cut, gib};
use crate::ui::dialog::{Focus, KillDialog, Stage};
use crate::ui::state::State;
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

/// Draws the dialog centred on `area`.
pub fn render(frame: &mut Frame<'_>, area: Rect, d: &KillDialog, state: &State, theme: &Theme) {
    let mut lines: Vec<Line<'_>> = Vec::new();
    let intro = match &d.stage {
        Stage::Confirm => format!(
            "SIGTERM asks these processes to exit; partop then waits {}s. Each process is held by a pidfd from the moment the signal goes out, its start time checked, so a reused pid is never hit.",
            d.grace_ms / 1000
        ),
        Stage::Running { sig, since_ms } => format!(
            "{} sent {}s ago; waiting up to {}s for them to exit…",
            sig.name(),
            state.now_ms.saturating_sub(*since_ms) / 1000,
            d.grace_ms / 1000
        ),
        Stage::AskKill { alive } => format!(
            "{} process(es) did not exit after SIGTERM. SIGKILL cannot be caught: unsaved work is lost.",
            alive.len()
        ),
        Stage::Finished { alive } if alive.is_empty() => "Done: every target has exited.".into(),
        Stage::Finished { alive } => format!("Done, but still alive: {alive:?}"),
    };
    lines.push(Line::raw(intro));
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        format!(
            "{:>7}  {:<10} {:<15} {:<8} {:>8}  {}",
            "PID", "USER", "NAME", "GPUS", "VRAM GiB", "MODEL / STATUS"
        ),
        theme.get("table.header"),
    ));
    for t in &d.plan.targets {
        let status = if d.gone.contains(&t.pid) && !d.status.contains_key(&t.pid) {
            "left the node while this was open: skipped".to_string()
        } else {
            d.status.get(&t.pid).cloned().unwrap_or_else(|| {
                t.agent
                    .clone()
                    .map(|a| format!("agent: {a}"))
                    .or_else(|| t.model.clone())
                    .unwrap_or_default()
            })
        };
        // The snapshot's own words for the same process (as `partop kill` prints them).
        let gpus = state
            .snapshot
            .as_ref()
            .and_then(|s| {
                s.processes
                    .iter()
                    .find(|p| p.pid == t.pid && p.start_ticks == t.start_ticks)
            })
            .map_or_else(
                || {
                    t.gpus
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                },
                |p| p.gpu_label().trim_start_matches("logical GPU ").to_string(),
            );
        lines.push(Line::raw(format!(
            "{:>7}  {:<10} {:<15} {:<8} {:>8}  {}",
            t.pid,
            cut(t.user.as_deref().unwrap_or("?"), 10),
            cut(t.name.as_deref().unwrap_or("?"), 15),
            cut(&gpus, 8),
            gib(t.vram_bytes),
            status
        )));
    }
    for (pid, why) in &d.plan.refused {
        lines.push(Line::styled(
            format!("{pid:>7}  refused: {why}"),
            theme.get("status.warn"),
        ));
    }
    lines.push(Line::raw(""));
    let button = |label: &str, focused: bool, danger: bool| {
        super::fmt::button(label, focused, danger, theme)
    };
    let mut buttons = vec![Span::raw("  ")];
    let close = if matches!(d.stage, Stage::Finished { .. }) {
        "Close"
    } else {
        "Cancel"
    };
    if !matches!(d.stage, Stage::Running { .. }) {
        buttons.push(button(close, d.focus == Focus::Cancel, false));
    }
    if let Some(label) = d.danger_label() {
        buttons.push(Span::raw("   "));
        buttons.push(button(&label, d.focus == Focus::Confirm, true));
    }
    lines.push(Line::from(buttons));
    lines.push(Line::styled(
        "tab switches · enter presses · esc cancels",
        theme.get("ui.hint"),
    ));
    let n = d.plan.targets.len();
    let title = format!("Terminate {n} process{}", if n == 1 { "" } else { "es" });
    super::fmt::dialog(frame, area, &title, lines, theme);
}
