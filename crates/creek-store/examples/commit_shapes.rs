//! Throwaway: the latency of one durable commit by its shape, on this disk.
#![allow(clippy::unwrap_used)]
use redb::{Database, Durability, TableDefinition};
use std::time::Instant;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");
const OPS: TableDefinition<(u16, u64), &[u8]> = TableDefinition::new("ops");
const JOURNAL: TableDefinition<u64, &[u8]> = TableDefinition::new("journal");

fn cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let f: Vec<&str> = s.rsplit(')').next().unwrap().split_whitespace().collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) * 1e6 / 100.0
}

fn report(name: &str, mut v: Vec<f64>, cpu_us: f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    println!(
        "{name:10} p50 {:6.0} us  p90 {:6.0}  p99 {:6.0}  cpu/op {:5.0} us",
        v[n / 2],
        v[n * 9 / 10],
        v[n * 99 / 100],
        cpu_us / n as f64
    );
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or("/tmp/commit-shapes".into());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let n = 3000u64;
    let db = Database::create(format!("{dir}/t.redb")).unwrap();
    let entry = vec![7u8; 200];
    let op = vec![9u8; 150];
    for shape in ["tables", "journal"] {
        let mut lat = Vec::new();
        let c0 = cpu();
        for i in 0..n {
            let t = Instant::now();
            let mut txn = db.begin_write().unwrap();
            txn.set_durability(Durability::Immediate).unwrap();
            {
                if shape == "tables" {
                    txn.open_table(LOG)
                        .unwrap()
                        .insert(i, entry.as_slice())
                        .unwrap();
                    txn.open_table(META)
                        .unwrap()
                        .insert("hard_state", [1u8; 12].as_slice())
                        .unwrap();
                    txn.open_table(OPS)
                        .unwrap()
                        .insert((1, i), op.as_slice())
                        .unwrap();
                } else {
                    txn.open_table(JOURNAL)
                        .unwrap()
                        .insert(i, [entry.as_slice(), op.as_slice()].concat().as_slice())
                        .unwrap();
                }
            }
            txn.commit().unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        report(shape, lat, cpu() - c0);
    }
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(format!("{dir}/w.wal"))
        .unwrap();
    f.write_all_at(&vec![0u8; 4 << 20], 0).unwrap();
    f.sync_all().unwrap();
    let rec = vec![5u8; 366];
    let mut at = 0;
    let mut lat = Vec::new();
    let c0 = cpu();
    for _ in 0..n {
        let t = Instant::now();
        f.write_all_at(&rec, at).unwrap();
        f.sync_data().unwrap();
        at += rec.len() as u64;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    report("wal", lat, cpu() - c0);
}
