//! Processes: pid, user, name, logical GPU(s), VRAM, GTT, CU%, start time, container or unit,
//! command line; sorted, filtered and grouped as the state's derived rows say.

use super::fmt::{cut, mem, offset};
use crate::domain::snapshot::Process;
use crate::ui::state::{Group, ProcRow, SortKey, State};
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::Span;
use ratatui::widgets::{Block, Borders, Cell, Row, Table};

fn started(now: u64, p: &Process) -> String {
    p.started_at_ms
        .map_or_else(|| "N/A".into(), |t| super::fmt::age(now, t))
}

/// The name, marked `*` when amd-smi's list was read and does not list the process, and `@`
/// for a node agent.
fn name_cell(p: &Process, amdsmi_lists: bool) -> String {
    let mark = if p.agent.is_some() {
        "@"
    } else if amdsmi_lists && !p.listed_by_amdsmi {
        "*"
    } else {
        ""
    };
    format!("{mark}{}", p.name.as_deref().unwrap_or("N/A"))
}

fn owner(p: &Process) -> String {
    p.k8s_pod_uid
        .as_ref()
        .map(|x| format!("pod {}", cut(x, 8)))
        .or_else(|| p.container_id.as_ref().map(|c| format!("ctr {c}")))
        .or_else(|| p.systemd_unit.clone())
        .unwrap_or_default()
}

/// Draws the process table.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let Some(snap) = &state.snapshot else { return };
    let lists = snap.amdsmi_lists_processes();
    let wide = area.width >= 120;
    let visible = usize::from(area.height.saturating_sub(3));
    let first = offset(state.proc_sel, visible);
    let mut rows = Vec::new();
    for (i, r) in state.rows.iter().enumerate().skip(first).take(visible) {
        let style = if i == state.proc_sel {
            theme.get("table.row.selected")
        } else {
            theme.get("ui")
        };
        match r {
            ProcRow::Heading(h) => rows.push(
                Row::new(vec![Cell::from(Span::styled(
                    format!("▸ {h}"),
                    theme.get("ui.title"),
                ))])
                .style(style),
            ),
            ProcRow::Process { index, gpu } => {
                let Some(p) = snap.processes.get(*index) else {
                    continue;
                };
                let uses: Vec<_> = p
                    .gpus
                    .iter()
                    .filter(|g| gpu.is_none_or(|x| x == g.gpu_id))
                    .collect();
                // Attached-only GPUs (HIP opens every visible one) are left out; /dev/kfd alone is "kfd".
                let active: Vec<String> = uses
                    .iter()
                    .filter(|g| !g.attached_only())
                    .map(|g| g.gpu_id.to_string())
                    .collect();
                let gpus = if !active.is_empty() {
                    active.join(",")
                } else if !uses.is_empty() {
                    format!(
                        "({})",
                        uses.iter()
                            .map(|g| g.gpu_id.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    )
                } else if p.holds_kfd {
                    "kfd".to_string()
                } else {
                    String::new()
                };
                let vram: u64 = uses.iter().filter_map(|g| g.vram_bytes).sum();
                let gtt: u64 = uses.iter().filter_map(|g| g.gtt_bytes).sum();
                let cu = uses
                    .iter()
                    .filter_map(|g| g.cu_percent)
                    .fold(None, |a: Option<f64>, c| Some(a.unwrap_or(0.0).max(c)));
                let has_vram = uses.iter().any(|g| g.vram_bytes.is_some());
                let mut cells = vec![
                    Cell::from(format!(
                        "{}{:>6}",
                        if state.tagged.contains(&p.pid) {
                            "+"
                        } else {
                            " "
                        },
                        p.pid
                    )),
                    Cell::from(cut(p.user.as_deref().unwrap_or("N/A"), 10)),
                    Cell::from(cut(&name_cell(p, lists), 15)),
                    Cell::from(gpus),
                    Cell::from(if has_vram {
                        format!("{:>6}", mem(vram))
                    } else {
                        "   N/A".into()
                    }),
                ];
                if wide {
                    cells.push(Cell::from(format!("{:>6}", mem(gtt))));
                }
                cells.push(Cell::from(
                    cu.map_or_else(|| "N/A".into(), |c| format!("{c:.0}%")),
                ));
                if wide {
                    cells.push(Cell::from(started(state.now_ms, p)));
                    cells.push(Cell::from(cut(&owner(p), 18)));
                }
                cells.push(Cell::from(p.command.clone().unwrap_or_default()));
                rows.push(Row::new(cells).style(style));
            }
        }
    }
    let arrow = if state.sort_desc { "▼" } else { "▲" };
    let h = |k: SortKey, name: &str| {
        if state.sort == k {
            format!("{name}{arrow}")
        } else {
            name.to_string()
        }
    };
    let (header, widths) = if wide {
        (
            vec![
                h(SortKey::Pid, "PID"),
                h(SortKey::User, "USER"),
                h(SortKey::Name, "NAME"),
                h(SortKey::Gpu, "GPU"),
                h(SortKey::Vram, "VRAM"),
                h(SortKey::Gtt, "GTT"),
                h(SortKey::Cu, "CU%"),
                h(SortKey::Start, "UP"),
                "CONTAINER/UNIT".into(),
                "COMMAND".into(),
            ],
            vec![
                Constraint::Length(7),
                Constraint::Length(10),
                Constraint::Length(15),
                Constraint::Length(8),
                Constraint::Length(7),
                Constraint::Length(7),
                Constraint::Length(5),
                Constraint::Length(5),
                Constraint::Length(18),
                Constraint::Min(10),
            ],
        )
    } else {
        (
            vec![
                h(SortKey::Pid, "PID"),
                h(SortKey::User, "USER"),
                h(SortKey::Name, "NAME"),
                h(SortKey::Gpu, "GPU"),
                h(SortKey::Vram, "VRAM"),
                h(SortKey::Cu, "CU%"),
                "COMMAND".into(),
            ],
            vec![
                Constraint::Length(7),
                Constraint::Length(8),
                Constraint::Length(12),
                Constraint::Length(6),
                Constraint::Length(7),
                Constraint::Length(5),
                Constraint::Min(8),
            ],
        )
    };
    let group = match state.group {
        Group::None => "",
        Group::Gpu => " · by GPU",
        Group::Model => " · by model",
    };
    let shown = state
        .rows
        .iter()
        .filter(|r| matches!(r, ProcRow::Process { .. }))
        .count();
    let filter = if state.filter.is_empty() {
        String::new()
    } else {
        format!(" · filter {:?}", state.filter)
    };
    let star = if snap.amdsmi_lists_processes() {
        " · * not listed by amd-smi"
    } else {
        ""
    };
    let title = format!(
        " Processes: {shown} of {}{group}{filter}{star} · @ node agent ",
        snap.processes.len()
    );
    let t = Table::new(rows, widths)
        .header(Row::new(header).style(theme.get("table.header")))
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(title)
                .border_style(theme.get("ui.border")),
        );
    frame.render_widget(t, area);
    if snap.processes.is_empty() {
        let msg = "No process holds a GPU (as amd-smi sees it).";
        frame.render_widget(
            ratatui::widgets::Paragraph::new(msg).style(theme.get("ui.muted")),
            Rect {
                x: area.x + 2,
                y: area.y + 2,
                width: area.width.saturating_sub(4),
                height: 1,
            },
        );
    }
}
