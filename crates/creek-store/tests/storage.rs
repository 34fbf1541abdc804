//! `LogStore` against raft's in-memory reference, across reopen and
//! crashes (persisted at random points), and under a CAB group restarting
//! from disk.
#![allow(clippy::unwrap_used)]

mod common;

use common::{log_batch, open_sync, settle, TempDir};
use creek_cab::{Cab, CabConfig, CabStorage, MemCabStorage};
use creek_core::{OpId, ReplicaId};
use creek_store::{LogStore, StoreError};
use proptest::prelude::*;
use raft::eraftpb::{Entry, HardState};
use raft::{GetEntriesContext, Storage};

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
    /// Append `len` entries at a position derived from `at` (after the
    /// commit index, within `..=last + 1`: raft never rewrites committed
    /// entries), terms starting at `term`, data of `size` bytes.
    Append {
        at: u64,
        len: u64,
        term: u64,
        size: usize,
    },
    /// A hard state whose commit index is derived from `commit` (within the
    /// log, as raft's is).
    SetHardState {
        term: u64,
        vote: u64,
        commit: u64,
    },
    SetCommit(u64),
    /// Hand the writes so far to the persister and wait for durability.
    Persist,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u64>(), 1..5u64, 1..6u64, 0..40usize)
            .prop_map(|(at, len, term, size)| Op::Append { at, len, term, size }),
        1 => (0..10u64, 0..4u64, any::<u64>())
            .prop_map(|(term, vote, commit)| Op::SetHardState { term, vote, commit }),
        1 => any::<u64>().prop_map(Op::SetCommit),
        2 => Just(Op::Persist),
    ]
}

fn compare(durable: &LogStore, mem: &MemCabStorage) {
    let (rs, ms) = (
        durable.initial_state().unwrap(),
        mem.initial_state().unwrap(),
    );
    assert_eq!(rs.hard_state, ms.hard_state);
    assert_eq!(rs.conf_state, ms.conf_state);
    let first = mem.first_index().unwrap();
    let last = mem.last_index().unwrap();
    assert_eq!(durable.first_index().unwrap(), first);
    assert_eq!(durable.last_index().unwrap(), last);
    for i in 0..=last + 2 {
        assert_eq!(durable.term(i), mem.term(i), "term({i})");
    }
    if last < first {
        // MemStorage panics on any entries() of an empty log; we answer.
        assert_eq!(durable.entries(1, 1, None, ctx()).unwrap(), vec![]);
        assert!(durable.entries(1, 2, None, ctx()).is_err());
        return;
    }
    for lo in first..=last + 1 {
        for hi in lo..=last + 1 {
            for max in [None, Some(0), Some(15), Some(60), Some(u64::MAX)] {
                let r = durable.entries(lo, hi, max, ctx()).unwrap();
                let m = mem.entries(lo, hi, max, ctx()).unwrap();
                assert_eq!(r, m, "entries({lo}, {hi}, {max:?})");
            }
        }
    }
    // Past the end: an error where MemStorage panics.
    assert!(durable.entries(first, last + 2, None, ctx()).is_err());
}

/// A copy of `mem` that later writes to `mem` do not change.
fn snapshot(mem: &MemCabStorage, voters: &[u64]) -> MemCabStorage {
    let copy = MemCabStorage::new(voters.to_vec());
    let mut c = copy.clone();
    let first = mem.first_index().unwrap();
    let last = mem.last_index().unwrap();
    if last >= first {
        c.append(&mem.entries(first, last + 1, None, ctx()).unwrap())
            .unwrap();
    }
    c.set_hard_state(mem.initial_state().unwrap().hard_state)
        .unwrap();
    copy
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Reads equal raft's `MemStorage` after any writes; after a clean close
    /// the reopened store equals it; after a crash, it equals the state at
    /// the last persist.
    #[test]
    fn matches_mem_storage_across_reopen_and_crash(
        ops in prop::collection::vec(op(), 1..20),
        crash in any::<bool>(),
    ) {
        let dir = TempDir::new("prop");
        let voters = vec![1, 2, 3];
        let (mut durable, mut persister, recovered) = open_sync(dir.path(), voters.clone());
        prop_assert!(recovered.checkpoint.is_none() && recovered.ops.is_empty());
        let mut mem = MemCabStorage::new(voters.clone());
        let mut at_persist = snapshot(&mem, &voters);
        compare(&durable, &mem);
        for op in &ops {
            let last = mem.last_index().unwrap();
            let commit = mem.initial_state().unwrap().hard_state.commit;
            match *op {
                Op::Append { at, len, term, size } => {
                    let start = commit + 1 + at % (last + 1 - commit);
                    let ents: Vec<Entry> = (0..len)
                        .map(|i| {
                            let data = vec![(start + i) as u8; size + i as usize];
                            entry(start + i, term + i / 2, &data)
                        })
                        .collect();
                    durable.append(&ents).unwrap();
                    mem.append(&ents).unwrap();
                }
                Op::SetHardState { term, vote, commit } => {
                    let commit = commit % (last + 1);
                    let hs = HardState { term, vote, commit, ..Default::default() };
                    durable.set_hard_state(hs.clone()).unwrap();
                    mem.set_hard_state(hs).unwrap();
                }
                Op::SetCommit(c) => {
                    let c = c % (last + 1);
                    durable.set_commit(c).unwrap();
                    mem.set_commit(c).unwrap();
                }
                Op::Persist => {
                    persister.persist(log_batch(&mut durable));
                    at_persist = snapshot(&mem, &voters);
                }
            }
            compare(&durable, &mem);
        }
        let rest = log_batch(&mut durable);
        drop(durable);
        let expected = if crash {
            // Writes not yet persisted are lost.
            persister.crash();
            at_persist
        } else {
            persister.persist(rest);
            persister.persister.take().unwrap().close().unwrap();
            mem
        };
        let (reopened, _p, _) = open_sync(dir.path(), voters);
        compare(&reopened, &expected);
    }
}

#[test]
fn reopen_restores_everything() {
    let dir = TempDir::new("reopen");
    let voters = vec![1, 2, 3];
    let ents: Vec<Entry> = (1..=5).map(|i| entry(i, 1 + i / 3, b"abc")).collect();
    let mut hs = HardState {
        term: 2,
        vote: 3,
        commit: 4,
        ..Default::default()
    };
    {
        let (mut s, mut p, _) = open_sync(dir.path(), voters.clone());
        s.append(&ents).unwrap();
        p.persist(log_batch(&mut s));
        // Overwrite a suffix, then restore it: the final log is `ents`.
        s.append(&[entry(4, 9, b"x")]).unwrap();
        p.persist(log_batch(&mut s));
        s.append(&ents[3..]).unwrap();
        s.set_hard_state(hs.clone()).unwrap();
        s.set_commit(5).unwrap();
        p.persist(log_batch(&mut s));
        p.persister.take().unwrap().close().unwrap();
    }
    let (s, _p, _) = open_sync(dir.path(), voters.clone());
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
    drop((s, _p));
    // A different group is refused.
    let e = creek_store::open(dir.path(), vec![1, 2], Box::new(|_| {})).unwrap_err();
    assert!(matches!(e, StoreError::VotersMismatch { .. }), "{e}");
}

#[test]
fn corrupt_entry_is_an_error_not_a_panic() {
    let dir = TempDir::new("corrupt");
    {
        let (mut s, mut p, _) = open_sync(dir.path(), vec![1]);
        s.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
        p.persist(log_batch(&mut s));
    }
    settle(dir.path(), vec![1]);
    {
        let db = redb::Database::create(dir.sub(creek_store::FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("raft_log");
            let mut t = txn.open_table(def).unwrap();
            t.insert(2u64, [0xffu8, 0xff, 0xff].as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let e = creek_store::open(dir.path(), vec![1], Box::new(|_| {})).unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("log entry 2")),
        "{e}"
    );
}

/// A compaction is durable with the write that carries it: after a reopen
/// the log starts after its base, which keeps its term; a crash before the
/// write leaves the whole log. A gap after the base is corruption.
#[test]
fn compaction_survives_a_reopen_and_a_crash_before_it_loses_nothing() {
    let dir = TempDir::new("compact");
    let ents: Vec<Entry> = (1..=10).map(|i| entry(i, 1 + i / 4, b"xyz")).collect();
    {
        let (mut s, mut p, _) = open_sync(dir.path(), vec![1]);
        s.append(&ents).unwrap();
        s.set_commit(8).unwrap();
        p.persist(log_batch(&mut s));
        s.compact(6).unwrap();
        // Not persisted: the crash takes the compaction back.
        p.crash();
    }
    {
        let (mut s, mut p, _) = open_sync(dir.path(), vec![1]);
        assert_eq!(s.first_index().unwrap(), 1);
        assert_eq!(s.last_index().unwrap(), 10);
        s.compact(6).unwrap();
        p.persist(log_batch(&mut s));
        p.persister.take().unwrap().close().unwrap();
    }
    let (s, _p, _) = open_sync(dir.path(), vec![1]);
    assert_eq!(s.base(), creek_cab::LogBase { index: 6, term: 2 });
    assert_eq!(s.first_index().unwrap(), 7);
    assert_eq!(s.term(6).unwrap(), 2);
    assert_eq!(s.entries(7, 11, None, ctx()).unwrap(), ents[6..]);
    assert_eq!(s.initial_state().unwrap().hard_state.commit, 8);
    drop((s, _p));
    // Entry 8 removed behind the store's back: a gap after the base.
    settle(dir.path(), vec![1]);
    {
        let db = redb::Database::create(dir.sub(creek_store::FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("raft_log");
            txn.open_table(def).unwrap().remove(8u64).unwrap();
        }
        txn.commit().unwrap();
    }
    let e = creek_store::open(dir.path(), vec![1], Box::new(|_| {})).unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("log entry 9 follows 7")),
        "{e}"
    );
}

const N: usize = 3;
const ALWAYS: &dyn Fn(OpId) -> bool = &|_| true;

fn voters() -> Vec<u64> {
    (1..=N as u64).collect()
}

fn replicas() -> Vec<ReplicaId> {
    (0..N as u16).map(ReplicaId).collect()
}

struct Member {
    cab: Cab<LogStore>,
    persister: common::SyncPersister,
}

/// Node `i` started (or restarted) from its directory, at its log's base:
/// every decided id after it is delivered again (these tests take no
/// checkpoint, so that is all the base's checkpoint would cover).
fn member(dir: &TempDir, i: usize) -> Member {
    let (storage, persister, _) = open_sync(&dir.sub(&format!("node{i}")), voters());
    let config = CabConfig::for_group(ReplicaId(i as u16), &replicas());
    let applied = storage.first_index().unwrap() - 1;
    Member {
        cab: Cab::new(config, storage, applied).unwrap(),
        persister,
    }
}

/// Take every live node's turn, persist its writes (synchronously: the
/// messages of a step leave only once its writes are durable) and deliver
/// its messages, `rounds` times; collect what each node delivers.
fn run(nodes: &mut [Option<Member>], delivered: &mut [Vec<OpId>], rounds: usize, tick: bool) {
    for _ in 0..rounds {
        let mut msgs = Vec::new();
        for (i, n) in nodes.iter_mut().enumerate() {
            if let Some(n) = n {
                if tick {
                    n.cab.tick();
                }
                let ready = n.cab.ready(ALWAYS);
                let mut out = ready.early;
                out.extend(ready.messages);
                delivered[i].extend(ready.decided);
                n.cab.advance(0);
                assert!(n.cab.failure().is_none(), "{:?}", n.cab.failure());
                let (log, mark) = n.cab.take_writes();
                n.persister.persist(creek_node::Write {
                    log,
                    ..creek_node::Write::default()
                });
                n.cab.on_persisted(mark);
                msgs.extend(out.into_iter().map(|(to, m)| (i, to, m)));
            }
        }
        for (from, to, m) in msgs {
            if let Some(n) = nodes[usize::from(to.0)].as_mut() {
                n.cab.on_message(ReplicaId(from as u16), m, ALWAYS);
            }
        }
    }
}

#[test]
fn cab_group_restarts_from_disk() {
    let dir = TempDir::new("cab");
    let mut nodes: Vec<Option<Member>> = (0..N).map(|i| Some(member(&dir, i))).collect();
    let mut delivered = vec![Vec::new(); N];
    nodes[0].as_mut().unwrap().cab.campaign();
    run(&mut nodes, &mut delivered, 10, false);
    assert!(nodes[0].as_ref().unwrap().cab.is_leader());

    let ids: Vec<OpId> = (1..=6)
        .map(|s| OpId::new(ReplicaId((s % N as u64) as u16), s))
        .collect();
    for (k, id) in ids.iter().enumerate() {
        // Cast at different nodes; followers forward to the leader.
        nodes[k % N].as_mut().unwrap().cab.cast(*id);
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

    // Kill node 2 (no close) and restart it from its directory with
    // nothing applied: it delivers every decided id again, in the same
    // order. So does the leader.
    for victim in [2, 0] {
        nodes[victim] = None;
        let before = std::mem::take(&mut delivered[victim]);
        nodes[victim] = Some(member(&dir, victim));
        run(&mut nodes, &mut delivered, 40, true);
        assert_eq!(delivered[victim], before, "node {victim}");
    }
    // And the group still decides.
    let late = OpId::new(ReplicaId(1), 99);
    nodes[1].as_mut().unwrap().cab.cast(late);
    run(&mut nodes, &mut delivered, 40, true);
    for d in &delivered {
        assert_eq!(d.last(), Some(&late));
    }
}

/// Compaction over stored logs: while every replica keeps up, the leader's
/// compaction point follows the commit index and each replica compacts to
/// it (no further than what it says its checkpoint covers); a replica that
/// is down holds the point at what it acknowledged, so when it returns it
/// catches up from its peers' logs (CAB never sends snapshots), and then the
/// point moves on.
#[test]
fn compaction_follows_every_replica_and_waits_for_one_that_is_down() {
    let dir = TempDir::new("cab-compact");
    let mut nodes: Vec<Option<Member>> = (0..N).map(|i| Some(member(&dir, i))).collect();
    let mut delivered = vec![Vec::new(); N];
    nodes[0].as_mut().unwrap().cab.campaign();
    run(&mut nodes, &mut delivered, 10, false);
    let mut seq = 0;
    let mut cast = |nodes: &mut [Option<Member>], delivered: &mut [Vec<OpId>], n: u64| {
        for _ in 0..n {
            seq += 1;
            nodes[0]
                .as_mut()
                .unwrap()
                .cab
                .cast(OpId::new(ReplicaId(0), seq));
            run(nodes, delivered, 3, true);
        }
        run(nodes, delivered, 60, true);
    };
    // Compact each live node as far as it may (a checkpoint "covers"
    // everything delivered), persisting the compaction.
    let compact_all = |nodes: &mut [Option<Member>]| -> Vec<u64> {
        nodes
            .iter_mut()
            .flatten()
            .map(|n| {
                let point = n.cab.compactable();
                let base = n.cab.compact(point).unwrap();
                let (log, mark) = n.cab.take_writes();
                n.persister.persist(creek_node::Write {
                    log,
                    ..creek_node::Write::default()
                });
                n.cab.on_persisted(mark);
                base
            })
            .collect()
    };
    cast(&mut nodes, &mut delivered, 10);
    let bases = compact_all(&mut nodes);
    let leader_commit = nodes[0].as_ref().unwrap().cab.log_mark().2;
    assert!(leader_commit >= 10);
    assert_eq!(
        bases,
        vec![leader_commit; N],
        "all up: compacted to the commit index"
    );

    // Node 2 goes down; the others decide more, but cannot compact past
    // what it acknowledged.
    nodes[2] = None;
    cast(&mut nodes, &mut delivered, 10);
    let bases = compact_all(&mut nodes);
    assert_eq!(
        bases,
        vec![leader_commit; 2],
        "held back by the replica that is down"
    );

    // It comes back (restarting at what it delivered) and catches up from
    // the logs; then the point moves past everything.
    nodes[2] = Some(member(&dir, 2));
    cast(&mut nodes, &mut delivered, 2);
    assert_eq!(delivered[2].len(), delivered[0].len(), "caught up");
    let bases = compact_all(&mut nodes);
    let commit = nodes[0].as_ref().unwrap().cab.log_mark().2;
    assert!(commit > leader_commit);
    assert_eq!(bases, vec![commit; N]);
}
