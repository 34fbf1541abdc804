//! The node's inputs and the turn that wires its rooms together: client
//! invocations, peer messages and frames, ticks and finished executions
//! come in; after each, [`Node::turn`] takes each room's output as one
//! value and hands it to the rooms that consume it (the replica's casts to
//! gossip and CAB, gossip's deliveries and CAB's decided ids to the
//! replica), and asks gossip for what CAB waits on.

use bytes::Bytes;
use creek_cab::{CabReady, CabStorage};
use creek_core::{Effect, ExecKey, InvokeError, OpId, ReplicaId, Request};
use creek_exec::{Completion, Task};
use creek_gossip::GossipOutput;
use creek_wire::{GossipMessage, PeerMessage};

use crate::{AnswerAfter, MpoMessage, Node, Standing};

/// Every this many ticks, a replica CAB-casts the strong ops that are still
/// tentative here, whatever their origin: an origin that crashed (or lost
/// its volatile CAB state) before its id was decided would otherwise leave
/// the op tentative everywhere forever. CAB delivers an id at its first
/// occurrence only, so extra casts are harmless.
const ADOPTION_TICKS: u64 = 200;

/// The most ids one turn asks gossip to pull.
pub(crate) const PULL_IDS_MAX: usize = 1024;

/// The most rounds one turn may take (see [`Node::turn`]'s assertion).
const TURN_ROUNDS_MAX: usize = 1000;

impl<S: CabStorage> Node<S> {
    /// A client invocation.
    pub fn invoke(&mut self, request: Request, now_us: u64) -> Result<ExecKey, InvokeError> {
        self.invoke_answering(request, AnswerAfter::Execution, now_us)
    }

    /// [`Node::invoke`], its preliminary view held until the op is
    /// durable as `after` says ([`AnswerAfter`]).
    pub fn invoke_answering(
        &mut self,
        request: Request,
        after: AnswerAfter,
        now_us: u64,
    ) -> Result<ExecKey, InvokeError> {
        match self.membership.standing() {
            Standing::Member => {}
            Standing::Joining { waiting_for } => {
                return Err(InvokeError::NotServing(format!(
                    "replica {} is joining its cluster: a new cluster forms once every \
                     initial member has started (waiting for replicas {waiting_for:?})",
                    self.id()
                )))
            }
            Standing::Lost { why } => return Err(InvokeError::NotServing(why)),
            Standing::Removed => {
                return Err(InvokeError::NotServing(format!(
                    "replica {} was removed from its cluster: ask a member",
                    self.id()
                )))
            }
        }
        if request.strong && self.membership.quorum_lost() {
            return Err(InvokeError::QuorumLostData(format!(
                "quorum lost data: replicas {:?} lost their data directories, a majority of \
                 the group, so no strong op can be ordered without risking acknowledged ones; \
                 weak ops still answer (docs/operations.md, \"Lost a disk\")",
                self.membership.lost_peers()
            )));
        }
        let d = &self.durability;
        let pending = d.written - d.durable;
        if d.pending_writes_max > 0 && pending >= d.pending_writes_max {
            return Err(InvokeError::DiskBehind(pending));
        }
        let max = d.strong_pending_max;
        if request.strong && max > 0 && self.cab.unconfirmed() >= max {
            return Err(InvokeError::StrongBacklog(self.cab.unconfirmed()));
        }
        // Only while a leader orders: cut off from it, weak ops are what
        // keeps working, bounded by the tentative list alone.
        let max = d.weak_pending_max;
        if !request.strong && max > 0 && self.cab.leader().is_some() {
            let waiting = self.replica.own_uncommitted();
            if waiting >= max {
                return Err(InvokeError::WeakBacklog(waiting));
            }
        }
        let handle = self.replica.invoke(request, now_us)?;
        self.answer_after.ask(handle, after);
        self.turn();
        Ok(handle)
    }

    /// A decoded message from a peer.
    pub fn on_message(&mut self, from: ReplicaId, msg: PeerMessage) {
        match msg {
            PeerMessage::Hello(h) => {
                let floor = (h.state == creek_wire::MemberState::Member).then_some(h.floor);
                if h.state == creek_wire::MemberState::Lost {
                    // What it acknowledged or reported holding is gone.
                    self.cab.forget_peer(from);
                    self.gossip.forget_peer(from);
                }
                let directory = h.directory.clone();
                let followed = self.membership.followed_group().map(|g| g.0);
                if self.membership.on_hello(from, h) {
                    // Just joined: consensus and gossip start from here.
                    self.adopt_tentative_strong_ops();
                }
                if self.membership.followed_group().map(|g| g.0) != followed {
                    self.follow_group(&directory);
                }
                if let Some(floor) = floor.filter(|f| *f > 0) {
                    if self.membership.accepts(from) {
                        // A peer rebuilt after it lost its data, or
                        // restarted after a crash: its ops up to the floor
                        // may come in any order, or never.
                        self.peer_floors.insert(from, floor);
                        self.open_peer_range(from, floor);
                    }
                }
            }
            PeerMessage::Gossip(
                m @ (GossipMessage::Digest { .. } | GossipMessage::Pull { .. }),
            ) if self.membership.hands_over_to(from) => {
                // Removed: a member's digest or pull is answered with the
                // ops it lacks of those this replica issued as a member
                // (their eager push may have been lost); nothing else of
                // the group's is taken any more.
                self.gossip.on_message(from, m);
                self.take_gossip_output();
                return;
            }
            PeerMessage::Gossip(_) | PeerMessage::Cab(_) if !self.membership.accepts(from) => {
                self.refused_non_members += 1;
                return;
            }
            PeerMessage::Gossip(m) => self.gossip.on_message(from, m),
            PeerMessage::Cab(m) => {
                let replica = &self.replica;
                self.cab
                    .on_message(from, m, &|id| replica.holds_payloads(id));
            }
            PeerMessage::Probe(p) => self.on_probe(from, p, None),
            PeerMessage::Snapshot(m) => self.on_snapshot(from, m),
            PeerMessage::Stable(s) => {
                if self.membership.accepts(from) {
                    self.on_stable(from, s);
                }
            }
        }
        self.turn();
    }

    /// A link probe or echo from `from`, with its receipt when the driver
    /// knows it (see [`Node::on_frame_at`]).
    fn on_probe(
        &mut self,
        from: ReplicaId,
        probe: creek_wire::Probe,
        at: Option<crate::timing::Receipt>,
    ) {
        if let Some(echo) = self.timing.on_probe(from, probe, at) {
            self.outbox.push((from, PeerMessage::Probe(echo)));
        }
        self.cab.set_tick_scale(self.timing.scale());
        self.gossip.set_tick_scale(self.timing.scale());
    }

    /// Let `peer`'s ops up to `floor` arrive in any order (a loose range).
    pub(crate) fn open_peer_range(&mut self, peer: ReplicaId, floor: u64) {
        let base = self.gossip.counter(peer);
        let replica = &self.replica;
        self.gossip
            .open_range(peer, base, floor, |id| replica.has_held(id));
        self.take_gossip_output();
    }

    /// A frame from a peer, as received: decoded (zero-copy) and handled; a
    /// malformed frame is counted and refused.
    pub fn on_frame(
        &mut self,
        from: ReplicaId,
        frame: &Bytes,
    ) -> Result<(), creek_wire::DecodeError> {
        self.take_frame(from, frame, None)
    }

    /// [`Node::on_frame`] for a frame the driver read whole at `received_us`
    /// and hands over only at `now_us` (the node's clock), after it waited
    /// in the driver's queue: a link probe's round trip is measured to its
    /// receipt, and an echo says how long the probe waited here, so
    /// neither end's queue counts as the network ([`crate::timing`]).
    pub fn on_frame_at(
        &mut self,
        from: ReplicaId,
        frame: &Bytes,
        received_us: u64,
        now_us: u64,
    ) -> Result<(), creek_wire::DecodeError> {
        let at = crate::timing::Receipt {
            received_us,
            handled_us: now_us,
        };
        self.take_frame(from, frame, Some(at))
    }

    fn take_frame(
        &mut self,
        from: ReplicaId,
        frame: &Bytes,
        at: Option<crate::timing::Receipt>,
    ) -> Result<(), creek_wire::DecodeError> {
        match creek_wire::decode_bytes(frame, &self.limits) {
            Ok(PeerMessage::Probe(p)) => {
                self.on_probe(from, p, at);
                self.turn();
                Ok(())
            }
            Ok(msg) => {
                self.on_message(from, msg);
                Ok(())
            }
            Err(e) => {
                self.refused_frames += 1;
                Err(e)
            }
        }
    }

    /// Advance time: the replica's stabilizer, gossip anti-entropy, CAB.
    pub fn tick(&mut self, now_us: u64) {
        self.answer_after.tick(now_us);
        self.membership.tick();
        self.transfers.tick(self.timing.scale());
        self.want_state();
        if !self.membership.is_member() {
            // Not a member yet (or lost): nothing runs but the handshake and
            // the link probes. A removed replica still gossips, so the ops
            // it issued while a member reach the group.
            for (to, probe) in self.timing.tick(now_us) {
                self.outbox.push((to, PeerMessage::Probe(probe)));
            }
            if self.membership.is_removed() {
                self.gossip.tick();
                self.take_gossip_output();
            }
            return;
        }
        self.replica.tick(now_us);
        self.stable_tick(now_us);
        self.replica.expire_sessions(now_us, self.cab.is_leader());
        self.replica.expire_leases(now_us, self.cab.is_leader());
        self.gossip.tick();
        self.reclaim_tick(now_us);
        self.void_forged(now_us);
        self.watch_held();
        self.pull_due = true;
        for (to, probe) in self.timing.tick(now_us) {
            self.outbox.push((to, PeerMessage::Probe(probe)));
        }
        self.cab.tick();
        // A commit-index-only log write waits at most a tick.
        self.durability.sync_lazy = true;
        self.durability.ticks_since_checkpoint += 1;
        self.ticks_since_adoption += 1;
        if self.ticks_since_adoption >= ADOPTION_TICKS {
            self.ticks_since_adoption = 0;
            self.adopt_tentative_strong_ops();
        }
        self.turn();
    }

    /// CAB-cast every strong op still tentative here (see [`ADOPTION_TICKS`]).
    pub(crate) fn adopt_tentative_strong_ops(&mut self) {
        let orphans: Vec<OpId> = self
            .replica
            .tentative()
            .into_iter()
            .filter(|id| {
                self.replica
                    .op(*id)
                    .is_some_and(|op| op.strong && self.replica.may_cast(op))
            })
            .collect();
        for id in orphans {
            self.cab.cast(id);
        }
    }

    /// The next execution to run, if any.
    pub fn next_execution(&mut self) -> Option<Task<ExecKey>> {
        self.replica.next_execution()
    }

    /// Run a task on its snapshot (shared borrow: many may run at once).
    pub fn run(&self, task: &Task<ExecKey>) -> Completion<ExecKey> {
        self.replica.run(task)
    }

    /// Hand a finished execution back.
    pub fn complete(&mut self, completion: Completion<ExecKey>) {
        self.replica.complete(completion);
        self.turn();
    }

    /// Run every ready execution now, one at a time.
    pub fn execute_all(&mut self) {
        while let Some(task) = self.next_execution() {
            let done = self.run(&task);
            self.complete(done);
        }
    }

    /// Start a CAB election now (a member only).
    pub fn campaign(&mut self) {
        if self.membership.is_member() {
            self.cab.campaign();
            self.turn();
        }
    }

    /// Hand CAB's leadership to the most up-to-date voter heard from
    /// lately, before a planned stop (see `Cab::hand_over`). Returns the
    /// voter asked, or `None` if this replica does not lead or has no one
    /// to ask.
    pub fn hand_over_leadership(&mut self) -> Option<ReplicaId> {
        let to = self.cab.hand_over();
        self.turn();
        to
    }

    /// One turn, after every input: each room's output is taken as one
    /// value and handed to the rooms that consume it, in the order the
    /// protocol needs (in the manner of raft-rs's `ready()` / `advance()`,
    /// see [`ready`](crate::ready)):
    ///
    /// 1. the replica's output — what the step's input made it do: casts to
    ///    gossip (`RB-cast`) and to CAB (`CAB-cast`), views, ops voided;
    /// 2. gossip's output — ops delivered to the replica (`RB-deliver`,
    ///    which also commits decided ids that waited for them), then its
    ///    messages: payloads leave before the consensus messages that name
    ///    them, so a follower finds an op's payload there when the append
    ///    arrives;
    /// 3. CAB's output — its messages; the ids it decided, handed to the
    ///    replica in decision order (`CAB-deliver`: the replica commits
    ///    each once `checkDep` holds, and the rest wait there), then CAB is
    ///    told how many wait; configuration changes applied;
    /// 4. the replica's output again — what those deliveries did: final
    ///    views, ops voided — and gossip is told what was committed;
    /// 5. gossip's output again: a void may let ops buffered behind it
    ///    through, and only then does the turn take another round (those
    ///    deliveries may commit decided ids and release held appends).
    ///
    /// Then it asks gossip for what CAB waits on, and serves what waited
    /// for this replica's state.
    pub(crate) fn turn(&mut self) {
        let mut rounds = 0;
        loop {
            rounds += 1;
            // Each round after the first runs only because gossip
            // delivered ops at the end of the one before, which the
            // replica holds from then on: a long run means ops that are
            // delivered again and again.
            assert!(rounds <= TURN_ROUNDS_MAX, "the turn did not settle");
            self.take_replica_output();
            self.take_gossip_output();
            self.take_cab_output();
            self.take_replica_output();
            self.tell_committed();
            if !self.take_gossip_output() {
                break;
            }
        }
        self.pull_missing();
        self.take_gossip_output();
        self.want_state();
        self.serve_deferred();
    }

    /// The replica's output: casts to gossip and CAB, views for clients,
    /// voided ops to gossip (and to the next write, which deletes their
    /// payloads).
    fn take_replica_output(&mut self) {
        for effect in self.replica.take_effects() {
            match effect {
                Effect::RbCast(op) => {
                    self.new_payloads.push(op.clone());
                    self.gossip.broadcast(op);
                }
                Effect::CabCast(id) => self.cab.cast(id),
                Effect::View(v) => self.answer_after.route(v, &mut self.views),
                Effect::Voided(id) => {
                    self.gossip.void(id);
                    self.voided.push(id);
                }
                other => {
                    if let Ok(m) = MpoMessage::of(other) {
                        self.mpo_out.push(m);
                    }
                }
            }
        }
    }

    /// Gossip's output: what it delivered to the replica (RB-deliver; the
    /// new payloads go into the next write); its messages into the
    /// outbox, or with the early ones when they claim nothing about this
    /// replica's disk: pulls, and payloads whose own ops a durable write
    /// reserved (another origin's op relayed is the receiver's to keep
    /// either way). Digests report what is held here, so they wait.
    /// Returns whether it delivered anything.
    pub(crate) fn take_gossip_output(&mut self) -> bool {
        let GossipOutput {
            delivered,
            messages,
            refused,
        } = self.gossip.take_output();
        self.on_own_origin_refusals(refused);
        let any = !delivered.is_empty();
        for op in delivered {
            if self.replica.rb_deliver(op.clone()) {
                self.new_payloads.push(op);
            }
        }
        let me = self.id();
        let reserved = self.durability.reserved_durable;
        for (to, m) in messages {
            let early = match &m {
                GossipMessage::Pull { .. } => true,
                GossipMessage::Ops(ops) => ops
                    .iter()
                    .all(|op| op.id.origin != me || op.id.seq <= reserved),
                GossipMessage::Digest { .. } => false,
            };
            let out = if early {
                &mut self.early
            } else {
                &mut self.outbox
            };
            out.push((to, PeerMessage::Gossip(m)));
        }
        any
    }

    /// CAB's output: its messages; the ids it decided, CAB-delivered to
    /// the replica in decision order (Algorithm 1, `CAB-deliver`), and CAB
    /// told how many still wait for `checkDep` there; the configuration
    /// changes applied.
    fn take_cab_output(&mut self) {
        let replica = &self.replica;
        let CabReady {
            early,
            messages,
            decided,
            conf_applied,
        } = self.cab.ready(&|id| replica.holds_payloads(id));
        self.early
            .extend(early.into_iter().map(|(to, m)| (to, PeerMessage::Cab(m))));
        self.outbox.extend(
            messages
                .into_iter()
                .map(|(to, m)| (to, PeerMessage::Cab(m))),
        );
        for id in decided {
            self.replica.cab_deliver(id);
        }
        self.cab.advance(self.replica.decided_waiting());
        self.apply_group_changes(conf_applied);
    }

    /// Tell gossip what the committed order gained (it stops offering
    /// committed ops to peers that have them).
    fn tell_committed(&mut self) {
        let len = self.replica.committed_len();
        if len > self.committed_told {
            let told = self.committed_since(self.committed_told);
            self.gossip.committed(told);
            self.committed_told = len;
        }
    }

    /// Ask gossip for what CAB waits on: the strong op itself, or the ops of
    /// its causal context that have not arrived.
    ///
    /// At most once per tick: gossip asks for an id again only every
    /// `pull_every_ticks` anyway, and finding what is missing walks the
    /// causal contexts of every waiting op. A turn runs for every message
    /// and every completed execution; a replica that restarted behind a gap
    /// (thousands of cast ids waiting on a few lost payloads) spent its
    /// whole node loop here (chaos seed 7, docs/reliability.md).
    fn pull_missing(&mut self) {
        if !std::mem::take(&mut self.pull_due) {
            return;
        }
        let replica = &self.replica;
        let waiting = self
            .cab
            .waiting_for(&|id| replica.holds_payloads(id), &|id| {
                replica.check_dep(id)
            });
        if waiting.is_empty() {
            return;
        }
        // Bounded in all, not per waiting id: a hostile context may name a
        // huge range, and many waiting ids may name the same missing ones.
        let wanted: Vec<OpId> = waiting
            .into_iter()
            .flat_map(|id| -> Box<dyn Iterator<Item = OpId> + '_> {
                match self.replica.op(id) {
                    None => Box::new(std::iter::once(id)),
                    // Context ops never here.
                    Some(_) => Box::new(self.replica.missing_context(id)),
                }
            })
            .take(PULL_IDS_MAX)
            .collect();
        self.gossip.pull(&wanted);
    }
}
