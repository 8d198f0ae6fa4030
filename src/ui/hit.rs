//! Where the last frame drew what a mouse click can hit: the view tabs and the rows of the
//! active list. The views write it while drawing (cells, as `scroll` keeps how far a pane can
//! scroll); the reducer reads it to turn a click into a view or a selection, so a click always
//! means what the operator saw under the pointer.

use super::views::View;
use std::cell::{Cell, RefCell};

/// The rows of a list as drawn: item `first` on screen row `y`, one item every `stride` rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    /// Screen row of the first item shown.
    pub y: u16,
    /// Rows shown (screen rows, not items).
    pub height: u16,
    /// Leftmost and one past the rightmost column.
    pub x: (u16, u16),
    /// Index of the first item shown.
    pub first: usize,
    /// Screen rows per item.
    pub stride: u16,
}

/// What the last frame drew where.
#[derive(Debug, Default)]
pub struct Hits {
    tabs: RefCell<Vec<(u16, u16, u16, View)>>,
    rows: Cell<Option<Rows>>,
}

impl Hits {
    /// A new frame: nothing drawn yet (a view without a list leaves none).
    pub fn clear(&self) {
        self.tabs.borrow_mut().clear();
        self.rows.set(None);
    }

    /// Called by the tab bar: `view`'s tab spans columns `x0..x1` of row `y`.
    pub fn tab(&self, y: u16, x0: u16, x1: u16, view: View) {
        self.tabs.borrow_mut().push((y, x0, x1, view));
    }

    /// Called by a list view: where its rows are.
    pub fn rows(&self, r: Rows) {
        self.rows.set(Some(r));
    }

    /// The tab at a screen cell.
    pub fn tab_at(&self, x: u16, y: u16) -> Option<View> {
        self.tabs
            .borrow()
            .iter()
            .find(|(ty, x0, x1, _)| *ty == y && (*x0..*x1).contains(&x))
            .map(|t| t.3)
    }

    /// The list item at a screen cell.
    pub fn row_at(&self, x: u16, y: u16) -> Option<usize> {
        let r = self.rows.get()?;
        let inside =
            (r.x.0..r.x.1).contains(&x) && (r.y..r.y.saturating_add(r.height)).contains(&y);
        inside.then(|| r.first + usize::from((y - r.y) / r.stride.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_click_maps_to_the_item_drawn_there_and_nothing_outside() {
        let h = Hits::default();
        h.rows(Rows {
            y: 5,
            height: 4,
            x: (1, 79),
            first: 10,
            stride: 2,
        });
        h.tab(3, 0, 12, View::Gpus);
        // Every cell of an 80x24 screen: 4 rows x 78 columns hit, 2 items; the tab 12 cells.
        let mut hits = 0;
        for y in 0..24 {
            for x in 0..80 {
                if let Some(i) = h.row_at(x, y) {
                    hits += 1;
                    assert_eq!(i, 10 + usize::from((y - 5) / 2), "({x},{y})");
                }
            }
        }
        assert_eq!(hits, 4 * 78);
        assert_eq!(h.tab_at(11, 3), Some(View::Gpus));
        assert_eq!(h.tab_at(12, 3), None);
        h.clear();
        assert_eq!(h.row_at(5, 5), None);
    }
}
