//! CAB log entries (`creek_cab::entry`): batches of strong-op ids that
//! reach a replica in raft messages from peers and from its stored log.
//! Decoding never panics; a decoded batch re-encodes to exactly the input
//! (the encoding is canonical: shortest varints, nothing after the batch).
#![no_main]

use creek_cab::entry::{decode_ids, encode_ids};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(ids) = decode_ids(data) {
        let again = encode_ids(&ids);
        assert_eq!(decode_ids(&again).as_ref(), Some(&ids));
        assert_eq!(again.as_slice(), data, "a batch has two encodings");
    }
});
