//! How records are encoded in the store's tables.
//!
//! * **Log entries, hard state, conf state**: the consensus library's own
//!   protobuf encoding.
//! * **Op payloads**: `creek_wire::encode_op`, the op as it travels in a
//!   gossip frame (one codec for the wire and the disk).
//! * **Checkpoints**: the layout below, every integer a canonical LEB128
//!   varint (`creek_exec::varint`):
//!
//! | field | encoding |
//! |---|---|
//! | format | 1 byte, [`CHECKPOINT_FORMAT`] (= 1) |
//! | `cab_applied`, `committed_len`, `hlc`, `next_event_no` | 4 varints |
//! | committed ids | `count`, then per origin: `origin` (≤ u16), `counter`, `n`, `n` gaps (exception `x1 = counter + g1 + 1`, `xi = x(i-1) + gi + 1`), as `Dvv::to_records` gives them |
//! | state | `count`, then per key: `len`, key bytes, `len`, value bytes; keys strictly increasing |
//!
//! * **Identity** (`creek_node::Identity`): varints — `nonce`, then 0
//!   (joining) or 1 followed by `count` and `count` × (`replica` ≤ u16,
//!   `nonce`), the founders in replica order.
//!
//! Nothing may follow. Decoding is total: any byte string yields a
//! checkpoint (or identity) or [`StoreError::Corrupt`], never a panic, and
//! allocates in proportion to the input.

use bytes::Bytes;
use creek_core::{Checkpoint, Dvv, ReplicaId, Timestamp};
use creek_exec::varint;
use creek_node::Identity;
use creek_wire::Limits;

use crate::StoreError;

/// The checkpoint format this build writes and reads.
pub const CHECKPOINT_FORMAT: u8 = 1;

/// Encode a checkpoint.
pub fn encode_checkpoint(c: &Checkpoint) -> Vec<u8> {
    let state_bytes: usize = c.state.iter().map(|(k, v)| k.len() + v.len() + 10).sum();
    let mut out = Vec::with_capacity(64 + state_bytes);
    out.push(CHECKPOINT_FORMAT);
    for v in [c.cab_applied, c.committed_len, c.hlc.0, c.next_event_no] {
        varint::put(&mut out, v);
    }
    let records = c.causal_ctx.to_records();
    varint::put(&mut out, records.len() as u64);
    for (origin, counter, exceptions) in &records {
        varint::put(&mut out, u64::from(origin.0));
        varint::put(&mut out, *counter);
        varint::put(&mut out, exceptions.len() as u64);
        let mut prev = *counter;
        for &x in exceptions {
            // Normalized records: strictly increasing, above counter + 1.
            varint::put(&mut out, x.wrapping_sub(prev).wrapping_sub(1));
            prev = x;
        }
    }
    varint::put(&mut out, c.state.len() as u64);
    for (k, v) in &c.state {
        varint::put(&mut out, k.len() as u64);
        out.extend_from_slice(k);
        varint::put(&mut out, v.len() as u64);
        out.extend_from_slice(v);
    }
    out
}

/// Decode a checkpoint written by [`encode_checkpoint`].
pub fn decode_checkpoint(bytes: &[u8]) -> Result<Checkpoint, StoreError> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let format = r.byte()?;
    if format != CHECKPOINT_FORMAT {
        return Err(corrupt(format!(
            "checkpoint format {format} (this build reads {CHECKPOINT_FORMAT})"
        )));
    }
    let cab_applied = r.varint()?;
    let committed_len = r.varint()?;
    let hlc = Timestamp(r.varint()?);
    let next_event_no = r.varint()?;
    // A record takes at least 3 bytes, an exception gap 1.
    let n_records = r.count(3)?;
    let mut records = Vec::with_capacity(n_records);
    for _ in 0..n_records {
        let origin = r.varint()?;
        let origin = u16::try_from(origin)
            .map_err(|_| corrupt(format!("checkpoint origin {origin} exceeds 16 bits")))?;
        let counter = r.varint()?;
        let n = r.count(1)?;
        let mut exceptions = Vec::with_capacity(n);
        let mut prev = counter;
        for _ in 0..n {
            let gap = r.varint()?;
            prev = prev
                .checked_add(gap)
                .and_then(|x| x.checked_add(1))
                .ok_or_else(|| corrupt("checkpoint exception seq overflows".to_owned()))?;
            exceptions.push(prev);
        }
        records.push((ReplicaId(origin), counter, exceptions));
    }
    let causal_ctx = Dvv::from_records(records);
    // A key-value pair takes at least 2 bytes.
    let n_state = r.count(2)?;
    let mut state: Vec<(Bytes, Bytes)> = Vec::with_capacity(n_state);
    for _ in 0..n_state {
        let k = r.bytes()?;
        let v = r.bytes()?;
        if state.last().is_some_and(|(prev, _)| *prev >= k) {
            return Err(corrupt("checkpoint keys out of order".to_owned()));
        }
        state.push((k, v));
    }
    if r.pos != bytes.len() {
        return Err(corrupt(format!(
            "{} trailing bytes after the checkpoint",
            bytes.len() - r.pos
        )));
    }
    Ok(Checkpoint {
        cab_applied,
        committed_len,
        causal_ctx,
        state,
        hlc,
        next_event_no,
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
    varint::put(&mut out, id.nonce);
    match &id.founders {
        None => out.push(0),
        Some(founders) => {
            out.push(1);
            varint::put(&mut out, founders.len() as u64);
            for (r, n) in founders {
                varint::put(&mut out, u64::from(r.0));
                varint::put(&mut out, *n);
            }
        }
    }
    out
}

/// Decode what [`encode_identity`] wrote.
pub fn decode_identity(bytes: &[u8]) -> Result<Identity, StoreError> {
    let mut r = Reader { buf: bytes, pos: 0 };
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
    if r.pos != bytes.len() {
        return Err(corrupt("identity: trailing bytes".to_owned()));
    }
    Ok(Identity { nonce, founders })
}

fn corrupt(why: String) -> StoreError {
    StoreError::Corrupt(why)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, StoreError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| corrupt("checkpoint ends early".to_owned()))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, StoreError> {
        let at = self.pos;
        varint::get(self.buf, &mut self.pos)
            .map_err(|e| corrupt(format!("checkpoint varint at byte {at}: {e:?}")))
    }

    /// A count of items each taking at least `unit` bytes: never more than
    /// the rest of the input can hold.
    fn count(&mut self, unit: usize) -> Result<usize, StoreError> {
        let n = self.varint()?;
        let room = (self.buf.len() - self.pos.min(self.buf.len())) / unit.max(1);
        match usize::try_from(n) {
            Ok(n) if n <= room => Ok(n),
            _ => Err(corrupt(format!(
                "checkpoint count {n} exceeds the remaining bytes"
            ))),
        }
    }

    fn bytes(&mut self) -> Result<Bytes, StoreError> {
        let len = self.count(1)?;
        let end = self.pos + len; // count() bounds len by the input
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| corrupt("checkpoint ends early".to_owned()))?;
        self.pos = end;
        Ok(Bytes::copy_from_slice(s))
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
            cut in any::<prop::sample::Index>(),
        ) {
            let id = Identity {
                nonce,
                founders: founders.map(|f| f.into_iter().map(|(r, n)| (ReplicaId(r), n)).collect()),
            };
            let bytes = encode_identity(&id);
            prop_assert_eq!(decode_identity(&bytes).ok(), Some(id));
            prop_assert!(decode_identity(&bytes[..cut.index(bytes.len())]).is_err());
            let mut longer = bytes.clone();
            longer.push(0);
            prop_assert!(decode_identity(&longer).is_err());
        }
    }

    fn arb_checkpoint() -> impl Strategy<Value = Checkpoint> {
        let record = (
            0u16..4,
            prop_oneof![0u64..20, any::<u64>()],
            prop::collection::vec(prop_oneof![0u64..40, any::<u64>()], 0..5),
        )
            .prop_map(|(o, c, x)| (ReplicaId(o), c, x));
        (
            any::<[u64; 4]>(),
            prop::collection::vec(record, 0..4),
            prop::collection::btree_map(
                prop::collection::vec(any::<u8>(), 0..6),
                prop::collection::vec(any::<u8>(), 0..10),
                0..8,
            ),
        )
            .prop_map(|([a, b, c, d], records, state)| Checkpoint {
                cab_applied: a,
                committed_len: b,
                causal_ctx: Dvv::from_records(records),
                state: state
                    .into_iter()
                    .map(|(k, v)| (Bytes::from(k), Bytes::from(v)))
                    .collect(),
                hlc: Timestamp(c),
                next_event_no: d,
            })
    }

    proptest! {
        #[test]
        fn round_trip_and_prefixes_refused(c in arb_checkpoint()) {
            let bytes = encode_checkpoint(&c);
            prop_assert_eq!(decode_checkpoint(&bytes).unwrap(), c);
            for n in 0..bytes.len() {
                prop_assert!(decode_checkpoint(&bytes[..n]).is_err(), "prefix {}", n);
            }
            let mut longer = bytes.clone();
            longer.push(0);
            prop_assert!(decode_checkpoint(&longer).is_err());
        }

        #[test]
        fn corrupted_bytes_never_panic(
            c in arb_checkpoint(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let mut bytes = encode_checkpoint(&c);
            for (at, b) in flips {
                let i = at.index(bytes.len());
                bytes[i] = b;
                let _ = decode_checkpoint(&bytes);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_checkpoint(&b);
            let mut framed = vec![CHECKPOINT_FORMAT];
            framed.extend_from_slice(&b);
            let _ = decode_checkpoint(&framed);
        }
    }

    #[test]
    fn other_formats_are_refused_by_name() {
        let mut bytes = encode_checkpoint(&Checkpoint::default());
        bytes[0] = 2;
        let e = decode_checkpoint(&bytes).unwrap_err();
        assert!(
            matches!(&e, StoreError::Corrupt(m) if m.contains("format 2")),
            "{e}"
        );
    }
}
