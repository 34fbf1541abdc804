//! The initial population of clause 4.3.3.1, for any [`TpccScale`].
//!
//! [`populate`] streams the records in a fixed order (items, then per
//! warehouse: the warehouse and its W_YTD shards, its stock, and per
//! district the district, its D_YTD and D_NEXT_O_ID, customers, history,
//! orders, order lines and new-orders, plus the index records); the same
//! seed gives the same records (the YTD records draw no random numbers).
//! [`load_calls`] batches them into `tpcc.load` calls so population goes
//! through the ordinary op path, each call below a byte budget.

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_exec::{Abort, Outcome, ProcCall, Txn};
use creek_types::value::{decode_args_shared, encode_args, Value};

use super::random::{last_name, NuRandC, Rng, TpccRandom};
use super::rows::{self, Customer, District, History, Item, Order, OrderLine, Stock, Warehouse};
use super::{keys, ScaleError, TpccScale, LOAD};

/// The default byte budget of one `tpcc.load` call.
pub const CALL_BYTES_MAX: usize = 512 * 1024;

/// D_YTD of every district at load, in cents (30,000.00); a warehouse's
/// W_YTD starts at this times its districts (300,000.00 for ten).
pub const D_YTD_AT_LOAD: i64 = 3_000_000;

/// Every W_YTD shard at load, in cents: the warehouse's W_YTD at load
/// ([`D_YTD_AT_LOAD`] × its districts) split evenly over its districts'
/// shards, which is [`D_YTD_AT_LOAD`]. So the logical W_YTD at load is
/// what it would be in one record, and each shard starts equal to its
/// district's D_YTD.
pub const W_YTD_SHARD_AT_LOAD: i64 = D_YTD_AT_LOAD;

/// The payment number (the last field of a history key) of the one history
/// row the load writes per customer: C_PAYMENT_CNT starts at 1, so the
/// Payment transaction numbers its rows from 2.
pub const LOAD_PAYMENT_NO: u32 = 1;

/// Emit every record of the initial database for `scale`, in a fixed
/// order. `load_date` is the timestamp of C_SINCE, H_DATE, O_ENTRY_D and
/// the delivered orders' OL_DELIVERY_D; it should be at least 1, since 0
/// stands for a null OL_DELIVERY_D (a load at 0 breaks consistency
/// condition 7).
/// Returns the NURand constants used for C_LAST, which a run's
/// [`NuRandC::for_run`] needs, or why the scale is refused (nothing is
/// emitted then).
pub fn populate(
    scale: &TpccScale,
    rng: &mut Rng,
    load_date: i64,
    mut emit: impl FnMut(Bytes, Bytes),
) -> Result<NuRandC, ScaleError> {
    scale.validate()?;
    let c = NuRandC::for_load(rng);
    for i in 1..=scale.items {
        let item = Item {
            im_id: rng.uniform(1, 10_000),
            name: Bytes::from(rng.astring(14, 24)),
            price: rng.uniform(100, 10_000),
            data: rng.data_with_original(),
        };
        emit(keys::item(i), item.encode());
    }
    for w in 1..=scale.warehouses {
        let warehouse = Warehouse {
            name: Bytes::from(rng.astring(6, 10)),
            address: rng.address(),
            tax: rng.uniform(0, 2000),
        };
        emit(keys::warehouse(w), warehouse.encode());
        for d in 1..=scale.districts_per_warehouse {
            emit(
                keys::warehouse_ytd_shard(w, d),
                rows::encode_ytd(W_YTD_SHARD_AT_LOAD),
            );
        }
        for i in 1..=scale.items {
            let stock = Stock {
                quantity: rng.uniform(10, 100),
                dists: (0..10).map(|_| Bytes::from(rng.astring(24, 24))).collect(),
                ytd: 0,
                order_cnt: 0,
                remote_cnt: 0,
                data: rng.data_with_original(),
            };
            emit(keys::stock(w, i), stock.encode());
        }
        for d in 1..=scale.districts_per_warehouse {
            populate_district(scale, rng, c, load_date, w, d, &mut emit);
        }
    }
    Ok(c)
}

fn populate_district(
    scale: &TpccScale,
    rng: &mut Rng,
    c: NuRandC,
    load_date: i64,
    w: u16,
    d: u8,
    emit: &mut impl FnMut(Bytes, Bytes),
) {
    let district = District {
        name: Bytes::from(rng.astring(6, 10)),
        address: rng.address(),
        tax: rng.uniform(0, 2000),
    };
    emit(keys::district(w, d), district.encode());
    emit(keys::district_ytd(w, d), rows::encode_ytd(D_YTD_AT_LOAD));
    emit(
        keys::district_next_o_id(w, d),
        rows::encode_next_o_id(scale.orders_per_district + 1),
    );

    let mut by_last: BTreeMap<Bytes, Vec<(Bytes, u32)>> = BTreeMap::new();
    for c_id in 1..=scale.customers_per_district {
        let last = if c_id <= 1000 {
            last_name(i64::from(c_id) - 1)
        } else {
            last_name(rng.nurand(255, 0, 999, c.c_last))
        };
        let first = Bytes::from(rng.astring(8, 16));
        by_last
            .entry(last.clone())
            .or_default()
            .push((first.clone(), c_id));
        let customer = Customer {
            first,
            middle: Bytes::from_static(b"OE"),
            last,
            address: rng.address(),
            phone: Bytes::from(rng.nstring(16, 16)),
            since: load_date,
            credit: Bytes::from_static(if rng.percent(10) { b"BC" } else { b"GC" }),
            credit_lim: 5_000_000,
            discount: rng.uniform(0, 5000),
            balance: -1000,
            ytd_payment: 1000,
            payment_cnt: 1,
            delivery_cnt: 0,
            data: Bytes::from(rng.astring(300, 500)),
        };
        emit(keys::customer(w, d, c_id), customer.encode());
        let history = History {
            c_id: i64::from(c_id),
            c_d_id: i64::from(d),
            c_w_id: i64::from(w),
            d_id: i64::from(d),
            w_id: i64::from(w),
            date: load_date,
            amount: 1000,
            data: Bytes::from(rng.astring(12, 24)),
        };
        emit(keys::history(w, d, c_id, LOAD_PAYMENT_NO), history.encode());
    }
    for (last, mut entries) in by_last {
        entries.sort();
        emit(
            keys::customer_by_last(w, d, &last),
            rows::encode_name_index(&entries),
        );
    }

    // O_C_ID is a random permutation of the customers (repeated when there
    // are more orders than customers).
    let customers = scale.customers_per_district;
    let mut permutation: Vec<u32> = (1..=customers).collect();
    for i in (1..permutation.len()).rev() {
        let j = rng.uniform(0, i as i64) as usize;
        permutation.swap(i, j);
    }
    let first_undelivered = scale.first_undelivered();
    let mut last_order: BTreeMap<u32, u32> = BTreeMap::new();
    for o_id in 1..=scale.orders_per_district {
        let c_id = permutation[((o_id - 1) % customers) as usize];
        last_order.insert(c_id, o_id);
        let delivered = o_id < first_undelivered;
        let ol_cnt = rng.uniform(5, 15);
        let order = Order {
            c_id: i64::from(c_id),
            entry_d: load_date,
            carrier_id: if delivered { rng.uniform(1, 10) } else { 0 },
            ol_cnt,
            all_local: 1,
        };
        emit(keys::order(w, d, o_id), order.encode());
        for ol in 1..=ol_cnt {
            let line = OrderLine {
                i_id: rng.uniform(1, i64::from(scale.items)),
                supply_w_id: i64::from(w),
                delivery_d: if delivered { load_date } else { 0 },
                quantity: 5,
                amount: if delivered {
                    0
                } else {
                    rng.uniform(1, 999_999)
                },
                dist_info: Bytes::from(rng.astring(24, 24)),
            };
            emit(keys::order_line(w, d, o_id, ol as u8), line.encode());
        }
        if !delivered {
            emit(keys::new_order(w, d, o_id), rows::new_order_value());
        }
    }
    emit(
        keys::new_order_head(w, d),
        rows::encode_id(first_undelivered),
    );
    for (c_id, o_id) in last_order {
        emit(keys::customer_last_order(w, d, c_id), rows::encode_id(o_id));
    }
}

/// The population as `tpcc.load` calls of at most about `call_bytes_max`
/// bytes of records each (one record is never split). Returns the load's
/// NURand constants, like [`populate`].
pub fn load_calls(
    scale: &TpccScale,
    rng: &mut Rng,
    load_date: i64,
    call_bytes_max: usize,
    mut emit: impl FnMut(ProcCall),
) -> Result<NuRandC, ScaleError> {
    let mut batch: Vec<Value> = Vec::new();
    let mut batch_bytes = 0usize;
    let flush = |batch: &mut Vec<Value>, emit: &mut dyn FnMut(ProcCall)| {
        if !batch.is_empty() {
            let records = Value::List(std::mem::take(batch));
            emit(ProcCall::new(LOAD, encode_args(&[records])));
        }
    };
    let c = populate(scale, rng, load_date, |k, v| {
        let size = k.len() + v.len() + 8;
        if batch_bytes + size > call_bytes_max {
            flush(&mut batch, &mut emit);
            batch_bytes = 0;
        }
        batch_bytes += size;
        batch.push(Value::List(vec![Value::Bytes(k), Value::Bytes(v)]));
    })?;
    flush(&mut batch, &mut emit);
    Ok(c)
}

/// `[[key, value], …]` with every key a TPC-C key.
fn decode(raw: &Bytes) -> Result<Vec<(Bytes, Bytes)>, String> {
    let args = decode_args_shared(raw).map_err(|e| format!("malformed arguments: {e}"))?;
    let [Value::List(records)] = args.as_slice() else {
        return Err(format!("{LOAD} expects one list of [key, value] records"));
    };
    records
        .iter()
        .map(|r| match r.as_list() {
            Some([Value::Bytes(k), Value::Bytes(v)]) if keys::parse(k).is_some() => {
                Ok((k.clone(), v.clone()))
            }
            _ => Err(format!(
                "{LOAD}: each record is [key, value] with a key starting with {:?}",
                keys::PREFIX as char
            )),
        })
        .collect()
}

pub(super) fn check_args(raw: &[u8]) -> Result<(), String> {
    decode(&Bytes::copy_from_slice(raw)).map(|_| ())
}

pub(super) fn run(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let records = decode(raw).map_err(Abort)?;
    let n = records.len() as i64;
    for (k, v) in records {
        txn.put(k, v);
    }
    Ok(Value::Int(n).encode())
}
