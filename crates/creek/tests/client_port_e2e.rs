//! The client port under clients that hold it without using it, over real
//! `creek serve` processes on loopback (docs/security.md, "Limits"): idle
//! connections are closed (a watch that stays open is not), a frame that
//! stalls is closed, a client that never reads its answers is cut off
//! with the replica's memory bounded, and connections past a cap are told
//! which cap they reached.

mod common;

use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::{b, creek, req, rss_kib, Cluster};
use creek_proto::native::{self, Header, Kind, HEADER_BYTES};
use creek_proto::pb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_stream::StreamExt;

/// How many of replica `i`'s log lines contain one of `needles`.
fn log_count(cluster: &Cluster, i: usize, needles: &[&str]) -> usize {
    let log = std::fs::read_to_string(cluster.log_path(i)).unwrap_or_default();
    needles.iter().map(|n| log.matches(n).count()).sum()
}

/// Waits until replica `i`'s log holds `n` lines with one of `needles`.
async fn log_shows(cluster: &Cluster, i: usize, needles: &[&str], n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while log_count(cluster, i, needles) < n {
        assert!(
            Instant::now() < deadline,
            "no {n} lines with one of {needles:?} within {within:?}; log:\n{}",
            cluster.log_tail(i)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A native connection that said `Hello`, and what it got back first.
async fn native_hello(addr: std::net::SocketAddr) -> (TcpStream, u8, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut hello = BytesMut::new();
    hello.extend_from_slice(&native::MAGIC);
    native::put_frame(&mut hello, Kind::Hello, 0, b"");
    s.write_all(&hello).await.expect("hello");
    let (kind, body) = read_frame(&mut s).await.expect("an answer to Hello");
    (s, kind, body)
}

/// The next frame's kind and body; `None` at the end of the stream.
async fn read_frame(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    tokio::time::timeout(Duration::from_secs(15), async {
        let mut head = [0u8; HEADER_BYTES];
        s.read_exact(&mut head).await.ok()?;
        let h = Header::peek(&head)?;
        let mut body = vec![0u8; h.body_bytes as usize];
        s.read_exact(&mut body).await.ok()?;
        Some((h.kind, body))
    })
    .await
    .expect("a frame or the end within 15 s")
}

/// The message of an `Error` frame's body.
fn error_message(kind: u8, body: &[u8]) -> String {
    assert_eq!(kind, Kind::Error as u8, "an Error frame");
    let (code, _, message) = native::parse_error(body).expect("an error body");
    assert_eq!(tonic::Code::from_i32(code), tonic::Code::Unavailable);
    message
}

/// Whether the other end closes `s` within `within` (what it sent before
/// is read and dropped).
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

/// With `client_idle_timeout_ms` at 1.5 s: a native connection that only
/// said hello and a gRPC connection with no call are closed (the native one
/// told why), a watch open longer than that still gets its change, and a
/// client whose connection was closed while idle calls again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_open_calls_are_not() {
    let cluster = Cluster::start_with(3, |c| c.client_idle_timeout_ms = 1_500).await;
    let addr = cluster.clients[0];
    let idle_lines = "closed a client connection: idle";
    // The first line of the kind is logged; later ones within 10 s are
    // counted only, so the native connection's is the one awaited.
    let (mut native_conn, kind, _) = native_hello(addr).await;
    assert_eq!(kind, Kind::Ready as u8);
    let (kind, body) = read_frame(&mut native_conn)
        .await
        .expect("told before the close");
    let why = error_message(kind, &body);
    assert!(why.contains("client_idle_timeout_ms"), "{why}");
    assert!(closed_within(&mut native_conn, Duration::from_secs(5)).await);
    log_shows(&cluster, 0, &[idle_lines], 1, Duration::from_secs(5)).await;

    // A gRPC connection that only said HTTP/2's preface and its settings:
    // closed too (the server's keepalive pings start only after 30 s).
    let mut h2 = TcpStream::connect(addr).await.expect("connect");
    let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    preface.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    h2.write_all(&preface).await.expect("preface");
    assert!(
        closed_within(&mut h2, Duration::from_secs(5)).await,
        "an idle HTTP/2 connection stays open"
    );

    // A watch (a call in progress) outlives the idle timeout.
    let mut watcher = cluster.client(0).await;
    let mut events = watcher
        .watch(pb::WatchRequest {
            prefix: bytes::Bytes::from_static(b"idle/"),
            ..Default::default()
        })
        .await
        .expect("watch")
        .into_inner();
    let client = creek_client::Client::connect([addr.to_string()])
        .await
        .expect("connect");
    client
        .kv_put("warm", "up")
        .await
        .expect("put")
        .final_view()
        .await
        .expect("final");
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    // The client's connections were idle meanwhile and were closed: it
    // connects again.
    client
        .kv_put("idle/k", "v")
        .await
        .expect("a put after the idle close")
        .final_view()
        .await
        .expect("its final view");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = false;
    while !seen && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(10), events.next()).await {
            Ok(Some(Ok(event))) => {
                seen = event.changes.iter().any(|c| c.key.as_ref() == b"idle/k");
            }
            other => panic!("the watch ended or failed: {other:?}"),
        }
    }
    assert!(seen, "the watch open past the idle timeout got its change");
}

/// A frame whose bytes trickle in is closed `client_io_timeout_ms` after
/// its first byte, told why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_that_trickles_in_is_closed() {
    let cluster = Cluster::start_with(3, |c| c.client_io_timeout_ms = 1_000).await;
    let (mut s, kind, _) = native_hello(cluster.clients[0]).await;
    assert_eq!(kind, Kind::Ready as u8);
    let mut frame = BytesMut::new();
    native::put_invoke(
        &mut frame,
        1,
        None,
        &req(
            "kv.put",
            &[b("k"), b(&"v".repeat(500_000))],
            &[pb::Level::Weak],
        ),
    );
    let started = Instant::now();
    let mut closed = false;
    for byte in frame.chunks(1).take(40) {
        if s.write_all(byte).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (kind, body) = read_frame(&mut s).await.expect("told before the close");
    let why = error_message(kind, &body);
    assert!(why.contains("client_io_timeout_ms"), "{why}");
    assert!(closed || closed_within(&mut s, Duration::from_secs(5)).await);
    assert!(started.elapsed() < Duration::from_secs(5));
    log_shows(
        &cluster,
        0,
        &["was not finished within 1000 ms"],
        1,
        Duration::from_secs(5),
    )
    .await;
}

/// A client that pipelines 20,000 gets of a 16 KiB value (320 MiB of
/// answers) and never reads: the replica cuts it off once 4 MiB of answers
/// wait (or its writes stall 10 s, whichever comes first), and its
/// memory stays bounded: under 160 MiB more at the cut and under 64 MiB
/// more within 20 s (once the ops it got in commit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_cut_off() {
    let cluster = Cluster::start_with(3, |c| c.client_out_bytes_max = 4 << 20).await;
    let addr = cluster.clients[0];
    let client = creek_client::Client::connect([addr.to_string()])
        .await
        .expect("connect");
    client
        .kv_put("big", "v".repeat(16 << 10))
        .await
        .expect("put")
        .final_view()
        .await
        .expect("committed");
    let pid = cluster.pid(0).expect("replica 1 runs");
    let before = rss_kib(pid);
    let (s, kind, _) = native_hello(addr).await;
    assert_eq!(kind, Kind::Ready as u8);
    let get = req("kv.get", &[b("big")], &[pb::Level::Weak]);
    let mut frames = BytesMut::new();
    for id in 1..=20_000 {
        native::put_invoke(&mut frames, id, None, &get);
    }
    // Written, never read: the replica's writes stop when the socket's
    // buffers fill, and its reads once it closes the connection.
    let (mut rd, mut wr) = s.into_split();
    let writer = tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(20), wr.write_all(&frames)).await;
        wr
    });
    // Cut off by the answers it left unread or, when the replica serves
    // the gets slower than the socket's buffers fill (a loaded machine:
    // CI saw it), by its writes making no progress: either way the same
    // close, and the same bounds on memory below.
    log_shows(
        &cluster,
        0,
        &[
            "left more than 4194304 bytes of answers unread (client_out_bytes_max)",
            "the client took no answer bytes for",
        ],
        1,
        Duration::from_secs(20),
    )
    .await;
    let at_cut = rss_kib(pid);
    let at_cut_mib = at_cut.saturating_sub(before) / 1024;
    // Unbounded, the answers alone would take 320 MiB. What grows is the
    // answers queued (4 MiB) and in the socket's buffers, and the ops the
    // client got in, held until they commit.
    assert!(
        at_cut_mib < 160,
        "the replica's memory grew by {at_cut_mib} MiB before it cut off a client that does \
         not read"
    );
    // Under 64 MiB more once those ops commit, within 20 s (on a loaded
    // machine commits lag: CI saw 68 MiB at the cut).
    let mut after = at_cut;
    for _ in 0..40 {
        after = rss_kib(pid);
        if after.saturating_sub(before) / 1024 < 64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let grown_mib = after.saturating_sub(before) / 1024;
    eprintln!(
        "replica 1 RSS {before} KiB before, {at_cut} KiB at the cut, {after} KiB later \
         ({grown_mib} MiB more than before)"
    );
    assert!(
        grown_mib < 64,
        "the replica's memory was still {grown_mib} MiB above what it was 20 s after it cut \
         off a client that does not read"
    );
    let mut buf = vec![0u8; 64 << 10];
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        while rd.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    })
    .await;
    assert!(drained.is_ok(), "the replica closed the connection");
    let _ = writer.await;
    // The replica serves on.
    client
        .kv_get("big")
        .await
        .expect("get")
        .final_view()
        .await
        .expect("served");
}

/// Past `connections_per_client_max`, a native connection is answered
/// with an error naming the cap in place of `Ready`, and a gRPC call (the
/// CLI's) prints it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_told_which_cap() {
    let cluster = Cluster::start_with(3, |c| c.connections_per_client_max = 12).await;
    let addr = cluster.clients[0];
    let mut held = Vec::new();
    let message = loop {
        let (s, kind, body) = native_hello(addr).await;
        if kind == Kind::Ready as u8 {
            held.push(s);
            assert!(held.len() <= 12, "more than the cap admitted");
            continue;
        }
        break error_message(kind, &body);
    };
    assert!(
        message.contains("12 client connections from 127.0.0.1 (connections_per_client_max)"),
        "{message}"
    );
    let (code, out, err) = creek(&["call", "--addr", &addr.to_string(), "kv.get", "k"]);
    assert_ne!(code, Some(0), "the call cannot be served: {out}");
    assert!(
        err.contains("connections_per_client_max"),
        "the CLI names the cap: {err}"
    );
    drop(held);
    let (code, out, err) = creek(&["call", "--addr", &addr.to_string(), "kv.get", "k"]);
    assert_eq!(
        code,
        Some(0),
        "served once the connections closed: {out} {err}"
    );
}
