//! The built-in procedures the client understands: which ones only read,
//! which read plain keys (so the client cache is laid over their snapshot
//! views), and which write plain keys with an effect the client can tell
//! from its arguments or its outcome (so the cache can hold it).
//! Everything else — user procedures, the queue, list and set built-ins,
//! definitions, users — is opaque to the client (docs/snapshot-reads.md,
//! "The client cache").
//!
//! Not a second copy of the procedures: a call the server refuses (bad
//! arguments) never reaches what is derived here, and an outcome of an
//! unexpected shape makes a write opaque rather than guessed at.

use bytes::Bytes;
use creek_types::value::Value;

use crate::view::Outcome;

/// Read-only built-ins the cache is not laid over (`creek-procs`' builtins
/// registered read-only): their final views are reads. The range reads
/// read plain keys, but a page's keys are known only from its answer: a
/// snapshot page does not show the client's own writes the snapshot does
/// not hold yet (docs/api.md).
const OTHER_READS: &[&str] = &[
    "kv.scan",
    "kv.scan_keys",
    "kv.count",
    "queue.len",
    "queue.peek",
    "list.read",
    "list.len",
    "set.contains",
    "set.read",
    "keyspace.list",
    "proc.list",
    "proc.show",
    "auth.user_list",
    "auth.role_list",
];

/// One key's new state after a write: its value, or `None` if deleted.
pub(crate) type KeyEffect = (Bytes, Option<Bytes>);

/// What the client knows of a call of a procedure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Known {
    /// `kv.get(key)` (`list: false`) or `kv.mget(keys)` (`list: true`):
    /// reads of plain keys, whose snapshot views the cache is laid over.
    KeyRead { keys: Vec<Bytes>, list: bool },
    /// Another read-only built-in.
    Read,
    /// A write of plain keys whose effect its arguments say: `kv.put`,
    /// `kv.delete`, `kv.mput`.
    Write(Vec<KeyEffect>),
    /// A write of plain keys whose effect its outcome says: `kv.incr`
    /// (the new counter), `kv.cas` (swapped or not), `kv.transfer` (the two
    /// new counters).
    WriteByOutcome(ByOutcome),
    /// Anything else.
    Opaque,
}

/// A write whose effect is read off its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ByOutcome {
    /// `kv.incr(key, _)` → the new value, kept as decimal text.
    Incr(Bytes),
    /// `kv.cas(key, _, new)` → `true`: the key holds `new` (nil: deleted).
    Cas(Bytes, Option<Bytes>),
    /// `kv.transfer(from, to, _)` → `[from's, to's]` new values.
    Transfer(Bytes, Bytes),
}

impl Known {
    /// What `procedure(args)` is, as far as the client can tell.
    pub(crate) fn of(procedure: &str, args: &[Value]) -> Known {
        let key = |n: usize| args.get(n).and_then(Value::as_bytes).cloned();
        let keys = |n: usize| match args.get(n) {
            Some(Value::List(items)) => items
                .iter()
                .map(|v| v.as_bytes().cloned())
                .collect::<Option<Vec<_>>>(),
            _ => None,
        };
        let known = match procedure {
            "kv.get" if args.len() == 1 => key(0).map(|k| Known::KeyRead {
                keys: vec![k],
                list: false,
            }),
            "kv.mget" if args.len() == 1 => keys(0).map(|keys| Known::KeyRead { keys, list: true }),
            "kv.put" if args.len() == 2 => key(0)
                .zip(key(1))
                .map(|(k, v)| Known::Write(vec![(k, Some(v))])),
            "kv.delete" if args.len() == 1 => key(0).map(|k| Known::Write(vec![(k, None)])),
            "kv.mput" if args.len() == 2 => keys(0)
                .zip(keys(1))
                .filter(|(k, v)| k.len() == v.len())
                .map(|(k, v)| {
                    Known::Write(last_of_each(k.into_iter().zip(v.into_iter().map(Some))))
                }),
            "kv.incr" if args.len() == 2 => {
                key(0).map(|k| Known::WriteByOutcome(ByOutcome::Incr(k)))
            }
            "kv.cas" if args.len() == 3 => {
                let new = match args.get(2) {
                    Some(Value::Nil) => Some(None),
                    Some(Value::Bytes(b)) => Some(Some(b.clone())),
                    _ => None,
                };
                key(0)
                    .zip(new)
                    .map(|(k, new)| Known::WriteByOutcome(ByOutcome::Cas(k, new)))
            }
            "kv.transfer" if args.len() == 3 => key(0)
                .zip(key(1))
                .filter(|(from, to)| from != to)
                .map(|(from, to)| Known::WriteByOutcome(ByOutcome::Transfer(from, to))),
            p if OTHER_READS.contains(&p) => Some(Known::Read),
            _ => None,
        };
        known.unwrap_or(Known::Opaque)
    }

    /// Whether the call only reads (its final view is a read's).
    pub(crate) fn is_read(&self) -> bool {
        matches!(self, Known::KeyRead { .. } | Known::Read)
    }
}

/// The keys' new states, each key once with its last state (`kv.mput`
/// gives a key given twice its last value).
fn last_of_each(items: impl Iterator<Item = KeyEffect>) -> Vec<KeyEffect> {
    let mut out: Vec<KeyEffect> = Vec::new();
    for (k, v) in items {
        match out.iter_mut().find(|(have, _)| *have == k) {
            Some(slot) => slot.1 = v,
            None => out.push((k, v)),
        }
    }
    out
}

impl ByOutcome {
    /// The write's effect given its outcome: nothing for an abort or a
    /// failed swap; `None` if the outcome is not of the expected shape
    /// (the write is then opaque).
    pub(crate) fn effect(&self, outcome: &Outcome) -> Option<Vec<KeyEffect>> {
        let Ok(value) = outcome else {
            return Some(Vec::new());
        };
        let decimal = |n: &Value| n.as_int().map(|n| Bytes::from(n.to_string()));
        match (self, value) {
            (ByOutcome::Incr(key), n) => Some(vec![(key.clone(), Some(decimal(n)?))]),
            (ByOutcome::Cas(key, new), Value::Bool(swapped)) => Some(if *swapped {
                vec![(key.clone(), new.clone())]
            } else {
                Vec::new()
            }),
            (ByOutcome::Transfer(from, to), Value::List(both)) => match both.as_slice() {
                [a, b] => Some(vec![
                    (from.clone(), Some(decimal(a)?)),
                    (to.clone(), Some(decimal(b)?)),
                ]),
                _ => None,
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Value {
        Value::Bytes(Bytes::copy_from_slice(s.as_bytes()))
    }

    fn k(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn plain_writes_are_known_from_their_arguments() {
        assert_eq!(
            Known::of("kv.put", &[b("a"), b("1")]),
            Known::Write(vec![(k("a"), Some(k("1")))])
        );
        assert_eq!(
            Known::of("kv.delete", &[b("a")]),
            Known::Write(vec![(k("a"), None)])
        );
        let list = |items: &[&str]| Value::List(items.iter().map(|s| b(s)).collect());
        assert_eq!(
            Known::of("kv.mput", &[list(&["a", "b", "a"]), list(&["1", "2", "3"])]),
            Known::Write(vec![(k("a"), Some(k("3"))), (k("b"), Some(k("2")))])
        );
        // Arguments the server refuses are nothing the cache could hold.
        assert_eq!(
            Known::of("kv.mput", &[list(&["a"]), list(&[])]),
            Known::Opaque
        );
        assert_eq!(Known::of("kv.put", &[b("a")]), Known::Opaque);
        assert_eq!(Known::of("my.proc", &[b("a")]), Known::Opaque);
        assert_eq!(Known::of("list.append", &[b("l"), b("x")]), Known::Opaque);
        assert!(Known::of("set.read", &[b("s")]).is_read());
        assert!(Known::of("kv.mget", &[list(&["a", "b"])]).is_read());
    }

    #[test]
    fn writes_by_outcome_take_their_effect_from_the_view() {
        let Known::WriteByOutcome(incr) = Known::of("kv.incr", &[b("n"), Value::Int(2)]) else {
            panic!("kv.incr is known");
        };
        assert_eq!(
            incr.effect(&Ok(Value::Int(42))),
            Some(vec![(k("n"), Some(k("42")))])
        );
        assert_eq!(incr.effect(&Err("overflow".into())), Some(vec![]));
        assert_eq!(incr.effect(&Ok(Value::Nil)), None);
        let Known::WriteByOutcome(cas) = Known::of("kv.cas", &[b("c"), Value::Nil, Value::Nil])
        else {
            panic!("kv.cas is known");
        };
        assert_eq!(
            cas.effect(&Ok(Value::Bool(true))),
            Some(vec![(k("c"), None)])
        );
        assert_eq!(cas.effect(&Ok(Value::Bool(false))), Some(vec![]));
        let Known::WriteByOutcome(t) = Known::of("kv.transfer", &[b("x"), b("y"), Value::Int(1)])
        else {
            panic!("kv.transfer is known");
        };
        assert_eq!(
            t.effect(&Ok(Value::List(vec![Value::Int(4), Value::Int(6)]))),
            Some(vec![(k("x"), Some(k("4"))), (k("y"), Some(k("6")))])
        );
    }
}
