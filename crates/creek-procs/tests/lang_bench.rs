//! Benchmark-style measurements, printed, never asserted (timing is no
//! pass/fail matter). Run them optimised:
//!
//! ```text
//! cargo test --release -p creek-exec --test lang_bench -- --ignored --nocapture
//! ```
//!
//! * the time of a procedure in the language against the same logic as a
//!   Rust procedure (decode arguments, run, encode the result) on the same
//!   store, for a `kv.incr`-like counter and a 10-key read-modify-write;
//! * the time to compile a file of about 200 lines.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use creek_exec::{Abort, Outcome};
use creek_procs::lang::{compile, CompiledProc, ExecContext, MemStore, Store};
use creek_types::value::{decode_args, encode_args, Value};

const SRC: &str = r#"
keyspace c: strong

proc incr(key: bytes, delta: int) -> int {
    let v = get(c, key)
    let n = delta
    if v != nil { n = int(v) + delta }
    put(c, key, str(n))
    return n
}

proc rmw10(prefix: bytes) -> int {
    let total = 0
    let i = 0
    while i < 10 {
        let key = prefix ++ str(i)
        let v = get(c, key)
        let n = 1
        if v != nil { n = int(v) + 1 }
        put(c, key, str(n))
        total = total + n
        i = i + 1
    }
    return total
}
"#;

fn parse_int(v: &[u8]) -> Result<i64, Abort> {
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| Abort::new("not an integer"))
}

fn incr_rust(store: &mut dyn Store, raw: &[u8]) -> Outcome {
    let args = decode_args(raw).map_err(|e| Abort::new(e.to_string()))?;
    let [Value::Bytes(key), Value::Int(delta)] = args.as_slice() else {
        return Err(Abort::new("bad arguments"));
    };
    let n = match store.get("c", key) {
        None => *delta,
        Some(v) => parse_int(&v)?
            .checked_add(*delta)
            .ok_or_else(|| Abort::new("overflow"))?,
    };
    store.put("c", key.clone(), Bytes::from(n.to_string()));
    Ok(Value::Int(n).encode())
}

fn rmw10_rust(store: &mut dyn Store, raw: &[u8]) -> Outcome {
    let args = decode_args(raw).map_err(|e| Abort::new(e.to_string()))?;
    let [Value::Bytes(prefix)] = args.as_slice() else {
        return Err(Abort::new("bad arguments"));
    };
    let mut total: i64 = 0;
    for i in 0..10 {
        let mut key = prefix.to_vec();
        key.extend_from_slice(i.to_string().as_bytes());
        let n = match store.get("c", &key) {
            None => 1,
            Some(v) => parse_int(&v)?
                .checked_add(1)
                .ok_or_else(|| Abort::new("overflow"))?,
        };
        store.put("c", Bytes::from(key), Bytes::from(n.to_string()));
        total = total.checked_add(n).ok_or_else(|| Abort::new("overflow"))?;
    }
    Ok(Value::Int(total).encode())
}

/// A store without allocation on lookups: one map per keyspace.
#[derive(Default)]
struct FastStore {
    spaces: Vec<(String, BTreeMap<Bytes, Bytes>)>,
}

impl FastStore {
    fn space(&mut self, ks: &str) -> &mut BTreeMap<Bytes, Bytes> {
        let i = match self.spaces.iter().position(|(n, _)| n == ks) {
            Some(i) => i,
            None => {
                self.spaces.push((ks.to_owned(), BTreeMap::new()));
                self.spaces.len() - 1
            }
        };
        &mut self.spaces[i].1
    }
}

impl Store for FastStore {
    fn get(&mut self, ks: &str, key: &[u8]) -> Option<Bytes> {
        self.space(ks).get(key).cloned()
    }
    fn put(&mut self, ks: &str, key: Bytes, value: Bytes) {
        self.space(ks).insert(key, value);
    }
    fn delete(&mut self, ks: &str, key: Bytes) {
        self.space(ks).remove(&key);
    }
    fn scan(&mut self, ks: &str, from: &[u8], to: &[u8], limit: usize) -> Vec<(Bytes, Bytes)> {
        if from >= to {
            return Vec::new();
        }
        let (from, to) = (Bytes::copy_from_slice(from), Bytes::copy_from_slice(to));
        self.space(ks)
            .range(from..to)
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Nanoseconds per call of `f` over `n` calls, after a warm-up.
fn time(n: u32, mut f: impl FnMut(u32)) -> f64 {
    for i in 0..n / 10 {
        f(i);
    }
    let t = Instant::now();
    for i in 0..n {
        f(i);
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

fn compare(
    label: &str,
    store: &mut dyn Store,
    lang: &CompiledProc,
    rust: fn(&mut dyn Store, &[u8]) -> Outcome,
    args: &dyn Fn(u32) -> Bytes,
) {
    let ctx = ExecContext::default();
    let n = 50_000;
    // Both must agree before timing means anything.
    assert_eq!(
        lang.run(store, &args(0), &ctx).is_ok(),
        rust(store, &args(0)).is_ok()
    );
    // Alternate the two and keep each one's best round: the machine is shared.
    let (mut t_lang, mut t_rust) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        t_lang = t_lang.min(time(n, |i| {
            black_box(lang.run(store, &args(i), &ctx)).ok();
        }));
        t_rust = t_rust.min(time(n, |i| {
            black_box(rust(store, &args(i))).ok();
        }));
    }
    println!(
        "{label:<32} language {t_lang:>8.0} ns   rust {t_rust:>8.0} ns   ratio {:.2}",
        t_lang / t_rust
    );
}

#[test]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
fn language_against_rust() {
    let p = compile(SRC, &|_| None).unwrap_or_else(|e| panic!("{e}"));
    let incr = p.proc("incr").unwrap_or_else(|| panic!("no incr"));
    let rmw = p.proc("rmw10").unwrap_or_else(|| panic!("no rmw10"));
    let keys: Vec<Bytes> = (0..1000).map(|i| Bytes::from(format!("key{i}"))).collect();
    let incr_args: Vec<Bytes> = keys
        .iter()
        .map(|k| encode_args(&[Value::Bytes(k.clone()), Value::Int(1)]))
        .collect();
    let rmw_args: Vec<Bytes> = (0..100)
        .map(|i| encode_args(&[Value::from(format!("p{i}/").as_str())]))
        .collect();
    let ia = |i: u32| incr_args[i as usize % incr_args.len()].clone();
    let ra = |i: u32| rmw_args[i as usize % rmw_args.len()].clone();
    compare("incr, MemStore", &mut MemStore::new(), incr, incr_rust, &ia);
    compare(
        "incr, FastStore",
        &mut FastStore::default(),
        incr,
        incr_rust,
        &ia,
    );
    compare(
        "10-key rmw, MemStore",
        &mut MemStore::new(),
        rmw,
        rmw10_rust,
        &ra,
    );
    compare(
        "10-key rmw, FastStore",
        &mut FastStore::default(),
        rmw,
        rmw10_rust,
        &ra,
    );
}

/// A file of about 200 lines: ten procedures of about 20 lines.
fn big_file() -> String {
    let mut s =
        String::from("keyspace members: strong\nkeyspace inbox: weak\nkeyspace stats: weak\n\n");
    for i in 0..10 {
        s.push_str(&format!(
            r#"# Procedure number {i}.
proc p{i}(group: bytes, msg: bytes, limit: int) -> int {{
    let n = 0
    let seen = []
    for (k, user) in scan(members, group ++ "/", group ++ "0", limit) {{
        put(inbox, user ++ "/" ++ op_id(), msg)
        seen = append(seen, user)
        n = n + 1
    }}
    let i = 0
    while i < len(seen) {{
        let u = seen[i]
        if u == "admin" {{ put(stats, "admins", str(i)) }} else if len(msg) > 100 {{ put(stats, "long", msg) }}
        i = i + 1
    }}
    let old = get(stats, group)
    let total = n
    if old != nil {{ total = total + int(old) }}
    put(stats, group, str(total))
    return n
}}

"#
        ));
    }
    s
}

#[test]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
fn compile_time_of_a_200_line_file() {
    let src = big_file();
    let lines = src.lines().count();
    let n = 200;
    let t = Instant::now();
    for _ in 0..n {
        black_box(compile(&src, &|_| None).unwrap_or_else(|e| panic!("{e}")));
    }
    let per = t.elapsed().as_secs_f64() * 1000.0 / f64::from(n);
    println!("compile {lines} lines ({} bytes): {per:.3} ms", src.len());
}

#[test]
fn the_benchmark_programs_agree_with_their_rust_twins() {
    let p = compile(SRC, &|_| None).unwrap_or_else(|e| panic!("{e}"));
    assert!(compile(&big_file(), &|_| None).is_ok());
    let ctx = ExecContext::default();
    for (name, rust, args) in [
        (
            "incr",
            incr_rust as fn(&mut dyn Store, &[u8]) -> Outcome,
            encode_args(&[Value::from("k"), Value::Int(3)]),
        ),
        ("rmw10", rmw10_rust, encode_args(&[Value::from("p/")])),
    ] {
        let lang = p.proc(name).unwrap_or_else(|| panic!("no {name}"));
        let (mut a, mut b) = (MemStore::new(), MemStore::new());
        for _ in 0..3 {
            assert_eq!(lang.run(&mut a, &args, &ctx), rust(&mut b, &args));
        }
        assert_eq!(a, b);
    }
}
