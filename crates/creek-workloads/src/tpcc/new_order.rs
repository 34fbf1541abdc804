//! The New-Order transaction (clause 2.4).
//!
//! Arguments: `[w_id, d_id, c_id, o_entry_d, [[ol_i_id, ol_supply_w_id,
//! ol_quantity], …]]`. Result: `[o_id, total_cents, brand_generic]` where
//! `brand_generic` holds one byte `B` or `G` per line. An unused item id
//! aborts with [`UNUSED_ITEM`], which discards every write (the 1%
//! rollback of clause 2.4.2.3).
//!
//! D_NEXT_O_ID is read-modify-written in its own record
//! ([`keys::district_next_o_id`]); the warehouse and district rows are only
//! read, for W_TAX and D_TAX (see [Physical layout](super#physical-layout)).

use bytes::Bytes;
use creek_exec::{Abort, Outcome, Txn};
use creek_types::value::{encode_args, Value};

use super::rows::{self, Customer, District, Item, Order, OrderLine, Stock, Warehouse};
use super::{int_in, keys, read_row, Args, D_MAX, ID_MAX, NEW_ORDER, W_MAX};

/// The abort message of the rollback on an unused item.
pub const UNUSED_ITEM: &str = "Item number is not valid";

/// One requested order line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    /// OL_I_ID.
    pub i_id: u32,
    /// OL_SUPPLY_W_ID.
    pub supply_w_id: u16,
    /// OL_QUANTITY (1..=10).
    pub quantity: u8,
}

/// The input of one New-Order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// W_ID (the home warehouse).
    pub w_id: u16,
    /// D_ID.
    pub d_id: u8,
    /// C_ID.
    pub c_id: u32,
    /// O_ENTRY_D.
    pub entry_d: i64,
    /// The lines, 5 to 15.
    pub lines: Vec<Line>,
}

impl Input {
    /// The encoded arguments.
    pub fn encode(&self) -> Bytes {
        let lines = self
            .lines
            .iter()
            .map(|l| {
                Value::List(vec![
                    Value::Int(i64::from(l.i_id)),
                    Value::Int(i64::from(l.supply_w_id)),
                    Value::Int(i64::from(l.quantity)),
                ])
            })
            .collect();
        encode_args(&[
            Value::Int(i64::from(self.w_id)),
            Value::Int(i64::from(self.d_id)),
            Value::Int(i64::from(self.c_id)),
            Value::Int(self.entry_d),
            Value::List(lines),
        ])
    }

    /// Decode and check arguments.
    pub fn decode(raw: &Bytes) -> Result<Self, String> {
        let mut a = Args::new(NEW_ORDER, raw, 5)?;
        let w_id = a.int("w_id", 1, W_MAX)? as u16;
        let d_id = a.int("d_id", 1, D_MAX)? as u8;
        let c_id = a.int("c_id", 1, ID_MAX)? as u32;
        let entry_d = a.int("o_entry_d", 0, i64::MAX)?;
        let Value::List(items) = a.value()? else {
            return Err(format!("{NEW_ORDER}: lines must be a list"));
        };
        if !(1..=15).contains(&items.len()) {
            return Err(format!(
                "{NEW_ORDER}: an order has 1 to 15 lines, got {}",
                items.len()
            ));
        }
        let lines = items
            .iter()
            .map(|item| match item.as_list() {
                Some([i, s, q]) => Ok(Line {
                    i_id: int_in(NEW_ORDER, "ol_i_id", i, 1, ID_MAX)? as u32,
                    supply_w_id: int_in(NEW_ORDER, "ol_supply_w_id", s, 1, W_MAX)? as u16,
                    quantity: int_in(NEW_ORDER, "ol_quantity", q, 1, 10)? as u8,
                }),
                _ => Err(format!(
                    "{NEW_ORDER}: a line is [ol_i_id, ol_supply_w_id, ol_quantity]"
                )),
            })
            .collect::<Result<_, String>>()?;
        Ok(Input {
            w_id,
            d_id,
            c_id,
            entry_d,
            lines,
        })
    }
}

pub(super) fn check_args(raw: &[u8]) -> Result<(), String> {
    Input::decode(&Bytes::copy_from_slice(raw)).map(|_| ())
}

pub(super) fn run(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let input = Input::decode(raw).map_err(Abort)?;
    let (w, d) = (input.w_id, input.d_id);
    let warehouse = read_row(txn, &keys::warehouse(w), "warehouse", Warehouse::decode)?;
    let district = read_row(txn, &keys::district(w, d), "district", District::decode)?;
    let next_o_id_key = keys::district_next_o_id(w, d);
    let o_id = read_row(txn, &next_o_id_key, "D_NEXT_O_ID", rows::decode_next_o_id)?;
    let next_o_id = o_id
        .checked_add(1)
        .ok_or_else(|| Abort::new("corrupt D_NEXT_O_ID record: overflow"))?;
    txn.put(next_o_id_key, rows::encode_next_o_id(next_o_id));
    let customer_key = keys::customer(w, d, input.c_id);
    let customer = read_row(txn, &customer_key, "customer", Customer::decode)?;

    let all_local = input.lines.iter().all(|l| l.supply_w_id == w);
    let order = Order {
        c_id: i64::from(input.c_id),
        entry_d: input.entry_d,
        carrier_id: 0,
        ol_cnt: input.lines.len() as i64,
        all_local: i64::from(all_local),
    };
    txn.put(keys::order(w, d, o_id), order.encode());
    txn.put(keys::new_order(w, d, o_id), rows::new_order_value());
    txn.put(
        keys::customer_last_order(w, d, input.c_id),
        rows::encode_id(o_id),
    );

    let dist_index = (usize::from(d) - 1) % 10;
    let mut sum = 0i64;
    let mut brand_generic = Vec::with_capacity(input.lines.len());
    for (n, line) in input.lines.iter().enumerate() {
        let Some(raw_item) = txn.get(&keys::item(line.i_id)) else {
            return Err(Abort::new(UNUSED_ITEM));
        };
        let item = Item::decode(&raw_item)?;
        let stock_key = keys::stock(line.supply_w_id, line.i_id);
        let mut stock = read_row(txn, &stock_key, "stock", Stock::decode)?;
        let qty = i64::from(line.quantity);
        stock.quantity = if stock.quantity >= qty + 10 {
            stock.quantity - qty
        } else {
            stock.quantity - qty + 91
        };
        stock.ytd += qty;
        stock.order_cnt += 1;
        if line.supply_w_id != w {
            stock.remote_cnt += 1;
        }
        let original = |b: &Bytes| b.windows(8).any(|x| x == b"ORIGINAL");
        brand_generic.push(if original(&item.data) && original(&stock.data) {
            b'B'
        } else {
            b'G'
        });
        let dist_info = stock
            .dists
            .get(dist_index)
            .cloned()
            .ok_or_else(|| Abort::new("corrupt stock: missing S_DIST"))?;
        txn.put(stock_key, stock.encode());
        let amount = qty * item.price;
        sum += amount;
        let ol = OrderLine {
            i_id: i64::from(line.i_id),
            supply_w_id: i64::from(line.supply_w_id),
            delivery_d: 0,
            quantity: qty,
            amount,
            dist_info,
        };
        txn.put(keys::order_line(w, d, o_id, n as u8 + 1), ol.encode());
    }
    // total = sum × (1 − C_DISCOUNT) × (1 + W_TAX + D_TAX), rates in 1/10000.
    let total =
        sum * (10_000 - customer.discount) * (10_000 + warehouse.tax + district.tax) / 100_000_000;
    Ok(Value::List(vec![
        Value::Int(i64::from(o_id)),
        Value::Int(total),
        Value::Bytes(Bytes::from(brand_generic)),
    ])
    .encode())
}
