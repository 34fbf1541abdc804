//! The node loop: one OS thread that owns the replica's [`Node`] and drives
//! it with everything that happens — client invocations, peer frames, ticks
//! and the persister's durability reports — then runs the executions the
//! node hands out on a worker pool and sends what comes out.
//!
//! # Group commit and the hold rule
//!
//! Each turn of the loop handles every event already queued, runs the
//! executions, and then submits one batch to the persister: the new op
//! payloads and the consensus log writes of the turn. The persister writes
//! all batches queued meanwhile in one transaction with one fsync.
//!
//! Nothing that depends on a write leaves the replica before the write is
//! durable: every peer message produced in a turn is held until the
//! persister reports the turn's batch (or a later one) durable. Raft's
//! contract follows (a vote or an append acknowledgement is sent only once
//! persisted; the leader's appends go out only once its own log is
//! durable), and so does gossip's (an op is never seen by a peer before its
//! origin can remember it, so a restarted origin never reuses its id).
//!
//! Views are not held. A final view follows a commit, and a commit means a
//! majority acknowledged the op's log entry — each acknowledgement sent only
//! after that replica's batch holding the entry, and the payloads CAB
//! required it to hold, was durable, the leader's own included (its appends
//! wait for its fsync). So the op's position and payload are durable on a
//! majority before any replica learns of the commit, which is the rule for a
//! final view; waiting for the local disk as well would only add an fsync.
//! Tentative views are speculative and go out at once.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_core::{ExecKey, InvokeError, Request, View, ViewKind, Views};
use creek_node::Node;
use creek_store::{Batch, DurableCabStorage, Persister};
use creek_wire::Limits;
use tokio::sync::{mpsc, oneshot};

use crate::metrics::Metrics;
use crate::transport::Transport;

/// Ready executions below this count run inline on the node loop thread.
const POOL_MIN_TASKS: usize = 16;

/// What the node loop reacts to.
pub enum Event {
    /// A client invocation.
    Invoke(Invocation),
    /// A frame from a peer.
    Frame {
        /// The sender.
        from: creek_core::ReplicaId,
        /// The frame, as received.
        frame: Bytes,
    },
    /// The persister failed (the message is in [`Durability`]). Successes
    /// need no event: the persister's callback releases held frames itself.
    DiskFailure,
    /// The protocol clock.
    Tick,
    /// A status request.
    Status(oneshot::Sender<StatusSnapshot>),
    /// The committed state and the committed length it reflects.
    Dump(oneshot::Sender<(u64, Vec<(Bytes, Bytes)>)>),
    /// Stop after making everything durable.
    Shutdown,
}

/// What the persister has made durable, shared with its callback, and the
/// peer messages waiting for it. The callback runs on the persister's
/// thread and sends the frames a report releases itself (the transport's
/// `send` never blocks), so a release does not wait for the node loop to
/// be free. It never blocks either: failures are recorded here and the
/// loop is nudged with `try_send` (a full channel means the loop is busy
/// and will look anyway), so closing the persister from the loop cannot
/// deadlock.
#[derive(Default)]
pub struct Durability {
    durable: std::sync::atomic::AtomicU64,
    batches: std::sync::atomic::AtomicU64,
    failure: std::sync::Mutex<Option<String>>,
    held: std::sync::Mutex<VecDeque<Held>>,
    transport: std::sync::OnceLock<Arc<Transport>>,
}

impl Durability {
    /// The persister's callback for `events`.
    pub fn callback(self: &Arc<Self>, events: mpsc::Sender<Event>) -> creek_store::OnDurable {
        let me = self.clone();
        Box::new(move |r| match r {
            Ok(seq) => {
                me.batches.fetch_add(1, Ordering::Relaxed);
                me.durable.fetch_max(seq, Ordering::AcqRel);
                me.release();
            }
            Err(e) => {
                if let Ok(mut f) = me.failure.lock() {
                    f.get_or_insert(e.to_string());
                }
                let _ = events.try_send(Event::DiskFailure);
            }
        })
    }

    /// Where released frames go (set once, before the node loop starts).
    pub fn set_transport(&self, transport: Arc<Transport>) {
        let _ = self.transport.set(transport);
    }

    /// Hold `frames` until batch `seq` is durable (or send them now).
    fn hold(&self, seq: u64, frames: Vec<(creek_core::ReplicaId, Bytes)>) {
        if let Ok(mut q) = self.held.lock() {
            q.push_back(Held { seq, frames });
        }
        self.release();
    }

    /// Send every held frame the durable batches allow, in order.
    fn release(&self) {
        if self.failure().is_some() {
            return;
        }
        let Some(transport) = self.transport.get() else {
            return;
        };
        let Ok(mut q) = self.held.lock() else {
            return;
        };
        let durable = self.durable();
        // Everything released now goes out as one write per peer.
        let mut by_peer: BTreeMap<creek_core::ReplicaId, Vec<Bytes>> = BTreeMap::new();
        while q.front().is_some_and(|h| h.seq <= durable) {
            if let Some(h) = q.pop_front() {
                for (to, frame) in h.frames {
                    by_peer.entry(to).or_default().push(frame);
                }
            }
        }
        drop(q);
        for (to, frames) in by_peer {
            transport.send_all(to, frames);
        }
    }

    fn drop_held(&self) {
        if let Ok(mut q) = self.held.lock() {
            q.clear();
        }
    }

    fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }
}

/// One client invocation and where its replies go.
pub struct Invocation {
    /// The op.
    pub request: Request,
    /// Replies, in order.
    pub reply: mpsc::UnboundedSender<Reply>,
    /// When the server received it.
    pub received: Instant,
}

/// What a client stream receives from the node loop.
#[derive(Debug)]
pub enum Reply {
    /// The op was accepted; views follow. Sent only for ops that asked for
    /// no tentative view (otherwise the first view says as much, sooner).
    Accepted,
    /// The op was refused; nothing was applied.
    Rejected(InvokeError),
    /// A view.
    View(View),
    /// The replica cannot finish the op (disk failure, shutdown). Whether it
    /// was applied is unknown; a retry with the same request id is safe.
    Failed(String),
}

/// A replica's state, for `Status` and the status table.
#[derive(Clone, Debug, Default)]
pub struct StatusSnapshot {
    /// `leader`, `follower`, `candidate` or `pre-candidate`.
    pub role: &'static str,
    /// The known leader (0 if none).
    pub leader: u16,
    /// Consensus term.
    pub term: u64,
    /// Length of the committed list.
    pub committed: u64,
    /// Length of the tentative list.
    pub tentative: u64,
    /// Counters by name.
    pub counters: BTreeMap<String, u64>,
}

struct Route {
    reply: mpsc::UnboundedSender<Reply>,
    views: Views,
    strong: bool,
    received: Instant,
}

/// Peer messages held until a batch is durable.
struct Held {
    seq: u64,
    frames: Vec<(creek_core::ReplicaId, Bytes)>,
}

/// How the loop is set up.
pub struct LoopConfig {
    /// Worker threads for executions.
    pub workers: usize,
    /// How often to write a checkpoint.
    pub checkpoint_every: Duration,
    /// Wire limits for encoding peer frames.
    pub limits: Limits,
}

/// The node loop's state (owned by its thread).
pub struct NodeLoop {
    node: Node<DurableCabStorage>,
    persister: Option<Persister>,
    durability: Arc<Durability>,
    transport: Arc<Transport>,
    metrics: Arc<Metrics>,
    pool: Option<rayon::ThreadPool>,
    limits: Limits,
    routes: HashMap<ExecKey, Route>,
    submitted: u64,
    failed: Option<String>,
    epoch: Instant,
    ticks: u64,
    checkpoint_every: Duration,
    last_checkpoint: Instant,
    checkpointed_len: u64,
    stopping: bool,
    /// Take even lazy (commit-index-only) log writes at the next flush.
    sync_lazy_writes: bool,
}

impl NodeLoop {
    /// A loop around `node`; `persister` receives its batches.
    pub fn new(
        node: Node<DurableCabStorage>,
        persister: Persister,
        durability: Arc<Durability>,
        transport: Arc<Transport>,
        metrics: Arc<Metrics>,
        config: LoopConfig,
    ) -> Self {
        let pool = (config.workers > 1)
            .then(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(config.workers)
                    .thread_name(|i| format!("creek-exec-{i}"))
                    .build()
                    .ok()
            })
            .flatten();
        let checkpointed_len = node.replica().committed_len();
        NodeLoop {
            node,
            persister: Some(persister),
            durability,
            transport,
            metrics,
            pool,
            limits: config.limits,
            routes: HashMap::new(),
            submitted: 0,
            failed: None,
            epoch: Instant::now(),
            ticks: 0,
            checkpoint_every: config.checkpoint_every,
            last_checkpoint: Instant::now(),
            checkpointed_len,
            stopping: false,
            sync_lazy_writes: false,
        }
    }

    /// Run until `Shutdown` or until every sender is gone.
    pub fn run(mut self, mut events: mpsc::Receiver<Event>) {
        while let Some(event) = events.blocking_recv() {
            self.handle(event);
            // Group everything already queued into this turn.
            for _ in 0..4096 {
                match events.try_recv() {
                    Ok(event) => self.handle(event),
                    Err(_) => break,
                }
            }
            self.execute();
            self.flush();
            if self.stopping {
                break;
            }
        }
        self.stop();
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Invoke(inv) => self.invoke(inv),
            Event::Frame { from, frame } => {
                if self.node.on_frame(from, &frame).is_err() {
                    tracing::debug!(%from, "refused a malformed peer frame");
                }
            }
            Event::DiskFailure => self.check_disk(),
            Event::Tick => self.tick(),
            Event::Status(reply) => {
                let _ = reply.send(self.status());
            }
            Event::Dump(reply) => {
                let r = self.node.replica();
                let _ = reply.send((r.committed_len(), r.committed_state().into_iter().collect()));
            }
            Event::Shutdown => {
                self.stopping = true;
                self.sync_lazy_writes = true;
            }
        }
    }

    fn invoke(&mut self, inv: Invocation) {
        if let Some(why) = &self.failed {
            let _ = inv.reply.send(Reply::Failed(why.clone()));
            return;
        }
        let strong = inv.request.strong;
        let views = inv.request.views;
        match self.node.invoke(inv.request, self.now_us()) {
            Ok(handle) => {
                if !views.tentative {
                    let _ = inv.reply.send(Reply::Accepted);
                }
                self.routes.insert(
                    handle,
                    Route {
                        reply: inv.reply,
                        views,
                        strong,
                        received: inv.received,
                    },
                );
            }
            Err(e) => {
                self.metrics.op(strong, "rejected");
                let _ = inv.reply.send(Reply::Rejected(e));
            }
        }
    }

    fn tick(&mut self) {
        self.ticks += 1;
        self.sync_lazy_writes = true;
        let now = self.now_us();
        self.node.tick(now);
        // Clients that went away.
        self.routes.retain(|_, r| !r.reply.is_closed());
        if self.ticks.is_multiple_of(10) {
            self.refresh_gauges();
        }
    }

    /// Run every ready execution: on the worker pool when many are ready,
    /// inline otherwise (waking the pool costs more than a few small ops).
    fn execute(&mut self) {
        loop {
            let mut tasks = Vec::new();
            while let Some(t) = self.node.next_execution() {
                tasks.push(t);
                if tasks.len() >= 1024 {
                    break;
                }
            }
            if tasks.is_empty() {
                return;
            }
            let replica = self.node.replica();
            let done = match (&self.pool, tasks.len()) {
                (Some(pool), n) if n >= POOL_MIN_TASKS => pool.install(|| {
                    use rayon::prelude::*;
                    tasks.par_iter().map(|t| replica.run(t)).collect::<Vec<_>>()
                }),
                _ => tasks.iter().map(|t| replica.run(t)).collect(),
            };
            for c in done {
                self.node.complete(c);
            }
        }
    }

    /// End of a turn: views go out; the turn's writes are submitted as one
    /// batch; peer messages wait for it.
    fn flush(&mut self) {
        for v in self.node.take_views() {
            self.route(v);
        }
        let ops = self.node.take_new_payloads();
        let checkpoint = if self.last_checkpoint.elapsed() >= self.checkpoint_every {
            self.node.checkpoint()
        } else {
            None
        };
        let store = self.node.cab_mut().store_mut();
        // A commit-index-only change rides with the next batch (at the
        // latest the next tick's): syncing it alone would cost every strong
        // op three extra fsyncs across the group. A checkpoint takes every
        // pending write, so the stored commit index is never behind it.
        let take = store.must_sync() || !ops.is_empty() || checkpoint.is_some();
        let log = if take || self.sync_lazy_writes {
            store.take_writes()
        } else {
            creek_store::LogWrites::default()
        };
        self.sync_lazy_writes = false;
        let mut batch = Batch {
            log,
            ops,
            checkpoint: None,
        };
        if let Some(ckpt) = checkpoint {
            // A checkpoint covers the whole committed list, so the payloads
            // it frees are those committed since the previous one.
            let dropped = self.node.committed_since(self.checkpointed_len);
            self.checkpointed_len = ckpt.committed_len;
            self.last_checkpoint = Instant::now();
            tracing::debug!(committed = ckpt.committed_len, "checkpoint");
            batch.checkpoint = Some((ckpt, dropped));
        }
        if !batch.is_empty() {
            if let Some(p) = &self.persister {
                self.submitted = p.submit(batch);
            }
        }
        let mut frames = Vec::new();
        for (to, msg) in self.node.take_outbox() {
            match creek_wire::encode(&msg, &self.limits) {
                Ok(frame) => frames.push((to, frame)),
                Err(e) => tracing::warn!(%to, error = %e, "dropping an unencodable peer message"),
            }
        }
        if !frames.is_empty() {
            self.durability.hold(self.submitted, frames);
        }
    }

    /// Take in a failure report of the persister.
    fn check_disk(&mut self) {
        if self.failed.is_none() {
            if let Some(e) = self.durability.failure() {
                self.fail(format!("disk failure: {e}"));
            }
        }
    }

    fn route(&mut self, v: View) {
        let Some(route) = self.routes.get(&v.handle) else {
            return;
        };
        let stable = v.kind != ViewKind::Tentative;
        self.metrics
            .view(stable, route.received.elapsed().as_secs_f64());
        let last = stable || !route.views.final_view;
        let outcome = if v.outcome.is_ok() { "ok" } else { "abort" };
        let strong = route.strong;
        let gone = route.reply.send(Reply::View(v.clone())).is_err();
        if last || gone {
            self.routes.remove(&v.handle);
            self.metrics
                .op(strong, if gone { "cancelled" } else { outcome });
        }
    }

    /// The disk failed: stop acknowledging anything; every waiting client
    /// learns it.
    fn fail(&mut self, why: String) {
        tracing::error!(error = %why, "replica stops serving");
        for (_, r) in self.routes.drain() {
            self.metrics.op(r.strong, "unavailable");
            let _ = r.reply.send(Reply::Failed(why.clone()));
        }
        self.durability.drop_held();
        self.failed = Some(why);
    }

    fn stop(&mut self) {
        self.flush();
        if let Some(p) = self.persister.take() {
            if let Err(e) = p.close() {
                self.fail(format!("disk failure at shutdown: {e}"));
            }
        }
        for (_, r) in self.routes.drain() {
            self.metrics.op(r.strong, "unavailable");
            let _ = r.reply.send(Reply::Failed(
                "the replica shut down before the op's final view".into(),
            ));
        }
    }

    fn refresh_gauges(&self) {
        let m = &self.metrics;
        let r = self.node.replica();
        let c = r.counters();
        let e = r.exec_counters();
        if c.accuracy_checked > 0 {
            m.accuracy
                .set(c.accuracy_hits as f64 / c.accuracy_checked as f64);
        }
        if e.ops > 0 {
            m.execution_ratio.set(e.executions as f64 / e.ops as f64);
        }
        m.reexecutions.set(e.reexecutions as i64);
        let cab = self.node.cab();
        m.consensus_role.set(if cab.is_leader() {
            2
        } else if cab.leader().is_some() {
            1
        } else {
            0
        });
        m.consensus_term.set(cab.term() as i64);
        m.committed.set(r.committed_len() as i64);
        m.tentative.set(r.tentative_len() as i64);
        let g = self.node.gossip_stats();
        m.gossip_backlog.set((g.buffered + g.pushes_queued) as i64);
        m.gossip_payloads_held.set(g.payloads_held as i64);
        m.decided_waiting.set(r.decided_waiting() as i64);
        let t = self.transport.stats();
        use std::sync::atomic::Ordering::Relaxed;
        m.peer_frames_dropped
            .set((t.dropped_full.load(Relaxed) + t.dropped_faults.load(Relaxed)) as i64);
        m.peer_bytes_sent.set(t.bytes_sent.load(Relaxed) as i64);
        m.durable_batches
            .set(self.durability.batches.load(Relaxed) as i64);
    }

    fn status(&self) -> StatusSnapshot {
        let r = self.node.replica();
        let cab = self.node.cab();
        let c = r.counters();
        let e = r.exec_counters();
        let g = self.node.gossip_stats();
        let s = self.node.cab_stats();
        let mut counters = BTreeMap::new();
        let mut put = |k: &str, v: u64| {
            counters.insert(k.to_owned(), v);
        };
        put("invoked_weak", c.invoked_weak);
        put("invoked_strong", c.invoked_strong);
        put("local_reads", c.local_reads);
        put("rb_delivered", c.rb_delivered);
        put("cab_delivered", c.cab_delivered);
        put("stabilizer_noops", c.stabilizer_noops);
        put("views", c.views);
        put("finalized", c.finalized);
        put("accuracy_checked", c.accuracy_checked);
        put("accuracy_hits", c.accuracy_hits);
        put("executions", e.executions);
        put("reexecutions", e.reexecutions);
        put("exec_ops", e.ops);
        put("gossip_ops_sent", g.ops_sent);
        put("gossip_payloads_held", g.payloads_held as u64);
        put("cab_entries_proposed", s.entries_proposed);
        put("cab_ids_decided", s.ids_decided);
        put("decided_waiting", r.decided_waiting() as u64);
        put("durable_seq", self.durability.durable());
        put("submitted_seq", self.submitted);
        put("refused_frames", self.node.refused_frames());
        put(
            "peer_bytes_sent",
            self.transport
                .stats()
                .bytes_sent
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        put("failed", u64::from(self.failed.is_some()));
        StatusSnapshot {
            role: cab.role(),
            leader: cab.leader().map_or(0, |l| l.0),
            term: cab.term(),
            committed: r.committed_len(),
            tentative: r.tentative_len() as u64,
            counters,
        }
    }
}
