//! What moves of keys cost the clients (`creek sim --moves N`): each
//! move's steps in time, and the latency of the clients' strong ops
//! outside moves, during them on keys that stay, and during them on the
//! keys that move.

use std::collections::BTreeMap;

use serde_json::{json, Value as Json};

use crate::bench::{percentile, percentiles};
use crate::sim::{is_mover, MoveTimes, Outcome};
use creek_check::history::OpRecord;
use creek_procs::moves::copy::moving;
use creek_types::value::{decode_args, Value};

/// The keys an op names: its byte arguments, and the bytes in list
/// arguments (a `kv.mget`'s keys).
fn keys_of(op: &OpRecord) -> Vec<bytes::Bytes> {
    let Ok(args) = decode_args(&op.call.args) else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    for a in args {
        match a {
            Value::Bytes(b) => keys.push(b),
            Value::List(items) => keys.extend(items.into_iter().filter_map(|v| match v {
                Value::Bytes(b) => Some(b),
                _ => None,
            })),
            _ => {}
        }
    }
    keys
}

/// The `moves` part of a run's report: `null` for a run without moves.
pub fn report(out: &Outcome) -> Json {
    if out.move_times.is_empty() {
        return json!(null);
    }
    let span = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        _ => None,
    };
    let collect = |f: &dyn Fn(&MoveTimes) -> Option<u64>| -> Vec<u64> {
        out.move_times.iter().filter_map(f).collect()
    };
    let ended = |t: &MoveTimes| t.ended_us.unwrap_or(out.duration_us).max(t.begun_us);
    // The clients' strong ops (not the movers'): with their final view's
    // latency, invoked outside every move, or during one on keys that
    // stay or on keys that move (those refused as moved, applied nowhere
    // and sent again by the client, are counted apart).
    let (mut outside, mut staying, mut on_moving) = (Vec::new(), Vec::new(), Vec::new());
    // The staying keys' ops again, by the shard they ran on (the move's
    // source, its target, or another) and the step the move was at when
    // they were invoked: where a tail during moves comes from.
    let mut staying_by: BTreeMap<(&str, &str), Vec<u64>> = BTreeMap::new();
    let (mut moving_without_final, mut moving_refused) = (0u64, 0u64);
    for op in &out.history.ops {
        if !op.strong || is_mover(op.client) || op.invoked_at_us > out.duration_us {
            continue;
        }
        let during = out
            .move_times
            .iter()
            .find(|t| (t.begun_us..ended(t)).contains(&op.invoked_at_us));
        let latency = op
            .final_view()
            .map(|v| v.at_us.saturating_sub(op.invoked_at_us));
        let Some(t) = during else {
            outside.extend(latency.map(|l| (op.invoked_at_us, l)));
            continue;
        };
        if keys_of(op).iter().any(|k| moving(&t.the_move, k)) {
            let refused = op.final_view().is_some_and(|v| {
                v.outcome
                    .as_ref()
                    .is_err_and(|a| a.0.starts_with(creek_procs::ownership::WRONG_SHARD))
            });
            match latency {
                _ if refused => moving_refused += 1,
                Some(l) => on_moving.push(l),
                None => moving_without_final += 1,
            }
        } else if let Some(l) = latency {
            staying.push(l);
            let shard = (op.replica / out.per_shard.max(1)) as u16;
            let role = match shard {
                s if s == t.the_move.from.0 => "source",
                s if s == t.the_move.to.0 => "target",
                _ => "other",
            };
            staying_by
                .entry((role, step_at(t, op.invoked_at_us)))
                .or_default()
                .push(l);
        }
    }
    // The same windows shifted away from the moves, as a control: ops
    // come in bursts and a slow fsync or election slows all of a few
    // milliseconds at once, so the p99 of a few short windows swings more
    // than that of the whole run.
    let shifted: Vec<Json> = [-150i64, -100, -50, 50, 100, 150]
        .into_iter()
        .map(|shift_ms| {
            let shift = |t: u64| t.saturating_add_signed(shift_ms * 1_000);
            let ls: Vec<u64> = outside
                .iter()
                .filter(|(at, _)| {
                    out.move_times
                        .iter()
                        .any(|t| (shift(t.begun_us)..shift(ended(t))).contains(at))
                })
                .map(|&(_, l)| l)
                .collect();
            json!({"shift_ms": shift_ms, "latency_us": percentiles(ls)})
        })
        .collect();
    let outside: Vec<u64> = outside.into_iter().map(|(_, l)| l).collect();
    let outside_p99 = {
        let mut sorted = outside.clone();
        sorted.sort_unstable();
        percentile(&sorted, 0.99)
    };
    let staying_by: serde_json::Map<String, Json> = staying_by
        .into_iter()
        .map(|((role, step), ls)| {
            let over = ls.iter().filter(|&&l| l > outside_p99).count();
            let mut p = percentiles(ls);
            p["over_outside_p99"] = json!(over);
            (format!("{role}/{step}"), p)
        })
        .collect();
    let moving_us: u64 = out.move_times.iter().map(|t| ended(t) - t.begun_us).sum();
    let during_ops = staying.len() + on_moving.len() + moving_refused as usize;
    let per_s = |ops: usize, us: u64| ops as f64 * 1e6 / us.max(1) as f64;
    let throughput = json!({
        "outside_moves": per_s(outside.len(), out.duration_us.saturating_sub(moving_us)),
        "during_moves": per_s(during_ops, moving_us),
    });
    json!({
        "count": out.move_times.len(),
        "ended": out.move_times.iter().filter(|t| t.ended_us.is_some()).count(),
        "us": {
            "whole": percentiles(collect(&|t| span(Some(t.begun_us), t.ended_us))),
            "copy": percentiles(collect(&|t| span(Some(t.begun_us), t.switching_us))),
            "switch_to_target_serving": percentiles(collect(&|t| span(t.switching_us, t.cleaning_us))),
            "no_shard_executes": percentiles(collect(&|t| span(t.adopting_us, t.cleaning_us))),
        },
        "share_of_run_moving": moving_us as f64 / out.duration_us.max(1) as f64,
        "strong_final_views_per_s": throughput,
        "strong_latency_us": {
            "outside_moves": percentiles(outside),
            "during_moves_keys_staying": percentiles(staying),
            "during_moves_keys_moving": percentiles(on_moving),
            "during_moves_keys_staying_by_shard_and_step": staying_by,
            "outside_moves_in_the_moves_windows_shifted": shifted,
        },
        "strong_ops_on_moving_keys_without_final_view": moving_without_final,
        "strong_ops_on_moving_keys_refused_as_moved": moving_refused,
    })
}

/// The step move `t` was at, at time `at`: copying (until the switch was
/// asked), switching (until the directory switched), releasing (until the
/// source released), adopting (until the target executes the keys), or
/// cleaning (the source's copies deleted, until the move ends).
fn step_at(t: &MoveTimes, at: u64) -> &'static str {
    let reached = |step: Option<u64>| step.is_some_and(|s| s <= at);
    if reached(t.cleaning_us) {
        "cleaning"
    } else if reached(t.adopting_us) {
        "adopting"
    } else if reached(t.releasing_us) {
        "releasing"
    } else if reached(t.switching_us) {
        "switching"
    } else {
        "copying"
    }
}
