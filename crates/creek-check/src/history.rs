//! What clients observed: every invocation with its views and their times.
//! The checkers work on this and on the replicas' final state. Times are
//! microseconds on one clock per run: virtual time in the simulator, time
//! since the run started when real processes are driven.

use creek_core::{OpId, ViewKind};
use creek_exec::{Outcome, ProcCall};

/// One view a client received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenView {
    /// Time of receipt, microseconds.
    pub at_us: u64,
    /// Tentative, stable or confirmation.
    pub kind: ViewKind,
    /// The result carried (for a confirmation, the confirmed result).
    pub outcome: Outcome,
    /// A snapshot view's commit time, a final view's the op's commit time
    /// (0 for a preliminary view, or where the driver does not know it).
    pub time: u64,
}

/// One client invocation.
#[derive(Clone, Debug)]
pub struct OpRecord {
    /// The client (session) that issued it.
    pub client: u32,
    /// The replica it was submitted to.
    pub replica: usize,
    /// The op's id, or `None` for a local read (never replicated).
    pub id: Option<OpId>,
    /// What was called.
    pub call: ProcCall,
    /// Ordered by CAB.
    pub strong: bool,
    /// Whether the client asked for a final view.
    pub wants_final: bool,
    /// Time of the invocation, microseconds.
    pub invoked_at_us: u64,
    /// Views received, in order.
    pub views: Vec<SeenView>,
    /// The origin replica crashed before the op got its final view (the
    /// client never learnt the final outcome).
    pub origin_crashed: bool,
    /// The origin replica left the group before the op got its final view,
    /// and the client moved to another replica (it never learnt the final
    /// outcome: as after a crash, the op may take effect after the
    /// session's later ones).
    pub origin_left: bool,
    /// The op was lost with its origin's unsynced writes (its id, now
    /// `None`, was issued again): it never took effect.
    pub lost: bool,
}

/// The `client` of the workload's setup calls (no session issued them).
pub const SETUP_CLIENT: u32 = u32::MAX;

impl OpRecord {
    /// Whether this is one of the workload's setup calls.
    pub fn is_setup(&self) -> bool {
        self.client == SETUP_CLIENT
    }

    /// The final view (stable or confirmation), if received.
    pub fn final_view(&self) -> Option<&SeenView> {
        self.views.iter().find(|v| v.kind.is_final())
    }

    /// The first tentative view, if received.
    pub fn first_tentative(&self) -> Option<&SeenView> {
        self.views.iter().find(|v| v.kind == ViewKind::Tentative)
    }

    /// The call as the replicas run it: with its level and, for a
    /// replicated op, its identity (what `creek_core::Op::new` sets). The
    /// definition built-ins and user procedures depend on both (a
    /// strong-only procedure aborts in a weak op; `op_id()` names the op),
    /// so a checker that re-executes a call uses this, not `call`.
    pub fn executed_call(&self) -> ProcCall {
        let mut call = self.call.clone();
        call.strong = self.strong;
        call.op = self.id.map(|id| (u64::from(id.origin.0), id.seq));
        call
    }
}

/// Everything the clients saw in one run.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Invocations in invocation order.
    pub ops: Vec<OpRecord>,
}
