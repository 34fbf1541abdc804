//! Durability as an output of the node: what it knows of its writes, the
//! [`Ready`] it hands the driver (the step's write, the messages that may
//! leave now or only once that write is durable, the background
//! checkpoint), and the reports that come back ([`Node::on_durable`],
//! [`Node::on_checkpoint_durable`]). The cycle and the hold rule are
//! described in [`ready`](crate::ready); this is the node's side of it.

use std::collections::VecDeque;

use creek_cab::CabStorage;
use creek_core::{Checkpoint, Op, OpId, ReplicaId};
use creek_types::planted::Bug;
use creek_wire::PeerMessage;

use crate::config::CHECKPOINT_OPS;
use crate::recovery::log_restarts_at;
use crate::{CheckpointJob, Node, NodeConfig, OwnSeqs, Ready, Write};

/// What the node knows of its writes.
#[derive(Default)]
pub(crate) struct Durability {
    /// The last write handed out.
    pub(crate) written: u64,
    /// The last write reported durable (`<= written`).
    pub(crate) durable: u64,
    /// A write failed: nothing more leaves, nothing is written.
    failed: Option<String>,
    /// Take even a lazy (commit-index-only) log write at the next `ready`.
    pub(crate) sync_lazy: bool,
    /// Shutting down cleanly (see [`Node::sync_pending_writes`]).
    closing: bool,
    checkpoint_every_ticks: u64,
    /// See [`NodeConfig::checkpoint_rewrite_ratio`].
    rewrite_ratio: u64,
    /// Bytes and ops of the payloads handed to writes since the last
    /// checkpoint began (or was installed, or recovered from).
    logged_bytes: u64,
    logged_ops: u64,
    /// The state bytes of that checkpoint.
    checkpoint_state_bytes: u64,
    /// Refuse client invocations at this many pending writes (0: never).
    pub(crate) pending_writes_max: u64,
    /// Refuse strong client invocations at this many own strong ops not
    /// yet ordered (0: never; `NodeConfig::strong_pending_max`). Not about
    /// the disk, but the same kind of push-back, checked beside it.
    pub(crate) strong_pending_max: usize,
    /// Refuse weak client invocations, while a leader is known, at this
    /// many own ops not yet committed (0: never;
    /// `NodeConfig::weak_pending_max`).
    pub(crate) weak_pending_max: usize,
    pub(crate) ticks_since_checkpoint: u64,
    checkpoint_requested: bool,
    /// The committed length the last durable checkpoint covered.
    checkpointed_len: u64,
    send_before_durable: bool,
    /// Background checkpoints handed out (the last [`CheckpointJob::id`]).
    checkpoint_jobs: u64,
    /// The background checkpoint being written, if any.
    checkpoint_writing: Option<JobMark>,
    /// A background checkpoint reported durable: the next write compacts the
    /// log and drops the payloads it covers.
    checkpoint_done: Option<JobMark>,
    /// Writes handed out and not yet durable, with what their durability
    /// tells the rooms.
    in_flight: VecDeque<InFlight>,
    /// The own seqs recorded in the last write handed out, and the seqs a
    /// durable write reserved (see [`RESERVE_AHEAD`]).
    pub(crate) own_seqs: OwnSeqs,
    pub(crate) reserved_durable: u64,
    pub(crate) forget_sent_ops: bool,
}

/// A write handed out and not yet durable.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    seq: u64,
    /// CAB's mark for the log writes in it (see `Cab::take_writes`; 0: none).
    cab_mark: u64,
    /// The own seqs it reserves (0: none).
    reserved: u64,
    /// It records the replica's identity: nothing may leave ahead of it.
    identity: bool,
}

/// Own ops may reach peers before the write with their payload is durable
/// (a leader's appends leave while its own write is in flight, and the
/// payloads they name must keep up), but only up to a seq that a durable
/// write *reserved*: each write reserves this many seqs past the last one
/// issued once fewer than half of them are left. A replica that restarts
/// after a crash cannot tell which of the reserved seqs reached a peer, so
/// it takes them all back as a rebuilt replica takes back the ops it lost
/// with its disk: it resumes issuing past the reservation, pulls its own
/// ops in that range from its peers, and has the committed order void
/// those no peer gave back (`Node::reclaim_own_ops`). No id is ever
/// issued twice, and none of the ops is waited for. A clean shutdown
/// lowers the reservation to what was issued.
pub const RESERVE_AHEAD: u64 = 1024;

/// What the node remembers of a [`CheckpointJob`].
#[derive(Clone, Copy, Debug)]
struct JobMark {
    id: u64,
    committed_len: u64,
    cab_applied: u64,
}

/// The most committed payloads a checkpoint keeps on disk for peers that
/// have not reported holding them (a peer down longer than this many ops
/// behind cannot catch up by gossip and needs state transfer).
const RETAINED_MAX: usize = 200_000;

/// Committed ids a checkpoint covers that the replica still lists (for
/// observers reading the committed order, such as `Admin.Committed`): a
/// reader a little behind does not find them gone. About 40 bytes each.
const COMMITTED_TAIL: u64 = 65_536;

impl Durability {
    pub(crate) fn new(config: &NodeConfig, recovered: Option<&Checkpoint>) -> Self {
        Durability {
            checkpoint_every_ticks: config.checkpoint_every_ticks,
            rewrite_ratio: config.checkpoint_rewrite_ratio,
            checkpoint_state_bytes: recovered.map_or(0, state_bytes),
            checkpointed_len: recovered.map_or(0, |c| c.committed_len),
            pending_writes_max: config.pending_writes_max,
            strong_pending_max: config.strong_pending_max,
            weak_pending_max: config.weak_pending_max,
            send_before_durable: config.planted.has(Bug::SendBeforeDurable),
            forget_sent_ops: config.planted.has(Bug::ForgetSentOps),
            ..Durability::default()
        }
    }

    /// Whether the periodic checkpoint is due: its interval passed, and
    /// the log since the last one is worth rewriting the state for
    /// ([`NodeConfig::checkpoint_rewrite_ratio`]).
    fn periodic_due(&self) -> bool {
        self.checkpoint_every_ticks > 0
            && self.ticks_since_checkpoint >= self.checkpoint_every_ticks
            && (self.rewrite_ratio == 0
                || self.logged_ops >= CHECKPOINT_OPS
                || self.logged_bytes.saturating_mul(self.rewrite_ratio)
                    >= self.checkpoint_state_bytes)
    }
}

/// About how many bytes a checkpoint of `c` writes.
fn state_bytes(c: &Checkpoint) -> u64 {
    c.state
        .iter()
        .map(|(k, v)| (k.len() + v.len()) as u64)
        .sum()
}

/// About how many bytes the log holds for `op`.
fn op_bytes(op: &Op) -> u64 {
    (op.call.name.len() + op.call.args.len() + OP_OVERHEAD) as u64
}

/// What an op costs the log beyond its procedure's name and arguments
/// (id, timestamp, context, framing), about.
const OP_OVERHEAD: usize = 48;

impl<S: CabStorage> Node<S> {
    /// Everything the driver must do now (see [`ready`](crate::ready)): the
    /// step's write, the messages that may leave now or once a write is
    /// durable, and the views. Call after every step; what is not taken
    /// accumulates.
    pub fn ready(&mut self) -> Ready {
        let mut views = std::mem::take(&mut self.views);
        let mpo = std::mem::take(&mut self.mpo_out);
        // Hellos first: a peer verifies this replica before its other
        // messages arrive.
        let mut out: Vec<(ReplicaId, PeerMessage)> = self
            .membership
            .take_messages()
            .into_iter()
            .map(|(to, h)| (to, PeerMessage::Hello(h)))
            .collect();
        for (to, h) in out.iter_mut() {
            if let PeerMessage::Hello(h) = h {
                h.term = if self.membership.is_member() {
                    self.cab.term()
                } else {
                    0
                };
                h.peer_seq = self.gossip.highest_seq(*to);
                h.reserved = self.durability.reserved_durable;
                h.peer_reserved = self.membership.reserved_by(*to);
                h.floor = self.own_floor;
                h.last_index = if self.membership.is_member() {
                    self.cab.log_mark().0
                } else {
                    0
                };
                if self.membership.is_member() {
                    let conf = self.cab.store().conf();
                    h.group = creek_cab::members_of(&conf.state).into_iter().collect();
                    h.voters = creek_cab::voters_of(&conf.state).into_iter().collect();
                    h.conf_index = conf.index;
                    h.directory = self.directory.clone();
                }
            }
        }
        out.append(&mut self.outbox);
        // Checkpoint chunks and fetches carry committed state only: never
        // held for this replica's disk.
        let transfers = self
            .transfers
            .take_messages()
            .into_iter()
            .map(|(to, m)| (to, PeerMessage::Snapshot(m)));
        let mut early = std::mem::take(&mut self.early);
        if self.durability.failed.is_some() {
            // The disk failed: nothing may leave that a write backs, and
            // nothing more is written (views of tentative results still go).
            self.new_payloads.clear();
            return Ready {
                views,
                mpo,
                ..Ready::default()
            };
        }
        if !self.early_allowed() {
            out.append(&mut early);
        }
        // Transfers go first among the early ones, never held.
        let early: Vec<(ReplicaId, PeerMessage)> = transfers.chain(early).collect();
        let (write, checkpoint) = self.take_write();
        if write.is_some() {
            self.answer_after.written(self.durability.written);
        }
        self.release_held_views(&mut views);
        let group = std::mem::take(&mut self.group_changed).then(|| self.group());
        let d = &self.durability;
        let (messages, held) = if d.durable >= d.written || d.send_before_durable {
            (out, Vec::new())
        } else {
            (Vec::new(), out)
        };
        Ready {
            write,
            early,
            messages,
            held,
            hold_until: self.durability.written,
            views,
            mpo,
            checkpoint,
            transfer_jobs: self.transfers.take_jobs(),
            group,
        }
    }

    /// The held preliminary views whose ops are now durable enough
    /// ([`AnswerAfter`](crate::AnswerAfter)), into `views`.
    fn release_held_views(&mut self, views: &mut Vec<creek_core::View>) {
        let halves = creek_cab::voter_halves(&self.cab.conf_state());
        let gossip = &self.gossip;
        self.answer_after.release(
            self.replica.id(),
            self.durability.durable,
            &halves,
            |peer, id| gossip.peer_holds(peer, id),
            views,
        );
    }

    /// The step's write, if there is anything to persist, and the background
    /// checkpoint to start, if one is due. A commit-index-only hard state
    /// rides with the next write (at the latest the next tick's): a
    /// restarted node learns the commit index again from the leader (etcd's
    /// `MustSync` rule), and syncing it alone would cost every strong op
    /// extra fsyncs across the group. A checkpoint takes every pending log
    /// write, so the stored log always reaches as far as the stored
    /// checkpoint.
    fn take_write(&mut self) -> (Option<Write>, Option<CheckpointJob>) {
        let ops = std::mem::take(&mut self.new_payloads);
        let identity = self.membership.take_write();
        let directory = std::mem::take(&mut self.directory_changed).then(|| self.directory.clone());
        let installed = self.installed.take();
        let d = &mut self.durability;
        let job = if installed.is_some() {
            // Supersedes the checkpoint being written: its report will not
            // be heeded, and the store drops it.
            d.checkpoint_writing = None;
            d.checkpoint_done = None;
            None
        } else if d.checkpoint_writing.is_none() && (d.checkpoint_requested || d.periodic_due()) {
            self.checkpoint()
        } else {
            None
        };
        let d = &mut self.durability;
        if let Some(c) = installed.as_ref().or(job.as_ref()) {
            d.checkpoint_state_bytes = state_bytes(c);
            d.logged_bytes = 0;
            d.logged_ops = 0;
        }
        d.logged_ops += ops.len() as u64;
        d.logged_bytes += ops.iter().map(|op| op_bytes(op)).sum::<u64>();
        // What a durable checkpoint lets go: the log up to its restart point
        // once every replica acknowledged it (CAB's compaction point), and
        // the payloads of the ops it covers.
        let covered = match (&installed, self.durability.checkpoint_done.take()) {
            (Some(c), _) => Some((c.committed_len, c.cab_applied)),
            (None, Some(done)) => Some((done.committed_len, done.cab_applied)),
            (None, None) => None,
        };
        let mut dropped = std::mem::take(&mut self.voided);
        if let Some((committed_len, cab_applied)) = covered {
            if let Err(e) = self.cab.compact(cab_applied) {
                self.on_disk_failure(e.to_string());
                return (None, None);
            }
            // Paired with recovery, which restores the latest checkpoint
            // stored: checkpoints only move forward.
            assert!(
                committed_len >= self.durability.checkpointed_len,
                "checkpoint at {committed_len} behind the previous one at {}",
                self.durability.checkpointed_len
            );
            // The payloads it frees are those committed since the previous
            // one, and those an earlier one kept for peers.
            let since = self.committed_between(self.durability.checkpointed_len, committed_len);
            dropped.extend(self.droppable(since));
            self.durability.checkpointed_len = committed_len;
            // The checkpoint covers the committed ids before it: the list
            // keeps what follows (and what gossip was not told yet), and a
            // tail before it for readers of the committed order.
            self.replica.trim_committed(
                committed_len
                    .min(self.committed_told)
                    .saturating_sub(COMMITTED_TAIL),
            );
        }
        let d = &mut self.durability;
        if job.is_some() {
            d.ticks_since_checkpoint = 0;
            d.checkpoint_requested = false;
        }
        let take_log = d.sync_lazy
            || self.cab.must_sync()
            || !ops.is_empty()
            || installed.is_some()
            || directory.is_some()
            || job.is_some();
        d.sync_lazy = false;
        let closing = d.closing;
        let (log, cab_mark) = if take_log {
            self.cab.take_writes()
        } else {
            (creek_cab::LogWrites::default(), 0)
        };
        // Paired with `check_storage` at restart: once this write is
        // durable, the stored log restarts at the checkpoint it stores (or
        // the job it lets become the latest).
        let restart = installed.as_ref().or(job.as_ref()).map(|c| c.cab_applied);
        if let Some(applied) = restart {
            if let Err(e) = log_restarts_at(self.cab.store(), applied) {
                panic!("a checkpoint written ahead of its log: {e}");
            }
        }
        let own_seqs = self.own_seqs(closing);
        let write = if log.is_empty()
            && ops.is_empty()
            && installed.is_none()
            && dropped.is_empty()
            && identity.is_none()
            && directory.is_none()
            && own_seqs.is_none()
        {
            None
        } else {
            let d = &mut self.durability;
            d.written += 1;
            d.in_flight.push_back(InFlight {
                seq: d.written,
                cab_mark,
                reserved: own_seqs.map_or(0, |o| o.reserved),
                identity: identity.is_some(),
            });
            Some(Write {
                seq: d.written,
                log,
                ops,
                checkpoint: installed,
                dropped,
                identity,
                directory,
                own_seqs,
            })
        };
        let d = &mut self.durability;
        let job = job.map(|checkpoint| {
            d.checkpoint_jobs += 1;
            let mark = JobMark {
                id: d.checkpoint_jobs,
                committed_len: checkpoint.committed_len,
                cab_applied: checkpoint.cab_applied,
            };
            d.checkpoint_writing = Some(mark);
            CheckpointJob {
                id: mark.id,
                after: d.written,
                checkpoint,
            }
        });
        (write, job)
    }

    /// Of the payloads a checkpoint covers (`covered` and those kept by
    /// earlier ones), those every peer holds — a replica that lost its data
    /// excepted: it needs state transfer anyway — or, past
    /// [`RETAINED_MAX`] kept, those with the lowest ids (per origin, the
    /// oldest). The others stay on disk for the peers that lack them.
    fn droppable(&mut self, covered: Vec<OpId>) -> Vec<OpId> {
        let lost = self
            .membership
            .lost_peers()
            .iter()
            .copied()
            .collect::<Vec<_>>();
        self.retained.extend(covered);
        let (gone, kept): (Vec<OpId>, Vec<OpId>) = self
            .retained
            .iter()
            .partition(|id| self.gossip.held_by_peers(**id, &lost));
        let excess = kept.len().saturating_sub(RETAINED_MAX);
        self.retained = kept[excess..].iter().copied().collect();
        gone.into_iter()
            .chain(kept[..excess].iter().copied())
            .collect()
    }

    /// The next [`Node::ready`] (or the first after it at a clean point, and
    /// with no checkpoint being written) starts a checkpoint, whatever the
    /// schedule.
    pub fn request_checkpoint(&mut self) {
        self.durability.checkpoint_requested = true;
    }

    /// The background checkpoint [`CheckpointJob::id`] `id` is durable and
    /// the latest stored (reports may repeat, or name a superseded job:
    /// those are ignored). The next [`Node::ready`] compacts the log to it
    /// and drops the payloads it covers.
    pub fn on_checkpoint_durable(&mut self, id: u64) {
        let d = &mut self.durability;
        if let Some(mark) = d.checkpoint_writing.filter(|m| m.id == id) {
            d.checkpoint_writing = None;
            d.checkpoint_done = Some(mark);
            // The interval runs from here: a state that takes longer to
            // write than the interval is not checkpointed back to back.
            d.ticks_since_checkpoint = 0;
        }
    }

    /// The next [`Node::ready`] takes every pending log write, lazy ones
    /// included, and lowers the own-seq reservation to what was issued:
    /// call before a clean shutdown, after the last invocation.
    pub fn sync_pending_writes(&mut self) {
        self.durability.sync_lazy = true;
        self.durability.closing = true;
    }

    /// Writes up to `seq` are durable (reports may come late or repeat).
    /// Consensus counts the log writes among them (a leader counts itself
    /// toward a commit only now), and own ops they reserve may be sent
    /// early; call [`Node::ready`] next.
    pub fn on_durable(&mut self, seq: u64) {
        let d = &mut self.durability;
        // Paired with `take_write`: only a write handed out can be durable.
        assert!(
            seq <= d.written,
            "write {seq} reported durable, but only {} were handed out",
            d.written
        );
        d.durable = d.durable.max(seq);
        let reserved_before = d.reserved_durable;
        let mut cab_mark = 0;
        while d.in_flight.front().is_some_and(|w| w.seq <= seq) {
            if let Some(w) = d.in_flight.pop_front() {
                cab_mark = cab_mark.max(w.cab_mark);
                d.reserved_durable = d.reserved_durable.max(w.reserved);
            }
        }
        if d.reserved_durable > reserved_before {
            self.membership.announce();
        }
        if cab_mark > 0 && d.failed.is_none() {
            self.cab.on_persisted(cab_mark);
            self.turn();
        }
    }

    /// The record of own seqs for the next write, if it changed (see
    /// [`RESERVE_AHEAD`]): more seqs reserved once fewer than half are
    /// left, and at a clean shutdown (`closing`) no more than were issued;
    /// the seqs being taken back until they are settled.
    fn own_seqs(&mut self, closing: bool) -> Option<OwnSeqs> {
        let issued = self.replica.last_issued_seq();
        let d = &mut self.durability;
        let reserved = if closing {
            issued
        } else if issued + RESERVE_AHEAD / 2 > d.own_seqs.reserved {
            issued + RESERVE_AHEAD
        } else {
            d.own_seqs.reserved
        };
        let next = OwnSeqs {
            reserved,
            floor: self.own_floor,
            reclaiming: self.reclaiming,
        };
        (next != d.own_seqs).then(|| {
            d.own_seqs = next;
            next
        })
    }

    /// Whether messages that do not wait for this replica's disk may leave
    /// now: it is a member, and no write of its identity is pending (its
    /// hellos come first).
    fn early_allowed(&self) -> bool {
        self.membership.is_member() && !self.durability.in_flight.iter().any(|w| w.identity)
    }

    /// A write failed: the replica must stop (after an fsync error nothing
    /// is known about what is on disk). Nothing more is written or sent.
    pub fn on_disk_failure(&mut self, why: String) {
        self.durability.failed.get_or_insert(why);
        self.outbox.clear();
        self.early.clear();
    }

    /// The last write handed out.
    pub fn written(&self) -> u64 {
        self.durability.written
    }

    /// The last write reported durable ([`Node::on_durable`]).
    pub fn durable(&self) -> u64 {
        self.durability.durable
    }

    /// A checkpoint of the committed state with CAB's restart point, or
    /// `None` if this is not a clean point (`Replica::checkpoint`; try again
    /// after the pending executions ran). `cab_applied` is
    /// `Cab::delivered_through`: every id of the log up to it has been
    /// delivered, and the replica committed each id CAB delivered (it
    /// has no decided id waiting), so the checkpoint reflects exactly the
    /// deliveries up to that index; a restart redelivers what follows (ids
    /// of a partly delivered entry included, which the replica then ignores
    /// as already committed).
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        let mut checkpoint = self.replica.checkpoint()?;
        checkpoint.cab_applied = self.cab.delivered_through();
        checkpoint.group = self.group();
        Some(checkpoint)
    }

    /// The ids committed at global positions `from_len..committed_len()`
    /// (see `Replica::committed_len`): after a checkpoint at
    /// `checkpoint.committed_len`, `committed_since(previous_len)` lists the
    /// payloads it makes unnecessary for a restart. Positions before the
    /// checkpoint this node was recovered from are not known here (their
    /// payloads went with that checkpoint) and are skipped.
    pub fn committed_since(&self, from_len: u64) -> Vec<OpId> {
        self.committed_between(from_len, u64::MAX)
    }

    /// The ids committed at global positions `from_len..to_len` (those this
    /// node knows, as in [`Node::committed_since`]).
    fn committed_between(&self, from_len: u64, to_len: u64) -> Vec<OpId> {
        let list = self.replica.committed();
        let base = self.replica.committed_len() - list.len() as u64;
        let at = |len: u64| {
            usize::try_from(len.saturating_sub(base)).map_or(list.len(), |i| i.min(list.len()))
        };
        list.get(at(from_len)..at(to_len).max(at(from_len)))
            .map(<[OpId]>::to_vec)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// A node configuration checkpointing every 10 ticks with `ratio`, and
    /// durability recovered from a checkpoint of 4 MiB of state.
    fn recovered(ratio: u64) -> Durability {
        let mut config = NodeConfig::for_group(ReplicaId(1), &[ReplicaId(1)]);
        config.checkpoint_every_ticks = 10;
        config.checkpoint_rewrite_ratio = ratio;
        let state = (0..64u32)
            .map(|i| {
                (
                    Bytes::from(i.to_be_bytes().to_vec()),
                    Bytes::from(vec![0u8; 64 << 10]),
                )
            })
            .collect();
        let c = Checkpoint {
            state,
            ..Checkpoint::default()
        };
        let mut d = Durability::new(&config, Some(&c));
        d.ticks_since_checkpoint = 10;
        d
    }

    /// Past its interval, a periodic checkpoint waits for a quarter of the
    /// state's bytes logged, or for the ops' count; with the ratio 0 it is
    /// due at every interval; never before the interval.
    #[test]
    fn a_periodic_checkpoint_waits_for_a_log_worth_the_rewrite() {
        let mut d = recovered(4);
        assert_eq!(d.checkpoint_state_bytes, 64 * (4 + (64 << 10)));
        assert!(!d.periodic_due(), "nothing logged since: no rewrite");
        d.logged_bytes = d.checkpoint_state_bytes / 4 - 1;
        assert!(!d.periodic_due());
        d.logged_bytes += 1;
        assert!(d.periodic_due());
        d.ticks_since_checkpoint = 9;
        assert!(!d.periodic_due(), "never before the interval");

        let mut d = recovered(4);
        d.logged_ops = CHECKPOINT_OPS;
        assert!(d.periodic_due(), "many small ops make it due");

        assert!(recovered(0).periodic_due(), "ratio 0: every interval");
    }
}
