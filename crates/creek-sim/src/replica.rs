//! What the simulator drives: one replica of some protocol (DESIGN §10).
//! Creek's [`creek_node::Node`] and the baselines
//! ([`crate::baseline::BaselineNode`]) take the same inputs (invocations,
//! frames, ticks, completed executions) and give the same outputs (views,
//! messages, executions), so the network, the CPU model, the workloads and
//! the checkers are shared.

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_cab::MemberChange;
use creek_core::{ExecKey, InvokeError, OpId, ReplicaId, Request, View};
use creek_exec::ProcCall;
use creek_exec::{Completion, Task};
use creek_node::mpo::wire::{Reply, Request as Request_};
use creek_node::mpo::Chase;
use creek_node::MpoMessage;
use creek_procs::mpo::{MpoId, Reads};
use creek_wire::PeerMessage;

mod creek;

pub use creek::CreekReplica;

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

/// What a replica's disk asks of the simulator after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskPoll {
    /// Nothing to write, or a sync is already in flight.
    Idle,
    /// A sync started: call [`SimReplica::sync_done`] once it has taken its
    /// time.
    SyncStarted,
    /// Payloads wait to be gathered: poll again at this virtual time.
    LingerUntil(u64),
    /// The sync failed: the replica stopped (it is down now).
    Failed,
}

/// One simulated replica. Crash and restart happen in place: a crashed
/// replica takes no input until restarted.
pub trait SimReplica: Send + Sync {
    /// A client invocation; the handle its views will carry.
    fn invoke(&mut self, request: Request, now_us: u64) -> Result<ExecKey, InvokeError>;
    /// [`SimReplica::invoke`], its preliminary view held until the op is
    /// durable as `after` says (Creek only; others ignore it).
    fn invoke_answering(
        &mut self,
        request: Request,
        _after: creek_node::AnswerAfter,
        now_us: u64,
    ) -> Result<ExecKey, InvokeError> {
        self.invoke(request, now_us)
    }
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
    /// Start the disk's next sync if it can start at virtual time `now_us`
    /// (a replica without a disk is always idle).
    fn poll_disk(&mut self, _now_us: u64) -> DiskPoll {
        DiskPoll::Idle
    }
    /// The sync in flight completed.
    fn sync_done(&mut self) {}
    /// The committed order (every position, also those a recovery took
    /// from a checkpoint).
    fn committed(&self) -> &[OpId];
    /// The commit time of each op of [`SimReplica::committed`] (0 where
    /// not seen; empty for a protocol without commit times).
    fn commit_times(&self) -> &[u64] {
        &[]
    }
    /// Its group's and the global stable time as it knows them (0, 0:
    /// none; docs/snapshot-reads.md).
    fn stable_times(&self) -> (u64, u64) {
        (0, 0)
    }
    /// The clients stopped: commit nothing of its own accord from now on,
    /// in this life and the next (clock no-ops), so the cluster settles.
    fn stop_clock_noops(&mut self) {}
    /// How many committed ops have their final execution (a prefix).
    fn finalized(&self) -> u64;
    /// Ops known here and not yet committed.
    fn pending_len(&self) -> usize;
    /// Nothing left to order or execute.
    fn quiet(&self) -> bool;
    /// The state the committed ops' final executions produced.
    fn committed_state(&self) -> BTreeMap<Bytes, Bytes>;
    /// Counters so far (over every life of the replica).
    fn counts(&self) -> ReplicaCounts;
    /// The protocol's and its executor's invariants.
    fn check_invariants(&self) -> Result<(), String>;
    /// Whether the replica is up.
    fn is_up(&self) -> bool;
    /// Crash: executions in flight, unsynced messages and views and volatile
    /// state are lost. A replica with a disk loses every write not yet
    /// synced, except, for a torn write, the first `torn(n)` of its `n`
    /// unsynced disk changes (the last of them only in part).
    fn crash(&mut self, torn: &mut dyn FnMut(usize) -> usize);
    /// Restart from what was kept.
    fn restart(&mut self) -> Result<(), String>;
    /// Recovery counters (replicas with a disk).
    fn disk_counts(&self) -> DiskCounts {
        DiskCounts::default()
    }
    /// After a restart: the seq of the last own op that survived; own ids
    /// above it were lost with unsynced writes and will be issued again.
    fn last_issued_seq(&self) -> Option<u64> {
        None
    }
    /// Rebuilt after a lost disk, in this run: the highest own seq a peer
    /// held then; own ops above it issued before were lost with the disk.
    fn rebuilt_held_seq(&self) -> Option<u64> {
        None
    }
    /// The next sync fails (a disk fault; replicas with a disk).
    fn fail_next_sync(&mut self) {}
    /// Whether a write is queued or being synced.
    fn has_unsynced(&self) -> bool {
        false
    }
    /// While down: the disk is replaced by an empty one (the data directory
    /// was lost). Replicas without a disk ignore it.
    fn lose_disk(&mut self) {}
    /// Committed positions this replica took from a peer's checkpoint
    /// (state transfer) are filled in from `canonical`, the order the
    /// simulator saw committed: the replica never listed them.
    fn fill_unseen(&mut self, _canonical: &[OpId]) {}
    /// State-transfer counters, over every restart.
    fn transfers(&self) -> creek_node::TransferStats {
        creek_node::TransferStats::default()
    }
    /// The replica knows it lost its data and takes no part until rebuilt
    /// (the checkers leave it out).
    fn is_lost(&self) -> bool {
        false
    }
    /// Rebuilt after it lost its data but not yet holding what a peer held
    /// then (see `creek_node::Node::catching_up`): like a lost replica, it
    /// counts as down for the faults.
    fn catching_up(&self) -> bool {
        false
    }
    /// Propose a change of the replica group (the leader only; `Err` says
    /// why not). Protocols with a fixed group refuse.
    fn change_group(&mut self, change: MemberChange) -> Result<(), String> {
        Err(format!("{change:?}: this protocol's group is fixed"))
    }
    /// The members of the group as this replica applied it (`None` while
    /// it is down, or for a fixed group).
    fn group_members(&self) -> Option<Vec<ReplicaId>> {
        None
    }
    /// Before the first start of a replica added to a running group: the
    /// members its configuration names (them and itself).
    fn configure_group(&mut self, _group: &[ReplicaId]) {}
    /// A line on the replica's inner state, for debugging a failed seed
    /// (`CREEK_SIM_DEBUG=1`).
    fn debug(&self) -> String {
        String::new()
    }
    /// Up and a member of its cluster holding its data (not joining, not
    /// lost).
    fn is_member(&self) -> bool {
        self.is_up()
    }
    /// Operations across shards (docs/cross-shard.md): invoke this shard's
    /// copy of an MPO. Protocols without them refuse.
    fn invoke_mpo_copy(&mut self, _call: ProcCall, _now_us: u64) -> Result<(), String> {
        Err("this protocol has no operations across shards".into())
    }
    /// An input about an MPO from another shard or the directory.
    fn mpo_input(&mut self, _input: MpoInput) {}
    /// Messages for other shards about MPOs.
    fn take_mpo(&mut self) -> Vec<MpoMessage> {
        Vec::new()
    }
    /// Whether it holds a copy of `mpo`, and whether it committed one.
    fn mpo_status(&self, _mpo: MpoId) -> (bool, bool) {
        (false, false)
    }
    /// Answer another group's request about an MPO as a replica of shard
    /// `shard` (`creek_node::Node::mpo_serve`).
    fn mpo_serve(&mut self, _req: Request_, _shard: u32, _now_us: u64) -> Result<Reply, String> {
        Err("this protocol has no operations across shards".into())
    }
    /// What its committed order, waiting on an MPO, asks for now
    /// (`creek_node::Node::mpo_chase`).
    fn mpo_chase(&mut self, _now_us: u64) -> Vec<(MpoId, Chase)> {
        Vec::new()
    }
    /// On a directory replica: the indices its committed state gave `mpo`.
    fn mpo_indices(&self, _mpo: MpoId) -> Option<Vec<(u32, u64)>> {
        None
    }
    /// `mpo`'s index among its shard's MPOs, if known here.
    fn mpo_index(&self, _mpo: MpoId) -> Option<u64> {
        None
    }
    /// Under the genuine multicast: this shard's timestamp for `mpo`.
    fn mpo_timestamp_of(&self, _mpo: MpoId) -> Option<u64> {
        None
    }
    /// Under the genuine multicast: stamps due, and the MPOs that wait for
    /// other shards' timestamps (`creek_node::Node::mpo_stamps_due`).
    fn mpo_stamps_due(&mut self, _now_us: u64) -> Vec<(MpoId, Vec<(u32, ProcCall)>)> {
        Vec::new()
    }
    /// The own seqs a durable write reserved (`creek_node::Node::seq_reserved`).
    fn seq_reserved(&self) -> u64 {
        0
    }
    /// Whether it is its group's leader, or knows of none.
    fn leads_or_no_leader(&self) -> bool {
        true
    }
}

/// An input about an operation across shards.
#[derive(Clone, Debug)]
pub enum MpoInput {
    /// The directory gave `mpo` this index among the shard's MPOs.
    Sequenced(MpoId, u64),
    /// Shard `.1`'s values for the MPO.
    Reads(MpoId, u32, Reads),
    /// Shard `.1`'s timestamp for the MPO (the genuine multicast).
    Timestamp(MpoId, u32, u64),
    /// Shard `.0`'s stable time.
    Stable(u32, u64),
}

impl ReplicaCounts {
    /// `self − earlier`, field by field (counters only grow).
    pub fn since(&self, earlier: &ReplicaCounts) -> ReplicaCounts {
        ReplicaCounts {
            executions: self.executions - earlier.executions,
            ops: self.ops - earlier.ops,
            accuracy_checked: self.accuracy_checked - earlier.accuracy_checked,
            accuracy_hits: self.accuracy_hits - earlier.accuracy_hits,
            conflicts: self.conflicts - earlier.conflicts,
            invalidations: self.invalidations - earlier.invalidations,
        }
    }
}

impl std::ops::AddAssign for ReplicaCounts {
    fn add_assign(&mut self, o: ReplicaCounts) {
        self.executions += o.executions;
        self.ops += o.ops;
        self.accuracy_checked += o.accuracy_checked;
        self.accuracy_hits += o.accuracy_hits;
        self.conflicts += o.conflicts;
        self.invalidations += o.invalidations;
    }
}

/// What a replica's disk went through.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskCounts {
    /// Restarts that ran `Node::recover` on what the disk kept.
    pub recoveries: u64,
    /// Writes the node handed out that a crash took before they were synced.
    pub unsynced_writes_lost: u64,
    /// Disk changes a torn write persisted although not synced.
    pub torn_changes_kept: u64,
    /// Syncs that failed.
    pub sync_failures: u64,
    /// Syncs completed.
    pub syncs: u64,
    /// Restarts whose database had to be repaired (not closed cleanly).
    pub repairs: u64,
    /// Restarts with an empty disk (the data directory was lost).
    pub wipes: u64,
    /// Consensus-log entries compacted away (the log's base index, now).
    pub log_compacted: u64,
    /// Consensus-log entries held (now).
    pub log_entries: u64,
    /// Background checkpoints made durable and the latest.
    pub checkpoints: u64,
    /// Background checkpoints a crash cut short.
    pub checkpoints_cut: u64,
    /// Folds of the write-ahead log into the database.
    pub wal_folds: u64,
}

impl std::ops::AddAssign for DiskCounts {
    fn add_assign(&mut self, o: DiskCounts) {
        self.recoveries += o.recoveries;
        self.unsynced_writes_lost += o.unsynced_writes_lost;
        self.torn_changes_kept += o.torn_changes_kept;
        self.sync_failures += o.sync_failures;
        self.syncs += o.syncs;
        self.repairs += o.repairs;
        self.wipes += o.wipes;
        self.log_compacted += o.log_compacted;
        self.log_entries += o.log_entries;
        self.checkpoints += o.checkpoints;
        self.checkpoints_cut += o.checkpoints_cut;
        self.wal_folds += o.wal_folds;
    }
}

/// How a Creek replica's disk is set up.
#[derive(Clone, Copy, Debug)]
pub struct DiskSetup {
    /// Gather payload-only writes this long.
    pub linger_us: u64,
}

/// The completion of a task handed to a replica that is down (never reached:
/// the simulator runs a task as soon as an up replica hands it out).
pub(crate) fn down_completion(task: &Task<ExecKey>) -> Completion<ExecKey> {
    Completion {
        key: task.key,
        gen: task.gen,
        executed: creek_exec::Executed {
            reads: Vec::new(),
            scans: Vec::new(),
            writes: Vec::new(),
            outcome: Err(creek_exec::Abort::new("replica gone")),
        },
    }
}
