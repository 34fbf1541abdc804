//! The resolved program the flow checker reads and the interpreter runs:
//! variables are slots, calls are [`Builtin`]s, keyspaces are indices into
//! the procedure's own table, and every node carries its static type and
//! whether it can abort at run time.

use bytes::Bytes;

pub(crate) use super::ast::{BinOp, KeyParam, Ty};
use super::error::Pos;
use super::Label;

/// A built-in function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Builtin {
    Get,
    Put,
    Delete,
    Scan,
    OpId,
    Rand,
    Len,
    Int,
    Str,
    Append,
    Slice,
}

impl Builtin {
    pub(crate) fn by_name(s: &str) -> Option<Builtin> {
        Some(match s {
            "get" => Builtin::Get,
            "put" => Builtin::Put,
            "delete" => Builtin::Delete,
            "scan" => Builtin::Scan,
            "op_id" => Builtin::OpId,
            "rand" => Builtin::Rand,
            "len" => Builtin::Len,
            "int" => Builtin::Int,
            "str" => Builtin::Str,
            "append" => Builtin::Append,
            "slice" => Builtin::Slice,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Builtin::Get => "get",
            Builtin::Put => "put",
            Builtin::Delete => "delete",
            Builtin::Scan => "scan",
            Builtin::OpId => "op_id",
            Builtin::Rand => "rand",
            Builtin::Len => "len",
            Builtin::Int => "int",
            Builtin::Str => "str",
            Builtin::Append => "append",
            Builtin::Slice => "slice",
        }
    }

    /// Whether the first argument names a keyspace.
    pub(crate) fn takes_keyspace(self) -> bool {
        matches!(
            self,
            Builtin::Get | Builtin::Put | Builtin::Delete | Builtin::Scan
        )
    }

    pub(crate) fn writes(self) -> bool {
        matches!(self, Builtin::Put | Builtin::Delete)
    }

    /// The usage line error messages show.
    pub(crate) fn usage(self) -> &'static str {
        match self {
            Builtin::Get => "get(keyspace, key: bytes) -> bytes or nil",
            Builtin::Put => "put(keyspace, key: bytes, value: bytes)",
            Builtin::Delete => "delete(keyspace, key: bytes)",
            Builtin::Scan => "scan(keyspace, from: bytes, to: bytes, limit: int) -> list",
            Builtin::OpId => "op_id() -> bytes",
            Builtin::Rand => "rand() -> int",
            Builtin::Len => "len(bytes or list) -> int",
            Builtin::Int => "int(bytes) -> int",
            Builtin::Str => "str(int) -> bytes",
            Builtin::Append => "append(list, value) -> list",
            Builtin::Slice => "slice(bytes or list, from: int, to: int) -> bytes or list",
        }
    }
}

/// A literal.
#[derive(Clone, Debug)]
pub(crate) enum Lit {
    Nil,
    Bool(bool),
    Int(i64),
    Bytes(Bytes),
}

pub(crate) struct Expr {
    pub(crate) kind: ExprKind,
    pub(crate) pos: Pos,
    pub(crate) ty: Ty,
    /// Whether evaluating this node itself (not its operands) can abort:
    /// overflow, division by zero, bounds, parsing, or a run-time type check.
    pub(crate) may_abort: bool,
}

pub(crate) enum ExprKind {
    Lit(Lit),
    Var(u32),
    List(Vec<Expr>),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Index(Box<Expr>, Box<Expr>),
    /// A built-in; the `u32` is the keyspace index when it takes one.
    Call(Builtin, u32, Vec<Expr>),
}

pub(crate) enum Stmt {
    /// `let` and assignment; `check` is the type to verify at run time.
    Assign {
        slot: u32,
        value: Expr,
        check: Option<Ty>,
        pos: Pos,
    },
    If {
        cond: Expr,
        then: Vec<Stmt>,
        els: Vec<Stmt>,
        pos: Pos,
    },
    While {
        cond: Expr,
        body: Vec<Stmt>,
        id: u32,
        pos: Pos,
    },
    /// `for x in list` (`pair` is None) or `for (k, v) in list`.
    For {
        slot: u32,
        pair: Option<u32>,
        list: Expr,
        body: Vec<Stmt>,
        pos: Pos,
        id: u32,
        /// Whether the items are checked at run time (pairs not from scan).
        may_abort: bool,
    },
    Return {
        value: Expr,
        check: Option<Ty>,
        pos: Pos,
    },
    Abort {
        msg: Expr,
        pos: Pos,
    },
    Expr(Expr),
}

/// One resolved procedure.
pub(crate) struct ProcIr {
    pub(crate) name: String,
    pub(crate) params: Vec<(String, Ty)>,
    /// Its declared key parameters (by position), in order: when there is
    /// any, each keyspace access must be covered by one of them.
    pub(crate) keys: Vec<(usize, KeyParam)>,
    pub(crate) ret: Ty,
    pub(crate) slot_names: Vec<String>,
    pub(crate) body: Vec<Stmt>,
    /// The keyspaces it names, with their labels; `Call`s index this.
    pub(crate) keyspaces: Vec<(String, Label)>,
    pub(crate) summary: String,
    pub(crate) loops: u32,
    /// Where its name is.
    pub(crate) pos: Pos,
}
