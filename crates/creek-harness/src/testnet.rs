//! An in-process network of nodes for tests and measurements (`creek bench
//! cab`): virtual time, a seeded PRNG, per-message loss, duplication
//! and delay (so reordering), directed partitions, crashes and restarts.
//! Every message is encoded and decoded with the real codec, so bytes on the
//! wire are counted exactly. The full simulator (CPU model, checkers,
//! baselines) is its own room; this is the smallest harness that exercises
//! gossip and CAB together.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

use bytes::Bytes;
use creek_cab::MemCabStorage;
use creek_core::{ExecKey, Op, OpId, ReplicaId, Request, View};
use creek_procs::Registry;
use creek_wire::{GossipMessage, PeerMessage};

use creek_node::{CheckpointJob, Driver, Kept, Node, NodeConfig, TransferDone, TransferJob, Write};

/// Network behaviour.
#[derive(Clone, Copy, Debug)]
pub struct NetConfig {
    /// Per-message latency, uniform in `[min, max]` microseconds.
    pub latency_us: (u64, u64),
    /// Probability that a message is lost.
    pub loss: f64,
    /// Probability that a message is delivered twice.
    pub duplicate: f64,
    /// Interval between node ticks.
    pub tick_us: u64,
    /// PRNG seed.
    pub seed: u64,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            latency_us: (200, 300),
            loss: 0.0,
            duplicate: 0.0,
            tick_us: 1_000,
            seed: 1,
        }
    }
}

use creek_rng::Rng;

/// Bytes and messages carried, by protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Gossip messages sent.
    pub gossip_msgs: u64,
    /// Gossip bytes sent (encoded frames).
    pub gossip_bytes: u64,
    /// CAB messages sent (link probes included).
    pub cab_msgs: u64,
    /// CAB bytes sent (encoded frames).
    pub cab_bytes: u64,
}

/// A frame in flight: delivery time, send order (tie-break), from, to, bytes.
type InFlight = Reverse<(u64, u64, usize, usize, Bytes)>;

/// What a node's writes made durable: the test network's disk is
/// synchronous and in memory (CAB's log is in its `MemCabStorage`, kept
/// across a crash), so every write is durable once handed out.
#[derive(Default)]
struct Disk {
    checkpoint: Option<creek_core::Checkpoint>,
    ops: BTreeMap<OpId, Arc<Op>>,
    identity: Option<creek_node::Identity>,
    directory: creek_core::Directory,
    own_seqs: creek_node::OwnSeqs,
    /// The last write made durable.
    durable: u64,
    /// Background checkpoints written, to report.
    checkpoints_done: Vec<u64>,
}

impl Disk {
    fn write(&mut self, w: Write) {
        for op in w.ops {
            self.ops.insert(op.id, op);
        }
        if let Some(c) = w.checkpoint {
            self.checkpoint = Some(c);
        }
        for id in &w.dropped {
            self.ops.remove(id);
        }
        if let Some(i) = w.identity {
            self.identity = Some(i);
        }
        if let Some(d) = w.directory {
            self.directory = d;
        }
        if let Some(o) = w.own_seqs {
            self.own_seqs = o;
        }
        self.durable = w.seq;
    }

    /// What a restart finds.
    fn kept(&self) -> Kept {
        Kept {
            checkpoint: self.checkpoint.clone(),
            ops: self.ops.values().cloned().collect(),
            identity: self.identity.clone(),
            directory: self.directory.clone(),
            own_seqs: self.own_seqs,
        }
    }
}

/// One node's I/O for a [`Node::drive`]: its disk, and the frames it sends.
struct NetIo<'a> {
    disk: &'a mut Disk,
    views: Vec<View>,
    sent: Vec<(ReplicaId, PeerMessage)>,
}

impl Driver for NetIo<'_> {
    fn transfer(&mut self, job: TransferJob) -> Option<TransferDone> {
        Some(job.run())
    }

    fn views(&mut self, views: Vec<View>) {
        self.views.extend(views);
    }

    fn persist(&mut self, write: Write) {
        self.disk.write(write);
    }

    fn checkpoint(&mut self, job: CheckpointJob) {
        self.disk.checkpoint = Some(job.checkpoint);
        self.disk.checkpoints_done.push(job.id);
    }

    /// Every write is durable once handed out: nothing waits.
    fn hold(&mut self, until: u64, messages: Vec<(ReplicaId, PeerMessage)>) {
        debug_assert!(until <= self.disk.durable, "held past the last write");
        self.sent.extend(messages);
    }

    fn send_now(&mut self, messages: Vec<(ReplicaId, PeerMessage)>) {
        self.sent.extend(messages);
    }
}

/// A cluster on a simulated network.
pub struct TestNet {
    config: NetConfig,
    node_config: Vec<NodeConfig>,
    ids: Vec<ReplicaId>,
    registry: Arc<Registry>,
    nodes: Vec<Option<Node<MemCabStorage>>>,
    disks: Vec<Disk>,
    storages: Vec<MemCabStorage>,
    queue: BinaryHeap<InFlight>,
    seq: u64,
    /// Virtual time, microseconds.
    pub now_us: u64,
    next_tick_us: u64,
    rng: Rng,
    blocked: BTreeSet<(usize, usize)>,
    /// Traffic so far.
    pub traffic: Traffic,
    /// Every op seen on the wire or invoked, by id.
    pub ops: BTreeMap<OpId, Arc<Op>>,
    /// Views received, with the node and the time.
    pub views: Vec<(usize, u64, View)>,
    /// When each node committed each op.
    pub committed_at: BTreeMap<(usize, OpId), u64>,
    /// When each op was invoked, and where.
    pub invoked_at: BTreeMap<OpId, (usize, u64)>,
    /// Frames a node refused to decode (must stay 0).
    pub refused: u64,
    committed_seen: Vec<usize>,
}

impl TestNet {
    /// `n` replicas (ids 1..=n) with default node configuration, adjusted by
    /// `tune`.
    pub fn new(n: usize, config: NetConfig, tune: impl Fn(&mut NodeConfig)) -> Self {
        let ids: Vec<ReplicaId> = (1..=n as u16).map(ReplicaId).collect();
        let registry = Arc::new(Registry::with_builtins());
        let voters: Vec<u64> = ids.iter().map(|r| u64::from(r.0) + 1).collect();
        let mut node_config = Vec::new();
        let mut nodes = Vec::new();
        let mut storages = Vec::new();
        let mut disks = Vec::new();
        for &me in &ids {
            let mut c = NodeConfig::for_group(me, &ids);
            c.tick_us = config.tick_us;
            tune(&mut c);
            let storage = MemCabStorage::new(voters.clone());
            let disk = Disk {
                identity: Some(creek_node::Identity::founding(&ids)),
                ..Disk::default()
            };
            let node = Node::recover(c.clone(), registry.clone(), storage.clone(), disk.kept(), 0);
            nodes.push(node.ok());
            node_config.push(c);
            storages.push(storage);
            disks.push(disk);
        }
        TestNet {
            config,
            node_config,
            ids,
            registry,
            nodes,
            disks,
            storages,
            queue: BinaryHeap::new(),
            seq: 0,
            now_us: 0,
            next_tick_us: config.tick_us,
            rng: Rng::new(config.seed),
            blocked: BTreeSet::new(),
            traffic: Traffic::default(),
            ops: BTreeMap::new(),
            views: Vec::new(),
            committed_at: BTreeMap::new(),
            invoked_at: BTreeMap::new(),
            refused: 0,
            committed_seen: vec![0; n],
        }
    }

    /// The mean link latency.
    pub fn latency_us(&self) -> u64 {
        (self.config.latency_us.0 + self.config.latency_us.1) / 2
    }

    /// Number of replicas.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the cluster is empty.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Node `i`, if up.
    pub fn node(&self, i: usize) -> Option<&Node<MemCabStorage>> {
        self.nodes.get(i).and_then(|n| n.as_ref())
    }

    /// Mutable node `i`, if up.
    pub fn node_mut(&mut self, i: usize) -> Option<&mut Node<MemCabStorage>> {
        self.nodes.get_mut(i).and_then(|n| n.as_mut())
    }

    /// Index of the node every up node agrees is leader, if any.
    pub fn leader(&self) -> Option<usize> {
        (0..self.len()).find(|&i| self.node(i).is_some_and(|n| n.cab().is_leader()))
    }

    /// Invoke at node `i`.
    pub fn invoke(&mut self, i: usize, request: Request) -> Option<ExecKey> {
        let now = self.now_us;
        let node = self.node_mut(i)?;
        let handle = node.invoke(request, now).ok()?;
        if let ExecKey::Op(id) = handle {
            self.invoked_at.insert(id, (i, now));
        }
        self.after(i);
        Some(handle)
    }

    /// Block messages from `a` to `b` (directed).
    pub fn block(&mut self, a: usize, b: usize) {
        self.blocked.insert((a, b));
    }

    /// Cut node `i` off from everyone, both ways.
    pub fn isolate(&mut self, i: usize) {
        for j in 0..self.len() {
            if j != i {
                self.block(i, j);
                self.block(j, i);
            }
        }
    }

    /// Split into `side` and the rest.
    pub fn partition(&mut self, side: &[usize]) {
        for &a in side {
            for b in 0..self.len() {
                if !side.contains(&b) {
                    self.block(a, b);
                    self.block(b, a);
                }
            }
        }
    }

    /// Remove every partition.
    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    /// Crash node `i`: it stops, and everything volatile (leadership,
    /// messages in its hands) is lost; its disk keeps what its writes made
    /// durable (all of them: the disk is synchronous).
    pub fn crash(&mut self, i: usize) {
        if let Some(slot) = self.nodes.get_mut(i) {
            *slot = None;
        }
    }

    /// Restart a crashed node from its disk, as `creek serve` restarts
    /// ([`Node::recover`]).
    pub fn restart(&mut self, i: usize) {
        if self.nodes.get(i).is_some_and(Option::is_none) {
            let node = Node::recover(
                self.node_config[i].clone(),
                self.registry.clone(),
                self.storages[i].clone(),
                self.disks[i].kept(),
                0,
            );
            self.nodes[i] = node.ok();
        }
    }

    /// Run until virtual time `until_us`.
    pub fn run_until(&mut self, until_us: u64) {
        loop {
            let next_msg = self.queue.peek().map(|Reverse((t, ..))| *t);
            let next = match next_msg {
                Some(t) if t <= self.next_tick_us => t,
                _ => self.next_tick_us,
            };
            if next > until_us {
                self.now_us = until_us;
                return;
            }
            self.now_us = next;
            if next_msg == Some(next) && next <= self.next_tick_us {
                if let Some(Reverse((_, _, from, to, frame))) = self.queue.pop() {
                    self.deliver(from, to, frame);
                }
            } else {
                self.next_tick_us += self.config.tick_us;
                for i in 0..self.len() {
                    let now = self.now_us;
                    if let Some(n) = self.node_mut(i) {
                        n.tick(now);
                        self.after(i);
                    }
                }
            }
        }
    }

    /// Run for `us` more microseconds.
    pub fn run_for(&mut self, us: u64) {
        let until = self.now_us + us;
        self.run_until(until);
    }

    fn deliver(&mut self, from: usize, to: usize, frame: Bytes) {
        let Some(node) = self.node_mut(to) else {
            return; // crashed: lost
        };
        let sender = ReplicaId(from as u16 + 1);
        if node.on_frame(sender, &frame).is_err() {
            self.refused += 1;
        }
        self.after(to);
    }

    /// After node `i` handled an input: run its executions, carry out its
    /// output, collect its views and commits.
    fn after(&mut self, i: usize) {
        let now = self.now_us;
        let (Some(Some(node)), Some(disk)) = (self.nodes.get_mut(i), self.disks.get_mut(i)) else {
            return;
        };
        node.execute_all();
        let mut io = NetIo {
            disk,
            views: Vec::new(),
            sent: Vec::new(),
        };
        node.drive(&mut io);
        let NetIo { views, sent, .. } = io;
        node.on_durable(self.disks[i].durable);
        for id in std::mem::take(&mut self.disks[i].checkpoints_done) {
            node.on_checkpoint_durable(id);
        }
        for v in views {
            self.views.push((i, now, v));
        }
        let committed = node.replica().committed();
        for id in &committed[self.committed_seen[i].min(committed.len())..] {
            self.committed_at.entry((i, *id)).or_insert(now);
        }
        self.committed_seen[i] = committed.len();
        for (to_id, msg) in sent {
            let to = usize::from(to_id.0).saturating_sub(1);
            self.send(i, to, msg);
        }
    }

    fn send(&mut self, from: usize, to: usize, msg: PeerMessage) {
        if let PeerMessage::Gossip(GossipMessage::Ops(ops)) = &msg {
            for op in ops {
                self.ops.entry(op.id).or_insert_with(|| op.clone());
            }
        }
        let limits = self.node_config[from].wire;
        let Ok(frame) = creek_wire::encode(&msg, &limits) else {
            return;
        };
        match msg {
            PeerMessage::Gossip(_) => {
                self.traffic.gossip_msgs += 1;
                self.traffic.gossip_bytes += frame.len() as u64;
            }
            PeerMessage::Cab(_)
            | PeerMessage::Probe(_)
            | PeerMessage::Hello(_)
            | PeerMessage::Snapshot(_)
            | PeerMessage::Stable(_) => {
                self.traffic.cab_msgs += 1;
                self.traffic.cab_bytes += frame.len() as u64;
            }
        }
        if self.blocked.contains(&(from, to)) || self.rng.chance(self.config.loss) {
            return;
        }
        let copies = if self.rng.chance(self.config.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let (lo, hi) = self.config.latency_us;
            let at = self.now_us + self.rng.range(lo, hi);
            self.seq += 1;
            self.queue
                .push(Reverse((at, self.seq, from, to, frame.clone())));
        }
    }

    /// Committed lists of the nodes that are up.
    pub fn committed_lists(&self) -> Vec<(usize, Vec<OpId>)> {
        (0..self.len())
            .filter_map(|i| self.node(i).map(|n| (i, n.replica().committed().to_vec())))
            .collect()
    }
}
