//! Property tests of the replica protocol (Creek paper, Algorithm 1 and
//! §4.4) against the sequential oracle and the basic undo-log algorithm.
//!
//! Each case drives several replicas through a random interleaving of
//! invokes, FIFO reliable-broadcast deliveries, CAB decisions in any order,
//! conditional CAB deliveries, and execution starts and completions in any
//! order (several executions in flight at once). Checked throughout: every
//! tentative view equals the sequential execution of that replica's order at
//! that moment, and the executor's read-set invariant. Checked at the end:
//! identical committed lists, final views and states equal a replay of the
//! committed list, and the multiversion executor agrees with the basic
//! algorithm on committed order, final views and state.
#![allow(clippy::unwrap_used)]

mod harness;

use creek_core::{Request, Views};
use creek_exec::basic::BasicEngine;
use creek_exec::mvcc::MvccExecutor;
use creek_exec::value::{encode_args, Value};
use creek_exec::{ClientRequestId, ProcCall};
use harness::{Cluster, TestEngine};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Action {
    Invoke {
        node: u8,
        proc_: u8,
        key: u8,
        arg: u8,
        strong: bool,
        views: u8,
        retry: Option<u8>,
    },
    DeliverRb {
        from: u8,
        to: u8,
    },
    Decide {
        pick: u8,
    },
    DeliverCab {
        node: u8,
    },
    StartExec {
        node: u8,
    },
    CompleteExec {
        node: u8,
        pick: u8,
    },
    Tick {
        advance_ms: u8,
    },
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        3 => (any::<u8>(), 0u8..9, 0u8..3, any::<u8>(), any::<bool>(), 0u8..3, proptest::option::weighted(0.15, 0u8..4))
            .prop_map(|(node, proc_, key, arg, strong, views, retry)| Action::Invoke { node, proc_, key, arg, strong, views, retry }),
        4 => (any::<u8>(), any::<u8>()).prop_map(|(from, to)| Action::DeliverRb { from, to }),
        1 => any::<u8>().prop_map(|pick| Action::Decide { pick }),
        2 => any::<u8>().prop_map(|node| Action::DeliverCab { node }),
        3 => any::<u8>().prop_map(|node| Action::StartExec { node }),
        3 => (any::<u8>(), any::<u8>()).prop_map(|(node, pick)| Action::CompleteExec { node, pick }),
        1 => (0u8..4).prop_map(|advance_ms| Action::Tick { advance_ms }),
    ]
}

fn call(proc_: u8, key: u8, arg: u8) -> ProcCall {
    let k = Value::from(format!("k{key}").as_str());
    let v = Value::from(format!("v{arg}").as_str());
    let (name, args) = match proc_ {
        0 => ("kv.get", vec![k]),
        1 => ("kv.put", vec![k, v]),
        2 => (
            "kv.incr",
            vec![
                Value::from(format!("n{key}").as_str()),
                Value::Int(i64::from(arg % 7) - 2),
            ],
        ),
        3 => (
            "kv.cas",
            vec![
                k,
                if arg.is_multiple_of(2) {
                    Value::Nil
                } else {
                    Value::from(format!("v{}", arg / 2).as_str())
                },
                v,
            ],
        ),
        4 => ("kv.delete", vec![k]),
        5 => ("queue.enqueue", vec![Value::from("q"), v]),
        6 => ("queue.dequeue", vec![Value::from("q")]),
        7 => ("list.append", vec![Value::from("l"), v]),
        _ => ("list.read", vec![Value::from("l")]),
    };
    ProcCall::new(name, encode_args(&args))
}

fn run<E: TestEngine>(n: usize, actions: &[Action]) -> Cluster<E> {
    let mut c: Cluster<E> = Cluster::new(n, 2_000);
    let node = |x: u8| usize::from(x) % n;
    for a in actions {
        match *a {
            Action::Invoke {
                node: i,
                proc_,
                key,
                arg,
                strong,
                views,
                retry,
            } => {
                let mut call = call(proc_, key, arg);
                call.request_id = retry.map(|seq| ClientRequestId {
                    client: 7,
                    seq: u64::from(seq),
                });
                let views = match (strong, views) {
                    (true, 0) => Views::STRONG,
                    (_, 1) => Views::BOTH,
                    _ => Views::WEAK,
                };
                c.invoke(
                    node(i),
                    Request {
                        call,
                        strong,
                        views,
                    },
                );
            }
            Action::DeliverRb { from, to } => {
                c.deliver_rb(node(from), node(to));
            }
            Action::Decide { pick } => {
                c.decide(usize::from(pick));
            }
            Action::DeliverCab { node: i } => {
                c.deliver_cab(node(i));
            }
            Action::StartExec { node: i } => {
                c.start_exec(node(i));
            }
            Action::CompleteExec { node: i, pick } => {
                c.complete_exec(node(i), usize::from(pick));
            }
            Action::Tick { advance_ms } => c.tick(u64::from(advance_ms) * 1000),
        }
    }
    c.settle();
    c
}

type Mvcc = MvccExecutor<creek_core::ExecKey, creek_core::Pos>;
type Basic = BasicEngine<creek_core::ExecKey, creek_core::Pos>;

/// 3,000 cases in the normal run; `CREEK_PROP_CASES=100000` for a soak.
fn cases() -> u32 {
    std::env::var("CREEK_PROP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn multiversion_executor_matches_sequential_and_basic_algorithm(
        n in 2usize..=3,
        actions in proptest::collection::vec(action(), 0..120),
    ) {
        let mvcc = run::<Mvcc>(n, &actions);
        let order = mvcc.check_final();
        let basic = run::<Basic>(n, &actions);
        let basic_order = basic.check_final();
        prop_assert_eq!(&order, &basic_order, "engines committed different orders");
        prop_assert_eq!(mvcc.state(0), basic.state(0), "engines reached different states");
        prop_assert_eq!(mvcc.final_outcomes(), basic.final_outcomes(), "engines gave different final views");
    }
}
