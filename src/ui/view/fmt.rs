//! Number and time formatting shared by the views.

pub use crate::domain::text::gib;

/// Memory with its unit: "512M" below 1 GiB, "80.7G" above.
pub fn mem(b: u64) -> String {
    if b < 1 << 30 {
        format!("{}M", b >> 20)
    } else {
        format!("{}G", gib(b))
    }
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
}
