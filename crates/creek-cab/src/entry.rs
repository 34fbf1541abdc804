//! The payload of a CAB log entry: a batch of strong-op ids, never op
//! payloads (paper §5, indirect consensus).
//!
//! Layout: version byte `1`, then a count, then per id an origin and a seq,
//! all as canonical varints (`creek_types::varint`). Entries reach a replica from peers, so decoding
//! is total: malformed data decodes to an error, never a panic, and every
//! replica makes the same decision about the same bytes.

use creek_core::{OpId, ReplicaId};
use creek_types::{Reader, Writer};

const VERSION: u8 = 1;

/// Encode a batch of ids.
pub fn encode_ids(ids: &[OpId]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + ids.len() * 5);
    out.push(VERSION);
    out.put_len(ids.len());
    for id in ids {
        out.put_varint(u64::from(id.origin.0));
        out.put_varint(id.seq);
    }
    out
}

/// Decode a batch of ids; `None` if the bytes are not a well-formed batch.
pub fn decode_ids(data: &[u8]) -> Option<Vec<OpId>> {
    let mut r = Reader::new(data);
    if r.byte().ok()? != VERSION {
        return None;
    }
    // Each id takes at least two bytes: never allocate past the input.
    let count = r.count(2).ok()?;
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        let origin = u16::try_from(r.varint().ok()?).ok()?;
        let seq = r.varint().ok()?;
        if seq == 0 {
            return None;
        }
        ids.push(OpId {
            origin: ReplicaId(origin),
            seq,
        });
    }
    r.finish().ok()?;
    Some(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(ids in proptest::collection::vec((any::<u16>(), 1u64..), 0..50)) {
            let ids: Vec<OpId> = ids.into_iter().map(|(o, s)| OpId { origin: ReplicaId(o), seq: s }).collect();
            prop_assert_eq!(decode_ids(&encode_ids(&ids)), Some(ids));
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_ids(&data);
        }
    }
}
