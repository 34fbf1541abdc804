//! Replica configuration: `Default` plus `validate`, as everywhere in Creek.

use creek_exec::mvcc::Schedule;
use creek_exec::TxnLimits;
use creek_types::planted::PlantedBugs;

use crate::id::ReplicaId;

/// How a replica behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// This replica.
    pub id: ReplicaId,
    /// Local invocations are refused (with `InvokeError::Overloaded`) while
    /// the tentative list holds this many ops; remote ops are always accepted.
    pub tentative_len_max: usize,
    /// When a weak op has waited this long on the tentative list and this
    /// replica has no strong op in flight, the stabilizer issues a strong
    /// no-op (paper §4.4). 0 turns the stabilizer off.
    pub stabilize_after_us: u64,
    /// Limits every execution enforces.
    pub txn_limits: TxnLimits,
    /// Answer an op's first preliminary view as soon as one of its
    /// executions is installed and valid, without waiting for the ops
    /// before it to finish executing (paper §6.2: tentative latency is the
    /// execution time). Its result is then over the ops executed before it
    /// (a serialization of a subset of the order, as fluctuating eventual
    /// consistency allows); off, the first view waits until every earlier
    /// op has executed and equals the result of the whole tentative order.
    pub early_tentative_views: bool,
    /// Which waiting execution a free core takes (see [`Schedule`]).
    pub schedule: Schedule,
    /// How long a client's retry of a request is answered from its session
    /// entry, in µs of op time: an op with a request id that reaches the
    /// order later than this after it was invoked, and finds no entry, is
    /// refused as expired; entries are deleted two TTLs after they were
    /// written (see `creek_procs::session`). 0 keeps every entry forever.
    pub session_ttl_us: u64,
    /// Planted bugs, only for validating the checkers (empty in
    /// production): the replica reads `DeliverWithoutCab` (an origin
    /// commits its own strong op at once, without CAB) and
    /// `IgnoreCausalContext` (strong ops carry an empty causal context),
    /// and hands the set to its executor (`SkipInvalidation`).
    pub planted: PlantedBugs,
    /// How this shard's operations across shards get their order
    /// (docs/cross-shard.md, "Order").
    pub mpo_order: MpoOrder,
    /// Reads at each of this many revisions before the newest final one
    /// are served ([`crate::Replica::keep_revisions`]; `etcdctl get --rev`);
    /// 0 serves the newest final revision only.
    pub revisions_kept: u64,
}

/// How MPOs are ordered across the shards they involve.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MpoOrder {
    /// The directory's group sequences MPO ids and tells each shard its
    /// index (what servers run).
    #[default]
    Sequencer,
    /// A genuine atomic multicast among the involved shards only: Skeen's
    /// protocol over groups (each shard's log gives an MPO a timestamp,
    /// the shards exchange them, and each logs the largest as the final
    /// one). Built in the simulator to measure against the sequencer; a
    /// replica rebuilt from a checkpoint does not carry its ordering
    /// state, so runs with it have no crashes, disk faults or membership
    /// changes.
    Genuine,
}

impl MpoOrder {
    /// Parse `sequencer` or `genuine` (`--mpo-order`).
    pub fn parse(s: &str) -> Result<MpoOrder, String> {
        match s {
            "sequencer" => Ok(MpoOrder::Sequencer),
            "genuine" => Ok(MpoOrder::Genuine),
            _ => Err(format!("--mpo-order is sequencer or genuine, not {s:?}")),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            id: ReplicaId(0),
            tentative_len_max: 100_000,
            stabilize_after_us: 50_000,
            txn_limits: TxnLimits::default(),
            early_tentative_views: true,
            schedule: Schedule::default(),
            session_ttl_us: 3_600_000_000,
            planted: PlantedBugs::NONE,
            mpo_order: MpoOrder::Sequencer,
            revisions_kept: REVISIONS_KEPT_DEFAULT,
        }
    }
}

/// How many past revisions a replica serves reads at by default.
pub const REVISIONS_KEPT_DEFAULT: u64 = 10_000;

/// Why a bug cannot be planted in a build without the `planted-bugs` cargo
/// feature (every configuration that refuses one says the same).
pub use creek_types::planted::PLANTED_BUGS_OFF;

/// Why a configuration is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field is out of its range.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

impl Config {
    /// A default configuration for replica `id`.
    pub fn for_replica(id: ReplicaId) -> Self {
        Config {
            id,
            ..Config::default()
        }
    }

    /// Check every field; replicas are only built from validated config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: &str| {
            Err(ConfigError::Invalid {
                field,
                reason: reason.to_owned(),
            })
        };
        if self.tentative_len_max == 0 {
            return invalid("tentative_len_max", "must be at least 1");
        }
        let l = &self.txn_limits;
        if l.key_bytes_max == 0 || l.value_bytes_max == 0 {
            return invalid("txn_limits", "key and value limits must be positive");
        }
        if l.write_bytes_max < l.key_bytes_max {
            return invalid(
                "txn_limits.write_bytes_max",
                "must be at least key_bytes_max",
            );
        }
        Ok(())
    }
}
