//! The Creek replica: Algorithm 1 of the paper, with the high-performance
//! execution of §4.4 behind the [`Engine`] seam.
//!
//! Inputs are [`Replica::invoke`], [`Replica::rb_deliver`],
//! [`Replica::cab_deliver`] and [`Replica::tick`]; executions are pulled with
//! [`Replica::next_execution`], run with [`Replica::run`] and handed back with
//! [`Replica::complete`]. Outputs accumulate as [`Effect`]s, taken with
//! [`Replica::take_effects`]. Nothing here reads a clock, touches a socket
//! or starts a thread. A replica can be checkpointed at a clean point and
//! restored from a checkpoint plus its op payloads ([`Replica::checkpoint`],
//! [`Replica::restore`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use creek_exec::mvcc::MvccExecutor;
use creek_exec::{Completion, Engine, ExecCounters, Outcome, ProcCall, Settled, Task};
use creek_procs::builtins::NOOP;
use creek_procs::void;
use creek_procs::{CallError, Registry};
use creek_types::planted::Bug;
use creek_types::ClientRequestId;
use rustc_hash::FxHashMap;

use crate::config::{Config, ConfigError};
use crate::dvv::Dvv;
use crate::hlc::Hlc;
use crate::id::{OpId, ReplicaId, Timestamp};
use crate::op::{Change, Effect, ExecKey, Op, Pos, Request, Views};

mod errors;
mod leases;
mod mpo;
mod restore;
mod sessions;
mod skeen;
mod snapshot;
mod state;
mod tentative;
mod user_calls;
mod views;

pub use errors::InvokeError;
pub use leases::LeaseStats;
pub use sessions::SessionStats;
pub use snapshot::{SnapshotHistory, READ_TIME_AHEAD_MAX_US, SNAPSHOT_PARKED_MAX};
pub use user_calls::USER_PROCS_LIST_MAX;

/// Protocol counters of one replica.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Weak ops invoked here (local reads included).
    pub invoked_weak: u64,
    /// Strong ops invoked here (stabilizer no-ops excluded).
    pub invoked_strong: u64,
    /// Weak read-only ops answered without broadcast.
    pub local_reads: u64,
    /// Remote ops RB-delivered.
    pub rb_delivered: u64,
    /// Duplicate RB or CAB deliveries ignored.
    pub duplicates: u64,
    /// Strong ids CAB-delivered (committed).
    pub cab_delivered: u64,
    /// Ops moved to the committed list (after a restore, counting the
    /// checkpoint's).
    pub committed: u64,
    /// Strong no-ops issued by the stabilizer.
    pub stabilizer_noops: u64,
    /// Views sent.
    pub views: u64,
    /// Committed ops whose final execution is known (a prefix of the
    /// committed list; `committed_state` reflects exactly these). Counted
    /// like `Replica::committed_len`, the checkpoint's ops included.
    pub finalized: u64,
    /// Ops invoked here whose first tentative view was checked against their
    /// final result.
    pub accuracy_checked: u64,
    /// Of those, how many were equal.
    pub accuracy_hits: u64,
    /// Ops voided by a committed void op (see [`creek_procs::void`]): held
    /// here and dropped, or never held.
    pub voided: u64,
    /// Snapshot reads invoked here (docs/snapshot-reads.md).
    pub snapshot_reads: u64,
    /// Times this replica dropped every kept version at once because they
    /// passed [`crate::SnapshotHistory::versions_max_bytes`].
    pub snapshot_history_cuts: u64,
}

/// What the origin remembers of an op until its final result
/// (Algorithm 1's `reqsAwaitingResp`).
#[derive(Debug)]
struct Awaiting {
    strong: bool,
    views: Views,
    /// Whether a client waits (stabilizer no-ops have none).
    client: bool,
    first_tentative: Option<Outcome>,
    last_sent: Option<Outcome>,
}

/// One Creek replica. `E` is the execution engine: the multiversion executor
/// in production, the basic undo-log engine as a test oracle.
pub struct Replica<E = MvccExecutor<ExecKey, Pos>> {
    config: Config,
    registry: Arc<Registry>,
    hlc: Hlc,
    /// Algorithm 1's `currEventNo`.
    curr_event_no: u64,
    next_local: u64,
    /// The committed list after the first `committed_base` ops (ids;
    /// payloads leave once final).
    committed: Vec<OpId>,
    /// The client request id of each op in `committed`, if its call
    /// carried one: which client request sits where in the order, for
    /// tools that check the order against what clients saw.
    committed_requests: Vec<Option<ClientRequestId>>,
    /// Committed ops before `committed`: those of the checkpoint this
    /// replica was restored from (0 otherwise).
    committed_base: u64,
    /// The tentative list, sorted by `(timestamp, id)`.
    tentative: tentative::Tentative,
    /// Known ops that are not yet final.
    ops: FxHashMap<OpId, Arc<Op>>,
    /// Algorithm 1's `causalCtx`: RB-delivered weak ids and CAB-delivered
    /// strong ids.
    causal_ctx: Dvv,
    /// Every id whose payload this replica has held: `causal_ctx` plus the
    /// strong ops RB-delivered but not yet CAB-delivered. Kept so that
    /// `holds_payloads` is a subset test instead of a walk over a strong
    /// op's whole context (a partition piles up strong ops whose contexts
    /// name each other, and CAB asks about every pending one on each step).
    delivered: Dvv,
    awaiting: FxHashMap<ExecKey, Awaiting>,
    /// Ids decided by CAB, waiting for `check_dep` (conditional delivery).
    decided: VecDeque<OpId>,
    /// Weak ops in arrival order with the clock at arrival, for the
    /// stabilizer; entries of ops no longer tentative are skipped lazily.
    /// RB delivery carries no clock, so a remote op's arrival is stamped at
    /// the next tick (`None` until then): the delay is never cut short.
    weak_arrivals: VecDeque<(Option<u64>, OpId)>,
    /// This replica's own strong ops not yet committed, in tentative order
    /// (stabilizer no-ops included): what a new strong op of this replica
    /// must commit with it (see `invoke_op`); the stabilizer waits while
    /// any is in flight.
    own_strong_tentative: BTreeSet<(Timestamp, OpId)>,
    now_us: u64,
    /// Own ops up to this seq are taken from peers like remote ones: this
    /// replica was rebuilt from a peer's checkpoint after it lost its data,
    /// and those it issued before come back from whoever kept them.
    reclaim_upto: u64,
    engine: E,
    effects: Vec<Effect>,
    settled: Vec<Settled<ExecKey>>,
    counters: Counters,
    sessions: sessions::Sessions,
    leases: leases::Leases,
    /// Changes recorded for the driver ([`Replica::record_changes`]).
    changes: Vec<Change>,
    /// Whether committed, and tentative, changes are recorded.
    recording: (bool, bool),
    /// Operations across shards: their turns, read exchange and
    /// confirmations (`mpo.rs`).
    mpos: mpo::Mpos,
    /// Commit times and snapshot reads (`snapshot.rs`).
    snapshots: snapshot::Snapshots,
}

impl Replica {
    /// A replica with the multiversion executor.
    pub fn new(config: Config, registry: Arc<Registry>) -> Result<Self, ConfigError> {
        let engine = Self::executor(&config, &registry);
        Self::with_engine(config, registry, engine)
    }

    /// The multiversion executor `config` asks for.
    fn executor(config: &Config, registry: &Arc<Registry>) -> MvccExecutor<ExecKey, Pos> {
        let mut engine = MvccExecutor::new(registry.clone(), config.txn_limits);
        engine.planted = config.planted;
        engine.set_schedule(config.schedule);
        engine.keep_versions(creek_procs::versions::meta_key, Pos::revision);
        engine
    }
}

impl<E: Engine<ExecKey, Pos>> Replica<E> {
    /// A replica with the given engine.
    pub fn with_engine(
        config: Config,
        registry: Arc<Registry>,
        engine: E,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let revisions_kept = config.revisions_kept;
        let mut replica = Replica {
            config,
            registry,
            hlc: Hlc::new(),
            curr_event_no: 0,
            next_local: 0,
            committed: Vec::new(),
            committed_requests: Vec::new(),
            committed_base: 0,
            tentative: tentative::Tentative::default(),
            ops: FxHashMap::default(),
            causal_ctx: Dvv::new(),
            delivered: Dvv::new(),
            awaiting: FxHashMap::default(),
            decided: VecDeque::new(),
            weak_arrivals: VecDeque::new(),
            own_strong_tentative: BTreeSet::new(),
            now_us: 0,
            reclaim_upto: 0,
            engine,
            effects: Vec::new(),
            settled: Vec::new(),
            counters: Counters::default(),
            sessions: sessions::Sessions::default(),
            leases: leases::Leases::default(),
            changes: Vec::new(),
            recording: (false, false),
            mpos: mpo::Mpos::default(),
            snapshots: snapshot::Snapshots::default(),
        };
        if revisions_kept > 0 {
            replica.keep_revisions(revisions_kept);
        }
        Ok(replica)
    }

    /// This replica's id.
    pub fn id(&self) -> ReplicaId {
        self.config.id
    }

    /// Forget the committed ids at global positions before `len` (at most
    /// the finalized ones): a checkpoint covers them, and the list would
    /// otherwise grow by one id per op for as long as the replica runs.
    /// [`Replica::committed`] then lists from the new base on;
    /// [`Replica::committed_len`] is unchanged.
    pub fn trim_committed(&mut self, len: u64) {
        let upto = len.min(self.counters.finalized);
        let n = upto.saturating_sub(self.committed_base);
        let n = usize::try_from(n).map_or(self.committed.len(), |n| n.min(self.committed.len()));
        self.committed.drain(..n);
        self.committed_requests.drain(..n);
        self.snapshots.trim(n, self.committed_base);
        self.committed_base += n as u64;
    }

    /// Own ops up to `upto` may be held by peers and not here (this replica
    /// was rebuilt after it lost its data, or restarted after a crash took
    /// back ops it had sent): it resumes its own seqs past `upto`, and its
    /// own ops up to `upto` that come back by gossip are taken like remote
    /// ones.
    pub fn reclaim_own(&mut self, upto: u64) {
        self.reclaim_upto = self.reclaim_upto.max(upto);
        self.curr_event_no = self.curr_event_no.max(upto);
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The procedures it runs.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The seq of the last op this replica issued (its event counter). A
    /// recovered replica resumes past every seq a peer may have seen (see
    /// [`Replica::reclaim_own`]); ids above it that it had issued before
    /// were lost with writes that never became durable, and no peer saw
    /// them, so they are issued again.
    pub fn last_issued_seq(&self) -> u64 {
        self.curr_event_no
    }

    /// Algorithm 1, `invoke` (lines 15–25). `now_us` is the driver's clock.
    /// Returns the handle its views will carry.
    pub fn invoke(&mut self, mut request: Request, now_us: u64) -> Result<ExecKey, InvokeError> {
        if let Some(revision) = request.read_revision {
            // A read at a revision is a snapshot read at exactly its time.
            if request.views != crate::op::Views::SNAPSHOT {
                return Err(InvokeError::RevisionLevels);
            }
            request.read_time = self.revision_time(revision)?;
            request.read_exact = true;
        }
        // A name that is no built-in may be a user procedure; those are
        // always broadcast (see `user_calls`).
        let (read_only, local_ok) = match self.registry.get(&request.call.name) {
            Some(_) => (
                self.registry
                    .check(&request.call, &self.config.txn_limits)?
                    .read_only,
                true,
            ),
            None => (self.check_user_call(&request.call, request.strong)?, false),
        };
        if request.views.is_empty() {
            return Err(InvokeError::NoView);
        }
        if request.views.snapshot {
            if !read_only {
                return Err(InvokeError::SnapshotWrites(request.call.name.to_string()));
            }
            // The clock as this replica's HLC knows it: peers' clocks ahead
            // of its own (a server's clock counts from its start) count.
            let now = now_us.max(self.now_us).max(self.hlc.last().physical_us());
            if request.read_time > now.saturating_add(READ_TIME_AHEAD_MAX_US) {
                return Err(InvokeError::ReadTimeAhead {
                    read_time: request.read_time,
                    now,
                });
            }
            let parked = self.snapshot_reads_parked();
            if request.read_time > self.applied_time() && parked >= SNAPSHOT_PARKED_MAX {
                return Err(InvokeError::SnapshotBehind(parked));
            }
            self.snapshot_refused(request.read_time, request.read_exact, now)?;
        }
        if request.call.name.as_ref() == creek_procs::mpo::RUN && !request.strong {
            return Err(InvokeError::Call(CallError::MalformedArgs {
                name: creek_procs::mpo::RUN.to_owned(),
                reason: "an operation across shards is strong only".to_owned(),
            }));
        }
        if self.tentative.len() >= self.config.tentative_len_max {
            return Err(InvokeError::Overloaded(self.tentative.len()));
        }
        self.now_us = self.now_us.max(now_us);
        if request.strong {
            self.counters.invoked_strong += 1;
        } else {
            self.counters.invoked_weak += 1;
        }
        let mut call = request.call;
        self.sessions.route_acks(&mut call, read_only);
        // Calls that read the clock (a lease's time to live) see this
        // replica's; an op's own time replaces it where the op is made.
        call.time_us = now_us.max(self.hlc.last().physical_us());
        // An op invoked here is stamped after everything its client saw.
        self.hlc
            .observe(Timestamp::new(request.read_time, Timestamp::MAX_LOGICAL));
        let views = request.views;
        let snapshot_call = views.snapshot.then(|| call.clone());
        let key = if !views.tentative && !views.final_view {
            // A snapshot read alone: never broadcast nor executed by the
            // engine.
            self.next_local += 1;
            ExecKey::Local(self.next_local)
        } else if !request.strong && read_only && local_ok && !views.final_view {
            self.invoke_local_read(call, now_us)
        } else {
            self.invoke_op(call, request.strong, views, true, now_us)
        };
        if let Some(call) = snapshot_call {
            let after_tentative = views.tentative
                && self
                    .awaiting
                    .get(&key)
                    .is_some_and(|a| a.last_sent.is_none());
            let read = (request.read_time, request.read_exact);
            self.snapshot_invoked(key, call, read, after_tentative);
        }
        Ok(key)
    }

    /// A weak read-only op: executed at the end of the current order and
    /// answered, never broadcast nor committed (paper §4.4).
    fn invoke_local_read(&mut self, call: ProcCall, now_us: u64) -> ExecKey {
        self.counters.local_reads += 1;
        self.next_local += 1;
        let key = ExecKey::Local(self.next_local);
        let ts = self.hlc.now(now_us);
        self.engine.insert(key, Pos::Tentative(ts, key), call);
        self.awaiting.insert(
            key,
            Awaiting {
                strong: false,
                views: Views::WEAK,
                client: true,
                first_tentative: None,
                last_sent: None,
            },
        );
        self.process_settled();
        key
    }

    fn invoke_op(
        &mut self,
        call: ProcCall,
        strong: bool,
        views: Views,
        client: bool,
        now_us: u64,
    ) -> ExecKey {
        self.curr_event_no += 1;
        let id = OpId {
            origin: self.config.id,
            seq: self.curr_event_no,
        };
        let timestamp = self.hlc.now(now_us);
        let causal_context = if strong {
            // Line 19: known ids minus the tentative ops ordered after this one.
            let mut ctx = self.causal_ctx.clone();
            for (_, later) in self.tentative.range((timestamp, id)..) {
                ctx.remove(*later);
            }
            // Beyond the paper: this replica's own earlier strong ops that
            // are not committed yet. CAB orders strong ids in whatever order
            // their casts reach the leader (a lost forward, a re-cast after
            // a restart), so without this a later strong op of this replica
            // could commit before an earlier one. `commit` moves them along
            // with this op, in their tentative order, like the weak ops of
            // the context: the later op never waits for the earlier one's
            // own CAB decision (which may come after it in the log), and the
            // earlier one's own delivery, if later, is a duplicate.
            for (_, earlier) in self.own_strong_tentative.range(..(timestamp, id)) {
                ctx.insert(*earlier);
            }
            // An MPO commits at its turn in the directory's sequence
            // (`mpo.rs`): a later op of this replica must not carry it
            // along before then.
            // Nor a stamp (`skeen.rs`): the ordering reads it where its own
            // decision comes.
            if ![creek_procs::mpo::RUN, creek_procs::mpo::STAMP].contains(&call.name.as_ref()) {
                self.own_strong_tentative.insert((timestamp, id));
            }
            if self.config.planted.has(Bug::IgnoreCausalContext) {
                ctx = Dvv::new();
            }
            Some(ctx)
        } else {
            self.causal_ctx.insert(id); // line 22
            None
        };
        // An MPO's id is its origin op's (`mpo.rs`).
        let mpo_id = creek_procs::mpo::MpoId {
            origin: u64::from(id.origin.0),
            seq: id.seq,
        };
        let call = creek_procs::mpo::MpoCall::name_origin(call, mpo_id);
        let op = Arc::new(Op::new(id, timestamp, call, strong, causal_context));
        self.effects.push(Effect::RbCast(op.clone())); // line 23
        if strong && self.may_cast(&op) {
            // Line 20, after the payload's RB-cast (the turn sends payloads
            // first either way). An MPO's copy is cast once the directory
            // sequenced it (`mpo.rs`).
            self.effects.push(Effect::CabCast(id)); // line 20
        }
        self.awaiting.insert(
            ExecKey::Op(id),
            Awaiting {
                strong,
                views,
                client,
                first_tentative: None,
                last_sent: None,
            },
        ); // line 25
        self.adjust_tentative_order(op); // line 24
        if strong && self.config.planted.has(Bug::DeliverWithoutCab) {
            self.decided.push_back(id);
            self.deliver_decided();
        }
        self.process_settled();
        ExecKey::Op(id)
    }

    /// Algorithm 1, `RB-deliver` (lines 26–31). Duplicates and the replica's
    /// own ops are ignored. Returns whether the op was new here (a durable
    /// driver persists exactly those payloads).
    pub fn rb_deliver(&mut self, op: Arc<Op>) -> bool {
        if op.id.origin == self.config.id && op.id.seq > self.reclaim_upto {
            return false; // line 27: delivered locally at invoke
        }
        if self.ops.contains_key(&op.id) || self.causal_ctx.contains(op.id) {
            self.counters.duplicates += 1;
            return false;
        }
        self.counters.rb_delivered += 1;
        self.hlc.observe(op.timestamp);
        if !op.strong {
            self.causal_ctx.insert(op.id); // line 30
        }
        self.adjust_tentative_order(op); // line 31
        self.deliver_decided();
        self.process_settled();
        true
    }

    /// Algorithm 1, `adjustTentativeOrder` (lines 36–41): insert at the op's
    /// `(timestamp, id)` place; the engine's `adjustExecution` follows.
    fn adjust_tentative_order(&mut self, op: Arc<Op>) {
        let key = ExecKey::Op(op.id);
        self.delivered.insert(op.id);
        self.tentative.insert(op.order_key());
        if !op.strong {
            let stamp = (op.id.origin == self.config.id).then_some(self.now_us);
            self.weak_arrivals.push_back((stamp, op.id));
        }
        self.engine
            .insert(key, Pos::Tentative(op.timestamp, key), op.call.clone());
        self.mpo_arrived(&op);
        self.ops.insert(op.id, op);
    }

    /// Algorithm 1, `checkDep` (lines 10–14): the op is known here and so is
    /// its whole causal context — in the causal set, or, for the strong ops
    /// of the op's own origin that its context names (see `invoke_op`),
    /// held here: `commit` moves those along with it.
    pub fn check_dep(&self, id: OpId) -> bool {
        match self.ops.get(&id) {
            Some(op) => op.causal_context.as_ref().is_none_or(|ctx| {
                ctx.is_subset(&self.causal_ctx)
                    || ctx.difference_iter(&self.causal_ctx).all(|dep| {
                        dep.origin == id.origin && self.ops.get(&dep).is_some_and(|d| d.strong)
                    })
            }),
            // Final ops leave the table; a committed op satisfied its check.
            None => self.is_committed(id),
        }
    }

    /// The op and every op of its causal context have been RB-delivered here
    /// (strong context ops need not be committed yet). This is CAB's
    /// acceptance predicate — the "received" test of indirect consensus
    /// (paper §5): a replica that accepts an id can hand its payload and
    /// context to anyone, so a decided id is never lost. Delivery still waits
    /// for [`Replica::check_dep`].
    pub fn holds_payloads(&self, id: OpId) -> bool {
        match self.ops.get(&id) {
            Some(op) => op
                .causal_context
                .as_ref()
                .is_none_or(|ctx| ctx.is_subset(&self.delivered)),
            None => self.is_committed(id),
        }
    }

    /// The ids of `id`'s causal context whose payloads this replica has
    /// never held (what to fetch before it can commit), lazily: stop early
    /// on a context from an untrusted peer. Empty for an unknown op.
    pub fn missing_context(&self, id: OpId) -> impl Iterator<Item = OpId> + '_ {
        self.ops
            .get(&id)
            .and_then(|op| op.causal_context.as_ref())
            .into_iter()
            .flat_map(|ctx| ctx.difference_iter(&self.delivered))
    }

    /// Committed ids are in the causal set and off the tentative list (weak
    /// tentative ops are in the causal set too; final ops have left the table).
    fn is_committed(&self, id: OpId) -> bool {
        self.causal_ctx.contains(id)
            && !self
                .ops
                .get(&id)
                .is_some_and(|op| self.tentative.contains(&op.order_key()))
    }

    /// Algorithm 1, `CAB-deliver` (lines 32–35), for the next id CAB decided.
    /// Delivery is conditional: a decided id is committed once `check_dep`
    /// holds here, and decided ids commit strictly in decision order.
    /// Already committed ids are ignored.
    pub fn cab_deliver(&mut self, id: OpId) {
        if self.is_committed(id) || self.decided.contains(&id) {
            self.counters.duplicates += 1;
            return;
        }
        self.decided.push_back(id);
        self.skeen_decided(id);
        self.deliver_decided();
        self.process_settled();
    }

    fn deliver_decided(&mut self) {
        self.skeen_scan();
        loop {
            // An MPO at its turn, or parked earlier and its turn come,
            // goes first.
            let Some(id) = self.mpos.next_up().or(self.decided.front().copied()) else {
                return;
            };
            if !self.check_dep(id) {
                return;
            }
            let mut run = None;
            let mpo_op = self.ops.get(&id).filter(|op| mpo::is_mpo(op)).cloned();
            if let Some(op) = mpo_op {
                if !self.is_committed(id) {
                    match self.mpo_step(&op) {
                        mpo::Step::Wait => return,
                        mpo::Step::Park(index) => {
                            self.decided.pop_front();
                            self.mpos.park(index, id);
                            continue;
                        }
                        mpo::Step::Hold(mpo) => {
                            self.decided.pop_front();
                            self.mpos.hold(mpo, id);
                            continue;
                        }
                        mpo::Step::Go(call) => run = Some((op, call)),
                    }
                }
            }
            if !self.mpos.unpark(id) {
                self.decided.pop_front();
                self.skeen_release(id);
            }
            if self.is_committed(id) {
                // Committed meanwhile with a later strong op of its origin
                // whose context named it (`commit`).
                self.counters.duplicates += 1;
                continue;
            }
            let Some(op) = self.ops.get(&id).cloned() else {
                continue;
            };
            if !op.strong {
                // CAB carries strong ids only; a weak id is a driver bug.
                debug_assert!(false, "weak id {id} CAB-delivered");
                continue;
            }
            if let Some((op, call)) = run {
                self.mpo_commit(&op, call);
            }
            self.counters.cab_delivered += 1;
            self.causal_ctx.insert(id); // line 34
            self.commit(&op); // line 35
        }
    }

    /// Algorithm 1, `commit` (lines 48–57): the tentative ops in `r`'s causal
    /// context move, in their current relative order, to the end of the
    /// committed list, then `r` itself. Stable responses follow from the
    /// engine once the committed executions are settled (lines 55–56, 72–73).
    fn commit(&mut self, r: &Op) {
        self.commit_context(r);
        self.commit_entry(r.order_key());
        if r.call.name.as_ref() == void::VOID {
            self.void_ops(r);
        }
    }

    /// Lines 49–54 for `r`'s causal context: the tentative ops in it move,
    /// in their current relative order, to the end of the committed list.
    /// An MPO's copy does this at its turn, before it reads its keys
    /// (`mpo.rs`), so that what it reads is the state at its position.
    fn commit_context(&mut self, r: &Op) {
        let Some(ctx) = r.causal_context.as_ref() else {
            return;
        };
        let committed_ext = self.tentative.in_context(ctx, r.id); // line 49
        for entry in committed_ext {
            self.commit_entry(entry);
        }
    }

    /// Lines 50–54 for one tentative op.
    fn commit_entry(&mut self, entry: (Timestamp, OpId)) {
        let removed = self.tentative.remove(&entry); // line 50
        debug_assert!(removed, "committing {} which is not tentative", entry.1);
        let id = entry.1;
        let pos = Pos::Committed(self.committed_len());
        self.committed.push(id); // line 51
        let op = self.ops.get(&id);
        self.snapshots.commit(op.map(|op| &**op));
        self.committed_requests
            .push(op.and_then(|op| op.call.request_id));
        self.counters.committed += 1;
        if op.is_some_and(|op| op.strong) {
            // A strong op of r's origin committed with r: committed
            // strong ids are in the causal set, as after line 34.
            self.causal_ctx.insert(id);
            self.own_strong_tentative.remove(&entry);
        }
        self.engine.commit(ExecKey::Op(id), pos); // line 54
    }

    /// Ask the committed order to void this replica's own ops with `seqs`
    /// (issued before it lost its data, and taken back from no peer): a
    /// strong internal op, see [`creek_procs::void`]. At most
    /// [`void::VOID_BATCH_MAX`] per call.
    pub fn void_own(&mut self, seqs: &[u64], now_us: u64) {
        let seqs: Vec<u64> = seqs
            .iter()
            .copied()
            .filter(|s| *s <= self.reclaim_upto)
            .collect();
        if !seqs.is_empty() {
            let call = void::void_call(&seqs);
            self.invoke_op(call, true, Views::STRONG, false, now_us);
        }
    }

    /// The void op `r` committed: each op it lists (its origin's own, issued
    /// before it) that is not committed by now is void here, as at every
    /// replica at this place of the committed order. A held copy is dropped
    /// (its tentative execution with it); either way it joins the causal set
    /// and counts as held, so the contexts that name it are satisfied and a
    /// copy that arrives later is a duplicate.
    fn void_ops(&mut self, r: &Op) {
        let Ok(seqs) = void::void_seqs(&r.call.args) else {
            return; // refused at invoke; a peer's malformed op voids nothing
        };
        for seq in seqs.into_iter().filter(|s| *s < r.id.seq) {
            let id = OpId {
                origin: r.id.origin,
                seq,
            };
            if self.is_committed(id) {
                continue;
            }
            if let Some(op) = self.ops.remove(&id) {
                self.mpos.forget_copy(&op);
                self.tentative.remove(&op.order_key());
                self.own_strong_tentative.remove(&op.order_key());
                self.awaiting.remove(&ExecKey::Op(id));
                self.snapshot_before_final(ExecKey::Op(id));
                self.engine.remove(ExecKey::Op(id));
            }
            self.causal_ctx.insert(id);
            self.delivered.insert(id);
            self.counters.voided += 1;
            self.effects.push(Effect::Voided(id));
        }
    }

    /// Advance the driver's clock. Runs the stabilizer: when a weak op has
    /// waited longer than `stabilize_after_us` and no strong op of this
    /// replica is in flight, issue a strong no-op that commits every weak op
    /// this replica knows (paper §4.4).
    pub fn tick(&mut self, now_us: u64) {
        self.now_us = self.now_us.max(now_us);
        for (stamp, _) in self.weak_arrivals.iter_mut().rev() {
            if stamp.is_some() {
                break;
            }
            *stamp = Some(self.now_us);
        }
        let delay = self.config.stabilize_after_us;
        if delay == 0 || !self.own_strong_tentative.is_empty() {
            return;
        }
        while let Some(&(_, id)) = self.weak_arrivals.front() {
            if self
                .ops
                .get(&id)
                .is_some_and(|op| self.tentative.contains(&op.order_key()))
            {
                break;
            }
            self.weak_arrivals.pop_front();
        }
        let oldest = self.weak_arrivals.front().and_then(|(t, _)| *t);
        if oldest.is_some_and(|t| self.now_us.saturating_sub(t) >= delay) {
            self.invoke_noop(now_us);
        }
    }

    /// A strong no-op with no client: the stabilizer's, and an idle
    /// leader's clock no-op.
    fn invoke_noop(&mut self, now_us: u64) {
        self.counters.stabilizer_noops += 1;
        let call = ProcCall::new(NOOP, creek_types::value::encode_args(&[]));
        self.invoke_op(call, true, Views::STRONG, false, now_us);
    }

    /// As its group's leader, with stable times every `every_us`: commit a
    /// clock no-op if the last commit time is older than `now_us - every_us`
    /// and no strong op of this replica is in flight, so the commit times
    /// (and the stable times built on them) move while nothing is written
    /// (docs/snapshot-reads.md). Returns whether it issued one.
    pub fn clock_tick(&mut self, now_us: u64, every_us: u64) -> bool {
        self.now_us = self.now_us.max(now_us);
        let idle = self.last_commit_time().saturating_add(every_us) < now_us;
        if every_us == 0 || !idle || !self.own_strong_tentative.is_empty() {
            return false;
        }
        self.invoke_noop(now_us);
        true
    }

    /// The next execution to run, if any is ready. Call repeatedly to run
    /// several at once.
    pub fn next_execution(&mut self) -> Option<Task<ExecKey>> {
        self.engine.next_task()
    }

    /// Run a task against its snapshot. Takes `&self`: a driver may run many
    /// tasks concurrently under a shared borrow.
    pub fn run(&self, task: &Task<ExecKey>) -> Completion<ExecKey> {
        self.engine.run(task)
    }

    /// Hand a finished execution back: it is validated, installed (or rerun)
    /// and the views it settles are emitted.
    pub fn complete(&mut self, completion: Completion<ExecKey>) {
        self.engine.complete(completion);
        self.process_settled();
    }

    /// Run every ready execution to completion, one at a time. Convenience
    /// for drivers without a worker pool.
    pub fn execute_all(&mut self) {
        while let Some(task) = self.next_execution() {
            let done = self.run(&task);
            self.complete(done);
        }
    }

    /// Forget the executions handed out (a crash lost them); they run again.
    pub fn abandon_running(&mut self) {
        self.engine.abandon_running();
    }

    /// The committed list. After [`Replica::restore`] from a checkpoint,
    /// only the ops committed after it: the first element sits at global
    /// position `committed_len() - committed().len()`.
    pub fn committed(&self) -> &[OpId] {
        &self.committed
    }

    /// The client request id of each op of [`Replica::committed`], where
    /// its call carried one.
    pub fn committed_requests(&self) -> &[Option<ClientRequestId>] {
        &self.committed_requests
    }

    /// How many ops are committed in total, the ops of the checkpoint this
    /// replica was restored from included: the global position the next
    /// committed op gets.
    pub fn committed_len(&self) -> u64 {
        self.committed_base
            .saturating_add(self.committed.len() as u64)
    }

    /// How many of the ops this replica issued are still tentative (not
    /// committed, not voided).
    pub fn own_uncommitted(&self) -> usize {
        self.tentative.of_origin(self.id())
    }

    /// How many ops are on the tentative list.
    pub fn tentative_len(&self) -> usize {
        self.tentative.len()
    }

    /// The tentative list, in order.
    pub fn tentative(&self) -> Vec<OpId> {
        self.tentative.iter().map(|(_, id)| *id).collect()
    }

    /// Algorithm 1's `causalCtx`.
    pub fn causal_context(&self) -> &Dvv {
        &self.causal_ctx
    }

    /// Whether this replica has held `id`'s payload (RB-delivered, or
    /// committed before a checkpoint it restored), or `id` was voided.
    pub fn has_held(&self, id: OpId) -> bool {
        self.delivered.contains(id)
    }

    /// A known, not yet final op.
    pub fn op(&self, id: OpId) -> Option<&Arc<Op>> {
        self.ops.get(&id)
    }

    /// Ids CAB decided that wait for their causal context here.
    pub fn decided_waiting(&self) -> usize {
        self.decided.len()
    }

    /// Protocol counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Execution counters.
    pub fn exec_counters(&self) -> ExecCounters {
        self.engine.counters()
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// The state produced by the final executions of the committed list.
    pub fn committed_state(&self) -> BTreeMap<Bytes, Bytes> {
        self.engine.committed_state()
    }

    /// Whether nothing is left to do: no tentative op, no decided id waiting,
    /// no execution pending or running.
    pub fn is_quiescent(&self) -> bool {
        self.tentative.is_empty()
            && self.decided.is_empty()
            && self.mpos.is_idle()
            && self.engine.running() == 0
            && self.ops.is_empty()
    }

    /// Check the protocol invariants; `Err` says which one broke.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.tentative.check()?;
        for (_, id) in self.tentative.iter() {
            let op = self
                .ops
                .get(id)
                .ok_or_else(|| format!("tentative {id} has no payload"))?;
            // An op is never on both lists: a tentative strong op is not yet
            // in the causal set, which CAB-delivery alone adds it to.
            if op.strong && self.causal_ctx.contains(*id) {
                return Err(format!("strong {id} is tentative and committed"));
            }
            if !op.strong && !self.causal_ctx.contains(*id) {
                return Err(format!("weak {id} is tentative but not in the causal set"));
            }
        }
        for id in &self.committed {
            if !self.causal_ctx.contains(*id) {
                return Err(format!("committed {id} missing from the causal set"));
            }
        }
        // delivered = causal set ∪ ids of known ops.
        if !self.causal_ctx.is_subset(&self.delivered) {
            return Err("the causal set is not within the delivered set".into());
        }
        if let Some(id) = self.ops.keys().find(|id| !self.delivered.contains(**id)) {
            return Err(format!("{id} is known but not in the delivered set"));
        }
        if let Some(id) = self
            .delivered
            .difference_iter(&self.causal_ctx)
            .find(|id| !self.ops.contains_key(id))
        {
            return Err(format!(
                "{id} is delivered but neither known nor in the causal set"
            ));
        }
        self.check_snapshots()
    }
}
