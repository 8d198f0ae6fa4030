//! Processes: pid, user, name, logical GPU(s), VRAM, GTT, CU%, start time, container or unit
//! (the pod on a Kubernetes node), command line; sorted, filtered and grouped as the state's derived rows say.

use super::fmt::{cut, mark, mem, offset};
use crate::domain::snapshot::{Process, Snapshot};
use crate::ui::state::{Col, Group, ProcRow, State, View, columns};
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

fn owner(p: &Process, kubernetes: bool) -> String {
    // On a Kubernetes node the column is the pod, in the cluster's terms.
    if kubernetes {
        return p
            .pod
            .as_ref()
            .map(|x| format!("{}/{}", x.label(), x.container))
            .unwrap_or_default();
    }
    p.k8s_pod_uid
        .as_ref()
        .map(|x| format!("pod {}", cut(x, 8)))
        .or_else(|| p.container_id.as_ref().map(|c| format!("ctr {c}")))
        .or_else(|| p.systemd_unit.clone())
        .unwrap_or_default()
}

/// Run time: "45s", "12m", "3h05", "4d02".
pub fn uptime(secs: u64) -> String {
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7199 => format!("{}m", secs / 60),
        7200..=172_799 => format!("{}h{:02}", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{:02}", secs / 86_400, secs % 86_400 / 3600),
    }
}

fn width(c: Col, pid_w: u16) -> Constraint {
    Constraint::Length(match c {
        Col::Pid => pid_w,
        Col::User => 8,
        Col::Name => 14,
        Col::Gpu => 6,
        Col::Vram | Col::Gtt | Col::Rss => 7,
        Col::Cu => 4,
        Col::Cpu => 5,
        Col::Up => 5,
        Col::Owner => 18,
        Col::Busy => 5,
        Col::Model => 16,
        Col::Command => return Constraint::Min(8),
    })
}

fn title(c: Col) -> &'static str {
    match c {
        Col::Pid => "PID",
        Col::User => "USER",
        Col::Name => "NAME",
        Col::Gpu => "GPU",
        Col::Vram => "VRAM",
        Col::Gtt => "GTT",
        Col::Cu => "CU%",
        Col::Cpu => "CPU%",
        Col::Rss => "RSS",
        Col::Up => "UP",
        Col::Owner => "CONTAINER/UNIT",
        Col::Busy => "GPU%",
        Col::Model => "MODEL",
        Col::Command => "COMMAND",
    }
}

/// What a process row's cells depend on besides the process.
struct Shown<'s> {
    state: &'s State,
    /// amd-smi lists processes (the `*` of those it does not).
    lists: bool,
    /// A Kubernetes node (the owner is the pod).
    kubernetes: bool,
    /// Room for the command line.
    cmd_w: usize,
    /// The row is the selection.
    selected: bool,
}

impl Shown<'_> {
    /// The text of column `c` of process `p`'s row, `w` wide (the uses of GPU `gpu` alone when
    /// grouped by GPU).
    fn cell(&self, p: &Process, gpu: Option<u32>, c: Col, w: usize) -> String {
        let state = self.state;
        let uses: Vec<_> = p
            .gpus
            .iter()
            .filter(|g| gpu.is_none_or(|x| x == g.gpu_id))
            .collect();
        let vram: u64 = uses.iter().filter_map(|g| g.vram_bytes).sum();
        match c {
            Col::Pid => format!(
                "{}{}{:>w$}",
                mark(self.selected),
                if state.tagged.contains(&p.pid) {
                    "+"
                } else {
                    " "
                },
                p.pid,
                w = w.saturating_sub(2)
            ),
            Col::User => cut(p.user.as_deref().unwrap_or("N/A"), w),
            Col::Name => cut(&name_cell(p, self.lists), w),
            Col::Gpu => cut(&gpus_text(&uses, p), w),
            Col::Vram if uses.iter().any(|g| g.vram_bytes.is_some()) => {
                format!("{:>7}", mem(vram))
            }
            Col::Vram => "    N/A".into(),
            Col::Gtt => format!("{:>7}", mem(uses.iter().filter_map(|g| g.gtt_bytes).sum())),
            Col::Cu => uses
                .iter()
                .filter_map(|g| g.cu_percent)
                .fold(None, |a: Option<f64>, c| Some(a.unwrap_or(0.0).max(c)))
                .map_or_else(|| "N/A".into(), |c| format!("{c:>3.0}%")),
            Col::Cpu => p
                .cpu_percent
                .map_or_else(|| "  N/A".into(), |c| format!("{c:>4.0}%")),
            Col::Rss => p
                .rss_bytes
                .map_or_else(|| "    N/A".into(), |b| format!("{:>7}", mem(b))),
            Col::Up => p
                .running_secs
                .map_or_else(|| started(state.now_ms, p), uptime),
            Col::Owner => cut(&owner(p, self.kubernetes), w),
            // Where no engine counts its work (ROCm compute): a dash, not 0 % (Detail says
            // why).
            Col::Busy => p
                .engine_busy_percent()
                .map_or_else(|| "    —".into(), |b| format!("{b:>4.0}%")),
            Col::Model => cut(&state.model_of(p).unwrap_or_default(), w),
            Col::Command => cut(p.command.as_deref().unwrap_or_default(), self.cmd_w),
        }
    }
}

/// The GPU column: the logical GPUs a process uses; attached-only ones (HIP opens every
/// visible one) in parentheses when it uses none, "kfd" when it holds /dev/kfd alone.
fn gpus_text(uses: &[&crate::domain::snapshot::GpuUse], p: &Process) -> String {
    let ids = |active: bool| {
        uses.iter()
            .filter(|g| !active || !g.attached_only())
            .map(|g| g.gpu_id.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let active = ids(true);
    if !active.is_empty() {
        active
    } else if !uses.is_empty() {
        format!("({})", ids(false))
    } else if p.holds_kfd {
        "kfd".to_string()
    } else {
        String::new()
    }
}

/// Every word a process's row shows, in every column of the widest table, uncut: what `/`
/// matches in Processes (with the fields the filter always searched).
pub fn words(state: &State, p: &Process) -> Vec<String> {
    let snap = state.snapshot.as_deref();
    let row = Shown {
        state,
        lists: snap.is_some_and(crate::domain::snapshot::Snapshot::amdsmi_lists_processes),
        kubernetes: snap.is_some_and(|s| s.kubelet.is_some()),
        cmd_w: usize::MAX,
        selected: false,
    };
    columns(u16::MAX)
        .iter()
        .map(|c| row.cell(p, None, *c, 4096).trim().to_string())
        .collect()
}

/// The PID column's width: the longest pid shown (at least 5), the selection and tag marks.
fn pid_width(snap: &Snapshot) -> u16 {
    let w = snap
        .processes
        .iter()
        .map(|p| p.pid.to_string().len())
        .max()
        .unwrap_or(5)
        .max(5);
    u16::try_from(w + 2).unwrap_or(9)
}

/// What is left for the command line, which is cut with an ellipsis (Enter shows it whole).
fn command_width(cols: &[Col], pid_w: u16, area: Rect) -> usize {
    let fixed: usize = cols
        .iter()
        .map(|c| match width(*c, pid_w) {
            Constraint::Length(n) => usize::from(n) + 1,
            _ => 0,
        })
        .sum();
    usize::from(area.width.saturating_sub(2)).saturating_sub(fixed)
}

/// A heading spans the whole row (a table cell would cut it to its column): drawn over the
/// empty row the table leaves for it. (Row on screen, text, style.)
type Heading = (usize, String, ratatui::style::Style);

/// The table's rows from `first`, `visible` of them; headings apart.
fn table_rows<'a>(
    state: &State,
    theme: &Theme,
    cols: &[Col],
    (pid_w, cmd_w): (u16, usize),
    (first, visible): (usize, usize),
) -> (Vec<Row<'a>>, Vec<Heading>) {
    let Some(snap) = &state.snapshot else {
        return (Vec::new(), Vec::new());
    };
    let cell_w = |c: Col| match width(c, pid_w) {
        Constraint::Length(n) => usize::from(n),
        _ => usize::MAX,
    };
    let mut rows = Vec::new();
    let mut headings = Vec::new();
    for (i, r) in state.rows.iter().enumerate().skip(first).take(visible) {
        let selected = i == state.proc_sel;
        let style = theme.get(if selected { "table.row.selected" } else { "ui" });
        match r {
            ProcRow::Heading(h) => {
                headings.push((i - first, format!("{}▸ {h}", mark(selected)), style));
                rows.push(Row::new(Vec::<Cell<'_>>::new()).style(style));
            }
            ProcRow::Process { index, gpu } => {
                let Some(p) = snap.processes.get(*index) else {
                    continue;
                };
                let row = Shown {
                    state,
                    lists: snap.amdsmi_lists_processes(),
                    kubernetes: snap.kubelet.is_some(),
                    cmd_w,
                    selected,
                };
                let cells: Vec<Cell<'_>> = cols
                    .iter()
                    .map(|c| Cell::from(row.cell(p, *gpu, *c, cell_w(*c))))
                    .collect();
                // Another user's process seen through KFD (its files hidden): dimmed, as
                // nvitop shows processes it cannot fully see.
                let style = if p.files_hidden && !selected {
                    theme.get("ui.muted")
                } else {
                    style
                };
                rows.push(Row::new(cells).style(style));
            }
        }
    }
    (rows, headings)
}

/// The header: each column's title, the sorted one with its arrow (POD for the owner on a
/// Kubernetes node).
fn header(state: &State, cols: &[Col], kubernetes: bool) -> Vec<String> {
    let arrow = if state.sort_desc { "▼" } else { "▲" };
    cols.iter()
        .map(|c| {
            let t = if kubernetes && *c == Col::Owner {
                "POD"
            } else {
                title(*c)
            };
            if c.sort() == Some(state.sort) {
                format!("{t}{arrow}")
            } else {
                t.to_string()
            }
        })
        .collect()
}

/// The title: rows shown of all, the sort (always said, even when its column is not shown at
/// this width), the grouping, the filter, what the marks mean.
fn table_title(state: &State, snap: &Snapshot) -> String {
    let arrow = if state.sort_desc { "▼" } else { "▲" };
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
    let filter = state.filter_of(View::Processes);
    let filter = if filter.is_empty() {
        String::new()
    } else {
        format!(" · filter {filter:?}")
    };
    let star = if snap.amdsmi_lists_processes() {
        " · * not listed by amd-smi"
    } else {
        ""
    };
    format!(
        " Processes: {shown} of {} · sort {}{arrow}{group}{filter}{star} · @ agent ",
        snap.processes.len(),
        state.sort.label(),
    )
}

/// Draws the headings over the rows the table left empty for them.
fn draw_headings(frame: &mut Frame<'_>, area: Rect, theme: &Theme, headings: Vec<Heading>) {
    for (row, text, style) in headings {
        let y = area.y + 2 + u16::try_from(row).unwrap_or(0);
        let w = area.width.saturating_sub(2);
        frame.render_widget(
            ratatui::widgets::Paragraph::new(Span::styled(
                cut(&text, usize::from(w)),
                theme.get("ui.title"),
            ))
            .style(style),
            Rect {
                x: area.x + 1,
                y,
                width: w,
                height: 1,
            },
        );
    }
}

/// Draws the process table.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let Some(snap) = &state.snapshot else { return };
    let cols = columns(area.width);
    let pid_w = pid_width(snap);
    let widths: Vec<Constraint> = cols.iter().map(|c| width(*c, pid_w)).collect();
    let cmd_w = command_width(cols, pid_w, area);
    let visible = usize::from(area.height.saturating_sub(3));
    let first = offset(state.proc_sel, visible);
    state.hits.rows(crate::ui::hit::Rows {
        y: area.y + 2,
        height: u16::try_from(visible).unwrap_or(0),
        x: (area.x + 1, area.right().saturating_sub(1)),
        first,
        stride: 1,
    });
    let (rows, headings) = table_rows(state, theme, cols, (pid_w, cmd_w), (first, visible));
    let t = Table::new(rows, widths)
        .header(
            Row::new(header(state, cols, snap.kubelet.is_some())).style(theme.get("table.header")),
        )
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(cut(
                    &table_title(state, snap),
                    usize::from(area.width.saturating_sub(2)),
                ))
                .border_style(theme.get("ui.border")),
        );
    frame.render_widget(t, area);
    draw_headings(frame, area, theme, headings);
    if snap.processes.is_empty() {
        let msg = "No process holds a GPU.";
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
