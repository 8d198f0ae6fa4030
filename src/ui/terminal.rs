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

/// Suspends on SIGTSTP as a shell job should: the terminal is restored first (so the shell is
/// usable), the process stops, and on `fg` (SIGCONT) raw mode and the alternate screen come
/// back and the whole screen is redrawn.
pub fn suspend(terminal: &mut DefaultTerminal) -> std::io::Result<()> {
    ratatui::restore();
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP).map_err(std::io::Error::from)?;
    // Continued here after `fg`.
    ratatui::crossterm::terminal::enable_raw_mode()?;
    ratatui::crossterm::execute!(
        std::io::stdout(),
        ratatui::crossterm::terminal::EnterAlternateScreen
    )?;
    terminal.clear()
}
