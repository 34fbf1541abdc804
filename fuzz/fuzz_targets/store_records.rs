//! The store's records, as a damaged or hostile disk may hold them, and a
//! checkpoint as state transfer receives it from a peer: the checkpoint,
//! the group directory, the checkpoint reference, the identity and the
//! own-seqs record. The first byte picks the decoder. Decoding never
//! panics; what decodes re-encodes to something that decodes to it.
#![no_main]

use creek_store::codec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 5 {
        0 => {
            if let Ok(c) = creek_wire::checkpoint::decode(bytes) {
                let again = creek_wire::checkpoint::encode(&c);
                assert_eq!(creek_wire::checkpoint::decode(&again).ok(), Some(c.clone()));
                assert_eq!(codec::decode_checkpoint(&again).ok(), Some(c));
            }
        }
        1 => {
            if let Ok(d) = creek_wire::decode_directory(bytes) {
                let again = creek_wire::encode_directory(&d);
                assert_eq!(creek_wire::decode_directory(&again).ok(), Some(d));
            }
        }
        2 => {
            if let Ok(r) = codec::decode_checkpoint_ref(bytes) {
                let again = codec::encode_checkpoint_ref(&r);
                assert_eq!(codec::decode_checkpoint_ref(&again).ok(), Some(r));
            }
        }
        3 => {
            if let Ok(id) = codec::decode_identity(bytes) {
                let again = codec::encode_identity(&id);
                assert_eq!(codec::decode_identity(&again).ok(), Some(id));
            }
        }
        _ => {
            if let Ok(own) = codec::decode_own_seqs(bytes) {
                let again = codec::encode_own_seqs(&own);
                assert_eq!(codec::decode_own_seqs(&again).ok(), Some(own));
            }
        }
    }
});
