//! What one shard reads for an MPO at its turn and hands the others: its
//! session verdict, its commit-time proposal and its keys' values, and
//! their encoding as a value (how a shard records them, to answer a shard
//! that asks again).

use bytes::Bytes;
use creek_types::value::Value;

#[cfg(doc)]
use super::encode_answer;

/// Values read by one shard: each of its keys with its value (`None`:
/// absent), strictly ascending by key. What a shard sends the others
/// starts with its session verdict under [`VERDICT_KEY`] (`None`: run;
/// else the answer, see [`encode_answer`]).
pub type Reads = Vec<(Bytes, Option<Bytes>)>;

/// The key under which a shard's reads carry its session verdict (a
/// reserved key starting with two zero bytes, so it sorts before every
/// key an MPO names, keyspaces' keys `\0ks/…` among them).
pub const VERDICT_KEY: &[u8] = b"\0\0mpo/verdict";

/// The key under which a shard's reads carry, after its verdict, its
/// proposal for the MPO's commit time (a big-endian u64): the MPO commits
/// on every involved shard at the largest proposal (docs/snapshot-reads.md,
/// "Commit times"). It sorts after [`VERDICT_KEY`] and before every key an
/// MPO names.
pub const TIME_KEY: &[u8] = b"\0\0mpo/when";

/// Add this shard's commit-time proposal `time` to its `reads` (after the
/// verdict).
pub fn put_time(reads: &mut Reads, time: u64) {
    let at = usize::from(
        reads
            .first()
            .is_some_and(|(k, _)| k.as_ref() == VERDICT_KEY),
    );
    if reads.get(at).is_none_or(|(k, _)| k.as_ref() != TIME_KEY) {
        reads.insert(
            at,
            (
                Bytes::from_static(TIME_KEY),
                Some(Bytes::copy_from_slice(&time.to_be_bytes())),
            ),
        );
    }
}

/// One key's value in a shard's reads (`None`: absent).
pub type Read = (Bytes, Option<Bytes>);

/// A shard's reads split into its verdict entry's value, its commit-time
/// proposal (0 if it sent none) and its keys' values.
pub fn split_reads(reads: &Reads) -> (Option<Bytes>, u64, &[Read]) {
    let (verdict, rest) = match reads.split_first() {
        Some(((k, v), rest)) if k.as_ref() == VERDICT_KEY => (v.clone(), rest),
        _ => (None, &reads[..]),
    };
    match rest.split_first() {
        Some(((k, v), keys)) if k.as_ref() == TIME_KEY => {
            let time = v
                .as_deref()
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_be_bytes);
            (verdict, time, keys)
        }
        _ => (verdict, 0, rest),
    }
}

/// `reads` as a value: a list of `[key, value or nil]`.
pub fn reads_value(reads: &Reads) -> Value {
    Value::List(
        reads
            .iter()
            .map(|(k, v)| {
                Value::List(vec![
                    Value::Bytes(k.clone()),
                    v.clone().map_or(Value::Nil, Value::Bytes),
                ])
            })
            .collect(),
    )
}

/// The reads a value made by [`reads_value`] holds; `None` if it is not
/// such a list with keys strictly ascending.
pub fn reads_from_value(value: &Value) -> Option<Reads> {
    let reads: Reads = value
        .as_list()?
        .iter()
        .map(|item| match item.as_list()? {
            [Value::Bytes(k), Value::Nil] => Some((k.clone(), None)),
            [Value::Bytes(k), Value::Bytes(v)] => Some((k.clone(), Some(v.clone()))),
            _ => None,
        })
        .collect::<Option<_>>()?;
    reads.windows(2).all(|w| w[0].0 < w[1].0).then_some(reads)
}
