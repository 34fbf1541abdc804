//! The native client protocol's framing (`creek_proto::native`): any bytes,
//! cut into arbitrary pieces, through the frame reader both ends use, and
//! every body through the `Invoke` and `Error` decoders and the request
//! conversion. Never panics; no frame's body is over the limit, every byte
//! is accounted for, and an accepted request is within the size limit.
#![no_main]

use bytes::BytesMut;
use creek_proto::native::{self, FrameReader, Read, HEADER_BYTES};
use libfuzzer_sys::fuzz_target;

const BODY_BYTES_MAX: usize = 64 << 10;
const MAX_REQUEST_BYTES: usize = 16 << 10;

fuzz_target!(|data: &[u8]| {
    // The first byte sets how the rest arrives: in pieces of 1–256 bytes.
    let Some((&piece, data)) = data.split_first() else {
        return;
    };
    let piece = usize::from(piece) + 1;
    let mut reader = FrameReader::new(BODY_BYTES_MAX);
    let mut input = BytesMut::new();
    let mut taken = 0usize;
    let mut skipped = 0usize;
    for chunk in data.chunks(piece) {
        input.extend_from_slice(chunk);
        while let Some(read) = reader.next(&mut input) {
            match read {
                Read::Frame(header, body) => {
                    assert_eq!(body.len(), header.body_bytes as usize);
                    assert!(body.len() <= BODY_BYTES_MAX);
                    taken += HEADER_BYTES + body.len();
                    let _ = native::parse_error(&body);
                    if let Ok((_, req)) = native::parse_invoke(&body) {
                        if let Ok(r) = creek_server::request::to_request(&req, MAX_REQUEST_BYTES) {
                            assert!(r.call.args.len() + r.call.name.len() <= MAX_REQUEST_BYTES);
                        }
                    }
                }
                Read::Oversized(header) => {
                    assert!(header.body_bytes as usize > BODY_BYTES_MAX);
                    taken += HEADER_BYTES;
                    skipped += header.body_bytes as usize;
                }
            }
        }
    }
    // What was not taken is buffered, or was (or will be) skipped.
    let consumed = data.len() - input.len();
    assert!(consumed >= taken && consumed <= taken + skipped);
});
