//! Tests of the linearizability checker: hand-written histories with known
//! verdicts, generated ones (linearizable by construction, and with one read
//! corrupted), and a long one that must finish within its step budget.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::history::{OpRecord, SeenView};
use creek_core::{OpId, ReplicaId, ViewKind};
use creek_types::value::encode_args;
use proptest::prelude::*;

fn call(name: &str, args: &[Value]) -> ProcCall {
    ProcCall::new(name, encode_args(args))
}
fn put(k: &str, v: &str) -> ProcCall {
    call("kv.put", &[Value::from(k), Value::from(v)])
}
fn get(k: &str) -> ProcCall {
    call("kv.get", &[Value::from(k)])
}
fn incr(k: &str, d: i64) -> ProcCall {
    call("kv.incr", &[Value::from(k), Value::Int(d)])
}
fn cas(k: &str, expected: Option<&str>, new: Option<&str>) -> ProcCall {
    let v = |x: Option<&str>| x.map_or(Value::Nil, Value::from);
    call("kv.cas", &[Value::from(k), v(expected), v(new)])
}
fn ok(v: impl Into<Value>) -> Outcome {
    Ok(v.into().encode())
}
fn nil() -> Outcome {
    Ok(Value::Nil.encode())
}

fn first_arg_key(c: &ProcCall) -> Vec<Bytes> {
    match decode_args(&c.args).ok().and_then(|a| a.into_iter().next()) {
        Some(Value::Bytes(b)) => vec![b],
        _ => Vec::new(),
    }
}

fn op(index: usize, call: ProcCall, from: u64, to: u64, outcome: Outcome) -> LinOp {
    LinOp {
        index,
        call,
        invoked_at_us: from,
        completed: Some((to, outcome)),
    }
}
fn unknown(index: usize, call: ProcCall, from: u64) -> LinOp {
    LinOp {
        index,
        call,
        invoked_at_us: from,
        completed: None,
    }
}

fn run(ops: &[LinOp]) -> LinResult {
    run_from(ops, &BTreeMap::new())
}

fn run_from(ops: &[LinOp], initial: &BTreeMap<Bytes, Bytes>) -> LinResult {
    check(
        ops,
        &first_arg_key,
        &Registry::with_builtins(),
        TxnLimits::default(),
        initial,
        1_000_000,
    )
}

#[test]
fn sequential_history_is_ok() {
    let ops = vec![
        op(0, get("k"), 0, 1, nil()),
        op(1, put("k", "a"), 2, 3, nil()),
        op(2, get("k"), 4, 5, ok("a")),
        op(3, incr("n", 2), 6, 7, ok(2)),
        op(4, cas("k", Some("a"), Some("b")), 8, 9, ok(true)),
        op(5, cas("k", Some("a"), Some("c")), 10, 11, ok(false)),
        op(6, get("k"), 12, 13, ok("b")),
        op(
            7,
            incr("k", 1),
            14,
            15,
            Err(creek_exec::Abort::new("value of key is not an integer")),
        ),
    ];
    assert_eq!(
        run(&ops),
        LinResult::Ok {
            partitions: 2,
            ops: 8
        }
    );
}

#[test]
fn concurrent_writes_read_either() {
    for seen in ["a", "b"] {
        let ops = vec![
            op(0, put("k", "a"), 0, 10, nil()),
            op(1, put("k", "b"), 1, 11, nil()),
            op(2, get("k"), 2, 12, ok(seen)),
            op(3, get("k"), 20, 21, ok(seen)),
        ];
        assert!(matches!(run(&ops), LinResult::Ok { .. }), "{seen}");
    }
    // But two later reads cannot disagree.
    let ops = vec![
        op(0, put("k", "a"), 0, 10, nil()),
        op(1, put("k", "b"), 1, 11, nil()),
        op(2, get("k"), 20, 21, ok("a")),
        op(3, get("k"), 22, 23, ok("b")),
    ];
    assert!(matches!(run(&ops), LinResult::Violation(_)));
}

#[test]
fn stale_read_is_a_violation() {
    let ops = vec![
        op(0, put("k", "a"), 0, 1, nil()),
        op(1, put("k", "b"), 2, 3, nil()),
        op(2, get("k"), 4, 5, ok("a")),
    ];
    let LinResult::Violation(v) = run(&ops) else {
        panic!("expected a violation")
    };
    assert_eq!(v.keys, vec![Bytes::from_static(b"k")]);
    assert_eq!(v.ops, vec![0, 1, 2]);
    assert!(v.reason.contains("op #2 kv.get(\"k\")"), "{}", v.reason);
    assert!(v.reason.contains("observed ok \"a\""), "{}", v.reason);
    assert!(v.reason.contains("gives ok \"b\""), "{}", v.reason);
}

#[test]
fn read_of_a_value_never_written_is_a_violation() {
    let ops = vec![
        op(0, put("k", "a"), 0, 10, nil()),
        op(1, get("k"), 1, 11, ok("zzz")),
    ];
    assert!(matches!(run(&ops), LinResult::Violation(_)));
}

#[test]
fn unknown_write_explains_a_read() {
    let ops = vec![
        op(0, put("k", "a"), 0, 1, nil()),
        unknown(1, put("k", "b"), 2),
        op(2, get("k"), 10, 11, ok("b")),
        op(3, get("k"), 12, 13, ok("b")),
    ];
    assert!(matches!(run(&ops), LinResult::Ok { .. }));
    // An unknown write still cannot take effect before its invocation.
    let ops = vec![op(0, get("k"), 0, 1, ok("b")), unknown(1, put("k", "b"), 2)];
    assert!(matches!(run(&ops), LinResult::Violation(_)));
}

#[test]
fn unknown_write_never_observed() {
    let ops = vec![
        op(0, put("k", "a"), 0, 1, nil()),
        unknown(1, put("k", "b"), 2),
        op(2, get("k"), 10, 11, ok("a")),
        op(3, incr("n", 1), 12, 13, ok(1)),
        unknown(4, incr("n", 5), 14),
        op(5, incr("n", 1), 20, 21, ok(2)),
        unknown(6, get("n"), 22),
    ];
    assert!(matches!(run(&ops), LinResult::Ok { .. }));
}

#[test]
fn retried_request_takes_effect_once() {
    let id = creek_types::ClientRequestId { client: 7, seq: 1 };
    let retry = |index, from, completed| LinOp {
        index,
        call: ProcCall {
            request_id: Some(id),
            ..incr("n", 1)
        },
        invoked_at_us: from,
        completed,
    };
    let history = |seen: i64| {
        vec![
            retry(0, 0, None),
            retry(1, 10, Some((20, ok(1)))),
            op(2, get("n"), 30, 31, ok(seen.to_string().as_str())),
        ]
    };
    assert!(matches!(run(&history(1)), LinResult::Ok { .. }));
    assert!(matches!(run(&history(2)), LinResult::Violation(_)));
}

#[test]
fn deletes_and_failed_cas() {
    let del = |k: &str| call("kv.delete", &[Value::from(k)]);
    let ops = vec![
        op(0, put("k", "a"), 0, 10, nil()),
        op(1, cas("k", Some("b"), Some("c")), 1, 11, ok(false)),
        op(2, del("k"), 2, 12, ok(true)),
        op(3, cas("k", None, Some("d")), 3, 13, ok(true)),
        op(4, get("k"), 20, 21, ok("d")),
        op(5, del("k"), 22, 23, ok(true)),
        op(6, del("k"), 24, 25, ok(false)),
        op(7, get("k"), 26, 27, nil()),
    ];
    assert!(matches!(run(&ops), LinResult::Ok { .. }));
    // The failed cas cannot be explained once "b" is the only value.
    let ops = vec![
        op(0, put("k", "b"), 0, 1, nil()),
        op(1, cas("k", Some("b"), Some("c")), 2, 3, ok(false)),
    ];
    assert!(matches!(run(&ops), LinResult::Violation(_)));
}

#[test]
fn independent_keys_are_separate_partitions() {
    let ops = vec![
        op(0, put("a", "1"), 0, 10, nil()),
        op(1, put("b", "1"), 0, 10, nil()),
        op(2, get("a"), 11, 12, ok("1")),
        op(3, get("b"), 11, 12, ok("1")),
        op(4, get("b"), 13, 14, nil()),
    ];
    let LinResult::Violation(v) = run(&ops) else {
        panic!("expected a violation")
    };
    assert_eq!(v.keys, vec![Bytes::from_static(b"b")]);
    assert_eq!(v.ops, vec![1, 3, 4]);
    assert_eq!(
        run(&ops[..4]),
        LinResult::Ok {
            partitions: 2,
            ops: 4
        }
    );
}

#[test]
fn shared_keys_merge_partitions_and_empty_keys_skip() {
    // A key function where "x" also touches "a" and "b", and "skip" nothing.
    let keys = |c: &ProcCall| -> Vec<Bytes> {
        let k = first_arg_key(c);
        match k.first().map(|b| b.as_ref()) {
            Some(b"x") => vec![
                Bytes::from_static(b"a"),
                Bytes::from_static(b"x"),
                Bytes::from_static(b"b"),
            ],
            Some(b"skip") => Vec::new(),
            _ => k,
        }
    };
    let ops = vec![
        op(0, put("a", "1"), 0, 1, nil()),
        op(1, put("b", "1"), 0, 1, nil()),
        op(2, put("c", "1"), 0, 1, nil()),
        op(3, get("x"), 2, 3, nil()),
        op(4, get("skip"), 2, 3, ok("never")),
    ];
    let r = check(
        &ops,
        &keys,
        &Registry::with_builtins(),
        TxnLimits::default(),
        &BTreeMap::new(),
        1000,
    );
    assert_eq!(
        r,
        LinResult::Ok {
            partitions: 2,
            ops: 4
        }
    );
}

#[test]
fn budget_exhaustion_is_inconclusive() {
    let ops: Vec<LinOp> = (0..50)
        .map(|i| op(i, incr("n", 1), 0, 100, ok(i as i64 + 1)))
        .collect();
    let r = check(
        &ops,
        &first_arg_key,
        &Registry::with_builtins(),
        TxnLimits::default(),
        &BTreeMap::new(),
        10,
    );
    assert!(matches!(r, LinResult::Inconclusive { .. }), "{r:?}");
}

#[test]
fn strong_ops_take_final_views() {
    let view = |at_us, kind, outcome| SeenView {
        at_us,
        kind,
        outcome,
        time: 0,
    };
    let rec = |strong, id: Option<u64>, views| OpRecord {
        client: 0,
        replica: 0,
        id: id.map(|s| OpId::new(ReplicaId(0), s)),
        call: get("k"),
        strong,
        wants_final: true,
        invoked_at_us: 5,
        views,
        origin_crashed: false,
        origin_left: false,
        lost: false,
    };
    let history = History {
        ops: vec![
            rec(
                true,
                Some(1),
                vec![
                    view(6, ViewKind::Tentative, ok("t")),
                    view(9, ViewKind::Stable, ok("s")),
                ],
            ),
            rec(false, Some(2), vec![view(7, ViewKind::Stable, nil())]),
            rec(true, None, vec![]),
            rec(true, Some(3), vec![view(6, ViewKind::Tentative, nil())]),
        ],
    };
    let ops = strong_ops(&history);
    assert_eq!(ops.len(), 2);
    assert_eq!((ops[0].index, ops[0].invoked_at_us), (0, 5));
    assert_eq!(ops[0].completed, Some((9, ok("s"))));
    assert_eq!(ops[1].index, 3);
    assert_eq!(ops[1].completed, None);
}

/// What became of a generated op.
#[derive(Clone, Copy, Debug)]
enum Fate {
    /// Answered.
    Known,
    /// Took effect, but the client never learnt its outcome.
    UnknownApplied,
    /// Never took effect, and the client never learnt it.
    UnknownLost,
}

/// A history from a real sequential execution: op `i` takes effect at
/// time `10 * i + 50` and its interval `[point - before, point + after]`
/// contains that point. Ops that were lost are left out of the
/// execution. Two answered reads of `k` and `l` close the history.
fn generated(specs: &[(u8, u8, u8)], spans: &[(u64, u64)], fates: &[Fate]) -> Vec<LinOp> {
    let keys = ["k", "l"];
    let vals = ["a", "b", "c"];
    let mut calls: Vec<ProcCall> = specs
        .iter()
        .map(|&(kind, key, val)| {
            let k = keys[key as usize % keys.len()];
            let v = vals[val as usize % vals.len()];
            match kind % 6 {
                0 => put(k, v),
                1 | 2 => get(k),
                3 => incr(k, 1),
                4 => call("kv.delete", &[Value::from(k)]),
                _ => cas(k, Some(v), Some(vals[(val as usize + 1) % vals.len()])),
            }
        })
        .collect();
    let mut fates = fates.to_vec();
    let mut spans = spans.to_vec();
    for k in keys {
        calls.push(get(k));
        fates.push(Fate::Known);
        spans.push((0, 0));
    }
    let applied: Vec<&ProcCall> = calls
        .iter()
        .zip(&fates)
        .filter(|(_, f)| !matches!(f, Fate::UnknownLost))
        .map(|(c, _)| c)
        .collect();
    let (outcomes, _) =
        creek_exec::basic::replay(&Registry::with_builtins(), TxnLimits::default(), applied);
    let mut outcomes = outcomes.into_iter();
    let mut ops = Vec::new();
    for (i, c) in calls.into_iter().enumerate() {
        let point = 10 * i as u64 + 50;
        let (before, after) = spans[i];
        let from = point - before;
        match fates[i] {
            Fate::Known => {
                let o = outcomes.next().unwrap();
                ops.push(op(i, c, from, point + after, o));
            }
            Fate::UnknownApplied => {
                outcomes.next();
                ops.push(unknown(i, c, from));
            }
            Fate::UnknownLost => ops.push(unknown(i, c, from)),
        }
    }
    ops
}

fn history_strategy() -> impl Strategy<Value = Vec<LinOp>> {
    let fate = prop_oneof![
        16 => Just(Fate::Known),
        1 => Just(Fate::UnknownApplied),
        1 => Just(Fate::UnknownLost),
    ];
    (1usize..120).prop_flat_map(move |n| {
        (
            proptest::collection::vec((0u8..6, 0u8..2, 0u8..3), n),
            proptest::collection::vec((0u64..40, 0u64..60), n),
            proptest::collection::vec(fate.clone(), n),
        )
            .prop_map(|(specs, spans, fates)| generated(&specs, &spans, &fates))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn generated_histories_are_linearizable(ops in history_strategy()) {
        let r = run(&ops);
        prop_assert!(matches!(r, LinResult::Ok { .. }), "{:?}", r);
    }

    #[test]
    fn corrupted_read_is_a_violation(ops in history_strategy(), pick in any::<prop::sample::Index>()) {
        let mut ops = ops;
        let reads: Vec<usize> = ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.call.name.as_ref() == "kv.get" && o.completed.is_some())
            .map(|(i, _)| i)
            .collect();
        let victim = reads[pick.index(reads.len())];
        if let Some((_, o)) = &mut ops[victim].completed {
            *o = ok("never-written");
        }
        let r = run(&ops);
        let LinResult::Violation(v) = &r else {
            return Err(TestCaseError::fail(format!("expected a violation, got {r:?}")));
        };
        prop_assert!(v.ops.contains(&ops[victim].index));
    }
}

#[test]
fn long_history_with_modest_concurrency_is_fast() {
    // 3000 ops checked as one partition, each spanning about 11 neighbours.
    let specs: Vec<(u8, u8, u8)> = (0..3000u32)
        .map(|i| ((i * 7 % 5) as u8, 0, (i % 3) as u8))
        .collect();
    let spans: Vec<(u64, u64)> = (0..3000u64).map(|i| (i % 10, 100 + i % 7)).collect();
    let fates: Vec<Fate> = (0..3000)
        .map(|i| match i % 97 {
            0 => Fate::UnknownApplied,
            1 => Fate::UnknownLost,
            _ => Fate::Known,
        })
        .collect();
    let ops = generated(&specs, &spans, &fates);
    let r = check(
        &ops,
        &|_: &ProcCall| vec![Bytes::from_static(b"all")],
        &Registry::with_builtins(),
        TxnLimits::default(),
        &BTreeMap::new(),
        5_000_000,
    );
    assert!(matches!(r, LinResult::Ok { .. }), "{r:?}");
}

/// A bulk-loaded state is where the search starts: a first read of a
/// loaded key sees its value, which from an empty state is a violation.
#[test]
fn the_search_starts_from_the_initial_state() {
    let ops = vec![
        op(0, get("k"), 0, 1, ok("a")),
        op(1, put("k", "b"), 2, 3, nil()),
        op(2, get("k"), 4, 5, ok("b")),
    ];
    let initial: BTreeMap<Bytes, Bytes> = [(Bytes::from("k"), Bytes::from("a"))].into();
    assert!(matches!(run_from(&ops, &initial), LinResult::Ok { .. }));
    assert!(matches!(run(&ops), LinResult::Violation(_)));
}
