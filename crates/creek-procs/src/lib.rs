//! What runs inside Creek's executor: the procedure [`Registry`] with its
//! built-ins, user procedures (the language in [`lang`], registered as
//! replicated state by [`user_procs`] over the keyspaces of [`keyspace`]),
//! client sessions ([`session`]: each request takes effect once) and users
//! and rights ([`auth`]), all of it versioned state read and written
//! through the executor's transactions.
//!
//! [`Registry`] is the executor's [`creek_exec::Procedures`]: an engine is
//! handed one and runs every call through [`execute_call`]. The executor
//! below knows nothing of what is here; nothing here orders, stores or
//! sends anything.
#![deny(missing_docs)]

pub mod abort;
pub mod auth;
pub mod builtins;
pub mod keyspace;
pub mod lang;
pub mod moves;
pub mod mpo;
pub mod ownership;
pub mod registry;
pub mod session;
pub mod user_procs;
pub mod versions;
pub mod void;

pub use registry::{execute_call, CallError, Procedure, Registry, Route, Signature};
