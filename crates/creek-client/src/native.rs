//! The client's side of the native protocol ([`creek_proto::native`]):
//! `Invoke` over one TCP connection per replica (inside TLS when the
//! client uses TLS), beside the gRPC channel that carries everything
//! else. The calling task writes its request itself; one reader task
//! hands each answer to its call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::BytesMut;
use creek_proto::native::{self, FrameReader, Header, Kind, Read, HEADER_BYTES};
use creek_proto::pb;
use prost::Message;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tonic::{Code, Status};

/// The largest answer frame read: a view's value is bounded by the
/// replica's request limit, far below this.
const FRAME_BYTES_MAX: usize = 256 << 20;

/// What the reader hands a call.
enum Answer {
    /// The op's id as the replica names it (empty: a read-only weak call).
    Accepted(String),
    View(pb::View),
    End,
    Failed(Status),
}

/// Calls waiting for answers, by id.
#[derive(Default)]
struct Calls {
    waiting: HashMap<u64, mpsc::UnboundedSender<Answer>>,
    /// Why the connection is closed to new calls, once it is (the
    /// reader saw it end, or a frame was cut short).
    closed: Option<String>,
}

/// How a client invokes natively: the token its `Hello`s carry and, with
/// TLS, the one configuration its connections share.
#[derive(Clone, Debug)]
pub(crate) struct Native {
    pub(crate) token: Option<String>,
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
}

/// Where and how to reach one replica natively.
#[derive(Clone, Debug)]
pub(crate) struct Dial {
    /// `host:port`.
    pub(crate) addr: String,
    /// The token its `Hello` carries.
    pub(crate) token: Option<String>,
    /// The TLS configuration and the name the replica's certificate is
    /// checked for, when the client uses TLS.
    pub(crate) tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
}

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// A native connection to one replica.
pub(crate) struct NativeConn {
    writer: tokio::sync::Mutex<Writer>,
    calls: Arc<Mutex<Calls>>,
    next_id: AtomicU64,
    /// The reader task: stopped when the connection is dropped, which
    /// closes the socket (through TLS, its halves share one stream, so
    /// dropping the writer alone would not).
    reader: tokio::task::AbortHandle,
}

impl Drop for NativeConn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl NativeConn {
    /// Connect as `dial` says and say hello: `None` when the replica does
    /// not answer `Ready` within `timeout`.
    pub(crate) async fn connect(dial: &Dial, timeout: Duration) -> Option<Arc<NativeConn>> {
        let (rd, wr) = tokio::time::timeout(timeout, async {
            let stream = TcpStream::connect(&dial.addr).await.ok()?;
            stream.set_nodelay(true).ok()?;
            let (mut rd, mut wr): (Reader, Writer) = match &dial.tls {
                None => {
                    let (rd, wr) = stream.into_split();
                    (Box::new(rd), Box::new(wr))
                }
                Some((config, name)) => {
                    let connector = tokio_rustls::TlsConnector::from(config.clone());
                    let stream = connector.connect(name.clone(), stream).await.ok()?;
                    let (rd, wr) = tokio::io::split(stream);
                    (Box::new(rd), Box::new(wr))
                }
            };
            let mut hello = BytesMut::new();
            hello.extend_from_slice(&native::MAGIC);
            let token = dial.token.as_deref().unwrap_or_default().trim();
            native::put_frame(&mut hello, Kind::Hello, 0, token.as_bytes());
            wr.write_all(&hello).await.ok()?;
            wr.flush().await.ok()?;
            let mut ready = [0u8; HEADER_BYTES];
            rd.read_exact(&mut ready).await.ok()?;
            let header = Header::peek(&ready)?;
            (header.kind == Kind::Ready as u8 && header.body_bytes == 0).then_some((rd, wr))
        })
        .await
        .ok()??;
        let calls = Arc::new(Mutex::new(Calls::default()));
        let reader = tokio::spawn(read_answers(rd, calls.clone())).abort_handle();
        Some(Arc::new(NativeConn {
            writer: tokio::sync::Mutex::new(wr),
            calls,
            next_id: AtomicU64::new(1),
            reader,
        }))
    }

    /// Whether the connection has ended, or a frame was cut short on it.
    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.calls).closed.is_some()
    }

    /// Send `req` and wait for the replica to accept it: then its views
    /// follow through the returned [`NativeViews`].
    pub(crate) async fn invoke(
        self: &Arc<Self>,
        req: &pb::InvokeRequest,
        timeout: Option<Duration>,
    ) -> Result<NativeViews, Status> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let mut calls = lock(&self.calls);
            if let Some(why) = &calls.closed {
                return Err(lost(why));
            }
            calls.waiting.insert(id, tx);
        }
        let mut views = NativeViews {
            rx,
            conn: self.clone(),
            id,
            op: None,
        };
        let mut frame = BytesMut::new();
        native::put_invoke(&mut frame, id, timeout, req);
        {
            let mut writer = self.writer.lock().await;
            // A caller's deadline may drop this future in the middle of the
            // frame: the stream is then out of step, and no call may use
            // the connection again.
            let unfinished = Unfinished(&self.calls);
            // Through TLS, the last record may wait in the session until
            // flushed.
            let written = match writer.write_all(&frame).await {
                Ok(()) => writer.flush().await,
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                return Err(lost(&e.to_string()));
            }
            std::mem::forget(unfinished);
        }
        match views.rx.recv().await {
            Some(Answer::Accepted(op)) => {
                views.op = crate::OpRef::parse(&op);
                Ok(views)
            }
            Some(Answer::Failed(status)) => Err(status),
            Some(Answer::View(_) | Answer::End) => Err(Status::internal(
                "the replica answered a call before accepting it",
            )),
            None => Err(lost("the reader stopped")),
        }
    }
}

/// Marks the connection closed when dropped: a frame written in part.
struct Unfinished<'a>(&'a Mutex<Calls>);

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        lock(self.0)
            .closed
            .get_or_insert_with(|| "a frame was cut short".to_owned());
    }
}

/// The views of one accepted call.
pub(crate) struct NativeViews {
    rx: mpsc::UnboundedReceiver<Answer>,
    conn: Arc<NativeConn>,
    id: u64,
    /// The op's id, from the acceptance.
    pub(crate) op: Option<crate::OpRef>,
}

impl NativeViews {
    /// The next view; `None` once the replica ended the call.
    pub(crate) async fn message(&mut self) -> Result<Option<pb::View>, Status> {
        match self.rx.recv().await {
            Some(Answer::View(v)) => Ok(Some(v)),
            Some(Answer::End) => Ok(None),
            Some(Answer::Failed(status)) => Err(status),
            Some(Answer::Accepted(_)) => Err(Status::internal("the replica accepted a call twice")),
            None => Err(lost("the reader stopped")),
        }
    }
}

impl Drop for NativeViews {
    fn drop(&mut self) {
        lock(&self.conn.calls).waiting.remove(&self.id);
    }
}

/// The error of a call whose connection closed under it: the call may
/// have reached the replica, so it is retried under the same request id.
fn lost(why: &str) -> Status {
    Status::unavailable(format!("the connection to the replica closed: {why}"))
}

/// Read answers until the connection ends, then fail every call still
/// waiting.
async fn read_answers(mut rd: Reader, calls: Arc<Mutex<Calls>>) {
    let mut input = BytesMut::with_capacity(8 * 1024);
    let mut frames = FrameReader::new(FRAME_BYTES_MAX);
    let why = loop {
        match rd.read_buf(&mut input).await {
            Ok(0) => break "the replica closed it".to_owned(),
            Err(e) => break e.to_string(),
            Ok(_) => {}
        }
        if let Err(why) = dispatch(&mut input, &mut frames, &calls) {
            break why;
        }
    };
    let mut calls = lock(&calls);
    for (_, tx) in calls.waiting.drain() {
        let _ = tx.send(Answer::Failed(lost(&why)));
    }
    calls.closed = Some(why);
}

/// Hand every whole frame in `input` to its call; `Err` when the replica
/// broke the framing.
fn dispatch(
    input: &mut BytesMut,
    frames: &mut FrameReader,
    calls: &Mutex<Calls>,
) -> Result<(), String> {
    while let Some(read) = frames.next(input) {
        let (header, body) = match read {
            Read::Frame(header, body) => (header, body),
            Read::Oversized(header) => {
                return Err(format!(
                    "the replica sent a frame of {} bytes",
                    header.body_bytes
                ))
            }
        };
        let answer = match Kind::from_u8(header.kind) {
            Some(Kind::Accepted) => Answer::Accepted(String::from_utf8_lossy(&body).into_owned()),
            Some(Kind::View) => match pb::View::decode(body) {
                Ok(v) => Answer::View(v),
                Err(_) => Answer::Failed(Status::internal("the replica sent a malformed view")),
            },
            Some(Kind::End) => Answer::End,
            Some(Kind::Error) => Answer::Failed(status(&body)),
            _ => return Err(format!("the replica sent a frame of kind {}", header.kind)),
        };
        let mut calls = lock(calls);
        let last = matches!(answer, Answer::End | Answer::Failed(_));
        // A call dropped by its caller is no longer waiting: its answers
        // are dropped.
        let gone = match calls.waiting.get(&header.id) {
            Some(tx) => tx.send(answer).is_err(),
            None => false,
        };
        if last || gone {
            calls.waiting.remove(&header.id);
        }
    }
    Ok(())
}

/// The status an `Error` frame carries.
fn status(body: &[u8]) -> Status {
    match native::parse_error(body) {
        Ok((code, retry_after_ms, message)) => {
            let mut status = Status::new(Code::from_i32(code), message);
            if retry_after_ms > 0 {
                status
                    .metadata_mut()
                    .insert("retry-after-ms", retry_after_ms.into());
            }
            status
        }
        Err(why) => Status::internal(format!("the replica sent {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(calls: &Mutex<Calls>, id: u64) -> mpsc::UnboundedReceiver<Answer> {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(calls).waiting.insert(id, tx);
        rx
    }

    #[test]
    fn answers_reach_their_calls_in_order_and_the_last_one_ends_the_wait() {
        let calls = Mutex::new(Calls::default());
        let mut one = waiting(&calls, 1);
        let mut two = waiting(&calls, 2);
        let mut input = BytesMut::new();
        native::put_frame(&mut input, Kind::Accepted, 1, b"r1.1");
        native::put_frame(&mut input, Kind::Accepted, 2, b"r1.2");
        native::put_message(&mut input, Kind::View, 1, &pb::View::default());
        native::put_frame(&mut input, Kind::End, 1, &[]);
        let body = native::error_body(Code::DeadlineExceeded as i32, 0, "late");
        native::put_frame(&mut input, Kind::Error, 2, &body);
        // The last frame arrives in two pieces.
        let tail = input.split_off(input.len() - 3);
        let mut frames = FrameReader::new(FRAME_BYTES_MAX);
        dispatch(&mut input, &mut frames, &calls).expect("well-framed");
        assert!(
            lock(&calls).waiting.contains_key(&2),
            "its error is not whole yet"
        );
        input.extend_from_slice(&tail);
        dispatch(&mut input, &mut frames, &calls).expect("well-framed");
        assert!(matches!(one.try_recv(), Ok(Answer::Accepted(op)) if op == "r1.1"));
        assert!(matches!(one.try_recv(), Ok(Answer::View(_))));
        assert!(matches!(one.try_recv(), Ok(Answer::End)));
        assert!(matches!(two.try_recv(), Ok(Answer::Accepted(op)) if op == "r1.2"));
        match two.try_recv() {
            Ok(Answer::Failed(s)) => {
                assert_eq!((s.code(), s.message()), (Code::DeadlineExceeded, "late"))
            }
            _ => panic!("the error frame should fail call 2"),
        }
        assert!(lock(&calls).waiting.is_empty());
        assert!(input.is_empty());
    }

    #[test]
    fn a_frame_no_replica_sends_breaks_the_connection() {
        let calls = Mutex::new(Calls::default());
        let mut input = BytesMut::new();
        native::put_frame(&mut input, Kind::Invoke, 1, &[]);
        let mut frames = FrameReader::new(FRAME_BYTES_MAX);
        assert!(dispatch(&mut input, &mut frames, &calls).is_err());
    }
}
