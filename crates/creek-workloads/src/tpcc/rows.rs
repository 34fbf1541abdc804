//! The TPC-C rows as stored values.
//!
//! A row is one encoded [`Value::List`] of its fields in declaration order.
//! Money is in cents and rates (tax, discount) in units of 1/10000, so all
//! arithmetic is exact integer arithmetic and identical on every replica.
//! Timestamps are whatever the caller passed in (the procedures never read
//! a clock); `0` stands for the specification's null carrier and delivery
//! date.
//!
//! W_YTD, D_YTD and D_NEXT_O_ID are not fields of [`Warehouse`] and
//! [`District`]: they are stored in records of their own, W_YTD as one
//! shard per district under
//! [`keys::warehouse_ytd_shard`](super::keys::warehouse_ytd_shard) and
//! D_YTD under [`keys::district_ytd`](super::keys::district_ytd) (both
//! [`encode_ytd`]), and D_NEXT_O_ID under
//! [`keys::district_next_o_id`](super::keys::district_next_o_id)
//! ([`encode_next_o_id`]); see [Physical layout](super#physical-layout).

use bytes::Bytes;
use creek_exec::Abort;
use creek_types::value::Value;

/// A field type a row can hold.
trait Field: Sized {
    fn to_value(&self) -> Value;
    fn from_value(v: Value) -> Option<Self>;
}

impl Field for i64 {
    fn to_value(&self) -> Value {
        Value::Int(*self)
    }
    fn from_value(v: Value) -> Option<Self> {
        v.as_int()
    }
}

impl Field for Bytes {
    fn to_value(&self) -> Value {
        Value::Bytes(self.clone())
    }
    fn from_value(v: Value) -> Option<Self> {
        match v {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }
}

impl Field for Vec<Bytes> {
    fn to_value(&self) -> Value {
        Value::List(self.iter().cloned().map(Value::Bytes).collect())
    }
    fn from_value(v: Value) -> Option<Self> {
        match v {
            Value::List(items) => items.into_iter().map(Bytes::from_value).collect(),
            _ => None,
        }
    }
}

macro_rules! row {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)*
        }

        impl $name {
            /// The stored encoding.
            pub fn encode(&self) -> Bytes {
                Value::List(vec![$(Field::to_value(&self.$f)),*]).encode()
            }

            /// Decode a stored row; a malformed row is a deterministic abort.
            pub fn decode(raw: &Bytes) -> Result<Self, Abort> {
                let bad = || Abort::new(concat!("corrupt ", stringify!($name), " row"));
                let Ok(Value::List(items)) = Value::decode_shared(raw) else {
                    return Err(bad());
                };
                let mut it = items.into_iter();
                let row = $name {
                    $($f: it.next().and_then(Field::from_value).ok_or_else(bad)?,)*
                };
                if it.next().is_some() {
                    return Err(bad());
                }
                Ok(row)
            }
        }
    };
}

row! {
    /// A WAREHOUSE row, without W_YTD (the sum of its shards, records of
    /// their own: [`encode_ytd`]).
    Warehouse {
        /// W_NAME.
        name: Bytes,
        /// W_STREET_1, W_STREET_2, W_CITY, W_STATE, W_ZIP.
        address: Vec<Bytes>,
        /// W_TAX in 1/10000.
        tax: i64,
    }
}

row! {
    /// A DISTRICT row, without D_YTD and D_NEXT_O_ID (records of their
    /// own: [`encode_ytd`], [`encode_next_o_id`]).
    District {
        /// D_NAME.
        name: Bytes,
        /// D_STREET_1, D_STREET_2, D_CITY, D_STATE, D_ZIP.
        address: Vec<Bytes>,
        /// D_TAX in 1/10000.
        tax: i64,
    }
}

row! {
    /// A CUSTOMER row.
    Customer {
        /// C_FIRST.
        first: Bytes,
        /// C_MIDDLE.
        middle: Bytes,
        /// C_LAST.
        last: Bytes,
        /// C_STREET_1, C_STREET_2, C_CITY, C_STATE, C_ZIP.
        address: Vec<Bytes>,
        /// C_PHONE.
        phone: Bytes,
        /// C_SINCE.
        since: i64,
        /// C_CREDIT: `GC` or `BC`.
        credit: Bytes,
        /// C_CREDIT_LIM in cents.
        credit_lim: i64,
        /// C_DISCOUNT in 1/10000.
        discount: i64,
        /// C_BALANCE in cents.
        balance: i64,
        /// C_YTD_PAYMENT in cents.
        ytd_payment: i64,
        /// C_PAYMENT_CNT.
        payment_cnt: i64,
        /// C_DELIVERY_CNT.
        delivery_cnt: i64,
        /// C_DATA.
        data: Bytes,
    }
}

row! {
    /// A HISTORY row.
    History {
        /// H_C_ID.
        c_id: i64,
        /// H_C_D_ID.
        c_d_id: i64,
        /// H_C_W_ID.
        c_w_id: i64,
        /// H_D_ID.
        d_id: i64,
        /// H_W_ID.
        w_id: i64,
        /// H_DATE.
        date: i64,
        /// H_AMOUNT in cents.
        amount: i64,
        /// H_DATA.
        data: Bytes,
    }
}

row! {
    /// An ORDER row.
    Order {
        /// O_C_ID.
        c_id: i64,
        /// O_ENTRY_D.
        entry_d: i64,
        /// O_CARRIER_ID, 0 for null.
        carrier_id: i64,
        /// O_OL_CNT.
        ol_cnt: i64,
        /// O_ALL_LOCAL: 1 when every line is supplied by the home warehouse.
        all_local: i64,
    }
}

row! {
    /// An ORDER-LINE row.
    OrderLine {
        /// OL_I_ID.
        i_id: i64,
        /// OL_SUPPLY_W_ID.
        supply_w_id: i64,
        /// OL_DELIVERY_D, 0 for null.
        delivery_d: i64,
        /// OL_QUANTITY.
        quantity: i64,
        /// OL_AMOUNT in cents.
        amount: i64,
        /// OL_DIST_INFO.
        dist_info: Bytes,
    }
}

row! {
    /// An ITEM row.
    Item {
        /// I_IM_ID.
        im_id: i64,
        /// I_NAME.
        name: Bytes,
        /// I_PRICE in cents.
        price: i64,
        /// I_DATA.
        data: Bytes,
    }
}

row! {
    /// A STOCK row.
    Stock {
        /// S_QUANTITY.
        quantity: i64,
        /// S_DIST_01 … S_DIST_10.
        dists: Vec<Bytes>,
        /// S_YTD.
        ytd: i64,
        /// S_ORDER_CNT.
        order_cnt: i64,
        /// S_REMOTE_CNT.
        remote_cnt: i64,
        /// S_DATA.
        data: Bytes,
    }
}

/// The by-last-name index record: `(C_FIRST, C_ID)` of every customer of a
/// district with one last name, sorted by first name (then id).
pub fn encode_name_index(entries: &[(Bytes, u32)]) -> Bytes {
    Value::List(
        entries
            .iter()
            .map(|(first, c)| {
                Value::List(vec![Value::Bytes(first.clone()), Value::Int(i64::from(*c))])
            })
            .collect(),
    )
    .encode()
}

/// Decode [`encode_name_index`].
pub fn decode_name_index(raw: &Bytes) -> Result<Vec<(Bytes, u32)>, Abort> {
    let bad = || Abort::new("corrupt customer name index");
    let Ok(Value::List(items)) = Value::decode_shared(raw) else {
        return Err(bad());
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::List(pair) => match pair.as_slice() {
                [Value::Bytes(first), Value::Int(c)] => {
                    Ok((first.clone(), u32::try_from(*c).map_err(|_| bad())?))
                }
                _ => Err(bad()),
            },
            _ => Err(bad()),
        })
        .collect()
}

/// An index record holding one id (oldest new-order, last order).
pub fn encode_id(id: u32) -> Bytes {
    Value::Int(i64::from(id)).encode()
}

/// Decode [`encode_id`].
pub fn decode_id(raw: &Bytes) -> Result<u32, Abort> {
    Value::decode(raw)
        .ok()
        .and_then(|v| v.as_int())
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| Abort::new("corrupt id index"))
}

/// A W_YTD shard or D_YTD record: the year-to-date amount in cents.
pub fn encode_ytd(cents: i64) -> Bytes {
    Value::Int(cents).encode()
}

/// Decode [`encode_ytd`].
pub fn decode_ytd(raw: &Bytes) -> Result<i64, Abort> {
    Value::decode(raw)
        .ok()
        .and_then(|v| v.as_int())
        .ok_or_else(|| Abort::new("corrupt YTD record"))
}

/// A D_NEXT_O_ID record: the id the district's next order gets. Encoded
/// like [`encode_id`].
pub fn encode_next_o_id(o_id: u32) -> Bytes {
    encode_id(o_id)
}

/// Decode [`encode_next_o_id`].
pub fn decode_next_o_id(raw: &Bytes) -> Result<u32, Abort> {
    decode_id(raw).map_err(|_| Abort::new("corrupt D_NEXT_O_ID record"))
}

/// The value of a new-order row (the key says everything).
pub fn new_order_value() -> Bytes {
    Value::Nil.encode()
}
