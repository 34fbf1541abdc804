//! The Creek client API: the code `tonic` generates from `proto/creek.proto`
//! (package `creek.v1`), and conversions between the wire [`pb::Value`] and
//! the executor's [`Value`].
#![deny(missing_docs)]

use creek_types::value::Value;

pub mod native;

/// Generated messages and services of `creek.v1`.
#[allow(missing_docs, clippy::all, clippy::unwrap_used)]
pub mod pb {
    tonic::include_proto!("creek.v1");
}

/// How deep a wire value may nest (the executor's own bound).
pub const MAX_DEPTH: usize = creek_types::value::MAX_DEPTH;

/// Why a wire value is not a valid [`Value`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueError {
    /// A value with no kind set.
    Empty,
    /// Lists nested deeper than [`MAX_DEPTH`].
    TooDeep,
}

impl std::fmt::Display for ValueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueError::Empty => f.write_str("a value has no kind set"),
            ValueError::TooDeep => write!(f, "values nest deeper than {MAX_DEPTH}"),
        }
    }
}

impl std::error::Error for ValueError {}

/// The wire form of a value.
pub fn to_wire(v: &Value) -> pb::Value {
    use pb::value::Kind;
    let kind = match v {
        Value::Nil => Kind::Nil(pb::Nil {}),
        Value::Bool(b) => Kind::Bool(*b),
        Value::Int(i) => Kind::Int(*i),
        Value::Bytes(b) => Kind::Bytes(b.clone()),
        Value::List(items) => Kind::List(pb::ValueList {
            items: items.iter().map(to_wire).collect(),
        }),
    };
    pb::Value { kind: Some(kind) }
}

/// A value from the wire.
pub fn from_wire(v: &pb::Value) -> Result<Value, ValueError> {
    from_wire_at(v, 0)
}

fn from_wire_at(v: &pb::Value, depth: usize) -> Result<Value, ValueError> {
    use pb::value::Kind;
    Ok(match v.kind.as_ref().ok_or(ValueError::Empty)? {
        Kind::Nil(_) => Value::Nil,
        Kind::Bool(b) => Value::Bool(*b),
        Kind::Int(i) => Value::Int(*i),
        Kind::Bytes(b) => Value::Bytes(b.clone()),
        Kind::List(l) => {
            if depth >= MAX_DEPTH {
                return Err(ValueError::TooDeep);
            }
            Value::List(
                l.items
                    .iter()
                    .map(|i| from_wire_at(i, depth + 1))
                    .collect::<Result<_, _>>()?,
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn values_round_trip() {
        let v = Value::List(vec![
            Value::Nil,
            Value::Bool(true),
            Value::Int(-7),
            Value::Bytes(Bytes::from_static(b"k")),
            Value::List(vec![]),
        ]);
        assert_eq!(from_wire(&to_wire(&v)), Ok(v));
    }

    #[test]
    fn empty_and_deep_values_are_refused() {
        assert_eq!(from_wire(&pb::Value { kind: None }), Err(ValueError::Empty));
        let mut v = Value::Nil;
        for _ in 0..=MAX_DEPTH {
            v = Value::List(vec![v]);
        }
        assert_eq!(from_wire(&to_wire(&v)), Err(ValueError::TooDeep));
    }
}
