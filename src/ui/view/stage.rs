//! The staging overlay (scope, target modes, the current map beside the staged one, the plan,
//! the confirmation being typed) and the progress of a running repartition.

use super::fmt::{centered, cut};
use super::partition_map::PartitionMap;
use crate::domain::layout::shapes;
use crate::domain::product;
use crate::domain::snapshot::Snapshot;
use crate::ui::stage::{Progress, Staging};
use crate::ui::state::State;
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

/// The overlay's rectangle: the width and height it is given, less a margin.
fn overlay(area: Rect) -> Rect {
    centered(
        area,
        area.width.saturating_sub(2).max(area.width.min(40)),
        area.height.saturating_sub(2).max(area.height.min(12)),
    )
}

/// The plan's text, wrapped to `w`: summary, warnings, what stops, where every served model
/// goes (or that it is NOT relaunched), and each step with its exact commands.
fn plan_lines(
    st: &Staging,
    snap: &crate::domain::Snapshot,
    theme: &Theme,
    w: usize,
) -> Vec<Line<'static>> {
    let mut lines: Vec<Line<'static>> = Vec::new();
    let mut push = |l: Line<'static>, indent: usize| lines.extend(super::fmt::hang(l, w, indent));
    match &st.result {
        Ok(p) => {
            push(
                Line::styled(
                    format!(
                        "plan {} · logical GPUs {} -> {} · {} to stop · about {} s of downtime",
                        p.fingerprint,
                        p.before.len(),
                        p.after.len(),
                        p.stops.len(),
                        p.downtime_secs
                    ),
                    theme.get("ui.title"),
                ),
                2,
            );
            for x in &p.warnings {
                push(Line::styled(format!("! {x}"), theme.get("status.warn")), 2);
            }
            if !p.sets.is_empty() {
                push(Line::styled("replica sets:", theme.get("table.header")), 0);
                for c in &p.sets {
                    push(Line::raw(format!("  {c}")), 4);
                }
                for b in &p.balancers {
                    push(Line::raw(format!("  {b}")), 4);
                }
            }
            if !p.models.is_empty() {
                push(Line::styled("served models:", theme.get("table.header")), 0);
                for m in &p.models {
                    let l = model_line(m, theme);
                    push(l, 4);
                }
            }
            if !p.stops.is_empty() {
                push(Line::styled("stops:", theme.get("table.header")), 0);
                for s in &p.stops {
                    push(stop_line(s, snap, theme), 4);
                }
            }
            push(Line::styled("steps:", theme.get("table.header")), 0);
            for (i, s) in p.steps.iter().enumerate() {
                push(Line::raw(format!("  {}. {}", i + 1, s.title)), 5);
                for c in &s.commands {
                    push(
                        Line::styled(format!("       $ {c}"), theme.get("ui.hint")),
                        9,
                    );
                }
            }
        }
        Err(e) => {
            push(Line::styled("no plan:", theme.get("status.crit")), 2);
            for m in e {
                push(Line::styled(format!("  {m}"), theme.get("status.crit")), 4);
            }
        }
    }
    lines
}

/// Where a served model goes: relaunched on its new logical GPUs, or NOT relaunched and why.
fn model_line(m: &crate::domain::plan::ModelMove, theme: &Theme) -> Line<'static> {
    if m.to.is_empty() {
        Line::from(vec![
            Span::raw(format!("  {}  {} -> ", m.name, m.from.join(","))),
            Span::styled(
                format!(
                    "NOT relaunched: {}",
                    m.reason.as_deref().unwrap_or("no free logical GPU")
                ),
                theme.get("danger"),
            ),
        ])
    } else {
        Line::raw(format!(
            "  {}  {} -> relaunched on {}",
            m.name,
            m.from.join(","),
            m.to.iter()
                .map(|r| format!("logical GPU {} ({})", r.gpu_id, r.bdf))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

/// A process the plan stops: who it is, as the sample shows it now (the plan keeps its
/// identity), its GPUs and what it serves.
fn stop_line(s: &crate::domain::plan::Stop, snap: &Snapshot, theme: &Theme) -> Line<'static> {
    let gpus = s
        .gpus
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let seen = snap.processes.iter().find(|x| x.pid == s.pid);
    let serves = seen
        .and_then(|x| x.command.as_deref())
        .and_then(crate::domain::served::model_of)
        .map(|(_, m)| m);
    let what = s
        .model
        .clone()
        .or(serves)
        .map(|m| format!(" serving {m}"))
        .or_else(|| s.agent.as_ref().map(|a| format!(" ({a})")))
        .unwrap_or_default();
    Line::styled(
        format!(
            "  pid {} {} · {} · GPU {}{what}",
            s.pid,
            s.name,
            seen.and_then(|x| x.user.as_deref()).unwrap_or("user N/A"),
            if gpus.is_empty() { "kfd" } else { &gpus }
        ),
        theme.get("status.warn"),
    )
}

/// The staged compute mode as the operator reads it: `keep` says what it keeps (the selected
/// GPU's mode now, or the default it returns to) and that it is set again after a reload.
fn compute_label(st: &Staging, snap: &crate::domain::snapshot::Snapshot) -> String {
    if let Some(c) = st.compute {
        return c.to_string();
    }
    let Some(g) = snap.gpus.iter().find(|g| g.bdf == st.gpu) else {
        return "keep".into();
    };
    let Ok(p) = &st.result else {
        return g
            .compute_partition
            .map_or_else(|| "keep".into(), |c| format!("keep → {c}"));
    };
    let to = p
        .changes
        .iter()
        .find(|c| c.bdf == g.bdf)
        .map(|c| c.to.0)
        .or(g.compute_partition);
    let Some(to) = to else {
        return "keep".into();
    };
    let default = g
        .product_key
        .as_deref()
        .and_then(product::by_key)
        .zip(p.draft.memory)
        .map(|(pr, m)| pr.default_compute_for(m));
    let kept = g.compute_partition == Some(to);
    match (p.reloads(), kept) {
        (true, true) if default != Some(to) => format!("keep → {to}, re-set after the reload"),
        (_, true) => format!("keep → {to}"),
        (_, false) => format!("keep → {to} (not offered with the new memory mode: the default)"),
    }
}

/// Draws the staging overlay.
pub fn render(frame: &mut Frame<'_>, area: Rect, st: &Staging, state: &State, theme: &Theme) {
    let rect = overlay(area);
    frame.render_widget(Clear, rect);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" Stage a partition change (nothing changes until you confirm) ")
        .border_style(theme.get("danger"));
    let inner = block.inner(rect);
    let Some(snap) = &state.snapshot else {
        frame.render_widget(block, rect);
        return;
    };
    let w = usize::from(inner.width);
    let head = head_lines(st, snap, theme, w);
    let maps = maps(st, snap, theme);
    let bottom = bottom_lines(st, theme, w);
    let body = plan_lines(st, snap, theme, w);
    let b = u16::try_from(bottom.len()).unwrap_or(0).min(inner.height);
    let hh = u16::try_from(head.len()).unwrap_or(0);
    // Maps take 6 rows (label, 2 map rows, twice); only with 8 rows left for the plan.
    let map_h: u16 = if maps.is_some() && inner.height >= hh + b + 6 + 8 {
        6
    } else if maps.is_some() {
        2
    } else {
        0
    };
    let [head_r, map_r, body_r, tail_r] = ratatui::layout::Layout::vertical([
        ratatui::layout::Constraint::Length(hh),
        ratatui::layout::Constraint::Length(map_h),
        ratatui::layout::Constraint::Min(1),
        ratatui::layout::Constraint::Length(b),
    ])
    .areas(inner);
    let top = state
        .scroll
        .drawn(crate::ui::scroll::Pane::Stage, body.len(), body_r.height);
    let more = body.len() > usize::from(top) + usize::from(body_r.height);
    frame.render_widget(scroll_said(block, top > 0, more, theme), rect);
    frame.render_widget(Paragraph::new(head), head_r);
    if let Some(m) = maps {
        draw_maps(frame, map_r, map_h, &m, theme);
    }
    frame.render_widget(Paragraph::new(body).scroll((top, 0)), body_r);
    frame.render_widget(Paragraph::new(bottom), tail_r);
}

/// The staged choices: scope, compute, memory (each with its key), and the advice it came
/// from.
fn head_lines(st: &Staging, snap: &Snapshot, theme: &Theme, w: usize) -> Vec<Line<'static>> {
    let keep = |s: Option<String>| s.unwrap_or_else(|| "keep".into());
    let scope = if st.all {
        format!("all {} GPUs", snap.gpus.len())
    } else if st.also.is_empty() {
        format!("GPU {}", st.gpu)
    } else {
        format!(
            "{} GPUs ({}, {})",
            st.also.len() + 1,
            st.gpu,
            st.also.join(", ")
        )
    };
    let mut head: Vec<Line<'static>> = super::fmt::hang(
        Line::from(vec![
            Span::styled("scope ", theme.get("table.header")),
            Span::raw(format!("{scope} (a)   ")),
            Span::styled("compute ", theme.get("table.header")),
            Span::raw(format!("{} (c)   ", compute_label(st, snap))),
            Span::styled("memory ", theme.get("table.header")),
            Span::raw(format!("{} (m)", keep(st.memory.map(|m| m.to_string())))),
        ]),
        w,
        2,
    );
    // A node a DCM profile manages: the local change may be reverted (the API server said).
    if let Some(warn) = snap
        .kubelet
        .as_ref()
        .and_then(|k| k.node.as_ref())
        .and_then(crate::domain::snapshot::KubeNode::dcm_warning)
    {
        head.extend(super::fmt::hang(
            Line::styled(format!("WARNING: {warn}"), theme.get("status.warn")),
            w,
            9,
        ));
    }
    if let Some(a) = &st.advice {
        head.extend(super::fmt::hang(
            Line::styled(format!("advice: {a}"), theme.get("ui.hint")),
            w,
            8,
        ));
        // Beside the estimate, what this node measured (partop keeps it while it runs).
        let measured = st
            .measured
            .clone()
            .unwrap_or_else(|| vec!["reading what this node measured...".into()]);
        for (i, l) in measured.iter().enumerate() {
            let text = if i == 0 {
                format!("measured: {l}")
            } else {
                format!("          {l}")
            };
            head.extend(super::fmt::hang(
                Line::styled(text, theme.get("ui.hint")),
                w,
                10,
            ));
        }
    }
    head
}

/// The maps of the staged GPU: now and staged, numbered by logical GPU as the Map view numbers
/// them, each with its label.
struct Maps<'a> {
    now: PartitionMap<'a>,
    staged: Option<PartitionMap<'a>>,
    now_label: String,
    staged_label: String,
}

/// The maps of the staged GPU, when it is on the node.
fn maps<'a>(st: &Staging, snap: &'a Snapshot, theme: &'a Theme) -> Option<Maps<'a>> {
    let g = snap.gpus.iter().find(|g| g.bdf == st.gpu)?;
    let now_label = format!(
        "now     {}/{}",
        g.compute_partition.map_or("?", |c| c.name()),
        g.memory_partition.map_or("?", |m| m.name())
    );
    let planned = st
        .result
        .as_ref()
        .ok()
        .and_then(|p| p.changes.iter().find(|c| c.bdf == g.bdf).map(|c| c.to));
    let (staged_label, staged) = match (&st.result, planned) {
        (Ok(p), Some((c, m))) => {
            let first = p
                .after
                .iter()
                .filter(|r| r.bdf.starts_with(&g.bdf))
                .map(|r| r.gpu_id)
                .min()
                .unwrap_or_else(|| g.partitions.first().map_or(0, |l| l.gpu_id));
            let map = g
                .product_key
                .as_deref()
                .and_then(product::by_key)
                .map(|pr| {
                    PartitionMap::from_shapes(
                        &shapes(&pr, c, m),
                        pr.xcds,
                        m.domains(),
                        first,
                        theme,
                    )
                });
            (format!("staged  {c}/{m}"), map)
        }
        (Ok(_), None) => (
            "staged  unchanged on this GPU".to_string(),
            Some(PartitionMap::from_gpu(g, theme)),
        ),
        (Err(_), _) => (
            format!(
                "staged  {}/{}: no plan (see below)",
                st.compute.map_or_else(|| "keep".into(), |m| m.to_string()),
                st.memory.map_or_else(|| "keep".into(), |m| m.to_string())
            ),
            None,
        ),
    };
    Some(Maps {
        now: PartitionMap::from_gpu(g, theme),
        staged,
        now_label,
        staged_label,
    })
}

/// The prompt and keys, anchored at the bottom so they are never pushed off screen.
fn bottom_lines(st: &Staging, theme: &Theme, w: usize) -> Vec<Line<'static>> {
    match (&st.confirming, st.required_word()) {
        (Some(c), Some(word)) => typed_prompt(
            c,
            format!("Type {word} to apply plan {}: ", c.fingerprint),
            "enter applies · esc goes back",
            theme,
            w,
        ),
        _ => super::fmt::hang(
            Line::styled(
                "c compute · m memory · a scope · ↑↓ PgUp PgDn scroll · enter confirm · esc cancel",
                theme.get("ui.hint"),
            ),
            w,
            2,
        ),
    }
}

/// The overlay's frame, saying on its bottom edge that the plan goes on below or was scrolled.
fn scroll_said<'a>(block: Block<'a>, scrolled: bool, more: bool, theme: &Theme) -> Block<'a> {
    match (scrolled, more) {
        (_, true) => block.title_bottom(
            Line::styled(
                " ↓ more of the plan below (Down, PgDn) ",
                theme.get("status.warn"),
            )
            .right_aligned(),
        ),
        (true, false) => block.title_bottom(
            Line::styled(" ↑ plan scrolled (Up, Home) ", theme.get("ui.hint")).right_aligned(),
        ),
        _ => block,
    }
}

/// The maps with their labels in 6 rows, or the labels alone in 2 (`map_h`).
fn draw_maps(frame: &mut Frame<'_>, map_r: Rect, map_h: u16, m: &Maps<'_>, theme: &Theme) {
    let w = usize::from(map_r.width);
    if map_h == 6 {
        let mw = map_r.width.min(80);
        let row = |y: u16, h: u16| Rect {
            x: map_r.x,
            y: map_r.y + y,
            width: mw,
            height: h,
        };
        frame.render_widget(
            Paragraph::new(Line::styled(m.now_label.clone(), theme.get("ui.muted"))),
            Rect {
                width: map_r.width,
                ..row(0, 1)
            },
        );
        frame.render_widget(&m.now, row(1, 2));
        // The staged map sits one row lower than its label; its label row is the map's top.
        frame.render_widget(
            Paragraph::new(Line::styled(m.staged_label.clone(), theme.get("ui.muted"))),
            Rect {
                width: map_r.width,
                ..row(3, 1)
            },
        );
        if let Some(s) = &m.staged {
            frame.render_widget(s, row(4, 2));
        }
    } else if map_h == 2 {
        let l = vec![
            Line::styled(cut(&m.now_label, w), theme.get("ui.muted")),
            Line::styled(cut(&m.staged_label, w), theme.get("ui.muted")),
        ];
        frame.render_widget(Paragraph::new(l), map_r);
    }
}

/// Draws the progress of a repartition.
pub fn progress(frame: &mut Frame<'_>, area: Rect, p: &Progress, now_ms: u64, theme: &Theme) {
    let h = u16::try_from(p.plan.steps.len() + 6).unwrap_or(20);
    let rect = centered(area, 100, h);
    frame.render_widget(Clear, rect);
    let mut lines = Vec::new();
    // The step running: the one whose begin the journal holds last (a resumed run starts past
    // steps an earlier run did), else the first without a result.
    let open = |i: usize| p.steps.get(i).is_some_and(Option::is_none);
    let running = p
        .running
        .map(|r| r.0)
        .filter(|i| open(*i))
        .or_else(|| (0..p.plan.steps.len()).find(|i| open(*i)));
    for (i, s) in p.plan.steps.iter().enumerate() {
        let (mark, style, detail) = match p.steps.get(i).cloned().flatten() {
            Some((true, d)) => ("✓", theme.get("status.ok"), d),
            Some((false, d)) => ("✗", theme.get("status.crit"), d),
            None if running == Some(i) && p.finished.is_none() => {
                // Elapsed against the step's limit: a hang reads as a hang, not as a step.
                let took = match p.running {
                    Some((r, at, limit)) if r == i && at > 0 => {
                        let secs = now_ms.saturating_sub(at) / 1000;
                        match limit {
                            Some(l) => format!("running… {secs}s of {l}s"),
                            None => format!("running… {secs}s"),
                        }
                    }
                    _ => "running…".into(),
                };
                ("▸", theme.get("ui.title"), took)
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
        None => format!(
            "running detached (it continues if you quit or the connection drops); log {} · P hides",
            p.log
        ),
        Some(true) => format!("applied: {} logical GPUs · esc closes", p.plan.after.len()),
        Some(false) => match &p.exit {
            Some(how) => format!(
                "the apply process ended without finishing: {how} · `{}` continues it · esc closes",
                p.resume.clone().unwrap_or_else(|| format!(
                    "partop apply {} --resume",
                    p.log.trim_end_matches(".log").to_string() + ".json"
                ))
            ),
            None => format!(
                "failed: see the step above and the Log; `{}` continues after the fix · esc closes",
                p.resume.as_deref().unwrap_or("partop apply PLAN --resume")
            ),
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

/// A MIG layout as the operator reads it: `MIG off`, or its profiles counted (`2x 1g.18gb +
/// 3g.71gb`).
fn layout_said(layout: &[String]) -> String {
    if layout.is_empty() {
        return "MIG off".to_string();
    }
    let mut names: Vec<(String, usize)> = Vec::new();
    for n in layout {
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
}

/// The MIG overlay's prompt and keys (the host name being typed, with its notice).
fn mig_bottom_lines(
    st: &crate::ui::mig_stage::MigStaging,
    theme: &Theme,
    w: usize,
) -> Vec<Line<'static>> {
    let mut bottom: Vec<Line<'static>> = Vec::new();
    let prompt = match (&st.confirming, &st.result) {
        (Some(c), Ok(p)) => {
            if let Some(n) = &c.notice {
                bottom.extend(super::fmt::hang(
                    Line::styled(n.clone(), theme.get("status.warn")),
                    w,
                    2,
                ));
            }
            format!(
                "Type the host name ({}) and Enter to apply; Esc goes back: {}_",
                p.host, c.typed
            )
        }
        (_, Ok(_)) => {
            "Enter: confirm (you will type the host name) · c: next layout · ↑↓ scroll · Esc: cancel".into()
        }
        (_, Err(_)) => "c: next layout · Esc: cancel".into(),
    };
    bottom.extend(super::fmt::hang(
        Line::styled(prompt, theme.get("danger")),
        w,
        2,
    ));
    bottom
}

/// Draws the MIG staging overlay: the layout chosen, its plan (or why there is none), and the
/// confirmation being typed.
pub fn render_mig(
    frame: &mut Frame<'_>,
    area: Rect,
    st: &crate::ui::mig_stage::MigStaging,
    state: &State,
    theme: &Theme,
) {
    let rect = overlay(area);
    frame.render_widget(Clear, rect);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" Stage a MIG layout (nothing changes until you confirm) ")
        .border_style(theme.get("danger"));
    let inner = block.inner(rect);
    let w = usize::from(inner.width);
    let shown = layout_said(&st.layout());
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
    let bottom = mig_bottom_lines(st, theme, w);
    // Plans' long lines wrap rather than lose their end; the plan scrolls above the prompt.
    let body: Vec<Line<'static>> = lines
        .into_iter()
        .flat_map(|l| super::fmt::hang(l, w, 4))
        .collect();
    let b = u16::try_from(bottom.len()).unwrap_or(0).min(inner.height);
    let [body_r, tail_r] = ratatui::layout::Layout::vertical([
        ratatui::layout::Constraint::Min(1),
        ratatui::layout::Constraint::Length(b),
    ])
    .areas(inner);
    let top = state
        .scroll
        .drawn(crate::ui::scroll::Pane::Stage, body.len(), body_r.height);
    let block = if body.len() > usize::from(top) + usize::from(body_r.height) {
        block.title_bottom(
            Line::styled(" ↓ more below (Down, PgDn) ", theme.get("status.warn")).right_aligned(),
        )
    } else {
        block
    };
    frame.render_widget(block, rect);
    frame.render_widget(Paragraph::new(body).scroll((top, 0)), body_r);
    frame.render_widget(Paragraph::new(bottom), tail_r);
}

/// The typed confirmation's prompt, in the one form of a node's apply and a fleet's rollout:
/// why the last Enter did not confirm (a wrong word, a plan that changed), what to type and
/// what it does (`ask`), what has been typed, and its keys.
pub fn typed_prompt(
    c: &crate::ui::confirm::Confirming,
    ask: String,
    keys: &'static str,
    theme: &Theme,
    w: usize,
) -> Vec<Line<'static>> {
    let mut v = Vec::new();
    if let Some(n) = &c.notice {
        v.extend(super::fmt::hang(
            Line::styled(n.clone(), theme.get("status.crit")),
            w,
            2,
        ));
    }
    v.extend(super::fmt::hang(
        Line::from(vec![
            Span::styled(ask, theme.get("danger")),
            Span::raw(format!("{}▏", c.typed)),
        ]),
        w,
        2,
    ));
    v.push(Line::styled(keys, theme.get("ui.hint")));
    v
}
