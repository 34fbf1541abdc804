//! One Creek replica as a deterministic, sans-IO node: the replica protocol
//! (`creek-core`) wired to gossip (`creek-gossip`, the paper's RB) and to
//! conditional atomic broadcast (`creek-cab`). CAB accepts and proposes an id
//! once the replica holds its payloads (`Replica::holds_payloads`) and
//! delivers it once the core's `check_dep` holds.
//!
//! The server, the simulator and the test network drive the same [`Node`]:
//! they hand it invocations, peer messages and ticks, run the executions it
//! hands out, and then [`Node::drive`] carries out its [`Ready`] through
//! their [`Driver`]: writes to persist, messages that may leave now or once
//! a write is durable, views for clients (the cycle is in [`driver`], the
//! hold rule in [`ready`]). Durability is an output of the node, so
//! a driver only does I/O; a simulated crash that loses what was not yet
//! durable and restarts through [`Node::recover`] tests exactly what
//! `creek serve` runs. This crate does no I/O itself.
#![deny(missing_docs)]

mod answer_after;
mod config;
pub mod driver;
mod durability;
pub mod group;
mod install;
mod invariants;
pub mod membership;
pub mod moves;
pub mod mpo;
pub mod own_origin;
pub mod ready;
mod recovery;
pub mod stable;
pub mod timing;
pub mod transfer;
mod wiring;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use creek_cab::{Cab, CabStats, CabStorage};
use creek_core::{Checkpoint, Directory, Op, OpId, Replica, ReplicaId, View};
use creek_gossip::{Gossip, GossipStats};
use creek_wire::{Limits, PeerMessage};
use durability::Durability;
use membership::Membership;
use transfer::Transfers;

pub use answer_after::AnswerAfter;
pub use config::{
    NodeConfig, NodeError, CHECKPOINT_OPS, CHECKPOINT_REWRITE_RATIO, PENDING_WRITES_MAX,
    PLANTED_BUGS, STRONG_PENDING_MAX, WEAK_PENDING_MAX,
};
pub use driver::Driver;
pub use durability::RESERVE_AHEAD;
pub use group::GroupError;
pub use membership::{Identity, Standing};
pub use mpo::MpoMessage;
pub use ready::{CheckpointJob, HoldQueue, OwnSeqs, Ready, Write};
pub use recovery::Kept;
pub use timing::LinkTiming;
use timing::Timing;
pub use transfer::{FetchStatus, TransferDone, TransferJob, TransferStats};

/// One replica.
pub struct Node<S: CabStorage> {
    replica: Replica,
    gossip: Gossip,
    cab: Cab<S>,
    limits: Limits,
    /// How much of the committed order gossip has been told about (a
    /// global position, see `Replica::committed_len`).
    committed_told: u64,
    outbox: Vec<(ReplicaId, PeerMessage)>,
    /// Messages that may leave before this replica's pending writes are
    /// durable (see [`Ready::early`]).
    early: Vec<(ReplicaId, PeerMessage)>,
    views: Vec<View>,
    /// Preliminary views held until their op is durable enough
    /// ([`AnswerAfter`]).
    answer_after: answer_after::Waiting,
    /// MPO messages for other shards (see [`mpo`]).
    mpo_out: Vec<MpoMessage>,
    /// Stable times (see [`stable`]).
    stable: stable::StableTimes,
    /// What the committed order waits on, and when to ask next
    /// ([`Node::mpo_chase`]).
    mpo_chasing: mpo::Chasing,
    /// Frames refused by the decoder.
    refused_frames: u64,
    /// Ticks since the last adoption sweep.
    ticks_since_adoption: u64,
    /// Payloads newly accepted since the last write.
    new_payloads: Vec<Arc<Op>>,
    /// Ops the committed order voided since the last write: their payloads,
    /// if stored, are deleted with it (no replica needs them any more).
    voided: Vec<OpId>,
    durability: Durability,
    timing: Timing,
    membership: Membership,
    /// Committed payloads a checkpoint covers but kept on disk because some
    /// peer has not reported holding them (a peer that was down must still
    /// get them by gossip, also after this replica restarts); deleted by a
    /// later checkpoint once every peer has them (or past
    /// [`RETAINED_MAX`](durability::RETAINED_MAX)).
    retained: BTreeSet<OpId>,
    /// Consensus and gossip frames dropped because their sender is not a
    /// member of this cluster in good standing (or this replica is not one).
    refused_non_members: u64,
    /// Refused claims about this replica's own ops (see [`own_origin`]).
    own_origin: own_origin::OwnOrigin,
    /// State transfer (see [`transfer`]).
    transfers: Transfers,
    /// A checkpoint installed from a peer, for the next write (with the log
    /// writes that compact the log to it, so a restart finds both or
    /// neither).
    installed: Option<Checkpoint>,
    /// The last own seq of a previous life that may have reached peers
    /// without reaching this replica's disk — after a rebuild, every seq
    /// issued before the data was lost; after a crash, every seq the
    /// reservation covered (see [`RESERVE_AHEAD`]) — told to peers in
    /// hellos (0: none).
    own_floor: u64,
    /// Ticks left to take back own ops up to `own_floor` before the rest
    /// counts as lost (see [`RECLAIM_TICKS`](recovery::RECLAIM_TICKS)).
    reclaim_ticks: u64,
    /// Rebuilt after losing its data: the last own seq from before, all of
    /// whose ops it takes back (0 otherwise).
    rebuilt_floor: u64,
    /// Rebuilt in this run: the highest own seq a peer held then. The ops
    /// above it that this replica issued before were lost with its data.
    rebuilt_held: Option<u64>,
    /// The floor each peer last said hello with (see [`Node::own_floor`]):
    /// its loose range is opened again when an installed checkpoint
    /// replaces the gossip state, which holds loose ranges in memory only.
    peer_floors: BTreeMap<ReplicaId, u64>,
    /// The log index this replica waits on for payloads (see
    /// [`Node::watch_held`]), and for how many ticks it has.
    held_wait: Option<(u64, u64)>,
    /// After a crash: the own seqs being taken back, recorded on disk until
    /// the committed order settles them (see [`OwnSeqs::reclaiming`]).
    reclaiming: Option<(u64, u64)>,
    /// A tick passed since the last [`Node::pull_missing`].
    pull_due: bool,
    /// The group's initial members (the configuration's).
    initial_group: Vec<ReplicaId>,
    /// Addresses of members added since the group formed (see [`group`]).
    directory: Directory,
    /// The directory changed: written with the next write.
    directory_changed: bool,
    /// The group changed: the driver is told in the next [`Ready`].
    group_changed: bool,
}

impl<S: CabStorage> Node<S> {
    /// Preliminary views held until their op is durable enough
    /// ([`AnswerAfter`]).
    pub fn views_held(&self) -> usize {
        self.answer_after.held()
    }

    /// This replica.
    pub fn id(&self) -> ReplicaId {
        self.replica.id()
    }

    /// A node-loop turn longer than this is a stall of this replica's own
    /// loop: tell [`Node::stalled`].
    pub fn stall_us(&self) -> u64 {
        self.timing.stall_us()
    }

    /// The driver's loop was held up (a turn longer than
    /// [`Node::stall_us`]): the link timing takes no sample and sends no
    /// echo that may hold the stall (`creek_node::timing`).
    pub fn stalled(&mut self) {
        self.timing.stalled();
    }

    /// The measured round trips and the consensus timing they led to (see
    /// [`timing`]).
    pub fn link_timing(&self) -> LinkTiming {
        self.timing.status()
    }

    /// The replica.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// Record the changes executions make, for watchers (see
    /// [`Replica::record_changes`]); kept across a rebuild by state
    /// transfer.
    pub fn record_changes(&mut self, committed: bool, tentative: bool) {
        self.replica.record_changes(committed, tentative);
    }

    /// The changes recorded since the last call ([`Replica::take_changes`]).
    pub fn take_changes(&mut self) -> Vec<creek_core::Change> {
        self.replica.take_changes()
    }

    /// CAB.
    pub fn cab(&self) -> &Cab<S> {
        &self.cab
    }

    /// Gossip counters.
    pub fn gossip_stats(&self) -> GossipStats {
        self.gossip.stats()
    }

    /// CAB counters.
    pub fn cab_stats(&self) -> CabStats {
        self.cab.stats()
    }

    /// Entries held in CAB's consensus (raft) log: its last index (unstable
    /// entries included) less the storage's first index, plus one; 0 when it
    /// holds none. Read-only, for `Status` and soak benchmarks watching the
    /// log's growth.
    pub fn raft_log_entries(&self) -> u64 {
        let (last, _, _) = self.cab.log_mark();
        // `LogStore` and `MemCabStorage` always answer; an error would mean
        // an unreadable log, which holds nothing countable here.
        self.cab
            .store()
            .first_index()
            .map_or(0, |first| (last + 1).saturating_sub(first))
    }

    /// Frames refused by the decoder.
    pub fn refused_frames(&self) -> u64 {
        self.refused_frames
    }

    /// Where this replica stands in its cluster (see [`membership`]).
    pub fn standing(&self) -> Standing {
        self.membership.standing()
    }

    /// Rebuilt after it lost its data, and not yet holding the entries a
    /// peer held then (`Cab::catch_up_to`): until it does, it holds less
    /// than it acknowledged, and it neither campaigns nor helps a shorter
    /// log win.
    pub fn catching_up(&self) -> bool {
        self.cab.catching_up()
    }

    /// Taking its own ops back from its peers after a restart or a rebuild
    /// (see [`RESERVE_AHEAD`]): until the range closes and the committed
    /// order voids those no peer gave back, its later own ops wait behind
    /// the gap at every peer, so the replica is not done.
    pub fn reclaiming(&self) -> bool {
        self.reclaim_ticks > 0
    }

    /// The own seqs a durable write reserved (see [`RESERVE_AHEAD`]): an
    /// op of this replica with a seq up to it keeps its id after a crash —
    /// the restarted replica issues past it — so it may leave before its
    /// own write is durable.
    pub fn seq_reserved(&self) -> u64 {
        self.durability.reserved_durable
    }

    /// This replica's identity, as last handed out to be written.
    pub fn identity(&self) -> &Identity {
        self.membership.identity()
    }

    /// Rebuilt after losing its data, in this run: the highest own seq a
    /// peer held then (the ops this replica issued above it before were lost
    /// with its data; their ids are not issued again).
    pub fn rebuilt_held_seq(&self) -> Option<u64> {
        self.rebuilt_held
    }

    /// Peers that said they lost their data.
    pub fn lost_peers(&self) -> Vec<ReplicaId> {
        self.membership.lost_peers().iter().copied().collect()
    }

    /// Peers that belong to another cluster.
    pub fn foreign_peers(&self) -> Vec<ReplicaId> {
        self.membership.foreign_peers()
    }

    /// Whether a majority of the group is known to have lost its data
    /// (strong ops are then refused).
    pub fn quorum_lost(&self) -> bool {
        self.membership.quorum_lost()
    }

    /// Membership changes since the last call, for the driver's log.
    pub fn take_membership_events(&mut self) -> Vec<membership::Event> {
        self.membership.take_events()
    }

    /// Committed payloads kept on disk past a checkpoint for peers that have
    /// not reported holding them.
    pub fn retained_payloads(&self) -> usize {
        self.retained.len()
    }

    /// Consensus and gossip frames refused because their sender was not a
    /// member of this cluster in good standing (or this replica is not one).
    pub fn refused_non_members(&self) -> u64 {
        self.refused_non_members
    }

    /// Whether gossip holds the payload of `id` (to answer peers).
    pub fn gossip_holds(&self, id: OpId) -> bool {
        self.gossip.op(id).is_some()
    }

    /// Gossip's per-origin delivered counters.
    pub fn gossip_delivered(&self) -> Vec<(ReplicaId, u64)> {
        self.gossip.delivered()
    }

    /// State-transfer counters.
    pub fn transfer_stats(&self) -> TransferStats {
        self.transfers.stats()
    }

    /// The checkpoint being fetched from a peer, if any.
    pub fn fetch_status(&self) -> Option<FetchStatus> {
        self.transfers.fetch_status()
    }

    /// CAB's restart point (persist it with the replica's state).
    pub fn cab_delivered_through(&self) -> u64 {
        self.cab.delivered_through()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use creek_cab::MemCabStorage;
    use creek_core::{InvokeError, Request, View};
    use creek_exec::ProcCall;
    use creek_procs::Registry;
    use creek_types::planted::Bug;
    use creek_types::value::{encode_args, Value};

    /// A disk that falls behind pushes back on clients: at
    /// `pending_writes_max` writes not yet durable, invocations are refused
    /// with `DiskBehind`, and accepted again once the writes are durable.
    #[test]
    fn a_disk_that_falls_behind_refuses_clients_until_it_catches_up() {
        let me = ReplicaId(1);
        let mut config = NodeConfig::for_group(me, &[me]);
        config.pending_writes_max = 8;
        let storage = MemCabStorage::new(vec![creek_cab::raft_id(me)]);
        let registry = Arc::new(Registry::with_builtins());
        let identity = Identity::founding(&[me]);
        let mut node = Node::recover(
            config,
            registry,
            storage,
            Kept {
                identity: Some(identity),
                ..Kept::default()
            },
            7,
        )
        .expect("recovers");
        let put = |i: u64| {
            let key = Value::Bytes(Bytes::from(format!("k{i}")));
            let args = encode_args(&[key, Value::Bytes(Bytes::from_static(b"v"))]);
            Request::weak(ProcCall::new("kv.put", args))
        };
        let mut refused = None;
        for i in 0..100 {
            match node.invoke(put(i), i) {
                Ok(_) => {
                    node.execute_all();
                    let _ = node.ready();
                }
                Err(e) => {
                    refused = Some((i, e));
                    break;
                }
            }
        }
        let (at, e) = refused.expect("refused before 100 writes");
        assert!(matches!(e, InvokeError::DiskBehind(8)), "{e}");
        assert_eq!(node.written(), 8, "refused at the limit (after {at} ops)");
        // The disk catches up: accepted again.
        node.on_durable(node.written());
        assert!(node.invoke(put(1000), 1000).is_ok());
    }

    /// Without a leader, strong ops cannot be ordered: at
    /// `strong_pending_max` of them waiting, new strong invocations are
    /// refused with `StrongBacklog`; weak ones are still taken.
    #[test]
    fn strong_ops_that_cannot_be_ordered_are_bounded() {
        let me = ReplicaId(1);
        let group = [me, ReplicaId(2), ReplicaId(3)];
        let mut config = NodeConfig::for_group(me, &group);
        config.strong_pending_max = 4;
        let storage = MemCabStorage::new(group.iter().map(|r| creek_cab::raft_id(*r)).collect());
        let registry = Arc::new(Registry::with_builtins());
        let mut node = Node::new(config, registry, storage, 0).expect("starts");
        let put = |i: u64, strong: bool| {
            let key = Value::Bytes(Bytes::from(format!("k{i}")));
            let args = encode_args(&[key, Value::Bytes(Bytes::from_static(b"v"))]);
            let call = ProcCall::new("kv.put", args);
            if strong {
                Request::strong(call)
            } else {
                Request::weak(call)
            }
        };
        let mut refused = None;
        for i in 0..100 {
            match node.invoke(put(i, true), i) {
                Ok(_) => {
                    node.execute_all();
                    let _ = node.ready();
                    node.on_durable(node.written());
                }
                Err(e) => {
                    refused = Some((i, e));
                    break;
                }
            }
        }
        let (at, e) = refused.expect("refused before 100 strong ops");
        assert!(matches!(e, InvokeError::StrongBacklog(4)), "{e}");
        assert_eq!(at, 4, "refused at the bound");
        assert_eq!(node.cab().unconfirmed(), 4);
        assert!(
            node.invoke(put(1000, false), 1000).is_ok(),
            "weak ops are taken"
        );
    }

    /// With a leader, a replica takes weak ops only while fewer than
    /// `weak_pending_max` of its own wait to be committed; once they
    /// commit it takes them again. Without one (cut off from the group),
    /// it takes them past the bound.
    #[test]
    fn weak_ops_past_what_the_group_commits_are_refused_while_a_leader_orders() {
        let weak_put = |i: u64| {
            let key = Value::Bytes(Bytes::from(format!("k{i}")));
            let args = encode_args(&[key, Value::Bytes(Bytes::from_static(b"v"))]);
            Request::weak(ProcCall::new("kv.put", args))
        };
        let group = [ReplicaId(1), ReplicaId(2), ReplicaId(3)];
        let voters: Vec<u64> = group.iter().map(|r| creek_cab::raft_id(*r)).collect();
        let mut nodes: Vec<Node<MemCabStorage>> = group
            .iter()
            .map(|me| {
                let mut config = NodeConfig::for_group(*me, &group);
                config.weak_pending_max = 4;
                let registry = Arc::new(Registry::with_builtins());
                Node::new(config, registry, MemCabStorage::new(voters.clone()), 0).expect("starts")
            })
            .collect();
        // Every node's messages delivered at once, every write durable.
        let pump = |nodes: &mut Vec<Node<MemCabStorage>>, now: &mut u64, ticks: u64| {
            for _ in 0..ticks {
                *now += 10_000;
                let mut sent = Vec::new();
                for n in nodes.iter_mut() {
                    n.tick(*now);
                    n.execute_all();
                    let r = n.ready();
                    n.on_durable(n.written());
                    let from = n.id();
                    sent.extend(r.early.into_iter().map(|m| (from, m)));
                    sent.extend(r.messages.into_iter().map(|m| (from, m)));
                    sent.extend(r.held.into_iter().map(|m| (from, m)));
                }
                for (from, (to, m)) in sent {
                    nodes[usize::from(to.0) - 1].on_message(from, m);
                }
            }
        };
        let mut now = 0;
        pump(&mut nodes, &mut now, 200);
        assert!(nodes.iter().any(|n| n.cab().is_leader()));
        let n = &mut nodes[0];
        assert!(n.cab().leader().is_some());
        // Nothing delivered meanwhile: nothing commits.
        for i in 0..4 {
            n.invoke(weak_put(i), now).expect("taken under the bound");
        }
        let e = n
            .invoke(weak_put(4), now)
            .expect_err("refused at the bound");
        assert!(matches!(e, InvokeError::WeakBacklog(4)), "{e}");
        // The stabilizer has them committed: taken again.
        pump(&mut nodes, &mut now, 50);
        assert_eq!(nodes[0].replica().own_uncommitted(), 0);
        nodes[0]
            .invoke(weak_put(5), now)
            .expect("taken once committed");

        // A replica that knows no leader.
        let me = ReplicaId(1);
        let mut config = NodeConfig::for_group(me, &group);
        config.weak_pending_max = 4;
        let registry = Arc::new(Registry::with_builtins());
        let mut node = Node::new(config, registry, MemCabStorage::new(voters), 0).expect("starts");
        for i in 0..20 {
            node.invoke(weak_put(i), i)
                .expect("cut off: taken past the bound");
        }
        assert_eq!(node.replica().own_uncommitted(), 20);
    }

    /// A weak op's preliminary view asked to wait for durability: at
    /// `Local` it leaves once the replica's write is durable, at `Majority`
    /// once a peer's digest reports holding it too; cut off from its
    /// peers, a `Majority` view stays held.
    #[test]
    fn a_preliminary_view_waits_for_the_durability_its_invocation_asked() {
        let weak_put = |key: &str| {
            let args = encode_args(&[Value::from(key), Value::from("v")]);
            Request::weak(ProcCall::new("kv.put", args))
        };
        let group = [ReplicaId(1), ReplicaId(2), ReplicaId(3)];
        let voters: Vec<u64> = group.iter().map(|r| creek_cab::raft_id(*r)).collect();
        let mut nodes: Vec<Node<MemCabStorage>> = group
            .iter()
            .map(|me| {
                let config = NodeConfig::for_group(*me, &group);
                let registry = Arc::new(Registry::with_builtins());
                Node::new(config, registry, MemCabStorage::new(voters.clone()), 0).expect("starts")
            })
            .collect();
        // One step of every node: replica 1's writes made durable only if
        // `durable`, its messages delivered only if `linked`; the views it
        // released.
        let step =
            |nodes: &mut Vec<Node<MemCabStorage>>, now: &mut u64, durable: bool, linked: bool| {
                *now += 10_000;
                let mut sent = Vec::new();
                let mut views = Vec::new();
                for n in nodes.iter_mut() {
                    n.tick(*now);
                    n.execute_all();
                    let r = n.ready();
                    let from = n.id();
                    if from == ReplicaId(1) {
                        views.extend(r.views);
                        if durable {
                            n.on_durable(n.written());
                        }
                        if !linked {
                            continue;
                        }
                    } else {
                        n.on_durable(n.written());
                    }
                    sent.extend(r.early.into_iter().map(|m| (from, m)));
                    sent.extend(r.messages.into_iter().map(|m| (from, m)));
                    sent.extend(r.held.into_iter().map(|m| (from, m)));
                }
                for (from, (to, m)) in sent {
                    if linked || to != ReplicaId(1) {
                        nodes[usize::from(to.0) - 1].on_message(from, m);
                    }
                }
                views
            };
        let mut now = 0;
        for _ in 0..200 {
            step(&mut nodes, &mut now, true, true);
        }
        let invoke = |n: &mut Node<MemCabStorage>, key: &str, after, now| {
            n.invoke_answering(weak_put(key), after, now)
                .expect("taken")
        };
        // Cut off, and its disk not done yet: only the plain view leaves.
        let plain = invoke(&mut nodes[0], "plain", AnswerAfter::Execution, now);
        let local = invoke(&mut nodes[0], "local", AnswerAfter::Local, now);
        let majority = invoke(&mut nodes[0], "majority", AnswerAfter::Majority, now);
        let seen = |views: &[View]| views.iter().map(|v| v.handle).collect::<Vec<_>>();
        let first = step(&mut nodes, &mut now, false, false);
        assert_eq!(seen(&first), [plain]);
        assert_eq!(nodes[0].views_held(), 2);
        // Its write durable: the local one leaves; the majority one waits
        // for a peer, which hears nothing.
        let mut later = Vec::new();
        for _ in 0..20 {
            later.extend(step(&mut nodes, &mut now, true, false));
        }
        assert_eq!(seen(&later), [local]);
        assert_eq!(nodes[0].views_held(), 1);
        // Linked again: a peer holds it, reports so, and the view leaves.
        let mut healed = Vec::new();
        for _ in 0..20 {
            healed.extend(step(&mut nodes, &mut now, true, true));
        }
        assert_eq!(seen(&healed), [majority]);
        assert_eq!(nodes[0].views_held(), 0);
    }

    /// Group changes a single-replica group's leader refuses, and one it
    /// takes: a learner added under a new id, with its addresses kept in
    /// the directory and the id counted as used.
    #[test]
    fn group_changes_are_checked_and_a_learner_is_added() {
        use creek_cab::{ChangeRefused, MemberChange};
        let me = ReplicaId(1);
        let config = NodeConfig::for_group(me, &[me]);
        let storage = MemCabStorage::new(vec![creek_cab::raft_id(me)]);
        let registry = Arc::new(Registry::with_builtins());
        let mut node = Node::new(config, registry, storage, 0).expect("starts");
        for t in 0..100 {
            node.tick(t * 1000);
            let _ = node.ready();
        }
        assert!(node.cab().is_leader());
        let addrs = || {
            Some(creek_core::Addrs {
                peer: "127.0.0.1:7102".into(),
                client: "127.0.0.1:7002".into(),
            })
        };
        let refused = |node: &mut Node<MemCabStorage>, change, addrs| {
            node.change_group(change, addrs).expect_err("refused")
        };
        assert_eq!(
            refused(&mut node, MemberChange::Remove(me), None),
            GroupError::Refused(ChangeRefused::LastVoter(me))
        );
        assert_eq!(
            refused(&mut node, MemberChange::AddLearner(me), addrs()),
            GroupError::Refused(ChangeRefused::AlreadyMember(me))
        );
        assert_eq!(
            refused(&mut node, MemberChange::Remove(ReplicaId(3)), None),
            GroupError::Refused(ChangeRefused::NotA(ReplicaId(3), "member"))
        );
        assert_eq!(
            refused(&mut node, MemberChange::AddLearner(ReplicaId(2)), None),
            GroupError::NoAddress(ReplicaId(2))
        );
        assert_eq!(node.group().members(), vec![me], "nothing changed");

        node.change_group(MemberChange::AddLearner(ReplicaId(2)), addrs())
            .expect("proposed");
        for t in 100..110 {
            node.tick(t * 1000);
            let _ = node.ready();
        }
        let group = node.group();
        assert_eq!(group.voters, vec![me]);
        assert_eq!(group.learners, vec![ReplicaId(2)]);
        assert_eq!(group.directory.max_id, 2);
        assert_eq!(
            group.directory.addrs[&ReplicaId(2)],
            addrs().expect("addrs")
        );
        assert!(group.conf_index > 0);
        // Removed later, its id never returns.
        node.change_group(MemberChange::Remove(ReplicaId(2)), None)
            .expect("proposed");
        for t in 110..120 {
            node.tick(t * 1000);
            let _ = node.ready();
        }
        assert_eq!(node.group().members(), vec![me]);
        assert_eq!(
            refused(&mut node, MemberChange::AddLearner(ReplicaId(2)), addrs()),
            GroupError::IdUsed {
                id: ReplicaId(2),
                max: 2
            }
        );
    }

    /// A bug-planting switch is refused unless the build has them.
    #[test]
    fn planted_bugs_need_the_cargo_feature() {
        let group = [ReplicaId(1), ReplicaId(2), ReplicaId(3)];
        let mut config = NodeConfig::for_group(ReplicaId(1), &group);
        assert!(config.validate().is_ok());
        let planted = config.planted.plant(Bug::SendBeforeDurable);
        assert_eq!(planted.is_ok(), PLANTED_BUGS);
        if let Err(e) = planted {
            assert_eq!(e.to_string(), creek_core::PLANTED_BUGS_OFF);
        }
        assert_eq!(config.planted.has(Bug::SendBeforeDurable), PLANTED_BUGS);
        assert!(config.validate().is_ok());
        // Planted once at the node, the bug reaches the rooms that read it.
        config.planted.plant(Bug::StableBeforeDurable).ok();
        config.planted.plant(Bug::IgnoreCausalContext).ok();
        let config = config.handed_down();
        assert_eq!(
            config.cab.planted.has(Bug::StableBeforeDurable),
            PLANTED_BUGS
        );
        assert_eq!(
            config.replica.planted.has(Bug::IgnoreCausalContext),
            PLANTED_BUGS
        );
        assert!(config.cab.validate().is_ok());
        assert!(config.replica.validate().is_ok());
    }
}
