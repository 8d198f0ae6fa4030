//! A `TestBackend` whose last frame can be read while the app loop runs (the loop owns the
//! terminal): a script on another thread waits for what the screen shows, then sends the next
//! key, as an operator would.

use ratatui::backend::{Backend, ClearType, TestBackend, WindowSize};
use ratatui::buffer::Cell;
use ratatui::layout::{Position, Size};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The backend: a `TestBackend`, its text copied out at every flush.
pub struct Watched {
    inner: TestBackend,
    screen: Screen,
}

/// The last frame flushed, as text (one line per row).
#[derive(Clone, Default)]
pub struct Screen(Arc<Mutex<String>>);

impl Watched {
    /// A `w` x `h` screen and the handle that reads it.
    pub fn new(w: u16, h: u16) -> (Self, Screen) {
        let screen = Screen::default();
        (
            Watched {
                inner: TestBackend::new(w, h),
                screen: screen.clone(),
            },
            screen,
        )
    }
}

impl Screen {
    /// The last frame.
    pub fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }

    /// Waits (60 s at most) until the screen shows every one of `words`; the frame, or the
    /// last one seen and what it lacks.
    pub fn wait_for(&self, words: &[&str]) -> Result<String, String> {
        self.wait(&format!("{words:?}"), |t| {
            words.iter().all(|w| t.contains(w))
        })
    }

    /// Waits (60 s at most) until the screen is `what` (`pred` says); the frame, or the last
    /// one seen.
    pub fn wait(&self, what: &str, pred: impl Fn(&str) -> bool) -> Result<String, String> {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            let t = self.text();
            if pred(&t) {
                return Ok(t);
            }
            if Instant::now() > end {
                return Err(format!("never shown: {what}; the last screen:\n{t}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Backend for Watched {
    type Error = <TestBackend as Backend>::Error;

    fn draw<'a, I>(&mut self, content: I) -> Result<(), Self::Error>
    where
        I: Iterator<Item = (u16, u16, &'a Cell)>,
    {
        self.inner.draw(content)
    }
    fn hide_cursor(&mut self) -> Result<(), Self::Error> {
        self.inner.hide_cursor()
    }
    fn show_cursor(&mut self) -> Result<(), Self::Error> {
        self.inner.show_cursor()
    }
    fn get_cursor_position(&mut self) -> Result<Position, Self::Error> {
        self.inner.get_cursor_position()
    }
    fn set_cursor_position<P: Into<Position>>(&mut self, position: P) -> Result<(), Self::Error> {
        self.inner.set_cursor_position(position)
    }
    fn clear(&mut self) -> Result<(), Self::Error> {
        self.inner.clear()
    }
    fn clear_region(&mut self, clear_type: ClearType) -> Result<(), Self::Error> {
        self.inner.clear_region(clear_type)
    }
    fn size(&self) -> Result<Size, Self::Error> {
        self.inner.size()
    }
    fn window_size(&mut self) -> Result<WindowSize, Self::Error> {
        self.inner.window_size()
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        self.inner.flush()?;
        *self.screen.0.lock().unwrap() = format!("{}", self.inner);
        Ok(())
    }
}
