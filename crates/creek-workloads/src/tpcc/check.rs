//! The consistency conditions of clause 3.3.2 that apply to our data,
//! checked over a committed state.
//!
//! 1. W_YTD = Σ D_YTD of the warehouse's districts.
//! 2. D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID) of the district (the
//!    new-order part only while the district has new-orders).
//! 3. The number of new-order rows equals max(NO_O_ID) − min(NO_O_ID) + 1.
//! 4. Σ O_OL_CNT = the number of order lines of the district.
//!
//! and one of our own: the new-order head index names min(NO_O_ID), or
//! D_NEXT_O_ID once everything is delivered.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::keys::{self, tag};
use super::rows::{self, District, Order, Warehouse};

#[derive(Default)]
struct DistrictTally {
    row: Option<(i64, i64)>,
    max_o_id: Option<u32>,
    ol_cnt_sum: i64,
    order_lines: i64,
    new_orders: Vec<u32>,
    head: Option<u32>,
}

/// Every violated condition, one line each; empty when the state is
/// consistent.
pub fn consistency(state: &BTreeMap<Bytes, Bytes>) -> Vec<String> {
    let mut out = Vec::new();
    let mut warehouses: BTreeMap<u16, i64> = BTreeMap::new();
    let mut districts: BTreeMap<(u16, u8), DistrictTally> = BTreeMap::new();
    let start = Bytes::from_static(&[keys::PREFIX]);
    for (key, value) in state.range(start..) {
        let Some(p) = keys::parse(key) else { break };
        let scope = p.district();
        if scope.is_none() && p.tag != tag::WAREHOUSE && p.tag != tag::ITEM && p.tag != tag::STOCK {
            out.push(format!("malformed key {key:?}"));
            continue;
        }
        match p.tag {
            tag::WAREHOUSE => match (p.warehouse(), Warehouse::decode(value)) {
                (Some(w), Ok(row)) => {
                    warehouses.insert(w, row.ytd);
                }
                _ => out.push(format!("corrupt warehouse {key:?}")),
            },
            tag::DISTRICT => match District::decode(value) {
                Ok(row) => {
                    if let Some(t) = scope.map(|wd| districts.entry(wd).or_default()) {
                        t.row = Some((row.ytd, row.next_o_id));
                    }
                }
                Err(e) => out.push(format!("{e} at {key:?}")),
            },
            tag::ORDER => {
                let o_id = p.u32_at(3);
                match (
                    Order::decode(value),
                    scope.map(|wd| districts.entry(wd).or_default()),
                ) {
                    (Ok(row), Some(t)) => {
                        t.max_o_id = t.max_o_id.max(o_id);
                        t.ol_cnt_sum += row.ol_cnt;
                    }
                    (Err(e), _) => out.push(format!("{e} at {key:?}")),
                    _ => {}
                }
            }
            tag::ORDER_LINE => {
                if let Some(t) = scope.map(|wd| districts.entry(wd).or_default()) {
                    t.order_lines += 1;
                }
            }
            tag::NEW_ORDER => {
                let o_id = p.u32_at(3);
                if let (Some(t), Some(o)) = (scope.map(|wd| districts.entry(wd).or_default()), o_id)
                {
                    t.new_orders.push(o);
                }
            }
            tag::NEW_ORDER_HEAD => match rows::decode_id(value) {
                Ok(h) => {
                    if let Some(t) = scope.map(|wd| districts.entry(wd).or_default()) {
                        t.head = Some(h);
                    }
                }
                Err(e) => out.push(format!("{e} at {key:?}")),
            },
            _ => {}
        }
    }

    let mut district_ytd: BTreeMap<u16, i64> = BTreeMap::new();
    for ((w, d), t) in &districts {
        let Some((ytd, next_o_id)) = t.row else {
            out.push(format!(
                "warehouse {w} district {d}: rows without a district"
            ));
            continue;
        };
        *district_ytd.entry(*w).or_default() += ytd;
        let max_o = t.max_o_id.map_or(0, i64::from);
        if next_o_id - 1 != max_o {
            out.push(format!(
                "warehouse {w} district {d}: D_NEXT_O_ID - 1 = {} but max(O_ID) = {max_o}",
                next_o_id - 1
            ));
        }
        // Keys sort by O_ID, so the new-orders arrive in ascending order.
        if let (Some(&min_no), Some(&max_no)) = (t.new_orders.first(), t.new_orders.last()) {
            if i64::from(max_no) != next_o_id - 1 {
                out.push(format!(
                    "warehouse {w} district {d}: D_NEXT_O_ID - 1 = {} but max(NO_O_ID) = {max_no}",
                    next_o_id - 1
                ));
            }
            let span = i64::from(max_no) - i64::from(min_no) + 1;
            if t.new_orders.len() as i64 != span {
                out.push(format!(
                    "warehouse {w} district {d}: {} new-order rows but max - min + 1 = {span}",
                    t.new_orders.len()
                ));
            }
            if t.head != Some(min_no) {
                out.push(format!(
                    "warehouse {w} district {d}: new-order head {:?} but min(NO_O_ID) = {min_no}",
                    t.head
                ));
            }
        } else if t.head.map(i64::from) != Some(next_o_id) {
            out.push(format!(
                "warehouse {w} district {d}: no new-orders but head {:?} != D_NEXT_O_ID {next_o_id}",
                t.head
            ));
        }
        if t.ol_cnt_sum != t.order_lines {
            out.push(format!(
                "warehouse {w} district {d}: sum(O_OL_CNT) = {} but {} order lines",
                t.ol_cnt_sum, t.order_lines
            ));
        }
    }
    for (w, ytd) in &warehouses {
        let sum = district_ytd.get(w).copied().unwrap_or(0);
        if *ytd != sum {
            out.push(format!(
                "warehouse {w}: W_YTD = {ytd} but sum(D_YTD) = {sum}"
            ));
        }
    }
    out
}
