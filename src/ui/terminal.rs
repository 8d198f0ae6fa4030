//! The terminal guard: raw mode and the alternate screen on entry, restored on drop and on panic
//! (ratatui's init installs a panic hook that restores first), so the shell always comes back.

use ratatui::DefaultTerminal;

/// Restores the terminal when dropped.
#[derive(Debug)]
pub struct Guard;

impl Guard {
    /// Enters raw mode and the alternate screen.
    pub fn enter() -> std::io::Result<(Self, DefaultTerminal)> {
        let t = ratatui::try_init()?;
        Ok((Self, t))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}
