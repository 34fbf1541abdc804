//! The peer port under a bare TCP client on loopback (docs/security.md,
//! "The peer port"): connections past the cap are closed, a declared
//! 16 MiB frame costs what was sent and is closed after the read timeout,
//! and an op injected under a replica's own id is refused, logged and
//! counted by that replica without the group losing its later ops.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{b, call, free_addr, req, result, rss_kib, strong_get, Cluster, Value};
use creek_core::{Op, OpId, ReplicaId, Timestamp};
use creek_proto::pb;
use creek_types::ProcCall;
use creek_wire::{GossipMessage, Limits, PeerMessage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The 8-byte transport hello of replica `from` to replica `to`.
fn hello(from: u16, to: u16) -> Vec<u8> {
    let mut h = Vec::from(*b"CRK");
    h.push(creek_wire::WIRE_VERSION);
    h.extend_from_slice(&from.to_be_bytes());
    h.extend_from_slice(&to.to_be_bytes());
    h
}

/// Whether `s` is closed by the other end within `within` (`false`: still
/// open, nothing to read).
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(within, s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Waits until replica `i`'s log contains `needle`.
async fn log_shows(cluster: &Cluster, i: usize, needle: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let log = std::fs::read_to_string(cluster.log_path(i)).unwrap_or_default();
        if log.contains(needle) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Connections past `peer_connections_max` are closed as soon as they are
/// accepted, with a WARN naming the cap; the group keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_connections_past_the_cap_are_closed_and_logged() {
    let cluster = Cluster::start_with(3, |c| c.peer_connections_max = 6).await;
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(
            TcpStream::connect(cluster.peers[0])
                .await
                .expect("peer port"),
        );
    }
    let mut closed = 0;
    for s in &mut held {
        if closed_within(s, Duration::from_millis(500)).await {
            closed += 1;
        }
    }
    // Two slots are the real peers'; at most four are ours.
    assert!(closed >= 16, "only {closed} of 20 connections were closed");
    assert!(
        log_shows(
            &cluster,
            0,
            "peer_connections_max = 6",
            Duration::from_secs(5)
        )
        .await,
        "the refusal names the cap; log:\n{}",
        cluster.log_tail(0)
    );
    drop(held);
    let mut c = cluster.client(1).await;
    let views = call(
        &mut c,
        req("kv.put", &[b("k"), b("v")], &[pb::Level::Strong]),
        Duration::from_secs(20),
    )
    .await
    .expect("a strong put still commits");
    assert!(result(&views).is_ok());
}

/// Six connections that each declare a 16 MiB frame and send one byte of
/// it: the replica's memory grows by far less than 6 × 16 MiB, and each
/// connection is closed once `peer_read_timeout_ms` has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_16_mib_frame_costs_what_was_sent_and_times_out() {
    let cluster = Cluster::start_with(3, |c| c.peer_read_timeout_ms = 1_000).await;
    let pid = cluster.pid(0).expect("replica 1 runs");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss_kib(pid);
    let mut socks = Vec::new();
    for _ in 0..6 {
        let mut s = TcpStream::connect(cluster.peers[0])
            .await
            .expect("peer port");
        let mut bytes = hello(2, 1);
        bytes.extend_from_slice(&(16u32 << 20).to_be_bytes());
        bytes.push(0);
        s.write_all(&bytes).await.expect("write");
        socks.push(s);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = rss_kib(pid);
    assert!(
        during < before + 16 * 1024,
        "RSS went from {before} KiB to {during} KiB for six 1-byte frames"
    );
    for s in &mut socks {
        assert!(
            closed_within(s, Duration::from_secs(5)).await,
            "a frame unfinished past the read timeout closes the connection"
        );
    }
    assert!(
        log_shows(
            &cluster,
            0,
            "peer_read_timeout_ms = 1000",
            Duration::from_secs(5)
        )
        .await,
        "the close is logged; log:\n{}",
        cluster.log_tail(0)
    );
}

/// `GET /metrics` from `addr`, the body.
async fn metrics(addr: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).await.expect("metrics port");
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    s.write_all(request.as_bytes()).await.expect("write");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body).await;
    body
}

/// The attack of a spoofed replica 2: a bare client says hello to replica
/// 1 as replica 2 and sends it a weak `kv.put("injected", …)` under the
/// next seq of replica 2. Replica 2 notices (a peer's digest claims its
/// ops past the last it issued), logs an ERROR, counts it, never gives that
/// seq to an op of its own: its next write reaches the group; and the
/// committed orders of the replicas never differ (each a prefix of the
/// longest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_op_injected_under_a_replicas_id_is_refused_logged_and_counted() {
    let metrics_addr = free_addr();
    let cluster = Cluster::prepare_with(3, |_| {});
    cluster.configure(1, |c| c.metrics_addr = Some(metrics_addr));
    let mut cluster = cluster;
    cluster.spawn_all();
    cluster.wait_for_leader(Duration::from_secs(20)).await;
    assert_eq!(strong_get(&cluster, 1, "warm").await, Value::Nil);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = cluster.status(1).await.expect("replica 2 answers");
    let issued = status.counters["own_last_issued_seq"];

    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_micros() as u64;
    let op = Arc::new(Op {
        id: OpId::new(ReplicaId(2), issued + 1),
        timestamp: Timestamp::new(now_us, 0),
        call: ProcCall::new(
            "kv.put",
            creek_types::value::encode_args(&[b("injected"), b("forged")]),
        ),
        strong: false,
        causal_context: None,
    });
    let frame = creek_wire::encode(
        &PeerMessage::Gossip(GossipMessage::Ops(vec![op])),
        &Limits::default(),
    )
    .expect("encodes");
    let mut s = TcpStream::connect(cluster.peers[0])
        .await
        .expect("peer port");
    let mut bytes = hello(2, 1);
    bytes.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&frame);
    s.write_all(&bytes).await.expect("write");

    assert!(
        log_shows(
            &cluster,
            1,
            "past the last one it issued",
            Duration::from_secs(10)
        )
        .await,
        "replica 2 logs the refusal; log:\n{}",
        cluster.log_tail(1)
    );
    let log = std::fs::read_to_string(cluster.log_path(1)).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("refused: peer")),
        "at ERROR"
    );
    let counted = cluster.status(1).await.expect("status").counters["own_origin_refused"];
    assert!(counted >= 1, "the status counts it");
    // The gauges follow the node's counters a moment later.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let metric = loop {
        let body = metrics(metrics_addr).await;
        let metric = body
            .lines()
            .find_map(|l| l.strip_prefix("creek_own_origin_refused "))
            .and_then(|v| v.trim().parse::<u64>().ok());
        if metric.is_some_and(|m| m >= 1) || std::time::Instant::now() > deadline {
            break metric;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        metric.is_some_and(|m| m >= 1),
        "creek_own_origin_refused counts it: {metric:?}"
    );
    // Replica 2 never took the forged op.
    let mut c2 = cluster.client(1).await;
    let views = call(
        &mut c2,
        req("kv.get", &[b("injected")], &[pb::Level::Weak]),
        Duration::from_secs(5),
    )
    .await
    .expect("weak get");
    assert_eq!(result(&views), Ok(Value::Nil));
    // Its next write does not reuse the forged seq: the group gets it.
    let views = call(
        &mut c2,
        req("kv.put", &[b("after"), b("2")], &[pb::Level::Weak]),
        Duration::from_secs(5),
    )
    .await
    .expect("weak put");
    assert!(result(&views).is_ok());
    // (Gossip brings it to replica 1 shortly after the weak answer.)
    let deadline = Instant::now() + Duration::from_secs(20);
    while strong_get(&cluster, 0, "after").await != b("2") {
        assert!(
            Instant::now() < deadline,
            "replica 2's write after the attack never reached replica 1"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The committed orders never differ: each is a prefix of the longest.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut orders = Vec::new();
    for i in 0..3 {
        let mut admin = pb::admin_client::AdminClient::new(cluster.channel(i).await.expect("dial"));
        let reply = admin
            .committed(pb::CommittedRequest {
                from: 0,
                max: 100_000,
            })
            .await
            .expect("committed")
            .into_inner();
        let ids: Vec<(u32, u64)> = reply.ids.iter().map(|r| (r.origin, r.seq)).collect();
        orders.push((reply.start, ids));
    }
    // Position p of replica i's order is orders[i].1[p - orders[i].0].
    for i in 0..3 {
        for j in 0..3 {
            let ((si, a), (sj, b)) = (&orders[i], &orders[j]);
            let from = (*si).max(*sj);
            let to = (si + a.len() as u64).min(sj + b.len() as u64);
            for p in from..to {
                assert_eq!(
                    a[(p - si) as usize],
                    b[(p - sj) as usize],
                    "replicas {} and {} commit different ops at position {p}",
                    i + 1,
                    j + 1
                );
            }
        }
    }
}
