//! Creek's reliable broadcast (the paper's RB, DESIGN §5) as a deterministic,
//! I/O-free state machine.
//!
//! Every op an origin replica RB-casts has the id `(origin, seq)` with seqs
//! `1, 2, 3, …` contiguous per origin. [`Gossip`] spreads these payloads:
//!
//! - **Eager push.** [`Gossip::broadcast`] takes a new own op (the core's
//!   `Effect::RbCast`), counts it as delivered (the replica delivered it
//!   itself) and queues it; [`Gossip::take_output`] sends the queue to
//!   every peer in `Ops` messages of at most `ops_per_message_max` ops.
//!   Drivers take the output after a batch of inputs so pushes are batched.
//! - **Per-origin FIFO delivery.** [`Gossip::on_message`] delivers a remote
//!   op `(o, s)` ([`GossipOutput::delivered`]) only after `(o, s-1)`;
//!   duplicates, ops at or below the counter and ops claiming this replica
//!   as origin are ignored; an own op it never issued, or issued to another
//!   op, is also reported ([`refusal`]). An op that
//!   arrives early waits in a bounded buffer and is delivered as soon as the
//!   gap fills.
//! - **Anti-entropy.** Every `anti_entropy_every_ticks` ticks each replica
//!   sends every peer a `Digest`: per origin, its contiguous delivered
//!   counter. A replica answers a digest with the ops the sender lacks that
//!   it still holds, oldest first per origin, and — only when the sender
//!   knows strictly more than it for some origin — with its own digest, so
//!   the sender pushes back. After a partition heals, anti-entropy alone
//!   brings every replica up to date.
//! - **Pull.** [`Gossip::pull`] asks every peer for specific ids (e.g. the
//!   causal context of a strong op that CAB waits for), rate-limited per id.
//!
//! ```
//! use std::sync::Arc;
//! use creek_core::{Op, OpId, ReplicaId, Timestamp};
//! use creek_types::ProcCall;
//! use creek_gossip::{Gossip, GossipConfig};
//!
//! let (a, b) = (ReplicaId(1), ReplicaId(2));
//! let mut ga = Gossip::new(GossipConfig::new(a, [b])).unwrap();
//! let mut gb = Gossip::new(GossipConfig::new(b, [a])).unwrap();
//! let op = Arc::new(Op {
//!     id: OpId::new(a, 1),
//!     timestamp: Timestamp::new(1, 0),
//!     call: ProcCall::new("kv.put", Vec::new()),
//!     strong: false,
//!     causal_context: None,
//! });
//! ga.broadcast(op.clone());
//! let (to, msg) = ga.take_output().messages.pop().unwrap();
//! assert_eq!(to, b);
//! gb.on_message(a, msg);
//! assert_eq!(gb.take_output().delivered, vec![op]);
//! ```
//!
//! # Bounds
//!
//! - One message carries at most `ops_per_message_max` ops (or pulled ids).
//! - One answer to a digest or a pull is at most `reply_messages_max`
//!   messages; what a peer still lacks goes with the answer to its next
//!   digest. Each origin it lacks gets a fair share of that budget.
//! - The out-of-order buffer holds at most `out_of_order_max` ops. An op so
//!   far ahead of its origin's counter that it could not be delivered
//!   without buffering more than that is dropped at once;
//!   when the buffer is full, the newest op of the incoming op's origin makes
//!   room if it is newer, else the incoming op is dropped. Nothing is lost
//!   for good: an op that is next for its origin never needs the buffer, and
//!   digest answers send the oldest missing ops first.
//! - A digest is answered with our digest at most once per tick per sender.
//! - Ops sent to a peer (pushed or in an answer) are not sent again until
//!   `resend_after_ticks` pass without the peer reporting them held; the
//!   timeout doubles, up to `resend_after_ticks_max`, while the peer makes
//!   no progress. A slow link or a peer stuck behind a gap is not flooded
//!   with the same ops on every digest.
//! - Pull bookkeeping expires after `pull_every_ticks` ticks.
//!
//! # Garbage collection
//!
//! Delivered payloads (own ops included) are held so peers can be answered.
//! A payload is dropped once (1) [`Gossip::committed`] reported the op
//! committed here and (2) every configured peer has reported, in a digest,
//! a counter for the op's origin at or above its seq — counters a peer
//! reports only ever increase. With no peers, committed ops go at once.
//!
//! A peer that never reports (down, partitioned, or not yet started) holds
//! every payload back: that is intentional, as it may need any of them. The
//! payloads held are therefore bounded by what the slowest peer lacks plus
//! what is not yet committed. A peer that loses its state and reports lower
//! counters again cannot be served dropped payloads (recovery is the
//! durability layer's job).
//!
//! # Determinism
//!
//! No clocks, threads, sockets or randomness: time is the number of
//! [`Gossip::tick`] calls. All output is produced from ordered maps and
//! vectors, so the same inputs give the same outputs.
#![deny(missing_docs)]

mod config;
mod fifo;
mod gossip;
mod inflight;
pub mod refusal;
mod store;

pub use config::{ConfigError, GossipConfig};
pub use gossip::{Gossip, GossipOutput, GossipStats, Outbox};

/// Helpers shared by the unit tests.
#[cfg(test)]
mod testkit {
    use std::sync::Arc;

    use creek_core::{Op, OpId, ReplicaId, Timestamp};
    use creek_types::ProcCall;

    /// A weak op of `origin` with the given seq.
    pub(crate) fn op(origin: u16, seq: u64) -> Arc<Op> {
        Arc::new(Op {
            id: OpId::new(ReplicaId(origin), seq),
            timestamp: Timestamp::new(seq, 0),
            call: ProcCall::new("kv.put", Vec::new()),
            strong: false,
            causal_context: None,
        })
    }
}
