//! Creek's durable state (DESIGN §8) in one `redb` database per replica,
//! with a write-ahead log in front of it: the consensus log and hard state,
//! the op payloads the replica accepted, and the last checkpoint of its
//! committed state. A replica killed at any
//! moment comes back from its data directory without losing anything it
//! acknowledged.
//!
//! # The pieces
//!
//! [`open`] loads a data directory and returns an [`Opened`]:
//!
//! * [`LogStore`] — CAB's storage, loaded with the stored log. It serves the
//!   consensus library from memory and records every write, which the node
//!   hands over in its `Ready` writes ([`creek_node::Write`]).
//! * [`Persister`] — a thread that owns the [`Store`]. [`Persister::submit`]
//!   queues a write (log writes, new op payloads, maybe a checkpoint); the
//!   thread writes **every write queued so far as one record of the
//!   write-ahead log with one fsync** (group commit) and then calls the
//!   `on_durable` callback with the highest write number now durable.
//! * [`Recovered`] — the checkpoint and op payloads found on disk, which
//!   `creek_node::Node::recover` (with the storage) turns back into a node.
//!
//! [`load`] and [`load_backend`] give the [`Store`] itself instead of a
//! persister: [`Store::write`] writes a group synchronously, for a driver
//! that schedules its own I/O (the simulator, on [`SimDisk`]).
//!
//! ```
//! use std::sync::mpsc;
//! use creek_cab::CabStorage;
//! use creek_node::Write;
//! use raft::{eraftpb::Entry, Storage};
//!
//! let dir = std::env::temp_dir().join(format!("creek-store-doc-{}", std::process::id()));
//! let (tx, durable) = mpsc::channel();
//! let report = move |r: Result<u64, creek_store::StoreError>| {
//!     let _ = tx.send(r.map_err(|e| e.to_string()));
//! };
//! let opened = creek_store::open(&dir, vec![1], Box::new(report))?;
//! let (mut storage, persister) = (opened.storage, opened.persister);
//! // CAB's Ready loop writes to the log: in memory at once, not yet durable.
//! storage.append(&[Entry { index: 1, term: 1, ..Default::default() }])?;
//! persister.submit(Write { seq: 1, log: storage.take_writes(), ..Write::default() });
//! // The driver holds this step's messages until write 1 is durable.
//! assert_eq!(durable.recv()?, Ok(1));
//! persister.close()?;
//! let reopened = creek_store::open(&dir, vec![1], Box::new(|_| {}))?;
//! assert_eq!(reopened.storage.last_index()?, 1);
//! # drop(reopened);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Durability contract
//!
//! **Nothing is durable until the persister reports it**: a write to
//! `DurableCabStorage` or a submitted batch may be lost by a crash until
//! `on_durable(Ok(s))` arrives with `s` at or above that batch's sequence
//! number. Batches become durable in submission order, whole or not at all.
//! `on_durable(Err(_))` means the disk failed: that group and every later
//! batch is refused, nothing of them will ever be reported durable, and the
//! replica must stop acknowledging (a failed disk is never reported as
//! durable).
//!
//! The node decides what waits for which write (its hold rule, in
//! `creek_node::ready`); the driver only reports what is durable.
//!
//! # What is stored
//!
//! Two files in the data directory: `creek.wal`, the write-ahead log (see
//! the `wal` module: a group of writes is one appended record, folded into
//! the database now and then), and `creek.redb`:
//!
//! | table | key → value |
//! |---|---|
//! | `raft_log` | index (`u64`) → entry, protobuf |
//! | `raft_meta` | `"hard_state"`, `"conf_state"` → protobuf; `"conf_index"` → the log index of the last configuration change applied; `"directory"` → the addresses of members added since the group formed; `"identity"` → the replica's identity in its cluster; `"checkpoint"` → which stored checkpoint is the latest ([`codec::CheckpointRef`]); `"log_base"` → where the compacted log starts; `"own_seqs"` → the replica's record of its own seqs ([`codec::encode_own_seqs`]: the seqs reserved, which may have reached peers first, and a range being taken back after a crash); `"wal_applied"` → the number of the last write-ahead log record folded in |
//! | `ops` | (origin `u16`, seq `u64`) → op, `creek_wire::encode_op` |
//! | `checkpoint_chunks` | (generation `u64`, chunk `u32`) → a piece of a checkpoint's encoding ([`codec`]) |
//! | `checkpoint` | `"latest"` → a whole checkpoint, as stored before chunks (read, never written) |
//!
//! A checkpoint is written either whole, in a group's transaction (one
//! installed from a peer), or in the background a chunk per transaction
//! between the groups ([`Persister::submit_checkpoint`]), so that the
//! consensus log's writes never queue behind a whole state; see
//! `checkpoints` for how the two are kept in order. Once a checkpoint is
//! the latest, the node compacts the log to it and drops the payloads it
//! covers, in later writes. Every redb transaction (a fold, a checkpoint
//! chunk) has `Durability::Immediate`: redb's commit is one fsync, with
//! checksums that let it detect a torn commit at open and fall back to the
//! previous one; a log record has a CRC-32 and a number that let an open
//! tell a torn append from the records before it.
//! Decoding anything stored that is damaged gives [`StoreError::Corrupt`],
//! never a panic. A second process opening the same directory gets
//! [`StoreError::InUse`].
//!
//! Not here: *when* to checkpoint or submit (the driver), what a checkpoint
//! holds (`creek_core::Checkpoint`), how a node recovers (`creek-node`).
#![deny(missing_docs)]

mod checkpoints;
pub mod codec;
mod persister;
pub mod sim_disk;
mod wal;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use creek_cab::{Conf, LogBase};
use creek_core::{Checkpoint, Directory, Op};
use creek_node::Write;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState};
use redb::{Database, DatabaseError, ReadableTable, StorageBackend, TableDefinition};

pub use checkpoints::{CheckpointWriter, Piece, CHECKPOINT_CHUNK_BYTES, REMOVED_PER_TRANSACTION};
pub use creek_cab::LogStore;
pub use persister::{OnDurable, Persister, CHECKPOINT_BYTES_PER_SEC, LINGER};
pub use sim_disk::SimDisk;
pub use wal::{FileWal, WalFile, WalId, HEADER_BLOCK, WAL_BYTES, WAL_FILE_NAME};

/// How long a writer waits to gather more when everything queued is
/// payloads alone (weak ops). One transaction per weak op would cost each
/// replica an fsync and a B-tree commit per op; gathering for up to this
/// long lets one cover many, at the price of gossiping those ops this much
/// later. Any urgent write ends the wait at once. The simulator models the
/// same linger.
pub const LINGER_US: u64 = 1000;

/// The database file inside a data directory.
pub const FILE_NAME: &str = "creek.redb";

pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");
pub(crate) const OPS: TableDefinition<(u16, u64), &[u8]> = TableDefinition::new("ops");
pub(crate) const CHECKPOINT: TableDefinition<&str, &[u8]> = TableDefinition::new("checkpoint");
pub(crate) const HARD_STATE: &str = "hard_state";
pub(crate) const CONF_STATE: &str = "conf_state";
pub(crate) const LATEST: &str = "latest";
pub(crate) const IDENTITY: &str = "identity";
/// The log index of the last configuration change the stored conf state
/// reflects (8 bytes, little-endian; absent: 0, the initial group).
pub(crate) const CONF_INDEX: &str = "conf_index";
/// The addresses of members added by configuration changes, and the
/// highest replica id the group ever had (`creek_wire::encode_directory`).
pub(crate) const DIRECTORY: &str = "directory";
/// The log's base (`LogBase`: index then term, 8 bytes each, little-endian)
/// once it was compacted.
pub(crate) const LOG_BASE: &str = "log_base";
/// The replica's record of its own seqs (`Write::own_seqs`,
/// [`codec::encode_own_seqs`]; absent: nothing reserved).
pub(crate) const OWN_SEQS: &str = "own_seqs";
/// The number of the last write-ahead log record the tables hold (8 bytes,
/// little-endian; absent: 0, none).
pub(crate) const WAL_APPLIED: &str = "wal_applied";
/// The id of the data directory's write-ahead log (16 bytes; absent: a
/// database not yet created, or one written before logs had headers).
pub(crate) const WAL_ID: &str = "wal_id";

/// What can go wrong with the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The data directory is open in another process (or another store in
    /// this one).
    #[error("in use: another creek process holds its database file {FILE_NAME} open")]
    InUse {
        /// The directory.
        dir: PathBuf,
    },
    /// The data directory cannot be created.
    #[error("cannot create data directory {}: {source}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The database file is in a storage format this build no longer reads
    /// (written by an older creek).
    #[error(
        "its database is in storage format v{version}, written by an older creek; this creek reads only format v3 and cannot convert it: run the creek that wrote it"
    )]
    OldFormat {
        /// The directory.
        dir: PathBuf,
        /// The format found.
        version: u8,
    },
    /// The database failed (I/O, a damaged file).
    #[error("redb: {0}")]
    Db(Box<redb::Error>),
    /// The write-ahead log's file failed (I/O).
    #[error("write-ahead log: {0}")]
    Wal(String),
    /// The database's write-ahead log is missing, or was replaced by an
    /// empty or older file: started, the replica would forget what only the
    /// log held.
    #[error(
        "{WAL_FILE_NAME} is missing beside {FILE_NAME}, or replaced by a file that is not its log: started like this the replica would forget votes and log entries it acknowledged. Put the directory's own {WAL_FILE_NAME} back; if it is lost, treat the replica as one that lost its disk (empty the directory and start it again: docs/operations.md, \"Lost a disk\")"
    )]
    WalMissing,
    /// The write-ahead log belongs to another data directory.
    #[error(
        "{WAL_FILE_NAME} belongs to another data directory (its id {found}; {FILE_NAME} was created with {expected}): the two files must come from the same directory. Put the directory's own {WAL_FILE_NAME} back; if it is lost, treat the replica as one that lost its disk (docs/operations.md, \"Lost a disk\")"
    )]
    WalForeign {
        /// The id in the log's header.
        found: WalId,
        /// The id the database holds.
        expected: WalId,
    },
    /// A new database beside a write-ahead log that holds records: the
    /// log's own database was lost.
    #[error(
        "{FILE_NAME} is missing or new, but {WAL_FILE_NAME} beside it holds records of a database: the database they belong to was lost or moved. Put it back; if it is lost, treat the replica as one that lost its disk (empty the directory and start it again: docs/operations.md, \"Lost a disk\")"
    )]
    WalOrphaned,
    /// A stored record does not decode, or the records contradict each
    /// other.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// The file was created for a different group.
    #[error("stored voters {stored:?} differ from the configured {configured:?}")]
    VotersMismatch {
        /// Voters in the file.
        stored: Vec<u64>,
        /// Voters passed to `open`.
        configured: Vec<u64>,
    },
    /// The persister stopped after a write failure (or could not start);
    /// nothing submitted since is durable.
    #[error("persister stopped: {0}")]
    Stopped(String),
}

pub(crate) fn db_err(e: impl Into<redb::Error>) -> StoreError {
    StoreError::Db(Box::new(e.into()))
}

fn corrupt(why: String) -> StoreError {
    StoreError::Corrupt(why)
}

/// What a data directory held at open, for `creek_node::Node::recover`.
#[derive(Clone, Debug, Default)]
pub struct Recovered {
    /// The last checkpoint written, if any.
    pub checkpoint: Option<Checkpoint>,
    /// The op payloads kept (not deleted by a checkpoint), by id.
    pub ops: Vec<Arc<Op>>,
    /// The replica's identity in its cluster (`None`: a new data directory,
    /// or one written before identities).
    pub identity: Option<creek_node::Identity>,
    /// The addresses of members added since the group was formed.
    pub directory: Directory,
    /// The replica's record of its own seqs (see `Write::own_seqs`).
    pub own_seqs: creek_node::OwnSeqs,
    /// The database was not closed cleanly (a crash, a kill, a failed
    /// fsync): redb checked it at open and rolled back to its last complete
    /// commit, dropping a write that was torn or never fully synced (whose
    /// messages the node never let leave). Drivers say so in their log.
    pub repaired: bool,
}

impl From<Recovered> for creek_node::Kept {
    fn from(r: Recovered) -> Self {
        creek_node::Kept {
            checkpoint: r.checkpoint,
            ops: r.ops,
            identity: r.identity,
            directory: r.directory,
            own_seqs: r.own_seqs,
        }
    }
}

/// An opened data directory.
#[derive(Debug)]
pub struct Opened {
    /// CAB's storage, loaded with the stored log.
    pub storage: LogStore,
    /// The writer of every later batch.
    pub persister: Persister,
    /// The stored checkpoint and payloads.
    pub recovered: Recovered,
}

/// Open (or create) the data directory `dir` of a replica whose CAB group
/// has the raft ids `voters` (stored at creation; a later open with other
/// voters is refused). `on_durable` receives the persister's reports (see
/// the crate docs) on the persister's thread.
pub fn open(dir: &Path, voters: Vec<u64>, on_durable: OnDurable) -> Result<Opened, StoreError> {
    with_persister(load(dir, voters)?, on_durable)
}

/// Like [`open`], on a redb storage backend and a write-ahead log file
/// instead of a directory (in memory or fault-injecting, for tests).
pub fn open_backend(
    backend: impl StorageBackend,
    wal: impl WalFile,
    voters: Vec<u64>,
    on_durable: OnDurable,
) -> Result<Opened, StoreError> {
    with_persister(load_backend(backend, wal, voters)?, on_durable)
}

fn with_persister(loaded: Loaded, on_durable: OnDurable) -> Result<Opened, StoreError> {
    Ok(Opened {
        storage: loaded.storage,
        persister: Persister::start(loaded.store, on_durable)?,
        recovered: loaded.recovered,
    })
}

/// A loaded store, written synchronously.
#[derive(Debug)]
pub struct Loaded {
    /// Where later writes go.
    pub store: Store,
    /// CAB's storage, loaded with the stored log.
    pub storage: LogStore,
    /// The stored checkpoint and payloads.
    pub recovered: Recovered,
}

/// Load (or create) the data directory `dir` (see [`open`]).
pub fn load(dir: &Path, voters: Vec<u64>) -> Result<Loaded, StoreError> {
    std::fs::create_dir_all(dir).map_err(|source| StoreError::Dir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let file = dir.join(FILE_NAME);
    let wal_path = dir.join(WAL_FILE_NAME);
    survive_damage(move || {
        let repaired = Arc::new(AtomicBool::new(false));
        let db = match builder(&repaired).create(file) {
            Ok(db) => db,
            Err(DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::InUse {
                    dir: dir.to_path_buf(),
                })
            }
            Err(DatabaseError::UpgradeRequired(version)) => {
                return Err(StoreError::OldFormat {
                    dir: dir.to_path_buf(),
                    version,
                })
            }
            Err(e) => return Err(db_err(e)),
        };
        // Opened only once the database's lock is held, and created only
        // beside a new database.
        let wal = match wal_path.try_exists() {
            Ok(true) => Some(Box::new(FileWal::open(&wal_path)?) as Box<dyn WalFile>),
            Ok(false) => None,
            Err(e) => return Err(StoreError::Wal(format!("opening: {e}"))),
        };
        let create = || Ok(Box::new(FileWal::create(&wal_path)?) as Box<dyn WalFile>);
        load_db(db, wal, create, voters, repaired.load(Ordering::Relaxed))
    })
}

/// Run an open. redb checksums what it reads, but some damage to a file
/// (bytes overwritten outside a commit) still makes it panic while opening
/// or reading; that is a damaged file, reported as [`StoreError::Corrupt`]
/// (nothing of the half-opened database is kept).
fn survive_damage(open: impl FnOnce() -> Result<Loaded, StoreError>) -> Result<Loaded, StoreError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(open)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(corrupt(format!(
            "the database file is damaged: redb failed opening it ({why})"
        )))
    })
}

/// A database builder whose repair callback (run at open when the last
/// shutdown was not clean) sets `repaired`.
fn builder(repaired: &Arc<AtomicBool>) -> redb::Builder {
    let mut builder = Database::builder();
    let flag = repaired.clone();
    builder.set_repair_callback(move |_| flag.store(true, Ordering::Relaxed));
    builder
}

/// Load (or create) a store on a redb storage backend and a write-ahead
/// log file.
pub fn load_backend(
    backend: impl StorageBackend,
    wal: impl WalFile,
    voters: Vec<u64>,
) -> Result<Loaded, StoreError> {
    survive_damage(move || {
        let repaired = Arc::new(AtomicBool::new(false));
        let db = builder(&repaired)
            .create_with_backend(backend)
            .map_err(db_err)?;
        let never = || unreachable!("a backend's log file is always there");
        load_db(
            db,
            Some(Box::new(wal)),
            never,
            voters,
            repaired.load(Ordering::Relaxed),
        )
    })
}

fn load_db(
    db: Database,
    wal: Option<Box<dyn WalFile>>,
    create: impl FnOnce() -> std::io::Result<Box<dyn WalFile>>,
    voters: Vec<u64>,
    repaired: bool,
) -> Result<Loaded, StoreError> {
    let (storage, mut recovered, next_generation, wal) = read_all(&db, wal, create, voters)?;
    recovered.repaired = repaired;
    Ok(Loaded {
        store: Store {
            db,
            wal: Mutex::new(wal),
            next_generation: AtomicU64::new(next_generation),
            written: AtomicU64::new(0),
            folds: Arc::new(AtomicU64::new(0)),
            chunk_bytes: CHECKPOINT_CHUNK_BYTES,
            pace: std::time::Duration::ZERO,
        },
        storage,
        recovered,
    })
}

/// The database of one replica: where its writes go.
#[derive(Debug)]
pub struct Store {
    db: Database,
    /// Where groups of writes become durable first.
    wal: Mutex<wal::Wal>,
    /// The generation the next checkpoint gets.
    next_generation: AtomicU64,
    /// The last write made durable by [`Store::write`].
    written: AtomicU64,
    /// Folds of the write-ahead log into the database since the load
    /// (shared with the persister, which reports them).
    folds: Arc<AtomicU64>,
    /// About this many bytes of checkpoint per stored chunk.
    chunk_bytes: usize,
    /// The least time between two chunks of a checkpoint installed whole
    /// (zero: none; the persister paces them, see
    /// [`CHECKPOINT_BYTES_PER_SEC`]).
    pace: std::time::Duration,
}

impl Store {
    /// Store checkpoints in chunks of about `bytes` (at least 1) instead of
    /// [`CHECKPOINT_CHUNK_BYTES`]: smaller chunks let the simulator's small
    /// states take several.
    pub fn with_checkpoint_chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes.max(1);
        self
    }

    /// Make `group` durable: one record appended to the write-ahead log and
    /// one `fdatasync`, the writes' changes in order. `Ok` means every write
    /// of the group is durable; `Err` means none may be, and nothing more
    /// should be written (stop the replica).
    ///
    /// A group that installs a checkpoint, or that is larger than the whole
    /// log, goes to the database in one transaction with the records not yet
    /// folded instead; a group that does not fit in what is left of the log
    /// folds those records first.
    pub fn write(&self, group: &[Write]) -> Result<(), StoreError> {
        if group.iter().all(is_empty) {
            return Ok(());
        }
        let mut body = Vec::new();
        wal::encode_group(group, &mut body)?;
        let mut wal = self.lock_wal();
        // A checkpoint installed from a peer: its chunks first, in their own
        // transactions; the group's names it. Of several in one group, the
        // last is the one that counts.
        let installed = group.iter().rev().find_map(|w| w.checkpoint.as_ref());
        if installed.is_some() || !wal.could_fit(body.len()) {
            let named = installed.map(|c| self.put_chunks(c)).transpose()?;
            self.fold(&mut wal, &body, named.as_ref())?;
        } else {
            if !wal.fits(body.len()) {
                self.fold(&mut wal, &[], None)?;
            }
            wal.append(&body)?;
        }
        drop(wal);
        if let Some(last) = group.last() {
            self.written.fetch_max(last.seq, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Apply the log's records not yet folded, then `changes`, to the
    /// database in one durable transaction (naming `named` the latest
    /// checkpoint); the log then starts over.
    fn fold(
        &self,
        wal: &mut wal::Wal,
        changes: &[u8],
        named: Option<&checkpoints::Named>,
    ) -> Result<(), StoreError> {
        let mut txn = self.db.begin_write().map_err(db_err)?;
        txn.set_durability(redb::Durability::Immediate)
            .map_err(db_err)?;
        {
            let mut log = txn.open_table(LOG).map_err(db_err)?;
            let mut t = checkpoints::Tables::open(&txn)?;
            let mut ops = txn.open_table(OPS).map_err(db_err)?;
            let mut target = wal::Target {
                log: &mut log,
                meta: &mut t.meta,
                ops: &mut ops,
            };
            wal::apply(wal.pending(), &mut target)?;
            wal::apply(changes, &mut target)?;
            t.meta
                .insert(WAL_APPLIED, wal.last().to_le_bytes().as_slice())
                .map_err(db_err)?;
            if let Some(named) = named {
                self.name_checkpoint(&mut t, named)?;
            }
        }
        txn.commit().map_err(db_err)?;
        wal.folded();
        self.folds.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// How many times the write-ahead log was folded into the database
    /// since the load.
    pub fn folds(&self) -> u64 {
        self.folds.load(Ordering::Relaxed)
    }

    /// Fold the write-ahead log's records into the database (a clean
    /// close does, so that the database alone holds everything).
    pub fn fold_wal(&self) -> Result<(), StoreError> {
        let mut wal = self.lock_wal();
        if wal.pending().is_empty() {
            return Ok(());
        }
        self.fold(&mut wal, &[], None)
    }

    /// The write-ahead log (one thread writes; the lock is never contended
    /// and a panic while holding it leaves nothing half-updated that the
    /// next fold relies on: records count once appended and synced).
    fn lock_wal(&self) -> MutexGuard<'_, wal::Wal> {
        self.wal.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fold the write-ahead log into the database once its records fill
    /// `bytes` of it (at least 4 KiB, at most [`WAL_BYTES`]) instead of the
    /// whole file: the simulator's runs are short, and should fold often.
    pub fn with_wal_bytes(self, bytes: u64) -> Self {
        self.lock_wal().set_capacity(bytes);
        self
    }

    /// The least time between two pieces of checkpoint written: one chunk
    /// at [`CHECKPOINT_BYTES_PER_SEC`].
    pub fn checkpoint_pace(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(
            self.chunk_bytes as f64 / CHECKPOINT_BYTES_PER_SEC as f64,
        )
    }

    /// The last write [`Store::write`] made durable.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    fn next_generation(&self) -> u64 {
        self.next_generation.fetch_add(1, Ordering::AcqRel)
    }
}

fn is_empty(w: &Write) -> bool {
    w.log.is_empty()
        && w.ops.is_empty()
        && w.checkpoint.is_none()
        && w.dropped.is_empty()
        && w.identity.is_none()
        && w.directory.is_none()
        && w.own_seqs.is_none()
}

/// Fold the write-ahead log's records into the database, then read
/// everything, creating the tables (and the initial conf and hard state) in
/// a fresh database.
fn read_all(
    db: &Database,
    wal_file: Option<Box<dyn WalFile>>,
    create: impl FnOnce() -> std::io::Result<Box<dyn WalFile>>,
    voters: Vec<u64>,
) -> Result<(LogStore, Recovered, u64, wal::Wal), StoreError> {
    let txn = db.begin_write().map_err(db_err)?;
    let (loaded, settle) = {
        let mut t = checkpoints::Tables::open(&txn)?;
        let mut log = txn.open_table(LOG).map_err(db_err)?;
        let mut ops = txn.open_table(OPS).map_err(db_err)?;
        let applied = read_u64(&t.meta, WAL_APPLIED)?;
        // A database is created with its hard state and its log's id in one
        // commit (below).
        let expect = match t.meta.get(WAL_ID).map_err(db_err)? {
            Some(v) => wal::Expect::Id(
                WalId::decode(v.value())
                    .ok_or_else(|| corrupt(format!("{WAL_ID} of {} bytes", v.value().len())))?,
            ),
            None if t.meta.get(HARD_STATE).map_err(db_err)?.is_none() => wal::Expect::Fresh,
            None => wal::Expect::Legacy,
        };
        let (wal, replay, settle) = wal::Wal::open(wal_file, create, applied, expect)?;
        if let wal::Settle::Store(id) = settle {
            t.meta.insert(WAL_ID, id.0.as_slice()).map_err(db_err)?;
        }
        if replay.last > applied {
            wal::apply(
                &replay.changes,
                &mut wal::Target {
                    log: &mut log,
                    meta: &mut t.meta,
                    ops: &mut ops,
                },
            )?;
            t.meta
                .insert(WAL_APPLIED, replay.last.to_le_bytes().as_slice())
                .map_err(db_err)?;
        }
        let (checkpoint, next_generation) = checkpoints::load_latest(&mut t)?;
        let meta = &mut t.meta;
        let stored_hs = meta
            .get(HARD_STATE)
            .map_err(db_err)?
            .map(|v| v.value().to_vec());
        let conf_index = read_u64(meta, CONF_INDEX)?;
        let own_seqs = match meta.get(OWN_SEQS).map_err(db_err)? {
            None => creek_node::OwnSeqs::default(),
            Some(v) => codec::decode_own_seqs(v.value())?,
        };
        let directory = match meta.get(DIRECTORY).map_err(db_err)? {
            None => Directory::default(),
            Some(v) => creek_wire::decode_directory(v.value())
                .map_err(|e| corrupt(format!("directory: {e}")))?,
        };
        let stored_cs = meta
            .get(CONF_STATE)
            .map_err(db_err)?
            .map(|v| v.value().to_vec());
        let (hard_state, conf_state) = match (stored_hs, stored_cs) {
            (Some(hs), Some(cs)) => {
                let hs = HardState::parse_from_bytes(&hs)
                    .map_err(|e| corrupt(format!("hard state: {e}")))?;
                let cs = ConfState::parse_from_bytes(&cs)
                    .map_err(|e| corrupt(format!("conf state: {e}")))?;
                // A group that changed since it was formed no longer matches
                // its configuration file's, which names the initial members.
                if conf_index == 0 && cs.voters != voters {
                    return Err(StoreError::VotersMismatch {
                        stored: cs.voters.clone(),
                        configured: voters,
                    });
                }
                (hs, cs)
            }
            (None, None) => {
                let hs = HardState::default();
                let cs = ConfState::from((voters, vec![]));
                let encode = |m: &dyn protobuf::Message| {
                    m.write_to_bytes()
                        .map_err(|e| corrupt(format!("encoding initial state: {e}")))
                };
                meta.insert(HARD_STATE, encode(&hs)?.as_slice())
                    .map_err(db_err)?;
                meta.insert(CONF_STATE, encode(&cs)?.as_slice())
                    .map_err(db_err)?;
                (hs, cs)
            }
            _ => {
                return Err(corrupt(
                    "only one of hard state and conf state is stored".to_owned(),
                ))
            }
        };
        let base = match meta.get(LOG_BASE).map_err(db_err)? {
            None => LogBase::default(),
            Some(v) => decode_base(v.value())?,
        };
        let entries = load_log(&log)?;
        let conf = Conf {
            state: conf_state,
            index: conf_index,
        };
        let storage = LogStore::loaded(conf, hard_state, base, entries);
        storage
            .check()
            .map_err(|why| corrupt(format!("stored log: {why}")))?;
        let recovered = Recovered {
            checkpoint,
            ops: load_ops(&ops)?,
            identity: match meta.get(IDENTITY).map_err(db_err)? {
                Some(v) => Some(codec::decode_identity(v.value())?),
                None => None,
            },
            directory,
            own_seqs,
            repaired: false,
        };
        ((storage, recovered, next_generation, wal), settle)
    };
    txn.commit().map_err(db_err)?;
    let (storage, recovered, next_generation, mut wal) = loaded;
    if let wal::Settle::StartOver = settle {
        // The old layout's records are folded and durable: the file can
        // start over, and the database learn its id.
        let id = wal.start_over()?;
        let txn = db.begin_write().map_err(db_err)?;
        txn.open_table(META)
            .map_err(db_err)?
            .insert(WAL_ID, id.0.as_slice())
            .map_err(db_err)?;
        txn.commit().map_err(db_err)?;
    }
    Ok((storage, recovered, next_generation, wal))
}

/// The `u64` stored under `key` in `raft_meta` (absent: 0).
fn read_u64(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> Result<u64, StoreError> {
    match meta.get(key).map_err(db_err)? {
        None => Ok(0),
        Some(v) => <[u8; 8]>::try_from(v.value())
            .map(u64::from_le_bytes)
            .map_err(|_| corrupt(format!("{key} of {} bytes", v.value().len()))),
    }
}

fn decode_base(bytes: &[u8]) -> Result<LogBase, StoreError> {
    let word = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    match (bytes.len(), word(0), word(8)) {
        (16, Some(index), Some(term)) => Ok(LogBase { index, term }),
        _ => Err(corrupt(format!("log base of {} bytes", bytes.len()))),
    }
}

fn load_log(log: &impl ReadableTable<u64, &'static [u8]>) -> Result<Vec<Entry>, StoreError> {
    let mut entries: Vec<Entry> = Vec::new();
    for row in log.iter().map_err(db_err)? {
        let (k, v) = row.map_err(db_err)?;
        let index = k.value();
        let e = Entry::parse_from_bytes(v.value())
            .map_err(|err| corrupt(format!("log entry {index}: {err}")))?;
        if e.index != index {
            return Err(corrupt(format!(
                "log entry under key {index} has index {}",
                e.index
            )));
        }
        entries.push(e); // contiguous from the base: `LogStore::check`
    }
    Ok(entries)
}

fn load_ops(
    ops: &impl ReadableTable<(u16, u64), &'static [u8]>,
) -> Result<Vec<Arc<Op>>, StoreError> {
    let limits = codec::stored_op_limits();
    let mut out = Vec::new();
    for row in ops.iter().map_err(db_err)? {
        let (k, v) = row.map_err(db_err)?;
        let (origin, seq) = k.value();
        let bytes = Bytes::copy_from_slice(v.value());
        let op = creek_wire::decode_op(&bytes, &limits)
            .map_err(|e| corrupt(format!("op r{origin}.{seq}: {e}")))?;
        if (op.id.origin.0, op.id.seq) != (origin, seq) {
            return Err(corrupt(format!(
                "op under key r{origin}.{seq} is {}",
                op.id
            )));
        }
        out.push(Arc::new(op));
    }
    Ok(out)
}
