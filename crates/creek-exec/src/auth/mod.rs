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

use bytes::{Bytes, BytesMut};

use crate::keyspace;
use crate::registry::{ProcCall, Registry};
use crate::txn::{Abort, Outcome, Txn};
use crate::user_procs::UserProc;
use crate::value::{decode_args, Value};

/// Prefix of every auth record.
pub const AUTH_PREFIX: &[u8] = b"\0auth/";
/// Prefix of user records: `\0auth/user/NAME` → roles.
pub const USER_PREFIX: &[u8] = b"\0auth/user/";
/// Prefix of role records: `\0auth/role/NAME` → grants.
pub const ROLE_PREFIX: &[u8] = b"\0auth/role/";
/// Prefix of token records: `\0auth/token/ID` → user and hash.
pub const TOKEN_PREFIX: &[u8] = b"\0auth/token/";
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
            n if n.starts_with("proc.") || n.starts_with("auth.") => Need::Cluster,
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

/// The auth records a replica holds, compiled for lookups: built from the
/// committed `\0auth/` records by [`Rules::from_records`].
#[derive(Clone, Debug, Default)]
pub struct Rules {
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
            } else {
                continue;
            };
            if decoded.is_err() {
                rules.corrupt.push(shown);
            }
        }
        for (name, role_names) in users {
            let mut grants = Vec::new();
            for r in &role_names {
                match BUILTIN_ROLES.iter().find(|(n, _)| n == r) {
                    Some((_, right)) => grants.push(all(*right)),
                    None => grants.extend(roles.get(r).into_iter().flatten().cloned()),
                }
            }
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

/// A stored token: whose it is and the SHA-256 of its secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRecord {
    /// The user it authenticates as.
    pub user: String,
    /// SHA-256 of the secret.
    pub hash: [u8; TOKEN_HASH_BYTES],
}

impl TokenRecord {
    /// The stored form.
    pub fn encode(&self) -> Bytes {
        Value::List(vec![
            Value::from(self.user.as_str()),
            Value::Bytes(Bytes::copy_from_slice(&self.hash)),
        ])
        .encode()
    }

    /// Decode a stored record.
    pub fn decode(raw: &[u8]) -> Result<TokenRecord, String> {
        let value = Value::decode(raw).map_err(|e| e.to_string())?;
        let Some([Value::Bytes(user), Value::Bytes(hash)]) = value.as_list() else {
            return Err("not [user, hash]".into());
        };
        Ok(TokenRecord {
            user: String::from_utf8(user.to_vec()).map_err(|_| "user not UTF-8")?,
            hash: hash.as_ref().try_into().map_err(|_| "hash not 32 bytes")?,
        })
    }
}

fn key(prefix: &[u8], name: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(prefix.len() + name.len());
    k.extend_from_slice(prefix);
    k.extend_from_slice(name.as_bytes());
    k.freeze()
}

fn encode_names<T: fmt::Display>(names: &[T]) -> Bytes {
    Value::List(
        names
            .iter()
            .map(|n| Value::from(n.to_string().as_str()))
            .collect(),
    )
    .encode()
}

fn decode_names(raw: &[u8]) -> Result<Vec<String>, String> {
    let value = Value::decode(raw).map_err(|e| e.to_string())?;
    let Some(items) = value.as_list() else {
        return Err("not a list".into());
    };
    items
        .iter()
        .map(|v| {
            v.as_bytes()
                .and_then(|b| std::str::from_utf8(b).ok())
                .map(str::to_owned)
                .ok_or_else(|| "an item is not text".to_owned())
        })
        .collect()
}

fn decode_grants(raw: &[u8]) -> Result<Vec<Grant>, String> {
    decode_names(raw)?.iter().map(|g| Grant::parse(g)).collect()
}

/// Split a comma-separated argument into its non-empty items.
fn items(text: &[u8], what: &str) -> Result<Vec<String>, Abort> {
    let text = std::str::from_utf8(text).map_err(|_| Abort::new(format!("{what}: not UTF-8")))?;
    Ok(text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect())
}

fn user_name<'a>(op: &str, name: &'a [u8]) -> Result<&'a str, Abort> {
    let name = keyspace::check_name("user", name).map_err(|e| Abort(format!("{op}: {e}")))?;
    if name == ROOT_USER {
        return Err(Abort::new(format!(
            "{op}: the name {ROOT_USER} belongs to the configured root token"
        )));
    }
    Ok(name)
}

/// Check the roles named in `roles` exist (built-in or stored).
fn check_roles(op: &str, txn: &mut Txn<'_>, roles: &[String]) -> Result<(), Abort> {
    if roles.is_empty() {
        return Err(Abort::new(format!("{op}: give at least one role")));
    }
    if roles.len() > ROLES_PER_USER_MAX {
        return Err(Abort::new(format!(
            "{op}: {} roles exceed the limit of {ROLES_PER_USER_MAX}",
            roles.len()
        )));
    }
    for r in roles {
        let builtin = BUILTIN_ROLES.iter().any(|(n, _)| n == r);
        if !builtin
            && (keyspace::check_name("role", r.as_bytes()).is_err()
                || txn.get(&key(ROLE_PREFIX, r)).is_none())
        {
            return Err(Abort::new(format!(
                "{op}: no role named {r:?} (the built-in roles are admin, readwrite, readonly; define others with auth.role_set)"
            )));
        }
    }
    Ok(())
}

/// Check a token id and hash as a client sent them, and that the id is free.
fn new_token(
    op: &str,
    txn: &mut Txn<'_>,
    id: &[u8],
    hash: &[u8],
) -> Result<(Bytes, [u8; TOKEN_HASH_BYTES]), Abort> {
    let hex = id.len() == TOKEN_ID_CHARS
        && id
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    let id = std::str::from_utf8(id)
        .ok()
        .filter(|_| hex)
        .ok_or_else(|| {
            Abort::new(format!(
                "{op}: a token id is {TOKEN_ID_CHARS} lowercase hexadecimal digits"
            ))
        })?;
    let hash: [u8; TOKEN_HASH_BYTES] = hash.try_into().map_err(|_| {
        Abort::new(format!(
            "{op}: a token hash is {TOKEN_HASH_BYTES} bytes (SHA-256)"
        ))
    })?;
    let k = key(TOKEN_PREFIX, id);
    if txn.get(&k).is_some() {
        return Err(Abort::new(format!("{op}: token id {id} is taken")));
    }
    Ok((k, hash))
}

/// `auth.user_add(name, roles, token_id, token_hash)`: a new user with the
/// comma-separated `roles` and its first token. Aborts, writing nothing,
/// if the user exists, a role is unknown or the token is malformed.
pub(crate) fn user_add(
    txn: &mut Txn<'_>,
    name: &[u8],
    roles: &[u8],
    id: &[u8],
    hash: &[u8],
) -> Outcome {
    const OP: &str = "auth.user_add";
    let name = user_name(OP, name)?;
    let roles = items(roles, OP)?;
    let k = key(USER_PREFIX, name);
    if txn.get(&k).is_some() {
        return Err(Abort::new(format!("{OP}: user {name} exists")));
    }
    check_roles(OP, txn, &roles)?;
    let (token_key, hash) = new_token(OP, txn, id, hash)?;
    txn.put(k, encode_names(&roles));
    let record = TokenRecord {
        user: name.to_owned(),
        hash,
    };
    txn.put(token_key, record.encode());
    Ok(Value::Nil.encode())
}

/// `auth.user_remove(name)`: remove a user and every token of theirs;
/// whether the user existed.
pub(crate) fn user_remove(txn: &mut Txn<'_>, name: &[u8]) -> Outcome {
    let Ok(name) = user_name("auth.user_remove", name) else {
        return Ok(Value::Bool(false).encode());
    };
    let k = key(USER_PREFIX, name);
    let existed = txn.get(&k).is_some();
    if existed {
        txn.delete(k);
    }
    for (id, _) in tokens_of(txn, Some(name))? {
        txn.delete(key(TOKEN_PREFIX, &id));
    }
    Ok(Value::Bool(existed).encode())
}

/// The `(id, user)` of every token, or of `user`'s.
fn tokens_of(txn: &mut Txn<'_>, user: Option<&str>) -> Result<Vec<(String, String)>, Abort> {
    let (from, to) = keyspace::prefix_range(TOKEN_PREFIX);
    let mut out = Vec::new();
    for (k, v) in txn.scan(&from, &to, usize::MAX) {
        let id =
            String::from_utf8_lossy(k.get(TOKEN_PREFIX.len()..).unwrap_or_default()).into_owned();
        let record = TokenRecord::decode(&v)
            .map_err(|e| Abort::new(format!("token {id}: corrupt record ({e})")))?;
        if user.is_none_or(|u| u == record.user) {
            out.push((id, record.user));
        }
    }
    Ok(out)
}

/// `auth.user_list()`: `[[name, [role, …], [token id, …]], …]` by name.
pub(crate) fn user_list(txn: &mut Txn<'_>) -> Outcome {
    let tokens = tokens_of(txn, None)?;
    let (from, to) = keyspace::prefix_range(USER_PREFIX);
    let mut out = Vec::new();
    for (k, v) in txn.scan(&from, &to, usize::MAX) {
        let name =
            String::from_utf8_lossy(k.get(USER_PREFIX.len()..).unwrap_or_default()).into_owned();
        let roles = decode_names(&v)
            .map_err(|e| Abort::new(format!("user {name}: corrupt record ({e})")))?;
        let ids = tokens
            .iter()
            .filter(|(_, u)| *u == name)
            .map(|(id, _)| Value::from(id.as_str()))
            .collect();
        out.push(Value::List(vec![
            Value::from(name.as_str()),
            Value::List(roles.iter().map(|r| Value::from(r.as_str())).collect()),
            Value::List(ids),
        ]));
    }
    Ok(Value::List(out).encode())
}

/// `auth.token_create(user, token_id, token_hash)`: another token for an
/// existing user.
pub(crate) fn token_create(txn: &mut Txn<'_>, user: &[u8], id: &[u8], hash: &[u8]) -> Outcome {
    const OP: &str = "auth.token_create";
    let user = user_name(OP, user)?;
    if txn.get(&key(USER_PREFIX, user)).is_none() {
        return Err(Abort::new(format!("{OP}: no user named {user}")));
    }
    let (k, hash) = new_token(OP, txn, id, hash)?;
    txn.put(
        k,
        TokenRecord {
            user: user.to_owned(),
            hash,
        }
        .encode(),
    );
    Ok(Value::Nil.encode())
}

/// `auth.token_revoke(token_id)`: whether the token existed.
pub(crate) fn token_revoke(txn: &mut Txn<'_>, id: &[u8]) -> Outcome {
    let id = String::from_utf8_lossy(id);
    let k = key(TOKEN_PREFIX, &id);
    let existed = !id.is_empty() && txn.get(&k).is_some();
    if existed {
        txn.delete(k);
    }
    Ok(Value::Bool(existed).encode())
}

/// `auth.role_set(name, grants)`: define or redefine a role with the
/// comma-separated grants.
pub(crate) fn role_set(txn: &mut Txn<'_>, name: &[u8], grants: &[u8]) -> Outcome {
    const OP: &str = "auth.role_set";
    let name = keyspace::check_name("role", name).map_err(|e| Abort(format!("{OP}: {e}")))?;
    if BUILTIN_ROLES.iter().any(|(n, _)| *n == name) {
        return Err(Abort::new(format!("{OP}: {name} is a built-in role")));
    }
    let grants = items(grants, OP)?
        .iter()
        .map(|g| Grant::parse(g))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Abort(format!("{OP}: {e}")))?;
    if grants.is_empty() || grants.len() > GRANTS_PER_ROLE_MAX {
        return Err(Abort::new(format!(
            "{OP}: a role has 1 to {GRANTS_PER_ROLE_MAX} grants, got {}",
            grants.len()
        )));
    }
    txn.put(key(ROLE_PREFIX, name), encode_names(&grants));
    Ok(Value::Nil.encode())
}

/// `auth.role_list()`: `[[name, [grant, …]], …]`, the built-in roles first.
pub(crate) fn role_list(txn: &mut Txn<'_>) -> Outcome {
    let mut out: Vec<Value> = BUILTIN_ROLES
        .iter()
        .map(|(n, r)| {
            Value::List(vec![
                Value::from(*n),
                Value::List(vec![Value::from(all(*r).to_string().as_str())]),
            ])
        })
        .collect();
    let (from, to) = keyspace::prefix_range(ROLE_PREFIX);
    for (k, v) in txn.scan(&from, &to, usize::MAX) {
        let name =
            String::from_utf8_lossy(k.get(ROLE_PREFIX.len()..).unwrap_or_default()).into_owned();
        let grants = decode_names(&v)
            .map_err(|e| Abort::new(format!("role {name}: corrupt record ({e})")))?;
        out.push(Value::List(vec![
            Value::from(name.as_str()),
            Value::List(grants.iter().map(|g| Value::from(g.as_str())).collect()),
        ]));
    }
    Ok(Value::List(out).encode())
}

#[cfg(test)]
mod tests;
