//! The seam between the replica protocol and an execution engine.
//!
//! The protocol owns the *order* (committed · tentative) and tells the
//! engine where each op stands: [`Engine::insert`], [`Engine::reposition`],
//! [`Engine::commit`]. The engine decides what to (re)execute and
//! reports, through [`Settled`], when an op's execution is valid for the
//! current order with every earlier op valid too — the moment the paper's
//! Algorithm 1 would have it on its `executed` list.
//!
//! Execution is split in three so a driver can run many at once:
//! [`Engine::next_task`] hands out work, [`Engine::run`] executes it against a
//! snapshot through a shared reference (a worker thread or the simulator's
//! virtual core), and [`Engine::complete`] validates and installs the result.
//!
//! Reads of the *final* state (committed and settled) come in two kinds:
//! the newest one ([`Engine::read_committed`], [`Engine::scan_committed`])
//! and, when the engine keeps a history of final versions, the one before a
//! given position ([`Engine::read_final_before`],
//! [`Engine::scan_final_before`]) for the `snapshot` level
//! (docs/snapshot-reads.md), back to a horizon the caller moves with
//! [`Engine::set_final_horizon`].

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::Hash;

use bytes::Bytes;

use creek_types::ProcCall;

use crate::txn::Executed;
use crate::txn::Outcome;

/// What identifies an op to an engine (the replica uses its `OpId`).
pub trait OpKey: Copy + Eq + Hash + Debug {}
impl<T: Copy + Eq + Hash + Debug> OpKey for T {}

/// A place in the order; the protocol keeps positions unique and totally
/// ordered. Moving an op means giving it a new position.
pub trait Position: Copy + Ord + Debug {}
impl<T: Copy + Ord + Debug> Position for T {}

/// One execution handed to a driver.
#[derive(Clone, Debug)]
pub struct Task<K> {
    /// The op.
    pub key: K,
    /// The op's execution generation when the task was handed out; a
    /// completion from an older generation is discarded.
    pub gen: u64,
    /// What to run.
    pub call: ProcCall,
}

/// The result of running a [`Task`], to be handed back to [`Engine::complete`].
#[derive(Clone, Debug)]
pub struct Completion<K> {
    /// The op.
    pub key: K,
    /// Generation of the task.
    pub gen: u64,
    /// Reads, writes and outcome.
    pub executed: Executed,
}

/// An op's execution became valid for the current order, with every op
/// before it valid too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled<K> {
    /// The op.
    pub key: K,
    /// Its result at its current position.
    pub outcome: Outcome,
    /// The op is committed: this result is final and the engine has
    /// forgotten the op. Reported exactly once per op.
    pub committed: bool,
    /// How many times the engine has executed the op so far (all of them
    /// when `committed`; beyond the first are re-executions).
    pub executions: u32,
}

/// What one settled execution wrote, for watchers of changes
/// ([`Engine::record_writes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteSet<K> {
    /// The op.
    pub key: K,
    /// Its final execution at its committed position (reported once, in
    /// the committed order); otherwise a tentative execution that a later
    /// one may replace.
    pub committed: bool,
    /// Keys written with their new values (`None`: deleted), sorted by key.
    pub writes: Vec<crate::txn::Write>,
}

/// Execution counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecCounters {
    /// Ops ever inserted.
    pub ops: u64,
    /// Executions started (every task handed out).
    pub executions: u64,
    /// Executions beyond the first of each op.
    pub reexecutions: u64,
    /// Installed executions later invalidated (rolled back).
    pub invalidations: u64,
    /// Completions rejected at validation because a read had changed.
    pub conflicts: u64,
    /// Completions discarded because the op had been invalidated meanwhile.
    pub stale: u64,
    /// Versions currently stored: live ones and the newest final version of
    /// each key (older final versions are counted in `history_versions`).
    pub versions_alive: u64,
    /// Older final versions kept for reads of the final state before a
    /// position ([`Engine::set_final_horizon`]); 0 while no history is kept.
    pub history_versions: u64,
    /// Bytes of those versions: key plus value length of each (a tombstone
    /// counts its key), not allocator overhead.
    pub history_bytes: u64,
}

/// A read of the final state before a position the engine no longer keeps
/// (at or below its horizon), or one made while it keeps no history at all.
/// The caller answers it from elsewhere (a peer, the strong level) or
/// refuses it; nothing was read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the snapshot is older than the versions kept ({})", kept(.horizon))]
#[non_exhaustive]
pub struct BelowHorizon {
    /// The horizon in force, as its `Debug` text (`None`: no history kept).
    pub horizon: Option<String>,
}

/// What [`BelowHorizon`]'s message says is kept.
fn kept(horizon: &Option<String>) -> String {
    match horizon {
        Some(h) => format!("only states after position {h} are kept"),
        None => "no older versions are kept".to_owned(),
    }
}

impl BelowHorizon {
    /// No history is kept: every position is below the horizon.
    pub fn no_history() -> Self {
        BelowHorizon { horizon: None }
    }

    /// Reads must be after `horizon`.
    pub fn at(horizon: impl Debug) -> Self {
        BelowHorizon {
            horizon: Some(format!("{horizon:?}")),
        }
    }
}

/// An execution engine driven by the replica protocol.
pub trait Engine<K: OpKey, P: Position> {
    /// A new op at `pos` (no op may hold `pos`).
    fn insert(&mut self, key: K, pos: P, call: ProcCall);
    /// Move a known op to an unused position `pos`.
    fn reposition(&mut self, key: K, pos: P);
    /// Forget an op that is not committed (a local read-only op once answered).
    fn remove(&mut self, key: K);
    /// Run a known op, not yet final, with `call` from now on: its
    /// execution so far (installed, or handed out and not completed) no
    /// longer counts, and it runs again where it stands.
    fn replace_call(&mut self, key: K, call: ProcCall);
    /// Move a known op to committed position `pos`: every position up to and
    /// including `pos` is committed and will never move again. Successive
    /// calls use increasing positions, all below every uncommitted one.
    fn commit(&mut self, key: K, pos: P);
    /// The next execution to run, if any is ready.
    fn next_task(&mut self) -> Option<Task<K>>;
    /// Run `task` against its snapshot. Pure: the engine is not modified.
    fn run(&self, task: &Task<K>) -> Completion<K>;
    /// Validate and install a completed execution.
    fn complete(&mut self, completion: Completion<K>);
    /// Move the settled notifications accumulated so far into `out`.
    fn drain_settled(&mut self, out: &mut Vec<Settled<K>>);
    /// Move into `out` the outcomes of executions installed since the last
    /// call that are valid but not yet settled, because an op before them
    /// has not executed yet: each is the result at the op's position over
    /// the ops installed before it — a serialization of a subset of the
    /// order, which the settled result may still change. A driver may answer
    /// a preliminary view with it at once (the paper's tentative response
    /// after an execution). Engines that settle every execution when they
    /// install it report nothing here.
    fn drain_installed(&mut self, out: &mut Vec<(K, Outcome)>) {
        let _ = out;
    }
    /// Record what settled executions write: those of committed ops
    /// (`committed`) and of tentative ones (`tentative`), for
    /// [`Engine::drain_writes`]. Off by default; engines that cannot tell
    /// record nothing.
    fn record_writes(&mut self, committed: bool, tentative: bool) {
        let _ = (committed, tentative);
    }
    /// Move the write sets recorded since the last call into `out`, in the
    /// order their [`Settled`] notifications were produced.
    fn drain_writes(&mut self, out: &mut Vec<WriteSet<K>>) {
        let _ = out;
    }
    /// Counters so far.
    fn counters(&self) -> ExecCounters;
    /// The committed state: the newest committed value of every key whose
    /// writer has been reported committed.
    fn committed_state(&self) -> BTreeMap<Bytes, Bytes>;
    /// Call `f` with every committed `(key, value)` whose key starts with
    /// `prefix`, in no particular order.
    fn committed_with_prefix(&self, prefix: &[u8], f: &mut dyn FnMut(&Bytes, &Bytes)) {
        for (k, v) in self
            .committed_state()
            .range(Bytes::copy_from_slice(prefix)..)
        {
            if !k.starts_with(prefix) {
                break;
            }
            f(k, v);
        }
    }
    /// The committed value of `key` (as [`Engine::committed_state`] holds
    /// it), `None` if absent or deleted.
    fn read_committed(&self, key: &[u8]) -> Option<Bytes> {
        let mut found = None;
        self.committed_with_prefix(key, &mut |k, v| {
            if k.as_ref() == key {
                found = Some(v.clone());
            }
        });
        found
    }
    /// The newest value of `key` at the end of the current order: what the
    /// newest installed execution that wrote it left (committed or
    /// tentative), else its committed value; `None` if absent or deleted.
    /// Ops not executed yet are not reflected. A cheap point read for
    /// invoke-time checks (a procedure the client just registered), never
    /// recorded as a read of any execution.
    fn read_latest(&self, key: &[u8]) -> Option<Bytes>;
    /// Append to `out` the live keys of `[from, to)` at the end of the
    /// current order (as [`Engine::read_latest`] sees them), in ascending
    /// byte order, stopping after `limit` of them. Appends nothing when
    /// `from >= to`.
    fn scan_latest(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes)>);
    /// Append to `out` the keys of `[from, to)` in the committed state (as
    /// [`Engine::committed_state`] holds it), in ascending byte order,
    /// stopping after `limit` of them. Appends nothing when `from >= to`.
    fn scan_committed(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes)>) {
        if from >= to {
            return;
        }
        let state = self.committed_state();
        let range = state.range::<[u8], _>((
            std::ops::Bound::Included(from),
            std::ops::Bound::Excluded(to),
        ));
        out.extend(range.take(limit).map(|(k, v)| (k.clone(), v.clone())));
    }
    /// Keep the final versions a read of the final state before a position
    /// after `horizon` needs ([`Engine::read_final_before`]), or (`None`)
    /// keep none: only the newest final version of each key, as when the
    /// engine starts, with every older one dropped now.
    ///
    /// `Some(h)` promises that no read will ask for a position at or below
    /// `h`: a final version superseded at a position `<= h` may be dropped.
    /// While a history is kept the horizon only moves forward: a lower one
    /// is a caller bug (asserted in debug builds, otherwise ignored).
    /// Versions superseded before the history was turned on are gone, so
    /// reads at or below the newest final position at that moment (or a
    /// loaded checkpoint's committed bound) stay refused too. Engines that
    /// keep no history ignore this.
    fn set_final_horizon(&mut self, horizon: Option<P>) {
        let _ = horizon;
    }
    /// Start keeping final versions from now on, with no horizon yet: reads
    /// of the final state before any position after the newest final one
    /// are answered — on an engine with nothing final, before the first
    /// position too (the empty or loaded state). A history already kept is
    /// left as it is. [`Engine::set_final_horizon`] moves the horizon up
    /// later. Engines that keep no history ignore this.
    fn keep_final_history(&mut self) {}
    /// The value of `key` in the final state before `before`: what the
    /// newest final version written at a position `< before` holds (`None`:
    /// absent or deleted there). `Err` when no history is kept or `before`
    /// is at or below the horizon ([`Engine::set_final_horizon`]).
    ///
    /// Ask only for positions up to the finalized frontier (the position
    /// after the last final op): beyond it, committed ops not yet final are
    /// missing and the newest final version is read.
    fn read_final_before(&self, key: &[u8], before: P) -> Result<Option<Bytes>, BelowHorizon> {
        let _ = (key, before);
        Err(BelowHorizon::no_history())
    }
    /// Append to `out` the live keys of `[from, to)` in the final state
    /// before `before` (as [`Engine::read_final_before`] sees them), in
    /// ascending byte order, stopping after `limit` of them; nothing when
    /// `from >= to`. `Err` (and nothing appended) as for
    /// [`Engine::read_final_before`].
    fn scan_final_before(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        before: P,
        out: &mut Vec<(Bytes, Bytes)>,
    ) -> Result<(), BelowHorizon> {
        let _ = (from, to, limit, before, out);
        Err(BelowHorizon::no_history())
    }
    /// Tasks handed out and not yet completed (or known to be stale).
    fn running(&self) -> usize;
    /// Forget every task handed out: their completions will be discarded and
    /// the ops run again (after a crash lost the executions in flight).
    fn abandon_running(&mut self);
}
