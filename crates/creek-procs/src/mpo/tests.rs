#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_exec::basic::MapSnapshot;
use creek_exec::txn::TxnLimits;
use creek_types::value::{encode_args, Value};
use creek_types::{ClientRequestId, ProcCall};
use proptest::prelude::*;

use super::*;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn state(pairs: &[(&str, &str)]) -> MapSnapshot {
    MapSnapshot(pairs.iter().map(|(k, v)| (b(k), b(v))).collect())
}

const ID: MpoId = MpoId { origin: 3, seq: 9 };

/// `kv.transfer(a, b, amount)` with `a` on shard 1 and `b` on shard 2, as
/// shard `me` runs it.
fn transfer(me: u32, amount: i64) -> MpoCall {
    transfer_between(me, "a", "b", amount)
}

/// `kv.transfer(from, to, amount)` declaring key `a` on shard 1 and `b`
/// on shard 2, as shard `me` runs it.
fn transfer_between(me: u32, from: &str, to: &str, amount: i64) -> MpoCall {
    let args = encode_args(&[
        Value::Bytes(b(from)),
        Value::Bytes(b(to)),
        Value::Int(amount),
    ]);
    let parts = vec![Part::new(2, vec![b("b")]), Part::new(1, vec![b("a")])];
    MpoCall::new(ID, me, parts, "kv.transfer", args).unwrap()
}

fn run(call: &MpoCall, on: &MapSnapshot, request: Option<ClientRequestId>) -> Executed {
    let registry = Registry::with_builtins();
    let mut client = ProcCall::new("kv.transfer", Bytes::new());
    client.request_id = request;
    client.strong = true;
    execute_call(&registry, on, TxnLimits::default(), &call.call(&client))
}

/// The data writes of an execution (Creek's own records left out).
fn data(e: &Executed) -> Vec<(Bytes, Option<Bytes>)> {
    e.writes
        .iter()
        .filter(|(k, _)| k.first() != Some(&0))
        .cloned()
        .collect()
}

/// The inputs of a copy given what shard `from` sent.
fn inputs(index: u64, from: u32, reads: &Reads) -> Inputs {
    Inputs {
        index,
        remote: reads[1..].to_vec(),
        verdicts: vec![(from, reads[0].1.clone())],
        time: 0,
    }
}

/// Both shards' copies, each given the other's reads.
fn exchange(a: &MapSnapshot, bs: &MapSnapshot, amount: i64, index: u64) -> (Executed, Executed) {
    let (on1, on2) = (transfer(1, amount), transfer(2, amount));
    let client = ProcCall::new("kv.transfer", Bytes::new());
    let (r1, r2) = (on1.read_local(&client, a), on2.read_local(&client, bs));
    assert!(on2.reads_fit(1, &r1) && on1.reads_fit(2, &r2));
    let e1 = run(&on1.with_inputs(inputs(index, 2, &r2)), a, None);
    let e2 = run(&on2.with_inputs(inputs(index, 1, &r1)), bs, None);
    (e1, e2)
}

#[test]
fn each_shard_computes_the_same_result_and_installs_only_its_own_writes() {
    let (a, bs) = (state(&[("a", "10")]), state(&[("b", "5")]));
    let (e1, e2) = exchange(&a, &bs, 3, 1);
    let both = Value::List(vec![Value::Int(7), Value::Int(8)]).encode();
    assert_eq!(e1.outcome, Ok(both.clone()));
    assert_eq!(e2.outcome, Ok(both));
    assert_eq!(data(&e1), vec![(b("a"), Some(b("7")))]);
    assert_eq!(data(&e2), vec![(b("b"), Some(b("8")))]);
    // Reads of the other shard's keys are not reads of this shard's state.
    assert!(e1.reads.iter().all(|(k, _)| k != "b"));
    assert!(e2.reads.iter().all(|(k, _)| k != "a"));
}

/// A shard's own map (kept once its keys can move) judges its part of an
/// operation across shards: when it gives one of the part's keys another
/// shard (the key moved away since the directory sequenced the
/// operation), that shard's verdict is `WRONG_SHARD`, every shard follows
/// it, and nothing is written or recorded, so the client's retry runs
/// afresh. A shard whose map still places its keys there runs as before.
#[test]
fn a_part_whose_keys_moved_away_is_refused_on_every_shard() {
    let elsewhere = creek_shard::ShardMap::single(1, creek_shard::Shard::default());
    let mut bs = state(&[("b", "5")]);
    bs.0.insert(
        Bytes::from_static(crate::ownership::MAP_KEY),
        crate::ownership::encode_owned(creek_shard::ShardId(2), &elsewhere),
    );
    let a = state(&[("a", "10")]);
    let (e1, e2) = exchange(&a, &bs, 3, 1);
    for e in [&e1, &e2] {
        let abort = e.outcome.clone().unwrap_err().0;
        assert!(
            abort.starts_with("WRONG_SHARD: kv.transfer on key \"b\""),
            "{abort}"
        );
        assert!(data(e).is_empty(), "{:?}", data(e));
        assert!(e.writes.iter().all(|(k, _)| !k.starts_with(b"\0sessions/")));
        assert!(e.reads.iter().all(|(k, _)| k != crate::ownership::MAP_KEY));
    }
    // Placed there by its own map, a part runs.
    let mut here = creek_shard::ShardMap::single(1, creek_shard::Shard::default());
    here.default = creek_shard::Placement::Pinned(creek_shard::ShardId(2));
    here.shards = [(creek_shard::ShardId(2), creek_shard::Shard::default())].into();
    let mut bs = state(&[("b", "5")]);
    bs.0.insert(
        Bytes::from_static(crate::ownership::MAP_KEY),
        crate::ownership::encode_owned(creek_shard::ShardId(2), &here),
    );
    let (e1, e2) = exchange(&a, &bs, 3, 1);
    assert!(e1.outcome.is_ok() && e2.outcome.is_ok(), "{:?}", e2.outcome);
    assert_eq!(data(&e2), vec![(b("b"), Some(b("8")))]);
}

#[test]
fn an_abort_is_the_same_on_every_shard_and_writes_no_data() {
    let (a, bs) = (state(&[("a", "2")]), state(&[("b", "5")]));
    let (e1, e2) = exchange(&a, &bs, 3, 1);
    assert!(e1.outcome.is_err());
    assert_eq!(e1.outcome, e2.outcome);
    assert!(data(&e1).is_empty() && data(&e2).is_empty());
}

#[test]
fn a_committed_copy_records_its_index_and_reads_and_forgets_old_records() {
    let old = MpoId { origin: 1, seq: 1 };
    let mut a = state(&[("a", "10")]);
    a.0.insert(order_key(4), encode_id(old));
    a.0.insert(reads_key(old), reads_value(&vec![]).encode());
    let index = READS_KEPT + 4;
    let (e1, _) = exchange(&a, &state(&[("b", "5")]), 1, index);
    let w: BTreeMap<Bytes, Option<Bytes>> = e1.writes.into_iter().collect();
    let seq = w[&Bytes::from_static(SEQ_KEY)].clone();
    assert_eq!(decode_seq(seq.as_deref()), index);
    let reads = w[&reads_key(ID)].clone().unwrap();
    let verdict = (Bytes::from_static(VERDICT_KEY), None);
    assert_eq!(
        decode_reads(&reads),
        Some(vec![verdict, (b("a"), Some(b("10")))])
    );
    assert_eq!(decode_id(w[&order_key(index)].as_ref().unwrap()), Some(ID));
    assert_eq!(w[&order_key(4)], None);
    assert_eq!(w[&reads_key(old)], None);
    assert_eq!(w[&outcome_key(old)], None);
    assert_eq!(decode_seq(None), 0);
    // How it ended, which a second op of the MPO on this shard answers.
    let mut after = a.clone();
    after
        .0
        .insert(outcome_key(ID), w[&outcome_key(ID)].clone().unwrap());
    let registry = Registry::with_builtins();
    let answer = |on: &MapSnapshot| {
        execute_call(&registry, on, TxnLimits::default(), &answer_call(ID)).outcome
    };
    assert_eq!(answer(&after), e1.outcome);
    assert!(e1.outcome.is_ok());
    assert!(answer(&a).unwrap_err().0.contains("no longer kept"));
}

#[test]
fn a_tentative_copy_reads_other_shards_keys_as_absent() {
    let bs = state(&[("b", "5")]);
    // Shard 2 does not hold `a`: tentatively the transfer finds 0 there.
    let e = run(&transfer(2, 3), &bs, None);
    assert!(e.outcome.is_err());
    let e = run(&transfer(2, 0), &bs, None);
    assert_eq!(
        e.outcome,
        Ok(Value::List(vec![Value::Int(0), Value::Int(5)]).encode())
    );
    assert!(e
        .writes
        .iter()
        .all(|(k, _)| k.first() == Some(&0) || k == "b"));
}

#[test]
fn a_retried_request_answers_what_it_answered_on_every_shard() {
    let (a, bs) = (state(&[("a", "10")]), state(&[("b", "5")]));
    let rid = Some(ClientRequestId { client: 77, seq: 1 });
    let on1 = transfer(1, 3).with_inputs(Inputs {
        index: 1,
        remote: vec![(b("b"), Some(b("5")))],
        verdicts: vec![(2, None)],
        time: 0,
    });
    let first = run(&on1, &a, rid);
    // The state after the first run, the session entry included.
    let mut after = a.0.clone();
    for (k, v) in &first.writes {
        match v {
            Some(v) => after.insert(k.clone(), v.clone()),
            None => after.remove(k),
        };
    }
    let again = run(&on1, &MapSnapshot(after), rid);
    assert_eq!(again.outcome, first.outcome);
    assert!(
        data(&again).is_empty(),
        "the retry wrote {:?}",
        data(&again)
    );
    let _ = bs;
}

#[test]
fn every_shard_follows_the_session_verdict_of_the_lowest_shard_with_one() {
    // Shard 1 answered this request before (its session table holds the
    // outcome); shard 2 does not know it (its entry expired, or it never
    // saw the first attempt). Both answer without running.
    let rid = ClientRequestId { client: 9, seq: 4 };
    let mut client = ProcCall::new("kv.transfer", Bytes::new());
    client.request_id = Some(rid);
    let first = run(
        &transfer(1, 3).with_inputs(Inputs {
            index: 1,
            remote: vec![(b("b"), Some(b("5")))],
            verdicts: vec![(2, None)],
            time: 0,
        }),
        &state(&[("a", "10")]),
        Some(rid),
    );
    let mut a = state(&[("a", "7")]);
    for (k, v) in first
        .writes
        .iter()
        .filter(|(k, _)| *k == crate::session::entry_key(rid))
    {
        a.0.insert(k.clone(), v.clone().unwrap());
    }
    let bs = state(&[("b", "8")]);
    let (on1, on2) = (transfer(1, 3), transfer(2, 3));
    let (r1, r2) = (on1.read_local(&client, &a), on2.read_local(&client, &bs));
    assert!(r1[0].1.is_some(), "shard 1 has an answer: {r1:?}");
    assert_eq!(r2[0].1, None, "shard 2 would run it");
    let e1 = run(&on1.with_inputs(inputs(2, 2, &r2)), &a, Some(rid));
    let e2 = run(&on2.with_inputs(inputs(2, 1, &r1)), &bs, Some(rid));
    assert_eq!(e1.outcome, first.outcome);
    assert_eq!(e2.outcome, first.outcome);
    assert!(data(&e1).is_empty() && data(&e2).is_empty(), "applied once");
}

#[test]
fn a_multi_key_read_sees_every_shards_values() {
    let args = encode_args(&[Value::List(vec![
        Value::Bytes(b("x")),
        Value::Bytes(b("y")),
        Value::Bytes(b("z")),
    ])]);
    let parts = vec![
        Part::new(0, vec![b("x"), b("z")]),
        Part::new(5, vec![b("y")]),
    ];
    let call = MpoCall::new(ID, 5, parts, "kv.mget", args).unwrap();
    let remote = vec![(b("x"), Some(b("1"))), (b("z"), None)];
    let e = run(
        &call.with_inputs(Inputs {
            index: 2,
            remote,
            verdicts: vec![(0, None)],
            time: 0,
        }),
        &state(&[("y", "2")]),
        None,
    );
    let want = Value::List(vec![Value::Bytes(b("1")), Value::Bytes(b("2")), Value::Nil]);
    assert_eq!(e.outcome, Ok(want.encode()));
}

#[test]
fn malformed_mpos_are_refused_with_the_reason() {
    let args = Bytes::new();
    let one = vec![Part::new(1, vec![b("a")])];
    assert!(MpoCall::new(ID, 1, one, "kv.get", args.clone())
        .unwrap_err()
        .contains("2 to"));
    let two = |ka: &str, kb: &str| vec![Part::new(1, vec![b(ka)]), Part::new(2, vec![b(kb)])];
    assert!(MpoCall::new(ID, 3, two("a", "b"), "kv.get", args.clone())
        .unwrap_err()
        .contains("not involved"));
    assert!(MpoCall::new(ID, 1, two("a", "a"), "kv.get", args.clone())
        .unwrap_err()
        .contains("two shards"));
    assert!(MpoCall::new(ID, 1, two("\0a", "b"), "kv.get", args.clone())
        .unwrap_err()
        .contains("reserved"));
    assert!(MpoCall::new(ID, 1, two("a", "b"), RUN, args.clone()).is_err());
    // Inputs must be exactly the other shards' keys.
    let call = transfer(1, 1).with_inputs(Inputs {
        index: 1,
        remote: vec![(b("c"), None)],
        verdicts: vec![(2, None)],
        time: 0,
    });
    assert!(MpoCall::decode(&call.encode())
        .unwrap_err()
        .contains("remote reads"));
    // A malformed call aborts and changes nothing.
    let registry = Registry::with_builtins();
    let e = execute_call(
        &registry,
        &state(&[]),
        TxnLimits::default(),
        &ProcCall::new(RUN, Bytes::from_static(b"\x01\x02")),
    );
    assert!(e.outcome.is_err() && e.writes.is_empty());
    // And is refused when invoked.
    assert!(registry
        .check(&ProcCall::new(RUN, Bytes::new()), &TxnLimits::default())
        .is_err());
}

proptest! {
    #[test]
    fn round_trip(amount in 0i64..1000, index in 1u64..u64::MAX / 2, with_inputs: bool, me in 1u32..3) {
        let mut call = transfer(me, amount);
        if with_inputs {
            let other = if me == 1 { "b" } else { "a" };
            let verdicts = vec![(3 - me, Some(encode_answer(&Ok(b("x")))))];
            call = call.with_inputs(Inputs { index, remote: vec![(b(other), Some(b("4")))], verdicts, time: index / 3 + 1 });
        }
        prop_assert_eq!(MpoCall::decode(&call.encode()), Ok(call));
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = MpoCall::decode(&Bytes::from(data.clone()));
        let _ = decode_reads(&Bytes::from(data.clone()));
        let _ = decode_id(&data);
    }
}

/// A call that touches a key no shard declared aborts on every shard with
/// the same message naming the key, and installs nothing: here a transfer
/// whose parts declare other keys than the ones it moves money between.
#[test]
fn an_access_outside_the_declared_keys_aborts_naming_the_key() {
    let (one, two) = (state(&[("a", "10"), ("x", "1")]), state(&[("b", "3")]));
    let client = ProcCall::new("kv.transfer", Bytes::new());
    let (c1, c2) = (
        transfer_between(1, "a", "x", 5),
        transfer_between(2, "a", "x", 5),
    );
    let (r1, r2) = (c1.read_local(&client, &one), c2.read_local(&client, &two));
    let e1 = run(&c1.with_inputs(inputs(1, 2, &r2)), &one, None);
    let e2 = run(&c2.with_inputs(inputs(1, 1, &r1)), &two, None);
    for e in [&e1, &e2] {
        let abort = e.outcome.as_ref().unwrap_err();
        assert!(
            abort
                .0
                .contains(r#"key "x" is not among the keys it declared"#),
            "{abort}"
        );
        assert!(data(e).is_empty(), "{:?}", e.writes);
    }
    assert_eq!(e1.outcome, e2.outcome);
}

/// Keyspaces' keys can be an MPO's keys (a user procedure's declared
/// keys); Creek's other records cannot.
#[test]
fn keyspace_keys_are_keys_and_other_records_are_not() {
    let part = |shard, key: Bytes| Part::new(shard, vec![key]);
    let ks = |k: &str| crate::keyspace::data_key("accounts", k.as_bytes());
    let args = Bytes::new();
    let ok = MpoCall::new(
        ID,
        1,
        vec![part(1, ks("a")), part(2, ks("b"))],
        "p",
        args.clone(),
    );
    assert!(ok.is_ok(), "{ok:?}");
    let session = Bytes::from_static(b"\0sess/1");
    let refused = MpoCall::new(ID, 1, vec![part(1, ks("a")), part(2, session)], "p", args);
    assert!(refused.unwrap_err().contains("reserved"));
    assert_eq!(key_name(&ks("b")), r#"key "b" of keyspace accounts"#);
}

/// A shard's reads start with its verdict and stay strictly ascending
/// with a keyspace's keys (`\0ks/…`) too, so they cross the wire.
#[test]
fn reads_of_keyspace_keys_keep_the_verdict_first() {
    let ks = |k: &str| crate::keyspace::data_key("accounts", k.as_bytes());
    let parts = vec![Part::new(1, vec![ks("a")]), Part::new(2, vec![ks("b")])];
    let call = MpoCall::new(ID, 1, parts, "both", Bytes::new()).unwrap();
    let on = MapSnapshot([(ks("a"), b("1"))].into_iter().collect());
    let reads = call.read_local(&ProcCall::new("both", Bytes::new()), &on);
    assert!(call.reads_fit(1, &reads), "{reads:?}");
    assert_eq!(reads_from_value(&reads_value(&reads)), Some(reads));
}

/// `kv.mput` writing key `a` (shard 1) and `p/x` under shard 2's prefix
/// `p/`, as shard `me` runs it.
fn put_under_prefix(me: u32, key: &str) -> MpoCall {
    let list = |xs: [&str; 2]| Value::List(xs.iter().map(|x| Value::Bytes(b(x))).collect());
    let args = encode_args(&[list(["a", key]), list(["1", "2"])]);
    let parts = vec![
        Part::new(1, vec![b("a")]),
        Part {
            shard: 2,
            keys: Vec::new(),
            prefixes: vec![b("p/")],
        },
    ];
    MpoCall::new(ID, me, parts, "kv.mput", args).unwrap()
}

/// A write under a part's prefix is installed by that shard only, a part
/// may hold only prefixes (it sends just its verdict), and prefixes cross
/// the wire.
#[test]
fn a_write_under_a_prefix_is_installed_by_its_shard_only() {
    let (one, two) = (state(&[]), state(&[]));
    let client = ProcCall::new("kv.mput", Bytes::new());
    let (c1, c2) = (put_under_prefix(1, "p/x"), put_under_prefix(2, "p/x"));
    assert_eq!(MpoCall::decode(&c2.encode()), Ok(c2.clone()));
    let (r1, r2) = (c1.read_local(&client, &one), c2.read_local(&client, &two));
    assert_eq!(r2.len(), 1, "only the verdict: {r2:?}");
    let e1 = run(&c1.with_inputs(inputs(1, 2, &r2)), &one, None);
    let e2 = run(&c2.with_inputs(inputs(1, 1, &r1)), &two, None);
    assert!(e1.outcome.is_ok() && e2.outcome.is_ok(), "{e1:?} {e2:?}");
    assert_eq!(data(&e1), vec![(b("a"), Some(b("1")))]);
    assert_eq!(data(&e2), vec![(b("p/x"), Some(b("2")))]);
    // A key under no prefix and not declared aborts on both.
    let (c1, c2) = (put_under_prefix(1, "q/x"), put_under_prefix(2, "q/x"));
    let e1 = run(&c1.with_inputs(inputs(1, 2, &r2)), &one, None);
    let e2 = run(&c2.with_inputs(inputs(1, 1, &r1)), &two, None);
    assert_eq!(e1.outcome, e2.outcome);
    assert!(e1
        .outcome
        .unwrap_err()
        .0
        .contains(r#"key "q/x" is not among"#));
}

/// A prefix is for writing: a read of a key under it that no part names
/// aborts the same way as any undeclared key.
#[test]
fn a_read_under_a_prefix_aborts() {
    let parts = vec![
        Part::new(1, vec![b("a")]),
        Part {
            shard: 2,
            keys: vec![b("b")],
            prefixes: vec![b("p/")],
        },
    ];
    let args = encode_args(&[Value::List(vec![
        Value::Bytes(b("a")),
        Value::Bytes(b("p/x")),
    ])]);
    let call = MpoCall::new(ID, 2, parts, "kv.mget", args).unwrap();
    let e = run(&call, &state(&[("p/x", "1")]), None);
    assert!(e
        .outcome
        .unwrap_err()
        .0
        .contains(r#"key "p/x" is not among"#));
}

/// Prefixes must not overlap another part's keys or prefixes, nor each
/// other.
#[test]
fn overlapping_prefixes_are_refused() {
    let with = |keys: &[&str], prefixes: &[&str]| Part {
        shard: 2,
        keys: keys.iter().map(|k| b(k)).collect(),
        prefixes: prefixes.iter().map(|k| b(k)).collect(),
    };
    let try_parts = |two: Part| {
        MpoCall::new(
            ID,
            1,
            vec![Part::new(1, vec![b("p/a")]), two],
            "kv.mget",
            Bytes::new(),
        )
    };
    assert!(try_parts(with(&["b"], &["q/"])).is_ok());
    assert!(
        try_parts(with(&["p/b"], &["p/b/"])).is_ok(),
        "own key under own prefix"
    );
    for bad in [
        with(&[], &["p/"]),
        with(&["b"], &["q/", "q/r"]),
        with(&["b"], &[""]),
    ] {
        let e = try_parts(bad).unwrap_err();
        assert!(e.contains("prefix"), "{e}");
    }
}
