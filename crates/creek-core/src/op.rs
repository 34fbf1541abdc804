//! The op record (Algorithm 1's `Req`), its place in the order, what a
//! client asks for and the views the replica answers with.

use std::sync::Arc;

use creek_exec::{Outcome, ProcCall};

use crate::dvv::Dvv;
use crate::id::{OpId, Timestamp};

/// One replicated operation: Algorithm 1's `Req`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// Assigned by the origin replica.
    pub id: OpId,
    /// The origin's hybrid-logical-clock time at invoke; ops are ordered by
    /// `(timestamp, id)` on the tentative list.
    pub timestamp: Timestamp,
    /// The procedure call.
    pub call: ProcCall,
    /// Strong ops are ordered by CAB and get a stable response.
    pub strong: bool,
    /// For a strong op, the ids its origin knew and ordered before it; `None`
    /// for weak ops.
    pub causal_context: Option<Dvv>,
}

impl Op {
    /// An op, with `call.time_us` set from `timestamp`, `call.strong` from
    /// `strong` and `call.op` from `id` (what the wire decoder derives on
    /// every other replica).
    pub fn new(
        id: OpId,
        timestamp: Timestamp,
        mut call: ProcCall,
        strong: bool,
        causal_context: Option<Dvv>,
    ) -> Op {
        call.time_us = timestamp.physical_us();
        call.strong = strong;
        call.op = Some((u64::from(id.origin.0), id.seq));
        Op {
            id,
            timestamp,
            call,
            strong,
            causal_context,
        }
    }

    /// The op's key on the tentative list.
    pub fn order_key(&self) -> (Timestamp, OpId) {
        (self.timestamp, self.id)
    }
}

/// What the engine knows an execution by: a replicated op, or a weak
/// read-only op answered locally and never broadcast (paper §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExecKey {
    /// A replicated op.
    Op(OpId),
    /// A local read-only op, numbered by this replica.
    Local(u64),
}

/// A place in the order committed · tentative. Every committed position
/// sorts before every tentative one; tentative positions sort by timestamp
/// and id, exactly as Algorithm 1's `<` on `Req`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pos {
    /// The n-th op of the committed list (0-based).
    Committed(u64),
    /// A tentative op.
    Tentative(Timestamp, ExecKey),
}

impl Pos {
    /// The revision of a committed position: its 1-based place in the
    /// committed order (docs/api.md, "Versions and revisions"); 0 for a
    /// tentative one, which has none.
    pub fn revision(self) -> u64 {
        match self {
            Pos::Committed(n) => n.saturating_add(1),
            Pos::Tentative(..) => 0,
        }
    }
}

/// Which views a client wants for one invocation (DESIGN §7): up to
/// three, delivered in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Views {
    /// A preliminary view from the first valid execution.
    pub tentative: bool,
    /// A snapshot view: the op (read-only) run on the committed state at
    /// a time the replica has applied (docs/snapshot-reads.md).
    pub snapshot: bool,
    /// A final view once the op's position is committed.
    pub final_view: bool,
}

impl Views {
    /// `[weak]`: one preliminary view.
    pub const WEAK: Views = Views {
        tentative: true,
        snapshot: false,
        final_view: false,
    };
    /// `[snapshot]`: the snapshot view only.
    pub const SNAPSHOT: Views = Views {
        tentative: false,
        snapshot: true,
        final_view: false,
    };
    /// `[strong]`: the final view only.
    pub const STRONG: Views = Views {
        tentative: false,
        snapshot: false,
        final_view: true,
    };
    /// `[weak, strong]`: both.
    pub const BOTH: Views = Views {
        tentative: true,
        snapshot: false,
        final_view: true,
    };
    /// `[weak, snapshot, strong]`: all three.
    pub const ALL: Views = Views {
        tentative: true,
        snapshot: true,
        final_view: true,
    };

    /// Whether no view at all is wanted.
    pub fn is_empty(self) -> bool {
        !(self.tentative || self.snapshot || self.final_view)
    }
}

/// A client's request to a replica.
#[derive(Clone, Debug)]
pub struct Request {
    /// What to run.
    pub call: ProcCall,
    /// Order it by CAB (strong) or by timestamp only (weak).
    pub strong: bool,
    /// Views the client wants.
    pub views: Views,
    /// The client's read time: the largest snapshot or commit time it has
    /// seen (µs; 0 if none). A snapshot view is never older, and the op is
    /// stamped after it (docs/snapshot-reads.md).
    pub read_time: u64,
    /// Read a snapshot view at exactly `read_time`, not at the later of it
    /// and the global stable time: each shard's part of one read across
    /// shards, all at one time (docs/snapshot-reads.md).
    pub read_exact: bool,
    /// A snapshot read at this revision: the state after the op at that
    /// 1-based place of the committed order ([`crate::Replica::revision_time`]
    /// gives the exact read time; `etcdctl get --rev`). Only with the
    /// snapshot view alone.
    pub read_revision: Option<u64>,
}

impl Request {
    /// A weak op with one preliminary view.
    pub fn weak(call: ProcCall) -> Self {
        Request {
            call,
            strong: false,
            views: Views::WEAK,
            read_time: 0,
            read_exact: false,
            read_revision: None,
        }
    }

    /// A strong op with a preliminary and a final view.
    pub fn strong(call: ProcCall) -> Self {
        Request {
            call,
            strong: true,
            views: Views::BOTH,
            read_time: 0,
            read_exact: false,
            read_revision: None,
        }
    }

    /// A read-only op with a snapshot view only, read at `read_time` or
    /// later.
    pub fn snapshot(call: ProcCall, read_time: u64) -> Self {
        Request {
            call,
            strong: false,
            views: Views::SNAPSHOT,
            read_time,
            read_exact: false,
            read_revision: None,
        }
    }
}

/// The kind of a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewKind {
    /// The result of a valid execution at a tentative position.
    Tentative,
    /// The result at the op's committed position, differing from the last
    /// tentative view sent (or with none sent).
    Stable,
    /// The committed result equals the last view sent (preliminary or
    /// snapshot); the payload is not repeated.
    Confirmation,
    /// The result on the committed state at one time the replica has
    /// applied ([`View::time`]): nothing tentative in it.
    Snapshot,
}

impl ViewKind {
    /// A final view: stable or a confirmation.
    pub fn is_final(self) -> bool {
        matches!(self, ViewKind::Stable | ViewKind::Confirmation)
    }
}

impl Views {
    /// Whether a view of `kind` is the last one an op asking for these
    /// views gets (views come in the order preliminary, snapshot, final).
    pub fn closes_with(self, kind: ViewKind) -> bool {
        match kind {
            ViewKind::Stable | ViewKind::Confirmation => true,
            ViewKind::Snapshot => !self.final_view,
            ViewKind::Tentative => !self.final_view && !self.snapshot,
        }
    }
}

/// A response for the client of an op invoked on this replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The invocation (as returned by `invoke`).
    pub handle: ExecKey,
    /// Its kind.
    pub kind: ViewKind,
    /// The result; for a confirmation, the confirmed result. A deterministic
    /// abort is an `Err` here and reaches the client as an error.
    pub outcome: Outcome,
    /// A preliminary view of an operation across shards: the execution of
    /// its copy on this shard's tentative state, where the other shards'
    /// keys read as absent (their values come with the final view).
    pub across_shards: bool,
    /// How many times this replica executed the op up to this view: on a
    /// final view (stable or confirmation) all of them, so those beyond
    /// the first are its re-executions here; 0 where not counted (an
    /// early preliminary view).
    pub executions: u32,
    /// For a snapshot view, the commit time it read at; for a final view,
    /// the op's commit time (µs on the commit-time scale,
    /// docs/snapshot-reads.md); 0 for a preliminary view. A client keeps
    /// the largest as its read time.
    pub time: u64,
}

/// What one op's execution wrote, for watchers of changes
/// ([`crate::Replica::record_changes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The op.
    pub op: OpId,
    /// Its position in the committed order (counted like
    /// [`crate::Replica::committed_len`]) for its final execution; `None`
    /// for a tentative execution, which a later one may replace or which
    /// may never commit.
    pub position: Option<u64>,
    /// Keys written with their new values (`None`: deleted), sorted by key.
    /// Empty for a final execution that wrote nothing (still reported, so
    /// that every committed position is accounted for).
    pub writes: Vec<creek_exec::txn::Write>,
}

/// What the replica asks its driver to do.
#[derive(Clone, Debug)]
pub enum Effect {
    /// Reliable-broadcast this op to every other replica.
    RbCast(Arc<Op>),
    /// Submit this strong op's id to conditional atomic broadcast.
    CabCast(OpId),
    /// Send this view to the op's client.
    View(View),
    /// This op was voided by the committed order (see
    /// [`creek_procs::void`]): it counts as delivered, and a copy that
    /// arrives later is refused.
    Voided(OpId),
    /// Send the values shard `from` read for MPO `mpo` at its committed
    /// position — its confirmation that it is there — to the replicas of
    /// each shard in `to` (and again when one asks:
    /// [`crate::Replica::mpo_reads_of`]).
    MpoReads {
        /// The MPO.
        mpo: creek_procs::mpo::MpoId,
        /// This replica's shard.
        from: u32,
        /// The other involved shards.
        to: Vec<u32>,
        /// The values, by key.
        reads: creek_procs::mpo::Reads,
    },
    /// Under [`crate::MpoOrder::Genuine`]: this shard's log gave MPO `mpo`
    /// timestamp `ts`; send it to the replicas of each shard in `to` (and
    /// again when one asks: [`crate::Replica::mpo_timestamp_of`]).
    MpoTimestamp {
        /// The MPO.
        mpo: creek_procs::mpo::MpoId,
        /// This replica's shard.
        from: u32,
        /// The other involved shards.
        to: Vec<u32>,
        /// The timestamp.
        ts: u64,
    },
}
