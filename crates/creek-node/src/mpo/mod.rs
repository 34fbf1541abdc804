//! The node's side of operations across shards (docs/cross-shard.md): the
//! replica's MPO inputs, each followed by a turn, and its MPO output handed
//! to the driver as [`MpoMessage`]s in [`Ready::mpo`](crate::Ready::mpo).
//! Messages between shards are the driver's to carry (a shard's replicas
//! are not this group's peers): the values a shard read go to every
//! replica of each other involved shard.
//!
//! What every driver does with them is here too, so the server and the
//! simulator run the same rules: the messages between groups
//! ([`wire`]), how a replica answers one ([`Node::mpo_serve`]), and what a
//! replica whose committed order waits on an MPO asks for
//! ([`Node::mpo_chase`]).

pub mod wire;

use creek_cab::CabStorage;
use creek_core::{Effect, ExecKey, InvokeError, OpId};
use creek_exec::ProcCall;
use creek_procs::mpo::{MpoCall, MpoId, Reads};

use crate::Node;
use wire::{Reply, Request};

/// How long the committed order may wait on the same MPO before the
/// replica asks for what it misses (the origin's messages usually come
/// sooner); the pause doubles after each ask, up to [`CHASE_MAX_US`].
pub const CHASE_AFTER_US: u64 = 50_000;
/// The longest pause between two asks.
pub const CHASE_MAX_US: u64 = 1_000_000;

/// What a replica whose committed order waits on an MPO misses.
#[derive(Clone, Debug, PartialEq)]
pub enum Chase {
    /// The MPO's index here: ask the directory (sequencing is
    /// idempotent), after handing each other shard its copy (the origin
    /// may have crashed before it did: a shard must not be told an index
    /// for an MPO none of its replicas holds).
    Index {
        /// The MPO's shards.
        shards: Vec<u32>,
        /// Each other shard's copy.
        copies: Vec<(u32, ProcCall)>,
    },
    /// Other shards' reads: ask a replica of each, handing it its copy
    /// ([`Request::Pull`]).
    Reads(Vec<(u32, ProcCall)>),
}

/// Why a replica does not take a request about an MPO.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The request makes no sense (a malformed copy).
    #[error("{0}")]
    Malformed(String),
    /// Another replica should get it (a copy for another shard; a
    /// sequencing at a replica that is not the directory's).
    #[error("{0}")]
    NotHere(String),
    /// This replica does not serve now (not a member of its group).
    #[error("{0}")]
    NotServing(String),
}

/// How many decided MPOs after the one the committed order waits on a
/// replica asks about at once ([`Node::mpo_chase`]).
pub const AHEAD: usize = 32;
/// How long before a replica asks again about an MPO ahead (its answer
/// may have been lost).
pub const AHEAD_AGAIN_US: u64 = 200_000;

/// What a replica has asked about the MPOs it waits on
/// ([`Node::mpo_chase`]).
#[derive(Debug, Default)]
pub(crate) struct Chasing {
    /// What the committed order (or a copy's cast) waits on.
    waiting: Option<Waiting>,
    /// The MPOs ahead of it asked about, and whether their index was
    /// known then, with when.
    ahead: std::collections::HashMap<(MpoId, bool), u64>,
}

/// The committed order waits on an MPO (see [`Node::mpo_chase`]).
#[derive(Debug)]
struct Waiting {
    /// The op, the shards whose reads it misses, whether its index is
    /// known: a change of any is progress.
    what: (OpId, Vec<u32>, bool),
    next_us: u64,
    pause_us: u64,
    /// Whether the replica asked for it.
    asked: bool,
}

/// What a replica's chase is due to ask about ([`Node::mpo_chase`]).
struct Due {
    op: OpId,
    mpo: MpoId,
    /// Whether its index is known here.
    indexed: bool,
    /// The shards whose reads it misses.
    missing: Vec<u32>,
    /// Whether the committed order waits on it (not a copy's cast).
    ordered: bool,
}

/// What this replica tells other shards about an MPO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MpoMessage {
    /// The values shard `from` read for `mpo` at its committed position:
    /// for a replica of each shard in `to`
    /// ([`Node::mpo_reads`] there).
    Reads {
        /// The MPO.
        mpo: MpoId,
        /// This replica's shard.
        from: u32,
        /// The other involved shards.
        to: Vec<u32>,
        /// The values, by key.
        reads: Reads,
    },
    /// Under [`creek_core::MpoOrder::Genuine`]: shard `from`'s log gave
    /// `mpo` timestamp `ts`, for a replica of each shard in `to`
    /// ([`Node::mpo_timestamp`] there).
    Timestamp {
        /// The MPO.
        mpo: MpoId,
        /// This replica's shard.
        from: u32,
        /// The other involved shards.
        to: Vec<u32>,
        /// The timestamp.
        ts: u64,
    },
    /// Shard `from`'s stable time, for every replica of each shard in
    /// `to` ([`Node::stable_from`] there; docs/snapshot-reads.md).
    Stable {
        /// This replica's shard.
        from: u32,
        /// The cluster's other shards.
        to: Vec<u32>,
        /// The shard's stable time.
        time: u64,
    },
}

impl MpoMessage {
    /// The replica's MPO effect as a message, or `None` for other effects.
    pub(crate) fn of(effect: Effect) -> Result<Self, Effect> {
        match effect {
            Effect::MpoReads {
                mpo,
                from,
                to,
                reads,
            } => Ok(MpoMessage::Reads {
                mpo,
                from,
                to,
                reads,
            }),
            Effect::MpoTimestamp { mpo, from, to, ts } => {
                Ok(MpoMessage::Timestamp { mpo, from, to, ts })
            }
            other => Err(other),
        }
    }
}

impl<S: CabStorage> Node<S> {
    /// Answer a request of another group's replica about an MPO, as a
    /// replica of shard `shard`: take a copy (unless one is held here), an
    /// index, another shard's reads or stable time; answer a pull with
    /// this shard's reads (invoking the copy it carries if none is held:
    /// "not yet"). A sequencing is the directory's ([`Refusal::NotHere`]:
    /// its driver answers it).
    pub fn mpo_serve(&mut self, req: Request, shard: u32, now_us: u64) -> Result<Reply, Refusal> {
        match req {
            Request::Copy(call) => self
                .mpo_take_copy(call, shard, now_us)
                .map(|()| Reply::Done),
            Request::Sequenced { mpo, index } => {
                self.mpo_sequenced(mpo, index);
                Ok(Reply::Done)
            }
            Request::Reads { mpo, from, reads } => {
                self.mpo_reads(mpo, from, reads);
                Ok(Reply::Done)
            }
            Request::Pull { mpo, copy } => match self.replica.mpo_reads_of(mpo) {
                Some(reads) => Ok(Reply::Reads(reads)),
                None => self
                    .mpo_take_copy(copy, shard, now_us)
                    .map(|()| Reply::Pending),
            },
            Request::Export {
                map,
                from,
                digests,
                adopted,
            } => self.move_export(&map, from, digests, adopted),
            Request::Fetch { keys, adopted } => Ok(self.move_fetch(keys, adopted)),
            Request::Mine {
                map,
                from,
                next,
                fence,
            } => self.move_mine(&map, from, next, fence),
            Request::Run(call) => Err(Refusal::NotHere(format!(
                "replica {} runs no op for another group here: {}",
                self.id(),
                call.name
            ))),
            Request::Sequence { .. } => Err(Refusal::NotHere(format!(
                "replica {} is not a directory replica: it sequences nothing",
                self.id()
            ))),
            Request::Stable { from, time } => {
                self.stable_from(from, time);
                Ok(Reply::Done)
            }
            Request::Batch(all) => {
                // Each taken in, then one turn for them all (decoded
                // batches carry only indices, reads and stable times).
                for one in all {
                    match one {
                        Request::Sequenced { mpo, index } => self.replica.mpo_sequenced(mpo, index),
                        Request::Reads { mpo, from, reads } => {
                            self.replica.mpo_reads(mpo, from, reads);
                        }
                        Request::Stable { from, time } => self.stable_from(from, time),
                        _ => {}
                    }
                }
                self.turn();
                Ok(Reply::Done)
            }
        }
    }

    fn mpo_take_copy(&mut self, call: ProcCall, shard: u32, now_us: u64) -> Result<(), Refusal> {
        let mpo = MpoCall::decode(&call.args)
            .map_err(|e| Refusal::Malformed(format!("a malformed MPO copy: {e}")))?;
        if mpo.me != shard {
            return Err(Refusal::NotHere(format!(
                "the copy of {} for shard {} reached replica {} of shard {shard}",
                mpo.id,
                mpo.me,
                self.id()
            )));
        }
        if self.replica.mpo_held(mpo.id) {
            return Ok(());
        }
        self.invoke_mpo_copy(call, now_us)
            .map(|_| ())
            .map_err(|e| Refusal::NotServing(e.to_string()))
    }

    /// If the committed order has waited on the same MPO for a while
    /// ([`CHASE_AFTER_US`], then twice as long after each ask), what to
    /// ask for: its index, or other shards' reads. A replica that had to
    /// ask for the last thing it waited on is catching up (it was down or
    /// cut off while the others went on, and meets MPOs whose messages
    /// went out long ago, one after the other): it asks for the next at
    /// once, and whenever it asks for what the committed order waits on,
    /// it asks for what the next [`AHEAD`] decided MPOs miss too
    /// ([`creek_core::Replica::mpo_ahead`]; each once an
    /// [`AHEAD_AGAIN_US`]), so it catches up at the pace of its links, not
    /// a round trip per MPO. Called by the driver every tick; empty when
    /// nothing is to be asked now.
    pub fn mpo_chase(&mut self, now_us: u64) -> Vec<(MpoId, Chase)> {
        // Asks ahead age out: once none is recent, the replica no longer
        // counts as catching up.
        self.mpo_chasing
            .ahead
            .retain(|_, at| now_us < *at + AHEAD_AGAIN_US);
        let Some(due) = self.mpo_chase_due(now_us) else {
            return Vec::new();
        };
        let mut asks: Vec<(MpoId, Chase)> = self
            .chase_of(due.op, due.mpo, due.indexed, &due.missing)
            .into_iter()
            .collect();
        if due.ordered {
            let asked = &mut self.mpo_chasing.ahead;
            let ahead: Vec<_> = (self.replica.mpo_ahead(AHEAD + 1).into_iter())
                .filter(|(op, ..)| *op != due.op)
                .filter(|(_, mpo, indexed, _)| asked.insert((*mpo, *indexed), now_us).is_none())
                .collect();
            for (op, mpo, indexed, missing) in ahead {
                asks.extend(self.chase_of(op, mpo, indexed, &missing));
            }
        }
        asks
    }

    /// What the replica waits on, if asking for it is due now.
    fn mpo_chase_due(&mut self, now_us: u64) -> Option<Due> {
        // The committed order's wait first; else a copy held here that
        // waits for its index before it is cast (`Replica::may_cast`).
        let (op, mpo, missing, ordered) = match self.replica.mpo_waiting() {
            Some((op, Some(mpo), missing)) => (op, mpo, missing, true),
            // Other shards' copies and this replica's own released ops
            // (`Replica::mpo_unsequenced`).
            _ => match self.replica.mpo_unsequenced(
                self.seq_reserved(),
                !self.reclaiming() && !self.own_origin.voids_pending(),
            ) {
                Some((op, mpo)) => (op, mpo, Vec::new(), false),
                None => {
                    self.mpo_chasing.waiting = None;
                    return None;
                }
            },
        };
        let indexed = self.replica.mpo_index(mpo).is_some();
        let what = (op, missing.clone(), indexed);
        let asked_ahead = !self.mpo_chasing.ahead.is_empty();
        match &mut self.mpo_chasing.waiting {
            Some(w) if w.what == what => {
                if now_us < w.next_us {
                    return None;
                }
                w.next_us = now_us + w.pause_us;
                w.pause_us = (w.pause_us * 2).min(CHASE_MAX_US);
                w.asked = true;
            }
            last => {
                // Only the committed order catches up: copies waiting for
                // their index come and go with every MPO. So does one that
                // asked ahead lately (what it waits on now may have been
                // asked for ahead, and not by its turn).
                let catching_up =
                    ordered && (last.as_ref().is_some_and(|w| w.asked) || asked_ahead);
                *last = Some(Waiting {
                    what,
                    next_us: now_us + CHASE_AFTER_US,
                    pause_us: CHASE_AFTER_US,
                    asked: catching_up,
                });
                if !catching_up {
                    return None;
                }
            }
        }
        Some(Due {
            op,
            mpo,
            indexed,
            missing,
            ordered,
        })
    }

    /// What to ask about op `op` of MPO `mpo`, missing the reads of
    /// `missing`: its index if not known, else those reads.
    fn chase_of(
        &self,
        op: OpId,
        mpo: MpoId,
        indexed: bool,
        missing: &[u32],
    ) -> Option<(MpoId, Chase)> {
        let op_call = self.replica.mpo_op_call(op)?;
        let call = MpoCall::decode(&op_call.args).ok()?;
        let copy_for = |s: u32| Some((s, call.for_shard(s).ok()?.call(op_call)));
        if !indexed {
            let shards = call.parts.iter().map(|p| p.shard).collect();
            let copies = call.others().filter_map(copy_for).collect();
            return Some((mpo, Chase::Index { shards, copies }));
        }
        if missing.is_empty() {
            return None; // the reads are here: the MPO waits for its state
        }
        let copies = missing.iter().filter_map(|s| copy_for(*s)).collect();
        Some((mpo, Chase::Reads(copies)))
    }

    /// On a directory replica: the indices its committed state gave MPO
    /// `mpo` (`mpo.sequence`'s answer), if it was sequenced.
    pub fn mpo_indices(&self, mpo: MpoId) -> Option<Vec<(u32, u64)>> {
        use creek_exec::Engine as _;
        use creek_procs::builtins::directory::{decode_indices, sequenced_key};
        let raw = self
            .replica
            .engine()
            .read_committed(&sequenced_key(mpo.origin, mpo.seq))?;
        decode_indices(&raw)
    }

    /// Invoke this shard's copy of an MPO another shard's replica received
    /// ([`creek_core::Replica::invoke_mpo_copy`]).
    pub fn invoke_mpo_copy(&mut self, call: ProcCall, now_us: u64) -> Result<ExecKey, InvokeError> {
        if !self.membership.is_member() {
            return Err(InvokeError::NotServing(format!(
                "replica {} is not serving its group",
                self.id()
            )));
        }
        let handle = self.replica.invoke_mpo_copy(call, now_us)?;
        self.turn();
        Ok(handle)
    }

    /// The directory sequenced `mpo` at `index` among this shard's MPOs
    /// ([`creek_core::Replica::mpo_sequenced`]).
    pub fn mpo_sequenced(&mut self, mpo: MpoId, index: u64) {
        self.replica.mpo_sequenced(mpo, index);
        self.turn();
    }

    /// Shard `shard`'s log gave `mpo` timestamp `ts`
    /// ([`creek_core::Replica::mpo_timestamp`]).
    pub fn mpo_timestamp(&mut self, mpo: MpoId, shard: u32, ts: u64) {
        self.replica.mpo_timestamp(mpo, shard, ts);
        self.turn();
    }

    /// Under [`creek_core::MpoOrder::Genuine`]: record the final
    /// timestamps that are due (this replica leading, or its leader
    /// silent for a while), and name the MPOs that wait for another
    /// shard's timestamp too long, each with the copies to hand the
    /// shards to ask ([`creek_core::Replica::mpo_stamps_due`]). Called by
    /// the driver every tick.
    pub fn mpo_stamps_due(&mut self, now_us: u64) -> Vec<(MpoId, Vec<(u32, ProcCall)>)> {
        let leads = self.cab.leader().is_none_or(|l| l == self.id());
        let due = self.replica.mpo_stamps_due(now_us, leads);
        let asks = due
            .into_iter()
            .filter_map(|(op, shards)| {
                let op_call = self.replica.mpo_op_call(op)?;
                let call = MpoCall::decode(&op_call.args).ok()?;
                let copies = (shards.into_iter())
                    .filter_map(|s| Some((s, call.for_shard(s).ok()?.call(op_call))))
                    .collect();
                Some((call.id, copies))
            })
            .collect();
        self.turn();
        asks
    }

    /// Shard `shard`'s values for `mpo` ([`creek_core::Replica::mpo_reads`]).
    pub fn mpo_reads(&mut self, mpo: MpoId, shard: u32, reads: Reads) {
        self.replica.mpo_reads(mpo, shard, reads);
        self.turn();
    }
}
