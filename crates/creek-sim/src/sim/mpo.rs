//! Operations across shards in the simulator (docs/cross-shard.md): what
//! a shard's node loop does for an MPO besides running its node — forward
//! the MPO's copy to each other involved shard, have the directory
//! sequence it, tell each shard's replicas their index, carry the values
//! each shard read (its confirmation) to the others.
//!
//! Messages travel the simulated network (loss, partitions, delays). What
//! a lost message or a crash leaves undone, a sweep every [`SWEEP_US`]
//! does again, from what the replicas hold: a shard none of whose
//! replicas holds a copy gets one forwarded again (a second copy commits as
//! a no-op), a replica at an MPO's turn that misses a shard's reads is
//! sent them (any replica of that shard answers from its record). An MPO
//! is forwarded
//! and sequenced only once another replica of the origin's shard holds its
//! op: a replica that crashes may issue an id again that no peer saw, and
//! an MPO's id must name one MPO.
//!
//! The simulator also keeps what a checker needs to replay each shard's
//! committed order: every shard's reads for every MPO (every replica of a
//! shard must hand out the same values) and the indices the directory
//! gave.

use std::collections::{BTreeMap, BTreeSet};

use creek_core::ViewKind;
use creek_node::MpoMessage;
use creek_procs::builtins::directory;
use creek_procs::mpo::{Inputs, MpoCall, MpoId, Reads, RUN};
use creek_shard::RouteError;
use creek_types::value::encode_args;

use super::*;
use crate::replica::MpoInput;

/// How often the simulator looks for MPO work a lost message or a crash
/// left undone.
pub(super) const SWEEP_US: u64 = 10_000;

/// How often a new MPO's origin looks whether its op may leave (another
/// replica of its shard holds it), as a node's hold rule releases a
/// message once the write it depends on is durable.
const RELEASE_POLL_US: u64 = 100;

/// The `client` of the sequencer's ops (`mpo.sequence` at the directory)
/// in the history: each op is a session of its own, numbered down from
/// here (to [`SEQUENCER_CLIENTS`] of them, then again).
pub(super) const SEQUENCER_CLIENT: u32 = u32::MAX - 2;

/// How many session numbers the sequencer's ops take.
pub(super) const SEQUENCER_CLIENTS: u32 = 1 << 30;

/// Whether a history record's client is the sequencer's.
pub(super) fn is_sequencer(client: u32) -> bool {
    (SEQUENCER_CLIENT - SEQUENCER_CLIENTS + 1..=SEQUENCER_CLIENT).contains(&client)
}

/// A message between shards about an MPO.
#[derive(Clone, Debug)]
pub(super) enum MpoNet {
    /// A shard's copy of an MPO, for a replica of that shard to invoke.
    Copy(ProcCall),
    /// An input for the replica.
    Input(MpoInput),
}

/// One MPO the simulator drives.
#[derive(Debug)]
struct Track {
    /// The MPO as the origin's shard runs it.
    call: MpoCall,
    /// The client's call as the origin received it (request id, level).
    client_call: ProcCall,
    /// The origin replica.
    origin: usize,
    /// The history record of the client's op.
    record: usize,
    /// Another replica of the origin's shard holds the op: it may leave.
    released: bool,
    /// Shards where a replica committed it.
    committed: BTreeSet<u32>,
}

/// The simulator's MPO bookkeeping.
#[derive(Debug, Default)]
pub(super) struct MpoState {
    tracks: BTreeMap<MpoId, Track>,
    /// Sequencer ops in flight, by history record.
    sequencing: BTreeMap<usize, MpoId>,
    /// The values each shard's replicas handed out for each MPO.
    pub(super) reads: BTreeMap<(MpoId, u32), Reads>,
    /// The indices the directory gave each MPO.
    pub(super) indices: BTreeMap<MpoId, BTreeMap<u32, u64>>,
    /// Replicas of one shard that handed out different reads for an MPO.
    pub(super) violations: Vec<String>,
    /// Sequencer ops issued.
    sequenced_ops: u64,
    /// What each replica's committed order last waited on, as answered.
    answered: BTreeMap<usize, (MpoId, Vec<u32>)>,
    /// MPOs invoked, and completed on every shard.
    pub(super) started: u64,
    pub(super) completed: u64,
}

impl Sim {
    /// A client's op whose keys span shards: as an MPO, the call its
    /// origin (on the shard owning its first key) runs, and that shard;
    /// `None` if the run makes no MPOs or the keys cannot make one.
    pub(super) fn as_mpo(&self, map: &ShardMap, call: &ProcCall) -> Option<(usize, ProcCall)> {
        if self.cfg.cross_shard <= 0.0 {
            return None;
        }
        let keys = self.workload.route_keys(call);
        let mut parts: BTreeMap<u32, Vec<Bytes>> = BTreeMap::new();
        for (ks, key) in &keys {
            if ks.is_some() {
                return None; // keyspace keys: not yet
            }
            let owner = u32::from(map.owner(None, key).0);
            parts.entry(owner).or_default().push(key.clone());
        }
        let first = u32::from(map.owner(None, &keys.first()?.1).0);
        let parts = parts
            .into_iter()
            .map(|(shard, keys)| creek_procs::mpo::Part { shard, keys })
            .collect();
        let mpo = MpoCall::new(MpoId::UNSET, first, parts, &call.name, call.args.clone()).ok()?;
        Some((first as usize, mpo.call(call)))
    }

    /// Whether a route refusal is one an MPO would serve.
    pub(super) fn spans(&self, e: &RouteError) -> bool {
        self.cfg.cross_shard > 0.0 && matches!(e, RouteError::Spans { .. })
    }

    /// Replica `i` took MPO op `id` from a client (history record
    /// `record`): drive it from now on.
    pub(super) fn mpo_invoked(&mut self, i: usize, id: OpId, record: usize) {
        let r = &self.history.ops[record];
        let Ok(call) = MpoCall::decode(&r.call.args) else {
            return;
        };
        let mpo = MpoId {
            origin: u64::from(id.origin.0),
            seq: id.seq,
        };
        let client_call = r.call.clone();
        self.mpo.started += 1;
        self.schedule(self.now + RELEASE_POLL_US, Ev::MpoRelease { mpo });
        self.mpo.tracks.insert(
            mpo,
            Track {
                call: MpoCall { id: mpo, ..call },
                client_call,
                origin: i,
                record,
                released: false,
                committed: BTreeSet::new(),
            },
        );
    }

    /// Replica `i`'s MPO messages: each shard's reads to every replica of
    /// the shards that wait for them.
    pub(super) fn mpo_out(&mut self, i: usize, messages: Vec<MpoMessage>) {
        for m in messages {
            match m {
                MpoMessage::Reads {
                    mpo,
                    from,
                    to,
                    reads,
                } => {
                    match self.mpo.reads.get(&(mpo, from)) {
                        Some(seen) if *seen != reads => self.mpo.violations.push(format!(
                            "replica {i} of shard {from} read {reads:?} for {mpo}, another replica of it {seen:?}"
                        )),
                        Some(_) => {}
                        None => {
                            self.mpo.reads.insert((mpo, from), reads.clone());
                        }
                    }
                    for t in to {
                        for j in self.member_slots(t as usize) {
                            let input = MpoInput::Reads(mpo, from, reads.clone());
                            self.mpo_send(i, j, MpoNet::Input(input));
                        }
                    }
                }
            }
        }
    }

    fn mpo_send(&mut self, from: usize, to: usize, msg: MpoNet) {
        for at in self.net.send(&mut self.rng, self.now, from, to, 128) {
            self.schedule(
                at,
                Ev::Mpo {
                    to,
                    msg: msg.clone(),
                },
            );
        }
    }

    /// An MPO message reaches replica `to`.
    pub(super) fn mpo_deliver(&mut self, to: usize, msg: MpoNet) {
        let now = self.local_time(to);
        let node = &mut self.nodes[to].node;
        if !node.is_up() {
            return;
        }
        match msg {
            MpoNet::Copy(call) => {
                let _ = node.invoke_mpo_copy(call, now);
            }
            MpoNet::Input(input) => node.mpo_input(input),
        }
        self.after(to);
    }

    /// The sequencer's op in flight at history record `index` ended.
    pub(super) fn mpo_sequenced(&mut self, index: usize) {
        let Some(mpo) = self.mpo.sequencing.remove(&index) else {
            return;
        };
        let record = &self.history.ops[index];
        let Some(Ok(bytes)) = record.final_view().map(|v| v.outcome.clone()) else {
            return; // refused or lost with its replica: the sweep asks again
        };
        let Some(indices) = directory::decode_indices(&bytes) else {
            return;
        };
        let indices = indices.into_iter().collect();
        self.mpo.indices.insert(mpo, indices);
        self.mpo_sweep_one(mpo);
    }

    /// A new MPO leaves its origin as soon as it may: forwarded and
    /// sequenced at once, not at the next sweep.
    pub(super) fn mpo_release(&mut self, mpo: MpoId) {
        if self.mpo.tracks.get(&mpo).is_none_or(|t| t.released) {
            return;
        }
        self.mpo_sweep_one(mpo);
        if self.mpo.tracks.get(&mpo).is_some_and(|t| !t.released) {
            self.schedule(self.now + RELEASE_POLL_US, Ev::MpoRelease { mpo });
        }
    }

    /// Replica `i`'s committed order waits on an MPO it has not been
    /// answered for yet (a replica catching up meets them one after the
    /// other, long after their reads were pushed): its index and the reads
    /// it misses go out now, not at the next sweep.
    pub(super) fn mpo_answer(&mut self, i: usize) {
        if i >= self.cfg.shards * self.per_shard {
            return;
        }
        let Some((Some(mpo), missing)) = self.nodes[i].node.mpo_waiting() else {
            return;
        };
        let now = (mpo, missing.clone());
        if self.mpo.answered.get(&i) == Some(&now) {
            return;
        }
        self.mpo.answered.insert(i, now);
        self.mpo_tell_waiting(i, mpo, missing);
    }

    /// Tell replica `i`, whose committed order waits on `mpo`, the MPO's
    /// index (as a directory replica answers `mpo.next`) and the reads of
    /// the shards it misses that are known (as any replica of those shards
    /// answers from its record).
    fn mpo_tell_waiting(&mut self, i: usize, mpo: MpoId, missing: Vec<u32>) {
        let s = self.group_of(i) as u32;
        let index = self.mpo.indices.get(&mpo).and_then(|ix| ix.get(&s));
        if let Some(k) = index.copied() {
            self.mpo_send(i, i, MpoNet::Input(MpoInput::Sequenced(mpo, k)));
        }
        for from in missing {
            if let Some(reads) = self.mpo.reads.get(&(mpo, from)).cloned() {
                self.mpo_send(i, i, MpoNet::Input(MpoInput::Reads(mpo, from, reads)));
            }
        }
    }

    /// Every [`SWEEP_US`]: what lost messages and crashes left undone.
    pub(super) fn mpo_sweep(&mut self) {
        let ids: Vec<MpoId> = self.mpo.tracks.keys().copied().collect();
        for mpo in ids {
            self.mpo_sweep_one(mpo);
        }
        // A replica whose committed order waits on an MPO (one that was
        // down, or cut off, while the others went on), again.
        let shard_slots = self.cfg.shards * self.per_shard;
        for j in 0..shard_slots {
            if !self.nodes[j].node.is_up() {
                continue;
            }
            let Some((Some(mpo), missing)) = self.nodes[j].node.mpo_waiting() else {
                continue;
            };
            self.mpo_tell_waiting(j, mpo, missing);
        }
        self.schedule(self.now + SWEEP_US, Ev::MpoSweep);
    }

    fn mpo_sweep_one(&mut self, mpo: MpoId) {
        let Some(t) = self.mpo.tracks.get(&mpo) else {
            return;
        };
        let (origin, me) = (t.origin, t.call.me);
        let shards: Vec<u32> = t.call.parts.iter().map(|p| p.shard).collect();
        if !t.released {
            let held = self.member_slots(me as usize).into_iter().any(|j| {
                j != origin && self.nodes[j].node.is_up() && self.nodes[j].node.mpo_status(mpo).0
            });
            if !held {
                return;
            }
            if let Some(t) = self.mpo.tracks.get_mut(&mpo) {
                t.released = true;
            }
        }
        let indices = self.mpo.indices.get(&mpo).cloned();
        if indices.is_none() && !self.mpo.sequencing.values().any(|m| *m == mpo) {
            self.mpo_sequence(mpo, &shards);
        }
        for s in &shards {
            let members: Vec<usize> = self
                .member_slots(*s as usize)
                .into_iter()
                .filter(|&j| self.nodes[j].node.is_up())
                .collect();
            let status: Vec<(bool, bool)> = members
                .iter()
                .map(|&j| self.nodes[j].node.mpo_status(mpo))
                .collect();
            if status.iter().any(|(_, committed)| *committed) {
                if let Some(t) = self.mpo.tracks.get_mut(&mpo) {
                    t.committed.insert(*s);
                }
            } else if !status.iter().any(|(held, _)| *held) && !members.is_empty() {
                let to = members[self.rng.index(members.len())];
                let copy = self.mpo_copy(mpo, *s);
                if let Some(copy) = copy {
                    self.mpo_send(to, to, MpoNet::Copy(copy));
                }
            }
            for &j in &members {
                if let Some(k) = indices.as_ref().and_then(|ix| ix.get(s)) {
                    self.mpo_send(j, j, MpoNet::Input(MpoInput::Sequenced(mpo, *k)));
                }
            }
        }
        let Some(t) = self.mpo.tracks.get(&mpo) else {
            return;
        };
        let all_committed = t.committed.len() == shards.len();
        let record = &self.history.ops[t.record];
        let answered =
            record.origin_crashed || record.views.iter().any(|v| v.kind != ViewKind::Tentative);
        if all_committed && (answered || !self.nodes[origin].node.is_up()) {
            self.mpo.tracks.remove(&mpo);
            self.mpo.completed += 1;
        }
    }

    /// Shard `s`'s copy of `mpo`.
    fn mpo_copy(&self, mpo: MpoId, s: u32) -> Option<ProcCall> {
        let t = self.mpo.tracks.get(&mpo)?;
        let copy = t.call.for_shard(s).ok()?;
        Some(copy.call(&t.client_call))
    }

    /// Ask a directory replica to sequence `mpo`.
    fn mpo_sequence(&mut self, mpo: MpoId, shards: &[u32]) {
        let Some(d) = self.some_directory_replica() else {
            return;
        };
        let request = Request::strong(directory::sequence_call(mpo.origin, mpo.seq, shards));
        if self.invoke(d, None, request, true) {
            let index = self.history.ops.len() - 1;
            let n =
                u32::try_from(self.mpo.sequenced_ops % u64::from(SEQUENCER_CLIENTS)).unwrap_or(0);
            self.mpo.sequenced_ops += 1;
            self.history.ops[index].client = SEQUENCER_CLIENT - n;
            self.mpo.sequencing.insert(index, mpo);
        }
    }

    /// The calls shard `s`'s committed ops ran, in its committed order
    /// `ids`: an MPO's first copy with its inputs (the index the directory
    /// gave and the other shards' reads), a later copy as the no-op it
    /// ran as; `None` for an op whose call is not known.
    pub(super) fn mpo_replay_calls(&self, s: usize, ids: &[OpId]) -> BTreeMap<OpId, ProcCall> {
        let mut out = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for id in ids {
            let Some(op) = self.ops.get(id) else {
                continue;
            };
            if op.call.name.as_ref() != RUN {
                continue;
            }
            let Ok(call) = MpoCall::decode(&op.call.args) else {
                continue;
            };
            if !seen.insert(call.id) {
                let mut noop = ProcCall::new(creek_procs::builtins::NOOP, encode_args(&[]));
                noop.strong = true;
                out.insert(*id, noop);
                continue;
            }
            let index = self
                .mpo
                .indices
                .get(&call.id)
                .and_then(|ix| ix.get(&(s as u32)).copied());
            let mut remote: Reads = Vec::new();
            let mut verdicts = Vec::new();
            let mut complete = index.is_some();
            for t in call.others() {
                match self.mpo.reads.get(&(call.id, t)) {
                    Some(r) if call.reads_fit(t, r) => {
                        verdicts.push((t, r[0].1.clone()));
                        remote.extend(r[1..].iter().cloned());
                    }
                    _ => complete = false,
                }
            }
            if let (true, Some(index)) = (complete, index) {
                remote.sort_by(|a, b| a.0.cmp(&b.0));
                let inputs = Inputs {
                    index,
                    remote,
                    verdicts,
                };
                out.insert(*id, call.with_inputs(inputs).call(&op.call));
            }
        }
        out
    }
}
