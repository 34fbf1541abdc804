//! Commit times and the `snapshot` level (docs/snapshot-reads.md).
//!
//! Every entry of the committed list gets a **commit time** that depends on
//! the committed order alone, so every replica gives an entry the same one:
//! `ct(e) = max(ct(prev) + 1, t(e))`, where `t(e)` is the physical part of
//! the op's timestamp. An origin's clock observes the read time its client
//! sends before it stamps the op, so an op commits after everything its
//! client had seen. A replica's **applied time** is the commit time of its
//! last final entry: its committed state is exactly the state at that time.
//!
//! A snapshot read runs a read-only op on the committed state (never on a
//! tentative op) at once, at the applied time; a client's read time above
//! it parks the read until this replica has applied that far (entries that
//! are committed already: the read waits for no consensus), so a client
//! never reads an older state than one it saw, on any replica.
//!
//! Invariants (asserted by [`Replica::check_invariants`]): commit times
//! strictly increase along the committed list; the applied time is the
//! commit time of the last final entry and never decreases.

use std::collections::BTreeSet;

use creek_exec::{Engine, Outcome, ProcCall, Procedures};
use creek_types::planted::Bug;
use rustc_hash::FxHashMap;

use super::Replica;
use crate::op::{Effect, ExecKey, Op, Pos, View, ViewKind};

/// How far ahead of a replica's clock a client's read time may be: further
/// is refused ([`crate::InvokeError::ReadTimeAhead`]), so a client cannot
/// push a replica's clock, and every commit time after it, arbitrarily far.
pub const READ_TIME_AHEAD_MAX_US: u64 = 60_000_000;

/// Most snapshot reads a replica parks until it applies their read time;
/// past it a read that would wait is refused
/// ([`crate::InvokeError::SnapshotBehind`]), so reads a client gave up on
/// cannot pile up without bound.
pub const SNAPSHOT_PARKED_MAX: usize = 16_384;

/// One snapshot read not answered yet.
#[derive(Debug)]
struct Pending {
    call: ProcCall,
    read_time: u64,
    /// Its result and the time it read at, once run.
    ready: Option<(Outcome, u64)>,
    /// The op's preliminary view is wanted and not sent yet: the snapshot
    /// view follows it.
    after_tentative: bool,
}

/// Commit times and the snapshot reads in flight.
#[derive(Debug, Default)]
pub(super) struct Snapshots {
    /// The commit time of each entry of the replica's `committed` list.
    times: Vec<u64>,
    /// The commit time of the last committed entry (a checkpoint's, before
    /// any is committed here).
    last: u64,
    /// The commit time of the last final entry.
    applied: u64,
    pending: FxHashMap<ExecKey, Pending>,
    /// Reads waiting for this replica to apply their read time.
    parked: BTreeSet<(u64, ExecKey)>,
    /// The least commit time of the next entry: an MPO's, agreed with
    /// the other shards it involves (0: none).
    floor: u64,
}

impl Snapshots {
    /// Continue after a checkpoint whose last entry committed at `time`.
    pub(super) fn resume(&mut self, time: u64) {
        self.last = time;
        self.applied = time;
    }

    /// The commit time the next entry would get if it were `op`: what
    /// this shard proposes for an MPO at its turn.
    pub(super) fn proposal(&self, op: Option<&Op>) -> u64 {
        let stamped = op.map_or(0, |op| op.timestamp.physical_us());
        self.last.saturating_add(1).max(stamped)
    }

    /// The next entry, an MPO, commits at `time` or later: the largest
    /// proposal of the shards it involves, the same on each.
    pub(super) fn floor_next(&mut self, time: u64) {
        self.floor = time;
    }

    /// The commit time of the next entry, `op` (its payload, if held).
    pub(super) fn commit(&mut self, op: Option<&Op>) -> u64 {
        let time = self.proposal(op).max(std::mem::take(&mut self.floor));
        self.last = time;
        self.times.push(time);
        time
    }

    /// Forget the times of the first `n` entries (trimmed with the list).
    pub(super) fn trim(&mut self, n: usize) {
        self.times.drain(..n.min(self.times.len()));
    }

    /// The entry at `index` of the list (after the trimmed ones) is final.
    pub(super) fn finalized(&mut self, index: usize) -> u64 {
        if let Some(time) = self.times.get(index) {
            self.applied = *time;
        }
        self.applied
    }
}

impl<E: Engine<ExecKey, Pos>> Replica<E> {
    /// The commit time of each op of [`Replica::committed`], in order.
    pub fn commit_times(&self) -> &[u64] {
        &self.snapshots.times
    }

    /// The commit time of the last committed op.
    pub fn last_commit_time(&self) -> u64 {
        self.snapshots.last
    }

    /// This replica's applied time: the commit time of its last final op.
    /// Its committed state is the state at that time.
    pub fn applied_time(&self) -> u64 {
        self.snapshots.applied
    }

    /// Snapshot reads waiting for this replica to apply their read time.
    pub fn snapshot_reads_parked(&self) -> usize {
        self.snapshots.parked.len()
    }

    /// Take a snapshot read of invocation `key` (its views include
    /// [`crate::Views::snapshot`]): answered at once if this replica has
    /// applied `read_time`, else parked until it has.
    pub(super) fn snapshot_invoked(
        &mut self,
        key: ExecKey,
        call: ProcCall,
        read_time: u64,
        after_tentative: bool,
    ) {
        self.counters.snapshot_reads += 1;
        self.snapshots.pending.insert(
            key,
            Pending {
                call,
                read_time,
                ready: None,
                after_tentative,
            },
        );
        self.serve_snapshot(key);
    }

    /// Run `key`'s snapshot read if this replica has applied its read time,
    /// and send its view unless its preliminary view must go first.
    fn serve_snapshot(&mut self, key: ExecKey) {
        let applied = self.snapshots.applied;
        let ignore_read_time = self.config.planted.has(Bug::SnapshotIgnoresReadTime);
        let Some(p) = self.snapshots.pending.get_mut(&key) else {
            return;
        };
        if p.ready.is_none() {
            if p.read_time > applied && !ignore_read_time {
                self.snapshots.parked.insert((p.read_time, key));
                return;
            }
            let executed = if self.config.planted.has(Bug::SnapshotServesTentative) {
                let latest = super::state::EngineState::latest(&self.engine);
                self.registry
                    .execute(&latest, self.config.txn_limits, &p.call)
            } else {
                self.registry.execute(
                    &super::state::EngineState::committed(&self.engine),
                    self.config.txn_limits,
                    &p.call,
                )
            };
            p.ready = Some((executed.outcome, applied));
        }
        if p.after_tentative {
            return;
        }
        if let Some(p) = self.snapshots.pending.remove(&key) {
            if let Some((outcome, time)) = p.ready {
                self.send_snapshot_view(key, outcome, time);
            }
        }
    }

    fn send_snapshot_view(&mut self, key: ExecKey, outcome: Outcome, time: u64) {
        if let Some(a) = self.awaiting.get_mut(&key) {
            a.last_sent = Some(outcome.clone());
        }
        self.counters.views += 1;
        self.effects.push(Effect::View(View {
            handle: key,
            kind: ViewKind::Snapshot,
            outcome,
            across_shards: false,
            executions: 0,
            time,
        }));
    }

    /// `key`'s preliminary view went out: its snapshot view may follow.
    pub(super) fn snapshot_after_tentative(&mut self, key: ExecKey) {
        if let Some(p) = self.snapshots.pending.get_mut(&key) {
            p.after_tentative = false;
            self.serve_snapshot(key);
        }
    }

    /// `key`'s final view is about to go out: its snapshot view goes first
    /// if it is ready; one still parked is dropped (the final view carries
    /// a later state).
    pub(super) fn snapshot_before_final(&mut self, key: ExecKey) {
        let Some(p) = self.snapshots.pending.remove(&key) else {
            return;
        };
        self.snapshots.parked.remove(&(p.read_time, key));
        if let Some((outcome, time)) = p.ready {
            self.send_snapshot_view(key, outcome, time);
        }
    }

    /// Answer the parked reads this replica has now applied far enough
    /// for.
    pub(super) fn serve_parked_snapshots(&mut self) {
        while let Some(&(read_time, key)) = self.snapshots.parked.first() {
            if read_time > self.snapshots.applied {
                return;
            }
            self.snapshots.parked.pop_first();
            self.serve_snapshot(key);
        }
    }

    /// Snapshot reads are answered or waiting: none is lost.
    pub(super) fn check_snapshots(&self) -> Result<(), String> {
        if let Some(w) = self.snapshots.times.windows(2).find(|w| w[0] >= w[1]) {
            return Err(format!(
                "commit times do not increase along the committed list: {} then {}",
                w[0], w[1]
            ));
        }
        if self
            .snapshots
            .times
            .last()
            .is_some_and(|t| *t != self.snapshots.last)
        {
            return Err("the last commit time is not the last entry's".into());
        }
        let final_in_list = self
            .counters
            .finalized
            .checked_sub(self.committed_base)
            .and_then(|n| n.checked_sub(1));
        if let Some(i) = final_in_list {
            let at = self.snapshots.times.get(i as usize).copied();
            if at.is_some_and(|t| t != self.snapshots.applied) {
                return Err(format!(
                    "the applied time {} is not the last final entry's {at:?}",
                    self.snapshots.applied
                ));
            }
        }
        for (_, key) in &self.snapshots.parked {
            if !self.snapshots.pending.contains_key(key) {
                return Err(format!("a parked snapshot read {key:?} is not pending"));
            }
        }
        Ok(())
    }
}
