//! Gossip configuration: `Default` plus `validate`, as everywhere in Creek.

use std::collections::BTreeSet;

use creek_core::ReplicaId;

/// How a gossip room behaves. Build it with struct-update syntax over
/// [`GossipConfig::default`] and let [`crate::Gossip::new`] validate it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GossipConfig {
    /// This replica.
    pub me: ReplicaId,
    /// The other replicas (not `me`, no duplicates). Eager pushes, digests
    /// and pulls go to them; garbage collection waits for every one of them.
    pub peers: Vec<ReplicaId>,
    /// Every this many ticks, a digest of the delivered counters goes to
    /// every peer (anti-entropy). At least 1.
    pub anti_entropy_every_ticks: u32,
    /// The most ops (or pulled ids) in one message. At least 1.
    pub ops_per_message_max: usize,
    /// The most bytes of op payload (an upper estimate of their encoding)
    /// in one message, so large values never make a frame past the wire's
    /// limit; an op larger than this goes alone. At least 1.
    pub message_bytes_max: usize,
    /// The most messages one digest or pull is answered with; the ops a peer
    /// still lacks beyond that go with the answer to its next digest. At
    /// least 1.
    pub reply_messages_max: usize,
    /// The most ops buffered because an earlier op of their origin is still
    /// missing. Beyond it, the newest are dropped (anti-entropy refetches
    /// them); an op so far ahead of its origin's delivered counter `c` that
    /// the ops `c+2..=seq` exceed this bound is dropped at once. 0 disables
    /// buffering.
    pub out_of_order_max: usize,
    /// The fewest ticks between two pulls of the same id. At least 1.
    pub pull_every_ticks: u32,
    /// Ops sent to a peer are not sent again, whatever its digests say,
    /// until this many ticks pass without the peer reporting them held
    /// (anti-entropy's retransmission timeout; see `inflight.rs`). At
    /// least 1.
    pub resend_after_ticks: u32,
    /// The retransmission timeout doubles, up to this, while a peer reports
    /// no progress. At least `resend_after_ticks`.
    pub resend_after_ticks_max: u32,
}

impl Default for GossipConfig {
    fn default() -> Self {
        GossipConfig {
            me: ReplicaId(0),
            peers: Vec::new(),
            anti_entropy_every_ticks: 10,
            ops_per_message_max: 1024,
            message_bytes_max: 4 << 20,
            reply_messages_max: 8,
            out_of_order_max: 65_536,
            pull_every_ticks: 5,
            resend_after_ticks: 20,
            resend_after_ticks_max: 320,
        }
    }
}

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

impl GossipConfig {
    /// The default configuration for replica `me` with these peers.
    pub fn new(me: ReplicaId, peers: impl IntoIterator<Item = ReplicaId>) -> Self {
        GossipConfig {
            me,
            peers: peers.into_iter().collect(),
            ..GossipConfig::default()
        }
    }

    /// Check every field; a gossip room is only built from a valid config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: &str| {
            Err(ConfigError::Invalid {
                field,
                reason: reason.to_owned(),
            })
        };
        let mut seen = BTreeSet::new();
        for &p in &self.peers {
            if p == self.me {
                return invalid("peers", "must not contain `me`");
            }
            if !seen.insert(p) {
                return invalid("peers", "must not contain duplicates");
            }
        }
        if self.anti_entropy_every_ticks == 0 {
            return invalid("anti_entropy_every_ticks", "must be at least 1");
        }
        if self.message_bytes_max == 0 {
            return invalid("message_bytes_max", "must be at least 1");
        }
        if self.ops_per_message_max == 0 {
            return invalid("ops_per_message_max", "must be at least 1");
        }
        if self.reply_messages_max == 0 {
            return invalid("reply_messages_max", "must be at least 1");
        }
        if self.pull_every_ticks == 0 {
            return invalid("pull_every_ticks", "must be at least 1");
        }
        if self.resend_after_ticks == 0 {
            return invalid("resend_after_ticks", "must be at least 1");
        }
        if self.resend_after_ticks_max < self.resend_after_ticks {
            return invalid(
                "resend_after_ticks_max",
                "must be at least resend_after_ticks",
            );
        }
        Ok(())
    }

    /// The most ops one answer (to a digest or a pull) carries.
    pub(crate) fn reply_ops_max(&self) -> usize {
        self.ops_per_message_max
            .saturating_mul(self.reply_messages_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        assert_eq!(GossipConfig::default().validate(), Ok(()));
        let c = GossipConfig::new(ReplicaId(1), [ReplicaId(2), ReplicaId(3)]);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn refuses_bad_fields() {
        let base = GossipConfig::new(ReplicaId(1), [ReplicaId(2)]);
        let bad = [
            GossipConfig {
                peers: vec![ReplicaId(1)],
                ..base.clone()
            },
            GossipConfig {
                peers: vec![ReplicaId(2), ReplicaId(2)],
                ..base.clone()
            },
            GossipConfig {
                anti_entropy_every_ticks: 0,
                ..base.clone()
            },
            GossipConfig {
                ops_per_message_max: 0,
                ..base.clone()
            },
            GossipConfig {
                reply_messages_max: 0,
                ..base.clone()
            },
            GossipConfig {
                pull_every_ticks: 0,
                ..base.clone()
            },
            GossipConfig {
                resend_after_ticks: 0,
                ..base.clone()
            },
            GossipConfig {
                resend_after_ticks: 10,
                resend_after_ticks_max: 9,
                ..base.clone()
            },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
        let no_buffer = GossipConfig {
            out_of_order_max: 0,
            ..base
        };
        assert_eq!(no_buffer.validate(), Ok(()));
    }
}
