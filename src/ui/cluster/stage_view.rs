//! The staged rollout's overlay over the cluster view, drawn from `&ClusterStage`: the nodes
//! and the layout typed (and which manager it goes through), the plan as `fleet --kubernetes
//! plan` prints it, the set's fingerprint typed (`ui::view::stage::typed_prompt`, the prompt of
//! the fleet and of one node), then each node's progress and how it ended. Everything from
//! outside is escaped here, on its way to the screen.

use super::stage::{ClusterStage, NodeState};
use crate::domain::cluster_rollout::Target;
use crate::domain::text::escape_controls as esc;
use crate::ui::fleet::Phase;
use crate::ui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

/// What the typed word goes through, in words.
fn target_words(st: &ClusterStage) -> String {
    match st.target() {
        None => "nothing typed yet".into(),
        Some(t @ Target::Layout { .. }) => format!("{} through AMD's DCM", t.words()),
        Some(t @ Target::MigConfig { .. }) => format!("{} through NVIDIA's MIG manager", t.words()),
    }
}

/// Each node of the set and where it is (wrapped: a failure's reason and undo whole).
fn progress_lines(st: &ClusterStage, theme: &Theme, w: usize) -> Vec<Line<'static>> {
    st.progress
        .iter()
        .flat_map(|(n, p)| {
            let (word, style) = match p {
                NodeState::Waiting => ("waiting".to_string(), "ui.muted"),
                NodeState::Running(t) => (format!("… {t}"), "status.warn"),
                NodeState::Done => ("done".to_string(), "status.ok"),
                NodeState::Failed(e) => (format!("FAILED {e}"), "status.crit"),
            };
            hang_in(
                Line::styled(format!("{}: {}", esc(n), esc(&word)), theme.get(style)),
                w,
            )
        })
        .collect()
}

/// Draws the overlay over `area`.
pub fn render(frame: &mut Frame<'_>, area: Rect, st: &ClusterStage, theme: &Theme) {
    let rect = crate::ui::view::fmt::centered(
        area,
        area.width.min(120),
        area.height.saturating_sub(2).max(3),
    );
    frame.render_widget(Clear, rect);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(
            " Roll out through the cluster on {} node(s) ",
            st.nodes.len()
        ))
        .border_style(theme.get("danger"));
    let inner = block.inner(rect);
    frame.render_widget(block, rect);
    let w = usize::from(inner.width);
    let hang = |l: Line<'static>| crate::ui::view::fmt::hang(l, w, 4);
    let mut head = hang(Line::styled(
        format!(
            "nodes: {}",
            st.nodes
                .iter()
                .map(|n| esc(n).into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        theme.get("ui"),
    ));
    head.push(Line::styled(
        if st.phase == Phase::Choose {
            format!("layout: {}▏ ({})", esc(&st.word), esc(&target_words(st)))
        } else {
            format!("layout: {}", esc(&target_words(st)))
        },
        theme.get("ui.title"),
    ));
    let (mut body, mut bottom) = match st.phase {
        Phase::Choose => choose(theme, w),
        Phase::Planning => (
            Vec::new(),
            vec![Line::styled(
                format!("planning on {} node(s)…", st.nodes.len()),
                theme.get("status.warn"),
            )],
        ),
        Phase::Review => review(st, theme, w),
        Phase::Rolling | Phase::Done(_) => rolling(st, theme, w),
    };
    if let Some(n) = &st.notice {
        let mut v = hang(Line::styled(n.clone(), theme.get("status.warn")));
        v.append(&mut bottom);
        bottom = v;
    }
    let hh = u16::try_from(head.len()).unwrap_or(0).min(inner.height);
    let bh = u16::try_from(bottom.len())
        .unwrap_or(0)
        .min(inner.height.saturating_sub(hh));
    let [head_r, body_r, tail_r] = Layout::vertical([
        Constraint::Length(hh),
        Constraint::Min(0),
        Constraint::Length(bh),
    ])
    .areas(inner);
    frame.render_widget(Paragraph::new(head), head_r);
    // While rolling, the newest lines: what the rollout says last is what the operator acts on.
    // The plan from where it is scrolled to (its end at most), said when more is below.
    let room = usize::from(body_r.height);
    let last = body.len().saturating_sub(room);
    let skip = match st.phase {
        Phase::Review => st.scroll.min(last),
        Phase::Choose | Phase::Planning => 0,
        Phase::Rolling | Phase::Done(_) => last,
    };
    if st.phase == Phase::Review && skip < last && room > 0 {
        body.truncate(skip + room - 1);
        body.push(Line::styled(
            "↓ more below (Down, PgDn; Up, PgUp back)",
            theme.get("status.warn"),
        ));
    }
    frame.render_widget(
        Paragraph::new(body.into_iter().skip(skip).collect::<Vec<_>>()),
        body_r,
    );
    frame.render_widget(Paragraph::new(bottom), tail_r);
}

type Parts = (Vec<Line<'static>>, Vec<Line<'static>>);

fn hang_in(l: Line<'static>, w: usize) -> Vec<Line<'static>> {
    crate::ui::view::fmt::hang(l, w, 4)
}

/// The layout being typed: what it does, and the keys.
fn choose(theme: &Theme, w: usize) -> Parts {
    (
        hang_in(
            Line::styled(
                "Type the layout: <compute>_<memory> (cpx_nps4) goes through AMD's Device Config Manager, any other word is a MIG config of NVIDIA's MIG manager. The planner of `partop fleet --kubernetes plan` reads the cluster; you review the plan, then type the set's fingerprint to roll it out node by node (cordon, evict with PodDisruptionBudgets honoured, label, wait for the manager and the kubelet, uncordon).",
                theme.get("ui.muted"),
            ),
            w,
        ),
        vec![Line::styled(
            "type the layout · enter plan · esc cancel",
            theme.get("ui.hint"),
        )],
    )
}

/// The plan as the CLI prints it (refused nodes in red), then the confirmation.
fn review(st: &ClusterStage, theme: &Theme, w: usize) -> Parts {
    let planned = st.planned.as_ref();
    let mut body = Vec::new();
    for l in planned.map(|p| p.lines.as_slice()).unwrap_or_default() {
        let style = if l.starts_with("refused: ") {
            "status.crit"
        } else {
            "ui"
        };
        body.extend(hang_in(
            Line::styled(esc(l).into_owned(), theme.get(style)),
            w,
        ));
    }
    let mut bottom = Vec::new();
    match (planned.and_then(|p| p.staged.as_ref()), &st.confirming) {
        (None, _) => bottom.extend(hang_in(
            Line::styled(
                "nothing to roll out (every node refused or already at the target) · enter or esc: back",
                theme.get("status.warn"),
            ),
            w,
        )),
        (Some(set), Some(c)) => bottom.extend(crate::ui::view::stage::typed_prompt(
            c,
            format!(
                "Type the set's fingerprint ({}) to roll it out on these {} node(s): ",
                set.fingerprint,
                planned.map_or(0, |p| p.nodes.len())
            ),
            "enter rolls out · esc goes back",
            theme,
            w,
        )),
        (Some(_), None) => {
            let refused = planned.map_or(0, |p| p.refused.len());
            if refused > 0 {
                bottom.extend(hang_in(
                    Line::styled(
                        format!("{refused} node(s) refused (above): left out of the set"),
                        theme.get("status.warn"),
                    ),
                    w,
                ));
            }
            bottom.push(Line::styled(
                "enter: confirm (you will type the set's fingerprint) · esc cancel",
                theme.get("danger"),
            ));
        }
    }
    (body, bottom)
}

/// Each node's progress and what the rollout said; how it ended.
fn rolling(st: &ClusterStage, theme: &Theme, w: usize) -> Parts {
    let mut body = progress_lines(st, theme, w);
    body.push(Line::raw(""));
    body.extend(
        st.log
            .iter()
            .flat_map(|l| hang_in(Line::styled(esc(l).into_owned(), theme.get("ui.muted")), w)),
    );
    let mut bottom = Vec::new();
    match &st.phase {
        Phase::Done(Ok(())) => bottom.extend(hang_in(
            Line::styled(
                "rolled out: every node labelled, answered, advertising its capacity, uncordoned",
                theme.get("status.ok"),
            ),
            w,
        )),
        Phase::Done(Err(e)) => {
            bottom.extend(hang_in(
                Line::styled(esc(e).into_owned(), theme.get("status.crit")),
                w,
            ));
        }
        _ => bottom.extend(hang_in(
            Line::styled(
                "rolling out node by node… (the first failure stops it)",
                theme.get("status.warn"),
            ),
            w,
        )),
    }
    if matches!(st.phase, Phase::Done(_)) {
        bottom.push(Line::styled(
            "enter or esc: back to the cluster",
            theme.get("ui.hint"),
        ));
    }
    (body, bottom)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ui::cluster::stage::ClusterPlanned;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    /// A plan longer than the overlay: its start shown with the hint; scrolled to its end, the
    /// refused node (the last line) is on screen, never cut off unsaid.
    #[test]
    fn a_long_plan_scrolls_to_its_refused_nodes() {
        let theme = Theme::load("default", std::path::Path::new("/nonexistent")).0;
        let mut st = ClusterStage::new(vec!["n".into()]);
        st.word = "cpx_nps4".into();
        let mut lines: Vec<String> = (0..60).map(|i| format!("node-{i:02}: plan")).collect();
        lines.push("refused: gone-1 is no GPU node".into());
        st.planned(Ok(ClusterPlanned {
            staged: None,
            lines,
            nodes: Vec::new(),
            refused: vec!["gone-1 is no GPU node".into()],
        }));
        let draw = |st: &ClusterStage| {
            let mut t = Terminal::new(TestBackend::new(100, 30)).unwrap();
            t.draw(|f| render(f, f.area(), st, &theme)).unwrap();
            format!("{}", t.backend())
        };
        let top = draw(&st);
        assert!(
            top.contains("node-00") && top.contains("↓ more below"),
            "{top}"
        );
        assert!(!top.contains("gone-1"), "{top}");
        st.scroll = usize::MAX;
        let end = draw(&st);
        assert!(
            end.contains("refused: gone-1") && !end.contains("↓ more below"),
            "{end}"
        );
    }
}
