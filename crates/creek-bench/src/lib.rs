//! Creek's load generation and measurement: the `creek bench` commands and
//! `creek chaos`. The `creek` binary parses its command line and hands
//! [`Bench`] to [`run`], or [`chaos::Args`] to [`chaos::run`].
//!
//! Two targets, measured alike: the deterministic simulator (`creek-sim`,
//! whose measurements — percentiles, the measured window, the workloads —
//! this crate uses rather than repeats) and `creek serve` processes on
//! loopback, which this crate starts as the command it runs in
//! (`std::env::current_exe()`), so it is only useful inside the `creek`
//! binary. Every benchmark prints one JSON report (or a line per point).
//!
//! What this crate is *not* for: anything a replica, the client or the
//! simulator needs. It sits above them all, and nothing but the `creek`
//! binary depends on it; `creek dev` takes nothing from it.
//!
//! ```no_run
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(subcommand)]
//!     which: creek_bench::Bench,
//! }
//!
//! let cli = Cli::parse_from(["creek-bench", "cab", "--strong-rate", "1000"]);
//! creek_bench::run(&cli.which).expect("the benchmark ran");
//! ```
#![deny(missing_docs)]

mod cab;
pub mod chaos;
mod cluster;
mod driver;
mod executor;
mod executor_procs;
mod failover;
pub mod flags;
mod groups;
mod load;
mod moves;
mod peers;
mod servers;
mod soak;
mod stages;
mod transfer;

/// Run a benchmark and print its result.
// One line, the same as the `bench` variant's in the binary: clap makes a
// subcommand enum's doc comment the about of the command holding it
// (`creek bench --help`).
#[derive(clap::Subcommand)]
pub enum Bench {
    /// The replica core and multiversion executor on a synthetic key-value stream.
    Executor(executor::Args),
    /// CAB and gossip on an in-process network: bytes per op and message delays.
    Cab(cab::Args),
    /// A local cluster of `creek serve` processes: client-observed latency and throughput.
    Cluster(cluster::Args),
    /// Creek beside etcd, PostgreSQL and Redis on this machine, measured
    /// alike (docs/bench/peers.md; the peers need `--features peers`).
    Peers(peers::Args),
    /// TPC-C in the simulator or on a local cluster: a rate or client sweep.
    Tpcc(load::TpccArgs),
    /// MyriaStore's Message Groups as user procedures (24% membership
    /// checks, 1% joins, 71% inbox reads, 4% posts) and the spam contest,
    /// with labels as designed, all strong and all weak.
    Groups(groups::Args),
    /// YCSB A/B/C, with the divergence of preliminary from final views.
    Ycsb(load::YcsbArgs),
    /// Ticket selling (Correctables §4): preliminary views while stock lasts.
    Tickets(load::TicketsArgs),
    /// The Creek paper's evaluation (§6) in the simulator: TPC-C for creek,
    /// smr, bayou and archie across rate sweeps, its variations, a report
    /// beside the paper's numbers.
    Paper(load::PaperArgs),
    /// YCSB-A for minutes on a local cluster, sampling each replica's
    /// memory, disk and consensus-log length (docs/bench/soak.md).
    Soak(soak::Args),
    /// A replica that lost its data rebuilt from a peer's checkpoint on a
    /// local cluster: transfer rate and client stalls (docs/bench/transfer.md).
    Transfer(transfer::Args),
    /// Keys moved between the shards of a local cluster while clients use
    /// them: duration, copy rate and client stalls (docs/bench/moves.md).
    Move(moves::Args),
    /// The leader of a local 3-replica cluster killed, paused and cut off
    /// under steady load: how long strong ops stop, which weak ops go
    /// unanswered (docs/bench/failover.md).
    Failover(failover::Args),
}

/// Run the benchmark `which` names; its report goes to standard output,
/// its progress to standard error.
pub fn run(which: &Bench) -> Result<(), String> {
    match which {
        Bench::Executor(args) => executor::run(args),
        Bench::Cab(args) => cab::run(args),
        Bench::Cluster(args) => cluster::run(args),
        Bench::Peers(args) => peers::run(args),
        Bench::Tpcc(args) => load::tpcc(args),
        Bench::Ycsb(args) => load::ycsb(args),
        Bench::Groups(args) => groups::run(args),
        Bench::Tickets(args) => load::tickets(args),
        Bench::Paper(args) => load::paper(args),
        Bench::Soak(args) => soak::run(args),
        Bench::Transfer(args) => transfer::run(args),
        Bench::Move(args) => moves::run(args),
        Bench::Failover(args) => failover::run(args),
    }
}

/// Print a report: one JSON line with `json`, indented otherwise.
pub fn print_report(report: &serde_json::Value, json: bool) -> Result<(), String> {
    if json {
        println!("{report}");
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(report).map_err(|e| e.to_string())?
        );
    }
    Ok(())
}
