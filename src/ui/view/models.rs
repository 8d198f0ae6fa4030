//! The Models view: every served model (registered or discovered) with its logical GPUs,
//! state, queue, KV cache, token rate and restarts; under it, the selected model's reason and
//! log tail. Also the confirmation overlay of a model action.

use super::fmt::{cut, mark, offset};
use crate::domain::model_status::{ModelState, ServedModel};
use crate::ui::state::{ModelAsk, State, View};
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};

/// Every word a model's row shows: what `/` matches in Models.
pub fn words(m: &ServedModel) -> Vec<String> {
    vec![
        m.name.clone(),
        m.state.label().to_string(),
        m.gpus_label(),
        crate::report::figure(m.running, false),
        crate::report::figure(m.waiting, false),
        crate::report::figure(m.kv_cache, true),
        crate::report::figure(m.tokens_per_sec, false),
        m.restarts.to_string(),
        m.port.map_or_else(|| "-".into(), |p| p.to_string()),
        m.latency
            .as_ref()
            .map_or_else(|| "-".into(), |l| l.ttft.pair_text()),
        m.latency
            .as_ref()
            .map_or_else(|| "-".into(), |l| l.e2e.pair_text()),
        m.model.clone(),
        if m.spec.is_some() { "" } else { "(discovered)" }.to_string(),
    ]
}

/// Draws the view.
/// A cluster-served model's line: `kserve llm/llama-chat  replicas 2/3 ready  GPU 0,1  pods …`
/// (every word from the API server escaped).
fn cluster_line(m: &crate::domain::snapshot::ClusterModel) -> String {
    let esc = crate::domain::text::escape_controls;
    let gpus = if m.gpus.is_empty() {
        "-".to_string()
    } else {
        m.gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        " {} {}/{}  replicas {} ready  GPU {gpus}  pods here {}",
        esc(&m.kind),
        esc(&m.namespace),
        esc(&m.name),
        m.replicas(),
        esc(&m.pods_here.join(","))
    )
}

pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let models = state
        .snapshot
        .as_ref()
        .map(|s| s.models.as_slice())
        .unwrap_or_default();
    let [top, bottom] = Layout::vertical([Constraint::Min(4), Constraint::Length(9)]).areas(area);
    let block = Block::default()
        .borders(Borders::ALL)
        // Read-only (and replays) offer no action: the title lists only what the keys can do.
        .title(if state.read_only {
            " Models (read-only: no restart, stop or add) "
        } else {
            " Models (R restart · x stop · a add to registry · A advise a layout) "
        })
        .border_style(theme.get("ui.border"));
    // Models the cluster serves from pods on this node (KServe, vLLM deployments), from the
    // API server: name, namespace, replicas healthy, their GPUs here.
    let cluster = state
        .snapshot
        .as_ref()
        .and_then(|s| s.kubelet.as_ref())
        .map(|k| k.models.as_slice())
        .unwrap_or_default();
    if models.is_empty() && cluster.is_empty() {
        frame.render_widget(
            Paragraph::new("No model server found: none runs (vLLM, SGLang, llama.cpp, TGI) and models.toml lists none (see docs/models.md).")
                .wrap(Wrap { trim: true })
                .block(block)
                .style(theme.get("ui.muted")),
            area,
        );
        return;
    }
    let w = usize::from(top.width.saturating_sub(2));
    // Each replica set heads the table: healthy / total and its members' tokens/s summed
    // (each member's own is on its row).
    let sets = crate::domain::replicas::summaries(models);
    let mut heads_text: Vec<String> = sets.iter().map(|set| format!(" set {set}")).collect();
    heads_text.extend(cluster.iter().map(cluster_line));
    let heads = heads_text
        .len()
        .min(usize::from(top.height.saturating_sub(4)) / 2)
        .max(usize::from(models.is_empty()) * heads_text.len());
    let visible = usize::from(top.height.saturating_sub(3)).saturating_sub(heads);
    let order = state.order(View::Models);
    let at = order
        .iter()
        .position(|i| *i == state.model_sel)
        .unwrap_or(0);
    let first = offset(at, visible);
    state.hits.rows(crate::ui::hit::Rows {
        y: top.y + 2 + u16::try_from(heads).unwrap_or(0),
        height: u16::try_from(visible).unwrap_or(0),
        x: (top.x + 1, top.right().saturating_sub(1)),
        first,
        stride: 1,
    });
    let mut lines = vec![Line::styled(
        cut(
            &format!(
                " {:<16} {:<9} {:<9} {:>4} {:>4} {:>4} {:>6} {:>3} {:>6} {:>11} {:>11}  MODEL",
                "NAME",
                "STATE",
                "GPU",
                "RUN",
                "WAIT",
                "KV",
                "TOK/S",
                "RST",
                "PORT",
                "TTFT p50/99",
                "E2E p50/99"
            ),
            w,
        ),
        theme.get("table.header"),
    )];
    for h in heads_text.iter().take(heads) {
        lines.push(Line::styled(cut(h, w), theme.get("ui.title")));
    }
    for (i, m) in order
        .iter()
        .skip(first)
        .take(visible)
        .filter_map(|i| Some((*i, models.get(*i)?)))
    {
        let gpus = m.gpus_label();
        let state_style = match m.state {
            ModelState::Healthy => theme.get("status.ok"),
            ModelState::Starting => theme.get("status.warn"),
            ModelState::Unhealthy | ModelState::Stopped => theme.get("status.crit"),
            ModelState::Unknown => theme.get("status.stale"),
        };
        let reg = if m.spec.is_some() {
            ""
        } else {
            " (discovered)"
        };
        let row = if i == state.model_sel {
            theme.get("table.row.selected")
        } else {
            theme.get("ui")
        };
        let (ttft, e2e) = m.latency.as_ref().map_or_else(
            || ("-".to_string(), "-".to_string()),
            |l| (l.ttft.pair_text(), l.e2e.pair_text()),
        );
        let rest = format!(
            " {:<9} {:>4} {:>4} {:>4} {:>6} {:>3} {:>6} {:>11} {:>11}  {}{reg}",
            cut(&gpus, 9),
            crate::report::figure(m.running, false),
            crate::report::figure(m.waiting, false),
            crate::report::figure(m.kv_cache, true),
            crate::report::figure(m.tokens_per_sec, false),
            m.restarts,
            m.port.map_or_else(|| "-".into(), |p| p.to_string()),
            cut(&ttft, 11),
            cut(&e2e, 11),
            m.model
        );
        lines.push(Line::from(vec![
            Span::raw(mark(i == state.model_sel)),
            Span::styled(format!("{:<16} ", cut(&m.name, 16)), row),
            Span::styled(format!("{:<9}", m.state.label()), state_style),
            Span::styled(cut(&rest, w.saturating_sub(27)), row),
        ]));
    }
    frame.render_widget(Paragraph::new(lines).block(block), top);
    let Some(m) = models.get(state.model_sel) else {
        return;
    };
    let bw = usize::from(bottom.width.saturating_sub(2));
    let mut info = Vec::new();
    let how = m.spec.as_ref().map_or_else(
        || "not in the registry: `a` adds it".to_string(),
        |s| format!("registry {} · needs {:.1} GiB", s.defined_at, s.memory_gb),
    );
    info.push(Line::raw(cut(
        &format!(
            "{} · {} · {how}{}",
            m.server.as_deref().unwrap_or("server ?"),
            if m.bdfs.is_empty() {
                "no GPU".to_string()
            } else {
                m.bdfs.join(",")
            },
            m.reason
                .as_ref()
                .map_or_else(String::new, |r| format!(" · {r}"))
        ),
        bw,
    )));
    // Latency over the last window, each figure N/A with its reason.
    info.push(Line::raw(cut(
        &m.latency.as_ref().map_or_else(
            || "latency: the server exports no TTFT or end-to-end histogram".to_string(),
            |l| format!("latency {}", l.summary()),
        ),
        bw,
    )));
    let n = usize::from(bottom.height.saturating_sub(4));
    if m.log_tail.is_empty() {
        info.push(Line::styled(
            m.log.as_ref().map_or_else(
                || "no log known (its stdout is not a file)".to_string(),
                |l| format!("{l}: empty or unreadable"),
            ),
            theme.get("ui.muted"),
        ));
    }
    for l in m.log_tail.iter().rev().take(n).rev() {
        info.push(Line::styled(cut(l, bw), theme.get("ui.muted")));
    }
    frame.render_widget(
        Paragraph::new(info).block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(
                    " {} · log {} ",
                    m.name,
                    m.log.as_deref().unwrap_or("-")
                ))
                .border_style(theme.get("ui.border")),
        ),
        bottom,
    );
}

/// Draws the confirmation of a model action (Cancel focused by default).
pub fn ask(frame: &mut Frame<'_>, area: Rect, a: &ModelAsk, theme: &Theme) {
    let mut lines: Vec<Line<'_>> = a.lines.iter().map(|l| Line::raw(l.clone())).collect();
    lines.push(Line::raw(""));
    lines.push(Line::from(vec![
        Span::raw("  "),
        super::fmt::button(
            "Cancel",
            a.focus == crate::ui::confirm::Focus::Cancel,
            false,
            theme,
        ),
        Span::raw("   "),
        super::fmt::button(
            "Confirm",
            a.focus == crate::ui::confirm::Focus::Confirm,
            true,
            theme,
        ),
    ]));
    lines.push(Line::styled(
        "tab switches · enter presses · esc cancels · journaled",
        theme.get("ui.hint"),
    ));
    super::fmt::dialog(frame, area, &a.title, lines, theme);
}
