//! Scrolling of the panes that show text longer than the screen (Detail, Log, a journal entry,
//! the staging overlay, help). The reducer moves the offsets; the view that draws a pane writes
//! back how far it can scroll at the size it was drawn (a `Cell`, as ratatui's own stateful
//! widgets keep their offset), so an offset never runs past the end and Up always moves.

use super::command::Command;
use std::cell::Cell;

/// A pane that scrolls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pane {
    /// The Detail view.
    Detail,
    /// The Log view (counted from the newest line: 0 follows new lines).
    Log,
    /// The selected journal entry.
    Journal,
    /// The staging overlay (repartition or MIG).
    Stage,
    /// The help overlay.
    Help,
}

const PANES: usize = 5;

const fn slot(p: Pane) -> usize {
    match p {
        Pane::Detail => 0,
        Pane::Log => 1,
        Pane::Journal => 2,
        Pane::Stage => 3,
        Pane::Help => 4,
    }
}

/// Every pane's offset and how far it could scroll when last drawn.
#[derive(Debug, Default)]
pub struct Scrolls {
    offset: [u16; PANES],
    max: [Cell<u16>; PANES],
}

impl Scrolls {
    /// Lines scrolled past (from the top; for the Log, back from the newest line).
    pub fn offset(&self, p: Pane) -> u16 {
        self.offset[slot(p)].min(self.max[slot(p)].get())
    }

    /// Called by the view: `content` lines drawn in `height` rows. Returns the first line to
    /// show (from the top, for every pane).
    pub fn drawn(&self, p: Pane, content: usize, height: u16) -> u16 {
        let max = u16::try_from(content.saturating_sub(usize::from(height))).unwrap_or(u16::MAX);
        self.max[slot(p)].set(max);
        let o = self.offset[slot(p)].min(max);
        if p == Pane::Log { max - o } else { o }
    }

    /// Whether the pane has more below (or, for the Log, newer lines below).
    pub fn more_below(&self, p: Pane) -> bool {
        if p == Pane::Log {
            self.offset(p) > 0
        } else {
            self.offset(p) < self.max[slot(p)].get()
        }
    }

    /// Back to the start (a new target, a new overlay).
    pub fn reset(&mut self, p: Pane) {
        self.offset[slot(p)] = 0;
    }

    /// Moves `p` for a movement command; false for any other command.
    pub fn step(&mut self, p: Pane, c: Command, page: u16) -> bool {
        let max = self.max[slot(p)].get();
        let cur = self.offset[slot(p)].min(max);
        // The Log counts from its newest line: Up goes back in time.
        let log = p == Pane::Log;
        let down = |o: u16, n: u16| -> u16 {
            if log {
                o.saturating_sub(n)
            } else {
                o.saturating_add(n).min(max)
            }
        };
        let up = |o: u16, n: u16| -> u16 {
            if log {
                o.saturating_add(n).min(max)
            } else {
                o.saturating_sub(n)
            }
        };
        let next = match c {
            Command::SelectNext => down(cur, 1),
            Command::SelectPrev => up(cur, 1),
            Command::PageDown => down(cur, page),
            Command::PageUp => up(cur, page),
            Command::Top => up(cur, u16::MAX),
            Command::Bottom => down(cur, u16::MAX),
            _ => return false,
        };
        self.offset[slot(p)] = next;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_stay_within_what_was_drawn_and_up_always_moves() {
        let mut s = Scrolls::default();
        assert_eq!(s.drawn(Pane::Detail, 30, 10), 0);
        for _ in 0..100 {
            s.step(Pane::Detail, Command::SelectNext, 5);
        }
        assert_eq!(s.offset(Pane::Detail), 20);
        s.step(Pane::Detail, Command::SelectPrev, 5);
        assert_eq!(s.drawn(Pane::Detail, 30, 10), 19);
        s.step(Pane::Detail, Command::Top, 5);
        assert_eq!(s.offset(Pane::Detail), 0);
    }

    #[test]
    fn the_log_follows_its_newest_line_until_scrolled_back() {
        let mut s = Scrolls::default();
        assert_eq!(s.drawn(Pane::Log, 50, 10), 40);
        s.step(Pane::Log, Command::PageUp, 10);
        assert_eq!(s.drawn(Pane::Log, 50, 10), 30);
        assert!(s.more_below(Pane::Log));
        s.step(Pane::Log, Command::Top, 10);
        assert_eq!(s.drawn(Pane::Log, 50, 10), 0);
        s.step(Pane::Log, Command::Bottom, 10);
        assert_eq!(s.drawn(Pane::Log, 60, 10), 50, "follows new lines again");
    }
}
