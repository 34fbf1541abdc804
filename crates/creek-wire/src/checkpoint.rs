//! The encoding of a checkpoint (`creek_core::Checkpoint`): one format for
//! the store (the last checkpoint of a data directory) and for state
//! transfer (a snapshot streamed to a peer in chunks of these bytes). Every
//! integer is a canonical LEB128 varint (`creek_types::varint`):
//!
//! | field | encoding |
//! |---|---|
//! | format | 1 byte, [`FORMAT`] (= 3) |
//! | `cab_applied`, `committed_len`, `hlc`, `next_event_no` | 4 varints |
//! | `commit_time` | 1 varint (format 3 on) |
//! | committed ids | `count`, then per origin: `origin` (≤ u16), `counter`, `n`, `n` gaps (exception `x1 = counter + g1 + 1`, `xi = x(i-1) + gi + 1`), as `Dvv::to_records` gives them |
//! | group | `conf_index`, `auto_leave` (0 or 1), then voters, outgoing voters, learners, next learners: each `count` and that many ids (≤ u16); `max_id` (≤ u16); `count` addresses: `id`, `len`, peer address, `len`, client address (UTF-8) |
//! | state | `count`, then per key: `len`, key bytes, `len`, value bytes; keys strictly increasing |
//!
//! Format 1 (written before groups were recorded) has no group section; it
//! decodes with an unknown group. Formats 1 and 2 (written before commit
//! times) have no `commit_time`; they decode with 0, and the next commit
//! time follows the next op's clock (docs/snapshot-reads.md). Nothing may follow. Decoding is total: any byte string yields a
//! checkpoint or a [`CheckpointError`], never a panic, and allocates in
//! proportion to the input.

use bytes::Bytes;
use creek_core::{Addrs, Checkpoint, Directory, Dvv, Group, ReplicaId, Timestamp};
use creek_types::Writer;

use crate::codec::{exception_gaps, run_seqs, RunsFromGaps};

/// Why bytes are not a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CheckpointError(pub String);

/// The checkpoint format this build writes and reads.
pub const FORMAT: u8 = 3;

/// The format written before commit times were recorded (read, never
/// written).
const FORMAT_NO_COMMIT_TIME: u8 = 2;

/// The format written before groups were recorded (read, never written).
const FORMAT_NO_GROUP: u8 = 1;

/// Encode a checkpoint.
pub fn encode(c: &Checkpoint) -> Vec<u8> {
    let state_bytes: usize = c.state.iter().map(|(k, v)| k.len() + v.len() + 10).sum();
    let mut out = Vec::with_capacity(64 + state_bytes);
    let mut encoder = Encoder::default();
    while encoder.next_piece(c, &mut out, usize::MAX) {}
    out
}

/// Encodes a checkpoint a piece at a time, so that a large one is written
/// or hashed without ever holding its whole encoding: the pieces of one
/// checkpoint, concatenated, are [`encode`]'s bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Encoder {
    /// The next state entry to encode (`None`: the header is not out yet).
    next: Option<usize>,
}

impl Encoder {
    /// Append the next piece of `c` (the same checkpoint at every call) to
    /// `out`: the header, or whole state entries until `out` holds at least
    /// `target` bytes (a piece holds at least one entry, so it may pass
    /// `target`). Returns whether anything was appended: `false` once
    /// everything was.
    pub fn next_piece(&mut self, c: &Checkpoint, out: &mut Vec<u8>, target: usize) -> bool {
        let Some(mut i) = self.next else {
            out.push(FORMAT);
            for v in [
                c.cab_applied,
                c.committed_len,
                c.hlc.0,
                c.next_event_no,
                c.commit_time,
            ] {
                out.put_varint(v);
            }
            let records = c.causal_ctx.to_runs();
            out.put_varint(records.len() as u64);
            for (origin, counter, runs) in &records {
                out.put_varint(u64::from(origin.0));
                out.put_varint(*counter);
                out.put_varint(run_seqs(runs) as u64);
                for gap in exception_gaps(*counter, runs) {
                    out.put_varint(gap);
                }
            }
            put_group(out, &c.group);
            out.put_varint(c.state.len() as u64);
            self.next = Some(0);
            return true;
        };
        if i >= c.state.len() {
            return false;
        }
        while let Some((k, v)) = c.state.get(i) {
            out.put_prefixed(k);
            out.put_prefixed(v);
            i += 1;
            if out.len() >= target {
                break;
            }
        }
        self.next = Some(i);
        true
    }
}

/// Decode a checkpoint written by [`encode`].
pub fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
    let mut r = Reader(creek_types::Reader::new(bytes));
    let format = r.byte()?;
    if !(FORMAT_NO_GROUP..=FORMAT).contains(&format) {
        return Err(corrupt(format!(
            "checkpoint format {format} (this build reads {FORMAT_NO_GROUP} to {FORMAT})"
        )));
    }
    let cab_applied = r.varint()?;
    let committed_len = r.varint()?;
    let hlc = Timestamp(r.varint()?);
    let next_event_no = r.varint()?;
    let commit_time = if format > FORMAT_NO_COMMIT_TIME {
        r.varint()?
    } else {
        0
    };
    // A record takes at least 3 bytes, an exception gap 1.
    let n_records = r.count(3)?;
    let mut records = Vec::with_capacity(n_records);
    for _ in 0..n_records {
        let origin = r.varint()?;
        let origin = u16::try_from(origin)
            .map_err(|_| corrupt(format!("checkpoint origin {origin} exceeds 16 bits")))?;
        let counter = r.varint()?;
        let n = r.count(1)?;
        let mut runs = RunsFromGaps::new(counter);
        for _ in 0..n {
            runs.push(r.varint()?)
                .ok_or_else(|| corrupt("checkpoint exception seq overflows".to_owned()))?;
        }
        records.push((ReplicaId(origin), counter, runs.finish()));
    }
    let causal_ctx = Dvv::from_runs(records);
    let group = if format > FORMAT_NO_GROUP {
        r.group()?
    } else {
        Group::default()
    };
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
    r.finish()?;
    Ok(Checkpoint {
        cab_applied,
        committed_len,
        causal_ctx,
        state,
        hlc,
        next_event_no,
        commit_time,
        group,
    })
}

fn put_ids(out: &mut Vec<u8>, ids: &[ReplicaId]) {
    out.put_varint(ids.len() as u64);
    for r in ids {
        out.put_varint(u64::from(r.0));
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.put_prefixed(s.as_bytes());
}

fn put_group(out: &mut Vec<u8>, g: &Group) {
    out.put_varint(g.conf_index);
    out.push(u8::from(g.auto_leave));
    for ids in [&g.voters, &g.voters_outgoing, &g.learners, &g.learners_next] {
        put_ids(out, ids);
    }
    put_directory(out, &g.directory);
}

fn put_directory(out: &mut Vec<u8>, d: &Directory) {
    out.put_varint(u64::from(d.max_id));
    out.put_varint(d.addrs.len() as u64);
    for (r, a) in &d.addrs {
        out.put_varint(u64::from(r.0));
        put_str(out, &a.peer);
        put_str(out, &a.client);
    }
}

/// Encode a group's directory alone (as the store keeps it): the group
/// section's `max_id` and addresses.
pub fn encode_directory(d: &Directory) -> Vec<u8> {
    let mut out = Vec::new();
    put_directory(&mut out, d);
    out
}

/// Decode what [`encode_directory`] wrote; nothing may follow.
pub fn decode_directory(bytes: &[u8]) -> Result<Directory, CheckpointError> {
    let mut r = Reader(creek_types::Reader::new(bytes));
    let d = r.directory()?;
    r.finish()?;
    Ok(d)
}

fn corrupt(why: String) -> CheckpointError {
    CheckpointError(why)
}

impl From<creek_types::DecodeError> for CheckpointError {
    fn from(e: creek_types::DecodeError) -> Self {
        corrupt(format!("checkpoint: {e}"))
    }
}

/// The shared bounded reader, with the checkpoint's own fields on top.
struct Reader<'a>(creek_types::Reader<'a>);

impl<'a> std::ops::Deref for Reader<'a> {
    type Target = creek_types::Reader<'a>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Reader<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Reader<'_> {
    fn id(&mut self) -> Result<ReplicaId, CheckpointError> {
        let v = self.varint()?;
        u16::try_from(v)
            .map(ReplicaId)
            .map_err(|_| corrupt(format!("checkpoint replica id {v} exceeds 16 bits")))
    }

    fn ids(&mut self) -> Result<Vec<ReplicaId>, CheckpointError> {
        let n = self.count(1)?;
        (0..n).map(|_| self.id()).collect()
    }

    fn string(&mut self) -> Result<String, CheckpointError> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec())
            .map_err(|_| corrupt("checkpoint address is not UTF-8".to_owned()))
    }

    fn group(&mut self) -> Result<Group, CheckpointError> {
        let conf_index = self.varint()?;
        let auto_leave = match self.byte()? {
            0 => false,
            1 => true,
            b => return Err(corrupt(format!("checkpoint auto_leave byte {b}"))),
        };
        let voters = self.ids()?;
        let voters_outgoing = self.ids()?;
        let learners = self.ids()?;
        let learners_next = self.ids()?;
        let directory = self.directory()?;
        Ok(Group {
            conf_index,
            voters,
            voters_outgoing,
            learners,
            learners_next,
            auto_leave,
            directory,
        })
    }

    fn directory(&mut self) -> Result<Directory, CheckpointError> {
        let max_id = self.id()?.0;
        // An address entry takes at least 3 bytes.
        let n = self.count(3)?;
        let mut addrs = std::collections::BTreeMap::new();
        for _ in 0..n {
            let r = self.id()?;
            let peer = self.string()?;
            let client = self.string()?;
            if addrs.insert(r, Addrs { peer, client }).is_some() {
                return Err(corrupt(format!("replica {} listed twice", r.0)));
            }
        }
        Ok(Directory { addrs, max_id })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    fn arb_ids() -> impl Strategy<Value = Vec<ReplicaId>> {
        prop::collection::vec(prop_oneof![0u16..6, any::<u16>()].prop_map(ReplicaId), 0..4)
    }

    fn arb_group() -> impl Strategy<Value = Group> {
        let addrs = prop::collection::btree_map(
            (0u16..8).prop_map(ReplicaId),
            ("[a-z0-9.:]{0,12}", "[a-z0-9.:é]{0,12}")
                .prop_map(|(peer, client)| Addrs { peer, client }),
            0..3,
        );
        (
            any::<u64>(),
            any::<bool>(),
            [arb_ids(), arb_ids(), arb_ids(), arb_ids()],
            any::<u16>(),
            addrs,
        )
            .prop_map(
                |(conf_index, auto_leave, [v, vo, l, ln], max_id, addrs)| Group {
                    conf_index,
                    voters: v,
                    voters_outgoing: vo,
                    learners: l,
                    learners_next: ln,
                    auto_leave,
                    directory: Directory { addrs, max_id },
                },
            )
    }

    fn arb_checkpoint() -> impl Strategy<Value = Checkpoint> {
        let record = (
            0u16..4,
            prop_oneof![0u64..20, any::<u64>()],
            prop::collection::vec(prop_oneof![0u64..40, any::<u64>()], 0..5),
        )
            .prop_map(|(o, c, x)| (ReplicaId(o), c, x));
        (
            any::<[u64; 5]>(),
            prop::collection::vec(record, 0..4),
            prop::collection::btree_map(
                prop::collection::vec(any::<u8>(), 0..6),
                prop::collection::vec(any::<u8>(), 0..10),
                0..8,
            ),
            arb_group(),
        )
            .prop_map(|([a, b, c, d, e], records, state, group)| Checkpoint {
                cab_applied: a,
                committed_len: b,
                causal_ctx: Dvv::from_records(records),
                state: state
                    .into_iter()
                    .map(|(k, v)| (Bytes::from(k), Bytes::from(v)))
                    .collect(),
                hlc: Timestamp(c),
                next_event_no: d,
                commit_time: e,
                group,
            })
    }

    #[test]
    fn a_checkpoint_written_before_groups_decodes_with_an_unknown_group() {
        // Format 1: header, no committed ids, no group, one key.
        let mut bytes = vec![1, 7, 2, 9, 3, 0, 1];
        bytes.extend_from_slice(&[1, b'k', 1, b'v']);
        let c = decode(&bytes).unwrap();
        assert_eq!(c.cab_applied, 7);
        assert!(c.group.is_unknown());
        assert_eq!(c.state, vec![(Bytes::from("k"), Bytes::from("v"))]);
    }

    #[test]
    fn a_checkpoint_written_before_commit_times_decodes_with_time_zero() {
        // Format 2: header without the commit time, no committed ids, an
        // unknown group (all lists empty, no addresses), no keys.
        let bytes = vec![2, 7, 2, 9, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let c = decode(&bytes).unwrap();
        assert_eq!((c.cab_applied, c.next_event_no, c.commit_time), (7, 3, 0));
        assert!(c.state.is_empty());
    }

    proptest! {
        #[test]
        fn round_trip_and_prefixes_refused(c in arb_checkpoint()) {
            let bytes = encode(&c);
            prop_assert_eq!(decode(&bytes).unwrap(), c);
            for n in 0..bytes.len() {
                prop_assert!(decode(&bytes[..n]).is_err(), "prefix {}", n);
            }
            let mut longer = bytes.clone();
            longer.push(0);
            prop_assert!(decode(&longer).is_err());
        }

        #[test]
        fn pieces_concatenate_to_the_encoding(c in arb_checkpoint(), target in 1usize..40) {
            let mut encoder = Encoder::default();
            let (mut joined, mut piece) = (Vec::new(), Vec::new());
            while encoder.next_piece(&c, &mut piece, target) {
                joined.append(&mut piece);
            }
            prop_assert_eq!(joined, encode(&c));
        }

        #[test]
        fn corrupted_bytes_never_panic(
            c in arb_checkpoint(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let mut bytes = encode(&c);
            for (at, b) in flips {
                let i = at.index(bytes.len());
                bytes[i] = b;
                let _ = decode(&bytes);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&b);
            let mut framed = vec![FORMAT];
            framed.extend_from_slice(&b);
            let _ = decode(&framed);
        }
    }

    #[test]
    fn other_formats_are_refused_by_name() {
        let mut bytes = encode(&Checkpoint::default());
        bytes[0] = 4;
        let e = decode(&bytes).unwrap_err();
        assert!(e.0.contains("format 4"), "{e}");
    }
}
