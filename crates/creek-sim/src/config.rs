//! Simulation settings: `Default` + `validate`, and the fault classes.

use std::collections::BTreeMap;

/// Fault classes that can be switched on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Network partitions (isolate one, majority/minority, ring, asymmetric,
    /// starved of payloads, flapping).
    pub partition: bool,
    /// Replica crashes and restarts.
    pub crash: bool,
    /// Clock offsets, drift and backward jumps.
    pub clock: bool,
    /// Message loss, duplication and reordering.
    pub loss: bool,
    /// Disk faults: a crash while writes are not yet synced (they are lost),
    /// a torn last write, an fsync that fails (the replica stops).
    pub disk: bool,
    /// Disk loss: a crashed replica comes back with an empty disk and is
    /// rebuilt from a peer's checkpoint; at most this many replicas at a
    /// time (`wipe`: 1, `wipe2`: 2), never a majority (the loss of a
    /// majority is tested over real processes).
    pub wipes: u8,
    /// Membership changes: a new replica is added (it joins as a learner
    /// through state transfer and is promoted), a member is removed (the
    /// leader too: it hands over first), one change at a time, the group
    /// moving between its initial size and one more.
    pub members: bool,
}

impl Faults {
    /// Parse `partition,crash,clock,loss,disk`, `all` or `none`.
    pub fn parse(s: &str) -> Result<Faults, String> {
        let mut f = Faults::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "all" => {
                    f = Faults {
                        partition: true,
                        crash: true,
                        clock: true,
                        loss: true,
                        disk: true,
                        wipes: 1,
                        members: true,
                    }
                }
                "none" => f = Faults::default(),
                "partition" => f.partition = true,
                "crash" => f.crash = true,
                "clock" => f.clock = true,
                "loss" => f.loss = true,
                "disk" => f.disk = true,
                "wipe" => f.wipes = f.wipes.max(1),
                "wipe2" => f.wipes = 2,
                "member" => f.members = true,
                other => {
                    return Err(format!(
                        "unknown fault class {other:?} (partition, crash, clock, loss, disk, wipe, wipe2, member, all, none)"
                    ))
                }
            }
        }
        Ok(f)
    }

    /// Whether any class is on.
    pub fn any(&self) -> bool {
        self.partition
            || self.crash
            || self.clock
            || self.loss
            || self.disk
            || self.wipes > 0
            || self.members
    }

    /// Whether a replica can go down (and come back through recovery).
    pub fn crashes(&self) -> bool {
        self.crash || self.disk || self.wipes > 0 || self.members
    }
}

/// A protocol bug planted on purpose to show the checkers can fail (the one
/// list of them, `creek_types::planted`). Never for production.
pub use creek_types::planted::Bug as PlantedBug;

/// The links between replicas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Links {
    /// Every link's one-way latency in `SimConfig::latency_us`.
    #[default]
    Lan,
    /// Wide-area links: each directed link draws its own one-way latency in
    /// [`WAN_ONE_WAY_US`] (so `a → b` and `b → a` differ), and each message
    /// varies within ±[`WAN_JITTER_PERCENT`] of it.
    Wan,
}

/// The range a wide-area link's one-way latency is drawn from (µs).
pub const WAN_ONE_WAY_US: (u64, u64) = (10_000, 150_000);

/// A wide-area message's latency varies by up to this much of its link's.
pub const WAN_JITTER_PERCENT: u64 = 10;

impl Links {
    /// Parse `lan` or `wan`.
    pub fn parse(s: &str) -> Result<Links, String> {
        match s {
            "lan" => Ok(Links::Lan),
            "wan" => Ok(Links::Wan),
            other => Err(format!("unknown link profile {other:?}; one of lan, wan")),
        }
    }

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Links::Lan => "lan",
            Links::Wan => "wan",
        }
    }
}

/// The replication protocol the simulated replicas run (DESIGN §10): Creek,
/// or one of the baselines it is measured against, all on the same network,
/// CPU model, store and workloads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Creek (`creek_node::Node`).
    #[default]
    Creek,
    /// State machine replication: total-order broadcast of whole ops,
    /// sequential execution after delivery, one response.
    Smr,
    /// Bayou: speculative sequential execution in timestamp order, final
    /// order by a primary, rollback and redo through the undo log.
    Bayou,
    /// Archie: optimistic atomic broadcast (the leader's order is the
    /// optimistic one), speculative concurrent multiversion execution from
    /// optimistic delivery, responses after final delivery.
    Archie,
}

impl Protocol {
    /// Every protocol with its command-line name.
    pub const ALL: [(&'static str, Protocol); 4] = [
        ("creek", Protocol::Creek),
        ("smr", Protocol::Smr),
        ("bayou", Protocol::Bayou),
        ("archie", Protocol::Archie),
    ];

    /// Parse a command-line name.
    pub fn parse(s: &str) -> Result<Protocol, String> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, p)| *p)
            .ok_or_else(|| format!("unknown protocol {s:?}; one of creek, smr, bayou, archie"))
    }

    /// The command-line name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("creek", |(n, _)| n)
    }
}

/// Most shards a simulated cluster has (replica ids stay below 256 with
/// spares).
pub const MAX_SHARDS: usize = 16;

/// Everything a run depends on; a run is a function of this value.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The protocol the replicas run.
    pub protocol: Protocol,
    /// Archie's bound on speculation: an op starts executing only while
    /// fewer than this many ops precede it among the optimistically
    /// delivered, not yet committed ones.
    pub archie_window: usize,
    /// How the multiversion executor (Creek's and Archie's) picks its next
    /// execution; the default is what the server runs.
    pub schedule: creek_exec::mvcc::Schedule,
    /// Replicas (3..=9) of each shard.
    pub replicas: usize,
    /// Shards (1..=16), each a group of `replicas` replicas owning the keys
    /// a hashed map gives it (and the placements the workload adds);
    /// clients send each op to a replica of the shard owning its keys.
    pub shards: usize,
    /// On a sharded cluster, the share of the workload's multi-key ops
    /// (bank transfers) whose keys the generator puts on two shards: each
    /// is an operation across shards (docs/cross-shard.md). 0: every op
    /// stays on one shard.
    pub cross_shard: f64,
    /// How MPOs are ordered: the directory's sequencer (what servers run)
    /// or a genuine atomic multicast among their shards (measured against
    /// it; runs without crashes, disk faults, partitions or membership
    /// changes: a replica rebuilt from a checkpoint would not carry its
    /// ordering state).
    pub mpo_order: creek_core::MpoOrder,
    /// On a sharded cluster, how many moves of keys between shards run
    /// one after another while the clients run (the reshard fault class,
    /// `sim/moves.rs`); 0: none.
    pub moves: usize,
    /// The share of the workload's read-only ops a session issues at the
    /// snapshot level (docs/snapshot-reads.md), each to a random replica
    /// of its shard with the session's read time: a weak one with its
    /// snapshot view alone, a strong one with all three views. 0: none.
    pub snapshot_reads: f64,
    /// The share of a session's weak ops that ask for their preliminary
    /// view only once durable (docs/api.md, "Durable weak writes"): half
    /// of them after the replica's own write, half once a majority holds
    /// them; the run then checks that none of them is lost where that
    /// promise says it cannot be. 0: none.
    pub durable_weak: f64,
    /// Stable times (docs/snapshot-reads.md): every replica reports its
    /// applied time to its group and a shard's leader publishes its
    /// shard's stable time this often, and an idle leader commits a clock
    /// no-op (µs); 0: off.
    pub stable_every_us: u64,
    /// Cores per replica.
    pub cores: usize,
    /// PRNG seed.
    pub seed: u64,
    /// Workload name (`kv`, `bank`, `list`, `queue`, `tpcc`).
    pub workload: String,
    /// Virtual time clients run, microseconds.
    pub duration_us: u64,
    /// Virtual time at the start excluded from the measurements (ops
    /// invoked earlier are not measured; counters are read from here on).
    pub warmup_us: u64,
    /// Closed-loop client sessions (spread over the replicas); may be 0
    /// with an open-loop rate.
    pub clients: usize,
    /// Pause between a session's ops, microseconds.
    pub think_us: u64,
    /// A session goes on after a weak op's first view even when it also
    /// asked for the final one (which it still records): how applications
    /// use Correctables, and what benchmarks measure. Off for checking, where
    /// a session waits for every view it asked for.
    pub weak_answer_on_preliminary: bool,
    /// Open-loop arrivals (ops per second, Poisson, each at a random
    /// replica, independent of answers) on top of the sessions; 0 = none.
    pub open_rate_per_sec: f64,
    /// One-way link latency, uniform in `[min, max]` microseconds (on a
    /// LAN; see [`Links`]).
    pub latency_us: (u64, u64),
    /// The link profile.
    pub links: Links,
    /// Link bandwidth, bits per second (serialization delay by frame size).
    pub bandwidth_bps: u64,
    /// Fault classes.
    pub faults: Faults,
    /// Execution cost per procedure name, microseconds; others cost
    /// `default_cost_us`.
    pub cost_us: BTreeMap<String, u64>,
    /// Cost of procedures not in `cost_us`.
    pub default_cost_us: u64,
    /// Interval between replica ticks.
    pub tick_us: u64,
    /// How long one fsync of the simulated disk takes, uniform in
    /// `[min, max]` microseconds (Creek only: its replicas write through
    /// `creek-store` onto a simulated disk; the baselines keep state in
    /// memory).
    pub fsync_us: (u64, u64),
    /// How long a replica's disk waits to gather more when only payloads
    /// are queued (the server's persister lingers `creek_store::LINGER_US`).
    pub linger_us: u64,
    /// Every this much virtual time, a replica checkpoints its committed
    /// state into its write (only in runs where replicas can crash: a
    /// checkpoint matters only to a recovery); 0: never.
    pub checkpoint_every_us: u64,
    /// Client sessions' TTL (`creek_core::Config::session_ttl_us`): short,
    /// so that runs expire entries and refuse late copies.
    pub session_ttl_us: u64,
    /// A bug to plant, to validate the checkers.
    pub plant_bug: Option<PlantedBug>,
    /// Search budget of the linearizability checker.
    pub lin_budget_steps: u64,
    /// Check every replica's and executor's invariants after every event
    /// (slow; for hunting a bug to its first bad step).
    pub check_invariants: bool,
    /// Sampled invariant checks, on in every run: a replica's invariants
    /// (core, executor, CAB, gossip, durability) are checked after an event
    /// at most this often per replica, in virtual microseconds; 0: never.
    pub invariants_every_us: u64,
}

/// Default execution costs, calibrated to the Creek paper's TPC-C setting
/// (§6.2: weak transactions execute in about 0.5 ms, Payment in about
/// 0.1 ms). The TPC-C procedures register under these names.
pub fn default_costs_us() -> BTreeMap<String, u64> {
    [
        ("tpcc.new_order", 500),
        ("tpcc.payment", 100),
        ("tpcc.order_status", 500),
        ("tpcc.delivery", 500),
        ("tpcc.stock_level", 500),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            protocol: Protocol::Creek,
            archie_window: 64,
            schedule: creek_exec::mvcc::Schedule::default(),
            replicas: 5,
            shards: 1,
            cross_shard: 0.0,
            mpo_order: creek_core::MpoOrder::Sequencer,
            moves: 0,
            snapshot_reads: 0.0,
            durable_weak: 0.0,
            stable_every_us: 0,
            cores: 4,
            seed: 1,
            workload: "kv".into(),
            duration_us: 2_000_000,
            warmup_us: 0,
            clients: 20,
            think_us: 1_000,
            weak_answer_on_preliminary: false,
            open_rate_per_sec: 0.0,
            latency_us: (200, 300),
            links: Links::Lan,
            bandwidth_bps: 1_000_000_000,
            faults: Faults::default(),
            cost_us: default_costs_us(),
            default_cost_us: 20,
            tick_us: 1_000,
            fsync_us: (20, 400),
            linger_us: creek_store::LINGER_US,
            checkpoint_every_us: 100_000,
            session_ttl_us: 200_000,
            plant_bug: None,
            lin_budget_steps: 2_000_000,
            check_invariants: false,
            invariants_every_us: 20_000,
        }
    }
}

impl SimConfig {
    /// Check every field.
    pub fn validate(&self) -> Result<(), String> {
        if !(3..=9).contains(&self.replicas) {
            return Err("replicas must be between 3 and 9".into());
        }
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(format!("shards must be between 1 and {MAX_SHARDS}"));
        }
        if self.shards > 1 && self.protocol != Protocol::Creek {
            return Err("sharded runs run Creek's protocol: use --protocol creek".into());
        }
        if self.plant_bug.is_some() && !creek_node::PLANTED_BUGS {
            return Err(format!(
                "{}; build with `cargo build --release -p creek --features planted-bugs`",
                creek_core::PLANTED_BUGS_OFF
            ));
        }
        if self.protocol != Protocol::Creek && self.plant_bug.is_some() {
            return Err("planted bugs are bugs of Creek's protocol: use --protocol creek".into());
        }
        if self.mpo_order == creek_core::MpoOrder::Genuine {
            let f = &self.faults;
            if f.crash || f.disk || f.wipes > 0 || f.members || f.partition {
                return Err("the genuine multicast runs without crashes, disk faults, partitions or membership changes (a replica rebuilt from a checkpoint would not carry its ordering state): use --faults loss,clock or none".into());
            }
        }
        if self.moves > 0 {
            if self.shards < 2 || self.protocol != Protocol::Creek {
                return Err(
                    "moves of keys need a sharded Creek cluster: --shards 2 or more".into(),
                );
            }
            if self.mpo_order != creek_core::MpoOrder::Sequencer
                || self.snapshot_reads > 0.0
                || !["kv", "bank"].contains(&self.workload.as_str())
            {
                return Err("moves of keys run with the kv or bank workload, the sequencer, and no snapshot reads".into());
            }
        }
        if !(0.0..=1.0).contains(&self.durable_weak) {
            return Err(format!(
                "--durable-weak is a share within 0..=1, got {}",
                self.durable_weak
            ));
        }
        if self.durable_weak > 0.0 && self.protocol != Protocol::Creek {
            return Err("durable weak writes are Creek's: use --protocol creek".into());
        }
        if !(0.0..=1.0).contains(&self.snapshot_reads) {
            return Err("the share of snapshot reads must be within 0..=1".into());
        }
        if self.snapshot_reads > 0.0 && self.protocol != Protocol::Creek {
            return Err("snapshot reads are Creek's level: use --protocol creek".into());
        }
        if self.archie_window == 0 {
            return Err("archie_window must be positive".into());
        }
        if self.cores == 0 {
            return Err("cores must be positive".into());
        }
        if self.clients == 0 && self.open_rate_per_sec == 0.0 {
            return Err("a run needs closed-loop clients or an open-loop rate".into());
        }
        if !self.open_rate_per_sec.is_finite() || self.open_rate_per_sec < 0.0 {
            return Err("open-loop rate must be a finite, non-negative number".into());
        }
        if self.latency_us.0 > self.latency_us.1 || self.latency_us.1 == 0 {
            return Err("latency range must be non-empty and positive".into());
        }
        if self.bandwidth_bps == 0 || self.tick_us == 0 || self.duration_us == 0 {
            return Err("bandwidth, tick and duration must be positive".into());
        }
        if self.fsync_us.0 > self.fsync_us.1 {
            return Err("fsync range must be non-empty".into());
        }
        if self.warmup_us >= self.duration_us {
            return Err("the warm-up must be shorter than the run".into());
        }
        Ok(())
    }

    /// The execution cost of a procedure.
    pub fn cost_of(&self, proc_name: &str) -> u64 {
        self.cost_us
            .get(proc_name)
            .copied()
            .unwrap_or(self.default_cost_us)
            .max(1)
    }
}
