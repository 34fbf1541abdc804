//! End-to-end: the snapshot level on a 3-replica cluster of real `creek
//! serve` processes (docs/snapshot-reads.md). A snapshot read shows the
//! committed state only, keeps answering where strong ops cannot (a replica
//! cut off in a minority), and a client reads its own strong writes after
//! the replica it wrote through is killed (crates/creek/tests/
//! client_cache_e2e.rs has its weak writes, and reads across shards).

mod common;

use std::time::Duration;

use common::*;
use creek_client::{Levels, ViewKind};
use creek_proto::pb::Level;
use tokio_stream::StreamExt;

const T: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_reads_show_committed_state_only_and_keep_answering_in_a_minority() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(T).await;
    let minority = (leader + 1) % 3;
    let mut cm = cluster.client(minority).await;
    call(
        &mut cm,
        req("kv.put", &[b("k"), b("1")], &[Level::Strong]),
        T,
    )
    .await
    .expect("seed");
    cluster.isolate(minority, true).await;

    // A weak write in the minority: tentative there, and never committed
    // while cut off.
    let v = call(&mut cm, req("kv.put", &[b("k"), b("2")], &[Level::Weak]), T)
        .await
        .expect("weak");
    assert_eq!(v, vec![Got::Preliminary(Ok(Value::Nil))]);
    // A weak read sees it; a snapshot read answers at once with the
    // committed state, which does not hold it.
    let weak = call(&mut cm, req("kv.get", &[b("k")], &[Level::Weak]), T)
        .await
        .expect("weak read");
    assert_eq!(result(&weak), Ok(Value::Bytes("2".into())));
    let snap = call(
        &mut cm,
        req("kv.get", &[b("k")], &[Level::Snapshot]),
        Duration::from_secs(2),
    )
    .await
    .expect("a snapshot read answers in the minority");
    match snap.as_slice() {
        [Got::Snapshot(Ok(v), time)] => {
            assert_eq!(*v, Value::Bytes("1".into()));
            assert!(*time > 0, "the view names its commit time");
        }
        other => panic!("one snapshot view, got {other:?}"),
    }
    // A write at the snapshot level is refused by name.
    let e = call(
        &mut cm,
        req("kv.put", &[b("k"), b("3")], &[Level::Snapshot]),
        T,
    )
    .await
    .expect_err("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("read-only"), "{e:?}");

    // Healed, the weak write commits, and a snapshot read shows it.
    cluster.isolate(minority, false).await;
    let deadline = std::time::Instant::now() + T;
    loop {
        let snap = call(&mut cm, req("kv.get", &[b("k")], &[Level::Snapshot]), T)
            .await
            .expect("snapshot read");
        if result(&snap) == Ok(Value::Bytes("2".into())) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the healed write never showed: {snap:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reads_its_strong_writes_after_its_replica_is_killed() {
    let mut cluster = Cluster::start(3).await;
    let addrs: Vec<String> = cluster.clients.iter().map(ToString::to_string).collect();
    let client = creek_client::Client::connect(addrs).await.expect("connect");
    let mut written = 0;
    for i in 0..20 {
        let put = client
            .invoke(
                "kv.put",
                vec![Value::from("mine"), Value::from(i.to_string().as_str())],
                Levels::Strong,
            )
            .await
            .expect("put");
        let view = put.final_view().await.expect("final");
        // A write raises the dependency time, not the read time.
        assert!(view.time > written && client.dep_time() >= view.time);
        written = view.time;
    }
    // The replica it talks to (the first that answered) dies.
    cluster.kill(0);
    let read = client
        .invoke("kv.get", vec![Value::from("mine")], Levels::Snapshot)
        .await
        .expect("snapshot read after failover");
    let view = read.final_view().await.expect("snapshot view");
    assert_eq!(view.kind, ViewKind::Snapshot);
    // From the snapshot, or from the client cache if the snapshot is
    // older than the write.
    assert_eq!(view.outcome, Ok(Value::from("19")));
    assert!(client.read_time() >= view.time);

    // All three views of a read, in order.
    let all = client
        .invoke("kv.get", vec![Value::from("mine")], Levels::All)
        .await
        .expect("all three");
    let mut views = all.views();
    let mut kinds = Vec::new();
    while let Some(v) = views.next().await {
        kinds.push(v.expect("view").kind);
    }
    assert_eq!(
        kinds,
        [
            ViewKind::Preliminary,
            ViewKind::Snapshot,
            ViewKind::Confirmed
        ]
    );
}
