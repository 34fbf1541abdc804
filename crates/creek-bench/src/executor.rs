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
//!
//! With `--procedure FILE:NAME` the same stream calls a user procedure and
//! its built-in twin instead (`executor_procs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use creek_core::{Config, Effect, Op, OpId, Replica, ReplicaId, Request, Timestamp, Views};
use creek_procs::builtins::NOOP;
use creek_procs::Registry;
use creek_sim::rng::Rng;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

/// Arguments of `creek bench executor`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Ops in the stream.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) ops: u64,
    /// Share of ops arriving out of timestamp order, 0..=1.
    #[arg(long, default_value_t = 0.1)]
    pub(crate) reorder: f64,
    /// Share of ops touching the shared hot key, 0..=1.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) overlap: f64,
    /// Records in the key space; op i's own key is `k{i mod keys}`, so ops on
    /// their own keys never share one within a commit window.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) keys: u64,
    /// Commit (strong no-op + CAB delivery) after this many ops.
    #[arg(long, default_value_t = 100)]
    pub(crate) commit_every: u64,
    /// PRNG seed.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    pub(crate) json: bool,
    /// Instead of the kv.incr stream: a user procedure `FILE:NAME` against
    /// its built-in twin, through the same replica path (repeatable; see
    /// `bench_executor_procs`). `(bytes, int)` procedures are measured
    /// against `kv.incr`, `(bytes)` ones against a 10-key read-modify-write
    /// built-in.
    #[arg(long)]
    pub(crate) procedure: Vec<String>,
    /// With `--procedure`: the file whose registration (compile and check)
    /// is timed.
    #[arg(long, default_value = "examples/procedures/bench_200_lines.creek")]
    pub(crate) register_file: String,
    /// With `--procedure`: rounds per variant, alternating; the best counts.
    #[arg(long, default_value_t = 3)]
    pub(crate) rounds: u32,
}

const ORIGINS: u64 = 8;
const LATE_BY: usize = 4;

pub(crate) struct Stream {
    ops: Vec<Arc<Op>>,
    hot: Vec<bool>,
    late: usize,
}

/// Ops in timestamp order, then the delivery order with late arrivals;
/// `call` makes each op's call from its key.
pub(crate) fn build(args: &Args, call: &dyn Fn(Value) -> ProcCall) -> Stream {
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
        let id = OpId {
            origin,
            seq: i / ORIGINS + 1,
        };
        let timestamp = Timestamp::new(1_000 + i, 0);
        by_ts.push(Arc::new(Op::new(id, timestamp, call(key), false, None)));
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
    strong_call(replica, ProcCall::new(NOOP, encode_args(&[])), now_us)
}

/// Invoke `call` strong at `replica`, deliver it by CAB and execute
/// everything: it and all delivered before it commit.
pub(crate) fn strong_call(
    replica: &mut Replica,
    call: ProcCall,
    now_us: u64,
) -> Result<(), String> {
    let request = Request {
        call,
        strong: true,
        views: Views::STRONG,
        read_time: 0,
        read_exact: false,
        read_revision: None,
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

/// A single replica with `registry`, stabilising at once.
pub(crate) fn replica(registry: Registry) -> Result<Replica, String> {
    let config = Config {
        stabilize_after_us: 0,
        ..Config::for_replica(ReplicaId(1))
    };
    Replica::new(config, Arc::new(registry)).map_err(|e| e.to_string())
}

/// What [`drive`] measured.
pub(crate) struct Driven {
    pub(crate) elapsed: Duration,
    forced: u64,
    versions_max: u64,
}

/// Deliver `stream` to `replica`, executing as it goes and committing every
/// `--commit-every` ops and at the end; timed.
pub(crate) fn drive(args: &Args, stream: &Stream, replica: &mut Replica) -> Result<Driven, String> {
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
            commit(replica, op.timestamp.physical_us())?;
            tentative_hot_after.clear();
            versions_max = versions_max.max(replica.exec_counters().versions_alive);
        }
    }
    commit(replica, u64::MAX >> 13)?;
    Ok(Driven {
        elapsed: start.elapsed(),
        forced,
        versions_max,
    })
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
    if !args.procedure.is_empty() {
        return crate::executor_procs::run(args);
    }
    let stream = build(args, &|key| {
        ProcCall::new("kv.incr", encode_args(&[key, Value::Int(1)]))
    });
    let mut replica = replica(Registry::with_builtins())?;
    let driven = drive(args, &stream, &mut replica)?;
    let elapsed = driven.elapsed;
    let (forced, versions_max) = (driven.forced, driven.versions_max);

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
