//! The parse tree: names are still names; [`super::check`] resolves them.

use bytes::Bytes;

use super::error::Pos;
use super::Label;

/// A static type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// A 64-bit signed integer.
    Int,
    /// A byte string.
    Bytes,
    /// `true` or `false`.
    Bool,
    /// Only `nil`.
    Nil,
    /// A list of values of any type.
    List,
    /// Unknown until run time (checked where it is used).
    Any,
}

impl Ty {
    /// The name programs and signatures use.
    pub fn name(self) -> &'static str {
        match self {
            Ty::Int => "int",
            Ty::Bytes => "bytes",
            Ty::Bool => "bool",
            Ty::Nil => "nil",
            Ty::List => "list",
            Ty::Any => "any",
        }
    }

    pub(crate) fn from_name(s: &str) -> Option<Ty> {
        Some(match s {
            "int" => Ty::Int,
            "bytes" => Ty::Bytes,
            "bool" => Ty::Bool,
            "nil" => Ty::Nil,
            "list" => Ty::List,
            "any" => Ty::Any,
            _ => return None,
        })
    }
}

pub(crate) struct File {
    pub(crate) keyspaces: Vec<KsDecl>,
    pub(crate) procs: Vec<ProcDecl>,
}

/// One parameter: its name, static type and, for a declared key
/// (`key(KS)`, `prefix(KS)`, both of type bytes), what it declares.
pub(crate) struct Param {
    pub(crate) name: String,
    pub(crate) ty: Ty,
    pub(crate) key: Option<KeyParam>,
    pub(crate) pos: Pos,
}

/// A parameter declared to hold a key of a keyspace, or a prefix of its
/// keys: the keys the procedure may read and write (docs/procedures.md,
/// "Declared keys").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyParam {
    /// The keyspace.
    pub keyspace: String,
    /// The argument is a prefix (`prefix(KS)`): every key starting with
    /// it; otherwise one key (`key(KS)`).
    pub prefix: bool,
}

impl KeyParam {
    /// The type as signatures show it: `key(KS)` or `prefix(KS)`.
    pub fn type_name(&self) -> String {
        let kind = if self.prefix { "prefix" } else { "key" };
        format!("{kind}({})", self.keyspace)
    }

    /// Whether this declaration, given argument `arg`, lets the procedure
    /// touch key `key` of `keyspace`.
    pub fn covers_key(&self, arg: &[u8], keyspace: &str, key: &[u8]) -> bool {
        self.keyspace == keyspace
            && if self.prefix {
                key.starts_with(arg)
            } else {
                key == arg
            }
    }

    /// Whether this declaration, given argument `arg`, lets the procedure
    /// scan the keys of `keyspace` from `from` up to (not including) `to`:
    /// a prefix whose keys hold the whole range.
    pub fn covers_range(&self, arg: &[u8], keyspace: &str, from: &[u8], to: &[u8]) -> bool {
        self.keyspace == keyspace
            && self.prefix
            && from.starts_with(arg)
            && creek_shard::prefix_end(arg).is_none_or(|end| to <= &end[..])
    }
}

pub(crate) struct KsDecl {
    pub(crate) name: String,
    pub(crate) label: Label,
    pub(crate) pos: Pos,
}

pub(crate) struct ProcDecl {
    pub(crate) name: String,
    pub(crate) pos: Pos,
    pub(crate) params: Vec<Param>,
    pub(crate) ret: Ty,
    pub(crate) body: Vec<Stmt>,
    pub(crate) summary: String,
}

pub(crate) enum Stmt {
    Let {
        name: String,
        ty: Option<Ty>,
        value: Expr,
        pos: Pos,
    },
    Assign {
        name: String,
        value: Expr,
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
        pos: Pos,
    },
    For {
        vars: Vec<(String, Pos)>,
        list: Expr,
        body: Vec<Stmt>,
        pos: Pos,
    },
    Return {
        value: Option<Expr>,
        pos: Pos,
    },
    Abort {
        msg: Expr,
        pos: Pos,
    },
    Expr(Expr),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Concat,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Concat => "++",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "and",
            BinOp::Or => "or",
        }
    }
}

pub(crate) struct Expr {
    pub(crate) kind: ExprKind,
    pub(crate) pos: Pos,
    /// Height of this tree (a leaf is 1), bounded by the parser so that the
    /// recursive passes cannot overflow the stack.
    pub(crate) height: u32,
}

pub(crate) enum ExprKind {
    Int(i64),
    Str(Bytes),
    Bool(bool),
    Nil,
    Var(String),
    List(Vec<Expr>),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Index(Box<Expr>, Box<Expr>),
    Call(String, Vec<Expr>),
}

impl Expr {
    pub(crate) fn new(kind: ExprKind, pos: Pos) -> Expr {
        let kids = match &kind {
            ExprKind::Int(_)
            | ExprKind::Str(_)
            | ExprKind::Bool(_)
            | ExprKind::Nil
            | ExprKind::Var(_) => 0,
            ExprKind::List(xs) | ExprKind::Call(_, xs) => {
                xs.iter().map(|x| x.height).max().unwrap_or(0)
            }
            ExprKind::Neg(x) | ExprKind::Not(x) => x.height,
            ExprKind::Bin(_, a, b) | ExprKind::Index(a, b) => a.height.max(b.height),
        };
        Expr {
            kind,
            pos,
            height: kids.saturating_add(1),
        }
    }
}
