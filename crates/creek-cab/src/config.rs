//! The configuration of one CAB node ([`CabConfig`]: defaults per group,
//! then `validate`) and what can go wrong ([`CabError`]). Not the group's
//! configuration as consensus changes it: that is in `conf`.

use creek_core::ReplicaId;
use creek_types::planted::PlantedBugs;
use rustc_hash::FxHashSet;

/// Configuration of one CAB node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CabConfig {
    /// This replica.
    pub me: ReplicaId,
    /// The group's initial replicas, this one included (what a new log
    /// starts with; membership changes move on from there).
    pub replicas: Vec<ReplicaId>,
    /// This replica's election timeout in ticks (fixed: no randomness).
    pub election_tick: usize,
    /// Leader heartbeat interval in ticks.
    pub heartbeat_tick: usize,
    /// Most ids in one log entry.
    pub batch_ids_max: usize,
    /// A cast id not decided after this many ticks is forwarded again.
    pub forward_retry_ticks: u64,
    /// Most appends held back waiting for payloads; newer ones are dropped
    /// (the leader sends them again).
    pub held_appends_max: usize,
    /// Most append messages in flight to one follower.
    pub inflight_msgs_max: usize,
    /// The leader proposes a new entry only while fewer than this many
    /// entries are uncommitted; ids arriving meanwhile wait and go out as one
    /// batch. An idle leader proposes at once, so latency at low load is
    /// unchanged; under load, entries carry many ids.
    pub uncommitted_entries_max: u64,
    /// The leader's compaction point ignores followers that lag more than
    /// this many entries behind the commit index (down, or far behind): the
    /// log is compacted past them, and they catch up by state transfer.
    pub compaction_lag_max: u64,
    /// Planted bugs, only for validating the checkers (empty in
    /// production): CAB reads `StableBeforeDurable` (the simulator's
    /// `--plant-bug stable-before-durable`: the leader delivers ids as it
    /// proposes them, before a majority holds them).
    pub planted: PlantedBugs,
}

/// The default [`CabConfig::compaction_lag_max`].
pub const COMPACTION_LAG_MAX: u64 = 10_000;

impl CabConfig {
    /// Defaults for `me` in a group: election timeouts are staggered by the
    /// replica's rank (10, 13, 16, … ticks) so elections rarely collide.
    pub fn for_group(me: ReplicaId, replicas: &[ReplicaId]) -> Self {
        let mut sorted = replicas.to_vec();
        sorted.sort_unstable();
        let rank = sorted.iter().position(|r| *r == me).unwrap_or(0);
        CabConfig {
            me,
            replicas: sorted,
            election_tick: 10 + 3 * rank,
            heartbeat_tick: 2,
            batch_ids_max: 4096,
            forward_retry_ticks: 20,
            held_appends_max: 1024,
            inflight_msgs_max: 256,
            uncommitted_entries_max: 2,
            compaction_lag_max: COMPACTION_LAG_MAX,
            planted: PlantedBugs::NONE,
        }
    }

    /// Check every field.
    pub fn validate(&self) -> Result<(), CabError> {
        let bad = |why: &str| Err(CabError::Config(why.to_owned()));
        if !self.replicas.contains(&self.me) {
            return bad("replicas must include me");
        }
        let unique: FxHashSet<ReplicaId> = self.replicas.iter().copied().collect();
        if unique.len() != self.replicas.len() {
            return bad("replicas must be distinct");
        }
        if self.heartbeat_tick == 0 || self.election_tick <= self.heartbeat_tick {
            return bad("election_tick must exceed heartbeat_tick, which must be positive");
        }
        if self.batch_ids_max == 0
            || self.held_appends_max == 0
            || self.inflight_msgs_max == 0
            || self.uncommitted_entries_max == 0
            || self.compaction_lag_max == 0
        {
            return bad("batch, hold, in-flight, uncommitted and lag limits must be positive");
        }
        if self.forward_retry_ticks == 0 {
            return bad("forward_retry_ticks must be positive");
        }
        if !self.planted.is_empty() && !creek_types::planted::BUILT {
            return bad(creek_core::PLANTED_BUGS_OFF);
        }
        Ok(())
    }
}

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CabError {
    /// The configuration is invalid.
    #[error("invalid CAB configuration: {0}")]
    Config(String),
    /// The consensus library refused to start.
    #[error("consensus library: {0}")]
    Raft(#[from] raft::Error),
    /// A storage write failed; the node has stopped.
    #[error("storage failed, CAB stopped: {0}")]
    Storage(String),
}
