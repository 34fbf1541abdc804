//! Operations across shards on a running replica (docs/cross-shard.md):
//! the messages between replicas of different groups that the replica
//! protocol leaves to its driver, carried by the `Creek.Mpo` call on the
//! replicas' client ports.
//!
//! The replica protocol (`creek_core::replica::mpo`) decides when an MPO
//! commits; this room moves its messages:
//!
//! - **the origin** (the replica a client called), once its op's id
//!   cannot be issued again after a crash, hands each other involved
//!   shard its copy (a replica of that
//!   shard invokes it), then has the directory sequence the MPO
//!   ([`Link::originate`]). The copies go first: an MPO is sequenced only
//!   once every involved shard holds it, so a shard never waits for an
//!   MPO no shard can give it;
//! - **the directory replica** that sequenced it tells every replica of
//!   every involved shard its index once the sequencing is committed
//!   ([`Link::tell_indices`]);
//! - **each shard's leader**, at an MPO's committed position, sends the
//!   values it read to every replica of the other involved shards
//!   ([`Link::push_reads`]);
//! - **each shard's leader**, every stable-time interval, sends its
//!   shard's stable time to every replica of the other shards
//!   ([`Link::push_stable`]; docs/snapshot-reads.md, "Stable times"): not
//!   about an MPO, but between the same replicas, and as cheap to carry
//!   along;
//! - **a replica whose committed order waits** on an MPO for a while —
//!   its index or another shard's reads did not come (a lost message, a
//!   crashed origin, a replica catching up) — asks for them itself
//!   ([`Link::chase`]): the directory for the index (sequencing is
//!   idempotent), a replica of the shard for its reads, handing it the
//!   shard's copy in case it holds none.
//!
//! Every request is answered by any replica of the group asked (replicas
//! of a shard read the same values at the same committed position), so a
//! request that fails is tried at the next one.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use creek_core::ReplicaId;
use creek_procs::mpo::{MpoCall, MpoId, Reads};
use creek_proto::pb;
use creek_types::ProcCall;
use tokio::sync::mpsc;
use tonic::transport::Channel;

use crate::node_loop::messages::Event;
use crate::shards::ShardGate;
use creek_node::mpo::wire::{Reply, Request, BATCH_MAX};
use creek_node::mpo::Chase;

/// Longest wait for one replica's answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the origin keeps trying to hand out copies and have the MPO
/// sequenced; past it, the replicas whose committed order waits on the
/// MPO chase what is missing themselves.
const ORIGIN_PATIENCE: Duration = Duration::from_secs(30);

/// First pause between two rounds of asks of a group none of whose
/// replicas answered; doubled each round up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// An MPO this replica took from a client: what it hands out.
#[derive(Clone, Debug)]
pub struct Origin {
    /// The MPO as this replica runs it (its id set).
    pub call: MpoCall,
    /// The op's call (a [`creek_procs::mpo::RUN`] call with the client's
    /// request id and user), the template of every shard's copy.
    pub op_call: ProcCall,
}

/// How many MPOs' progress the origin remembers (to explain a deadline).
const PROGRESS_KEPT: usize = 4096;

/// How far the origin got in handing out one of its MPOs: what a client
/// whose deadline passed is told it waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Shards that have not taken their copy yet (no replica answered).
    Copies(Vec<u32>),
    /// Every shard holds its copy; the directory has not ordered it.
    Sequencing,
    /// Ordered by the directory: each shard runs it at its turn, once the
    /// MPOs before it there have run and every involved shard's reads
    /// are in.
    Sequenced,
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Progress::Copies(shards) => {
                let names: Vec<String> = shards.iter().map(u32::to_string).collect();
                write!(
                    f,
                    "no replica of shard {} has taken its copy yet (is a majority of it up?)",
                    names.join(", ")
                )
            }
            Progress::Sequencing => write!(
                f,
                "the directory group has not ordered it yet (is a majority of it up?)"
            ),
            Progress::Sequenced => write!(
                f,
                "the directory ordered it; it waits for each involved shard to run it at its \
                 turn (a shard without a majority holds it)"
            ),
        }
    }
}

/// Which group a request goes to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum To {
    Shard(u32),
    Directory,
}

/// The MPO messages of one replica.
pub struct Link {
    gate: Arc<ShardGate>,
    tls: Option<crate::config::TlsConfig>,
    me: ReplicaId,
    /// This replica's shard (0 on a directory replica, which sends no
    /// reads).
    shard: u32,
    events: mpsc::Sender<Event>,
    runtime: tokio::runtime::Handle,
    /// One channel per replica address, kept (they reconnect by
    /// themselves after a failure).
    channels: Mutex<HashMap<String, Channel>>,
    /// MPOs being chased (one chase of each at a time).
    chasing: Mutex<HashSet<MpoId>>,
    /// Where the next ask of each group starts, so asks spread over its
    /// replicas and one that does not answer is passed.
    next: Mutex<HashMap<Option<u32>, usize>>,
    /// How far each of this replica's last MPOs got, oldest first.
    progress: Mutex<(HashMap<MpoId, Progress>, VecDeque<MpoId>)>,
    /// Messages waiting for the call out to each replica, by id.
    outboxes: Mutex<HashMap<u16, Outbox>>,
}

/// The messages [`Link::fire`] holds for one replica.
#[derive(Default)]
struct Outbox {
    queued: Vec<Request>,
    /// A task is sending this replica's messages.
    sending: bool,
}

/// Most messages waiting for one replica.
const QUEUED_MAX: usize = 16_384;

impl Link {
    /// The link of replica `me` of a sharded cluster. Must be called
    /// inside a tokio runtime.
    pub fn new(
        gate: Arc<ShardGate>,
        tls: Option<crate::config::TlsConfig>,
        me: ReplicaId,
        events: mpsc::Sender<Event>,
    ) -> Arc<Self> {
        let shard = u32::from(gate.shard().0);
        Arc::new(Link {
            gate,
            tls,
            me,
            shard,
            events,
            runtime: tokio::runtime::Handle::current(),
            channels: Mutex::default(),
            chasing: Mutex::default(),
            next: Mutex::default(),
            progress: Mutex::default(),
            outboxes: Mutex::default(),
        })
    }

    /// How far MPO `mpo` of this replica got, if it is one of the last
    /// ones this replica originated.
    pub fn progress(&self, mpo: MpoId) -> Option<Progress> {
        let held = self.progress.lock().unwrap_or_else(PoisonError::into_inner);
        held.0.get(&mpo).cloned()
    }

    /// The runtime its messages travel on.
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    fn note(&self, mpo: MpoId, now: Progress) {
        let mut held = self.progress.lock().unwrap_or_else(PoisonError::into_inner);
        let (map, order) = &mut *held;
        if map.insert(mpo, now).is_none() {
            order.push_back(mpo);
            if order.len() > PROGRESS_KEPT {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
    }

    /// Hand out a new MPO of this replica's: its copies to the other
    /// shards (at once), then its sequencing, then its indices to every
    /// replica of its shards.
    pub fn originate(self: &Arc<Self>, origin: Origin) {
        let link = self.clone();
        self.runtime.spawn(async move {
            let mpo = origin.call.id;
            let started = Instant::now();
            let others: Vec<u32> = origin.call.others().collect();
            link.note(mpo, Progress::Copies(others.clone()));
            // Every other shard's copy at once.
            let copies = others.into_iter().filter_map(|s| {
                let copy = origin.call.for_shard(s).ok()?;
                let req = Request::Copy(copy.call(&origin.op_call));
                let link = &link;
                Some(async move { (s, link.persist(To::Shard(s), &req, started).await) })
            });
            let missing: Vec<u32> = futures_util::future::join_all(copies)
                .await
                .into_iter()
                .filter_map(|(s, taken)| taken.is_none().then_some(s))
                .collect();
            if !missing.is_empty() {
                tracing::warn!(%mpo, shards = ?missing, "no replica of these shards took the operation's copy; the replicas holding one will hand it out");
                link.note(mpo, Progress::Copies(missing));
                return;
            }
            link.note(mpo, Progress::Sequencing);
            let shards = origin.call.parts.iter().map(|p| p.shard).collect();
            let req = Request::Sequence { mpo, shards };
            // The directory replica that sequenced it tells the shards.
            match link.persist(To::Directory, &req, started).await {
                Some(Reply::Indices(_)) => link.note(mpo, Progress::Sequenced),
                _ => tracing::warn!(%mpo, "the directory did not sequence the operation across shards; its replicas will ask"),
            }
        });
    }

    /// Send the values this shard read for `mpo` to every replica of the
    /// shards in `to`.
    pub fn push_reads(self: &Arc<Self>, mpo: MpoId, to: &[u32], reads: Reads) {
        let req = Request::Reads {
            mpo,
            from: self.shard,
            reads,
        };
        for s in to {
            for (id, addr) in self.gate.endpoints(Some(*s)) {
                self.fire(id, addr, req.clone());
            }
        }
    }

    /// Send shard `from`'s stable time `time` to every replica of the
    /// shards in `to`. Only the newest matters: one still waiting for a
    /// replica is overwritten, so a replica that does not answer holds
    /// one stable time in its queue, not one per interval.
    pub fn push_stable(self: &Arc<Self>, from: u32, to: &[u32], time: u64) {
        for s in to {
            for (id, addr) in self.gate.endpoints(Some(*s)) {
                self.fire(id, addr, Request::Stable { from, time });
            }
        }
    }

    /// Ask for what the committed order waiting on `mpo` misses (one
    /// chase of each MPO at a time; a call while one runs does nothing).
    pub fn chase(self: &Arc<Self>, mpo: MpoId, what: Chase) {
        if !self
            .chasing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(mpo)
        {
            return;
        }
        let link = self.clone();
        self.runtime.spawn(async move {
            // What the answers give this replica; handed to its loop only
            // once the chase is done with, so a chase the loop asks for
            // next (the MPO's reads, once its index is here) is not taken
            // for this one still running and dropped.
            let mut learnt = Vec::new();
            match what {
                Chase::Index { shards, copies } => {
                    for (s, copy) in copies {
                        link.ask_any(To::Shard(s), &Request::Copy(copy)).await;
                    }
                    let req = Request::Sequence { mpo, shards };
                    // The directory replica tells every shard; this one
                    // takes its own index from the answer too.
                    if let Some(Reply::Indices(given)) = link.ask_any(To::Directory, &req).await {
                        if link.progress(mpo).is_some() {
                            link.note(mpo, Progress::Sequenced);
                        }
                        if let Some((_, index)) = given.iter().find(|(s, _)| *s == link.shard) {
                            learnt.push(Request::Sequenced { mpo, index: *index });
                        }
                    }
                }
                Chase::Reads(from) => {
                    for (s, copy) in from {
                        let req = Request::Pull { mpo, copy };
                        if let Some(Reply::Reads(reads)) = link.ask_any(To::Shard(s), &req).await {
                            learnt.push(Request::Reads {
                                mpo,
                                from: s,
                                reads,
                            });
                        }
                    }
                }
            }
            link.chasing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&mpo);
            match learnt.len() {
                0 => {}
                1 => link.to_self(learnt.remove(0)),
                _ => link.to_self(Request::Batch(learnt)),
            }
        });
    }

    /// Tell every replica of each shard in `given` its index of `mpo`.
    pub fn tell_indices(self: &Arc<Self>, mpo: MpoId, given: &[(u32, u64)]) {
        for (s, index) in given {
            let req = Request::Sequenced { mpo, index: *index };
            for (id, addr) in self.gate.endpoints(Some(*s)) {
                if id == self.me.0 {
                    self.to_self(req.clone());
                } else {
                    self.fire(id, addr, req.clone());
                }
            }
        }
    }

    /// Hand `req` to this replica's own node loop.
    fn to_self(&self, req: Request) {
        // Full: the loop is far behind; the committed order's chase asks
        // again.
        let _ = self.events.try_send(Event::Mpo(req, None));
    }

    /// Send `req` (a message that needs no answer) to replica `id` at
    /// `addr` without waiting for it. Messages to one replica go one call
    /// at a time: those queued while a call is out leave together in the
    /// next ([`Request::Batch`]), so a busy replica sends fewer, larger
    /// calls and an idle one sends each at once. A stable time replaces
    /// the one of its shard still queued. Past [`QUEUED_MAX`] queued, more
    /// are dropped (their receivers ask for what they miss; the next
    /// stable time comes an interval later).
    fn fire(self: &Arc<Self>, id: u16, addr: String, req: Request) {
        {
            let mut out = self.outboxes.lock().unwrap_or_else(PoisonError::into_inner);
            let outbox = out.entry(id).or_default();
            if let Request::Stable { from, time } = req {
                let queued = outbox.queued.iter_mut().find_map(|q| match q {
                    Request::Stable { from: f, time: t } if *f == from => Some(t),
                    _ => None,
                });
                if let Some(t) = queued {
                    *t = (*t).max(time);
                    return;
                }
            }
            if outbox.queued.len() >= QUEUED_MAX {
                return;
            }
            outbox.queued.push(req);
            if std::mem::replace(&mut outbox.sending, true) {
                return; // the call out takes it next
            }
        }
        let link = self.clone();
        self.runtime.spawn(async move {
            loop {
                let mut next = {
                    let mut out = link.outboxes.lock().unwrap_or_else(PoisonError::into_inner);
                    let outbox = out.entry(id).or_default();
                    if outbox.queued.is_empty() {
                        outbox.sending = false;
                        return;
                    }
                    let n = outbox.queued.len().min(BATCH_MAX);
                    outbox.queued.drain(..n).collect::<Vec<_>>()
                };
                let req = match next.len() {
                    1 => next.remove(0),
                    _ => Request::Batch(next),
                };
                if let Err(e) = link.ask(id, &addr, &req).await {
                    tracing::debug!(replica = id, %addr, error = %e, "MPO messages were not taken");
                }
            }
        });
    }

    /// Ask `to` until one of its replicas answers with anything but
    /// [`Reply::Pending`], pausing between rounds, for
    /// [`ORIGIN_PATIENCE`] from `started`.
    async fn persist(&self, to: To, req: &Request, started: Instant) -> Option<Reply> {
        let mut pause = RETRY_MIN;
        loop {
            if let Some(reply) = self.ask_any(to, req).await {
                return Some(reply);
            }
            if started.elapsed() > ORIGIN_PATIENCE {
                return None;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MAX);
        }
    }

    /// Ask the replicas of `to` one after the other, from where the last
    /// ask of the group left off (a replica that says to ask another is
    /// asked next), until one answers with anything but
    /// [`Reply::Pending`]; each replica once.
    pub(crate) async fn ask_any(&self, to: To, req: &Request) -> Option<Reply> {
        let key = match to {
            To::Shard(s) => Some(s),
            To::Directory => None,
        };
        let replicas = self.gate.endpoints(key);
        let start = *self
            .next
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .unwrap_or(&0);
        let mut order: std::collections::VecDeque<usize> = (0..replicas.len())
            .map(|k| (start + k) % replicas.len())
            .collect();
        let mut asked = HashSet::new();
        while let Some(at) = order.pop_front() {
            if !asked.insert(at) {
                continue;
            }
            let (id, addr) = &replicas[at];
            match self.ask(*id, addr, req).await {
                Ok(Reply::Pending) => {}
                Ok(Reply::Elsewhere(leader)) => {
                    if let Some(j) = replicas.iter().position(|(r, _)| *r == leader) {
                        order.push_front(j);
                    }
                }
                Ok(reply) => {
                    self.next
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(key, at);
                    return Some(reply);
                }
                Err(e) => {
                    tracing::debug!(replica = id, %addr, error = %e, "asked about an MPO, no answer")
                }
            }
        }
        // Start the next ask after the replica this one started at.
        self.next
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, start + 1);
        None
    }

    /// Ask replica `id` at `addr`.
    async fn ask(&self, id: u16, addr: &str, req: &Request) -> Result<Reply, String> {
        let channel = self.channel(id, addr)?;
        let envelope = pb::MpoEnvelope {
            cluster: self.gate.cluster(),
            body: req.encode(),
        };
        let mut client = pb::creek_client::CreekClient::new(channel);
        let answer = tokio::time::timeout(ASK_TIMEOUT, client.mpo(envelope))
            .await
            .map_err(|_| "no answer in time".to_owned())?
            .map_err(|e| e.message().to_owned())?
            .into_inner();
        Reply::decode(&answer.body)
    }

    fn channel(&self, id: u16, addr: &str) -> Result<Channel, String> {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = channels.get(addr) {
            return Ok(c.clone());
        }
        let c = crate::shards::channel(id, addr, self.tls.as_ref())?;
        channels.insert(addr.to_owned(), c.clone());
        Ok(c)
    }
}
