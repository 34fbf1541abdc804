//! The transaction handle a procedure runs against.
//!
//! A [`Txn`] reads a snapshot through a [`SnapshotRead`] supplied by the
//! engine and buffers its writes; nothing reaches the store until the engine
//! installs the completed execution. Every read is recorded with the version it
//! saw, which is what lets the multiversion engine re-execute only the
//! executions whose reads changed (Creek paper §4.4). A range read
//! ([`Txn::scan`]) is recorded twice: each key it returns as a point read, and
//! the range itself as a [`ScanRead`], so that a key appearing in or vanishing
//! from the range (a phantom) invalidates the reader too (DESIGN §14).

use std::cmp::Ordering;

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

    /// Append to `out` the live (not deleted) keys of `[from, to)` in
    /// ascending byte order, each with its value and version, stopping after
    /// `limit` of them. Appends nothing when `from >= to` (never panics).
    /// Each appended entry must agree with [`SnapshotRead::read`] of its key.
    fn scan(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes, VersionNo)>);
    /// Like [`SnapshotRead::scan`], from the end of `[from, to)` down:
    /// the *last* `limit` live keys of the range, in descending order.
    /// The default scans the whole range forward and keeps its tail;
    /// snapshots with an ordered index go backwards instead.
    fn scan_rev(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        out: &mut Vec<(Bytes, Bytes, VersionNo)>,
    ) {
        let mut all = Vec::new();
        self.scan(from, to, usize::MAX, &mut all);
        let skip = all.len().saturating_sub(limit);
        out.extend(all.into_iter().skip(skip).rev());
    }
}

/// One range read of an execution, as the multiversion engine must re-check
/// it: the snapshot's live keys in `[from, to)` when the scan was made.
///
/// When the scan returned `limit` items, the range ends just after the last
/// key it returned (`to` is that key with a zero byte appended, its
/// successor in byte order): keys beyond it could not change the result.
/// `keys` also holds the keys the transaction's own writes replaced or hid,
/// since the snapshot is what the engine can compare; their values are not
/// recorded (the keys the scan returned from the snapshot are point reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanRead {
    /// First key of the range (inclusive).
    pub from: Bytes,
    /// End of the range (exclusive).
    pub to: Bytes,
    /// The snapshot's live keys in the range, strictly ascending.
    pub keys: Vec<Bytes>,
}

impl ScanRead {
    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.from.as_ref() <= key && key < self.to.as_ref()
    }

    /// Whether the snapshot held `key` live when the scan was made (`key`
    /// must lie in the range).
    pub fn saw_live(&self, key: &[u8]) -> bool {
        self.keys.binary_search_by(|k| k.as_ref().cmp(key)).is_ok()
    }
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
    /// Most items one [`Txn::scan`] returns; a larger `limit` is clamped to
    /// it (not an abort: a procedure asking for "everything" gets a bounded
    /// page and can continue from its last key).
    pub scan_items_max: usize,
}

impl Default for TxnLimits {
    fn default() -> Self {
        TxnLimits {
            key_bytes_max: 4 * 1024,
            value_bytes_max: 1024 * 1024,
            write_bytes_max: 8 * 1024 * 1024,
            scan_items_max: 10_000,
        }
    }
}

/// A deterministic user abort: the execution's writes are discarded and the
/// client gets this message as an error response.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Abort(pub String);

/// In the message of an execution that went past a bound (the
/// [`TxnLimits`], and the procedures' own: keys per call, roles per user).
pub const OVER_LIMIT: &str = "the limit of";

/// The message of a read-only procedure's execution that wrote.
pub const READ_ONLY_WRITE: &str = "read-only procedure attempted a write";

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
    /// Point reads made by scans, merged into `reads` at the end (a scan
    /// returns up to thousands of keys: checking each against `reads` one by
    /// one, as `get` does, would cost quadratic time).
    scan_reads: Vec<(Bytes, VersionNo)>,
    /// Ranges read by scans.
    scans: Vec<ScanRead>,
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
            scan_reads: Vec::new(),
            scans: Vec::new(),
            writes: Vec::new(),
            write_bytes: 0,
            violation: None,
        }
    }

    /// The limits this transaction enforces.
    pub fn limits(&self) -> TxnLimits {
        self.limits
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

    /// The live keys of `[from, to)` with their values, in ascending byte
    /// order, at most `limit` of them (clamped to
    /// [`TxnLimits::scan_items_max`]), as this transaction sees them: the
    /// snapshot with its own writes applied (own puts appear, own deletes
    /// hide). An empty or inverted range, or a zero limit, returns nothing.
    ///
    /// Recorded in the read set: every key returned from the snapshot as a
    /// point read, and the range as a [`ScanRead`] — `[from, to)` when fewer
    /// than `limit` items came back, else up to and including the last key
    /// returned.
    pub fn scan(&mut self, from: &[u8], to: &[u8], limit: usize) -> Vec<(Bytes, Bytes)> {
        self.scan_in(from, to, limit, false)
    }

    /// The *last* `limit` live keys of `[from, to)` with their values, in
    /// descending order: [`Txn::scan`] from the end of the range down.
    /// Recorded like it: every key returned from the snapshot as a point
    /// read, and the range as a [`ScanRead`] — `[from, to)` when fewer
    /// than `limit` items came back, else from the last (least) key
    /// returned up to `to`.
    pub fn scan_rev(&mut self, from: &[u8], to: &[u8], limit: usize) -> Vec<(Bytes, Bytes)> {
        self.scan_in(from, to, limit, true)
    }

    /// [`Txn::scan`] (`reverse`: [`Txn::scan_rev`]).
    fn scan_in(
        &mut self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        reverse: bool,
    ) -> Vec<(Bytes, Bytes)> {
        let limit = limit.min(self.limits.scan_items_max);
        if from >= to || limit == 0 {
            return Vec::new();
        }
        // The order the page goes in: ascending, or descending.
        let order = |a: &[u8], b: &[u8]| if reverse { b.cmp(a) } else { a.cmp(b) };
        let in_range = |k: &[u8]| from <= k && k < to;
        let mut own: Vec<&Write> = self.writes.iter().filter(|(k, _)| in_range(k)).collect();
        own.sort_unstable_by(|a, b| order(&a.0, &b.0));
        // Each own delete hides at most one snapshot key, so this many
        // snapshot items always fill `limit` when the range holds enough.
        let hidden = own.iter().filter(|(_, v)| v.is_none()).count();
        let mut snap = Vec::new();
        let want = limit.saturating_add(hidden);
        if reverse {
            self.snapshot.scan_rev(from, to, want, &mut snap);
        } else {
            self.snapshot.scan(from, to, want, &mut snap);
        }
        debug_assert!(
            snap.windows(2)
                .all(|w| order(&w[0].0, &w[1].0) == Ordering::Less),
            "snapshot scan out of order"
        );
        debug_assert!(
            snap.iter().all(|(k, _, _)| in_range(k)),
            "snapshot scan out of range"
        );
        let mut out = Vec::new();
        let (mut s, mut o) = (snap.iter().peekable(), own.iter().peekable());
        while out.len() < limit {
            let next = match (s.peek(), o.peek()) {
                (None, None) => break,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((sk, _, _)), Some((ok, _))) => order(sk, ok),
            };
            if next == Ordering::Less {
                if let Some((k, v, no)) = s.next() {
                    self.scan_reads.push((k.clone(), *no));
                    out.push((k.clone(), v.clone()));
                }
                continue;
            }
            if next == Ordering::Equal {
                s.next(); // replaced or hidden by the own write
            }
            if let Some((k, Some(v))) = o.next() {
                out.push((k.clone(), v.clone()));
            }
        }
        // The part of the range the page covers: all of it, or up to
        // (down to) its last key when it is full.
        let (mut start, mut end) = (Bytes::copy_from_slice(from), Bytes::copy_from_slice(to));
        if let Some((last, _)) = out.last().filter(|_| out.len() == limit) {
            if reverse {
                start = last.clone();
            } else {
                let mut successor = Vec::with_capacity(last.len() + 1);
                successor.extend_from_slice(last);
                successor.push(0);
                end = Bytes::from(successor);
            }
        }
        let mut keys: Vec<Bytes> = snap
            .into_iter()
            .map(|(k, _, _)| k)
            .take_while(|k| *k >= start && *k < end)
            .collect();
        if reverse {
            keys.reverse();
        }
        self.scans.push(ScanRead {
            from: start,
            to: end,
            keys,
        });
        out
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
            Some(Abort::new(READ_ONLY_WRITE))
        } else if key.len() > self.limits.key_bytes_max {
            Some(Abort::new(format!(
                "key of {} bytes exceeds {OVER_LIMIT} {}",
                key.len(),
                self.limits.key_bytes_max
            )))
        } else if value_len > self.limits.value_bytes_max {
            Some(Abort::new(format!(
                "value of {} bytes exceeds {OVER_LIMIT} {}",
                value_len, self.limits.value_bytes_max
            )))
        } else if self.write_bytes + key.len() + value_len > self.limits.write_bytes_max {
            Some(Abort::new(format!(
                "transaction writes exceed {OVER_LIMIT} {} bytes",
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

    /// Consume the transaction: the read set (point reads and scanned
    /// ranges), the write set (empty when the procedure aborted or broke a
    /// limit) and the outcome.
    pub fn finish(self, result: Outcome) -> Executed {
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
        let mut reads = self.reads;
        if !self.scan_reads.is_empty() {
            // One entry per key; the snapshot is fixed, so duplicates agree.
            reads.extend(self.scan_reads);
            reads.sort_by(|a, b| a.0.cmp(&b.0));
            reads.dedup_by(|a, b| a.0 == b.0);
        }
        Executed {
            reads,
            scans: self.scans,
            writes,
            outcome,
        }
    }
}

/// Everything one execution produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Executed {
    /// Keys read from the snapshot, with the version seen.
    pub reads: Vec<(Bytes, VersionNo)>,
    /// Key ranges read from the snapshot ([`Txn::scan`]).
    pub scans: Vec<ScanRead>,
    /// Buffered writes, sorted by key; empty on abort.
    pub writes: Vec<Write>,
    /// The result.
    pub outcome: Outcome,
}
