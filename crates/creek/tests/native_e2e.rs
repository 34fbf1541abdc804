//! The native client protocol over real `creek serve` processes
//! (docs/protocol.md, "The native client protocol"): it shares the client
//! port with gRPC, answers calls with the views gRPC would give, takes
//! many calls in one write, and answers bad frames with a typed error
//! that changes nothing and keeps the connection.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use bytes::BytesMut;
use common::{b, req, strong_get, Cluster, Value};
use creek_proto::native::{self, Header, Kind, HEADER_BYTES};
use creek_proto::pb;
use pb::Level;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::Code;

/// A hand-written native client: frames in, frames out.
struct Raw(TcpStream);

/// One answer frame.
#[derive(Debug)]
enum Frame {
    Accepted(String),
    View(pb::View),
    End,
    Error(Code, String),
}

impl Raw {
    async fn connect(addr: std::net::SocketAddr) -> Raw {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let mut hello = BytesMut::new();
        hello.extend_from_slice(&native::MAGIC);
        native::put_frame(&mut hello, Kind::Hello, 0, b"");
        s.write_all(&hello).await.expect("hello");
        let mut raw = Raw(s);
        let (kind, id, _) = raw.read().await;
        assert_eq!(
            (kind, id),
            (Kind::Ready as u8, 0),
            "Hello is answered Ready"
        );
        raw
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).await.expect("send");
    }

    async fn invoke(&mut self, id: u64, r: &pb::InvokeRequest) {
        let mut out = BytesMut::new();
        native::put_invoke(&mut out, id, Some(Duration::from_secs(10)), r);
        self.send(&out).await;
    }

    async fn read(&mut self) -> (u8, u64, Vec<u8>) {
        tokio::time::timeout(Duration::from_secs(15), async {
            let mut head = [0u8; HEADER_BYTES];
            self.0.read_exact(&mut head).await.expect("a header");
            let h = Header::peek(&head).expect("13 bytes");
            let mut body = vec![0u8; h.body_bytes as usize];
            self.0.read_exact(&mut body).await.expect("a body");
            (h.kind, h.id, body)
        })
        .await
        .expect("an answer within 15 s")
    }

    /// Read frames until calls `ids` have all ended (End or Error).
    async fn answers(&mut self, ids: &[u64]) -> HashMap<u64, Vec<Frame>> {
        let mut got: HashMap<u64, Vec<Frame>> = HashMap::new();
        let mut open = ids.len();
        while open > 0 {
            let (kind, id, body) = self.read().await;
            assert!(
                ids.contains(&id),
                "a frame for call {id}, not one of {ids:?}"
            );
            let frame = match Kind::from_u8(kind) {
                Some(Kind::Accepted) => Frame::Accepted(String::from_utf8(body).expect("utf-8")),
                Some(Kind::View) => Frame::View(pb::View::decode(&body[..]).expect("a view")),
                Some(Kind::End) => Frame::End,
                Some(Kind::Error) => {
                    let (code, _, message) = native::parse_error(&body).expect("an error");
                    Frame::Error(Code::from_i32(code), message)
                }
                other => panic!("a replica sent a frame of kind {other:?}"),
            };
            if matches!(frame, Frame::End | Frame::Error(..)) {
                open -= 1;
            }
            got.entry(id).or_default().push(frame);
        }
        got
    }

    /// Call `r` as call `id` and return its frames.
    async fn call(&mut self, id: u64, r: &pb::InvokeRequest) -> Vec<Frame> {
        self.invoke(id, r).await;
        self.answers(&[id]).await.remove(&id).unwrap_or_default()
    }
}

/// The value of a view.
fn value(v: &pb::View) -> Value {
    match &v.outcome {
        Some(pb::view::Outcome::Value(v)) => creek_proto::from_wire(v).expect("a value"),
        other => panic!("not a value: {other:?}"),
    }
}

fn kind(v: &pb::View) -> pb::view::Kind {
    pb::view::Kind::try_from(v.kind).expect("a view kind")
}

fn error(frames: &[Frame]) -> (Code, String) {
    match frames {
        [Frame::Error(code, message)] => (*code, message.clone()),
        other => panic!("expected one error, got {other:?}"),
    }
}

async fn invoked(cluster: &Cluster, i: usize) -> u64 {
    let c = cluster.status(i).await.expect("status").counters;
    c.get("invoked_weak").copied().unwrap_or(0) + c.get("invoked_strong").copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_calls_share_the_port_with_grpc_and_bad_frames_change_nothing() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(20)).await;
    let mut raw = Raw::connect(cluster.clients[leader]).await;

    // A weak op: accepted under its op id, one preliminary view, the end.
    let put = req("kv.put", &[b("colour"), b("teal")], &[Level::Weak]);
    match raw.call(1, &put).await.as_slice() {
        [Frame::Accepted(op), Frame::View(v), Frame::End] => {
            assert!(op.starts_with('r') && op.contains('.'), "op id {op:?}");
            assert_eq!(kind(v), pb::view::Kind::Preliminary);
        }
        other => panic!("a weak op's frames: {other:?}"),
    }

    // A strong op asking for both views: the final one says 5.
    let incr = req(
        "kv.incr",
        &[b("n"), Value::Int(5)],
        &[Level::Weak, Level::Strong],
    );
    let frames = raw.call(2, &incr).await;
    assert!(
        matches!(frames.first(), Some(Frame::Accepted(_))),
        "{frames:?}"
    );
    assert!(matches!(frames.last(), Some(Frame::End)), "{frames:?}");
    let views: Vec<&pb::View> = frames
        .iter()
        .filter_map(|f| match f {
            Frame::View(v) => Some(v),
            _ => None,
        })
        .collect();
    // The closing view is the final one, or a confirmation of the last
    // preliminary one.
    let last = views.last().expect("views");
    assert_ne!(kind(last), pb::view::Kind::Preliminary, "{views:?}");
    let answer = views
        .iter()
        .rev()
        .find(|v| v.outcome.is_some())
        .expect("a view with a value");
    assert_eq!(value(answer), Value::Int(5));

    // gRPC on the same port sees what the native calls wrote.
    assert_eq!(strong_get(&cluster, leader, "colour").await, b("teal"));

    // Many calls in one write: each is answered under its own id.
    let mut batch = BytesMut::new();
    let ids: Vec<u64> = (10..20).collect();
    for &id in &ids {
        let r = req("kv.incr", &[b("many"), Value::Int(1)], &[Level::Strong]);
        native::put_invoke(&mut batch, id, Some(Duration::from_secs(10)), &r);
    }
    raw.send(&batch).await;
    let answered = raw.answers(&ids).await;
    let mut finals: Vec<i64> = answered
        .values()
        .map(|frames| match frames.as_slice() {
            [Frame::Accepted(_), Frame::View(v), Frame::End] => match value(v) {
                Value::Int(n) => n,
                other => panic!("not a count: {other:?}"),
            },
            other => panic!("a strong op's frames: {other:?}"),
        })
        .collect();
    finals.sort_unstable();
    assert_eq!(finals, (1..=10).collect::<Vec<_>>(), "each increment once");

    // A call id still in flight is refused; the open call goes on.
    let mut twice = BytesMut::new();
    let r = req("kv.incr", &[b("twice"), Value::Int(1)], &[Level::Strong]);
    native::put_invoke(&mut twice, 20, Some(Duration::from_secs(10)), &r);
    native::put_invoke(&mut twice, 20, Some(Duration::from_secs(10)), &r);
    raw.send(&twice).await;
    let frames = raw.answers(&[20, 20]).await.remove(&20).unwrap_or_default();
    let refused = frames
        .iter()
        .filter(|f| matches!(f, Frame::Error(Code::InvalidArgument, m) if m.contains("already in flight")))
        .count();
    assert_eq!(refused, 1, "{frames:?}");
    assert!(
        frames
            .iter()
            .any(|f| matches!(f, Frame::View(v) if value(v) == Value::Int(1))),
        "{frames:?}"
    );

    // Bad frames: each gets a typed error, nothing is invoked, and the
    // connection keeps serving.
    let before = invoked(&cluster, leader).await;
    let mut short = BytesMut::new();
    native::put_frame(&mut short, Kind::Invoke, 30, &[1, 2, 3]);
    raw.send(&short).await;
    let (code, message) = error(&raw.answers(&[30]).await[&30]);
    assert_eq!(code, Code::InvalidArgument, "{message}");

    let mut garbage = BytesMut::new();
    native::put_frame(
        &mut garbage,
        Kind::Invoke,
        31,
        &[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff],
    );
    raw.send(&garbage).await;
    let (code, message) = error(&raw.answers(&[31]).await[&31]);
    assert_eq!(code, Code::InvalidArgument, "{message}");
    assert!(message.contains("malformed"), "{message}");

    let unknown = req("kv.nope", &[b("k")], &[Level::Strong]);
    let (code, message) = error(&raw.call(32, &unknown).await);
    assert_eq!(code, Code::InvalidArgument, "{message}");
    assert!(message.contains("unknown procedure"), "{message}");

    let mut odd = BytesMut::new();
    native::put_frame(&mut odd, Kind::Ready, 33, &[]);
    raw.send(&odd).await;
    let (code, message) = error(&raw.answers(&[33]).await[&33]);
    assert_eq!(code, Code::InvalidArgument, "{message}");

    // 1.5 MB is over max_request_bytes (1 MiB) and under the decode limit:
    // the service refuses it. 3 MB is over the decode limit: the frame's
    // body is skipped unread. The same code either way, naming the setting.
    for (id, size) in [(34, 1_500_000), (35, 3_000_000)] {
        let big = req(
            "kv.put",
            &[b("big"), Value::Bytes(vec![b'x'; size].into())],
            &[Level::Strong],
        );
        let (code, message) = error(&raw.call(id, &big).await);
        assert_eq!(code, Code::ResourceExhausted, "{size}: {message}");
        assert!(message.contains("max_request_bytes"), "{size}: {message}");
    }
    assert_eq!(
        invoked(&cluster, leader).await,
        before,
        "no bad frame was invoked"
    );

    // The connection still serves, and nothing bad was applied.
    let get = req("kv.get", &[b("big")], &[Level::Strong]);
    match raw.call(40, &get).await.as_slice() {
        [Frame::Accepted(_), Frame::View(v), Frame::End] => assert_eq!(value(v), Value::Nil),
        other => panic!("a read after the bad frames: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_invokes_natively_and_over_grpc_alike() {
    let metrics = common::free_addr();
    let cluster = Cluster::start_with(1, |c| c.metrics_addr = Some(metrics)).await;
    let addr = cluster.clients[0].to_string();
    let mut natives = Vec::new();
    for grpc_only in [false, true] {
        let options = creek_client::ConnectOptions {
            grpc_only,
            ..Default::default()
        };
        let client = creek_client::Client::connect_with_options([addr.clone()], options)
            .await
            .expect("connect");
        let key = format!("k{grpc_only}");
        let c = client.kv_incr(&key, 2).await.expect("invoke");
        let done = c.final_view().await.expect("a final view");
        assert_eq!(done.outcome, Ok(Value::Int(2)));
        // Either way the Correctable names its op as the replica does.
        let op = c.op().expect("an op id");
        assert_eq!(op.origin, 1, "{grpc_only}: {op}");
        let read = client
            .invoke(
                "kv.get",
                vec![Value::from(key.as_str())],
                creek_client::Levels::Weak,
            )
            .await
            .expect("a weak read");
        assert_eq!(read.op(), None, "a local read is no op");
        let refused = client
            .invoke_strong("kv.nope", vec![])
            .await
            .expect_err("an unknown procedure is refused");
        assert!(
            matches!(refused, creek_client::Error::InvalidArgument(_)),
            "{grpc_only}: {refused:?}"
        );
        natives.push(native_connections(metrics).await);
        drop(client);
    }
    // The first client held a native connection; the second did not.
    assert_eq!(natives, [1.0, 0.0]);
}

/// The replica's `creek_native_connections` gauge, once it settles.
async fn native_connections(metrics: std::net::SocketAddr) -> f64 {
    common::native_connections(|| async move {
        let mut s = TcpStream::connect(metrics).await.expect("metrics endpoint");
        let request =
            format!("GET /metrics HTTP/1.1\r\nHost: {metrics}\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await.expect("request");
        let mut body = String::new();
        s.read_to_string(&mut body).await.expect("response");
        body
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_calls_natively_again_after_its_replica_restarts() {
    let metrics = common::free_addr();
    let mut cluster = Cluster::start_with(1, |c| c.metrics_addr = Some(metrics)).await;
    let client = creek_client::Client::connect([cluster.clients[0].to_string()])
        .await
        .expect("connect");
    let c = client.kv_incr("restarts", 1).await.expect("invoke");
    assert_eq!(
        c.final_view().await.expect("final").outcome,
        Ok(Value::Int(1))
    );
    assert_eq!(native_connections(metrics).await, 1.0);

    cluster.restart(0).await;
    cluster.wait_for_leader(Duration::from_secs(20)).await;
    // The first call may find the old connection closed only when it tries
    // it; the request id makes the retry safe.
    let mut answered = None;
    for _ in 0..50 {
        match client.kv_incr("restarts", 1).await {
            Ok(c) => {
                answered = Some(c.final_view().await.expect("final").outcome);
                break;
            }
            Err(e) if e.is_unavailable() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("after the restart: {e}"),
        }
    }
    assert_eq!(answered, Some(Ok(Value::Int(2))));
    // Later calls go native again, over a new connection.
    let c = client.kv_incr("restarts", 1).await.expect("invoke");
    assert_eq!(
        c.final_view().await.expect("final").outcome,
        Ok(Value::Int(3))
    );
    assert_eq!(native_connections(metrics).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_call_past_its_deadline_says_why() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(20)).await;
    let cut = (leader + 1) % 3;
    cluster.isolate(cut, true).await;
    let mut raw = Raw::connect(cluster.clients[cut]).await;
    let strong = req("kv.put", &[b("late"), b("v")], &[Level::Strong]);
    let mut frame = BytesMut::new();
    native::put_invoke(&mut frame, 7, Some(Duration::from_millis(400)), &strong);
    raw.send(&frame).await;
    let frames = raw.answers(&[7]).await.remove(&7).unwrap_or_default();
    // Accepted (the op is the replica's), then the deadline's error, which
    // closes the call: no view, no End.
    match frames.as_slice() {
        [Frame::Accepted(_), Frame::Error(Code::DeadlineExceeded, message)] => {
            assert!(message.contains("before the deadline"), "{message}");
        }
        other => panic!("a call past its deadline: {other:?}"),
    }
    // The connection goes on: a weak op at the cut-off replica answers.
    let weak = req("kv.put", &[b("w"), b("v")], &[Level::Weak]);
    match raw.call(8, &weak).await.as_slice() {
        [Frame::Accepted(_), Frame::View(_), Frame::End] => {}
        other => panic!("a weak op after the deadline: {other:?}"),
    }
    cluster.isolate(cut, false).await;
}
