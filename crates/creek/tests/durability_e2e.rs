//! End-to-end: durable weak writes (docs/api.md, "Durable weak writes")
//! over real `creek serve` processes — a weak write asked to wait for its
//! replica's disk, or for a majority, is answered while the group is
//! whole; cut off from its peers, its replica still answers `none` and
//! `local` at once but holds a `majority` write's view until the peers
//! hold it (the deadline passes), and answers it once the link heals;
//! the CLI's `--durability`; a bad value refused. And a replica restarted
//! with many ops to run again from its log keeps answering meanwhile.
//! Waits are bounded; processes are killed by pid and their directory
//! removed.

mod common;

use std::time::Duration;

use common::{creek, Cluster};
use creek_client::{CallOptions, Client, Durability, Error, Levels, ViewKind};
use creek_types::value::Value;

/// A weak put of `key` through `client` answered after `durability`,
/// within `timeout`: its preliminary view, or the error.
async fn weak_put(
    client: &Client,
    key: &str,
    durability: Durability,
    timeout: Duration,
) -> Result<ViewKind, Error> {
    let options = CallOptions {
        timeout: Some(timeout),
        durability,
        ..CallOptions::default()
    };
    let op = client
        .invoke_with(
            "kv.put",
            vec![Value::from(key), Value::from("v")],
            Levels::Weak,
            options,
        )
        .await?;
    Ok(op.preliminary().await?.kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_write_is_answered_only_once_a_majority_holds_it() {
    let cluster = Cluster::start(3).await;
    // A follower, and only it: no failover to the others.
    let cut = (cluster.wait_for_leader(Duration::from_secs(10)).await + 1) % 3;
    let client = Client::connect([cluster.clients[cut].to_string()])
        .await
        .expect("connect");
    let t = Duration::from_secs(10);
    for (key, durability) in [
        ("d/none", Durability::None),
        ("d/local", Durability::Local),
        ("d/majority", Durability::Majority),
    ] {
        let kind = weak_put(&client, key, durability, t).await.expect(key);
        assert_eq!(kind, ViewKind::Preliminary, "{key}");
    }

    // Cut it off: its peers never get its new ops.
    cluster.isolate(cut, true).await;
    let short = Duration::from_millis(1500);
    weak_put(&client, "cut/none", Durability::None, short)
        .await
        .expect("none answers at once");
    weak_put(&client, "cut/local", Durability::Local, short)
        .await
        .expect("local answers after its own disk");
    let held = weak_put(&client, "cut/majority", Durability::Majority, short).await;
    assert!(
        matches!(held, Err(Error::DeadlineExceeded(_))),
        "a majority write in a minority: {held:?}"
    );
    // Healed: the peers get the ops, and a majority write is answered.
    cluster.isolate(cut, false).await;
    let kind = weak_put(&client, "healed/majority", Durability::Majority, t)
        .await
        .expect("answered once healed");
    assert_eq!(kind, ViewKind::Preliminary);

    // The CLI, and a bad value.
    let addr = cluster.clients[cut].to_string();
    let (code, out, err) = creek(&[
        "call",
        "--addr",
        &addr,
        "--level",
        "weak",
        "--durability",
        "majority",
        "-o",
        "json",
        "kv.put",
        "cli/k",
        "v",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\"view\":\"preliminary\""), "{out}");
    let (code, _, err) = creek(&[
        "call",
        "--addr",
        &addr,
        "--durability",
        "all",
        "kv.get",
        "k",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("durability is none, local or majority"),
        "{err}"
    );
}

/// A replica killed with many ops logged since its last checkpoint runs
/// them all again when it restarts. Meanwhile its node loop keeps turning
/// (each turn runs executions for a bounded time: its status answers
/// within a second throughout), client calls are refused at once with
/// `UNAVAILABLE` naming the recovery (a client retries at another
/// replica rather than wait seconds behind the recovered ops), and once
/// they ran it takes calls again. Before, the whole recovery ran in the
/// first turns: no status, no peer message and no answer for seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_running_its_recovered_ops_again_keeps_answering() {
    use common::{b, call, req};
    use creek_proto::pb;
    // No checkpoint during the test: every op stays in the log to recover.
    let mut cluster = Cluster::start_with(3, |c| c.checkpoint_every_secs = 3600).await;
    // Weak writes of 16 keys each, from 16 clients spread over the three
    // replicas, until the restarted replica has this many ops to run again.
    const OPS: usize = 24_000;
    const KEYS: usize = 16;
    let mut load = tokio::task::JoinSet::new();
    for t in 0..16 {
        let mut c = cluster.client(t % 3).await;
        load.spawn(async move {
            for n in 0..OPS / 16 {
                let keys = (0..KEYS).map(|k| b(&format!("r/{t}/{}", (n * KEYS + k) % 512)));
                let values = (0..KEYS).map(|_| b(&"v".repeat(64)));
                let r = req(
                    "kv.mput",
                    &[Value::List(keys.collect()), Value::List(values.collect())],
                    &[pb::Level::Weak],
                );
                call(&mut c, r, Duration::from_secs(30))
                    .await
                    .expect("weak mput");
            }
        });
    }
    while let Some(r) = load.join_next().await {
        r.expect("load task");
    }
    let recovered_by = cluster.status(2).await.expect("status").committed;
    assert!(recovered_by > OPS as u64 / 2, "committed {recovered_by}");

    cluster.restart(2).await;
    let mut c = cluster.client(2).await;
    let (mut seen_recovering, mut refused, mut longest_gap) = (false, 0, Duration::ZERO);
    let mut last = std::time::Instant::now();
    let deadline = last + Duration::from_secs(180);
    loop {
        assert!(std::time::Instant::now() < deadline, "recovery never ended");
        let status = tokio::time::timeout(Duration::from_secs(5), cluster.status(2))
            .await
            .ok()
            .flatten()
            .expect("the restarted replica answers its status");
        longest_gap = longest_gap.max(last.elapsed());
        last = std::time::Instant::now();
        let recovering = status.counters.get("recovering_ops").copied().unwrap_or(0);
        if recovering == 0 {
            break;
        }
        seen_recovering = true;
        if refused < 3 {
            let put = req("kv.put", &[b("r/during"), b("x")], &[pb::Level::Weak]);
            let began = std::time::Instant::now();
            let e = call(&mut c, put, Duration::from_secs(5))
                .await
                .expect_err("refused while recovering");
            assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
            assert!(e.message().contains("recovered"), "{}", e.message());
            assert!(began.elapsed() < Duration::from_secs(1), "refused at once");
            refused += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen_recovering,
        "the recovery ended before the first status"
    );
    assert!(refused > 0);
    // A loaded CI machine runs a 2-core cluster: a bound well above a
    // turn's budget, well below the seconds a recovery takes.
    assert!(
        longest_gap < Duration::from_secs(2),
        "status silent {longest_gap:?}"
    );

    let put = req("kv.put", &[b("r/after"), b("y")], &[pb::Level::Weak]);
    let views = call(&mut c, put, Duration::from_secs(10))
        .await
        .expect("taken again");
    assert!(common::result(&views).is_ok(), "{views:?}");
}
