//! The lease part of the `kv` workload: clients grant short leases, put
//! fresh keys with them (`l{client}-{n}`, each written once), keep them
//! alive, revoke some, read the keys strongly, and put keys with a TTL of
//! their own (`kv.put_ttl`, keys `t{client}-{n}`). Lease ids are guessed
//! (ids count up from 1 in the committed order): a guess of an expired or
//! not yet granted lease is refused, which exercises those paths too.
//!
//! Invariants (besides the run's replay and agreement checks, which see
//! the leader's expiry ops like any other):
//! - **no lease expires before its TTL, measured by its holder**: a strong
//!   `kv.get` of a leased key, invoked after the put's final view, reads
//!   nil only once the lease's last successful grant or keep-alive
//!   *invocation* plus its TTL has passed (less [`CLOCK_SLACK_US`]: the
//!   replicas' clocks may be skewed by the clock faults), unless a revoke
//!   of the lease was invoked before;
//! - **a lease's keys go with it, at one point**: in the converged
//!   committed state, a key put with a lease (final view) is absent when
//!   the lease's record is, and present while the record is live.

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_check::history::History;
use creek_procs::builtins::lease::{record_key, Record};
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

use super::{args_of, describe, final_result, show, NextOp};
use crate::rng::Rng;

/// `lease.grant(ttl)`.
pub const GRANT: &str = "lease.grant";
/// `lease.keep_alive(id)`.
pub const KEEP_ALIVE: &str = "lease.keep_alive";
/// `lease.revoke(id)`.
pub const REVOKE: &str = "lease.revoke";
/// `kv.put_ttl(key, value, ttl)`.
pub const PUT_TTL: &str = "kv.put_ttl";

/// How early, in the simulator's true time, an expiry may come through
/// clock skew: the clock faults offset replicas' clocks by up to ±50 ms
/// and drift them by up to ±1,000 ppm, and op times follow the fastest
/// clock a replica heard of (hybrid logical clocks).
pub const CLOCK_SLACK_US: u64 = 110_000;

/// How far back among the keys put with a lease a read goes.
const READ_BACK_KEYS: usize = 400;

/// Whether `key` is one of the lease part's keys (not a register).
pub fn is_lease_key(key: &[u8]) -> bool {
    matches!(key.first(), Some(b'l' | b't'))
}

/// The generator's side: leases granted so far and keys put with them.
#[derive(Clone, Debug, Default)]
pub struct LeaseOps {
    grants: i64,
    next_key: u64,
    /// Keys put with a lease so far.
    keys: Vec<Bytes>,
}

impl LeaseOps {
    /// A guess at a recent lease id (one of the last three granted).
    fn recent(&self, rng: &mut Rng) -> i64 {
        (self.grants - rng.index(3) as i64).max(1)
    }

    fn fresh(&mut self, stem: char, client: u32) -> Bytes {
        self.next_key += 1;
        Bytes::from(format!("{stem}{client}-{}", self.next_key))
    }

    /// The next lease op of `client`.
    pub fn next_op(&mut self, rng: &mut Rng, client: u32) -> NextOp {
        let roll = rng.index(100);
        let strong = |call| NextOp {
            call,
            strong: true,
            wants_final: true,
        };
        let args = |v: &[Value]| encode_args(v);
        if roll < 6 || self.grants == 0 {
            self.grants += 1;
            let ttl = 1 + rng.index(2) as i64;
            return strong(ProcCall::new(GRANT, args(&[Value::Int(ttl)])));
        }
        if roll < 36 {
            let key = self.fresh('l', client);
            self.keys.push(key.clone());
            let call = ProcCall::new(
                "kv.put",
                args(&[
                    Value::Bytes(key),
                    Value::from("v"),
                    Value::Int(self.recent(rng)),
                ]),
            );
            return NextOp {
                call,
                strong: rng.index(2) == 0,
                wants_final: true,
            };
        }
        if roll < 66 {
            let id = self.recent(rng);
            return strong(ProcCall::new(KEEP_ALIVE, args(&[Value::Int(id)])));
        }
        if roll < 94 && !self.keys.is_empty() {
            // Among the keys of the last second or two, so that some are
            // read while their lease is close to expiring.
            let back = rng.index(self.keys.len().min(READ_BACK_KEYS));
            let key = self.keys[self.keys.len() - 1 - back].clone();
            return strong(ProcCall::new("kv.get", args(&[Value::Bytes(key)])));
        }
        if roll < 96 {
            let id = 1 + rng.index(self.grants as usize) as i64;
            return strong(ProcCall::new(REVOKE, args(&[Value::Int(id)])));
        }
        let key = self.fresh('t', client);
        let call = ProcCall::new(
            PUT_TTL,
            args(&[Value::Bytes(key), Value::from("v"), Value::Int(1)]),
        );
        NextOp {
            call,
            strong: rng.index(2) == 0,
            wants_final: false,
        }
    }
}

fn int_arg(call: &ProcCall, index: usize) -> Option<i64> {
    match args_of(call)?.get(index)? {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

/// What the history says of one lease.
#[derive(Debug, Default)]
struct Seen {
    ttl_us: u64,
    /// The latest invocation of a grant or keep-alive that succeeded.
    renewed_at_us: u64,
    /// The first invocation of a revoke of it, if any.
    revoked_at_us: Option<u64>,
}

/// The lease invariants over `history` and the converged `committed` state.
pub fn check(history: &History, committed: &BTreeMap<Bytes, Bytes>, out: &mut Vec<String>) {
    let mut leases: BTreeMap<i64, Seen> = BTreeMap::new();
    for op in &history.ops {
        let name = op.call.name.as_ref();
        let ok = || final_result(op).and_then(Result::ok);
        match name {
            GRANT => {
                if let (Some(Value::Int(id)), Some(ttl)) = (ok(), int_arg(&op.call, 0)) {
                    let seen = leases.entry(id).or_default();
                    seen.ttl_us = u64::try_from(ttl).unwrap_or(0) * 1_000_000;
                    seen.renewed_at_us = seen.renewed_at_us.max(op.invoked_at_us);
                }
            }
            KEEP_ALIVE => {
                if let (Some(Value::Int(_)), Some(id)) = (ok(), int_arg(&op.call, 0)) {
                    let seen = leases.entry(id).or_default();
                    seen.renewed_at_us = seen.renewed_at_us.max(op.invoked_at_us);
                }
            }
            REVOKE => {
                if let Some(id) = int_arg(&op.call, 0) {
                    let seen = leases.entry(id).or_default();
                    let at = seen.revoked_at_us.get_or_insert(op.invoked_at_us);
                    *at = (*at).min(op.invoked_at_us);
                }
            }
            _ => {}
        }
    }
    // Keys put with a lease whose put has a final view: key → (lease, when
    // the put's final view came).
    let mut leased: BTreeMap<Bytes, (i64, u64)> = BTreeMap::new();
    for op in history
        .ops
        .iter()
        .filter(|op| op.call.name.as_ref() == "kv.put")
    {
        let args = args_of(&op.call);
        let Some([Value::Bytes(k), _, Value::Int(id)]) = args.as_deref() else {
            continue;
        };
        if let (Some(Ok(_)), Some(view)) = (final_result(op), op.final_view()) {
            leased.insert(k.clone(), (*id, view.at_us));
        }
    }
    for op in history
        .ops
        .iter()
        .filter(|op| op.call.name.as_ref() == "kv.get" && op.strong)
    {
        let args = args_of(&op.call);
        let Some([Value::Bytes(k)]) = args.as_deref() else {
            continue;
        };
        let (Some((id, put_at)), Some(view)) = (leased.get(k), op.final_view()) else {
            continue;
        };
        let Some(seen) = leases.get(id).filter(|s| s.ttl_us > 0) else {
            continue;
        };
        let absent = matches!(final_result(op), Some(Ok(Value::Nil)));
        let live_until = seen.renewed_at_us + seen.ttl_us;
        let revoked = seen.revoked_at_us.is_some_and(|r| r < view.at_us);
        if absent
            && op.invoked_at_us > *put_at
            && !revoked
            && view.at_us + CLOCK_SLACK_US < live_until
        {
            out.push(format!(
                "leases: {} read {} absent at {} µs, but its lease {id} was renewed until {live_until} µs (its holder's measure)",
                describe(op),
                show(k),
                view.at_us
            ));
        }
    }
    for (k, (id, _)) in &leased {
        let record = u64::try_from(*id)
            .ok()
            .and_then(|id| committed.get(&record_key(id)))
            .and_then(|v| Record::decode(v));
        let present = committed.contains_key(k);
        match record {
            None if present => out.push(format!(
                "leases: committed {} outlives its lease {id}, whose record is gone",
                show(k)
            )),
            Some(r) if r.deadline_us > 0 && !present => out.push(format!(
                "leases: committed {} is gone while its lease {id} is live",
                show(k)
            )),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use creek_core::ViewKind;

    use super::*;
    use crate::workload::testkit::{call, history, record};

    fn at(
        n: u64,
        c: ProcCall,
        invoked_s: f64,
        answered_s: f64,
        v: Value,
    ) -> creek_check::history::OpRecord {
        let mut r = record(n, c, vec![(ViewKind::Stable, Ok(v.encode()))]);
        r.strong = true;
        r.invoked_at_us = (invoked_s * 1e6) as u64;
        r.views[0].at_us = (answered_s * 1e6) as u64;
        r
    }

    fn ops(read_at: f64, keep_alive_ok: bool) -> Vec<creek_check::history::OpRecord> {
        let ka = if keep_alive_ok {
            Value::Int(1)
        } else {
            Value::Nil
        };
        vec![
            at(1, call(GRANT, &[Value::Int(1)]), 0.0, 0.01, Value::Int(1)),
            at(
                2,
                call(
                    "kv.put",
                    &[Value::from("l1"), Value::from("v"), Value::Int(1)],
                ),
                0.02,
                0.03,
                Value::Nil,
            ),
            at(3, call(KEEP_ALIVE, &[Value::Int(1)]), 0.5, 0.51, ka),
            at(
                4,
                call("kv.get", &[Value::from("l1")]),
                read_at,
                read_at + 0.001,
                Value::Nil,
            ),
        ]
    }

    #[test]
    fn a_key_read_absent_before_its_holders_measure_ran_out_is_flagged() {
        let mut out = Vec::new();
        // Renewed at 0.5 s with a TTL of 1 s: absent at 1.2 s is too early.
        check(&history(ops(1.2, true)), &BTreeMap::new(), &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].contains("renewed until 1500000"), "{out:?}");
        // At 1.45 s, within the clock slack: not flagged; nor without the
        // keep-alive (the grant's TTL ran out at 1 s).
        for (read_at, kept) in [(1.45, true), (1.2, false)] {
            let mut out = Vec::new();
            check(&history(ops(read_at, kept)), &BTreeMap::new(), &mut out);
            assert_eq!(out, Vec::<String>::new());
        }
    }

    #[test]
    fn a_key_that_outlives_its_lease_or_goes_without_it_is_flagged() {
        let h = history(ops(2.0, true));
        let key = Bytes::from_static(b"l1");
        let live = Record {
            ttl_s: 1,
            deadline_us: 9,
        };
        let encode = |r: Record| {
            let mut b = r.ttl_s.to_be_bytes().to_vec();
            b.extend(r.deadline_us.to_be_bytes());
            Bytes::from(b)
        };
        let cases = [
            (
                vec![(key.clone(), Bytes::from_static(b"v"))],
                "outlives its lease 1",
            ),
            (
                vec![(record_key(1), encode(live))],
                "is gone while its lease 1 is live",
            ),
        ];
        for (state, says) in cases {
            let mut out = Vec::new();
            check(&h, &state.into_iter().collect(), &mut out);
            assert!(out.len() == 1 && out[0].contains(says), "{out:?}");
        }
        let mut out = Vec::new();
        check(&h, &BTreeMap::new(), &mut out);
        assert_eq!(out, Vec::<String>::new());
    }
}
