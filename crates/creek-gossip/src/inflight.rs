//! Ops sent to a peer and not yet reported held: anti-entropy's
//! retransmission timer.
//!
//! A digest says what a peer holds, not what is on its way to it. Without
//! this record, every digest that arrives before an answer (or an eager
//! push) is taken as a loss and answered with the same ops again; and a peer
//! stuck behind a gap reports the same counter every tick, so it would be
//! sent its whole buffered range every tick. When links are slow (a loaded
//! machine, a partition healing) the duplicates make them slower still — a
//! feedback loop that once starved elections of bandwidth for minutes.
//!
//! So, per (peer, origin), a *flight*: the highest seq sent and the tick the
//! flight began. Until the flight's timeout passes, answers start past it.
//! When it passes, the ops the peer still lacks go again, and the timeout
//! doubles (up to a cap) if the peer reported no progress since the last
//! send: a peer that cannot use them (a gap nobody can fill) is not flooded.
//! A report that covers the whole flight ends it. The timeouts are in
//! ticks of the group's tick scale (the driver's measure of its links'
//! round trip, [`crate::Gossip::set_tick_scale`]): on links that slow
//! consensus down, a resend waits as much longer as an election does.

use std::collections::BTreeMap;

use creek_core::ReplicaId;

/// One flight of an origin's ops toward one peer.
#[derive(Clone, Copy, Debug)]
struct Flight {
    /// The highest seq sent.
    through: u64,
    /// The tick the flight began (or was last resent).
    since: u64,
    /// Ticks after `since` before the unreported part goes again.
    timeout: u64,
    /// The peer's counter when the flight began.
    reported: u64,
}

/// The flights toward every peer. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Inflight {
    flights: BTreeMap<(ReplicaId, ReplicaId), Flight>,
    /// The first timeout of a flight, in ticks.
    timeout: u64,
    /// The longest timeout after back-offs, in ticks.
    timeout_max: u64,
    /// The tick scale both are multiplied by.
    scale: u64,
}

impl Inflight {
    pub(crate) fn new(timeout_ticks: u64, timeout_max_ticks: u64) -> Self {
        Inflight {
            flights: BTreeMap::new(),
            timeout: timeout_ticks.max(1),
            timeout_max: timeout_max_ticks.max(timeout_ticks).max(1),
            scale: 1,
        }
    }

    /// Stretch new timeouts by `scale` (at least 1).
    pub(crate) fn set_scale(&mut self, scale: u64) {
        self.scale = scale.max(1);
    }

    fn base(&self) -> u64 {
        self.timeout.saturating_mul(self.scale)
    }

    /// The seq after which `origin`'s ops go to `peer`, which reported
    /// holding through `has`, at tick `now`: past the flight in the air, or
    /// `has` when there is none or it timed out (which starts a new one).
    pub(crate) fn resume_after(
        &mut self,
        peer: ReplicaId,
        origin: ReplicaId,
        has: u64,
        now: u64,
    ) -> u64 {
        let (base, max) = (self.base(), self.timeout_max.saturating_mul(self.scale));
        let Some(flight) = self.flights.get_mut(&(peer, origin)) else {
            return has;
        };
        if has >= flight.through {
            // Everything sent arrived.
            self.flights.remove(&(peer, origin));
            return has;
        }
        if now.saturating_sub(flight.since) < flight.timeout {
            return flight.through;
        }
        flight.timeout = if has <= flight.reported {
            flight.timeout.saturating_mul(2).min(max).max(base)
        } else {
            base
        };
        flight.through = has;
        flight.since = now;
        flight.reported = has;
        has
    }

    /// `origin`'s ops through `through` went to `peer` (which had reported
    /// holding through `has`) at tick `now`.
    pub(crate) fn sent(
        &mut self,
        peer: ReplicaId,
        origin: ReplicaId,
        through: u64,
        has: u64,
        now: u64,
    ) {
        let timeout = self.base();
        let flight = self.flights.entry((peer, origin)).or_insert(Flight {
            through,
            since: now,
            timeout,
            reported: has,
        });
        flight.through = flight.through.max(through);
    }

    /// Forget the flights toward `peer` (it lost its data, or left).
    pub(crate) fn forget(&mut self, peer: ReplicaId) {
        self.flights.retain(|&(p, _), _| p != peer);
    }

    /// Flights in the air.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.flights.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: ReplicaId = ReplicaId(2);
    const O: ReplicaId = ReplicaId(3);

    #[test]
    fn answers_start_past_a_flight_until_it_times_out() {
        let mut f = Inflight::new(10, 40);
        assert_eq!(f.resume_after(P, O, 5, 0), 5);
        f.sent(P, O, 20, 5, 0);
        // In the air: the same digest again sends nothing already sent.
        assert_eq!(f.resume_after(P, O, 5, 3), 20);
        // Partly arrived, still in the air.
        assert_eq!(f.resume_after(P, O, 12, 9), 20);
        // Timed out: what the peer still lacks goes again.
        assert_eq!(f.resume_after(P, O, 12, 10), 12);
    }

    #[test]
    fn a_report_covering_the_flight_ends_it() {
        let mut f = Inflight::new(10, 40);
        f.sent(P, O, 20, 5, 0);
        assert_eq!(f.resume_after(P, O, 20, 1), 20);
        assert_eq!(f.len(), 0);
    }

    #[test]
    fn a_peer_that_makes_no_progress_is_backed_off() {
        let mut f = Inflight::new(10, 40);
        f.sent(P, O, 20, 5, 0);
        // Resend at 10, then the timeout doubles: 20, 40, capped at 40.
        let mut resent = Vec::new();
        for now in 1..=200 {
            if f.resume_after(P, O, 5, now) == 5 {
                resent.push(now);
                f.sent(P, O, 20, 5, now);
            }
        }
        assert_eq!(resent, vec![10, 30, 70, 110, 150, 190]);
        // Progress brings the timeout back to its start.
        assert_eq!(f.resume_after(P, O, 6, 230), 6);
        f.sent(P, O, 20, 6, 230);
        assert_eq!(f.resume_after(P, O, 6, 239), 20);
        assert_eq!(f.resume_after(P, O, 6, 240), 6);
    }

    #[test]
    fn slow_links_stretch_the_timeout() {
        let mut f = Inflight::new(10, 40);
        f.set_scale(3);
        f.sent(P, O, 20, 5, 0);
        assert_eq!(f.resume_after(P, O, 5, 29), 20);
        assert_eq!(f.resume_after(P, O, 5, 30), 5);
    }

    #[test]
    fn forgetting_a_peer_drops_its_flights() {
        let mut f = Inflight::new(10, 40);
        f.sent(P, O, 20, 5, 0);
        f.sent(ReplicaId(4), O, 20, 5, 0);
        f.forget(P);
        assert_eq!(f.resume_after(P, O, 5, 1), 5);
        assert_eq!(f.len(), 1);
    }
}
