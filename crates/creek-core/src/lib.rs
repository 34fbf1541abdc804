//! Creek's replica protocol as a deterministic, I/O-free state machine.
//!
//! A [`Replica`] is Algorithm 1 of the Creek paper: ops are stamped with a
//! hybrid-logical-clock [`Timestamp`] and an [`OpId`], RB-cast to everyone and
//! kept on a tentative list sorted by `(timestamp, id)`; strong ops also get a
//! causal context ([`Dvv`]) and are CAB-cast; on CAB delivery their causal
//! context and then they themselves move to the committed list. Execution is
//! speculative and multiversioned (`creek_exec`, running the procedures of
//! `creek_procs`); responses come back as
//! [`View`]s.
//!
//! ```
//! use std::sync::Arc;
//! use creek_core::{Config, Effect, ReplicaId, Replica, Request, ViewKind};
//! use creek_procs::Registry;
//! use creek_types::{value::{encode_args, Value}, ProcCall};
//!
//! let registry = Arc::new(Registry::with_builtins());
//! let mut r = Replica::new(Config::for_replica(ReplicaId(1)), registry).unwrap();
//! let put = ProcCall::new("kv.put", encode_args(&[Value::from("k"), Value::from("v")]));
//! let handle = r.invoke(Request::strong(put), 1_000).unwrap();
//! r.execute_all();
//! // The tentative view arrives at once; the id goes to CAB.
//! let effects = r.take_effects();
//! let cab_id = effects.iter().find_map(|e| match e { Effect::CabCast(id) => Some(*id), _ => None }).unwrap();
//! assert!(effects.iter().any(|e| matches!(e, Effect::View(v) if v.kind == ViewKind::Tentative)));
//! // CAB decides it: the execution already done is final, so a confirmation follows.
//! r.cab_deliver(cab_id);
//! let effects = r.take_effects();
//! assert!(effects.iter().any(|e| matches!(e, Effect::View(v) if v.handle == handle && v.kind == ViewKind::Confirmation)));
//! ```
//!
//! A replica at a clean point yields a [`Checkpoint`] of its committed state
//! ([`Replica::checkpoint`]); [`Replica::restore`] rebuilds one from a
//! checkpoint and the op payloads kept beside it.
//!
//! Not here: networking, consensus, gossip, persistence (their own crates
//! drive this one; `creek-store` encodes and keeps checkpoints).
#![deny(missing_docs)]

pub mod checkpoint;
pub mod config;
pub mod dvv;
pub mod group;
pub mod hlc;
pub mod id;
pub mod op;
pub mod replica;

pub use checkpoint::Checkpoint;
pub use config::{Config, ConfigError, MpoOrder, PLANTED_BUGS_OFF, REVISIONS_KEPT_DEFAULT};
pub use dvv::{Dvv, RunRecord};
pub use group::{Addrs, Directory, Group};
pub use hlc::Hlc;
pub use id::{OpId, ReplicaId, Timestamp};
pub use op::{Change, Effect, ExecKey, Op, Pos, Request, View, ViewKind, Views};
pub use replica::{Counters, InvokeError, Replica, SnapshotHistory};
