//! The answer to a plaintext client connection past a connection cap
//! (docs/security.md, "Limits"): instead of a connection closed with no
//! word, which a client can only report as "not a Creek client port", the
//! replica tells it which cap it reached, in the protocol the connection
//! speaks: every gRPC call on it is answered `UNAVAILABLE` naming the cap,
//! and a native connection gets an `Error` frame saying the same in place
//! of `Ready`. The connection is then closed.
//!
//! What such an answer costs is bounded: at most [`ANSWERING_MAX`]
//! connections are answered at once (those past it are closed at once, as
//! are TLS connections, whose protocol cannot be known before a handshake
//! the cap exists to spare), each for at most [`ANSWER_FOR`].

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tonic::Status;

use crate::limits::{CapReached, CappedStream};

/// Connections past a cap answered at once, at most.
pub const ANSWERING_MAX: usize = 64;

/// How long one such connection is served, from its accept.
pub const ANSWER_FOR: Duration = Duration::from_secs(2);

/// The connections past a cap being answered now.
#[derive(Debug, Default)]
pub struct OverCap {
    answering: Arc<AtomicUsize>,
}

impl OverCap {
    /// Answer `stream`, past `cap`, in a task of its own, if fewer than
    /// [`ANSWERING_MAX`] are being answered; else drop (close) it.
    pub fn answer(&self, stream: CappedStream, cap: CapReached, limit: usize) {
        let answering = self.answering.clone();
        if answering.fetch_add(1, Ordering::AcqRel) >= ANSWERING_MAX {
            answering.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let ip = stream.ip().to_string();
        let status = Status::unavailable(message(cap, limit, &ip));
        tokio::spawn(async move {
            let _ = tokio::time::timeout(ANSWER_FOR, refuse(stream, status)).await;
            answering.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// What a connection from `ip` past `cap`, of value `limit`, is told.
pub fn message(cap: CapReached, limit: usize, ip: &str) -> String {
    match cap {
        CapReached::PerClient => format!(
            "this replica already holds {limit} client connections from {ip} \
             (connections_per_client_max): close some (a client needs one per replica), or \
             raise the setting"
        ),
        CapReached::Total => format!(
            "this replica already holds {limit} client connections (connections_max): try \
             another replica, or raise the setting"
        ),
    }
}

/// Read the connection's first bytes and answer it `status` in its
/// protocol.
async fn refuse(stream: CappedStream, status: Status) {
    let Ok(mut stream) = crate::client_port::Sniffed::read(stream).await else {
        return;
    };
    if stream.first() == creek_proto::native::MAGIC {
        let mut frames = BytesMut::new();
        crate::call::answer::put_error(&mut frames, 0, &status);
        let _ = stream.write_all(&frames).await;
        let _ = stream.shutdown().await;
        return;
    }
    // gRPC: the stream's reads begin again with its first bytes, the start
    // of HTTP/2's preface.
    let io = hyper_util::rt::TokioIo::new(stream);
    let service = hyper::service::service_fn(move |_request| {
        let status = status.clone();
        async move { Ok::<_, Infallible>(status.into_http()) }
    });
    let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .serve_connection(io, service)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_cap_and_the_way_out() {
        let m = message(CapReached::PerClient, 256, "10.0.0.1");
        assert!(m.contains("256 client connections from 10.0.0.1"), "{m}");
        assert!(m.contains("connections_per_client_max"), "{m}");
        let m = message(CapReached::Total, 4096, "10.0.0.1");
        assert!(
            m.contains("4096 client connections (connections_max)"),
            "{m}"
        );
    }
}
