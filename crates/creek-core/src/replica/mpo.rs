//! Operations across shards at one shard's replica (docs/cross-shard.md).
//!
//! An MPO reaches each involved shard as a strong op whose call is
//! [`creek_procs::mpo::RUN`]. Its id is CAB-decided like any strong op's,
//! but it commits only at its **turn**: the directory's sequence gives it
//! an index among this shard's MPOs (told by the driver,
//! [`Replica::mpo_sequenced`]), and the MPOs of a shard commit in index
//! order, 1, 2, 3, … with no gap. A decided MPO whose turn has not come is
//! parked, and the ids decided after it go on committing; it commits the
//! moment the MPO before it does. Whether an id is parked depends only on
//! the decided order and the indices, so every replica of the shard makes
//! the same committed order; and since every shard commits its MPOs in the
//! directory's order, the shards' orders never disagree about two MPOs
//! (the union of the committed orders stays acyclic).
//!
//! At its turn, once every op before it is final, the replica reads the
//! MPO's keys that this shard owns from its committed state and hands them
//! out ([`Effect::MpoReads`]); the MPO commits once every other involved
//! shard's reads are here ([`Replica::mpo_reads`]), and runs with them
//! ([`creek_procs::mpo::Inputs`]). Nothing commits on this shard
//! meanwhile: the state it read is the state at the MPO's position.
//!
//! Each shard's reads are its **confirmation** (the paper's, one per
//! involved shard): a shard hands them out only at the MPO's committed
//! position, and commits nothing else until it has run the MPO, so once a
//! replica holds every shard's reads the MPO's place in every shard's
//! order is fixed and its result known. The origin's final view needs no
//! further round: an op any shard orders after that point is ordered after
//! the MPO there too.

use std::collections::{BTreeMap, VecDeque};

use creek_exec::Engine;
use creek_exec::ProcCall;
use creek_procs::mpo::{self, Inputs, MpoCall, MpoId, Reads};
use creek_types::planted::Bug;
use rustc_hash::FxHashMap;

use super::Replica;
use crate::id::OpId;
use crate::op::{Effect, ExecKey, Op, Pos};

/// Most MPOs whose reads a replica holds before their turn here; reads
/// for more are dropped (their senders send them again).
pub const RECEIVED_MAX: usize = 65_536;

/// Whether `op` is one shard's copy of an MPO.
pub(super) fn is_mpo(op: &Op) -> bool {
    op.call.name.as_ref() == mpo::RUN
}

/// The replica's MPO bookkeeping.
#[derive(Debug, Default)]
pub(super) struct Mpos {
    /// The index of the last MPO committed here.
    last: u64,
    /// Each MPO's index in this shard's sequence, as the driver told it
    /// (kept for the last `READS_KEPT` committed here, so a second copy of
    /// one is known for what it is).
    index_of: FxHashMap<MpoId, u64>,
    /// The MPOs committed here, oldest first, as many as `index_of` keeps.
    recent: VecDeque<MpoId>,
    /// Decided MPO ops whose turn has not come, by index (two copies of
    /// one MPO — a forward that reached two replicas of this shard — share
    /// an index: the first commits, the rest are duplicates).
    parked: BTreeMap<u64, Vec<OpId>>,
    /// The MPO at its turn.
    turn: Option<Turn>,
    /// Other shards' reads, by MPO and shard (they may come early).
    received: FxHashMap<MpoId, BTreeMap<u32, Reads>>,
    /// The copies of MPOs held here and not committed, by MPO, with the
    /// replica's clock when the first arrived.
    copies: FxHashMap<MpoId, (Vec<OpId>, u64)>,
    /// Decided MPO ops whose index is not known yet, under
    /// [`crate::MpoOrder::Genuine`] (the shards' own logs give it, after
    /// the copy's decision: `skeen.rs`); parked once it is.
    held: FxHashMap<MpoId, Vec<OpId>>,
    /// The genuine multicast's ordering state (`skeen.rs`).
    pub(super) skeen: super::skeen::Skeen,
}

#[derive(Debug)]
struct Turn {
    op: OpId,
    call: MpoCall,
    /// This shard's values, once read.
    local: Option<Reads>,
    /// This shard's commit-time proposal, sent with its values.
    time: u64,
    /// The largest proposal of every involved shard: the MPO's commit
    /// time on each (known once every shard's reads are here).
    agreed: u64,
}

/// What the decided MPO at the front may do.
pub(super) enum Step {
    /// Wait: its index, the ops before it, or other shards' reads are not
    /// here yet.
    Wait,
    /// Its turn has not come: park it.
    Park(u64),
    /// Its index is not known yet, and the shards' logs give it
    /// ([`crate::MpoOrder::Genuine`]): hold it until they do.
    Hold(MpoId),
    /// Commit it, running this call.
    Go(ProcCall),
}

impl Mpos {
    /// The MPO op the committed order waits on, if any: the one at its
    /// turn, else a parked one whose turn has come (or a duplicate copy of
    /// one committed).
    pub(super) fn next_up(&self) -> Option<OpId> {
        if let Some(turn) = &self.turn {
            return Some(turn.op);
        }
        let (index, ids) = self.parked.first_key_value()?;
        (*index <= self.last + 1).then(|| ids.first().copied())?
    }

    fn is_parked(&self, id: OpId) -> bool {
        self.parked.values().any(|ids| ids.contains(&id))
    }

    /// Take `id` off the parked ones; whether it was there.
    pub(super) fn unpark(&mut self, id: OpId) -> bool {
        if !self.is_parked(id) {
            return false;
        }
        self.parked.retain(|_, ids| {
            ids.retain(|p| *p != id);
            !ids.is_empty()
        });
        true
    }

    pub(super) fn park(&mut self, index: u64, id: OpId) {
        let ids = self.parked.entry(index).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }

    pub(super) fn resume(&mut self, last: u64) {
        self.last = last;
    }

    /// `op` is no longer held (voided).
    pub(super) fn forget_copy(&mut self, op: &Op) {
        if let Some(mpo) = is_mpo(op)
            .then(|| MpoCall::decode(&op.call.args).ok())
            .flatten()
        {
            if let Some((ids, _)) = self.copies.get_mut(&mpo.id) {
                ids.retain(|c| *c != op.id);
                if ids.is_empty() {
                    self.copies.remove(&mpo.id);
                }
            }
        }
    }

    /// The MPO at its turn waits for the ops before it to become final.
    pub(super) fn turn_waits_for_state(&self) -> bool {
        self.turn.as_ref().is_some_and(|t| t.local.is_none())
    }

    pub(super) fn is_idle(&self) -> bool {
        self.parked.is_empty() && self.turn.is_none() && self.held.is_empty()
    }

    /// Decided op `id` of MPO `mpo` waits for its index.
    pub(super) fn hold(&mut self, mpo: MpoId, id: OpId) {
        let ids = self.held.entry(mpo).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
}

impl<E: Engine<ExecKey, Pos>> Replica<E> {
    /// Invoke this shard's copy of an MPO whose origin is on another shard
    /// (`call` is a [`mpo::RUN`] call for this shard): a strong op with no
    /// client here, since the origin answers the client. Returns its
    /// handle (`ExecKey::Op` with the id the directory's sequence orders).
    pub fn invoke_mpo_copy(
        &mut self,
        call: ProcCall,
        now_us: u64,
    ) -> Result<ExecKey, super::InvokeError> {
        if call.name.as_ref() != mpo::RUN {
            return Err(super::InvokeError::Call(
                creek_procs::CallError::UnknownProcedure(call.name.to_string()),
            ));
        }
        self.registry.check(&call, &self.config.txn_limits)?;
        self.now_us = self.now_us.max(now_us);
        Ok(self.invoke_op(call, true, crate::op::Views::STRONG, false, now_us))
    }

    /// The directory's sequence gives MPO `mpo` index `index` among this
    /// shard's MPOs. Every replica of the shard must be told the same.
    pub fn mpo_sequenced(&mut self, mpo: MpoId, index: u64) {
        if index == 0 || self.genuine() {
            return; // under the genuine multicast, the shards' logs index
        }
        self.mpo_indexed(mpo, index);
        self.deliver_decided();
        self.process_settled();
    }

    /// MPO `mpo` holds index `index` among this shard's MPOs.
    pub(super) fn mpo_indexed(&mut self, mpo: MpoId, index: u64) {
        let known = self.mpos.index_of.insert(mpo, index);
        debug_assert!(
            known.is_none_or(|k| k == index),
            "{mpo} sequenced at {index} after {known:?}"
        );
        if known.is_some() {
            return;
        }
        if let Some(ids) = self.mpos.held.remove(&mpo) {
            for id in ids {
                self.mpos.park(index, id);
            }
        }
        if !self.genuine() {
            // Its copies held here may be cast now (`may_cast`).
            let ids = self.mpos.copies.get(&mpo).map(|(ids, _)| ids.clone());
            for id in ids.unwrap_or_default() {
                if !self.is_committed(id) {
                    self.effects.push(Effect::CabCast(id));
                }
            }
        }
    }

    /// The values shard `shard` read for MPO `mpo` at its committed
    /// position. Reads that are not that shard's keys of the MPO are
    /// ignored when its turn comes.
    pub fn mpo_reads(&mut self, mpo: MpoId, shard: u32, reads: Reads) {
        if self.mpo_committed(mpo) {
            return; // committed here already
        }
        if !self.mpos.received.contains_key(&mpo) && self.mpos.received.len() >= RECEIVED_MAX {
            return;
        }
        self.mpos
            .received
            .entry(mpo)
            .or_default()
            .insert(shard, reads);
        if self.mpos.turn.as_ref().is_some_and(|t| t.call.id == mpo) {
            self.deliver_decided();
            self.process_settled();
        }
    }

    /// A new op is held here: note it if it is a copy of an MPO.
    pub(super) fn mpo_arrived(&mut self, op: &Op) {
        if let Some(mpo) = is_mpo(op)
            .then(|| MpoCall::decode(&op.call.args).ok())
            .flatten()
        {
            let now = self.now_us;
            let (ids, _) = self.mpos.copies.entry(mpo.id).or_insert((Vec::new(), now));
            if !ids.contains(&op.id) {
                ids.push(op.id);
            }
        }
    }

    /// Whether this replica holds a copy of MPO `mpo`, or committed one
    /// (among its last recorded ones): a driver that finds no replica of a
    /// shard holding it forwards the copy again.
    pub fn mpo_held(&self, mpo: MpoId) -> bool {
        self.mpos.copies.contains_key(&mpo) || self.mpo_committed(mpo)
    }

    /// Whether this replica committed MPO `mpo` and knows its final
    /// execution (among its last recorded ones).
    pub fn mpo_committed(&self, mpo: MpoId) -> bool {
        self.engine.read_committed(&mpo::reads_key(mpo)).is_some()
    }

    /// The values this shard read for MPO `mpo` at its committed position,
    /// if it read them (at its turn, or recorded in the committed state
    /// since; the oldest records are deleted): what to answer a shard that
    /// asks again.
    pub fn mpo_reads_of(&self, mpo: MpoId) -> Option<Reads> {
        if let Some(turn) = self.mpos.turn.as_ref().filter(|t| t.call.id == mpo) {
            return turn.local.clone();
        }
        let raw = self.engine.read_committed(&mpo::reads_key(mpo))?;
        mpo::decode_reads(&raw)
    }

    /// Whether strong op `op` may be CAB-cast now: any op but an MPO's
    /// copy, and that once the directory sequenced it here. Ordered before
    /// then, a copy would hold its shard's committed order until its
    /// index came (its turn depends on it), and a directory without a
    /// majority would stall every shard holding one; cast after, it is
    /// parked until its turn while the ops decided after it commit.
    pub fn may_cast(&self, op: &Op) -> bool {
        if !is_mpo(op) || self.genuine() {
            return true;
        }
        MpoCall::decode(&op.call.args)
            .map_or(true, |call| self.mpos.index_of.contains_key(&call.id))
    }

    /// The copy of an MPO held here whose index has not come for the
    /// longest time, with that MPO: the one to ask the directory about
    /// (sequencing is idempotent). Another shard's copy counts: one exists
    /// only once the origin released the MPO (its id reserved by a durable
    /// write). So does this replica's own op for an MPO it originated, once
    /// its seq is within `own_durable` (a durable write reserved it) and
    /// either past the seqs it reclaims from peers after a crash, or
    /// `reclaimed` (the driver closed that range) with no void of its own
    /// pending: a replica voids only own seqs it lost, so an op it holds
    /// then is never voided, and an origin restarted before its copies
    /// went out drives its MPO on.
    /// The origin's op held by its peers never counts: its origin may lose
    /// it (a crash before the write, a rebuild after a lost disk) and the
    /// op be voided on its shard, while the other shards, told its index,
    /// would run it (simulator, wide-area seeds 700019 and 700046).
    pub fn mpo_unsequenced(&self, own_durable: u64, reclaimed: bool) -> Option<(OpId, MpoId)> {
        if self.genuine() {
            return None; // no directory to ask
        }
        let origin_op =
            |mpo: &MpoId, id: &OpId| (u64::from(id.origin.0), id.seq) == (mpo.origin, mpo.seq);
        let voiding = || {
            self.own_strong_tentative.iter().any(|(_, id)| {
                self.ops
                    .get(id)
                    .is_some_and(|op| op.call.name.as_ref() == creek_procs::void::VOID)
            })
        };
        let mine = |id: &OpId| {
            id.origin == self.config.id
                && id.seq <= own_durable
                && (id.seq > self.reclaim_upto || (reclaimed && !voiding()))
        };
        self.mpos
            .copies
            .iter()
            .filter(|(mpo, _)| !self.mpos.index_of.contains_key(mpo))
            .filter_map(|(mpo, (ids, since))| {
                let copy = ids.iter().find(|id| !origin_op(mpo, id) || mine(id))?;
                Some((*since, *mpo, *copy))
            })
            .min()
            .map(|(_, mpo, copy)| (copy, mpo))
    }

    /// The MPO at its turn here and the shards whose reads it still waits
    /// for (what to ask again after a while); or a decided MPO op whose
    /// index is not known yet, with no shard (what to ask the directory).
    /// `None`: no MPO holds the committed order here.
    pub fn mpo_waiting(&self) -> Option<(OpId, Option<MpoId>, Vec<u32>)> {
        if let Some(turn) = &self.mpos.turn {
            return Some((turn.op, Some(turn.call.id), self.reads_missing(&turn.call)));
        }
        let front = self.decided.front()?;
        let op = self.ops.get(front).filter(|op| is_mpo(op))?;
        let mpo = MpoCall::decode(&op.call.args).ok()?.id;
        (!self.mpos.index_of.contains_key(&mpo) && !self.genuine()).then_some((
            op.id,
            Some(mpo),
            Vec::new(),
        ))
    }

    /// Up to `n` decided MPO ops after the one the committed order waits
    /// on (those the decided order delivers next, then the parked ones, by
    /// index), each with its MPO, whether its index is known and the
    /// shards whose reads it still misses; ops that miss nothing are left
    /// out. What a replica catching up asks for ahead: one that was down
    /// while the others went on meets MPOs whose messages went out long
    /// ago, one after another, and asking for each only at its turn costs
    /// a round trip per MPO.
    pub fn mpo_ahead(&self, n: usize) -> Vec<(OpId, MpoId, bool, Vec<u32>)> {
        let at_turn = self.mpos.turn.as_ref().map(|t| t.op);
        let parked = self.mpos.parked.values().flatten();
        self.decided
            .iter()
            .chain(parked)
            .filter(|id| Some(**id) != at_turn && !self.is_committed(**id))
            .filter_map(|id| {
                let op = self.ops.get(id).filter(|op| is_mpo(op))?;
                let call = MpoCall::decode(&op.call.args).ok()?;
                if self.mpo_committed(call.id) {
                    return None; // a second copy: it needs nothing
                }
                let missing = self.reads_missing(&call);
                let indexed = self.mpos.index_of.contains_key(&call.id);
                if !indexed && self.genuine() {
                    return None; // the shards' logs index it, not the directory
                }
                (!indexed || !missing.is_empty()).then_some((*id, call.id, indexed, missing))
            })
            .take(n)
            .collect()
    }

    /// The other shards of `call` whose reads are not here.
    fn reads_missing(&self, call: &MpoCall) -> Vec<u32> {
        let have = self.mpos.received.get(&call.id);
        call.others()
            .filter(|s| have.is_none_or(|h| !h.contains_key(s)))
            .collect()
    }

    /// MPO `mpo`'s index in this shard's sequence, if the driver told it
    /// (kept for the last recorded ones).
    pub fn mpo_index(&self, mpo: MpoId) -> Option<u64> {
        self.mpos.index_of.get(&mpo).copied()
    }

    /// The call of op `id` if it is a copy of an MPO held here: what a
    /// driver forwards to a shard that misses its own copy
    /// ([`MpoCall::for_shard`]).
    pub fn mpo_op_call(&self, id: OpId) -> Option<&ProcCall> {
        self.ops.get(&id).filter(|op| is_mpo(op)).map(|op| &op.call)
    }

    /// The index of the last MPO committed here.
    pub fn mpo_last_index(&self) -> u64 {
        self.mpos.last
    }

    /// What decided MPO op `id` (not committed) may do now.
    pub(super) fn mpo_step(&mut self, op: &Op) -> Step {
        let id = op.id;
        let call = match &self.mpos.turn {
            Some(turn) if turn.op == id => turn.call.clone(),
            _ => match MpoCall::decode(&op.call.args) {
                Ok(call) => call,
                // Refused at invoke; a peer's malformed op commits as it
                // is, and its execution aborts the same way everywhere.
                Err(_) => return Step::Go(op.call.clone()),
            },
        };
        let Some(&index) = self.mpos.index_of.get(&call.id) else {
            if self.genuine() {
                return Step::Hold(call.id);
            }
            return Step::Wait;
        };
        let out_of_sequence = self.config.planted.has(Bug::MpoOutOfSequence) && call.me == 0;
        let duplicate = if out_of_sequence {
            self.mpo_committed(call.id)
        } else {
            index <= self.mpos.last || self.mpo_committed(call.id)
        };
        if duplicate {
            // Another op of this MPO committed here: this one changes
            // nothing, and answers how the MPO ended (its client, if the
            // origin's op is this one, learns the MPO's outcome).
            return Step::Go(mpo::answer_call(call.id));
        }
        if index > self.mpos.last + 1 && !out_of_sequence {
            return Step::Park(index);
        }
        let mut turn = match self.mpos.turn.take() {
            Some(turn) if turn.op == id => turn,
            other => {
                debug_assert!(other.is_none(), "two MPO ops at their turn");
                // The ops its causal context names commit first (they
                // would commit with it): its reads see their writes.
                self.commit_context(op);
                Turn {
                    op: id,
                    call,
                    local: None,
                    time: 0,
                    agreed: 0,
                }
            }
        };
        if turn.local.is_none() {
            if self.counters.finalized != self.committed_len() {
                self.mpos.turn = Some(turn);
                return Step::Wait; // the state is not yet that at its position
            }
            let mut local = turn.call.read_local(
                &op.call,
                &super::state::EngineState::committed(&self.engine),
            );
            turn.time = self.snapshots.proposal(Some(op));
            mpo::put_time(&mut local, turn.time);
            self.effects.push(Effect::MpoReads {
                mpo: turn.call.id,
                from: turn.call.me,
                to: turn.call.others().collect(),
                reads: local.clone(),
            });
            turn.local = Some(local);
        }
        let call = turn.call.clone();
        let own_time = turn.time;
        let mut agreed = own_time;
        self.mpos.turn = Some(turn);
        let received = self.mpos.received.get(&call.id);
        let mut remote: Reads = Vec::new();
        let mut verdicts = Vec::new();
        for shard in call.others() {
            if self.config.planted.has(Bug::MpoSkipConfirmation) {
                // Planted: commit without the other shard's confirmation,
                // as if it had read nothing (and would run it).
                verdicts.push((shard, None));
                let keys = call.keys_of(shard).iter().map(|k| (k.clone(), None));
                remote.extend(keys);
                continue;
            }
            match received.and_then(|r| r.get(&shard)) {
                Some(reads) if call.reads_fit(shard, reads) => {
                    // `reads_fit`: the verdict first, then the keys.
                    let (verdict, time, keys) = mpo::split_reads(reads);
                    verdicts.push((shard, verdict));
                    remote.extend(keys.iter().cloned());
                    agreed = agreed.max(time);
                }
                _ => return Step::Wait,
            }
        }
        remote.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(turn) = self.mpos.turn.as_mut() {
            turn.agreed = agreed;
        }
        let inputs = Inputs {
            index,
            remote,
            verdicts,
            time: own_time,
        };
        Step::Go(call.with_inputs(inputs).call(&op.call))
    }

    /// MPO op `op` commits now, running `call`: its engine entry runs the
    /// call with the inputs from here on.
    pub(super) fn mpo_commit(&mut self, op: &Op, call: ProcCall) {
        self.mpos.forget_copy(op);
        // Not remove and insert: an execution of the old call handed out
        // before would then complete as the new entry's (seen in the
        // simulator: a copy ran without its inputs).
        self.engine.replace_call(ExecKey::Op(op.id), call);
        let Some(turn) = self.mpos.turn.take_if(|t| t.op == op.id) else {
            return; // a second copy, or a malformed one: no turn
        };
        let mpo = turn.call.id;
        // Every involved shard commits it at the same time.
        self.snapshots.floor_next(turn.agreed);
        self.mpos.received.remove(&mpo);
        if let Some(&index) = self.mpos.index_of.get(&mpo) {
            // Invariant: a shard commits its MPOs at indices 1, 2, 3, …
            // with no gap and none twice (a second copy runs as a no-op
            // and never gets here).
            if !self.config.planted.has(Bug::MpoOutOfSequence) {
                assert_eq!(index, self.mpos.last + 1, "{mpo} committed out of sequence");
            }
            self.mpos.last = self.mpos.last.max(index);
            self.mpos.recent.push_back(mpo);
        }
        if self.mpos.recent.len() as u64 > mpo::READS_KEPT {
            if let Some(old) = self.mpos.recent.pop_front() {
                self.mpos.index_of.remove(&old);
                self.mpos.skeen.forget(old);
            }
        }
    }
}
