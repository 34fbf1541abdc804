//! Checks of the `snapshot` level (docs/snapshot-reads.md).
//!
//! * [`commit_times`]: the replicas give every committed position the same
//!   commit time, and the times strictly increase along the order.
//! * [`check_snapshot_views`]: every snapshot view equals its call run on
//!   the state after exactly the committed ops whose commit time is at most
//!   the view's time — one cut of the committed order, nothing tentative.
//! * [`check_read_times`]: a client never reads an older state than it
//!   read before: each snapshot view's time is at least every snapshot
//!   view's and read's final view's time the client received before it
//!   invoked the op, whichever replica answered. (Its own writes' commit
//!   times do not count: the client cache shows those writes until the
//!   snapshots reach them.)
//! * [`check_read_your_writes`]: a client's snapshot `kv.get` shows its
//!   own last acknowledged `kv.put` of the key unless the client knew that
//!   write committed at or before the snapshot (then the snapshot holds it,
//!   or something later).

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_core::{OpId, ViewKind};
use creek_exec::basic::MapSnapshot;
use creek_exec::{Outcome, Procedures, TxnLimits};
use creek_procs::Registry;
use creek_types::value::{decode_args, Value};
use creek_types::ProcCall;

use crate::history::{History, SETUP_CLIENT};
use crate::run::RunEnd;

/// The commit time of each position of `canonical`, as the replicas that
/// listed the same op there report it (0 where none knows it), with a
/// violation for every position two replicas time differently and for
/// times that do not increase.
pub fn commit_times(run: &RunEnd<'_>, canonical: &[OpId]) -> (Vec<u64>, Vec<String>) {
    let mut times = vec![0; canonical.len()];
    let mut violations = Vec::new();
    for r in &run.replicas {
        for (pos, (id, t)) in r.committed.iter().zip(r.commit_times).enumerate() {
            if *t == 0 || canonical.get(pos) != Some(id) {
                continue;
            }
            match times[pos] {
                0 => times[pos] = *t,
                known if known != *t => violations.push(format!(
                    "replica {} gives position {pos} ({id}) commit time {t}, another {known}",
                    r.id
                )),
                _ => {}
            }
        }
    }
    let mut last = (0, None);
    for (pos, t) in times.iter().enumerate().filter(|(_, t)| **t != 0) {
        if *t <= last.0 {
            violations.push(format!(
                "commit time {t} at position {pos} is not above {} at {:?}",
                last.0, last.1
            ));
        }
        last = (*t, Some(pos));
    }
    (times, violations)
}

/// Every snapshot view against the committed order cut at its time:
/// `canonical` with its commit `times` (0: unknown; such a position
/// counts as before every later known time), replayed from
/// `initial_state` with the calls `run.broadcast` holds.
pub fn check_snapshot_views(
    run: &RunEnd<'_>,
    canonical: &[OpId],
    times: &[u64],
    initial_state: &BTreeMap<Bytes, Bytes>,
) -> Vec<String> {
    let mut reads: Vec<(u64, usize)> = Vec::new();
    for (i, r) in run.history.ops.iter().enumerate() {
        for v in r.views.iter().filter(|v| v.kind == ViewKind::Snapshot) {
            reads.push((v.time, i));
        }
    }
    if reads.is_empty() {
        return Vec::new();
    }
    reads.sort_unstable();
    // The last position with a known time at or below each read's time:
    // everything up to it is in the snapshot.
    let mut state = initial_state.clone();
    let mut applied = 0; // positions of `canonical` applied to `state`
    let mut violations = Vec::new();
    for (time, i) in reads {
        // Known times increase along the order: stop at the first above.
        let mut upto = applied;
        for pos in applied..canonical.len() {
            match times.get(pos).copied().unwrap_or(0) {
                0 => {}
                t if t <= time => upto = pos + 1,
                _ => break,
            }
        }
        for (pos, id) in canonical.iter().enumerate().take(upto).skip(applied) {
            let Some(call) = run.broadcast.get(id) else {
                continue;
            };
            let mut e =
                run.registry
                    .execute(&MapSnapshot(state.clone()), TxnLimits::default(), call);
            if run.keeps_versions {
                // Version records, as the replicas advance them: at the
                // op's revision, its 1-based place in the order.
                let records = creek_exec::versions::record_writes(
                    creek_procs::versions::meta_key,
                    &e.writes,
                    pos as u64 + 1,
                    |k| state.get(k).cloned(),
                );
                e.writes.extend(records);
            }
            for (k, v) in e.writes {
                match v {
                    Some(v) => state.insert(k, v),
                    None => state.remove(&k),
                };
            }
        }
        applied = applied.max(upto);
        let r = &run.history.ops[i];
        let expected = run
            .registry
            .execute(&MapSnapshot(state.clone()), TxnLimits::default(), &r.call)
            .outcome;
        let Some(seen) = r.views.iter().find(|v| v.kind == ViewKind::Snapshot) else {
            continue;
        };
        if seen.outcome != expected {
            violations.push(format!(
                "snapshot view of {} by client {} at time {time} is {:?}; the committed \
                 state at that time ({applied} ops) gives {:?}",
                r.call.name, r.client, seen.outcome, expected
            ));
        }
    }
    violations
}

/// No client reads an older state than one it read: every snapshot view's
/// time is at least the largest time of any snapshot view, or final view
/// of a read-only call, the same client received before it invoked that
/// op.
pub fn check_read_times(history: &History, registry: &Registry) -> Vec<String> {
    let mut by_client: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, r) in history.ops.iter().enumerate() {
        if r.client != SETUP_CLIENT {
            by_client.entry(r.client).or_default().push(i);
        }
    }
    let mut violations = Vec::new();
    for (client, ops) in by_client {
        // (received at, time) of every timed view of this client.
        let read_only = |call: &ProcCall| {
            registry
                .check(call, &TxnLimits::default())
                .is_ok_and(|c| c.read_only)
        };
        let mut seen: Vec<(u64, u64)> = ops
            .iter()
            .map(|&i| &history.ops[i])
            .flat_map(|r| {
                let reads = read_only(&r.call);
                r.views
                    .iter()
                    .filter(move |v| v.kind == ViewKind::Snapshot || (reads && v.kind.is_final()))
            })
            .filter(|v| v.time != 0)
            .map(|v| (v.at_us, v.time))
            .collect();
        seen.sort_unstable();
        let mut best = Vec::with_capacity(seen.len());
        let mut max = 0;
        for (_, t) in &seen {
            max = max.max(*t);
            best.push(max);
        }
        for &i in &ops {
            let r = &history.ops[i];
            let Some(v) = r.views.iter().find(|v| v.kind == ViewKind::Snapshot) else {
                continue;
            };
            let before = seen.partition_point(|(at, _)| *at < r.invoked_at_us);
            let floor = before.checked_sub(1).map_or(0, |j| best[j]);
            if v.time < floor {
                violations.push(format!(
                    "client {client} read {} at time {} from replica {}, after it had seen \
                     time {floor}: it went back in time",
                    r.call.name, v.time, r.replica
                ));
            }
        }
    }
    violations
}

/// Every snapshot `kv.get` a client returned (`returned`, by request id
/// (client, seq)) shows the client's own last acknowledged `kv.put` of the
/// key — unless the client had learnt, by the time the snapshot view came,
/// that the write committed at or before the view's time (then it shows
/// the view's result). A read whose client's last write of the key was
/// another call (its effect unknown to the client), unacknowledged, or
/// lost with its origin is not judged.
pub fn check_read_your_writes(
    history: &History,
    returned: &BTreeMap<(u64, u64), Outcome>,
) -> Vec<String> {
    let first_key = |call: &ProcCall| match decode_args(&call.args).ok()?.into_iter().next() {
        Some(Value::Bytes(k)) => Some(k),
        _ => None,
    };
    let writes = ["kv.put", "kv.delete", "kv.incr", "kv.cas"];
    // Each client's writes of each key, in invocation order.
    let mut by_key: BTreeMap<(u32, Bytes), Vec<usize>> = BTreeMap::new();
    let mut reads = Vec::new();
    for (i, r) in history.ops.iter().enumerate() {
        let Some(key) = first_key(&r.call) else {
            continue;
        };
        if writes.contains(&r.call.name.as_ref()) {
            by_key.entry((r.client, key)).or_default().push(i);
        } else if r.call.name.as_ref() == "kv.get" {
            reads.push((i, key));
        }
    }
    let mut violations = Vec::new();
    for (i, key) in reads {
        let r = &history.ops[i];
        let (Some(rid), Some(snap)) = (
            r.call.request_id,
            r.views.iter().find(|v| v.kind == ViewKind::Snapshot),
        ) else {
            continue;
        };
        let Some(got) = returned.get(&(rid.client, rid.seq)) else {
            continue;
        };
        let mine = by_key.get(&(r.client, key.clone()));
        let last = mine.and_then(|w| {
            w.iter()
                .rev()
                .find(|&&j| history.ops[j].invoked_at_us < r.invoked_at_us)
        });
        let Some(&j) = last else {
            continue;
        };
        let w = &history.ops[j];
        let acked = w.views.first().is_some_and(|v| v.at_us <= r.invoked_at_us);
        if w.call.name.as_ref() != "kv.put" || !acked || w.origin_crashed || w.origin_left || w.lost
        {
            continue;
        }
        let written = match decode_args(&w.call.args)
            .ok()
            .and_then(|a| a.into_iter().nth(1))
        {
            Some(v @ Value::Bytes(_)) => v,
            _ => continue,
        };
        let own: Outcome = Ok(written.encode());
        let fin = w.views.iter().find(|v| v.kind.is_final());
        let covered = fin.is_some_and(|f| f.time <= snap.time);
        let ok = match fin {
            // Known before the snapshot came: the snapshot holds it.
            Some(f) if f.at_us < snap.at_us && covered => *got == snap.outcome,
            // Learnt in the same instant: either is right.
            Some(f) if f.at_us == snap.at_us => *got == own || (covered && *got == snap.outcome),
            _ => *got == own,
        };
        if !ok {
            violations.push(format!(
                "client {} read {key:?} at snapshot time {} and got {got:?}; its own \
                 acknowledged kv.put of {written:?} (commit time {:?}) was not shown",
                r.client,
                snap.time,
                fin.map(|f| f.time),
            ));
            if violations.len() >= 10 {
                break;
            }
        }
    }
    violations
}
