//! Log lines a remote party can cause, at most one per interval per kind.
//!
//! A replica removed from the group but still running, a misconfigured
//! one, or anyone who can reach a port can make a replica refuse something
//! as often as they like; one line per refusal would bury everything else
//! in the log (and cost a write each). Each kind of refusal gets its own
//! [`Throttle`], so a flood of one kind never hides the first line of
//! another; the line that is written says how many were not, and every
//! refusal is counted in a metric whatever the log says. Not for lines
//! only this replica's own state causes: those are logged as they happen.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The interval of the throttles the server uses.
pub const LOGGED_EVERY: Duration = Duration::from_secs(10);

/// One kind of log line, written at most once per interval.
#[derive(Debug)]
pub struct Throttle {
    every: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// When a line was last written.
    logged: Option<Instant>,
    /// Occurrences since then, not logged.
    unlogged: u64,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new(LOGGED_EVERY)
    }
}

impl Throttle {
    /// A throttle that lets one line through per `every`.
    pub fn new(every: Duration) -> Self {
        Throttle {
            every,
            state: Mutex::new(State::default()),
        }
    }

    /// One more occurrence, at `now`: `Some(n)` if it is to be logged,
    /// with the `n` occurrences not logged since the last line; `None` if
    /// not (it is counted for the next line).
    pub fn admit(&self, now: Instant) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.logged.is_some_and(|at| now < at + self.every) {
            s.unlogged += 1;
            return None;
        }
        s.logged = Some(now);
        Some(std::mem::take(&mut s.unlogged))
    }
}

/// The suffix of a throttled line: empty, or how many such events were
/// not logged since the previous line and the metric that counts them all.
pub fn unlogged(n: u64, metric: &str) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} more since the last such line; all are counted in {metric})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first occurrence is logged, the next ones within the interval
    /// are not, and the first after it says how many were skipped.
    #[test]
    fn one_line_per_interval_with_the_count_skipped() {
        let t = Throttle::new(Duration::from_secs(10));
        let start = Instant::now();
        assert_eq!(t.admit(start), Some(0));
        for s in 1..=4 {
            assert_eq!(t.admit(start + Duration::from_secs(s)), None);
        }
        assert_eq!(t.admit(start + Duration::from_secs(10)), Some(4));
        assert_eq!(t.admit(start + Duration::from_secs(11)), None);
        assert_eq!(
            unlogged(3, "creek_x"),
            " (3 more since the last such line; all are counted in creek_x)"
        );
        assert_eq!(unlogged(0, "creek_x"), "");
    }
}
