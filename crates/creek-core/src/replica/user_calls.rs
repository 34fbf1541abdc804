//! Calls to user procedures at invoke time (DESIGN §14).
//!
//! The [`Registry`](creek_procs::Registry) knows only the built-ins; a user
//! procedure is replicated state (`\0proc/NAME`, see
//! [`creek_procs::user_procs`]). A replica checks a call to one against its
//! *latest* state — the end of the current order, committed and
//! tentative — because that is where a procedure the client has just
//! registered is: the client saw the register op's view, and its next call
//! must not be refused for want of a commit. The executor checks the
//! definition again when the op runs (it may change in between).
//!
//! User procedures are always broadcast, read-only ones included: a weak
//! call of a read-only user procedure is not answered locally, because a
//! re-registration ordered before it could make the same name write, and
//! a local op's writes would never reach the other replicas.

use bytes::Bytes;
use creek_exec::{Engine, ProcCall};
use creek_procs::user_procs::{self, UserProc, PROC_PREFIX};
use creek_procs::CallError;

use super::state::EngineState;
use super::Replica;
use crate::op::{ExecKey, Pos};

/// Most user procedures [`Replica::user_procedures`] lists.
pub const USER_PROCS_LIST_MAX: usize = 4096;

impl<E: Engine<ExecKey, Pos>> Replica<E> {
    /// The newest value of `key` at the end of the current order (see
    /// [`Engine::read_latest`]).
    pub fn read_latest(&self, key: &[u8]) -> Option<Bytes> {
        self.engine.read_latest(key)
    }

    /// Check a call whose name is no built-in as a call to a user
    /// procedure in the latest state: it exists, its arguments fit, and
    /// one that may write a strong keyspace is called `strong`. Returns
    /// whether it is read-only.
    pub(super) fn check_user_call(&self, call: &ProcCall, strong: bool) -> Result<bool, CallError> {
        let user = user_procs::check_user_call(
            &self.registry,
            &EngineState::latest(&self.engine),
            call,
            strong,
        )?;
        Ok(user.compiled().is_some_and(|p| p.read_only))
    }

    /// The user procedure `name` in the latest state, if it is registered
    /// (a record that no longer compiles has no compiled procedure).
    pub fn user_procedure(&self, name: &str) -> Option<UserProc> {
        user_procs::describe(&self.registry, &EngineState::latest(&self.engine), name)
    }

    /// The registered user procedures in the latest state, by name (at
    /// most [`USER_PROCS_LIST_MAX`]; records that no longer compile are
    /// left out).
    pub fn user_procedures(&self) -> Vec<UserProc> {
        let (from, to) = creek_procs::keyspace::prefix_range(PROC_PREFIX);
        let mut found = Vec::new();
        self.engine
            .scan_latest(&from, &to, USER_PROCS_LIST_MAX, &mut found);
        let latest = EngineState::latest(&self.engine);
        found
            .iter()
            .filter_map(|(key, _)| {
                let name = std::str::from_utf8(key.get(PROC_PREFIX.len()..)?).ok()?;
                user_procs::describe(&self.registry, &latest, name)
            })
            .collect()
    }
}
