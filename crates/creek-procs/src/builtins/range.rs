//! `kv.scan`, `kv.scan_keys`, `kv.count`, `kv.delete_range`: the plain
//! keys of a range, read or deleted a page at a time (docs/api.md,
//! "Ranges and prefixes"); `kv.scan_reverse` and `kv.scan_keys_reverse`
//! read from the end of the range down, and their `next` is the `to` of
//! the next page (the least key of this one).
//!
//! Each takes `from` (inclusive), `to` (exclusive; nil: to the last key)
//! and a `limit` of keys (1 to [`RANGE_LIMIT_MAX`]), and answers
//! `[page, next]`: `next` is the key to pass as `from` for the next page,
//! or nil once the range is exhausted. A page also stops before its keys
//! and values pass [`PAGE_BYTES_MAX`] (a value larger than that comes
//! alone in its page), so no answer is unbounded. Keys starting with 0x00
//! are Creek's own and never seen: `from` below 0x01 starts at 0x01.
//!
//! A scan is phantom-safe: the range it covered is in the execution's read
//! set ([`Txn::scan`]), so a key put into it or deleted from it by an op
//! ordered before the scan makes the scan run again.

use bytes::Bytes;

use super::{describe_all, Sig, Subject, Ty};
use crate::registry::{Registry, Route, INTERNAL_KEY_PREFIX};
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_types::value::Value;

/// Most keys one page names.
pub const RANGE_LIMIT_MAX: i64 = 10_000;

/// Most bytes of keys and values one page carries (at least one key).
pub const PAGE_BYTES_MAX: usize = 4 << 20;

const RANGE: &[(&str, Ty)] = &[
    ("from", Ty::Bytes),
    ("to", Ty::BytesOrNil),
    ("limit", Ty::Int),
];

pub(super) const SCAN: Sig = Sig {
    name: "kv.scan",
    params: RANGE,
    subject: Subject::None,
};
const SCAN_KEYS: Sig = Sig {
    name: "kv.scan_keys",
    params: RANGE,
    subject: Subject::None,
};
const COUNT: Sig = Sig {
    name: "kv.count",
    params: RANGE,
    subject: Subject::None,
};
pub(super) const DELETE_RANGE: Sig = Sig {
    name: "kv.delete_range",
    params: RANGE,
    subject: Subject::None,
};
pub(super) const SCAN_REVERSE: Sig = Sig {
    name: "kv.scan_reverse",
    params: RANGE,
    subject: Subject::None,
};
const SCAN_KEYS_REVERSE: Sig = Sig {
    name: "kv.scan_keys_reverse",
    params: RANGE,
    subject: Subject::None,
};

/// Register the range procedures.
pub(super) fn register(r: &mut Registry) {
    r.register_fn(SCAN.name, true, |a| check(&SCAN, a), scan);
    r.register_fn(SCAN_KEYS.name, true, |a| check(&SCAN_KEYS, a), scan_keys);
    r.register_fn(COUNT.name, true, |a| check(&COUNT, a), count);
    r.register_fn(
        SCAN_REVERSE.name,
        true,
        |a| check(&SCAN_REVERSE, a),
        scan_reverse,
    );
    r.register_fn(
        SCAN_KEYS_REVERSE.name,
        true,
        |a| check(&SCAN_KEYS_REVERSE, a),
        scan_keys_reverse,
    );
    r.register_fn(
        DELETE_RANGE.name,
        false,
        |a| check(&DELETE_RANGE, a),
        delete_range,
    );
    describe_all(
        r,
        &[
            (
                &SCAN,
                "list: [[[key, value], …], next key or nil]",
                "Read the keys of [from, to) in order, at most limit of them (to nil: to the last key).",
            ),
            (
                &SCAN_KEYS,
                "list: [[key, …], next key or nil]",
                "List the keys of [from, to) in order, at most limit of them.",
            ),
            (
                &COUNT,
                "list: [count, next key or nil]",
                "Count the keys of [from, to), at most limit of them.",
            ),
            (
                &DELETE_RANGE,
                "list: [keys deleted, next key or nil]",
                "Delete the keys of [from, to) in order, at most limit of them.",
            ),
            (
                &SCAN_REVERSE,
                "list: [[[key, value], …], next to or nil]",
                "Read the last keys of [from, to), descending, at most limit of them; pass next as to for the next page.",
            ),
            (
                &SCAN_KEYS_REVERSE,
                "list: [[key, …], next to or nil]",
                "List the last keys of [from, to), descending, at most limit of them.",
            ),
        ],
    );
    // Every shard holds keys of any range (hashed placement): each answers
    // for its own, and a client merges the pages (docs/api.md).
    for sig in [
        &SCAN,
        &SCAN_KEYS,
        &COUNT,
        &DELETE_RANGE,
        &SCAN_REVERSE,
        &SCAN_KEYS_REVERSE,
    ] {
        r.route(sig.name, Route::Everywhere);
    }
}

/// A range call's arguments, checked: the range (its start raised to the
/// first user key) and the limit.
pub(super) struct Range {
    from: Bytes,
    to: Option<Bytes>,
    limit: usize,
    /// From the end of the range down (the `_reverse` calls).
    reverse: bool,
}

impl Range {
    pub(super) fn parse(sig: &Sig, args: &[Value]) -> Result<Range, String> {
        let [Value::Bytes(from), to, Value::Int(limit)] = args else {
            return Err(format!("{} expects {}", sig.name, sig.signature()));
        };
        let first_user_key: &[u8] = &[INTERNAL_KEY_PREFIX + 1];
        let from = if from.as_ref() < first_user_key {
            Bytes::from_static(&[INTERNAL_KEY_PREFIX + 1])
        } else {
            from.clone()
        };
        let to = match to {
            Value::Nil => None,
            Value::Bytes(to) if to.as_ref() <= from.as_ref() => {
                return Err(format!(
                    "{}: the range is empty: to ({}) must sort after from ({})",
                    sig.name,
                    Value::Bytes(to.clone()),
                    Value::Bytes(from)
                ))
            }
            Value::Bytes(to) => Some(to.clone()),
            _ => return Err(format!("{} expects {}", sig.name, sig.signature())),
        };
        if !(1..=RANGE_LIMIT_MAX).contains(limit) {
            return Err(format!(
                "{}: limit must be within 1..={RANGE_LIMIT_MAX}, got {limit}",
                sig.name
            ));
        }
        let limit = usize::try_from(*limit).unwrap_or(0);
        let reverse = sig.name.ends_with("_reverse");
        Ok(Range {
            from,
            to,
            limit,
            reverse,
        })
    }

    /// One page of the range's live keys and their values, and the key
    /// the next page starts at (none once the range is exhausted).
    pub(super) fn page(&self, txn: &mut Txn<'_>) -> (Vec<(Bytes, Bytes)>, Option<Bytes>) {
        let limits = txn.limits();
        // Past every key this replica admits.
        let end = self
            .to
            .clone()
            .unwrap_or_else(|| Bytes::from(vec![0xff; limits.key_bytes_max + 1]));
        let limit = self.limit.min(limits.scan_items_max);
        let mut items = if self.reverse {
            txn.scan_rev(&self.from, &end, limit)
        } else {
            txn.scan(&self.from, &end, limit)
        };
        let mut more = items.len() == limit;
        let mut bytes = 0;
        if let Some(fit) = items.iter().position(|(k, v)| {
            bytes += k.len() + v.len();
            bytes > PAGE_BYTES_MAX
        }) {
            items.truncate(fit.max(1));
            more = true;
        }
        let next = match items.last() {
            // Going down, the next page ends before the least key here.
            Some((last, _)) if more && self.reverse => Some(last.clone()),
            Some((last, _)) if more => {
                let mut successor = Vec::with_capacity(last.len() + 1);
                successor.extend_from_slice(last);
                successor.push(0);
                Some(Bytes::from(successor))
            }
            _ => None,
        };
        (items, next)
    }
}

impl Range {
    /// `kv.scan`'s answer for this range: `[[[key, value], …], next]`.
    pub(super) fn scan(&self, txn: &mut Txn<'_>) -> Value {
        let (items, next) = self.page(txn);
        let pairs = items
            .into_iter()
            .map(|(k, v)| Value::List(vec![Value::Bytes(k), Value::Bytes(v)]))
            .collect();
        answer(Value::List(pairs), next)
    }

    /// Delete one page of this range, atomically: `kv.delete_range`'s
    /// answer, `[deleted, next]`.
    pub(super) fn delete(&self, txn: &mut Txn<'_>) -> Value {
        let (items, next) = self.page(txn);
        let deleted = items.len() as i64;
        for (k, _) in items {
            super::lease::detach(txn, &k);
            txn.delete(k);
        }
        answer(Value::Int(deleted), next)
    }
}

/// A range call's `check_args`.
fn check(sig: &Sig, raw: &[u8]) -> Result<(), String> {
    Range::parse(sig, &sig.parse(raw)?).map(drop)
}

/// The page of `sig`'s call in `raw`.
fn page(sig: &Sig, txn: &mut Txn<'_>, raw: &Bytes) -> Result<PageOf, Abort> {
    Ok(range_of(sig, raw)?.page(txn))
}

type PageOf = (Vec<(Bytes, Bytes)>, Option<Bytes>);

/// `[page, next]`.
fn answer(page: Value, next: Option<Bytes>) -> Value {
    Value::List(vec![page, next.map_or(Value::Nil, Value::Bytes)])
}

/// The range of `sig`'s call in `raw`.
fn range_of(sig: &Sig, raw: &Bytes) -> Result<Range, Abort> {
    Range::parse(sig, &sig.args(raw)?).map_err(Abort)
}

/// `kv.scan(from, to, limit)` → `[[[key, value], …], next]`.
fn scan(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    Ok(range_of(&SCAN, raw)?.scan(txn).encode())
}

/// `kv.scan_keys(from, to, limit)` → `[[key, …], next]`.
fn scan_keys(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let (items, next) = page(&SCAN_KEYS, txn, raw)?;
    let keys = items.into_iter().map(|(k, _)| Value::Bytes(k)).collect();
    Ok(answer(Value::List(keys), next).encode())
}

/// `kv.scan_reverse(from, to, limit)` → `[[[key, value], …], next]`, the
/// last keys of the range descending; `next` is the `to` of the next page.
fn scan_reverse(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    Ok(range_of(&SCAN_REVERSE, raw)?.scan(txn).encode())
}

/// `kv.scan_keys_reverse(from, to, limit)` → `[[key, …], next]`.
fn scan_keys_reverse(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let (items, next) = page(&SCAN_KEYS_REVERSE, txn, raw)?;
    let keys = items.into_iter().map(|(k, _)| Value::Bytes(k)).collect();
    Ok(answer(Value::List(keys), next).encode())
}

/// `kv.count(from, to, limit)` → `[count, next]`.
fn count(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let (items, next) = page(&COUNT, txn, raw)?;
    Ok(answer(Value::Int(items.len() as i64), next).encode())
}

/// `kv.delete_range(from, to, limit)` → `[deleted, next]`: the keys of one
/// page are deleted, atomically.
fn delete_range(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    Ok(range_of(&DELETE_RANGE, raw)?.delete(txn).encode())
}

#[cfg(test)]
mod tests {
    use crate::builtins::testkit::Harness;
    use creek_types::value::Value;

    fn b(s: &str) -> Value {
        Value::from(s)
    }

    fn page(v: Value) -> (Vec<Value>, Value) {
        match v {
            Value::List(mut two) if two.len() == 2 => {
                let next = two.pop().unwrap_or(Value::Nil);
                match two.pop() {
                    Some(Value::List(items)) => (items, next),
                    Some(other) => (vec![other], next),
                    None => (Vec::new(), next),
                }
            }
            other => panic!("not [page, next]: {other}"),
        }
    }

    fn filled() -> Harness {
        let mut h = Harness::new();
        for k in ["a", "b", "ba", "bb", "c", "d"] {
            h.ok("kv.put", &[b(k), b(&k.to_uppercase())]);
        }
        h
    }

    #[test]
    fn a_scan_pages_through_a_range_in_order() {
        let mut h = filled();
        let (items, next) = page(h.ok("kv.scan", &[b("b"), b("c"), Value::Int(2)]));
        assert_eq!(
            items,
            vec![
                Value::List(vec![b("b"), b("B")]),
                Value::List(vec![b("ba"), b("BA")])
            ]
        );
        assert_eq!(next, Value::from(&b"ba\0"[..]));
        let (items, next) = page(h.ok("kv.scan", &[next, b("c"), Value::Int(2)]));
        assert_eq!(items, vec![Value::List(vec![b("bb"), b("BB")])]);
        assert_eq!(next, Value::Nil);
        // To the last key, from before the first user key.
        let (keys, next) = page(h.ok("kv.scan_keys", &[b(""), Value::Nil, Value::Int(100)]));
        assert_eq!(keys.len(), 6);
        assert_eq!(next, Value::Nil);
        let (n, _) = page(h.ok("kv.count", &[b("b"), b("bz"), Value::Int(100)]));
        assert_eq!(n, vec![Value::Int(3)]);
    }

    #[test]
    fn a_reverse_scan_pages_down_from_the_end_of_a_range() {
        let mut h = filled();
        let (items, next) = page(h.ok("kv.scan_reverse", &[b("b"), b("c"), Value::Int(2)]));
        assert_eq!(
            items,
            vec![
                Value::List(vec![b("bb"), b("BB")]),
                Value::List(vec![b("ba"), b("BA")])
            ]
        );
        assert_eq!(next, b("ba"), "the next page's to: the least key here");
        let (items, next) = page(h.ok("kv.scan_reverse", &[b("b"), next, Value::Int(2)]));
        assert_eq!(items, vec![Value::List(vec![b("b"), b("B")])]);
        assert_eq!(next, Value::Nil);
        let (keys, next) = page(h.ok("kv.scan_keys_reverse", &[b(""), Value::Nil, Value::Int(3)]));
        assert_eq!(keys, vec![b("d"), b("c"), b("bb")]);
        assert_eq!(next, b("bb"));
        // In a transaction, after its own writes.
        let scan = Value::List(vec![b("scan_reverse"), b("a"), b("bz"), Value::Int(2)]);
        let put = Value::List(vec![b("put"), b("bz0"), b("X")]);
        let del = Value::List(vec![b("delete"), b("bb")]);
        let answer = h.ok(
            "kv.txn",
            &[
                Value::List(vec![]),
                Value::List(vec![put, del, scan]),
                Value::List(vec![]),
            ],
        );
        let Value::List(two) = answer else {
            panic!("not [succeeded, results]")
        };
        let Value::List(results) = &two[1] else {
            panic!("no results")
        };
        let (items, _) = page(results[2].clone());
        assert_eq!(
            items,
            vec![
                Value::List(vec![b("ba"), b("BA")]),
                Value::List(vec![b("b"), b("B")])
            ],
            "bb deleted, bz0 beyond the range"
        );
    }

    #[test]
    fn a_delete_range_deletes_one_page() {
        let mut h = filled();
        let (n, next) = page(h.ok("kv.delete_range", &[b("b"), Value::Nil, Value::Int(3)]));
        assert_eq!(n, vec![Value::Int(3)]);
        assert_eq!(next, Value::from(&b"bb\0"[..]));
        let (keys, _) = page(h.ok("kv.scan_keys", &[b(""), Value::Nil, Value::Int(100)]));
        assert_eq!(keys, vec![b("a"), b("c"), b("d")]);
    }

    #[test]
    fn bad_ranges_and_limits_are_refused_by_name() {
        let h = Harness::new();
        for (args, says) in [
            (vec![b("b"), b("a"), Value::Int(1)], "the range is empty"),
            (vec![b("b"), b("b"), Value::Int(1)], "the range is empty"),
            (
                vec![b("a"), Value::Nil, Value::Int(0)],
                "limit must be within 1..=10000",
            ),
            (vec![b("a"), Value::Nil, Value::Int(10_001)], "got 10001"),
            (
                vec![b("a"), Value::Int(3), Value::Int(1)],
                "must be bytes or nil",
            ),
        ] {
            let e = h.check("kv.scan", &args).expect_err("refused");
            assert!(e.contains(says), "{args:?}: {e}");
        }
    }

    #[test]
    fn a_page_stops_before_its_bytes_pass_the_bound() {
        let mut h = Harness::new();
        let big = "v".repeat(1 << 20);
        for k in ["a", "b", "c", "d", "e", "f"] {
            h.ok("kv.put", &[b(k), b(&big)]);
        }
        let (items, next) = page(h.ok("kv.scan", &[b("a"), Value::Nil, Value::Int(100)]));
        assert_eq!(
            items.len(),
            3,
            "4 MiB: three values of 1 MiB and their keys"
        );
        assert_eq!(next, Value::from(&b"c\0"[..]));
    }
}
