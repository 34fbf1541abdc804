//! The built-in functions.

use bytes::Bytes;

use super::error::Pos;
use super::interp::{ks_name, parse_int, Run, R};
use super::ir::{Builtin, Expr, ExprKind};
use super::val::Val;
use super::SCAN_LIMIT_MAX;

/// In the message of a procedure's access to a key its declared key
/// parameters do not cover.
pub const OUTSIDE_DECLARED: &str = "is outside the keys the procedure declares";

/// A key as messages show it: quoted, at most 40 characters.
fn shown(key: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(key).chars().take(40).collect();
    format!("{text:?}")
}

impl Run<'_> {
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

    pub(super) fn call(&mut self, f: Builtin, ks: u32, args: &[Expr], pos: Pos) -> R<Val> {
        let name = f.name();
        match f {
            Builtin::Get => self.get(ks, args, pos),
            Builtin::Put => {
                let key = self.bytes(self.arg(args, 0, pos)?, "a key")?;
                let value = self.bytes(self.arg(args, 1, pos)?, "a value")?;
                self.declares(f, ks, &key, pos)?;
                let ks = ks_name(self.ir, ks);
                self.store.put(ks, key, value);
                Ok(Val::Nil)
            }
            Builtin::Delete => {
                let key = self.bytes(self.arg(args, 0, pos)?, "a key")?;
                self.declares(f, ks, &key, pos)?;
                let ks = ks_name(self.ir, ks);
                self.store.delete(ks, key);
                Ok(Val::Nil)
            }
            Builtin::Scan => self.scan(ks, args, pos),
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
            Builtin::Int => self.int_of(args, pos),
            Builtin::Str => {
                let n = self.int(self.arg(args, 0, pos)?, "str's argument")?;
                let s = n.to_string();
                self.charge(s.len() as u64, pos)?;
                Ok(Val::Bytes(Bytes::from(s)))
            }
            Builtin::Append => self.append(args, pos),
            Builtin::Slice => self.slice(args, pos, name),
        }
    }

    /// With declared key parameters, abort unless one of them covers
    /// `key` of keyspace `ks` (`f` names the access in the message).
    fn declares(&self, f: Builtin, ks: u32, key: &[u8], pos: Pos) -> R<()> {
        if self.declared.is_empty() {
            return Ok(());
        }
        let ksn = self.ks_name(ks);
        if self
            .declared
            .iter()
            .any(|d| d.key.covers_key(&d.arg, ksn, key))
        {
            return Ok(());
        }
        Err(self.fail(
            pos,
            format!(
                "{} of key {} in keyspace {ksn} {OUTSIDE_DECLARED} ({})",
                f.name(),
                shown(key),
                self.declarations()
            ),
        ))
    }

    /// The declared key parameters with their arguments, for a message.
    fn declarations(&self) -> String {
        let each = self
            .declared
            .iter()
            .map(|d| format!("{}: {} = {}", d.name, d.key.type_name(), shown(&d.arg)));
        each.collect::<Vec<_>>().join(", ")
    }

    /// `get(key)`: the value, or nil.
    fn get(&mut self, ks: u32, args: &[Expr], pos: Pos) -> R<Val> {
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
                if !self.declared.is_empty() {
                    let key = Bytes::copy_from_slice(key);
                    self.declares(Builtin::Get, ks, &key, pos)?;
                    self.store.get(ks_name(self.ir, ks), &key)
                } else {
                    store.get(ks_name(ir, ks), key)
                }
            }
            None => {
                let key = self.bytes(arg, "a key")?;
                self.declares(Builtin::Get, ks, &key, pos)?;
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

    /// `scan(from, to, limit)`: `[key, value]` pairs in the range.
    fn scan(&mut self, ks: u32, args: &[Expr], pos: Pos) -> R<Val> {
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
        if !self.declared.is_empty()
            && !self
                .declared
                .iter()
                .any(|d| d.key.covers_range(&d.arg, &ksn, &from, &to))
        {
            return Err(self.fail(
                pos,
                format!(
                    "scan of keyspace {ksn} from {} to {} is outside the keys the procedure \
                     declares ({}): a scan needs a prefix(KEYSPACE) parameter whose keys hold \
                     its whole range",
                    shown(&from),
                    shown(&to),
                    self.declarations()
                ),
            ));
        }
        let found = self.store.scan(&ksn, &from, &to, limit as usize);
        let mut items = Vec::with_capacity(found.len().min(limit as usize));
        for (k, v) in found.into_iter().take(limit as usize) {
            self.tick(pos)?;
            self.charge((k.len() + v.len()) as u64, pos)?;
            items.push(self.list(vec![Val::Bytes(k), Val::Bytes(v)], pos)?);
        }
        self.list(items, pos)
    }

    /// `int(bytes)`: a decimal integer.
    fn int_of(&mut self, args: &[Expr], pos: Pos) -> R<Val> {
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

    /// `append(list, v)`: a new list.
    fn append(&mut self, args: &[Expr], pos: Pos) -> R<Val> {
        let list = match self.eval(self.arg(args, 0, pos)?)? {
            Val::List(l) => l,
            other => {
                return Err(self.fail(pos, format!("append needs a list, got {}", other.kind())))
            }
        };
        let v = self.eval(self.arg(args, 1, pos)?)?;
        let mut items = Vec::with_capacity(list.items.len() + 1);
        items.extend(list.items.iter().cloned());
        items.push(v);
        self.list(items, pos)
    }

    /// `slice(x, from, to)` of bytes or a list.
    fn slice(&mut self, args: &[Expr], pos: Pos, name: &str) -> R<Val> {
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
