//! The write-ahead log under crashes: a crash at any point of a run of
//! appends, folds and log rewrites comes back as the state after some
//! group at or after the last durable one — never a mix, never a gap — and
//! a log that lost a record in its middle is refused, not cut short.
#![allow(clippy::unwrap_used)]

mod common;

use common::{put_raw, write_entries, TempDir};
use creek_store::{load_backend, SimDisk, StoreError, HEADER_BLOCK, WAL_BYTES};
use raft::{GetEntriesContext, Storage};

fn voters() -> Vec<u64> {
    vec![1, 2, 3]
}

/// The log's entries as (index, term, data).
fn entries_of(s: &impl Storage) -> Vec<(u64, u64, Vec<u8>)> {
    let (first, last) = (s.first_index().unwrap(), s.last_index().unwrap());
    s.entries(first, last + 1, None, GetEntriesContext::empty(false))
        .unwrap()
        .into_iter()
        .map(|e| (e.index, e.term, e.data.to_vec()))
        .collect()
}

/// The groups of the scenario: (from, to, term). Entries of 60 KiB fill the
/// log in about 34, so the unsynced tail folds once and starts a new round;
/// two of its groups replace entries written before.
const SIZE: usize = 60 << 10;
const GROUPS: &[(u64, u64, u64)] = &[
    (1, 11, 1),
    (11, 21, 1),
    (21, 26, 1), // durable up to here
    (26, 31, 1),
    (28, 33, 2), // replaces 28..31
    (33, 40, 2),
    (40, 41, 2),
    (38, 45, 3), // replaces 38..41
    (45, 46, 3),
];
const DURABLE_GROUPS: usize = 3;

#[test]
fn a_crash_anywhere_in_appends_and_a_fold_gives_the_state_after_some_group() {
    assert!(
        (SIZE as u64) * 45 > WAL_BYTES,
        "the scenario outgrows the log, so it folds"
    );
    let disk = SimDisk::new();
    let mut loaded = load_backend(disk.clone(), disk.wal(), voters()).unwrap();
    // The state after each group, as a store with no crash sees it.
    let mut after = vec![entries_of(&loaded.storage)];
    for (i, &(from, to, term)) in GROUPS.iter().enumerate() {
        write_entries(&mut loaded, from, to, term, SIZE);
        after.push(entries_of(&loaded.storage));
        if i + 1 == DURABLE_GROUPS {
            disk.complete_sync();
        }
    }
    drop(loaded);
    let tail = disk.unsynced_changes();
    assert!(tail >= GROUPS.len() - DURABLE_GROUPS, "an unsynced tail");
    let mut seen = std::collections::BTreeSet::new();
    for torn in 0..=tail {
        let crashed = disk.fork();
        crashed.crash(torn);
        let reopened = load_backend(crashed.clone(), crashed.wal(), voters())
            .unwrap_or_else(|e| panic!("crash keeping {torn}: the disk does not open: {e}"));
        let got = entries_of(&reopened.storage);
        let g = after
            .iter()
            .rposition(|state| *state == got)
            .unwrap_or_else(|| panic!("crash keeping {torn}: a state no group left"));
        assert!(
            g >= DURABLE_GROUPS,
            "crash keeping {torn}: durable groups lost (state after group {g})"
        );
        seen.insert(g);
        // A second crash right after the open (which folded what it found)
        // loses nothing more.
        drop(reopened);
        let again = crashed.fork();
        again.crash(0);
        let second = load_backend(again.clone(), again.wal(), voters()).unwrap();
        assert_eq!(
            entries_of(&second.storage),
            got,
            "crash keeping {torn}, twice"
        );
    }
    assert!(
        seen.len() > 2,
        "crashes land after different groups: {seen:?}"
    );
    assert!(seen.contains(&GROUPS.len()), "one crash keeps everything");
}

/// A clean close folds the log: the database file alone holds every write.
#[test]
fn a_clean_close_leaves_everything_in_the_database() {
    let disk = SimDisk::new();
    let mut loaded = load_backend(disk.clone(), disk.wal(), voters()).unwrap();
    write_entries(&mut loaded, 1, 6, 1, 100);
    let want = entries_of(&loaded.storage);
    loaded.store.fold_wal().unwrap();
    drop(loaded);
    // The log's records zeroed: nothing to replay.
    let wal = disk.wal();
    let zeros = vec![0u8; WAL_BYTES as usize];
    redb::StorageBackend::write(&wal, HEADER_BLOCK, &zeros).unwrap();
    let reopened = load_backend(disk.clone(), disk.wal(), voters()).unwrap();
    assert_eq!(entries_of(&reopened.storage), want);
}

#[test]
fn a_damaged_record_followed_by_the_next_is_refused() {
    // A byte of the first record's CRC, number or body flipped: the second
    // record still follows it.
    for at in [4, 8, 40].map(|at| HEADER_BLOCK + at) {
        let disk = SimDisk::new();
        let mut loaded = load_backend(disk.clone(), disk.wal(), voters()).unwrap();
        write_entries(&mut loaded, 1, 3, 1, 100);
        write_entries(&mut loaded, 3, 5, 1, 100);
        drop(loaded);
        let wal = disk.wal();
        let mut byte = [0u8; 1];
        redb::StorageBackend::read(&wal, at, &mut byte).unwrap();
        redb::StorageBackend::write(&wal, at, &[byte[0] ^ 0xff]).unwrap();
        let e = load_backend(disk.clone(), disk.wal(), voters()).unwrap_err();
        assert!(
            matches!(&e, StoreError::Corrupt(m) if m.contains("record 1 is damaged")),
            "byte {at}: {e}"
        );
    }
}

/// A database that lost a fold it reported durable (here: its record of
/// the last record applied set back) is refused, not silently behind.
#[test]
fn a_record_past_the_next_one_is_refused() {
    let dir = TempDir::new("wal-gap");
    {
        let mut loaded = creek_store::load(dir.path(), voters()).unwrap();
        // More than the log holds: a fold, then records of a new round.
        for i in 0..40 {
            write_entries(&mut loaded, i + 1, i + 2, 1, SIZE);
        }
    }
    put_raw(&dir, "raft_meta", "wal_applied", &1u64.to_le_bytes());
    let e = creek_store::load(dir.path(), voters()).unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("lost records")),
        "{e}"
    );
}
