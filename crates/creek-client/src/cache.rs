//! The client cache (docs/snapshot-reads.md, "The client cache"): the
//! client's own acknowledged writes of plain keys, each with its commit
//! time once known, laid over its snapshot reads of those keys until its
//! read time passes the commit time — so a client reads its writes on any
//! replica and any shard, Wren-style, without a snapshot read waiting for
//! them to become stable.
//!
//! A plain bounded map with no clock and no I/O: the client feeds it the
//! writes it learns of and the times it reads at. Not a read cache: it
//! never holds a value the client did not write.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::known::KeyEffect;

/// The default bound on the keys' and values' bytes the cache holds.
pub const CACHE_BYTES_MAX_DEFAULT: usize = 1 << 20;

/// One write the cache holds, as [`crate::Client::cache_entries`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedWrite {
    /// The key written.
    pub key: Bytes,
    /// Its value, or `None` if the write deleted it.
    pub value: Option<Bytes>,
    /// The write's commit time, once its final view told it (µs).
    pub commit_time: Option<u64>,
}

#[derive(Clone, Debug)]
struct Entry {
    value: Option<Bytes>,
    /// The client's number of the write (later writes, higher numbers).
    write: u64,
    commit_time: Option<u64>,
}

impl Entry {
    fn bytes(&self, key: &Bytes) -> usize {
        key.len() + self.value.as_ref().map_or(0, Bytes::len)
    }
}

/// The client's acknowledged writes not yet in every snapshot it reads.
#[derive(Debug)]
pub(crate) struct WriteCache {
    entries: BTreeMap<Bytes, Entry>,
    bytes: usize,
    bytes_max: usize,
    /// The read times snapshot reads in flight were sent with (how many at
    /// each): an entry stays while one of them may read before it.
    in_flight: BTreeMap<u64, usize>,
}

impl WriteCache {
    pub(crate) fn new(bytes_max: usize) -> WriteCache {
        WriteCache {
            entries: BTreeMap::new(),
            bytes: 0,
            bytes_max,
            in_flight: BTreeMap::new(),
        }
    }

    /// Hold write number `write`'s effect on its keys, with its commit
    /// time if known. A key a later write already holds keeps that write.
    /// `false` if the effect does not fit in the bound: nothing of it is
    /// held then, and the keys' earlier writes are dropped (the write
    /// supersedes them; the caller reads at its commit time instead).
    pub(crate) fn record(
        &mut self,
        write: u64,
        effect: &[KeyEffect],
        commit_time: Option<u64>,
    ) -> bool {
        let mut bytes = self.bytes;
        for (key, value) in effect {
            match self.entries.get(key) {
                Some(e) if e.write > write => continue,
                Some(e) => bytes -= e.bytes(key),
                None => {}
            }
            bytes += key.len() + value.as_ref().map_or(0, Bytes::len);
        }
        if bytes > self.bytes_max {
            for (key, _) in effect {
                if self.entries.get(key).is_some_and(|e| e.write <= write) {
                    self.remove(key);
                }
            }
            return false;
        }
        for (key, value) in effect {
            if self.entries.get(key).is_some_and(|e| e.write > write) {
                continue;
            }
            let entry = Entry {
                value: value.clone(),
                write,
                commit_time,
            };
            self.bytes += entry.bytes(key);
            if let Some(old) = self.entries.insert(key.clone(), entry) {
                self.bytes -= old.bytes(key);
            }
        }
        debug_assert_eq!(self.bytes, bytes, "the cache's byte count");
        true
    }

    /// Drop every key write number `write` still holds (it aborted, or was
    /// never acknowledged, or its final view replaces its effect).
    pub(crate) fn forget(&mut self, write: u64) {
        let keys: Vec<Bytes> = self
            .entries
            .iter()
            .filter(|(_, e)| e.write == write)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.remove(&key);
        }
    }

    fn remove(&mut self, key: &Bytes) {
        if let Some(old) = self.entries.remove(key) {
            self.bytes -= old.bytes(key);
        }
    }

    /// The value a snapshot view at `time` shows for `key`: the cached
    /// write's (`Some(None)`: deleted) if its commit time is unknown or
    /// after `time`; `None` if the snapshot already holds the client's
    /// writes of `key`.
    pub(crate) fn overlay(&self, key: &[u8], time: u64) -> Option<Option<Bytes>> {
        let e = self.entries.get(key)?;
        match e.commit_time {
            Some(ct) if ct <= time => None,
            _ => Some(e.value.clone()),
        }
    }

    /// Drop the writes every later snapshot read includes: those committed
    /// at or before `read_time` and before every read time a read in
    /// flight was sent with.
    pub(crate) fn evict(&mut self, read_time: u64) {
        let horizon = self
            .in_flight
            .keys()
            .next()
            .map_or(read_time, |t| (*t).min(read_time));
        let keys: Vec<Bytes> = self
            .entries
            .iter()
            .filter(|(_, e)| e.commit_time.is_some_and(|ct| ct <= horizon))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.remove(&key);
        }
    }

    /// A snapshot read sent with read time `time` is in flight.
    pub(crate) fn read_started(&mut self, time: u64) {
        *self.in_flight.entry(time).or_default() += 1;
    }

    /// The snapshot read sent with `time` answered (or failed).
    pub(crate) fn read_ended(&mut self, time: u64) {
        if let Some(n) = self.in_flight.get_mut(&time) {
            *n -= 1;
            if *n == 0 {
                self.in_flight.remove(&time);
            }
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn entries(&self) -> Vec<CachedWrite> {
        self.entries
            .iter()
            .map(|(key, e)| CachedWrite {
                key: key.clone(),
                value: e.value.clone(),
                commit_time: e.commit_time,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn put(key: &str, value: &str) -> KeyEffect {
        (k(key), Some(k(value)))
    }

    #[test]
    fn a_write_shows_over_snapshots_older_than_its_commit_time() {
        let mut c = WriteCache::new(1024);
        assert!(c.record(1, &[put("a", "1")], None));
        // Commit time unknown: every snapshot shows it.
        assert_eq!(c.overlay(b"a", 1_000_000), Some(Some(k("1"))));
        assert_eq!(c.overlay(b"b", 0), None);
        assert!(c.record(1, &[put("a", "1")], Some(50)));
        assert_eq!(c.overlay(b"a", 49), Some(Some(k("1"))));
        assert_eq!(c.overlay(b"a", 50), None, "the snapshot at 50 holds it");
        // A delete shows as absent.
        assert!(c.record(2, &[(k("d"), None)], None));
        assert_eq!(c.overlay(b"d", 10), Some(None));
    }

    #[test]
    fn a_later_write_of_a_key_wins_whatever_order_they_are_recorded_in() {
        let mut c = WriteCache::new(1024);
        assert!(c.record(2, &[put("a", "new")], None));
        assert!(c.record(1, &[put("a", "old"), put("b", "x")], Some(5)));
        assert_eq!(c.overlay(b"a", 0), Some(Some(k("new"))));
        assert_eq!(c.overlay(b"b", 0), Some(Some(k("x"))));
        assert_eq!(c.bytes(), "anew".len() + "bx".len());
        c.forget(1);
        assert_eq!(c.overlay(b"b", 0), None);
        assert_eq!(c.overlay(b"a", 0), Some(Some(k("new"))));
    }

    #[test]
    fn entries_leave_once_the_read_time_passes_their_commit_time() {
        let mut c = WriteCache::new(1024);
        c.record(1, &[put("a", "1")], Some(10));
        c.record(2, &[put("b", "2")], Some(20));
        c.record(3, &[put("c", "3")], None);
        c.evict(15);
        let keys: Vec<Bytes> = c.entries().into_iter().map(|e| e.key).collect();
        assert_eq!(keys, vec![k("b"), k("c")]);
        // A read sent at 12 is still out: it may read before b's commit.
        c.read_started(12);
        c.evict(25);
        assert_eq!(c.entries().len(), 2);
        c.read_ended(12);
        c.evict(25);
        assert_eq!(c.entries().len(), 1, "the write of unknown time stays");
        assert_eq!(c.bytes(), 2);
    }

    #[test]
    fn a_write_that_does_not_fit_is_not_held_and_supersedes_the_keys_earlier_writes() {
        let mut c = WriteCache::new(10);
        assert!(c.record(1, &[put("a", "1234")], None));
        assert!(c.record(2, &[put("b", "1234")], None));
        assert_eq!(c.bytes(), 10);
        // Replacing a key's value counts the difference only.
        assert!(c.record(3, &[put("a", "5678")], None));
        assert!(!c.record(4, &[put("a", "123456"), put("c", "1")], None));
        assert_eq!(c.overlay(b"a", 0), None, "a's earlier write is superseded");
        assert_eq!(c.overlay(b"c", 0), None);
        assert_eq!(c.overlay(b"b", 0), Some(Some(k("1234"))));
        assert_eq!(c.bytes(), 5);
    }
}
