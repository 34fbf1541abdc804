//! What Creek's clients observed, and the checkers that judge it.
//!
//! A driver records a [`history::History`]: every invocation a client made,
//! with the views it received and when. At the end of a run the checkers
//! judge that history together with each replica's final state: the
//! committed orders agree and converge, nothing acknowledged is lost, a
//! replay of the committed order gives every final view, strong ops are
//! linearizable ([`linearizable`]) and respect real time and session order
//! ([`order`]); [`run::check_run`] runs them all.
//!
//! Two drivers use the same checkers: the deterministic simulator
//! (`creek-sim`), which fills the replicas' final state from its own
//! replicas, and drivers of real `creek serve` processes, which record the
//! history through the client and read the final state from the replicas.
//! This crate drives nothing: it neither runs a cluster nor injects faults,
//! and holds no workload's invariants (a workload hands its own to
//! [`run::check_run`]).
//!
//! ```
//! use creek_check::history::{History, OpRecord, SeenView};
//! use creek_check::order::check_session_order;
//! use creek_core::{OpId, ReplicaId, ViewKind};
//! use creek_types::ProcCall;
//!
//! // One client wrote twice, through replica 1.
//! let op = |seq: u64| OpRecord {
//!     client: 0,
//!     replica: 0,
//!     id: Some(OpId::new(ReplicaId(1), seq)),
//!     call: ProcCall::new("kv.put", bytes::Bytes::new()),
//!     strong: false,
//!     wants_final: false,
//!     invoked_at_us: seq * 10,
//!     views: vec![SeenView {
//!         at_us: seq * 10 + 1,
//!         kind: ViewKind::Tentative,
//!         outcome: Ok(bytes::Bytes::new()),
//!         time: 0,
//!     }],
//!     origin_crashed: false,
//!     origin_left: false,
//!     lost: false,
//! };
//! let history = History { ops: vec![op(1), op(2)] };
//! let in_order = [OpId::new(ReplicaId(1), 1), OpId::new(ReplicaId(1), 2)];
//! assert!(check_session_order(&history, &in_order).is_empty());
//! let swapped = [in_order[1], in_order[0]];
//! assert_eq!(check_session_order(&history, &swapped).len(), 1);
//! ```
#![deny(missing_docs)]

pub mod history;
pub mod linearizable;
pub mod order;
pub mod run;
pub mod snapshot;
