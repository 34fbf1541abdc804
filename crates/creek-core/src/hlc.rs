//! A hybrid logical clock (HLC) producing [`Timestamp`]s.
//!
//! Physical time is never read from the operating system: the driver passes
//! the current physical time (microseconds) into every [`Hlc::now`] call, so
//! the clock is deterministic and can be driven by a simulated time source.
//!
//! Guarantee: every `now` result is strictly greater than every timestamp the
//! clock returned or observed before (until the 64-bit space is exhausted at
//! [`Timestamp::MAX`], roughly 142 years after the epoch, where it saturates).

use crate::id::Timestamp;

/// A hybrid logical clock. See the [module docs](self).
///
/// A restarted replica can resume a clock with `Hlc::new()` followed by
/// [`Hlc::observe`] of the largest timestamp it had persisted.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Hlc {
    last: Timestamp,
}

impl Hlc {
    /// A fresh clock; its first `now` result is greater than
    /// [`Timestamp::ZERO`].
    pub const fn new() -> Hlc {
        Hlc {
            last: Timestamp::ZERO,
        }
    }

    /// Returns a new timestamp, strictly greater than every timestamp this
    /// clock returned or observed before, given the current physical time.
    ///
    /// If `physical_us` moved past the clock's physical part, the result is
    /// `Timestamp::new(physical_us, 0)` (physical time clamped to
    /// [`Timestamp::MAX_PHYSICAL_US`]). Otherwise (physical time stood still
    /// or went backwards) the logical counter is incremented; when it would
    /// overflow its 12 bits, the physical part advances by 1 µs and the
    /// logical counter restarts at 0. In all cases the result is
    /// `>= Timestamp::new(physical_us, 0)`. Saturates at [`Timestamp::MAX`].
    pub fn now(&mut self, physical_us: u64) -> Timestamp {
        let wall = Timestamp::new(physical_us, 0);
        self.last = if wall > self.last {
            wall
        } else {
            self.last.successor()
        };
        self.last
    }

    /// Takes a timestamp received from another replica into account, so
    /// that every later [`Hlc::now`] result exceeds `remote`.
    pub fn observe(&mut self, remote: Timestamp) {
        if remote > self.last {
            self.last = remote;
        }
    }

    /// The largest timestamp returned or observed so far.
    pub const fn last(&self) -> Timestamp {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn follows_physical_time_forward() {
        let mut c = Hlc::new();
        assert_eq!(c.now(100), Timestamp::new(100, 0));
        assert_eq!(c.now(250), Timestamp::new(250, 0));
        assert_eq!(c.last(), Timestamp::new(250, 0));
    }

    #[test]
    fn first_reading_at_time_zero_exceeds_zero() {
        let mut c = Hlc::new();
        assert_eq!(c.now(0), Timestamp::new(0, 1));
    }

    #[test]
    fn monotonic_under_backward_jumps() {
        let mut c = Hlc::new();
        let a = c.now(1_000);
        let b = c.now(10);
        let d = c.now(1_000);
        let e = c.now(999);
        assert!(a < b && b < d && d < e);
        assert_eq!(b, Timestamp::new(1_000, 1));
        assert_eq!(e, Timestamp::new(1_000, 3));
        assert_eq!(c.now(1_001), Timestamp::new(1_001, 0));
    }

    #[test]
    fn logical_overflow_advances_physical() {
        let mut c = Hlc::new();
        c.now(500);
        let mut prev = c.last();
        for _ in 0..Timestamp::MAX_LOGICAL {
            let t = c.now(500);
            assert!(t > prev);
            prev = t;
        }
        assert_eq!(prev, Timestamp::new(500, Timestamp::MAX_LOGICAL));
        let t = c.now(500);
        assert_eq!(t, Timestamp::new(501, 0));
        assert_eq!(c.now(500), Timestamp::new(501, 1));
        assert_eq!(c.now(502), Timestamp::new(502, 0));
    }

    #[test]
    fn observe_far_future_remote() {
        let mut c = Hlc::new();
        c.now(1_000);
        let remote = Timestamp::new(1_000_000_000, 7);
        c.observe(remote);
        assert_eq!(c.last(), remote);
        let t = c.now(1_001);
        assert_eq!(t, Timestamp::new(1_000_000_000, 8));
        // An older remote changes nothing.
        c.observe(Timestamp::new(5, 0));
        assert_eq!(c.now(1_002), Timestamp::new(1_000_000_000, 9));
        // Physical time catching up takes over again.
        assert_eq!(c.now(1_000_000_001), Timestamp::new(1_000_000_001, 0));
    }

    #[test]
    fn saturates_instead_of_panicking() {
        let mut c = Hlc::new();
        c.observe(Timestamp::MAX);
        assert_eq!(c.now(u64::MAX), Timestamp::MAX);
        let mut c = Hlc::new();
        assert_eq!(
            c.now(u64::MAX),
            Timestamp::new(Timestamp::MAX_PHYSICAL_US, 0)
        );
        assert_eq!(
            c.now(u64::MAX),
            Timestamp::new(Timestamp::MAX_PHYSICAL_US, 1)
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Now(u64),
        Observe(Timestamp),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u64..2_000).prop_map(Op::Now),
            1 => (0u64..2_000, 0u16..=Timestamp::MAX_LOGICAL)
                .prop_map(|(p, l)| Op::Observe(Timestamp::new(p, l))),
            1 => (0u64..2_000, (Timestamp::MAX_LOGICAL - 3)..=Timestamp::MAX_LOGICAL)
                .prop_map(|(p, l)| Op::Observe(Timestamp::new(p, l))),
        ]
    }

    proptest! {
        #[test]
        fn now_strictly_increases_past_everything_seen(
            ops in prop::collection::vec(op(), 1..200)
        ) {
            let mut c = Hlc::new();
            let mut seen_max = Timestamp::ZERO;
            for op in ops {
                match op {
                    Op::Now(p) => {
                        let t = c.now(p);
                        prop_assert!(t > seen_max, "{} !> {}", t, seen_max);
                        prop_assert!(t >= Timestamp::new(p, 0));
                        prop_assert_eq!(c.last(), t);
                        seen_max = t;
                    }
                    Op::Observe(r) => {
                        c.observe(r);
                        seen_max = seen_max.max(r);
                        prop_assert_eq!(c.last(), seen_max);
                    }
                }
            }
        }
    }
}
