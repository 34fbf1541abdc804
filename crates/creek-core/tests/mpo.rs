//! Operations across shards at the replica (docs/cross-shard.md): an MPO
//! commits at its turn in the directory's sequence, after the read
//! exchange, and its origin answers the final view once every shard
//! confirmed. Each test drives one replica per shard (a group of one) by
//! hand, as the node and the simulator do between shards.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bytes::Bytes;
use creek_core::{
    Config, Effect, ExecKey, InvokeError, OpId, Replica, ReplicaId, Request, ViewKind,
};
use creek_procs::mpo::{MpoCall, MpoId, Part};
use creek_procs::Registry;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Shard `n`'s replica (replica id `n`).
fn replica(n: u16) -> Replica {
    Replica::new(
        Config::for_replica(ReplicaId(n)),
        Arc::new(Registry::with_builtins()),
    )
    .unwrap()
}

fn put(r: &mut Replica, key: &str, value: &str) {
    let call = ProcCall::new(
        "kv.put",
        encode_args(&[Value::Bytes(b(key)), Value::Bytes(b(value))]),
    );
    let h = r.invoke(Request::strong(call), 0).unwrap();
    let id = op_id(h);
    r.cab_deliver(id);
    r.execute_all();
    r.take_effects();
}

fn op_id(h: ExecKey) -> OpId {
    match h {
        ExecKey::Op(id) => id,
        ExecKey::Local(_) => panic!("a local read"),
    }
}

/// `kv.transfer(from, to, amount)` with `from` on shard 1 and `to` on
/// shard 2, as shard `me` runs it.
fn transfer(id: MpoId, me: u32, from: &str, to: &str, amount: i64) -> ProcCall {
    let args = encode_args(&[
        Value::Bytes(b(from)),
        Value::Bytes(b(to)),
        Value::Int(amount),
    ]);
    let parts = vec![Part::new(1, vec![b(from)]), Part::new(2, vec![b(to)])];
    let mpo = MpoCall::new(id, me, parts, "kv.transfer", args).unwrap();
    let mut client = ProcCall::new("kv.transfer", Bytes::new());
    client.strong = true;
    mpo.call(&client)
}

/// Invoke an MPO at the origin (shard 1's replica) and its copy at shard
/// 2's replica; both are CAB-decided at once. Returns the two op ids.
fn invoke_pair(
    r1: &mut Replica,
    r2: &mut Replica,
    from: &str,
    to: &str,
    amount: i64,
) -> (MpoId, OpId, OpId) {
    let seq = r1.last_issued_seq() + 1;
    let mpo = MpoId { origin: 1, seq };
    let h1 = r1
        .invoke(Request::strong(transfer(mpo, 1, from, to, amount)), 0)
        .unwrap();
    assert_eq!(op_id(h1).seq, seq, "the MPO's id is its origin op's");
    let h2 = r2
        .invoke_mpo_copy(transfer(mpo, 2, from, to, amount), 0)
        .unwrap();
    (mpo, op_id(h1), op_id(h2))
}

/// Hand each replica's MPO effects to the other; returns the views seen.
fn exchange(r1: &mut Replica, r2: &mut Replica) -> Vec<(u16, ViewKind, Result<Bytes, String>)> {
    let mut views = Vec::new();
    for _ in 0..4 {
        r1.execute_all();
        r2.execute_all();
        for (n, effects) in [(1u16, r1.take_effects()), (2, r2.take_effects())] {
            for e in effects {
                let other = if n == 1 { &mut *r2 } else { &mut *r1 };
                match e {
                    Effect::MpoReads {
                        mpo,
                        from,
                        to,
                        reads,
                    } => {
                        assert_eq!(u32::from(n), from);
                        assert_eq!(to, vec![u32::from(3 - n)]);
                        other.mpo_reads(mpo, from, reads);
                    }
                    Effect::View(v) => views.push((n, v.kind, v.outcome.map_err(|a| a.0))),
                    _ => {}
                }
            }
        }
    }
    views
}

fn value(r: &Replica, key: &str) -> Option<String> {
    r.committed_state()
        .get(key.as_bytes())
        .map(|v| String::from_utf8(v.to_vec()).unwrap())
}

fn pair(a: i64, b: i64) -> Bytes {
    Value::List(vec![Value::Int(a), Value::Int(b)]).encode()
}

#[test]
fn a_transfer_across_two_shards_commits_at_its_turn_with_the_exchanged_reads() {
    let (mut r1, mut r2) = (replica(1), replica(2));
    put(&mut r1, "a", "10");
    put(&mut r2, "b", "5");
    let (mpo, id1, id2) = invoke_pair(&mut r1, &mut r2, "a", "b", 3);
    r1.cab_deliver(id1);
    r2.cab_deliver(id2);
    let early = exchange(&mut r1, &mut r2);
    // Tentatively the origin does not know `b` (absent reads as 0).
    assert_eq!(early, vec![(1, ViewKind::Tentative, Ok(pair(7, 3)))]);
    assert_eq!(
        r1.mpo_waiting(),
        Some((id1, Some(mpo), vec![])),
        "its index is not known"
    );
    assert_eq!(
        value(&r1, "a").as_deref(),
        Some("10"),
        "nothing commits before its turn"
    );

    r1.mpo_sequenced(mpo, 1);
    r2.mpo_sequenced(mpo, 1);
    let views = exchange(&mut r1, &mut r2);
    assert_eq!(views, vec![(1, ViewKind::Stable, Ok(pair(7, 8)))]);
    assert_eq!(value(&r1, "a").as_deref(), Some("7"));
    assert_eq!(value(&r1, "b"), None, "shard 1 installs only its own key");
    assert_eq!(value(&r2, "b").as_deref(), Some("8"));
    assert_eq!(value(&r2, "a"), None);
    assert_eq!((r1.mpo_last_index(), r2.mpo_last_index()), (1, 1));
    // Each shard answers a shard that asks again from its record: its
    // verdict, its commit-time proposal, its key's value.
    let again = r2.mpo_reads_of(mpo).unwrap();
    let (verdict, proposal, keys) = creek_procs::mpo::split_reads(&again);
    assert_eq!(verdict, None);
    assert!(proposal > 0, "{again:?}");
    assert_eq!(keys, [(b("b"), Some(b("5")))]);
    assert_eq!(
        again[0].0,
        Bytes::from_static(creek_procs::mpo::VERDICT_KEY)
    );
    // Both shards commit it, their last entry, at one commit time.
    assert_eq!(r1.last_commit_time(), r2.last_commit_time());
    assert!(r1.last_commit_time() >= proposal);
    assert!(r1.is_quiescent() && r2.is_quiescent());
    r1.check_invariants().unwrap();
}

#[test]
fn the_final_view_waits_for_every_shards_reads() {
    let (mut r1, mut r2) = (replica(1), replica(2));
    put(&mut r1, "a", "10");
    let (mpo, id1, id2) = invoke_pair(&mut r1, &mut r2, "a", "b", 1);
    for (r, id) in [(&mut r1, id1), (&mut r2, id2)] {
        r.cab_deliver(id);
        r.mpo_sequenced(mpo, 1);
        r.execute_all();
    }
    let finals = |effects: Vec<Effect>| {
        effects
            .iter()
            .filter(|e| matches!(e, Effect::View(v) if v.kind.is_final()))
            .count()
    };
    let from2: Vec<Effect> = r2.take_effects();
    let e1 = r1.take_effects();
    assert_eq!(
        finals(e1.clone()),
        0,
        "no final view before shard 2's reads"
    );
    assert_eq!(value(&r1, "a").as_deref(), Some("10"));
    for e in from2 {
        if let Effect::MpoReads {
            mpo, from, reads, ..
        } = e
        {
            r1.mpo_reads(mpo, from, reads);
        }
    }
    r1.execute_all();
    assert_eq!(finals(r1.take_effects()), 1);
    assert_eq!(value(&r1, "a").as_deref(), Some("9"));
    // Shard 2 commits once shard 1's reads reach it.
    for e in e1 {
        if let Effect::MpoReads {
            mpo, from, reads, ..
        } = e
        {
            r2.mpo_reads(mpo, from, reads);
        }
    }
    r2.execute_all();
    assert_eq!(value(&r2, "b").as_deref(), Some("1"));
}

#[test]
fn an_mpo_decided_before_its_turn_is_parked_while_other_ops_commit() {
    let (mut r1, mut r2) = (replica(1), replica(2));
    put(&mut r1, "a", "10");
    put(&mut r1, "c", "10");
    let (m1, a1, a2) = invoke_pair(&mut r1, &mut r2, "a", "b", 1);
    let (m2, b1, b2) = invoke_pair(&mut r1, &mut r2, "c", "d", 2);
    let single = r1
        .invoke(
            Request::strong(ProcCall::new(
                "kv.put",
                encode_args(&[Value::Bytes(b("e")), Value::Bytes(b("1"))]),
            )),
            0,
        )
        .unwrap();
    // Shard 1 decides the second MPO first, then a single-shard op, then
    // the first MPO; shard 2 decides them in sequence order.
    r1.mpo_sequenced(m1, 1);
    r1.mpo_sequenced(m2, 2);
    r2.mpo_sequenced(m1, 1);
    r2.mpo_sequenced(m2, 2);
    r1.cab_deliver(b1);
    r1.cab_deliver(op_id(single));
    r1.cab_deliver(a1);
    r2.cab_deliver(a2);
    r2.cab_deliver(b2);
    exchange(&mut r1, &mut r2);
    let committed = r1.committed().to_vec();
    let at = |id| committed.iter().position(|c| *c == id).unwrap();
    assert!(
        at(op_id(single)) < at(a1) && at(a1) < at(b1),
        "{committed:?}"
    );
    assert_eq!(value(&r1, "a").as_deref(), Some("9"));
    assert_eq!(value(&r1, "c").as_deref(), Some("8"));
    assert_eq!(value(&r2, "d").as_deref(), Some("2"));
    assert_eq!((r1.mpo_last_index(), r2.mpo_last_index()), (2, 2));
    assert!(r1.is_quiescent() && r2.is_quiescent());
}

#[test]
fn a_replica_restored_from_a_checkpoint_knows_the_last_index() {
    let (mut r1, mut r2) = (replica(1), replica(2));
    let (mpo, id1, id2) = invoke_pair(&mut r1, &mut r2, "a", "b", 0);
    for (r, id) in [(&mut r1, id1), (&mut r2, id2)] {
        r.cab_deliver(id);
        r.mpo_sequenced(mpo, 1);
    }
    exchange(&mut r1, &mut r2);
    let checkpoint = r2.checkpoint().unwrap();
    let restored = Replica::restore(
        Config::for_replica(ReplicaId(2)),
        Arc::new(Registry::with_builtins()),
        Some(checkpoint),
        Vec::new(),
    )
    .unwrap();
    assert_eq!(restored.mpo_last_index(), 1);
}

#[test]
fn a_weak_mpo_is_refused() {
    let mut r1 = replica(1);
    let call = transfer(MpoId { origin: 1, seq: 1 }, 1, "a", "b", 1);
    let err = r1.invoke(Request::weak(call), 0).unwrap_err();
    assert!(matches!(err, InvokeError::Call(_)), "{err:?}");
    assert!(err.to_string().contains("strong only"));
    assert!(r1.take_effects().is_empty());
}

#[test]
fn a_second_copy_of_an_mpo_on_one_shard_changes_nothing() {
    let (mut r1, mut r2) = (replica(1), replica(2));
    put(&mut r1, "a", "10");
    let (mpo, id1, id2) = invoke_pair(&mut r1, &mut r2, "a", "b", 4);
    // The forward reached two replicas of shard 2; here both copies reach
    // the one replica, decided one after the other.
    let again = r2
        .invoke_mpo_copy(transfer(mpo, 2, "a", "b", 4), 0)
        .unwrap();
    r1.cab_deliver(id1);
    r2.cab_deliver(op_id(again));
    r2.cab_deliver(id2);
    r1.mpo_sequenced(mpo, 1);
    r2.mpo_sequenced(mpo, 1);
    exchange(&mut r1, &mut r2);
    assert_eq!(value(&r2, "b").as_deref(), Some("4"), "transferred once");
    assert_eq!(r2.mpo_last_index(), 1);
    assert!(r2.is_quiescent(), "{:?}", r2.mpo_waiting());
}

/// Another shard handed the origin's shard a copy of the MPO while the
/// origin's own op was late (on a cluster: a leader change), and the copy
/// committed first: the origin's op commits as the second, and its client
/// still learns how the MPO ended (before, the second op ran as a no-op
/// and the client's final view said nil — found by `creek chaos --shards
/// 2`).
#[test]
fn an_origin_whose_op_commits_after_a_copy_answers_the_mpos_outcome() {
    let (mut r1, mut r2) = (replica(1), replica(2));
    put(&mut r1, "a", "10");
    put(&mut r2, "b", "5");
    let (mpo, id1, id2) = invoke_pair(&mut r1, &mut r2, "a", "b", 4);
    let copy = r1
        .invoke_mpo_copy(transfer(mpo, 1, "a", "b", 4), 0)
        .unwrap();
    r1.cab_deliver(op_id(copy));
    r1.cab_deliver(id1);
    r2.cab_deliver(id2);
    r1.mpo_sequenced(mpo, 1);
    r2.mpo_sequenced(mpo, 1);
    let views = exchange(&mut r1, &mut r2);
    assert_eq!(value(&r1, "a").as_deref(), Some("6"), "transferred once");
    assert_eq!(value(&r2, "b").as_deref(), Some("9"));
    let stable: Vec<_> = views
        .iter()
        .filter(|(n, kind, _)| *n == 1 && kind.is_final())
        .collect();
    assert_eq!(stable, vec![&(1, ViewKind::Stable, Ok(pair(6, 9)))]);
}

#[test]
fn the_origin_names_the_mpo_after_its_own_op_and_knows_what_it_holds() {
    let (mut r1, mut r2) = (replica(1), replica(2));
    let h = r1
        .invoke(Request::strong(transfer(MpoId::UNSET, 1, "a", "b", 1)), 0)
        .unwrap();
    let id = op_id(h);
    let mpo = MpoId {
        origin: 1,
        seq: id.seq,
    };
    let call = &r1.op(id).unwrap().call;
    assert_eq!(MpoCall::decode(&call.args).unwrap().id, mpo);
    assert!(r1.mpo_held(mpo) && !r2.mpo_held(mpo));
    let h2 = r2
        .invoke_mpo_copy(transfer(mpo, 2, "a", "b", 1), 0)
        .unwrap();
    assert!(r2.mpo_held(mpo) && !r2.mpo_committed(mpo));
    r1.cab_deliver(id);
    r2.cab_deliver(op_id(h2));
    r1.mpo_sequenced(mpo, 1);
    r2.mpo_sequenced(mpo, 1);
    exchange(&mut r1, &mut r2);
    assert!(r1.mpo_committed(mpo) && r2.mpo_committed(mpo));
    assert!(r2.mpo_held(mpo));
}

/// The CAB-casts among a replica's effects.
fn casts(r: &mut Replica) -> Vec<OpId> {
    r.take_effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::CabCast(id) => Some(id),
            _ => None,
        })
        .collect()
}

/// A copy of an MPO is held, gossiped and run tentatively, but not
/// CAB-cast until the directory has sequenced it: ordered earlier, it
/// would hold its shard's committed order until its index came. Told the
/// index, the replica casts it; a single-shard strong op is cast at once.
#[test]
fn a_copy_is_cast_only_once_the_directory_sequenced_it() {
    let (mut r1, mut r2) = (replica(1), replica(2));
    let (mpo, origin_op, copy_op) = invoke_pair(&mut r1, &mut r2, "a", "b", 1);
    assert_eq!(casts(&mut r1), Vec::<OpId>::new(), "the origin's op");
    assert_eq!(casts(&mut r2), Vec::<OpId>::new(), "the copy");
    assert!(!r2.may_cast(r2.op(copy_op).unwrap()));
    assert_eq!(r2.mpo_unsequenced(0, true), Some((copy_op, mpo)));
    // The origin asks about its own op once a durable write reserved its
    // seq (an origin restarted before its copies went out drives it on),
    // and not for a seq it reclaims from peers (a rebuilt replica may
    // void those); a peer holding the origin's op never asks.
    assert_eq!(r1.mpo_unsequenced(origin_op.seq - 1, true), None);
    assert_eq!(
        r1.mpo_unsequenced(origin_op.seq, true),
        Some((origin_op, mpo))
    );
    let mut peer = Replica::new(
        Config::for_replica(ReplicaId(3)),
        Arc::new(Registry::with_builtins()),
    )
    .unwrap();
    peer.rb_deliver(r1.op(origin_op).unwrap().clone());
    assert!(peer.mpo_held(mpo));
    assert_eq!(peer.mpo_unsequenced(u64::MAX, true), None);
    let mut rebuilt = replica(1);
    let _ = invoke_pair(&mut rebuilt, &mut replica(2), "a", "b", 1);
    rebuilt.reclaim_own(origin_op.seq);
    assert_eq!(rebuilt.mpo_unsequenced(u64::MAX, false), None);
    assert!(
        rebuilt.mpo_unsequenced(u64::MAX, true).is_some(),
        "reclaimed: held, kept"
    );
    rebuilt.void_own(&[origin_op.seq], 0);
    assert_eq!(
        rebuilt.mpo_unsequenced(u64::MAX, true),
        None,
        "a void pending"
    );
    r1.mpo_sequenced(mpo, 1);
    r2.mpo_sequenced(mpo, 1);
    assert_eq!(casts(&mut r1), vec![origin_op]);
    assert_eq!(casts(&mut r2), vec![copy_op]);
    assert_eq!(r2.mpo_unsequenced(0, true), None);
    assert_eq!(r1.mpo_unsequenced(u64::MAX, true), None);
    let put = ProcCall::new(
        "kv.put",
        encode_args(&[Value::Bytes(b("a")), Value::Bytes(b("1"))]),
    );
    let h = r1.invoke(Request::strong(put), 0).unwrap();
    assert_eq!(casts(&mut r1), vec![op_id(h)]);
}

/// A replica catching up meets decided MPOs one after the other: it can
/// name, past the one its committed order waits on, those that still miss
/// an index or another shard's reads, and takes both ahead of their turn.
#[test]
fn a_replica_names_the_mpos_ahead_that_miss_an_index_or_reads() {
    let (mut r1, mut r2) = (replica(1), replica(2));
    put(&mut r1, "a", "10");
    put(&mut r2, "b", "5");
    let (m1, _, a2) = invoke_pair(&mut r1, &mut r2, "a", "b", 1);
    let (m2, _, b2) = invoke_pair(&mut r1, &mut r2, "a", "b", 2);
    let (m3, _, c2) = invoke_pair(&mut r1, &mut r2, "a", "b", 3);
    // Shard 2 decides all three and knows only the first's index.
    r2.mpo_sequenced(m1, 1);
    for id in [a2, b2, c2] {
        r2.cab_deliver(id);
    }
    r2.execute_all();
    let ahead = |r: &Replica| {
        r.mpo_ahead(8)
            .into_iter()
            .map(|(_, m, indexed, missing)| (m, indexed, missing))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ahead(&r2),
        vec![(m2, false, vec![1]), (m3, false, vec![1])],
        "the MPO at its turn is not ahead"
    );
    // The later ones' indices and shard 1's reads of the second come
    // early: the second then misses nothing, the third its reads.
    r2.mpo_sequenced(m2, 2);
    r2.mpo_sequenced(m3, 3);
    r2.mpo_reads(m2, 1, Vec::new());
    assert_eq!(ahead(&r2), vec![(m3, true, vec![1])]);
    assert_eq!(r2.mpo_ahead(0), vec![]);
}

/// Shard `n`'s replica ordering MPOs by the genuine multicast.
fn genuine_replica(n: u16) -> Replica {
    let config = Config {
        mpo_order: creek_core::MpoOrder::Genuine,
        ..Config::for_replica(ReplicaId(n))
    };
    Replica::new(config, Arc::new(Registry::with_builtins())).unwrap()
}

/// Run two genuine-multicast replicas (one per shard, each its own
/// group) until nothing moves: timestamps and reads go to the other, each
/// records its final timestamps (it leads), and its stamps are decided at
/// once.
fn exchange_genuine(r1: &mut Replica, r2: &mut Replica) {
    for _ in 0..16 {
        for (n, r) in [(1u16, &mut *r1), (2, &mut *r2)] {
            assert!(r.mpo_stamps_due(0, true).is_empty(), "replica {n} asks");
            r.execute_all();
        }
        let effects = [(1u16, r1.take_effects()), (2, r2.take_effects())];
        for (n, effects) in effects {
            let (me, other) = if n == 1 {
                (&mut *r1, &mut *r2)
            } else {
                (&mut *r2, &mut *r1)
            };
            for e in effects {
                match e {
                    Effect::MpoTimestamp { mpo, from, ts, .. } => {
                        other.mpo_timestamp(mpo, from, ts)
                    }
                    Effect::MpoReads {
                        mpo, from, reads, ..
                    } => other.mpo_reads(mpo, from, reads),
                    Effect::RbCast(op) if op.call.name.as_ref() == creek_procs::mpo::STAMP => {
                        me.cab_deliver(op.id);
                    }
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn under_the_genuine_multicast_two_shards_that_decide_two_mpos_in_opposite_orders_commit_them_alike(
) {
    let (mut r1, mut r2) = (genuine_replica(1), genuine_replica(2));
    put(&mut r1, "a", "10");
    put(&mut r1, "c", "10");
    let (x, x1, x2) = invoke_pair(&mut r1, &mut r2, "a", "b", 1);
    let (y, y1, y2) = invoke_pair(&mut r1, &mut r2, "c", "b", 2);
    // A copy is cast at once: no directory round first.
    assert!(r2
        .take_effects()
        .iter()
        .any(|e| matches!(e, Effect::CabCast(id) if *id == x2)));
    r1.cab_deliver(x1);
    r1.cab_deliver(y1);
    r2.cab_deliver(y2);
    r2.cab_deliver(x2);
    assert_eq!(r1.mpo_timestamp_of(x), Some(1));
    assert_eq!(r2.mpo_timestamp_of(x), Some(2));
    assert_eq!(
        value(&r1, "a").as_deref(),
        Some("10"),
        "nothing commits before the final timestamps are logged"
    );
    exchange_genuine(&mut r1, &mut r2);
    // Both end with final timestamp 2: the tie goes to the lower id, x.
    assert_eq!((r1.mpo_index(x), r1.mpo_index(y)), (Some(1), Some(2)));
    assert_eq!((r2.mpo_index(x), r2.mpo_index(y)), (Some(1), Some(2)));
    let order = |r: &Replica, a: OpId, b: OpId| {
        let at = |id| r.committed().iter().position(|c| *c == id).unwrap();
        at(a) < at(b)
    };
    assert!(order(&r1, x1, y1) && order(&r2, x2, y2));
    assert_eq!(value(&r1, "a").as_deref(), Some("9"));
    assert_eq!(value(&r1, "c").as_deref(), Some("8"));
    assert_eq!(value(&r2, "b").as_deref(), Some("3"));
    assert!(r1.is_quiescent() && r2.is_quiescent());
    r1.check_invariants().unwrap();
    r2.check_invariants().unwrap();
}

#[test]
fn under_the_genuine_multicast_an_mpo_waits_for_one_with_a_smaller_timestamp_here() {
    let (mut r1, mut r2) = (genuine_replica(1), genuine_replica(2));
    put(&mut r1, "c", "10");
    let (x, x1, x2) = invoke_pair(&mut r1, &mut r2, "a", "b", 1);
    let (y, y1, y2) = invoke_pair(&mut r1, &mut r2, "c", "d", 2);
    // Shard 1 decides x then y; shard 2 decides only y: x has a timestamp
    // on shard 1 and none on shard 2, so y, stamped, must wait on shard 1.
    r1.cab_deliver(x1);
    r1.cab_deliver(y1);
    r2.cab_deliver(y2);
    exchange_genuine(&mut r1, &mut r2);
    assert_eq!(
        r1.mpo_index(y),
        None,
        "y waits behind x, which has no final timestamp"
    );
    assert_eq!(r1.mpo_index(x), None);
    r2.cab_deliver(x2);
    exchange_genuine(&mut r1, &mut r2);
    // y: max(2, 1) = 2, logged on shard 2 before x's copy was decided
    // there, so x's timestamp there is 3 and its final one too: y goes
    // first on both shards, though shard 1 decided x first.
    assert_eq!((r1.mpo_index(y), r1.mpo_index(x)), (Some(1), Some(2)));
    assert_eq!((r2.mpo_index(y), r2.mpo_index(x)), (Some(1), Some(2)));
    let at = |id| r1.committed().iter().position(|c| *c == id).unwrap();
    assert!(at(y1) < at(x1));
    assert_eq!(value(&r2, "d").as_deref(), Some("2"));
    assert!(r1.is_quiescent() && r2.is_quiescent());
}
