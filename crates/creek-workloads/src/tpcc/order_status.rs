//! The Order-Status transaction (clause 2.6), read-only.
//!
//! Arguments: `[w_id, d_id, customer]`, `customer` a C_ID or a C_LAST.
//! Result: `[c_id, c_balance_cents, o_id, o_entry_d, o_carrier_id, lines]`
//! with `lines` a list of `[ol_i_id, ol_supply_w_id, ol_quantity,
//! ol_amount_cents, ol_delivery_d]`; `o_id` is 0 and `lines` empty when the
//! customer has no order.

use bytes::Bytes;
use creek_exec::{Abort, Outcome, Txn};
use creek_types::value::{encode_args, Value};

use super::rows::{self, Customer, Order, OrderLine};
use super::{keys, read_row, resolve_customer, Args, CustomerSelector, D_MAX, ORDER_STATUS, W_MAX};

/// The input of one Order-Status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// W_ID.
    pub w_id: u16,
    /// D_ID.
    pub d_id: u8,
    /// The customer.
    pub customer: CustomerSelector,
}

impl Input {
    /// The encoded arguments.
    pub fn encode(&self) -> Bytes {
        encode_args(&[
            Value::Int(i64::from(self.w_id)),
            Value::Int(i64::from(self.d_id)),
            self.customer.to_value(),
        ])
    }

    /// Decode and check arguments.
    pub fn decode(raw: &Bytes) -> Result<Self, String> {
        let mut a = Args::new(ORDER_STATUS, raw, 3)?;
        Ok(Input {
            w_id: a.int("w_id", 1, W_MAX)? as u16,
            d_id: a.int("d_id", 1, D_MAX)? as u8,
            customer: CustomerSelector::from_value(&a.value()?)
                .map_err(|e| format!("{ORDER_STATUS}: {e}"))?,
        })
    }
}

pub(super) fn check_args(raw: &[u8]) -> Result<(), String> {
    Input::decode(&Bytes::copy_from_slice(raw)).map(|_| ())
}

pub(super) fn run(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let input = Input::decode(raw).map_err(Abort)?;
    let (w, d) = (input.w_id, input.d_id);
    let c_id = resolve_customer(txn, w, d, &input.customer)?;
    let customer = read_row(
        txn,
        &keys::customer(w, d, c_id),
        "customer",
        Customer::decode,
    )?;
    let mut result = vec![Value::Int(i64::from(c_id)), Value::Int(customer.balance)];
    let Some(raw_last) = txn.get(&keys::customer_last_order(w, d, c_id)) else {
        result.extend([
            Value::Int(0),
            Value::Int(0),
            Value::Int(0),
            Value::List(vec![]),
        ]);
        return Ok(Value::List(result).encode());
    };
    let o_id = rows::decode_id(&raw_last)?;
    let order = read_row(txn, &keys::order(w, d, o_id), "order", Order::decode)?;
    let mut lines = Vec::new();
    for ol in 1..=order.ol_cnt.min(15) {
        let key = keys::order_line(w, d, o_id, ol as u8);
        let line = read_row(txn, &key, "order line", OrderLine::decode)?;
        lines.push(Value::List(vec![
            Value::Int(line.i_id),
            Value::Int(line.supply_w_id),
            Value::Int(line.quantity),
            Value::Int(line.amount),
            Value::Int(line.delivery_d),
        ]));
    }
    result.extend([
        Value::Int(i64::from(o_id)),
        Value::Int(order.entry_d),
        Value::Int(order.carrier_id),
        Value::List(lines),
    ]);
    Ok(Value::List(result).encode())
}
