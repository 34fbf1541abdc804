//! Peer transport over TCP.
//!
//! Each replica keeps one outbound connection to every peer and accepts one
//! inbound connection from each. A connection opens with a handshake —
//! `b"CRK"`, the wire version, the sender's id and the receiver's id (u16,
//! big-endian) — and then carries frames: a u32 big-endian length and one
//! `creek-wire` frame (which carries its own version byte).
//!
//! Backpressure and bounds: frames toward a peer wait in a bounded queue of
//! `peer_queue_frames`; when it is full (the peer is slow or unreachable) new
//! frames are dropped and counted. The protocol tolerates loss — raft
//! retransmits, gossip repairs by anti-entropy and pulls — so dropping is
//! safe, and it keeps the node loop from ever blocking on a socket. Inbound
//! frames go to the node loop through a bounded channel; when the loop is
//! behind, the reader stops reading and TCP pushes back on the sender.
//!
//! Outbound connections are retried with exponential backoff (50 ms to
//! 1 s), also when the peer closes them right after the handshake (it
//! refuses this replica, e.g. one removed from the group but still
//! running); frames queued while a peer is down are dropped at the queue
//! bound. Refused inbound connections are logged at most once per 10 s,
//! with the count of those not logged.
//!
//! The peers change with the group ([`Transport::set_peers`]): a new member
//! gets a connection (and its inbound connections are accepted), a removed
//! one loses its outbound connection.
//!
//! With TLS ([`crate::tls`]) every connection is mutual TLS first, and the
//! handshake travels inside it: an inbound connection is accepted only if
//! the certificate the peer presented is bound to the sender id its
//! handshake claims, and an outbound one only if the replica dialed
//! presents the certificate of the id dialed.
//!
//! Faults ([`crate::faults`]) are applied here on this replica's side of
//! each link: loss and partitions drop frames in both directions; latency
//! is added to the frames this replica sends, which keep their order.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use creek_core::ReplicaId;
use creek_wire::WIRE_VERSION;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::faults::{Faults, Verdict};
use crate::node_loop::Event;
use crate::tls::{names_replica, replica_name, Tls};

/// How long a new connection may take to finish its TLS and transport
/// handshakes.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// One direction of a peer connection, plaintext or TLS.
type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

const MAGIC: &[u8; 3] = b"CRK";
const HANDSHAKE_LEN: usize = 8;
/// The read buffer of an inbound peer connection.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// Transport counters.
#[derive(Debug, Default)]
pub struct TransportStats {
    /// Frames written to sockets.
    pub frames_sent: AtomicU64,
    /// Bytes written (frame headers included).
    pub bytes_sent: AtomicU64,
    /// Frames received and handed to the node.
    pub frames_received: AtomicU64,
    /// Frames dropped because a peer's queue was full.
    pub dropped_full: AtomicU64,
    /// Frames dropped by injected faults.
    pub dropped_faults: AtomicU64,
    /// Inbound connections refused (bad handshake, unknown peer, failed
    /// TLS handshake, a certificate not bound to the claimed id).
    pub refused_connections: AtomicU64,
}

/// Frames queued together go out in one write.
type Queued = (Instant, Vec<Bytes>);

struct Peer {
    queue: mpsc::Sender<Queued>,
    connected: Arc<AtomicBool>,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

/// The peer transport of one replica.
pub struct Transport {
    me: ReplicaId,
    peers: RwLock<HashMap<ReplicaId, Peer>>,
    /// The peers whose inbound connections are accepted.
    known: Arc<RwLock<HashSet<ReplicaId>>>,
    runtime: tokio::runtime::Handle,
    queue_frames: usize,
    faults: Arc<Faults>,
    stats: Arc<TransportStats>,
    tls: Option<Arc<Tls>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Transport {
    /// Start connecting to `peers` and accepting on `listener`; inbound
    /// frames go to `inbound`; with `tls`, every link is mutual TLS. Must
    /// run inside a tokio runtime.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        me: ReplicaId,
        peers: &[(ReplicaId, SocketAddr)],
        listener: TcpListener,
        inbound: mpsc::Sender<Event>,
        faults: Arc<Faults>,
        queue_frames: usize,
        frame_bytes_max: usize,
        tls: Option<Arc<Tls>>,
    ) -> Transport {
        let stats = Arc::new(TransportStats::default());
        let known = Arc::new(RwLock::new(HashSet::new()));
        let accept = tokio::spawn(accept(
            listener,
            Arc::new(Inbound {
                me,
                known: known.clone(),
                events: inbound,
                faults: faults.clone(),
                stats: stats.clone(),
                frame_bytes_max,
                tls: tls.clone(),
                refusals: Mutex::new(Refusals::default()),
            }),
        ));
        let transport = Transport {
            me,
            peers: RwLock::new(HashMap::new()),
            known,
            runtime: tokio::runtime::Handle::current(),
            queue_frames,
            faults,
            stats,
            tls,
            accept,
        };
        transport.set_peers(peers);
        transport
    }

    /// Connect to exactly these peers from now on: new ones (or ones whose
    /// address changed) get a connection, and are accepted inbound; others
    /// lose their outbound connection (inbound ones stay accepted: the node
    /// decides what it takes from a peer that left).
    pub fn set_peers(&self, peers: &[(ReplicaId, SocketAddr)]) {
        let mut table = self.peers.write().unwrap_or_else(PoisonError::into_inner);
        table.retain(|id, p| {
            let keep = peers.contains(&(*id, p.addr));
            if !keep {
                p.task.abort();
            }
            keep
        });
        for &(id, addr) in peers {
            if id == self.me || table.contains_key(&id) {
                continue;
            }
            let (tx, rx) = mpsc::channel(self.queue_frames);
            let connected = Arc::new(AtomicBool::new(false));
            let task = self.runtime.spawn(outbound(
                self.me,
                id,
                addr,
                rx,
                connected.clone(),
                self.stats.clone(),
                self.tls.clone(),
            ));
            table.insert(
                id,
                Peer {
                    queue: tx,
                    connected,
                    addr,
                    task,
                },
            );
        }
        // Inbound connections stay accepted from a peer that left: a
        // removed replica hands over its last ops by gossip.
        self.known
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(table.keys().copied());
    }

    /// Queue frames for `to` to go out in one write (so the peer reads them
    /// in one go and handles them in one turn); never blocks. Dropped (and
    /// counted) when the peer's queue is full, the peer is unknown or a
    /// fault says so; faults judge the frames as one.
    pub fn send_all(&self, to: ReplicaId, frames: Vec<Bytes>) {
        if frames.is_empty() {
            return;
        }
        let table = self.peers.read().unwrap_or_else(PoisonError::into_inner);
        let Some(peer) = table.get(&to) else {
            return;
        };
        let due = match self.faults.judge(to) {
            Verdict::Drop => {
                self.stats
                    .dropped_faults
                    .fetch_add(frames.len() as u64, Ordering::Relaxed);
                return;
            }
            Verdict::Pass(delay) => Instant::now() + delay,
        };
        let n = frames.len() as u64;
        if peer.queue.try_send((due, frames)).is_err() {
            self.stats.dropped_full.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Each peer: address and whether the outbound connection is up.
    pub fn peers(&self) -> Vec<(ReplicaId, SocketAddr, bool)> {
        let mut v: Vec<_> = self
            .peers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(id, p)| (*id, p.addr, p.connected.load(Ordering::Relaxed)))
            .collect();
        v.sort_by_key(|(id, _, _)| *id);
        v
    }

    /// Counters.
    pub fn stats(&self) -> &Arc<TransportStats> {
        &self.stats
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.accept.abort();
        for p in self
            .peers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            p.task.abort();
        }
    }
}

fn handshake(from: ReplicaId, to: ReplicaId) -> [u8; HANDSHAKE_LEN] {
    let mut h = [0u8; HANDSHAKE_LEN];
    h[..3].copy_from_slice(MAGIC);
    h[3] = WIRE_VERSION;
    h[4..6].copy_from_slice(&from.0.to_be_bytes());
    h[6..8].copy_from_slice(&to.0.to_be_bytes());
    h
}

async fn outbound(
    me: ReplicaId,
    peer: ReplicaId,
    addr: SocketAddr,
    mut rx: mpsc::Receiver<Queued>,
    connected: Arc<AtomicBool>,
    stats: Arc<TransportStats>,
    tls: Option<Arc<Tls>>,
) {
    let mut backoff = Duration::from_millis(50);
    // A refused certificate is said once per run of failures, not every
    // second.
    let mut warned = false;
    // The peer closed the last connections right after the handshake.
    let mut refused = false;
    loop {
        let mut w = match connect(peer, addr, tls.as_deref()).await {
            Ok(w) => BufWriter::with_capacity(64 << 10, w),
            Err(Failed::Unreachable(e)) => {
                tracing::debug!(%peer, %addr, error = %e, "peer connect failed");
                // Frames for an unreachable peer are stale by the next try.
                while rx.try_recv().is_ok() {}
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
            Err(Failed::Tls(e)) => {
                if warned {
                    tracing::debug!(%peer, %addr, error = %e, "TLS handshake with peer failed");
                } else {
                    tracing::warn!(
                        %peer, %addr, error = %e,
                        "TLS handshake with peer failed: it must present a certificate of our CA \
                         naming {} (retrying)", replica_name(peer)
                    );
                    warned = true;
                }
                while rx.try_recv().is_ok() {}
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        if w.write_all(&handshake(me, peer)).await.is_err() || w.flush().await.is_err() {
            continue;
        }
        warned = false;
        if !refused {
            tracing::info!(%peer, %addr, "connected to peer");
        }
        connected.store(true, Ordering::Relaxed);
        let connected_at = Instant::now();
        let result: std::io::Result<()> = async {
            while let Some((due, frames)) = rx.recv().await {
                if due > Instant::now() {
                    tokio::time::sleep_until(due).await;
                }
                for f in &frames {
                    write_frame(&mut w, f, &stats).await?;
                }
                // Batch: write what is already queued, then flush once.
                while let Ok((due, frames)) = rx.try_recv() {
                    if due > Instant::now() {
                        w.flush().await?;
                        tokio::time::sleep_until(due).await;
                    }
                    for f in &frames {
                        write_frame(&mut w, f, &stats).await?;
                    }
                }
                w.flush().await?;
            }
            Ok(())
        }
        .await;
        connected.store(false, Ordering::Relaxed);
        let e = match result {
            Ok(()) => return, // the transport is shutting down
            Err(e) => e,
        };
        if connected_at.elapsed() >= SHORT_LIVED {
            tracing::info!(%peer, %addr, error = %e, "peer connection lost; reconnecting");
            refused = false;
            backoff = Duration::from_millis(50);
            continue;
        }
        // Closed right after the handshake: the peer refuses this replica
        // (it does not count it as a member, or it is another cluster's).
        // Retry with backoff, and say so once per run of refusals.
        if !refused {
            tracing::info!(
                %peer, %addr, error = %e,
                "peer closed the connection right after the handshake (it may not count this \
                 replica as a member yet); retrying with backoff"
            );
            refused = true;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// A connection lost sooner than this after it was made was refused by the
/// peer rather than broken: the next try backs off.
const SHORT_LIVED: Duration = Duration::from_secs(1);

/// Why an outbound connection could not be made.
enum Failed {
    /// TCP: the peer is down or unreachable.
    Unreachable(std::io::Error),
    /// The TLS handshake failed (a certificate refused on either side).
    Tls(std::io::Error),
}

/// A connection to `peer` at `addr`, TLS if `tls`.
async fn connect(peer: ReplicaId, addr: SocketAddr, tls: Option<&Tls>) -> Result<Writer, Failed> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(Failed::Unreachable)?;
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(Box::new(stream));
    };
    let name = ServerName::try_from(replica_name(peer))
        .map_err(|e| Failed::Tls(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
    match tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        tls.peer_connector().connect(name, stream),
    )
    .await
    {
        Ok(Ok(s)) => Ok(Box::new(s)),
        Ok(Err(e)) => Err(Failed::Tls(e)),
        Err(_) => Err(Failed::Tls(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "TLS handshake timed out",
        ))),
    }
}

async fn write_frame(
    w: &mut BufWriter<Writer>,
    frame: &Bytes,
    stats: &TransportStats,
) -> std::io::Result<()> {
    let len = u32::try_from(frame.len())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "frame too large"))?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(frame).await?;
    stats.frames_sent.fetch_add(1, Ordering::Relaxed);
    stats
        .bytes_sent
        .fetch_add(frame.len() as u64 + 4, Ordering::Relaxed);
    Ok(())
}

/// What every inbound connection of one replica shares.
struct Inbound {
    me: ReplicaId,
    /// The peers whose connections are accepted.
    known: Arc<RwLock<HashSet<ReplicaId>>>,
    /// The node loop's channel.
    events: mpsc::Sender<Event>,
    faults: Arc<Faults>,
    stats: Arc<TransportStats>,
    frame_bytes_max: usize,
    tls: Option<Arc<Tls>>,
    refusals: Mutex<Refusals>,
}

/// Refused connections are logged at most once per
/// [`REFUSALS_LOGGED_EVERY`]: a replica removed from the group (but still
/// running) or a misconfigured one retries all the time, and one line per
/// try would bury everything else.
const REFUSALS_LOGGED_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Refusals {
    /// When a refusal was last logged.
    logged: Option<Instant>,
    /// Refusals since then, not logged.
    unlogged: u64,
}

impl Inbound {
    fn refused(&self, remote: SocketAddr, why: &str) {
        self.stats
            .refused_connections
            .fetch_add(1, Ordering::Relaxed);
        let mut r = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if r.logged.is_some_and(|at| now < at + REFUSALS_LOGGED_EVERY) {
            r.unlogged += 1;
            return;
        }
        let unlogged = std::mem::take(&mut r.unlogged);
        r.logged = Some(now);
        drop(r);
        if unlogged == 0 {
            tracing::warn!(%remote, "refused a peer connection: {why}");
        } else {
            tracing::warn!(
                %remote,
                "refused a peer connection: {why} ({unlogged} more refused since the last \
                 such line; all are counted in creek_peer_connections_refused)"
            );
        }
    }
}

async fn accept(listener: TcpListener, ctx: Arc<Inbound>) {
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a peer connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(inbound_conn(stream, remote, ctx.clone()));
    }
}

/// Read the transport handshake; the sender's id if it is a known peer
/// of this group addressing this replica.
async fn read_handshake(
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

async fn inbound_conn(stream: TcpStream, remote: SocketAddr, ctx: Arc<Inbound>) {
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
    let mut buf = BytesMut::with_capacity(64 << 10);
    loop {
        let mut len = [0u8; 4];
        if stream.read_exact(&mut len).await.is_err() {
            return;
        }
        let len = u32::from_be_bytes(len) as usize;
        if len > ctx.frame_bytes_max {
            tracing::warn!(%from, len, "peer sent an oversized frame; closing the connection");
            return;
        }
        buf.resize(len, 0);
        if stream.read_exact(&mut buf[..]).await.is_err() {
            return;
        }
        let frame = buf.split().freeze();
        match ctx.faults.judge(from) {
            Verdict::Drop => {
                ctx.stats.dropped_faults.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // Latency is added on the sending side only.
            Verdict::Pass(_) => {}
        }
        ctx.stats.frames_received.fetch_add(1, Ordering::Relaxed);
        if ctx.events.send(Event::Frame { from, frame }).await.is_err() {
            return; // the node loop has stopped
        }
    }
}
