//! Building a simulation: replicas, clients, links and the preloaded state from a validated configuration.

use super::*;

impl Sim {
    /// Build a simulation; `workload` must already be chosen.
    pub fn new(cfg: SimConfig, workload: Box<dyn Workload>) -> Result<Self, String> {
        cfg.validate()?;
        let mut registry = Registry::with_builtins();
        workload.register(&mut registry);
        let registry = Arc::new(registry);
        let mut rng = Rng::new(cfg.seed);
        // A bulk-loaded initial state, as if every replica were restored
        // from the same backup: the checkpoint of an empty history.
        let preload = workload.preload();
        let preloaded = !preload.is_empty();
        let initial_state = if cfg.check_invariants {
            preload.iter().cloned().collect()
        } else {
            BTreeMap::new()
        };
        let initial = preloaded.then(|| Checkpoint {
            state: preload,
            ..Checkpoint::default()
        });
        let ids: Vec<ReplicaId> = (1..=cfg.replicas as u16).map(ReplicaId).collect();
        let voters: Vec<u64> = ids.iter().map(|r| u64::from(r.0) + 1).collect();
        let spares = if cfg.faults.members && cfg.protocol == Protocol::Creek {
            SPARES
        } else {
            0
        };
        let slots = cfg.replicas + spares;
        let mut nodes = Vec::new();
        let durable_initial = cfg.faults.crashes();
        for me in (1..=slots as u16).map(ReplicaId) {
            let spare = !ids.contains(&me);
            let group: Vec<ReplicaId> = ids.iter().copied().chain(spare.then_some(me)).collect();
            let (config, setup) = node_config(&cfg, me, &group);
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
                disk_wake_at: None,
                next_invariants_at: 0,
            });
        }
        let (net, faults) = network(&cfg, slots, &mut rng);
        let clients = (0..cfg.clients)
            .map(|c| Client {
                replica: c % cfg.replicas,
                pending: None,
                seq: 0,
                acks: Vec::new(),
            })
            .collect();
        Ok(Sim {
            checked_len: vec![0; slots],
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
            canonical: Vec::new(),
            prefix_violation: None,
            trace: 0xCBF2_9CE4_8422_2325,
            faults,
            traffic: Traffic::default(),
            running_clients: true,
            setup_pending: 0,
            setup_backlog: VecDeque::new(),
            ended: false,
            next_state_check: 0,
            readings: Readings::default(),
            preloaded,
            initial_state,
            progress: None,
        })
    }
}

/// A Creek node's configuration in the simulator, and its simulated disk's
/// setup (planted bugs included).
fn node_config(cfg: &SimConfig, me: ReplicaId, group: &[ReplicaId]) -> (NodeConfig, DiskSetup) {
    let mut config = NodeConfig::for_group(me, group);
    config.replica.schedule = cfg.schedule;
    config.replica.session_ttl_us = cfg.session_ttl_us;
    config.tick_us = cfg.tick_us;
    if cfg.faults.crashes() && cfg.checkpoint_every_us > 0 {
        config.checkpoint_every_ticks = (cfg.checkpoint_every_us / cfg.tick_us).max(1);
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
