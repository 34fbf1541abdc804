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

use creek_exec::basic::BasicEngine;
use creek_exec::mvcc::MvccExecutor;
use harness::{action, Action, Cluster, TestEngine};
use proptest::prelude::*;

fn run<E: TestEngine>(n: usize, actions: &[Action]) -> Cluster<E> {
    let mut c: Cluster<E> = Cluster::new(n, 2_000);
    for a in actions {
        c.apply(a);
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
