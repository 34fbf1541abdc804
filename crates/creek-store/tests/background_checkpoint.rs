//! Background checkpoints (`Store::start_checkpoint`): written a chunk per
//! transaction between the writes, made the latest only once whole and
//! once the write they follow is durable; a crash part-way keeps the
//! previous checkpoint, and a newer checkpoint stored meanwhile wins.
#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::TempDir;
use creek_cab::CabStorage;
use creek_core::{Checkpoint, Timestamp};
use creek_node::{CheckpointJob, Write};
use creek_store::{Loaded, Piece, Store};
use raft::eraftpb::Entry;
use raft::Storage;

/// Bytes per chunk: the checkpoints below take dozens.
const CHUNK: usize = 64;

fn load(dir: &TempDir) -> Loaded {
    let mut loaded = creek_store::load(dir.path(), vec![1]).unwrap();
    loaded.store = loaded.store.with_checkpoint_chunk_bytes(CHUNK);
    loaded
}

fn checkpoint(tag: &str, keys: usize) -> Checkpoint {
    Checkpoint {
        cab_applied: 0,
        committed_len: keys as u64,
        state: (0..keys)
            .map(|k| {
                (
                    Bytes::from(format!("key-{k:04}")),
                    Bytes::from(format!("{tag}-value-{k}-{}", "x".repeat(k % 30))),
                )
            })
            .collect(),
        hlc: Timestamp::new(9_000, 1),
        next_event_no: 3,
        commit_time: 0,
        group: Default::default(),
        ..Checkpoint::default()
    }
}

fn job(id: u64, after: u64, checkpoint: Checkpoint) -> CheckpointJob {
    CheckpointJob {
        id,
        after,
        checkpoint,
    }
}

/// A write of log entry `index` (numbered `index`).
fn log_write(loaded: &mut Loaded, index: u64) -> Write {
    loaded
        .storage
        .append(&[Entry {
            index,
            term: 1,
            ..Default::default()
        }])
        .unwrap();
    Write {
        seq: index,
        log: loaded.storage.take_writes(),
        ..Write::default()
    }
}

/// Pieces of `w` until it is no longer `Written`; how many were.
fn pieces(store: &Store, w: &mut creek_store::CheckpointWriter) -> (usize, Piece) {
    let mut n = 0;
    loop {
        match store.write_checkpoint_piece(w).unwrap() {
            Piece::Written => n += 1,
            other => return (n, other),
        }
    }
}

/// The chunks of older checkpoints removed by `w`, until it is finished.
fn removals(store: &Store, w: &mut creek_store::CheckpointWriter) -> usize {
    let mut n = 0;
    loop {
        match store.write_checkpoint_piece(w).unwrap() {
            Piece::Removed => n += 1,
            Piece::Finished => return n,
            other => panic!("removing wrote {other:?}"),
        }
    }
}

/// Write `c` as a checkpoint installed from a peer, in write `seq`.
fn install(store: &Store, seq: u64, c: &Checkpoint) {
    store
        .write(&[Write {
            seq,
            checkpoint: Some(c.clone()),
            ..Write::default()
        }])
        .unwrap();
}

/// The generations of the stored chunks.
fn chunk_generations(dir: &TempDir) -> std::collections::BTreeSet<u64> {
    use redb::{ReadableDatabase, ReadableTable};
    let db = redb::Database::create(dir.sub(creek_store::FILE_NAME)).unwrap();
    let txn = db.begin_read().unwrap();
    let def: redb::TableDefinition<(u64, u32), &[u8]> =
        redb::TableDefinition::new("checkpoint_chunks");
    let t = txn.open_table(def).unwrap();
    t.iter()
        .unwrap()
        .map(|row| row.unwrap().0.value().0)
        .collect()
}

#[test]
fn written_in_chunks_between_writes_and_found_after_reopen() {
    let dir = TempDir::new("bg-chunks");
    let c = checkpoint("a", 200);
    {
        let mut loaded = load(&dir);
        let w1 = log_write(&mut loaded, 1);
        loaded.store.write(&[w1]).unwrap();
        let mut w = loaded.store.start_checkpoint(job(1, 1, c.clone()));
        let mut chunks = 0;
        let mut index = 2;
        loop {
            // A write between every two chunks.
            let write = log_write(&mut loaded, index);
            loaded.store.write(&[write]).unwrap();
            index += 1;
            match loaded.store.write_checkpoint_piece(&mut w).unwrap() {
                Piece::Written => chunks += 1,
                Piece::Done => break,
                other => panic!("{other:?}"),
            }
        }
        assert!(chunks > 50, "{chunks} chunks");
        assert_eq!(
            loaded.store.write_checkpoint_piece(&mut w).unwrap(),
            Piece::Finished,
            "nothing older to remove"
        );
        // The next one: the older generation goes, a few chunks per
        // transaction, once the new one is the latest.
        let mut w = loaded
            .store
            .start_checkpoint(job(2, 0, checkpoint("b", 200)));
        let (_, done) = pieces(&loaded.store, &mut w);
        assert_eq!(done, Piece::Done);
        let removals = removals(&loaded.store, &mut w);
        assert!(
            removals * creek_store::REMOVED_PER_TRANSACTION >= chunks,
            "{removals} removals"
        );
    }
    let loaded = load(&dir);
    assert_eq!(loaded.recovered.checkpoint, Some(checkpoint("b", 200)));
    assert_ne!(loaded.recovered.checkpoint, Some(c));
    assert!(loaded.storage.last_index().unwrap() > 50);
    drop(loaded);
    assert_eq!(chunk_generations(&dir).len(), 1);
}

#[test]
fn a_crash_part_way_keeps_the_previous_checkpoint() {
    let dir = TempDir::new("bg-crash");
    let old = checkpoint("old", 20);
    {
        let loaded = load(&dir);
        install(&loaded.store, 1, &old);
        let mut w = loaded
            .store
            .start_checkpoint(job(1, 1, checkpoint("new", 200)));
        for _ in 0..5 {
            assert_eq!(
                loaded.store.write_checkpoint_piece(&mut w).unwrap(),
                Piece::Written
            );
        }
        // Gone without finishing: what a crash leaves.
    }
    assert_eq!(
        chunk_generations(&dir).len(),
        2,
        "the old and a partial one"
    );
    let loaded = load(&dir);
    assert_eq!(loaded.recovered.checkpoint, Some(old));
    drop(loaded);
    assert_eq!(chunk_generations(&dir).len(), 1, "the partial one removed");
}

#[test]
fn a_newer_checkpoint_stored_meanwhile_supersedes_it() {
    let dir = TempDir::new("bg-superseded");
    let installed = checkpoint("installed", 30);
    {
        let loaded = load(&dir);
        let mut w = loaded
            .store
            .start_checkpoint(job(1, 0, checkpoint("background", 200)));
        assert_eq!(
            loaded.store.write_checkpoint_piece(&mut w).unwrap(),
            Piece::Written
        );
        install(&loaded.store, 1, &installed);
        assert_eq!(
            loaded.store.write_checkpoint_piece(&mut w).unwrap(),
            Piece::Superseded
        );
        assert_eq!(
            loaded.store.write_checkpoint_piece(&mut w).unwrap(),
            Piece::Removed
        );
        assert_eq!(
            loaded.store.write_checkpoint_piece(&mut w).unwrap(),
            Piece::Finished
        );
    }
    assert_eq!(chunk_generations(&dir).len(), 1);
    assert_eq!(load(&dir).recovered.checkpoint, Some(installed));
}

#[test]
fn it_waits_for_the_write_it_follows() {
    let dir = TempDir::new("bg-after");
    let c = checkpoint("a", 10);
    {
        let mut loaded = load(&dir);
        let mut w = loaded.store.start_checkpoint(job(1, 2, c.clone()));
        let (written, last) = pieces(&loaded.store, &mut w);
        assert!(written > 1);
        assert_eq!(last, Piece::Waiting, "write 2 is not durable yet");
        let w1 = log_write(&mut loaded, 1);
        loaded.store.write(&[w1]).unwrap();
        assert_eq!(pieces(&loaded.store, &mut w), (0, Piece::Waiting));
        let w2 = log_write(&mut loaded, 2);
        loaded.store.write(&[w2]).unwrap();
        assert_eq!(pieces(&loaded.store, &mut w), (0, Piece::Done));
    }
    assert_eq!(load(&dir).recovered.checkpoint, Some(c));
}

#[test]
fn an_installed_checkpoint_lets_the_older_one_be_removed_at_once() {
    let dir = TempDir::new("bg-installed");
    let installed = checkpoint("installed", 30);
    {
        let loaded = load(&dir);
        let mut w = loaded
            .store
            .start_checkpoint(job(1, 0, checkpoint("background", 40)));
        assert_eq!(pieces(&loaded.store, &mut w).1, Piece::Done);
        install(&loaded.store, 1, &installed);
        let mut cleaning = loaded.store.start_cleaning();
        assert!(removals(&loaded.store, &mut cleaning) > 0);
    }
    assert_eq!(chunk_generations(&dir).len(), 1);
    assert_eq!(load(&dir).recovered.checkpoint, Some(installed));
}
