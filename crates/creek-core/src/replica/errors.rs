//! Why a replica refuses an invocation.

use creek_procs::CallError;

use super::snapshot::READ_TIME_AHEAD_MAX_US;

/// Why an invocation is refused. Nothing is applied or broadcast.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvokeError {
    /// Unknown procedure, malformed arguments, or a weak call of a user
    /// procedure that may write a strong keyspace.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The request asks for no view at all.
    #[error("the request asks for no view")]
    NoView,
    /// The tentative list is full; retry later.
    #[error("replica overloaded: {0} ops on the tentative list")]
    Overloaded(usize),
    /// The replica's disk is behind: this many writes wait for their fsync
    /// (and the peer messages they hold back with them); retry later.
    #[error("replica overloaded: {0} writes wait for its disk")]
    DiskBehind(u64),
    /// This many of the replica's strong ops wait for their place in the
    /// consensus order (no leader, or one that cannot keep up); retry
    /// later.
    #[error(
        "replica overloaded: {0} strong ops wait for the consensus order (no leader, or one \
         that cannot keep up)"
    )]
    StrongBacklog(usize),
    /// This many of the replica's own ops wait to be committed while the
    /// group has a leader: clients write faster than the group commits;
    /// retry later.
    #[error(
        "replica overloaded: {0} of its ops wait to be committed (clients write faster than \
         the group commits)"
    )]
    WeakBacklog(usize),
    /// The replica does not serve: it is joining its cluster, or it lost
    /// its data and waits to be rebuilt (the text says which).
    #[error("{0}")]
    NotServing(String),
    /// A majority of the replicas lost their data: no strong op can be
    /// ordered without risking acknowledged ones (the text says what to do).
    #[error("{0}")]
    QuorumLostData(String),
    /// A snapshot view was asked of an op that may write: the snapshot
    /// level serves read-only operations.
    #[error("the snapshot level serves read-only operations; {0} may write")]
    SnapshotWrites(String),
    /// The client's read time is further ahead of this replica's clock
    /// than [`READ_TIME_AHEAD_MAX_US`].
    #[error(
        "read time {read_time} µs is more than {}s ahead of this replica's clock ({now} µs)",
        READ_TIME_AHEAD_MAX_US / 1_000_000
    )]
    ReadTimeAhead {
        /// The client's read time.
        read_time: u64,
        /// The replica's clock.
        now: u64,
    },
    /// This replica is behind the client's read time and already holds
    /// [`SNAPSHOT_PARKED_MAX`](super::SNAPSHOT_PARKED_MAX) snapshot reads waiting for it to catch up:
    /// retry at another replica.
    #[error(
        "replica behind: {0} snapshot reads wait for it to apply their read time; \
         retry at another replica"
    )]
    SnapshotBehind(usize),
    /// A snapshot read would read below the oldest time whose versions this
    /// replica keeps: the global stable time stopped moving (a shard
    /// without a leader, or cut off) for longer than the kept versions
    /// last, or the replica restarted since. Retry at another replica, or
    /// read at another level.
    #[error(
        "snapshot at {time} µs is no longer kept here (versions kept from {kept_from} µs; \
         {}); retry at another replica or read at another level",
        stable_age(.stable_age_ms)
    )]
    SnapshotNotKept {
        /// The time the read would read at.
        time: u64,
        /// The oldest time this replica serves.
        kept_from: u64,
        /// How old the global stable time known here is (`None`: it knows
        /// none yet).
        stable_age_ms: Option<u64>,
    },
    /// A read at a revision asked for other views than the snapshot view
    /// alone: it reads the committed state at that revision, nothing else.
    #[error("a read at a revision is a snapshot read: ask for the snapshot level alone")]
    RevisionLevels,
    /// A read at a revision this replica does not serve: not committed
    /// here yet, or older than the versions it keeps (compacted; etcd's
    /// "required revision has been compacted").
    #[error(
        "revision {revision} is out of range here: this replica reads revisions {oldest} to \
         {newest} (older ones are compacted; a newer one is not committed here yet)"
    )]
    RevisionOutOfRange {
        /// The revision asked for.
        revision: u64,
        /// The oldest revision served.
        oldest: u64,
        /// The newest committed revision.
        newest: u64,
    },
    /// A read at exactly a time other than the applied one, at a replica
    /// that keeps no older versions (stable times are off here): it can
    /// read only its applied state, which moves on while the read waits.
    #[error(
        "a snapshot read at exactly {time} µs needs stable times, which are off here \
         (applied time {applied} µs): turn on [snapshot] stable_every_ms, or read at \
         another level"
    )]
    SnapshotExactUnavailable {
        /// The time asked for.
        time: u64,
        /// This replica's applied time.
        applied: u64,
    },
}

/// What [`InvokeError::SnapshotNotKept`] says of the global stable time.
fn stable_age(age_ms: &Option<u64>) -> String {
    match age_ms {
        Some(ms) => format!("the global stable time is {ms} ms old"),
        None => "no global stable time known yet".to_owned(),
    }
}
