//! The Delivery transaction (clause 2.7), run as one procedure over every
//! district of a warehouse (the deferred execution of clause 2.7.2 is a
//! client-side matter).
//!
//! Arguments: `[w_id, o_carrier_id, ol_delivery_d, districts]`, where
//! `districts` is the number of districts per warehouse. Result: the list of
//! delivered O_IDs, one per district, 0 where the district had no
//! undelivered order.
//!
//! The oldest undelivered order of a district is found through the
//! new-order head index ([`keys::new_order_head`]): New-Order hands out
//! consecutive O_IDs and Delivery removes them oldest first, so the
//! undelivered orders are always the contiguous range from the head to
//! D_NEXT_O_ID − 1. Delivery reads neither D_NEXT_O_ID
//! ([`keys::district_next_o_id`]) nor the district row.

use bytes::Bytes;
use creek_exec::{Abort, Outcome, Txn};
use creek_types::value::{encode_args, Value};

use super::rows::{self, Customer, Order, OrderLine};
use super::{keys, read_row, Args, DELIVERY, D_MAX, W_MAX};

/// The input of one Delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// W_ID.
    pub w_id: u16,
    /// O_CARRIER_ID (1..=10).
    pub carrier_id: u8,
    /// OL_DELIVERY_D.
    pub delivery_d: i64,
    /// Districts per warehouse.
    pub districts: u8,
}

impl Input {
    /// The encoded arguments.
    pub fn encode(&self) -> Bytes {
        encode_args(&[
            Value::Int(i64::from(self.w_id)),
            Value::Int(i64::from(self.carrier_id)),
            Value::Int(self.delivery_d),
            Value::Int(i64::from(self.districts)),
        ])
    }

    /// Decode and check arguments.
    pub fn decode(raw: &Bytes) -> Result<Self, String> {
        let mut a = Args::new(DELIVERY, raw, 4)?;
        Ok(Input {
            w_id: a.int("w_id", 1, W_MAX)? as u16,
            carrier_id: a.int("o_carrier_id", 1, 10)? as u8,
            delivery_d: a.int("ol_delivery_d", 1, i64::MAX)?,
            districts: a.int("districts", 1, D_MAX)? as u8,
        })
    }
}

pub(super) fn check_args(raw: &[u8]) -> Result<(), String> {
    Input::decode(&Bytes::copy_from_slice(raw)).map(|_| ())
}

pub(super) fn run(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let input = Input::decode(raw).map_err(Abort)?;
    let w = input.w_id;
    let mut delivered = Vec::with_capacity(usize::from(input.districts));
    for d in 1..=input.districts {
        let head_key = keys::new_order_head(w, d);
        let head = match txn.get(&head_key) {
            Some(raw) => rows::decode_id(&raw)?,
            None => {
                delivered.push(Value::Int(0));
                continue;
            }
        };
        let new_order_key = keys::new_order(w, d, head);
        if txn.get(&new_order_key).is_none() {
            // Every order of the district is delivered.
            delivered.push(Value::Int(0));
            continue;
        }
        txn.delete(new_order_key);
        txn.put(head_key, rows::encode_id(head + 1));

        let order_key = keys::order(w, d, head);
        let mut order = read_row(txn, &order_key, "order", Order::decode)?;
        order.carrier_id = i64::from(input.carrier_id);
        let (c_id, ol_cnt) = (order.c_id, order.ol_cnt);
        txn.put(order_key, order.encode());

        let mut total = 0i64;
        for ol in 1..=ol_cnt.min(15) {
            let key = keys::order_line(w, d, head, ol as u8);
            let mut line = read_row(txn, &key, "order line", OrderLine::decode)?;
            line.delivery_d = input.delivery_d;
            total += line.amount;
            txn.put(key, line.encode());
        }
        let c_id = u32::try_from(c_id).map_err(|_| Abort::new("corrupt order"))?;
        let customer_key = keys::customer(w, d, c_id);
        let mut customer = read_row(txn, &customer_key, "customer", Customer::decode)?;
        customer.balance += total;
        customer.delivery_cnt += 1;
        txn.put(customer_key, customer.encode());
        delivered.push(Value::Int(i64::from(head)));
    }
    Ok(Value::List(delivered).encode())
}
