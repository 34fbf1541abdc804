//! What the chaos driver knows while a run goes on: each replica slot's
//! state as the nemesis left it, the faults it injected and when, what the
//! clients saw, and each replica's committed order as polled.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use creek_check::history::OpRecord;
use creek_core::{OpId, ReplicaId};
use creek_types::ClientRequestId;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A committed position the driver never saw a replica list (it took the
/// position from a peer's checkpoint, or trimmed it before a poll): filled
/// from the longest list at the end.
pub(crate) const UNSEEN: OpId = OpId {
    origin: ReplicaId(0),
    seq: 0,
};

/// Where a replica slot stands in the group, as the driver changed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Membership {
    /// In the group (added, or one of the founders).
    Member,
    /// Removed from the group (it runs on until the end, so ops it
    /// answered reach the group).
    Removed,
    /// Started to join, but the change did not go through.
    NeverAdded,
}

/// TLS on every link and a token on every call (`creek chaos --secure`):
/// what the driver's clients connect with.
#[derive(Clone)]
pub(crate) struct Security {
    /// The run's CA and the client certificate `root`.
    pub(crate) tls: creek_client::TlsOptions,
    /// The root token (the configured one: every right).
    pub(crate) token: String,
}

/// Puts the run's token, if any, on every raw gRPC call.
#[derive(Clone)]
pub(crate) struct Bearer(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A raw gRPC connection to a replica, with the run's credentials.
pub(crate) type Conn = InterceptedService<Channel, Bearer>;

/// One replica slot (replica id `index + 1`).
pub(crate) struct Slot {
    /// Its client endpoint.
    pub(crate) addr: SocketAddr,
    /// A lazily connected channel to it.
    pub(crate) channel: Conn,
    pub(crate) membership: Membership,
    /// Its process runs (possibly stopped).
    pub(crate) running: bool,
    /// Its process is stopped (`SIGSTOP`).
    pub(crate) paused: bool,
    /// When it was killed (µs since the start).
    pub(crate) kills: Vec<u64>,
    /// Its data directory was deleted at least once.
    pub(crate) wiped: bool,
    /// Intervals (µs) during which it was running, not stopped and cut
    /// off in a minority.
    pub(crate) minority_spans: Vec<(u64, u64)>,
    /// Intervals (µs) during which it was stopped or killed.
    pub(crate) down_spans: Vec<(u64, u64)>,
    /// Its committed order as polled, [`UNSEEN`] where not seen.
    pub(crate) committed: Vec<OpId>,
    /// The last poll's answer.
    pub(crate) last: Option<Polled>,
}

/// What the last `Admin.Committed` poll of a replica said.
#[derive(Clone, Debug)]
pub(crate) struct Polled {
    pub(crate) committed: u64,
    pub(crate) finalized: u64,
    pub(crate) pending: u64,
    pub(crate) quiet: bool,
    pub(crate) standing: String,
}

impl Slot {
    pub(crate) fn new(
        addr: SocketAddr,
        membership: Membership,
        security: Option<&Security>,
    ) -> Result<Slot, String> {
        let scheme = if security.is_some() { "https" } else { "http" };
        let mut endpoint = Channel::from_shared(format!("{scheme}://{addr}"))
            .map_err(|e| format!("replica address {addr}: {e}"))?
            .connect_timeout(Duration::from_millis(500))
            .tcp_nodelay(true);
        let mut bearer = None;
        if let Some(s) = security {
            endpoint = endpoint
                .tls_config(s.tls.tonic())
                .map_err(|e| format!("TLS for {addr}: {e}"))?;
            let value = format!("Bearer {}", s.token)
                .parse()
                .map_err(|_| "the token is not valid metadata".to_owned())?;
            bearer = Some(value);
        }
        let channel = InterceptedService::new(endpoint.connect_lazy(), Bearer(bearer));
        Ok(Slot {
            addr,
            channel,
            membership,
            running: true,
            paused: false,
            kills: Vec::new(),
            wiped: false,
            minority_spans: Vec::new(),
            down_spans: Vec::new(),
            committed: Vec::new(),
            last: None,
        })
    }

    /// Running, not stopped: it answers.
    pub(crate) fn up(&self) -> bool {
        self.running && !self.paused
    }

    /// Up, and its last poll (since it last started) said it is a member
    /// holding its data.
    pub(crate) fn serving(&self) -> bool {
        self.up() && self.last.as_ref().is_some_and(|p| p.standing == "member")
    }
}

/// Everything the driver's tasks share.
pub(crate) struct World {
    start: Instant,
    /// What every connection of the run uses (`--secure`), if anything.
    pub(crate) security: Option<Security>,
    state: Mutex<State>,
    /// Clients stop issuing new ops.
    pub(crate) stop_clients: AtomicBool,
    /// The committed-order poller stops.
    pub(crate) stop_polling: AtomicBool,
}

/// The mutable part of [`World`].
pub(crate) struct State {
    pub(crate) slots: Vec<Slot>,
    /// Every op attempt a client made, in completion order.
    pub(crate) history: Vec<OpRecord>,
    /// The committed order: at each position the id some replica listed
    /// there ([`UNSEEN`] where none did).
    pub(crate) canonical: Vec<OpId>,
    /// The client request id each committed op carried, where it did.
    pub(crate) requests: std::collections::HashMap<OpId, ClientRequestId>,
    /// When each committed id was first seen committed (µs).
    pub(crate) committed_at: std::collections::HashMap<OpId, u64>,
    /// The first place two replicas' committed orders disagreed.
    pub(crate) prefix_violation: Option<String>,
    /// Faults injected, by kind.
    pub(crate) faults: BTreeMap<&'static str, u64>,
    /// Replicas that exited by themselves, with the end of their logs.
    pub(crate) exits: Vec<String>,
    /// Every weak attempt made while its replica was serving: the replica,
    /// when, and the error it ended with unless it was answered.
    pub(crate) weak_attempts: Vec<(usize, u64, Result<(), String>)>,
    /// Things the nemesis could not do (not violations), with counts.
    pub(crate) skipped: BTreeMap<String, u64>,
}

impl World {
    pub(crate) fn new(slots: Vec<Slot>, security: Option<Security>) -> World {
        World {
            start: Instant::now(),
            security,
            state: Mutex::new(State {
                slots,
                history: Vec::new(),
                canonical: Vec::new(),
                committed_at: std::collections::HashMap::new(),
                requests: std::collections::HashMap::new(),
                prefix_violation: None,
                faults: BTreeMap::new(),
                exits: Vec::new(),
                weak_attempts: Vec::new(),
                skipped: BTreeMap::new(),
            }),
            stop_clients: AtomicBool::new(false),
            stop_polling: AtomicBool::new(false),
        }
    }

    /// A slot for a replica at `addr`, connected with the run's
    /// credentials.
    pub(crate) fn slot(&self, addr: SocketAddr, membership: Membership) -> Result<Slot, String> {
        Slot::new(addr, membership, self.security.as_ref())
    }

    /// A client of the replicas at `addrs`, with the run's credentials.
    pub(crate) async fn connect(
        &self,
        addrs: impl IntoIterator<Item = String>,
    ) -> Result<creek_client::Client, creek_client::Error> {
        let options = creek_client::ConnectOptions {
            tls: self.security.as_ref().map(|s| s.tls.clone()),
            token: self.security.as_ref().map(|s| s.token.clone()),
            ..Default::default()
        };
        creek_client::Client::connect_with_options(addrs, options).await
    }

    /// Microseconds since the run started: the history's clock.
    pub(crate) fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn clients_stopped(&self) -> bool {
        self.stop_clients.load(Ordering::Relaxed)
    }

    pub(crate) fn polling_stopped(&self) -> bool {
        self.stop_polling.load(Ordering::Relaxed)
    }
}

impl State {
    /// Indexes of the slots in the group.
    pub(crate) fn members(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].membership == Membership::Member)
            .collect()
    }

    /// Count a fault of `kind`.
    pub(crate) fn count(&mut self, kind: &'static str) {
        *self.faults.entry(kind).or_default() += 1;
    }

    /// Take replica `i`'s poll answer: extend its committed list, and check
    /// each new position against what the other replicas committed there.
    pub(crate) fn merge(
        &mut self,
        i: usize,
        start: u64,
        ids: Vec<(OpId, Option<ClientRequestId>)>,
        polled: Polled,
        now_us: u64,
    ) {
        let slot = &mut self.slots[i];
        slot.last = Some(polled);
        let start = usize::try_from(start).unwrap_or(usize::MAX);
        if start > slot.committed.len() {
            slot.committed.resize(start, UNSEEN);
        }
        let skip = slot.committed.len() - start.min(slot.committed.len());
        for (id, request) in ids.into_iter().skip(skip) {
            let pos = slot.committed.len();
            slot.committed.push(id);
            self.committed_at.entry(id).or_insert(now_us);
            if let Some(r) = request {
                self.requests.entry(id).or_insert(r);
            }
            match self.canonical.get_mut(pos) {
                None => {
                    self.canonical.resize(pos, UNSEEN);
                    self.canonical.push(id);
                }
                Some(c) if *c == UNSEEN => *c = id,
                Some(c) if *c != id && self.prefix_violation.is_none() => {
                    self.prefix_violation = Some(format!(
                        "replica {} committed {id} at position {pos}, where another replica \
                         committed {c}",
                        i + 1
                    ));
                }
                Some(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn polled(committed: u64) -> Polled {
        Polled {
            committed,
            finalized: committed,
            pending: 0,
            quiet: true,
            standing: "member".into(),
        }
    }

    fn id(origin: u16, seq: u64) -> (OpId, Option<ClientRequestId>) {
        (OpId::new(ReplicaId(origin), seq), None)
    }

    #[tokio::test]
    async fn polls_build_the_committed_order_and_catch_a_disagreement() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap_or_else(|_| unreachable!());
        let slots = (0..2)
            .map(|_| Slot::new(addr, Membership::Member, None))
            .collect::<Result<Vec<_>, _>>()
            .unwrap_or_else(|e| panic!("{e}"));
        let world = World::new(slots, None);
        let mut state = world.lock();
        state.merge(0, 0, vec![id(1, 1), id(1, 2)], polled(2), 10);
        // Replica 2 forgot positions 0 and 1 (a checkpoint) before a poll.
        state.merge(1, 2, vec![id(2, 1)], polled(3), 20);
        assert_eq!(state.slots[1].committed[..2], [UNSEEN, UNSEEN]);
        assert_eq!(state.canonical, [id(1, 1).0, id(1, 2).0, id(2, 1).0]);
        assert!(state.prefix_violation.is_none());
        // Asked again from where it stood, replica 1 disagrees at position 2.
        state.merge(0, 2, vec![id(1, 3)], polled(3), 30);
        let v = state.prefix_violation.clone().unwrap_or_default();
        assert!(v.contains("replica 1 committed r1.3 at position 2"), "{v}");
    }
}
