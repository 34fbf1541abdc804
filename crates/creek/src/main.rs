//! The `creek` command: the server (`serve`, `dev`), the client CLI
//! (`call`, `status`), the simulator (`sim`) and the benchmarks (`bench`).

mod admin_cmd;
mod backup_cmd;
mod bench_cab;
mod bench_cluster;
mod bench_driver;
mod bench_executor;
mod bench_executor_procs;
mod bench_groups;
mod bench_load;
mod bench_peers;
mod bench_procs;
mod bench_soak;
mod bench_stages;
mod bench_transfer;
mod call_cmd;
mod certs_cmd;
mod chaos;
mod cli;
mod dev_cmd;
mod keyspace_cmd;
mod proc_cmd;
mod serve_cmd;
mod sim_cmd;
mod status_cmd;
mod user_cmd;
mod watch_cmd;

// The executor allocates small objects at a high rate (versions, read sets,
// outcomes); mimalloc serves that pattern markedly faster than the system
// allocator (see docs/bench/executor.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "creek",
    version,
    about = "Creek: mixed-consistency transactional replication"
)]
struct Cli {
    #[command(flatten)]
    log: serve_cmd::LogArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one replica (see docs/operations.md).
    Serve(serve_cmd::ServeArgs),
    /// Run a local cluster on loopback, each replica its own process, until
    /// Ctrl-C; `stop N`, `start N`, `kill N` at its prompt.
    Dev(dev_cmd::DevArgs),
    /// Run the deterministic cluster simulator with faults and checkers.
    Sim(sim_cmd::Args),
    /// Invoke a procedure on a running cluster and print each view as it arrives.
    Call(call_cmd::Args),
    /// Print each replica's role, term, log lengths and counters, and
    /// whether the group has a quorum (exit code 3: a member down, 4: no
    /// quorum).
    Status(status_cmd::Args),
    /// List the procedures a cluster runs, with their signatures; register
    /// and drop user procedures.
    Proc(proc_cmd::Args),
    /// Create and list the keyspaces of user procedures.
    Keyspace(keyspace_cmd::Args),
    /// Add, list and remove users, make and revoke their tokens (a
    /// cluster with `[auth] enabled`).
    User(user_cmd::UserArgs),
    /// Define and list the roles users are given.
    Role(user_cmd::RoleArgs),
    /// Print a completion script for a shell: bash, zsh or fish (e.g.
    /// `source <(creek completion bash)`).
    Certs(certs_cmd::Args),
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the changes under a key prefix as they commit, resuming at
    /// another replica when one fails.
    Watch(watch_cmd::Args),
    /// Change or show the replica group: add-replica, remove-replica, members.
    Admin(admin_cmd::Args),
    /// Run `creek serve` processes under faults (kills, pauses, partitions,
    /// lost disks, membership changes) and check what clients saw.
    Chaos(chaos::Args),
    /// Stream a consistent checkpoint of a running cluster into a directory.
    Backup(backup_cmd::BackupArgs),
    /// Make a new replica's data directory from a backup (once per replica).
    Restore(backup_cmd::RestoreArgs),
    /// Run a benchmark and print its result.
    Bench {
        #[command(subcommand)]
        which: Bench,
    },
}

#[derive(Subcommand)]
enum Bench {
    /// The replica core and multiversion executor on a synthetic key-value stream.
    Executor(bench_executor::Args),
    /// CAB and gossip on an in-process network: bytes per op and message delays.
    Cab(bench_cab::Args),
    /// A local cluster of `creek serve` processes: client-observed latency and throughput.
    Cluster(bench_cluster::Args),
    /// Creek beside etcd, PostgreSQL and Redis on this machine, measured
    /// alike (docs/bench/peers.md; the peers need `--features peers`).
    Peers(bench_peers::Args),
    /// TPC-C in the simulator or on a local cluster: a rate or client sweep.
    Tpcc(bench_load::TpccArgs),
    /// MyriaStore's Message Groups as user procedures (24% membership
    /// checks, 1% joins, 71% inbox reads, 4% posts) and the spam contest,
    /// with labels as designed, all strong and all weak.
    Groups(bench_groups::Args),
    /// YCSB A/B/C, with the divergence of preliminary from final views.
    Ycsb(bench_load::YcsbArgs),
    /// Ticket selling (Correctables §4): preliminary views while stock lasts.
    Tickets(bench_load::TicketsArgs),
    /// The Creek paper's evaluation (§6) in the simulator: TPC-C for creek,
    /// smr, bayou and archie across rate sweeps, its variations, a report
    /// beside the paper's numbers.
    Paper(bench_load::PaperArgs),
    /// YCSB-A for minutes on a local cluster, sampling each replica's
    /// memory, disk and consensus-log length (docs/bench/soak.md).
    Soak(bench_soak::Args),
    /// A replica that lost its data rebuilt from a peer's checkpoint on a
    /// local cluster: transfer rate and client stalls (docs/bench/transfer.md).
    Transfer(bench_transfer::Args),
}

/// Print a report: one JSON line with `--json`, indented otherwise.
pub(crate) fn print_report(report: &serde_json::Value, json: bool) -> Result<(), String> {
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

/// Write `b` to stdout; a reader that went away (`| head`) is not an
/// error.
fn print_bytes(b: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(b).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.to_string()),
        _ => Ok(()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve_cmd::serve(&args, &cli.log),
        Command::Dev(args) => dev_cmd::dev(&args, &cli.log),
        Command::Call(args) => return cli::finish(call_cmd::run(&args)),
        Command::Status(args) => return cli::finish(status_cmd::run(&args)),
        Command::Proc(args) => return cli::finish(proc_cmd::run(&args)),
        Command::Keyspace(args) => return cli::finish(keyspace_cmd::run(&args)),
        Command::User(args) => return cli::finish(user_cmd::run_user(&args)),
        Command::Role(args) => return cli::finish(user_cmd::run_role(&args)),
        Command::Certs(args) => certs_cmd::run(&args),
        Command::Completion { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "creek", &mut script);
            print_bytes(&script)
        }
        Command::Chaos(args) => match chaos::run(&args) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::FAILURE,
            Err(e) => Err(e),
        },
        Command::Sim(args) => match sim_cmd::run(&args) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::FAILURE,
            Err(e) => Err(e),
        },
        Command::Watch(args) => watch_cmd::run(&args),
        Command::Admin(args) => admin_cmd::run(&args),
        Command::Backup(args) => backup_cmd::backup(&args),
        Command::Restore(args) => backup_cmd::restore(&args),
        Command::Bench {
            which: Bench::Executor(args),
        } => bench_executor::run(&args),
        Command::Bench {
            which: Bench::Cab(args),
        } => bench_cab::run(&args),
        Command::Bench {
            which: Bench::Cluster(args),
        } => bench_cluster::run(&args),
        Command::Bench {
            which: Bench::Peers(args),
        } => bench_peers::run(&args),
        Command::Bench {
            which: Bench::Tpcc(args),
        } => bench_load::tpcc(&args),
        Command::Bench {
            which: Bench::Ycsb(args),
        } => bench_load::ycsb(&args),
        Command::Bench {
            which: Bench::Groups(args),
        } => bench_groups::run(&args),
        Command::Bench {
            which: Bench::Tickets(args),
        } => bench_load::tickets(&args),
        Command::Bench {
            which: Bench::Paper(args),
        } => bench_load::paper(&args),
        Command::Bench {
            which: Bench::Soak(args),
        } => bench_soak::run(&args),
        Command::Bench {
            which: Bench::Transfer(args),
        } => bench_transfer::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("creek: {e}");
            ExitCode::FAILURE
        }
    }
}
