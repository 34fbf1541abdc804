use bytes::Bytes;

use super::*;
use crate::builtins::testkit::Harness;
use creek_exec::txn::Abort;
use creek_types::value::encode_args;

fn strong(h: &mut Harness, name: &str, args: &[&[u8]]) -> Result<Value, Abort> {
    let args: Vec<Value> = args
        .iter()
        .map(|a| Value::Bytes(Bytes::copy_from_slice(a)))
        .collect();
    let mut call = ProcCall::new(name, encode_args(&args));
    call.strong = true;
    let out = h.exec(&call).outcome?;
    Value::decode(&out).map_err(|e| Abort::new(e.to_string()))
}

fn rules(h: &Harness) -> Rules {
    Rules::from_records(h.snap.0.iter().map(|(k, v)| (k.as_ref(), v.as_ref())))
}

const ID: &[u8] = b"0123456789abcdef";
const HASH: [u8; 32] = [7; 32];

#[test]
fn grants_parse_and_print_back() {
    for text in [
        "read:keyspace:accounts",
        "write:keyspace:*",
        "admin:keyspace:default",
        "read:proc:report_*",
        "write:proc:*",
        "write:proc:transfer",
    ] {
        let g = Grant::parse(text).expect(text);
        assert_eq!(g.to_string(), text);
    }
    for bad in [
        "",
        "read",
        "read:keyspace",
        "own:keyspace:a",
        "read:table:a",
        "read:keyspace:a*",
        "read:keyspace:a-b",
        "read:proc:a.b",
        "read:keyspace:",
    ] {
        assert!(Grant::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn rights_include_the_lesser_ones_and_name_what_is_missing() {
    let p = Principal {
        user: "alice".into(),
        grants: Arc::from(vec![
            Grant::parse("write:keyspace:accounts").expect("ok"),
            Grant::parse("read:keyspace:default").expect("ok"),
            Grant::parse("write:proc:report_*").expect("ok"),
        ]),
    };
    assert!(p
        .check(&Need::Keyspace(Right::Read, "accounts".into()))
        .is_ok());
    assert!(p
        .check(&Need::Keyspace(Right::Write, "accounts".into()))
        .is_ok());
    let e = p
        .check(&Need::Keyspace(Right::Write, "default".into()))
        .expect_err("refused");
    assert_eq!(e.to_string(), "user alice lacks write on keyspace default");
    assert!(p.check(&Need::Cluster).is_err());
    assert!(p.check(&Need::Nothing).is_ok());
    let proc = |name: &str, writes: &[&str]| Need::Proc {
        right: Right::Write,
        name: name.into(),
        reads: vec![],
        writes: writes.iter().map(|s| s.to_string()).collect(),
    };
    // By the procedure's name, or by the keyspaces it touches.
    assert!(p.check(&proc("report_daily", &["audit"])).is_ok());
    assert!(p.check(&proc("transfer", &["accounts"])).is_ok());
    let e = p.check(&proc("purge", &["audit"])).expect_err("refused");
    assert!(
        e.to_string()
            .contains("write on keyspace audit, which it writes"),
        "{e}"
    );
    assert!(Principal::root().check(&Need::Cluster).is_ok());
}

#[test]
fn user_add_stores_roles_and_a_hashed_token_that_rules_resolve() {
    let mut h = Harness::new();
    strong(
        &mut h,
        "auth.role_set",
        &[b"teller", b"write:keyspace:accounts, read:keyspace:default"],
    )
    .expect("ok");
    strong(&mut h, "auth.user_add", &[b"alice", b"teller", ID, &HASH]).expect("ok");
    let r = rules(&h);
    assert!(r.corrupt.is_empty());
    assert_eq!(
        r.token("0123456789abcdef"),
        Some(&TokenRecord {
            user: "alice".into(),
            hash: HASH,
            expires_unix_s: 0,
        })
    );
    let alice = r.principal("alice").expect("alice");
    assert!(alice
        .check(&Need::Keyspace(Right::Write, "accounts".into()))
        .is_ok());
    assert!(alice
        .check(&Need::Keyspace(Right::Write, "default".into()))
        .is_err());
    let listed = strong(&mut h, "auth.user_list", &[]).expect("ok");
    assert_eq!(
        listed,
        Value::List(vec![Value::List(vec![
            Value::from("alice"),
            Value::List(vec![Value::from("teller")]),
            Value::List(vec![Value::from("0123456789abcdef")]),
        ])])
    );
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let mut h = Harness::new();
    strong(&mut h, "auth.user_add", &[b"bob", b"readonly", ID, &HASH]).expect("ok");
    let before = h.snap.0.clone();
    let other_id: &[u8] = b"fedcba9876543210";
    let cases: Vec<(&str, Vec<&[u8]>, &str)> = vec![
        (
            "auth.user_add",
            vec![b"bob", b"readonly", other_id, &HASH],
            "exists",
        ),
        (
            "auth.user_add",
            vec![b"carol", b"nosuch", other_id, &HASH],
            "no role named \"nosuch\" (the built-in roles are admin, readwrite, readonly; \
             define others with `creek role set`)",
        ),
        (
            "auth.user_add",
            vec![b"carol", b"", other_id, &HASH],
            "at least one role",
        ),
        (
            "auth.user_add",
            vec![b"carol", b"readonly", b"XYZ", &HASH],
            "token id",
        ),
        (
            "auth.user_add",
            vec![b"carol", b"readonly", other_id, b"short"],
            "token hash",
        ),
        (
            "auth.user_add",
            vec![b"carol", b"readonly", ID, &HASH],
            "taken",
        ),
        (
            "auth.user_add",
            vec![b"root", b"admin", other_id, &HASH],
            "root",
        ),
        (
            "auth.user_add",
            vec![b"a b", b"admin", other_id, &HASH],
            "not a name",
        ),
        (
            "auth.token_create",
            vec![b"nobody", other_id, &HASH],
            "no user",
        ),
        (
            "auth.role_set",
            vec![b"admin", b"read:keyspace:*"],
            "built-in",
        ),
        ("auth.role_set", vec![b"r", b"read:nothing"], "grant"),
    ];
    for (name, args, words) in cases {
        let e = strong(&mut h, name, &args).expect_err(name);
        assert!(e.0.contains(words), "{name}: {e}");
        assert_eq!(h.snap.0, before, "{name} changed the state");
    }
    // Weak calls of the writing built-ins abort before they run.
    let mut weak = ProcCall::new(
        "auth.token_revoke",
        encode_args(&[Value::Bytes(Bytes::from_static(ID))]),
    );
    weak.strong = false;
    assert!(h.exec(&weak).outcome.is_err());
    assert_eq!(h.snap.0, before);
}

#[test]
fn revoking_and_removing_drop_tokens() {
    let mut h = Harness::new();
    strong(&mut h, "auth.user_add", &[b"bob", b"readonly", ID, &HASH]).expect("ok");
    strong(
        &mut h,
        "auth.token_create",
        &[b"bob", b"00000000000000aa", &HASH],
    )
    .expect("ok");
    assert_eq!(
        strong(&mut h, "auth.token_revoke", &[ID]).expect("ok"),
        Value::Bool(true)
    );
    assert_eq!(
        strong(&mut h, "auth.token_revoke", &[ID]).expect("ok"),
        Value::Bool(false)
    );
    let r = rules(&h);
    assert!(r.token("0123456789abcdef").is_none() && r.token("00000000000000aa").is_some());
    assert_eq!(
        strong(&mut h, "auth.user_remove", &[b"bob"]).expect("ok"),
        Value::Bool(true)
    );
    let r = rules(&h);
    assert!(r.token("00000000000000aa").is_none() && r.principal("bob").is_none());
    assert!(!h.snap.0.keys().any(|k| k.starts_with(AUTH_PREFIX)));
}

#[test]
fn records_round_trip_and_corrupt_ones_grant_nothing() {
    let t = TokenRecord {
        user: "alice".into(),
        hash: HASH,
        expires_unix_s: 0,
    };
    assert_eq!(TokenRecord::decode(&t.encode()), Ok(t.clone()));
    let expiring = TokenRecord {
        expires_unix_s: 1_800_000_000,
        ..t
    };
    assert_eq!(
        TokenRecord::decode(&expiring.encode()),
        Ok(expiring.clone())
    );
    assert!(!expiring.expired(1_799_999_999) && expiring.expired(1_800_000_000));
    assert!(TokenRecord::decode(b"\xff").is_err());
    let r = Rules::from_records([
        (&b"\0auth/user/eve"[..], &b"\xff\xff"[..]),
        (&b"\0auth/token/0123456789abcdef"[..], &b"junk"[..]),
    ]);
    assert_eq!(r.corrupt.len(), 2);
    assert!(r.principal("eve").is_none() && r.token("0123456789abcdef").is_none());
}

#[test]
fn kv_built_ins_cannot_reach_the_records() {
    let h = Harness::new();
    assert!(h
        .check(
            "kv.get",
            &[Value::Bytes(Bytes::from_static(b"\0auth/token/x"))]
        )
        .is_err());
    assert!(h
        .check(
            "kv.put",
            &[
                Value::Bytes(Bytes::from_static(b"\0auth/user/x")),
                Value::Bytes(Bytes::new())
            ]
        )
        .is_err());
}

#[test]
fn calls_need_what_they_do() {
    let reg = Registry::with_builtins();
    let need_of =
        |name: &str, args: &[Value]| need(&reg, &ProcCall::new(name, encode_args(args)), None);
    let k = Value::Bytes(Bytes::from_static(b"k"));
    assert_eq!(
        need_of("kv.get", std::slice::from_ref(&k)),
        Need::Keyspace(Right::Read, "default".into())
    );
    assert_eq!(
        need_of("kv.put", &[k.clone(), k.clone()]),
        Need::Keyspace(Right::Write, "default".into())
    );
    assert_eq!(need_of("auth.user_list", &[]), Need::Cluster);
    assert_eq!(
        need_of("proc.register", std::slice::from_ref(&k)),
        Need::Cluster
    );
    assert_eq!(need_of("proc.list", &[]), Need::Nothing);
    assert_eq!(
        need_of(
            "keyspace.create",
            &[Value::from("accounts"), Value::from("strong")]
        ),
        Need::Keyspace(Right::Admin, "accounts".into())
    );
}

#[test]
fn every_execution_checks_its_user_in_the_state_it_reads() {
    let mut h = Harness::new();
    strong(
        &mut h,
        "auth.role_set",
        &[b"teller", b"write:keyspace:default"],
    )
    .expect("ok");
    strong(&mut h, "auth.user_add", &[b"alice", b"teller", ID, &HASH]).expect("ok");
    let put = |user: &str| {
        let args = encode_args(&[Value::from("k"), Value::from("v")]);
        let mut call = ProcCall::new("kv.put", args);
        call.user = Some(Arc::from(user));
        call
    };
    // Alice may write, and the check's reads are in the read set, so the
    // engine redoes the execution when a change to her records comes first.
    let ok = h.exec(&put("alice"));
    assert!(ok.outcome.is_ok(), "{:?}", ok.outcome);
    let read: Vec<&[u8]> = ok.reads.iter().map(|(k, _)| k.as_ref()).collect();
    assert!(read.contains(&&b"\0auth/user/alice"[..]));
    assert!(read.contains(&&b"\0auth/role/teller"[..]));
    // Her role narrowed: the next execution is refused and writes nothing.
    strong(
        &mut h,
        "auth.role_set",
        &[b"teller", b"read:keyspace:default"],
    )
    .expect("ok");
    h.snap.0.remove(&b"k"[..]);
    let denied = h.exec(&put("alice"));
    assert_eq!(
        denied.outcome,
        Err(Abort::new(
            "permission denied: user alice lacks write on keyspace default"
        ))
    );
    assert!(denied.writes.is_empty() && !h.snap.0.contains_key(&b"k"[..]));
    // A removed user has no rights; the root user has every right; a call
    // without a user (replicas that do not check users) is not checked.
    strong(&mut h, "auth.user_remove", &[b"alice"]).expect("ok");
    assert!(h.exec(&put("alice")).outcome.is_err());
    assert!(h.exec(&put(ROOT_USER)).outcome.is_ok());
    let mut anyone = put("x");
    anyone.user = None;
    assert!(h.exec(&anyone).outcome.is_ok());
}

#[test]
fn an_expiring_token_stores_its_expiry_and_a_bad_one_changes_nothing() {
    let mut h = Harness::new();
    strong(&mut h, "auth.user_add", &[b"bob", b"readonly", ID, &HASH]).expect("ok");
    let token = |id: &[u8], at: i64| {
        let mut call = ProcCall::new(
            "auth.token_create_expiring",
            encode_args(&[
                Value::from("bob"),
                Value::Bytes(Bytes::copy_from_slice(id)),
                Value::Bytes(Bytes::copy_from_slice(&HASH)),
                Value::Int(at),
            ]),
        );
        call.strong = true;
        call
    };
    let before = h.snap.0.clone();
    let e = h
        .exec(&token(b"fedcba9876543210", -5))
        .outcome
        .expect_err("refused");
    assert!(
        e.0.contains("an expiry is a Unix time in seconds"),
        "{}",
        e.0
    );
    assert_eq!(h.snap.0, before, "a refused token changes nothing");
    h.exec(&token(b"fedcba9876543210", 1_800_000_000))
        .outcome
        .expect("ok");
    assert_eq!(
        rules(&h)
            .token("fedcba9876543210")
            .map(|t| t.expires_unix_s),
        Some(1_800_000_000)
    );
    let mut weak = token(b"00000000000000ff", 1_800_000_000);
    weak.strong = false;
    assert!(h.exec(&weak).outcome.is_err(), "strong only");
}

#[test]
fn the_switch_is_set_once_and_read_into_the_rules() {
    let mut h = Harness::new();
    assert_eq!(rules(&h).enabled, None);
    assert_eq!(
        strong(&mut h, "auth.enable", &[&HASH]).expect("on"),
        Value::Bool(true)
    );
    assert_eq!(rules(&h).enabled, Some(HASH));
    assert_eq!(
        strong(&mut h, "auth.enable", &[&HASH]).expect("again"),
        Value::Bool(false),
        "the same root: nothing changes"
    );
    let other = strong(&mut h, "auth.enable", &[&[8; 32]]).expect_err("another root");
    assert!(other.to_string().contains("another root token"), "{other}");
    let short = strong(&mut h, "auth.enable", &[b"short"]).expect_err("not a hash");
    assert!(short.to_string().contains("5 bytes, not 32"), "{short}");
    assert_eq!(rules(&h).enabled, Some(HASH));
    assert!(rules(&h).corrupt.is_empty());
}
