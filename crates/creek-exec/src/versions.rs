//! Versions of keys: for each versioned key, how many times it was written
//! since it was created and the revisions (1-based positions in the
//! committed order) of its creation and its last write — etcd's
//! `version`, `create_revision` and `mod_revision` (docs/api.md,
//! "Versions and revisions").
//!
//! An execution cannot know its own revision: it runs before its op is
//! committed, and a tentative execution may well be the final one. So no
//! procedure writes these records. The engine does, in the final state, at
//! the moment an op becomes final and its place in the committed order is
//! known: for every versioned key the op wrote, the key's record (under the
//! key the caller's [`MetaKey`] names) is advanced by [`KeyVersion::after`].
//! Every replica finalizes the same ops at the same positions over the same
//! records, so the records are replicated state like any other: they go
//! into checkpoints, and an execution reads them through its `Txn` as it
//! reads any key. A record changing when a write becomes final is a write
//! like any other for the executions that read it: they run again.
//!
//! What an execution sees of a record is therefore the record of the
//! newest *final* write before it; a tentative write has no revision yet.
//! The final execution of an op sees every write before it final.

use bytes::{BufMut, Bytes, BytesMut};

/// Which key holds the version record of a stored key; `None` for a key
/// that carries none.
pub type MetaKey = fn(&[u8]) -> Option<Bytes>;

/// The revision of a committed position, as the engine's caller numbers
/// them.
pub type Revision<P> = fn(P) -> u64;

/// A versioned key's record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyVersion {
    /// Writes since the key was created, that one included (0: absent).
    pub version: u64,
    /// The revision of the write that created it.
    pub create: u64,
    /// The revision of its last write.
    pub modified: u64,
}

impl KeyVersion {
    /// Bytes of an encoded record.
    pub const ENCODED_LEN: usize = 24;

    /// The record as stored: three big-endian `u64`s.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(Self::ENCODED_LEN);
        out.put_u64(self.version);
        out.put_u64(self.create);
        out.put_u64(self.modified);
        out.freeze()
    }

    /// A stored record; `None` if `bytes` is not one.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let (version, rest) = bytes.split_first_chunk::<8>()?;
        let (create, rest) = rest.split_first_chunk::<8>()?;
        let modified = <[u8; 8]>::try_from(rest).ok()?;
        Some(KeyVersion {
            version: u64::from_be_bytes(*version),
            create: u64::from_be_bytes(*create),
            modified: u64::from_be_bytes(modified),
        })
    }

    /// The record after a write at `revision` of a key whose record was
    /// `old` (as stored; `None`: absent): `present` — the key holds a value
    /// after the write — advances it (or starts it at version 1), a delete
    /// removes it (`None`).
    pub fn after(old: Option<&[u8]>, present: bool, revision: u64) -> Option<KeyVersion> {
        if !present {
            return None;
        }
        Some(match old.and_then(KeyVersion::decode) {
            Some(old) => KeyVersion {
                version: old.version.saturating_add(1),
                create: old.create,
                modified: revision,
            },
            None => KeyVersion {
                version: 1,
                create: revision,
                modified: revision,
            },
        })
    }
}

/// The writes to version records that one op's `writes` make when it
/// becomes final at `revision`, over the records `read` gives: one per
/// versioned key written, unless the op wrote that key's record itself (a
/// record copied as it is). A delete of a key without a record writes
/// nothing.
pub fn record_writes(
    meta_key: MetaKey,
    writes: &[(Bytes, Option<Bytes>)],
    revision: u64,
    read: impl Fn(&[u8]) -> Option<Bytes>,
) -> Vec<(Bytes, Option<Bytes>)> {
    let mut out = Vec::new();
    for (key, value) in writes {
        let Some(meta) = meta_key(key) else {
            continue;
        };
        if writes.iter().any(|(k, _)| *k == meta) {
            continue;
        }
        let old = read(&meta);
        match KeyVersion::after(old.as_deref(), value.is_some(), revision) {
            Some(new) => out.push((meta, Some(new.encode()))),
            None if old.is_some() => out.push((meta, None)),
            None => {}
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn meta(key: &[u8]) -> Option<Bytes> {
        (key.first() != Some(&0)).then(|| [b"\0v/", key].concat().into())
    }

    #[test]
    fn a_record_counts_writes_and_keeps_its_creation_until_a_delete() {
        let first = KeyVersion::after(None, true, 7).unwrap();
        assert_eq!(
            first,
            KeyVersion {
                version: 1,
                create: 7,
                modified: 7
            }
        );
        let second = KeyVersion::after(Some(&first.encode()), true, 9).unwrap();
        assert_eq!((second.version, second.create, second.modified), (2, 7, 9));
        assert_eq!(KeyVersion::decode(&second.encode()), Some(second));
        assert_eq!(KeyVersion::after(Some(&second.encode()), false, 10), None);
        assert_eq!(KeyVersion::decode(b"short"), None);
    }

    #[test]
    fn records_follow_the_versioned_keys_an_op_wrote() {
        let old = KeyVersion::after(None, true, 3).unwrap().encode();
        let read = |k: &[u8]| (k == b"\0v/a").then(|| old.clone());
        let writes = vec![
            (Bytes::from_static(b"a"), None),
            (Bytes::from_static(b"b"), Some(Bytes::from_static(b"1"))),
            (Bytes::from_static(b"c"), None),
            (Bytes::from_static(b"\0internal"), Some(Bytes::new())),
        ];
        let out = record_writes(meta, &writes, 5, read);
        assert_eq!(
            out,
            vec![
                (Bytes::from_static(b"\0v/a"), None),
                (
                    Bytes::from_static(b"\0v/b"),
                    Some(KeyVersion::after(None, true, 5).unwrap().encode())
                ),
            ]
        );
        // A record the op wrote itself stands as written.
        let copied = vec![
            (Bytes::from_static(b"b"), Some(Bytes::new())),
            (Bytes::from_static(b"\0v/b"), Some(old.clone())),
        ];
        assert!(record_writes(meta, &copied, 5, |_| None).is_empty());
    }
}
