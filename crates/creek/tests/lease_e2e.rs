//! End-to-end: leases (docs/api.md, "Leases") over real `creek serve`
//! processes — a lease kept alive through a leader kill, then left to
//! expire: its keys vanish no earlier than the holder's own measure of its
//! TTL, and at one position of the committed order on every replica; a
//! lock held by one client at a time while the leader is killed; and the
//! CLI's `creek lease`, `creek call --lease`, `creek lock`, with bad input
//! refused by name. Waits are bounded; processes are killed by pid and
//! their directory removed when a test ends.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{creek, Cluster};
use creek_client::{Client, Error, Levels, Lock, WatchOptions};
use creek_types::value::Value;
use tokio_stream::StreamExt as _;

/// The strong value of `key` through `client`.
async fn strong_value(client: &Client, key: &str) -> Option<Value> {
    let op = client
        .invoke("kv.get", vec![Value::from(key)], Levels::Strong)
        .await
        .ok()?;
    op.final_view().await.ok()?.outcome.ok()
}

/// The committed deletes of `keys` a watch at one replica reports: each
/// key with its position.
async fn deletes_seen(addr: String, keys: usize, within: Duration) -> Vec<(String, u64)> {
    let client = Client::connect([addr.clone()]).await.expect("connect");
    let mut watch = Box::pin(client.watch("ttl/", WatchOptions::default()));
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    while seen.len() < keys {
        let event = tokio::time::timeout_at(deadline, watch.next())
            .await
            .unwrap_or_else(|_| panic!("{addr}: deletes seen {seen:?} by the deadline"))
            .expect("the watch ends only on error")
            .expect("watch event");
        if event.value.is_none() && !event.tentative {
            seen.push((
                String::from_utf8_lossy(&event.key).into_owned(),
                event.position,
            ));
        }
    }
    seen.sort();
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_lease_survives_a_leader_kill_then_expires_at_one_position_everywhere() {
    let mut cluster = Cluster::start(3).await;
    let addrs: Vec<String> = cluster.clients.iter().map(|a| a.to_string()).collect();
    let client = Client::connect(addrs.clone()).await.expect("connect");
    let ttl = Duration::from_secs(3);
    let sent = Instant::now();
    let id = client.lease_grant(3).await.expect("grant");
    let keep = client.lease_keep_alive(id, ttl);
    for key in ["ttl/a", "ttl/b"] {
        let op = client
            .kv_put_with_lease(key, "v", id, Levels::Strong)
            .await
            .expect("put");
        op.final_view()
            .await
            .expect("final")
            .outcome
            .expect("put with a live lease");
    }
    assert!(keep.live_until() >= sent + ttl);

    // The leader dies; the client's keep-alives go on at the others, and
    // the lease outlives several TTLs.
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    cluster.kill(leader);
    let survivors: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    cluster.wait_for_leader(Duration::from_secs(10)).await;
    let watches: Vec<_> = survivors
        .iter()
        .map(|i| tokio::spawn(deletes_seen(addrs[*i].clone(), 2, Duration::from_secs(60))))
        .collect();
    tokio::time::sleep(ttl * 3).await;
    assert!(keep.is_live(), "lost: {:?}", keep.lost());
    assert_eq!(
        strong_value(&client, "ttl/a").await,
        Some(Value::from("v")),
        "the lease was kept alive through the failover"
    );

    // The holder stops renewing: the keys go, not before its own measure
    // of the lease ran out.
    let live_until = keep.live_until();
    drop(keep);
    let gone_by = Instant::now() + ttl + Duration::from_secs(10);
    loop {
        let a = strong_value(&client, "ttl/a").await;
        if a == Some(Value::Nil) {
            assert!(
                Instant::now() >= live_until,
                "the key vanished {:?} before the holder's lease ran out",
                live_until - Instant::now()
            );
            break;
        }
        assert!(Instant::now() < gone_by, "ttl/a still there: {a:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(strong_value(&client, "ttl/b").await, Some(Value::Nil));
    // Both keys at one position, the same on every surviving replica.
    let mut seen = Vec::new();
    for w in watches {
        seen.push(w.await.expect("watch task"));
    }
    assert_eq!(seen[0], seen[1], "replicas saw the expiry differently");
    assert_eq!(seen[0][0].1, seen[0][1].1, "one op deletes both: {seen:?}");
    // The killed replica, back, holds the same state.
    cluster.restart(leader).await;
    let back = Client::connect([addrs[leader].clone()])
        .await
        .expect("connect");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let op = back
            .invoke("kv.get", vec![Value::from("ttl/b")], Levels::Weak)
            .await;
        let value = match op {
            Ok(op) => op.final_view().await.ok().and_then(|v| v.outcome.ok()),
            Err(_) => None,
        };
        if value == Some(Value::Nil) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted replica still has ttl/b"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    match client.lease_keep_alive_once(id).await {
        Err(Error::LeaseNotFound(m)) => assert!(m.contains(&format!("lease {id} not found"))),
        other => panic!("keep-alive of an expired lease: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_held_by_one_client_at_a_time_while_the_leader_is_killed() {
    let mut cluster = Cluster::start(3).await;
    let addrs: Vec<String> = cluster.clients.iter().map(|a| a.to_string()).collect();
    // Each holder's time with the lock: from acquiring it to releasing it
    // (or to when it stopped knowing it held it).
    let held: Arc<Mutex<Vec<(Instant, Instant, usize)>>> = Arc::default();
    let stop = Instant::now() + Duration::from_secs(12);
    let mut tasks = Vec::new();
    for who in 0..3 {
        // Each client starts at another replica.
        let mut order = addrs.clone();
        order.rotate_left(who);
        let client = Client::connect(order).await.expect("connect");
        let held = held.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop {
                let lock = match Lock::acquire(
                    &client,
                    "e2e",
                    Duration::from_secs(2),
                    Duration::from_secs(20),
                )
                .await
                {
                    Ok(lock) => lock,
                    Err(e) if e.is_unavailable() => continue,
                    Err(Error::DeadlineExceeded(_)) => continue,
                    Err(e) => panic!("client {who}: {e}"),
                };
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(150)).await;
                let until = Instant::now().min(lock.held_until());
                held.lock().expect("the turns").push((from, until, who));
                let _ = lock.release().await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    cluster.kill(leader);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("the lock loop ends")
            .expect("a lock task");
    }
    let mut held = held.lock().expect("the turns").clone();
    held.sort();
    assert!(held.len() >= 6, "too few turns with the lock: {held:?}");
    let holders: std::collections::BTreeSet<usize> = held.iter().map(|h| h.2).collect();
    assert!(
        holders.len() >= 2,
        "one client held it every time: {held:?}"
    );
    for w in held.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "client {} held the lock until {:?} after client {} took it",
            w[0].2,
            w[0].1 - w[1].0,
            w[1].2
        );
    }
}

/// `creek COMMAND --addr addr ARGS…`: exit code, stdout, stderr.
fn cli(addr: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec![args[0], "--addr", addr];
    all.extend(&args[1..]);
    creek(&all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_grants_attaches_revokes_and_locks_and_refuses_bad_input() {
    let cluster = Cluster::start(3).await;
    let addr = cluster.clients[0].to_string();
    let ok = |args: &[&str]| {
        let (code, out, err) = cli(&addr, args);
        assert_eq!(code, Some(0), "creek {args:?}: {err}");
        out
    };
    let id = ok(&["lease", "grant", "60", "-o", "value"]);
    let id = id.trim();
    assert!(id.parse::<i64>().is_ok_and(|n| n > 0), "{id:?}");
    ok(&[
        "call", "--lease", id, "--level", "strong", "kv.put", "job/1", "a",
    ]);
    ok(&[
        "call", "--lease", id, "--level", "strong", "kv.put", "job/2", "b",
    ]);
    let ttl = ok(&["lease", "ttl", id, "--keys", "-o", "json"]);
    let ttl: serde_json::Value = serde_json::from_str(&ttl).expect("json");
    assert_eq!(ttl["ttl"], 60);
    assert_eq!(ttl["keys"], serde_json::json!(["job/1", "job/2"]));
    assert_eq!(ok(&["lease", "list", "-o", "value"]), format!("{id}\n"));
    assert_eq!(
        ok(&["lease", "keep-alive", id, "--once", "-o", "value"]),
        "60\n"
    );
    assert_eq!(ok(&["lease", "revoke", id, "-o", "value"]), "2\n");
    assert_eq!(ok(&["get", "job/", "--prefix", "--count-only"]), "0\n");

    // Bad input: refused by name, exit codes for scripts, nothing applied.
    for (args, code, says) in [
        (
            vec!["lease", "grant", "0"],
            1,
            "ttl must be within 1..=31536000 seconds, got 0",
        ),
        (
            vec!["lease", "grant", "99999999999"],
            1,
            "ttl must be within",
        ),
        (vec!["lease", "keep-alive", id, "--once"], 6, "not found"),
        (vec!["lease", "ttl", "12345"], 6, "lease 12345 not found"),
        (
            vec!["lease", "revoke", "0"],
            1,
            "lease id must be positive, got 0",
        ),
        (
            vec!["call", "--lease", id, "kv.put", "job/3", "c"],
            6,
            "not found",
        ),
        (
            vec!["call", "--lease", "7", "kv.incr", "n", "1"],
            1,
            "--lease attaches a key written by kv.put",
        ),
        (
            vec!["call", "--level", "weak", "lease.grant", "5"],
            6,
            "invoke it at the strong level",
        ),
    ] {
        let (got, _, err) = cli(&addr, &args);
        assert_eq!(got, Some(code), "creek {args:?}: {err}");
        assert!(err.contains(says), "creek {args:?}: {err}");
    }
    assert_eq!(ok(&["get", "job/", "--prefix", "--count-only"]), "0\n");
    assert_eq!(ok(&["lease", "list", "-o", "value"]), "");

    // A command run under a lock; the lock is free again after it.
    let out = ok(&["lock", "nightly", "--", "sh", "-c", "echo ran-under-lock"]);
    assert_eq!(out, "ran-under-lock\n");
    assert_eq!(ok(&["get", "lock/nightly", "--count-only"]), "0\n");
    // Its exit status is the command's.
    let (code, _, _) = cli(&addr, &["lock", "nightly", "--", "sh", "-c", "exit 3"]);
    assert_eq!(code, Some(3));
}
