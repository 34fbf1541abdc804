//! The value encoding (`creek_types::value`): procedure arguments and
//! results, as they arrive in ops from peers and from the disk. Decoding
//! never panics, and a decoded value re-encodes to one that decodes to it.
#![no_main]

use bytes::Bytes;
use creek_types::value::{decode_args, decode_args_shared, encode_args, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let shared = Bytes::copy_from_slice(data);
    let value = Value::decode(data);
    assert_eq!(value, Value::decode_shared(&shared));
    if let Ok(v) = value {
        assert_eq!(Value::decode(&v.encode()).ok(), Some(v));
    }
    let args = decode_args(data);
    assert_eq!(args, decode_args_shared(&shared));
    if let Ok(args) = args {
        assert_eq!(decode_args(&encode_args(&args)).ok(), Some(args));
    }
});
