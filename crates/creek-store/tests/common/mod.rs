//! Helpers shared by the store's integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use creek_cab::CabStorage;
use creek_node::Write;
use creek_store::{LogStore, Persister, Recovered};

/// A fresh temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "creek-store-{tag}-{}-{n}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn sub(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A persister driven synchronously: `persist` numbers a write, submits it
/// and waits until it is reported durable.
pub struct SyncPersister {
    pub persister: Option<Persister>,
    pub reports: Receiver<Result<u64, String>>,
    pub durable: u64,
    pub submitted: u64,
}

impl SyncPersister {
    /// Number (after the last), submit and wait. Empty writes are not
    /// submitted. Returns the write's number.
    pub fn persist(&mut self, mut write: Write) -> u64 {
        if write.log.is_empty()
            && write.ops.is_empty()
            && write.checkpoint.is_none()
            && write.dropped.is_empty()
        {
            return self.submitted;
        }
        let seq = self.submit(std::mem::take(&mut write));
        self.wait(seq);
        seq
    }

    /// Submit a write the node numbered and wait until it is durable.
    pub fn persist_numbered(&mut self, write: Write) {
        let seq = write.seq;
        self.submitted = seq;
        self.persister.as_ref().unwrap().submit(write);
        self.wait(seq);
    }

    /// Number (after the last) and submit without waiting.
    pub fn submit(&mut self, mut write: Write) -> u64 {
        self.submitted += 1;
        write.seq = self.submitted;
        self.persister.as_ref().unwrap().submit(write);
        self.submitted
    }

    pub fn wait(&mut self, seq: u64) {
        while self.durable < seq {
            match self.reports.recv_timeout(Duration::from_secs(60)) {
                Ok(Ok(s)) => {
                    assert!(
                        s > self.durable,
                        "reports go up: {s} after {}",
                        self.durable
                    );
                    self.durable = s;
                }
                Ok(Err(e)) => panic!("persister failed: {e}"),
                Err(e) => panic!("no durability report: {e}"),
            }
        }
    }

    /// Write a background checkpoint and wait until it is durable.
    pub fn checkpoint(&mut self, job: creek_node::CheckpointJob) {
        let id = job.id;
        let p = self.persister.as_ref().unwrap();
        p.submit_checkpoint(job);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while p.checkpoint_durable() < id {
            assert!(
                std::time::Instant::now() < deadline,
                "checkpoint {id} never durable"
            );
            if let Ok(Err(e)) = self.reports.try_recv() {
                panic!("persister failed: {e}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A crash: the persister goes without `close`.
    pub fn crash(&mut self) {
        self.persister = None;
    }
}

/// The byte entry `index` of term `term` is filled with by
/// [`write_entries`]: the index's low byte in term 1, another in each later
/// term (so a rewritten entry differs from the one it replaced).
pub fn entry_byte(index: u64, term: u64) -> u8 {
    (index as u8).wrapping_add((term.wrapping_sub(1) as u8).wrapping_mul(101))
}

/// Append entries `from..to` of term `term` (`size` bytes each, filled
/// with [`entry_byte`]) to `loaded`'s log and write them as one group; an
/// entry at or below the last replaces the log from there on.
pub fn write_entries(loaded: &mut creek_store::Loaded, from: u64, to: u64, term: u64, size: usize) {
    let ents: Vec<raft::eraftpb::Entry> = (from..to)
        .map(|index| raft::eraftpb::Entry {
            index,
            term,
            data: vec![entry_byte(index, term); size].into(),
            ..Default::default()
        })
        .collect();
    loaded.storage.append(&ents).unwrap();
    loaded
        .store
        .write(&[log_batch(&mut loaded.storage)])
        .unwrap();
}

/// Set `key` of the string-keyed `table` to `value` in `dir`'s database
/// file directly, behind the store's back (the write-ahead log is not
/// touched: [`settle`] first to fold it).
pub fn put_raw(dir: &TempDir, table: &str, key: &str, value: &[u8]) {
    let db = redb::Database::create(dir.sub(creek_store::FILE_NAME)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new(table);
        txn.open_table(def).unwrap().insert(key, value).unwrap();
    }
    txn.commit().unwrap();
}

/// Open `dir` once and close it, for a test that then edits the database
/// file directly: an open folds the write-ahead log's records into the
/// database, so the file holds every durable write (and a later open has
/// nothing to replay over the edit). A directory an earlier edit damaged
/// does not open; then it has nothing to fold either.
pub fn settle(dir: &Path, voters: Vec<u64>) {
    drop(creek_store::load(dir, voters));
}

/// Open `dir` with a synchronous persister.
pub fn open_sync(dir: &Path, voters: Vec<u64>) -> (LogStore, SyncPersister, Recovered) {
    let (tx, rx) = mpsc::channel();
    let opened = creek_store::open(
        dir,
        voters,
        Box::new(move |r| {
            let _ = tx.send(r.map_err(|e| e.to_string()));
        }),
    )
    .unwrap();
    (
        opened.storage,
        SyncPersister {
            persister: Some(opened.persister),
            reports: rx,
            durable: 0,
            submitted: 0,
        },
        opened.recovered,
    )
}

/// A write of just these log writes (numbered by `SyncPersister`).
pub fn log_batch(storage: &mut LogStore) -> Write {
    Write {
        log: storage.take_writes(),
        ..Write::default()
    }
}
