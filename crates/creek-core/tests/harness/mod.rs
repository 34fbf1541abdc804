//! An in-process cluster for protocol tests: replicas of one engine type,
//! FIFO links for RB, a decision sequence for CAB, and an oracle that checks
//! every view against a sequential replay (DESIGN §3, "Test oracle").
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use creek_core::{
    Config, Effect, ExecKey, Op, OpId, Pos, Replica, ReplicaId, Request, View, ViewKind,
};
use creek_exec::basic::{replay, BasicEngine};
use creek_exec::mvcc::MvccExecutor;
use creek_exec::{Completion, Engine, Outcome, ProcCall, Registry, Task, TxnLimits};

/// An engine the harness can build.
pub trait TestEngine: Engine<ExecKey, Pos> + Sized {
    fn build(registry: Arc<Registry>) -> Self;
    fn invariants(&self) -> Result<(), String> {
        Ok(())
    }
}

impl TestEngine for MvccExecutor<ExecKey, Pos> {
    fn build(registry: Arc<Registry>) -> Self {
        MvccExecutor::new(registry, TxnLimits::default())
    }
    fn invariants(&self) -> Result<(), String> {
        self.check_invariants()
    }
}

impl TestEngine for BasicEngine<ExecKey, Pos> {
    fn build(registry: Arc<Registry>) -> Self {
        BasicEngine::new(registry, TxnLimits::default())
    }
}

pub struct Node<E> {
    pub replica: Replica<E>,
    pub running: Vec<Task<ExecKey>>,
    /// Views received for this node's invocations, by handle.
    pub views: BTreeMap<ExecKey, Vec<View>>,
    /// How many decided ids this node has been given.
    pub cab_next: usize,
}

pub struct Cluster<E> {
    pub registry: Arc<Registry>,
    pub nodes: Vec<Node<E>>,
    /// links[from][to]: ops in flight, FIFO.
    pub links: Vec<Vec<VecDeque<Arc<Op>>>>,
    /// CAB-cast ids not yet decided, in cast order.
    pub undecided: Vec<OpId>,
    /// The decided sequence.
    pub decided: Vec<OpId>,
    /// Every op ever RB-cast.
    pub ops: BTreeMap<OpId, Arc<Op>>,
    /// Requests as invoked, by (node, handle).
    pub requests: BTreeMap<(usize, ExecKey), Request>,
    pub now_us: u64,
    pub check_each_step: bool,
}

impl<E: TestEngine> Cluster<E> {
    pub fn new(n: usize, stabilize_after_us: u64) -> Self {
        let registry = Arc::new(Registry::with_builtins());
        let nodes = (0..n)
            .map(|i| {
                let config = Config {
                    stabilize_after_us,
                    ..Config::for_replica(ReplicaId(i as u16 + 1))
                };
                Node {
                    replica: Replica::with_engine(
                        config,
                        registry.clone(),
                        E::build(registry.clone()),
                    )
                    .unwrap(),
                    running: Vec::new(),
                    views: BTreeMap::new(),
                    cab_next: 0,
                }
            })
            .collect();
        Cluster {
            registry,
            nodes,
            links: vec![vec![VecDeque::new(); n]; n],
            undecided: Vec::new(),
            decided: Vec::new(),
            ops: BTreeMap::new(),
            requests: BTreeMap::new(),
            now_us: 1_000_000,
            check_each_step: true,
        }
    }

    fn absorb(&mut self, i: usize) {
        for e in self.nodes[i].replica.take_effects() {
            match e {
                Effect::RbCast(op) => {
                    self.ops.insert(op.id, op.clone());
                    for j in 0..self.nodes.len() {
                        if j != i {
                            self.links[i][j].push_back(op.clone());
                        }
                    }
                }
                Effect::CabCast(id) => self.undecided.push(id),
                Effect::View(v) => {
                    if self.check_each_step && v.kind == ViewKind::Tentative {
                        self.check_tentative_view(i, &v);
                    }
                    self.nodes[i].views.entry(v.handle).or_default().push(v);
                }
            }
        }
        if self.check_each_step {
            let r = &self.nodes[i].replica;
            r.check_invariants().unwrap();
            r.engine().invariants().unwrap();
        }
    }

    /// A tentative view of a replicated op equals the sequential execution of
    /// the order committed · tentative as it stands when the view is sent.
    fn check_tentative_view(&self, i: usize, v: &View) {
        let ExecKey::Op(id) = v.handle else { return };
        let r = &self.nodes[i].replica;
        let order: Vec<OpId> = r.committed().iter().copied().chain(r.tentative()).collect();
        let Some(idx) = order.iter().position(|x| *x == id) else {
            panic!("view for {id} which is not in the order");
        };
        let calls: Vec<&ProcCall> = order[..=idx].iter().map(|x| &self.ops[x].call).collect();
        let (outcomes, _) = replay(&self.registry, TxnLimits::default(), calls);
        assert_eq!(
            outcomes[idx], v.outcome,
            "tentative view of {id} on node {i} differs from sequential execution of its order"
        );
    }

    pub fn invoke(&mut self, i: usize, request: Request) -> Option<ExecKey> {
        self.now_us += 10;
        let h = self.nodes[i]
            .replica
            .invoke(request.clone(), self.now_us)
            .ok()?;
        self.requests.insert((i, h), request);
        self.absorb(i);
        Some(h)
    }

    pub fn deliver_rb(&mut self, from: usize, to: usize) -> bool {
        let Some(op) = self.links[from][to].pop_front() else {
            return false;
        };
        self.nodes[to].replica.rb_deliver(op);
        self.absorb(to);
        true
    }

    pub fn decide(&mut self, pick: usize) -> bool {
        if self.undecided.is_empty() {
            return false;
        }
        let id = self.undecided.remove(pick % self.undecided.len());
        self.decided.push(id);
        true
    }

    pub fn deliver_cab(&mut self, i: usize) -> bool {
        let n = &mut self.nodes[i];
        let Some(&id) = self.decided.get(n.cab_next) else {
            return false;
        };
        n.cab_next += 1;
        n.replica.cab_deliver(id);
        self.absorb(i);
        true
    }

    pub fn start_exec(&mut self, i: usize) -> bool {
        let n = &mut self.nodes[i];
        let Some(task) = n.replica.next_execution() else {
            return false;
        };
        n.running.push(task);
        true
    }

    pub fn complete_exec(&mut self, i: usize, pick: usize) -> bool {
        let n = &mut self.nodes[i];
        if n.running.is_empty() {
            return false;
        }
        let task = n.running.remove(pick % n.running.len());
        let done: Completion<ExecKey> = n.replica.run(&task);
        n.replica.complete(done);
        self.absorb(i);
        true
    }

    /// Run a task to completion immediately (no concurrency).
    pub fn exec_one(&mut self, i: usize) -> bool {
        if !self.start_exec(i) {
            return false;
        }
        let last = self.nodes[i].running.len() - 1;
        self.complete_exec(i, last)
    }

    pub fn tick(&mut self, advance_us: u64) {
        self.now_us += advance_us;
        for i in 0..self.nodes.len() {
            self.nodes[i].replica.tick(self.now_us);
            self.absorb(i);
        }
    }

    /// Heal everything and run to quiescence.
    pub fn settle(&mut self) {
        for _round in 0..10_000 {
            let mut progress = false;
            let n = self.nodes.len();
            for i in 0..n {
                while self.nodes[i].running.last().is_some() {
                    let last = self.nodes[i].running.len() - 1;
                    progress |= self.complete_exec(i, last);
                }
                while self.exec_one(i) {
                    progress = true;
                }
                for j in 0..n {
                    while self.deliver_rb(i, j) {
                        progress = true;
                    }
                }
            }
            while self.decide(0) {
                progress = true;
            }
            for i in 0..n {
                while self.deliver_cab(i) {
                    progress = true;
                }
            }
            if !progress {
                if self.nodes.iter().all(|n| n.replica.tentative().is_empty()) {
                    return;
                }
                // Weak ops wait for a strong op: let the stabilizer issue one.
                self.tick(1_000_000);
            }
        }
        panic!("cluster did not settle");
    }

    /// After `settle`: the whole-cluster checks.
    pub fn check_final(&self) -> Vec<OpId> {
        let canonical = self.nodes[0].replica.committed().to_vec();
        let calls: Vec<&ProcCall> = canonical.iter().map(|id| &self.ops[id].call).collect();
        let (outcomes, state) = replay(&self.registry, TxnLimits::default(), calls);
        let outcome_of: BTreeMap<OpId, &Outcome> =
            canonical.iter().copied().zip(outcomes.iter()).collect();
        // No op lost, duplicated or invented.
        let unique: BTreeSet<OpId> = canonical.iter().copied().collect();
        assert_eq!(unique.len(), canonical.len(), "an op committed twice");
        let cast: BTreeSet<OpId> = self.ops.keys().copied().collect();
        assert_eq!(unique, cast, "committed ops differ from broadcast ops");
        for (i, n) in self.nodes.iter().enumerate() {
            let r = &n.replica;
            assert_eq!(
                r.committed(),
                &canonical[..],
                "node {i} committed list differs"
            );
            assert!(
                r.tentative().is_empty(),
                "node {i} has tentative ops after settling"
            );
            assert!(r.is_quiescent(), "node {i} not quiescent");
            assert_eq!(
                r.committed_state(),
                state,
                "node {i} state differs from replay"
            );
            r.check_invariants().unwrap();
            r.engine().invariants().unwrap();
            // Views at the origin.
            for (h, views) in &n.views {
                let req = &self.requests[&(i, *h)];
                let tentative: Vec<&View> = views
                    .iter()
                    .filter(|v| v.kind == ViewKind::Tentative)
                    .collect();
                let finals: Vec<&View> = views
                    .iter()
                    .filter(|v| v.kind != ViewKind::Tentative)
                    .collect();
                assert!(
                    req.views.tentative || tentative.is_empty(),
                    "unrequested tentative view"
                );
                if !req.strong {
                    assert!(tentative.len() <= 1, "weak op answered tentatively twice");
                }
                if let Some(f) = finals.first() {
                    assert_eq!(finals.len(), 1, "two final views for {h:?}");
                    assert!(
                        std::ptr::eq(*f, views.last().unwrap()),
                        "a view after the final one"
                    );
                    let ExecKey::Op(id) = h else {
                        panic!("final view of a local read")
                    };
                    assert_eq!(
                        &f.outcome, outcome_of[id],
                        "final view of {id} differs from replay"
                    );
                    if f.kind == ViewKind::Confirmation {
                        assert_eq!(tentative.last().map(|v| &v.outcome), Some(&f.outcome));
                    }
                }
            }
            for ((node, h), req) in &self.requests {
                if *node != i {
                    continue;
                }
                let got = n.views.get(h).map_or(0, |v| v.len());
                assert!(got > 0, "no view for {h:?} on node {i}");
                if req.views.final_view {
                    let last = n.views[h].last().unwrap();
                    assert_ne!(last.kind, ViewKind::Tentative, "no final view for {h:?}");
                }
            }
        }
        canonical
    }

    /// The outcome of every final view (its kind depends on timing: whether a
    /// tentative view happened to go out before the commit).
    pub fn final_outcomes(&self) -> BTreeMap<(usize, ExecKey), Outcome> {
        let mut out = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for (h, views) in &n.views {
                if let Some(v) = views.iter().find(|v| v.kind != ViewKind::Tentative) {
                    out.insert((i, *h), v.outcome.clone());
                }
            }
        }
        out
    }

    pub fn state(&self, i: usize) -> BTreeMap<Bytes, Bytes> {
        self.nodes[i].replica.committed_state()
    }
}
