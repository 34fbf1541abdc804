//! Where CAB keeps the consensus log and hard state.
//!
//! [`CabStorage`] extends the library's read-side `raft::Storage` with the
//! writes the Ready loop performs. Contract: when a write returns `Ok`, what it
//! wrote either survives a crash (a synchronous store: [`CabStorage::take_writes`]
//! hands over nothing), or the store defers durability to its driver and
//! records the write for [`CabStorage::take_writes`]
//! ([`LogStore`](crate::LogStore)); the node then lets nothing that depends on
//! the write leave before the driver reports it durable (`creek-node`'s hold
//! rule). [`MemCabStorage`] survives only a simulated restart, because the
//! test keeps a handle to it. An `Err` means the write may not have happened;
//! CAB stops rather than guess.

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::storage::MemStorage;
use raft::{RaftState, Storage};

use std::sync::{Arc, Mutex};

use crate::{Conf, LogWrites};

/// Storage for one CAB node.
pub trait CabStorage: Storage {
    /// Append (or overwrite from the first entry's index on) log entries.
    fn append(&mut self, entries: &[Entry]) -> raft::Result<()>;
    /// Persist the hard state (term, vote, commit).
    fn set_hard_state(&mut self, hs: HardState) -> raft::Result<()>;
    /// Persist a new commit index.
    fn set_commit(&mut self, commit: u64) -> raft::Result<()>;
    /// The writes made since the last call, which the driver must make
    /// durable. A synchronous store (every write durable when it returns)
    /// has none.
    fn take_writes(&mut self) -> LogWrites {
        LogWrites::default()
    }
    /// Whether this store leaves durability to its driver (it records
    /// writes for [`CabStorage::take_writes`]): CAB then persists
    /// asynchronously, letting a leader's appends leave while its own write
    /// is in flight; `false` for a synchronous store.
    fn defers_writes(&self) -> bool {
        false
    }
    /// Whether the pending writes must be durable before the output that
    /// follows them may leave (see `LogStore`); `false` for a synchronous
    /// store.
    fn must_sync(&self) -> bool {
        false
    }
    /// Drop the committed entries up to `through` (the caller's checkpoint
    /// covers them). A store may keep them: the in-memory one does.
    fn compact(&mut self, through: u64) -> raft::Result<()> {
        let _ = through;
        Ok(())
    }
    /// Install a snapshot: the log becomes empty at the snapshot's index and
    /// term (entries past it that agree are kept), and the commit index is
    /// at least that index. The caller's state already covers it.
    fn apply_snapshot(&mut self, snapshot: &Snapshot) -> raft::Result<()>;
    /// The configuration as last stored (see [`Conf`]).
    fn conf(&self) -> Conf;
    /// Persist the configuration after a change was applied.
    fn set_conf(&mut self, conf: Conf) -> raft::Result<()>;
}

/// The configuration a snapshot carries: its metadata's, at the index its
/// data names (see `LogStore`'s snapshots; 0 when it names none).
pub fn snapshot_conf(snapshot: &Snapshot) -> Conf {
    let index = <[u8; 8]>::try_from(&snapshot.data[..]).map_or(0, u64::from_le_bytes);
    Conf {
        state: snapshot.get_metadata().get_conf_state().clone(),
        index,
    }
}

/// In-memory storage. Clones share the same log, so a test can drop a node
/// and build a new one from the same storage to simulate a restart.
#[derive(Clone)]
pub struct MemCabStorage {
    inner: MemStorage,
    conf: Arc<Mutex<Conf>>,
}

impl MemCabStorage {
    /// A fresh log for a group of `voters` (raft ids).
    pub fn new(voters: Vec<u64>) -> Self {
        let state = ConfState::from((voters, vec![]));
        let inner = MemStorage::new_with_conf_state(state.clone());
        let conf = Conf { state, index: 0 };
        MemCabStorage {
            inner,
            conf: Arc::new(Mutex::new(conf)),
        }
    }
}

impl Storage for MemCabStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        self.inner.initial_state()
    }
    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: raft::GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.inner.entries(low, high, max_size, context)
    }
    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.inner.term(idx)
    }
    fn first_index(&self) -> raft::Result<u64> {
        self.inner.first_index()
    }
    fn last_index(&self) -> raft::Result<u64> {
        self.inner.last_index()
    }
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<raft::eraftpb::Snapshot> {
        self.inner.snapshot(request_index, to)
    }
}

impl CabStorage for MemCabStorage {
    fn append(&mut self, entries: &[Entry]) -> raft::Result<()> {
        self.inner.wl().append(entries)
    }
    fn set_hard_state(&mut self, hs: HardState) -> raft::Result<()> {
        self.inner.wl().set_hardstate(hs);
        Ok(())
    }
    fn set_commit(&mut self, commit: u64) -> raft::Result<()> {
        self.inner.wl().mut_hard_state().set_commit(commit);
        Ok(())
    }
    fn apply_snapshot(&mut self, snapshot: &Snapshot) -> raft::Result<()> {
        self.inner.wl().apply_snapshot(snapshot.clone())?;
        let conf = snapshot_conf(snapshot);
        if conf.index >= self.conf().index {
            self.set_conf(conf)?;
        }
        Ok(())
    }
    fn conf(&self) -> Conf {
        self.conf
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
    fn set_conf(&mut self, conf: Conf) -> raft::Result<()> {
        self.inner.wl().set_conf_state(conf.state.clone());
        *self
            .conf
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = conf;
        Ok(())
    }
}
