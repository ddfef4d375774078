//! Progress a person can follow while `kmeta dev` and `kmeta demo` wait (for a CRD to be
//! Established, for controllers to start): one line on stderr, rewritten in place and cleared
//! when the wait ends, and only when stderr is a terminal, so piped output (tests, scripts)
//! stays exactly as it was. [`line()`] decides the text; [`Progress`] only writes it.

use std::io::{IsTerminal as _, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Waits shorter than this show nothing (no flicker for the usual millisecond steps).
pub const QUIET_FOR: Duration = Duration::from_millis(300);

/// How often a shown line is rewritten.
pub const TICK: Duration = Duration::from_millis(250);

/// The progress text for waiting `elapsed` for `what`: `None` while the wait is short.
pub fn line(what: &str, elapsed: Duration) -> Option<String> {
    (elapsed >= QUIET_FOR).then(|| format!("… waiting for {what} ({}s)", elapsed.as_secs()))
}

/// The controllers of `all` that have not started (not in `started`), for "waiting for
/// controllers to start: a, b".
pub fn not_started(all: &[String], started: &[String]) -> Vec<String> {
    all.iter()
        .filter(|name| !started.contains(name))
        .cloned()
        .collect()
}

/// What "waiting for …" names for the controllers still starting.
pub fn controllers_text(waiting: &[String]) -> String {
    match waiting {
        [one] => format!("controller {one} to start"),
        many => format!("controllers to start: {}", many.join(", ")),
    }
}

/// Writes progress lines on stderr when it is a terminal; does nothing otherwise.
#[derive(Debug)]
pub struct Progress {
    enabled: bool,
    shown: AtomicBool,
}

impl Progress {
    /// Enabled when stderr is a terminal.
    pub fn on_terminal() -> Progress {
        Progress::enabled(std::io::stderr().is_terminal())
    }

    /// Enabled or not, whatever stderr is.
    pub fn enabled(enabled: bool) -> Progress {
        Progress {
            enabled,
            shown: AtomicBool::new(false),
        }
    }

    /// Whether lines are written at all.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Shows the line for waiting for `what` since `since` (replacing the previous line).
    pub fn show(&self, what: &str, since: Instant) {
        if !self.enabled {
            return;
        }
        if let Some(text) = line(what, since.elapsed()) {
            // the cursor goes back to the line's start, so a log line written meanwhile
            // overwrites the progress instead of following it; a terminal that went away is no
            // reason to stop waiting
            let _ = write!(std::io::stderr(), "\r\x1b[2K{text}\r");
            self.shown.store(true, Ordering::Relaxed);
        }
    }

    /// Removes the line, if one is shown.
    pub fn clear(&self) {
        if self.shown.swap(false, Ordering::Relaxed) {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }

    /// Awaits `work`, showing that it waits for `what` while it runs.
    pub async fn during<F: std::future::Future>(&self, what: &str, work: F) -> F::Output {
        if !self.enabled {
            return work.await;
        }
        let since = Instant::now();
        tokio::pin!(work);
        let mut tick = tokio::time::interval(TICK);
        let out = loop {
            tokio::select! {
                out = &mut work => break out,
                _ = tick.tick() => self.show(what, since),
            }
        };
        self.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_waits_show_nothing_then_what_and_the_seconds() {
        assert_eq!(line("CRD x Established", Duration::from_millis(100)), None);
        assert_eq!(
            line("CRD x Established", Duration::from_millis(300)).as_deref(),
            Some("… waiting for CRD x Established (0s)")
        );
        assert_eq!(
            line("CRD x Established", Duration::from_millis(2600)).as_deref(),
            Some("… waiting for CRD x Established (2s)")
        );
    }

    #[test]
    fn the_controllers_still_starting_are_named() {
        let all = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let waiting = not_started(&all, &["b".to_owned()]);
        assert_eq!(waiting, ["a", "c"]);
        assert_eq!(controllers_text(&waiting), "controllers to start: a, c");
        assert_eq!(controllers_text(&waiting[..1]), "controller a to start");
        assert!(not_started(&all, &all).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn only_enabled_progress_shows_a_line() {
        for enabled in [false, true] {
            let p = Progress::enabled(enabled);
            let since = Instant::now();
            tokio::time::advance(Duration::from_secs(1)).await;
            p.show("x", since);
            assert_eq!(p.shown.load(Ordering::Relaxed), enabled);
            p.clear();
            assert!(!p.shown.load(Ordering::Relaxed));
        }
        let p = Progress::enabled(true);
        let v = p
            .during("x", async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                7
            })
            .await;
        assert_eq!(v, 7);
        assert!(
            !p.shown.load(Ordering::Relaxed),
            "cleared when the wait ends"
        );
    }
}
