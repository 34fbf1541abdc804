//! The gRPC services of `proto/creek.proto`: `Creek` for clients, and
//! `Admin` (in [`admin`]) for membership, backups, state dumps and fault
//! injection.

// tonic's handlers return `Status` by value; boxing it in the helpers would
// only move the allocation.
#![allow(clippy::result_large_err)]

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use creek_core::{ExecKey, ReplicaId, ViewKind};
use creek_procs::auth::{Need, Principal, Right};
use creek_procs::CallError;
use creek_proto::pb;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tonic::{Code, Status};

use crate::metrics::{Metrics, Stage};
use crate::node_loop::{Event, Invocation, Reply, ReplyTo, StatusSnapshot};

use crate::transport::Transport;

mod admin;

pub use admin::{AdminService, BackupStream, DumpStream};

/// The stream of views of one invocation.
pub type ViewStream = Pin<Box<dyn Stream<Item = Result<pb::View, Status>> + Send>>;

/// The `Creek` service of one replica.
#[derive(Clone)]
pub struct CreekService {
    pub(crate) events: mpsc::Sender<Event>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) transport: Arc<Transport>,
    pub(crate) me: ReplicaId,
    pub(crate) max_request_bytes: usize,
    pub(crate) stopping: Arc<AtomicBool>,
    /// The built-ins' part of the `Procedures` answer: the registry does
    /// not change while the replica runs (user procedures are asked of
    /// the node loop on each call).
    pub(crate) procedures: Arc<pb::ProceduresReply>,
    /// Users and their rights, when `[auth] enabled`.
    pub(crate) auth: Option<Arc<crate::auth::Auth>>,
}

impl CreekService {
    /// The checks an invocation meets before it reaches the node loop,
    /// for both client protocols: the replica serves, the request is well
    /// formed and within the limits, its deadline has not passed.
    pub(crate) fn prepare_invoke(
        &self,
        req: &pb::InvokeRequest,
        timeout: Option<Duration>,
    ) -> Result<creek_core::Request, Status> {
        if self.stopping.load(Ordering::Relaxed) {
            return Err(Status::unavailable("the replica is shutting down"));
        }
        let request = crate::request::to_request(req, self.max_request_bytes)?;
        if timeout.is_some_and(|t| t.is_zero()) {
            return Err(Status::deadline_exceeded(
                "the deadline passed before the op was accepted",
            ));
        }
        Ok(request)
    }

    /// What a call's views need to explain a deadline.
    pub(crate) fn late(&self, strong: bool) -> Late {
        Late {
            metrics: self.metrics.clone(),
            transport: self.transport.clone(),
            me: self.me,
            strong,
        }
    }

    /// The caller (see [`caller`]).
    fn caller<T>(
        &self,
        request: &tonic::Request<T>,
        need: &Need,
    ) -> Result<Option<Principal>, Status> {
        caller(self.auth.as_deref(), request, need)
    }
}

/// The caller of `request`, if this replica checks users (`auth`):
/// `UNAUTHENTICATED` without a valid token or a client certificate naming
/// a user, `PERMISSION_DENIED` without what `need` asks.
fn caller<T>(
    auth: Option<&crate::auth::Auth>,
    request: &tonic::Request<T>,
    need: &Need,
) -> Result<Option<Principal>, Status> {
    let Some(auth) = auth else {
        return Ok(None);
    };
    let certs = request.peer_certs();
    auth.authorize(
        request.metadata(),
        certs.as_deref().map(Vec::as_slice),
        need,
    )
    .map(Some)
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
                ..pb::ProcedureInfo::default()
            }
        })
        .collect();
    pb::ProceduresReply { procedures }
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
            })
        })
        .collect()
}

/// The grpc-timeout header (e.g. `250m`, `5S`), if any.
fn deadline(meta: &tonic::metadata::MetadataMap) -> Result<Option<Duration>, Status> {
    let Some(v) = meta.get("grpc-timeout") else {
        return Ok(None);
    };
    let bad = || Status::invalid_argument("malformed grpc-timeout header");
    let s = v.to_str().map_err(|_| bad())?;
    if s.len() < 2 || s.len() > 9 {
        return Err(bad());
    }
    let (digits, unit) = s.split_at(s.len() - 1);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let d = match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return Err(bad()),
    };
    Ok(Some(d))
}

/// How long a client refused because the disk is behind should wait
/// (the `retry-after-ms` metadata of the status): a few fsyncs of a slow
/// disk.
const DISK_BEHIND_RETRY_MS: u64 = 100;

/// The gRPC status for a refused invocation.
pub(crate) fn rejected(e: creek_core::InvokeError) -> Status {
    use creek_core::InvokeError as E;
    match e {
        E::Call(CallError::UnknownProcedure(p)) => {
            Status::invalid_argument(format!("unknown procedure {p:?}"))
        }
        E::Call(c @ CallError::MalformedArgs { .. }) => Status::invalid_argument(c.to_string()),
        E::Call(c @ CallError::NeedsStrong { .. }) => Status::invalid_argument(c.to_string()),
        E::Call(c @ CallError::KeyTooLarge { .. }) => Status::invalid_argument(c.to_string()),
        E::NoView => Status::invalid_argument("the request asks for no view"),
        E::Overloaded(n) => Status::resource_exhausted(format!(
            "replica overloaded: {n} ops on the tentative list; retry later"
        )),
        E::DiskBehind(n) => {
            let mut status = Status::resource_exhausted(format!(
                "replica overloaded: {n} writes wait for its disk; retry in about \
                 {DISK_BEHIND_RETRY_MS} ms"
            ));
            status
                .metadata_mut()
                .insert("retry-after-ms", DISK_BEHIND_RETRY_MS.into());
            status
        }
        E::NotServing(why) => Status::unavailable(why),
        E::QuorumLostData(why) => Status::failed_precondition(why),
        other => Status::internal(other.to_string()),
    }
}

pub(crate) fn to_pb_view(v: &creek_core::View) -> pb::View {
    use pb::view::{Kind, Outcome};
    let kind = match v.kind {
        ViewKind::Tentative => Kind::Preliminary,
        ViewKind::Stable => Kind::Final,
        ViewKind::Confirmation => Kind::Confirmed,
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
    }
}

/// The stream of a `Watch`.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::creek_server::Creek for CreekService {
    type InvokeStream = ViewStream;
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: tonic::Request<pb::WatchRequest>,
    ) -> Result<tonic::Response<WatchStream>, Status> {
        use crate::watch::{WATCH_CHANNEL, WATCH_PREFIX_MAX};
        if self.stopping.load(Ordering::Relaxed) {
            return Err(Status::unavailable("the replica is shutting down"));
        }
        let default = Need::Keyspace(Right::Read, creek_procs::auth::DEFAULT_KEYSPACE.to_owned());
        self.caller(&request, &default)?;
        let req = request.into_inner();
        if req.prefix.len() > WATCH_PREFIX_MAX {
            return Err(Status::invalid_argument(format!(
                "a prefix of {} bytes exceeds the limit of {WATCH_PREFIX_MAX} bytes",
                req.prefix.len()
            )));
        }
        if req.prefix.first() == Some(&creek_procs::registry::INTERNAL_KEY_PREFIX) {
            return Err(Status::invalid_argument(
                "keys starting with the byte 0x00 are Creek's own tables and cannot be watched",
            ));
        }
        let (tx, rx) = mpsc::channel(WATCH_CHANNEL);
        let (accepted_tx, accepted) = oneshot::channel();
        let gone = || Status::unavailable("the replica is shutting down");
        self.events
            .send(Event::Watch(
                crate::watch::WatchRequest {
                    prefix: req.prefix,
                    from: req.from,
                    tentative: req.tentative,
                    tx,
                },
                accepted_tx,
            ))
            .await
            .map_err(|_| gone())?;
        accepted.await.map_err(|_| gone())??;
        // The hub never ends a stream but with an error: the channel closes
        // only when the node loop stops.
        let stream = tokio_stream::StreamExt::chain(
            tokio_stream::wrappers::ReceiverStream::new(rx),
            tokio_stream::once(Err(Status::unavailable(
                "the replica stopped; resume the watch at another replica",
            ))),
        );
        Ok(tonic::Response::new(Box::pin(stream)))
    }

    async fn invoke(
        &self,
        request: tonic::Request<pb::InvokeRequest>,
    ) -> Result<tonic::Response<ViewStream>, Status> {
        let received = Instant::now();
        if self.stopping.load(Ordering::Relaxed) {
            return Err(Status::unavailable("the replica is shutting down"));
        }
        let timeout = deadline(request.metadata())?;
        // What the call needs is known only to the node loop (a user
        // procedure's definition); it checks the principal.
        let principal = self.caller(&request, &Need::Nothing)?;
        let req = request.into_inner();
        let request = self.prepare_invoke(&req, timeout)?;
        let strong = request.strong;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let inv = Invocation {
            request,
            reply: ReplyTo::Stream(tx),
            received,
            principal,
        };
        self.events
            .send(Event::Invoke(inv))
            .await
            .map_err(|_| Status::unavailable("the replica is shutting down"))?;
        // The first reply says whether the op was accepted, and as what.
        let handle = match rx.recv().await {
            Some(Reply::Accepted(handle)) => handle,
            Some(Reply::Rejected(e)) => return Err(rejected(e)),
            Some(Reply::Denied(d)) => return Err(Status::permission_denied(d.to_string())),
            Some(Reply::Failed(why)) => return Err(Status::unavailable(why)),
            Some(Reply::View(_)) | None => {
                return Err(Status::unavailable("the replica is shutting down"))
            }
        };
        let until = timeout.map(|t| tokio::time::Instant::from_std(received) + t);
        let stream = view_stream(rx, until, self.late(strong), received);
        let mut response = tonic::Response::new(Box::pin(stream) as ViewStream);
        if let Some(op) = op_name(handle) {
            if let Ok(value) = op.parse() {
                response.metadata_mut().insert(OP_HEADER, value);
            }
        }
        Ok(response)
    }

    async fn procedures(
        &self,
        request: tonic::Request<pb::ProceduresRequest>,
    ) -> Result<tonic::Response<pb::ProceduresReply>, Status> {
        self.caller(&request, &Need::Nothing)?;
        let (tx, rx) = oneshot::channel();
        let gone = || Status::unavailable("the replica is shutting down");
        self.events
            .send(Event::UserProcedures(tx))
            .await
            .map_err(|_| gone())?;
        let user = rx.await.map_err(|_| gone())?;
        let mut reply = pb::ProceduresReply::clone(&self.procedures);
        // A user procedure never shares a built-in's name (proc.register
        // refuses it), so a merge by name keeps both lists whole.
        reply.procedures.extend(user);
        reply.procedures.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(tonic::Response::new(reply))
    }

    async fn status(
        &self,
        _request: tonic::Request<pb::StatusRequest>,
    ) -> Result<tonic::Response<pb::StatusReply>, Status> {
        // Open without a token, like a health check: roles, terms and
        // counters, no data (docs/security.md).
        let s = status_snapshot(&self.events).await?;
        let peers = self
            .transport
            .peers()
            .into_iter()
            .map(|(id, addr, connected)| pb::PeerStatus {
                replica: u32::from(id.0),
                address: addr.to_string(),
                connected,
            })
            .collect();
        Ok(tonic::Response::new(pb::StatusReply {
            replica: u32::from(self.me.0),
            role: s.role.to_owned(),
            leader: u32::from(s.leader),
            term: s.term,
            committed: s.committed,
            tentative: s.tentative,
            counters: s.counters.into_iter().collect(),
            peers,
            client_addrs: s
                .addrs
                .iter()
                .map(|(id, a)| (u32::from(id.0), a.client.clone()))
                .collect(),
            standing_detail: s.standing_detail,
            lost_peers: s.lost_peers.into_iter().map(u32::from).collect(),
            cluster_id: s.cluster_id,
            quorum_lost: s.quorum_lost,
            raft_log_entries: s.raft_log_entries,
        }))
    }
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

/// What a view stream needs to time its op and to explain a deadline.
pub(crate) struct Late {
    metrics: Arc<Metrics>,
    transport: Arc<Transport>,
    me: ReplicaId,
    strong: bool,
}

impl Late {
    /// The status of an op whose deadline passed before its final view,
    /// saying so when this replica cannot reach a majority of the group.
    pub(crate) fn deadline(&self) -> Status {
        self.metrics.op(self.strong, "deadline");
        let peers = self.transport.peers();
        let message = "the final view did not come before the deadline; the op may still \
                       commit — retry with the same request id to learn its result";
        match no_quorum(self.me, &peers) {
            Some(why) => Status::new(Code::DeadlineExceeded, format!("{why}; {message}")),
            None => Status::new(Code::DeadlineExceeded, message),
        }
    }
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

/// Views from the node loop as a gRPC stream, ended by the last view (the
/// node loop drops its sender), a failure or the deadline. The first view
/// handed to the response times the op's `answered` stage.
fn view_stream(
    rx: mpsc::UnboundedReceiver<Reply>,
    until: Option<tokio::time::Instant>,
    late: Late,
    received: Instant,
) -> impl Stream<Item = Result<pb::View, Status>> + Send {
    let state = Some((rx, until, late, true));
    futures_util::stream::unfold(state, move |state| async move {
        let (mut rx, until, late, first) = state?;
        let next = match until {
            Some(t) => match tokio::time::timeout_at(t, rx.recv()).await {
                Ok(r) => r,
                Err(_) => return Some((Err(late.deadline()), None)),
            },
            None => rx.recv().await,
        };
        match next? {
            Reply::View(v) => {
                if first {
                    let since = received.elapsed().as_secs_f64();
                    late.metrics.stage(late.strong, Stage::Answered, since);
                }
                Some((Ok(to_pb_view(&v)), Some((rx, until, late, false))))
            }
            Reply::Failed(why) => Some((Err(Status::unavailable(why)), None)),
            // Not sent after the first reply.
            Reply::Accepted(_) | Reply::Rejected(_) | Reply::Denied(_) => None,
        }
    })
}

/// The node loop's status snapshot.
async fn status_snapshot(events: &mpsc::Sender<Event>) -> Result<StatusSnapshot, Status> {
    let (tx, rx) = oneshot::channel();
    events
        .send(Event::Status(tx))
        .await
        .map_err(|_| Status::unavailable("the replica is shutting down"))?;
    rx.await
        .map_err(|_| Status::unavailable("the replica is shutting down"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn grpc_timeouts_parse() {
        let mut m = tonic::metadata::MetadataMap::new();
        assert_eq!(deadline(&m).ok(), Some(None));
        m.insert("grpc-timeout", "250m".parse().expect("ascii"));
        assert_eq!(deadline(&m).ok(), Some(Some(Duration::from_millis(250))));
        m.insert("grpc-timeout", "5x".parse().expect("ascii"));
        assert!(deadline(&m).is_err());
    }
}
