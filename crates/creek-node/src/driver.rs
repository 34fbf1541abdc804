//! The driver cycle, written once: how a node's [`Ready`] is carried out.
//!
//! A driver owns the I/O — a disk, sockets, threads; or, in the simulator
//! and the test network, their models — and tells the node what happened
//! ([`Node::on_durable`], [`Node::on_transfer_done`],
//! [`Node::on_checkpoint_durable`]). After feeding it inputs, it calls
//! [`Node::drive`], which takes the node's `Ready` and hands each part to the
//! driver's [`Driver`] methods, in one order for every driver:
//!
//! 1. the group, if it changed (connect to new members first);
//! 2. state-transfer jobs (a driver that runs one at once hands its result
//!    back, and the cycle takes the node's next `Ready` in the same call);
//! 3. views for clients (never held: see the hold rule in [`ready`]);
//! 4. the write, then the background checkpoint (which waits for it);
//! 5. the messages a step lets go now ([`Ready::messages`]), then those
//!    that wait for its write ([`Ready::held`], until write
//!    [`Ready::hold_until`] is durable): both through [`Driver::hold`], so
//!    neither overtakes a message held before it;
//! 6. the messages that claim nothing about this disk:
//!    [`Driver::send_now`], ahead of anything still held.
//!
//! When the disk reports a write durable, the driver calls
//! [`Node::on_durable`] and sends what its hold queue
//! ([`HoldQueue`](crate::HoldQueue)) releases, then drives the node again
//! (a leader commits once its own write is durable).
//!
//! [`ready`]: crate::ready

use creek_cab::CabStorage;
use creek_core::{Group, ReplicaId, View};
use creek_wire::PeerMessage;

use crate::{CheckpointJob, Node, Ready, TransferDone, TransferJob, Write};

/// The most times one [`Node::drive`] takes a `Ready` because transfer jobs
/// finished at once: each round may start a job (encode, then serve; fetch,
/// then decode), and a few rounds cover every chain of them.
const TRANSFER_ROUNDS_MAX: usize = 3;

/// What a driver does with a node's output. Each method does I/O (or
/// models it) and nothing else; the order of the calls is
/// [`Node::drive`]'s.
pub trait Driver {
    /// The replica group changed: connect to new members, drop removed
    /// ones.
    fn group(&mut self, _group: Group) {}

    /// Run a state-transfer job off the node's thread and hand its result
    /// to [`Node::on_transfer_done`] later — or run it now and return it
    /// (the simulator does), and the cycle hands it over at once.
    fn transfer(&mut self, job: TransferJob) -> Option<TransferDone>;

    /// Views for this replica's clients; called in every cycle, also
    /// with none (a driver may have answers of its own to send with them).
    fn views(&mut self, views: Vec<View>);

    /// Messages for other shards about operations across shards: carry
    /// each to a replica of the shards it names (a group that is no shard
    /// of a cluster never has any).
    fn mpo(&mut self, messages: Vec<crate::MpoMessage>) {
        debug_assert!(
            messages.is_empty(),
            "MPO messages for a driver without shards"
        );
    }

    /// Persist `write` after every earlier write; report it with
    /// [`Node::on_durable`] once it is durable.
    fn persist(&mut self, write: Write);

    /// Write a checkpoint in the background, beside the writes; report it
    /// with [`Node::on_checkpoint_durable`].
    fn checkpoint(&mut self, job: CheckpointJob);

    /// Send `messages` once write `until` is durable and every message held
    /// before them has left, in order (at once if both hold already:
    /// [`HoldQueue::follow`](crate::HoldQueue::follow)).
    fn hold(&mut self, until: u64, messages: Vec<(ReplicaId, PeerMessage)>);

    /// Send `messages` now, ahead of anything held.
    fn send_now(&mut self, messages: Vec<(ReplicaId, PeerMessage)>);
}

impl<S: CabStorage> Node<S> {
    /// Carry out everything the node has for its driver (the cycle is in
    /// the [module docs](crate::driver)).
    pub fn drive(&mut self, driver: &mut impl Driver) {
        for _ in 0..TRANSFER_ROUNDS_MAX {
            let durable = self.durable();
            let ready = self.ready();
            let done = carry_out(ready, durable, driver);
            if done.is_empty() {
                return;
            }
            for d in done {
                self.on_transfer_done(d);
            }
        }
    }
}

/// Hand one `Ready` to `driver` (`durable`: the last write durable before
/// it); what transfer work it finished at once.
fn carry_out(ready: Ready, durable: u64, driver: &mut impl Driver) -> Vec<TransferDone> {
    let Ready {
        write,
        early,
        messages,
        held,
        hold_until,
        views,
        mpo,
        checkpoint,
        transfer_jobs,
        group,
    } = ready;
    if let Some(group) = group {
        driver.group(group);
    }
    let done: Vec<TransferDone> = transfer_jobs
        .into_iter()
        .filter_map(|job| driver.transfer(job))
        .collect();
    driver.views(views);
    if !mpo.is_empty() {
        driver.mpo(mpo);
    }
    if let Some(write) = write {
        driver.persist(write);
    }
    if let Some(job) = checkpoint {
        driver.checkpoint(job);
    }
    if !messages.is_empty() {
        driver.hold(durable, messages);
    }
    if !held.is_empty() {
        driver.hold(hold_until, held);
    }
    if !early.is_empty() {
        driver.send_now(early);
    }
    done
}
