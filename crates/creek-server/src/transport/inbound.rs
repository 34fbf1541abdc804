//! The inbound side of the peer transport: accepting connections from
//! peers, their handshakes, and reading their frames.
//!
//! This is what anyone who can reach the peer port talks to first, so
//! every resource a connection takes is bounded before the peer has proved
//! anything ([`InboundLimits`]):
//!
//! - at most `connections_max` inbound connections at once: one past the
//!   cap is closed as soon as it is accepted;
//! - the TLS and transport handshakes finish within
//!   the transport's `HANDSHAKE_TIMEOUT`;
//! - a frame's buffer grows as its bytes arrive, never from the length it
//!   declares: a peer that declares a 16 MiB frame and sends one byte costs
//!   one byte (plus the connection's fixed read buffer);
//! - once a frame's first byte has arrived, the whole frame must arrive
//!   within `read_timeout`; a connection may stay idle between frames (a peer
//!   with nothing to say still sends a digest every anti-entropy round);
//! - a frame declared longer than `frame_bytes_max` closes the connection
//!   (the stream cannot be resynchronized past a frame not read).
//!
//! Every refusal is counted ([`TransportStats`]) and logged at WARN, at
//! most one line per kind every [`LOGGED_EVERY`](crate::throttle::LOGGED_EVERY)
//! ([`crate::throttle`]). Not for outbound connections: those are this
//! replica's own (see the parent module).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use creek_core::ReplicaId;
use creek_wire::WIRE_VERSION;
use tokio::io::{AsyncRead, AsyncReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::{Reader, TransportStats, HANDSHAKE_LEN, HANDSHAKE_TIMEOUT, MAGIC};
use crate::faults::{Faults, Verdict};
use crate::node_loop::messages::Event;
use crate::throttle::{unlogged, Throttle};
use crate::tls::{names_replica, replica_name, Tls};

/// The read buffer of an inbound peer connection.
const READ_BUFFER_BYTES: usize = 64 << 10;
/// A frame's buffer grows by at most this much per read.
pub const READ_CHUNK_BYTES: usize = 64 << 10;

/// The bounds on inbound peer connections (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct InboundLimits {
    /// Inbound peer connections open at once.
    pub connections_max: usize,
    /// A frame, from its first byte, must be whole within this.
    pub read_timeout: Duration,
    /// The longest frame taken; a longer one closes the connection.
    pub frame_bytes_max: usize,
}

/// What every inbound connection of one replica shares.
pub(super) struct Inbound {
    pub(super) me: ReplicaId,
    /// The peers whose connections are accepted.
    pub(super) known: Arc<RwLock<HashSet<ReplicaId>>>,
    /// The node loop's channel.
    pub(super) events: mpsc::Sender<Event>,
    pub(super) faults: Arc<Faults>,
    pub(super) stats: Arc<TransportStats>,
    pub(super) limits: InboundLimits,
    pub(super) tls: Option<Arc<Tls>>,
    /// Inbound connections open now.
    pub(super) open: AtomicUsize,
    /// Connections refused at their handshake.
    pub(super) refused_log: Throttle,
    /// Connections refused over the cap.
    pub(super) cap_log: Throttle,
    /// Connections closed for what they sent after their handshake.
    pub(super) closed_log: Throttle,
}

impl Inbound {
    /// A connection refused at or before its handshake.
    fn refused(&self, remote: SocketAddr, why: &str) {
        self.stats
            .refused_connections
            .fetch_add(1, Ordering::Relaxed);
        if let Some(n) = self.refused_log.admit(std::time::Instant::now()) {
            tracing::warn!(
                %remote,
                "refused a peer connection: {why}{}",
                unlogged(n, "creek_peer_connections_refused")
            );
        }
    }

    /// A connection refused because `open` are open already.
    fn over_cap(&self, remote: SocketAddr, open: usize) {
        self.stats
            .refused_connections
            .fetch_add(1, Ordering::Relaxed);
        if let Some(n) = self.cap_log.admit(std::time::Instant::now()) {
            tracing::warn!(
                %remote,
                "refused a peer connection: {open} inbound peer connections are open, the most \
                 peer_connections_max = {} allows (a group needs one per peer; raise it for a \
                 larger group, or find what else connects to the peer port){}",
                self.limits.connections_max,
                unlogged(n, "creek_peer_connections_refused")
            );
        }
    }

    /// A connection from `from` closed for what it sent.
    fn closed(&self, from: ReplicaId, remote: SocketAddr, why: &str) {
        self.stats
            .closed_connections
            .fetch_add(1, Ordering::Relaxed);
        if let Some(n) = self.closed_log.admit(std::time::Instant::now()) {
            tracing::warn!(
                %from, %remote,
                "closed a peer connection: {why}{}",
                unlogged(n, "creek_peer_connections_closed")
            );
        }
    }
}

/// Counts a connection as open while it lives.
struct Open(Arc<Inbound>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(super) async fn accept(listener: TcpListener, ctx: Arc<Inbound>) {
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a peer connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let open = ctx.open.fetch_add(1, Ordering::Relaxed);
        let guard = Open(ctx.clone());
        if open >= ctx.limits.connections_max {
            drop(stream);
            drop(guard);
            ctx.over_cap(remote, open);
            continue;
        }
        let _ = stream.set_nodelay(true);
        tokio::spawn(inbound_conn(stream, remote, guard));
    }
}

/// Read the transport handshake; the sender's id if it is a known peer
/// of this group addressing this replica.
pub async fn read_handshake(
    r: &mut (impl AsyncRead + Unpin),
    me: ReplicaId,
    known: &RwLock<HashSet<ReplicaId>>,
) -> Result<ReplicaId, &'static str> {
    let mut h = [0u8; HANDSHAKE_LEN];
    r.read_exact(&mut h).await.map_err(|_| "no handshake")?;
    let from = ReplicaId(u16::from_be_bytes([h[4], h[5]]));
    let to = ReplicaId(u16::from_be_bytes([h[6], h[7]]));
    let ok = &h[..3] == MAGIC
        && h[3] == WIRE_VERSION
        && to == me
        && known
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&from);
    if ok {
        Ok(from)
    } else {
        Err("bad handshake (not a Creek peer of this group, or another wire version)")
    }
}

/// The TLS and transport handshakes of an inbound connection: the reader
/// of its frames and the peer it comes from.
async fn accept_peer(
    stream: TcpStream,
    me: ReplicaId,
    known: &RwLock<HashSet<ReplicaId>>,
    tls: Option<&Tls>,
) -> Result<(Reader, ReplicaId), String> {
    let Some(tls) = tls else {
        let mut stream = stream;
        let from = read_handshake(&mut stream, me, known).await?;
        return Ok((Box::new(stream), from));
    };
    let mut s = tls
        .peer_acceptor()
        .accept(stream)
        .await
        .map_err(|e| format!("TLS handshake failed ({e})"))?;
    let from = read_handshake(&mut s, me, known).await?;
    let bound = s
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .is_some_and(|c| names_replica(c, from));
    if !bound {
        return Err(format!(
            "the peer claims to be replica {} but its certificate does not name {}",
            from.0,
            replica_name(from)
        ));
    }
    Ok((Box::new(s), from))
}

/// Why a connection stopped in the middle of a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Cut {
    /// The peer closed it, or the socket failed.
    Gone,
    /// It declared a frame longer than `frame_bytes_max`.
    Oversized(usize),
}

/// Read the rest of a frame whose first byte is `first` into `buf`
/// (empty), growing it as the bytes arrive, [`READ_CHUNK_BYTES`] at a time
/// (the allocation doubles as it grows: at most about twice the bytes that
/// arrived and a chunk, never what the length declared).
pub async fn read_frame(
    stream: &mut (impl AsyncRead + Unpin),
    first: u8,
    buf: &mut BytesMut,
    frame_bytes_max: usize,
) -> Result<Bytes, Cut> {
    let mut len = [first, 0, 0, 0];
    stream
        .read_exact(&mut len[1..])
        .await
        .map_err(|_| Cut::Gone)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > frame_bytes_max {
        return Err(Cut::Oversized(len));
    }
    while buf.len() < len {
        let want = (len - buf.len()).min(READ_CHUNK_BYTES);
        buf.reserve(want);
        let got = (&mut *stream)
            .take(want as u64)
            .read_buf(buf)
            .await
            .map_err(|_| Cut::Gone)?;
        if got == 0 {
            return Err(Cut::Gone);
        }
    }
    Ok(buf.split().freeze())
}

async fn inbound_conn(stream: TcpStream, remote: SocketAddr, open: Open) {
    let ctx = &open.0;
    let accepted = tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        accept_peer(stream, ctx.me, &ctx.known, ctx.tls.as_deref()),
    )
    .await
    .unwrap_or_else(|_| Err("handshake timed out".into()));
    let (stream, from) = match accepted {
        Ok(x) => x,
        Err(why) => return ctx.refused(remote, &why),
    };
    // Frames are read through a buffer: a length and its frame, and the
    // frames that arrived with them, in one read from the socket.
    let mut stream = BufReader::with_capacity(READ_BUFFER_BYTES, stream);
    let mut buf = BytesMut::new();
    let limits = ctx.limits;
    loop {
        // Idle between frames: no deadline.
        let first = match stream.read_u8().await {
            Ok(b) => b,
            Err(_) => return,
        };
        let read = read_frame(&mut stream, first, &mut buf, limits.frame_bytes_max);
        let frame = match tokio::time::timeout(limits.read_timeout, read).await {
            Ok(Ok(frame)) => frame,
            Ok(Err(Cut::Gone)) => return,
            Ok(Err(Cut::Oversized(len))) => {
                let why = format!(
                    "it declared a frame of {len} bytes, over the {} the wire limits allow",
                    limits.frame_bytes_max
                );
                return ctx.closed(from, remote, &why);
            }
            Err(_) => {
                let why = format!(
                    "a frame was not whole within peer_read_timeout_ms = {} after its first byte",
                    limits.read_timeout.as_millis()
                );
                return ctx.closed(from, remote, &why);
            }
        };
        match ctx.faults.judge(from) {
            Verdict::Drop => {
                ctx.stats.dropped_faults.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // Latency is added on the sending side only.
            Verdict::Pass(_) => {}
        }
        ctx.stats.frames_received.fetch_add(1, Ordering::Relaxed);
        let received = std::time::Instant::now();
        let event = Event::Frame {
            from,
            frame,
            received,
        };
        if ctx.events.send(event).await.is_err() {
            return; // the node loop has stopped
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame declared long and sent slowly: the buffer holds what
    /// arrived, not what was declared.
    #[tokio::test]
    async fn a_frame_buffer_grows_with_the_bytes_that_arrive() {
        let (mut tx, mut rx) = tokio::io::duplex(1 << 20);
        let mut buf = BytesMut::new();
        let reading = tokio::spawn(async move {
            let r = read_frame(&mut rx, 0x01, &mut buf, 16 << 20).await;
            (r.is_ok(), buf.capacity())
        });
        use tokio::io::AsyncWriteExt;
        // 0x01_00_00_00 = 16 MiB declared; 1,000 bytes sent, then closed.
        tx.write_all(&[0, 0, 0]).await.expect("duplex");
        tx.write_all(&[7u8; 1000]).await.expect("duplex");
        drop(tx);
        let (whole, capacity) = reading.await.expect("the reader ends");
        assert!(!whole, "a frame cut short is not taken");
        assert!(
            capacity <= 2 * READ_CHUNK_BYTES,
            "capacity {capacity} follows the bytes that arrived, not the 16 MiB declared"
        );
    }

    /// A frame over the limit is refused from its length alone; one within
    /// it arrives whole.
    #[tokio::test]
    async fn frames_over_the_limit_are_refused_from_their_length() {
        let mut over: &[u8] = &[0, 1, 1];
        let mut buf = BytesMut::new();
        assert!(matches!(
            read_frame(&mut over, 0, &mut buf, 256).await,
            Err(Cut::Oversized(257))
        ));
        let mut whole = vec![0u8, 0, 200];
        whole.extend(std::iter::repeat_n(9u8, 200));
        let frame = read_frame(&mut whole.as_slice(), 0, &mut buf, 256).await;
        assert!(matches!(frame, Ok(f) if f.len() == 200 && f.iter().all(|&b| b == 9)));
    }
}
