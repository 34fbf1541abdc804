//! TPC-C (specification revision 5.11) on Creek's key-value state.
//!
//! - [`keys`] and [`rows`]: the nine tables, the W_YTD (sharded), D_YTD
//!   and D_NEXT_O_ID records stored apart from them
//!   ([Physical layout](#physical-layout)), and the index records the
//!   transactions need in place of range scans.
//! - [`new_order`], [`payment`], [`order_status`], [`delivery`],
//!   [`stock_level`]: the five transactions of clause 2 as procedures; each
//!   has an input type that encodes its arguments.
//! - [`load`]: the initial population of clause 4.3, as `tpcc.load` calls.
//! - [`generator`]: the terminal input generator (the 45/43/4/4/4 mix).
//! - [`check`]: the consistency conditions of clause 3.3.2.
//!
//! Everything is deterministic: dates come in as arguments and randomness
//! from a caller-seeded [`Rng`].
//!
//! # Physical layout
//!
//! The logical schema is the specification's nine tables, but three
//! columns are stored apart from their rows: W_YTD as a sharded counter,
//! one shard per district under [`keys::warehouse_ytd_shard`] (the
//! warehouse's W_YTD is the sum of its shards; see
//! [below](#w_ytd-is-a-sharded-counter)), and D_YTD under
//! [`keys::district_ytd`] and D_NEXT_O_ID under
//! [`keys::district_next_o_id`], one of each per district (the YTDs an
//! amount in cents, [`rows::encode_ytd`]; D_NEXT_O_ID an order id,
//! [`rows::encode_next_o_id`]). The WAREHOUSE and DISTRICT rows keep every
//! other column and are read-only after the load: no transaction writes
//! them.
//!
//! The reason is that Creek's executor detects conflicts per key. With the
//! three columns inside the rows, every Payment (43% of the mix, which
//! adds to W_YTD and D_YTD and reads W_NAME and D_NAME) conflicted with
//! every concurrent New-Order (45%, which reads W_TAX and D_TAX and
//! increments D_NEXT_O_ID) of its warehouse, although the two touch
//! different columns. Now Payment read-modify-writes the YTD records,
//! New-Order the D_NEXT_O_ID record, and both merely read the rows. No
//! other transaction reads a YTD record; Stock-Level reads the D_NEXT_O_ID
//! record (and not the district row). So neither of a Payment and a
//! New-Order writes a record the other reads or writes, unless both are
//! for the same customer (the customer row). Clause 1.6 allows such
//! vertical partitioning: it is invisible in the transactions' arguments
//! and results, and every transaction reads and writes the same logical
//! values as with the columns in their rows.
//!
//! ## W_YTD is a sharded counter
//!
//! W_YTD is stored as one record per (warehouse, district), and the
//! warehouse's W_YTD is the sum of its shards. The reason is again
//! per-key conflict detection: with W_YTD in one record per warehouse and
//! 5 warehouses, 43% of all transactions (every Payment) read-modify-wrote
//! one of only 5 records, so concurrent Payments of a warehouse conflicted
//! constantly. With a shard per district, Payment adds H_AMOUNT to the
//! shard of the district it pays in (W_ID, D_ID: the district whose D_YTD
//! it updates too), and two Payments of one warehouse write a common
//! record only when they pay in the same district, where they share the
//! D_YTD record anyway (or pay the same customer). In the simulator at
//! 20k tx/s with 5 warehouses the execution ratio fell from 1.23 to 1.07.
//!
//! Payment's arguments and results and the logical schema are unchanged:
//! no transaction returns W_YTD, the warehouse's W_YTD is the sum of its
//! shards, and it grows by H_AMOUNT per Payment as before. At load each
//! shard holds W_YTD at load divided by the districts
//! ([`load::W_YTD_SHARD_AT_LOAD`], which equals [`load::D_YTD_AT_LOAD`]),
//! so W_YTD at load is unchanged (300,000.00 at full scale). Clause 1.6
//! speaks of moving columns and rows, not of splitting one value into
//! addends; we count the shards as a representation of the one logical
//! value: Payment only adds to it, and [`check`], the one reader of the
//! whole value, always reads it as the sum.
//!
//! Consistency condition 1 (W_YTD = Σ D_YTD) now compares records that
//! Payment always updates together, a district's shard and its D_YTD, so
//! it holds by construction. [`check`] still checks it (W_YTD = Σ shards):
//! it catches a Payment that updates one and not the other, and
//! corruption. A warehouse must have exactly one shard per district; a
//! missing, corrupt or malformed shard is reported like the other
//! records.
//!
//! ```
//! use std::collections::BTreeMap;
//! use creek_workloads::tpcc::{self, Rng, TpccScale};
//!
//! let scale = TpccScale { warehouses: 1, districts_per_warehouse: 2,
//!     customers_per_district: 30, items: 100, orders_per_district: 30 };
//! let mut state = BTreeMap::new();
//! tpcc::load::populate(&scale, &mut Rng::new(1), 1, |k, v| {
//!     state.insert(k, v);
//! })?;
//! assert!(tpcc::check::consistency(&state).is_empty());
//! // W_YTD at load (2 × 30,000.00) is the sum of one shard per district.
//! let shard = |d| tpcc::rows::decode_ytd(&state[&tpcc::keys::warehouse_ytd_shard(1, d)]);
//! let w_ytd: Result<i64, _> = (1..=2).map(shard).sum();
//! assert_eq!(w_ytd, Ok(2 * tpcc::load::D_YTD_AT_LOAD));
//! # Ok::<(), tpcc::ScaleError>(())
//! ```

use bytes::Bytes;
use creek_exec::Abort;
use creek_procs::{Registry, Signature};
use creek_types::value::{decode_args_shared, Value};

pub mod check;
pub mod declared;
pub mod delivery;
pub mod generator;
pub mod keys;
pub mod load;
pub mod new_order;
pub mod order_status;
pub mod payment;
mod random;
pub mod rows;
pub mod stock_level;

pub use generator::{Generator, GeneratorConfig, TpccCall};
pub use random::{last_name, NuRandC, Rng, TpccRandom};

/// Name of the New-Order procedure.
pub const NEW_ORDER: &str = "tpcc.new_order";
/// Name of the Payment procedure.
pub const PAYMENT: &str = "tpcc.payment";
/// Name of the Order-Status procedure (read-only).
pub const ORDER_STATUS: &str = "tpcc.order_status";
/// Name of the Delivery procedure.
pub const DELIVERY: &str = "tpcc.delivery";
/// Name of the Stock-Level procedure (read-only).
pub const STOCK_LEVEL: &str = "tpcc.stock_level";
/// Name of the population procedure.
pub const LOAD: &str = "tpcc.load";

/// Register the TPC-C procedures.
pub fn register(registry: &mut Registry) {
    registry.register_fn(NEW_ORDER, false, new_order::check_args, new_order::run);
    registry.register_fn(PAYMENT, false, payment::check_args, payment::run);
    registry.register_fn(
        ORDER_STATUS,
        true,
        order_status::check_args,
        order_status::run,
    );
    registry.register_fn(DELIVERY, false, delivery::check_args, delivery::run);
    registry.register_fn(STOCK_LEVEL, true, stock_level::check_args, stock_level::run);
    registry.register_fn(LOAD, false, load::check_args, load::run);
    let input = [("input", "bytes")];
    for (name, summary) in [
        (NEW_ORDER, "TPC-C New-Order."),
        (PAYMENT, "TPC-C Payment."),
        (ORDER_STATUS, "TPC-C Order-Status (read-only)."),
        (DELIVERY, "TPC-C Delivery."),
        (STOCK_LEVEL, "TPC-C Stock-Level (read-only)."),
        (
            LOAD,
            "Populate TPC-C tables (one slice of the initial load).",
        ),
    ] {
        let summary = format!("{summary} The input is encoded by creek-workloads' tpcc module.");
        registry.describe(
            name,
            Signature::new(&input, "list: the transaction's result", &summary),
        );
    }
}

/// The database's size. [`Default`] is the specification's cardinalities
/// per warehouse; tests shrink them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TpccScale {
    /// Number of warehouses (W).
    pub warehouses: u16,
    /// Districts per warehouse (10).
    pub districts_per_warehouse: u8,
    /// Customers per district (3,000).
    pub customers_per_district: u32,
    /// Items (100,000).
    pub items: u32,
    /// Initial orders per district (3,000); the last 30% are undelivered.
    pub orders_per_district: u32,
}

impl Default for TpccScale {
    fn default() -> Self {
        TpccScale {
            warehouses: 1,
            districts_per_warehouse: 10,
            customers_per_district: 3000,
            items: 100_000,
            orders_per_district: 3000,
        }
    }
}

/// Why a [`TpccScale`] is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScaleError {
    /// A cardinality is zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// Fewer than 15 items cannot fill an order.
    #[error("{field} must be at least {min}")]
    TooSmall {
        /// The field.
        field: &'static str,
        /// Its minimum.
        min: u32,
    },
    /// A terminal's warehouse or district is not in the database.
    #[error("terminal {what} {id} is outside 1..={max}")]
    TerminalOutOfRange {
        /// `home_w_id` or `stock_level_d_id`.
        what: &'static str,
        /// The id given.
        id: u32,
        /// The largest valid id.
        max: u32,
    },
}

impl TpccScale {
    /// Check the scale is usable.
    pub fn validate(&self) -> Result<(), ScaleError> {
        if self.warehouses == 0 {
            return Err(ScaleError::Zero("warehouses"));
        }
        if self.districts_per_warehouse == 0 {
            return Err(ScaleError::Zero("districts_per_warehouse"));
        }
        if self.customers_per_district == 0 {
            return Err(ScaleError::Zero("customers_per_district"));
        }
        if self.orders_per_district == 0 {
            return Err(ScaleError::Zero("orders_per_district"));
        }
        if self.items < 15 {
            return Err(ScaleError::TooSmall {
                field: "items",
                min: 15,
            });
        }
        Ok(())
    }

    /// Orders below this id are delivered at load (2101 for 3000 orders).
    pub fn first_undelivered(&self) -> u32 {
        self.orders_per_district - self.orders_per_district * 3 / 10 + 1
    }
}

/// A customer chosen by id or by last name (clause 2.5.1.2, 2.6.1.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CustomerSelector {
    /// C_ID.
    Id(u32),
    /// C_LAST: the middle customer of those with this name, by first name.
    LastName(Bytes),
}

impl CustomerSelector {
    fn to_value(&self) -> Value {
        match self {
            CustomerSelector::Id(c) => Value::Int(i64::from(*c)),
            CustomerSelector::LastName(l) => Value::Bytes(l.clone()),
        }
    }

    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Int(c) => Ok(CustomerSelector::Id(
                u32::try_from(*c).map_err(|_| format!("customer id {c} out of range"))?,
            )),
            Value::Bytes(l) if l.len() <= 16 => Ok(CustomerSelector::LastName(l.clone())),
            other => Err(format!(
                "customer must be an id or a last name of at most 16 bytes, got {}",
                other.kind()
            )),
        }
    }
}

/// A cursor over decoded arguments with typed, range-checked accessors.
pub(crate) struct Args {
    proc_name: &'static str,
    items: std::vec::IntoIter<Value>,
    index: usize,
}

impl Args {
    /// Decode `raw`, which must hold exactly `count` arguments.
    pub(crate) fn new(proc_name: &'static str, raw: &Bytes, count: usize) -> Result<Self, String> {
        let items = decode_args_shared(raw).map_err(|e| format!("malformed arguments: {e}"))?;
        if items.len() != count {
            return Err(format!(
                "{proc_name} expects {count} arguments, got {}",
                items.len()
            ));
        }
        Ok(Args {
            proc_name,
            items: items.into_iter(),
            index: 0,
        })
    }

    pub(crate) fn value(&mut self) -> Result<Value, String> {
        self.index += 1;
        self.items
            .next()
            .ok_or_else(|| format!("{}: missing argument {}", self.proc_name, self.index))
    }

    /// An integer in `lo..=hi`.
    pub(crate) fn int(&mut self, what: &str, lo: i64, hi: i64) -> Result<i64, String> {
        let v = self.value()?;
        int_in(self.proc_name, what, &v, lo, hi)
    }
}

pub(crate) fn int_in(
    proc_name: &str,
    what: &str,
    v: &Value,
    lo: i64,
    hi: i64,
) -> Result<i64, String> {
    match v.as_int() {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        Some(n) => Err(format!("{proc_name}: {what} {n} is outside {lo}..={hi}")),
        None => Err(format!(
            "{proc_name}: {what} must be an int, got {}",
            v.kind()
        )),
    }
}

/// The largest warehouse id.
pub(crate) const W_MAX: i64 = u16::MAX as i64;
/// The largest district id.
pub(crate) const D_MAX: i64 = u8::MAX as i64;
/// The largest customer, order or item id.
pub(crate) const ID_MAX: i64 = u32::MAX as i64;

/// Read and decode a row that must exist.
pub(crate) fn read_row<T>(
    txn: &mut creek_exec::Txn<'_>,
    key: &Bytes,
    what: &str,
    decode: fn(&Bytes) -> Result<T, Abort>,
) -> Result<T, Abort> {
    match txn.get(key) {
        Some(raw) => decode(&raw),
        None => Err(Abort::new(format!("{what} not found"))),
    }
}

/// The customer a by-last-name selection picks from the name's index
/// record: the one at position ceil(n/2) of those sorted by first name.
pub fn customer_of_name_index(raw: &Bytes) -> Result<u32, Abort> {
    let entries = rows::decode_name_index(raw)?;
    let n = entries.len();
    // Position ceil(n/2), 1-based, is index (n - 1) / 2.
    entries
        .get(n.saturating_sub(1) / 2)
        .map(|(_, c)| *c)
        .ok_or_else(|| Abort::new("empty customer name index"))
}

/// Resolve a customer selector to a C_ID (clause 2.5.2.2: by last name, the
/// customer at position ceil(n/2) of those sorted by first name).
pub(crate) fn resolve_customer(
    txn: &mut creek_exec::Txn<'_>,
    w: u16,
    d: u8,
    selector: &CustomerSelector,
) -> Result<u32, Abort> {
    match selector {
        CustomerSelector::Id(c) => Ok(*c),
        CustomerSelector::LastName(last) => {
            let key = keys::customer_by_last(w, d, last);
            let raw = txn.get(&key).ok_or_else(|| {
                Abort::new(format!(
                    "no customer named {} in district {d} of warehouse {w}",
                    String::from_utf8_lossy(last)
                ))
            })?;
            customer_of_name_index(&raw)
        }
    }
}
