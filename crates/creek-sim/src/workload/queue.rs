//! `queue`: ticket selling (Correctables §4) over the built-in `queue.*`.
//!
//! The setup enqueues tickets `t0..t{tickets-1}` into queue `tickets`;
//! clients buy with `queue.dequeue(tickets)` (strong, or weak with a final
//! view) and sometimes look at `queue.len(tickets)`.
//!
//! Invariants:
//! - no ticket is sold in two final (stable or confirmation) views — retries
//!   of one request (same client request id) count once;
//! - every ticket sold in a final view was enqueued, and no more distinct
//!   tickets are sold than were enqueued;
//! - a ticket sold in a final view is no longer in the committed queue, and
//!   the committed queue's head has moved past at least as many tickets.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes, BytesMut};
use creek_check::history::History;
use creek_procs::registry::INTERNAL_KEY_PREFIX;
use creek_procs::Registry;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

use super::{
    args_of, bounded, describe, final_result, first_bytes_arg, logical_ops, pick_final, pick_mode,
    show, NextOp, Workload, WorkloadConfig,
};
use crate::rng::Rng;

/// `queue.enqueue(queue, item)`.
pub const ENQUEUE: &str = "queue.enqueue";
/// `queue.dequeue(queue)`.
pub const DEQUEUE: &str = "queue.dequeue";
/// `queue.len(queue)`.
pub const LEN: &str = "queue.len";

/// The queue the tickets are sold from.
pub const QUEUE_NAME: &str = "tickets";

/// Ticket `i`.
pub fn ticket(i: usize) -> Bytes {
    Bytes::from(format!("t{i}"))
}

/// A committed queue as the built-ins store it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueState {
    /// Index of the oldest item (= items ever dequeued).
    pub head: i64,
    /// Index the next item gets (= items ever enqueued).
    pub tail: i64,
    /// The items still queued, oldest first.
    pub items: Vec<Bytes>,
}

fn meta_key(name: &[u8]) -> Bytes {
    let mut k = BytesMut::with_capacity(2 + name.len());
    k.put_slice(&[INTERNAL_KEY_PREFIX, b'q']);
    k.put_slice(name);
    k.freeze()
}

fn item_key(name: &[u8], index: u64) -> Option<Bytes> {
    let len = u16::try_from(name.len()).ok()?;
    let mut k = BytesMut::with_capacity(4 + name.len() + 8);
    k.put_slice(&[INTERNAL_KEY_PREFIX, b'Q']);
    k.put_u16(len);
    k.put_slice(name);
    k.put_u64(index);
    Some(k.freeze())
}

/// Decode queue `name` from a state in the built-ins' layout (meta key
/// `[0x00, b'q'] ++ name` holding `List[Int(head), Int(tail)]`; item `i`
/// under `[0x00, b'Q'] ++ u16-BE(len) ++ name ++ u64-BE(i)`). An absent
/// meta key is an empty queue.
pub fn committed_queue(state: &BTreeMap<Bytes, Bytes>, name: &[u8]) -> Result<QueueState, String> {
    let Some(raw) = state.get(&meta_key(name)) else {
        return Ok(QueueState::default());
    };
    let (head, tail) = match Value::decode(raw) {
        Ok(Value::List(v)) => match v.as_slice() {
            [Value::Int(h), Value::Int(t)] if 0 <= *h && h <= t => (*h, *t),
            _ => return Err("corrupt queue metadata".into()),
        },
        _ => return Err("corrupt queue metadata".into()),
    };
    // Each item has its own key, so a queue longer than the state is corrupt.
    if usize::try_from(tail - head).map_or(true, |n| n > state.len()) {
        return Err(format!("queue metadata claims {} items", tail - head));
    }
    let mut items = Vec::new();
    for i in head..tail {
        let key = item_key(name, i as u64).ok_or("queue name too long")?;
        match state.get(&key) {
            Some(item) => items.push(item.clone()),
            None => return Err(format!("queued item {i} is missing")),
        }
    }
    Ok(QueueState { head, tail, items })
}

/// The `queue` workload.
#[derive(Clone, Debug)]
pub struct QueueWorkload {
    tickets: usize,
    strong_share: f64,
    final_share: f64,
}

impl QueueWorkload {
    /// The workload for `config` (`tickets`, `strong_share`, `final_share`).
    pub fn new(config: &WorkloadConfig) -> Self {
        QueueWorkload {
            tickets: config.tickets,
            strong_share: config.strong_share,
            final_share: config.final_share,
        }
    }
}

fn queue_arg() -> Value {
    Value::from(QUEUE_NAME)
}

impl Workload for QueueWorkload {
    fn name(&self) -> &'static str {
        "queue"
    }

    fn register(&self, _registry: &mut Registry) {}

    fn setup(&self) -> Vec<ProcCall> {
        (0..self.tickets)
            .map(|i| {
                ProcCall::new(
                    ENQUEUE,
                    encode_args(&[queue_arg(), Value::Bytes(ticket(i))]),
                )
            })
            .collect()
    }

    fn next_op(&mut self, rng: &mut Rng, _client: u32) -> NextOp {
        let (call, (strong, wants_final)) = if rng.chance(0.9) {
            let call = ProcCall::new(DEQUEUE, encode_args(&[queue_arg()]));
            (call, pick_final(rng, self.strong_share))
        } else {
            let call = ProcCall::new(LEN, encode_args(&[queue_arg()]));
            (call, pick_mode(rng, self.strong_share, self.final_share))
        };
        NextOp {
            call,
            strong,
            wants_final,
        }
    }

    fn keys(&self, call: &ProcCall) -> Vec<Bytes> {
        match call.name.as_ref() {
            ENQUEUE | DEQUEUE | LEN => first_bytes_arg(call).into_iter().collect(),
            _ => Vec::new(),
        }
    }

    fn check(&self, history: &History, committed_state: &BTreeMap<Bytes, Bytes>) -> Vec<String> {
        let setup = self.setup();
        let mut out = Vec::new();
        // Queue → items ever enqueued.
        let mut enqueued: BTreeMap<Bytes, BTreeSet<Bytes>> = BTreeMap::new();
        for call in setup.iter().chain(history.ops.iter().map(|op| &op.call)) {
            if call.name.as_ref() != ENQUEUE {
                continue;
            }
            if let Some([Value::Bytes(q), Value::Bytes(item)]) = args_of(call).as_deref() {
                enqueued.entry(q.clone()).or_default().insert(item.clone());
            }
        }
        // Queue → ticket → the requests that got it in a final view.
        let mut sold: BTreeMap<Bytes, BTreeMap<Bytes, Vec<String>>> = BTreeMap::new();
        for group in logical_ops(history) {
            let Some(first) = group.first() else {
                continue;
            };
            if first.call.name.as_ref() != DEQUEUE {
                continue;
            }
            let Some(q) = first_bytes_arg(&first.call) else {
                continue;
            };
            let mut got: BTreeMap<Bytes, String> = BTreeMap::new();
            for op in &group {
                match final_result(op) {
                    Some(Ok(Value::Bytes(t))) => {
                        got.entry(t).or_insert_with(|| describe(op));
                    }
                    Some(Ok(Value::Nil)) | None => {}
                    Some(Ok(v)) => out.push(format!(
                        "queue: final view of queue.dequeue by {} returned {v}",
                        describe(op)
                    )),
                    Some(Err(e)) => out.push(format!(
                        "queue: final view of queue.dequeue by {}: {e}",
                        describe(op)
                    )),
                }
            }
            if got.len() > 1 {
                let tickets: Vec<String> = got.keys().map(show).collect();
                out.push(format!(
                    "queue: retries of one request by {} got different tickets: {}",
                    describe(first),
                    tickets.join(", ")
                ));
            }
            let per_queue = sold.entry(q).or_default();
            for (t, what) in got {
                per_queue.entry(t).or_default().push(what);
            }
        }

        let none = BTreeSet::new();
        for (q, tickets) in &sold {
            let ours = enqueued.get(q).unwrap_or(&none);
            for (t, buyers) in tickets {
                if buyers.len() > 1 {
                    out.push(format!(
                        "queue: ticket {} sold twice in final views: {}",
                        show(t),
                        buyers.join(", ")
                    ));
                }
                if !ours.contains(t) {
                    out.push(format!(
                        "queue: ticket {} sold by {} was never enqueued in {}",
                        show(t),
                        buyers.join(", "),
                        show(q)
                    ));
                }
            }
            if tickets.len() > ours.len() {
                out.push(format!(
                    "queue: {} distinct tickets sold from {} in final views, only {} enqueued",
                    tickets.len(),
                    show(q),
                    ours.len()
                ));
            }
        }

        let queues: BTreeSet<&Bytes> = enqueued.keys().chain(sold.keys()).collect();
        for q in queues {
            let state = match committed_queue(committed_state, q) {
                Ok(state) => state,
                Err(e) => {
                    out.push(format!("queue: committed queue {}: {e}", show(q)));
                    continue;
                }
            };
            let tickets = sold.get(q);
            let n_sold = tickets.map_or(0, BTreeMap::len);
            if i64::try_from(n_sold).map_or(true, |n| n > state.head) {
                out.push(format!(
                    "queue: {n_sold} tickets sold from {} in final views, but the committed queue dequeued only {}",
                    show(q),
                    state.head
                ));
            }
            for item in &state.items {
                if let Some(buyers) = tickets.and_then(|t| t.get(item)) {
                    out.push(format!(
                        "queue: ticket {} sold by {} is still in the committed queue",
                        show(item),
                        buyers.join(", ")
                    ));
                }
            }
        }
        bounded(out)
    }
}

#[cfg(test)]
mod tests {
    use creek_core::ViewKind;
    use creek_exec::basic::replay;
    use creek_exec::TxnLimits;
    use creek_types::ClientRequestId;

    use super::*;
    use crate::workload::testkit::{call, history, record, run_sequential, stable};
    use creek_check::history::OpRecord;

    fn w(tickets: usize) -> QueueWorkload {
        QueueWorkload::new(&WorkloadConfig {
            tickets,
            ..WorkloadConfig::default()
        })
    }

    fn dequeue() -> ProcCall {
        call(DEQUEUE, &[queue_arg()])
    }

    fn t(s: &str) -> Value {
        Value::from(s)
    }

    /// The state after the setup of `w` and `n` dequeues.
    fn state_after(w: &QueueWorkload, n: usize) -> BTreeMap<Bytes, Bytes> {
        let reg = Registry::with_builtins();
        let calls: Vec<ProcCall> = w
            .setup()
            .into_iter()
            .chain((0..n).map(|_| dequeue()))
            .collect();
        replay(&reg, TxnLimits::default(), &calls).1
    }

    fn honest_ops() -> Vec<OpRecord> {
        let mut retried = dequeue();
        retried.request_id = Some(ClientRequestId { client: 9, seq: 1 });
        let mut a = stable(2, retried.clone(), t("t1"));
        a.origin_crashed = true;
        vec![
            stable(1, dequeue(), t("t0")),
            // A retry of one request returns the same ticket: sold once.
            a,
            stable(3, retried, t("t1")),
            // A tentative view may hand out a ticket sold elsewhere.
            record(
                4,
                dequeue(),
                vec![
                    (ViewKind::Tentative, Ok(t("t0").encode())),
                    (ViewKind::Stable, Ok(t("t2").encode())),
                ],
            ),
            stable(5, call(LEN, &[queue_arg()]), Value::Int(0)),
            stable(6, dequeue(), Value::Nil),
        ]
    }

    #[test]
    fn honest_history_passes() {
        let w = w(3);
        let s = state_after(&w, 3);
        assert_eq!(w.check(&history(honest_ops()), &s), Vec::<String>::new());
        assert_eq!(committed_queue(&s, b"tickets").map(|q| q.head), Ok(3));
    }

    #[test]
    fn violations_are_flagged() {
        let w = w(3);
        let mut ops = honest_ops();
        ops.push(record(
            7,
            dequeue(),
            vec![
                (ViewKind::Tentative, Ok(t("t1").encode())),
                (ViewKind::Confirmation, Ok(t("t1").encode())),
            ],
        ));
        let out = w.check(&history(ops), &state_after(&w, 3));
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0].contains("ticket \"t1\" sold twice in final views: op r0.2 (client 0), op r0.7"),
            "{out:?}"
        );

        // The committed queue still holds t2, sold to op 4.
        let out = w.check(&history(honest_ops()), &state_after(&w, 2));
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out[0].contains("3 tickets sold"), "{out:?}");
        assert!(
            out[1].contains("ticket \"t2\" sold by op r0.4 (client 0) is still"),
            "{out:?}"
        );
    }

    #[test]
    fn unknown_tickets_are_flagged() {
        let w = w(1);
        let ops = vec![stable(1, dequeue(), t("t0")), stable(2, dequeue(), t("t7"))];
        let out = w.check(&history(ops), &state_after(&w, 2));
        assert_eq!(out.len(), 3, "{out:?}");
        assert!(out[0].contains("\"t7\" sold by op r0.2 (client 0) was never enqueued"));
        assert!(out[1].contains("2 distinct tickets sold from \"tickets\" in final views, only 1"));
        assert!(out[2].contains("but the committed queue dequeued only 1"));
    }

    #[test]
    fn committed_queue_decodes_the_builtin_layout() {
        let w = w(4);
        let s = state_after(&w, 1);
        let q = committed_queue(&s, QUEUE_NAME.as_bytes());
        let want = QueueState {
            head: 1,
            tail: 4,
            items: vec![ticket(1), ticket(2), ticket(3)],
        };
        assert_eq!(q, Ok(want));
        assert_eq!(committed_queue(&s, b"other"), Ok(QueueState::default()));
    }

    #[test]
    fn sequential_run_passes() {
        let mut w = w(200);
        assert_eq!(w.keys(&dequeue()), vec![Bytes::from_static(b"tickets")]);
        let (state, h) = run_sequential(&mut w, 5, 300);
        assert_eq!(w.check(&History::default(), &state), Vec::<String>::new());
        assert_eq!(w.check(&h, &state), Vec::<String>::new());
        // More buyers than tickets: the queue sold out.
        let sold_out = h.ops.iter().any(|op| {
            matches!(final_result(op), Some(Ok(Value::Nil))) && op.call.name.as_ref() == DEQUEUE
        });
        assert!(sold_out);
    }
}
