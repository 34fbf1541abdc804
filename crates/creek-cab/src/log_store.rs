//! CAB's storage for a durable driver: the consensus log and hard state in
//! memory, with the writes not yet handed over for persisting recorded on
//! the side ([`LogWrites`]). The node puts them in its `Ready` writes; the
//! driver (the server's persister, the simulator's disk) makes them
//! durable. No I/O here.

use crate::CabStorage;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::storage::MemStorage;
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

/// The consensus-log writes of some Ready rounds, to be made durable by the
/// driver (as part of the node's next write).
///
/// Applied to the stored log in this order, they leave it identical to the
/// in-memory log they were taken from: first every stored entry at or after
/// [`LogWrites::truncate_from`] is removed (a new leader overwrote a suffix),
/// then [`LogWrites::entries`] are stored, then the hard state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogWrites {
    truncate_from: Option<u64>,
    entries: Vec<Entry>,
    hard_state: Option<HardState>,
}

impl LogWrites {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.truncate_from.is_none() && self.entries.is_empty() && self.hard_state.is_none()
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

/// CAB's storage for a durable driver: raft's `MemStorage` serves every read
/// (the log is never compacted yet, so it is loaded whole at open), and every
/// write also goes to a pending [`LogWrites`], taken with
/// [`CabStorage::take_writes`].
///
/// **Nothing written here is durable when the write returns** (unlike
/// [`MemCabStorage`](crate::MemCabStorage)): it is durable once the driver
/// reports the write that carried it, and the node holds every message that
/// depends on it until then (`creek-node`'s hold rule).
pub struct LogStore {
    mem: MemStorage,
    pending: LogWrites,
    /// The hard state last handed over (or loaded).
    taken_hard_state: HardState,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let core = self.mem.rl();
        f.debug_struct("LogStore")
            .field("hard_state", core.hard_state())
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

fn raft_err(why: String) -> raft::Error {
    raft::Error::Store(StorageError::Other(why.into()))
}

impl LogStore {
    /// The state loaded from disk: `entries` must start at index 1 and be
    /// contiguous, `hard_state.commit` within them (checked by the loader).
    pub fn loaded(conf_state: ConfState, hard_state: HardState, entries: &[Entry]) -> Self {
        let mem = MemStorage::new_with_conf_state(conf_state);
        {
            let mut core = mem.wl();
            if !entries.is_empty() {
                // Contiguous from 1, checked by the loader: cannot fail.
                let _ = core.append(entries);
            }
            core.set_hardstate(hard_state.clone());
        }
        LogStore {
            mem,
            pending: LogWrites::default(),
            taken_hard_state: hard_state,
        }
    }

    /// First and last index (the `Storage` answers, which cannot fail).
    fn bounds(&self) -> (u64, u64) {
        let first = self.mem.first_index().unwrap_or(1);
        let last = self.mem.last_index().unwrap_or(0);
        (first, last)
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        self.mem.initial_state()
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let (first, last) = self.bounds();
        if low < first {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        // MemStorage panics on these; a store reports instead.
        if high > last + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        if low == high {
            return Ok(Vec::new());
        }
        self.mem.entries(low, high, max_size, context)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.mem.term(idx)
    }

    fn first_index(&self) -> raft::Result<u64> {
        self.mem.first_index()
    }

    fn last_index(&self) -> raft::Result<u64> {
        self.mem.last_index()
    }

    /// CAB never compacts its log, so the only snapshot is the empty one at
    /// the commit index (as `MemStorage` builds it, without its panic when
    /// the commit index is past the log).
    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let state = self.mem.initial_state()?;
        let commit = state.hard_state.commit;
        let term = self.term(commit)?;
        let mut snap = Snapshot::default();
        let meta = snap.mut_metadata();
        meta.index = commit.max(request_index);
        meta.term = term;
        meta.set_conf_state(state.conf_state);
        Ok(snap)
    }
}

impl CabStorage for LogStore {
    /// The writes made since the last call, for the next batch.
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
        self.mem.wl().append(entries)?;
        self.pending.record_append(entries, from <= last);
        Ok(())
    }

    fn set_hard_state(&mut self, hs: HardState) -> raft::Result<()> {
        self.mem.wl().set_hardstate(hs.clone());
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
        let mut core = self.mem.wl();
        core.mut_hard_state().commit = commit;
        self.pending.hard_state = Some(core.hard_state().clone());
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
        let mut s = LogStore::loaded(ConfState::default(), HardState::default(), &[]);
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
}
