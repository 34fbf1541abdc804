//! The basic algorithm's execution: Algorithm 2's `StateObject` (one
//! database plus an undo log) driven the way Algorithm 1's
//! `adjustExecution` prescribes — ops execute one at a time in the current
//! order; when the order changes, everything executed after the longest common
//! prefix of old and new order is rolled back, newest first, and redone.
//!
//! It is obviously right and slow, which makes it the test oracle for
//! [`crate::mvcc::MvccExecutor`] (DESIGN §3) and the engine of the Bayou
//! baseline. [`replay`] is the plain sequential execution used by checkers.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::FxHashMap;

use crate::engine::{Completion, Engine, ExecCounters, OpKey, Position, Settled, Task};
use crate::procedures::Procedures;
use crate::txn::{Outcome, SnapshotRead, TxnLimits, VersionNo};
use crate::versions::{self, MetaKey};
use creek_types::ProcCall;

/// A plain key-value database as a snapshot.
struct Db<'a>(&'a BTreeMap<Bytes, Bytes>);

impl SnapshotRead for Db<'_> {
    fn read(&self, key: &[u8]) -> (Option<Bytes>, VersionNo) {
        (self.0.get(key).cloned(), VersionNo::ABSENT)
    }

    fn scan(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes, VersionNo)>) {
        scan_map(self.0, from, to, limit, VersionNo::ABSENT, out);
    }
}

/// A plain map as a snapshot in which every present key is at version 1:
/// for running a procedure on a fixed state outside an engine.
#[derive(Clone, Debug, Default)]
pub struct MapSnapshot(pub BTreeMap<Bytes, Bytes>);

impl SnapshotRead for MapSnapshot {
    fn read(&self, key: &[u8]) -> (Option<Bytes>, VersionNo) {
        match self.0.get(key) {
            Some(v) => (Some(v.clone()), VersionNo(1)),
            None => (None, VersionNo::ABSENT),
        }
    }

    fn scan(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes, VersionNo)>) {
        scan_map(&self.0, from, to, limit, VersionNo(1), out);
    }

    fn scan_rev(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        out: &mut Vec<(Bytes, Bytes, VersionNo)>,
    ) {
        if from >= to {
            return;
        }
        let range = self
            .0
            .range::<[u8], _>((Bound::Included(from), Bound::Excluded(to)));
        out.extend(
            range
                .rev()
                .take(limit)
                .map(|(k, v)| (k.clone(), v.clone(), VersionNo(1))),
        );
    }
}

/// [`SnapshotRead::scan`] over a plain map whose every key is at version
/// `no`.
pub fn scan_map(
    map: &BTreeMap<Bytes, Bytes>,
    from: &[u8],
    to: &[u8],
    limit: usize,
    no: VersionNo,
    out: &mut Vec<(Bytes, Bytes, VersionNo)>,
) {
    if from >= to {
        return; // `BTreeMap::range` panics on an inverted range
    }
    let range = map.range::<[u8], _>((Bound::Included(from), Bound::Excluded(to)));
    out.extend(range.take(limit).map(|(k, v)| (k.clone(), v.clone(), no)));
}

/// Apply `writes` to `db`, returning the undo map (Algorithm 2, `write`).
fn apply(
    db: &mut BTreeMap<Bytes, Bytes>,
    writes: Vec<(Bytes, Option<Bytes>)>,
) -> Vec<(Bytes, Option<Bytes>)> {
    let mut undo = Vec::with_capacity(writes.len());
    for (k, v) in writes {
        let old = match v {
            Some(v) => db.insert(k.clone(), v),
            None => db.remove(&k),
        };
        undo.push((k, old));
    }
    undo
}

/// Revert one execution (Algorithm 2, `rollback`).
fn rollback(db: &mut BTreeMap<Bytes, Bytes>, undo: Vec<(Bytes, Option<Bytes>)>) {
    for (k, old) in undo.into_iter().rev() {
        match old {
            Some(v) => db.insert(k, v),
            None => db.remove(&k),
        };
    }
}

/// Execute `calls` one after another from an empty state: the outcome of each
/// and the final state.
pub fn replay<'a>(
    procedures: &dyn Procedures,
    limits: TxnLimits,
    calls: impl IntoIterator<Item = &'a ProcCall>,
) -> (Vec<Outcome>, BTreeMap<Bytes, Bytes>) {
    replay_from(procedures, limits, BTreeMap::new(), calls)
}

/// [`replay`] from the state `initial`.
pub fn replay_from<'a>(
    procedures: &dyn Procedures,
    limits: TxnLimits,
    initial: BTreeMap<Bytes, Bytes>,
    calls: impl IntoIterator<Item = &'a ProcCall>,
) -> (Vec<Outcome>, BTreeMap<Bytes, Bytes>) {
    let mut db = initial;
    let mut outcomes = Vec::new();
    for call in calls {
        let e = procedures.execute(&Db(&db), limits, call);
        apply(&mut db, e.writes);
        outcomes.push(e.outcome);
    }
    (outcomes, db)
}

/// [`replay_from`] keeping versions of keys ([`crate::versions`]) as an
/// engine with [`crate::mvcc::MvccExecutor::keep_versions`] does: each call
/// comes with the revision it is final at.
pub fn replay_versioned<'a>(
    procedures: &dyn Procedures,
    limits: TxnLimits,
    initial: BTreeMap<Bytes, Bytes>,
    meta_key: MetaKey,
    calls: impl IntoIterator<Item = (u64, &'a ProcCall)>,
) -> (Vec<Outcome>, BTreeMap<Bytes, Bytes>) {
    let mut db = initial;
    let mut outcomes = Vec::new();
    for (revision, call) in calls {
        let e = procedures.execute(&Db(&db), limits, call);
        let records =
            versions::record_writes(meta_key, &e.writes, revision, |k| db.get(k).cloned());
        apply(&mut db, e.writes);
        apply(&mut db, records);
        outcomes.push(e.outcome);
    }
    (outcomes, db)
}

struct Done<K> {
    key: K,
    undo: Vec<(Bytes, Option<Bytes>)>,
    outcome: Outcome,
}

/// The undo-log engine. See the module documentation.
pub struct BasicEngine<K, P> {
    procedures: Arc<dyn Procedures>,
    limits: TxnLimits,
    ops: FxHashMap<K, (P, ProcCall)>,
    order: BTreeMap<P, K>,
    /// Algorithm 1's `executed`: a prefix of the order, oldest first.
    executed: Vec<Done<K>>,
    db: BTreeMap<Bytes, Bytes>,
    committed_upto: Option<P>,
    running: Option<(K, u64)>,
    next_gen: u64,
    ever_executed: FxHashMap<K, u32>,
    settled: Vec<Settled<K>>,
    counters: ExecCounters,
}

impl<K: OpKey, P: Position> BasicEngine<K, P> {
    /// An empty engine running `procedures`.
    pub fn new(procedures: Arc<dyn Procedures>, limits: TxnLimits) -> Self {
        BasicEngine {
            procedures,
            limits,
            ops: FxHashMap::default(),
            order: BTreeMap::new(),
            executed: Vec::new(),
            db: BTreeMap::new(),
            committed_upto: None,
            running: None,
            next_gen: 0,
            ever_executed: FxHashMap::default(),
            settled: Vec::new(),
            counters: ExecCounters::default(),
        }
    }

    /// Start from a committed state (a bulk load): call on a fresh engine,
    /// before any op is inserted.
    pub fn load_committed(&mut self, state: impl IntoIterator<Item = (Bytes, Bytes)>) {
        debug_assert!(
            self.ops.is_empty() && self.executed.is_empty(),
            "load_committed on a used engine"
        );
        self.db.extend(state);
    }

    fn is_committed(&self, pos: P) -> bool {
        self.committed_upto.is_some_and(|b| pos <= b)
    }

    /// Algorithm 1, `adjustExecution`: keep the longest common prefix of
    /// `executed` and the order, roll back the rest newest first.
    fn adjust_execution(&mut self) {
        let in_order = self
            .executed
            .iter()
            .zip(self.order.values())
            .take_while(|(done, key)| done.key == **key)
            .count();
        let rolled_back = self.executed.len() > in_order;
        while self.executed.len() > in_order {
            if let Some(done) = self.executed.pop() {
                rollback(&mut self.db, done.undo);
                self.counters.invalidations += 1;
            }
        }
        // The running execution read the database as it was: it stays valid
        // only if nothing was rolled back under it and its op is still next
        // (an op moved ahead of executed ones would otherwise complete on a
        // snapshot holding their effects).
        if let Some((key, _)) = self.running {
            if rolled_back || self.next_op() != Some(key) {
                self.running = None;
            }
        }
    }

    fn next_op(&self) -> Option<K> {
        self.order.values().nth(self.executed.len()).copied()
    }
}

impl<K: OpKey, P: Position> Engine<K, P> for BasicEngine<K, P> {
    fn insert(&mut self, key: K, pos: P, call: ProcCall) {
        if self.ops.contains_key(&key) || self.order.contains_key(&pos) {
            debug_assert!(false, "duplicate insert of {key:?} at {pos:?}");
            return;
        }
        self.ops.insert(key, (pos, call));
        self.order.insert(pos, key);
        self.counters.ops += 1;
        self.adjust_execution();
    }

    fn reposition(&mut self, key: K, pos: P) {
        let Some(entry) = self.ops.get_mut(&key) else {
            return;
        };
        let old = std::mem::replace(&mut entry.0, pos);
        self.order.remove(&old);
        self.order.insert(pos, key);
        self.adjust_execution();
    }

    fn remove(&mut self, key: K) {
        if let Some((pos, _)) = self.ops.remove(&key) {
            self.order.remove(&pos);
            self.adjust_execution();
        }
    }

    fn replace_call(&mut self, key: K, call: ProcCall) {
        // Generations grow across ops here: a task handed out before is
        // stale after the op is inserted again.
        if let Some((pos, _)) = self.ops.get(&key).cloned() {
            self.remove(key);
            self.insert(key, pos, call);
            self.counters.ops -= 1; // the same op, not a new one
        }
    }

    fn commit(&mut self, key: K, pos: P) {
        self.committed_upto = Some(pos);
        self.reposition(key, pos);
    }

    fn next_task(&mut self) -> Option<Task<K>> {
        if self.running.is_some() {
            return None;
        }
        let key = self.next_op()?;
        let (_, call) = self.ops.get(&key)?;
        self.next_gen += 1;
        self.running = Some((key, self.next_gen));
        self.counters.executions += 1;
        let runs = self.ever_executed.entry(key).or_insert(0);
        *runs += 1;
        if *runs > 1 {
            self.counters.reexecutions += 1;
        }
        Some(Task {
            key,
            gen: self.next_gen,
            call: call.clone(),
        })
    }

    fn run(&self, task: &Task<K>) -> Completion<K> {
        Completion {
            key: task.key,
            gen: task.gen,
            executed: self
                .procedures
                .execute(&Db(&self.db), self.limits, &task.call),
        }
    }

    fn complete(&mut self, completion: Completion<K>) {
        if self.running != Some((completion.key, completion.gen)) {
            self.counters.stale += 1;
            return;
        }
        self.running = None;
        let undo = apply(&mut self.db, completion.executed.writes);
        let outcome = completion.executed.outcome;
        let committed = self
            .ops
            .get(&completion.key)
            .is_some_and(|(p, _)| self.is_committed(*p));
        if !committed {
            self.settled.push(Settled {
                key: completion.key,
                outcome: outcome.clone(),
                committed: false,
                executions: self
                    .ever_executed
                    .get(&completion.key)
                    .copied()
                    .unwrap_or(1),
            });
        }
        self.executed.push(Done {
            key: completion.key,
            undo,
            outcome,
        });
    }

    fn drain_settled(&mut self, out: &mut Vec<Settled<K>>) {
        // Executed ops at committed positions are final; the undo log is
        // truncated to the tentative part (Algorithm 2's remark).
        let final_count = self
            .executed
            .iter()
            .take_while(|d| {
                self.ops
                    .get(&d.key)
                    .is_some_and(|(p, _)| self.is_committed(*p))
            })
            .count();
        for done in self.executed.drain(..final_count) {
            if let Some((pos, _)) = self.ops.remove(&done.key) {
                self.order.remove(&pos);
            }
            let executions = self.ever_executed.remove(&done.key).unwrap_or(1);
            self.settled.push(Settled {
                key: done.key,
                outcome: done.outcome,
                committed: true,
                executions,
            });
        }
        out.append(&mut self.settled);
    }

    fn counters(&self) -> ExecCounters {
        self.counters
    }

    fn committed_state(&self) -> BTreeMap<Bytes, Bytes> {
        let mut db = self.db.clone();
        let tentative_from = self
            .executed
            .iter()
            .position(|d| {
                !self
                    .ops
                    .get(&d.key)
                    .is_some_and(|(p, _)| self.is_committed(*p))
            })
            .unwrap_or(self.executed.len());
        for done in self.executed[tentative_from..].iter().rev() {
            rollback(&mut db, done.undo.clone());
        }
        db
    }

    fn read_latest(&self, key: &[u8]) -> Option<Bytes> {
        // The database holds the state after the executed prefix.
        self.db.get(key).cloned()
    }

    fn scan_latest(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes)>) {
        if from >= to {
            return;
        }
        let range = self
            .db
            .range::<[u8], _>((Bound::Included(from), Bound::Excluded(to)));
        out.extend(range.take(limit).map(|(k, v)| (k.clone(), v.clone())));
    }

    fn running(&self) -> usize {
        usize::from(self.running.is_some())
    }

    fn abandon_running(&mut self) {
        self.running = None;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::testkit::TestProcs;
    use creek_types::value::{encode_args, Value};

    fn incr(key: &str, delta: i64) -> ProcCall {
        ProcCall::new(
            "kv.incr",
            encode_args(&[Value::from(key), Value::Int(delta)]),
        )
    }

    /// An op moved ahead of executed ones while it runs: its execution read
    /// their effects, so its completion is stale and it runs again.
    #[test]
    fn a_running_op_moved_ahead_of_executed_ones_runs_again() {
        let mut e: BasicEngine<u32, u64> =
            BasicEngine::new(Arc::new(TestProcs::new()), TxnLimits::default());
        e.insert(1, 10, incr("x", 1));
        e.insert(2, 20, incr("x", 10));
        let a = e.next_task().unwrap();
        let done = e.run(&a);
        e.complete(done);
        let b = e.next_task().unwrap();
        assert_eq!(b.key, 2);
        let stale = e.run(&b); // reads x = 1
        e.commit(2, 0); // 2 now precedes 1: 1 is rolled back
        e.complete(stale);
        assert_eq!(e.counters().stale, 1);
        let mut settled = Vec::new();
        while let Some(t) = e.next_task() {
            let done = e.run(&t);
            e.complete(done);
        }
        e.drain_settled(&mut settled);
        let first = settled.iter().find(|s| s.key == 2 && s.committed).unwrap();
        assert_eq!(first.outcome, Ok(Value::Int(10).encode()));
    }
}
