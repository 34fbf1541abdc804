//! Consensus timing fitted to the links a replica sees.
//!
//! Raft elects a leader only if a candidate's vote requests and their
//! answers cross the network within one election timeout (with pre-vote,
//! twice: the pre-vote round, then the vote). A timing that is fine on a LAN
//! (CAB's election timeout is 10 ticks) cannot elect anyone when the round
//! trip is longer than the timeout: every candidate times out before its
//! votes arrive, starts a new term, and the group never has a leader.
//!
//! So a node measures its links. Every [`PROBE_EVERY_US`] it sends each peer
//! a [`Probe`] stamped with its own clock; the echo brings the stamp back and
//! the difference is one round-trip sample (at tick resolution: the node
//! knows the time of its last tick). A link's round trip is the median of
//! its last [`SAMPLES_KEPT`] samples (a message delayed now and then, or a
//! probe that waited behind a disk write, must not stretch the timing for
//! everyone; the margin of [`ELECTION_RTTS`] absorbs jitter), and a node's
//! round trip is that of its slowest link. Probes and echoes carry it, so
//! every replica learns the group's slowest link, and the group's round
//! trip is the largest of its own and those reported.
//!
//! From the group's round trip follows one *tick scale* `k` shared by the
//! group: CAB ticks its library once every `k` driver ticks, so every
//! election timeout and heartbeat interval is stretched by `k`, and the
//! smallest election timeout ([`ELECTION_TICKS_BASE`] ticks, see
//! `CabConfig::for_group`) spans at least [`ELECTION_RTTS`] round trips.
//! Replicas keep their staggered timeouts (10k, 13k, 16k, … ticks). The
//! scale grows at once and shrinks only once it is twice what the links
//! need (no flapping). Timing decides liveness only: a scale that is wrong
//! for a moment delays an election, never breaks safety.
//!
//! A round trip measured by the node loop also holds the time the probe
//! and its echo waited for a loop held up at either end (a long turn, CPU
//! starvation on a busy machine, a replica catching up after a restart),
//! which is not the network. The driver says when its own loop stalled
//! ([`Node::stalled`](crate::Node::stalled): the server, after a
//! node-loop turn longer than [`STALL_TICKS`] ticks and
//! [`STALL_MIN_US`]; the simulator, whose loop never stalls, never does):
//! a sample whose probe was sent before that stall is no sample, and a
//! probe handled within one stall's length after it is not echoed (it may
//! have waited in this node's queue), so a stalled replica neither
//! measures nor reports its stall, and its peers measure it only once it
//! keeps up again.
//!
//! A loop that turns in short turns can still hold frames in its queue
//! (thousands of peer frames after a restart, a catch-up, CPU starvation).
//! A driver that knows when a frame arrived says so
//! ([`Node::on_frame_at`](crate::Node::on_frame_at); the server does, the
//! simulator has no queue): an echo's round trip ends at its receipt, and
//! an echo's stamp is the probe's moved on by how long the probe waited at
//! the echoing end before its echo, so neither end's queue is counted as
//! the link.
//!
//! A peer not heard from for [`STALE_AFTER_US`] (down, paused, cut off)
//! counts for nothing: its samples and its last report are stale. When it
//! is heard again, its samples start over, and echoes of probes sent
//! before that — they waited in a queue while it was away — are no
//! samples. Otherwise one restart or pause could stretch the timing for a
//! long time: a report of seconds from a peer killed right after sending
//! it would stay with the others until it came back.

use std::collections::{BTreeMap, VecDeque};

use creek_core::ReplicaId;
use creek_wire::Probe;

/// How often a node probes each peer (its own clock, microseconds).
pub const PROBE_EVERY_US: u64 = 200_000;

/// Samples kept per peer; the link's round trip is their median.
pub const SAMPLES_KEPT: usize = 8;

/// Round trips the smallest election timeout spans (pre-vote round, vote
/// round, and margin for jitter).
pub const ELECTION_RTTS: u64 = 4;

/// The smallest election timeout in ticks before scaling (that of
/// `CabConfig::for_group`'s lowest-ranked replica).
pub const ELECTION_TICKS_BASE: u64 = 10;

/// A node-loop turn longer than this many ticks is a stall of the node
/// itself.
pub const STALL_TICKS: u64 = 10;

/// ... and of at least this long (microseconds).
pub const STALL_MIN_US: u64 = 50_000;

/// A sample above this is a clock jump, not a link (microseconds).
const SAMPLE_MAX_US: u64 = 10_000_000;

/// A peer silent this long counts for nothing in the timing (ten probe
/// intervals; microseconds).
pub const STALE_AFTER_US: u64 = 10 * PROBE_EVERY_US;

/// When a driver received a frame and when it handed it to the node (the
/// node's clock, microseconds; see [`Node::on_frame_at`](crate::Node::on_frame_at)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// When the frame was read whole.
    pub received_us: u64,
    /// When the node was given it (after it waited in the driver's queue).
    pub handled_us: u64,
}

/// What the node knows of its links' timing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkTiming {
    /// The largest round trip measured by this replica (microseconds; 0:
    /// none yet).
    pub own_rtt_us: u64,
    /// The largest round trip measured anywhere in the group, as reported.
    pub group_rtt_us: u64,
    /// CAB's tick scale (1: the configured timing).
    pub scale: u64,
    /// This replica's election timeout now (microseconds).
    pub election_timeout_us: u64,
    /// The leader's heartbeat interval now (microseconds).
    pub heartbeat_us: u64,
    /// The driver's tick (microseconds).
    pub tick_us: u64,
}

#[derive(Default)]
struct Peer {
    samples: VecDeque<u64>,
    /// The peer's own round trip, as it last reported it.
    reported_us: u64,
    /// When a probe or an echo from it last arrived (`None`: never).
    heard_us: Option<u64>,
    /// When it was last heard again after a silence: echoes of probes
    /// stamped then or before are no samples.
    back_us: Option<u64>,
}

impl Peer {
    /// Heard from within [`STALE_AFTER_US`] of `now_us`.
    fn live(&self, now_us: u64) -> bool {
        self.heard_us
            .is_some_and(|h| now_us.saturating_sub(h) < STALE_AFTER_US)
    }

    /// The median sample (the lower one of an even count, so one delayed
    /// sample of two does not count; 0: none yet).
    fn rtt_us(&self) -> u64 {
        let mut sorted: Vec<u64> = self.samples.iter().copied().collect();
        sorted.sort_unstable();
        sorted
            .get(sorted.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(0)
    }
}

/// The probing state of one node.
pub(crate) struct Timing {
    tick_us: u64,
    election_tick: u64,
    heartbeat_tick: u64,
    peers: BTreeMap<ReplicaId, Peer>,
    /// The node's clock at its last tick.
    now_us: u64,
    next_probe_us: u64,
    scale: u64,
    /// The node's clock (at its last tick) when its last stall ended.
    stall_ended_us: Option<u64>,
}

impl Timing {
    pub(crate) fn for_config(config: &crate::NodeConfig) -> Self {
        Timing::new(
            config.tick_us,
            config.cab.election_tick as u64,
            config.cab.heartbeat_tick as u64,
            config.gossip.peers.iter().copied(),
        )
    }

    pub(crate) fn new(
        tick_us: u64,
        election_tick: u64,
        heartbeat_tick: u64,
        peers: impl IntoIterator<Item = ReplicaId>,
    ) -> Self {
        Timing {
            tick_us: tick_us.max(1),
            election_tick,
            heartbeat_tick,
            peers: peers.into_iter().map(|p| (p, Peer::default())).collect(),
            now_us: 0,
            next_probe_us: 0,
            scale: 1,
            stall_ended_us: None,
        }
    }

    /// Probe these peers from now on (those already probed keep their
    /// measurements).
    pub(crate) fn set_peers(&mut self, peers: &[ReplicaId]) {
        self.peers.retain(|p, _| peers.contains(p));
        for p in peers {
            self.peers.entry(*p).or_default();
        }
    }

    /// A tick at `now_us`: the probes due, if any.
    pub(crate) fn tick(&mut self, now_us: u64) -> Vec<(ReplicaId, Probe)> {
        self.now_us = now_us;
        // A clock that jumped back far must not silence the probes.
        if now_us < self.next_probe_us.saturating_sub(PROBE_EVERY_US) {
            self.next_probe_us = now_us;
        }
        if now_us < self.next_probe_us {
            return Vec::new();
        }
        self.next_probe_us = now_us + PROBE_EVERY_US;
        // A peer that fell silent stops counting.
        self.update_scale();
        let probe = Probe {
            stamp_us: now_us,
            echo: false,
            rtt_us: self.own_rtt_us(),
        };
        self.peers.keys().map(|p| (*p, probe)).collect()
    }

    /// A probe or echo from `from`: the echo to send back, if any. `at`
    /// is when the driver received it and when it hands it over (the
    /// node's clock), if it knows; else both are the last tick. What it
    /// reports or measures may change the scale ([`Timing::scale`]).
    pub(crate) fn on_probe(
        &mut self,
        from: ReplicaId,
        probe: Probe,
        at: Option<Receipt>,
    ) -> Option<Probe> {
        let now = self.now_us;
        // Measured to the receipt: the time the frame then waited in this
        // node's queue is not the link's.
        let (arrived, handled) = at.map_or((now, now), |r| {
            (r.received_us.min(r.handled_us), r.handled_us)
        });
        let peer = self.peers.get_mut(&from)?;
        if peer.heard_us.is_some() && !peer.live(now) {
            peer.samples.clear();
            peer.back_us = Some(now);
        }
        peer.heard_us = Some(now);
        peer.reported_us = probe.rtt_us.min(SAMPLE_MAX_US);
        // An echo stamped in the future is from before a backward clock
        // jump, one stamped before the peer was back waited in a queue, and
        // one past SAMPLE_MAX_US is a forward jump: no sample.
        // An echo of a probe sent before this node's last stall, or in the
        // turn that stalled (stamped at its tick, sent at its end), holds
        // the stall.
        let queued = peer.back_us.is_some_and(|back| probe.stamp_us <= back)
            || self.stall_ended_us.is_some_and(|s| probe.stamp_us <= s);
        let rtt = arrived
            .checked_sub(probe.stamp_us)
            .filter(|rtt| probe.echo && !queued && *rtt <= SAMPLE_MAX_US);
        if let Some(rtt) = rtt {
            if peer.samples.len() == SAMPLES_KEPT {
                peer.samples.pop_front();
            }
            peer.samples.push_back(rtt);
        }
        self.update_scale();
        // A probe handled soon after a stall of this node ended may have
        // waited in its queue (a node catching up stalls turn after turn):
        // its echo would carry the stall.
        let stall_us = self.stall_us();
        let just_stalled = self
            .stall_ended_us
            .is_some_and(|s| now < s.saturating_add(stall_us));
        // The echo's stamp is the probe's moved on by the time the probe
        // waited here before its echo: the prober, measuring from the
        // stamp, does not count this node's queue either. The stamp is the
        // prober's clock plus a duration, never compared with this node's
        // clock.
        let held = handled - arrived;
        (!probe.echo && !just_stalled).then(|| Probe {
            stamp_us: probe.stamp_us.saturating_add(held),
            echo: true,
            rtt_us: self.own_rtt_us(),
        })
    }

    /// A node-loop turn longer than this is a stall of the node.
    pub(crate) fn stall_us(&self) -> u64 {
        (STALL_TICKS * self.tick_us).max(STALL_MIN_US)
    }

    /// The node's own loop was held up until now (a turn longer than
    /// [`Timing::stall_us`]): what it measures or echoes next may hold the
    /// stall.
    pub(crate) fn stalled(&mut self) {
        self.stall_ended_us = Some(self.now_us);
    }

    /// CAB's tick scale now.
    pub(crate) fn scale(&self) -> u64 {
        self.scale
    }

    /// The slowest link to a live peer.
    fn own_rtt_us(&self) -> u64 {
        self.live_peers().map(Peer::rtt_us).max().unwrap_or(0)
    }

    /// The slowest link of the group: this replica's and those the live
    /// peers report.
    fn group_rtt_us(&self) -> u64 {
        self.live_peers()
            .map(|p| p.reported_us)
            .fold(self.own_rtt_us(), u64::max)
    }

    fn live_peers(&self) -> impl Iterator<Item = &Peer> {
        let now = self.now_us;
        self.peers.values().filter(move |p| p.live(now))
    }

    /// The tick scale the links need now, with hysteresis applied.
    fn update_scale(&mut self) {
        let base_us = ELECTION_TICKS_BASE * self.tick_us;
        let needed = (ELECTION_RTTS * self.group_rtt_us())
            .div_ceil(base_us)
            .max(1);
        if needed > self.scale || needed * 2 <= self.scale {
            self.scale = needed;
        }
    }

    pub(crate) fn status(&self) -> LinkTiming {
        LinkTiming {
            own_rtt_us: self.own_rtt_us(),
            group_rtt_us: self.group_rtt_us(),
            scale: self.scale,
            election_timeout_us: self.election_tick * self.scale * self.tick_us,
            heartbeat_us: self.heartbeat_tick * self.scale * self.tick_us,
            tick_us: self.tick_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo_after(t: &mut Timing, from: ReplicaId, rtt_us: u64) {
        let stamp = t.now_us;
        t.now_us += rtt_us;
        let echo = Probe {
            stamp_us: stamp,
            echo: true,
            rtt_us: 0,
        };
        assert_eq!(t.on_probe(from, echo, None), None);
    }

    #[test]
    fn a_lan_keeps_the_configured_timing() {
        let mut t = Timing::new(1_000, 10, 2, [ReplicaId(2), ReplicaId(3)]);
        assert_eq!(t.tick(0).len(), 2);
        echo_after(&mut t, ReplicaId(2), 1_000);
        assert_eq!(t.scale(), 1);
        assert_eq!(t.status().election_timeout_us, 10_000);
    }

    #[test]
    fn slow_links_stretch_the_timing_and_the_group_agrees() {
        let mut t = Timing::new(10_000, 13, 2, [ReplicaId(2), ReplicaId(3)]);
        t.tick(0);
        // 240 ms round trip: the smallest election timeout must span 960 ms.
        echo_after(&mut t, ReplicaId(2), 240_000);
        assert_eq!(t.scale(), 10);
        let s = t.status();
        assert_eq!(s.own_rtt_us, 240_000);
        assert_eq!(s.election_timeout_us, 1_300_000);
        assert_eq!(s.heartbeat_us, 200_000);
        // A peer that sees a slower link raises everyone's scale.
        let probe = Probe {
            stamp_us: 5,
            echo: false,
            rtt_us: 400_000,
        };
        let echo = t
            .on_probe(ReplicaId(3), probe, None)
            .expect("a probe is echoed");
        assert!(echo.echo && echo.stamp_us == 5 && echo.rtt_us == 240_000);
        assert_eq!(t.scale(), 16);
    }

    #[test]
    fn a_delayed_message_does_not_stretch_the_timing() {
        let mut t = Timing::new(1_000, 10, 2, [ReplicaId(2)]);
        t.tick(0);
        for rtt in [20_000, 1_500_000, 21_000, 19_000, 22_000] {
            echo_after(&mut t, ReplicaId(2), rtt);
        }
        assert_eq!(t.status().own_rtt_us, 21_000);
        assert_eq!(t.scale(), 9);
    }

    #[test]
    fn the_scale_shrinks_only_when_far_too_large() {
        let mut t = Timing::new(1_000, 10, 2, [ReplicaId(2)]);
        t.tick(0);
        echo_after(&mut t, ReplicaId(2), 100_000);
        assert_eq!(t.scale(), 40);
        // The slow samples age out; 60 ms needs 24, not below half of 40.
        for _ in 0..SAMPLES_KEPT {
            echo_after(&mut t, ReplicaId(2), 60_000);
        }
        assert_eq!(t.scale(), 40);
        for _ in 0..SAMPLES_KEPT {
            echo_after(&mut t, ReplicaId(2), 10_000);
        }
        assert_eq!(t.scale(), 4);
    }

    #[test]
    fn a_silent_peer_stops_stretching_the_timing() {
        let mut t = Timing::new(10_000, 10, 2, [ReplicaId(2), ReplicaId(3)]);
        t.tick(0);
        echo_after(&mut t, ReplicaId(2), 20_000);
        // Replica 3 reports a link of seconds, then is killed.
        let report = Probe {
            stamp_us: 0,
            echo: false,
            rtt_us: 3_000_000,
        };
        t.on_probe(ReplicaId(3), report, None);
        assert_eq!(t.scale(), 120);
        // Replica 2 goes on answering; replica 3 stays silent.
        for _ in 0..12 {
            let now = t.now_us + PROBE_EVERY_US;
            t.tick(now);
            echo_after(&mut t, ReplicaId(2), 20_000);
        }
        assert_eq!(t.status().group_rtt_us, 20_000);
        assert_eq!(t.scale(), 1);
    }

    #[test]
    fn probes_queued_while_a_peer_was_away_are_no_samples() {
        let mut t = Timing::new(10_000, 10, 2, [ReplicaId(2)]);
        t.tick(0);
        echo_after(&mut t, ReplicaId(2), 20_000);
        assert_eq!(t.scale(), 1);
        // Replica 2 is paused for 3 s; the probes sent meanwhile wait.
        let mut stamps = Vec::new();
        for _ in 0..15 {
            let now = t.now_us + PROBE_EVERY_US;
            t.tick(now);
            stamps.push(now);
        }
        // It is back: it echoes every queued probe at once.
        for stamp in stamps {
            let echo = Probe {
                stamp_us: stamp,
                echo: true,
                rtt_us: 0,
            };
            t.on_probe(ReplicaId(2), echo, None);
        }
        assert_eq!(t.status().own_rtt_us, 0, "no sample from the queue");
        assert_eq!(t.scale(), 1);
        // Fresh probes are measured again.
        let now = t.now_us;
        t.tick(now + PROBE_EVERY_US);
        echo_after(&mut t, ReplicaId(2), 30_000);
        assert_eq!(t.status().own_rtt_us, 30_000);
    }

    /// A node whose own loop was held up for 600 ms neither measures nor
    /// echoes that stall.
    #[test]
    fn a_stall_of_the_node_itself_is_not_the_network() {
        let mut t = Timing::new(10_000, 10, 2, [ReplicaId(2)]);
        t.tick(0);
        echo_after(&mut t, ReplicaId(2), 1_000);
        for now in (10_000..200_000).step_by(10_000) {
            t.tick(now);
        }
        // A probe goes out at 200 ms; the loop stalls until 800 ms, and its
        // driver says so.
        assert_eq!(t.tick(200_000).len(), 1, "a probe is due");
        t.tick(800_000);
        t.stalled();
        let late_echo = Probe {
            stamp_us: 200_000,
            echo: true,
            rtt_us: 0,
        };
        assert_eq!(t.on_probe(ReplicaId(2), late_echo, None), None);
        // Nor is the echo of a probe stamped at the tick of the turn that
        // stalled.
        let same_turn = Probe {
            stamp_us: 800_000,
            ..late_echo
        };
        t.tick(850_000);
        assert_eq!(t.on_probe(ReplicaId(2), same_turn, None), None);
        assert_eq!(t.status().own_rtt_us, 1_000, "the stall is no sample");
        assert_eq!(t.scale(), 1);
        // A peer's probe handled soon after the stall may have waited here:
        // no echo. Once the node keeps up (a stall's length later) it is
        // echoed again.
        let probe = Probe {
            stamp_us: 7,
            echo: false,
            rtt_us: 0,
        };
        assert_eq!(t.on_probe(ReplicaId(2), probe, None), None);
        t.tick(810_000);
        assert_eq!(t.on_probe(ReplicaId(2), probe, None), None);
        for now in (820_000..=900_000).step_by(10_000) {
            t.tick(now);
        }
        assert!(t.on_probe(ReplicaId(2), probe, None).is_some());
        // Probes sent after the stall are measured.
        t.tick(1_000_000);
        echo_after(&mut t, ReplicaId(2), 2_000);
        assert_eq!(t.status().own_rtt_us, 1_000);
        echo_after(&mut t, ReplicaId(2), 3_000);
        assert_eq!(t.status().own_rtt_us, 2_000);
    }

    /// Frames that waited in a node's queue (a busy loop that still turns
    /// in short turns: no stall) are measured to their receipt, at both
    /// ends: a 2 ms link stays a 2 ms link while each end's queue holds
    /// frames for 400 ms.
    #[test]
    fn a_frame_that_waited_in_the_queue_is_measured_to_its_receipt() {
        // The echoing end: a probe stamped 50 by the prober's clock,
        // received here at 1_000, handled at 401_000 (after the tick at
        // 390_000).
        let mut echoer = Timing::new(10_000, 10, 2, [ReplicaId(1)]);
        echoer.tick(390_000);
        let probe = Probe {
            stamp_us: 50,
            echo: false,
            rtt_us: 0,
        };
        let at = |received_us, handled_us| {
            Some(Receipt {
                received_us,
                handled_us,
            })
        };
        let echo = echoer
            .on_probe(ReplicaId(1), probe, at(1_000, 401_000))
            .expect("echoed");
        assert_eq!(echo.stamp_us, 50 + 400_000, "the hold moves the stamp on");
        // Without a receipt time the hold is unknown: the stamp comes back
        // as it went.
        let plain = echoer.on_probe(ReplicaId(1), probe, None).expect("echoed");
        assert_eq!(plain.stamp_us, 50);

        // The probing end: it sent at 0; the echo left the peer (stamp
        // moved on by the peer's 400 ms hold), arrived here at 402_000 and
        // waited behind 400 ms of frames: 2 ms of network in all.
        let mut prober = Timing::new(10_000, 10, 2, [ReplicaId(2)]);
        prober.tick(0);
        prober.tick(802_000);
        let echo = Probe {
            stamp_us: 400_000,
            echo: true,
            rtt_us: 0,
        };
        assert_eq!(
            prober.on_probe(ReplicaId(2), echo, at(402_000, 802_500)),
            None
        );
        assert_eq!(prober.status().own_rtt_us, 2_000);
        assert_eq!(prober.scale(), 1);
        // Handled without its receipt time, the same echo is 402 ms.
        prober.on_probe(ReplicaId(2), echo, None);
        prober.on_probe(ReplicaId(2), echo, None);
        assert_eq!(prober.status().own_rtt_us, 402_000);
    }

    #[test]
    fn clock_jumps_give_no_sample_and_do_not_silence_probes() {
        let mut t = Timing::new(1_000, 10, 2, [ReplicaId(2)]);
        assert_eq!(t.tick(5_000_000).len(), 1);
        // The clock jumps back 1 s: the echo of the probe stamped before it
        // is no sample, and probing resumes at once.
        assert_eq!(t.tick(4_000_000).len(), 1);
        let echo = Probe {
            stamp_us: 5_000_000,
            echo: true,
            rtt_us: 0,
        };
        assert_eq!(t.on_probe(ReplicaId(2), echo, None), None);
        assert_eq!(t.status().own_rtt_us, 0);
        // Probes from strangers are ignored.
        assert_eq!(t.on_probe(ReplicaId(9), echo, None), None);
    }
}
