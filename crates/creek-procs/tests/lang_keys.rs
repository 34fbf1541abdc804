//! Declared keys (docs/procedures.md, "Declared keys"): parameters typed
//! `key(KS)` and `prefix(KS)`, the signature that shows them, and the
//! deterministic abort of an access they do not cover.

use bytes::Bytes;
use creek_exec::Abort;
use creek_procs::lang::{compile, ExecContext, MemStore, Program, Store};
use creek_types::value::{encode_args, Value};

const BANK: &str = r#"
keyspace accounts: strong
keyspace audit: strong
keyspace notes: weak

# Move amount from one account to another; the new balance of `from`.
proc transfer(from: key(accounts), to: key(accounts), amount: int) -> int {
    let a = get(accounts, from)
    let b = get(accounts, to)
    let x = 0
    if a != nil { x = int(a) }
    let y = 0
    if b != nil { y = int(b) }
    if x < amount { abort "insufficient funds" }
    put(accounts, from, str(x - amount))
    put(accounts, to, str(y + amount))
    return x - amount
}

# Reads another key than the declared one.
proc peek(owner: key(accounts), other: bytes) -> any {
    return get(accounts, other)
}

# Writes a keyspace no parameter declares.
proc stamp(owner: key(accounts)) {
    put(audit, owner, "seen")
}

# The declaration holds the argument as given, not the variable.
proc moved(owner: key(accounts)) {
    owner = owner ++ "x"
    put(accounts, owner, "1")
}

# Every note under a user's prefix.
proc notes_of(user: prefix(notes), from: bytes, to: bytes) -> list {
    return scan(notes, from, to, 100)
}

# A write anywhere under the prefix is covered.
proc note(user: prefix(notes), name: bytes) {
    put(notes, user ++ name, "text")
}

# No declarations: unchecked, as before.
proc free(k: bytes) {
    put(notes, k, "v")
    put(audit, k, "v")
}
"#;

fn program() -> Program {
    compile(BANK, &|_| None).unwrap_or_else(|e| panic!("does not compile:\n{e}"))
}

fn b(s: &str) -> Value {
    Value::Bytes(Bytes::copy_from_slice(s.as_bytes()))
}

fn run(p: &Program, name: &str, store: &mut MemStore, args: &[Value]) -> Result<Value, Abort> {
    let proc = p.proc(name).unwrap_or_else(|| panic!("no proc {name}"));
    let ctx = ExecContext::new(Bytes::from_static(b"op-1"), 7);
    proc.run(store, &encode_args(args), &ctx)
        .map(|r| Value::decode(&r).expect("result decodes"))
}

fn aborted(r: Result<Value, Abort>) -> String {
    match r {
        Err(a) => a.0,
        Ok(v) => panic!("expected an abort, got {v:?}"),
    }
}

#[test]
fn the_signature_shows_the_declarations_and_they_are_listed_by_position() {
    let p = program();
    let transfer = p.proc("transfer").expect("transfer");
    let sig = transfer.signature();
    let types: Vec<&str> = sig.params.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(types, ["key(accounts)", "key(accounts)", "int"]);
    let declared: Vec<(usize, &str, bool)> = transfer
        .declared_keys()
        .iter()
        .map(|(at, k)| (*at, k.keyspace.as_str(), k.prefix))
        .collect();
    assert_eq!(declared, [(0, "accounts", false), (1, "accounts", false)]);
    let notes = p.proc("notes_of").expect("notes_of");
    assert_eq!(notes.signature().params[0].1, "prefix(notes)");
    assert!(p.proc("free").expect("free").declared_keys().is_empty());
    // A declared key is bytes: another type is refused before it runs.
    let e = transfer
        .check_args(&encode_args(&[Value::Int(1), b("b"), Value::Int(1)]))
        .expect_err("an int key is refused");
    assert!(e.contains("argument `from` must be bytes"), "{e}");
}

#[test]
fn accesses_the_declarations_cover_run() {
    let p = program();
    let mut store = MemStore::new();
    store.put(
        "accounts",
        Bytes::from_static(b"alice"),
        Bytes::from_static(b"10"),
    );
    let left = run(
        &p,
        "transfer",
        &mut store,
        &[b("alice"), b("bob"), Value::Int(4)],
    );
    assert_eq!(left, Ok(Value::Int(6)));
    assert_eq!(
        store.get("accounts", b"bob"),
        Some(Bytes::from_static(b"4"))
    );
    run(&p, "note", &mut store, &[b("ann/"), b("today")]).expect("note");
    let listed = run(
        &p,
        "notes_of",
        &mut store,
        &[b("ann/"), b("ann/"), b("ann0")],
    );
    let Ok(Value::List(items)) = listed else {
        panic!("{listed:?}")
    };
    assert_eq!(items.len(), 1);
    run(&p, "free", &mut store, &[b("x")]).expect("undeclared procedures are unchecked");
}

#[test]
fn an_access_outside_the_declarations_aborts_naming_the_key() {
    let p = program();
    let mut store = MemStore::new();
    store.put(
        "accounts",
        Bytes::from_static(b"carol"),
        Bytes::from_static(b"1"),
    );
    let before = store.clone();
    let e = aborted(run(&p, "peek", &mut store, &[b("alice"), b("carol")]));
    assert!(
        e.contains("get of key \"carol\" in keyspace accounts is outside the keys the procedure declares (owner: key(accounts) = \"alice\")"),
        "{e}"
    );
    assert!(e.starts_with("proc peek, line "), "{e}");
    let e = aborted(run(&p, "stamp", &mut store, &[b("alice")]));
    assert!(e.contains("put of key \"alice\" in keyspace audit"), "{e}");
    let e = aborted(run(&p, "moved", &mut store, &[b("alice")]));
    assert!(e.contains("put of key \"alicex\""), "{e}");
    // A scan past the prefix's keys, or starting before them.
    let e = aborted(run(
        &p,
        "notes_of",
        &mut store,
        &[b("ann/"), b("ann/"), b("ann1")],
    ));
    assert!(
        e.contains("scan of keyspace notes from \"ann/\" to \"ann1\" is outside the keys"),
        "{e}"
    );
    let e = aborted(run(
        &p,
        "notes_of",
        &mut store,
        &[b("ann/"), b("am"), b("ann0")],
    ));
    assert!(e.contains("scan of keyspace notes"), "{e}");
    // The same abort every time (it is part of execution), and nothing
    // was written.
    let again = aborted(run(&p, "peek", &mut store, &[b("alice"), b("carol")]));
    assert_eq!(
        again,
        aborted(run(&p, "peek", &mut store, &[b("alice"), b("carol")]))
    );
    assert_eq!(store, before);
}

#[test]
fn declarations_are_checked_when_compiled() {
    let err = |src: &str| match compile(src, &|_| None) {
        Ok(_) => panic!("compiled:\n{src}"),
        Err(e) => e.to_string(),
    };
    let e = err("proc p(k: key(nowhere)) { }");
    assert!(
        e.contains("parameter `k`: unknown keyspace `nowhere`"),
        "{e}"
    );
    let e = err("keyspace a: weak\nproc p(k: key a) { }");
    assert!(e.contains("unknown type `key`"), "{e}");
    let e = err("keyspace a: weak\nproc p(k: key(a) { }");
    assert!(e.contains("`)`"), "{e}");
    let e = err("keyspace a: weak\nproc p(k: keys(a)) { }");
    assert!(e.contains("key(KEYSPACE) or prefix(KEYSPACE)"), "{e}");
    // An existing keyspace may be declared without a declaration in the
    // file; `key` stays an ordinary name elsewhere.
    let existing = |ks: &str| (ks == "old").then_some(creek_procs::lang::Label::Weak);
    compile(
        "proc p(k: key(old)) -> any { let key = k\nreturn get(old, key) }",
        &existing,
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// With declared keys an access may abort, and whether it does depends on
/// the key: a key that comes from weak data may not decide, through that
/// abort, whether a strong write happens (the information-flow check,
/// docs/procedures.md).
#[test]
fn an_access_that_may_abort_on_a_weak_key_is_an_information_flow() {
    let src = "keyspace w: weak\nkeyspace s: strong\n\
               proc p(k: key(s), n: prefix(w)) {\n\
               for (x, v) in scan(w, n, n ++ \"~\", 10) { let z = get(w, x) }\n\
               put(s, k, \"1\")\n}";
    let e = match compile(src, &|_| None) {
        Ok(_) => panic!("compiled"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("weak"), "{e}");
    // Without declarations nothing there aborts, and it compiles.
    let plain = src.replace("k: key(s), n: prefix(w)", "k: bytes, n: bytes");
    compile(&plain, &|_| None).unwrap_or_else(|e| panic!("{e}"));
}
