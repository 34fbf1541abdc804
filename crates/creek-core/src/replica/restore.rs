//! Checkpointing a replica at a clean point, and restoring one from a
//! checkpoint plus the op payloads kept beside it (DESIGN §8).
//!
//! A restored replica holds the checkpoint's state as the engine's committed
//! base and every kept op that the checkpoint does not cover on its
//! tentative list. Conditional atomic broadcast, restarted at the
//! checkpoint's `cab_applied`, then delivers again every id decided after
//! that point; those deliveries commit, in the same order as before the
//! crash, the ops that were committed after the checkpoint, and everything
//! re-executes. What the driver persists and when is `creek-store`'s
//! business; this module only rebuilds the protocol state.

use std::sync::Arc;

use creek_exec::Engine;
use creek_procs::Registry;

use super::Replica;
use crate::checkpoint::Checkpoint;
use crate::config::{Config, ConfigError};
use crate::id::OpId;
use crate::op::{ExecKey, Op, Pos};

impl Replica {
    /// A replica with the multiversion executor, restarted from `checkpoint`
    /// (`None`: from the empty state) and the op payloads it had accepted
    /// and not yet dropped (`ops`, own ops included, in any order).
    ///
    /// * The checkpoint's state becomes the committed base; committed
    ///   positions continue from `committed_len`, which
    ///   [`Replica::committed_len`] counts and [`Replica::committed`] does
    ///   not list.
    /// * The causal context is the checkpoint's plus every restored weak op.
    /// * The clock resumes past the checkpoint's and every restored op's
    ///   timestamp; the event counter past the checkpoint's and every
    ///   restored own op's seq, so no id or timestamp is issued twice.
    /// * Every op that the checkpoint does not cover goes on the tentative
    ///   list with no client awaiting it (clients of a crashed replica have
    ///   gone); restored own strong ops count as in flight for the
    ///   stabilizer. Ops the checkpoint covers are skipped.
    ///
    /// Nothing is emitted: the ops were broadcast before the crash. The
    /// driver restarts CAB at `checkpoint.cab_applied` (or 0) and re-casts
    /// the tentative strong ops (`creek-node` does both).
    pub fn restore(
        config: Config,
        registry: Arc<Registry>,
        checkpoint: Option<Checkpoint>,
        ops: Vec<Arc<Op>>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut checkpoint = checkpoint.unwrap_or_default();
        let mut engine = Self::executor(&config, &registry);
        let state = std::mem::take(&mut checkpoint.state);
        let upto = checkpoint.committed_len.checked_sub(1).map(Pos::Committed);
        engine.load_committed(state, upto);
        let mut replica = Self::with_engine(config, registry, engine)?;
        replica.resume(checkpoint, ops);
        Ok(replica)
    }
}

impl<E: Engine<ExecKey, Pos>> Replica<E> {
    /// A checkpoint of the committed state, or `None` if this is not a clean
    /// point: a decided id still waits for its causal context, or a
    /// committed op's final execution is not known yet (run the pending
    /// executions and try again). At a clean point `committed_state()` is
    /// exactly the state after the committed list. `cab_applied` is left 0
    /// for the node to fill in.
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        let committed_len = self.committed_len();
        if !self.decided.is_empty()
            || !self.mpos.is_idle()
            || self.counters.finalized != committed_len
        {
            return None;
        }
        // The causal context holds the committed ops and the tentative weak
        // ones; the latter are restored from their payloads instead.
        let mut tentative_weak: Vec<OpId> = self
            .tentative
            .iter()
            .map(|(_, id)| *id)
            .filter(|id| self.ops.get(id).is_some_and(|op| !op.strong))
            .collect();
        // Newest first: removing near the top of each origin's contiguous
        // range keeps the set compact.
        tentative_weak.sort_unstable_by(|a, b| b.cmp(a));
        let mut committed = self.causal_ctx.clone();
        for id in tentative_weak {
            committed.remove(id);
        }
        Some(Checkpoint {
            cab_applied: 0,
            committed_len,
            causal_ctx: committed,
            state: self.engine.committed_state().into_iter().collect(),
            hlc: self.hlc.last(),
            next_event_no: self.curr_event_no.saturating_add(1),
            commit_time: self.last_commit_time(),
            group: Default::default(),
        })
    }

    /// Continue from `checkpoint` (whose state the engine already holds as
    /// its committed base) with the kept `ops`. Only on a fresh replica.
    fn resume(&mut self, checkpoint: Checkpoint, mut ops: Vec<Arc<Op>>) {
        debug_assert!(
            self.committed.is_empty() && self.ops.is_empty() && self.causal_ctx.is_empty(),
            "resume on a used replica"
        );
        self.committed_base = checkpoint.committed_len;
        self.counters.committed = checkpoint.committed_len;
        self.counters.finalized = checkpoint.committed_len;
        self.hlc.observe(checkpoint.hlc);
        self.snapshots.resume(checkpoint.commit_time);
        self.curr_event_no = checkpoint.next_event_no.saturating_sub(1);
        let last_mpo = self.engine.read_committed(creek_procs::mpo::SEQ_KEY);
        self.mpos
            .resume(creek_procs::mpo::decode_seq(last_mpo.as_deref()));
        let covered = checkpoint.causal_ctx;
        self.causal_ctx = covered.clone();
        self.delivered = covered.clone();
        ops.sort_by_key(|op| op.order_key());
        for op in ops {
            let id = op.id;
            if id.seq == 0 || covered.contains(id) || self.ops.contains_key(&id) {
                continue;
            }
            self.hlc.observe(op.timestamp);
            if id.origin == self.config.id {
                self.curr_event_no = self.curr_event_no.max(id.seq);
                if op.strong && !super::mpo::is_mpo(&op) {
                    self.own_strong_tentative.insert(op.order_key());
                }
            }
            if !op.strong {
                self.causal_ctx.insert(id);
                // Stamped at the next tick, like a remote arrival.
                self.weak_arrivals.push_back((None, id));
            }
            self.delivered.insert(id);
            self.tentative.insert(op.order_key());
            let key = ExecKey::Op(id);
            self.engine
                .insert(key, Pos::Tentative(op.timestamp, key), op.call.clone());
            self.mpo_arrived(&op);
            self.ops.insert(id, op);
        }
    }
}
