//! End-to-end: durable weak writes (docs/api.md, "Durable weak writes")
//! over real `creek serve` processes — a weak write asked to wait for its
//! replica's disk, or for a majority, is answered while the group is
//! whole; cut off from its peers, its replica still answers `none` and
//! `local` at once but holds a `majority` write's view until the peers
//! hold it (the deadline passes), and answers it once the link heals;
//! the CLI's `--durability`; a bad value refused. Waits are bounded;
//! processes are killed by pid and their directory removed.

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
