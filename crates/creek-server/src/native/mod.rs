//! The server's side of the native client protocol
//! ([`creek_proto::native`]). One task per connection reads its frames,
//! checks each `Invoke` as gRPC does ([`crate::call::check`]) and hands it
//! to the node loop with a [`Call`] as where its replies go
//! ([`out`]).
//! The node loop queues a call's replies during its turn and writes each
//! connection's at the end of it, from its own thread, when nothing else
//! waits to be written there (no thread is woken to answer); what the
//! socket does not take at once waits, in order, for the connection's task.
//! A connection inside TLS is served the same way, its frames sealed and
//! opened in its session ([`tls`]).
//!
//! The checks are the gRPC service's, from the same place
//! ([`crate::call`]): the same limits, the same token check (the token
//! comes once, in `Hello`, and is checked on every call, so a revoked token
//! stops working at once), the same error codes. A
//! frame over the decode limit is answered `RESOURCE_EXHAUSTED` and its
//! body skipped; the connection goes on.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use creek_procs::auth::Need;
use creek_proto::native::{self, FrameReader, Header, Kind, Read};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tonic::metadata::MetadataMap;
use tonic::Status;

use crate::call::answer::{put_error, Gone};
use crate::call::check::FrontDoor;
use crate::limits::{ClientTimeouts, Close, Closes};
use crate::node_loop::messages::{Invocation, ReplyTo};

pub(crate) mod out;
pub(crate) mod tls;

use out::{Call, Corked, Out};

/// What one connection may send and hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NativeLimits {
    /// The largest frame body read (the gRPC decoder's limit).
    pub(crate) frame_bytes_max: usize,
    /// Calls in flight at once (gRPC's streams per connection).
    pub(crate) calls_max: usize,
    /// How long it may idle, stall a frame or a write, and what it may
    /// leave unread.
    pub(crate) timeouts: ClientTimeouts,
}

/// How long a connection may take to send its first bytes, which say
/// which protocol it speaks.
pub(crate) const SNIFF_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes read from a connection before its frames are answered:
/// a client that sends faster than the replica reads fills its socket,
/// not the replica's memory.
const READ_CHUNK_MAX: usize = 256 << 10;

/// Serve one native connection whose first bytes were [`native::MAGIC`]
/// (read by the accept loop's sniff; inside `tls`, its session, if it has
/// one) until the client closes it, it breaks the framing, the replica
/// stops, or it goes past one of its [`ClientTimeouts`] (closed, counted
/// and logged in `closes`).
pub(crate) async fn serve(
    front: FrontDoor,
    (stream, tls, remote): (
        crate::limits::CappedStream,
        Option<rustls::ServerConnection>,
        SocketAddr,
    ),
    limits: NativeLimits,
    (corked, closes): (Arc<Corked>, Arc<Closes>),
    mut shutdown: watch::Receiver<bool>,
) {
    let (socket, _slot) = stream.into_parts();
    let _open = Open::new(&front.metrics.native_connections);
    let socket = Arc::new(socket);
    let timeouts = limits.timeouts;
    // The session may hold the first frames already: they are read
    // before waiting on the socket.
    let inside_tls = tls.is_some();
    let mut unread = inside_tls;
    let certs = tls
        .as_ref()
        .and_then(|t| t.peer_certificates())
        .map(<[_]>::to_vec);
    let mut conn = Connection {
        out: Arc::new(Out::new(socket.clone(), timeouts.out_bytes_max, tls)),
        corked,
        front,
        limits,
        credentials: MetadataMap::new(),
        tls: inside_tls,
        certs,
        frames: FrameReader::new(limits.frame_bytes_max),
        deadlines: BTreeSet::new(),
    };
    let mut input = BytesMut::with_capacity(8 * 1024);
    // When it last received bytes or was seen with a call in flight.
    let mut busy_at = tokio::time::Instant::now();
    // When the frame not yet whole began.
    let mut frame_began: Option<tokio::time::Instant> = None;
    let closed = loop {
        let next_deadline = conn.deadlines.first().map(|(at, _, _)| *at);
        let idle_at = timeouts.idle.map(|idle| busy_at + idle);
        let stalled_at = frame_began.map(|began| began + timeouts.io);
        tokio::select! {
            biased;
            () = stopped(&mut shutdown) => break None,
            () = conn.out.wake.notified() => {
                if let Err(closed) = conn.out.flush(timeouts.io).await {
                    break closed;
                }
            }
            () = sleep_until(next_deadline) => conn.expire(),
            () = sleep_until(stalled_at) => break Some(Close::FrameStalled),
            () = sleep_until(idle_at) => {
                if conn.out.lock().calls_open() == 0 {
                    break Some(Close::Idle);
                }
                busy_at = tokio::time::Instant::now();
            }
            ready = readable(&socket, &mut unread) => {
                if ready.is_err() {
                    break None;
                }
                match conn.read_some(&socket, &mut input) {
                    Ok(true) => busy_at = tokio::time::Instant::now(),
                    Ok(false) | Err(_) => break None,
                }
                match conn.take_frames(&mut input).await {
                    Ok(taken) => {
                        if taken > 0 {
                            frame_began = None;
                        }
                        if !input.is_empty() || conn.frames.skipping() {
                            frame_began.get_or_insert(busy_at);
                        }
                    }
                    Err(Gone) => break conn.out.lock().overflowed.then_some(Close::SlowReader),
                }
            }
        }
    };
    if let Some(close) = closed {
        let why = close.why(&timeouts);
        if matches!(close, Close::Idle | Close::FrameStalled) {
            // Told to a client still reading (best effort: it may not be).
            let mut frames = BytesMut::new();
            put_error(
                &mut frames,
                0,
                &Status::unavailable(format!("connection closed: {why}")),
            );
            let st = conn.out.lock();
            let _ = conn.out.write(st, &frames);
        }
        closes.closed(close, remote, &why);
    }
    // Calls still open get nothing more: the node loop's next reply to
    // each fails, and it forgets them.
    conn.out.lock().broken = true;
}

/// Once the replica stops (or is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Sleep until `at`, or forever.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Once the socket has bytes to read, or at once the first time if
/// `unread`.
async fn readable(socket: &TcpStream, unread: &mut bool) -> std::io::Result<()> {
    if std::mem::take(unread) {
        return Ok(());
    }
    socket.readable().await
}

/// Read what the socket has into `input`, up to [`READ_CHUNK_MAX`]:
/// `Ok(false)` at its end.
fn read_plain(socket: &TcpStream, input: &mut BytesMut) -> std::io::Result<bool> {
    let mut read = 0;
    while read < READ_CHUNK_MAX {
        input.reserve(8 * 1024);
        match socket.try_read_buf(input) {
            Ok(0) => return Ok(false),
            Ok(n) => read += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// One count in the open connections' gauge, taken back however the
/// connection's task ends.
struct Open(prometheus_client::metrics::gauge::Gauge);

impl Open {
    fn new(gauge: &prometheus_client::metrics::gauge::Gauge) -> Open {
        gauge.inc();
        Open(gauge.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One connection's state.
struct Connection {
    out: Arc<Out>,
    corked: Arc<Corked>,
    front: FrontDoor,
    limits: NativeLimits,
    /// The `authorization` header the `Hello`'s token stands for.
    credentials: MetadataMap,
    /// Inside TLS (its session is in `out`).
    tls: bool,
    /// The certificates the client presented in its TLS handshake.
    certs: Option<Vec<rustls::pki_types::CertificateDer<'static>>>,
    frames: FrameReader,
    /// The calls with a deadline, soonest first, with whether each is
    /// strong (the deadline's error says so in the metrics).
    deadlines: BTreeSet<(tokio::time::Instant, u64, bool)>,
}

impl Connection {
    /// Read what the socket has into `input` (opened from its TLS
    /// records, if it has a session): `Ok(false)` at its end.
    fn read_some(&self, socket: &TcpStream, input: &mut BytesMut) -> std::io::Result<bool> {
        if self.tls {
            tls::read_some(socket, &self.out, input)
        } else {
            read_plain(socket, input)
        }
    }

    /// Take every whole frame out of `input` and answer it: how many there
    /// were; `Err` once the connection is gone.
    async fn take_frames(&mut self, input: &mut BytesMut) -> Result<usize, Gone> {
        let mut out = BytesMut::new();
        let mut taken = 0;
        while let Some(read) = self.frames.next(input) {
            taken += 1;
            match read {
                Read::Frame(header, body) => self.on_frame(header, body, &mut out).await,
                Read::Oversized(header) => {
                    let status = Status::resource_exhausted(format!(
                        "request of {} bytes exceeds the limit of {} bytes this replica \
                         decodes (2 × max_request_bytes + 4096)",
                        header.body_bytes, self.limits.frame_bytes_max
                    ));
                    put_error(&mut out, header.id, &status);
                }
            }
        }
        if out.is_empty() {
            return Ok(taken);
        }
        let st = self.out.lock();
        self.out.write(st, &out).map(|()| taken)
    }

    /// Answer one frame: `Ready` and refusals go to `out`; an accepted
    /// call's replies come from the node loop.
    async fn on_frame(&mut self, header: Header, body: Bytes, out: &mut BytesMut) {
        let received = Instant::now();
        match Kind::from_u8(header.kind) {
            Some(Kind::Hello) => {
                self.credentials = credentials(&body);
                native::put_frame(out, Kind::Ready, 0, &[]);
            }
            Some(Kind::Invoke) => {
                if let Err(status) = self.invoke(header.id, &body, received).await {
                    put_error(out, header.id, &status);
                }
            }
            _ => put_error(
                out,
                header.id,
                &Status::invalid_argument(format!(
                    "a frame of kind {} is not one a client sends",
                    header.kind
                )),
            ),
        }
    }

    /// Hand call `id` to the node loop, or say why not.
    #[allow(clippy::result_large_err)]
    async fn invoke(&mut self, id: u64, body: &[u8], received: Instant) -> Result<(), Status> {
        {
            let st = self.out.lock();
            if st.is_open(id) {
                // Its answers would be mixed with the open call's.
                return Err(Status::invalid_argument(format!(
                    "call id {id} is already in flight on this connection"
                )));
            }
            let open = st.calls_open();
            if open >= self.limits.calls_max {
                return Err(Status::resource_exhausted(format!(
                    "{open} calls already in flight on this connection (the limit): wait for \
                     one to finish"
                )));
            }
        }
        let (timeout, req) = native::parse_invoke(body).map_err(Status::invalid_argument)?;
        let principal =
            self.front
                .caller(&self.credentials, self.certs.as_deref(), &Need::Nothing)?;
        let (request, answer_after) = self.front.prepare(&req, timeout)?;
        let strong = request.strong;
        self.out.lock().open_call(id, self.limits.calls_max);
        let call = Call::new(
            self.out.clone(),
            self.corked.clone(),
            id,
            request.views,
            strong,
            received,
            self.front.metrics.clone(),
        );
        let inv = Invocation {
            request,
            answer_after,
            reply: ReplyTo::Native(call),
            received,
            principal,
        };
        if let Err(status) = self.front.submit(inv).await {
            // The node loop never had it: nothing else closed it.
            let closed = self.out.lock().close_call(id);
            assert!(
                closed.is_some(),
                "call {id} closed before it was handed over"
            );
            return Err(status);
        }
        if let Some(t) = timeout {
            let at = tokio::time::Instant::from_std(received) + t;
            self.deadlines.insert((at, id, strong));
            self.forget_closed();
        }
        Ok(())
    }

    /// Close the calls whose deadline passed before their closing view.
    fn expire(&mut self) {
        let now = tokio::time::Instant::now();
        let mut frames = BytesMut::new();
        let mut st = self.out.lock();
        while let Some(&(at, id, strong)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(op) = st.close_call(id) {
                let mut late = self.front.late(strong);
                if let Some(op) = op {
                    late = late.of(op, self.front.mpo.as_ref());
                }
                put_error(&mut frames, id, &late.deadline());
            }
        }
        if !frames.is_empty() {
            let _ = self.out.write(st, &frames);
        }
    }

    /// Forget the deadlines of calls that closed before them, once they
    /// are most of those kept (so each costs O(1) on average).
    fn forget_closed(&mut self) {
        let st = self.out.lock();
        if self.deadlines.len() < 2 * st.calls_open() + 64 {
            return;
        }
        self.deadlines.retain(|(_, id, _)| st.is_open(*id));
    }
}

/// The `authorization` header for a `Hello`'s token (none when empty or
/// not printable: the calls then fail `UNAUTHENTICATED` where a token is
/// needed, as a gRPC call without one does).
fn credentials(token: &[u8]) -> MetadataMap {
    let mut meta = MetadataMap::new();
    let token = String::from_utf8_lossy(token);
    let token = token.trim();
    if !token.is_empty() {
        if let Ok(value) = format!("Bearer {token}").parse() {
            meta.insert("authorization", value);
        }
    }
    meta
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_token_becomes_a_bearer_header() {
        let meta = credentials(b" creek_1_abc \n");
        assert_eq!(
            meta.get("authorization").and_then(|v| v.to_str().ok()),
            Some("Bearer creek_1_abc")
        );
        assert!(credentials(b"").get("authorization").is_none());
        assert!(credentials(b"bad\x01token").get("authorization").is_none());
    }
}
