//! YCSB population and ops executed through `creek_procs::execute_call` on a
//! map-backed snapshot.

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_exec::{ProcCall, SnapshotRead, TxnLimits, VersionNo};
use creek_procs::{execute_call, Registry};
use creek_types::value::Value;
use creek_workloads::ycsb::{self, Distribution, Mix, Ycsb, YcsbConfig};

struct Snap<'a>(&'a BTreeMap<Bytes, Bytes>);

impl SnapshotRead for Snap<'_> {
    fn read(&self, key: &[u8]) -> (Option<Bytes>, VersionNo) {
        (self.0.get(key).cloned(), VersionNo(1))
    }

    fn scan(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes, VersionNo)>) {
        creek_exec::basic::scan_map(self.0, from, to, limit, VersionNo(1), out);
    }
}

fn exec(reg: &Registry, state: &mut BTreeMap<Bytes, Bytes>, call: &ProcCall) -> Value {
    assert!(
        reg.check(call, &creek_exec::TxnLimits::default()).is_ok(),
        "{} refused",
        call.name
    );
    let ex = execute_call(reg, &Snap(state), TxnLimits::default(), call);
    for (k, v) in &ex.writes {
        match v {
            Some(v) => state.insert(k.clone(), v.clone()),
            None => state.remove(k),
        };
    }
    Value::decode(&ex.outcome.expect("no abort")).expect("a value")
}

#[test]
fn loading_writes_every_record_and_ops_read_and_update_them() {
    let mut reg = Registry::with_builtins();
    ycsb::register(&mut reg);
    let config = YcsbConfig {
        mix: Mix::A,
        records: 2_345,
        value_bytes: 20,
        distribution: Distribution::Zipfian,
        strong_share: 0.1,
    };
    let mut y = Ycsb::new(config, 3).expect("valid");
    let mut state = BTreeMap::new();
    let loads: Vec<ProcCall> = y.load_calls().collect();
    for call in &loads {
        exec(&reg, &mut state, call);
    }
    assert_eq!(state.len(), 2_345);
    assert!(state.values().all(|v| v.len() == 20));
    assert!(state.contains_key(&ycsb::key(2_344)));

    for _ in 0..500 {
        let op = y.next_op();
        let out = exec(&reg, &mut state, &op.call);
        if op.read {
            // Every read finds its record.
            assert!(
                matches!(out, Value::Bytes(ref b) if b.len() == 20),
                "{out:?}"
            );
        } else {
            assert_eq!(out, Value::Nil);
        }
    }
    assert_eq!(state.len(), 2_345, "updates only overwrite loaded records");
}
