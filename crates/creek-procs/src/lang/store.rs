//! What a running procedure needs from the database, and an in-memory
//! implementation for tests and tools.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

/// The store a procedure reads and writes. The executor implements it over
/// its transaction, so every call sees the procedure's own earlier writes
/// and nothing of other executions.
///
/// Contract: calls are deterministic functions of the store's contents and
/// the calls made so far; they never fail (an implementation that must
/// refuse something, e.g. an oversized value, records it and aborts the
/// whole execution after `run` returns). Keyspace names are those the
/// procedure was compiled against ([`super::CompiledProc::reads`] and
/// [`super::CompiledProc::writes`]).
pub trait Store {
    /// The value at `key` in keyspace `ks`, or `None` if absent.
    fn get(&mut self, ks: &str, key: &[u8]) -> Option<Bytes>;
    /// Set `key` in `ks` to `value`.
    fn put(&mut self, ks: &str, key: Bytes, value: Bytes);
    /// Remove `key` from `ks` (nothing happens if it is absent).
    fn delete(&mut self, ks: &str, key: Bytes);
    /// Up to `limit` entries of `ks` with `from <= key < to`, in ascending
    /// key order.
    fn scan(&mut self, ks: &str, from: &[u8], to: &[u8], limit: usize) -> Vec<(Bytes, Bytes)>;
}

/// A [`Store`] in a `BTreeMap` keyed by (keyspace, key).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemStore {
    /// Every entry.
    pub map: BTreeMap<(String, Vec<u8>), Bytes>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        MemStore::default()
    }
}

impl Store for MemStore {
    fn get(&mut self, ks: &str, key: &[u8]) -> Option<Bytes> {
        self.map.get(&(ks.to_owned(), key.to_vec())).cloned()
    }

    fn put(&mut self, ks: &str, key: Bytes, value: Bytes) {
        self.map.insert((ks.to_owned(), key.to_vec()), value);
    }

    fn delete(&mut self, ks: &str, key: Bytes) {
        self.map.remove(&(ks.to_owned(), key.to_vec()));
    }

    fn scan(&mut self, ks: &str, from: &[u8], to: &[u8], limit: usize) -> Vec<(Bytes, Bytes)> {
        if from >= to {
            return Vec::new();
        }
        let lo = (ks.to_owned(), from.to_vec());
        let hi = (ks.to_owned(), to.to_vec());
        self.map
            .range((Bound::Included(lo), Bound::Excluded(hi)))
            .take(limit)
            .map(|((_, k), v)| (Bytes::copy_from_slice(k), v.clone()))
            .collect()
    }
}
