//! What the executor runs: the one seam between the multiversion store and
//! the procedures that read and write it.
//!
//! The executor orders, snapshots and validates; it does not know what a
//! procedure is, how one is registered, or who may call it. The procedure
//! room (`creek-procs`: the registry, built-ins, the procedure language,
//! keyspaces, sessions and auth) implements [`Procedures`] and is handed
//! to an engine as an `Arc<dyn Procedures>`.

use creek_types::ProcCall;

use crate::txn::{Executed, SnapshotRead, TxnLimits};

/// Runs a call on a snapshot: deterministic, with no clocks, randomness or
/// I/O, so every replica that runs the same call on the same snapshot gets
/// the same [`Executed`]. An unknown procedure or a refused call is an
/// aborted outcome, never a panic.
pub trait Procedures: Send + Sync + std::fmt::Debug {
    /// Run `call` on `snapshot` under `limits`.
    fn execute(&self, snapshot: &dyn SnapshotRead, limits: TxnLimits, call: &ProcCall) -> Executed;
}
