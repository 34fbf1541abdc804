//! Client sessions over separate `creek serve` processes: retries answered
//! from their entries, acknowledged entries forgotten, old entries expired
//! by the leader, and a retry of an expired request refused with a clear
//! error that changes nothing.

mod common;

use std::time::{Duration, Instant};

use common::{b, call, req, result, strong_get, Cluster, Value};
use creek_proto::pb::{self, Level};

const BOTH: &[Level] = &[Level::Weak, Level::Strong];
const T: Duration = Duration::from_secs(20);

fn incr(client: u64, seq: u64, acked: Vec<u64>) -> pb::InvokeRequest {
    let mut r = req("kv.incr", &[b("n"), Value::Int(1)], BOTH);
    r.client_id = client;
    r.request_seq = seq;
    r.acked = acked;
    r
}

/// Each replica's value of status counter `name`.
async fn counters(cluster: &Cluster, name: &str) -> Vec<u64> {
    let mut out = Vec::new();
    for i in 0..cluster.len() {
        let s = cluster.status(i).await.expect("status");
        out.push(s.counters.get(name).copied().unwrap_or(0));
    }
    out
}

/// Wait until every replica's counter `name` satisfies `ok`.
async fn wait_counters(cluster: &Cluster, name: &str, ok: impl Fn(u64) -> bool) -> Vec<u64> {
    let deadline = Instant::now() + T;
    loop {
        let now = counters(cluster, name).await;
        if now.iter().all(|&v| ok(v)) {
            return now;
        }
        assert!(Instant::now() < deadline, "{name} stayed at {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_acknowledged_expired_and_refuse_old_retries() {
    let cluster = Cluster::start_with(3, |c| c.session_ttl_secs = 2).await;
    let mut c = cluster.client(0).await;

    // Client 7 sends two increments and acknowledges nothing.
    for seq in 1..=2 {
        let views = call(&mut c, incr(7, seq, vec![]), T).await.expect("incr");
        assert_eq!(result(&views), Ok(Value::Int(seq as i64)));
    }
    // Its retry, at another replica, is answered from the entry.
    let mut c2 = cluster.client(1).await;
    let again = call(&mut c2, incr(7, 2, vec![]), T).await.expect("retry");
    assert_eq!(result(&again), Ok(Value::Int(2)));

    // Client 8 acknowledges each answer with its next request: only its
    // last entry stays.
    for seq in 1..=20 {
        let acked = if seq > 1 { vec![seq - 1] } else { vec![] };
        call(&mut c, incr(8, seq, acked), T).await.expect("incr");
    }
    // A read acknowledges too: its acknowledgement waits for the client's
    // next write at that replica.
    let mut read = req("kv.get", &[b("n")], &[Level::Weak]);
    read.client_id = 8;
    read.request_seq = 21;
    read.acked = vec![20];
    call(&mut c, read, T).await.expect("read");
    call(&mut c, incr(8, 22, vec![21]), T).await.expect("incr");
    assert_eq!(
        strong_get(&cluster, 2, "n").await,
        Value::Bytes("23".into())
    );
    // Client 7's two entries and client 8's last (a scan runs every TTL/8):
    // not all 24.
    wait_counters(&cluster, "session_entries", |v| v == 3).await;

    // Two TTLs later the leader has expired every entry, everywhere.
    wait_counters(&cluster, "session_entries", |v| v == 0).await;
    wait_counters(&cluster, "session_expired_clients", |v| v >= 1).await;
    let ordered: u64 = counters(&cluster, "session_expiry_ops").await.iter().sum();
    assert!(ordered >= 1);

    // A retry of an expired request is refused, at any replica, and
    // changes nothing.
    for i in 0..3 {
        let mut ci = cluster.client(i).await;
        let views = call(&mut ci, incr(7, 1, vec![]), T).await.expect("stream");
        let err = result(&views).expect_err("an expired retry must not run");
        assert!(err.starts_with("session expired"), "{err}");
    }
    assert_eq!(
        strong_get(&cluster, 0, "n").await,
        Value::Bytes("23".into())
    );
    // The client's new requests run.
    let views = call(&mut c, incr(7, 3, vec![]), T).await.expect("incr");
    assert_eq!(result(&views), Ok(Value::Int(24)));

    // The expiry procedure is the replicas' own.
    let internal = req("creek.sessions.expire", &[], BOTH);
    let err = call(&mut c, internal, T).await.expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("internal"), "{}", err.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_keeps_its_session_small() {
    // A TTL far beyond the test: entries leave by acknowledgement only (the
    // count is refreshed every TTL/8).
    let cluster = Cluster::start_with(3, |c| c.session_ttl_secs = 40).await;
    let addrs: Vec<String> = cluster.clients.iter().map(|a| a.to_string()).collect();
    let client = creek_client::Client::connect(addrs).await.expect("connect");
    for i in 0..200u32 {
        let key = format!("k{}", i % 10);
        let put = client.kv_put(&key, "v").await.expect("put");
        put.final_view().await.expect("final");
    }
    // Each write acknowledged the ones before it: a handful of entries
    // remain (those whose acknowledgement is still on its way), not 200.
    wait_counters(&cluster, "session_entries", |v| (1..=4).contains(&v)).await;
}
