//! Helpers shared by the store's integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use creek_store::{Batch, DurableCabStorage, Persister, Recovered};

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

/// A persister driven synchronously: `persist` submits and waits until the
/// batch is reported durable.
pub struct SyncPersister {
    pub persister: Option<Persister>,
    pub reports: Receiver<Result<u64, String>>,
    pub durable: u64,
}

impl SyncPersister {
    /// Submit and wait. Empty batches are not submitted.
    pub fn persist(&mut self, batch: Batch) {
        if batch.is_empty() {
            return;
        }
        let seq = self.persister.as_ref().unwrap().submit(batch);
        self.wait(seq);
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

    /// A crash: the persister goes without `close`.
    pub fn crash(&mut self) {
        self.persister = None;
    }
}

/// Open `dir` with a synchronous persister.
pub fn open_sync(dir: &Path, voters: Vec<u64>) -> (DurableCabStorage, SyncPersister, Recovered) {
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
        },
        opened.recovered,
    )
}

/// A batch of just these log writes.
pub fn log_batch(storage: &mut DurableCabStorage) -> Batch {
    Batch {
        log: storage.take_writes(),
        ..Batch::default()
    }
}
