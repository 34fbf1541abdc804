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

use creek_core::Config;
use creek_exec::basic::BasicEngine;
use creek_exec::mvcc::{MvccExecutor, Schedule};
use harness::{action, Action, Cluster, TestEngine};
use proptest::prelude::*;

fn run<E: TestEngine>(n: usize, actions: &[Action]) -> Cluster<E> {
    run_with(n, actions, Schedule::default())
}

/// Every schedule but the default (both parts).
const OTHER_SCHEDULES: [Schedule; 3] = [
    Schedule::LOWEST_FIRST,
    Schedule {
        fresh_first: true,
        hold_reruns: false,
    },
    Schedule {
        fresh_first: false,
        hold_reruns: true,
    },
];

fn run_with<E: TestEngine>(n: usize, actions: &[Action], schedule: Schedule) -> Cluster<E> {
    let config = Config {
        stabilize_after_us: 2_000,
        early_tentative_views: false,
        schedule,
        ..Config::default()
    };
    let mut c: Cluster<E> = Cluster::with_config(n, config);
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

    /// The order in which free cores take executions changes nothing a
    /// client or the state can observe: under every schedule each tentative
    /// view still equals a replay, and the committed order, final views and
    /// state equal the default schedule's.
    #[test]
    fn schedule_changes_no_outcome(
        n in 2usize..=3,
        actions in proptest::collection::vec(action(), 0..120),
        which in 0..OTHER_SCHEDULES.len(),
    ) {
        let default = run::<Mvcc>(n, &actions);
        let order = default.check_final();
        let other = run_with::<Mvcc>(n, &actions, OTHER_SCHEDULES[which]);
        prop_assert_eq!(&other.check_final(), &order, "schedules committed different orders");
        prop_assert_eq!(other.state(0), default.state(0), "schedules reached different states");
        prop_assert_eq!(other.final_outcomes(), default.final_outcomes(), "schedules gave different final views");
    }
}
