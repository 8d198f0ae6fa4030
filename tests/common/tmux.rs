//! A real terminal for end-to-end tests: a tmux server on its own socket running one command,
//! with keys sent one at a time and the screen read back. tmux must be installed
//! (`scripts/test` installs it); a test never skips without it.

use super::wait_until;
use std::process::Command;

pub struct Session {
    pub socket: String,
}

impl Session {
    /// Starts `cmd` in a `w`x`h` terminal; `tag` keeps sockets apart.
    pub fn new(tag: &str, cmd: &str, w: u16, h: u16) -> Self {
        assert!(
            Command::new("tmux").arg("-V").output().is_ok(),
            "tmux is required for the end-to-end tests: install it (apt-get install tmux), or run scripts/test, which does"
        );
        // One socket per session: tests of one binary run in parallel, and two of the same
        // tag and width shared a server (one's kill-server ended the other's terminal).
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let socket = format!("partop-{tag}-{}-{w}-{n}", std::process::id());
        let ok = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "new-session",
                "-d",
                "-x",
                &w.to_string(),
                "-y",
                &h.to_string(),
                cmd,
            ])
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux did not start");
        Self { socket }
    }

    pub fn screen(&self) -> String {
        let o = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            Command::new("tmux")
                .args(["-L", &self.socket, "send-keys", k])
                .status()
                .unwrap();
            // One key per send: an Esc followed at once by a key would read as Alt-key.
            std::thread::sleep(std::time::Duration::from_millis(60));
        }
    }

    pub fn wait_for(&self, text: &str) {
        wait_until(&format!("{text:?} on screen"), || {
            self.screen().contains(text)
        });
    }

    /// A mouse event as an xterm SGR report (what a terminal sends while the application has
    /// mouse capture on): `button` 0 left press, 64 wheel up, 65 wheel down; at the 0-based
    /// cell `x`, `y`. Written to the pane as it is (`send-keys -l`).
    pub fn mouse(&self, button: u8, x: u16, y: u16) {
        let press = format!("\x1b[<{button};{};{}M", x + 1, y + 1);
        let mut seq = press;
        if button < 64 {
            seq.push_str(&format!("\x1b[<{button};{};{}m", x + 1, y + 1));
        }
        Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-l", &seq])
            .status()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(60));
    }

    /// Whether the application has asked the terminal for mouse reports.
    pub fn mouse_on(&self) -> bool {
        self.display("#{mouse_any_flag}") == "1" || self.display("#{mouse_button_flag}") == "1"
    }

    fn display(&self, what: &str) -> String {
        let o = Command::new("tmux")
            .args(["-L", &self.socket, "display-message", "-p", what])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    pub fn alternate_on(&self) -> bool {
        self.display("#{alternate_on}") == "1"
    }

    pub fn pane_pid(&self) -> u32 {
        self.display("#{pane_pid}").parse().unwrap()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}
