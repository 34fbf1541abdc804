//! The turn's executions: rounds of ready executions, on the worker pool
//! or inline, bounded per turn; and the recovery a restarted replica runs
//! before it takes client calls.

use std::time::{Duration, Instant};

use super::NodeLoop;

/// Ready executions below this count run inline on the node loop thread.
const POOL_MIN_TASKS: usize = 16;

/// Most executions run in one round of [`NodeLoop::execute`].
pub(super) const EXEC_ROUND_MAX: usize = 1024;

/// A turn starts no new round of executions past this age; the rest run
/// in the turns after it (see [`NodeLoop::execute`]). Well under an
/// election timeout (160 ms by default), so a replica with a long backlog
/// still answers its peers in time.
pub(super) const EXEC_TURN_BUDGET: Duration = Duration::from_millis(20);

impl NodeLoop {
    /// Run the executions that are ready, round after round, until none
    /// is: a round on the worker pool when it is large, inline otherwise
    /// (waking the pool costs more than a few small ops). A round runs its executions side by side on snapshots taken
    /// before any of them completes, so on a hot key (a counter every op
    /// increments) all but the first of a round read a version the first
    /// replaces, and run again: a round of n wastes n − 1 executions, and a
    /// tentative list of thousands on one key cost thousands of executions
    /// per op. So a round is as wide as the last one was useful: halved when
    /// most of its executions were wasted (rejected at validation,
    /// discarded, or installed and rolled back), doubled up to
    /// [`EXEC_ROUND_MAX`] otherwise.
    ///
    /// A turn that began at `began` stops starting rounds once it is
    /// [`EXEC_TURN_BUDGET`] old (a first round always runs), and the next
    /// turn goes on: a backlog of thousands of executions (a restart's
    /// recovered ops, a catch-up) then holds calls and peer messages for
    /// a round at a time, not for seconds.
    pub(super) fn execute(&mut self, began: Instant) {
        let mut first = true;
        loop {
            if !first && began.elapsed() >= EXEC_TURN_BUDGET {
                self.exec_backlog = true;
                return;
            }
            first = false;
            let mut tasks = Vec::new();
            while let Some(t) = self.node.next_execution() {
                tasks.push(t);
                if tasks.len() >= self.exec_round {
                    break;
                }
            }
            if tasks.is_empty() {
                self.exec_backlog = false;
                if let Some((ops, since)) = self.recovering.take() {
                    tracing::info!(
                        recovered_ops = ops,
                        took_ms = since.elapsed().as_millis() as u64,
                        "ran the ops recovered from the data directory again: taking client calls"
                    );
                }
                return;
            }
            let ran = tasks.len();
            let before = self.node.replica().exec_counters();
            let replica = self.node.replica();
            let done = match (&self.pool, tasks.len()) {
                (Some(pool), n) if n >= POOL_MIN_TASKS => pool.install(|| {
                    use rayon::prelude::*;
                    tasks.par_iter().map(|t| replica.run(t)).collect::<Vec<_>>()
                }),
                _ => tasks.iter().map(|t| replica.run(t)).collect(),
            };
            for c in done {
                self.node.complete(c);
            }
            let after = self.node.replica().exec_counters();
            let wasted = (after.conflicts - before.conflicts)
                + (after.stale - before.stale)
                + (after.invalidations - before.invalidations);
            self.exec_round = if wasted as usize * 2 > ran {
                (self.exec_round / 2).max(1)
            } else {
                (self.exec_round * 2).min(EXEC_ROUND_MAX)
            };
        }
    }

    /// Why client calls are refused now, while the ops recovered from the
    /// data directory run again (each would wait behind all of them).
    pub(super) fn recovery_refusal(&self) -> Option<String> {
        self.recovering.map(|(ops, _)| {
            format!(
                "replica {} is running the {ops} ops it recovered from its data directory again; \
                 retry at another replica",
                self.node.id()
            )
        })
    }
}
