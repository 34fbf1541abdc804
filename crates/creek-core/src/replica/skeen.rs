//! Operations across shards ordered by a genuine atomic multicast among
//! their shards only ([`MpoOrder::Genuine`]): Skeen's protocol over
//! consensus groups, the alternative to the directory's sequencer
//! (docs/cross-shard.md, "Order"). Built to measure the two against each
//! other in the simulator.
//!
//! Each involved shard's log orders the MPO's copy like any strong op
//! (cast at once: no directory round first). Where the log decides the
//! copy, the shard's **clock** ticks and the MPO gets this shard's
//! **timestamp** (the same on every replica: it depends only on the
//! decided order). The shards exchange their timestamps
//! ([`Effect::MpoTimestamp`]); the largest is the MPO's **final
//! timestamp**, which each shard records in its own log with a
//! [`creek_procs::mpo::STAMP`] op (its leader invokes it, any replica
//! after a while). Where the log decides the stamp, the clock moves up to
//! the final timestamp. An MPO is given the next index among the shard's
//! MPOs — and from there on commits at its turn as under the sequencer
//! (`mpo.rs`) — once it has a final timestamp and no MPO of this shard
//! still without one has a smaller timestamp here (ties by MPO id).
//!
//! Why the shards agree: two MPOs are indexed in the order of their final
//! timestamps (then ids) on every shard they share. An MPO `m` with final
//! `F` is indexed only when every MPO that has a timestamp here but no
//! final one has a larger timestamp — and its final one will be at least
//! that — and every MPO whose copy this log decides later gets a
//! timestamp above the clock, which is at least `F` once `m`'s stamp is
//! decided. So no MPO indexed after `m` here can end with a smaller final
//! timestamp. Invariant, asserted: a shard's timestamps strictly
//! increase, and its indices follow the final timestamps.
//!
//! The ordering runs where ids are decided, not where they commit: a
//! shard whose committed order waits at an MPO's turn still gives
//! timestamps and takes stamps, which other MPOs' turns may depend on.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use creek_exec::Engine;
use creek_procs::mpo::{self, MpoCall, MpoId};
use rustc_hash::FxHashMap;

use super::mpo::{is_mpo, RECEIVED_MAX};
use super::Replica;
use crate::config::MpoOrder;
use crate::id::OpId;
use crate::op::{Effect, ExecKey, Pos, Views};

/// How long a replica that does not lead waits before it records a final
/// timestamp itself (its leader may have crashed), and before it asks a
/// shard whose timestamp has not come.
pub const STAMP_AFTER_US: u64 = 50_000;
/// How long before a replica invokes a stamp, or asks for a timestamp,
/// again (the first may have been lost).
pub const STAMP_AGAIN_US: u64 = 200_000;

/// The ordering state of one shard's replica.
#[derive(Debug, Default)]
pub(super) struct Skeen {
    /// The largest timestamp this shard's log gave or recorded.
    clock: u64,
    /// Decided ids the ordering has not looked at yet, in decision order.
    unscanned: VecDeque<OpId>,
    /// Each MPO this shard's log gave a timestamp (kept as long as its
    /// index is: `forget`).
    local: FxHashMap<MpoId, Local>,
    /// Other shards' timestamps, by MPO and shard (they may come early).
    remote: FxHashMap<MpoId, BTreeMap<u32, u64>>,
    /// MPOs with a timestamp here and no final one, by (timestamp, MPO).
    pending: BTreeSet<(u64, MpoId)>,
    /// MPOs with a final timestamp and no index yet, by (final, MPO).
    stamped: BTreeSet<(u64, MpoId)>,
    /// The index the last MPO was given.
    last_index: u64,
    /// The last (final timestamp, MPO) indexed: indices follow them.
    last_final: Option<(u64, MpoId)>,
    /// The indices each scanned stamp gave, until the committed order
    /// takes the stamp off its queue (`skeen_release`).
    release: FxHashMap<OpId, Vec<(MpoId, u64)>>,
}

#[derive(Debug)]
struct Local {
    ts: u64,
    /// The copy whose decision gave it.
    op: OpId,
    /// The other involved shards.
    others: Vec<u32>,
    /// The replica's clock then.
    at_us: u64,
    /// Whether the final timestamp was decided here.
    stamped: bool,
    /// When this replica last invoked a stamp, or asked for timestamps.
    stamp_sent_us: Option<u64>,
    asked_us: Option<u64>,
}

impl Skeen {
    /// MPO `mpo` committed long ago here: its ordering records go.
    pub(super) fn forget(&mut self, mpo: MpoId) {
        self.local.remove(&mpo);
        self.remote.remove(&mpo);
    }
}

impl<E: Engine<ExecKey, Pos>> Replica<E> {
    pub(super) fn genuine(&self) -> bool {
        self.config.mpo_order == MpoOrder::Genuine
    }

    /// CAB decided `id`: the ordering looks at it in decision order.
    pub(super) fn skeen_decided(&mut self, id: OpId) {
        if self.genuine() {
            self.mpos.skeen.unscanned.push_back(id);
        }
    }

    /// Look at the decided ids in order, as far as their payloads are
    /// here: an MPO copy's decision gives it this shard's timestamp, a
    /// stamp's records its final one and gives the indices that allows,
    /// which hold once the committed order passes the stamp
    /// (`skeen_release`).
    pub(super) fn skeen_scan(&mut self) {
        if !self.genuine() {
            return;
        }
        while let Some(&id) = self.mpos.skeen.unscanned.front() {
            let Some(op) = self.ops.get(&id).cloned() else {
                if self.is_committed(id) {
                    self.mpos.skeen.unscanned.pop_front();
                    continue;
                }
                break; // its payload comes (conditional delivery)
            };
            self.mpos.skeen.unscanned.pop_front();
            if is_mpo(&op) {
                if let Ok(call) = MpoCall::decode(&op.call.args) {
                    self.skeen_timestamp(id, &call);
                }
            } else if op.call.name.as_ref() == mpo::STAMP {
                if let Some((mpo, ts)) = mpo::decode_stamp(&op.call.args) {
                    self.skeen_stamp(mpo, ts);
                    let indexed = self.skeen_index();
                    if !indexed.is_empty() {
                        self.mpos.skeen.release.insert(id, indexed);
                    }
                }
            }
        }
    }

    /// The committed order takes decided id `id` off its queue: the
    /// indices its decision gave (if a stamp) hold from here on. Applied
    /// here rather than where the stamp was scanned, so that whether a
    /// copy waits for its index, or is parked, depends only on the decided
    /// order (a replica missing a payload scans less far ahead).
    pub(super) fn skeen_release(&mut self, id: OpId) {
        if let Some(indexed) = self.mpos.skeen.release.remove(&id) {
            for (mpo, index) in indexed {
                self.mpo_indexed(mpo, index);
            }
        }
    }

    /// The log decided copy `op` of `call`: its timestamp, if it is the
    /// MPO's first copy here.
    fn skeen_timestamp(&mut self, op: OpId, call: &MpoCall) {
        if self.mpos.skeen.local.contains_key(&call.id) || self.mpo_index(call.id).is_some() {
            return; // a second copy
        }
        let sk = &mut self.mpos.skeen;
        sk.clock += 1;
        let ts = sk.clock;
        sk.local.insert(
            call.id,
            Local {
                ts,
                op,
                others: call.others().collect(),
                at_us: self.now_us,
                stamped: false,
                stamp_sent_us: None,
                asked_us: None,
            },
        );
        sk.pending.insert((ts, call.id));
        self.effects.push(Effect::MpoTimestamp {
            mpo: call.id,
            from: call.me,
            to: call.others().collect(),
            ts,
        });
    }

    /// The log decided a stamp: MPO `mpo`'s final timestamp is `ts`.
    fn skeen_stamp(&mut self, mpo: MpoId, ts: u64) {
        let sk = &mut self.mpos.skeen;
        let Some(local) = sk.local.get_mut(&mpo) else {
            return; // not ordered here (a stamp for another shard's MPO)
        };
        if local.stamped {
            return; // a second stamp (two replicas invoked one)
        }
        debug_assert!(
            ts >= local.ts,
            "{mpo}: final {ts} below this shard's {}",
            local.ts
        );
        local.stamped = true;
        sk.pending.remove(&(local.ts, mpo));
        sk.stamped.insert((ts.max(local.ts), mpo));
        sk.clock = sk.clock.max(ts);
    }

    /// Give the next indices to the stamped MPOs no pending one may still
    /// precede.
    fn skeen_index(&mut self) -> Vec<(MpoId, u64)> {
        let mut indexed = Vec::new();
        loop {
            let sk = &mut self.mpos.skeen;
            let Some(&first) = sk.stamped.first() else {
                return indexed;
            };
            if sk.pending.first().is_some_and(|p| *p < first) {
                return indexed;
            }
            sk.stamped.pop_first();
            assert!(
                sk.last_final.is_none_or(|last| last < first),
                "{}: indexed after {:?} with a smaller final timestamp",
                first.1,
                sk.last_final
            );
            sk.last_final = Some(first);
            sk.last_index += 1;
            indexed.push((first.1, sk.last_index));
        }
    }

    /// Shard `shard`'s log gave MPO `mpo` timestamp `ts`.
    pub fn mpo_timestamp(&mut self, mpo: MpoId, shard: u32, ts: u64) {
        if !self.genuine() || self.mpo_index(mpo).is_some() {
            return;
        }
        let sk = &mut self.mpos.skeen;
        if !sk.remote.contains_key(&mpo) && sk.remote.len() >= RECEIVED_MAX {
            return;
        }
        sk.remote.entry(mpo).or_default().insert(shard, ts);
    }

    /// This shard's timestamp for MPO `mpo`, if its log gave one (among
    /// the MPOs whose index is kept): what to answer a shard that asks.
    pub fn mpo_timestamp_of(&self, mpo: MpoId) -> Option<u64> {
        self.mpos.skeen.local.get(&mpo).map(|l| l.ts)
    }

    /// The MPOs this shard's log ordered that still lack a final
    /// timestamp: a stamp is invoked for each whose timestamps are all
    /// here (at once by the leader, `leads`, by any replica after
    /// `STAMP_AFTER_US`; again after `STAMP_AGAIN_US`); returned are
    /// those that miss other shards' timestamps for longer than
    /// `STAMP_AFTER_US` (what to ask them), each with its copy here and
    /// the shards to ask.
    pub fn mpo_stamps_due(&mut self, now_us: u64, leads: bool) -> Vec<(OpId, Vec<u32>)> {
        if !self.genuine() {
            return Vec::new();
        }
        self.now_us = self.now_us.max(now_us);
        let mut stamps = Vec::new();
        let mut asks = Vec::new();
        let sk = &mut self.mpos.skeen;
        for &(_, mpo) in &sk.pending {
            let Some(local) = sk.local.get_mut(&mpo) else {
                continue;
            };
            let remote = sk.remote.get(&mpo);
            let missing: Vec<u32> = (local.others.iter().copied())
                .filter(|s| remote.is_none_or(|r| !r.contains_key(s)))
                .collect();
            let waited = now_us >= local.at_us + STAMP_AFTER_US;
            if !missing.is_empty() {
                if waited
                    && local
                        .asked_us
                        .is_none_or(|at| now_us >= at + STAMP_AGAIN_US)
                {
                    local.asked_us = Some(now_us);
                    asks.push((local.op, missing));
                }
                continue;
            }
            let again = local
                .stamp_sent_us
                .is_none_or(|at| now_us >= at + STAMP_AGAIN_US);
            if again && (leads || waited) {
                local.stamp_sent_us = Some(now_us);
                let fin = remote
                    .into_iter()
                    .flat_map(|r| r.values())
                    .fold(local.ts, |a, b| a.max(*b));
                stamps.push(mpo::stamp_call(mpo, fin));
            }
        }
        for call in stamps {
            // Like a void: a strong op with no client, never carried
            // along by a later op of this replica (`invoke_op`).
            self.invoke_op(call, true, Views::STRONG, false, now_us);
        }
        asks
    }
}
