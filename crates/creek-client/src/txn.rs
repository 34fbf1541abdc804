//! A builder for `kv.txn`, the built-in conditional transaction over plain
//! keys (docs/api.md, "Transactions"): compares, then the ops to run if
//! they all hold, else the others, atomically.
//!
//! ```no_run
//! # async fn f(client: &creek_client::Client) -> Result<(), creek_client::Error> {
//! use creek_client::{Cmp, Levels, Txn, TxnOp};
//! let txn = Txn::new()
//!     .when("user/1", Cmp::Eq, "alice")
//!     .when_absent("lock")
//!     .then(TxnOp::put("user/1", "bob"))
//!     .then(TxnOp::put("lock", "held"))
//!     .otherwise(TxnOp::get("user/1"));
//! let view = client.kv_txn(&txn, Levels::Strong).await?.final_view().await?;
//! match creek_client::TxnAnswer::from_outcome(&view.outcome) {
//!     Ok(answer) => println!("succeeded: {}", answer.succeeded),
//!     Err(why) => println!("refused: {why}"),
//! }
//! # Ok(()) }
//! ```

use bytes::Bytes;
use creek_types::value::Value;

use crate::view::Outcome;

/// How a compare compares a key's value with its operand (byte order), or
/// one of its numbers ([`Field`]) with an int.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
    /// Less than.
    Lt,
    /// Greater than.
    Gt,
}

impl Cmp {
    fn text(self) -> &'static str {
        match self {
            Cmp::Eq => "=",
            Cmp::Ne => "!=",
            Cmp::Lt => "<",
            Cmp::Gt => ">",
        }
    }
}

/// A key's number a compare reads, 0 when the key is absent (etcd's
/// compare targets other than the value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// Writes since its creation.
    Version,
    /// The revision of its creation.
    Create,
    /// The revision of its last committed write.
    Mod,
    /// The lease it is attached to (0: none).
    Lease,
}

impl Field {
    fn text(self) -> &'static str {
        match self {
            Field::Version => "version",
            Field::Create => "create",
            Field::Mod => "mod",
            Field::Lease => "lease",
        }
    }
}

/// One op of a branch.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnOp(Value);

fn b(x: impl AsRef<[u8]>) -> Value {
    Value::Bytes(Bytes::copy_from_slice(x.as_ref()))
}

impl TxnOp {
    /// Read a key: its value, or nil.
    pub fn get(key: impl AsRef<[u8]>) -> Self {
        TxnOp(Value::List(vec![b("get"), b(key)]))
    }

    /// Write a key: nil.
    pub fn put(key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Self {
        TxnOp(Value::List(vec![b("put"), b(key), b(value)]))
    }

    /// Write a key attached to lease `lease` (deleted with it): nil; the
    /// transaction aborts if the lease is not live.
    pub fn put_with_lease(key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, lease: i64) -> Self {
        TxnOp(Value::List(vec![
            b("put"),
            b(key),
            b(value),
            Value::Int(lease),
        ]))
    }

    /// Delete a key: whether it existed.
    pub fn delete(key: impl AsRef<[u8]>) -> Self {
        TxnOp(Value::List(vec![b("delete"), b(key)]))
    }

    /// Read `[from, to)` (`to` `None`: to the last key), at most `limit`
    /// keys: `[[[key, value], …], next]`, as `kv.scan`.
    pub fn scan(from: impl AsRef<[u8]>, to: Option<&[u8]>, limit: u32) -> Self {
        TxnOp(Value::List(vec![
            b("scan"),
            b(from),
            to.map_or(Value::Nil, b),
            Value::Int(i64::from(limit)),
        ]))
    }

    /// Read the *last* keys of `[from, to)`, descending, at most `limit`:
    /// `[[[key, value], …], next]`, as `kv.scan_reverse`.
    pub fn scan_reverse(from: impl AsRef<[u8]>, to: Option<&[u8]>, limit: u32) -> Self {
        TxnOp(Value::List(vec![
            b("scan_reverse"),
            b(from),
            to.map_or(Value::Nil, b),
            Value::Int(i64::from(limit)),
        ]))
    }

    /// Delete the keys of `[from, to)`, at most `limit`: `[deleted,
    /// next]`, as `kv.delete_range`.
    pub fn delete_range(from: impl AsRef<[u8]>, to: Option<&[u8]>, limit: u32) -> Self {
        TxnOp(Value::List(vec![
            b("delete_range"),
            b(from),
            to.map_or(Value::Nil, b),
            Value::Int(i64::from(limit)),
        ]))
    }
}

/// A `kv.txn` call being built.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Txn {
    compares: Vec<Value>,
    success: Vec<Value>,
    failure: Vec<Value>,
}

impl Txn {
    /// No compares (the success branch runs), no ops.
    pub fn new() -> Self {
        Txn::default()
    }

    /// Compare `key`'s value with `operand`; false when the key is absent.
    pub fn when(mut self, key: impl AsRef<[u8]>, cmp: Cmp, operand: impl AsRef<[u8]>) -> Self {
        self.compares.push(Value::List(vec![
            b(key),
            b("value"),
            b(cmp.text()),
            b(operand),
        ]));
        self
    }

    /// Compare `key`'s `field` (0 when the key is absent) with `n`.
    pub fn when_field(mut self, key: impl AsRef<[u8]>, field: Field, cmp: Cmp, n: i64) -> Self {
        self.compares.push(Value::List(vec![
            b(key),
            b(field.text()),
            b(cmp.text()),
            Value::Int(n),
        ]));
        self
    }

    /// Holds when `key` is absent.
    pub fn when_absent(mut self, key: impl AsRef<[u8]>) -> Self {
        self.compares
            .push(Value::List(vec![b(key), b("value"), b("="), Value::Nil]));
        self
    }

    /// Holds when `key` is present.
    pub fn when_present(mut self, key: impl AsRef<[u8]>) -> Self {
        self.compares
            .push(Value::List(vec![b(key), b("value"), b("!="), Value::Nil]));
        self
    }

    /// Run `op` if every compare holds (in the order added).
    pub fn then(mut self, op: TxnOp) -> Self {
        self.success.push(op.0);
        self
    }

    /// Run `op` if a compare does not hold (in the order added).
    pub fn otherwise(mut self, op: TxnOp) -> Self {
        self.failure.push(op.0);
        self
    }

    /// `kv.txn`'s arguments.
    pub fn args(&self) -> Vec<Value> {
        vec![
            Value::List(self.compares.clone()),
            Value::List(self.success.clone()),
            Value::List(self.failure.clone()),
        ]
    }
}

/// What a `kv.txn` answered.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnAnswer {
    /// Whether every compare held (the success ops ran).
    pub succeeded: bool,
    /// Each op's result, in order, of the branch that ran.
    pub results: Vec<Value>,
}

impl TxnAnswer {
    /// Read a view's outcome: `Err` with the abort's message (a refused
    /// transaction: nothing applied), or with what the answer was if it is
    /// not `[succeeded, results]`.
    pub fn from_outcome(outcome: &Outcome) -> Result<TxnAnswer, String> {
        let shape = |v: &Value| format!("kv.txn answered {v}, not [succeeded, results]");
        match outcome {
            Ok(v @ Value::List(two)) => match two.as_slice() {
                [Value::Bool(succeeded), Value::List(results)] => Ok(TxnAnswer {
                    succeeded: *succeeded,
                    results: results.clone(),
                }),
                _ => Err(shape(v)),
            },
            Ok(other) => Err(shape(other)),
            Err(abort) => Err(abort.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_txn_is_kv_txn_s_arguments() {
        let txn = Txn::new()
            .when("a", Cmp::Gt, "1")
            .when_absent("b")
            .when_field("c", Field::Mod, Cmp::Lt, 7)
            .then(TxnOp::put("b", "2"))
            .otherwise(TxnOp::scan("p/", Some(b"p0"), 10));
        let args = txn.args();
        assert_eq!(
            args[0],
            Value::List(vec![
                Value::List(vec![b("a"), b("value"), b(">"), b("1")]),
                Value::List(vec![b("b"), b("value"), b("="), Value::Nil]),
                Value::List(vec![b("c"), b("mod"), b("<"), Value::Int(7)]),
            ])
        );
        assert_eq!(
            args[1],
            Value::List(vec![Value::List(vec![b("put"), b("b"), b("2")])])
        );
        assert_eq!(
            args[2],
            Value::List(vec![Value::List(vec![
                b("scan"),
                b("p/"),
                b("p0"),
                Value::Int(10)
            ])])
        );
        let answer = TxnAnswer::from_outcome(&Ok(Value::List(vec![
            Value::Bool(true),
            Value::List(vec![Value::Nil]),
        ])))
        .expect("reads");
        assert!(answer.succeeded);
        assert!(TxnAnswer::from_outcome(&Ok(Value::Nil)).is_err());
    }
}
