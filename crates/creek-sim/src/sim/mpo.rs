//! Operations across shards in the simulator (docs/cross-shard.md): what
//! a replica's server does for an MPO besides running its node, as
//! `creek_server::mpo` does it, over the simulated network (loss,
//! partitions, delays, crashes):
//!
//! - **the origin**, once its op's id is one a durable write reserved,
//!   hands each other involved shard its copy (a replica of the shard
//!   takes it: [`creek_node::Node::mpo_serve`]) and, once every shard took
//!   its copy, has a directory replica sequence the MPO; a copy not taken
//!   in [`RETRY_US`] is sent again (to another replica), and so is the
//!   sequencing;
//! - the directory replica that committed the sequencing tells every
//!   replica of the MPO's shards its index;
//! - **each shard's leader** (every replica, where none is known) sends the
//!   values its shard read to every replica of the other shards;
//! - **a replica whose committed order waits on an MPO** asks for what it
//!   misses ([`creek_node::Node::mpo_chase`]): a directory replica for the
//!   index, a replica of each shard whose reads it lacks for them, handing
//!   it the shard's copy.
//!
//! The simulator also keeps what a checker needs to replay each shard's
//! committed order: every shard's reads for every MPO (every replica of a
//! shard must hand out the same values) and the indices the directory
//! gave.

use std::collections::{BTreeMap, BTreeSet};

use creek_core::Request as Request_;
use creek_node::mpo::wire::{Reply, Request};
use creek_node::mpo::Chase;
use creek_node::MpoMessage;
use creek_procs::builtins::directory;
use creek_procs::mpo::{Inputs, MpoCall, MpoId, Reads, RUN};
use creek_shard::RouteError;

use super::*;
use crate::replica::MpoInput;

/// How often the simulator looks at the MPOs its origins drive.
pub(super) const SWEEP_US: u64 = 10_000;

/// How long an origin waits for a shard to take its copy, or for the
/// directory to sequence, before it asks again.
const RETRY_US: u64 = 20_000;

/// How often a new MPO's origin looks whether its op may leave (its id is
/// one a durable write reserved).
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

/// A message between groups about an MPO.
#[derive(Clone, Debug)]
pub(super) enum MpoNet {
    /// A request of replica `from` of another group.
    Ask { from: usize, req: Request },
    /// An input for the replica: an index, another shard's reads.
    Input(MpoInput),
    /// Shard `shard` took its copy of `mpo` (for the origin).
    Taken { mpo: MpoId, shard: u32 },
    /// Under the genuine multicast: replica `from` asks for the
    /// receiver's shard's timestamp of `mpo`, handing it the shard's copy.
    TsPull {
        from: usize,
        mpo: MpoId,
        copy: ProcCall,
    },
}

/// One MPO an origin drives.
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
    /// Its id is one a durable write reserved: it may leave.
    released: bool,
    /// The shards holding a copy (the origin's among them).
    taken: BTreeSet<u32>,
    /// When the origin last sent copies, or asked for the sequencing.
    sent_us: u64,
    /// Shards where a replica committed it (bookkeeping).
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
    /// MPOs invoked, and completed on every shard.
    pub(super) started: u64,
    pub(super) completed: u64,
}

impl Sim {
    /// A client's op whose keys span shards: as an MPO, the call its
    /// origin runs (on the shard the workload picks), and that shard;
    /// `None` if the run makes no MPOs or the keys cannot make one.
    pub(super) fn as_mpo(&self, map: &ShardMap, call: &ProcCall) -> Option<(usize, ProcCall)> {
        if self.cfg.cross_shard <= 0.0 {
            return None;
        }
        let (first, parts) = self.workload.mpo_parts(call, map)?;
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
        let me = call.me;
        self.mpo.tracks.insert(
            mpo,
            Track {
                call: MpoCall { id: mpo, ..call },
                client_call,
                origin: i,
                record,
                released: false,
                taken: BTreeSet::from([me]),
                sent_us: 0,
                committed: BTreeSet::new(),
            },
        );
    }

    /// Replica `i`'s MPO messages: its shard's reads, from the shard's
    /// leader (every replica where none is known), to every replica of the
    /// shards that wait for them. Every replica's are recorded for the
    /// checker.
    pub(super) fn mpo_out(&mut self, i: usize, messages: Vec<MpoMessage>) {
        let sends = self.nodes[i].node.leads_or_no_leader();
        for m in messages {
            match m {
                MpoMessage::Reads {
                    mpo,
                    from,
                    to,
                    reads,
                } => {
                    self.mpo_record_reads(i, mpo, from, &reads);
                    if self.genuine() {
                        self.mpo_record_index(i, mpo, from);
                    }
                    if !sends {
                        continue;
                    }
                    for t in to {
                        for j in self.member_slots(t as usize) {
                            let input = MpoInput::Reads(mpo, from, reads.clone());
                            self.mpo_send(i, j, MpoNet::Input(input));
                        }
                    }
                }
                MpoMessage::Stable { from, to, time } => {
                    for t in to {
                        for j in self.member_slots(t as usize) {
                            // Two varints and a frame header, as a peer
                            // message carries them.
                            self.traffic.stable_bytes += 2 + 2 * 5;
                            let input = MpoInput::Stable(from, time);
                            self.mpo_send(i, j, MpoNet::Input(input));
                        }
                    }
                }
                MpoMessage::Timestamp { mpo, from, to, ts } => {
                    if !sends {
                        continue;
                    }
                    for t in to {
                        for j in self.member_slots(t as usize) {
                            let input = MpoInput::Timestamp(mpo, from, ts);
                            self.mpo_send(i, j, MpoNet::Input(input));
                        }
                    }
                }
            }
        }
    }

    fn genuine(&self) -> bool {
        self.cfg.mpo_order == creek_core::MpoOrder::Genuine
    }

    /// Under the genuine multicast, the shards' logs index MPOs: the index
    /// replica `i` of shard `shard` ran `mpo` at, for the replay (every
    /// replica of a shard must run it at the same).
    fn mpo_record_index(&mut self, i: usize, mpo: MpoId, shard: u32) {
        let Some(index) = self.nodes[i].node.mpo_index(mpo) else {
            return;
        };
        let seen = self.mpo.indices.entry(mpo).or_default();
        match seen.insert(shard, index) {
            Some(other) if other != index => self.mpo.violations.push(format!(
                "replica {i} of shard {shard} ran {mpo} at index {index}, another replica of it at {other}"
            )),
            _ => {}
        }
    }

    /// Shard `from`'s reads for `mpo`, as replica `i` handed them out: every
    /// replica of a shard must hand out the same.
    fn mpo_record_reads(&mut self, i: usize, mpo: MpoId, from: u32, reads: &Reads) {
        match self.mpo.reads.get(&(mpo, from)) {
            Some(seen) if seen != reads => self.mpo.violations.push(format!(
                "replica {i} of shard {from} read {reads:?} for {mpo}, another replica of it {seen:?}"
            )),
            Some(_) => {}
            None => {
                self.mpo.reads.insert((mpo, from), reads.clone());
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

    /// A random replica of group `g` (up or not: the sender cannot tell).
    fn mpo_pick(&mut self, g: usize) -> Option<usize> {
        let slots = self.member_slots(g);
        (!slots.is_empty()).then(|| slots[self.rng.index(slots.len())])
    }

    /// An MPO message reaches replica `to`.
    pub(super) fn mpo_deliver(&mut self, to: usize, msg: MpoNet) {
        if !self.nodes[to].node.is_up() {
            return;
        }
        let now = self.local_time(to);
        match msg {
            MpoNet::Input(input) => self.nodes[to].node.mpo_input(input),
            MpoNet::Taken { mpo, shard } => {
                let all = match self.mpo.tracks.get_mut(&mpo) {
                    Some(t) if t.origin == to => {
                        t.taken.insert(shard);
                        t.taken.len() == t.call.parts.len()
                    }
                    _ => false,
                };
                if all && !self.genuine() {
                    self.mpo_ask_sequence(mpo);
                }
            }
            MpoNet::TsPull { from, mpo, copy } => {
                let shard = self.group_of(to) as u32;
                match self.nodes[to].node.mpo_timestamp_of(mpo) {
                    Some(ts) => {
                        let input = MpoInput::Timestamp(mpo, shard, ts);
                        self.mpo_send(to, from, MpoNet::Input(input));
                    }
                    None => {
                        let _ = self.nodes[to]
                            .node
                            .mpo_serve(Request::Copy(copy), shard, now);
                    }
                }
            }
            MpoNet::Ask {
                req: Request::Sequence { mpo, shards },
                ..
            } => self.mpo_serve_sequence(to, mpo, &shards),
            MpoNet::Ask { from, req } => {
                let shard = self.group_of(to) as u32;
                let (copy, pull) = match &req {
                    Request::Copy(call) => (MpoCall::decode(&call.args).ok().map(|c| c.id), None),
                    Request::Pull { mpo, .. } => (None, Some(*mpo)),
                    _ => (None, None),
                };
                match self.nodes[to].node.mpo_serve(req, shard, now) {
                    Ok(Reply::Reads(reads)) => {
                        if let Some(mpo) = pull {
                            self.mpo_record_reads(to, mpo, shard, &reads);
                            let input = MpoInput::Reads(mpo, shard, reads);
                            self.mpo_send(to, from, MpoNet::Input(input));
                        }
                    }
                    Ok(Reply::Done) => {
                        if let Some(mpo) = copy {
                            self.mpo_send(to, from, MpoNet::Taken { mpo, shard });
                        }
                    }
                    _ => {}
                }
            }
        }
        self.after(to);
    }

    /// Directory replica `d` asked to sequence `mpo`: the committed
    /// indices, told every replica of the MPO's shards at once, or a
    /// sequencing op (one at a time), whose commit tells them.
    fn mpo_serve_sequence(&mut self, d: usize, mpo: MpoId, shards: &[u32]) {
        if let Some(given) = self.nodes[d].node.mpo_indices(mpo) {
            // Recorded for the replay here too: the replica that ran the
            // sequencing may have crashed before its view said them.
            self.mpo
                .indices
                .entry(mpo)
                .or_insert_with(|| given.iter().copied().collect());
            // As a server's directory replica does: the replica that
            // sequenced it may have crashed before it told the shards.
            self.mpo_tell(d, mpo, &given);
            return;
        }
        if !self.mpo.sequencing.values().any(|m| *m == mpo) {
            self.mpo_sequence(d, mpo, shards);
        }
    }

    /// The sequencer's op in flight at history record `index` ended: its
    /// replica tells every replica of the MPO's shards its index.
    pub(super) fn mpo_sequenced(&mut self, index: usize) {
        let Some(mpo) = self.mpo.sequencing.remove(&index) else {
            return;
        };
        let record = &self.history.ops[index];
        let Some(Ok(bytes)) = record.final_view().map(|v| v.outcome.clone()) else {
            return; // refused or lost with its replica: asked again
        };
        let Some(given) = directory::decode_indices(&bytes) else {
            return;
        };
        let d = record.replica;
        self.mpo
            .indices
            .insert(mpo, given.iter().copied().collect());
        self.mpo_tell(d, mpo, &given);
    }

    /// Directory replica `d` tells every replica of each shard in `given`
    /// its index of `mpo`.
    fn mpo_tell(&mut self, d: usize, mpo: MpoId, given: &[(u32, u64)]) {
        for &(s, k) in given {
            for j in self.member_slots(s as usize) {
                self.mpo_send(d, j, MpoNet::Input(MpoInput::Sequenced(mpo, k)));
            }
        }
    }

    /// A new MPO leaves its origin as soon as its id is one a durable
    /// write reserved: its copies go out.
    pub(super) fn mpo_release(&mut self, mpo: MpoId) {
        let Some(t) = self.mpo.tracks.get(&mpo) else {
            return;
        };
        if t.released {
            return;
        }
        let origin = t.origin;
        if !self.nodes[origin].node.is_up() {
            return; // back up, it asks on its own (`Replica::mpo_unsequenced`)
        }
        if self.nodes[origin].node.seq_reserved() < mpo.seq {
            self.schedule(self.now + RELEASE_POLL_US, Ev::MpoRelease { mpo });
            return;
        }
        if let Some(t) = self.mpo.tracks.get_mut(&mpo) {
            t.released = true;
        }
        self.mpo_send_copies(mpo);
    }

    /// The origin sends each shard that has not taken its copy the copy.
    fn mpo_send_copies(&mut self, mpo: MpoId) {
        let Some(t) = self.mpo.tracks.get(&mpo) else {
            return;
        };
        let origin = t.origin;
        let missing: Vec<u32> = t.call.others().filter(|s| !t.taken.contains(s)).collect();
        for s in missing {
            let (Some(copy), Some(to)) = (self.mpo_copy(mpo, s), self.mpo_pick(s as usize)) else {
                continue;
            };
            let req = Request::Copy(copy);
            self.mpo_send(origin, to, MpoNet::Ask { from: origin, req });
        }
        let now = self.now;
        if let Some(t) = self.mpo.tracks.get_mut(&mpo) {
            t.sent_us = now;
        }
    }

    /// The origin asks a directory replica to sequence the MPO.
    fn mpo_ask_sequence(&mut self, mpo: MpoId) {
        let Some(t) = self.mpo.tracks.get(&mpo) else {
            return;
        };
        let origin = t.origin;
        let shards = t.call.parts.iter().map(|p| p.shard).collect();
        let Some(d) = self.directory_group().and_then(|g| self.mpo_pick(g)) else {
            return;
        };
        let req = Request::Sequence { mpo, shards };
        self.mpo_send(origin, d, MpoNet::Ask { from: origin, req });
        let now = self.now;
        if let Some(t) = self.mpo.tracks.get_mut(&mpo) {
            t.sent_us = now;
        }
    }

    /// After an event at replica `i`: what its committed order, waiting
    /// on an MPO, asks for ([`creek_node::Node::mpo_chase`]).
    pub(super) fn mpo_chase(&mut self, i: usize) {
        if i >= self.cfg.shards * self.per_shard || !self.nodes[i].node.is_up() {
            return;
        }
        let now = self.local_time(i);
        for (mpo, chase) in self.nodes[i].node.mpo_chase(now) {
            self.mpo_ask(i, mpo, chase);
        }
        if !self.genuine() {
            return;
        }
        for (mpo, copies) in self.nodes[i].node.mpo_stamps_due(now) {
            for (s, copy) in copies {
                if let Some(j) = self.mpo_pick(s as usize) {
                    self.mpo_send(i, j, MpoNet::TsPull { from: i, mpo, copy });
                }
            }
        }
        // A stamp invoked just now goes out at once.
        for (to, msg) in self.nodes[i].node.take_outbox() {
            self.send(i, usize::from(to.0).saturating_sub(1), msg);
        }
    }

    /// Send what replica `i` asks about `mpo`.
    fn mpo_ask(&mut self, i: usize, mpo: MpoId, chase: Chase) {
        match chase {
            Chase::Index { shards, copies } => {
                for (s, copy) in copies {
                    if let Some(j) = self.mpo_pick(s as usize) {
                        let req = Request::Copy(copy);
                        self.mpo_send(i, j, MpoNet::Ask { from: i, req });
                    }
                }
                if let Some(d) = self.directory_group().and_then(|g| self.mpo_pick(g)) {
                    let req = Request::Sequence { mpo, shards };
                    self.mpo_send(i, d, MpoNet::Ask { from: i, req });
                }
            }
            Chase::Reads(from) => {
                for (s, copy) in from {
                    if let Some(j) = self.mpo_pick(s as usize) {
                        let req = Request::Pull { mpo, copy };
                        self.mpo_send(i, j, MpoNet::Ask { from: i, req });
                    }
                }
            }
        }
    }

    /// Every [`SWEEP_US`]: each origin asks again what was not answered in
    /// [`RETRY_US`] (a copy not taken, a sequencing not told), and MPOs
    /// committed on every shard are done with.
    pub(super) fn mpo_sweep(&mut self) {
        let ids: Vec<MpoId> = self.mpo.tracks.keys().copied().collect();
        for mpo in ids {
            self.mpo_sweep_one(mpo);
        }
        self.schedule(self.now + SWEEP_US, Ev::MpoSweep);
    }

    fn mpo_sweep_one(&mut self, mpo: MpoId) {
        let Some(t) = self.mpo.tracks.get(&mpo) else {
            return;
        };
        let origin = t.origin;
        let shards: Vec<u32> = t.call.parts.iter().map(|p| p.shard).collect();
        let all_taken = t.taken.len() == shards.len();
        let due = t.released && self.now >= t.sent_us + RETRY_US;
        let origin_up = self.nodes[origin].node.is_up();
        if due && origin_up && !self.mpo.indices.contains_key(&mpo) {
            if all_taken {
                if !self.genuine() && !self.mpo.sequencing.values().any(|m| *m == mpo) {
                    self.mpo_ask_sequence(mpo);
                }
            } else {
                self.mpo_send_copies(mpo);
            }
        }
        for s in &shards {
            let committed = self
                .member_slots(*s as usize)
                .into_iter()
                .filter(|&j| self.nodes[j].node.is_up())
                .any(|j| self.nodes[j].node.mpo_status(mpo).1);
            if committed {
                if let Some(t) = self.mpo.tracks.get_mut(&mpo) {
                    t.committed.insert(*s);
                }
            }
        }
        let Some(t) = self.mpo.tracks.get(&mpo) else {
            return;
        };
        let all_committed = t.committed.len() == shards.len();
        let record = &self.history.ops[t.record];
        let answered = record.origin_crashed || record.views.iter().any(|v| v.kind.is_final());
        if all_committed && (answered || !origin_up) {
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

    /// Have directory replica `d` sequence `mpo` (a strong op there).
    fn mpo_sequence(&mut self, d: usize, mpo: MpoId, shards: &[u32]) {
        let request = Request_::strong(directory::sequence_call(mpo.origin, mpo.seq, shards));
        let n = u32::try_from(self.mpo.sequenced_ops % u64::from(SEQUENCER_CLIENTS)).unwrap_or(0);
        let index = self.history.ops.len();
        self.mpo.sequencing.insert(index, mpo);
        if self.invoke_as(d, SEQUENCER_CLIENT - n, request) {
            self.mpo.sequenced_ops += 1;
        } else {
            self.mpo.sequencing.remove(&index);
        }
    }

    /// The calls shard `s`'s committed ops ran, in its committed order
    /// `ids`: an MPO's first copy with its inputs (the index the directory
    /// gave and the other shards' reads), a later op of it as the answer
    /// it ran as; `None` for an op whose call is not known.
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
                out.insert(*id, creek_procs::mpo::answer_call(call.id));
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
                        let (verdict, _, keys) = creek_procs::mpo::split_reads(r);
                        verdicts.push((t, verdict));
                        remote.extend(keys.iter().cloned());
                    }
                    _ => complete = false,
                }
            }
            if let (true, Some(index)) = (complete, index) {
                remote.sort_by(|a, b| a.0.cmp(&b.0));
                // This shard's commit-time proposal, as its reads carried it.
                let time = self
                    .mpo
                    .reads
                    .get(&(call.id, s as u32))
                    .map_or(0, |r| creek_procs::mpo::split_reads(r).1);
                let inputs = Inputs {
                    index,
                    remote,
                    verdicts,
                    time,
                };
                out.insert(*id, call.with_inputs(inputs).call(&op.call));
            }
        }
        out
    }
}
