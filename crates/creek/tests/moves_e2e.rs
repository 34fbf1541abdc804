//! Keys moved between shards over real `creek serve` processes while a
//! client writes them (docs/shards.md, "Moving keys between shards"): two
//! shards of three replicas and the directory's three, `creek shards
//! move` begins the move, the target shard's leader copies, switches and
//! cleans up, and afterwards every key holds its last acknowledged value
//! at the shard that owns it, the source holds none of them, and the
//! source refuses them; then `creek shards rebalance` evens the slots out
//! again, and shard 0 is drained and dropped from the map with every key
//! still readable.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use creek_client::{CallOptions, Cluster, Error, Levels, RequestId, ShardId};
use creek_types::value::Value;
use tokio::sync::Mutex;

#[path = "console_e2e/webdriver.rs"]
#[allow(dead_code)]
mod webdriver;

mod common;
use common::creek;
use common::sharded::Sharded;

const T: Duration = Duration::from_secs(30);

fn b(s: &str) -> Value {
    Value::Bytes(bytes::Bytes::copy_from_slice(s.as_bytes()))
}

/// Whether `e` says the key lives elsewhere now: refused as the op was
/// invoked, or aborted where it executed.
fn moved_away(e: &Error) -> bool {
    match e {
        Error::WrongShard { .. } => true,
        Error::Protocol(abort) => abort.starts_with("WRONG_SHARD"),
        other => other.to_string().contains("WRONG_SHARD"),
    }
}

/// This test's requests' client id, and the next request's number.
static CLIENT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
/// How many times a call came back refused as moved, past the routing
/// client's own retries.
static MOVED_SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn next_id() -> RequestId {
    let client = *CLIENT.get_or_init(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        (t ^ u64::from(std::process::id()) << 32) | 1
    });
    RequestId {
        client,
        seq: SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    }
}

/// A strong op through the routing client, sent again under the same
/// request id (after a map refresh) while the key's shard refuses it as
/// moved, or is busy: its final outcome. One request id for all the
/// attempts, so it is applied once.
async fn strong(c: &Cluster, procedure: &str, args: Vec<Value>) -> Value {
    let deadline = Instant::now() + T;
    let id = next_id();
    loop {
        let options = CallOptions {
            timeout: Some(Duration::from_secs(5)),
            request_id: Some(id),
            ..CallOptions::default()
        };
        let result = match c
            .invoke_with(procedure, args.clone(), Levels::Strong, options)
            .await
        {
            Ok(op) => match op.final_view().await {
                Ok(v) => v.outcome.map_err(Error::Protocol),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(v) => return v,
            Err(e) if Instant::now() < deadline => {
                if moved_away(&e) {
                    MOVED_SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let _ = c.refresh().await;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{procedure} {args:?}: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_move_between_shards_while_a_client_writes_them() {
    let console = creek_harness::ports::reserve_one().expect("a free port");
    let cluster = Sharded::start("moves-e2e", 0x3d0e, true, |i, c| {
        if i == 0 {
            c.metrics_addr = Some(console);
        }
    });
    let c = Cluster::connect([cluster.addr(0)]).await.expect("connect");
    // Slots 0..1024 are shard 0's (two shards split the slots evenly).
    let keys: Vec<String> = (0..160).map(|n| format!("user{n}")).collect();
    let moving: Vec<String> = keys
        .iter()
        .filter(|k| creek_shard::slot_of(k.as_bytes()) < 1024)
        .cloned()
        .collect();
    assert!(moving.len() > 10, "{}", moving.len());
    assert!(moving
        .iter()
        .all(|k| cluster.map.owner(None, k.as_bytes()) == ShardId(0)));
    for k in &keys {
        strong(&c, "kv.put", vec![b(k), b("v0")]).await;
    }

    // A writer keeps writing the moving keys; the last value it saw
    // acknowledged is what each must hold.
    let last: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (c, last, stop, moving) = (c.clone(), last.clone(), stop.clone(), moving.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let k = &moving[n % moving.len()];
                let v = format!("w{n}");
                strong(&c, "kv.put", vec![b(k), b(&v)]).await;
                last.lock().await.insert(k.clone(), v);
                n += 1;
            }
            n
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let dir = cluster.addr(6);
    let (code, out, err) = creek(&[
        "shards",
        "move",
        "--from",
        "0",
        "--to",
        "1",
        "--slots",
        "0..1024",
        "--wait-secs",
        "90",
        "--addr",
        &dir,
    ]);
    assert_eq!(code, Some(0), "creek shards move: {out}{err}");
    eprintln!("{out}");
    assert!(out.contains("begun") && out.contains("over"), "{out}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.await.expect("writer");
    eprintln!(
        "{writes} writes of the moving keys during the move; {} came back refused as moved \
         past the client's own retries",
        MOVED_SEEN.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(writes > 0);

    // The map gives the slots to shard 1; every key holds its last
    // acknowledged value.
    c.refresh().await.expect("refresh");
    let map = c.map().await;
    assert!(map.moving.is_none() && map.finishing.is_none(), "{map:?}");
    assert_eq!(map.moved, 1);
    let last = last.lock().await.clone();
    for k in &keys {
        let want = last.get(k).map_or("v0", String::as_str);
        assert_eq!(strong(&c, "kv.get", vec![b(k)]).await, b(want), "{k}");
    }
    // The source holds none of the moved keys and refuses them.
    let source = cluster.shard_client(0).await;
    for k in moving.iter().take(5) {
        let op = source.invoke("kv.get", vec![b(k)], Levels::Strong).await;
        let refused = match op {
            Err(e) => moved_away(&e),
            Ok(op) => match op.final_view().await {
                Ok(v) => v.outcome.is_err_and(|a| a.starts_with("WRONG_SHARD")),
                Err(e) => moved_away(&e),
            },
        };
        assert!(refused, "shard 0 served {k} after the move");
    }

    // `creek shards` shows each shard's size and what the target's leader
    // copied.
    let (code, out, err) = creek(&["shards", "--addr", &dir, "-o", "json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let shown: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert!(
        shown["moving"].is_null() && shown["moves_switched"] == 1,
        "{shown}"
    );
    let shards = shown["shards"].as_array().expect("shards");
    assert!(
        shards.iter().all(|s| s["versions"].as_u64() > Some(0)),
        "{shown}"
    );

    // So does replica 1's console, for the other shard (it samples every
    // second).
    let deadline = Instant::now() + T;
    loop {
        let (code, body) = webdriver::http("GET", console, "/api/console", None).expect("console");
        let r: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let groups = r["shards"]["groups"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let shard1 = groups.iter().find(|g| g["name"] == "shard 1");
        // The console's replica learns the finished move from the
        // directory within a second.
        if code == 200
            && shard1.is_some_and(|g| g["versions"].as_u64() > Some(0))
            && r["shards"]["moving"].is_null()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the console shows no shard sizes, or a move still: {body}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Rebalancing gives shard 0 its half back (dry run first).
    let (code, out, err) = creek(&["shards", "rebalance", "--dry-run", "--addr", &dir]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("1 moves:") && out.contains("from shard 1 to shard 0"),
        "{out}"
    );
    let (code, out, err) = creek(&["shards", "rebalance", "--addr", &dir]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, _) = creek(&["shards", "rebalance", "--dry-run", "--addr", &dir]);
    assert!(code == Some(0) && out.contains("nothing to move"), "{out}");

    // Drain shard 0 range by range, then drop it from the map: every key
    // is still there, on shard 1.
    c.refresh().await.expect("refresh");
    let creek_shard::Placement::Hashed(ranges) = c.map().await.default.clone() else {
        panic!("hashed");
    };
    for (i, (first, shard)) in ranges.iter().enumerate() {
        if *shard != ShardId(0) {
            continue;
        }
        let end = ranges.get(i + 1).map_or(creek_shard::SLOTS, |(f, _)| *f);
        let slots = format!("{first}..{end}");
        let (code, out, err) = creek(&[
            "shards", "move", "--from", "0", "--to", "1", "--slots", &slots, "--addr", &dir,
        ]);
        assert_eq!(code, Some(0), "{out}{err}");
    }
    let (code, out, err) = creek(&["shards", "remove-shard", "0", "--addr", &dir]);
    assert_eq!(code, Some(0), "{out}{err}");
    c.refresh().await.expect("refresh");
    let map = c.map().await;
    assert_eq!(map.shard_ids(), vec![ShardId(1)], "{map:?}");
    for k in &keys {
        let want = last.get(k).map_or("v0", String::as_str);
        assert_eq!(strong(&c, "kv.get", vec![b(k)]).await, b(want), "{k}");
    }
}
