//! The baselines Creek is measured against (DESIGN §10; Creek paper §6):
//! SMR, Bayou and Archie, sans-IO like Creek's node and built from the same
//! parts — gossip (`creek-gossip`) disseminates op payloads, the consensus
//! library (`creek-cab` on raft-rs) orders their ids (the paper's
//! competitors also use atomic broadcast on indirect consensus, §6.1), and
//! the executors of `creek-exec` run them.
//!
//! Every op of a baseline, weak or strong, is totally ordered by consensus:
//!
//! * **SMR**: an op enters the executor only when consensus delivers it,
//!   and executes sequentially (the undo-log engine runs one op at a time);
//!   one response, after that execution.
//! * **Bayou**: an op enters the executor when it arrives (invocation or
//!   gossip), at its timestamp; the undo-log engine executes the timestamp
//!   order sequentially, rolling back and redoing what follows an earlier
//!   arrival. The final order is the primary's (the consensus leader, so
//!   the primary survives crashes unlike original Bayou's): a delivered op
//!   moves to the committed prefix. Weak ops answer after their first
//!   execution, strong ops once committed.
//! * **Archie**: optimistic delivery is the leader's order, read from the
//!   consensus log before it commits (`Cab::undecided_log`): an op enters
//!   the multiversion executor there and executes speculatively and
//!   concurrently; final delivery commits it. One response, after final
//!   delivery and a valid execution at the final position. Speculation is
//!   bounded: an op starts only while fewer than `window` optimistically
//!   delivered, uncommitted ops precede it (Archie's bound on concurrently
//!   executed transactions).
//!
//! Delivery is FIFO per origin on top of consensus (a standard layer): ops
//! of one origin commit in their issue order, every replica deciding
//! identically from the decided sequence, so a client's session order holds
//! even when a weak op was answered before its predecessor committed
//! (Bayou) or a crash made its origin cast again.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use creek_cab::{Cab, CabConfig, MemCabStorage};
use creek_core::{
    Dvv, ExecKey, Hlc, InvokeError, Op, OpId, ReplicaId, Request, View, ViewKind, Views,
};
use creek_exec::basic::BasicEngine;
use creek_exec::mvcc::{MvccExecutor, Schedule};
use creek_exec::{Completion, Engine, Outcome, Settled, Task, TxnLimits};
use creek_gossip::{Gossip, GossipConfig};
use creek_procs::Registry;
use creek_wire::{Limits, PeerMessage};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::config::Protocol;
use crate::replica::{down_completion, ReplicaCounts, SimReplica};

/// A place in a baseline's order: the committed prefix, then pending ops by
/// a protocol-specific number (Bayou: timestamp; Archie: place in the
/// leader's log; 0: committed without ever being pending).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BPos {
    /// The n-th committed op.
    Committed(u64),
    /// A pending op.
    Pending(u64, OpId),
}

// One per baseline replica, built once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Exec {
    Basic(BasicEngine<ExecKey, BPos>),
    Mvcc(MvccExecutor<ExecKey, BPos>),
}

impl Exec {
    fn get(&self) -> &dyn Engine<ExecKey, BPos> {
        match self {
            Exec::Basic(e) => e,
            Exec::Mvcc(e) => e,
        }
    }

    fn get_mut(&mut self) -> &mut dyn Engine<ExecKey, BPos> {
        match self {
            Exec::Basic(e) => e,
            Exec::Mvcc(e) => e,
        }
    }
}

/// An op invoked here, until its final execution.
struct Own {
    strong: bool,
    views: Views,
    /// The first speculative result (for accuracy).
    first: Option<Outcome>,
    /// The tentative response sent (Bayou's weak ops).
    sent: Option<Outcome>,
}

/// What consensus waits for before proposing or accepting an id: its
/// payload here (or the op already committed).
fn holder<'a>(
    payloads: &'a FxHashMap<OpId, Arc<Op>>,
    committed: &'a FxHashSet<OpId>,
) -> impl Fn(OpId) -> bool + 'a {
    move |id| payloads.contains_key(&id) || committed.contains(&id)
}

/// Every this many ticks a replica casts again every op it holds that is
/// not committed, whatever its origin (an origin that crashed before its
/// cast reached the leader would otherwise leave it pending).
const ADOPTION_TICKS: u64 = 200;

/// One replica of a baseline protocol.
pub struct BaselineNode {
    protocol: Protocol,
    me: ReplicaId,
    registry: Arc<Registry>,
    hlc: Hlc,
    next_seq: u64,
    gossip: Gossip,
    cab: Cab<MemCabStorage>,
    cab_config: CabConfig,
    storage: MemCabStorage,
    limits: Limits,
    up: bool,
    /// CAB's restart point, kept at a crash.
    applied: u64,
    exec: Exec,
    window: usize,
    /// Payloads held and not yet committed.
    payloads: FxHashMap<OpId, Arc<Op>>,
    committed: Vec<OpId>,
    committed_set: FxHashSet<OpId>,
    /// Per origin, the seq of its next op to commit.
    next_to_commit: FxHashMap<ReplicaId, u64>,
    /// Delivered ops waiting for their origin's previous op.
    held_back: BTreeSet<OpId>,
    /// Ids consensus decided and handed over, in decision order, waiting
    /// for their payloads (volatile: a restarted CAB hands them again).
    decided: VecDeque<OpId>,
    /// Uncommitted ops in the executor, and where.
    placed: FxHashMap<OpId, BPos>,
    /// Archie: the positions of optimistically delivered, uncommitted ops.
    optimistic: BTreeSet<BPos>,
    log_mark: (u64, u64, u64),
    own: FxHashMap<OpId, Own>,
    finalized: u64,
    accuracy_checked: u64,
    accuracy_hits: u64,
    outbox: Vec<(ReplicaId, PeerMessage)>,
    views: Vec<View>,
    /// Ticks since the last adoption sweep.
    ticks: u64,
}

impl BaselineNode {
    /// Replica `me` of `protocol` (not Creek) with the group's gossip and
    /// consensus settings, starting from `initial` (a bulk load; empty for
    /// none). `window` bounds Archie's speculation.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        protocol: Protocol,
        me: ReplicaId,
        gossip: GossipConfig,
        cab_config: CabConfig,
        storage: MemCabStorage,
        registry: Arc<Registry>,
        initial: Vec<(Bytes, Bytes)>,
        window: usize,
        schedule: Schedule,
    ) -> Result<Self, String> {
        let exec = match protocol {
            Protocol::Archie => {
                let mut e = MvccExecutor::new(registry.clone(), TxnLimits::default());
                e.set_schedule(schedule);
                e.load_committed(initial, None);
                Exec::Mvcc(e)
            }
            Protocol::Smr | Protocol::Bayou => {
                let mut e = BasicEngine::new(registry.clone(), TxnLimits::default());
                e.load_committed(initial);
                Exec::Basic(e)
            }
            Protocol::Creek => return Err("Creek runs creek_node::Node, not a baseline".into()),
        };
        Ok(BaselineNode {
            protocol,
            me,
            registry,
            hlc: Hlc::default(),
            next_seq: 0,
            gossip: Gossip::new(gossip).map_err(|e| e.to_string())?,
            cab: Cab::new(cab_config.clone(), storage.clone(), 0).map_err(|e| e.to_string())?,
            cab_config,
            storage,
            limits: Limits::default(),
            up: true,
            applied: 0,
            exec,
            window,
            payloads: FxHashMap::default(),
            committed: Vec::new(),
            committed_set: FxHashSet::default(),
            next_to_commit: FxHashMap::default(),
            held_back: BTreeSet::new(),
            decided: VecDeque::new(),
            placed: FxHashMap::default(),
            optimistic: BTreeSet::new(),
            log_mark: (0, 0, 0),
            own: FxHashMap::default(),
            finalized: 0,
            accuracy_checked: 0,
            accuracy_hits: 0,
            outbox: Vec::new(),
            views: Vec::new(),
            ticks: 0,
        })
    }

    /// Whether the payload of `id` is here (or it is committed).
    fn holds(&self, id: OpId) -> bool {
        holder(&self.payloads, &self.committed_set)(id)
    }

    /// A payload arrived (invocation or gossip); Bayou places it in its
    /// timestamp order at once.
    fn accept(&mut self, op: Arc<Op>) {
        if self.holds(op.id) {
            return;
        }
        self.hlc.observe(op.timestamp);
        if self.protocol == Protocol::Bayou {
            self.place(op.id, BPos::Pending(op.timestamp.0, op.id), &op);
        }
        self.payloads.insert(op.id, op);
    }

    fn place(&mut self, id: OpId, pos: BPos, op: &Op) {
        let key = ExecKey::Op(id);
        match self.placed.insert(id, pos) {
            None => self.exec.get_mut().insert(key, pos, op.call.clone()),
            Some(old) => {
                self.optimistic.remove(&old);
                self.exec.get_mut().reposition(key, pos);
            }
        }
        if self.protocol == Protocol::Archie {
            self.optimistic.insert(pos);
        }
    }

    /// Final delivery of `id` by consensus, FIFO per origin.
    fn deliver(&mut self, id: OpId) {
        if self.committed_set.contains(&id) || !self.held_back.insert(id) {
            return;
        }
        let mut next = *self.next_to_commit.get(&id.origin).unwrap_or(&1);
        while self.held_back.remove(&OpId::new(id.origin, next)) {
            self.commit(OpId::new(id.origin, next));
            next += 1;
        }
        self.next_to_commit.insert(id.origin, next);
    }

    /// Append `id` to the committed order and move it there in the executor.
    fn commit(&mut self, id: OpId) {
        let Some(op) = self.payloads.remove(&id) else {
            debug_assert!(false, "{id} delivered without its payload");
            return;
        };
        let n = self.committed.len() as u64;
        self.committed.push(id);
        self.committed_set.insert(id);
        let key = ExecKey::Op(id);
        let engine = self.exec.get_mut();
        match self.placed.remove(&id) {
            Some(pos) => {
                self.optimistic.remove(&pos);
            }
            None => engine.insert(key, BPos::Pending(0, id), op.call.clone()),
        }
        engine.commit(key, BPos::Committed(n));
        self.gossip.committed([id]);
    }

    /// Archie's optimistic delivery: every uncommitted op of the leader's
    /// log takes its place there (its first occurrence), if its log place
    /// changed since the last look.
    fn deliver_optimistically(&mut self) {
        let mark = self.cab.log_mark();
        if mark == self.log_mark {
            return;
        }
        self.log_mark = mark;
        let mut seen = FxHashSet::default();
        for (index, k, id) in self.cab.undecided_log() {
            if !seen.insert(id) || self.committed_set.contains(&id) || self.held_back.contains(&id)
            {
                continue;
            }
            let pos = BPos::Pending((index << 20) | (k as u64 & 0xF_FFFF), id);
            if self.placed.get(&id) == Some(&pos) {
                continue;
            }
            if let Some(op) = self.payloads.get(&id).cloned() {
                self.place(id, pos, &op);
            }
        }
    }

    /// One turn: gossip's output (deliveries, messages), then consensus's
    /// (messages, decided ids, delivered in decision order once their
    /// payloads are here); then settled executions become views.
    fn turn(&mut self) {
        self.take_gossip_output();
        let ready = {
            let holds = holder(&self.payloads, &self.committed_set);
            self.cab.ready(&holds)
        };
        self.outbox.extend(
            ready
                .early
                .into_iter()
                .chain(ready.messages)
                .map(|(to, m)| (to, PeerMessage::Cab(m))),
        );
        self.decided.extend(ready.decided);
        while let Some(&id) = self.decided.front() {
            if !self.holds(id) {
                break;
            }
            self.decided.pop_front();
            self.deliver(id);
        }
        self.cab.advance(self.decided.len());
        if self.protocol == Protocol::Archie {
            self.deliver_optimistically();
        }
        self.pull_missing();
        self.settle();
    }

    /// Ask gossip for the payloads consensus waits on.
    fn pull_missing(&mut self) {
        let wanted = {
            let holds = holder(&self.payloads, &self.committed_set);
            self.cab.waiting_for(&holds, &holds)
        };
        if !wanted.is_empty() {
            self.gossip.pull(&wanted);
        }
        self.take_gossip_output();
    }

    /// Gossip's output: payloads delivered, messages to send.
    fn take_gossip_output(&mut self) {
        let out = self.gossip.take_output();
        for op in out.delivered {
            self.accept(op);
        }
        self.outbox.extend(
            out.messages
                .into_iter()
                .map(|(to, m)| (to, PeerMessage::Gossip(m))),
        );
    }

    /// Settled executions: finalized counts, accuracy, and the responses.
    fn settle(&mut self) {
        // Archie answers after final delivery: early results are dropped
        // (drained, or the engine would keep them).
        self.exec.get_mut().drain_installed(&mut Vec::new());
        let mut settled = Vec::new();
        self.exec.get_mut().drain_settled(&mut settled);
        for Settled {
            key,
            outcome,
            committed,
            executions,
        } in settled
        {
            let ExecKey::Op(id) = key else { continue };
            if committed {
                self.finalized += 1;
            }
            if !committed {
                let Some(own) = self.own.get_mut(&id) else {
                    continue;
                };
                if own.first.is_none() {
                    own.first = Some(outcome.clone());
                }
                let answers_now = self.protocol == Protocol::Bayou && !own.strong;
                if answers_now && own.views.tentative && own.sent.is_none() {
                    own.sent = Some(outcome.clone());
                    self.views.push(View {
                        handle: key,
                        kind: ViewKind::Tentative,
                        outcome,
                        across_shards: false,
                        executions,
                        time: 0,
                    });
                }
                continue;
            }
            let Some(own) = self.own.remove(&id) else {
                continue;
            };
            if let Some(first) = &own.first {
                self.accuracy_checked += 1;
                self.accuracy_hits += u64::from(*first == outcome);
            }
            // Bayou's weak op answered already, wanting no final view.
            if own.sent.is_some() && !own.views.final_view {
                continue;
            }
            let kind = if own.sent.as_ref() == Some(&outcome) {
                ViewKind::Confirmation
            } else {
                ViewKind::Stable
            };
            self.views.push(View {
                handle: key,
                kind,
                outcome,
                across_shards: false,
                executions,
                time: 0,
            });
        }
    }

    /// Cast every uncommitted op held here (own ones first, in issue order).
    fn cast_uncommitted(&mut self, own_only: bool) {
        let mut ids: Vec<OpId> = self
            .payloads
            .keys()
            .copied()
            .filter(|id| !own_only || id.origin == self.me)
            .filter(|id| !self.held_back.contains(id))
            .collect();
        ids.sort_unstable();
        for id in ids {
            self.cab.cast(id);
        }
    }
}

impl SimReplica for BaselineNode {
    fn invoke(&mut self, request: Request, now_us: u64) -> Result<ExecKey, InvokeError> {
        self.registry.check(&request.call, &TxnLimits::default())?;
        if !request.views.tentative && !request.views.final_view {
            return Err(InvokeError::NoView);
        }
        self.next_seq += 1;
        let id = OpId::new(self.me, self.next_seq);
        // Consensus orders every op of a baseline: a strong op needs no
        // context (the wire still wants one on strong ops: empty).
        let op = Arc::new(Op::new(
            id,
            self.hlc.now(now_us),
            request.call,
            request.strong,
            request.strong.then(Dvv::default),
        ));
        self.own.insert(
            id,
            Own {
                strong: request.strong,
                views: request.views,
                first: None,
                sent: None,
            },
        );
        self.accept(op.clone());
        self.gossip.broadcast(op);
        self.cab.cast(id);
        self.turn();
        Ok(ExecKey::Op(id))
    }

    fn on_frame(&mut self, from: ReplicaId, frame: &Bytes) {
        let Ok(msg) = creek_wire::decode_bytes(frame, &self.limits) else {
            return;
        };
        match msg {
            PeerMessage::Gossip(m) => self.gossip.on_message(from, m),
            PeerMessage::Cab(m) => {
                let holds = holder(&self.payloads, &self.committed_set);
                self.cab.on_message(from, m, &holds);
            }
            // The baselines keep the configured consensus timing and a
            // fixed membership.
            PeerMessage::Probe(_)
            | PeerMessage::Hello(_)
            | PeerMessage::Snapshot(_)
            | PeerMessage::Stable(_) => {}
        }
        self.turn();
    }

    fn tick(&mut self, _now_us: u64) {
        self.gossip.tick();
        self.cab.tick();
        self.ticks += 1;
        if self.ticks >= ADOPTION_TICKS {
            self.ticks = 0;
            self.cast_uncommitted(false);
        }
        self.turn();
    }

    fn next_execution(&mut self) -> Option<Task<ExecKey>> {
        if !self.up {
            return None;
        }
        match &mut self.exec {
            Exec::Mvcc(e) => {
                let pos = e.next_runnable()?;
                if matches!(pos, BPos::Pending(..))
                    && self.optimistic.range(..pos).take(self.window).count() >= self.window
                {
                    return None;
                }
                e.next_task()
            }
            Exec::Basic(e) => e.next_task(),
        }
    }

    fn run(&self, task: &Task<ExecKey>) -> Completion<ExecKey> {
        if !self.up {
            return down_completion(task);
        }
        self.exec.get().run(task)
    }

    fn complete(&mut self, done: Completion<ExecKey>) {
        self.exec.get_mut().complete(done);
        self.settle();
    }

    fn take_views(&mut self) -> Vec<View> {
        std::mem::take(&mut self.views)
    }

    fn take_outbox(&mut self) -> Vec<(ReplicaId, PeerMessage)> {
        std::mem::take(&mut self.outbox)
    }

    fn committed(&self) -> &[OpId] {
        &self.committed
    }

    fn finalized(&self) -> u64 {
        self.finalized
    }

    fn pending_len(&self) -> usize {
        self.payloads.len()
    }

    fn quiet(&self) -> bool {
        self.up
            && self.payloads.is_empty()
            && self.held_back.is_empty()
            && self.finalized == self.committed.len() as u64
    }

    fn committed_state(&self) -> BTreeMap<Bytes, Bytes> {
        self.exec.get().committed_state()
    }

    fn counts(&self) -> ReplicaCounts {
        let e = self.exec.get().counters();
        ReplicaCounts {
            executions: e.executions,
            ops: e.ops,
            accuracy_checked: self.accuracy_checked,
            accuracy_hits: self.accuracy_hits,
            conflicts: e.conflicts,
            invalidations: e.invalidations,
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        if self.committed_set.len() != self.committed.len() {
            return Err("an op is committed twice".into());
        }
        if self.finalized > self.committed.len() as u64 {
            return Err("more final executions than committed ops".into());
        }
        if let Some(id) = self
            .placed
            .keys()
            .find(|id| self.committed_set.contains(id))
        {
            return Err(format!("{id} is committed and still pending"));
        }
        if let Some(id) = self
            .held_back
            .iter()
            .find(|id| !self.payloads.contains_key(id))
        {
            return Err(format!("{id} is held back without its payload"));
        }
        match &self.exec {
            Exec::Mvcc(e) => e.check_invariants(),
            Exec::Basic(_) => Ok(()),
        }
    }

    fn is_up(&self) -> bool {
        self.up
    }

    /// Executions in flight, unsent messages and views, and the consensus
    /// node's volatile state are lost; the rest is what a durable driver
    /// keeps (payloads, orders, executor state, gossip state, the log).
    fn crash(&mut self, _torn: &mut dyn FnMut(usize) -> usize) {
        if !self.up {
            return;
        }
        self.up = false;
        self.applied = self.cab.delivered_through();
        self.exec.get_mut().abandon_running();
        self.outbox.clear();
        self.views.clear();
    }

    fn restart(&mut self) -> Result<(), String> {
        if self.up {
            return Ok(());
        }
        self.cab = Cab::new(self.cab_config.clone(), self.storage.clone(), self.applied)
            .map_err(|e| e.to_string())?;
        self.decided.clear();
        self.up = true;
        self.log_mark = (0, 0, 0);
        // What this replica cast was volatile: cast its own ops again.
        self.cast_uncommitted(true);
        self.turn();
        Ok(())
    }
}
