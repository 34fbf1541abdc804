//! What the simulator drives: one replica of some protocol (DESIGN §10).
//! Creek's [`creek_node::Node`] and the baselines
//! ([`crate::baseline::BaselineNode`]) take the same inputs (invocations,
//! frames, ticks, completed executions) and give the same outputs (views,
//! messages, executions), so the network, the CPU model, the workloads and
//! the checkers are shared.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use creek_cab::MemCabStorage;
use creek_core::{Checkpoint, ExecKey, InvokeError, OpId, Replica, ReplicaId, Request, View};
use creek_exec::{Completion, Registry, Task};
use creek_gossip::Gossip;
use creek_node::{Node, NodeConfig};
use creek_wire::PeerMessage;

/// Cumulative counters of one replica.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplicaCounts {
    /// Executions started.
    pub executions: u64,
    /// Ops inserted into the executor.
    pub ops: u64,
    /// Speculative results compared with the final ones at their origin.
    pub accuracy_checked: u64,
    /// ... of which equal.
    pub accuracy_hits: u64,
    /// Completions rejected at validation (a read changed while running).
    pub conflicts: u64,
    /// Installed executions rolled back.
    pub invalidations: u64,
}

/// One simulated replica. Crash and restart happen in place: a crashed
/// replica keeps what a durable driver would keep and takes no input until
/// restarted.
pub trait SimReplica: Send + Sync {
    /// A client invocation; the handle its views will carry.
    fn invoke(&mut self, request: Request, now_us: u64) -> Result<ExecKey, InvokeError>;
    /// A frame from a peer (a malformed one is refused and counted).
    fn on_frame(&mut self, from: ReplicaId, frame: &Bytes);
    /// Advance time.
    fn tick(&mut self, now_us: u64);
    /// The next execution to run, if any.
    fn next_execution(&mut self) -> Option<Task<ExecKey>>;
    /// Run a task on its snapshot.
    fn run(&self, task: &Task<ExecKey>) -> Completion<ExecKey>;
    /// Hand a finished execution back.
    fn complete(&mut self, done: Completion<ExecKey>);
    /// Views for this replica's clients.
    fn take_views(&mut self) -> Vec<View>;
    /// Messages to send.
    fn take_outbox(&mut self) -> Vec<(ReplicaId, PeerMessage)>;
    /// The committed order.
    fn committed(&self) -> &[OpId];
    /// How many committed ops have their final execution (a prefix).
    fn finalized(&self) -> u64;
    /// Ops known here and not yet committed.
    fn pending_len(&self) -> usize;
    /// Nothing left to order or execute.
    fn quiet(&self) -> bool;
    /// The state the committed ops' final executions produced.
    fn committed_state(&self) -> BTreeMap<Bytes, Bytes>;
    /// Counters so far.
    fn counts(&self) -> ReplicaCounts;
    /// The protocol's and its executor's invariants.
    fn check_invariants(&self) -> Result<(), String>;
    /// Whether the replica is up.
    fn is_up(&self) -> bool;
    /// Crash: executions in flight, unsent messages and views and volatile
    /// consensus state are lost.
    fn crash(&mut self);
    /// Restart from what was kept.
    fn restart(&mut self) -> Result<(), String>;
}

struct Down {
    replica: Replica,
    gossip: Gossip,
    applied: u64,
}

/// Creek: the node the server runs.
pub struct CreekReplica {
    node: Option<Node<MemCabStorage>>,
    down: Option<Down>,
    storage: MemCabStorage,
    config: NodeConfig,
}

impl CreekReplica {
    /// A fresh replica, or one restored from `initial` (a bulk load).
    pub fn new(
        config: NodeConfig,
        registry: Arc<Registry>,
        storage: MemCabStorage,
        initial: Option<Checkpoint>,
    ) -> Result<Self, String> {
        let node = match initial {
            None => Node::new(config.clone(), registry, storage.clone(), 0),
            Some(c) => Node::recover(config.clone(), registry, storage.clone(), Some(c), vec![]),
        }
        .map_err(|e| e.to_string())?;
        Ok(CreekReplica {
            node: Some(node),
            down: None,
            storage,
            config,
        })
    }

    fn replica(&self) -> Option<&Replica> {
        match (&self.node, &self.down) {
            (Some(n), _) => Some(n.replica()),
            (None, Some(d)) => Some(&d.replica),
            (None, None) => None,
        }
    }
}

impl SimReplica for CreekReplica {
    fn invoke(&mut self, request: Request, now_us: u64) -> Result<ExecKey, InvokeError> {
        match self.node.as_mut() {
            Some(n) => n.invoke(request, now_us),
            // Not reached: the simulator never invokes a replica that is down.
            None => Err(InvokeError::Overloaded(0)),
        }
    }

    fn on_frame(&mut self, from: ReplicaId, frame: &Bytes) {
        if let Some(n) = self.node.as_mut() {
            let _ = n.on_frame(from, frame);
        }
    }

    fn tick(&mut self, now_us: u64) {
        if let Some(n) = self.node.as_mut() {
            n.tick(now_us);
        }
    }

    fn next_execution(&mut self) -> Option<Task<ExecKey>> {
        self.node.as_mut()?.next_execution()
    }

    fn run(&self, task: &Task<ExecKey>) -> Completion<ExecKey> {
        match &self.node {
            Some(n) => n.run(task),
            None => down_completion(task),
        }
    }

    fn complete(&mut self, done: Completion<ExecKey>) {
        if let Some(n) = self.node.as_mut() {
            n.complete(done);
        }
    }

    fn take_views(&mut self) -> Vec<View> {
        self.node.as_mut().map(Node::take_views).unwrap_or_default()
    }

    fn take_outbox(&mut self) -> Vec<(ReplicaId, PeerMessage)> {
        self.node
            .as_mut()
            .map(Node::take_outbox)
            .unwrap_or_default()
    }

    fn committed(&self) -> &[OpId] {
        self.replica().map_or(&[], Replica::committed)
    }

    fn finalized(&self) -> u64 {
        self.replica().map_or(0, |r| r.counters().finalized)
    }

    fn pending_len(&self) -> usize {
        self.replica().map_or(0, Replica::tentative_len)
    }

    fn quiet(&self) -> bool {
        self.node.as_ref().is_some_and(|n| {
            let r = n.replica();
            r.tentative_len() == 0
                && n.cab().decided_waiting() == 0
                && r.counters().finalized == r.committed().len() as u64
        })
    }

    fn committed_state(&self) -> BTreeMap<Bytes, Bytes> {
        self.replica()
            .map(Replica::committed_state)
            .unwrap_or_default()
    }

    fn counts(&self) -> ReplicaCounts {
        let Some(r) = self.replica() else {
            return ReplicaCounts::default();
        };
        let (c, e) = (r.counters(), r.exec_counters());
        ReplicaCounts {
            executions: e.executions,
            ops: e.ops,
            accuracy_checked: c.accuracy_checked,
            accuracy_hits: c.accuracy_hits,
            conflicts: e.conflicts,
            invalidations: e.invalidations,
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match self.replica() {
            Some(r) => r
                .check_invariants()
                .and_then(|_| r.engine().check_invariants()),
            None => Ok(()),
        }
    }

    fn is_up(&self) -> bool {
        self.node.is_some()
    }

    /// The replica and gossip state survive as a durable driver keeps them,
    /// CAB keeps its storage; leadership and held appends are lost.
    fn crash(&mut self) {
        let Some(node) = self.node.take() else { return };
        let applied = node.cab_delivered_through();
        let (replica, gossip) = node.into_parts();
        self.down = Some(Down {
            replica,
            gossip,
            applied,
        });
    }

    fn restart(&mut self) -> Result<(), String> {
        let Some(d) = self.down.take() else {
            return Ok(());
        };
        let node = Node::restart(
            d.replica,
            d.gossip,
            self.config.cab.clone(),
            self.storage.clone(),
            d.applied,
            self.config.wire,
        )
        .map_err(|e| e.to_string())?;
        self.node = Some(node);
        Ok(())
    }
}

/// The completion of a task handed to a replica that is down (never reached:
/// the simulator runs a task as soon as an up replica hands it out).
pub(crate) fn down_completion(task: &Task<ExecKey>) -> Completion<ExecKey> {
    Completion {
        key: task.key,
        gen: task.gen,
        executed: creek_exec::Executed {
            reads: Vec::new(),
            writes: Vec::new(),
            outcome: Err(creek_exec::Abort::new("replica gone")),
        },
    }
}
