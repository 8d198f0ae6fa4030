//! Detail: the selected logical GPU or process in full, every value with its source and age, and
//! for a missing value the reason it is missing.

use super::fmt::{age, gib};
use super::history::{self, Series};
use crate::domain::provenance::{Origin, Provenance, SourceKind};
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

/// Draws the detail view.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.get("ui.border"));
    let Some(snap) = &state.snapshot else { return };
    let mut lines: Vec<Line<'_>> = Vec::new();
    let title;
    match &state.detail {
        Some(DetailTarget::Gpu(bdf)) => {
            let Some((g, l)) = snap.logical().find(|(_, l)| &l.bdf == bdf) else {
                frame.render_widget(
                    Paragraph::new(format!(
                        "{bdf} is no longer present (the node was repartitioned?)"
                    ))
                    .block(block),
                    area,
                );
                return;
            };
            title = format!(
                " Logical GPU {} · {} · partition {} of {} ",
                l.gpu_id,
                l.bdf,
                l.partition_id,
                g.partitions.len()
            );
            let pv = &l.provenance;
            let gv = &g.provenance;
            lines.push(row(
                state,
                theme,
                "gfx busy",
                l.gfx_busy_percent.map(|v| format!("{v:.0}%")),
                pv,
                "gfx_busy_percent",
            ));
            lines.push(row(
                state,
                theme,
                "vram used",
                l.vram_used_bytes.map(|v| format!("{} GiB", gib(v))),
                pv,
                "vram_used_bytes",
            ));
            lines.push(row(
                state,
                theme,
                "vram total (reported)",
                l.vram_total_bytes.map(|v| format!("{} GiB", gib(v))),
                pv,
                "vram_total_bytes",
            ));
            lines.push(row(
                state,
                theme,
                "vram own share",
                l.vram_share_bytes.map(|v| format!("{} GiB", gib(v))),
                pv,
                "vram_share_bytes",
            ));
            lines.push(row(
                state,
                theme,
                "CUs",
                l.cu_count.map(|v| v.to_string()),
                pv,
                "cu_count",
            ));
            lines.push(row(
                state,
                theme,
                "XCDs",
                (!l.xcds.is_empty()).then(|| format!("{:?}", l.xcds)),
                pv,
                "vram_share_bytes",
            ));
            lines.push(row(
                state,
                theme,
                "memory domains",
                (!l.memory_domains.is_empty()).then(|| format!("{:?}", l.memory_domains)),
                pv,
                "vram_share_bytes",
            ));
            lines.push(row(
                state,
                theme,
                "umc busy (device)",
                l.umc_busy_percent.map(|v| format!("{v:.0}%")),
                pv,
                "umc_busy_percent",
            ));
            lines.push(row(
                state,
                theme,
                "render node",
                l.render_node.clone(),
                pv,
                "render_node",
            ));
            lines.push(row(
                state,
                theme,
                "kfd gpu id",
                l.kfd_id.map(|v| v.to_string()),
                pv,
                "kfd_id",
            ));
            // Only on a Kubernetes node: elsewhere the line would say nothing.
            if state.snapshot.as_ref().is_some_and(|s| s.kubelet.is_some()) {
                lines.push(pods_line(theme, "allocated to", &l.pods));
            }
            lines.push(Line::raw(""));
            lines.push(Line::styled(
                format!("Physical GPU {} · {}", g.bdf, g.product),
                theme.get("ui.title"),
            ));
            lines.push(row(
                state,
                theme,
                "compute partition",
                g.compute_partition.map(|m| m.to_string()),
                gv,
                "compute_partition",
            ));
            lines.push(row(
                state,
                theme,
                "memory partition",
                g.memory_partition.map(|m| m.to_string()),
                gv,
                "memory_partition",
            ));
            let profiles = crate::domain::product::profiles_text(&g.profiles);
            lines.push(row(
                state,
                theme,
                "offered",
                (!profiles.is_empty()).then_some(profiles),
                gv,
                "profiles",
            ));
            lines.push(row(
                state,
                theme,
                "power (device)",
                g.power_watts.map(|v| format!("{v:.0} W")),
                gv,
                "power_watts",
            ));
            if g.gfx_clock_mhz.is_some() || g.mem_clock_mhz.is_some() {
                lines.push(row(
                    state,
                    theme,
                    "clocks gfx / mem",
                    Some(format!(
                        "{} / {} MHz",
                        g.gfx_clock_mhz
                            .map_or_else(|| "N/A".into(), |v| v.to_string()),
                        g.mem_clock_mhz
                            .map_or_else(|| "N/A".into(), |v| v.to_string())
                    )),
                    gv,
                    "gfx_clock_mhz",
                ));
            }
            lines.push(row(
                state,
                theme,
                "power cap",
                g.power_cap_watts.map(|v| format!("{v:.0} W")),
                gv,
                "power_cap_watts",
            ));
            lines.push(row(
                state,
                theme,
                "hotspot (device)",
                g.hotspot_celsius.map(|v| format!("{v:.0} °C")),
                gv,
                "hotspot_celsius",
            ));
            lines.push(row(
                state,
                theme,
                "HBM temp (device)",
                g.mem_celsius.map(|v| format!("{v:.0} °C")),
                gv,
                "mem_celsius",
            ));
            lines.push(row(
                state,
                theme,
                "HBM",
                g.hbm_bytes.map(|v| format!("{} GiB", gib(v))),
                gv,
                "hbm_bytes",
            ));
            lines.push(row(state, theme, "XGMI hive", g.hive.clone(), gv, "hive"));
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
        Some(DetailTarget::Process(pid)) => {
            let Some(p) = snap.processes.iter().find(|p| p.pid == *pid) else {
                frame.render_widget(
                    Paragraph::new(format!(
                        "Process {pid} no longer holds a GPU (it exited or released it)."
                    ))
                    .block(block),
                    area,
                );
                return;
            };
            title = format!(
                " Process {} · {} ",
                p.pid,
                p.name.as_deref().unwrap_or("N/A")
            );
            let pv = &p.provenance;
            lines.push(row(state, theme, "name", p.name.clone(), pv, "name"));
            lines.push(row(state, theme, "user", p.user.clone(), pv, "user"));
            lines.push(row(
                state,
                theme,
                "parent",
                p.ppid.map(|v| v.to_string()),
                pv,
                "ppid",
            ));
            lines.push(row(
                state,
                theme,
                "running for",
                p.running_secs
                    .map(super::processes::uptime)
                    .or_else(|| p.started_at_ms.map(|t| age(state.now_ms, t))),
                pv,
                "started_at_ms",
            ));
            lines.push(row(
                state,
                theme,
                "host cpu",
                p.cpu_percent.map(|c| format!("{c:.1}% of one core")),
                pv,
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
                model.unwrap_or_else(|| {
                    "— (none registered, discovered or on its command line)".into()
                }),
                known,
            ));
            lines.push(row(
                state,
                theme,
                "host memory (rss)",
                // Under a GiB in MiB: a 5 MiB process is not "0.0 GiB".
                p.rss_bytes.map(|b| {
                    if b < 1 << 30 {
                        format!("{} MiB", b >> 20)
                    } else {
                        format!("{} GiB", gib(b))
                    }
                }),
                pv,
                "rss_bytes",
            ));
            lines.push(row(
                state,
                theme,
                "container",
                p.container_id.clone(),
                pv,
                "container_id",
            ));
            lines.push(row(
                state,
                theme,
                "systemd unit",
                p.systemd_unit.clone(),
                pv,
                "systemd_unit",
            ));
            lines.push(row(
                state,
                theme,
                "kubernetes pod",
                p.k8s_pod_uid.clone(),
                pv,
                "k8s_pod_uid",
            ));
            if state.snapshot.as_ref().is_some_and(|s| s.kubelet.is_some()) {
                lines.push(pods_line(theme, "pod (kubelet)", p.pod.as_slice()));
            }
            lines.push(Line::from(vec![
                Span::styled(format!("{:<22}", "command"), theme.get("table.header")),
                Span::raw(p.command.clone().unwrap_or_else(|| "N/A".into())),
            ]));
            lines.push(row(
                state,
                theme,
                "holds /dev/kfd",
                Some(
                    if p.holds_kfd {
                        "yes: blocks driver reloads"
                    } else {
                        "no"
                    }
                    .into(),
                ),
                pv,
                "holds_kfd",
            ));
            lines.push(row(
                state,
                theme,
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
                pv,
                "listed",
            ));
            if let Some(a) = &p.agent {
                lines.push(row(
                    state,
                    theme,
                    "node agent",
                    Some(a.clone()),
                    pv,
                    "agent",
                ));
            }
            let vis = p
                .visible_devices
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ");
            lines.push(row(
                state,
                theme,
                "visible devices",
                (!vis.is_empty()).then_some(vis),
                pv,
                "visible_devices",
            ));
            for u in &p.gpus {
                lines.push(Line::raw(""));
                lines.push(Line::styled(
                    format!("On logical GPU {}", u.gpu_id),
                    theme.get("ui.title"),
                ));
                lines.push(row(
                    state,
                    theme,
                    "vram",
                    u.vram_bytes.map(|v| format!("{} GiB", gib(v))),
                    pv,
                    &format!("gpu{}.vram_bytes", u.gpu_id),
                ));
                lines.push(row(
                    state,
                    theme,
                    "gtt",
                    u.gtt_bytes.map(|v| format!("{} GiB", gib(v))),
                    pv,
                    &format!("gpu{}.gtt_bytes", u.gpu_id),
                ));
                lines.push(row(
                    state,
                    theme,
                    "cu occupancy",
                    u.cu_occupancy
                        .map(|c| format!("{c} CUs ({:.0}%)", u.cu_percent.unwrap_or(0.0))),
                    pv,
                    &format!("gpu{}.cu_occupancy", u.gpu_id),
                ));
            }
        }
        None => {
            frame.render_widget(
                Paragraph::new("Select a GPU or process and press Enter.")
                    .block(block)
                    .style(theme.get("ui.muted")),
                area,
            );
            return;
        }
    }
    // A tall screen charts the last ten minutes under the values (the History view has more).
    let series: Vec<Series> = match &state.detail {
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
    .unwrap_or_default();
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
