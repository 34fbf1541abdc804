//! Workloads for checking: op generators with the invariants each must keep.

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_check::history::{History, OpRecord};
use creek_procs::mpo::Part;
use creek_procs::Registry;
use creek_shard::{ShardId, ShardMap};
use creek_types::value::{decode_args, Value};
use creek_types::ClientRequestId;
use creek_types::ProcCall;
use creek_workloads::ycsb::YcsbConfig;

use crate::rng::Rng;

/// One op a client wants to issue.
#[derive(Clone, Debug)]
pub struct NextOp {
    /// The call.
    pub call: ProcCall,
    /// Strong (ordered by CAB) or weak.
    pub strong: bool,
    /// For a weak op: also ask for the final view.
    pub wants_final: bool,
}

/// A key that places a call on a shard, with its keyspace (`None`: the
/// built-in data), as [`ShardMap::route`] takes it.
pub type RouteKey = (Option<String>, Bytes);

/// A workload: what clients do and what must hold afterwards. The same
/// value drives the simulator and `creek bench --target cluster`.
pub trait Workload: Send + Sync {
    /// Its name on the command line.
    fn name(&self) -> &'static str;
    /// Register any procedures beyond the built-ins (same on every replica).
    fn register(&self, registry: &mut Registry);
    /// Calls run once, strong, before clients start (initial data).
    fn setup(&self) -> Vec<ProcCall>;
    /// Records every replica starts with instead of running setup calls
    /// (a bulk load, as from a shared backup); empty for most workloads.
    /// The simulator restores each replica from them; a cluster target
    /// loads them with setup calls instead.
    fn preload(&self) -> Vec<(Bytes, Bytes)> {
        Vec::new()
    }
    /// The next op of `client`.
    fn next_op(&mut self, rng: &mut Rng, client: u32) -> NextOp;
    /// The keys a call touches, for partitioning the linearizability check
    /// (ops sharing a key are checked together). Empty: the call is not
    /// checked for linearizability.
    fn keys(&self, call: &ProcCall) -> Vec<Bytes>;
    /// Workload invariants over what clients saw and the converged committed
    /// state; each violation is described in one line.
    fn check(&self, history: &History, committed_state: &BTreeMap<Bytes, Bytes>) -> Vec<String>;
    /// The keys that place `call` on a shard of a sharded cluster (every
    /// key it reads or writes, or a key standing for them); empty: the
    /// call names no key, and a setup call without keys runs on every
    /// shard. The default: [`Workload::keys`], of the built-in data.
    fn route_keys(&self, call: &ProcCall) -> Vec<RouteKey> {
        self.keys(call).into_iter().map(|k| (None, k)).collect()
    }
    /// A sharded run is about to start on `map`: add the placements the
    /// workload's data needs (TPC-C's warehouses by ranges) and learn where
    /// keys live, so that every op generated stays on one shard; or refuse
    /// to run sharded, saying why. The default keeps the map and accepts
    /// (ops on one key each always stay on one shard).
    fn place(&mut self, _map: &mut ShardMap) -> Result<(), String> {
        Ok(())
    }
    /// `call`, whose route keys span shards under `map`, as an operation
    /// across shards (docs/cross-shard.md): the shard its origin is on and
    /// every involved shard's part, or `None` if it cannot run as one.
    /// The default: each route key is a key of the built-in data, declared
    /// on its owner's part, and the origin is the first key's shard.
    fn mpo_parts(&self, call: &ProcCall, map: &ShardMap) -> Option<(u32, Vec<Part>)> {
        let keys = self.route_keys(call);
        let mut parts: BTreeMap<u32, Vec<Bytes>> = BTreeMap::new();
        for (ks, key) in &keys {
            if ks.is_some() {
                return None; // a keyspace's keys: declared by its procedures
            }
            let owner = u32::from(map.owner(None, key).0);
            parts.entry(owner).or_default().push(key.clone());
        }
        let first = u32::from(map.owner(None, &keys.first()?.1).0);
        let parts = parts
            .into_iter()
            .map(|(shard, keys)| Part::new(shard, keys))
            .collect();
        Some((first, parts))
    }
    /// Where a preloaded record lives on a sharded cluster: the shard
    /// owning this key, or `None` for a record every shard keeps (a
    /// read-only table, like TPC-C's items).
    fn record_route(&self, key: &Bytes) -> Option<RouteKey> {
        Some((None, key.clone()))
    }
    /// [`Workload::check`] of one shard of a sharded run: its history and
    /// committed state only hold the data `shard` owns under `map`.
    fn check_shard(
        &self,
        _map: &ShardMap,
        _shard: ShardId,
        history: &History,
        committed_state: &BTreeMap<Bytes, Bytes>,
    ) -> Vec<String> {
        self.check(history, committed_state)
    }
    /// Workload-specific measurements over the measured ops (e.g. YCSB's
    /// divergence of preliminary from final views), as named JSON values
    /// added to a benchmark point.
    fn measure(&self, _ops: &[&OpRecord]) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }
}

pub mod bank;
pub mod kv;
pub mod leases;
pub mod list;
pub mod procs;
pub mod queue;
pub mod tickets;
pub mod tpcc;
pub mod ycsb;

/// The names [`by_name`] knows, in a fixed order.
pub const NAMES: &[&str] = &[
    "kv", "bank", "list", "queue", "tpcc", "ycsb", "tickets", "procs",
];

/// Most lines a workload's [`Workload::check`] returns; further violations
/// are summarised in the last line.
pub const MAX_VIOLATION_LINES: usize = 20;

/// Parameters shared by the workloads (each uses the ones it needs).
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadConfig {
    /// `kv`: registers `r0..` and counters `n0..`; `list`: lists `l0..`.
    pub keys: usize,
    /// Share of ops issued strong.
    pub strong_share: f64,
    /// Share of weak ops that also ask for the final view.
    pub final_share: f64,
    /// `bank`: number of accounts.
    pub accounts: usize,
    /// `bank`: opening balance of every account.
    pub initial_balance: i64,
    /// `queue`: tickets enqueued by the setup; `tickets`: per event.
    pub tickets: usize,
    /// `tickets`: events, each with its own stock.
    pub events: usize,
    /// `tickets`: a sale is confirmed on the preliminary view while its
    /// ticket number (the tickets left) is above this.
    pub ticket_threshold: usize,
    /// `tpcc`: warehouses at the specification's cardinalities; `None`:
    /// the small [`tpcc::SIM_SCALE`] database.
    pub tpcc_warehouses: Option<u16>,
    /// `tpcc` with `tpcc_warehouses`: divide the specification's items,
    /// customers and orders per district by this (1: the specification;
    /// 10 for sweeps whose replicas would not fit in memory otherwise).
    /// Warehouses and districts keep their number.
    pub tpcc_row_divisor: u32,
    /// `tpcc`: share of transactions run strong, picked at random; `None`:
    /// Payment strong and the others weak (the Creek paper's setting).
    pub tpcc_strong_share: Option<f64>,
    /// Start every replica from the initial data (a bulk load) instead of
    /// running setup calls; for workloads whose data is large (`tpcc`).
    pub preload: bool,
    /// `ycsb`: the generator's settings.
    pub ycsb: YcsbConfig,
    /// `bank` and `ycsb` on a sharded cluster: the share of ops across
    /// two shards; `tpcc`: above 0, remote warehouses are drawn from every
    /// warehouse as the specification does (New-Orders and Payments whose
    /// remote warehouse is on another shard run across shards), else from
    /// the home warehouse's shard.
    pub cross_shard: f64,
    /// `kv`: scan registers and delete them through the range calls. Off
    /// on a sharded cluster: there a client sends a range call to every
    /// shard and merges the pages (docs/api.md), and a simulated client
    /// sends each call to one shard.
    pub ranges: bool,
    /// `kv`: conditional transactions (`kv.txn`) over two registers. On a
    /// sharded cluster only with operations across shards, which run the
    /// ones whose registers lie on two shards.
    pub txns: bool,
    /// `kv`: lease ops among them (`leases`). Off by default: a driver of
    /// real processes cannot replay the leader's expiry ops, and the
    /// benchmarks keep their op mix; the simulator turns them on for one
    /// group.
    pub leases: bool,
    /// `tpcc`: no remote warehouse at all (every New-Order line supplied
    /// and every Payment made at the home warehouse).
    pub tpcc_local: bool,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            keys: 8,
            strong_share: 0.5,
            final_share: 0.3,
            accounts: 8,
            initial_balance: 100,
            tickets: 200,
            events: 4,
            ticket_threshold: 20,
            tpcc_warehouses: None,
            tpcc_row_divisor: 1,
            tpcc_strong_share: None,
            preload: false,
            ycsb: YcsbConfig {
                records: 1_000,
                ..YcsbConfig::default()
            },
            cross_shard: 0.0,
            ranges: true,
            txns: true,
            leases: false,
            tpcc_local: false,
        }
    }
}

/// The workload called `name` (see [`NAMES`]) with `config`, or why it
/// cannot be built (an unknown name, settings it refuses).
pub fn by_name(name: &str, config: &WorkloadConfig) -> Result<Box<dyn Workload>, String> {
    Ok(match name {
        "kv" => Box::new(kv::KvWorkload::new(config)),
        "bank" => Box::new(bank::BankWorkload::new(config)),
        "list" => Box::new(list::ListWorkload::new(config)),
        "queue" => Box::new(queue::QueueWorkload::new(config)),
        "tpcc" => Box::new(tpcc::TpccWorkload::new(config)?),
        "ycsb" => Box::new(ycsb::YcsbWorkload::new(config)?),
        "tickets" => Box::new(tickets::TicketsWorkload::new(config)?),
        "procs" => Box::new(procs::ProcsWorkload::new(config)),
        _ => return Err(format!("unknown workload {name:?} ({})", NAMES.join(", "))),
    })
}

/// Keep at most [`MAX_VIOLATION_LINES`] lines, the last one counting the
/// lines left out.
pub(crate) fn bounded(mut lines: Vec<String>) -> Vec<String> {
    if lines.len() > MAX_VIOLATION_LINES {
        let kept = MAX_VIOLATION_LINES - 1;
        let more = lines.len() - kept;
        lines.truncate(kept);
        lines.push(format!("... and {more} more violations"));
    }
    lines
}

/// Strong or weak, and for a weak op whether it asks for the final view
/// (a strong op always gets one, so it reports `true`).
pub(crate) fn pick_mode(rng: &mut Rng, strong_share: f64, final_share: f64) -> (bool, bool) {
    if rng.chance(strong_share) {
        (true, true)
    } else {
        (false, rng.chance(final_share))
    }
}

/// Strong with `strong_share`, else weak; always with a final view.
pub(crate) fn pick_final(rng: &mut Rng, strong_share: f64) -> (bool, bool) {
    (rng.chance(strong_share), true)
}

/// `op r0.3 (client 2)`, or `local read (client 2)` for an op without id.
pub(crate) fn describe(op: &OpRecord) -> String {
    match op.id {
        Some(id) => format!("op {id} (client {})", op.client),
        None => format!("local read (client {})", op.client),
    }
}

/// Bytes shown as a value (quoted text, or hex).
pub(crate) fn show(b: &Bytes) -> String {
    Value::Bytes(b.clone()).to_string()
}

/// The call's decoded arguments, if they decode.
pub(crate) fn args_of(call: &ProcCall) -> Option<Vec<Value>> {
    decode_args(&call.args).ok()
}

/// The call's first argument, if it is bytes.
pub(crate) fn first_bytes_arg(call: &ProcCall) -> Option<Bytes> {
    match args_of(call)?.into_iter().next()? {
        Value::Bytes(b) => Some(b),
        _ => None,
    }
}

/// The decoded result of the op's final view: `None` without a final view
/// or when it is an abort; `Some(Err)` when the result does not decode.
pub(crate) fn final_result(op: &OpRecord) -> Option<Result<Value, String>> {
    let raw = op.final_view()?.outcome.as_ref().ok()?;
    Some(Value::decode(raw).map_err(|e| format!("undecodable result ({e})")))
}

/// Records grouped into logical requests: records carrying the same client
/// request id (retries) form one group, every other record its own. Groups
/// are in order of first appearance.
pub(crate) fn logical_ops(history: &History) -> Vec<Vec<&OpRecord>> {
    let mut groups: Vec<Vec<&OpRecord>> = Vec::new();
    let mut by_request: BTreeMap<ClientRequestId, usize> = BTreeMap::new();
    for op in &history.ops {
        match op.call.request_id {
            Some(rid) => match by_request.get(&rid) {
                Some(&g) => groups[g].push(op),
                None => {
                    by_request.insert(rid, groups.len());
                    groups.push(vec![op]);
                }
            },
            None => groups.push(vec![op]),
        }
    }
    groups
}

#[cfg(test)]
pub(crate) mod testkit {
    //! Helpers for the workloads' tests.

    use std::collections::BTreeMap;

    use bytes::Bytes;
    use creek_core::{OpId, ReplicaId, ViewKind};
    use creek_exec::basic::replay_versioned;
    use creek_exec::{Outcome, ProcCall, TxnLimits};
    use creek_procs::Registry;
    use creek_types::value::{encode_args, Value};

    use super::Workload;
    use crate::rng::Rng;
    use creek_check::history::{History, OpRecord, SeenView};

    /// A call with encoded arguments.
    pub fn call(name: &str, args: &[Value]) -> ProcCall {
        ProcCall::new(name, encode_args(args))
    }

    /// A record of `call` by client 0 with the given views.
    pub fn record(seq: u64, call: ProcCall, views: Vec<(ViewKind, Outcome)>) -> OpRecord {
        OpRecord {
            client: 0,
            replica: 0,
            id: Some(OpId::new(ReplicaId(0), seq)),
            call,
            strong: true,
            wants_final: true,
            invoked_at_us: seq,
            views: views
                .into_iter()
                .enumerate()
                .map(|(i, (kind, outcome))| SeenView {
                    at_us: seq + i as u64 + 1,
                    kind,
                    outcome,
                    time: 0,
                })
                .collect(),
            origin_crashed: false,
            origin_left: false,
            lost: false,
        }
    }

    /// A record whose only view is a stable one with result `v`.
    pub fn stable(seq: u64, call: ProcCall, v: Value) -> OpRecord {
        record(seq, call, vec![(ViewKind::Stable, Ok(v.encode()))])
    }

    /// A history of the given records.
    pub fn history(ops: Vec<OpRecord>) -> History {
        History { ops }
    }

    /// Setup plus `n` generated ops run sequentially: the final state and
    /// the history of a perfect sequential run (every generated op with a
    /// stable view of its outcome). Asserts that the registry accepts every
    /// call.
    pub fn run_sequential(
        w: &mut dyn Workload,
        seed: u64,
        n: usize,
    ) -> (BTreeMap<Bytes, Bytes>, History) {
        let mut registry = Registry::with_builtins();
        w.register(&mut registry);
        let setup = w.setup();
        let mut rng = Rng::new(seed);
        let generated: Vec<_> = (0..n).map(|i| w.next_op(&mut rng, i as u32 % 5)).collect();
        let calls: Vec<ProcCall> = setup
            .iter()
            .cloned()
            .chain(generated.iter().map(|op| op.call.clone()))
            .collect();
        for c in &calls {
            let checked = registry.check(c, &creek_exec::TxnLimits::default());
            assert!(checked.is_ok(), "{} refused: {checked:?}", c.name);
        }
        // As a Creek replica runs them: with version records.
        let (outcomes, state) = replay_versioned(
            &registry,
            TxnLimits::default(),
            BTreeMap::new(),
            creek_procs::versions::meta_key,
            (1..).zip(&calls),
        );
        let ops = generated
            .iter()
            .zip(&outcomes[setup.len()..])
            .enumerate()
            .map(|(i, (op, outcome))| {
                let mut r = record(i as u64 + 1, op.call.clone(), vec![]);
                r.client = i as u32 % 5;
                r.strong = op.strong;
                r.wants_final = op.wants_final;
                r.views.push(SeenView {
                    at_us: i as u64 + 2,
                    kind: ViewKind::Stable,
                    outcome: outcome.clone(),
                    time: 0,
                });
                r
            })
            .collect();
        (state, History { ops })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_name_knows_every_workload() {
        let config = WorkloadConfig::default();
        for name in NAMES {
            let w = by_name(name, &config);
            assert_eq!(w.map(|w| w.name()), Ok(*name));
        }
        assert!(by_name("nope", &config).is_err());
    }

    #[test]
    fn output_is_bounded() {
        let lines: Vec<String> = (0..50).map(|i| i.to_string()).collect();
        let out = bounded(lines);
        assert_eq!(out.len(), MAX_VIOLATION_LINES);
        assert_eq!(out[19], "... and 31 more violations");
        assert_eq!(bounded(vec!["a".into()]), vec!["a".to_string()]);
    }
}
