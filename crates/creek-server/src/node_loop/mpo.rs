//! The node loop's part in operations across shards (docs/cross-shard.md;
//! the messages travel through [`crate::mpo::Link`]):
//!
//! - an MPO this replica took from a client leaves once its id cannot be
//!   issued again after a crash ([`NodeLoop::mpo_release`]): an MPO's id
//!   is its origin op's;
//! - messages from other groups' replicas go to the node
//!   ([`NodeLoop::on_mpo`]); a directory replica sequences an MPO with a
//!   strong `mpo.sequence` op and answers once it is committed;
//! - a committed order that waits on an MPO for a while makes the replica
//!   ask for what it misses itself ([`NodeLoop::mpo_chase`]).

// Answers go to the gRPC handler as `Status` as they are.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use creek_core::{OpId, Request as OpRequest};
use creek_node::HoldQueue;
use creek_procs::builtins::directory::sequence_call;
use creek_procs::mpo::{MpoCall, MpoId};
use creek_types::ProcCall;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use super::{Invocation, NodeLoop, ReplyTo};
use crate::mpo::Origin;
use creek_node::mpo::wire::{Reply, Request};
use creek_node::mpo::Refusal;

/// How long a directory replica keeps a sequencing request waiting for
/// its op to commit (the asker's own timeout is about as long).
const SEQUENCE_WAIT: Duration = Duration::from_secs(2);

/// How long a replica keeps a mover's op waiting for its final view
/// before it answers [`Reply::Pending`] (below the asker's own timeout).
const RUN_WAIT: Duration = Duration::from_millis(1500);

/// Where an answer goes.
type Answer = oneshot::Sender<Result<Reply, Status>>;

/// What the node loop keeps for operations across shards.
#[derive(Default)]
pub(super) struct MpoState {
    /// The messages' carrier, on a shard's replica of a cluster of
    /// several shards.
    pub(super) link: Option<std::sync::Arc<crate::mpo::Link>>,
    /// MPOs taken from clients this turn.
    fresh: Vec<Origin>,
    /// MPOs waiting for the write holding their op to be durable.
    held: HoldQueue<Origin>,
    /// On a directory replica: sequencing requests waiting for their op to
    /// commit.
    sequencing: Vec<(MpoId, Instant, Answer)>,
    /// On a directory replica: when each MPO's sequencing op was invoked
    /// here (not again while one may still commit).
    invoked: HashMap<MpoId, Instant>,
}

impl MpoState {
    pub(super) fn new(link: Option<std::sync::Arc<crate::mpo::Link>>) -> Self {
        MpoState {
            link,
            ..Default::default()
        }
    }
}

impl NodeLoop {
    /// A message about an MPO, answered on `answer` if there is one.
    pub(super) fn on_mpo(&mut self, req: Request, answer: Option<Answer>) {
        if let Some(why) = &self.failed {
            if let Some(a) = answer {
                let _ = a.send(Err(Status::unavailable(why.to_string())));
            }
            return;
        }
        if let Request::Sequence { mpo, shards } = req {
            return self.mpo_sequence(mpo, shards, answer);
        }
        if let Request::Run(call) = req {
            return self.move_run(call, answer);
        }
        let Some(shard) = self
            .shards
            .as_ref()
            .filter(|_| self.directory.gate.is_none())
            .map(|g| u32::from(g.shard().0))
        else {
            if let Some(a) = answer {
                let _ = a.send(Err(Status::failed_precondition(format!(
                    "replica {} serves no shard",
                    self.node.id()
                ))));
            }
            return;
        };
        let now = self.now_us();
        let result = self.node.mpo_serve(req, shard, now).map_err(|e| match e {
            Refusal::Malformed(m) => Status::invalid_argument(m),
            Refusal::NotHere(m) => Status::failed_precondition(m),
            Refusal::NotServing(m) => Status::unavailable(m),
        });
        if let Some(a) = answer {
            let _ = a.send(result);
        }
    }

    /// On a directory replica: sequence `mpo` (once) and answer its
    /// indices once committed.
    fn mpo_sequence(&mut self, mpo: MpoId, shards: Vec<u32>, answer: Option<Answer>) {
        let Some(answer) = answer else {
            return;
        };
        if self.directory.gate.is_none() {
            let _ = answer.send(Err(Status::failed_precondition(format!(
                "replica {} is not a directory replica: it sequences nothing",
                self.node.id()
            ))));
            return;
        }
        if let Some(given) = self.node.mpo_indices(mpo) {
            // Sequenced before: its shards may not have heard (the replica
            // that sequenced it may have crashed before it told them).
            if let Some(link) = &self.mpo.link {
                link.tell_indices(mpo, &given);
            }
            let _ = answer.send(Ok(Reply::Indices(given)));
            return;
        }
        // The leader learns first that the sequencing committed; a
        // follower only with the leader's next message.
        let leader = self.node.cab().leader();
        if let Some(leader) = leader.filter(|l| *l != self.node.id()) {
            let _ = answer.send(Ok(Reply::Elsewhere(leader.0)));
            return;
        }
        let recent = self
            .mpo
            .invoked
            .get(&mpo)
            .is_some_and(|t| t.elapsed() < SEQUENCE_WAIT);
        if !recent {
            self.mpo.invoked.insert(mpo, Instant::now());
            // Nobody reads the views: the committed state says the indices.
            let (tx, _rx) = mpsc::unbounded_channel();
            self.invoke(Invocation {
                answer_after: creek_node::AnswerAfter::Execution,
                request: OpRequest::strong(sequence_call(mpo.origin, mpo.seq, &shards)),
                reply: ReplyTo::Stream(tx),
                received: Instant::now(),
                principal: None,
            });
        }
        self.mpo.sequencing.push((mpo, Instant::now(), answer));
    }

    /// A mover's op (`crate::mover`): run `call` as a strong op of this
    /// group and answer its final outcome, or [`Reply::Pending`] if it has
    /// none within [`RUN_WAIT`] (the mover asks again: its ops are safe to
    /// repeat).
    fn move_run(&mut self, call: ProcCall, answer: Option<Answer>) {
        let (Some(answer), Some(link)) = (answer, self.mpo.link.clone()) else {
            return;
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.invoke(Invocation {
            answer_after: creek_node::AnswerAfter::Execution,
            request: OpRequest::strong(call),
            reply: ReplyTo::Stream(tx),
            received: Instant::now(),
            principal: None,
        });
        link.runtime().spawn(async move {
            let outcome = tokio::time::timeout(RUN_WAIT, async move {
                while let Some(reply) = rx.recv().await {
                    match reply {
                        crate::node_loop::Reply::View(v) if v.kind.is_final() => {
                            return Ok(Reply::Outcome(v.outcome.map_err(|a| a.0)));
                        }
                        crate::node_loop::Reply::View(_) | crate::node_loop::Reply::Accepted(_) => {
                        }
                        crate::node_loop::Reply::Rejected(e) => {
                            return Err(Status::unavailable(e.to_string()))
                        }
                        crate::node_loop::Reply::Denied(d) => {
                            return Err(Status::permission_denied(d.to_string()))
                        }
                        crate::node_loop::Reply::Refused(s) => return Err(s),
                        crate::node_loop::Reply::Failed(why) => {
                            return Err(Status::unavailable(why))
                        }
                    }
                }
                Err(Status::unavailable("the op ended without a final view"))
            })
            .await;
            let _ = answer.send(outcome.unwrap_or(Ok(Reply::Pending)));
        });
    }

    /// After a turn: answer the sequencing requests whose op committed,
    /// and tell the shards of each MPO this replica sequenced their
    /// indices; drop requests that waited too long (their askers ask
    /// again).
    pub(super) fn mpo_answer_sequenced(&mut self) {
        if self.mpo.invoked.is_empty() && self.mpo.sequencing.is_empty() {
            return;
        }
        for (mpo, since, answer) in std::mem::take(&mut self.mpo.sequencing) {
            if let Some(given) = self.node.mpo_indices(mpo) {
                let _ = answer.send(Ok(Reply::Indices(given)));
            } else if since.elapsed() < SEQUENCE_WAIT && !answer.is_closed() {
                self.mpo.sequencing.push((mpo, since, answer));
            }
        }
        let node = &self.node;
        let link = self.mpo.link.as_ref();
        self.mpo
            .invoked
            .retain(|mpo, t| match node.mpo_indices(*mpo) {
                Some(given) => {
                    if let Some(link) = link {
                        link.tell_indices(*mpo, &given);
                    }
                    false
                }
                None => t.elapsed() < SEQUENCE_WAIT,
            });
    }

    /// Op `id` this replica took from a client is an MPO (`op_call`, a
    /// [`creek_procs::mpo::RUN`] call): it leaves once its write is
    /// durable.
    pub(super) fn mpo_invoked(&mut self, id: OpId, op_call: ProcCall) {
        if self.mpo.link.is_none() {
            return;
        }
        let Ok(call) = MpoCall::decode(&op_call.args) else {
            return;
        };
        let mpo = MpoId {
            origin: u64::from(id.origin.0),
            seq: id.seq,
        };
        self.mpo.fresh.push(Origin {
            call: MpoCall { id: mpo, ..call },
            op_call,
        });
    }

    /// After a turn's writes are handed out: this turn's MPOs leave now if
    /// their id is one a durable write reserved (a crash cannot give it to
    /// another op: [`creek_node::Node::seq_reserved`]), else once the turn's
    /// write is durable.
    pub(super) fn mpo_release(&mut self) {
        let Some(link) = self.mpo.link.clone() else {
            return;
        };
        let reserved = self.node.seq_reserved();
        let (now, later): (Vec<Origin>, Vec<Origin>) = std::mem::take(&mut self.mpo.fresh)
            .into_iter()
            .partition(|o| o.call.id.seq <= reserved);
        self.mpo.held.follow(self.node.written(), later);
        let durable = self.durability.durable();
        for origin in now.into_iter().chain(self.mpo.held.release(durable)) {
            link.originate(origin);
        }
        self.mpo_wake();
    }

    /// Have the persister's callback wake the loop when the write the
    /// first held MPO waits for is durable (beside the consensus writes
    /// the flush set it for).
    pub(super) fn mpo_wake(&self) {
        if let Some(first) = self.mpo.held.first() {
            let wake = &self.durability.wake_at;
            let now = wake.load(Ordering::Acquire);
            if now == 0 || first < now {
                wake.store(first, Ordering::Release);
            }
        }
    }

    /// Every tick: ask for what the committed order waits on, if it has
    /// waited a while ([`creek_node::Node::mpo_chase`]).
    pub(super) fn mpo_chase(&mut self) {
        let Some(link) = self.mpo.link.clone() else {
            return;
        };
        let now = self.now_us();
        for (mpo, chase) in self.node.mpo_chase(now) {
            tracing::debug!(%mpo, ?chase, "the committed order waits on an operation across shards: asking");
            link.chase(mpo, chase);
        }
    }
}
