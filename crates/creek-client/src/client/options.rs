//! How a [`Client`](super::Client) reaches and authenticates to a
//! cluster ([`ConnectOptions`], the token it sends) and the options and
//! ids of one call ([`CallOptions`], [`RequestId`]).

use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::Status;

use crate::tls::TlsOptions;
use crate::Error;
use creek_proto::pb;

/// How a [`Client`](super::Client) reaches and authenticates to a cluster.
#[derive(Clone)]
pub struct ConnectOptions {
    /// TLS (a cluster with a `[tls]` table); plaintext if `None`.
    pub tls: Option<TlsOptions>,
    /// A token (`creek_<id>_<secret>`) for a cluster with `[auth] enabled`.
    pub token: Option<String>,
    /// Send invocations over gRPC too. By default a client invokes over
    /// Creek's native protocol (inside TLS when `tls` is set), which
    /// answers sooner (docs/protocol.md, "The native client protocol").
    pub grpc_only: bool,
    /// Keep the client cache (on by default): the client's own
    /// acknowledged writes of plain keys (`kv.put`, `kv.delete`,
    /// `kv.mput`, `kv.incr`, `kv.cas`, `kv.transfer`) are laid over its
    /// snapshot reads of those keys until its read time passes their
    /// commit times (docs/snapshot-reads.md, "The client cache"). Off, a
    /// snapshot read shows the client's writes once they committed and
    /// their final views came back.
    pub cache: bool,
    /// The most bytes of keys and values the cache holds (1 MiB by
    /// default). A write that does not fit is acknowledged at its commit
    /// instead (a weak call returns once its final view came), and the
    /// client's snapshot reads are sent at its commit time.
    pub cache_bytes_max: usize,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            tls: None,
            token: None,
            grpc_only: false,
            cache: true,
            cache_bytes_max: crate::cache::CACHE_BYTES_MAX_DEFAULT,
        }
    }
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("tls", &self.tls.is_some())
            .field("token", &self.token.as_ref().map(|_| "<secret>"))
            .field("grpc_only", &self.grpc_only)
            .field("cache", &self.cache)
            .field("cache_bytes_max", &self.cache_bytes_max)
            .finish()
    }
}

/// A connection to one replica, with the caller's token on every call.
pub(crate) type Channel = InterceptedService<tonic::transport::Channel, Credentials>;

/// The `authorization: Bearer <token>` header every call carries, if the
/// client was given a token (a cluster with `[auth] enabled`).
#[derive(Clone, Default)]
pub(crate) struct Credentials(Option<MetadataValue<Ascii>>);

impl Credentials {
    pub(super) fn new(token: Option<&str>) -> Result<Credentials, Error> {
        let Some(token) = token else {
            return Ok(Credentials(None));
        };
        let value = format!("Bearer {}", token.trim()).parse().map_err(|_| {
            Error::InvalidArgument("the token is not printable ASCII (creek_<id>_<secret>)".into())
        })?;
        Ok(Credentials(Some(value)))
    }
}

impl tonic::service::Interceptor for Credentials {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// Options of one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// Deadline for the closing view, from the invocation. Sent to the
    /// server as the gRPC timeout; when it passes the Correctable closes
    /// with [`Error::DeadlineExceeded`], carrying the server's reason (no
    /// quorum, for one). A server that stays silent is given up on here
    /// a quarter second later.
    pub timeout: Option<Duration>,
    /// With [`Levels::Weak`](crate::Levels::Weak): also receive the weak op's final view once it
    /// is committed, so the caller learns whether its preliminary view held.
    pub weak_final: bool,
    /// Send the call under this request id instead of the client's next
    /// one: to learn the outcome of an earlier call whose answer was lost
    /// (a deadline, a crash), send it again with its id. The cluster
    /// applies a request id once, and answers a retry with its outcome.
    pub request_id: Option<RequestId>,
    /// When a preliminary view may leave (docs/api.md, "Durable weak
    /// writes"): at once (`None`, the default), once the replica's write
    /// of the op is durable (`Local`), or once a majority of the replicas
    /// hold it durably (`Majority`); always before the op commits.
    pub durability: pb::Durability,
    /// With [`Levels::Snapshot`](crate::Levels::Snapshot) and a read-only
    /// call: read the committed state right after the op at this revision
    /// (its 1-based place in the committed order; `etcdctl get --rev`). A
    /// revision the replica no longer keeps, or has not committed yet, is
    /// refused as out of range (docs/api.md, "Versions and revisions").
    pub revision: Option<u64>,
}

/// A request's id: the client's id and the request's number within it.
/// Written `CLIENT:SEQ` with the client id in hex (`3f9a1c2b7d4e5f60:1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestId {
    /// The client's id (never zero).
    pub client: u64,
    /// The request's number within the client.
    pub seq: u64,
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}:{}", self.client, self.seq)
    }
}

impl std::str::FromStr for RequestId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("request id {s:?} is not CLIENT:SEQ (a hex client id, a number)");
        let (client, seq) = s.split_once(':').ok_or_else(bad)?;
        let client = u64::from_str_radix(client, 16).map_err(|_| bad())?;
        let seq = seq.parse().map_err(|_| bad())?;
        if client == 0 {
            return Err(format!("request id {s:?}: the client id cannot be zero"));
        }
        Ok(RequestId { client, seq })
    }
}
