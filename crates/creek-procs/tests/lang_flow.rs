//! The information-flow check (MyriaStore §3.4): each rule rejects a
//! program, and the nearest safe program passes.

use creek_procs::lang::compile;

const HEAD: &str = "keyspace spam: weak\nkeyspace notes: weak\nkeyspace winners: strong\n";

fn src(body: &str) -> String {
    format!("{HEAD}proc p(k: bytes) -> any {{\n{body}\n}}")
}

/// `body` (which starts on line 5) must be rejected with `want` in the errors.
#[track_caller]
fn rejects(body: &str, want: &str) {
    match compile(&src(body), &|_| None) {
        Ok(_) => panic!("accepted, but should not:\n{body}"),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains(want), "wanted {want:?} in:\n{e}");
        }
    }
}

#[track_caller]
fn accepts(body: &str) -> bool {
    match compile(&src(body), &|_| None) {
        Ok(p) => p.procs.first().is_some_and(|p| p.writes_strong),
        Err(e) => panic!("rejected, but should not:\n{e}\n{body}"),
    }
}

#[test]
fn explicit_flow() {
    rejects(
        "let spam_count = get(spam, k)\nput(winners, k, spam_count)",
        "line 6:1: write to winners (strong) depends on weak data: spam_count, read from spam (weak) at line 5:18",
    );
    rejects(
        "let c = get(spam, k)\nlet d = c\nput(winners, k, d ++ \"!\")",
        "depends on weak data: c, read from spam",
    );
    // Nearest safe: the same data goes to a weak keyspace, or strong data goes to the strong one.
    assert!(!accepts(
        "let spam_count = get(spam, k)\nput(notes, k, spam_count)"
    ));
    assert!(accepts(
        "let count = get(winners, k)\nput(winners, k, count)"
    ));
}

#[test]
fn labels_are_flow_sensitive() {
    // Overwriting a weak variable with strong data under a strong pc cleans it.
    assert!(accepts(
        "let x: any = get(spam, k)\nx = \"clean\"\nput(winners, k, x)"
    ));
    // ...but not under a weak pc, and branches merge to the weaker label.
    rejects(
        "let x: any = \"a\"\nif get(spam, k) == nil { x = \"b\" }\nput(winners, k, x)",
        "line 7:1: write to winners (strong) depends on weak data: x, the condition at line 6:1",
    );
    rejects(
        "let x: any = \"a\"\nif get(winners, k) == nil { x = get(spam, k) }\nput(winners, k, x)",
        "depends on weak data: x, read from spam (weak) at line 6:33",
    );
    assert!(accepts("let x: any = \"a\"\nif get(winners, k) == nil { x = \"b\" } else { x = k }\nput(winners, k, x)"));
}

#[test]
fn implicit_flow_via_if() {
    rejects(
        "let c = get(spam, k)\nif c == nil { put(winners, k, \"1\") }",
        "line 6:15: write to winners (strong) is controlled by weak data: c, the condition at line 6:1, read from spam (weak) at line 5:9",
    );
    rejects(
        "if get(spam, k) != nil { } else { delete(winners, k) }",
        "write to winners (strong) is controlled by weak data",
    );
    rejects(
        "if get(winners, k) == nil and get(spam, k) == nil { put(winners, k, \"1\") }",
        "controlled by weak data",
    );
    assert!(accepts(
        "let c = get(winners, k)\nif c == nil { put(winners, k, \"1\") }"
    ));
}

#[test]
fn implicit_flow_via_while() {
    rejects(
        "let more = get(spam, k) != nil\nwhile more { more = false\nput(winners, k, \"1\") }",
        "line 7:1: write to winners (strong) is controlled by weak data",
    );
    assert!(accepts(
        "let more = get(winners, k) != nil\nwhile more { more = false\nput(winners, k, \"1\") }"
    ));
}

#[test]
fn loops_reach_a_fixpoint() {
    // x only turns weak in the third round: y is weak after the first, x = y in the second.
    let body = |ks: &str| {
        format!(
            "let x = \"a\"\nlet y = \"b\"\nlet i = 0\nwhile i < 3 {{\n put(winners, k, x)\n x = y\n for (kk, v) in scan({ks}, \"a\", \"z\", 1) {{ y = v }}\n i = i + 1\n}}"
        )
    };
    rejects(&body("spam"), "line 9:2: write to winners (strong) depends on weak data: v, read from spam (weak) at line 11:17");
    assert!(accepts(&body("winners")));
    // The same through a for loop over a list.
    rejects(
        "let x: any = \"a\"\nlet y: any = \"b\"\nfor i in [1, 2, 3] { put(winners, k, x)\n x = y\n y = get(spam, k) }",
        "depends on weak data: y, read from spam",
    );
    assert!(accepts("let x: any = \"a\"\nlet y: any = \"b\"\nfor i in [1, 2, 3] { put(winners, k, x)\n x = y\n y = get(winners, k) }"));
}

#[test]
fn implicit_flow_via_for_over_a_weak_scan() {
    rejects(
        "for (kk, v) in scan(spam, \"a\", \"z\", 10) { put(winners, \"seen\", \"1\") }",
        "line 5:43: write to winners (strong) is controlled by weak data: the loop at line 5:1, read from spam (weak) at line 5:16",
    );
    // The count of a weak scan is weak too.
    rejects(
        "let n = len(scan(spam, \"a\", \"z\", 10))\nput(winners, k, str(n))",
        "depends on weak data: n, read from spam",
    );
    assert!(accepts(
        "for (kk, v) in scan(winners, \"a\", \"z\", 10) { put(winners, kk, v) }"
    ));
    assert!(!accepts(
        "for (kk, v) in scan(spam, \"a\", \"z\", 10) { put(notes, kk, v) }"
    ));
}

#[test]
fn flow_via_a_list_holding_weak_data() {
    rejects(
        "let xs = [k, get(spam, k)]\nput(winners, k, xs[0])",
        "depends on weak data: xs, read from spam",
    );
    rejects(
        "let xs = append([k], get(spam, k))\nfor x in xs { put(winners, k, \"1\") }",
        "controlled by weak data: xs, the loop at line 6:1",
    );
    rejects(
        "let xs = [[k], [get(spam, k)]]\nlet ys = xs[0]\nput(winners, k, ys[0])",
        "depends on weak data",
    );
    assert!(accepts(
        "let xs = [k, get(winners, k)]\nput(winners, k, xs[0])"
    ));
}

#[test]
fn early_return_under_a_weak_pc() {
    rejects(
        "if get(spam, k) != nil { return 1 }\nput(winners, k, \"1\")\nreturn 0",
        "line 6:1: write to winners (strong) is controlled by weak data: whether the return at line 5:26 happens, read from spam (weak) at line 5:4",
    );
    // Writing before the weak return is safe: a return undoes nothing.
    assert!(accepts(
        "put(winners, k, \"1\")\nif get(spam, k) != nil { return 1 }\nreturn 0"
    ));
    assert!(accepts(
        "if get(winners, k) != nil { return 1 }\nput(winners, k, \"1\")\nreturn 0"
    ));
}

#[test]
fn abort_under_a_weak_pc() {
    rejects(
        "if get(spam, k) != nil { abort \"spam\" }\nput(winners, k, \"1\")",
        "line 6:1: write to winners (strong) is controlled by weak data: whether the possible abort at line 5:26 happens",
    );
    // An abort undoes earlier writes, so writing first does not help.
    rejects(
        "put(winners, k, \"1\")\nif get(spam, k) != nil { abort \"spam\" }",
        "line 5:1: write to winners (strong) can be undone by the possible abort at line 6:26, which depends on weak data",
    );
    assert!(accepts(
        "put(winners, k, \"1\")\nif get(winners, k) != nil { abort \"taken\" }"
    ));
}

#[test]
fn weak_key_of_a_strong_write() {
    rejects(
        "put(winners, get(spam, k), \"1\")",
        "line 5:1: write to winners (strong) uses a key that depends on weak data: read from spam (weak) at line 5:14",
    );
    rejects(
        "delete(winners, get(spam, k))",
        "uses a key that depends on weak data",
    );
    // A strong keyspace read with a weak key gives weak data.
    rejects(
        "let wk = get(spam, k)\nlet v = get(winners, wk)\nput(winners, k, v)",
        "depends on weak data: wk, read from spam",
    );
    assert!(accepts("put(winners, get(winners, k), \"1\")"));
    assert!(accepts(
        "let v = get(winners, get(winners, k))\nput(winners, k, v)"
    ));
}

#[test]
fn a_possibly_aborting_operation_on_weak_data() {
    rejects(
        "let c = get(spam, k)\nlet n = int(c)\nput(winners, k, \"1\")",
        "line 7:1: write to winners (strong) is controlled by weak data: c, whether the possible abort at line 6:9 happens",
    );
    rejects(
        "let c = get(spam, k)\nput(winners, k, \"1\")\nlet n = int(c)",
        "can be undone by the possible abort at line 7:9",
    );
    rejects(
        "let c = len(scan(spam, k, k ++ \"0\", 5))\nlet d = c + 1\nput(winners, k, \"1\")",
        "the possible abort at line 6:11",
    );
    rejects(
        "let c: any = get(spam, k)\nif c { }\nput(winners, k, \"1\")",
        "the possible abort at line 6:4",
    );
    rejects(
        "let xs = scan(spam, k, k, 5)\nlet x = xs[0]\nput(winners, k, \"1\")",
        "the possible abort at line 6:11",
    );
    // The same operations on strong data, or weak data used without a possible abort, pass.
    assert!(accepts(
        "let c = get(winners, k)\nlet n = int(c)\nput(winners, k, \"1\")"
    ));
    assert!(accepts(
        "let c = get(spam, k)\nlet seen = c != nil\nput(winners, k, \"1\")\nreturn [seen, c]"
    ));
}

#[test]
fn weak_reads_alone_are_fine_in_a_strong_proc() {
    assert!(accepts("put(winners, k, \"1\")\nreturn get(spam, k)"));
    assert!(!accepts(
        "let n = int(get(spam, k))\nput(notes, k, str(n + 1))\nreturn n"
    ));
}

/// The spam contest of MyriaStore §2.3 (the running example of §2.2): weak
/// inbox sizes decide who wins, a strong fact. Rejected.
const SPAM_CONTEST_UNSAFE: &str = r#"
keyspace inbox_size: weak
keyspace winner: strong

proc deliver(team: bytes) {
    let a = int(get(inbox_size, "a"))
    let b = int(get(inbox_size, "b"))
    if a >= 1000000 and b < 1000000 {
        put(winner, "winner", "a")
    } else if a < 1000000 and b >= 1000000 {
        put(winner, "winner", "b")
    }
}
"#;

/// The safe variant: spam counts are strong, so the winner is decided once.
const SPAM_CONTEST_SAFE: &str = r#"
keyspace spam_count: strong
keyspace winner: strong
keyspace inbox: weak

proc report_spam(team: bytes, msg: bytes) -> int {
    put(inbox, team ++ "/" ++ op_id(), msg)
    let v = get(spam_count, team)
    let n = 1
    if v != nil { n = int(v) + 1 }
    put(spam_count, team, str(n))
    if n >= 1000000 and get(winner, "winner") == nil {
        put(winner, "winner", team)
    }
    return n
}
"#;

#[test]
fn the_spam_contest() {
    let e = match compile(SPAM_CONTEST_UNSAFE, &|_| None) {
        Ok(_) => panic!("the unsafe spam contest compiled"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("line 9:9: write to winner (strong) is controlled by weak data: a, the condition at line 8:5, read from inbox_size (weak) at line 6:17"),
        "{e}"
    );
    assert!(
        e.contains("line 11:9: write to winner (strong) is controlled by weak data"),
        "{e}"
    );
    let p = compile(SPAM_CONTEST_SAFE, &|_| None).unwrap_or_else(|e| panic!("{e}"));
    let p = p.proc("report_spam").unwrap_or_else(|| panic!("no proc"));
    assert!(p.writes_strong);
    assert_eq!(
        p.writes.iter().collect::<Vec<_>>(),
        vec!["inbox", "spam_count", "winner"]
    );
}

#[test]
fn short_circuit_operands_run_under_the_left_operands_label() {
    // Whether `len(k) + 1` (which could overflow) runs depends on weak data.
    rejects(
        "let ok = get(spam, k) != nil and len(k) + 1 > 0\nput(winners, k, \"1\")",
        "line 6:1: write to winners (strong) is controlled by weak data: whether the possible abort at line 5:41 happens",
    );
    rejects(
        "let ok = get(spam, k) == nil or len(k) + 1 > 0\nput(winners, k, \"1\")",
        "possible abort at line 5:40",
    );
    assert!(accepts(
        "let ok = len(k) + 1 > 0 and get(spam, k) != nil\nput(winners, k, \"1\")"
    ));
}
