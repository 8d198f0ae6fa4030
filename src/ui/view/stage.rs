//! The staging overlay (scope, target modes, the current map beside the staged one, the plan,
//! the confirmation being typed) and the progress of a running repartition.

use super::fmt::{centered, cut};
use super::partition_map::PartitionMap;
use crate::domain::layout::shapes;
use crate::domain::product;
use crate::ui::stage::{Progress, Staging};
use crate::ui::state::State;
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

/// Draws the staging overlay.
pub fn render(frame: &mut Frame<'_>, area: Rect, st: &Staging, state: &State, theme: &Theme) {
    let rect = centered(area, 110, 40);
    frame.render_widget(Clear, rect);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" Stage a partition change (nothing changes until you confirm) ")
        .border_style(theme.get("danger"));
    let inner = block.inner(rect);
    frame.render_widget(block, rect);
    let Some(snap) = &state.snapshot else { return };
    let keep = |s: Option<String>| s.unwrap_or_else(|| "keep".into());
    let scope = if st.all {
        format!("all {} GPUs", snap.gpus.len())
    } else {
        if st.also.is_empty() {
            format!("GPU {}", st.gpu)
        } else {
            format!(
                "{} GPUs ({}, {})",
                st.also.len() + 1,
                st.gpu,
                st.also.join(", ")
            )
        }
    };
    let mut lines = vec![Line::from(vec![
        Span::styled("scope ", theme.get("table.header")),
        Span::raw(format!("{scope} (a)   ")),
        Span::styled("compute ", theme.get("table.header")),
        Span::raw(format!(
            "{} (c)   ",
            keep(st.compute.map(|m| m.to_string()))
        )),
        Span::styled("memory ", theme.get("table.header")),
        Span::raw(format!("{} (m)", keep(st.memory.map(|m| m.to_string())))),
    ])];
    // Proposed by the placement advisor: say why (one line, the map starts under it).
    lines.push(st.advice.as_ref().map_or_else(
        || Line::raw(""),
        |a| {
            Line::styled(
                cut(&format!("advice: {a}"), usize::from(inner.width)),
                theme.get("ui.hint"),
            )
        },
    ));
    let map_y = inner.y + 2;
    let g = snap.gpus.iter().find(|g| g.bdf == st.gpu);

    if let Some(g) = g {
        let target = st
            .result
            .as_ref()
            .ok()
            .and_then(|p| p.changes.iter().find(|c| c.bdf == g.bdf).map(|c| c.to));
        let prod = g.product_key.as_deref().and_then(product::by_key);
        if inner.height > 8 {
            lines.push(Line::styled(
                format!(
                    "now     {}/{}",
                    g.compute_partition.map_or("?", |c| c.name()),
                    g.memory_partition.map_or("?", |m| m.name())
                ),
                theme.get("ui.muted"),
            ));
            lines.push(Line::raw(""));
            lines.push(Line::raw(""));
            let (c, m) = target.unwrap_or((
                g.compute_partition
                    .unwrap_or(crate::domain::ComputeMode::Spx),
                g.memory_partition
                    .unwrap_or(crate::domain::MemoryMode::Nps1),
            ));
            lines.push(Line::styled(
                format!(
                    "staged  {c}/{m}{}",
                    if target.is_none() { " (unchanged)" } else { "" }
                ),
                theme.get("ui.muted"),
            ));
            lines.push(Line::raw(""));
            lines.push(Line::raw(""));
            let w = inner.width.min(80);
            frame.render_widget(
                &PartitionMap::from_gpu(g, theme),
                Rect {
                    x: inner.x,
                    y: map_y + 1,
                    width: w,
                    height: 2,
                },
            );
            if let Some(p) = prod {
                let first = st
                    .result
                    .as_ref()
                    .ok()
                    .and_then(|pl| {
                        pl.after
                            .iter()
                            .find(|r| r.bdf == format!("{}.0", g.bdf))
                            .map(|r| r.gpu_id)
                    })
                    .unwrap_or(0);
                let map =
                    PartitionMap::from_shapes(&shapes(&p, c, m), p.xcds, m.domains(), first, theme);
                frame.render_widget(
                    &map,
                    Rect {
                        x: inner.x,
                        y: map_y + 4,
                        width: w,
                        height: 2,
                    },
                );
            }
        }
    }

    match &st.result {
        Ok(p) => {
            lines.push(Line::styled(
                format!(
                    "plan {} · logical GPUs {} -> {} · {} to stop · about {} s of downtime",
                    p.fingerprint,
                    p.before.len(),
                    p.after.len(),
                    p.stops.len(),
                    p.downtime_secs
                ),
                theme.get("ui.title"),
            ));
            for w in &p.warnings {
                lines.push(Line::styled(
                    cut(&format!("  ! {w}"), usize::from(inner.width)),
                    theme.get("status.warn"),
                ));
            }
            for (i, s) in p.steps.iter().enumerate() {
                let cmds = if s.commands.is_empty() {
                    String::new()
                } else {
                    format!("   $ {}", s.commands.join("; "))
                };
                lines.push(Line::raw(cut(
                    &format!("  {}. {}{cmds}", i + 1, s.title),
                    usize::from(inner.width),
                )));
            }
            for s in p.stops.iter().take(6) {
                lines.push(Line::styled(
                    cut(
                        &format!(
                            "  stops: pid {} {} {}",
                            s.pid,
                            s.name,
                            s.agent.clone().unwrap_or_default()
                        ),
                        usize::from(inner.width),
                    ),
                    theme.get("status.warn"),
                ));
            }
        }
        Err(e) => {
            for m in e {
                lines.push(Line::styled(
                    cut(m, usize::from(inner.width)),
                    theme.get("status.crit"),
                ));
            }
        }
    }
    // The prompt and keys are anchored at the bottom so they are never pushed off screen.
    let mut bottom: Vec<Line<'_>> = Vec::new();
    match (&st.confirming, st.required_word()) {
        (Some(c), Some(word)) => {
            if let Some(n) = &c.notice {
                bottom.push(Line::styled(
                    cut(n, usize::from(inner.width)),
                    theme.get("status.crit"),
                ));
            }
            bottom.push(Line::from(vec![
                Span::styled(
                    format!("Type {word} to apply plan {}: ", c.fingerprint),
                    theme.get("danger"),
                ),
                Span::raw(format!("{}▏", c.typed)),
            ]));
            bottom.push(Line::styled(
                "enter applies · esc goes back",
                theme.get("ui.hint"),
            ));
        }
        _ => bottom.push(Line::styled(
            "c compute · m memory · a scope · enter confirm · esc cancel",
            theme.get("ui.hint"),
        )),
    }
    let b = u16::try_from(bottom.len()).unwrap_or(0).min(inner.height);
    let top = Rect {
        height: inner.height - b,
        ..inner
    };
    let tail = Rect {
        y: inner.y + inner.height - b,
        height: b,
        ..inner
    };
    let shown = usize::from(top.height);
    if lines.len() > shown && shown > 0 {
        let hidden = lines.len() - shown + 1;
        lines.truncate(shown - 1);
        lines.push(Line::styled(
            format!("… {hidden} more line(s): `partop plan` prints the whole plan"),
            theme.get("ui.hint"),
        ));
    }
    frame.render_widget(Paragraph::new(lines), top);
    frame.render_widget(Paragraph::new(bottom), tail);
}

/// Draws the progress of a repartition.
pub fn progress(frame: &mut Frame<'_>, area: Rect, p: &Progress, theme: &Theme) {
    let h = u16::try_from(p.plan.steps.len() + 6).unwrap_or(20);
    let rect = centered(area, 100, h);
    frame.render_widget(Clear, rect);
    let mut lines = Vec::new();
    let mut current = true;
    for (i, s) in p.plan.steps.iter().enumerate() {
        let (mark, style, detail) = match p.steps.get(i).cloned().flatten() {
            Some((true, d)) => ("✓", theme.get("status.ok"), d),
            Some((false, d)) => ("✗", theme.get("status.crit"), d),
            None if current && p.finished.is_none() => {
                current = false;
                ("▸", theme.get("ui.title"), "running…".into())
            }
            None => ("·", theme.get("ui.muted"), String::new()),
        };
        lines.push(Line::from(vec![
            Span::styled(format!(" {mark} "), style),
            Span::raw(cut(
                &format!("{}  {detail}", s.title),
                usize::from(rect.width.saturating_sub(6)),
            )),
        ]));
    }
    lines.push(Line::raw(""));
    let status = match p.finished {
        None => format!("running detached (it continues if you quit or the connection drops); log {} · P hides", p.log),
        Some(true) => format!("applied: {} logical GPUs · esc closes", p.plan.after.len()),
        Some(false) => match &p.exit {
            Some(how) => format!("the apply process ended without finishing: {how} · partop apply {} --resume continues it · esc closes", p.log.trim_end_matches(".log").to_string() + ".json"),
            None => "failed: see the step above and the Log; partop apply PLAN --resume continues after the fix · esc closes".into(),
        },
    };
    // The status is wrapped, never cut: it carries the command that continues a failed apply.
    let w = usize::from(rect.width.saturating_sub(2)).max(1);
    for chunk in status.chars().collect::<Vec<_>>().chunks(w) {
        lines.push(Line::styled(
            chunk.iter().collect::<String>(),
            theme.get("ui.hint"),
        ));
    }
    let title = format!(" Repartition {} ", p.plan.fingerprint);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(title)
                .border_style(theme.get("danger")),
        ),
        rect,
    );
}

/// Draws the MIG staging overlay: the layout chosen, its plan (or why there is none), and the
/// confirmation being typed.
pub fn render_mig(
    frame: &mut Frame<'_>,
    area: Rect,
    st: &crate::ui::mig_stage::MigStaging,
    theme: &Theme,
) {
    let rect = centered(area, 110, 34);
    frame.render_widget(Clear, rect);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" Stage a MIG layout (nothing changes until you confirm) ")
        .border_style(theme.get("danger"));
    let inner = block.inner(rect);
    frame.render_widget(block, rect);
    let w = usize::from(inner.width);
    let layout = st.layout();
    let shown = if layout.is_empty() {
        "MIG off".to_string()
    } else {
        let mut names: Vec<(String, usize)> = Vec::new();
        for n in &layout {
            match names.iter_mut().find(|(x, _)| x == n) {
                Some((_, k)) => *k += 1,
                None => names.push((n.clone(), 1)),
            }
        }
        names
            .iter()
            .map(|(n, k)| {
                if *k > 1 {
                    format!("{k}x {n}")
                } else {
                    n.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(" + ")
    };
    let mut lines = vec![
        Line::from(vec![
            Span::styled(format!("GPU {} layout ", st.gpu), theme.get("table.header")),
            Span::raw(format!(
                "{shown}   (c: next of {}; the device's own profiles)",
                st.presets.len()
            )),
        ]),
        Line::raw(""),
    ];
    match &st.result {
        Ok(p) => lines.extend(crate::report::mig_plan_text(p).lines().map(|l| {
            let style = if l.trim_start().starts_with('!') {
                theme.get("status.warn")
            } else {
                theme.get("ui")
            };
            Line::styled(l.to_string(), style)
        })),
        Err(e) => lines.extend(e.iter().map(|x| {
            Line::styled(
                cut(&format!("cannot plan: {x}"), w),
                theme.get("status.warn"),
            )
        })),
    }
    lines.push(Line::raw(""));
    let prompt = match (&st.confirming, &st.result) {
        (Some(c), Ok(p)) => {
            if let Some(n) = &c.notice {
                lines.push(Line::styled(cut(n, w), theme.get("status.warn")));
            }
            format!(
                "Type the host name ({}) and Enter to apply; Esc goes back: {}_",
                p.host, c.typed
            )
        }
        (_, Ok(_)) => {
            "Enter: confirm (you will type the host name) · c: next layout · Esc: cancel".into()
        }
        (_, Err(_)) => "c: next layout · Esc: cancel".into(),
    };
    lines.push(Line::styled(cut(&prompt, w), theme.get("danger")));
    // Plans' long warnings wrap rather than lose their end.
    frame.render_widget(
        Paragraph::new(lines).wrap(ratatui::widgets::Wrap { trim: false }),
        inner,
    );
}
