//! A checkpoint of a replica's committed state: what a restarted replica
//! starts from instead of re-executing its whole history.
//!
//! [`Replica::checkpoint`](crate::Replica::checkpoint) takes one only at a
//! *clean point* — no decided id waiting for its causal context, and every
//! committed op's final execution known — so that [`Checkpoint::state`] is
//! exactly the state after the first [`Checkpoint::committed_len`] committed
//! ops. [`Replica::restore`](crate::Replica::restore) rebuilds a replica from
//! one plus the op payloads kept beside it.
//!
//! Not here: how a checkpoint is encoded or stored (`creek-store`), and when
//! one is taken (the driver).

use bytes::Bytes;

use crate::dvv::Dvv;
use crate::group::Group;
use crate::id::Timestamp;

/// The committed state of a replica at a clean point, with what a restart
/// needs to continue from it. See the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// CAB's restart point: the last consensus-log index all of whose ids
    /// are reflected here (`Cab::delivered_through`). `Replica::checkpoint`
    /// leaves it 0; the node fills it in.
    pub cab_applied: u64,
    /// How many ops were committed, counted from the first op this replica
    /// ever committed (committed positions keep this global numbering).
    pub committed_len: u64,
    /// The ids of those committed ops: the replica's causal context without
    /// the weak ops still tentative (those come back with their payloads).
    pub causal_ctx: Dvv,
    /// The state after the committed ops, sorted by key.
    pub state: Vec<(Bytes, Bytes)>,
    /// The largest timestamp the replica's clock had issued or observed.
    pub hlc: Timestamp,
    /// The seq the replica's next own op would get (its event counter + 1).
    pub next_event_no: u64,
    /// The commit time of the last committed op (docs/snapshot-reads.md):
    /// the next one's is above it.
    pub commit_time: u64,
    /// The replica group as the checkpointing replica had applied it (the
    /// node fills it in; unknown for a checkpoint written before groups
    /// were recorded).
    pub group: Group,
}
