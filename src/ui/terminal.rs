//! The terminal guard: raw mode, the alternate screen and mouse capture on entry, restored on
//! drop and on panic (ratatui's init installs a panic hook that restores first; ours releases
//! the mouse before it), so the shell always comes back, its mouse included.

use ratatui::DefaultTerminal;

/// Restores the terminal when dropped.
#[derive(Debug)]
pub struct Guard;

impl Guard {
    /// Enters raw mode and the alternate screen, and captures the mouse (click, wheel).
    pub fn enter() -> std::io::Result<(Self, DefaultTerminal)> {
        let t = ratatui::try_init()?;
        let ratatui_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            release_mouse();
            ratatui_hook(info);
        }));
        capture_mouse()?;
        Ok((Self, t))
    }
}

fn capture_mouse() -> std::io::Result<()> {
    ratatui::crossterm::execute!(
        std::io::stdout(),
        ratatui::crossterm::event::EnableMouseCapture
    )
}

/// The terminal's mouse back to the shell (selecting text); an error is ignored: the terminal
/// may be gone.
fn release_mouse() {
    let _ = ratatui::crossterm::execute!(
        std::io::stdout(),
        ratatui::crossterm::event::DisableMouseCapture
    );
}

impl Drop for Guard {
    fn drop(&mut self) {
        // Not `ratatui::restore`: it reports a failure with `eprintln!`, which panics when the
        // terminal is gone (an ssh connection dropped), and a panic here aborts the process
        // before the simulated node, locks and journal are cleaned up.
        release_mouse();
        if let Err(e) = ratatui::try_restore() {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "partop: cannot restore the terminal: {e}"
            );
            detach();
        }
    }
}

/// The terminal went away (SIGHUP, a closed pty): standard input, output and error point at
/// /dev/null from here on, so what runs after (stopping a simulated node, releasing locks,
/// writing the journal) runs to its end instead of dying on a write to a dead terminal (Rust's
/// `eprintln!`, ratatui's own cleanup and its panic hook all write there).
pub fn detach() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
}

/// Suspends on SIGTSTP as a shell job should: the terminal is restored first (so the shell is
/// usable), the process stops, and on `fg` (SIGCONT) raw mode and the alternate screen come
/// back and the whole screen is redrawn.
pub fn suspend(terminal: &mut DefaultTerminal) -> std::io::Result<()> {
    release_mouse();
    ratatui::try_restore()?;
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP).map_err(std::io::Error::from)?;
    // Continued here after `fg`.
    ratatui::crossterm::terminal::enable_raw_mode()?;
    ratatui::crossterm::execute!(
        std::io::stdout(),
        ratatui::crossterm::terminal::EnterAlternateScreen
    )?;
    capture_mouse()?;
    terminal.clear()
}

/// SIGTERM, SIGINT and SIGHUP end a full-screen view (the monitor, the fleet view) the way `q`
/// does, the terminal restored. On SIGHUP the terminal is gone: [`detach`] first, so nothing more
/// is written to it.
#[derive(Debug)]
pub struct QuitSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl QuitSignals {
    /// Catches the three from now on.
    pub fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for one of them.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
            _ = self.hup.recv() => detach(),
        }
    }
}
