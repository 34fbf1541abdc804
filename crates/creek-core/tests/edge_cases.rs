//! Named edge-case scenarios of the replica protocol (Creek paper,
//! Algorithm 1; §4.2 on conditional atomic broadcast and causal contexts;
//! §4.4 on the multiversion executor, local reads and the stabilizer). Each
//! test drives the replicas step by step through one situation and checks
//! what a client of the store would observe.
#![allow(clippy::unwrap_used)]

mod harness;

use std::sync::Arc;

use creek_core::{
    Config, Effect, ExecKey, InvokeError, OpId, Pos, Replica, ReplicaId, Request, ViewKind, Views,
};
use creek_exec::basic::replay;
use creek_exec::mvcc::MvccExecutor;
use creek_exec::{Abort, Outcome, ProcCall, TxnLimits};
use creek_procs::{CallError, Registry};
use creek_types::value::{encode_args, Value};
use creek_types::ClientRequestId;
use harness::Cluster;
use ViewKind::{Confirmation, Stable, Tentative};

type C = Cluster<MvccExecutor<ExecKey, Pos>>;

/// Stabilizer delay for clusters that only need it to settle.
const DELAY: u64 = 50_000;

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

fn append(list: &str, item: &str) -> ProcCall {
    call("list.append", &[Value::from(list), Value::from(item)])
}

/// How a request is ordered and answered: (strong, views).
type Mode = (bool, Views);
const WEAK: Mode = (false, Views::WEAK);
const WEAK_BOTH: Mode = (false, Views::BOTH);
const STRONG: Mode = (true, Views::BOTH);
const STRONG_ONLY: Mode = (true, Views::STRONG);

/// Invoke `call` at node `i`; the invocation must be accepted.
fn inv(c: &mut C, i: usize, (strong, views): Mode, call: ProcCall) -> ExecKey {
    let mut request = Request::weak(call);
    (request.strong, request.views) = (strong, views);
    c.invoke(i, request).unwrap()
}

fn ok(v: impl Into<Value>) -> Outcome {
    Ok(v.into().encode())
}

fn id(h: ExecKey) -> OpId {
    match h {
        ExecKey::Op(id) => id,
        ExecKey::Local(n) => panic!("local read {n} has no op id"),
    }
}

fn ids<const N: usize>(hs: [ExecKey; N]) -> Vec<OpId> {
    hs.into_iter().map(id).collect()
}

fn run_all(c: &mut C, i: usize) {
    while c.exec_one(i) {}
}

/// The views node `i` sent for handle `h`, as (kind, outcome).
fn views(c: &C, i: usize, h: ExecKey) -> Vec<(ViewKind, Outcome)> {
    c.nodes[i].views.get(&h).map_or_else(Vec::new, |vs| {
        vs.iter().map(|v| (v.kind, v.outcome.clone())).collect()
    })
}

/// Answer a weak local read at node `i` and return its value.
fn local_read(c: &mut C, i: usize, call: ProcCall) -> Outcome {
    let h = inv(c, i, WEAK, call);
    run_all(c, i);
    let vs = views(c, i, h);
    assert_eq!(vs.len(), 1, "a local read is answered once");
    vs[0].1.clone()
}

fn value_of(c: &C, i: usize, key: &str) -> Option<String> {
    let value = c.state(i).get(key.as_bytes()).cloned()?;
    Some(String::from_utf8_lossy(&value).into_owned())
}

fn replica(n: u16) -> Replica {
    let registry = Arc::new(Registry::with_builtins());
    Replica::new(Config::for_replica(ReplicaId(n)), registry).unwrap()
}

/// A first preliminary view comes as soon as the op's own execution is valid,
/// while an op before it is still running (the default; paper §6.2: the
/// tentative latency is the execution time); the strict mode waits for it.
#[test]
fn a_first_view_does_not_wait_for_an_earlier_op_still_running() {
    for early in [true, false] {
        let mut c = C::with_views(2, DELAY, early);
        let a = inv(&mut c, 0, WEAK, incr("x", 1));
        let b = inv(&mut c, 0, WEAK, incr("y", 1));
        assert!(c.start_exec(0) && c.start_exec(0));
        assert!(c.complete_exec(0, 1), "b finishes first");
        let expected = if early {
            vec![(Tentative, ok(1))]
        } else {
            vec![]
        };
        assert_eq!(views(&c, 0, b), expected, "early: {early}");
        assert!(views(&c, 0, a).is_empty());
        assert!(c.complete_exec(0, 0));
        assert_eq!(views(&c, 0, a), [(Tentative, ok(1))]);
        assert_eq!(views(&c, 0, b), [(Tentative, ok(1))], "one first view");
    }
}

/// Scenario 1: Algorithm 1 lines 26–31 (RB-deliver, adjustTentativeOrder) with
/// §4.4's "rollback only if necessary": a weak op arriving late with an older
/// timestamp re-executes only the executions that read what it writes.
#[test]
fn late_weak_op_reexecutes_only_readers_of_its_keys() {
    let mut c = C::new(2, DELAY);
    let b = inv(&mut c, 1, WEAK, incr("x", 10));
    let ax = inv(&mut c, 0, WEAK_BOTH, incr("x", 1));
    let ay = inv(&mut c, 0, WEAK_BOTH, incr("y", 1));
    run_all(&mut c, 0);
    let before = c.nodes[0].replica.exec_counters();
    assert_eq!((before.executions, before.reexecutions), (2, 0));
    assert_eq!(views(&c, 0, ax), [(Tentative, ok(1))]);

    assert!(c.deliver_rb(1, 0));
    run_all(&mut c, 0);
    let r = &c.nodes[0].replica;
    assert_eq!(r.tentative(), ids([b, ax, ay]));
    let after = r.exec_counters();
    assert_eq!(after.executions, 4, "b once, x's incr again, y's incr not");
    assert_eq!(after.reexecutions, 1);
    assert_eq!(after.invalidations, 1);
    assert_eq!(views(&c, 0, ax).len(), 1, "one tentative view");

    c.settle();
    c.check_final();
    assert_eq!(views(&c, 0, ax).last(), Some(&(Stable, ok(11))));
    assert_eq!(views(&c, 0, ay).last(), Some(&(Confirmation, ok(1))));
    assert_eq!(value_of(&c, 1, "x").as_deref(), Some("11"));
}

/// Scenario 2: Algorithm 1 lines 10–14 (checkDep) and 32–35; §4.2: CAB delivery
/// is conditional on the strong op's causal context being known, and decided
/// ids commit strictly in decision order.
#[test]
fn strong_op_waits_for_its_missing_causal_context() {
    let mut c = C::new(3, DELAY);
    let w = inv(&mut c, 0, WEAK, put("a", "1"));
    assert!(c.deliver_rb(0, 1)); // B knows w; C does not yet
    let s1 = inv(&mut c, 1, STRONG, put("b", "2"));
    let s2 = inv(&mut c, 2, STRONG, put("c", "3"));
    let ctx = c.ops[&id(s1)].causal_context.clone().unwrap();
    assert!(ctx.contains(id(w)), "s1 was invoked after w reached B");
    assert!(c.deliver_rb(1, 2));
    run_all(&mut c, 2);
    assert!(c.decide(0) && c.decide(0));
    assert_eq!(c.decided, ids([s1, s2]));

    assert!(c.deliver_cab(2) && c.deliver_cab(2));
    run_all(&mut c, 2);
    let r = &c.nodes[2].replica;
    assert!(r.committed().is_empty(), "s1 committed without w");
    assert_eq!(r.decided_waiting(), 2, "s2 must wait behind s1");
    assert!(!r.check_dep(id(s1)));
    assert!(r.check_dep(id(s2)));
    assert!(views(&c, 2, s2).iter().all(|(k, _)| *k == Tentative));

    assert!(c.deliver_rb(0, 2));
    let r = &c.nodes[2].replica;
    assert_eq!(r.committed(), ids([w, s1, s2]));
    assert_eq!(r.decided_waiting(), 0);
    c.settle();
    assert_eq!(c.check_final(), ids([w, s1, s2]));
}

/// Scenario 3: A invokes a1, a2 and strong s; B's weak b1 has a timestamp
/// between a1's and a2's but reaches A only after s was invoked, so it is not
/// in s's causal context.
fn commit_past_foreign_op(b_list: &str) -> (C, [ExecKey; 4], u64, u64) {
    let mut c = C::new(2, DELAY);
    let a1 = inv(&mut c, 0, WEAK, append("l", "a1"));
    let b1 = inv(&mut c, 1, WEAK_BOTH, append(b_list, "b1"));
    run_all(&mut c, 1);
    let a2 = inv(&mut c, 0, WEAK, append("l", "a2"));
    let s = inv(&mut c, 0, STRONG, append("l", "S"));
    assert!(c.deliver_rb(1, 0));
    run_all(&mut c, 0);
    assert_eq!(c.nodes[0].replica.tentative(), ids([a1, b1, a2, s]));
    let before = c.nodes[0].replica.exec_counters();

    assert!(c.decide(0) && c.deliver_cab(0));
    let r = &c.nodes[0].replica;
    assert_eq!(r.committed(), ids([a1, a2, s]), "context keeps its order");
    assert_eq!(r.tentative(), ids([b1]), "b1 stays tentative, after s");
    run_all(&mut c, 0);
    let after = c.nodes[0].replica.exec_counters();
    let reexecuted = after.reexecutions - before.reexecutions;
    let invalidated = after.invalidations - before.invalidations;

    c.settle();
    assert_eq!(c.check_final()[..4], ids([a1, a2, s, b1]));
    (c, [a1, b1, a2, s], reexecuted, invalidated)
}

/// Scenario 3a: Algorithm 1 lines 48–57 (commit): the causal context moves to
/// the committed list in its relative order; a foreign op on the same key is
/// re-executed and its final view reflects the new order.
#[test]
fn commit_reorders_and_reexecutes_foreign_op_on_same_key() {
    let (mut c, [_, b1, _, _], reexecuted, invalidated) = commit_past_foreign_op("l");
    // a2, s and b1 each see a different list once b1 moves after s.
    assert_eq!((reexecuted, invalidated), (3, 3));
    assert_eq!(views(&c, 1, b1), [(Tentative, ok(1)), (Stable, ok(4))]);
    let items = ["a1", "a2", "S", "b1"].map(Value::from).to_vec();
    assert_eq!(
        local_read(&mut c, 0, call("list.read", &[Value::from("l")])),
        ok(items)
    );
}

/// Scenario 3b: Same reordering, but b1 touches another list: the commit moves
/// versions without re-executing anything (§4.4).
#[test]
fn commit_reorders_without_reexecution_when_keys_are_disjoint() {
    let (c, [_, b1, _, _], reexecuted, invalidated) = commit_past_foreign_op("m");
    assert_eq!((reexecuted, invalidated), (0, 0));
    assert_eq!(
        views(&c, 1, b1),
        [(Tentative, ok(1)), (Confirmation, ok(1))]
    );
}

/// Scenario 4: §4.4: a reader whose writer moves after it (here: the reader's
/// own commit overtakes a lower-timestamp write) is invalidated, and its final
/// view is the result at its committed position.
#[test]
fn reader_is_invalidated_when_its_writer_moves_after_it() {
    let mut c = C::new(2, DELAY);
    let w = inv(&mut c, 1, WEAK, put("k", "v"));
    let r = inv(&mut c, 0, STRONG, get("k"));
    run_all(&mut c, 0);
    assert!(c.deliver_rb(1, 0));
    run_all(&mut c, 0);
    assert_eq!(c.nodes[0].replica.tentative(), ids([w, r]));
    assert_eq!(
        views(&c, 0, r),
        [(Tentative, ok(Value::Nil)), (Tentative, ok("v"))]
    );
    let before = c.nodes[0].replica.exec_counters().invalidations;

    assert!(c.decide(0) && c.deliver_cab(0));
    run_all(&mut c, 0);
    let node = &c.nodes[0].replica;
    assert_eq!(node.committed(), ids([r]));
    assert_eq!(node.tentative(), ids([w]));
    assert!(node.exec_counters().invalidations > before);
    let committed: Vec<&ProcCall> = node.committed().iter().map(|i| &c.ops[i].call).collect();
    let (outcomes, _) = replay(&*c.registry, TxnLimits::default(), committed);
    assert_eq!(outcomes, [ok(Value::Nil)]);
    assert_eq!(views(&c, 0, r).last(), Some(&(Stable, ok(Value::Nil))));

    c.settle();
    assert_eq!(c.check_final()[..2], ids([r, w]));
    assert_eq!(value_of(&c, 0, "k").as_deref(), Some("v"));
}

/// Scenario 5: Algorithm 1 line 27 and RB/CAB's at-most-once delivery: repeated
/// RB or CAB deliveries, before or after commit, change nothing.
#[test]
fn duplicate_rb_and_cab_deliveries_are_ignored() {
    let mut c = C::new(2, DELAY);
    let w = inv(&mut c, 0, WEAK, put("a", "1"));
    let s = inv(&mut c, 0, STRONG, put("b", "2"));
    let (op_w, op_s) = (c.ops[&id(w)].clone(), c.ops[&id(s)].clone());
    assert!(c.decide(0) && c.deliver_cab(1)); // decided before s reached node 1
    c.nodes[1].replica.cab_deliver(id(s));
    assert_eq!(c.nodes[1].replica.decided_waiting(), 1);
    while c.deliver_rb(0, 1) {}
    assert_eq!(c.nodes[1].replica.committed(), ids([w, s]));
    let r = &mut c.nodes[1].replica;
    r.rb_deliver(op_w.clone()); // payloads still held: not yet executed
    r.rb_deliver(op_s.clone());
    r.cab_deliver(id(s));
    r.execute_all();
    assert!(r.is_quiescent());
    r.rb_deliver(op_w); // final: payloads gone
    r.rb_deliver(op_s);
    r.cab_deliver(id(s));
    r.execute_all();
    assert!(r.take_effects().is_empty());
    let n = r.counters();
    assert_eq!(n.duplicates, 7);
    assert_eq!((n.rb_delivered, n.cab_delivered, n.committed), (2, 1, 2));
    assert_eq!(r.committed(), ids([w, s]));
    assert!(r.tentative().is_empty());
    c.settle();
    assert_eq!(c.check_final(), ids([w, s]));
}

/// Scenario 6: Client request ids (the replicated dedup table, §4.4's
/// deterministic procedures): a retry at another replica takes effect once
/// everywhere, and both invocations get the first execution's result.
#[test]
fn retried_request_takes_effect_once() {
    let mut c = C::new(2, DELAY);
    let with_id = |seq| {
        let mut call = incr("n", 5);
        call.request_id = Some(ClientRequestId { client: 42, seq });
        call
    };
    let first = inv(&mut c, 0, WEAK_BOTH, with_id(1));
    let retry = inv(&mut c, 1, WEAK_BOTH, with_id(1));
    assert_ne!(first, retry, "a retry is a new op");
    let next = inv(&mut c, 1, WEAK_BOTH, with_id(2));
    c.settle();
    c.check_final();
    for i in 0..2 {
        assert_eq!(value_of(&c, i, "n").as_deref(), Some("10"), "node {i}");
    }
    let finals = c.final_outcomes();
    assert_eq!(finals[&(0, first)], ok(5));
    assert_eq!(finals[&(1, retry)], ok(5));
    assert_eq!(finals[&(1, next)], ok(10));
}

/// Scenario 7: §4.4: a weak read-only op is answered locally from the current
/// (tentative) state, never broadcast nor committed.
#[test]
fn weak_read_is_local_and_never_broadcast() {
    let mut r = replica(1);
    let w = r.invoke(Request::weak(put("k", "v")), 10).unwrap();
    r.execute_all();
    r.take_effects();
    let h = r.invoke(Request::weak(get("k")), 20).unwrap();
    let miss = r.invoke(Request::weak(get("other")), 30).unwrap();
    assert!(matches!((h, miss), (ExecKey::Local(_), ExecKey::Local(_))));
    r.execute_all();
    let effects = r.take_effects();
    assert_eq!(effects.len(), 2, "{effects:?}");
    for (e, (handle, want)) in effects.iter().zip([(h, ok("v")), (miss, ok(Value::Nil))]) {
        let Effect::View(v) = e else {
            panic!("{e:?} for a local read")
        };
        assert_eq!((v.handle, v.kind, &v.outcome), (handle, Tentative, &want));
    }
    assert_eq!(r.counters().local_reads, 2);
    assert_eq!(r.tentative(), ids([w]));
    assert_eq!(r.engine().ops_alive(), 1, "answered reads leave the engine");

    let s = r.invoke(Request::strong(get("k")), 40).unwrap();
    let cast = r.take_effects();
    assert!(cast
        .iter()
        .any(|e| matches!(e, Effect::CabCast(x) if *x == id(s))));
    r.cab_deliver(id(s));
    r.execute_all();
    assert_eq!(r.committed(), ids([w, s]));
    assert!(r.is_quiescent());
}

/// Scenario 7b: Counters feed the paper's rollback measurements (§4.4);
/// answering a local read rolls nothing back.
#[test]
fn local_reads_are_not_counted_as_rollbacks() {
    let mut r = replica(1);
    r.invoke(Request::weak(put("k", "v")), 10).unwrap();
    r.execute_all();
    r.invoke(Request::weak(get("k")), 20).unwrap();
    r.execute_all();
    assert_eq!(r.exec_counters().invalidations, 0);
}

/// Scenario 8: §4.4, stabilizer: weak ops with no strong op to commit them are
/// committed by a strong no-op once they waited `stabilize_after_us`.
#[test]
fn stabilizer_commits_weak_ops_after_the_delay() {
    let mut c = C::new(2, 5_000);
    let w = inv(&mut c, 0, WEAK, put("k", "v"));
    run_all(&mut c, 0);
    c.tick(4_999);
    assert!(c.undecided.is_empty(), "no strong op before the delay");
    assert_eq!(c.nodes[0].replica.tentative(), ids([w]));
    assert!(c.nodes[0].replica.committed().is_empty());

    c.tick(1);
    assert_eq!(c.nodes[0].replica.counters().stabilizer_noops, 1);
    assert_eq!(c.undecided.len(), 1);
    let noop = c.ops[&c.undecided[0]].clone();
    assert!(noop.strong && &*noop.call.name == "sys.noop");
    assert!(noop.causal_context.as_ref().unwrap().contains(id(w)));
    c.tick(100_000);
    assert_eq!(c.undecided.len(), 1, "one no-op in flight at a time");

    c.settle();
    assert_eq!(c.check_final(), vec![id(w), noop.id]);
    assert_eq!(c.nodes[1].replica.counters().stabilizer_noops, 0);
    assert!(!c.nodes[0].views.contains_key(&ExecKey::Op(noop.id)));
}

/// Scenario 8b: §4.4, stabilizer: a weak op received by RB waits its full delay
/// at the receiver too, even if the receiver's driver clock was last read long
/// before the op arrived.
#[test]
fn stabilizer_delay_counts_from_remote_arrival() {
    let mut c = C::new(2, 5_000);
    inv(&mut c, 0, WEAK, put("k", "v"));
    assert!(c.deliver_rb(0, 1)); // node 1 has not read the clock yet
    c.tick(1_000);
    assert_eq!(c.nodes[1].replica.counters().stabilizer_noops, 0);
    assert!(c.undecided.is_empty());
}

/// Scenario 8c: §4.4, stabilizer: its no-op has no client, so it is invisible
/// in the client-facing counters (invocations, views, tentative accuracy).
#[test]
fn stabilizer_noop_is_invisible_in_client_counters() {
    let mut c = C::new(1, 5_000);
    inv(&mut c, 0, WEAK, put("k", "v"));
    run_all(&mut c, 0);
    c.tick(5_000);
    c.settle();
    c.check_final();
    let n = c.nodes[0].replica.counters();
    assert_eq!((n.stabilizer_noops, n.invoked_strong, n.views), (1, 0, 1));
    assert_eq!(
        (n.accuracy_checked, n.accuracy_hits),
        (1, 1),
        "only the put has a client"
    );
}

/// Scenario 9: Final-view rule for `[weak, strong]` weak ops (Algorithm 1 lines
/// 55–56, docs/protocol.md, "Views"): a confirmation when the committed result
/// equals the tentative view, a stable view with the new result otherwise.
#[test]
fn weak_op_final_view_confirms_or_corrects() {
    let mut c = C::new(2, DELAY);
    inv(&mut c, 1, WEAK, incr("n", 10));
    let moved = inv(&mut c, 0, WEAK_BOTH, incr("n", 1));
    let alone = inv(&mut c, 0, WEAK_BOTH, incr("m", 1));
    run_all(&mut c, 0);
    assert_eq!(views(&c, 0, moved), [(Tentative, ok(1))]);
    assert!(c.deliver_rb(1, 0));
    run_all(&mut c, 0);
    c.settle();
    c.check_final();
    assert_eq!(views(&c, 0, moved), [(Tentative, ok(1)), (Stable, ok(11))]);
    assert_eq!(
        views(&c, 0, alone),
        [(Tentative, ok(1)), (Confirmation, ok(1))]
    );
}

/// Scenario 10: `[strong]` views (Algorithm 1 lines 55–56; docs/protocol.md,
/// "Views"): no tentative view even when the op is re-executed with different
/// results; exactly one final view.
#[test]
fn strong_only_view_is_sent_once() {
    let mut c = C::new(2, DELAY);
    inv(&mut c, 1, WEAK, incr("n", 10));
    let s = inv(&mut c, 0, STRONG_ONLY, incr("n", 1));
    run_all(&mut c, 0);
    assert!(c.deliver_rb(1, 0));
    run_all(&mut c, 0);
    assert!(c.nodes[0].replica.exec_counters().reexecutions > 0);
    assert!(views(&c, 0, s).is_empty());
    c.settle();
    c.check_final();
    // s's context predates n+10, so s commits first.
    assert_eq!(views(&c, 0, s), [(Stable, ok(1))]);
}

/// Scenario 11: Invoke-time validation (Algorithm 1 line 15): refused requests
/// are neither applied nor broadcast.
#[test]
fn refused_invocations_have_no_effect() {
    let mut r = replica(1);
    let mut no_view = Request::weak(put("k", "v"));
    no_view.views.tentative = false; // and no final view either
    let reserved = call("kv.put", &[Value::from(&b"\0sys"[..]), Value::from("v")]);
    let long_key = vec![b'k'; TxnLimits::default().key_bytes_max + 1];
    let oversized = call("kv.put", &[Value::from(&long_key[..]), Value::from("v")]);
    let oversized_read = call("kv.get", &[Value::from(&long_key[..])]);
    let cases = [
        (Request::strong(oversized), "key of"),
        (Request::weak(oversized_read), "key of"),
        (Request::weak(call("no.such", &[])), "unknown"),
        (
            Request::weak(call("kv.put", &[Value::from("k")])),
            "expects",
        ),
        (no_view, "no view"),
        (Request::strong(reserved), "reserved"),
    ];
    for (request, what) in cases {
        let err = r.invoke(request, 10).unwrap_err();
        match (what, &err) {
            ("unknown", InvokeError::Call(CallError::UnknownProcedure(n))) => {
                assert_eq!(n, "no.such");
            }
            (_, InvokeError::Call(CallError::MalformedArgs { name, reason })) => {
                assert_eq!(name, "kv.put");
                assert!(reason.contains(what), "{what}: {reason}");
            }
            ("no view", InvokeError::NoView) => {}
            ("key of", InvokeError::Call(e @ CallError::KeyTooLarge { len, max, .. })) => {
                assert_eq!((*len, *max), (long_key.len(), long_key.len() - 1));
                assert!(e.to_string().contains("key_bytes_max"), "{e}");
            }
            _ => panic!("{what}: unexpected {err:?}"),
        }
    }
    assert!(r.take_effects().is_empty());
    assert_eq!(r.counters(), Default::default());
    assert_eq!(r.exec_counters(), Default::default());
    assert!(r.is_quiescent() && r.committed().is_empty());

    let registry = Arc::new(Registry::with_builtins());
    let config = Config {
        tentative_len_max: 2,
        ..Config::for_replica(ReplicaId(2))
    };
    let mut r = Replica::new(config, registry).unwrap();
    r.invoke(Request::weak(put("a", "1")), 10).unwrap();
    r.invoke(Request::weak(put("b", "2")), 20).unwrap();
    r.take_effects();
    let counters = r.counters();
    assert_eq!(
        r.invoke(Request::weak(put("c", "3")), 30),
        Err(InvokeError::Overloaded(2))
    );
    assert!(r.take_effects().is_empty());
    assert_eq!(r.counters(), counters);
    assert_eq!(r.tentative().len(), 2);
}

/// Scenario 12: §4.4, garbage collection: once committed and settled, only the
/// newest version of each key survives and the executor forgets every op.
#[test]
fn committed_history_is_garbage_collected() {
    let mut c = C::new(2, DELAY);
    for n in 0..40 {
        let p = put("k", &n.to_string());
        inv(&mut c, n % 2, (n % 10 == 9, Views::WEAK), p);
    }
    for n in 0..10 {
        inv(&mut c, n % 2, WEAK, incr("n", 1));
    }
    run_all(&mut c, 0);
    assert!(c.nodes[0].replica.exec_counters().versions_alive >= 25);
    c.settle();
    c.check_final();
    for (i, node) in c.nodes.iter().enumerate() {
        let r = &node.replica;
        // One per key, and one per key's version record.
        assert_eq!(r.exec_counters().versions_alive, 4, "node {i}: one per key");
        assert_eq!(r.engine().ops_alive(), 0, "node {i}");
    }
    assert_eq!(value_of(&c, 0, "n").as_deref(), Some("10"));
}

/// Scenario 13: Deterministic aborts (§4.4: procedures are deterministic): the
/// client gets the error and nothing is written.
#[test]
fn deterministic_abort_is_reported_and_writes_nothing() {
    let mut c = C::new(2, DELAY);
    inv(&mut c, 1, STRONG_ONLY, put("n", "abc"));
    c.settle();
    let bad = inv(&mut c, 0, STRONG, incr("n", 1));
    c.settle();
    c.check_final();
    let abort = Err(Abort::new("value of key is not an integer"));
    assert_eq!(
        views(&c, 0, bad),
        [(Tentative, abort.clone()), (Confirmation, abort)]
    );
    for i in 0..2 {
        assert_eq!(value_of(&c, i, "n").as_deref(), Some("abc"));
    }
    assert_eq!(local_read(&mut c, 1, get("n")), ok("abc"));
}

/// Swarm kv seed 1027 (fresh-first schedule): CAB orders strong ids as their
/// casts reach the leader, so an origin's later strong op can be decided
/// before an earlier one (there: the earlier op's re-cast after a restart
/// was lost in a partition, the later op's cast was not). The later op's
/// causal context names the origin's earlier uncommitted strong ops, and
/// committing it commits them first; the earlier op's own decision, later,
/// is a duplicate. Delivery never waits for it (it is decided after).
#[test]
fn later_strong_op_of_an_origin_commits_its_earlier_ones_first() {
    let mut c = C::new(3, DELAY);
    let s1 = inv(&mut c, 0, STRONG, put("k", "old"));
    let w = inv(&mut c, 0, WEAK, incr("n", 1));
    let s2 = inv(&mut c, 0, STRONG, put("k", "new"));
    let ctx = c.ops[&id(s2)].causal_context.clone().unwrap();
    assert!(ctx.contains(id(s1)) && ctx.contains(id(w)));
    assert!(!c.ops[&id(s1)]
        .causal_context
        .clone()
        .unwrap()
        .contains(id(s2)));
    assert!(c.decide(1), "s2 decided first");
    for i in 1..3 {
        while c.deliver_rb(0, i) {}
    }
    for i in 0..3 {
        assert!(c.deliver_cab(i));
        assert_eq!(c.nodes[i].replica.committed(), ids([s1, w, s2]), "node {i}");
    }
    assert!(c.decide(0), "s1 decided after s2");
    for i in 0..3 {
        assert!(c.deliver_cab(i));
        assert_eq!(c.nodes[i].replica.committed(), ids([s1, w, s2]), "node {i}");
        assert_eq!(c.nodes[i].replica.decided_waiting(), 0);
    }
    c.settle();
    assert_eq!(c.check_final(), ids([s1, w, s2]));
    assert_eq!(value_of(&c, 1, "k").as_deref(), Some("new"));
    let last = views(&c, 0, s1).last().map(|v| v.0);
    assert!(
        matches!(last, Some(Stable | Confirmation)),
        "s1 answered finally"
    );
}

/// The same with the later op decided at a replica that has not yet received
/// the earlier op's payload: it waits for it (conditional delivery), then
/// commits both.
#[test]
fn later_strong_op_waits_for_the_payload_of_an_earlier_one() {
    let mut c = C::new(2, DELAY);
    let s1 = inv(&mut c, 0, STRONG, put("k", "old"));
    let s2 = inv(&mut c, 0, STRONG, put("k", "new"));
    let op_s2 = c.ops[&id(s2)].clone();
    assert!(c.decide(1));
    c.nodes[1].replica.rb_deliver(op_s2); // s2's payload overtakes s1's
    assert!(c.deliver_cab(1));
    let r = &c.nodes[1].replica;
    assert!(r.committed().is_empty() && r.decided_waiting() == 1);
    assert!(!r.holds_payloads(id(s2)) && !r.check_dep(id(s2)));
    assert!(c.deliver_rb(0, 1));
    assert_eq!(c.nodes[1].replica.committed(), ids([s1, s2]));
    c.settle();
    assert_eq!(c.check_final(), ids([s1, s2]));
}

/// The payloads `r` asked to broadcast since the last call.
fn broadcasts(r: &mut Replica) -> Vec<Arc<creek_core::Op>> {
    r.take_effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::RbCast(op) => Some(op),
            _ => None,
        })
        .collect()
}

/// A replica that lost its data had sent a weak op `a` to nobody and a later
/// strong op `b`, whose context names `a`, to its peers: `b` could never be
/// held or committed anywhere. Rebuilt, it voids `a` through the committed
/// order; where the void commits decides for every replica: a replica that
/// held `a` drops it (and its write), the others count it as held, `b`
/// commits everywhere with the same state, and a late copy of `a` is refused.
#[test]
fn a_void_op_lets_the_ops_that_name_a_lost_op_commit_everywhere() {
    let mut origin = replica(1);
    origin.invoke(Request::weak(put("a", "lost")), 10).unwrap();
    let mut strong = Request::weak(put("b", "kept"));
    (strong.strong, strong.views) = (true, Views::STRONG);
    origin.invoke(strong, 20).unwrap();
    let sent = broadcasts(&mut origin);
    let (a, b) = (sent[0].clone(), sent[1].clone());
    assert!(b.causal_context.as_ref().unwrap().contains(a.id));

    // Replica 2 got only `b`; replica 3 got both (`a` tentatively).
    let (mut without, mut with) = (replica(2), replica(3));
    without.rb_deliver(b.clone());
    with.rb_deliver(a.clone());
    with.rb_deliver(b.clone());
    assert!(!without.holds_payloads(b.id) && with.holds_payloads(b.id));

    // Rebuilt without its data, the origin resumes its seqs past 2, takes
    // back `b` and voids seq 1.
    let checkpoint = creek_core::Checkpoint {
        next_event_no: 3,
        commit_time: 0,
        group: Default::default(),
        ..Default::default()
    };
    let registry = Arc::new(Registry::with_builtins());
    let config = Config::for_replica(ReplicaId(1));
    let mut origin = Replica::restore(config, registry, Some(checkpoint), vec![]).unwrap();
    origin.reclaim_own(2);
    assert!(origin.rb_deliver(b.clone()));
    origin.void_own(&[1, 7], 30); // 7 is past what it reclaims: ignored
    let void = broadcasts(&mut origin).pop().unwrap();
    assert_eq!(void.call.name.as_ref(), creek_procs::void::VOID);
    assert_eq!(creek_procs::void::void_seqs(&void.call.args), Ok(vec![1]));
    for r in [&mut without, &mut with] {
        r.rb_deliver(void.clone());
        r.cab_deliver(void.id);
        let voided: Vec<OpId> = r
            .take_effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Voided(id) => Some(id),
                _ => None,
            })
            .collect();
        assert_eq!(voided, [a.id]);
        assert!(r.holds_payloads(b.id) && r.check_dep(b.id));
        r.cab_deliver(b.id);
        r.execute_all();
        assert_eq!(r.committed().to_vec(), [void.id, b.id]);
        assert!(r.tentative().is_empty());
        assert_eq!(r.counters().voided, 1);
        assert!(
            !r.rb_deliver(a.clone()),
            "a late copy of a voided op is refused"
        );
        r.check_invariants().unwrap();
    }
    assert_eq!(without.committed_state(), with.committed_state());
    assert_eq!(
        with.committed_state().get(b"a".as_slice()),
        None,
        "the voided write is gone"
    );
}

/// A void op leaves an op committed before it as it is.
#[test]
fn a_void_op_leaves_a_committed_op_alone() {
    let mut origin = replica(1);
    let mut strong = Request::weak(put("a", "1"));
    (strong.strong, strong.views) = (true, Views::STRONG);
    origin.invoke(strong, 10).unwrap();
    let a = broadcasts(&mut origin).pop().unwrap();
    let mut peer = replica(2);
    peer.rb_deliver(a.clone());
    peer.cab_deliver(a.id);
    origin.reclaim_own(1);
    origin.void_own(&[1], 20);
    let void = broadcasts(&mut origin).pop().unwrap();
    peer.rb_deliver(void.clone());
    peer.cab_deliver(void.id);
    peer.execute_all();
    assert_eq!(peer.committed().to_vec(), [a.id, void.id]);
    assert_eq!(peer.counters().voided, 0);
    assert_eq!(
        peer.committed_state()
            .get(b"a".as_slice())
            .map(|v| v.as_ref()),
        Some(b"1".as_slice())
    );
}

/// Watchers' changes (`Replica::record_changes`): every replica reports one
/// change per committed op, in the committed order, with its position and
/// the writes of its final execution (a delete as `None`, a read as
/// nothing); tentative executions' writes come without a position.
#[test]
fn committed_changes_are_recorded_once_in_the_committed_order_on_every_replica() {
    let mut c = C::new(2, DELAY);
    for n in &mut c.nodes {
        n.replica.record_changes(true, true);
    }
    let a1 = inv(&mut c, 0, WEAK, put("a", "1"));
    let b1 = inv(&mut c, 1, WEAK_BOTH, put("b", "2"));
    run_all(&mut c, 0);
    let s = inv(&mut c, 0, STRONG, call("kv.delete", &[Value::from("a")]));
    let g = inv(&mut c, 1, STRONG, get("b"));
    c.settle();
    let order = c.check_final();
    let key = |k: &str| bytes::Bytes::copy_from_slice(k.as_bytes());
    for i in 0..2 {
        let changes = c.nodes[i].replica.take_changes();
        let committed: Vec<_> = changes.iter().filter(|ch| ch.position.is_some()).collect();
        assert_eq!(
            committed.iter().map(|ch| ch.position).collect::<Vec<_>>(),
            (0..order.len() as u64).map(Some).collect::<Vec<_>>(),
            "node {i}: positions"
        );
        assert_eq!(
            committed.iter().map(|ch| ch.op).collect::<Vec<_>>(),
            order,
            "node {i}: the committed order"
        );
        let writes = |h: ExecKey| {
            committed
                .iter()
                .find(|ch| ch.op == id(h))
                .map(|ch| ch.writes.clone())
                .expect("committed")
        };
        assert_eq!(writes(a1), vec![(key("a"), Some(key("1")))]);
        assert_eq!(writes(b1), vec![(key("b"), Some(key("2")))]);
        assert_eq!(writes(s), vec![(key("a"), None)]);
        assert_eq!(writes(g), vec![]);
        assert!(
            changes
                .iter()
                .any(|ch| ch.position.is_none() && ch.op == id(if i == 0 { a1 } else { b1 })),
            "node {i}: its own weak op's tentative change"
        );
        assert!(c.nodes[i].replica.take_changes().is_empty());
    }
}
