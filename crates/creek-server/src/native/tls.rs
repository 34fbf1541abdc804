//! The native protocol inside TLS: after the handshake, a connection's
//! first four plaintext bytes say which protocol it speaks, as on a
//! plaintext port. A native connection keeps its rustls session in its
//! [`Out`](super::out::Out), under the lock its writers already take:
//! frames are sealed into TLS records there, in the order they are
//! written, and the bytes that reach the socket are those records (so the
//! queue bound and the write rules are the plaintext connection's). Its
//! task opens the records it reads under the same lock
//! ([`read_some`]). The sniff itself is the client port's
//! ([`crate::client_port`]).

use std::io::{BufRead as _, Write as _};

use bytes::BytesMut;
use tokio::net::TcpStream;

use super::out::Out;

/// How many plaintext bytes are taken from the socket's records in one
/// turn of the connection's task (as [`super::READ_CHUNK_MAX`] for a
/// plaintext connection).
const OPENED_MAX: usize = super::READ_CHUNK_MAX;

/// Encrypt `plaintext` as records of `tls` and append them (with anything
/// else the session has to send, e.g. an answer to a key update) to
/// `sealed`.
pub(super) fn seal(
    tls: &mut rustls::ServerConnection,
    plaintext: &[u8],
    sealed: &mut Vec<u8>,
) -> std::io::Result<()> {
    tls.writer().write_all(plaintext)?;
    while tls.wants_write() {
        tls.write_tls(sealed)?;
    }
    Ok(())
}

/// Reads from a socket without waiting: `WouldBlock` when it has nothing.
struct NonBlocking<'a>(&'a TcpStream);

impl std::io::Read for NonBlocking<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.try_read(buf)
    }
}

/// Open the records the socket has (and what the session already holds)
/// into `input`, up to about [`OPENED_MAX`] bytes: `Ok(false)` once the
/// client closed the connection (or its session); an error for a broken
/// record (the session's alert is sent first, best effort).
pub(super) fn read_some(
    socket: &TcpStream,
    out: &Out,
    input: &mut BytesMut,
) -> std::io::Result<bool> {
    let mut opened = 0;
    loop {
        let mut st = out.lock();
        let Some(tls) = st.tls.as_mut() else {
            return Err(std::io::Error::other(
                "a TLS read on a plaintext connection",
            ));
        };
        // First what the session holds already (a handshake's last read
        // may have brought the first frames).
        let ended = open(tls, input, &mut opened)?;
        if ended {
            return Ok(false);
        }
        if opened >= OPENED_MAX {
            return Ok(true);
        }
        match tls.read_tls(&mut NonBlocking(socket)) {
            Ok(0) => return Ok(false),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(e),
        }
        let processed = tls.process_new_packets().map(|_| ());
        if tls.wants_write() {
            // The session's answer to what it read (a key update, or the
            // alert saying why a record was refused): after the frames
            // already queued, like any other bytes.
            let _ = out.write(st, &[]);
        }
        if let Err(e) = processed {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
        }
    }
}

/// Move the plaintext `tls` holds into `input`: whether the client closed
/// its session (`close_notify`).
fn open(
    tls: &mut rustls::ServerConnection,
    input: &mut BytesMut,
    opened: &mut usize,
) -> std::io::Result<bool> {
    let mut reader = tls.reader();
    loop {
        match reader.fill_buf() {
            Ok([]) => return Ok(true),
            Ok(chunk) => {
                let n = chunk.len();
                input.extend_from_slice(chunk);
                reader.consume(n);
                *opened += n;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
}
