//! `creek bench transfer`: how fast a replica that lost its data directory
//! is rebuilt from a member's checkpoint (state transfer), and what the
//! rebuild costs the clients of the replicas left, on a local cluster of
//! three `creek serve` processes.
//!
//! 1. Three replicas start with checkpoints every `--checkpoint-secs`
//!    ([`CHECKPOINT_EVERY_SECS`], the server default, unless given); the
//!    bench waits for a leader (and, should replica 3 lead, restarts it so
//!    that it follows: the bench kills replica 3 and measures the
//!    transfer, not an election).
//! 2. `--mib` of state is loaded: strong `kv.put`s of `--value-kib` values
//!    under distinct keys, from [`LOADERS`] clients at replicas 1 and 2.
//! 3. The bench waits a checkpoint interval and two seconds, so that a
//!    checkpoint covering the load is on disk.
//! 4. A probe starts: one client issuing strong `kv.incr`s of one key at
//!    replica 1, back to back, each timed from its start.
//! 5. After [`BASELINE`] of probing, replica 3 is SIGKILLed, its data
//!    directory deleted and the process started again with the same
//!    configuration. Its `Status` is polled every [`POLL`]: the first reply
//!    with `snapshot_fetch_total > 0` is the first chunk, the first in which
//!    it is a member again (with `snapshots_installed > 0`) the install.
//! 6. The probe goes on for [`AFTER`] past the install, then stops.
//!
//! Meanwhile every replica's `Status` is polled every [`POLL`] too, to
//! tell stalls apart: status is answered by the node thread, so a slow
//! reply is a busy node thread (the sender taking its checkpoint, the
//! receiver installing one); writes submitted but not yet durable for long
//! (`submitted_seq` ahead of `durable_seq`) are a busy or slow disk writer,
//! which holds the replica's acknowledgements and so its strong ops.
//!
//! "During" is the rebuild, from the restart to the install: it includes
//! the checkpoint the sender takes (and encodes, on another thread) when
//! the first fetch arrives, which comes before the first chunk. "Before" is the
//! [`BASELINE`] before the kill. While replica 3 is out, a strong op needs
//! both replicas left, so a stall of either shows at the probe.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_client::{CallOptions, Client, Levels};
use creek_types::value::Value;

use crate::cluster::find_leader;
use crate::load::Progress;
use crate::servers::Servers;
use measure::{ask_status, monitor, ProbeOp, StatusSample};
use report::{report, summary};

pub(crate) mod measure;
mod report;

/// Replicas in the cluster.
const REPLICAS: usize = 3;
/// The replica that loses its data (replica 3).
const VICTIM: usize = 2;
/// The replica the probe calls (replica 1).
const PROBED: usize = 0;
/// Concurrent loading clients, alternating between replicas 1 and 2.
const LOADERS: usize = 8;
/// The servers' checkpoint interval unless `--checkpoint-secs` is given:
/// the server default. Every checkpoint writes the whole state, so a short
/// interval with a large state keeps the disk writers busy for good
/// (docs/bench/transfer.md).
const CHECKPOINT_EVERY_SECS: u64 = 30;
/// Longest checkpoint interval accepted (a day).
const CHECKPOINT_SECS_MAX: u64 = 24 * 3600;
/// Probing before the kill, the baseline.
const BASELINE: Duration = Duration::from_secs(5);
/// Probing after the install.
const AFTER: Duration = Duration::from_secs(5);
/// How often the rebuilt replica's status is asked for.
const POLL: Duration = Duration::from_millis(20);
/// Deadline of one op.
const OP_TIMEOUT: Duration = Duration::from_secs(30);
/// A client's pause after a failed op.
const ERROR_PAUSE: Duration = Duration::from_millis(50);
/// Failed puts tolerated (each retried) before the load gives up.
const LOAD_ERRORS_MAX: u64 = 100;
/// Largest state accepted (64 GiB) and largest value (the servers accept
/// requests up to 4 MiB).
const MIB_MAX: u64 = 64 << 10;
const VALUE_KIB_MAX: u64 = 2 << 10;

/// Arguments of `creek bench transfer`.
#[derive(clap::Args)]
pub struct Args {
    /// MiB of state loaded before replica 3 loses its data.
    #[arg(long, default_value_t = 1024)]
    mib: u64,
    /// KiB per value (one `kv.put` each, under distinct keys).
    #[arg(long, default_value_t = 64)]
    value_kib: u64,
    /// The servers' checkpoint interval in seconds (`checkpoint_every_secs`);
    /// the bench waits this and 2 s after the load.
    #[arg(long, default_value_t = CHECKPOINT_EVERY_SECS)]
    checkpoint_secs: u64,
    /// Print one JSON line.
    #[arg(long)]
    json: bool,
}

impl Args {
    fn validate(&self) -> Result<(), String> {
        if !(1..=MIB_MAX).contains(&self.mib) {
            return Err(format!("--mib {} must be within 1..={MIB_MAX}", self.mib));
        }
        if !(1..=VALUE_KIB_MAX).contains(&self.value_kib) {
            return Err(format!(
                "--value-kib {} must be within 1..={VALUE_KIB_MAX}",
                self.value_kib
            ));
        }
        if !(1..=CHECKPOINT_SECS_MAX).contains(&self.checkpoint_secs) {
            return Err(format!(
                "--checkpoint-secs {} must be within 1..={CHECKPOINT_SECS_MAX}",
                self.checkpoint_secs
            ));
        }
        if self.value_kib > self.mib * 1024 {
            return Err(format!(
                "--value-kib {} is more than --mib {} holds",
                self.value_kib, self.mib
            ));
        }
        Ok(())
    }

    fn value_bytes(&self) -> usize {
        // Both bounded by `validate`: no overflow.
        (self.value_kib * 1024) as usize
    }

    /// Values loaded: `--mib` in all, the last one counted whole.
    fn values(&self) -> u64 {
        (self.mib * 1024).div_ceil(self.value_kib)
    }

    /// The servers' request limit: the default, or room for one value and
    /// its key.
    fn max_request_bytes(&self, default: usize) -> usize {
        default.max(self.value_bytes() + (64 << 10))
    }
}

fn key(n: u64) -> Value {
    Value::Bytes(format!("transfer-{n:010}").into_bytes().into())
}

/// A strong op's final view, as an error when it failed or aborted.
async fn strong(c: &Client, procedure: &str, args: Vec<Value>) -> Result<(), String> {
    let options = CallOptions {
        timeout: Some(OP_TIMEOUT),
        weak_final: false,
        ..Default::default()
    };
    let op = c
        .invoke_with(procedure, args, Levels::Strong, options)
        .await
        .map_err(|e| e.to_string())?;
    let view = op.final_view().await.map_err(|e| e.to_string())?;
    view.outcome
        .map(drop)
        .map_err(|abort| format!("{procedure} aborted: {abort}"))
}

async fn connect(addr: SocketAddr) -> Result<Client, String> {
    Client::connect([addr.to_string()])
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))
}

/// The load's outcome.
struct Loaded {
    secs: f64,
    errors: u64,
}

/// Put `args.values()` values under distinct keys, strong, from
/// [`LOADERS`] clients at replicas 1 and 2.
async fn load(addrs: &[SocketAddr], args: &Args, progress: &Progress) -> Result<Loaded, String> {
    let total = args.values();
    let value_bytes = args.value_bytes();
    // Values differ from key to key (slices of one buffer at different
    // offsets): nothing in the state is a run of one byte.
    let pattern: Bytes = (0..value_bytes + 251)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let last_error = Arc::new(Mutex::new(String::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..LOADERS {
        let c = connect(addrs[i % 2]).await?;
        let (next, done, errors, last_error, pattern) = (
            next.clone(),
            done.clone(),
            errors.clone(),
            last_error.clone(),
            pattern.clone(),
        );
        tasks.spawn(async move {
            loop {
                if errors.load(Ordering::Relaxed) > LOAD_ERRORS_MAX {
                    return;
                }
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    return;
                }
                let at = (n % 251) as usize;
                let value = Value::Bytes(pattern.slice(at..at + value_bytes));
                loop {
                    match strong(&c, "kv.put", vec![key(n), value.clone()]).await {
                        Ok(()) => {
                            done.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        Err(e) => {
                            if let Ok(mut last) = last_error.lock() {
                                *last = e;
                            }
                            if errors.fetch_add(1, Ordering::Relaxed) + 1 > LOAD_ERRORS_MAX {
                                return;
                            }
                            tokio::time::sleep(ERROR_PAUSE).await;
                        }
                    }
                }
            }
        });
    }
    let start = Instant::now();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut tick = tokio::time::interval(Duration::from_millis(if tty { 500 } else { 10_000 }));
    let line = |start: Instant| {
        let n = done.load(Ordering::Relaxed);
        let bytes = n * value_bytes as u64;
        let secs = start.elapsed().as_secs_f64();
        (
            n as f64 / total as f64,
            format!(
                "loaded {:.0} of {} MiB ({n} of {total} values, {:.1} MB/s, {:.0} s)",
                bytes as f64 / (1 << 20) as f64,
                args.mib,
                bytes as f64 / 1e6 / secs.max(1e-3),
                secs
            ),
        )
    };
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(())) => {}
                Some(Err(e)) => return Err(format!("a loading client failed: {e}")),
            },
            _ = tick.tick() => {
                let (fraction, text) = line(start);
                if tty {
                    progress.update(0, fraction, &text);
                } else {
                    eprintln!("bench transfer: {text}");
                }
            }
        }
    }
    progress.finish();
    let secs = start.elapsed().as_secs_f64();
    let errors = errors.load(Ordering::Relaxed);
    if done.load(Ordering::Relaxed) < total {
        let last = last_error.lock().map(|l| l.clone()).unwrap_or_default();
        return Err(format!(
            "the load failed: {errors} puts failed, the last with: {last}"
        ));
    }
    eprintln!("bench transfer: {}", line(start).1);
    Ok(Loaded { secs, errors })
}

/// Strong increments of one key, back to back, until `stop`.
async fn probe(c: Client, stop: Arc<AtomicBool>) -> (Vec<ProbeOp>, Option<String>) {
    let mut ops = Vec::new();
    let mut last_error = None;
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        let r = strong(&c, "kv.incr", vec![key(u64::MAX), Value::Int(1)]).await;
        ops.push(ProbeOp {
            start,
            end: Instant::now(),
            ok: r.is_ok(),
        });
        if let Err(e) = r {
            last_error = Some(e);
            tokio::time::sleep(ERROR_PAUSE).await;
        }
    }
    (ops, last_error)
}

/// What the rebuilt replica's status showed.
#[derive(Debug)]
struct Rebuild {
    restart: Instant,
    /// The first reply with `snapshot_fetch_total > 0`, if one was seen.
    first_chunk: Option<Instant>,
    /// The last reply before the install (the transfer started after it
    /// when no first chunk was seen).
    last_before_install: Instant,
    /// The last reply with the fetch under way.
    last_fetching: Option<Instant>,
    installed: Instant,
    bytes: u64,
    restarts: u64,
    /// The slowest status reply while the replica was out.
    status_max: Duration,
}

/// The leader, once it is not replica 3: if replica 3 leads, it is
/// restarted (with its data) and waited for until it follows.
async fn leader_besides_victim(
    servers: &mut Servers,
    addrs: &[SocketAddr],
) -> Result<usize, String> {
    let leader = find_leader(addrs, None).await?;
    if leader != VICTIM {
        return Ok(leader);
    }
    eprintln!("bench transfer: replica 3 leads; restarting it so that another one does");
    servers.kill(VICTIM)?;
    let leader = find_leader(&addrs[..VICTIM], None).await?;
    servers.spawn(VICTIM)?;
    wait_following(addrs[VICTIM]).await?;
    Ok(leader)
}

/// Poll a restarted replica until it follows, then give it 2 s to settle.
async fn wait_following(addr: SocketAddr) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(c) = connect(addr).await {
            if c.status().await.is_ok_and(|s| s.role == "follower") {
                tokio::time::sleep(Duration::from_secs(2)).await;
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("replica 3 did not follow within 60 s of its restart".into())
}

/// Poll the restarted replica until it is a member again.
async fn watch_rebuild(
    servers: &mut Servers,
    restart: Instant,
    within: Duration,
) -> Result<Rebuild, String> {
    let addr = servers.clients[VICTIM];
    let deadline = restart + within;
    let mut client: Option<Client> = None;
    let mut first_chunk = None;
    let mut last_fetching = None;
    let mut last_before_install = restart;
    let mut last_total = 0;
    let mut status_max = Duration::ZERO;
    let mut last_seen = String::from("no status reply");
    loop {
        servers.check_alive()?;
        if Instant::now() > deadline {
            return Err(format!(
                "replica {} was not rebuilt within {:.0} s (last status: {last_seen}); {}",
                VICTIM + 1,
                within.as_secs_f64(),
                creek_server::replica_log::log_tail(&servers.log_path(VICTIM))
            ));
        }
        let polled = Instant::now();
        match ask_status(&mut client, addr).await {
            Ok((s, asked, now)) => {
                status_max = status_max.max(now - asked);
                let counter = |k: &str| s.counters.get(k).copied().unwrap_or(0);
                let total = counter("snapshot_fetch_total");
                let installed = counter("snapshots_installed");
                last_seen = format!(
                    "role {:?}, {} of {total} bytes fetched, {installed} installed",
                    s.role,
                    counter("snapshot_fetch_received")
                );
                let member = !matches!(s.role.as_str(), "lost" | "joining" | "");
                if member && installed > 0 {
                    let received = counter("snapshot_bytes_received");
                    return Ok(Rebuild {
                        restart,
                        first_chunk,
                        last_before_install,
                        last_fetching,
                        installed: now,
                        bytes: if last_total > 0 { last_total } else { received },
                        restarts: counter("snapshot_restarts"),
                        status_max,
                    });
                }
                if total > 0 {
                    first_chunk.get_or_insert(now);
                    last_total = total;
                    last_fetching = Some(now);
                }
                last_before_install = now;
            }
            Err(e) => last_seen = e,
        }
        tokio::time::sleep_until((polled + POLL).into()).await;
    }
}

/// Everything measured in one run.
struct Measured {
    loaded: Loaded,
    rebuild: Rebuild,
    kill: Instant,
    probe: Vec<ProbeOp>,
    probe_error: Option<String>,
    victim_led: bool,
    /// The replicas that served the checkpoint (1-based).
    senders: Vec<usize>,
    /// Each replica's status replies while the probe ran.
    status: Vec<Vec<StatusSample>>,
}

/// The bench on a started cluster.
async fn transfer(
    args: &Args,
    servers: &mut Servers,
    progress: &Progress,
) -> Result<Measured, String> {
    let addrs = servers.clients.clone();
    // Replica 3 follows before anything is measured.
    let leader = leader_besides_victim(servers, &addrs).await?;
    eprintln!(
        "bench transfer: replica {} leads; loading {} MiB in {} values of {} KiB…",
        leader + 1,
        args.mib,
        args.values(),
        args.value_kib
    );
    let loaded = load(&addrs, args, progress).await?;
    servers.check_alive()?;
    let settle = Duration::from_secs(args.checkpoint_secs + 2);
    eprintln!(
        "bench transfer: waiting {} s for a checkpoint of the load…",
        settle.as_secs()
    );
    tokio::time::sleep(settle).await;
    servers.check_alive()?;
    // Leadership may have moved to replica 3 during the load: killing it
    // would measure an election.
    leader_besides_victim(servers, &addrs).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let probe_task = tokio::spawn(probe(connect(addrs[PROBED]).await?, stop.clone()));
    let monitors: Vec<_> = addrs
        .iter()
        .map(|a| tokio::spawn(monitor(*a, stop.clone())))
        .collect();
    let measured = async {
        tokio::time::sleep(BASELINE).await;
        let victim_led = connect(addrs[VICTIM])
            .await?
            .status()
            .await
            .map_err(|e| format!("replica {} status: {e}", VICTIM + 1))?
            .role
            == "leader";
        eprintln!(
            "bench transfer: killing replica {}, deleting its data, restarting it…",
            VICTIM + 1
        );
        let kill = Instant::now();
        servers.kill(VICTIM)?;
        let data = servers.data_dir(VICTIM);
        std::fs::remove_dir_all(&data).map_err(|e| format!("deleting {}: {e}", data.display()))?;
        servers.spawn(VICTIM)?;
        let restart = Instant::now();
        let within = Duration::from_secs(120 + args.mib / 2);
        let rebuild = watch_rebuild(servers, restart, within).await?;
        eprintln!(
            "bench transfer: replica {} rebuilt {:.1} s after its restart; probing {} s more…",
            VICTIM + 1,
            (rebuild.installed - rebuild.restart).as_secs_f64(),
            AFTER.as_secs()
        );
        tokio::time::sleep(AFTER).await;
        servers.check_alive()?;
        let mut senders = Vec::new();
        for (i, a) in addrs.iter().enumerate().filter(|(i, _)| *i != VICTIM) {
            let s = connect(*a)
                .await?
                .status()
                .await
                .map_err(|e| format!("replica {} status: {e}", i + 1))?;
            if s.counters
                .get("snapshot_bytes_served")
                .copied()
                .unwrap_or(0)
                > 0
            {
                senders.push(i + 1);
            }
        }
        Ok::<_, String>((kill, rebuild, victim_led, senders))
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    let (probe, probe_error) =
        tokio::time::timeout(OP_TIMEOUT + Duration::from_secs(5), probe_task)
            .await
            .map_err(|_| "the probe did not stop".to_string())?
            .map_err(|e| format!("the probe failed: {e}"))?;
    let mut status = Vec::with_capacity(monitors.len());
    for m in monitors {
        status.push(
            tokio::time::timeout(OP_TIMEOUT + Duration::from_secs(5), m)
                .await
                .map_err(|_| "a status monitor did not stop".to_string())?
                .map_err(|e| format!("a status monitor failed: {e}"))?,
        );
    }
    let (kill, rebuild, victim_led, senders) = measured?;
    Ok(Measured {
        loaded,
        rebuild,
        kill,
        probe,
        probe_error,
        victim_led,
        senders,
        status,
    })
}

/// Run the benchmark.
pub fn run(args: &Args) -> Result<(), String> {
    args.validate()?;
    let mut servers = crate::servers::start(REPLICAS, "transfer", "info", false, |c| {
        c.checkpoint_every_secs = args.checkpoint_secs;
        c.max_request_bytes = args.max_request_bytes(c.max_request_bytes);
    })?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let progress = Progress::new(1);
    let measured = rt.block_on(async {
        tokio::select! {
            r = transfer(args, &mut servers, &progress) => r,
            _ = tokio::signal::ctrl_c() => Err("interrupted".to_string()),
        }
    });
    drop(rt);
    drop(servers);
    let report = report(args, &measured?);
    if args.json {
        crate::print_report(&report, true)
    } else {
        println!("{}", summary(&report));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn args(mib: u64, value_kib: u64) -> Args {
        Args {
            mib,
            value_kib,
            checkpoint_secs: CHECKPOINT_EVERY_SECS,
            json: true,
        }
    }

    #[test]
    fn bad_sizes_are_refused_before_anything_starts() {
        assert!(args(0, 64).validate().is_err());
        assert!(args(8, 0).validate().is_err());
        assert!(args(MIB_MAX + 1, 64).validate().is_err());
        assert!(args(8, VALUE_KIB_MAX + 1).validate().is_err());
        assert!(args(1, 2048).validate().is_err());
        assert!(args(1024, 64).validate().is_ok());
        let mut a = args(8, 64);
        a.checkpoint_secs = 0;
        assert!(a.validate().is_err());
        assert_eq!(args(1024, 64).values(), 16_384);
        assert_eq!(args(1, 3).values(), 342);
    }

    #[test]
    fn the_default_checkpoint_interval_is_the_servers() {
        let server = creek_server::ServerConfig::new(1, Vec::new(), "d".into());
        assert_eq!(CHECKPOINT_EVERY_SECS, server.checkpoint_every_secs);
    }

    #[test]
    fn the_request_limit_leaves_room_for_a_value() {
        assert_eq!(args(8, 64).max_request_bytes(1 << 20), 1 << 20);
        assert_eq!(
            args(8, 2048).max_request_bytes(1 << 20),
            (2 << 20) + (64 << 10)
        );
    }

    /// Ops of `ms` milliseconds, back to back from `t0 + at`.
    pub(super) fn ops(t0: Instant, at_ms: u64, latencies_ms: &[u64]) -> Vec<ProbeOp> {
        let mut t = t0 + Duration::from_millis(at_ms);
        latencies_ms
            .iter()
            .map(|&l| {
                let o = ProbeOp {
                    start: t,
                    end: t + Duration::from_millis(l),
                    ok: true,
                };
                t = o.end;
                o
            })
            .collect()
    }
}
