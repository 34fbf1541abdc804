//! The server's side of the native client protocol
//! ([`creek_proto::native`]): one task per connection reads `Invoke`
//! frames, hands each to the node loop through the same
//! [`CreekService::start_invoke`] as gRPC, and writes every call's frames
//! back as they come, all that are ready in one write.
//!
//! The checks are the gRPC service's: the same limits, the same token
//! check (the token comes once, in `Hello`, and is checked on every call,
//! so a revoked token stops working at once), the same error codes. A
//! frame over the decode limit is answered `RESOURCE_EXHAUSTED` and its
//! body skipped; the connection goes on.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use creek_exec::auth::Need;
use creek_proto::native::{self, FrameReader, Header, Kind, Read};
use futures_util::stream::{BoxStream, SelectAll};
use futures_util::{FutureExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tonic::metadata::MetadataMap;
use tonic::Status;

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

/// Serve one native connection whose first bytes are [`native::MAGIC`]
/// (not yet read) until the client closes it, it breaks the framing, or
/// the replica stops.
pub(crate) async fn serve<S>(
    service: CreekService,
    stream: S,
    limits: NativeLimits,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let _open = Open::new(&service.metrics.native_connections);
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut magic = [0u8; 4];
    if rd.read_exact(&mut magic).await.is_err() || magic != native::MAGIC {
        return;
    }
    let mut conn = Connection {
        service,
        limits,
        credentials: MetadataMap::new(),
        calls: SelectAll::new(),
        frames: FrameReader::new(limits.frame_bytes_max),
    };
    let mut input = BytesMut::with_capacity(8 * 1024);
    let mut out = BytesMut::new();
    loop {
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => return,
            Some(frame) = conn.calls.next(), if !conn.calls.is_empty() => {
                out.extend_from_slice(&frame);
                // Everything else already answered goes in the same write.
                while let Some(Some(frame)) = conn.calls.next().now_or_never() {
                    out.extend_from_slice(&frame);
                }
            }
            read = rd.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => conn.take_frames(&mut input, &mut out),
            },
        }
        if !out.is_empty() {
            if wr.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
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
    service: CreekService,
    limits: NativeLimits,
    /// The `authorization` header the `Hello`'s token stands for.
    credentials: MetadataMap,
    /// The calls in flight, each a stream of its encoded frames.
    calls: SelectAll<BoxStream<'static, Bytes>>,
    frames: FrameReader,
}

impl Connection {
    /// Take every whole frame out of `input`; answers that need no node
    /// loop (errors, `Ready`) go to `out` at once.
    fn take_frames(&mut self, input: &mut BytesMut, out: &mut BytesMut) {
        while let Some(read) = self.frames.next(input) {
            match read {
                Read::Frame(header, body) => self.on_frame(header, body, out),
                Read::Oversized(header) => {
                    let status = Status::resource_exhausted(format!(
                        "request of {} bytes exceeds the limit of {} bytes this replica \
                         decodes (2 × max_request_bytes + 4096)",
                        header.body_bytes, self.limits.frame_bytes_max
                    ));
                    put_error(out, header.id, &status);
                }
            }
        }
    }

    fn on_frame(&mut self, header: Header, body: Bytes, out: &mut BytesMut) {
        let received = Instant::now();
        match Kind::from_u8(header.kind) {
            Some(Kind::Hello) => {
                self.credentials = credentials(&body);
                native::put_frame(out, Kind::Ready, 0, &[]);
            }
            Some(Kind::Invoke) => {
                if let Err(status) = self.invoke(header.id, &body, received) {
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

    /// Start call `id`, or say why not.
    #[allow(clippy::result_large_err)]
    fn invoke(&mut self, id: u64, body: &[u8], received: Instant) -> Result<(), Status> {
        if self.calls.len() >= self.limits.calls_max {
            return Err(Status::resource_exhausted(format!(
                "{} calls already in flight on this connection (the limit): wait for one \
                 to finish",
                self.calls.len()
            )));
        }
        let (timeout, req) = native::parse_invoke(body).map_err(Status::invalid_argument)?;
        let principal = match self.service.auth.as_deref() {
            Some(auth) => Some(auth.authorize(&self.credentials, None, &Need::Nothing)?),
            None => None,
        };
        let service = self.service.clone();
        let started = async move {
            service
                .start_invoke(&req, timeout, principal, received)
                .await
        };
        let frames = futures_util::stream::once(started).flat_map(move |started| {
            let mut first = BytesMut::new();
            match started {
                Ok((handle, views)) => {
                    let op = crate::service::op_name(handle).unwrap_or_default();
                    native::put_frame(&mut first, Kind::Accepted, id, op.as_bytes());
                    let views = views.map(move |view| {
                        let mut frame = BytesMut::new();
                        match view {
                            Ok(view) => native::put_message(&mut frame, Kind::View, id, &view),
                            Err(status) => put_error(&mut frame, id, &status),
                        }
                        frame.freeze()
                    });
                    let mut end = BytesMut::new();
                    native::put_frame(&mut end, Kind::End, id, &[]);
                    futures_util::stream::once(std::future::ready(first.freeze()))
                        .chain(views)
                        .chain(futures_util::stream::once(std::future::ready(end.freeze())))
                        .boxed()
                }
                Err(status) => {
                    put_error(&mut first, id, &status);
                    futures_util::stream::once(std::future::ready(first.freeze())).boxed()
                }
            }
        });
        self.calls.push(frames.boxed());
        Ok(())
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
