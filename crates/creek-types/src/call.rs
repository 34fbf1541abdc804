//! What a client asks a replica to run: a procedure call, and the client
//! request id that makes its retries take effect once.

use std::sync::Arc;

use bytes::Bytes;

/// A client's idempotency key: retries carrying the same id take effect once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientRequestId {
    /// The client (a random 64-bit id chosen by the client library).
    pub client: u64,
    /// The request's number within that client.
    pub seq: u64,
}

/// A procedure invocation as it travels with an op.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProcCall {
    /// Registered procedure name.
    pub name: Arc<str>,
    /// Encoded arguments; the procedure decides the encoding.
    pub args: Bytes,
    /// Idempotency key, if the client supplied one.
    pub request_id: Option<ClientRequestId>,
    /// Sequence numbers of the same client whose answers it has and which
    /// it sent once: their session entries are deleted with this op's writes
    /// (see the session table of the procedure room). Empty without a request id.
    pub acked: Vec<u64>,
    /// The op's time in µs (its timestamp's physical part), set by the
    /// replica that creates the op and not sent on the wire: session expiry
    /// compares it with the horizon.
    pub time_us: u64,
    /// Whether the op is strong, set like `time_us` (by the replica that
    /// creates the op and by the wire decoder from the op's level; never
    /// sent separately). A procedure that may write a strong keyspace runs
    /// only when it is set (DESIGN §14).
    pub strong: bool,
    /// The op's identity `(origin replica, seq)`, set like `time_us`; `None`
    /// for a local read-only op, which is never broadcast. User procedures
    /// see it as `op_id()` and seed `rand()` with it.
    pub op: Option<(u64, u64)>,
    /// The authenticated user who invoked it, set by the replica that
    /// received the call when replicas check users (`None` otherwise). It
    /// travels with the op, and every execution checks the user's rights
    /// in the state at the op's place in the order (the procedure room's auth rules).
    pub user: Option<Arc<str>>,
}

impl ProcCall {
    /// A call without a client request id.
    pub fn new(name: &str, args: impl Into<Bytes>) -> Self {
        ProcCall {
            name: Arc::from(name),
            args: args.into(),
            request_id: None,
            acked: Vec::new(),
            time_us: 0,
            strong: false,
            op: None,
            user: None,
        }
    }
}
