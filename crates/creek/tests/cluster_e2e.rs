//! End-to-end: a 3-replica cluster of real `creek serve` processes over real
//! sockets. Each test bounds its waits; processes and data directories are
//! cleaned up when the cluster is dropped.

mod common;

use std::time::{Duration, Instant};

use common::*;
use creek_proto::pb::{self, Level};
use tonic::Code;

const WEAK: &[Level] = &[Level::Weak];
const STRONG: &[Level] = &[Level::Strong];
const BOTH: &[Level] = &[Level::Weak, Level::Strong];
const T: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_and_strong_ops_share_keys_and_views_arrive_in_order() {
    let cluster = Cluster::start(3).await;
    let mut c1 = cluster.client(0).await;
    let mut c2 = cluster.client(1).await;

    // A strong put: a preliminary view, then a confirmation (same result).
    let v = call(&mut c1, req("kv.put", &[b("k"), b("v1")], BOTH), T)
        .await
        .expect("put");
    assert_eq!(
        v,
        vec![Got::Preliminary(Ok(Value::Nil)), Got::Confirmed],
        "{v:?}"
    );

    // A weak op: one preliminary view, nothing more.
    let v = call(&mut c2, req("kv.incr", &[b("n"), Value::Int(5)], WEAK), T)
        .await
        .expect("incr");
    assert_eq!(v, vec![Got::Preliminary(Ok(Value::Int(5)))]);

    // A weak op asking for its final view too.
    let mut r = req("kv.incr", &[b("n"), Value::Int(1)], WEAK);
    r.weak_final = true;
    let v = call(&mut c2, r, T).await.expect("incr");
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(matches!(v[0], Got::Preliminary(Ok(Value::Int(6)))), "{v:?}");
    assert!(matches!(v[1], Got::Confirmed | Got::Final(_)), "{v:?}");

    // Strong-only: the final view alone; the weak ops of both replicas are
    // in it.
    let v = call(&mut c1, req("kv.get", &[b("n")], STRONG), T)
        .await
        .expect("get");
    assert_eq!(v, vec![Got::Final(Ok(Value::Bytes("6".into())))]);
    assert_eq!(strong_get(&cluster, 2, "k").await, b("v1"));

    // An abort is a view, not an error.
    let v = call(&mut c1, req("queue.dequeue", &[b("empty-queue")], BOTH), T).await;
    assert!(v.is_ok(), "{v:?}");

    // The benchmark workloads' procedures are served too.
    let load = req(
        "ycsb.load",
        &[Value::Int(0), Value::Int(10), Value::Int(8)],
        STRONG,
    );
    call(&mut c1, load, T).await.expect("ycsb.load");
    match strong_get(&cluster, 1, "user7").await {
        Value::Bytes(v) => assert_eq!(v.len(), 8),
        other => panic!("user7 holds {other:?}"),
    }

    // Status answers with a role and the committed length.
    let s = cluster.status(0).await.expect("status");
    assert!(s.committed >= 3, "{s:?}");
    assert!(["leader", "follower"].contains(&s.role.as_str()), "{s:?}");
    assert_eq!(s.client_addrs.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_errors_and_change_nothing() {
    let cluster = Cluster::start(3).await;
    let mut c = cluster.client(0).await;
    let before = cluster.status(0).await.expect("status");

    let e = call(&mut c, req("no.such.proc", &[], BOTH), T)
        .await
        .expect_err("unknown");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("no.such.proc"), "{e:?}");

    let e = call(&mut c, req("kv.put", &[b("only-key")], BOTH), T)
        .await
        .expect_err("arity");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    let mut r = req("kv.put", &[b("k")], BOTH);
    r.args.push(pb::Value { kind: None });
    let e = call(&mut c, r, T).await.expect_err("empty value");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    let r = pb::InvokeRequest {
        levels: vec![9],
        ..req("kv.get", &[b("k")], &[])
    };
    let e = call(&mut c, r, T).await.expect_err("bad level");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    let big = Value::Bytes(vec![7u8; 1_500_000].into());
    let e = call(&mut c, req("kv.put", &[b("big"), big], BOTH), T)
        .await
        .expect_err("oversized");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");

    let huge = Value::Bytes(vec![7u8; 3_000_000].into());
    let e = call(&mut c, req("kv.put", &[b("big"), huge], BOTH), T)
        .await
        .expect_err("oversized");
    assert!(
        matches!(e.code(), Code::ResourceExhausted | Code::OutOfRange),
        "{e:?}"
    );

    // Nothing was invoked, nothing changed, and the replica still serves.
    let after = cluster.status(0).await.expect("status");
    assert_eq!(
        before.counters.get("invoked_weak"),
        after.counters.get("invoked_weak")
    );
    assert_eq!(
        before.counters.get("invoked_strong"),
        after.counters.get("invoked_strong")
    );
    assert_eq!(strong_get(&cluster, 0, "big").await, Value::Nil);
    assert_eq!(strong_get(&cluster, 1, "k").await, Value::Nil);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_with_a_request_id_apply_once() {
    let cluster = Cluster::start(3).await;
    let mut c = cluster.client(0).await;
    let mut r = req("kv.incr", &[b("once"), Value::Int(10)], BOTH);
    r.client_id = 42;
    r.request_seq = 7;
    let first = call(&mut c, r.clone(), T).await.expect("first");
    assert_eq!(result(&first), Ok(Value::Int(10)));
    // The same request again, at another replica (a failover retry).
    let mut c2 = cluster.client(1).await;
    let again = call(&mut c2, r, T).await.expect("retry");
    assert_eq!(result(&again), Ok(Value::Int(10)), "{again:?}");
    assert_eq!(
        strong_get(&cluster, 2, "once").await,
        Value::Bytes("10".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_partition_keeps_weak_ops_and_stalls_strong_ones_until_healed() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(T).await;
    let minority = (leader + 1) % 3;
    let majority = (leader + 2) % 3;
    let mut cm = cluster.client(minority).await;
    let mut cj = cluster.client(majority).await;
    call(&mut cj, req("kv.put", &[b("x"), b("0")], STRONG), T)
        .await
        .expect("seed");
    // Let the seed reach the minority replica before cutting it off.
    tokio::time::sleep(Duration::from_millis(300)).await;

    cluster.isolate(minority, true).await;

    // Weak ops keep answering in the minority.
    let v = call(&mut cm, req("kv.incr", &[b("w"), Value::Int(1)], WEAK), T)
        .await
        .expect("weak");
    assert_eq!(v, vec![Got::Preliminary(Ok(Value::Int(1)))]);

    // A strong op there gives its preliminary view and then stalls: its
    // deadline passes with no final view.
    let e = call(
        &mut cm,
        req("kv.incr", &[b("x"), Value::Int(100)], BOTH),
        Duration::from_millis(800),
    )
    .await
    .expect_err("no final view in the minority");
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");

    // Another strong op in the minority, started before the heal: it must
    // complete once the partition heals.
    let cm2 = cluster.client(minority).await;
    let pending = tokio::spawn(async move {
        let mut cm2 = cm2;
        call(
            &mut cm2,
            req("kv.incr", &[b("x"), Value::Int(1000)], BOTH),
            Duration::from_secs(30),
        )
        .await
    });

    // The majority commits strong ops meanwhile.
    for _ in 0..3 {
        let v = call(&mut cj, req("kv.incr", &[b("x"), Value::Int(1)], BOTH), T)
            .await
            .expect("majority");
        assert!(
            matches!(v.last(), Some(Got::Confirmed | Got::Final(_))),
            "{v:?}"
        );
    }
    assert!(
        !pending.is_finished(),
        "a strong op completed inside the minority"
    );

    cluster.isolate(minority, false).await;
    let views = pending.await.expect("join").expect("completes after heal");
    // Its first preliminary view saw no majority op (0 + 100 + 1000); once
    // healed its result changes (a strong op gets a new preliminary view
    // whenever its tentative result changes), and the stable result counts
    // the majority's three increments.
    assert_eq!(
        views.first(),
        Some(&Got::Preliminary(Ok(Value::Int(1100)))),
        "{views:?}"
    );
    assert_eq!(result(&views), Ok(Value::Int(1103)), "{views:?}");
    assert!(
        matches!(views.last(), Some(Got::Final(_) | Got::Confirmed)),
        "{views:?}"
    );

    // Every replica converges on the same committed value. The timed-out op
    // (+100) was accepted before its deadline, so it commits too.
    let want = Value::Int(1103);
    let deadline = Instant::now() + T;
    for i in 0..3 {
        loop {
            let got = strong_get(&cluster, i, "x").await;
            let got = match got {
                Value::Bytes(b) => {
                    Value::Int(std::str::from_utf8(&b).expect("utf8").parse().expect("int"))
                }
                v => v,
            };
            if got == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {i} has {got:?}, want {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(
        strong_get(&cluster, majority, "w").await,
        Value::Bytes("1".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_mid_load_and_a_replica_restarted_from_disk_lose_nothing() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(T).await;
    let origin = (leader + 1) % 3;
    let mut c = cluster.client(origin).await;

    // Load: strong puts; every acknowledged (final-view) one must survive.
    let mut acked = Vec::new();
    for i in 0..40 {
        if i == 15 {
            cluster.kill(leader); // SIGKILL the leader mid-load
        }
        let key = format!("key-{i}");
        let r = req("kv.put", &[b(&key), b(&i.to_string())], BOTH);
        if let Ok(v) = call(&mut c, r, Duration::from_secs(10)).await {
            if matches!(v.last(), Some(Got::Confirmed | Got::Final(_))) {
                acked.push((key, i));
            }
        }
    }
    // Strong ops kept completing after the leader died.
    assert!(
        acked.iter().filter(|(_, i)| *i >= 15).count() >= 20,
        "acked {}",
        acked.len()
    );

    // The killed leader restarts from its data directory and catches up.
    cluster.restart(leader).await;
    for (key, i) in &acked {
        assert_eq!(
            strong_get(&cluster, leader, key).await,
            b(&i.to_string()),
            "{key} at the restarted replica"
        );
    }

    // Now SIGKILL every replica at once and restart them all: nothing
    // acknowledged as stable is lost.
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.restart(i).await;
    }
    cluster.wait_for_leader(T).await;
    for i in 0..3 {
        for (key, v) in &acked {
            assert_eq!(
                strong_get(&cluster, i, key).await,
                b(&v.to_string()),
                "{key} at replica {i}"
            );
        }
    }
}

/// A leader stopped as an operator stops it (SIGTERM) hands its
/// leadership over before it exits: the moment it has exited, the other
/// two already follow a new leader of a later term — no election timeout
/// passes without one — and strong ops go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_on_purpose_hands_over_before_it_exits() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(T).await;
    let term = cluster.status(leader).await.expect("status").term;
    let status = cluster
        .stop(leader, Duration::from_secs(10))
        .expect("stop")
        .expect("it ran");
    assert!(status.success(), "a clean stop: {status}");
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    for &i in &others {
        let s = cluster.status(i).await.expect("status");
        assert!(
            s.term > term && s.leader != 0 && s.leader as usize != leader + 1,
            "replica {} follows a new leader at once: {s:?}",
            i + 1
        );
    }
    let log = std::fs::read_to_string(cluster.log_path(leader)).unwrap_or_default();
    assert!(log.contains("handing leadership over first"), "{log}");
    let mut c = cluster.client(others[0]).await;
    let r = req("kv.put", &[b("after"), b("stop")], STRONG);
    let views = call(&mut c, r, T)
        .await
        .expect("a strong op after the stop");
    assert!(matches!(views.last(), Some(Got::Final(Ok(_)))), "{views:?}");
}

/// Wide-area round trips, injected in the transport: with 120 ms of one-way
/// delay on every link (a 240 ms round trip, more than twice the configured
/// 100 ms election timeout), the group keeps or finds a leader, stretches
/// its consensus timing for the links it measures, and strong ops keep
/// completing, without any tuning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strong_ops_keep_completing_over_wide_area_round_trips() {
    let cluster = Cluster::start(3).await;
    cluster.delay_all(Duration::from_millis(120)).await;
    let mut c = cluster.client(0).await;
    let started = Instant::now();
    let mut done = 0;
    while done < 8 {
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "only {done} strong ops completed in 40 s"
        );
        let r = call(
            &mut c,
            req("kv.incr", &[b("wan"), Value::Int(1)], BOTH),
            Duration::from_secs(10),
        )
        .await;
        if r.is_ok() {
            done += 1;
        }
    }
    let leader = cluster.wait_for_leader(T).await;
    let s = cluster.status(leader).await.expect("status");
    let rtt = s.counters["peer_rtt_us"];
    let election = s.counters["election_timeout_ms"];
    // Measured at tick resolution (10 ms).
    assert!(rtt >= 230_000, "measured round trip {rtt} µs");
    assert!(
        election * 1000 >= 4 * rtt,
        "election timeout {election} ms for a {rtt} µs round trip"
    );
    // Once stretched, the leader holds: a few more strong ops, no new term.
    let term = s.term;
    for _ in 0..3 {
        call(
            &mut c,
            req("kv.incr", &[b("wan"), Value::Int(1)], BOTH),
            Duration::from_secs(10),
        )
        .await
        .expect("strong op over the slow links");
    }
    let s = cluster.status(leader).await.expect("status");
    assert_eq!(s.term, term, "the leader was lost on stable slow links");
}

/// `creek bench cluster` reports the stages of an op's path as the leader
/// timed them (`creek_op_stage_seconds`): a strong op is taken by the node
/// loop, made durable, committed and answered, in that order; a weak one is
/// executed before its payload is durable and before it is answered.
#[test]
fn the_cluster_benchmark_reports_the_stages_of_an_op_in_path_order() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_creek"))
        .args([
            "bench",
            "cluster",
            "--latency-ops",
            "100",
            "--clients",
            "1",
            "--seconds",
            "0.3",
            "--json",
        ])
        .output()
        .expect("creek bench cluster runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let stage = |level: &str, name: &str| {
        report[level]["stages_us"][name]
            .as_u64()
            .unwrap_or_else(|| panic!("no {level} {name} stage in {report}"))
    };
    let (invoked, persisted, committed) = (
        stage("strong", "invoked"),
        stage("strong", "persisted"),
        stage("strong", "committed"),
    );
    assert!(
        invoked <= persisted && persisted <= committed,
        "strong stages out of order: {}",
        report["strong"]["stages_us"]
    );
    assert!(committed <= stage("strong", "answered"));
    assert!(stage("weak", "invoked") <= stage("weak", "executed"));
    assert!(stage("weak", "executed") <= stage("weak", "persisted"));
    assert!(stage("weak", "executed") <= stage("weak", "answered"));
}
