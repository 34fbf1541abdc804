//! Responses (Algorithm 1, lines 55–56 and 62–74): what the engine
//! settles becomes views for clients — a tentative view for a valid
//! execution at a tentative position, and at the committed position a
//! confirmation or the stable result — and, when asked for, the changes
//! final executions make (for watchers).

use creek_exec::{Engine, Outcome, Settled};
use rustc_hash::FxHashMap;

use super::{mpo, Replica};

/// Every how many final ops the versions kept for reads at past
/// revisions are trimmed.
const REVISION_HORIZON_EVERY: u64 = 64;
use crate::op::{Change, Effect, ExecKey, Pos, View, ViewKind};

impl<E: Engine<ExecKey, Pos>> Replica<E> {
    /// Take the effects produced so far.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// Take what the engine settled (views, final executions); then, if
    /// an MPO at its turn waited for the ops before it to become final,
    /// try it again: those ops may have settled here, inside a call other
    /// than [`Replica::complete`] (a committed op whose tentative
    /// execution stays valid settles without running again).
    pub(super) fn process_settled(&mut self) {
        loop {
            let finalized = self.counters.finalized;
            self.drain_settled();
            if self.counters.finalized == finalized || !self.mpos.turn_waits_for_state() {
                break;
            }
            self.deliver_decided();
        }
        self.serve_parked_snapshots();
    }

    fn drain_settled(&mut self) {
        // Drained either way: the engine keeps them until asked.
        let mut early = Vec::new();
        self.engine.drain_installed(&mut early);
        if self.config.early_tentative_views {
            for (key, outcome) in early {
                self.on_installed(key, outcome);
            }
        }
        let mut settled = std::mem::take(&mut self.settled);
        self.engine.drain_settled(&mut settled);
        let mut writes = FxHashMap::default();
        if self.recording != (false, false) {
            let mut sets = Vec::new();
            self.engine.drain_writes(&mut sets);
            for w in sets {
                writes.insert((w.key, w.committed), w.writes);
            }
        }
        for s in settled.drain(..) {
            if let (ExecKey::Op(op), Some(w)) = (s.key, writes.remove(&(s.key, s.committed))) {
                // Before `on_settled` counts it: the final execution of the
                // op at this position.
                let position = s.committed.then_some(self.counters.finalized);
                self.changes.push(Change {
                    op,
                    position,
                    writes: w,
                });
            }
            self.on_settled(s);
        }
        self.settled = settled;
    }

    /// Record the changes final executions make (`committed`: one
    /// [`Change`] per committed op, in the committed order, from the next
    /// position finalized on) and those settled tentative executions make
    /// (`tentative`), for [`Replica::take_changes`]. Off by default: a
    /// driver that turns it on must take them.
    pub fn record_changes(&mut self, committed: bool, tentative: bool) {
        self.recording = (committed, tentative);
        self.engine.record_writes(committed, tentative);
    }

    /// Which changes are recorded: (committed, tentative).
    pub fn recording(&self) -> (bool, bool) {
        self.recording
    }

    /// The changes recorded since the last call, in the order they
    /// settled: committed ones in the committed order, tentative ones
    /// between them.
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    /// An execution valid over the ops before it that have executed: the
    /// op's first preliminary view, if it wants one and has none yet.
    fn on_installed(&mut self, key: ExecKey, outcome: Outcome) {
        let Some(a) = self.awaiting.get_mut(&key) else {
            return;
        };
        if !a.views.tentative || a.last_sent.is_some() {
            return;
        }
        a.first_tentative = Some(outcome.clone());
        a.last_sent = Some(outcome.clone());
        if a.client {
            self.counters.views += 1;
            let across_shards = self.is_mpo_key(key);
            self.effects.push(Effect::View(View {
                handle: key,
                kind: ViewKind::Tentative,
                outcome,
                across_shards,
                executions: 0,
                time: 0,
            }));
            self.snapshot_after_tentative(key);
        }
    }

    /// Responses (Algorithm 1, lines 55–56 and 62–74, with the final-view
    /// rule): a tentative view for a valid execution at a tentative position
    /// (weak ops: the first only; strong ops: whenever the result changes); at
    /// the committed position, a confirmation when the result equals the last
    /// view sent, the stable result otherwise.
    fn on_settled(&mut self, s: Settled<ExecKey>) {
        let mut time = 0;
        if s.committed {
            let at = self.counters.finalized.saturating_sub(self.committed_base);
            if let ExecKey::Op(id) = s.key {
                self.ops.remove(&id);
                debug_assert_eq!(
                    self.committed.get(at as usize),
                    Some(&id),
                    "ops become final in committed order"
                );
            }
            time = self.snapshots.finalized(at as usize);
            self.counters.finalized += 1;
            // Reads at past revisions move the kept versions on with the
            // final state (stable reads move them with the stable time).
            if self
                .counters
                .finalized
                .is_multiple_of(REVISION_HORIZON_EVERY)
            {
                self.move_horizon();
            }
        }
        let Some(a) = self.awaiting.get_mut(&s.key) else {
            return;
        };
        let mut send = None;
        if !s.committed {
            let first = a.last_sent.is_none();
            let changed = a.last_sent.as_ref() != Some(&s.outcome);
            if a.first_tentative.is_none() {
                a.first_tentative = Some(s.outcome.clone());
            }
            if a.views.tentative && changed && (first || a.strong) {
                a.last_sent = Some(s.outcome.clone());
                send = Some(ViewKind::Tentative);
            }
        } else {
            if let (Some(first), true) = (&a.first_tentative, a.client) {
                self.counters.accuracy_checked += 1;
                if *first == s.outcome {
                    self.counters.accuracy_hits += 1;
                }
            }
            if a.views.final_view {
                send = Some(if a.last_sent.as_ref() == Some(&s.outcome) {
                    ViewKind::Confirmation
                } else {
                    ViewKind::Stable
                });
            } else if a.last_sent.is_none() && a.views.tentative {
                send = Some(ViewKind::Tentative);
            }
        }
        let client = a.client;
        let local = matches!(s.key, ExecKey::Local(_));
        if s.committed || local {
            self.awaiting.remove(&s.key);
        }
        if local {
            self.engine.remove(s.key);
        }
        if let (Some(kind), true) = (send, client) {
            let tentative = kind == ViewKind::Tentative;
            if !tentative {
                self.snapshot_before_final(s.key);
            }
            self.counters.views += 1;
            let across_shards = tentative && self.is_mpo_key(s.key);
            self.effects.push(Effect::View(View {
                handle: s.key,
                kind,
                outcome: s.outcome,
                across_shards,
                executions: s.executions,
                time: if tentative { 0 } else { time },
            }));
            if tentative {
                self.snapshot_after_tentative(s.key);
            }
        }
    }

    /// Whether `key` runs a copy of an MPO held here (its tentative
    /// executions read the other shards' keys as absent).
    fn is_mpo_key(&self, key: ExecKey) -> bool {
        matches!(key, ExecKey::Op(id) if self.ops.get(&id).is_some_and(|op| mpo::is_mpo(op)))
    }
}
