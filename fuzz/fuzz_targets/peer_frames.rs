//! The peer port's inbound reading (`creek_server::transport::inbound`):
//! any bytes, arriving in pieces of 1–256 bytes, as what a connection to
//! the peer port sends — the 8-byte handshake, then length-prefixed
//! frames. Never panics; a handshake is accepted only from a known peer
//! addressing this replica; no frame is over the limit; a frame's buffer
//! holds at most twice the bytes that arrived and a read chunk (it grows
//! by doubling, a chunk at a time), never what a length declared.
//! The second byte may put a well-formed handshake in front of the rest
//! (from a known peer or a stranger), so the frames are reached.
#![no_main]

use std::collections::HashSet;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::RwLock;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use creek_core::ReplicaId;
use creek_server::transport::inbound::{read_frame, read_handshake, Cut, READ_CHUNK_BYTES};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

const FRAME_BYTES_MAX: usize = 1 << 20;
const ME: ReplicaId = ReplicaId(3);

/// Bytes that arrive at most `piece` at a time.
struct Trickle<'a> {
    data: &'a [u8],
    piece: usize,
}

impl AsyncRead for Trickle<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let n = this.piece.min(this.data.len()).min(buf.remaining());
        buf.put_slice(&this.data[..n]);
        this.data = &this.data[n..];
        Poll::Ready(Ok(()))
    }
}

/// Run a future that never waits (its reader always has bytes or ends).
fn run<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("a read waited on bytes that were all there"),
    }
}

fuzz_target!(|data: &[u8]| {
    let [piece, mode, data @ ..] = data else {
        return;
    };
    let mut sent = Vec::with_capacity(8 + data.len());
    if mode % 2 == 0 {
        // Replica 1 or 2 (known) or 4 (not), addressing this replica.
        let from: u16 = [1, 2, 4][usize::from(mode / 2) % 3];
        sent.extend_from_slice(b"CRK");
        sent.push(creek_wire::WIRE_VERSION);
        sent.extend_from_slice(&from.to_be_bytes());
        sent.extend_from_slice(&ME.0.to_be_bytes());
    }
    sent.extend_from_slice(data);
    let mut r = Trickle {
        data: &sent,
        piece: usize::from(*piece) + 1,
    };
    let known = RwLock::new(HashSet::from([ReplicaId(1), ReplicaId(2)]));
    run(async {
        let Ok(from) = read_handshake(&mut r, ME, &known).await else {
            return;
        };
        assert!(from == ReplicaId(1) || from == ReplicaId(2));
        let mut buf = BytesMut::new();
        loop {
            let Ok(first) = r.read_u8().await else {
                return;
            };
            // What this frame can still get: the rest of the input.
            let left = r.data.len();
            match read_frame(&mut r, first, &mut buf, FRAME_BYTES_MAX).await {
                Ok(frame) => {
                    assert!(frame.len() <= FRAME_BYTES_MAX);
                    assert!(frame.len() <= left - 3);
                }
                Err(Cut::Oversized(len)) => {
                    assert!(len > FRAME_BYTES_MAX);
                    return;
                }
                Err(Cut::Gone) => {
                    assert!(buf.capacity() <= 2 * (sent.len() + READ_CHUNK_BYTES));
                    return;
                }
            }
        }
    });
});
