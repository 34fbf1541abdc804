//! The procedure registry and the one function every engine uses to run a
//! call: [`execute_call`], which also applies the replicated deduplication
//! table of client request ids.

use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::FxHashMap;

use crate::session::{self, Before};
use crate::user_procs::{self, ProgramCache};
use creek_exec::txn::{Executed, Outcome, SnapshotRead, Txn, TxnLimits};
use creek_types::ProcCall;

/// A deterministic stored procedure: no clocks, randomness or I/O inside.
/// It receives the call's encoded arguments as shared bytes, so it can keep
/// slices of them (keys, values) without copying.
pub type ProcFn = dyn Fn(&mut Txn<'_>, &Bytes) -> Outcome + Send + Sync;

/// Validation of a call's arguments before the op is accepted, so malformed
/// input is rejected at invoke time and nothing is broadcast or applied.
pub type CheckArgs = fn(&[u8]) -> Result<(), String>;

/// One registered procedure.
#[derive(Clone)]
pub struct Procedure {
    /// A read-only procedure never writes; a weak call to it runs locally
    /// without being broadcast (Creek paper §4.4).
    pub read_only: bool,
    /// Argument validation run at invoke time.
    pub check_args: CheckArgs,
    /// The body.
    pub run: Arc<ProcFn>,
    /// What a caller needs to know to call it, if it was described.
    pub signature: Option<Arc<Signature>>,
    /// The argument (by position) that is a key, read or written as given:
    /// checked against [`TxnLimits::key_bytes_max`] when the op is invoked,
    /// so an oversized key is refused before the op is ordered rather than
    /// aborted after (see [`Registry::check`]).
    pub key_arg: Option<usize>,
    /// Where a call runs on a cluster of several shards.
    pub route: Route,
}

/// Where a call of a procedure runs on a cluster of several shards
/// (docs/shards.md): the shard owning its key, every shard, or none when
/// its keys are known only as it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Route {
    /// On the shard owning argument `n`, a key of the built-in data (a
    /// `kv.*` key, or a list, set or queue name: a collection lives on one
    /// shard).
    Arg(usize),
    /// On the shard owning both key arguments (a transfer between two
    /// counters); keys on two shards make it an operation across shards.
    Args(usize, usize),
    /// On the shard owning every key of list argument `n` (multi-key reads
    /// and writes); keys on several shards make it an operation across
    /// shards, and an empty list names no key.
    List(usize),
    /// On the shard owning every key a `kv.txn` names in its compares and
    /// point ops (`creek_shard::txn_keys`); keys on several shards make it
    /// an operation across shards. One with a range op or a put with a
    /// lease cannot be routed (a sharded cluster refuses it).
    Txn,
    /// On every shard: state every shard keeps (procedures, keyspaces,
    /// users, roles, tokens), or nothing at all (`sys.noop`).
    Everywhere,
    /// Its keys are known only as it runs (workload procedures, user
    /// procedures): a cluster of several shards refuses it until
    /// operations across shards exist.
    #[default]
    Unknown,
}

impl Route {
    /// The keys a call with arguments `args` names under this route, or
    /// `None` for a route by no key (everywhere, unknown) and for
    /// arguments that do not hold keys where the route says (the
    /// procedure's own check refuses those).
    pub fn keys(&self, args: &[creek_types::value::Value]) -> Option<Vec<Bytes>> {
        let key = |n: usize| args.get(n).and_then(|v| v.as_bytes()).cloned();
        match *self {
            Route::Arg(n) => Some(vec![key(n)?]),
            Route::Args(a, b) => Some(vec![key(a)?, key(b)?]),
            Route::List(n) => match args.get(n)? {
                creek_types::value::Value::List(items) => {
                    items.iter().map(|v| v.as_bytes().cloned()).collect()
                }
                _ => None,
            },
            Route::Txn => match creek_shard::txn_keys(args) {
                creek_shard::TxnKeys::Keys(keys) => Some(keys),
                _ => None,
            },
            Route::Everywhere | Route::Unknown => None,
        }
    }
}

/// A procedure's parameters, result and purpose, as `creek proc list` and
/// the `Procedures` call show them. Types are named as clients write them:
/// `bytes`, `int`, `bool`, `list`, `bytes?` (bytes or nil), `any`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Signature {
    /// Each parameter's name and type, in order.
    pub params: Vec<(String, String)>,
    /// The result, e.g. `int: new value`.
    pub returns: String,
    /// One line on what it does.
    pub summary: String,
}

impl Signature {
    /// A signature from `(name, type)` pairs.
    pub fn new(params: &[(&str, &str)], returns: &str, summary: &str) -> Self {
        Signature {
            params: params
                .iter()
                .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
                .collect(),
            returns: returns.to_owned(),
            summary: summary.to_owned(),
        }
    }

    /// `(key: bytes, delta: int)`.
    pub fn params_text(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(n, t)| format!("{n}: {t}"))
            .collect();
        format!("({})", params.join(", "))
    }
}

impl std::fmt::Debug for Procedure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Procedure")
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// Why a call is refused before it becomes an op.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// No procedure of that name is registered.
    #[error("unknown procedure {0:?}")]
    UnknownProcedure(String),
    /// The arguments do not decode as the procedure expects.
    #[error("malformed arguments for {name}: {reason}")]
    MalformedArgs {
        /// The procedure.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A key argument is longer than the replicas' `key_bytes_max`.
    #[error("{name}: key of {len} bytes exceeds the limit of {max} bytes (key_bytes_max)")]
    KeyTooLarge {
        /// The procedure.
        name: String,
        /// The key's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The procedure may write a strong keyspace and the call is weak
    /// (DESIGN §14: such procedures run only in strong ops).
    #[error("{name} writes strong keyspace {keyspace}: invoke it at the strong level")]
    NeedsStrong {
        /// The procedure.
        name: String,
        /// A strong keyspace it may write.
        keyspace: String,
    },
}

/// The set of built-in procedures a replica can run. All replicas of a
/// cluster must hold the same registry. User procedures are not in it: they
/// are replicated state (see [`crate::user_procs`]); the registry only
/// shares, between its clones, a cache of their compiled programs.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    procs: FxHashMap<Arc<str>, Procedure>,
    programs: Arc<ProgramCache>,
    /// The shard's map as its state last held it, decoded
    /// ([`crate::ownership`]).
    owned: Arc<crate::ownership::DecodedMap>,
    /// Bugs planted in what runs here (empty in production builds).
    planted: creek_types::planted::PlantedBugs,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding the built-in procedures (see [`crate::builtins`]).
    pub fn with_builtins() -> Self {
        let mut r = Self::new();
        crate::builtins::register_all(&mut r);
        crate::session::register(&mut r);
        crate::void::register(&mut r);
        crate::mpo::register(&mut r);
        crate::moves::register(&mut r);
        r
    }

    /// Plant bugs in the procedures (a tool for validating the checkers;
    /// refused without the `planted-bugs` feature).
    pub fn plant(&mut self, bugs: creek_types::planted::PlantedBugs) {
        self.planted = self.planted.union(bugs);
    }

    /// The bugs planted here.
    pub fn planted(&self) -> creek_types::planted::PlantedBugs {
        self.planted
    }

    /// Register (or replace) `name`.
    pub fn register(&mut self, name: &str, procedure: Procedure) {
        self.procs.insert(Arc::from(name), procedure);
    }

    /// Register a procedure from a closure.
    pub fn register_fn(
        &mut self,
        name: &str,
        read_only: bool,
        check_args: CheckArgs,
        run: impl Fn(&mut Txn<'_>, &Bytes) -> Outcome + Send + Sync + 'static,
    ) {
        self.register(
            name,
            Procedure {
                read_only,
                check_args,
                run: Arc::new(run),
                signature: None,
                key_arg: None,
                route: Route::Unknown,
            },
        );
    }

    /// Attach `signature` to the registered procedure `name` (nothing if
    /// there is none).
    pub fn describe(&mut self, name: &str, signature: Signature) {
        if let Some(p) = self.procs.get_mut(name) {
            p.signature = Some(Arc::new(signature));
        }
    }

    /// Declare argument `index` of `name` a key (see
    /// [`Procedure::key_arg`]).
    pub fn key_arg(&mut self, name: &str, index: usize) {
        if let Some(p) = self.procs.get_mut(name) {
            p.key_arg = Some(index);
        }
    }

    /// Set where calls of `name` run on a cluster of several shards (see
    /// [`Procedure::route`]).
    pub fn route(&mut self, name: &str, route: Route) {
        if let Some(p) = self.procs.get_mut(name) {
            p.route = route;
        }
    }

    /// Where a call of `name` runs on a cluster of several shards; a name
    /// not registered (a user procedure) is [`Route::Unknown`].
    pub fn route_of(&self, name: &str) -> Route {
        self.get(name).map_or(Route::Unknown, |p| p.route)
    }

    /// Every registered procedure, sorted by name.
    pub fn procedures(&self) -> Vec<(&str, &Procedure)> {
        let mut v: Vec<(&str, &Procedure)> =
            self.procs.iter().map(|(k, p)| (k.as_ref(), p)).collect();
        v.sort_unstable_by_key(|(k, _)| *k);
        v
    }

    /// Look a procedure up.
    pub fn get(&self, name: &str) -> Option<&Procedure> {
        self.procs.get(name)
    }

    /// The compiled user programs, shared by this registry's clones.
    pub fn programs(&self) -> &ProgramCache {
        &self.programs
    }

    /// Check that `call` names a known built-in procedure with well-formed
    /// arguments (user procedures: [`crate::user_procs::check_user_call`]).
    pub fn check(&self, call: &ProcCall, limits: &TxnLimits) -> Result<&Procedure, CallError> {
        let p = self
            .get(&call.name)
            .ok_or_else(|| CallError::UnknownProcedure(call.name.to_string()))?;
        (p.check_args)(&call.args).map_err(|reason| CallError::MalformedArgs {
            name: call.name.to_string(),
            reason,
        })?;
        // The keys the call names as keys of the built-in data (its key
        // argument, or every key its route names), each checked against
        // the limit before the op is ordered.
        let multi = matches!(p.route, Route::Args(..) | Route::List(_) | Route::Txn);
        if p.key_arg.is_some() || multi {
            let args = creek_types::value::decode_args(&call.args).unwrap_or_default();
            let keys = match p.key_arg {
                Some(index) => Route::Arg(index).keys(&args),
                None => p.route.keys(&args),
            };
            if let Some(len) = keys
                .unwrap_or_default()
                .iter()
                .map(Bytes::len)
                .find(|len| *len > limits.key_bytes_max)
            {
                return Err(CallError::KeyTooLarge {
                    name: call.name.to_string(),
                    len,
                    max: limits.key_bytes_max,
                });
            }
        }
        Ok(p)
    }

    /// Names of all registered procedures, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.procs.keys().map(|k| k.as_ref()).collect();
        v.sort_unstable();
        v
    }
}

/// Prefix of keys reserved for Creek's own replicated tables. Built-in
/// procedures refuse user keys starting with it.
pub const INTERNAL_KEY_PREFIX: u8 = 0;

impl creek_exec::Procedures for Registry {
    fn execute(&self, snapshot: &dyn SnapshotRead, limits: TxnLimits, call: &ProcCall) -> Executed {
        execute_call(self, snapshot, limits, call)
    }
}

/// Run `call` on `snapshot`.
///
/// A name that is not a built-in is a user procedure, looked up in the
/// snapshot (see [`crate::user_procs`]); an unknown one aborts. Built-ins
/// that change definitions (`keyspace.create`, `proc.register`,
/// `proc.drop`) and user procedures that may write a strong keyspace abort,
/// writing nothing, unless the call is strong ([`ProcCall::strong`]).
///
/// Deduplication: when the call carries a client request id and the
/// procedure writes, the client's session entry is looked up first (see
/// [`crate::session`]): a recorded outcome is returned without running
/// again, a request past the session horizon is refused, and otherwise the
/// procedure runs and its outcome is recorded (aborts included: a retry must
/// not turn a reported failure into a success). The table is ordinary
/// versioned state, so every replica reaches the same verdict for the same
/// order.
pub fn execute_call(
    registry: &Registry,
    snapshot: &dyn SnapshotRead,
    limits: TxnLimits,
    call: &ProcCall,
) -> Executed {
    if call.name.as_ref() == crate::mpo::RUN {
        return crate::mpo::execute(registry, snapshot, limits, call);
    }
    let Some(procedure) = registry.get(&call.name) else {
        return user_procs::execute(registry, snapshot, limits, call);
    };
    let mut txn = Txn::new(snapshot, limits, procedure.read_only);
    let violation = crate::builtins::defs::level_violation(call)
        .or_else(|| crate::builtins::auth::level_violation(call))
        .or_else(|| crate::builtins::directory::level_violation(call))
        .or_else(|| crate::moves::level_violation(call))
        .or_else(|| crate::builtins::lease::level_violation(call));
    if let Some(abort) = violation {
        return txn.finish(Err(abort));
    }
    if let Err(denied) = crate::auth::check_execution(registry, &mut txn, call, None) {
        return txn.finish(Err(denied));
    }
    run_in_session(registry, txn, call, procedure.read_only, |txn| {
        crate::builtins::defs::run(registry, txn, call)
            .or_else(|| crate::builtins::lease::run(txn, call, registry.planted()))
            .unwrap_or_else(|| (procedure.run)(txn, &call.args))
    })
}

/// Run `body` in `txn` with the session rules of [`execute_call`], and
/// abort it, unrecorded, if it touched a key its shard's state says
/// another shard owns ([`crate::ownership`]).
pub(crate) fn run_in_session(
    registry: &Registry,
    mut txn: Txn<'_>,
    call: &ProcCall,
    read_only: bool,
    body: impl FnOnce(&mut Txn<'_>) -> Outcome,
) -> Executed {
    let owned = match crate::moves::is_move_op(&call.name) {
        // A move's own ops check their keys against the move instead.
        true => None,
        false => crate::ownership::read(&registry.owned, &mut txn),
    };
    let dedup = call.request_id.filter(|_| !read_only);
    if let Some(id) = dedup {
        if let Before::Answer(outcome) = session::before(&mut txn, id, call.time_us) {
            let read = txn.finish(Ok(Bytes::new()));
            return Executed {
                writes: Vec::new(),
                outcome,
                ..read
            };
        }
    }
    let result = body(&mut txn);
    let mut executed = txn.finish(result);
    if let Some(refused) = owned.and_then(|o| o.check(&call.name, &executed).err()) {
        executed.writes.clear();
        executed.outcome = Err(refused);
        return executed;
    }
    if let Some(id) = dedup {
        session::after(call, id, &executed.outcome, &mut executed.writes);
    }
    executed
}
