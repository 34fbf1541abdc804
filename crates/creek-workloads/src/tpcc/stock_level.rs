//! The Stock-Level transaction (clause 2.8), read-only.
//!
//! Arguments: `[w_id, d_id, threshold]`. Result: the number of distinct
//! items in the district's last 20 orders whose stock in the warehouse is
//! below `threshold`.
//!
//! D_NEXT_O_ID comes from its own record ([`keys::district_next_o_id`]);
//! the district row is not read (see
//! [Physical layout](super#physical-layout)).

use std::collections::BTreeSet;

use bytes::Bytes;
use creek_exec::{Abort, Outcome, Txn};
use creek_types::value::{encode_args, Value};

use super::rows::{self, Order, OrderLine, Stock};
use super::{keys, read_row, Args, D_MAX, STOCK_LEVEL, W_MAX};

/// The input of one Stock-Level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// W_ID.
    pub w_id: u16,
    /// D_ID (fixed per terminal).
    pub d_id: u8,
    /// The threshold (10..=20 in the standard mix).
    pub threshold: i64,
}

impl Input {
    /// The encoded arguments.
    pub fn encode(&self) -> Bytes {
        encode_args(&[
            Value::Int(i64::from(self.w_id)),
            Value::Int(i64::from(self.d_id)),
            Value::Int(self.threshold),
        ])
    }

    /// Decode and check arguments.
    pub fn decode(raw: &Bytes) -> Result<Self, String> {
        let mut a = Args::new(STOCK_LEVEL, raw, 3)?;
        Ok(Input {
            w_id: a.int("w_id", 1, W_MAX)? as u16,
            d_id: a.int("d_id", 1, D_MAX)? as u8,
            threshold: a.int("threshold", 0, 1_000_000)?,
        })
    }
}

pub(super) fn check_args(raw: &[u8]) -> Result<(), String> {
    Input::decode(&Bytes::copy_from_slice(raw)).map(|_| ())
}

pub(super) fn run(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let input = Input::decode(raw).map_err(Abort)?;
    let (w, d) = (input.w_id, input.d_id);
    let next_o_id_key = keys::district_next_o_id(w, d);
    let next = read_row(txn, &next_o_id_key, "D_NEXT_O_ID", rows::decode_next_o_id)?;
    let mut items = BTreeSet::new();
    for o_id in next.saturating_sub(20).max(1)..next {
        let order = read_row(txn, &keys::order(w, d, o_id), "order", Order::decode)?;
        for ol in 1..=order.ol_cnt.min(15) {
            let key = keys::order_line(w, d, o_id, ol as u8);
            items.insert(read_row(txn, &key, "order line", OrderLine::decode)?.i_id);
        }
    }
    let mut low = 0i64;
    for i_id in items {
        let i_id = u32::try_from(i_id).map_err(|_| Abort::new("corrupt order line"))?;
        let stock = read_row(txn, &keys::stock(w, i_id), "stock", Stock::decode)?;
        if stock.quantity < input.threshold {
            low += 1;
        }
    }
    Ok(Value::Int(low).encode())
}
