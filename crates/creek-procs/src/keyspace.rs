//! Keyspaces as replicated state: where their definitions and their data
//! live among Creek's keys, and the [`lang::Store`] that user procedures
//! run against (DESIGN §14).
//!
//! Layout, all under the reserved first byte
//! [`crate::registry::INTERNAL_KEY_PREFIX`] (which the built-in `kv.*`,
//! `queue.*`, `list.*` and `set.*` procedures refuse, so a weak built-in
//! write never reaches a keyspace):
//!
//! | key                  | value                                   |
//! |----------------------|-----------------------------------------|
//! | `\0ksdef/NAME`       | the label: `s` (strong) or `w` (weak)   |
//! | `\0ks/NAME\0KEY`     | the value of user key `KEY` in `NAME`   |
//!
//! Names are identifiers (no NUL, no `/`), so the data of one keyspace is
//! one contiguous, order-preserving range and two keyspaces never overlap.
//! Definitions are ordinary versioned keys: every replica sees the same
//! keyspaces at the same point of the order, and checkpoints carry them.
//!
//! This module does not decide who may write a strong keyspace; the level
//! rule is applied in [`crate::user_procs`].

use bytes::{Bytes, BytesMut};

use crate::lang::{self, Label};
use creek_exec::txn::{Abort, Txn};

/// Prefix of keyspace definitions: `\0ksdef/NAME` → label byte.
pub const DEF_PREFIX: &[u8] = b"\0ksdef/";
/// Prefix of keyspace data: `\0ks/NAME\0KEY` → value.
pub const DATA_PREFIX: &[u8] = b"\0ks/";

/// The words of the language, which cannot name a keyspace or procedure
/// (a file could never refer to them).
const KEYWORDS: &[&str] = &[
    "keyspace", "proc", "let", "if", "else", "while", "for", "in", "return", "abort", "and", "or",
    "not", "true", "false", "nil",
];

/// Check that `name` can name a keyspace or a user procedure: ASCII
/// letters, digits and `_`, not starting with a digit, at most
/// [`lang::IDENT_BYTES_MAX`] bytes, not a keyword. Returns it as text.
pub fn check_name<'a>(what: &str, name: &'a [u8]) -> Result<&'a str, String> {
    let shown = String::from_utf8_lossy(name);
    let Some(first) = name.first() else {
        return Err(format!("{what} name is empty"));
    };
    if name.len() > lang::IDENT_BYTES_MAX {
        return Err(format!(
            "{what} name of {} bytes exceeds the limit of {}",
            name.len(),
            lang::IDENT_BYTES_MAX
        ));
    }
    let ident =
        !first.is_ascii_digit() && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_');
    let text = std::str::from_utf8(name).ok().filter(|_| ident);
    let Some(text) = text else {
        return Err(format!(
            "{what} name {shown:?} is not a name (ASCII letters, digits and _, not starting with a digit)"
        ));
    };
    if KEYWORDS.contains(&text) {
        return Err(format!("{what} name {shown:?} is a keyword"));
    }
    Ok(text)
}

/// The byte a label is stored as.
pub fn label_byte(label: Label) -> u8 {
    match label {
        Label::Strong => b's',
        Label::Weak => b'w',
    }
}

/// The label stored as `b`, if it is one.
pub fn label_from_byte(b: &[u8]) -> Option<Label> {
    match b {
        b"s" => Some(Label::Strong),
        b"w" => Some(Label::Weak),
        _ => None,
    }
}

/// `strong` or `weak` as a label.
pub fn parse_label(text: &[u8]) -> Option<Label> {
    match text {
        b"strong" => Some(Label::Strong),
        b"weak" => Some(Label::Weak),
        _ => None,
    }
}

/// The key of `name`'s definition.
pub fn def_key(name: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(DEF_PREFIX.len() + name.len());
    k.extend_from_slice(DEF_PREFIX);
    k.extend_from_slice(name.as_bytes());
    k.freeze()
}

/// The prefix of `name`'s data: `\0ks/NAME\0`.
pub fn data_prefix(name: &str) -> BytesMut {
    let mut k = BytesMut::with_capacity(DATA_PREFIX.len() + name.len() + 1);
    k.extend_from_slice(DATA_PREFIX);
    k.extend_from_slice(name.as_bytes());
    k.extend_from_slice(&[0]);
    k
}

/// The internal key of user key `key` in keyspace `name`.
pub fn data_key(name: &str, key: &[u8]) -> Bytes {
    let mut k = data_prefix(name);
    k.extend_from_slice(key);
    k.freeze()
}

/// The label of keyspace `name` as `txn` sees it (the read is recorded).
/// `Err` if the stored definition is not a label (only a bug or a foreign
/// write under the reserved prefix can do that).
pub fn read_label(txn: &mut Txn<'_>, name: &str) -> Result<Option<Label>, Abort> {
    match txn.get(&def_key(name)) {
        None => Ok(None),
        Some(b) => label_from_byte(&b)
            .map(Some)
            .ok_or_else(|| Abort::new(format!("keyspace {name}: corrupt definition {b:?}"))),
    }
}

/// Every keyspace definition `txn` sees, by name (a range read, so a new
/// keyspace invalidates the reader).
pub fn list(txn: &mut Txn<'_>, limit: usize) -> Vec<(Bytes, Bytes)> {
    let (from, to) = prefix_range(DEF_PREFIX);
    txn.scan(&from, &to, limit)
        .into_iter()
        .filter_map(|(k, v)| {
            let name = k.get(DEF_PREFIX.len()..)?;
            Some((Bytes::copy_from_slice(name), v))
        })
        .collect()
}

/// `[prefix, successor)`: every key starting with `prefix`, whose last byte
/// must be below 0xff (true of the `/`-terminated prefixes here).
pub fn prefix_range(prefix: &[u8]) -> (Bytes, Bytes) {
    let mut to = prefix.to_vec();
    if let Some(last) = to.last_mut() {
        *last = last.saturating_add(1);
    }
    (Bytes::copy_from_slice(prefix), Bytes::from(to))
}

/// A [`lang::Store`] over a transaction: keyspace `ks`, key `k` is the
/// internal key `\0ks/ks\0k`. Reads and writes go through the [`Txn`], so
/// they are recorded and limited like any procedure's; a write by a
/// read-only procedure (which the compiler never produces) aborts.
pub struct TxnStore<'t, 'a> {
    txn: &'t mut Txn<'a>,
    read_only: bool,
    violation: Option<Abort>,
}

impl<'t, 'a> TxnStore<'t, 'a> {
    /// A store over `txn`; `read_only` refuses writes.
    pub fn new(txn: &'t mut Txn<'a>, read_only: bool) -> Self {
        TxnStore {
            txn,
            read_only,
            violation: None,
        }
    }

    /// What the store refused, if anything: the execution must abort with
    /// it whatever the procedure returned.
    pub fn into_violation(self) -> Option<Abort> {
        self.violation
    }

    fn admit_write(&mut self, ks: &str) -> bool {
        if self.read_only && self.violation.is_none() {
            self.violation = Some(Abort::new(format!(
                "read-only procedure attempted a write to {ks}"
            )));
        }
        self.violation.is_none()
    }
}

impl lang::Store for TxnStore<'_, '_> {
    fn get(&mut self, ks: &str, key: &[u8]) -> Option<Bytes> {
        self.txn.get(&data_key(ks, key))
    }

    fn put(&mut self, ks: &str, key: Bytes, value: Bytes) {
        if self.admit_write(ks) {
            self.txn.put(data_key(ks, &key), value);
        }
    }

    fn delete(&mut self, ks: &str, key: Bytes) {
        if self.admit_write(ks) {
            self.txn.delete(data_key(ks, &key));
        }
    }

    /// `[from, to)` of `ks` is `[\0ks/ks\0from, \0ks/ks\0to)`; the limit is
    /// clamped to the transaction's `crate::TxnLimits::scan_items_max`.
    fn scan(&mut self, ks: &str, from: &[u8], to: &[u8], limit: usize) -> Vec<(Bytes, Bytes)> {
        let prefix = data_prefix(ks).freeze();
        let (lo, hi) = (data_key(ks, from), data_key(ks, to));
        self.txn
            .scan(&lo, &hi, limit)
            .into_iter()
            .filter_map(|(k, v)| {
                let inside = k.starts_with(&prefix);
                debug_assert!(inside, "scan left keyspace {ks}");
                inside.then(|| (k.slice(prefix.len()..), v))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_identifiers() {
        assert_eq!(check_name("keyspace", b"inbox_2"), Ok("inbox_2"));
        for bad in [
            &b""[..],
            b"2x",
            b"a-b",
            b"a/b",
            b"a\0b",
            b"\xff",
            b"proc",
            b"nil",
        ] {
            assert!(check_name("keyspace", bad).is_err(), "{bad:?}");
        }
        let long = vec![b'a'; lang::IDENT_BYTES_MAX + 1];
        assert!(check_name("keyspace", &long).is_err());
    }

    #[test]
    fn keyspaces_are_disjoint_ordered_ranges() {
        // A user key of `a` never sorts into `ab`, whatever its bytes.
        let a_max = data_key("a", &[0xff; 8]);
        let ab_min = data_key("ab", b"");
        assert!(a_max < ab_min);
        assert!(!a_max.starts_with(&data_prefix("ab")) && !ab_min.starts_with(&data_prefix("a")));
        assert!(data_key("a", b"x") < data_key("a", b"y"));
        assert!(data_key("a", b"x") < data_key("a", b"x\0"));
        let (from, to) = prefix_range(DEF_PREFIX);
        assert!(from.as_ref() <= def_key("z").as_ref() && def_key("z") < to);
        assert!(data_key("z", b"") >= to || data_key("z", b"") < from);
    }
}
