//! The persister and the data directory: what is written comes back after
//! a reopen (and after SIGKILL), group commit, a failed disk is never
//! reported durable, corrupt records and a directory in use are refused.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{open_sync, put_raw, settle, TempDir};
use creek_cab::CabStorage;
use creek_core::{Checkpoint, Dvv, Op, OpId, ReplicaId, Timestamp};
use creek_node::Write;
use creek_store::{SimDisk, StoreError};
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;
use raft::eraftpb::Entry;
use raft::Storage;

fn op(origin: u16, seq: u64, strong: bool) -> Arc<Op> {
    let key = format!("k{origin}.{seq}");
    Arc::new(Op::new(
        OpId::new(ReplicaId(origin), seq),
        Timestamp::new(1_000 + seq, 0),
        ProcCall::new(
            "kv.put",
            encode_args(&[Value::from(key.as_str()), Value::from("v")]),
        ),
        strong,
        strong.then(|| Dvv::from_records([(ReplicaId(origin), seq - 1, vec![])])),
    ))
}

/// Write `seq`: the entries appended to `storage` since the last write,
/// and origin 1's op `seq`.
fn entry_write(seq: u64, storage: &mut creek_store::LogStore) -> Write {
    Write {
        seq,
        log: storage.take_writes(),
        ops: vec![op(1, seq, false)],
        checkpoint: None,
        dropped: Vec::new(),
        identity: None,
        directory: None,
        own_seqs: None,
    }
}

fn entry(index: u64) -> Entry {
    Entry {
        index,
        term: 1,
        data: vec![index as u8; 3].into(),
        ..Default::default()
    }
}

fn checkpoint(committed: &[OpId]) -> Checkpoint {
    let mut ctx = Dvv::new();
    for id in committed {
        ctx.insert(*id);
    }
    Checkpoint {
        cab_applied: 2,
        committed_len: committed.len() as u64,
        causal_ctx: ctx,
        state: vec![
            (Bytes::from_static(b"a"), Bytes::from_static(b"1")),
            (Bytes::from_static(b"b"), Bytes::from_static(b"")),
        ],
        hlc: Timestamp::new(5_000, 3),
        next_event_no: 7,
        commit_time: 0,
        group: Default::default(),
    }
}

fn ids(ops: &[Arc<Op>]) -> Vec<OpId> {
    ops.iter().map(|o| o.id).collect()
}

#[test]
fn log_ops_and_checkpoint_round_trip_across_reopen() {
    let dir = TempDir::new("roundtrip");
    let voters = vec![1, 2, 3];
    let all: Vec<Arc<Op>> = (1..=4)
        .map(|s| op(1, s, s == 4))
        .chain([op(2, 1, false)])
        .collect();
    let ckpt = checkpoint(&[OpId::new(ReplicaId(1), 1), OpId::new(ReplicaId(1), 2)]);
    {
        let (mut s, mut p, _) = open_sync(dir.path(), voters.clone());
        s.append(&[entry(1), entry(2), entry(3)]).unwrap();
        s.set_commit(2).unwrap();
        p.persist(Write {
            log: s.take_writes(),
            ops: all.clone(),
            ..Write::default()
        });
        // The checkpoint covers r1.1 and r1.2: their payloads go with it.
        p.persist(Write {
            checkpoint: Some(ckpt.clone()),
            dropped: ckpt.causal_ctx.iter().collect(),
            ..Write::default()
        });
        p.persister.take().unwrap().close().unwrap();
    }
    let (s, _p, recovered) = open_sync(dir.path(), voters);
    assert_eq!(recovered.checkpoint, Some(ckpt));
    assert_eq!(recovered.ops, all[2..].to_vec(), "kept payloads, by id");
    assert_eq!(s.last_index().unwrap(), 3);
    assert_eq!(s.initial_state().unwrap().hard_state.commit, 2);
    assert_eq!(
        s.entries(1, 4, None, raft::GetEntriesContext::empty(false))
            .unwrap(),
        vec![entry(1), entry(2), entry(3)]
    );
}

/// Group commit: while the persister is busy (here: its first report is
/// held up), every batch submitted goes into the next transaction, reported
/// once with the highest seq. Reports only go up; everything reported is
/// there after a reopen.
#[test]
fn batches_queued_while_busy_share_one_transaction() {
    let dir = TempDir::new("group");
    let (reports_tx, reports) = mpsc::channel();
    let (release_tx, release) = mpsc::channel::<()>();
    let release = std::sync::Mutex::new(release);
    let (busy_tx, busy) = mpsc::channel::<()>();
    let opened = creek_store::open(
        dir.path(),
        vec![1],
        Box::new(move |r: Result<u64, StoreError>| {
            let seq = r.unwrap();
            if seq == 1 {
                // Hold the persister's thread until the test has queued more.
                busy_tx.send(()).unwrap();
                release.lock().unwrap().recv().unwrap();
            }
            reports_tx.send(seq).unwrap();
        }),
    )
    .unwrap();
    let p = opened.persister;
    let mut storage = opened.storage;
    storage.append(&[entry(1)]).unwrap();
    p.submit(entry_write(1, &mut storage));
    busy.recv_timeout(Duration::from_secs(60)).unwrap();
    let n = 50u64;
    for s in 2..=n {
        storage.append(&[entry(s)]).unwrap();
        p.submit(entry_write(s, &mut storage));
    }
    assert_eq!(p.submitted(), n);
    release_tx.send(()).unwrap();
    let got: Vec<u64> = (0..2)
        .map(|_| reports.recv_timeout(Duration::from_secs(60)).unwrap())
        .collect();
    assert_eq!(got, vec![1, n], "batches 2..={n} in one transaction");
    p.close().unwrap();
    assert!(reports.try_recv().is_err(), "nothing more to report");
    let (s, _p, recovered) = open_sync(dir.path(), vec![1]);
    assert_eq!(recovered.ops.len() as u64, n);
    assert_eq!(s.last_index().unwrap(), n);
}

/// A disk that starts failing: the failed group is reported as an error,
/// never as durable; later batches are refused with it; `close` says so.
#[test]
fn a_failed_disk_is_never_reported_durable() {
    #[derive(Debug)]
    struct Flaky {
        inner: SimDisk,
        failing: Arc<AtomicBool>,
    }
    impl creek_store::WalFile for Flaky {
        fn size(&self) -> Result<u64, std::io::Error> {
            redb::StorageBackend::len(self)
        }
        fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
            redb::StorageBackend::read(self, offset, out)
        }
        fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
            redb::StorageBackend::write(self, offset, data)
        }
        fn sync_data(&self) -> Result<(), std::io::Error> {
            redb::StorageBackend::sync_data(self)
        }
    }
    impl redb::StorageBackend for Flaky {
        fn len(&self) -> Result<u64, std::io::Error> {
            self.inner.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
            self.inner.read(offset, out)
        }
        fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
            self.inner.set_len(len)
        }
        fn sync_data(&self) -> Result<(), std::io::Error> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("disk on fire"));
            }
            self.inner.sync_data()
        }
        fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("disk on fire"));
            }
            self.inner.write(offset, data)
        }
    }
    let failing = Arc::new(AtomicBool::new(false));
    let disk = SimDisk::new();
    let backend = Flaky {
        inner: disk.clone(),
        failing: failing.clone(),
    };
    let wal = Flaky {
        inner: disk.wal(),
        failing: failing.clone(),
    };
    let (tx, reports) = mpsc::channel();
    let opened = creek_store::open_backend(
        backend,
        wal,
        vec![1],
        Box::new(move |r: Result<u64, StoreError>| {
            tx.send(r.map_err(|e| e.to_string())).unwrap();
        }),
    )
    .unwrap();
    let p = opened.persister;
    let next = || reports.recv_timeout(Duration::from_secs(60)).unwrap();
    let batch = |s| Write {
        seq: s,
        ops: vec![op(1, s, false)],
        ..Write::default()
    };
    p.submit(batch(1));
    assert_eq!(next(), Ok(1));
    failing.store(true, Ordering::SeqCst);
    p.submit(batch(2));
    let e = next().unwrap_err();
    assert!(e.contains("disk on fire"), "{e}");
    // The disk recovers, but the persister does not pretend it did.
    failing.store(false, Ordering::SeqCst);
    p.submit(batch(3));
    let e = next().unwrap_err();
    assert!(e.contains("persister stopped"), "{e}");
    assert!(p.failure().is_some());
    assert!(matches!(p.close(), Err(StoreError::Stopped(_))));
}

fn corrupt_table(dir: &TempDir, table: &str, key: &str, value: &[u8]) {
    settle(dir.path(), vec![1]);
    put_raw(dir, table, key, value);
}

/// Overwrite (or add) one stored checkpoint chunk.
fn corrupt_chunk(dir: &TempDir, key: (u64, u32), value: Option<&[u8]>) {
    settle(dir.path(), vec![1]);
    let db = redb::Database::create(dir.sub(creek_store::FILE_NAME)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let def: redb::TableDefinition<(u64, u32), &[u8]> =
            redb::TableDefinition::new("checkpoint_chunks");
        let mut t = txn.open_table(def).unwrap();
        match value {
            Some(v) => t.insert(key, v).map(drop).unwrap(),
            None => t.remove(key).map(drop).unwrap(),
        }
    }
    txn.commit().unwrap();
}

#[test]
fn corrupt_checkpoint_and_op_are_errors_not_panics() {
    let dir = TempDir::new("corrupt-ckpt");
    {
        let (_s, mut p, _) = open_sync(dir.path(), vec![1]);
        p.persist(Write {
            checkpoint: Some(checkpoint(&[])),
            ..Write::default()
        });
    }
    let good = creek_store::codec::encode_checkpoint(&checkpoint(&[]));
    let mut longer = good.clone();
    longer.push(0);
    let mut flipped = good.clone();
    flipped[3] ^= 1;
    // The first checkpoint of a directory is generation 1, in one chunk.
    for bad in [None, Some(vec![]), Some(longer), Some(flipped)] {
        corrupt_chunk(&dir, (1, 0), bad.as_deref());
        let e = creek_store::open(dir.path(), vec![1], Box::new(|_| {})).unwrap_err();
        assert!(
            matches!(&e, StoreError::Corrupt(m) if m.contains("checkpoint")),
            "{e}"
        );
    }
    corrupt_chunk(&dir, (1, 0), Some(&good));
    creek_store::open(dir.path(), vec![1], Box::new(|_| {})).unwrap();
    for bad in [&[][..], &[1, 2, 3, 4, 5][..]] {
        corrupt_table(&dir, "raft_meta", "checkpoint", bad);
        let e = creek_store::open(dir.path(), vec![1], Box::new(|_| {})).unwrap_err();
        assert!(
            matches!(&e, StoreError::Corrupt(m) if m.contains("checkpoint")),
            "{e}"
        );
    }

    // A checkpoint in the format before chunks is read, and refused when
    // damaged.
    let dir = TempDir::new("old-ckpt");
    drop(open_sync(dir.path(), vec![1]));
    corrupt_table(&dir, "checkpoint", "latest", &good);
    let (_s, _p, recovered) = open_sync(dir.path(), vec![1]);
    assert_eq!(recovered.checkpoint, Some(checkpoint(&[])));
    drop((_s, _p));
    corrupt_table(&dir, "checkpoint", "latest", &good[..good.len() - 1]);
    let e = creek_store::open(dir.path(), vec![1], Box::new(|_| {})).unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("checkpoint")),
        "{e}"
    );

    let dir = TempDir::new("corrupt-op");
    {
        let (_s, mut p, _) = open_sync(dir.path(), vec![1]);
        p.persist(Write {
            ops: vec![op(3, 1, false)],
            ..Write::default()
        });
    }
    settle(dir.path(), vec![1]);
    {
        let db = redb::Database::create(dir.sub(creek_store::FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<(u16, u64), &[u8]> = redb::TableDefinition::new("ops");
            let mut t = txn.open_table(def).unwrap();
            // A valid op under the wrong key.
            let other = creek_wire::encode_op(&op(3, 2, false));
            t.insert((3u16, 1u64), other.as_ref()).unwrap();
        }
        txn.commit().unwrap();
    }
    let e = creek_store::open(dir.path(), vec![1], Box::new(|_| {})).unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("r3.1")),
        "{e}"
    );
}

#[test]
fn a_directory_in_use_is_refused_clearly() {
    let dir = TempDir::new("in-use");
    let (_s, p, _) = open_sync(dir.path(), vec![1]);
    let e = creek_store::open(dir.path(), vec![1], Box::new(|_| {})).unwrap_err();
    assert!(matches!(e, StoreError::InUse { .. }), "{e}");
    assert!(e.to_string().contains("in use"), "{e}");
    drop(p);
    // Free again once the first store is gone.
    creek_store::open(dir.path(), vec![1], Box::new(|_| {})).unwrap();
}

const CHILD_DIR: &str = "CREEK_STORE_SIGKILL_CHILD_DIR";

/// The child half of `sigkill_loses_nothing_reported_durable`: writes
/// batches as fast as it can, printing each durability report, until killed.
#[test]
fn sigkill_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return; // only runs as the child of the test below
    };
    let opened = creek_store::open(
        std::path::Path::new(&dir),
        vec![1],
        Box::new(|r: Result<u64, StoreError>| {
            println!("durable {}", r.unwrap());
        }),
    )
    .unwrap();
    let (mut storage, p) = (opened.storage, opened.persister);
    for s in 1..=1_000_000u64 {
        storage.append(&[entry(s)]).unwrap();
        storage.set_commit(s).unwrap();
        p.submit(Write {
            seq: s,
            log: storage.take_writes(),
            ops: vec![op(1, s, false)],
            checkpoint: (s % 10 == 0).then(|| {
                let mut c = checkpoint(&[]);
                c.cab_applied = s;
                c
            }),
            dropped: Vec::new(),
            identity: None,
            directory: None,
            own_seqs: None,
        });
        if s % 64 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A writer killed with SIGKILL in the middle of group commits: every batch
/// it had been told was durable is there, whole, after a reopen.
#[test]
fn sigkill_loses_nothing_reported_durable() {
    if std::env::var(CHILD_DIR).is_ok() {
        return;
    }
    let dir = TempDir::new("sigkill");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigkill_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut reported = 0u64;
    let mut reports = 0u64;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(seq) = line.strip_prefix("durable ") {
            reported = seq.trim().parse().unwrap();
            reports += 1;
            if reports >= 30 {
                break;
            }
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(reported > 0, "the child reported nothing");
    let (s, _p, recovered) = open_sync(dir.path(), vec![1]);
    let stored: BTreeMap<u64, Arc<Op>> = recovered
        .ops
        .iter()
        .map(|o| (o.id.seq, o.clone()))
        .collect();
    // Batches are durable in order and whole: a prefix 1..=k with k at or
    // past the last report, with the log and commit index to match.
    let k = stored.len() as u64;
    assert!(k >= reported, "reported {reported} durable, found {k}");
    assert_eq!(
        ids(&recovered.ops),
        (1..=k)
            .map(|s| OpId::new(ReplicaId(1), s))
            .collect::<Vec<_>>()
    );
    for (seq, o) in &stored {
        assert_eq!(o, &op(1, *seq, false));
    }
    assert_eq!(s.last_index().unwrap(), k);
    assert_eq!(s.initial_state().unwrap().hard_state.commit, k);
    let ckpt = recovered.checkpoint.unwrap();
    assert_eq!(ckpt.cab_applied, k / 10 * 10);
}

/// The persister reports the store's folds of its write-ahead log (the
/// server's `wal_folds` gauge): a log far smaller than what is written
/// fills and is folded many times, and nothing written is lost by it.
#[test]
fn the_persister_counts_the_logs_folds() {
    let dir = TempDir::new("folds");
    let loaded = creek_store::load(dir.path(), vec![1]).unwrap();
    let store = loaded.store.with_wal_bytes(4 << 10);
    let mut storage = loaded.storage;
    let (reports_tx, reports) = mpsc::channel();
    let p = creek_store::Persister::start(
        store,
        Box::new(move |r: Result<u64, StoreError>| {
            let _ = reports_tx.send(r.unwrap());
        }),
    )
    .unwrap();
    assert_eq!(p.folds(), 0);
    let n = 200u64;
    for s in 1..=n {
        storage.append(&[entry(s)]).unwrap();
        p.submit(entry_write(s, &mut storage));
        // One group each.
        assert_eq!(reports.recv_timeout(Duration::from_secs(60)).unwrap(), s);
    }
    let folds = p.folds();
    assert!(folds >= 3, "{folds} folds of a 4 KiB log after {n} groups");
    p.close().unwrap();
    let (s, _p, recovered) = open_sync(dir.path(), vec![1]);
    assert_eq!(recovered.ops.len() as u64, n);
    assert_eq!(s.last_index().unwrap(), n);
}
