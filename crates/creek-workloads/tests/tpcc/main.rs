//! TPC-C against small hand-checked cases, executed through
//! `creek_procs::execute_call` on a map-backed snapshot: the transactions,
//! the population, and the consistency conditions.

mod consistency;
mod population;
mod transactions;

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_exec::{Executed, ProcCall, SnapshotRead, TxnLimits, VersionNo};
use creek_procs::{execute_call, Registry};
use creek_types::value::Value;
use creek_workloads::tpcc::rows::{self, Customer, District, Item, Stock, Warehouse};
use creek_workloads::tpcc::{self, keys, load, new_order, NuRandC, Rng, TpccScale};

pub const TINY: TpccScale = TpccScale {
    warehouses: 2,
    districts_per_warehouse: 2,
    customers_per_district: 12,
    items: 30,
    orders_per_district: 10,
};

pub struct Db {
    pub reg: Registry,
    pub state: BTreeMap<Bytes, Bytes>,
    pub load_c: NuRandC,
}

pub struct Snap<'a>(pub &'a BTreeMap<Bytes, Bytes>);

impl SnapshotRead for Snap<'_> {
    fn read(&self, key: &[u8]) -> (Option<Bytes>, VersionNo) {
        (self.0.get(key).cloned(), VersionNo(1))
    }

    fn scan(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes, VersionNo)>) {
        creek_exec::basic::scan_map(self.0, from, to, limit, VersionNo(1), out);
    }
}

impl Db {
    pub fn new(scale: &TpccScale, seed: u64) -> Self {
        let mut reg = Registry::with_builtins();
        tpcc::register(&mut reg);
        let mut state = BTreeMap::new();
        let load_c = load::populate(scale, &mut Rng::new(seed), 1000, |k, v| {
            state.insert(k, v);
        })
        .expect("valid scale");
        Db { reg, state, load_c }
    }

    pub fn exec(&mut self, name: &str, args: Bytes) -> Executed {
        let call = ProcCall::new(name, args);
        assert!(
            self.reg
                .check(&call, &creek_exec::TxnLimits::default())
                .is_ok(),
            "{name} args refused"
        );
        let ex = execute_call(&self.reg, &Snap(&self.state), TxnLimits::default(), &call);
        for (k, v) in &ex.writes {
            match v {
                Some(v) => self.state.insert(k.clone(), v.clone()),
                None => self.state.remove(k),
            };
        }
        ex
    }

    pub fn ok(&mut self, name: &str, args: Bytes) -> Value {
        let ex = self.exec(name, args);
        match ex.outcome {
            Ok(v) => Value::decode(&v).expect("result decodes"),
            Err(e) => panic!("{name} aborted: {e}"),
        }
    }

    fn row<T>(&self, key: Bytes, decode: fn(&Bytes) -> Result<T, creek_exec::Abort>) -> T {
        let raw = self.state.get(&key).expect("row present");
        decode(raw).expect("row decodes")
    }

    /// A W_YTD shard or D_YTD record.
    pub fn ytd(&self, key: Bytes) -> i64 {
        self.row(key, rows::decode_ytd)
    }

    /// The logical W_YTD of warehouse `w`: the sum of its shards.
    pub fn w_ytd(&self, w: u16) -> i64 {
        w_ytd(&self.state, w)
    }

    /// The D_NEXT_O_ID record of district `d` of warehouse `w`.
    pub fn next_o_id(&self, w: u16, d: u8) -> u32 {
        self.row(keys::district_next_o_id(w, d), rows::decode_next_o_id)
    }

    pub fn set(&mut self, key: Bytes, value: Bytes) {
        self.state.insert(key, value);
    }
}

/// The logical W_YTD of warehouse `w` in `state`: the sum of its shards
/// (every `w` record of the warehouse).
pub fn w_ytd(state: &BTreeMap<Bytes, Bytes>, w: u16) -> i64 {
    state
        .iter()
        .filter(|(k, _)| {
            k.len() > 4
                && k[..2] == [keys::PREFIX, keys::tag::WAREHOUSE_YTD_SHARD]
                && k[2..4] == w.to_be_bytes()
        })
        .map(|(_, v)| rows::decode_ytd(v).expect("W_YTD shard decodes"))
        .sum()
}

pub fn ints(v: &Value) -> Vec<i64> {
    v.as_list()
        .expect("list")
        .iter()
        .map(|x| x.as_int().expect("int"))
        .collect()
}

/// Replace the rows New-Order reads with round numbers we can check by hand.
pub fn hand_state() -> Db {
    let mut db = Db::new(&TINY, 5);
    let mut w = db.row(keys::warehouse(1), Warehouse::decode);
    w.tax = 1000; // 10%
    db.set(keys::warehouse(1), w.encode());
    let mut d = db.row(keys::district(1, 2), District::decode);
    d.tax = 500; // 5%
    db.set(keys::district(1, 2), d.encode());
    let mut c = db.row(keys::customer(1, 2, 3), Customer::decode);
    c.discount = 1000; // 10%
    db.set(keys::customer(1, 2, 3), c.encode());
    let item = |price, data: &'static [u8]| Item {
        im_id: 1,
        name: Bytes::from_static(b"item"),
        price,
        data: Bytes::from_static(data),
    };
    db.set(keys::item(1), item(200, b"xxORIGINALxx").encode());
    db.set(keys::item(2), item(1000, b"plain item data").encode());
    let stock = |quantity, data: &'static [u8]| Stock {
        quantity,
        dists: (1..=10)
            .map(|i| Bytes::from(format!("dist-{i:02}")))
            .collect(),
        ytd: 0,
        order_cnt: 0,
        remote_cnt: 0,
        data: Bytes::from_static(data),
    };
    db.set(keys::stock(1, 1), stock(15, b"ORIGINAL stock").encode());
    db.set(keys::stock(1, 2), stock(50, b"plain").encode());
    // Exactly quantity + 10: the boundary of the no-replenish rule.
    db.set(keys::stock(2, 1), stock(12, b"plain").encode());
    db
}

pub fn hand_order(last_item: u32) -> new_order::Input {
    let line = |i_id, supply_w_id, quantity| new_order::Line {
        i_id,
        supply_w_id,
        quantity,
    };
    new_order::Input {
        w_id: 1,
        d_id: 2,
        c_id: 3,
        entry_d: 777,
        lines: vec![line(1, 1, 6), line(2, 1, 3), line(last_item, 2, 2)],
    }
}

/// Give customers 4, 7 and 9 of warehouse 1 district 1 the last name of
/// customer 1, with first names that sort 7 < 1 < 9 < 4.
pub fn shared_last_name(db: &mut Db) -> Bytes {
    let last = tpcc::last_name(0);
    let mut entries = Vec::new();
    for (c_id, first) in [(1u32, "BOB"), (4, "ZED"), (7, "ALF"), (9, "CAT")] {
        let mut c = db.row(keys::customer(1, 1, c_id), Customer::decode);
        c.first = Bytes::from_static(first.as_bytes());
        c.last = last.clone();
        db.set(keys::customer(1, 1, c_id), c.encode());
        entries.push((c.first, c_id));
    }
    entries.sort();
    db.set(
        keys::customer_by_last(1, 1, &last),
        rows::encode_name_index(&entries),
    );
    last
}

/// One terminal per warehouse of [`TINY`], each generator seeded with
/// `seed_per_warehouse` times its warehouse.
pub fn tiny_terminals(db: &Db, rng_seed: u64, seed_per_warehouse: u64) -> Vec<tpcc::Generator> {
    let mut rng = Rng::new(rng_seed);
    let constants = NuRandC::for_run(db.load_c, &mut rng);
    (1..=TINY.warehouses)
        .map(|w| {
            let cfg = tpcc::GeneratorConfig {
                scale: TINY,
                home_w_id: w,
                stock_level_d_id: 1,
                constants,
            };
            tpcc::Generator::new(cfg, u64::from(w) * seed_per_warehouse).expect("valid terminal")
        })
        .collect()
}
