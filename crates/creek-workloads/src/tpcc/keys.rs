//! Where each TPC-C row lives in Creek's key-value state.
//!
//! Every key starts with `b't'` and a one-byte table tag, then the row's
//! primary key as big-endian integers, so keys of one table sort by primary
//! key and rows of one district are contiguous. Creek's transactions have
//! no range scan, so the range-like accesses of the transactions go through
//! index records the procedures maintain themselves. Upper-case tags are
//! the tables; lower-case tags are records outside the logical schema:
//! the three columns stored apart from their rows, W_YTD (as one shard
//! per district), D_YTD and D_NEXT_O_ID (see
//! [Physical layout](super#physical-layout)), and the indexes.
//!
//! | tag   | record                         | key after the tag          |
//! |-------|--------------------------------|----------------------------|
//! | `W`   | warehouse (without W_YTD)      | `w:u16`                    |
//! | `D`   | district (without D_YTD, D_NEXT_O_ID) | `w:u16 d:u8`        |
//! | `C`   | customer                       | `w:u16 d:u8 c:u32`         |
//! | `H`   | history (keyed by the payment) | `w:u16 d:u8 c:u32 n:u32`   |
//! | `N`   | new-order                      | `w:u16 d:u8 o:u32`         |
//! | `O`   | order                          | `w:u16 d:u8 o:u32`         |
//! | `L`   | order line                     | `w:u16 d:u8 o:u32 ol:u8`   |
//! | `I`   | item                           | `i:u32`                    |
//! | `S`   | stock                          | `w:u16 i:u32`              |
//! | `w`   | W_YTD shard of a district (Payment) | `w:u16 d:u8`          |
//! | `d`   | D_YTD of a district (Payment)  | `w:u16 d:u8`               |
//! | `x`   | D_NEXT_O_ID of a district (New-Order) | `w:u16 d:u8`        |
//! | `q`   | index: oldest new-order of a district (Delivery)     | `w:u16 d:u8` |
//! | `o`   | index: last order of a customer (Order-Status)       | `w:u16 d:u8 c:u32` |
//! | `n`   | index: customers with a last name, by first name (Payment, Order-Status) | `w:u16 d:u8 last` |
//!
//! History has no primary key in the specification; its key uses the
//! customer's payment count, which makes it unique and deterministic.
//!
//! A warehouse's W_YTD is the sum of its `w` records, one per district
//! (a sharded counter, see [Physical layout](super#physical-layout)): the
//! shard of district `d` grows with the Payments made in `d`, the
//! same Payments that add to its D_YTD. A `w` key without the district
//! (`w:u16` alone) is malformed.
//!
//! Keys sort by tag first (all upper-case tags before all lower-case
//! ones), which [`check`](super::check) relies on for order lines (`L`)
//! and new-orders (`N`) to arrive before their order (`O`). The records of
//! the columns stored apart (`w`, `d`, `x`) sort after every table; the
//! check only tallies them, so where they sort does not matter to it.

use bytes::{BufMut, Bytes, BytesMut};

/// First byte of every TPC-C key.
pub const PREFIX: u8 = b't';

/// Table tags (the second key byte).
pub mod tag {
    /// Warehouse.
    pub const WAREHOUSE: u8 = b'W';
    /// District.
    pub const DISTRICT: u8 = b'D';
    /// Customer.
    pub const CUSTOMER: u8 = b'C';
    /// History.
    pub const HISTORY: u8 = b'H';
    /// New-order.
    pub const NEW_ORDER: u8 = b'N';
    /// Order.
    pub const ORDER: u8 = b'O';
    /// Order line.
    pub const ORDER_LINE: u8 = b'L';
    /// Item.
    pub const ITEM: u8 = b'I';
    /// Stock.
    pub const STOCK: u8 = b'S';
    /// A shard of a warehouse's W_YTD, one per district, stored apart from
    /// the warehouse row.
    pub const WAREHOUSE_YTD_SHARD: u8 = b'w';
    /// D_YTD of a district, stored apart from the district row.
    pub const DISTRICT_YTD: u8 = b'd';
    /// D_NEXT_O_ID of a district, stored apart from the district row
    /// (`x` for ne*x*t: `n` is the by-last-name index).
    pub const DISTRICT_NEXT_O_ID: u8 = b'x';
    /// Index: the oldest undelivered order id of a district.
    pub const NEW_ORDER_HEAD: u8 = b'q';
    /// Index: the last order id of a customer.
    pub const CUSTOMER_LAST_ORDER: u8 = b'o';
    /// Index: customers of a district with one last name.
    pub const CUSTOMER_BY_LAST: u8 = b'n';
}

fn start(tag: u8, cap: usize) -> BytesMut {
    let mut k = BytesMut::with_capacity(2 + cap);
    k.put_u8(PREFIX);
    k.put_u8(tag);
    k
}

fn district_key(tag: u8, w: u16, d: u8, extra: usize) -> BytesMut {
    let mut k = start(tag, 3 + extra);
    k.put_u16(w);
    k.put_u8(d);
    k
}

/// The prefix of district `d` of warehouse `w`'s rows of table `tag`: the
/// new orders, orders or order lines a New-Order creates under the order
/// id it draws as it runs.
pub fn district_rows(tag: u8, w: u16, d: u8) -> Bytes {
    district_key(tag, w, d, 0).freeze()
}

/// The prefix of customer `c`'s history rows (a Payment adds one keyed by
/// the payment count it reads).
pub fn customer_history(w: u16, d: u8, c: u32) -> Bytes {
    let mut k = district_key(tag::HISTORY, w, d, 4);
    k.put_u32(c);
    k.freeze()
}

/// Warehouse `w`.
pub fn warehouse(w: u16) -> Bytes {
    let mut k = start(tag::WAREHOUSE, 2);
    k.put_u16(w);
    k.freeze()
}

/// District `d` of warehouse `w`.
pub fn district(w: u16, d: u8) -> Bytes {
    district_key(tag::DISTRICT, w, d, 0).freeze()
}

/// The shard of warehouse `w`'s W_YTD that Payments in district `d` add
/// to; W_YTD is the sum of the warehouse's shards.
pub fn warehouse_ytd_shard(w: u16, d: u8) -> Bytes {
    district_key(tag::WAREHOUSE_YTD_SHARD, w, d, 0).freeze()
}

/// D_YTD of district `d` of warehouse `w`.
pub fn district_ytd(w: u16, d: u8) -> Bytes {
    district_key(tag::DISTRICT_YTD, w, d, 0).freeze()
}

/// D_NEXT_O_ID of district `d` of warehouse `w`.
pub fn district_next_o_id(w: u16, d: u8) -> Bytes {
    district_key(tag::DISTRICT_NEXT_O_ID, w, d, 0).freeze()
}

/// Customer `c`.
pub fn customer(w: u16, d: u8, c: u32) -> Bytes {
    let mut k = district_key(tag::CUSTOMER, w, d, 4);
    k.put_u32(c);
    k.freeze()
}

/// The history row of customer `c`'s payment number `n`.
pub fn history(w: u16, d: u8, c: u32, n: u32) -> Bytes {
    let mut k = district_key(tag::HISTORY, w, d, 8);
    k.put_u32(c);
    k.put_u32(n);
    k.freeze()
}

/// New-order row of order `o`.
pub fn new_order(w: u16, d: u8, o: u32) -> Bytes {
    let mut k = district_key(tag::NEW_ORDER, w, d, 4);
    k.put_u32(o);
    k.freeze()
}

/// Order `o`.
pub fn order(w: u16, d: u8, o: u32) -> Bytes {
    let mut k = district_key(tag::ORDER, w, d, 4);
    k.put_u32(o);
    k.freeze()
}

/// Line `ol` (1-based) of order `o`.
pub fn order_line(w: u16, d: u8, o: u32, ol: u8) -> Bytes {
    let mut k = district_key(tag::ORDER_LINE, w, d, 5);
    k.put_u32(o);
    k.put_u8(ol);
    k.freeze()
}

/// Item `i`.
pub fn item(i: u32) -> Bytes {
    let mut k = start(tag::ITEM, 4);
    k.put_u32(i);
    k.freeze()
}

/// Stock of item `i` in warehouse `w`.
pub fn stock(w: u16, i: u32) -> Bytes {
    let mut k = start(tag::STOCK, 6);
    k.put_u16(w);
    k.put_u32(i);
    k.freeze()
}

/// The oldest-new-order index of a district.
pub fn new_order_head(w: u16, d: u8) -> Bytes {
    district_key(tag::NEW_ORDER_HEAD, w, d, 0).freeze()
}

/// The last-order index of customer `c`.
pub fn customer_last_order(w: u16, d: u8, c: u32) -> Bytes {
    let mut k = district_key(tag::CUSTOMER_LAST_ORDER, w, d, 4);
    k.put_u32(c);
    k.freeze()
}

/// The by-last-name index of a district for `last`.
pub fn customer_by_last(w: u16, d: u8, last: &[u8]) -> Bytes {
    let mut k = district_key(tag::CUSTOMER_BY_LAST, w, d, last.len());
    k.put_slice(last);
    k.freeze()
}

/// The warehouse whose data `key` is: `None` for an item (the one table
/// every warehouse shares, which a sharded cluster keeps on every shard)
/// and for keys of other workloads.
pub fn warehouse_of(key: &[u8]) -> Option<u16> {
    parse(key)
        .filter(|p| p.tag != tag::ITEM)
        .and_then(|p| p.warehouse())
}

/// A key split into its table tag and the big-endian fields after it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parsed<'a> {
    pub tag: u8,
    pub rest: &'a [u8],
}

/// Split a TPC-C key; `None` for keys of other workloads.
pub(crate) fn parse(key: &[u8]) -> Option<Parsed<'_>> {
    match key {
        [PREFIX, tag, rest @ ..] => Some(Parsed { tag: *tag, rest }),
        _ => None,
    }
}

impl Parsed<'_> {
    /// `(w, d)` of a district-scoped key.
    pub fn district(&self) -> Option<(u16, u8)> {
        match self.rest {
            [w0, w1, d, ..] => Some((u16::from_be_bytes([*w0, *w1]), *d)),
            _ => None,
        }
    }

    /// The `u32` at byte `at` of the fields.
    pub fn u32_at(&self, at: usize) -> Option<u32> {
        let b = self.rest.get(at..at + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The warehouse id of a warehouse or district-scoped key.
    pub fn warehouse(&self) -> Option<u16> {
        match self.rest {
            [w0, w1, ..] => Some(u16::from_be_bytes([*w0, *w1])),
            _ => None,
        }
    }
}
