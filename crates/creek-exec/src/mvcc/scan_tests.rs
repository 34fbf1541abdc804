//! Range scans in the multiversion executor: phantom protection (DESIGN
//! §14) by targeted cases, and a property test against the undo-log engine
//! (DESIGN §3, test oracle) on random event sequences mixing scans with
//! writes into their ranges, reorders, removals and commits.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use super::*;
use crate::basic::MapSnapshot as MapSnap;
use crate::basic::{replay_from, BasicEngine};
use crate::testkit::TestProcs;
use crate::txn::{Abort, Txn};
use creek_types::value::{decode_args_shared, encode_args, Value};

type Ex = MvccExecutor<u32, u64>;

/// `test.scan(from, to, limit, out, own_put, own_delete)`: put `own_put`
/// and delete `own_delete` first (empty: skip), scan (from the end down
/// when `limit` is negative, `Txn::scan_rev`), write the result as
/// `count|k=v,…` under `out` (empty: skip) and answer the same text.
fn scan_proc(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = decode_args_shared(raw).map_err(|e| Abort::new(format!("{e:?}")))?;
    let bad = || Abort::new("test.scan: bad arguments");
    let [from, to, limit, out, own_put, own_delete] = args.as_slice() else {
        return Err(bad());
    };
    let bytes = |v: &Value| v.as_bytes().cloned().ok_or_else(bad);
    let (from, to, out) = (bytes(from)?, bytes(to)?, bytes(out)?);
    let (own_put, own_delete) = (bytes(own_put)?, bytes(own_delete)?);
    let limit = limit.as_int().ok_or_else(bad)?;
    if !own_put.is_empty() {
        txn.put(own_put, Bytes::from_static(b"own"));
    }
    if !own_delete.is_empty() {
        txn.delete(own_delete);
    }
    let n = usize::try_from(limit.unsigned_abs()).unwrap_or(0);
    let found = if limit < 0 {
        txn.scan_rev(&from, &to, n)
    } else {
        txn.scan(&from, &to, n)
    };
    let mut text = format!("{}|", found.len()).into_bytes();
    for (k, v) in &found {
        text.extend_from_slice(k);
        text.push(b'=');
        text.extend_from_slice(v);
        text.push(b',');
    }
    let text = Bytes::from(text);
    if !out.is_empty() {
        txn.put(out, text.clone());
    }
    Ok(text)
}

fn registry() -> Arc<TestProcs> {
    let mut r = TestProcs::new();
    r.register("test.scan", false, scan_proc);
    Arc::new(r)
}

fn executor() -> Ex {
    let mut e = MvccExecutor::new(registry(), TxnLimits::default());
    e.set_schedule(Schedule::LOWEST_FIRST);
    e
}

fn scan_into(
    from: &str,
    to: &str,
    limit: i64,
    out: &str,
    own_put: &str,
    own_delete: &str,
) -> ProcCall {
    let args = [
        Value::from(from),
        Value::from(to),
        Value::Int(limit),
        Value::from(out),
        Value::from(own_put),
        Value::from(own_delete),
    ];
    ProcCall::new("test.scan", encode_args(&args))
}

fn scan(from: &str, to: &str, limit: i64) -> ProcCall {
    scan_into(from, to, limit, "", "", "")
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

/// The latest outcome reported for `key`, as text.
fn answer(e: &mut Ex, key: u32) -> Option<String> {
    let mut out = Vec::new();
    e.drain_settled(&mut out);
    check(e);
    out.into_iter()
        .rev()
        .find(|s| s.key == key)
        .map(|s| String::from_utf8_lossy(&s.outcome.unwrap()).into_owned())
}

/// A store holding `keys` (each with value "v"), written by ops 101, 102, …
/// at positions 1, 2, …, with a scanner of `[a, z)` at position 100 whose
/// first answer is returned.
fn with_scanner(keys: &[&str], limit: i64) -> (Ex, String) {
    let mut e = executor();
    for (i, k) in keys.iter().enumerate() {
        e.insert(101 + i as u32, 1 + i as u64, put(k, "v"));
    }
    e.insert(1, 100, scan("a", "z", limit));
    run_all(&mut e);
    let first = answer(&mut e, 1).unwrap();
    (e, first)
}

/// Paper §4.4 / DESIGN §14: a key inserted inside the range before the
/// scanner is a phantom; the scanner reruns and sees it. A key inserted
/// after the scanner changes nothing.
#[test]
fn phantom_insert_before_the_scanner_invalidates_it() {
    let (mut e, first) = with_scanner(&["b"], 10);
    assert_eq!(first, "1|b=v,");
    e.insert(2, 50, put("c", "v"));
    run_all(&mut e);
    assert_eq!(e.counters().invalidations, 1);
    assert_eq!(answer(&mut e, 1).unwrap(), "2|b=v,c=v,");

    e.insert(3, 150, put("d", "v"));
    run_all(&mut e);
    assert_eq!(e.counters().invalidations, 1, "a later write is not seen");
}

/// A delete inside the range before the scanner hides a returned key; when
/// the delete goes away (removed, then moved after the scanner) the key
/// comes back — the second case through the range alone, since the scanner
/// returned nothing to read.
#[test]
fn delete_inside_the_range_invalidates_and_its_removal_too() {
    let (mut e, _) = with_scanner(&["b", "c"], 10);
    e.insert(2, 50, delete("b"));
    run_all(&mut e);
    assert_eq!(e.counters().invalidations, 1);
    assert_eq!(answer(&mut e, 1).unwrap(), "1|c=v,");

    e.insert(3, 60, delete("c"));
    run_all(&mut e);
    assert_eq!(answer(&mut e, 1).unwrap(), "0|");
    let before = e.counters().invalidations;
    e.remove(3);
    check(&e);
    assert_eq!(e.counters().invalidations, before + 1, "c reappears");
    run_all(&mut e);
    assert_eq!(answer(&mut e, 1).unwrap(), "1|c=v,");

    e.reposition(2, 200);
    check(&e);
    run_all(&mut e);
    assert_eq!(answer(&mut e, 1).unwrap(), "2|b=v,c=v,");
}

/// Writes outside the range, or beyond the last key returned when the
/// limit was reached, never invalidate the scanner; one inside does.
#[test]
fn writes_outside_the_range_or_past_a_full_page_do_not_invalidate() {
    let (mut e, first) = with_scanner(&["b", "c", "d"], 2);
    assert_eq!(first, "2|b=v,c=v,");
    e.insert(2, 50, put("zz", "v"));
    e.insert(3, 51, put("A", "v"));
    e.insert(4, 52, put("e", "v"));
    e.insert(5, 53, delete("d"));
    e.insert(6, 54, put("c\0", "v"));
    run_all(&mut e);
    let n = e.counters();
    assert_eq!((n.invalidations, n.reexecutions), (0, 0));

    e.insert(7, 55, put("bb", "v"));
    run_all(&mut e);
    assert_eq!(e.counters().invalidations, 1);
    assert_eq!(answer(&mut e, 1).unwrap(), "2|b=v,bb=v,");
}

/// A reverse scan returns the last keys of its range, descending; writes
/// below the least key of a full page do not invalidate it, a write
/// inside the part it covered does.
#[test]
fn a_reverse_scan_covers_from_its_least_key_up() {
    let (mut e, first) = with_scanner(&["b", "c", "d"], -2);
    assert_eq!(first, "2|d=v,c=v,");
    e.insert(2, 50, put("bb", "v"));
    e.insert(3, 51, delete("b"));
    e.insert(4, 52, put("zz", "v"));
    run_all(&mut e);
    let n = e.counters();
    assert_eq!((n.invalidations, n.reexecutions), (0, 0));

    e.insert(5, 53, put("cc", "v"));
    run_all(&mut e);
    assert_eq!(e.counters().invalidations, 1);
    assert_eq!(answer(&mut e, 1).unwrap(), "2|d=v,cc=v,");
    e.insert(6, 54, delete("d"));
    run_all(&mut e);
    assert_eq!(answer(&mut e, 1).unwrap(), "2|cc=v,c=v,");
}

/// A writer moved across the scanner takes its phantom with it.
#[test]
fn reposition_of_a_writer_across_the_scanner_invalidates_it() {
    let (mut e, _) = with_scanner(&["b"], 10);
    e.insert(2, 50, put("c", "v"));
    run_all(&mut e);
    assert_eq!(answer(&mut e, 1).unwrap(), "2|b=v,c=v,");
    e.reposition(2, 300);
    check(&e);
    run_all(&mut e);
    assert_eq!(answer(&mut e, 1).unwrap(), "1|b=v,");
    // Moving the scanner itself ahead of a writer of its range too.
    e.reposition(1, 400);
    check(&e);
    run_all(&mut e);
    assert_eq!(answer(&mut e, 1).unwrap(), "2|b=v,c=v,");
}

/// A scan that ran on a snapshot the order changed under is rejected when
/// it completes, even though no key it returned changed.
#[test]
fn a_running_scan_whose_range_changed_is_rejected() {
    let mut e = executor();
    e.insert(1, 100, scan("a", "z", 10));
    let task = e.next_task().unwrap();
    let stale = e.run(&task);
    e.insert(2, 50, put("c", "v"));
    run_all(&mut e); // runs op 2 only
    e.complete(stale);
    check(&e);
    assert_eq!(e.counters().conflicts, 1);
    run_all(&mut e);
    assert_eq!(answer(&mut e, 1).unwrap(), "1|c=v,");
}

/// A committed scanner is garbage collected with its range registration;
/// the ordered index stays in step with the keys.
#[test]
fn commit_collects_range_registrations() {
    let (mut e, _) = with_scanner(&["b", "c"], 10);
    assert_eq!(e.scanners.len(), 1);
    for (i, key) in [101, 102, 1].into_iter().enumerate() {
        e.commit(key, i as u64);
        check(&e);
    }
    run_all(&mut e);
    let _ = answer(&mut e, 1);
    assert!(e.scanners.is_empty());
    assert_eq!(e.ops_alive(), 0);
}

/// A transaction's own writes merge into its scan: own puts appear (new or
/// replacing), own deletes hide, and the recorded range is the snapshot's
/// part of it.
#[test]
fn own_writes_merge_into_the_scan() {
    let snap = MapSnap(
        [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"), ("f", "6")]
            .into_iter()
            .map(|(k, v)| (Bytes::from(k), Bytes::from(v)))
            .collect(),
    );
    let mut txn = Txn::new(&snap, TxnLimits::default(), false);
    txn.put("b", "20");
    txn.delete("c");
    txn.put("bb", "5");
    txn.put("e", "9");
    let pairs = |v: Vec<(Bytes, Bytes)>| -> Vec<(String, String)> {
        v.into_iter()
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect()
    };
    let s = |x: &str| x.to_owned();
    let page = txn.scan(b"a", b"f", 3);
    assert_eq!(
        pairs(page),
        [(s("a"), s("1")), (s("b"), s("20")), (s("bb"), s("5"))]
    );
    let all = txn.scan(b"a", b"z", 100);
    let want = [
        ("a", "1"),
        ("b", "20"),
        ("bb", "5"),
        ("d", "4"),
        ("e", "9"),
        ("f", "6"),
    ];
    assert_eq!(pairs(all), want.map(|(k, v)| (s(k), s(v))));
    assert!(txn.scan(b"c", b"c", 10).is_empty(), "empty range");
    assert!(txn.scan(b"d", b"a", 10).is_empty(), "inverted range");
    assert!(txn.scan(b"a", b"z", 0).is_empty(), "zero limit");

    let ex = txn.finish(Ok(Bytes::new()));
    assert_eq!(
        ex.scans.len(),
        2,
        "only the scans that could return something"
    );
    let full = &ex.scans[0];
    assert_eq!(
        (full.from.as_ref(), full.to.as_ref()),
        (&b"a"[..], &b"bb\0"[..])
    );
    assert_eq!(full.keys, [Bytes::from("a"), Bytes::from("b")]);
    let open = &ex.scans[1];
    assert_eq!(open.to.as_ref(), b"z");
    assert_eq!(open.keys.len(), 5, "the hidden c and replaced b included");
    let read: Vec<&[u8]> = ex.reads.iter().map(|(k, _)| k.as_ref()).collect();
    assert_eq!(
        read,
        [&b"a"[..], b"d", b"f"],
        "own keys are not snapshot reads"
    );
}

/// A limit above `scan_items_max` is clamped to it.
#[test]
fn scan_limit_is_clamped() {
    let snap = MapSnap(
        (0..10u8)
            .map(|i| (Bytes::from(vec![b'k', i]), Bytes::from("v")))
            .collect(),
    );
    let limits = TxnLimits {
        scan_items_max: 4,
        ..TxnLimits::default()
    };
    let mut txn = Txn::new(&snap, limits, true);
    assert_eq!(txn.scan(b"k", b"l", 1_000).len(), 4);
}

// ---- property test against the undo-log engine ----

const LETTERS: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];

fn letter(i: u8) -> &'static str {
    LETTERS[usize::from(i) % LETTERS.len()]
}

/// A letter or nothing (index past the letters).
fn maybe_letter(i: u8) -> &'static str {
    LETTERS.get(usize::from(i)).copied().unwrap_or("")
}

#[derive(Clone, Debug)]
enum Call {
    Put(u8, u8),
    Delete(u8),
    Scan {
        from: u8,
        to: u8,
        limit: i8,
        out: u8,
        own_put: u8,
        own_delete: u8,
    },
}

impl Call {
    fn to_call(&self) -> ProcCall {
        match *self {
            Call::Put(k, v) => put(letter(k), ["x", "y", "z"][usize::from(v % 3)]),
            Call::Delete(k) => delete(letter(k)),
            Call::Scan {
                from,
                to,
                limit,
                out,
                own_put,
                own_delete,
            } => scan_into(
                letter(from),
                letter(to),
                i64::from(limit),
                maybe_letter(out),
                maybe_letter(own_put),
                maybe_letter(own_delete),
            ),
        }
    }
}

#[derive(Clone, Debug)]
enum Event {
    /// A new op at a tentative place.
    Insert(Call, u16),
    /// Move a tentative op (by index among them).
    Reposition(usize, u16),
    /// Commit a tentative op (by index) next in the committed order.
    Commit(usize),
    /// Forget a tentative op.
    Remove(usize),
    /// Hand out and run up to this many tasks (completed later).
    Start(usize),
    /// Complete one of the tasks run (by index).
    Finish(usize),
    /// Complete everything, run both engines to rest and compare answers.
    Settle,
}

fn call_strategy() -> impl Strategy<Value = Call> {
    prop_oneof![
        3 => (0u8..7, 0u8..3).prop_map(|(k, v)| Call::Put(k, v)),
        2 => (0u8..7).prop_map(Call::Delete),
        3 => (0u8..7, 0u8..7, -4i8..5, 0u8..14, 0u8..14, 0u8..14).prop_map(
            |(from, to, limit, out, own_put, own_delete)| Call::Scan {
                from,
                to,
                limit,
                out,
                own_put,
                own_delete,
            }
        ),
    ]
}

fn event_strategy() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => (call_strategy(), any::<u16>()).prop_map(|(c, p)| Event::Insert(c, p)),
        2 => (any::<usize>(), any::<u16>()).prop_map(|(i, p)| Event::Reposition(i, p)),
        1 => any::<usize>().prop_map(Event::Commit),
        1 => any::<usize>().prop_map(Event::Remove),
        2 => (1usize..4).prop_map(Event::Start),
        2 => any::<usize>().prop_map(Event::Finish),
        1 => Just(Event::Settle),
    ]
}

/// Both engines, driven by the same events.
struct Pair {
    mvcc: Ex,
    basic: BasicEngine<u32, u64>,
    /// Tentative ops and their positions.
    tentative: BTreeMap<u32, u64>,
    /// Committed ops in the committed order, with their calls.
    committed: Vec<(u32, ProcCall)>,
    calls: HashMap<u32, ProcCall>,
    /// Completions of the multiversion executor not yet handed back.
    running: Vec<Completion<u32>>,
    next_key: u32,
    next_committed: u64,
    /// Latest outcome reported per op, by each engine.
    mvcc_answers: HashMap<u32, Outcome>,
    basic_answers: HashMap<u32, Outcome>,
}

impl Pair {
    fn new(initial: &BTreeMap<Bytes, Bytes>, schedule: Schedule) -> Self {
        let mut mvcc = MvccExecutor::new(registry(), TxnLimits::default());
        mvcc.set_schedule(schedule);
        mvcc.load_committed(initial.clone(), None);
        let mut basic = BasicEngine::new(registry(), TxnLimits::default());
        basic.load_committed(initial.clone());
        Pair {
            mvcc,
            basic,
            tentative: BTreeMap::new(),
            committed: Vec::new(),
            calls: HashMap::new(),
            running: Vec::new(),
            next_key: 1,
            next_committed: 1,
            mvcc_answers: HashMap::new(),
            basic_answers: HashMap::new(),
        }
    }

    fn nth_tentative(&self, i: usize) -> Option<u32> {
        let n = self.tentative.len();
        (n > 0).then(|| self.tentative.keys().nth(i % n).copied())?
    }

    fn apply(&mut self, step: u64, event: &Event) {
        // Tentative places are unique (the step is in the low digits) and
        // above every committed one.
        let place = |p: u16| 1_000_000 + u64::from(p) * 1_000 + step;
        match event {
            Event::Insert(call, p) => {
                let (key, call) = (self.next_key, call.to_call());
                self.next_key += 1;
                self.tentative.insert(key, place(*p));
                self.calls.insert(key, call.clone());
                self.mvcc.insert(key, place(*p), call.clone());
                self.basic.insert(key, place(*p), call);
            }
            Event::Reposition(i, p) => {
                if let Some(key) = self.nth_tentative(*i) {
                    self.tentative.insert(key, place(*p));
                    self.mvcc.reposition(key, place(*p));
                    self.basic.reposition(key, place(*p));
                }
            }
            Event::Commit(i) => {
                if let Some(key) = self.nth_tentative(*i) {
                    self.commit(key);
                }
            }
            Event::Remove(i) => {
                if let Some(key) = self.nth_tentative(*i) {
                    // Answers reported before the removal are forgotten with it.
                    self.drain_answers();
                    self.tentative.remove(&key);
                    self.mvcc.remove(key);
                    self.basic.remove(key);
                    self.mvcc_answers.remove(&key);
                    self.basic_answers.remove(&key);
                }
            }
            Event::Start(n) => {
                for _ in 0..*n {
                    let Some(task) = self.mvcc.next_task() else {
                        break;
                    };
                    let done = self.mvcc.run(&task);
                    self.running.push(done);
                }
            }
            Event::Finish(i) => {
                if !self.running.is_empty() {
                    let done = self.running.remove(i % self.running.len());
                    self.mvcc.complete(done);
                }
            }
            Event::Settle => self.settle(),
        }
        check(&self.mvcc);
    }

    fn commit(&mut self, key: u32) {
        self.tentative.remove(&key);
        let pos = self.next_committed;
        self.next_committed += 1;
        if let Some(call) = self.calls.get(&key) {
            self.committed.push((key, call.clone()));
        }
        self.mvcc.commit(key, pos);
        self.basic.commit(key, pos);
    }

    /// Run both engines to rest and compare what each reported last for
    /// every op still known.
    fn settle(&mut self) {
        for done in std::mem::take(&mut self.running) {
            self.mvcc.complete(done);
            check(&self.mvcc);
        }
        run_all(&mut self.mvcc);
        while let Some(task) = self.basic.next_task() {
            let done = self.basic.run(&task);
            self.basic.complete(done);
        }
        self.drain_answers();
        assert_eq!(self.mvcc_answers, self.basic_answers, "answers differ");
    }

    /// Take the answers both engines reported so far.
    fn drain_answers(&mut self) {
        let mut out = Vec::new();
        self.mvcc.drain_settled(&mut out);
        for s in out.drain(..) {
            self.mvcc_answers.insert(s.key, s.outcome);
        }
        self.basic.drain_settled(&mut out);
        for s in out {
            self.basic_answers.insert(s.key, s.outcome);
        }
        check(&self.mvcc);
    }

    /// Commit every tentative op in its current order, settle, and compare
    /// with a sequential replay of the committed order.
    fn finish(mut self, initial: BTreeMap<Bytes, Bytes>) {
        let mut rest: Vec<(u64, u32)> = self.tentative.iter().map(|(k, p)| (*p, *k)).collect();
        rest.sort_unstable();
        for (_, key) in rest {
            self.commit(key);
        }
        self.settle();
        assert_eq!(self.mvcc.ops_alive(), 0);
        assert!(
            self.mvcc.scanners.is_empty(),
            "range registrations collected"
        );
        let state = self.mvcc.committed_state();
        assert_eq!(state, self.basic.committed_state(), "final states differ");
        let calls: Vec<&ProcCall> = self.committed.iter().map(|(_, c)| c).collect();
        let (outcomes, replayed) = replay_from(&*registry(), TxnLimits::default(), initial, calls);
        assert_eq!(state, replayed, "final state is not the sequential one");
        for ((key, _), want) in self.committed.iter().zip(outcomes) {
            assert_eq!(self.mvcc_answers.get(key), Some(&want), "op {key}");
        }
    }
}

fn initial_strategy() -> impl Strategy<Value = BTreeMap<Bytes, Bytes>> {
    proptest::collection::btree_map(0u8..7, 0u8..3, 0..4).prop_map(|m| {
        m.into_iter()
            .map(|(k, v)| (Bytes::from(letter(k)), Bytes::from(format!("i{v}"))))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// DESIGN §3 (test oracle) and §14 (phantoms): on random event
    /// sequences, the multiversion executor answers every op as the undo-log
    /// engine does, and ends in the sequential state of the committed order.
    #[test]
    fn scans_agree_with_the_basic_engine(
        initial in initial_strategy(),
        schedule in 0usize..Schedule::NAMED.len(),
        events in proptest::collection::vec(event_strategy(), 0..60),
    ) {
        let mut pair = Pair::new(&initial, Schedule::NAMED[schedule].1);
        for (step, event) in events.iter().enumerate() {
            pair.apply(step as u64, event);
        }
        pair.finish(initial);
    }
}
