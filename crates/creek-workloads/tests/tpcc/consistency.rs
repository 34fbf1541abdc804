//! The consistency conditions of clause 3.3.2 under generated load, and
//! argument checking.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;
use creek_workloads::tpcc::rows::{self, Customer, History, Order, OrderLine};
use creek_workloads::tpcc::{self, check, delivery, keys, load, new_order};

use super::*;

#[test]
fn malformed_arguments_are_refused() {
    let db = Db::new(&TINY, 1);
    let refused = |name: &str, args: Bytes| {
        db.reg
            .check(
                &ProcCall::new(name, args),
                &creek_exec::TxnLimits::default(),
            )
            .is_err()
    };
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

/// Run `runs` generated transactions (one terminal per warehouse, in turn)
/// against `db`; returns the calls per procedure, the New-Order rollbacks
/// and the Payments.
fn run_mix(db: &mut Db, runs: usize) -> (BTreeMap<&'static str, u32>, u32, u32) {
    let mut terminals = tiny_terminals(db, 99, 1000);
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    let (mut rollbacks, mut payments) = (0u32, 0u32);
    for n in 0..runs {
        let t = n % terminals.len();
        let call = terminals[t].next(2000 + n as i64);
        *counts.entry(call.name).or_default() += 1;
        payments += u32::from(call.is_payment());
        let ex = db.exec(call.name, call.args);
        match ex.outcome {
            Ok(_) => {}
            Err(e) if e.0 == new_order::UNUSED_ITEM => rollbacks += 1,
            Err(e) => panic!("{} aborted: {e}", call.name),
        }
    }
    (counts, rollbacks, payments)
}

#[test]
fn generated_mix_keeps_the_database_consistent() {
    let mut db = Db::new(&TINY, 31);
    let runs = 3000;
    let (counts, rollbacks, payments) = run_mix(&mut db, runs);
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
    // Payments reached every W_YTD shard, each through its own district.
    for w in 1..=TINY.warehouses {
        assert!(db.w_ytd(w) > 2 * load::D_YTD_AT_LOAD);
        for d in 1..=TINY.districts_per_warehouse {
            let shard = db.ytd(keys::warehouse_ytd_shard(w, d));
            assert!(
                shard > load::W_YTD_SHARD_AT_LOAD,
                "warehouse {w} district {d}"
            );
            assert_eq!(shard, db.ytd(keys::district_ytd(w, d)));
        }
    }
}

/// A consistent state after a generated mix that exercised the paths the
/// conditions 5 to 12 follow: remote payments, and deliveries of orders
/// with non-zero amounts.
fn mixed_state() -> BTreeMap<Bytes, Bytes> {
    let mut db = Db::new(&TINY, 51);
    run_mix(&mut db, 600);
    let violations = check::consistency(&db.state);
    assert!(violations.is_empty(), "{violations:?}");
    let remote_payment = payment_history(&db.state)
        .iter()
        .any(|(_, h)| (h.w_id, h.d_id) != (h.c_w_id, h.c_d_id));
    assert!(remote_payment, "the mix made a remote payment");
    let delivered_amounts = db.state.iter().any(|(k, v)| {
        k[1] == keys::tag::CUSTOMER
            && Customer::decode(v).is_ok_and(|c| c.balance + c.ytd_payment > 0)
    });
    assert!(delivered_amounts, "the mix delivered an order with amounts");
    db.state
}

/// Payment's history rows (payment number 2 and up), by key.
fn payment_history(state: &BTreeMap<Bytes, Bytes>) -> Vec<(Bytes, History)> {
    state
        .iter()
        .filter(|(k, _)| {
            k.len() == 13
                && k[1] == keys::tag::HISTORY
                && u32::from_be_bytes([k[9], k[10], k[11], k[12]]) > load::LOAD_PAYMENT_NO
        })
        .map(|(k, v)| (k.clone(), History::decode(v).expect("history row")))
        .collect()
}

/// The conditions `edit` breaks in [`mixed_state`], by their `[…]` tags.
fn broken_by(edit: impl FnOnce(&mut BTreeMap<Bytes, Bytes>)) -> BTreeSet<String> {
    let mut state = mixed_state();
    edit(&mut state);
    let violations = check::consistency(&state);
    let named: BTreeSet<String> = violations
        .iter()
        .filter_map(|v| Some(v.strip_prefix('[')?.split_once(']')?.0.to_string()))
        .collect();
    assert!(
        violations.iter().all(|v| v.starts_with('[')),
        "every violation names its condition: {violations:?}"
    );
    named
}

/// The `[…]` tags of `violations`, in order; `"-"` for an untagged one.
fn broken_tags(violations: &[String]) -> Vec<&str> {
    violations
        .iter()
        .map(|v| {
            v.strip_prefix('[')
                .and_then(|r| r.split_once(']'))
                .map_or("-", |(t, _)| t)
        })
        .collect()
}

fn conditions(numbers: &[u8]) -> BTreeSet<String> {
    numbers.iter().map(|n| format!("3.3.2.{n}")).collect()
}

fn edit_row<T>(
    state: &mut BTreeMap<Bytes, Bytes>,
    key: Bytes,
    decode: fn(&Bytes) -> Result<T, creek_exec::Abort>,
    encode: fn(&T) -> Bytes,
    change: impl FnOnce(&mut T),
) {
    let mut row = decode(&state[&key]).expect("row decodes");
    change(&mut row);
    state.insert(key, encode(&row));
}

/// The oldest undelivered order of warehouse 1 district 1.
fn undelivered_order(state: &BTreeMap<Bytes, Bytes>) -> u32 {
    let head = rows::decode_id(&state[&keys::new_order_head(1, 1)]).expect("head");
    assert!(state.contains_key(&keys::new_order(1, 1, head)));
    head
}

#[test]
fn condition_5_a_carrier_on_an_undelivered_order_is_reported() {
    let broken = broken_by(|s| {
        let o = undelivered_order(s);
        edit_row(s, keys::order(1, 1, o), Order::decode, Order::encode, |r| {
            r.carrier_id = 4
        });
    });
    // Its lines are still undelivered, which condition 7 sees too.
    assert_eq!(broken, conditions(&[5, 7]));
}

#[test]
fn condition_6_an_ol_cnt_off_by_one_is_reported() {
    let broken = broken_by(|s| {
        edit_row(s, keys::order(1, 2, 3), Order::decode, Order::encode, |r| {
            r.ol_cnt += 1
        });
    });
    assert_eq!(broken, conditions(&[4, 6]));
}

#[test]
fn condition_7_an_undelivered_line_of_a_delivered_order_is_reported() {
    // Order 2 was delivered at load, with zero amounts: only the date
    // changes what any condition sees.
    let broken = broken_by(|s| {
        edit_row(
            s,
            keys::order_line(2, 1, 2, 1),
            OrderLine::decode,
            OrderLine::encode,
            |r| r.delivery_d = 0,
        );
    });
    assert_eq!(broken, conditions(&[7]));
}

/// Add `cents` to a W_YTD shard or a D_YTD record.
fn add_to_ytd(state: &mut BTreeMap<Bytes, Bytes>, key: Bytes, cents: i64) {
    let ytd = rows::decode_ytd(&state[&key]).expect("YTD record decodes");
    state.insert(key, rows::encode_ytd(ytd + cents));
}

/// W_YTD is the sum of its shards, so a shard off by a cent is a W_YTD
/// off by a cent; condition 1 sees it too, as it would a Payment that
/// updated D_YTD and not the shard; so does our own per-shard condition.
#[test]
fn condition_8_a_warehouse_ytd_shard_off_by_a_cent_is_reported() {
    let broken = broken_by(|s| add_to_ytd(s, keys::warehouse_ytd_shard(2, 1), 1));
    let mut expected = conditions(&[1, 8]);
    expected.insert("shard".into());
    assert_eq!(broken, expected);
}

/// A payment booked into the wrong shard of the right warehouse keeps the
/// warehouse's sum: only the per-shard condition sees it.
#[test]
fn a_payment_booked_into_another_shard_of_its_warehouse_is_reported() {
    let broken = broken_by(|s| {
        add_to_ytd(s, keys::warehouse_ytd_shard(2, 1), -1);
        add_to_ytd(s, keys::warehouse_ytd_shard(2, 2), 1);
    });
    assert_eq!(broken, BTreeSet::from(["shard".to_string()]));
}

#[test]
fn condition_9_a_district_ytd_off_by_a_cent_is_reported() {
    let broken = broken_by(|s| add_to_ytd(s, keys::district_ytd(2, 1), 1));
    // W_YTD no longer equals the districts' sum either.
    assert_eq!(broken, conditions(&[1, 9]));
}

#[test]
fn condition_9_a_payment_booked_to_the_wrong_district_is_reported() {
    // The warehouse total stands; the two districts' do not, nor do their
    // W_YTD shards.
    let broken = broken_by(|s| {
        let (key, _) = payment_history(s).remove(0);
        edit_row(s, key, History::decode, History::encode, |h| {
            h.d_id = 3 - h.d_id
        });
    });
    let mut expected = conditions(&[9]);
    expected.insert("shard".into());
    assert_eq!(broken, expected);
}

#[test]
fn condition_10_a_payment_of_the_wrong_customer_is_reported() {
    let broken = broken_by(|s| {
        let (key, _) = payment_history(s).remove(0);
        edit_row(s, key, History::decode, History::encode, |h| {
            h.c_id = h.c_id % i64::from(TINY.customers_per_district) + 1
        });
    });
    assert_eq!(broken, conditions(&[10]));
}

#[test]
fn condition_11_a_missing_delivered_order_is_reported() {
    // Order 2 of warehouse 1 district 2 was delivered at load.
    let broken = broken_by(|s| {
        s.remove(&keys::order(1, 2, 2));
    });
    // Its lines lose their order (4 and 6); the order count drops (11).
    assert_eq!(broken, conditions(&[4, 6, 11]));
}

#[test]
fn condition_12_a_ytd_payment_off_by_a_cent_is_reported() {
    let broken = broken_by(|s| {
        edit_row(
            s,
            keys::customer(1, 1, 1),
            Customer::decode,
            Customer::encode,
            |c| c.ytd_payment += 1,
        );
    });
    assert_eq!(broken, conditions(&[12]));
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
    broken(&|s| add_to_ytd(s, keys::district_ytd(1, 2), 1), "W_YTD");
    broken(
        &|s| {
            let key = keys::district_next_o_id(1, 2);
            let next = rows::decode_next_o_id(&s[&key]).expect("D_NEXT_O_ID");
            s.insert(key, rows::encode_next_o_id(next + 1));
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

/// W_YTD and D_YTD live in records of their own (`tpcc` module docs,
/// Physical layout), W_YTD as one shard per district; a missing, corrupt or
/// malformed one is reported by name, and the conditions that need it are
/// not checked for its warehouse or district.
#[test]
fn missing_and_malformed_ytd_records_are_reported() {
    let db = Db::new(&TINY, 41);
    assert!(check::consistency(&db.state).is_empty());
    let violations = |edit: &dyn Fn(&mut BTreeMap<Bytes, Bytes>)| {
        let mut state = db.state.clone();
        edit(&mut state);
        check::consistency(&state)
    };
    // Without one of its shards the warehouse has no W_YTD: conditions 1
    // and 8 are not checked for it.
    assert_eq!(
        violations(&|s| {
            s.remove(&keys::warehouse_ytd_shard(2, 1));
        }),
        ["warehouse 2 district 1: no W_YTD shard record"]
    );
    assert_eq!(
        violations(&|s| {
            s.remove(&keys::district_ytd(1, 2));
        }),
        ["warehouse 1 district 2: no D_YTD record"]
    );
    let junk = Bytes::from_static(b"junk");
    assert_eq!(
        violations(&|s| {
            s.insert(keys::district_ytd(1, 2), junk.clone());
        }),
        [
            format!("corrupt YTD record at {:?}", keys::district_ytd(1, 2)),
            "warehouse 1 district 2: no D_YTD record".to_string(),
        ]
    );
    let shard = keys::warehouse_ytd_shard(1, 2);
    assert_eq!(
        violations(&|s| {
            s.insert(shard.clone(), junk.clone());
        }),
        [
            format!("corrupt YTD record at {shard:?}"),
            "warehouse 1 district 2: no W_YTD shard record".to_string(),
        ]
    );
    // YTD keys one byte too long, and a W_YTD key without its district
    // (one record per warehouse, not a shard).
    let long = Bytes::from([keys::district_ytd(1, 2).as_ref(), &[0]].concat());
    assert_eq!(
        violations(&|s| {
            s.insert(long.clone(), rows::encode_ytd(0));
        }),
        [format!("malformed key {long:?}")]
    );
    let long = Bytes::from([shard.as_ref(), &[0]].concat());
    let short = shard.slice(..shard.len() - 1);
    assert_eq!(
        violations(&|s| {
            s.insert(long.clone(), rows::encode_ytd(0));
            s.insert(short.clone(), rows::encode_ytd(0));
        }),
        [
            format!("malformed key {short:?}"),
            format!("malformed key {long:?}")
        ]
    );
    // One shard per district that exists: a shard of a district or a
    // warehouse that has no row is reported, and counts for no W_YTD.
    assert_eq!(
        violations(&|s| {
            s.insert(keys::warehouse_ytd_shard(1, 3), rows::encode_ytd(0));
        }),
        ["warehouse 1 district 3: records without a district"]
    );
    assert_eq!(
        violations(&|s| {
            s.insert(keys::warehouse_ytd_shard(3, 1), rows::encode_ytd(0));
        }),
        ["warehouse 3 district 1: records without a district"]
    );
    assert_eq!(
        violations(&|s| {
            s.remove(&keys::warehouse(1));
        }),
        ["warehouse 1: records without a warehouse"]
    );

    // Payment needs both records of its district: without one it aborts
    // and writes nothing.
    let input = tpcc::payment::Input {
        w_id: 1,
        d_id: 1,
        c_w_id: 1,
        c_d_id: 1,
        customer: tpcc::CustomerSelector::Id(1),
        amount: 100,
        date: 1,
    };
    for (key, what) in [
        (keys::district_ytd(1, 1), "D_YTD"),
        (keys::warehouse_ytd_shard(1, 1), "W_YTD shard"),
    ] {
        let mut db = Db::new(&TINY, 41);
        db.state.remove(&key);
        let ex = db.exec(tpcc::PAYMENT, input.encode());
        assert_eq!(
            ex.outcome.map_err(|e| e.0),
            Err(format!("{what} not found"))
        );
        assert!(ex.writes.is_empty());
        // The other district's shard is enough for a Payment made there.
        let there = tpcc::payment::Input {
            d_id: 2,
            ..input.clone()
        };
        assert!(db.exec(tpcc::PAYMENT, there.encode()).outcome.is_ok());
    }
}

/// D_NEXT_O_ID lives in a record of its own too (`tpcc` module docs,
/// Physical layout); a missing, corrupt or malformed one is reported like
/// the YTD records, and the conditions that need it are not checked for
/// its district.
#[test]
fn missing_and_malformed_next_o_id_records_are_reported() {
    let db = Db::new(&TINY, 41);
    assert!(check::consistency(&db.state).is_empty());
    let violations = |edit: &dyn Fn(&mut BTreeMap<Bytes, Bytes>)| {
        let mut state = db.state.clone();
        edit(&mut state);
        check::consistency(&state)
    };
    let key = keys::district_next_o_id(1, 2);
    // Conditions 3, 4, 11 and the head index need no D_NEXT_O_ID while
    // the district has new-orders, and still hold.
    assert_eq!(
        violations(&|s| {
            s.remove(&key);
        }),
        ["warehouse 1 district 2: no D_NEXT_O_ID record"]
    );
    assert_eq!(
        violations(&|s| {
            s.insert(key.clone(), Bytes::from_static(b"junk"));
        }),
        [
            format!("corrupt D_NEXT_O_ID record at {key:?}"),
            "warehouse 1 district 2: no D_NEXT_O_ID record".to_string(),
        ]
    );
    // A negative id is no order id.
    assert_eq!(
        violations(&|s| {
            s.insert(key.clone(), rows::encode_ytd(-1));
        }),
        [
            format!("corrupt D_NEXT_O_ID record at {key:?}"),
            "warehouse 1 district 2: no D_NEXT_O_ID record".to_string(),
        ]
    );
    let long = Bytes::from([key.as_ref(), &[0]].concat());
    assert_eq!(
        violations(&|s| {
            s.insert(long.clone(), rows::encode_next_o_id(11));
        }),
        [format!("malformed key {long:?}")]
    );
    assert_eq!(
        violations(&|s| {
            s.insert(keys::district_next_o_id(1, 3), rows::encode_next_o_id(1));
        }),
        ["warehouse 1 district 3: records without a district"]
    );
    // Without its row the district leaves its warehouse's sums: its W_YTD
    // shard and its D_YTD together, so conditions 1 and 8 still hold for
    // the districts left.
    assert_eq!(
        violations(&|s| {
            s.remove(&keys::district(1, 2));
        }),
        ["warehouse 1 district 2: records without a district"]
    );
    // Unless the two disagreed: then condition 1 (and 8) see it.
    let v = violations(&|s| {
        s.remove(&keys::district(1, 2));
        add_to_ytd(s, keys::warehouse_ytd_shard(1, 1), 1);
    });
    // (and the shard's own condition, reported with district 1 first).
    assert_eq!(v[1], "warehouse 1 district 2: records without a district");
    let mut tags = broken_tags(&v);
    tags.remove(1);
    assert_eq!(tags, ["shard", "3.3.2.1", "3.3.2.8"]);

    // New-Order and Stock-Level need the record: without it they abort
    // and write nothing.
    let mut db = hand_state();
    db.state.remove(&keys::district_next_o_id(1, 2));
    let ex = db.exec(tpcc::NEW_ORDER, hand_order(1).encode());
    assert_eq!(
        ex.outcome.map_err(|e| e.0),
        Err("D_NEXT_O_ID not found".to_string())
    );
    assert!(ex.writes.is_empty());
    let input = tpcc::stock_level::Input {
        w_id: 1,
        d_id: 2,
        threshold: 10,
    };
    let ex = db.exec(tpcc::STOCK_LEVEL, input.encode());
    assert_eq!(
        ex.outcome.map_err(|e| e.0),
        Err("D_NEXT_O_ID not found".to_string())
    );
}

/// With every order of a district delivered, conditions 11 and the head
/// index compare against D_NEXT_O_ID; without the record they are not
/// checked, and only the missing record is reported.
#[test]
fn a_drained_district_without_next_o_id_reports_only_the_record() {
    let mut db = Db::new(&TINY, 41);
    let input = delivery::Input {
        w_id: 1,
        carrier_id: 1,
        delivery_d: 5,
        districts: 2,
    };
    for _ in TINY.first_undelivered()..=TINY.orders_per_district {
        db.ok(tpcc::DELIVERY, input.encode());
    }
    assert!(!db
        .state
        .keys()
        .any(|k| k[1] == keys::tag::NEW_ORDER && k[2..5] == [0, 1, 2]));
    assert!(check::consistency(&db.state).is_empty());
    let mut state = db.state.clone();
    let key = keys::district_next_o_id(1, 2);
    let next = rows::decode_next_o_id(&state[&key]).expect("D_NEXT_O_ID");
    state.insert(key.clone(), rows::encode_next_o_id(next + 1));
    let v = check::consistency(&state);
    for tag in ["[3.3.2.2]", "[3.3.2.11]", "[head]"] {
        assert!(v.iter().any(|s| s.starts_with(tag)), "{tag}: {v:?}");
    }
    state.remove(&key);
    assert_eq!(
        check::consistency(&state),
        ["warehouse 1 district 2: no D_NEXT_O_ID record"]
    );
}
