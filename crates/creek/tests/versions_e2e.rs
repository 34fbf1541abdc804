//! End-to-end: versions and revisions (docs/api.md, "Versions and
//! revisions") over real `creek serve` processes — a key's version and
//! create and mod revisions read with the Rust client and `creek get
//! --meta`, the same on every replica, kept through a restart; compares on
//! them in `kv.txn` from the Rust client and `creek txn`; reads at a past
//! revision with `creek get --rev`, and revisions out of range refused by
//! name. Waits are bounded; the processes are killed by pid and their
//! directory removed when a test ends.

mod common;

use common::{creek, creek_txn, Cluster};
use creek_client::{CallOptions, Client, Cmp, Field, KeyMeta, Levels, Txn, TxnAnswer, TxnOp};

/// `creek ARGS` against `addr`: exit code, stdout, stderr.
fn run(addr: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = args.to_vec();
    all.extend(["--addr", addr]);
    creek(&all)
}

/// `creek ARGS` against `addr`, asserting it succeeded: its stdout.
fn ok(addr: &str, args: &[&str]) -> String {
    let (code, out, err) = run(addr, args);
    assert_eq!(code, Some(0), "creek {args:?}: {err}");
    out
}

/// `key`'s record read strongly through `client` (its final view).
async fn meta(client: &Client, key: &str) -> Option<KeyMeta> {
    let view = client
        .invoke_with(
            "kv.get_meta",
            vec![creek_types::value::Value::from(key)],
            Levels::Strong,
            CallOptions::default(),
        )
        .await
        .expect("invoke")
        .final_view()
        .await
        .expect("final view");
    KeyMeta::from_outcome(&view.outcome).expect("an answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_carry_versions_and_revisions_and_past_revisions_are_read() {
    let mut cluster = Cluster::start(3).await;
    let addrs: Vec<String> = cluster.clients.iter().map(ToString::to_string).collect();
    let client = Client::connect([addrs[0].clone()]).await.expect("connect");
    // Another key first, so that some revision comes before k's.
    client
        .kv_put("other", "x")
        .await
        .expect("put")
        .final_view()
        .await
        .expect("committed");
    for v in ["one", "two", "three"] {
        client
            .kv_put("k", v)
            .await
            .expect("put")
            .final_view()
            .await
            .expect("committed");
    }
    let first = meta(&client, "k").await.expect("present");
    assert_eq!((first.value.as_ref(), first.version), (&b"three"[..], 3));
    assert!(first.create_revision > 1 && first.create_revision < first.mod_revision);
    assert_eq!(first.lease, 0);
    // Every replica holds the same record: it is replicated state.
    for addr in &addrs[1..] {
        let other = Client::connect([addr.clone()]).await.expect("connect");
        assert_eq!(meta(&other, "k").await.as_ref(), Some(&first), "at {addr}");
    }

    // The CLI prints the record, and reads the key as it was at a revision.
    let json = ok(&addrs[1], &["get", "k", "--meta", "-o", "json"]);
    let got: serde_json::Value = serde_json::from_str(json.trim()).expect("json");
    assert_eq!(got["version"], 3);
    assert_eq!(got["create_revision"], first.create_revision);
    assert_eq!(got["mod_revision"], first.mod_revision);
    let created = first.create_revision.to_string();
    assert_eq!(ok(&addrs[0], &["get", "k", "--rev", &created]), "k one\n");
    let modified = first.mod_revision.to_string();
    assert_eq!(
        ok(&addrs[0], &["get", "k", "--rev", &modified, "-o", "value"]),
        "three\n"
    );
    let before = (first.create_revision - 1).to_string();
    assert_eq!(ok(&addrs[0], &["get", "k", "--rev", &before]), "");
    // The Rust client reads at a revision with the snapshot level.
    let options = CallOptions {
        revision: Some(first.create_revision + 1),
        ..CallOptions::default()
    };
    let view = client
        .invoke_with(
            "kv.get",
            vec![creek_types::value::Value::from("k")],
            Levels::Snapshot,
            options,
        )
        .await
        .expect("read at a revision")
        .final_view()
        .await
        .expect("snapshot view");
    assert!(
        matches!(&view.outcome, Ok(creek_types::value::Value::Bytes(b)) if b.as_ref() == b"two"),
        "{:?}",
        view.outcome
    );
    // A revision not committed yet, and one with other levels, are refused
    // by name.
    let (code, _, err) = run(&addrs[0], &["get", "k", "--rev", "999999999"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("out of range"), "{err}");
    let (code, _, err) = run(
        &addrs[0],
        &[
            "call", "--level", "strong", "--rev", "1", "kv.put", "k", "x",
        ],
    );
    assert_ne!(code, Some(0));
    assert!(
        err.contains("read-only") || err.contains("snapshot"),
        "{err}"
    );

    // Compares on the record: a stale mod revision fails, the current one
    // holds (the etcd compare-and-swap).
    let stale = Txn::new()
        .when_field("k", Field::Mod, Cmp::Eq, first.create_revision as i64)
        .then(TxnOp::put("k", "lost"))
        .otherwise(TxnOp::get("k"));
    let view = client
        .kv_txn(&stale, Levels::Strong)
        .await
        .expect("txn")
        .final_view()
        .await
        .expect("final");
    assert!(
        !TxnAnswer::from_outcome(&view.outcome)
            .expect("answer")
            .succeeded
    );
    let input = format!(
        "mod(\"k\") = \"{}\"\nversion(\"k\") > \"2\"\nversion(\"absent\") = \"0\"\n\nput k four\n\n\n",
        first.mod_revision
    );
    let (code, stdout, err) = creek_txn(&addrs[2], &input);
    assert_eq!(code, Some(0), "{err}");
    assert!(stdout.starts_with("SUCCESS"), "{stdout}");
    let after = meta(&client, "k").await.expect("present");
    assert_eq!((after.value.as_ref(), after.version), (&b"four"[..], 4));
    assert!(after.mod_revision > first.mod_revision);
    assert_eq!(after.create_revision, first.create_revision);

    // A delete ends the record; a put starts a new one.
    ok(&addrs[0], &["del", "k"]);
    assert_eq!(meta(&client, "k").await, None);
    ok(
        &addrs[0],
        &["call", "--level", "strong", "kv.put", "k", "again"],
    );
    let again = meta(&client, "k").await.expect("present");
    assert_eq!(again.version, 1);
    assert!(again.create_revision > after.mod_revision);

    // Records are recovered with the state: a restarted replica holds them.
    cluster.restart(1).await;
    let restarted = Client::connect([addrs[1].clone()]).await.expect("connect");
    let mut held = None;
    for _ in 0..100 {
        held = meta(&restarted, "k").await;
        if held.as_ref() == Some(&again) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(held, Some(again));
}
