//! Starting a node: fresh ([`Node::new`]), from what a durable driver kept
//! ([`Node::recover`] with [`Kept`]); the checks that stored state belongs
//! to the configured group and that its log reaches the stored checkpoint;
//! and taking back the own ops that may have reached peers but not this
//! disk (see [`RESERVE_AHEAD`](crate::RESERVE_AHEAD)).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use creek_cab::{Cab, CabConfig, CabError, CabStorage};
use creek_core::{Checkpoint, Directory, Op, OpId, Replica};
use creek_gossip::Gossip;
use creek_procs::Registry;
use creek_types::planted::Bug;
use creek_wire::Limits;

use crate::durability::Durability;
use crate::membership::Membership;
use crate::timing::Timing;
use crate::transfer::Transfers;
use crate::wiring::PULL_IDS_MAX;
use crate::{Identity, Node, NodeConfig, NodeError, OwnSeqs};

/// What a durable driver kept beside CAB's storage, for [`Node::recover`].
#[derive(Clone, Debug, Default)]
pub struct Kept {
    /// The last checkpoint written, if any.
    pub checkpoint: Option<Checkpoint>,
    /// The op payloads kept (not deleted by a checkpoint), in any order.
    pub ops: Vec<Arc<Op>>,
    /// The replica's identity in its cluster (`None`: a new data directory,
    /// or one written before identities).
    pub identity: Option<Identity>,
    /// The group directory: addresses of members added since the group
    /// formed (see [`group`](crate::group)).
    pub directory: Directory,
    /// The replica's record of its own seqs (see
    /// [`Write::own_seqs`](crate::Write::own_seqs)).
    pub own_seqs: OwnSeqs,
}

/// A replica rebuilt after it lost its data pulls its own earlier ops from
/// its peers for this many ticks; whatever has not come by then was lost
/// with its data (its digests then report them held, so peers collect the
/// ops above them). Late arrivals are still taken.
const RECLAIM_TICKS: u64 = 500;

impl<S: CabStorage> Node<S> {
    /// Start a node. `applied` is CAB's restart point (0 for a fresh node;
    /// see `Cab::delivered_through`).
    pub fn new(
        config: NodeConfig,
        registry: Arc<Registry>,
        storage: S,
        applied: u64,
    ) -> Result<Self, NodeError> {
        config.validate()?;
        let config = config.handed_down();
        let durability = Durability::new(&config, None);
        let timing = Timing::for_config(&config);
        let membership = membership_of(&config, Identity::founding(&config.cab.replicas), false);
        let mut node = Self::assemble(
            Replica::new(config.replica, registry)?,
            Gossip::new(config.gossip)?,
            Cab::new(config.cab, storage, applied)?,
            config.wire,
            durability,
            timing,
            membership,
        );
        node.start_stable(&config.stable);
        node.aim_at_group();
        Ok(node)
    }

    /// A node from its rooms; `committed_told` starts at what the replica
    /// already committed (gossip was told of it before).
    fn assemble(
        replica: Replica,
        gossip: Gossip,
        cab: Cab<S>,
        limits: Limits,
        durability: Durability,
        timing: Timing,
        membership: Membership,
    ) -> Self {
        let me = replica.id();
        let peers = gossip.config().peers.clone();
        let initial_group = peers.iter().copied().chain([me]).collect();
        Node {
            initial_group,
            directory: Directory::default(),
            directory_changed: false,
            group_changed: false,
            transfers: Transfers::new(me, peers),
            installed: None,
            own_floor: 0,
            reclaim_ticks: 0,
            held_wait: None,
            pull_due: true,
            rebuilt_floor: 0,
            rebuilt_held: None,
            peer_floors: BTreeMap::new(),
            reclaiming: None,
            committed_told: replica.committed_len(),
            replica,
            gossip,
            cab,
            limits,
            outbox: Vec::new(),
            early: Vec::new(),
            views: Vec::new(),
            answer_after: Default::default(),
            mpo_out: Vec::new(),
            stable: crate::stable::StableTimes::default(),
            mpo_chasing: crate::mpo::Chasing::default(),
            refused_frames: 0,
            ticks_since_adoption: 0,
            new_payloads: Vec::new(),
            voided: Vec::new(),
            durability,
            timing,
            membership,
            retained: BTreeSet::new(),
            refused_non_members: 0,
            own_origin: Default::default(),
        }
    }

    /// Start a node from what a durable driver kept (DESIGN §8, [`Kept`]):
    /// the last checkpoint (`None` before the first, or for a fresh data
    /// directory), the op payloads kept beside it (`ops`, in any order) and
    /// CAB's storage, which holds the consensus log.
    ///
    /// The replica is restored (`Replica::restore`); gossip resumes its
    /// per-origin counters at what the replica holds (checkpoint ids ∪ kept
    /// payloads, own ops included, so own broadcast seqs continue) and holds
    /// the kept payloads again for peers; CAB restarts at the checkpoint's
    /// `cab_applied` (or 0), so every id decided after it is delivered again
    /// and re-commits, in the same order, what was committed after the
    /// checkpoint. Tentative strong ops are CAB-cast again (CAB's record of
    /// what was cast is volatile). Writes are numbered from 1 again.
    ///
    /// `identity` is the stored one (`None` for a new data directory, which
    /// takes `fresh_nonce` and joins its cluster: see
    /// [`membership`](crate::membership); a directory that holds data but no
    /// identity predates identities and stays a member). `directory` is the
    /// stored group directory (see [`group`](crate::group)); the group itself
    /// is CAB's stored configuration.
    ///
    /// Refused: a storage created for another group (its raft voters differ
    /// from the configured replicas, raft id = replica id + 1, while the
    /// group never changed), or a checkpoint past the stored consensus log.
    pub fn recover(
        config: NodeConfig,
        registry: Arc<Registry>,
        storage: S,
        kept: Kept,
        fresh_nonce: u64,
    ) -> Result<Self, NodeError> {
        config.validate()?;
        let config = config.handed_down();
        let Kept {
            checkpoint,
            ops,
            identity,
            directory,
            own_seqs,
        } = kept;
        let applied = checkpoint.as_ref().map_or(0, |c| c.cab_applied);
        check_storage(&config.cab, &storage, applied)?;
        let (identity, dirty) = match identity {
            Some(stored) => (stored, false),
            None if holds_data(&storage, checkpoint.is_some() || !ops.is_empty())? => (
                Identity {
                    nonce: fresh_nonce,
                    founders: Some(Vec::new()),
                    floor: 0,
                    catch_up_to: 0,
                },
                true,
            ),
            None => (Identity::joining(fresh_nonce), true),
        };
        let membership = membership_of(&config, identity, dirty);
        let durability = Durability::new(&config, checkpoint.as_ref());
        let timing = Timing::for_config(&config);
        // Everything the replica holds, per origin: the checkpoint's
        // committed ids and the kept payloads.
        let checkpointed = checkpoint
            .as_ref()
            .map(|c| c.causal_ctx.clone())
            .unwrap_or_default();
        let mut held_ids = checkpointed.clone();
        for op in &ops {
            held_ids.insert(op.id);
        }
        let covered: Vec<OpId> = ops
            .iter()
            .map(|op| op.id)
            .filter(|id| checkpointed.contains(*id))
            .collect();
        let mut gossip =
            Gossip::restore(config.gossip, held_ids.to_records(), ops.iter().cloned())?;
        // Kept payloads the checkpoint covers are committed already: peers
        // may still pull them until garbage collection drops them, and the
        // next checkpoint deletes them once every peer has them.
        gossip.committed(covered.iter().copied());
        let replica = Replica::restore(config.replica, registry, checkpoint, ops)?;
        let cab = Cab::new(config.cab, storage, applied)?;
        let mut node = Self::assemble(
            replica,
            gossip,
            cab,
            config.wire,
            durability,
            timing,
            membership,
        );
        node.start_stable(&config.stable);
        node.retained = covered.into_iter().collect();
        node.directory = directory;
        node.aim_at_group();
        node.rebuilt_floor = node.membership.identity().floor;
        node.own_floor = node.rebuilt_floor.max(own_seqs.floor);
        // Own ops up to the reservation may have reached peers and not this
        // disk: taken back, never issued again (see [`RESERVE_AHEAD`]).
        node.durability.own_seqs = own_seqs;
        node.durability.reserved_durable = own_seqs.reserved;
        let issued = node.replica.last_issued_seq();
        let mut reclaim = own_seqs.reclaiming;
        if own_seqs.reserved > issued {
            reclaim = Some(match reclaim {
                Some((after, through)) => (after.min(issued), through.max(own_seqs.reserved)),
                None => (issued, own_seqs.reserved),
            });
        }
        if node.durability.forget_sent_ops {
            reclaim = None;
        }
        if let Some((after, through)) = reclaim {
            node.own_floor = node.own_floor.max(through);
            node.reclaiming = Some((after, through));
        }
        node.cab.catch_up_to(node.membership.identity().catch_up_to);
        node.reclaim_own_ops();
        node.adopt_tentative_strong_ops();
        Ok(node)
    }

    /// A replica rebuilt after it lost its data, or restarted after a crash
    /// took back ops it had sent (see [`RESERVE_AHEAD`](crate::RESERVE_AHEAD)),
    /// takes back its own ops up to [`Node::own_floor`] from its peers, in any
    /// order; those no peer kept were lost with its disk.
    pub(crate) fn reclaim_own_ops(&mut self) {
        let rebuilt = (self.rebuilt_floor > 0).then_some((0, self.rebuilt_floor));
        let range = match (self.reclaiming, rebuilt) {
            (Some((a, t)), Some((b, u))) => Some((a.min(b), t.max(u))),
            (r, b) => r.or(b),
        };
        if let Some((after, through)) = range {
            let own = self.id();
            let replica = &self.replica;
            self.gossip
                .open_range(own, after, through, |id| replica.has_held(id));
            self.replica.reclaim_own(through);
            self.take_gossip_output();
            self.reclaim_ticks = RECLAIM_TICKS;
        }
    }

    /// Pull own ops not taken back yet; when time is up, close the range
    /// and have the committed order void those no peer gave back (later own
    /// ops that reached peers may name them in their contexts).
    pub(crate) fn reclaim_tick(&mut self, now_us: u64) {
        if self.reclaim_ticks == 0 {
            return;
        }
        self.reclaim_ticks -= 1;
        let own = self.id();
        if self.reclaim_ticks > 0 {
            let missing = self.gossip.loose_missing(own, PULL_IDS_MAX);
            if !missing.is_empty() {
                self.gossip.pull(&missing);
                return;
            }
        }
        self.reclaim_ticks = 0;
        let lost: Vec<u64> = self
            .gossip
            .loose_missing(own, usize::MAX)
            .into_iter()
            .map(|id| id.seq)
            .collect();
        self.gossip.close_range(own);
        self.void_own_seqs(&lost, now_us);
        // Settled: the void ops are written with the record that says so.
        self.reclaiming = None;
        self.turn();
    }
}

/// The membership state machine of a node with `config`.
fn membership_of(config: &NodeConfig, identity: Identity, dirty: bool) -> Membership {
    let me = config.replica.id;
    let peers = config
        .cab
        .replicas
        .iter()
        .copied()
        .filter(|r| *r != me)
        .collect();
    let mut m = Membership::new(
        me,
        peers,
        identity,
        dirty,
        config.planted.has(Bug::AmnesiacVoter),
    );
    m.rebuild_despite_data_loss = config.rebuild_despite_data_loss;
    m
}

/// Whether a data directory holds anything of a replica that took part:
/// consensus state, a checkpoint or payloads (`kept`).
fn holds_data<S: CabStorage>(storage: &S, kept: bool) -> Result<bool, NodeError> {
    let state = storage.initial_state().map_err(CabError::from)?;
    let last = storage.last_index().map_err(CabError::from)?;
    Ok(kept || state.hard_state.term > 0 || state.hard_state.commit > 0 || last > 0)
}

/// CAB's storage must belong to the configured group and hold the log up to
/// the restart point (the library would abort otherwise).
fn check_storage<S: CabStorage>(
    config: &CabConfig,
    storage: &S,
    applied: u64,
) -> Result<(), NodeError> {
    let state = storage.initial_state().map_err(CabError::from)?;
    let mut stored = state.conf_state.voters.clone();
    stored.sort_unstable();
    // CAB's raft id of a replica is its id + 1 (raft reserves 0).
    let mut configured: Vec<u64> = config.replicas.iter().map(|r| u64::from(r.0) + 1).collect();
    configured.sort_unstable();
    // Once the group changed, the configuration names only where it began.
    if storage.conf().index == 0 && stored != configured {
        return Err(NodeError::Inconsistent(format!(
            "the CAB storage was created for raft voters {stored:?}, but the configured \
             replicas need {configured:?} (raft id = replica id + 1)"
        )));
    }
    log_restarts_at(storage, applied)
}

/// The log in `storage` can restart at a checkpoint taken at consensus
/// index `applied`: it is committed as far, and not compacted past it. A
/// restart needs this of what is durable, so every write that stores a
/// checkpoint stores the log writes that make it hold.
pub(crate) fn log_restarts_at<S: CabStorage>(storage: &S, applied: u64) -> Result<(), NodeError> {
    let commit = storage
        .initial_state()
        .map_err(CabError::from)?
        .hard_state
        .commit;
    let last = storage.last_index().map_err(CabError::from)?;
    if applied > commit || applied > last {
        return Err(NodeError::Inconsistent(format!(
            "the checkpoint was taken at consensus index {applied}, past the stored log \
             (commit {commit}, last index {last})"
        )));
    }
    let compacted = storage.first_index().map_err(CabError::from)? - 1;
    if applied < compacted {
        return Err(NodeError::Inconsistent(format!(
            "the checkpoint was taken at consensus index {applied}, but the stored log was \
             compacted through {compacted}"
        )));
    }
    Ok(())
}
