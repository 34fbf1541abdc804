//! User procedures and keyspaces as replicated state (DESIGN §14), driven
//! through the multiversion executor with the real built-in registry: the
//! examples in `examples/procedures/`, re-registration, the level rule and
//! the isolation of keyspaces from the built-in key-value procedures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use creek_exec::mvcc::{MvccExecutor, Schedule};
use creek_exec::{Engine, Outcome, ProcCall, Settled, SnapshotRead, TxnLimits, VersionNo};
use creek_procs::keyspace;
use creek_procs::user_procs::{self, ProcRecord};
use creek_procs::Registry;
use creek_types::value::{encode_args, Value};
use creek_types::ClientRequestId;

const GROUPS: &str = include_str!("../../../examples/procedures/message_groups.creek");
const CONTEST: &str = include_str!("../../../examples/procedures/contest.creek");
const UNSAFE_CONTEST: &str = include_str!("../../../examples/procedures/unsafe_contest.creek");

/// Positions of tentative ops: above every committed one.
const TENTATIVE: u64 = 1_000_000;

/// A replica's executor: committed ops run in call order.
struct Db {
    e: MvccExecutor<u32, u64>,
    registry: Arc<Registry>,
    next: u32,
    committed: u64,
}

impl Db {
    fn new() -> Db {
        let registry = Arc::new(Registry::with_builtins());
        let mut e = MvccExecutor::new(registry.clone(), TxnLimits::default());
        e.set_schedule(Schedule::LOWEST_FIRST);
        Db {
            e,
            registry,
            next: 0,
            committed: 0,
        }
    }

    fn call(&mut self, strong: bool, name: &str, args: &[Value]) -> ProcCall {
        self.next += 1;
        ProcCall {
            strong,
            op: Some((1, u64::from(self.next))),
            ..ProcCall::new(name, encode_args(args))
        }
    }

    fn run_all(&mut self) -> Vec<Settled<u32>> {
        while let Some(task) = self.e.next_task() {
            let done = self.e.run(&task);
            self.e.complete(done);
        }
        self.e.check_invariants().expect("invariants");
        let mut out = Vec::new();
        self.e.drain_settled(&mut out);
        out
    }

    /// Commit `call` at the next committed position; its outcome.
    fn exec(&mut self, call: ProcCall) -> Outcome {
        let key = self.next;
        self.committed += 1;
        self.e.insert(key, self.committed, call);
        self.e.commit(key, self.committed);
        let settled = self.run_all();
        settled
            .into_iter()
            .rev()
            .find(|s| s.key == key && s.committed)
            .expect("settled")
            .outcome
    }

    fn at(&mut self, strong: bool, name: &str, args: &[Value]) -> Result<Value, String> {
        let call = self.call(strong, name, args);
        match self.exec(call) {
            Ok(b) => Ok(Value::decode(&b).expect("result decodes")),
            Err(abort) => Err(abort.0),
        }
    }

    fn strong(&mut self, name: &str, args: &[Value]) -> Result<Value, String> {
        self.at(true, name, args)
    }

    fn weak(&mut self, name: &str, args: &[Value]) -> Result<Value, String> {
        self.at(false, name, args)
    }

    fn state(&self) -> BTreeMap<Bytes, Bytes> {
        self.e.committed_state()
    }

    fn register(&mut self, source: &str) -> Result<Value, String> {
        self.strong("proc.register", &[Value::from(source)])
    }
}

fn b(s: &str) -> Value {
    Value::from(s)
}

fn list(items: Vec<Value>) -> Value {
    Value::List(items)
}

/// The committed state as a snapshot, for the invoke-time helpers.
struct Snap(BTreeMap<Bytes, Bytes>);

impl SnapshotRead for Snap {
    fn read(&self, key: &[u8]) -> (Option<Bytes>, VersionNo) {
        (self.0.get(key).cloned(), VersionNo(1))
    }

    fn scan(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes, VersionNo)>) {
        creek_exec::basic::scan_map(&self.0, from, to, limit, VersionNo(1), out);
    }
}

#[test]
fn message_groups_register_and_run() {
    let mut db = Db::new();
    assert_eq!(
        db.register(GROUPS),
        Ok(list(vec![
            list(vec![b("join"), Value::Int(1)]),
            list(vec![b("post"), Value::Int(1)]),
            list(vec![b("inbox"), Value::Int(1)]),
        ]))
    );
    assert_eq!(
        db.weak("keyspace.list", &[]),
        Ok(list(vec![
            list(vec![b("inboxes"), b("weak")]),
            list(vec![b("members"), b("strong")]),
        ]))
    );
    for user in ["ann", "bob"] {
        assert_eq!(db.strong("join", &[b("g1"), b(user)]), Ok(Value::Nil));
    }
    assert_eq!(db.strong("join", &[b("g2"), b("cat")]), Ok(Value::Nil));
    // `post` writes only a weak keyspace: any level will do.
    assert_eq!(db.weak("post", &[b("g1"), b("hello")]), Ok(Value::Int(2)));
    assert_eq!(db.strong("post", &[b("g2"), b("meow")]), Ok(Value::Int(1)));
    assert_eq!(db.weak("post", &[b("g1"), b("again")]), Ok(Value::Int(2)));
    assert_eq!(
        db.weak("inbox", &[b("ann")]),
        Ok(list(vec![b("hello"), b("again")]))
    );
    assert_eq!(db.weak("inbox", &[b("cat")]), Ok(list(vec![b("meow")])));
    assert_eq!(db.weak("inbox", &[b("dan")]), Ok(list(vec![])));
    // The data sits in the keyspaces' ranges, keyed by the posting op's id.
    let state = db.state();
    assert_eq!(
        state.get(&keyspace::data_key("members", b"g1/bob")),
        Some(&Bytes::from("bob"))
    );
    assert!(state
        .keys()
        .any(|k| k.starts_with(&keyspace::data_key("inboxes", b"ann/r1."))));

    // Bad arguments abort at run time with the parameter's name.
    let e = db.weak("post", &[b("g1")]).unwrap_err();
    assert!(e.contains("post takes 2 argument(s)"), "{e}");

    // proc.list and proc.show describe them.
    let listed = db.weak("proc.list", &[]).unwrap();
    assert_eq!(listed.as_list().map(|l| l.len()), Some(3), "{listed:?}");
    assert_eq!(
        listed.as_list().and_then(|l| l.first()).cloned(),
        Some(list(vec![
            b("inbox"),
            Value::Int(1),
            b("inbox(user: bytes) -> list"),
            Value::Bool(true),
            Value::Bool(false),
        ]))
    );
    assert!(listed.as_list().unwrap().contains(&list(vec![
        b("join"),
        Value::Int(1),
        b("join(group: bytes, user: bytes) -> nil"),
        Value::Bool(false),
        Value::Bool(true),
    ])));
    assert_eq!(
        db.weak("proc.show", &[b("post")]),
        Ok(list(vec![b("post"), Value::Int(1), b(GROUPS)]))
    );
    assert_eq!(db.weak("proc.show", &[b("nope")]), Ok(Value::Nil));
}

#[test]
fn reregistration_bumps_the_version_and_changes_behaviour() {
    let mut db = Db::new();
    db.register(GROUPS).unwrap();
    db.strong("join", &[b("g"), b("ann")]).unwrap();
    let loud = GROUPS.replace(
        "put(inboxes, user ++ \"/\" ++ op_id(), msg)",
        "put(inboxes, user ++ \"/\" ++ op_id(), group ++ \": \" ++ msg)",
    );
    assert_ne!(loud, GROUPS);
    assert_eq!(
        db.register(&loud),
        Ok(list(vec![
            list(vec![b("join"), Value::Int(2)]),
            list(vec![b("post"), Value::Int(2)]),
            list(vec![b("inbox"), Value::Int(2)]),
        ]))
    );
    db.weak("post", &[b("g"), b("hi")]).unwrap();
    assert_eq!(db.weak("inbox", &[b("ann")]), Ok(list(vec![b("g: hi")])));
    // The members survived: keyspaces are not recreated.
    assert_eq!(db.strong("join", &[b("g"), b("bob")]), Ok(Value::Nil));
    assert_eq!(db.weak("post", &[b("g"), b("x")]), Ok(Value::Int(2)));
    let show = db.weak("proc.show", &[b("post")]).unwrap();
    assert_eq!(show, list(vec![b("post"), Value::Int(2), b(&loud)]));
}

/// A tentative execution that ran the old version is re-executed when a
/// re-registration is ordered before it (the record is in its read set).
#[test]
fn reregistration_invalidates_tentative_executions() {
    let mut db = Db::new();
    db.register(GROUPS).unwrap();
    db.strong("join", &[b("g"), b("ann")]).unwrap();
    let post = db.call(false, "post", &[b("g"), b("hi")]);
    let post_key = db.next;
    db.e.insert(post_key, TENTATIVE + 10, post);
    let first = db.run_all();
    assert_eq!(
        first
            .iter()
            .find(|s| s.key == post_key)
            .map(|s| s.outcome.clone()),
        Some(Ok(Value::Int(1).encode()))
    );
    let doubled = GROUPS.replace("n = n + 1", "n = n + 10");
    let reg = db.call(true, "proc.register", &[b(&doubled)]);
    let reg_key = db.next;
    db.e.insert(reg_key, TENTATIVE + 5, reg);
    let second = db.run_all();
    assert_eq!(
        second
            .iter()
            .find(|s| s.key == post_key)
            .map(|s| s.outcome.clone()),
        Some(Ok(Value::Int(10).encode())),
        "{second:?}"
    );
}

#[test]
fn a_compile_error_aborts_and_writes_nothing() {
    let mut db = Db::new();
    let before = db.state();
    let bad = "keyspace k: strong\nproc p(x: int) -> int {\n  return y\n}\n";
    let e = db.register(bad).unwrap_err();
    assert_eq!(e, "line 3:10: unknown variable `y`");
    assert_eq!(db.state(), before);
    let e = db.weak("p", &[Value::Int(1)]).unwrap_err();
    assert_eq!(e, "unknown procedure \"p\"");
    // Not UTF-8.
    let call = db.call(true, "proc.register", &[Value::from(&b"\xff"[..])]);
    assert!(db.exec(call).is_err());
    assert_eq!(db.state(), before);
}

#[test]
fn strong_writers_must_be_invoked_strong() {
    let mut db = Db::new();
    // Definitions are strong state.
    let e = db.weak("proc.register", &[b(GROUPS)]).unwrap_err();
    assert!(e.contains("invoke it at the strong level"), "{e}");
    let e = db
        .weak("keyspace.create", &[b("k"), b("weak")])
        .unwrap_err();
    assert!(e.contains("invoke it at the strong level"), "{e}");
    assert!(db.state().is_empty());

    db.register(GROUPS).unwrap();
    let before = db.state();
    let e = db.weak("join", &[b("g"), b("ann")]).unwrap_err();
    assert_eq!(
        e,
        "join writes strong keyspace members: invoke it at the strong level"
    );
    assert_eq!(db.state(), before);
    // Not even the session table records it: the op is refused, not run.
    let mut call = db.call(false, "join", &[b("g"), b("ann")]);
    call.request_id = Some(ClientRequestId { client: 9, seq: 1 });
    assert!(db.exec(call).is_err());
    assert_eq!(db.state(), before);
    let e = db.weak("proc.drop", &[b("join")]).unwrap_err();
    assert!(e.contains("invoke it at the strong level"), "{e}");

    // The invoke-time helper gives the same verdict on committed state.
    let snap = Snap(db.state());
    let call = ProcCall::new("join", encode_args(&[b("g"), b("ann")]));
    let reg = Registry::with_builtins();
    assert!(user_procs::check_user_call(&reg, &snap, &call, true).is_ok());
    let e = user_procs::check_user_call(&reg, &snap, &call, false).unwrap_err();
    assert!(
        e.to_string().contains("invoke it at the strong level"),
        "{e}"
    );
    let bad = ProcCall::new("join", encode_args(&[b("g")]));
    assert!(user_procs::check_user_call(&reg, &snap, &bad, true).is_err());
    let unknown = ProcCall::new("nope", encode_args(&[]));
    assert!(user_procs::check_user_call(&reg, &snap, &unknown, true).is_err());
    let post = user_procs::describe(&reg, &snap, "post").unwrap();
    let (sig, read_only, writes_strong) = post.signature().unwrap();
    assert_eq!(sig.params_text(), "(group: bytes, msg: bytes)");
    assert!(!read_only && !writes_strong);
    assert_eq!(post.record.version, 1);
}

#[test]
fn builtin_kv_cannot_reach_a_keyspace() {
    let mut db = Db::new();
    db.register(GROUPS).unwrap();
    let key = keyspace::data_key("members", b"g/eve");
    let e = db.weak("kv.put", &[Value::Bytes(key.clone()), b("eve")]);
    assert!(e.unwrap_err().contains("reserved"));
    let def = keyspace::def_key("members");
    let e = db.weak("kv.put", &[Value::Bytes(def), b("w")]);
    assert!(e.unwrap_err().contains("reserved"));
    let proc_key = user_procs::proc_key("join");
    let e = db.strong("kv.delete", &[Value::Bytes(proc_key)]);
    assert!(e.unwrap_err().contains("reserved"));
    assert_eq!(db.weak("post", &[b("g"), b("m")]), Ok(Value::Int(0)));
}

#[test]
fn keyspace_create_rules() {
    let mut db = Db::new();
    assert_eq!(
        db.strong("keyspace.create", &[b("k"), b("weak")]),
        Ok(Value::Nil)
    );
    let before = db.state();
    assert_eq!(
        db.strong("keyspace.create", &[b("k"), b("weak")]),
        Ok(Value::Nil)
    );
    assert_eq!(db.state(), before);
    assert_eq!(
        db.strong("keyspace.create", &[b("k"), b("strong")]),
        Err("keyspace k already exists as weak, not strong".to_owned())
    );
    for bad in ["", "9lives", "a/b", "x y", "proc"] {
        let e = db
            .strong("keyspace.create", &[b(bad), b("weak")])
            .unwrap_err();
        assert!(e.starts_with("keyspace.create: keyspace name"), "{e}");
    }
    let e = db
        .strong("keyspace.create", &[b("ok"), b("medium")])
        .unwrap_err();
    assert!(e.contains("label must be strong or weak"), "{e}");
    assert_eq!(db.state(), before);
    // A file declaring an existing keyspace with another label does not
    // compile.
    let e = db
        .register("keyspace k: strong\nproc p() { put(k, \"a\", \"b\") }")
        .unwrap_err();
    assert!(
        e.contains("keyspace `k` already exists as weak, not strong"),
        "{e}"
    );
    // A file may use an existing keyspace without declaring it.
    assert_eq!(
        db.register("proc p() -> any { put(k, \"a\", \"b\")\n return get(k, \"a\") }"),
        Ok(list(vec![list(vec![b("p"), Value::Int(1)])]))
    );
    assert_eq!(db.weak("p", &[]), Ok(b("b")));
}

#[test]
fn unknown_procedures_and_reserved_names() {
    let mut db = Db::new();
    assert_eq!(
        db.weak("nothing", &[]),
        Err("unknown procedure \"nothing\"".to_owned())
    );
    assert_eq!(
        db.weak("kv.nothing", &[]),
        Err("unknown procedure \"kv.nothing\"".to_owned())
    );
    assert!(db.state().is_empty());
    assert_eq!(db.weak("proc.list", &[]), Ok(list(vec![])));
    assert_eq!(
        db.strong("proc.drop", &[b("nothing")]),
        Ok(Value::Bool(false))
    );
    db.register("proc hello() -> bytes { return \"hi\" }")
        .unwrap();
    assert_eq!(db.weak("hello", &[]), Ok(b("hi")));
    assert_eq!(db.strong("proc.drop", &[b("hello")]), Ok(Value::Bool(true)));
    assert_eq!(
        db.weak("hello", &[]),
        Err("unknown procedure \"hello\"".to_owned())
    );
}

#[test]
fn op_id_and_rand_come_from_the_op() {
    let mut db = Db::new();
    db.register("proc id() -> list { return [op_id(), rand()] }")
        .unwrap();
    let call = db.call(false, "id", &[]);
    let seq = db.next;
    let got = Value::decode(&db.exec(call.clone()).unwrap()).unwrap();
    let items = got.as_list().unwrap();
    assert_eq!(items[0], b(&format!("r1.{seq}")));
    // The same op on another replica draws the same number.
    let mut other = Db::new();
    other
        .register("proc id() -> list { return [op_id(), rand()] }")
        .unwrap();
    other.next = seq;
    let again = Value::decode(&other.exec(call).unwrap()).unwrap();
    assert_eq!(again, got);
    // A local read has no op id.
    let local = ProcCall::new("id", encode_args(&[]));
    db.next += 1;
    let got = Value::decode(&db.exec(local).unwrap()).unwrap();
    assert_eq!(got.as_list().unwrap()[0], b("local"));
}

#[test]
fn the_unsafe_contest_is_rejected() {
    let mut db = Db::new();
    let e = db.register(UNSAFE_CONTEST).unwrap_err();
    assert!(
        e.contains("write to winner (strong) is controlled by weak data"),
        "{e}"
    );
    assert!(db.state().is_empty());
}

#[test]
fn the_safe_contest_runs_strong() {
    let mut db = Db::new();
    db.register(CONTEST).unwrap();
    let e = db.weak("report_spam", &[b("a"), b("buy now")]).unwrap_err();
    assert!(e.contains("report_spam writes strong keyspace"), "{e}");
    for n in 1..=2 {
        assert_eq!(
            db.strong("report_spam", &[b("a"), b("spam")]),
            Ok(Value::Int(n))
        );
    }
    assert_eq!(
        db.strong("report_spam", &[b("b"), b("spam")]),
        Ok(Value::Int(1))
    );
    assert_eq!(db.weak("winner_of", &[]), Ok(Value::Nil));
    assert_eq!(
        db.strong("report_spam", &[b("a"), b("spam")]),
        Ok(Value::Int(3))
    );
    assert_eq!(db.weak("winner_of", &[]), Ok(b("a")));
    for _ in 0..3 {
        db.strong("report_spam", &[b("b"), b("spam")]).unwrap();
    }
    assert_eq!(db.weak("winner_of", &[]), Ok(b("a")));
}

#[test]
fn records_round_trip() {
    let r = ProcRecord {
        version: 7,
        source: Arc::from("proc p() {}"),
        keyspaces: vec![("a".to_owned(), creek_procs::lang::Label::Weak)],
    };
    assert_eq!(ProcRecord::decode("p", &r.encode()), Ok(r));
    assert!(ProcRecord::decode("p", b"\x01").is_err());
}

#[test]
fn the_program_cache_is_shared_by_clones() {
    let reg = Registry::with_builtins();
    let clone = reg.clone();
    let mut db = Db::new();
    db.register(GROUPS).unwrap();
    assert_eq!(db.registry.programs().len(), 1);
    let p = clone.programs().get_or_compile(GROUPS, &[]).unwrap();
    assert_eq!(reg.programs().len(), 1);
    assert_eq!(p.procs.len(), 3);
}

/// The multiversion executor agrees with the basic algorithm (Algorithm 2,
/// the oracle) on a history that registers, uses and re-registers
/// procedures, whatever order the ops arrive in before they commit.
#[test]
fn out_of_order_arrival_agrees_with_the_basic_engine() {
    let louder = GROUPS.replace("op_id(), msg)", "op_id(), msg ++ \"!\")");
    let mut db = Db::new();
    let calls = vec![
        db.call(true, "proc.register", &[b(GROUPS)]),
        db.call(true, "join", &[b("g"), b("ann")]),
        db.call(false, "post", &[b("g"), b("one")]),
        db.call(true, "join", &[b("g"), b("bob")]),
        db.call(false, "join", &[b("g"), b("eve")]),
        db.call(true, "proc.register", &[b(&louder)]),
        db.call(false, "post", &[b("g"), b("two")]),
        db.call(false, "inbox", &[b("ann")]),
        db.call(false, "inbox", &[b("bob")]),
        db.call(true, "keyspace.create", &[b("members"), b("weak")]),
    ];
    let (want, want_state) = creek_exec::basic::replay(
        &Registry::with_builtins(),
        TxnLimits::default(),
        calls.iter(),
    );
    assert_eq!(want[5].as_ref().err(), None);
    assert_eq!(
        want[7].as_ref().map(|v| Value::decode(v).ok()),
        Ok(Some(list(vec![b("one"), b("two!")])))
    );
    assert!(want[4].is_err() && want[9].is_err());
    let n = calls.len() as u64;
    for seed in 0..24u64 {
        let mut db = Db::new();
        // A permutation of the arrival order from the seed.
        let mut order: Vec<u64> = (0..n).collect();
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        for &i in &order {
            db.e.insert(i as u32, TENTATIVE + i, calls[i as usize].clone());
            db.run_all();
        }
        let mut got = BTreeMap::new();
        for i in 0..n {
            db.e.commit(i as u32, i + 1);
            for s in db.run_all() {
                if s.committed {
                    got.insert(s.key as usize, s.outcome);
                }
            }
        }
        let got: Vec<Outcome> = got.into_values().collect();
        assert_eq!(got, want, "seed {seed}, arrival order {order:?}");
        assert_eq!(db.state(), want_state, "seed {seed}");
    }
}

/// A user procedure may not take the name of a built-in (a workload's
/// procedures may be plain names) nor the internal prefix.
#[test]
fn builtin_names_are_refused() {
    let mut registry = Registry::with_builtins();
    registry.register_fn("hello", true, |_| Ok(()), |_, _| Ok(Bytes::new()));
    let register = |src: &str| ProcCall {
        strong: true,
        op: Some((1, 1)),
        ..ProcCall::new("proc.register", encode_args(&[b(src)]))
    };
    let clash = register("proc hello() -> int { return 1 }");
    let fine = register("proc hi() -> int { return 1 }");
    let (outcomes, state) =
        creek_exec::basic::replay(&registry, TxnLimits::default(), [&clash, &fine]);
    assert_eq!(
        outcomes[0],
        Err(creek_exec::Abort::new(
            "proc hello: the name belongs to a built-in procedure"
        ))
    );
    assert!(outcomes[1].is_ok());
    assert_eq!(
        state.keys().cloned().collect::<Vec<_>>(),
        vec![user_procs::proc_key("hi")]
    );
}
