//! The network model: per-link latency, bandwidth (serialization delay by
//! frame size, FIFO per link), loss, duplication, reordering, directed
//! partitions. Every directed link has its own one-way latency range: the
//! same for all on a LAN, drawn per link (asymmetric, jittered) for a
//! wide-area profile.

use std::collections::BTreeSet;

use crate::rng::Rng;

/// Network state.
#[derive(Clone, Debug)]
pub struct Network {
    n: usize,
    /// One-way latency range of each directed link `from * n + to`.
    latency_us: Vec<(u64, u64)>,
    bandwidth_bps: u64,
    /// Probability of losing a message.
    pub loss: f64,
    /// Probability of delivering a message twice.
    pub duplicate: f64,
    /// Probability of an extra delay (up to 10× the latency) that reorders.
    pub reorder: f64,
    blocked: BTreeSet<(usize, usize)>,
    /// A node that receives no payloads (gossip `Ops` frames); everything
    /// else reaches it.
    starved: Option<usize>,
    /// When each directed link is free to start sending the next frame.
    busy_until: Vec<u64>,
}

impl Network {
    /// `n` nodes, all links up, every link's latency in `latency_us`.
    pub fn new(n: usize, latency_us: (u64, u64), bandwidth_bps: u64) -> Self {
        Self::with_links(n, vec![latency_us; n * n], bandwidth_bps)
    }

    /// `n` nodes, all links up, link `from → to` with the latency range
    /// `latency_us[from * n + to]`.
    pub fn with_links(n: usize, latency_us: Vec<(u64, u64)>, bandwidth_bps: u64) -> Self {
        assert_eq!(
            latency_us.len(),
            n * n,
            "one latency range per directed link"
        );
        Network {
            n,
            latency_us,
            bandwidth_bps,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            blocked: BTreeSet::new(),
            starved: None,
            busy_until: vec![0; n * n],
        }
    }

    /// Arrival times of a frame of `bytes` sent now from `from` to `to`
    /// (empty when lost or blocked; two when duplicated).
    pub fn send(
        &mut self,
        rng: &mut Rng,
        now: u64,
        from: usize,
        to: usize,
        bytes: usize,
    ) -> Vec<u64> {
        if self.blocked.contains(&(from, to)) {
            return Vec::new();
        }
        // Serialization: the link sends one frame at a time.
        let link = from * self.n + to;
        let start = now.max(self.busy_until[link]);
        let wire_us = (bytes as u64 * 8 * 1_000_000).div_ceil(self.bandwidth_bps);
        self.busy_until[link] = start + wire_us;
        if rng.chance(self.loss) {
            return Vec::new();
        }
        let copies = if rng.chance(self.duplicate) { 2 } else { 1 };
        (0..copies)
            .map(|_| {
                let (lo, hi) = self.latency_us[link];
                let mut at = start + wire_us + rng.range(lo, hi);
                if rng.chance(self.reorder) {
                    at += rng.range(0, 10 * hi);
                }
                at
            })
            .collect()
    }

    /// Block `from → to`.
    pub fn block(&mut self, from: usize, to: usize) {
        self.blocked.insert((from, to));
    }

    /// From now on, payloads to `node` are lost (see [`Network::starves`]).
    pub fn starve(&mut self, node: usize) {
        self.starved = Some(node);
    }

    /// Whether payloads to `to` are lost.
    pub fn starves(&self, to: usize) -> bool {
        self.starved == Some(to)
    }

    /// Remove every block (and starvation).
    pub fn heal(&mut self) {
        self.blocked.clear();
        self.starved = None;
    }

    /// Whether any link is blocked or a node starved.
    pub fn partitioned(&self) -> bool {
        !self.blocked.is_empty() || self.starved.is_some()
    }

    /// The largest one-way latency of any link (microseconds).
    pub fn latency_max_us(&self) -> u64 {
        self.latency_us.iter().map(|l| l.1).max().unwrap_or(0)
    }

    /// Nodes count.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}
