//! What a node hands its driver after each step ([`Ready`]), the writes it
//! asks to be made durable ([`Write`]), and the queue in which a driver
//! keeps messages until the write they wait for is durable ([`HoldQueue`]).
//!
//! # The cycle
//!
//! In the style of raft-rs's `RawNode::ready()` / `advance()` (a driver
//! runs it through [`Node::drive`](crate::Node::drive), see
//! [`driver`](crate::driver)):
//!
//! 1. feed the node its inputs (invocations, peer frames, ticks, finished
//!    executions);
//! 2. [`Node::ready`](crate::Node::ready) returns everything the driver must
//!    do: a [`Write`] to persist (numbered `1, 2, …`), [`Ready::early`]
//!    messages that leave at once whatever is pending, [`Ready::messages`]
//!    that may leave now after those held before them, [`Ready::held`]
//!    messages that may leave only once write [`Ready::hold_until`] is
//!    durable, and the views for clients;
//! 3. persist writes in order; when the disk reports write `s` durable (and
//!    with it every earlier one), tell the node with
//!    [`Node::on_durable`](crate::Node::on_durable) and send what the
//!    [`HoldQueue`] releases; a failed write goes to
//!    [`Node::on_disk_failure`](crate::Node::on_disk_failure), and the replica
//!    stops.
//!
//! # The hold rule
//!
//! No peer learns anything that a crash could take back *as a claim*: a
//! message that states what this replica holds or decided — a vote, an
//! append acknowledgement, a digest, a hello — is held until every write
//! handed out before it is durable. Three kinds claim nothing and leave at
//! once ([`Ready::early`]), so that an op's way through consensus costs one
//! disk write and not two in sequence:
//!
//! - a leader's appends and heartbeats (raft thesis §10.2.1): the leader
//!   writes its log while its followers write theirs, and counts itself
//!   toward a commit only once its own write is durable
//!   ([`Node::on_durable`](crate::Node::on_durable) tells consensus);
//! - ids forwarded to the leader, and gossip pulls;
//! - op payloads, own ops only up to a seq a durable write reserved
//!   ([`RESERVE_AHEAD`](crate::RESERVE_AHEAD)): a peer may then hold an
//!   own op this replica's crash takes back, so a restarted replica issues
//!   its ids past the reservation and takes the ops back from its peers
//!   (gossip's rule that an id is never issued twice holds).
//!
//! Views are never held: a tentative view is speculative, and a final view
//! follows a commit, which a majority acknowledged only after persisting the
//! op's position and payload.

use std::collections::VecDeque;
use std::sync::Arc;

use creek_cab::LogWrites;
use creek_core::{Checkpoint, Directory, Op, OpId, ReplicaId, View};
use creek_wire::PeerMessage;

use crate::membership::Identity;

/// Everything a driver must do after a step.
#[derive(Debug, Default)]
#[must_use = "a Ready carries writes, messages and views the driver must act on"]
pub struct Ready {
    /// Persist this, after every earlier write.
    pub write: Option<Write>,
    /// Messages that leave at once, even ahead of messages still held:
    /// they claim nothing about this replica's disk (see the module's hold
    /// rule). State-transfer messages come first: they carry committed
    /// state only.
    pub early: Vec<(ReplicaId, PeerMessage)>,
    /// Messages that may leave now, after those held before them.
    pub messages: Vec<(ReplicaId, PeerMessage)>,
    /// Messages that may leave only once write [`Ready::hold_until`] is
    /// durable.
    pub held: Vec<(ReplicaId, PeerMessage)>,
    /// The write `held` waits for (the last one handed out).
    pub hold_until: u64,
    /// Views for this replica's clients (never held).
    pub views: Vec<View>,
    /// Messages for other shards about operations across shards (never
    /// held: they carry committed state and confirmations only).
    pub mpo: Vec<crate::MpoMessage>,
    /// A checkpoint to write in the background, beside the writes, without
    /// delaying them; report it with
    /// [`Node::on_checkpoint_durable`](crate::Node::on_checkpoint_durable).
    pub checkpoint: Option<CheckpointJob>,
    /// State-transfer work to run off the node's thread (encoding a
    /// checkpoint to serve, decoding one fetched); hand each result to
    /// [`Node::on_transfer_done`](crate::Node::on_transfer_done).
    pub transfer_jobs: Vec<crate::TransferJob>,
    /// The replica group, when it changed (a configuration change applied,
    /// or a checkpoint installed): the driver connects to new members and
    /// drops removed ones.
    pub group: Option<creek_core::Group>,
}

/// A checkpoint of the committed state for the driver to make durable at
/// its own pace, beside the node's writes: a large state takes a while to
/// write, and writes must not queue behind it. Once it is durable, and
/// stored as the latest checkpoint, the driver reports [`CheckpointJob::id`];
/// only then does the node compact its log and drop the payloads it covers
/// (in a later [`Write`]). A newer checkpoint — a later job, or one
/// installed in a [`Write`] — supersedes it: a superseded job must never
/// become the latest checkpoint (stores keep checkpoints ordered by when
/// they were started, and a job older than the stored one is dropped).
#[derive(Clone, Debug)]
pub struct CheckpointJob {
    /// The node's number for it (1, 2, … since the node started).
    pub id: u64,
    /// It may become the latest checkpoint only once write `after` is
    /// durable: that write holds the consensus log up to its
    /// `cab_applied` (a restart must find the log as far as the checkpoint).
    pub after: u64,
    /// The checkpoint.
    pub checkpoint: Checkpoint,
}

/// One write the node asks to be made durable. Writes are numbered from 1
/// in the order they are handed out, and become durable in that order,
/// whole or not at all.
#[derive(Clone, Debug, Default)]
pub struct Write {
    /// Its number.
    pub seq: u64,
    /// Consensus-log writes (entries, truncation, hard state).
    pub log: LogWrites,
    /// Op payloads newly accepted here: own ops as RB-cast, remote ops as
    /// gossip delivered them.
    pub ops: Vec<Arc<Op>>,
    /// A checkpoint installed from a peer, replacing the stored one in this
    /// same write (with the log writes that restart the log at it, so a
    /// restart finds both or neither). Applied after `log` and `ops`; it
    /// supersedes any [`CheckpointJob`] still being written.
    pub checkpoint: Option<Checkpoint>,
    /// Payloads a durable checkpoint covers and no peer needs from here any
    /// more: deleted.
    pub dropped: Vec<OpId>,
    /// The replica's identity in its cluster, when it changed (a new data
    /// directory's nonce, then the founders once it joins).
    pub identity: Option<Identity>,
    /// The addresses of members added since the group was formed, when
    /// they changed (the configuration itself is in `log`).
    pub directory: Option<Directory>,
    /// The replica's record of its own seqs, when it changed (kept as
    /// [`Kept::own_seqs`](crate::Kept::own_seqs)).
    pub own_seqs: Option<OwnSeqs>,
}

/// What a replica records about its own seqs besides its ops (see
/// [`RESERVE_AHEAD`](crate::RESERVE_AHEAD)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnSeqs {
    /// Own ops up to this seq may reach peers before they reach this disk;
    /// a restart takes back those its disk lacks.
    pub reserved: u64,
    /// The highest own seq ever taken back: told to peers in every hello,
    /// so that one whose delivery of this replica's ops stopped at a gap
    /// (seqs voided, or never issued) takes the ops up to it in any order,
    /// also after its own restart.
    pub floor: u64,
    /// Own seqs in `(after, through]` being taken back from peers after a
    /// crash, not yet settled by the committed order: a restart takes them
    /// back again.
    pub reclaiming: Option<(u64, u64)>,
}

impl Write {
    /// Whether something waits on this write promptly: consensus writes (a
    /// vote, an acknowledgement, a leader's appends) or a checkpoint. A
    /// write of payloads alone only delays gossip, so a driver may linger
    /// briefly to make it durable together with others.
    pub fn is_urgent(&self) -> bool {
        !self.log.is_empty()
            || self.checkpoint.is_some()
            || self.identity.is_some()
            || self.directory.is_some()
    }
}

/// Messages a driver keeps until the write they wait for is durable, in the
/// order they were held. Generic over what the driver keeps (the server
/// keeps encoded frames).
#[derive(Debug)]
pub struct HoldQueue<T> {
    queue: VecDeque<(u64, Vec<T>)>,
}

impl<T> Default for HoldQueue<T> {
    fn default() -> Self {
        HoldQueue {
            queue: VecDeque::new(),
        }
    }
}

impl<T> HoldQueue<T> {
    /// Keep `items` until write `seq` is durable.
    pub fn hold(&mut self, seq: u64, items: Vec<T>) {
        if items.is_empty() {
            return;
        }
        // Paired with `release`: held in write order, so a release is a
        // prefix.
        assert!(
            self.queue.back().is_none_or(|(s, _)| *s <= seq),
            "held behind a later write"
        );
        self.queue.push_back((seq, items));
    }

    /// Keep `items` until write `seq` is durable and everything held before
    /// them is released (at once, if both hold already): messages that may
    /// leave now, but never ahead of messages held earlier.
    pub fn follow(&mut self, seq: u64, items: Vec<T>) {
        let seq = self.queue.back().map_or(seq, |(s, _)| seq.max(*s));
        self.hold(seq, items);
    }

    /// Everything whose write is durable now that writes up to `durable`
    /// are, in the order it was held.
    pub fn release(&mut self, durable: u64) -> Vec<T> {
        let mut out = Vec::new();
        while self.queue.front().is_some_and(|(s, _)| *s <= durable) {
            if let Some((_, items)) = self.queue.pop_front() {
                out.extend(items);
            }
        }
        out
    }

    /// Drop everything (a crash or a failed disk: nothing held may leave).
    pub fn clear(&mut self) {
        self.queue.clear();
    }

    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The write the first held items wait for, if any.
    pub fn first(&self) -> Option<u64> {
        self.queue.front().map(|(s, _)| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_in_order_up_to_the_durable_write() {
        let mut q = HoldQueue::default();
        q.hold(1, vec!['a', 'b']);
        q.hold(1, vec!['c']);
        q.hold(3, vec!['d']);
        q.hold(3, Vec::new());
        assert!(q.release(0).is_empty());
        assert_eq!(q.release(2), vec!['a', 'b', 'c']);
        assert_eq!(q.release(3), vec!['d']);
        assert!(q.is_empty());
    }

    #[test]
    fn what_may_leave_now_follows_what_was_held_before_it() {
        let mut q = HoldQueue::default();
        q.follow(0, vec!['a']);
        assert_eq!(q.release(0), vec!['a'], "nothing held before: at once");
        q.hold(2, vec!['b']);
        q.follow(1, vec!['c']);
        assert!(q.release(1).is_empty(), "behind 'b'");
        assert_eq!(q.release(2), vec!['b', 'c']);
    }

    #[test]
    #[should_panic(expected = "held behind a later write")]
    fn holding_out_of_order_is_a_bug() {
        let mut q = HoldQueue::default();
        q.hold(2, vec![1]);
        q.hold(1, vec![2]);
    }
}
