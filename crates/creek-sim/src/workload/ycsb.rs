//! `ycsb`: the YCSB core workloads of `creek_workloads::ycsb` (A, B, C;
//! uniform, zipfian or latest) on `kv.get` / `kv.put`.
//!
//! Each client is one YCSB client with its own generator seeded from the
//! simulator's PRNG. Strong ops and a share of the weak ones
//! ([`WorkloadConfig::final_share`]; the benchmark uses 1) ask for both
//! views, so that the benchmark can measure how often a preliminary view
//! diverges from the final one (Correctables §6.2.1): [`Workload::measure`]
//! reports `divergence`, the share of reads with both views whose
//! preliminary result differs from the final one.
//!
//! On a sharded cluster, a `cross_shard` share of the ops become
//! operations across shards (docs/cross-shard.md): a read becomes a
//! strong `kv.mget` and an update a strong `kv.mput` of its record and one
//! of another shard.
//!
//! Checks: strong ops are linearizable per key (the generic checker, keyed
//! by the record); there is no workload-specific invariant (any value a put
//! wrote is a valid value).

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_check::history::{History, OpRecord};
use creek_procs::Registry;
use creek_types::ProcCall;
use creek_workloads::ycsb::{self, Ycsb, YcsbConfig};
use serde_json::{json, Map, Value as Json};

use creek_types::value::Value;

use creek_shard::ShardMap;

use super::{args_of, first_bytes_arg, NextOp, Workload, WorkloadConfig};
use crate::rng::Rng;

/// The `ycsb` workload.
#[derive(Debug)]
pub struct YcsbWorkload {
    config: YcsbConfig,
    final_share: f64,
    clients: BTreeMap<u32, Ycsb>,
    /// A sharded run: every replica starts from the records its shard owns
    /// (a bulk load) instead of running the load calls, each of which
    /// writes a run of records that spans shards.
    preload: bool,
    /// The share of ops that span two shards, and the map they are picked
    /// by (a sharded run).
    cross_shard: f64,
    map: Option<ShardMap>,
}

impl YcsbWorkload {
    /// The workload for `config.ycsb` (its `strong_share` included).
    pub fn new(config: &WorkloadConfig) -> Result<Self, String> {
        // Validate once here, so building a client's generator cannot fail.
        Ycsb::new(config.ycsb.clone(), 0).map_err(|e| e.to_string())?;
        Ok(YcsbWorkload {
            config: config.ycsb.clone(),
            final_share: config.final_share,
            clients: BTreeMap::new(),
            preload: config.preload,
            cross_shard: config.cross_shard,
            map: None,
        })
    }
}

/// The share of `ops` with a preliminary and a final view whose results
/// differ, and how many such ops there were; `None` without any.
pub fn divergence<'a>(ops: impl IntoIterator<Item = &'a OpRecord>) -> (Option<f64>, u64) {
    let (mut both, mut differ) = (0u64, 0u64);
    for op in ops {
        if let (Some(t), Some(f)) = (op.first_tentative(), op.final_view()) {
            both += 1;
            differ += u64::from(t.outcome != f.outcome);
        }
    }
    ((both > 0).then(|| differ as f64 / both as f64), both)
}

impl YcsbWorkload {
    /// `call` (a read or an update of one record) as an operation across
    /// shards: with a record another shard owns, picked at random.
    fn across(&self, rng: &mut Rng, call: &ProcCall) -> Option<ProcCall> {
        let map = self.map.as_ref()?;
        let args = args_of(call)?;
        let key = args.first()?.as_bytes()?.clone();
        let owner = map.owner(None, &key);
        let other = (0..64)
            .map(|_| ycsb::key(rng.index(self.config.records as usize) as u64))
            .find(|k| map.owner(None, k) != owner)?;
        let keys = Value::List(vec![Value::Bytes(key), Value::Bytes(other)]);
        let args = match (call.name.as_ref(), args.get(1)) {
            ("kv.put", Some(value)) => {
                let values = Value::List(vec![value.clone(), value.clone()]);
                ("kv.mput", creek_types::value::encode_args(&[keys, values]))
            }
            ("kv.get", _) => ("kv.mget", creek_types::value::encode_args(&[keys])),
            _ => return None,
        };
        Some(ProcCall::new(args.0, args.1))
    }
}

impl Workload for YcsbWorkload {
    fn name(&self) -> &'static str {
        "ycsb"
    }

    fn register(&self, registry: &mut Registry) {
        ycsb::register(registry);
    }

    fn setup(&self) -> Vec<ProcCall> {
        if self.preload {
            return Vec::new();
        }
        Ycsb::new(self.config.clone(), 0)
            .map(|g| g.load_calls().collect())
            .unwrap_or_default()
    }

    fn preload(&self) -> Vec<(Bytes, Bytes)> {
        if !self.preload {
            return Vec::new();
        }
        Ycsb::new(self.config.clone(), 0)
            .map(|g| g.records().collect())
            .unwrap_or_default()
    }

    fn place(&mut self, map: &mut ShardMap) -> Result<(), String> {
        self.preload = true;
        self.map = Some(map.clone());
        Ok(())
    }

    fn next_op(&mut self, rng: &mut Rng, client: u32) -> NextOp {
        let config = &self.config;
        // Open-loop arrivals, each its own session, share 64 generators.
        let generator = self.clients.entry(client % 64).or_insert_with(|| {
            Ycsb::new(config.clone(), rng.next_u64()).expect("validated in YcsbWorkload::new")
        });
        let op = generator.next_op();
        if self.cross_shard > 0.0 && rng.chance(self.cross_shard) {
            if let Some(call) = self.across(rng, &op.call) {
                return NextOp {
                    call,
                    strong: true,
                    wants_final: true,
                };
            }
        }
        let wants_final = op.strong || rng.chance(self.final_share);
        NextOp {
            call: op.call,
            strong: op.strong,
            wants_final,
        }
    }

    fn keys(&self, call: &ProcCall) -> Vec<Bytes> {
        if matches!(call.name.as_ref(), "kv.mget" | "kv.mput") {
            return match args_of(call).as_deref() {
                Some([Value::List(keys), ..]) => {
                    keys.iter().filter_map(|k| k.as_bytes().cloned()).collect()
                }
                _ => Vec::new(),
            };
        }
        if call.name.as_ref() == ycsb::LOAD {
            // `ycsb.load(first, count, _)` writes records first..first+count.
            if let Some([Value::Int(first), Value::Int(count), _]) = args_of(call).as_deref() {
                return (*first..first + count)
                    .map(|n| ycsb::key(n as u64))
                    .collect();
            }
        }
        first_bytes_arg(call).into_iter().collect()
    }

    fn check(&self, _history: &History, _state: &BTreeMap<Bytes, Bytes>) -> Vec<String> {
        Vec::new()
    }

    fn measure(&self, ops: &[&OpRecord]) -> Map<String, Json> {
        let reads = ops
            .iter()
            .copied()
            .filter(|op| op.call.name.as_ref() == "kv.get");
        let (read_divergence, reads_compared) = divergence(reads);
        let (all_divergence, _) = divergence(ops.iter().copied());
        let mut m = Map::new();
        m.insert("divergence".into(), json!(read_divergence));
        m.insert("divergence_reads_compared".into(), json!(reads_compared));
        m.insert("divergence_all_ops".into(), json!(all_divergence));
        m
    }
}

#[cfg(test)]
mod tests {
    use creek_core::ViewKind;

    use super::*;
    use crate::workload::testkit::{call, record, run_sequential};

    #[test]
    fn sequential_run_never_diverges_and_divergence_counts_differences() {
        let config = WorkloadConfig {
            final_share: 1.0,
            ..WorkloadConfig::default()
        };
        let mut w = YcsbWorkload::new(&config).expect("valid");
        let (_, h) = run_sequential(&mut w, 4, 300);
        assert!(h.ops.iter().all(|op| op.wants_final));
        // Only stable views in a sequential run: nothing to compare.
        assert_eq!(divergence(h.ops.iter()), (None, 0));

        let get = call("kv.get", &[Value::from("user1")]);
        let same = record(
            1,
            get.clone(),
            vec![
                (ViewKind::Tentative, Ok(Value::Nil.encode())),
                (ViewKind::Confirmation, Ok(Value::Nil.encode())),
            ],
        );
        let differ = record(
            2,
            get,
            vec![
                (ViewKind::Tentative, Ok(Value::Nil.encode())),
                (ViewKind::Stable, Ok(Value::from("x").encode())),
            ],
        );
        let m = w.measure(&[&same, &differ]);
        assert_eq!(m["divergence"], json!(0.5));
        assert_eq!(m["divergence_reads_compared"], json!(2));
    }
}
