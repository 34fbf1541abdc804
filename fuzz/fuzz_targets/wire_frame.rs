//! Peer frames (`creek-wire`): any bytes a peer sends. Decoding never
//! panics; a frame that decodes re-encodes (under the same limits) to a
//! frame that decodes to the same message, and the copying and the sharing
//! decoders agree. The same for a stored op (`decode_op`).
#![no_main]

use bytes::Bytes;
use creek_wire::{decode, decode_bytes, decode_op, encode, encode_op, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let shared = Bytes::copy_from_slice(data);
    let copied = decode(data, &limits);
    let zero_copy = decode_bytes(&shared, &limits);
    assert_eq!(copied, zero_copy, "the two decoders disagree");
    if let Ok(msg) = copied {
        let again = match encode(&msg, &limits) {
            Ok(frame) => frame,
            Err(e) => panic!("a decoded frame does not re-encode: {e}"),
        };
        assert_eq!(decode(&again, &limits).ok(), Some(msg));
    }
    if let Ok(op) = decode_op(&shared, &limits) {
        let again = encode_op(&op);
        assert_eq!(decode_op(&again, &limits).ok(), Some(op));
    }
});
