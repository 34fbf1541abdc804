//! The history of final versions: reads of the final state *before a
//! position*, for the `snapshot` level (docs/snapshot-reads.md), where a
//! read-only op runs on the committed state as of a cluster-wide stable
//! time that may lag what this replica has applied.
//!
//! Without a history (the default) every key keeps only its newest final
//! version, its `base`; finalizing an op drops the base it supersedes.
//! With one ([`crate::Engine::keep_final_history`], or
//! [`crate::Engine::set_final_horizon`] with `Some(horizon)`), the
//! superseded base moves to the key's `history` instead, tagged with the
//! position of the op that wrote it, so the final state before any position
//! `p` above the horizon (any at all while none is set) is, for every key, the newest final version written
//! before `p` (`KeyState::final_before`). Tombstones are kept like values:
//! a delete stays visible to old reads, and the value before it too.
//!
//! Pruning costs nothing per key: `History::superseded` lists one
//! `(superseding position, key)` per kept version in the order `finalize`
//! made them, which is the committed order. Moving the horizon to `h` pops
//! the entries superseded at or below `h`, and each pop drops the oldest
//! kept version of its key — exactly the one superseded there, since a key's
//! versions are superseded in the order they were kept.
//!
//! A key with a history is never forgotten, even when its base is a
//! tombstone; once the horizon passes its last kept version it is forgotten
//! as before.
//!
//! Not here: choosing the horizon (the replica's, from the stable time less
//! the reads in flight), and tentative versions (`store.rs`).

use std::collections::VecDeque;

use bytes::Bytes;
use rustc_hash::FxHashMap;

use super::store::Version;
use super::MvccExecutor;
use crate::engine::{BelowHorizon, OpKey, Position};

/// What the executor keeps for reads of the final state before a position.
#[derive(Debug)]
pub(super) struct History<P> {
    /// The caller's promise: no read asks for a position at or below it
    /// (`None`: none given yet, every position may be read).
    horizon: Option<P>,
    /// The newest final position when the history started (or the
    /// checkpoint's committed bound): the versions it superseded up to there
    /// were dropped before anything was kept, so reads at or below it are
    /// refused whatever the horizon.
    kept_after: Option<P>,
    /// One `(superseding position, key)` per kept version, in finalize
    /// order (positions never decrease).
    superseded: VecDeque<(P, Bytes)>,
}

impl<P: Position> History<P> {
    /// Whether reads before `before` are refused.
    fn refuses(&self, before: P) -> bool {
        self.horizon
            .max(self.kept_after)
            .is_some_and(|h| before <= h)
    }

    /// The error for a refused read: the effective horizon.
    fn below(&self) -> BelowHorizon {
        match self.horizon.max(self.kept_after) {
            Some(h) => BelowHorizon::at(h),
            None => BelowHorizon::no_history(),
        }
    }
}

/// What a kept version counts in [`crate::ExecCounters::history_bytes`].
fn version_bytes(key: &[u8], version: &Version) -> u64 {
    let value = version.value.as_ref().map_or(0, Bytes::len);
    (key.len() + value) as u64
}

impl<K: OpKey, P: Position> MvccExecutor<K, P> {
    /// [`crate::Engine::set_final_horizon`]: start, move or stop the
    /// history. A horizon below the current one is a caller bug (asserted
    /// in debug builds) and ignored.
    pub(super) fn move_final_horizon(&mut self, horizon: Option<P>) {
        let Some(h) = horizon else {
            self.drop_superseded(None);
            self.history = None;
            return;
        };
        match &mut self.history {
            Some(history) => {
                debug_assert!(
                    history.horizon.is_none_or(|old| h >= old),
                    "final horizon moved back from {:?} to {h:?}",
                    history.horizon
                );
                history.horizon = history.horizon.max(Some(h));
                let horizon = history.horizon;
                self.drop_superseded(horizon);
            }
            None => self.history = Some(self.new_history(Some(h))),
        }
    }

    /// [`crate::Engine::keep_final_history`].
    pub(super) fn start_final_history(&mut self) {
        if self.history.is_none() {
            self.history = Some(self.new_history(None));
        }
    }

    /// A history from now on, with `horizon`.
    fn new_history(&self, horizon: Option<P>) -> History<P> {
        History {
            horizon,
            kept_after: self.final_upto,
            superseded: VecDeque::new(),
        }
    }

    /// A checkpoint was loaded as the state after `upto`: with a history on,
    /// nothing before it can be read.
    pub(super) fn history_loaded(&mut self, upto: P) {
        if let Some(history) = &mut self.history {
            history.kept_after = history.kept_after.max(Some(upto));
        }
    }

    /// Drop the kept versions superseded at or below `upto` (`None`: all).
    fn drop_superseded(&mut self, upto: Option<P>) {
        loop {
            let Some(history) = &mut self.history else {
                return;
            };
            let due = history
                .superseded
                .front()
                .is_some_and(|(at, _)| upto.is_none_or(|u| *at <= u));
            if !due {
                return;
            }
            let Some((at, key)) = history.superseded.pop_front() else {
                return;
            };
            self.drop_oldest_kept(&key, at);
        }
    }

    /// Drop the oldest kept version of `key`, superseded at `at`.
    fn drop_oldest_kept(&mut self, key: &Bytes, at: P) {
        let Some(ks) = self.keys.get_mut(key) else {
            debug_assert!(false, "the history lists {key:?}, which is gone");
            return;
        };
        match ks.history.pop_first() {
            Some((_, version)) => {
                // The pair of the push in `keep_final`: the version dropped
                // is the one superseded at `at`.
                let next = ks.history.first_key().unwrap_or(ks.base_at);
                debug_assert_eq!(next, Some(at), "history of {key:?} out of step");
                self.counters.history_versions -= 1;
                self.counters.history_bytes -= version_bytes(key, &version);
            }
            None => debug_assert!(false, "the history lists {key:?} once too often"),
        }
        self.drop_if_empty(key);
    }

    /// `old`, written at `old_at`, was the final version of `key` until the
    /// op at `pos` (now its base) superseded it, and a history is on. Keep
    /// it if a read above the horizon may need it; forget the key if it is
    /// left with nothing worth keeping.
    pub(super) fn keep_final(&mut self, key: &[u8], pos: P, old_at: Option<P>, old: Version) {
        let keeps = self
            .history
            .as_ref()
            .is_some_and(|h| h.horizon.is_none_or(|horizon| pos > horizon));
        let shared = if keeps { self.keys.key(key) } else { None };
        debug_assert!(!keeps || shared.is_some(), "finalized {key:?} is gone");
        if let (Some(shared), Some(ks)) = (shared, self.keys.get_mut(key)) {
            debug_assert!(
                ks.history.last_key().is_none_or(|last| last < old_at) && old_at < ks.base_at,
                "kept version of {key:?} out of order"
            );
            self.counters.history_versions += 1;
            self.counters.history_bytes += version_bytes(key, &old);
            ks.history.insert(old_at, old);
            if let Some(history) = &mut self.history {
                debug_assert!(history.superseded.back().is_none_or(|(at, _)| *at <= pos));
                history.superseded.push_back((pos, shared));
            }
        }
        self.drop_if_empty(key);
    }

    /// Whether reads before `before` can be answered.
    fn history_covers(&self, before: P) -> Result<(), BelowHorizon> {
        match &self.history {
            None => Err(BelowHorizon::no_history()),
            Some(h) if h.refuses(before) => Err(h.below()),
            Some(_) => Ok(()),
        }
    }

    /// [`crate::Engine::read_final_before`].
    pub(super) fn final_value_before(
        &self,
        key: &[u8],
        before: P,
    ) -> Result<Option<Bytes>, BelowHorizon> {
        self.history_covers(before)?;
        let version = self.keys.get(key).and_then(|ks| ks.final_before(before));
        Ok(version.and_then(|v| v.value.clone()))
    }

    /// [`crate::Engine::scan_final_before`].
    pub(super) fn final_scan_before(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        before: P,
        out: &mut Vec<(Bytes, Bytes)>,
    ) -> Result<(), BelowHorizon> {
        self.history_covers(before)?;
        let mut left = limit;
        if left == 0 {
            return Ok(());
        }
        self.keys.for_each_in(from, to, |k, ks| {
            if let Some(value) = ks.final_before(before).and_then(|v| v.value.as_ref()) {
                out.push((k.clone(), value.clone()));
                left -= 1;
            }
            left > 0
        });
        Ok(())
    }

    /// The history's invariants: the counters equal what is kept; each
    /// key's kept versions are ordered before its base and superseded above
    /// the horizon; the pruning list names each kept version once, in
    /// order; without a history nothing is kept.
    pub(super) fn check_history(&self) -> Result<(), String> {
        let (mut versions, mut bytes) = (0u64, 0u64);
        let mut expected: FxHashMap<&Bytes, Vec<P>> = FxHashMap::default();
        for (k, ks) in self.keys.iter() {
            if ks.base_at.is_some() && ks.base_at > self.final_upto {
                return Err(format!("{k:?}: base at {:?}, not final", ks.base_at));
            }
            if ks.history.is_empty() {
                continue;
            }
            if ks.base.is_none() || ks.history.last_key() >= Some(ks.base_at) {
                return Err(format!("{k:?}: kept versions not before its base"));
            }
            let mut at = ks
                .history
                .iter()
                .skip(1)
                .map(|(p, _)| *p)
                .collect::<Vec<_>>();
            at.push(ks.base_at);
            let at: Option<Vec<P>> = at.into_iter().collect();
            let Some(at) = at else {
                return Err(format!("{k:?}: a kept version superseded by a checkpoint"));
            };
            for (_, version) in ks.history.iter() {
                versions += 1;
                bytes += version_bytes(k, version);
            }
            expected.insert(k, at);
        }
        let counted = (self.counters.history_versions, self.counters.history_bytes);
        if counted != (versions, bytes) {
            return Err(format!(
                "history counters {counted:?} but {versions} versions of {bytes} bytes kept"
            ));
        }
        let Some(history) = &self.history else {
            return match versions {
                0 => Ok(()),
                n => Err(format!("{n} versions kept without a history")),
            };
        };
        let mut listed: FxHashMap<&Bytes, Vec<P>> = FxHashMap::default();
        let mut previous = None;
        for (at, k) in &history.superseded {
            if Some(*at) <= history.horizon || previous.is_some_and(|p| p > *at) {
                return Err(format!(
                    "pruning list out of order or due at {at:?} ({k:?})"
                ));
            }
            previous = Some(*at);
            listed.entry(k).or_default().push(*at);
        }
        if listed != expected {
            return Err("pruning list does not name the kept versions".to_owned());
        }
        Ok(())
    }
}
