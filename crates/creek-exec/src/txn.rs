//! The transaction handle a procedure runs against.
//!
//! A [`Txn`] reads a snapshot through a [`SnapshotRead`] supplied by the
//! engine and buffers its writes; nothing reaches the store until the engine
//! installs the completed execution. Every read is recorded with the version it
//! saw, which is what lets the multiversion engine re-execute only the
//! executions whose reads changed (Creek paper §4.4).

use bytes::Bytes;

/// Identity of one installed version of a key. `VersionNo::ABSENT` is the
/// "never written" version; every installed write gets a fresh number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VersionNo(pub u64);

impl VersionNo {
    /// The version of a key nobody has written.
    pub const ABSENT: VersionNo = VersionNo(0);
}

/// Read access to one snapshot: the newest visible version of `key`.
pub trait SnapshotRead {
    /// The value (None for absent or deleted) and the identity of the version.
    fn read(&self, key: &[u8]) -> (Option<Bytes>, VersionNo);
}

/// Limits a transaction enforces; exceeding one aborts the execution
/// deterministically (same limits on every replica).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnLimits {
    /// Largest key, in bytes.
    pub key_bytes_max: usize,
    /// Largest value, in bytes.
    pub value_bytes_max: usize,
    /// Largest total of keys and values written by one execution, in bytes.
    pub write_bytes_max: usize,
}

impl Default for TxnLimits {
    fn default() -> Self {
        TxnLimits {
            key_bytes_max: 4 * 1024,
            value_bytes_max: 1024 * 1024,
            write_bytes_max: 8 * 1024 * 1024,
        }
    }
}

/// A deterministic user abort: the execution's writes are discarded and the
/// client gets this message as an error response.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Abort(pub String);

impl Abort {
    /// An abort with the given message.
    pub fn new(msg: impl Into<String>) -> Self {
        Abort(msg.into())
    }
}

impl std::fmt::Display for Abort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What one execution of a procedure answers: a result or a deterministic abort.
pub type Outcome = Result<Bytes, Abort>;

/// One write in an execution's write set; `None` deletes the key.
pub type Write = (Bytes, Option<Bytes>);

/// Something usable as a key: borrowed as bytes for lookups, turned into
/// shared bytes when a read must be remembered (`Bytes` without a copy).
pub trait KeyRef {
    /// The key's bytes.
    fn key_bytes(&self) -> &[u8];
    /// An owned copy (a reference-count increment for `Bytes`).
    fn to_key(&self) -> Bytes;
}

impl KeyRef for Bytes {
    fn key_bytes(&self) -> &[u8] {
        self
    }
    fn to_key(&self) -> Bytes {
        self.clone()
    }
}

impl KeyRef for [u8] {
    fn key_bytes(&self) -> &[u8] {
        self
    }
    fn to_key(&self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl<const N: usize> KeyRef for [u8; N] {
    fn key_bytes(&self) -> &[u8] {
        self
    }
    fn to_key(&self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl KeyRef for Vec<u8> {
    fn key_bytes(&self) -> &[u8] {
        self
    }
    fn to_key(&self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl KeyRef for str {
    fn key_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
    fn to_key(&self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }
}

/// The handle a procedure uses: snapshot reads, buffered writes.
pub struct Txn<'a> {
    snapshot: &'a dyn SnapshotRead,
    limits: TxnLimits,
    read_only: bool,
    reads: Vec<(Bytes, VersionNo)>,
    /// Buffered writes, one per key, in first-write order (transactions write
    /// few keys, so a vector beats a map here).
    writes: Vec<Write>,
    write_bytes: usize,
    violation: Option<Abort>,
}

impl<'a> Txn<'a> {
    /// A transaction over `snapshot`. A read-only transaction aborts on its
    /// first write.
    pub fn new(snapshot: &'a dyn SnapshotRead, limits: TxnLimits, read_only: bool) -> Self {
        Txn {
            snapshot,
            limits,
            read_only,
            reads: Vec::new(),
            writes: Vec::new(),
            write_bytes: 0,
            violation: None,
        }
    }

    /// The current value of `key`: this transaction's own write if any, else
    /// the snapshot's version (recorded in the read set).
    pub fn get<Q: KeyRef + ?Sized>(&mut self, key: &Q) -> Option<Bytes> {
        let bytes = key.key_bytes();
        if let Some((_, own)) = self.writes.iter().find(|(k, _)| k.as_ref() == bytes) {
            return own.clone();
        }
        let (value, version) = self.snapshot.read(bytes);
        if !self.reads.iter().any(|(k, _)| k.as_ref() == bytes) {
            self.reads.push((key.to_key(), version));
        }
        value
    }

    /// Write `value` under `key` (visible to later reads of this transaction).
    pub fn put(&mut self, key: impl Into<Bytes>, value: impl Into<Bytes>) {
        let (key, value) = (key.into(), value.into());
        if self.admit(&key, Some(&value)) {
            self.buffer(key, Some(value));
        }
    }

    /// Delete `key`.
    pub fn delete(&mut self, key: impl Into<Bytes>) {
        let key = key.into();
        if self.admit(&key, None) {
            self.buffer(key, None);
        }
    }

    fn buffer(&mut self, key: Bytes, value: Option<Bytes>) {
        match self.writes.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.writes.push((key, value)),
        }
    }

    fn admit(&mut self, key: &Bytes, value: Option<&Bytes>) -> bool {
        if self.violation.is_some() {
            return false;
        }
        let value_len = value.map_or(0, |v| v.len());
        self.violation = if self.read_only {
            Some(Abort::new("read-only procedure attempted a write"))
        } else if key.len() > self.limits.key_bytes_max {
            Some(Abort::new(format!(
                "key of {} bytes exceeds the limit of {}",
                key.len(),
                self.limits.key_bytes_max
            )))
        } else if value_len > self.limits.value_bytes_max {
            Some(Abort::new(format!(
                "value of {} bytes exceeds the limit of {}",
                value_len, self.limits.value_bytes_max
            )))
        } else if self.write_bytes + key.len() + value_len > self.limits.write_bytes_max {
            Some(Abort::new(format!(
                "transaction writes exceed the limit of {} bytes",
                self.limits.write_bytes_max
            )))
        } else {
            None
        };
        if self.violation.is_none() {
            self.write_bytes += key.len() + value_len;
        }
        self.violation.is_none()
    }

    /// Consume the transaction: the read set, the write set (empty when the
    /// procedure aborted or broke a limit) and the outcome.
    pub(crate) fn finish(self, result: Outcome) -> (Vec<(Bytes, VersionNo)>, Vec<Write>, Outcome) {
        let outcome = match (self.violation, result) {
            (Some(abort), _) => Err(abort),
            (None, r) => r,
        };
        let writes = if outcome.is_ok() {
            let mut w = self.writes;
            w.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            w
        } else {
            Vec::new()
        };
        (self.reads, writes, outcome)
    }
}
