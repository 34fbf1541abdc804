//! Voiding ops lost with a replica's data.
//!
//! A replica rebuilt after it lost its data takes its earlier ops back from
//! its peers. One that no peer kept is gone, but later ops of the same
//! replica that did reach peers may name it in their causal contexts, and
//! would wait for it forever. The rebuilt replica then orders a [`VOID`] op:
//! a strong internal op listing the seqs of its own earlier ops it could not
//! take back. Where it lands in the committed order decides, identically at
//! every replica, what each listed op is: one committed before it stays; one
//! not committed by then is void — dropped if held, refused if it arrives
//! later, and counted as delivered for the causal contexts that name it.
//! The replica protocol (creek-core) does that when the op commits; the
//! procedure itself changes no state.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::registry::Registry;
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_types::value::{decode_args, encode_args, Value};
use creek_types::ProcCall;

/// The procedure that voids lost ops. Internal: only replicas invoke it.
pub const VOID: &str = "creek.ops.void";

/// Seqs one [`VOID`] op lists at most (8 bytes each in its arguments).
pub const VOID_BATCH_MAX: usize = 4096;

/// A [`VOID`] call listing `seqs` (of the invoking replica's own ops; at
/// most [`VOID_BATCH_MAX`] are kept).
pub fn void_call(seqs: &[u64]) -> ProcCall {
    let mut list = BytesMut::with_capacity(seqs.len().min(VOID_BATCH_MAX) * 8);
    for seq in seqs.iter().take(VOID_BATCH_MAX) {
        list.put_u64(*seq);
    }
    ProcCall::new(VOID, encode_args(&[Value::Bytes(list.freeze())]))
}

/// The seqs a [`VOID`] call lists.
pub fn void_seqs(args: &[u8]) -> Result<Vec<u64>, String> {
    match decode_args(args)
        .map_err(|e| format!("malformed arguments: {e}"))?
        .as_slice()
    {
        [Value::Bytes(list)] if list.len() % 8 == 0 && list.len() / 8 <= VOID_BATCH_MAX => {
            let mut list = list.clone();
            let mut seqs = Vec::with_capacity(list.len() / 8);
            while list.has_remaining() {
                seqs.push(list.get_u64());
            }
            Ok(seqs)
        }
        _ => Err(format!(
            "malformed arguments: expected (seqs: bytes of at most {VOID_BATCH_MAX} 8-byte seqs)"
        )),
    }
}

fn void(_txn: &mut Txn<'_>, args: &Bytes) -> Outcome {
    let n = void_seqs(args).map_err(Abort)?.len();
    Ok(Value::Int(i64::try_from(n).unwrap_or(i64::MAX)).encode())
}

/// Register [`VOID`].
pub(crate) fn register(r: &mut Registry) {
    r.register_fn(VOID, false, |a| void_seqs(a).map(|_| ()), void);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_void_call_lists_its_seqs_and_refuses_malformed_arguments() {
        let call = void_call(&[3, 7, 9]);
        assert_eq!(call.name.as_ref(), VOID);
        assert_eq!(void_seqs(&call.args), Ok(vec![3, 7, 9]));
        let many: Vec<u64> = (1..=(VOID_BATCH_MAX as u64 + 10)).collect();
        assert_eq!(
            void_seqs(&void_call(&many).args).map(|s| s.len()),
            Ok(VOID_BATCH_MAX)
        );
        let odd = encode_args(&[Value::Bytes(Bytes::from_static(&[1, 2, 3]))]);
        assert!(void_seqs(&odd).is_err());
        assert!(void_seqs(&encode_args(&[Value::Int(1)])).is_err());
        assert!(void_seqs(b"\xff").is_err());
    }
}
