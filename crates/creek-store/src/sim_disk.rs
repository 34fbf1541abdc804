//! A disk in memory with an unsynced tail, as a redb storage backend and a
//! `WalFile`: the simulator's disk. It holds several files (the database
//! and its write-ahead log, [`SimDisk::file`]) in one write order. Reads see
//! every write; a write is durable only once a `sync_data` that followed it
//! (on any file of the disk) has *completed*, which the simulator decides in
//! virtual time ([`SimDisk::complete_sync`]). A crash
//! ([`SimDisk::crash`]) throws away every write that is not durable — or,
//! for a torn write, all but a prefix of them in write order, the last
//! change of that prefix persisted only in its first sector: a disk that
//! honours write barriers but lost power in the middle of a write.
//!
//! Not a mock of redb: the real database runs on it, so its commit protocol
//! (one fsync, checksummed commit slots) is what a crash is tested against.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use redb::StorageBackend;

/// A shared handle to one file of a simulated disk: clones see the same
/// bytes (the database holds one, the simulator another). What happens to
/// the disk (a sync completing, a crash) happens to all of its files.
#[derive(Clone, Debug, Default)]
pub struct SimDisk {
    image: Arc<Mutex<Image>>,
    /// Which file of the disk this handle reads and writes.
    file: usize,
}

#[derive(Clone, Debug, Default)]
struct Image {
    /// What reads see, by file: the durable bytes with the unsynced changes
    /// applied.
    files: Vec<Vec<u8>>,
    /// How to take back each change not yet durable, oldest first.
    undo: Vec<Undo>,
    /// `undo[..requested]` precede a `sync_data` not yet completed.
    requested: usize,
    /// The next `sync_data` fails.
    fail_next_sync: bool,
}

/// The bytes a change replaced.
#[derive(Clone, Debug)]
struct Undo {
    file: usize,
    offset: u64,
    old: Vec<u8>,
    old_len: u64,
    new_len: u64,
}

/// Bytes of a torn change that persist.
pub const SECTOR_BYTES: usize = 512;

/// What a crash took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashLoss {
    /// Changes (writes and resizes) lost.
    pub changes_lost: usize,
    /// Changes that survived although not synced (a torn write), the
    /// partly persisted one included.
    pub changes_kept: usize,
}

impl SimDisk {
    /// An empty disk; the handle is to its file 0 (the database's).
    pub fn new() -> Self {
        SimDisk::default()
    }

    /// A handle to file `file` of the same disk (empty until written).
    pub fn file(&self, file: usize) -> SimDisk {
        SimDisk {
            image: self.image.clone(),
            file,
        }
    }

    /// The file of the same disk that holds the write-ahead log (file 1),
    /// for [`crate::load_backend`] beside the database on file 0.
    pub fn wal(&self) -> SimDisk {
        self.file(1)
    }

    fn image(&self) -> MutexGuard<'_, Image> {
        self.image.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An independent copy of this disk, unsynced changes included (to
    /// crash one state in several ways).
    pub fn fork(&self) -> SimDisk {
        SimDisk {
            image: Arc::new(Mutex::new(self.image().clone())),
            file: self.file,
        }
    }

    /// Every change up to the last `sync_data` is durable now.
    pub fn complete_sync(&self) {
        let mut img = self.image();
        let done = img.requested;
        img.undo.drain(..done);
        img.requested = 0;
    }

    /// The next `sync_data` fails with an I/O error (and syncs nothing).
    pub fn fail_next_sync(&self) {
        self.image().fail_next_sync = true;
    }

    /// Changes not yet durable.
    pub fn unsynced_changes(&self) -> usize {
        self.image().undo.len()
    }

    /// Power loss: every change not durable is lost, except the first
    /// `torn` of them (in write order), the last of which persists only in
    /// its first [`SECTOR_BYTES`] when it overwrote bytes in place. `torn`
    /// 0 is a clean loss. Close the database first: nothing may write after
    /// the crash.
    pub fn crash(&self, torn: usize) -> CrashLoss {
        let mut img = self.image();
        let undo = std::mem::take(&mut img.undo);
        let torn = torn.min(undo.len());
        let loss = CrashLoss {
            changes_lost: undo.len() - torn,
            changes_kept: torn,
        };
        for (i, u) in undo.into_iter().enumerate().rev() {
            if i + 1 < torn {
                break;
            }
            let mut start = 0;
            if i + 1 == torn {
                // The torn one: an in-place overwrite keeps its first sector.
                if u.old_len != u.new_len || u.old.len() <= SECTOR_BYTES {
                    continue;
                }
                start = SECTOR_BYTES;
            }
            let data = img.data(u.file);
            let at = u.offset as usize + start;
            let end = u.offset as usize + u.old.len();
            if data.len() < end {
                data.resize(end, 0);
            }
            data[at..end].copy_from_slice(&u.old[start..]);
            data.resize(u.old_len as usize, 0);
        }
        img.requested = 0;
        img.fail_next_sync = false;
        loss
    }
}

impl Image {
    /// The bytes of `file` (created empty).
    fn data(&mut self, file: usize) -> &mut Vec<u8> {
        if self.files.len() <= file {
            self.files.resize_with(file + 1, Vec::new);
        }
        &mut self.files[file]
    }

    /// The length of `file` after the last change.
    fn note_len(&mut self, file: usize) {
        let len = self.data(file).len() as u64;
        if let Some(u) = self.undo.last_mut() {
            u.new_len = len;
        }
    }

    /// Record how to take back a change of the bytes `[offset, end)` of
    /// `file` (a write, or the tail a shrink drops) and of its length.
    fn remember(&mut self, file: usize, offset: u64, end: u64) {
        let data = self.data(file);
        let len = data.len();
        let start = (offset as usize).min(len);
        let end = (end as usize).clamp(start, len);
        let old = data[start..end].to_vec();
        self.undo.push(Undo {
            file,
            offset: start as u64,
            old,
            old_len: len as u64,
            new_len: len as u64,
        });
    }
}

fn range_error(offset: u64, len: usize, size: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("read of {len} bytes at {offset} past the end of a {size}-byte disk"),
    )
}

impl StorageBackend for SimDisk {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.image().data(self.file).len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let mut img = self.image();
        let data = img.data(self.file);
        let len = out.len();
        let bytes = usize::try_from(offset)
            .ok()
            .and_then(|start| data.get(start..start.checked_add(len)?))
            .ok_or_else(|| range_error(offset, len, data.len()))?;
        out.copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut img = self.image();
        let old_len = img.data(self.file).len() as u64;
        if len != old_len {
            img.remember(self.file, len, old_len);
            img.data(self.file).resize(len as usize, 0);
            img.note_len(self.file);
        }
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let mut img = self.image();
        if std::mem::take(&mut img.fail_next_sync) {
            return Err(io::Error::other("simulated fsync failure"));
        }
        img.requested = img.undo.len();
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut img = self.image();
        let start = offset as usize;
        let end = start + data.len();
        img.remember(self.file, offset, end as u64);
        let file = img.data(self.file);
        if file.len() < end {
            file.resize(end, 0);
        }
        file[start..end].copy_from_slice(data);
        img.note_len(self.file);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn read(d: &SimDisk, offset: u64, len: usize) -> Result<Vec<u8>, io::Error> {
        let mut out = vec![0; len];
        d.read(offset, &mut out)?;
        Ok(out)
    }

    #[test]
    fn a_crash_takes_back_exactly_the_unsynced_changes() {
        let d = SimDisk::new();
        d.write(0, b"hello").unwrap();
        d.sync_data().unwrap();
        d.complete_sync();
        d.write(3, b"p me").unwrap(); // "help me"
        d.set_len(4).unwrap(); // "help"
        assert_eq!(read(&d, 0, 4).unwrap(), b"help");
        let loss = d.crash(0);
        assert_eq!(loss.changes_lost, 2);
        assert_eq!(d.len().unwrap(), 5);
        assert_eq!(read(&d, 0, 5).unwrap(), b"hello");
    }

    #[test]
    fn a_requested_sync_is_durable_only_once_completed() {
        let d = SimDisk::new();
        d.write(0, b"abc").unwrap();
        d.sync_data().unwrap();
        d.write(3, b"def").unwrap();
        // The fsync is still in flight: the crash loses both writes.
        d.crash(0);
        assert_eq!(d.len().unwrap(), 0);
        d.write(0, b"abc").unwrap();
        d.sync_data().unwrap();
        d.write(3, b"def").unwrap();
        d.complete_sync();
        // Completed: the first write stays, the later one does not.
        d.crash(0);
        assert_eq!(read(&d, 0, 3).unwrap(), b"abc");
        assert_eq!(d.len().unwrap(), 3);
    }

    #[test]
    fn a_shrink_then_grow_comes_back_whole() {
        let d = SimDisk::new();
        d.write(0, b"0123456789").unwrap();
        d.sync_data().unwrap();
        d.complete_sync();
        d.set_len(2).unwrap();
        d.write(4, b"xy").unwrap();
        d.crash(0);
        assert_eq!(read(&d, 0, 10).unwrap(), b"0123456789");
    }

    #[test]
    fn a_failed_sync_makes_nothing_durable() {
        let d = SimDisk::new();
        d.write(0, b"abc").unwrap();
        d.fail_next_sync();
        assert!(d.sync_data().is_err());
        d.complete_sync();
        d.crash(0);
        assert_eq!(d.len().unwrap(), 0);
    }

    #[test]
    fn a_torn_crash_keeps_a_prefix_and_one_sector_of_the_next() {
        let d = SimDisk::new();
        d.write(0, &[0u8; 2048]).unwrap();
        d.sync_data().unwrap();
        d.complete_sync();
        d.write(0, &[1u8; 1024]).unwrap();
        d.write(1024, &[2u8; 1024]).unwrap();
        d.write(0, &[3u8; 16]).unwrap();
        assert_eq!(d.unsynced_changes(), 3);
        let loss = d.crash(2);
        assert_eq!(loss.changes_lost, 1);
        let data = read(&d, 0, 2048).unwrap();
        assert!(
            data[..1024].iter().all(|b| *b == 1),
            "the first change whole"
        );
        assert!(data[1024..1024 + SECTOR_BYTES].iter().all(|b| *b == 2));
        assert!(data[1024 + SECTOR_BYTES..].iter().all(|b| *b == 0), "torn");
    }

    /// A database not closed cleanly is repaired at open, and the open says
    /// so (the server logs it); a clean close is not.
    #[test]
    fn an_unclean_close_is_reported_as_repaired() {
        let disk = SimDisk::new();
        let voters = vec![1, 2, 3];
        let loaded = crate::load_backend(disk.clone(), disk.wal(), voters.clone()).unwrap();
        assert!(!loaded.recovered.repaired, "a new disk");
        disk.complete_sync();
        // Power loss while open: the clean-shutdown mark written as the
        // database goes never becomes durable.
        drop(loaded);
        disk.crash(0);
        let loaded = crate::load_backend(disk.clone(), disk.wal(), voters.clone()).unwrap();
        assert!(loaded.recovered.repaired, "after a crash");
        // A clean close: the database's last write is synced.
        drop(loaded);
        disk.complete_sync();
        let loaded = crate::load_backend(disk.clone(), disk.wal(), voters).unwrap();
        assert!(!loaded.recovered.repaired, "after a clean close");
    }

    #[test]
    fn the_files_of_a_disk_share_one_write_order() {
        let db = SimDisk::new();
        let wal = db.wal();
        db.write(0, b"db-1").unwrap();
        wal.write(0, b"wal-1").unwrap();
        db.write(4, b"db-2").unwrap();
        // A sync on either file covers the writes to both before it.
        wal.sync_data().unwrap();
        db.complete_sync();
        db.write(8, b"db-3").unwrap();
        wal.write(5, b"wal-2").unwrap();
        assert_eq!(wal.unsynced_changes(), 2);
        // A crash keeping one change keeps the earlier one, whatever file.
        let loss = db.crash(1);
        assert_eq!(loss.changes_lost, 1);
        assert_eq!(read(&db, 0, 12).unwrap(), b"db-1db-2db-3");
        assert_eq!(wal.len().unwrap(), 5);
        assert_eq!(read(&wal, 0, 5).unwrap(), b"wal-1");
    }

    #[test]
    fn reads_past_the_end_are_errors() {
        let d = SimDisk::new();
        d.write(0, b"abc").unwrap();
        assert!(read(&d, 2, 2).is_err());
        assert!(read(&d, u64::MAX, 1).is_err());
    }
}
