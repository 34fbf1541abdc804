//! End-to-end: the client cache and reads across shards at one time, on
//! two shards of three `creek serve` processes each, through the Rust
//! `Cluster` (docs/snapshot-reads.md, "The client cache"). A client's weak
//! write shows in its snapshot reads through another replica after the
//! replica that took it is killed; a snapshot `kv.mget` whose keys span
//! the shards answers with one time for all of them.

use std::time::{Duration, Instant};

use creek_client::{CallOptions, Cluster, Error, Levels, ShardId, View, ViewKind};
use creek_types::value::Value;

mod common;
use common::sharded::{Sharded, REPLICAS};

const T: Duration = Duration::from_secs(20);

/// One cluster at a time: six processes on a machine of two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn b(s: &str) -> Value {
    Value::Bytes(bytes::Bytes::copy_from_slice(s.as_bytes()))
}

async fn try_call(
    c: &Cluster,
    procedure: &str,
    args: Vec<Value>,
    levels: Levels,
) -> Result<View, Error> {
    let options = CallOptions {
        timeout: Some(T),
        ..CallOptions::default()
    };
    c.invoke_with(procedure, args, levels, options)
        .await?
        .final_view()
        .await
}

async fn call(c: &Cluster, procedure: &str, args: Vec<Value>, levels: Levels) -> View {
    try_call(c, procedure, args, levels)
        .await
        .unwrap_or_else(|e| panic!("{procedure}: {e}"))
}

/// Write `value` at `key`, strong, once the key's shard has formed.
async fn seed(c: &Cluster, key: &str, value: &str) {
    eventually(&format!("seeding {key}"), Value::Nil, || async {
        let view = try_call(c, "kv.put", vec![b(key), b(value)], Levels::Strong).await?;
        view.outcome.map_err(Error::Protocol)
    })
    .await;
}

/// Retry `f` until it gives `want` or the time is up (a shard electing a
/// new leader refuses or delays strong ops for a moment).
async fn eventually<F, Fut>(what: &str, want: Value, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Value, Error>>,
{
    let deadline = Instant::now() + T;
    loop {
        let got = f().await;
        if got.as_ref() == Ok(&want) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {got:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weak_write_shows_in_snapshot_reads_after_its_replica_is_killed() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = Sharded::start("cache-e2e", 0xcac4e, false, |_, c| {
        c.allow_fault_injection = true;
    });
    let k0 = cluster.key_of(0, "mine");
    let client = Cluster::connect([cluster.addr(0)]).await.expect("connect");
    seed(&client, &k0, "before").await;

    // The replica the client talks to is cut off from its peers, takes
    // the weak write (so no other replica has it), and dies.
    let shard0 = client.shard(ShardId(0)).await.expect("shard 0");
    let took = shard0.replica_addr();
    let victim = (0..REPLICAS)
        .find(|i| cluster.addr(*i) == took)
        .expect("a replica of shard 0");
    cluster.isolate(victim).await;
    let put = call(&client, "kv.put", vec![b(&k0), b("after")], Levels::Weak).await;
    assert_eq!(put.kind, ViewKind::Preliminary);
    cluster.procs.kill(victim).expect("kill");

    let read = call(&client, "kv.get", vec![b(&k0)], Levels::Snapshot).await;
    assert_eq!(read.kind, ViewKind::Snapshot);
    assert_eq!(read.outcome, Ok(b("after")), "the client reads its write");
    assert_ne!(shard0.replica_addr(), took, "read through another replica");

    // The client sends the write again under its request id if its final
    // view was lost with the replica: it commits, once, and the cache
    // learns its commit time.
    eventually("the write committed", b("after"), || async {
        let view = call(&client, "kv.get", vec![b(&k0)], Levels::Strong).await;
        view.outcome.map_err(Error::Protocol)
    })
    .await;
    let deadline = Instant::now() + T;
    while client
        .cache_entries()
        .iter()
        .any(|e| e.commit_time.is_none())
    {
        assert!(
            Instant::now() < deadline,
            "never learnt the commit time: {:?}",
            client.cache_entries()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Reads go on showing it, from the cache or from the snapshot; the
    // cache is empty once a snapshot read is past its commit time.
    let read = call(&client, "kv.get", vec![b(&k0)], Levels::Snapshot).await;
    assert_eq!(read.outcome, Ok(b("after")));
    assert!(client.dep_time() >= client.read_time());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_mget_across_shards_answers_at_one_time() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Sharded::start("cache-e2e", 0xcac4e, false, |_, c| {
        c.allow_fault_injection = true;
    });
    let (k0, k1) = (cluster.key_of(0, "left"), cluster.key_of(1, "right"));
    let client = Cluster::connect([cluster.addr(3)]).await.expect("connect");
    seed(&client, &k0, "a").await;
    seed(&client, &k1, "b").await;
    let list = |keys: &[&str]| Value::List(keys.iter().map(|k| b(k)).collect());
    for keys in [[&k0, &k1], [&k1, &k0]] {
        let view = call(
            &client,
            "kv.mget",
            vec![list(&[keys[0], keys[1]])],
            Levels::Snapshot,
        )
        .await;
        let want: Vec<Value> = keys
            .iter()
            .map(|k| if *k == &k0 { b("a") } else { b("b") })
            .collect();
        assert_eq!(view.kind, ViewKind::Snapshot);
        assert_eq!(view.outcome, Ok(Value::List(want)));
        assert!(view.time > 0, "one time for every key: {view:?}");
        assert!(client.read_time() >= view.time);
    }
    // A weak write on one shard shows in a read across both at once.
    call(&client, "kv.put", vec![b(&k1), b("c")], Levels::Weak).await;
    let view = call(
        &client,
        "kv.mget",
        vec![list(&[&k0, &k1])],
        Levels::Snapshot,
    )
    .await;
    assert_eq!(view.outcome, Ok(list(&["a", "c"])));
}
