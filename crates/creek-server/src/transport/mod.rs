//! Peer transport over TCP.
//!
//! Each replica keeps one outbound connection to every peer and accepts one
//! inbound connection from each. A connection opens with a handshake —
//! `b"CRK"`, the wire version, the sender's id and the receiver's id (u16,
//! big-endian) — and then carries frames: a u32 big-endian length and one
//! `creek-wire` frame (which carries its own version byte).
//!
//! Writes: on a plaintext link with nothing waiting, the thread that sends
//! (the node loop, or the persister's callback releasing acknowledgements)
//! writes the frames to the socket itself, without waking the connection's
//! task; what the socket does not take at once waits for the task, and so
//! does everything after it until the task has written it all, so frames
//! keep their order (`Outbox`). TLS links are written by the task only.
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
//! bound.
//!
//! Inbound connections (`inbound`) are capped, their handshakes and
//! frames timed, their buffers grown only as bytes arrive; each refusal is
//! counted and logged at most once per 10 s per kind, with the count of
//! those not logged.
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

pub mod inbound;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use creek_core::ReplicaId;
use creek_wire::WIRE_VERSION;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub use inbound::InboundLimits;

use crate::faults::{Faults, Verdict};
use crate::node_loop::messages::Event;
use crate::socket::{write_all_shared, write_now};
use crate::throttle::Throttle;
use crate::tls::{replica_name, Tls};

/// How long a new connection may take to finish its TLS and transport
/// handshakes.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// One direction of a peer connection, plaintext or TLS.
type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

const MAGIC: &[u8; 3] = b"CRK";
const HANDSHAKE_LEN: usize = 8;

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
    /// TLS handshake, a certificate not bound to the claimed id, over the
    /// cap on inbound connections).
    pub refused_connections: AtomicU64,
    /// Inbound connections closed after their handshake for what the peer
    /// sent (a frame over the limit, a frame not whole in time).
    pub closed_connections: AtomicU64,
}

struct Peer {
    outbox: Arc<Outbox>,
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
    /// Start connecting to `peers` and accepting on `listener` within
    /// `limits`; inbound frames go to `inbound`; with `tls`, every link is
    /// mutual TLS. Must run inside a tokio runtime.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        me: ReplicaId,
        peers: &[(ReplicaId, SocketAddr)],
        listener: TcpListener,
        inbound: mpsc::Sender<Event>,
        faults: Arc<Faults>,
        queue_frames: usize,
        limits: InboundLimits,
        tls: Option<Arc<Tls>>,
    ) -> Transport {
        let stats = Arc::new(TransportStats::default());
        let known = Arc::new(RwLock::new(HashSet::new()));
        let accept = tokio::spawn(inbound::accept(
            listener,
            Arc::new(inbound::Inbound {
                me,
                known: known.clone(),
                events: inbound,
                faults: faults.clone(),
                stats: stats.clone(),
                limits,
                tls: tls.clone(),
                open: AtomicUsize::new(0),
                refused_log: Throttle::default(),
                cap_log: Throttle::default(),
                closed_log: Throttle::default(),
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
            let outbox = Arc::new(Outbox::default());
            let connected = Arc::new(AtomicBool::new(false));
            let task = self.runtime.spawn(outbound(
                self.me,
                id,
                addr,
                outbox.clone(),
                connected.clone(),
                self.stats.clone(),
                self.tls.clone(),
            ));
            table.insert(
                id,
                Peer {
                    outbox,
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

    /// Send frames to `to` in one write (so the peer reads them in one go
    /// and handles them in one turn); never blocks. On a plaintext link
    /// with nothing waiting they are written here, on the caller's thread
    /// (the node loop or the persister's callback), which saves waking the
    /// connection's task; otherwise they wait for it. Dropped (and counted)
    /// when `peer_queue_frames` already wait, the peer is unknown or a
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
        peer.outbox
            .send(due, &frames, self.queue_frames, &self.stats);
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

/// The frames on their way to one peer, shared by the threads that send
/// them and the task that owns the connection.
///
/// Order: bytes reach the socket in the order `send` was called. A sender
/// writes to the socket itself only while nothing waits and the task holds
/// nothing it has not written; everything else waits, in order, for the
/// task. A partial write leaves the rest of its bytes first in line, so
/// frames are never interleaved.
#[derive(Default)]
struct Outbox {
    state: Mutex<OutboxState>,
    /// Wakes the task: something waits, or the connection broke.
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct OutboxState {
    /// The plaintext connection while it is up (TLS links go through the
    /// task only: the TLS session is the task's).
    direct: Option<Arc<TcpStream>>,
    /// Encoded frames (length prefixes included) waiting for the task, each
    /// batch with when it may go (injected latency) and its frame count.
    waiting: VecDeque<Waiting>,
    /// Frames in `waiting`.
    waiting_frames: usize,
    /// The task has taken bytes it has not finished writing.
    writing: bool,
    /// A sender's write failed: the task must reconnect.
    broken: bool,
}

struct Waiting {
    due: Instant,
    bytes: Bytes,
    frames: usize,
}

impl Outbox {
    /// Send `frames` as one batch (see [`Transport::send_all`]).
    fn send(&self, due: Instant, frames: &[Bytes], bound: usize, stats: &TransportStats) {
        let n = frames.len();
        let mut bytes = BytesMut::with_capacity(frames.iter().map(|f| f.len() + 4).sum());
        for f in frames {
            let Ok(len) = u32::try_from(f.len()) else {
                tracing::warn!(len = f.len(), "dropping a peer frame too large to frame");
                return;
            };
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.extend_from_slice(f);
        }
        let mut bytes = bytes.freeze();
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if due <= now && st.waiting.is_empty() && !st.writing {
            if let Some(stream) = st.direct.clone() {
                match write_now(&stream, &bytes) {
                    Ok(written) if written == bytes.len() => {
                        sent(stats, n, written);
                        return;
                    }
                    Ok(written) => {
                        // The rest goes first, whatever the bound: a frame
                        // cut short would garble the stream.
                        sent(stats, 0, written);
                        let rest = bytes.split_off(written);
                        return self.wait(st, now, rest, n);
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "peer connection lost on a direct write");
                        st.direct = None;
                        st.broken = true;
                        drop(st);
                        stats.dropped_full.fetch_add(n as u64, Ordering::Relaxed);
                        self.wake.notify_one();
                        return;
                    }
                }
            }
        }
        if st.waiting_frames + n > bound {
            drop(st);
            stats.dropped_full.fetch_add(n as u64, Ordering::Relaxed);
            return;
        }
        self.wait(st, due, bytes, n);
    }

    /// Queue `frames` frames' `bytes` for the task, last in line.
    fn wait(&self, mut st: MutexGuard<'_, OutboxState>, due: Instant, bytes: Bytes, frames: usize) {
        st.waiting.push_back(Waiting { due, bytes, frames });
        st.waiting_frames += frames;
        drop(st);
        self.wake.notify_one();
    }

    /// The next bytes for the task to write, once they are due: every batch
    /// already due, joined. `None` when the connection must be remade.
    async fn next(&self) -> Option<(Bytes, usize)> {
        loop {
            let wake = self.wake.notified();
            let due = {
                let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                if st.broken {
                    return None;
                }
                let now = Instant::now();
                match st.waiting.front() {
                    None => None,
                    Some(w) if w.due > now => Some(w.due),
                    Some(_) => {
                        let taken = take_due(&mut st.waiting, now);
                        st.waiting_frames -= taken.1;
                        st.writing = true;
                        return Some(taken);
                    }
                }
            };
            match due {
                Some(due) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(due) => {}
                        () = wake => {}
                    }
                }
                None => wake.await,
            }
        }
    }

    /// The task wrote what [`Outbox::next`] gave it.
    fn written(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .writing = false;
    }

    /// The connection is up: senders may write to `direct` themselves.
    /// What waited for it goes first.
    fn connected(&self, direct: Option<Arc<TcpStream>>) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.direct = direct;
        st.broken = false;
        st.writing = false;
    }

    /// The connection is gone: what waits is stale by the next one.
    fn disconnected(&self) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        *st = OutboxState::default();
    }
}

/// Every batch at the front of `waiting` that is due by `now`, as one
/// write (a lone batch is not copied), and its frame count.
fn take_due(waiting: &mut VecDeque<Waiting>, now: Instant) -> (Bytes, usize) {
    let due = waiting.iter().take_while(|w| w.due <= now).count();
    let frames = waiting.iter().take(due).map(|w| w.frames).sum();
    let bytes = if due == 1 {
        waiting.pop_front().map(|w| w.bytes).unwrap_or_default()
    } else {
        let mut joined = BytesMut::new();
        for w in waiting.drain(..due) {
            joined.extend_from_slice(&w.bytes);
        }
        joined.freeze()
    };
    (bytes, frames)
}

fn sent(stats: &TransportStats, frames: usize, bytes: usize) {
    stats
        .frames_sent
        .fetch_add(frames as u64, Ordering::Relaxed);
    stats.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// An outbound connection: plaintext, shared with direct senders, or TLS.
enum Link {
    Plain(Arc<TcpStream>),
    Tls(Writer),
}

impl Link {
    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Link::Plain(stream) => write_all_shared(stream, bytes, None).await,
            Link::Tls(w) => {
                w.write_all(bytes).await?;
                w.flush().await
            }
        }
    }
}

async fn outbound(
    me: ReplicaId,
    peer: ReplicaId,
    addr: SocketAddr,
    outbox: Arc<Outbox>,
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
        let mut link = match connect(peer, addr, tls.as_deref()).await {
            Ok(link) => link,
            Err(Failed::Unreachable(e)) => {
                tracing::debug!(%peer, %addr, error = %e, "peer connect failed");
                // Frames for an unreachable peer are stale by the next try.
                outbox.disconnected();
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
                outbox.disconnected();
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        if link.write_all(&handshake(me, peer)).await.is_err() {
            continue;
        }
        warned = false;
        if !refused {
            tracing::info!(%peer, %addr, "connected to peer");
        }
        outbox.connected(match &link {
            Link::Plain(stream) => Some(stream.clone()),
            Link::Tls(_) => None,
        });
        connected.store(true, Ordering::Relaxed);
        let connected_at = Instant::now();
        // The task ends only when the transport aborts it.
        let e = loop {
            let Some((bytes, frames)) = outbox.next().await else {
                break std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "a direct write to the peer failed",
                );
            };
            if let Err(e) = link.write_all(&bytes).await {
                break e;
            }
            outbox.written();
            sent(&stats, frames, bytes.len());
        };
        connected.store(false, Ordering::Relaxed);
        outbox.disconnected();
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
async fn connect(peer: ReplicaId, addr: SocketAddr, tls: Option<&Tls>) -> Result<Link, Failed> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(Failed::Unreachable)?;
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(Link::Plain(Arc::new(stream)));
    };
    let name = ServerName::try_from(replica_name(peer))
        .map_err(|e| Failed::Tls(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
    match tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        tls.peer_connector().connect(name, stream),
    )
    .await
    {
        Ok(Ok(s)) => Ok(Link::Tls(Box::new(s))),
        Ok(Err(e)) => Err(Failed::Tls(e)),
        Err(_) => Err(Failed::Tls(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "TLS handshake timed out",
        ))),
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::faults::LinkFault;

    fn test_limits() -> InboundLimits {
        InboundLimits {
            connections_max: 16,
            read_timeout: Duration::from_secs(10),
            frame_bytes_max: 1 << 20,
        }
    }

    /// A frame of `seq`: its number, then `seq % 251` repeated, of a size
    /// that varies up to ~300 KiB so that some writes fill the socket and
    /// end partly written.
    fn frame(seq: u64) -> Bytes {
        let size = (seq.wrapping_mul(7919) % 300_000) as usize * usize::from(seq.is_multiple_of(5));
        let mut b = BytesMut::with_capacity(8 + size);
        b.extend_from_slice(&seq.to_be_bytes());
        b.resize(8 + size, (seq % 251) as u8);
        b.freeze()
    }

    /// Frames sent from a thread outside the runtime (as the node loop
    /// and the persister send them) arrive whole and in the order sent:
    /// direct writes, partial ones finished by the task, and batches held
    /// back by injected latency never overtake each other.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_arrive_whole_and_in_order() {
        let (a, b) = (ReplicaId(1), ReplicaId(2));
        let la = TcpListener::bind("127.0.0.1:0").await.expect("loopback");
        let lb = TcpListener::bind("127.0.0.1:0").await.expect("loopback");
        let (addr_a, addr_b) = (
            la.local_addr().expect("bound"),
            lb.local_addr().expect("bound"),
        );
        let (to_a, _from_a) = mpsc::channel(16);
        let (to_b, mut from_b) = mpsc::channel(64);
        let faults = Arc::new(Faults::default());
        let sender = Arc::new(Transport::start(
            a,
            &[(b, addr_b)],
            la,
            to_a,
            faults.clone(),
            1 << 20,
            test_limits(),
            None,
        ));
        let _receiver = Transport::start(
            b,
            &[(a, addr_a)],
            lb,
            to_b,
            Arc::default(),
            1 << 20,
            test_limits(),
            None,
        );
        while !sender.peers()[0].2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        const BATCHES: u64 = 3_000;
        let sending = sender.clone();
        let mut thread = Some(std::thread::spawn(move || {
            let mut seq = 0;
            for batch in 0..BATCHES {
                // Every 97th batch is held back 2 ms; the next ones must
                // wait behind it.
                let delay = if batch % 97 == 0 {
                    Duration::from_millis(2)
                } else {
                    Duration::ZERO
                };
                faults.set(HashMap::from([(
                    b,
                    LinkFault {
                        delay,
                        ..LinkFault::default()
                    },
                )]));
                let frames = (0..1 + batch % 3)
                    .map(|_| {
                        seq += 1;
                        frame(seq)
                    })
                    .collect();
                sending.send_all(b, frames);
            }
            seq
        }));
        // The receiver reads slowly, so the socket fills and drains again
        // and again while the thread sends.
        let mut want = 1;
        let mut total = None;
        while total.is_none_or(|t| want <= t) {
            let event = tokio::time::timeout(Duration::from_secs(20), from_b.recv())
                .await
                .expect("every frame arrives")
                .expect("the transport runs");
            let Event::Frame {
                from, frame: got, ..
            } = event
            else {
                panic!("only frames are sent")
            };
            assert_eq!(from, a);
            assert_eq!(got, frame(want), "frame {want} arrives whole and in order");
            want += 1;
            if want.is_multiple_of(64) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if thread.as_ref().is_some_and(|t| t.is_finished()) {
                total = thread
                    .take()
                    .map(|t| t.join().expect("the sender finishes"));
            }
        }
        let total = total.unwrap_or_default();
        let stats = sender.stats();
        assert_eq!(stats.dropped_full.load(Ordering::Relaxed), 0);
        assert_eq!(stats.frames_sent.load(Ordering::Relaxed), total);
    }

    /// A batch the socket takes only part of: the rest waits first in line
    /// for the task, and the peer reads every frame whole and in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_partial_write_is_finished_first() {
        const FRAME: usize = 100_000;
        for _attempt in 0..5 {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("loopback");
            let stream = TcpStream::connect(listener.local_addr().expect("bound"))
                .await
                .expect("loopback");
            let (mut peer, _) = listener.accept().await.expect("loopback");
            let stream = Arc::new(stream);
            let outbox = Arc::new(Outbox::default());
            outbox.connected(Some(stream.clone()));
            let stats = TransportStats::default();
            // The peer reads nothing yet: send until a batch must wait.
            let mut sent = 0u64;
            while outbox
                .state
                .lock()
                .expect("not poisoned")
                .waiting
                .is_empty()
            {
                sent += 1;
                let mut f = vec![(sent % 251) as u8; FRAME];
                f[..8].copy_from_slice(&sent.to_be_bytes());
                outbox.send(Instant::now(), &[Bytes::from(f)], 1 << 20, &stats);
                assert!(sent < 10_000, "the socket never filled");
            }
            let written = stats.bytes_sent.load(Ordering::Relaxed) as usize;
            if written.is_multiple_of(FRAME + 4) {
                continue; // the socket took none of the last batch: try again
            }
            // More batches wait behind the rest, then the task writes.
            for _ in 0..3 {
                sent += 1;
                let mut f = vec![(sent % 251) as u8; FRAME];
                f[..8].copy_from_slice(&sent.to_be_bytes());
                outbox.send(Instant::now(), &[Bytes::from(f)], 1 << 20, &stats);
            }
            let task = tokio::spawn({
                let outbox = outbox.clone();
                async move {
                    let mut link = Link::Plain(stream);
                    while let Some((bytes, _)) = outbox.next().await {
                        link.write_all(&bytes).await.expect("loopback");
                        outbox.written();
                    }
                }
            });
            for want in 1..=sent {
                let mut len = [0u8; 4];
                peer.read_exact(&mut len).await.expect("loopback");
                assert_eq!(
                    u32::from_be_bytes(len) as usize,
                    FRAME,
                    "frame {want}'s length"
                );
                let mut f = vec![0u8; FRAME];
                peer.read_exact(&mut f).await.expect("loopback");
                assert_eq!(
                    u64::from_be_bytes(f[..8].try_into().expect("8 bytes")),
                    want
                );
                assert!(f[8..].iter().all(|&x| x == (want % 251) as u8));
            }
            task.abort();
            return;
        }
        panic!("no write ended part way in five tries");
    }
}
