//! The built-in procedures, registered by [`register_all`].
//!
//! Arguments are a list encoded with [`creek_types::value::encode_args`]; results
//! are one [`Value`] encoded with [`Value::encode`]. Every procedure checks
//! its arguments at invoke time (arity, types, reserved keys) and its body
//! checks them again, aborting instead of panicking, since bodies can be
//! called directly. All of them are deterministic.
//!
//! | procedure        | arguments                                   | result                   | read-only |
//! |------------------|---------------------------------------------|--------------------------|-----------|
//! | `kv.get`         | `key: bytes`                                | bytes, or nil if absent  | yes       |
//! | `kv.put`         | `key: bytes, value: bytes[, lease: int]`    | nil                      |           |
//! | `kv.delete`      | `key: bytes`                                | bool: existed            |           |
//! | `kv.cas`         | `key: bytes, expected: bytes?, new: bytes?` | bool: swapped            |           |
//! | `kv.incr`        | `key: bytes, delta: int`                    | int: new value           |           |
//! | `kv.scan`        | `from: bytes, to: bytes?, limit: int`       | `[[[key, value]…], next]`| yes       |
//! | `kv.scan_keys`   | `from: bytes, to: bytes?, limit: int`       | `[[key…], next]`         | yes       |
//! | `kv.scan_reverse`| `from: bytes, to: bytes?, limit: int`       | `[[[key, value]…], next]`, descending | yes |
//! | `kv.scan_keys_reverse` | `from: bytes, to: bytes?, limit: int` | `[[key…], next]`, descending | yes |
//! | `kv.count`       | `from: bytes, to: bytes?, limit: int`       | `[int, next]`            | yes       |
//! | `kv.delete_range`| `from: bytes, to: bytes?, limit: int`       | `[int: deleted, next]`   |           |
//! | `kv.put_ttl`     | `key: bytes, value: bytes, ttl: int`        | nil                      |           |
//! | `lease.grant`    | `ttl: int` (strong only)                    | int: lease id            |           |
//! | `lease.keep_alive` | `lease: int` (strong only)                | int: ttl                 |           |
//! | `lease.revoke`   | `lease: int`                                | int: keys deleted        |           |
//! | `lease.ttl`      | `lease: int`                                | `[ttl, remaining, [key…]]` | yes     |
//! | `lease.list`     | none                                        | list of ids              | yes       |
//! | `kv.txn`         | `compares: list, success: list, failure: list` | `[bool: succeeded, [result…]]` |   |
//! | `queue.enqueue`  | `queue: bytes, item: bytes`                 | int: position            |           |
//! | `queue.dequeue`  | `queue: bytes`                              | bytes, or nil if empty   |           |
//! | `queue.len`      | `queue: bytes`                              | int                      | yes       |
//! | `queue.peek`     | `queue: bytes`                              | bytes, or nil if empty   | yes       |
//! | `list.append`    | `list: bytes, item: bytes`                  | int: new length          |           |
//! | `list.read`      | `list: bytes`                               | list of bytes            | yes       |
//! | `list.len`       | `list: bytes`                               | int                      | yes       |
//! | `set.add`        | `set: bytes, item: bytes`                   | bool: added              |           |
//! | `set.remove`     | `set: bytes, item: bytes`                   | bool: removed            |           |
//! | `set.contains`   | `set: bytes, item: bytes`                   | bool                     | yes       |
//! | `set.read`       | `set: bytes`                                | sorted list of bytes     | yes       |
//! | `sys.noop`       | none                                        | nil                      | yes       |
//!
//! The definition built-ins `keyspace.create`, `keyspace.list`,
//! `proc.register`, `proc.list`, `proc.show` and `proc.drop` are described
//! in `defs`, the `auth.*` built-ins (users, roles, tokens) in `auth`.
//!
//! (`bytes?` is bytes or nil.) User keys and collection names starting with
//! byte [`INTERNAL_KEY_PREFIX`] are reserved and refused; the collections
//! keep their state under keys with that prefix.

use bytes::Bytes;

use crate::registry::{Registry, Route, Signature, INTERNAL_KEY_PREFIX};
use creek_exec::txn::{Abort, Outcome, Txn};
use creek_types::value::{decode_args, Value};

pub(crate) mod auth;
mod collections;
pub(crate) mod defs;
pub mod directory;
mod kv;
pub mod lease;
mod queue;
pub mod range;
pub mod txn;

/// Name of the no-op procedure (no arguments, returns nil, read-only); the
/// stabilizer uses it for its strong no-op.
pub const NOOP: &str = "sys.noop";

const NOOP_SIG: Sig = Sig {
    name: NOOP,
    params: &[],
    subject: Subject::None,
};

/// Register every built-in procedure.
pub fn register_all(r: &mut Registry) {
    r.register_fn(NOOP, true, check_noop, noop);
    r.describe(
        NOOP,
        NOOP_SIG.describe("nil", "Do nothing (the stabilizer's no-op)."),
    );
    r.route(NOOP, Route::Everywhere);
    kv::register(r);
    range::register(r);
    txn::register(r);
    lease::register(r);
    queue::register(r);
    collections::register(r);
    defs::register(r);
    auth::register(r);
}

/// `sys.noop` takes no arguments: an empty list, or (leniently) empty input.
fn check_noop(raw: &[u8]) -> Result<(), String> {
    if raw.is_empty() {
        return Ok(());
    }
    NOOP_SIG.check(raw)
}

fn noop(_txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    check_noop(raw).map_err(Abort)?;
    Ok(Value::Nil.encode())
}

/// Describe each `(signature, result, summary)` in `r`.
fn describe_all(r: &mut Registry, list: &[(&Sig, &str, &str)]) {
    for (sig, returns, summary) in list {
        r.describe(sig.name, sig.describe(returns, summary));
        if matches!(sig.subject, Subject::Key) {
            r.key_arg(sig.name, 0);
        }
        let route = match sig.subject {
            Subject::Key | Subject::Name(_) => Route::Arg(0),
            Subject::None => Route::Everywhere,
        };
        r.route(sig.name, route);
    }
}

/// The type a parameter accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Bytes,
    Int,
    BytesOrNil,
    /// A list of byte strings (keys, or values).
    BytesList,
    /// A list of anything (the procedure's body checks its items).
    List,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Bytes => "bytes",
            Ty::Int => "int",
            Ty::BytesOrNil => "bytes or nil",
            Ty::BytesList => "a list of bytes",
            Ty::List => "a list",
        }
    }

    /// The name a signature shows (`bytes?`: bytes or nil).
    fn short_name(self) -> &'static str {
        match self {
            Ty::Bytes => "bytes",
            Ty::Int => "int",
            Ty::BytesOrNil => "bytes?",
            Ty::BytesList | Ty::List => "list",
        }
    }

    fn admits(self, v: &Value) -> bool {
        match (self, v) {
            (Ty::BytesList, Value::List(items)) => {
                items.iter().all(|i| matches!(i, Value::Bytes(_)))
            }
            (Ty::List, Value::List(_)) => true,
            _ => matches!(
                (self, v),
                (Ty::Bytes | Ty::BytesOrNil, Value::Bytes(_))
                    | (Ty::BytesOrNil, Value::Nil)
                    | (Ty::Int, Value::Int(_))
            ),
        }
    }
}

/// What the first argument names, for the reserved-prefix and length rules.
#[derive(Clone, Copy, Debug)]
enum Subject {
    /// No arguments.
    None,
    /// A user key.
    Key,
    /// A collection name, at most this many bytes if bounded.
    Name(Option<usize>),
}

/// A procedure's signature, used both by its `check_args` and its body.
struct Sig {
    name: &'static str,
    params: &'static [(&'static str, Ty)],
    subject: Subject,
}

impl Sig {
    /// `(key: bytes, value: bytes)`.
    fn signature(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(p, ty)| format!("{p}: {}", ty.name()))
            .collect();
        format!("({})", params.join(", "))
    }

    /// The signature clients see, with the result and a summary.
    fn describe(&self, returns: &str, summary: &str) -> Signature {
        let params: Vec<(&str, &str)> = self
            .params
            .iter()
            .map(|(p, ty)| (*p, ty.short_name()))
            .collect();
        Signature::new(&params, returns, summary)
    }

    /// Decode the arguments and check arity, types and the first argument.
    fn parse(&self, raw: &[u8]) -> Result<Vec<Value>, String> {
        let args =
            decode_args(raw).map_err(|e| format!("{}: malformed arguments: {e}", self.name))?;
        self.check_values(&args)?;
        Ok(args)
    }

    /// Check arity, types and the first argument of decoded arguments.
    fn check_values(&self, args: &[Value]) -> Result<(), String> {
        if args.len() != self.params.len() {
            let plural = if args.len() == 1 { "" } else { "s" };
            return Err(format!(
                "{} expects {}, got {} argument{plural}",
                self.name,
                self.signature(),
                args.len()
            ));
        }
        for (i, (arg, (param, ty))) in args.iter().zip(self.params).enumerate() {
            if !ty.admits(arg) {
                return Err(format!(
                    "{} expects {}: argument {} ({param}) must be {}, got {}",
                    self.name,
                    self.signature(),
                    i + 1,
                    ty.name(),
                    arg.kind()
                ));
            }
        }
        let first = args.first().and_then(Value::as_bytes);
        let reserved = first.is_some_and(|b| b.first() == Some(&INTERNAL_KEY_PREFIX));
        match self.subject {
            Subject::None => {}
            Subject::Key if reserved => {
                return Err(format!(
                    "{}: keys starting with 0x00 are reserved",
                    self.name
                ))
            }
            Subject::Name(_) if reserved => {
                return Err(format!(
                    "{}: names starting with 0x00 are reserved",
                    self.name
                ))
            }
            Subject::Name(Some(max)) => {
                let len = first.map_or(0, |b| b.len());
                if len > max {
                    return Err(format!(
                        "{}: name of {len} bytes exceeds the limit of {max}",
                        self.name
                    ));
                }
            }
            Subject::Key | Subject::Name(None) => {}
        }
        Ok(())
    }

    /// A `check_args` for this signature.
    fn check(&self, raw: &[u8]) -> Result<(), String> {
        self.parse(raw).map(drop)
    }

    /// The arguments for a body: parse failures become aborts.
    fn args(&self, raw: &Bytes) -> Result<Vec<Value>, Abort> {
        let args = creek_types::value::decode_args_shared(raw)
            .map_err(|e| Abort(format!("{}: malformed arguments: {e}", self.name)))?;
        self.check_values(&args).map_err(Abort)?;
        Ok(args)
    }

    /// The abort for arguments that passed [`Sig::parse`] but not a body's
    /// pattern (cannot happen while the two agree).
    fn mismatch(&self) -> Abort {
        Abort::new(format!("{} expects {}", self.name, self.signature()))
    }
}

#[cfg(test)]
pub(crate) mod testkit {
    //! A map-backed snapshot and a driver that applies each call's writes.

    use bytes::Bytes;

    use crate::registry::{execute_call, CallError, Registry};
    use creek_exec::txn::{Abort, TxnLimits};
    use creek_exec::Executed;
    use creek_types::value::{encode_args, Value};
    use creek_types::ProcCall;

    pub use creek_exec::basic::MapSnapshot as MapSnap;

    pub struct Harness {
        pub reg: Registry,
        pub snap: MapSnap,
        /// The revision of the last call run (each call is final at the
        /// next one, and advances the version records as the executor does).
        pub revision: u64,
    }

    impl Harness {
        pub fn new() -> Self {
            Harness {
                reg: Registry::with_builtins(),
                snap: MapSnap::default(),
                revision: 0,
            }
        }

        /// Run `call` and apply its writes and the version records they
        /// advance.
        pub fn exec(&mut self, call: &ProcCall) -> Executed {
            let ex = execute_call(&self.reg, &self.snap, TxnLimits::default(), call);
            self.revision += 1;
            let records = creek_exec::versions::record_writes(
                crate::versions::meta_key,
                &ex.writes,
                self.revision,
                |k| self.snap.0.get(k).cloned(),
            );
            for (k, v) in ex.writes.iter().chain(&records) {
                match v {
                    Some(v) => self.snap.0.insert(k.clone(), v.clone()),
                    None => self.snap.0.remove(k),
                };
            }
            ex
        }

        /// Run `name(args)`, apply its writes and decode its result.
        pub fn call(&mut self, name: &str, args: &[Value]) -> Result<Value, Abort> {
            let out = self.exec(&ProcCall::new(name, encode_args(args))).outcome?;
            Value::decode(&out).map_err(|e| Abort::new(format!("bad result: {e}")))
        }

        /// Like [`Harness::call`], for calls expected to succeed.
        pub fn ok(&mut self, name: &str, args: &[Value]) -> Value {
            match self.call(name, args) {
                Ok(v) => v,
                Err(e) => panic!("{name} aborted: {e}"),
            }
        }

        /// The invoke-time check of `name(args)`.
        pub fn check(&self, name: &str, args: &[Value]) -> Result<(), String> {
            self.check_raw(name, encode_args(args))
        }

        /// The invoke-time check of `name` with raw argument bytes.
        pub fn check_raw(&self, name: &str, args: Bytes) -> Result<(), String> {
            match self
                .reg
                .check(&ProcCall::new(name, args), &TxnLimits::default())
            {
                Ok(_) => Ok(()),
                Err(CallError::MalformedArgs { reason, .. }) => Err(reason),
                Err(e) => Err(e.to_string()),
            }
        }

        /// Every key the store holds (the collections' own keys included).
        pub fn keys(&self) -> Vec<Bytes> {
            self.snap.0.keys().cloned().collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::testkit::Harness;
    use super::*;
    use creek_types::ProcCall;

    #[test]
    fn noop_takes_no_arguments() {
        let mut h = Harness::new();
        assert_eq!(h.ok(NOOP, &[]), Value::Nil);
        assert!(h.check(NOOP, &[]).is_ok());
        assert!(h.check_raw(NOOP, Bytes::new()).is_ok());
        let ex = h.exec(&ProcCall::new(NOOP, Bytes::new()));
        assert_eq!(ex.outcome, Ok(Value::Nil.encode()));
        // Nothing but the map its shard executes under.
        let read: Vec<&[u8]> = ex.reads.iter().map(|(k, _)| &k[..]).collect();
        assert!(ex.writes.is_empty() && read == [crate::ownership::MAP_KEY]);
        assert_eq!(
            h.check(NOOP, &[Value::Nil]),
            Err("sys.noop expects (), got 1 argument".to_string())
        );
        assert!(h.reg.get(NOOP).is_some_and(|p| p.read_only));
    }

    #[test]
    fn every_builtin_is_registered() {
        let h = Harness::new();
        let names = h.reg.names();
        for n in [
            "kv.get",
            "kv.get_meta",
            "kv.put",
            "kv.delete",
            "kv.cas",
            "kv.incr",
            "kv.mget",
            "kv.mput",
            "kv.transfer",
            "queue.enqueue",
            "queue.dequeue",
            "queue.len",
            "queue.peek",
            "list.append",
            "list.read",
            "list.len",
            "set.add",
            "set.remove",
            "set.contains",
            "set.read",
            NOOP,
            "kv.scan",
            "kv.scan_keys",
            "kv.count",
            "kv.delete_range",
            "auth.user_add",
            "auth.user_remove",
            "auth.user_list",
            "auth.token_create",
            "auth.token_revoke",
            "auth.role_set",
            "auth.role_list",
        ] {
            assert!(names.contains(&n), "{n} missing");
        }
        let read_only: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| h.reg.get(n).is_some_and(|p| p.read_only))
            .collect();
        assert_eq!(
            read_only,
            [
                "auth.role_list",
                "auth.user_list",
                "creek.mpo.answer",
                "keyspace.list",
                "kv.count",
                "kv.get",
                "kv.get_meta",
                "kv.mget",
                "kv.scan",
                "kv.scan_keys",
                "kv.scan_keys_reverse",
                "kv.scan_reverse",
                "lease.list",
                "lease.ttl",
                "list.len",
                "list.read",
                "proc.list",
                "proc.show",
                "queue.len",
                "queue.peek",
                "set.contains",
                "set.read",
                NOOP
            ]
        );
    }

    #[test]
    fn malformed_arguments_are_refused_everywhere() {
        let mut h = Harness::new();
        let names: Vec<String> = h.reg.names().iter().map(|n| n.to_string()).collect();
        for name in names {
            for raw in [
                &b"\x05"[..],
                b"\x03\x02",
                b"\x05\x01\x09",
                b"\x05\x01\x04\x05",
            ] {
                let raw = Bytes::copy_from_slice(raw);
                let reason = h.check_raw(&name, raw.clone());
                assert!(
                    reason.as_ref().is_err_and(|r| r.contains("malformed")),
                    "{name}"
                );
                let ex = h.exec(&ProcCall::new(&name, raw));
                assert!(ex.outcome.is_err() && ex.writes.is_empty(), "{name}");
            }
        }
    }
}

#[cfg(test)]
mod route_tests {
    use super::*;

    /// Every built-in a client calls says where it runs on a sharded
    /// cluster: data ops by their key or collection name, definitions and
    /// users everywhere; only unregistered names (user procedures) are
    /// unknown, and the `lease.*` calls, whose leases live in one shard's
    /// group (a sharded cluster refuses them, docs/api.md); `kv.txn` goes
    /// by the keys inside its lists.
    #[test]
    fn every_builtin_has_a_route() {
        let mut r = Registry::new();
        register_all(&mut r);
        for (name, p) in r.procedures() {
            // Leases live in one shard's group (docs/api.md).
            if !name.starts_with("lease.") {
                assert_ne!(p.route, Route::Unknown, "{name}");
            }
        }
        assert_eq!(r.route_of("kv.txn"), Route::Txn);
        assert_eq!(r.route_of("kv.put"), Route::Arg(0));
        assert_eq!(r.route_of("queue.enqueue"), Route::Arg(0));
        assert_eq!(r.route_of("proc.register"), Route::Everywhere);
        assert_eq!(r.route_of("auth.user_add"), Route::Everywhere);
        assert_eq!(r.route_of("orders.place"), Route::Unknown);
    }
}
