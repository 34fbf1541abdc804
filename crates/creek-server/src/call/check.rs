//! What a client's call meets before it reaches the node loop, for both
//! client protocols: the replica serves, the caller's token (checked on
//! every call, so a revoked token stops working at once), the request's
//! limits and procedure, its deadline. Then the call is handed over, and
//! a deadline that passes before the final view is explained.

// tonic's handlers return `Status` by value; boxing it here would only
// move the allocation.
#![allow(clippy::result_large_err)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use creek_core::ReplicaId;
use creek_procs::auth::{Need, Principal};
use creek_proto::pb;
use rustls::pki_types::CertificateDer;
use tokio::sync::mpsc;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

use crate::call::answer::no_quorum;
use crate::metrics::Metrics;
use crate::node_loop::messages::{Event, Invocation};
use crate::transport::Transport;

/// What both front doors (gRPC and native) share to check and hand over
/// a call.
#[derive(Clone)]
pub(crate) struct FrontDoor {
    pub(crate) events: mpsc::Sender<Event>,
    /// Status snapshots, asked of the node loop at most once per interval.
    pub(crate) status: Arc<crate::service::StatusCache>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) transport: Arc<Transport>,
    pub(crate) me: ReplicaId,
    pub(crate) max_request_bytes: usize,
    pub(crate) stopping: Arc<AtomicBool>,
    /// Users and their rights, when `[auth] enabled`.
    pub(crate) auth: Option<Arc<crate::auth::Auth>>,
    /// The shard map and this replica's shard, on a sharded cluster.
    pub(crate) shards: Option<Arc<crate::shards::ShardGate>>,
    /// The messages of operations across shards, on a shard's replica.
    pub(crate) mpo: Option<Arc<crate::mpo::Link>>,
    /// How far the move of keys this replica drives has come, on a
    /// shard's replica.
    pub(crate) moves: Option<crate::mover::MoveProgress>,
}

/// The answer to a call that comes while the replica stops (or after).
pub(crate) fn shutting_down() -> Status {
    Status::unavailable("the replica is shutting down")
}

impl FrontDoor {
    /// `UNAVAILABLE` once the replica is stopping.
    pub(crate) fn serving(&self) -> Result<(), Status> {
        if self.stopping.load(Ordering::Relaxed) {
            return Err(shutting_down());
        }
        Ok(())
    }

    /// The caller (see [`authorize`]).
    pub(crate) fn caller(
        &self,
        credentials: &MetadataMap,
        certs: Option<&[CertificateDer<'_>]>,
        need: &Need,
    ) -> Result<Option<Principal>, Status> {
        authorize(self.auth.as_deref(), credentials, certs, need)
    }

    /// The checks an invocation meets before it reaches the node loop:
    /// the replica serves, the request is well formed and within the
    /// limits, its keys are this shard's (a strong call across shards
    /// becomes the origin's [`creek_procs::mpo::RUN`] call), its deadline
    /// has not passed.
    pub(crate) fn prepare(
        &self,
        req: &pb::InvokeRequest,
        timeout: Option<Duration>,
    ) -> Result<(creek_core::Request, creek_node::AnswerAfter), Status> {
        self.serving()?;
        let mut request = crate::request::to_request(req, self.max_request_bytes)?;
        let after = crate::request::answer_after(req)?;
        if let Some(gate) = &self.shards {
            if let Some(mpo) = gate.check(&request.call, request.strong)? {
                // An operation across shards, this replica its origin.
                request.call = mpo.call(&request.call);
            }
        }
        if timeout.is_some_and(|t| t.is_zero()) {
            return Err(Status::deadline_exceeded(
                "the deadline passed before the op was accepted",
            ));
        }
        Ok((request, after))
    }

    /// Hand `inv` to the node loop.
    pub(crate) async fn submit(&self, inv: Invocation) -> Result<(), Status> {
        self.events
            .send(Event::Invoke(inv))
            .await
            .map_err(|_| shutting_down())
    }

    /// What a call's views need to explain a deadline.
    pub(crate) fn late(&self, strong: bool) -> Late {
        Late {
            metrics: self.metrics.clone(),
            transport: self.transport.clone(),
            me: self.me,
            strong,
            across: None,
        }
    }
}

/// The caller of a call with `credentials` (the `authorization` header)
/// and `certs` (a client certificate), if this replica checks users
/// (`auth`): `UNAUTHENTICATED` without a valid token or a client
/// certificate naming a user, `PERMISSION_DENIED` without what `need` asks.
pub(crate) fn authorize(
    auth: Option<&crate::auth::Auth>,
    credentials: &MetadataMap,
    certs: Option<&[CertificateDer<'_>]>,
    need: &Need,
) -> Result<Option<Principal>, Status> {
    let Some(auth) = auth.filter(|a| a.enabled()) else {
        return Ok(None);
    };
    auth.authorize(credentials, certs, need).map(Some)
}

/// What a call needs to time its op and to explain a deadline.
pub(crate) struct Late {
    pub(crate) metrics: Arc<Metrics>,
    transport: Arc<Transport>,
    me: ReplicaId,
    pub(crate) strong: bool,
    /// The op, if it may be an operation across shards this replica
    /// originated.
    across: Option<(Arc<crate::mpo::Link>, creek_procs::mpo::MpoId)>,
}

impl Late {
    /// For the op `handle` names: an operation across shards says how far
    /// it got.
    pub(crate) fn of(
        mut self,
        handle: creek_core::ExecKey,
        mpo: Option<&Arc<crate::mpo::Link>>,
    ) -> Self {
        if let (creek_core::ExecKey::Op(id), Some(link)) = (handle, mpo) {
            let mpo = creek_procs::mpo::MpoId {
                origin: u64::from(id.origin.0),
                seq: id.seq,
            };
            self.across = Some((link.clone(), mpo));
        }
        self
    }

    /// The status of an op whose deadline passed before its final view,
    /// saying so when this replica cannot reach a majority of the group,
    /// and for an operation across shards what it waits for.
    pub(crate) fn deadline(&self) -> Status {
        self.metrics.op(self.strong, "deadline");
        let peers = self.transport.peers();
        let message = "the final view did not come before the deadline; the op may still \
                       commit — retry with the same request id to learn its result";
        let progress = self
            .across
            .as_ref()
            .and_then(|(link, mpo)| link.progress(*mpo));
        if let Some(progress) = progress {
            let why = format!("an operation across shards: {progress}");
            return Status::new(Code::DeadlineExceeded, format!("{why}; {message}"));
        }
        match no_quorum(self.me, &peers) {
            Some(why) => Status::new(Code::DeadlineExceeded, format!("{why}; {message}")),
            None => Status::new(Code::DeadlineExceeded, message),
        }
    }
}
