//! `Creek.Watch` over real `creek serve` processes: a watcher sees every
//! committed change under its prefix once, in the committed order, across
//! a leader change and the loss of the replica it is connected to; a
//! compacted position is a typed error; bad requests are refused without
//! harm; `creek watch` prints one line per change.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Cluster, Value};
use creek_client::{CallOptions, Client, Error, Levels, WatchEvent, WatchOptions};
use creek_proto::pb;
use tokio_stream::StreamExt as _;

const T: Duration = Duration::from_secs(60);

/// `kv.put(key, value)` as a strong op, retried until it commits.
async fn put(client: &Client, key: &str, value: &str) {
    let give_up = Instant::now() + T;
    loop {
        let options = CallOptions {
            timeout: Some(Duration::from_secs(5)),
            ..CallOptions::default()
        };
        let attempt = async {
            client
                .invoke_with(
                    "kv.put",
                    vec![Value::from(key), Value::from(value)],
                    Levels::Strong,
                    options,
                )
                .await?
                .final_view()
                .await
        };
        match attempt.await {
            Ok(_) => return,
            Err(e) if Instant::now() < give_up => {
                eprintln!("put {key}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("put {key} never committed: {e}"),
        }
    }
}

/// The next event of `events`, within `T`.
async fn next<S>(events: &mut S) -> WatchEvent
where
    S: tokio_stream::Stream<Item = Result<WatchEvent, Error>> + Unpin,
{
    match tokio::time::timeout(T, events.next()).await {
        Ok(Some(Ok(e))) => e,
        Ok(Some(Err(e))) => panic!("the watch failed: {e}"),
        Ok(None) => panic!("the watch ended"),
        Err(_) => panic!("no event within {T:?}"),
    }
}

fn text(b: &Bytes) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_each_committed_change_once_in_order_across_leader_and_replica_loss() {
    let started = Instant::now();
    let mut cluster = Cluster::start(3).await;
    let addrs: Vec<String> = cluster.clients.iter().map(|a| a.to_string()).collect();
    let leader = cluster.wait_for_leader(T).await;
    let watched = (leader + 1) % 3;
    let third = (leader + 2) % 3;

    // The watcher starts at a follower, and moves on to the third replica.
    let order = [watched, third, leader].map(|i| addrs[i].clone());
    let watcher = Client::connect(order).await.expect("connect the watcher");
    let mut events = Box::pin(watcher.watch(
        "w/",
        WatchOptions {
            from: Some(0),
            tentative: false,
            ..Default::default()
        },
    ));
    let writer = Client::connect(addrs.clone())
        .await
        .expect("connect the writer");

    let n = 60;
    let mut seen: Vec<WatchEvent> = Vec::new();
    let mut keys = BTreeSet::new();
    let write = |from: usize, to: usize| {
        let writer = writer.clone();
        async move {
            for i in from..to {
                put(&writer, &format!("w/{i:03}"), &format!("v{i}")).await;
                put(&writer, &format!("x/{i:03}"), "outside").await;
            }
        }
    };
    write(0, n / 3).await;
    // The leader goes: a new one is elected while the watch goes on.
    cluster.kill(leader);
    write(n / 3, 2 * n / 3).await;
    cluster.restart(leader).await;
    // The replica the watcher is connected to goes: it resumes at the third.
    while keys.len() < 2 * n / 3 {
        let e = next(&mut events).await;
        keys.insert(text(&e.key));
        seen.push(e);
    }
    cluster.kill(watched);
    write(2 * n / 3, n).await;
    while keys.len() < n {
        let e = next(&mut events).await;
        keys.insert(text(&e.key));
        seen.push(e);
    }

    assert_ne!(
        watcher.replica_addr(),
        addrs[watched],
        "the watch never left the killed replica"
    );
    // Only the prefix, every key, in committed order, each position once.
    assert!(seen
        .iter()
        .all(|e| e.key.starts_with(b"w/") && !e.tentative));
    let positions: Vec<u64> = seen.iter().map(|e| e.position).collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "positions not strictly increasing: {positions:?}"
    );
    assert_eq!(keys.len(), n);

    // The same changes, from position 0, at the replica that stayed up:
    // what the watcher received is exactly that sequence.
    let last = *positions.last().expect("events");
    let reference = Client::connect([addrs[third].clone()])
        .await
        .expect("connect");
    let mut again = Box::pin(reference.watch(
        "w/",
        WatchOptions {
            from: Some(0),
            tentative: false,
            ..Default::default()
        },
    ));
    let mut want = Vec::new();
    while want.last().is_none_or(|e: &WatchEvent| e.position < last) {
        want.push(next(&mut again).await);
    }
    assert_eq!(
        seen, want,
        "the watcher's changes differ from the committed order"
    );
    eprintln!(
        "{} changes watched across a leader change and a replica loss in {:?}",
        seen.len(),
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_position_is_a_typed_error_and_bad_requests_are_refused() {
    // A history of about 8 changes.
    let cluster = Cluster::start_with(1, |c| c.watch_history_bytes = 8 * 80).await;
    let addr = cluster.clients[0].to_string();
    let client = Client::connect([addr.clone()]).await.expect("connect");
    for i in 0..40 {
        put(&client, &format!("c/{i:03}"), "value").await;
    }
    let mut events = Box::pin(client.watch(
        "c/",
        WatchOptions {
            from: Some(0),
            tentative: false,
            ..Default::default()
        },
    ));
    let oldest = match tokio::time::timeout(T, events.next()).await {
        Ok(Some(Err(Error::Compacted { oldest, message }))) => {
            assert!(message.contains("compacted"), "{message}");
            oldest
        }
        other => panic!("expected a compacted error, got {other:?}"),
    };
    assert!(oldest > 0);
    assert!(
        events.next().await.is_none(),
        "the watch goes on after failing"
    );

    // From the oldest position named: the changes still held, in order.
    let mut events = Box::pin(client.watch(
        "c/",
        WatchOptions {
            from: Some(oldest),
            tentative: false,
            ..Default::default()
        },
    ));
    let first = next(&mut events).await;
    assert!(first.position >= oldest);
    // The history holds only the last changes.
    let k: u32 = text(&first.key)[2..].parse().expect("a c/NNN key");
    assert!(k >= 28, "c/{k:03} is older than the history should hold");

    // Bad requests: typed errors, and the replica serves on.
    let mut raw = cluster.client(0).await;
    let internal = raw
        .watch(pb::WatchRequest {
            prefix: Bytes::from_static(b"\0sessions"),
            from: None,
            tentative: false,
            ..Default::default()
        })
        .await
        .expect_err("an internal prefix");
    assert_eq!(internal.code(), tonic::Code::InvalidArgument);
    let long = raw
        .watch(pb::WatchRequest {
            prefix: Bytes::from(vec![b'a'; 5000]),
            from: None,
            tentative: false,
            ..Default::default()
        })
        .await
        .expect_err("a long prefix");
    assert_eq!(long.code(), tonic::Code::InvalidArgument);
    let compacted = raw
        .watch(pb::WatchRequest {
            prefix: Bytes::new(),
            from: Some(1),
            tentative: false,
            ..Default::default()
        })
        .await
        .expect_err("compacted");
    assert_eq!(compacted.code(), tonic::Code::OutOfRange);
    assert_eq!(
        compacted
            .metadata()
            .get("creek-compacted")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok()),
        Some(oldest)
    );
    // A position far in the future waits (nothing yet): no error.
    let future = raw
        .watch(pb::WatchRequest {
            prefix: Bytes::new(),
            from: Some(u64::MAX),
            tentative: false,
            ..Default::default()
        })
        .await;
    assert!(future.is_ok());
    assert!(cluster.status(0).await.is_some(), "the replica went down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tentative_changes_are_marked_and_then_committed() {
    let cluster = Cluster::start(1).await;
    let client = Client::connect([cluster.clients[0].to_string()])
        .await
        .expect("connect");
    // A stream does nothing until polled: a task reads it from now on.
    let stream = client.watch(
        "t/",
        WatchOptions {
            from: None,
            tentative: true,
            ..Default::default()
        },
    );
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        let mut stream = Box::pin(stream);
        while let Some(e) = stream.next().await {
            if tx.send(e).await.is_err() {
                return;
            }
        }
    });
    let mut events = tokio_stream::wrappers::ReceiverStream::new(rx);
    tokio::time::sleep(Duration::from_millis(500)).await;
    client
        .invoke_weak("kv.put", vec![Value::from("t/a"), Value::from("1")])
        .await
        .expect("invoke")
        .final_view()
        .await
        .expect("weak view");
    let first = next(&mut events).await;
    assert!(first.tentative, "{first:?}");
    assert_eq!(
        (text(&first.key), first.value.as_ref().map(text)),
        ("t/a".into(), Some("1".into()))
    );
    // The stabilizer commits the weak op: the same change, committed.
    let second = next(&mut events).await;
    assert!(!second.tentative, "{second:?}");
    assert_eq!(second.op, first.op);
    assert_eq!(second.key, first.key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creek_watch_prints_one_json_object_per_change() {
    use std::io::BufRead as _;
    let cluster = Cluster::start(1).await;
    let addr = cluster.clients[0].to_string();
    let client = Client::connect([addr.clone()]).await.expect("connect");
    put(&client, "j/1", "one").await;
    put(&client, "k/1", "other").await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(["watch", "--addr", &addr, "--from", "0", "-o", "json", "j/"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn creek watch");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.expect("line")).is_err() {
                return;
            }
        }
    });
    // Deleted through a procedure: `kv.delete`.
    client
        .invoke_strong("kv.delete", vec![Value::from("j/1")])
        .await
        .expect("invoke")
        .final_view()
        .await
        .expect("delete");
    let mut lines = Vec::new();
    while lines.len() < 2 {
        lines.push(rx.recv_timeout(T).expect("a line from creek watch"));
    }
    let _ = child.kill();
    let _ = child.wait();
    let objects: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(objects[0]["key"], "j/1");
    assert_eq!(objects[0]["value"], "one");
    assert_eq!(objects[0]["deleted"], false);
    assert_eq!(objects[1]["key"], "j/1");
    assert_eq!(objects[1]["deleted"], true);
    assert!(objects[0]["position"].as_u64() < objects[1]["position"].as_u64());
}

/// A keyspace's keys, written by user procedures, are watched by naming
/// the keyspace: the changes name the keys as the procedures do, and the
/// built-in data's watchers never see them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyspace_is_watched_by_its_name() {
    let cluster = Cluster::start(3).await;
    let addrs: Vec<String> = cluster.clients.iter().map(|a| a.to_string()).collect();
    let client = Client::connect(addrs.clone()).await.expect("connect");
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/procedures/message_groups.creek"
    );
    let source = std::fs::read_to_string(source).expect("the example");
    client
        .register_procedures(&source)
        .await
        .expect("registered");
    // From the first position: a watch opens when first polled.
    let options = |keyspace: Option<&str>| WatchOptions {
        from: Some(0),
        tentative: false,
        keyspace: keyspace.map(str::to_owned),
    };
    let mut members = Box::pin(client.watch("dev/", options(Some("members"))));
    let mut plain = Box::pin(client.watch("", options(None)));
    let joined = client
        .invoke_strong("join", vec![common::b("dev"), common::b("ann")])
        .await
        .expect("join");
    joined.final_view().await.expect("committed");
    put(&client, "after", "plain").await;
    let e = next(&mut members).await;
    assert_eq!(
        (text(&e.key), e.value.as_ref().map(text)),
        ("dev/ann".into(), Some("ann".into()))
    );
    // The plain watcher's first change is the plain key: the keyspace's
    // write went by unseen.
    let e = next(&mut plain).await;
    assert_eq!(text(&e.key), "after");

    // A bad keyspace name is refused by name.
    let refused = pb::creek_client::CreekClient::connect(format!("http://{}", addrs[0]))
        .await
        .expect("connect")
        .watch(pb::WatchRequest {
            keyspace: "no such".into(),
            ..Default::default()
        })
        .await
        .expect_err("a bad name");
    assert!(refused.message().contains("is not a name"), "{refused:?}");
}
