//! `bank`: money moves between accounts and the total never changes — the
//! procedures. The simulator's and `creek chaos`'s bank workload drives
//! them and checks the invariants below; every `creek serve` registers
//! them.
//!
//! Accounts `acct/0..acct/{accounts-1}` hold their balance as the decimal
//! text of an `i64` under the account name. Procedures (arguments encoded
//! with `encode_args`, results one encoded [`Value`]):
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

use bytes::Bytes;
use creek_exec::{Abort, Outcome, Txn};
use creek_procs::registry::INTERNAL_KEY_PREFIX;
use creek_procs::{Registry, Signature};
use creek_types::value::{decode_args, Value};

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

/// Bytes shown as a value (quoted text, or hex).
fn show(b: &Bytes) -> String {
    Value::Bytes(b.clone()).to_string()
}

/// Register the `bank.*` procedures.
pub fn register_procedures(registry: &mut Registry) {
    registry.register_fn(OPEN, false, |a| parse_open(a).map(drop), open);
    registry.register_fn(TRANSFER, false, |a| parse_transfer(a).map(drop), transfer);
    registry.register_fn(BALANCE, true, |a| parse_balance(a).map(drop), balance);
    registry.register_fn(TOTAL, true, |a| parse_total(a).map(drop), total);
    let describe = [
        (
            OPEN,
            Signature::new(
                &[("account", "bytes"), ("amount", "int")],
                "nil",
                "Open an account with a balance (amount >= 0); aborts if it exists.",
            ),
        ),
        (
            TRANSFER,
            Signature::new(
                &[("from", "bytes"), ("to", "bytes"), ("amount", "int")],
                "int: from's new balance",
                "Move amount (> 0) between two accounts; aborts if from holds less.",
            ),
        ),
        (
            BALANCE,
            Signature::new(
                &[("account", "bytes")],
                "int, or nil",
                "An account's balance.",
            ),
        ),
        (
            TOTAL,
            Signature::new(
                &[("n", "int")],
                "int",
                "The sum of the balances of the first n accounts.",
            ),
        ),
    ];
    for (name, sig) in describe {
        registry.describe(name, sig);
    }
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
/// A stored balance, if it is the decimal text of an `i64`.
pub fn parse_balance_text(raw: &[u8]) -> Option<i64> {
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
