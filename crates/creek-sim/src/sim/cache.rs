//! The simulator's clients' times and caches (docs/snapshot-reads.md,
//! "Reading at a snapshot", "The client cache"), as the Rust and Python
//! clients keep them:
//!
//! * a **read time** — the largest time of a snapshot view, or of a read's
//!   final view — which snapshot reads carry, and a **dependency time** —
//!   that and the commit times of the client's own writes — which every
//!   other op carries, so a client's later op commits after its earlier
//!   ones, on any shard. With stable times on, one of each across shards
//!   (every shard's time moves); without, one per shard;
//! * a **cache** of the client's acknowledged `kv.put`/`kv.delete` writes:
//!   key → value, with the write's commit time once its final view came
//!   (a weak write asks for it); an entry goes when the read time passes
//!   that time; a snapshot view of `kv.get` shows the cached value where
//!   the entry's time is unknown or above the view's. Any other write of a
//!   key drops its entry (its effect is not known from its arguments).
//!
//! What a client returned for each snapshot `kv.get` goes to
//! [`ClientReads`], for the read-your-writes check.

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_check::history::History;
use creek_core::{Request, View, ViewKind};
use creek_exec::Outcome;
use creek_types::planted::Bug;
use creek_types::value::{decode_args, Value};
use creek_types::ProcCall;

use super::Sim;

/// One cached write.
#[derive(Clone, Debug)]
pub(super) struct Cached {
    /// What it wrote (`None`: deleted).
    value: Option<Bytes>,
    /// Its history record.
    op: usize,
    /// Its shard's time slot (see [`Sim::time_slot`]).
    slot: usize,
    /// Its commit time, once its final view came.
    time: Option<u64>,
}

/// A client's times and cache.
#[derive(Clone, Debug, Default)]
pub(super) struct ClientTimes {
    /// Read time per slot.
    read: Vec<u64>,
    /// Dependency time per slot.
    dep: Vec<u64>,
    cache: BTreeMap<Bytes, Cached>,
    /// The history record of the client's last write of each key it
    /// wrote: only that one's effect enters the cache (an earlier write's
    /// view may come later, from a replica that took it before a resend).
    last_write: BTreeMap<Bytes, usize>,
}

impl ClientTimes {
    pub(super) fn new(slots: usize) -> Self {
        ClientTimes {
            read: vec![0; slots],
            dep: vec![0; slots],
            cache: BTreeMap::new(),
            last_write: BTreeMap::new(),
        }
    }
}

/// What clients returned for their snapshot `kv.get`s, by request id
/// (client, seq): the view's result, or a cached write laid over it.
pub type ClientReads = BTreeMap<(u64, u64), Outcome>;

/// The key a built-in kv call names first, and what it leaves there if
/// that is known from its arguments alone (`Some(None)`: deleted).
fn kv_write(call: &ProcCall) -> Option<(Bytes, Option<Option<Bytes>>)> {
    let args = decode_args(&call.args).ok()?;
    let key = match args.first()? {
        Value::Bytes(k) => k.clone(),
        _ => return None,
    };
    match call.name.as_ref() {
        "kv.put" => match args.get(1)? {
            Value::Bytes(v) => Some((key, Some(Some(v.clone())))),
            _ => Some((key, None)),
        },
        "kv.delete" => Some((key, Some(None))),
        "kv.incr" | "kv.cas" => Some((key, None)),
        _ => None,
    }
}

/// The key a `kv.get` reads.
fn read_key(call: &ProcCall) -> Option<Bytes> {
    if call.name.as_ref() != "kv.get" {
        return None;
    }
    match decode_args(&call.args).ok()?.into_iter().next()? {
        Value::Bytes(k) => Some(k),
        _ => None,
    }
}

/// The history records `removed` (ops that never took effect) leave the
/// history: a snapshot read of a key by a client that wrote it in one
/// of them before the read is no longer judged (the client laid what
/// it had been told over it, and the history no longer says what).
pub(super) fn forget_reads_over(history: &History, reads: &mut ClientReads, removed: &[usize]) {
    let mut writes: BTreeMap<(u32, Bytes), u64> = BTreeMap::new();
    for &i in removed {
        let r = &history.ops[i];
        if let Some((key, _)) = kv_write(&r.call) {
            let at = writes.entry((r.client, key)).or_insert(r.invoked_at_us);
            *at = (*at).min(r.invoked_at_us);
        }
    }
    if writes.is_empty() {
        return;
    }
    for r in &history.ops {
        let (Some(rid), Some(key)) = (r.call.request_id, read_key(&r.call)) else {
            continue;
        };
        if writes
            .get(&(r.client, key))
            .is_some_and(|at| *at < r.invoked_at_us)
        {
            reads.remove(&(rid.client, rid.seq));
        }
    }
}

impl Sim {
    /// Where a time of shard `shard` is kept: one slot for every shard
    /// with stable times on, else one per shard.
    fn time_slot(&self, shard: usize) -> usize {
        if self.cfg.stable_every_us > 0 {
            0
        } else {
            shard
        }
    }

    /// Client `c` sends `request` to shard `shard`: it carries the read
    /// time (a snapshot read) or the dependency time (anything else); a
    /// cacheable write asks for its final view, to learn its commit time.
    pub(super) fn client_sends(&mut self, c: usize, shard: usize, request: &mut Request) {
        let slot = self.time_slot(shard);
        let snapshot_on = self.cfg.snapshot_reads > 0.0;
        let Some(client) = self.clients.get_mut(c) else {
            return;
        };
        let times = &mut client.times;
        request.read_time = if request.views.snapshot {
            times.read[slot]
        } else {
            times.dep[slot]
        };
        if let Some((_, Some(_))) = kv_write(&request.call) {
            request.views.final_view |= snapshot_on;
        }
    }

    /// Client `c`'s op, history record `index`, was invoked: a write drops
    /// the cache entry of its key (a cacheable one enters it when it is
    /// acknowledged).
    pub(super) fn client_invoked(&mut self, c: usize, index: usize) {
        let Some((key, _)) = self.history.ops.get(index).and_then(|r| kv_write(&r.call)) else {
            return;
        };
        if let Some(client) = self.clients.get_mut(c) {
            client.times.cache.remove(&key);
            client.times.last_write.insert(key, index);
        }
    }

    /// View `v` of history record `index` reaches its closed-loop client
    /// `c` from shard `shard`: times move, the cache learns, and a snapshot
    /// `kv.get` returns what the cache makes of it.
    pub(super) fn client_receives(&mut self, c: usize, shard: usize, index: usize, v: &View) {
        let slot = self.time_slot(shard);
        let drop_cache = self.cfg.plant_bug == Some(Bug::SnapshotDropsClientCache);
        let record = &self.history.ops[index];
        let read_only = self
            .registry
            .check(&record.call, &creek_exec::TxnLimits::default())
            .is_ok_and(|c| c.read_only);
        let first = record.views.is_empty();
        let written = kv_write(&record.call);
        let request_id = record.call.request_id;
        let read_key = read_key(&record.call);
        let gone = |i: usize| {
            let r = &self.history.ops[i];
            r.origin_crashed || r.origin_left || r.lost
        };
        let stale: Vec<Bytes> = match self.clients.get(c) {
            Some(client) => client
                .times
                .cache
                .iter()
                .filter(|(_, e)| gone(e.op))
                .map(|(k, _)| k.clone())
                .collect(),
            None => return,
        };
        let Some(client) = self.clients.get_mut(c) else {
            return;
        };
        let times = &mut client.times;
        for k in stale {
            times.cache.remove(&k);
        }
        // The cache learns the write's effect when it is acknowledged and
        // its commit time with its final view.
        if let Some((key, Some(value))) = written {
            if first && times.last_write.get(&key) == Some(&index) {
                times.cache.insert(
                    key.clone(),
                    Cached {
                        value,
                        op: index,
                        slot,
                        time: None,
                    },
                );
            }
            if let (true, Some(e)) = (v.kind.is_final(), times.cache.get_mut(&key)) {
                if e.op == index {
                    e.time = Some(v.time);
                }
            }
        }
        if v.time != 0 {
            times.dep[slot] = times.dep[slot].max(v.time);
            if v.kind == ViewKind::Snapshot || (v.kind.is_final() && read_only) {
                times.read[slot] = times.read[slot].max(v.time);
            }
        }
        let read = &times.read;
        times
            .cache
            .retain(|_, e| e.time.is_none_or(|t| t > read[e.slot]));
        if v.kind != ViewKind::Snapshot {
            return;
        }
        let (Some(key), Some(rid)) = (read_key, request_id) else {
            return;
        };
        let cached = times
            .cache
            .get(&key)
            .filter(|e| e.time.is_none_or(|t| t > v.time) && !drop_cache);
        let returned = match cached {
            Some(e) => Ok(e.value.clone().map_or(Value::Nil, Value::Bytes).encode()),
            None => v.outcome.clone(),
        };
        self.client_reads.insert((rid.client, rid.seq), returned);
    }
}
