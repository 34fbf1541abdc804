//! The `creek` command: the server (`serve`, `dev`), the client CLI
//! (`call`, `status`), the simulator (`sim`); the benchmarks (`bench`) and
//! `chaos` are parsed here and run by `creek_bench`.

#[macro_use]
mod cli;
mod admin_cmd;
mod backup_cmd;
mod call_cmd;
mod certs_cmd;
mod dev_cmd;
mod keyspace_cmd;
mod kv_cmd;
mod lease_cmd;
mod proc_cmd;
mod reference_cmd;
mod serve_cmd;
mod shards_cmd;
mod sim_cmd;
mod status_cmd;
mod txn_cmd;
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
    /// Read a key, or the keys of a prefix or a range (`--prefix`,
    /// `--from-key`, `--range-end`), as `etcdctl get` does.
    Get(kv_cmd::GetArgs),
    /// Delete a key, or the keys of a prefix or a range, and print how
    /// many were deleted, as `etcdctl del` does.
    Del(kv_cmd::DelArgs),
    /// Run a conditional transaction read from standard input in
    /// etcdctl's txn format: compares, a blank line, the ops if they all
    /// hold, a blank line, the ops otherwise.
    Txn(txn_cmd::Args),
    /// Grant, keep alive, revoke and list leases; keys put with a lease
    /// (`creek call --lease ID kv.put K V`) are deleted when it expires.
    Lease(lease_cmd::Args),
    /// Run a command while holding a lock (a key held through a lease),
    /// as `etcdctl lock`: `creek lock NAME -- CMD ARGS…`.
    Lock(lease_cmd::LockArgs),
    /// Print each replica's role, term, log lengths and counters, and
    /// whether the group has a quorum (exit code 3: a member down, 4: no
    /// quorum).
    Status(status_cmd::Args),
    /// Print the cluster's shard map: its epoch, where keys go, each
    /// shard's replicas and leader (exit code 3: a shard without a leader).
    Shards(shards_cmd::Args),
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
    /// Make a running cluster check users (the one switch every replica
    /// follows).
    Auth(user_cmd::AuthArgs),
    /// Make a certificate authority and the replica and client
    /// certificates signed by it, for TLS (docs/security.md).
    Certs(certs_cmd::Args),
    /// Print this command line's reference as Markdown (what the
    /// documentation site's docs/reference/cli.md holds).
    Reference,
    /// Print a completion script for a shell: bash, zsh or fish (e.g.
    /// `source <(creek completion bash)`).
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
    Chaos(creek_bench::chaos::Args),
    /// Stream a consistent checkpoint of a running cluster into a directory.
    Backup(backup_cmd::BackupArgs),
    /// Make a new replica's data directory from a backup (once per replica).
    Restore(backup_cmd::RestoreArgs),
    /// Run a benchmark and print its result.
    Bench {
        #[command(subcommand)]
        which: creek_bench::Bench,
    },
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
        Command::Get(args) => return cli::finish(kv_cmd::get(&args)),
        Command::Del(args) => return cli::finish(kv_cmd::del(&args)),
        Command::Txn(args) => return cli::finish(txn_cmd::run(&args)),
        Command::Lease(args) => return cli::finish(lease_cmd::run(&args)),
        Command::Lock(args) => return cli::finish(lease_cmd::lock(&args)),
        Command::Status(args) => return cli::finish(status_cmd::run(&args)),
        Command::Shards(args) => return cli::finish(shards_cmd::run(&args)),
        Command::Proc(args) => return cli::finish(proc_cmd::run(&args)),
        Command::Keyspace(args) => return cli::finish(keyspace_cmd::run(&args)),
        Command::User(args) => return cli::finish(user_cmd::run_user(&args)),
        Command::Role(args) => return cli::finish(user_cmd::run_role(&args)),
        Command::Auth(args) => return cli::finish(user_cmd::run_auth(&args)),
        Command::Certs(args) => certs_cmd::run(&args),
        Command::Reference => {
            let command = <Cli as clap::CommandFactory>::command();
            print_bytes(reference_cmd::markdown(&command).as_bytes())
        }
        Command::Completion { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "creek", &mut script);
            print_bytes(&script)
        }
        Command::Chaos(args) => match creek_bench::chaos::run(&args) {
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
        Command::Bench { which } => creek_bench::run(&which),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("creek: {e}");
            ExitCode::FAILURE
        }
    }
}
