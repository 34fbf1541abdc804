//! Name resolution and static types: parse tree to [`ir`](super::ir).
//! Every error is collected; a node with an error gets type `any` so one
//! mistake does not cascade.

use std::collections::BTreeMap;

use super::ast::{self, ExprKind as A};
use super::error::{CompileError, Pos};
use super::ir::{BinOp, Builtin, Expr, ExprKind, Lit, ProcIr, Stmt, Ty};
use super::Label;

/// The keyspaces a file may use: its declarations, then existing ones.
pub(crate) struct Keyspaces<'a> {
    pub(crate) declared: BTreeMap<String, Label>,
    pub(crate) existing: &'a dyn Fn(&str) -> Option<Label>,
}

impl Keyspaces<'_> {
    fn label(&self, name: &str) -> Option<Label> {
        self.declared
            .get(name)
            .copied()
            .or_else(|| (self.existing)(name))
    }
}

struct Checker<'a> {
    ks: &'a Keyspaces<'a>,
    errors: &'a mut Vec<CompileError>,
    scopes: Vec<Vec<(String, u32)>>,
    slot_names: Vec<String>,
    slot_types: Vec<Ty>,
    used_ks: Vec<(String, Label)>,
    ret: Ty,
    loops: u32,
    /// The procedure declares key parameters: every keyspace access
    /// checks its key against them, and may abort.
    keys_declared: bool,
}

/// Resolve and type one procedure.
pub(crate) fn check_proc(
    p: &ast::ProcDecl,
    ks: &Keyspaces<'_>,
    errors: &mut Vec<CompileError>,
) -> ProcIr {
    let mut c = Checker {
        ks,
        errors,
        scopes: vec![Vec::new()],
        slot_names: Vec::new(),
        slot_types: Vec::new(),
        used_ks: Vec::new(),
        ret: p.ret,
        loops: 0,
        keys_declared: false,
    };
    let mut keys = Vec::new();
    for (i, param) in p.params.iter().enumerate() {
        if param.ty == Ty::Nil {
            c.err(
                param.pos,
                format!("parameter `{}` cannot have type nil", param.name),
            );
        }
        if let Some(key) = &param.key {
            if c.ks.label(&key.keyspace).is_none() {
                c.err(
                    param.pos,
                    format!(
                        "parameter `{}`: unknown keyspace `{}` (declare it: keyspace {}: \
                         strong|weak)",
                        param.name, key.keyspace, key.keyspace
                    ),
                );
            }
            keys.push((i, key.clone()));
        }
        c.declare(&param.name, param.ty, param.pos);
    }
    c.keys_declared = !keys.is_empty();
    let body = c.block(&p.body);
    if !matches!(p.ret, Ty::Nil | Ty::Any) && !always_leaves(&body) {
        c.err(
            p.pos,
            format!(
                "proc {} can reach its end without returning (it returns {})",
                p.name,
                p.ret.name()
            ),
        );
    }
    ProcIr {
        name: p.name.clone(),
        params: p.params.iter().map(|x| (x.name.clone(), x.ty)).collect(),
        keys,
        ret: p.ret,
        slot_names: c.slot_names,
        body,
        keyspaces: c.used_ks,
        summary: p.summary.clone(),
        loops: c.loops,
        pos: p.pos,
    }
}

/// Whether every path through `b` ends in `return` or `abort`.
fn always_leaves(b: &[Stmt]) -> bool {
    b.iter().any(|s| match s {
        Stmt::Return { .. } | Stmt::Abort { .. } => true,
        Stmt::If { then, els, .. } => always_leaves(then) && always_leaves(els),
        _ => false,
    })
}

/// Whether a value of static type `have` may go where `want` is expected:
/// `Err` if never, `Ok(true)` if only after a run-time check.
fn fits(want: Ty, have: Ty) -> Result<bool, ()> {
    if want == Ty::Any || want == have {
        Ok(false)
    } else if have == Ty::Any {
        Ok(true)
    } else {
        Err(())
    }
}

fn names(tys: &[Ty]) -> String {
    let v: Vec<&str> = tys.iter().map(|t| t.name()).collect();
    v.join(" or ")
}

impl Checker<'_> {
    fn err(&mut self, pos: Pos, msg: impl Into<String>) {
        self.errors.push(CompileError::new(pos, msg));
    }

    fn lookup(&self, name: &str) -> Option<u32> {
        self.scopes
            .iter()
            .rev()
            .flat_map(|s| s.iter())
            .find(|(n, _)| n == name)
            .map(|(_, s)| *s)
    }

    fn declare(&mut self, name: &str, ty: Ty, pos: Pos) -> u32 {
        if self.lookup(name).is_some() {
            self.err(pos, format!("`{name}` is already defined"));
        }
        let slot = u32::try_from(self.slot_names.len()).unwrap_or(u32::MAX);
        self.slot_names.push(name.to_owned());
        self.slot_types.push(ty);
        if let Some(s) = self.scopes.last_mut() {
            s.push((name.to_owned(), slot));
        }
        slot
    }

    fn slot_ty(&self, slot: u32) -> Ty {
        self.slot_types
            .get(slot as usize)
            .copied()
            .unwrap_or(Ty::Any)
    }

    fn block(&mut self, b: &[ast::Stmt]) -> Vec<Stmt> {
        self.scopes.push(Vec::new());
        let out = b.iter().map(|s| self.stmt(s)).collect();
        self.scopes.pop();
        out
    }

    /// Check that `e` can be a `want`; the run-time check flag.
    fn want(&mut self, e: &Expr, want: &[Ty], what: &str) -> bool {
        if want.contains(&e.ty) {
            false
        } else if e.ty == Ty::Any {
            true
        } else {
            let msg = format!("{what} must be {}, found {}", names(want), e.ty.name());
            self.err(e.pos, msg);
            false
        }
    }

    fn assign_check(&mut self, want: Ty, value: &Expr, what: &str) -> Option<Ty> {
        match fits(want, value.ty) {
            Ok(true) => Some(want),
            Ok(false) => None,
            Err(()) => {
                let msg = format!(
                    "{what} has type {}, the value is {}",
                    want.name(),
                    value.ty.name()
                );
                self.err(value.pos, msg);
                None
            }
        }
    }

    fn stmt(&mut self, s: &ast::Stmt) -> Stmt {
        match s {
            ast::Stmt::Let {
                name,
                ty,
                value,
                pos,
            } => {
                let value = self.expr(value);
                let (ty, check) = match ty {
                    Some(t) => {
                        let check = self.assign_check(*t, &value, &format!("`{name}`"));
                        (*t, check)
                    }
                    None if value.ty == Ty::Nil => (Ty::Any, None),
                    None => (value.ty, None),
                };
                let slot = self.declare(name, ty, *pos);
                Stmt::Assign {
                    slot,
                    value,
                    check,
                    pos: *pos,
                }
            }
            ast::Stmt::Assign { name, value, pos } => {
                let value = self.expr(value);
                let slot = match self.lookup(name) {
                    Some(s) => s,
                    None => {
                        self.err(
                            *pos,
                            format!("unknown variable `{name}` (declare it with let)"),
                        );
                        0
                    }
                };
                let check = if self.lookup(name).is_some() {
                    self.assign_check(self.slot_ty(slot), &value, &format!("`{name}`"))
                } else {
                    None
                };
                Stmt::Assign {
                    slot,
                    value,
                    check,
                    pos: *pos,
                }
            }
            ast::Stmt::If {
                cond,
                then,
                els,
                pos,
            } => {
                let cond = self.expr(cond);
                self.want(&cond, &[Ty::Bool], "a condition");
                Stmt::If {
                    cond,
                    then: self.block(then),
                    els: self.block(els),
                    pos: *pos,
                }
            }
            ast::Stmt::While { cond, body, pos } => {
                let cond = self.expr(cond);
                self.want(&cond, &[Ty::Bool], "a condition");
                let id = self.loop_id();
                Stmt::While {
                    cond,
                    body: self.block(body),
                    id,
                    pos: *pos,
                }
            }
            ast::Stmt::For {
                vars,
                list,
                body,
                pos,
            } => {
                let list = self.expr(list);
                let mut may_abort = self.want(&list, &[Ty::List], "what `for` iterates");
                let from_scan = matches!(list.kind, ExprKind::Call(Builtin::Scan, ..));
                let id = self.loop_id();
                self.scopes.push(Vec::new());
                let (slot, pair) = match vars.as_slice() {
                    [(k, kp), (v, vp)] => {
                        let t = if from_scan { Ty::Bytes } else { Ty::Any };
                        may_abort |= !from_scan;
                        let k = self.declare(k, t, *kp);
                        (k, Some(self.declare(v, t, *vp)))
                    }
                    [(x, xp)] => (self.declare(x, Ty::Any, *xp), None),
                    _ => (0, None),
                };
                let body = self.block(body);
                self.scopes.pop();
                Stmt::For {
                    slot,
                    pair,
                    list,
                    body,
                    pos: *pos,
                    id,
                    may_abort,
                }
            }
            ast::Stmt::Return { value, pos } => {
                let value = match value {
                    Some(v) => self.expr(v),
                    None => lit(Lit::Nil, Ty::Nil, *pos),
                };
                let check = self.assign_check(self.ret, &value, "the procedure's result");
                Stmt::Return {
                    value,
                    check,
                    pos: *pos,
                }
            }
            ast::Stmt::Abort { msg, pos } => {
                let msg = self.expr(msg);
                self.want(&msg, &[Ty::Bytes], "an abort message");
                Stmt::Abort { msg, pos: *pos }
            }
            ast::Stmt::Expr(e) => Stmt::Expr(self.expr(e)),
        }
    }

    fn loop_id(&mut self) -> u32 {
        self.loops += 1;
        self.loops - 1
    }

    fn expr(&mut self, e: &ast::Expr) -> Expr {
        let pos = e.pos;
        let (kind, ty, may_abort) = match &e.kind {
            A::Int(n) => (ExprKind::Lit(Lit::Int(*n)), Ty::Int, false),
            A::Str(b) => (ExprKind::Lit(Lit::Bytes(b.clone())), Ty::Bytes, false),
            A::Bool(b) => (ExprKind::Lit(Lit::Bool(*b)), Ty::Bool, false),
            A::Nil => (ExprKind::Lit(Lit::Nil), Ty::Nil, false),
            A::Var(name) => match self.lookup(name) {
                Some(s) => (ExprKind::Var(s), self.slot_ty(s), false),
                None => {
                    let hint = if self.ks.label(name).is_some() {
                        " (a keyspace can only be named as the first argument of get, put, delete or scan)"
                    } else {
                        ""
                    };
                    self.err(pos, format!("unknown variable `{name}`{hint}"));
                    (ExprKind::Lit(Lit::Nil), Ty::Any, false)
                }
            },
            A::List(items) => {
                let items: Vec<Expr> = items.iter().map(|x| self.expr(x)).collect();
                // Nesting lists too deep aborts, but like fuel and memory
                // that limit is a resource the flow check does not track.
                (ExprKind::List(items), Ty::List, false)
            }
            A::Neg(x) => {
                let x = self.expr(x);
                self.want(&x, &[Ty::Int], "the operand of unary -");
                (ExprKind::Neg(Box::new(x)), Ty::Int, true)
            }
            A::Not(x) => {
                let x = self.expr(x);
                let may = self.want(&x, &[Ty::Bool], "the operand of `not`");
                (ExprKind::Not(Box::new(x)), Ty::Bool, may)
            }
            A::Index(l, i) => {
                let l = self.expr(l);
                let i = self.expr(i);
                self.want(&l, &[Ty::List], "an indexed value");
                self.want(&i, &[Ty::Int], "an index");
                (ExprKind::Index(Box::new(l), Box::new(i)), Ty::Any, true)
            }
            A::Bin(op, a, b) => {
                let a = self.expr(a);
                let b = self.expr(b);
                let (ty, may) = self.binary(*op, &a, &b, pos);
                (ExprKind::Bin(*op, Box::new(a), Box::new(b)), ty, may)
            }
            A::Call(name, args) => return self.call(name, args, pos),
        };
        Expr {
            kind,
            pos,
            ty,
            may_abort,
        }
    }

    fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr, pos: Pos) -> (Ty, bool) {
        let sym = op.symbol();
        let what = format!("an operand of `{sym}`");
        match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Mod => {
                self.want(a, &[Ty::Int], &what);
                self.want(b, &[Ty::Int], &what);
                (Ty::Int, true)
            }
            BinOp::Concat | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let allowed: &[Ty] = if op == BinOp::Concat {
                    &[Ty::Bytes, Ty::List]
                } else {
                    &[Ty::Int, Ty::Bytes]
                };
                let ra = self.want(a, allowed, &what);
                let rb = self.want(b, allowed, &what);
                let known = |t: Ty| allowed.contains(&t);
                if known(a.ty) && known(b.ty) && a.ty != b.ty {
                    self.err(
                        pos,
                        format!(
                            "`{sym}` needs two values of the same type, found {} and {}",
                            a.ty.name(),
                            b.ty.name()
                        ),
                    );
                }
                let ty = if op != BinOp::Concat {
                    Ty::Bool
                } else if known(a.ty) {
                    a.ty
                } else if known(b.ty) {
                    b.ty
                } else {
                    Ty::Any
                };
                // Two `any` operands must also agree with each other at run time.
                (ty, ra || rb)
            }
            BinOp::Eq | BinOp::Ne => {
                let vague = |t: Ty| matches!(t, Ty::Any | Ty::Nil);
                if !vague(a.ty) && !vague(b.ty) && a.ty != b.ty {
                    self.err(
                        pos,
                        format!(
                            "comparing {} with {} is always {}",
                            a.ty.name(),
                            b.ty.name(),
                            op == BinOp::Ne
                        ),
                    );
                }
                (Ty::Bool, false)
            }
            BinOp::And | BinOp::Or => {
                let ra = self.want(a, &[Ty::Bool], &what);
                let rb = self.want(b, &[Ty::Bool], &what);
                (Ty::Bool, ra || rb)
            }
        }
    }

    fn keyspace(&mut self, e: Option<&ast::Expr>, f: Builtin) -> u32 {
        let Some(e) = e else { return 0 };
        let A::Var(name) = &e.kind else {
            self.err(
                e.pos,
                format!("the first argument of {} must be a keyspace name", f.name()),
            );
            return 0;
        };
        if let Some(i) = self.used_ks.iter().position(|(n, _)| n == name) {
            return u32::try_from(i).unwrap_or(0);
        }
        match self.ks.label(name) {
            Some(label) => {
                self.used_ks.push((name.clone(), label));
                u32::try_from(self.used_ks.len() - 1).unwrap_or(0)
            }
            None => {
                self.err(
                    e.pos,
                    format!("unknown keyspace `{name}` (declare it: keyspace {name}: strong|weak)"),
                );
                0
            }
        }
    }

    fn call(&mut self, name: &str, args: &[ast::Expr], pos: Pos) -> Expr {
        let Some(f) = Builtin::by_name(name) else {
            self.err(pos, format!("unknown function `{name}`"));
            for a in args {
                self.expr(a);
            }
            return lit(Lit::Nil, Ty::Any, pos);
        };
        let ks = if f.takes_keyspace() {
            self.keyspace(args.first(), f)
        } else {
            0
        };
        let rest = if f.takes_keyspace() {
            args.get(1..).unwrap_or_default()
        } else {
            args
        };
        let xs: Vec<Expr> = rest.iter().map(|a| self.expr(a)).collect();
        use Ty::{Any, Bytes, Int, List, Nil};
        let params: &[&[Ty]] = match f {
            Builtin::Get | Builtin::Delete => &[&[Bytes]],
            Builtin::Put => &[&[Bytes], &[Bytes]],
            Builtin::Scan => &[&[Bytes], &[Bytes], &[Int]],
            Builtin::OpId | Builtin::Rand => &[],
            Builtin::Len => &[&[Bytes, List]],
            Builtin::Int => &[&[Bytes]],
            Builtin::Str => &[&[Int]],
            Builtin::Append => &[&[List], &[Ty::Int, Bytes, Ty::Bool, Nil, List, Any]],
            Builtin::Slice => &[&[Bytes, List], &[Int], &[Int]],
        };
        if args.len() != params.len() + usize::from(f.takes_keyspace()) {
            self.err(
                pos,
                format!(
                    "{name} takes {} argument(s), got {}: {}",
                    params.len() + usize::from(f.takes_keyspace()),
                    args.len(),
                    f.usage()
                ),
            );
            return lit(Lit::Nil, Ty::Any, pos);
        }
        let mut checks = false;
        for (i, (x, want)) in xs.iter().zip(params).enumerate() {
            let what = format!(
                "argument {} of {name}",
                i + 1 + usize::from(f.takes_keyspace())
            );
            checks |= self.want(x, want, &what);
        }
        let (ty, always) = match f {
            Builtin::Get => (Any, false),
            Builtin::Put | Builtin::Delete => (Nil, false),
            Builtin::Scan => (List, true),
            Builtin::OpId => (Bytes, false),
            Builtin::Rand => (Int, false),
            Builtin::Len => (Int, false),
            Builtin::Int => (Int, true),
            Builtin::Str => (Bytes, false),
            Builtin::Append => (List, false),
            Builtin::Slice => (xs.first().map_or(Any, |x| x.ty), true),
        };
        Expr {
            kind: ExprKind::Call(f, ks, xs),
            pos,
            ty,
            // With declared keys, an access outside them aborts.
            may_abort: always || checks || (self.keys_declared && f.takes_keyspace()),
        }
    }
}

fn lit(l: Lit, ty: Ty, pos: Pos) -> Expr {
    Expr {
        kind: ExprKind::Lit(l),
        pos,
        ty,
        may_abort: false,
    }
}
