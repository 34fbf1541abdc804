//! The end of a turn: the node's output carried out through
//! [`creek_node::Driver`] (the cycle and its order are `creek_node::driver`'s;
//! this file only does the I/O): views to their clients, the write and the
//! checkpoint to the persister, frames to the hold queue or the transport,
//! state-transfer work to a thread of its own.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use creek_core::{Addrs, ExecKey, Group, ReplicaId, View, ViewKind, Views};
use creek_node::{CheckpointJob, Driver, HoldQueue, MpoMessage, TransferDone, TransferJob, Write};
use creek_store::Persister;
use creek_wire::{Limits, PeerMessage};

use super::durability::Durability;
use super::messages::{Reply, ReplyTo};

use crate::metrics::{Metrics, Stage};
use crate::transport::Transport;

/// A call waiting for its views.
pub(super) struct Route {
    pub reply: ReplyTo,
    pub views: Views,
    pub strong: bool,
    pub received: Instant,
    /// Its procedure's telemetry label (`crate::telemetry`).
    pub procedure: &'static str,
    /// The first preliminary view's result, once one was routed (the
    /// `executed` stage is timed then, once).
    pub first: Option<creek_exec::Outcome>,
}

/// The calls this replica answers.
pub(super) struct Clients {
    pub routes: HashMap<ExecKey, Route>,
    /// Invocations accepted this turn, told so at the end of the turn
    /// together with their first views: the handler's task then wakes
    /// once, not once for the acceptance and again for the view.
    pub accepted: Vec<(ReplyTo, ExecKey)>,
    /// Native calls' replies of this turn, written at its end.
    pub corked: Arc<crate::native::out::Corked>,
    /// Recent ops invoked here, for the console.
    pub journal: crate::console::journal::Journal,
    pub metrics: Arc<Metrics>,
}

impl Clients {
    /// The turn's acceptances, then its views, then the native replies.
    fn answer(&mut self, views: Vec<View>) {
        // A call hears it was accepted before any of its views (the
        // native connection asserts so on each call).
        for (reply, handle) in self.accepted.drain(..) {
            let _ = reply.send(Reply::Accepted(handle));
        }
        for v in views {
            self.route(v);
        }
        // Native clients' answers before the turn's peer frames.
        self.corked.uncork();
    }

    fn route(&mut self, v: View) {
        assert!(
            self.accepted.is_empty(),
            "a view routed before this turn's acceptances were sent"
        );
        let Some(route) = self.routes.get_mut(&v.handle) else {
            return;
        };
        let stable = v.kind.is_final();
        if let ExecKey::Op(id) = v.handle {
            self.journal.view(id, v.kind, &v.outcome);
        }
        let since = route.received.elapsed().as_secs_f64();
        self.metrics.view(stable, since);
        let telemetry = &self.metrics.procedures;
        if stable {
            self.metrics.stage(route.strong, Stage::Committed, since);
            // Held: the first preliminary view equalled the final one;
            // corrected: the final view is not a confirmation of the last.
            let held = route.first.as_ref().map(|first| *first == v.outcome);
            let corrected = route.first.is_some().then_some(v.kind == ViewKind::Stable);
            let reexecutions = v.executions.saturating_sub(1);
            telemetry.final_view(route.procedure, since, held, corrected, reexecutions);
        } else if v.kind == ViewKind::Tentative && route.first.is_none() {
            route.first = Some(v.outcome.clone());
            self.metrics.stage(route.strong, Stage::Executed, since);
            telemetry.preliminary(route.procedure, since);
        }
        let last = route.views.closes_with(v.kind);
        let strong = route.strong;
        let procedure = route.procedure;
        let gone = route.reply.send(Reply::View(v.clone())).is_err();
        if last || gone {
            self.routes.remove(&v.handle);
            let (outcome, reason) = match &v.outcome {
                _ if gone => ("cancelled", None),
                Ok(_) => ("ok", None),
                Err(abort) => ("abort", Some(creek_procs::abort::reason(&abort.0))),
            };
            self.metrics.op(strong, outcome);
            self.metrics
                .procedures
                .finished(procedure, strong, outcome, reason);
        }
    }
}

/// Replicated ops waiting for the write that carries their payload to be
/// durable, to time their `persisted` stage (strong, received): those
/// invoked this turn, and those held for each write submitted since.
#[derive(Default)]
pub(super) struct Unpersisted {
    pub this_turn: Vec<(bool, Instant)>,
    pub by_write: HoldQueue<(bool, Instant)>,
}

/// The loop's I/O for one turn's [`Node::drive`](creek_node::Node::drive).
pub(super) struct Turn<'a> {
    pub clients: &'a mut Clients,
    pub persister: Option<&'a Persister>,
    pub durability: &'a Durability,
    /// Writes with consensus writes in them, submitted and not yet durable.
    pub log_writes: &'a mut VecDeque<u64>,
    pub unpersisted: &'a mut Unpersisted,
    pub limits: Limits,
    pub transport: &'a Transport,
    /// This replica.
    pub me: ReplicaId,
    /// The configured replicas' addresses.
    pub config_addrs: &'a BTreeMap<ReplicaId, Addrs>,
    pub transfer_done: &'a Arc<Mutex<Vec<TransferDone>>>,
    /// The group, when it changed this turn (the loop answers a change
    /// proposed here after the turn).
    pub group: Option<Group>,
    /// The carrier of operations across shards, if the replica serves a
    /// shard of a cluster of several.
    pub mpo: Option<&'a Arc<crate::mpo::Link>>,
    /// Whether this replica sends its shard's reads (see `Driver::mpo`).
    pub mpo_sender: bool,
    /// Echoes of link probes are not sent past this instant: an echo made
    /// early in a turn that then stalled would carry the stall to the
    /// prober as a round trip (`creek_node::timing`: a stalled replica
    /// neither measures nor reports its stall). The prober's next probe is
    /// due 200 ms later.
    pub echoes_until: Instant,
}

impl Turn<'_> {
    fn encode(&self, messages: Vec<(ReplicaId, PeerMessage)>) -> Vec<(ReplicaId, Bytes)> {
        let mut frames = Vec::with_capacity(messages.len());
        let echoes = Instant::now() <= self.echoes_until;
        for (to, msg) in messages {
            if !echoes && matches!(msg, PeerMessage::Probe(p) if p.echo) {
                continue;
            }
            match creek_wire::encode(&msg, &self.limits) {
                Ok(frame) => frames.push((to, frame)),
                Err(e) => tracing::warn!(%to, error = %e, "dropping an unencodable peer message"),
            }
        }
        frames
    }
}

/// Every replica's addresses: the configured ones, then those of the
/// members added since (the group's directory).
pub(super) fn all_addrs(
    configured: &BTreeMap<ReplicaId, Addrs>,
    group: &Group,
) -> BTreeMap<ReplicaId, Addrs> {
    let mut all = configured.clone();
    for (id, a) in &group.directory.addrs {
        all.insert(*id, a.clone());
    }
    all
}

/// A `host:port` peer address as a socket address (a name is looked up).
pub(crate) fn resolve(addr: &str) -> std::io::Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{addr} resolves to nothing"),
        )
    })
}

/// The peer addresses of `group`'s members other than `me`: the configured
/// ones, and the directory's for members added since.
pub(super) fn group_peers(
    me: ReplicaId,
    config_addrs: &BTreeMap<ReplicaId, Addrs>,
    group: &Group,
) -> Vec<(ReplicaId, std::net::SocketAddr)> {
    let addrs = all_addrs(config_addrs, group);
    let mut peers = Vec::new();
    for id in group.members() {
        if id == me {
            continue;
        }
        match addrs.get(&id).map(|a| resolve(&a.peer)) {
            Some(Ok(addr)) => peers.push((id, addr)),
            Some(Err(e)) => {
                tracing::warn!(peer = %id, error = %e, "cannot reach a member: bad peer address");
            }
            None => tracing::warn!(peer = %id, "a member without a known peer address"),
        }
    }
    peers
}

impl Driver for Turn<'_> {
    /// Connect to the group's members (and only them) before any message
    /// of this turn leaves.
    fn group(&mut self, group: Group) {
        self.transport
            .set_peers(&group_peers(self.me, self.config_addrs, &group));
        self.group = Some(group);
    }

    /// On a thread of its own: a large state takes long, and the loop must
    /// go on meanwhile. The next turn (a tick at the latest) hands the
    /// result to the node; if no thread starts, the work is done here.
    fn transfer(&mut self, job: TransferJob) -> Option<TransferDone> {
        let slot = self.transfer_done.clone();
        let job = Arc::new(Mutex::new(Some(job)));
        let taken = job.clone();
        let spawned = std::thread::Builder::new()
            .name("creek-transfer".to_owned())
            .spawn(move || {
                super::yield_to_serving_threads();
                if let Some(job) = taken.lock().ok().and_then(|mut j| j.take()) {
                    let done = job.run();
                    if let Ok(mut s) = slot.lock() {
                        s.push(done);
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start a state-transfer thread; working on the node's");
            return job
                .lock()
                .ok()
                .and_then(|mut j| j.take())
                .map(TransferJob::run);
        }
        None
    }

    fn views(&mut self, views: Vec<View>) {
        self.clients.answer(views);
    }

    /// Each shard's reads to every replica of the shards waiting for them,
    /// from the shard's leader (the first to reach an MPO's turn; a
    /// replica whose leader is unknown sends them too). A replica the
    /// leader's reads miss asks for them (`node_loop/mpo.rs`). The shard's
    /// stable time, which only its leader publishes, to every replica of
    /// the other shards.
    fn mpo(&mut self, messages: Vec<MpoMessage>) {
        let Some(link) = self.mpo.filter(|_| self.mpo_sender) else {
            return;
        };
        for m in messages {
            match m {
                MpoMessage::Reads { mpo, to, reads, .. } => link.push_reads(mpo, &to, reads),
                // Servers order MPOs with the directory's sequencer; the
                // genuine multicast runs in the simulator only.
                MpoMessage::Timestamp { .. } => {}
                MpoMessage::Stable { from, to, time } => link.push_stable(from, &to, time),
            }
        }
    }

    fn persist(&mut self, write: Write) {
        let Some(p) = self.persister else {
            return;
        };
        // This turn's new payloads are in this turn's write.
        let invoked = std::mem::take(&mut self.unpersisted.this_turn);
        self.unpersisted.by_write.hold(write.seq, invoked);
        // In write order: the persister asserts it on submission, and the
        // releases at the start of a turn rely on it.
        if !write.log.is_empty() {
            self.log_writes.push_back(write.seq);
            let first = self.log_writes.front().copied().unwrap_or(0);
            self.durability.wake_at.store(first, Ordering::Release);
        }
        p.submit(write);
    }

    fn checkpoint(&mut self, job: CheckpointJob) {
        if let Some(p) = self.persister {
            p.submit_checkpoint(job);
        }
    }

    /// Through the hold queue even when nothing waits: frames held by an
    /// earlier turn that the persister's callback has not sent yet must not
    /// be overtaken.
    fn hold(&mut self, until: u64, messages: Vec<(ReplicaId, PeerMessage)>) {
        let frames = self.encode(messages);
        if !frames.is_empty() {
            self.durability.hold(until, frames);
        }
    }

    fn send_now(&mut self, messages: Vec<(ReplicaId, PeerMessage)>) {
        let mut by_peer: BTreeMap<ReplicaId, Vec<Bytes>> = BTreeMap::new();
        for (to, frame) in self.encode(messages) {
            by_peer.entry(to).or_default().push(frame);
        }
        self.durability.send_now(by_peer);
    }
}
