//! `bank`: money moves between accounts and the total never changes.
//!
//! The procedures (`bank.open`, `bank.transfer`, `bank.balance`,
//! `bank.total`) live in [`creek_workloads::bank`], so every `creek serve`
//! runs them; this is the workload that drives them and its invariants:
//! every final view of `bank.total` equals `accounts × initial_balance`;
//! so does the sum of committed balances; no committed balance (nor a final
//! view of a transfer) is negative.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use creek_check::history::History;
use creek_procs::Registry;
use creek_shard::{ShardId, ShardMap};
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;
pub use creek_workloads::bank::{
    account_key, parse_balance_text, register_procedures, BALANCE, INSUFFICIENT_FUNDS,
    MAX_ACCOUNTS, OPEN, TOTAL, TRANSFER,
};

use super::{
    args_of, bounded, describe, final_result, pick_final, pick_mode, show, NextOp, Workload,
    WorkloadConfig,
};
use crate::rng::Rng;

/// The `bank` workload.
#[derive(Clone, Debug)]
pub struct BankWorkload {
    accounts: usize,
    initial_balance: i64,
    strong_share: f64,
    final_share: f64,
    /// On a sharded cluster, the shard owning each account: transfers then
    /// stay between accounts of one shard (but for a `cross_shard` share),
    /// and `bank.total` (which reads every account) is not issued.
    owners: Option<Vec<ShardId>>,
    /// On a sharded cluster, the share of transfers between accounts of
    /// two shards (operations across shards).
    cross_shard: f64,
}

impl BankWorkload {
    /// The workload for `config` (`accounts`, `initial_balance`,
    /// `strong_share`, `final_share`).
    pub fn new(config: &WorkloadConfig) -> Self {
        BankWorkload {
            accounts: config.accounts.min(MAX_ACCOUNTS as usize),
            initial_balance: config.initial_balance.max(0),
            strong_share: config.strong_share,
            final_share: config.final_share,
            owners: None,
            cross_shard: config.cross_shard,
        }
    }

    /// The accounts (by number) `shard` owns, or all of them unsharded.
    fn accounts_of(&self, shard: Option<ShardId>) -> Vec<usize> {
        (0..self.accounts)
            .filter(|&i| match (&self.owners, shard) {
                (Some(owners), Some(s)) => owners[i] == s,
                _ => true,
            })
            .collect()
    }

    /// A transfer's destination: any other account, or on a sharded
    /// cluster another account of `from`'s shard (`None` if it is alone).
    fn pick_to(&self, rng: &mut Rng, from: usize) -> Option<usize> {
        match &self.owners {
            None => {
                let mut to = rng.index(self.accounts - 1);
                if to >= from {
                    to += 1;
                }
                Some(to)
            }
            Some(owners) => {
                let across = self.cross_shard > 0.0 && rng.chance(self.cross_shard);
                let peers: Vec<usize> = (0..self.accounts)
                    .filter(|&i| i != from && (owners[i] != owners[from]) == across)
                    .collect();
                (!peers.is_empty()).then(|| peers[rng.index(peers.len())])
            }
        }
    }

    /// The total every stable read must see.
    fn total_call(&self) -> ProcCall {
        ProcCall::new(TOTAL, encode_args(&[Value::Int(self.accounts as i64)]))
    }
}

impl Workload for BankWorkload {
    fn name(&self) -> &'static str {
        "bank"
    }

    fn register(&self, registry: &mut Registry) {
        register_procedures(registry);
    }

    fn setup(&self) -> Vec<ProcCall> {
        (0..self.accounts)
            .map(|i| {
                ProcCall::new(
                    OPEN,
                    encode_args(&[
                        Value::Bytes(account_key(i)),
                        Value::Int(self.initial_balance),
                    ]),
                )
            })
            .collect()
    }

    fn next_op(&mut self, rng: &mut Rng, _client: u32) -> NextOp {
        let roll = rng.index(100);
        let from = (roll < 70 && self.accounts >= 2).then(|| rng.index(self.accounts));
        let to = from.and_then(|from| self.pick_to(rng, from));
        let (call, (strong, wants_final)) = if let (Some(from), Some(to)) = (from, to) {
            let max = (self.initial_balance / 4).max(1) as u64;
            let amount = rng.range(1, max) as i64;
            let call = ProcCall::new(
                TRANSFER,
                encode_args(&[
                    Value::Bytes(account_key(from)),
                    Value::Bytes(account_key(to)),
                    Value::Int(amount),
                ]),
            );
            (call, pick_mode(rng, self.strong_share, self.final_share))
        } else if (roll < 90 && self.owners.is_none()) || self.accounts == 0 {
            (self.total_call(), pick_final(rng, self.strong_share))
        } else {
            let account = account_key(rng.index(self.accounts));
            let call = ProcCall::new(BALANCE, encode_args(&[Value::Bytes(account)]));
            (call, pick_mode(rng, self.strong_share, self.final_share))
        };
        NextOp {
            call,
            strong,
            wants_final,
        }
    }

    fn keys(&self, call: &ProcCall) -> Vec<Bytes> {
        match (call.name.as_ref(), args_of(call).as_deref()) {
            (TRANSFER, Some([Value::Bytes(from), Value::Bytes(to), _])) => {
                vec![from.clone(), to.clone()]
            }
            (OPEN | BALANCE, Some([Value::Bytes(account), ..])) => vec![account.clone()],
            (TOTAL, Some([Value::Int(n)])) => {
                let n = usize::try_from(*n).unwrap_or(0).min(MAX_ACCOUNTS as usize);
                (0..n).map(account_key).collect()
            }
            _ => Vec::new(),
        }
    }

    fn place(&mut self, map: &mut ShardMap) -> Result<(), String> {
        self.owners = Some(
            (0..self.accounts)
                .map(|i| map.owner(None, &account_key(i)))
                .collect(),
        );
        Ok(())
    }

    fn check_shard(
        &self,
        _map: &ShardMap,
        shard: ShardId,
        history: &History,
        committed_state: &BTreeMap<Bytes, Bytes>,
    ) -> Vec<String> {
        if self.cross_shard > 0.0 {
            // Money moves between shards: only the cluster's total holds
            // (the cross-shard check), each balance still not negative.
            return self.check_balances(&self.accounts_of(Some(shard)), committed_state);
        }
        self.check_accounts(&self.accounts_of(Some(shard)), history, committed_state)
    }

    fn check(&self, history: &History, committed_state: &BTreeMap<Bytes, Bytes>) -> Vec<String> {
        self.check_accounts(&self.accounts_of(None), history, committed_state)
    }
}

impl BankWorkload {
    /// No committed balance of `accounts` is missing, malformed or
    /// negative.
    fn check_balances(
        &self,
        accounts: &[usize],
        committed_state: &BTreeMap<Bytes, Bytes>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for key in accounts.iter().map(|i| account_key(*i)) {
            match committed_state.get(&key).map(|raw| parse_balance_text(raw)) {
                Some(Some(b)) if b >= 0 => {}
                Some(Some(b)) => out.push(format!(
                    "bank: committed balance of {} is negative: {b}",
                    show(&key)
                )),
                Some(None) => out.push(format!(
                    "bank: committed balance of {} is not an integer",
                    show(&key)
                )),
                None => out.push(format!(
                    "bank: account {} missing from the committed state",
                    show(&key)
                )),
            }
        }
        bounded(out)
    }

    /// The invariants over `accounts` (every account, or one shard's).
    fn check_accounts(
        &self,
        accounts: &[usize],
        history: &History,
        committed_state: &BTreeMap<Bytes, Bytes>,
    ) -> Vec<String> {
        let expected = accounts.len() as i128 * i128::from(self.initial_balance);
        let mut out = Vec::new();
        for op in &history.ops {
            let name = op.call.name.as_ref();
            if name != TOTAL && name != TRANSFER {
                continue;
            }
            let Some(result) = final_result(op) else {
                continue;
            };
            let what = describe(op);
            match (name, result) {
                (TOTAL, Ok(Value::Int(t))) if i128::from(t) == expected => {}
                (TOTAL, Ok(v)) => out.push(format!(
                    "bank: final view of bank.total by {what} returned {v}, expected {expected}"
                )),
                (TRANSFER, Ok(Value::Int(b))) if b >= 0 => {}
                (TRANSFER, Ok(v)) => out.push(format!(
                    "bank: final view of bank.transfer by {what} left the source balance at {v}"
                )),
                (_, Err(e)) => out.push(format!("bank: final view of {name} by {what}: {e}")),
                _ => {}
            }
        }
        let mut sum: i128 = 0;
        let accounts: BTreeSet<Bytes> = accounts.iter().map(|i| account_key(*i)).collect();
        for key in &accounts {
            match committed_state.get(key).map(|raw| parse_balance_text(raw)) {
                None => out.push(format!(
                    "bank: account {} missing from the committed state",
                    show(key)
                )),
                Some(None) => out.push(format!(
                    "bank: committed balance of {} is not an integer",
                    show(key)
                )),
                Some(Some(b)) => {
                    if b < 0 {
                        out.push(format!(
                            "bank: committed balance of {} is negative: {b}",
                            show(key)
                        ));
                    }
                    sum += i128::from(b);
                }
            }
        }
        if sum != expected {
            out.push(format!(
                "bank: committed balances sum to {sum}, expected {expected}"
            ));
        }
        bounded(out)
    }
}

#[cfg(test)]
mod tests {
    use creek_core::ViewKind;
    use creek_exec::basic::replay;
    use creek_exec::{Abort, TxnLimits};

    use super::*;
    use crate::workload::testkit::{call, history, record, run_sequential, stable};
    use creek_check::history::OpRecord;

    fn b(s: &str) -> Value {
        Value::from(s)
    }

    fn w() -> BankWorkload {
        BankWorkload::new(&WorkloadConfig {
            accounts: 3,
            initial_balance: 10,
            ..WorkloadConfig::default()
        })
    }

    fn state(balances: &[(&str, &str)]) -> BTreeMap<Bytes, Bytes> {
        balances
            .iter()
            .map(|(k, v)| (Bytes::from(k.to_string()), Bytes::from(v.to_string())))
            .collect()
    }

    fn total_call() -> ProcCall {
        call(TOTAL, &[Value::Int(3)])
    }

    fn honest_ops() -> Vec<OpRecord> {
        vec![
            stable(
                1,
                call(TRANSFER, &[b("acct/0"), b("acct/1"), Value::Int(4)]),
                Value::Int(6),
            ),
            record(
                2,
                call(TRANSFER, &[b("acct/0"), b("acct/1"), Value::Int(40)]),
                vec![(ViewKind::Stable, Err(Abort::new(INSUFFICIENT_FUNDS)))],
            ),
            // A tentative total may be anything; only final ones are checked.
            record(
                3,
                total_call(),
                vec![
                    (ViewKind::Tentative, Ok(Value::Int(26).encode())),
                    (ViewKind::Stable, Ok(Value::Int(30).encode())),
                ],
            ),
            record(
                4,
                total_call(),
                vec![
                    (ViewKind::Tentative, Ok(Value::Int(30).encode())),
                    (ViewKind::Confirmation, Ok(Value::Int(30).encode())),
                ],
            ),
        ]
    }

    #[test]
    fn honest_history_passes() {
        let s = state(&[("acct/0", "6"), ("acct/1", "14"), ("acct/2", "10")]);
        assert_eq!(w().check(&history(honest_ops()), &s), Vec::<String>::new());
    }

    #[test]
    fn violations_are_flagged() {
        let mut ops = honest_ops();
        ops.push(stable(5, total_call(), Value::Int(26)));
        let s = state(&[("acct/0", "6"), ("acct/1", "14"), ("acct/2", "10")]);
        let out = w().check(&history(ops), &s);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].contains("bank.total by op r0.5 (client 0) returned 26, expected 30"));

        let s = state(&[("acct/0", "-4"), ("acct/1", "14"), ("acct/2", "10")]);
        let out = w().check(&history(honest_ops()), &s);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out[0].contains("\"acct/0\" is negative: -4"), "{out:?}");
        assert!(out[1].contains("sum to 20, expected 30"), "{out:?}");
    }

    #[test]
    fn procedures() {
        let mut reg = Registry::with_builtins();
        w().register(&mut reg);
        let a = |i: usize| Value::Bytes(account_key(i));
        let calls = vec![
            call(OPEN, &[a(0), Value::Int(10)]),
            call(OPEN, &[a(1), Value::Int(10)]),
            call(OPEN, &[a(1), Value::Int(10)]),
            call(TRANSFER, &[a(0), a(1), Value::Int(7)]),
            call(TRANSFER, &[a(0), a(1), Value::Int(7)]),
            call(TRANSFER, &[a(0), a(2), Value::Int(1)]),
            call(BALANCE, &[a(1)]),
            call(BALANCE, &[a(2)]),
            call(TOTAL, &[Value::Int(3)]),
        ];
        for c in &calls {
            assert!(
                reg.check(c, &creek_exec::TxnLimits::default()).is_ok(),
                "{c:?}"
            );
        }
        let (outcomes, state) = replay(&reg, TxnLimits::default(), &calls);
        let got: Vec<Result<Value, String>> = outcomes
            .into_iter()
            .map(|o| match o {
                Ok(raw) => Value::decode(&raw).map_err(|e| e.to_string()),
                Err(e) => Err(e.0),
            })
            .collect();
        assert_eq!(
            got,
            vec![
                Ok(Value::Nil),
                Ok(Value::Nil),
                Err("account \"acct/1\" exists".into()),
                Ok(Value::Int(3)),
                Err(INSUFFICIENT_FUNDS.into()),
                Err("no such account \"acct/2\"".into()),
                Ok(Value::Int(17)),
                Ok(Value::Nil),
                Ok(Value::Int(20)),
            ]
        );
        assert_eq!(state.get(&account_key(0)), Some(&Bytes::from_static(b"3")));
        assert_eq!(state.len(), 2);
        for bad in [
            call(TRANSFER, &[a(0), a(0), Value::Int(1)]),
            call(TRANSFER, &[a(0), a(1), Value::Int(0)]),
            call(TRANSFER, &[a(0), Value::from(&b"\x00x"[..]), Value::Int(1)]),
            call(OPEN, &[a(0), Value::Int(-1)]),
            call(TOTAL, &[Value::Int(-1)]),
            call(BALANCE, &[]),
        ] {
            assert!(
                reg.check(&bad, &creek_exec::TxnLimits::default()).is_err(),
                "{bad:?}"
            );
        }
        assert!(reg.get(BALANCE).is_some_and(|p| p.read_only));
        assert!(reg.get(TOTAL).is_some_and(|p| p.read_only));
    }

    #[test]
    fn keys_are_the_accounts_touched() {
        let w = w();
        let t = call(TRANSFER, &[b("acct/0"), b("acct/2"), Value::Int(1)]);
        assert_eq!(w.keys(&t), vec![account_key(0), account_key(2)]);
        assert_eq!(w.keys(&total_call()).len(), 3);
    }

    #[test]
    fn sequential_run_passes() {
        let mut w = BankWorkload::new(&WorkloadConfig::default());
        let (state, h) = run_sequential(&mut w, 11, 400);
        assert_eq!(w.check(&History::default(), &state), Vec::<String>::new());
        assert_eq!(w.check(&h, &state), Vec::<String>::new());
        let aborted = h
            .ops
            .iter()
            .filter(|op| op.final_view().is_some_and(|v| v.outcome.is_err()))
            .count();
        assert!(aborted > 0, "some transfers should be refused");
    }
}
