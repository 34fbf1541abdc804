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
use creek_gossip::Gossip;
use creek_procs::Registry;
use creek_wire::{GossipMessage, PeerMessage};

use creek_node::{Node, NodeConfig};

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

use crate::rng::Rng;

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

struct Down {
    replica: creek_core::Replica,
    gossip: Gossip,
    applied: u64,
}

/// A cluster on a simulated network.
pub struct TestNet {
    config: NetConfig,
    node_config: Vec<NodeConfig>,
    ids: Vec<ReplicaId>,
    nodes: Vec<Option<Node<MemCabStorage>>>,
    down: Vec<Option<Down>>,
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
        for &me in &ids {
            let mut c = NodeConfig::for_group(me, &ids);
            c.tick_us = config.tick_us;
            tune(&mut c);
            let storage = MemCabStorage::new(voters.clone());
            let node = Node::new(c.clone(), registry.clone(), storage.clone(), 0);
            nodes.push(node.ok());
            node_config.push(c);
            storages.push(storage);
        }
        TestNet {
            config,
            node_config,
            ids,
            down: (0..n).map(|_| None).collect(),
            nodes,
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

    /// Crash node `i`: it stops; its replica and gossip state are kept as a
    /// durable driver would have persisted them, its CAB log stays in storage,
    /// everything volatile (leadership, held messages) is lost.
    pub fn crash(&mut self, i: usize) {
        if let Some(node) = self.nodes.get_mut(i).and_then(Option::take) {
            let applied = node.cab_delivered_through();
            let (replica, gossip) = node.into_parts();
            self.down[i] = Some(Down {
                replica,
                gossip,
                applied,
            });
        }
    }

    /// Restart a crashed node from what it kept.
    pub fn restart(&mut self, i: usize) {
        if let Some(d) = self.down.get_mut(i).and_then(Option::take) {
            let c = &self.node_config[i];
            let node = Node::restart(d.replica, d.gossip, c, self.storages[i].clone(), d.applied);
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

    /// After node `i` handled an input: run its executions, collect its
    /// views and commits, and put its messages on the wire.
    fn after(&mut self, i: usize) {
        let now = self.now_us;
        let Some(node) = self.nodes.get_mut(i).and_then(|n| n.as_mut()) else {
            return;
        };
        node.execute_all();
        // Storage here is synchronous (`MemCabStorage`): every write is
        // durable at once, so held messages leave with the others.
        let ready = node.ready();
        if let Some(w) = &ready.write {
            node.on_durable(w.seq);
        }
        for v in ready.views {
            self.views.push((i, now, v));
        }
        let committed = node.replica().committed();
        for id in &committed[self.committed_seen[i].min(committed.len())..] {
            self.committed_at.entry((i, *id)).or_insert(now);
        }
        self.committed_seen[i] = committed.len();
        for (to_id, msg) in ready
            .messages
            .into_iter()
            .chain(ready.held)
            .chain(ready.early)
        {
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
            | PeerMessage::Snapshot(_) => {
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
