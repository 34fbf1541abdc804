//! The client port: each accepted connection admitted under the caps,
//! its TLS handshake done if the port has TLS, then served by its first
//! bytes — Creek's native protocol here ([`crate::native`]), gRPC by the
//! gRPC server (`Creek`, `Admin`), behind the limits, the authentication
//! before decoding and the idle watch ([`crate::limits`],
//! [`crate::idle`]).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use creek_proto::pb;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::server::TlsStream;
use tonic::transport::server::Connected;

use crate::call::check::FrontDoor;
use crate::config::ServerConfig;
use crate::limits::CappedStream;
use crate::node_loop::Fatal;
use crate::server::{publish, FatalCell};
use crate::service::{AdminService, CreekService};
use crate::tls::Tls;

/// What the client port serves: gRPC (`Creek`, `Admin`) and the native
/// protocol, both plaintext or both inside TLS.
pub(crate) struct Clients {
    pub(crate) listener: TcpListener,
    pub(crate) service: CreekService,
    pub(crate) admin: AdminService,
    pub(crate) front: FrontDoor,
    pub(crate) corked: Arc<crate::native::out::Corked>,
    pub(crate) tls: Option<Arc<Tls>>,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) fatal: FatalCell,
    pub(crate) stopping: Arc<AtomicBool>,
}

impl Clients {
    /// Serve clients until shutdown; a client API that stops on its own
    /// is the replica's failure.
    pub(crate) fn serve(self, config: &ServerConfig) -> tokio::task::JoinHandle<()> {
        // The decoder's limit sits above ours, so the service answers every
        // request up to it, and `Oversized` gives larger ones the same
        // answer (docs/security.md, "Limits").
        let limit = crate::limits::decode_limit(config.max_request_bytes);
        let caps = crate::limits::ConnectionCaps::new(
            config.connections_per_client_max,
            config.connections_max,
        );
        let streams_max = config.streams_per_connection_max;
        let resets_max = config.pending_reset_streams_max;
        let closes =
            crate::limits::Closes::new(self.front.metrics.client_connections_closed.clone());
        let timeouts = crate::limits::ClientTimeouts::of(config);
        let conns = crate::idle::Conns::new(timeouts, closes.clone());
        let auth = self.front.auth.clone();
        let (keepalive, keepalive_timeout) = crate::idle::KEEPALIVE;
        let router = tonic::transport::Server::builder()
            .max_concurrent_streams(streams_max)
            .concurrency_limit_per_connection(streams_max as usize)
            .http2_max_pending_accept_reset_streams(Some(resets_max))
            .http2_keepalive_interval(Some(keepalive))
            .http2_keepalive_timeout(Some(keepalive_timeout))
            .add_service(crate::limits::Oversized(crate::idle::Tracked {
                inner: crate::limits::Authenticated {
                    inner: pb::creek_server::CreekServer::new(self.service)
                        .max_decoding_message_size(limit),
                    auth: auth.clone(),
                },
                conns: conns.clone(),
            }))
            .add_service(crate::limits::Oversized(crate::idle::Tracked {
                inner: crate::limits::Authenticated {
                    inner: pb::admin_server::AdminServer::new(self.admin)
                        .max_decoding_message_size(limit),
                    auth,
                },
                conns: conns.clone(),
            }));
        let refusals = Arc::new(Refusals {
            counted: self.front.metrics.client_connections_refused.clone(),
            ..Refusals::default()
        });
        let native = Native {
            front: self.front,
            corked: self.corked,
            closes,
            limits: crate::native::NativeLimits {
                frame_bytes_max: limit,
                calls_max: streams_max as usize,
                timeouts,
            },
            shutdown: self.shutdown.clone(),
        };
        let mut shutdown = self.shutdown;
        let (listener, tls, fatal, stopping) = (self.listener, self.tls, self.fatal, self.stopping);
        tokio::spawn(async move {
            let stop = async move {
                let _ = shutdown.wait_for(|s| *s).await;
            };
            // Our own listener: tonic's tcp_nodelay applies only to sockets
            // it accepts itself, and Nagle's algorithm would hold each view
            // for a delayed ACK (~40 ms). Past a connection cap, a
            // connection is closed as soon as it is accepted.
            let result = match tls {
                None => {
                    let incoming = plain_incoming(listener, caps, native, refusals, conns);
                    router.serve_with_incoming_shutdown(incoming, stop).await
                }
                Some(tls) => {
                    let incoming = tls_incoming(listener, tls, caps, native, refusals, conns);
                    router.serve_with_incoming_shutdown(incoming, stop).await
                }
            };
            if let Err(e) = result {
                tracing::error!(error = %e, "the client API stopped");
                if !stopping.load(Ordering::Relaxed) {
                    publish(&fatal, Fatal::ClientApi(e.to_string()));
                }
            }
        })
    }
}

/// How long an accepted client connection may take to finish its TLS
/// handshake; until then it holds its slot under the connection caps.
const CLIENT_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the client port needs to serve the native protocol.
#[derive(Clone)]
struct Native {
    front: FrontDoor,
    corked: Arc<crate::native::out::Corked>,
    closes: Arc<crate::limits::Closes>,
    limits: crate::native::NativeLimits,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

impl Native {
    /// Serve one connection that said it speaks the native protocol.
    async fn serve(
        self,
        conn: (
            crate::limits::CappedStream,
            Option<rustls::ServerConnection>,
            SocketAddr,
        ),
    ) {
        let Native {
            front,
            corked,
            closes,
            limits,
            shutdown,
        } = self;
        crate::native::serve(front, conn, limits, (corked, closes), shutdown).await;
    }
}

/// Accept client connections until the gRPC server drops its end of the
/// returned stream (at shutdown; the listener closes, so the address is
/// free again). Each connection is admitted under the caps, with Nagle's
/// algorithm off (it would hold each view for a delayed ACK, ~40 ms), and
/// handed to `admitted` in a task of its own, so a slow one holds up no
/// one; `admitted` sends what the gRPC server should serve.
fn accept_clients<T, F, Fut>(
    listener: TcpListener,
    caps: Arc<crate::limits::ConnectionCaps>,
    over_cap: Option<crate::over_cap::OverCap>,
    admitted: F,
) -> impl tokio_stream::Stream<Item = std::io::Result<T>>
where
    T: Send + 'static,
    F: Fn(
            crate::limits::CappedStream,
            std::net::SocketAddr,
            mpsc::Sender<std::io::Result<T>>,
        ) -> Fut
        + Send
        + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = tx.closed() => return,
                accepted = listener.accept() => accepted,
            };
            let (stream, remote) = match accepted {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a client connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            // The slot is taken first, so connections still in their TLS
            // handshake or not yet sniffed count under the caps too.
            match crate::limits::CappedStream::admit(stream, &caps) {
                None => {}
                Some(Ok(stream)) => {
                    tokio::spawn(admitted(stream, remote, tx.clone()));
                }
                Some(Err((stream, cap))) => {
                    if let Some(over_cap) = &over_cap {
                        over_cap.answer(stream, cap, caps.cap(cap));
                    }
                }
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Client connections closed before they were served, by why: each kind
/// logged at most once per [`crate::throttle::LOGGED_EVERY`] (anyone who
/// reaches the port can cause them), all counted.
#[derive(Default)]
struct Refusals {
    counted: prometheus_client::metrics::counter::Counter,
    silent: crate::throttle::Throttle,
    handshake_failed: crate::throttle::Throttle,
    handshake_timed_out: crate::throttle::Throttle,
}

impl Refusals {
    fn refused(&self, kind: &crate::throttle::Throttle, remote: SocketAddr, why: &str) {
        self.counted.inc();
        if let Some(n) = kind.admit(std::time::Instant::now()) {
            tracing::info!(
                %remote,
                "refused a client connection: {why}{}",
                crate::throttle::unlogged(n, "creek_client_connections_refused_total")
            );
        }
    }
}

/// Plaintext client connections, each served by its first bytes
/// ([`serve_sniffed`]).
fn plain_incoming(
    listener: TcpListener,
    caps: Arc<crate::limits::ConnectionCaps>,
    native: Native,
    refusals: Arc<Refusals>,
    conns: Arc<crate::idle::Conns>,
) -> impl tokio_stream::Stream<Item = std::io::Result<Sniffed<CappedStream>>> {
    let over_cap = Some(crate::over_cap::OverCap::default());
    accept_clients(listener, caps, over_cap, move |stream, remote, tx| {
        let (native, refusals, conns) = (native.clone(), refusals.clone(), conns.clone());
        serve_sniffed(stream, remote, (native, refusals, conns), tx)
    })
}

/// Client connections through TLS: once its handshake is done, each is
/// served by its first plaintext bytes ([`serve_sniffed`]).
fn tls_incoming(
    listener: TcpListener,
    tls: Arc<Tls>,
    caps: Arc<crate::limits::ConnectionCaps>,
    native: Native,
    refusals: Arc<Refusals>,
    conns: Arc<crate::idle::Conns>,
) -> impl tokio_stream::Stream<Item = std::io::Result<Sniffed<TlsStream<CappedStream>>>> {
    // A TLS connection's protocol is known only after a handshake, which
    // the cap is there to spare: it is closed.
    accept_clients(listener, caps, None, move |stream, remote, tx| {
        let acceptor = tls.client_acceptor();
        let (native, refusals, conns) = (native.clone(), refusals.clone(), conns.clone());
        async move {
            let handshake =
                tokio::time::timeout(CLIENT_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
            match handshake {
                Ok(Ok(stream)) => {
                    serve_sniffed(stream, remote, (native, refusals, conns), tx).await;
                }
                Ok(Err(e)) => {
                    let why = format!("TLS handshake failed: {e}");
                    refusals.refused(&refusals.handshake_failed, remote, &why);
                }
                Err(_) => {
                    refusals.refused(
                        &refusals.handshake_timed_out,
                        remote,
                        "TLS handshake timed out",
                    );
                }
            }
        }
    })
}

/// A client connection as the sniff finds it: plaintext, or inside TLS.
trait ClientStream: AsyncRead + Unpin + Send + 'static {
    /// Its socket under the caps.
    fn capped(&mut self) -> &mut CappedStream;
    /// Its socket and TLS session, for the native protocol.
    fn into_native(self) -> (CappedStream, Option<rustls::ServerConnection>);
}

impl ClientStream for CappedStream {
    fn capped(&mut self) -> &mut CappedStream {
        self
    }

    fn into_native(self) -> (CappedStream, Option<rustls::ServerConnection>) {
        (self, None)
    }
}

impl ClientStream for TlsStream<CappedStream> {
    fn capped(&mut self) -> &mut CappedStream {
        let (io, _session) = TlsStream::get_mut(self);
        io
    }

    fn into_native(self) -> (CappedStream, Option<rustls::ServerConnection>) {
        let (stream, session) = self.into_inner();
        (stream, Some(session))
    }
}

/// Serve one admitted connection by its first bytes: the native protocol
/// here (inside its TLS session, if it has one), gRPC by handing it to the
/// gRPC server through `tx` with those bytes replayed (its idleness
/// watched from then on). One that sends fewer than four bytes in
/// [`crate::native::SNIFF_TIMEOUT`] is closed, counted and logged.
async fn serve_sniffed<S: ClientStream>(
    stream: S,
    remote: SocketAddr,
    (native, refusals, conns): (Native, Arc<Refusals>, Arc<crate::idle::Conns>),
    tx: mpsc::Sender<std::io::Result<Sniffed<S>>>,
) {
    match tokio::time::timeout(crate::native::SNIFF_TIMEOUT, Sniffed::read(stream)).await {
        Ok(Ok(sniffed)) if sniffed.first() == creek_proto::native::MAGIC => {
            let (stream, session) = sniffed.into_inner().into_native();
            native.serve((stream, session, remote)).await;
        }
        Ok(Ok(mut sniffed)) => {
            sniffed.get_mut().capped().watch_idle(&conns);
            let _ = tx.send(Ok(sniffed)).await;
        }
        Ok(Err(e)) => {
            tracing::debug!(%remote, error = %e, "a client connection closed before its first bytes");
        }
        Err(_) => {
            let why = format!(
                "it sent fewer than 4 bytes in {} s",
                crate::native::SNIFF_TIMEOUT.as_secs()
            );
            refusals.refused(&refusals.silent, remote, &why);
        }
    }
}

/// A stream whose first bytes were read to learn its protocol: its reads
/// give them back first, then read on from `inner`.
pub(crate) struct Sniffed<S> {
    first: [u8; 4],
    replayed: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> Sniffed<S> {
    /// Read `inner`'s first four bytes: an error if it closes before
    /// sending them. The wait is on the socket's readiness (a peer that
    /// sends a byte at a time costs a wake-up per byte); the caller bounds
    /// it.
    pub(crate) async fn read(mut inner: S) -> std::io::Result<Sniffed<S>> {
        let mut first = [0u8; 4];
        tokio::io::AsyncReadExt::read_exact(&mut inner, &mut first).await?;
        Ok(Sniffed {
            first,
            replayed: 0,
            inner,
        })
    }
}

impl<S> Sniffed<S> {
    /// The first four bytes.
    pub(crate) fn first(&self) -> [u8; 4] {
        self.first
    }

    fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The stream, without the bytes already read.
    fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Connected> Connected for Sniffed<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> S::ConnectInfo {
        self.inner.connect_info()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Sniffed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.replayed < this.first.len() {
            let rest = &this.first[this.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.replayed += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Sniffed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// The sniff reads the first bytes as they trickle in, and the stream
    /// still reads from its first byte after it.
    #[tokio::test]
    async fn first_bytes_come_one_at_a_time_and_reads_replay_them() {
        let (near, mut far) = tokio::io::duplex(64);
        let sender = tokio::spawn(async move {
            for b in b"CRK1 and the rest" {
                far.write_all(&[*b]).await.expect("write");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        });
        let mut sniffed = Sniffed::read(near).await.expect("four bytes");
        assert_eq!(sniffed.first(), *b"CRK1");
        sender.await.expect("sender");
        let mut two = [0u8; 2];
        sniffed.read_exact(&mut two).await.expect("read");
        assert_eq!(&two, b"CR");
        let mut rest = Vec::new();
        sniffed.read_to_end(&mut rest).await.expect("read");
        assert_eq!(rest, b"K1 and the rest");
        // A peer that closes after fewer bytes is an error, not a wait.
        let (near, mut far) = tokio::io::duplex(64);
        far.write_all(b"CR").await.expect("write");
        drop(far);
        let e = Sniffed::read(near).await.err().expect("closed early");
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
