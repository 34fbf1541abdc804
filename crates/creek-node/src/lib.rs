//! One Creek replica as a deterministic, sans-IO node: the replica protocol
//! (`creek-core`) wired to gossip (`creek-gossip`, the paper's RB) and to
//! conditional atomic broadcast (`creek-cab`). CAB accepts and proposes an id
//! once the replica holds its payloads (`Replica::holds_payloads`) and
//! delivers it once the core's `check_dep` holds.
//!
//! The server and the simulator drive the same [`Node`]: they hand it
//! invocations, peer messages and ticks, run the executions it hands out,
//! and then carry out its [`Ready`]: writes to persist, messages that may
//! leave now or once a write is durable, views for clients (the cycle and
//! the hold rule are in [`ready`]). Durability is an output of the node, so
//! a driver only does I/O; a simulated crash that loses what was not yet
//! durable and restarts through [`Node::recover`] tests exactly what
//! `creek serve` runs. This crate does no I/O itself.
#![deny(missing_docs)]

pub mod group;
pub mod membership;
pub mod ready;
pub mod timing;
pub mod transfer;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use creek_cab::{Cab, CabConfig, CabError, CabStats, CabStorage};
use creek_core::{
    Checkpoint, Config, Directory, Effect, ExecKey, InvokeError, Op, OpId, Replica, ReplicaId,
    Request, View,
};
use creek_exec::{Completion, Task};
use creek_gossip::{Gossip, GossipConfig, GossipStats};
use creek_procs::Registry;
use creek_wire::{GossipMessage, Limits, PeerMessage, SnapshotMessage};
use membership::Membership;
use transfer::{Fetched, Transfers};

pub use group::GroupError;
pub use membership::{Identity, Standing};
pub use ready::{CheckpointJob, HoldQueue, OwnSeqs, Ready, Write};
pub use timing::LinkTiming;
use timing::Timing;
pub use transfer::{FetchStatus, TransferDone, TransferJob, TransferStats};

/// Whether this build has the bug-planting switches (the `planted-bugs`
/// cargo feature, which also turns on those of creek-core and creek-cab).
/// Production builds do not; configurations that set a switch are refused.
pub const PLANTED_BUGS: bool = cfg!(feature = "planted-bugs");

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
    /// The interval at which the driver calls [`Node::tick`], microseconds
    /// (the link timing converts measured round trips into ticks).
    pub tick_us: u64,
    /// Every this many ticks after the previous checkpoint became durable, a
    /// checkpoint of the committed state is handed to the driver to write
    /// in the background (at the first clean point; see [`CheckpointJob`]);
    /// 0: never.
    pub checkpoint_every_ticks: u64,
    /// Client invocations are refused ([`InvokeError::DiskBehind`]) while
    /// this many writes handed out are not yet durable: a disk that falls
    /// behind pushes back on clients instead of letting the writes and the
    /// peer messages they hold grow without bound.
    pub pending_writes_max: u64,
    /// A replica that lost its data is rebuilt from the members left even
    /// when a majority of the group lost its data (they may lack ops only
    /// the lost replicas acknowledged, which are then gone for good). The
    /// operator's explicit choice after a majority loss; off by default.
    pub rebuild_despite_data_loss: bool,
    /// Planted bug (the simulator's `--plant-bug send-before-durable`): peer
    /// messages leave at once instead of waiting for their write. Only for
    /// validating the checkers; never set in production.
    pub planted_send_before_durable: bool,
    /// Planted bug (the simulator's `--plant-bug amnesiac-voter`): a replica
    /// told that it lost its data joins anyway, empty, as a voter. Only for
    /// validating the checkers; never set in production.
    pub planted_amnesiac_voter: bool,
    /// Planted bug (the simulator's `--plant-bug forget-sent-ops`): a
    /// restarted replica does not take back the own ops it sent before
    /// their write was durable, and issues their ids again. Only for
    /// validating the checkers; never set in production.
    pub planted_forget_sent_ops: bool,
}

impl NodeConfig {
    /// The parts agree on the replica, and the wire limits make sense (the
    /// rooms check their own settings when they start).
    pub fn validate(&self) -> Result<(), NodeError> {
        self.wire.validate()?;
        if self.tick_us == 0 || self.pending_writes_max == 0 {
            return Err(NodeError::Inconsistent(
                "tick_us and pending_writes_max must be positive".into(),
            ));
        }
        if (self.planted_send_before_durable
            || self.planted_amnesiac_voter
            || self.planted_forget_sent_ops)
            && !PLANTED_BUGS
        {
            return Err(NodeError::Inconsistent(creek_core::PLANTED_BUGS_OFF.into()));
        }
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
            tick_us: 10_000,
            checkpoint_every_ticks: 0,
            pending_writes_max: PENDING_WRITES_MAX,
            rebuild_despite_data_loss: false,
            planted_send_before_durable: false,
            planted_amnesiac_voter: false,
            planted_forget_sent_ops: false,
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
    /// How much of the committed order gossip has been told about (a
    /// global position, see `Replica::committed_len`).
    committed_told: u64,
    outbox: Vec<(ReplicaId, PeerMessage)>,
    /// Messages that may leave before this replica's pending writes are
    /// durable (see [`Ready::early`]).
    early: Vec<(ReplicaId, PeerMessage)>,
    views: Vec<View>,
    /// Frames refused by the decoder.
    refused_frames: u64,
    /// Ticks since the last adoption sweep.
    ticks_since_adoption: u64,
    /// Payloads newly accepted since the last write.
    new_payloads: Vec<Arc<Op>>,
    /// Ops the committed order voided since the last write: their payloads,
    /// if stored, are deleted with it (no replica needs them any more).
    voided: Vec<OpId>,
    durability: Durability,
    timing: Timing,
    membership: Membership,
    /// Committed payloads a checkpoint covers but kept on disk because some
    /// peer has not reported holding them (a peer that was down must still
    /// get them by gossip, also after this replica restarts); deleted by a
    /// later checkpoint once every peer has them (or past
    /// [`RETAINED_MAX`]).
    retained: BTreeSet<OpId>,
    /// Consensus and gossip frames dropped because their sender is not a
    /// member of this cluster in good standing (or this replica is not one).
    refused_non_members: u64,
    /// State transfer (see [`transfer`]).
    transfers: Transfers,
    /// A checkpoint installed from a peer, for the next write (with the log
    /// writes that compact the log to it, so a restart finds both or
    /// neither).
    installed: Option<Checkpoint>,
    /// The last own seq of a previous life that may have reached peers
    /// without reaching this replica's disk — after a rebuild, every seq
    /// issued before the data was lost; after a crash, every seq the
    /// reservation covered (see [`RESERVE_AHEAD`]) — told to peers in
    /// hellos (0: none).
    own_floor: u64,
    /// Ticks left to take back own ops up to `own_floor` before the rest
    /// counts as lost (see [`RECLAIM_TICKS`]).
    reclaim_ticks: u64,
    /// Rebuilt after losing its data: the last own seq from before, all of
    /// whose ops it takes back (0 otherwise).
    rebuilt_floor: u64,
    /// Rebuilt in this run: the highest own seq a peer held then. The ops
    /// above it that this replica issued before were lost with its data.
    rebuilt_held: Option<u64>,
    /// The floor each peer last said hello with (see [`Node::own_floor`]):
    /// its loose range is opened again when an installed checkpoint
    /// replaces the gossip state, which holds loose ranges in memory only.
    peer_floors: BTreeMap<ReplicaId, u64>,
    /// The log index this replica waits on for payloads (see
    /// [`Node::watch_held`]), and for how many ticks it has.
    held_wait: Option<(u64, u64)>,
    /// After a crash: the own seqs being taken back, recorded on disk until
    /// the committed order settles them (see [`OwnSeqs::reclaiming`]).
    reclaiming: Option<(u64, u64)>,
    /// A tick passed since the last [`Node::pull_missing`].
    pull_due: bool,
    /// The group's initial members (the configuration's).
    initial_group: Vec<ReplicaId>,
    /// Addresses of members added since the group formed (see [`group`]).
    directory: Directory,
    /// The directory changed: written with the next write.
    directory_changed: bool,
    /// The group changed: the driver is told in the next [`Ready`].
    group_changed: bool,
}

/// What a durable driver kept beside CAB's storage, for [`Node::recover`].
#[derive(Clone, Debug, Default)]
pub struct Kept {
    /// The last checkpoint written, if any.
    pub checkpoint: Option<Checkpoint>,
    /// The op payloads kept (not deleted by a checkpoint), in any order.
    pub ops: Vec<Arc<Op>>,
    /// The replica's identity in its cluster (`None`: a new data directory,
    /// or one written before identities).
    pub identity: Option<Identity>,
    /// The group directory: addresses of members added since the group
    /// formed (see [`group`]).
    pub directory: Directory,
    /// The replica's record of its own seqs (see [`Write::own_seqs`]).
    pub own_seqs: OwnSeqs,
}

/// What the node knows of its writes.
#[derive(Default)]
struct Durability {
    /// The last write handed out.
    written: u64,
    /// The last write reported durable (`<= written`).
    durable: u64,
    /// A write failed: nothing more leaves, nothing is written.
    failed: Option<String>,
    /// Take even a lazy (commit-index-only) log write at the next `ready`.
    sync_lazy: bool,
    /// Shutting down cleanly (see [`Node::sync_pending_writes`]).
    closing: bool,
    checkpoint_every_ticks: u64,
    /// Refuse client invocations at this many pending writes (0: never).
    pending_writes_max: u64,
    ticks_since_checkpoint: u64,
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
    own_seqs: OwnSeqs,
    reserved_durable: u64,
    forget_sent_ops: bool,
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
/// those no peer gave back ([`Node::reclaim_own_ops`]). No id is ever
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

/// Every this many ticks, a replica CAB-casts the strong ops that are still
/// tentative here, whatever their origin: an origin that crashed (or lost
/// its volatile CAB state) before its id was decided would otherwise leave
/// the op tentative everywhere forever. CAB delivers an id at its first
/// occurrence only, so extra casts are harmless.
const ADOPTION_TICKS: u64 = 200;

/// The most ids one pump asks gossip to pull.
const PULL_IDS_MAX: usize = 1024;

/// The most committed payloads a checkpoint keeps on disk for peers that
/// have not reported holding them (a peer down longer than this many ops
/// behind cannot catch up by gossip and needs state transfer).
const RETAINED_MAX: usize = 200_000;

/// The default [`NodeConfig::pending_writes_max`]. A healthy disk keeps a
/// few writes pending (group commit takes all queued writes in one fsync);
/// this many means it is far behind.
pub const PENDING_WRITES_MAX: u64 = 1024;

/// A replica rebuilt after it lost its data pulls its own earlier ops from
/// its peers for this many ticks; whatever has not come by then was lost
/// with its data (its digests then report them held, so peers collect the
/// ops above them). Late arrivals are still taken.
const RECLAIM_TICKS: u64 = 500;

/// Committed ids a checkpoint covers that the replica still lists (for
/// observers reading the committed order, such as `Admin.Committed`): a
/// reader a little behind does not find them gone. About 40 bytes each.
const COMMITTED_TAIL: u64 = 65_536;

/// A member that has waited this many ticks on one log index for payloads
/// (its first undelivered decided id, or its first held append) fetches a
/// checkpoint that covers it (see [`Node::held_too_long`]).
const HELD_FETCH_TICKS: u64 = 500;

/// The most rounds one pump may take (see [`Node::pump`]'s assertion).
const PUMP_ROUNDS_MAX: usize = 1000;

impl Durability {
    fn new(config: &NodeConfig, checkpointed_len: u64) -> Self {
        Durability {
            checkpoint_every_ticks: config.checkpoint_every_ticks,
            pending_writes_max: config.pending_writes_max,
            checkpointed_len,
            send_before_durable: PLANTED_BUGS && config.planted_send_before_durable,
            forget_sent_ops: PLANTED_BUGS && config.planted_forget_sent_ops,
            ..Durability::default()
        }
    }
}

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
        let durability = Durability::new(&config, 0);
        let timing = Timing::for_config(&config);
        let membership = membership_of(&config, Identity::founding(&config.cab.replicas), false);
        let mut node = Self::assemble(
            Replica::new(config.replica, registry)?,
            Gossip::new(config.gossip)?,
            Cab::new(config.cab, storage, applied)?,
            config.wire,
            durability,
            timing,
            membership,
        );
        node.aim_at_group();
        Ok(node)
    }

    /// A node from its rooms; `committed_told` starts at what the replica
    /// already committed (gossip was told of it before).
    fn assemble(
        replica: Replica,
        gossip: Gossip,
        cab: Cab<S>,
        limits: Limits,
        durability: Durability,
        timing: Timing,
        membership: Membership,
    ) -> Self {
        let me = replica.id();
        let peers = gossip.config().peers.clone();
        let initial_group = peers.iter().copied().chain([me]).collect();
        Node {
            initial_group,
            directory: Directory::default(),
            directory_changed: false,
            group_changed: false,
            transfers: Transfers::new(me, peers),
            installed: None,
            own_floor: 0,
            reclaim_ticks: 0,
            held_wait: None,
            pull_due: true,
            rebuilt_floor: 0,
            rebuilt_held: None,
            peer_floors: BTreeMap::new(),
            reclaiming: None,
            committed_told: replica.committed_len(),
            replica,
            gossip,
            cab,
            limits,
            outbox: Vec::new(),
            early: Vec::new(),
            views: Vec::new(),
            refused_frames: 0,
            ticks_since_adoption: 0,
            new_payloads: Vec::new(),
            voided: Vec::new(),
            durability,
            timing,
            membership,
            retained: BTreeSet::new(),
            refused_non_members: 0,
        }
    }

    /// Start a node from what a durable driver kept (DESIGN §8, [`Kept`]):
    /// the last checkpoint (`None` before the first, or for a fresh data
    /// directory), the op payloads kept beside it (`ops`, in any order) and
    /// CAB's storage, which holds the consensus log.
    ///
    /// The replica is restored (`Replica::restore`); gossip resumes its
    /// per-origin counters at what the replica holds (checkpoint ids ∪ kept
    /// payloads, own ops included, so own broadcast seqs continue) and holds
    /// the kept payloads again for peers; CAB restarts at the checkpoint's
    /// `cab_applied` (or 0), so every id decided after it is delivered again
    /// and re-commits, in the same order, what was committed after the
    /// checkpoint. Tentative strong ops are CAB-cast again, as after
    /// [`Node::restart`]. Writes are numbered from 1 again.
    ///
    /// `identity` is the stored one (`None` for a new data directory, which
    /// takes `fresh_nonce` and joins its cluster: see [`membership`]; a
    /// directory that holds data but no identity predates identities and
    /// stays a member). `directory` is the stored group directory (see
    /// [`group`]); the group itself is CAB's stored configuration.
    ///
    /// Refused: a storage created for another group (its raft voters differ
    /// from the configured replicas, raft id = replica id + 1, while the
    /// group never changed), or a checkpoint past the stored consensus log.
    pub fn recover(
        config: NodeConfig,
        registry: Arc<Registry>,
        storage: S,
        kept: Kept,
        fresh_nonce: u64,
    ) -> Result<Self, NodeError> {
        config.validate()?;
        let Kept {
            checkpoint,
            ops,
            identity,
            directory,
            own_seqs,
        } = kept;
        let applied = checkpoint.as_ref().map_or(0, |c| c.cab_applied);
        check_storage(&config.cab, &storage, applied)?;
        let (identity, dirty) = match identity {
            Some(stored) => (stored, false),
            None if holds_data(&storage, checkpoint.is_some() || !ops.is_empty())? => (
                Identity {
                    nonce: fresh_nonce,
                    founders: Some(Vec::new()),
                    floor: 0,
                    catch_up_to: 0,
                },
                true,
            ),
            None => (Identity::joining(fresh_nonce), true),
        };
        let membership = membership_of(&config, identity, dirty);
        let checkpointed_len = checkpoint.as_ref().map_or(0, |c| c.committed_len);
        let durability = Durability::new(&config, checkpointed_len);
        let timing = Timing::for_config(&config);
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
        let mut gossip =
            Gossip::restore(config.gossip, held_ids.to_records(), ops.iter().cloned())?;
        // Kept payloads the checkpoint covers are committed already: peers
        // may still pull them until garbage collection drops them, and the
        // next checkpoint deletes them once every peer has them.
        gossip.committed(covered.iter().copied());
        let replica = Replica::restore(config.replica, registry, checkpoint, ops)?;
        let cab = Cab::new(config.cab, storage, applied)?;
        let mut node = Self::assemble(
            replica,
            gossip,
            cab,
            config.wire,
            durability,
            timing,
            membership,
        );
        node.retained = covered.into_iter().collect();
        node.directory = directory;
        node.aim_at_group();
        node.rebuilt_floor = node.membership.identity().floor;
        node.own_floor = node.rebuilt_floor.max(own_seqs.floor);
        // Own ops up to the reservation may have reached peers and not this
        // disk: taken back, never issued again (see [`RESERVE_AHEAD`]).
        node.durability.own_seqs = own_seqs;
        node.durability.reserved_durable = own_seqs.reserved;
        let issued = node.replica.last_issued_seq();
        let mut reclaim = own_seqs.reclaiming;
        if own_seqs.reserved > issued {
            reclaim = Some(match reclaim {
                Some((after, through)) => (after.min(issued), through.max(own_seqs.reserved)),
                None => (issued, own_seqs.reserved),
            });
        }
        if node.durability.forget_sent_ops {
            reclaim = None;
        }
        if let Some((after, through)) = reclaim {
            node.own_floor = node.own_floor.max(through);
            node.reclaiming = Some((after, through));
        }
        node.cab.catch_up_to(node.membership.identity().catch_up_to);
        node.reclaim_own_ops();
        node.adopt_tentative_strong_ops();
        Ok(node)
    }

    /// This replica.
    pub fn id(&self) -> ReplicaId {
        self.replica.id()
    }

    /// A client invocation.
    pub fn invoke(&mut self, request: Request, now_us: u64) -> Result<ExecKey, InvokeError> {
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
        let handle = self.replica.invoke(request, now_us)?;
        self.pump();
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
            PeerMessage::Gossip(_) | PeerMessage::Cab(_) if !self.membership.accepts(from) => {
                self.refused_non_members += 1;
                return;
            }
            PeerMessage::Gossip(m) => {
                self.gossip.on_message(from, m);
                self.deliver_gossip();
            }
            PeerMessage::Cab(m) => {
                let replica = &self.replica;
                self.cab
                    .on_message(from, m, &|id| replica.holds_payloads(id));
            }
            PeerMessage::Probe(p) => {
                if let Some(echo) = self.timing.on_probe(from, p) {
                    self.outbox.push((from, PeerMessage::Probe(echo)));
                }
                self.cab.set_tick_scale(self.timing.scale());
                self.gossip.set_tick_scale(self.timing.scale());
            }
            PeerMessage::Snapshot(m) => self.on_snapshot(from, m),
        }
        self.pump();
    }

    /// Let `peer`'s ops up to `floor` arrive in any order (a loose range).
    fn open_peer_range(&mut self, peer: ReplicaId, floor: u64) {
        let base = self.gossip.counter(peer);
        let replica = &self.replica;
        self.gossip
            .open_range(peer, base, floor, |id| replica.has_held(id));
        self.deliver_gossip();
    }

    /// Hand what gossip delivered to the replica (RB-deliver).
    fn deliver_gossip(&mut self) {
        for op in self.gossip.take_delivered() {
            if self.replica.rb_deliver(op.clone()) {
                self.new_payloads.push(op);
            }
        }
    }

    /// State transfer (see [`transfer`]): members serve checkpoints to any
    /// peer of the cluster (a lost one included); a chunk that completes a
    /// fetch is installed.
    fn on_snapshot(&mut self, from: ReplicaId, m: SnapshotMessage) {
        if self.membership.foreign_peers().contains(&from) {
            self.refused_non_members += 1;
            return;
        }
        match m {
            SnapshotMessage::Fetch {
                transfer,
                min_index,
                offset,
            } => {
                if !self.membership.is_member() {
                    return;
                }
                let current = self.cab.delivered_through();
                let group = self.group();
                let (replica, cab) = (&self.replica, &self.cab);
                self.transfers
                    .on_fetch(from, transfer, min_index, offset, current, || {
                        serving_checkpoint(replica, cab, group)
                    });
            }
            SnapshotMessage::Chunk(c) => self.transfers.on_chunk(from, c),
            SnapshotMessage::Refused { transfer, retry } => {
                self.transfers.on_refused(from, transfer, retry);
            }
        }
    }

    /// Serve the fetches a member refused for want of a checkpoint, once it
    /// is at a clean point (a busy one seldom is when a fetch arrives).
    fn serve_deferred(&mut self) {
        if !self.transfers.has_deferred() || !self.membership.is_member() {
            return;
        }
        let current = self.cab.delivered_through();
        let group = self.group();
        let (replica, cab) = (&self.replica, &self.cab);
        self.transfers
            .serve_deferred(current, || serving_checkpoint(replica, cab, group));
    }

    /// Start (or keep up) the fetch this replica needs: a lagging member
    /// the checkpoint CAB's held snapshot asks for; a lost replica, once
    /// every peer answered it, any member's.
    fn want_state(&mut self) {
        match self.membership.standing() {
            Standing::Member => match self.cab.wanted_snapshot().or(self.held_too_long()) {
                Some((from, index)) => self.transfers.fetch(from, index),
                None => self.transfers.cancel_fetch(),
            },
            Standing::Lost { .. } => {
                if let Some(source) = self.membership.rebuild_marks().map(|m| m.source) {
                    // Index 1 at least: a cluster that committed nothing has
                    // nothing to rebuild from yet.
                    self.transfers.fetch(source, 1);
                }
            }
            Standing::Joining { .. } | Standing::Removed => {}
        }
    }

    /// The first held append has waited [`HELD_FETCH_TICKS`] for payloads:
    /// the peer to fetch a checkpoint from (the leader), and the index it
    /// must cover. The ops it waits on may be gone from every peer: a
    /// payload is collected once it is committed at its holder and every
    /// peer reported holding it, and a peer may have reported it just
    /// before it crashed or lost its data (a report is forgotten only once
    /// the peer says it lost its data, which it may say too briefly to be
    /// heard). Committed ops travel in checkpoints instead.
    ///
    /// Without a known leader, the sender of the held append: a replica
    /// waiting on payloads no peer has is pushed the ops after the gap by
    /// every anti-entropy round, and that flood can delay the leader's
    /// heartbeats past the election timeout, so it may keep campaigning
    /// without ever learning the leader (chaos seed 7, docs/reliability.md).
    fn held_too_long(&self) -> Option<(ReplicaId, u64)> {
        let (index, ticks) = self.held_wait?;
        let source = self
            .cab
            .leader()
            .or_else(|| self.cab.held_sender())
            .filter(|l| *l != self.id())?;
        (ticks >= HELD_FETCH_TICKS).then_some((source, index))
    }

    /// Count the ticks this replica waits for payloads on the same log
    /// index: the first decided id not delivered for want of its payload or
    /// causal context, or else CAB's first held append. Both can wait on ops
    /// no peer keeps any more; a held queue also empties and refills as
    /// appends are retried, so the first decided id is watched first.
    fn watch_held(&mut self) {
        let waits_on = self.cab.decided_from().or(self.cab.held_from());
        self.held_wait = match (self.held_wait, waits_on) {
            (Some((at, ticks)), Some(index)) if at == index => Some((at, ticks + 1)),
            (_, index) => index.map(|i| (i, 0)),
        };
    }

    /// A verified checkpoint from a peer: a lagging member installs it if
    /// it still covers what CAB's held snapshot needs; a lost replica is
    /// rebuilt from it.
    fn install(&mut self, fetched: Fetched) {
        let Fetched {
            from,
            mut checkpoint,
            term,
        } = fetched;
        let own = self.id();
        let own_high = checkpoint
            .causal_ctx
            .to_runs()
            .into_iter()
            .find(|(origin, _, _)| *origin == own)
            .map_or(0, |(_, counter, runs)| runs.last().map_or(counter, |r| r.1));
        match self.membership.standing() {
            Standing::Member => {
                let Some((_, wanted)) = self.cab.wanted_snapshot() else {
                    self.install_past_held(checkpoint, own_high);
                    return;
                };
                if checkpoint.cab_applied < wanted
                    || checkpoint.committed_len < self.replica.committed_len()
                {
                    self.transfers.fetch(from, wanted);
                    return;
                }
                // The log restarts at the snapshot's index: entries between
                // it and the checkpoint's are delivered again, and their ids
                // ignored as committed. The state is replaced only if the
                // log is (a state ahead of the log could never restart).
                if !self.cab.install_snapshot() {
                    return;
                }
                checkpoint.cab_applied = wanted;
                let next = own_high.max(self.replica.last_issued_seq()) + 1;
                let group = std::mem::take(&mut checkpoint.group);
                self.replace_state(checkpoint, next);
                self.install_group(&group);
            }
            Standing::Lost { .. } => {
                let Some(marks) = self.membership.rebuild_marks() else {
                    return;
                };
                let index = checkpoint.cab_applied;
                let conf = if checkpoint.group.is_unknown() {
                    self.cab.store().conf()
                } else {
                    group::conf_of(&checkpoint.group)
                };
                // Taken before this replica was added (or not taken by the
                // library): a newer one will name it. The log restarts at
                // the checkpoint before the state is replaced by it.
                if !self.cab.restore_lost(from, index, term, marks.term, conf) {
                    self.transfers.fetch(from, index + 1);
                    return;
                }
                // Past what peers hold, past what they heard this replica
                // reserve before it lost its data (the ops a client saw but
                // no peer received were lost with it: their ids are not
                // issued again), and past the seqs it reserved itself since
                // (a restart while lost takes a reservation like any other).
                let held = own_high.max(marks.own_seq);
                let next = held.max(marks.own_reserved).max(self.own_floor) + 1;
                self.rebuilt_held = Some(held);
                self.own_floor = next - 1;
                self.rebuilt_floor = next - 1;
                let group = std::mem::take(&mut checkpoint.group);
                self.replace_state(checkpoint, next);
                self.install_group(&group);
                // Entries a peer holds past the checkpoint may be committed
                // with the lost data's acknowledgements: until this replica
                // holds them, it must not help a shorter log win.
                self.cab.catch_up_to(marks.last_index);
                self.membership.rebuilt(self.own_floor, marks.last_index);
            }
            Standing::Joining { .. } | Standing::Removed => {}
        }
    }

    /// A member whose held append waited too long (see
    /// [`Node::held_too_long`]) takes `checkpoint` if it covers the held
    /// index and is ahead of this replica. The log stays as it is: the
    /// entries up to the checkpoint's index are delivered again, their ids
    /// ignored as committed (so the checkpoint is written as covering only
    /// what CAB delivered here, with the group as applied here, and a
    /// restart redelivers the rest the same way). The group changes in
    /// those entries apply as they come.
    fn install_past_held(&mut self, mut checkpoint: Checkpoint, own_high: u64) {
        let Some((_, index)) = self.held_too_long() else {
            return;
        };
        if checkpoint.cab_applied < index
            || checkpoint.committed_len <= self.replica.committed_len()
        {
            return;
        }
        checkpoint.cab_applied = self.cab.delivered_through();
        checkpoint.group = self.group();
        let next = own_high.max(self.replica.last_issued_seq()) + 1;
        self.replace_state(checkpoint, next);
        self.transfers.installed_past_held();
        self.held_wait = None;
        self.transfers.cancel_fetch();
    }

    /// A replica rebuilt after it lost its data, or restarted after a crash
    /// took back ops it had sent (see [`RESERVE_AHEAD`]), takes back its own
    /// ops up to [`Node::own_floor`] from its peers, in any order; those no
    /// peer kept were lost with its disk.
    fn reclaim_own_ops(&mut self) {
        let rebuilt = (self.rebuilt_floor > 0).then_some((0, self.rebuilt_floor));
        let range = match (self.reclaiming, rebuilt) {
            (Some((a, t)), Some((b, u))) => Some((a.min(b), t.max(u))),
            (r, b) => r.or(b),
        };
        if let Some((after, through)) = range {
            let own = self.id();
            let replica = &self.replica;
            self.gossip
                .open_range(own, after, through, |id| replica.has_held(id));
            self.replica.reclaim_own(through);
            self.deliver_gossip();
            self.reclaim_ticks = RECLAIM_TICKS;
        }
    }

    /// Pull own ops not taken back yet; when time is up, close the range
    /// and have the committed order void those no peer gave back (later own
    /// ops that reached peers may name them in their contexts).
    fn reclaim_tick(&mut self, now_us: u64) {
        if self.reclaim_ticks == 0 {
            return;
        }
        self.reclaim_ticks -= 1;
        let own = self.id();
        if self.reclaim_ticks > 0 {
            let missing = self.gossip.loose_missing(own, PULL_IDS_MAX);
            if !missing.is_empty() {
                self.gossip.pull(&missing);
                return;
            }
        }
        self.reclaim_ticks = 0;
        let lost: Vec<u64> = self
            .gossip
            .loose_missing(own, usize::MAX)
            .into_iter()
            .map(|id| id.seq)
            .collect();
        self.gossip.close_range(own);
        for seqs in lost.chunks(creek_procs::void::VOID_BATCH_MAX) {
            self.replica.void_own(seqs, now_us);
        }
        // Settled: the void ops are written with the record that says so.
        self.reclaiming = None;
        self.pump();
    }

    /// Replace the replica and gossip state with `checkpoint`'s, keeping the
    /// ops held here that it does not cover (tentative ones, own ones among
    /// them), with own seqs resuming at `next_event_no`. Waiting clients
    /// lose their views (their ops stay, and commit, like a crashed
    /// replica's). The checkpoint goes into the next write.
    fn replace_state(&mut self, mut checkpoint: Checkpoint, next_event_no: u64) {
        let kept: Vec<Arc<Op>> = self
            .replica
            .tentative()
            .into_iter()
            .filter(|id| !checkpoint.causal_ctx.contains(*id))
            .filter_map(|id| self.replica.op(id).cloned())
            .collect();
        checkpoint.next_event_no = next_event_no;
        let own = self.id();
        let mut held_ids = checkpoint.causal_ctx.clone();
        for op in &kept {
            held_ids.insert(op.id);
        }
        // Ids the checkpoint committed past a gap (after ids voided, or not
        // received, where it was taken) are held too: delivery goes past
        // them once the gap is voided or opened.
        let delivered = held_ids.to_records().into_iter().chain(std::iter::once((
            own,
            next_event_no - 1,
            Vec::new(),
        )));
        let config = self.replica.config().clone();
        let registry = self.replica.registry().clone();
        let rebuilt = Gossip::restore(self.gossip.config().clone(), delivered, kept.clone())
            .map_err(|e| e.to_string())
            .and_then(|g| {
                Replica::restore(config, registry, Some(checkpoint.clone()), kept)
                    .map(|r| (r, g))
                    .map_err(|e| e.to_string())
            });
        match rebuilt {
            Ok((replica, gossip)) => {
                // A watcher of changes goes on watching the rebuilt replica
                // (it sees the jump in positions: the checkpoint's ops were
                // never executed here).
                let (committed, tentative) = self.replica.recording();
                self.replica = replica;
                self.replica.record_changes(committed, tentative);
                self.gossip = gossip;
                self.committed_told = self.replica.committed_len();
                self.installed = Some(checkpoint);
                self.reclaim_own_ops();
                for (peer, floor) in self.peer_floors.clone() {
                    if self.membership.accepts(peer) {
                        self.open_peer_range(peer, floor);
                    }
                }
            }
            // The configurations were accepted when the node started.
            Err(e) => self.on_disk_failure(format!("installing a checkpoint: {e}")),
        }
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
                self.take_gossip_messages();
            }
            return;
        }
        self.replica.tick(now_us);
        self.replica.expire_sessions(now_us, self.cab.is_leader());
        self.gossip.tick();
        self.reclaim_tick(now_us);
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

    /// Everything the driver must do now (see [`ready`]): the step's write,
    /// the messages that may leave now or once a write is durable, and the
    /// views. Call after every step; what is not taken accumulates.
    pub fn ready(&mut self) -> Ready {
        let views = std::mem::take(&mut self.views);
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
                ..Ready::default()
            };
        }
        if !self.early_allowed() {
            out.append(&mut early);
        }
        let (write, checkpoint) = self.take_write();
        let group = std::mem::take(&mut self.group_changed).then(|| self.group());
        let d = &self.durability;
        let (mut messages, held) = if d.durable >= d.written || d.send_before_durable {
            (out, Vec::new())
        } else {
            (Vec::new(), out)
        };
        messages.extend(transfers);
        Ready {
            write,
            early,
            messages,
            held,
            hold_until: self.durability.written,
            views,
            checkpoint,
            transfer_jobs: self.transfers.take_jobs(),
            group,
        }
    }

    /// A [`TransferJob`] of [`Ready::transfer_jobs`] is done: a checkpoint
    /// to serve is encoded (the fetches waiting for it are answered), or
    /// one fetched is decoded (and installed).
    pub fn on_transfer_done(&mut self, done: TransferDone) {
        if let Some(fetched) = self.transfers.on_done(done) {
            self.install(fetched);
        }
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
        } else if d.checkpoint_writing.is_none()
            && (d.checkpoint_requested
                || (d.checkpoint_every_ticks > 0
                    && d.ticks_since_checkpoint >= d.checkpoint_every_ticks))
        {
            self.checkpoint()
        } else {
            None
        };
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
            self.pump();
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

    /// The measured round trips and the consensus timing they led to (see
    /// [`timing`]).
    pub fn link_timing(&self) -> LinkTiming {
        self.timing.status()
    }

    /// Gossip's messages into the outbox, or with the early ones when they
    /// claim nothing about this replica's disk: pulls, and payloads whose
    /// own ops a durable write reserved (another origin's op relayed is the
    /// receiver's to keep either way). Digests report what is held here,
    /// so they wait.
    fn take_gossip_messages(&mut self) {
        let me = self.id();
        let reserved = self.durability.reserved_durable;
        for (to, m) in self.gossip.take_messages() {
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
    }

    /// Move work between the rooms until nothing changes.
    fn pump(&mut self) {
        let mut rounds = 0;
        loop {
            rounds += 1;
            // Each round after the first runs only because the previous one
            // delivered or emitted something, which the rooms consume: a
            // long run means two rooms feed each other forever.
            assert!(rounds <= PUMP_ROUNDS_MAX, "the pump did not settle");
            let mut progress = false;
            for effect in self.replica.take_effects() {
                progress = true;
                match effect {
                    Effect::RbCast(op) => {
                        self.new_payloads.push(op.clone());
                        self.gossip.broadcast(op);
                    }
                    Effect::CabCast(id) => self.cab.cast(id),
                    Effect::View(v) => self.views.push(v),
                    Effect::Voided(id) => {
                        self.gossip.void(id);
                        self.voided.push(id);
                    }
                }
            }
            // A void may let ops buffered behind it through.
            self.deliver_gossip();
            // Payloads go out before the consensus messages that name them,
            // so a follower finds an op's payload already there when the
            // append arrives (instead of holding the append and pulling).
            self.take_gossip_messages();
            let replica = &self.replica;
            self.cab.poll(&|id| replica.holds_payloads(id));
            let early = self.cab.take_early_messages();
            self.early
                .extend(early.into_iter().map(|(to, m)| (to, PeerMessage::Cab(m))));
            let cab_out = self.cab.take_messages();
            self.outbox
                .extend(cab_out.into_iter().map(|(to, m)| (to, PeerMessage::Cab(m))));
            // One at a time: an id may depend on the one delivered before it.
            while let Some(id) = self.cab.next_deliverable(&|id| self.replica.check_dep(id)) {
                progress = true;
                self.replica.cab_deliver(id);
            }
            progress |= self.apply_group_changes();
            let len = self.replica.committed_len();
            if len > self.committed_told {
                let told = self.committed_since(self.committed_told);
                self.gossip.committed(told);
                self.committed_told = len;
            }
            if !progress {
                break;
            }
        }
        self.pull_missing();
        self.take_gossip_messages();
        self.want_state();
        self.serve_deferred();
    }

    /// Ask gossip for what CAB waits on: the strong op itself, or the ops of
    /// its causal context that have not arrived.
    ///
    /// At most once per tick: gossip asks for an id again only every
    /// `pull_every_ticks` anyway, and finding what is missing walks the
    /// causal contexts of every waiting op. A pump runs for every message
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

    /// Check every room's invariants and the node's own (the simulator
    /// samples this; it walks the replica's state, so it is not for the
    /// hot path): the replica core and its executor, CAB, gossip, and
    /// durability (nothing durable that was not written; gossip told of no
    /// more than was committed).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.membership.check_invariants()?;
        // A removed replica was a member (and keeps what it committed).
        if !self.membership.is_member()
            && !self.membership.is_removed()
            && self.replica.committed_len() > 0
        {
            return Err("a replica that is not a member committed ops".into());
        }
        self.replica.check_invariants()?;
        self.replica.engine().check_invariants()?;
        self.cab
            .check_invariants()
            .map_err(|e| format!("cab: {e}"))?;
        self.gossip
            .check_invariants()
            .map_err(|e| format!("gossip: {e}"))?;
        // Gossip does not wait for an id the replica holds (delivered,
        // voided, or committed by a checkpoint): ops after it would wait
        // for a payload no replica keeps.
        for (origin, counter, past_gap) in self.replica.causal_context().to_records() {
            let ids = std::iter::once(counter)
                .chain(past_gap)
                .filter(|seq| *seq > 0)
                .map(|seq| OpId::new(origin, seq));
            if let Some(id) = ids.into_iter().find(|id| !self.gossip.counts_held(*id)) {
                return Err(format!(
                    "{id} is in the causal context, and gossip still waits for it \
                     (its counter for {origin}: {})",
                    self.gossip.counter(origin)
                ));
            }
        }
        let d = &self.durability;
        if d.durable > d.written {
            return Err(format!(
                "write {} durable, only {} written",
                d.durable, d.written
            ));
        }
        if self.committed_told > self.replica.committed_len() {
            return Err("gossip was told of more committed ops than there are".into());
        }
        Ok(())
    }

    /// One line on what this replica's commit path is waiting for: held
    /// appends and the ids they wait on (with the missing context ops),
    /// its own newest seqs (in the replica, in gossip), gossip's counters,
    /// CAB's log and the replica's lengths. For an operator's log when
    /// commits stall, and for a failed simulator seed.
    pub fn stall_report(&self) -> String {
        let cab = &self.cab;
        let r = &self.replica;
        let waiting = cab.waiting_for(&|id| r.holds_payloads(id), &|id| r.check_dep(id));
        let missing: Vec<OpId> = waiting
            .iter()
            .flat_map(|id| match r.op(*id) {
                None => vec![*id],
                Some(_) => r.missing_context(*id).take(5).collect(),
            })
            .take(10)
            .collect();
        let me = r.id();
        let last = r.last_issued_seq();
        let own: Vec<(u64, bool, bool)> = (last.saturating_sub(6)..=last)
            .map(|seq| {
                let id = OpId { origin: me, seq };
                (seq, r.op(id).is_some(), self.gossip_holds(id))
            })
            .collect();
        format!(
            "own(seq,replica,gossip)={own:?} held_appends={} waiting={waiting:?} \
             missing={missing:?} gossip={:?} lost_peers={:?} foreign={:?} delivered={:?} \
             {:?} role={} term={} leader={:?} log={:?} cab_delivered={} decided_waiting={} \
             wanted={:?} held_wait={:?} fetch={:?} transfers={:?} timing_scale={} committed_len={} \
             tentative={} unconfirmed={}",
            cab.held_appends(),
            self.gossip_stats(),
            self.lost_peers(),
            self.foreign_peers(),
            self.gossip_delivered(),
            self.standing(),
            cab.role(),
            cab.term(),
            cab.leader(),
            cab.log_mark(),
            cab.delivered_through(),
            cab.decided_waiting(),
            cab.wanted_snapshot(),
            self.held_wait,
            self.fetch_status(),
            self.transfer_stats(),
            self.timing.scale(),
            r.committed_len(),
            r.tentative_len(),
            cab.unconfirmed(),
        )
    }

    /// The replica.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// Record the changes executions make, for watchers (see
    /// [`Replica::record_changes`]); kept across a rebuild by state
    /// transfer.
    pub fn record_changes(&mut self, committed: bool, tentative: bool) {
        self.replica.record_changes(committed, tentative);
    }

    /// The changes recorded since the last call ([`Replica::take_changes`]).
    pub fn take_changes(&mut self) -> Vec<creek_core::Change> {
        self.replica.take_changes()
    }

    /// CAB.
    pub fn cab(&self) -> &Cab<S> {
        &self.cab
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

    /// Gossip counters.
    pub fn gossip_stats(&self) -> GossipStats {
        self.gossip.stats()
    }

    /// CAB counters.
    pub fn cab_stats(&self) -> CabStats {
        self.cab.stats()
    }

    /// Entries held in CAB's consensus (raft) log: its last index (unstable
    /// entries included) less the storage's first index, plus one; 0 when it
    /// holds none. Read-only, for `Status` and soak benchmarks watching the
    /// log's growth.
    pub fn raft_log_entries(&self) -> u64 {
        let (last, _, _) = self.cab.log_mark();
        // `LogStore` and `MemCabStorage` always answer; an error would mean
        // an unreadable log, which holds nothing countable here.
        self.cab
            .store()
            .first_index()
            .map_or(0, |first| (last + 1).saturating_sub(first))
    }

    /// Frames refused by the decoder.
    pub fn refused_frames(&self) -> u64 {
        self.refused_frames
    }

    /// Start a CAB election now (a member only).
    pub fn campaign(&mut self) {
        if self.membership.is_member() {
            self.cab.campaign();
            self.pump();
        }
    }

    /// Where this replica stands in its cluster (see [`membership`]).
    pub fn standing(&self) -> Standing {
        self.membership.standing()
    }

    /// This replica's identity, as last handed out to be written.
    pub fn identity(&self) -> &Identity {
        self.membership.identity()
    }

    /// Rebuilt after losing its data, in this run: the highest own seq a
    /// peer held then (the ops this replica issued above it before were lost
    /// with its data; their ids are not issued again).
    pub fn rebuilt_held_seq(&self) -> Option<u64> {
        self.rebuilt_held
    }

    /// Peers that said they lost their data.
    pub fn lost_peers(&self) -> Vec<ReplicaId> {
        self.membership.lost_peers().iter().copied().collect()
    }

    /// Peers that belong to another cluster.
    pub fn foreign_peers(&self) -> Vec<ReplicaId> {
        self.membership.foreign_peers()
    }

    /// Whether a majority of the group is known to have lost its data
    /// (strong ops are then refused).
    pub fn quorum_lost(&self) -> bool {
        self.membership.quorum_lost()
    }

    /// Membership changes since the last call, for the driver's log.
    pub fn take_membership_events(&mut self) -> Vec<membership::Event> {
        self.membership.take_events()
    }

    /// Committed payloads kept on disk past a checkpoint for peers that have
    /// not reported holding them.
    pub fn retained_payloads(&self) -> usize {
        self.retained.len()
    }

    /// Consensus and gossip frames refused because their sender was not a
    /// member of this cluster in good standing (or this replica is not one).
    pub fn refused_non_members(&self) -> u64 {
        self.refused_non_members
    }

    /// Whether gossip holds the payload of `id` (to answer peers).
    pub fn gossip_holds(&self, id: OpId) -> bool {
        self.gossip.op(id).is_some()
    }

    /// Gossip's per-origin delivered counters.
    pub fn gossip_delivered(&self) -> Vec<(ReplicaId, u64)> {
        self.gossip.delivered()
    }

    /// State-transfer counters.
    pub fn transfer_stats(&self) -> TransferStats {
        self.transfers.stats()
    }

    /// The checkpoint being fetched from a peer, if any.
    pub fn fetch_status(&self) -> Option<FetchStatus> {
        self.transfers.fetch_status()
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
        config: &NodeConfig,
        storage: S,
        applied: u64,
    ) -> Result<Self, NodeError> {
        let mut replica = replica;
        replica.abandon_running();
        let cab = Cab::new(config.cab.clone(), storage, applied)?;
        // Only the in-memory test network restarts this way: its storage is
        // synchronous, so there is nothing to re-number.
        let durability = Durability::default();
        let timing = Timing::for_config(config);
        let membership = membership_of(config, Identity::founding(&config.cab.replicas), false);
        let mut node = Self::assemble(
            replica,
            gossip,
            cab,
            config.wire,
            durability,
            timing,
            membership,
        );
        // CAB's record of what this replica cast was volatile: cast again.
        node.adopt_tentative_strong_ops();
        Ok(node)
    }
}

/// The membership state machine of a node with `config`.
/// A checkpoint of the committed state to serve a fetch, at the consensus
/// index delivered, with that entry's term; `None` away from a clean point.
fn serving_checkpoint<S: CabStorage>(
    replica: &Replica,
    cab: &Cab<S>,
    group: creek_core::Group,
) -> Option<(Checkpoint, u64)> {
    let mut c = replica.checkpoint()?;
    c.cab_applied = cab.delivered_through();
    c.group = group;
    let term = cab.store().term(c.cab_applied).ok()?;
    Some((c, term))
}

fn membership_of(config: &NodeConfig, identity: Identity, dirty: bool) -> Membership {
    let me = config.replica.id;
    let peers = config
        .cab
        .replicas
        .iter()
        .copied()
        .filter(|r| *r != me)
        .collect();
    let mut m = Membership::new(
        me,
        peers,
        identity,
        dirty,
        PLANTED_BUGS && config.planted_amnesiac_voter,
    );
    m.rebuild_despite_data_loss = config.rebuild_despite_data_loss;
    m
}

/// Whether a data directory holds anything of a replica that took part:
/// consensus state, a checkpoint or payloads (`kept`).
fn holds_data<S: CabStorage>(storage: &S, kept: bool) -> Result<bool, NodeError> {
    let state = storage.initial_state().map_err(CabError::from)?;
    let last = storage.last_index().map_err(CabError::from)?;
    Ok(kept || state.hard_state.term > 0 || state.hard_state.commit > 0 || last > 0)
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
    // Once the group changed, the configuration names only where it began.
    if storage.conf().index == 0 && stored != configured {
        return Err(NodeError::Inconsistent(format!(
            "the CAB storage was created for raft voters {stored:?}, but the configured \
             replicas need {configured:?} (raft id = replica id + 1)"
        )));
    }
    log_restarts_at(storage, applied)
}

/// The log in `storage` can restart at a checkpoint taken at consensus
/// index `applied`: it is committed as far, and not compacted past it. A
/// restart needs this of what is durable, so every write that stores a
/// checkpoint stores the log writes that make it hold.
fn log_restarts_at<S: CabStorage>(storage: &S, applied: u64) -> Result<(), NodeError> {
    let commit = storage
        .initial_state()
        .map_err(CabError::from)?
        .hard_state
        .commit;
    let last = storage.last_index().map_err(CabError::from)?;
    if applied > commit || applied > last {
        return Err(NodeError::Inconsistent(format!(
            "the checkpoint was taken at consensus index {applied}, past the stored log \
             (commit {commit}, last index {last})"
        )));
    }
    let compacted = storage.first_index().map_err(CabError::from)? - 1;
    if applied < compacted {
        return Err(NodeError::Inconsistent(format!(
            "the checkpoint was taken at consensus index {applied}, but the stored log was \
             compacted through {compacted}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use creek_cab::MemCabStorage;
    use creek_core::Request;
    use creek_types::value::{encode_args, Value};
    use creek_types::ProcCall;

    /// A disk that falls behind pushes back on clients: at
    /// `pending_writes_max` writes not yet durable, invocations are refused
    /// with `DiskBehind`, and accepted again once the writes are durable.
    #[test]
    fn a_disk_that_falls_behind_refuses_clients_until_it_catches_up() {
        let me = ReplicaId(1);
        let mut config = NodeConfig::for_group(me, &[me]);
        config.pending_writes_max = 8;
        let storage = MemCabStorage::new(vec![creek_cab::raft_id(me)]);
        let registry = Arc::new(Registry::with_builtins());
        let identity = Identity::founding(&[me]);
        let mut node = Node::recover(
            config,
            registry,
            storage,
            Kept {
                identity: Some(identity),
                ..Kept::default()
            },
            7,
        )
        .expect("recovers");
        let put = |i: u64| {
            let key = Value::Bytes(Bytes::from(format!("k{i}")));
            let args = encode_args(&[key, Value::Bytes(Bytes::from_static(b"v"))]);
            Request::weak(ProcCall::new("kv.put", args))
        };
        let mut refused = None;
        for i in 0..100 {
            match node.invoke(put(i), i) {
                Ok(_) => {
                    node.execute_all();
                    let _ = node.ready();
                }
                Err(e) => {
                    refused = Some((i, e));
                    break;
                }
            }
        }
        let (at, e) = refused.expect("refused before 100 writes");
        assert!(matches!(e, InvokeError::DiskBehind(8)), "{e}");
        assert_eq!(node.written(), 8, "refused at the limit (after {at} ops)");
        // The disk catches up: accepted again.
        node.on_durable(node.written());
        assert!(node.invoke(put(1000), 1000).is_ok());
    }

    /// Group changes a single-replica group's leader refuses, and one it
    /// takes: a learner added under a new id, with its addresses kept in
    /// the directory and the id counted as used.
    #[test]
    fn group_changes_are_checked_and_a_learner_is_added() {
        use creek_cab::{ChangeRefused, MemberChange};
        let me = ReplicaId(1);
        let config = NodeConfig::for_group(me, &[me]);
        let storage = MemCabStorage::new(vec![creek_cab::raft_id(me)]);
        let registry = Arc::new(Registry::with_builtins());
        let mut node = Node::new(config, registry, storage, 0).expect("starts");
        for t in 0..100 {
            node.tick(t * 1000);
            let _ = node.ready();
        }
        assert!(node.cab().is_leader());
        let addrs = || {
            Some(creek_core::Addrs {
                peer: "127.0.0.1:7102".into(),
                client: "127.0.0.1:7002".into(),
            })
        };
        let refused = |node: &mut Node<MemCabStorage>, change, addrs| {
            node.change_group(change, addrs).expect_err("refused")
        };
        assert_eq!(
            refused(&mut node, MemberChange::Remove(me), None),
            GroupError::Refused(ChangeRefused::LastVoter(me))
        );
        assert_eq!(
            refused(&mut node, MemberChange::AddLearner(me), addrs()),
            GroupError::Refused(ChangeRefused::AlreadyMember(me))
        );
        assert_eq!(
            refused(&mut node, MemberChange::Remove(ReplicaId(3)), None),
            GroupError::Refused(ChangeRefused::NotA(ReplicaId(3), "member"))
        );
        assert_eq!(
            refused(&mut node, MemberChange::AddLearner(ReplicaId(2)), None),
            GroupError::NoAddress(ReplicaId(2))
        );
        assert_eq!(node.group().members(), vec![me], "nothing changed");

        node.change_group(MemberChange::AddLearner(ReplicaId(2)), addrs())
            .expect("proposed");
        for t in 100..110 {
            node.tick(t * 1000);
            let _ = node.ready();
        }
        let group = node.group();
        assert_eq!(group.voters, vec![me]);
        assert_eq!(group.learners, vec![ReplicaId(2)]);
        assert_eq!(group.directory.max_id, 2);
        assert_eq!(
            group.directory.addrs[&ReplicaId(2)],
            addrs().expect("addrs")
        );
        assert!(group.conf_index > 0);
        // Removed later, its id never returns.
        node.change_group(MemberChange::Remove(ReplicaId(2)), None)
            .expect("proposed");
        for t in 110..120 {
            node.tick(t * 1000);
            let _ = node.ready();
        }
        assert_eq!(node.group().members(), vec![me]);
        assert_eq!(
            refused(&mut node, MemberChange::AddLearner(ReplicaId(2)), addrs()),
            GroupError::IdUsed {
                id: ReplicaId(2),
                max: 2
            }
        );
    }

    /// A bug-planting switch is refused unless the build has them.
    #[test]
    fn planted_bugs_need_the_cargo_feature() {
        let group = [ReplicaId(1), ReplicaId(2), ReplicaId(3)];
        let mut config = NodeConfig::for_group(ReplicaId(1), &group);
        assert!(config.validate().is_ok());
        config.planted_send_before_durable = true;
        assert_eq!(config.validate().is_ok(), PLANTED_BUGS);
        let mut config = NodeConfig::for_group(ReplicaId(1), &group);
        config.cab.planted_deliver_on_propose = true;
        assert_eq!(config.cab.validate().is_ok(), PLANTED_BUGS);
        config.replica.planted_ignore_causal_context = true;
        assert_eq!(config.replica.validate().is_ok(), PLANTED_BUGS);
    }
}
