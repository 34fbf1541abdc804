//! The simulation engine: one thread, virtual time, one seeded PRNG, one
//! event queue. It runs N replicas of one protocol — Creek's
//! `creek_node::Node`, the one the server runs, or a baseline
//! (`crate::baseline`) — on a modelled network and modelled CPUs, with
//! faults and closed- and open-loop clients, and records what the clients
//! saw.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::sync::Arc;

use crate::replica::{DiskPoll, DiskSetup};
use bytes::Bytes;
use creek_cab::{MemCabStorage, MemberChange};
use creek_check::history::{History, OpRecord, SeenView, SETUP_CLIENT};
use creek_core::{Checkpoint, ExecKey, InvokeError, Op, OpId, ReplicaId, Request, Views};
use creek_exec::{ClientRequestId, Completion, Registry};
use creek_node::NodeConfig;
use creek_wire::{GossipMessage, Limits, PeerMessage};

use crate::baseline::BaselineNode;
use crate::config::{Links, PlantedBug, Protocol, SimConfig, WAN_JITTER_PERCENT, WAN_ONE_WAY_US};
use crate::net::Network;
use crate::replica::{CreekReplica, ReplicaCounts, SimReplica};
use crate::rng::Rng;
use crate::workload::Workload;

enum Ev {
    Deliver {
        from: usize,
        to: usize,
        frame: Bytes,
    },
    Tick,
    ExecDone {
        node: usize,
        epoch: u64,
        done: Completion<ExecKey>,
    },
    Client {
        client: usize,
    },
    Arrival,
    Warmup,
    Chaos,
    Heal,
    Restart {
        node: usize,
    },
    SyncDone {
        node: usize,
        epoch: u64,
    },
    DiskPoll {
        node: usize,
        epoch: u64,
    },
    End,
}

impl Ev {
    fn code(&self) -> u64 {
        match self {
            Ev::Deliver { from, to, .. } => 1 + 16 * (*from as u64) + 256 * (*to as u64),
            Ev::Tick => 2,
            Ev::ExecDone { node, .. } => 3 + 16 * (*node as u64),
            Ev::Client { client } => 4 + 16 * (*client as u64),
            Ev::Arrival => 9,
            Ev::Warmup => 10,
            Ev::Chaos => 5,
            Ev::Heal => 6,
            Ev::Restart { node } => 7 + 16 * (*node as u64),
            Ev::SyncDone { node, .. } => 11 + 16 * (*node as u64),
            Ev::DiskPoll { node, .. } => 12 + 16 * (*node as u64),
            Ev::End => 8,
        }
    }
}

struct SimNode {
    node: Box<dyn SimReplica>,
    busy_cores: usize,
    /// Core-microseconds of executions started.
    busy_us: u64,
    epoch: u64,
    clock_offset_us: i64,
    clock_drift_ppm: i64,
    handles: BTreeMap<ExecKey, usize>,
    /// A `DiskPoll` is scheduled for this time.
    disk_wake_at: Option<u64>,
    /// The next sampled invariant check is due after this time.
    next_invariants_at: u64,
    /// Its disk was lost (it restarted empty): its ops from before were not
    /// lost with unsynced writes, whatever its restarts recover.
    wiped: bool,
    /// Its disk is stalled until this time: each fsync takes 20-60 ms.
    stalled_until: u64,
    /// Its place in the replica group.
    slot: Slot,
}

/// A replica's place in the group (membership changes, `--faults member`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// In the group (or being added to it).
    Member,
    /// Not added yet: down, on an empty disk.
    Spare,
    /// Its removal was proposed: clients leave it, the faults and the
    /// checks no longer count it (the end of the run settles whether it
    /// was removed).
    Removed,
}

/// Replicas the simulator can add to a group during a run with membership
/// changes (each under a new id: ids never return).
const SPARES: usize = 2;

struct Client {
    replica: usize,
    pending: Option<usize>,
    /// The last request seq sent; requests carry `(client + 1, seq)`.
    seq: u64,
    /// Seqs answered, for the next request to acknowledge.
    acks: Vec<u64>,
}

/// Counts of injected faults by class (and of what they caused:
/// `refused_disk_behind`, client invocations refused while a disk was
/// behind).
pub type FaultCounts = BTreeMap<&'static str, u64>;

/// `CREEK_SIM_DEBUG` set: crashes, restarts, lost disks and the first
/// prefix violation go to stderr as they happen, and every replica's inner
/// state at the end (for a failing seed).
fn debug_log() -> bool {
    std::env::var_os("CREEK_SIM_DEBUG").is_some()
}

/// How long a `disk_stall` fault lasts.
const STALL_US: u64 = 300_000;
/// An fsync's time on a stalled disk.
const STALLED_FSYNC_US: (u64, u64) = (20_000, 60_000);
/// Creek nodes' `pending_writes_max` in the simulator.
const SIM_PENDING_WRITES_MAX: u64 = 32;
/// Creek nodes' `compaction_lag_max` in the simulator.
const SIM_COMPACTION_LAG_MAX: u64 = 64;

/// Bytes on the wire by protocol.
#[derive(Clone, Copy, Debug, Default)]
pub struct Traffic {
    /// Gossip frame bytes.
    pub gossip_bytes: u64,
    /// CAB frame bytes (link probes included).
    pub cab_bytes: u64,
}

/// Cumulative counters over every replica at one moment, for measuring a
/// window of a run (differences of two readings).
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    /// Virtual time of the reading.
    pub at_us: u64,
    /// Every replica's counters, summed.
    pub counts: ReplicaCounts,
    /// Core-microseconds of executions started.
    pub busy_us: u64,
    /// Bytes on the wire.
    pub traffic: Traffic,
}

impl Totals {
    /// `self − earlier`, field by field (`at_us` stays `self`'s).
    pub fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            at_us: self.at_us,
            counts: self.counts.since(&earlier.counts),
            busy_us: self.busy_us - earlier.busy_us,
            traffic: Traffic {
                gossip_bytes: self.traffic.gossip_bytes - earlier.traffic.gossip_bytes,
                cab_bytes: self.traffic.cab_bytes - earlier.traffic.cab_bytes,
            },
        }
    }
}

/// Readings of [`Totals`] at the end of the warm-up, when the clients stop
/// and when the run settled.
#[derive(Clone, Copy, Debug, Default)]
pub struct Readings {
    /// At the end of the warm-up (all zero without one).
    pub warmup: Totals,
    /// When the clients stopped.
    pub end: Totals,
    /// When the run ended (settled or out of time).
    pub finish: Totals,
}

/// What a run produced, for the checkers and the report.
pub struct Outcome {
    /// What clients saw.
    pub history: History,
    /// Every op seen on the wire, by id.
    pub ops: BTreeMap<OpId, Arc<Op>>,
    /// The final replicas (all up after a run that settled).
    pub nodes: Vec<Box<dyn SimReplica>>,
    /// Whether each replica is in the group at the end (false for a spare
    /// never added, and for a removed replica).
    pub members: Vec<bool>,
    /// A violation of the committed-prefix property seen during the run.
    pub prefix_violation: Option<String>,
    /// Faults injected.
    pub faults: FaultCounts,
    /// Bytes on the wire.
    pub traffic: Traffic,
    /// Hash of the sequence of processed events and the final orders.
    pub trace_hash: u64,
    /// The registry the replicas ran.
    pub registry: Arc<Registry>,
    /// Virtual time clients ran.
    pub duration_us: u64,
    /// Whether the cluster converged before the time limit.
    pub settled: bool,
    /// How long after the clients stopped (every fault healed, every
    /// replica restarted) the cluster settled.
    pub settled_after_us: Option<u64>,
    /// The liveness bound: a settled run must settle within this long after
    /// the faults healed ([`liveness_bound_us`]).
    pub liveness_bound_us: u64,
    /// The workload (for its checker).
    pub workload: Box<dyn Workload>,
    /// Counter readings for measuring the window after the warm-up.
    pub readings: Readings,
    /// Whether the replicas started from the workload's preloaded state
    /// (a replay of the committed order then starts from that state).
    pub preloaded: bool,
}

/// The liveness bound of a run whose slowest link takes `one_way_us` one
/// way: once every fault has healed and every replica is up, every strong op
/// completes (and the cluster settles) within this long. It covers a
/// replica's recovery, an election under the timing stretched for the
/// links, re-forwarded casts, pulls of missing payloads and the committed
/// order reaching everyone.
pub fn liveness_bound_us(one_way_us: u64) -> u64 {
    LIVENESS_BASE_US + LIVENESS_ROUND_TRIPS * 2 * one_way_us
}

/// See [`liveness_bound_us`].
pub const LIVENESS_BASE_US: u64 = 2_000_000;

/// See [`liveness_bound_us`].
pub const LIVENESS_ROUND_TRIPS: u64 = 40;

/// The request a workload op becomes: strong ops and weak ops that want a
/// final view ask for both views; other weak ops for the preliminary one.
fn request_of(next: crate::workload::NextOp) -> (Request, bool) {
    let views = if next.strong || next.wants_final {
        Views::BOTH
    } else {
        Views::WEAK
    };
    let wants_final = next.wants_final;
    let request = Request {
        call: next.call,
        strong: next.strong,
        views,
    };
    (request, wants_final)
}

/// One simulation.
pub struct Sim {
    cfg: SimConfig,
    registry: Arc<Registry>,
    workload: Box<dyn Workload>,
    rng: Rng,
    now: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Ev>,
    seq: u64,
    nodes: Vec<SimNode>,
    net: Network,
    clients: Vec<Client>,
    history: History,
    ops: BTreeMap<OpId, Arc<Op>>,
    /// Ids of ops lost with their origin's disk (a client saw them).
    lost_ids: BTreeSet<OpId>,
    canonical: Vec<OpId>,
    checked_len: Vec<usize>,
    prefix_violation: Option<String>,
    trace: u64,
    faults: FaultCounts,
    traffic: Traffic,
    running_clients: bool,
    /// Setup calls without their final view yet.
    setup_pending: usize,
    /// Setup calls replica 0 refused for now (its disk was behind), in
    /// order: issued again as earlier ones finish.
    setup_backlog: VecDeque<Request>,
    ended: bool,
    next_state_check: u64,
    readings: Readings,
    preloaded: bool,
    /// The preloaded state, kept only for `check_invariants`' replays.
    initial_state: BTreeMap<Bytes, Bytes>,
    progress: Option<Box<dyn FnMut(u64, u64)>>,
}

const FNV_PRIME: u64 = 0x0000_0100_0000_01B3;

impl Sim {
    /// Build a simulation; `workload` must already be chosen.
    pub fn new(cfg: SimConfig, workload: Box<dyn Workload>) -> Result<Self, String> {
        cfg.validate()?;
        let mut registry = Registry::with_builtins();
        workload.register(&mut registry);
        let registry = Arc::new(registry);
        let mut rng = Rng::new(cfg.seed);
        // A bulk-loaded initial state, as if every replica were restored
        // from the same backup: the checkpoint of an empty history.
        let preload = workload.preload();
        let preloaded = !preload.is_empty();
        let initial_state = if cfg.check_invariants {
            preload.iter().cloned().collect()
        } else {
            BTreeMap::new()
        };
        let initial = preloaded.then(|| Checkpoint {
            state: preload,
            ..Checkpoint::default()
        });
        let ids: Vec<ReplicaId> = (1..=cfg.replicas as u16).map(ReplicaId).collect();
        let voters: Vec<u64> = ids.iter().map(|r| u64::from(r.0) + 1).collect();
        let spares = if cfg.faults.members && cfg.protocol == Protocol::Creek {
            SPARES
        } else {
            0
        };
        let slots = cfg.replicas + spares;
        let mut nodes = Vec::new();
        let durable_initial = cfg.faults.crashes();
        for me in (1..=slots as u16).map(ReplicaId) {
            let spare = !ids.contains(&me);
            let group: Vec<ReplicaId> = ids.iter().copied().chain(spare.then_some(me)).collect();
            let mut config = NodeConfig::for_group(me, &group);
            config.replica.schedule = cfg.schedule;
            config.replica.session_ttl_us = cfg.session_ttl_us;
            config.tick_us = cfg.tick_us;
            if cfg.faults.crashes() && cfg.checkpoint_every_us > 0 {
                config.checkpoint_every_ticks = (cfg.checkpoint_every_us / cfg.tick_us).max(1);
            }
            // Low enough that a stalled disk makes the node push back.
            config.pending_writes_max = SIM_PENDING_WRITES_MAX;
            // Low enough that a replica down for a while is compacted past
            // and catches up by state transfer.
            config.cab.compaction_lag_max = SIM_COMPACTION_LAG_MAX;
            let setup = DiskSetup {
                linger_us: cfg.linger_us,
                forget_unsynced_tail: cfg.plant_bug == Some(PlantedBug::ForgetUnsyncedTail),
            };
            match cfg.plant_bug {
                Some(PlantedBug::SkipInvalidation) => {
                    config.replica.planted_skip_invalidation = true
                }
                Some(PlantedBug::DeliverWithoutCab) => {
                    config.replica.planted_deliver_without_cab = true
                }
                Some(PlantedBug::IgnoreCausalContext) => {
                    config.replica.planted_ignore_causal_context = true
                }
                Some(PlantedBug::StableBeforeDurable) => {
                    config.cab.planted_deliver_on_propose = true
                }
                Some(PlantedBug::SendBeforeDurable) => config.planted_send_before_durable = true,
                Some(PlantedBug::AmnesiacVoter) => config.planted_amnesiac_voter = true,
                Some(PlantedBug::ForgetSentOps) => config.planted_forget_sent_ops = true,
                Some(PlantedBug::ForgetUnsyncedTail) | None => {}
            }
            let storage = MemCabStorage::new(voters.clone());
            let node: Box<dyn SimReplica> = match cfg.protocol {
                Protocol::Creek if spare => {
                    Box::new(CreekReplica::spare(config, registry.clone(), setup))
                }
                Protocol::Creek => Box::new(CreekReplica::new(
                    config,
                    registry.clone(),
                    setup,
                    initial.clone(),
                    durable_initial,
                )?),
                baseline => Box::new(BaselineNode::new(
                    baseline,
                    me,
                    config.gossip,
                    config.cab,
                    storage,
                    registry.clone(),
                    initial
                        .as_ref()
                        .map(|c| c.state.clone())
                        .unwrap_or_default(),
                    cfg.archie_window,
                    cfg.schedule,
                )?),
            };
            let (offset, drift) = if cfg.faults.clock {
                (
                    rng.range(0, 100_000) as i64 - 50_000,
                    rng.range(0, 2_000) as i64 - 1_000,
                )
            } else {
                (0, 0)
            };
            nodes.push(SimNode {
                node,
                busy_cores: 0,
                busy_us: 0,
                epoch: 0,
                clock_offset_us: offset,
                wiped: false,
                stalled_until: 0,
                slot: if spare { Slot::Spare } else { Slot::Member },
                clock_drift_ppm: drift,
                handles: BTreeMap::new(),
                disk_wake_at: None,
                next_invariants_at: 0,
            });
        }
        let mut net = match cfg.links {
            Links::Lan => Network::new(slots, cfg.latency_us, cfg.bandwidth_bps),
            Links::Wan => {
                let n = slots;
                let (lo, hi) = WAN_ONE_WAY_US;
                let links = (0..n * n)
                    .map(|_| {
                        let base = rng.range(lo, hi);
                        let jitter = base * WAN_JITTER_PERCENT / 100;
                        (base - jitter, base + jitter)
                    })
                    .collect();
                Network::with_links(n, links, cfg.bandwidth_bps)
            }
        };
        let mut faults = FaultCounts::new();
        if cfg.faults.loss {
            net.loss = 0.02;
            net.duplicate = 0.01;
            net.reorder = 0.05;
            faults.insert("loss", 1);
        }
        if cfg.faults.clock {
            faults.insert("clock_skew", 1);
        }
        let clients = (0..cfg.clients)
            .map(|c| Client {
                replica: c % cfg.replicas,
                pending: None,
                seq: 0,
                acks: Vec::new(),
            })
            .collect();
        Ok(Sim {
            checked_len: vec![0; slots],
            cfg,
            registry,
            workload,
            rng,
            now: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            seq: 0,
            nodes,
            net,
            clients,
            history: History::default(),
            ops: BTreeMap::new(),
            lost_ids: BTreeSet::new(),
            canonical: Vec::new(),
            prefix_violation: None,
            trace: 0xCBF2_9CE4_8422_2325,
            faults,
            traffic: Traffic::default(),
            running_clients: true,
            setup_pending: 0,
            setup_backlog: VecDeque::new(),
            ended: false,
            next_state_check: 0,
            readings: Readings::default(),
            preloaded,
            initial_state,
            progress: None,
        })
    }

    /// Call `f(now_us, duration_us)` every 10 ms of virtual time, `now_us`
    /// capped at `duration_us` (the run goes on past it until it settles),
    /// for a progress bar.
    pub fn on_progress(&mut self, f: impl FnMut(u64, u64) + 'static) {
        self.progress = Some(Box::new(f));
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, ev);
    }

    fn local_time(&self, i: usize) -> u64 {
        let n = &self.nodes[i];
        let drift = (self.now as i128 * n.clock_drift_ppm as i128 / 1_000_000) as i64;
        (self.now as i64 + n.clock_offset_us + drift + 1_000_000).max(0) as u64
    }

    fn hash(&mut self, x: u64) {
        for b in x.to_le_bytes() {
            self.trace ^= u64::from(b);
            self.trace = self.trace.wrapping_mul(FNV_PRIME);
        }
    }

    /// Run to the end: setup, clients for `duration_us` with faults, then
    /// heal, restart everyone and run until the cluster settles.
    pub fn run(mut self) -> Outcome {
        self.setup();
        self.schedule(self.cfg.tick_us, Ev::Tick);
        if self.setup_pending == 0 {
            self.start_load();
        }
        if self.cfg.warmup_us > 0 {
            self.schedule(self.cfg.warmup_us, Ev::Warmup);
        }
        self.schedule(self.cfg.duration_us, Ev::End);
        // A run that has not settled by twice its liveness bound has failed
        // `liveness` already; simulating on would only take time.
        let limit = self.cfg.duration_us + 2 * liveness_bound_us(self.net.latency_max_us());
        let mut settled = false;
        let mut next_settle_check = self.cfg.duration_us;
        let mut next_progress = 0;
        while let Some(Reverse((at, seq))) = self.queue.pop() {
            if at > limit {
                break;
            }
            self.now = at;
            if at >= next_progress {
                next_progress = at + 10_000;
                if let Some(f) = self.progress.as_mut() {
                    f(at.min(self.cfg.duration_us), self.cfg.duration_us);
                }
            }
            let Some(ev) = self.events.remove(&seq) else {
                continue;
            };
            self.hash(at);
            self.hash(ev.code());
            self.handle(ev);
            if self.ended && self.now >= next_settle_check {
                next_settle_check = self.now + 50_000;
                if self.settled() {
                    settled = true;
                    break;
                }
            }
        }
        self.finish(settled)
    }

    /// The workload's setup calls run strongly at replica 0, recorded in
    /// the history like any op; clients and faults start once every one of
    /// them has its final view (the workloads' checkers count on it, as an
    /// application that creates its accounts before using them would).
    fn setup(&mut self) {
        self.setup_backlog = self
            .workload
            .setup()
            .into_iter()
            .map(|call| Request {
                call,
                strong: true,
                views: Views::BOTH,
            })
            .collect();
        self.issue_setup();
    }

    /// Issue the setup calls waiting, in order, until replica 0 refuses one
    /// (its disk is behind: the rest wait for earlier calls to finish).
    fn issue_setup(&mut self) {
        while let Some(request) = self.setup_backlog.front().cloned() {
            if !self.invoke(0, None, request, false) {
                debug_assert!(
                    self.setup_pending > 0,
                    "a setup call refused with none running"
                );
                return;
            }
            self.setup_backlog.pop_front();
            self.setup_pending += 1;
        }
    }

    /// Clients, open-loop arrivals and faults begin (after the setup).
    fn start_load(&mut self) {
        let start = self.now + 1_000;
        for c in 0..self.clients.len() {
            let at = self.rng.range(0, self.cfg.think_us);
            self.schedule(start + at, Ev::Client { client: c });
        }
        if self.cfg.open_rate_per_sec > 0.0 {
            let gap = self.rng.exp(1e6 / self.cfg.open_rate_per_sec) as u64;
            self.schedule(start + gap, Ev::Arrival);
        }
        if self.cfg.faults.partition || self.cfg.faults.crashes() || self.cfg.faults.clock {
            let at = self.now + self.rng.range(50_000, 150_000);
            self.schedule(at, Ev::Chaos);
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Deliver { from, to, frame } => {
                let sender = ReplicaId(from as u16 + 1);
                let node = &mut self.nodes[to].node;
                if node.is_up() {
                    node.on_frame(sender, &frame);
                    self.after(to);
                }
            }
            Ev::Tick => {
                for i in 0..self.nodes.len() {
                    let now = self.local_time(i);
                    let node = &mut self.nodes[i].node;
                    if node.is_up() {
                        node.tick(now);
                        self.after(i);
                    }
                }
                self.schedule(self.now + self.cfg.tick_us, Ev::Tick);
            }
            Ev::ExecDone { node, epoch, done } => {
                let n = &mut self.nodes[node];
                if n.epoch == epoch {
                    n.busy_cores = n.busy_cores.saturating_sub(1);
                    if n.node.is_up() {
                        n.node.complete(done);
                        self.after(node);
                    }
                }
            }
            Ev::Client { client } => self.client_next(client),
            Ev::Arrival => self.arrival(),
            Ev::Warmup => self.readings.warmup = self.totals(),
            Ev::Chaos => self.chaos(),
            Ev::Heal => {
                self.net.heal();
            }
            Ev::Restart { node } => self.restart(node),
            Ev::SyncDone { node, epoch } => {
                let n = &mut self.nodes[node];
                if n.epoch == epoch && n.node.is_up() {
                    n.node.sync_done();
                    self.after(node);
                }
            }
            Ev::DiskPoll { node, epoch } => {
                let n = &mut self.nodes[node];
                if n.epoch == epoch {
                    n.disk_wake_at = None;
                    self.after(node);
                }
            }
            Ev::End => {
                self.readings.end = self.totals();
                self.ended = true;
                self.running_clients = false;
                self.net.heal();
                self.net.loss = 0.0;
                self.net.duplicate = 0.0;
                self.net.reorder = 0.0;
                for i in 0..self.nodes.len() {
                    if self.nodes[i].slot != Slot::Spare {
                        self.restart(i);
                    }
                }
            }
        }
    }

    fn client_next(&mut self, c: usize) {
        if !self.running_clients || self.clients[c].pending.is_some() {
            return;
        }
        let left = self.clients[c].replica;
        if self.nodes[left].slot != Slot::Member {
            // Its replica left the group: the client moves to a member, and
            // gives up on its ops there that had no final view yet.
            for r in &mut self.history.ops {
                if r.client == c as u32 && r.replica == left && r.final_view().is_none() {
                    r.origin_left = true;
                }
            }
            let members = self.member_slots();
            self.clients[c].replica = members[self.rng.index(members.len())];
        }
        let replica = self.clients[c].replica;
        if !self.nodes[replica].node.is_up() {
            let at = self.now + 10 * self.cfg.think_us;
            self.schedule(at, Ev::Client { client: c });
            return;
        }
        let next = self.workload.next_op(&mut self.rng, c as u32);
        let (mut request, wants_final) = request_of(next);
        let client = &mut self.clients[c];
        client.seq += 1;
        request.call.request_id = Some(ClientRequestId {
            client: c as u64 + 1,
            seq: client.seq,
        });
        request.call.acked = std::mem::take(&mut client.acks);
        if !self.invoke(replica, Some(c), request, wants_final) {
            let at = self.now + self.cfg.think_us;
            self.schedule(at, Ev::Client { client: c });
        }
    }

    /// An open-loop arrival: a one-op session at a random replica.
    fn arrival(&mut self) {
        if !self.running_clients {
            return;
        }
        let members = self.member_slots();
        let replica = members[self.rng.index(members.len())];
        let session = self.cfg.clients + self.history.ops.len();
        let next = self.workload.next_op(&mut self.rng, session as u32);
        let (mut request, wants_final) = request_of(next);
        request.call.request_id = Some(ClientRequestId {
            client: session as u64 + 1,
            seq: 1,
        });
        if self.invoke(replica, None, request, wants_final) {
            if let Some(r) = self.history.ops.last_mut() {
                r.client = session as u32;
            }
        }
        let gap = self.rng.exp(1e6 / self.cfg.open_rate_per_sec).max(1.0) as u64;
        self.schedule(self.now + gap, Ev::Arrival);
    }

    fn invoke(
        &mut self,
        i: usize,
        client: Option<usize>,
        request: Request,
        wants_final: bool,
    ) -> bool {
        let now = self.local_time(i);
        let node = &mut self.nodes[i].node;
        if !node.is_up() {
            return false;
        }
        let call = request.call.clone();
        let strong = request.strong;
        let handle = match node.invoke(request, now) {
            Ok(handle) => handle,
            Err(e) => {
                if matches!(e, InvokeError::DiskBehind(_)) {
                    *self.faults.entry("refused_disk_behind").or_default() += 1;
                }
                return false;
            }
        };
        if let ExecKey::Op(id) = handle {
            // A rebuilt replica resumes past the seqs its peers heard it
            // reserve; only a reservation no peer heard (a partition, then
            // the lost disk) lets a client see an id twice.
            if self.lost_ids.contains(&id) {
                *self.faults.entry("lost_id_issued_again").or_default() += 1;
            }
        }
        let index = self.history.ops.len();
        self.history.ops.push(OpRecord {
            client: client.map_or(SETUP_CLIENT, |c| c as u32),
            replica: i,
            id: match handle {
                ExecKey::Op(id) => Some(id),
                ExecKey::Local(_) => None,
            },
            call,
            strong,
            wants_final: strong || wants_final,
            invoked_at_us: self.now,
            views: Vec::new(),
            origin_crashed: false,
            origin_left: false,
            lost: false,
        });
        self.nodes[i].handles.insert(handle, index);
        if let Some(c) = client {
            self.clients[c].pending = Some(index);
        }
        self.after(i);
        true
    }

    /// After node `i` handled an input: views to clients, messages to the
    /// network, free cores to executions, and the committed-prefix check.
    fn after(&mut self, i: usize) {
        if !self.nodes[i].node.is_up() {
            return;
        }
        self.poll_disk(i);
        let node = &mut self.nodes[i].node;
        if !node.is_up() {
            return;
        }
        let views = node.take_views();
        let outbox = node.take_outbox();
        for v in views {
            let Some(&index) = self.nodes[i].handles.get(&v.handle) else {
                continue;
            };
            let record = &mut self.history.ops[index];
            let is_final = v.kind != creek_core::ViewKind::Tentative;
            record.views.push(SeenView {
                at_us: self.now,
                kind: v.kind,
                outcome: v.outcome,
            });
            let done = is_final
                || !record.wants_final
                || (!record.strong && self.cfg.weak_answer_on_preliminary);
            if is_final || matches!(v.handle, ExecKey::Local(_)) {
                self.nodes[i].handles.remove(&v.handle);
            }
            if done {
                // Answered after one send: the next request acknowledges it.
                let (client, rid) = (record.client as usize, record.call.request_id);
                if let (Some(c), Some(rid)) = (self.clients.get_mut(client), rid) {
                    if c.pending == Some(index) {
                        c.acks.push(rid.seq);
                    }
                }
                self.release_client(index);
            }
        }
        for (to, msg) in outbox {
            self.send(i, usize::from(to.0).saturating_sub(1), msg);
        }
        self.fill_cores(i);
        self.check_prefix(i);
        self.check_rebuilt(i);
        if self.cfg.check_invariants && self.now >= self.next_state_check {
            self.next_state_check = self.now + 10_000;
            for (j, n) in self.nodes.iter().enumerate() {
                let r = &n.node;
                let finalized = r.finalized() as usize;
                let prefix = &r.committed()[..finalized.min(r.committed().len())];
                let calls: Vec<&creek_exec::ProcCall> = prefix
                    .iter()
                    .filter_map(|id| self.ops.get(id).map(|o| &o.call))
                    .collect();
                if calls.len() == prefix.len() {
                    let (_, state) = creek_exec::basic::replay_from(
                        &self.registry,
                        creek_exec::TxnLimits::default(),
                        self.initial_state.clone(),
                        calls,
                    );
                    if state != r.committed_state() {
                        panic!("replica {j} at {} us: committed state differs from a replay of its {} committed ops", self.now, r.committed().len());
                    }
                }
            }
        }
        let sampled =
            self.cfg.invariants_every_us > 0 && self.now >= self.nodes[i].next_invariants_at;
        if self.cfg.check_invariants || sampled {
            self.nodes[i].next_invariants_at = self.now + self.cfg.invariants_every_us;
            if let Err(e) = self.nodes[i].node.check_invariants() {
                panic!("replica {i} at {} us: invariant broken: {e}", self.now);
            }
        }
    }

    /// The disk model: group commit (a sync takes every queued write; the
    /// next starts when it completes), the linger for payload-only writes,
    /// and the fsync's time.
    fn poll_disk(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        let epoch = n.epoch;
        match n.node.poll_disk(self.now) {
            DiskPoll::Idle => {}
            DiskPoll::SyncStarted => {
                let (lo, hi) = if self.now < n.stalled_until {
                    STALLED_FSYNC_US
                } else {
                    self.cfg.fsync_us
                };
                let at = self.now + self.rng.range(lo, hi + 1);
                self.schedule(at, Ev::SyncDone { node: i, epoch });
            }
            DiskPoll::LingerUntil(t) => {
                if n.disk_wake_at.is_none_or(|w| w > t) {
                    n.disk_wake_at = Some(t);
                    self.schedule(t, Ev::DiskPoll { node: i, epoch });
                }
            }
            DiskPoll::Failed => {
                if self.cfg.check_invariants {
                    eprintln!("replica {i} stopped at {} us: fsync failed", self.now);
                }
                *self.faults.entry("fsync_failure").or_default() += 1;
                self.went_down(i);
                let at = self.now + self.rng.range(100_000, 800_000);
                self.schedule(at, Ev::Restart { node: i });
            }
        }
    }

    /// The session waiting on history record `index` may issue its next op.
    fn release_client(&mut self, index: usize) {
        if self.history.ops[index].is_setup() {
            // Only a final view releases a setup call (no fault runs yet).
            debug_assert!(self.setup_pending > 0, "a setup call released twice");
            self.setup_pending = self.setup_pending.saturating_sub(1);
            self.issue_setup();
            if self.setup_pending == 0 {
                self.start_load();
            }
            return;
        }
        let client = self.history.ops[index].client as usize;
        if let Some(c) = self.clients.get_mut(client) {
            if c.pending == Some(index) {
                c.pending = None;
                let at = self.now + self.cfg.think_us;
                self.schedule(at, Ev::Client { client });
            }
        }
    }

    fn send(&mut self, from: usize, to: usize, msg: PeerMessage) {
        if let PeerMessage::Gossip(GossipMessage::Ops(ops)) = &msg {
            for op in ops {
                let known = self.ops.entry(op.id).or_insert_with(|| op.clone());
                // Paired with the rebuild rule (`Node::install`): an id a
                // lost op had is never issued again, so an id names one op.
                assert!(**known == **op, "{} names two different ops", op.id);
            }
            if self.net.starves(to) {
                return;
            }
        }
        let Ok(frame) = creek_wire::encode(&msg, &Limits::default()) else {
            return;
        };
        match msg {
            PeerMessage::Gossip(_) => self.traffic.gossip_bytes += frame.len() as u64,
            PeerMessage::Cab(_)
            | PeerMessage::Probe(_)
            | PeerMessage::Hello(_)
            | PeerMessage::Snapshot(_) => self.traffic.cab_bytes += frame.len() as u64,
        }
        for at in self
            .net
            .send(&mut self.rng, self.now, from, to, frame.len())
        {
            self.schedule(
                at,
                Ev::Deliver {
                    from,
                    to,
                    frame: frame.clone(),
                },
            );
        }
    }

    /// The CPU model: a free core takes the next execution, reads its
    /// snapshot now and completes after the procedure's cost.
    fn fill_cores(&mut self, i: usize) {
        loop {
            let cores = self.cfg.cores;
            let n = &mut self.nodes[i];
            if n.busy_cores >= cores {
                return;
            }
            if !n.node.is_up() {
                return;
            }
            let Some(task) = n.node.next_execution() else {
                return;
            };
            let done = n.node.run(&task);
            let cost = self.cfg.cost_of(&task.call.name);
            n.busy_cores += 1;
            n.busy_us += cost;
            let epoch = n.epoch;
            let at = self.now + cost;
            self.schedule(
                at,
                Ev::ExecDone {
                    node: i,
                    epoch,
                    done,
                },
            );
        }
    }

    /// A wiped replica that rebuilt from a peer's checkpoint: its ops above
    /// what its peers held were lost with its disk (no peer saw them). It
    /// resumed its seqs past what its peers heard it reserve, so their ids
    /// are not issued again (if it restarted before this was seen, past its
    /// last issued seq as a bound).
    fn check_rebuilt(&mut self, i: usize) {
        let n = &self.nodes[i];
        if !n.wiped || !n.node.is_member() {
            return;
        }
        if let Some(last) = n.node.rebuilt_held_seq().or(n.node.last_issued_seq()) {
            *self.faults.entry("disk_rebuilt").or_default() += 1;
            self.nodes[i].wiped = false;
            self.forget_lost_ops(i, last);
            let me = ReplicaId(i as u16 + 1);
            self.ops.retain(|id, _| id.origin != me || id.seq <= last);
        }
    }

    /// Every replica's committed list must be a prefix of one order.
    fn check_prefix(&mut self, i: usize) {
        if !self.nodes[i].node.is_up() {
            return;
        }
        self.nodes[i].node.fill_unseen(&self.canonical);
        let node = &self.nodes[i].node;
        let committed = node.committed();
        let from = self.checked_len[i];
        for (pos, id) in committed.iter().enumerate().skip(from) {
            match self.canonical.get(pos) {
                Some(c) if c != id => {
                    if self.prefix_violation.is_none() && debug_log() {
                        eprintln!(
                            "prefix violation at replica {i}, position {pos}, at {} us",
                            self.now
                        );
                    }
                    if self.prefix_violation.is_none() {
                        self.prefix_violation = Some(format!(
                            "replica {i} committed {id} at position {pos} where another replica committed {c}"
                        ));
                    }
                }
                Some(_) => {}
                None => self.canonical.push(*id),
            }
        }
        self.checked_len[i] = committed.len();
    }

    fn chaos(&mut self) {
        if self.ended {
            return;
        }
        let n = self.nodes.len();
        // Fault budgets count the group's members (a minority may fail).
        let g = self.member_slots().len();
        let mut classes = Vec::new();
        if self.cfg.faults.partition {
            classes.push("partition");
        }
        if self.cfg.faults.crash {
            classes.push("crash");
        }
        if self.cfg.faults.clock {
            classes.push("clock");
        }
        if self.cfg.faults.disk {
            classes.push("disk");
        }
        // Only Creek's replicas have a disk to lose.
        if self.cfg.faults.wipes > 0 && self.cfg.protocol == Protocol::Creek {
            classes.push("wipe");
        }
        if self.cfg.faults.members && self.cfg.protocol == Protocol::Creek {
            classes.push("member");
        }
        let class = classes[self.rng.index(classes.len())];
        match class {
            "partition" if !self.net.partitioned() => {
                *self.faults.entry("partition").or_default() += 1;
                let kind = self.rng.index(6);
                let victim = self.rng.index(n);
                match kind {
                    0 => {
                        for j in 0..n {
                            if j != victim {
                                self.net.block(victim, j);
                                self.net.block(j, victim);
                            }
                        }
                    }
                    1 => {
                        let minority = (n - 1) / 2;
                        for a in 0..minority {
                            for b in minority..n {
                                self.net.block(a, b);
                                self.net.block(b, a);
                            }
                        }
                    }
                    2 => {
                        // Ring: each node reaches only its neighbours.
                        for a in 0..n {
                            for b in 0..n {
                                let d = (a + n - b) % n;
                                if d > 1 && d < n - 1 {
                                    self.net.block(a, b);
                                }
                            }
                        }
                    }
                    3 => {
                        // Asymmetric: the victim hears everyone, nobody hears it.
                        for j in 0..n {
                            if j != victim {
                                self.net.block(victim, j);
                            }
                        }
                    }
                    4 => {
                        // Starved: the victim hears everything but payloads,
                        // long enough that its held appends fetch a
                        // checkpoint rather than wait.
                        self.net.starve(victim);
                    }
                    _ => {
                        // Flapping: short cuts of one node, healed quickly.
                        for j in 0..n {
                            if j != victim {
                                self.net.block(victim, j);
                                self.net.block(j, victim);
                            }
                        }
                        let at = self.now + self.rng.range(5_000, 20_000);
                        self.schedule(at, Ev::Heal);
                    }
                }
                let lasts = if kind == 4 {
                    self.rng.range(500_000, 1_500_000)
                } else {
                    self.rng.range(50_000, 400_000)
                };
                self.schedule(self.now + lasts, Ev::Heal);
            }
            "crash" => {
                let down = self.down();
                let victim = self.rng.index(n);
                if down < (g - 1) / 2 && self.nodes[victim].node.is_up() {
                    self.crash(victim, false);
                    // A third stay down until the clients stop (crash-stop
                    // for the run); the others recover.
                    if self.rng.chance(1.0 / 3.0) {
                        *self.faults.entry("crash_stop").or_default() += 1;
                    } else {
                        *self.faults.entry("crash_recovery").or_default() += 1;
                        let at = self.now + self.rng.range(100_000, 800_000);
                        self.schedule(at, Ev::Restart { node: victim });
                    }
                }
            }
            "disk" => {
                let down = self.down();
                // Aim at a replica with writes in flight: that is where a
                // crash loses something.
                let unsynced: Vec<usize> = (0..n)
                    .filter(|&j| self.nodes[j].node.is_up() && self.nodes[j].node.has_unsynced())
                    .collect();
                let victim = if unsynced.is_empty() {
                    self.rng.index(n)
                } else {
                    unsynced[self.rng.index(unsynced.len())]
                };
                if down < (g - 1) / 2 && self.nodes[victim].node.is_up() {
                    match self.rng.index(4) {
                        0 => {
                            *self.faults.entry("disk_unsynced_lost").or_default() += 1;
                            self.crash(victim, false);
                        }
                        1 => {
                            *self.faults.entry("disk_torn_write").or_default() += 1;
                            self.crash(victim, true);
                        }
                        2 => {
                            *self.faults.entry("disk_fsync_fails").or_default() += 1;
                            self.nodes[victim].node.fail_next_sync();
                        }
                        _ => {
                            // A disk that falls behind (a slow device, a
                            // noisy neighbour): writes pile up until the
                            // node pushes back on its clients.
                            *self.faults.entry("disk_stall").or_default() += 1;
                            self.nodes[victim].stalled_until = self.now + STALL_US;
                        }
                    }
                    if !self.nodes[victim].node.is_up() {
                        let at = self.now + self.rng.range(50_000, 400_000);
                        self.schedule(at, Ev::Restart { node: victim });
                    }
                }
            }
            "wipe" => {
                // A replica that lost its data takes no part until it is
                // rebuilt: every fault counts it as down, so a majority
                // always holds its data (`wipe2` loses two of five at a
                // time).
                let wiped = self.nodes.iter().filter(|x| x.wiped).count();
                let victim = self.rng.index(n);
                if wiped < usize::from(self.cfg.faults.wipes)
                    && self.down() < (g - 1) / 2
                    && self.nodes[victim].node.is_up()
                    && !self.nodes[victim].node.is_lost()
                {
                    *self.faults.entry("disk_lost").or_default() += 1;
                    if debug_log() {
                        eprintln!("wipe replica {victim} at {} us", self.now);
                    }
                    self.crash(victim, false);
                    self.nodes[victim].node.lose_disk();
                    self.nodes[victim].wiped = true;
                    let at = self.now + self.rng.range(50_000, 400_000);
                    self.schedule(at, Ev::Restart { node: victim });
                }
            }
            "member" => self.change_members(),
            "clock" => {
                *self.faults.entry("clock_jump").or_default() += 1;
                let victim = self.rng.index(n);
                self.nodes[victim].clock_offset_us -= self.rng.range(1_000, 50_000) as i64;
            }
            _ => {}
        }
        let at = self.now + self.rng.range(100_000, 300_000);
        self.schedule(at, Ev::Chaos);
    }

    /// A crash: memory is gone, and so is every write not yet synced
    /// (`torn`: except an arbitrary part of them, as a torn write leaves);
    /// executions in flight and messages to the node are lost, and the
    /// clients waiting on it learn nothing more.
    fn crash(&mut self, i: usize, torn: bool) {
        if self.cfg.check_invariants || debug_log() {
            eprintln!("crash replica {i} at {} us", self.now);
        }
        if !self.nodes[i].node.is_up() {
            return;
        }
        let rng = &mut self.rng;
        self.nodes[i].node.crash(&mut |n| {
            if torn {
                rng.range(0, n as u64 + 1) as usize
            } else {
                0
            }
        });
        self.went_down(i);
    }

    /// Replica `i` went down: what ran on it is gone.
    fn went_down(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.epoch += 1;
        n.disk_wake_at = None;
        n.busy_cores = 0;
        for (_, index) in std::mem::take(&mut n.handles) {
            self.history.ops[index].origin_crashed = true;
            self.release_client(index);
        }
    }

    fn restart(&mut self, i: usize) {
        let node = &mut self.nodes[i].node;
        if node.is_up() {
            return;
        }
        if self.cfg.check_invariants || debug_log() {
            eprintln!("restart replica {i} at {} us", self.now);
        }
        // A replica that cannot restart stays down; the run then does not
        // settle and the checkers say so.
        if let Err(e) = node.restart() {
            eprintln!("replica {i} cannot restart at {} us: {e}", self.now);
            *self.faults.entry("restart_refused").or_default() += 1;
        }
        let len = self.nodes[i].node.committed().len();
        self.checked_len[i] = self.checked_len[i].min(len);
        let wiped = self.nodes[i].wiped;
        if let Some(last) = self.nodes[i].node.last_issued_seq().filter(|_| !wiped) {
            self.forget_lost_ops(i, last);
        }
        self.after(i);
    }

    /// Ops replica `i` issued after `last` were lost: with writes that never
    /// became durable (no peer saw them: messages wait for the disk), or
    /// with the disk itself. Their records keep what the client saw but no
    /// longer name an id (the ids are remembered in `lost_ids`; a
    /// restarted or rebuilt replica resumes past them).
    fn forget_lost_ops(&mut self, i: usize, last: u64) {
        let me = ReplicaId(i as u16 + 1);
        for r in &mut self.history.ops {
            if r.replica == i && r.id.is_some_and(|id| id.origin == me && id.seq > last) {
                debug_assert!(
                    r.origin_crashed,
                    "a lost op's client knew its origin crashed"
                );
                *self.faults.entry("ops_lost_unsynced").or_default() += 1;
                if let Some(id) = r.id.take() {
                    self.lost_ids.insert(id);
                }
                r.lost = true;
            }
        }
    }

    /// Replicas down, or up but lost (they take no part).
    fn down(&self) -> usize {
        self.nodes
            .iter()
            .filter(|x| x.slot == Slot::Member && (!x.node.is_up() || x.node.is_lost()))
            .count()
    }

    /// Whether each replica is in the group, as a member applied it (a
    /// removal whose proposal was lost left its replica in), else as the
    /// slots say: what the end of the run checks.
    fn in_group(&self) -> Vec<bool> {
        let group = self
            .nodes
            .iter()
            .filter(|n| n.slot == Slot::Member && n.node.is_member())
            .find_map(|n| n.node.group_members());
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| match &group {
                Some(g) => g.contains(&ReplicaId(i as u16 + 1)),
                None => n.slot == Slot::Member,
            })
            .collect()
    }

    /// The replicas in the group (or being added to it).
    fn member_slots(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].slot == Slot::Member)
            .collect()
    }

    /// A membership change, as an operator would make it: while the group
    /// has its initial size, a spare is added (it starts on an empty disk,
    /// configured with the members, and joins through state transfer);
    /// once every member holds its data, one more than that, a random
    /// member is removed (the leader too: it hands over first, and the
    /// change is tried again later). The leader proposes; a refusal (a
    /// change in progress, no leader) changes nothing.
    fn change_members(&mut self) {
        let Some(group) = self
            .member_slots()
            .into_iter()
            .filter(|&i| self.nodes[i].node.is_member())
            .find_map(|i| self.nodes[i].node.group_members())
        else {
            return;
        };
        let slot_of = |r: ReplicaId| usize::from(r.0) - 1;
        // An add lost with a leader change (or still on its way) is
        // proposed again: the leader refuses it while one is in progress,
        // or once it applied. A removal is not taken back: if it was lost,
        // the replica stays in the group but out of the clients' and the
        // checks' sight, which the end of the run settles (`finish`).
        let change = (0..self.nodes.len())
            .map(|i| ReplicaId(i as u16 + 1))
            .find(|id| self.nodes[slot_of(*id)].slot == Slot::Member && !group.contains(id))
            .map(MemberChange::AddLearner);
        let spare = (0..self.nodes.len()).find(|i| self.nodes[*i].slot == Slot::Spare);
        let change = match (change, spare) {
            (Some(c), _) => c,
            (None, Some(spare)) if group.len() <= self.cfg.replicas => {
                MemberChange::AddLearner(ReplicaId(spare as u16 + 1))
            }
            _ if group.len() > self.cfg.replicas && self.down() == 0 => {
                MemberChange::Remove(group[self.rng.index(group.len())])
            }
            _ => return,
        };
        // Only the leader takes it; the others refuse.
        let proposers: Vec<usize> = group
            .iter()
            .map(|r| slot_of(*r))
            .filter(|&i| self.nodes[i].node.is_up())
            .collect();
        for i in proposers {
            if self.nodes[i].node.change_group(change).is_err() {
                continue;
            }
            self.after(i);
            let target = slot_of(change.replica());
            if debug_log() {
                eprintln!("{change:?} (replica {target}) at {} us", self.now);
            }
            match change {
                MemberChange::AddLearner(_) => {
                    *self.faults.entry("member_added").or_default() += 1;
                    if self.nodes[target].slot == Slot::Spare {
                        self.nodes[target].node.configure_group(&group);
                        self.nodes[target].slot = Slot::Member;
                        self.restart(target);
                    }
                }
                MemberChange::Remove(_) => {
                    *self.faults.entry("member_removed").or_default() += 1;
                    self.nodes[target].slot = Slot::Removed;
                }
                MemberChange::Promote(_) => {}
            }
            return;
        }
    }

    /// Every replica holds its data (a lost one was rebuilt) and is quiet,
    /// with the same committed order.
    fn settled(&self) -> bool {
        let in_group = self.in_group();
        let members = || {
            self.nodes
                .iter()
                .zip(&in_group)
                .filter(|(_, member)| **member)
                .map(|(n, _)| n)
        };
        if members().any(|n| n.node.is_lost()) {
            return false;
        }
        let mut holding = members();
        let Some(first) = holding.next() else {
            return false;
        };
        first.node.quiet()
            && holding.all(|n| n.node.quiet() && n.node.committed() == first.node.committed())
            && self.left_ops_committed(&in_group, first.node.committed())
    }

    /// Every op broadcast by a replica that left the group is committed:
    /// it hands its last ops over by gossip, and the run is not over
    /// before the group has them (a replica that left commits nothing
    /// itself, so its own quiet says nothing).
    fn left_ops_committed(&self, in_group: &[bool], committed: &[OpId]) -> bool {
        let left: Vec<ReplicaId> = in_group
            .iter()
            .enumerate()
            .filter(|(i, member)| !**member && self.nodes[*i].slot == Slot::Removed)
            .map(|(i, _)| ReplicaId(i as u16 + 1))
            .collect();
        if left.is_empty() {
            return true;
        }
        let committed: BTreeSet<OpId> = committed.iter().copied().collect();
        self.ops
            .keys()
            .filter(|id| left.contains(&id.origin))
            .all(|id| committed.contains(id))
    }

    /// The counters now, summed over every replica (up or down).
    fn totals(&self) -> Totals {
        let mut t = Totals {
            at_us: self.now,
            traffic: self.traffic,
            ..Totals::default()
        };
        for n in &self.nodes {
            t.counts += n.node.counts();
            t.busy_us += n.busy_us;
        }
        t
    }

    fn finish(mut self, settled: bool) -> Outcome {
        if debug_log() {
            for (i, n) in self.nodes.iter().enumerate() {
                eprintln!("replica {i}: {}", n.node.debug());
            }
        }
        self.readings.finish = self.totals();
        let ids: Vec<OpId> = self.canonical.clone();
        for id in &ids {
            self.hash(u64::from(id.origin.0) << 48 ^ id.seq);
        }
        let members = self.in_group();
        let nodes = self.nodes.into_iter().map(|n| n.node).collect();
        let settled_after_us = settled.then(|| self.now - self.cfg.duration_us);
        // What client sessions did: expiry ops ordered, late copies refused.
        let expiries = self
            .ops
            .values()
            .filter(|op| &*op.call.name == creek_exec::session::EXPIRE)
            .count() as u64;
        let voids = self
            .ops
            .values()
            .filter(|op| &*op.call.name == creek_exec::void::VOID)
            .count() as u64;
        let refused_expired = |r: &OpRecord| {
            r.views.iter().any(|v| {
                v.kind != creek_core::ViewKind::Tentative
                    && v.outcome
                        .as_ref()
                        .is_err_and(|a| a.0.starts_with(creek_exec::session::SESSION_EXPIRED))
            })
        };
        let refused = self
            .history
            .ops
            .iter()
            .filter(|r| refused_expired(r))
            .count() as u64;
        // Lost ops never took effect, nor did ops refused as expired (a sim
        // client sends each request once, so no copy of them ran): the
        // checkers judge what remains.
        self.history.ops.retain(|r| !r.lost && !refused_expired(r));
        for (k, n) in [
            ("session_expiry_ops", expiries),
            ("session_refused", refused),
            ("void_ops", voids),
        ] {
            if n > 0 {
                self.faults.insert(k, n);
            }
        }
        Outcome {
            settled_after_us,
            liveness_bound_us: liveness_bound_us(self.net.latency_max_us()),
            history: self.history,
            ops: self.ops,
            nodes,
            members,
            prefix_violation: self.prefix_violation,
            faults: self.faults,
            traffic: self.traffic,
            trace_hash: self.trace,
            registry: self.registry,
            duration_us: self.cfg.duration_us,
            settled,
            workload: self.workload,
            readings: self.readings,
            preloaded: self.preloaded,
        }
    }
}
