//! Limits on what clients may send and hold open, where the gRPC stack
//! enforces them rather than the service (docs/security.md, "Limits"):
//!
//! * [`Oversized`]: one answer to a request that is too large. The gRPC
//!   decoder refuses a message longer than its limit from the message's
//!   5-byte length prefix alone (nothing of the body is buffered) and would
//!   answer `OUT_OF_RANGE`; this wrapper turns that answer into the
//!   `RESOURCE_EXHAUSTED` the service gives a request over
//!   `max_request_bytes`, so a client sees the same code whatever the size.
//! * [`ConnectionCaps`]: client connections open at once, from one address
//!   and in all; a connection past either cap is closed when accepted.
//! * [`Authenticated`]: with `[auth] enabled`, a call's credentials are
//!   checked from its headers before its message is decoded, so a caller
//!   without them makes the replica decode nothing.
//! * [`Closes`]: client connections the replica closes after serving them
//!   (idle, a frame stalled, a client reading too slowly), counted and
//!   logged at most once per interval per kind.
//!
//! Streams per connection and HTTP/2's reset bound are settings of the
//! tonic server (see `server.rs`).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::body::BoxBody;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::Service;
use tonic::server::NamedService;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::{Code, Status};

/// The decode limit of the `Creek` service for a request limit of
/// `max_request_bytes`: above it by a margin that covers the protobuf
/// framing of every request the service's own check accepts (a request is
/// measured as its procedure name and arguments in Creek's value encoding,
/// which is never larger than their protobuf form but for a few bytes per
/// value), so that the service, not the decoder, answers those.
pub fn decode_limit(max_request_bytes: usize) -> usize {
    max_request_bytes.saturating_mul(2).saturating_add(4096)
}

/// Whether `status` is tonic's refusal of a message over its decode limit.
fn decoder_refusal(status: &Status) -> bool {
    status.code() == Code::OutOfRange
        && status
            .message()
            .contains("decoded message length too large")
}

/// The answer to a message the decoder refused: tonic's message reads
/// "… found N bytes, the limit is: M bytes".
fn resource_exhausted(refused: &Status) -> Status {
    let numbers: Vec<&str> = refused
        .message()
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .collect();
    let message = match numbers.as_slice() {
        [found, limit, ..] => format!(
            "request of {found} bytes exceeds the limit of {limit} bytes this replica \
             decodes (2 × max_request_bytes + 4096)"
        ),
        _ => "request exceeds the size this replica decodes (2 × max_request_bytes + 4096)"
            .to_owned(),
    };
    Status::resource_exhausted(message)
}

/// A gRPC service whose "message too large" answers are
/// `RESOURCE_EXHAUSTED` (see the module docs).
#[derive(Clone, Debug)]
pub struct Oversized<S>(pub S);

impl<S: NamedService> NamedService for Oversized<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<Request<B>> for Oversized<S>
where
    S: Service<Request<B>, Response = Response<BoxBody>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<BoxBody>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Response<BoxBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let fut = self.0.call(req);
        Box::pin(async move {
            let response = fut.await?;
            // A refusal before the handler runs is a trailers-only response:
            // the status is in its headers.
            match Status::from_header_map(response.headers()) {
                Some(status) if decoder_refusal(&status) => {
                    Ok(resource_exhausted(&status).into_http())
                }
                _ => Ok(response),
            }
        })
    }
}

/// A gRPC service whose calls, with `[auth] enabled`, are authenticated
/// from their headers (a token, or a client certificate naming a user)
/// before their message is decoded; the user found rides in the request's
/// extensions, and the service checks the rights each call needs once it
/// has decoded it. The calls open to anyone (`Status`,
/// `Members`) and the replicas' own `Mpo` (checked by certificate in the
/// service) pass as they are.
#[derive(Clone, Debug)]
pub struct Authenticated<S> {
    /// The service.
    pub inner: S,
    /// Users and their tokens, when `[auth] enabled`.
    pub auth: Option<Arc<crate::auth::Auth>>,
}

impl<S: NamedService> NamedService for Authenticated<S> {
    const NAME: &'static str = S::NAME;
}

/// The methods any caller may call (the path's last part).
const OPEN_METHODS: [&str; 3] = ["Status", "Members", "Mpo"];

impl<S, B> Service<Request<B>> for Authenticated<S>
where
    S: Service<Request<B>, Response = Response<BoxBody>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<BoxBody>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Response<BoxBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if let Some(auth) = self.auth.as_ref().filter(|a| a.enabled()) {
            let method = req.uri().path().rsplit('/').next().unwrap_or_default();
            if !OPEN_METHODS.contains(&method) {
                let meta = tonic::metadata::MetadataMap::from_headers(req.headers().clone());
                let certs = req
                    .extensions()
                    .get::<tonic::transport::server::TlsConnectInfo<TcpConnectInfo>>()
                    .and_then(|i| i.peer_certs());
                match auth.authenticate(&meta, certs.as_deref().map(Vec::as_slice)) {
                    // The service checks the rights the call needs from
                    // this, without authenticating it again.
                    Ok(who) => {
                        req.extensions_mut().insert(who);
                    }
                    Err(status) => return Box::pin(std::future::ready(Ok(status.into_http()))),
                }
            }
        }
        Box::pin(self.inner.call(req))
    }
}

/// Why the replica closed a client connection it was serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// No call in progress and nothing received for `client_idle_timeout_ms`.
    Idle,
    /// A frame begun and not finished within `client_io_timeout_ms`.
    FrameStalled,
    /// A write made no progress within `client_io_timeout_ms`.
    WriteStalled,
    /// More than `client_out_bytes_max` of answers not read.
    SlowReader,
}

impl Close {
    /// What the log line and the client's error say.
    pub fn why(self, limits: &ClientTimeouts) -> String {
        match self {
            Close::Idle => format!(
                "idle: no call and nothing received for {} ms (client_idle_timeout_ms)",
                limits.idle.map_or(0, |d| d.as_millis())
            ),
            Close::FrameStalled => format!(
                "a frame was not finished within {} ms of its first byte (client_io_timeout_ms)",
                limits.io.as_millis()
            ),
            Close::WriteStalled => format!(
                "the client took no answer bytes for {} ms (client_io_timeout_ms)",
                limits.io.as_millis()
            ),
            Close::SlowReader => format!(
                "the client left more than {} bytes of answers unread (client_out_bytes_max)",
                limits.out_bytes_max
            ),
        }
    }
}

/// The time and space a client connection may take while served.
#[derive(Clone, Copy, Debug)]
pub struct ClientTimeouts {
    /// Closed with no call in progress and nothing received this long
    /// (`None`: never).
    pub idle: Option<std::time::Duration>,
    /// A frame must be whole, and a write progress, within this.
    pub io: std::time::Duration,
    /// Answers not yet read by the client, at most.
    pub out_bytes_max: usize,
}

impl ClientTimeouts {
    /// The settings of `config`.
    pub fn of(config: &crate::config::ServerConfig) -> ClientTimeouts {
        ClientTimeouts {
            idle: (config.client_idle_timeout_ms > 0)
                .then(|| std::time::Duration::from_millis(config.client_idle_timeout_ms)),
            io: std::time::Duration::from_millis(config.client_io_timeout_ms),
            out_bytes_max: config.client_out_bytes_max,
        }
    }
}

/// The client connections the replica closed, counted, with one log line
/// per kind per [`crate::throttle::LOGGED_EVERY`] (a client can cause them
/// at will).
#[derive(Debug, Default)]
pub struct Closes {
    counted: prometheus_client::metrics::counter::Counter,
    idle: crate::throttle::Throttle,
    frame_stalled: crate::throttle::Throttle,
    write_stalled: crate::throttle::Throttle,
    slow_reader: crate::throttle::Throttle,
}

impl Closes {
    /// Counted in `counted` (the `client_connections_closed` metric).
    pub fn new(counted: prometheus_client::metrics::counter::Counter) -> Arc<Closes> {
        Arc::new(Closes {
            counted,
            ..Closes::default()
        })
    }

    /// The replica closed `remote`'s connection, for `why`.
    pub fn closed(&self, close: Close, remote: std::net::SocketAddr, why: &str) {
        self.counted.inc();
        let throttle = match close {
            Close::Idle => &self.idle,
            Close::FrameStalled => &self.frame_stalled,
            Close::WriteStalled => &self.write_stalled,
            Close::SlowReader => &self.slow_reader,
        };
        if let Some(n) = throttle.admit(std::time::Instant::now()) {
            tracing::info!(
                %remote,
                "closed a client connection: {why}{}",
                crate::throttle::unlogged(n, "creek_client_connections_closed_total")
            );
        }
    }
}

/// Counts of open client connections, by address and in all.
#[derive(Debug)]
pub struct ConnectionCaps {
    per_client_max: usize,
    total_max: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    by_ip: BTreeMap<IpAddr, usize>,
    total: usize,
    /// Connections closed for a cap since the last warning.
    refused: u64,
}

/// Why a connection was closed at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapReached {
    /// Its address already holds `connections_per_client_max`.
    PerClient,
    /// The replica already holds `connections_max`.
    Total,
}

impl ConnectionCaps {
    /// Caps of `per_client_max` connections per address and `total_max`
    /// in all.
    pub fn new(per_client_max: usize, total_max: usize) -> Arc<Self> {
        Arc::new(ConnectionCaps {
            per_client_max,
            total_max,
            open: Mutex::new(Open::default()),
        })
    }

    /// A slot for a connection from `ip`, held until the slot is dropped;
    /// refused past a cap.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, CapReached> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let from_ip = open.by_ip.get(&ip).copied().unwrap_or(0);
        let refused = if open.total >= self.total_max {
            Some(CapReached::Total)
        } else if from_ip >= self.per_client_max {
            Some(CapReached::PerClient)
        } else {
            None
        };
        if let Some(cap) = refused {
            open.refused += 1;
            // One warning per power of two refused: a flood does not flood
            // the log.
            if open.refused.is_power_of_two() {
                let setting = match cap {
                    CapReached::PerClient => "connections_per_client_max",
                    CapReached::Total => "connections_max",
                };
                tracing::warn!(
                    client = %ip,
                    refused = open.refused,
                    "refused a client connection past {setting} = {} (logged at the 1st, 2nd, \
                     4th, 8th… refusal): the client is told on a plaintext port",
                    self.cap(cap)
                );
            }
            return Err(cap);
        }
        open.total += 1;
        *open.by_ip.entry(ip).or_insert(0) += 1;
        Ok(Slot {
            caps: Arc::clone(self),
            ip,
        })
    }

    /// The value of `cap`.
    pub fn cap(&self, cap: CapReached) -> usize {
        match cap {
            CapReached::PerClient => self.per_client_max,
            CapReached::Total => self.total_max,
        }
    }

    /// Connections open now from `ip`, and in all.
    pub fn open(&self, ip: IpAddr) -> (usize, usize) {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        (open.by_ip.get(&ip).copied().unwrap_or(0), open.total)
    }
}

/// One admitted connection's place under the caps.
#[derive(Debug)]
pub struct Slot {
    caps: Arc<ConnectionCaps>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.caps.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.by_ip.remove(&self.ip);
            }
        }
    }
}

/// An accepted client connection holding its [`Slot`] until it closes.
#[derive(Debug)]
pub struct CappedStream {
    stream: TcpStream,
    /// Its client's address.
    ip: IpAddr,
    /// `None` for a connection past a cap, kept only to be told so
    /// ([`crate::over_cap`]).
    _slot: Option<Slot>,
    /// Ends its reads once the connection idled (a gRPC connection).
    idle: Option<crate::idle::Watch>,
}

impl CappedStream {
    /// `stream` under the caps; past a cap, the stream without a slot and
    /// the cap it reached. `None` if its address is gone (it closed).
    pub fn admit(
        stream: TcpStream,
        caps: &Arc<ConnectionCaps>,
    ) -> Option<Result<Self, (Self, CapReached)>> {
        let ip = stream.peer_addr().ok()?.ip();
        let admitted = caps.admit(ip);
        let capped = |slot| CappedStream {
            stream,
            ip,
            _slot: slot,
            idle: None,
        };
        Some(match admitted {
            Ok(slot) => Ok(capped(Some(slot))),
            Err(cap) => Err((capped(None), cap)),
        })
    }

    /// From now on, end its reads once it has had no call in progress for
    /// the idle timeout of `conns` (its calls counted there).
    pub fn watch_idle(&mut self, conns: &Arc<crate::idle::Conns>) {
        if let Ok(remote) = self.stream.peer_addr() {
            self.idle = Some(crate::idle::Watch::new(remote, conns));
        }
    }

    /// Its client's address.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// The socket, and its place under the caps (held until the
    /// connection closes).
    pub fn into_parts(self) -> (TcpStream, Option<Slot>) {
        (self.stream, self._slot)
    }
}

impl Connected for CappedStream {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for CappedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.idle.as_mut().is_some_and(|w| w.ended(cx)) {
            // The end of the stream: hyper closes the connection.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CappedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_past_a_cap_are_refused_and_slots_come_back() {
        let caps = ConnectionCaps::new(2, 3);
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let first = caps.admit(a).expect("first");
        let _second = caps.admit(a).expect("second");
        assert_eq!(caps.admit(a).err(), Some(CapReached::PerClient));
        let _third = caps.admit(b).expect("another client");
        assert_eq!(caps.admit(b).err(), Some(CapReached::Total));
        drop(first);
        assert_eq!(caps.open(a), (1, 2));
        assert!(caps.admit(a).is_ok());
    }

    #[test]
    fn the_decoders_refusal_becomes_resource_exhausted_with_both_sizes() {
        let tonic_says = Status::out_of_range(
            "Error, decoded message length too large: found 10485770 bytes, the limit is: \
             2101248 bytes",
        );
        assert!(decoder_refusal(&tonic_says));
        let ours = resource_exhausted(&tonic_says);
        assert_eq!(ours.code(), Code::ResourceExhausted);
        assert!(ours.message().contains("10485770"), "{}", ours.message());
        assert!(ours.message().contains("2101248"), "{}", ours.message());
        assert!(ours.message().contains("max_request_bytes"));
        // The watch's own OUT_OF_RANGE (a resume point too old) is left alone.
        assert!(!decoder_refusal(&Status::out_of_range(
            "position 3 is gone"
        )));
    }

    #[test]
    fn the_decode_limit_sits_above_the_request_limit() {
        for max in [64, 1 << 20, 4 << 20] {
            assert!(decode_limit(max) > max + 1024);
        }
    }
}
