//! `kv.txn`: a conditional multi-key transaction over user keys, etcd's
//! `Txn` without registering a procedure (docs/api.md, "Transactions").
//!
//! `kv.txn(compares, success, failure)` evaluates every compare on the
//! state the transaction reads; if all hold it runs the `success` ops,
//! otherwise the `failure` ops, one after the other (a later op sees an
//! earlier one's writes), and answers `[succeeded, [result, …]]`, one
//! result per op run. It is one execution, so it is atomic, and at the
//! strong level linearizable; every key a compare or an op reads is in
//! its read set (a range op's range too), so it runs again at its place
//! in the order if an op before it changed what it read.
//!
//! A compare is `[key, target, op, operand]` with `op` one of `=`, `!=`,
//! `<`, `>`. Target `"value"` compares bytes (byte order); as in etcd, a
//! compare of the value of a key that does not exist is false, whatever
//! the op — except against the operand nil, which tests existence:
//! `[k, "value", "=", nil]` holds when `k` is absent, `[k, "value", "!=",
//! nil]` when it is present. Targets `"version"`, `"create"`, `"mod"`
//! (the key's version record, `crate::versions`) and `"lease"` compare
//! an int operand with the key's number, 0 when the key is absent.
//!
//! An op is one of
//!
//! | op | answers |
//! | --- | --- |
//! | `["get", key]` | the value, or nil |
//! | `["put", key, value]`, `["put", key, value, lease]` | nil |
//! | `["delete", key]` | whether it existed |
//! | `["scan", from, to, limit]` | `[[[key, value], …], next]`, as `kv.scan` |
//! | `["scan_reverse", from, to, limit]` | as `kv.scan_reverse` |
//! | `["delete_range", from, to, limit]` | `[deleted, next]`, as `kv.delete_range` |
//!
//! At most [`TXN_COMPARES_MAX`] compares and [`TXN_OPS_MAX`] ops in each
//! branch (etcd's default `--max-txn-ops` is 128). A call that breaks a
//! rule is refused before anything runs, naming the compare or op.

use bytes::Bytes;

use super::range::{Range, DELETE_RANGE, SCAN, SCAN_REVERSE};
use super::{describe_all, Sig, Subject, Ty};
use crate::registry::{Registry, Route, INTERNAL_KEY_PREFIX};
use crate::versions;
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_types::value::Value;

/// Most compares one `kv.txn` takes.
pub const TXN_COMPARES_MAX: usize = 128;
/// Most ops in each branch of one `kv.txn`.
pub const TXN_OPS_MAX: usize = 128;

const TXN: Sig = Sig {
    name: "kv.txn",
    params: &[
        ("compares", Ty::List),
        ("success", Ty::List),
        ("failure", Ty::List),
    ],
    subject: Subject::None,
};

/// Register `kv.txn`.
pub(super) fn register(r: &mut Registry) {
    r.register_fn(TXN.name, false, check, txn);
    describe_all(
        r,
        &[(
            &TXN,
            "list: [bool: succeeded, [each op's result, …]]",
            "If every compare [key, value|version|create|mod|lease, =|!=|<|>, operand] holds, \
             run the success ops, \
             else the failure ops ([\"get\", k], [\"put\", k, v], [\"delete\", k], \
             [\"scan\", from, to, limit], [\"scan_reverse\", from, to, limit], \
             [\"delete_range\", from, to, limit]), atomically.",
        )],
    );
    // Its keys sit inside its lists: on a cluster of several shards it
    // runs where they are, across shards if they span several
    // (docs/api.md).
    r.route(TXN.name, Route::Txn);
}

/// How a compare compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Gt,
}

/// What a compare reads of its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// The value (bytes, or nil for existence).
    Value,
    /// Writes since creation.
    Version,
    /// The revision of its creation.
    Create,
    /// The revision of its last write.
    Mod,
    /// The lease it is attached to.
    Lease,
}

/// A compare's operand.
#[derive(Debug)]
enum Operand {
    /// Existence (against nil).
    Exists,
    Bytes(Bytes),
    Int(i64),
}

/// One compare, checked.
#[derive(Debug)]
struct Compare {
    key: Bytes,
    target: Target,
    op: CmpOp,
    operand: Operand,
}

impl CmpOp {
    fn holds<T: Ord>(self, have: &T, want: &T) -> bool {
        match self {
            CmpOp::Eq => have == want,
            CmpOp::Ne => have != want,
            CmpOp::Lt => have < want,
            CmpOp::Gt => have > want,
        }
    }
}

impl Compare {
    /// Whether it holds in the state `txn` reads. A key's number (version,
    /// revisions, lease) is 0 when it is absent, as in etcd.
    fn holds(&self, txn: &mut Txn<'_>) -> bool {
        let value = txn.get(&self.key);
        let number = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let have = match self.target {
            Target::Value => {
                return match (&self.operand, value) {
                    (Operand::Bytes(want), Some(have)) => self.op.holds(&have, want),
                    (Operand::Exists, v) => (self.op == CmpOp::Eq) == v.is_none(),
                    _ => false,
                }
            }
            _ if value.is_none() => 0,
            Target::Lease => super::lease::lease_of(txn, &self.key),
            Target::Version => number(versions::read(txn, &self.key).version),
            Target::Create => number(versions::read(txn, &self.key).create),
            Target::Mod => number(versions::read(txn, &self.key).modified),
        };
        match &self.operand {
            Operand::Int(want) => self.op.holds(&have, want),
            _ => false,
        }
    }
}

/// One op of a branch, checked.
enum Op {
    Get(Bytes),
    /// A key, its value and the lease it is attached to, if any.
    Put(Bytes, Bytes, Option<i64>),
    Delete(Bytes),
    Scan(Range),
    DeleteRange(Range),
}

/// A call's compares and branches, checked.
struct Parsed {
    compares: Vec<Compare>,
    success: Vec<Op>,
    failure: Vec<Op>,
}

fn user_key(v: &Value, what: &str) -> Result<Bytes, String> {
    match v {
        Value::Bytes(k) if k.first() == Some(&INTERNAL_KEY_PREFIX) => Err(format!(
            "kv.txn: {what}: keys starting with 0x00 are reserved"
        )),
        Value::Bytes(k) => Ok(k.clone()),
        other => Err(format!(
            "kv.txn: {what}: the key must be bytes, got {other}"
        )),
    }
}

fn text(v: &Value) -> Option<&str> {
    v.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
}

fn parse_compare(i: usize, v: &Value) -> Result<Compare, String> {
    let what = format!("compare {}", i + 1);
    let Value::List(parts) = v else {
        return Err(format!(
            "kv.txn: {what} must be a list [key, \"value\", op, operand], got {v}"
        ));
    };
    let [key, target, op, operand] = parts.as_slice() else {
        return Err(format!(
            "kv.txn: {what} must be [key, \"value\", op, operand], got {} items",
            parts.len()
        ));
    };
    let key = user_key(key, &what)?;
    let target = match text(target) {
        Some("value") => Target::Value,
        Some("version") => Target::Version,
        Some("create") => Target::Create,
        Some("mod") => Target::Mod,
        Some("lease") => Target::Lease,
        _ => {
            return Err(format!(
                "kv.txn: {what}: the target must be one of value, version, create, mod, lease, \
                 got {target}"
            ))
        }
    };
    let op = match text(op) {
        Some("=" | "==") => CmpOp::Eq,
        Some("!=") => CmpOp::Ne,
        Some("<") => CmpOp::Lt,
        Some(">") => CmpOp::Gt,
        _ => {
            return Err(format!(
                "kv.txn: {what}: the op must be one of =, !=, <, >, got {op}"
            ))
        }
    };
    let operand = match (target, operand) {
        (Target::Value, Value::Nil) if matches!(op, CmpOp::Eq | CmpOp::Ne) => Operand::Exists,
        (Target::Value, Value::Nil) => {
            return Err(format!(
                "kv.txn: {what}: nil tests existence, with = or != only"
            ))
        }
        (Target::Value, Value::Bytes(b)) => Operand::Bytes(b.clone()),
        (Target::Value, other) => {
            return Err(format!(
                "kv.txn: {what}: the operand must be bytes or nil, got {other}"
            ))
        }
        (_, Value::Int(n)) => Operand::Int(*n),
        (_, other) => {
            return Err(format!(
                "kv.txn: {what}: a version, revision or lease compare takes an int, got {other}"
            ))
        }
    };
    Ok(Compare {
        key,
        target,
        op,
        operand,
    })
}

fn parse_op(branch: &str, i: usize, v: &Value) -> Result<Op, String> {
    let what = format!("{branch} op {}", i + 1);
    let Value::List(parts) = v else {
        return Err(format!("kv.txn: {what} must be a list, got {v}"));
    };
    let range = |sig: &Sig, args: &[Value]| {
        Range::parse(sig, args).map_err(|e| format!("kv.txn: {what}: {e}"))
    };
    match (parts.first().and_then(text), &parts[1.min(parts.len())..]) {
        (Some("get"), [k]) => Ok(Op::Get(user_key(k, &what)?)),
        (Some("put"), [k, Value::Bytes(v)]) => Ok(Op::Put(user_key(k, &what)?, v.clone(), None)),
        (Some("put"), [k, Value::Bytes(v), Value::Int(lease)]) if *lease > 0 => {
            Ok(Op::Put(user_key(k, &what)?, v.clone(), Some(*lease)))
        }
        (Some("delete"), [k]) => Ok(Op::Delete(user_key(k, &what)?)),
        (Some("scan"), args @ [_, _, _]) => Ok(Op::Scan(range(&SCAN, args)?)),
        (Some("scan_reverse"), args @ [_, _, _]) => Ok(Op::Scan(range(&SCAN_REVERSE, args)?)),
        (Some("delete_range"), args @ [_, _, _]) => {
            Ok(Op::DeleteRange(range(&DELETE_RANGE, args)?))
        }
        (Some(name @ ("get" | "put" | "delete" | "scan" | "scan_reverse" | "delete_range")), _) => {
            let shape = match name {
                "get" => "[\"get\", key]",
                "put" => "[\"put\", key, value: bytes] or [\"put\", key, value, lease: int > 0]",
                "delete" => "[\"delete\", key]",
                "scan" => "[\"scan\", from, to, limit]",
                "scan_reverse" => "[\"scan_reverse\", from, to, limit]",
                _ => "[\"delete_range\", from, to, limit]",
            };
            Err(format!("kv.txn: {what} must be {shape}"))
        }
        _ => Err(format!(
            "kv.txn: {what}: unknown op {}: use get, put, delete, scan, scan_reverse or delete_range",
            parts
                .first()
                .map_or_else(|| "(none)".to_owned(), Value::to_string)
        )),
    }
}

fn parse_ops(branch: &str, v: &Value) -> Result<Vec<Op>, String> {
    let Value::List(ops) = v else {
        return Err(format!("kv.txn: {branch} must be a list of ops"));
    };
    if ops.len() > TXN_OPS_MAX {
        return Err(format!(
            "kv.txn: {} {branch} ops exceed the limit of {TXN_OPS_MAX}",
            ops.len()
        ));
    }
    ops.iter()
        .enumerate()
        .map(|(i, op)| parse_op(branch, i, op))
        .collect()
}

fn parse(args: &[Value]) -> Result<Parsed, String> {
    let [Value::List(compares), success, failure] = args else {
        return Err(format!("kv.txn expects {}", TXN.signature()));
    };
    if compares.len() > TXN_COMPARES_MAX {
        return Err(format!(
            "kv.txn: {} compares exceed the limit of {TXN_COMPARES_MAX}",
            compares.len()
        ));
    }
    Ok(Parsed {
        compares: compares
            .iter()
            .enumerate()
            .map(|(i, c)| parse_compare(i, c))
            .collect::<Result<_, _>>()?,
        success: parse_ops("success", success)?,
        failure: parse_ops("failure", failure)?,
    })
}

fn check(raw: &[u8]) -> Result<(), String> {
    parse(&TXN.parse(raw)?).map(drop)
}

/// Run one op, answering its result (as the `kv.*` call of the same
/// name answers); a put with a lease that is not live aborts the whole
/// transaction.
fn run(txn: &mut Txn<'_>, op: &Op) -> Result<Value, Abort> {
    Ok(match op {
        Op::Get(k) => txn.get(k).map_or(Value::Nil, Value::Bytes),
        Op::Put(k, v, None) => {
            super::lease::put_plain(txn, k, v);
            Value::Nil
        }
        Op::Put(k, v, Some(lease)) => {
            super::lease::put_with_lease(txn, k, v, *lease)?;
            Value::Nil
        }
        Op::Delete(k) => Value::Bool(super::kv::delete_key(txn, k)),
        Op::Scan(range) => range.scan(txn),
        Op::DeleteRange(range) => range.delete(txn),
    })
}

/// `kv.txn(compares, success, failure)` → `[succeeded, [result, …]]`.
fn txn(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let parsed = parse(&TXN.args(raw)?).map_err(Abort)?;
    let succeeded = parsed.compares.iter().all(|c| c.holds(txn));
    let branch = if succeeded {
        &parsed.success
    } else {
        &parsed.failure
    };
    let results = branch
        .iter()
        .map(|op| run(txn, op))
        .collect::<Result<_, _>>()?;
    Ok(Value::List(vec![Value::Bool(succeeded), Value::List(results)]).encode())
}

#[cfg(test)]
mod tests {
    use crate::builtins::testkit::Harness;
    use creek_types::value::Value;

    fn b(s: &str) -> Value {
        Value::from(s)
    }

    fn l(items: &[Value]) -> Value {
        Value::List(items.to_vec())
    }

    fn cmp(key: &str, op: &str, operand: Value) -> Value {
        l(&[b(key), b("value"), b(op), operand])
    }

    /// `[succeeded, results]` of a txn.
    fn run(h: &mut Harness, compares: &[Value], success: &[Value], failure: &[Value]) -> Value {
        h.ok("kv.txn", &[l(compares), l(success), l(failure)])
    }

    #[test]
    fn the_branch_follows_the_compares_and_its_ops_run_in_order() {
        let mut h = Harness::new();
        h.ok("kv.put", &[b("a"), b("1")]);
        // Compare-and-swap across keys: a = 1 and b absent.
        let got = run(
            &mut h,
            &[cmp("a", "=", b("1")), cmp("b", "=", Value::Nil)],
            &[
                l(&[b("put"), b("b"), b("2")]),
                l(&[b("get"), b("b")]),
                l(&[b("delete"), b("a")]),
            ],
            &[l(&[b("get"), b("a")])],
        );
        assert_eq!(
            got,
            l(&[
                Value::Bool(true),
                l(&[Value::Nil, b("2"), Value::Bool(true)])
            ])
        );
        assert_eq!(h.ok("kv.get", &[b("a")]), Value::Nil);
        // Now a is absent: a compare on its value is false, whatever the op;
        // the failure branch runs.
        for op in ["=", "!=", "<", ">"] {
            let got = run(
                &mut h,
                &[cmp("a", op, b("1"))],
                &[l(&[b("put"), b("x"), b("y")])],
                &[l(&[b("get"), b("b")])],
            );
            assert_eq!(got, l(&[Value::Bool(false), l(&[b("2")])]), "{op}");
        }
        assert_eq!(h.ok("kv.get", &[b("x")]), Value::Nil, "no success op ran");
        // Byte order.
        let got = run(
            &mut h,
            &[cmp("b", "<", b("3")), cmp("b", ">", b("1"))],
            &[],
            &[],
        );
        assert_eq!(got, l(&[Value::Bool(true), l(&[])]));
        let got = run(&mut h, &[cmp("b", "!=", Value::Nil)], &[], &[]);
        assert_eq!(got, l(&[Value::Bool(true), l(&[])]));
    }

    #[test]
    fn range_ops_read_and_delete_pages() {
        let mut h = Harness::new();
        for k in ["p/a", "p/b", "p/c", "q"] {
            h.ok("kv.put", &[b(k), b("v")]);
        }
        let got = run(
            &mut h,
            &[],
            &[
                l(&[b("scan"), b("p/"), b("p0"), Value::Int(2)]),
                l(&[b("delete_range"), b("p/"), b("p0"), Value::Int(10)]),
                l(&[b("scan"), b("p/"), b("p0"), Value::Int(10)]),
            ],
            &[],
        );
        let pair = |k: &str| l(&[b(k), b("v")]);
        assert_eq!(
            got,
            l(&[
                Value::Bool(true),
                l(&[
                    l(&[l(&[pair("p/a"), pair("p/b")]), Value::from(&b"p/b\0"[..])]),
                    l(&[Value::Int(3), Value::Nil]),
                    l(&[l(&[]), Value::Nil]),
                ])
            ])
        );
        assert_eq!(h.ok("kv.get", &[b("q")]), b("v"));
    }

    #[test]
    fn bad_transactions_are_refused_by_name() {
        let h = Harness::new();
        let many = vec![cmp("a", "=", b("1")); 129];
        let ops = vec![l(&[b("get"), b("a")]); 129];
        let cases: Vec<(Vec<Value>, &str)> = vec![
            (
                vec![l(&many), l(&[]), l(&[])],
                "129 compares exceed the limit of 128",
            ),
            (
                vec![l(&[]), l(&ops), l(&[])],
                "129 success ops exceed the limit of 128",
            ),
            (
                vec![
                    l(&[l(&[b("a"), b("version"), b("="), b("1")])]),
                    l(&[]),
                    l(&[]),
                ],
                "compare 1: a version, revision or lease compare takes an int, got",
            ),
            (
                vec![
                    l(&[l(&[b("a"), b("size"), b("="), b("1")])]),
                    l(&[]),
                    l(&[]),
                ],
                "the target must be one of value, version",
            ),
            (
                vec![l(&[cmp("a", "~", b("1"))]), l(&[]), l(&[])],
                "compare 1: the op must be one of",
            ),
            (
                vec![l(&[cmp("a", "<", Value::Nil)]), l(&[]), l(&[])],
                "nil tests existence, with = or != only",
            ),
            (
                vec![l(&[cmp("\0x", "=", b("1"))]), l(&[]), l(&[])],
                "reserved",
            ),
            (
                vec![l(&[]), l(&[l(&[b("put"), b("k")])]), l(&[])],
                "success op 1 must be [\"put\", key, value: bytes]",
            ),
            (
                vec![l(&[]), l(&[]), l(&[l(&[b("incr"), b("k")])])],
                "failure op 1: unknown op",
            ),
            (
                vec![
                    l(&[]),
                    l(&[l(&[b("scan"), b("b"), b("a"), Value::Int(1)])]),
                    l(&[]),
                ],
                "success op 1: kv.scan: the range is empty",
            ),
            (
                vec![
                    l(&[]),
                    l(&[l(&[b("scan"), b("a"), Value::Nil, Value::Int(0)])]),
                    l(&[]),
                ],
                "limit must be within",
            ),
            (vec![l(&[]), l(&[])], "kv.txn expects"),
        ];
        for (args, says) in cases {
            let e = h.check("kv.txn", &args).expect_err("refused");
            assert!(e.contains(says), "{says}: {e}");
        }
    }
}
