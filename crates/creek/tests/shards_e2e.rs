//! End-to-end: a cluster of two shards of three `creek serve` processes
//! each, over real sockets. Calls are routed by key from any replica's map
//! (Rust client and CLI); a replica refuses another shard's key with
//! `WRONG_SHARD` and applies nothing; a strong call on keys of both shards
//! runs as one operation across them; a client with a stale map refreshes
//! it and retries under the same request id; one shard loses a replica
//! and its leader while the other keeps serving. The directory group
//! (three more processes) holds the map: a keyspace placed through it
//! reaches every replica, and while it is down the shards keep serving.

use std::process::Command;
use std::time::{Duration, Instant};

use creek_check::linearizable::{self, LinOp, LinResult};
use creek_client::{CallOptions, Client, Cluster, Error, Levels, ShardId};
use creek_exec::{Abort, ProcCall};
use creek_shard::Placement;
use creek_types::value::Value;

#[path = "console_e2e/webdriver.rs"]
#[allow(dead_code)]
mod webdriver;

mod common;
use common::creek;
use common::sharded::{Sharded, DIRECTORY, REPLICAS, SHARDS};

const T: Duration = Duration::from_secs(20);

/// One cluster at a time: nine processes each on a machine of two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn b(s: &str) -> Value {
    Value::Bytes(bytes::Bytes::copy_from_slice(s.as_bytes()))
}

/// The cluster with its directory, checkpoints every second, and replica
/// 1's console at the address returned.
fn start() -> (Sharded, std::net::SocketAddr) {
    let console = creek_harness::ports::reserve_one().expect("a free port");
    let cluster = Sharded::start("shards-e2e", 0x5eed, true, |i, c| {
        c.checkpoint_every_secs = 1;
        if i == 0 {
            c.metrics_addr = Some(console);
        }
    });
    (cluster, console)
}

async fn final_value(c: &Cluster, procedure: &str, args: Vec<Value>, levels: Levels) -> Value {
    let op = c
        .invoke_with(
            procedure,
            args,
            levels,
            CallOptions {
                timeout: Some(T),
                ..CallOptions::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{procedure}: {e}"));
    let view = if levels == Levels::Weak {
        op.preliminary().await
    } else {
        op.final_view().await
    };
    view.unwrap_or_else(|e| panic!("{procedure}: {e}"))
        .outcome
        .unwrap_or_else(|a| panic!("{procedure} aborted: {a}"))
}

/// How long a replica restarted under load may take to catch up.
const CATCH_UP: Duration = Duration::from_secs(60);

/// Retry `f` until it succeeds or the time is up (a shard electing a new
/// leader refuses or delays strong ops for a moment).
async fn eventually<F, Fut>(what: &str, f: F) -> Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Value, Error>>,
{
    eventually_within(what, T, f).await
}

/// [`eventually`], waiting up to `within`.
async fn eventually_within<F, Fut>(what: &str, within: Duration, mut f: F) -> Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Value, Error>>,
{
    let deadline = Instant::now() + within;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() < deadline => {
                eprintln!("{what}: {e}; again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

async fn strong_get(c: &Cluster, key: &str) -> Result<Value, Error> {
    let op = c
        .invoke_with(
            "kv.get",
            vec![b(key)],
            Levels::Strong,
            CallOptions {
                timeout: Some(Duration::from_secs(5)),
                ..CallOptions::default()
            },
        )
        .await?;
    let view = op.final_view().await?;
    view.outcome.map_err(Error::Protocol)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_route_refuse_refresh_and_survive_a_replica_loss() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (mut cluster, _) = start();
    let k0 = cluster.key_of(0, "left");
    let k1 = cluster.key_of(1, "right");

    // Any replica serves the map; the client routes every key to its shard.
    let client = Cluster::connect([cluster.addr(4)]).await.expect("connect");
    assert_eq!(client.map().await, cluster.map);
    for (key, value) in [(&k0, "a"), (&k1, "b")] {
        final_value(&client, "kv.put", vec![b(key), b(value)], Levels::Both).await;
        let weak = final_value(&client, "kv.get", vec![b(key)], Levels::Weak).await;
        let strong = final_value(&client, "kv.get", vec![b(key)], Levels::Strong).await;
        assert_eq!((weak, strong), (b(value), b(value)));
    }

    // A replica refuses a key of the other shard, and applies nothing.
    let plain0 = cluster.shard_client(0).await;
    match plain0
        .invoke("kv.put", vec![b(&k1), b("wrong")], Levels::Both)
        .await
    {
        Err(Error::WrongShard { epoch, shard, .. }) => assert_eq!((epoch, shard), (1, 1)),
        other => panic!("expected WRONG_SHARD, got {:?}", other.map(|_| ())),
    }
    assert_eq!(strong_get(&client, &k1).await.expect("get"), b("b"));
    // A procedure whose keys are known only as it runs cannot be routed.
    match plain0
        .invoke(
            "ycsb.load",
            vec![Value::Int(0), Value::Int(10), Value::Int(8)],
            Levels::Strong,
        )
        .await
    {
        Err(e) => assert!(e.to_string().contains("known only as it runs"), "{e}"),
        Ok(_) => panic!("ycsb.load accepted on a sharded cluster"),
    }

    // Multi-key built-ins run on the shard owning all their keys (the
    // client routes them there).
    let (a1, b1) = (cluster.key_of(1, "acct-a"), cluster.key_of(1, "acct-b"));
    let list = |keys: &[&str]| Value::List(keys.iter().map(|k| b(k)).collect());
    final_value(
        &client,
        "kv.mput",
        vec![list(&[&a1, &b1]), list(&["10", "0"])],
        Levels::Both,
    )
    .await;
    let moved = final_value(
        &client,
        "kv.transfer",
        vec![b(&a1), b(&b1), Value::Int(4)],
        Levels::Strong,
    )
    .await;
    assert_eq!(moved, Value::List(vec![Value::Int(6), Value::Int(4)]));
    let both = final_value(&client, "kv.mget", vec![list(&[&a1, &b1])], Levels::Weak).await;
    assert_eq!(both, list(&["6", "4"]));
    // Keys on both shards: a weak call is refused, naming the shards, and
    // applies nothing; a strong one is one operation across shards, run
    // once on each.
    let (c0, c1) = (cluster.key_of(0, "cross"), cluster.key_of(1, "cross"));
    for (procedure, args) in [
        ("kv.mput", vec![list(&[&k0, &a1]), list(&["x", "y"])]),
        ("kv.transfer", vec![b(&a1), b(&k0), Value::Int(1)]),
        ("kv.mget", vec![list(&[&k0, &k1])]),
    ] {
        match client.invoke(procedure, args, Levels::Weak).await {
            Err(e) => assert!(
                e.to_string().contains("its keys span shards 0, 1")
                    && e.to_string()
                        .contains("a weak operation never spans shards"),
                "{procedure}: {e}"
            ),
            Ok(_) => panic!("weak {procedure} across shards was accepted"),
        }
    }
    final_value(
        &client,
        "kv.mput",
        vec![list(&[&c0, &c1]), list(&["10", "20"])],
        Levels::Strong,
    )
    .await;
    let moved = final_value(
        &client,
        "kv.transfer",
        vec![b(&c1), b(&c0), Value::Int(5)],
        Levels::Strong,
    )
    .await;
    assert_eq!(moved, Value::List(vec![Value::Int(15), Value::Int(15)]));
    let read = final_value(&client, "kv.mget", vec![list(&[&c0, &c1])], Levels::Strong).await;
    assert_eq!(read, list(&["15", "15"]));
    // At both levels, its preliminary view says it was computed without
    // the other shard's values; the final view has them.
    let op = client
        .invoke(
            "kv.transfer",
            vec![b(&c0), b(&c1), Value::Int(5)],
            Levels::Both,
        )
        .await
        .expect("transfer");
    let first = op.preliminary().await.expect("preliminary");
    assert!(first.across_shards, "{first:?}");
    let last = op.final_view().await.expect("final");
    assert!(!last.across_shards, "{last:?}");
    assert_eq!(
        last.outcome,
        Ok(Value::List(vec![Value::Int(10), Value::Int(20)]))
    );
    final_value(
        &client,
        "kv.transfer",
        vec![b(&c1), b(&c0), Value::Int(5)],
        Levels::Strong,
    )
    .await;
    // Each shard holds its own key only.
    assert_eq!(strong_get(&client, &c0).await.expect("get"), b("15"));
    let plain1 = cluster.shard_client(1).await;
    let got = plain1
        .invoke("kv.get", vec![b(&c0)], Levels::Weak)
        .await
        .map(|_| ());
    assert!(matches!(got, Err(Error::WrongShard { .. })), "{got:?}");
    assert_eq!(strong_get(&client, &a1).await.expect("get"), b("6"));
    assert_eq!(strong_get(&client, &k0).await.expect("get"), b("a"));
    // A user procedure that declares its key parameters runs on the shard
    // owning them: the client routes it there (it learns the routes of
    // procedures registered after it connected), another shard refuses it
    // as WRONG_SHARD, keys on two shards are refused naming them, and a
    // procedure that declares no keys cannot be routed.
    let source = "keyspace accounts: strong\n\
                  proc deposit(acct: key(accounts), amount: int) -> int {\n\
                  let v = get(accounts, acct)\nlet n = amount\n\
                  if v != nil { n = int(v) + amount }\n\
                  put(accounts, acct, str(n))\nreturn n\n}\n\
                  proc both(a: key(accounts), b: key(accounts)) -> any { return get(accounts, b) }\n\
                  proc move(src: key(accounts), dst: key(accounts), amount: int) -> int {\n\
                  let x = int(get(accounts, src))\nlet y = 0\n\
                  if get(accounts, dst) != nil { y = int(get(accounts, dst)) }\n\
                  if x < amount { abort \"insufficient funds\" }\n\
                  put(accounts, src, str(x - amount))\nput(accounts, dst, str(y + amount))\n\
                  return y + amount\n}\n\
                  proc loose(a: bytes) -> any { return get(accounts, a) }\n";
    final_value(&client, "proc.register", vec![b(source)], Levels::Strong).await;
    for (key, amount) in [(&k0, 5), (&k1, 7)] {
        let n = final_value(
            &client,
            "deposit",
            vec![b(key), Value::Int(amount)],
            Levels::Strong,
        )
        .await;
        assert_eq!(n, Value::Int(amount));
    }
    match plain0
        .invoke("deposit", vec![b(&k1), Value::Int(1)], Levels::Strong)
        .await
    {
        Err(Error::WrongShard { epoch, shard, .. }) => assert_eq!((epoch, shard), (1, 1)),
        other => panic!("expected WRONG_SHARD, got {:?}", other.map(|_| ())),
    }
    for (procedure, args, levels, want) in [
        (
            "both",
            vec![b(&k0), b(&k1)],
            Levels::Weak,
            "a weak operation never spans shards",
        ),
        (
            "loose",
            vec![b(&k0)],
            Levels::Strong,
            "declares no key parameters",
        ),
    ] {
        match client.invoke(procedure, args, levels).await {
            Err(e) => assert!(e.to_string().contains(want), "{procedure}: {e}"),
            Ok(_) => panic!("{procedure} was accepted"),
        }
    }
    let n = final_value(
        &client,
        "deposit",
        vec![b(&k1), Value::Int(0)],
        Levels::Strong,
    )
    .await;
    assert_eq!(n, Value::Int(7), "the refused calls applied nothing");
    // Strong, a user procedure whose declared keys span shards is one
    // operation across shards; one that aborts applies nothing anywhere.
    let seen = final_value(&client, "both", vec![b(&k0), b(&k1)], Levels::Strong).await;
    assert_eq!(seen, b("7"));
    let moved = final_value(
        &client,
        "move",
        vec![b(&k0), b(&k1), Value::Int(3)],
        Levels::Strong,
    )
    .await;
    assert_eq!(moved, Value::Int(10));
    let op = client
        .invoke("move", vec![b(&k1), b(&k0), Value::Int(11)], Levels::Strong)
        .await
        .expect("move");
    let refused = op.final_view().await.expect("final").outcome;
    assert_eq!(refused, Err("insufficient funds".into()));
    for (key, balance) in [(&k0, 2), (&k1, 10)] {
        let n = final_value(
            &client,
            "deposit",
            vec![b(key), Value::Int(0)],
            Levels::Strong,
        )
        .await;
        assert_eq!(n, Value::Int(balance), "{key}");
    }

    // The CLI runs them too, routed by their keys.
    let a0 = cluster.addr(0);
    let got = cli(&[
        "call",
        "--addr",
        &a0,
        "-o",
        "value",
        "kv.mget",
        &format!("[{a1},{b1}]"),
    ]);
    assert!(got.contains('6') && got.contains('4'), "{got}");
    // And across shards: one operation, sent once.
    let moved = cli(&[
        "call",
        "--addr",
        &a0,
        "-o",
        "value",
        "kv.transfer",
        &c0,
        &c1,
        "2",
    ]);
    assert_eq!(moved.trim(), "[13, 17]", "{moved}");
    let got = cli(&[
        "call",
        "--addr",
        &a0,
        "-o",
        "value",
        "kv.mget",
        &format!("[{c0},{c1}]"),
    ]);
    assert!(got.contains("13") && got.contains("17"), "{got}");

    // A client with a stale map (the shards' halves swapped, an older
    // epoch) is refused, learns the map and is answered, exactly once.
    let mut stale = cluster.map.clone();
    stale.epoch = 0;
    stale.default = Placement::Hashed(vec![(0, ShardId(1)), (2048, ShardId(0))]);
    let stale_client = Cluster::connect_with_map(stale, Default::default())
        .await
        .expect("connect with a stale map");
    let counter = cluster.key_of(0, "counter");
    let n = final_value(
        &stale_client,
        "kv.incr",
        vec![b(&counter), Value::Int(1)],
        Levels::Both,
    )
    .await;
    assert_eq!(n, Value::Int(1));
    assert_eq!(
        stale_client.map().await,
        cluster.map,
        "the map was learned again"
    );
    assert_eq!(
        strong_get(&client, &counter).await.expect("get"),
        b("1"),
        "the retried increment was applied once"
    );

    // The CLI, given a replica of shard 0, routes a key of shard 1.
    cli(&["call", "--addr", &a0, "kv.put", &k1, "from-cli"]);
    let got = cli(&["call", "--addr", &a0, "-o", "value", "kv.get", &k1]);
    assert_eq!(got.trim(), "from-cli");
    let shards: serde_json::Value =
        serde_json::from_str(&cli(&["shards", "--addr", &a0, "-o", "json"])).expect("json");
    assert_eq!(shards["epoch"], 1);
    assert_eq!(shards["shards"].as_array().map(Vec::len), Some(2));
    let status = cli(&["status", "--addr", &a0]);
    assert!(
        status.contains("shard 0 (map epoch 1)") && status.contains("shard 1 (map epoch 1)"),
        "{status}"
    );

    // Shard 0 loses its leader: it elects another and goes on; shard 1
    // never stops serving.
    let status = plain0.status().await.expect("status");
    let leader = usize::try_from(status.leader).expect("id") - 1;
    assert!(leader < REPLICAS, "shard 0's leader is one of its replicas");
    cluster.procs.kill(leader).expect("kill");
    let started = Instant::now();
    final_value(&client, "kv.put", vec![b(&k1), b("during")], Levels::Both).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shard 1 kept serving while shard 0 failed over"
    );
    let v = eventually("a strong put on shard 0 after its leader died", || {
        let client = client.clone();
        let k0 = k0.clone();
        async move {
            let op = client
                .invoke_with(
                    "kv.put",
                    vec![b(&k0), b("after")],
                    Levels::Both,
                    CallOptions {
                        timeout: Some(Duration::from_secs(5)),
                        ..CallOptions::default()
                    },
                )
                .await?;
            op.final_view().await?.outcome.map_err(Error::Protocol)
        }
    })
    .await;
    assert_eq!(v, Value::Nil);
    assert_eq!(strong_get(&client, &k0).await.expect("get"), b("after"));
    // `creek status` reports the shard with a replica down as degraded.
    let status = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(["status", "--addr", &cluster.addr(4)])
        .output()
        .expect("creek status");
    assert_eq!(
        status.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    assert_eq!(strong_get(&client, &k1).await.expect("get"), b("during"));

    // Shard 0 loses its majority: its strong ops fail with the no-quorum
    // error; shard 1 goes on as if nothing happened.
    let second = (0..REPLICAS)
        .find(|i| *i != leader)
        .expect("another replica");
    cluster.procs.kill(second).expect("kill");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refused = async {
        let op = client
            .invoke_with(
                "kv.put",
                vec![b(&k0), b("lost")],
                Levels::Strong,
                CallOptions {
                    timeout: Some(Duration::from_secs(2)),
                    ..CallOptions::default()
                },
            )
            .await?;
        op.final_view().await.map(|_| ())
    }
    .await;
    match refused {
        Err(e) => assert!(e.to_string().contains("no quorum"), "{e}"),
        Ok(()) => panic!("a strong op committed on a shard without a majority"),
    }
    final_value(&client, "kv.put", vec![b(&k1), b("still")], Levels::Both).await;
    assert_eq!(strong_get(&client, &k1).await.expect("get"), b("still"));
}

/// Run the CLI, which must succeed; its standard output.
fn cli(args: &[&str]) -> String {
    let (code, out, err) = creek(args);
    assert_eq!(code, Some(0), "creek {args:?}: {err}");
    out
}

/// The epoch of the map the replica at `addr` serves under.
async fn served_epoch(addr: &str) -> u64 {
    let status = Client::connect([addr])
        .await
        .expect("connect")
        .status()
        .await
        .expect("status");
    creek_shard::decode(&status.shard_map).expect("map").epoch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_changes_the_map_and_its_outage_stops_only_changes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (mut cluster, console) = start();
    let k0 = cluster.key_of(0, "left");
    let k1 = cluster.key_of(1, "right");
    let dir0 = cluster.addr(SHARDS * REPLICAS);
    // A client that learns the map from a directory replica routes to the
    // shards (the directory serves no keys).
    let client = Cluster::connect([dir0.clone()]).await.expect("connect");
    assert_eq!(client.map().await, cluster.map);
    for (key, value) in [(&k0, "a"), (&k1, "b")] {
        final_value(&client, "kv.put", vec![b(key), b(value)], Levels::Both).await;
        assert_eq!(strong_get(&client, key).await.expect("get"), b(value));
    }

    // A keyspace placed through the directory: a strong change at the next
    // epoch, which every replica of every shard then serves under.
    let a0 = cluster.addr(0);
    let out = cli(&["shards", "place", "orders", "--pin", "1", "--addr", &a0]);
    assert!(
        out.contains("epoch 2: keyspace orders pinned to shard 1"),
        "{out}"
    );
    assert!(out.contains("every replica serves under epoch 2"), "{out}");
    for i in 0..SHARDS * REPLICAS + DIRECTORY {
        assert_eq!(served_epoch(&cluster.addr(i)).await, 2, "replica {}", i + 1);
    }
    let shards: serde_json::Value =
        serde_json::from_str(&cli(&["shards", "--addr", &a0, "-o", "json"])).expect("json");
    assert_eq!(shards["epoch"], 2);
    assert_eq!(shards["keyspaces"]["orders"], "pinned to shard 1");
    assert_eq!(
        shards["directory"]["replicas"].as_array().map(Vec::len),
        Some(3)
    );
    // The client made before the change still routes (no key moved), and
    // learns the new map when asked.
    final_value(&client, "kv.put", vec![b(&k1), b("c")], Levels::Both).await;
    client.refresh().await.expect("refresh");
    assert_eq!(client.map().await.epoch, 2);

    // Replica 1's console shows every group and sends an invocation on
    // shard 1's key to shard 1.
    let deadline = Instant::now() + T;
    let report = loop {
        let (code, body) = webdriver::http("GET", console, "/api/console", None).expect("console");
        let r: serde_json::Value = if code == 200 {
            serde_json::from_str(&body).expect("json")
        } else {
            serde_json::Value::Null
        };
        if r["shards"]["epoch"] == 2 {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "the console shows no map at epoch 2: {body}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let names: Vec<&str> = report["shards"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert_eq!(names, ["shard 0", "shard 1", "directory"]);
    assert_eq!(report["shards"]["serves"], "shard 0");
    let body =
        serde_json::json!({ "procedure": "kv.put", "args": [k1, "console"], "level": "both" });
    let (code, answer) = webdriver::http(
        "POST",
        console,
        "/api/invoke",
        Some(("application/json", body.to_string().as_bytes())),
    )
    .expect("invoke");
    assert_eq!(code, 200, "{answer}");
    assert!(answer.contains(r#""shard":1"#), "{answer}");
    assert!(answer.contains(r#""kind":"confirmed""#), "{answer}");
    assert_eq!(strong_get(&client, &k1).await.expect("get"), b("console"));

    // A change that would move keys is refused (by the CLI, and by the
    // directory itself: `directory.set` checks it again), and so is
    // placing a keyspace that already holds data; the map stays at 2.
    let (code, _, err) = creek(&["shards", "place", "orders", "--pin", "0", "--addr", &a0]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("moves keys"), "{err}");
    cli(&["keyspace", "create", "stuff", "weak", "--addr", &a0]);
    let (code, _, err) = creek(&["shards", "place", "stuff", "--pin", "0", "--addr", &a0]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(served_epoch(&dir0).await, 2);

    // The directory goes down: both shards keep serving with the map they
    // have; changes wait, with an error that says why.
    // An operation across both shards waits for the directory to order
    // it, and holds neither shard meanwhile.
    for i in SHARDS * REPLICAS..SHARDS * REPLICAS + DIRECTORY {
        cluster.procs.kill(i).expect("kill");
    }
    let (m0, m1) = (cluster.key_of(0, "waits"), cluster.key_of(1, "waits"));
    let list = |keys: &[&str]| Value::List(keys.iter().map(|k| b(k)).collect());
    let across = {
        let (client, args) = (client.clone(), vec![list(&[&m0, &m1]), list(&["p", "q"])]);
        tokio::spawn(async move {
            let options = CallOptions {
                timeout: Some(Duration::from_secs(90)),
                ..CallOptions::default()
            };
            let op = client
                .invoke_with("kv.mput", args, Levels::Strong, options)
                .await?;
            op.final_view().await
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (key, value) in [(&k0, "d"), (&k1, "e")] {
        final_value(&client, "kv.put", vec![b(key), b(value)], Levels::Both).await;
        assert_eq!(strong_get(&client, key).await.expect("get"), b(value));
    }
    assert!(!across.is_finished(), "an MPO completed with no directory");
    // One whose deadline passes meanwhile is told what it waits for.
    let args = vec![list(&[&m0, &m1]), list(&["r", "s"])];
    let options = CallOptions {
        timeout: Some(Duration::from_secs(2)),
        ..CallOptions::default()
    };
    let late = match client
        .invoke_with("kv.mput", args, Levels::Strong, options)
        .await
    {
        Ok(op) => op.final_view().await.map(|_| ()),
        Err(e) => Err(e),
    };
    let late = late
        .expect_err("an MPO completed with no directory")
        .to_string();
    assert!(
        late.contains("the directory group has not ordered it yet"),
        "{late}"
    );
    let (code, _, err) = creek(&["shards", "place", "later", "--pin", "0", "--addr", &a0]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("directory does not answer"), "{err}");
    let (code, out, _) = creek(&["shards", "--addr", &a0]);
    assert_eq!(code, Some(3), "{out}");

    // Back: its map survived in its state, and changes go on from it.
    for i in SHARDS * REPLICAS..SHARDS * REPLICAS + DIRECTORY {
        cluster.procs.spawn(i).expect("spawn");
    }
    cluster
        .procs
        .wait_accepting(T)
        .expect("the directory accepts clients");
    let deadline = Instant::now() + T;
    loop {
        let (code, out, err) = creek(&["shards", "place", "later", "--pin", "0", "--addr", &a0]);
        if code == Some(0) {
            assert!(
                out.contains("epoch 3: keyspace later pinned to shard 0"),
                "{out}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the directory did not come back: {err}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for i in 0..SHARDS * REPLICAS {
        assert_eq!(served_epoch(&cluster.addr(i)).await, 3, "replica {}", i + 1);
    }
    // The waiting operation was ordered once the directory came back.
    let view = across.await.expect("join").expect("the MPO's final view");
    assert!(view.outcome.is_ok(), "{view:?}");
    // (The one that timed out may commit after it, as its error said.)
    let values = [
        strong_get(&client, &m0).await,
        strong_get(&client, &m1).await,
    ];
    let values: Vec<Value> = values.into_iter().map(|v| v.expect("get")).collect();
    assert!(
        values == [b("p"), b("q")] || values == [b("r"), b("s")],
        "an MPO applied on one shard only: {values:?}"
    );

    // Shard 1 grows: the new replica is listed in the map, started with
    // the shard's members and itself, and added to the group; then it
    // serves shard 1's keys.
    let new = cluster.procs.push_on_loopback().expect("ports");
    let (client_addr, peer_addr) = (cluster.addr(new), cluster.procs.peers[new].to_string());
    let out = cli(&[
        "shards",
        "add-replica",
        "--shard",
        "1",
        "10",
        &client_addr,
        &peer_addr,
        "--addr",
        &a0,
    ]);
    assert!(out.contains("epoch 4: replica 10"), "{out}");
    let map_path = cluster.procs.dir.join("shard-map.bin");
    cluster
        .procs
        .configure_valid(new, &[3, 4, 5, new], |c| {
            c.workers = 1;
            c.shard_map = Some(map_path.clone());
        })
        .expect("config");
    cluster.procs.spawn(new).expect("spawn");
    cluster
        .procs
        .wait_accepting(T)
        .expect("replica 10 accepts clients");
    let shard1 = cluster.shard_client(1).await;
    eventually("adding replica 10 to shard 1", || {
        let shard1 = shard1.clone();
        let (peer_addr, client_addr) = (peer_addr.clone(), client_addr.clone());
        async move {
            shard1.add_replica(10, &peer_addr, &client_addr).await?;
            Ok(Value::Nil)
        }
    })
    .await;
    let at_new = Cluster::connect([client_addr.clone()])
        .await
        .expect("connect");
    let v = eventually("a strong read at replica 10", || {
        let at_new = at_new.clone();
        let k1 = k1.clone();
        async move { strong_get(&at_new, &k1).await }
    })
    .await;
    assert_eq!(v, b("e"));
    let (code, _, err) = creek(&[
        "shards",
        "add-replica",
        "--shard",
        "0",
        "10",
        "x:1",
        "y:2",
        "--addr",
        &a0,
    ]);
    assert_eq!(code, Some(1), "an id in use is refused: {err}");

    // A replica the map does not list refuses to start, saying why; so
    // does one configured with a map of no shard map format.
    let stranger = cluster.procs.push_on_loopback().expect("ports");
    cluster
        .procs
        .configure_valid(stranger, &[0, 1, 2, stranger], |c| {
            c.shard_map = Some(map_path.clone());
        })
        .expect("config");
    let config = cluster.procs.config_path(stranger);
    let config = config.to_str().expect("utf-8 path");
    let (code, _, err) = creek(&["serve", "--config", config]);
    assert_ne!(code, Some(0));
    assert!(err.contains("replica 11 is not in the shard map"), "{err}");
    let junk = cluster.procs.dir.join("junk-map.bin");
    std::fs::write(&junk, b"not a map").expect("write");
    cluster
        .procs
        .configure_valid(stranger, &[0, 1, 2, stranger], |c| {
            c.shard_map = Some(junk.clone());
        })
        .expect("config");
    let (code, _, err) = creek(&["serve", "--config", config]);
    assert_ne!(code, Some(0));
    assert!(err.contains("junk-map.bin"), "{err}");
}

/// The leader shard `group`'s replicas (by index in the cluster, from
/// `first`) agree on, as an index; `None` if none is known.
async fn leader_of(cluster: &Sharded, first: usize) -> Option<usize> {
    for i in first..first + REPLICAS {
        if !cluster.procs.is_running(i) {
            continue;
        }
        let Ok(c) = Client::connect([cluster.addr(i)]).await else {
            continue;
        };
        if let Ok(s) = c.status().await {
            if s.leader != 0 {
                return Some(s.leader as usize - 1);
            }
        }
    }
    None
}

/// Transfers between accounts on different shards from three clients at
/// once while the leader of shard 0, then of shard 1, then of the
/// directory (the sequencer) is killed and restarted: every transfer a
/// client saw applied is applied once, none is half-applied, the bank's
/// total is kept, and the transfers as the clients saw them are
/// linearizable over the whole cluster (each across two shards).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_across_shards_keep_the_total_while_leaders_die() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let _one = ONE_AT_A_TIME.lock().await;
    let (mut cluster, _) = start();
    let accounts: Vec<String> = (0..4)
        .map(|i| cluster.key_of((i % 2) as u16, &format!("bank{i}-")))
        .collect();
    let list = |keys: &[String]| Value::List(keys.iter().map(|k| b(k)).collect());
    let client = Cluster::connect([cluster.addr(0)]).await.expect("connect");
    final_value(
        &client,
        "kv.mput",
        vec![list(&accounts), list(&vec!["100".to_owned(); 4])],
        Levels::Strong,
    )
    .await;

    // Each transfer: applied (the final view said so), refused (an abort,
    // e.g. too little money: nothing applied), or unknown (an error: the
    // client gave up, it may have applied).
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let history: Arc<std::sync::Mutex<Vec<LinOp>>> = Arc::default();
    let mut workers = Vec::new();
    for w in 0..3usize {
        let (stop, accounts) = (stop.clone(), accounts.clone());
        let history = history.clone();
        let addr = cluster.addr(w * 2 % (SHARDS * REPLICAS));
        workers.push(tokio::spawn(async move {
            let c = Cluster::connect([addr]).await.expect("connect");
            let (mut applied, mut unknown) = (vec![0i64; 4], 0usize);
            let (mut done, mut refused) = (0usize, 0usize);
            let mut n = w;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                // From an account of one shard to one of the other.
                let from = n % 4;
                let to = (from + 1 + 2 * (n / 4 % 2)) % 4;
                let amount = 1 + (n % 5) as i64;
                let args = vec![b(&accounts[from]), b(&accounts[to]), Value::Int(amount)];
                let call = ProcCall::new("kv.transfer", creek_types::value::encode_args(&args));
                let invoked_at_us = epoch.elapsed().as_micros() as u64;
                let options = CallOptions {
                    timeout: Some(Duration::from_secs(15)),
                    ..CallOptions::default()
                };
                let outcome = match c
                    .invoke_with("kv.transfer", args, Levels::Strong, options)
                    .await
                {
                    Ok(op) => op.final_view().await.map(|v| v.outcome),
                    Err(e) => Err(e),
                };
                let at = epoch.elapsed().as_micros() as u64;
                let completed = match &outcome {
                    Ok(Ok(v)) => Some((at, Ok(v.encode()))),
                    Ok(Err(a)) => Some((at, Err(Abort(a.clone())))),
                    Err(_) => None,
                };
                let mut h = history.lock().expect("history");
                let index = h.len();
                h.push(LinOp {
                    index,
                    call,
                    invoked_at_us,
                    completed,
                });
                drop(h);
                match outcome {
                    Ok(Ok(_)) => {
                        applied[from] -= amount;
                        applied[to] += amount;
                        done += 1;
                    }
                    Ok(Err(_)) => refused += 1,
                    Err(e) => {
                        eprintln!("worker {w}: transfer {n}: {e}");
                        unknown += 1;
                    }
                }
            }
            (applied, unknown, done, refused)
        }));
    }

    let settle = Duration::from_secs(3);
    tokio::time::sleep(settle).await;
    for first in [0, REPLICAS, SHARDS * REPLICAS] {
        let leader = leader_of(&cluster, first).await.expect("a leader");
        eprintln!("killing replica {} (leader of its group)", leader + 1);
        cluster.procs.kill(leader).expect("kill");
        tokio::time::sleep(settle).await;
        cluster.procs.spawn(leader).expect("restart");
        cluster
            .procs
            .wait_accepting(T)
            .expect("the restarted replica accepts clients");
        tokio::time::sleep(settle).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (mut applied, mut unknown, mut done) = (vec![0i64; 4], 0, 0);
    for w in workers {
        let (a, u, d, r) = w.await.expect("worker");
        eprintln!("worker: {d} applied, {r} refused, {u} unknown");
        for (total, delta) in applied.iter_mut().zip(a) {
            *total += delta;
        }
        unknown += u;
        done += d;
    }
    assert!(done >= 30, "only {done} transfers applied");
    // From the balances the setup wrote, one serial order holds every
    // transfer at a point between its invocation and its answer.
    let initial = accounts
        .iter()
        .map(|a| {
            (
                bytes::Bytes::from(a.clone()),
                bytes::Bytes::from_static(b"100"),
            )
        })
        .collect();
    let keys = |c: &ProcCall| -> Vec<bytes::Bytes> {
        creek_types::value::decode_args(&c.args)
            .map(|a| {
                a.iter()
                    .take(2)
                    .filter_map(|v| v.as_bytes().cloned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let ops = history.lock().expect("history").clone();
    match linearizable::check(
        &ops,
        &keys,
        &creek_procs::Registry::with_builtins(),
        creek_exec::TxnLimits::default(),
        &initial,
        50_000_000,
    ) {
        LinResult::Ok { partitions, ops } => {
            eprintln!("linearizable: {ops} transfers in {partitions} partitions")
        }
        other => panic!("transfers across shards not linearizable: {other:?}"),
    }

    // Every replica of both shards ends with the same balances, which add
    // up to the bank's total; with no transfer of unknown fate, they are
    // exactly the applied ones.
    let read = eventually("the balances", || async {
        let op = client
            .invoke_with(
                "kv.mget",
                vec![list(&accounts)],
                Levels::Strong,
                CallOptions {
                    timeout: Some(Duration::from_secs(5)),
                    ..CallOptions::default()
                },
            )
            .await?;
        op.final_view().await?.outcome.map_err(Error::Protocol)
    })
    .await;
    let balances: Vec<i64> = read
        .as_list()
        .expect("a list")
        .iter()
        .map(|v| {
            let s = std::str::from_utf8(v.as_bytes().expect("bytes")).expect("utf-8");
            s.parse().expect("an integer")
        })
        .collect();
    assert_eq!(balances.iter().sum::<i64>(), 400, "{balances:?}");
    if unknown == 0 {
        let expected: Vec<i64> = applied.iter().map(|d| 100 + d).collect();
        assert_eq!(balances, expected);
    }
    for (i, account) in accounts.iter().enumerate() {
        let shard = i % 2;
        for r in shard * REPLICAS..(shard + 1) * REPLICAS {
            let replica = Client::connect([cluster.addr(r)]).await.expect("connect");
            // A replica restarted under load catches up from its peers: on
            // two cores shared by three sharded clusters (27 processes)
            // that has taken more than 20 s.
            let value = eventually_within("a replica's balance", CATCH_UP, || async {
                let v = replica
                    .invoke("kv.get", vec![b(account)], Levels::Weak)
                    .await?
                    .preliminary()
                    .await?;
                match v.outcome {
                    Ok(v) if v == b(&balances[i].to_string()) => Ok(v),
                    Ok(v) => Err(Error::Protocol(format!("holds {v}"))),
                    Err(a) => Err(Error::Protocol(a)),
                }
            })
            .await;
            assert_eq!(value, b(&balances[i].to_string()), "replica {}", r + 1);
        }
    }
}
