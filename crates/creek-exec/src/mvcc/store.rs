//! The version store: per key, the versions installed by executions, indexed
//! by the writer's position in the order, and the readers that depend on them.
//!
//! A reader at position `p` sees the newest version strictly before `p`. The
//! reader index is what makes "rollback only if necessary" cheap: when a
//! version appears or disappears at position `w`, only readers between `w` and
//! the next version of that key can see a difference.
//!
//! Older final versions are kept only while the executor keeps a history
//! (`history.rs`); otherwise each key holds its newest final version alone.

use std::collections::hash_map::Entry;
use std::collections::BTreeSet;
use std::ops::Bound;

use bytes::Bytes;
use rustc_hash::FxHashMap;

use super::sorted::SortedDeque;
use crate::engine::{OpKey, Position};
use crate::txn::{SnapshotRead, VersionNo};

/// One installed version.
#[derive(Clone, Debug)]
pub(crate) struct Version {
    pub(crate) no: VersionNo,
    /// `None` is a delete (a tombstone).
    pub(crate) value: Option<Bytes>,
}

/// Everything known about one key.
#[derive(Debug)]
pub(crate) struct KeyState<P, K> {
    /// The newest version written by a final (committed and settled) op. It
    /// lies before every live position; older final versions are collected,
    /// or kept in `history` while the executor keeps one.
    pub(crate) base: Option<Version>,
    /// The position of the op that wrote `base`; `None` for a value loaded
    /// from a checkpoint (or no base), which counts as before every position.
    pub(crate) base_at: Option<P>,
    /// Final versions older than `base`, by writer position (`None`: loaded
    /// from a checkpoint), oldest first; empty unless the executor keeps a
    /// history. Each one is superseded at the position of the next one, the
    /// last at `base_at`.
    pub(crate) history: SortedDeque<Option<P>, Version>,
    /// Versions of live ops, by writer position.
    pub(crate) versions: SortedDeque<P, Version>,
    /// Installed, not yet committed executions that read this key, by position.
    pub(crate) readers: SortedDeque<P, K>,
}

impl<P, K> Default for KeyState<P, K> {
    fn default() -> Self {
        KeyState {
            base: None,
            base_at: None,
            history: SortedDeque::default(),
            versions: SortedDeque::default(),
            readers: SortedDeque::default(),
        }
    }
}

impl<P: Position, K: Copy> KeyState<P, K> {
    /// The version a reader at `pos` sees.
    pub(crate) fn visible(&self, pos: P) -> (Option<&Bytes>, VersionNo) {
        match self.versions.last_before(pos) {
            Some(v) => (v.value.as_ref(), v.no),
            None => match &self.base {
                Some(v) => (v.value.as_ref(), v.no),
                None => (None, VersionNo::ABSENT),
            },
        }
    }

    /// The value a reader after every installed version sees (`None`:
    /// absent or deleted).
    pub(crate) fn latest(&self) -> Option<&Bytes> {
        match self.versions.last() {
            Some(v) => v.value.as_ref(),
            None => self.base.as_ref().and_then(|v| v.value.as_ref()),
        }
    }

    /// Readers whose visible version may change when versions between `lo`
    /// and `hi` (inclusive) change or move: those after `lo` up to and
    /// including the next version's writer after `hi`.
    pub(crate) fn readers_affected(&self, lo: P, hi: P) -> Vec<(P, K)> {
        let next_writer = self.versions.first_after(hi);
        self.readers.after_up_to(lo, next_writer).copied().collect()
    }

    /// The final version a read of the final state before `before` sees:
    /// the newest one written at a position below `before` (`None`: the key
    /// had no final version there, or only versions the history dropped).
    pub(crate) fn final_before(&self, before: P) -> Option<&Version> {
        // `None < Some(before)`: a checkpoint's value is before everything.
        if self.base_at < Some(before) {
            return self.base.as_ref();
        }
        self.history.last_before(Some(before))
    }

    /// Nothing worth keeping: no live version or reader, no older final
    /// version kept for reads of the past, and no final value (a final
    /// tombstone reads the same as an absent key — unless the history holds
    /// what it deleted, which old reads must still see).
    pub(crate) fn is_empty(&self) -> bool {
        self.versions.is_empty()
            && self.readers.is_empty()
            && self.history.is_empty()
            && self.base.as_ref().is_none_or(|v| v.value.is_none())
    }

    /// Versions held, the base included (the history is counted apart).
    pub(crate) fn version_count(&self) -> u64 {
        self.versions.len() as u64 + u64::from(self.base.is_some())
    }
}

/// All keys: a hash map for point lookups (the hot path) and, once an
/// execution has scanned, an ordered index of the same keys for range
/// scans. Workloads that never scan never pay for the index.
#[derive(Debug)]
pub(crate) struct Keys<P, K> {
    map: FxHashMap<Bytes, KeyState<P, K>>,
    /// The keys of `map` in byte order, once [`Keys::enable_order`] ran.
    ordered: Option<BTreeSet<Bytes>>,
}

impl<P, K> Default for Keys<P, K> {
    fn default() -> Self {
        Keys {
            map: FxHashMap::default(),
            ordered: None,
        }
    }
}

impl<P, K> Keys<P, K> {
    pub(crate) fn get(&self, key: &[u8]) -> Option<&KeyState<P, K>> {
        self.map.get(key)
    }

    pub(crate) fn get_mut(&mut self, key: &[u8]) -> Option<&mut KeyState<P, K>> {
        self.map.get_mut(key)
    }

    pub(crate) fn contains_key(&self, key: &[u8]) -> bool {
        self.map.contains_key(key)
    }

    /// Add a key that is not present.
    pub(crate) fn insert_new(&mut self, key: Bytes, state: KeyState<P, K>) {
        if let Some(ordered) = &mut self.ordered {
            ordered.insert(key.clone());
        }
        let previous = self.map.insert(key, state);
        debug_assert!(previous.is_none(), "insert_new of a present key");
    }

    /// The key as the map holds it (its own allocation, shared), for
    /// indexes that outlive the caller's copy.
    pub(crate) fn key(&self, key: &[u8]) -> Option<Bytes> {
        self.map.get_key_value(key).map(|(k, _)| k.clone())
    }

    /// Give `key` the final version `version` loaded from a checkpoint
    /// (before every position): whether the key had none.
    pub(crate) fn load_base(&mut self, key: Bytes, version: Version) -> bool {
        match self.map.entry(key) {
            Entry::Occupied(mut e) => {
                let ks = e.get_mut();
                ks.base_at = None;
                ks.base.replace(version).is_none()
            }
            Entry::Vacant(e) => {
                if let Some(ordered) = &mut self.ordered {
                    ordered.insert(e.key().clone());
                }
                e.insert(KeyState {
                    base: Some(version),
                    ..KeyState::default()
                });
                true
            }
        }
    }

    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<KeyState<P, K>> {
        let removed = self.map.remove(key);
        if removed.is_some() {
            if let Some(ordered) = &mut self.ordered {
                ordered.remove(key);
            }
        }
        removed
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Bytes, &KeyState<P, K>)> {
        self.map.iter()
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &KeyState<P, K>> {
        self.map.values()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(crate) fn reserve(&mut self, additional: usize) {
        self.map.reserve(additional);
    }

    /// Build the ordered index (once; kept up to date from then on).
    pub(crate) fn enable_order(&mut self) {
        if self.ordered.is_none() {
            self.ordered = Some(self.map.keys().cloned().collect());
        }
    }

    /// Call `f` with each key of `[from, to)` in byte order until it returns
    /// false. Without the ordered index (no completed execution has scanned
    /// yet) the keys in range are collected and sorted: correct, and
    /// paid only until the first scanning execution completes.
    pub(crate) fn for_each_in(
        &self,
        from: &[u8],
        to: &[u8],
        f: impl FnMut(&Bytes, &KeyState<P, K>) -> bool,
    ) {
        self.walk(from, to, false, f);
    }

    /// [`Keys::for_each_in`] from the last key of the range down.
    pub(crate) fn for_each_in_rev(
        &self,
        from: &[u8],
        to: &[u8],
        f: impl FnMut(&Bytes, &KeyState<P, K>) -> bool,
    ) {
        self.walk(from, to, true, f);
    }

    fn walk(
        &self,
        from: &[u8],
        to: &[u8],
        reverse: bool,
        mut f: impl FnMut(&Bytes, &KeyState<P, K>) -> bool,
    ) {
        if from >= to {
            return;
        }
        let bounds = (Bound::Included(from), Bound::Excluded(to));
        match &self.ordered {
            Some(ordered) => {
                let range = ordered.range::<[u8], _>(bounds);
                let keys: Box<dyn Iterator<Item = &Bytes>> = if reverse {
                    Box::new(range.rev())
                } else {
                    Box::new(range)
                };
                for k in keys {
                    match self.map.get_key_value(k.as_ref()) {
                        Some((k, ks)) => {
                            if !f(k, ks) {
                                return;
                            }
                        }
                        None => debug_assert!(false, "ordered index out of sync at {k:?}"),
                    }
                }
            }
            None => {
                let mut found: Vec<(&Bytes, &KeyState<P, K>)> = self
                    .map
                    .iter()
                    .filter(|(k, _)| from <= k.as_ref() && k.as_ref() < to)
                    .collect();
                found.sort_unstable_by(|a, b| a.0.cmp(b.0));
                if reverse {
                    found.reverse();
                }
                for (k, ks) in found {
                    if !f(k, ks) {
                        return;
                    }
                }
            }
        }
    }

    /// Whether the ordered index, when built, holds exactly the keys.
    pub(crate) fn order_in_sync(&self) -> bool {
        self.ordered
            .as_ref()
            .is_none_or(|o| o.len() == self.map.len() && o.iter().all(|k| self.map.contains_key(k)))
    }
}

/// The keys as an execution at `pos` reads them: the newest version
/// before `pos` of each (`KeyState::visible`).
pub(crate) struct SnapshotAt<'a, P, K> {
    pub(crate) keys: &'a Keys<P, K>,
    pub(crate) pos: P,
}

impl<P: Position, K: OpKey> SnapshotRead for SnapshotAt<'_, P, K> {
    fn read(&self, key: &[u8]) -> (Option<Bytes>, VersionNo) {
        match self.keys.get(key) {
            Some(ks) => {
                let (v, no) = ks.visible(self.pos);
                (v.cloned(), no)
            }
            None => (None, VersionNo::ABSENT),
        }
    }

    fn scan(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes, VersionNo)>) {
        let mut left = limit;
        if left == 0 {
            return;
        }
        self.keys.for_each_in(from, to, |k, ks| {
            if let (Some(value), no) = ks.visible(self.pos) {
                out.push((k.clone(), value.clone(), no));
                left -= 1;
            }
            left > 0
        });
    }

    fn scan_rev(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        out: &mut Vec<(Bytes, Bytes, VersionNo)>,
    ) {
        let mut left = limit;
        if left == 0 {
            return;
        }
        self.keys.for_each_in_rev(from, to, |k, ks| {
            if let (Some(value), no) = ks.visible(self.pos) {
                out.push((k.clone(), value.clone(), no));
                left -= 1;
            }
            left > 0
        });
    }
}
