//! The server's side of the native client protocol
//! ([`creek_proto::native`]). One task per connection reads its frames,
//! checks each `Invoke` as gRPC does ([`CreekService::prepare_invoke`])
//! and hands it to the node loop with a [`Call`] as where its replies go.
//! The node loop queues a call's replies during its turn and writes each
//! connection's at the end of it, from its own thread, when nothing else
//! waits to be written there (no thread is woken to answer); what the
//! socket does not take at once waits, in order, for the connection's task.
//!
//! The checks are the gRPC service's: the same limits, the same token
//! check (the token comes once, in `Hello`, and is checked on every call,
//! so a revoked token stops working at once), the same error codes. A
//! frame over the decode limit is answered `RESOURCE_EXHAUSTED` and its
//! body skipped; the connection goes on.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use creek_core::ViewKind;
use creek_procs::auth::Need;
use creek_proto::native::{self, FrameReader, Header, Kind, Read};
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify};
use tonic::metadata::MetadataMap;
use tonic::Status;

use crate::metrics::{Metrics, Stage};
use crate::node_loop::{Event, Gone, Invocation, Reply, ReplyTo};
use crate::service::CreekService;

/// What one connection may send and hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NativeLimits {
    /// The largest frame body read (the gRPC decoder's limit).
    pub(crate) frame_bytes_max: usize,
    /// Calls in flight at once (gRPC's streams per connection).
    pub(crate) calls_max: usize,
}

/// How long a connection may take to send its first bytes, which say
/// which protocol it speaks.
pub(crate) const SNIFF_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection's writing side, shared by its task and the node loop.
///
/// Order: bytes reach the socket in the order they were handed over. A
/// sender writes to the socket itself only while nothing is pending and the
/// task is not writing; otherwise its bytes join `pending`, which the task
/// writes, so frames never interleave.
struct Out {
    socket: Arc<TcpStream>,
    state: Mutex<OutState>,
    /// Wakes the task: bytes are pending, or the connection broke.
    wake: Notify,
}

#[derive(Default)]
struct OutState {
    /// Bytes waiting for the task.
    pending: BytesMut,
    /// The task has taken bytes it has not finished writing.
    writing: bool,
    /// The connection is gone: nothing more is written.
    broken: bool,
    /// The calls still open (no closing frame written), and whether each
    /// has had its first view.
    open: HashMap<u64, bool>,
    /// Frames the node loop wrote this turn, written at its end
    /// ([`Corked`]).
    corked: BytesMut,
}

impl Out {
    fn lock(&self) -> MutexGuard<'_, OutState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Write `frames` now if nothing waits, else after what waits.
    fn write(&self, mut st: MutexGuard<'_, OutState>, frames: &[u8]) -> Result<(), Gone> {
        if st.broken {
            return Err(Gone);
        }
        if st.pending.is_empty() && !st.writing {
            match crate::transport::write_now(&self.socket, frames) {
                Ok(n) if n == frames.len() => return Ok(()),
                Ok(n) => st.pending.extend_from_slice(&frames[n..]),
                Err(_) => {
                    st.broken = true;
                    drop(st);
                    self.wake.notify_one();
                    return Err(Gone);
                }
            }
        } else {
            st.pending.extend_from_slice(frames);
        }
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    /// Write what is pending, until nothing is.
    async fn flush(&self) -> Result<(), Gone> {
        loop {
            let bytes = {
                let mut st = self.lock();
                if st.broken {
                    return Err(Gone);
                }
                if st.pending.is_empty() {
                    st.writing = false;
                    return Ok(());
                }
                st.writing = true;
                st.pending.split().freeze()
            };
            if crate::transport::write_all_shared(&self.socket, &bytes)
                .await
                .is_err()
            {
                self.lock().broken = true;
                return Err(Gone);
            }
        }
    }
}

/// The native connections the node loop wrote frames to this turn. It
/// writes them at the end of the turn, one write per connection (a weak
/// op's acceptance and view in one), before any peer frame of the turn:
/// a client's answer does not wait behind the wake-ups of the peers.
#[derive(Default)]
pub struct Corked(Mutex<Vec<Arc<Out>>>);

impl Corked {
    /// Write every connection's frames of this turn.
    pub(crate) fn uncork(&self) {
        let outs = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        for out in outs {
            let mut st = out.lock();
            let frames = st.corked.split();
            if !frames.is_empty() {
                let _ = out.write(st, &frames);
            }
        }
    }
}

/// One call on a native connection: where the node loop sends its replies
/// ([`ReplyTo::Native`]), written at the end of its turn ([`Corked`]).
#[derive(Clone)]
pub struct Call {
    out: Arc<Out>,
    corked: Arc<Corked>,
    id: u64,
    /// A stable view will come: the first view does not close the call.
    final_view: bool,
    strong: bool,
    received: Instant,
    metrics: Arc<Metrics>,
}

impl Call {
    /// Queue `reply`'s frames (and `End` after the closing view) for the
    /// end of the turn; `Err` once the connection is gone or the call is
    /// closed (its deadline passed).
    pub(crate) fn send(&self, reply: Reply) -> Result<(), Gone> {
        let mut st = self.out.lock();
        if st.broken {
            return Err(Gone);
        }
        let first = st.corked.is_empty();
        let st = &mut *st;
        let frames = &mut st.corked;
        let Some(answered) = st.open.get_mut(&self.id) else {
            return Err(Gone);
        };
        let closes = match reply {
            Reply::Accepted(handle) => {
                let op = crate::service::op_name(handle).unwrap_or_default();
                native::put_frame(frames, Kind::Accepted, self.id, op.as_bytes());
                false
            }
            Reply::View(v) => {
                if !*answered {
                    *answered = true;
                    let since = self.received.elapsed().as_secs_f64();
                    self.metrics.stage(self.strong, Stage::Answered, since);
                }
                let view = crate::service::to_pb_view(&v);
                native::put_message(frames, Kind::View, self.id, &view);
                let closes = v.kind != ViewKind::Tentative || !self.final_view;
                if closes {
                    native::put_frame(frames, Kind::End, self.id, &[]);
                }
                closes
            }
            Reply::Rejected(e) => {
                put_error(frames, self.id, &crate::service::rejected(e));
                true
            }
            Reply::Denied(d) => {
                put_error(frames, self.id, &Status::permission_denied(d.to_string()));
                true
            }
            Reply::Failed(why) => {
                put_error(frames, self.id, &Status::unavailable(why));
                true
            }
        };
        if closes {
            st.open.remove(&self.id);
        }
        if first {
            self.corked
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(self.out.clone());
        }
        Ok(())
    }

    /// Whether the connection is gone or the call closed.
    pub(crate) fn is_closed(&self) -> bool {
        let st = self.out.lock();
        st.broken || !st.open.contains_key(&self.id)
    }
}

/// Serve one native connection whose first bytes are [`native::MAGIC`]
/// (not yet read) until the client closes it, it breaks the framing, or
/// the replica stops.
pub(crate) async fn serve(
    service: CreekService,
    stream: crate::limits::CappedStream,
    limits: NativeLimits,
    corked: Arc<Corked>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (socket, _slot) = stream.into_parts();
    let _open = Open::new(&service.metrics.native_connections);
    let socket = Arc::new(socket);
    let mut conn = Connection {
        out: Arc::new(Out {
            socket: socket.clone(),
            state: Mutex::new(OutState::default()),
            wake: Notify::new(),
        }),
        corked,
        service,
        limits,
        credentials: MetadataMap::new(),
        frames: FrameReader::new(limits.frame_bytes_max),
        deadlines: BTreeSet::new(),
    };
    let mut input = BytesMut::with_capacity(8 * 1024);
    let mut magic_read = false;
    loop {
        let next_deadline = conn.deadlines.first().map(|(at, _, _)| *at);
        tokio::select! {
            biased;
            () = stopped(&mut shutdown) => break,
            () = conn.out.wake.notified() => {
                if conn.out.flush().await.is_err() {
                    break;
                }
            }
            () = sleep_until(next_deadline) => conn.expire(),
            ready = socket.readable() => {
                if ready.is_err() {
                    break;
                }
                match read_some(&socket, &mut input) {
                    Ok(true) => {}
                    Ok(false) | Err(_) => break,
                }
                // The accept loop sniffed the magic bytes: drop them.
                if !magic_read {
                    if input.len() < native::MAGIC.len() {
                        continue;
                    }
                    input.advance(native::MAGIC.len());
                    magic_read = true;
                }
                if conn.take_frames(&mut input).await.is_err() {
                    break;
                }
            }
        }
    }
    // Calls still open get nothing more: the node loop's next reply to
    // each fails, and it forgets them.
    conn.out.lock().broken = true;
}

/// Once the replica stops (or is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Sleep until `at`, or forever.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Read what the socket has into `input`: `Ok(false)` at its end.
fn read_some(socket: &TcpStream, input: &mut BytesMut) -> std::io::Result<bool> {
    loop {
        input.reserve(8 * 1024);
        match socket.try_read_buf(input) {
            Ok(0) => return Ok(false),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(e),
        }
    }
}

/// One count in the open connections' gauge, taken back however the
/// connection's task ends.
struct Open(prometheus_client::metrics::gauge::Gauge);

impl Open {
    fn new(gauge: &prometheus_client::metrics::gauge::Gauge) -> Open {
        gauge.inc();
        Open(gauge.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One connection's state.
struct Connection {
    out: Arc<Out>,
    corked: Arc<Corked>,
    service: CreekService,
    limits: NativeLimits,
    /// The `authorization` header the `Hello`'s token stands for.
    credentials: MetadataMap,
    frames: FrameReader,
    /// The calls with a deadline, soonest first, with whether each is
    /// strong (the deadline's error says so in the metrics).
    deadlines: BTreeSet<(tokio::time::Instant, u64, bool)>,
}

impl Connection {
    /// Take every whole frame out of `input` and answer it; `Err` once the
    /// connection is gone.
    async fn take_frames(&mut self, input: &mut BytesMut) -> Result<(), Gone> {
        let mut out = BytesMut::new();
        while let Some(read) = self.frames.next(input) {
            match read {
                Read::Frame(header, body) => self.on_frame(header, body, &mut out).await,
                Read::Oversized(header) => {
                    let status = Status::resource_exhausted(format!(
                        "request of {} bytes exceeds the limit of {} bytes this replica \
                         decodes (2 × max_request_bytes + 4096)",
                        header.body_bytes, self.limits.frame_bytes_max
                    ));
                    put_error(&mut out, header.id, &status);
                }
            }
        }
        if out.is_empty() {
            return Ok(());
        }
        let st = self.out.lock();
        self.out.write(st, &out)
    }

    /// Answer one frame: `Ready` and refusals go to `out`; an accepted
    /// call's replies come from the node loop.
    async fn on_frame(&mut self, header: Header, body: Bytes, out: &mut BytesMut) {
        let received = Instant::now();
        match Kind::from_u8(header.kind) {
            Some(Kind::Hello) => {
                self.credentials = credentials(&body);
                native::put_frame(out, Kind::Ready, 0, &[]);
            }
            Some(Kind::Invoke) => {
                if let Err(status) = self.invoke(header.id, &body, received).await {
                    put_error(out, header.id, &status);
                }
            }
            _ => put_error(
                out,
                header.id,
                &Status::invalid_argument(format!(
                    "a frame of kind {} is not one a client sends",
                    header.kind
                )),
            ),
        }
    }

    /// Hand call `id` to the node loop, or say why not.
    #[allow(clippy::result_large_err)]
    async fn invoke(&mut self, id: u64, body: &[u8], received: Instant) -> Result<(), Status> {
        {
            let st = self.out.lock();
            if st.open.contains_key(&id) {
                // Its answers would be mixed with the open call's.
                return Err(Status::invalid_argument(format!(
                    "call id {id} is already in flight on this connection"
                )));
            }
            let open = st.open.len();
            if open >= self.limits.calls_max {
                return Err(Status::resource_exhausted(format!(
                    "{open} calls already in flight on this connection (the limit): wait for \
                     one to finish"
                )));
            }
        }
        let (timeout, req) = native::parse_invoke(body).map_err(Status::invalid_argument)?;
        let principal = match self.service.auth.as_deref() {
            Some(auth) => Some(auth.authorize(&self.credentials, None, &Need::Nothing)?),
            None => None,
        };
        let request = self.service.prepare_invoke(&req, timeout)?;
        let strong = request.strong;
        let call = Call {
            out: self.out.clone(),
            corked: self.corked.clone(),
            id,
            final_view: request.views.final_view,
            strong,
            received,
            metrics: self.service.metrics.clone(),
        };
        self.out.lock().open.insert(id, false);
        let inv = Invocation {
            request,
            reply: ReplyTo::Native(call),
            received,
            principal,
        };
        if self.service.events.send(Event::Invoke(inv)).await.is_err() {
            self.out.lock().open.remove(&id);
            return Err(Status::unavailable("the replica is shutting down"));
        }
        if let Some(t) = timeout {
            let at = tokio::time::Instant::from_std(received) + t;
            self.deadlines.insert((at, id, strong));
            self.forget_closed();
        }
        Ok(())
    }

    /// Close the calls whose deadline passed before their closing view.
    fn expire(&mut self) {
        let now = tokio::time::Instant::now();
        let mut frames = BytesMut::new();
        let mut st = self.out.lock();
        while let Some(&(at, id, strong)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            if st.open.remove(&id).is_some() {
                put_error(&mut frames, id, &self.service.late(strong).deadline());
            }
        }
        if !frames.is_empty() {
            let _ = self.out.write(st, &frames);
        }
    }

    /// Forget the deadlines of calls that closed before them, once they
    /// are most of those kept (so each costs O(1) on average).
    fn forget_closed(&mut self) {
        let st = self.out.lock();
        if self.deadlines.len() < 2 * st.open.len() + 64 {
            return;
        }
        self.deadlines.retain(|(_, id, _)| st.open.contains_key(id));
    }
}

/// The `authorization` header for a `Hello`'s token (none when empty or
/// not printable: the calls then fail `UNAUTHENTICATED` where a token is
/// needed, as a gRPC call without one does).
fn credentials(token: &[u8]) -> MetadataMap {
    let mut meta = MetadataMap::new();
    let token = String::from_utf8_lossy(token);
    let token = token.trim();
    if !token.is_empty() {
        if let Ok(value) = format!("Bearer {token}").parse() {
            meta.insert("authorization", value);
        }
    }
    meta
}

/// An `Error` frame for `status`, with the `retry-after-ms` hint it carries.
fn put_error(out: &mut BytesMut, id: u64, status: &Status) {
    let retry_after_ms = status
        .metadata()
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let body = native::error_body(status.code() as i32, retry_after_ms, status.message());
    native::put_frame(out, Kind::Error, id, &body);
}

#[cfg(test)]
mod tests {
    use super::*;
    use creek_proto::native::HEADER_BYTES;

    #[test]
    fn a_hello_token_becomes_a_bearer_header() {
        let meta = credentials(b" creek_1_abc \n");
        assert_eq!(
            meta.get("authorization").and_then(|v| v.to_str().ok()),
            Some("Bearer creek_1_abc")
        );
        assert!(credentials(b"").get("authorization").is_none());
        assert!(credentials(b"bad\x01token").get("authorization").is_none());
    }

    /// A connection's two ends on loopback: the replica's side as an
    /// [`Out`], the client's as a plain socket. Small socket buffers, so
    /// large answers fill them.
    async fn pair() -> (Arc<Out>, tokio::net::TcpStream) {
        let small = |s: &tokio::net::TcpSocket| {
            s.set_send_buffer_size(4096).expect("sndbuf");
            s.set_recv_buffer_size(4096).expect("rcvbuf");
        };
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        small(&socket);
        socket
            .bind("127.0.0.1:0".parse().expect("addr"))
            .expect("bind");
        let listener = socket.listen(8).expect("listen");
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        small(&socket);
        let client = socket.connect(listener.local_addr().expect("addr"));
        let (client, accepted) = tokio::join!(client, listener.accept());
        let out = Arc::new(Out {
            socket: Arc::new(accepted.expect("accept").0),
            state: Mutex::new(OutState::default()),
            wake: Notify::new(),
        });
        (out, client.expect("connect"))
    }

    fn call(out: &Arc<Out>, corked: &Arc<Corked>, id: u64, final_view: bool) -> Call {
        out.lock().open.insert(id, false);
        Call {
            out: out.clone(),
            corked: corked.clone(),
            id,
            final_view,
            strong: false,
            received: Instant::now(),
            metrics: Arc::new(Metrics::new()),
        }
    }

    fn view(id: u64, kind: ViewKind, value_bytes: usize) -> Reply {
        Reply::View(creek_core::View {
            handle: creek_core::ExecKey::Local(id),
            kind,
            outcome: Ok(Bytes::from(vec![b'v'; value_bytes])),
        })
    }

    /// What the client reads until `n` `End` frames came: (kind, id) of
    /// every frame, in order.
    async fn read_until_ends(client: &mut tokio::net::TcpStream, n: usize) -> Vec<(u8, u64)> {
        use tokio::io::AsyncReadExt;
        let mut reader = FrameReader::new(64 << 20);
        let mut input = BytesMut::new();
        let mut got = Vec::new();
        while got.iter().filter(|(k, _)| *k == Kind::End as u8).count() < n {
            let read = tokio::time::timeout(Duration::from_secs(10), client.read_buf(&mut input))
                .await
                .expect("frames within 10 s")
                .expect("read");
            assert!(read > 0, "the connection closed early");
            // A slow client: the writer often finds the socket full.
            tokio::time::sleep(Duration::from_micros(50)).await;
            while let Some(r) = reader.next(&mut input) {
                match r {
                    Read::Frame(h, _) => got.push((h.kind, h.id)),
                    Read::Oversized(h) => panic!("a frame of {} bytes", h.body_bytes),
                }
            }
        }
        got
    }

    #[tokio::test]
    async fn answers_written_from_another_thread_arrive_whole_and_in_order() {
        let (out, mut client) = pair().await;
        let corked = Arc::new(Corked::default());
        // The connection's task: it writes what the socket did not take,
        // late (a busy runtime), so the socket drains meanwhile and the
        // writer finds room while bytes still wait.
        let task_out = out.clone();
        let task = tokio::spawn(async move {
            loop {
                task_out.wake.notified().await;
                tokio::time::sleep(Duration::from_millis(2)).await;
                if task_out.flush().await.is_err() {
                    return;
                }
            }
        });
        // The "node loop": 32 turns of 4 calls, each answered with a
        // preliminary view of 16 KiB and a final one: more than the socket
        // takes at once.
        let calls: Vec<Call> = (1..=128).map(|id| call(&out, &corked, id, true)).collect();
        let writer = std::thread::spawn(move || {
            for turn in calls.chunks(4) {
                for c in turn {
                    c.send(Reply::Accepted(creek_core::ExecKey::Local(c.id)))
                        .expect("open");
                    c.send(view(c.id, ViewKind::Tentative, 16 << 10))
                        .expect("open");
                    c.send(view(c.id, ViewKind::Stable, 8)).expect("open");
                }
                corked.uncork();
                // The client reads meanwhile: the socket takes more while
                // earlier bytes may still wait for the task.
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let got = read_until_ends(&mut client, 128).await;
        writer.join().expect("the writer");
        let expected: Vec<(u8, u64)> = (1..=128)
            .flat_map(|id| {
                [Kind::Accepted, Kind::View, Kind::View, Kind::End].map(|k| (k as u8, id))
            })
            .collect();
        assert_eq!(got, expected);
        assert!(out.lock().open.is_empty(), "every call closed");
        task.abort();
    }

    #[tokio::test]
    async fn a_closed_call_takes_no_more_answers() {
        let (out, mut client) = pair().await;
        let corked = Arc::new(Corked::default());
        // A weak op's one view closes its call; a later reply is refused.
        let weak = call(&out, &corked, 1, false);
        weak.send(view(1, ViewKind::Tentative, 8)).expect("open");
        assert!(weak.is_closed());
        assert_eq!(weak.send(view(1, ViewKind::Stable, 8)), Err(Gone));
        // A call whose deadline closed it (the task removes it) too.
        let strong = call(&out, &corked, 2, true);
        out.lock().open.remove(&2);
        assert_eq!(strong.send(view(2, ViewKind::Stable, 8)), Err(Gone));
        corked.uncork();
        let got = read_until_ends(&mut client, 1).await;
        assert_eq!(got, [(Kind::View as u8, 1), (Kind::End as u8, 1)]);
        // A broken connection refuses every reply.
        let third = call(&out, &corked, 3, true);
        out.lock().broken = true;
        assert_eq!(third.send(view(3, ViewKind::Stable, 8)), Err(Gone));
        assert!(third.is_closed());
    }

    #[test]
    fn an_error_frame_carries_the_retry_hint() {
        let mut status = Status::resource_exhausted("the disk is behind");
        status.metadata_mut().insert("retry-after-ms", 100.into());
        let mut out = BytesMut::new();
        put_error(&mut out, 9, &status);
        let header = Header::peek(&out).expect("a header");
        assert_eq!((header.kind, header.id), (Kind::Error as u8, 9));
        let (code, retry, message) =
            native::parse_error(&out[HEADER_BYTES..]).expect("an error body");
        assert_eq!(code, tonic::Code::ResourceExhausted as i32);
        assert_eq!(retry, 100);
        assert_eq!(message, "the disk is behind");
    }
}
