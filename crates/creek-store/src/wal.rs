//! The write-ahead log in front of the database: where a group of writes
//! becomes durable with one small append and one `fdatasync`, instead of a
//! B-tree commit that rewrites a page per table it touches.
//!
//! # Shape
//!
//! `creek.wal` is a file of [`WAL_BYTES`] zeroed when it is created (so an
//! append overwrites blocks the file system already has: no metadata to
//! sync). A group of writes is encoded as a list of *changes* to the
//! database's tables ([`encode_group`]) and appended as one record:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | body length, little-endian |
//! | 4 | CRC-32 of the number and the body |
//! | 8 | record number, little-endian (1, 2, … over the store's life) |
//! | n | body: the changes |
//!
//! The records since the last *fold* are kept in memory too. A fold applies
//! them to the database in one transaction that also stores the number of
//! the last record applied (`wal_applied` in `raft_meta`); once it is
//! durable, the next record goes to the start of the file again. A fold
//! happens when the next record would not fit, before a checkpoint is
//! installed, and at a clean close.
//!
//! # Recovery
//!
//! At open the records that follow `wal_applied` are read from the start of
//! the file, each the next number with a matching CRC, and folded. The scan
//! stops at the first that is not: a torn or never-synced append (whose
//! group was never reported durable), zeros, or a record of an earlier round
//! (its number is at or below `wal_applied`, since every round starts after
//! a durable fold). A record numbered *past* the next one means the
//! database lost a fold it had reported durable: [`StoreError::Corrupt`].
//!
//! Not here: what the changes mean for recovery (the crate docs), when to
//! write (the persister).

use std::io;

use creek_cab::LogWrites;
use creek_node::Write;
use creek_types::{DecodeError, Reader};
use redb::Table;

use crate::{
    corrupt, db_err, StoreError, CONF_INDEX, CONF_STATE, DIRECTORY, HARD_STATE, IDENTITY, LOG_BASE,
    OWN_SEQS,
};

/// The size of the write-ahead log file. A group whose record would not fit
/// in what is left of it first folds the records before it into the
/// database; a group larger than the whole file goes to the database
/// directly.
pub const WAL_BYTES: u64 = 2 << 20;

/// The write-ahead log's file inside a data directory.
pub const WAL_FILE_NAME: &str = "creek.wal";

/// A record's header: length, CRC, number.
const HEADER_BYTES: u64 = 16;

/// A file the write-ahead log is written to, in place.
///
/// Contract: a `write_at` is seen by later reads at once but is durable
/// only once a `sync_data` called after it returns `Ok`. An `Err` from any
/// call means the disk failed: nothing written since the last successful
/// sync is known to be durable.
pub trait WalFile: Send + Sync + std::fmt::Debug + 'static {
    /// The file's length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Fill `out` from `offset` (an error past the end).
    fn read_at(&self, offset: u64, out: &mut [u8]) -> io::Result<()>;
    /// Write `data` at `offset`, growing the file if needed.
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Make every write so far durable.
    fn sync_data(&self) -> io::Result<()>;
}

/// The write-ahead log file of a data directory.
#[derive(Debug)]
pub struct FileWal(std::fs::File);

impl FileWal {
    /// Open (or create) the log file at `path`. A file created here is made
    /// durable in its directory before it is used.
    pub fn open(path: &std::path::Path) -> io::Result<Self> {
        let existed = path.exists();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        if !existed {
            if let Some(dir) = path.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
        }
        Ok(FileWal(file))
    }
}

impl WalFile for FileWal {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.0, out, offset)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.0, data, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
}

impl WalFile for crate::SimDisk {
    fn size(&self) -> io::Result<u64> {
        redb::StorageBackend::len(self)
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        redb::StorageBackend::read(self, offset, out)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        redb::StorageBackend::write(self, offset, data)
    }

    fn sync_data(&self) -> io::Result<()> {
        redb::StorageBackend::sync_data(self)
    }
}

fn wal_err(what: &str, e: io::Error) -> StoreError {
    StoreError::Wal(format!("{what}: {e}"))
}

/// The log as the store writes it.
#[derive(Debug)]
pub(crate) struct Wal {
    file: Box<dyn WalFile>,
    /// Where the next record goes.
    end: u64,
    /// The number of the last record written (or folded at open).
    last: u64,
    /// How much of the file records may fill before a fold
    /// ([`WAL_BYTES`]; less in the simulator, to fold often).
    capacity: u64,
    /// The bodies of the records written since the last fold, in order.
    pending: Vec<u8>,
}

/// What an open found in the log: the changes to fold, and the number of
/// the last record they come from.
pub(crate) struct Replay {
    pub(crate) changes: Vec<u8>,
    pub(crate) last: u64,
}

impl Wal {
    /// Make `file` the log's file (zeroed up to [`WAL_BYTES`] if shorter),
    /// and read the records after `applied`, the last one the database
    /// holds. The log then starts a new round after them (once they are
    /// folded).
    pub(crate) fn open(file: Box<dyn WalFile>, applied: u64) -> Result<(Self, Replay), StoreError> {
        let len = file.size().map_err(|e| wal_err("reading its length", e))?;
        let replay = scan(file.as_ref(), len, applied)?;
        if len < WAL_BYTES {
            let zeros = vec![0u8; 256 << 10];
            let mut at = len;
            while at < WAL_BYTES {
                let n = (WAL_BYTES - at).min(zeros.len() as u64);
                file.write_at(at, &zeros[..n as usize])
                    .map_err(|e| wal_err("zeroing", e))?;
                at += n;
            }
            file.sync_data().map_err(|e| wal_err("syncing", e))?;
        }
        let wal = Wal {
            file,
            end: 0,
            last: replay.last,
            capacity: WAL_BYTES,
            pending: Vec::new(),
        };
        Ok((wal, replay))
    }

    /// Let records fill at most `bytes` of the file (at least one 4 KiB
    /// block, at most [`WAL_BYTES`]) before a fold.
    pub(crate) fn set_capacity(&mut self, bytes: u64) {
        self.capacity = bytes.clamp(4096, WAL_BYTES);
    }

    /// Whether a record of `body` bytes fits in what is left of the file.
    pub(crate) fn fits(&self, body: usize) -> bool {
        self.end + HEADER_BYTES + body as u64 <= self.capacity
    }

    /// Whether a record of `body` bytes could fit at all.
    pub(crate) fn could_fit(&self, body: usize) -> bool {
        HEADER_BYTES + body as u64 <= self.capacity
    }

    /// Append `body` as the next record and make it durable. `Err`: the
    /// disk failed, and the record may or may not be durable.
    pub(crate) fn append(&mut self, body: &[u8]) -> Result<(), StoreError> {
        // Paired with `Store::write`, which folds first when it does not.
        assert!(self.fits(body.len()), "a record past the log's capacity");
        // Paired with `scan`, which reads a zero length as the log's end.
        assert!(!body.is_empty(), "an empty record would end the log");
        // Paired with `folded`: the records since the last fold fill the
        // file from its start, and their bodies are what a fold applies.
        assert_eq!(
            self.pending.is_empty(),
            self.end == 0,
            "the log's end and its unfolded changes disagree"
        );
        let lsn = self.last + 1;
        let mut record = Vec::with_capacity(HEADER_BYTES as usize + body.len());
        record.extend_from_slice(&(body.len() as u32).to_le_bytes());
        record.extend_from_slice(&checksum(lsn, body).to_le_bytes());
        record.extend_from_slice(&lsn.to_le_bytes());
        record.extend_from_slice(body);
        self.file
            .write_at(self.end, &record)
            .map_err(|e| wal_err("appending", e))?;
        self.file.sync_data().map_err(|e| wal_err("syncing", e))?;
        self.end += record.len() as u64;
        self.last = lsn;
        self.pending.extend_from_slice(body);
        Ok(())
    }

    /// The changes of the records not yet folded, in order.
    pub(crate) fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// The number of the last record written.
    pub(crate) fn last(&self) -> u64 {
        self.last
    }

    /// Every record written is in the database now, durably: the next one
    /// starts a new round at the start of the file.
    pub(crate) fn folded(&mut self) {
        self.end = 0;
        self.pending.clear();
    }
}

fn checksum(lsn: u64, body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&lsn.to_le_bytes());
    h.update(body);
    h.finalize()
}

/// The records after `applied` at the start of the file (see the module
/// docs).
fn scan(file: &dyn WalFile, len: u64, applied: u64) -> Result<Replay, StoreError> {
    let mut replay = Replay {
        changes: Vec::new(),
        last: applied,
    };
    let mut at = 0;
    loop {
        let want = replay.last + 1;
        match record_at(file, at, len)? {
            Found::Record { lsn, body } if lsn == want => {
                at += HEADER_BYTES + body.len() as u64;
                replay.changes.extend_from_slice(&body);
                replay.last = lsn;
            }
            Found::Record { lsn, .. } if lsn > want => {
                return Err(corrupt(format!(
                    "write-ahead log record {lsn} follows {}: the database lost records it had applied",
                    replay.last
                )));
            }
            // A record of an earlier round, zeros, or the end of the file.
            Found::Record { .. } | Found::Nothing => return Ok(replay),
            Found::Damaged { next } => {
                // Torn, or never synced: then it was the last append. Unless
                // the next record follows it: then it was damaged after it
                // was durable, and what follows must not be dropped silently.
                if let Found::Record { lsn, .. } = record_at(file, next, len)? {
                    if lsn == want + 1 {
                        return Err(corrupt(format!(
                            "write-ahead log record {want} is damaged and the next one follows it"
                        )));
                    }
                }
                return Ok(replay);
            }
        }
    }
}

/// What lies at an offset of the log.
enum Found {
    /// A whole record (its CRC matches).
    Record { lsn: u64, body: Vec<u8> },
    /// A header whose record does not check; the next would start at `next`.
    Damaged { next: u64 },
    /// Zeros, or too little of the file for a record.
    Nothing,
}

fn record_at(file: &dyn WalFile, at: u64, len: u64) -> Result<Found, StoreError> {
    if at + HEADER_BYTES > len {
        return Ok(Found::Nothing);
    }
    let mut header = [0u8; HEADER_BYTES as usize];
    file.read_at(at, &mut header)
        .map_err(|e| wal_err("reading", e))?;
    let [l0, l1, l2, l3, c0, c1, c2, c3, n @ ..] = header;
    let body_len = u64::from(u32::from_le_bytes([l0, l1, l2, l3]));
    let crc = u32::from_le_bytes([c0, c1, c2, c3]);
    let lsn = u64::from_le_bytes(n);
    if body_len == 0 {
        return Ok(Found::Nothing);
    }
    let next = at + HEADER_BYTES + body_len;
    if next > len {
        return Ok(Found::Damaged { next });
    }
    let mut body = vec![0u8; body_len as usize];
    file.read_at(at + HEADER_BYTES, &mut body)
        .map_err(|e| wal_err("reading", e))?;
    Ok(if checksum(lsn, &body) == crc {
        Found::Record { lsn, body }
    } else {
        Found::Damaged { next }
    })
}

// The changes a record holds, one after another: a tag byte, then its
// fields (integers little-endian, byte strings after a u32 length).
const META_PUT: u8 = 1;
const LOG_COMPACT: u8 = 2;
const LOG_TRUNCATE: u8 = 3;
const LOG_PUT: u8 = 4;
const OP_PUT: u8 = 5;
const OP_DROP: u8 = 6;

/// The `raft_meta` keys a change may set, by their number in a record.
const META_KEYS: [&str; 6] = [
    IDENTITY, DIRECTORY, OWN_SEQS, HARD_STATE, CONF_STATE, CONF_INDEX,
];

fn meta_key_number(key: &str) -> u8 {
    // Paired with `META_KEYS`, which `apply` reads: every key encoded is
    // one of them.
    match META_KEYS.iter().position(|k| *k == key) {
        Some(i) => i as u8,
        None => panic!("a meta key {key} a record cannot name"),
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn put_meta(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    out.push(META_PUT);
    out.push(meta_key_number(key));
    put_bytes(out, value);
}

/// `m` encoded; `what` names it in the error (called only on one, so
/// that the hot path formats nothing).
fn encode_message(
    m: &dyn protobuf::Message,
    what: impl FnOnce() -> String,
) -> Result<Vec<u8>, StoreError> {
    m.write_to_bytes()
        .map_err(|e| StoreError::Corrupt(format!("encoding {}: {e}", what())))
}

/// Append the changes `group` makes to the tables, in the order the writes
/// make them, to `out`. (A checkpoint in the group is not a change here:
/// the store writes its chunks and names it itself.)
pub(crate) fn encode_group(group: &[Write], out: &mut Vec<u8>) -> Result<(), StoreError> {
    for w in group {
        if let Some(id) = &w.identity {
            put_meta(out, IDENTITY, &crate::codec::encode_identity(id));
        }
        if let Some(d) = &w.directory {
            put_meta(out, DIRECTORY, &creek_wire::encode_directory(d));
        }
        if let Some(o) = &w.own_seqs {
            put_meta(out, OWN_SEQS, &crate::codec::encode_own_seqs(o));
        }
        encode_log(&w.log, out)?;
        for op in &w.ops {
            out.push(OP_PUT);
            out.extend_from_slice(&op.id.origin.0.to_le_bytes());
            out.extend_from_slice(&op.id.seq.to_le_bytes());
            put_bytes(out, &creek_wire::encode_op(op));
        }
        for id in &w.dropped {
            out.push(OP_DROP);
            out.extend_from_slice(&id.origin.0.to_le_bytes());
            out.extend_from_slice(&id.seq.to_le_bytes());
        }
    }
    Ok(())
}

fn encode_log(w: &LogWrites, out: &mut Vec<u8>) -> Result<(), StoreError> {
    if let Some(base) = w.compacted_through() {
        out.push(LOG_COMPACT);
        out.extend_from_slice(&base.index.to_le_bytes());
        out.extend_from_slice(&base.term.to_le_bytes());
    }
    if let Some(from) = w.truncate_from() {
        out.push(LOG_TRUNCATE);
        out.extend_from_slice(&from.to_le_bytes());
    }
    // Paired with `LogStore::append`, which accepts only contiguous runs:
    // the entries stored are one run, starting at or after any truncation.
    let entries = w.entries();
    assert!(
        entries.windows(2).all(|p| p[1].index == p[0].index + 1)
            && entries
                .first()
                .zip(w.truncate_from())
                .is_none_or(|(e, from)| e.index >= from),
        "a log write that is not one contiguous run after its truncation"
    );
    for e in entries {
        out.push(LOG_PUT);
        out.extend_from_slice(&e.index.to_le_bytes());
        put_bytes(
            out,
            &encode_message(e, || format!("log entry {}", e.index))?,
        );
    }
    if let Some(hs) = w.hard_state() {
        put_meta(
            out,
            HARD_STATE,
            &encode_message(hs, || "hard state".into())?,
        );
    }
    if let Some(conf) = w.conf() {
        put_meta(
            out,
            CONF_STATE,
            &encode_message(&conf.state, || "conf state".into())?,
        );
        put_meta(out, CONF_INDEX, &conf.index.to_le_bytes());
    }
    Ok(())
}

/// The tables changes apply to, open in one transaction.
pub(crate) struct Target<'a, 'txn> {
    pub(crate) log: &'a mut Table<'txn, u64, &'static [u8]>,
    pub(crate) meta: &'a mut Table<'txn, &'static str, &'static [u8]>,
    pub(crate) ops: &'a mut Table<'txn, (u16, u64), &'static [u8]>,
}

/// A length-prefixed (u32, little-endian) byte string of a change.
fn field<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    let len = r.u32le()?;
    r.take(len as usize)
}

/// Apply encoded `changes` to the tables, in order.
pub(crate) fn apply(changes: &[u8], t: &mut Target<'_, '_>) -> Result<(), StoreError> {
    let mut r = Reader::new(changes);
    let cut = |e: DecodeError| corrupt(format!("a write-ahead log change is cut short: {e}"));
    while !r.is_empty() {
        match r.byte().map_err(cut)? {
            META_PUT => {
                let n = r.byte().map_err(cut)?;
                let key = META_KEYS.get(n as usize).ok_or_else(|| {
                    corrupt(format!("a write-ahead log change names meta key {n}"))
                })?;
                t.meta
                    .insert(*key, field(&mut r).map_err(cut)?)
                    .map_err(db_err)?;
            }
            LOG_COMPACT => {
                let (index, term) = (r.u64le().map_err(cut)?, r.u64le().map_err(cut)?);
                t.log.retain_in(..=index, |_, _| false).map_err(db_err)?;
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&index.to_le_bytes());
                bytes[8..].copy_from_slice(&term.to_le_bytes());
                t.meta.insert(LOG_BASE, bytes.as_slice()).map_err(db_err)?;
            }
            LOG_TRUNCATE => {
                let from = r.u64le().map_err(cut)?;
                t.log.retain_in(from.., |_, _| false).map_err(db_err)?;
            }
            LOG_PUT => {
                let index = r.u64le().map_err(cut)?;
                t.log
                    .insert(index, field(&mut r).map_err(cut)?)
                    .map_err(db_err)?;
            }
            OP_PUT => {
                let key = (r.u16le().map_err(cut)?, r.u64le().map_err(cut)?);
                t.ops
                    .insert(key, field(&mut r).map_err(cut)?)
                    .map_err(db_err)?;
            }
            OP_DROP => {
                let key = (r.u16le().map_err(cut)?, r.u64le().map_err(cut)?);
                t.ops.remove(key).map_err(db_err)?;
            }
            tag => {
                return Err(corrupt(format!(
                    "a write-ahead log change of unknown kind {tag}"
                )))
            }
        }
    }
    Ok(())
}
