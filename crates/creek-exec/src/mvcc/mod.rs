//! The multiversion speculative executor (Creek paper §4.4).
//!
//! * **Multiversioning.** Every execution reads a snapshot made of exactly
//!   the versions installed by executions positioned before it; its writes
//!   become versions tagged with its position once it is installed.
//! * **Rollback only if necessary.** Installed executions record what they
//!   read. When the order changes or a version appears or disappears, only the
//!   readers whose visible version changed are invalidated; invalidation hides
//!   (removes) their versions, which cascades to *their* readers — through
//!   reads, never through positions. A scanned range counts as a read of
//!   every key in it: a key appearing in or vanishing from the range before
//!   the scanner invalidates it (phantoms; see `scans.rs`).
//! * **Concurrent execution.** [`Engine::next_task`] hands out any number of
//!   executions; [`Engine::complete`] validates each result against the
//!   current state and reruns it on a conflict.
//! * **Garbage collection.** Ops below the committed bound whose execution is
//!   settled are final: their reader entries go, and on each key they wrote
//!   only the newest final version survives — unless a history of final
//!   versions is kept for reads of the past (`history.rs`).
//!
//! Invariant (checked by [`MvccExecutor::check_invariants`]): every installed
//! execution's recorded reads equal the versions visible at its current
//! position, and its recorded scans the keys live in their ranges there. An
//! op is *settled* when it and every op before it are installed; only then
//! is its outcome reported, so every reported outcome equals the result of
//! executing the current order sequentially.

mod history;
mod invariants;
mod scans;
mod schedule;
mod sorted;
mod store;

pub use schedule::Schedule;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::FxHashMap;

use crate::engine::{
    BelowHorizon, Completion, Engine, ExecCounters, OpKey, Position, Settled, Task, WriteSet,
};
use crate::procedures::Procedures;
use crate::txn::{Executed, Outcome, ScanRead, TxnLimits, VersionNo};
use crate::versions::{self, MetaKey, Revision};
use creek_types::planted::{Bug, PlantedBugs};
use creek_types::ProcCall;
use history::History;
use store::{KeyState, Keys, SnapshotAt, Version};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpState {
    /// Waiting to be (re)executed.
    Pending,
    /// A task is out.
    Running,
    /// Waiting to be re-executed once the running execution it conflicted
    /// with completes ([`Schedule::hold_reruns`]).
    Waiting,
    /// Its execution is installed and valid for its current position.
    Installed,
}

#[derive(Debug)]
struct OpEntry<K, P> {
    pos: P,
    call: ProcCall,
    gen: u64,
    state: OpState,
    executions: u64,
    /// Reads of the installed execution.
    reads: Vec<(Bytes, VersionNo)>,
    /// Ranges the installed execution scanned (its position is in
    /// `MvccExecutor::scanners` exactly when this is not empty).
    scans: Vec<ScanRead>,
    /// Keys of the versions the installed execution holds at `pos`.
    writes: Vec<Bytes>,
    /// Keys the latest completed execution wrote, installed or not: what a
    /// re-execution will likely write again.
    footprint: Vec<Bytes>,
    /// The running op this one waits for (state `Waiting`).
    blocked_by: Option<K>,
    outcome: Option<Outcome>,
}

impl<K, P> OpEntry<K, P> {
    fn recorded_read(&self, key: &[u8]) -> Option<VersionNo> {
        self.reads
            .iter()
            .find(|(k, _)| k.as_ref() == key)
            .map(|(_, v)| *v)
    }
}

/// The multiversion executor. See the module documentation.
pub struct MvccExecutor<K, P> {
    procedures: Arc<dyn Procedures>,
    limits: TxnLimits,
    ops: FxHashMap<K, OpEntry<K, P>>,
    order: BTreeMap<P, K>,
    /// Positions of ops that are not installed; the first one is the frontier
    /// below which everything is settled.
    not_installed: BTreeSet<P>,
    /// Positions of pending ops without a task out, lowest first.
    runnable: BTreeSet<P>,
    /// The runnable ops never executed (a subset of `runnable`).
    fresh: BTreeSet<P>,
    schedule: Schedule,
    /// Positions of ops with a task out.
    running_at: BTreeSet<P>,
    /// Running op → the ops waiting for its completion.
    waiters: FxHashMap<K, Vec<K>>,
    /// Installed ops whose current execution has not been reported.
    unannounced: BTreeSet<P>,
    /// Installed, valid, not yet settled executions (`drain_installed`).
    installed_early: Vec<(K, Outcome)>,
    keys: Keys<P, K>,
    /// Installed ops that scanned a range, by position: the range-reader
    /// index. Empty in workloads that never scan, which then pay one
    /// `is_empty` per write for phantom protection.
    scanners: BTreeMap<P, K>,
    /// Every position up to this one is committed.
    committed_upto: Option<P>,
    /// The position of the last final op (or the loaded checkpoint's
    /// committed bound): the final state is the state after it.
    final_upto: Option<P>,
    /// Older final versions kept for reads of the past; `None` (the
    /// default): only the newest final version of each key is kept.
    history: Option<History<P>>,
    next_version: u64,
    settled: Vec<Settled<K>>,
    counters: ExecCounters,
    running: usize,
    /// Planted bugs for validating the simulator's checkers; the executor
    /// reads [`Bug::SkipInvalidation`] (installing a version never
    /// invalidates its readers). Empty in production.
    pub planted: PlantedBugs,
    /// Record the writes of final executions ([`Engine::record_writes`]).
    record_committed: bool,
    /// Record the writes of settled tentative executions.
    record_tentative: bool,
    /// Recorded write sets, for [`Engine::drain_writes`].
    write_sets: Vec<WriteSet<K>>,
    /// Where versioned keys keep their records and the revision of a
    /// committed position ([`MvccExecutor::keep_versions`]); `None`: no
    /// records kept.
    versions: Option<(MetaKey, Revision<P>)>,
}

/// The state of `k`, created on first use (without cloning the key when it
/// exists, the common case). A new key is copied into its own allocation:
/// keys arrive as slices of the frame or request they were decoded from, and
/// a long-lived key must not keep that whole buffer alive.
fn key_state<'a, P, K>(keys: &'a mut Keys<P, K>, k: &Bytes) -> &'a mut KeyState<P, K> {
    if !keys.contains_key(k) {
        keys.insert_new(Bytes::copy_from_slice(k), KeyState::default());
    }
    match keys.get_mut(k) {
        Some(ks) => ks,
        None => unreachable!("inserted above"),
    }
}

impl<K: OpKey, P: Position> MvccExecutor<K, P> {
    /// An empty executor running `procedures`.
    pub fn new(procedures: Arc<dyn Procedures>, limits: TxnLimits) -> Self {
        MvccExecutor {
            procedures,
            limits,
            ops: FxHashMap::default(),
            order: BTreeMap::new(),
            not_installed: BTreeSet::new(),
            runnable: BTreeSet::new(),
            fresh: BTreeSet::new(),
            schedule: Schedule::default(),
            running_at: BTreeSet::new(),
            waiters: FxHashMap::default(),
            unannounced: BTreeSet::new(),
            installed_early: Vec::new(),
            keys: Keys::default(),
            scanners: BTreeMap::new(),
            committed_upto: None,
            final_upto: None,
            history: None,
            next_version: 1,
            settled: Vec::new(),
            counters: ExecCounters::default(),
            running: 0,
            planted: PlantedBugs::NONE,
            record_committed: false,
            record_tentative: false,
            write_sets: Vec::new(),
            versions: None,
        }
    }

    /// Keep a version record for every key `meta_key` names one for
    /// ([`crate::versions`]), `revision` giving the revision of a
    /// committed position. Call before any op is inserted.
    pub fn keep_versions(&mut self, meta_key: MetaKey, revision: Revision<P>) {
        self.versions = Some((meta_key, revision));
    }

    /// Start from a committed state, as restored from a checkpoint: every
    /// `(key, value)` becomes the final (base) version of its key, and every
    /// position up to `committed_upto` counts as committed, so later
    /// [`Engine::commit`]s continue after it. Call on a fresh executor, before
    /// any op is inserted (then the state is exactly `state`); on a used one
    /// it is a caller bug (asserted in debug builds) and the loaded values
    /// override the final ones. The checkpoint holds only the state after
    /// `committed_upto`: reads of the final state before a position at or
    /// below it are refused ([`Engine::read_final_before`]).
    pub fn load_committed(
        &mut self,
        state: impl IntoIterator<Item = (Bytes, Bytes)>,
        committed_upto: Option<P>,
    ) {
        debug_assert!(
            self.ops.is_empty() && self.keys.is_empty() && self.committed_upto.is_none(),
            "load_committed on a used executor"
        );
        // One hash lookup per key, room reserved up front: checkpoints hold
        // millions of keys.
        let state = state.into_iter();
        self.keys.reserve(state.size_hint().0);
        for (k, value) in state {
            let no = VersionNo(self.next_version);
            self.next_version += 1;
            let version = Version {
                no,
                value: Some(value),
            };
            if self.keys.load_base(k, version) {
                self.counters.versions_alive += 1;
            }
        }
        if let Some(upto) = committed_upto {
            self.committed_upto = Some(upto);
            self.final_upto = Some(upto);
            self.history_loaded(upto);
        }
    }

    /// How free cores pick executions from now on (see [`Schedule`]).
    pub fn set_schedule(&mut self, schedule: Schedule) {
        self.schedule = schedule;
    }

    /// The position of the op [`Engine::next_task`] would hand out next, if
    /// any.
    pub fn next_runnable(&self) -> Option<P> {
        let first = *self.runnable.first()?;
        if !self.schedule.fresh_first || self.is_committed(first) {
            return Some(first);
        }
        Some(self.fresh.first().copied().unwrap_or(first))
    }

    /// Ops the executor still tracks (not yet final).
    pub fn ops_alive(&self) -> usize {
        self.ops.len()
    }

    fn visible_no(&self, key: &[u8], pos: P) -> VersionNo {
        self.keys
            .get(key)
            .map_or(VersionNo::ABSENT, |ks| ks.visible(pos).1)
    }

    fn is_committed(&self, pos: P) -> bool {
        self.committed_upto.is_some_and(|b| pos <= b)
    }

    /// Readers (other than `except`) whose recorded read of `key` differs from
    /// what they see now, among those in `candidates`.
    fn stale_readers(&self, key: &[u8], candidates: Vec<(P, K)>, except: K, out: &mut Vec<K>) {
        for (rpos, rkey) in candidates {
            if rkey == except {
                continue;
            }
            let recorded = self.ops.get(&rkey).and_then(|op| op.recorded_read(key));
            debug_assert!(recorded.is_some(), "reader index out of sync for {rkey:?}");
            if recorded != Some(self.visible_no(key, rpos)) {
                out.push(rkey);
            }
        }
    }

    fn install(&mut self, key: K, executed: Executed) {
        let Some(op) = self.ops.get_mut(&key) else {
            return;
        };
        let pos = op.pos;
        op.state = OpState::Installed;
        op.outcome = Some(executed.outcome);
        op.reads = executed.reads;
        op.scans = executed.scans;
        self.not_installed.remove(&pos);
        for (k, _) in &op.reads {
            key_state(&mut self.keys, k).readers.insert(pos, key);
        }
        if !op.scans.is_empty() {
            // Recorded here, checked in `check_invariants`: the scans equal
            // what is visible at the op's position while it stays installed.
            let previous = self.scanners.insert(pos, key);
            debug_assert!(previous.is_none(), "two scanners at one position");
        }
        let mut invalid = Vec::new();
        let mut written = Vec::with_capacity(executed.writes.len());
        for (k, value) in executed.writes {
            let no = VersionNo(self.next_version);
            self.next_version += 1;
            let ks = key_state(&mut self.keys, &k);
            let previous = ks.versions.insert(pos, Version { no, value });
            debug_assert!(previous.is_none(), "two versions at one position");
            self.counters.versions_alive += 1;
            let candidates = ks.readers_affected(pos, pos);
            if !self.planted.has(Bug::SkipInvalidation) {
                self.stale_readers(&k, candidates, key, &mut invalid);
                if !self.planted.has(Bug::SkipScanInvalidation) {
                    self.stale_scanners(&k, pos, pos, key, &mut invalid);
                }
            }
            written.push(k);
        }
        if let Some(op) = self.ops.get_mut(&key) {
            op.writes = written;
        }
        // Common case: installed in order at the frontier with nothing
        // waiting to be reported: report it now, skipping the queue.
        let settled = self.not_installed.first().is_none_or(|f| pos < *f);
        if invalid.is_empty() && settled && self.unannounced.is_empty() && !self.is_committed(pos) {
            if let Some((outcome, executions)) = self.settled_outcome(key) {
                self.settled.push(Settled {
                    key,
                    outcome,
                    committed: false,
                    executions,
                });
                self.record_tentative_writes(key);
            }
        } else {
            self.unannounced.insert(pos);
            if !self.is_committed(pos) {
                if let Some(outcome) = self.ops.get(&key).and_then(|op| op.outcome.clone()) {
                    self.installed_early.push((key, outcome));
                }
            }
        }
        self.invalidate(invalid);
    }

    /// Roll back the installed executions in `worklist`, and transitively
    /// every installed execution that read a version they held.
    fn invalidate(&mut self, mut worklist: Vec<K>) {
        while let Some(key) = worklist.pop() {
            if self.uninstall(key, &mut worklist) {
                self.counters.invalidations += 1;
            }
        }
    }

    /// Take an installed execution out: its versions are hidden and the
    /// readers of those versions are pushed onto `cascade`. Returns whether
    /// there was an installed execution.
    fn uninstall(&mut self, key: K, cascade: &mut Vec<K>) -> bool {
        let Some(op) = self.ops.get_mut(&key) else {
            return false;
        };
        if op.state != OpState::Installed {
            return false;
        }
        op.state = OpState::Pending;
        op.gen += 1;
        op.outcome = None;
        let pos = op.pos;
        let reads = std::mem::take(&mut op.reads);
        let writes = std::mem::take(&mut op.writes);
        if !std::mem::take(&mut op.scans).is_empty() {
            self.scanners.remove(&pos);
        }
        self.not_installed.insert(pos);
        self.runnable.insert(pos);
        self.unannounced.remove(&pos);
        for (k, _) in reads {
            self.drop_reader(&k, pos);
        }
        for k in writes {
            let Some(ks) = self.keys.get_mut(&k) else {
                continue;
            };
            let removed = ks.versions.remove(&pos);
            debug_assert!(removed.is_some(), "installed write without a version");
            if removed.is_some() {
                self.counters.versions_alive -= 1;
            }
            let candidates = ks.readers_affected(pos, pos);
            self.stale_readers(&k, candidates, key, cascade);
            self.stale_scanners(&k, pos, pos, key, cascade);
            self.drop_if_empty(&k);
        }
        true
    }

    fn drop_reader(&mut self, key: &[u8], pos: P) {
        if let Some(ks) = self.keys.get_mut(key) {
            ks.readers.remove(&pos);
        }
        self.drop_if_empty(key);
    }

    /// Forget a key that holds nothing a reader could tell from absence.
    fn drop_if_empty(&mut self, key: &[u8]) {
        if self.keys.get(key).is_some_and(|ks| ks.is_empty()) {
            if let Some(ks) = self.keys.remove(key) {
                self.counters.versions_alive -= ks.version_count();
            }
        }
    }

    /// Report newly settled ops and finalize the committed, settled prefix.
    fn announce(&mut self) {
        let frontier = self.not_installed.first().copied();
        let settled_at = |p: P| frontier.is_none_or(|f| p < f);
        while let Some(&pos) = self.unannounced.first() {
            if !settled_at(pos) {
                break;
            }
            self.unannounced.pop_first();
            if self.is_committed(pos) {
                continue; // reported as final below
            }
            let Some(&key) = self.order.get(&pos) else {
                continue;
            };
            if let Some((outcome, executions)) = self.settled_outcome(key) {
                self.settled.push(Settled {
                    key,
                    outcome,
                    committed: false,
                    executions,
                });
                self.record_tentative_writes(key);
            }
        }
        // Finalizing may run later executions again (a version record
        // advanced, `record_versions`): the frontier is read each time.
        while let Some((&pos, &key)) = self.order.first_key_value() {
            let settled = self.not_installed.first().is_none_or(|f| pos < *f);
            if !(self.is_committed(pos) && settled) {
                break;
            }
            self.finalize(key, pos);
        }
    }

    /// The op is committed at `committed_at` and settled: report it, drop
    /// its reader entries and every version its writes supersede (or keep
    /// them in the history). Its versions may still stand at an earlier,
    /// tentative position (`commit`'s fast path): the base records
    /// `committed_at`, the position reads of the past are asked in.
    fn finalize(&mut self, key: K, committed_at: P) {
        let Some(op) = self.ops.remove(&key) else {
            return;
        };
        let pos = op.pos;
        // The pair of the order `commit` asserts: ops become final in it.
        debug_assert!(
            self.final_upto < Some(committed_at),
            "final out of order at {committed_at:?}"
        );
        self.final_upto = Some(committed_at);
        self.order.remove(&pos);
        self.unannounced.remove(&pos);
        for (k, _) in &op.reads {
            self.drop_reader(k, pos);
        }
        if !op.scans.is_empty() {
            self.scanners.remove(&pos);
        }
        let mut recorded = Vec::new();
        // The final writes of versioned keys, when versions are kept.
        let mut versioned = Vec::new();
        for k in &op.writes {
            let Some(ks) = self.keys.get_mut(k) else {
                continue;
            };
            // The base superseded here, when a history may keep it.
            let mut superseded = None;
            // Every op before this one is final, so its version is the oldest
            // live one: it becomes the base, superseding the previous base.
            match ks.versions.remove(&pos) {
                Some(mut version) => {
                    // A final value may live for the life of the replica:
                    // detach it from the frame it was decoded from (see
                    // `key_state`).
                    if let Some(v) = &version.value {
                        version.value = Some(Bytes::copy_from_slice(v));
                    }
                    if self.record_committed {
                        recorded.push((k.clone(), version.value.clone()));
                    }
                    if self.versions.is_some() {
                        versioned.push((k.clone(), version.value.clone()));
                    }
                    let old_at = ks.base_at.replace(committed_at);
                    if let Some(old) = ks.base.replace(version) {
                        self.counters.versions_alive -= 1;
                        if self.history.is_some() {
                            superseded = Some((old_at, old));
                        }
                    }
                }
                None => debug_assert!(false, "final op without its version"),
            }
            if let Some((old_at, old)) = superseded {
                self.keep_final(k, committed_at, old_at, old);
            } else if ks.is_empty() {
                self.counters.versions_alive -= ks.version_count();
                self.keys.remove(k);
            }
        }
        self.record_versions(key, committed_at, &versioned);
        if let Some(outcome) = op.outcome {
            self.settled.push(Settled {
                key,
                outcome,
                committed: true,
                executions: u32::try_from(op.executions).unwrap_or(u32::MAX),
            });
            if self.record_committed {
                self.write_sets.push(WriteSet {
                    key,
                    committed: true,
                    writes: recorded,
                });
            }
        }
    }

    /// Advance the version records of the versioned keys in `written`, the
    /// final writes of op `writer` now final at `at` ([`crate::versions`]):
    /// each record becomes the key's new final version, and the executions
    /// that read the old one run again.
    fn record_versions(&mut self, writer: K, at: P, written: &[(Bytes, Option<Bytes>)]) {
        let Some((meta_key, revision)) = self.versions else {
            return;
        };
        let records = versions::record_writes(meta_key, written, revision(at), |k| {
            self.keys
                .get(k)
                .and_then(|ks| ks.base.as_ref())
                .and_then(|v| v.value.clone())
        });
        let mut invalid = Vec::new();
        for (meta, value) in records {
            let no = VersionNo(self.next_version);
            self.next_version += 1;
            let ks = key_state(&mut self.keys, &meta);
            let old_at = ks.base_at.replace(at);
            match ks.base.replace(Version { no, value }) {
                Some(old) if self.history.is_some() => self.keep_final(&meta, at, old_at, old),
                Some(_) => self.drop_if_empty(&meta),
                None => {
                    self.counters.versions_alive += 1;
                    self.drop_if_empty(&meta);
                }
            }
            if self.planted.has(Bug::StaleVersionRecords) {
                continue;
            }
            // Every reader left is after `at` (ops become final in order)
            // and read the record this one replaced.
            if let Some(ks) = self.keys.get(&meta) {
                let candidates = ks.readers_affected(at, at);
                self.stale_readers(&meta, candidates, writer, &mut invalid);
            }
            self.stale_scanners(&meta, at, at, writer, &mut invalid);
        }
        self.invalidate(invalid);
    }

    /// Record what the installed execution of `key` (settled, not
    /// committed) wrote, if asked to.
    /// The outcome of op `key`'s installed execution, with how many times
    /// it executed.
    fn settled_outcome(&self, key: K) -> Option<(Outcome, u32)> {
        let op = self.ops.get(&key)?;
        let executions = u32::try_from(op.executions).unwrap_or(u32::MAX);
        Some((op.outcome.clone()?, executions))
    }

    fn record_tentative_writes(&mut self, key: K) {
        if !self.record_tentative {
            return;
        }
        let Some(op) = self.ops.get(&key) else {
            return;
        };
        let writes = op
            .writes
            .iter()
            .filter_map(|k| {
                let version = self.keys.get(k)?.versions.get(&op.pos)?;
                Some((k.clone(), version.value.clone()))
            })
            .collect();
        self.write_sets.push(WriteSet {
            key,
            committed: false,
            writes,
        });
    }

    /// The nearest running op before `pos` whose latest execution wrote a
    /// key among `reads`.
    fn running_writer_before(&self, pos: P, reads: &[(Bytes, VersionNo)]) -> Option<K> {
        self.running_at.range(..pos).rev().find_map(|p| {
            let key = *self.order.get(p)?;
            let op = self.ops.get(&key)?;
            op.footprint
                .iter()
                .any(|w| reads.iter().any(|(r, _)| r == w))
                .then_some(key)
        })
    }

    /// The ops waiting for `key` become runnable.
    fn release_waiters(&mut self, key: K) {
        for w in self.waiters.remove(&key).unwrap_or_default() {
            if let Some(op) = self.ops.get_mut(&w) {
                if op.state == OpState::Waiting && op.blocked_by == Some(key) {
                    op.state = OpState::Pending;
                    op.blocked_by = None;
                    self.runnable.insert(op.pos);
                }
            }
        }
    }

    /// `key` no longer waits (it is going away).
    fn stop_waiting(&mut self, key: K) {
        let Some(b) = self.ops.get_mut(&key).and_then(|op| op.blocked_by.take()) else {
            return;
        };
        if let Some(w) = self.waiters.get_mut(&b) {
            w.retain(|k| *k != key);
            if w.is_empty() {
                self.waiters.remove(&b);
            }
        }
    }
}

impl<K: OpKey, P: Position> Engine<K, P> for MvccExecutor<K, P> {
    fn insert(&mut self, key: K, pos: P, call: ProcCall) {
        debug_assert!(!self.is_committed(pos), "insert at a committed position");
        if self.ops.contains_key(&key) || self.order.contains_key(&pos) {
            debug_assert!(false, "duplicate insert of {key:?} at {pos:?}");
            return;
        }
        self.ops.insert(
            key,
            OpEntry {
                pos,
                call,
                gen: 0,
                state: OpState::Pending,
                executions: 0,
                reads: Vec::new(),
                scans: Vec::new(),
                writes: Vec::new(),
                footprint: Vec::new(),
                blocked_by: None,
                outcome: None,
            },
        );
        self.order.insert(pos, key);
        self.not_installed.insert(pos);
        self.runnable.insert(pos);
        self.fresh.insert(pos);
        self.counters.ops += 1;
    }

    fn reposition(&mut self, key: K, new: P) {
        let Some(op) = self.ops.get_mut(&key) else {
            debug_assert!(false, "reposition of unknown {key:?}");
            return;
        };
        let old = op.pos;
        if old == new {
            return;
        }
        op.pos = new;
        let state = op.state;
        let reads: Vec<Bytes> = op.reads.iter().map(|(k, _)| k.clone()).collect();
        let writes = op.writes.clone();
        self.order.remove(&old);
        let (lo, hi) = if old < new { (old, new) } else { (new, old) };
        // Nothing between the two places: the relative order is unchanged and
        // no snapshot can differ; only the keys change.
        let crosses = self
            .order
            .range((std::ops::Bound::Excluded(lo), std::ops::Bound::Excluded(hi)))
            .next()
            .is_some();
        let clash = self.order.insert(new, key);
        debug_assert!(clash.is_none(), "reposition onto an occupied position");
        for set in [
            &mut self.not_installed,
            &mut self.runnable,
            &mut self.fresh,
            &mut self.running_at,
            &mut self.unannounced,
        ] {
            if set.remove(&old) {
                set.insert(new);
            }
        }
        if state != OpState::Installed {
            return;
        }
        for k in &reads {
            if let Some(ks) = self.keys.get_mut(k) {
                ks.readers.remove(&old);
                ks.readers.insert(new, key);
            }
        }
        if self.scanners.remove(&old).is_some() {
            self.scanners.insert(new, key);
        }
        for k in &writes {
            if let Some(ks) = self.keys.get_mut(k) {
                if let Some(v) = ks.versions.remove(&old) {
                    ks.versions.insert(new, v);
                }
            }
        }
        if !crosses {
            return;
        }
        let mut invalid = Vec::new();
        if let Some(op) = self.ops.get(&key) {
            if op.reads.iter().any(|(k, v)| self.visible_no(k, new) != *v)
                || !self.scans_current(&op.scans, new)
            {
                invalid.push(key);
            }
        }
        for k in &writes {
            if let Some(ks) = self.keys.get(k) {
                let candidates = ks.readers_affected(lo, hi);
                self.stale_readers(k, candidates, key, &mut invalid);
            }
            self.stale_scanners(k, lo, hi, key, &mut invalid);
        }
        self.invalidate(invalid);
    }

    fn remove(&mut self, key: K) {
        let Some(op) = self.ops.get(&key) else {
            return;
        };
        debug_assert!(!self.is_committed(op.pos), "removing a committed op");
        // Removing is not a rollback: only the executions that read its
        // versions (none, for a read-only op) count as invalidated.
        let mut cascade = Vec::new();
        self.uninstall(key, &mut cascade);
        self.invalidate(cascade);
        self.stop_waiting(key);
        self.release_waiters(key);
        if let Some(op) = self.ops.remove(&key) {
            self.running_at.remove(&op.pos);
            self.order.remove(&op.pos);
            self.not_installed.remove(&op.pos);
            self.runnable.remove(&op.pos);
            self.fresh.remove(&op.pos);
            self.unannounced.remove(&op.pos);
        }
    }

    fn replace_call(&mut self, key: K, call: ProcCall) {
        let Some(op) = self.ops.get(&key) else {
            return;
        };
        let (state, pos) = (op.state, op.pos);
        debug_assert!(!self.is_committed(pos), "a final op's call replaced");
        match state {
            OpState::Installed => {
                // As when it is removed: the readers of its versions run
                // again; no rollback is counted.
                let mut cascade = Vec::new();
                self.uninstall(key, &mut cascade);
                self.invalidate(cascade);
            }
            OpState::Running | OpState::Waiting => {
                self.stop_waiting(key);
                if let Some(op) = self.ops.get_mut(&key) {
                    // The task out (if any) completes as stale.
                    op.gen += 1;
                    op.state = OpState::Pending;
                    op.blocked_by = None;
                }
                self.running_at.remove(&pos);
                self.runnable.insert(pos);
                // Ops held for its completion need not wait for a stale one.
                self.release_waiters(key);
            }
            OpState::Pending => {}
        }
        if let Some(op) = self.ops.get_mut(&key) {
            op.call = call;
        }
    }

    fn commit(&mut self, key: K, pos: P) {
        debug_assert!(self.committed_upto.is_none_or(|b| b < pos));
        self.committed_upto = Some(pos);
        // Fast path: the first op in the order, installed, is settled; it
        // becomes final where it stands, without re-keying its versions.
        let first = self.order.first_key_value().map(|(_, k)| *k);
        let installed = self
            .ops
            .get(&key)
            .is_some_and(|op| op.state == OpState::Installed);
        if first == Some(key) && installed {
            self.finalize(key, pos);
            return;
        }
        self.reposition(key, pos);
    }

    fn next_task(&mut self) -> Option<Task<K>> {
        let pos = self.next_runnable()?;
        self.runnable.remove(&pos);
        self.fresh.remove(&pos);
        self.running_at.insert(pos);
        let key = *self.order.get(&pos)?;
        let op = self.ops.get_mut(&key)?;
        op.state = OpState::Running;
        if op.executions > 0 {
            self.counters.reexecutions += 1;
        }
        op.executions += 1;
        self.counters.executions += 1;
        self.running += 1;
        Some(Task {
            key,
            gen: op.gen,
            call: op.call.clone(),
        })
    }

    fn run(&self, task: &Task<K>) -> Completion<K> {
        let pos = match self.ops.get(&task.key) {
            Some(op) => op.pos,
            None => {
                return Completion {
                    key: task.key,
                    gen: task.gen,
                    executed: Executed {
                        reads: Vec::new(),
                        scans: Vec::new(),
                        writes: Vec::new(),
                        outcome: Err(crate::txn::Abort::new("op no longer tracked")),
                    },
                }
            }
        };
        let snapshot = SnapshotAt {
            keys: &self.keys,
            pos,
        };
        Completion {
            key: task.key,
            gen: task.gen,
            executed: self.procedures.execute(&snapshot, self.limits, &task.call),
        }
    }

    fn complete(&mut self, completion: Completion<K>) {
        self.running = self.running.saturating_sub(1);
        let Some(op) = self.ops.get(&completion.key) else {
            self.counters.stale += 1;
            return;
        };
        if op.gen != completion.gen || op.state != OpState::Running {
            self.counters.stale += 1;
            return;
        }
        let pos = op.pos;
        let key = completion.key;
        self.running_at.remove(&pos);
        if !completion.executed.scans.is_empty() {
            self.keys.enable_order();
        }
        let valid = completion
            .executed
            .reads
            .iter()
            .all(|(k, v)| self.visible_no(k, pos) == *v)
            && self.scans_current(&completion.executed.scans, pos);
        let footprint = completion
            .executed
            .writes
            .iter()
            .map(|(k, _)| k.clone())
            .collect();
        if let Some(op) = self.ops.get_mut(&key) {
            op.footprint = footprint;
        }
        if valid {
            self.install(key, completion.executed);
        } else {
            self.counters.conflicts += 1;
            let blocker = if self.schedule.hold_reruns {
                self.running_writer_before(pos, &completion.executed.reads)
            } else {
                None
            };
            if let Some(op) = self.ops.get_mut(&key) {
                op.state = if blocker.is_some() {
                    OpState::Waiting
                } else {
                    OpState::Pending
                };
                op.blocked_by = blocker;
            }
            match blocker {
                Some(b) => self.waiters.entry(b).or_default().push(key),
                None => {
                    self.runnable.insert(pos);
                }
            }
        }
        self.release_waiters(key);
    }

    fn drain_installed(&mut self, out: &mut Vec<(K, Outcome)>) {
        out.append(&mut self.installed_early);
    }

    fn drain_settled(&mut self, out: &mut Vec<Settled<K>>) {
        self.announce();
        out.append(&mut self.settled);
    }

    fn record_writes(&mut self, committed: bool, tentative: bool) {
        self.record_committed = committed;
        self.record_tentative = tentative;
    }

    fn drain_writes(&mut self, out: &mut Vec<WriteSet<K>>) {
        out.append(&mut self.write_sets);
    }

    fn counters(&self) -> ExecCounters {
        self.counters
    }

    fn committed_state(&self) -> BTreeMap<Bytes, Bytes> {
        self.keys
            .iter()
            .filter_map(|(k, ks)| {
                let value = ks.base.as_ref()?.value.clone()?;
                Some((k.clone(), value))
            })
            .collect()
    }

    fn committed_with_prefix(&self, prefix: &[u8], f: &mut dyn FnMut(&Bytes, &Bytes)) {
        for (k, ks) in self.keys.iter() {
            if let Some(value) = ks.base.as_ref().and_then(|b| b.value.as_ref()) {
                if k.starts_with(prefix) {
                    f(k, value);
                }
            }
        }
    }

    fn read_committed(&self, key: &[u8]) -> Option<Bytes> {
        self.keys.get(key)?.base.as_ref()?.value.clone()
    }

    fn read_latest(&self, key: &[u8]) -> Option<Bytes> {
        self.keys.get(key)?.latest().cloned()
    }

    fn scan_latest(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes)>) {
        let mut left = limit;
        if left == 0 {
            return;
        }
        self.keys.for_each_in(from, to, |k, ks| {
            if let Some(value) = ks.latest() {
                out.push((k.clone(), value.clone()));
                left -= 1;
            }
            left > 0
        });
    }

    fn scan_committed(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes)>) {
        let mut left = limit;
        if left == 0 {
            return;
        }
        self.keys.for_each_in(from, to, |k, ks| {
            if let Some(value) = ks.base.as_ref().and_then(|b| b.value.as_ref()) {
                out.push((k.clone(), value.clone()));
                left -= 1;
            }
            left > 0
        });
    }

    fn set_final_horizon(&mut self, horizon: Option<P>) {
        self.move_final_horizon(horizon);
    }

    fn keep_final_history(&mut self) {
        self.start_final_history();
    }

    fn read_final_before(&self, key: &[u8], before: P) -> Result<Option<Bytes>, BelowHorizon> {
        self.final_value_before(key, before)
    }

    fn scan_final_before(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        before: P,
        out: &mut Vec<(Bytes, Bytes)>,
    ) -> Result<(), BelowHorizon> {
        self.final_scan_before(from, to, limit, before, out)
    }

    fn running(&self) -> usize {
        self.running
    }

    fn abandon_running(&mut self) {
        for op in self.ops.values_mut() {
            if op.state == OpState::Running {
                op.gen += 1;
            }
            if matches!(op.state, OpState::Running | OpState::Waiting) {
                op.state = OpState::Pending;
                op.blocked_by = None;
                self.runnable.insert(op.pos);
            }
        }
        self.running_at.clear();
        self.waiters.clear();
        self.running = 0;
    }
}

#[cfg(test)]
mod history_tests;
#[cfg(test)]
mod scan_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod version_tests;
