//! A [`Client`]'s calls on the replica and its group rather than on data:
//! the committed state dumped, the members, and group changes run at the
//! leader.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_proto::pb;
use tonic::Status;

use super::{lock, Channel, Client, Replica};
use crate::Error;

/// How long a group change is retried (a leader hand-over, another change
/// in progress).
const GROUP_CHANGE_WAIT: Duration = Duration::from_secs(30);
/// The pause between two tries of a group change.
const GROUP_CHANGE_RETRY: Duration = Duration::from_millis(200);

impl Client {
    /// The connected replica's committed key-value state (`Admin.Dump`),
    /// with the committed length it reflects. Meant for checks after a run
    /// and for small databases: the whole state is held in memory.
    pub async fn dump(&self) -> Result<(u64, BTreeMap<Bytes, Bytes>), Error> {
        let conn = lock(&self.inner.current).clone();
        let mut stream = pb::admin_client::AdminClient::new(conn.channel.clone())
            .dump(pb::DumpRequest {})
            .await
            .map_err(Error::from)?
            .into_inner();
        let (mut committed, mut state) = (0, BTreeMap::new());
        while let Some(chunk) = stream.message().await.map_err(Error::from)? {
            committed = chunk.committed;
            for r in chunk.records {
                state.insert(r.key, r.value);
            }
        }
        Ok((committed, state))
    }

    /// The replica group as the connected replica applied it
    /// (`Admin.Members`).
    pub async fn members(&self) -> Result<pb::MembersReply, Error> {
        let reply = self
            .with_failover(|channel| async move {
                pb::admin_client::AdminClient::new(channel)
                    .members(pb::MembersRequest {})
                    .await
            })
            .await?;
        Ok(reply.into_inner())
    }

    /// Add a replica to the group under `replica` (an id the group never
    /// had), reachable at `peer_addr` and `client_addr`: it joins as a
    /// learner, and the leader makes it a voter once it has caught up.
    /// Start the new replica's `creek serve` with a configuration naming
    /// the current members and itself. Goes to the leader (followed from
    /// any replica). Returns the group once the change is applied.
    pub async fn add_replica(
        &self,
        replica: u16,
        peer_addr: &str,
        client_addr: &str,
    ) -> Result<pb::MembersReply, Error> {
        let request = pb::AddReplicaRequest {
            replica: u32::from(replica),
            peer_addr: peer_addr.to_owned(),
            client_addr: client_addr.to_owned(),
        };
        self.at_leader(move |mut admin| {
            let request = request.clone();
            async move { admin.add_replica(request).await }
        })
        .await
    }

    /// Remove `replica` from the group (it may be down). Removing the
    /// leader hands leadership over first. Returns the group once the
    /// change is applied.
    pub async fn remove_replica(&self, replica: u16) -> Result<pb::MembersReply, Error> {
        let request = pb::RemoveReplicaRequest {
            replica: u32::from(replica),
        };
        self.at_leader(move |mut admin| async move { admin.remove_replica(request).await })
            .await
    }

    /// Run a group change at the leader: a replica that is not the leader
    /// names it (followed), one busy with another change or handing
    /// leadership over says so (retried), for up to [`GROUP_CHANGE_WAIT`].
    async fn at_leader<Fut>(
        &self,
        mut call: impl FnMut(pb::admin_client::AdminClient<Channel>) -> Fut,
    ) -> Result<pb::MembersReply, Error>
    where
        Fut: Future<Output = Result<tonic::Response<pb::MembersReply>, Status>>,
    {
        let give_up = Instant::now() + GROUP_CHANGE_WAIT;
        let mut channel = lock(&self.inner.current).channel.clone();
        loop {
            let status = match call(pb::admin_client::AdminClient::new(channel.clone())).await {
                Ok(reply) => return Ok(reply.into_inner()),
                Err(status) => status,
            };
            let leader = status
                .metadata()
                .get("creek-leader-addr")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let error = Error::from(status.clone());
            let retry = match (status.code(), leader) {
                (tonic::Code::FailedPrecondition, Some(addr)) => {
                    // A leader that just went down is still named until the
                    // others elect a new one: asked again after a pause.
                    // Group changes go over gRPC: no native connection.
                    match Replica::new(
                        addr,
                        self.inner.tls.as_ref(),
                        &self.inner.credentials,
                        None,
                    )?
                    .connect()
                    .await
                    {
                        Ok((leader, _)) => channel = leader,
                        Err(_) => tokio::time::sleep(GROUP_CHANGE_RETRY).await,
                    }
                    true
                }
                (tonic::Code::Aborted, _) => {
                    tokio::time::sleep(GROUP_CHANGE_RETRY).await;
                    true
                }
                _ if error.is_unavailable() => {
                    tokio::time::sleep(GROUP_CHANGE_RETRY).await;
                    let failed = lock(&self.inner.current).index;
                    channel = self.fail_over(failed).await?.channel;
                    true
                }
                _ => false,
            };
            if !retry || Instant::now() >= give_up {
                return Err(error);
            }
        }
    }
}
