//! `queue.*`: named FIFO queues.
//!
//! Storage of queue `name` (at most [`MAX_NAME`] bytes):
//! - meta key `[0x00, b'q'] ++ name`, holding the encoded
//!   `List[Int(head), Int(tail)]`: `head` is the index of the oldest item,
//!   `tail` the index the next item gets (absent meta means `0, 0`);
//! - item keys `[0x00, b'Q'] ++ u16-BE(name.len()) ++ name ++ u64-BE(index)`.
//!
//! Indices only grow, so an item's position is stable; the meta key stays
//! when the queue drains.

use bytes::{BufMut, Bytes, BytesMut};

use super::{describe_all, Sig, Subject, Ty};
use crate::registry::{Registry, INTERNAL_KEY_PREFIX};
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_types::value::Value;

/// Longest queue name, in bytes.
const MAX_NAME: usize = 1024;

const ENQUEUE: Sig = Sig {
    name: "queue.enqueue",
    params: &[("queue", Ty::Bytes), ("item", Ty::Bytes)],
    subject: Subject::Name(Some(MAX_NAME)),
};
const DEQUEUE: Sig = Sig {
    name: "queue.dequeue",
    params: &[("queue", Ty::Bytes)],
    subject: Subject::Name(Some(MAX_NAME)),
};
const LEN: Sig = Sig {
    name: "queue.len",
    params: &[("queue", Ty::Bytes)],
    subject: Subject::Name(Some(MAX_NAME)),
};
const PEEK: Sig = Sig {
    name: "queue.peek",
    params: &[("queue", Ty::Bytes)],
    subject: Subject::Name(Some(MAX_NAME)),
};

/// Register the `queue.*` procedures.
pub(super) fn register(r: &mut Registry) {
    r.register_fn(ENQUEUE.name, false, |a| ENQUEUE.check(a), enqueue);
    r.register_fn(DEQUEUE.name, false, |a| DEQUEUE.check(a), dequeue);
    r.register_fn(LEN.name, true, |a| LEN.check(a), len);
    r.register_fn(PEEK.name, true, |a| PEEK.check(a), peek);
    describe_all(
        r,
        &[
            (&ENQUEUE, "int: position", "Append item to the queue."),
            (&DEQUEUE, "bytes, or nil if empty", "Take the oldest item."),
            (&LEN, "int", "The number of items."),
            (
                &PEEK,
                "bytes, or nil if empty",
                "The oldest item, left in place.",
            ),
        ],
    );
}

fn meta_key(name: &[u8]) -> Bytes {
    let mut k = BytesMut::with_capacity(2 + name.len());
    k.put_slice(&[INTERNAL_KEY_PREFIX, b'q']);
    k.put_slice(name);
    k.freeze()
}

fn item_key(name: &[u8], index: i64) -> Result<Bytes, Abort> {
    let name_len = u16::try_from(name.len()).map_err(|_| Abort::new("queue name too long"))?;
    let index = u64::try_from(index).map_err(|_| corrupt())?;
    let mut k = BytesMut::with_capacity(2 + 2 + name.len() + 8);
    k.put_slice(&[INTERNAL_KEY_PREFIX, b'Q']);
    k.put_u16(name_len);
    k.put_slice(name);
    k.put_u64(index);
    Ok(k.freeze())
}

fn corrupt() -> Abort {
    Abort::new("corrupt queue metadata")
}

/// `(head, tail)` of queue `name`, with `0 <= head <= tail`.
fn load(txn: &mut Txn<'_>, name: &[u8]) -> Result<(i64, i64), Abort> {
    let Some(raw) = txn.get(&meta_key(name)) else {
        return Ok((0, 0));
    };
    match Value::decode(&raw).map_err(|_| corrupt())? {
        Value::List(v) => match v.as_slice() {
            [Value::Int(head), Value::Int(tail)] if 0 <= *head && head <= tail => {
                Ok((*head, *tail))
            }
            _ => Err(corrupt()),
        },
        _ => Err(corrupt()),
    }
}

fn store(txn: &mut Txn<'_>, name: &[u8], head: i64, tail: i64) {
    let meta = Value::List(vec![Value::Int(head), Value::Int(tail)]);
    txn.put(meta_key(name), meta.encode());
}

/// The single argument of `sig`: the queue name.
fn name_arg(sig: &Sig, raw: &Bytes) -> Result<Bytes, Abort> {
    match sig.args(raw)?.as_slice() {
        [Value::Bytes(name)] => Ok(name.clone()),
        _ => Err(sig.mismatch()),
    }
}

/// `queue.enqueue(queue, item)` → the item's position.
fn enqueue(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = ENQUEUE.args(raw)?;
    let [Value::Bytes(name), Value::Bytes(item)] = args.as_slice() else {
        return Err(ENQUEUE.mismatch());
    };
    let (head, tail) = load(txn, name)?;
    let next = tail
        .checked_add(1)
        .ok_or_else(|| Abort::new("queue.enqueue: queue positions exhausted"))?;
    txn.put(item_key(name, tail)?, item.clone());
    store(txn, name, head, next);
    Ok(Value::Int(tail).encode())
}

/// `queue.dequeue(queue)` → the oldest item, removed, or nil when empty.
fn dequeue(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let name = name_arg(&DEQUEUE, raw)?;
    let (head, tail) = load(txn, &name)?;
    if head == tail {
        return Ok(Value::Nil.encode());
    }
    let key = item_key(&name, head)?;
    let item = txn
        .get(&key)
        .ok_or_else(|| Abort::new("corrupt queue: oldest item is missing"))?;
    txn.delete(key);
    store(txn, &name, head + 1, tail);
    Ok(Value::Bytes(item).encode())
}

/// `queue.len(queue)` → how many items it holds.
fn len(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let name = name_arg(&LEN, raw)?;
    let (head, tail) = load(txn, &name)?;
    Ok(Value::Int(tail - head).encode())
}

/// `queue.peek(queue)` → the oldest item, or nil when empty.
fn peek(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let name = name_arg(&PEEK, raw)?;
    let (head, tail) = load(txn, &name)?;
    if head == tail {
        return Ok(Value::Nil.encode());
    }
    let item = txn
        .get(&item_key(&name, head)?)
        .ok_or_else(|| Abort::new("corrupt queue: oldest item is missing"))?;
    Ok(Value::Bytes(item).encode())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::{item_key, meta_key, MAX_NAME};
    use crate::builtins::testkit::Harness;
    use creek_types::value::{encode_args, Value};
    use creek_types::ProcCall;

    fn b(s: &str) -> Value {
        Value::from(s)
    }

    #[test]
    fn empty_queue() {
        let mut h = Harness::new();
        assert_eq!(h.ok("queue.dequeue", &[b("q")]), Value::Nil);
        assert_eq!(h.ok("queue.peek", &[b("q")]), Value::Nil);
        assert_eq!(h.ok("queue.len", &[b("q")]), Value::Int(0));
        let ex = h.exec(&ProcCall::new("queue.dequeue", encode_args(&[b("q")])));
        assert!(ex.writes.is_empty());
        assert!(h.keys().is_empty());
    }

    #[test]
    fn fifo_across_many_operations() {
        let mut h = Harness::new();
        let mut model = std::collections::VecDeque::new();
        let mut next = 0i64;
        // A deterministic mix: enqueue more often than dequeue, then drain.
        for i in 0..300u32 {
            if i % 3 == 2 {
                let got = h.ok("queue.dequeue", &[b("q")]);
                assert_eq!(got, model.pop_front().map_or(Value::Nil, Value::Bytes));
            } else {
                let item = Bytes::from(format!("item-{i}"));
                let pos = h.ok("queue.enqueue", &[b("q"), Value::Bytes(item.clone())]);
                assert_eq!(pos, Value::Int(next));
                next += 1;
                model.push_back(item);
            }
            let len = i64::try_from(model.len()).unwrap_or(i64::MAX);
            assert_eq!(h.ok("queue.len", &[b("q")]), Value::Int(len));
            let front = model.front().cloned().map_or(Value::Nil, Value::Bytes);
            assert_eq!(h.ok("queue.peek", &[b("q")]), front);
        }
        while let Some(item) = model.pop_front() {
            assert_eq!(h.ok("queue.dequeue", &[b("q")]), Value::Bytes(item));
        }
        assert_eq!(h.ok("queue.dequeue", &[b("q")]), Value::Nil);
        // Drained: only the meta key is left, and positions keep growing.
        assert_eq!(h.keys(), vec![meta_key(b"q")]);
        assert_eq!(h.ok("queue.enqueue", &[b("q"), b("x")]), Value::Int(next));
    }

    #[test]
    fn storage_layout() {
        let mut h = Harness::new();
        h.ok("queue.enqueue", &[b("ab"), b("x")]);
        h.ok("queue.enqueue", &[b("ab"), b("y")]);
        h.ok("queue.dequeue", &[b("ab")]);
        let meta = h.snap.0.get(&meta_key(b"ab")).cloned();
        let expected = Value::List(vec![Value::Int(1), Value::Int(2)]).encode();
        assert_eq!(meta, Some(expected));
        let item = item_key(b"ab", 1).ok();
        let expected_key = Bytes::from_static(b"\x00Q\x00\x02ab\x00\x00\x00\x00\x00\x00\x00\x01");
        assert_eq!(item, Some(expected_key.clone()));
        assert_eq!(h.snap.0.get(&expected_key), Some(&Bytes::from_static(b"y")));
        assert_eq!(h.keys().len(), 2);
    }

    #[test]
    fn queues_are_independent() {
        let mut h = Harness::new();
        h.ok("queue.enqueue", &[b("a"), b("1")]);
        h.ok("queue.enqueue", &[b("ab"), b("2")]);
        h.ok("queue.enqueue", &[b(""), b("3")]);
        assert_eq!(h.ok("queue.dequeue", &[b("ab")]), b("2"));
        assert_eq!(h.ok("queue.dequeue", &[b("a")]), b("1"));
        assert_eq!(h.ok("queue.dequeue", &[b("")]), b("3"));
    }

    #[test]
    fn names_are_checked() {
        let mut h = Harness::new();
        assert_eq!(
            h.check("queue.enqueue", &[Value::from(&b"\x00q"[..]), b("x")]),
            Err("queue.enqueue: names starting with 0x00 are reserved".into())
        );
        let long = Value::from("n".repeat(MAX_NAME + 1).as_str());
        let ok = Value::from("n".repeat(MAX_NAME).as_str());
        assert!(h.check("queue.len", std::slice::from_ref(&ok)).is_ok());
        assert!(h.check("queue.len", std::slice::from_ref(&long)).is_err());
        assert!(h.call("queue.enqueue", &[long, b("x")]).is_err());
        assert!(h
            .call("queue.dequeue", &[Value::from(&b"\x00"[..])])
            .is_err());
        assert_eq!(h.ok("queue.enqueue", &[ok, b("x")]), Value::Int(0));
        assert_eq!(
            h.check("queue.enqueue", &[b("q")]),
            Err("queue.enqueue expects (queue: bytes, item: bytes), got 1 argument".into())
        );
        assert!(h.check("queue.peek", &[b("q"), b("x")]).is_err());
        assert!(h.check("queue.enqueue", &[b("q"), Value::Int(1)]).is_err());
        assert!(h.call("queue.enqueue", &[b("q"), Value::Nil]).is_err());
    }

    #[test]
    fn corrupt_meta_aborts() {
        let mut h = Harness::new();
        let bad = Value::List(vec![Value::Int(3), Value::Int(1)]).encode();
        h.snap.0.insert(meta_key(b"q"), bad);
        let ex = h.exec(&ProcCall::new("queue.dequeue", encode_args(&[b("q")])));
        assert!(ex.outcome.is_err() && ex.writes.is_empty());
        h.snap.0.insert(meta_key(b"q"), Bytes::from_static(b"junk"));
        assert!(h.call("queue.len", &[b("q")]).is_err());
        assert!(h.call("queue.enqueue", &[b("q"), b("x")]).is_err());
    }
}
