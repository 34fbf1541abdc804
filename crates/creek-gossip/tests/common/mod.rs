//! Test helpers: op builder and a seeded, lossy in-memory network.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use creek_core::{Op, OpId, ReplicaId, Timestamp};
use creek_gossip::{Gossip, GossipConfig, GossipOutput, Outbox};
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;
use creek_wire::GossipMessage;

/// The op `(origin, seq)`: a `kv.put` of a key naming it.
pub fn op(origin: u16, seq: u64) -> Arc<Op> {
    let key = format!("k{origin}.{seq}");
    Arc::new(Op {
        id: OpId::new(ReplicaId(origin), seq),
        timestamp: Timestamp::new(seq, 0),
        call: ProcCall::new(
            "kv.put",
            encode_args(&[Value::from(key.as_str()), Value::from("v")]),
        ),
        strong: false,
        causal_context: None,
    })
}

pub fn id(origin: u16, seq: u64) -> OpId {
    OpId::new(ReplicaId(origin), seq)
}

pub fn ids(ops: &[Arc<Op>]) -> Vec<OpId> {
    ops.iter().map(|o| o.id).collect()
}

/// The test network's only source of choices, seeded by proptest.
pub use creek_rng::Rng;

/// True with probability `pct` percent.
pub fn chance(rng: &mut Rng, pct: u32) -> bool {
    rng.chance(f64::from(pct) / 100.0)
}

/// Uniform in `0..n` (0 when `n == 0`).
pub fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.range(0, n.saturating_sub(1))
}

/// Message faults of the network.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    pub drop_pct: u32,
    pub dup_pct: u32,
    /// Extra delay, 0..=delay_max ticks on top of 1 (reorders messages).
    pub delay_max: u64,
}

/// Nodes, in-flight messages and what each node delivered, in order.
pub struct Net {
    pub nodes: BTreeMap<ReplicaId, Gossip>,
    /// Remote ops each node delivered, in delivery order.
    pub log: BTreeMap<ReplicaId, Vec<OpId>>,
    /// Own ops broadcast per node.
    pub cast: BTreeMap<ReplicaId, u64>,
    /// (due tick, serial) -> (from, to, message).
    flight: BTreeMap<(u64, u64), (ReplicaId, ReplicaId, GossipMessage)>,
    serial: u64,
    pub now: u64,
    pub rng: Rng,
    pub faults: Faults,
    /// Directed links that lose everything.
    pub cut: BTreeSet<(ReplicaId, ReplicaId)>,
    pub buffer_max: usize,
}

impl Net {
    /// `n` nodes `r1..=rn`, each configured by `tweak` from the defaults.
    pub fn new(n: u16, seed: u64, tweak: impl Fn(&mut GossipConfig)) -> Net {
        let all: Vec<ReplicaId> = (1..=n).map(ReplicaId).collect();
        let mut nodes = BTreeMap::new();
        let mut buffer_max = 0;
        for &me in &all {
            let mut c = GossipConfig::new(me, all.iter().copied().filter(|&p| p != me));
            tweak(&mut c);
            buffer_max = c.out_of_order_max;
            nodes.insert(me, Gossip::new(c).expect("valid config"));
        }
        Net {
            log: all.iter().map(|&r| (r, Vec::new())).collect(),
            cast: all.iter().map(|&r| (r, 0)).collect(),
            nodes,
            flight: BTreeMap::new(),
            serial: 0,
            now: 0,
            rng: Rng::new(seed),
            faults: Faults::default(),
            cut: BTreeSet::new(),
            buffer_max,
        }
    }

    pub fn replicas(&self) -> Vec<ReplicaId> {
        self.nodes.keys().copied().collect()
    }

    /// `origin` RB-casts its next op.
    pub fn broadcast(&mut self, origin: ReplicaId) {
        let seq = self.cast.get(&origin).copied().unwrap_or(0) + 1;
        self.cast.insert(origin, seq);
        let node = self.nodes.get_mut(&origin).expect("node");
        node.broadcast(op(origin.0, seq));
    }

    fn send(&mut self, from: ReplicaId, out: Outbox) {
        for (to, msg) in out {
            if self.cut.contains(&(from, to)) || chance(&mut self.rng, self.faults.drop_pct) {
                continue;
            }
            let copies = if chance(&mut self.rng, self.faults.dup_pct) {
                2
            } else {
                1
            };
            for _ in 0..copies {
                let due = self.now + 1 + below(&mut self.rng, self.faults.delay_max + 1);
                self.serial += 1;
                self.flight
                    .insert((due, self.serial), (from, to, msg.clone()));
            }
        }
    }

    /// One tick: every node ticks, due messages are handled, pushes flushed.
    pub fn step(&mut self) {
        self.now += 1;
        for r in self.replicas() {
            let node = self.nodes.get_mut(&r).expect("node");
            node.tick();
            let out = node.take_output();
            self.record(r, &out.delivered);
            self.send(r, out.messages);
        }
        while let Some(entry) = self.flight.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let (from, to, msg) = entry.remove();
            let node = self.nodes.get_mut(&to).expect("node");
            node.on_message(from, msg);
            let GossipOutput {
                delivered: deliver,
                messages: out,
                refused,
            } = node.take_output();
            // Correct peers never claim another replica's ops it did not
            // issue.
            assert_eq!(refused, Vec::new(), "{to} refused a correct peer's claim");
            assert!(node.stats().buffered <= self.buffer_max, "buffer bound");
            if let Err(e) = node.check_invariants() {
                panic!("{to}: {e}");
            }
            self.record(to, &deliver);
            self.send(to, out);
        }
        self.flush_all();
    }

    pub fn flush_all(&mut self) {
        for r in self.replicas() {
            let out = self.nodes.get_mut(&r).expect("node").take_output();
            self.record(r, &out.delivered);
            self.send(r, out.messages);
        }
    }

    /// Checks per-origin FIFO and exactly-once as deliveries happen.
    fn record(&mut self, to: ReplicaId, deliver: &[Arc<Op>]) {
        let log = self.log.get_mut(&to).expect("log");
        for op in deliver {
            assert_ne!(op.id.origin, to, "own op delivered back to {to}");
            let prev = log
                .iter()
                .rev()
                .find(|i| i.origin == op.id.origin)
                .map_or(0, |i| i.seq);
            assert_eq!(op.id.seq, prev + 1, "FIFO broken at {to} for {}", op.id);
            log.push(op.id);
        }
    }

    /// Every node delivered every other node's ops.
    pub fn converged(&self) -> bool {
        self.nodes.values().all(|g| {
            self.cast
                .iter()
                .all(|(&o, &n)| n == 0 || g.has_delivered(OpId::new(o, n)))
        })
    }

    /// Remove faults and partitions.
    pub fn heal(&mut self) {
        self.faults = Faults::default();
        self.cut.clear();
    }

    /// Every node commits every op cast so far.
    pub fn commit_all(&mut self) {
        let all: Vec<OpId> = self
            .cast
            .iter()
            .flat_map(|(&o, &n)| (1..=n).map(move |s| OpId::new(o, s)))
            .collect();
        for g in self.nodes.values_mut() {
            g.committed(all.iter().copied());
        }
    }

    pub fn payloads_held(&self) -> usize {
        self.nodes.values().map(|g| g.stats().payloads_held).sum()
    }
}
