//! Durable storage for CAB ([`creek_cab::CabStorage`]) on the `redb`
//! embedded database.
//!
//! # What is stored
//!
//! One redb file per node holds two tables:
//!
//! * `raft_log` (`u64 -> &[u8]`): the consensus log, one row per entry, keyed
//!   by its index; each value is the entry encoded by rust-protobuf
//!   (`Message::write_to_bytes`). The log is never compacted, so it always
//!   starts at index 1 (or is empty).
//! * `raft_meta` (`&str -> &[u8]`): the hard state (term, vote, commit) under
//!   `"hard_state"` and the conf state (the voters) under `"conf_state"`, both
//!   protobuf-encoded. The conf state is written once, when the file is
//!   created, and loaded on every reopen.
//!
//! # Durability contract
//!
//! Every write ([`CabStorage::append`], [`CabStorage::set_hard_state`],
//! [`CabStorage::set_commit`]) is one redb write transaction, committed with
//! redb's default (immediate, fsynced) durability before the call returns.
//! So when a write returns `Ok`, it survives a crash; an `Err` means it may
//! not have happened (the transaction is rolled back and the in-memory view
//! is left unchanged). An `append` that overwrites a suffix of the log
//! removes the old suffix and writes the new entries in the same
//! transaction: a crash leaves either the old log or the new one.
//!
//! Every write pays its own fsync: there is no group commit (batching the
//! writes of several Ready rounds into one transaction) yet.
//!
//! # What is not stored yet
//!
//! Only the consensus state lives here. Op payloads, the replica's state
//! (what deliveries produced, and the `applied` index to restart from) and
//! checkpoints are not stored; they arrive with issue 5. Until then a
//! restarted node rebuilds from `applied = 0` and is redelivered every
//! decided id.
//!
//! The hard state, conf state and first/last index are cached in memory;
//! entries and terms are read from the file.
#![deny(missing_docs)]

use std::path::Path;

use creek_cab::CabStorage;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");
const HARD_STATE: &str = "hard_state";
const CONF_STATE: &str = "conf_state";

/// What can go wrong opening the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database failed (I/O, locking, a damaged file).
    #[error("redb: {0}")]
    Db(Box<redb::Error>),
    /// A stored record does not decode.
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
}

fn db_err(e: impl Into<redb::Error>) -> StoreError {
    StoreError::Db(Box::new(e.into()))
}

/// A storage failure as the consensus library's error.
fn raft_err(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> raft::Error {
    raft::Error::Store(StorageError::Other(e.into()))
}

impl From<StoreError> for raft::Error {
    fn from(e: StoreError) -> Self {
        raft_err(e)
    }
}

/// A durable [`CabStorage`] in one redb file.
pub struct RedbCabStorage {
    db: Database,
    hard_state: HardState,
    conf_state: ConfState,
    /// Index of the first stored entry, or 1 if the log is empty.
    first: u64,
    /// Index of the last stored entry, or 0 if the log is empty.
    last: u64,
}

impl std::fmt::Debug for RedbCabStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbCabStorage")
            .field("hard_state", &self.hard_state)
            .field("conf_state", &self.conf_state)
            .field("first", &self.first)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

fn decode_entry(key: u64, bytes: &[u8]) -> Result<Entry, StoreError> {
    let e = Entry::parse_from_bytes(bytes)
        .map_err(|err| StoreError::Corrupt(format!("log entry {key}: {err}")))?;
    if e.index != key {
        return Err(StoreError::Corrupt(format!(
            "log entry under key {key} has index {}",
            e.index
        )));
    }
    Ok(e)
}

fn encode<M: protobuf::Message>(what: &str, m: &M) -> Result<Vec<u8>, StoreError> {
    m.write_to_bytes()
        .map_err(|err| StoreError::Corrupt(format!("encoding {what}: {err}")))
}

impl RedbCabStorage {
    /// Open the store at `path`, creating it (with the conf state `voters`
    /// and an empty hard state) if it does not exist. On reopen the stored
    /// state is loaded; `voters` must match the stored ones.
    pub fn open(path: &Path, voters: Vec<u64>) -> Result<Self, StoreError> {
        let db = Database::create(path).map_err(db_err)?;
        let txn = db.begin_write().map_err(db_err)?;
        let (hard_state, conf_state, first, last);
        {
            let mut meta = txn.open_table(META).map_err(db_err)?;
            let log = txn.open_table(LOG).map_err(db_err)?;
            let stored_hs = meta
                .get(HARD_STATE)
                .map_err(db_err)?
                .map(|v| v.value().to_vec());
            let stored_cs = meta
                .get(CONF_STATE)
                .map_err(db_err)?
                .map(|v| v.value().to_vec());
            match (stored_hs, stored_cs) {
                (Some(hs), Some(cs)) => {
                    hard_state = HardState::parse_from_bytes(&hs)
                        .map_err(|e| StoreError::Corrupt(format!("hard state: {e}")))?;
                    conf_state = ConfState::parse_from_bytes(&cs)
                        .map_err(|e| StoreError::Corrupt(format!("conf state: {e}")))?;
                    if conf_state.voters != voters {
                        return Err(StoreError::VotersMismatch {
                            stored: conf_state.voters.clone(),
                            configured: voters,
                        });
                    }
                }
                (None, None) => {
                    hard_state = HardState::default();
                    conf_state = ConfState::from((voters, vec![]));
                    meta.insert(HARD_STATE, encode("hard state", &hard_state)?.as_slice())
                        .map_err(db_err)?;
                    meta.insert(CONF_STATE, encode("conf state", &conf_state)?.as_slice())
                        .map_err(db_err)?;
                }
                _ => {
                    return Err(StoreError::Corrupt(
                        "only one of hard state and conf state is stored".to_owned(),
                    ))
                }
            }
            let first_key = log.first().map_err(db_err)?.map(|(k, _)| k.value());
            let last_key = log.last().map_err(db_err)?.map(|(k, _)| k.value());
            (first, last) = match (first_key, last_key) {
                (Some(f), Some(l)) => {
                    let expected = l.checked_sub(f).and_then(|d| d.checked_add(1));
                    if expected != Some(log.len().map_err(db_err)?) {
                        return Err(StoreError::Corrupt(format!("log {f}..={l} has gaps")));
                    }
                    (f, l)
                }
                _ => (1, 0),
            };
        }
        txn.commit().map_err(db_err)?;
        Ok(RedbCabStorage {
            db,
            hard_state,
            conf_state,
            first,
            last,
        })
    }

    /// Entries `[low, high)` as stored, without bounds checks.
    fn read_range(&self, low: u64, high: u64) -> Result<Vec<Entry>, StoreError> {
        if low >= high {
            return Ok(Vec::new());
        }
        let txn = self.db.begin_read().map_err(db_err)?;
        let log = txn.open_table(LOG).map_err(db_err)?;
        let mut out = Vec::new();
        for row in log.range(low..high).map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            out.push(decode_entry(k.value(), v.value())?);
        }
        if out.len() as u64 != high - low {
            return Err(StoreError::Corrupt(format!(
                "log {low}..{high} is missing entries"
            )));
        }
        Ok(out)
    }

    fn write_hard_state(&mut self, hs: HardState) -> Result<(), StoreError> {
        let bytes = encode("hard state", &hs)?;
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut meta = txn.open_table(META).map_err(db_err)?;
            meta.insert(HARD_STATE, bytes.as_slice()).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)?;
        self.hard_state = hs;
        Ok(())
    }

    fn write_entries(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        let Some(head) = entries.first() else {
            return Ok(());
        };
        let from = head.index;
        if from < self.first || from > self.last + 1 {
            return Err(StoreError::Corrupt(format!(
                "append at {from} outside the log {}..={} (+1)",
                self.first, self.last
            )));
        }
        let mut encoded = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            if Some(e.index) != from.checked_add(i as u64) {
                return Err(StoreError::Corrupt(format!(
                    "appended entries are not contiguous at index {}",
                    e.index
                )));
            }
            encoded.push((e.index, encode("log entry", e)?));
        }
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut log = txn.open_table(LOG).map_err(db_err)?;
            if from <= self.last {
                log.retain_in(from.., |_, _| false).map_err(db_err)?;
            }
            for (index, bytes) in &encoded {
                log.insert(*index, bytes.as_slice()).map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)?;
        if self.last == 0 {
            self.first = from;
        }
        self.last = from + entries.len() as u64 - 1;
        Ok(())
    }
}

impl Storage for RedbCabStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        // MemStorage panics here; a durable store reports instead.
        if high > self.last + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let mut ents = self.read_range(low, high)?;
        raft::util::limit_size(&mut ents, max_size.into());
        Ok(ents)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        // The log is never compacted: the entry before the first is the
        // empty snapshot at index 0, term 0.
        if idx == 0 {
            return Ok(0);
        }
        if idx < self.first {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let ents = self.read_range(idx, idx + 1)?;
        match ents.first() {
            Some(e) => Ok(e.term),
            None => Err(raft::Error::Store(StorageError::Unavailable)),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last)
    }

    /// CAB never compacts its log, so the only snapshot is the empty one at
    /// the commit index (as `MemStorage` builds it).
    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let mut snap = Snapshot::default();
        let commit = self.hard_state.commit;
        let term = self.term(commit)?;
        let meta = snap.mut_metadata();
        meta.index = commit.max(request_index);
        meta.term = term;
        meta.set_conf_state(self.conf_state.clone());
        Ok(snap)
    }
}

impl CabStorage for RedbCabStorage {
    fn append(&mut self, entries: &[Entry]) -> raft::Result<()> {
        Ok(self.write_entries(entries)?)
    }

    fn set_hard_state(&mut self, hs: HardState) -> raft::Result<()> {
        Ok(self.write_hard_state(hs)?)
    }

    fn set_commit(&mut self, commit: u64) -> raft::Result<()> {
        let mut hs = self.hard_state.clone();
        hs.commit = commit;
        Ok(self.write_hard_state(hs)?)
    }
}
