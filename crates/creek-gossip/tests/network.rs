//! 3–5 gossip rooms on a seeded lossy network (drops, duplicates, delays
//! that reorder, partitions that heal): after healing, every node delivers
//! every op exactly once in per-origin FIFO order, and once everything is
//! committed the payloads go.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{below, chance, Faults, Net};
use creek_core::ReplicaId;
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Scenario {
    n: u16,
    seed: u64,
    faults: Faults,
    cast_pct: u32,
    ops_per_message_max: usize,
    reply_messages_max: usize,
    out_of_order_max: usize,
    partitions: usize,
    fault_ticks: u64,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        3u16..=5,
        any::<u64>(),
        (0u32..=40, 0u32..=25, 0u64..=6),
        5u32..=60,
        (2usize..=16, 1usize..=4, 0usize..=32),
        0usize..=3,
        20u64..=80,
    )
        .prop_map(
            |(
                n,
                seed,
                (drop_pct, dup_pct, delay_max),
                cast_pct,
                (opm, rmm, ooo),
                partitions,
                fault_ticks,
            )| {
                Scenario {
                    n,
                    seed,
                    faults: Faults {
                        drop_pct,
                        dup_pct,
                        delay_max,
                    },
                    cast_pct,
                    ops_per_message_max: opm,
                    reply_messages_max: rmm,
                    out_of_order_max: ooo,
                    partitions,
                    fault_ticks,
                }
            },
        )
}

/// A partition: from `start` for `len` ticks, `side` is cut off from the rest.
struct Partition {
    start: u64,
    len: u64,
    side: BTreeSet<ReplicaId>,
}

/// Runs the scenario: faulty phase, heal, converge. Returns the net.
fn run(s: &Scenario) -> Net {
    let mut net = Net::new(s.n, s.seed, |c| {
        c.ops_per_message_max = s.ops_per_message_max;
        c.reply_messages_max = s.reply_messages_max;
        c.out_of_order_max = s.out_of_order_max;
    });
    net.faults = s.faults;
    let replicas = net.replicas();
    let parts: Vec<Partition> = (0..s.partitions)
        .map(|_| Partition {
            start: below(&mut net.rng, s.fault_ticks),
            len: 5 + below(&mut net.rng, 30),
            side: replicas
                .iter()
                .copied()
                .filter(|_| chance(&mut net.rng, 50))
                .collect(),
        })
        .collect();
    for t in 0..s.fault_ticks {
        net.cut.clear();
        for p in parts.iter().filter(|p| p.start <= t && t < p.start + p.len) {
            for &a in &p.side {
                for &b in replicas.iter().filter(|b| !p.side.contains(b)) {
                    net.cut.insert((a, b));
                    net.cut.insert((b, a));
                }
            }
        }
        for &r in &replicas {
            if chance(&mut net.rng, s.cast_pct) {
                for _ in 0..=below(&mut net.rng, 3) {
                    net.broadcast(r);
                }
            }
        }
        net.step();
    }
    net.heal();
    let mut limit = 20_000;
    while !net.converged() {
        assert!(limit > 0, "no convergence after healing");
        limit -= 1;
        net.step();
    }
    net
}

/// Each node delivered each other origin's ops exactly once, in seq order.
fn check_logs(net: &Net) {
    for (&r, log) in &net.log {
        let mut per_origin: BTreeMap<ReplicaId, Vec<u64>> = BTreeMap::new();
        for id in log {
            per_origin.entry(id.origin).or_default().push(id.seq);
        }
        for (&o, &n) in &net.cast {
            let got = per_origin.remove(&o).unwrap_or_default();
            let want: Vec<u64> = if o == r {
                Vec::new()
            } else {
                (1..=n).collect()
            };
            assert_eq!(got, want, "{r} delivered from {o}");
        }
        assert!(per_origin.is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn lossy_network_converges_exactly_once_in_fifo_order(s in scenario()) {
        let mut net = run(&s);
        check_logs(&net);
        if std::env::var_os("GOSSIP_DEBUG").is_some() {
            let total: u64 = net.cast.values().sum();
            let st: Vec<_> = net.nodes.values().map(|g| g.stats()).collect();
            eprintln!("{s:?} ops={total} ticks={} stats0={:?}", net.now, st[0]);
        }
        // Quiet network: nothing more is delivered (the FIFO check in
        // `Net::record` would catch a repeat).
        for _ in 0..25 {
            net.step();
        }
        check_logs(&net);
        // GC: commit everything everywhere; after digests go round, no
        // payload is held and nothing is buffered.
        net.commit_all();
        for _ in 0..25 {
            net.step();
        }
        for (r, g) in &net.nodes {
            let st = g.stats();
            prop_assert_eq!(st.payloads_held, 0, "{} holds payloads", r);
            prop_assert_eq!(st.buffered, 0, "{} buffers ops", r);
            prop_assert!(st.gc_dropped > 0 || net.cast.values().all(|&n| n == 0));
        }
    }
}

#[test]
fn same_seed_same_run() {
    let s = Scenario {
        n: 4,
        seed: 7,
        faults: Faults {
            drop_pct: 30,
            dup_pct: 20,
            delay_max: 5,
        },
        cast_pct: 40,
        ops_per_message_max: 3,
        reply_messages_max: 2,
        out_of_order_max: 4,
        partitions: 2,
        fault_ticks: 60,
    };
    let (a, b) = (run(&s), run(&s));
    check_logs(&a);
    assert_eq!(a.log, b.log);
    assert_eq!(a.now, b.now);
    let stats = |n: &Net| n.nodes.values().map(|g| g.stats()).collect::<Vec<_>>();
    assert_eq!(stats(&a), stats(&b));
}

#[test]
fn a_silent_peer_holds_payloads_back() {
    let mut net = Net::new(3, 1, |_| {});
    for _ in 0..5 {
        net.broadcast(ReplicaId(1));
    }
    // r3 receives everything but never answers or reports.
    net.cut.insert((ReplicaId(3), ReplicaId(1)));
    net.cut.insert((ReplicaId(3), ReplicaId(2)));
    for _ in 0..30 {
        net.step();
    }
    assert!(net.converged());
    net.commit_all();
    for _ in 0..30 {
        net.step();
    }
    let held = |net: &Net, r: u16| net.nodes[&ReplicaId(r)].stats().payloads_held;
    assert_eq!((held(&net, 1), held(&net, 2)), (5, 5));
    // r3 comes back: its digests release everything.
    net.heal();
    for _ in 0..30 {
        net.step();
    }
    assert_eq!(net.payloads_held(), 0);
}
