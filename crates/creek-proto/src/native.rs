//! Creek's native client protocol: `Invoke` over length-prefixed frames on
//! a plain TCP connection, for clients that want the shortest path to a
//! replica. It carries the same messages as the gRPC service
//! (`InvokeRequest`, `View`) and the same error codes; everything else a
//! client does (status, procedures, watches, admin) stays on gRPC.
//!
//! A replica tells the two apart on its one client port by the first four
//! bytes a client sends: [`MAGIC`] here, HTTP/2's preface for gRPC.
//!
//! A connection: the client sends [`MAGIC`], then a `Hello` frame (its
//! token, possibly empty), and may send `Invoke` frames at once. The
//! replica answers `Hello` with `Ready`. Each `Invoke` carries an id the
//! client chose; every frame answering it carries the same id:
//!
//! * `Accepted` (the op's id, `r3.17`, or empty for a read-only weak op),
//!   then one `View` per view, then `End`; or
//! * `Error` (a gRPC code, a retry hint and a message) in place of
//!   `Accepted`, or after some views (a deadline, a failed replica).
//!
//! Every frame is a 13-byte header — body length (`u32`), kind (`u8`), call
//! id (`u64`), little-endian — then the body. This module only encodes and
//! decodes; the sockets are the server's and the client's.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;

use crate::pb;

/// The first bytes a native client sends.
pub const MAGIC: [u8; 4] = *b"CRK1";

/// Bytes of a frame's header.
pub const HEADER_BYTES: usize = 13;

/// A frame's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Client → replica, id 0: the client's token (UTF-8, empty for none).
    Hello = 1,
    /// Client → replica: a timeout in µs (`u64`, 0 for none), then an
    /// encoded `InvokeRequest`.
    Invoke = 2,
    /// Replica → client, id 0: the `Hello` was read.
    Ready = 10,
    /// Replica → client: the op was accepted; the body is its id.
    Accepted = 11,
    /// Replica → client: an encoded `View`.
    View = 12,
    /// Replica → client: no more frames for this call.
    End = 13,
    /// Replica → client: the call failed (see [`error_body`]).
    Error = 14,
}

impl Kind {
    /// The kind with this byte, if any.
    pub fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Invoke,
            10 => Kind::Ready,
            11 => Kind::Accepted,
            12 => Kind::View,
            13 => Kind::End,
            14 => Kind::Error,
            _ => return None,
        })
    }
}

/// A frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Bytes of the body that follows.
    pub body_bytes: u32,
    /// The kind's byte (see [`Kind::from_u8`]).
    pub kind: u8,
    /// The call it belongs to (0 for `Hello` and `Ready`).
    pub id: u64,
}

impl Header {
    /// The header at the start of `buf`, if `buf` holds one.
    pub fn peek(buf: &[u8]) -> Option<Header> {
        let mut b = buf.get(..HEADER_BYTES)?;
        Some(Header {
            body_bytes: b.get_u32_le(),
            kind: b.get_u8(),
            id: b.get_u64_le(),
        })
    }
}

/// What [`FrameReader::next`] took from the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// A whole frame.
    Frame(Header, Bytes),
    /// A frame whose body is over the limit: the body is skipped as it
    /// arrives, never buffered.
    Oversized(Header),
}

/// The most room the reader reserves ahead of a frame's bytes.
pub const RESERVE_AHEAD: usize = 64 << 10;

/// Splits a byte stream into frames, both ends' one decoder.
#[derive(Clone, Debug)]
pub struct FrameReader {
    body_bytes_max: usize,
    /// Bytes of an oversized body still to skip.
    skip: usize,
}

impl FrameReader {
    /// A reader that refuses bodies over `body_bytes_max`.
    pub fn new(body_bytes_max: usize) -> FrameReader {
        FrameReader {
            body_bytes_max,
            skip: 0,
        }
    }

    /// Whether the reader is in the middle of an oversized body it skips.
    pub fn skipping(&self) -> bool {
        self.skip > 0
    }

    /// The next frame at the front of `input`, taken out of it; `None`
    /// until more bytes arrive (room for up to [`RESERVE_AHEAD`] more of
    /// the frame is reserved).
    pub fn next(&mut self, input: &mut BytesMut) -> Option<Read> {
        if self.skip > 0 {
            let n = self.skip.min(input.len());
            input.advance(n);
            self.skip -= n;
            if self.skip > 0 {
                return None;
            }
        }
        let header = Header::peek(input)?;
        let body_bytes = header.body_bytes as usize;
        if body_bytes > self.body_bytes_max {
            input.advance(HEADER_BYTES);
            self.skip = body_bytes;
            return Some(Read::Oversized(header));
        }
        if input.len() < HEADER_BYTES + body_bytes {
            // Room grows as the bytes arrive, never from the declared
            // length alone: a peer that declares a large frame and sends a
            // byte makes the reader hold a byte, not the frame.
            input.reserve((HEADER_BYTES + body_bytes - input.len()).min(RESERVE_AHEAD));
            return None;
        }
        input.advance(HEADER_BYTES);
        Some(Read::Frame(header, input.split_to(body_bytes).freeze()))
    }
}

/// Append a frame of `kind` for call `id` with `body` to `out`.
pub fn put_frame(out: &mut BytesMut, kind: Kind, id: u64, body: &[u8]) {
    out.reserve(HEADER_BYTES + body.len());
    put_header(out, kind, id, body.len());
    out.put_slice(body);
}

fn put_header(out: &mut BytesMut, kind: Kind, id: u64, body_bytes: usize) {
    // Bodies are bounded far below 4 GiB by both ends' limits.
    out.put_u32_le(u32::try_from(body_bytes).unwrap_or(u32::MAX));
    out.put_u8(kind as u8);
    out.put_u64_le(id);
}

/// Append a frame of `kind` for call `id` whose body is `msg`, encoded.
pub fn put_message(out: &mut BytesMut, kind: Kind, id: u64, msg: &impl Message) {
    let len = msg.encoded_len();
    out.reserve(HEADER_BYTES + len);
    put_header(out, kind, id, len);
    // `out` has room for the message: encoding cannot fail.
    let _ = msg.encode(out);
}

/// Append an `Invoke` frame.
pub fn put_invoke(
    out: &mut BytesMut,
    id: u64,
    timeout: Option<std::time::Duration>,
    req: &pb::InvokeRequest,
) {
    let len = 8 + req.encoded_len();
    out.reserve(HEADER_BYTES + len);
    put_header(out, Kind::Invoke, id, len);
    // A zero timeout is sent as 1 µs: 0 means none.
    out.put_u64_le(timeout.map_or(0, |t| {
        u64::try_from(t.as_micros()).unwrap_or(u64::MAX).max(1)
    }));
    let _ = req.encode(out);
}

/// The timeout and request of an `Invoke` body.
pub fn parse_invoke(
    mut body: &[u8],
) -> Result<(Option<std::time::Duration>, pb::InvokeRequest), &'static str> {
    if body.len() < 8 {
        return Err("an Invoke frame shorter than its timeout");
    }
    let micros = body.get_u64_le();
    let timeout = (micros != 0).then(|| std::time::Duration::from_micros(micros));
    let req = pb::InvokeRequest::decode(body).map_err(|_| "a malformed InvokeRequest")?;
    Ok((timeout, req))
}

/// An `Error` body: the gRPC code (`u32`), how long to wait before a retry
/// in ms (`u64`, 0 for no hint), then the message (UTF-8).
pub fn error_body(code: i32, retry_after_ms: u64, message: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(12 + message.len());
    b.put_u32_le(u32::try_from(code).unwrap_or(u32::MAX));
    b.put_u64_le(retry_after_ms);
    b.put_slice(message.as_bytes());
    b.freeze()
}

/// The code, retry hint and message of an `Error` body.
pub fn parse_error(mut body: &[u8]) -> Result<(i32, u64, String), &'static str> {
    if body.len() < 12 {
        return Err("an Error frame shorter than its code and retry hint");
    }
    let code = i32::try_from(body.get_u32_le()).unwrap_or(i32::MAX);
    let retry_after_ms = body.get_u64_le();
    Ok((
        code,
        retry_after_ms,
        String::from_utf8_lossy(body).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_read_back_as_written() {
        let req = pb::InvokeRequest {
            procedure: "kv.put".into(),
            client_id: 7,
            request_seq: 9,
            ..Default::default()
        };
        let mut out = BytesMut::new();
        put_invoke(
            &mut out,
            42,
            Some(std::time::Duration::from_millis(250)),
            &req,
        );
        put_frame(&mut out, Kind::End, 43, &[]);
        let h = Header::peek(&out).expect("a header");
        assert_eq!((h.kind, h.id), (Kind::Invoke as u8, 42));
        let body = &out[HEADER_BYTES..HEADER_BYTES + h.body_bytes as usize];
        let (timeout, back) = parse_invoke(body).expect("an invoke");
        assert_eq!(timeout, Some(std::time::Duration::from_millis(250)));
        assert_eq!(back, req);
        let rest = &out[HEADER_BYTES + h.body_bytes as usize..];
        let end = Header::peek(rest).expect("a second header");
        assert_eq!((end.body_bytes, end.kind, end.id), (0, Kind::End as u8, 43));
        assert_eq!(Header::peek(&rest[..HEADER_BYTES - 1]), None);
    }

    #[test]
    fn the_reader_waits_for_whole_frames_and_skips_oversized_bodies() {
        let mut wire = BytesMut::new();
        put_frame(&mut wire, Kind::Hello, 0, b"token");
        put_frame(&mut wire, Kind::Invoke, 1, &[7; 40]);
        put_frame(&mut wire, Kind::End, 2, b"ok");
        let mut reader = FrameReader::new(16);
        let mut input = BytesMut::new();
        let mut got = Vec::new();
        // One byte at a time: frames come out whole, in order.
        for b in wire.iter() {
            input.extend_from_slice(&[*b]);
            while let Some(r) = reader.next(&mut input) {
                got.push(r);
            }
        }
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(matches!(&got[0], Read::Frame(h, b) if h.kind == 1 && &b[..] == b"token"));
        assert!(matches!(&got[1], Read::Oversized(h) if h.id == 1 && h.body_bytes == 40));
        assert!(matches!(&got[2], Read::Frame(h, b) if h.id == 2 && &b[..] == b"ok"));
        assert!(input.is_empty());
    }

    #[test]
    fn a_zero_timeout_stays_a_timeout() {
        let mut out = BytesMut::new();
        put_invoke(
            &mut out,
            1,
            Some(std::time::Duration::ZERO),
            &pb::InvokeRequest::default(),
        );
        let (timeout, _) = parse_invoke(&out[HEADER_BYTES..]).expect("an invoke");
        assert_eq!(timeout, Some(std::time::Duration::from_micros(1)));
    }

    #[test]
    fn errors_read_back_and_short_bodies_are_refused() {
        let body = error_body(8, 100, "replica overloaded");
        assert_eq!(
            parse_error(&body),
            Ok((8, 100, "replica overloaded".to_owned()))
        );
        assert!(parse_error(&body[..11]).is_err());
        assert!(parse_invoke(&[0; 7]).is_err());
        assert!(parse_invoke(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff]).is_err());
    }
}
