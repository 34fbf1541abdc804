//! The payload of a CAB log entry: a batch of strong-op ids, never op
//! payloads (paper §5, indirect consensus).
//!
//! Layout: version byte `1`, then a count, then per id an origin and a seq,
//! all as canonical varints (`creek_types::varint`). Entries reach a replica from peers, so decoding
//! is total: malformed data decodes to an error, never a panic, and every
//! replica makes the same decision about the same bytes.

use creek_core::{OpId, ReplicaId};

const VERSION: u8 = 1;

fn put_varint(out: &mut Vec<u8>, v: u64) {
    creek_types::varint::put(out, v);
}

fn get_varint(input: &[u8], pos: &mut usize) -> Option<u64> {
    creek_types::varint::get(input, pos).ok()
}

/// Encode a batch of ids.
pub fn encode_ids(ids: &[OpId]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + ids.len() * 5);
    out.push(VERSION);
    put_varint(&mut out, ids.len() as u64);
    for id in ids {
        put_varint(&mut out, u64::from(id.origin.0));
        put_varint(&mut out, id.seq);
    }
    out
}

/// Decode a batch of ids; `None` if the bytes are not a well-formed batch.
pub fn decode_ids(data: &[u8]) -> Option<Vec<OpId>> {
    if data.first() != Some(&VERSION) {
        return None;
    }
    let mut pos = 1;
    let count = get_varint(data, &mut pos)?;
    // Each id takes at least two bytes: never allocate past the input.
    let mut ids = Vec::with_capacity((count as usize).min(data.len() / 2));
    for _ in 0..count {
        let origin = u16::try_from(get_varint(data, &mut pos)?).ok()?;
        let seq = get_varint(data, &mut pos)?;
        if seq == 0 {
            return None;
        }
        ids.push(OpId {
            origin: ReplicaId(origin),
            seq,
        });
    }
    (pos == data.len()).then_some(ids)
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
