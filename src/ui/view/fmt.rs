//! Number and time formatting shared by the views.

pub use crate::domain::text::gib;

/// Memory with its unit, the one convention (binary units, said in full): "512MiB" below
/// 1 GiB, "80.7GiB" above; seven characters at most below 10 000 GiB.
pub fn mem(b: u64) -> String {
    if b < 1 << 30 {
        format!("{}MiB", b >> 20)
    } else {
        format!("{}GiB", gib(b))
    }
}

/// The selected row's mark, in a column of its own: a character, so no theme (one colour,
/// no reverse video) can hide which row `K` or Enter acts on.
pub const fn mark(selected: bool) -> &'static str {
    if selected { "▶" } else { " " }
}

/// An age: "3s", "2m", "1h".
pub fn age(now_ms: u64, at_ms: u64) -> String {
    let s = now_ms.saturating_sub(at_ms) / 1000;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        _ => format!("{}h", s / 3600),
    }
}

/// A percentage or N/A.
pub fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "N/A".into(), |v| format!("{v:.0}%"))
}

/// A horizontal bar of `width` cells for `frac` in 0..=1, with eighth-block resolution.
pub fn bar(frac: f64, width: usize) -> String {
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "bounded"
    )]
    let eighths = (frac.clamp(0.0, 1.0) * (width * 8) as f64).round() as usize;
    let full = eighths / 8;
    let mut s = "█".repeat(full);
    if full < width {
        s.push(PARTS[eighths % 8]);
        s.push_str(&" ".repeat(width - full - 1));
    }
    s
}

/// A sparkline of the last `width` samples (0..=100).
pub fn spark(samples: &[u64], width: usize) -> String {
    const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let tail = &samples[samples.len().saturating_sub(width)..];
    let mut s: String = " ".repeat(width - tail.len());
    for v in tail {
        s.push(LEVELS[((*v).min(100) * 7 / 100) as usize]);
    }
    s
}

/// Truncates to `w` characters with an ellipsis.
pub fn cut(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        s.to_string()
    } else if w == 0 {
        String::new()
    } else {
        let mut t: String = s.chars().take(w - 1).collect();
        t.push('…');
        t
    }
}

/// Cut to `w` characters in the middle (`127.0…:19004`), for names whose distinguishing part
/// is at either end: a third of the room for the start, the rest for the end.
pub fn cut_middle(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        return s.to_string();
    }
    if w < 3 {
        return cut(s, w);
    }
    let head = (w - 1) / 3;
    let tail = w - 1 - head;
    let mut t: String = s.chars().take(head).collect();
    t.push('…');
    t.extend(s.chars().skip(n - tail));
    t
}

/// A line of `spans` cut to `w` columns, ending in `…` where something was cut.
pub fn fit(spans: Vec<ratatui::text::Span<'_>>, w: usize) -> ratatui::text::Line<'_> {
    use unicode_width::UnicodeWidthStr as _;
    let total: usize = spans.iter().map(|s| s.content.width()).sum();
    if total <= w {
        return ratatui::text::Line::from(spans);
    }
    let mut out = Vec::new();
    let mut used = 0;
    for s in spans {
        let sw = s.content.width();
        if used + sw < w {
            used += sw;
            out.push(s);
            continue;
        }
        let room = w.saturating_sub(used + 1);
        let mut t = String::new();
        let mut tw = 0;
        for ch in s.content.chars() {
            let cw = unicode_width::UnicodeWidthChar::width(ch).unwrap_or(0);
            if tw + cw > room {
                break;
            }
            tw += cw;
            t.push(ch);
        }
        t.push('…');
        out.push(ratatui::text::Span::styled(t, s.style));
        break;
    }
    ratatui::text::Line::from(out)
}

/// Word-wraps a styled line to `w` columns; continuation lines start `indent` columns in (so a
/// wrapped value stays in its column). A word longer than a line is broken where it must be.
pub fn hang(
    line: ratatui::text::Line<'_>,
    w: usize,
    indent: usize,
) -> Vec<ratatui::text::Line<'static>> {
    use ratatui::text::{Line, Span};
    use unicode_width::UnicodeWidthChar as _;
    let w = w.max(indent + 8);
    let mut out: Vec<Line<'static>> = Vec::new();
    let mut cur: Vec<Span<'static>> = Vec::new();
    let mut used = 0usize;
    // Pieces: runs of spaces and runs of other characters, each with its span's style.
    let mut pieces: Vec<(String, ratatui::style::Style)> = Vec::new();
    for sp in &line.spans {
        let mut run = String::new();
        let mut space = None;
        for ch in sp.content.chars() {
            let is = ch == ' ';
            if space.is_some_and(|s| s != is) {
                pieces.push((std::mem::take(&mut run), sp.style));
            }
            space = Some(is);
            run.push(ch);
        }
        if !run.is_empty() {
            pieces.push((run, sp.style));
        }
    }
    let line_style = line.style;
    let push_line = |cur: &mut Vec<Span<'static>>, out: &mut Vec<Line<'static>>| {
        // Trailing spaces of a wrapped line are dropped.
        if let Some(last) = cur.last_mut() {
            let t = last.content.trim_end().to_string();
            last.content = t.into();
        }
        out.push(Line::from(std::mem::take(cur)).style(line_style));
    };
    for (text, style) in pieces {
        let tw: usize = text.chars().map(|c| c.width().unwrap_or(0)).sum();
        let is_space = text.starts_with(' ');
        if used + tw <= w {
            used += tw;
            cur.push(Span::styled(text, style));
            continue;
        }
        if is_space {
            // A break: the spaces go.
            push_line(&mut cur, &mut out);
            cur.push(Span::raw(" ".repeat(indent)));
            used = indent;
            continue;
        }
        if tw <= w - indent && used > indent {
            push_line(&mut cur, &mut out);
            cur.push(Span::raw(" ".repeat(indent)));
            cur.push(Span::styled(text, style));
            used = indent + tw;
            continue;
        }
        // Longer than a line: break it.
        let mut piece = String::new();
        for ch in text.chars() {
            let cw = ch.width().unwrap_or(0);
            if used + cw > w {
                cur.push(Span::styled(std::mem::take(&mut piece), style));
                push_line(&mut cur, &mut out);
                cur.push(Span::raw(" ".repeat(indent)));
                used = indent;
            }
            used += cw;
            piece.push(ch);
        }
        cur.push(Span::styled(piece, style));
    }
    if !cur.is_empty() || out.is_empty() {
        push_line(&mut cur, &mut out);
    }
    // A continuation line holding only its indent (the text ended in spaces) is dropped.
    while out.len() > 1
        && out
            .last()
            .is_some_and(|l| l.spans.iter().all(|s| s.content.trim().is_empty()))
    {
        out.pop();
    }
    out
}

/// Draws `lines` in `block`, each word-wrapped with continuation lines `indent` columns in,
/// scrolled by `pane`'s offset; the bottom border says when more is above or below (`below`
/// is what it says for more below).
#[expect(
    clippy::too_many_arguments,
    reason = "one drawing call, each argument distinct"
)]
pub fn scrolled(
    frame: &mut ratatui::Frame<'_>,
    area: ratatui::layout::Rect,
    scroll: &crate::ui::scroll::Scrolls,
    pane: crate::ui::scroll::Pane,
    theme: &crate::ui::theme::Theme,
    block: ratatui::widgets::Block<'_>,
    lines: Vec<ratatui::text::Line<'_>>,
    indent: usize,
    below: &str,
) {
    use ratatui::text::Line;
    let inner = block.inner(area);
    let wrapped: Vec<Line<'static>> = lines
        .into_iter()
        .flat_map(|l| hang(l, usize::from(inner.width), indent))
        .collect();
    let n = wrapped.len();
    let top = scroll.drawn(pane, n, inner.height);
    let more_below = n > usize::from(top) + usize::from(inner.height);
    let hint = match (top > 0, more_below) {
        (false, false) => String::new(),
        (true, false) => " ↑ more above (Up, Home) ".into(),
        (false, true) => format!(" {below} "),
        (true, true) => " ↑↓ more (Up/Down, PgUp/PgDn) ".into(),
    };
    let block = if hint.is_empty() {
        block
    } else {
        block.title_bottom(Line::styled(hint, theme.get("ui.hint")).right_aligned())
    };
    frame.render_widget(
        ratatui::widgets::Paragraph::new(wrapped)
            .block(block)
            .scroll((top, 0)),
        area,
    );
}

/// A `w` x `h` rectangle centred in `area` (clamped to it), for overlays.
pub fn centered(area: ratatui::layout::Rect, w: u16, h: u16) -> ratatui::layout::Rect {
    let w = area.width.min(w);
    let h = area.height.min(h);
    ratatui::layout::Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

/// First visible row so that `sel` stays on screen.
pub const fn offset(sel: usize, visible: usize) -> usize {
    if visible == 0 || sel < visible {
        0
    } else {
        sel + 1 - visible
    }
}

/// A dialog button: focus is shown by brackets and reverse video (visible without colour); the
/// dangerous one is drawn in the danger style.
pub fn button(
    label: &str,
    focused: bool,
    danger: bool,
    theme: &crate::ui::theme::Theme,
) -> ratatui::text::Span<'static> {
    let base = if danger {
        theme.get("danger")
    } else {
        theme.get("ui")
    };
    let style = if focused {
        base.add_modifier(ratatui::style::Modifier::REVERSED | ratatui::style::Modifier::BOLD)
    } else {
        base
    };
    ratatui::text::Span::styled(
        if focused {
            format!("[> {label} <]")
        } else {
            format!("[  {label}  ]")
        },
        style,
    )
}

/// Draws `lines` as a dialog centred on `area` (at most 100 wide, as tall as its text), in the
/// danger style so it reads as dangerous even without colour.
pub fn dialog(
    frame: &mut ratatui::Frame<'_>,
    area: ratatui::layout::Rect,
    title: &str,
    lines: Vec<ratatui::text::Line<'_>>,
    theme: &crate::ui::theme::Theme,
) {
    use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
    let h = area
        .height
        .min(u16::try_from(lines.len() + 4).unwrap_or(u16::MAX));
    let rect = centered(area, area.width.min(100), h);
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" {title} "))
                .border_style(theme.get("danger")),
        ),
        rect,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_and_sparks_have_exact_widths() {
        for f in [0.0, 0.01, 0.5, 0.99, 1.0, 2.0] {
            assert_eq!(bar(f, 10).chars().count(), 10, "{f}");
        }
        assert_eq!(bar(1.0, 4), "████");
        assert_eq!(spark(&[0, 50, 100], 5), "  ▁▄█");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(offset(12, 10), 3);
        assert_eq!(age(10_000, 7_000), "3s");
    }

    fn text(l: &[ratatui::text::Line<'_>]) -> Vec<String> {
        l.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn hang_wraps_at_words_and_keeps_the_value_column() {
        let l = ratatui::text::Line::from("name      the value that is long enough to wrap twice");
        let w = text(&hang(l, 30, 10));
        assert_eq!(
            w,
            [
                "name      the value that is",
                "          long enough to wrap",
                "          twice"
            ]
        );
        for x in &w {
            assert!(x.chars().count() <= 30);
        }
        let long = ratatui::text::Line::from("k ".to_string() + &"x".repeat(25));
        let w = text(&hang(long, 12, 2));
        assert!(w.iter().all(|x| x.chars().count() <= 12), "{w:?}");
        assert_eq!(w.concat().replace(' ', "").len(), 26);
        assert_eq!(text(&hang(ratatui::text::Line::from(""), 20, 4)), [""]);
    }
}
