//! The gossip state machine: eager push, anti-entropy digests, pulls.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use creek_core::{Op, OpId, ReplicaId};
use creek_wire::GossipMessage;

use crate::config::{ConfigError, GossipConfig};
use crate::fifo::{Fifo, Received};
use crate::inflight::Inflight;
use crate::refusal::{Refusal, RefusalKind, REFUSALS_KEPT_MAX};
use crate::store::Store;

/// Messages to send: `(destination, message)`, in order.
pub type Outbox = Vec<(ReplicaId, GossipMessage)>;

/// What gossip hands its caller after a turn ([`Gossip::take_output`]).
/// Inputs are methods; outputs accumulate in the room until the caller
/// takes them as one value, the convention of every protocol room
/// (`Replica::take_effects`, `Cab::ready`).
#[derive(Debug, Default)]
#[must_use = "a GossipOutput carries deliveries and messages the caller must act on"]
pub struct GossipOutput {
    /// Remote ops delivered, in delivery order (per-origin FIFO): hand each
    /// to the replica (RB-deliver).
    pub delivered: Vec<Arc<Op>>,
    /// Messages to send, in order.
    pub messages: Outbox,
    /// Claims about this replica's own ops refused since the last call (see
    /// [`crate::refusal`]), at most [`REFUSALS_KEPT_MAX`]; all are counted in
    /// [`GossipStats::own_origin_refused`].
    pub refused: Vec<Refusal>,
}

/// An upper bound of `op`'s size on the wire: its payload plus generous
/// room for the fixed fields and varints (the exact encoding is the wire
/// crate's).
fn encoded_size_bound(op: &Op) -> usize {
    let context = op
        .causal_context
        .as_ref()
        .map_or(0, |c| 32 * c.origins() + 10 * c.exceptions());
    64 + op.call.name.len() + op.call.args.len() + 10 * op.call.acked.len() + context
}

/// Counters for monitoring and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GossipStats {
    /// Delivered payloads still held (to answer peers), own ops included.
    pub payloads_held: usize,
    /// Ops buffered until an earlier op of their origin arrives.
    pub buffered: usize,
    /// Own ops queued for the next `Gossip::take_messages`.
    pub pushes_queued: usize,
    /// Ops sent (each copy to each peer counts).
    pub ops_sent: u64,
    /// Ops received in `Ops` messages.
    pub ops_received: u64,
    /// Remote ops delivered (handed to the replica).
    pub ops_delivered: u64,
    /// Received or broadcast ops already delivered or buffered.
    pub duplicates: u64,
    /// Refused input: ops claiming this replica as origin, seq 0, a
    /// broadcast of another origin's op, messages claiming to be from us.
    pub rejected: u64,
    /// Of those, and of digests: claims about this replica's own ops that
    /// it never issued or issued to another op ([`crate::refusal`]).
    pub own_origin_refused: u64,
    /// `Pull` messages sent.
    pub pulls_sent: u64,
    /// `Digest` messages sent (periodic and answers).
    pub digests_sent: u64,
    /// Payloads dropped by garbage collection.
    pub gc_dropped: u64,
    /// Ops dropped to keep the out-of-order buffer bounded.
    pub overflow_dropped: u64,
}

/// Reliable broadcast of op payloads (paper's RB, DESIGN §5) as a
/// deterministic, I/O-free state machine. See the [crate docs](crate).
#[derive(Debug)]
pub struct Gossip {
    config: GossipConfig,
    /// `config.peers`, sorted: the order of every output.
    peers: BTreeSet<ReplicaId>,
    fifo: Fifo,
    store: Store,
    /// Ops sent to each peer and not yet reported held.
    inflight: Inflight,
    /// Own ops not yet pushed.
    pushes: Vec<Arc<Op>>,
    /// Ticks so far.
    now: u64,
    /// The tick of the next periodic digest.
    next_digest: u64,
    /// Id → tick it was last pulled at (entries expire).
    pulled: BTreeMap<OpId, u64>,
    /// Senders answered with our digest during the current tick.
    digested_back: BTreeSet<ReplicaId>,
    /// Messages not yet taken ([`Gossip::take_messages`]).
    outbox: Outbox,
    /// Remote ops delivered and not yet taken ([`Gossip::take_delivered`]).
    delivered_out: Vec<Arc<Op>>,
    /// Refusals not yet taken, at most [`REFUSALS_KEPT_MAX`].
    refused: Vec<Refusal>,
    stats: GossipStats,
}

impl Gossip {
    /// A gossip room with nothing delivered yet.
    pub fn new(config: GossipConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Gossip {
            peers: config.peers.iter().copied().collect(),
            fifo: Fifo::new(config.out_of_order_max),
            store: Store::default(),
            inflight: Inflight::new(
                u64::from(config.resend_after_ticks),
                u64::from(config.resend_after_ticks_max),
            ),
            pushes: Vec::new(),
            now: 0,
            next_digest: u64::from(config.anti_entropy_every_ticks),
            pulled: BTreeMap::new(),
            digested_back: BTreeSet::new(),
            outbox: Outbox::new(),
            delivered_out: Vec::new(),
            refused: Vec::new(),
            stats: GossipStats::default(),
            config,
        })
    }

    /// A gossip room after a restart or an installed checkpoint, resuming
    /// from what the replica holds. `delivered` gives, per origin (this
    /// replica included), the highest seq up to which every op is held by
    /// the replica — in its checkpoint or as a kept payload — and the seqs
    /// it holds past a gap after that (ids committed after ids voided or
    /// not received yet), so per-origin FIFO delivery, digests and this
    /// replica's own broadcast seqs continue from there: the ids past a gap
    /// need not come again, and delivery goes past them once the gap is
    /// voided or opened as a loose range (a missing origin or a repeated
    /// one resumes at the largest counter given).
    /// `held` are kept payloads peers may still lack; those at or below their
    /// origin's counter are held again, to answer digests and pulls, until
    /// garbage collection drops them (report them [`Gossip::committed`] as
    /// usual). Others wait, buffered, for the gap before them.
    pub fn restore(
        config: GossipConfig,
        delivered: impl IntoIterator<Item = (ReplicaId, u64, Vec<u64>)>,
        held: impl IntoIterator<Item = Arc<Op>>,
    ) -> Result<Self, ConfigError> {
        let mut gossip = Gossip::new(config)?;
        let mut ahead = Vec::new();
        for (origin, counter, past_gap) in delivered {
            gossip.fifo.resume(origin, counter);
            ahead.extend(past_gap.into_iter().map(|seq| OpId::new(origin, seq)));
        }
        for op in held {
            if gossip.fifo.has_delivered(op.id) {
                gossip.store.insert(op);
            } else {
                // Past a gap in its origin's seqs (ops voided after the
                // checkpoint, or still being taken back by a restarted
                // origin): waits, buffered, until the gap is voided or
                // opened; peers' pulls are answered from the buffer meanwhile.
                let mut delivered = Vec::new();
                gossip.fifo.receive(op, &mut delivered);
                for op in delivered {
                    gossip.store.insert(op);
                }
            }
        }
        for id in ahead {
            gossip.fifo.held_ahead(id, &mut gossip.delivered_out);
        }
        gossip.store_delivered_since(0);
        Ok(gossip)
    }

    /// The configuration.
    pub fn config(&self) -> &GossipConfig {
        &self.config
    }

    /// A new op of this replica (from the core's `Effect::RbCast`): held as
    /// delivered and queued for an eager push to every peer. Its seq must
    /// follow the previous own op's (a gap would leave peers waiting for
    /// ops nobody has). Ops of another origin, seq 0 and repeats are
    /// ignored.
    pub fn broadcast(&mut self, op: Arc<Op>) {
        if op.id.origin != self.config.me || op.id.seq == 0 {
            self.stats.rejected += 1;
            return;
        }
        if !self.fifo.deliver_own(op.id) {
            self.stats.duplicates += 1;
            return;
        }
        self.store.insert(op.clone());
        if !self.peers.is_empty() {
            self.pushes.push(op);
        }
        self.collect();
    }

    /// Everything gossip has for its caller after a turn: the remote ops
    /// delivered since the last call, in delivery order (per-origin FIFO),
    /// and the messages to send, in order — everything emitted since the
    /// last call, then the queued eager pushes (to every peer, the ops in
    /// seq order, split into messages of at most `ops_per_message_max`).
    /// Drivers take it after a batch of inputs, so pushes are batched.
    pub fn take_output(&mut self) -> GossipOutput {
        let pushes = std::mem::take(&mut self.pushes);
        if let Some(last) = pushes.last() {
            let (me, through) = (self.config.me, last.id.seq);
            let peers: Vec<ReplicaId> = self.peers.iter().copied().collect();
            for peer in peers {
                self.send_ops(peer, &pushes);
                let has = self.store.acked(peer, me);
                self.inflight.sent(peer, me, through, has, self.now);
            }
        }
        GossipOutput {
            delivered: std::mem::take(&mut self.delivered_out),
            messages: std::mem::take(&mut self.outbox),
            refused: std::mem::take(&mut self.refused),
        }
    }

    /// A message from a peer. Ops that become deliverable (per-origin FIFO;
    /// duplicates, already-delivered ops and ops claiming this replica as
    /// origin are ignored) and replies wait for [`Gossip::take_output`].
    /// Never panics, whatever the message holds.
    pub fn on_message(&mut self, from: ReplicaId, msg: GossipMessage) {
        if from == self.config.me {
            self.stats.rejected += 1;
            return;
        }
        match msg {
            GossipMessage::Ops(ops) => self.on_ops(from, ops),
            GossipMessage::Digest { delivered } => self.on_digest(from, delivered),
            GossipMessage::Pull { ids } => self.on_pull(from, ids),
        }
    }

    /// Periodic: every `anti_entropy_every_ticks` ticks, a digest of the
    /// delivered counters to every peer.
    pub fn tick(&mut self) {
        self.now += 1;
        self.digested_back.clear();
        let (now, every) = (self.now, u64::from(self.config.pull_every_ticks));
        let fifo = &self.fifo;
        self.pulled
            .retain(|&id, &mut at| now.saturating_sub(at) < every && !fifo.has_delivered(id));
        if self.now >= self.next_digest {
            self.next_digest = now.saturating_add(u64::from(self.config.anti_entropy_every_ticks));
            let digest = self.digest();
            for &peer in &self.peers {
                self.outbox.push((peer, digest.clone()));
                self.stats.digests_sent += 1;
            }
        }
    }

    /// Asks every peer for these ops (e.g. a strong op's causal context that
    /// CAB waits for). Ids already delivered or buffered, own ids, seq 0 and
    /// ids pulled less than `pull_every_ticks` ticks ago are skipped; the
    /// rest go, sorted, in `Pull` messages of at most `ops_per_message_max`
    /// ids to every peer.
    pub fn pull(&mut self, ids: &[OpId]) {
        let every = u64::from(self.config.pull_every_ticks);
        let wanted: BTreeSet<OpId> = ids
            .iter()
            .copied()
            .filter(|&id| {
                id.seq != 0
                    && (id.origin != self.config.me || self.fifo.is_loose(id))
                    && !self.fifo.has_delivered(id)
                    && self.fifo.buffered(id).is_none()
                    && self
                        .pulled
                        .get(&id)
                        .is_none_or(|&at| self.now.saturating_sub(at) >= every)
            })
            .collect();
        for &id in &wanted {
            self.pulled.insert(id, self.now);
        }
        let wanted: Vec<OpId> = wanted.into_iter().collect();
        for &peer in &self.peers {
            for chunk in wanted.chunks(self.config.ops_per_message_max) {
                let ids = chunk.to_vec();
                self.outbox.push((peer, GossipMessage::Pull { ids }));
                self.stats.pulls_sent += 1;
            }
        }
    }

    /// These ops are committed at this replica. A held payload is dropped
    /// once it is committed here and every peer has reported (in a digest)
    /// that it holds it. Ids may come before or after delivery.
    pub fn committed(&mut self, ids: impl IntoIterator<Item = OpId>) {
        for id in ids {
            // Ops of a loose range stay held: a peer's counter for their
            // origin does not say which of them it holds.
            if !self.fifo.is_loose(id) {
                self.store.commit(id);
            }
        }
        self.collect();
    }

    /// Per-origin contiguous delivered counters, sorted by origin, as in a
    /// digest (own ops included; origins with nothing delivered omitted).
    pub fn delivered(&self) -> Vec<(ReplicaId, u64)> {
        self.fifo
            .counters()
            .map(|(o, _)| (o, self.fifo.held_counter(o)))
            .filter(|&(_, c)| c > 0)
            .collect()
    }

    /// The ops of `origin`'s open loose range not received yet, at most
    /// `max`.
    pub fn loose_missing(&self, origin: ReplicaId, max: usize) -> Vec<OpId> {
        self.fifo.loose_missing(origin, max)
    }

    /// Stop expecting the rest of `origin`'s loose range: what did not come
    /// was lost, and digests report the whole range held (so peers collect
    /// what lies above it). Late arrivals are still taken.
    pub fn close_range(&mut self, origin: ReplicaId) {
        self.fifo.close(origin);
    }

    /// `id` was voided by the committed order (it was lost with its
    /// origin's data): it counts as delivered, and a copy that arrives later
    /// is a duplicate.
    pub fn void(&mut self, id: OpId) {
        let start = self.delivered_out.len();
        self.fifo.void(id, &mut self.delivered_out);
        self.store_delivered_since(start);
    }

    /// Hold the ops delivered since `start` of the delivered list.
    fn store_delivered_since(&mut self, start: usize) {
        let new: Vec<Arc<Op>> = self.delivered_out[start..].to_vec();
        self.stats.ops_delivered += new.len() as u64;
        for op in new {
            self.store.insert(op);
        }
    }

    /// `peer` lost its data: what it reported holding is gone (payloads are
    /// kept for it again until it reports anew).
    pub fn forget_peer(&mut self, peer: ReplicaId) {
        self.store.forget(peer);
        self.inflight.forget(peer);
    }

    /// Gossip with these peers from now on (the group changed): a peer that
    /// left is forgotten (garbage collection no longer waits for it); one
    /// that joined is pushed to and digested like the others, and holds
    /// nothing until it reports otherwise.
    pub fn set_peers(&mut self, peers: &[ReplicaId]) {
        let gone: Vec<ReplicaId> = self
            .peers
            .iter()
            .copied()
            .filter(|p| !peers.contains(p))
            .collect();
        for p in gone {
            self.store.forget(p);
            self.inflight.forget(p);
        }
        self.peers = peers
            .iter()
            .copied()
            .filter(|p| *p != self.config.me)
            .collect();
        self.config.peers = self.peers.iter().copied().collect();
    }

    /// The driver's tick scale (how much slower than a LAN its links are,
    /// at least 1): retransmission timeouts started from now on are
    /// stretched by it, as consensus's election timeout is.
    pub fn set_tick_scale(&mut self, scale: u64) {
        self.inflight.set_scale(scale);
    }

    /// Whether `id` needs not come any more: delivered, voided, or held
    /// past a gap in its origin's seqs.
    pub fn counts_held(&self, id: OpId) -> bool {
        self.fifo.counts_held(id)
    }

    /// The contiguous delivered counter of `origin`.
    pub fn counter(&self, origin: ReplicaId) -> u64 {
        self.fifo.counter(origin)
    }

    /// Ops of `origin` after `base` and up to `through` may arrive in any
    /// order (a loose range): `origin` lost its data and was rebuilt, and of
    /// the ops it issued before, those no replica kept will never come.
    /// Buffered ones are delivered now. This replica's own origin too
    /// (`base` 0): after it was rebuilt, it takes its own earlier ops back
    /// from its peers; those held here, or that `held` says the replica
    /// holds (committed and collected, or in an installed checkpoint), count
    /// as delivered.
    pub fn open_range(
        &mut self,
        origin: ReplicaId,
        base: u64,
        through: u64,
        held: impl Fn(OpId) -> bool,
    ) {
        let deliver = &mut self.delivered_out;
        let start = deliver.len();
        let store = &self.store;
        self.fifo.open(
            origin,
            base,
            through,
            |seq| {
                let id = OpId::new(origin, seq);
                store.get(id).is_some() || held(id)
            },
            deliver,
        );
        let new: Vec<Arc<Op>> = deliver.get(start..).unwrap_or_default().to_vec();
        self.stats.ops_delivered += new.len() as u64;
        for op in new {
            self.store.insert(op);
        }
    }

    /// The highest seq of `origin` received here, delivered or buffered (0:
    /// none).
    pub fn highest_seq(&self, origin: ReplicaId) -> u64 {
        let buffered = self
            .fifo
            .buffered_ids()
            .filter(|id| id.origin == origin)
            .map(|id| id.seq)
            .max();
        self.fifo.counter(origin).max(buffered.unwrap_or(0))
    }

    /// Whether every peer but those in `except` has reported (in a digest)
    /// that it holds `id`.
    pub fn held_by_peers(&self, id: OpId, except: &[ReplicaId]) -> bool {
        self.config
            .peers
            .iter()
            .filter(|p| !except.contains(p))
            .all(|&p| self.store.acked(p, id.origin) >= id.seq)
    }

    /// Whether `peer` has reported (in a digest) that it holds `id`; a
    /// digest leaves a replica only once what it reports is durable there.
    pub fn peer_holds(&self, peer: ReplicaId, id: OpId) -> bool {
        self.store.acked(peer, id.origin) >= id.seq
    }

    /// Whether `id` is delivered here (own ops: broadcast).
    pub fn has_delivered(&self, id: OpId) -> bool {
        self.fifo.has_delivered(id)
    }

    /// The payload of a delivered op, while it is held.
    pub fn op(&self, id: OpId) -> Option<&Arc<Op>> {
        self.store.get(id)
    }

    /// The digest this replica sends.
    pub fn digest(&self) -> GossipMessage {
        GossipMessage::Digest {
            delivered: self.delivered(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> GossipStats {
        GossipStats {
            payloads_held: self.store.len(),
            buffered: self.fifo.buffered_len(),
            pushes_queued: self.pushes.len(),
            ..self.stats
        }
    }

    /// Reports `op`, of this replica's origin and outside a loose range of
    /// its own, if it is a claim this replica never made (see
    /// [`crate::refusal`]); a copy of an op it issued is only ignored.
    fn refuses_own(&mut self, from: ReplicaId, op: &Op) {
        let kind = if op.id.seq > self.fifo.counter(self.config.me) {
            RefusalKind::NeverIssued
        } else if self.store.get(op.id).is_some_and(|held| **held != *op) {
            RefusalKind::SeqReused
        } else {
            // Issued here (a late answer to a pull of a closed range), or
            // collected: nothing to compare with.
            return;
        };
        self.refuse(from, op.id, kind);
    }

    fn refuse(&mut self, from: ReplicaId, id: OpId, kind: RefusalKind) {
        self.stats.own_origin_refused += 1;
        if self.refused.len() < REFUSALS_KEPT_MAX {
            self.refused.push(Refusal { from, id, kind });
        }
    }

    fn on_ops(&mut self, from: ReplicaId, ops: Vec<Arc<Op>>) {
        let start = self.delivered_out.len();
        for op in ops {
            self.stats.ops_received += 1;
            if op.id.origin == self.config.me && !self.fifo.is_loose(op.id) {
                self.stats.rejected += 1;
                self.refuses_own(from, &op);
                continue;
            }
            let deliver = &mut self.delivered_out;
            match self.fifo.receive(op, deliver) {
                Received::Delivered | Received::Buffered => {}
                Received::Duplicate => self.stats.duplicates += 1,
                Received::Invalid => self.stats.rejected += 1,
                Received::Overflow => self.stats.overflow_dropped += 1,
            }
        }
        let new = self.delivered_out.get(start..).unwrap_or_default();
        if new.is_empty() {
            return;
        }
        let mut next: BTreeMap<ReplicaId, u64> = BTreeMap::new();
        for op in new {
            // Paired with the FIFO's delivery rule: per origin, each seq
            // once, in order (past ids skipped between: voided, or held
            // already), and counted as delivered.
            let id = op.id;
            let expected = next.get(&id.origin).copied();
            let loose = self.fifo.is_loose(id);
            assert!(
                (loose || expected.is_none_or(|s| s <= id.seq)) && self.fifo.has_delivered(id),
                "{id} delivered out of per-origin order"
            );
            if !loose {
                next.insert(id.origin, id.seq + 1);
            }
            self.store.insert(op.clone());
        }
        self.stats.ops_delivered += new.len() as u64;
        self.collect();
    }

    fn on_digest(&mut self, from: ReplicaId, reported: Vec<(ReplicaId, u64)>) {
        let mut theirs: BTreeMap<ReplicaId, u64> = BTreeMap::new();
        for (origin, counter) in reported {
            let c = theirs.entry(origin).or_insert(0);
            *c = (*c).max(counter);
        }
        let me = self.config.me;
        if let Some(&claimed) = theirs.get(&me) {
            // An own op a peer holds was issued here (the counter covers a
            // loose range of our own once it is open).
            if claimed > self.fifo.counter(me) {
                self.refuse(from, OpId::new(me, claimed), RefusalKind::ClaimsNeverIssued);
            }
        }
        let is_peer = self.peers.contains(&from);
        if is_peer {
            for (&origin, &counter) in &theirs {
                self.store.ack(from, origin, counter);
            }
            self.collect();
        }
        self.answer_digest(from, is_peer, &theirs);
        // The sender knows ops we lack: our digest makes it push them. Only
        // when it knows strictly more (no ping-pong), once per tick.
        let knows_more = theirs
            .iter()
            .any(|(&o, &c)| o != me && c > self.fifo.counter(o));
        if knows_more && self.digested_back.insert(from) {
            self.outbox.push((from, self.digest()));
            self.stats.digests_sent += 1;
        }
    }

    /// Sends `to` the held ops it lacks according to its digest (and, for a
    /// peer, everything it ever reported), past what is already on its way
    /// to it (see `inflight.rs`): oldest first per origin, each origin with a
    /// fair share of `reply_ops_max`, the leftover share going to origins in
    /// order.
    fn answer_digest(&mut self, to: ReplicaId, is_peer: bool, theirs: &BTreeMap<ReplicaId, u64>) {
        // (origin, what it reported holding, first seq to send, our counter)
        let mut lacking: Vec<(ReplicaId, u64, u64, u64)> = Vec::new();
        let counters: Vec<(ReplicaId, u64)> = self.fifo.counters().collect();
        for (origin, ours) in counters {
            if origin == to {
                continue; // a replica's own ops come from itself
            }
            let mut has = theirs.get(&origin).copied().unwrap_or(0);
            if is_peer {
                has = has.max(self.store.acked(to, origin));
            }
            if has >= ours {
                continue;
            }
            let after = self.inflight.resume_after(to, origin, has, self.now);
            if after < ours {
                lacking.push((origin, has, after + 1, ours));
            }
        }
        if lacking.is_empty() {
            return;
        }
        let mut left = self.config.reply_ops_max();
        let share = (left / lacking.len()).max(1);
        let mut picked: Vec<Vec<Arc<Op>>> = vec![Vec::new(); lacking.len()];
        for (ops, &(origin, _, from, upto)) in picked.iter_mut().zip(&lacking) {
            ops.extend(
                self.store
                    .range(origin, from, upto)
                    .take(share.min(left))
                    .cloned(),
            );
            left -= ops.len();
        }
        for (ops, &(origin, _, from, upto)) in picked.iter_mut().zip(&lacking) {
            let next = match ops.last() {
                Some(op) => match op.id.seq.checked_add(1) {
                    Some(n) => n,
                    None => continue,
                },
                None => from,
            };
            let before = ops.len();
            ops.extend(self.store.range(origin, next, upto).take(left).cloned());
            left -= ops.len() - before;
        }
        for (ops, &(origin, has, _, _)) in picked.iter().zip(&lacking) {
            if let Some(last) = ops.last() {
                self.inflight.sent(to, origin, last.id.seq, has, self.now);
            }
        }
        let ops: Vec<Arc<Op>> = picked.into_iter().flatten().collect();
        self.send_ops(to, &ops);
    }

    /// Answers a pull with the requested ops held or buffered here, sorted
    /// by id, at most `reply_ops_max`.
    fn on_pull(&mut self, from: ReplicaId, ids: Vec<OpId>) {
        // A peer asks for its own ops only after it lost its data (its
        // loose range): answered like any other.
        let wanted: BTreeSet<OpId> = ids.into_iter().collect();
        let ops: Vec<Arc<Op>> = wanted
            .into_iter()
            .filter_map(|id| self.store.get(id).or_else(|| self.fifo.buffered(id)))
            .take(self.config.reply_ops_max())
            .cloned()
            .collect();
        self.send_ops(from, &ops);
    }

    /// Sends `ops` in messages of at most `ops_per_message_max` ops and
    /// `message_bytes_max` estimated bytes.
    fn send_ops(&mut self, to: ReplicaId, ops: &[Arc<Op>]) {
        let mut start = 0;
        while start < ops.len() {
            let mut bytes = 0;
            let mut end = start;
            while end < ops.len() && end - start < self.config.ops_per_message_max {
                let size = encoded_size_bound(&ops[end]);
                if end > start && bytes + size > self.config.message_bytes_max {
                    break;
                }
                bytes += size;
                end += 1;
            }
            self.stats.ops_sent += (end - start) as u64;
            self.outbox
                .push((to, GossipMessage::Ops(ops[start..end].to_vec())));
            start = end;
        }
    }

    /// Check gossip's invariants (for the simulator's sampled checks): every
    /// held payload is delivered, every buffered op is ahead of its origin's
    /// counter, the buffer within its bound, queued pushes are own ops.
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(id) = self.store.ids().find(|id| !self.fifo.has_delivered(*id)) {
            return Err(format!("{id} is held but not delivered"));
        }
        if self.fifo.buffered_len() > self.config.out_of_order_max {
            return Err("the out-of-order buffer is over its bound".into());
        }
        if let Some(id) = self
            .fifo
            .buffered_ids()
            .find(|id| self.fifo.has_delivered(*id))
        {
            return Err(format!("{id} is buffered but already delivered"));
        }
        if let Some(op) = self.pushes.iter().find(|op| op.id.origin != self.config.me) {
            return Err(format!("{} is queued for a push but not our own", op.id));
        }
        Ok(())
    }

    fn collect(&mut self) {
        self.stats.gc_dropped += self.store.collect(&self.peers);
    }
}
