//! The node loop: one OS thread that owns the replica's [`Node`] and drives
//! it with everything that happens — client invocations, peer frames, ticks
//! and the persister's durability reports — then runs the executions the
//! node hands out on a worker pool and sends what comes out.
//!
//! # Group commit and the hold rule
//!
//! Each turn of the loop handles every event already queued, runs the
//! executions, and then carries out the node's `Ready` through
//! [`creek_node::Node::drive`] (the I/O is in `turn`): views go to their
//! clients, the turn's write goes to the persister (which writes every
//! write queued meanwhile in one transaction with one fsync), messages the
//! node lets go leave now, and the messages it holds wait in a
//! [`HoldQueue`](creek_node::HoldQueue) until the persister reports their write durable. The node
//! decides what waits for what (`creek_node::ready` states the rule and why
//! views are never held); this loop only carries it out. Released frames
//! are sent from the persister's callback, so a release does not wait for
//! the node loop to be free.
//!
//! # Failure
//!
//! The loop ends on a requested shutdown, or with a [`Fatal`] cause: a
//! failed write (after an fsync error nothing is guessed: the replica
//! stops), consensus stopping (CAB found that this replica lost data it
//! acknowledged) or its channel closing without a shutdown request. Waiting
//! clients learn the cause first; the server then takes the process down
//! (a replica that stays up refusing everything helps nobody).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_core::{Addrs, ExecKey, Group, ReplicaId};
use creek_node::{GroupError, Node};
use creek_store::{LogStore, Persister};
use creek_wire::Limits;
use tokio::sync::{mpsc, oneshot};

mod auth;
mod directory;
mod durability;
mod execute;
pub(crate) mod messages;
mod mpo;
mod report;
mod turn;

pub(crate) use turn::resolve;

pub use durability::Durability;
pub use messages::{
    CommittedPart, Event, Gone, GroupRefusal, HealthSnapshot, Invocation, Reply, ReplyTo,
    StatusSnapshot,
};

use crate::metrics::{Metrics, Stage};
use crate::transport::Transport;
use crate::watch::{WatchHub, WatchRequest};
use turn::{Clients, Route, Turn, Unpersisted};

/// Why a replica stopped without being asked to. Every cause ends the
/// process: a supervisor restarts it or alerts an operator.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Fatal {
    /// A write to the data directory failed. After a failed fsync what is
    /// on disk is unknown, so the replica stops rather than guess.
    #[error("disk failure: {0}")]
    Disk(String),
    /// Consensus (CAB) stopped, e.g. because the leader's commit index
    /// shows that this replica lost data it acknowledged.
    #[error("consensus stopped: {0}")]
    Consensus(String),
    /// The node loop panicked: a bug (the panic hook has printed where, on
    /// stderr).
    #[error("the node loop panicked: {0}")]
    Panic(String),
    /// The client API stopped serving.
    #[error("the client API stopped: {0}")]
    ClientApi(String),
    /// The node loop's event channel closed without a shutdown request.
    #[error("the node loop's event channel closed without a shutdown request")]
    Orphaned,
}

/// A group change applies within this long, or the request fails (the
/// change may still apply later: check the members).
const GROUP_CHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long ops may wait with the committed order standing still before the
/// log says what the commit path waits for.
const STALL_AFTER: Duration = Duration::from_secs(10);

/// How the loop is set up.
pub struct LoopConfig {
    /// Worker threads for executions.
    pub workers: usize,
    /// Wire limits for encoding peer frames.
    pub limits: Limits,
    /// The configured replicas' addresses (the initial group's).
    pub addrs: BTreeMap<ReplicaId, Addrs>,
    /// Bytes of committed changes kept for watchers.
    pub watch_history_bytes: usize,
    /// The rules the service checks calls against, rebuilt here from the
    /// committed `\0auth/` records when they change; `None` when the
    /// replica checks no users.
    pub auth: Option<Arc<crate::auth::Auth>>,
    /// Where native calls' replies wait for the end of the turn.
    pub corked: Arc<crate::native::out::Corked>,
    /// The shard map and this replica's place in it, on a sharded
    /// cluster: a directory replica's gate serves the map its group's
    /// committed state holds; a shard replica's checks the keys user
    /// procedures declare ([`crate::shards::ShardGate::check_user`]).
    pub shards: Option<Arc<crate::shards::ShardGate>>,
    /// The carrier of operations across shards, on a shard's replica of
    /// a cluster of several shards.
    pub mpo: Option<Arc<crate::mpo::Link>>,
    /// The node's stable-time interval (µs; 0: no stable times, and the
    /// status shows none).
    pub stable_every_us: u64,
    /// How many ops the replica recovered from its data directory: they
    /// run again before it takes client calls (until then it refuses them
    /// with `UNAVAILABLE`, and the status counter `recovering_ops` shows
    /// this number).
    pub recovered_ops: usize,
}

/// A group change proposed here, waiting to be applied.
struct PendingChange {
    change: creek_cab::MemberChange,
    reply: oneshot::Sender<Result<StatusSnapshot, GroupRefusal>>,
    deadline: Instant,
}

/// The node loop's state (owned by its thread).
pub struct NodeLoop {
    node: Node<LogStore>,
    persister: Option<Persister>,
    durability: Arc<Durability>,
    transport: Arc<Transport>,
    metrics: Arc<Metrics>,
    pool: Option<rayon::ThreadPool>,
    limits: Limits,
    /// The calls this replica answers.
    clients: Clients,
    unpersisted: Unpersisted,
    /// Writes with consensus writes in them, submitted and not yet durable
    /// (see [`Durability::wake_at`]).
    log_writes: std::collections::VecDeque<u64>,
    failed: Option<Fatal>,
    /// The last durable write `/health` saw, and since when (the disk is
    /// behind while writes wait and it does not move).
    disk_seen: (u64, Instant),
    /// The node's clock: µs since the Unix epoch when the loop started,
    /// and the monotonic instant it was read at (see [`NodeLoop::now_us`]).
    epoch: (u64, Instant),
    ticks: u64,
    /// The epoch of the map whose shards the stable times follow (0: none
    /// yet; see `follow_stable_shards`).
    stable_shards_epoch: u64,
    /// The consensus tick scale last logged.
    timing_scale: u64,
    stopping: bool,
    /// A stop waiting for the leadership it handed over to be taken (at
    /// most until this instant; see [`NodeLoop::begin_stop`]).
    handing_over: Option<Instant>,
    /// How many executions the next round of [`NodeLoop::execute`] runs.
    exec_round: usize,
    /// Executions were left for the next turn when this one's ran out of
    /// [`execute::EXEC_TURN_BUDGET`]: the loop then turns again at once instead of
    /// waiting for an event.
    exec_backlog: bool,
    /// While the ops recovered from the data directory run again: how
    /// many there were, and since when. Client calls are refused meanwhile
    /// (`UNAVAILABLE`, retry at another replica): each would wait behind
    /// all of them, seconds after a busy run's crash.
    recovering: Option<(usize, Instant)>,
    /// Checkpoints asked for (backups), each answered at the first turn
    /// that ends at a clean point, or refused after its instant.
    backups: Vec<(messages::CheckpointReply, Instant)>,
    /// State-transfer work done on other threads, for the next turn.
    transfer_done: Arc<std::sync::Mutex<Vec<creek_node::TransferDone>>>,
    /// The configured replicas' addresses.
    config_addrs: BTreeMap<ReplicaId, Addrs>,
    /// The group as last applied.
    group: Group,
    /// A group change proposed here and not yet applied.
    pending_change: Option<PendingChange>,
    /// The committed length last seen to grow, and when.
    commit_progress: (u64, Instant),
    /// Watchers of changes and the recent committed changes.
    watch: WatchHub,
    /// See [`LoopConfig::auth`].
    auth: Option<Arc<crate::auth::Auth>>,
    /// The committed position after the last change the auth rules were
    /// built from (a jump is a rebuild from a checkpoint).
    auth_next: u64,
    /// The committed `\0auth/` records the rules were compiled from, kept
    /// up to date from the committed changes (read from the state only at
    /// start and after a jump).
    auth_records: BTreeMap<Bytes, Bytes>,
    /// When this replica last proposed the cluster's auth switch, and
    /// whether it said the switch disagrees with its `[auth]`.
    auth_switch: auth::SwitchState,
    /// The committed shard map, on a directory replica.
    directory: directory::DirectoryState,
    /// The shard map, on a sharded cluster (see [`LoopConfig::shards`]).
    shards: Option<Arc<crate::shards::ShardGate>>,
    /// Log lines peers can cause (see [`crate::throttle`]).
    peer_logs: report::PeerLogs,
    /// Turns that held the loop too long.
    turns: report::SlowTurns,
    /// Operations across shards.
    mpo: mpo::MpoState,
    /// See [`LoopConfig::stable_every_us`].
    stable_every_us: u64,
}

impl NodeLoop {
    /// A loop around `node`; `persister` receives its batches.
    pub fn new(
        node: Node<LogStore>,
        persister: Persister,
        durability: Arc<Durability>,
        transport: Arc<Transport>,
        metrics: Arc<Metrics>,
        config: LoopConfig,
    ) -> Self {
        let mut node = node;
        let group = node.group();
        // Committed changes are always recorded (the history watchers
        // resume from); tentative ones while a watcher wants them.
        node.record_changes(true, false);
        let watch = WatchHub::new(
            node.replica().counters().finalized,
            config.watch_history_bytes,
        );
        let pool = (config.workers > 1)
            .then(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(config.workers)
                    .thread_name(|i| format!("creek-exec-{i}"))
                    .build()
                    .ok()
            })
            .flatten();
        let mut this = NodeLoop {
            node,
            persister: Some(persister),
            durability,
            transport,
            metrics: metrics.clone(),
            pool,
            limits: config.limits,
            clients: Clients {
                routes: HashMap::new(),
                accepted: Vec::new(),
                corked: config.corked,
                journal: Default::default(),
                metrics: metrics.clone(),
            },
            unpersisted: Unpersisted::default(),
            log_writes: std::collections::VecDeque::new(),
            failed: None,
            disk_seen: (0, Instant::now()),
            epoch: (wall_clock_us(), Instant::now()),
            ticks: 0,
            stable_shards_epoch: 0,
            commit_progress: (0, Instant::now()),
            timing_scale: 1,
            stopping: false,
            handing_over: None,
            exec_round: execute::EXEC_ROUND_MAX,
            exec_backlog: false,
            recovering: (config.recovered_ops > 0).then(|| (config.recovered_ops, Instant::now())),
            backups: Vec::new(),
            transfer_done: Arc::default(),
            config_addrs: config.addrs,
            group,
            pending_change: None,
            watch,
            auth: config.auth,
            auth_next: 0,
            auth_records: BTreeMap::new(),
            auth_switch: auth::SwitchState::default(),
            directory: directory::DirectoryState {
                gate: config
                    .shards
                    .clone()
                    .filter(|g| g.role() == crate::shards::Role::Directory),
                ..Default::default()
            },
            shards: config.shards,
            peer_logs: report::PeerLogs::default(),
            turns: report::SlowTurns::default(),
            mpo: mpo::MpoState::new(config.mpo),
            stable_every_us: config.stable_every_us,
        };
        this.reload_auth();
        // The group as recovered, members added since the configuration
        // was written included: their links are up before the first turn.
        let peers = turn::group_peers(this.node.id(), &this.config_addrs, &this.group);
        this.transport.set_peers(&peers);
        this
    }

    /// Run until `Shutdown` (`Ok` once everything is durable) or until the
    /// replica fails: then every waiting client learns why, and so does the
    /// caller, which must take the process down.
    pub fn run(mut self, mut events: mpsc::Receiver<Event>) -> Result<(), Fatal> {
        loop {
            // With executions left over, a turn without an event goes on
            // with them.
            let event = if self.exec_backlog {
                match events.try_recv() {
                    Ok(event) => Some(event),
                    Err(mpsc::error::TryRecvError::Empty) => None,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        return self.abandon(Fatal::Orphaned)
                    }
                }
            } else {
                let Some(event) = events.blocking_recv() else {
                    return self.abandon(Fatal::Orphaned);
                };
                Some(event)
            };
            let began = Instant::now();
            let mut handled = 0;
            if let Some(event) = event {
                self.handle_timed(event);
                handled += 1;
            }
            // Group everything already queued into this turn.
            for _ in 0..4096 {
                match events.try_recv() {
                    Ok(event) => {
                        self.handle_timed(event);
                        handled += 1;
                    }
                    Err(_) => break,
                }
            }
            let events_done = began.elapsed();
            self.execute(began);
            let executed = began.elapsed();
            self.flush(began);
            self.turns.timed(began, handled, events_done, executed);
            // A turn this long held every probe and echo it handled: the
            // link timing must not take it for the network.
            if began.elapsed().as_micros() as u64 > self.node.stall_us() {
                self.node.stalled();
            }
            self.pump_watchers();
            self.answer_backups();
            // A failure report whose nudge found the channel full is seen
            // here.
            self.check_disk();
            self.check_consensus();
            self.log_membership();
            self.log_own_origin_refusals();
            // Replies sent after the turn's flush (refusals, failures).
            self.clients.corked.uncork();
            if let Some(fatal) = self.failed.clone() {
                return self.abandon(fatal);
            }
            if self
                .handing_over
                .is_some_and(|until| Instant::now() >= until || !self.node.cab().is_leader())
            {
                self.handing_over = None;
                self.stop_now();
            }
            if self.stopping {
                return self.stop();
            }
        }
    }

    /// A planned stop. A leader first hands its leadership to the most
    /// up-to-date voter (raft's leader transfer: that voter campaigns at
    /// once, without waiting for an election timeout) and keeps serving
    /// until it has been taken, for at most one election timeout (then the
    /// library has given the transfer up, and the group elects as after a
    /// crash). So the group goes without a leader for about one round trip
    /// instead of an election timeout.
    fn begin_stop(&mut self) {
        if self.stopping || self.handing_over.is_some() {
            return;
        }
        match self.node.hand_over_leadership() {
            Some(to) => {
                let wait = Duration::from_micros(self.node.link_timing().election_timeout_us);
                tracing::info!(
                    to = %to,
                    "stopping: handing leadership over first (waiting at most {} ms)",
                    wait.as_millis()
                );
                self.handing_over = Some(Instant::now() + wait);
                // Its messages leave with this turn's flush.
            }
            None => self.stop_now(),
        }
    }

    /// Answer the checkpoints asked for (backups) if this turn ends at a
    /// clean point; refuse those whose wait is over, or all of them when
    /// this replica is not a member. A busy replica is at a clean point
    /// only now and then, between turns: asking at every turn's end finds
    /// one, where asking at moments of a client's choosing may not.
    fn answer_backups(&mut self) {
        if self.backups.is_empty() {
            return;
        }
        let member = self.node.standing() == creek_node::Standing::Member;
        let taken = member.then(|| self.node.checkpoint()).flatten();
        let cluster = self.node.identity().cluster_id();
        let now = Instant::now();
        for (reply, until) in std::mem::take(&mut self.backups) {
            match &taken {
                Some(c) => {
                    let _ = reply.send(Some((c.clone(), cluster)));
                }
                None if member && now < until && !reply.is_closed() => {
                    self.backups.push((reply, until));
                }
                None => {
                    let _ = reply.send(None);
                }
            }
        }
    }

    fn stop_now(&mut self) {
        self.stopping = true;
        self.node.sync_pending_writes();
    }

    /// The node's clock: wall-clock time (µs since the Unix epoch) as
    /// read once at the loop's start, advanced by the monotonic clock
    /// since. So commit times and snapshot times are Unix times a client
    /// can subtract from its own clock (a snapshot's staleness), while a
    /// wall clock stepped under a running replica moves nothing. Commit
    /// times never go back along the committed list whatever this clock
    /// does (each is at least the one before plus one), a restart after
    /// the wall clock was set back included.
    fn now_us(&self) -> u64 {
        self.clock_at(Instant::now())
    }

    /// The node's clock at `instant` (the loop's start for an instant
    /// before it).
    fn clock_at(&self, instant: Instant) -> u64 {
        let (wall_us, at) = self.epoch;
        wall_us.saturating_add(instant.saturating_duration_since(at).as_micros() as u64)
    }

    /// [`NodeLoop::handle`], its cost counted by kind for the slow-turn
    /// report.
    fn handle_timed(&mut self, event: Event) {
        let (kind, began) = (event.kind(), Instant::now());
        self.handle(event);
        self.turns.event(kind, began.elapsed());
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Invoke(inv) => self.invoke(inv),
            Event::Frame {
                from,
                frame,
                received,
            } => {
                // The frame may answer one the persister's callback released:
                // consensus must count the write that released it first (a
                // candidate's votes come back only after its own write).
                self.node.on_durable(self.durability.durable());
                let (received_us, now_us) = (self.clock_at(received), self.now_us());
                if let Err(e) = self.node.on_frame_at(from, &frame, received_us, now_us) {
                    self.log_malformed_frame(from, &e);
                }
            }
            Event::DiskFailure => self.check_disk(),
            // The turn's flush tells the node.
            Event::Durable => {}
            Event::Tick => self.tick(),
            Event::Status(reply) => {
                let _ = reply.send(self.status());
            }
            Event::Health(reply) => {
                let health = self.health();
                let _ = reply.send(health);
            }
            Event::Strip(reply) => {
                let r = self.node.replica();
                let strip =
                    self.clients
                        .journal
                        .strip(r.committed(), r.committed_len(), &r.tentative());
                let _ = reply.send(strip);
            }
            Event::UserProcedures(reply) => {
                let user = self.node.replica().user_procedures();
                let _ = reply.send(crate::call::answer::user_procedure_infos(&user));
            }
            Event::Dump(reply) => {
                let r = self.node.replica();
                let _ = reply.send((r.committed_len(), r.committed_state().into_iter().collect()));
            }
            Event::Committed { from, max, reply } => {
                let _ = reply.send(self.committed_part(from, max));
            }
            Event::ChangeGroup {
                change,
                addrs,
                reply,
            } => self.change_group(change, addrs, reply),
            Event::Checkpoint { reply, within } => {
                self.backups.push((reply, Instant::now() + within));
                self.answer_backups();
            }
            Event::Watch(req, reply) => {
                let _ = reply.send(self.add_watcher(req));
            }
            Event::Mpo(req, answer) => self.on_mpo(req, answer),
            Event::Leadership(reply) => {
                let leads = self.node.cab().leader() == Some(self.node.id());
                let _ = reply.send((leads, self.node.cab().term()));
            }
            Event::Shutdown => self.begin_stop(),
        }
    }

    /// A new watcher, if this replica serves (the answer goes to the gRPC
    /// handler as is).
    #[allow(clippy::result_large_err)]
    fn add_watcher(&mut self, req: WatchRequest) -> Result<(), tonic::Status> {
        if let Some(why) = &self.failed {
            return Err(tonic::Status::unavailable(why.to_string()));
        }
        if self.node.standing() != creek_node::Standing::Member {
            return Err(tonic::Status::unavailable(
                "this replica is not a member of its group (joining, lost or removed): watch \
                 another replica",
            ));
        }
        // Changes already taken belong before the new watcher's start.
        self.pump_watchers();
        let tentative = req.tentative;
        self.watch.watch(req)?;
        if tentative {
            self.node.record_changes(true, true);
        }
        Ok(())
    }

    /// Hand the changes of this turn to the watchers and move them on.
    fn pump_watchers(&mut self) {
        let changes = self.node.take_changes();
        self.on_auth_changes(&changes);
        self.on_directory_changes(&changes);
        self.on_owned_changes(&changes);
        self.mpo_answer_sequenced();
        let finalized = self.node.replica().counters().finalized;
        self.watch.on_changes(changes, finalized);
        self.watch.pump();
        let tentative = self.watch.wants_tentative();
        if self.node.replica().recording() != (true, tentative) {
            self.node.record_changes(true, tentative);
        }
    }

    fn invoke(&mut self, mut inv: Invocation) {
        if let Some(why) = &self.failed {
            let _ = inv.reply.send(Reply::Failed(why.to_string()));
            return;
        }
        let strong = inv.request.strong;
        let refused = |metrics: &Metrics, name: &str, outcome| {
            metrics.op(strong, outcome);
            let label = metrics.procedures.label_if_known(name);
            metrics.procedures.finished(label, strong, outcome, None);
        };
        if let Some(why) = self.recovery_refusal() {
            refused(
                &self.metrics,
                &telemetry_name(&inv.request.call),
                "rejected",
            );
            let _ = inv
                .reply
                .send(Reply::Rejected(creek_core::InvokeError::NotServing(why)));
            return;
        }
        if let Some(who) = &inv.principal {
            if let Err(denied) = self.authorize(who, &inv.request.call) {
                refused(&self.metrics, &telemetry_name(&inv.request.call), "denied");
                let _ = inv.reply.send(Reply::Denied(denied));
                return;
            }
            // The op names its user, so every execution checks the rights
            // again at the op's place in the order.
            inv.request.call.user = Some(Arc::from(who.user.as_str()));
        }
        match self.check_user_shard(&inv.request.call, strong) {
            Ok(None) => {}
            // An operation across shards, this replica its origin.
            Ok(Some(mpo)) => inv.request.call = mpo.call(&inv.request.call),
            Err(why) => {
                refused(
                    &self.metrics,
                    &telemetry_name(&inv.request.call),
                    "rejected",
                );
                let _ = inv.reply.send(Reply::Refused(why));
                return;
            }
        }
        let views = inv.request.views;
        let procedure = inv.request.call.name.clone();
        let across =
            (procedure.as_ref() == creek_procs::mpo::RUN).then(|| inv.request.call.clone());
        match self
            .node
            .invoke_answering(inv.request, inv.answer_after, self.now_us())
        {
            Ok(handle) => {
                let name = across
                    .as_ref()
                    .map_or(procedure.as_ref().into(), telemetry_name);
                let label = self.metrics.procedures.label(&name);
                if let (Some(call), ExecKey::Op(id)) = (across, handle) {
                    self.mpo_invoked(id, call);
                }
                self.clients.accepted.push((inv.reply.clone(), handle));
                if let ExecKey::Op(id) = handle {
                    self.clients
                        .journal
                        .invoked(id, procedure.clone(), strong, inv.received);
                }
                self.metrics
                    .stage(strong, Stage::Invoked, inv.received.elapsed().as_secs_f64());
                if matches!(handle, ExecKey::Op(_)) && self.persister.is_some() {
                    self.unpersisted.this_turn.push((strong, inv.received));
                }
                self.clients.routes.insert(
                    handle,
                    Route {
                        reply: inv.reply,
                        views,
                        strong,
                        received: inv.received,
                        procedure: label,
                        first: None,
                    },
                );
            }
            Err(e) => {
                let name = across
                    .as_ref()
                    .map_or(procedure.as_ref().into(), telemetry_name);
                refused(&self.metrics, &name, "rejected");
                let _ = inv.reply.send(Reply::Rejected(e));
            }
        }
    }

    /// On a cluster of several shards, a user procedure's call runs on
    /// this shard only if this shard owns every key it declares, or as
    /// an operation across shards (the front door checks built-ins; a user
    /// procedure's declarations are in the replicated state). Other calls
    /// pass.
    #[allow(clippy::result_large_err)] // Sent on as it is, once per call.
    fn check_user_shard(
        &self,
        call: &creek_types::ProcCall,
        strong: bool,
    ) -> Result<Option<creek_procs::mpo::MpoCall>, tonic::Status> {
        let Some(gate) = self.shards.as_ref().filter(|g| g.routes_calls()) else {
            return Ok(None);
        };
        let replica = self.node.replica();
        if replica.registry().get(&call.name).is_some() {
            return Ok(None);
        }
        // An unknown procedure is refused by the replica's own check.
        let Some(user) = replica.user_procedure(&call.name) else {
            return Ok(None);
        };
        let declared = user.compiled().map_or(&[][..], |p| p.declared_keys());
        gate.check_user(call, strong, declared)
    }

    fn tick(&mut self) {
        self.ticks += 1;
        let now = self.now_us();
        self.node.tick(now);
        self.mpo_chase();
        self.log_timing_change();
        // Clients that went away.
        self.clients.routes.retain(|_, r| !r.reply.is_closed());
        if self.ticks.is_multiple_of(10) {
            self.refresh_gauges();
            self.watch_commit_stall();
            self.follow_stable_shards();
        }
        if self.ticks.is_multiple_of(100) {
            self.follow_directory_state();
            self.propose_auth_switch();
        }
        if self
            .pending_change
            .as_ref()
            .is_some_and(|p| Instant::now() >= p.deadline)
        {
            if let Some(p) = self.pending_change.take() {
                let _ = p.reply.send(Err(GroupRefusal {
                    error: GroupError::NotApplied(p.change),
                    leader: None,
                }));
            }
        }
    }

    /// On a shard's replica: the global stable time is the least over the
    /// shards the map it serves under lists (a shard added or dropped
    /// since it started included).
    fn follow_stable_shards(&mut self) {
        let Some(gate) = self
            .shards
            .as_ref()
            .filter(|_| self.directory.gate.is_none())
        else {
            return;
        };
        let epoch = gate.epoch();
        if epoch == self.stable_shards_epoch {
            return;
        }
        self.stable_shards_epoch = epoch;
        let shards: Vec<u32> = gate.map().shards.keys().map(|s| u32::from(s.0)).collect();
        self.node.set_stable_shards(&shards);
    }

    /// Every replica's addresses: the configured ones, then those of the
    /// members added since.
    fn addrs(&self) -> BTreeMap<ReplicaId, Addrs> {
        turn::all_addrs(&self.config_addrs, &self.group)
    }

    /// The group changed (the turn connected to its members): answer a
    /// change proposed here once it shows.
    fn on_group(&mut self, group: Group) {
        tracing::info!(
            voters = ?group.voters,
            learners = ?group.learners,
            outgoing = ?group.voters_outgoing,
            conf_index = group.conf_index,
            "replica group"
        );
        self.group = group;
        let done = self.pending_change.as_ref().is_some_and(|p| {
            let members = self.group.members();
            match p.change {
                creek_cab::MemberChange::AddLearner(id) => members.contains(&id),
                creek_cab::MemberChange::Promote(id) => self.group.voters.contains(&id),
                creek_cab::MemberChange::Remove(id) => !members.contains(&id),
            }
        });
        if done {
            if let Some(p) = self.pending_change.take() {
                let _ = p.reply.send(Ok(self.status()));
            }
        }
    }

    /// Propose a group change (see [`Event::ChangeGroup`]).
    fn change_group(
        &mut self,
        change: creek_cab::MemberChange,
        addrs: Option<Addrs>,
        reply: oneshot::Sender<Result<StatusSnapshot, GroupRefusal>>,
    ) {
        if self.pending_change.is_some() {
            let _ = reply.send(Err(GroupRefusal {
                error: GroupError::Refused(creek_cab::ChangeRefused::InProgress),
                leader: None,
            }));
            return;
        }
        match self.node.change_group(change, addrs) {
            Ok(()) => {
                self.pending_change = Some(PendingChange {
                    change,
                    reply,
                    deadline: Instant::now() + GROUP_CHANGE_TIMEOUT,
                });
            }
            Err(error) => {
                let leader = match &error {
                    GroupError::Refused(creek_cab::ChangeRefused::NotLeader {
                        leader: Some(l),
                    }) => self.addrs().get(l).map(|a| (l.0, a.client.clone())),
                    _ => None,
                };
                let _ = reply.send(Err(GroupRefusal { error, leader }));
            }
        }
    }

    /// End of a turn: carry out the node's `Ready`.
    fn flush(&mut self, began: Instant) {
        let durable = self.durability.durable();
        // Paired with the persister, which reports only writes it took (and
        // asserts that they come in write order).
        assert!(
            durable <= self.node.written(),
            "write {durable} reported durable, last handed out {}",
            self.node.written()
        );
        self.node.on_durable(durable);
        // `log_writes` is in write order (see where writes are handed over).
        while self.log_writes.front().is_some_and(|s| *s <= durable) {
            self.log_writes.pop_front();
        }
        let mut first = self.log_writes.front().copied().unwrap_or(0);
        if self.node.views_held() > 0 {
            // Views wait for durability (`AnswerAfter`): any next write's
            // report may release them.
            first = match first {
                0 => durable + 1,
                f => f.min(durable + 1),
            };
        }
        self.durability.wake_at.store(first, Ordering::Release);
        self.mpo_wake();
        self.time_persisted();
        if let Some(p) = &self.persister {
            self.node.on_checkpoint_durable(p.checkpoint_durable());
        }
        let done = self
            .transfer_done
            .lock()
            .map(|mut d| std::mem::take(&mut *d))
            .unwrap_or_default();
        for d in done {
            self.node.on_transfer_done(d);
        }
        let mut turn = Turn {
            clients: &mut self.clients,
            persister: self.persister.as_ref(),
            durability: &self.durability,
            log_writes: &mut self.log_writes,
            unpersisted: &mut self.unpersisted,
            limits: self.limits,
            transport: &self.transport,
            me: self.node.id(),
            config_addrs: &self.config_addrs,
            transfer_done: &self.transfer_done,
            group: None,
            mpo: self.mpo.link.as_ref(),
            mpo_sender: self.mpo.link.is_some()
                && self.node.cab().leader().is_none_or(|l| l == self.node.id()),
            echoes_until: began + Duration::from_micros(self.node.stall_us()),
        };
        self.node.drive(&mut turn);
        let group = turn.group.take();
        // Payloads invoked this turn went with its write, if it had one.
        self.unpersisted.this_turn.clear();
        if let Some(group) = group {
            self.on_group(group);
        }
        self.mpo_release();
    }

    /// Take in a failure report of the persister.
    fn check_disk(&mut self) {
        if self.failed.is_none() {
            if let Some(e) = self.durability.failure() {
                self.node.on_disk_failure(e.clone());
                self.fail(Fatal::Disk(e));
            }
        }
    }

    /// CAB stops for good on what it cannot survive (a leader's commit
    /// index past the end of this log: lost data); so does the replica.
    fn check_consensus(&mut self) {
        if self.failed.is_none() {
            if let Some(why) = self.node.cab().failure() {
                self.fail(Fatal::Consensus(why.to_owned()));
            }
        }
    }

    /// Time the `persisted` stage of the ops whose writes became durable.
    fn time_persisted(&mut self) {
        for (seq, at) in self.durability.take_durable_at() {
            for (strong, received) in self.unpersisted.by_write.release(seq) {
                let waited = at.saturating_duration_since(received);
                self.metrics
                    .stage(strong, Stage::Persisted, waited.as_secs_f64());
            }
        }
    }

    /// The replica failed: stop acknowledging anything (held frames are
    /// dropped: what backs them may not be durable); every waiting client
    /// learns why. The loop ends at the end of the turn.
    fn fail(&mut self, why: Fatal) {
        let message = why.to_string();
        for (_, r) in self.clients.routes.drain() {
            self.metrics.op(r.strong, "unavailable");
            let _ = r.reply.send(Reply::Failed(message.clone()));
        }
        self.durability.drop_held();
        self.failed.get_or_insert(why);
    }

    /// End the loop on `why` and hand the cause back. The persister is
    /// closed (what was submitted is written) unless the disk is what
    /// failed: then nothing more is written.
    fn abandon(&mut self, why: Fatal) -> Result<(), Fatal> {
        self.fail(why.clone());
        self.clients.corked.uncork();
        if let Some(p) = self.persister.take() {
            if matches!(why, Fatal::Disk(_)) {
                drop(p);
            } else if let Err(e) = p.close() {
                tracing::warn!(error = %e, "closing the data directory of a failed replica");
            }
        }
        Err(why)
    }

    /// The requested stop: make everything durable. A write failing now is
    /// still a disk failure: not everything acknowledged may be on disk.
    fn stop(&mut self) -> Result<(), Fatal> {
        self.flush(Instant::now());
        let mut result = Ok(());
        if let Some(p) = self.persister.take() {
            if let Err(e) = p.close() {
                let why = Fatal::Disk(format!("at shutdown: {e}"));
                self.fail(why.clone());
                result = Err(why);
            }
        }
        for (_, r) in self.clients.routes.drain() {
            self.metrics.op(r.strong, "unavailable");
            let _ = r.reply.send(Reply::Failed(
                "the replica shut down before the op's final view".into(),
            ));
        }
        self.clients.corked.uncork();
        result
    }
}

/// Now, in µs since the Unix epoch (0 from a clock set before 1970: the
/// node's clock then counts from the loop's start, as before).
fn wall_clock_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The nice value of state-transfer threads: encoding and checking a whole
/// checkpoint is bulk work, and on a machine with few cores it must not hold
/// a core that the node, persister and client threads are waiting for.
const TRANSFER_NICE: i32 = 10;

/// Lower the calling thread's CPU priority to [`TRANSFER_NICE`] (on Linux a
/// nice value is per thread). Best effort: a failure leaves it as it was.
fn yield_to_serving_threads() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(None, TRANSFER_NICE) {
        tracing::debug!(error = %e, "cannot lower the state-transfer thread's priority");
    }
}

/// The name a call's telemetry counts it under: the client's procedure
/// (for an operation across shards, the call its copies run).
fn telemetry_name(call: &creek_types::ProcCall) -> std::borrow::Cow<'_, str> {
    if call.name.as_ref() == creek_procs::mpo::RUN {
        if let Ok(mpo) = creek_procs::mpo::MpoCall::decode(&call.args) {
            return mpo.name.to_string().into();
        }
    }
    call.name.as_ref().into()
}
