//! Version records kept by the multiversion executor
//! ([`MvccExecutor::keep_versions`]): on random event sequences — writes,
//! deletes, reads of a key with its record and copies of a record into
//! another key, reordered, committed and run concurrently — every committed
//! op's final answer and the final state equal a sequential replay of the
//! committed order that advances each record at its op's revision
//! ([`crate::basic::replay_versioned`]).
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use super::*;
use crate::basic::replay_versioned;
use crate::testkit::TestProcs;
use crate::txn::{Abort, Txn};
use crate::versions::KeyVersion;
use creek_types::value::{decode_args_shared, encode_args, Value};

type Ex = MvccExecutor<u32, u64>;

/// Records live under `\0v/` followed by the key; keys starting with 0x00
/// have none.
fn meta_key(key: &[u8]) -> Option<Bytes> {
    (key.first() != Some(&0)).then(|| [b"\0v/", key].concat().into())
}

/// `test.meta(key, out)`: answer `[value, version, create, mod]` of `key`
/// (nil if absent) and, when `out` is not empty, write that text to `out`
/// (a write whose value depends on a record).
fn meta_proc(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let args = decode_args_shared(raw).map_err(|e| Abort::new(format!("{e:?}")))?;
    let [Value::Bytes(key), Value::Bytes(out)] = args.as_slice() else {
        return Err(Abort::new("test.meta: bad arguments"));
    };
    let value = txn.get(key);
    let record = txn
        .get(&meta_key(key).unwrap())
        .and_then(|b| KeyVersion::decode(&b))
        .unwrap_or_default();
    let answer = format!(
        "{:?}/{}/{}/{}",
        value, record.version, record.create, record.modified
    );
    if !out.is_empty() {
        txn.put(out.clone(), Bytes::from(answer.clone()));
    }
    Ok(Value::from(answer.as_str()).encode())
}

fn registry() -> Arc<TestProcs> {
    let mut p = TestProcs::new();
    p.register("test.meta", false, meta_proc);
    Arc::new(p)
}

fn letter(k: u8) -> String {
    char::from(b'a' + k).to_string()
}

#[derive(Clone, Debug)]
enum Call {
    Put(u8, u8),
    Delete(u8),
    Meta(u8, Option<u8>),
}

impl Call {
    fn to_call(&self) -> ProcCall {
        let (name, args) = match self {
            Call::Put(k, v) => (
                "kv.put",
                vec![
                    Value::from(letter(*k).as_str()),
                    Value::from(format!("v{v}").as_str()),
                ],
            ),
            Call::Delete(k) => ("kv.delete", vec![Value::from(letter(*k).as_str())]),
            Call::Meta(k, out) => (
                "test.meta",
                vec![
                    Value::from(letter(*k).as_str()),
                    Value::from(out.map(letter).unwrap_or_default().as_str()),
                ],
            ),
        };
        ProcCall::new(name, encode_args(&args))
    }
}

#[derive(Clone, Debug)]
enum Event {
    Insert(Call, u16),
    Reposition(usize, u16),
    Commit(usize),
    Start(usize),
    Finish(usize),
    Settle,
}

fn call_strategy() -> impl Strategy<Value = Call> {
    prop_oneof![
        3 => (0u8..3, 0u8..3).prop_map(|(k, v)| Call::Put(k, v)),
        1 => (0u8..3).prop_map(Call::Delete),
        3 => (0u8..3, proptest::option::of(0u8..4)).prop_map(|(k, out)| Call::Meta(k, out)),
    ]
}

fn event_strategy() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => (call_strategy(), any::<u16>()).prop_map(|(c, p)| Event::Insert(c, p)),
        2 => (any::<usize>(), any::<u16>()).prop_map(|(i, p)| Event::Reposition(i, p)),
        3 => any::<usize>().prop_map(Event::Commit),
        2 => (1usize..4).prop_map(Event::Start),
        2 => any::<usize>().prop_map(Event::Finish),
        1 => Just(Event::Settle),
    ]
}

fn check(e: &Ex) {
    if let Err(broken) = e.check_invariants() {
        panic!("invariant broken: {broken}");
    }
}

fn run(events: &[Event], schedule: Schedule) {
    let mut e: Ex = MvccExecutor::new(registry(), TxnLimits::default());
    e.set_schedule(schedule);
    // Committed positions are 1, 2, …: a position is its revision.
    e.keep_versions(meta_key, |p| p);
    let mut tentative: BTreeMap<u32, u64> = BTreeMap::new();
    let mut calls: HashMap<u32, ProcCall> = HashMap::new();
    let mut committed: Vec<(u64, u32)> = Vec::new();
    let mut running: Vec<Completion<u32>> = Vec::new();
    let mut answers: HashMap<u32, Settled<u32>> = HashMap::new();
    let mut next_key = 1;
    let nth = |t: &BTreeMap<u32, u64>, i: usize| t.keys().nth(i % t.len().max(1)).copied();
    let mut commit = |e: &mut Ex, t: &mut BTreeMap<u32, u64>, key: u32| {
        t.remove(&key);
        let pos = committed.len() as u64 + 1;
        committed.push((pos, key));
        e.commit(key, pos);
    };
    for (step, event) in events.iter().enumerate() {
        let place = |p: &u16| 1_000_000 + u64::from(*p) * 1_000 + step as u64;
        match event {
            Event::Insert(call, p) => {
                let key = next_key;
                next_key += 1;
                tentative.insert(key, place(p));
                calls.insert(key, call.to_call());
                e.insert(key, place(p), call.to_call());
            }
            Event::Reposition(i, p) => {
                if let Some(key) = nth(&tentative, *i) {
                    tentative.insert(key, place(p));
                    e.reposition(key, place(p));
                }
            }
            Event::Commit(i) => {
                if let Some(key) = nth(&tentative, *i) {
                    commit(&mut e, &mut tentative, key);
                }
            }
            Event::Start(n) => {
                for _ in 0..*n {
                    let Some(task) = e.next_task() else { break };
                    running.push(e.run(&task));
                }
            }
            Event::Finish(i) => {
                if !running.is_empty() {
                    let done = running.remove(i % running.len());
                    e.complete(done);
                }
            }
            Event::Settle => {
                for done in std::mem::take(&mut running) {
                    e.complete(done);
                }
                while let Some(task) = e.next_task() {
                    let done = e.run(&task);
                    e.complete(done);
                }
            }
        }
        check(&e);
    }
    let mut rest: Vec<(u64, u32)> = tentative.iter().map(|(k, p)| (*p, *k)).collect();
    rest.sort_unstable();
    for (_, key) in rest {
        commit(&mut e, &mut tentative, key);
    }
    for done in std::mem::take(&mut running) {
        e.complete(done);
    }
    for s in settle(&mut e) {
        answers.insert(s.key, s);
    }
    assert_eq!(e.ops_alive(), 0);
    let order: Vec<(u64, &ProcCall)> = committed.iter().map(|(p, k)| (*p, &calls[k])).collect();
    let (outcomes, state) = replay_versioned(
        &*registry(),
        TxnLimits::default(),
        BTreeMap::new(),
        meta_key,
        order,
    );
    assert_eq!(
        e.committed_state(),
        state,
        "final state is not the sequential one"
    );
    for ((_, key), want) in committed.iter().zip(outcomes) {
        let got = answers.get(key).filter(|s| s.committed);
        assert_eq!(
            got.map(|s| &s.outcome),
            Some(&want),
            "final answer of op {key}"
        );
    }
}

/// Run every execution and take what settles, as a driver's turns do,
/// until nothing is left to run (ops becoming final may run others again).
fn settle(e: &mut Ex) -> Vec<Settled<u32>> {
    let mut out = Vec::new();
    loop {
        while let Some(task) = e.next_task() {
            let done = e.run(&task);
            e.complete(done);
            check(e);
        }
        e.drain_settled(&mut out);
        check(e);
        if e.running() == 0 && e.next_runnable().is_none() {
            return out;
        }
    }
}

/// A read of a record sees the record of the last final write before it:
/// once that write becomes final the read runs again.
#[test]
fn a_read_of_a_record_runs_again_when_the_write_before_it_becomes_final() {
    let mut e: Ex = MvccExecutor::new(registry(), TxnLimits::default());
    e.keep_versions(meta_key, |p| p);
    e.insert(1, 100, Call::Put(0, 1).to_call());
    e.insert(2, 200, Call::Meta(0, None).to_call());
    let out = settle(&mut e);
    let tentative = Value::from("Some(b\"v1\")/0/0/0").encode();
    assert_eq!(
        out[1].outcome,
        Ok(tentative),
        "no record before the write is final"
    );
    e.commit(1, 1);
    e.commit(2, 2);
    let out = settle(&mut e);
    let last = out.iter().find(|s| s.key == 2).unwrap();
    assert!(last.committed && last.executions == 2, "{last:?}");
    assert_eq!(
        last.outcome,
        Ok(Value::from("Some(b\"v1\")/1/1/1").encode())
    );
    check(&e);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn records_equal_a_sequential_replay_of_the_committed_order(
        schedule in 0usize..Schedule::NAMED.len(),
        events in proptest::collection::vec(event_strategy(), 0..60),
    ) {
        run(&events, Schedule::NAMED[schedule].1);
    }
}
