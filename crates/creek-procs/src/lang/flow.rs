//! The information-flow check (MyriaStore §3.4): weak data must never
//! decide a write to a strong keyspace, neither by value, by key, by
//! control flow, nor by whether the execution aborts.
//!
//! Labels are tracked per variable and flow-sensitively: an assignment
//! sets the variable's label to that of the value joined with the program
//! counter (pc). Branches join their states; loops iterate to a fixpoint
//! (two-point lattice, so at most one more round than there are variables;
//! each loop keeps its head state across visits so nested loops stay
//! polynomial). A weak label remembers where its weak data came from, for
//! the error message.
//!
//! Termination: a possible abort (or `abort`, or `return`) whose happening
//! depends on weak data makes the pc weak for the rest of the procedure
//! (`term`); and since an abort also discards the writes made before it, a
//! procedure with such a possible abort may not write strong data at all.
//! Running out of fuel or memory and nesting lists too deep are not
//! tracked (resource limits; see docs/procedures.md).

use std::collections::{BTreeMap, BTreeSet};

use super::error::{CompileError, Pos};
use super::ir::{BinOp, Builtin, Expr, ExprKind, ProcIr, Stmt};
use super::Label;

/// Most expression and statement visits the checker makes for one
/// procedure before giving up with an error.
const FLOW_STEPS_MAX: u64 = 20_000_000;

/// What a procedure may touch.
pub(crate) struct Effects {
    pub(crate) reads: BTreeSet<String>,
    pub(crate) writes: BTreeSet<String>,
    pub(crate) writes_strong: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctrl {
    Cond,
    Loop,
    Abort,
    Return,
}

/// Why a label is weak: the weak read it started from, the variable it
/// was first stored in, and the control construct it passed through.
#[derive(Clone, Copy, Debug)]
struct Why {
    ks: u32,
    at: Pos,
    via: Option<u32>,
    ctrl: Option<(Ctrl, Pos)>,
}

/// `None` is strong; weak keeps its reason. Joining keeps the first reason.
type Lab = Option<Why>;

fn with_ctrl(l: Lab, c: Ctrl, at: Pos) -> Lab {
    l.map(|w| Why {
        ctrl: Some((c, at)),
        ..w
    })
}

#[derive(Clone)]
struct St {
    vars: Vec<Lab>,
    /// Weak once the rest of the procedure runs only if something that
    /// depends on weak data did not abort or return.
    term: Lab,
}

impl St {
    fn join_from(&mut self, o: &St) {
        for (a, b) in self.vars.iter_mut().zip(&o.vars) {
            *a = a.or(*b);
        }
        self.term = self.term.or(o.term);
    }

    fn same_shape(&self, o: &St) -> bool {
        self.term.is_some() == o.term.is_some()
            && self
                .vars
                .iter()
                .zip(&o.vars)
                .all(|(a, b)| a.is_some() == b.is_some())
    }
}

struct Flow<'a> {
    ir: &'a ProcIr,
    errors: BTreeMap<Pos, String>,
    heads: Vec<Option<St>>,
    strong_writes: Vec<(Pos, u32)>,
    weak_abort: Option<(Pos, Why)>,
    fx: Effects,
    steps: u64,
}

/// Check one procedure; errors go to `errors`.
pub(crate) fn check(ir: &ProcIr, errors: &mut Vec<CompileError>) -> Effects {
    let mut f = Flow {
        ir,
        errors: BTreeMap::new(),
        heads: vec![None; ir.loops as usize],
        strong_writes: Vec::new(),
        weak_abort: None,
        fx: Effects {
            reads: BTreeSet::new(),
            writes: BTreeSet::new(),
            writes_strong: false,
        },
        steps: 0,
    };
    let mut st = St {
        vars: vec![None; ir.slot_names.len()],
        term: None,
    };
    f.block(&ir.body, &mut st, None);
    if f.steps > FLOW_STEPS_MAX {
        errors.push(CompileError::new(
            ir.pos,
            format!(
                "proc {} is too complex for the flow checker (nested loops with many variables)",
                ir.name
            ),
        ));
    }
    if let Some((apos, why)) = f.weak_abort {
        for (pos, ks) in f.strong_writes.clone() {
            if !f.errors.contains_key(&pos) {
                let msg = format!(
                    "write to {} (strong) can be undone by the possible abort at line {apos}, which depends on weak data: {}",
                    f.ks_name(ks),
                    f.describe(&why)
                );
                f.errors.insert(pos, msg);
            }
        }
    }
    errors.extend(f.errors.into_iter().map(|(p, m)| CompileError::new(p, m)));
    f.fx
}

impl Flow<'_> {
    fn ks_name(&self, ks: u32) -> &str {
        self.ir
            .keyspaces
            .get(ks as usize)
            .map_or("?", |k| k.0.as_str())
    }

    fn ks_label(&self, ks: u32) -> Label {
        self.ir
            .keyspaces
            .get(ks as usize)
            .map_or(Label::Weak, |k| k.1)
    }

    fn describe(&self, w: &Why) -> String {
        let mut parts = Vec::new();
        if let Some(v) = w.via.and_then(|v| self.ir.slot_names.get(v as usize)) {
            parts.push(v.clone());
        }
        if let Some((c, at)) = w.ctrl {
            parts.push(match c {
                Ctrl::Cond => format!("the condition at line {at}"),
                Ctrl::Loop => format!("the loop at line {at}"),
                Ctrl::Abort => format!("whether the possible abort at line {at} happens"),
                Ctrl::Return => format!("whether the return at line {at} happens"),
            });
        }
        parts.push(format!(
            "read from {} (weak) at line {}",
            self.ks_name(w.ks),
            w.at
        ));
        parts.join(", ")
    }

    fn error(&mut self, pos: Pos, msg: String) {
        self.errors.entry(pos).or_insert(msg);
    }

    /// A possible abort at `pos` whose operands are labelled `ops`.
    fn may_abort(&mut self, pos: Pos, ops: Lab, st: &mut St, pc: Lab) {
        if let Some(cause) = ops.or(pc).or(st.term) {
            if self.weak_abort.is_none() {
                self.weak_abort = Some((pos, cause));
            }
            st.term = st.term.or(with_ctrl(Some(cause), Ctrl::Abort, pos));
        }
    }

    fn block(&mut self, b: &[Stmt], st: &mut St, pc: Lab) {
        for s in b {
            self.stmt(s, st, pc);
        }
    }

    fn assign(&mut self, slot: u32, l: Lab, st: &mut St, pc: Lab) {
        let l = l.or(pc).or(st.term).map(|w| Why {
            via: w.via.or(Some(slot)),
            ..w
        });
        if let Some(v) = st.vars.get_mut(slot as usize) {
            *v = l;
        }
    }

    fn stmt(&mut self, s: &Stmt, st: &mut St, pc: Lab) {
        self.steps += 1;
        if self.steps > FLOW_STEPS_MAX {
            return;
        }
        match s {
            Stmt::Assign {
                slot,
                value,
                check,
                pos,
            } => {
                let l = self.expr(value, st, pc);
                if check.is_some() {
                    self.may_abort(*pos, l, st, pc);
                }
                self.assign(*slot, l, st, pc);
            }
            Stmt::If {
                cond,
                then,
                els,
                pos,
            } => {
                let l = self.cond(cond, st, pc);
                let inner = pc.or(with_ctrl(l, Ctrl::Cond, *pos));
                let mut other = st.clone();
                self.block(then, st, inner);
                self.block(els, &mut other, inner);
                st.join_from(&other);
            }
            Stmt::While {
                cond,
                body,
                id,
                pos,
            } => {
                let mut head = self.head(*id, st);
                loop {
                    let mut s = head.clone();
                    let l = self.cond(cond, &mut s, pc);
                    let inner = pc.or(with_ctrl(l, Ctrl::Cond, *pos));
                    let mut b = s.clone();
                    self.block(body, &mut b, inner);
                    let mut next = head.clone();
                    next.join_from(&b);
                    if next.same_shape(&head) || self.steps > FLOW_STEPS_MAX {
                        *st = s;
                        break;
                    }
                    head = next;
                }
                self.set_head(*id, head);
            }
            Stmt::For {
                slot,
                pair,
                list,
                body,
                pos,
                id,
                may_abort,
            } => {
                let l = self.expr(list, st, pc);
                let inner = pc.or(with_ctrl(l, Ctrl::Loop, *pos));
                let mut head = self.head(*id, st);
                loop {
                    let mut s = head.clone();
                    if *may_abort {
                        self.may_abort(*pos, l, &mut s, pc);
                    }
                    self.assign(*slot, l, &mut s, inner);
                    if let Some(p) = pair {
                        self.assign(*p, l, &mut s, inner);
                    }
                    self.block(body, &mut s, inner);
                    let mut next = head.clone();
                    next.join_from(&s);
                    if next.same_shape(&head) || self.steps > FLOW_STEPS_MAX {
                        head = next;
                        break;
                    }
                    head = next;
                }
                *st = head.clone();
                self.set_head(*id, head);
            }
            Stmt::Return { value, check, pos } => {
                let l = self.expr(value, st, pc);
                if check.is_some() {
                    self.may_abort(*pos, l, st, pc);
                }
                if let Some(w) = pc.or(st.term) {
                    st.term = st.term.or(with_ctrl(Some(w), Ctrl::Return, *pos));
                }
            }
            Stmt::Abort { msg, pos } => {
                self.expr(msg, st, pc);
                self.may_abort(*pos, None, st, pc);
            }
            Stmt::Expr(e) => {
                self.expr(e, st, pc);
            }
        }
    }

    fn head(&self, id: u32, st: &St) -> St {
        let mut h = st.clone();
        if let Some(Some(old)) = self.heads.get(id as usize) {
            h.join_from(old);
        }
        h
    }

    fn set_head(&mut self, id: u32, h: St) {
        if let Some(slot) = self.heads.get_mut(id as usize) {
            *slot = Some(h);
        }
    }

    fn cond(&mut self, e: &Expr, st: &mut St, pc: Lab) -> Lab {
        let l = self.expr(e, st, pc);
        if e.ty == super::ir::Ty::Any {
            self.may_abort(e.pos, l, st, pc);
        }
        l
    }

    fn expr(&mut self, e: &Expr, st: &mut St, pc: Lab) -> Lab {
        self.steps += 1;
        if self.steps > FLOW_STEPS_MAX {
            return None;
        }
        let l = match &e.kind {
            ExprKind::Lit(_) => None,
            ExprKind::Var(s) => st.vars.get(*s as usize).copied().flatten(),
            ExprKind::List(xs) => {
                let mut l = None;
                for x in xs {
                    l = l.or(self.expr(x, st, pc));
                }
                l
            }
            ExprKind::Neg(x) | ExprKind::Not(x) => self.expr(x, st, pc),
            ExprKind::Bin(BinOp::And | BinOp::Or, a, b) => {
                // Whether `b` runs at all depends on `a`.
                let la = self.expr(a, st, pc);
                let lb = self.expr(b, st, pc.or(la));
                la.or(lb)
            }
            ExprKind::Bin(_, a, b) | ExprKind::Index(a, b) => {
                let la = self.expr(a, st, pc);
                let lb = self.expr(b, st, pc);
                la.or(lb)
            }
            ExprKind::Call(f, ks, args) => {
                // A call can abort only because of its arguments, not
                // because of what it reads.
                let (result, args) = self.call(*f, *ks, args, e.pos, st, pc);
                if e.may_abort {
                    self.may_abort(e.pos, args, st, pc);
                }
                return result;
            }
        };
        if e.may_abort {
            self.may_abort(e.pos, l, st, pc);
        }
        l
    }

    /// The labels of the call's result and of its arguments.
    fn call(
        &mut self,
        f: Builtin,
        ks: u32,
        args: &[Expr],
        pos: Pos,
        st: &mut St,
        pc: Lab,
    ) -> (Lab, Lab) {
        let labels: Vec<Lab> = args.iter().map(|a| self.expr(a, st, pc)).collect();
        let joined = labels.iter().fold(None, |acc: Lab, l| acc.or(*l));
        (self.effect(f, ks, &labels, pos, st, pc), joined)
    }

    fn effect(
        &mut self,
        f: Builtin,
        ks: u32,
        labels: &[Lab],
        pos: Pos,
        st: &mut St,
        pc: Lab,
    ) -> Lab {
        let joined = labels.iter().fold(None, |acc: Lab, l| acc.or(*l));
        if !f.takes_keyspace() {
            return joined;
        }
        let name = self.ks_name(ks).to_owned();
        let strong = self.ks_label(ks) == Label::Strong;
        if f.writes() {
            self.fx.writes.insert(name.clone());
            if strong {
                self.fx.writes_strong = true;
                if !self.strong_writes.contains(&(pos, ks)) {
                    self.strong_writes.push((pos, ks));
                }
                let key = labels.first().copied().flatten();
                let value = labels.get(1).copied().flatten();
                let msg = if let Some(w) = key {
                    Some(format!(
                        "write to {name} (strong) uses a key that depends on weak data: {}",
                        self.describe(&w)
                    ))
                } else if let Some(w) = value {
                    Some(format!(
                        "write to {name} (strong) depends on weak data: {}",
                        self.describe(&w)
                    ))
                } else {
                    pc.or(st.term).map(|w| {
                        format!(
                            "write to {name} (strong) is controlled by weak data: {}",
                            self.describe(&w)
                        )
                    })
                };
                if let Some(m) = msg {
                    self.error(pos, m);
                }
            }
            None
        } else {
            self.fx.reads.insert(name);
            if strong {
                joined
            } else {
                Some(Why {
                    ks,
                    at: pos,
                    via: None,
                    ctrl: None,
                })
            }
        }
    }
}
