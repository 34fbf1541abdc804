//! The `Admin` service: membership, backups, the committed order and state
//! dumps, and fault injection where it is allowed.

// tonic's handlers return `Status` by value.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use creek_core::ReplicaId;
use creek_node::GroupError;
use creek_procs::auth::Need;
use creek_proto::pb;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tonic::Status;

use super::{caller, StatusCache};
use crate::faults::{Faults, LinkFault};
use crate::node_loop::{Event, GroupRefusal, StatusSnapshot};

/// Most ids one `Admin.Committed` answer holds.
const COMMITTED_MAX: usize = 65_536;

/// The `Admin` service.
#[derive(Clone)]
pub struct AdminService {
    pub(crate) events: mpsc::Sender<Event>,
    pub(crate) faults: Arc<Faults>,
    pub(crate) allowed: bool,
    pub(crate) me: ReplicaId,
    /// Users and their rights, when `[auth] enabled`: every call but
    /// `Members` needs admin on the cluster.
    pub(crate) auth: Option<Arc<crate::auth::Auth>>,
    /// Status snapshots, shared with the `Creek` service.
    pub(crate) status: Arc<StatusCache>,
}

/// Bytes of records per `Dump` chunk (well under gRPC's 4 MiB message limit).
const DUMP_CHUNK_BYTES: usize = 1 << 20;

/// The stream of a `Dump`.
pub type DumpStream = Pin<Box<dyn Stream<Item = Result<pb::DumpChunk, Status>> + Send>>;

/// The `Members` reply of a status snapshot.
fn members_reply(me: ReplicaId, s: &StatusSnapshot) -> pb::MembersReply {
    let g = &s.group;
    let role = |id: ReplicaId| -> &'static str {
        let incoming = g.voters.contains(&id);
        let outgoing = g.voters_outgoing.contains(&id);
        match (incoming, outgoing) {
            (true, false) if !g.voters_outgoing.is_empty() => "incoming voter",
            (true, _) => "voter",
            (false, true) => "outgoing voter",
            (false, false) => "learner",
        }
    };
    let members = g
        .members()
        .into_iter()
        .map(|id| {
            let a = s.addrs.get(&id).cloned().unwrap_or_default();
            pb::Member {
                replica: u32::from(id.0),
                role: role(id).to_owned(),
                peer_addr: a.peer,
                client_addr: a.client,
            }
        })
        .collect();
    pb::MembersReply {
        members,
        conf_index: g.conf_index,
        leader: u32::from(s.leader),
        replica: u32::from(me.0),
        max_id: u32::from(s.max_id),
    }
}

/// The gRPC status of a refused group change.
fn group_status(refusal: GroupRefusal) -> Status {
    use creek_cab::ChangeRefused as R;
    let why = refusal.error.to_string();
    let mut status = match &refusal.error {
        GroupError::IdUsed { .. } | GroupError::NoAddress(_) => Status::invalid_argument(why),
        GroupError::Refused(R::AlreadyMember(_)) => Status::already_exists(why),
        GroupError::Refused(R::NotA(..)) => Status::not_found(why),
        GroupError::Refused(R::InProgress | R::LeaderMustHandOver(_)) => Status::aborted(why),
        GroupError::Refused(R::NotLeader { .. } | R::LastVoter(_)) | GroupError::NotServing(_) => {
            Status::failed_precondition(why)
        }
        GroupError::NotApplied(_) => Status::deadline_exceeded(why),
    };
    if let Some((id, addr)) = refusal.leader {
        let m = status.metadata_mut();
        if let Ok(v) = id.to_string().parse() {
            m.insert("creek-leader", v);
        }
        if let Ok(v) = addr.parse() {
            m.insert("creek-leader-addr", v);
        }
    }
    status
}

impl AdminService {
    /// `UNAUTHENTICATED` or `PERMISSION_DENIED` unless the caller holds
    /// what `need` asks (nothing to check without `[auth]`).
    fn check<T>(&self, request: &tonic::Request<T>, need: &Need) -> Result<(), Status> {
        caller(self.auth.as_deref(), request, need).map(drop)
    }

    async fn change_group(
        &self,
        change: creek_cab::MemberChange,
        addrs: Option<creek_core::Addrs>,
    ) -> Result<tonic::Response<pb::MembersReply>, Status> {
        let (tx, rx) = oneshot::channel();
        self.events
            .send(Event::ChangeGroup {
                change,
                addrs,
                reply: tx,
            })
            .await
            .map_err(|_| Status::unavailable("the replica is shutting down"))?;
        let s = rx
            .await
            .map_err(|_| Status::unavailable("the replica is shutting down"))?
            .map_err(group_status)?;
        tracing::info!(?change, "replica group changed");
        Ok(tonic::Response::new(members_reply(self.me, &s)))
    }
}

/// A replica id from the API (1..=65535).
fn replica_id(v: u32) -> Result<ReplicaId, Status> {
    u16::try_from(v)
        .ok()
        .filter(|v| *v > 0)
        .map(ReplicaId)
        .ok_or_else(|| Status::invalid_argument(format!("replica id {v} is not within 1..=65535")))
}

/// The stream of a `Backup`.
pub type BackupStream = Pin<Box<dyn Stream<Item = Result<pb::BackupChunk, Status>> + Send>>;

/// Bytes of checkpoint encoding per `Backup` chunk.
const BACKUP_CHUNK_BYTES: usize = 1 << 20;
/// Chunks encoded ahead of a slow reader (the encoder waits beyond).
const BACKUP_CHUNKS_AHEAD: usize = 4;
/// How long a backup waits for the replica to reach a clean point.
const BACKUP_CLEAN_POINT_WAIT: Duration = Duration::from_secs(10);

/// Encode `c` in chunks into `tx` (header, data, trailer), on a blocking
/// thread: a large state takes a while, and the reader sets the pace.
fn stream_checkpoint(
    me: ReplicaId,
    c: creek_core::Checkpoint,
    cluster_id: u64,
    tx: mpsc::Sender<Result<pb::BackupChunk, Status>>,
) {
    use pb::backup_chunk::Part;
    let send = |part: Part| {
        tx.blocking_send(Ok(pb::BackupChunk { part: Some(part) }))
            .is_ok()
    };
    let header = pb::BackupHeader {
        committed: c.committed_len,
        log_index: c.cab_applied,
        cluster_id,
        replica: u32::from(me.0),
        format: u32::from(creek_wire::checkpoint::FORMAT),
        keys: c.state.len() as u64,
    };
    if !send(Part::Header(header)) {
        return;
    }
    let mut encoder = creek_wire::checkpoint::Encoder::default();
    let mut crc = crc32fast::Hasher::new();
    let mut bytes = 0u64;
    let mut piece = Vec::with_capacity(BACKUP_CHUNK_BYTES + 4096);
    while encoder.next_piece(&c, &mut piece, BACKUP_CHUNK_BYTES) {
        crc.update(&piece);
        bytes += piece.len() as u64;
        if !send(Part::Data(std::mem::take(&mut piece).into())) {
            return; // the client went away
        }
    }
    let _ = send(Part::Trailer(pb::BackupTrailer {
        bytes,
        crc32: crc.finalize(),
    }));
}

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminService {
    type DumpStream = DumpStream;
    type BackupStream = BackupStream;

    async fn backup(
        &self,
        request: tonic::Request<pb::BackupRequest>,
    ) -> Result<tonic::Response<BackupStream>, Status> {
        self.check(&request, &Need::Cluster)?;
        let (tx, rx) = oneshot::channel();
        let asked = Event::Checkpoint {
            reply: tx,
            within: BACKUP_CLEAN_POINT_WAIT,
        };
        self.events
            .send(asked)
            .await
            .map_err(|_| Status::unavailable("the replica is shutting down"))?;
        let taken = rx
            .await
            .map_err(|_| Status::unavailable("the replica is shutting down"))?;
        let Some((checkpoint, cluster)) = taken else {
            return Err(Status::unavailable(
                "no clean point of the committed order within 10 s (the replica is not a \
                 member, or never between commits at the end of a turn): retry, or ask another \
                 replica",
            ));
        };
        tracing::info!(
            committed = checkpoint.committed_len,
            keys = checkpoint.state.len(),
            "streaming a backup"
        );
        let (tx, rx) = mpsc::channel(BACKUP_CHUNKS_AHEAD);
        let me = self.me;
        tokio::task::spawn_blocking(move || stream_checkpoint(me, checkpoint, cluster, tx));
        Ok(tonic::Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn add_replica(
        &self,
        request: tonic::Request<pb::AddReplicaRequest>,
    ) -> Result<tonic::Response<pb::MembersReply>, Status> {
        self.check(&request, &Need::Cluster)?;
        let r = request.into_inner();
        let id = replica_id(r.replica)?;
        for (what, addr) in [("peer", &r.peer_addr), ("client", &r.client_addr)] {
            if crate::node_loop::resolve(addr).is_err() {
                return Err(Status::invalid_argument(format!(
                    "the {what} address {addr:?} is not a reachable host:port"
                )));
            }
        }
        let addrs = creek_core::Addrs {
            peer: r.peer_addr,
            client: r.client_addr,
        };
        self.change_group(creek_cab::MemberChange::AddLearner(id), Some(addrs))
            .await
    }

    async fn remove_replica(
        &self,
        request: tonic::Request<pb::RemoveReplicaRequest>,
    ) -> Result<tonic::Response<pb::MembersReply>, Status> {
        self.check(&request, &Need::Cluster)?;
        let id = replica_id(request.into_inner().replica)?;
        self.change_group(creek_cab::MemberChange::Remove(id), None)
            .await
    }

    async fn members(
        &self,
        _request: tonic::Request<pb::MembersRequest>,
    ) -> Result<tonic::Response<pb::MembersReply>, Status> {
        // Open without a token, as `Status` is: who is a member, where.
        let s = self.status.get().await?;
        if matches!(s.role, "joining" | "lost" | "removed") {
            // Its view of the group is not the group's: another replica
            // answers (clients fail over on UNAVAILABLE).
            return Err(Status::unavailable(format!(
                "replica {} is {}: {}",
                self.me, s.role, s.standing_detail
            )));
        }
        Ok(tonic::Response::new(members_reply(self.me, &s)))
    }

    async fn committed(
        &self,
        request: tonic::Request<pb::CommittedRequest>,
    ) -> Result<tonic::Response<pb::CommittedReply>, Status> {
        self.check(&request, &Need::Cluster)?;
        let req = request.into_inner();
        let max = match usize::try_from(req.max) {
            Ok(0) | Err(_) => COMMITTED_MAX,
            Ok(n) => n.min(COMMITTED_MAX),
        };
        let (tx, rx) = oneshot::channel();
        let gone = || Status::unavailable("the replica is shutting down");
        self.events
            .send(Event::Committed {
                from: req.from,
                max,
                reply: tx,
            })
            .await
            .map_err(|_| gone())?;
        let part = rx.await.map_err(|_| gone())?;
        Ok(tonic::Response::new(pb::CommittedReply {
            start: part.start,
            ids: part
                .ids
                .iter()
                .map(|(id, request)| pb::OpRef {
                    origin: u32::from(id.origin.0),
                    seq: id.seq,
                    client_id: request.map_or(0, |r| r.client),
                    request_seq: request.map_or(0, |r| r.seq),
                })
                .collect(),
            committed: part.committed,
            finalized: part.finalized,
            pending: part.pending,
            quiet: part.quiet,
            standing: part.standing.to_owned(),
        }))
    }

    async fn dump(
        &self,
        request: tonic::Request<pb::DumpRequest>,
    ) -> Result<tonic::Response<DumpStream>, Status> {
        self.check(&request, &Need::Cluster)?;
        let (tx, rx) = oneshot::channel();
        self.events
            .send(Event::Dump(tx))
            .await
            .map_err(|_| Status::unavailable("the replica is shutting down"))?;
        let (committed, state) = rx
            .await
            .map_err(|_| Status::unavailable("the replica is shutting down"))?;
        // The state is a list of references to the committed keys and
        // values (shared, not copied); each chunk is built when the stream
        // is read, so a client reading slowly holds up no more than one.
        let mut records = state.into_iter().peekable();
        let mut first = true;
        let chunks = std::iter::from_fn(move || {
            if records.peek().is_none() && !first {
                return None;
            }
            first = false;
            let mut chunk = pb::DumpChunk {
                committed,
                records: Vec::new(),
            };
            let mut size = 0;
            while size < DUMP_CHUNK_BYTES {
                let Some((key, value)) = records.next() else {
                    break;
                };
                size += key.len() + value.len() + 8;
                chunk.records.push(pb::Record { key, value });
            }
            Some(Ok(chunk))
        });
        Ok(tonic::Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    async fn set_faults(
        &self,
        request: tonic::Request<pb::SetFaultsRequest>,
    ) -> Result<tonic::Response<pb::SetFaultsReply>, Status> {
        self.check(&request, &Need::Cluster)?;
        if !self.allowed {
            return Err(Status::permission_denied(
                "fault injection is disabled; start the server with allow_fault_injection",
            ));
        }
        let mut table = HashMap::new();
        for l in request.into_inner().links {
            let peer = u16::try_from(l.peer)
                .ok()
                .map(ReplicaId)
                .filter(|p| *p != self.me && p.0 > 0)
                .ok_or_else(|| Status::invalid_argument(format!("{} is not a peer", l.peer)))?;
            if !(0.0..=1.0).contains(&l.loss) {
                return Err(Status::invalid_argument("loss must be within 0.0..=1.0"));
            }
            if l.delay_us > 60_000_000 {
                return Err(Status::invalid_argument("delay_us must be at most 60 s"));
            }
            table.insert(
                peer,
                LinkFault {
                    delay: Duration::from_micros(l.delay_us),
                    loss: l.loss,
                    partitioned: l.partitioned,
                },
            );
        }
        tracing::info!(links = table.len(), "transport faults replaced");
        self.faults.set(table);
        Ok(tonic::Response::new(pb::SetFaultsReply {}))
    }
}
