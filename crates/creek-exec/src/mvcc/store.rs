//! The version store: per key, the versions installed by executions, indexed
//! by the writer's position in the order, and the readers that depend on them.
//!
//! A reader at position `p` sees the newest version strictly before `p`. The
//! reader index is what makes "rollback only if necessary" cheap: when a
//! version appears or disappears at position `w`, only readers between `w` and
//! the next version of that key can see a difference.

use bytes::Bytes;
use rustc_hash::FxHashMap;

use super::sorted::SortedDeque;
use crate::engine::Position;
use crate::txn::VersionNo;

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
    /// lies before every live position; older final versions are collected.
    pub(crate) base: Option<Version>,
    /// Versions of live ops, by writer position.
    pub(crate) versions: SortedDeque<P, Version>,
    /// Installed, not yet committed executions that read this key, by position.
    pub(crate) readers: SortedDeque<P, K>,
}

impl<P, K> Default for KeyState<P, K> {
    fn default() -> Self {
        KeyState {
            base: None,
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

    /// Readers whose visible version may change when versions between `lo`
    /// and `hi` (inclusive) change or move: those after `lo` up to and
    /// including the next version's writer after `hi`.
    pub(crate) fn readers_affected(&self, lo: P, hi: P) -> Vec<(P, K)> {
        let next_writer = self.versions.first_after(hi);
        self.readers.after_up_to(lo, next_writer).copied().collect()
    }

    /// Nothing worth keeping: no live version or reader, and no final value
    /// (a final tombstone reads the same as an absent key).
    pub(crate) fn is_empty(&self) -> bool {
        self.versions.is_empty()
            && self.readers.is_empty()
            && self.base.as_ref().is_none_or(|v| v.value.is_none())
    }

    /// Versions held, the base included.
    pub(crate) fn version_count(&self) -> u64 {
        self.versions.len() as u64 + u64::from(self.base.is_some())
    }
}

/// All keys.
pub(crate) type Keys<P, K> = FxHashMap<Bytes, KeyState<P, K>>;
