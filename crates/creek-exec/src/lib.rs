//! Creek's execution room: the multiversion speculative executor (Creek
//! paper §4.4) and the undo-log engine of the basic algorithm (Algorithm
//! 2), kept as a reference and test oracle.
//!
//! An engine runs [`ProcCall`]s through a [`Procedures`] it is given; what
//! a procedure is — built-ins, the procedure language, keyspaces, sessions,
//! auth — lives in the procedure room above (`creek-procs`), which this
//! crate does not know.
//!
//! This crate knows nothing of replicas, clocks or broadcasts: the caller
//! keeps a total order of positions and tells an [`Engine`] how it changes.
//! It does no I/O and starts no threads.
#![deny(missing_docs)]

pub mod basic;
pub mod engine;
pub mod mvcc;
pub mod procedures;
pub mod txn;
pub mod versions;

#[cfg(test)]
mod testkit;

pub use creek_types::ProcCall;
pub use engine::{
    BelowHorizon, Completion, Engine, ExecCounters, OpKey, Position, Settled, Task, WriteSet,
};
pub use procedures::Procedures;
pub use txn::{
    Abort, Executed, KeyRef, Outcome, ScanRead, SnapshotRead, Txn, TxnLimits, VersionNo,
};
