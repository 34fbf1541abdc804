//! What a run reports: traffic, counters over time, and the outcome the
//! checkers and benchmarks read.

use super::*;

/// Bytes on the wire by protocol.
#[derive(Clone, Copy, Debug, Default)]
pub struct Traffic {
    /// Gossip frame bytes.
    pub gossip_bytes: u64,
    /// CAB frame bytes (link probes included).
    pub cab_bytes: u64,
    /// Stable-time bytes: the reports within groups and the shards'
    /// publications to each other (docs/snapshot-reads.md).
    pub stable_bytes: u64,
}

/// The global stable time as the run went: per shard, each time the
/// largest any of its replicas knew grew, `(virtual time, global stable
/// time)`; and every tick, each shard's lag (its replicas' largest known
/// global stable time behind the virtual clock, µs).
#[derive(Clone, Debug, Default)]
pub struct StableSeen {
    /// Per shard, the growth of its replicas' largest known global time.
    pub global: Vec<Vec<(u64, u64)>>,
    /// Lag samples, µs.
    pub lag_us: Vec<u64>,
    /// Each replica's global stable time at the last tick, with the epoch
    /// (incarnation) it knew it in: a restart starts it over.
    pub last_known: BTreeMap<usize, (u64, u64)>,
    /// Every time a replica's known global stable time went back within
    /// one incarnation (at most 10).
    pub regressions: Vec<String>,
}

/// Cumulative counters over every replica at one moment, for measuring a
/// window of a run (differences of two readings).
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    /// Virtual time of the reading.
    pub at_us: u64,
    /// Every replica's counters, summed.
    pub counts: ReplicaCounts,
    /// Core-microseconds of executions started.
    pub busy_us: u64,
    /// Bytes on the wire.
    pub traffic: Traffic,
}

impl Totals {
    /// `self − earlier`, field by field (`at_us` stays `self`'s).
    pub fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            at_us: self.at_us,
            counts: self.counts.since(&earlier.counts),
            busy_us: self.busy_us - earlier.busy_us,
            traffic: Traffic {
                gossip_bytes: self.traffic.gossip_bytes - earlier.traffic.gossip_bytes,
                cab_bytes: self.traffic.cab_bytes - earlier.traffic.cab_bytes,
                stable_bytes: self.traffic.stable_bytes - earlier.traffic.stable_bytes,
            },
        }
    }
}

/// Readings of [`Totals`] at the end of the warm-up, when the clients stop
/// and when the run settled.
#[derive(Clone, Copy, Debug, Default)]
pub struct Readings {
    /// At the end of the warm-up (all zero without one).
    pub warmup: Totals,
    /// When the clients stopped.
    pub end: Totals,
    /// When the run ended (settled or out of time).
    pub finish: Totals,
}

/// What a run produced, for the checkers and the report.
pub struct Outcome {
    /// What clients saw.
    pub history: History,
    /// Every op seen on the wire, by id.
    pub ops: BTreeMap<OpId, Arc<Op>>,
    /// The final replicas (all up after a run that settled).
    pub nodes: Vec<Box<dyn SimReplica>>,
    /// Whether each replica is in the group at the end (false for a spare
    /// never added, and for a removed replica).
    pub members: Vec<bool>,
    /// A violation of the committed-prefix property seen during the run,
    /// with the shard it happened in.
    pub prefix_violation: Option<(usize, String)>,
    /// Faults injected.
    pub faults: FaultCounts,
    /// Bytes on the wire.
    pub traffic: Traffic,
    /// The stable times seen (docs/snapshot-reads.md).
    pub stable: StableSeen,
    /// What closed-loop clients returned for their snapshot `kv.get`s (a
    /// cached write of theirs laid over the view, or the view's result).
    pub client_reads: super::cache::ClientReads,
    /// The request ids of each read across shards' parts.
    pub split_reads: super::split::SplitReads,
    /// Hash of the sequence of processed events and the final orders.
    pub trace_hash: u64,
    /// The registry the replicas ran.
    pub registry: Arc<Registry>,
    /// Virtual time clients ran.
    pub duration_us: u64,
    /// Whether the cluster converged before the time limit.
    pub settled: bool,
    /// How long after the clients stopped (every fault healed, every
    /// replica restarted) the cluster settled.
    pub settled_after_us: Option<u64>,
    /// The liveness bound: a settled run must settle within this long after
    /// the faults healed ([`liveness_bound_us`]).
    pub liveness_bound_us: u64,
    /// The workload (for its checker).
    pub workload: Box<dyn Workload>,
    /// Counter readings for measuring the window after the warm-up.
    pub readings: Readings,
    /// Whether the replicas started from the workload's preloaded state
    /// (a replay of the committed order then starts from that state).
    pub preloaded: bool,
    /// The map the cluster was formed with.
    pub map: Arc<ShardMap>,
    /// The map the directory ended with (the formation map without a
    /// directory): where each key lives at the end.
    pub final_map: Arc<ShardMap>,
    /// Every map the directory held while keys moved (empty without
    /// moves).
    pub move_maps: Vec<Arc<ShardMap>>,
    /// How each move of keys ended.
    pub moves_ended: Vec<creek_procs::moves::mover::Progress>,
    /// When each move of keys reached its steps.
    pub move_times: Vec<super::moves::MoveTimes>,
    /// Slots per group: shard `s`'s replicas are `nodes[s * per_shard ..]`,
    /// then the directory's.
    pub per_shard: usize,
    /// A sharded run's directory.
    pub directory: Option<DirectoryEnd>,
    /// The calls shards' MPO copies ran at their committed positions (with
    /// their inputs, or as no-ops), by op id: what a replay of a shard's
    /// committed order runs for them.
    pub mpo_calls: BTreeMap<OpId, ProcCall>,
    /// Replicas of one shard that handed out different reads for an MPO.
    pub mpo_violations: Vec<String>,
    /// Ops answered as durable ([`creek_node::AnswerAfter`]), then lost
    /// where that said they could not be.
    pub durability_violations: Vec<String>,
}

/// What a sharded run's directory ended with, for its checks.
pub struct DirectoryEnd {
    /// The operator's ops (reading, forming and changing the map), each
    /// naming its replica within the directory group.
    pub history: History,
    /// The directory's replicas: `nodes[slots]`.
    pub slots: std::ops::Range<usize>,
    /// The registry its replicas ran.
    pub registry: Arc<Registry>,
    /// Maps a replica or client was handed that could not follow the one
    /// it held (an older epoch, another cluster, keys given another owner).
    pub violations: Vec<String>,
    /// Where the directory had not settled when the run ended (empty when
    /// it had): the map not listing the groups as they are, replicas
    /// serving under an older map.
    pub lag: Vec<String>,
    /// The epoch of the map the directory holds at the end (0: none).
    pub epoch: u64,
}

impl Outcome {
    /// How many shard groups the run had (those of its maps, a shard
    /// added or dropped while it ran included).
    pub fn shard_groups(&self) -> usize {
        self.directory
            .as_ref()
            .map_or(1, |d| d.slots.start / self.per_shard)
    }

    /// The slots of shard `s`'s replicas.
    pub fn shard_slots(&self, s: usize) -> std::ops::Range<usize> {
        s * self.per_shard..(s + 1) * self.per_shard
    }

    /// The ops invoked at shard `s`'s replicas, each naming its replica
    /// within the shard (as a run of one group would): what the shard's
    /// checks judge.
    pub fn shard_history(&self, s: usize) -> History {
        let slots = self.shard_slots(s);
        History {
            ops: self
                .history
                .ops
                .iter()
                .filter(|r| slots.contains(&r.replica))
                .map(|r| OpRecord {
                    replica: r.replica - slots.start,
                    ..r.clone()
                })
                .collect(),
        }
    }
}

impl Sim {
    /// The ops answered as durable ([`creek_node::AnswerAfter`]), and
    /// those of them the end state contradicts: once the run settled,
    /// every op answered after a majority held it is in the committed
    /// order, and so is every op answered after its replica's own write,
    /// unless that replica lost its disk.
    fn durability_violations(&self, settled: bool) -> (u64, Vec<String>) {
        let committed: BTreeSet<OpId> = self.canonical.iter().flatten().copied().collect();
        let mut answered = 0;
        let mut out = Vec::new();
        for (&index, &(after, id)) in &self.durable_asked {
            let r = &self.history.ops[index];
            if !r
                .views
                .iter()
                .any(|v| v.kind == creek_core::ViewKind::Tentative)
            {
                continue;
            }
            answered += 1;
            let promised = match after {
                creek_node::AnswerAfter::Majority => true,
                creek_node::AnswerAfter::Local => !self.disks_lost.contains(&r.replica),
                creek_node::AnswerAfter::Execution => false,
            };
            if settled && promised && !committed.contains(&id) {
                out.push(format!(
                    "{id} ({}) was answered once {after:?} held it, but is not in the committed order",
                    r.call.name
                ));
            }
        }
        (answered, out)
    }

    /// The counters now, summed over every replica (up or down).
    pub(super) fn totals(&self) -> Totals {
        let mut t = Totals {
            at_us: self.now,
            traffic: self.traffic,
            ..Totals::default()
        };
        for n in &self.nodes {
            t.counts += n.node.counts();
            t.busy_us += n.busy_us;
        }
        t
    }

    pub(super) fn finish(mut self, settled: bool) -> Outcome {
        if debug_log() {
            for (i, n) in self.nodes.iter().enumerate() {
                eprintln!("replica {i}: {}", n.node.debug());
            }
        }
        self.readings.finish = self.totals();
        let ids: Vec<OpId> = self.canonical.concat();
        for id in &ids {
            self.hash(u64::from(id.origin.0) << 48 ^ id.seq);
        }
        let members = self.in_group();
        let lag = self.directory_lag(&members);
        let epoch = self.directory_epoch(&members);
        let final_map = self
            .directory_map(&members)
            .unwrap_or_else(|| self.map.clone());
        let mut move_maps = std::mem::take(&mut self.moves.maps);
        if self.cfg.moves > 0 {
            move_maps.push(final_map.clone());
        }
        let moves_ended = std::mem::take(&mut self.moves.ended);
        let move_times = std::mem::take(&mut self.moves.timeline);
        let directory_slots = self.directory_group().map(|g| self.group_slots(g));
        // The operator's ops are the directory's history, not the
        // workload's.
        let (operator, ops): (Vec<OpRecord>, Vec<OpRecord>) = std::mem::take(&mut self.history.ops)
            .into_iter()
            .partition(|r| {
                r.client == OPERATOR_CLIENT
                    || super::mpo::is_sequencer(r.client)
                    || (super::moves::is_mover(r.client)
                        && directory_slots
                            .as_ref()
                            .is_some_and(|d| d.contains(&r.replica)))
            });
        self.history.ops = ops;
        let directory = self.dir.take().map(|dir| {
            let g = self.cfg.shards;
            let slots = g * self.per_shard..(g + 1) * self.per_shard;
            DirectoryEnd {
                history: History {
                    ops: operator
                        .into_iter()
                        .map(|r| OpRecord {
                            replica: r.replica - slots.start,
                            ..r
                        })
                        .collect(),
                },
                slots,
                registry: dir.registry,
                violations: dir.violations,
                lag,
                epoch,
            }
        });
        let mut mpo_calls = BTreeMap::new();
        for s in 0..self.cfg.shards {
            mpo_calls.extend(self.mpo_replay_calls(s, &self.canonical[s]));
        }
        for (k, n) in [
            ("mpo_started", self.mpo.started),
            ("mpo_completed", self.mpo.completed),
        ] {
            if n > 0 {
                self.faults.insert(k, n);
            }
        }
        let mpo_violations = std::mem::take(&mut self.mpo.violations);
        let (durable_answered, durability_violations) = self.durability_violations(settled);
        if durable_answered > 0 {
            self.faults
                .insert("durable_weak_answered", durable_answered);
        }
        let nodes = self.nodes.into_iter().map(|n| n.node).collect();
        let settled_after_us = settled.then(|| self.now - self.cfg.duration_us);
        // What client sessions did: expiry ops ordered, late copies refused.
        let expiries = self
            .ops
            .values()
            .filter(|op| &*op.call.name == creek_procs::session::EXPIRE)
            .count() as u64;
        let count = |name: &str| {
            self.ops
                .values()
                .filter(|op| &*op.call.name == name)
                .count() as u64
        };
        let lease_expiries = count(creek_procs::builtins::lease::EXPIRE);
        let lease_extensions = count(creek_procs::builtins::lease::EXTEND);
        let voids = self
            .ops
            .values()
            .filter(|op| &*op.call.name == creek_procs::void::VOID)
            .count() as u64;
        let refused_expired = |r: &OpRecord| {
            r.views.iter().any(|v| {
                v.kind.is_final()
                    && v.outcome
                        .as_ref()
                        .is_err_and(|a| a.0.starts_with(creek_procs::session::SESSION_EXPIRED))
            })
        };
        let refused = self
            .history
            .ops
            .iter()
            .filter(|r| refused_expired(r))
            .count() as u64;
        // Lost ops never took effect, nor did ops refused as expired (a sim
        // client sends each request once, so no copy of them ran): the
        // checkers judge what remains.
        let removed: Vec<usize> = (0..self.history.ops.len())
            .filter(|&i| self.history.ops[i].lost || refused_expired(&self.history.ops[i]))
            .collect();
        super::cache::forget_reads_over(&self.history, &mut self.client_reads, &removed);
        self.history.ops.retain(|r| !r.lost && !refused_expired(r));
        for (k, n) in [
            ("session_expiry_ops", expiries),
            ("session_refused", refused),
            ("void_ops", voids),
            ("lease_expiry_ops", lease_expiries),
            ("lease_extend_ops", lease_extensions),
        ] {
            if n > 0 {
                self.faults.insert(k, n);
            }
        }
        Outcome {
            settled_after_us,
            liveness_bound_us: liveness_bound_us(self.net.latency_max_us()),
            history: self.history,
            ops: self.ops,
            nodes,
            members,
            prefix_violation: self.prefix_violation,
            faults: self.faults,
            traffic: self.traffic,
            stable: self.stable,
            client_reads: self.client_reads,
            split_reads: self.split_reads,
            trace_hash: self.trace,
            registry: self.registry,
            duration_us: self.cfg.duration_us,
            settled,
            workload: self.workload,
            readings: self.readings,
            preloaded: self.preloaded,
            map: self.map,
            final_map,
            move_maps,
            moves_ended,
            move_times,
            per_shard: self.per_shard,
            directory,
            mpo_calls,
            mpo_violations,
            durability_violations,
        }
    }
}
