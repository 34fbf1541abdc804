//! Replica configuration: `Default` plus `validate`, as everywhere in Creek.

use creek_exec::mvcc::Schedule;
use creek_exec::TxnLimits;

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
    /// Planted bug (the simulator's `--plant-bug skip-invalidation`): the
    /// executor never invalidates readers. Only for validating the checkers;
    /// never set in production.
    pub planted_skip_invalidation: bool,
    /// Planted bug (`deliver-without-cab`): an origin commits its own strong
    /// op at once, without CAB. Never set in production.
    pub planted_deliver_without_cab: bool,
    /// Planted bug (`ignore-causal-context`): strong ops carry an empty
    /// causal context. Never set in production.
    pub planted_ignore_causal_context: bool,
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
            planted_skip_invalidation: false,
            planted_deliver_without_cab: false,
            planted_ignore_causal_context: false,
        }
    }
}

/// Why a configuration that plants a bug is refused in a build without the
/// `planted-bugs` cargo feature (every crate with such switches says the
/// same).
pub const PLANTED_BUGS_OFF: &str = "planted bugs are compiled out of this build (cargo feature \
     `planted-bugs`, for validating the simulator's checkers only)";

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
        let planted = self.planted_skip_invalidation
            || self.planted_deliver_without_cab
            || self.planted_ignore_causal_context;
        if planted && !cfg!(feature = "planted-bugs") {
            return invalid("planted_*", PLANTED_BUGS_OFF);
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
