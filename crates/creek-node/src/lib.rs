//! One Creek replica as a deterministic, sans-IO node: the replica protocol
//! (`creek-core`) wired to gossip (`creek-gossip`, the paper's RB) and to
//! conditional atomic broadcast (`creek-cab`). CAB accepts and proposes an id
//! once the replica holds its payloads (`Replica::holds_payloads`) and
//! delivers it once the core's `check_dep` holds.
//!
//! The server and the simulator drive the same [`Node`]: they hand it
//! invocations, peer messages and ticks, run the executions it hands out,
//! and carry its outgoing messages and views.
#![deny(missing_docs)]

pub mod testnet;

use std::sync::Arc;

use bytes::Bytes;
use creek_cab::{Cab, CabConfig, CabError, CabStats, CabStorage};
use creek_core::{Config, Effect, ExecKey, InvokeError, OpId, Replica, ReplicaId, Request, View};
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
        let me = config.replica.id;
        config.wire.validate()?;
        if config.gossip.me != me || config.cab.me != me {
            return Err(NodeError::Inconsistent(
                "replica, gossip and cab must name the same replica".into(),
            ));
        }
        Ok(Node {
            replica: Replica::new(config.replica, registry)?,
            gossip: Gossip::new(config.gossip)?,
            cab: Cab::new(config.cab, storage, applied)?,
            limits: config.wire,
            committed_told: 0,
            outbox: Vec::new(),
            views: Vec::new(),
            refused_frames: 0,
            ticks_since_adoption: 0,
        })
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
                    self.replica.rb_deliver(op);
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
                    Effect::RbCast(op) => self.gossip.broadcast(op),
                    Effect::CabCast(id) => self.cab.cast(id),
                    Effect::View(v) => self.views.push(v),
                }
            }
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
                Some(op) => {
                    if let Some(ctx) = &op.causal_context {
                        // Context ops not here (a strong one may be here
                        // but not yet delivered: nothing to fetch). Bounded:
                        // a hostile context may name a huge range.
                        wanted.extend(
                            ctx.difference_iter(self.replica.causal_context())
                                .filter(|x| self.replica.op(*x).is_none())
                                .take(1024),
                        );
                    }
                }
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
        let committed_told = replica.committed().len();
        let mut replica = replica;
        replica.abandon_running();
        let mut node = Node {
            replica,
            gossip,
            cab: Cab::new(cab_config, storage, applied)?,
            limits,
            committed_told,
            outbox: Vec::new(),
            views: Vec::new(),
            refused_frames: 0,
            ticks_since_adoption: 0,
        };
        // CAB's record of what this replica cast was volatile: cast again.
        node.adopt_tentative_strong_ops();
        Ok(node)
    }
}
