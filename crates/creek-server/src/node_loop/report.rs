//! What the node loop tells about itself: the status snapshot, the
//! committed order in parts, the gauges, and the log lines for membership,
//! consensus timing and a commit path that stands still.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use creek_core::ReplicaId;

use super::{CommittedPart, NodeLoop, StatusSnapshot, STALL_AFTER};
use crate::throttle::{unlogged, Throttle};

/// Log lines a peer (or anything that speaks the peer protocol as one) can
/// cause in the node loop, one throttle per kind.
#[derive(Debug, Default)]
pub(super) struct PeerLogs {
    malformed: Throttle,
    own_origin: Throttle,
}

/// A turn of the node loop longer than this is logged: every client and
/// peer of the replica waited that long for it.
const SLOW_TURN: Duration = Duration::from_millis(200);

/// The turns that held the node loop longer than [`SLOW_TURN`]: counted,
/// the longest kept, and one line per interval saying where the time went.
#[derive(Debug, Default)]
pub(super) struct SlowTurns {
    slow: u64,
    longest: Duration,
    logs: Throttle,
    /// What this turn's events cost so far, by kind: (kind, events, time).
    kinds: Vec<(&'static str, u32, Duration)>,
}

impl SlowTurns {
    /// An event of `kind` took `took` to handle.
    pub(super) fn event(&mut self, kind: &'static str, took: Duration) {
        match self.kinds.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, n, t)) => {
                *n += 1;
                *t += took;
            }
            None => self.kinds.push((kind, 1, took)),
        }
    }

    /// The three kinds of event that cost the most, `kind ×n in t ms`.
    fn costliest(&mut self) -> String {
        self.kinds
            .sort_by_key(|(_, _, took)| std::cmp::Reverse(*took));
        let top: Vec<String> = self
            .kinds
            .iter()
            .take(3)
            .map(|(k, n, t)| format!("{k} ×{n} in {} ms", t.as_millis()))
            .collect();
        top.join(", ")
    }

    /// A turn that began at `began` took its `handled` events in
    /// `events`, and ran its executions by `executed`; its end (the
    /// flush: consensus, gossip, the writes handed over, the answers
    /// sent) is now.
    pub(super) fn timed(
        &mut self,
        began: Instant,
        handled: usize,
        events: Duration,
        executed: Duration,
    ) {
        let took = began.elapsed();
        if took < SLOW_TURN {
            self.kinds.clear();
            return;
        }
        let costliest = self.costliest();
        self.kinds.clear();
        self.slow += 1;
        self.longest = self.longest.max(took);
        if let Some(n) = self.logs.admit(Instant::now()) {
            tracing::warn!(
                took_ms = took.as_millis() as u64,
                events = handled,
                events_ms = events.as_millis() as u64,
                execute_ms = executed.saturating_sub(events).as_millis() as u64,
                flush_ms = took.saturating_sub(executed).as_millis() as u64,
                costliest_events = %costliest,
                "a turn of the node loop held every call and peer of this replica{}",
                unlogged(n, "the status counter slow_turns")
            );
        }
    }
}

impl NodeLoop {
    pub(super) fn status(&self) -> StatusSnapshot {
        let r = self.node.replica();
        let cab = self.node.cab();
        let c = r.counters();
        let e = r.exec_counters();
        let g = self.node.gossip_stats();
        let s = self.node.cab_stats();
        let mut counters = BTreeMap::new();
        let mut put = |k: &str, v: u64| {
            counters.insert(k.to_owned(), v);
        };
        put("invoked_weak", c.invoked_weak);
        put("invoked_strong", c.invoked_strong);
        put("local_reads", c.local_reads);
        put("rb_delivered", c.rb_delivered);
        put("cab_delivered", c.cab_delivered);
        put("stabilizer_noops", c.stabilizer_noops);
        put("views", c.views);
        put("finalized", c.finalized);
        put("snapshot_reads", c.snapshot_reads);
        put("snapshot_reads_parked", r.snapshot_reads_parked() as u64);
        put("snapshot_history_cuts", c.snapshot_history_cuts);
        put("snapshot_history_bytes", e.history_bytes);
        put("watchers", self.watch.watchers() as u64);
        put("watch_oldest_position", self.watch.bounds().0);
        put("accuracy_checked", c.accuracy_checked);
        put("accuracy_hits", c.accuracy_hits);
        put("executions", e.executions);
        put("reexecutions", e.reexecutions);
        put("exec_ops", e.ops);
        put("gossip_ops_sent", g.ops_sent);
        put("gossip_payloads_held", g.payloads_held as u64);
        put("gossip_backlog", (g.buffered + g.pushes_queued) as u64);
        put("cab_entries_proposed", s.entries_proposed);
        put("cab_ids_decided", s.ids_decided);
        put("decided_waiting", r.decided_waiting() as u64);
        put("durable_seq", self.durability.durable());
        put("submitted_seq", self.node.written());
        put("refused_frames", self.node.refused_frames());
        put(
            "peer_bytes_sent",
            self.transport
                .stats()
                .bytes_sent
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        let timing = self.node.link_timing();
        put("peer_rtt_us", timing.group_rtt_us);
        put("election_timeout_ms", timing.election_timeout_us / 1000);
        put("failed", u64::from(self.failed.is_some()));
        put("slow_turns", self.turns.slow);
        put(
            "recovering_ops",
            self.recovering.map_or(0, |(ops, _)| ops as u64),
        );
        put("longest_turn_us", self.turns.longest.as_micros() as u64);
        put("refused_non_members", self.node.refused_non_members());
        put("own_origin_refused", self.node.own_origin_refused());
        put("own_last_issued_seq", r.last_issued_seq());
        put("payloads_retained", self.node.retained_payloads() as u64);
        let t = self.node.transfer_stats();
        put("snapshots_installed", t.installed);
        put("snapshot_bytes_received", t.bytes_received);
        put("snapshot_bytes_served", t.bytes_served);
        put("snapshot_restarts", t.restarts);
        let sessions = r.session_stats();
        put("session_entries", sessions.entries);
        put("session_expired_clients", sessions.clients);
        put("session_expiry_ops", sessions.expiry_ops);
        put("session_entries_expired", sessions.expiry_listed);
        put("views_held_for_durability", self.node.views_held() as u64);
        let leases = r.lease_stats();
        put("leases_live", leases.live);
        put("lease_expiry_ops", leases.expiry_ops);
        put("leases_expiry_listed", leases.expiry_listed);
        put("lease_extend_ops", leases.extend_ops);
        put("exec_versions_alive", e.versions_alive);
        if self.stable_every_us > 0 {
            crate::stable::counters(self.node.stable_times(), self.now_us(), &mut put);
        }
        let fetch = self.node.fetch_status();
        put("snapshot_fetch_received", fetch.map_or(0, |f| f.received));
        put("snapshot_fetch_total", fetch.map_or(0, |f| f.total));
        let (role, standing_detail) = match self.node.standing() {
            creek_node::Standing::Member => (cab.role(), String::new()),
            creek_node::Standing::Joining { waiting_for } => (
                "joining",
                format!("waiting for replicas {waiting_for:?} to start for the first time"),
            ),
            creek_node::Standing::Lost { why } => match fetch {
                Some(f) => (
                    "lost",
                    format!(
                        "{why}; rebuilding: {} of {} bytes of a checkpoint from replica {}",
                        f.received, f.total, f.from
                    ),
                ),
                None => ("lost", why),
            },
            creek_node::Standing::Removed => (
                "removed",
                "removed from the cluster by a membership change".to_owned(),
            ),
        };
        StatusSnapshot {
            role,
            leader: cab.leader().map_or(0, |l| l.0),
            term: cab.term(),
            committed: r.committed_len(),
            tentative: r.tentative_len() as u64,
            counters,
            standing_detail,
            lost_peers: self.node.lost_peers().iter().map(|r| r.0).collect(),
            cluster_id: self.node.identity().cluster_id(),
            quorum_lost: self.node.quorum_lost(),
            raft_log_entries: self.node.raft_log_entries(),
            group: self.group.clone(),
            max_id: self.node.max_id(),
            addrs: self.addrs(),
        }
    }

    fn standing_name(&self) -> &'static str {
        match self.node.standing() {
            creek_node::Standing::Member => "member",
            creek_node::Standing::Joining { .. } => "joining",
            creek_node::Standing::Lost { .. } => "lost",
            creek_node::Standing::Removed => "removed",
        }
    }

    /// What `/health` and `/ready` judge by.
    pub(super) fn health(&mut self) -> super::HealthSnapshot {
        let durable = self.durability.durable();
        if durable != self.disk_seen.0 {
            self.disk_seen = (durable, Instant::now());
        }
        let cab = self.node.cab();
        super::HealthSnapshot {
            failed: (self.failed.as_ref().map(|f| f.to_string()))
                .or_else(|| self.durability.failure()),
            disk_waiting: (self.node.written() > durable).then(|| self.disk_seen.1.elapsed()),
            standing: self.standing_name(),
            voter: self.group.is_voter(self.node.id()),
            role: cab.role(),
            leader: cab.leader().map_or(0, |l| l.0),
            commit_index: cab.log_mark().2,
            applied_index: cab.delivered_through(),
            recovering_ops: self.recovering.map_or(0, |(ops, _)| ops as u64),
        }
    }

    pub(super) fn committed_part(&self, from: u64, max: usize) -> CommittedPart {
        let r = self.node.replica();
        let list = r.committed();
        let committed = r.committed_len();
        let base = committed - list.len() as u64;
        let start = from.clamp(base, committed);
        let skip = usize::try_from(start - base).unwrap_or(list.len());
        let finalized = r.counters().finalized;
        let pending = r.tentative_len() as u64;
        CommittedPart {
            start,
            ids: list
                .iter()
                .zip(r.committed_requests())
                .skip(skip)
                .take(max)
                .map(|(id, request)| (*id, *request))
                .collect(),
            committed,
            finalized,
            pending,
            quiet: pending == 0
                && r.decided_waiting() == 0
                && self.node.cab().decided_waiting() == 0
                && finalized == committed,
            standing: self.standing_name(),
        }
    }

    pub(super) fn refresh_gauges(&self) {
        let m = &self.metrics;
        let r = self.node.replica();
        let c = r.counters();
        let e = r.exec_counters();
        if c.accuracy_checked > 0 {
            m.accuracy
                .set(c.accuracy_hits as f64 / c.accuracy_checked as f64);
        }
        if e.ops > 0 {
            m.execution_ratio.set(e.executions as f64 / e.ops as f64);
        }
        m.reexecutions.set(e.reexecutions as i64);
        let cab = self.node.cab();
        m.consensus_role.set(if cab.is_leader() {
            2
        } else if cab.leader().is_some() {
            1
        } else {
            0
        });
        m.consensus_term.set(cab.term() as i64);
        m.committed.set(r.committed_len() as i64);
        m.tentative.set(r.tentative_len() as i64);
        let g = self.node.gossip_stats();
        m.gossip_backlog.set((g.buffered + g.pushes_queued) as i64);
        m.gossip_payloads_held.set(g.payloads_held as i64);
        m.decided_waiting.set(r.decided_waiting() as i64);
        let t = self.transport.stats();
        use std::sync::atomic::Ordering::Relaxed;
        m.peer_frames_dropped
            .set((t.dropped_full.load(Relaxed) + t.dropped_faults.load(Relaxed)) as i64);
        m.peer_bytes_sent.set(t.bytes_sent.load(Relaxed) as i64);
        m.peer_connections_refused
            .set(t.refused_connections.load(Relaxed) as i64);
        m.peer_connections_closed
            .set(t.closed_connections.load(Relaxed) as i64);
        m.peer_frames_malformed
            .set(self.node.refused_frames() as i64);
        m.own_origin_refused
            .set(self.node.own_origin_refused() as i64);
        m.durable_batches
            .set(self.durability.batches.load(Relaxed) as i64);
        m.log_entries.set(self.node.raft_log_entries() as i64);
        let pending = self
            .node
            .written()
            .saturating_sub(self.durability.durable());
        m.pending_writes.set(pending as i64);
        m.payloads_retained
            .set(self.node.retained_payloads() as i64);
        if let Some(p) = &self.persister {
            m.wal_folds.set(p.folds() as i64);
        }
        let timing = self.node.link_timing();
        m.peer_rtt_us.set(timing.group_rtt_us as i64);
        m.election_timeout_ms
            .set((timing.election_timeout_us / 1000) as i64);
        let global = self.node.stable_times().global();
        m.stable_global_age_ms
            .set(if self.stable_every_us > 0 && global > 0 {
                (self.now_us().saturating_sub(global) / 1000) as i64
            } else {
                -1
            });
    }

    /// Log what the node learnt about its place in the cluster. A replica
    /// that lost its data says so as a warning and rebuilds itself from a
    /// member's checkpoint.
    pub(super) fn log_membership(&mut self) {
        use creek_node::membership::Event as M;
        for event in self.node.take_membership_events() {
            match event {
                M::Joined(cluster) => {
                    tracing::info!(cluster = %format!("{cluster:016x}"), "member of the cluster");
                }
                M::Lost(why) => tracing::warn!(
                    error = %why,
                    "this replica lost its data directory: it takes no part in the cluster \
                     until it is rebuilt from a member's checkpoint"
                ),
                M::Rebuilt(cluster) => tracing::info!(
                    cluster = %format!("{cluster:016x}"),
                    "rebuilt from a member's checkpoint: a member of the cluster again"
                ),
                M::RejoinedDespiteLoss(why) => tracing::warn!(
                    error = %why,
                    "this replica lost its data directory and rejoins anyway (a planted bug) \
                     (acknowledged ops may be lost)"
                ),
                M::Joining(why) => tracing::info!(
                    detail = %why,
                    "joining a running cluster as a new replica"
                ),
                M::Admitted(cluster) => tracing::info!(
                    cluster = %format!("{cluster:016x}"),
                    "installed a member's checkpoint: a member of the cluster"
                ),
                M::Removed => tracing::warn!(
                    "this replica was removed from its cluster: it no longer votes, serves or \
                     gossips; stop it"
                ),
                M::Foreign(peer, why) => tracing::error!(
                    %peer,
                    error = %why,
                    "a peer belongs to another cluster: its messages are refused"
                ),
            }
        }
    }

    /// Say when the links force consensus timing away from the
    /// configuration (a warning, once) and when they let it come back;
    /// adjustments in between are debug lines (the gauges show them).
    pub(super) fn log_timing_change(&mut self) {
        let t = self.node.link_timing();
        if t.scale == self.timing_scale {
            return;
        }
        let configured_ms = t.election_timeout_us / t.scale / 1000;
        if self.timing_scale == 1 {
            tracing::warn!(
                round_trip_ms = t.group_rtt_us / 1000,
                configured_election_timeout_ms = configured_ms,
                election_timeout_ms = t.election_timeout_us / 1000,
                heartbeat_ms = t.heartbeat_us / 1000,
                "peer links are too slow for the configured consensus timing (an election \
                 needs {} round trips); election timeout and heartbeat stretched ×{}; \
                 set tick_ms ≥ {} to make this the configured timing",
                creek_node::timing::ELECTION_RTTS,
                t.scale,
                t.scale * t.tick_us / 1000,
            );
        } else if t.scale == 1 {
            tracing::info!(
                round_trip_ms = t.group_rtt_us / 1000,
                election_timeout_ms = t.election_timeout_us / 1000,
                "peer links are fast again: consensus timing back to the configured one"
            );
        } else {
            tracing::debug!(
                round_trip_ms = t.group_rtt_us / 1000,
                election_timeout_ms = t.election_timeout_us / 1000,
                "consensus timing stretched ×{}",
                t.scale
            );
        }
        self.timing_scale = t.scale;
    }

    /// Ops wait to commit and the committed order has not grown for
    /// [`STALL_AFTER`]: say what the commit path waits for, once per
    /// stall period (a partition or a lost quorum shows here too).
    pub(super) fn watch_commit_stall(&mut self) {
        let r = self.node.replica();
        let (len, since) = self.commit_progress;
        if r.committed_len() != len || r.tentative_len() == 0 {
            self.commit_progress = (r.committed_len(), Instant::now());
        } else if since.elapsed() >= STALL_AFTER {
            tracing::warn!(
                stalled_s = since.elapsed().as_secs(),
                report = %self.node.stall_report(),
                "ops wait to commit and the committed order has not grown"
            );
            self.commit_progress = (len, Instant::now());
        }
    }

    /// A peer frame the decoder refused.
    pub(super) fn log_malformed_frame(&self, from: ReplicaId, e: &creek_wire::DecodeError) {
        if let Some(n) = self.peer_logs.malformed.admit(Instant::now()) {
            tracing::warn!(
                %from,
                error = %e,
                "refused a malformed peer frame (another version, or not a Creek peer){}",
                unlogged(n, "creek_peer_frames_malformed")
            );
        }
    }

    /// Claims about this replica's own ops that it never made: something
    /// speaks the peer protocol as a replica of this group (see
    /// `creek_node::own_origin`).
    pub(super) fn log_own_origin_refusals(&mut self) {
        for refused in self.node.take_own_origin_refusals() {
            let Some(n) = self.peer_logs.own_origin.admit(Instant::now()) else {
                continue;
            };
            tracing::error!(
                "refused: {refused}; something speaks the peer protocol as a replica of this \
                 group (a plaintext peer port others can reach, or two replicas configured \
                 with one id; docs/security.md, \"The peer port\"){}",
                unlogged(n, "creek_own_origin_refused")
            );
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_slow_turn_names_its_costliest_kinds_of_event() {
        let mut t = SlowTurns::default();
        let ms = Duration::from_millis;
        for (kind, took) in [
            ("ops", 30),
            ("tick", 1),
            ("raft", 5),
            ("ops", 40),
            ("probe", 2),
        ] {
            t.event(kind, ms(took));
        }
        t.event("invoke", ms(3));
        assert_eq!(
            t.costliest(),
            "ops ×2 in 70 ms, raft ×1 in 5 ms, invoke ×1 in 3 ms"
        );
        // A turn's account starts afresh after it is timed.
        t.timed(Instant::now(), 6, ms(0), ms(0));
        assert!(t.kinds.is_empty());
    }
    use super::*;

    /// A turn under the bound is not counted; one over it is, and the
    /// longest is kept.
    #[test]
    fn slow_turns_are_counted_with_the_longest() {
        let mut turns = SlowTurns::default();
        turns.timed(Instant::now(), 1, Duration::ZERO, Duration::ZERO);
        assert_eq!((turns.slow, turns.longest), (0, Duration::ZERO));
        let Some(began) = Instant::now().checked_sub(Duration::from_millis(300)) else {
            return; // a monotonic clock too young to look back 300 ms
        };
        turns.timed(
            began,
            3,
            Duration::from_millis(10),
            Duration::from_millis(250),
        );
        assert_eq!(turns.slow, 1);
        assert!(
            turns.longest >= Duration::from_millis(300),
            "{:?}",
            turns.longest
        );
    }
}
