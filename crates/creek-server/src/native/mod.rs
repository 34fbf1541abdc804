//! The server's side of the native client protocol
//! ([`creek_proto::native`]). One task per connection reads its frames,
//! checks each `Invoke` as gRPC does ([`crate::call::check`]) and hands it
//! to the node loop with a [`Call`] as where its replies go
//! ([`out`]).
//! The node loop queues a call's replies during its turn and writes each
//! connection's at the end of it, from its own thread, when nothing else
//! waits to be written there (no thread is woken to answer); what the
//! socket does not take at once waits, in order, for the connection's task.
//!
//! The checks are the gRPC service's, from the same place
//! ([`crate::call`]): the same limits, the same token check (the token
//! comes once, in `Hello`, and is checked on every call, so a revoked token
//! stops working at once), the same error codes. A
//! frame over the decode limit is answered `RESOURCE_EXHAUSTED` and its
//! body skipped; the connection goes on.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use creek_procs::auth::Need;
use creek_proto::native::{self, FrameReader, Header, Kind, Read};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tonic::metadata::MetadataMap;
use tonic::Status;

use crate::call::answer::{put_error, Gone};
use crate::call::check::FrontDoor;
use crate::node_loop::messages::{Invocation, ReplyTo};

pub(crate) mod out;

use out::{Call, Corked, Out};

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

/// Serve one native connection whose first bytes were [`native::MAGIC`]
/// (read by the accept loop's sniff) until the client closes it, it breaks
/// the framing, or the replica stops.
pub(crate) async fn serve(
    front: FrontDoor,
    stream: crate::limits::CappedStream,
    limits: NativeLimits,
    corked: Arc<Corked>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (socket, _slot) = stream.into_parts();
    let _open = Open::new(&front.metrics.native_connections);
    let socket = Arc::new(socket);
    let mut conn = Connection {
        out: Arc::new(Out::new(socket.clone())),
        corked,
        front,
        limits,
        credentials: MetadataMap::new(),
        frames: FrameReader::new(limits.frame_bytes_max),
        deadlines: BTreeSet::new(),
    };
    let mut input = BytesMut::with_capacity(8 * 1024);
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
    front: FrontDoor,
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
            if st.is_open(id) {
                // Its answers would be mixed with the open call's.
                return Err(Status::invalid_argument(format!(
                    "call id {id} is already in flight on this connection"
                )));
            }
            let open = st.calls_open();
            if open >= self.limits.calls_max {
                return Err(Status::resource_exhausted(format!(
                    "{open} calls already in flight on this connection (the limit): wait for \
                     one to finish"
                )));
            }
        }
        let (timeout, req) = native::parse_invoke(body).map_err(Status::invalid_argument)?;
        let principal = self.front.caller(&self.credentials, None, &Need::Nothing)?;
        let request = self.front.prepare(&req, timeout)?;
        let strong = request.strong;
        self.out.lock().open_call(id, self.limits.calls_max);
        let call = Call::new(
            self.out.clone(),
            self.corked.clone(),
            id,
            request.views,
            strong,
            received,
            self.front.metrics.clone(),
        );
        let inv = Invocation {
            request,
            reply: ReplyTo::Native(call),
            received,
            principal,
        };
        if let Err(status) = self.front.submit(inv).await {
            // The node loop never had it: nothing else closed it.
            let closed = self.out.lock().close_call(id);
            assert!(
                closed.is_some(),
                "call {id} closed before it was handed over"
            );
            return Err(status);
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
            if let Some(op) = st.close_call(id) {
                let mut late = self.front.late(strong);
                if let Some(op) = op {
                    late = late.of(op, self.front.mpo.as_ref());
                }
                put_error(&mut frames, id, &late.deadline());
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
        if self.deadlines.len() < 2 * st.calls_open() + 64 {
            return;
        }
        self.deadlines.retain(|(_, id, _)| st.is_open(*id));
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
