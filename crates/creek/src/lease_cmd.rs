//! `creek lease` and `creek lock`: leases as `etcdctl lease` handles them,
//! and a command run while holding a lock, as `etcdctl lock NAME CMD`
//! (docs/api.md, "Leases").

use std::time::Duration;

use creek_client::{Client, Error, Lock};

use crate::cli::{self, exit, Endpoints, Failure, Format, Output};

/// Arguments of `creek lease`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    endpoints: Endpoints,
    /// `-o table`: sentences for people; `-o json`: one object per line;
    /// `-o value`: the bare result (`grant`: the id alone).
    #[command(flatten)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Grant a lease of SECONDS (1 to 31,536,000) and print its id.
    Grant {
        /// Its time to live.
        seconds: i64,
    },
    /// Keep a lease alive, renewing it every third of its TTL until
    /// Ctrl-C (or once, with --once); prints each renewal.
    KeepAlive {
        /// The lease id.
        id: i64,
        /// Renew it once and exit.
        #[arg(long)]
        once: bool,
    },
    /// Revoke a lease: it ends now and every key attached to it is deleted.
    Revoke {
        /// The lease id.
        id: i64,
    },
    /// Print a lease's granted TTL and the seconds it has left.
    Ttl {
        /// The lease id.
        id: i64,
        /// Also print the keys attached to it (at most 1,000).
        #[arg(long)]
        keys: bool,
    },
    /// Print every live lease's id.
    List,
}

/// Arguments of `creek lock`.
#[derive(clap::Args, Debug)]
pub struct LockArgs {
    #[command(flatten)]
    endpoints: Endpoints,
    /// The lock's name (held under the key `lock/NAME`).
    name: String,
    /// The TTL of the lease the lock is held with, in seconds: how long
    /// the lock outlives a holder that stopped renewing it.
    #[arg(long, default_value_t = 10)]
    ttl: u64,
    /// How long to wait for the lock, in seconds, before giving up (exit 1).
    #[arg(long, default_value_t = 3600)]
    wait: u64,
    /// The command to run while holding the lock (after `--`); without
    /// one, print the key and hold the lock until Ctrl-C.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Run `creek lease`.
pub fn run(args: &Args) -> Result<(), Failure> {
    cli::runtime()?.block_on(async {
        let addrs = args.endpoints.list();
        let client = cli::connect(&args.endpoints, &addrs).await?;
        let failed = |e: Error| match e {
            Error::LeaseNotFound(m) => Failure::new(exit::ABORTED, m),
            e => Failure::new(exit::FAILED, cli::explain(&e, &addrs)),
        };
        let format = args.output.output;
        match &args.command {
            Command::Grant { seconds } => {
                let id = client.lease_grant(*seconds).await.map_err(failed)?;
                match format {
                    Format::Value => out!("{id}"),
                    Format::Json => out!("{}", serde_json::json!({"id": id, "ttl": seconds})),
                    Format::Table => out!("lease {id} granted with TTL({seconds}s)"),
                }
            }
            Command::KeepAlive { id, once } => keep_alive(&client, *id, *once, format)
                .await
                .map_err(failed)?,
            Command::Revoke { id } => {
                let deleted = client.lease_revoke(*id).await.map_err(failed)?;
                match format {
                    Format::Value => out!("{deleted}"),
                    Format::Json => out!("{}", serde_json::json!({"id": id, "deleted": deleted})),
                    Format::Table => out!("lease {id} revoked ({deleted} keys deleted)"),
                }
            }
            Command::Ttl { id, keys } => {
                let ttl = client.lease_ttl(*id).await.map_err(failed)?;
                let names: Vec<String> = ttl
                    .keys
                    .iter()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .collect();
                match format {
                    Format::Value => out!("{}", ttl.remaining_s),
                    Format::Json => out!(
                        "{}",
                        serde_json::json!({
                            "id": id,
                            "ttl": ttl.granted_s,
                            "remaining": ttl.remaining_s,
                            "keys": if *keys { serde_json::json!(names) } else { serde_json::Value::Null },
                        })
                    ),
                    Format::Table if *keys => out!(
                        "lease {id} granted with TTL({}s), remaining({}s), attached keys({})",
                        ttl.granted_s,
                        ttl.remaining_s,
                        names.join(", ")
                    ),
                    Format::Table => out!(
                        "lease {id} granted with TTL({}s), remaining({}s)",
                        ttl.granted_s,
                        ttl.remaining_s
                    ),
                }
            }
            Command::List => {
                let ids = client.lease_list().await.map_err(failed)?;
                match format {
                    Format::Json => out!("{}", serde_json::json!({ "leases": ids })),
                    Format::Value => {
                        for id in ids {
                            out!("{id}");
                        }
                    }
                    Format::Table => {
                        out!("found {} leases", ids.len());
                        for id in ids {
                            out!("{id}");
                        }
                    }
                }
            }
        }
        Ok(())
    })
}

/// Renew `id` every third of its TTL (once with `once`) until Ctrl-C.
async fn keep_alive(client: &Client, id: i64, once: bool, format: Format) -> Result<(), Error> {
    loop {
        let ttl = client.lease_keep_alive_once(id).await?;
        match format {
            Format::Value => out!("{ttl}"),
            Format::Json => out!("{}", serde_json::json!({"id": id, "ttl": ttl})),
            Format::Table => out!("lease {id} keepalived with TTL({ttl})"),
        }
        if once {
            return Ok(());
        }
        let every = Duration::from_secs(u64::try_from(ttl).unwrap_or(1)) / 3;
        tokio::select! {
            _ = tokio::time::sleep(every.max(Duration::from_millis(100))) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// Run `creek lock`: take the lock, run the command while holding it
/// (stopping it if the lock is lost), release the lock, and exit with the
/// command's status.
pub fn lock(args: &LockArgs) -> Result<(), Failure> {
    cli::runtime()?.block_on(async {
        let addrs = args.endpoints.list();
        let client = cli::connect(&args.endpoints, &addrs).await?;
        let failed = |e: Error| Failure::new(exit::FAILED, cli::explain(&e, &addrs));
        let lock = Lock::acquire(
            &client,
            &args.name,
            Duration::from_secs(args.ttl.max(1)),
            Duration::from_secs(args.wait),
        )
        .await
        .map_err(failed)?;
        let result = hold(&lock, &args.command).await;
        lock.release().await.map_err(failed)?;
        result
    })
}

/// Run `command` (or wait for Ctrl-C without one) while `lock` is held.
async fn hold(lock: &Lock, command: &[String]) -> Result<(), Failure> {
    let Some((program, rest)) = command.split_first() else {
        out!("{}", String::from_utf8_lossy(lock.key()));
        return watch_lock(lock).await;
    };
    let mut child = tokio::process::Command::new(program)
        .args(rest)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Failure::new(exit::FAILED, format!("cannot run {program}: {e}")))?;
    let status = tokio::select! {
        status = child.wait() => status,
        lost = watch_lock(lock) => {
            let _ = child.kill().await;
            return lost;
        }
    };
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(Failure::new(
            u8::try_from(s.code().unwrap_or(1)).unwrap_or(1).max(1),
            String::new(),
        )),
        Err(e) => Err(Failure::new(exit::FAILED, format!("{program}: {e}"))),
    }
}

/// Wait until Ctrl-C (`Ok`), or until the lock is lost (`Err`).
async fn watch_lock(lock: &Lock) -> Result<(), Failure> {
    loop {
        if let Some(why) = lock.lost() {
            return Err(Failure::new(exit::FAILED, format!("lock lost: {why}")));
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}
