//! The client cache and the two times against scripted replicas
//! (docs/snapshot-reads.md, "The client cache").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_proto::pb;
use creek_types::value::Value;
use tokio::sync::Notify;
use tonic::Status;

use super::mock::{confirmed_at, final_at, preliminary, serve, snapshot_at, Mock, Server, Step};
use crate::{CachedWrite, Client, ConnectOptions, Levels, ViewKind};

fn k(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn b(s: &str) -> Value {
    Value::Bytes(k(s))
}

/// Wait (a few seconds at most) until `done` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < give_up, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn connect(server: &Server, options: ConnectOptions) -> Client {
    Client::connect_with_options([server.addr.clone()], options)
        .await
        .expect("connect")
}

fn levels_of(req: &pb::InvokeRequest) -> Levels {
    let has = |l: pb::Level| req.levels.contains(&(l as i32));
    Levels::of(
        has(pb::Level::Weak),
        has(pb::Level::Snapshot),
        has(pb::Level::Strong),
    )
    .expect("levels")
}

/// The read times the mock's requests of `procedure` carried.
fn sent_times(server: &Server, procedure: &str) -> Vec<u64> {
    server
        .mock
        .seen()
        .iter()
        .filter(|s| s.request.procedure == procedure)
        .map(|s| s.request.read_time)
        .collect()
}

async fn snapshot_get(client: &Client, key: &str) -> crate::View {
    client
        .invoke("kv.get", vec![b(key)], Levels::Snapshot)
        .await
        .expect("snapshot read")
        .final_view()
        .await
        .expect("snapshot view")
}

#[tokio::test]
async fn a_weak_write_shows_over_snapshot_reads_until_the_read_time_passes_its_commit_time() {
    let gate = Arc::new(Notify::new());
    let snapshot_time = Arc::new(AtomicU64::new(0));
    let (g, t) = (gate.clone(), snapshot_time.clone());
    let server = serve(Mock::new(1, move |req| match req.procedure.as_str() {
        "kv.put" => {
            assert!(
                req.weak_final,
                "the client asks for the weak write's final view"
            );
            vec![
                preliminary(Value::Nil),
                Step::Wait(g.clone()),
                final_at(Value::Nil, 100),
            ]
        }
        _ => vec![snapshot_at(b("theirs"), t.load(Ordering::SeqCst))],
    }))
    .await;
    let client = connect(&server, ConnectOptions::default()).await;
    let put = client
        .invoke("kv.put", vec![b("k"), b("mine")], Levels::Weak)
        .await
        .expect("weak put");
    assert_eq!(
        put.final_view().await.map(|v| v.kind),
        Ok(ViewKind::Preliminary),
        "the call closes at its preliminary view"
    );
    let mine = CachedWrite {
        key: k("k"),
        value: Some(k("mine")),
        commit_time: None,
    };
    assert_eq!(client.cache_entries(), vec![mine.clone()]);
    assert_eq!(client.cache_bytes(), "kmine".len());

    // Its commit time unknown, it shows over any snapshot.
    snapshot_time.store(50, Ordering::SeqCst);
    let read = snapshot_get(&client, "k").await;
    assert_eq!((read.outcome, read.time), (Ok(b("mine")), 50));
    assert_eq!(client.read_time(), 50);

    gate.notify_one();
    until("the final view's commit time", || {
        client.cache_entries().first().and_then(|e| e.commit_time) == Some(100)
    })
    .await;
    assert_eq!((client.read_time(), client.dep_time()), (50, 100));
    // Over a snapshot before its commit time it still shows; the read is
    // sent at the read time, not at the write's commit time.
    snapshot_time.store(80, Ordering::SeqCst);
    assert_eq!(snapshot_get(&client, "k").await.outcome, Ok(b("mine")));
    // A snapshot at its commit time holds it: the server's value shows,
    // and the write leaves the cache.
    snapshot_time.store(100, Ordering::SeqCst);
    assert_eq!(snapshot_get(&client, "k").await.outcome, Ok(b("theirs")));
    assert_eq!((client.cache_entries(), client.cache_bytes()), (vec![], 0));
    assert_eq!(sent_times(&server, "kv.get"), vec![0, 50, 80]);
    // A write is sent at the dependency time.
    client
        .invoke("kv.put", vec![b("k"), b("again")], Levels::Weak)
        .await
        .expect("weak put");
    assert_eq!(sent_times(&server, "kv.put"), vec![0, 100]);
    gate.notify_one();
}

#[tokio::test]
async fn the_cache_lies_over_each_key_of_a_snapshot_mget_and_a_delete_reads_as_absent() {
    let server = serve(Mock::new(1, move |req| {
        match (req.procedure.as_str(), levels_of(req)) {
            ("kv.put", _) => vec![final_at(Value::Nil, 200)],
            ("kv.delete", _) => vec![final_at(Value::Bool(true), 210)],
            ("kv.mget", _) => vec![snapshot_at(Value::List(vec![b("x"), b("y"), b("z")]), 150)],
            ("kv.get", Levels::SnapshotStrong) => {
                vec![snapshot_at(b("x"), 150), final_at(b("mine"), 190)]
            }
            ("kv.get", Levels::All) => vec![
                preliminary(b("x")),
                snapshot_at(b("x"), 150),
                confirmed_at(300),
            ],
            other => panic!("unexpected {other:?}"),
        }
    }))
    .await;
    let client = connect(&server, ConnectOptions::default()).await;
    for (procedure, args) in [
        ("kv.put", vec![b("a"), b("mine")]),
        ("kv.delete", vec![b("b")]),
    ] {
        let c = client
            .invoke(procedure, args, Levels::Strong)
            .await
            .expect("write");
        c.final_view().await.expect("final");
    }
    assert_eq!((client.read_time(), client.dep_time()), (0, 210));
    let read = client
        .invoke(
            "kv.mget",
            vec![Value::List(vec![b("a"), b("b"), b("c")])],
            Levels::Snapshot,
        )
        .await
        .expect("mget")
        .final_view()
        .await
        .expect("view");
    assert_eq!(
        read.outcome,
        Ok(Value::List(vec![b("mine"), Value::Nil, b("z")]))
    );
    // A strong view equal to the snapshot view the caller was shown
    // confirms it.
    let both = client
        .invoke("kv.get", vec![b("a")], Levels::SnapshotStrong)
        .await
        .expect("snapshot and strong");
    let mut views = Vec::new();
    let mut stream = both.views();
    while let Some(v) = tokio_stream::StreamExt::next(&mut stream).await {
        let v = v.expect("view");
        views.push((v.kind, v.outcome));
    }
    assert_eq!(
        views,
        vec![
            (ViewKind::Snapshot, Ok(b("mine"))),
            (ViewKind::Confirmed, Ok(b("mine"))),
        ]
    );
    // With all three views: the snapshot view shows the cached write, so
    // the strong view, which confirms the server's snapshot, is a final
    // view that differs from it. Strong views are never overlaid.
    let all = client
        .invoke("kv.get", vec![b("a")], Levels::All)
        .await
        .expect("all");
    let mut views = Vec::new();
    let mut stream = all.views();
    while let Some(v) = tokio_stream::StreamExt::next(&mut stream).await {
        let v = v.expect("view");
        views.push((v.kind, v.outcome));
    }
    assert_eq!(
        views,
        vec![
            (ViewKind::Preliminary, Ok(b("x"))),
            (ViewKind::Snapshot, Ok(b("mine"))),
            (ViewKind::Final, Ok(b("x"))),
        ]
    );
    // The read's final view at 300 is past both writes' commit times.
    assert_eq!(client.read_time(), 300);
    assert_eq!(client.cache_entries(), vec![]);
}

#[tokio::test]
async fn a_write_the_cache_cannot_hold_is_acknowledged_at_its_commit() {
    let server = serve(Mock::new(1, move |req| match req.procedure.as_str() {
        "kv.put" => vec![
            preliminary(Value::Nil),
            // Long enough that a call returning at the preliminary view
            // returns before it.
            Step::Sleep(Duration::from_millis(200)),
            final_at(Value::Nil, 400),
        ],
        _ => vec![snapshot_at(b("theirs"), 450)],
    }))
    .await;
    let options = ConnectOptions {
        cache_bytes_max: 8,
        ..ConnectOptions::default()
    };
    let client = connect(&server, options).await;
    client
        .invoke("kv.put", vec![b("k"), b("a value too big")], Levels::Weak)
        .await
        .expect("weak put");
    // The call returned once the final view came.
    assert_eq!(client.dep_time(), 400);
    assert_eq!(client.cache_entries(), vec![]);
    // The next snapshot read is sent at the write's commit time.
    let read = snapshot_get(&client, "k").await;
    assert_eq!(read.outcome, Ok(b("theirs")));
    assert_eq!(sent_times(&server, "kv.get"), vec![400]);
    // Past that, reads go at the read time again.
    snapshot_get(&client, "k").await;
    assert_eq!(sent_times(&server, "kv.get"), vec![400, 450]);
}

#[tokio::test]
async fn a_weak_write_whose_stream_breaks_is_sent_again_for_its_commit_time() {
    let server = serve(Mock::new(1, move |req| match levels_of(req) {
        Levels::Weak => vec![
            preliminary(Value::Nil),
            Step::Fail(Status::unavailable("replica stopping")),
        ],
        Levels::Strong => vec![final_at(Value::Nil, 90)],
        other => panic!("unexpected {other:?}"),
    }))
    .await;
    let client = connect(&server, ConnectOptions::default()).await;
    client
        .invoke("kv.put", vec![b("k"), b("v")], Levels::Weak)
        .await
        .expect("weak put");
    until("the resent write's commit time", || {
        client.cache_entries().first().and_then(|e| e.commit_time) == Some(90)
    })
    .await;
    let seen = server.mock.seen();
    let ids: Vec<(u64, u64)> = seen
        .iter()
        .map(|s| (s.request.client_id, s.request.request_seq))
        .collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], ids[1], "sent again under the same request id");
}

#[tokio::test]
async fn a_strong_write_that_fails_leaves_the_cache() {
    let server = serve(Mock::new(1, |_| {
        vec![
            preliminary(Value::Nil),
            Step::Fail(Status::unavailable("replica stopping")),
        ]
    }))
    .await;
    let client = connect(&server, ConnectOptions::default()).await;
    let c = client
        .invoke("kv.put", vec![b("k"), b("v")], Levels::Both)
        .await
        .expect("put");
    assert!(c.final_view().await.is_err());
    assert_eq!(client.cache_entries(), vec![]);
}

#[tokio::test]
async fn reads_raise_the_read_time_and_writes_the_dependency_time() {
    for cache in [true, false] {
        let server = serve(Mock::new(1, move |req| {
            match (req.procedure.as_str(), levels_of(req)) {
                ("kv.get", Levels::Strong) => vec![final_at(b("v"), 30)],
                // Before the write's commit time if the read allows it.
                ("kv.get", Levels::Snapshot) => vec![snapshot_at(b("v"), req.read_time.max(35))],
                ("kv.put", Levels::Strong) => vec![final_at(Value::Nil, 40)],
                ("kv.put", Levels::Weak) => {
                    assert_eq!(req.weak_final, cache, "followed only with the cache");
                    vec![preliminary(Value::Nil), final_at(Value::Nil, 50)]
                }
                other => panic!("unexpected {other:?}"),
            }
        }))
        .await;
        let options = ConnectOptions {
            cache,
            ..ConnectOptions::default()
        };
        let client = connect(&server, options).await;
        for (procedure, args) in [("kv.get", vec![b("k")]), ("kv.put", vec![b("k"), b("w")])] {
            let c = client
                .invoke(procedure, args, Levels::Strong)
                .await
                .expect("call");
            c.final_view().await.expect("final");
        }
        assert_eq!((client.read_time(), client.dep_time()), (30, 40));
        let read = snapshot_get(&client, "k").await;
        // With the cache the write shows from it, and the read goes at the
        // read time; without, the read goes at the write's commit time.
        let (outcome, sent) = if cache { (b("w"), 30) } else { (b("v"), 40) };
        assert_eq!(read.outcome, Ok(outcome), "cache {cache}");
        assert_eq!(sent_times(&server, "kv.get"), vec![0, sent]);
        assert_eq!(client.read_time(), sent.max(35));
        let _ = client
            .invoke("kv.put", vec![b("k"), b("x")], Levels::Weak)
            .await
            .expect("weak put");
        assert_eq!(sent_times(&server, "kv.put"), vec![30, 40]);
    }
}
