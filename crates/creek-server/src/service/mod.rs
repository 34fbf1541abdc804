//! The gRPC services of `proto/creek.proto`: `Creek` for clients, and
//! `Admin` (in `admin`) for membership, backups, state dumps and fault
//! injection.

// tonic's handlers return `Status` by value; boxing it in the helpers would
// only move the allocation.
#![allow(clippy::result_large_err)]

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use creek_procs::auth::{Need, Principal, Right};
use creek_proto::pb;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tonic::Status;

use crate::call::answer::{answer, first_view, op_name, to_pb_view, Answer, Reply};
use crate::call::check::{authorize, shutting_down, FrontDoor, Late};
use crate::node_loop::messages::{Event, Invocation, ReplyTo, StatusSnapshot};

mod admin;

pub use crate::call::answer::OP_HEADER;
pub use admin::{AdminService, BackupStream, DumpStream};

/// The stream of views of one invocation.
pub type ViewStream = Pin<Box<dyn Stream<Item = Result<pb::View, Status>> + Send>>;

/// The `Creek` service of one replica.
#[derive(Clone)]
pub struct CreekService {
    /// The checks and hand-over it shares with the native protocol.
    pub(crate) front: FrontDoor,
    /// The built-ins' part of the `Procedures` answer: the registry does
    /// not change while the replica runs (user procedures are asked of
    /// the node loop on each call).
    pub(crate) procedures: Arc<pb::ProceduresReply>,
    /// Clients connect over TLS: a caller of `Mpo` must present a
    /// replica's certificate.
    pub(crate) tls: bool,
}

impl CreekService {
    /// The caller (see [`caller`]).
    fn caller<T>(
        &self,
        request: &tonic::Request<T>,
        need: &Need,
    ) -> Result<Option<Principal>, Status> {
        caller(self.front.auth.as_deref(), request, need)
    }
}

/// The caller of `request`, if this replica checks users (`auth`): see
/// [`authorize`].
fn caller<T>(
    auth: Option<&crate::auth::Auth>,
    request: &tonic::Request<T>,
    need: &Need,
) -> Result<Option<Principal>, Status> {
    // Authenticated from its headers before it was decoded
    // (`limits::Authenticated`): only the right it needs is left to check.
    if let Some(who) = request.extensions().get::<Principal>() {
        who.check(need)
            .map_err(|d| Status::permission_denied(d.to_string()))?;
        return Ok(Some(who.clone()));
    }
    let certs = request.peer_certs();
    authorize(
        auth,
        request.metadata(),
        certs.as_deref().map(Vec::as_slice),
        need,
    )
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
        self.front.serving()?;
        let keyspace = &request.get_ref().keyspace;
        let read = if keyspace.is_empty() {
            creek_procs::auth::DEFAULT_KEYSPACE.to_owned()
        } else {
            creek_procs::keyspace::check_name("keyspace", keyspace.as_bytes())
                .map_err(Status::invalid_argument)?
                .to_owned()
        };
        self.caller(&request, &Need::Keyspace(Right::Read, read))?;
        let req = request.into_inner();
        if req.prefix.len() > WATCH_PREFIX_MAX {
            return Err(Status::invalid_argument(format!(
                "a prefix of {} bytes exceeds the limit of {WATCH_PREFIX_MAX} bytes",
                req.prefix.len()
            )));
        }
        // A keyspace's keys are stored under its data prefix; the changes
        // name them without it.
        let (prefix, strip) = if req.keyspace.is_empty() {
            if req.prefix.first() == Some(&creek_procs::registry::INTERNAL_KEY_PREFIX) {
                return Err(Status::invalid_argument(
                    "keys starting with the byte 0x00 are Creek's own tables and cannot be \
                     watched (a keyspace's keys: give its name)",
                ));
            }
            (req.prefix, 0)
        } else {
            let stored = creek_procs::keyspace::data_key(&req.keyspace, &req.prefix);
            let strip = stored.len() - req.prefix.len();
            (stored, strip)
        };
        let (tx, rx) = mpsc::channel(WATCH_CHANNEL);
        let (accepted_tx, accepted) = oneshot::channel();
        self.front
            .events
            .send(Event::Watch(
                crate::watch::WatchRequest {
                    prefix,
                    strip,
                    from: req.from,
                    tentative: req.tentative,
                    tx,
                },
                accepted_tx,
            ))
            .await
            .map_err(|_| shutting_down())?;
        accepted.await.map_err(|_| shutting_down())??;
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
        self.front.serving()?;
        let timeout = deadline(request.metadata())?;
        // What the call needs is known only to the node loop (a user
        // procedure's definition); it checks the principal.
        let principal = self.caller(&request, &Need::Nothing)?;
        let req = request.into_inner();
        let (request, answer_after) = self.front.prepare(&req, timeout)?;
        let strong = request.strong;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let inv = Invocation {
            request,
            answer_after,
            reply: ReplyTo::Stream(tx),
            received,
            principal,
        };
        self.front.submit(inv).await?;
        // The first reply says whether the op was accepted, and as what.
        let handle = match rx.recv().await.map(answer) {
            Some(Answer::Accepted(handle)) => handle,
            Some(Answer::Refused(status)) => return Err(status),
            Some(Answer::View(_)) | None => return Err(shutting_down()),
        };
        let until = timeout.map(|t| tokio::time::Instant::from_std(received) + t);
        let late = self.front.late(strong).of(handle, self.front.mpo.as_ref());
        let stream = view_stream(rx, until, late, received);
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
        self.front
            .events
            .send(Event::UserProcedures(tx))
            .await
            .map_err(|_| shutting_down())?;
        let user = rx.await.map_err(|_| shutting_down())?;
        let mut reply = pb::ProceduresReply::clone(&self.procedures);
        // A user procedure never shares a built-in's name (proc.register
        // refuses it), so a merge by name keeps both lists whole.
        reply.procedures.extend(user);
        reply.procedures.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(tonic::Response::new(reply))
    }

    async fn mpo(
        &self,
        request: tonic::Request<pb::MpoEnvelope>,
    ) -> Result<tonic::Response<pb::MpoEnvelope>, Status> {
        self.front.serving()?;
        let Some(gate) = &self.front.shards else {
            return Err(Status::failed_precondition(
                "this replica serves a cluster of one group: it takes no messages about \
                 operations across shards",
            ));
        };
        if self.tls {
            let certs = request.peer_certs();
            let named = certs.as_deref().is_some_and(|certs| {
                certs.first().is_some_and(|cert| {
                    gate.replica_ids()
                        .into_iter()
                        .any(|id| crate::tls::names_replica(cert, creek_core::ReplicaId(id)))
                })
            });
            if !named {
                return Err(Status::permission_denied(
                    "Mpo is for the cluster's replicas: present a replica's certificate",
                ));
            }
        }
        let envelope = request.into_inner();
        let cluster = gate.cluster();
        if envelope.cluster != cluster {
            return Err(Status::failed_precondition(format!(
                "a message of cluster {:016x} reached a replica of cluster {cluster:016x}",
                envelope.cluster
            )));
        }
        let req = creek_node::mpo::wire::Request::decode(&envelope.body).map_err(|e| {
            Status::invalid_argument(format!("a malformed message about an MPO: {e}"))
        })?;
        let (tx, rx) = oneshot::channel();
        self.front
            .events
            .send(Event::Mpo(req, Some(tx)))
            .await
            .map_err(|_| shutting_down())?;
        let reply = rx.await.map_err(|_| {
            Status::unavailable("the replica did not answer in time (or is shutting down)")
        })??;
        Ok(tonic::Response::new(pb::MpoEnvelope {
            cluster,
            body: reply.encode(),
        }))
    }

    async fn status(
        &self,
        _request: tonic::Request<pb::StatusRequest>,
    ) -> Result<tonic::Response<pb::StatusReply>, Status> {
        // Open without a token, like a health check: roles, terms and
        // counters, no data (docs/security.md).
        let mut s = self.front.status.get().await?;
        if let Some(moves) = &self.front.moves {
            s.counters.extend(crate::mover::counters(moves));
        }
        let peers = self
            .front
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
            replica: u32::from(self.front.me.0),
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
            shard_map: self
                .front
                .shards
                .as_ref()
                .map(|g| g.encoded())
                .unwrap_or_default(),
            shard: self
                .front
                .shards
                .as_ref()
                .map_or(0, |g| u32::from(g.shard().0)),
            directory: self
                .front
                .shards
                .as_ref()
                .is_some_and(|g| g.role() == crate::shards::Role::Directory),
        }))
    }
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
                    first_view(&late.metrics, late.strong, received);
                }
                Some((Ok(to_pb_view(&v)), Some((rx, until, late, false))))
            }
            Reply::Failed(why) => Some((Err(Status::unavailable(why)), None)),
            // Not sent after the first reply.
            Reply::Accepted(_) | Reply::Rejected(_) | Reply::Denied(_) | Reply::Refused(_) => None,
        }
    })
}

/// The least time between two status snapshots the node loop is asked for.
pub const STATUS_EVERY: std::time::Duration = std::time::Duration::from_millis(5);

/// The node loop's status snapshots for `Status` and `Members` calls
/// (open to anyone, without a token): one asked at a time, at most one per
/// [`STATUS_EVERY`], each shared by every call that arrived before it was
/// asked. A call's answer is always a snapshot asked after the call
/// arrived (never an older one), and a flood of calls costs the node loop
/// at most one snapshot per interval, not one per call.
#[derive(Debug)]
pub struct StatusCache {
    events: mpsc::Sender<Event>,
    /// The last snapshot and when it was asked for; held while one is
    /// being asked for, so calls queue behind it.
    latest: tokio::sync::Mutex<Option<(std::time::Instant, StatusSnapshot)>>,
}

impl StatusCache {
    /// Snapshots of the node loop that `events` reaches.
    pub fn new(events: mpsc::Sender<Event>) -> Arc<StatusCache> {
        Arc::new(StatusCache {
            events,
            latest: tokio::sync::Mutex::new(None),
        })
    }

    /// A snapshot asked for after this call.
    pub(crate) async fn get(&self) -> Result<StatusSnapshot, Status> {
        let arrived = std::time::Instant::now();
        let mut latest = self.latest.lock().await;
        if let Some((asked, s)) = &*latest {
            if *asked >= arrived {
                return Ok(s.clone());
            }
            let next = *asked + STATUS_EVERY;
            if next > std::time::Instant::now() {
                tokio::time::sleep_until(next.into()).await;
            }
        }
        let asked = std::time::Instant::now();
        let (tx, rx) = oneshot::channel();
        self.events
            .send(Event::Status(tx))
            .await
            .map_err(|_| shutting_down())?;
        let s = rx.await.map_err(|_| shutting_down())?;
        *latest = Some((asked, s.clone()));
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
