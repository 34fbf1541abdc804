//! What a damaged disk does to an open. A crash at any moment, including
//! while an open is repairing the damage of the previous crash, leaves a
//! disk that opens and keeps every write that was durable (exhaustive over
//! the simulator's torn-write model: every prefix of the unsynced changes of
//! the first crash, then every prefix of the repair's own changes for the
//! second). Bytes overwritten outside any commit (bit rot, a stray writer)
//! give an error or a repaired database, never a panic.
#![allow(clippy::unwrap_used)]

mod common;

use common::write_entries;
use creek_store::{load_backend, Loaded, SimDisk, StoreError};
use raft::Storage;
use redb::StorageBackend;

fn voters() -> Vec<u64> {
    vec![1, 2, 3]
}

/// A disk whose first `DURABLE` entries are synced, followed by commits
/// that are not: a large suffix replaced by a small one (the file grows,
/// then frees pages and shrinks) and more growth.
const DURABLE: u64 = 20;

fn disk_with_unsynced_tail() -> SimDisk {
    let disk = SimDisk::new();
    let mut loaded = load_backend(disk.clone(), disk.wal(), voters()).unwrap();
    write_entries(&mut loaded, 1, DURABLE + 1, 1, 4096);
    disk.complete_sync();
    write_entries(&mut loaded, DURABLE + 1, DURABLE + 12, 1, 200_000);
    write_entries(&mut loaded, DURABLE + 1, DURABLE + 3, 1, 16);
    write_entries(&mut loaded, DURABLE + 3, DURABLE + 8, 1, 200_000);
    drop(loaded);
    disk
}

/// Open `disk` (the open must succeed: every change it holds was written
/// in an order the disk honours) and check the durable entries survived.
fn open_and_check(disk: &SimDisk, what: &str) -> Loaded {
    let loaded = load_backend(disk.clone(), disk.wal(), voters())
        .unwrap_or_else(|e| panic!("{what}: the disk does not open: {e}"));
    let last = loaded.storage.last_index().unwrap();
    assert!(
        last >= DURABLE,
        "{what}: durable entries lost (last {last})"
    );
    let ents = loaded
        .storage
        .entries(1, DURABLE + 1, None, raft::GetEntriesContext::empty(false))
        .unwrap();
    for e in ents.iter() {
        assert_eq!(e.data.len(), 4096, "{what}: entry {} damaged", e.index);
        assert!(e.data.iter().all(|b| *b == e.index as u8), "{what}");
    }
    loaded
}

#[test]
fn a_crash_while_repairing_a_crash_still_opens() {
    let base = disk_with_unsynced_tail();
    let tail = base.unsynced_changes();
    assert!(tail > 5, "the scenario has an unsynced tail to tear");
    let mut repairs = 0;
    for first in 0..=tail {
        let crashed = base.fork();
        crashed.crash(first);
        let repaired = crashed.fork();
        let loaded = open_and_check(&repaired, &format!("crash at {first}"));
        repairs += usize::from(loaded.recovered.repaired);
        drop(loaded);
        // Power fails again before anything the open wrote was synced, at
        // every point of it.
        for second in 0..=repaired.unsynced_changes() {
            let disk = crashed.fork();
            drop(load_backend(disk.clone(), disk.wal(), voters()).unwrap());
            disk.crash(second);
            let what = format!("crash at {first}, then at {second} of the repair");
            drop(open_and_check(&disk, &what));
        }
    }
    assert!(repairs > 0, "some first crashes need a repair");
}

#[test]
fn overwritten_bytes_are_an_error_never_a_panic() {
    let disk = SimDisk::new();
    let mut loaded = load_backend(disk.clone(), disk.wal(), voters()).unwrap();
    write_entries(&mut loaded, 1, DURABLE + 1, 1, 4096);
    write_entries(&mut loaded, DURABLE + 1, DURABLE + 30, 1, 1000);
    drop(loaded);
    disk.complete_sync();
    let len = disk.len().unwrap();
    // xorshift: a fixed, reproducible scatter of damage.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut refused = 0;
    for trial in 0..300 {
        let damaged = disk.fork();
        for _ in 0..4 {
            let r = next();
            damaged.write(r % len, &[(r >> 32) as u8]).unwrap();
        }
        let opened =
            std::panic::catch_unwind(|| load_backend(damaged.clone(), damaged.wal(), voters()));
        match opened {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                refused += 1;
                assert!(
                    matches!(e, StoreError::Corrupt(_) | StoreError::Db(_)),
                    "trial {trial}: {e}"
                );
            }
            Err(_) => panic!("trial {trial}: the open panicked"),
        }
    }
    assert!(refused > 0, "some damage is detected");
}
