//! Unit tests of the multiversion executor driven through the [`Engine`]
//! trait with `u32` op keys and `u64` positions. The invariants are checked
//! after every step.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::basic::replay;
use crate::testkit::TestProcs;
use creek_types::value::{encode_args, Value};

type Ex = MvccExecutor<u32, u64>;

/// The lowest-first executor without held reruns (tests of the schedule set
/// their own).
fn executor() -> Ex {
    let mut e = MvccExecutor::new(Arc::new(TestProcs::new()), TxnLimits::default());
    e.set_schedule(Schedule::LOWEST_FIRST);
    e
}

fn call(name: &str, args: &[Value]) -> ProcCall {
    ProcCall::new(name, encode_args(args))
}

fn incr(key: &str, delta: i64) -> ProcCall {
    call("kv.incr", &[Value::from(key), Value::Int(delta)])
}

fn put(key: &str, value: &str) -> ProcCall {
    call("kv.put", &[Value::from(key), Value::from(value)])
}

fn get(key: &str) -> ProcCall {
    call("kv.get", &[Value::from(key)])
}

fn delete(key: &str) -> ProcCall {
    call("kv.delete", &[Value::from(key)])
}

fn ok(v: impl Into<Value>) -> Outcome {
    Ok(v.into().encode())
}

fn check(e: &Ex) {
    if let Err(broken) = e.check_invariants() {
        panic!("invariant broken: {broken}");
    }
}

fn insert(e: &mut Ex, key: u32, pos: u64, call: &ProcCall) {
    e.insert(key, pos, call.clone());
    check(e);
}

fn reposition(e: &mut Ex, key: u32, pos: u64) {
    e.reposition(key, pos);
    check(e);
}

fn commit(e: &mut Ex, key: u32, pos: u64) {
    e.commit(key, pos);
    check(e);
}

/// Hand out, run and complete tasks one at a time until none is ready.
fn run_all(e: &mut Ex) {
    while let Some(task) = e.next_task() {
        check(e);
        let done = e.run(&task);
        e.complete(done);
        check(e);
    }
}

fn settled(e: &mut Ex) -> Vec<Settled<u32>> {
    let mut out = Vec::new();
    e.drain_settled(&mut out);
    check(e);
    out
}

fn tentative(key: u32, outcome: Outcome) -> Settled<u32> {
    Settled {
        key,
        outcome,
        committed: false,
        executions: 1,
    }
}

/// `s` after its op ran twice (one re-execution).
fn rerun(s: Settled<u32>) -> Settled<u32> {
    Settled { executions: 2, ..s }
}

fn committed(key: u32, outcome: Outcome) -> Settled<u32> {
    Settled {
        key,
        outcome,
        committed: true,
        executions: 1,
    }
}

/// Sequential execution of `calls` in order: outcomes and final state.
fn sequential(calls: &[&ProcCall]) -> (Vec<Outcome>, BTreeMap<Bytes, Bytes>) {
    replay(
        &TestProcs::new(),
        TxnLimits::default(),
        calls.iter().copied(),
    )
}

/// Ops on disjoint keys never re-execute, whatever order they arrive in.
#[test]
fn disjoint_keys_inserted_out_of_order_never_reexecute() {
    let mut e = executor();
    for (key, pos, k) in [(1, 10, "a"), (2, 20, "b"), (3, 30, "c")] {
        insert(&mut e, key, pos, &incr(k, 1));
    }
    run_all(&mut e);
    let want: Vec<_> = (1..=3).map(|k| tentative(k, ok(1))).collect();
    assert_eq!(settled(&mut e), want);

    insert(&mut e, 4, 15, &incr("d", 1));
    run_all(&mut e);
    assert_eq!(settled(&mut e), [tentative(4, ok(1))]);
    let n = e.counters();
    assert_eq!((n.ops, n.executions), (4, 4), "one execution per op");
    assert_eq!((n.reexecutions, n.invalidations, n.conflicts), (0, 0, 0));
}

/// Every op increments one hot key: an op inserted at the front forces
/// each later op to run once more, and no more than that.
#[test]
fn hot_key_front_insert_reexecutes_each_later_op_once() {
    let mut e = executor();
    let bump = incr("h", 1);
    for key in 1..=4 {
        insert(&mut e, key, u64::from(key) * 10, &bump);
    }
    run_all(&mut e);
    assert_eq!(settled(&mut e).len(), 4);

    let front = incr("h", 100);
    insert(&mut e, 5, 5, &front);
    run_all(&mut e);
    let n = e.counters();
    assert_eq!((n.executions, n.reexecutions, n.invalidations), (9, 4, 4));

    let (outcomes, _) = sequential(&[&front, &bump, &bump, &bump, &bump]);
    let order = [5, 1, 2, 3, 4];
    let want: Vec<_> = order
        .iter()
        .zip(outcomes)
        .map(|(k, o)| match k {
            5 => tentative(*k, o),
            _ => rerun(tentative(*k, o)), // each once more, after 5's insert
        })
        .collect();
    assert_eq!(settled(&mut e), want);
    assert_eq!(want[4].outcome, ok(104));
}

/// Two tasks on one key run concurrently from the same snapshot; whichever
/// completes first, the executor catches the conflict and the results end up
/// those of sequential execution. The stale result is never reported.
#[test]
fn concurrent_tasks_on_one_key_are_validated() {
    for later_first in [true, false] {
        let mut e = executor();
        insert(&mut e, 1, 1, &incr("k", 1));
        insert(&mut e, 2, 2, &incr("k", 10));
        let t1 = e.next_task().unwrap();
        let t2 = e.next_task().unwrap();
        assert_eq!((t1.key, t2.key, e.running()), (1, 2, 2));
        let (d1, d2) = (e.run(&t1), e.run(&t2));
        assert_eq!(
            (&d1.executed.outcome, &d2.executed.outcome),
            (&ok(1), &ok(10))
        );
        let (first, second) = if later_first { (d2, d1) } else { (d1, d2) };
        e.complete(first);
        check(&e);
        if later_first {
            assert!(settled(&mut e).is_empty(), "op 1 is not installed yet");
        }
        e.complete(second);
        check(&e);
        let n = e.counters();
        assert!(n.conflicts + n.invalidations > 0, "conflict missed: {n:?}");
        run_all(&mut e);
        let want = [tentative(1, ok(1)), rerun(tentative(2, ok(11)))];
        assert_eq!(settled(&mut e), want, "later_first: {later_first}");
        assert_eq!((e.running(), e.counters().executions), (0, 3));
    }
}

/// Moving a writer past its reader invalidates the reader, which reruns
/// and no longer sees the write.
#[test]
fn reposition_across_a_writer_invalidates_its_reader() {
    let mut e = executor();
    insert(&mut e, 1, 10, &put("k", "v"));
    insert(&mut e, 2, 20, &get("k"));
    run_all(&mut e);
    let want = [tentative(1, ok(Value::Nil)), tentative(2, ok("v"))];
    assert_eq!(settled(&mut e), want);

    reposition(&mut e, 1, 30);
    assert_eq!(e.counters().invalidations, 1);
    run_all(&mut e);
    assert_eq!(e.counters().reexecutions, 1, "only the reader reruns");
    assert_eq!(settled(&mut e), [rerun(tentative(2, ok(Value::Nil)))]);
}

/// A move that crosses no op, or only ops that share no key with the moved
/// one, re-keys versions and readers without invalidating anything.
#[test]
fn reposition_across_nothing_relevant_only_rekeys() {
    let mut e = executor();
    insert(&mut e, 1, 10, &put("k", "v"));
    insert(&mut e, 2, 12, &incr("other", 1));
    insert(&mut e, 3, 20, &get("k"));
    run_all(&mut e);
    assert_eq!(settled(&mut e).len(), 3);

    reposition(&mut e, 3, 25); // crosses nothing
    reposition(&mut e, 1, 15); // crosses op 2, which does not touch k
    reposition(&mut e, 2, 5); // crosses nothing
    let n = e.counters();
    assert_eq!((n.invalidations, n.executions), (0, 3));
    assert!(e.next_task().is_none());
    assert!(settled(&mut e).is_empty());

    insert(&mut e, 4, 30, &get("k"));
    run_all(&mut e);
    assert_eq!(settled(&mut e), [tentative(4, ok("v"))]);
}

/// Committing the settled prefix reports each op once, in order, as final;
/// superseded versions and a trailing tombstone are collected.
#[test]
fn commit_reports_each_op_once_and_collects_garbage() {
    let mut e = executor();
    let calls = [
        put("k", "1"),
        put("k", "2"),
        get("k"),
        put("t", "x"),
        delete("t"),
        incr("n", 1),
    ];
    for (i, c) in calls.iter().enumerate() {
        insert(&mut e, i as u32 + 1, (i as u64 + 1) * 10, c);
    }
    run_all(&mut e);
    assert_eq!(settled(&mut e).len(), 6);
    assert_eq!(e.counters().versions_alive, 5);

    for key in 1..=3 {
        commit(&mut e, key, u64::from(key));
    }
    assert_eq!(e.counters().versions_alive, 4, "k keeps only its newest");
    for key in 4..=6 {
        commit(&mut e, key, u64::from(key));
    }
    let (outcomes, state) = sequential(&calls.iter().collect::<Vec<_>>());
    let want: Vec<_> = (1..=6)
        .zip(outcomes)
        .map(|(k, o)| committed(k, o))
        .collect();
    assert_eq!(settled(&mut e), want);
    assert!(settled(&mut e).is_empty(), "reported exactly once");
    assert_eq!(
        e.counters().versions_alive,
        2,
        "one per live key; t is gone"
    );
    assert_eq!(e.ops_alive(), 0);
    assert_eq!(e.committed_state(), state);
}

/// Committing an op ahead of a tentative writer it had read moves it before
/// the write: it reruns and its final result ignores the write.
#[test]
fn commit_ahead_of_a_tentative_writer_reruns_the_reader() {
    let mut e = executor();
    insert(&mut e, 1, 10, &put("k", "v"));
    insert(&mut e, 2, 20, &get("k"));
    run_all(&mut e);
    assert_eq!(settled(&mut e).len(), 2);

    commit(&mut e, 2, 1);
    assert_eq!(e.counters().invalidations, 1);
    run_all(&mut e);
    assert_eq!(settled(&mut e), [rerun(committed(2, ok(Value::Nil)))]);
    assert!(e.committed_state().is_empty(), "the put is still tentative");
    commit(&mut e, 1, 2);
    assert_eq!(settled(&mut e), [committed(1, ok(Value::Nil))]);
    let state = e.committed_state();
    assert_eq!(state.get(&b"k"[..]).map(|v| &v[..]), Some(&b"v"[..]));
    assert_eq!(e.ops_alive(), 0);
}

/// An op committed before it ever ran is reported once, as final only.
#[test]
fn op_committed_before_running_is_reported_only_as_final() {
    let mut e = executor();
    insert(&mut e, 1, 10, &incr("a", 1));
    insert(&mut e, 2, 20, &incr("a", 1));
    commit(&mut e, 1, 1);
    assert!(settled(&mut e).is_empty());
    run_all(&mut e);
    // (Final and tentative reports are not ordered with respect to each other.)
    let mut got = settled(&mut e);
    got.sort_by_key(|s| s.key);
    assert_eq!(got, [committed(1, ok(1)), tentative(2, ok(2))]);
}

/// Removing an installed read-only op (an answered local read) disturbs
/// nothing else: no rerun, no report, the same later snapshots.
#[test]
fn remove_of_an_installed_read_keeps_everything_else() {
    let mut e = executor();
    insert(&mut e, 1, 10, &put("k", "a"));
    insert(&mut e, 2, 20, &get("k"));
    insert(&mut e, 3, 30, &put("k", "b"));
    run_all(&mut e);
    assert_eq!(settled(&mut e).len(), 3);

    e.remove(2);
    check(&e);
    assert_eq!(e.ops_alive(), 2);
    assert!(e.next_task().is_none(), "nothing to rerun");
    assert!(settled(&mut e).is_empty());
    insert(&mut e, 4, 25, &get("k"));
    run_all(&mut e);
    assert_eq!(settled(&mut e), [tentative(4, ok("a"))]);
    assert_eq!(e.counters().executions, 4);
    for (key, pos) in [(1, 1), (4, 2), (3, 3)] {
        commit(&mut e, key, pos);
    }
    let keys: Vec<u32> = settled(&mut e).iter().map(|s| s.key).collect();
    assert_eq!(keys, [1, 4, 3]);
}

/// A task whose snapshot changes while it runs (its writer moves past it,
/// or it moves before its writer) is rejected at completion and rerun.
#[test]
fn task_whose_snapshot_moves_while_running_is_rerun() {
    for move_reader in [false, true] {
        let mut e = executor();
        insert(&mut e, 1, 10, &put("k", "v"));
        insert(&mut e, 2, 20, &get("k"));
        let t1 = e.next_task().unwrap();
        let done = e.run(&t1);
        e.complete(done);
        let t2 = e.next_task().unwrap();
        let done = e.run(&t2);
        assert_eq!(done.executed.outcome, ok("v"));
        if move_reader {
            reposition(&mut e, 2, 5);
        } else {
            reposition(&mut e, 1, 30);
        }
        e.complete(done);
        check(&e);
        assert_eq!(e.counters().conflicts, 1, "move_reader: {move_reader}");
        run_all(&mut e);
        let mut got = settled(&mut e);
        got.sort_by_key(|s| s.key);
        assert_eq!(
            got,
            [
                tentative(1, ok(Value::Nil)),
                rerun(tentative(2, ok(Value::Nil)))
            ]
        );
    }
}

/// A removed op whose task is still out: its completion is discarded.
#[test]
fn completion_of_a_removed_op_is_stale() {
    let mut e = executor();
    insert(&mut e, 1, 10, &get("k"));
    let task = e.next_task().unwrap();
    e.remove(1);
    check(&e);
    let done = e.run(&task);
    e.complete(done);
    check(&e);
    assert_eq!((e.counters().stale, e.running(), e.ops_alive()), (1, 0, 0));
    assert!(settled(&mut e).is_empty());
}

/// An op is reported only once every op before it is installed.
#[test]
fn settled_waits_for_every_earlier_op() {
    let mut e = executor();
    insert(&mut e, 1, 1, &incr("a", 1));
    insert(&mut e, 2, 2, &incr("b", 1));
    let t1 = e.next_task().unwrap();
    let t2 = e.next_task().unwrap();
    let done = e.run(&t2);
    e.complete(done);
    check(&e);
    assert!(settled(&mut e).is_empty(), "op 1 is still running");
    let done = e.run(&t1);
    e.complete(done);
    check(&e);
    assert_eq!(settled(&mut e), [tentative(1, ok(1)), tentative(2, ok(1))]);
}

/// A state loaded as committed (a restored checkpoint) is what later ops
/// read, and commits continue after the loaded bound: the result equals a
/// sequential execution of the whole history.
#[test]
fn loaded_committed_state_is_the_base_of_later_ops() {
    let before = [put("k", "a"), incr("n", 5), put("t", "x")];
    let after = [incr("n", 2), get("k"), delete("t"), put("u", "y")];
    let (_, state) = sequential(&before.iter().collect::<Vec<_>>());
    let mut e = executor();
    e.load_committed(state.clone(), Some(3));
    check(&e);
    assert_eq!(e.committed_state(), state);
    assert_eq!(e.counters().versions_alive, 3);
    // Tentative first, then committed one by one after position 3.
    for (i, c) in after.iter().enumerate() {
        insert(&mut e, i as u32 + 1, 100 + i as u64, c);
    }
    run_all(&mut e);
    for key in 1..=after.len() as u32 {
        commit(&mut e, key, 3 + u64::from(key));
        run_all(&mut e);
    }
    let all: Vec<&ProcCall> = before.iter().chain(after.iter()).collect();
    let (outcomes, want) = sequential(&all);
    let finals: Vec<Settled<u32>> = settled(&mut e)
        .into_iter()
        .filter(|s| s.committed)
        .collect();
    let expected: Vec<Settled<u32>> = (1..=after.len() as u32)
        .zip(outcomes[before.len()..].iter().cloned())
        .map(|(k, o)| committed(k, o))
        .collect();
    assert_eq!(finals, expected);
    assert_eq!(e.committed_state(), want);
}

#[test]
fn fresh_first_runs_committed_then_new_ops_then_reexecutions() {
    let mut e = executor();
    e.set_schedule(Schedule {
        fresh_first: true,
        hold_reruns: false,
    });
    // Ops 1 and 2 execute; 3 is inserted ahead of them and writes what
    // both read, so both wait to re-execute; 4 and 5 are new.
    insert(&mut e, 1, 20, &incr("k", 1));
    insert(&mut e, 2, 30, &get("k"));
    run_all(&mut e);
    insert(&mut e, 3, 10, &put("k", "7"));
    let task = e.next_task().unwrap();
    assert_eq!(task.key, 3, "the only new op goes first");
    let done = e.run(&task);
    e.complete(done);
    check(&e);
    insert(&mut e, 4, 40, &get("j"));
    insert(&mut e, 5, 50, &put("j", "x"));
    assert_eq!(e.next_runnable(), Some(40), "new ops before re-executions");
    // Commit 2 (moving it first): committed work goes before anything.
    commit(&mut e, 2, 1);
    let order: Vec<u32> = std::iter::from_fn(|| {
        let t = e.next_task()?;
        check(&e);
        Some(t.key)
    })
    .collect();
    assert_eq!(order, vec![2, 4, 5, 1]);
    assert_eq!(e.counters().reexecutions, 2);
}

#[test]
fn rerun_waits_for_the_running_writer_it_conflicted_with() {
    for hold in [false, true] {
        let mut e = executor();
        e.set_schedule(Schedule {
            fresh_first: false,
            hold_reruns: hold,
        });
        for key in 1..=3u32 {
            insert(&mut e, key, u64::from(key) * 10, &incr("k", 1));
        }
        // Three executions of one hot key at once, on empty snapshots.
        let first: Vec<_> = (0..3).map(|_| e.next_task().unwrap()).collect();
        let runs: Vec<_> = first.iter().map(|t| e.run(t)).collect();
        let mut runs = runs.into_iter();
        e.complete(runs.next().unwrap()); // 1 installs
        e.complete(runs.next().unwrap()); // 2 conflicts, nothing earlier runs
        check(&e);
        let rerun2 = e.next_task().unwrap();
        assert_eq!(rerun2.key, 2);
        let done2 = e.run(&rerun2);
        e.complete(runs.next().unwrap()); // 3 conflicts while 2 reruns
        check(&e);
        if hold {
            assert!(e.next_task().is_none(), "3 waits for 2");
            e.complete(done2);
            check(&e);
            run_all(&mut e);
        } else {
            let rerun3 = e.next_task().unwrap();
            let done3 = e.run(&rerun3); // reads 1's version: doomed
            e.complete(done2);
            e.complete(done3);
            check(&e);
            run_all(&mut e);
        }
        let want = if hold { 5 } else { 6 };
        assert_eq!(e.counters().executions, want, "hold {hold}");
        let outcomes: Vec<Outcome> = settled(&mut e).into_iter().map(|s| s.outcome).collect();
        assert_eq!(outcomes, vec![ok(1), ok(2), ok(3)]);
    }
}

#[test]
fn removing_a_blocker_or_a_waiter_keeps_the_wait_lists_right() {
    // Ops 1..=3 increment one key at once; 3 ends up waiting for 2's rerun.
    let setup = || {
        let mut e = executor();
        e.set_schedule(Schedule {
            fresh_first: false,
            hold_reruns: true,
        });
        for key in 1..=3u32 {
            insert(&mut e, key, u64::from(key) * 10, &incr("k", 1));
        }
        let tasks: Vec<_> = (0..3).map(|_| e.next_task().unwrap()).collect();
        let done: Vec<_> = tasks.iter().map(|t| e.run(t)).collect();
        let mut done = done.into_iter();
        e.complete(done.next().unwrap());
        e.complete(done.next().unwrap());
        let rerun2 = e.next_task().unwrap();
        let done2 = e.run(&rerun2);
        e.complete(done.next().unwrap());
        check(&e);
        assert!(e.next_task().is_none(), "3 waits for 2");
        (e, done2)
    };
    let outcomes =
        |e: &mut Ex| -> Vec<Outcome> { settled(e).into_iter().map(|s| s.outcome).collect() };
    // The blocker goes away while running: its waiter becomes runnable and
    // the blocker's completion is stale.
    let (mut e, done2) = setup();
    e.remove(2);
    check(&e);
    assert_eq!(e.next_runnable(), Some(30));
    e.complete(done2);
    check(&e);
    assert_eq!(e.counters().stale, 1);
    run_all(&mut e);
    assert_eq!(outcomes(&mut e), vec![ok(1), ok(2)]);
    // The waiter goes away: the blocker's completion releases nobody.
    let (mut e, done2) = setup();
    e.remove(3);
    check(&e);
    e.complete(done2);
    check(&e);
    run_all(&mut e);
    assert_eq!(outcomes(&mut e), vec![ok(1), ok(2)]);
    // A crash abandons the running and the waiting alike.
    let (mut e, _) = setup();
    e.abandon_running();
    check(&e);
    run_all(&mut e);
    assert_eq!(outcomes(&mut e), vec![ok(1), ok(2), ok(3)]);
}
