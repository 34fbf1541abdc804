//! The interpreter: walks the resolved tree with variables in slots.
//! Every statement, expression node, loop iteration and scanned entry costs
//! one step of fuel; every byte string and list created is charged to the
//! memory budget. Both run out deterministically.

use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use super::error::Pos;
use super::ir::{BinOp, Builtin, Expr, ExprKind, KeyParam, Lit, ProcIr, Stmt, Ty};
use super::store::Store;
use super::val::{equal, List, Val, SLOT_BYTES};
use super::{ExecContext, LIST_DEPTH_MAX};
use creek_exec::txn::{Abort, Outcome};
use creek_types::value::Value;

pub(super) fn parse_int(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
}

pub(super) fn ks_name(ir: &ProcIr, ks: u32) -> &str {
    ir.keyspaces.get(ks as usize).map_or("", |k| k.0.as_str())
}

/// A declared key parameter and the argument the call gave it.
pub(super) struct Declared<'a> {
    pub(super) name: &'a str,
    pub(super) arg: Bytes,
    pub(super) key: &'a KeyParam,
}

/// Why evaluation stopped early.
pub(super) enum Stop {
    Return(Val),
    Abort(Abort),
}

pub(super) type R<T> = Result<T, Stop>;

pub(super) struct Run<'a> {
    pub(super) ir: &'a ProcIr,
    pub(super) store: &'a mut dyn Store,
    pub(super) ctx: &'a ExecContext,
    pub(super) slots: Vec<Val>,
    pub(super) fuel_left: u64,
    pub(super) memory_bytes: u64,
    pub(super) rng: u64,
    /// The declared key parameters' arguments as the call gave them
    /// (assigning to the parameter later changes nothing): when there is
    /// any, each keyspace access must be covered by one.
    pub(super) declared: Vec<Declared<'a>>,
}

/// Run `ir` with checked arguments.
pub(crate) fn run(
    ir: &ProcIr,
    store: &mut dyn Store,
    args: Vec<Value>,
    ctx: &ExecContext,
) -> Outcome {
    let declared = ir
        .keys
        .iter()
        .filter_map(|(at, key)| match (args.get(*at), ir.params.get(*at)) {
            (Some(Value::Bytes(arg)), Some((name, _))) => Some(Declared {
                name,
                arg: arg.clone(),
                key,
            }),
            _ => None,
        })
        .collect();
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
        declared,
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
    pub(super) fn fail(&self, pos: Pos, msg: impl std::fmt::Display) -> Stop {
        Stop::Abort(Abort::new(format!(
            "proc {}, line {pos}: {msg}",
            self.ir.name
        )))
    }

    #[inline]
    pub(super) fn tick(&mut self, pos: Pos) -> R<()> {
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

    pub(super) fn charge(&mut self, bytes: u64, pos: Pos) -> R<()> {
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
                if let Some(done) = self.append_in_place(*slot, value)? {
                    return Ok(done);
                }
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

    /// `xs = append(xs, v)` pushes onto `xs` when nothing else shares it,
    /// so building a list item by item costs linear time and memory. The
    /// result is the same as copying; `v` is evaluated first, which is
    /// safe because expressions assign nothing.
    fn append_in_place(&mut self, slot: u32, value: &Expr) -> R<Option<()>> {
        let ExprKind::Call(Builtin::Append, _, args) = &value.kind else {
            return Ok(None);
        };
        let [list, item] = args.as_slice() else {
            return Ok(None);
        };
        if !matches!(list.kind, ExprKind::Var(s) if s == slot)
            || !matches!(self.slots.get(slot as usize), Some(Val::List(_)))
        {
            return Ok(None);
        }
        self.tick(value.pos)?;
        self.tick(list.pos)?;
        let v = self.eval(item)?;
        let Some(Val::List(mut shared)) = self
            .slots
            .get_mut(slot as usize)
            .map(|s| std::mem::replace(s, Val::Nil))
        else {
            return Ok(None);
        };
        let depth = shared.depth.max(1 + v.depth());
        if depth > LIST_DEPTH_MAX {
            self.set(slot, Val::List(shared));
            return Err(self.fail(
                value.pos,
                format!("lists nested more than {LIST_DEPTH_MAX} deep"),
            ));
        }
        match Rc::get_mut(&mut shared) {
            Some(l) => {
                self.charge(SLOT_BYTES, value.pos)?;
                l.items.push(v);
                l.depth = depth;
                self.set(slot, Val::List(shared));
            }
            None => {
                let mut items = Vec::with_capacity(shared.items.len() + 1);
                items.extend(shared.items.iter().cloned());
                items.push(v);
                let new = self.list(items, value.pos)?;
                self.set(slot, new);
            }
        }
        Ok(Some(()))
    }

    pub(super) fn int(&mut self, e: &Expr, what: &str) -> R<i64> {
        match self.eval(e)? {
            Val::Int(n) => Ok(n),
            other => Err(self.fail(e.pos, format!("{what} must be int, got {}", other.kind()))),
        }
    }

    pub(super) fn bytes(&mut self, e: &Expr, what: &str) -> R<Bytes> {
        match self.eval(e)? {
            Val::Bytes(b) => Ok(b),
            other => Err(self.fail(e.pos, format!("{what} must be bytes, got {}", other.kind()))),
        }
    }

    pub(super) fn list(&mut self, items: Vec<Val>, pos: Pos) -> R<Val> {
        let depth = 1 + items.iter().map(Val::depth).max().unwrap_or(0);
        if depth > LIST_DEPTH_MAX {
            return Err(self.fail(pos, format!("lists nested more than {LIST_DEPTH_MAX} deep")));
        }
        self.charge(SLOT_BYTES * (1 + items.len() as u64), pos)?;
        Ok(Val::List(Rc::new(List { items, depth })))
    }

    pub(super) fn eval(&mut self, e: &Expr) -> R<Val> {
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

    pub(super) fn binary(&mut self, op: BinOp, x: Val, y: Val, pos: Pos) -> R<Val> {
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
}
