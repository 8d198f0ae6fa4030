//! Detail: the selected logical GPU or process in full, every value with its source and age, and
//! for a missing value the reason it is missing.

use super::fmt::{age, gib};
use super::history::{self, Series};
use crate::domain::provenance::{Origin, Provenance, SourceKind};
use crate::domain::snapshot::{LogicalGpu as Logical, PhysicalGpu as Gpu, Process, Snapshot};
use crate::ui::state::{DetailTarget, State};
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

/// Detail charts history below its values from this height of its area on.
const CHARTS_FROM_HEIGHT: u16 = 30;

/// Rows the charts take.
const CHART_HEIGHT: u16 = 10;

fn source(o: &Origin) -> &'static str {
    match o.source {
        SourceKind::AmdSmi => "amd-smi",
        SourceKind::Sysfs => "sysfs",
        SourceKind::Procfs => "/proc",
        SourceKind::ProductTable => "product table",
        SourceKind::Derived => "derived",
        SourceKind::Primary => "primary",
        SourceKind::Nvidia => "nvidia",
    }
}

/// Pods in cluster terms: `namespace/pod container (resource)`, or why there is none.
fn pods_line<'a>(theme: &Theme, name: &str, pods: &[crate::domain::snapshot::PodRef]) -> Line<'a> {
    let text = if pods.is_empty() {
        "none (the kubelet allocated it to no pod)".to_string()
    } else {
        pods.iter()
            .map(|p| format!("{} {} ({})", p.label(), p.container, p.resource))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Line::from(vec![
        Span::styled(format!("{name:<22}"), theme.get("table.header")),
        Span::styled(text, theme.get("ui")),
    ])
}

fn row<'a>(
    state: &State,
    theme: &Theme,
    name: &str,
    value: Option<String>,
    prov: &Provenance,
    key: &str,
) -> Line<'a> {
    let origin = prov.get(key);
    let v = match (&value, origin.and_then(|o| o.missing.as_ref())) {
        (Some(v), _) => Span::styled(format!("{v:<24}"), theme.get("ui")),
        (None, Some(crate::domain::provenance::Missing::NotApplicable(why))) => Span::styled(
            format!("{:<24}", format!("— ({why})")),
            theme.get("ui.muted"),
        ),
        (None, Some(m)) => Span::styled(
            format!("{:<24}", format!("N/A ({})", m.explain())),
            theme.get("status.warn"),
        ),
        (None, None) => Span::styled(format!("{:<24}", "N/A"), theme.get("status.warn")),
    };
    // Narrow screens get the source kind and age; wide ones the exact command or file too.
    let src = origin.map_or_else(String::new, |o| {
        if state.size.0 >= 120 {
            format!(
                "  {} · {} · {} ago",
                source(o),
                o.detail,
                age(state.now_ms, o.at_ms)
            )
        } else {
            format!(" {} {}", source(o), age(state.now_ms, o.at_ms))
        }
    });
    Line::from(vec![
        Span::styled(format!("{name:<22}"), theme.get("table.header")),
        v,
        Span::styled(src, theme.get("ui.hint")),
    ])
}

/// A derived value (no source of its own): muted where it is not known.
fn plain<'a>(theme: &Theme, name: &str, value: String, known: bool) -> Line<'a> {
    Line::from(vec![
        Span::styled(format!("{name:<22}"), theme.get("table.header")),
        Span::styled(value, theme.get(if known { "ui" } else { "ui.muted" })),
    ])
}

/// Lines under a title: what Detail scrolls.
type Section = (String, Vec<Line<'static>>);

/// The logical GPU `bdf` names, with its physical GPU and its holders; or why it is gone.
fn gpu_detail(state: &State, theme: &Theme, bdf: &str) -> Result<Section, String> {
    let snap = state.snapshot.as_ref().ok_or_else(String::new)?;
    let Some((g, l)) = snap.logical().find(|(_, l)| l.bdf == bdf) else {
        return Err(format!(
            "{bdf} is no longer present (the node was repartitioned?)"
        ));
    };
    let title = format!(
        " Logical GPU {} · {} · partition {} of {} ",
        l.gpu_id,
        l.bdf,
        l.partition_id,
        g.partitions.len()
    );
    let mut lines = Vec::new();
    logical_lines(state, theme, l, &mut lines);
    physical_lines(state, theme, g, &mut lines);
    holder_lines(theme, snap, l, &mut lines);
    Ok((title, lines))
}

/// The logical GPU's own values.
fn logical_lines(state: &State, theme: &Theme, l: &Logical, lines: &mut Vec<Line<'static>>) {
    let pv = &l.provenance;
    let add =
        |name: &str, value: Option<String>, key: &str| row(state, theme, name, value, pv, key);
    lines.push(add(
        "gfx busy",
        l.gfx_busy_percent.map(|v| format!("{v:.0}%")),
        "gfx_busy_percent",
    ));
    lines.push(add(
        "vram used",
        l.vram_used_bytes.map(|v| format!("{} GiB", gib(v))),
        "vram_used_bytes",
    ));
    lines.push(add(
        "vram total (reported)",
        l.vram_total_bytes.map(|v| format!("{} GiB", gib(v))),
        "vram_total_bytes",
    ));
    lines.push(add(
        "vram own share",
        l.vram_share_bytes.map(|v| format!("{} GiB", gib(v))),
        "vram_share_bytes",
    ));
    lines.push(add("CUs", l.cu_count.map(|v| v.to_string()), "cu_count"));
    lines.push(add(
        "XCDs",
        (!l.xcds.is_empty()).then(|| format!("{:?}", l.xcds)),
        "vram_share_bytes",
    ));
    lines.push(add(
        "memory domains",
        (!l.memory_domains.is_empty()).then(|| format!("{:?}", l.memory_domains)),
        "vram_share_bytes",
    ));
    lines.push(add(
        "umc busy (device)",
        l.umc_busy_percent.map(|v| format!("{v:.0}%")),
        "umc_busy_percent",
    ));
    lines.push(add("render node", l.render_node.clone(), "render_node"));
    lines.push(add("kfd gpu id", l.kfd_id.map(|v| v.to_string()), "kfd_id"));
    // Only on a Kubernetes node: elsewhere the line would say nothing.
    if state.snapshot.as_ref().is_some_and(|s| s.kubelet.is_some()) {
        lines.push(pods_line(theme, "allocated to", &l.pods));
    }
}

/// The physical GPU a logical one is part of: partitions, power, clocks, temperatures.
fn physical_lines(state: &State, theme: &Theme, g: &Gpu, lines: &mut Vec<Line<'static>>) {
    let gv = &g.provenance;
    let add =
        |name: &str, value: Option<String>, key: &str| row(state, theme, name, value, gv, key);
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        format!("Physical GPU {} · {}", g.bdf, g.product),
        theme.get("ui.title"),
    ));
    lines.push(add(
        "compute partition",
        g.compute_partition.map(|m| m.to_string()),
        "compute_partition",
    ));
    lines.push(add(
        "memory partition",
        g.memory_partition.map(|m| m.to_string()),
        "memory_partition",
    ));
    let profiles = crate::domain::product::profiles_text(&g.profiles);
    lines.push(add(
        "offered",
        (!profiles.is_empty()).then_some(profiles),
        "profiles",
    ));
    lines.push(add(
        "power (device)",
        g.power_watts.map(|v| format!("{v:.0} W")),
        "power_watts",
    ));
    if g.gfx_clock_mhz.is_some() || g.mem_clock_mhz.is_some() {
        lines.push(add(
            "clocks gfx / mem",
            Some(format!(
                "{} / {} MHz",
                g.gfx_clock_mhz
                    .map_or_else(|| "N/A".into(), |v| v.to_string()),
                g.mem_clock_mhz
                    .map_or_else(|| "N/A".into(), |v| v.to_string())
            )),
            "gfx_clock_mhz",
        ));
    }
    lines.push(add(
        "power cap",
        g.power_cap_watts.map(|v| format!("{v:.0} W")),
        "power_cap_watts",
    ));
    lines.push(add(
        "hotspot (device)",
        g.hotspot_celsius.map(|v| format!("{v:.0} °C")),
        "hotspot_celsius",
    ));
    lines.push(add(
        "HBM temp (device)",
        g.mem_celsius.map(|v| format!("{v:.0} °C")),
        "mem_celsius",
    ));
    lines.push(add(
        "HBM",
        g.hbm_bytes.map(|v| format!("{} GiB", gib(v))),
        "hbm_bytes",
    ));
    lines.push(add("XGMI hive", g.hive.clone(), "hive"));
}

/// The processes that hold the logical GPU, with what each uses of it.
fn holder_lines(theme: &Theme, snap: &Snapshot, l: &Logical, lines: &mut Vec<Line<'static>>) {
    lines.push(Line::raw(""));
    lines.push(Line::styled("Holders", theme.get("ui.title")));
    for p in snap.holders(l.gpu_id) {
        let u = p.gpus.iter().find(|u| u.gpu_id == l.gpu_id);
        lines.push(Line::raw(format!(
            "  {:>7} {:<15} vram {} GiB  cu {}",
            p.pid,
            p.name.as_deref().unwrap_or("N/A"),
            u.and_then(|u| u.vram_bytes)
                .map_or_else(|| "N/A".into(), gib),
            u.and_then(|u| u.cu_occupancy)
                .map_or_else(|| "N/A".into(), |c| c.to_string())
        )));
    }
}

/// The process `pid`, with what it uses of each GPU; or why it is gone.
fn process_detail(state: &State, theme: &Theme, pid: u32) -> Result<Section, String> {
    let snap = state.snapshot.as_ref().ok_or_else(String::new)?;
    let Some(p) = snap.processes.iter().find(|p| p.pid == pid) else {
        return Err(format!(
            "Process {pid} no longer holds a GPU (it exited or released it)."
        ));
    };
    let title = format!(
        " Process {} · {} ",
        p.pid,
        p.name.as_deref().unwrap_or("N/A")
    );
    let mut lines = Vec::new();
    process_lines(state, theme, p, &mut lines);
    placement_lines(state, theme, snap, p, &mut lines);
    gpu_use_lines(state, theme, p, &mut lines);
    Ok((title, lines))
}

/// Who the process is and what it costs the host: name, owner, age, CPU, GPU busy, model, RSS.
fn process_lines(state: &State, theme: &Theme, p: &Process, lines: &mut Vec<Line<'static>>) {
    let pv = &p.provenance;
    let add =
        |name: &str, value: Option<String>, key: &str| row(state, theme, name, value, pv, key);
    lines.push(add("name", p.name.clone(), "name"));
    lines.push(add("user", p.user.clone(), "user"));
    lines.push(add("parent", p.ppid.map(|v| v.to_string()), "ppid"));
    lines.push(add(
        "running for",
        p.running_secs
            .map(super::processes::uptime)
            .or_else(|| p.started_at_ms.map(|t| age(state.now_ms, t))),
        "started_at_ms",
    ));
    lines.push(add(
        "host cpu",
        p.cpu_percent.map(|c| format!("{c:.1}% of one core")),
        "cpu_percent",
    ));
    let (busy, known) = p.engine_busy_percent().map_or_else(
        || {
            (
                "— (no engine counts its work: ROCm compute runs on KFD queues, which \
             fdinfo does not count; its CU occupancy below is its busy)"
                    .to_string(),
                false,
            )
        },
        |b| {
            (
                format!("{b:.0}% (its busiest engine: DRM fdinfo, or NVML)"),
                true,
            )
        },
    );
    lines.push(plain(theme, "gpu busy", busy, known));
    let model = state.model_of(p);
    let known = model.is_some();
    lines.push(plain(
        theme,
        "serves model",
        model.unwrap_or_else(|| "— (none registered, discovered or on its command line)".into()),
        known,
    ));
    lines.push(add(
        "host memory (rss)",
        // Under a GiB in MiB: a 5 MiB process is not "0.0 GiB".
        p.rss_bytes.map(|b| {
            if b < 1 << 30 {
                format!("{} MiB", b >> 20)
            } else {
                format!("{} GiB", gib(b))
            }
        }),
        "rss_bytes",
    ));
}

/// Where the process runs: container, unit, pod, command line, /dev/kfd, its devices.
fn placement_lines(
    state: &State,
    theme: &Theme,
    snap: &Snapshot,
    p: &Process,
    lines: &mut Vec<Line<'static>>,
) {
    let pv = &p.provenance;
    let add =
        |name: &str, value: Option<String>, key: &str| row(state, theme, name, value, pv, key);
    lines.push(add("container", p.container_id.clone(), "container_id"));
    lines.push(add("systemd unit", p.systemd_unit.clone(), "systemd_unit"));
    lines.push(add("kubernetes pod", p.k8s_pod_uid.clone(), "k8s_pod_uid"));
    if state.snapshot.as_ref().is_some_and(|s| s.kubelet.is_some()) {
        lines.push(pods_line(theme, "pod (kubelet)", p.pod.as_slice()));
    }
    lines.push(Line::from(vec![
        Span::styled(format!("{:<22}", "command"), theme.get("table.header")),
        Span::raw(p.command.clone().unwrap_or_else(|| "N/A".into())),
    ]));
    lines.push(add(
        "holds /dev/kfd",
        Some(
            if p.holds_kfd {
                "yes: blocks driver reloads"
            } else {
                "no"
            }
            .into(),
        ),
        "holds_kfd",
    ));
    lines.push(add(
        "listed by amd-smi",
        Some(
            if p.listed_by_amdsmi {
                "yes"
            } else if snap.amdsmi_lists_processes() {
                "no: found from /proc"
            } else {
                "not asked: processes come from the kernel (KFD, /proc)"
            }
            .into(),
        ),
        "listed",
    ));
    if let Some(a) = &p.agent {
        lines.push(add("node agent", Some(a.clone()), "agent"));
    }
    let vis = p
        .visible_devices
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    lines.push(add(
        "visible devices",
        (!vis.is_empty()).then_some(vis),
        "visible_devices",
    ));
}

/// What the process uses of each logical GPU it holds.
fn gpu_use_lines(state: &State, theme: &Theme, p: &Process, lines: &mut Vec<Line<'static>>) {
    let pv = &p.provenance;
    let add =
        |name: &str, value: Option<String>, key: &str| row(state, theme, name, value, pv, key);
    for u in &p.gpus {
        lines.push(Line::raw(""));
        lines.push(Line::styled(
            format!("On logical GPU {}", u.gpu_id),
            theme.get("ui.title"),
        ));
        lines.push(add(
            "vram",
            u.vram_bytes.map(|v| format!("{} GiB", gib(v))),
            &format!("gpu{}.vram_bytes", u.gpu_id),
        ));
        lines.push(add(
            "gtt",
            u.gtt_bytes.map(|v| format!("{} GiB", gib(v))),
            &format!("gpu{}.gtt_bytes", u.gpu_id),
        ));
        lines.push(add(
            "cu occupancy",
            u.cu_occupancy
                .map(|c| format!("{c} CUs ({:.0}%)", u.cu_percent.unwrap_or(0.0))),
            &format!("gpu{}.cu_occupancy", u.gpu_id),
        ));
    }
}

/// The history Detail charts for its target: busy, VRAM, power, temperature of a GPU, or a
/// process's own series.
fn chart_series(state: &State, snap: &Snapshot) -> Vec<Series> {
    match &state.detail {
        Some(DetailTarget::Gpu(bdf)) => {
            snap.logical().find(|(_, l)| &l.bdf == bdf).map(|(g, l)| {
                let [busy, vram] = history::gpu_series(state, l);
                let [power, temp] = history::device_series(state, g);
                vec![busy, vram, power, temp]
            })
        }
        Some(DetailTarget::Process(pid)) => snap
            .processes
            .iter()
            .find(|p| p.pid == *pid)
            .map(|p| history::process_series(state, p).into()),
        None => None,
    }
    .unwrap_or_default()
}

/// Draws the detail view.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.get("ui.border"));
    let Some(snap) = &state.snapshot else { return };
    let section = match &state.detail {
        Some(DetailTarget::Gpu(bdf)) => gpu_detail(state, theme, bdf),
        Some(DetailTarget::Process(pid)) => process_detail(state, theme, *pid),
        None => {
            frame.render_widget(
                Paragraph::new("Select a GPU or process and press Enter.")
                    .block(block)
                    .style(theme.get("ui.muted")),
                area,
            );
            return;
        }
    };
    let (title, lines) = match section {
        Ok(s) => s,
        Err(gone) => {
            frame.render_widget(Paragraph::new(gone).block(block), area);
            return;
        }
    };
    // A tall screen charts the last ten minutes under the values (the History view has more).
    let series = chart_series(state, snap);
    let area = if series.is_empty() || area.height < CHARTS_FROM_HEIGHT {
        area
    } else {
        let [text, charts] =
            Layout::vertical([Constraint::Min(0), Constraint::Length(CHART_HEIGHT)]).areas(area);
        history::charts_row(frame, charts, &series, state, theme);
        text
    };
    super::fmt::scrolled(
        frame,
        area,
        &state.scroll,
        crate::ui::scroll::Pane::Detail,
        theme,
        block.title(title),
        lines,
        22,
        "↓ more below (Down, PgDn)",
    );
}
