//! Run-time values: shared, immutable lists with their nesting depth, and
//! the conversions from and to [`Value`].

use std::rc::Rc;

use bytes::Bytes;

use super::ir::Ty;
use creek_types::value::Value;

/// Bytes charged per list item and per list, beyond byte-string contents.
pub(super) const SLOT_BYTES: u64 = 16;

/// A run-time value. Lists are shared, never mutated: `append` and `++`
/// build new ones.
#[derive(Clone, Debug)]
pub(super) enum Val {
    Nil,
    Bool(bool),
    Int(i64),
    Bytes(Bytes),
    List(Rc<List>),
}

#[derive(Debug)]
pub(super) struct List {
    pub(super) items: Vec<Val>,
    /// 1 for a list of scalars.
    pub(super) depth: u32,
}

impl Val {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Val::Nil => "nil",
            Val::Bool(_) => "bool",
            Val::Int(_) => "int",
            Val::Bytes(_) => "bytes",
            Val::List(_) => "list",
        }
    }

    pub(super) fn depth(&self) -> u32 {
        match self {
            Val::List(l) => l.depth,
            _ => 0,
        }
    }

    pub(super) fn has_type(&self, t: Ty) -> bool {
        matches!(
            (t, self),
            (Ty::Any, _)
                | (Ty::Nil, Val::Nil)
                | (Ty::Bool, Val::Bool(_))
                | (Ty::Int, Val::Int(_))
                | (Ty::Bytes, Val::Bytes(_))
                | (Ty::List, Val::List(_))
        )
    }

    pub(super) fn from_value(v: Value) -> Val {
        match v {
            Value::Nil => Val::Nil,
            Value::Bool(b) => Val::Bool(b),
            Value::Int(n) => Val::Int(n),
            Value::Bytes(b) => Val::Bytes(b),
            Value::List(items) => {
                let items: Vec<Val> = items.into_iter().map(Val::from_value).collect();
                let depth = 1 + items.iter().map(Val::depth).max().unwrap_or(0);
                Val::List(Rc::new(List { items, depth }))
            }
        }
    }

    pub(super) fn to_value(&self) -> Value {
        match self {
            Val::Nil => Value::Nil,
            Val::Bool(b) => Value::Bool(*b),
            Val::Int(n) => Value::Int(*n),
            Val::Bytes(b) => Value::Bytes(b.clone()),
            Val::List(l) => Value::List(l.items.iter().map(Val::to_value).collect()),
        }
    }
}

pub(super) fn equal(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Nil, Val::Nil) => true,
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Int(x), Val::Int(y)) => x == y,
        (Val::Bytes(x), Val::Bytes(y)) => x == y,
        (Val::List(x), Val::List(y)) => {
            x.items.len() == y.items.len() && x.items.iter().zip(&y.items).all(|(p, q)| equal(p, q))
        }
        _ => false,
    }
}
