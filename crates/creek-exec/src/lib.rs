//! Creek's execution room: the multiversion speculative executor (Creek
//! paper §4.4), the procedure registry with its built-ins, user procedures
//! (the language in [`lang`], registered as replicated state by
//! [`user_procs`] over the keyspaces of [`keyspace`]), and the undo-log
//! engine of the basic algorithm (Algorithm 2), kept as a reference and test
//! oracle.
//!
//! This crate knows nothing of replicas, clocks or broadcasts: the caller
//! keeps a total order of positions and tells an [`Engine`] how it changes.
//! It does no I/O and starts no threads.
#![deny(missing_docs)]

pub mod auth;
pub mod basic;
pub mod builtins;
pub mod engine;
pub mod keyspace;
pub mod lang;
pub mod mvcc;
pub mod registry;
pub mod session;
pub mod txn;
pub mod user_procs;
pub mod value;
pub mod varint;
pub mod void;

pub use engine::{Completion, Engine, ExecCounters, OpKey, Position, Settled, Task, WriteSet};
pub use registry::{
    execute_call, CallError, ClientRequestId, Executed, ProcCall, Procedure, Registry, Signature,
};
pub use txn::{Abort, KeyRef, Outcome, ScanRead, SnapshotRead, Txn, TxnLimits, VersionNo};
