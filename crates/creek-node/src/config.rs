//! The node's configuration ([`NodeConfig`]: defaults per group, then
//! `validate`, as every room's) and why a node could not start
//! ([`NodeError`]).

use creek_cab::{CabConfig, CabError};
use creek_core::{Config, ReplicaId};
use creek_gossip::GossipConfig;
use creek_types::planted::PlantedBugs;
use creek_wire::Limits;

/// Whether this build can plant bugs (the `planted-bugs` cargo feature,
/// which forwards to creek-types', the one switch). Production builds
/// cannot; [`PlantedBugs::plant`] refuses there.
pub const PLANTED_BUGS: bool = creek_types::planted::BUILT;

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
    /// The interval at which the driver calls
    /// [`Node::tick`](crate::Node::tick), microseconds (the link timing
    /// converts measured round trips into ticks).
    pub tick_us: u64,
    /// Every this many ticks after the previous checkpoint became durable, a
    /// checkpoint of the committed state is handed to the driver to write in
    /// the background (at the first clean point; see
    /// [`CheckpointJob`](crate::CheckpointJob)); 0: never.
    pub checkpoint_every_ticks: u64,
    /// A checkpoint writes the whole state again, so a periodic one waits,
    /// past its interval, until the log since the previous checkpoint holds
    /// at least 1/`checkpoint_rewrite_ratio` of that checkpoint's state
    /// bytes, or [`CHECKPOINT_OPS`] ops: what is written to save a restart
    /// its replay stays within this ratio of what the replay would read
    /// (etcd's snapshot count bounds the same by entries alone). 0: a
    /// checkpoint at every interval, whatever it rewrites.
    pub checkpoint_rewrite_ratio: u64,
    /// Client invocations are refused
    /// ([`InvokeError::DiskBehind`](creek_core::InvokeError::DiskBehind)) while
    /// this many writes handed out are not yet durable: a disk that falls
    /// behind pushes back on clients instead of letting the writes and the peer
    /// messages they hold grow without bound.
    pub pending_writes_max: u64,
    /// Strong client invocations are refused
    /// ([`InvokeError::StrongBacklog`](creek_core::InvokeError::StrongBacklog))
    /// while this many of this replica's strong ops wait for their place in
    /// the consensus order (0: no bound). Without a leader, or with one
    /// that cannot keep up, more would only pile up: each is a gap in the
    /// causal context of every strong op its peers issue meanwhile (they
    /// know a strong op only once it is ordered), so contexts, and the
    /// work of decoding them, grow with the backlog until the replicas'
    /// loops have no time left for consensus itself.
    pub strong_pending_max: usize,
    /// Weak client invocations are refused
    /// ([`InvokeError::WeakBacklog`](creek_core::InvokeError::WeakBacklog))
    /// while this many of this replica's own ops are not yet committed and
    /// the group has a leader (0: no bound): the clients write faster than
    /// the group commits, and every op waiting is executed again and again
    /// on every replica's tentative list until it commits. Cut off from a
    /// leader, weak ops are taken up to the tentative list's bound
    /// (`tentative_len_max`): they are what keeps working in a partition.
    pub weak_pending_max: usize,
    /// A replica that lost its data is rebuilt from the members left even
    /// when a majority of the group lost its data (they may lack ops only
    /// the lost replicas acknowledged, which are then gone for good). The
    /// operator's explicit choice after a majority loss; off by default.
    pub rebuild_despite_data_loss: bool,
    /// Planted bugs, only for validating the checkers (empty in
    /// production): the one place a test or the simulator plants them. The
    /// node reads `SendBeforeDurable` (peer messages leave at once instead
    /// of waiting for their write), `AmnesiacVoter` (a replica told that it
    /// lost its data joins anyway, empty, as a voter) and `ForgetSentOps`
    /// (a restarted replica does not take back the own ops it sent before
    /// their write was durable, and issues their ids again), and hands the
    /// set down to the replica (and its executor) and CAB when it starts.
    pub planted: PlantedBugs,
    /// Stable times (docs/snapshot-reads.md): off by default.
    pub stable: crate::stable::StableConfig,
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
        let me = self.replica.id;
        if self.gossip.me != me || self.cab.me != me {
            return Err(NodeError::Inconsistent(
                "replica, gossip and cab must name the same replica".into(),
            ));
        }
        Ok(())
    }

    /// This configuration with its planted bugs handed down to the rooms
    /// that read them (the replica, which hands them to its executor, and
    /// CAB), beside any planted there directly.
    pub(crate) fn handed_down(mut self) -> Self {
        self.replica.planted = self.replica.planted.union(self.planted);
        self.cab.planted = self.cab.planted.union(self.planted);
        self
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
            checkpoint_rewrite_ratio: 0,
            pending_writes_max: PENDING_WRITES_MAX,
            strong_pending_max: STRONG_PENDING_MAX,
            weak_pending_max: WEAK_PENDING_MAX,
            rebuild_despite_data_loss: false,
            stable: crate::stable::StableConfig::default(),
            planted: PlantedBugs::NONE,
        }
    }
}

/// The servers' [`NodeConfig::checkpoint_rewrite_ratio`] by default (and
/// the simulator's).
pub const CHECKPOINT_REWRITE_RATIO: u64 = 4;

/// Ops logged since the previous checkpoint that make a periodic one due
/// however small they are ([`NodeConfig::checkpoint_rewrite_ratio`]):
/// they bound the payloads held for a restart's replay by count.
pub const CHECKPOINT_OPS: u64 = 100_000;

/// The default [`NodeConfig::pending_writes_max`]. A healthy disk keeps a
/// few writes pending (group commit takes all queued writes in one fsync);
/// this many means it is far behind.
pub const PENDING_WRITES_MAX: u64 = 1024;

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

/// The default [`NodeConfig::strong_pending_max`]: far above what closed-loop
/// clients keep in flight (one strong op each), reached in seconds by a
/// steady open-loop load while no leader orders anything.
pub const STRONG_PENDING_MAX: usize = 1024;

/// The default [`NodeConfig::weak_pending_max`]: seconds of the weak ops a
/// group commits at its peak (docs/bench/cluster.md), and a sixth of the
/// tentative list's bound, so a replica's own backlog alone never fills it.
pub const WEAK_PENDING_MAX: usize = 16_384;
