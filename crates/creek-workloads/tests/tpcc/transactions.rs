//! Each transaction against a hand-checked case.

use std::collections::BTreeSet;

use bytes::Bytes;
use creek_exec::{ProcCall, TxnLimits};
use creek_procs::execute_call;
use creek_types::value::Value;
use creek_workloads::tpcc::rows::{
    self, Customer, District, History, Order, OrderLine, Stock, Warehouse,
};
use creek_workloads::tpcc::{
    self, check, delivery, keys, new_order, order_status, payment, stock_level, CustomerSelector,
    TpccScale,
};

use super::*;

#[test]
fn new_order_hand_checked() {
    let mut db = hand_state();
    let before = db.state.clone();
    let result = db.ok(tpcc::NEW_ORDER, hand_order(1).encode());
    // Amounts 6×200 + 3×1000 + 2×200 = 4600 cents; ×0.9 discount ×1.15 tax.
    let list = result.as_list().expect("list").to_vec();
    assert_eq!(list[0], Value::Int(11));
    assert_eq!(list[1], Value::Int(4761));
    assert_eq!(list[2], Value::from("BGG"));

    assert_eq!(db.next_o_id(1, 2), 12);
    let order = db.row(keys::order(1, 2, 11), Order::decode);
    assert_eq!(
        (
            order.c_id,
            order.entry_d,
            order.carrier_id,
            order.ol_cnt,
            order.all_local
        ),
        (3, 777, 0, 3, 0)
    );
    assert!(db.state.contains_key(&keys::new_order(1, 2, 11)));
    let last = db.state.get(&keys::customer_last_order(1, 2, 3)).cloned();
    assert_eq!(last.map(|b| rows::decode_id(&b)), Some(Ok(11)));

    // 15 < 6 + 10, so the stock is replenished: 15 − 6 + 91.
    let s = db.row(keys::stock(1, 1), Stock::decode);
    assert_eq!(
        (s.quantity, s.ytd, s.order_cnt, s.remote_cnt),
        (100, 6, 1, 0)
    );
    let s = db.row(keys::stock(1, 2), Stock::decode);
    assert_eq!(
        (s.quantity, s.ytd, s.order_cnt, s.remote_cnt),
        (47, 3, 1, 0)
    );
    let s = db.row(keys::stock(2, 1), Stock::decode);
    assert_eq!(
        (s.quantity, s.ytd, s.order_cnt, s.remote_cnt),
        (10, 2, 1, 1)
    );

    let lines: Vec<OrderLine> = (1..=3)
        .map(|ol| db.row(keys::order_line(1, 2, 11, ol), OrderLine::decode))
        .collect();
    let got: Vec<(i64, i64, i64, i64, i64)> = lines
        .iter()
        .map(|l| (l.i_id, l.supply_w_id, l.quantity, l.amount, l.delivery_d))
        .collect();
    assert_eq!(
        got,
        [(1, 1, 6, 1200, 0), (2, 1, 3, 3000, 0), (1, 2, 2, 400, 0)]
    );
    assert!(lines.iter().all(|l| l.dist_info == "dist-02"));
    assert!(!db.state.contains_key(&keys::order_line(1, 2, 11, 4)));
    // Exactly the records above changed: D_NEXT_O_ID, order, new-order,
    // index, three stocks, three lines; the district row was only read.
    let changed: Vec<Bytes> = db
        .state
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(changed.len(), 10);
    assert!(changed.contains(&keys::district_next_o_id(1, 2)));
    assert!(!changed.contains(&keys::district(1, 2)));
    assert!(check::consistency(&db.state).is_empty());
}

#[test]
fn new_order_on_unused_item_rolls_back_and_writes_nothing() {
    let mut db = hand_state();
    let ex = db.exec(tpcc::NEW_ORDER, hand_order(TINY.items + 1).encode());
    assert_eq!(
        ex.outcome.map_err(|e| e.0),
        Err(new_order::UNUSED_ITEM.to_string())
    );
    assert!(ex.writes.is_empty());
    assert_eq!(db.next_o_id(1, 2), 11);
    // The next order still gets the id the rolled-back one would have had.
    let result = db.ok(tpcc::NEW_ORDER, hand_order(1).encode());
    assert_eq!(result.as_list().map(|l| l[0].clone()), Some(Value::Int(11)));
}

#[test]
fn payment_by_last_name_picks_the_middle_customer_and_updates_totals() {
    let mut db = Db::new(&TINY, 9);
    let last = shared_last_name(&mut db);
    let mut c = db.row(keys::customer(1, 1, 1), Customer::decode);
    c.credit = Bytes::from_static(b"BC");
    c.data = Bytes::from_static(b"old data");
    db.set(keys::customer(1, 1, 1), c.clone().encode());
    let before = db.state.clone();
    let w_ytd = db.w_ytd(1);
    let [shard_1, shard_2] = [1, 2].map(|d| db.ytd(keys::warehouse_ytd_shard(1, d)));
    let d_ytd = db.ytd(keys::district_ytd(1, 1));

    let input = payment::Input {
        w_id: 1,
        d_id: 1,
        c_w_id: 1,
        c_d_id: 1,
        customer: CustomerSelector::LastName(last),
        amount: 1234,
        date: 4242,
    };
    // Four customers sorted ALF, BOB, CAT, ZED: position ceil(4/2) = 2 is BOB.
    let result = db.ok(tpcc::PAYMENT, input.encode());
    assert_eq!(ints(&result), [1, c.balance - 1234]);

    // W_YTD grows by the amount, in the shard of the district paid in.
    assert_eq!(db.w_ytd(1), w_ytd + 1234);
    assert_eq!(db.ytd(keys::warehouse_ytd_shard(1, 1)), shard_1 + 1234);
    assert_eq!(db.ytd(keys::warehouse_ytd_shard(1, 2)), shard_2);
    assert_eq!(db.ytd(keys::district_ytd(1, 1)), d_ytd + 1234);
    let w = db.row(keys::warehouse(1), Warehouse::decode);
    let d = db.row(keys::district(1, 1), District::decode);
    let after = db.row(keys::customer(1, 1, 1), Customer::decode);
    assert_eq!(after.balance, -1000 - 1234);
    assert_eq!(after.ytd_payment, 1000 + 1234);
    assert_eq!(after.payment_cnt, 2);
    assert_eq!(after.data, "1 1 1 1 1 12.34 old data");
    let h = db.row(keys::history(1, 1, 1, 2), History::decode);
    assert_eq!(
        (h.c_id, h.d_id, h.w_id, h.date, h.amount),
        (1, 1, 1, 4242, 1234)
    );
    let mut h_data = w.name.to_vec();
    h_data.extend_from_slice(b"    ");
    h_data.extend_from_slice(&d.name);
    assert_eq!(h.data, h_data);
    // Exactly the district's W_YTD shard, its D_YTD, the customer and the
    // new history row changed; the warehouse and district rows were only
    // read.
    let changed: Vec<Bytes> = db
        .state
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect();
    let mut expected = vec![
        keys::warehouse_ytd_shard(1, 1),
        keys::district_ytd(1, 1),
        keys::customer(1, 1, 1),
        keys::history(1, 1, 1, 2),
    ];
    expected.sort();
    assert_eq!(changed, expected);
    assert!(check::consistency(&db.state).is_empty());
}

#[test]
fn remote_payment_by_id_pays_the_remote_customer_to_the_home_warehouse() {
    let mut db = Db::new(&TINY, 9);
    let mut c = db.row(keys::customer(2, 2, 5), Customer::decode);
    c.credit = Bytes::from_static(b"GC");
    db.set(keys::customer(2, 2, 5), c.clone().encode());
    let ytd = |db: &Db| {
        [
            db.w_ytd(1),
            db.ytd(keys::warehouse_ytd_shard(1, 2)),
            db.ytd(keys::district_ytd(1, 2)),
            db.w_ytd(2),
            db.ytd(keys::warehouse_ytd_shard(2, 2)),
            db.ytd(keys::district_ytd(2, 2)),
        ]
    };
    let [w1, s12, d12, w2, s22, d22] = ytd(&db);
    let input = payment::Input {
        w_id: 1,
        d_id: 2,
        c_w_id: 2,
        c_d_id: 2,
        customer: CustomerSelector::Id(5),
        amount: 500,
        date: 1,
    };
    db.ok(tpcc::PAYMENT, input.encode());
    let after = db.row(keys::customer(2, 2, 5), Customer::decode);
    assert_eq!((after.balance, after.payment_cnt), (c.balance - 500, 2));
    assert_eq!(after.data, c.data, "good credit keeps C_DATA");
    // The terminal's warehouse and district are paid, not the customer's.
    assert_eq!(ytd(&db), [w1 + 500, s12 + 500, d12 + 500, w2, s22, d22]);
    let h = db.row(keys::history(2, 2, 5, 2), History::decode);
    assert_eq!((h.c_w_id, h.c_d_id, h.w_id, h.d_id), (2, 2, 1, 2));
    assert!(check::consistency(&db.state).is_empty());
}

/// The keys a transaction reads and the keys it writes.
type Footprint = (BTreeSet<Bytes>, BTreeSet<Bytes>);

/// Execute `name` against `db`'s state without applying its writes.
fn footprint(db: &Db, name: &str, args: Bytes) -> Footprint {
    let call = ProcCall::new(name, args);
    let ex = execute_call(&db.reg, &Snap(&db.state), TxnLimits::default(), &call);
    assert!(ex.outcome.is_ok(), "{name}: {:?}", ex.outcome);
    let reads = ex.reads.into_iter().map(|(k, _)| k).collect();
    let writes = ex.writes.into_iter().map(|(k, _)| k).collect();
    (reads, writes)
}

/// The records one of two transactions writes and the other reads or
/// writes: what per-key conflict detection makes them conflict on.
fn shared((a_reads, a_writes): &Footprint, (b_reads, b_writes): &Footprint) -> Vec<Bytes> {
    let a_touches: BTreeSet<Bytes> = a_reads.union(a_writes).cloned().collect();
    let b_touches: BTreeSet<Bytes> = b_reads.union(b_writes).cloned().collect();
    let mut shared: BTreeSet<Bytes> = a_writes.intersection(&b_touches).cloned().collect();
    shared.extend(b_writes.intersection(&a_touches).cloned());
    shared.into_iter().collect()
}

/// A local Payment of 1.00 by customer `c_id` of district `d_id` of
/// warehouse 1.
fn local_payment(d_id: u8, c_id: u32) -> payment::Input {
    payment::Input {
        w_id: 1,
        d_id,
        c_w_id: 1,
        c_d_id: d_id,
        customer: CustomerSelector::Id(c_id),
        amount: 100,
        date: 1,
    }
}

/// The point of the physical layout (`tpcc` module docs, Physical
/// layout): the executor detects conflicts per key, and a New-Order and a
/// Payment of the same district for different customers touch no common
/// record that either writes. Both only read the warehouse and district
/// rows; Payment writes the district's W_YTD shard and its D_YTD,
/// New-Order D_NEXT_O_ID. For the same customer they do conflict, on the
/// customer row.
#[test]
fn payment_and_new_order_of_one_district_share_no_written_record() {
    let db = hand_state();
    // New-Order for customer 3 of warehouse 1 district 2; a local Payment
    // by customer 5 of the same district.
    let new_order = footprint(&db, tpcc::NEW_ORDER, hand_order(1).encode());
    let payment = footprint(&db, tpcc::PAYMENT, local_payment(2, 5).encode());
    let (no_reads, no_writes) = &new_order;
    let (p_reads, p_writes) = &payment;

    // Both read both rows; neither writes them.
    for row in [keys::warehouse(1), keys::district(1, 2)] {
        assert!(no_reads.contains(&row) && p_reads.contains(&row));
        assert!(!no_writes.contains(&row) && !p_writes.contains(&row));
    }
    for ytd in [keys::warehouse_ytd_shard(1, 2), keys::district_ytd(1, 2)] {
        assert!(p_writes.contains(&ytd));
        assert!(!no_reads.contains(&ytd));
    }
    let next_o_id = keys::district_next_o_id(1, 2);
    assert!(no_writes.contains(&next_o_id));
    assert!(!p_reads.contains(&next_o_id));
    assert_eq!(shared(&new_order, &payment), Vec::<Bytes>::new());

    // The same customer is the one exception.
    let same_customer = footprint(&db, tpcc::PAYMENT, local_payment(2, 3).encode());
    assert_eq!(
        shared(&new_order, &same_customer),
        [keys::customer(1, 2, 3)]
    );
}

/// The point of sharding W_YTD (`tpcc` module docs, W_YTD is a sharded
/// counter): two Payments made in different districts of one warehouse
/// write no common record, so they do not conflict; in one district they
/// still share that district's W_YTD shard and D_YTD.
#[test]
fn payments_in_different_districts_of_one_warehouse_share_no_written_record() {
    let db = Db::new(&TINY, 9);
    let in_1 = footprint(&db, tpcc::PAYMENT, local_payment(1, 5).encode());
    let in_2 = footprint(&db, tpcc::PAYMENT, local_payment(2, 5).encode());
    // Each writes its own district's shard and neither touches the other's.
    let (reads_1, writes_1) = &in_1;
    let (reads_2, writes_2) = &in_2;
    assert!(writes_1.contains(&keys::warehouse_ytd_shard(1, 1)));
    assert!(writes_2.contains(&keys::warehouse_ytd_shard(1, 2)));
    assert!(!reads_1.contains(&keys::warehouse_ytd_shard(1, 2)));
    assert!(!reads_2.contains(&keys::warehouse_ytd_shard(1, 1)));
    // Both read the warehouse row, and only read it.
    assert!(reads_1.contains(&keys::warehouse(1)) && reads_2.contains(&keys::warehouse(1)));
    assert_eq!(shared(&in_1, &in_2), Vec::<Bytes>::new());

    // A remote Payment made in district 2 for a customer of district 1
    // shares nothing with a local one in district 1 either.
    let remote = payment::Input {
        c_w_id: 2,
        c_d_id: 1,
        ..local_payment(2, 5)
    };
    let remote = footprint(&db, tpcc::PAYMENT, remote.encode());
    assert_eq!(shared(&in_1, &remote), Vec::<Bytes>::new());

    // In one district, for different customers, they conflict on the
    // district's YTD records only.
    let also_in_1 = footprint(&db, tpcc::PAYMENT, local_payment(1, 6).encode());
    let mut expected = vec![keys::warehouse_ytd_shard(1, 1), keys::district_ytd(1, 1)];
    expected.sort();
    assert_eq!(shared(&in_1, &also_in_1), expected);
}

#[test]
fn order_status_reports_the_customers_last_order() {
    let mut db = hand_state();
    db.ok(tpcc::NEW_ORDER, hand_order(1).encode());
    let input = order_status::Input {
        w_id: 1,
        d_id: 2,
        customer: CustomerSelector::Id(3),
    };
    let ex = db.exec(tpcc::ORDER_STATUS, input.encode());
    assert!(ex.writes.is_empty());
    let v = Value::decode(&ex.outcome.expect("ok")).expect("decodes");
    let fields = v.as_list().expect("list");
    let balance = db.row(keys::customer(1, 2, 3), Customer::decode).balance;
    assert_eq!(fields[..5], [3, balance, 11, 777, 0].map(Value::Int));
    let lines: Vec<Vec<i64>> = fields[5]
        .as_list()
        .expect("lines")
        .iter()
        .map(ints)
        .collect();
    assert_eq!(
        lines,
        [
            vec![1, 1, 6, 1200, 0],
            vec![2, 1, 3, 3000, 0],
            vec![1, 2, 2, 400, 0]
        ]
    );

    // A customer without orders (10 orders among 12 customers).
    let mut db = Db::new(&TINY, 9);
    let lonely = (1..=12u32)
        .find(|c| !db.state.contains_key(&keys::customer_last_order(1, 1, *c)))
        .expect("two customers have no order");
    let input = order_status::Input {
        w_id: 1,
        d_id: 1,
        customer: CustomerSelector::Id(lonely),
    };
    let v = db.ok(tpcc::ORDER_STATUS, input.encode());
    let fields = v.as_list().expect("list");
    assert_eq!(
        fields[2..],
        [
            Value::Int(0),
            Value::Int(0),
            Value::Int(0),
            Value::List(vec![])
        ]
    );

    // By last name, through the index; every customer has an order here.
    let scale = TpccScale {
        orders_per_district: 12,
        ..TINY
    };
    let mut db = Db::new(&scale, 9);
    let last = shared_last_name(&mut db);
    let input = order_status::Input {
        w_id: 1,
        d_id: 1,
        customer: CustomerSelector::LastName(last),
    };
    let v = db.ok(tpcc::ORDER_STATUS, input.encode());
    let fields = v.as_list().expect("list");
    assert_eq!(fields[0], Value::Int(1));
    let o_id = fields[2].as_int().expect("o_id");
    let order = db.row(keys::order(1, 1, o_id as u32), Order::decode);
    assert_eq!(order.c_id, 1);
    let lines = fields[5].as_list().expect("lines");
    assert_eq!(lines.len() as i64, order.ol_cnt);
}

#[test]
fn delivery_delivers_the_oldest_order_of_every_district() {
    let mut db = Db::new(&TINY, 11);
    // 10 orders: 1..=7 delivered at load, 8..=10 waiting.
    assert_eq!(TINY.first_undelivered(), 8);
    let order = db.row(keys::order(1, 2, 8), Order::decode);
    let customer_key = keys::customer(1, 2, order.c_id as u32);
    let before = db.row(customer_key.clone(), Customer::decode);
    let total: i64 = (1..=order.ol_cnt)
        .map(|ol| {
            db.row(keys::order_line(1, 2, 8, ol as u8), OrderLine::decode)
                .amount
        })
        .sum();
    assert!(total > 0);

    let input = delivery::Input {
        w_id: 1,
        carrier_id: 7,
        delivery_d: 5555,
        districts: 2,
    };
    assert_eq!(ints(&db.ok(tpcc::DELIVERY, input.encode())), [8, 8]);
    assert!(!db.state.contains_key(&keys::new_order(1, 2, 8)));
    assert!(db.state.contains_key(&keys::new_order(1, 2, 9)));
    assert_eq!(db.row(keys::order(1, 2, 8), Order::decode).carrier_id, 7);
    for ol in 1..=order.ol_cnt {
        let line = db.row(keys::order_line(1, 2, 8, ol as u8), OrderLine::decode);
        assert_eq!(line.delivery_d, 5555);
    }
    let after = db.row(customer_key, Customer::decode);
    assert_eq!(after.balance, before.balance + total);
    assert_eq!(after.delivery_cnt, before.delivery_cnt + 1);
    assert!(check::consistency(&db.state).is_empty());

    assert_eq!(ints(&db.ok(tpcc::DELIVERY, input.encode())), [9, 9]);
    assert_eq!(ints(&db.ok(tpcc::DELIVERY, input.encode())), [10, 10]);
    // Nothing left: the districts are skipped and nothing is written.
    let ex = db.exec(tpcc::DELIVERY, input.encode());
    assert!(ex.writes.is_empty());
    assert_eq!(
        ex.outcome.ok().map(|b| Value::decode(&b)),
        Some(Ok(Value::List(vec![Value::Int(0), Value::Int(0)])))
    );
    assert!(check::consistency(&db.state).is_empty());
    // A new order after a full drain is delivered next.
    let mut db2 = db;
    let no = new_order::Input {
        w_id: 1,
        d_id: 1,
        c_id: 1,
        entry_d: 1,
        lines: vec![new_order::Line {
            i_id: 3,
            supply_w_id: 1,
            quantity: 1,
        }],
    };
    db2.ok(tpcc::NEW_ORDER, no.encode());
    assert_eq!(ints(&db2.ok(tpcc::DELIVERY, input.encode())), [11, 0]);
    assert!(check::consistency(&db2.state).is_empty());
}

#[test]
fn stock_level_counts_distinct_low_items_of_the_last_20_orders() {
    let scale = TpccScale {
        orders_per_district: 25,
        ..TINY
    };
    let mut db = Db::new(&scale, 13);
    // Orders 6..=25 are the last 20 of district (1, 1); collect their items.
    let mut recent = std::collections::BTreeSet::new();
    for o in 6..=25u32 {
        let order = db.row(keys::order(1, 1, o), Order::decode);
        for ol in 1..=order.ol_cnt {
            recent.insert(
                db.row(keys::order_line(1, 1, o, ol as u8), OrderLine::decode)
                    .i_id,
            );
        }
    }
    let mut items = recent.iter().copied();
    let (low_a, low_b) = (
        items.next().expect("an item"),
        items.next().expect("two items"),
    );
    for i in 1..=scale.items {
        let key = keys::stock(1, i);
        let mut s = db.row(key.clone(), Stock::decode);
        // Everything plentiful except two recent items and one item that
        // appears in no recent order.
        s.quantity = if i64::from(i) == low_a || i64::from(i) == low_b {
            9
        } else if !recent.contains(&i64::from(i)) {
            1
        } else {
            50
        };
        db.set(key, s.encode());
    }
    let input = |threshold| stock_level::Input {
        w_id: 1,
        d_id: 1,
        threshold,
    };
    assert_eq!(db.ok(tpcc::STOCK_LEVEL, input(10).encode()), Value::Int(2));
    assert_eq!(db.ok(tpcc::STOCK_LEVEL, input(9).encode()), Value::Int(0));
    assert_eq!(
        db.ok(tpcc::STOCK_LEVEL, input(51).encode()),
        Value::Int(recent.len() as i64)
    );
    let ex = db.exec(tpcc::STOCK_LEVEL, input(10).encode());
    assert!(ex.writes.is_empty());
}

/// Every record a New-Order or Payment reads is among the keys it
/// declares, and every record it writes is one of them or under a declared
/// prefix: what lets it run as an operation across shards.
#[test]
fn new_order_and_payment_touch_only_what_they_declare() {
    use creek_workloads::tpcc::declared::declared;
    let mut db = Db::new(&TINY, 7);
    let mut terminals = tiny_terminals(&db, 5, 77);
    let (mut checked, mut remote) = (0, 0);
    let count = terminals.len();
    for n in 0..600 {
        let call = terminals[n % count].next(3000 + n as i64);
        let proc_call = ProcCall::new(call.name, call.args.clone());
        let state = db.state.clone();
        let by_name = |index: &Bytes| tpcc::customer_of_name_index(state.get(index)?).ok();
        let Some(d) = declared(&proc_call, by_name) else {
            assert!(!matches!(call.name, tpcc::NEW_ORDER | tpcc::PAYMENT));
            continue;
        };
        let homes: BTreeSet<u16> = d.keys.iter().map(|(w, _)| *w).collect();
        remote += usize::from(homes.len() > 1);
        let ex = db.exec(call.name, call.args);
        let is_key = |k: &Bytes| d.keys.iter().any(|(_, key)| key == k);
        // The shard's map it executes under is Creek's, not data.
        let data_reads = ex
            .reads
            .iter()
            .filter(|(k, _)| k != creek_procs::ownership::MAP_KEY);
        for (k, _) in data_reads {
            assert!(is_key(k), "{} read undeclared {k:?}", call.name);
        }
        for (k, _) in &ex.writes {
            let under = d.prefixes.iter().any(|(_, p)| k.starts_with(p));
            assert!(is_key(k) || under, "{} wrote undeclared {k:?}", call.name);
        }
        checked += 1;
    }
    assert!(
        checked > 400 && remote > 10,
        "{checked} checked, {remote} remote"
    );
}
