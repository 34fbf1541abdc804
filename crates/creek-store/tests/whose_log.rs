//! A data directory's two files belong together: a database whose
//! write-ahead log is missing, emptied, or taken from another directory is
//! refused at open — never started with a log that forgot what this one
//! held — and so is a log with records beside a database that is new. A
//! directory written before logs had headers is adopted, losing nothing.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{write_entries, TempDir};
use creek_store::{load, Loaded, StoreError, FILE_NAME, HEADER_BLOCK, WAL_BYTES, WAL_FILE_NAME};
use raft::{GetEntriesContext, Storage};

fn voters() -> Vec<u64> {
    vec![1, 2, 3]
}

fn entries_of(l: &Loaded) -> Vec<(u64, u64, Vec<u8>)> {
    let s = &l.storage;
    let (first, last) = (s.first_index().unwrap(), s.last_index().unwrap());
    s.entries(first, last + 1, None, GetEntriesContext::empty(false))
        .unwrap()
        .into_iter()
        .map(|e| (e.index, e.term, e.data.to_vec()))
        .collect()
}

/// A directory whose last writes are only in its log (not folded: the
/// store is dropped, as by a crash, without a clean close), and the log
/// entries it holds.
fn directory_with_unfolded_writes(tag: &str) -> (TempDir, Vec<(u64, u64, Vec<u8>)>) {
    let dir = TempDir::new(tag);
    let mut loaded = load(dir.path(), voters()).unwrap();
    write_entries(&mut loaded, 1, 6, 1, 100);
    let want = entries_of(&loaded);
    assert_eq!(want.len(), 5);
    drop(loaded);
    (dir, want)
}

fn refused(dir: &Path) -> StoreError {
    load(dir, voters()).map(drop).unwrap_err()
}

#[test]
fn a_missing_log_is_refused_and_nothing_is_created() {
    let (dir, _) = directory_with_unfolded_writes("missing-wal");
    std::fs::remove_file(dir.sub(WAL_FILE_NAME)).unwrap();
    let e = refused(dir.path());
    assert!(matches!(e, StoreError::WalMissing), "{e}");
    assert!(e.to_string().contains("Lost a disk"), "{e}");
    assert!(
        !dir.sub(WAL_FILE_NAME).exists(),
        "the refusal created a log"
    );
    // Refused again, the same way.
    assert!(matches!(refused(dir.path()), StoreError::WalMissing));
}

#[test]
fn an_empty_or_zeroed_log_is_refused() {
    let (dir, _) = directory_with_unfolded_writes("empty-wal");
    let wal = dir.sub(WAL_FILE_NAME);
    std::fs::write(&wal, b"").unwrap();
    assert!(matches!(refused(dir.path()), StoreError::WalMissing));
    std::fs::write(&wal, vec![0u8; (HEADER_BLOCK + WAL_BYTES) as usize]).unwrap();
    assert!(matches!(refused(dir.path()), StoreError::WalMissing));
}

#[test]
fn another_directorys_log_is_refused() {
    let (a, want) = directory_with_unfolded_writes("foreign-a");
    let (b, _) = directory_with_unfolded_writes("foreign-b");
    let theirs = std::fs::read(b.sub(WAL_FILE_NAME)).unwrap();
    let ours = std::fs::read(a.sub(WAL_FILE_NAME)).unwrap();
    std::fs::write(a.sub(WAL_FILE_NAME), &theirs).unwrap();
    let e = refused(a.path());
    assert!(
        matches!(e, StoreError::WalForeign { found, expected } if found != expected),
        "{e}"
    );
    // Its own log back: it opens with everything.
    std::fs::write(a.sub(WAL_FILE_NAME), &ours).unwrap();
    assert_eq!(entries_of(&load(a.path(), voters()).unwrap()), want);
}

#[test]
fn a_log_with_records_beside_a_new_database_is_refused() {
    let (dir, _) = directory_with_unfolded_writes("orphaned-wal");
    std::fs::remove_file(dir.sub(FILE_NAME)).unwrap();
    let e = refused(dir.path());
    assert!(matches!(e, StoreError::WalOrphaned), "{e}");
}

#[test]
fn a_damaged_header_is_refused() {
    let (dir, _) = directory_with_unfolded_writes("damaged-header");
    let wal = dir.sub(WAL_FILE_NAME);
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes[20] ^= 0xff; // inside the id
    std::fs::write(&wal, &bytes).unwrap();
    let e = refused(dir.path());
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("header")),
        "{e}"
    );
}

#[test]
fn a_new_directory_and_a_clean_reopen_open() {
    let dir = TempDir::new("new-dir");
    drop(load(dir.path(), voters()).unwrap());
    let len = std::fs::metadata(dir.sub(WAL_FILE_NAME)).unwrap().len();
    assert_eq!(len, HEADER_BLOCK + WAL_BYTES);
    let mut loaded = load(dir.path(), voters()).unwrap();
    write_entries(&mut loaded, 1, 3, 1, 10);
    loaded.store.fold_wal().unwrap();
    let want = entries_of(&loaded);
    drop(loaded);
    assert_eq!(entries_of(&load(dir.path(), voters()).unwrap()), want);
}

/// A directory of the layout before headers: the log's records from the
/// file's start, no `wal_id` in the database. Made from a current one by
/// moving the records to the start and deleting the id.
#[test]
fn a_directory_from_before_headers_is_adopted_with_its_unfolded_records() {
    let (dir, want) = directory_with_unfolded_writes("legacy");
    let wal = dir.sub(WAL_FILE_NAME);
    let bytes = std::fs::read(&wal).unwrap();
    let mut old = bytes[HEADER_BLOCK as usize..].to_vec();
    old.truncate(WAL_BYTES as usize);
    std::fs::write(&wal, &old).unwrap();
    {
        let db = redb::Database::create(dir.sub(FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let meta: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("raft_meta");
            let mut t = txn.open_table(meta).unwrap();
            assert!(t.remove("wal_id").unwrap().is_some());
        }
        txn.commit().unwrap();
    }
    let loaded = load(dir.path(), voters()).unwrap();
    assert_eq!(
        entries_of(&loaded),
        want,
        "the old layout's records replayed"
    );
    drop(loaded);
    // Started over with a header: the next open checks it, and a later
    // loss of the log is refused.
    assert_eq!(&std::fs::read(&wal).unwrap()[..8], b"CREEKWAL");
    assert_eq!(entries_of(&load(dir.path(), voters()).unwrap()), want);
    std::fs::remove_file(&wal).unwrap();
    assert!(matches!(refused(dir.path()), StoreError::WalMissing));
}
