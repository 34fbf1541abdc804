//! End-to-end: range reads and deletes (docs/api.md, "Ranges and
//! prefixes") over real `creek serve` processes — `creek get` and
//! `creek del` with `--prefix`, `--from-key`, `--range-end`, `--limit`,
//! `--keys-only` and `--count-only`, bad ranges refused by name, and on a
//! cluster of two shards the pages of both merged in key order — and
//! client transactions (`kv.txn`, "Transactions"): `creek txn` in
//! etcdctl's format, and compare-and-swap across keys from concurrent
//! Rust clients. Waits are bounded; the processes are killed by pid and
//! their directory removed when a test ends.

mod common;

use bytes::Bytes;
use common::sharded::Sharded;
use common::{creek, creek_txn as txn, Cluster};
use creek_client::Levels;

/// `creek ARGS` against `addr`: its stdout, asserting it succeeded.
fn run(addr: &str, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--addr", addr]);
    let (code, out, err) = creek(&all);
    assert_eq!(code, Some(0), "creek {args:?}: {err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_and_deletes_prefixes_and_ranges() {
    let cluster = Cluster::start(3).await;
    let addr = cluster.clients[0].to_string();
    for (k, v) in [
        ("user/1", "ann"),
        ("user/2", "bob"),
        ("user/3", "cy"),
        ("users", "x"),
        ("zed", "z"),
    ] {
        run(&addr, &["call", "--level", "strong", "kv.put", k, v]);
    }
    assert_eq!(
        run(&addr, &["get", "user/", "--prefix"]),
        "user/1 ann\nuser/2 bob\nuser/3 cy\n"
    );
    assert_eq!(run(&addr, &["get", "user/2"]), "user/2 bob\n");
    assert_eq!(
        run(
            &addr,
            &["get", "user/", "--prefix", "--reverse", "--limit", "2"]
        ),
        "user/3 cy\nuser/2 bob\n"
    );
    assert_eq!(run(&addr, &["get", "nobody"]), "");
    assert_eq!(
        run(
            &addr,
            &["get", "user/", "--prefix", "--keys-only", "--limit", "2"]
        ),
        "user/1\nuser/2\n"
    );
    assert_eq!(
        run(&addr, &["get", "user", "--prefix", "--count-only"]),
        "4\n"
    );
    assert_eq!(
        run(
            &addr,
            &["get", "user/2", "--range-end", "users", "-o", "value"]
        ),
        "bob\ncy\n"
    );
    assert_eq!(
        run(
            &addr,
            &[
                "get",
                "users",
                "--from-key",
                "--level",
                "snapshot",
                "-o",
                "json"
            ]
        ),
        "{\"key\":\"users\",\"value\":\"x\"}\n{\"key\":\"zed\",\"value\":\"z\"}\n"
    );
    // Bad ranges and limits: refused by name, nothing read.
    let (code, _, err) = creek(&["call", "--addr", &addr, "kv.scan", "b", "a", "10"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("the range is empty"), "{err}");
    let (code, _, err) = creek(&["call", "--addr", &addr, "kv.scan", "a", "nil", "0"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("limit must be within 1..=10000"), "{err}");

    assert_eq!(run(&addr, &["del", "user/", "--prefix"]), "3\n");
    assert_eq!(run(&addr, &["get", "user/", "--prefix"]), "");
    assert_eq!(run(&addr, &["del", "zed"]), "1\n");
    assert_eq!(run(&addr, &["del", "zed"]), "0\n");
    assert_eq!(
        run(&addr, &["get", "", "--from-key", "--keys-only"]),
        "users\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_of_two_shards_is_merged_in_key_order() {
    let sharded = Sharded::start("range-e2e", 0x7a9e, false, |_, _| {});
    let cluster = creek_client::Cluster::connect([sharded.addr(0)])
        .await
        .expect("connect");
    let keys: Vec<String> = (0..40).map(|n| format!("k{n:02}")).collect();
    for k in &keys {
        // Replicas accept clients before every group has formed: a put may
        // meet one still joining its cluster at first.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let op = loop {
            match cluster
                .invoke("kv.put", vec![common::b(k), common::b("v")], Levels::Strong)
                .await
            {
                Err(e)
                    if e.to_string().contains("joining its cluster")
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                other => break other.expect("put"),
            }
        };
        op.final_view().await.expect("committed");
    }
    // Both shards hold some of them.
    let owners: std::collections::BTreeSet<_> = keys
        .iter()
        .map(|k| sharded.map.owner(None, k.as_bytes()))
        .collect();
    assert_eq!(owners.len(), 2);
    // Pages of 7, in order, none missed, through every shard.
    let mut seen = Vec::new();
    let mut from = Bytes::from_static(b"k");
    loop {
        let page = cluster
            .kv_scan_keys(
                from.clone(),
                Some(Bytes::from_static(b"l")),
                7,
                Levels::Strong,
            )
            .await
            .expect("scan");
        assert!(page.items.len() <= 7);
        seen.extend(
            page.items
                .iter()
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned()),
        );
        match page.next {
            Some(next) => from = next,
            None => break,
        }
    }
    assert_eq!(seen, keys);
    // Going down, pages of 6: the same keys, descending.
    let mut seen = Vec::new();
    let mut to = None;
    loop {
        let page = cluster
            .kv_scan_keys_reverse("k", to.clone(), 6, Levels::Strong)
            .await
            .expect("reverse scan");
        assert!(page.items.len() <= 6);
        seen.extend(
            page.items
                .iter()
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned()),
        );
        match page.next {
            Some(next) => to = Some(next),
            None => break,
        }
    }
    let descending: Vec<String> = keys.iter().rev().cloned().collect();
    assert_eq!(seen, descending);
    let out = run(
        &sharded.addr(4),
        &[
            "get",
            "k",
            "--prefix",
            "--reverse",
            "--limit",
            "3",
            "--keys-only",
        ],
    );
    assert_eq!(out, "k39\nk38\nk37\n");
    let (n, next) = cluster
        .kv_count("k", None, 100, Levels::Snapshot)
        .await
        .expect("count");
    assert_eq!((n, next), (40, None));
    let deleted = cluster
        .kv_delete_range("k1", Some(Bytes::from_static(b"k3")), 3, Levels::Strong)
        .await
        .expect("delete");
    assert_eq!(deleted, 20);
    let (n, _) = cluster
        .kv_count("k", None, 100, Levels::Strong)
        .await
        .expect("count");
    assert_eq!(n, 20);
    // The CLI merges the same way.
    let out = run(&sharded.addr(3), &["get", "k", "--prefix", "--count-only"]);
    assert_eq!(out, "20\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_across_shards_runs_atomically_on_both() {
    let sharded = Sharded::start("txn-e2e", 0x7a9f, true, |_, _| {});
    let cluster = creek_client::Cluster::connect([sharded.addr(0)])
        .await
        .expect("connect");
    let (a, b_key) = (sharded.key_of(0, "acct"), sharded.key_of(1, "acct"));
    let strong_get = |key: String| {
        let cluster = cluster.clone();
        async move {
            let op = cluster
                .invoke("kv.get", vec![common::b(&key)], Levels::Strong)
                .await
                .expect("get");
            op.final_view().await.expect("view").outcome.expect("read")
        }
    };
    // Compare on shard 0's key, write both: an operation across shards.
    let swap = creek_client::Txn::new()
        .when_absent(&a)
        .then(creek_client::TxnOp::put(&a, "x"))
        .then(creek_client::TxnOp::put(&b_key, "y"))
        .otherwise(creek_client::TxnOp::get(&b_key));
    let answer = |outcome: &creek_client::Outcome| {
        creek_client::TxnAnswer::from_outcome(outcome).expect("an answer")
    };
    let op = cluster
        .invoke("kv.txn", swap.args(), Levels::Strong)
        .await
        .expect("txn");
    let first = answer(&op.final_view().await.expect("final").outcome);
    assert!(first.succeeded, "{first:?}");
    assert_eq!(strong_get(a.clone()).await, common::b("x"));
    assert_eq!(strong_get(b_key.clone()).await, common::b("y"));
    // Again: the compare fails on shard 0, the failure op reads shard 1.
    let op = cluster
        .invoke("kv.txn", swap.args(), Levels::Strong)
        .await
        .expect("txn");
    let again = answer(&op.final_view().await.expect("final").outcome);
    assert_eq!(
        (again.succeeded, again.results),
        (false, vec![common::b("y")])
    );
    // The CLI, given a replica of either shard.
    let input = format!("value(\"{a}\") = \"x\"\n\ndel {a}\ndel {b_key}\n\n");
    let (code, out, err) = txn(&sharded.addr(4), &input);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "SUCCESS\n\n1\n\n1\n");
    assert_eq!(
        strong_get(b_key.clone()).await,
        creek_types::value::Value::Nil
    );
    // What cannot be routed is refused, saying why, and nothing runs.
    let (code, _, err) = txn(
        &sharded.addr(0),
        &format!("\nput {a} z\nget k --prefix\n\n"),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("a range op reads keys of every shard"),
        "{err}"
    );
    // A compare on a key's version record reads its own shard's records.
    let (code, _, err) = txn(
        &sharded.addr(0),
        &format!("mod(\"{a}\") = \"0\"\n\nput {a} z\nput {b_key} z\n\n"),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot span 2 shards"), "{err}");
    // On one shard it runs, and the key's record is that shard's.
    let (code, out, err) = txn(
        &sharded.addr(0),
        &format!("version(\"{a}\") = \"0\"\n\nput {a} v\n\n"),
    );
    assert_eq!((code, out.as_str()), (Some(0), "SUCCESS\n\nOK\n"), "{err}");
    let op = cluster
        .invoke("kv.get_meta", vec![common::b(&a)], Levels::Strong)
        .await
        .expect("get_meta");
    let meta = creek_client::KeyMeta::from_outcome(&op.final_view().await.expect("view").outcome)
        .expect("an answer")
        .expect("present");
    assert_eq!((meta.value.as_ref(), meta.version), (&b"v"[..], 1));
    let op = cluster
        .invoke("kv.delete", vec![common::b(&a)], Levels::Strong)
        .await
        .expect("delete");
    op.final_view().await.expect("deleted");
    let weak = cluster
        .invoke(
            "kv.txn",
            creek_client::Txn::new()
                .then(creek_client::TxnOp::put(&a, "w"))
                .then(creek_client::TxnOp::put(&b_key, "w"))
                .args(),
            Levels::Weak,
        )
        .await;
    assert!(
        matches!(&weak, Err(e) if e.to_string().contains("a weak operation never spans shards")),
        "{:?}",
        weak.err()
    );
    assert_eq!(strong_get(a.clone()).await, creek_types::value::Value::Nil);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_compare_and_swap_across_keys() {
    let cluster = Cluster::start(3).await;
    let addr = cluster.clients[0].to_string();
    run(&addr, &["call", "--level", "strong", "kv.put", "a", "1"]);
    // etcdctl's format: compares, success ops, failure ops.
    let input = "value(\"a\") = \"1\"\nvalue(\"b\") = nil\n\nput b 2\nget a\n\nget b\n";
    let (code, out, err) = txn(&addr, input);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "SUCCESS\n\nOK\n\na\n1\n");
    // b exists now: the failure ops run.
    let (code, out, err) = txn(&addr, input);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "FAILURE\n\nb\n2\n");
    // A compare on what keys do not carry is refused, and nothing runs.
    let (code, _, err) = txn(&addr, "size(\"a\") > \"0\"\n\nput c 3\n");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("the target must be one of value, version"),
        "{err}"
    );
    let (code, _, err) = txn(&addr, "mod(\"a\") > \"zero\"\n\nput c 3\n");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("a mod compare takes an integer"), "{err}");
    assert_eq!(run(&addr, &["get", "c"]), "");

    // Concurrent compare-and-swaps: each client reads the counter and
    // moves it on only if no one else did meanwhile, logging the value it
    // wrote; no update is lost and no value is written twice.
    let clients = 4;
    let each = 8;
    let mut tasks = Vec::new();
    for t in 0..clients {
        let addr = cluster.clients[t % 3].to_string();
        tasks.push(tokio::spawn(async move {
            let c = creek_client::Client::connect([addr])
                .await
                .expect("connect");
            let mut done = 0;
            while done < each {
                let seen = c
                    .invoke("kv.get", vec![b("counter")], Levels::Strong)
                    .await
                    .expect("get")
                    .final_view()
                    .await
                    .expect("view")
                    .outcome
                    .expect("read");
                let n: u64 = match &seen {
                    creek_types::value::Value::Bytes(v) => std::str::from_utf8(v)
                        .expect("utf-8")
                        .parse()
                        .expect("a number"),
                    _ => 0,
                };
                let next = (n + 1).to_string();
                let mut txn = creek_client::Txn::new();
                txn = if n == 0 {
                    txn.when_absent("counter")
                } else {
                    txn.when("counter", creek_client::Cmp::Eq, n.to_string())
                };
                let txn = txn.then(creek_client::TxnOp::put("counter", &next)).then(
                    creek_client::TxnOp::put(format!("log/{next:0>4}"), format!("{t}")),
                );
                let view = c
                    .kv_txn(&txn, Levels::Strong)
                    .await
                    .expect("txn")
                    .final_view()
                    .await
                    .expect("view");
                let answer = creek_client::TxnAnswer::from_outcome(&view.outcome).expect("answer");
                if answer.succeeded {
                    done += 1;
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    let total = clients * each;
    assert_eq!(
        run(&addr, &["get", "counter", "-o", "value"]),
        format!("{total}\n")
    );
    let logged = run(&addr, &["get", "log/", "--prefix", "--count-only"]);
    assert_eq!(logged, format!("{total}\n"), "one log entry per swap");
}

fn b(s: &str) -> creek_types::value::Value {
    creek_types::value::Value::Bytes(Bytes::copy_from_slice(s.as_bytes()))
}
