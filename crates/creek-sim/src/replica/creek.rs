//! Creek's replica in the simulator: the node the server runs, on
//! `creek-store` over a simulated disk, behind [`SimReplica`].

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use creek_cab::MemberChange;
use creek_core::{Checkpoint, ExecKey, InvokeError, OpId, Replica, ReplicaId, Request, View};
use creek_exec::ProcCall;
use creek_exec::{Completion, Task};
use creek_node::mpo::wire::{Reply, Request as Request_};
use creek_node::mpo::Chase;
use creek_node::{
    CheckpointJob, Driver, HoldQueue, Identity, MpoMessage, Node, NodeConfig, Standing,
    TransferDone, TransferJob, Write,
};
use creek_procs::mpo::MpoId;
use creek_procs::Registry;
use creek_store::{CheckpointWriter, LogStore, Piece, SimDisk, Store};
use creek_types::planted::Bug;
use creek_wire::PeerMessage;

use super::{
    down_completion, DiskCounts, DiskPoll, DiskSetup, MpoInput, ReplicaCounts, SimReplica,
};

/// Creek: the node the server runs, on `creek-store` over a simulated disk.
/// Every write the node hands out goes to the disk; a crash throws away the
/// node and every write not yet synced, and a restart runs
/// `Node::recover` on what the disk kept — what `creek serve` runs.
pub struct CreekReplica {
    node: Option<Node<LogStore>>,
    store: Option<Store>,
    disk: SimDisk,
    setup: DiskSetup,
    config: NodeConfig,
    registry: Arc<Registry>,
    voters: Vec<u64>,
    /// Writes not yet in a sync, with the virtual time they were queued
    /// (`None`: not stamped yet).
    queued: Vec<(Write, Option<u64>)>,
    /// The sync in flight.
    syncing: Option<Syncing>,
    /// The background checkpoint being written, a chunk per sync when no
    /// write is queued.
    checkpoint: Option<CheckpointWriter>,
    held: HoldQueue<(ReplicaId, PeerMessage)>,
    outbox: Vec<(ReplicaId, PeerMessage)>,
    views: Vec<View>,
    mpo: Vec<MpoMessage>,
    /// Every committed id, across lives (a recovered replica lists only
    /// what it committed after its checkpoint; the simulator saw the rest).
    /// Positions taken from a peer's checkpoint hold [`UNSEEN`] until
    /// [`SimReplica::fill_unseen`].
    committed: Vec<OpId>,
    /// The commit time of each op of `committed` (0 at positions taken
    /// from a peer's checkpoint).
    commit_times: Vec<u64>,
    /// The first position holding [`UNSEEN`], if any.
    unseen_from: Option<usize>,
    /// Counters of earlier lives.
    counts_before: ReplicaCounts,
    /// State transfers of earlier lives: installed, bytes received.
    transfers_before: creek_node::TransferStats,
    disk_counts: DiskCounts,
}

/// Checkpoint chunks on the simulated disk: small, so that the simulator's
/// small states take several chunks (and a crash can fall between them).
const CHECKPOINT_CHUNK_BYTES: usize = 512;

/// The simulated disk's write-ahead log folds into its database once this
/// much of it is filled: a run of a few seconds folds many times (and a
/// crash can fall in a fold).
const WAL_BYTES: u64 = 16 << 10;

/// A sync in flight.
#[derive(Clone, Copy, Debug)]
enum Syncing {
    /// Of a group of writes: the last, and how many.
    Writes { last: u64, count: usize },
    /// Of a chunk of the background checkpoint; `done` names the job when
    /// this sync makes it the latest checkpoint.
    Checkpoint { done: Option<u64> },
}

/// A committed position a replica took from a peer's checkpoint (seq 0 is
/// no op's).
const UNSEEN: OpId = OpId {
    origin: ReplicaId(0),
    seq: 0,
};

/// The nonce a data directory gets when a simulated replica starts on an
/// empty disk: unique per replica and disk.
fn sim_nonce(me: ReplicaId, wipes: u64) -> u64 {
    (u64::from(me.0) << 32) | (wipes + 1)
}

/// A Creek replica's simulated I/O for one [`Node::drive`]: the disk's
/// queue and checkpoint writer, the hold queue, the outbox, the views.
struct SimIo<'a> {
    /// The last write reported durable.
    durable: u64,
    views: &'a mut Vec<View>,
    mpo: &'a mut Vec<MpoMessage>,
    outbox: &'a mut Vec<(ReplicaId, PeerMessage)>,
    held: &'a mut HoldQueue<(ReplicaId, PeerMessage)>,
    queued: &'a mut Vec<(Write, Option<u64>)>,
    checkpoint: &'a mut Option<CheckpointWriter>,
    store: Option<&'a Store>,
}

impl Driver for SimIo<'_> {
    /// Done at once (the server does it on other threads); what follows
    /// leaves in the same cycle.
    fn transfer(&mut self, job: TransferJob) -> Option<TransferDone> {
        Some(job.run())
    }

    fn views(&mut self, views: Vec<View>) {
        self.views.extend(views);
    }

    fn mpo(&mut self, messages: Vec<MpoMessage>) {
        self.mpo.extend(messages);
    }

    fn persist(&mut self, write: Write) {
        self.queued.push((write, None));
    }

    fn checkpoint(&mut self, job: CheckpointJob) {
        if let Some(store) = self.store {
            *self.checkpoint = Some(store.start_checkpoint(job));
        }
    }

    fn hold(&mut self, until: u64, messages: Vec<(ReplicaId, PeerMessage)>) {
        self.held.follow(until, messages);
        self.outbox.extend(self.held.release(self.durable));
    }

    fn send_now(&mut self, messages: Vec<(ReplicaId, PeerMessage)>) {
        self.outbox.extend(messages);
    }
}

impl CreekReplica {
    /// A replica of a group bootstrapped before the run (a member from the
    /// start), fresh or restored from `initial` (a bulk load, as if restored
    /// from a backup). Its identity and `initial` are written to its disk
    /// when `durable_initial`, i.e. when the run can crash it.
    pub fn new(
        config: NodeConfig,
        registry: Arc<Registry>,
        setup: DiskSetup,
        initial: Option<Checkpoint>,
        durable_initial: bool,
    ) -> Result<Self, String> {
        let voters: Vec<u64> = config
            .cab
            .replicas
            .iter()
            .map(|r| creek_cab::raft_id(*r))
            .collect();
        let disk = SimDisk::new();
        let loaded = creek_store::load_backend(disk.clone(), disk.wal(), voters.clone())
            .map_err(|e| e.to_string())?;
        let identity = Identity::founding(&config.cab.replicas);
        if durable_initial {
            let write = Write {
                checkpoint: initial.clone(),
                identity: Some(identity.clone()),
                ..Write::default()
            };
            loaded.store.write(&[write]).map_err(|e| e.to_string())?;
            disk.complete_sync();
        }
        let node = Node::recover(
            config.clone(),
            registry.clone(),
            loaded.storage,
            creek_node::Kept {
                checkpoint: initial,
                identity: Some(identity),
                ..Default::default()
            },
            0,
        )
        .map_err(|e| e.to_string())?;
        let mut r = CreekReplica::spare(config, registry, setup);
        r.node = Some(node);
        r.store = Some(
            loaded
                .store
                .with_checkpoint_chunk_bytes(CHECKPOINT_CHUNK_BYTES)
                .with_wal_bytes(WAL_BYTES),
        );
        r.disk = disk;
        r.voters = voters;
        r.note_committed();
        Ok(r)
    }

    /// A replica not yet in the group: down, on an empty disk, until the
    /// simulator adds it (`configure_group`, then `restart`).
    pub fn spare(config: NodeConfig, registry: Arc<Registry>, setup: DiskSetup) -> Self {
        CreekReplica {
            node: None,
            store: None,
            disk: SimDisk::new(),
            setup,
            voters: Vec::new(),
            config,
            registry,
            queued: Vec::new(),
            syncing: None,
            checkpoint: None,
            held: HoldQueue::default(),
            outbox: Vec::new(),
            views: Vec::new(),
            mpo: Vec::new(),
            committed: Vec::new(),
            commit_times: Vec::new(),
            unseen_from: None,
            counts_before: ReplicaCounts::default(),
            transfers_before: creek_node::TransferStats::default(),
            disk_counts: DiskCounts::default(),
        }
    }

    fn replica(&self) -> Option<&Replica> {
        self.node.as_ref().map(Node::replica)
    }

    /// After a step: carry out the node's `Ready` and note new commits.
    fn collect(&mut self) {
        // Before the cycle: a checkpoint written there trims the replica's
        // committed list.
        self.note_committed();
        let Some(node) = self.node.as_mut() else {
            return;
        };
        let mut io = SimIo {
            durable: node.durable(),
            views: &mut self.views,
            mpo: &mut self.mpo,
            outbox: &mut self.outbox,
            held: &mut self.held,
            queued: &mut self.queued,
            checkpoint: &mut self.checkpoint,
            store: self.store.as_ref(),
        };
        node.drive(&mut io);
        self.note_committed();
    }

    fn note_committed(&mut self) {
        let Some(r) = self.node.as_ref().map(Node::replica) else {
            return;
        };
        let list = r.committed();
        let base = r.committed_len() - list.len() as u64;
        let have = self.committed.len() as u64;
        if base > have {
            // A checkpoint from a peer: positions this replica never listed.
            self.unseen_from.get_or_insert(have as usize);
            self.committed.resize(base as usize, UNSEEN);
        }
        let have = self.committed.len() as u64;
        let skip = (have - base) as usize;
        if skip < list.len() {
            self.committed.extend_from_slice(&list[skip..]);
        }
        let times = r.commit_times();
        self.commit_times.resize(have as usize, 0);
        if skip < times.len() {
            self.commit_times.extend_from_slice(&times[skip..]);
        }
    }

    /// No write queued: the next chunk of the background checkpoint, if one
    /// is being written.
    fn write_checkpoint_piece(&mut self) -> DiskPoll {
        let (Some(store), Some(w)) = (&self.store, self.checkpoint.as_mut()) else {
            return DiskPoll::Idle;
        };
        let done = match store.write_checkpoint_piece(w) {
            Ok(Piece::Waiting) => return DiskPoll::Idle,
            Ok(Piece::Finished) => {
                self.checkpoint = None;
                return DiskPoll::Idle;
            }
            Ok(Piece::Written | Piece::Superseded | Piece::Removed) => None,
            Ok(Piece::Done) => Some(w.job_id()),
            Err(_) => {
                // As for a failed write: the replica stops.
                self.disk_counts.sync_failures += 1;
                self.crash(&mut |_| 0);
                return DiskPoll::Failed;
            }
        };
        self.syncing = Some(Syncing::Checkpoint { done });
        DiskPoll::SyncStarted
    }

    /// Writes up to `seq` are durable: tell the node, release what waited,
    /// carry out what follows (a leader's commit once its own write is
    /// durable).
    fn durable(&mut self, seq: u64) {
        if let Some(node) = self.node.as_mut() {
            node.on_durable(seq);
        }
        let released = self.held.release(seq);
        self.outbox.extend(released);
        self.collect();
    }
}

impl SimReplica for CreekReplica {
    fn invoke(&mut self, request: Request, now_us: u64) -> Result<ExecKey, InvokeError> {
        self.invoke_answering(request, creek_node::AnswerAfter::Execution, now_us)
    }

    fn invoke_answering(
        &mut self,
        request: Request,
        after: creek_node::AnswerAfter,
        now_us: u64,
    ) -> Result<ExecKey, InvokeError> {
        let r = match self.node.as_mut() {
            Some(n) => n.invoke_answering(request, after, now_us),
            // Not reached: the simulator never invokes a replica that is down.
            None => Err(InvokeError::Overloaded(0)),
        };
        self.collect();
        r
    }

    fn on_frame(&mut self, from: ReplicaId, frame: &Bytes) {
        if let Some(n) = self.node.as_mut() {
            let _ = n.on_frame(from, frame);
        }
        self.collect();
    }

    fn tick(&mut self, now_us: u64) {
        if let Some(n) = self.node.as_mut() {
            n.tick(now_us);
        }
        self.collect();
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
        self.collect();
    }

    fn take_views(&mut self) -> Vec<View> {
        std::mem::take(&mut self.views)
    }

    fn take_outbox(&mut self) -> Vec<(ReplicaId, PeerMessage)> {
        std::mem::take(&mut self.outbox)
    }

    fn invoke_mpo_copy(&mut self, call: ProcCall, now_us: u64) -> Result<(), String> {
        let r = match self.node.as_mut() {
            Some(n) => n
                .invoke_mpo_copy(call, now_us)
                .map(drop)
                .map_err(|e| e.to_string()),
            None => Err("down".into()),
        };
        self.collect();
        r
    }

    fn mpo_input(&mut self, input: MpoInput) {
        if let Some(n) = self.node.as_mut() {
            match input {
                MpoInput::Sequenced(mpo, index) => n.mpo_sequenced(mpo, index),
                MpoInput::Reads(mpo, shard, reads) => n.mpo_reads(mpo, shard, reads),
                MpoInput::Timestamp(mpo, shard, ts) => n.mpo_timestamp(mpo, shard, ts),
                MpoInput::Stable(shard, time) => n.stable_from(shard, time),
            }
        }
        self.collect();
    }

    fn take_mpo(&mut self) -> Vec<MpoMessage> {
        std::mem::take(&mut self.mpo)
    }

    fn mpo_status(&self, mpo: MpoId) -> (bool, bool) {
        self.replica()
            .map_or((false, false), |r| (r.mpo_held(mpo), r.mpo_committed(mpo)))
    }

    fn mpo_serve(&mut self, req: Request_, shard: u32, now_us: u64) -> Result<Reply, String> {
        let r = match self.node.as_mut() {
            Some(n) => n.mpo_serve(req, shard, now_us).map_err(|e| e.to_string()),
            None => Err("down".into()),
        };
        self.collect();
        r
    }

    fn mpo_chase(&mut self, now_us: u64) -> Vec<(MpoId, Chase)> {
        self.node
            .as_mut()
            .map_or_else(Vec::new, |n| n.mpo_chase(now_us))
    }

    fn mpo_indices(&self, mpo: MpoId) -> Option<Vec<(u32, u64)>> {
        self.node.as_ref()?.mpo_indices(mpo)
    }

    fn mpo_index(&self, mpo: MpoId) -> Option<u64> {
        self.replica()?.mpo_index(mpo)
    }

    fn mpo_timestamp_of(&self, mpo: MpoId) -> Option<u64> {
        self.replica()?.mpo_timestamp_of(mpo)
    }

    fn mpo_stamps_due(&mut self, now_us: u64) -> Vec<(MpoId, Vec<(u32, ProcCall)>)> {
        let asks = self
            .node
            .as_mut()
            .map_or_else(Vec::new, |n| n.mpo_stamps_due(now_us));
        self.collect();
        asks
    }

    fn seq_reserved(&self) -> u64 {
        self.node.as_ref().map_or(0, |n| n.seq_reserved())
    }

    fn leads_or_no_leader(&self) -> bool {
        self.node
            .as_ref()
            .is_some_and(|n| n.cab().leader().is_none_or(|l| l == n.id()))
    }

    fn poll_disk(&mut self, now_us: u64) -> DiskPoll {
        if self.node.is_none() || self.syncing.is_some() {
            return DiskPoll::Idle;
        }
        if self.queued.is_empty() {
            return self.write_checkpoint_piece();
        }
        for (_, at) in &mut self.queued {
            at.get_or_insert(now_us);
        }
        let urgent = self.queued.iter().any(|(w, _)| w.is_urgent());
        let oldest = self
            .queued
            .iter()
            .filter_map(|(_, at)| *at)
            .min()
            .unwrap_or(now_us);
        let until = oldest + self.setup.linger_us;
        if !urgent && now_us < until {
            return DiskPoll::LingerUntil(until);
        }
        let group: Vec<Write> = self.queued.drain(..).map(|(w, _)| w).collect();
        let Some(last) = group.last().map(|w| w.seq) else {
            return DiskPoll::Idle;
        };
        let result = match &self.store {
            Some(store) => store.write(&group),
            None => return DiskPoll::Idle,
        };
        match result {
            Ok(()) => {
                if self.checkpoint.is_none() && group.iter().any(|w| w.checkpoint.is_some()) {
                    // As the persister does: an installed checkpoint lets
                    // the older one's chunks go now.
                    self.checkpoint = self.store.as_ref().map(Store::start_cleaning);
                }
                self.syncing = Some(Syncing::Writes {
                    last,
                    count: group.len(),
                });
                // The planted disk bug is planted with the node's others, in its
                // configuration: a write counts as durable when its sync starts.
                if self.config.planted.has(Bug::ForgetUnsyncedTail) {
                    self.durable(last);
                }
                DiskPoll::SyncStarted
            }
            Err(_) => {
                // After an fsync error nothing is known about the disk: the
                // replica stops, as the server does (what was synced before
                // is still there for a restart).
                self.disk_counts.sync_failures += 1;
                self.disk_counts.unsynced_writes_lost += group.len() as u64;
                self.crash(&mut |_| 0);
                DiskPoll::Failed
            }
        }
    }

    fn sync_done(&mut self) {
        let Some(syncing) = self.syncing.take() else {
            return;
        };
        self.disk.complete_sync();
        self.disk_counts.syncs += 1;
        match syncing {
            Syncing::Writes { last, .. } => self.durable(last),
            Syncing::Checkpoint { done: Some(id) } => {
                self.disk_counts.checkpoints += 1;
                if let Some(node) = self.node.as_mut() {
                    node.on_checkpoint_durable(id);
                }
            }
            Syncing::Checkpoint { done: None } => {}
        }
    }

    fn committed(&self) -> &[OpId] {
        &self.committed
    }

    fn commit_times(&self) -> &[u64] {
        &self.commit_times
    }

    fn stop_clock_noops(&mut self) {
        self.config.stable.no_clock_noops = true;
        if let Some(n) = self.node.as_mut() {
            n.stop_clock_noops();
        }
    }

    fn stable_times(&self) -> (u64, u64) {
        self.node.as_ref().map_or((0, 0), |n| {
            let st = n.stable_times();
            (st.group(), st.global())
        })
    }

    /// 0 while down: its memory is gone.
    fn finalized(&self) -> u64 {
        self.replica().map_or(0, |r| r.counters().finalized)
    }

    fn pending_len(&self) -> usize {
        self.replica().map_or(0, Replica::tentative_len)
    }

    fn quiet(&self) -> bool {
        self.node.as_ref().is_some_and(|n| {
            let r = n.replica();
            !n.reclaiming()
                && r.tentative_len() == 0
                && n.cab().decided_waiting() == 0
                && r.counters().finalized == r.committed_len()
        })
    }

    fn committed_state(&self) -> BTreeMap<Bytes, Bytes> {
        self.replica()
            .map(Replica::committed_state)
            .unwrap_or_default()
    }

    fn counts(&self) -> ReplicaCounts {
        let mut counts = self.counts_before;
        if let Some(r) = self.replica() {
            let (c, e) = (r.counters(), r.exec_counters());
            counts += ReplicaCounts {
                executions: e.executions,
                ops: e.ops,
                accuracy_checked: c.accuracy_checked,
                accuracy_hits: c.accuracy_hits,
                conflicts: e.conflicts,
                invalidations: e.invalidations,
            };
        }
        counts
    }

    fn check_invariants(&self) -> Result<(), String> {
        match &self.node {
            Some(n) => n.check_invariants(),
            None => Ok(()),
        }
    }

    fn is_up(&self) -> bool {
        self.node.is_some()
    }

    /// Memory is gone, and with it everything not synced.
    fn crash(&mut self, torn: &mut dyn FnMut(usize) -> usize) {
        if self.node.is_none() {
            return;
        }
        self.counts_before = self.counts();
        self.transfers_before = self.transfers();
        self.node = None;
        let syncing = match self.syncing {
            Some(Syncing::Writes { count, .. }) => count,
            _ => 0,
        };
        self.disk_counts.unsynced_writes_lost += (self.queued.len() + syncing) as u64;
        self.queued.clear();
        if self
            .checkpoint
            .as_ref()
            .is_some_and(CheckpointWriter::is_writing)
        {
            self.disk_counts.checkpoints_cut += 1;
        }
        self.syncing = None;
        self.checkpoint = None;
        self.held.clear();
        self.outbox.clear();
        self.views.clear();
        self.mpo.clear();
        // The database goes first: nothing may write after the crash.
        if let Some(store) = self.store.take() {
            self.disk_counts.wal_folds += store.folds();
        }
        let loss = self.disk.crash(torn(self.disk.unsynced_changes()));
        self.disk_counts.torn_changes_kept += loss.changes_kept as u64;
    }

    fn restart(&mut self) -> Result<(), String> {
        if self.node.is_some() {
            return Ok(());
        }
        let loaded =
            creek_store::load_backend(self.disk.clone(), self.disk.wal(), self.voters.clone())
                .map_err(|e| format!("the disk does not open: {e}"))?;
        if loaded.recovered.repaired {
            self.disk_counts.repairs += 1;
        }
        let node = Node::recover(
            self.config.clone(),
            self.registry.clone(),
            loaded.storage,
            loaded.recovered.into(),
            sim_nonce(self.config.replica.id, self.disk_counts.wipes),
        )
        .map_err(|e| format!("recovery refused: {e}"))?;
        // What the simulator saw committed stays; the recovered list picks
        // up from its checkpoint.
        let base = node.replica().committed_len() - node.replica().committed().len() as u64;
        self.committed.truncate(base as usize);
        self.commit_times.truncate(base as usize);
        self.node = Some(node);
        self.store = Some(
            loaded
                .store
                .with_checkpoint_chunk_bytes(CHECKPOINT_CHUNK_BYTES)
                .with_wal_bytes(WAL_BYTES),
        );
        self.disk_counts.recoveries += 1;
        self.collect();
        Ok(())
    }

    fn disk_counts(&self) -> DiskCounts {
        let mut counts = self.disk_counts;
        counts.wal_folds += self.store.as_ref().map_or(0, Store::folds);
        if let Some(node) = &self.node {
            counts.log_entries = node.raft_log_entries();
            counts.log_compacted = node.cab().store().base().index;
        }
        counts
    }

    fn fail_next_sync(&mut self) {
        self.disk.fail_next_sync();
    }

    fn last_issued_seq(&self) -> Option<u64> {
        self.replica().map(Replica::last_issued_seq)
    }

    fn rebuilt_held_seq(&self) -> Option<u64> {
        self.node.as_ref().and_then(Node::rebuilt_held_seq)
    }

    fn has_unsynced(&self) -> bool {
        self.syncing.is_some() || !self.queued.is_empty() || self.checkpoint.is_some()
    }

    fn change_group(&mut self, change: MemberChange) -> Result<(), String> {
        let node = self.node.as_mut().ok_or("down")?;
        let addrs = matches!(change, MemberChange::AddLearner(_)).then(|| creek_core::Addrs {
            peer: format!("sim-peer-{}", change.replica()),
            client: format!("sim-client-{}", change.replica()),
        });
        let result = node.change_group(change, addrs).map_err(|e| e.to_string());
        self.collect();
        result
    }

    fn group_members(&self) -> Option<Vec<ReplicaId>> {
        self.node.as_ref().map(|n| n.group().members())
    }

    fn configure_group(&mut self, group: &[ReplicaId]) {
        let me = self.config.replica.id;
        let mut group = group.to_vec();
        group.push(me);
        group.sort_unstable();
        group.dedup();
        self.config.gossip.peers = group.iter().copied().filter(|r| *r != me).collect();
        self.voters = group.iter().map(|r| creek_cab::raft_id(*r)).collect();
        self.config.cab.replicas = group;
    }

    fn lose_disk(&mut self) {
        if self.node.is_some() {
            return;
        }
        self.disk = SimDisk::new();
        self.disk_counts.wipes += 1;
        // What it committed went with the disk: a replica that rejoins
        // empty (only ever told to) starts its committed list again.
        self.committed.clear();
        self.commit_times.clear();
        self.unseen_from = None;
    }

    fn is_lost(&self) -> bool {
        self.node
            .as_ref()
            .is_some_and(|n| matches!(n.standing(), Standing::Lost { .. }))
    }

    fn catching_up(&self) -> bool {
        self.node.as_ref().is_some_and(|n| n.catching_up())
    }

    fn debug(&self) -> String {
        match &self.node {
            Some(n) => n.stall_report(),
            None => "down".into(),
        }
    }

    fn is_member(&self) -> bool {
        self.node
            .as_ref()
            .is_some_and(|n| matches!(n.standing(), Standing::Member))
    }

    fn fill_unseen(&mut self, canonical: &[OpId]) {
        let Some(from) = self.unseen_from else {
            return;
        };
        let mut rest = None;
        for (pos, id) in self.committed.iter_mut().enumerate().skip(from) {
            if *id == UNSEEN {
                match canonical.get(pos) {
                    Some(c) => *id = *c,
                    None => {
                        rest = Some(pos);
                        break;
                    }
                }
            }
        }
        self.unseen_from = rest;
    }

    fn transfers(&self) -> creek_node::TransferStats {
        let mut t = self.transfers_before;
        if let Some(n) = &self.node {
            t += n.transfer_stats();
        }
        t
    }
}
