//! Users, roles and tokens as replicated state, and the rules that decide
//! whether a user may make a call (docs/security.md, "Users, roles and
//! tokens").
//!
//! Layout, under the reserved first byte
//! [`crate::registry::INTERNAL_KEY_PREFIX`], so no `kv.*` or collection
//! built-in and no user procedure (which writes only under `\0ks/`) can
//! read or write it:
//!
//! | key                   | value (one encoded [`Value`])             |
//! |-----------------------|-------------------------------------------|
//! | `\0auth/user/NAME`    | `[role, …]`                               |
//! | `\0auth/role/NAME`    | `[grant, …]`, each `RIGHT:KIND:TARGET`    |
//! | `\0auth/token/ID`     | `[user, sha256(secret)]`                  |
//! | `\0auth/enabled`      | `sha256(root token)`: the cluster checks users |
//!
//! The records are written only by the `auth.*` built-ins, which are
//! strong-only: every replica sees the same users at the same point of the
//! order. A token's secret never enters the state: the client (or the CLI)
//! hashes it before the op is invoked, so applying the op is the same on
//! every replica. This module does no hashing and no I/O; the server
//! turns a bearer token into a [`Principal`] and asks [`Principal::check`]
//! before an op is ordered.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use crate::keyspace;
use crate::registry::Registry;
use crate::user_procs::UserProc;
use creek_exec::txn::{Abort, Txn};
use creek_types::value::{decode_args, Value};
use creek_types::ProcCall;

/// Prefix of every auth record.
pub const AUTH_PREFIX: &[u8] = b"\0auth/";
/// Prefix of user records: `\0auth/user/NAME` → roles.
pub const USER_PREFIX: &[u8] = b"\0auth/user/";
/// Prefix of role records: `\0auth/role/NAME` → grants.
pub const ROLE_PREFIX: &[u8] = b"\0auth/role/";
/// Prefix of token records: `\0auth/token/ID` → user and hash.
pub const TOKEN_PREFIX: &[u8] = b"\0auth/token/";
/// The switch that makes every replica of the cluster check users:
/// present (holding the root token's SHA-256) once `auth.enable` ran.
pub const ENABLED_KEY: &[u8] = b"\0auth/enabled";
/// Length of a token id: lowercase hexadecimal digits.
pub const TOKEN_ID_CHARS: usize = 16;
/// Length of a token's hash (SHA-256).
pub const TOKEN_HASH_BYTES: usize = 32;
/// The user a root token (configured, not stored) authenticates as; no
/// stored user may take the name.
pub const ROOT_USER: &str = "root";
/// The keyspace name that stands for the keys of the built-in `kv.*`,
/// `queue.*`, `list.*` and `set.*` procedures (keys outside any keyspace).
pub const DEFAULT_KEYSPACE: &str = "default";
/// Roles every cluster has, each granting one right on every keyspace and
/// procedure; `auth.role_set` cannot redefine them.
pub const BUILTIN_ROLES: &[(&str, Right)] = &[
    ("admin", Right::Admin),
    ("readwrite", Right::Write),
    ("readonly", Right::Read),
];
/// Most roles a user has, grants a role has.
pub const ROLES_PER_USER_MAX: usize = 32;
/// Most grants one role has.
pub const GRANTS_PER_ROLE_MAX: usize = 256;

/// A right, each including the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Right {
    /// Calls that only read.
    Read,
    /// Calls that write.
    Write,
    /// Changes to definitions (keyspaces, procedures, users) and `Admin.*`.
    Admin,
}

impl Right {
    /// `read`, `write` or `admin`.
    pub fn name(self) -> &'static str {
        match self {
            Right::Read => "read",
            Right::Write => "write",
            Right::Admin => "admin",
        }
    }

    fn parse(text: &str) -> Option<Right> {
        match text {
            "read" => Some(Right::Read),
            "write" => Some(Right::Write),
            "admin" => Some(Right::Admin),
            _ => None,
        }
    }
}

/// What a grant applies to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// A keyspace by name, [`DEFAULT_KEYSPACE`], or `*` for all of them.
    Keyspace(String),
    /// A procedure by name, a prefix ending with `*` (`report_*`), or `*`.
    Proc(String),
}

/// One right on one target: `write:keyspace:accounts`,
/// `read:proc:report_*`, `admin:keyspace:*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Grant {
    /// The right granted.
    pub right: Right,
    /// What it is granted on.
    pub target: Target,
}

impl Grant {
    /// Parse `RIGHT:KIND:TARGET` (KIND is `keyspace` or `proc`); `Err` says
    /// what is wrong.
    pub fn parse(text: &str) -> Result<Grant, String> {
        let bad = |why: &str| {
            format!("grant {text:?} {why} (write RIGHT:keyspace:NAME or RIGHT:proc:NAME, RIGHT one of read, write, admin)")
        };
        let mut parts = text.splitn(3, ':');
        let (Some(right), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("is not RIGHT:KIND:TARGET"));
        };
        let right = Right::parse(right).ok_or_else(|| bad("names no right"))?;
        let valid = match name.strip_suffix('*') {
            Some(prefix) => prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            None => keyspace::check_name(kind, name.as_bytes()).is_ok(),
        };
        if !valid {
            return Err(bad("has a bad target"));
        }
        let target = match kind {
            "keyspace" if name.ends_with('*') && name != "*" => {
                return Err(bad("has a keyspace pattern (only * or a name)"))
            }
            "keyspace" => Target::Keyspace(name.to_owned()),
            "proc" => Target::Proc(name.to_owned()),
            _ => return Err(bad("has a kind other than keyspace or proc")),
        };
        Ok(Grant { right, target })
    }

    /// Whether this grant gives `right` on keyspace `name`.
    fn covers_keyspace(&self, right: Right, name: &str) -> bool {
        self.right >= right && matches!(&self.target, Target::Keyspace(k) if k == "*" || k == name)
    }

    /// Whether this grant gives `right` on procedure `name`.
    fn covers_proc(&self, right: Right, name: &str) -> bool {
        if self.right < right {
            return false;
        }
        match &self.target {
            Target::Keyspace(k) => k == "*",
            Target::Proc(p) => match p.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => p == name,
            },
        }
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Keyspace(k) => write!(f, "{}:keyspace:{k}", self.right.name()),
            Target::Proc(p) => write!(f, "{}:proc:{p}", self.right.name()),
        }
    }
}

/// What a call needs, worked out by [`need`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Need {
    /// Only to be authenticated (listings of definitions).
    Nothing,
    /// A right on a keyspace.
    Keyspace(Right, String),
    /// Admin on every keyspace: definitions, users, `Admin.*`.
    Cluster,
    /// A user procedure: `right` on it, or else read on each keyspace in
    /// `reads` and write on each in `writes`.
    Proc {
        /// Read for a read-only procedure, write otherwise.
        right: Right,
        /// Its name.
        name: String,
        /// The keyspaces it may read.
        reads: Vec<String>,
        /// The keyspaces it may write.
        writes: Vec<String>,
    },
}

/// A call refused for want of a right; its text names the user and the
/// missing right ("user alice lacks write on keyspace default").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("user {user} lacks {what}")]
pub struct Denied {
    /// Who asked.
    pub user: String,
    /// The missing right and its target.
    pub what: String,
}

/// An authenticated user with the grants of its roles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The user's name.
    pub user: String,
    grants: Arc<[Grant]>,
}

impl Principal {
    /// The configured root user: admin on everything.
    pub fn root() -> Principal {
        Principal {
            user: ROOT_USER.to_owned(),
            grants: Arc::from(vec![all(Right::Admin)]),
        }
    }

    /// Whether it holds what `need` asks for.
    pub fn check(&self, need: &Need) -> Result<(), Denied> {
        let denied = |what: String| Denied {
            user: self.user.clone(),
            what,
        };
        let ks =
            |right: Right, name: &str| self.grants.iter().any(|g| g.covers_keyspace(right, name));
        match need {
            Need::Nothing => Ok(()),
            Need::Keyspace(right, name) if ks(*right, name) => Ok(()),
            Need::Keyspace(right, name) => {
                Err(denied(format!("{} on keyspace {name}", right.name())))
            }
            Need::Cluster if ks(Right::Admin, "*") => Ok(()),
            Need::Cluster => Err(denied("admin on keyspace * (the cluster)".to_owned())),
            Need::Proc {
                right,
                name,
                reads,
                writes,
            } => {
                if self.grants.iter().any(|g| g.covers_proc(*right, name)) {
                    return Ok(());
                }
                let missing = writes
                    .iter()
                    .find(|k| !ks(Right::Write, k))
                    .map(|k| (Right::Write, k, "writes"))
                    .or_else(|| {
                        reads
                            .iter()
                            .find(|k| !ks(Right::Read, k))
                            .map(|k| (Right::Read, k, "reads"))
                    });
                match missing {
                    None => Ok(()),
                    Some((r, k, verb)) => Err(denied(format!(
                        "{} on procedure {name}, and {} on keyspace {k}, which it {verb}",
                        right.name(),
                        r.name()
                    ))),
                }
            }
        }
    }
}

fn all(right: Right) -> Grant {
    Grant {
        right,
        target: Target::Keyspace("*".to_owned()),
    }
}

/// What `call` needs. `user` is the user procedure it names, if it is not
/// a built-in and is registered (an unknown name needs nothing here: the
/// replica refuses it as unknown).
pub fn need(registry: &Registry, call: &ProcCall, user: Option<&UserProc>) -> Need {
    let name = &*call.name;
    if let Some(p) = registry.get(name) {
        return match name {
            "keyspace.list" | "proc.list" | "proc.show" => Need::Nothing,
            "keyspace.create" => {
                let args = decode_args(&call.args).unwrap_or_default();
                match args.first().and_then(Value::as_bytes) {
                    Some(ks) => Need::Keyspace(Right::Admin, String::from_utf8_lossy(ks).into()),
                    None => Need::Cluster,
                }
            }
            "directory.map" => Need::Nothing,
            n if n.starts_with("proc.")
                || n.starts_with("auth.")
                || n.starts_with("directory.")
                || n.starts_with("creek.move.") =>
            {
                Need::Cluster
            }
            _ if p.read_only => Need::Keyspace(Right::Read, DEFAULT_KEYSPACE.to_owned()),
            _ => Need::Keyspace(Right::Write, DEFAULT_KEYSPACE.to_owned()),
        };
    }
    match user.and_then(UserProc::compiled) {
        None => Need::Nothing,
        Some(p) => Need::Proc {
            right: if p.read_only {
                Right::Read
            } else {
                Right::Write
            },
            name: name.to_owned(),
            reads: p.reads.iter().cloned().collect(),
            writes: p.writes.iter().cloned().collect(),
        },
    }
}

/// The user `name` with the grants its roles have in the state `read`
/// reads (no grants when the user or a record is missing or does not
/// decode); [`ROOT_USER`] is the configured root user.
pub fn principal_in(read: &mut dyn FnMut(&[u8]) -> Option<Bytes>, name: &str) -> Principal {
    if name == ROOT_USER {
        return Principal::root();
    }
    let key = |prefix: &[u8], name: &str| [prefix, name.as_bytes()].concat();
    let roles = read(&key(USER_PREFIX, name))
        .and_then(|raw| decode_names(&raw).ok())
        .unwrap_or_default();
    let grants = grants_of(&roles, |role| {
        read(&key(ROLE_PREFIX, role))
            .and_then(|raw| decode_grants(&raw).ok())
            .unwrap_or_default()
    });
    Principal {
        user: name.to_owned(),
        grants: Arc::from(grants),
    }
}

/// The grants of `roles`: a built-in role's, or what `defined` gives for
/// a role defined in the state.
fn grants_of(roles: &[String], mut defined: impl FnMut(&str) -> Vec<Grant>) -> Vec<Grant> {
    let mut grants = Vec::new();
    for role in roles {
        match BUILTIN_ROLES.iter().find(|(n, _)| n == role) {
            Some((_, right)) => grants.push(all(*right)),
            None => grants.extend(defined(role)),
        }
    }
    grants
}

/// The check every execution of an op makes: whether the user who invoked
/// `call` (if replicas check users) holds what it needs in the state the
/// execution reads, at the op's place in the order. The reads go through
/// `txn`, so an execution is redone when a change of the user's records
/// is ordered before it. `user` is the user procedure `call` names, if
/// any. The abort's text starts with [`DENIED_PREFIX`].
pub(crate) fn check_execution(
    registry: &Registry,
    txn: &mut Txn<'_>,
    call: &ProcCall,
    user: Option<&UserProc>,
) -> Result<(), Abort> {
    let Some(name) = call.user.as_deref() else {
        return Ok(());
    };
    principal_in(&mut |k| txn.get(k), name)
        .check(&need(registry, call, user))
        .map_err(|denied| Abort::new(format!("{DENIED_PREFIX}{denied}")))
}

/// How the abort of an execution refused for want of a right begins.
pub const DENIED_PREFIX: &str = "permission denied: ";

/// The auth records a replica holds, compiled for lookups: built from the
/// committed `\0auth/` records by [`Rules::from_records`].
#[derive(Clone, Debug, Default)]
pub struct Rules {
    /// The root token's SHA-256, once the cluster checks users
    /// ([`ENABLED_KEY`]).
    pub enabled: Option<[u8; TOKEN_HASH_BYTES]>,
    tokens: HashMap<String, TokenRecord>,
    users: HashMap<String, Arc<[Grant]>>,
    /// Records that did not decode (only a bug or a foreign write can make
    /// one): they grant nothing.
    pub corrupt: Vec<String>,
}

impl Rules {
    /// Compile `(key, value)` records (keys under [`AUTH_PREFIX`]; others
    /// are ignored).
    pub fn from_records<'a>(records: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Rules {
        let mut rules = Rules::default();
        let mut roles: BTreeMap<String, Vec<Grant>> = BTreeMap::new();
        let mut users: Vec<(String, Vec<String>)> = Vec::new();
        for (key, value) in records {
            let name = |prefix: &[u8]| {
                key.strip_prefix(prefix)
                    .and_then(|n| std::str::from_utf8(n).ok())
                    .map(str::to_owned)
            };
            let shown = String::from_utf8_lossy(key).into_owned();
            let decoded = if let Some(n) = name(USER_PREFIX) {
                decode_names(value).map(|r| users.push((n, r)))
            } else if let Some(n) = name(ROLE_PREFIX) {
                decode_grants(value).map(|g| {
                    roles.insert(n, g);
                })
            } else if let Some(n) = name(TOKEN_PREFIX) {
                TokenRecord::decode(value).map(|t| {
                    rules.tokens.insert(n, t);
                })
            } else if key == ENABLED_KEY {
                records::decode_enabled(value).map(|root| rules.enabled = Some(root))
            } else {
                continue;
            };
            if decoded.is_err() {
                rules.corrupt.push(shown);
            }
        }
        for (name, role_names) in users {
            let grants = grants_of(&role_names, |r| roles.get(r).cloned().unwrap_or_default());
            rules.users.insert(name, Arc::from(grants));
        }
        rules
    }

    /// The token with id `id`: its user and hash.
    pub fn token(&self, id: &str) -> Option<&TokenRecord> {
        self.tokens.get(id)
    }

    /// The stored user `name` with its grants.
    pub fn principal(&self, name: &str) -> Option<Principal> {
        self.users.get(name).map(|grants| Principal {
            user: name.to_owned(),
            grants: grants.clone(),
        })
    }
}

mod records;

pub use records::TokenRecord;
use records::{decode_grants, decode_names};
pub(crate) use records::{
    enable, role_list, role_set, token_create, token_revoke, user_add, user_list, user_remove,
};

#[cfg(test)]
mod tests;
