//! Robustness: `compile` never panics on random tokens, random bytes or
//! mutations of valid programs, and random well-formed programs only ever
//! finish with a result or an `Abort`, deterministically.

use bytes::Bytes;
use creek_procs::lang::{compile, ExecContext, Label, MemStore, Store};
use creek_types::value::{encode_args, Value};
use proptest::prelude::*;

/// A small seeded generator (splitmix64), so a failing case replays from
/// the seed proptest prints.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pick(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn one<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.pick(xs.len())]
    }
}

const TOKENS: &[&str] = &[
    "keyspace",
    "proc",
    "let",
    "if",
    "else",
    "while",
    "for",
    "in",
    "return",
    "abort",
    "and",
    "or",
    "not",
    "true",
    "false",
    "nil",
    "strong",
    "weak",
    "int",
    "bytes",
    "any",
    "list",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    ";",
    "->",
    "+",
    "-",
    "*",
    "/",
    "%",
    "++",
    "=",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "x",
    "y",
    "ks",
    "get",
    "put",
    "scan",
    "len",
    "str",
    "0",
    "1",
    "9223372036854775807",
    "9223372036854775808",
    "\"a\"",
    "\"\\x4\"",
    "\"\\q\"",
    "\"",
    "#",
    "\n",
    "@",
    "é",
    "\u{0}",
    "//",
    "\\",
];

fn random_tokens(seed: u64) -> String {
    let mut g = Gen(seed);
    let n = g.pick(200);
    let mut s = String::new();
    for _ in 0..n {
        s.push_str(g.one(TOKENS));
        s.push_str(g.one(&[" ", "", "\n"]));
    }
    s
}

const VALID: &[&str] = &[
    r#"keyspace members: strong
keyspace inbox: weak
# Post to a group.
proc post(group: bytes, msg: bytes) -> int {
    let n = 0
    for (k, user) in scan(members, group ++ "/", group ++ "0", 1000) {
        put(inbox, user ++ "/" ++ op_id(), msg)
        n = n + 1
    }
    return n
}"#,
    r#"keyspace c: strong
proc incr(key: bytes, delta: int) -> int {
    let v = get(c, key)
    let n = delta
    if v != nil { n = int(v) + delta } else if delta < 0 { abort "negative" }
    put(c, key, str(n))
    let xs = [n, [key], nil, true]
    while len(xs) < 6 { xs = append(xs, -n % 7) }
    return xs[0] + len(slice(key, 0, len(key)))
}"#,
];

fn mutate(seed: u64) -> String {
    let mut g = Gen(seed);
    let mut s: Vec<char> = VALID[g.pick(VALID.len())].chars().collect();
    for _ in 0..1 + g.pick(4) {
        let len = s.len().max(1);
        let at = g.pick(len).min(s.len());
        match g.pick(4) {
            0 => {
                let end = (at + g.pick(8)).min(s.len());
                s.drain(at..end);
            }
            1 => {
                let t: Vec<char> = g.one(TOKENS).chars().collect();
                s.splice(at..at, t);
            }
            2 => {
                let end = (at + g.pick(30)).min(s.len());
                let copy: Vec<char> = s[at..end].to_vec();
                s.splice(at..at, copy);
            }
            _ => {
                if let Some(c) = s.get_mut(at) {
                    *c = g
                        .one(&["(", "}", "x", "0", "\"", " ", "-"])
                        .chars()
                        .next()
                        .unwrap_or(' ');
                }
            }
        }
    }
    s.into_iter().collect()
}

fn existing(name: &str) -> Option<Label> {
    match name {
        "members" => Some(Label::Strong),
        _ => None,
    }
}

fn store(seed: u64) -> MemStore {
    let mut g = Gen(seed);
    let mut st = MemStore::new();
    for _ in 0..g.pick(12) {
        let ks = g.one(&["w", "s", "members", "inbox", "c"]);
        let k = g.one(&["", "a", "k1", "1", "g/x", "zz"]);
        let v = g.one(&["1", "-3", "x", "", "9223372036854775807"]);
        st.put(ks, Bytes::from(k), Bytes::from(v));
    }
    st
}

fn args(seed: u64) -> Vec<Value> {
    let mut g = Gen(seed);
    let one = |g: &mut Gen| match g.pick(5) {
        0 => Value::Int(g.next() as i64 % 100),
        1 => Value::Bytes(Bytes::from(g.one(&["", "a", "k1", "12"]))),
        2 => Value::Nil,
        3 => Value::List(vec![Value::Int(1), Value::from("a")]),
        _ => Value::Bool(true),
    };
    (0..g.pick(4)).map(|_| one(&mut g)).collect()
}

/// Compile `src`; if it compiles, run every proc on a random store with
/// random arguments, twice, and check both runs agree.
fn compile_and_run(src: &str, seed: u64) -> bool {
    let Ok(p) = compile(src, &existing) else {
        return false;
    };
    let ctx = ExecContext {
        op_id: Bytes::from_static(b"op"),
        seed,
        fuel: 20_000,
        memory_bytes_max: 1 << 20,
    };
    for proc_ in &p.procs {
        for a in [args(seed), args(seed ^ 1)] {
            let raw = encode_args(&a);
            let _ = proc_.check_args(&raw);
            let mut s1 = store(seed);
            let mut s2 = s1.clone();
            let r1 = proc_.run(&mut s1, &raw, &ctx);
            let r2 = proc_.run(&mut s2, &raw, &ctx);
            assert_eq!(r1, r2, "two runs differ:\n{src}");
            assert_eq!(s1, s2, "two runs wrote differently:\n{src}");
            if let Ok(b) = r1 {
                assert!(Value::decode(&b).is_ok(), "undecodable result:\n{src}");
            }
        }
    }
    true
}

/// Random well-formed programs: every variable is `any`, so most compile
/// and the run-time checks get exercised.
struct ProgGen {
    g: Gen,
    fresh: u32,
    /// Whether `put` may target the strong keyspace.
    strong: bool,
}

impl ProgGen {
    fn atom(&mut self) -> String {
        match self.g.pick(30) {
            0..=21 => format!("v{}", self.g.pick(8)),
            22 => self
                .g
                .one(&[
                    "0",
                    "1",
                    "-1",
                    "7",
                    "9223372036854775807",
                    "-9223372036854775808",
                ])
                .to_owned(),
            23 => self
                .g
                .one(&["\"\"", "\"a\"", "\"k1\"", "\"12\"", "\"g/\""])
                .to_owned(),
            24 => self.g.one(&["nil", "true", "false"]).to_owned(),
            25 => "op_id()".to_owned(),
            26 => "rand()".to_owned(),
            _ => "[]".to_owned(),
        }
    }

    fn expr(&mut self, d: u32) -> String {
        if d == 0 || self.g.pick(3) == 0 {
            return self.atom();
        }
        let d = d - 1;
        match self.g.pick(12) {
            0..=2 => {
                let op = self.g.one(&[
                    "+", "-", "*", "/", "%", "++", "==", "!=", "<", ">=", "and", "or",
                ]);
                format!("({} {op} {})", self.expr(d), self.expr(d))
            }
            3 => format!("{}{}", self.g.one(&["-", "not "]), self.expr(d)),
            4 => format!("[{}, {}]", self.expr(d), self.expr(d)),
            5 => format!("{}[{}]", self.atom(), self.expr(d)),
            6 => format!("get({}, {})", self.g.one(&["w", "s"]), self.expr(d)),
            7 => format!(
                "scan({}, {}, {}, {})",
                self.g.one(&["w", "s"]),
                self.expr(d),
                self.expr(d),
                self.expr(d)
            ),
            8 => format!("{}({})", self.g.one(&["len", "int", "str"]), self.expr(d)),
            9 => format!("append({}, {})", self.expr(d), self.expr(d)),
            10 => format!(
                "slice({}, {}, {})",
                self.expr(d),
                self.expr(d),
                self.expr(d)
            ),
            _ => self.atom(),
        }
    }

    fn block(&mut self, d: u32) -> String {
        let n = self.g.pick(4);
        let mut s = String::from("{\n");
        for _ in 0..n {
            s.push_str(&self.stmt(d));
            s.push('\n');
        }
        s.push('}');
        s
    }

    fn stmt(&mut self, d: u32) -> String {
        let dd = d.saturating_sub(1);
        match self.g.pick(if d == 0 { 4 } else { 9 }) {
            0 | 1 => format!("v{} = {}", self.g.pick(4), self.expr(3)),
            2 => {
                let ks = if self.strong && self.g.pick(2) == 0 {
                    "s"
                } else {
                    "w"
                };
                format!("put({ks}, {}, {})", self.expr(2), self.expr(2))
            }
            3 => format!("delete({}, {})", self.g.one(&["w", "s"]), self.expr(1)),
            4 => format!(
                "if {} {} else {}",
                self.expr(2),
                self.block(dd),
                self.block(dd)
            ),
            5 => format!("while {} {}", self.expr(2), self.block(dd)),
            6 => {
                self.fresh += 1;
                let n = self.fresh;
                format!("for f{n} in {} {}", self.expr(2), self.block(dd))
            }
            7 => {
                self.fresh += 1;
                let n = self.fresh;
                format!("for (p{n}, q{n}) in {} {}", self.expr(2), self.block(dd))
            }
            _ => format!("{} {}", self.g.one(&["return", "abort"]), self.expr(2)),
        }
    }

    fn program(&mut self) -> String {
        let mut vars = String::new();
        for i in 4..8 {
            let init = self.g.one(&[
                "0",
                "1",
                "-1",
                "9223372036854775807",
                "\"a\"",
                "\"12\"",
                "true",
                "[1, \"a\"]",
                "[[\"k1\", \"1\"]]",
                "nil",
            ]);
            vars.push_str(&format!("let v{i}: any = {init}\n"));
        }
        let body = self.block(3);
        let body = body.trim_start_matches('{').trim_end_matches('}');
        format!(
            "keyspace w: weak\nkeyspace s: strong\nproc main(a: any) -> any {{\nlet v0: any = a\nlet v1: any = nil\nlet v2: any = 0\nlet v3: any = \"\"\n{vars}{body}\n}}"
        )
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_tokens_never_panic(seed in any::<u64>()) {
        let src = random_tokens(seed);
        compile_and_run(&src, seed);
    }

    #[test]
    fn random_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..300)) {
        let src = String::from_utf8_lossy(&raw);
        compile_and_run(&src, 7);
    }

    #[test]
    fn mutated_programs_never_panic(seed in any::<u64>()) {
        let src = mutate(seed);
        compile_and_run(&src, seed);
    }
}

#[test]
fn random_well_formed_programs_only_finish_or_abort() {
    let mut compiled = 0;
    let total = 3000;
    for seed in 0..total {
        let src = ProgGen {
            g: Gen(seed),
            fresh: 0,
            strong: false,
        }
        .program();
        if compile_and_run(&src, seed) {
            compiled += 1;
        }
    }
    // Many of them must compile, or this test checks nothing.
    println!("{compiled} of {total} compiled");
    assert!(compiled * 4 > total, "only {compiled} of {total} compiled");
}

#[test]
fn the_valid_samples_compile() {
    for src in VALID {
        assert!(compile_and_run(src, 1), "{src}");
    }
}

/// The strong keyspace's entries after a run: the store's if it finished,
/// the original ones if it aborted (the executor discards the writes).
/// `None` if a resource ran out, the one channel the check leaves open.
fn strong_state(
    p: &creek_procs::lang::CompiledProc,
    mut st: MemStore,
    seed: u64,
) -> Option<Vec<(Vec<u8>, Bytes)>> {
    let before: Vec<(Vec<u8>, Bytes)> = st
        .scan("s", b"", b"\xff\xff", 1000)
        .into_iter()
        .map(|(k, v)| (k.to_vec(), v))
        .collect();
    let ctx = ExecContext {
        op_id: Bytes::from_static(b"op"),
        seed,
        fuel: 5_000,
        memory_bytes_max: 1 << 18,
    };
    match p.run(&mut st, &encode_args(&[Value::from("a")]), &ctx) {
        Ok(_) => Some(
            st.scan("s", b"", b"\xff\xff", 1000)
                .into_iter()
                .map(|(k, v)| (k.to_vec(), v))
                .collect(),
        ),
        Err(a) if a.0.starts_with("out of") || a.0.contains("nested more than") => None,
        Err(_) => Some(before),
    }
}

/// Typed programs mixing weak reads with strong writes, built from
/// operations that mostly cannot abort, so that many pass the check.
struct NiGen {
    g: Gen,
    fresh: u32,
}

impl NiGen {
    fn bytes(&mut self) -> String {
        match self.g.pick(6) {
            0 => self
                .g
                .one(&["\"a\"", "\"k1\"", "\"12\"", "\"\""])
                .to_owned(),
            1 | 2 => format!("b{}", self.g.pick(3)),
            3 => format!("b{} ++ \"x\"", self.g.pick(3)),
            4 => "str(n)".to_owned(),
            _ => "op_id()".to_owned(),
        }
    }

    fn any(&mut self) -> String {
        match self.g.pick(4) {
            0 | 1 => format!("get({}, {})", self.g.one(&["w", "s"]), self.bytes()),
            2 => format!("a{}", self.g.pick(3)),
            _ => self.bytes(),
        }
    }

    fn cond(&mut self) -> String {
        match self.g.pick(7) {
            0 => format!("a{} == {}", self.g.pick(3), self.bytes()),
            1 => format!("a{} == nil", self.g.pick(3)),
            2 => format!("b{} == {}", self.g.pick(3), self.bytes()),
            3 => format!("c{}", self.g.pick(2)),
            4 => format!("c{} and c{}", self.g.pick(2), self.g.pick(2)),
            5 => format!("not c{}", self.g.pick(2)),
            _ => "n < 3".to_owned(),
        }
    }

    fn block(&mut self, d: u32) -> String {
        let stmts: Vec<String> = (0..1 + self.g.pick(3)).map(|_| self.stmt(d)).collect();
        format!("{{\n{}\n}}", stmts.join("\n"))
    }

    fn stmt(&mut self, d: u32) -> String {
        let dd = d.saturating_sub(1);
        match self.g.pick(if d == 0 { 9 } else { 13 }) {
            0 => format!("a{} = {}", self.g.pick(3), self.any()),
            1 => format!("b{} = {}", self.g.pick(3), self.bytes()),
            2 => format!("c{} = {}", self.g.pick(2), self.cond()),
            3 => match self.g.pick(3) {
                0 => format!("n = int({})", self.any()),
                1 => "abort \"stop\"".to_owned(),
                _ => "n = n + 1".to_owned(),
            },
            4 | 5 => format!("put(s, {}, {})", self.bytes(), self.bytes()),
            6 => format!("put(s, {}, a{})", self.bytes(), self.g.pick(3)),
            7 => format!("put(w, {}, {})", self.bytes(), self.bytes()),
            8 => format!("delete(s, {})", self.bytes()),
            9 => format!(
                "if {} {} else {}",
                self.cond(),
                self.block(dd),
                self.block(dd)
            ),
            10 => format!("if {} {{\n{}\nreturn a0\n}}", self.cond(), self.stmt(dd)),
            11 => {
                self.fresh += 1;
                let f = self.fresh;
                let ks = self.g.one(&["w", "s"]);
                let body = self.block(dd);
                format!(
                    "for (k{f}, v{f}) in scan({ks}, \"\", \"zz\", 3) {{\nb{} = v{f}\n{body}\n}}",
                    self.g.pick(3)
                )
            }
            _ => match self.g.pick(3) {
                0 => format!("return a{}", self.g.pick(3)),
                1 => "abort \"stop\"".to_owned(),
                _ => format!("while n < 3 {{\nn = n + 1\n{}\n}}", self.block(dd)),
            },
        }
    }

    fn program(&mut self) -> String {
        let body: Vec<String> = (0..2 + self.g.pick(5)).map(|_| self.stmt(2)).collect();
        format!(
            "keyspace w: weak\nkeyspace s: strong\nproc main(p: bytes) -> any {{\nlet b0 = p\nlet b1 = \"a\"\nlet b2 = \"k1\"\nlet a0: any = nil\nlet a1: any = get(w, p)\nlet a2: any = get(s, p)\nlet c0 = false\nlet c1 = a1 == nil\nlet n = 0\n{}\n}}",
            body.join("\n")
        )
    }
}

/// Noninterference (MyriaStore §3.4): for every accepted program, stores
/// that differ only in weak data end with the same strong data.
#[test]
fn accepted_programs_keep_weak_data_out_of_strong_state() {
    let (mut checked, mut rejected) = (0, 0);
    for seed in 0..3000u64 {
        let src = NiGen {
            g: Gen(seed),
            fresh: 0,
        }
        .program();
        let prog = match compile(&src, &existing) {
            Ok(p) => p,
            Err(_) => {
                rejected += 1;
                continue;
            }
        };
        let Some(p) = prog.proc("main").filter(|p| p.writes_strong) else {
            continue;
        };
        let mut states = Vec::new();
        for variant in 0..6u64 {
            let mut g = Gen(seed ^ (variant << 32));
            let mut st = MemStore::new();
            for k in ["", "a", "k1", "12"] {
                st.put("s", Bytes::from(k), Bytes::from(format!("s{k}")));
            }
            for _ in 0..g.pick(6) {
                let k = g.one(&["", "a", "k1", "1", "12", "op", "a", "ax"]);
                let v = g.one(&["1", "-3", "x", "", "12", "a"]);
                st.put("w", Bytes::from(k), Bytes::from(v));
            }
            match strong_state(p, st, seed) {
                Some(s) => states.push(s),
                None => {
                    states.clear();
                    break;
                }
            }
        }
        if let Some(first) = states.first() {
            for s in &states {
                assert_eq!(
                    s, first,
                    "weak data changed strong data (seed {seed}):\n{src}"
                );
            }
            checked += 1;
        }
    }
    println!("noninterference checked on {checked} programs ({rejected} rejected)");
    assert!(checked >= 300, "only {checked} programs checked");
}
