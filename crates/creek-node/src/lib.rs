//! One Creek replica as a deterministic, sans-IO node: the replica protocol
//! (`creek-core`) wired to gossip (`creek-gossip`, the paper's RB) and to
//! conditional atomic broadcast (`creek-cab`). CAB accepts and proposes an id
//! once the replica holds its payloads (`Replica::holds_payloads`) and
//! delivers it once the core's `check_dep` holds.
//!
//! The server and the simulator drive the same [`Node`]: they hand it
//! invocations, peer messages and ticks, run the executions it hands out,
//! and carry its outgoing messages and views.
//!
//! # Durable drivers
//!
//! A node built with [`Node::recover`] (from what a data directory kept: a
//! checkpoint and op payloads, and CAB's storage) also tracks what must be
//! persisted: after each step the driver takes [`Node::take_new_payloads`],
//! the consensus-log writes from its storage ([`Node::storage_mut`]) and,
//! now and then, a [`Node::checkpoint`], persists them, and releases the
//! step's messages and views only once they are durable (`creek-store`
//! documents the rule). This crate does no I/O itself.
#![deny(missing_docs)]

pub mod testnet;

use std::sync::Arc;

use bytes::Bytes;
use creek_cab::{Cab, CabConfig, CabError, CabStats, CabStorage};
use creek_core::{
    Checkpoint, Config, Effect, ExecKey, InvokeError, Op, OpId, Replica, ReplicaId, Request, View,
};
use creek_exec::{Completion, Registry, Task};
use creek_gossip::{Gossip, GossipConfig, GossipStats};
use creek_wire::{GossipMessage, Limits, PeerMessage};

/// Configuration of a node.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The replica protocol.
    pub replica: Config,
    /// Gossip.
    pub gossip: GossipConfig,
    /// CAB.
    pub cab: CabConfig,
    /// Wire limits.
    pub wire: Limits,
}

impl NodeConfig {
    /// The parts agree on the replica, and the wire limits make sense (the
    /// rooms check their own settings when they start).
    pub fn validate(&self) -> Result<(), NodeError> {
        self.wire.validate()?;
        let me = self.replica.id;
        if self.gossip.me != me || self.cab.me != me {
            return Err(NodeError::Inconsistent(
                "replica, gossip and cab must name the same replica".into(),
            ));
        }
        Ok(())
    }

    /// Defaults for replica `me` of the group `replicas`.
    pub fn for_group(me: ReplicaId, replicas: &[ReplicaId]) -> Self {
        NodeConfig {
            replica: Config::for_replica(me),
            gossip: GossipConfig {
                me,
                peers: replicas.iter().copied().filter(|r| *r != me).collect(),
                ..GossipConfig::default()
            },
            cab: CabConfig::for_group(me, replicas),
            wire: Limits::default(),
        }
    }
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The replica configuration.
    #[error("replica: {0}")]
    Replica(#[from] creek_core::ConfigError),
    /// The gossip configuration.
    #[error("gossip: {0}")]
    Gossip(#[from] creek_gossip::ConfigError),
    /// CAB.
    #[error("cab: {0}")]
    Cab(#[from] CabError),
    /// The wire limits.
    #[error("wire limits: {0}")]
    Wire(#[from] creek_wire::LimitsError),
    /// The configurations disagree.
    #[error("inconsistent configuration: {0}")]
    Inconsistent(String),
}

/// One replica.
pub struct Node<S: CabStorage> {
    replica: Replica,
    gossip: Gossip,
    cab: Cab<S>,
    limits: Limits,
    /// How much of the committed list gossip has been told about.
    committed_told: usize,
    outbox: Vec<(ReplicaId, PeerMessage)>,
    views: Vec<View>,
    /// Frames refused by the decoder.
    refused_frames: u64,
    /// Ticks since the last adoption sweep.
    ticks_since_adoption: u64,
    /// Payloads newly accepted since the last `take_new_payloads`; tracked
    /// only for durable drivers (`recover`), so other drivers keep nothing.
    new_payloads: Option<Vec<Arc<Op>>>,
}

/// Every this many ticks, a replica CAB-casts the strong ops that are still
/// tentative here, whatever their origin: an origin that crashed (or lost
/// its volatile CAB state) before its id was decided would otherwise leave
/// the op tentative everywhere forever. CAB delivers an id at its first
/// occurrence only, so extra casts are harmless.
const ADOPTION_TICKS: u64 = 200;

impl<S: CabStorage> Node<S> {
    /// Start a node. `applied` is CAB's restart point (0 for a fresh node;
    /// see `Cab::delivered_through`).
    pub fn new(
        config: NodeConfig,
        registry: Arc<Registry>,
        storage: S,
        applied: u64,
    ) -> Result<Self, NodeError> {
        config.validate()?;
        Ok(Self::assemble(
            Replica::new(config.replica, registry)?,
            Gossip::new(config.gossip)?,
            Cab::new(config.cab, storage, applied)?,
            config.wire,
            None,
        ))
    }

    /// A node from its rooms; `committed_told` starts at what the replica
    /// already committed (gossip was told of it before).
    fn assemble(
        replica: Replica,
        gossip: Gossip,
        cab: Cab<S>,
        limits: Limits,
        new_payloads: Option<Vec<Arc<Op>>>,
    ) -> Self {
        Node {
            committed_told: replica.committed().len(),
            replica,
            gossip,
            cab,
            limits,
            outbox: Vec::new(),
            views: Vec::new(),
            refused_frames: 0,
            ticks_since_adoption: 0,
            new_payloads,
        }
    }

    /// Start a node from what a durable driver kept (DESIGN §8): the last
    /// checkpoint (`None` before the first, or for a fresh data directory),
    /// the op payloads kept beside it (`ops`, in any order) and CAB's
    /// storage, which holds the consensus log.
    ///
    /// The replica is restored (`Replica::restore`); gossip resumes its
    /// per-origin counters at what the replica holds (checkpoint ids ∪ kept
    /// payloads, own ops included, so own broadcast seqs continue) and holds
    /// the kept payloads again for peers; CAB restarts at the checkpoint's
    /// `cab_applied` (or 0), so every id decided after it is delivered again
    /// and re-commits, in the same order, what was committed after the
    /// checkpoint. Tentative strong ops are CAB-cast again, as after
    /// [`Node::restart`]. The node tracks new payloads for
    /// [`Node::take_new_payloads`].
    ///
    /// Refused: a storage created for another group (its raft voters differ
    /// from the configured replicas, raft id = replica id + 1), or a
    /// checkpoint past the stored consensus log.
    pub fn recover(
        config: NodeConfig,
        registry: Arc<Registry>,
        storage: S,
        checkpoint: Option<Checkpoint>,
        ops: Vec<Arc<Op>>,
    ) -> Result<Self, NodeError> {
        config.validate()?;
        let applied = checkpoint.as_ref().map_or(0, |c| c.cab_applied);
        check_storage(&config.cab, &storage, applied)?;
        // Everything the replica holds, per origin: the checkpoint's
        // committed ids and the kept payloads.
        let checkpointed = checkpoint
            .as_ref()
            .map(|c| c.causal_ctx.clone())
            .unwrap_or_default();
        let mut held_ids = checkpointed.clone();
        for op in &ops {
            held_ids.insert(op.id);
        }
        let covered: Vec<OpId> = ops
            .iter()
            .map(|op| op.id)
            .filter(|id| checkpointed.contains(*id))
            .collect();
        let delivered: Vec<(ReplicaId, u64)> = held_ids
            .to_records()
            .into_iter()
            .map(|(origin, counter, _)| (origin, counter))
            .collect();
        let mut gossip = Gossip::restore(config.gossip, delivered, ops.iter().cloned())?;
        // Kept payloads the checkpoint covers are committed already: peers
        // may still pull them until garbage collection drops them.
        gossip.committed(covered);
        let replica = Replica::restore(config.replica, registry, checkpoint, ops)?;
        let cab = Cab::new(config.cab, storage, applied)?;
        let mut node = Self::assemble(replica, gossip, cab, config.wire, Some(Vec::new()));
        node.adopt_tentative_strong_ops();
        Ok(node)
    }

    /// This replica.
    pub fn id(&self) -> ReplicaId {
        self.replica.id()
    }

    /// A client invocation.
    pub fn invoke(&mut self, request: Request, now_us: u64) -> Result<ExecKey, InvokeError> {
        let handle = self.replica.invoke(request, now_us)?;
        self.pump();
        Ok(handle)
    }

    /// A decoded message from a peer.
    pub fn on_message(&mut self, from: ReplicaId, msg: PeerMessage) {
        match msg {
            PeerMessage::Gossip(m) => {
                let mut delivered = Vec::new();
                let mut out = Vec::new();
                self.gossip.on_message(from, m, &mut delivered, &mut out);
                self.push_gossip(out);
                for op in delivered {
                    let accepted = self.replica.rb_deliver(op.clone());
                    if let (true, Some(new)) = (accepted, self.new_payloads.as_mut()) {
                        new.push(op);
                    }
                }
            }
            PeerMessage::Cab(m) => {
                let replica = &self.replica;
                self.cab
                    .on_message(from, m, &|id| replica.holds_payloads(id));
            }
        }
        self.pump();
    }

    /// A frame from a peer, as received: decoded (zero-copy) and handled; a
    /// malformed frame is counted and refused.
    pub fn on_frame(
        &mut self,
        from: ReplicaId,
        frame: &Bytes,
    ) -> Result<(), creek_wire::DecodeError> {
        match creek_wire::decode_bytes(frame, &self.limits) {
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
        self.replica.tick(now_us);
        let mut out = Vec::new();
        self.gossip.tick(&mut out);
        self.push_gossip(out);
        self.cab.tick();
        self.ticks_since_adoption += 1;
        if self.ticks_since_adoption >= ADOPTION_TICKS {
            self.ticks_since_adoption = 0;
            self.adopt_tentative_strong_ops();
        }
        self.pump();
    }

    /// CAB-cast every strong op still tentative here (see [`ADOPTION_TICKS`]).
    fn adopt_tentative_strong_ops(&mut self) {
        let orphans: Vec<OpId> = self
            .replica
            .tentative()
            .into_iter()
            .filter(|id| self.replica.op(*id).is_some_and(|op| op.strong))
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
        self.pump();
    }

    /// Run every ready execution now, one at a time.
    pub fn execute_all(&mut self) {
        while let Some(task) = self.next_execution() {
            let done = self.run(&task);
            self.complete(done);
        }
    }

    /// Messages to send, with their destinations.
    pub fn take_outbox(&mut self) -> Vec<(ReplicaId, PeerMessage)> {
        std::mem::take(&mut self.outbox)
    }

    /// Views for this replica's clients.
    pub fn take_views(&mut self) -> Vec<View> {
        std::mem::take(&mut self.views)
    }

    fn push_gossip(&mut self, out: Vec<(ReplicaId, GossipMessage)>) {
        self.outbox
            .extend(out.into_iter().map(|(to, m)| (to, PeerMessage::Gossip(m))));
    }

    /// Move work between the rooms until nothing changes.
    fn pump(&mut self) {
        for _ in 0..1000 {
            let mut progress = false;
            for effect in self.replica.take_effects() {
                progress = true;
                match effect {
                    Effect::RbCast(op) => {
                        if let Some(new) = self.new_payloads.as_mut() {
                            new.push(op.clone());
                        }
                        self.gossip.broadcast(op);
                    }
                    Effect::CabCast(id) => self.cab.cast(id),
                    Effect::View(v) => self.views.push(v),
                }
            }
            // Payloads go out before the consensus messages that name them,
            // so a follower finds an op's payload already there when the
            // append arrives (instead of holding the append and pulling).
            let mut gossip_out = Vec::new();
            self.gossip.flush(&mut gossip_out);
            self.push_gossip(gossip_out);
            let mut cab_out = Vec::new();
            let replica = &self.replica;
            self.cab
                .poll(&|id| replica.holds_payloads(id), &mut cab_out);
            self.outbox
                .extend(cab_out.into_iter().map(|(to, m)| (to, PeerMessage::Cab(m))));
            let deliverable = self.cab.take_deliverable(&|id| replica.check_dep(id));
            for id in deliverable {
                progress = true;
                self.replica.cab_deliver(id);
            }
            let committed = self.replica.committed();
            if committed.len() > self.committed_told {
                self.gossip
                    .committed(committed[self.committed_told..].iter().copied());
                self.committed_told = committed.len();
            }
            if !progress {
                break;
            }
        }
        self.pull_missing();
        let mut out = Vec::new();
        self.gossip.flush(&mut out);
        self.push_gossip(out);
    }

    /// Ask gossip for what CAB waits on: the strong op itself, or the ops of
    /// its causal context that have not arrived.
    fn pull_missing(&mut self) {
        let replica = &self.replica;
        let waiting = self
            .cab
            .waiting_for(&|id| replica.holds_payloads(id), &|id| {
                replica.check_dep(id)
            });
        if waiting.is_empty() {
            return;
        }
        let mut wanted: Vec<OpId> = Vec::new();
        for id in waiting {
            match self.replica.op(id) {
                None => wanted.push(id),
                // Context ops never here. Bounded: a hostile context may
                // name a huge range.
                Some(_) => wanted.extend(self.replica.missing_context(id).take(1024)),
            }
        }
        let mut out = Vec::new();
        self.gossip.pull(&wanted, &mut out);
        self.push_gossip(out);
    }

    /// The replica.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// CAB.
    pub fn cab(&self) -> &Cab<S> {
        &self.cab
    }

    /// CAB, mutably (a durable driver reaches its storage through it).
    pub fn cab_mut(&mut self) -> &mut Cab<S> {
        &mut self.cab
    }

    /// CAB's storage, mutably: a durable driver takes the consensus-log
    /// writes of each step from it.
    pub fn storage_mut(&mut self) -> &mut S {
        self.cab.store_mut()
    }

    /// The op payloads this replica newly accepted since the last call, in
    /// acceptance order: its own ops (as RB-cast) and remote ops gossip
    /// delivered that were new to the replica. A durable driver persists
    /// them before releasing any message or view that followed. Empty on
    /// nodes not built by [`Node::recover`], which track nothing.
    pub fn take_new_payloads(&mut self) -> Vec<Arc<Op>> {
        self.new_payloads
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
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
        Some(checkpoint)
    }

    /// The ids committed at global positions `from_len..committed_len()`
    /// (see `Replica::committed_len`): after a checkpoint at
    /// `checkpoint.committed_len`, `committed_since(previous_len)` lists the
    /// payloads it makes unnecessary for a restart. Positions before the
    /// checkpoint this node was recovered from are not known here (their
    /// payloads went with that checkpoint) and are skipped.
    pub fn committed_since(&self, from_len: u64) -> Vec<OpId> {
        let list = self.replica.committed();
        let base = self.replica.committed_len() - list.len() as u64;
        let skip = from_len.saturating_sub(base);
        let skip = usize::try_from(skip).map_or(list.len(), |s| s.min(list.len()));
        list.get(skip..).map(<[OpId]>::to_vec).unwrap_or_default()
    }

    /// Gossip counters.
    pub fn gossip_stats(&self) -> GossipStats {
        self.gossip.stats()
    }

    /// CAB counters.
    pub fn cab_stats(&self) -> CabStats {
        self.cab.stats()
    }

    /// Frames refused by the decoder.
    pub fn refused_frames(&self) -> u64 {
        self.refused_frames
    }

    /// Start a CAB election now.
    pub fn campaign(&mut self) {
        self.cab.campaign();
        self.pump();
    }

    /// CAB's restart point (persist it with the replica's state).
    pub fn cab_delivered_through(&self) -> u64 {
        self.cab.delivered_through()
    }

    /// Dismantle into the replica and gossip state, which a durable driver
    /// persists; CAB's storage is the caller's.
    pub fn into_parts(self) -> (Replica, Gossip) {
        (self.replica, self.gossip)
    }

    /// Rebuild a node after a restart: the replica and gossip state come back
    /// from where the driver kept them, CAB from its storage.
    pub fn restart(
        replica: Replica,
        gossip: Gossip,
        cab_config: CabConfig,
        storage: S,
        applied: u64,
        limits: Limits,
    ) -> Result<Self, NodeError> {
        let mut replica = replica;
        replica.abandon_running();
        let cab = Cab::new(cab_config, storage, applied)?;
        let mut node = Self::assemble(replica, gossip, cab, limits, None);
        // CAB's record of what this replica cast was volatile: cast again.
        node.adopt_tentative_strong_ops();
        Ok(node)
    }
}

/// CAB's storage must belong to the configured group and hold the log up to
/// the restart point (the library would abort otherwise).
fn check_storage<S: CabStorage>(
    config: &CabConfig,
    storage: &S,
    applied: u64,
) -> Result<(), NodeError> {
    let state = storage.initial_state().map_err(CabError::from)?;
    let mut stored = state.conf_state.voters.clone();
    stored.sort_unstable();
    // CAB's raft id of a replica is its id + 1 (raft reserves 0).
    let mut configured: Vec<u64> = config.replicas.iter().map(|r| u64::from(r.0) + 1).collect();
    configured.sort_unstable();
    if stored != configured {
        return Err(NodeError::Inconsistent(format!(
            "the CAB storage was created for raft voters {stored:?}, but the configured \
             replicas need {configured:?} (raft id = replica id + 1)"
        )));
    }
    let last = storage.last_index().map_err(CabError::from)?;
    let commit = state.hard_state.commit;
    if applied > commit || applied > last {
        return Err(NodeError::Inconsistent(format!(
            "the checkpoint was taken at consensus index {applied}, past the stored log \
             (commit {commit}, last index {last})"
        )));
    }
    Ok(())
}
