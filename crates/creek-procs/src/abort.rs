//! Why an execution aborted, as a short name for telemetry (the
//! `reason` label of `creek_procedure_aborts_total`): each kind of abort
//! this crate and the executor make carries a fixed part in its message,
//! named next to where the message is made.

/// The reason of an abort with `message`: `denied` (the caller lacks the
/// right, checked at the op's place in the order), `session_expired`
/// (its request id is past the session retention), `undeclared_key` (a
/// procedure touched a key it did not declare), `limit` (a bound on keys,
/// values, writes or items), `read_only_write` (a read-only procedure
/// wrote), else `procedure` (the procedure's own abort).
pub fn reason(message: &str) -> &'static str {
    if message.starts_with(crate::auth::DENIED_PREFIX) {
        "denied"
    } else if message.starts_with(crate::session::SESSION_EXPIRED) {
        "session_expired"
    } else if message.contains(crate::mpo::UNDECLARED)
        || message.contains(crate::lang::OUTSIDE_DECLARED)
    {
        "undeclared_key"
    } else if message.contains(creek_exec::txn::OVER_LIMIT) {
        "limit"
    } else if message == creek_exec::txn::READ_ONLY_WRITE {
        "read_only_write"
    } else {
        "procedure"
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use creek_exec::basic::BasicEngine;
    use creek_exec::{Engine, ProcCall, TxnLimits};
    use creek_types::value::{encode_args, Value};

    use super::reason;
    use crate::Registry;

    /// The abort message of `call` run alone on an empty state.
    fn abort_of(call: ProcCall, limits: TxnLimits) -> String {
        let mut e = BasicEngine::new(Arc::new(Registry::with_builtins()), limits);
        e.insert(1u64, 1u64, call);
        e.commit(1, 1);
        while let Some(t) = e.next_task() {
            let done = e.run(&t);
            e.complete(done);
        }
        let mut out = Vec::new();
        e.drain_settled(&mut out);
        out.pop().expect("settled").outcome.expect_err("aborts").0
    }

    fn kv(name: &str, args: &[Value]) -> ProcCall {
        ProcCall::new(name, encode_args(args))
    }

    #[test]
    fn the_executors_aborts_are_named_by_kind() {
        let b = |s: &str| Value::Bytes(Bytes::copy_from_slice(s.as_bytes()));
        let small = TxnLimits {
            value_bytes_max: 4,
            ..TxnLimits::default()
        };
        let big = abort_of(kv("kv.put", &[b("k"), b("too long a value")]), small);
        assert_eq!(reason(&big), "limit", "{big}");
        let poor = abort_of(
            kv("kv.transfer", &[b("a"), b("b"), Value::Int(5)]),
            TxnLimits::default(),
        );
        assert_eq!(reason(&poor), "procedure", "{poor}");
        assert_eq!(reason(creek_exec::txn::READ_ONLY_WRITE), "read_only_write");
        let denied = format!("{}kv.put on key k", crate::auth::DENIED_PREFIX);
        assert_eq!(reason(&denied), "denied");
        let expired = format!(
            "{}: request 3 of client 00ff was not applied",
            crate::session::SESSION_EXPIRED
        );
        assert_eq!(reason(&expired), "session_expired");
        let outside = format!("kv.transfer: key \"x\" {}: …", crate::mpo::UNDECLARED);
        assert_eq!(reason(&outside), "undeclared_key");
    }
}
