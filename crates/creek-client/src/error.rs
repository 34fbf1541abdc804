//! Why a call failed.
//!
//! An abort is *not* an error: a procedure that aborts deterministically
//! produces a view whose outcome is `Err(message)` (see [`crate::View`]).
//! An [`Error`] means the client could not learn the op's outcome: the
//! request was refused, the deadline passed, or the replica or the network
//! failed.

use std::error::Error as StdError;

use tonic::{Code, Status};

/// Why an invocation or a status query failed. The server's message is kept
/// verbatim in every variant that comes from a gRPC status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request was malformed: an unknown procedure, bad arguments or
    /// levels, or a bad replica address given to [`crate::Client::connect`].
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The request was too large or the replica is overloaded.
    #[error("resource exhausted: {0}")]
    ResourceExhausted(String),
    /// The call's deadline passed before its final view.
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),
    /// The replica is shutting down, its disk failed, or it could not be
    /// reached.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The connection failed in a way gRPC does not classify.
    #[error("transport error: {0}")]
    Transport(String),
    /// The server broke the protocol: the stream ended before the final
    /// view, or a view was malformed.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A watch asked for changes from a committed position the replica no
    /// longer holds (compacted, or the watcher fell that far behind).
    #[error("compacted: {message}")]
    Compacted {
        /// The oldest position the replica can resume a watch from.
        oldest: u64,
        /// The server's message.
        message: String,
    },
    /// [`crate::Client::register_procedures`] registered nothing: the
    /// source file did not compile (the compiler's errors, one per line as
    /// `line L:C: message`) or the cluster refused it for the reason given.
    #[error("not registered (nothing changed):\n{0}")]
    NotRegistered(String),
    /// A change of definitions was refused and changed nothing: a keyspace
    /// that exists with the other label or a bad name
    /// ([`crate::Client::create_keyspace`]), a user procedure to drop that
    /// does not exist ([`crate::Client::drop_procedure`]).
    #[error("refused: {0}")]
    Refused(String),
    /// The lease a call named expired, was revoked or was never granted
    /// (the server's message names it). Nothing was applied.
    #[error("{0}")]
    LeaseNotFound(String),
    /// The cluster checks users and the call carried no token, or one it
    /// does not know (mistyped, revoked, its user removed).
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The user lacks a right the call needs; the message names it ("user
    /// alice lacks write on keyspace default"). Nothing was applied.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The call's key belongs to another shard than the replica's (the
    /// client's shard map is out of date): nothing was applied. A
    /// [`crate::Cluster`] refreshes its map and sends the call again, under
    /// the same request id, to the owning shard.
    #[error("wrong shard: {message}")]
    WrongShard {
        /// The epoch of the replica's map.
        epoch: u64,
        /// The shard that owns the key under that map.
        shard: u16,
        /// The server's message.
        message: String,
    },
    /// Any other gRPC status.
    #[error("{code:?}: {message}")]
    Rpc {
        /// The gRPC status code.
        code: Code,
        /// The server's message.
        message: String,
    },
}

impl Error {
    /// Whether a new attempt at another replica may succeed: the replica
    /// could not be reached or refuses service. The request was then not
    /// started there, or its retry is deduplicated by its request id.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable(_) | Error::Transport(_))
    }
}

impl From<Status> for Error {
    fn from(status: Status) -> Self {
        let message = if status.message().is_empty() {
            status.code().description().to_string()
        } else {
            status.message().to_string()
        };
        match status.code() {
            Code::InvalidArgument => Error::InvalidArgument(message),
            Code::ResourceExhausted => Error::ResourceExhausted(message),
            Code::DeadlineExceeded => Error::DeadlineExceeded(message),
            Code::Unavailable => Error::Unavailable(message),
            Code::Unauthenticated => Error::Unauthenticated(message),
            Code::FailedPrecondition if message.starts_with(WRONG_SHARD) => Error::WrongShard {
                epoch: number_after(&message, "(map epoch ").unwrap_or(0),
                shard: number_after(&message, "goes to another shard: shard ")
                    .and_then(|s| u16::try_from(s).ok())
                    .unwrap_or(0),
                message,
            },
            Code::PermissionDenied => Error::PermissionDenied(message),
            Code::OutOfRange if status.metadata().contains_key("creek-compacted") => {
                let oldest = status
                    .metadata()
                    .get("creek-compacted")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                Error::Compacted { oldest, message }
            }
            // tonic's own client-side timeout surfaces as CANCELLED.
            Code::Cancelled if caused_by::<tonic::TimeoutExpired>(&status) => {
                Error::DeadlineExceeded(message)
            }
            Code::Unknown if caused_by::<tonic::transport::Error>(&status) => {
                Error::Transport(message)
            }
            // hyper cancels a request still queued on a connection that
            // closes (its replica was killed): it never reached a server.
            Code::Cancelled if caused_by::<hyper::Error>(&status) => Error::Transport(message),
            code => Error::Rpc { code, message },
        }
    }
}

/// The first word of a replica's refusal of a call on another shard's key.
const WRONG_SHARD: &str = "WRONG_SHARD";

/// The number right after the first `marker` in `message` that is
/// followed by one.
fn number_after(message: &str, marker: &str) -> Option<u64> {
    message.match_indices(marker).find_map(|(i, _)| {
        let rest = &message[i + marker.len()..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    })
}

impl From<tonic::transport::Error> for Error {
    fn from(e: tonic::transport::Error) -> Self {
        // `Display` of a transport error is only "transport error"; the
        // cause (connection refused, ...) is in its source chain, where
        // several layers repeat the same words.
        let mut parts: Vec<String> = Vec::new();
        let mut source = e.source();
        while let Some(s) = source {
            let part = s.to_string();
            if !part.is_empty() && !parts.iter().any(|p| p.contains(&part)) {
                parts.push(part);
            }
            source = s.source();
        }
        if parts.is_empty() {
            parts.push(e.to_string());
        }
        Error::Transport(parts.join(": "))
    }
}

/// Whether `T` is in `status`'s source chain.
fn caused_by<T: StdError + 'static>(status: &Status) -> bool {
    let mut source = status.source();
    while let Some(e) = source {
        if e.is::<T>() {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_shard_refusal_names_the_epoch_and_the_owner() {
        let message = "WRONG_SHARD: kv.put on key \"shard 7\" goes to another shard: shard 1 \
                       owns it (map epoch 12); this replica serves shard 0";
        assert_eq!(
            Error::from(Status::failed_precondition(message)),
            Error::WrongShard {
                epoch: 12,
                shard: 1,
                message: message.into(),
            }
        );
        // Another precondition stays a plain status.
        assert!(matches!(
            Error::from(Status::failed_precondition("not the leader")),
            Error::Rpc { .. }
        ));
    }

    #[test]
    fn status_codes_map_to_variants_with_the_server_message() {
        let cases = [
            (
                Status::invalid_argument("unknown procedure \"x\""),
                Error::InvalidArgument("unknown procedure \"x\"".into()),
            ),
            (
                Status::resource_exhausted("full"),
                Error::ResourceExhausted("full".into()),
            ),
            (
                Status::deadline_exceeded("late"),
                Error::DeadlineExceeded("late".into()),
            ),
            (
                Status::unavailable("stopping"),
                Error::Unavailable("stopping".into()),
            ),
            (
                Status::unauthenticated("no token"),
                Error::Unauthenticated("no token".into()),
            ),
            (
                Status::permission_denied("user a lacks write on keyspace default"),
                Error::PermissionDenied("user a lacks write on keyspace default".into()),
            ),
            (
                Status::internal("boom"),
                Error::Rpc {
                    code: Code::Internal,
                    message: "boom".into(),
                },
            ),
        ];
        // A CANCELLED a server sent is its answer, not a lost connection.
        assert!(!Error::from(Status::cancelled("stop")).is_unavailable());
        for (status, want) in cases {
            assert_eq!(Error::from(status), want);
        }
        assert!(Error::Unavailable(String::new()).is_unavailable());
        assert!(!Error::InvalidArgument(String::new()).is_unavailable());
    }

    #[test]
    fn an_empty_message_is_replaced_by_the_code_description() {
        let e = Error::from(Status::new(Code::Unavailable, ""));
        assert_eq!(
            e,
            Error::Unavailable("The service is currently unavailable".into())
        );
    }
}
