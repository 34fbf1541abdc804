//! Running user procedures against the in-memory store: results, aborts
//! with positions, metering, arguments.

use bytes::Bytes;
use creek_exec::Abort;
use creek_procs::lang::{compile, CompiledProc, ExecContext, Label, MemStore, Program, Store};
use creek_types::value::{encode_args, Value};

fn program(src: &str) -> Program {
    match compile(src, &|_| None) {
        Ok(p) => p,
        Err(e) => panic!("does not compile:\n{e}"),
    }
}

fn proc_of<'a>(p: &'a Program, name: &str) -> &'a CompiledProc {
    p.proc(name).unwrap_or_else(|| panic!("no proc {name}"))
}

fn run(p: &CompiledProc, store: &mut MemStore, args: &[Value]) -> Result<Value, Abort> {
    let ctx = ExecContext::new(Bytes::from_static(b"op-7"), 42);
    p.run(store, &encode_args(args), &ctx)
        .map(|b| Value::decode(&b).unwrap_or_else(|e| panic!("bad result encoding: {e}")))
}

/// Run the only proc of `src` (a body returning `ret`) with no arguments.
fn eval(ret: &str, body: &str) -> Result<Value, Abort> {
    let src = format!("keyspace s: strong\nkeyspace w: weak\nproc main() -> {ret} {{\n{body}\n}}");
    let p = program(&src);
    run(proc_of(&p, "main"), &mut MemStore::new(), &[])
}

fn b(s: &str) -> Value {
    Value::Bytes(Bytes::copy_from_slice(s.as_bytes()))
}

fn abort_msg(r: Result<Value, Abort>) -> String {
    match r {
        Err(a) => a.0,
        Ok(v) => panic!("expected an abort, got {v:?}"),
    }
}

const POST: &str = r#"
keyspace members: strong
keyspace inbox: weak

# Deliver msg to every member of group.
proc post(group: bytes, msg: bytes) -> int {
    let n = 0
    for (k, user) in scan(members, group ++ "/", group ++ "0", 1000) {
        put(inbox, user ++ "/" ++ op_id(), msg)
        n = n + 1
    }
    return n
}

proc join(group: bytes, user: bytes) {
    put(members, group ++ "/" ++ user, user)
}
"#;

#[test]
fn the_post_example_delivers_to_every_member() {
    let p = program(POST);
    assert_eq!(
        p.keyspaces,
        vec![
            ("members".to_owned(), Label::Strong),
            ("inbox".to_owned(), Label::Weak)
        ]
    );
    let post = proc_of(&p, "post");
    let join = proc_of(&p, "join");
    assert!(!post.writes_strong && !post.read_only);
    assert!(join.writes_strong);
    assert_eq!(post.reads.iter().collect::<Vec<_>>(), vec!["members"]);
    assert_eq!(post.writes.iter().collect::<Vec<_>>(), vec!["inbox"]);
    let sig = post.signature();
    assert_eq!(sig.params_text(), "(group: bytes, msg: bytes)");
    assert_eq!(sig.returns, "int");
    assert_eq!(sig.summary, "Deliver msg to every member of group.");

    let mut store = MemStore::new();
    for (g, u) in [("g", "ann"), ("g", "bob"), ("h", "cat"), ("g0", "dan")] {
        assert_eq!(run(join, &mut store, &[b(g), b(u)]), Ok(Value::Nil));
    }
    assert_eq!(run(post, &mut store, &[b("g"), b("hi")]), Ok(Value::Int(2)));
    assert_eq!(
        store.get("inbox", b"ann/op-7"),
        Some(Bytes::from_static(b"hi"))
    );
    assert_eq!(
        store.get("inbox", b"bob/op-7"),
        Some(Bytes::from_static(b"hi"))
    );
    assert_eq!(store.get("inbox", b"cat/op-7"), None);
    assert_eq!(store.get("inbox", b"dan/op-7"), None);
}

#[test]
fn arithmetic_comparisons_and_logic() {
    assert_eq!(
        eval("int", "return 1 + 2 * 3 - 10 / 3 % 2"),
        Ok(Value::Int(6))
    );
    assert_eq!(eval("int", "return -(7 / 2) + -7 % 3"), Ok(Value::Int(-4)));
    assert_eq!(
        eval(
            "bool",
            r#"return "ab" < "b" and 2 <= 2 and not (3 > 4) or false"#
        ),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        eval("bool", "return [1, [2]] == [1, [2]]"),
        Ok(Value::Bool(true))
    );
    assert_eq!(eval("bool", r#"return nil != "x""#), Ok(Value::Bool(true)));
    // `not` is looser than comparisons: `not (v == nil)`.
    assert_eq!(
        eval("bool", "let v = get(w, \"k\")\nreturn not v == nil"),
        Ok(Value::Bool(false))
    );
    assert_eq!(
        eval("int", "return -9223372036854775808 + 1"),
        Ok(Value::Int(i64::MIN + 1))
    );
}

#[test]
fn bytes_and_lists() {
    assert_eq!(
        eval("bytes", r#"return "a\x41\n" ++ str(-12)"#),
        Ok(b("aA\n-12"))
    );
    assert_eq!(
        eval("int", r#"return int("-40") + len("abc") + len([1, 2])"#),
        Ok(Value::Int(-35))
    );
    assert_eq!(
        eval(
            "list",
            "let xs = [1] ++ [2]\nxs = append(xs, \"z\")\nreturn xs"
        ),
        Ok(Value::List(vec![Value::Int(1), Value::Int(2), b("z")]))
    );
    assert_eq!(
        eval("any", "let xs = [1, 2, 3]\nreturn xs[2]"),
        Ok(Value::Int(3))
    );
    assert_eq!(eval("bytes", r#"return slice("hello", 1, 3)"#), Ok(b("el")));
    assert_eq!(
        eval("list", "return slice([1, 2, 3], 1, 3)"),
        Ok(Value::List(vec![Value::Int(2), Value::Int(3)]))
    );
}

#[test]
fn control_flow() {
    let body = "let i = 0\nlet s = 0\nwhile i < 10 {\n i = i + 1\n if i % 2 == 0 { s = s + i } else if i == 5 { s = s + 100 } else { s = s }\n}\nreturn s";
    assert_eq!(eval("int", body), Ok(Value::Int(130)));
    let body = "let s = 0\nfor x in [1, 2, 3] { s = s * 10 + int(str(x)) }\nreturn s";
    assert_eq!(eval("int", body), Ok(Value::Int(123)));
    assert_eq!(eval("nil", "let x = 1"), Ok(Value::Nil));
    assert_eq!(eval("any", "if false { return 1 }"), Ok(Value::Nil));
}

#[test]
fn store_calls() {
    let src = r#"
keyspace s: strong
proc f() -> list {
    put(s, "a", "1")
    put(s, "b", "2")
    put(s, "c", "3")
    delete(s, "b")
    let out = []
    for (k, v) in scan(s, "a", "z", 10) { out = append(out, k ++ "=" ++ v) }
    out = append(out, get(s, "a"))
    out = append(out, get(s, "b"))
    out = append(out, len(scan(s, "a", "c", 10)))
    out = append(out, len(scan(s, "a", "z", 1)))
    return out
}
"#;
    let p = program(src);
    let out = run(proc_of(&p, "f"), &mut MemStore::new(), &[]);
    assert_eq!(
        out,
        Ok(Value::List(vec![
            b("a=1"),
            b("c=3"),
            b("1"),
            Value::Nil,
            Value::Int(1),
            Value::Int(1)
        ]))
    );
}

#[test]
fn runtime_errors_abort_naming_the_position() {
    let m = abort_msg(eval("int", "let x = 9223372036854775807\nreturn x + 1"));
    assert_eq!(
        m,
        "proc main, line 5:10: integer overflow in 9223372036854775807 + 1"
    );
    assert!(abort_msg(eval("int", "return 1 / (1 - 1)")).contains("line 4:10: division by zero"));
    assert!(abort_msg(eval("int", "return 1 % 0")).contains("remainder by zero"));
    assert!(abort_msg(eval("int", "return -(-9223372036854775807 - 1)")).contains("overflow"));
    let m = abort_msg(eval("any", "let xs = [1]\nreturn xs[1]"));
    assert!(
        m.contains("line 5:10: index 1 out of bounds (the list has 1 items)"),
        "{m}"
    );
    assert!(abort_msg(eval("any", "return [1][-1]")).contains("out of bounds"));
    let m = abort_msg(eval("int", r#"return int("12a")"#));
    assert!(m.contains("\"12a\" is not a decimal integer"), "{m}");
    let m = abort_msg(eval("int", "let v = get(w, \"k\")\nreturn v + 1"));
    assert!(
        m.contains("line 5:10: `+` needs two ints, got nil and int"),
        "{m}"
    );
    let m = abort_msg(eval("int", "let v: any = \"x\"\nlet n: int = v\nreturn n"));
    assert!(m.contains("line 5:5: `n` must be int, got bytes"), "{m}");
    let m = abort_msg(eval("bytes", "let v: any = 1\nreturn v"));
    assert!(m.contains("the result must be bytes, got int"), "{m}");
    assert!(abort_msg(eval("any", r#"return slice("ab", 1, 3)"#)).contains("out of bounds"));
    assert!(abort_msg(eval("any", r#"return scan(s, "a", "b", -1)"#)).contains("scan limit -1"));
    let m = abort_msg(eval("nil", "let x: any = [1]\nfor (a, b) in x { }"));
    assert!(m.contains("2-item lists, got int"), "{m}");
}

#[test]
fn abort_statement_gives_the_users_message() {
    assert_eq!(
        abort_msg(eval("nil", r#"abort "no such group""#)),
        "no such group"
    );
    assert_eq!(abort_msg(eval("nil", r#"abort "x=" ++ str(3)"#)), "x=3");
}

#[test]
fn a_failed_run_reports_its_writes_to_the_store_but_the_caller_discards_them() {
    // The store sees the writes made before an abort; the executor's
    // transaction is what discards them. This documents the contract.
    let src = "keyspace s: strong\nproc f() { put(s, \"k\", \"v\")\n abort \"no\" }";
    let p = program(src);
    let mut st = MemStore::new();
    assert!(run(proc_of(&p, "f"), &mut st, &[]).is_err());
    assert_eq!(st.get("s", b"k"), Some(Bytes::from_static(b"v")));
}

#[test]
fn fuel_runs_out_deterministically() {
    let src = "proc spin() -> int {\n let i = 0\n while true { i = i + 1 }\n return i\n}";
    let p = program(src);
    let spin = proc_of(&p, "spin");
    let ctx = ExecContext {
        fuel: 10_000,
        ..ExecContext::default()
    };
    let args = encode_args(&[]);
    let a = spin.run(&mut MemStore::new(), &args, &ctx);
    let b = spin.run(&mut MemStore::new(), &args, &ctx);
    assert_eq!(a, b);
    let msg = abort_msg(a.map(|_| Value::Nil));
    assert!(
        msg.starts_with("out of fuel after 10000 steps in proc spin at line"),
        "{msg}"
    );
    // The default fuel stops it too.
    assert!(spin
        .run(&mut MemStore::new(), &args, &ExecContext::default())
        .is_err());
}

#[test]
fn memory_runs_out_deterministically() {
    let src = "proc grow() -> int {\n let s = \"x\"\n while true { s = s ++ s }\n return 0\n}";
    let p = program(src);
    let grow = proc_of(&p, "grow");
    let ctx = ExecContext {
        memory_bytes_max: 1 << 20,
        ..ExecContext::default()
    };
    let a = grow.run(&mut MemStore::new(), &encode_args(&[]), &ctx);
    let msg = abort_msg(a.map(|_| Value::Nil));
    assert!(
        msg.starts_with(
            "out of memory: proc grow created more than 1048576 bytes of values, at line 3:"
        ),
        "{msg}"
    );
    // Lists nested too deep abort rather than exhausting anything.
    let m = abort_msg(eval("nil", "let x = []\nwhile true { x = [x] }"));
    assert!(m.contains("lists nested more than 32 deep"), "{m}");
}

#[test]
fn rand_is_deterministic_per_seed() {
    let src = "proc r() -> list { return [rand(), rand(), rand() % 10] }";
    let p = program(src);
    let r = proc_of(&p, "r");
    let go = |seed| {
        r.run(
            &mut MemStore::new(),
            &encode_args(&[]),
            &ExecContext::new(Bytes::new(), seed),
        )
    };
    assert_eq!(go(1), go(1));
    assert_ne!(go(1), go(2));
    let v = go(1).ok().and_then(|b| Value::decode(&b).ok());
    let Some(Value::List(xs)) = v else {
        panic!("not a list")
    };
    assert!(xs.iter().all(|x| x.as_int().is_some_and(|n| n >= 0)));
    assert_ne!(xs[0], xs[1]);
}

#[test]
fn arguments_are_checked() {
    let p = program("proc f(a: int, b: bytes, c: any, d: list, e: bool) { }");
    let f = proc_of(&p, "f");
    let good = [
        Value::Int(1),
        b("x"),
        Value::Nil,
        Value::List(vec![]),
        Value::Bool(true),
    ];
    assert_eq!(f.check_args(&encode_args(&good)), Ok(()));
    assert_eq!(run(f, &mut MemStore::new(), &good), Ok(Value::Nil));
    let e = f.check_args(&encode_args(&good[..2]));
    assert_eq!(
        e,
        Err("f takes 5 argument(s) (a: int, b: bytes, c: any, d: list, e: bool), got 2".to_owned())
    );
    let mut bad = good.to_vec();
    bad[1] = Value::Int(3);
    assert_eq!(
        f.check_args(&encode_args(&bad)),
        Err("f: argument `b` must be bytes, got int".to_owned())
    );
    assert!(f
        .check_args(b"\xff")
        .is_err_and(|e| e.contains("bad arguments")));
    assert!(run(f, &mut MemStore::new(), &bad).is_err());
}

#[test]
fn programs_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<Program>();
    both::<CompiledProc>();
}

#[test]
fn in_place_fast_paths_agree_with_the_general_ones() {
    // Variables compared with literals, concatenated, parsed and used as
    // keys are read in place; the results and errors must not change.
    for (v, lit) in [
        ("\"a\"", "\"a\""),
        ("\"a\"", "nil"),
        ("[1]", "nil"),
        ("1", "1"),
        ("nil", "nil"),
        ("true", "false"),
    ] {
        let direct = eval("bool", &format!("let v: any = {v}\nreturn v == {lit}"));
        let general = eval("bool", &format!("let v: any = {v}\nreturn {lit} == v"));
        assert_eq!(direct, general, "{v} == {lit}");
        let direct = eval("bool", &format!("let v: any = {v}\nreturn v != {lit}"));
        let general = eval("bool", &format!("let v: any = {v}\nreturn {lit} != v"));
        assert_eq!(direct, general, "{v} != {lit}");
    }
    assert_eq!(
        eval("any", "let v: any = \"ab\"\nreturn v ++ \"c\""),
        Ok(b("abc"))
    );
    assert!(abort_msg(eval(
        "any",
        "let v: any = \"ab\"\nlet w: any = 1\nreturn v ++ w"
    ))
    .contains("`++` needs two bytes or two lists, got bytes and int"));
    assert_eq!(
        eval("int", "let v: any = \"-17\"\nreturn int(v)"),
        Ok(Value::Int(-17))
    );
    assert!(abort_msg(eval("int", "let v: any = \"x1\"\nreturn int(v)"))
        .contains("int: \"x1\" is not a decimal integer"));
    assert!(abort_msg(eval("int", "let v: any = 3\nreturn int(v)"))
        .contains("int's argument must be bytes, got int"));
    assert_eq!(
        eval(
            "any",
            "put(s, \"k\", \"v\")\nlet k: any = \"k\"\nreturn get(s, k)"
        ),
        Ok(b("v"))
    );
    assert!(abort_msg(eval("any", "let k: any = 1\nreturn get(s, k)"))
        .contains("a key must be bytes, got int"));
}

#[test]
fn appending_to_a_variable_is_linear_and_keeps_value_semantics() {
    // 20,000 appends fit the default memory budget (copying each time would not).
    let body = "let xs = []\nlet i = 0\nwhile i < 20000 { xs = append(xs, i)\n i = i + 1 }\nreturn len(xs) + xs[19999]";
    assert_eq!(eval("int", body), Ok(Value::Int(39999)));
    // Lists are values: another variable holding the list does not change.
    let body = "let xs = [1]\nlet ys = xs\nxs = append(xs, 2)\nreturn [xs, ys]";
    assert_eq!(
        eval("list", body),
        Ok(Value::List(vec![
            Value::List(vec![Value::Int(1), Value::Int(2)]),
            Value::List(vec![Value::Int(1)])
        ]))
    );
    // A loop iterates over the list as it was when the loop started.
    let body = "let xs = [1, 2]\nfor x in xs { xs = append(xs, x) }\nreturn xs";
    assert_eq!(
        eval("list", body),
        Ok(Value::List(vec![
            Value::Int(1),
            Value::Int(2),
            Value::Int(1),
            Value::Int(2)
        ]))
    );
    let body = "let xs = [1]\nxs = append(xs, len(xs))\nreturn xs";
    assert_eq!(
        eval("list", body),
        Ok(Value::List(vec![Value::Int(1), Value::Int(1)]))
    );
    let m = abort_msg(eval("nil", "let x = []\nwhile true { x = append(x, x) }"));
    assert!(m.contains("lists nested more than 32 deep"), "{m}");
    let m = abort_msg(eval("nil", "let x: any = 1\nx = append(x, 2)"));
    assert!(m.contains("append needs a list, got int"), "{m}");
}
