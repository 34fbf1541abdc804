//! `keyspace.*` and `proc.*`: the built-ins that create keyspaces and
//! register user procedures (DESIGN §14). Their logic is in
//! [`crate::user_procs`]; here are their signatures and the dispatch from
//! [`crate::execute_call`], which gives them what a plain body lacks: the
//! registry (for the cache of compiled programs and the built-in names) and
//! the call's level.
//!
//! | procedure         | arguments                   | result                                  | read-only | strong only |
//! |-------------------|-----------------------------|-----------------------------------------|-----------|-------------|
//! | `keyspace.create` | `name: bytes, label: bytes` | nil                                     |           | yes         |
//! | `keyspace.list`   | none                        | list of `[name, label]`                 | yes       |             |
//! | `proc.register`   | `source: bytes`             | list of `[name, version]`               |           | yes         |
//! | `proc.list`       | none                        | list of `[name, version, signature, read_only, writes_strong]` | yes | |
//! | `proc.show`       | `name: bytes`               | `[name, version, source]`, or nil       | yes       |             |
//! | `proc.drop`       | `name: bytes`               | bool: existed                           |           | yes         |
//!
//! A strong-only one called in a weak op aborts before it runs, writing
//! nothing (not even the client's session entry).

use bytes::Bytes;

use super::{describe_all, Sig, Subject, Ty};
use crate::registry::Registry;
use crate::user_procs;
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_types::value::Value;
use creek_types::ProcCall;

const KS_CREATE: Sig = Sig {
    name: "keyspace.create",
    params: &[("name", Ty::Bytes), ("label", Ty::Bytes)],
    subject: Subject::None,
};
const KS_LIST: Sig = Sig {
    name: "keyspace.list",
    params: &[],
    subject: Subject::None,
};
const REGISTER: Sig = Sig {
    name: "proc.register",
    params: &[("source", Ty::Bytes)],
    subject: Subject::None,
};
const LIST: Sig = Sig {
    name: "proc.list",
    params: &[],
    subject: Subject::None,
};
const SHOW: Sig = Sig {
    name: "proc.show",
    params: &[("name", Ty::Bytes)],
    subject: Subject::None,
};
const DROP: Sig = Sig {
    name: "proc.drop",
    params: &[("name", Ty::Bytes)],
    subject: Subject::None,
};

/// The definition built-ins that write strong state.
const STRONG_ONLY: &[&str] = &[KS_CREATE.name, REGISTER.name, DROP.name];

/// Register the `keyspace.*` and `proc.*` procedures. Their bodies here
/// only abort: [`run`] runs them, from [`crate::execute_call`].
pub(super) fn register(r: &mut Registry) {
    r.register_fn(KS_CREATE.name, false, |a| KS_CREATE.check(a), outside);
    r.register_fn(KS_LIST.name, true, |a| KS_LIST.check(a), outside);
    r.register_fn(REGISTER.name, false, |a| REGISTER.check(a), outside);
    r.register_fn(LIST.name, true, |a| LIST.check(a), outside);
    r.register_fn(SHOW.name, true, |a| SHOW.check(a), outside);
    r.register_fn(DROP.name, false, |a| DROP.check(a), outside);
    describe_all(
        r,
        &[
            (
                &KS_CREATE,
                "nil",
                "Create a keyspace labelled strong or weak (strong op only; a no-op if it exists with that label).",
            ),
            (&KS_LIST, "list of [name, label]", "The keyspaces."),
            (
                &REGISTER,
                "list of [name, version]",
                "Compile a source file and register its procedures and keyspaces (strong op only).",
            ),
            (
                &LIST,
                "list of [name, version, signature, read_only, writes_strong]",
                "The registered user procedures.",
            ),
            (
                &SHOW,
                "[name, version, source], or nil if absent",
                "A user procedure's version and source file.",
            ),
            (
                &DROP,
                "bool: existed",
                "Remove a user procedure (strong op only; its keyspaces stay).",
            ),
        ],
    );
}

fn outside(_: &mut Txn<'_>, _: &Bytes) -> Outcome {
    Err(Abort::new(
        "keyspace.* and proc.* run only through execute_call",
    ))
}

/// Whether `name` may be one of these built-ins (a cheap test, so the
/// other built-ins pay almost nothing for the dispatch).
fn is_definition(name: &str) -> bool {
    name.starts_with("proc.") || name.starts_with("keyspace.")
}

/// The abort of a strong-only definition built-in called in a weak op.
pub(crate) fn level_violation(call: &ProcCall) -> Option<Abort> {
    if call.strong || !is_definition(&call.name) {
        return None;
    }
    let name = STRONG_ONLY.iter().find(|n| **n == &*call.name)?;
    Some(Abort::new(format!(
        "{name} changes definitions, which are strong state: invoke it at the strong level"
    )))
}

/// Run `call` if it is a definition built-in (`None` otherwise).
pub(crate) fn run(registry: &Registry, txn: &mut Txn<'_>, call: &ProcCall) -> Option<Outcome> {
    if !is_definition(&call.name) {
        return None;
    }
    let raw = &call.args;
    let outcome = match &*call.name {
        n if n == KS_CREATE.name => match KS_CREATE.args(raw).as_deref() {
            Ok([Value::Bytes(name), Value::Bytes(label)]) => {
                user_procs::create_keyspace(txn, name, label)
            }
            Ok(_) => Err(KS_CREATE.mismatch()),
            Err(e) => Err(e.clone()),
        },
        n if n == KS_LIST.name => KS_LIST
            .args(raw)
            .and_then(|_| user_procs::list_keyspaces(txn)),
        n if n == REGISTER.name => match REGISTER.args(raw).as_deref() {
            Ok([Value::Bytes(source)]) => user_procs::register(registry, txn, source),
            Ok(_) => Err(REGISTER.mismatch()),
            Err(e) => Err(e.clone()),
        },
        n if n == LIST.name => LIST.args(raw).and_then(|_| user_procs::list(registry, txn)),
        n if n == SHOW.name => match SHOW.args(raw).as_deref() {
            Ok([Value::Bytes(name)]) => user_procs::show(txn, name),
            Ok(_) => Err(SHOW.mismatch()),
            Err(e) => Err(e.clone()),
        },
        n if n == DROP.name => match DROP.args(raw).as_deref() {
            Ok([Value::Bytes(name)]) => user_procs::drop(txn, name),
            Ok(_) => Err(DROP.mismatch()),
            Err(e) => Err(e.clone()),
        },
        _ => return None,
    };
    Some(outcome)
}
