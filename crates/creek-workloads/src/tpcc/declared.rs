//! The records a New-Order or Payment touches, known before it runs: what
//! it declares when it runs as an operation across shards
//! (docs/cross-shard.md), each with the warehouse whose shard owns it.
//!
//! Most are exact keys. The rows a New-Order creates (its order, new-order
//! and order lines) are keyed by the order id it reads from D_NEXT_O_ID as
//! it runs, and Payment's history row by the customer's payment count, so
//! those are declared as write-only prefixes of their district (or
//! customer). A Payment by last name declares the customer its name picks,
//! which the caller looks up beforehand in the name's index record (a
//! reconnaissance read, as Calvin does for such keys; TPC-C never renames a
//! customer, so the lookup stays right, and were it wrong the transaction
//! would abort naming the customer's key, the same on every shard). The
//! items, a read-only table every shard keeps, are declared with the home
//! warehouse.

use bytes::Bytes;
use creek_types::ProcCall;

use super::{keys, new_order, payment, CustomerSelector, NEW_ORDER, PAYMENT};

/// What one transaction declares, each record with the warehouse owning it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Declared {
    /// The warehouse whose terminal runs it (its home).
    pub home: u16,
    /// Keys it may read and write.
    pub keys: Vec<(u16, Bytes)>,
    /// Prefixes it may only write under.
    pub prefixes: Vec<(u16, Bytes)>,
}

/// What `call` declares; `None` for the transactions that never leave
/// their home warehouse (Order-Status, Delivery, Stock-Level), malformed
/// arguments, or a customer `customer_by_name` cannot name. The argument
/// looks up the customer a name's index record picks (its key:
/// [`keys::customer_by_last`]).
pub fn declared(
    call: &ProcCall,
    customer_by_name: impl Fn(&Bytes) -> Option<u32>,
) -> Option<Declared> {
    match call.name.as_ref() {
        NEW_ORDER => {
            let input = new_order::Input::decode(&call.args).ok()?;
            let (w, d) = (input.w_id, input.d_id);
            let mut keys = vec![
                (w, keys::warehouse(w)),
                (w, keys::district(w, d)),
                (w, keys::district_next_o_id(w, d)),
                (w, keys::customer(w, d, input.c_id)),
                (w, keys::customer_last_order(w, d, input.c_id)),
            ];
            for line in &input.lines {
                keys.push((w, keys::item(line.i_id)));
                keys.push((line.supply_w_id, keys::stock(line.supply_w_id, line.i_id)));
            }
            let prefixes = [
                keys::tag::ORDER,
                keys::tag::NEW_ORDER,
                keys::tag::ORDER_LINE,
            ]
            .into_iter()
            .map(|tag| (w, keys::district_rows(tag, w, d)))
            .collect();
            Some(Declared {
                home: w,
                keys,
                prefixes,
            })
        }
        PAYMENT => {
            let input = payment::Input::decode(&call.args).ok()?;
            let (w, d, cw, cd) = (input.w_id, input.d_id, input.c_w_id, input.c_d_id);
            let mut keys = vec![
                (w, keys::warehouse(w)),
                (w, keys::warehouse_ytd_shard(w, d)),
                (w, keys::district(w, d)),
                (w, keys::district_ytd(w, d)),
            ];
            let c = match &input.customer {
                CustomerSelector::Id(c) => *c,
                CustomerSelector::LastName(last) => {
                    let index = keys::customer_by_last(cw, cd, last);
                    let c = customer_by_name(&index)?;
                    keys.push((cw, index));
                    c
                }
            };
            keys.push((cw, keys::customer(cw, cd, c)));
            Some(Declared {
                home: w,
                keys,
                prefixes: vec![(cw, keys::customer_history(cw, cd, c))],
            })
        }
        _ => None,
    }
}
