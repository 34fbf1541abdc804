//! A cluster's shards share one read time, one dependency time and one
//! cache, and a snapshot `kv.mget` across shards reads every part at one
//! time, against two scripted shards of one replica each.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use creek_proto::{from_wire, pb};
use creek_shard::{Endpoint, ShardId, ShardMap};
use creek_types::value::Value;
use tonic::Status;

use super::mock::{final_at, serve, snapshot_at, Mock, Server, Step};
use crate::{Cluster, ConnectOptions, Levels, ViewKind};

fn b(s: &str) -> Value {
    Value::from(s)
}

/// The keys of a `kv.mget` request.
fn keys_of(req: &pb::InvokeRequest) -> Vec<Value> {
    match req.args.first().map(from_wire) {
        Some(Ok(Value::List(keys))) => keys,
        other => panic!("a kv.mget with {other:?}"),
    }
}

/// Each key read as `<key>@<shard>`.
fn values(req: &pb::InvokeRequest, shard: &str) -> Value {
    Value::List(
        keys_of(req)
            .iter()
            .map(|k| match k {
                Value::Bytes(k) => b(&format!("{}@{shard}", String::from_utf8_lossy(k))),
                _ => Value::Nil,
            })
            .collect(),
    )
}

/// A map of two shards, each one mock replica; and a key of each.
fn two_shards(s0: &Server, s1: &Server) -> (ShardMap, String, String) {
    let mut map = ShardMap::hashed(7, &[ShardId(0), ShardId(1)]);
    for (shard, server, id) in [(0, s0, 1), (1, s1, 2)] {
        let endpoint = Endpoint {
            client: server.addr.clone(),
            peer: String::new(),
        };
        map.shards
            .get_mut(&ShardId(shard))
            .expect("shard")
            .replicas
            .insert(id, endpoint);
    }
    let key = |s: u16| {
        (0..)
            .map(|n| format!("k{n}"))
            .find(|k| map.owner(None, k.as_bytes()) == ShardId(s))
            .expect("a key")
    };
    let (k0, k1) = (key(0), key(1));
    (map, k0, k1)
}

#[tokio::test]
async fn a_snapshot_mget_across_shards_reads_every_part_at_the_first_parts_time() {
    let s0 = serve(Mock::new(1, |req| {
        assert!(!req.read_exact, "the first part reads at the client's time");
        vec![snapshot_at(values(req, "0"), 500)]
    }))
    .await;
    let unavailable_once = Arc::new(AtomicUsize::new(1));
    let u = unavailable_once.clone();
    let s1 = serve(Mock::new(2, move |req| match req.procedure.as_str() {
        "kv.put" => vec![final_at(Value::Nil, 700)],
        _ => {
            assert!(req.read_exact && req.read_time == 500, "{req:?}");
            if u.fetch_sub(1, Ordering::SeqCst) == 1 {
                // This replica no longer keeps the versions of time 500:
                // the whole read starts again.
                return vec![Step::Fail(Status::unavailable("versions not kept"))];
            }
            vec![snapshot_at(values(req, "1"), 500)]
        }
    }))
    .await;
    let (map, k0, k1) = two_shards(&s0, &s1);
    let cluster = Cluster::connect_with_map(map, ConnectOptions::default())
        .await
        .expect("connect");
    // The caller's order, the keys of both shards interleaved.
    let keys = vec![b(&k0), b(&k1), b(&k0)];
    let view = cluster
        .invoke("kv.mget", vec![Value::List(keys)], Levels::Snapshot)
        .await
        .expect("mget")
        .final_view()
        .await
        .expect("view");
    assert_eq!((view.kind, view.time), (ViewKind::Snapshot, 500));
    assert_eq!(
        view.outcome,
        Ok(Value::List(vec![
            b(&format!("{k0}@0")),
            b(&format!("{k1}@1")),
            b(&format!("{k0}@0")),
        ]))
    );
    // Started again once: the first key's shard was read twice.
    assert_eq!(s0.mock.seen().len(), 2);
    assert_eq!(s1.mock.seen().len(), 2);
    // One read time for the cluster, whichever shard's client is asked.
    assert_eq!(cluster.read_time(), 500);
    for shard in [ShardId(0), ShardId(1)] {
        let client = cluster.shard(shard).await.expect("client");
        assert_eq!(client.read_time(), 500);
    }
    // A write on shard 1 raises the dependency time every shard's
    // requests carry, and its effect is in the one cache.
    let put = cluster
        .invoke("kv.put", vec![b(&k1), b("mine")], Levels::Strong)
        .await
        .expect("put");
    put.final_view().await.expect("final");
    assert_eq!(cluster.dep_time(), 700);
    let shard0 = cluster.shard(ShardId(0)).await.expect("client");
    assert_eq!(shard0.dep_time(), 700);
    assert_eq!(shard0.cache_entries().len(), 1);
}

#[tokio::test]
async fn the_cache_lies_over_a_read_across_shards_and_an_unavailable_part_twice_is_an_error() {
    let time0 = Arc::new(AtomicU64::new(300));
    let t = time0.clone();
    let s0 = serve(Mock::new(1, move |req| {
        vec![snapshot_at(values(req, "0"), t.load(Ordering::SeqCst))]
    }))
    .await;
    let s1 = serve(Mock::new(2, move |req| match req.procedure.as_str() {
        "kv.put" => vec![final_at(Value::Nil, 400)],
        _ if req.read_time == 300 => vec![snapshot_at(values(req, "1"), 300)],
        _ => vec![Step::Fail(Status::unavailable("versions not kept"))],
    }))
    .await;
    let (map, k0, k1) = two_shards(&s0, &s1);
    let cluster = Cluster::connect_with_map(map, ConnectOptions::default())
        .await
        .expect("connect");
    cluster
        .invoke("kv.put", vec![b(&k1), b("mine")], Levels::Strong)
        .await
        .expect("put")
        .final_view()
        .await
        .expect("final");
    let read = || {
        let (cluster, keys) = (cluster.clone(), vec![b(&k0), b(&k1)]);
        async move {
            cluster
                .invoke("kv.mget", vec![Value::List(keys)], Levels::Snapshot)
                .await?
                .final_view()
                .await
        }
    };
    let view = read().await.expect("read");
    assert_eq!(
        view.outcome,
        Ok(Value::List(vec![b(&format!("{k0}@0")), b("mine")]))
    );
    // Shard 0 now answers at 350, which shard 1 no longer keeps: the read
    // is tried twice, then fails.
    time0.store(350, Ordering::SeqCst);
    let err = read().await.expect_err("unavailable");
    assert!(err.is_unavailable(), "{err:?}");
    assert_eq!(s1.mock.seen().len(), 1 + 1 + 2);
}
