//! What one durable group of writes costs on this disk, by how it is
//! written: the bytes of a strong op's group (a 200-byte log entry, a hard
//! state, a 150-byte payload) made durable
//!
//! * `tables`: as a redb transaction over the tables they belong in (the
//!   store's shape before its write-ahead log);
//! * `journal`: as one row of one redb table (a journal inside redb);
//! * `wal`: as a record appended to a pre-zeroed file, then `fdatasync`;
//! * `store`: through `creek_store::Store::write` itself (the write-ahead
//!   log, with the folds into redb it makes when the log fills).
//!
//! `cargo run --release -p creek-store --example commit_shapes [DIR] [N]`
//! prints p50/p90/p99/max latency and the CPU time per group of each.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::FileExt;
use std::time::Instant;

use creek_cab::CabStorage;
use raft::eraftpb::{Entry, HardState};
use redb::{Database, Durability, TableDefinition};

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");
const OPS: TableDefinition<(u16, u64), &[u8]> = TableDefinition::new("ops");
const JOURNAL: TableDefinition<u64, &[u8]> = TableDefinition::new("journal");

const ENTRY_BYTES: usize = 200;
const OP_BYTES: usize = 150;

/// This thread's CPU time so far, in µs.
fn cpu_us() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks * 1e6 / 100.0
}

fn measure(name: &str, n: u64, mut one: impl FnMut(u64)) {
    let mut lat = Vec::with_capacity(n as usize);
    let cpu = cpu_us();
    for i in 0..n {
        let t = Instant::now();
        one(i);
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let cpu = (cpu_us() - cpu) / n as f64;
    lat.sort_by(f64::total_cmp);
    let at = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    println!(
        "{name:8} p50 {:5.0} us  p90 {:5.0}  p99 {:5.0}  max {:6.0}  cpu/group {:4.0} us",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0),
        cpu
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or("/tmp/creek-commit-shapes".into()));
    let n: u64 = args.next().map_or(3000, |s| s.parse().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (entry, op) = (vec![7u8; ENTRY_BYTES], vec![9u8; OP_BYTES]);

    let db = Database::create(dir.join("shapes.redb")).unwrap();
    for shape in ["tables", "journal"] {
        measure(shape, n, |i| {
            let mut txn = db.begin_write().unwrap();
            txn.set_durability(Durability::Immediate).unwrap();
            if shape == "tables" {
                txn.open_table(LOG)
                    .unwrap()
                    .insert(i, entry.as_slice())
                    .unwrap();
                let mut meta = txn.open_table(META).unwrap();
                meta.insert("hard_state", [1u8; 12].as_slice()).unwrap();
                drop(meta);
                txn.open_table(OPS)
                    .unwrap()
                    .insert((1, i), op.as_slice())
                    .unwrap();
            } else {
                let row = [entry.as_slice(), &[1u8; 12], op.as_slice()].concat();
                txn.open_table(JOURNAL)
                    .unwrap()
                    .insert(i, row.as_slice())
                    .unwrap();
            }
            txn.commit().unwrap();
        });
    }
    drop(db);

    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.join("shapes.wal"))
        .unwrap();
    file.write_all_at(&vec![0u8; 4 << 20], 0).unwrap();
    file.sync_all().unwrap();
    let record = vec![5u8; 16 + ENTRY_BYTES + 12 + OP_BYTES];
    measure("wal", n, |i| {
        let at = (i * record.len() as u64) % (4 << 20);
        file.write_all_at(&record, at).unwrap();
        file.sync_data().unwrap();
    });

    let mut loaded = creek_store::load(&dir.join("store"), vec![1]).unwrap();
    measure("store", n, |i| {
        let index = i + 1;
        let e = Entry {
            index,
            term: 1,
            data: entry.clone().into(),
            ..Default::default()
        };
        loaded.storage.append(&[e]).unwrap();
        let hs = HardState {
            term: 1,
            vote: 1,
            commit: index,
            ..Default::default()
        };
        loaded.storage.set_hard_state(hs).unwrap();
        let payload = creek_core::Op {
            id: creek_core::OpId {
                origin: creek_core::ReplicaId(1),
                seq: index,
            },
            timestamp: creek_core::Timestamp(index),
            call: creek_exec::ProcCall::new("kv.put", op.clone()),
            strong: true,
            causal_context: None,
        };
        let write = creek_node::Write {
            seq: index,
            log: loaded.storage.take_writes(),
            ops: vec![std::sync::Arc::new(payload)],
            ..Default::default()
        };
        loaded.store.write(&[write]).unwrap();
    });
    drop(loaded);
    let _ = std::fs::remove_dir_all(&dir);
}
