//! Conditional atomic broadcast (CAB) of strong-op ids, built on the `raft`
//! crate (tikv/raft-rs), sans-IO.
//!
//! CAB orders strong-op ids only; payloads travel by gossip (paper §5,
//! indirect consensus). It evaluates two predicates of the replica: *holds*
//! (the op and the ops of its causal context have arrived here — indirect
//! consensus's "received") and *deps* (the paper's `check_dep`: additionally,
//! the context is in the causal set, i.e. its strong ops are delivered). The
//! library's log carries batches of ids ([`entry`]), and CAB adds three things
//! on top of it:
//!
//! * **No loss.** A leader proposes only ids it holds; a follower holds back
//!   an incoming append (it is not stepped into the library, exactly as if the
//!   network were slow) until it holds every id in it, and the caller pulls
//!   what is missing by gossip. So every log that contains an id — in
//!   particular every majority that decided it, and every future leader —
//!   holds its payload and causal context, and no undecided entry can wedge a
//!   new leader. (Acceptance cannot wait for *deps*: a lagging follower may
//!   receive a strong op together with the earlier strong ops of its context,
//!   which only their own delivery puts in the causal set.)
//! * **Conditional delivery.** Decided ids are delivered strictly in log
//!   order, each only once *deps* holds here; an id decided twice
//!   (re-proposed after a leader change) is delivered at its first place only,
//!   which every replica computes identically.
//! * **Casting from anywhere.** A non-leader forwards ids to the leader it
//!   knows; the caster re-forwards until the id is decided, so a lost forward
//!   or a leader change loses nothing.
//! * **Compaction without snapshots.** The leader tells every replica the
//!   *compaction point*: the last index every replica has acknowledged (its
//!   `matched` progress), so no replica can ever need an entry up to it from
//!   anyone. A replica compacts its log to at most that point and its own
//!   latest checkpoint ([`Cab::compact`]), and forgets the ids decided there.
//!   The log stays bounded while every replica keeps up; a replica that is
//!   down holds the point back (its peers keep what it will need).
//!
//! Time and randomness are pinned: every replica has a fixed election timeout
//! (the library draws from `[election_tick, election_tick + 1)`), and the
//! caller drives [`Cab::tick`]. A run is reproducible from its inputs.
#![deny(missing_docs)]

mod conf;
pub mod entry;
mod log_store;
pub mod storage;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use creek_core::{OpId, ReplicaId};
use creek_wire::CabMessage;
use protobuf::Message as _;
use raft::eraftpb::{EntryType, Message, MessageType};
use raft::{RawNode, StateRole};
use rustc_hash::{FxHashMap, FxHashSet};

pub use conf::{members_of, voters_of, ChangeRefused, ConfApplied, MemberChange, PROMOTE_LAG};
pub use log_store::{Conf, LogBase, LogStore, LogWrites};
/// The consensus library's configuration (voters and learners by raft id).
pub use raft::eraftpb::ConfState;
pub use storage::{CabStorage, MemCabStorage};

/// A predicate of the replica over ids (*holds* or *deps*, see the crate
/// documentation).
pub type Deps<'a> = &'a dyn Fn(OpId) -> bool;

/// Configuration of one CAB node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CabConfig {
    /// This replica.
    pub me: ReplicaId,
    /// The group's initial replicas, this one included (what a new log
    /// starts with; membership changes move on from there).
    pub replicas: Vec<ReplicaId>,
    /// This replica's election timeout in ticks (fixed: no randomness).
    pub election_tick: usize,
    /// Leader heartbeat interval in ticks.
    pub heartbeat_tick: usize,
    /// Most ids in one log entry.
    pub batch_ids_max: usize,
    /// A cast id not decided after this many ticks is forwarded again.
    pub forward_retry_ticks: u64,
    /// Most appends held back waiting for payloads; newer ones are dropped
    /// (the leader sends them again).
    pub held_appends_max: usize,
    /// Most append messages in flight to one follower.
    pub inflight_msgs_max: usize,
    /// The leader proposes a new entry only while fewer than this many
    /// entries are uncommitted; ids arriving meanwhile wait and go out as one
    /// batch. An idle leader proposes at once, so latency at low load is
    /// unchanged; under load, entries carry many ids.
    pub uncommitted_entries_max: u64,
    /// The leader's compaction point ignores followers that lag more than
    /// this many entries behind the commit index (down, or far behind): the
    /// log is compacted past them, and they catch up by state transfer.
    pub compaction_lag_max: u64,
    /// Planted bug (the simulator's `--plant-bug stable-before-durable`): the
    /// leader delivers ids as it proposes them, before a majority holds them.
    /// Only for validating the checkers; never set in production.
    pub planted_deliver_on_propose: bool,
}

/// The default [`CabConfig::compaction_lag_max`].
pub const COMPACTION_LAG_MAX: u64 = 10_000;

impl CabConfig {
    /// Defaults for `me` in a group: election timeouts are staggered by the
    /// replica's rank (10, 13, 16, … ticks) so elections rarely collide.
    pub fn for_group(me: ReplicaId, replicas: &[ReplicaId]) -> Self {
        let mut sorted = replicas.to_vec();
        sorted.sort_unstable();
        let rank = sorted.iter().position(|r| *r == me).unwrap_or(0);
        CabConfig {
            me,
            replicas: sorted,
            election_tick: 10 + 3 * rank,
            heartbeat_tick: 2,
            batch_ids_max: 4096,
            forward_retry_ticks: 20,
            held_appends_max: 1024,
            inflight_msgs_max: 256,
            uncommitted_entries_max: 2,
            compaction_lag_max: COMPACTION_LAG_MAX,
            planted_deliver_on_propose: false,
        }
    }

    /// Check every field.
    pub fn validate(&self) -> Result<(), CabError> {
        let bad = |why: &str| Err(CabError::Config(why.to_owned()));
        if !self.replicas.contains(&self.me) {
            return bad("replicas must include me");
        }
        let unique: FxHashSet<ReplicaId> = self.replicas.iter().copied().collect();
        if unique.len() != self.replicas.len() {
            return bad("replicas must be distinct");
        }
        if self.heartbeat_tick == 0 || self.election_tick <= self.heartbeat_tick {
            return bad("election_tick must exceed heartbeat_tick, which must be positive");
        }
        if self.batch_ids_max == 0
            || self.held_appends_max == 0
            || self.inflight_msgs_max == 0
            || self.uncommitted_entries_max == 0
            || self.compaction_lag_max == 0
        {
            return bad("batch, hold, in-flight, uncommitted and lag limits must be positive");
        }
        if self.forward_retry_ticks == 0 {
            return bad("forward_retry_ticks must be positive");
        }
        if self.planted_deliver_on_propose && !cfg!(feature = "planted-bugs") {
            return bad(creek_core::PLANTED_BUGS_OFF);
        }
        Ok(())
    }
}

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CabError {
    /// The configuration is invalid.
    #[error("invalid CAB configuration: {0}")]
    Config(String),
    /// The consensus library refused to start.
    #[error("consensus library: {0}")]
    Raft(#[from] raft::Error),
    /// A storage write failed; the node has stopped.
    #[error("storage failed, CAB stopped: {0}")]
    Storage(String),
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CabStats {
    /// Library messages sent and their encoded bytes.
    pub raft_msgs_sent: u64,
    /// Bytes of library messages sent.
    pub raft_bytes_sent: u64,
    /// Forward messages sent.
    pub forwards_sent: u64,
    /// Log entries proposed by this node as leader.
    pub entries_proposed: u64,
    /// Ids proposed by this node as leader.
    pub ids_proposed: u64,
    /// Distinct ids decided.
    pub ids_decided: u64,
    /// Decided ids skipped because decided before (re-proposals).
    pub duplicates_decided: u64,
    /// Appends held back for missing payloads (cumulative).
    pub appends_held: u64,
    /// Appends dropped because the hold queue was full.
    pub appends_dropped: u64,
    /// Incoming messages refused (malformed, misaddressed, unsupported).
    pub refused: u64,
    /// Ids delivered.
    pub delivered: u64,
}

/// A leader announces an unchanged compaction point again after this many
/// ticks, for peers that restarted and forgot it.
pub const ANNOUNCE_TICKS: u64 = 50;

/// A leader whose snapshot to a follower was not installed after this many
/// library ticks sends it again (the follower may have restarted and
/// forgotten it, or the leader compacted further meanwhile).
pub const SNAPSHOT_RETRY_TICKS: u64 = 100;

/// The raft id of a replica (raft reserves 0).
pub fn raft_id(r: ReplicaId) -> u64 {
    u64::from(r.0) + 1
}

fn replica_of(id: u64) -> Option<ReplicaId> {
    id.checked_sub(1)
        .and_then(|v| u16::try_from(v).ok())
        .map(ReplicaId)
}

/// One CAB node.
pub struct Cab<S: CabStorage> {
    config: CabConfig,
    node: RawNode<S>,
    /// Leader only: ids to propose, in arrival order.
    pending: VecDeque<OpId>,
    /// Ids in `pending` or proposed by this leader and not yet decided.
    in_flight: FxHashSet<OpId>,
    /// Ids cast here and not yet decided, with the tick of the last forward.
    unconfirmed: BTreeMap<OpId, u64>,
    /// Ids to forward to the leader at the next poll.
    to_forward: Vec<OpId>,
    /// Appends waiting for payloads, in arrival order.
    held: VecDeque<Message>,
    /// The first id of the first held append that the caller did not hold
    /// when last asked, in that append's first entry: until the caller
    /// holds it, nothing held can go, and polls skip the walk over the held
    /// entries and their causal contexts.
    held_blocker: Option<OpId>,
    /// A snapshot from the leader, held until the caller's state covers its
    /// index (state transfer): `(sender, message)`.
    held_snapshot: Option<(ReplicaId, Message)>,
    /// Leader: followers (raft ids) the library is sending a snapshot, with
    /// the library tick it started.
    snapshots_out: FxHashMap<u64, u64>,
    /// The library's ticks.
    raft_ticks: u64,
    /// A replica rebuilt after it lost its data: until its commit index
    /// reaches this, it neither campaigns nor grants a vote to a candidate
    /// whose log ends before it (see [`Cab::catch_up_to`]).
    catch_up_to: u64,
    /// Decided ids waiting for conditional delivery, in log order, with the
    /// index of their entry.
    decided: VecDeque<(OpId, u64)>,
    /// The ids decided in the log this node holds (first occurrences), with
    /// their entry's index: compaction forgets those of compacted entries.
    /// An id decided again after that is delivered again, and the replica
    /// ignores it as committed (`Replica::cab_deliver`).
    seen: FxHashMap<OpId, u64>,
    /// The highest compaction point known (see the crate documentation):
    /// the leader's own, or the latest a leader announced.
    compactable: u64,
    /// Leader: the compaction point last announced, and when (in ticks).
    announced: (u64, u64),
    /// The last log index whose entry was decided here (committed entries
    /// arrive once each, in log order: asserted in `decide`).
    decided_through: u64,
    /// The entry index of the last id delivered (delivery follows the
    /// decided order: asserted in `take_deliverable`).
    delivered_index: u64,
    ticks: u64,
    /// The library ticks once every `tick_scale` calls of [`Cab::tick`].
    tick_scale: u64,
    /// Calls of [`Cab::tick`] since the library last ticked.
    sub_ticks: u64,
    was_leader: bool,
    out: Vec<(ReplicaId, CabMessage)>,
    /// Messages that may leave before this node's pending writes are
    /// durable (see [`Cab::take_early_messages`]).
    early: Vec<(ReplicaId, CabMessage)>,
    /// The library's number of the last `Ready` whose writes the store
    /// holds, and of the last one the driver reported durable (see
    /// [`Cab::on_persisted`]).
    written_ready: u64,
    persisted_ready: u64,
    stats: CabStats,
    failed: Option<String>,
    /// The replicas of the applied configuration (voters and learners).
    group: BTreeSet<ReplicaId>,
    /// Configuration changes applied and not yet taken.
    conf_out: Vec<ConfApplied>,
}

impl<S: CabStorage> Cab<S> {
    /// Start (or restart) a node on `storage`. `applied` is the last log
    /// index whose ids the caller has already consumed (0 on a fresh start);
    /// decided ids after it are delivered again.
    pub fn new(config: CabConfig, storage: S, applied: u64) -> Result<Self, CabError> {
        config.validate()?;
        let raft_config = raft::Config {
            id: raft_id(config.me),
            election_tick: config.election_tick,
            heartbeat_tick: config.heartbeat_tick,
            min_election_tick: config.election_tick,
            max_election_tick: config.election_tick + 1,
            applied,
            max_size_per_msg: 1024 * 1024,
            max_inflight_msgs: config.inflight_msgs_max,
            check_quorum: true,
            pre_vote: true,
            ..raft::Config::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        // Ids decided before `applied` are not delivered again; remember them
        // so a later re-proposal of one of them is recognised as a duplicate.
        let mut seen = FxHashMap::default();
        let first = storage.first_index()?;
        if applied >= first {
            let ctx = raft::GetEntriesContext::empty(false);
            for e in storage.entries(first, applied + 1, None, ctx)? {
                if e.get_entry_type() == EntryType::EntryNormal {
                    for id in entry::decode_ids(&e.data).unwrap_or_default() {
                        seen.entry(id).or_insert(e.index);
                    }
                }
            }
        }
        let group = members_of(&storage.conf().state);
        let node = RawNode::new(&raft_config, storage, &logger)?;
        Ok(Cab {
            config,
            node,
            pending: VecDeque::new(),
            in_flight: FxHashSet::default(),
            unconfirmed: BTreeMap::new(),
            to_forward: Vec::new(),
            held: VecDeque::new(),
            held_blocker: None,
            held_snapshot: None,
            snapshots_out: FxHashMap::default(),
            raft_ticks: 0,
            catch_up_to: 0,
            decided: VecDeque::new(),
            seen,
            compactable: 0,
            announced: (0, 0),
            decided_through: applied,
            delivered_index: applied,
            ticks: 0,
            tick_scale: 1,
            sub_ticks: 0,
            was_leader: false,
            out: Vec::new(),
            early: Vec::new(),
            written_ready: 0,
            persisted_ready: 0,
            stats: CabStats::default(),
            failed: None,
            group,
            conf_out: Vec::new(),
        })
    }

    /// CAB-cast the id of a strong op invoked at this replica.
    pub fn cast(&mut self, id: OpId) {
        if self.seen.contains_key(&id) {
            return;
        }
        self.unconfirmed.insert(id, self.ticks);
        self.route(id);
    }

    /// Queue `id` for proposal here if leader, else for forwarding.
    fn route(&mut self, id: OpId) {
        if self.is_leader() {
            if !self.seen.contains_key(&id) && self.in_flight.insert(id) {
                self.pending.push_back(id);
            }
        } else {
            self.to_forward.push(id);
        }
    }

    /// A CAB message from peer `from`; `holds` decides whether an append can
    /// be accepted now.
    pub fn on_message(&mut self, from: ReplicaId, msg: CabMessage, holds: Deps<'_>) {
        if self.failed.is_some() {
            return;
        }
        // Every CAB message comes from another member of the applied
        // configuration: from anyone else (or in this replica's own name) it
        // is refused, so no peer outside the group can get an id ordered (a
        // weak op's, or one no replica holds, which would block every later
        // delivery), announce compaction or speak Raft here.
        if from == self.config.me || !self.group.contains(&from) {
            self.stats.refused += 1;
            return;
        }
        match msg {
            CabMessage::Forward { ids } => {
                if self.is_leader() {
                    for id in ids {
                        self.route(id);
                    }
                } else if self
                    .leader()
                    .is_some_and(|l| l != from && l != self.config.me)
                {
                    self.to_forward.extend(ids);
                }
            }
            CabMessage::Compact { through } => {
                // A later announcement may be lower (a new leader's progress
                // starts over): keep the max.
                self.compactable = self.compactable.max(through);
            }
            CabMessage::Raft(bytes) => {
                let Ok(m) = Message::parse_from_bytes(&bytes) else {
                    self.stats.refused += 1;
                    return;
                };
                let addressed = m.to == raft_id(self.config.me) && m.from == raft_id(from);
                if !addressed {
                    self.stats.refused += 1;
                    return;
                }
                if m.get_msg_type() == MessageType::MsgSnapshot && self.needs_state(&m) {
                    // Held until the caller's state covers it (a newer
                    // snapshot replaces it).
                    self.held_snapshot = Some((from, m));
                    return;
                }
                if self.stale_reject(&m) {
                    return;
                }
                if matches!(
                    m.get_msg_type(),
                    MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
                ) && self.catching_up()
                    && m.index < self.catch_up_to
                {
                    // No answer: the candidate may lack entries this
                    // replica lost (see `catch_up_to`).
                    self.stats.refused += 1;
                    return;
                }
                if let Some(why) = self.lost_acknowledged(from, &m) {
                    self.stats.refused += 1;
                    self.failed = Some(why);
                    return;
                }
                if m.get_msg_type() == MessageType::MsgAppend
                    && (!self.held.is_empty() || first_unheld(&m, holds).is_some())
                {
                    if self.held.len() < self.config.held_appends_max {
                        self.stats.appends_held += 1;
                        self.held.push_back(m);
                    } else {
                        self.stats.appends_dropped += 1;
                    }
                    return;
                }
                if self.node.step(m).is_err() {
                    self.stats.refused += 1;
                }
            }
        }
    }

    /// Whether the library would install snapshot `m` (rather than ignore it
    /// as stale or fast-forward to it within this log): then the caller's
    /// state must cover its index first.
    fn needs_state(&self, m: &Message) -> bool {
        let raft = &self.node.raft;
        let meta = m.get_snapshot().get_metadata();
        m.term >= raft.term
            && meta.index > raft.raft_log.committed
            && !raft.raft_log.match_term(meta.index, meta.term)
    }

    /// The snapshot this node waits for, if any: its sender and index. The
    /// caller fetches a checkpoint covering at least that index (from the
    /// sender, or any peer), installs it, then calls
    /// [`Cab::install_snapshot`].
    pub fn wanted_snapshot(&self) -> Option<(ReplicaId, u64)> {
        self.held_snapshot
            .as_ref()
            .map(|(from, m)| (*from, m.get_snapshot().get_metadata().index))
    }

    /// The caller's state now covers the held snapshot's index: let the
    /// library install it (the log becomes empty at that index, and the
    /// leader's appends continue from there). Delivery restarts after the
    /// index; ids decided at or before it are forgotten, and one decided
    /// again later is delivered again, which the replica ignores as
    /// committed.
    ///
    /// Returns whether the library installed it. While the caller fetched
    /// its checkpoint a newer term may have begun, or this log committed
    /// past the index: the library then no longer takes the snapshot (it
    /// answers it as it answers any stale one), and the caller must keep
    /// its state, or that state would run ahead of the log it restarts
    /// from. The next snapshot a leader sends is held and fetched anew.
    pub fn install_snapshot(&mut self) -> bool {
        let Some((_, m)) = self.held_snapshot.take() else {
            return false;
        };
        let index = m.get_snapshot().get_metadata().index;
        if self.node.step(m).is_err() {
            self.stats.refused += 1;
        }
        self.restored_at(index) && self.store_restored()
    }

    /// Run the Ready that carries a snapshot the library just restored, so
    /// the storage holds the log restarted at its index before the caller
    /// replaces its state: the caller's next write then stores the
    /// checkpoint with the log it restarts from. Left for a later poll, the
    /// restart would reach the disk in a write after the checkpoint's, and
    /// a crash between the two would leave a checkpoint past the stored
    /// log (chaos seed 107, docs/reliability.md). `false` if storing failed
    /// (CAB stops).
    fn store_restored(&mut self) -> bool {
        if let Err(e) = self.handle_ready() {
            self.failed = Some(e);
        }
        self.failed.is_none()
    }

    /// Whether the library just restored a snapshot at `index`: its log
    /// starts there, and the snapshot waits for the next `Ready`.
    fn restored_at(&self, index: u64) -> bool {
        self.node
            .raft
            .raft_log
            .unstable_snapshot()
            .as_ref()
            .is_some_and(|s| s.get_metadata().index == index)
    }

    /// Rebuild a replica that lost its data from a peer's checkpoint at
    /// consensus `index` (whose entry has `term`): the log becomes empty at
    /// that index, as if `from` had sent that snapshot in term `max_term`,
    /// the highest term any peer reports. The node also records a vote of
    /// its own in that term: it may have voted in it before it lost its
    /// data, and no term after it can have seen its vote (every candidate
    /// that asked for it is a peer whose term is at most `max_term`).
    ///
    /// `conf` is the group's configuration the checkpoint was taken with;
    /// the rebuilt log starts from it. A configuration without this replica
    /// (a checkpoint taken before it was added) cannot be installed: `false`,
    /// and nothing changed — the caller fetches a newer checkpoint. So is
    /// one the library does not take (see [`Cab::install_snapshot`]).
    pub fn restore_lost(
        &mut self,
        from: ReplicaId,
        index: u64,
        term: u64,
        max_term: u64,
        conf: Conf,
    ) -> bool {
        if !members_of(&conf.state).contains(&self.config.me) {
            return false;
        }
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgSnapshot);
        m.from = raft_id(from);
        m.to = raft_id(self.config.me);
        m.term = max_term.max(term).max(self.node.raft.term);
        let snap = m.mut_snapshot();
        snap.data = conf.index.to_le_bytes().to_vec().into();
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(conf.state);
        self.held_snapshot = None;
        if self.node.step(m).is_err() {
            self.stats.refused += 1;
        }
        if !self.restored_at(index) {
            return false;
        }
        self.node.raft.vote = raft_id(self.config.me);
        self.store_restored()
    }

    /// `peer` lost its data (its peers learnt so from it): whatever it
    /// acknowledged is gone. A leader forgets its progress — so nothing
    /// counts its old acknowledgements toward a commit, and no heartbeat
    /// tells its rebuilt log a commit index past its end — and probes it
    /// afresh once it takes part again.
    pub fn forget_peer(&mut self, peer: ReplicaId) {
        if !self.is_leader() || peer == self.config.me {
            return;
        }
        let id = raft_id(peer);
        let last = self.node.raft.raft_log.last_index();
        if let Some(pr) = self.node.raft.mut_prs().get_mut(id) {
            pr.matched = 0;
            pr.pending_snapshot = 0;
            pr.become_probe();
            pr.next_idx = last + 1;
        }
        self.snapshots_out.remove(&id);
    }

    /// This replica was rebuilt after it lost its data, and a peer's log
    /// reached `index` then. Entries up to there may have been committed
    /// with acknowledgements the lost data held, so some may now be held by
    /// fewer than a majority: until this replica's commit index reaches
    /// `index` it does not campaign, and grants a vote (or pre-vote) only to
    /// a candidate whose log reaches `index` — else two replicas short of
    /// those entries could elect one of them and overwrite them.
    pub fn catch_up_to(&mut self, index: u64) {
        self.catch_up_to = self.catch_up_to.max(index);
    }

    /// Still catching up (see [`Cab::catch_up_to`]).
    pub fn catching_up(&self) -> bool {
        self.node.raft.raft_log.committed < self.catch_up_to
    }

    /// Whether `m` is a rejected append that the leader already knows to be
    /// stale: the follower has since acknowledged entries through at least
    /// the rejected index (its `matched` progress). raft-rs (0.7) steps such
    /// a late rejection in probe state by moving the follower's next index
    /// back below what it acknowledged (etcd's raft keeps it above `matched`),
    /// and with a compacted log that index may be gone: the library would
    /// then ask for a snapshot, which CAB never sends. The rejection carries
    /// nothing the acknowledgement did not supersede, so it is dropped.
    fn stale_reject(&self, m: &Message) -> bool {
        m.get_msg_type() == MessageType::MsgAppendResponse
            && m.reject
            && self.is_leader()
            && m.term == self.node.raft.term
            && self
                .node
                .raft
                .prs()
                .get(m.from)
                .is_some_and(|pr| pr.matched >= m.index)
    }

    /// Whether `m` is a heartbeat whose commit index lies past the end of
    /// this log, which the library would take with a panic (`commit_to`).
    /// The leader sends the lesser of its commit index and what this replica
    /// acknowledged, and this replica acknowledges entries only once they
    /// are durable, so it lost entries it acknowledged (its data directory
    /// was lost or damaged): it must stop rather than rejoin as if it held
    /// them. Only heartbeats the library would act on count (a stale term's
    /// are ignored; term 0 is taken as local). An append cannot trip this:
    /// the library commits at most through the append's last entry, which
    /// the log holds once it accepts the append, and an append starting
    /// below the commit index is answered without committing.
    fn lost_acknowledged(&self, from: ReplicaId, m: &Message) -> Option<String> {
        let raft = &self.node.raft;
        let last = raft.raft_log.last_index();
        let acted_on = m.term == 0 || m.term >= raft.term;
        if m.get_msg_type() != MessageType::MsgHeartbeat || !acted_on || m.commit <= last {
            return None;
        }
        Some(format!(
            "the leader (replica {}) says entries up to index {} are committed here, but this \
             replica's log ends at {last}: this replica lost data it acknowledged (its data \
             directory was lost or damaged); it must not rejoin with this log",
            from.0, m.commit
        ))
    }

    /// Stretch CAB's timing (election timeout, heartbeat interval, forward
    /// retries) by `scale`: from now on the library ticks once every `scale`
    /// calls of [`Cab::tick`]. Drivers set it from the measured round trip
    /// (`creek_node`'s link timing), so elections can finish on slow links.
    /// Timing only decides liveness, never safety.
    pub fn set_tick_scale(&mut self, scale: u64) {
        self.tick_scale = scale.max(1);
    }

    /// Advance logical time by one tick (see [`Cab::set_tick_scale`]).
    pub fn tick(&mut self) {
        if self.failed.is_some() {
            return;
        }
        self.sub_ticks += 1;
        if self.sub_ticks < self.tick_scale {
            return;
        }
        self.sub_ticks = 0;
        self.ticks += 1;
        self.node.tick();
        self.raft_ticks += 1;
        self.retry_snapshots();
        let retry = self.config.forward_retry_ticks;
        let due: Vec<OpId> = self
            .unconfirmed
            .iter()
            .filter(|(_, last)| self.ticks - **last >= retry)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.unconfirmed.insert(id, self.ticks);
            if !self.in_flight.contains(&id) {
                self.route(id);
            }
        }
        self.announce_compaction();
        self.promote_caught_up();
    }

    /// Leader: a snapshot the library started sending a follower and that
    /// was not installed within [`SNAPSHOT_RETRY_TICKS`] is reported failed,
    /// so the library sends one again (at the log's base now).
    fn retry_snapshots(&mut self) {
        if !self.is_leader() {
            self.snapshots_out.clear();
            return;
        }
        let now = self.raft_ticks;
        let sending: Vec<u64> = self
            .node
            .raft
            .prs()
            .iter()
            .filter(|(_, pr)| pr.state == raft::ProgressState::Snapshot)
            .map(|(id, _)| *id)
            .collect();
        self.snapshots_out.retain(|id, _| sending.contains(id));
        for id in sending {
            let since = *self.snapshots_out.entry(id).or_insert(now);
            if now - since >= SNAPSHOT_RETRY_TICKS {
                self.snapshots_out.remove(&id);
                self.node.report_snapshot(id, raft::SnapshotStatus::Failure);
            }
        }
    }

    /// Leader: the compaction point is the least index every replica has
    /// acknowledged (and at most the commit index). Announced to every peer
    /// when it moves, and again every [`ANNOUNCE_TICKS`] ticks for peers
    /// that restarted and forgot it.
    fn announce_compaction(&mut self) {
        if !self.is_leader() {
            return;
        }
        let raft = &self.node.raft;
        let commit = raft.raft_log.committed;
        let lag = self.config.compaction_lag_max;
        let matched = raft
            .prs()
            .iter()
            .map(|(_, pr)| pr.matched)
            .filter(|m| m.saturating_add(lag) >= commit)
            .min();
        let point = matched.unwrap_or(0).min(commit);
        self.compactable = self.compactable.max(point);
        let (last, at) = self.announced;
        if point == 0 || (point == last && self.ticks - at < ANNOUNCE_TICKS) {
            return;
        }
        self.announced = (point, self.ticks);
        for &peer in &self.config.replicas {
            if peer != self.config.me {
                self.out
                    .push((peer, CabMessage::Compact { through: point }));
            }
        }
    }

    /// The compaction point (see the crate documentation): entries up to it
    /// are needed by no replica.
    pub fn compactable(&self) -> u64 {
        self.compactable
    }

    /// Compact the log through `through` — lowered to [`Cab::compactable`]
    /// and to what was delivered — and forget the ids decided there.
    /// `through` must be covered by the caller's latest checkpoint, handed to
    /// the driver no later than the log writes this produces, so a restart
    /// finds a checkpoint that covers the compacted log. Returns the log's
    /// new base index.
    pub fn compact(&mut self, through: u64) -> Result<u64, CabError> {
        let through = through.min(self.compactable).min(self.delivered_through());
        let store = self.node.mut_store();
        store
            .compact(through)
            .map_err(|e| CabError::Storage(e.to_string()))?;
        let base = store.first_index().map_err(CabError::from)? - 1;
        self.seen.retain(|_, index| *index > base);
        Ok(base)
    }

    /// Start an election now (tests and operators).
    pub fn campaign(&mut self) {
        let _ = self.node.campaign();
    }

    /// Do all pending work: release held appends whose payloads arrived,
    /// propose held ids, forward, run the library's Ready loop. Messages to
    /// send wait for [`Cab::take_messages`].
    pub fn poll(&mut self, holds: Deps<'_>) {
        if self.failed.is_none() {
            self.release_held(holds);
            self.propose(holds);
            self.forward();
            if let Err(e) = self.handle_ready() {
                self.failed = Some(e);
            }
        }
    }

    /// Step the held appends whose entries the caller now holds, in order,
    /// then the held leading entries of the first that waits. An op named
    /// after a void op (see `creek_procs::void`) may name voided ids in its
    /// context, which only that void op, earlier in the log, makes held
    /// here: a follower that had to take both in one append would wait
    /// forever.
    fn release_held(&mut self, holds: Deps<'_>) {
        while self.held_blocker.is_none_or(holds) {
            let Some(m) = self.held.front_mut() else {
                self.held_blocker = None;
                return;
            };
            let step = match first_unheld(m, holds) {
                None => {
                    self.held_blocker = None;
                    self.held.pop_front()
                }
                Some((n, id)) => {
                    self.held_blocker = Some(id);
                    (n > 0).then(|| split_append(m, n))
                }
            };
            if let Some(m) = step {
                if self.node.step(m).is_err() {
                    self.stats.refused += 1;
                }
            }
            if self.held_blocker.is_some() {
                return;
            }
        }
    }

    /// The messages to send, in order, since the last call. (Inputs are
    /// methods and outputs wait in the room until taken — here, the
    /// messages and [`Cab::take_deliverable`] — as in gossip and the
    /// replica core.)
    pub fn take_messages(&mut self) -> Vec<(ReplicaId, CabMessage)> {
        std::mem::take(&mut self.out)
    }

    /// The messages that may leave before the writes this node made are
    /// durable, in order, since the last call: a leader's appends and
    /// heartbeats, which the library lets go at once (raft thesis §10.2.1:
    /// the leader writes its log in parallel with its followers, and counts
    /// itself only once [`Cab::on_persisted`] reports its write), and ids
    /// forwarded to the leader (they claim nothing about this disk). Empty
    /// on a synchronous store, whose writes are durable when made.
    /// Everything else — votes, acknowledgements, compaction points — is in
    /// [`Cab::take_messages`] and waits for the writes made before it.
    pub fn take_early_messages(&mut self) -> Vec<(ReplicaId, CabMessage)> {
        std::mem::take(&mut self.early)
    }

    /// Whether the store leaves durability to the driver
    /// ([`CabStorage::defers_writes`]): then the Ready loop persists
    /// asynchronously, and the driver reports durable writes with
    /// [`Cab::on_persisted`].
    fn defers_writes(&self) -> bool {
        self.node.store().defers_writes()
    }

    /// Leader: propose the pending ids it holds, in batches.
    fn propose(&mut self, holds: Deps<'_>) {
        if !self.is_leader() || self.pending.is_empty() {
            return;
        }
        let log = &self.node.raft.raft_log;
        let uncommitted = log.last_index().saturating_sub(log.committed);
        if uncommitted >= self.config.uncommitted_entries_max {
            return; // proposed once an entry commits (poll runs again then)
        }
        let mut waiting = VecDeque::new();
        let mut batch = Vec::new();
        while let Some(id) = self.pending.pop_front() {
            if self.seen.contains_key(&id) {
                self.in_flight.remove(&id);
            } else if holds(id) {
                batch.push(id);
                if batch.len() == self.config.batch_ids_max {
                    self.propose_batch(std::mem::take(&mut batch));
                }
            } else {
                waiting.push_back(id);
            }
        }
        if !batch.is_empty() {
            self.propose_batch(batch);
        }
        self.pending = waiting;
    }

    fn propose_batch(&mut self, batch: Vec<OpId>) {
        match self.node.propose(vec![], entry::encode_ids(&batch)) {
            Ok(()) => {
                self.stats.entries_proposed += 1;
                self.stats.ids_proposed += batch.len() as u64;
                if cfg!(feature = "planted-bugs") && self.config.planted_deliver_on_propose {
                    let index = self.node.raft.raft_log.last_index();
                    for id in batch {
                        if self.seen.insert(id, index).is_none() {
                            self.decided.push_back((id, index));
                        }
                    }
                }
            }
            // Not leader any more (or transferring): the casters retry.
            Err(_) => {
                for id in batch {
                    self.in_flight.remove(&id);
                }
            }
        }
    }

    fn forward(&mut self) {
        if self.to_forward.is_empty() {
            return;
        }
        if self.is_leader() {
            for id in std::mem::take(&mut self.to_forward) {
                self.route(id);
            }
            return;
        }
        let Some(leader) = self.leader() else {
            return; // kept until a leader is known
        };
        let mut ids = std::mem::take(&mut self.to_forward);
        ids.sort_unstable();
        ids.dedup();
        ids.retain(|id| !self.seen.contains_key(id));
        if !ids.is_empty() {
            self.stats.forwards_sent += 1;
            let out = if self.defers_writes() {
                &mut self.early
            } else {
                &mut self.out
            };
            out.push((leader, CabMessage::Forward { ids }));
        }
    }

    /// The library's Ready loop: send, persist, collect decided ids.
    fn handle_ready(&mut self) -> Result<(), String> {
        while self.node.has_ready() {
            let mut rd = self.node.ready();
            if let Some(ss) = rd.ss() {
                let leader = ss.raft_state == StateRole::Leader;
                if self.was_leader && !leader {
                    // Lost leadership: what was not proposed goes to the new
                    // leader; proposed-but-undecided ids are retried by their
                    // casters.
                    let pending: Vec<OpId> = self.pending.drain(..).collect();
                    self.in_flight.clear();
                    self.to_forward.extend(pending);
                }
                self.was_leader = leader;
            }
            let deferred = self.defers_writes();
            let now = rd.take_messages();
            self.send(now, deferred);
            let snapshot = !rd.snapshot().is_empty();
            if snapshot {
                self.applied_snapshot(rd.snapshot())?;
            }
            self.decide(rd.take_committed_entries());
            let store = self.node.mut_store();
            if !rd.entries().is_empty() {
                store.append(rd.entries()).map_err(|e| e.to_string())?;
            }
            if let Some(hs) = rd.hs() {
                store
                    .set_hard_state(hs.clone())
                    .map_err(|e| e.to_string())?;
            }
            self.send(rd.take_persisted_messages(), false);
            if deferred {
                // Persisted asynchronously: the driver makes these writes
                // durable, and `on_persisted` tells the library. A commit
                // index that moves arrives in a later Ready's hard state.
                let number = rd.number();
                self.written_ready = number;
                self.node.advance_append_async(rd);
                if snapshot {
                    // The library needs an installed snapshot applied at
                    // once (a campaign reads the log from the applied
                    // index on): counted persisted now, as on a synchronous
                    // store. Only delivery may run ahead of this disk —
                    // which a commit allows — and acknowledgements still
                    // wait for the write.
                    self.persisted_ready = number;
                    self.node.on_persist_ready(number);
                }
                self.apply_persisted();
            } else {
                let mut light = self.node.advance(rd);
                if let Some(commit) = light.commit_index() {
                    self.node
                        .mut_store()
                        .set_commit(commit)
                        .map_err(|e| e.to_string())?;
                }
                self.send(light.take_messages(), false);
                self.decide(light.take_committed_entries());
                self.node.advance_apply();
            }
        }
        Ok(())
    }

    /// The library installs a snapshot: the log becomes empty at its index,
    /// and delivery continues after it (the caller's state covers it).
    fn applied_snapshot(&mut self, snap: &raft::eraftpb::Snapshot) -> Result<(), String> {
        let index = snap.get_metadata().index;
        self.node
            .mut_store()
            .apply_snapshot(snap)
            .map_err(|e| e.to_string())?;
        let conf = self.node.store().conf();
        self.group = members_of(&conf.state);
        self.conf_out.push(ConfApplied {
            index: conf.index,
            change: None,
            conf: conf.state,
            context: Bytes::new(),
        });
        self.decided.clear();
        self.seen.clear();
        self.decided_through = self.decided_through.max(index);
        self.delivered_index = self.delivered_index.max(index);
        self.compactable = self.compactable.max(index);
        Ok(())
    }

    /// Encode the library's messages for sending: `early` ones may leave
    /// before this node's pending writes are durable.
    fn send(&mut self, msgs: Vec<Message>, early: bool) {
        let catching_up = self.catching_up();
        for m in msgs {
            if catching_up
                && matches!(
                    m.get_msg_type(),
                    MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
                )
            {
                // No campaign while short of what a peer held at the
                // rebuild (see `catch_up_to`): its candidacy goes nowhere.
                continue;
            }
            let Some(to) = replica_of(m.to) else {
                continue;
            };
            let Ok(bytes) = m.write_to_bytes() else {
                continue;
            };
            self.stats.raft_msgs_sent += 1;
            self.stats.raft_bytes_sent += bytes.len() as u64;
            let out = if early {
                &mut self.early
            } else {
                &mut self.out
            };
            out.push((to, CabMessage::Raft(Bytes::from(bytes))));
        }
    }

    /// Committed entries, in log order: their ids join the decided queue at
    /// their first occurrence.
    fn decide(&mut self, entries: Vec<raft::eraftpb::Entry>) {
        for e in entries {
            // Paired with the library's contract (and with the delivery
            // order asserted in `take_deliverable`): each committed entry
            // once, in log order, after the restart point.
            assert!(
                e.index > self.decided_through,
                "entry {} committed again or out of order (decided through {})",
                e.index,
                self.decided_through
            );
            self.decided_through = e.index;
            if e.get_entry_type() == EntryType::EntryConfChangeV2 {
                self.apply_conf_entry(&e);
                continue;
            }
            if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
                continue;
            }
            // Malformed data decodes the same way everywhere: skipped.
            let Some(ids) = entry::decode_ids(&e.data) else {
                continue;
            };
            for id in ids {
                self.in_flight.remove(&id);
                self.unconfirmed.remove(&id);
                if self.seen.insert(id, e.index).is_none() {
                    self.stats.ids_decided += 1;
                    self.decided.push_back((id, e.index));
                } else {
                    self.stats.duplicates_decided += 1;
                }
            }
        }
    }

    /// Decided ids deliverable now: strictly in decision order, each once its
    /// predicate holds (conditional delivery). The predicate is asked about
    /// each id as things stand at the call: an id whose predicate only the
    /// delivery of an earlier one satisfies waits for the next call (see
    /// [`Cab::next_deliverable`]).
    pub fn take_deliverable(&mut self, deps: Deps<'_>) -> Vec<OpId> {
        std::iter::from_fn(|| self.next_deliverable(deps)).collect()
    }

    /// The next decided id, if its predicate holds. A caller that delivers
    /// each before asking again delivers a chain of ids that depend on one
    /// another in one go.
    pub fn next_deliverable(&mut self, deps: Deps<'_>) -> Option<OpId> {
        let &(id, index) = self.decided.front()?;
        if !deps(id) {
            return None;
        }
        // Paired with `decide`: ids leave in the order they were decided.
        assert!(
            index >= self.delivered_index,
            "{id} of entry {index} delivered after entry {}",
            self.delivered_index
        );
        self.delivered_index = index;
        self.decided.pop_front();
        self.stats.delivered += 1;
        Some(id)
    }

    /// Ids CAB waits on: those of the first held append and the pending
    /// proposals that `holds` rejects, and the next decided id if `deps`
    /// rejects it. The caller should fetch their payloads and causal contexts
    /// by gossip.
    pub fn waiting_for(&self, holds: Deps<'_>, deps: Deps<'_>) -> Vec<OpId> {
        let mut ids: Vec<OpId> = Vec::new();
        // Of the first held append, the entry that waits: its first, once
        // a poll split off the entries before it (see `release_held`).
        if let Some(m) = self.held.front() {
            let waits = match self.held_blocker {
                Some(_) => Some(0),
                None => first_unheld(m, holds).map(|(n, _)| n),
            };
            if let Some(entry) = waits.and_then(|n| m.get_entries().get(n)) {
                let batch = entry::decode_ids(&entry.data).unwrap_or_default();
                ids.extend(batch.into_iter().filter(|id| !holds(*id)));
            }
        }
        ids.extend(self.pending.iter().copied().filter(|id| !holds(*id)));
        ids.extend(
            self.decided
                .front()
                .map(|(id, _)| *id)
                .filter(|id| !deps(*id)),
        );
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<ReplicaId> {
        match self.node.raft.leader_id {
            raft::INVALID_ID => None,
            id => replica_of(id),
        }
    }

    /// This node's consensus role: `leader`, `follower`, `candidate` or
    /// `pre-candidate`.
    pub fn role(&self) -> &'static str {
        match self.node.raft.state {
            StateRole::Leader => "leader",
            StateRole::Follower => "follower",
            StateRole::Candidate => "candidate",
            StateRole::PreCandidate => "pre-candidate",
        }
    }

    /// Whether this node is the leader.
    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    /// The last log index all of whose ids have been delivered: what a
    /// restarted node passes as `applied` (a durable driver persists it with
    /// the state those deliveries produced).
    pub fn delivered_through(&self) -> u64 {
        match self.decided.front() {
            Some((_, index)) => index - 1,
            None => self.node.raft.raft_log.applied,
        }
    }

    /// Where this node's log stands: (last index, its term, commit index). A
    /// change says [`Cab::undecided_log`] may have changed.
    pub fn log_mark(&self) -> (u64, u64, u64) {
        let log = &self.node.raft.raft_log;
        (log.last_index(), log.last_term(), log.committed)
    }

    /// The ids of this node's log entries past the commit index, in log
    /// order, each with its entry's index and its place in the entry: at the
    /// leader what it proposed, at a follower what the leader's appends
    /// brought. That is the leader's order before consensus ends: the
    /// optimistic delivery of an optimistic atomic broadcast (the Archie
    /// baseline). A later leader may overwrite any of it.
    pub fn undecided_log(&self) -> Vec<(u64, usize, OpId)> {
        let log = &self.node.raft.raft_log;
        let from = log.committed + 1;
        if from > log.last_index() {
            return Vec::new();
        }
        let Ok(entries) = log.entries(from, None, raft::GetEntriesContext::empty(false)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries {
            if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
                continue;
            }
            if let Some(ids) = entry::decode_ids(&e.data) {
                out.extend(ids.into_iter().enumerate().map(|(k, id)| (e.index, k, id)));
            }
        }
        out
    }

    /// Check CAB's invariants (for the simulator's sampled checks):
    /// delivery never passes the commit index, the decided queue is in log
    /// order within what was decided, and every queued id is seen.
    pub fn check_invariants(&self) -> Result<(), String> {
        let committed = self.node.raft.raft_log.committed;
        let through = self.delivered_through();
        if through > committed && !self.config.planted_deliver_on_propose {
            return Err(format!(
                "delivered through {through}, past the commit index {committed}"
            ));
        }
        let mut last = self.delivered_index;
        for &(id, index) in &self.decided {
            if index < last {
                return Err(format!("decided queue out of log order at {id}"));
            }
            last = index;
            if !self.seen.contains_key(&id) {
                return Err(format!("decided {id} is not among the seen ids"));
            }
        }
        Ok(())
    }

    /// Appends held back for payloads.
    pub fn held_appends(&self) -> usize {
        self.held.len()
    }

    /// The log index of the first held entry (the one the held appends
    /// wait on), if any.
    pub fn held_from(&self) -> Option<u64> {
        let m = self.held.front()?;
        Some(m.get_entries().first().map_or(m.index + 1, |e| e.index))
    }

    /// The log index of the first decided id still waiting for its
    /// predicate (its payload or its causal context), if any.
    pub fn decided_from(&self) -> Option<u64> {
        self.decided.front().map(|(_, index)| *index)
    }

    /// The replica that sent the first held append: a leader of its term,
    /// and so a member that holds the entries (and can serve a checkpoint
    /// covering them) even when this replica no longer knows who leads.
    pub fn held_sender(&self) -> Option<ReplicaId> {
        replica_of(self.held.front()?.from)
    }

    /// Decided ids still waiting for their predicate.
    pub fn decided_waiting(&self) -> usize {
        self.decided.len()
    }

    /// Cast ids not yet decided.
    pub fn unconfirmed(&self) -> usize {
        self.unconfirmed.len()
    }

    /// Counters.
    pub fn stats(&self) -> CabStats {
        self.stats
    }

    /// What stopped this node, if anything: a storage write that failed, or
    /// a leader's commit index past the end of this log (this replica lost
    /// data it acknowledged). A stopped node takes no more input and sends
    /// nothing; its driver should take the replica down.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// The storage (for restarts in tests and for the server).
    pub fn store(&self) -> &S {
        self.node.store()
    }

    /// The log writes of the Ready rounds since the last call, for the
    /// node's next write (empty on a synchronous store), and the mark to
    /// report to [`Cab::on_persisted`] once that write is durable.
    pub fn take_writes(&mut self) -> (LogWrites, u64) {
        (self.node.mut_store().take_writes(), self.written_ready)
    }

    /// The writes taken with mark `mark` (see [`Cab::take_writes`]), and
    /// every earlier one, are durable: the library counts them (a leader
    /// counts itself toward commits from its log's end on, a follower
    /// delivers committed entries up to it). Poll afterwards.
    pub fn on_persisted(&mut self, mark: u64) {
        if mark > self.persisted_ready && self.failed.is_none() {
            self.persisted_ready = mark;
            self.node.on_persist_ready(mark);
            self.apply_persisted();
        }
    }

    /// Tell the library what is applied: every entry decided here, and a
    /// snapshot installed, once the library counts it persisted (a
    /// snapshot is applied with the write that stores it).
    fn apply_persisted(&mut self) {
        let log = &self.node.raft.raft_log;
        let to = self.decided_through.min(log.persisted);
        if to > log.applied {
            self.node.advance_apply_to(to);
        }
    }

    /// Whether the pending log writes must be durable before the output that
    /// follows them may leave (`CabStorage::must_sync`).
    pub fn must_sync(&self) -> bool {
        self.node.store().must_sync()
    }
}

/// The position in append `m` of the first entry naming an id this replica
/// does not hold, with that id; `None` if it holds them all.
fn first_unheld(m: &Message, holds: Deps<'_>) -> Option<(usize, OpId)> {
    m.get_entries().iter().enumerate().find_map(|(n, e)| {
        if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
            return None;
        }
        let ids = entry::decode_ids(&e.data)?;
        ids.into_iter().find(|id| !holds(*id)).map(|id| (n, id))
    })
}

/// Split held append `m` after its first `n` entries: returns an append of
/// those (to step now), and leaves `m` with the rest, continuing from the
/// last of them.
fn split_append(m: &mut Message, n: usize) -> Message {
    let mut entries = m.take_entries().into_vec();
    let rest = entries.split_off(n);
    let mut prefix = m.clone();
    if let Some(last) = entries.last() {
        m.index = last.index;
        m.log_term = last.term;
    }
    prefix.set_entries(entries.into());
    m.set_entries(rest.into());
    prefix
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage as _;

    fn follower(me: u16) -> Cab<MemCabStorage> {
        let group: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
        let voters = group.iter().map(|r| raft_id(*r)).collect();
        let config = CabConfig::for_group(ReplicaId(me), &group);
        Cab::new(config, MemCabStorage::new(voters), 0).expect("valid config")
    }

    fn heartbeat(from: u16, to: u16, term: u64, commit: u64) -> CabMessage {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = raft_id(ReplicaId(from));
        m.to = raft_id(ReplicaId(to));
        m.term = term;
        m.commit = commit;
        CabMessage::Raft(Bytes::from(m.write_to_bytes().expect("encodes")))
    }

    fn snapshot(from: u16, to: u16, term: u64, index: u64) -> CabMessage {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgSnapshot);
        m.from = raft_id(ReplicaId(from));
        m.to = raft_id(ReplicaId(to));
        m.term = term;
        let snap = m.mut_snapshot();
        snap.data = 0u64.to_le_bytes().to_vec().into();
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(ConfState::from((
            (1..=3).map(|r| raft_id(ReplicaId(r))).collect::<Vec<_>>(),
            vec![],
        )));
        CabMessage::Raft(Bytes::from(m.write_to_bytes().expect("encodes")))
    }

    /// Messages are taken from the other members only: a forward that claims
    /// a replica outside the group, or this replica itself, cannot make the
    /// leader order an id.
    #[test]
    fn a_leader_proposes_forwarded_ids_only_from_other_members() {
        let me = ReplicaId(1);
        let config = CabConfig::for_group(me, &[me]);
        let mut cab = Cab::new(config, MemCabStorage::new(vec![raft_id(me)]), 0).expect("valid");
        cab.campaign();
        cab.poll(&|_| true);
        assert!(cab.is_leader());
        let last = |cab: &Cab<MemCabStorage>| cab.store().last_index().expect("reads");
        let before = last(&cab);
        let id = OpId::new(ReplicaId(2), 7);
        for from in [ReplicaId(9), me] {
            cab.on_message(from, CabMessage::Forward { ids: vec![id] }, &|_| true);
            cab.poll(&|_| true);
        }
        assert_eq!(last(&cab), before, "a forward from outside was proposed");
        cab.cast(id);
        cab.poll(&|_| true);
        assert_eq!(last(&cab), before + 1, "its own cast is proposed");
    }

    /// Consensus messages and compaction announcements from outside the
    /// group, or in this replica's own name, change nothing and are counted.
    #[test]
    fn raft_and_compaction_messages_are_taken_only_from_other_members() {
        let mut cab = follower(2);
        let refused = cab.stats().refused;
        for from in [9, 2] {
            cab.on_message(ReplicaId(from), heartbeat(from, 2, 5, 0), &|_| true);
            cab.on_message(
                ReplicaId(from),
                CabMessage::Compact { through: 10 },
                &|_| true,
            );
            cab.poll(&|_| true);
        }
        assert_eq!(cab.term(), 0, "a heartbeat from outside moved the term");
        assert_eq!(
            cab.compactable(),
            0,
            "an announcement from outside was taken"
        );
        assert_eq!(cab.stats().refused, refused + 4);
        cab.on_message(ReplicaId(1), heartbeat(1, 2, 5, 0), &|_| true);
        cab.on_message(ReplicaId(1), CabMessage::Compact { through: 10 }, &|_| true);
        cab.poll(&|_| true);
        assert_eq!(
            (cab.term(), cab.compactable()),
            (5, 10),
            "a member's are taken"
        );
    }

    /// A snapshot is held while the caller fetches a checkpoint for it, and
    /// installed only if the library still takes it: a newer term began
    /// meanwhile, so it is refused and the log stays as it was (the caller
    /// keeps its state; a checkpoint ahead of the log could not restart).
    #[test]
    fn a_held_snapshot_is_installed_only_if_the_library_still_takes_it() {
        let mut cab = follower(2);
        cab.on_message(ReplicaId(1), snapshot(1, 2, 5, 100), &|_| true);
        assert_eq!(cab.wanted_snapshot(), Some((ReplicaId(1), 100)));
        cab.on_message(ReplicaId(3), heartbeat(3, 2, 6, 0), &|_| true);
        assert!(!cab.install_snapshot(), "a newer term began");
        assert_eq!(cab.wanted_snapshot(), None);
        cab.poll(&|_| true);
        assert_eq!(cab.store().last_index().expect("reads"), 0);

        cab.on_message(ReplicaId(3), snapshot(3, 2, 6, 120), &|_| true);
        assert_eq!(cab.wanted_snapshot(), Some((ReplicaId(3), 120)));
        assert!(cab.install_snapshot());
        cab.poll(&|_| true);
        assert_eq!(cab.store().last_index().expect("reads"), 120);
        assert_eq!(cab.store().first_index().expect("reads"), 121);
    }

    /// The caller stores its checkpoint in its next write, right after
    /// `install_snapshot`: the log must already restart at the snapshot's
    /// index then, with no poll in between, or the checkpoint could reach
    /// the disk ahead of the log it restarts from.
    #[test]
    fn an_installed_snapshot_is_in_the_store_when_install_returns() {
        let mut cab = follower(2);
        cab.on_message(ReplicaId(1), snapshot(1, 2, 5, 100), &|_| true);
        assert!(cab.install_snapshot());
        let store = cab.store();
        assert_eq!(store.first_index().expect("reads"), 101);
        assert_eq!(store.last_index().expect("reads"), 100);
        let hs = store.initial_state().expect("reads").hard_state;
        assert_eq!(hs.commit, 100);
    }

    /// The bug report's case: a replica whose data directory was wiped
    /// restarts with an empty log, and the leader's heartbeat says 3371
    /// entries it acknowledged are committed. The library would panic; CAB
    /// stops with the cause instead.
    #[test]
    fn a_heartbeat_committing_past_the_log_stops_cab_with_lost_data() {
        let mut cab = follower(2);
        cab.on_message(ReplicaId(1), heartbeat(1, 2, 7, 3371), &|_| true);
        let why = cab.failure().expect("CAB stopped");
        assert!(why.contains("replica 1"), "{why}");
        assert!(why.contains("up to index 3371"), "{why}");
        assert!(why.contains("log ends at 0"), "{why}");
        assert!(why.contains("lost data it acknowledged"), "{why}");
        assert_eq!(cab.stats().refused, 1);
        // Stopped: nothing more goes in or out.
        cab.on_message(ReplicaId(1), heartbeat(1, 2, 7, 0), &|_| true);
        cab.tick();
        cab.poll(&|_| true);
        assert!(cab.take_messages().is_empty());
        assert_eq!(cab.term(), 0, "the heartbeat was not stepped");
    }

    /// A heartbeat within the log is stepped as usual (the follower answers
    /// it); one from a stale term is the library's to ignore.
    #[test]
    fn heartbeats_within_the_log_or_from_a_stale_term_do_not_stop_cab() {
        let mut cab = follower(2);
        cab.on_message(ReplicaId(1), heartbeat(1, 2, 7, 0), &|_| true);
        cab.poll(&|_| true);
        assert_eq!(cab.failure(), None);
        assert_eq!(cab.term(), 7);
        assert_eq!(cab.leader(), Some(ReplicaId(1)));
        assert!(!cab.take_messages().is_empty(), "the heartbeat is answered");

        cab.on_message(ReplicaId(3), heartbeat(3, 2, 6, 3371), &|_| true);
        cab.poll(&|_| true);
        assert_eq!(cab.failure(), None);
        assert_eq!(cab.term(), 7);
    }
}
