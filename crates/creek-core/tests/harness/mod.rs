//! An in-process cluster for protocol tests: replicas of one engine type,
//! FIFO links for RB, a decision sequence for CAB, and an oracle that checks
//! every view against a sequential replay (DESIGN §3, "Test oracle").
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use creek_core::{
    Config, Effect, ExecKey, Op, OpId, Pos, Replica, ReplicaId, Request, View, ViewKind, Views,
};
use creek_exec::basic::{replay, replay_versioned, BasicEngine};
use creek_exec::mvcc::MvccExecutor;
use creek_exec::{Completion, Engine, Outcome, ProcCall, Task, TxnLimits};
use creek_procs::Registry;
use creek_types::value::{encode_args, Value};
use creek_types::ClientRequestId;
use proptest::prelude::*;

/// An engine the harness can build.
pub trait TestEngine: Engine<ExecKey, Pos> + Sized {
    /// Whether it keeps version records, as a replica's engine does.
    const KEEPS_VERSIONS: bool;
    /// The engine a replica with `config` runs.
    fn build(registry: Arc<Registry>, config: &Config) -> Self;
    fn invariants(&self) -> Result<(), String> {
        Ok(())
    }
}

impl TestEngine for MvccExecutor<ExecKey, Pos> {
    const KEEPS_VERSIONS: bool = true;
    fn build(registry: Arc<Registry>, config: &Config) -> Self {
        let mut e = MvccExecutor::new(registry, TxnLimits::default());
        e.set_schedule(config.schedule);
        e.keep_versions(creek_procs::versions::meta_key, Pos::revision);
        e
    }
    fn invariants(&self) -> Result<(), String> {
        self.check_invariants()
    }
}

impl TestEngine for BasicEngine<ExecKey, Pos> {
    const KEEPS_VERSIONS: bool = false;
    fn build(registry: Arc<Registry>, _: &Config) -> Self {
        BasicEngine::new(registry, TxnLimits::default())
    }
}

pub struct Node<E> {
    pub replica: Replica<E>,
    /// Executions handed out: the task, and its result if it read its
    /// snapshot when it started (else it reads it when it completes).
    pub running: Vec<(Task<ExecKey>, Option<Completion<ExecKey>>)>,
    /// Views received for this node's invocations, by handle.
    pub views: BTreeMap<ExecKey, Vec<View>>,
    /// How many decided ids this node has been given.
    pub cab_next: usize,
    /// The committed ops before `replica.committed()`: those of the
    /// checkpoint the replica was restored from (empty otherwise).
    pub base: Vec<OpId>,
}

impl<E: Engine<ExecKey, Pos>> Node<E> {
    /// The whole committed list, checkpointed prefix included.
    pub fn committed(&self) -> Vec<OpId> {
        self.base
            .iter()
            .chain(self.replica.committed())
            .copied()
            .collect()
    }
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
    /// `n` replicas whose first preliminary views wait for the ops before
    /// them (each tentative view is checked against a replay of the order).
    pub fn new(n: usize, stabilize_after_us: u64) -> Self {
        Self::with_views(n, stabilize_after_us, false)
    }

    /// `n` replicas; with `early_views`, a first preliminary view comes as
    /// soon as the op's execution is valid (the default configuration).
    pub fn with_views(n: usize, stabilize_after_us: u64, early_views: bool) -> Self {
        Self::with_config(
            n,
            Config {
                stabilize_after_us,
                early_tentative_views: early_views,
                ..Config::default()
            },
        )
    }

    /// `n` replicas configured as `template` (each with its own id).
    pub fn with_config(n: usize, template: Config) -> Self {
        let registry = Arc::new(Registry::with_builtins());
        let early_views = template.early_tentative_views;
        let nodes = (0..n)
            .map(|i| {
                let config = Config {
                    id: ReplicaId(i as u16 + 1),
                    ..template.clone()
                };
                let engine = E::build(registry.clone(), &config);
                Node {
                    replica: Replica::with_engine(config, registry.clone(), engine).unwrap(),
                    running: Vec::new(),
                    views: BTreeMap::new(),
                    cab_next: 0,
                    base: Vec::new(),
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
            check_each_step: !early_views,
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
                // No replica of this harness loses its data, so none voids.
                Effect::Voided(_) => {}
                // A group of this harness is no shard of a cluster.
                Effect::MpoReads { .. } | Effect::MpoTimestamp { .. } => {}
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
        let order: Vec<OpId> = self.nodes[i]
            .committed()
            .into_iter()
            .chain(r.tentative())
            .collect();
        let Some(idx) = order.iter().position(|x| *x == id) else {
            panic!("view for {id} which is not in the order");
        };
        let calls: Vec<&ProcCall> = order[..=idx].iter().map(|x| &self.ops[x].call).collect();
        let (outcomes, _) = replay(&*self.registry, TxnLimits::default(), calls);
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
        self.start_exec_reading(i, false)
    }

    /// Start an execution; with `read_now` it reads its snapshot at once
    /// (and its result is validated when it completes, after whatever
    /// happened meanwhile), else when it completes.
    pub fn start_exec_reading(&mut self, i: usize, read_now: bool) -> bool {
        let n = &mut self.nodes[i];
        let Some(task) = n.replica.next_execution() else {
            return false;
        };
        let done = read_now.then(|| n.replica.run(&task));
        n.running.push((task, done));
        true
    }

    pub fn complete_exec(&mut self, i: usize, pick: usize) -> bool {
        let n = &mut self.nodes[i];
        if n.running.is_empty() {
            return false;
        }
        let (task, done) = n.running.remove(pick % n.running.len());
        let done: Completion<ExecKey> = done.unwrap_or_else(|| n.replica.run(&task));
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
        let canonical = self.nodes[0].committed();
        let calls: Vec<&ProcCall> = canonical.iter().map(|id| &self.ops[id].call).collect();
        let (outcomes, mut state) = replay_versioned(
            &*self.registry,
            TxnLimits::default(),
            BTreeMap::new(),
            creek_procs::versions::meta_key,
            (1..).zip(calls),
        );
        if !E::KEEPS_VERSIONS {
            state.retain(|k, _| !k.starts_with(creek_procs::versions::META_PREFIX));
        }
        let outcome_of: BTreeMap<OpId, &Outcome> =
            canonical.iter().copied().zip(outcomes.iter()).collect();
        // No op lost, duplicated or invented.
        let unique: BTreeSet<OpId> = canonical.iter().copied().collect();
        assert_eq!(unique.len(), canonical.len(), "an op committed twice");
        let cast: BTreeSet<OpId> = self.ops.keys().copied().collect();
        assert_eq!(unique, cast, "committed ops differ from broadcast ops");
        for (i, n) in self.nodes.iter().enumerate() {
            let r = &n.replica;
            assert_eq!(n.committed(), canonical, "node {i} committed list differs");
            assert_eq!(r.committed_len(), canonical.len() as u64);
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
                let finals: Vec<&View> = views.iter().filter(|v| v.kind.is_final()).collect();
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
                if let Some(v) = views.iter().find(|v| v.kind.is_final()) {
                    out.insert((i, *h), v.outcome.clone());
                }
            }
        }
        out
    }

    /// Node `i`'s committed state without the version records (which only
    /// an engine that keeps them holds).
    pub fn state(&self, i: usize) -> BTreeMap<Bytes, Bytes> {
        let mut state = self.nodes[i].replica.committed_state();
        state.retain(|k, _| !k.starts_with(creek_procs::versions::META_PREFIX));
        state
    }
}

#[derive(Clone, Debug)]
pub enum Action {
    Invoke {
        node: u8,
        proc_: u8,
        key: u8,
        arg: u8,
        strong: bool,
        views: u8,
        retry: Option<u8>,
    },
    DeliverRb {
        from: u8,
        to: u8,
    },
    Decide {
        pick: u8,
    },
    DeliverCab {
        node: u8,
    },
    StartExec {
        node: u8,
        /// Read the snapshot at start rather than at completion.
        read_now: bool,
    },
    CompleteExec {
        node: u8,
        pick: u8,
    },
    Tick {
        advance_ms: u8,
    },
}

pub fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        3 => (any::<u8>(), 0u8..9, 0u8..3, any::<u8>(), any::<bool>(), 0u8..3, proptest::option::weighted(0.15, 0u8..4))
            .prop_map(|(node, proc_, key, arg, strong, views, retry)| Action::Invoke { node, proc_, key, arg, strong, views, retry }),
        4 => (any::<u8>(), any::<u8>()).prop_map(|(from, to)| Action::DeliverRb { from, to }),
        1 => any::<u8>().prop_map(|pick| Action::Decide { pick }),
        2 => any::<u8>().prop_map(|node| Action::DeliverCab { node }),
        3 => (any::<u8>(), any::<bool>()).prop_map(|(node, read_now)| Action::StartExec { node, read_now }),
        3 => (any::<u8>(), any::<u8>()).prop_map(|(node, pick)| Action::CompleteExec { node, pick }),
        1 => (0u8..4).prop_map(|advance_ms| Action::Tick { advance_ms }),
    ]
}

pub fn call(proc_: u8, key: u8, arg: u8) -> ProcCall {
    let k = Value::from(format!("k{key}").as_str());
    let v = Value::from(format!("v{arg}").as_str());
    let (name, args) = match proc_ {
        0 => ("kv.get", vec![k]),
        1 => ("kv.put", vec![k, v]),
        2 => (
            "kv.incr",
            vec![
                Value::from(format!("n{key}").as_str()),
                Value::Int(i64::from(arg % 7) - 2),
            ],
        ),
        3 => (
            "kv.cas",
            vec![
                k,
                if arg.is_multiple_of(2) {
                    Value::Nil
                } else {
                    Value::from(format!("v{}", arg / 2).as_str())
                },
                v,
            ],
        ),
        4 => ("kv.delete", vec![k]),
        5 => ("queue.enqueue", vec![Value::from("q"), v]),
        6 => ("queue.dequeue", vec![Value::from("q")]),
        7 => ("list.append", vec![Value::from("l"), v]),
        _ => ("list.read", vec![Value::from("l")]),
    };
    ProcCall::new(name, encode_args(&args))
}

impl<E: TestEngine> Cluster<E> {
    /// Apply one random action (node indexes are taken modulo the size).
    pub fn apply(&mut self, a: &Action) {
        let n = self.nodes.len();
        let c = self;
        let node = |x: u8| usize::from(x) % n;
        match *a {
            Action::Invoke {
                node: i,
                proc_,
                key,
                arg,
                strong,
                views,
                retry,
            } => {
                let mut call = call(proc_, key, arg);
                call.request_id = retry.map(|seq| ClientRequestId {
                    client: 7,
                    seq: u64::from(seq),
                });
                let views = match (strong, views) {
                    (true, 0) => Views::STRONG,
                    (_, 1) => Views::BOTH,
                    _ => Views::WEAK,
                };
                c.invoke(
                    node(i),
                    Request {
                        call,
                        strong,
                        views,
                        read_time: 0,
                        read_exact: false,
                        read_revision: None,
                    },
                );
            }
            Action::DeliverRb { from, to } => {
                c.deliver_rb(node(from), node(to));
            }
            Action::Decide { pick } => {
                c.decide(usize::from(pick));
            }
            Action::DeliverCab { node: i } => {
                c.deliver_cab(node(i));
            }
            Action::StartExec { node: i, read_now } => {
                c.start_exec_reading(node(i), read_now);
            }
            Action::CompleteExec { node: i, pick } => {
                c.complete_exec(node(i), usize::from(pick));
            }
            Action::Tick { advance_ms } => c.tick(u64::from(advance_ms) * 1000),
        }
    }
}
