//! Snapshot reads across shards (docs/snapshot-reads.md, "Reading at a
//! snapshot"), as the Rust and Python clients make them: a `kv.mget` whose
//! keys span shards, drawn at the snapshot level, is split into one
//! `kv.mget` per shard; the first part reads at the client's read time, and
//! every other part then at exactly the time the first one read at
//! (`read_exact`) — one cut of every shard, with no operation across
//! shards and no consensus. A part a replica refuses (the time is no
//! longer kept there) is tried again at another replica, and the read is
//! given up after a few refusals.
//!
//! Each part is a history record of its own (the per-shard checks judge it
//! against its shard's committed order cut at its time); [`SplitReads`]
//! lists the parts of each read for the check that they all read at one
//! time.

use std::collections::VecDeque;

use creek_core::{Request, View, ViewKind, Views};
use creek_shard::ShardMap;
use creek_types::value::{decode_args, encode_args, Value};
use creek_types::ProcCall;

use super::Sim;

/// Refusals after which a read across shards is given up.
const TRIES_MAX: u32 = 4;

/// A client's read across shards in progress.
#[derive(Clone, Debug)]
pub(super) struct Split {
    /// The parts not sent yet: (shard, call).
    parts: VecDeque<(usize, ProcCall)>,
    /// The time the first part read at, once its view came.
    at: Option<u64>,
    /// The history record of the first part.
    first: usize,
    /// Refusals so far.
    tries: u32,
    /// Its entry in [`SplitReads`].
    id: usize,
}

/// Every read across shards: the request ids (client, seq) of its parts.
pub type SplitReads = Vec<Vec<(u64, u64)>>;

/// The parts of a `kv.mget` of `keys` by shard under `map`, in shard
/// order, or `None` if it is not a plain `kv.mget`.
fn parts_of(call: &ProcCall, map: &ShardMap) -> Option<Vec<(usize, ProcCall)>> {
    if call.name.as_ref() != "kv.mget" {
        return None;
    }
    let Value::List(keys) = decode_args(&call.args).ok()?.into_iter().next()? else {
        return None;
    };
    let mut by_shard: std::collections::BTreeMap<usize, Vec<Value>> = Default::default();
    for k in keys {
        let owner = usize::from(map.owner(None, k.as_bytes()?).0);
        by_shard.entry(owner).or_default().push(k);
    }
    Some(
        by_shard
            .into_iter()
            .map(|(s, keys)| {
                (
                    s,
                    ProcCall::new("kv.mget", encode_args(&[Value::List(keys)])),
                )
            })
            .collect(),
    )
}

impl Sim {
    /// Client `c` drew `call`, which spans shards: if it is a `kv.mget`
    /// drawn at the snapshot level, start reading it across shards and
    /// return the first part's shard and call.
    pub(super) fn split_read(&mut self, c: usize, call: &ProcCall) -> Option<(usize, ProcCall)> {
        if self.cfg.snapshot_reads <= 0.0 || c >= self.clients.len() {
            return None;
        }
        let map = self.clients[c].map.clone();
        let mut parts: VecDeque<_> = parts_of(call, &map)?.into();
        if parts.len() < 2 || !self.rng.chance(self.cfg.snapshot_reads) {
            return None;
        }
        let first = parts.pop_front()?;
        let id = self.split_reads.len();
        self.split_reads.push(Vec::new());
        self.clients[c].split = Some(Split {
            parts,
            at: None,
            first: self.history.ops.len(),
            tries: 0,
            id,
        });
        Some(first)
    }

    /// Client `c`'s next part of its read across shards, if one is due:
    /// sent to a random replica of its shard at exactly the first part's
    /// time. Whether it handled its turn.
    pub(super) fn next_split_part(&mut self, c: usize) -> bool {
        let Some(split) = &mut self.clients[c].split else {
            return false;
        };
        let Some(at) = split.at else {
            // The first part is not answered (its replica crashed): the
            // read is given up.
            self.clients[c].split = None;
            return false;
        };
        let Some((shard, call)) = split.parts.pop_front() else {
            self.clients[c].split = None;
            return false;
        };
        let members = self.member_slots(shard);
        let replica = members[self.rng.index(members.len())];
        let mut request = Request::snapshot(call.clone(), at);
        request.read_exact = true;
        let client = &mut self.clients[c];
        client.seq += 1;
        let rid = creek_types::ClientRequestId {
            client: c as u64 + 1,
            seq: client.seq,
        };
        request.call.request_id = Some(rid);
        request.views = Views::SNAPSHOT;
        if self.invoke(replica, Some(c), request, false) {
            if let Some(split) = &self.clients[c].split {
                self.split_reads[split.id].push((rid.client, rid.seq));
            }
        } else if let Some(split) = &mut self.clients[c].split {
            split.tries += 1;
            if split.tries >= TRIES_MAX {
                *self.faults.entry("split_read_given_up").or_default() += 1;
                self.clients[c].split = None;
            } else {
                split.parts.push_front((shard, call));
            }
            let at = self.now + self.cfg.think_us;
            self.schedule(at, super::Ev::Client { client: c });
        }
        true
    }

    /// Whether client `c`'s next op is the first part of a read across
    /// shards (sent at the snapshot level alone).
    pub(super) fn split_first_due(&self, c: usize) -> bool {
        self.clients
            .get(c)
            .and_then(|c| c.split.as_ref())
            .is_some_and(|s| s.at.is_none() && s.first == self.history.ops.len())
    }

    /// The first part of client `c`'s read across shards, record `index`,
    /// was invoked as request `rid`.
    pub(super) fn split_first_invoked(&mut self, c: usize, index: usize, rid: (u64, u64)) {
        if let Some(split) = &mut self.clients[c].split {
            if split.first == index {
                self.split_reads[split.id].push(rid);
            }
        }
    }

    /// View `v` of record `index` reached client `c`: the first part's
    /// snapshot view sets the time the others read at.
    pub(super) fn split_view(&mut self, c: usize, index: usize, v: &View) {
        if let Some(split) = &mut self.clients[c].split {
            if split.first == index && v.kind == ViewKind::Snapshot {
                split.at = Some(v.time);
            }
        }
    }
}

/// Every part of a read across shards read at one time: its parts'
/// snapshot views (in `history`, by request id) all carry the same time.
pub fn split_violations(
    history: &creek_check::history::History,
    reads: &SplitReads,
) -> Vec<String> {
    let by_id: std::collections::BTreeMap<(u64, u64), u64> = history
        .ops
        .iter()
        .filter_map(|r| {
            let rid = r.call.request_id?;
            let v = r.views.iter().find(|v| v.kind == ViewKind::Snapshot)?;
            Some(((rid.client, rid.seq), v.time))
        })
        .collect();
    reads
        .iter()
        .filter_map(|parts| {
            let times: Vec<u64> = parts.iter().filter_map(|p| by_id.get(p).copied()).collect();
            (times.windows(2).any(|w| w[0] != w[1])).then(|| {
                format!("a read across shards read its parts at different times: {times:?}")
            })
        })
        .take(10)
        .collect()
}
