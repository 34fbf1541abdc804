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
use creek_check::history::{History, OpRecord, SeenView};
use creek_core::{Checkpoint, ExecKey, Op, OpId, ReplicaId, Request, Views};
use creek_exec::Completion;
use creek_node::NodeConfig;
use creek_procs::Registry;
use creek_shard::{ShardId, ShardMap};
use creek_types::ProcCall;
use creek_wire::{GossipMessage, Limits, PeerMessage};

use crate::baseline::BaselineNode;
use crate::config::{Links, Protocol, SimConfig, WAN_JITTER_PERCENT, WAN_ONE_WAY_US};
use crate::net::Network;
use crate::replica::{CreekReplica, ReplicaCounts, SimReplica};
use crate::rng::Rng;
use crate::workload::Workload;

mod build;
mod cache;
mod clients;
mod directory;
mod faults;
mod moves;
mod mpo;
mod outcome;
mod split;
pub use moves::{is_mover, MoveTimes};
pub use split::split_violations;

use directory::{Dir, OPERATOR_CLIENT};
pub use outcome::{DirectoryEnd, Outcome, Readings, StableSeen, Totals, Traffic};

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
    /// The directory's periodic step (`directory::FOLLOW_US`).
    Directory,
    /// A shard replica's ask for the map reaches a directory replica.
    MapAsk {
        from: usize,
        to: usize,
    },
    /// A directory replica's map reaches a shard replica.
    MapAnswer {
        to: usize,
        map: Arc<ShardMap>,
    },
    /// A message about an operation across shards reaches a replica.
    Mpo {
        to: usize,
        msg: mpo::MpoNet,
    },
    /// The simulator's sweep of operations across shards
    /// (`mpo::SWEEP_US`).
    MpoSweep,
    /// A new MPO's origin looks whether the MPO may leave.
    MpoRelease {
        mpo: creek_procs::mpo::MpoId,
    },
    /// A snapshot view leaves its replica (`Sim::snapshot_view_later`).
    View {
        node: usize,
        epoch: u64,
        view: creek_core::View,
    },
    End,
    /// Replicas stop their clock no-ops (some time after the end).
    NoopsEnd,
    /// The mover of keys between shards looks whether it can go on
    /// (`moves.rs`).
    Mover,
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
            Ev::Directory => 13,
            Ev::MapAsk { from, to } => 14 + 16 * (*from as u64) + 256 * (*to as u64),
            Ev::MapAnswer { to, map } => 15 + 16 * (*to as u64) + 256 * map.epoch,
            Ev::Mpo { to, .. } => 16 + 32 * (*to as u64),
            Ev::MpoSweep => 17,
            Ev::MpoRelease { mpo } => 18 + 32 * mpo.seq,
            Ev::View { node, .. } => 19 + 32 * (*node as u64),
            Ev::End => 8,
            Ev::NoopsEnd => 24,
            Ev::Mover => 25,
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
    /// Checkpoints it installed so far (from a peer, or past a held
    /// append): each replaced its state, and the clients waiting on it
    /// lost their views, as after a crash.
    installed: u64,
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
    /// Its loop is busy with snapshot reads until this time.
    loop_free_at: u64,
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
    /// The replica it talks to in each shard.
    replicas: Vec<usize>,
    pending: Option<usize>,
    /// The last request seq sent; requests carry `(client + 1, seq)`.
    seq: u64,
    /// Seqs answered, for the next request to acknowledge.
    acks: Vec<u64>,
    /// The shard map it routes by (a sharded cluster's clients learn it
    /// from the directory).
    map: Arc<ShardMap>,
    /// It wants a newer map (its replica left, or answered under a newer
    /// epoch): it asks the directory at the next directory step.
    refresh: bool,
    /// Its read and dependency times and its cache of its own writes.
    times: cache::ClientTimes,
    /// Its read across shards in progress.
    split: Option<split::Split>,
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
        read_time: 0,
        read_exact: false,
        read_revision: None,
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
    /// Slots per group: group `g` holds `g * per_shard ..` (the shards,
    /// then on a sharded cluster the directory).
    per_shard: usize,
    /// Groups: the shards, and on a sharded cluster the directory.
    groups: usize,
    /// A sharded cluster's directory, and the maps its replicas and
    /// clients hold.
    dir: Option<Dir>,
    /// The map the cluster was formed with (one shard unless
    /// `SimConfig::shards`).
    map: Arc<ShardMap>,
    net: Network,
    clients: Vec<Client>,
    history: History,
    ops: BTreeMap<OpId, Arc<Op>>,
    /// Ids of ops lost with their origin's disk (a client saw them).
    lost_ids: BTreeSet<OpId>,
    /// What the next client invocation asks of its preliminary view
    /// (`SimConfig::durable_weak`).
    answer_after_next: creek_node::AnswerAfter,
    /// History records whose preliminary view was asked to wait for
    /// durability: what they asked, and their op's id (a lost op's record
    /// forgets it).
    durable_asked: BTreeMap<usize, (creek_node::AnswerAfter, OpId)>,
    /// Replicas that lost their disk at some point of the run.
    disks_lost: BTreeSet<usize>,
    /// Each shard's one committed order, as far as any replica got.
    canonical: Vec<Vec<OpId>>,
    checked_len: Vec<usize>,
    /// The first violation of the committed-prefix property, with its shard.
    prefix_violation: Option<(usize, String)>,
    trace: u64,
    faults: FaultCounts,
    traffic: Traffic,
    stable: StableSeen,
    /// What closed-loop clients returned for their snapshot `kv.get`s.
    client_reads: cache::ClientReads,
    /// The reads across shards at the snapshot level.
    split_reads: split::SplitReads,
    running_clients: bool,
    /// Setup calls without their final view yet.
    setup_pending: usize,
    /// Setup calls not issued yet, each with the replica it goes to, in
    /// order: issued until one is refused (its replica's disk was behind),
    /// then again as earlier ones finish.
    setup_backlog: VecDeque<(usize, Request)>,
    ended: bool,
    next_state_check: u64,
    readings: Readings,
    preloaded: bool,
    /// Each shard's preloaded state, kept only for `check_invariants`'
    /// replays.
    initial_states: Vec<BTreeMap<Bytes, Bytes>>,
    progress: Option<Box<dyn FnMut(u64, u64)>>,
    /// Operations across shards being driven (`mpo.rs`).
    mpo: mpo::MpoState,
    /// Moves of keys between shards (`moves.rs`).
    moves: moves::Moves,
}

const FNV_PRIME: u64 = 0x0000_0100_0000_01B3;

impl Sim {
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
        if self.dir.is_some() {
            self.schedule(self.cfg.tick_us, Ev::Directory);
            if self.cfg.cross_shard > 0.0 {
                self.schedule(self.cfg.tick_us, Ev::MpoSweep);
            }
            if self.cfg.moves > 0 {
                self.schedule(self.cfg.tick_us, Ev::Mover);
            }
        }
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
                if debug_log() {
                    let quiet: Vec<(usize, bool, usize)> = (0..self.nodes.len())
                        .filter(|i| self.nodes[*i].node.is_up())
                        .map(|i| {
                            (
                                i,
                                self.nodes[i].node.quiet(),
                                self.nodes[i].node.pending_len(),
                            )
                        })
                        .collect();
                    let lag = self.directory_lag(&self.in_group());
                    eprintln!(
                        "not settled at {} us: quiet {quiet:?} lag {lag:?}",
                        self.now
                    );
                    for (i, quiet, _) in &quiet {
                        if !quiet {
                            eprintln!("  replica {i}: {}", self.nodes[*i].node.debug());
                        }
                    }
                }
            }
        }
        self.finish(settled)
    }

    /// The workload's setup calls run strongly at the first replica of
    /// their shard (`setup_calls`), recorded in the history like any op;
    /// clients and faults start once every one of them has its final view
    /// (the workloads' checkers count on it, as an application that creates
    /// its accounts before using them would).
    fn setup(&mut self) {
        self.issue_setup();
    }

    /// Issue the setup calls waiting, in order, until a replica refuses one
    /// (its disk is behind: the rest wait for earlier calls to finish).
    fn issue_setup(&mut self) {
        while let Some((node, request)) = self.setup_backlog.front().cloned() {
            if !self.invoke(node, None, request, false) {
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
                self.sample_stable();
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
            Ev::Directory => self.directory_tick(),
            Ev::MapAsk { from, to } => self.map_ask(from, to),
            Ev::MapAnswer { to, map } => self.map_answer(to, map),
            Ev::Mpo { to, msg } => self.mpo_deliver(to, msg),
            Ev::MpoSweep => self.mpo_sweep(),
            Ev::MpoRelease { mpo } => self.mpo_release(mpo),
            Ev::DiskPoll { node, epoch } => {
                let n = &mut self.nodes[node];
                if n.epoch == epoch {
                    n.disk_wake_at = None;
                    self.after(node);
                }
            }
            Ev::View { node, epoch, view } => {
                // A crash lost the views its loop had not sent.
                if self.nodes[node].epoch == epoch && self.nodes[node].node.is_up() {
                    self.deliver_view(node, view);
                }
            }
            Ev::NoopsEnd => self.stop_clock_noops(),
            Ev::Mover => self.mover_tick(),
            Ev::End => {
                self.readings.end = self.totals();
                self.ended = true;
                self.running_clients = false;
                // Clock no-ops would keep the cluster from ever settling:
                // they stop once the last ops' commit times had a few
                // intervals to become stable on every shard.
                match self.cfg.stable_every_us {
                    0 => self.stop_clock_noops(),
                    every => self.schedule(self.now + 3 * every, Ev::NoopsEnd),
                }
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

    /// A snapshot read ran on the replica's loop when it was answered, one
    /// after another, not on a core: its view leaves once the loop has run
    /// it (the procedure's cost after the loop is free).
    fn snapshot_view_later(&mut self, i: usize, v: creek_core::View) {
        let Some(&index) = self.nodes[i].handles.get(&v.handle) else {
            return;
        };
        let cost = self.cfg.cost_of(&self.history.ops[index].call.name);
        let n = &mut self.nodes[i];
        let done = n.loop_free_at.max(self.now) + cost;
        n.loop_free_at = done;
        n.busy_us += cost;
        let epoch = n.epoch;
        self.schedule(
            done,
            Ev::View {
                node: i,
                epoch,
                view: v,
            },
        );
    }

    /// View `v` of replica `i` reaches its client: recorded, and the
    /// client released if it was the last it waits for.
    fn deliver_view(&mut self, i: usize, v: creek_core::View) {
        let Some(&index) = self.nodes[i].handles.get(&v.handle) else {
            return;
        };
        let is_final = v.kind.is_final();
        let client = self.history.ops[index].client as usize;
        if client < self.clients.len() {
            self.client_receives(client, i / self.per_shard, index, &v);
            self.split_view(client, index, &v);
        }
        let record = &mut self.history.ops[index];
        record.views.push(SeenView {
            at_us: self.now,
            kind: v.kind,
            outcome: v.outcome,
            time: v.time,
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

    fn stop_clock_noops(&mut self) {
        for n in &mut self.nodes {
            n.node.stop_clock_noops();
        }
    }

    /// Each shard's largest known global stable time, after a tick: its
    /// growth and its lag behind the virtual clock.
    fn sample_stable(&mut self) {
        if self.cfg.stable_every_us == 0 {
            return;
        }
        for i in 0..self.nodes.len() {
            let n = &self.nodes[i];
            if !n.node.is_up() {
                continue;
            }
            let now = (n.epoch, n.node.stable_times().1);
            if let Some(before) = self.stable.last_known.insert(i, now) {
                if before.0 == now.0 && now.1 < before.1 && self.stable.regressions.len() < 10 {
                    self.stable.regressions.push(format!(
                        "replica {}'s global stable time went back from {} to {} at {} µs",
                        i + 1,
                        before.1,
                        now.1,
                        self.now
                    ));
                }
            }
        }
        let shards = self.cfg.shards;
        self.stable.global.resize(shards, Vec::new());
        for s in 0..shards {
            // The replica that knows the largest, with its own clock (the
            // times are the replicas' clocks').
            let best = self
                .group_slots(s)
                .filter(|&i| self.nodes[i].node.is_up())
                .map(|i| (self.nodes[i].node.stable_times().1, i))
                .max();
            let Some((global, i)) = best.filter(|(g, _)| *g > 0) else {
                continue;
            };
            let lag = self.local_time(i).saturating_sub(global);
            let seen = &mut self.stable.global[s];
            if seen.last().is_none_or(|(_, g)| *g < global) {
                seen.push((self.now, global));
            }
            self.stable.lag_us.push(lag);
        }
    }

    /// The group replica `i` belongs to.
    fn group_of(&self, i: usize) -> usize {
        i / self.per_shard
    }

    /// The slots of group `s` (a shard, or the directory).
    fn group_slots(&self, s: usize) -> std::ops::Range<usize> {
        s * self.per_shard..(s + 1) * self.per_shard
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
        let mpo_messages = node.take_mpo();
        for v in views {
            if v.kind == creek_core::ViewKind::Snapshot {
                self.snapshot_view_later(i, v);
            } else {
                self.deliver_view(i, v);
            }
        }
        let t = self.nodes[i].node.transfers();
        if t.installed + t.past_held != self.nodes[i].installed {
            // The state was replaced: ops waiting here lose their views
            // (they stay, and commit or not, like a crashed replica's).
            self.nodes[i].installed = t.installed + t.past_held;
            self.drop_waiting(i);
        }
        for (to, msg) in outbox {
            self.send(i, usize::from(to.0).saturating_sub(1), msg);
        }
        if !mpo_messages.is_empty() {
            self.mpo_out(i, mpo_messages);
        }
        if self.cfg.cross_shard > 0.0 {
            self.mpo_chase(i);
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
                let mpo_calls = self.mpo_replay_calls(self.group_of(j), prefix);
                let calls: Vec<&creek_exec::ProcCall> = prefix
                    .iter()
                    .filter_map(|id| mpo_calls.get(id).or(self.ops.get(id).map(|o| &o.call)))
                    .collect();
                if calls.len() == prefix.len() {
                    let initial = self.initial_states[self.group_of(j)].clone();
                    let registry = self.registry_of(self.group_of(j));
                    let limits = creek_exec::TxnLimits::default();
                    let (_, state) = if self.cfg.protocol == Protocol::Creek {
                        let meta_key = creek_procs::versions::meta_key;
                        let calls = (1..).zip(calls);
                        creek_exec::basic::replay_versioned(
                            registry, limits, initial, meta_key, calls,
                        )
                    } else {
                        creek_exec::basic::replay_from(registry, limits, initial, calls)
                    };
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
            PeerMessage::Stable(_) => self.traffic.stable_bytes += frame.len() as u64,
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

    /// A wiped replica that rebuilt from a peer's checkpoint resumes its
    /// seqs past what its peers held and heard it reserve (its last issued
    /// seq right after the rebuild). Its earlier ops up to there keep their
    /// records and ids: the peers' answers are no proof that no peer holds
    /// one (an op in flight, or relayed after the answer, is taken back and
    /// commits unless a void of its origin came first), so their outcome is
    /// unknown, as for any op whose origin crashed. Only ops past it are
    /// forgotten: their ids may be issued again (a reservation no peer
    /// heard).
    fn check_rebuilt(&mut self, i: usize) {
        let n = &self.nodes[i];
        if !n.wiped || !n.node.is_member() {
            return;
        }
        if let Some(last) = n.node.last_issued_seq() {
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
        let shard = self.group_of(i);
        self.nodes[i].node.fill_unseen(&self.canonical[shard]);
        let node = &self.nodes[i].node;
        let committed = node.committed();
        let from = self.checked_len[i];
        let canonical = &mut self.canonical[shard];
        for (pos, id) in committed.iter().enumerate().skip(from) {
            match canonical.get(pos) {
                Some(c) if c != id => {
                    if self.prefix_violation.is_none() && debug_log() {
                        eprintln!(
                            "prefix violation at replica {i}, position {pos}, at {} us",
                            self.now
                        );
                    }
                    if self.prefix_violation.is_none() {
                        self.prefix_violation = Some((shard, format!(
                            "replica {i} committed {id} at position {pos} where another replica committed {c}"
                        )));
                    }
                }
                Some(_) => {}
                None => canonical.push(*id),
            }
        }
        self.checked_len[i] = committed.len();
    }

    /// In every group, every replica holds its data (a lost one was
    /// rebuilt) and is quiet, with the same committed order; on a sharded
    /// cluster, the directory's map lists the groups as they are and every
    /// shard replica serves under it.
    fn settled(&self) -> bool {
        let in_group = self.in_group();
        (0..self.groups).all(|s| self.group_settled(s, &in_group))
            && self.directory_lag(&in_group).is_empty()
    }

    /// The registry group `g`'s replicas run.
    fn registry_of(&self, g: usize) -> &Registry {
        match &self.dir {
            Some(dir) if g == self.cfg.shards => &dir.registry,
            _ => &self.registry,
        }
    }

    fn group_settled(&self, s: usize, in_group: &[bool]) -> bool {
        let members = || {
            self.group_slots(s)
                .filter(|i| in_group[*i])
                .map(|i| &self.nodes[i])
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
            && self.left_ops_committed(s, in_group, first.node.committed())
    }

    /// Every op broadcast by a replica that left the group is committed:
    /// it hands its last ops over by gossip, and the run is not over
    /// before the group has them (a replica that left commits nothing
    /// itself, so its own quiet says nothing).
    fn left_ops_committed(&self, s: usize, in_group: &[bool], committed: &[OpId]) -> bool {
        let left: Vec<ReplicaId> = self
            .group_slots(s)
            .map(|i| (i, in_group[i]))
            .filter(|(i, member)| !*member && self.nodes[*i].slot == Slot::Removed)
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
}
