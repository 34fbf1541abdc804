//! How records are encoded in the store's tables.
//!
//! * **Log entries, hard state, conf state**: the consensus library's own
//!   protobuf encoding.
//! * **Op payloads**: `creek_wire::encode_op`, the op as it travels in a
//!   gossip frame (one codec for the wire and the disk).
//! * **Checkpoints**: `creek_wire::checkpoint`, the same bytes a replica
//!   streams to a peer in state transfer, stored in chunks
//!   ([`crate::CHECKPOINT_CHUNK_BYTES`] or so each, cut at entry
//!   boundaries). The latest is named by a [`CheckpointRef`]: varints
//!   `generation`, `chunks`, `len`, `crc32` (of the concatenated chunks).
//! * **Identity** (`creek_node::Identity`): varints — `nonce`, then 0
//!   (joining) or 1 followed by `count` and `count` × (`replica` ≤ u16,
//!   `nonce`), the founders in replica order; then, only for a replica
//!   rebuilt from a peer's checkpoint, its `floor` and `catch_up_to`.
//! * **Own seqs** (`creek_node::OwnSeqs`): varints `reserved`, `floor`, then 0, or 1
//!   followed by the varints `after` < `through` of the range being taken
//!   back.
//!
//! Nothing may follow. Decoding is total: any byte string yields a record
//! or [`StoreError::Corrupt`], never a panic, and allocates in proportion
//! to the input.

use creek_core::{Checkpoint, ReplicaId};
use creek_node::{Identity, OwnSeqs};
use creek_types::{DecodeError, Reader, Writer};
use creek_wire::Limits;

use crate::StoreError;

pub use creek_wire::checkpoint::FORMAT as CHECKPOINT_FORMAT;

/// Encode a checkpoint (`creek_wire::checkpoint`).
pub fn encode_checkpoint(c: &Checkpoint) -> Vec<u8> {
    creek_wire::checkpoint::encode(c)
}

/// Decode a checkpoint written by [`encode_checkpoint`].
pub fn decode_checkpoint(bytes: &[u8]) -> Result<Checkpoint, StoreError> {
    creek_wire::checkpoint::decode(bytes).map_err(|e| StoreError::Corrupt(e.0))
}

/// Which stored checkpoint is the latest, and how to check it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointRef {
    /// Its generation (checkpoints are numbered when they are started).
    pub generation: u64,
    /// Its chunks: keys `(generation, 0..chunks)`.
    pub chunks: u32,
    /// Bytes in all.
    pub len: u64,
    /// The CRC-32 of all its bytes.
    pub crc32: u32,
}

/// Encode a [`CheckpointRef`].
pub fn encode_checkpoint_ref(r: &CheckpointRef) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    for v in [r.generation, u64::from(r.chunks), r.len, u64::from(r.crc32)] {
        out.put_varint(v);
    }
    out
}

/// Decode what [`encode_checkpoint_ref`] wrote.
pub fn decode_checkpoint_ref(bytes: &[u8]) -> Result<CheckpointRef, StoreError> {
    let mut r = Reader::new(bytes);
    let generation = r.varint()?;
    let chunks = u32::try_from(r.varint()?)
        .map_err(|_| corrupt("checkpoint reference: chunks beyond u32".to_owned()))?;
    let len = r.varint()?;
    let crc32 = u32::try_from(r.varint()?)
        .map_err(|_| corrupt("checkpoint reference: checksum beyond u32".to_owned()))?;
    r.finish()
        .map_err(|e| corrupt(format!("checkpoint reference: {e}")))?;
    Ok(CheckpointRef {
        generation,
        chunks,
        len,
        crc32,
    })
}

/// Limits for decoding stored ops: the store keeps what the node accepted,
/// whatever limits it ran with, so nothing is refused for size (allocation
/// still stays proportional to the record).
pub(crate) fn stored_op_limits() -> Limits {
    Limits {
        frame_bytes_max: usize::MAX,
        ops_per_message_max: usize::MAX,
        ids_per_message_max: usize::MAX,
        proc_name_bytes_max: usize::MAX,
        args_bytes_max: usize::MAX,
        dvv_exceptions_max: usize::MAX,
        raft_bytes_max: usize::MAX,
    }
}

/// Encode a replica's identity.
pub fn encode_identity(id: &Identity) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.put_varint(id.nonce);
    match &id.founders {
        None => out.push(0),
        Some(founders) => {
            out.push(1);
            out.put_varint(founders.len() as u64);
            for (r, n) in founders {
                out.put_varint(u64::from(r.0));
                out.put_varint(*n);
            }
        }
    }
    if id.floor > 0 || id.catch_up_to > 0 {
        out.put_varint(id.floor);
        out.put_varint(id.catch_up_to);
    }
    out
}

/// Decode what [`encode_identity`] wrote.
pub fn decode_identity(bytes: &[u8]) -> Result<Identity, StoreError> {
    let mut r = Reader::new(bytes);
    let nonce = r.varint()?;
    let founders = match r.byte()? {
        0 => None,
        1 => {
            let n = r.count(2)?;
            let mut founders = Vec::with_capacity(n);
            for _ in 0..n {
                let replica = u16::try_from(r.varint()?)
                    .map_err(|_| corrupt("identity: replica id beyond u16".to_owned()))?;
                founders.push((ReplicaId(replica), r.varint()?));
            }
            if !founders.windows(2).all(|w| w[0].0 < w[1].0) {
                return Err(corrupt(
                    "identity: founders not in replica order".to_owned(),
                ));
            }
            Some(founders)
        }
        b => return Err(corrupt(format!("identity: unknown founders flag {b}"))),
    };
    let (floor, catch_up_to) = if !r.is_empty() {
        (r.varint()?, r.varint()?)
    } else {
        (0, 0)
    };
    r.finish().map_err(|e| corrupt(format!("identity: {e}")))?;
    Ok(Identity {
        nonce,
        founders,
        floor,
        catch_up_to,
    })
}

/// Encode a replica's record of its own seqs: the seqs reserved, then a
/// flag and the range being taken back (varints).
pub fn encode_own_seqs(own: &OwnSeqs) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.put_varint(own.reserved);
    out.put_varint(own.floor);
    match own.reclaiming {
        None => out.push(0),
        Some((after, through)) => {
            out.push(1);
            out.put_varint(after);
            out.put_varint(through);
        }
    }
    out
}

/// Decode what [`encode_own_seqs`] wrote.
pub fn decode_own_seqs(bytes: &[u8]) -> Result<OwnSeqs, StoreError> {
    let mut r = Reader::new(bytes);
    let reserved = r.varint()?;
    let floor = r.varint()?;
    let reclaiming = match r.byte()? {
        0 => None,
        1 => {
            let (after, through) = (r.varint()?, r.varint()?);
            if after >= through {
                return Err(corrupt(format!(
                    "own seqs: empty range ({after}, {through}] taken back"
                )));
            }
            Some((after, through))
        }
        b => return Err(corrupt(format!("own seqs: unknown range flag {b}"))),
    };
    r.finish().map_err(|e| corrupt(format!("own seqs: {e}")))?;
    Ok(OwnSeqs {
        reserved,
        floor,
        reclaiming,
    })
}

fn corrupt(why: String) -> StoreError {
    StoreError::Corrupt(why)
}

impl From<DecodeError> for StoreError {
    fn from(e: DecodeError) -> Self {
        corrupt(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn identity_round_trips_and_damage_is_refused(
            nonce in any::<u64>(),
            founders in proptest::option::of(prop::collection::btree_map(any::<u16>(), any::<u64>(), 0..5)),
            floor in prop_oneof![Just(0u64), any::<u64>()],
            catch_up_to in prop_oneof![Just(0u64), any::<u64>()],
            cut in any::<prop::sample::Index>(),
        ) {
            let id = Identity {
                nonce,
                founders: founders.map(|f| f.into_iter().map(|(r, n)| (ReplicaId(r), n)).collect()),
                floor,
                catch_up_to,
            };
            let bytes = encode_identity(&id);
            prop_assert_eq!(decode_identity(&bytes).ok(), Some(id.clone()));
            // A prefix is refused, but for the one without the rebuild's
            // marks (the identity of a replica never rebuilt).
            let unfloored = encode_identity(&Identity { floor: 0, catch_up_to: 0, ..id });
            let prefix = &bytes[..cut.index(bytes.len())];
            if prefix != unfloored.as_slice() {
                prop_assert!(decode_identity(prefix).is_err());
            }
            let mut longer = bytes.clone();
            longer.push(0);
            prop_assert!(decode_identity(&longer).is_err());
        }
    }

    #[test]
    fn own_seqs_round_trip_and_damage_is_refused() {
        for own in [
            OwnSeqs::default(),
            OwnSeqs {
                reserved: 1 << 40,
                floor: 1324,
                reclaiming: Some((300, 1324)),
            },
        ] {
            let bytes = encode_own_seqs(&own);
            assert_eq!(decode_own_seqs(&bytes).unwrap(), own);
            for n in 0..bytes.len() {
                assert!(decode_own_seqs(&bytes[..n]).is_err());
            }
            let mut longer = bytes;
            longer.push(0);
            assert!(decode_own_seqs(&longer).is_err());
        }
        // An empty range, an unknown flag.
        assert!(decode_own_seqs(&[5, 0, 1, 9, 9]).is_err());
        assert!(decode_own_seqs(&[5, 0, 2]).is_err());
    }

    #[test]
    fn checkpoint_refs_round_trip_and_damage_is_refused() {
        let r = CheckpointRef {
            generation: 7,
            chunks: 1025,
            len: 1 << 30,
            crc32: u32::MAX,
        };
        let bytes = encode_checkpoint_ref(&r);
        assert_eq!(decode_checkpoint_ref(&bytes).unwrap(), r);
        for n in 0..bytes.len() {
            assert!(decode_checkpoint_ref(&bytes[..n]).is_err());
        }
        let mut longer = bytes;
        longer.push(0);
        assert!(decode_checkpoint_ref(&longer).is_err());
    }

    #[test]
    fn other_formats_are_refused_by_name() {
        let mut bytes = encode_checkpoint(&Checkpoint::default());
        bytes[0] = 4;
        let e = decode_checkpoint(&bytes).unwrap_err();
        assert!(
            matches!(&e, StoreError::Corrupt(m) if m.contains("format 4")),
            "{e}"
        );
    }
}
