//! The node's side of operations across shards (docs/cross-shard.md): the
//! replica's MPO inputs, each followed by a turn, and its MPO output handed
//! to the driver as [`MpoMessage`]s in [`Ready::mpo`](crate::Ready::mpo).
//! Messages between shards are the driver's to carry (a shard's replicas
//! are not this group's peers): the values a shard read go to a replica of
//! each other involved shard, a confirmation to the MPO's origin replica.

use creek_cab::CabStorage;
use creek_core::{Effect, ExecKey, InvokeError};
use creek_exec::ProcCall;
use creek_procs::mpo::{MpoId, Reads};

use crate::Node;

/// What this replica tells other shards about an MPO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MpoMessage {
    /// The values shard `from` read for `mpo` at its committed position:
    /// for a replica of each shard in `to`
    /// ([`Node::mpo_reads`] there).
    Reads {
        /// The MPO.
        mpo: MpoId,
        /// This replica's shard.
        from: u32,
        /// The other involved shards.
        to: Vec<u32>,
        /// The values, by key.
        reads: Reads,
    },
}

impl MpoMessage {
    /// The replica's MPO effect as a message, or `None` for other effects.
    pub(crate) fn of(effect: Effect) -> Result<Self, Effect> {
        match effect {
            Effect::MpoReads {
                mpo,
                from,
                to,
                reads,
            } => Ok(MpoMessage::Reads {
                mpo,
                from,
                to,
                reads,
            }),
            other => Err(other),
        }
    }
}

impl<S: CabStorage> Node<S> {
    /// Invoke this shard's copy of an MPO another shard's replica received
    /// ([`creek_core::Replica::invoke_mpo_copy`]).
    pub fn invoke_mpo_copy(&mut self, call: ProcCall, now_us: u64) -> Result<ExecKey, InvokeError> {
        if !self.membership.is_member() {
            return Err(InvokeError::NotServing(format!(
                "replica {} is not serving its group",
                self.id()
            )));
        }
        let handle = self.replica.invoke_mpo_copy(call, now_us)?;
        self.turn();
        Ok(handle)
    }

    /// The directory sequenced `mpo` at `index` among this shard's MPOs
    /// ([`creek_core::Replica::mpo_sequenced`]).
    pub fn mpo_sequenced(&mut self, mpo: MpoId, index: u64) {
        self.replica.mpo_sequenced(mpo, index);
        self.turn();
    }

    /// Shard `shard`'s values for `mpo` ([`creek_core::Replica::mpo_reads`]).
    pub fn mpo_reads(&mut self, mpo: MpoId, shard: u32, reads: Reads) {
        self.replica.mpo_reads(mpo, shard, reads);
        self.turn();
    }
}
