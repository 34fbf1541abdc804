//! Limits that hold over real `creek serve` processes (docs/security.md,
//! "Limits"): an oversized request gets RESOURCE_EXHAUSTED whichever layer
//! measures it, and changes nothing; an oversized key is refused before the
//! op is ordered; a replica paused (SIGSTOP) while its clients' calls time
//! out serves the same client connection once resumed (SIGCONT).

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use common::{b, call, req, result, strong_get, Cluster, Value};
use creek_proto::pb::Level;
use tonic::Code;

fn invoked(counters: &HashMap<String, u64>) -> u64 {
    counters.get("invoked_weak").copied().unwrap_or(0)
        + counters.get("invoked_strong").copied().unwrap_or(0)
}

async fn counters(cluster: &Cluster) -> HashMap<String, u64> {
    cluster.status(0).await.expect("status").counters
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_and_keys_are_refused_before_anything_happens() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    let before = invoked(&counters(&cluster).await);

    // 1.5 MB is over max_request_bytes (1 MiB) and under the decoder's
    // limit: the service refuses it. 10 MB is over the decoder's limit: the
    // same code, and the message names the setting either way.
    for (size, who) in [(1_500_000, "service"), (10_000_000, "decoder")] {
        let value = Value::Bytes(vec![b'x'; size].into());
        let r = req("kv.put", &[b("big"), value], &[Level::Strong]);
        let refused = call(&mut c, r, Duration::from_secs(10))
            .await
            .expect_err("an oversized request is refused");
        assert_eq!(
            refused.code(),
            Code::ResourceExhausted,
            "{who}: {refused:?}"
        );
        assert!(
            refused.message().contains("max_request_bytes"),
            "{who}: {}",
            refused.message()
        );
    }

    // A key one byte over key_bytes_max (4096 by default), in a strong op:
    // refused at invoke with the limit named, never ordered.
    let long_key = Value::Bytes(vec![b'k'; 4097].into());
    let r = req("kv.put", &[long_key, b("v")], &[Level::Strong]);
    let refused = call(&mut c, r, Duration::from_secs(10))
        .await
        .expect_err("an oversized key is refused");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().contains("key_bytes_max"),
        "{}",
        refused.message()
    );

    // Nothing was invoked, so nothing was ordered or applied; the same
    // connection still serves.
    assert_eq!(invoked(&counters(&cluster).await), before);
    assert_eq!(strong_get(&cluster, 0, "big").await, Value::Nil);
    let ok = call(
        &mut c,
        req("kv.put", &[b("small"), b("v")], &[Level::Strong]),
        Duration::from_secs(10),
    )
    .await
    .expect("a small request on the same connection");
    assert_eq!(result(&ok), Ok(Value::Nil));
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// Waits until every thread of `pid` is stopped: `kill -STOP` returns once
/// the signal is queued, and a thread running on another core may still
/// answer a call before it takes the signal.
fn wait_stopped(pid: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("list threads");
        let all_stopped = tasks.flatten().all(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // The state follows the command name, which is in parentheses.
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            matches!(state, Some(Some('T' | 't')) | None)
        });
        if all_stopped {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{pid} did not stop");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_keeps_its_clients_when_it_resumes() {
    let cluster = Cluster::start(1).await;
    let c = cluster.client(0).await;
    let pid = cluster.pid(0).expect("running");
    // Warm the connection: every call below shares it.
    let mut first = c.clone();
    call(
        &mut first,
        req("kv.put", &[b("k"), b("0")], &[Level::Weak]),
        Duration::from_secs(10),
    )
    .await
    .expect("before the pause");

    signal(pid, "-STOP");
    wait_stopped(pid);
    // 40 calls time out during the pause: each is reset by the client
    // before the replica could accept it (HTTP/2's default bound is 20).
    let calls: Vec<_> = (0..40)
        .map(|i| {
            let mut c = c.clone();
            tokio::spawn(async move {
                let r = req("kv.put", &[b("k"), b(&i.to_string())], &[Level::Weak]);
                call(&mut c, r, Duration::from_millis(200)).await
            })
        })
        .collect();
    for task in calls {
        let outcome = task.await.expect("task");
        assert!(
            outcome.is_err(),
            "a call answered while the replica was stopped"
        );
    }
    signal(pid, "-CONT");

    // The same connection serves again.
    let mut after = c.clone();
    let views = call(
        &mut after,
        req("kv.get", &[b("k")], &[Level::Strong]),
        Duration::from_secs(10),
    )
    .await
    .expect("the resumed replica serves the same connection");
    assert!(result(&views).is_ok(), "{views:?}");
    let views = call(
        &mut after,
        req("kv.put", &[b("k"), b("after")], &[Level::Strong]),
        Duration::from_secs(10),
    )
    .await
    .expect("and keeps serving it");
    assert_eq!(result(&views), Ok(Value::Nil));
}
