//! `auth.*`: the built-ins that change users, roles and tokens
//! (docs/security.md). Their logic is in [`crate::auth`]; here are their
//! signatures. Lists (roles, grants) are one comma-separated argument.
//!
//! | procedure           | arguments                                              | result                                   | read-only | strong only |
//! |---------------------|--------------------------------------------------------|------------------------------------------|-----------|-------------|
//! | `auth.user_add`     | `name: bytes, roles: bytes, token_id: bytes, token_hash: bytes` | nil                             |           | yes         |
//! | `auth.user_remove`  | `name: bytes`                                          | bool: existed                            |           | yes         |
//! | `auth.user_list`    | none                                                   | list of `[name, [role…], [token id…]]`   | yes       |             |
//! | `auth.token_create` | `user: bytes, token_id: bytes, token_hash: bytes`      | nil                                      |           | yes         |
//! | `auth.token_create_expiring` | `user: bytes, token_id: bytes, token_hash: bytes, expires_unix_s: int` | nil         |           | yes         |
//! | `auth.token_revoke` | `token_id: bytes`                                      | bool: existed                            |           | yes         |
//! | `auth.role_set`     | `name: bytes, grants: bytes`                           | nil                                      |           | yes         |
//! | `auth.role_list`    | none                                                   | list of `[name, [grant…]]`               | yes       |             |
//! | `auth.enable`       | `root_hash: bytes` (SHA-256 of the root token)         | bool: switched on now                    |           | yes         |
//!
//! The server lets only a user with admin on every keyspace call any of
//! them. A strong-only one called in a weak op aborts before it runs,
//! writing nothing.

use super::{describe_all, Sig, Subject, Ty};
use crate::auth;
use crate::registry::Registry;
use creek_exec::txn::Abort;
use creek_types::value::Value;
use creek_types::ProcCall;

const USER_ADD: Sig = Sig {
    name: "auth.user_add",
    params: &[
        ("name", Ty::Bytes),
        ("roles", Ty::Bytes),
        ("token_id", Ty::Bytes),
        ("token_hash", Ty::Bytes),
    ],
    subject: Subject::None,
};
const USER_REMOVE: Sig = Sig {
    name: "auth.user_remove",
    params: &[("name", Ty::Bytes)],
    subject: Subject::None,
};
const USER_LIST: Sig = Sig {
    name: "auth.user_list",
    params: &[],
    subject: Subject::None,
};
const TOKEN_CREATE: Sig = Sig {
    name: "auth.token_create",
    params: &[
        ("user", Ty::Bytes),
        ("token_id", Ty::Bytes),
        ("token_hash", Ty::Bytes),
    ],
    subject: Subject::None,
};
const TOKEN_CREATE_EXPIRING: Sig = Sig {
    name: "auth.token_create_expiring",
    params: &[
        ("user", Ty::Bytes),
        ("token_id", Ty::Bytes),
        ("token_hash", Ty::Bytes),
        ("expires_unix_s", Ty::Int),
    ],
    subject: Subject::None,
};
const TOKEN_REVOKE: Sig = Sig {
    name: "auth.token_revoke",
    params: &[("token_id", Ty::Bytes)],
    subject: Subject::None,
};
const ROLE_SET: Sig = Sig {
    name: "auth.role_set",
    params: &[("name", Ty::Bytes), ("grants", Ty::Bytes)],
    subject: Subject::None,
};
const ENABLE: Sig = Sig {
    name: "auth.enable",
    params: &[("root_hash", Ty::Bytes)],
    subject: Subject::None,
};
const ROLE_LIST: Sig = Sig {
    name: "auth.role_list",
    params: &[],
    subject: Subject::None,
};

/// The `auth.*` built-ins that write.
const STRONG_ONLY: &[&str] = &[
    USER_ADD.name,
    USER_REMOVE.name,
    TOKEN_CREATE.name,
    TOKEN_CREATE_EXPIRING.name,
    TOKEN_REVOKE.name,
    ROLE_SET.name,
    ENABLE.name,
];

/// Register the `auth.*` procedures.
pub(super) fn register(r: &mut Registry) {
    r.register_fn(
        ENABLE.name,
        false,
        |a| ENABLE.check(a),
        |txn, raw| match ENABLE.args(raw).as_deref() {
            Ok([Value::Bytes(hash)]) => auth::enable(txn, hash),
            Ok(_) => Err(ENABLE.mismatch()),
            Err(e) => Err(e.clone()),
        },
    );
    r.register_fn(
        USER_ADD.name,
        false,
        |a| USER_ADD.check(a),
        |txn, raw| match USER_ADD.args(raw).as_deref() {
            Ok([Value::Bytes(n), Value::Bytes(roles), Value::Bytes(id), Value::Bytes(hash)]) => {
                auth::user_add(txn, n, roles, id, hash)
            }
            Ok(_) => Err(USER_ADD.mismatch()),
            Err(e) => Err(e.clone()),
        },
    );
    r.register_fn(
        USER_REMOVE.name,
        false,
        |a| USER_REMOVE.check(a),
        |txn, raw| match USER_REMOVE.args(raw).as_deref() {
            Ok([Value::Bytes(n)]) => auth::user_remove(txn, n),
            Ok(_) => Err(USER_REMOVE.mismatch()),
            Err(e) => Err(e.clone()),
        },
    );
    r.register_fn(
        USER_LIST.name,
        true,
        |a| USER_LIST.check(a),
        |txn, raw| USER_LIST.args(raw).and_then(|_| auth::user_list(txn)),
    );
    r.register_fn(
        TOKEN_CREATE.name,
        false,
        |a| TOKEN_CREATE.check(a),
        |txn, raw| match TOKEN_CREATE.args(raw).as_deref() {
            Ok([Value::Bytes(u), Value::Bytes(id), Value::Bytes(hash)]) => {
                auth::token_create(txn, u, id, hash, 0)
            }
            Ok(_) => Err(TOKEN_CREATE.mismatch()),
            Err(e) => Err(e.clone()),
        },
    );
    r.register_fn(
        TOKEN_CREATE_EXPIRING.name,
        false,
        |a| TOKEN_CREATE_EXPIRING.check(a),
        |txn, raw| match TOKEN_CREATE_EXPIRING.args(raw).as_deref() {
            Ok([Value::Bytes(u), Value::Bytes(id), Value::Bytes(hash), Value::Int(at)]) => {
                auth::token_create(txn, u, id, hash, *at)
            }
            Ok(_) => Err(TOKEN_CREATE_EXPIRING.mismatch()),
            Err(e) => Err(e.clone()),
        },
    );
    r.register_fn(
        TOKEN_REVOKE.name,
        false,
        |a| TOKEN_REVOKE.check(a),
        |txn, raw| match TOKEN_REVOKE.args(raw).as_deref() {
            Ok([Value::Bytes(id)]) => auth::token_revoke(txn, id),
            Ok(_) => Err(TOKEN_REVOKE.mismatch()),
            Err(e) => Err(e.clone()),
        },
    );
    r.register_fn(
        ROLE_SET.name,
        false,
        |a| ROLE_SET.check(a),
        |txn, raw| match ROLE_SET.args(raw).as_deref() {
            Ok([Value::Bytes(n), Value::Bytes(g)]) => auth::role_set(txn, n, g),
            Ok(_) => Err(ROLE_SET.mismatch()),
            Err(e) => Err(e.clone()),
        },
    );
    r.register_fn(
        ROLE_LIST.name,
        true,
        |a| ROLE_LIST.check(a),
        |txn, raw| ROLE_LIST.args(raw).and_then(|_| auth::role_list(txn)),
    );
    describe_all(
        r,
        &[
            (&USER_ADD, "nil", "Add a user with comma-separated roles and its first token (id and SHA-256 of the secret; strong op only, admin)."),
            (&USER_REMOVE, "bool: existed", "Remove a user and its tokens (strong op only, admin)."),
            (&USER_LIST, "list of [name, [role], [token id]]", "The users (admin)."),
            (&TOKEN_CREATE, "nil", "Add a token for a user (strong op only, admin)."),
            (&TOKEN_CREATE_EXPIRING, "nil", "Add a token for a user that stops authenticating at a Unix time in seconds (strong op only, admin)."),
            (&TOKEN_REVOKE, "bool: existed", "Revoke a token by id (strong op only, admin)."),
            (&ROLE_SET, "nil", "Define a role by comma-separated grants RIGHT:keyspace|proc:NAME (strong op only, admin)."),
            (&ROLE_LIST, "list of [name, [grant]]", "The roles (admin)."),
            (&ENABLE, "bool: switched on now", "From here on every replica checks users, with the root token whose SHA-256 this is (strong op only; admin once on)."),
        ],
    );
}

/// The abort of a strong-only `auth.*` built-in called in a weak op.
pub(crate) fn level_violation(call: &ProcCall) -> Option<Abort> {
    if call.strong || !call.name.starts_with("auth.") {
        return None;
    }
    let name = STRONG_ONLY.iter().find(|n| **n == &*call.name)?;
    Some(Abort::new(format!(
        "{name} changes users, which are strong state: invoke it at the strong level"
    )))
}
