//! Tokens to a parse tree, by recursive descent. Recursion is bounded by
//! [`NESTING_MAX`] and expression trees by [`EXPR_HEIGHT_MAX`], so no input
//! can overflow the stack; the parser never panics.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::ast::{BinOp, Expr, ExprKind, File, KeyParam, KsDecl, Param, ProcDecl, Stmt, Ty};
use super::error::{CompileError, Pos};
use super::lexer::{Lexed, Tok};
use super::{Label, EXPR_HEIGHT_MAX, NESTING_MAX};

type Res<T> = Result<T, CompileError>;

struct Parser {
    toks: Vec<(Tok, Pos)>,
    i: usize,
    depth: usize,
    comments: BTreeMap<u32, String>,
}

/// Parse a whole file. Syntax errors are collected one per item: after an
/// error the parser skips to the next `proc` or `keyspace`.
pub(crate) fn parse(lexed: Lexed) -> (File, Vec<CompileError>) {
    let mut p = Parser {
        toks: lexed.toks,
        i: 0,
        depth: 0,
        comments: lexed.comment_lines.into_iter().collect(),
    };
    let mut file = File {
        keyspaces: Vec::new(),
        procs: Vec::new(),
    };
    let mut errors = Vec::new();
    loop {
        p.depth = 0;
        let res = match p.peek() {
            Tok::Eof => break,
            Tok::Keyspace => p.keyspace().map(|k| file.keyspaces.push(k)),
            Tok::Proc => p.proc().map(|d| file.procs.push(d)),
            other => Err(CompileError::new(
                p.pos(),
                format!("expected `keyspace` or `proc`, found {}", other.describe()),
            )),
        };
        if let Err(e) = res {
            errors.push(e);
            p.i += 1;
            while !matches!(p.peek(), Tok::Eof | Tok::Proc | Tok::Keyspace) {
                p.i += 1;
            }
        }
    }
    (file, errors)
}

impl Parser {
    fn peek(&self) -> &Tok {
        self.toks.get(self.i).map_or(&Tok::Eof, |t| &t.0)
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        self.toks.get(self.i + ahead).map_or(&Tok::Eof, |t| &t.0)
    }

    fn pos(&self) -> Pos {
        match self.toks.get(self.i).or_else(|| self.toks.last()) {
            Some(t) => t.1,
            None => Pos::default(),
        }
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.i < self.toks.len() {
            self.i += 1;
        }
        t
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == t {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: &Tok, what: &str) -> Res<()> {
        if self.eat(t) {
            Ok(())
        } else {
            Err(self.unexpected(what))
        }
    }

    fn unexpected(&self, what: &str) -> CompileError {
        CompileError::new(
            self.pos(),
            format!("expected {what}, found {}", self.peek().describe()),
        )
    }

    fn ident(&mut self, what: &str) -> Res<(String, Pos)> {
        let pos = self.pos();
        match self.peek() {
            Tok::Ident(s) => {
                let s = s.clone();
                self.i += 1;
                Ok((s, pos))
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn enter(&mut self) -> Res<()> {
        self.depth += 1;
        if self.depth > NESTING_MAX {
            return Err(CompileError::new(
                self.pos(),
                format!("nested more than {NESTING_MAX} levels deep"),
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    fn ty(&mut self) -> Res<Ty> {
        if self.eat(&Tok::Nil) {
            return Ok(Ty::Nil);
        }
        let (name, pos) = self.ident("a type")?;
        Ty::from_name(&name).ok_or_else(|| {
            CompileError::new(
                pos,
                format!("unknown type `{name}` (types: int, bytes, bool, list, any, nil)"),
            )
        })
    }

    /// `name: type`, where the type may also be `key(KEYSPACE)` or
    /// `prefix(KEYSPACE)` (bytes, declared a key or a key prefix).
    fn param(&mut self) -> Res<Param> {
        let (name, pos) = self.ident("a parameter name")?;
        self.expect(&Tok::Colon, "`:` and a type")?;
        let declares = match self.peek() {
            Tok::Ident(t) if matches!(self.peek_at(1), Tok::LParen) => match t.as_str() {
                "key" => Some(false),
                "prefix" => Some(true),
                _ => None,
            },
            _ => None,
        };
        let Some(prefix) = declares else {
            let ty = self.ty().map_err(|mut e| {
                if e.message.starts_with("unknown type") && e.message.pop() == Some(')') {
                    e.message
                        .push_str("; a parameter may also be key(KEYSPACE) or prefix(KEYSPACE))");
                }
                e
            })?;
            return Ok(Param {
                name,
                ty,
                key: None,
                pos,
            });
        };
        self.next();
        self.next();
        let (keyspace, _) = self.ident("a keyspace name")?;
        self.expect(&Tok::RParen, "`)`")?;
        Ok(Param {
            name,
            ty: Ty::Bytes,
            key: Some(KeyParam { keyspace, prefix }),
            pos,
        })
    }

    fn keyspace(&mut self) -> Res<KsDecl> {
        self.expect(&Tok::Keyspace, "`keyspace`")?;
        let (name, pos) = self.ident("a keyspace name")?;
        self.expect(&Tok::Colon, "`:`")?;
        let (label, lpos) = self.ident("`strong` or `weak`")?;
        let label = match label.as_str() {
            "strong" => Label::Strong,
            "weak" => Label::Weak,
            _ => return Err(CompileError::new(lpos, "expected `strong` or `weak`")),
        };
        Ok(KsDecl { name, label, pos })
    }

    fn summary(&self, line: u32) -> String {
        let mut lines = Vec::new();
        let mut l = line;
        while l > 1 {
            l -= 1;
            match self.comments.get(&l) {
                Some(text) => lines.push(text.as_str()),
                None => break,
            }
        }
        lines.reverse();
        lines.join(" ")
    }

    fn proc(&mut self) -> Res<ProcDecl> {
        let start = self.pos();
        self.expect(&Tok::Proc, "`proc`")?;
        let (name, pos) = self.ident("a procedure name")?;
        self.expect(&Tok::LParen, "`(`")?;
        let mut params = Vec::new();
        if !self.eat(&Tok::RParen) {
            loop {
                params.push(self.param()?);
                if self.eat(&Tok::RParen) {
                    break;
                }
                self.expect(&Tok::Comma, "`,` or `)`")?;
            }
        }
        let ret = if self.eat(&Tok::Arrow) {
            self.ty()?
        } else {
            Ty::Nil
        };
        let body = self.block()?;
        Ok(ProcDecl {
            summary: self.summary(start.line),
            name,
            pos,
            params,
            ret,
            body,
        })
    }

    fn block(&mut self) -> Res<Vec<Stmt>> {
        self.enter()?;
        self.expect(&Tok::LBrace, "`{`")?;
        let mut out = Vec::new();
        while !self.eat(&Tok::RBrace) {
            if self.eat(&Tok::Semi) {
                continue;
            }
            out.push(self.stmt()?);
        }
        self.leave();
        Ok(out)
    }

    fn stmt(&mut self) -> Res<Stmt> {
        let pos = self.pos();
        match self.peek() {
            Tok::Let => {
                self.i += 1;
                let (name, pos) = self.ident("a variable name")?;
                let ty = if self.eat(&Tok::Colon) {
                    Some(self.ty()?)
                } else {
                    None
                };
                self.expect(&Tok::Assign, "`=`")?;
                let value = self.expr()?;
                Ok(Stmt::Let {
                    name,
                    ty,
                    value,
                    pos,
                })
            }
            Tok::Ident(_) if self.peek_at(1) == &Tok::Assign => {
                let (name, pos) = self.ident("a variable name")?;
                self.i += 1;
                let value = self.expr()?;
                Ok(Stmt::Assign { name, value, pos })
            }
            Tok::If => self.if_stmt(),
            Tok::While => {
                self.i += 1;
                let cond = self.expr()?;
                let body = self.block()?;
                Ok(Stmt::While { cond, body, pos })
            }
            Tok::For => {
                self.i += 1;
                let vars = if self.eat(&Tok::LParen) {
                    let k = self.ident("a variable name")?;
                    self.expect(&Tok::Comma, "`,`")?;
                    let v = self.ident("a variable name")?;
                    self.expect(&Tok::RParen, "`)`")?;
                    vec![k, v]
                } else {
                    vec![self.ident("a variable name or `(`")?]
                };
                self.expect(&Tok::In, "`in`")?;
                let list = self.expr()?;
                let body = self.block()?;
                Ok(Stmt::For {
                    vars,
                    list,
                    body,
                    pos,
                })
            }
            Tok::Return => {
                self.i += 1;
                let value = if matches!(self.peek(), Tok::RBrace | Tok::Semi) {
                    None
                } else {
                    Some(self.expr()?)
                };
                Ok(Stmt::Return { value, pos })
            }
            Tok::Abort => {
                self.i += 1;
                let msg = self.expr()?;
                Ok(Stmt::Abort { msg, pos })
            }
            _ => {
                let e = self.expr()?;
                if matches!(e.kind, ExprKind::Call(..)) {
                    Ok(Stmt::Expr(e))
                } else {
                    Err(CompileError::new(
                        e.pos,
                        "only a call can stand alone as a statement",
                    ))
                }
            }
        }
    }

    fn if_stmt(&mut self) -> Res<Stmt> {
        self.enter()?;
        let pos = self.pos();
        self.expect(&Tok::If, "`if`")?;
        let cond = self.expr()?;
        let then = self.block()?;
        let els = if self.eat(&Tok::Else) {
            if self.peek() == &Tok::If {
                vec![self.if_stmt()?]
            } else {
                self.block()?
            }
        } else {
            Vec::new()
        };
        self.leave();
        Ok(Stmt::If {
            cond,
            then,
            els,
            pos,
        })
    }

    fn expr(&mut self) -> Res<Expr> {
        self.enter()?;
        let e = self.binary(0)?;
        self.leave();
        Ok(e)
    }

    fn bin_op(&self, level: u8) -> Option<BinOp> {
        let op = match (level, self.peek()) {
            (0, Tok::Or) => BinOp::Or,
            (1, Tok::And) => BinOp::And,
            (3, Tok::EqEq) => BinOp::Eq,
            (3, Tok::Ne) => BinOp::Ne,
            (3, Tok::Lt) => BinOp::Lt,
            (3, Tok::Le) => BinOp::Le,
            (3, Tok::Gt) => BinOp::Gt,
            (3, Tok::Ge) => BinOp::Ge,
            (4, Tok::Plus) => BinOp::Add,
            (4, Tok::Minus) => BinOp::Sub,
            (4, Tok::Concat) => BinOp::Concat,
            (5, Tok::Star) => BinOp::Mul,
            (5, Tok::Slash) => BinOp::Div,
            (5, Tok::Percent) => BinOp::Mod,
            _ => return None,
        };
        Some(op)
    }

    /// Levels: 0 `or`, 1 `and`, 2 `not` (looser than comparisons, as in
    /// Python: `not x == nil` is `not (x == nil)`), 3 comparisons (not
    /// chained), 4 `+ - ++`, 5 `* / %`, then unary minus and postfix
    /// indexing.
    fn binary(&mut self, level: u8) -> Res<Expr> {
        if level > 5 {
            return self.unary();
        }
        if level == 2 {
            return self.not();
        }
        let mut lhs = self.binary(level + 1)?;
        while let Some(op) = self.bin_op(level) {
            let pos = self.pos();
            self.i += 1;
            let rhs = self.binary(level + 1)?;
            lhs = self.node(ExprKind::Bin(op, Box::new(lhs), Box::new(rhs)), pos)?;
            if level == 3 && self.bin_op(3).is_some() {
                return Err(CompileError::new(
                    self.pos(),
                    "comparisons do not chain; use `and`",
                ));
            }
        }
        Ok(lhs)
    }

    fn node(&self, kind: ExprKind, pos: Pos) -> Res<Expr> {
        let e = Expr::new(kind, pos);
        if e.height as usize > EXPR_HEIGHT_MAX {
            return Err(CompileError::new(
                pos,
                format!("expression nested more than {EXPR_HEIGHT_MAX} levels deep"),
            ));
        }
        Ok(e)
    }

    fn not(&mut self) -> Res<Expr> {
        if self.peek() != &Tok::Not {
            return self.binary(3);
        }
        self.enter()?;
        let pos = self.pos();
        self.i += 1;
        let x = self.not()?;
        let e = self.node(ExprKind::Not(Box::new(x)), pos)?;
        self.leave();
        Ok(e)
    }

    fn unary(&mut self) -> Res<Expr> {
        self.enter()?;
        let pos = self.pos();
        let e = match self.peek() {
            Tok::Minus => {
                self.i += 1;
                if self.peek() == &Tok::Int(1 << 63) {
                    self.i += 1;
                    self.node(ExprKind::Int(i64::MIN), pos)?
                } else {
                    let x = self.unary()?;
                    self.node(ExprKind::Neg(Box::new(x)), pos)?
                }
            }
            _ => self.postfix()?,
        };
        self.leave();
        Ok(e)
    }

    fn postfix(&mut self) -> Res<Expr> {
        let mut e = self.primary()?;
        while self.peek() == &Tok::LBracket {
            let pos = self.pos();
            self.i += 1;
            let idx = self.expr()?;
            self.expect(&Tok::RBracket, "`]`")?;
            e = self.node(ExprKind::Index(Box::new(e), Box::new(idx)), pos)?;
        }
        Ok(e)
    }

    fn list(&mut self, close: &Tok) -> Res<Vec<Expr>> {
        let mut items = Vec::new();
        if self.eat(close) {
            return Ok(items);
        }
        loop {
            items.push(self.expr()?);
            if self.eat(close) {
                return Ok(items);
            }
            self.expect(&Tok::Comma, &format!("`,` or {}", close.describe()))?;
        }
    }

    fn primary(&mut self) -> Res<Expr> {
        let pos = self.pos();
        let kind = match self.next() {
            Tok::Int(n) => match i64::try_from(n) {
                Ok(n) => ExprKind::Int(n),
                Err(_) => return Err(CompileError::new(pos, "integer literal out of range")),
            },
            Tok::Str(s) => ExprKind::Str(Bytes::from(s)),
            Tok::True => ExprKind::Bool(true),
            Tok::False => ExprKind::Bool(false),
            Tok::Nil => ExprKind::Nil,
            Tok::Ident(name) => {
                if self.eat(&Tok::LParen) {
                    ExprKind::Call(name, self.list(&Tok::RParen)?)
                } else {
                    ExprKind::Var(name)
                }
            }
            Tok::LParen => {
                let e = self.expr()?;
                self.expect(&Tok::RParen, "`)`")?;
                return Ok(e);
            }
            Tok::LBracket => ExprKind::List(self.list(&Tok::RBracket)?),
            _ => {
                self.i = self.i.saturating_sub(1);
                return Err(self.unexpected("an expression"));
            }
        };
        self.node(kind, pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::lexer::lex;

    fn parse_src(src: &str) -> (File, Vec<CompileError>) {
        match lex(src) {
            Ok(l) => parse(l),
            Err(e) => panic!("lex error {e}"),
        }
    }

    fn first_return(src: &str) -> Expr {
        let (mut f, errs) = parse_src(src);
        assert!(errs.is_empty(), "{errs:?}");
        let body = f.procs.pop().map(|p| p.body).unwrap_or_default();
        match body.into_iter().next() {
            Some(Stmt::Return { value: Some(e), .. }) => e,
            _ => panic!("no return"),
        }
    }

    /// The tree as a parenthesised string.
    fn show(e: &Expr) -> String {
        match &e.kind {
            ExprKind::Int(n) => n.to_string(),
            ExprKind::Var(v) => v.clone(),
            ExprKind::Bin(op, a, b) => format!("({} {} {})", show(a), op.symbol(), show(b)),
            ExprKind::Not(x) => format!("(not {})", show(x)),
            ExprKind::Neg(x) => format!("(-{})", show(x)),
            ExprKind::Index(a, i) => format!("{}[{}]", show(a), show(i)),
            _ => "?".to_owned(),
        }
    }

    #[test]
    fn precedence_and_associativity() {
        let e = first_return("proc p() { return a or b and not c == d + e * -f[g] - h }");
        assert_eq!(
            show(&e),
            "(a or (b and (not (c == ((d + (e * (-f[g]))) - h)))))"
        );
        let e = first_return("proc p() { return not not a and b }");
        assert_eq!(show(&e), "((not (not a)) and b)");
        let e = first_return("proc p() { return a - b - c ++ d }");
        assert_eq!(show(&e), "(((a - b) - c) ++ d)");
        assert_eq!(e.height, 4);
    }

    #[test]
    fn else_if_nests_and_summaries_come_from_comments() {
        let (f, errs) = parse_src("# One.\n# Two.\nproc p() { if a { } else if b { } else { } }");
        assert!(errs.is_empty());
        let p = f.procs.first().unwrap_or_else(|| panic!("no proc"));
        assert_eq!(p.summary, "One. Two.");
        let Some(Stmt::If { els, .. }) = p.body.first() else {
            panic!("no if")
        };
        assert!(matches!(els.as_slice(), [Stmt::If { els, .. }] if els.is_empty()));
    }

    #[test]
    fn recovery_skips_to_the_next_item() {
        let (f, errs) = parse_src("proc a( {\nproc b() { }\nkeyspace k: weak\nproc c() { let }");
        assert_eq!(errs.len(), 2);
        assert_eq!(f.procs.len(), 1);
        assert_eq!(f.keyspaces.len(), 1);
    }
}
