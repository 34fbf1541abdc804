//! Building a simulation: replicas, clients, links and the preloaded state from a validated configuration.

use super::*;

impl Sim {
    /// Build a simulation; `workload` must already be chosen.
    pub fn new(cfg: SimConfig, mut workload: Box<dyn Workload>) -> Result<Self, String> {
        cfg.validate()?;
        let mut registry = Registry::with_builtins();
        workload.register(&mut registry);
        if let Some(bug) = cfg.plant_bug {
            let mut planted = creek_types::planted::PlantedBugs::NONE;
            if planted.plant(bug).is_ok() {
                registry.plant(planted);
            }
        }
        let registry = Arc::new(registry);
        // A sharded cluster has a directory group too: group `shards`,
        // after the shards' slots (docs/shards.md, "The directory").
        let directory = cfg.shards > 1;
        let groups = cfg.shards + usize::from(directory);
        let dir_registry = Arc::new({
            let mut r = Registry::with_builtins();
            creek_procs::builtins::directory::register(&mut r);
            r
        });
        let mut rng = Rng::new(cfg.seed);
        let spares = if cfg.faults.members && cfg.protocol == Protocol::Creek {
            SPARES
        } else {
            0
        };
        // Shard `s` holds slots `s * per_shard ..`: its replicas, then its
        // spares. A slot's replica id is its index + 1, unique across the
        // cluster, as the directory hands them out.
        let per_shard = cfg.replicas + spares;
        let slots = per_shard * groups;
        let map = shard_map(&cfg, per_shard, workload.as_mut())?;
        // A bulk-loaded initial state, as if every replica were restored
        // from the same backup: the checkpoint of an empty history, each
        // shard's holding the records it owns.
        let preload = workload.preload();
        let preloaded = !preload.is_empty();
        let mut preloads: Vec<Vec<(Bytes, Bytes)>> = (0..cfg.shards)
            .map(|s| {
                preload
                    .iter()
                    .filter(|(k, _)| {
                        cfg.shards == 1
                            || workload.record_route(k).is_none_or(|(ks, key)| {
                                map.owner(ks.as_deref(), &key).0 == s as u16
                            })
                    })
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .map(|mut records| {
                // A checkpoint's state is in key order (the store refuses
                // one that is not, as a restart from it would).
                records.sort_by(|a, b| a.0.cmp(&b.0));
                records
            })
            .collect();
        // The directory's state starts empty: the operator forms it.
        if directory {
            preloads.push(Vec::new());
        }
        let initial_states = preloads
            .iter()
            .map(|p| {
                if cfg.check_invariants {
                    p.iter().cloned().collect()
                } else {
                    BTreeMap::new()
                }
            })
            .collect();
        let mut nodes = Vec::new();
        let durable_initial = cfg.faults.crashes();
        for (group, preload) in preloads.into_iter().enumerate() {
            let base = group * per_shard;
            let is_directory = group == cfg.shards;
            let registry = if is_directory {
                &dir_registry
            } else {
                &registry
            };
            let initial = (preloaded && !is_directory).then(|| Checkpoint {
                state: preload,
                ..Checkpoint::default()
            });
            let ids: Vec<ReplicaId> = (1..=cfg.replicas)
                .map(|k| ReplicaId((base + k) as u16))
                .collect();
            let voters: Vec<u64> = ids.iter().map(|r| u64::from(r.0) + 1).collect();
            for me in (1..=per_shard).map(|k| ReplicaId((base + k) as u16)) {
                let spare = !ids.contains(&me);
                let group: Vec<ReplicaId> =
                    ids.iter().copied().chain(spare.then_some(me)).collect();
                let (mut config, setup) = node_config(&cfg, me, &group);
                if cfg.shards > 1 && !is_directory {
                    config.stable.shard = Some((base / per_shard) as u32);
                    config.stable.shards = (0..cfg.shards as u32).collect();
                }
                let storage = MemCabStorage::new(voters.clone());
                let node: Box<dyn SimReplica> = match cfg.protocol {
                    Protocol::Creek if spare => {
                        Box::new(CreekReplica::spare(config, registry.clone(), setup))
                    }
                    Protocol::Creek => Box::new(CreekReplica::new(
                        config,
                        registry.clone(),
                        setup,
                        initial.clone(),
                        durable_initial,
                    )?),
                    baseline => Box::new(BaselineNode::new(
                        baseline,
                        me,
                        config.gossip,
                        config.cab,
                        storage,
                        registry.clone(),
                        initial
                            .as_ref()
                            .map(|c| c.state.clone())
                            .unwrap_or_default(),
                        cfg.archie_window,
                        cfg.schedule,
                    )?),
                };
                let (offset, drift) = if cfg.faults.clock {
                    (
                        rng.range(0, 100_000) as i64 - 50_000,
                        rng.range(0, 2_000) as i64 - 1_000,
                    )
                } else {
                    (0, 0)
                };
                nodes.push(SimNode {
                    node,
                    busy_cores: 0,
                    busy_us: 0,
                    epoch: 0,
                    clock_offset_us: offset,
                    wiped: false,
                    stalled_until: 0,
                    slot: if spare { Slot::Spare } else { Slot::Member },
                    clock_drift_ppm: drift,
                    handles: BTreeMap::new(),
                    installed: 0,
                    disk_wake_at: None,
                    next_invariants_at: 0,
                    loop_free_at: 0,
                });
            }
        }
        let (net, faults) = network(&cfg, slots, &mut rng);
        let map = Arc::new(map);
        let clients = (0..cfg.clients)
            .map(|c| Client {
                replicas: (0..cfg.shards)
                    .map(|s| s * per_shard + c % cfg.replicas)
                    .collect(),
                pending: None,
                seq: 0,
                acks: Vec::new(),
                map: map.clone(),
                refresh: false,
                times: super::cache::ClientTimes::new(cfg.shards),
                split: None,
            })
            .collect();
        let canonical = vec![Vec::new(); groups];
        let moves = moves::Moves::new(spare_shard(&cfg), cfg.shards >= 3);
        let mut sim = Sim {
            checked_len: vec![0; slots],
            per_shard,
            groups,
            dir: directory.then(|| Dir::new(dir_registry, &map, slots)),
            map,
            cfg,
            registry,
            workload,
            rng,
            now: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            seq: 0,
            nodes,
            net,
            clients,
            history: History::default(),
            ops: BTreeMap::new(),
            lost_ids: BTreeSet::new(),
            answer_after_next: creek_node::AnswerAfter::Execution,
            durable_asked: BTreeMap::new(),
            disks_lost: BTreeSet::new(),
            canonical,
            prefix_violation: None,
            trace: 0xCBF2_9CE4_8422_2325,
            faults,
            traffic: Traffic::default(),
            stable: Default::default(),
            client_reads: Default::default(),
            split_reads: Vec::new(),
            running_clients: true,
            setup_pending: 0,
            setup_backlog: VecDeque::new(),
            ended: false,
            next_state_check: 0,
            readings: Readings::default(),
            preloaded,
            initial_states,
            progress: None,
            mpo: mpo::MpoState::default(),
            moves,
        };
        sim.setup_backlog = sim.setup_calls()?;
        Ok(sim)
    }

    /// The workload's setup calls, strong, each at the first replica of
    /// the shard owning its keys; a call without keys (a procedure or
    /// keyspace definition) runs on every shard, as an administrative
    /// operation does. A call whose keys span shards cannot run.
    fn setup_calls(&self) -> Result<VecDeque<(usize, Request)>, String> {
        let mut out = VecDeque::new();
        for call in self.workload.setup() {
            let shards = match self.route(&self.map, &call) {
                Ok(s) => vec![s],
                Err(creek_shard::RouteError::NoKeys) => (0..self.cfg.shards).collect(),
                Err(e) => return Err(format!("setup call {}: {e}", call.name)),
            };
            for s in shards {
                let request = Request {
                    call: call.clone(),
                    strong: true,
                    views: Views::BOTH,
                    read_time: 0,
                    read_exact: false,
                    read_revision: None,
                };
                out.push_back((s * self.per_shard, request));
            }
        }
        Ok(out)
    }
}

/// The shard a run with moves adds while it runs (its group starts
/// outside the map): the last, on three shards or more.
pub(super) fn spare_shard(cfg: &SimConfig) -> Option<ShardId> {
    (cfg.moves > 0 && cfg.shards >= 3).then(|| ShardId(cfg.shards as u16 - 1))
}

/// The cluster's map: one shard per group, slots hashed evenly over them,
/// every shard listing its initial replicas; on a sharded cluster the
/// workload adds the placements its data needs (or refuses to run).
fn shard_map(
    cfg: &SimConfig,
    per_shard: usize,
    workload: &mut dyn Workload,
) -> Result<ShardMap, String> {
    // With moves on three shards or more, the last one starts outside the
    // map, a spare the run adds while it moves keys (`moves.rs`).
    let formed = cfg.shards - usize::from(spare_shard(cfg).is_some());
    let ids: Vec<ShardId> = (0..formed as u16).map(ShardId).collect();
    let mut map = ShardMap::hashed(cfg.seed, &ids);
    for (s, shard) in map.shards.values_mut().enumerate() {
        for k in 1..=cfg.replicas {
            let id = (s * per_shard + k) as u16;
            shard.replicas.insert(id, creek_shard::Endpoint::default());
        }
    }
    if cfg.shards > 1 {
        let base = cfg.shards * per_shard;
        for k in 1..=cfg.replicas {
            let id = (base + k) as u16;
            map.directory
                .replicas
                .insert(id, creek_shard::Endpoint::default());
        }
        workload
            .place(&mut map)
            .map_err(|e| format!("workload {} on {} shards: {e}", workload.name(), cfg.shards))?;
        // The cluster is formed with the workload's placements: its first
        // map (the directory's first has epoch 1).
        map.epoch = 1;
    }
    map.validate().map_err(|e| e.to_string())?;
    Ok(map)
}

/// A Creek node's configuration in the simulator, and its simulated disk's
/// setup (planted bugs included).
fn node_config(cfg: &SimConfig, me: ReplicaId, group: &[ReplicaId]) -> (NodeConfig, DiskSetup) {
    let mut config = NodeConfig::for_group(me, group);
    config.replica.schedule = cfg.schedule;
    config.replica.session_ttl_us = cfg.session_ttl_us;
    config.replica.mpo_order = cfg.mpo_order;
    config.tick_us = cfg.tick_us;
    config.stable.every_us = cfg.stable_every_us;
    if cfg.faults.crashes() && cfg.checkpoint_every_us > 0 {
        config.checkpoint_every_ticks = (cfg.checkpoint_every_us / cfg.tick_us).max(1);
        config.checkpoint_rewrite_ratio = creek_node::CHECKPOINT_REWRITE_RATIO;
    }
    // Low enough that a stalled disk makes the node push back.
    config.pending_writes_max = SIM_PENDING_WRITES_MAX;
    // Low enough that a replica down for a while is compacted past
    // and catches up by state transfer.
    config.cab.compaction_lag_max = SIM_COMPACTION_LAG_MAX;
    let setup = DiskSetup {
        linger_us: cfg.linger_us,
    };
    if let Some(bug) = cfg.plant_bug {
        // One place for every planted bug, the disk's included; the node
        // hands it down to the rooms that read it.
        let planted = config.planted.plant(bug);
        assert!(
            planted.is_ok(),
            "SimConfig::validate refuses a planted bug this build cannot plant"
        );
    }
    (config, setup)
}

/// The modelled network (LAN, or wide-area links drawn from `rng`) and the
/// faults it carries for the whole run.
fn network(cfg: &SimConfig, slots: usize, rng: &mut Rng) -> (Network, FaultCounts) {
    let mut net = match cfg.links {
        Links::Lan => Network::new(slots, cfg.latency_us, cfg.bandwidth_bps),
        Links::Wan => {
            let n = slots;
            let (lo, hi) = WAN_ONE_WAY_US;
            let links = (0..n * n)
                .map(|_| {
                    let base = rng.range(lo, hi);
                    let jitter = base * WAN_JITTER_PERCENT / 100;
                    (base - jitter, base + jitter)
                })
                .collect();
            Network::with_links(n, links, cfg.bandwidth_bps)
        }
    };
    let mut faults = FaultCounts::new();
    if cfg.faults.loss {
        net.loss = 0.02;
        net.duplicate = 0.01;
        net.reorder = 0.05;
        faults.insert("loss", 1);
    }
    if cfg.faults.clock {
        faults.insert("clock_skew", 1);
    }
    (net, faults)
}
