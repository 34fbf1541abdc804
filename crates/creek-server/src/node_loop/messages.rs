//! What the node loop is sent, and what it answers.

use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Bytes;
use creek_core::{Addrs, Group, OpId, ReplicaId, Request};
use creek_node::GroupError;
use creek_types::ClientRequestId;
use tokio::sync::{mpsc, oneshot};

pub use crate::call::answer::{Gone, Reply};

/// Where a checkpoint asked for goes: it and the cluster's id, or `None`.
pub type CheckpointReply = oneshot::Sender<Option<(creek_core::Checkpoint, u64)>>;

impl Event {
    /// Its kind, for the account of what a turn's events cost: a peer
    /// frame by its message kind (`creek_wire::frame_kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Invoke(_) => "invoke",
            Event::Frame { frame, .. } => creek_wire::frame_kind(frame),
            Event::Tick => "tick",
            Event::Durable | Event::DiskFailure => "disk",
            Event::Mpo(..) => "mpo",
            Event::Watch(..) | Event::Committed { .. } => "watch",
            _ => "admin",
        }
    }
}

/// What the node loop reacts to.
pub enum Event {
    /// A client invocation.
    Invoke(Invocation),
    /// A frame from a peer.
    Frame {
        /// The sender.
        from: creek_core::ReplicaId,
        /// The frame, as received.
        frame: Bytes,
        /// When the transport had read it whole (it may wait in the
        /// loop's queue after that).
        received: std::time::Instant,
    },
    /// The persister failed (the message is in `Durability`).
    DiskFailure,
    /// A write consensus waits for is durable (the persister's callback
    /// released the frames it held itself; the loop tells consensus, so a
    /// leader counts its own write toward a commit).
    Durable,
    /// The protocol clock.
    Tick,
    /// A status request.
    Status(oneshot::Sender<StatusSnapshot>),
    /// What `/health` and `/ready` judge by.
    Health(oneshot::Sender<HealthSnapshot>),
    /// The console's strip: recent ops and the ends of the two lists.
    Strip(oneshot::Sender<crate::console::journal::Strip>),
    /// The user procedures of the replica's latest state, for the
    /// `Procedures` call.
    UserProcedures(oneshot::Sender<Vec<creek_proto::pb::ProcedureInfo>>),
    /// The committed state and the committed length it reflects.
    Dump(oneshot::Sender<(u64, Vec<(Bytes, Bytes)>)>),
    /// Part of the committed order, from a position on.
    Committed {
        /// The first position wanted.
        from: u64,
        /// Most ids returned.
        max: usize,
        /// The answer.
        reply: oneshot::Sender<CommittedPart>,
    },
    /// A checkpoint of the committed state at the first clean point, with
    /// the cluster's id (`None`: none came `within`, or the replica is not
    /// a member).
    Checkpoint {
        /// The answer.
        reply: CheckpointReply,
        /// How long to wait for a clean point.
        within: std::time::Duration,
    },
    /// Change the replica group (leader only): answered once the change is
    /// applied here, or refused.
    ChangeGroup {
        /// The change.
        change: creek_cab::MemberChange,
        /// A new replica's addresses.
        addrs: Option<Addrs>,
        /// The group after the change, or why not.
        reply: oneshot::Sender<Result<StatusSnapshot, GroupRefusal>>,
    },
    /// A new watcher of changes (`Creek.Watch`): accepted, or why not.
    Watch(
        crate::watch::WatchRequest,
        oneshot::Sender<Result<(), tonic::Status>>,
    ),
    /// A message about an operation across shards (`Creek.Mpo`, or this
    /// replica's own link handing over an answer it got): answered on the
    /// channel, if any.
    Mpo(
        creek_node::mpo::wire::Request,
        Option<oneshot::Sender<Result<creek_node::mpo::wire::Reply, tonic::Status>>>,
    ),
    /// Whether this replica leads its group, and its consensus term: the
    /// mover of a move of keys runs at the leader of the shard the keys go
    /// to, in its term (`crate::mover`).
    Leadership(oneshot::Sender<(bool, u64)>),
    /// Stop after making everything durable.
    Shutdown,
}

/// One client invocation and where its replies go.
pub struct Invocation {
    /// The op.
    pub request: Request,
    /// When its preliminary view may leave.
    pub answer_after: creek_node::AnswerAfter,
    /// Replies, in order.
    pub reply: ReplyTo,
    /// When the server received it.
    pub received: Instant,
    /// Who sent it, when the replica checks users (`[auth] enabled`): the
    /// node loop refuses the op unless the user holds the rights it needs.
    pub principal: Option<creek_procs::auth::Principal>,
}

/// Where an invocation's replies go.
#[derive(Clone)]
pub enum ReplyTo {
    /// A channel the gRPC handler reads; the op's last reply drops the
    /// sender, which ends the client's stream.
    Stream(mpsc::UnboundedSender<Reply>),
    /// A call on a native connection: its replies are queued on the
    /// connection and written by the node loop at the end of its turn
    /// (`crate::native::out::Call`, `crate::native::out::Corked`).
    Native(crate::native::out::Call),
}

impl ReplyTo {
    /// Send `reply`; `Err` once the client is gone.
    pub fn send(&self, reply: Reply) -> Result<(), Gone> {
        match self {
            ReplyTo::Stream(tx) => tx.send(reply).map_err(|_| Gone),
            ReplyTo::Native(call) => call.send(reply),
        }
    }

    /// Whether the client is gone (its stream or connection closed).
    pub fn is_closed(&self) -> bool {
        match self {
            ReplyTo::Stream(tx) => tx.is_closed(),
            ReplyTo::Native(call) => call.is_closed(),
        }
    }
}

/// Part of a replica's committed order, with where the replica stands.
#[derive(Debug)]
pub struct CommittedPart {
    /// The position of `ids[0]`.
    pub start: u64,
    /// Committed ids from `start` on, with the client request id each op
    /// carried.
    pub ids: Vec<(OpId, Option<ClientRequestId>)>,
    /// Length of the committed order.
    pub committed: u64,
    /// Committed ops with their final execution.
    pub finalized: u64,
    /// Ops known and not yet committed.
    pub pending: u64,
    /// Nothing pending, waiting or unfinalized.
    pub quiet: bool,
    /// "member", "joining", "lost" or "removed".
    pub standing: &'static str,
}

/// Why a group change was not made (nothing changed).
#[derive(Clone, Debug)]
pub struct GroupRefusal {
    /// What went wrong.
    pub error: GroupError,
    /// The leader to ask instead, if this replica is not it: its id and
    /// client address.
    pub leader: Option<(u16, String)>,
}

/// A replica's state, for `Status` and the status table.
#[derive(Clone, Debug, Default)]
pub struct StatusSnapshot {
    /// `leader`, `follower`, `candidate` or `pre-candidate`.
    pub role: &'static str,
    /// The known leader (0 if none).
    pub leader: u16,
    /// Consensus term.
    pub term: u64,
    /// Length of the committed list.
    pub committed: u64,
    /// Length of the tentative list.
    pub tentative: u64,
    /// Counters by name.
    pub counters: BTreeMap<String, u64>,
    /// Why the replica is joining or lost (empty for a member).
    pub standing_detail: String,
    /// Peers that said they lost their data.
    pub lost_peers: Vec<u16>,
    /// The cluster's id (see `creek_node::Identity::cluster_id`).
    pub cluster_id: u64,
    /// A majority lost its data.
    pub quorum_lost: bool,
    /// Entries held in the consensus log (`Node::raft_log_entries`).
    pub raft_log_entries: u64,
    /// The replica group as applied here.
    pub group: Group,
    /// The highest replica id the group ever had (`Node::max_id`).
    pub max_id: u16,
    /// How to reach each member (and initial replica): the configuration's
    /// addresses, then those of members added since.
    pub addrs: BTreeMap<ReplicaId, Addrs>,
}

/// What the node loop tells `/health` and `/ready` (`crate::health`).
#[derive(Clone, Debug)]
pub struct HealthSnapshot {
    /// Why the replica stopped, if it did (the process exits next).
    pub failed: Option<String>,
    /// How long the oldest disk write not yet durable has waited, if one
    /// waits.
    pub disk_waiting: Option<std::time::Duration>,
    /// `member`, `joining`, `lost` or `removed`.
    pub standing: &'static str,
    /// Whether this replica votes in its group as applied here.
    pub voter: bool,
    /// `leader`, `follower`, `candidate` or `pre-candidate`.
    pub role: &'static str,
    /// The leader this replica knows of (0 if none).
    pub leader: u16,
    /// The consensus commit index known here.
    pub commit_index: u64,
    /// The last index whose ids were all delivered here.
    pub applied_index: u64,
    /// Ops recovered from the data directory still being run again (0
    /// once they ran): client calls are refused until then.
    pub recovering_ops: u64,
}
