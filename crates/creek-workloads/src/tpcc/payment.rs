//! The Payment transaction (clause 2.5).
//!
//! Arguments: `[w_id, d_id, c_w_id, c_d_id, customer, h_amount_cents,
//! h_date]` where `customer` is a C_ID (int) or a C_LAST (bytes). Result:
//! `[c_id, c_balance_cents]`.
//!
//! W_YTD and D_YTD are read-modify-written in their own records: W_YTD in
//! the shard of the district paid in ([`keys::warehouse_ytd_shard`] of
//! W_ID, D_ID: the warehouse's W_YTD is the sum of its shards), D_YTD in
//! [`keys::district_ytd`] of the same district. The warehouse and district
//! rows are only read, for the names that make up H_DATA. So a Payment
//! writes nothing a New-Order reads and reads nothing a New-Order writes
//! (D_NEXT_O_ID has a record of its own too), except the customer row when
//! both are for the same customer; and two Payments made in different
//! districts write no common record unless they pay one customer (see
//! [Physical layout](super#physical-layout)).

use bytes::{BufMut, Bytes, BytesMut};
use creek_exec::{Abort, Outcome, Txn};
use creek_types::value::{encode_args, Value};

use super::rows::{self, Customer, District, History, Warehouse};
use super::{keys, read_row, resolve_customer, Args, CustomerSelector, D_MAX, PAYMENT, W_MAX};

/// The input of one Payment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// W_ID (the terminal's warehouse, whose YTD grows).
    pub w_id: u16,
    /// D_ID.
    pub d_id: u8,
    /// C_W_ID (differs from W_ID for a remote payment).
    pub c_w_id: u16,
    /// C_D_ID.
    pub c_d_id: u8,
    /// The paying customer.
    pub customer: CustomerSelector,
    /// H_AMOUNT in cents (100..=500000).
    pub amount: i64,
    /// H_DATE.
    pub date: i64,
}

impl Input {
    /// The encoded arguments.
    pub fn encode(&self) -> Bytes {
        encode_args(&[
            Value::Int(i64::from(self.w_id)),
            Value::Int(i64::from(self.d_id)),
            Value::Int(i64::from(self.c_w_id)),
            Value::Int(i64::from(self.c_d_id)),
            self.customer.to_value(),
            Value::Int(self.amount),
            Value::Int(self.date),
        ])
    }

    /// Decode and check arguments.
    pub fn decode(raw: &Bytes) -> Result<Self, String> {
        let mut a = Args::new(PAYMENT, raw, 7)?;
        Ok(Input {
            w_id: a.int("w_id", 1, W_MAX)? as u16,
            d_id: a.int("d_id", 1, D_MAX)? as u8,
            c_w_id: a.int("c_w_id", 1, W_MAX)? as u16,
            c_d_id: a.int("c_d_id", 1, D_MAX)? as u8,
            customer: CustomerSelector::from_value(&a.value()?)
                .map_err(|e| format!("{PAYMENT}: {e}"))?,
            amount: a.int("h_amount", 1, 1_000_000_000)?,
            date: a.int("h_date", 0, i64::MAX)?,
        })
    }
}

pub(super) fn check_args(raw: &[u8]) -> Result<(), String> {
    Input::decode(&Bytes::copy_from_slice(raw)).map(|_| ())
}

/// Longest C_DATA (clause 1.3.1).
const C_DATA_MAX: usize = 500;

/// `ytd + amount`; a stored YTD so large that the sum overflows is corrupt.
fn add_ytd(ytd: i64, amount: i64) -> Result<i64, Abort> {
    ytd.checked_add(amount)
        .ok_or_else(|| Abort::new("corrupt YTD record: overflow"))
}

pub(super) fn run(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let input = Input::decode(raw).map_err(Abort)?;
    let (w, d) = (input.w_id, input.d_id);
    let warehouse = read_row(txn, &keys::warehouse(w), "warehouse", Warehouse::decode)?;
    // W_YTD grows in the shard of the district paid in, so Payments in
    // different districts of one warehouse write different records.
    let w_ytd_key = keys::warehouse_ytd_shard(w, d);
    let w_ytd = read_row(txn, &w_ytd_key, "W_YTD shard", rows::decode_ytd)?;
    txn.put(w_ytd_key, rows::encode_ytd(add_ytd(w_ytd, input.amount)?));
    let district = read_row(txn, &keys::district(w, d), "district", District::decode)?;
    let d_ytd_key = keys::district_ytd(w, d);
    let d_ytd = read_row(txn, &d_ytd_key, "D_YTD", rows::decode_ytd)?;
    txn.put(d_ytd_key, rows::encode_ytd(add_ytd(d_ytd, input.amount)?));

    let (c_w, c_d) = (input.c_w_id, input.c_d_id);
    let c_id = resolve_customer(txn, c_w, c_d, &input.customer)?;
    let customer_key = keys::customer(c_w, c_d, c_id);
    let mut customer = read_row(txn, &customer_key, "customer", Customer::decode)?;
    customer.balance -= input.amount;
    customer.ytd_payment += input.amount;
    customer.payment_cnt += 1;
    if customer.credit.as_ref() == b"BC" {
        let entry = format!(
            "{c_id} {c_d} {c_w} {d} {w} {}.{:02} ",
            input.amount / 100,
            input.amount % 100
        );
        let mut data = BytesMut::with_capacity(C_DATA_MAX);
        data.put_slice(entry.as_bytes());
        data.put_slice(&customer.data);
        data.truncate(C_DATA_MAX);
        customer.data = data.freeze();
    }
    let payment_no =
        u32::try_from(customer.payment_cnt).map_err(|_| Abort::new("corrupt customer"))?;
    let balance = customer.balance;
    txn.put(customer_key, customer.encode());

    let mut h_data = BytesMut::with_capacity(24);
    h_data.put_slice(&warehouse.name);
    h_data.put_slice(b"    ");
    h_data.put_slice(&district.name);
    let history = History {
        c_id: i64::from(c_id),
        c_d_id: i64::from(c_d),
        c_w_id: i64::from(c_w),
        d_id: i64::from(d),
        w_id: i64::from(w),
        date: input.date,
        amount: input.amount,
        data: h_data.freeze(),
    };
    txn.put(keys::history(c_w, c_d, c_id, payment_no), history.encode());
    Ok(Value::List(vec![Value::Int(i64::from(c_id)), Value::Int(balance)]).encode())
}
