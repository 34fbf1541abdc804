//! `creek bench cab`: conditional atomic broadcast and gossip on the
//! in-process network with a fixed link latency, measuring what issue 3
//! asks: consensus bytes per strong op, gossip bytes per op, and how many
//! message delays a strong op needs from CAB-cast to delivery at its origin,
//! at the leader and at another replica.

use creek_core::{OpId, Request, Views};
use creek_harness::testnet::{NetConfig, TestNet};
use creek_sim::rng::Rng;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

/// Arguments of `creek bench cab`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Replicas.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// One-way link latency, microseconds (fixed, so delays are exact).
    #[arg(long, default_value_t = 250)]
    latency_us: u64,
    /// Strong ops per second during the load phase (all replicas together).
    #[arg(long, default_value_t = 20_000)]
    strong_rate: u64,
    /// Weak ops per second during the load phase.
    #[arg(long, default_value_t = 20_000)]
    weak_rate: u64,
    /// Length of the load phase, milliseconds of virtual time.
    #[arg(long, default_value_t = 1_000)]
    duration_ms: u64,
    /// PRNG seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

fn incr(key: u64) -> ProcCall {
    let k = Value::from(format!("k{key}").as_str());
    ProcCall::new("kv.incr", encode_args(&[k, Value::Int(1)]))
}

/// Message delays from cast to delivery, for `samples` sequential strong ops
/// cast at `origin`: (at origin, at leader, at another replica).
fn delays(net: &mut TestNet, origin: usize, leader: usize, samples: u64) -> (f64, f64, f64) {
    let other = (0..net.len())
        .find(|&i| i != origin && i != leader)
        .unwrap_or(leader);
    let latency = net_latency(net);
    let mut sums = (0.0, 0.0, 0.0);
    for i in 0..samples {
        let t0 = net.now_us;
        let Some(creek_core::ExecKey::Op(id)) = net.invoke(
            origin,
            Request {
                call: incr(i),
                strong: true,
                views: Views::STRONG,
                read_time: 0,
                read_exact: false,
                read_revision: None,
            },
        ) else {
            continue;
        };
        net.run_for(20 * latency);
        let at = |node: usize, net: &TestNet| {
            net.committed_at
                .get(&(node, id))
                .map_or(f64::NAN, |t| (t - t0) as f64 / latency as f64)
        };
        sums.0 += at(origin, net);
        sums.1 += at(leader, net);
        sums.2 += at(other, net);
    }
    let n = samples as f64;
    (sums.0 / n, sums.1 / n, sums.2 / n)
}

fn net_latency(net: &TestNet) -> u64 {
    net.latency_us()
}

/// Run the benchmark.
pub fn run(args: &Args) -> Result<(), String> {
    if !(3..=9).contains(&args.replicas) {
        return Err("--replicas must be between 3 and 9".into());
    }
    if args.latency_us == 0 || args.duration_ms == 0 {
        return Err("--latency-us and --duration-ms must be positive".into());
    }
    let config = NetConfig {
        latency_us: (args.latency_us, args.latency_us),
        seed: args.seed,
        ..NetConfig::default()
    };
    // The default stabilizer (50 ms) stays quiet under load and commits the
    // weak ops left after the last strong op.
    let mut net = TestNet::new(args.replicas, config, |_| {});
    if let Some(n) = net.node_mut(0) {
        n.campaign();
    }
    net.run_for(50_000);
    let leader = net.leader().ok_or("no leader elected")?;
    let follower = (0..net.len()).find(|&i| i != leader).unwrap_or(0);

    let from_leader = delays(&mut net, leader, leader, 20);
    let from_follower = delays(&mut net, follower, leader, 20);

    // Idle cost: heartbeats only.
    let idle_before = net.traffic;
    net.run_for(1_000_000);
    let idle_cab_bytes_per_sec = net.traffic.cab_bytes - idle_before.cab_bytes;

    // Load: Poisson-free fixed-rate arrivals spread over the replicas.
    let before = net.traffic;
    let mut rng = Rng::new(args.seed);
    let total_rate = args.strong_rate + args.weak_rate;
    let step_us = (1_000_000 / total_rate.max(1)).max(1);
    let end = net.now_us + args.duration_ms * 1_000;
    let (mut strong, mut weak) = (0u64, 0u64);
    let mut cast: Vec<OpId> = Vec::new();
    while net.now_us < end {
        let at = rng.range(0, net.len() as u64 - 1) as usize;
        let is_strong = rng.range(0, total_rate - 1) < args.strong_rate;
        let request = Request {
            call: incr(rng.range(0, 9_999)),
            strong: is_strong,
            views: if is_strong {
                Views::STRONG
            } else {
                Views::WEAK
            },
            read_time: 0,
            read_exact: false,
            read_revision: None,
        };
        if let Some(creek_core::ExecKey::Op(id)) = net.invoke(at, request) {
            cast.push(id);
            if is_strong {
                strong += 1
            } else {
                weak += 1
            }
        }
        net.run_for(step_us);
    }
    net.run_for(200_000);
    let load = net.traffic;
    let cab_bytes = load.cab_bytes - before.cab_bytes;
    let gossip_bytes = load.gossip_bytes - before.gossip_bytes;
    let secs = (args.duration_ms as f64 + 200.0) / 1000.0;
    let heartbeat_share = idle_cab_bytes_per_sec as f64 * secs;
    let lists = net.committed_lists();
    let agreed = lists.windows(2).all(|w| w[0].1 == w[1].1);
    let all_committed = lists
        .first()
        .is_some_and(|(_, l)| cast.iter().all(|id| l.contains(id)));
    let stats: Vec<_> = (0..net.len())
        .filter_map(|i| net.node(i).map(|n| n.cab_stats()))
        .collect();
    let entries: u64 = stats.iter().map(|s| s.entries_proposed).sum();
    let ids: u64 = stats.iter().map(|s| s.ids_proposed).sum();
    let report = serde_json::json!({
        "bench": "cab",
        "replicas": args.replicas,
        "latency_us": args.latency_us,
        "message_delays": {
            "cast_at_leader": { "at_origin": from_leader.0, "at_other_replica": from_leader.2 },
            "cast_at_follower": { "at_origin": from_follower.0, "at_leader": from_follower.1, "at_other_replica": from_follower.2 },
        },
        "load": {
            "strong_ops": strong,
            "weak_ops": weak,
            "duration_ms": args.duration_ms,
            "consensus_bytes_per_strong_op": cab_bytes as f64 / strong.max(1) as f64,
            "consensus_bytes_per_strong_op_excluding_heartbeats": (cab_bytes as f64 - heartbeat_share).max(0.0) / strong.max(1) as f64,
            "gossip_bytes_per_op": gossip_bytes as f64 / (strong + weak).max(1) as f64,
            "ids_per_entry": ids as f64 / entries.max(1) as f64,
            "all_committed_everywhere": all_committed,
            "identical_committed_lists": agreed,
        },
        "idle_consensus_bytes_per_sec": idle_cab_bytes_per_sec,
        "seed": args.seed,
    });
    crate::print_report(&report, args.json)?;
    if !(agreed && all_committed) {
        return Err("the run did not converge: replicas disagree or ops were not committed".into());
    }
    Ok(())
}
