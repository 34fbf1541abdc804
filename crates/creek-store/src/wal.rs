//! The write-ahead log in front of the database: where a group of writes
//! becomes durable with one small append and one `fdatasync`, instead of a
//! B-tree commit that rewrites a page per table it touches.
//!
//! # Shape
//!
//! `creek.wal` is a file zeroed when it is created (so an append
//! overwrites blocks the file system already has: no metadata to sync).
//! Its first block ([`HEADER_BLOCK`] bytes) is a header naming the data
//! directory the log belongs to; [`WAL_BYTES`] of records follow it. A
//! group of writes is encoded as a list of *changes* to the database's
//! tables ([`encode_group`]) and appended as one record:
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
//! # Whose log
//!
//! The database and its log are created together: a new database gets a
//! random 16-byte id (`wal_id` in `raft_meta`), written first into the
//! log's header (and synced), then into the database. From then on each
//! open checks that the log is there and carries that id. A database whose
//! log is missing, replaced by an empty or older file, or taken from another
//! data directory would forget the records only the log held — votes and
//! entries this replica acknowledged — so the open is refused
//! ([`StoreError::WalMissing`], [`StoreError::WalForeign`]), as is a log
//! holding records beside a database that is new (its own database was
//! lost). A database written before logs had headers (no `wal_id`) is
//! adopted: its log is read in the old layout (records from the file's
//! start), folded, and the file started over with a header.
//!
//! # Recovery
//!
//! At open the records that follow `wal_applied` are read from the start of
//! the records, each the next number with a matching CRC, and folded. The scan
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

/// The log file's first block: its header. Records follow it.
pub const HEADER_BLOCK: u64 = 4096;

/// The header: [`MAGIC`], the layout number (4 bytes), the log's id (16),
/// and a CRC-32 of those (4), little-endian; the rest of the block zeros.
const MAGIC: [u8; 8] = *b"CREEKWAL";
const LAYOUT: u32 = 1;
const HEAD_BYTES: usize = 8 + 4 + 16 + 4;

/// The identity of one data directory's log, chosen when its database is
/// created and stored in both (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct WalId(pub [u8; 16]);

impl WalId {
    /// A fresh id: random enough that two data directories never share one
    /// (the standard library's randomly keyed hasher, fed the time and the
    /// process id). It is compared, never used for any decision of the
    /// protocol, so the simulator stays deterministic.
    fn new() -> WalId {
        use std::hash::{BuildHasher, Hasher};
        let mut id = [0u8; 16];
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        for (i, half) in id.chunks_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(now);
            h.write_u32(std::process::id());
            h.write_usize(i);
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
        WalId(id)
    }

    /// The id stored under `wal_id`, if it is one.
    pub(crate) fn decode(bytes: &[u8]) -> Option<WalId> {
        <[u8; 16]>::try_from(bytes).ok().map(WalId)
    }
}

impl std::fmt::Display for WalId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::fmt::Debug for WalId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WalId({self})")
    }
}

/// What the database says of its log.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Expect {
    /// The database is new (nothing committed yet): any log beside it must
    /// hold no records.
    Fresh,
    /// The database predates logs with headers.
    Legacy,
    /// The log must carry this id.
    Id(WalId),
}

/// What the open leaves for the database to do once it has folded the
/// replayed records.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Settle {
    /// The database holds the log's id already.
    Nothing,
    /// Store this id (the log's header carries it, synced).
    Store(WalId),
    /// A log in the old layout: once the database has folded its records
    /// (durably), start the file over with a header
    /// ([`Wal::start_over`]) and store the new id.
    StartOver,
}

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
    /// Open the log file at `path`.
    pub fn open(path: &std::path::Path) -> Result<Self, StoreError> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map(FileWal)
            .map_err(|e| wal_err("opening", e))
    }

    /// Create the log file at `path` (it must not exist), durable in its
    /// directory before it is used.
    pub fn create(path: &std::path::Path) -> io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
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
    /// Open the log beside a database that `expect`s it, and read the
    /// records after `applied`, the last one the database holds. `file` is
    /// `None` when there is no file; `create` makes one (only for a new
    /// database). The log then starts a new round after the records read
    /// (once the database has folded them), and [`Settle`] says what the
    /// database must store.
    pub(crate) fn open(
        file: Option<Box<dyn WalFile>>,
        create: impl FnOnce() -> io::Result<Box<dyn WalFile>>,
        applied: u64,
        expect: Expect,
    ) -> Result<(Self, Replay, Settle), StoreError> {
        let file = match (file, expect) {
            (Some(file), _) => file,
            (None, Expect::Fresh) => create().map_err(|e| wal_err("creating", e))?,
            (None, _) => return Err(StoreError::WalMissing),
        };
        let len = file.size().map_err(|e| wal_err("reading its length", e))?;
        let head = read_head(file.as_ref(), len)?;
        let (replay, settle) = match (expect, head) {
            (Expect::Id(want), Head::Id(got)) if got == want => {
                (scan(file.as_ref(), HEADER_BLOCK, len, applied)?, Settle::Nothing)
            }
            (Expect::Id(expected), Head::Id(found)) => {
                return Err(StoreError::WalForeign { found, expected })
            }
            (Expect::Id(_), Head::Nothing) => return Err(StoreError::WalMissing),
            (Expect::Id(_), Head::Damaged) => {
                return Err(corrupt(format!(
                    "the header of {WAL_FILE_NAME} is damaged (or of a layout this creek does not know)"
                )))
            }
            (Expect::Fresh, head) => {
                let start = match head {
                    Head::Id(_) | Head::Damaged => HEADER_BLOCK,
                    Head::Nothing => 0,
                };
                if let Found::Record { .. } = record_at(file.as_ref(), start, len)? {
                    return Err(StoreError::WalOrphaned);
                }
                let id = WalId::new();
                write_fresh(file.as_ref(), id)?;
                let none = Replay {
                    changes: Vec::new(),
                    last: applied,
                };
                (none, Settle::Store(id))
            }
            (Expect::Legacy, Head::Nothing) if len == 0 => return Err(StoreError::WalMissing),
            (Expect::Legacy, Head::Nothing) => (scan(file.as_ref(), 0, len, applied)?, Settle::StartOver),
            // A start-over torn by a crash: its records were folded.
            (Expect::Legacy, Head::Damaged) => (
                Replay {
                    changes: Vec::new(),
                    last: applied,
                },
                Settle::StartOver,
            ),
            // A start-over that stopped before the database stored the id.
            (Expect::Legacy, Head::Id(id)) => {
                (scan(file.as_ref(), HEADER_BLOCK, len, applied)?, Settle::Store(id))
            }
        };
        let wal = Wal {
            file,
            end: 0,
            last: replay.last,
            capacity: WAL_BYTES,
            pending: Vec::new(),
        };
        Ok((wal, replay, settle))
    }

    /// Start the file over with a header naming a new id, and return the
    /// id. Only once every record in it is folded, durably, and before any
    /// append.
    pub(crate) fn start_over(&mut self) -> Result<WalId, StoreError> {
        assert!(
            self.pending.is_empty() && self.end == 0,
            "the log started over with records not folded"
        );
        let id = WalId::new();
        write_fresh(self.file.as_ref(), id)?;
        Ok(id)
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
            .write_at(HEADER_BLOCK + self.end, &record)
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

/// The records after `applied` from `start`, where the records begin (see
/// the module docs).
fn scan(file: &dyn WalFile, start: u64, len: u64, applied: u64) -> Result<Replay, StoreError> {
    let mut replay = Replay {
        changes: Vec::new(),
        last: applied,
    };
    let mut at = start;
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

/// What the file's first block holds.
enum Head {
    /// A header naming the log's id.
    Id(WalId),
    /// No header: zeros, a file too short for one, or the old layout's
    /// first record.
    Nothing,
    /// The magic, but the rest does not check: damage, or a header write
    /// torn by a crash while the log was being created.
    Damaged,
}

fn read_head(file: &dyn WalFile, len: u64) -> Result<Head, StoreError> {
    if len < HEAD_BYTES as u64 {
        return Ok(Head::Nothing);
    }
    let mut head = [0u8; HEAD_BYTES];
    file.read_at(0, &mut head)
        .map_err(|e| wal_err("reading its header", e))?;
    if head[..8] != MAGIC {
        // An old layout's record starts with its length, which is never
        // the magic's first four bytes read as one (over a gigabyte).
        return Ok(Head::Nothing);
    }
    let crc = crc32fast::hash(&head[..HEAD_BYTES - 4]);
    let layout = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
    if head[HEAD_BYTES - 4..] != crc.to_le_bytes() || layout != LAYOUT {
        return Ok(Head::Damaged);
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&head[12..28]);
    Ok(Head::Id(WalId(id)))
}

/// Zero the file (header and records) and write a header naming `id`,
/// durably.
fn write_fresh(file: &dyn WalFile, id: WalId) -> Result<(), StoreError> {
    let zeros = vec![0u8; 256 << 10];
    let mut at = 0;
    while at < HEADER_BLOCK + WAL_BYTES {
        let n = (HEADER_BLOCK + WAL_BYTES - at).min(zeros.len() as u64);
        file.write_at(at, &zeros[..n as usize])
            .map_err(|e| wal_err("zeroing", e))?;
        at += n;
    }
    let mut head = Vec::with_capacity(HEAD_BYTES);
    head.extend_from_slice(&MAGIC);
    head.extend_from_slice(&LAYOUT.to_le_bytes());
    head.extend_from_slice(&id.0);
    head.extend_from_slice(&crc32fast::hash(&head).to_le_bytes());
    file.write_at(0, &head)
        .map_err(|e| wal_err("writing its header", e))?;
    file.sync_data().map_err(|e| wal_err("syncing", e))
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
