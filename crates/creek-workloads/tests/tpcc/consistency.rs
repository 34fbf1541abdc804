//! The consistency conditions of clause 3.3.2 under generated load, and
//! argument checking.

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_exec::value::{encode_args, Value};
use creek_exec::ProcCall;
use creek_workloads::tpcc::rows::{District, Warehouse};
use creek_workloads::tpcc::{
    self, check, delivery, keys, new_order, Generator, GeneratorConfig, NuRandC, Rng,
};

use super::*;

#[test]
fn malformed_arguments_are_refused() {
    let db = Db::new(&TINY, 1);
    let refused = |name: &str, args: Bytes| db.reg.check(&ProcCall::new(name, args)).is_err();
    let mut no = hand_order(1);
    assert!(!refused(tpcc::NEW_ORDER, no.encode()));
    no.lines[0].quantity = 11;
    assert!(refused(tpcc::NEW_ORDER, no.encode()));
    no.lines.clear();
    assert!(refused(tpcc::NEW_ORDER, no.encode()));
    assert!(refused(tpcc::PAYMENT, encode_args(&[Value::Int(1)])));
    let d = delivery::Input {
        w_id: 1,
        carrier_id: 11,
        delivery_d: 1,
        districts: 2,
    };
    assert!(refused(tpcc::DELIVERY, d.encode()));
    assert!(refused(tpcc::STOCK_LEVEL, Bytes::from_static(b"\x05")));
    let os = encode_args(&[Value::Int(1), Value::Int(1), Value::Nil]);
    assert!(refused(tpcc::ORDER_STATUS, os));
    assert_eq!(
        db.reg.get(tpcc::ORDER_STATUS).map(|p| p.read_only),
        Some(true)
    );
    assert_eq!(
        db.reg.get(tpcc::STOCK_LEVEL).map(|p| p.read_only),
        Some(true)
    );
}

#[test]
fn generated_mix_keeps_the_database_consistent() {
    let mut db = Db::new(&TINY, 31);
    let mut rng = Rng::new(99);
    let constants = NuRandC::for_run(db.load_c, &mut rng);
    let mut terminals: Vec<Generator> = (1..=TINY.warehouses)
        .map(|w| {
            let cfg = GeneratorConfig {
                scale: TINY,
                home_w_id: w,
                stock_level_d_id: 1,
                constants,
            };
            Generator::new(cfg, u64::from(w) * 1000).expect("valid terminal")
        })
        .collect();
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    let (mut rollbacks, mut payments) = (0u32, 0u32);
    let runs = 3000;
    for n in 0..runs {
        let t = n % terminals.len();
        let call = terminals[t].next(2000 + n as i64);
        *counts.entry(call.name).or_default() += 1;
        payments += u32::from(call.is_payment);
        let ex = db.exec(call.name, call.args);
        match ex.outcome {
            Ok(_) => {}
            Err(e) if e.0 == new_order::UNUSED_ITEM => rollbacks += 1,
            Err(e) => panic!("{} aborted: {e}", call.name),
        }
    }
    let violations = check::consistency(&db.state);
    assert!(violations.is_empty(), "{violations:?}");
    let share = |name| f64::from(counts[name]) / runs as f64;
    assert!((0.40..0.50).contains(&share(tpcc::NEW_ORDER)), "{counts:?}");
    assert!((0.38..0.48).contains(&share(tpcc::PAYMENT)), "{counts:?}");
    for name in [tpcc::ORDER_STATUS, tpcc::DELIVERY, tpcc::STOCK_LEVEL] {
        assert!((0.02..0.06).contains(&share(name)), "{counts:?}");
    }
    assert_eq!(payments, counts[tpcc::PAYMENT]);
    // About 1% of ~1350 New-Orders roll back.
    assert!((3..40).contains(&rollbacks), "{rollbacks}");
    let w = db.row(keys::warehouse(1), Warehouse::decode);
    assert!(w.ytd > 6_000_000, "payments reached warehouse 1");
}

#[test]
fn broken_states_are_reported() {
    let db = Db::new(&TINY, 41);
    let broken = |edit: &dyn Fn(&mut BTreeMap<Bytes, Bytes>), expect: &str| {
        let mut state = db.state.clone();
        edit(&mut state);
        let v = check::consistency(&state);
        assert!(v.iter().any(|s| s.contains(expect)), "{expect}: {v:?}");
    };
    let district =
        |s: &BTreeMap<Bytes, Bytes>| District::decode(&s[&keys::district(1, 2)]).expect("district");
    broken(
        &|s| {
            let mut d = district(s);
            d.ytd += 1;
            s.insert(keys::district(1, 2), d.encode());
        },
        "W_YTD",
    );
    broken(
        &|s| {
            let mut d = district(s);
            d.next_o_id += 1;
            s.insert(keys::district(1, 2), d.encode());
        },
        "max(O_ID)",
    );
    broken(
        &|s| {
            s.remove(&keys::order_line(2, 1, 4, 1));
        },
        "sum(O_OL_CNT)",
    );
    broken(
        &|s| {
            s.remove(&keys::new_order(1, 1, 9));
        },
        "new-order rows",
    );
    broken(
        &|s| {
            s.remove(&keys::new_order(1, 1, 10));
        },
        "max(NO_O_ID)",
    );
    broken(
        &|s| {
            s.insert(keys::order(1, 1, 3), Bytes::from_static(b"junk"));
        },
        "corrupt",
    );
}
