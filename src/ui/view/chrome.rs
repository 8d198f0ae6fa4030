//! Header (host, SIMULATED badge, modes, each source's health and age), tabs and footer hints.

use super::fmt::age;
use crate::domain::snapshot::Health;
use crate::ui::command::Command;
use crate::ui::keymap::Section;
use crate::ui::state::{State, View};
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

/// Distinct compute/memory modes on the node (`DPX/NPS2 x8`).
fn modes(state: &State) -> String {
    let Some(s) = &state.snapshot else {
        return String::new();
    };
    let mut v: Vec<(String, usize)> = Vec::new();
    for g in &s.gpus {
        let m = g.modes_label();
        match v.iter_mut().find(|(x, _)| *x == m) {
            Some((_, n)) => *n += 1,
            None => v.push((m, 1)),
        }
    }
    v.iter()
        .map(|(m, n)| format!("{m}×{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// An interval in its largest unit, rounded (`30s`, `22m`, `2h`): the header has no room for
/// `21m 53s`.
fn interval(ms: u64) -> String {
    let s = (ms + 500) / 1000;
    match s {
        0..=89 => format!("{s}s"),
        90..=5399 => format!("{}m", (s + 30) / 60),
        _ => format!("{}h", (s + 1800) / 3600),
    }
}

/// The host line: its CPU, load and memory beside the GPUs (a data loader pinning cores or a
/// host-memory hog is a noisy neighbour too).
fn host_usage(state: &State, theme: &Theme) -> Vec<Span<'static>> {
    let Some(h) = state.snapshot.as_ref().and_then(|s| s.host_usage.as_ref()) else {
        return Vec::new();
    };
    let cpu = h
        .cpu_percent
        .map_or_else(|| "N/A".to_string(), |c| format!("{c:.0}%"));
    let busy = h.load[0] >= f64::from(h.cpus).max(1.0);
    vec![
        Span::styled("host ", theme.get("ui.muted")),
        Span::raw(format!("cpu {cpu} of {} ", h.cpus)),
        Span::styled(
            format!("load {:.2} ", h.load[0]),
            theme.get(if busy { "status.warn" } else { "ui" }),
        ),
        Span::raw(format!(
            "mem {}/{} GiB",
            super::fmt::gib(h.mem_used_bytes),
            super::fmt::gib(h.mem_total_bytes)
        )),
    ]
}

/// The worst finding, in the critical or warn style on the first line, with the key that opens
/// the Findings view: `▲ noisy neighbour on GPU 3 · 5` (a dim tab count alone is missed).
fn finding_badge(state: &State, theme: &Theme) -> Vec<Span<'static>> {
    let Some(f) = crate::domain::findings::worst(&state.findings) else {
        return Vec::new();
    };
    let style = if f.critical() {
        "status.crit"
    } else if f.severity == crate::domain::findings::Severity::Warn {
        "status.warn"
    } else {
        "finding.info"
    };
    let more = match state.findings.len() {
        1 => String::new(),
        n => format!(" +{}", n - 1),
    };
    let act = key(state, Command::ViewFindings).map_or_else(String::new, |k| format!(" · {k}"));
    vec![
        Span::styled(
            format!(" ▲ {}{more}{act} ", f.headline()),
            theme
                .get(style)
                .add_modifier(ratatui::style::Modifier::REVERSED),
        ),
        Span::raw(" "),
    ]
}

/// The top three lines: who and what; modes, host load and tags; each source's health, age
/// and last error. Each is cut with an ellipsis where it does not fit (all of it is in the
/// Map and Detail views).
pub fn header(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let mut spans = vec![Span::styled(" partop ", theme.get("ui.title"))];
    // A recording is looked at, never acted on: said first, in the danger style (reversed in
    // monochrome), so nobody takes it for the live node.
    if let Some(r) = &state.replay {
        spans.push(Span::styled(
            format!(" REPLAY {r} · look only "),
            theme
                .get("header.sim")
                .add_modifier(ratatui::style::Modifier::REVERSED),
        ));
        spans.push(Span::raw(" "));
    }
    let simulated =
        state.scenario.is_some() || state.snapshot.as_ref().is_some_and(|s| s.simulated);
    if simulated {
        let label = state.scenario.as_deref().map_or_else(
            || " SIMULATED ".to_string(),
            |s| format!(" SIMULATED: {s} "),
        );
        spans.push(Span::styled(label, theme.get("header.sim")));
        spans.push(Span::raw(" "));
    }
    spans.extend(finding_badge(state, theme));
    let mut sources = vec![Span::styled(" sources ", theme.get("ui.muted"))];
    match &state.snapshot {
        None => sources.push(Span::styled(
            "waiting for the first sample…",
            theme.get("ui.muted"),
        )),
        Some(s) => {
            // Counts and modes first; the host last (a recorded simulator has no real host).
            let host = if s.host.starts_with("simulated:") {
                String::new()
            } else {
                format!(" · {}", s.host)
            };
            spans.push(Span::raw(format!(
                "{} GPUs · {} logical{host}",
                s.gpus.len(),
                s.logical_count(),
            )));
            let mut errors = Vec::new();
            for src in &s.sources {
                let short = src.name.trim_start_matches("amd-smi ");
                // Static data is read at start and after a change, not every tick: never "late";
                // a source on its own cadence is late past twice its interval.
                let polled = src.name != crate::collect::amdsmi::reader::SRC_STATIC;
                let limit = src
                    .cadence
                    .as_ref()
                    .map_or(state.refresh_ms * 3 + 2000, |c| c.every_ms * 2 + 5000);
                let late = polled
                    && src
                        .last_ok_ms
                        .is_some_and(|t| state.now_ms.saturating_sub(t) > limit);
                let (word, style) = match (src.status, late) {
                    (Health::Ok, false) => ("ok", "status.ok"),
                    (Health::Ok | Health::Degraded, true) | (Health::Stale, _) => {
                        ("STALE", "status.stale")
                    }
                    (Health::Degraded, false) => ("warn", "status.warn"),
                    (Health::Down, _) => ("DOWN", "status.crit"),
                    // Not answered yet is not trouble: amd-smi's first read takes seconds.
                    (Health::Pending, _) => ("pending", "ui.muted"),
                };
                let a = src
                    .last_ok_ms
                    .map(|t| format!(" {}", age(state.now_ms, t)))
                    .unwrap_or_default();
                // A source on its own cadence says how often and at what cost.
                let every = src
                    .cadence
                    .as_ref()
                    .map(|c| format!(" /{} {:.2}%", interval(c.every_ms), c.core_percent))
                    .unwrap_or_default();
                sources.push(Span::styled(
                    format!("{short} {word}{a}{every}"),
                    theme.get(style),
                ));
                sources.push(Span::raw("  "));
                if let Some(e) = src.error.as_ref().filter(|_| src.status != Health::Pending) {
                    errors.push(e.clone());
                }
            }
            // A layout that is not what its modes say comes before any source error: it is
            // the node itself that is wrong.
            if let Some(f) = state
                .findings
                .iter()
                .find(|f| f.kind == crate::domain::findings::Kind::PartitionMismatch)
            {
                sources.push(Span::styled(
                    format!("! {}", f.saw),
                    theme.get("status.crit"),
                ));
            } else if let Some(e) = errors.first() {
                sources.push(Span::styled(format!("! {e}"), theme.get("status.warn")));
            }
        }
    }
    let mut second = vec![Span::raw(" ")];
    let m = modes(state);
    if !m.is_empty() {
        second.push(Span::styled(m, theme.get("ui.title")));
        second.push(Span::raw("  "));
    }
    // A node a DCM profile manages: a local change may be reverted by DCM (from the API
    // server; escaped and bounded by `KubeNode::dcm_label`).
    if let Some(d) = state
        .snapshot
        .as_ref()
        .and_then(|s| s.kubelet.as_ref())
        .and_then(|k| k.node.as_ref())
        .and_then(crate::domain::snapshot::KubeNode::dcm_label)
    {
        second.push(Span::styled(format!("{d}  "), theme.get("status.warn")));
    }
    // What the operator must know first (a theme not used, the node a fleet view opened).
    if let Some(t) = &state.theme_notice {
        second.push(Span::styled(format!("{t}  "), theme.get("status.warn")));
    }
    second.extend(host_usage(state, theme));
    if !state.tagged_gpus.is_empty() {
        second.push(Span::styled(
            format!("  tagged {} GPU(s)", state.tagged_gpus.len()),
            theme.get("status.warn"),
        ));
    }
    if state.read_only {
        second.push(Span::styled("  read-only", theme.get("ui.muted")));
    }
    // What permissions hid: said in the header, never shown as an empty node.
    if let Some(h) = state.snapshot.as_ref().and_then(|s| s.hidden.as_ref()) {
        second.push(Span::styled(
            format!(
                "  hidden: {} GPU process(es) via KFD only, {} others' files · run as root",
                h.processes, h.unreadable
            ),
            theme.get("status.warn"),
        ));
    }
    let w = usize::from(area.width);
    let lines = vec![
        super::fmt::fit(spans, w),
        super::fmt::fit(second, w),
        super::fmt::fit(sources, w),
    ];
    frame.render_widget(Paragraph::new(lines), area);
}

/// The tab line.
pub fn tabs(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    // Each tab shows the key bound to its view (from the keymap), and short titles when the
    // long ones do not fit.
    // Narrower still (findings counted on an 80-column screen): one space between tabs.
    let titles = |short: bool, tight: bool| -> Vec<String> {
        View::ALL
            .iter()
            .map(|v| {
                let k = key(state, v.command()).unwrap_or_default();
                let t = if short { v.short_title() } else { v.title() };
                let t = if *v == View::Findings && !state.findings.is_empty() {
                    format!("{k} {t} ({})", state.findings.len())
                } else {
                    format!("{k} {t}")
                };
                if tight {
                    format!("{t} ")
                } else {
                    format!(" {t} ")
                }
            })
            .collect()
    };
    let fits = |ts: &[String]| {
        ts.iter().map(|t| t.chars().count()).sum::<usize>() <= usize::from(area.width)
    };
    let chosen = [(false, false), (true, false), (true, true)]
        .into_iter()
        .map(|(short, tight)| titles(short, tight))
        .find(|ts| fits(ts))
        .unwrap_or_else(|| titles(true, true));
    let mut spans = Vec::new();
    let mut x = area.x;
    for (v, title) in View::ALL.iter().zip(chosen) {
        let style = if *v == state.view {
            theme.get("ui.tab.active")
        } else {
            theme.get("ui.tab")
        };
        let w = u16::try_from(title.chars().count()).unwrap_or(u16::MAX);
        state
            .hits
            .tab(area.y, x, x.saturating_add(w).min(area.right()), *v);
        x = x.saturating_add(w);
        spans.push(Span::styled(title, style));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// Hint keys for a command in the current sections.
fn key(state: &State, c: Command) -> Option<String> {
    [state.view.section(), Section::Global]
        .iter()
        .find_map(|s| {
            state
                .keymap
                .keys_for(*s, c)
                .into_iter()
                .min_by_key(|k| (k.chars().count(), k.clone()))
        })
}

/// What `q` (back) does here: go back from a drill-down, or quit, saying when quitting stops
/// the simulated node partop started.
fn back_label(state: &State) -> &'static str {
    let drilled = state.modals().next().is_some()
        || state.view == View::Detail
        || (state.view == View::Journal && state.journal_open);
    match (drilled, state.stops_sim) {
        (true, _) => "back",
        (false, true) => "quit (stops the sim)",
        (false, false) => "quit",
    }
}

/// This view's own commands, whose hints come first in the footer (`/` where it filters).
fn view_commands(state: &State) -> Vec<Command> {
    match state.view {
        View::Processes => vec![
            Command::Filter,
            Command::CycleSort,
            Command::CycleGroup,
            Command::TagProcess,
            Command::KillProcess,
        ],
        View::Models => vec![
            Command::ModelRestart,
            Command::ModelStop,
            Command::ModelAddToRegistry,
            Command::ModelAdvise,
            Command::Filter,
        ],
        View::Gpus => vec![Command::StageChange, Command::TagGpu, Command::Filter],
        View::History => vec![Command::StageChange, Command::TagGpu, Command::Filter],
        View::Overview => vec![Command::StageChange, Command::TagGpu],
        View::Findings => vec![Command::Filter],
        View::Journal if !state.journal_open => vec![Command::Filter],
        _ => vec![],
    }
}

/// The main keys: this view's own commands first, then the general ones, as many whole hints
/// as fit in `width`, and the filter when there is one.
fn hints(state: &State, theme: &Theme, width: u16) -> Line<'static> {
    let mut cmds = view_commands(state);
    cmds.extend([
        Command::Back,
        Command::ToggleHelp,
        Command::NextView,
        Command::OpenDetail,
    ]);
    // (key, label) of each hint that has a key here.
    let hints: Vec<(Command, String, String)> = cmds
        .into_iter()
        .filter_map(|c| {
            let k = key(state, c)?;
            let label = match c {
                Command::Back => back_label(state).to_string(),
                _ => c.name().trim_start_matches("model_").replace('_', " "),
            };
            Some((c, k, label))
        })
        .collect();
    // Hints apart by `│` (one cell, so as many fit as without), so a key is never read
    // with the word before it. `q` is
    // always shown (what it does changes: back, quit, quit stopping the sim); the others
    // in order, as many whole ones as fit beside it.
    let sep = "│";
    let hint_width = |(_, k, l): &(Command, String, String)| {
        sep.chars().count() + k.chars().count() + 1 + l.chars().count()
    };
    // The first hint has no separator before it: credit it back.
    let mut room = usize::from(width).saturating_sub(1) + sep.chars().count();
    let mut shown = vec![false; hints.len()];
    let index = |back: bool| {
        hints
            .iter()
            .enumerate()
            .filter(move |(_, h)| (h.0 == Command::Back) == back)
            .map(|(i, _)| i)
    };
    let back_first = index(true).chain(index(false));
    for i in back_first {
        let w = hint_width(&hints[i]);
        if w > room {
            break;
        }
        shown[i] = true;
        room -= w;
    }
    let mut spans = vec![Span::raw(" ")];
    for (h, _) in hints.iter().zip(&shown).filter(|(_, s)| **s) {
        if spans.len() > 1 {
            spans.push(Span::styled(sep, theme.get("ui.muted")));
        }
        spans.push(Span::styled(format!("{} ", h.1), theme.get("ui.title")));
        spans.push(Span::styled(h.2.clone(), theme.get("ui.hint")));
    }
    if !state.filter.is_empty() {
        spans.push(Span::styled(
            format!("  filter: {}", state.filter),
            theme.get("status.warn"),
        ));
    }
    Line::from(spans)
}

/// The bottom line: the filter being typed, or the main keys.
pub fn footer(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let notice = state
        .notice
        .as_ref()
        .filter(|(_, at)| state.now_ms.saturating_sub(*at) < 8_000);
    let line = if let Some((text, _)) = notice {
        Line::styled(format!(" {text}"), theme.get("status.warn"))
    } else if let (Some(u), false) = (&state.unfinished, state.editing_filter) {
        // An apply that did not finish outranks every hint: the node is half-changed. The
        // whole line is its own; where the command that continues it does not fit, the line
        // says where to read it whole (never cut mid-command).
        let full = format!(" UNFINISHED APPLY {u} ");
        let text = if full.chars().count() <= usize::from(area.width) {
            full
        } else {
            " UNFINISHED APPLY · 7 Journal shows the command that continues it ".to_string()
        };
        Line::styled(
            text,
            theme
                .get("status.crit")
                .add_modifier(ratatui::style::Modifier::REVERSED),
        )
    } else if state.editing_filter {
        Line::from(vec![
            Span::styled(" filter: ", theme.get("ui.title")),
            Span::raw(state.filter.clone()),
            Span::styled("▏  Enter keep · Esc clear", theme.get("ui.hint")),
        ])
    } else {
        hints(state, theme, area.width)
    };
    frame.render_widget(Paragraph::new(line), area);
}
