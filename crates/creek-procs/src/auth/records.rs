//! The stored form of auth records and the bodies of the `auth.*`
//! built-ins that change them (see [`super`] for the layout). Every body
//! checks all of its input before it writes, so a refusal aborts with
//! nothing written.

use std::fmt;

use bytes::{Bytes, BytesMut};

use super::{
    all, Grant, BUILTIN_ROLES, ENABLED_KEY, GRANTS_PER_ROLE_MAX, ROLES_PER_USER_MAX, ROLE_PREFIX,
    ROOT_USER, TOKEN_HASH_BYTES, TOKEN_ID_CHARS, TOKEN_PREFIX, USER_PREFIX,
};
use crate::keyspace;
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_types::value::Value;

/// A stored token: whose it is, the SHA-256 of its secret, and when it
/// expires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRecord {
    /// The user it authenticates as.
    pub user: String,
    /// SHA-256 of the secret.
    pub hash: [u8; TOKEN_HASH_BYTES],
    /// The Unix time (seconds, UTC) from which it no longer authenticates;
    /// 0: never.
    pub expires_unix_s: u64,
}

impl TokenRecord {
    /// The stored form: `[user, hash]`, with the expiry third if it has one.
    pub fn encode(&self) -> Bytes {
        let mut fields = vec![
            Value::from(self.user.as_str()),
            Value::Bytes(Bytes::copy_from_slice(&self.hash)),
        ];
        if self.expires_unix_s != 0 {
            fields.push(Value::Int(
                i64::try_from(self.expires_unix_s).unwrap_or(i64::MAX),
            ));
        }
        Value::List(fields).encode()
    }

    /// Decode a stored record.
    pub fn decode(raw: &[u8]) -> Result<TokenRecord, String> {
        let value = Value::decode(raw).map_err(|e| e.to_string())?;
        let (user, hash, expires) = match value.as_list() {
            Some([Value::Bytes(user), Value::Bytes(hash)]) => (user, hash, 0),
            Some([Value::Bytes(user), Value::Bytes(hash), Value::Int(at)]) if *at > 0 => {
                (user, hash, *at as u64)
            }
            _ => return Err("not [user, hash] or [user, hash, expiry]".into()),
        };
        Ok(TokenRecord {
            user: String::from_utf8(user.to_vec()).map_err(|_| "user not UTF-8")?,
            hash: hash.as_ref().try_into().map_err(|_| "hash not 32 bytes")?,
            expires_unix_s: expires,
        })
    }

    /// Whether it has expired at Unix time `now_unix_s`.
    pub fn expired(&self, now_unix_s: u64) -> bool {
        self.expires_unix_s != 0 && now_unix_s >= self.expires_unix_s
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

pub(super) fn decode_names(raw: &[u8]) -> Result<Vec<String>, String> {
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

pub(super) fn decode_grants(raw: &[u8]) -> Result<Vec<Grant>, String> {
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
                "{op}: no role named {r:?} (the built-in roles are admin, readwrite, readonly; define others with `creek role set`)"
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
        expires_unix_s: 0,
    };
    txn.put(token_key, record.encode());
    Ok(Value::Nil.encode())
}

/// `auth.user_remove(name)`: remove a user and every token of theirs;
/// whether the user existed.
/// `auth.enable(root_hash)`: from this point of the order, every replica
/// checks users, with the root token hashed as `root_hash`. Again with the
/// same hash: nothing changes (`false`); with another one: refused (the
/// root token is changed by the replicas' configuration, not by a call).
pub(crate) fn enable(txn: &mut Txn<'_>, root_hash: &[u8]) -> Outcome {
    const OP: &str = "auth.enable";
    if root_hash.len() != TOKEN_HASH_BYTES {
        return Err(Abort::new(format!(
            "{OP}: the root token's hash is {} bytes, not {TOKEN_HASH_BYTES} (SHA-256)",
            root_hash.len()
        )));
    }
    let stored = Value::Bytes(Bytes::copy_from_slice(root_hash)).encode();
    match txn.get(ENABLED_KEY) {
        Some(v) if v == stored => Ok(Value::Bool(false).encode()),
        Some(_) => Err(Abort::new(format!(
            "{OP}: the cluster already checks users, with another root token"
        ))),
        None => {
            txn.put(Bytes::from_static(ENABLED_KEY), stored);
            Ok(Value::Bool(true).encode())
        }
    }
}

/// The root token's hash in a stored [`ENABLED_KEY`] record.
pub(crate) fn decode_enabled(raw: &[u8]) -> Result<[u8; TOKEN_HASH_BYTES], String> {
    match Value::decode(raw).map_err(|e| e.to_string())? {
        Value::Bytes(b) => b.as_ref().try_into().map_err(|_| "not 32 bytes".to_owned()),
        _ => Err("not bytes".into()),
    }
}

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
/// existing user; `expires_unix_s` (`auth.token_create_expiring`) the Unix
/// time from which it no longer authenticates, 0 never.
pub(crate) fn token_create(
    txn: &mut Txn<'_>,
    user: &[u8],
    id: &[u8],
    hash: &[u8],
    expires_unix_s: i64,
) -> Outcome {
    const OP: &str = "auth.token_create";
    let user = user_name(OP, user)?;
    if txn.get(&key(USER_PREFIX, user)).is_none() {
        return Err(Abort::new(format!("{OP}: no user named {user}")));
    }
    let expires_unix_s = u64::try_from(expires_unix_s).map_err(|_| {
        Abort::new(format!(
            "{OP}: an expiry is a Unix time in seconds, or 0 for none (got {expires_unix_s})"
        ))
    })?;
    let (k, hash) = new_token(OP, txn, id, hash)?;
    txn.put(
        k,
        TokenRecord {
            user: user.to_owned(),
            hash,
            expires_unix_s,
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
