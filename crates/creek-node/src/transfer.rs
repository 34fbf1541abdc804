//! State transfer: a replica that needs a checkpoint fetches one from a
//! peer, in chunks, and installs it.
//!
//! Two replicas need one:
//!
//! * a **lagging** member: the leader compacted its log past what this
//!   replica holds (it was down, or far behind) and sent a consensus
//!   snapshot at its log's base, which CAB holds (`Cab::wanted_snapshot`)
//!   until this replica's state covers that index;
//! * a **lost** replica: its data directory was lost (see
//!   [`membership`](crate::membership)); it takes no part until it is
//!   rebuilt from a member's checkpoint.
//!
//! # The protocol
//!
//! The receiver asks for one chunk at a time ([`SnapshotMessage::Fetch`]):
//! transfer 0 and the least consensus index it needs, then the transfer the
//! sender named and the offset it reached. The sender serves the encoded
//! bytes of a checkpoint of its committed state (`creek_wire::checkpoint`),
//! taken when the first fetch arrives at a clean point and encoded by the
//! driver off the node's thread ([`TransferJob`]: fetches that arrive
//! meanwhile are answered once it is done), and keeps them while fetches
//! keep coming ([`SERVE_IDLE_TICKS`]); several receivers share one
//! transfer when it reaches far enough. Chunks are at most [`CHUNK_BYTES`]:
//! one request in flight is the backpressure, and a receiver that hears
//! nothing for [`FETCH_RETRY_TICKS`] asks again at the offset it reached (a
//! broken connection resumes), moving to another peer after
//! [`FETCH_TRIES`] silent tries. The receiver checks the total length and
//! the CRC-32 of the whole before it decodes and installs anything; a
//! mismatch starts the transfer over.
//!
//! A checkpoint holds committed state only — decided by a majority, which
//! no crash takes back — so chunks leave at once, never held for the
//! sender's disk.

use bytes::{Bytes, BytesMut};
use creek_core::{Checkpoint, ReplicaId};
use creek_wire::{SnapshotChunk, SnapshotMessage};

/// Most bytes of checkpoint in one chunk.
pub const CHUNK_BYTES: usize = 1 << 20;

/// The most bytes a receiver sets aside for a checkpoint before its chunks
/// arrive (a larger one grows as they come).
const RESERVE_MAX: u64 = 4 << 30;

/// A sender drops a transfer nobody fetched for this many ticks.
pub const SERVE_IDLE_TICKS: u64 = 500;

/// A receiver asks again after this many ticks without an answer.
pub const FETCH_RETRY_TICKS: u64 = 50;

/// After this many unanswered tries a receiver turns to another peer (a
/// sender takes a while to answer the first fetch of a large state: it
/// takes and encodes a checkpoint first).
pub const FETCH_TRIES: u32 = 10;

/// Counters of state transfer, for status and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Checkpoints installed from a peer.
    pub installed: u64,
    /// Bytes of checkpoint received.
    pub bytes_received: u64,
    /// Chunks served to peers.
    pub chunks_served: u64,
    /// Bytes of checkpoint served to peers.
    pub bytes_served: u64,
    /// Transfers started over (a checksum or length mismatch, a transfer the
    /// sender dropped, a checkpoint that did not reach far enough).
    pub restarts: u64,
    /// Checkpoints a member installed because a held append waited too
    /// long for payloads (see `Node::held_too_long`).
    pub past_held: u64,
}

impl std::ops::AddAssign for TransferStats {
    fn add_assign(&mut self, o: TransferStats) {
        self.installed += o.installed;
        self.bytes_received += o.bytes_received;
        self.chunks_served += o.chunks_served;
        self.bytes_served += o.bytes_served;
        self.restarts += o.restarts;
        self.past_held += o.past_held;
    }
}

/// Where a fetch stands, for status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchStatus {
    /// The peer fetched from.
    pub from: ReplicaId,
    /// Bytes received.
    pub received: u64,
    /// Bytes in all (0 until the first chunk).
    pub total: u64,
    /// The consensus index the checkpoint must reach.
    pub min_index: u64,
    /// Requests since the last answer (another peer is asked after
    /// [`FETCH_TRIES`]).
    pub tries: u32,
    /// Counted ticks since the last request (one is sent every
    /// [`FETCH_RETRY_TICKS`]; ticks are stretched on slow links).
    pub waiting: u64,
}

/// A checkpoint being served.
struct Serving {
    transfer: u64,
    index: u64,
    term: u64,
    /// `None` while the driver encodes it.
    encoded: Option<Encoded>,
    /// Fetches that arrived while it was being encoded: (peer, offset).
    waiting: Vec<(ReplicaId, u64)>,
    idle_ticks: u64,
    /// The last peer sent a chunk of it.
    last_reader: Option<ReplicaId>,
}

/// Work of state transfer that may take long — encoding a checkpoint to
/// serve, checking and decoding one fetched: the whole state passes through
/// it — for the driver to run off the node's thread
/// ([`TransferJob::run`], on any thread) and hand back with
/// [`Node::on_transfer_done`](crate::Node::on_transfer_done).
#[derive(Debug)]
pub struct TransferJob(Job);

#[derive(Debug)]
enum Job {
    Encode {
        transfer: u64,
        checkpoint: Checkpoint,
    },
    Decode {
        transfer: u64,
        index: u64,
        checksum: u32,
        bytes: Bytes,
    },
}

/// A finished [`TransferJob`].
#[derive(Debug)]
pub struct TransferDone(Done);

#[derive(Debug)]
enum Done {
    Encoded(Encoded),
    /// `None`: the bytes did not check out.
    Decoded {
        transfer: u64,
        checkpoint: Option<Checkpoint>,
    },
}

impl TransferJob {
    /// Do it: encode (`creek_wire::checkpoint`) and checksum a checkpoint to
    /// serve, or check (length was checked as chunks came; here the CRC-32
    /// and the index) and decode one fetched.
    pub fn run(self) -> TransferDone {
        TransferDone(match self.0 {
            Job::Encode {
                transfer,
                checkpoint,
            } => {
                let bytes = Bytes::from(creek_wire::checkpoint::encode(&checkpoint));
                Done::Encoded(Encoded {
                    transfer,
                    checksum: crc32fast::hash(&bytes),
                    bytes,
                })
            }
            Job::Decode {
                transfer,
                index,
                checksum,
                bytes,
            } => Done::Decoded {
                transfer,
                checkpoint: (crc32fast::hash(&bytes) == checksum)
                    .then(|| creek_wire::checkpoint::decode(&bytes).ok())
                    .flatten()
                    .filter(|cp| cp.cab_applied == index),
            },
        })
    }
}

/// A checkpoint encoded to serve.
#[derive(Clone, Debug)]
struct Encoded {
    transfer: u64,
    bytes: Bytes,
    checksum: u32,
}

/// A checkpoint being fetched.
struct Fetching {
    from: ReplicaId,
    min_index: u64,
    /// 0 until the sender names it in its first chunk.
    transfer: u64,
    index: u64,
    term: u64,
    total_len: u64,
    checksum: u32,
    buf: BytesMut,
    /// Ticks since the last request.
    waiting: u64,
    /// Requests since the last answer.
    tries: u32,
    /// Every byte arrived; the driver checks and decodes them.
    decoding: bool,
}

/// A complete, verified checkpoint from a peer.
pub(crate) struct Fetched {
    pub(crate) from: ReplicaId,
    pub(crate) checkpoint: Checkpoint,
    /// The term of the consensus entry at its `cab_applied`.
    pub(crate) term: u64,
}

/// The state-transfer room of one node: at most one checkpoint served and
/// one fetched at a time.
pub(crate) struct Transfers {
    me: ReplicaId,
    peers: Vec<ReplicaId>,
    serving: Option<Serving>,
    fetching: Option<Fetching>,
    /// The last transfer id handed out (ids are `me << 48 | counter`, so a
    /// receiver never mistakes one sender's transfer for another's).
    last_transfer: u64,
    outbox: Vec<(ReplicaId, SnapshotMessage)>,
    /// Work for the driver.
    jobs: Vec<TransferJob>,
    stats: TransferStats,
    /// Calls of [`Transfers::tick`] since the last counted tick (timing
    /// stretched on slow links, as CAB's).
    sub_ticks: u64,
    /// Fetches refused for want of a checkpoint — no clean point, or none
    /// that far yet: (peer, min_index), one per peer. The next checkpoint
    /// taken serves them ([`Transfers::serve_deferred`]): a busy member is
    /// seldom at a clean point when a fetch happens to arrive.
    deferred: Vec<(ReplicaId, u64)>,
}

impl Transfers {
    pub(crate) fn new(me: ReplicaId, peers: Vec<ReplicaId>) -> Self {
        Transfers {
            me,
            peers,
            serving: None,
            fetching: None,
            last_transfer: 0,
            outbox: Vec::new(),
            jobs: Vec::new(),
            stats: TransferStats::default(),
            sub_ticks: 0,
            deferred: Vec::new(),
        }
    }

    /// Fetch from (and fall back over) these peers from now on.
    pub(crate) fn set_peers(&mut self, peers: &[ReplicaId]) {
        self.peers = peers.to_vec();
    }

    /// A checkpoint was installed past a held append (see
    /// `Node::install_past_held`).
    pub(crate) fn installed_past_held(&mut self) {
        self.stats.past_held += 1;
    }

    pub(crate) fn stats(&self) -> TransferStats {
        self.stats
    }

    pub(crate) fn take_messages(&mut self) -> Vec<(ReplicaId, SnapshotMessage)> {
        std::mem::take(&mut self.outbox)
    }

    pub(crate) fn take_jobs(&mut self) -> Vec<TransferJob> {
        std::mem::take(&mut self.jobs)
    }

    /// A job the driver finished: returns the fetched checkpoint once it
    /// is decoded. Results for a transfer no longer served or fetched are
    /// dropped.
    pub(crate) fn on_done(&mut self, done: TransferDone) -> Option<Fetched> {
        match done.0 {
            Done::Encoded(e) => {
                self.on_encoded(e);
                None
            }
            Done::Decoded {
                transfer,
                checkpoint,
            } => self.on_decoded(transfer, checkpoint),
        }
    }

    /// The checkpoint being served is encoded: answer the fetches that
    /// waited for it.
    fn on_encoded(&mut self, encoded: Encoded) {
        let Some(s) = self
            .serving
            .as_mut()
            .filter(|s| s.transfer == encoded.transfer && s.encoded.is_none())
        else {
            return;
        };
        s.encoded = Some(encoded);
        for (peer, offset) in std::mem::take(&mut s.waiting) {
            self.serve(peer, offset);
        }
    }

    pub(crate) fn fetch_status(&self) -> Option<FetchStatus> {
        self.fetching.as_ref().map(|f| FetchStatus {
            from: f.from,
            received: if f.decoding {
                f.total_len
            } else {
                f.buf.len() as u64
            },
            total: f.total_len,
            min_index: f.min_index,
            tries: f.tries,
            waiting: f.waiting,
        })
    }

    /// Fetch a checkpoint at `min_index` or later, from `from` first. A
    /// fetch already running for as much goes on; one for less starts over.
    pub(crate) fn fetch(&mut self, from: ReplicaId, min_index: u64) {
        if self
            .fetching
            .as_ref()
            .is_some_and(|f| f.min_index >= min_index || (f.transfer != 0 && f.index >= min_index))
        {
            return;
        }
        if self.fetching.is_some() {
            self.stats.restarts += 1;
        }
        self.fetching = Some(Fetching {
            from,
            min_index,
            transfer: 0,
            index: 0,
            term: 0,
            total_len: 0,
            checksum: 0,
            buf: BytesMut::new(),
            waiting: 0,
            tries: 0,
            decoding: false,
        });
        self.request();
    }

    /// Stop fetching (the node no longer needs a checkpoint).
    pub(crate) fn cancel_fetch(&mut self) {
        self.fetching = None;
    }

    /// Ask the current source for the next chunk.
    fn request(&mut self) {
        let Some(f) = self.fetching.as_mut() else {
            return;
        };
        f.waiting = 0;
        f.tries += 1;
        self.outbox.push((
            f.from,
            SnapshotMessage::Fetch {
                transfer: f.transfer,
                min_index: f.min_index,
                offset: f.buf.len() as u64,
            },
        ));
    }

    /// Start the current fetch over, from `from`.
    fn restart(&mut self, from: ReplicaId) {
        if let Some(f) = self.fetching.as_mut() {
            self.stats.restarts += 1;
            f.from = from;
            f.transfer = 0;
            f.buf.clear();
            f.tries = 0;
            f.decoding = false;
        }
        self.request();
    }

    /// The peer after `p` (in the configured order).
    fn next_peer(&self, p: ReplicaId) -> ReplicaId {
        let i = self.peers.iter().position(|x| *x == p).map_or(0, |i| i + 1);
        self.peers
            .get(i % self.peers.len().max(1))
            .copied()
            .unwrap_or(p)
    }

    /// Advance time: one counted tick every `scale` calls (the node's link
    /// timing, so retries wait longer on slow links).
    pub(crate) fn tick(&mut self, scale: u64) {
        self.sub_ticks += 1;
        if self.sub_ticks < scale.max(1) {
            return;
        }
        self.sub_ticks = 0;
        if let Some(s) = self.serving.as_mut() {
            s.idle_ticks += 1;
            if s.idle_ticks >= SERVE_IDLE_TICKS {
                self.serving = None;
            }
        }
        // Nothing to ask while the driver decodes what arrived.
        let Some(f) = self.fetching.as_mut().filter(|f| !f.decoding) else {
            return;
        };
        f.waiting += 1;
        if f.waiting < FETCH_RETRY_TICKS {
            return;
        }
        if f.tries >= FETCH_TRIES {
            let from = f.from;
            let next = self.next_peer(from);
            self.restart(next);
        } else {
            self.request();
        }
    }

    /// A fetch from `peer`. `take` produces a checkpoint of the committed
    /// state with the term of its index, or `None` when this is not a clean
    /// point; `current` is the index such a checkpoint would have now. A new
    /// transfer shares the one being served if nothing was delivered
    /// since it was taken — a receiver should start as close to the present
    /// as it can (payloads of ops committed after its checkpoint must still
    /// be found somewhere) — or if another peer is still reading it.
    pub(crate) fn on_fetch(
        &mut self,
        peer: ReplicaId,
        transfer: u64,
        min_index: u64,
        offset: u64,
        current: u64,
        take: impl FnOnce() -> Option<(Checkpoint, u64)>,
    ) {
        let usable = self.serving.as_ref().is_some_and(|s| {
            if transfer == 0 {
                // One still being encoded is as fresh as can be had: a new
                // one would only start the encoding over. One another peer
                // is still reading is shared: replacing it would refuse
                // that peer's next chunk, and two fetchers would start each
                // other over for as long as writes go on.
                let shared =
                    s.last_reader.is_some_and(|p| p != peer) && s.idle_ticks < FETCH_RETRY_TICKS;
                s.index >= min_index && (s.encoded.is_none() || s.index >= current || shared)
            } else {
                s.transfer == transfer
            }
        });
        if !usable {
            if transfer != 0 {
                self.outbox.push((
                    peer,
                    SnapshotMessage::Refused {
                        transfer,
                        retry: false,
                    },
                ));
                return;
            }
            match take().filter(|(c, _)| c.cab_applied >= min_index) {
                Some((c, term)) => self.start_serving(c, term),
                None => {
                    self.deferred.retain(|(p, _)| *p != peer);
                    self.deferred.push((peer, min_index));
                    self.outbox.push((
                        peer,
                        SnapshotMessage::Refused {
                            transfer,
                            retry: true,
                        },
                    ));
                    return;
                }
            }
        }
        self.deferred.retain(|(p, _)| *p != peer);
        self.serve(peer, offset);
    }

    /// Serve `c` (at the consensus entry of `term`) from now on: the
    /// driver encodes it first.
    fn start_serving(&mut self, c: Checkpoint, term: u64) {
        self.last_transfer += 1;
        let transfer = u64::from(self.me.0) << 48 | self.last_transfer;
        self.serving = Some(Serving {
            transfer,
            index: c.cab_applied,
            term,
            encoded: None,
            waiting: Vec::new(),
            idle_ticks: 0,
            last_reader: None,
        });
        self.jobs.push(TransferJob(Job::Encode {
            transfer,
            checkpoint: c,
        }));
    }

    /// Whether refused fetches wait for a checkpoint.
    pub(crate) fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Serve the fetches refused for want of a checkpoint from the one
    /// `take` gives now, if it gives one far enough for some of them;
    /// the others wait on. `current` is the index such a checkpoint would
    /// have: none is taken (a copy of the whole state) before it is far
    /// enough for one of them.
    pub(crate) fn serve_deferred(
        &mut self,
        current: u64,
        take: impl FnOnce() -> Option<(Checkpoint, u64)>,
    ) {
        let Some(lowest) = self.deferred.iter().map(|(_, m)| *m).min() else {
            return;
        };
        if current < lowest {
            return;
        }
        let Some((c, term)) = take().filter(|(c, _)| c.cab_applied >= lowest) else {
            return;
        };
        let index = c.cab_applied;
        self.start_serving(c, term);
        let (ready, wait): (Vec<_>, Vec<_>) =
            self.deferred.drain(..).partition(|(_, m)| *m <= index);
        self.deferred = wait;
        for (peer, _) in ready {
            self.serve(peer, 0);
        }
    }

    /// Send `peer` the chunk at `offset` of the checkpoint served, or keep
    /// the fetch until it is encoded.
    fn serve(&mut self, peer: ReplicaId, offset: u64) {
        let Some(s) = self.serving.as_mut() else {
            return;
        };
        s.idle_ticks = 0;
        let Some(e) = &s.encoded else {
            // One answer per peer: a repeated fetch replaces the earlier.
            s.waiting.retain(|(p, _)| *p != peer);
            s.waiting.push((peer, offset));
            return;
        };
        s.last_reader = Some(peer);
        let total = e.bytes.len();
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(total);
        let end = start.saturating_add(CHUNK_BYTES).min(total);
        let data = e.bytes.slice(start..end);
        self.stats.chunks_served += 1;
        self.stats.bytes_served += data.len() as u64;
        self.outbox.push((
            peer,
            SnapshotMessage::Chunk(SnapshotChunk {
                transfer: s.transfer,
                index: s.index,
                term: s.term,
                total_len: total as u64,
                checksum: e.checksum,
                offset: start as u64,
                data,
            }),
        ));
    }

    /// A chunk from `peer`; once every byte arrived, the driver checks and
    /// decodes them (a [`TransferJob`]).
    pub(crate) fn on_chunk(&mut self, peer: ReplicaId, c: SnapshotChunk) {
        let Some(f) = self.fetching.as_mut() else {
            return;
        };
        if peer != f.from || f.decoding {
            return;
        }
        if f.transfer == 0 {
            if c.offset != 0 || c.index < f.min_index {
                return;
            }
            f.transfer = c.transfer;
            f.index = c.index;
            f.term = c.term;
            f.total_len = c.total_len;
            f.checksum = c.checksum;
            // Room for the whole at once: growing by doubling would copy
            // what arrived again and again on the node's thread.
            f.buf
                .reserve(usize::try_from(c.total_len.min(RESERVE_MAX)).unwrap_or(0));
        }
        if c.transfer != f.transfer || c.offset != f.buf.len() as u64 {
            return; // a stale or repeated chunk
        }
        let within = (f.buf.len() as u64).saturating_add(c.data.len() as u64) <= f.total_len;
        if !within || (c.data.is_empty() && (f.buf.len() as u64) < f.total_len) {
            let next = self.next_peer(peer);
            self.restart(next);
            return;
        }
        self.stats.bytes_received += c.data.len() as u64;
        f.buf.extend_from_slice(&c.data);
        f.tries = 0;
        if (f.buf.len() as u64) < f.total_len {
            self.request();
            return;
        }
        f.decoding = true;
        self.jobs.push(TransferJob(Job::Decode {
            transfer: f.transfer,
            index: f.index,
            checksum: f.checksum,
            bytes: std::mem::take(&mut f.buf).freeze(),
        }));
    }

    /// The fetched bytes, checked and decoded (`None`: they did not check
    /// out, and the transfer starts over from the next peer).
    fn on_decoded(&mut self, transfer: u64, checkpoint: Option<Checkpoint>) -> Option<Fetched> {
        let f = self
            .fetching
            .as_ref()
            .filter(|f| f.decoding && f.transfer == transfer)?;
        let (from, term) = (f.from, f.term);
        match checkpoint {
            Some(checkpoint) => {
                self.fetching = None;
                self.stats.installed += 1;
                Some(Fetched {
                    from,
                    checkpoint,
                    term,
                })
            }
            None => {
                let next = self.next_peer(from);
                self.restart(next);
                None
            }
        }
    }

    /// A refusal from `peer`.
    pub(crate) fn on_refused(&mut self, peer: ReplicaId, transfer: u64, retry: bool) {
        let Some(f) = self.fetching.as_ref() else {
            return;
        };
        if peer != f.from || transfer != f.transfer {
            return;
        }
        if retry {
            // Asked again after the retry interval; another peer after a
            // few refusals.
            return;
        }
        self.restart(peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use creek_core::{Dvv, OpId, Timestamp};

    fn checkpoint(index: u64, keys: usize) -> Checkpoint {
        let mut ctx = Dvv::default();
        ctx.insert(OpId {
            origin: ReplicaId(1),
            seq: 1,
        });
        Checkpoint {
            cab_applied: index,
            committed_len: 1,
            causal_ctx: ctx,
            state: (0..keys)
                .map(|i| {
                    (
                        Bytes::from(format!("key{i:08}")),
                        Bytes::from(vec![7u8; 1000]),
                    )
                })
                .collect(),
            hlc: Timestamp(5),
            next_event_no: 2,
            commit_time: 0,
            group: Default::default(),
        }
    }

    /// Deliver every message between a receiver (1) and a sender (2) until
    /// none is left; `cut` drops the n-th message once.
    fn run(
        rx: &mut Transfers,
        tx: &mut Transfers,
        cp: &Checkpoint,
        cut: Option<usize>,
    ) -> Option<Fetched> {
        let mut n = 0;
        for _ in 0..10_000 {
            let mut progress = false;
            for (to, m) in rx.take_messages() {
                assert_eq!(to, ReplicaId(2));
                n += 1;
                progress = true;
                if Some(n) == cut {
                    continue;
                }
                if let SnapshotMessage::Fetch {
                    transfer,
                    min_index,
                    offset,
                } = m
                {
                    tx.on_fetch(ReplicaId(1), transfer, min_index, offset, 0, || {
                        Some((cp.clone(), 3))
                    });
                    assert!(work(tx).is_none());
                }
            }
            for (_, m) in tx.take_messages() {
                progress = true;
                match m {
                    SnapshotMessage::Chunk(c) => {
                        rx.on_chunk(ReplicaId(2), c);
                        if let Some(done) = work(rx) {
                            return Some(done);
                        }
                    }
                    SnapshotMessage::Refused { transfer, retry } => {
                        rx.on_refused(ReplicaId(2), transfer, retry)
                    }
                    SnapshotMessage::Fetch { .. } => unreachable!(),
                }
            }
            if !progress {
                rx.tick(1);
                tx.tick(1);
            }
        }
        None
    }

    /// The driver's part: run the jobs, hand back the results.
    fn work(t: &mut Transfers) -> Option<Fetched> {
        let mut fetched = None;
        for job in t.take_jobs() {
            fetched = fetched.or(t.on_done(job.run()));
        }
        fetched
    }

    /// The one job waiting.
    fn one_job(t: &mut Transfers) -> TransferJob {
        let mut jobs = t.take_jobs();
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        jobs.remove(0)
    }

    #[test]
    fn a_fetch_refused_for_want_of_a_clean_point_is_served_by_the_next_checkpoint() {
        let cp = checkpoint(40, 10);
        let mut tx = Transfers::new(ReplicaId(2), vec![ReplicaId(1), ReplicaId(3)]);
        // Busy: no clean point, then one short of the index asked.
        tx.on_fetch(ReplicaId(1), 0, 30, 0, 0, || None);
        tx.on_fetch(ReplicaId(3), 0, 45, 0, 0, || Some((cp.clone(), 3)));
        let refused = tx.take_messages();
        assert!(refused
            .iter()
            .all(|(_, m)| matches!(m, SnapshotMessage::Refused { retry: true, .. })));
        assert!(tx.take_jobs().is_empty() && tx.has_deferred());
        // Still busy: nothing; not far enough: no checkpoint is taken.
        tx.serve_deferred(40, || None);
        tx.serve_deferred(20, || unreachable!());
        assert!(tx.take_jobs().is_empty());
        // A clean point at 40 serves replica 1 (it asked for 30); replica 3
        // (45) waits on.
        tx.serve_deferred(40, || Some((cp.clone(), 3)));
        let job = one_job(&mut tx);
        assert!(tx.on_done(job.run()).is_none());
        let sent = tx.take_messages();
        assert_eq!(sent.len(), 1);
        assert!(
            matches!(&sent[0], (ReplicaId(1), SnapshotMessage::Chunk(c)) if c.offset == 0 && c.index == 40)
        );
        assert!(tx.has_deferred(), "replica 3 waits for index 45");
        // A fetch served the ordinary way is no longer deferred.
        tx.on_fetch(ReplicaId(3), 0, 45, 0, 0, || {
            let mut later = cp.clone();
            later.cab_applied = 50;
            Some((later, 4))
        });
        assert!(!tx.has_deferred());
    }

    #[test]
    fn fetches_wait_for_the_encoding_and_a_stale_one_is_dropped() {
        let cp = checkpoint(40, 10);
        let mut tx = Transfers::new(ReplicaId(2), vec![ReplicaId(1), ReplicaId(3)]);
        tx.on_fetch(ReplicaId(1), 0, 1, 0, 0, || Some((cp.clone(), 3)));
        let first = one_job(&mut tx);
        // Nothing is served before it is encoded; a repeated fetch and one
        // from another peer wait too.
        tx.on_fetch(ReplicaId(1), 0, 1, 0, 0, || unreachable!());
        tx.on_fetch(ReplicaId(3), 0, 1, 0, 0, || unreachable!());
        assert!(tx.take_messages().is_empty());
        assert!(tx.take_jobs().is_empty());
        assert!(tx.on_done(first.run()).is_none());
        let sent = tx.take_messages();
        let to: Vec<ReplicaId> = sent.iter().map(|(p, _)| *p).collect();
        assert_eq!(to, vec![ReplicaId(1), ReplicaId(3)], "one answer each");
        assert!(sent
            .iter()
            .all(|(_, m)| matches!(m, SnapshotMessage::Chunk(c) if c.offset == 0)));
        // Once no peer read it for a while, a fetch after deliveries gets a
        // new transfer. A fetch joins a transfer still being encoded if it
        // covers the index asked; otherwise a new transfer replaces it, and
        // the older one's late encoding is dropped.
        for _ in 0..FETCH_RETRY_TICKS {
            tx.tick(1);
        }
        let at = |index: u64| {
            let mut later = cp.clone();
            later.cab_applied = index;
            Some((later, 4))
        };
        tx.on_fetch(ReplicaId(1), 0, 1, 0, 50, || at(50));
        let stale = one_job(&mut tx);
        tx.on_fetch(ReplicaId(3), 0, 1, 0, 70, || unreachable!());
        tx.on_fetch(ReplicaId(1), 0, 55, 0, 60, || at(60));
        assert!(tx.on_done(stale.run()).is_none());
        assert!(tx.take_messages().is_empty());
        assert!(work(&mut tx).is_none());
        assert!(matches!(
            tx.take_messages().as_slice(),
            [(_, SnapshotMessage::Chunk(c))] if c.index == 60
        ));
    }

    /// Two members fetching while writes go on: the second shares the
    /// transfer the first is reading instead of replacing it (which would
    /// refuse the first's next chunk and start it over).
    #[test]
    fn a_second_fetcher_shares_the_transfer_another_is_reading() {
        let cp = checkpoint(40, 10);
        let mut tx = Transfers::new(ReplicaId(2), vec![ReplicaId(1), ReplicaId(3)]);
        tx.on_fetch(ReplicaId(1), 0, 1, 0, 0, || Some((cp.clone(), 3)));
        assert!(work(&mut tx).is_none());
        let transfer = match tx.take_messages().as_slice() {
            [(_, SnapshotMessage::Chunk(c))] => c.transfer,
            other => panic!("{other:?}"),
        };
        // Delivered through 70 since: replica 3's fetch shares it all the same.
        tx.on_fetch(ReplicaId(3), 0, 30, 0, 70, || unreachable!());
        assert!(matches!(
            tx.take_messages().as_slice(),
            [(_, SnapshotMessage::Chunk(c))] if c.transfer == transfer
        ));
        // Replica 1 reads on.
        tx.on_fetch(ReplicaId(1), transfer, 1, 5, 70, || unreachable!());
        assert!(matches!(
            tx.take_messages().as_slice(),
            [(_, SnapshotMessage::Chunk(c))] if c.transfer == transfer && c.offset == 5
        ));
        // One asking past its index still gets a newer one.
        tx.on_fetch(ReplicaId(3), 0, 60, 0, 70, || {
            let mut later = cp.clone();
            later.cab_applied = 70;
            Some((later, 4))
        });
        assert!(work(&mut tx).is_none());
        assert!(matches!(
            tx.take_messages().as_slice(),
            [(_, SnapshotMessage::Chunk(c))] if c.transfer != transfer && c.index == 70
        ));
    }

    #[test]
    fn a_checkpoint_arrives_in_chunks_and_resumes_after_a_lost_message() {
        let cp = checkpoint(40, 3000); // about 3 MB: several chunks
        for cut in [None, Some(1), Some(3)] {
            let mut rx = Transfers::new(ReplicaId(1), vec![ReplicaId(2)]);
            let mut tx = Transfers::new(ReplicaId(2), vec![ReplicaId(1)]);
            rx.fetch(ReplicaId(2), 30);
            let done = run(&mut rx, &mut tx, &cp, cut).expect("fetched");
            assert_eq!(done.checkpoint, cp);
            assert_eq!(done.term, 3);
            assert!(tx.stats().chunks_served >= 3);
        }
    }

    #[test]
    fn a_damaged_chunk_is_caught_by_the_checksum_and_the_transfer_starts_over() {
        let cp = checkpoint(40, 10);
        let mut rx = Transfers::new(ReplicaId(1), vec![ReplicaId(2)]);
        let mut tx = Transfers::new(ReplicaId(2), vec![ReplicaId(1)]);
        rx.fetch(ReplicaId(2), 1);
        let (_, m) = rx.take_messages().remove(0);
        let SnapshotMessage::Fetch {
            transfer,
            min_index,
            offset,
        } = m
        else {
            panic!("{m:?}")
        };
        tx.on_fetch(ReplicaId(1), transfer, min_index, offset, 0, || {
            Some((cp.clone(), 3))
        });
        assert!(work(&mut tx).is_none());
        let (_, m) = tx.take_messages().remove(0);
        let SnapshotMessage::Chunk(mut c) = m else {
            panic!("{m:?}")
        };
        let mut data = c.data.to_vec();
        data[5] ^= 1;
        c.data = Bytes::from(data);
        rx.on_chunk(ReplicaId(2), c);
        // Nothing is asked while the bytes are checked.
        let check = one_job(&mut rx);
        for _ in 0..FETCH_RETRY_TICKS * 2 {
            rx.tick(1);
        }
        assert!(rx.take_messages().is_empty());
        assert!(rx.on_done(check.run()).is_none());
        assert_eq!(rx.stats().restarts, 1);
        assert_eq!(rx.stats().installed, 0);
        // It asks again from the start.
        let again = rx.take_messages();
        assert!(matches!(
            again.as_slice(),
            [(
                _,
                SnapshotMessage::Fetch {
                    transfer: 0,
                    offset: 0,
                    ..
                }
            )]
        ));
    }

    #[test]
    fn a_sender_without_a_far_enough_checkpoint_refuses_and_the_receiver_retries() {
        let cp = checkpoint(5, 1);
        let mut rx = Transfers::new(ReplicaId(1), vec![ReplicaId(2)]);
        let mut tx = Transfers::new(ReplicaId(2), vec![ReplicaId(1)]);
        rx.fetch(ReplicaId(2), 10);
        for (_, m) in rx.take_messages() {
            if let SnapshotMessage::Fetch {
                transfer,
                min_index,
                offset,
            } = m
            {
                tx.on_fetch(ReplicaId(1), transfer, min_index, offset, 0, || {
                    Some((cp.clone(), 1))
                });
            }
        }
        assert!(matches!(
            tx.take_messages().as_slice(),
            [(_, SnapshotMessage::Refused { retry: true, .. })]
        ));
        for _ in 0..FETCH_RETRY_TICKS {
            rx.tick(1);
        }
        assert_eq!(rx.take_messages().len(), 1, "asked again");
    }
}
