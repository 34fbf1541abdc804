//! End-to-end over real `creek serve` processes: a replica whose data
//! directory was lost never costs acknowledged data. It comes back empty
//! under its old id, learns from its peers that the cluster exists without
//! it, and stays out (no vote, no acknowledgement, no views); once a
//! majority is lost, strong ops are refused with "quorum lost data" instead
//! of an empty majority electing a leader, and a full restart keeps every
//! acknowledged increment.

mod common;

use std::time::{Duration, Instant};

use common::*;
use creek_proto::pb::Level;
use tonic::Code;

const STRONG: &[Level] = &[Level::Strong];
const WEAK: &[Level] = &[Level::Weak];
const T: Duration = Duration::from_secs(20);

/// A strong increment of `n` at replica `i`, with its final view.
async fn strong_incr(cluster: &Cluster, i: usize) -> Result<(), tonic::Status> {
    let mut c = cluster.client(i).await;
    let views = call(&mut c, req("kv.incr", &[b("n"), Value::Int(1)], STRONG), T).await?;
    assert!(
        views.iter().any(|v| matches!(v, Got::Final(Ok(_)))),
        "{views:?}"
    );
    Ok(())
}

/// `n` read weakly at replica `i` (0 when absent).
async fn weak_n(cluster: &Cluster, i: usize) -> i64 {
    let mut c = cluster.client(i).await;
    let views = call(&mut c, req("kv.get", &[b("n")], WEAK), T)
        .await
        .expect("weak get");
    match result(&views) {
        Ok(Value::Int(n)) => n,
        Ok(Value::Nil) => 0,
        Ok(Value::Bytes(s)) => std::str::from_utf8(&s)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("n is {s:?}")),
        other => panic!("n is {other:?}"),
    }
}

/// Wait until replica `i`'s status satisfies `ok`.
async fn wait_status(
    cluster: &Cluster,
    i: usize,
    what: &str,
    ok: impl Fn(&creek_proto::pb::StatusReply) -> bool,
) -> creek_proto::pb::StatusReply {
    let deadline = Instant::now() + T;
    loop {
        if let Some(s) = cluster.status(i).await {
            if ok(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!("replica {}: {what} not reached: {s:?}", i + 1);
            }
        } else if Instant::now() > deadline {
            panic!("replica {} does not answer", i + 1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Kill replica `i`, delete its data directory and start it again.
async fn wipe(cluster: &mut Cluster, i: usize) {
    cluster.kill(i);
    std::fs::remove_dir_all(cluster.dir.join(format!("r{}", i + 1)))
        .expect("delete the data directory");
    cluster.restart(i).await;
}

fn log_of(cluster: &Cluster, i: usize) -> String {
    std::fs::read_to_string(cluster.dir.join(format!("r{}.log", i + 1))).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_data_directories_never_cost_acknowledged_ops() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(T).await;
    let mut acked = 0;
    for k in 0..30 {
        strong_incr(&cluster, k % 3).await.expect("strong incr");
        acked += 1;
    }

    // A follower loses its disk: it finds out and stays out.
    let first = (leader + 1) % 3;
    wipe(&mut cluster, first).await;
    let s = wait_status(&cluster, first, "lost", |s| s.role == "lost").await;
    assert!(s.standing_detail.contains("lost its data"), "{s:?}");
    assert_eq!(s.committed, 0);
    let err = strong_incr(&cluster, first)
        .await
        .expect_err("a lost replica serves nothing");
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("lost its data"), "{err:?}");
    let mut c = cluster.client(first).await;
    let err = call(&mut c, req("kv.get", &[b("n")], WEAK), T)
        .await
        .expect_err("no weak views from an empty state either");
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        log_of(&cluster, first)
            .lines()
            .any(|l| l.contains("ERROR") && l.contains("lost its data")),
        "no ERROR line in the lost replica's log"
    );
    let survivors: Vec<usize> = (0..3).filter(|i| *i != first).collect();
    for &i in &survivors {
        let first_id = first as u32 + 1;
        wait_status(&cluster, i, "knows the lost peer", |s| {
            s.lost_peers.contains(&first_id) && !s.quorum_lost
        })
        .await;
    }
    // The other two serve on, and the lost one never leads or votes itself
    // into a term of its own.
    for k in 0..10 {
        strong_incr(&cluster, survivors[k % 2])
            .await
            .expect("strong incr");
        acked += 1;
    }
    let s = wait_status(&cluster, first, "still lost", |s| s.role == "lost").await;
    assert_eq!(s.term, 0, "a lost replica took part in an election: {s:?}");

    // A second disk lost: a majority. The last replica with data refuses
    // strong ops with a clear error instead of following an empty leader.
    let second = survivors[0];
    let last = survivors[1];
    wipe(&mut cluster, second).await;
    wait_status(&cluster, second, "lost", |s| s.role == "lost").await;
    wait_status(&cluster, last, "quorum lost", |s| s.quorum_lost).await;
    let err = strong_incr(&cluster, last)
        .await
        .expect_err("no strong op without a majority holding data");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("quorum lost data"), "{err:?}");
    assert_eq!(weak_n(&cluster, last).await, acked);

    // Everyone restarts: the lost replicas stay lost (nothing elects an
    // empty leader), and the acknowledged increments are all there.
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.restart(i).await;
    }
    for i in [first, second] {
        let s = wait_status(&cluster, i, "lost after a restart", |s| s.role == "lost").await;
        assert_eq!(s.committed, 0);
    }
    wait_status(&cluster, last, "quorum lost after a restart", |s| {
        s.quorum_lost
    })
    .await;
    assert_eq!(weak_n(&cluster, last).await, acked);
    let s = cluster.status(last).await.expect("status");
    assert_ne!(s.role, "leader", "{s:?}");
}
