//! `tickets`: ticket selling as in Correctables §4 (Listing 5), over the
//! built-in `queue.*`.
//!
//! The setup stocks `events` queues `event-0..` with `tickets` tickets
//! each, numbered so that a ticket's number is how many tickets were left
//! when it was sold (the first out is `tickets`, the last `1`). A purchase
//! is a strong `queue.dequeue` with both views. The buyer is answered on
//! the preliminary view while its ticket number is above
//! `ticket_threshold` (many tickets left: the sale is safe); otherwise on
//! the final view, which either holds a ticket or says sold out.
//!
//! Checks (stable results, under any faults): no ticket is sold twice, no
//! event sells more than its stock, every ticket sold was stocked.
//! [`Workload::measure`] reports how buyers were answered and when, and
//! `oversold_promises`: buyers answered on a preliminary view whose final
//! view says sold out. That bet is safe while fewer than the threshold's
//! worth of sales are unknown to the replica (Correctables §4); a
//! partitioned replica can lose it, so it is measured, not checked.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use creek_check::history::{History, OpRecord};
use creek_procs::Registry;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;
use serde_json::{json, Map, Value as Json};

use super::queue::DEQUEUE;
use super::{args_of, bounded, describe, first_bytes_arg, NextOp, Workload, WorkloadConfig};
use crate::rng::Rng;

/// The queue holding event `e`'s tickets.
pub fn event_queue(e: usize) -> Bytes {
    Bytes::from(format!("event-{e}"))
}

/// The `tickets` workload.
#[derive(Clone, Debug)]
pub struct TicketsWorkload {
    events: usize,
    stock: usize,
    threshold: usize,
}

/// How a purchase was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// On the preliminary view, with this ticket, at this time.
    Preliminary(u64, u64),
    /// On the final view: a ticket (or `None`: sold out), at this time.
    Final(Option<u64>, u64),
}

impl TicketsWorkload {
    /// The workload for `config` (`events`, `tickets` per event,
    /// `ticket_threshold`).
    pub fn new(config: &WorkloadConfig) -> Result<Self, String> {
        if config.events == 0 || config.tickets == 0 {
            return Err("tickets: events and tickets per event must be positive".into());
        }
        Ok(TicketsWorkload {
            events: config.events,
            stock: config.tickets,
            threshold: config.ticket_threshold,
        })
    }

    /// How `op` (a purchase) was answered, if it was.
    pub fn decision(&self, op: &OpRecord) -> Option<Decision> {
        if let Some(v) = op.first_tentative() {
            if let Some(Some(n)) = ticket_of(&v.outcome) {
                if n > self.threshold as u64 {
                    return Some(Decision::Preliminary(n, v.at_us));
                }
            }
        }
        let f = op.final_view()?;
        Some(Decision::Final(ticket_of(&f.outcome)?, f.at_us))
    }
}

/// The ticket number a dequeue returned: `Some(None)` for sold out, `None`
/// for an abort or an unexpected result.
fn ticket_of(outcome: &creek_exec::Outcome) -> Option<Option<u64>> {
    let raw = outcome.as_ref().ok()?;
    match Value::decode(raw).ok()? {
        Value::Nil => Some(None),
        Value::Bytes(b) => std::str::from_utf8(&b).ok()?.parse().ok().map(Some),
        _ => None,
    }
}

fn is_purchase(op: &OpRecord) -> bool {
    op.call.name.as_ref() == DEQUEUE
}

impl Workload for TicketsWorkload {
    fn name(&self) -> &'static str {
        "tickets"
    }

    fn register(&self, _registry: &mut Registry) {}

    fn setup(&self) -> Vec<ProcCall> {
        (0..self.events)
            .flat_map(|e| {
                (1..=self.stock).rev().map(move |n| {
                    ProcCall::new(
                        super::queue::ENQUEUE,
                        encode_args(&[
                            Value::Bytes(event_queue(e)),
                            Value::Bytes(n.to_string().into()),
                        ]),
                    )
                })
            })
            .collect()
    }

    fn next_op(&mut self, rng: &mut Rng, _client: u32) -> NextOp {
        let e = rng.index(self.events);
        NextOp {
            call: ProcCall::new(DEQUEUE, encode_args(&[Value::Bytes(event_queue(e))])),
            strong: true,
            wants_final: true,
        }
    }

    fn keys(&self, call: &ProcCall) -> Vec<Bytes> {
        first_bytes_arg(call).into_iter().collect()
    }

    fn check(&self, history: &History, _state: &BTreeMap<Bytes, Bytes>) -> Vec<String> {
        let mut out = Vec::new();
        let mut sold: BTreeMap<Bytes, BTreeSet<u64>> = BTreeMap::new();
        for op in history.ops.iter().filter(|op| is_purchase(op)) {
            let queue = match args_of(&op.call).as_deref() {
                Some([Value::Bytes(q)]) => q.clone(),
                _ => continue,
            };
            let final_ticket = op.final_view().and_then(|f| ticket_of(&f.outcome));
            if let Some(Some(n)) = final_ticket {
                if n == 0 || n > self.stock as u64 {
                    out.push(format!("{} sold ticket {n}, never stocked", describe(op)));
                }
                if !sold.entry(queue.clone()).or_default().insert(n) {
                    out.push(format!(
                        "ticket {n} of {:?} sold twice (again to {})",
                        String::from_utf8_lossy(&queue),
                        describe(op)
                    ));
                }
            }
        }
        // Tickets are numbered 1..=stock and none is sold twice, so no event
        // sells more than its stock.
        bounded(out)
    }

    fn measure(&self, ops: &[&OpRecord]) -> Map<String, Json> {
        let (mut on_preliminary, mut on_final, mut sold_out, mut broken) = (0u64, 0u64, 0u64, 0u64);
        let mut decision_us = Vec::new();
        for op in ops.iter().copied().filter(|op| is_purchase(op)) {
            let final_ticket = op.final_view().and_then(|f| ticket_of(&f.outcome));
            match self.decision(op) {
                Some(Decision::Preliminary(_, at)) => {
                    on_preliminary += 1;
                    broken += u64::from(final_ticket == Some(None));
                    decision_us.push(at - op.invoked_at_us);
                }
                Some(Decision::Final(t, at)) => {
                    on_final += 1;
                    sold_out += u64::from(t.is_none());
                    decision_us.push(at - op.invoked_at_us);
                }
                None => {}
            }
        }
        let mut m = Map::new();
        m.insert("decided_on_preliminary".into(), json!(on_preliminary));
        m.insert("decided_on_final".into(), json!(on_final));
        m.insert("sold_out_answers".into(), json!(sold_out));
        m.insert("oversold_promises".into(), json!(broken));
        m.insert(
            "decision_latency_us".into(),
            crate::bench::percentiles(decision_us),
        );
        m
    }
}

#[cfg(test)]
mod tests {
    use creek_core::ViewKind;

    use super::*;
    use crate::workload::testkit::{record, run_sequential};

    fn config() -> WorkloadConfig {
        WorkloadConfig {
            events: 2,
            tickets: 30,
            ticket_threshold: 5,
            ..WorkloadConfig::default()
        }
    }

    fn buy(seq: u64, tentative: Value, fin: Value) -> OpRecord {
        let call = ProcCall::new(DEQUEUE, encode_args(&[Value::Bytes(event_queue(0))]));
        record(
            seq,
            call,
            vec![
                (ViewKind::Tentative, Ok(tentative.encode())),
                (ViewKind::Stable, Ok(fin.encode())),
            ],
        )
    }

    #[test]
    fn sequential_sales_pass_and_double_sales_fail() {
        let mut w = TicketsWorkload::new(&config()).expect("valid");
        let (state, h) = run_sequential(&mut w, 3, 100);
        assert_eq!(w.check(&h, &state), Vec::<String>::new());
        // Only stable views in a sequential run: every buyer waits for one.
        let ops: Vec<&OpRecord> = h.ops.iter().collect();
        let m = w.measure(&ops);
        assert_eq!(m["decided_on_final"].as_u64(), Some(100), "{m:?}");
        assert_eq!(m["sold_out_answers"].as_u64(), Some(40), "{m:?}");

        // #9 (above the threshold) is sold on the preliminary view, #3 not.
        let kept = buy(4, Value::from("9"), Value::from("8"));
        let low = buy(5, Value::from("3"), Value::from("2"));
        assert_eq!(w.decision(&kept), Some(Decision::Preliminary(9, 5)));
        assert_eq!(w.decision(&low), Some(Decision::Final(Some(2), 7)));

        // Promised #9 on the preliminary view, sold out in the final one:
        // measured. Ticket #3 sold twice in final views: a violation.
        let broken = buy(1, Value::from("9"), Value::Nil);
        let m = w.measure(&[&broken]);
        assert_eq!(m["oversold_promises"].as_u64(), Some(1), "{m:?}");
        let twice = [
            buy(2, Value::from("3"), Value::from("3")),
            buy(3, Value::from("3"), Value::from("3")),
        ];
        let h = History {
            ops: vec![broken, twice[0].clone(), twice[1].clone()],
        };
        let out = w.check(&h, &state);
        assert!(out.iter().any(|l| l.contains("sold twice")), "{out:?}");
        assert_eq!(out.len(), 1, "{out:?}");
    }
}
