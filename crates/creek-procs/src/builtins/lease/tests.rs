#![allow(clippy::unwrap_used)]

use bytes::Bytes;

use super::*;
use crate::builtins::testkit::Harness;
use creek_exec::txn::Abort;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

const S: u64 = 1_000_000;

fn b(s: &str) -> Value {
    Value::Bytes(Bytes::copy_from_slice(s.as_bytes()))
}

/// `name(args)` as an op of time `at_s` seconds, strong or weak.
fn call_at(
    h: &mut Harness,
    name: &str,
    args: &[Value],
    at_s: u64,
    strong: bool,
) -> Result<Value, Abort> {
    let mut call = ProcCall::new(name, encode_args(args));
    call.time_us = at_s * S;
    call.strong = strong;
    let out = h.exec(&call).outcome?;
    Ok(Value::decode(&out).expect("a result"))
}

fn strong(h: &mut Harness, name: &str, args: &[Value], at_s: u64) -> Value {
    call_at(h, name, args, at_s, true).unwrap_or_else(|e| panic!("{name} aborted: {e}"))
}

fn grant(h: &mut Harness, ttl: i64, at_s: u64) -> i64 {
    match strong(h, "lease.grant", &[Value::Int(ttl)], at_s) {
        Value::Int(id) => id,
        other => panic!("lease.grant answered {other}"),
    }
}

fn get(h: &mut Harness, key: &str) -> Value {
    h.ok("kv.get", &[b(key)])
}

fn expire(h: &mut Harness, ids: &[u64], at_s: u64) -> Value {
    let call = ProcCall {
        time_us: at_s * S,
        strong: true,
        ..expire_call(ids)
    };
    let out = h.exec(&call).outcome.expect("expiry runs");
    Value::decode(&out).expect("a result")
}

fn internal_keys(h: &Harness) -> Vec<Bytes> {
    h.keys()
        .into_iter()
        .filter(|k| k.starts_with(b"\0tlease/k/") || k.starts_with(b"\0tlease/of/"))
        .collect()
}

#[test]
fn a_leased_key_is_deleted_when_its_lease_expires_and_not_before() {
    let mut h = Harness::new();
    let id = grant(&mut h, 10, 100);
    assert_eq!(id, 1);
    assert_eq!(grant(&mut h, 5, 100), 2, "ids count up");
    strong(&mut h, "kv.put", &[b("a"), b("1"), Value::Int(id)], 101);
    strong(&mut h, "kv.put", &[b("b"), b("2"), Value::Int(id)], 101);
    strong(&mut h, "kv.put", &[b("plain"), b("3")], 101);
    assert_eq!(
        strong(&mut h, "lease.ttl", &[Value::Int(id)], 104),
        Value::List(vec![
            Value::Int(10),
            Value::Int(6),
            Value::List(vec![b("a"), b("b")])
        ])
    );
    // An expiry op ordered before the deadline (by its own time) leaves it.
    assert_eq!(expire(&mut h, &[1], 109), Value::Int(0));
    assert_eq!(get(&mut h, "a"), b("1"));
    // At the deadline both keys go, with the lease and its index.
    assert_eq!(expire(&mut h, &[1], 110), Value::Int(2));
    assert_eq!(get(&mut h, "a"), Value::Nil);
    assert_eq!(get(&mut h, "b"), Value::Nil);
    assert_eq!(get(&mut h, "plain"), b("3"));
    assert!(internal_keys(&h).is_empty(), "{:?}", internal_keys(&h));
    assert_eq!(
        h.ok("lease.list", &[]),
        Value::List(vec![Value::Int(2)]),
        "the other lease is still live"
    );
    let gone = call_at(&mut h, "lease.keep_alive", &[Value::Int(id)], 111, true);
    assert!(gone.unwrap_err().0.contains("lease 1 not found"));
}

#[test]
fn a_keep_alive_moves_the_deadline_and_an_expired_lease_cannot_be_kept() {
    let mut h = Harness::new();
    let id = grant(&mut h, 10, 100);
    strong(&mut h, "kv.put", &[b("k"), b("v"), Value::Int(id)], 100);
    assert_eq!(
        strong(&mut h, "lease.keep_alive", &[Value::Int(id)], 108),
        Value::Int(10)
    );
    // The old deadline (110) passed by the expiry op's time, the new (118) not.
    assert_eq!(expire(&mut h, &[1], 115), Value::Int(0));
    assert_eq!(get(&mut h, "k"), b("v"));
    // Past its deadline a lease is not found, even before the expiry op.
    let late = call_at(&mut h, "lease.keep_alive", &[Value::Int(id)], 118, true);
    assert!(late.unwrap_err().0.contains("not found"));
    assert_eq!(expire(&mut h, &[1], 118), Value::Int(1));
    assert_eq!(get(&mut h, "k"), Value::Nil);
}

#[test]
fn a_write_without_the_lease_or_a_delete_detaches_the_key() {
    let mut h = Harness::new();
    let id = grant(&mut h, 10, 0);
    for k in ["put", "mput", "cas", "txn", "del", "incr"] {
        strong(&mut h, "kv.put", &[b(k), b("1"), Value::Int(id)], 0);
    }
    strong(&mut h, "kv.put", &[b("put"), b("2")], 1);
    strong(
        &mut h,
        "kv.mput",
        &[Value::List(vec![b("mput")]), Value::List(vec![b("2")])],
        1,
    );
    strong(&mut h, "kv.cas", &[b("cas"), b("1"), b("2")], 1);
    let put = Value::List(vec![b("put"), b("txn"), b("2")]);
    strong(
        &mut h,
        "kv.txn",
        &[
            Value::List(vec![]),
            Value::List(vec![put]),
            Value::List(vec![]),
        ],
        1,
    );
    strong(&mut h, "kv.delete", &[b("del")], 1);
    // An increment keeps the key's lease, as Redis's INCR keeps a TTL.
    strong(&mut h, "kv.incr", &[b("incr"), Value::Int(1)], 1);
    strong(&mut h, "kv.put", &[b("del"), b("again")], 2);
    assert_eq!(
        expire(&mut h, &[1], 10),
        Value::Int(1),
        "only incr's key was attached"
    );
    for (k, v) in [
        ("put", "2"),
        ("mput", "2"),
        ("cas", "2"),
        ("txn", "2"),
        ("del", "again"),
    ] {
        assert_eq!(get(&mut h, k), b(v), "{k}");
    }
    assert_eq!(get(&mut h, "incr"), Value::Nil);
    assert!(internal_keys(&h).is_empty(), "{:?}", internal_keys(&h));
}

#[test]
fn a_key_put_with_another_lease_moves_to_it() {
    let mut h = Harness::new();
    let (one, two) = (grant(&mut h, 10, 0), grant(&mut h, 100, 0));
    strong(&mut h, "kv.put", &[b("k"), b("v"), Value::Int(one)], 0);
    strong(&mut h, "kv.put", &[b("k"), b("w"), Value::Int(two)], 1);
    assert_eq!(expire(&mut h, &[1], 10), Value::Int(0));
    assert_eq!(get(&mut h, "k"), b("w"));
    assert_eq!(
        strong(&mut h, "lease.revoke", &[Value::Int(two)], 2),
        Value::Int(1)
    );
    assert_eq!(get(&mut h, "k"), Value::Nil);
    assert!(h.ok("lease.list", &[]) == Value::List(vec![]));
}

#[test]
fn revoking_deletes_a_page_of_keys_per_op_and_expiry_finishes_the_rest() {
    let mut h = Harness::new();
    let id = grant(&mut h, 60, 0);
    let n = KEYS_PER_OP + 5;
    for i in 0..n {
        strong(
            &mut h,
            "kv.put",
            &[b(&format!("k{i:05}")), b("v"), Value::Int(id)],
            0,
        );
    }
    assert_eq!(
        strong(&mut h, "lease.revoke", &[Value::Int(id)], 1),
        Value::Int(KEYS_PER_OP as i64)
    );
    // Revoked: not listed, not renewable, refused as a new key's lease,
    // and due for the next expiry op whatever its time.
    assert_eq!(h.ok("lease.list", &[]), Value::List(vec![]));
    let put = call_at(
        &mut h,
        "kv.put",
        &[b("new"), b("v"), Value::Int(id)],
        1,
        true,
    );
    assert!(put.unwrap_err().0.contains("not found"));
    assert_eq!(expire(&mut h, &[1], 1), Value::Int(5));
    assert!(internal_keys(&h).is_empty());
    assert!(!h.keys().iter().any(|k| k.starts_with(RECORD_PREFIX)));
    assert_eq!(h.keys().iter().filter(|k| k.first() != Some(&0)).count(), 0);
}

#[test]
fn a_new_leaders_extension_gives_every_live_lease_a_whole_ttl() {
    let mut h = Harness::new();
    let (short, long) = (grant(&mut h, 10, 0), grant(&mut h, 1000, 0));
    strong(&mut h, "kv.put", &[b("k"), b("v"), Value::Int(short)], 0);
    let mut call = extend_call();
    call.time_us = 8 * S;
    call.strong = true;
    let out = h.exec(&call).outcome.expect("extension runs");
    assert_eq!(Value::decode(&out).unwrap(), Value::Int(2));
    assert_eq!(expire(&mut h, &[1, 2], 17), Value::Int(0));
    assert_eq!(
        strong(&mut h, "lease.ttl", &[Value::Int(short)], 17),
        Value::List(vec![
            Value::Int(10),
            Value::Int(1),
            Value::List(vec![b("k")])
        ])
    );
    assert_eq!(expire(&mut h, &[1, 2], 18), Value::Int(1));
    assert_eq!(h.ok("lease.list", &[]), Value::List(vec![Value::Int(long)]));
}

#[test]
fn put_ttl_grants_a_lease_for_its_key() {
    let mut h = Harness::new();
    strong(
        &mut h,
        "kv.put_ttl",
        &[b("session"), b("x"), Value::Int(30)],
        0,
    );
    assert_eq!(h.ok("lease.list", &[]), Value::List(vec![Value::Int(1)]));
    // A weak one is fine too: nothing is answered that the order may change.
    call_at(
        &mut h,
        "kv.put_ttl",
        &[b("other"), b("y"), Value::Int(30)],
        0,
        false,
    )
    .unwrap();
    assert_eq!(expire(&mut h, &[1, 2], 30), Value::Int(2));
    assert_eq!(get(&mut h, "session"), Value::Nil);
}

#[test]
fn grants_and_keep_alives_run_at_the_strong_level_only() {
    let mut h = Harness::new();
    let weak = call_at(&mut h, "lease.grant", &[Value::Int(10)], 0, false);
    assert!(weak
        .unwrap_err()
        .0
        .contains("invoke it at the strong level"));
    let id = grant(&mut h, 10, 0);
    let weak = call_at(&mut h, "lease.keep_alive", &[Value::Int(id)], 0, false);
    assert!(weak.unwrap_err().0.contains("strong level"));
    // Revokes and reads run at any level.
    call_at(&mut h, "lease.ttl", &[Value::Int(id)], 1, false).unwrap();
    call_at(&mut h, "lease.revoke", &[Value::Int(id)], 1, false).unwrap();
}

#[test]
fn bad_input_is_refused_naming_the_problem_and_changes_nothing() {
    let mut h = Harness::new();
    let err = |h: &Harness, name: &str, args: &[Value]| h.check(name, args).unwrap_err();
    assert!(err(&h, "lease.grant", &[Value::Int(0)])
        .contains("ttl must be within 1..=31536000 seconds, got 0"));
    assert!(err(&h, "lease.grant", &[Value::Int(TTL_MAX_S + 1)]).contains("ttl must be within"));
    assert!(err(&h, "lease.grant", &[b("10")]).contains("must be int"));
    assert!(
        err(&h, "lease.keep_alive", &[Value::Int(0)]).contains("lease id must be positive, got 0")
    );
    assert!(err(&h, "lease.revoke", &[Value::Int(-3)]).contains("lease id must be positive"));
    assert!(err(&h, "kv.put", &[b("k"), b("v"), Value::Int(0)])
        .contains("kv.put: lease id must be positive"));
    assert!(err(&h, "kv.put", &[b("k"), b("v"), b("7")]).contains("must be int"));
    assert!(err(&h, "kv.put_ttl", &[b("k"), b("v"), Value::Int(0)]).contains("ttl must be within"));
    assert!(err(&h, "kv.put_ttl", &[b("\0k"), b("v"), Value::Int(5)]).contains("reserved"));
    assert!(h
        .check(EXPIRE, &[Value::List(vec![Value::Int(0)])])
        .is_err());
    assert!(h.check(EXTEND, &[Value::Int(1)]).is_err());
    // Unknown leases: typed aborts, nothing written.
    for (name, args) in [
        ("lease.keep_alive", vec![Value::Int(9)]),
        ("lease.revoke", vec![Value::Int(9)]),
        ("lease.ttl", vec![Value::Int(9)]),
        ("kv.put", vec![b("k"), b("v"), Value::Int(9)]),
    ] {
        let e = call_at(&mut h, name, &args, 0, true).unwrap_err();
        assert!(e.0.contains("lease 9 not found"), "{name}: {e}");
    }
    assert!(h.keys().is_empty(), "{:?}", h.keys());
    assert_eq!(get(&mut h, "k"), Value::Nil);
}

#[test]
fn a_grant_past_the_most_leases_is_refused() {
    let mut h = Harness::new();
    h.snap.0.insert(
        Bytes::from_static(LIVE_KEY),
        Bytes::copy_from_slice(&LEASES_MAX.to_be_bytes()),
    );
    let e = call_at(&mut h, "lease.grant", &[Value::Int(10)], 0, true).unwrap_err();
    assert!(
        e.0.contains("leases are live, the most a group holds"),
        "{e}"
    );
}
