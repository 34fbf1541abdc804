//! `RedbCabStorage` against the in-memory reference, across reopen, and under
//! a CAB group.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use creek_cab::{Cab, CabConfig, CabStorage, MemCabStorage};
use creek_core::{OpId, ReplicaId};
use creek_store::RedbCabStorage;
use proptest::prelude::*;
use raft::eraftpb::{Entry, HardState};
use raft::{GetEntriesContext, Storage};

/// A fresh temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "creek-store-{tag}-{}-{n}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
    Entry {
        index,
        term,
        data: data.to_vec().into(),
        ..Default::default()
    }
}

fn ctx() -> GetEntriesContext {
    GetEntriesContext::empty(false)
}

#[derive(Clone, Debug)]
enum Op {
    /// Append `len` entries at a position derived from `at` (within
    /// `1..=last + 1`), terms starting at `term`, data of `size` bytes.
    Append {
        at: u64,
        len: u64,
        term: u64,
        size: usize,
    },
    SetHardState {
        term: u64,
        vote: u64,
        commit: u64,
    },
    SetCommit(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u64>(), 1..5u64, 1..6u64, 0..40usize)
            .prop_map(|(at, len, term, size)| Op::Append { at, len, term, size }),
        1 => (0..10u64, 0..4u64, 0..20u64)
            .prop_map(|(term, vote, commit)| Op::SetHardState { term, vote, commit }),
        1 => (0..20u64).prop_map(Op::SetCommit),
    ]
}

fn compare(redb: &RedbCabStorage, mem: &MemCabStorage) {
    let (rs, ms) = (redb.initial_state().unwrap(), mem.initial_state().unwrap());
    assert_eq!(rs.hard_state, ms.hard_state);
    assert_eq!(rs.conf_state, ms.conf_state);
    let first = mem.first_index().unwrap();
    let last = mem.last_index().unwrap();
    assert_eq!(redb.first_index().unwrap(), first);
    assert_eq!(redb.last_index().unwrap(), last);
    for i in 0..=last + 2 {
        assert_eq!(redb.term(i), mem.term(i), "term({i})");
    }
    if last < first {
        return; // MemStorage panics on any entries() of an empty log
    }
    for lo in first..=last + 1 {
        for hi in lo..=last + 1 {
            for max in [None, Some(0), Some(15), Some(60), Some(u64::MAX)] {
                let r = redb.entries(lo, hi, max, ctx()).unwrap();
                let m = mem.entries(lo, hi, max, ctx()).unwrap();
                assert_eq!(r, m, "entries({lo}, {hi}, {max:?})");
            }
        }
    }
    // Below the first index: compacted, as MemStorage says.
    if first > 0 {
        assert_eq!(
            redb.entries(first - 1, last + 1, None, ctx()).unwrap_err(),
            mem.entries(first - 1, last + 1, None, ctx()).unwrap_err()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn matches_mem_storage(ops in prop::collection::vec(op(), 1..16)) {
        let dir = TempDir::new("prop");
        let path = dir.file("log.redb");
        let voters = vec![1, 2, 3];
        let mut redb = RedbCabStorage::open(&path, voters.clone()).unwrap();
        let mut mem = MemCabStorage::new(voters.clone());
        compare(&redb, &mem);
        for op in &ops {
            match *op {
                Op::Append { at, len, term, size } => {
                    let last = mem.last_index().unwrap();
                    let start = 1 + at % (last + 1);
                    let ents: Vec<Entry> = (0..len)
                        .map(|i| {
                            let data = vec![(start + i) as u8; size + i as usize];
                            entry(start + i, term + i / 2, &data)
                        })
                        .collect();
                    redb.append(&ents).unwrap();
                    mem.append(&ents).unwrap();
                }
                Op::SetHardState { term, vote, commit } => {
                    let hs = HardState { term, vote, commit, ..Default::default() };
                    redb.set_hard_state(hs.clone()).unwrap();
                    mem.set_hard_state(hs).unwrap();
                }
                Op::SetCommit(c) => {
                    redb.set_commit(c).unwrap();
                    mem.set_commit(c).unwrap();
                }
            }
            compare(&redb, &mem);
        }
        // And everything survives a reopen.
        drop(redb);
        let redb = RedbCabStorage::open(&path, voters).unwrap();
        compare(&redb, &mem);
    }
}

#[test]
fn reopen_restores_everything() {
    let dir = TempDir::new("reopen");
    let path = dir.file("log.redb");
    let voters = vec![1, 2, 3];
    let ents: Vec<Entry> = (1..=5).map(|i| entry(i, 1 + i / 3, b"abc")).collect();
    let mut hs = HardState {
        term: 2,
        vote: 3,
        commit: 4,
        ..Default::default()
    };
    {
        let mut s = RedbCabStorage::open(&path, voters.clone()).unwrap();
        s.append(&ents).unwrap();
        // Overwrite a suffix, then restore it: the final log is `ents`.
        s.append(&[entry(4, 9, b"x")]).unwrap();
        s.append(&ents[3..]).unwrap();
        s.set_hard_state(hs.clone()).unwrap();
        s.set_commit(5).unwrap();
    }
    let s = RedbCabStorage::open(&path, voters.clone()).unwrap();
    let state = s.initial_state().unwrap();
    hs.commit = 5;
    assert_eq!(state.hard_state, hs);
    assert_eq!(state.conf_state.voters, voters);
    assert_eq!(s.first_index().unwrap(), 1);
    assert_eq!(s.last_index().unwrap(), 5);
    assert_eq!(s.entries(1, 6, None, ctx()).unwrap(), ents);
    for e in &ents {
        assert_eq!(s.term(e.index).unwrap(), e.term);
    }
    drop(s);
    // A different group is refused.
    assert!(RedbCabStorage::open(&path, vec![1, 2]).is_err());
}

#[test]
fn corrupt_entry_is_an_error_not_a_panic() {
    let dir = TempDir::new("corrupt");
    let path = dir.file("log.redb");
    {
        let mut s = RedbCabStorage::open(&path, vec![1]).unwrap();
        s.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
    }
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("raft_log");
            let mut t = txn.open_table(def).unwrap();
            t.insert(2u64, [0xffu8, 0xff, 0xff].as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let s = RedbCabStorage::open(&path, vec![1]).unwrap();
    assert!(s.entries(1, 3, None, ctx()).is_err());
    assert!(s.term(2).is_err());
    assert_eq!(s.term(1).unwrap(), 1);
}

const N: usize = 3;
const ALWAYS: &dyn Fn(OpId) -> bool = &|_| true;

fn voters() -> Vec<u64> {
    (1..=N as u64).collect()
}

fn replicas() -> Vec<ReplicaId> {
    (0..N as u16).map(ReplicaId).collect()
}

fn node(dir: &TempDir, i: usize) -> Cab<RedbCabStorage> {
    let store = RedbCabStorage::open(&dir.file(&format!("node{i}.redb")), voters()).unwrap();
    let config = CabConfig::for_group(ReplicaId(i as u16), &replicas());
    Cab::new(config, store, 0).unwrap()
}

/// Poll every live node and deliver their messages, `rounds` times; collect
/// what each node delivers.
fn run(
    nodes: &mut [Option<Cab<RedbCabStorage>>],
    delivered: &mut [Vec<OpId>],
    rounds: usize,
    tick: bool,
) {
    for _ in 0..rounds {
        let mut msgs = Vec::new();
        for (i, n) in nodes.iter_mut().enumerate() {
            if let Some(n) = n {
                if tick {
                    n.tick();
                }
                let mut out = Vec::new();
                n.poll(ALWAYS, &mut out);
                assert!(n.failure().is_none(), "{:?}", n.failure());
                msgs.extend(out.into_iter().map(|(to, m)| (i, to, m)));
            }
        }
        for (from, to, m) in msgs {
            if let Some(n) = nodes[usize::from(to.0)].as_mut() {
                n.on_message(ReplicaId(from as u16), m, ALWAYS);
            }
        }
        for (i, n) in nodes.iter_mut().enumerate() {
            if let Some(n) = n {
                delivered[i].extend(n.take_deliverable(ALWAYS));
            }
        }
    }
}

#[test]
fn cab_group_restarts_from_disk() {
    let dir = TempDir::new("cab");
    let mut nodes: Vec<Option<Cab<RedbCabStorage>>> = (0..N).map(|i| Some(node(&dir, i))).collect();
    let mut delivered = vec![Vec::new(); N];
    nodes[0].as_mut().unwrap().campaign();
    run(&mut nodes, &mut delivered, 10, false);
    assert!(nodes[0].as_ref().unwrap().is_leader());

    let ids: Vec<OpId> = (1..=6)
        .map(|s| OpId::new(ReplicaId((s % N as u64) as u16), s))
        .collect();
    for (k, id) in ids.iter().enumerate() {
        // Cast at different nodes; followers forward to the leader.
        nodes[k % N].as_mut().unwrap().cast(*id);
        run(&mut nodes, &mut delivered, 3, false);
    }
    run(&mut nodes, &mut delivered, 20, true);
    assert_eq!(delivered[0].len(), ids.len(), "{delivered:?}");
    let mut sorted = delivered[0].clone();
    sorted.sort_unstable();
    let mut expected = ids.clone();
    expected.sort_unstable();
    assert_eq!(sorted, expected);
    for d in &delivered[1..] {
        assert_eq!(d, &delivered[0]);
    }

    // Restart node 2 from its file with nothing applied: it delivers every
    // decided id again, in the same order.
    nodes[2] = None;
    let before = std::mem::take(&mut delivered[2]);
    nodes[2] = Some(node(&dir, 2));
    run(&mut nodes, &mut delivered, 20, true);
    assert_eq!(delivered[2], before);
    assert_eq!(delivered[2], delivered[0]);
}
