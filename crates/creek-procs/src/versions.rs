//! Where a key's version record lives ([`creek_exec::versions`]): plain
//! `kv.*` keys carry one, under [`META_PREFIX`] followed by the key. The
//! executor writes the records as ops become final; procedures only read
//! them (docs/api.md, "Versions and revisions").
//!
//! The records are Creek's own table, kept by every shard and never moved
//! with keys: a key imported by a move is a write in its new shard's order
//! and starts a new record there.

use bytes::{BufMut, Bytes, BytesMut};
use creek_exec::txn::Txn;
use creek_exec::versions::KeyVersion;

use crate::registry::INTERNAL_KEY_PREFIX;

/// The first bytes of every version record's key.
pub const META_PREFIX: &[u8] = b"\0tv/";

/// The key of `stored`'s version record: plain keys (not starting with
/// 0x00) have one, Creek's own tables, collections and keyspaces none.
/// The executor's [`creek_exec::versions::MetaKey`].
pub fn meta_key(stored: &[u8]) -> Option<Bytes> {
    if stored.first() == Some(&INTERNAL_KEY_PREFIX) {
        return None;
    }
    let mut k = BytesMut::with_capacity(META_PREFIX.len() + stored.len());
    k.put_slice(META_PREFIX);
    k.put_slice(stored);
    Some(k.freeze())
}

/// `key`'s record as the execution sees it (read, so recorded): all zero
/// when the key has none (absent, or written before records were kept).
pub fn read(txn: &mut Txn<'_>, key: &[u8]) -> KeyVersion {
    meta_key(key)
        .and_then(|m| txn.get(&m))
        .and_then(|b| KeyVersion::decode(&b))
        .unwrap_or_default()
}
