//! The history of final versions (`history.rs`): reads of the final state
//! before a position against a model (the committed calls replayed up to
//! that position, docs/snapshot-reads.md "Versions kept"), what a horizon
//! drops, the counters, and — with the history off — the executor exactly
//! as without it. The invariants (counters recomputed, pruning list in
//! step) are checked after every step.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::basic::{replay_from, BasicEngine};
use crate::testkit::TestProcs;
use creek_types::value::{encode_args, Value};

type Ex = MvccExecutor<u32, u64>;

/// Every key the tests read, one of them never written.
const KEYS: [&str; 5] = ["a", "b", "c", "d", "e"];

fn executor() -> Ex {
    let mut e = MvccExecutor::new(Arc::new(TestProcs::new()), TxnLimits::default());
    e.set_schedule(Schedule::LOWEST_FIRST);
    e
}

fn put(key: &str, value: &str) -> ProcCall {
    ProcCall::new(
        "kv.put",
        encode_args(&[Value::from(key), Value::from(value)]),
    )
}

fn delete(key: &str) -> ProcCall {
    ProcCall::new("kv.delete", encode_args(&[Value::from(key)]))
}

fn incr(key: &str) -> ProcCall {
    ProcCall::new("kv.incr", encode_args(&[Value::from(key), Value::Int(1)]))
}

fn check(e: &Ex) {
    if let Err(broken) = e.check_invariants() {
        panic!("invariant broken: {broken}");
    }
}

fn run_all(e: &mut Ex) {
    while let Some(task) = e.next_task() {
        let done = e.run(&task);
        e.complete(done);
        check(e);
    }
}

/// Run `call` as op `key` at position `pos` (above every earlier one),
/// commit it there and let it become final.
fn final_op(e: &mut Ex, key: u32, pos: u64, call: &ProcCall) {
    e.insert(key, pos, call.clone());
    e.commit(key, pos);
    run_all(e);
    e.drain_settled(&mut Vec::new());
    check(e);
    assert_eq!(e.final_upto, Some(pos), "op {key} is final");
}

/// The final state before each position: `states[i]` after the first `i`
/// calls of `calls` (committed at positions 1, 2, …), from `initial`.
fn states(initial: &BTreeMap<Bytes, Bytes>, calls: &[ProcCall]) -> Vec<BTreeMap<Bytes, Bytes>> {
    let mut out = vec![initial.clone()];
    for call in calls {
        let (_, next) = replay_from(
            &TestProcs::new(),
            TxnLimits::default(),
            out.last().cloned().unwrap_or_default(),
            [call],
        );
        out.push(next);
    }
    out
}

/// Reads and scans before `before` equal `model`.
fn assert_reads(e: &Ex, before: u64, model: &BTreeMap<Bytes, Bytes>) {
    for k in KEYS {
        let got = e.read_final_before(k.as_bytes(), before).unwrap();
        assert_eq!(got.as_ref(), model.get(k.as_bytes()), "{k} before {before}");
    }
    let everything: Vec<(Bytes, Bytes)> =
        model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    for (from, to, limit) in [
        ("a", "z", 100),
        ("", "\u{7f}", 100),
        ("a", "z", 1),
        ("b", "d", 100),
    ] {
        let mut got = Vec::new();
        e.scan_final_before(from.as_bytes(), to.as_bytes(), limit, before, &mut got)
            .unwrap();
        let want: Vec<(Bytes, Bytes)> = everything
            .iter()
            .filter(|(k, _)| from.as_bytes() <= k.as_ref() && k.as_ref() < to.as_bytes())
            .take(limit)
            .cloned()
            .collect();
        assert_eq!(got, want, "scan [{from}, {to}) before {before}");
    }
}

/// Reads and scans before `before` are refused, naming `horizon`.
fn assert_refused(e: &Ex, before: u64, horizon: Option<u64>) {
    let want = horizon.map_or_else(BelowHorizon::no_history, BelowHorizon::at);
    assert_eq!(e.read_final_before(b"a", before), Err(want.clone()));
    let mut out = Vec::new();
    assert_eq!(
        e.scan_final_before(b"a", b"z", 9, before, &mut out),
        Err(want)
    );
    assert!(out.is_empty());
}

/// Writes, overwrites and deletes of three keys, final at positions 1..=9;
/// kept versions are superseded at 3, 4, 6 (a), 7, 8 (b) and 9 (c).
fn nine_ops() -> Vec<ProcCall> {
    vec![
        put("a", "1"),
        put("b", "1"),
        put("a", "22"),
        delete("a"),
        put("c", "1"),
        put("a", "333"),
        delete("b"),
        put("b", "2"),
        delete("c"),
    ]
}

/// Superseding positions of the versions `nine_ops` leaves behind.
const SUPERSEDED_AT: [u64; 6] = [3, 4, 6, 7, 8, 9];

fn with_nine_ops(horizon: Option<u64>) -> Ex {
    let mut e = executor();
    e.set_final_horizon(horizon);
    for (i, call) in nine_ops().iter().enumerate() {
        final_op(&mut e, i as u32 + 1, i as u64 + 1, call);
    }
    e
}

/// Docs/snapshot-reads.md, "Versions kept": a read before any position
/// sees exactly the final ops before it — deletes included, and the values
/// before them.
#[test]
fn reads_before_every_position_equal_the_replayed_order() {
    let e = with_nine_ops(Some(0));
    let states = states(&BTreeMap::new(), &nine_ops());
    for before in 1..=10 {
        assert_reads(&e, before, &states[before as usize - 1]);
    }
    // Past the last final op the newest final state is read.
    assert_reads(&e, 1_000, &states[9]);
    assert_refused(&e, 0, Some(0));
    let n = e.counters();
    // a: "1", "22", a tombstone; b: "1", a tombstone; c: "1" — each counts
    // its key (1 byte) and value.
    assert_eq!(
        (n.history_versions, n.history_bytes),
        (6, 2 + 3 + 1 + 2 + 1 + 2)
    );
    // c's base is a tombstone, kept for the reads before 9 that see "1".
    assert!(e.keys.contains_key(b"c"));
}

/// A horizon `h` drops every version superseded at or below `h` and
/// nothing else; reads at or below it are refused, those above it still
/// exact. A key whose base is a tombstone is forgotten once its history is.
#[test]
fn the_horizon_drops_exactly_what_it_allows() {
    let mut e = with_nine_ops(Some(0));
    let states = states(&BTreeMap::new(), &nine_ops());
    for h in 0..=10u64 {
        e.set_final_horizon(Some(h));
        check(&e);
        let kept = SUPERSEDED_AT.iter().filter(|s| **s > h).count() as u64;
        assert_eq!(e.counters().history_versions, kept, "horizon {h}");
        for before in 0..=h {
            assert_refused(&e, before, Some(h));
        }
        for before in h + 1..=10 {
            assert_reads(&e, before, &states[before as usize - 1]);
        }
        assert_eq!(e.keys.contains_key(b"c"), h < 9, "c forgotten at 9");
    }
    assert_eq!(e.counters().history_bytes, 0);
    assert_eq!(e.committed_state(), states[9]);
}

/// Versions superseded at or below a horizon set ahead of the final ops
/// are never kept.
#[test]
fn a_horizon_ahead_of_the_final_ops_keeps_nothing_it_covers() {
    let e = with_nine_ops(Some(7));
    // Only c's "1", superseded at 9: b's "1" was superseded by its delete at
    // the horizon (7), so b was forgotten and its write at 8 supersedes
    // nothing; a's versions went at 3 and 4.
    assert_eq!(e.counters().history_versions, 1);
    let states = states(&BTreeMap::new(), &nine_ops());
    for before in 8..=10 {
        assert_reads(&e, before, &states[before as usize - 1]);
    }
    assert_refused(&e, 7, Some(7));
}

/// Versions superseded before the history started were dropped: reads at
/// or below the final frontier of that moment are refused whatever the
/// horizon, those after it exact.
#[test]
fn a_late_history_starts_at_the_final_frontier() {
    let calls = nine_ops();
    let mut e = executor();
    for (i, call) in calls.iter().enumerate().take(4) {
        final_op(&mut e, i as u32 + 1, i as u64 + 1, call);
    }
    e.set_final_horizon(Some(0));
    check(&e);
    for (i, call) in calls.iter().enumerate().skip(4) {
        final_op(&mut e, i as u32 + 1, i as u64 + 1, call);
    }
    let states = states(&BTreeMap::new(), &calls);
    assert_refused(&e, 4, Some(4));
    for before in 5..=10 {
        assert_reads(&e, before, &states[before as usize - 1]);
    }
    // Superseded at 7, 8 and 9: a was forgotten at its delete (4), before
    // the history started, so its write at 6 supersedes nothing.
    assert_eq!(e.counters().history_versions, 3);
}

/// A checkpoint's values count as written before every position; nothing
/// before the checkpoint can be read.
#[test]
fn a_checkpoint_counts_as_before_every_position() {
    let mut e = executor();
    e.set_final_horizon(Some(0));
    let loaded = BTreeMap::from([
        (Bytes::from("a"), Bytes::from("x")),
        (Bytes::from("d"), Bytes::from("y")),
    ]);
    e.load_committed(loaded.clone(), Some(10));
    check(&e);
    let calls = [put("a", "1"), delete("a"), delete("d"), put("d", "2")];
    for (i, call) in calls.iter().enumerate() {
        final_op(&mut e, i as u32 + 1, i as u64 + 11, call);
    }
    let states = states(&loaded, &calls);
    assert_refused(&e, 10, Some(10));
    for before in 11..=15 {
        assert_reads(&e, before, &states[before as usize - 11]);
    }
    let n = e.counters();
    // "x" and "y" from the checkpoint, "1", and the tombstone of d.
    assert_eq!((n.history_versions, n.history_bytes), (4, 2 + 2 + 2 + 1));
}

/// A history started with no horizon answers reads before the first
/// position too: the empty state, or a loaded one that has no committed
/// bound (a bulk load before any op); a horizon set later refuses what is
/// at or below it.
#[test]
fn a_history_without_a_horizon_reads_before_the_first_position() {
    let calls = nine_ops();
    for loaded in [
        BTreeMap::new(),
        BTreeMap::from([(Bytes::from("a"), Bytes::from("x"))]),
    ] {
        let mut e = executor();
        e.load_committed(loaded.clone(), None);
        e.keep_final_history();
        check(&e);
        for (i, call) in calls.iter().enumerate() {
            final_op(&mut e, i as u32 + 1, i as u64 + 1, call);
        }
        let states = states(&loaded, &calls);
        for before in 0..=10 {
            assert_reads(&e, before, &states[(before as usize).max(1) - 1]);
        }
        e.keep_final_history();
        assert_reads(&e, 0, &loaded);
        e.set_final_horizon(Some(2));
        check(&e);
        assert_refused(&e, 2, Some(2));
        assert_reads(&e, 3, &states[2]);
    }
}

/// Off (the default) nothing is kept and every read of the past is refused;
/// turning a history off drops all of it, and the executor is then the one
/// that never kept any: the same counters, keys and committed state.
#[test]
fn without_a_history_nothing_is_kept_and_the_executor_is_unchanged() {
    let plain = with_nine_ops(None);
    assert_refused(&plain, 5, None);
    assert_eq!(plain.counters().history_versions, 0);

    let mut e = with_nine_ops(Some(0));
    assert_ne!(e.counters(), plain.counters());
    e.set_final_horizon(None);
    check(&e);
    assert_refused(&e, 10, None);
    assert_eq!(e.counters(), plain.counters());
    assert_eq!(e.committed_state(), plain.committed_state());
    assert!(!e.keys.contains_key(b"c"), "c's tombstone forgotten");
    let keys = |e: &Ex| {
        let mut k: Vec<Bytes> = e.keys.iter().map(|(k, _)| k.clone()).collect();
        k.sort();
        k
    };
    assert_eq!(keys(&e), keys(&plain));

    let mut basic: BasicEngine<u32, u64> =
        BasicEngine::new(Arc::new(TestProcs::new()), TxnLimits::default());
    basic.set_final_horizon(Some(0));
    assert_eq!(
        basic.read_final_before(b"a", 1),
        Err(BelowHorizon::no_history())
    );
    assert!(BelowHorizon::no_history()
        .to_string()
        .contains("older than the versions kept"));
}

/// The horizon only moves forward while a history is kept.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "final horizon moved back")]
fn a_horizon_moving_back_is_a_caller_bug() {
    let mut e = with_nine_ops(Some(5));
    e.set_final_horizon(Some(4));
}

/// One step of the property test.
#[derive(Clone, Debug)]
enum Step {
    /// A new op on key `KEYS[key]` at a fresh tentative position: put
    /// `value` (0), delete (1) or increment (2).
    Insert {
        key: usize,
        kind: u8,
        value: u8,
        at: u16,
    },
    /// Commit the `n`-th uncommitted op (modulo their number).
    Commit(usize),
    /// Run up to this many tasks, then report what settled.
    Run(usize),
    /// Move the horizon up by this much, to at most two past the final
    /// frontier (applied while a history is kept).
    Horizon(u64),
    /// Turn the history off, or on again at the current horizon.
    Toggle,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        30 => (0..4usize, 0..3u8, 0..3u8, any::<u16>())
            .prop_map(|(key, kind, value, at)| Step::Insert { key, kind, value, at }),
        25 => any::<usize>().prop_map(Step::Commit),
        25 => (1..4usize).prop_map(Step::Run),
        6 => (0..3u64).prop_map(Step::Horizon),
        1 => Just(Step::Toggle),
    ]
}

/// The run of one property case: the executor with a history, a twin that
/// never keeps one, and the model.
struct Case {
    e: Ex,
    twin: Ex,
    /// The calls committed so far, at positions 1, 2, ….
    committed: Vec<ProcCall>,
    /// Ops inserted and not committed: key, call.
    uncommitted: Vec<(u32, ProcCall)>,
    next_key: u32,
    horizon: u64,
    /// Whether the history is on, and the final frontier when it started.
    on: Option<u64>,
}

impl Case {
    fn apply(&mut self, step: Step) {
        match step {
            Step::Insert {
                key,
                kind,
                value,
                at,
            } => {
                let pos = 1_000 + u64::from(at);
                if self.e.order.contains_key(&pos) {
                    return;
                }
                let k = KEYS[key];
                let call = match kind {
                    0 => put(k, &value.to_string()),
                    1 => delete(k),
                    _ => incr(k),
                };
                self.next_key += 1;
                self.e.insert(self.next_key, pos, call.clone());
                self.twin.insert(self.next_key, pos, call.clone());
                self.uncommitted.push((self.next_key, call));
            }
            Step::Commit(n) if !self.uncommitted.is_empty() => {
                let (key, call) = self.uncommitted.remove(n % self.uncommitted.len());
                self.committed.push(call);
                let pos = self.committed.len() as u64;
                self.e.commit(key, pos);
                self.twin.commit(key, pos);
            }
            Step::Commit(_) => {}
            Step::Run(n) => {
                for _ in 0..n {
                    let (a, b) = match (self.e.next_task(), self.twin.next_task()) {
                        (Some(a), Some(b)) => (a, b),
                        (None, None) => break,
                        other => panic!("the twins differ: {other:?}"),
                    };
                    assert_eq!(a.key, b.key, "the twins run the same ops");
                    let (done_a, done_b) = (self.e.run(&a), self.twin.run(&b));
                    self.e.complete(done_a);
                    self.twin.complete(done_b);
                    check(&self.e);
                }
                let (mut a, mut b) = (Vec::new(), Vec::new());
                self.e.drain_settled(&mut a);
                self.twin.drain_settled(&mut b);
                assert_eq!(a, b, "the history changes no outcome");
            }
            Step::Horizon(up) => {
                // Mostly behind the final frontier, as the replica's would
                // be, sometimes a little ahead.
                let frontier = self.e.final_upto.unwrap_or(0);
                self.horizon = self.horizon.max((self.horizon + up).min(frontier + 2));
                if self.on.is_some() {
                    self.e.set_final_horizon(Some(self.horizon));
                }
            }
            Step::Toggle => {
                if self.on.take().is_none() {
                    self.on = Some(self.e.final_upto.unwrap_or(0));
                    self.e.set_final_horizon(Some(self.horizon));
                } else {
                    self.e.set_final_horizon(None);
                }
            }
        }
        check(&self.e);
        self.verify();
    }

    /// Every read of the final state before a position up to the frontier
    /// is the model's, or refused exactly when the history cannot answer;
    /// with the history off the twins are the same executor.
    fn verify(&self) {
        let frontier = self.e.final_upto.unwrap_or(0);
        let states = states(&BTreeMap::new(), &self.committed[..frontier as usize]);
        for before in 0..=frontier + 1 {
            match self.on {
                None => assert_refused(&self.e, before, None),
                Some(start) if before <= self.horizon.max(start) => {
                    let horizon = self.horizon.max(start);
                    assert_refused(&self.e, before, Some(horizon));
                }
                Some(_) => assert_reads(&self.e, before, &states[before.max(1) as usize - 1]),
            }
        }
        assert_eq!(self.e.committed_state(), self.twin.committed_state());
        // Versions alive may differ while a live version or reader holds a
        // key the history kept with a tombstone base (the twin forgot it).
        let (mut a, mut b) = (self.e.counters(), self.twin.counters());
        (a.versions_alive, b.versions_alive) = (0, 0);
        if self.on.is_none() {
            assert_eq!(a, b);
        }
    }
}

proptest! {
    /// Random ops committed in random orders, run in between, with the
    /// horizon moving and the history turned off and on: every read of the
    /// past equals the model, and the history changes nothing else.
    #[test]
    fn reads_of_the_past_match_the_model(
        steps in proptest::collection::vec(step(), 0..150),
        start_on in proptest::bool::weighted(0.75),
    ) {
        let mut case = Case {
            e: executor(),
            twin: executor(),
            committed: Vec::new(),
            uncommitted: Vec::new(),
            next_key: 0,
            horizon: 0,
            on: None,
        };
        if start_on {
            case.apply(Step::Toggle);
        }
        for s in steps {
            case.apply(s);
        }
        while !case.uncommitted.is_empty() {
            case.apply(Step::Commit(0));
        }
        case.apply(Step::Run(usize::MAX));
        case.apply(Step::Horizon(0));
        if case.on.is_some() {
            case.apply(Step::Toggle);
        }
        // Everything final and the history off: the same executor.
        prop_assert_eq!(case.e.ops_alive(), 0);
        prop_assert_eq!(case.e.counters(), case.twin.counters());
    }
}
