//! The nemesis: one fault at a time, held for a while and healed, chosen
//! by the seed; the poller that follows every replica's committed order;
//! settling and the final dumps.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use creek_proto::pb;
use creek_server::ServerConfig;
use creek_sim::rng::Rng;

use creek_core::OpId;
use creek_types::ClientRequestId;

use super::world::{Membership, Polled, World};
use crate::servers::Servers;
use creek_harness::launcher::Signal;

/// One of `from`, chosen by `rng`.
fn pick(rng: &mut Rng, from: &[usize]) -> usize {
    from[rng.index(from.len())]
}

/// One of `faults`' kinds, each as likely as its weight.
pub(super) fn pick_weighted(rng: &mut Rng, faults: &[(&'static str, u64)]) -> &'static str {
    let total: u64 = faults.iter().map(|(_, w)| w).sum();
    let mut roll = rng.range(0, total);
    faults
        .iter()
        .find(|(_, w)| {
            if roll < *w {
                true
            } else {
                roll -= w;
                false
            }
        })
        .map_or("kill", |(k, _)| *k)
}

/// Most replica slots a run uses (ids are never reused: each add takes one).
const MAX_SLOTS: usize = 9;

/// The faults, with their weights.
const FAULTS: &[(&str, u64)] = &[
    ("kill", 16),
    ("kill-leader", 10),
    ("kill-all", 4),
    ("pause", 12),
    ("partition", 16),
    ("partition-leader", 8),
    ("slow", 8),
    ("wipe", 6),
    ("add", 5),
    ("remove", 5),
];

pub(crate) struct Nemesis<E> {
    world: Arc<World>,
    rng: Rng,
    edit: E,
}

impl<E: Fn(&mut ServerConfig)> Nemesis<E> {
    pub(crate) fn new(world: Arc<World>, seed: u64, edit: E) -> Self {
        Nemesis {
            world,
            rng: Rng::new(seed ^ 0x006e_656d_6573_6973),
            edit,
        }
    }

    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.rng.range(lo, hi))
    }

    /// Inject faults until `until`.
    pub(crate) async fn run(&mut self, servers: &mut Servers, until: std::time::Instant) {
        while std::time::Instant::now() < until {
            let gap = self.ms(300, 1500);
            tokio::time::sleep(gap).await;
            self.note_exits(servers);
            let kind = pick_weighted(&mut self.rng, FAULTS);
            match self.inject(kind, servers).await {
                Ok(true) => self.world.lock().count(kind),
                Ok(false) => {}
                Err(e) => {
                    *self
                        .world
                        .lock()
                        .skipped
                        .entry(format!("{kind}: {e}"))
                        .or_default() += 1;
                }
            }
        }
    }

    /// Record replicas that exited by themselves (a crash is a finding).
    pub(crate) fn note_exits(&self, servers: &mut Servers) {
        let n = self.world.lock().slots.len();
        for i in 0..n {
            if let Some(why) = servers.exited(i) {
                let tail = creek_server::replica_log::log_tail(&servers.log_path(i));
                self.world
                    .lock()
                    .exits
                    .push(format!("replica {}: {why}; {tail}", i + 1));
                // Reaped and counted as killed: its unsynced writes are gone.
                let _ = self.kill(servers, i);
            }
        }
    }

    /// Inject one fault and heal it; `Ok(false)`: it did not apply now.
    async fn inject(&mut self, kind: &str, servers: &mut Servers) -> Result<bool, String> {
        let members = self.world.lock().members();
        let whole = {
            let state = self.world.lock();
            members.iter().all(|&i| state.slots[i].serving())
        };
        if !whole {
            // The last fault is still being repaired (a restart, a rebuild,
            // a join): one fault at a time, never a majority without data.
            return Ok(false);
        }
        match kind {
            "kill" | "kill-leader" => self.kill_one(kind, servers, &members).await,
            "kill-all" => self.kill_all(servers, &members).await,
            "pause" => self.pause(servers, &members).await,
            "partition" | "partition-leader" => self.partition(kind, &members).await,
            "slow" => self.slow(&members).await,
            "wipe" => self.wipe(servers, &members).await,
            "add" => self.add(servers, &members).await,
            "remove" => self.remove(&members).await,
            _ => Ok(false),
        }
    }

    /// SIGKILL a replica (`kill-leader`: the leader), restart it a while later.
    async fn kill_one(
        &mut self,
        kind: &str,
        servers: &mut Servers,
        members: &[usize],
    ) -> Result<bool, String> {
        let i = if kind == "kill-leader" {
            match leader(&self.world, members).await {
                Some(l) => l,
                None => return Ok(false),
            }
        } else {
            pick(&mut self.rng, members)
        };
        poll_one(&self.world, i).await;
        self.kill(servers, i)?;
        tokio::time::sleep(self.ms(500, 3000)).await;
        self.start(servers, i)?;
        Ok(true)
    }

    /// SIGKILL every member at once, restart them all a while later.
    async fn kill_all(&mut self, servers: &mut Servers, members: &[usize]) -> Result<bool, String> {
        self.crash(servers, members).await?;
        tokio::time::sleep(self.ms(200, 2000)).await;
        for &i in members {
            self.start(servers, i)?;
        }
        Ok(true)
    }

    /// SIGSTOP a replica, SIGCONT it a while later.
    async fn pause(&mut self, servers: &mut Servers, members: &[usize]) -> Result<bool, String> {
        let i = pick(&mut self.rng, members);
        servers.signal(i, Signal::Stop)?;
        let now = self.world.now_us();
        self.world.lock().slots[i].paused = true;
        tokio::time::sleep(self.ms(500, 3000)).await;
        servers.signal(i, Signal::Cont)?;
        let end = self.world.now_us();
        let mut state = self.world.lock();
        state.slots[i].paused = false;
        state.slots[i].down_spans.push((now, end));
        Ok(true)
    }

    /// Cut a minority (`partition-leader`: with the leader) off, then heal.
    async fn partition(&mut self, kind: &str, members: &[usize]) -> Result<bool, String> {
        // A minority cut off from the rest: one replica, or two of five.
        let mut cut = vec![if kind == "partition-leader" {
            match leader(&self.world, members).await {
                Some(l) => l,
                None => return Ok(false),
            }
        } else {
            pick(&mut self.rng, members)
        }];
        if members.len() >= 5 && self.rng.chance(0.5) {
            let others: Vec<usize> = members
                .iter()
                .copied()
                .filter(|i| !cut.contains(i))
                .collect();
            cut.push(pick(&mut self.rng, &others));
        }
        let all = self.world.lock().slots.len();
        let groups: Vec<bool> = (0..all).map(|i| cut.contains(&i)).collect();
        set_faults(&self.world, members, |a, b| {
            (groups[a] != groups[b]).then_some(Fault::Cut)
        })
        .await;
        let from = self.world.now_us();
        tokio::time::sleep(self.ms(1000, 5000)).await;
        set_faults(&self.world, members, |_, _| None).await;
        let to = self.world.now_us();
        let mut state = self.world.lock();
        for &i in &cut {
            state.slots[i].minority_spans.push((from, to));
        }
        Ok(true)
    }

    /// Slow and lossy links between every pair, then heal.
    async fn slow(&mut self, members: &[usize]) -> Result<bool, String> {
        let delay_us = self.rng.range(2_000, 40_000);
        let loss = self.rng.range(0, 10) as f64 / 100.0;
        set_faults(&self.world, members, |_, _| {
            Some(Fault::Slow { delay_us, loss })
        })
        .await;
        tokio::time::sleep(self.ms(1000, 5000)).await;
        set_faults(&self.world, members, |_, _| None).await;
        Ok(true)
    }

    /// Kill a replica, delete its data directory and restart it: it is
    /// rebuilt from a peer's checkpoint.
    async fn wipe(&mut self, servers: &mut Servers, members: &[usize]) -> Result<bool, String> {
        let i = pick(&mut self.rng, members);
        // Its commits are polled first, as before a kill: the
        // others may hold some of them only in checkpoints.
        poll_one(&self.world, i).await;
        self.kill(servers, i)?;
        servers.wipe(i)?;
        {
            let mut state = self.world.lock();
            state.slots[i].wiped = true;
            state.slots[i].committed.clear();
        }
        // Restarted as an operator would: with the configuration it
        // had. The members tell it the current group; only when no
        // replica it lists is still a member is it given the
        // current one (it would find no one to ask).
        let listed = servers.configured(i)?;
        if !listed.iter().any(|&p| p != i && members.contains(&p)) {
            servers.configure_valid(i, members, &self.edit)?;
        }
        tokio::time::sleep(self.ms(200, 1000)).await;
        self.start(servers, i)?;
        wait_member(&self.world, i, Duration::from_secs(30)).await;
        Ok(true)
    }

    /// Start a new replica and add it to the group (five members at most).
    async fn add(&mut self, servers: &mut Servers, members: &[usize]) -> Result<bool, String> {
        let slots = self.world.lock().slots.len();
        if members.len() >= 5 || slots >= MAX_SLOTS {
            return Ok(false);
        }
        let i = crate::servers::add(servers, members, &self.edit)?;
        {
            let slot = self
                .world
                .slot(servers.clients[i], Membership::NeverAdded)?;
            self.world.lock().slots.push(slot);
        }
        let admin = admin_client(&self.world, members).await?;
        let result = tokio::time::timeout(
            Duration::from_secs(30),
            admin.add_replica(
                (i + 1) as u16,
                &servers.peers[i].to_string(),
                &servers.clients[i].to_string(),
            ),
        )
        .await;
        match result {
            Ok(Ok(_)) => {
                self.world.lock().slots[i].membership = Membership::Member;
                wait_member(&self.world, i, Duration::from_secs(30)).await;
            }
            Ok(Err(e)) => {
                self.kill(servers, i)?;
                return Err(format!("adding replica {}: {e}", i + 1));
            }
            Err(_) => {
                // It may still go through: ask the group.
                if !in_group(&admin, i).await {
                    self.kill(servers, i)?;
                    return Err(format!("adding replica {}: timed out", i + 1));
                }
                self.world.lock().slots[i].membership = Membership::Member;
            }
        }
        Ok(true)
    }

    /// Remove a member from the group (three members at least).
    async fn remove(&mut self, members: &[usize]) -> Result<bool, String> {
        if members.len() <= 3 {
            return Ok(false);
        }
        let i = pick(&mut self.rng, members);
        let admin = admin_client(&self.world, members).await?;
        let result = tokio::time::timeout(
            Duration::from_secs(30),
            admin.remove_replica((i + 1) as u16),
        )
        .await;
        let failed = match result {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("timed out".to_owned()),
        };
        if let Some(why) = failed {
            // A change answered as failed may still apply (the admin API
            // says so: its deadline passed, or the leader changed under
            // it): the group decides, asked for a while. Taking it for a
            // member still, the nemesis once wiped a removed replica and
            // waited for it to come back as a member.
            if !left_group(&admin, i, Duration::from_secs(15)).await {
                return Err(format!("removing replica {}: {why}", i + 1));
            }
        }
        self.world.lock().slots[i].membership = Membership::Removed;
        Ok(true)
    }

    fn kill(&self, servers: &mut Servers, i: usize) -> Result<(), String> {
        servers.kill(i)?;
        let now = self.world.now_us();
        let mut state = self.world.lock();
        let slot = &mut state.slots[i];
        // Nothing answers any more: the last poll says nothing of the next
        // process.
        slot.last = None;
        if slot.running {
            slot.running = false;
            slot.kills.push(now);
            slot.down_spans.push((now, u64::MAX));
        }
        Ok(())
    }

    /// `SIGKILL` every replica in `group`, having seen all they committed:
    /// each resumes from its latest checkpoint, which may cover ops no
    /// poll saw yet, and with every replica restarted no one would still
    /// hold them. So the links among them are cut first (nothing more can
    /// commit), and each is polled until it has nothing new.
    async fn crash(&self, servers: &mut Servers, group: &[usize]) -> Result<(), String> {
        set_faults(&self.world, group, |_, _| Some(Fault::Cut)).await;
        for &i in group {
            drain(&self.world, i, Duration::from_secs(5)).await;
        }
        for &i in group {
            self.kill(servers, i)?;
        }
        Ok(())
    }

    fn start(&self, servers: &mut Servers, i: usize) -> Result<(), String> {
        servers.spawn(i)?;
        let now = self.world.now_us();
        let mut state = self.world.lock();
        let slot = &mut state.slots[i];
        slot.running = true;
        if let Some(span) = slot.down_spans.last_mut().filter(|s| s.1 == u64::MAX) {
            span.1 = now;
        }
        Ok(())
    }

    /// Undo every fault: links healed, stopped replicas continued, killed
    /// members restarted.
    pub(crate) async fn heal(&mut self, servers: &mut Servers) -> Result<(), String> {
        self.note_exits(servers);
        let n = self.world.lock().slots.len();
        for i in 0..n {
            let (paused, running, membership) = {
                let s = &self.world.lock().slots[i];
                (s.paused, s.running, s.membership)
            };
            if paused {
                servers.signal(i, Signal::Cont)?;
                self.world.lock().slots[i].paused = false;
            }
            if !running && membership == Membership::Member {
                self.start(servers, i)?;
            }
        }
        let all: Vec<usize> = (0..n).collect();
        set_faults(&self.world, &all, |_, _| None).await;
        Ok(())
    }

    /// `SIGKILL` every process, then restart the group's members.
    pub(crate) async fn kill_all_and_restart(
        &mut self,
        servers: &mut Servers,
    ) -> Result<(), String> {
        self.note_exits(servers);
        let all: Vec<usize> = (0..self.world.lock().slots.len()).collect();
        self.crash(servers, &all).await?;
        let members = self.world.lock().members();
        for i in members {
            self.start(servers, i)?;
        }
        Ok(())
    }
}

/// A link fault between two replicas.
#[derive(Clone, Copy)]
enum Fault {
    Cut,
    Slow { delay_us: u64, loss: f64 },
}

/// Set every link among `among` (0-based) to `fault(a, b)`, on each
/// replica that answers (a stopped or killed one is skipped).
async fn set_faults(world: &World, among: &[usize], fault: impl Fn(usize, usize) -> Option<Fault>) {
    for &a in among {
        let links = among
            .iter()
            .filter(|&&b| b != a)
            .filter_map(|&b| {
                fault(a, b).map(|f| match f {
                    Fault::Cut => pb::LinkFault {
                        peer: (b + 1) as u32,
                        partitioned: true,
                        ..Default::default()
                    },
                    Fault::Slow { delay_us, loss } => pb::LinkFault {
                        peer: (b + 1) as u32,
                        delay_us,
                        loss,
                        partitioned: false,
                    },
                })
            })
            .collect();
        let Some(channel) = world
            .lock()
            .slots
            .get(a)
            .filter(|s| s.up())
            .map(|s| s.channel.clone())
        else {
            continue;
        };
        let mut admin = pb::admin_client::AdminClient::new(channel);
        let call = admin.set_faults(pb::SetFaultsRequest { links });
        let _ = tokio::time::timeout(Duration::from_secs(1), call).await;
    }
}

/// The leader as a member that answers says, if it is a member.
async fn leader(world: &World, members: &[usize]) -> Option<usize> {
    for &i in members {
        let channel = world.lock().slots[i].channel.clone();
        let mut client = pb::creek_client::CreekClient::new(channel);
        let call = client.status(pb::StatusRequest {});
        if let Ok(Ok(reply)) = tokio::time::timeout(Duration::from_secs(1), call).await {
            let l = reply.into_inner().leader as usize;
            if l > 0 && members.contains(&(l - 1)) {
                return Some(l - 1);
            }
        }
    }
    None
}

/// A client for admin calls, over the members.
async fn admin_client(world: &World, members: &[usize]) -> Result<creek_client::Client, String> {
    let addrs: Vec<String> = {
        let state = world.lock();
        members
            .iter()
            .map(|&i| state.slots[i].addr.to_string())
            .collect()
    };
    world.connect(addrs).await.map_err(|e| e.to_string())
}

/// Whether replica `i` (0-based) is in the group, as the group says
/// within 5 s (`None`: no answer).
async fn membership(admin: &creek_client::Client, i: usize) -> Option<bool> {
    match tokio::time::timeout(Duration::from_secs(5), admin.members()).await {
        Ok(Ok(m)) => Some(m.members.iter().any(|m| m.replica as usize == i + 1)),
        _ => None,
    }
}

/// Whether replica `i` is in the group, as the group says (no answer: no).
async fn in_group(admin: &creek_client::Client, i: usize) -> bool {
    membership(admin, i).await == Some(true)
}

/// Whether replica `i` has left the group, as the group says within
/// `within` (asked every half second; no answer is no news).
async fn left_group(admin: &creek_client::Client, i: usize, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if membership(admin, i).await == Some(false) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Wait (at most `within`) until replica `i` says it is a member; past
/// that, say so (the nemesis waits on for it before its next fault).
async fn wait_member(world: &World, i: usize, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if world.lock().slots[i].serving() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let standing = world.lock().slots[i]
        .last
        .as_ref()
        .map(|p| p.standing.clone());
    eprintln!(
        "chaos: replica {} is not a member {} s after it was started ({standing:?})",
        i + 1,
        within.as_secs()
    );
}

/// Follow every running replica's committed order until polling stops,
/// each replica on its own (one that is slow to answer holds up no other:
/// a replica forgets the ids a checkpoint covers, and every position must
/// be seen on some replica before all of them have).
pub(crate) async fn poll(world: Arc<World>) {
    let mut pollers = Vec::new();
    while !world.polling_stopped() {
        let n = world.lock().slots.len();
        for i in pollers.len()..n {
            let world = world.clone();
            pollers.push(tokio::spawn(async move {
                while !world.polling_stopped() {
                    poll_one(&world, i).await;
                    tokio::time::sleep(POLL_EVERY).await;
                }
            }));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    for p in pollers {
        let _ = p.await;
    }
}

/// How often each replica's committed order is polled.
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(50);

/// Take what replica `i` committed since the last poll, if it answers.
async fn poll_one(world: &World, i: usize) {
    let (up, from) = {
        let s = &world.lock().slots[i];
        (s.up(), s.committed.len() as u64)
    };
    if !up {
        return;
    }
    if let Some((start, ids, polled)) = committed(world, i, from).await {
        let now = world.now_us();
        world.lock().merge(i, start, ids, polled, now);
    }
}

/// Poll replica `i` until the driver holds all it committed and two polls
/// in a row find nothing new (at most `within`; one that does not answer
/// is left as it is).
async fn drain(world: &World, i: usize, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    let mut before = None;
    while tokio::time::Instant::now() < deadline {
        poll_one(world, i).await;
        let seen = {
            let s = &world.lock().slots[i];
            let held = s.committed.len() as u64;
            s.last.as_ref().map(|p| p.committed).filter(|&c| c == held)
        };
        if seen.is_some() && seen == before {
            return;
        }
        before = seen;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A replica's answer to `Admin.Committed` from `from` on, within a second.
async fn committed(
    world: &World,
    i: usize,
    from: u64,
) -> Option<(u64, Vec<(OpId, Option<ClientRequestId>)>, Polled)> {
    let channel = world.lock().slots.get(i)?.channel.clone();
    let mut request = tonic::Request::new(pb::CommittedRequest { from, max: 0 });
    request.set_timeout(Duration::from_secs(1));
    let mut admin = pb::admin_client::AdminClient::new(channel);
    let call = admin.committed(request);
    let reply = tokio::time::timeout(Duration::from_secs(1), call)
        .await
        .ok()?
        .ok()?
        .into_inner();
    let ids = reply
        .ids
        .iter()
        .filter_map(|r| {
            let origin = u16::try_from(r.origin).ok()?;
            let request = (r.client_id != 0).then_some(ClientRequestId {
                client: r.client_id,
                seq: r.request_seq,
            });
            Some((OpId::new(creek_core::ReplicaId(origin), r.seq), request))
        })
        .collect();
    Some((
        reply.start,
        ids,
        Polled {
            committed: reply.committed,
            finalized: reply.finalized,
            pending: reply.pending,
            quiet: reply.quiet,
            standing: reply.standing,
        },
    ))
}

/// Wait until the group settles: every member runs, says it is a member,
/// is quiet, has committed as much as the others, and the poller has seen
/// it all. Returns how long that took, or `None` past `bound`.
pub(crate) async fn settle(world: &World, bound: Duration) -> Option<Duration> {
    let start = tokio::time::Instant::now();
    while start.elapsed() < bound {
        if settled_len(world).is_some() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let state = world.lock();
    for i in state.members() {
        let s = &state.slots[i];
        eprintln!(
            "chaos: replica {} did not settle: up {}, polled {:?}, committed seen {}",
            i + 1,
            s.up(),
            s.last,
            s.committed.len()
        );
    }
    None
}

/// The committed length every member agrees on, if the cluster is
/// settled: every member serving, quiet, and polled at that length.
pub(crate) fn settled_len(world: &World) -> Option<u64> {
    let state = world.lock();
    let members = state.members();
    let mut lengths = members.iter().map(|&i| {
        let s = &state.slots[i];
        match &s.last {
            Some(p) if s.serving() && p.quiet && s.committed.len() as u64 == p.committed => {
                Some(p.committed)
            }
            _ => None,
        }
    });
    let Some(Some(first)) = lengths.next() else {
        return None;
    };
    lengths.all(|l| l == Some(first)).then_some(first)
}

/// Every member's committed state (`Admin.Dump`), by slot, and why a
/// member could not be read.
pub(crate) async fn dump_members(
    world: &World,
) -> (BTreeMap<usize, BTreeMap<Bytes, Bytes>>, Vec<String>) {
    let members = world.lock().members();
    let mut dumps = BTreeMap::new();
    let mut failures = Vec::new();
    for i in members {
        let addr = world.lock().slots[i].addr.to_string();
        let dump = async {
            let client = world.connect([addr]).await?;
            client.dump().await
        };
        match tokio::time::timeout(Duration::from_secs(30), dump).await {
            Ok(Ok((_, state))) => {
                dumps.insert(i, state);
            }
            Ok(Err(e)) => failures.push(format!(
                "replica {}'s committed state could not be read: {e}",
                i + 1
            )),
            Err(_) => failures.push(format!(
                "replica {}'s committed state could not be read within 30 s",
                i + 1
            )),
        }
    }
    (dumps, failures)
}
