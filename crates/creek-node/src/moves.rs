//! A replica's side of a move of keys between shards (docs/shards.md,
//! "Moving keys between shards"): what it answers a mover from its
//! committed state — a page of the moving keys (at the source, once it
//! released them when asked so), values of some keys, and the target's
//! own copy as its mover compares it (only once the state holds the
//! mover's last chunk). Reads of the committed state only: nothing here
//! changes the replica.

use bytes::Bytes;
use creek_procs::moves::copy::{export, moving};
use creek_procs::moves::{Fence, FENCE_KEY};
use creek_procs::ownership::{split_owned, MAP_KEY as OWNED};
use creek_shard::{Move, ShardMap};

use crate::mpo::wire::Reply;
use crate::mpo::Refusal;
use creek_cab::CabStorage;
use creek_exec::Engine;

use crate::Node;

/// Above every stored key (keys are at most a few KiB): the end of a scan
/// to the end of the state.
const KEYS_END: [u8; 16 * 1024] = [0xff; 16 * 1024];

/// The move `map` holds, in flight or finishing.
fn move_of(map: &Bytes) -> Result<Move, Refusal> {
    let map: ShardMap = creek_shard::decode(map)
        .map_err(|e| Refusal::Malformed(format!("a move's map does not decode: {e}")))?;
    map.moving
        .or(map.finishing)
        .ok_or_else(|| Refusal::Malformed(format!("the map (epoch {}) holds no move", map.epoch)))
}

impl<S: CabStorage> Node<S> {
    /// The epoch of the map this replica's committed state executes under
    /// (0: none).
    fn adopted_epoch(&self) -> u64 {
        self.replica
            .engine()
            .read_committed(OWNED)
            .and_then(|b| split_owned(&b))
            .and_then(|(_, map)| creek_shard::decode(&map).ok())
            .map_or(0, |m| m.epoch)
    }

    /// A page of the committed state of the move `map` holds.
    pub(crate) fn move_export(
        &self,
        map: &Bytes,
        from: Bytes,
        digests: bool,
        adopted: u64,
    ) -> Result<Reply, Refusal> {
        let m = move_of(map)?;
        if self.adopted_epoch() < adopted {
            return Ok(Reply::Pending);
        }
        let engine = self.replica.engine();
        let page = export(&m, from, digests, &mut |from, limit, out| {
            engine.scan_committed(from, &KEYS_END, limit, out)
        });
        Ok(Reply::Page(page))
    }

    /// The committed values of `keys`.
    pub(crate) fn move_fetch(&self, keys: Vec<Bytes>, adopted: u64) -> Reply {
        if self.adopted_epoch() < adopted {
            return Reply::Pending;
        }
        let engine = self.replica.engine();
        Reply::Reads(
            keys.into_iter()
                .map(|k| {
                    let v = engine.read_committed(&k);
                    (k, v)
                })
                .collect(),
        )
    }

    /// The committed keys of the move `map` holds in `[from, next)`, if
    /// the state holds chunk `fence`.
    pub(crate) fn move_mine(
        &self,
        map: &Bytes,
        from: Bytes,
        next: Option<Bytes>,
        fence: Fence,
    ) -> Result<Reply, Refusal> {
        let m = move_of(map)?;
        let engine = self.replica.engine();
        let held = engine
            .read_committed(FENCE_KEY)
            .and_then(|b| Fence::decode(&b));
        if held != Some(fence) {
            return Ok(Reply::Pending);
        }
        let end: &[u8] = next.as_deref().unwrap_or(&KEYS_END);
        let mut out = Vec::new();
        let mut cursor = from;
        loop {
            let mut batch = Vec::new();
            engine.scan_committed(&cursor, end, 1024, &mut batch);
            let Some((last, _)) = batch.last() else {
                break;
            };
            let mut after = last.to_vec();
            after.push(0);
            cursor = after.into();
            let got = batch.len();
            out.extend(
                batch
                    .into_iter()
                    .filter(|(k, _)| moving(&m, k))
                    .map(|(k, v)| (k, Some(v))),
            );
            if got < 1024 {
                break;
            }
        }
        Ok(Reply::Reads(out))
    }
}
