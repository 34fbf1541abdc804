//! `creek bench executor`: one replica (core + multiversion executor) fed a
//! synthetic key-value stream by reliable broadcast from eight remote
//! origins, single-threaded.
//!
//! * `--reorder F`: a share F of ops arrives late, after the next four ops
//!   (which come from other origins, so per-origin FIFO holds).
//! * `--overlap F`: a share F of ops increments one shared hot key; the rest
//!   increment a key of their own (`--keys` records, reused round-robin).
//! * Every `--commit-every` ops the replica invokes a strong no-op and CAB
//!   delivers it, which commits everything delivered so far.
//!
//! Besides throughput it reports the execution ratio and the minimum ratio
//! the order forces: when a late op is inserted before already executed ops,
//! each of those that reads a key the late op writes must run again.

use std::sync::Arc;
use std::time::Instant;

use creek_core::{Config, Effect, Op, OpId, Replica, ReplicaId, Request, Timestamp, Views};
use creek_exec::builtins::NOOP;
use creek_exec::value::{encode_args, Value};
use creek_exec::{ProcCall, Registry};
use creek_sim::rng::Rng;

/// Arguments of `creek bench executor`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Ops in the stream.
    #[arg(long, default_value_t = 1_000_000)]
    ops: u64,
    /// Share of ops arriving out of timestamp order, 0..=1.
    #[arg(long, default_value_t = 0.1)]
    reorder: f64,
    /// Share of ops touching the shared hot key, 0..=1.
    #[arg(long, default_value_t = 0.0)]
    overlap: f64,
    /// Records in the key space; op i's own key is `k{i mod keys}`, so ops on
    /// their own keys never share one within a commit window.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Commit (strong no-op + CAB delivery) after this many ops.
    #[arg(long, default_value_t = 100)]
    commit_every: u64,
    /// PRNG seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    json: bool,
}

const ORIGINS: u64 = 8;
const LATE_BY: usize = 4;

struct Stream {
    ops: Vec<Arc<Op>>,
    hot: Vec<bool>,
    late: usize,
}

/// Ops in timestamp order, then the delivery order with late arrivals.
fn build(args: &Args) -> Stream {
    let mut rng = Rng::new(args.seed);
    let n = args.ops as usize;
    let mut by_ts = Vec::with_capacity(n);
    let mut hot = Vec::with_capacity(n);
    for i in 0..args.ops {
        let is_hot = rng.unit() > 1.0 - args.overlap;
        let key = if is_hot {
            Value::from("hot")
        } else {
            Value::from(format!("k{}", i % args.keys).as_str())
        };
        let origin = ReplicaId((i % ORIGINS) as u16 + 2);
        by_ts.push(Arc::new(Op {
            id: OpId {
                origin,
                seq: i / ORIGINS + 1,
            },
            timestamp: Timestamp::new(1_000 + i, 0),
            call: ProcCall::new("kv.incr", encode_args(&[key, Value::Int(1)])),
            strong: false,
            causal_context: None,
        }));
        hot.push(is_hot);
    }
    // A late op is delivered LATE_BY slots after its place: the ops that
    // overtake it come from other origins, so per-origin FIFO holds.
    let mut slots: Vec<(u64, usize)> = (0..n)
        .map(|j| {
            let delay = if rng.unit() > 1.0 - args.reorder {
                2 * LATE_BY as u64 + 1
            } else {
                0
            };
            (2 * j as u64 + delay, j)
        })
        .collect();
    slots.sort_unstable();
    let order: Vec<usize> = slots.into_iter().map(|(_, j)| j).collect();
    // Measured: ops delivered after some op with a later timestamp.
    let mut late = 0;
    let mut newest = None;
    for &j in &order {
        if newest.is_some_and(|m| m > j) {
            late += 1;
        }
        newest = newest.max(Some(j));
    }
    Stream {
        ops: order.iter().map(|&j| by_ts[j].clone()).collect(),
        hot: order.iter().map(|&j| hot[j]).collect(),
        late,
    }
}

fn commit(replica: &mut Replica, now_us: u64) -> Result<(), String> {
    let noop = ProcCall::new(NOOP, encode_args(&[]));
    let request = Request {
        call: noop,
        strong: true,
        views: Views::STRONG,
    };
    replica.invoke(request, now_us).map_err(|e| e.to_string())?;
    for effect in replica.take_effects() {
        if let Effect::CabCast(id) = effect {
            replica.cab_deliver(id);
        }
    }
    replica.execute_all();
    replica.take_effects();
    Ok(())
}

/// Run the benchmark.
pub fn run(args: &Args) -> Result<(), String> {
    if !(0.0..=1.0).contains(&args.reorder) || !(0.0..=1.0).contains(&args.overlap) {
        return Err("--reorder and --overlap must lie in 0..=1".into());
    }
    if args.ops == 0 || args.commit_every == 0 {
        return Err("--ops and --commit-every must be positive".into());
    }
    if args.keys < 2 * args.commit_every {
        return Err(
            "--keys must be at least twice --commit-every so own keys stay disjoint".into(),
        );
    }
    let stream = build(args);
    let config = Config {
        stabilize_after_us: 0,
        ..Config::for_replica(ReplicaId(1))
    };
    let mut replica =
        Replica::new(config, Arc::new(Registry::with_builtins())).map_err(|e| e.to_string())?;

    // The order forces a rerun of every executed, still tentative hot op that
    // a late hot op lands before.
    let mut forced = 0u64;
    let mut tentative_hot_after: Vec<(Timestamp, bool)> = Vec::new();
    let mut versions_max = 0;
    let start = Instant::now();
    for (i, op) in stream.ops.iter().enumerate() {
        if stream.hot[i] {
            forced += tentative_hot_after
                .iter()
                .filter(|(ts, h)| *h && *ts > op.timestamp)
                .count() as u64;
        }
        tentative_hot_after.push((op.timestamp, stream.hot[i]));
        replica.rb_deliver(op.clone());
        replica.execute_all();
        if (i as u64 + 1).is_multiple_of(args.commit_every) {
            commit(&mut replica, op.timestamp.physical_us())?;
            tentative_hot_after.clear();
            versions_max = versions_max.max(replica.exec_counters().versions_alive);
        }
    }
    commit(&mut replica, u64::MAX >> 13)?;
    let elapsed = start.elapsed();

    let c = replica.exec_counters();
    let p = replica.counters();
    let ops = args.ops;
    let strong = p.invoked_strong;
    let report = serde_json::json!({
        "bench": "executor",
        "ops": ops,
        "commits": strong,
        "ops_per_sec": (ops as f64 / elapsed.as_secs_f64()).round(),
        "elapsed_ms": elapsed.as_millis() as u64,
        "execution_ratio": c.executions.saturating_sub(strong) as f64 / ops as f64,
        "min_execution_ratio": (ops + forced) as f64 / ops as f64,
        "reorder_fraction": stream.late as f64 / ops as f64,
        "overlap_fraction": stream.hot.iter().filter(|h| **h).count() as f64 / ops as f64,
        "reexecutions": c.reexecutions,
        "forced_reexecutions": forced,
        "invalidations": c.invalidations,
        "conflicts": c.conflicts,
        "versions_alive_max": versions_max,
        "versions_alive_end": c.versions_alive,
        "committed": replica.committed().len(),
        "tentative_end": replica.tentative_len(),
        "seed": args.seed,
        "commit_every": args.commit_every,
        "keys": args.keys,
    });
    crate::print_report(&report, args.json)?;
    Ok(())
}
