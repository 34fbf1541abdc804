//! CAB's storage for a durable driver: the consensus log and hard state in
//! memory, with the writes not yet handed over for persisting recorded on
//! the side ([`LogWrites`]). The node puts them in its `Ready` writes; the
//! driver (the server's persister, the simulator's disk) makes them
//! durable. No I/O here.

use std::collections::VecDeque;

use crate::storage::snapshot_conf;
use crate::CabStorage;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

/// The consensus-log writes of some Ready rounds, to be made durable by the
/// driver (as part of the node's next write).
///
/// Applied to the stored log in this order, they leave it identical to the
/// in-memory log they were taken from: first every stored entry at or before
/// [`LogWrites::compacted_through`] is removed and that point recorded as the
/// log's base, then every stored entry at or after
/// [`LogWrites::truncate_from`] is removed (a new leader overwrote a
/// suffix), then [`LogWrites::entries`] are stored, then the hard state
/// and the configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogWrites {
    compacted_through: Option<LogBase>,
    truncate_from: Option<u64>,
    entries: Vec<Entry>,
    hard_state: Option<HardState>,
    conf: Option<Conf>,
}

/// The group's configuration (raft's voters and learners) with the index of
/// the last configuration change it reflects (0: the initial one).
///
/// A change is applied when its entry is committed, and the stored
/// configuration is the latest applied — ahead of the point a restarted
/// node re-delivers from. An entry at or before [`Conf::index`] is
/// therefore never applied twice: the configuration already holds it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conf {
    /// Voters, learners, and while joint the outgoing voters.
    pub state: ConfState,
    /// The log index of the last change applied.
    pub index: u64,
}

/// Where a compacted log starts: the last index it no longer holds and that
/// entry's term (raft's snapshot metadata of the log). `(0, 0)` for a log
/// never compacted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogBase {
    /// The last compacted index (the log holds `index + 1 ..`).
    pub index: u64,
    /// The term of the entry at `index`.
    pub term: u64,
}

impl LogWrites {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.compacted_through.is_none()
            && self.truncate_from.is_none()
            && self.entries.is_empty()
            && self.hard_state.is_none()
            && self.conf.is_none()
    }

    /// Stored entries up to this base's index are removed first, and the
    /// base recorded.
    pub fn compacted_through(&self) -> Option<LogBase> {
        self.compacted_through
    }

    /// Stored entries from this index on are removed first.
    pub fn truncate_from(&self) -> Option<u64> {
        self.truncate_from
    }

    /// Entries to store (contiguous indexes).
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The hard state to store, if it changed.
    pub fn hard_state(&self) -> Option<&HardState> {
        self.hard_state.as_ref()
    }

    /// The configuration to store, if it changed.
    pub fn conf(&self) -> Option<&Conf> {
        self.conf.as_ref()
    }

    /// Record an append of `entries` (non-empty, contiguous) that
    /// `overwrites` entries present before it.
    fn record_append(&mut self, entries: &[Entry], overwrites: bool) {
        let Some(from) = entries.first().map(|e| e.index) else {
            return;
        };
        match self.entries.first().map(|e| e.index) {
            // Within or right after the pending run: that run was stored
            // after its own truncation, so cutting it here is enough.
            Some(start) if from >= start => {
                let keep = usize::try_from(from - start).unwrap_or(usize::MAX);
                self.entries.truncate(keep);
            }
            _ => {
                if overwrites {
                    self.truncate_from = Some(self.truncate_from.map_or(from, |t| t.min(from)));
                }
                self.entries.clear();
            }
        }
        self.entries.extend_from_slice(entries);
    }
}

/// CAB's storage for a durable driver: the log from its base on and the
/// hard state in memory (loaded whole at open), every write also recorded
/// in a pending [`LogWrites`], taken with [`CabStorage::take_writes`].
///
/// **Nothing written here is durable when the write returns** (unlike
/// [`MemCabStorage`](crate::MemCabStorage)): it is durable once the driver
/// reports the write that carried it, and the node holds every message that
/// depends on it until then (`creek-node`'s hold rule).
///
/// Invariants (checked by [`LogStore::check`]): `entries[i].index ==
/// base.index + 1 + i`; the commit index is at least the base's index (only
/// committed entries are compacted) and at most the last index.
pub struct LogStore {
    conf: Conf,
    hard_state: HardState,
    base: LogBase,
    entries: VecDeque<Entry>,
    pending: LogWrites,
    /// The hard state last handed over (or loaded).
    taken_hard_state: HardState,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("hard_state", &self.hard_state)
            .field("base", &self.base)
            .field("entries", &self.entries.len())
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

fn raft_err(why: String) -> raft::Error {
    raft::Error::Store(StorageError::Other(why.into()))
}

impl LogStore {
    /// The state loaded from disk: `entries` must be contiguous from
    /// `base.index + 1`, `hard_state.commit` within `base.index..=last`
    /// (checked by the loader; [`LogStore::check`] says what is wrong).
    pub fn loaded(conf: Conf, hard_state: HardState, base: LogBase, entries: Vec<Entry>) -> Self {
        LogStore {
            conf,
            taken_hard_state: hard_state.clone(),
            hard_state,
            base,
            entries: entries.into(),
            pending: LogWrites::default(),
        }
    }

    /// The log's base: what compaction removed (see [`LogBase`]).
    pub fn base(&self) -> LogBase {
        self.base
    }

    /// Entries held (after the base).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log holds no entries after its base.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Check the invariants (see the type's documentation).
    pub fn check(&self) -> Result<(), String> {
        let mut prev = self.base.index;
        for e in &self.entries {
            if e.index != prev + 1 {
                return Err(format!("log entry {} follows {prev}", e.index));
            }
            prev = e.index;
        }
        let commit = self.hard_state.commit;
        if commit < self.base.index || commit > prev {
            return Err(format!(
                "commit index {commit} outside the log {}..={prev}",
                self.base.index
            ));
        }
        Ok(())
    }

    /// First and last index.
    fn bounds(&self) -> (u64, u64) {
        (
            self.base.index + 1,
            self.base.index + self.entries.len() as u64,
        )
    }

    fn position(&self, index: u64) -> usize {
        usize::try_from(index - self.base.index - 1).unwrap_or(usize::MAX)
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf.state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let (first, last) = self.bounds();
        if low < first {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > last + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let mut out: Vec<Entry> = self
            .entries
            .range(self.position(low)..self.position(high))
            .cloned()
            .collect();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.base.index {
            return Ok(self.base.term);
        }
        let (first, last) = self.bounds();
        if idx < first {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > last {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[self.position(idx)].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.bounds().0)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.bounds().1)
    }

    /// The snapshot a leader sends a follower that needs compacted
    /// entries: the log's base. It carries no data: the node compacts only
    /// through a checkpoint it wrote, so it always holds a checkpoint at the
    /// base or later, which the follower fetches by state transfer
    /// (`creek-node`) before it lets the library install this. Its data is
    /// the configuration's index ([`Conf::index`], 8 bytes little-endian),
    /// so the follower skips the changes the configuration already holds.
    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.base.index == 0 {
            // Never compacted: no follower needs a snapshot.
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let mut snap = Snapshot::default();
        let meta = snap.mut_metadata();
        meta.index = self.base.index;
        meta.term = self.base.term;
        meta.set_conf_state(self.conf.state.clone());
        snap.data = self.conf.index.to_le_bytes().to_vec().into();
        Ok(snap)
    }
}

impl CabStorage for LogStore {
    /// The writes made since the last call, for the next batch.
    fn defers_writes(&self) -> bool {
        true
    }

    fn take_writes(&mut self) -> LogWrites {
        let w = std::mem::take(&mut self.pending);
        if let Some(hs) = &w.hard_state {
            self.taken_hard_state = hs.clone();
        }
        w
    }

    /// Whether the pending writes must be durable before the output that
    /// follows them may leave: entries (or a truncation), or a new term or
    /// vote. A hard state that differs only in its commit index need not be
    /// synced at once — a restarted node learns the commit index again from
    /// the leader (the rule etcd's raft calls `MustSync`) — so a driver may
    /// leave it pending to ride with a later batch instead of paying an
    /// fsync for it alone.
    fn must_sync(&self) -> bool {
        self.pending.truncate_from.is_some()
            || !self.pending.entries.is_empty()
            || self.pending.hard_state.as_ref().is_some_and(|hs| {
                hs.term != self.taken_hard_state.term || hs.vote != self.taken_hard_state.vote
            })
    }

    /// Appends in memory at once and records the write for the next batch.
    /// Entries must be contiguous and start within `first..=last + 1`.
    fn append(&mut self, entries: &[Entry]) -> raft::Result<()> {
        let Some(head) = entries.first() else {
            return Ok(());
        };
        let from = head.index;
        let (first, last) = self.bounds();
        if from < first || from > last.saturating_add(1) {
            return Err(raft_err(format!(
                "append at {from} outside the log {first}..={last} (+1)"
            )));
        }
        for (i, e) in entries.iter().enumerate() {
            if Some(e.index) != from.checked_add(i as u64) {
                return Err(raft_err(format!(
                    "appended entries are not contiguous at index {}",
                    e.index
                )));
            }
        }
        self.entries.truncate(self.position(from));
        self.entries.extend(entries.iter().cloned());
        self.pending.record_append(entries, from <= last);
        Ok(())
    }

    /// Drop the entries up to `through` (which must be committed and held,
    /// or already compacted: then nothing happens) and make it the base; the
    /// write is recorded for the next batch. CAB compacts only to what every
    /// replica acknowledged, so no peer asks for an earlier entry.
    fn compact(&mut self, through: u64) -> raft::Result<()> {
        if through <= self.base.index {
            return Ok(());
        }
        if through > self.hard_state.commit {
            return Err(raft_err(format!(
                "compacting through {through}, past the commit index {}",
                self.hard_state.commit
            )));
        }
        let term = self.term(through)?;
        let drop = usize::try_from(through - self.base.index).unwrap_or(usize::MAX);
        self.entries.drain(..drop.min(self.entries.len()));
        self.base = LogBase {
            index: through,
            term,
        };
        // Pending entries it covers are not stored at all.
        self.pending.entries.retain(|e| e.index > through);
        self.pending.compacted_through = Some(self.base);
        Ok(())
    }

    /// The log becomes empty at the snapshot's index and term (a suffix
    /// that agrees with it is kept, as raft's storages do), the commit
    /// index at least that index; recorded as a compaction, and a
    /// truncation of whatever the stored log held past the index.
    fn apply_snapshot(&mut self, snapshot: &Snapshot) -> raft::Result<()> {
        let meta = snapshot.get_metadata();
        let (index, term) = (meta.index, meta.term);
        if index <= self.base.index {
            return Ok(());
        }
        let (_, last) = self.bounds();
        let agrees = index <= last && self.term(index).ok() == Some(term);
        if agrees {
            let drop = usize::try_from(index - self.base.index).unwrap_or(usize::MAX);
            self.entries.drain(..drop.min(self.entries.len()));
            self.pending.entries.retain(|e| e.index > index);
        } else {
            self.entries.clear();
            self.pending.entries.clear();
            let from = index + 1;
            self.pending.truncate_from =
                Some(self.pending.truncate_from.map_or(from, |t| t.min(from)));
        }
        self.base = LogBase { index, term };
        self.pending.compacted_through = Some(self.base);
        self.hard_state.commit = self.hard_state.commit.max(index);
        self.pending.hard_state = Some(self.hard_state.clone());
        let conf = snapshot_conf(snapshot);
        if conf.index >= self.conf.index {
            self.set_conf(conf)?;
        }
        Ok(())
    }

    fn conf(&self) -> Conf {
        self.conf.clone()
    }

    fn set_conf(&mut self, conf: Conf) -> raft::Result<()> {
        self.conf = conf.clone();
        self.pending.conf = Some(conf);
        Ok(())
    }

    fn set_hard_state(&mut self, hs: HardState) -> raft::Result<()> {
        self.hard_state = hs.clone();
        self.pending.hard_state = Some(hs);
        Ok(())
    }

    fn set_commit(&mut self, commit: u64) -> raft::Result<()> {
        // Paired with the library's own check when it learns a commit index:
        // what is stored as committed is in the stored log.
        let (_, last) = self.bounds();
        assert!(
            commit <= last,
            "commit index {commit} past the stored log (last {last})"
        );
        self.hard_state.commit = commit;
        self.pending.hard_state = Some(self.hard_state.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Default::default()
        }
    }

    fn run(ents: &[(u64, u64)]) -> Vec<Entry> {
        (ents[0].0..=ents[0].1)
            .map(|i| entry(i, ents[0].0))
            .collect()
    }

    #[test]
    fn overwrites_record_the_lowest_truncation() {
        let mut s = LogStore::loaded(
            Conf::default(),
            HardState::default(),
            LogBase::default(),
            Vec::new(),
        );
        s.append(&run(&[(1, 5)])).unwrap();
        let w = s.take_writes();
        assert_eq!(
            w.truncate_from(),
            None,
            "appending at the end truncates nothing"
        );
        assert_eq!(w.entries().len(), 5);
        // Overwrite 4.., then 3.., then extend: one truncation at 3.
        s.append(&run(&[(4, 6)])).unwrap();
        s.append(&run(&[(3, 3)])).unwrap();
        s.append(&run(&[(4, 4)])).unwrap();
        let w = s.take_writes();
        assert_eq!(w.truncate_from(), Some(3));
        let idx: Vec<u64> = w.entries().iter().map(|e| e.index).collect();
        assert_eq!(idx, vec![3, 4]);
        assert_eq!(s.last_index().unwrap(), 4);
        // Gaps and appends before the log are refused, not panics.
        assert!(s.append(&[entry(9, 1)]).is_err());
        assert!(s.append(&[entry(5, 1), entry(7, 1)]).is_err());
        assert!(s.append(&[entry(0, 1)]).is_err());
        assert!(s.take_writes().is_empty());
    }

    #[test]
    fn compaction_moves_the_base_and_keeps_the_rest() {
        let mut s = LogStore::loaded(
            Conf::default(),
            HardState::default(),
            LogBase::default(),
            Vec::new(),
        );
        s.append(&(1..=10).map(|i| entry(i, 1 + i / 4)).collect::<Vec<_>>())
            .unwrap();
        s.set_commit(8).unwrap();
        // Past the commit index: refused, nothing changes.
        assert!(s.compact(9).is_err());
        s.compact(5).unwrap();
        assert_eq!(s.base(), LogBase { index: 5, term: 2 });
        assert_eq!(s.first_index().unwrap(), 6);
        assert_eq!(s.last_index().unwrap(), 10);
        assert_eq!(s.term(5).unwrap(), 2, "the base keeps its term");
        assert!(matches!(
            s.term(4),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        assert!(matches!(
            s.entries(5, 7, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        let idx: Vec<u64> = s
            .entries(6, 11, None, GetEntriesContext::empty(false))
            .unwrap()
            .iter()
            .map(|e| e.index)
            .collect();
        assert_eq!(idx, vec![6, 7, 8, 9, 10]);
        s.check().unwrap();
        // The write: compaction first, and none of the entries it covers.
        let w = s.take_writes();
        assert_eq!(w.compacted_through(), Some(LogBase { index: 5, term: 2 }));
        let idx: Vec<u64> = w.entries().iter().map(|e| e.index).collect();
        assert_eq!(idx, vec![6, 7, 8, 9, 10]);
        // Compacting again below the base does nothing; up to the commit
        // index empties what is committed.
        s.compact(3).unwrap();
        assert!(s.take_writes().is_empty());
        s.compact(8).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s.snapshot(0, 2).unwrap().get_metadata().index, 8);
        // An append overwriting the uncommitted tail still works.
        s.append(&[entry(9, 7)]).unwrap();
        assert_eq!(s.last_index().unwrap(), 9);
        s.check().unwrap();
        // Before the base: refused.
        assert!(s.append(&[entry(8, 7)]).is_err());
    }
}
