//! The interpreter: walks the resolved tree with variables in slots.
//! Every statement, expression node, loop iteration and scanned entry costs
//! one step of fuel; every byte string and list created is charged to the
//! memory budget. Both run out deterministically.

use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use super::error::Pos;
use super::ir::{BinOp, Builtin, Expr, ExprKind, Lit, ProcIr, Stmt, Ty};
use super::store::Store;
use super::{ExecContext, LIST_DEPTH_MAX, SCAN_LIMIT_MAX};
use crate::txn::{Abort, Outcome};
use crate::value::Value;

/// Bytes charged per list item and per list, beyond byte-string contents.
const SLOT_BYTES: u64 = 16;

/// A run-time value. Lists are shared, never mutated: `append` and `++`
/// build new ones.
#[derive(Clone, Debug)]
enum Val {
    Nil,
    Bool(bool),
    Int(i64),
    Bytes(Bytes),
    List(Rc<List>),
}

#[derive(Debug)]
struct List {
    items: Vec<Val>,
    /// 1 for a list of scalars.
    depth: u32,
}

impl Val {
    fn kind(&self) -> &'static str {
        match self {
            Val::Nil => "nil",
            Val::Bool(_) => "bool",
            Val::Int(_) => "int",
            Val::Bytes(_) => "bytes",
            Val::List(_) => "list",
        }
    }

    fn depth(&self) -> u32 {
        match self {
            Val::List(l) => l.depth,
            _ => 0,
        }
    }

    fn has_type(&self, t: Ty) -> bool {
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

    fn from_value(v: Value) -> Val {
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

    fn to_value(&self) -> Value {
        match self {
            Val::Nil => Value::Nil,
            Val::Bool(b) => Value::Bool(*b),
            Val::Int(n) => Value::Int(*n),
            Val::Bytes(b) => Value::Bytes(b.clone()),
            Val::List(l) => Value::List(l.items.iter().map(Val::to_value).collect()),
        }
    }
}

fn equal(a: &Val, b: &Val) -> bool {
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

fn parse_int(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
}

fn ks_name(ir: &ProcIr, ks: u32) -> &str {
    ir.keyspaces.get(ks as usize).map_or("", |k| k.0.as_str())
}

/// Why evaluation stopped early.
enum Stop {
    Return(Val),
    Abort(Abort),
}

type R<T> = Result<T, Stop>;

struct Run<'a> {
    ir: &'a ProcIr,
    store: &'a mut dyn Store,
    ctx: &'a ExecContext,
    slots: Vec<Val>,
    fuel_left: u64,
    memory_bytes: u64,
    rng: u64,
}

/// Run `ir` with checked arguments.
pub(crate) fn run(
    ir: &ProcIr,
    store: &mut dyn Store,
    args: Vec<Value>,
    ctx: &ExecContext,
) -> Outcome {
    let mut slots = vec![Val::Nil; ir.slot_names.len()];
    for (slot, a) in slots.iter_mut().zip(args) {
        *slot = Val::from_value(a);
    }
    let mut r = Run {
        ir,
        store,
        ctx,
        slots,
        fuel_left: ctx.fuel,
        memory_bytes: 0,
        rng: ctx.seed,
    };
    let result = match r.block(&ir.body) {
        Ok(()) => Val::Nil,
        Err(Stop::Return(v)) => v,
        Err(Stop::Abort(a)) => return Err(a),
    };
    Ok(result.to_value().encode())
}

impl Run<'_> {
    #[cold]
    #[inline(never)]
    fn fail(&self, pos: Pos, msg: impl std::fmt::Display) -> Stop {
        Stop::Abort(Abort::new(format!(
            "proc {}, line {pos}: {msg}",
            self.ir.name
        )))
    }

    #[inline]
    fn tick(&mut self, pos: Pos) -> R<()> {
        if self.fuel_left == 0 {
            return Err(self.out_of_fuel(pos));
        }
        self.fuel_left -= 1;
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn out_of_fuel(&self, pos: Pos) -> Stop {
        Stop::Abort(Abort::new(format!(
            "out of fuel after {} steps in proc {} at line {pos}",
            self.ctx.fuel, self.ir.name
        )))
    }

    fn charge(&mut self, bytes: u64, pos: Pos) -> R<()> {
        self.memory_bytes = self.memory_bytes.saturating_add(bytes);
        if self.memory_bytes > self.ctx.memory_bytes_max {
            return Err(Stop::Abort(Abort::new(format!(
                "out of memory: proc {} created more than {} bytes of values, at line {pos}",
                self.ir.name, self.ctx.memory_bytes_max
            ))));
        }
        Ok(())
    }

    fn block(&mut self, b: &[Stmt]) -> R<()> {
        for s in b {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn set(&mut self, slot: u32, v: Val) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = v;
        }
    }

    fn check(&self, v: &Val, t: Option<Ty>, what: &str, pos: Pos) -> R<()> {
        match t {
            Some(t) if !v.has_type(t) => Err(self.fail(
                pos,
                format!("{what} must be {}, got {}", t.name(), v.kind()),
            )),
            _ => Ok(()),
        }
    }

    fn cond(&mut self, e: &Expr) -> R<bool> {
        match self.eval(e)? {
            Val::Bool(b) => Ok(b),
            other => Err(self.fail(
                e.pos,
                format!("a condition must be bool, got {}", other.kind()),
            )),
        }
    }

    fn stmt(&mut self, s: &Stmt) -> R<()> {
        match s {
            Stmt::Assign {
                slot,
                value,
                check,
                pos,
            } => {
                self.tick(*pos)?;
                let v = self.eval(value)?;
                if check.is_some() {
                    let name = self
                        .ir
                        .slot_names
                        .get(*slot as usize)
                        .map_or("?", |s| s.as_str());
                    self.check(&v, *check, &format!("`{name}`"), *pos)?;
                }
                self.set(*slot, v);
            }
            Stmt::If {
                cond, then, els, ..
            } => {
                if self.cond(cond)? {
                    self.block(then)?;
                } else {
                    self.block(els)?;
                }
            }
            Stmt::While { cond, body, .. } => {
                while self.cond(cond)? {
                    self.block(body)?;
                }
            }
            Stmt::For {
                slot,
                pair,
                list,
                body,
                pos,
                ..
            } => {
                let items = match self.eval(list)? {
                    Val::List(l) => l,
                    other => {
                        return Err(self.fail(
                            list.pos,
                            format!("`for` needs a list, got {}", other.kind()),
                        ))
                    }
                };
                for item in &items.items {
                    self.tick(*pos)?;
                    match pair {
                        None => self.set(*slot, item.clone()),
                        Some(second) => match item {
                            Val::List(kv) if kv.items.len() == 2 => {
                                if let [k, v] = kv.items.as_slice() {
                                    self.set(*slot, k.clone());
                                    self.set(*second, v.clone());
                                }
                            }
                            other => {
                                return Err(self.fail(
                                    *pos,
                                    format!(
                                        "`for (a, b)` needs items that are 2-item lists, got {}",
                                        other.kind()
                                    ),
                                ))
                            }
                        },
                    }
                    self.block(body)?;
                }
            }
            Stmt::Return { value, check, pos } => {
                self.tick(*pos)?;
                let v = self.eval(value)?;
                self.check(&v, *check, "the result", *pos)?;
                return Err(Stop::Return(v));
            }
            Stmt::Abort { msg, pos } => {
                self.tick(*pos)?;
                return Err(match self.eval(msg)? {
                    Val::Bytes(b) => Stop::Abort(Abort::new(String::from_utf8_lossy(&b))),
                    other => self.fail(*pos, format!("abort with a {} message", other.kind())),
                });
            }
            Stmt::Expr(e) => {
                self.eval(e)?;
            }
        }
        Ok(())
    }

    fn int(&mut self, e: &Expr, what: &str) -> R<i64> {
        match self.eval(e)? {
            Val::Int(n) => Ok(n),
            other => Err(self.fail(e.pos, format!("{what} must be int, got {}", other.kind()))),
        }
    }

    fn bytes(&mut self, e: &Expr, what: &str) -> R<Bytes> {
        match self.eval(e)? {
            Val::Bytes(b) => Ok(b),
            other => Err(self.fail(e.pos, format!("{what} must be bytes, got {}", other.kind()))),
        }
    }

    fn list(&mut self, items: Vec<Val>, pos: Pos) -> R<Val> {
        let depth = 1 + items.iter().map(Val::depth).max().unwrap_or(0);
        if depth > LIST_DEPTH_MAX {
            return Err(self.fail(pos, format!("lists nested more than {LIST_DEPTH_MAX} deep")));
        }
        self.charge(SLOT_BYTES * (1 + items.len() as u64), pos)?;
        Ok(Val::List(Rc::new(List { items, depth })))
    }

    fn eval(&mut self, e: &Expr) -> R<Val> {
        self.tick(e.pos)?;
        match &e.kind {
            ExprKind::Lit(l) => Ok(match l {
                Lit::Nil => Val::Nil,
                Lit::Bool(b) => Val::Bool(*b),
                Lit::Int(n) => Val::Int(*n),
                Lit::Bytes(b) => Val::Bytes(b.clone()),
            }),
            ExprKind::Var(s) => Ok(self.slots.get(*s as usize).cloned().unwrap_or(Val::Nil)),
            ExprKind::List(xs) => {
                let mut items = Vec::with_capacity(xs.len());
                for x in xs {
                    items.push(self.eval(x)?);
                }
                self.list(items, e.pos)
            }
            ExprKind::Neg(x) => {
                let n = self.int(x, "the operand of unary -")?;
                n.checked_neg()
                    .map(Val::Int)
                    .ok_or_else(|| self.fail(e.pos, format!("integer overflow in -({n})")))
            }
            ExprKind::Not(x) => match self.eval(x)? {
                Val::Bool(b) => Ok(Val::Bool(!b)),
                other => Err(self.fail(x.pos, format!("`not` needs a bool, got {}", other.kind()))),
            },
            ExprKind::Index(l, i) => {
                let list = match self.eval(l)? {
                    Val::List(l) => l,
                    other => {
                        return Err(self.fail(
                            l.pos,
                            format!("only a list can be indexed, not {}", other.kind()),
                        ))
                    }
                };
                let i = self.int(i, "an index")?;
                usize::try_from(i)
                    .ok()
                    .and_then(|i| list.items.get(i))
                    .cloned()
                    .ok_or_else(|| {
                        self.fail(
                            e.pos,
                            format!(
                                "index {i} out of bounds (the list has {} items)",
                                list.items.len()
                            ),
                        )
                    })
            }
            ExprKind::Bin(BinOp::And, a, b) => Ok(Val::Bool(
                self.cond_op(a, "and")? && self.cond_op(b, "and")?,
            )),
            ExprKind::Bin(BinOp::Or, a, b) => {
                Ok(Val::Bool(self.cond_op(a, "or")? || self.cond_op(b, "or")?))
            }
            ExprKind::Bin(op @ (BinOp::Eq | BinOp::Ne), a, b)
                if matches!((&a.kind, &b.kind), (ExprKind::Var(_), ExprKind::Lit(_))) =>
            {
                // `v == nil` and friends compare in place.
                self.tick(a.pos)?;
                self.tick(b.pos)?;
                let (ExprKind::Var(s), ExprKind::Lit(l)) = (&a.kind, &b.kind) else {
                    return Ok(Val::Nil);
                };
                let same = match (self.slots.get(*s as usize), l) {
                    (Some(Val::Nil), Lit::Nil) => true,
                    (Some(Val::Bool(x)), Lit::Bool(y)) => x == y,
                    (Some(Val::Int(x)), Lit::Int(y)) => x == y,
                    (Some(Val::Bytes(x)), Lit::Bytes(y)) => x == y,
                    _ => false,
                };
                Ok(Val::Bool(same == (*op == BinOp::Eq)))
            }
            ExprKind::Bin(BinOp::Concat, a, b) if matches!(&a.kind, ExprKind::Var(s) if matches!(self.slots.get(*s as usize), Some(Val::Bytes(_)))) =>
            {
                // `name ++ suffix`: read the variable in place. Expressions
                // assign nothing, so reading it after `b` is the same.
                self.tick(a.pos)?;
                let y = self.eval(b)?;
                let ExprKind::Var(s) = a.kind else {
                    return Ok(Val::Nil);
                };
                match (self.slots.get(s as usize), &y) {
                    (Some(Val::Bytes(x)), Val::Bytes(y)) => {
                        let len = x.len() + y.len();
                        let mut out = BytesMut::with_capacity(len);
                        out.extend_from_slice(x);
                        out.extend_from_slice(y);
                        self.charge(len as u64, e.pos)?;
                        Ok(Val::Bytes(out.freeze()))
                    }
                    _ => {
                        let x = self.slots.get(s as usize).cloned().unwrap_or(Val::Nil);
                        self.binary(BinOp::Concat, x, y, e.pos)
                    }
                }
            }
            ExprKind::Bin(op, a, b) => {
                let x = self.eval(a)?;
                let y = self.eval(b)?;
                self.binary(*op, x, y, e.pos)
            }
            ExprKind::Call(f, ks, args) => self.call(*f, *ks, args, e.pos),
        }
    }

    fn cond_op(&mut self, e: &Expr, op: &str) -> R<bool> {
        match self.eval(e)? {
            Val::Bool(b) => Ok(b),
            other => Err(self.fail(e.pos, format!("`{op}` needs bools, got {}", other.kind()))),
        }
    }

    fn binary(&mut self, op: BinOp, x: Val, y: Val, pos: Pos) -> R<Val> {
        let sym = op.symbol();
        match (op, x, y) {
            (BinOp::Eq, x, y) => Ok(Val::Bool(equal(&x, &y))),
            (BinOp::Ne, x, y) => Ok(Val::Bool(!equal(&x, &y))),
            (
                BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Mod,
                Val::Int(a),
                Val::Int(b),
            ) => {
                let r = match op {
                    BinOp::Add => a.checked_add(b),
                    BinOp::Sub => a.checked_sub(b),
                    BinOp::Mul => a.checked_mul(b),
                    BinOp::Div if b == 0 => return Err(self.fail(pos, "division by zero")),
                    BinOp::Mod if b == 0 => return Err(self.fail(pos, "remainder by zero")),
                    BinOp::Div => a.checked_div(b),
                    _ => a.checked_rem(b),
                };
                r.map(Val::Int)
                    .ok_or_else(|| self.fail(pos, format!("integer overflow in {a} {sym} {b}")))
            }
            (BinOp::Concat, Val::Bytes(a), Val::Bytes(b)) => {
                self.charge((a.len() + b.len()) as u64, pos)?;
                let mut out = BytesMut::with_capacity(a.len() + b.len());
                out.extend_from_slice(&a);
                out.extend_from_slice(&b);
                Ok(Val::Bytes(out.freeze()))
            }
            (BinOp::Concat, Val::List(a), Val::List(b)) => {
                let mut items = Vec::with_capacity(a.items.len() + b.items.len());
                items.extend(a.items.iter().cloned());
                items.extend(b.items.iter().cloned());
                self.list(items, pos)
            }
            (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge, x, y) => {
                let ord = match (&x, &y) {
                    (Val::Int(a), Val::Int(b)) => a.cmp(b),
                    (Val::Bytes(a), Val::Bytes(b)) => a.cmp(b),
                    _ => {
                        return Err(self.fail(
                            pos,
                            format!(
                                "`{sym}` compares two ints or two bytes, not {} and {}",
                                x.kind(),
                                y.kind()
                            ),
                        ))
                    }
                };
                Ok(Val::Bool(match op {
                    BinOp::Lt => ord.is_lt(),
                    BinOp::Le => ord.is_le(),
                    BinOp::Gt => ord.is_gt(),
                    _ => ord.is_ge(),
                }))
            }
            (_, x, y) => {
                let needs = if op == BinOp::Concat {
                    "two bytes or two lists"
                } else {
                    "two ints"
                };
                Err(self.fail(
                    pos,
                    format!("`{sym}` needs {needs}, got {} and {}", x.kind(), y.kind()),
                ))
            }
        }
    }

    /// If `e` is a variable holding bytes: its slot, after charging the
    /// step its evaluation would cost.
    fn var_bytes(&mut self, e: &Expr) -> R<Option<usize>> {
        if let ExprKind::Var(s) = e.kind {
            if let Some(Val::Bytes(_)) = self.slots.get(s as usize) {
                self.tick(e.pos)?;
                return Ok(Some(s as usize));
            }
        }
        Ok(None)
    }

    fn ks_name(&self, ks: u32) -> &str {
        self.ir
            .keyspaces
            .get(ks as usize)
            .map_or("", |(n, _)| n.as_str())
    }

    fn arg<'e>(&self, args: &'e [Expr], i: usize, pos: Pos) -> R<&'e Expr> {
        args.get(i)
            .ok_or_else(|| self.fail(pos, "missing argument"))
    }

    fn call(&mut self, f: Builtin, ks: u32, args: &[Expr], pos: Pos) -> R<Val> {
        let name = f.name();
        match f {
            Builtin::Get => {
                let arg = self.arg(args, 0, pos)?;
                let found = match self.var_bytes(arg)? {
                    Some(slot) => {
                        // Borrow the key from its variable: no reference
                        // count round trip on the hot path.
                        let Run {
                            store, slots, ir, ..
                        } = self;
                        let key = match slots.get(slot) {
                            Some(Val::Bytes(k)) => k.as_ref(),
                            _ => &[],
                        };
                        store.get(ks_name(ir, ks), key)
                    }
                    None => {
                        let key = self.bytes(arg, "a key")?;
                        self.store.get(ks_name(self.ir, ks), &key)
                    }
                };
                match found {
                    Some(v) => {
                        self.charge(v.len() as u64, pos)?;
                        Ok(Val::Bytes(v))
                    }
                    None => Ok(Val::Nil),
                }
            }
            Builtin::Put => {
                let key = self.bytes(self.arg(args, 0, pos)?, "a key")?;
                let value = self.bytes(self.arg(args, 1, pos)?, "a value")?;
                let ks = self
                    .ir
                    .keyspaces
                    .get(ks as usize)
                    .map_or("", |k| k.0.as_str());
                self.store.put(ks, key, value);
                Ok(Val::Nil)
            }
            Builtin::Delete => {
                let key = self.bytes(self.arg(args, 0, pos)?, "a key")?;
                let ks = self
                    .ir
                    .keyspaces
                    .get(ks as usize)
                    .map_or("", |k| k.0.as_str());
                self.store.delete(ks, key);
                Ok(Val::Nil)
            }
            Builtin::Scan => {
                let from = self.bytes(self.arg(args, 0, pos)?, "scan's from")?;
                let to = self.bytes(self.arg(args, 1, pos)?, "scan's to")?;
                let limit = self.int(self.arg(args, 2, pos)?, "scan's limit")?;
                if !(0..=SCAN_LIMIT_MAX).contains(&limit) {
                    return Err(self.fail(
                        pos,
                        format!("scan limit {limit} is not in 0..={SCAN_LIMIT_MAX}"),
                    ));
                }
                let ksn = self.ks_name(ks).to_owned();
                let found = self.store.scan(&ksn, &from, &to, limit as usize);
                let mut items = Vec::with_capacity(found.len().min(limit as usize));
                for (k, v) in found.into_iter().take(limit as usize) {
                    self.tick(pos)?;
                    self.charge((k.len() + v.len()) as u64, pos)?;
                    items.push(self.list(vec![Val::Bytes(k), Val::Bytes(v)], pos)?);
                }
                self.list(items, pos)
            }
            Builtin::OpId => Ok(Val::Bytes(self.ctx.op_id.clone())),
            Builtin::Rand => {
                // splitmix64: one seeded stream per execution.
                self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = self.rng;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                Ok(Val::Int((z >> 1) as i64))
            }
            Builtin::Len => match self.eval(self.arg(args, 0, pos)?)? {
                Val::Bytes(b) => Ok(Val::Int(b.len() as i64)),
                Val::List(l) => Ok(Val::Int(l.items.len() as i64)),
                other => Err(self.fail(
                    pos,
                    format!("len needs bytes or a list, got {}", other.kind()),
                )),
            },
            Builtin::Int => {
                let arg = self.arg(args, 0, pos)?;
                let b = match self.var_bytes(arg)? {
                    Some(slot) => match self.slots.get(slot) {
                        Some(Val::Bytes(b)) => match parse_int(b) {
                            Some(n) => return Ok(Val::Int(n)),
                            None => b.clone(),
                        },
                        _ => Bytes::new(),
                    },
                    None => self.bytes(arg, "int's argument")?,
                };
                match parse_int(&b) {
                    Some(n) => Ok(Val::Int(n)),
                    None => {
                        let shown: String = String::from_utf8_lossy(&b).chars().take(40).collect();
                        Err(self.fail(pos, format!("int: {shown:?} is not a decimal integer")))
                    }
                }
            }
            Builtin::Str => {
                let n = self.int(self.arg(args, 0, pos)?, "str's argument")?;
                let s = n.to_string();
                self.charge(s.len() as u64, pos)?;
                Ok(Val::Bytes(Bytes::from(s)))
            }
            Builtin::Append => {
                let list = match self.eval(self.arg(args, 0, pos)?)? {
                    Val::List(l) => l,
                    other => {
                        return Err(
                            self.fail(pos, format!("append needs a list, got {}", other.kind()))
                        )
                    }
                };
                let v = self.eval(self.arg(args, 1, pos)?)?;
                let mut items = Vec::with_capacity(list.items.len() + 1);
                items.extend(list.items.iter().cloned());
                items.push(v);
                self.list(items, pos)
            }
            Builtin::Slice => {
                let x = self.eval(self.arg(args, 0, pos)?)?;
                let from = self.int(self.arg(args, 1, pos)?, "slice's from")?;
                let to = self.int(self.arg(args, 2, pos)?, "slice's to")?;
                let len = match &x {
                    Val::Bytes(b) => b.len(),
                    Val::List(l) => l.items.len(),
                    other => {
                        return Err(self.fail(
                            pos,
                            format!("slice needs bytes or a list, got {}", other.kind()),
                        ))
                    }
                };
                let range = match (usize::try_from(from), usize::try_from(to)) {
                    (Ok(a), Ok(b)) if a <= b && b <= len => a..b,
                    _ => {
                        return Err(self.fail(
                            pos,
                            format!("{name}({from}, {to}) out of bounds (length {len})"),
                        ))
                    }
                };
                match x {
                    Val::Bytes(b) => Ok(Val::Bytes(b.slice(range))),
                    Val::List(l) => {
                        let items = l.items.get(range).map(<[Val]>::to_vec).unwrap_or_default();
                        self.list(items, pos)
                    }
                    _ => Ok(Val::Nil),
                }
            }
        }
    }
}
