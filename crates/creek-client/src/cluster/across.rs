//! A snapshot `kv.mget` whose keys span shards, read at one time
//! (docs/snapshot-reads.md, "Reading at a snapshot"): the first key's
//! shard's part at the client's read time, every other shard's part at
//! exactly the time that part answered at, in parallel, assembled in the
//! caller's key order into one snapshot view at that time. The client
//! cache is laid over each part (they share the time). Not for other
//! levels: a strong `kv.mget` across shards is one operation across them.

use std::time::Instant;

use bytes::Bytes;
use creek_shard::ShardId;
use creek_types::value::Value;

use super::{wrong_shard_pause, Cluster, Routes, WRONG_SHARD_RETRIES};
use crate::causal::ReadAt;
use crate::view::{Level, Outcome, View, ViewKind};
use crate::{CallOptions, Client, Correctable, Error, Levels};

/// How many times a read across shards is started again after a part
/// answered `UNAVAILABLE` (a replica no longer keeps that time's versions).
const UNAVAILABLE_RETRIES: usize = 1;

/// One shard's part: its keys' positions in the caller's list.
type Part = (ShardId, Vec<usize>);

impl Cluster {
    /// The keys of a `kv.mget` call if they span shards.
    pub(super) async fn keys_across(&self, args: &[Value]) -> Option<Vec<Bytes>> {
        let [Value::List(items)] = args else {
            return None;
        };
        let keys: Vec<Bytes> = items
            .iter()
            .map(|v| v.as_bytes().cloned())
            .collect::<Option<_>>()?;
        let routes = self.inner.routes.read().await;
        (routes.parts(&keys).len() > 1).then_some(keys)
    }

    /// Read `keys` at one time across their shards.
    pub(super) async fn read_across(
        &self,
        keys: Vec<Bytes>,
        options: &CallOptions,
    ) -> Result<Correctable, Error> {
        let start = Instant::now();
        let (mut unavailable, mut wrong_shard) = (UNAVAILABLE_RETRIES, WRONG_SHARD_RETRIES);
        loop {
            let routes = self.inner.routes.read().await.clone();
            match read_parts(&routes, &keys, options).await {
                Ok((outcome, time)) => {
                    let (mut feeder, correctable) = Correctable::channel();
                    let view = View {
                        level: Level::Snapshot,
                        kind: ViewKind::Snapshot,
                        outcome,
                        latency: start.elapsed(),
                        across_shards: false,
                        time,
                    };
                    feeder.view(view, true);
                    return Ok(correctable);
                }
                Err(Error::WrongShard { .. }) if wrong_shard > 0 => {
                    wrong_shard -= 1;
                    wrong_shard_pause(WRONG_SHARD_RETRIES - wrong_shard).await;
                    self.refresh().await?;
                }
                Err(e) if e.is_unavailable() && unavailable > 0 => unavailable -= 1,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Routes {
    /// `keys` by shard, in the order of their shards' first keys.
    fn parts(&self, keys: &[Bytes]) -> Vec<Part> {
        let mut parts: Vec<Part> = Vec::new();
        for (at, key) in keys.iter().enumerate() {
            let shard = self.map.owner(None, key);
            match parts.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, positions)) => positions.push(at),
                None => parts.push((shard, vec![at])),
            }
        }
        parts
    }
}

/// Read every shard's part; the assembled outcome (or the first part's
/// abort) and the time all parts read at.
async fn read_parts(
    routes: &Routes,
    keys: &[Bytes],
    options: &CallOptions,
) -> Result<(Outcome, u64), Error> {
    let parts = routes.parts(keys);
    let mut values = vec![Value::Nil; keys.len()];
    let Some(((shard, positions), rest)) = parts.split_first() else {
        return Ok((Ok(Value::List(values)), 0));
    };
    let first = read_part(routes.client(*shard)?, keys, positions, *options, None).await?;
    let time = first.time;
    let mut reads = Vec::new();
    for (shard, positions) in rest {
        let (client, keys, positions) = (routes.client(*shard)?, keys.to_vec(), positions.clone());
        let options = *options;
        reads.push((
            *shard,
            tokio::spawn(
                async move { read_part(client, &keys, &positions, options, Some(time)).await },
            ),
        ));
    }
    let mut views = vec![(positions.clone(), first)];
    for ((shard, read), (_, positions)) in reads.into_iter().zip(rest) {
        let view = read
            .await
            .map_err(|e| Error::Protocol(format!("the read of shard {}'s part: {e}", shard.0)))??;
        if view.time != time {
            return Err(Error::Protocol(format!(
                "shard {} read at {} when asked for exactly {time}",
                shard.0, view.time
            )));
        }
        views.push((positions.clone(), view));
    }
    for (positions, view) in views {
        let part = match view.outcome {
            Ok(Value::List(part)) if part.len() == positions.len() => part,
            Ok(other) => {
                return Err(Error::Protocol(format!(
                    "a kv.mget of {} keys answered {other}",
                    positions.len()
                )))
            }
            Err(abort) => return Ok((Err(abort), time)),
        };
        for (at, value) in positions.into_iter().zip(part) {
            values[at] = value;
        }
    }
    Ok((Ok(Value::List(values)), time))
}

/// One shard's part as a snapshot read: at the client's read time, or at
/// exactly `exact`.
async fn read_part(
    client: Client,
    keys: &[Bytes],
    positions: &[usize],
    options: CallOptions,
    exact: Option<u64>,
) -> Result<View, Error> {
    let part = Value::List(
        positions
            .iter()
            .map(|at| Value::Bytes(keys[*at].clone()))
            .collect(),
    );
    let id = client.request_id(None);
    client
        .invoke_at(
            "kv.mget".to_owned(),
            &[part],
            Levels::Snapshot,
            &options,
            id,
            true,
            ReadAt { exact, past: false },
        )
        .await?
        .final_view()
        .await
}
