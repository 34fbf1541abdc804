//! `creek chaos`: the real-process counterpart of the simulator's swarm.
//!
//! Separate `creek serve` processes on loopback; clients doing weak and
//! strong ops on registers, counters and bank accounts; a nemesis that
//! kills (`SIGKILL`) and restarts replicas — one, the leader, all at once —,
//! stops them (`SIGSTOP`), partitions and slows links (`Admin.SetFaults`),
//! deletes a replica's data directory so that it is rebuilt from a peer's
//! checkpoint, adds replicas and removes others. Then it heals everything,
//! lets the cluster settle, kills every process, restarts the group, reads
//! every key strongly, and hands the history and the replicas' final state
//! to the checkers the simulator uses (`creek-check`), plus its own: weak
//! ops answered in a minority, and no op id issued twice.
//!
//! Run by run the faults differ (real time decides what overlaps), but the
//! seed fixes the nemesis's choices and the clients' ops.

mod client;
mod nemesis;
mod reshard;
mod sharded;
mod verdict;
mod world;

use std::sync::Arc;
use std::time::{Duration, Instant};

use creek_check::history::SETUP_CLIENT;
use creek_server::ServerConfig;
use creek_sim::workload::{self, WorkloadConfig};
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;
use serde_json::json;

use world::{Membership, Security, Slot, World};

/// Arguments of `creek chaos`.
#[derive(clap::Args)]
pub struct Args {
    /// How long the nemesis injects faults (fractions allowed: 0.5 is 30 s).
    #[arg(long, default_value_t = 5.0)]
    minutes: f64,
    /// The seed of the nemesis's choices and the clients' ops (default: from
    /// the clock, printed in the report).
    #[arg(long)]
    seed: Option<u64>,
    /// Replicas the cluster starts with (3 to 5); with `--shards`, per
    /// shard.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Shards (2 or more: a sharded cluster, with the directory group's
    /// three replicas, bank transfers across shards and a nemesis on
    /// every group; see `sharded.rs`). 1: one group.
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// Clients: half on registers and counters, half on bank transfers;
    /// the second half of them issue weak ops only.
    #[arg(long, default_value_t = 6)]
    clients: u32,
    /// With `--shards`: grow and shrink the cluster while it serves — add
    /// a shard, move a third of the accounts to it, move everything off
    /// shard 0 and drop it (`reshard.rs`) — with the `creek shards`
    /// commands an operator runs.
    #[arg(long)]
    reshard: bool,
    /// Inject no fault (with `--reshard`: the cluster only grows and
    /// shrinks under the clients).
    #[arg(long, requires = "reshard")]
    no_nemesis: bool,
    /// Plant a protocol bug in every replica, to show the checkers catch it
    /// (deliver-on-propose, send-before-durable, amnesiac-voter; needs a
    /// build with `--features creek-node/planted-bugs`).
    #[arg(long)]
    plant_bug: Option<String>,
    /// Run the cluster as production runs it: TLS on every client and peer
    /// link (mutual, certificates made for the run) and `[auth]` on, every
    /// call of the clients and the nemesis carrying the root token (one
    /// group only).
    #[arg(long)]
    secure: bool,
    /// Keep the replicas' directory (configurations, logs, data) after the
    /// run, and print where it is.
    #[arg(long)]
    keep: bool,
    /// Print the report as one JSON line.
    #[arg(long)]
    json: bool,
}

/// How long the cluster may take to settle after the faults are healed.
const SETTLE_BOUND: Duration = Duration::from_secs(60);

/// How many times the final dump is taken while the replicas keep
/// committing ops of their own between its reads.
const DUMP_ATTEMPTS: usize = 5;

/// Run `creek chaos`: `Ok(true)` when every check passed.
pub fn run(args: &Args) -> Result<bool, String> {
    if !(3..=5).contains(&args.replicas) {
        return Err("--replicas must be between 3 and 5".into());
    }
    if !(1..=4).contains(&args.shards) {
        return Err("--shards must be between 1 and 4".into());
    }
    if args.secure && args.shards > 1 {
        return Err("--secure runs one group: leave out --shards".into());
    }
    if args.reshard && args.shards < 2 {
        return Err("--reshard needs a sharded cluster: --shards 2 or more".into());
    }
    if args.clients < 2 {
        return Err("--clients must be at least 2 (registers and bank)".into());
    }
    if !(args.minutes > 0.0 && args.minutes <= 24.0 * 60.0) {
        return Err("--minutes must be positive (at most a day)".into());
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // Interrupted, the run's future is dropped, and with it the processes.
    let (report, ok) = runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| e.to_string())?;
        let run = async {
            if args.shards > 1 {
                sharded::run(args, seed).await
            } else {
                chaos(args, seed).await
            }
        };
        tokio::select! {
            r = run => r,
            _ = tokio::signal::ctrl_c() => Err("interrupted".to_string()),
            _ = term.recv() => Err("terminated".to_string()),
        }
    })?;
    crate::print_report(&report, args.json)?;
    Ok(ok)
}

/// The settings every chaos replica runs with.
fn configure(plant_bug: Option<String>) -> impl Fn(&mut ServerConfig) {
    move |c| {
        c.allow_fault_injection = true;
        c.workers = 1;
        c.checkpoint_every_secs = 2;
        c.plant_bug.clone_from(&plant_bug);
    }
}

/// The workloads' settings: few keys, so that ops conflict.
fn workload_config() -> WorkloadConfig {
    WorkloadConfig {
        keys: 4,
        accounts: 6,
        strong_share: 0.5,
        final_share: 0.5,
        ..WorkloadConfig::default()
    }
}

async fn chaos(args: &Args, seed: u64) -> Result<(serde_json::Value, bool), String> {
    let configured = configure(args.plant_bug.clone());
    let root = if args.secure {
        Some(creek_server::auth::Token::generate(true)?)
    } else {
        None
    };
    let auth = creek_server::AuthConfig {
        enabled: root.is_some(),
        root_token_sha256: root.as_ref().map(|t| creek_server::auth::to_hex(&t.hash())),
    };
    // The ending waits for the group to settle (nothing committing), which
    // an idle leader's clock no-ops never let it do: stable times off (the
    // sharded run, which waits for no such point, keeps them on).
    let edit = move |c: &mut ServerConfig| {
        configured(c);
        c.snapshot.stable_every_ms = Some(0);
        c.auth = auth.clone();
    };
    let mut servers = crate::servers::start(
        args.replicas,
        &format!("chaos-{seed}"),
        "info",
        args.secure,
        &edit,
    )?;
    servers.keep = args.keep;
    let security = match &root {
        Some(token) => Some(Security {
            tls: crate::servers::client_tls(&servers)?,
            token: token.to_string(),
        }),
        None => None,
    };
    // Replicas the nemesis adds get the same settings, and their
    // certificates (made for every slot) when the run is secure.
    let certs = args.secure.then(|| crate::servers::certs_dir(&servers));
    let edit = move |c: &mut ServerConfig| {
        edit(c);
        if let Some(dir) = &certs {
            c.tls = Some(creek_server::TlsConfig::in_dir(dir, c.id));
        }
    };
    let slots = servers
        .clients
        .iter()
        .map(|a| Slot::new(*a, Membership::Member, security.as_ref()))
        .collect::<Result<_, _>>()?;
    let world = Arc::new(World::new(slots, security));
    let poller = tokio::spawn(nemesis::poll(world.clone()));
    let run_nonce = seed.rotate_left(17) | 1;

    // Setup (the bank's accounts), then the clients.
    let config = workload_config();
    let kv = workload::by_name("kv", &config)?;
    let bank = workload::by_name("bank", &config)?;
    let setup: Vec<ProcCall> = kv.setup().into_iter().chain(bank.setup()).collect();
    client::run_strong(
        &world,
        SETUP_CLIENT,
        run_nonce,
        setup,
        seed,
        Duration::from_secs(60),
    )
    .await
    .map_err(|e| format!("setting up the accounts: {e}"))?;
    let families: [client::Shared; 2] = [
        Arc::new(std::sync::Mutex::new(kv)),
        Arc::new(std::sync::Mutex::new(bank)),
    ];
    let mut clients = Vec::new();
    for c in 0..args.clients {
        let family = families[(c % 2) as usize].clone();
        let home = c as usize % args.replicas;
        clients.push(tokio::spawn(client::run(
            world.clone(),
            c,
            run_nonce + u64::from(c) + 1,
            home,
            family,
            c >= args.clients / 2,
            seed ^ (u64::from(c) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        )));
    }

    // Faults.
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(args.minutes * 60.0);
    let mut nemesis = nemesis::Nemesis::new(world.clone(), seed, edit);
    nemesis.run(&mut servers, until).await;
    world
        .stop_clients
        .store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }

    // Heal, settle; kill everything, restart the group, settle; read every
    // key; settle.
    nemesis.heal(&mut servers).await?;
    let healed_us = world.now_us();
    let first = nemesis::settle(&world, SETTLE_BOUND).await;
    nemesis.kill_all_and_restart(&mut servers).await?;
    let second = nemesis::settle(&world, SETTLE_BOUND).await;
    let reads = final_reads(&config);
    let read = client::run_strong(
        &world,
        args.clients,
        run_nonce + u64::from(args.clients) + 1,
        reads,
        seed,
        SETTLE_BOUND,
    )
    .await;
    let mut third = nemesis::settle(&world, SETTLE_BOUND).await;
    // The replicas commit ops of their own at any time (session expiry,
    // stabilizer no-ops): the states dumped are of one settled point only
    // if nothing committed while they were read. Else read them again.
    let mut before = nemesis::settled_len(&world);
    let mut dump = nemesis::dump_members(&world).await;
    for _ in 1..DUMP_ATTEMPTS {
        // Polls that started after the dump.
        tokio::time::sleep(nemesis::POLL_EVERY * 4).await;
        third = nemesis::settle(&world, SETTLE_BOUND).await;
        let after = nemesis::settled_len(&world);
        if third.is_none() || after == before {
            break;
        }
        before = after;
        dump = nemesis::dump_members(&world).await;
    }
    let (dumps, unread) = dump;
    nemesis.note_exits(&mut servers);
    world
        .stop_polling
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = poller.await;

    let settled = first.is_some() && second.is_some() && third.is_some() && read.is_ok();
    let verdict = verdict::judge(
        &world,
        &families,
        dumps,
        verdict::Ending {
            settled,
            settled_after_us: first.map(|d| d.as_micros() as u64),
            healed_us,
            final_reads: read.err(),
            unread,
        },
    );
    let ok = verdict.ok();
    let state = world.lock();
    let report = json!({
        "command": "chaos",
        "seed": seed,
        "minutes": args.minutes,
        "replicas_initial": args.replicas,
        "replica_slots": state.slots.len(),
        "clients": args.clients,
        "plant_bug": args.plant_bug,
        "secure": args.secure,
        "faults": state.faults,
        "nemesis_skipped": state.skipped,
        "ops": verdict.ops,
        "checks": verdict.checks_json(),
        "ok": ok,
        "dir": args.keep.then(|| servers.dir.display().to_string()),
    });
    Ok((report, ok))
}

/// A strong read of every register and counter, and the bank's total.
fn final_reads(config: &WorkloadConfig) -> Vec<ProcCall> {
    use creek_sim::workload::{bank, kv};
    let mut calls = Vec::new();
    for i in 0..config.keys {
        for key in [kv::register_key(i), kv::counter_key(i)] {
            calls.push(ProcCall::new(kv::GET, encode_args(&[Value::Bytes(key)])));
        }
    }
    calls.push(ProcCall::new(
        bank::TOTAL,
        encode_args(&[Value::Int(config.accounts as i64)]),
    ));
    calls
}
