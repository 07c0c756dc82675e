//! A progress bar on standard error for runs that take more than a second.
//!
//! It appears only when standard error is a terminal and the run has taken a second,
//! so quick commands, pipes and files stay clean. `PCIELAB_PROGRESS=always` shows it
//! from the start whatever standard error is (for scripts that want it, and tests);
//! `PCIELAB_PROGRESS=never` hides it.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// When a bar appears: after this much time.
const DELAY: Duration = Duration::from_secs(1);
/// Redraws at most this often.
const EVERY: Duration = Duration::from_millis(100);

/// A bar counting `done` of `total` units of work.
#[derive(Debug)]
pub struct Progress {
    what: String,
    total: u64,
    done: u64,
    start: Instant,
    last: Option<Instant>,
    enabled: bool,
    delay: Duration,
}

impl Progress {
    /// A bar for `total` units of `what` (e.g. "sweep", "DMAs").
    pub fn new(what: &str, total: u64) -> Progress {
        let mode = std::env::var("PCIELAB_PROGRESS").unwrap_or_default();
        let (enabled, delay) = match mode.as_str() {
            "always" => (true, Duration::ZERO),
            "never" => (false, DELAY),
            _ => (std::io::stderr().is_terminal(), DELAY),
        };
        Progress {
            what: what.to_string(),
            total: total.max(1),
            done: 0,
            start: Instant::now(),
            last: None,
            enabled,
            delay,
        }
    }

    /// Sets the work done so far.
    pub fn set(&mut self, done: u64) {
        self.done = done.min(self.total);
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.start) < self.delay {
            return;
        }
        if self.last.is_some_and(|t| now.duration_since(t) < EVERY) {
            return;
        }
        self.last = Some(now);
        self.draw();
    }

    fn draw(&self) {
        let w = 30u64;
        let k = (self.done * w / self.total) as usize;
        let mut e = std::io::stderr().lock();
        let _ = write!(
            e,
            "\r{} [{}{}] {}/{} {:.1} s",
            self.what,
            "#".repeat(k),
            ".".repeat(w as usize - k),
            self.done,
            self.total,
            self.start.elapsed().as_secs_f64()
        );
        let _ = e.flush();
    }

    /// Ends the bar: drawn once more, complete, and the line ended, if it was shown.
    pub fn finish(&mut self) {
        if self.last.is_some() {
            self.done = self.total;
            self.draw();
            eprintln!();
            self.last = None;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
