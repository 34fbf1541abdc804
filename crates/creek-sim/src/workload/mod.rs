//! Workloads for checking: op generators with the invariants each must keep.

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_exec::{ProcCall, Registry};

use crate::history::History;
use crate::rng::Rng;

/// One op a client wants to issue.
#[derive(Clone, Debug)]
pub struct NextOp {
    /// The call.
    pub call: ProcCall,
    /// Strong (ordered by CAB) or weak.
    pub strong: bool,
    /// For a weak op: also ask for the final view.
    pub wants_final: bool,
}

/// A workload: what clients do and what must hold afterwards.
pub trait Workload {
    /// Its name on the command line.
    fn name(&self) -> &'static str;
    /// Register any procedures beyond the built-ins (same on every replica).
    fn register(&self, registry: &mut Registry);
    /// Calls run once, strong, before clients start (initial data).
    fn setup(&self) -> Vec<ProcCall>;
    /// The next op of `client`.
    fn next_op(&mut self, rng: &mut Rng, client: u32) -> NextOp;
    /// The keys a call touches, for partitioning the linearizability check
    /// (ops sharing a key are checked together). Empty: the call is not
    /// checked for linearizability.
    fn keys(&self, call: &ProcCall) -> Vec<Bytes>;
    /// Workload invariants over what clients saw and the converged committed
    /// state; each violation is described in one line.
    fn check(&self, history: &History, committed_state: &BTreeMap<Bytes, Bytes>) -> Vec<String>;
}
