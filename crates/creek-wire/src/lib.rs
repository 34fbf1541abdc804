//! The messages replicas send each other, and their encoding.
//!
//! Two protocols share one connection: gossip (reliable broadcast of op
//! payloads, [`GossipMessage`]) and conditional atomic broadcast (consensus on
//! strong-op ids, [`CabMessage`]); [`Probe`]s measure the link between them
//! and [`Hello`]s say which cluster each belongs to. Every frame is
//! versioned and size-limited;
//! decoding any byte string yields a message or an error, never a panic.
//!
//! [`encode`] turns a [`PeerMessage`] into one frame and [`decode`] (or the
//! zero-copy [`decode_bytes`]) turns a frame back into a message, both under
//! the same [`Limits`]. The frame layout is specified in the [`codec`]
//! module docs.
#![deny(missing_docs)]

use std::sync::Arc;

use bytes::Bytes;
use creek_core::{Op, OpId, ReplicaId};

pub mod checkpoint;
pub mod codec;

pub use checkpoint::{decode_directory, encode_directory, CheckpointError};
pub use codec::{
    decode, decode_bytes, decode_op, encode, encode_op, encoded_len, frame_kind, DecodeError,
    EncodeError, Limit, Limits, LimitsError, WIRE_VERSION,
};

/// One replica-to-replica message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerMessage {
    /// Reliable broadcast of op payloads.
    Gossip(GossipMessage),
    /// Conditional atomic broadcast of strong-op ids.
    Cab(CabMessage),
    /// Link timing: a probe and its echo measure the round trip.
    Probe(Probe),
    /// Cluster identity: who the sender is and whether it holds its data.
    Hello(Hello),
    /// State transfer: a checkpoint fetched from a peer in chunks.
    Snapshot(SnapshotMessage),
    /// Stable times: how far the sender has applied its group's committed
    /// order, and the global stable time it knows (docs/snapshot-reads.md).
    Stable(Stable),
}

/// A replica's report to its group's peers, every stable-time interval:
/// two scalars, as Wren's stabilization messages carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stable {
    /// The commit time of the sender's last final entry (µs).
    pub applied_us: u64,
    /// The global stable time the sender knows (µs; 0: none).
    pub global_us: u64,
}

/// A replica's identity in its cluster. A replica draws a random `nonce`
/// when its data directory is created and keeps it; a cluster is named by
/// its founders, the `(replica, nonce)` of every initial member. So a
/// replica whose data directory was lost comes back with a new nonce and
/// learns from any member that it is not the replica the cluster knew.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The sender's nonce.
    pub nonce: u64,
    /// Where the sender stands.
    pub state: MemberState,
    /// The cluster's founders, sorted by replica (empty unless the sender is
    /// a member; also empty for a member whose data directory predates
    /// cluster identities).
    pub founders: Vec<(ReplicaId, u64)>,
    /// An answer to a hello (never answered itself).
    pub reply: bool,
    /// The sender's consensus term (0 unless it is a member).
    pub term: u64,
    /// The highest seq of an op of the *receiver's* origin the sender holds
    /// (0: none). A replica rebuilt from a peer's checkpoint resumes its own
    /// seqs past what every peer holds, so it never issues an id twice; the
    /// ops above it were lost with its data.
    pub peer_seq: u64,
    /// The sender's own seqs that a durable write reserved: it issues none
    /// past this. Sent again whenever a write reserves more, ahead of the
    /// ops that use the new seqs.
    pub reserved: u64,
    /// The highest `reserved` the *receiver* announced to the sender (0:
    /// none heard). A rebuilt replica resumes past it too, so it does not
    /// issue again an id a client saw with an op that was lost.
    pub peer_reserved: u64,
    /// A replica rebuilt from a peer's checkpoint: the last seq of its own
    /// ops from before it lost its data (0: none). Of those, a receiver
    /// that lacks some takes them in any order, if they ever come (some
    /// were lost with the data).
    pub floor: u64,
    /// The last index of the sender's consensus log (0 unless it is a
    /// member): a rebuilt replica votes only for candidates that reach the
    /// longest log any peer reported, until its own commit index does.
    pub last_index: u64,
    /// The sender's group as its consensus applied it, voters and learners
    /// (empty unless the sender is a member). A replica that lost its data
    /// waits for the current group, which may differ from the one it was
    /// configured with.
    pub group: Vec<ReplicaId>,
    /// The voters of `group` (both halves while joint): a lost replica
    /// rebuilds only while a majority of them holds data.
    pub voters: Vec<ReplicaId>,
    /// The consensus index of the configuration `group` comes from (0
    /// unless the sender is a member; 0 too for the founding group).
    pub conf_index: u64,
    /// How to reach the members added since the group formed: the
    /// sender's directory (empty unless the sender is a member).
    pub directory: creek_core::Directory,
}

/// State transfer. A replica that needs a checkpoint — its consensus log is
/// behind what its peers compacted, or it lost its data — fetches one from a
/// peer: it asks for one chunk at a time ([`SnapshotMessage::Fetch`]), so
/// the sender never sends faster than the receiver takes, and a broken
/// connection resumes at the offset it reached. The bytes are a checkpoint
/// in [`checkpoint`]'s encoding; the receiver checks their length and
/// checksum before it decodes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotMessage {
    /// Ask for the chunk at `offset` of `transfer`; transfer 0 starts a new
    /// one, of a checkpoint at consensus index `min_index` or later.
    Fetch {
        /// The transfer (0: a new one).
        transfer: u64,
        /// The least consensus index the checkpoint must cover.
        min_index: u64,
        /// The first byte wanted.
        offset: u64,
    },
    /// A chunk of a transfer's bytes.
    Chunk(SnapshotChunk),
    /// The sender will not serve `transfer`: not now (`retry`: it holds no
    /// checkpoint that far yet), or not any more (start a new transfer).
    Refused {
        /// The transfer asked for.
        transfer: u64,
        /// Ask again later (else: start over).
        retry: bool,
    },
}

/// One chunk of a checkpoint being transferred.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotChunk {
    /// The transfer (chosen by the sender, never 0).
    pub transfer: u64,
    /// The checkpoint's consensus index (its `cab_applied`).
    pub index: u64,
    /// The term of the consensus entry at `index`.
    pub term: u64,
    /// Length of the whole encoded checkpoint.
    pub total_len: u64,
    /// CRC-32 (IEEE) of the whole encoded checkpoint.
    pub checksum: u32,
    /// Where `data` starts in it.
    pub offset: u64,
    /// The bytes.
    pub data: Bytes,
}

/// Where a replica stands in its cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberState {
    /// Its data directory is new and it has not learnt the cluster yet.
    Joining,
    /// A member holding its data.
    Member,
    /// Its data directory is new but the cluster already exists without it:
    /// it lost its data and must not take part until it is rebuilt.
    Lost,
}

/// A probe of a link, or its echo. The prober stamps it with its own clock
/// and measures the round trip when the echo (carrying the same stamp) comes
/// back, so the two replicas' clocks never meet. Both carry the sender's
/// largest measured round trip, so every replica learns the group's slowest
/// link and times consensus for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The prober's clock when it sent the probe (microseconds).
    pub stamp_us: u64,
    /// Whether this is the echo of a probe.
    pub echo: bool,
    /// The sender's largest measured round trip to any peer (microseconds;
    /// 0: none measured yet).
    pub rtt_us: u64,
}

/// Gossip (RB): eager push plus anti-entropy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GossipMessage {
    /// Op payloads: an eager push of new ops, or the answer to a digest or a
    /// pull. Ops of one origin appear in increasing `seq` order.
    Ops(Vec<Arc<Op>>),
    /// Anti-entropy: for each origin, the sender has delivered every op with
    /// `seq <= counter`. The receiver answers with the ops the sender lacks
    /// and learns what the sender lacks of its own knowledge.
    Digest {
        /// `(origin, contiguous counter)`, sorted by origin.
        delivered: Vec<(ReplicaId, u64)>,
    },
    /// A request for specific ops (e.g. a strong op's causal context that
    /// CAB is waiting for).
    Pull {
        /// The ids wanted.
        ids: Vec<OpId>,
    },
}

/// CAB: the consensus library's own messages plus id forwarding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CabMessage {
    /// A message of the consensus library, in the library's own encoding
    /// (opaque here; the CAB crate parses it and rejects what it cannot).
    Raft(Bytes),
    /// Strong-op ids cast at a non-leader, forwarded to the leader.
    Forward {
        /// The ids, in cast order.
        ids: Vec<OpId>,
    },
    /// The leader's compaction point: every replica acknowledged the
    /// leader's log through this index, so no replica will need an entry up
    /// to it from anyone; a replica may compact its log that far (and no
    /// further than its own latest checkpoint).
    Compact {
        /// The log index.
        through: u64,
    },
}
