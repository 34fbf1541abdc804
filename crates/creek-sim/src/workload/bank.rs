//! `bank`: money moves between accounts and the total never changes.
//!
//! Accounts `acct/0..acct/{accounts-1}` hold their balance as the decimal
//! text of an `i64` under the account name. Procedures (arguments encoded
//! with [`encode_args`], results one encoded [`Value`]):
//!
//! | procedure       | arguments                            | result               | read-only |
//! |-----------------|--------------------------------------|----------------------|-----------|
//! | `bank.open`     | `account: bytes, amount: int (>= 0)` | nil                  |           |
//! | `bank.transfer` | `from: bytes, to: bytes, amount: int (> 0)` | int: `from`'s new balance | |
//! | `bank.balance`  | `account: bytes`                     | int, or nil if none  | yes       |
//! | `bank.total`    | `n: int`                             | int: sum of `acct/0..acct/{n-1}` | yes |
//!
//! Aborts (nothing written): opening an existing account, a transfer from
//! or to a missing account, "insufficient funds" when `from` would go
//! negative, an overflowing balance, a stored balance that is not an integer.
//!
//! Invariants: every final view of `bank.total` equals
//! `accounts × initial_balance`; so does the sum of committed balances; no
//! committed balance (nor a final view of a transfer) is negative.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use creek_check::history::History;
use creek_exec::registry::INTERNAL_KEY_PREFIX;
use creek_exec::value::{decode_args, encode_args, Value};
use creek_exec::{Abort, Outcome, ProcCall, Registry, Txn};

use super::{
    args_of, bounded, describe, final_result, pick_final, pick_mode, show, NextOp, Workload,
    WorkloadConfig,
};
use crate::rng::Rng;

/// `bank.open(account, amount)`.
pub const OPEN: &str = "bank.open";
/// `bank.transfer(from, to, amount)`.
pub const TRANSFER: &str = "bank.transfer";
/// `bank.balance(account)`.
pub const BALANCE: &str = "bank.balance";
/// `bank.total(n)`.
pub const TOTAL: &str = "bank.total";

/// Most accounts `bank.total` sums.
pub const MAX_ACCOUNTS: i64 = 100_000;

/// The abort message of a transfer that would overdraw.
pub const INSUFFICIENT_FUNDS: &str = "insufficient funds";

/// The name (and key) of account `i`.
pub fn account_key(i: usize) -> Bytes {
    Bytes::from(format!("acct/{i}"))
}

/// Register the `bank.*` procedures.
pub fn register_procedures(registry: &mut Registry) {
    registry.register_fn(OPEN, false, |a| parse_open(a).map(drop), open);
    registry.register_fn(TRANSFER, false, |a| parse_transfer(a).map(drop), transfer);
    registry.register_fn(BALANCE, true, |a| parse_balance(a).map(drop), balance);
    registry.register_fn(TOTAL, true, |a| parse_total(a).map(drop), total);
}

fn args(name: &str, raw: &[u8]) -> Result<Vec<Value>, String> {
    decode_args(raw).map_err(|e| format!("{name}: malformed arguments: {e}"))
}

fn account_arg(name: &str, v: &Value) -> Result<Bytes, String> {
    match v {
        Value::Bytes(b) if b.first() == Some(&INTERNAL_KEY_PREFIX) => {
            Err(format!("{name}: accounts starting with 0x00 are reserved"))
        }
        Value::Bytes(b) if b.is_empty() => Err(format!("{name}: empty account name")),
        Value::Bytes(b) => Ok(b.clone()),
        other => Err(format!(
            "{name}: account must be bytes, got {}",
            other.kind()
        )),
    }
}

fn parse_open(raw: &[u8]) -> Result<(Bytes, i64), String> {
    match args(OPEN, raw)?.as_slice() {
        [account, Value::Int(amount)] if *amount >= 0 => Ok((account_arg(OPEN, account)?, *amount)),
        _ => Err(format!("{OPEN} expects (account: bytes, amount: int >= 0)")),
    }
}

fn parse_transfer(raw: &[u8]) -> Result<(Bytes, Bytes, i64), String> {
    match args(TRANSFER, raw)?.as_slice() {
        [from, to, Value::Int(amount)] if *amount > 0 => {
            let (from, to) = (account_arg(TRANSFER, from)?, account_arg(TRANSFER, to)?);
            if from == to {
                return Err(format!("{TRANSFER}: from and to must differ"));
            }
            Ok((from, to, *amount))
        }
        _ => Err(format!(
            "{TRANSFER} expects (from: bytes, to: bytes, amount: int > 0)"
        )),
    }
}

fn parse_balance(raw: &[u8]) -> Result<Bytes, String> {
    match args(BALANCE, raw)?.as_slice() {
        [account] => account_arg(BALANCE, account),
        _ => Err(format!("{BALANCE} expects (account: bytes)")),
    }
}

fn parse_total(raw: &[u8]) -> Result<i64, String> {
    match args(TOTAL, raw)?.as_slice() {
        [Value::Int(n)] if (0..=MAX_ACCOUNTS).contains(n) => Ok(*n),
        _ => Err(format!("{TOTAL} expects (n: int in 0..={MAX_ACCOUNTS})")),
    }
}

/// A stored balance: decimal text of an `i64`.
fn parse_balance_text(raw: &[u8]) -> Option<i64> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

fn read_balance(txn: &mut Txn<'_>, account: &Bytes) -> Result<Option<i64>, Abort> {
    match txn.get(account) {
        None => Ok(None),
        Some(raw) => parse_balance_text(&raw)
            .map(Some)
            .ok_or_else(|| Abort::new(format!("corrupt balance of {}", show(account)))),
    }
}

fn existing_balance(txn: &mut Txn<'_>, account: &Bytes) -> Result<i64, Abort> {
    read_balance(txn, account)?
        .ok_or_else(|| Abort::new(format!("no such account {}", show(account))))
}

fn balance_text(n: i64) -> Bytes {
    Bytes::from(n.to_string())
}

/// `bank.open(account, amount)` → nil.
fn open(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let (account, amount) = parse_open(raw).map_err(Abort)?;
    if read_balance(txn, &account)?.is_some() {
        return Err(Abort::new(format!("account {} exists", show(&account))));
    }
    txn.put(account, balance_text(amount));
    Ok(Value::Nil.encode())
}

/// `bank.transfer(from, to, amount)` → `from`'s new balance.
fn transfer(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let (from, to, amount) = parse_transfer(raw).map_err(Abort)?;
    let from_balance = existing_balance(txn, &from)?;
    let to_balance = existing_balance(txn, &to)?;
    if from_balance < amount {
        return Err(Abort::new(INSUFFICIENT_FUNDS));
    }
    let new_to = to_balance
        .checked_add(amount)
        .ok_or_else(|| Abort::new("balance overflow"))?;
    let new_from = from_balance - amount;
    txn.put(from, balance_text(new_from));
    txn.put(to, balance_text(new_to));
    Ok(Value::Int(new_from).encode())
}

/// `bank.balance(account)` → the balance, or nil.
fn balance(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let account = parse_balance(raw).map_err(Abort)?;
    Ok(read_balance(txn, &account)?
        .map_or(Value::Nil, Value::Int)
        .encode())
}

/// `bank.total(n)` → the sum of `acct/0..acct/{n-1}` (missing ones count 0).
fn total(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let n = parse_total(raw).map_err(Abort)?;
    let mut sum: i64 = 0;
    for i in 0..n {
        let key = Bytes::from(format!("acct/{i}"));
        let b = read_balance(txn, &key)?.unwrap_or(0);
        sum = sum
            .checked_add(b)
            .ok_or_else(|| Abort::new("total overflow"))?;
    }
    Ok(Value::Int(sum).encode())
}

/// The `bank` workload.
#[derive(Clone, Debug)]
pub struct BankWorkload {
    accounts: usize,
    initial_balance: i64,
    strong_share: f64,
    final_share: f64,
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
        }
    }

    /// The total every stable read must see.
    fn expected_total(&self) -> i128 {
        self.accounts as i128 * i128::from(self.initial_balance)
    }

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
        let (call, (strong, wants_final)) = if roll < 70 && self.accounts >= 2 {
            let from = rng.index(self.accounts);
            let mut to = rng.index(self.accounts - 1);
            if to >= from {
                to += 1;
            }
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
        } else if roll < 90 || self.accounts == 0 {
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

    fn check(&self, history: &History, committed_state: &BTreeMap<Bytes, Bytes>) -> Vec<String> {
        let expected = self.expected_total();
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
        let accounts: BTreeSet<Bytes> = (0..self.accounts).map(account_key).collect();
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
    use creek_exec::TxnLimits;

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
            assert!(reg.check(c).is_ok(), "{c:?}");
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
            assert!(reg.check(&bad).is_err(), "{bad:?}");
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
