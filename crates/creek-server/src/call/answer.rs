//! What the node loop's replies become for a client: the gRPC status of a
//! refusal (the native protocol carries the same code and message in an
//! `Error` frame), a view's protobuf, the op's name, the `Procedures`
//! entries, and why a deadline passed without a quorum.

// tonic's handlers return `Status` by value; boxing it here would only
// move the allocation.
#![allow(clippy::result_large_err)]

use std::net::SocketAddr;
use std::time::Instant;

use bytes::BytesMut;
use creek_core::{ExecKey, InvokeError, ReplicaId, View, ViewKind};
use creek_procs::CallError;
use creek_proto::native::{self, Kind};
use creek_proto::pb;
use tonic::Status;

use crate::metrics::{Metrics, Stage};

/// The client of an invocation is gone: its replies go nowhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gone;

/// What a client stream receives from the node loop.
#[derive(Debug)]
pub enum Reply {
    /// The op was accepted under this handle; views follow. Always the
    /// first reply of an accepted op.
    Accepted(ExecKey),
    /// The op was refused; nothing was applied.
    Rejected(InvokeError),
    /// The user lacks a right the op needs; nothing was applied.
    Denied(creek_procs::auth::Denied),
    /// A view.
    View(View),
    /// The op was refused before it reached the replica, with this status
    /// (a user procedure's declared keys on another shard); nothing was
    /// applied.
    Refused(Status),
    /// The replica cannot finish the op (disk failure, shutdown). Whether it
    /// was applied is unknown; a retry with the same request id is safe.
    Failed(String),
}

/// What a reply is to the client: the op carried on, or a refusal.
#[derive(Debug)]
pub(crate) enum Answer {
    /// The op was accepted under this handle.
    Accepted(ExecKey),
    /// A view.
    View(View),
    /// The call ends without (another) view: `Rejected`, `Denied` and
    /// `Failed` as the status the client gets.
    Refused(Status),
}

/// What `reply` is to the client.
pub(crate) fn answer(reply: Reply) -> Answer {
    match reply {
        Reply::Accepted(handle) => Answer::Accepted(handle),
        Reply::View(v) => Answer::View(v),
        Reply::Rejected(e) => Answer::Refused(rejected(e)),
        Reply::Denied(d) => Answer::Refused(Status::permission_denied(d.to_string())),
        Reply::Refused(status) => Answer::Refused(status),
        Reply::Failed(why) => Answer::Refused(Status::unavailable(why)),
    }
}

/// How long a client refused because the disk is behind should wait
/// (the `retry-after-ms` metadata of the status): a few fsyncs of a slow
/// disk.
const DISK_BEHIND_RETRY_MS: u64 = 100;

/// How long a client refused for the strong backlog, or a full tentative
/// list, should wait: about an election (the usual reason nothing is
/// ordered).
const STRONG_BACKLOG_RETRY_MS: u64 = 200;

/// `RESOURCE_EXHAUSTED` for a replica pushing back: the reason, and when
/// to try again (in the message and as `retry-after-ms` metadata).
fn try_again(e: InvokeError, retry_ms: u64) -> Status {
    let mut status = Status::resource_exhausted(format!("{e}; retry in about {retry_ms} ms"));
    status
        .metadata_mut()
        .insert("retry-after-ms", retry_ms.into());
    status
}

/// The gRPC status for a refused invocation.
pub(crate) fn rejected(e: InvokeError) -> Status {
    use creek_core::InvokeError as E;
    match e {
        E::Call(CallError::UnknownProcedure(p)) => {
            Status::invalid_argument(format!("unknown procedure {p:?}"))
        }
        E::Call(c @ CallError::MalformedArgs { .. }) => Status::invalid_argument(c.to_string()),
        E::Call(c @ CallError::NeedsStrong { .. }) => Status::invalid_argument(c.to_string()),
        E::Call(c @ CallError::KeyTooLarge { .. }) => Status::invalid_argument(c.to_string()),
        E::NoView => Status::invalid_argument("the request asks for no view"),
        e @ E::Overloaded(_) => try_again(e, STRONG_BACKLOG_RETRY_MS),
        e @ E::DiskBehind(_) => try_again(e, DISK_BEHIND_RETRY_MS),
        e @ (E::StrongBacklog(_) | E::WeakBacklog(_)) => try_again(e, STRONG_BACKLOG_RETRY_MS),
        E::NotServing(why) => Status::unavailable(why),
        E::QuorumLostData(why) => Status::failed_precondition(why),
        e @ E::SnapshotWrites(_) => Status::invalid_argument(e.to_string()),
        e @ (E::ReadTimeAhead { .. } | E::RevisionOutOfRange { .. }) => {
            Status::out_of_range(e.to_string())
        }
        e @ E::RevisionLevels => Status::invalid_argument(e.to_string()),
        e @ (E::SnapshotBehind(_)
        | E::SnapshotNotKept { .. }
        | E::SnapshotExactUnavailable { .. }) => Status::unavailable(e.to_string()),
        other => Status::internal(other.to_string()),
    }
}

/// A view as the client protocols carry it.
pub(crate) fn to_pb_view(v: &View) -> pb::View {
    use pb::view::{Kind, Outcome};
    let kind = match v.kind {
        ViewKind::Tentative => Kind::Preliminary,
        ViewKind::Stable => Kind::Final,
        ViewKind::Confirmation => Kind::Confirmed,
        ViewKind::Snapshot => Kind::Snapshot,
    };
    let outcome = if v.kind == ViewKind::Confirmation {
        None
    } else {
        Some(match &v.outcome {
            Ok(bytes) => match creek_types::value::Value::decode(bytes) {
                Ok(val) => Outcome::Value(creek_proto::to_wire(&val)),
                // A user procedure returning raw bytes.
                Err(_) => Outcome::Value(creek_proto::to_wire(&creek_types::value::Value::Bytes(
                    bytes.clone(),
                ))),
            },
            Err(abort) => Outcome::Abort(abort.0.clone()),
        })
    };
    pb::View {
        kind: kind as i32,
        outcome,
        across_shards: v.across_shards,
        time: v.time,
    }
}

/// Time a call's `answered` stage: its first view is handed to the client.
pub(crate) fn first_view(metrics: &Metrics, strong: bool, received: Instant) {
    let since = received.elapsed().as_secs_f64();
    metrics.stage(strong, Stage::Answered, since);
}

/// The response header naming the op an `Invoke` accepted, in `OpId`'s
/// display form (`r3.17`).
pub const OP_HEADER: &str = "creek-op";

/// The name of the op an `Invoke` accepted (`r3.17`), if it is one (a
/// read-only weak op is not ordered).
pub(crate) fn op_name(handle: ExecKey) -> Option<String> {
    match handle {
        ExecKey::Op(id) => Some(id.to_string()),
        _ => None,
    }
}

/// An `Error` frame of the native protocol for `status`, with the
/// `retry-after-ms` hint it carries.
pub(crate) fn put_error(out: &mut BytesMut, id: u64, status: &Status) {
    let retry_after_ms = status
        .metadata()
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let body = native::error_body(status.code() as i32, retry_after_ms, status.message());
    native::put_frame(out, Kind::Error, id, &body);
}

/// `no quorum: replicas 2 and 3 unreachable from replica 1` when `me` and
/// the peers it is connected to are not a majority of the group.
pub(crate) fn no_quorum(me: ReplicaId, peers: &[(ReplicaId, SocketAddr, bool)]) -> Option<String> {
    let group = peers.len() + 1;
    let reachable = 1 + peers.iter().filter(|(_, _, connected)| *connected).count();
    if reachable > group / 2 {
        return None;
    }
    let down: Vec<String> = peers
        .iter()
        .filter(|(_, _, connected)| !connected)
        .map(|(id, _, _)| id.0.to_string())
        .collect();
    let (noun, list) = match down.as_slice() {
        [one] => ("replica", one.clone()),
        [rest @ .., last] => ("replicas", format!("{} and {last}", rest.join(", "))),
        [] => return None,
    };
    Some(format!(
        "no quorum: {noun} {list} unreachable from replica {}",
        me.0
    ))
}

/// The procedures of `registry` clients may call, with their signatures.
pub(crate) fn procedures_reply(registry: &creek_procs::Registry) -> pb::ProceduresReply {
    let procedures = registry
        .procedures()
        .into_iter()
        .filter(|(name, _)| !name.starts_with(creek_procs::session::INTERNAL_PROC_PREFIX))
        .map(|(name, p)| {
            let sig = p.signature.as_deref();
            pb::ProcedureInfo {
                name: name.to_owned(),
                params: sig.map_or_else(Vec::new, |s| {
                    s.params
                        .iter()
                        .map(|(name, ty)| pb::Param {
                            name: name.clone(),
                            r#type: ty.clone(),
                        })
                        .collect()
                }),
                returns: sig.map_or_else(String::new, |s| s.returns.clone()),
                summary: sig.map_or_else(String::new, |s| s.summary.clone()),
                read_only: p.read_only,
                described: sig.is_some(),
                route: route_of(p.route) as i32,
                route_arg: match p.route {
                    creek_procs::Route::Arg(n) | creek_procs::Route::List(n) => {
                        u32::try_from(n).unwrap_or(u32::MAX)
                    }
                    _ => 0,
                },
                route_args: match p.route {
                    creek_procs::Route::Args(a, b) => [a, b]
                        .iter()
                        .map(|n| u32::try_from(*n).unwrap_or(u32::MAX))
                        .collect(),
                    _ => Vec::new(),
                },
                ..pb::ProcedureInfo::default()
            }
        })
        .collect();
    pb::ProceduresReply { procedures }
}

/// A route as `Procedures` tells it.
fn route_of(route: creek_procs::Route) -> pb::Route {
    match route {
        creek_procs::Route::Arg(_) => pb::Route::ByArg,
        creek_procs::Route::Args(..) => pb::Route::ByArgs,
        creek_procs::Route::List(_) => pb::Route::ByListArg,
        creek_procs::Route::Txn => pb::Route::ByTxnKeys,
        creek_procs::Route::Everywhere => pb::Route::Everywhere,
        creek_procs::Route::Unknown => pb::Route::Unknown,
    }
}

/// The `Procedures` entries of user procedures (DESIGN §14).
pub(crate) fn user_procedure_infos(
    user: &[creek_procs::user_procs::UserProc],
) -> Vec<pb::ProcedureInfo> {
    user.iter()
        .filter_map(|u| {
            let compiled = u.compiled()?;
            let sig = compiled.signature();
            let keyspaces = compiled
                .reads
                .union(&compiled.writes)
                .map(|ks| pb::KeyspaceLabel {
                    name: ks.clone(),
                    label: u.label_of(ks).map_or("?", |l| l.name()).to_owned(),
                })
                .collect();
            let declared_keys = compiled
                .declared_keys()
                .iter()
                .map(|(at, key)| pb::DeclaredKey {
                    arg: u32::try_from(*at).unwrap_or(u32::MAX),
                    keyspace: key.keyspace.clone(),
                    prefix: key.prefix,
                })
                .collect::<Vec<_>>();
            Some(pb::ProcedureInfo {
                name: u.name.clone(),
                params: sig
                    .params
                    .iter()
                    .map(|(name, ty)| pb::Param {
                        name: name.clone(),
                        r#type: ty.clone(),
                    })
                    .collect(),
                returns: sig.returns.clone(),
                summary: sig.summary.clone(),
                read_only: compiled.read_only,
                described: true,
                user: true,
                version: u.record.version,
                writes_strong: compiled.writes_strong,
                keyspaces,
                route: match declared_keys.is_empty() {
                    true => pb::Route::Unknown,
                    false => pb::Route::ByDeclaredKeys,
                } as i32,
                route_arg: 0,
                route_args: Vec::new(),
                declared_keys,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use creek_proto::native::{Header, HEADER_BYTES};

    #[test]
    fn quorum_loss_names_the_unreachable_replicas() {
        let addr: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        let peer = |id, connected| (ReplicaId(id), addr, connected);
        assert_eq!(
            no_quorum(ReplicaId(1), &[peer(2, true), peer(3, false)]),
            None
        );
        assert_eq!(
            no_quorum(ReplicaId(1), &[peer(2, false), peer(3, false)]).as_deref(),
            Some("no quorum: replicas 2 and 3 unreachable from replica 1")
        );
        let five = [
            peer(1, false),
            peer(2, true),
            peer(4, false),
            peer(5, false),
        ];
        assert_eq!(
            no_quorum(ReplicaId(3), &five).as_deref(),
            Some("no quorum: replicas 1, 4 and 5 unreachable from replica 3")
        );
        assert_eq!(no_quorum(ReplicaId(1), &[]), None, "a group of one");
        assert_eq!(
            no_quorum(ReplicaId(1), &[peer(2, false)]).as_deref(),
            Some("no quorum: replica 2 unreachable from replica 1")
        );
    }

    #[test]
    fn an_error_frame_carries_the_retry_hint() {
        let mut status = Status::resource_exhausted("the disk is behind");
        status.metadata_mut().insert("retry-after-ms", 100.into());
        let mut out = BytesMut::new();
        put_error(&mut out, 9, &status);
        let header = Header::peek(&out).expect("a header");
        assert_eq!((header.kind, header.id), (Kind::Error as u8, 9));
        let (code, retry, message) =
            native::parse_error(&out[HEADER_BYTES..]).expect("an error body");
        assert_eq!(code, tonic::Code::ResourceExhausted as i32);
        assert_eq!(retry, 100);
        assert_eq!(message, "the disk is behind");
    }

    #[test]
    fn refusals_end_a_call_and_acceptances_carry_it_on() {
        let Answer::Refused(status) = answer(Reply::Failed("the disk failed".into())) else {
            panic!("a failure refuses the call");
        };
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(status.message(), "the disk failed");
        let accepted = answer(Reply::Accepted(ExecKey::Local(1)));
        assert!(matches!(accepted, Answer::Accepted(ExecKey::Local(1))));
    }
}
