//! `tpcc`: the TPC-C transactions of `creek_workloads::tpcc` on a small
//! database, with the consistency conditions of clause 3.3.2 checked on the
//! converged committed state.
//!
//! Each client is one terminal (home warehouse `client % warehouses + 1`)
//! with its own input generator seeded from the simulator's PRNG. Payment
//! runs strong, the other transactions weak (Creek paper §6.2), a share of
//! the weak ones asking for the final view; or, with
//! [`WorkloadConfig::tpcc_strong_share`], each transaction is strong with
//! that probability whatever its type (the paper's §6.3 variations).
//!
//! The database is [`SIM_SCALE`] (loaded by setup calls, fast enough for
//! checking many seeds), or with [`WorkloadConfig::tpcc_warehouses`] the
//! specification's cardinalities for that many warehouses, bulk-loaded into
//! every replica when [`WorkloadConfig::preload`] is set (benchmarks).
//!
//! Checks: the consistency conditions hold on the committed state, and no
//! final view is an abort other than New-Order's deliberate rollback
//! (TPC-C inputs are always valid, so any other abort is a bug).
//! Results are not checked for linearizability ([`Workload::keys`] is
//! empty): the transactions touch too many keys for the checker to be
//! useful.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use creek_check::history::History;
use creek_procs::mpo::Part;
use creek_procs::Registry;
use creek_shard::{Placement, ShardMap};
use creek_types::value::Value;
use creek_types::ProcCall;
use creek_workloads::tpcc::{self, load, new_order, Generator, GeneratorConfig, NuRandC};

use super::{args_of, bounded, describe, NextOp, RouteKey, Workload, WorkloadConfig};
use crate::rng::Rng;

/// Bytes of records per setup call.
const SETUP_CALL_BYTES_MAX: usize = 64 * 1024;

/// The simulator's database: two warehouses, shrunk so setup stays fast.
pub const SIM_SCALE: tpcc::TpccScale = tpcc::TpccScale {
    warehouses: 2,
    districts_per_warehouse: 3,
    customers_per_district: 30,
    items: 200,
    orders_per_district: 30,
};

/// The `tpcc` workload.
#[derive(Debug)]
pub struct TpccWorkload {
    scale: tpcc::TpccScale,
    setup: Vec<ProcCall>,
    preload: Vec<(Bytes, Bytes)>,
    constants: NuRandC,
    terminals: BTreeMap<u32, Generator>,
    final_share: f64,
    strong_share: Option<f64>,
    ops_issued: i64,
    /// What it was built from (a sharded run rebuilds it bulk-loaded).
    config: WorkloadConfig,
    /// On a sharded cluster, the first warehouse of each shard, in order:
    /// a terminal draws its remote warehouses from its home shard's, but
    /// with `cross_shard` from every warehouse.
    shard_starts: Option<Vec<u16>>,
    /// With `cross_shard`: the customer each name index record picks (a
    /// terminal's lookup before a remote Payment by last name, which
    /// declares the customer; TPC-C never renames one).
    by_name: HashMap<Bytes, u32>,
}

/// The keyspace name TPC-C's data is placed under on a sharded cluster
/// (by ranges of warehouse ids, as [`warehouse_key`] encodes them).
pub const KEYSPACE: &str = "tpcc";

/// A warehouse id as the routing key of its data: two big-endian bytes,
/// so ranges of keys are ranges of warehouses.
pub fn warehouse_key(w: u16) -> RouteKey {
    (
        Some(KEYSPACE.to_owned()),
        Bytes::copy_from_slice(&w.to_be_bytes()),
    )
}

impl TpccWorkload {
    /// The workload for `config` (uses `final_share`, `tpcc_warehouses`,
    /// `tpcc_strong_share` and `preload`).
    pub fn new(config: &WorkloadConfig) -> Result<Self, String> {
        let scale = match config.tpcc_warehouses {
            None => SIM_SCALE,
            Some(warehouses) => {
                let spec = tpcc::TpccScale::default();
                let d = config.tpcc_row_divisor.max(1);
                tpcc::TpccScale {
                    warehouses,
                    customers_per_district: spec.customers_per_district / d,
                    items: spec.items / d,
                    orders_per_district: spec.orders_per_district / d,
                    ..spec
                }
            }
        };
        if let Some(p) = config.tpcc_strong_share {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("tpcc strong share {p} is not within 0..=1"));
            }
        }
        let mut rng = tpcc::Rng::new(0x7c0c);
        let (mut setup, mut preload) = (Vec::new(), Vec::new());
        let load_c = if config.preload {
            load::populate(&scale, &mut rng, 1, |k, v| preload.push((k, v)))
        } else {
            load::load_calls(&scale, &mut rng, 1, SETUP_CALL_BYTES_MAX, |c| setup.push(c))
        }
        .map_err(|e| format!("tpcc: {e}"))?;
        Ok(TpccWorkload {
            scale,
            setup,
            preload,
            constants: NuRandC::for_run(load_c, &mut rng),
            terminals: BTreeMap::new(),
            final_share: config.final_share,
            strong_share: config.tpcc_strong_share,
            ops_issued: 0,
            config: config.clone(),
            shard_starts: None,
            by_name: HashMap::new(),
        })
    }

    /// The warehouses (first, last) a terminal of `w` draws remote ones
    /// from: the shard holding `w` on a sharded cluster, all of them
    /// unsharded or across shards, none but `w` itself when local.
    fn remote_range(&self, w: u16) -> (u16, u16) {
        if self.config.tpcc_local {
            return (w, w);
        }
        let Some(starts) = self
            .shard_starts
            .as_ref()
            .filter(|_| self.config.cross_shard <= 0.0)
        else {
            return (1, self.scale.warehouses);
        };
        let i = starts.partition_point(|first| *first <= w).max(1) - 1;
        let last = starts
            .get(i + 1)
            .map_or(self.scale.warehouses, |next| next - 1);
        (starts[i], last)
    }
}

impl Workload for TpccWorkload {
    fn name(&self) -> &'static str {
        "tpcc"
    }

    fn register(&self, registry: &mut Registry) {
        tpcc::register(registry);
    }

    fn setup(&self) -> Vec<ProcCall> {
        self.setup.clone()
    }

    fn preload(&self) -> Vec<(Bytes, Bytes)> {
        self.preload.clone()
    }

    fn next_op(&mut self, rng: &mut Rng, client: u32) -> NextOp {
        let scale = self.scale;
        let constants = self.constants;
        // Ten terminals per warehouse (clause 4.2.2); open-loop arrivals,
        // each its own session, share them.
        let slot = client % (10 * u32::from(scale.warehouses));
        let w = slot % u32::from(scale.warehouses) + 1;
        let (first, last) = self.remote_range(w as u16);
        let terminal = self.terminals.entry(slot).or_insert_with(|| {
            let d =
                slot / u32::from(scale.warehouses) % u32::from(scale.districts_per_warehouse) + 1;
            let cfg = GeneratorConfig {
                scale,
                home_w_id: w as u16,
                stock_level_d_id: d as u8,
                constants,
            };
            Generator::new(cfg, rng.next_u64())
                .expect("the terminal's warehouse and district are in SIM_SCALE")
                .remote_within(first, last)
        });
        self.ops_issued += 1;
        // Dates start after the load's (1) and grow with every op.
        let call = terminal.next(1 + self.ops_issued);
        let strong = match self.strong_share {
            None => call.is_payment(),
            Some(p) => rng.chance(p),
        };
        let wants_final = strong || rng.chance(self.final_share);
        NextOp {
            call: ProcCall::new(call.name, call.args),
            strong,
            wants_final,
        }
    }

    fn keys(&self, _call: &ProcCall) -> Vec<Bytes> {
        Vec::new()
    }

    /// Every warehouse a transaction touches: its home warehouse, and the
    /// supplying warehouses of New-Order's lines or Payment's customer's.
    fn route_keys(&self, call: &ProcCall) -> Vec<RouteKey> {
        let Some(args) = args_of(call) else {
            return Vec::new();
        };
        let int = |v: Option<&Value>| match v {
            Some(Value::Int(w)) => u16::try_from(*w).ok(),
            _ => None,
        };
        let mut ws: Vec<u16> = int(args.first()).into_iter().collect();
        match call.name.as_ref() {
            tpcc::NEW_ORDER => {
                if let Some(Value::List(lines)) = args.get(4) {
                    for line in lines {
                        if let Value::List(fields) = line {
                            ws.extend(int(fields.get(1)));
                        }
                    }
                }
            }
            tpcc::PAYMENT => ws.extend(int(args.get(2))),
            _ => {}
        }
        ws.sort_unstable();
        ws.dedup();
        ws.into_iter().map(warehouse_key).collect()
    }

    /// Warehouses in contiguous blocks, one per shard (`KEYSPACE` placed
    /// by ranges); every replica starts from its shard's warehouses and
    /// every item (a bulk load: the load calls each write several
    /// warehouses' rows).
    fn place(&mut self, map: &mut ShardMap) -> Result<(), String> {
        let shards = map.shard_ids();
        let w = usize::from(self.scale.warehouses);
        if w < shards.len() {
            return Err(format!(
                "tpcc on {} shards needs at least as many warehouses (it has {w})",
                shards.len()
            ));
        }
        if self.preload.is_empty() {
            let config = WorkloadConfig {
                preload: true,
                ..self.config.clone()
            };
            *self = TpccWorkload::new(&config)?;
        }
        let starts: Vec<u16> = (0..shards.len())
            .map(|k| (k * w / shards.len() + 1) as u16)
            .collect();
        let ranges = starts
            .iter()
            .zip(&shards)
            .map(|(first, s)| {
                let key = if *first == 1 {
                    Bytes::new()
                } else {
                    warehouse_key(*first).1
                };
                (key, *s)
            })
            .collect();
        *map = map
            .place(map.epoch, Some(KEYSPACE), Placement::Ranges(ranges))
            .map_err(|e| e.to_string())?;
        self.shard_starts = Some(starts);
        if self.config.cross_shard > 0.0 {
            let name_index = [tpcc::keys::PREFIX, tpcc::keys::tag::CUSTOMER_BY_LAST];
            self.by_name = self
                .preload
                .iter()
                .filter(|(k, _)| k.starts_with(&name_index))
                .filter_map(|(k, v)| Some((k.clone(), tpcc::customer_of_name_index(v).ok()?)))
                .collect();
        }
        Ok(())
    }

    /// A New-Order or Payment with a remote warehouse on another shard:
    /// the records it declares (`tpcc::declared`) on their warehouses'
    /// shards, its origin the home warehouse's.
    fn mpo_parts(&self, call: &ProcCall, map: &ShardMap) -> Option<(u32, Vec<Part>)> {
        let d = tpcc::declared::declared(call, |index| self.by_name.get(index).copied())?;
        let shard = |w: u16| u32::from(map.owner(Some(KEYSPACE), &warehouse_key(w).1).0);
        let mut parts: BTreeMap<u32, Part> = BTreeMap::new();
        let keys = d.keys.into_iter().map(|(w, k)| (w, k, false));
        for (w, k, prefix) in keys.chain(d.prefixes.into_iter().map(|(w, p)| (w, p, true))) {
            let s = shard(w);
            let part = parts.entry(s).or_insert_with(|| Part::new(s, Vec::new()));
            if prefix {
                &mut part.prefixes
            } else {
                &mut part.keys
            }
            .push(k);
        }
        Some((shard(d.home), parts.into_values().collect()))
    }

    fn record_route(&self, key: &Bytes) -> Option<RouteKey> {
        match tpcc::keys::warehouse_of(key) {
            Some(w) => Some(warehouse_key(w)),
            None if key.first() == Some(&tpcc::keys::PREFIX) => None,
            None => Some((None, key.clone())),
        }
    }

    /// Across shards, a Payment's history row lives on its customer's
    /// shard and its YTDs on the home warehouse's: the conditions hold
    /// only over every shard's data together (the cross-shard check runs
    /// [`Workload::check`] on it).
    fn check_shard(
        &self,
        _map: &ShardMap,
        _shard: creek_shard::ShardId,
        history: &History,
        committed_state: &BTreeMap<Bytes, Bytes>,
    ) -> Vec<String> {
        if self.config.cross_shard > 0.0 {
            return Vec::new();
        }
        self.check(history, committed_state)
    }

    fn check(&self, history: &History, committed_state: &BTreeMap<Bytes, Bytes>) -> Vec<String> {
        let mut out: Vec<String> = tpcc::check::consistency(committed_state)
            .into_iter()
            .map(|v| format!("tpcc: {v}"))
            .collect();
        for op in &history.ops {
            let Some(view) = op.final_view() else {
                continue;
            };
            match &view.outcome {
                Err(e)
                    if !(op.call.name.as_ref() == tpcc::NEW_ORDER
                        && e.0 == new_order::UNUSED_ITEM) =>
                {
                    out.push(format!(
                        "tpcc: final view of {} by {} aborted: {e}",
                        op.call.name,
                        describe(op)
                    ));
                }
                _ => {}
            }
        }
        bounded(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::testkit::run_sequential;

    #[test]
    fn sequential_run_passes_and_a_broken_state_fails() {
        let mut w = TpccWorkload::new(&WorkloadConfig::default()).expect("valid");
        let (mut state, h) = run_sequential(&mut w, 5, 600);
        assert_eq!(w.check(&h, &state), Vec::<String>::new());
        let payments = h
            .ops
            .iter()
            .filter(|op| op.call.name.as_ref() == tpcc::PAYMENT)
            .count();
        assert!(
            payments > 150
                && h.ops
                    .iter()
                    .all(|op| op.strong == (op.call.name.as_ref() == tpcc::PAYMENT))
        );
        state.remove(&tpcc::keys::order_line(1, 1, 1, 1));
        let out = w.check(&h, &state);
        assert!(out.iter().any(|l| l.contains("O_OL_CNT")), "{out:?}");
    }
}
