//! A replica killed and recovered from its data directory (DESIGN §8): a
//! 3-node cluster of `creek_node::Node`s on `LogStore`, driven the
//! way the server drives it — every step's log writes and new payloads are
//! persisted (here synchronously) before the step's messages and views are
//! released. One node checkpoints mid-way, loses a step that never reached
//! the disk, crashes without closing, misses a phase, and comes back with
//! `Node::recover`. Checked: it converges to the others' committed order and
//! state, everything acknowledged before the crash is reflected, what never
//! reached its disk never happened, and its ids continue without clashing.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use common::{open_sync, SyncPersister, TempDir};
use creek_core::{ExecKey, OpId, ReplicaId, Request, ViewKind};
use creek_node::{Node, NodeConfig};
use creek_procs::Registry;
use creek_store::LogStore;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;
use creek_wire::{GossipMessage, PeerMessage};

const N: usize = 3;

struct Member {
    node: Option<Node<LogStore>>,
    persister: SyncPersister,
    /// Committed length of the last checkpoint written.
    checkpointed_len: u64,
}

/// What an invocation was, to check it against the final state.
#[derive(Clone, Debug)]
enum Kind {
    Put { key: String, value: String },
    Incr,
}

struct Cluster {
    dir: TempDir,
    ids: Vec<ReplicaId>,
    registry: Arc<Registry>,
    members: Vec<Member>,
    queue: VecDeque<(usize, usize, Bytes)>,
    now_us: u64,
    /// Views released to clients: (node, handle) → kinds seen.
    acked: BTreeMap<(usize, ExecKey), Vec<ViewKind>>,
    invoked: BTreeMap<(usize, ExecKey), (Kind, bool)>,
}

fn voters() -> Vec<u64> {
    // CAB's raft id of replica r is r + 1.
    (1..=N as u64).map(|r| r + 1).collect()
}

impl Cluster {
    fn new(tag: &str) -> Self {
        let dir = TempDir::new(tag);
        let ids: Vec<ReplicaId> = (1..=N as u16).map(ReplicaId).collect();
        let mut c = Cluster {
            dir,
            ids,
            registry: Arc::new(Registry::with_builtins()),
            members: Vec::new(),
            queue: VecDeque::new(),
            now_us: 1_000_000,
            acked: BTreeMap::new(),
            invoked: BTreeMap::new(),
        };
        for i in 0..N {
            let m = c.open(i);
            c.members.push(m);
        }
        c
    }

    /// Open node `i` from its data directory (fresh or not).
    fn open(&self, i: usize) -> Member {
        let (storage, persister, recovered) =
            open_sync(&self.dir.sub(&format!("node{i}")), voters());
        let mut config = NodeConfig::for_group(self.ids[i], &self.ids);
        config.replica.stabilize_after_us = 20_000;
        let checkpointed_len = recovered.checkpoint.as_ref().map_or(0, |c| c.committed_len);
        let node = Node::recover(
            config,
            self.registry.clone(),
            storage,
            recovered.into(),
            1000 + i as u64,
        )
        .unwrap();
        node.replica().check_invariants().unwrap();
        Member {
            node: Some(node),
            persister,
            checkpointed_len,
        }
    }

    fn node(&self, i: usize) -> &Node<LogStore> {
        self.members[i].node.as_ref().unwrap()
    }

    /// After node `i` handled an input: run its executions, carry out its
    /// `Ready` — persist the write (waiting until durable), report it, then
    /// release its messages and views. A background checkpoint is written
    /// at once (waiting until durable) and reported, and the next `Ready`
    /// carried out too: returns that checkpoint with the payloads dropped
    /// once it was durable.
    fn step(&mut self, i: usize) -> Option<(creek_core::Checkpoint, Vec<OpId>)> {
        let job = self.carry_out(i).0?;
        let id = job.id;
        let checkpoint = job.checkpoint.clone();
        let m = &mut self.members[i];
        m.persister.checkpoint(job);
        m.node.as_mut()?.on_checkpoint_durable(id);
        let dropped = self.carry_out(i).1;
        Some((checkpoint, dropped))
    }

    /// One `Ready` of node `i`: its background checkpoint job, if any, and
    /// the payloads its write dropped.
    fn carry_out(&mut self, i: usize) -> (Option<creek_node::CheckpointJob>, Vec<OpId>) {
        let m = &mut self.members[i];
        let Some(node) = m.node.as_mut() else {
            return (None, Vec::new());
        };
        node.execute_all();
        let ready = node.ready();
        let mut dropped = Vec::new();
        if let Some(w) = ready.write {
            let seq = w.seq;
            dropped = w.dropped.clone();
            m.persister.persist_numbered(w);
            node.on_durable(seq);
        }
        for v in ready.views {
            self.acked.entry((i, v.handle)).or_default().push(v.kind);
        }
        for (to, msg) in ready
            .messages
            .into_iter()
            .chain(ready.held)
            .chain(ready.early)
        {
            let frame = creek_wire::encode(&msg, &creek_wire::Limits::default()).unwrap();
            self.queue.push_back((i, usize::from(to.0) - 1, frame));
        }
        (ready.checkpoint, dropped)
    }

    /// Write a checkpoint of node `i` (at a clean point) with the payloads
    /// it makes unnecessary: those committed since the previous one, and
    /// those kept by earlier ones, but for the payloads some peer has not
    /// reported holding yet, which stay.
    fn checkpoint(&mut self, i: usize) -> creek_core::Checkpoint {
        let m = &mut self.members[i];
        let node = m.node.as_mut().unwrap();
        let kept_before = node.retained_payloads() as u64;
        node.request_checkpoint();
        let (cp, gone) = self.step(i).expect("a clean point after settling");
        let m = &mut self.members[i];
        let kept = m.node.as_ref().unwrap().retained_payloads() as u64;
        assert_eq!(
            gone.len() as u64 + kept,
            cp.committed_len - m.checkpointed_len + kept_before
        );
        m.checkpointed_len = cp.committed_len;
        cp
    }

    fn invoke(&mut self, i: usize, kind: Kind, strong: bool) -> ExecKey {
        let call = match &kind {
            Kind::Put { key, value } => ProcCall::new(
                "kv.put",
                encode_args(&[Value::from(key.as_str()), Value::from(value.as_str())]),
            ),
            Kind::Incr => ProcCall::new("kv.incr", encode_args(&[Value::from("n"), Value::Int(1)])),
        };
        let request = if strong {
            Request::strong(call)
        } else {
            Request::weak(call)
        };
        let now = self.now_us;
        let h = self.members[i]
            .node
            .as_mut()
            .unwrap()
            .invoke(request, now)
            .unwrap();
        self.invoked.insert((i, h), (kind, strong));
        h
    }

    /// One round: deliver every message in flight (and what they cause),
    /// then tick every live node.
    fn round(&mut self) {
        let mut budget = 100_000;
        while let Some((from, to, frame)) = self.queue.pop_front() {
            budget -= 1;
            assert!(budget > 0, "message storm");
            let Some(node) = self.members[to].node.as_mut() else {
                continue; // down: lost
            };
            node.on_frame(self.ids[from], &frame).unwrap();
            self.step(to);
        }
        self.now_us += 1_000;
        for i in 0..N {
            if let Some(node) = self.members[i].node.as_mut() {
                node.tick(self.now_us);
                self.step(i);
            }
        }
    }

    fn up(&self) -> impl Iterator<Item = &Node<LogStore>> {
        self.members.iter().filter_map(|m| m.node.as_ref())
    }

    fn quiet(&self) -> bool {
        let len = self.up().next().map(|n| n.replica().committed_len());
        self.queue.is_empty()
            && self.up().all(|n| {
                n.replica().tentative_len() == 0
                    && n.cab().decided_waiting() == 0
                    && Some(n.replica().committed_len()) == len
            })
    }

    /// Run until every live node is quiet (nothing tentative, nothing in
    /// flight, same committed length).
    fn settle(&mut self) {
        for _ in 0..5_000 {
            self.round();
            if self.quiet() {
                return;
            }
        }
        panic!("cluster did not settle");
    }

    fn crash(&mut self, i: usize) {
        let m = &mut self.members[i];
        m.node = None;
        m.persister.crash();
    }

    fn leader(&self) -> Option<usize> {
        (0..N).find(|&i| {
            self.members[i]
                .node
                .as_ref()
                .is_some_and(|n| n.cab().is_leader())
        })
    }
}

fn put(key: &str) -> Kind {
    Kind::Put {
        key: key.to_owned(),
        value: format!("v-{key}"),
    }
}

/// A stored value as text (`kv.put` stores the bytes, `kv.incr` decimal).
fn get(state: &BTreeMap<Bytes, Bytes>, key: &str) -> Option<String> {
    state
        .get(key.as_bytes())
        .map(|v| String::from_utf8(v.to_vec()).unwrap())
}

/// A round of work at every live node: unique puts (weak and strong) and
/// increments (weak and strong).
fn workload(c: &mut Cluster, phase: &str, rounds: usize) {
    for k in 0..rounds {
        for i in 0..N {
            if c.members[i].node.is_none() {
                continue;
            }
            let strong = (k + i) % 2 == 0;
            c.invoke(i, put(&format!("{phase}-{i}-{k}")), strong);
            c.step(i);
            c.invoke(i, Kind::Incr, !strong);
            c.step(i);
        }
        c.round();
    }
}

fn scenario(victim: usize) {
    let mut c = Cluster::new(&format!("recovery-{victim}"));
    c.members[0].node.as_mut().unwrap().campaign();
    c.step(0);
    for _ in 0..50 {
        c.round();
    }
    assert_eq!(c.leader(), Some(0));

    // Phase A, then a checkpoint of the victim at a clean point.
    workload(&mut c, "a", 6);
    c.settle();
    let cp = c.checkpoint(victim);
    assert!(cp.committed_len > 20, "{}", cp.committed_len);
    assert!(cp.cab_applied > 0);
    let committed_at_cp: Vec<OpId> = c.node(victim).replica().committed().to_vec();

    // Phase B: more work, cut short (ops still in flight).
    workload(&mut c, "b", 4);

    // A step that never reaches the disk: its op, messages and views are
    // lost with the crash.
    let lost = c.invoke(victim, put("lost"), false);
    c.members[victim].node.as_mut().unwrap().execute_all();
    let _ = c.members[victim].node.as_mut().unwrap().ready();
    // And one whose write never reaches the disk either, but whose payload
    // reaches the peers: an own op leaves before its write is durable.
    let sent = c.invoke(victim, put("sent"), false);
    let node = c.members[victim].node.as_mut().unwrap();
    node.execute_all();
    let ready = node.ready();
    assert!(ready.write.is_some());
    let ExecKey::Op(sent_id) = sent else {
        panic!("a write gets an op id")
    };
    let mut pushed = 0;
    for (to, msg) in ready.early {
        if let PeerMessage::Gossip(GossipMessage::Ops(ops)) = &msg {
            pushed += ops.iter().filter(|op| op.id == sent_id).count();
        }
        let frame = creek_wire::encode(&msg, &creek_wire::Limits::default()).unwrap();
        c.queue.push_back((victim, usize::from(to.0) - 1, frame));
    }
    assert_eq!(pushed, N - 1, "the payload went to every peer at once");
    c.crash(victim);

    // Phase C without the victim (the other two are a majority).
    workload(&mut c, "c", 5);
    c.settle();

    // Recover from the directory.
    let reopened = c.open(victim);
    let node = reopened.node.as_ref().unwrap();
    assert_eq!(node.replica().committed_len(), cp.committed_len);
    assert_eq!(
        node.replica().committed_state(),
        cp.state.iter().cloned().collect()
    );
    c.members[victim] = reopened;
    // Its next op's id lies past every seq it reserved: a peer may hold an
    // op its disk lost ("sent"), and no id is issued twice.
    let after = c.invoke(victim, put("after"), false);
    let (ExecKey::Op(lost_id), ExecKey::Op(after_id)) = (lost, after) else {
        panic!("writes get op ids")
    };
    assert!(
        after_id.seq > sent_id.seq + creek_node::RESERVE_AHEAD / 2,
        "ids resume past the reservation: {after_id} after {sent_id}"
    );
    c.step(victim);
    let strong_after = c.invoke(victim, Kind::Incr, true);
    c.step(victim);
    // It takes "sent" back from its peers; "lost" reached no one, and the
    // committed order voids it once the window to take it back closes.
    for _ in 0..600 {
        c.round();
    }
    c.settle();
    assert!(
        c.node(victim).replica().op(sent_id).is_some() || {
            c.node(victim).replica().committed().contains(&sent_id)
        }
    );
    assert!(c.node(victim).replica().op(lost_id).is_none());

    // Everyone agrees.
    let states: Vec<BTreeMap<Bytes, Bytes>> =
        c.up().map(|n| n.replica().committed_state()).collect();
    for s in &states[1..] {
        assert_eq!(s, &states[0]);
    }
    let others: Vec<usize> = (0..N).filter(|&i| i != victim).collect();
    let full = c.node(others[0]).replica().committed().to_vec();
    for &o in &others {
        assert_eq!(c.node(o).replica().committed(), &full[..]);
    }
    let v = c.node(victim).replica();
    assert_eq!(v.committed_len(), full.len() as u64);
    // The victim re-committed, in the same order, what followed its
    // checkpoint, and nothing it had committed before the crash moved.
    assert_eq!(v.committed(), &full[cp.committed_len as usize..]);
    assert_eq!(&full[..committed_at_cp.len()], &committed_at_cp[..]);
    for n in c.up() {
        n.replica().check_invariants().unwrap();
    }

    // Everything acknowledged is reflected; what never reached the disk is
    // not; increments all counted once.
    let state = &states[0];
    let mut incr_acked = 0;
    for ((i, h), (kind, strong)) in &c.invoked {
        let kinds = c.acked.get(&(*i, *h)).cloned().unwrap_or_default();
        let stable = kinds.iter().any(|k| k.is_final());
        let acked = if *strong { stable } else { !kinds.is_empty() };
        if *strong && *h == strong_after {
            assert!(stable, "the strong op after recovery got its final view");
        }
        if !acked {
            continue;
        }
        match kind {
            Kind::Put { key, value } if key != "lost" => {
                assert_eq!(get(state, key).as_ref(), Some(value), "{key}");
            }
            Kind::Put { .. } => {}
            Kind::Incr => incr_acked += 1,
        }
    }
    assert_eq!(
        get(state, "lost"),
        None,
        "an op that never reached the disk, nor a peer"
    );
    assert_eq!(
        get(state, "sent").as_deref(),
        Some("v-sent"),
        "an op that reached a peer and not the disk is taken back"
    );
    assert_eq!(get(state, "after").as_deref(), Some("v-after"));
    let incrs_committed = c
        .invoked
        .iter()
        .filter(|((i, h), (kind, _))| {
            matches!(kind, Kind::Incr)
                && matches!(h, ExecKey::Op(id) if full.contains(id))
                && !(*i == victim && *h == lost)
        })
        .count() as i64;
    assert!(incrs_committed >= incr_acked);
    assert_eq!(get(state, "n"), Some(incrs_committed.to_string()));

    // A clean shutdown and a second recovery keep all of it.
    for i in 0..N {
        c.members[i].node.as_mut().unwrap().sync_pending_writes();
        c.step(i);
        let m = &mut c.members[i];
        m.node = None;
        m.persister.persister.take().unwrap().close().unwrap();
    }
    for i in 0..N {
        let m = c.open(i);
        c.members[i] = m;
    }
    c.settle();
    for n in c.up() {
        assert_eq!(&n.replica().committed_state(), state);
        assert_eq!(n.replica().committed_len(), full.len() as u64);
    }
}

#[test]
fn a_follower_recovers_from_its_directory() {
    scenario(2);
}

#[test]
fn the_leader_recovers_from_its_directory() {
    scenario(0);
}
