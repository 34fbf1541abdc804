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
//! tentative op) at once, at its **read time** `T`:
//!
//! * without stable times, `T` is the applied time;
//! * with them ([`Replica::keep_snapshot_history`]), `T` is the global
//!   stable time this replica knows ([`Replica::set_stable_time`]), or its
//!   applied time if that is lower (a replica that lags reads at what it
//!   has, never waiting): every shard has applied the global stable time at
//!   a majority, so a client that read at `T` finds `T` applied on most
//!   replicas of every shard;
//! * a request's `read_exact` asks for exactly its read time: each shard's
//!   part of one read across shards, all at one time.
//!
//! A client's read time above `T` raises it: the read parks until this
//! replica has applied that far (entries that are committed already: the
//! read waits for no consensus), so a client never reads an older state
//! than one it saw, on any replica.
//!
//! **Versions kept.** To read at a `T` below its applied time, a replica
//! keeps the final versions superseded since `T` (the executor's history):
//! back to `grace` before the global stable time, and no further; past
//! `versions_max_bytes` of them it drops them all and reads older than its
//! applied time are refused ([`crate::InvokeError::SnapshotNotKept`], with
//! how stale the global stable time is) rather than keeping versions
//! without bound while a shard stops publishing.
//!
//! Invariants (asserted by [`Replica::check_invariants`]): commit times
//! strictly increase along the committed list; the applied time is the
//! commit time of the last final entry and never decreases; the global
//! stable time known here never decreases; no read is served below the
//! oldest time whose versions are kept.

use std::collections::BTreeSet;

use creek_exec::{Engine, Outcome, ProcCall, Procedures};
use creek_types::planted::Bug;
use rustc_hash::FxHashMap;

use super::state::EngineState;
use super::Replica;
use crate::op::{Effect, ExecKey, Op, Pos, View, ViewKind};
use crate::InvokeError;

/// How far ahead of a replica's clock a client's read time may be: further
/// is refused ([`crate::InvokeError::ReadTimeAhead`]), so a client cannot
/// push a replica's clock, and every commit time after it, arbitrarily far.
pub const READ_TIME_AHEAD_MAX_US: u64 = 60_000_000;

/// Most snapshot reads a replica parks until it applies their read time;
/// past it a read that would wait is refused
/// ([`crate::InvokeError::SnapshotBehind`]), so reads a client gave up on
/// cannot pile up without bound.
pub const SNAPSHOT_PARKED_MAX: usize = 16_384;

/// Most commit times of entries trimmed off the committed list a replica
/// keeps for reads at the kept versions (8 bytes each); past it, as past
/// [`SnapshotHistory::versions_max_bytes`], it drops every kept version.
const TIMES_KEPT_MAX: usize = 1 << 20;

/// How far back a replica keeps committed versions for snapshot reads
/// below its applied time (docs/snapshot-reads.md, "Versions kept").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotHistory {
    /// Versions are kept back to this long (µs of commit time) before the
    /// global stable time: a read across shards asks every shard at the
    /// time the first one answered, which the others' stable times may
    /// have passed meanwhile.
    pub grace_us: u64,
    /// Past this many bytes of kept versions (keys and values), a replica
    /// drops them all and refuses reads below its applied time until its
    /// history grows back.
    pub versions_max_bytes: u64,
}

impl Default for SnapshotHistory {
    fn default() -> Self {
        SnapshotHistory {
            grace_us: 1_000_000,
            versions_max_bytes: 64 << 20,
        }
    }
}

/// One snapshot read not answered yet.
#[derive(Debug)]
struct Pending {
    call: ProcCall,
    /// The client's read time: the read is at or after it.
    read_time: u64,
    /// Read at exactly `read_time`.
    exact: bool,
    /// The time it is parked until (see `Snapshots::parked`).
    parked_at: Option<u64>,
    /// Its result and the time it read at, once run.
    ready: Option<(Outcome, u64)>,
    /// The op's preliminary view is wanted and not sent yet: the snapshot
    /// view follows it.
    after_tentative: bool,
}

/// Commit times and the snapshot reads in flight.
#[derive(Debug, Default)]
pub(super) struct Snapshots {
    /// The commit time of each entry of the replica's `committed` list,
    /// after the first `lead` ones: entries trimmed off the list whose
    /// times reads at the kept versions still need (from the history's
    /// horizon on).
    times: Vec<u64>,
    lead: usize,
    /// The commit time of the last committed entry (a checkpoint's, before
    /// any is committed here).
    last: u64,
    /// The commit time of the last final entry.
    applied: u64,
    pending: FxHashMap<ExecKey, Pending>,
    /// Reads waiting for this replica to apply the time they read at.
    parked: BTreeSet<(u64, ExecKey)>,
    /// The least commit time of the next entry: an MPO's, agreed with
    /// the other shards it involves (0: none).
    floor: u64,
    /// The commit time of the last entry trimmed off the list (or of a
    /// checkpoint's last): times at or above it map to positions.
    trimmed: u64,
    /// Reads below the applied time, when on.
    history: Option<SnapshotHistory>,
    /// The global stable time known here (0: none yet).
    stable: u64,
    /// The oldest read time whose versions are kept (`None`: no history).
    kept_from: Option<u64>,
    /// The executor's horizon: the absolute index of the committed entry
    /// at or before which no read is asked (`None`: none yet, every entry's
    /// time is kept).
    horizon: Option<u64>,
    /// Snapshot reads at the global stable time are served
    /// ([`Replica::keep_snapshot_history`]): the versions back to its
    /// floor are kept.
    stable_reads: bool,
    /// Reads at this many revisions before the newest final one are served
    /// ([`Replica::keep_revisions`]).
    revisions_kept: Option<u64>,
}

impl Snapshots {
    /// Continue after a checkpoint whose last entry committed at `time`.
    pub(super) fn resume(&mut self, time: u64) {
        self.last = time;
        self.applied = time;
        self.trimmed = time;
        self.keep_from(time);
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

    /// The first `n` entries of the list, which starts at absolute index
    /// `base`, were trimmed off it: forget their times, but those from the
    /// history's horizon on (all, while it has none).
    pub(super) fn trim(&mut self, n: usize, base: u64) {
        let first = base - self.lead as u64;
        let after = base + n as u64;
        let keep = match (self.kept_from, self.horizon) {
            (None, _) => after,
            (Some(_), None) => first,
            (Some(_), Some(h)) => h.min(after).max(first),
        };
        let drop =
            usize::try_from(keep - first).map_or(self.times.len(), |d| d.min(self.times.len()));
        if drop > 0 {
            self.trimmed = self.times[drop - 1];
            self.keep_from(self.trimmed);
        }
        self.times.drain(..drop);
        self.lead = usize::try_from(after - (first + drop as u64)).unwrap_or(0);
    }

    /// The commit time of the entry at `index` of the list.
    fn time_at(&self, index: usize) -> Option<u64> {
        self.times.get(self.lead + index).copied()
    }

    /// The absolute index of `times[0]`, given the list starts at `base`.
    fn first_timed(&self, base: u64) -> u64 {
        base - self.lead as u64
    }

    /// Versions older than `time` are no longer kept (if any are).
    fn keep_from(&mut self, time: u64) {
        if let Some(k) = &mut self.kept_from {
            *k = (*k).max(time);
        }
    }

    /// The time a read asking for `read_time` (exactly, if `exact`) reads
    /// at: see the module's text.
    fn read_at(&self, read_time: u64, exact: bool) -> u64 {
        if exact {
            return read_time;
        }
        let base = if self.history.is_some() && self.stable > 0 {
            self.stable.min(self.applied)
        } else {
            self.applied
        };
        base.max(read_time)
    }

    /// The position a read at `time` (at most the applied time) reads
    /// before, given the list starts at absolute index `base`: `None` for
    /// the committed state as it is (nothing final after `time`).
    fn before(&self, time: u64, base: u64) -> Option<Pos> {
        if time >= self.applied {
            return None;
        }
        let within = self.times.partition_point(|t| *t <= time);
        Some(Pos::Committed(self.first_timed(base) + within as u64))
    }

    /// The entry at `index` of the list (after the trimmed ones) is final.
    pub(super) fn finalized(&mut self, index: usize) -> u64 {
        if let Some(time) = self.time_at(index) {
            self.applied = time;
        }
        self.applied
    }
}

impl<E: Engine<ExecKey, Pos>> Replica<E> {
    /// The commit time of each op of [`Replica::committed`], in order.
    pub fn commit_times(&self) -> &[u64] {
        &self.snapshots.times[self.snapshots.lead..]
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

    /// The global stable time this replica knows (0: none, or no history).
    pub fn stable_time(&self) -> u64 {
        self.snapshots.stable
    }

    /// The oldest time a snapshot read may read at here, if versions
    /// older than the applied time are kept.
    pub fn snapshot_kept_from(&self) -> Option<u64> {
        self.snapshots.kept_from
    }

    /// Serve snapshot reads at the global stable time, keeping the
    /// committed versions they need (see [`SnapshotHistory`]); from now
    /// on, so reads older than this replica's applied time now are
    /// refused.
    pub fn keep_snapshot_history(&mut self, history: SnapshotHistory) {
        self.snapshots.history = Some(history);
        self.snapshots.stable_reads = true;
        self.start_history();
    }

    /// Serve reads at each of the last `revisions` revisions (the
    /// state after the op at that 1-based place of the committed order,
    /// [`Replica::revision_time`]), keeping the versions they need from
    /// now on, within [`SnapshotHistory::versions_max_bytes`] (past it every
    /// kept version is dropped, as for snapshot reads). With 0, only the
    /// newest final revision is read.
    pub fn keep_revisions(&mut self, revisions: u64) {
        self.snapshots.revisions_kept = Some(revisions);
        if self.snapshots.history.is_none() {
            self.snapshots.history = Some(SnapshotHistory::default());
        }
        self.start_history();
    }

    /// The commit time of revision `revision`: a snapshot read at exactly
    /// that time reads the state after the op at that place of the
    /// committed order (`etcdctl get --rev`; docs/api.md, "Versions and
    /// revisions"). A revision committed here but not yet final is read
    /// once it is; one not committed here yet, or whose versions are no
    /// longer kept, is refused ([`InvokeError::RevisionOutOfRange`]).
    pub fn revision_time(&self, revision: u64) -> Result<u64, InvokeError> {
        let newest = self.committed_len();
        let first = self.snapshots.first_timed(self.committed_base);
        let times = &self.snapshots.times;
        // Only a refusal names the oldest revision served: the first whose
        // time is kept.
        let refused = || InvokeError::RevisionOutOfRange {
            revision,
            oldest: match self.snapshots.kept_from {
                Some(kept) => first + times.partition_point(|t| *t < kept) as u64 + 1,
                None => self.counters.finalized.max(1),
            },
            newest,
        };
        if revision == 0 || revision > newest {
            return Err(refused());
        }
        let time = (revision - 1)
            .checked_sub(first)
            .and_then(|i| times.get(usize::try_from(i).ok()?))
            .copied();
        match time {
            Some(t) if self.snapshots.kept_from.is_some_and(|k| t >= k) => Ok(t),
            // Without kept versions only the applied state is read.
            Some(t) if t == self.snapshots.applied && revision == self.counters.finalized => Ok(t),
            _ => Err(refused()),
        }
    }

    /// Start keeping versions, from the committed state now on: the
    /// state at the applied time (on a replica that has no entry yet, its
    /// checkpoint's or the empty one).
    fn start_history(&mut self) {
        if self.snapshots.history.is_none() || self.snapshots.kept_from.is_some() {
            return;
        }
        self.engine.keep_final_history();
        self.snapshots.kept_from = Some(self.snapshots.applied);
    }

    /// The global stable time is now at least `time`: reads move up to it
    /// and the versions older than it, less the grace, are dropped.
    pub fn set_stable_time(&mut self, time: u64) {
        if self.snapshots.history.is_none() {
            return;
        }
        self.snapshots.stable = self.snapshots.stable.max(time);
        self.move_horizon();
    }

    /// Drop the versions no read served here needs any more: those older
    /// than both the global stable time's floor (with stable reads) and the
    /// revisions kept (with [`Replica::keep_revisions`]); every one past
    /// the history's byte bound.
    pub(super) fn move_horizon(&mut self) {
        let Some(history) = self.snapshots.history else {
            return;
        };
        let Some(newest) = self.counters.finalized.checked_sub(1) else {
            return;
        };
        let first = self.snapshots.first_timed(self.committed_base);
        let cut = self.engine.counters().history_bytes > history.versions_max_bytes
            || self.snapshots.lead > TIMES_KEPT_MAX;
        // What each kind of read needs kept (`None`: every version yet).
        let by_stable = if self.snapshots.stable_reads {
            let floor = self.snapshots.stable.saturating_sub(history.grace_us);
            let within = self.snapshots.times.partition_point(|t| *t <= floor);
            within
                .checked_sub(1)
                .map(|i| (first + i as u64).min(newest))
        } else {
            Some(newest)
        };
        let by_revisions = match self.snapshots.revisions_kept {
            Some(n) => newest.checked_sub(n),
            None => Some(newest),
        };
        let horizon = if cut {
            newest
        } else {
            match (by_stable, by_revisions) {
                (Some(a), Some(b)) => a.min(b),
                _ => return,
            }
        };
        if self.snapshots.horizon.is_some_and(|h| h >= horizon) {
            return;
        }
        self.snapshots.horizon = Some(horizon);
        self.counters.snapshot_history_cuts += u64::from(cut);
        let at = horizon.checked_sub(first).map(|i| i as usize);
        let time = at.and_then(|i| self.snapshots.times.get(i).copied());
        self.snapshots.keep_from(time.unwrap_or(0));
        self.engine.set_final_horizon(Some(Pos::Committed(horizon)));
    }

    /// Refuse a snapshot read asking for `read_time` that would be served
    /// now below the versions kept.
    pub(super) fn snapshot_refused(
        &self,
        read_time: u64,
        exact: bool,
        now_us: u64,
    ) -> Result<(), InvokeError> {
        let at = self.snapshots.read_at(read_time, exact);
        let applied = self.snapshots.applied;
        if exact && at != applied && self.snapshots.history.is_none() {
            return Err(InvokeError::SnapshotExactUnavailable { time: at, applied });
        }
        let kept = self.snapshots.kept_from.is_some_and(|k| at >= k);
        if at >= applied || kept {
            return Ok(());
        }
        Err(InvokeError::SnapshotNotKept {
            time: at,
            kept_from: self.snapshots.kept_from.unwrap_or(self.snapshots.applied),
            stable_age_ms: (self.snapshots.stable > 0)
                .then(|| now_us.saturating_sub(self.snapshots.stable) / 1_000),
        })
    }

    /// Take a snapshot read of invocation `key` (its views include
    /// [`crate::Views::snapshot`]): answered at once if this replica has
    /// applied `read_time`, else parked until it has.
    pub(super) fn snapshot_invoked(
        &mut self,
        key: ExecKey,
        call: ProcCall,
        (read_time, exact): (u64, bool),
        after_tentative: bool,
    ) {
        self.counters.snapshot_reads += 1;
        self.snapshots.pending.insert(
            key,
            Pending {
                call,
                read_time,
                exact,
                parked_at: None,
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
        let Some(p) = self.snapshots.pending.get(&key) else {
            return;
        };
        if p.ready.is_none() {
            let mut at = self.snapshots.read_at(p.read_time, p.exact);
            if ignore_read_time {
                at = at.min(applied);
            }
            if at > applied {
                self.snapshots.parked.insert((at, key));
                if let Some(p) = self.snapshots.pending.get_mut(&key) {
                    p.parked_at = Some(at);
                }
                return;
            }
            // Without a history only the applied state can be read (an exact
            // read was refused at invocation unless that is its time). With
            // one, versions are kept from at most the applied time when the
            // read was invoked or parked, below its time, and serving a
            // parked read comes with the entry that reaches its time.
            at = match self.snapshots.kept_from {
                None => applied,
                Some(kept) => {
                    debug_assert!(
                        kept <= at,
                        "a snapshot read at {at} below the versions kept"
                    );
                    at.max(kept)
                }
            };
            let before = self.snapshots.before(at, self.committed_base);
            let state = match before {
                _ if self.config.planted.has(Bug::SnapshotServesTentative) => {
                    EngineState::latest(&self.engine)
                }
                Some(before) => EngineState::before(&self.engine, before),
                None => EngineState::committed(&self.engine),
            };
            let executed = self
                .registry
                .execute(&state, self.config.txn_limits, &p.call);
            if let Some(p) = self.snapshots.pending.get_mut(&key) {
                p.ready = Some((executed.outcome, at));
            }
        }
        let Some(p) = self.snapshots.pending.get(&key) else {
            return;
        };
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
        if let Some(at) = p.parked_at {
            self.snapshots.parked.remove(&(at, key));
        }
        if let Some((outcome, time)) = p.ready {
            self.send_snapshot_view(key, outcome, time);
        }
    }

    /// Answer the parked reads this replica has now applied far enough
    /// for.
    pub(super) fn serve_parked_snapshots(&mut self) {
        while let Some(&(at, key)) = self.snapshots.parked.first() {
            if at > self.snapshots.applied {
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
            let at = self.snapshots.time_at(i as usize);
            if at.is_some_and(|t| t != self.snapshots.applied) {
                return Err(format!(
                    "the applied time {} is not the last final entry's {at:?}",
                    self.snapshots.applied
                ));
            }
        }
        if let Some(kept) = self
            .snapshots
            .kept_from
            .filter(|k| *k > self.snapshots.applied)
        {
            return Err(format!(
                "versions are kept from {kept}, after the applied time {}",
                self.snapshots.applied
            ));
        }
        if let (Some(h), Some(newest)) = (
            self.snapshots.horizon,
            self.counters.finalized.checked_sub(1),
        ) {
            if h > newest {
                return Err(format!(
                    "the history's horizon {h} is past the last final entry {newest}"
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
