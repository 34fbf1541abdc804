//! Compile-time errors: syntax, names, types, returns, duplicates, limits.
//! Every error names its line and column.

use creek_procs::lang::{compile, Label, EXPR_HEIGHT_MAX, LITERAL_BYTES_MAX, SOURCE_BYTES_MAX};

/// The errors of `src`, one `line L:C: message` per line.
fn errors(src: &str) -> String {
    errors_with(src, &|_| None)
}

fn errors_with(src: &str, existing: &dyn Fn(&str) -> Option<Label>) -> String {
    match compile(src, existing) {
        Ok(_) => panic!("compiled, but should not:\n{src}"),
        Err(e) => e.to_string(),
    }
}

fn ok(src: &str) {
    if let Err(e) = compile(src, &|_| None) {
        panic!("does not compile:\n{e}\n{src}");
    }
}

fn body(b: &str) -> String {
    format!("keyspace s: strong\nkeyspace w: weak\nproc p(k: bytes, n: int) -> any {{\n{b}\n}}")
}

#[track_caller]
fn body_err(b: &str, want: &str) {
    let e = errors(&body(b));
    assert!(e.contains(want), "wanted {want:?} in:\n{e}");
}

#[test]
fn syntax_errors() {
    assert_eq!(
        errors("proc p( {"),
        "line 1:9: expected a parameter name, found `{`"
    );
    assert_eq!(
        errors("proc p() { let = 1 }"),
        "line 1:16: expected a variable name, found `=`"
    );
    assert_eq!(
        errors("proc p() {\n  1 + 2\n}"),
        "line 2:5: only a call can stand alone as a statement"
    );
    assert_eq!(
        errors("proc p() -> int { return 1 < 2 < 3 }"),
        "line 1:32: comparisons do not chain; use `and`"
    );
    assert_eq!(
        errors("keyspace a: medium\nproc p() {}"),
        "line 1:13: expected `strong` or `weak`"
    );
    assert_eq!(
        errors("proc p() { x = 1"),
        "line 1:17: expected an expression, found end of input"
    );
    assert_eq!(
        errors("proc p() -> float { }"),
        "line 1:13: unknown type `float` (types: int, bytes, bool, list, any, nil)"
    );
    assert_eq!(
        errors("// hi\nproc p() {}"),
        "line 1:1: comments start with `#`"
    );
    assert_eq!(errors(""), "line 1:1: no `proc` in the source");
    assert_eq!(
        errors("let x = 1"),
        "line 1:1: expected `keyspace` or `proc`, found `let`"
    );
    assert_eq!(
        errors("proc p() { return 9223372036854775808 }"),
        "line 1:19: integer literal out of range"
    );
}

#[test]
fn errors_in_several_procs_are_all_reported() {
    let e = errors("proc a() { x = 1 }\nproc b( {}\nproc c() { y = 2 }");
    assert_eq!(
        e,
        "line 1:12: unknown variable `x` (declare it with let)\n\
         line 2:9: expected a parameter name, found `{`\n\
         line 3:12: unknown variable `y` (declare it with let)"
    );
}

#[test]
fn unknown_names() {
    body_err("return y", "line 4:8: unknown variable `y`");
    body_err(
        "return w",
        "unknown variable `w` (a keyspace can only be named as the first argument",
    );
    body_err("return foo(1)", "line 4:8: unknown function `foo`");
    body_err("return get(nope, k)", "line 4:12: unknown keyspace `nope`");
    body_err("return get(k, k)", "unknown keyspace `k`");
    body_err(
        "return get(\"s\", k)",
        "the first argument of get must be a keyspace name",
    );
}

#[test]
fn arity() {
    body_err(
        "return get(s)",
        "line 4:8: get takes 2 argument(s), got 1: get(keyspace, key: bytes) -> bytes or nil",
    );
    body_err("put(s, k)", "put takes 3 argument(s), got 2");
    body_err("return scan(s, k, k)", "scan takes 4 argument(s)");
    body_err("return rand(1)", "rand takes 0 argument(s), got 1");
    body_err("return str()", "str takes 1 argument(s), got 0");
}

#[test]
fn type_errors() {
    body_err(
        "return n + k",
        "line 4:12: an operand of `+` must be int, found bytes",
    );
    body_err(
        "return k ++ n",
        "an operand of `++` must be bytes or list, found int",
    );
    body_err(
        "return k ++ [1]",
        "`++` needs two values of the same type, found bytes and list",
    );
    body_err(
        "return k < n",
        "`<` needs two values of the same type, found bytes and int",
    );
    body_err("return n == k", "comparing int with bytes is always false");
    body_err("if n { }", "line 4:4: a condition must be bool, found int");
    body_err("while k { }", "a condition must be bool, found bytes");
    body_err(
        "for x in k { }",
        "what `for` iterates must be list, found bytes",
    );
    body_err(
        "return not n",
        "the operand of `not` must be bool, found int",
    );
    body_err(
        "return -k",
        "the operand of unary - must be int, found bytes",
    );
    body_err("return k[0]", "an indexed value must be list, found bytes");
    body_err("return [1][k]", "an index must be int, found bytes");
    body_err("put(s, k, n)", "argument 3 of put must be bytes, found int");
    body_err(
        "return int(n)",
        "argument 1 of int must be bytes, found int",
    );
    body_err(
        "return str(k)",
        "argument 1 of str must be int, found bytes",
    );
    body_err(
        "return len(n)",
        "argument 1 of len must be bytes or list, found int",
    );
    body_err("abort n", "an abort message must be bytes, found int");
    body_err(
        "let x = 1\nx = k",
        "line 5:5: `x` has type int, the value is bytes",
    );
    body_err("let x: bytes = 1", "`x` has type bytes, the value is int");
    body_err("n = nil", "`n` has type int, the value is nil");
}

#[test]
fn anys_and_nil_variables_are_checked_at_run_time() {
    ok(&body(
        "let v = get(w, k)\nlet x = nil\nx = 1\nx = k\nreturn v ++ \"x\"",
    ));
    ok(&body("let v = get(w, k)\nreturn int(v) + n"));
    ok(&body("let xs = [1, k]\nreturn xs[0] + 1"));
}

#[test]
fn returns() {
    assert_eq!(
        errors("proc p() -> int { return \"x\" }"),
        "line 1:26: the procedure's result has type int, the value is bytes"
    );
    assert_eq!(
        errors("proc p() -> int { return }"),
        "line 1:19: the procedure's result has type int, the value is nil"
    );
    assert_eq!(
        errors("proc p(b: bool) -> int {\n if b { return 1 }\n}"),
        "line 1:6: proc p can reach its end without returning (it returns int)"
    );
    ok("proc p(b: bool) -> int {\n if b { return 1 } else { abort \"no\" }\n}");
    ok("proc p(b: bool) -> int {\n if b { return 1 } else if not b { return 2 } else { return 3 }\n}");
    ok("proc p(b: bool) { if b { return } }");
    ok("proc p(b: bool) -> any { if b { return 1 } }");
}

#[test]
fn duplicates() {
    assert!(errors("proc p() {}\nproc p() {}").contains("line 2:6: proc `p` is defined twice"));
    assert!(errors("keyspace a: weak\nkeyspace a: weak\nproc p() {}")
        .contains("line 2:10: keyspace `a` is declared twice"));
    assert!(errors("proc p(a: int, a: int) {}").contains("line 1:16: `a` is already defined"));
    body_err("let k = 1", "line 4:5: `k` is already defined");
    body_err(
        "let x = 1\nif true { let x = 2 }",
        "line 5:15: `x` is already defined",
    );
    body_err("for (n, v) in [] { }", "`n` is already defined");
    // Scopes end with their block, so the name is free again afterwards.
    ok(&body("if true { let x = 1 }\nlet x = 2\nreturn x"));
    assert!(errors("proc p(a: nil) {}").contains("parameter `a` cannot have type nil"));
}

#[test]
fn keyspaces_must_agree_with_existing_ones() {
    let existing = |name: &str| match name {
        "members" => Some(Label::Strong),
        "inbox" => Some(Label::Weak),
        _ => None,
    };
    let e = errors_with("keyspace members: weak\nproc p() {}", &existing);
    assert_eq!(
        e,
        "line 1:10: keyspace `members` already exists as strong, not weak"
    );
    let src = "keyspace members: strong\nproc p(k: bytes) -> any { put(inbox, k, k)\n return get(members, k) }";
    let p = compile(src, &existing).unwrap_or_else(|e| panic!("{e}"));
    let p = p.proc("p").unwrap_or_else(|| panic!("no p"));
    assert_eq!(p.writes.iter().collect::<Vec<_>>(), vec!["inbox"]);
    assert!(!p.writes_strong);
}

#[test]
fn limits_give_errors_not_crashes() {
    let big = format!("proc p() {{}}{}", " ".repeat(SOURCE_BYTES_MAX));
    assert!(errors(&big).contains("more than 262144"));
    let lit = format!(
        "proc p() -> bytes {{ return \"{}\" }}",
        "a".repeat(LITERAL_BYTES_MAX + 1)
    );
    assert!(errors(&lit).contains("string literal longer than 65536 bytes"));
    let deep = format!(
        "proc p() -> int {{ return {}1{} }}",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    assert!(errors(&deep).contains("nested more than 128 levels deep"));
    let neg = format!("proc p() -> int {{ return {}1 }}", "-".repeat(5000));
    assert!(errors(&neg).contains("nested more than"));
    let blocks = format!(
        "proc p() {{ {} {} }}",
        "if true {".repeat(500),
        "}".repeat(500)
    );
    assert!(errors(&blocks).contains("nested more than"));
    let chain = format!(
        "proc p() -> int {{ return 1{} }}",
        " + 1".repeat(EXPR_HEIGHT_MAX + 1)
    );
    assert!(errors(&chain).contains("expression nested more than 256 levels deep"));
    let many: String = (0..300).map(|i| format!("proc p{i}() {{}}\n")).collect();
    assert!(errors(&many).contains("more than 256 procedures"));
    let name = format!("proc {}() {{}}", "a".repeat(200));
    assert!(errors(&name).contains("name longer than 128"));
}

#[test]
fn the_largest_programs_the_limits_allow_compile_and_run() {
    use creek_procs::lang::{ExecContext, MemStore};
    use creek_types::value::{encode_args, Value};
    // The tallest expression, the deepest parentheses and the deepest blocks
    // (with loops, for the flow fixpoint) on a test thread's stack.
    let chain = format!(
        "proc p() -> int {{ return 0{} }}",
        " + 1".repeat(EXPR_HEIGHT_MAX - 1)
    );
    let parens = format!(
        "proc p() -> int {{ return {}1{} }}",
        "(".repeat(60),
        ")".repeat(60)
    );
    let mut blocks = String::from("keyspace w: weak\nproc p() -> int {\nlet n = 0\n");
    for i in 0..30 {
        blocks.push_str(&format!(
            "let x{i} = 0\nwhile x{i} < 1 {{ x{i} = x{i} + 1\nn = n + 1\n"
        ));
    }
    blocks.push_str("for (k, v) in scan(w, \"a\", \"z\", 5) { n = n + len(v) }\n");
    blocks.push_str(&"}".repeat(30));
    blocks.push_str("\nreturn n\n}");
    for (src, want) in [
        (chain, EXPR_HEIGHT_MAX as i64 - 1),
        (parens, 1),
        (blocks, 30),
    ] {
        let p = compile(&src, &|_| None).unwrap_or_else(|e| panic!("{e}"));
        let p = p.proc("p").unwrap_or_else(|| panic!("no p"));
        let out = p.run(
            &mut MemStore::new(),
            &encode_args(&[]),
            &ExecContext::default(),
        );
        assert_eq!(
            out.map(|b| Value::decode(&b).ok()),
            Ok(Some(Value::Int(want)))
        );
    }
}
