//! How big a frame and each count and length in it may be.

use super::*;

/// Size limits of frames, shared by [`encode`] and [`decode`].
///
/// All replicas of a cluster should use the same limits; a frame accepted
/// by the encoder is then accepted by every peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes in one frame, header included (default 16 MiB).
    pub frame_bytes_max: usize,
    /// Most ops in one [`GossipMessage::Ops`] (default 65 536).
    pub ops_per_message_max: usize,
    /// Most entries in one [`GossipMessage::Digest`], or ids in one
    /// [`GossipMessage::Pull`] or [`CabMessage::Forward`] (default 1 000 000).
    pub ids_per_message_max: usize,
    /// Most bytes in one procedure name, or in the name of the user an op
    /// carries (default 256).
    pub proc_name_bytes_max: usize,
    /// Most bytes in one call's arguments (default 4 MiB).
    pub args_bytes_max: usize,
    /// Most exception seqs in one op's causal context, as sent (default
    /// 1 000 000).
    pub dvv_exceptions_max: usize,
    /// Most bytes in one [`CabMessage::Raft`] payload (default 16 MiB).
    pub raft_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            frame_bytes_max: 16 << 20,
            ops_per_message_max: 65_536,
            ids_per_message_max: 1_000_000,
            proc_name_bytes_max: 256,
            args_bytes_max: 4 << 20,
            dvv_exceptions_max: 1_000_000,
            raft_bytes_max: 16 << 20,
        }
    }
}

impl Limits {
    /// The value of one limit.
    pub fn get(&self, limit: Limit) -> usize {
        match limit {
            Limit::FrameBytes => self.frame_bytes_max,
            Limit::OpsPerMessage => self.ops_per_message_max,
            Limit::IdsPerMessage => self.ids_per_message_max,
            Limit::ProcNameBytes => self.proc_name_bytes_max,
            Limit::ArgsBytes => self.args_bytes_max,
            Limit::DvvExceptions => self.dvv_exceptions_max,
            Limit::RaftBytes => self.raft_bytes_max,
        }
    }

    /// Checks that the limits make sense: every limit is at least 1, and
    /// no byte limit of a part of a frame exceeds the frame limit.
    pub fn validate(&self) -> Result<(), LimitsError> {
        for limit in Limit::ALL {
            if self.get(limit) == 0 {
                return Err(LimitsError::Zero { limit });
            }
        }
        for limit in [Limit::ProcNameBytes, Limit::ArgsBytes, Limit::RaftBytes] {
            let value = self.get(limit);
            if value > self.frame_bytes_max {
                return Err(LimitsError::ExceedsFrame {
                    limit,
                    value,
                    frame_bytes_max: self.frame_bytes_max,
                });
            }
        }
        Ok(())
    }
}

/// Names one field of [`Limits`]; displayed as the field name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// [`Limits::frame_bytes_max`].
    FrameBytes,
    /// [`Limits::ops_per_message_max`].
    OpsPerMessage,
    /// [`Limits::ids_per_message_max`].
    IdsPerMessage,
    /// [`Limits::proc_name_bytes_max`].
    ProcNameBytes,
    /// [`Limits::args_bytes_max`].
    ArgsBytes,
    /// [`Limits::dvv_exceptions_max`].
    DvvExceptions,
    /// [`Limits::raft_bytes_max`].
    RaftBytes,
}

impl Limit {
    /// Every limit.
    pub const ALL: [Limit; 7] = [
        Limit::FrameBytes,
        Limit::OpsPerMessage,
        Limit::IdsPerMessage,
        Limit::ProcNameBytes,
        Limit::ArgsBytes,
        Limit::DvvExceptions,
        Limit::RaftBytes,
    ];

    /// The name of the [`Limits`] field.
    pub fn name(self) -> &'static str {
        match self {
            Limit::FrameBytes => "frame_bytes_max",
            Limit::OpsPerMessage => "ops_per_message_max",
            Limit::IdsPerMessage => "ids_per_message_max",
            Limit::ProcNameBytes => "proc_name_bytes_max",
            Limit::ArgsBytes => "args_bytes_max",
            Limit::DvvExceptions => "dvv_exceptions_max",
            Limit::RaftBytes => "raft_bytes_max",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a [`Limits`] value is refused by [`Limits::validate`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitsError {
    /// A limit is 0.
    #[error("{limit} must be at least 1")]
    Zero {
        /// The limit.
        limit: Limit,
    },
    /// A part of a frame may be larger than a whole frame.
    #[error("{limit} = {value} exceeds frame_bytes_max = {frame_bytes_max}")]
    ExceedsFrame {
        /// The limit.
        limit: Limit,
        /// Its value.
        value: usize,
        /// The frame limit.
        frame_bytes_max: usize,
    },
}
