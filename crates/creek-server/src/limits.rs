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
                tracing::warn!(
                    client = %ip,
                    ?cap,
                    refused = open.refused,
                    "client connection closed: connection cap reached"
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
    _slot: Slot,
    /// The first bytes, read to learn the protocol ([`Self::first_bytes`]),
    /// and how many of them reads have handed on since.
    sniffed: [u8; SNIFFED],
    filled: usize,
    replayed: usize,
}

/// How many first bytes say which protocol a connection speaks.
const SNIFFED: usize = 4;

impl CappedStream {
    /// `stream` under the caps, or `None` (the stream closed) past a cap.
    pub fn admit(stream: TcpStream, caps: &Arc<ConnectionCaps>) -> Option<Self> {
        let ip = stream.peer_addr().ok()?.ip();
        let slot = caps.admit(ip).ok()?;
        Some(CappedStream {
            stream,
            _slot: slot,
            sniffed: [0; SNIFFED],
            filled: 0,
            replayed: 0,
        })
    }

    /// The socket, and its place under the caps (held until the
    /// connection closes). The bytes [`Self::first_bytes`] read are not
    /// in the socket any more: the caller knows them.
    pub fn into_parts(self) -> (TcpStream, Slot) {
        (self.stream, self._slot)
    }

    /// The first four bytes the peer sent; reads of the stream still
    /// begin with them. An error if it closed before sending four. The
    /// wait is on the socket's readiness (a peer that sends one byte at a
    /// time costs a wake-up per byte, not a poll per millisecond); a peer
    /// that stops after fewer waits here: the caller bounds the wait.
    pub async fn first_bytes(&mut self) -> std::io::Result<[u8; SNIFFED]> {
        use tokio::io::AsyncReadExt as _;
        while self.filled < SNIFFED {
            let n = self.stream.read(&mut self.sniffed[self.filled..]).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.filled += n;
        }
        Ok(self.sniffed)
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
        if this.replayed < this.filled {
            // The sniffed bytes first.
            let n = buf.remaining().min(this.filled - this.replayed);
            buf.put_slice(&this.sniffed[this.replayed..this.replayed + n]);
            this.replayed += n;
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

    /// The sniff reads the first bytes as they trickle in, and the stream
    /// still reads from its first byte after it.
    #[tokio::test]
    async fn first_bytes_come_one_at_a_time_and_reads_replay_them() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let sender = tokio::spawn(async move {
            let mut out = TcpStream::connect(addr).await.expect("connect");
            for b in b"CRK1 and the rest" {
                out.write_all(&[*b]).await.expect("write");
                out.flush().await.expect("flush");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        });
        let (socket, _) = listener.accept().await.expect("accept");
        let caps = Arc::new(ConnectionCaps::new(4, 4));
        let mut stream = CappedStream::admit(socket, &caps).expect("admitted");
        assert_eq!(stream.first_bytes().await.expect("four bytes"), *b"CRK1");
        assert_eq!(stream.first_bytes().await.expect("again"), *b"CRK1");
        let mut all = Vec::new();
        stream.read_to_end(&mut all).await.expect("read");
        assert_eq!(all, b"CRK1 and the rest");
        sender.await.expect("sender");
        // A peer that closes after fewer bytes is an error, not a wait.
        let sender = tokio::spawn(async move {
            let mut out = TcpStream::connect(addr).await.expect("connect");
            out.write_all(b"CR").await.expect("write");
        });
        let (socket, _) = listener.accept().await.expect("accept");
        let mut short = CappedStream::admit(socket, &caps).expect("admitted");
        sender.await.expect("sender");
        let e = short.first_bytes().await.expect_err("closed early");
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
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
