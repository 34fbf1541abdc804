//! `creek chaos --shards S`: the chaos run of a sharded cluster, with
//! operations across shards under the nemesis.
//!
//! `S` shards of `--replicas` `creek serve` processes and the directory
//! group of three (which holds the map and sequences operations across
//! shards), on loopback. Clients connected through the routing client
//! (`creek_client::Cluster`) move money between bank accounts spread over
//! the shards — most transfers between two shards, each one operation
//! across them — and read every account at once (a strong `kv.mget`
//! across the shards), all strong; and read single accounts weakly. The
//! nemesis, one fault at a time on any group (each shard's, the
//! directory's), kills a replica or a group's leader and restarts it,
//! stops one (`SIGSTOP`), cuts one (or a leader) off from every other
//! replica of the cluster, slows and drops a group's links, or deletes a
//! replica's data so that it is rebuilt from a peer. Then everything is
//! healed and the run is judged:
//!
//! - `final_read`: a strong read of every account answers within the
//!   settling bound;
//! - `total_kept`: the accounts still hold the bank's total (no transfer
//!   half-applied, none applied twice);
//! - `linearizable`: the strong ops as the clients saw them — each
//!   transfer across shards and each read of every account one op — have
//!   a serial order consistent with real time (`creek-check`);
//! - `exactly_once`: with no transfer of unknown fate (a client that gave
//!   up), the balances are the opening ones plus the transfers the clients
//!   saw applied;
//! - `converged`: every replica of each shard comes to hold those
//!   balances;
//! - `no_replica_crashed`: no process exited by itself.
//!
//! The seed fixes the nemesis's choices and the clients' ops; real time
//! decides what overlaps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_check::linearizable::{self, LinOp, LinResult};
use creek_check::run::Check;
use creek_client::{CallOptions, Client, Cluster, Levels, RequestId};
use creek_exec::Abort;
use creek_harness::launcher::Signal;
use creek_procs::ownership::WRONG_SHARD;
use creek_proto::pb;
use creek_shard::{ShardId, ShardMap};
use creek_sim::rng::Rng;
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;
use serde_json::json;

use super::reshard::Resharder;
use super::verdict::{check, Verdict};
use super::Args;
use crate::servers::{self, Servers, DIRECTORY};

/// Accounts on each shard.
const ACCOUNTS_PER_SHARD: usize = 3;

/// Every account's opening balance.
const OPENING: i64 = 100;

/// How long a client waits for one attempt's final view before it sends
/// the op again under the same request id.
const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a client keeps sending an op again before it gives up (the
/// op's fate is then unknown).
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);

/// How long the cluster may take to answer the final read and to converge
/// once every fault is healed.
const SETTLE_BOUND: Duration = Duration::from_secs(60);

/// How long the resharding may go on after the nemesis's time is up.
const RESHARD_BOUND: Duration = Duration::from_secs(300);

/// Steps the linearizability search may take.
const LIN_BUDGET: u64 = 200_000_000;

/// The faults, with their weights.
const FAULTS: &[(&str, u64)] = &[
    ("kill", 16),
    ("kill-leader", 12),
    ("pause", 10),
    ("partition", 12),
    ("partition-leader", 8),
    ("slow", 6),
    ("wipe", 4),
];

/// What the clients saw, shared with the driver.
#[derive(Default)]
struct Seen {
    /// Strong ops, in the order their answers (or give-ups) came.
    ops: Vec<LinOp>,
    /// Each account's change by the transfers seen applied.
    applied: Vec<i64>,
    transfers: u64,
    across: u64,
    refused: u64,
    unknown: u64,
    reads: u64,
    weak_reads: u64,
    weak_errors: u64,
}

/// The cluster's groups: each shard's replicas (0-based slots), by shard
/// id, then the directory's. Shards join and leave it when `--reshard`
/// adds and drops them.
pub(super) struct Layout {
    shards: Vec<(ShardId, Vec<usize>)>,
    directory: Vec<usize>,
}

impl Layout {
    fn new(shards: usize, per_shard: usize) -> Layout {
        let first = shards * per_shard;
        Layout {
            shards: (0..shards)
                .map(|s| {
                    (
                        ShardId(s as u16),
                        (s * per_shard..(s + 1) * per_shard).collect(),
                    )
                })
                .collect(),
            directory: (first..first + DIRECTORY).collect(),
        }
    }

    /// How many groups there are: the shards and the directory.
    fn groups(&self) -> usize {
        self.shards.len() + 1
    }

    /// Group `g`'s replicas: a shard's, or (the last) the directory's.
    fn group(&self, g: usize) -> &[usize] {
        self.shards.get(g).map_or(&self.directory, |(_, r)| r)
    }

    fn all(&self) -> Vec<usize> {
        (0..self.groups())
            .flat_map(|g| self.group(g).to_vec())
            .collect()
    }

    fn name(&self, g: usize) -> String {
        self.shards
            .get(g)
            .map_or_else(|| "directory".into(), |(s, _)| format!("shard {}", s.0))
    }

    /// A shard whose replicas were started.
    pub(super) fn add_shard(&mut self, shard: ShardId, replicas: Vec<usize>) {
        self.shards.push((shard, replicas));
    }

    /// Forget `shard` (dropped from the map): its replicas.
    pub(super) fn remove_shard(&mut self, shard: ShardId) -> Vec<usize> {
        let mut gone = Vec::new();
        self.shards.retain(|(s, r)| {
            if *s == shard {
                gone.clone_from(r);
            }
            *s != shard
        });
        gone
    }
}

fn bytes(s: &str) -> Value {
    Value::Bytes(Bytes::copy_from_slice(s.as_bytes()))
}

/// `ACCOUNTS_PER_SHARD` account keys owned by each shard of `map`, shard
/// by shard.
fn accounts(map: &ShardMap, shards: usize) -> Vec<String> {
    let mut out = Vec::new();
    for s in 0..shards {
        let owned = (0..)
            .map(|n| format!("acct-{n}"))
            .filter(|k| map.owner(None, k.as_bytes()) == ShardId(s as u16))
            .take(ACCOUNTS_PER_SHARD);
        out.extend(owned);
    }
    out
}

/// Run one sharded chaos run: the report and whether every check passed.
pub(super) async fn run(args: &Args, seed: u64) -> Result<(serde_json::Value, bool), String> {
    let shards = args.shards;
    let edit = super::configure(args.plant_bug.clone());
    let mut servers = servers::start_sharded(
        shards,
        args.replicas,
        &format!("chaos-{seed}"),
        "info",
        &edit,
    )?;
    servers.keep = args.keep;
    servers.wait_accepting(Duration::from_secs(60))?;
    let layout = Layout::new(shards, args.replicas);
    let map_file = servers.dir.join(servers::MAP_FILE);
    let map = std::fs::read(&map_file)
        .map_err(|e| format!("reading {}: {e}", map_file.display()))
        .and_then(|raw| creek_shard::decode(&Bytes::from(raw)).map_err(|e| e.to_string()))?;
    let accounts = accounts(&map, shards);
    let mut resharder = if args.reshard {
        let settings = super::configure(args.plant_bug.clone());
        Some(Resharder::new(
            &mut servers,
            &map,
            &accounts,
            args.replicas,
            settings,
        )?)
    } else {
        None
    };
    let addrs: Vec<String> = servers.clients.iter().map(|a| a.to_string()).collect();
    let epoch = Instant::now();

    // The opening balances, in one strong write across the shards.
    let setup = Cluster::connect([addrs[0].clone()])
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let list = |keys: &[String]| Value::List(keys.iter().map(|k| bytes(k)).collect());
    let opening = vec![OPENING.to_string(); accounts.len()];
    read_strong(
        &setup,
        "kv.mput",
        vec![list(&accounts), list(&opening)],
        SETTLE_BOUND,
    )
    .await
    .map_err(|e| format!("opening the accounts: {e}"))?;

    let seen = Arc::new(Mutex::new(Seen {
        applied: vec![0; accounts.len()],
        ..Seen::default()
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..args.clients {
        let home = addrs[c as usize % (shards * args.replicas)].clone();
        clients.push(tokio::spawn(client(
            c,
            home,
            accounts.clone(),
            seen.clone(),
            stop.clone(),
            epoch,
            seed ^ (u64::from(c) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        )));
    }

    let mut nemesis = Nemesis {
        rng: Rng::new(seed ^ 0x0073_6861_7264_6564),
        layout,
        faults_on: !args.no_nemesis,
        paused: Vec::new(),
        exits: Vec::new(),
        faults: std::collections::BTreeMap::new(),
        skipped: std::collections::BTreeMap::new(),
    };
    let until = Instant::now() + Duration::from_secs_f64(args.minutes * 60.0);
    nemesis
        .run(&mut servers, until, resharder.as_mut(), &setup)
        .await;
    // The clients go on until the resharding is over.
    if let Some(r) = resharder.as_mut() {
        let deadline = Instant::now() + RESHARD_BOUND;
        while !r.finished() && Instant::now() < deadline {
            nemesis.note_exits(&mut servers);
            r.poll(&mut servers, &mut nemesis.layout, &setup).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        r.abandon();
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }
    nemesis.heal(&mut servers).await?;

    // The final read, as one more op of the history.
    let invoked_at_us = epoch.elapsed().as_micros() as u64;
    let read = read_strong(&setup, "kv.mget", vec![list(&accounts)], SETTLE_BOUND).await;
    let completed_at = epoch.elapsed().as_micros() as u64;
    let mut checks = Vec::new();
    let balances = match &read {
        Ok(v) => balances_of(v),
        Err(e) => Err(e.clone()),
    };
    checks.push(check(
        "final_read",
        balances.as_ref().err().cloned().into_iter().collect(),
        None,
    ));
    let mut seen = std::mem::take(&mut *seen.lock().unwrap_or_else(|p| p.into_inner()));
    if let Ok(v) = &read {
        let index = seen.ops.len();
        seen.ops.push(LinOp {
            index,
            call: ProcCall::new("kv.mget", encode_args(&[list(&accounts)])),
            invoked_at_us,
            completed: Some((completed_at, Ok(v.encode()))),
        });
    }
    let total = OPENING * accounts.len() as i64;
    // The map the accounts ended on (moved by `--reshard`).
    let final_map = match setup.refresh().await {
        Ok(()) => setup.map().await,
        Err(_) => map.clone(),
    };
    match &balances {
        Ok(b) => {
            let sum: i64 = b.iter().sum();
            checks.push(check(
                "total_kept",
                (sum != total)
                    .then(|| format!("the accounts hold {sum}, not {total}: {b:?}"))
                    .into_iter()
                    .collect(),
                None,
            ));
            let expected: Vec<i64> = seen.applied.iter().map(|d| OPENING + d).collect();
            checks.push(check(
                "exactly_once",
                (seen.unknown == 0 && *b != expected)
                    .then(|| format!("balances {b:?}, but the transfers seen give {expected:?}"))
                    .into_iter()
                    .collect(),
                (seen.unknown > 0).then(|| {
                    format!(
                        "{} transfers of unknown fate: judged by linearizable alone",
                        seen.unknown
                    )
                }),
            ));
            checks.push(converged(&servers, &nemesis.layout, &final_map, &accounts, b).await);
        }
        Err(_) => {
            for name in ["total_kept", "exactly_once", "converged"] {
                checks.push(check(name, vec!["no final read".into()], None));
            }
        }
    }
    checks.push(linearizable_check(&seen.ops, &accounts, seed));
    if let Some(r) = &resharder {
        checks.push(check("reshard", r.failure.iter().cloned().collect(), None));
    }
    nemesis.note_exits(&mut servers);
    checks.push(check("no_replica_crashed", nemesis.exits.clone(), None));

    let verdict = Verdict {
        checks,
        ops: json!({
            "strong": seen.ops.len(),
            "transfers": seen.transfers,
            "transfers_across_shards": seen.across,
            "transfers_refused": seen.refused,
            "unknown": seen.unknown,
            "reads_across_shards": seen.reads,
            "weak_reads": seen.weak_reads,
            "weak_read_errors": seen.weak_errors,
        }),
    };
    let ok = verdict.ok();
    let report = json!({
        "command": "chaos",
        "seed": seed,
        "minutes": args.minutes,
        "shards": shards,
        "replicas_per_shard": args.replicas,
        "directory_replicas": DIRECTORY,
        "clients": args.clients,
        "accounts": accounts.len(),
        "plant_bug": args.plant_bug,
        "faults": nemesis.faults,
        "nemesis_skipped": nemesis.skipped,
        "ops": verdict.ops,
        "reshard": resharder.as_ref().map(|r| json!({
            "steps": r.taken,
            "accounts_moved": moved_accounts(&map, &final_map, &accounts),
            "accounts_by_shard": final_map.shards.keys().map(|s| {
                let n = accounts.iter().filter(|a| final_map.owner(None, a.as_bytes()) == *s).count();
                (s.0.to_string(), n)
            }).collect::<std::collections::BTreeMap<_, _>>(),
        })),
        "checks": verdict.checks_json(),
        "ok": ok,
        "dir": args.keep.then(|| servers.dir.display().to_string()),
    });
    Ok((report, ok))
}

/// How many of `accounts` `after` gives another shard than `before`.
fn moved_accounts(before: &ShardMap, after: &ShardMap, accounts: &[String]) -> usize {
    accounts
        .iter()
        .filter(|a| before.owner(None, a.as_bytes()) != after.owner(None, a.as_bytes()))
        .count()
}

/// Call `procedure` strongly until its final view says something (the
/// result, or an abort as an error), for at most `bound`.
async fn read_strong(
    client: &Cluster,
    procedure: &str,
    args: Vec<Value>,
    bound: Duration,
) -> Result<Value, String> {
    let deadline = Instant::now() + bound;
    let mut last = String::new();
    while Instant::now() < deadline {
        let options = CallOptions {
            timeout: Some(Duration::from_secs(5)),
            ..CallOptions::default()
        };
        match client
            .invoke_with(procedure, args.clone(), Levels::Strong, options)
            .await
        {
            Ok(op) => match op.final_view().await {
                Ok(v) => return v.outcome.map_err(|a| format!("{procedure} aborted: {a}")),
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!(
        "{procedure}: no answer within {} s: {last}",
        bound.as_secs()
    ))
}

/// The balances a `kv.mget` of the accounts returned.
fn balances_of(v: &Value) -> Result<Vec<i64>, String> {
    let list = v.as_list().ok_or_else(|| format!("kv.mget returned {v}"))?;
    list.iter()
        .map(|b| {
            b.as_bytes()
                .and_then(|b| std::str::from_utf8(b).ok())
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("a balance is {b}"))
        })
        .collect()
}

/// One client: strong transfers between two accounts (any two: most are
/// on different shards), strong reads of every account, weak reads of
/// one, until `stop`. An attempt without a final view is sent again under
/// the same request id (the cluster answers a request once) until
/// [`GIVE_UP_AFTER`].
async fn client(
    n: u32,
    home: String,
    accounts: Vec<String>,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    epoch: Instant,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let Ok(c) = Cluster::connect([home]).await else {
        return;
    };
    let list = Value::List(accounts.iter().map(|k| bytes(k)).collect());
    let mut request = RequestId {
        client: (seed | 1) ^ u64::from(n) << 1,
        seq: 0,
    };
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.range(5, 30))).await;
        let roll = rng.range(0, 100);
        if roll < 15 {
            let key = bytes(&accounts[rng.index(accounts.len())]);
            let ok = match c.invoke("kv.get", vec![key], Levels::Weak).await {
                Ok(op) => op.preliminary().await.is_ok(),
                Err(_) => false,
            };
            let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
            s.weak_reads += 1;
            s.weak_errors += u64::from(!ok);
            continue;
        }
        let (procedure, args, transfer) = if roll < 30 {
            ("kv.mget", vec![list.clone()], None)
        } else {
            let from = rng.index(accounts.len());
            let to = (from + 1 + rng.index(accounts.len() - 1)) % accounts.len();
            let amount = rng.range(1, 6) as i64;
            let args = vec![
                bytes(&accounts[from]),
                bytes(&accounts[to]),
                Value::Int(amount),
            ];
            ("kv.transfer", args, Some((from, to, amount)))
        };
        let call = ProcCall::new(procedure, encode_args(&args));
        let invoked_at_us = epoch.elapsed().as_micros() as u64;
        request.seq += 1;
        let give_up = Instant::now() + GIVE_UP_AFTER;
        let outcome = loop {
            let options = CallOptions {
                timeout: Some(OP_TIMEOUT),
                request_id: Some(request),
                ..CallOptions::default()
            };
            let attempt = match c
                .invoke_with(procedure, args.clone(), Levels::Strong, options)
                .await
            {
                Ok(op) => op.final_view().await.map(|v| v.outcome),
                Err(e) => Err(e),
            };
            if attempt.is_ok() || Instant::now() > give_up {
                break attempt;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let at = epoch.elapsed().as_micros() as u64;
        let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
        // Refused as another shard's after the routing client's last
        // retry (keys moving for longer than its retries last): this
        // attempt applied nothing, but an earlier one under the same
        // request id may have been applied at the owner and its answer
        // lost, so the fate is unknown — not an abort of the transfer.
        let moved = matches!(&outcome, Ok(Err(a)) if a.starts_with(WRONG_SHARD));
        let completed = match &outcome {
            _ if moved => None,
            Ok(Ok(v)) => Some((at, Ok(v.encode()))),
            Ok(Err(a)) => Some((at, Err(Abort(a.clone())))),
            Err(_) => None,
        };
        let index = s.ops.len();
        s.ops.push(LinOp {
            index,
            call,
            invoked_at_us,
            completed,
        });
        match transfer {
            None => s.reads += 1,
            Some((from, to, amount)) => {
                s.transfers += 1;
                let per = ACCOUNTS_PER_SHARD;
                s.across += u64::from(from / per != to / per);
                match outcome {
                    _ if moved => s.unknown += 1,
                    Ok(Ok(_)) => {
                        s.applied[from] -= amount;
                        s.applied[to] += amount;
                    }
                    Ok(Err(_)) => s.refused += 1,
                    Err(_) => s.unknown += 1,
                }
            }
        }
    }
}

/// Whether every replica of each shard comes to hold `balances` for the
/// accounts `map` gives the shard (a weak read at that replica alone).
async fn converged(
    servers: &Servers,
    layout: &Layout,
    map: &ShardMap,
    accounts: &[String],
    balances: &[i64],
) -> Check {
    let mut violations = Vec::new();
    let deadline = Instant::now() + SETTLE_BOUND;
    for (s, group) in &layout.shards {
        let owned: Vec<usize> = (0..accounts.len())
            .filter(|&a| map.owner(None, accounts[a].as_bytes()) == *s)
            .collect();
        if owned.is_empty() {
            continue;
        }
        let keys = Value::List(owned.iter().map(|&a| bytes(&accounts[a])).collect());
        let want: Vec<i64> = owned.iter().map(|&a| balances[a]).collect();
        for &i in group {
            let mut last = String::from("no answer");
            let mut matched = false;
            while Instant::now() < deadline && !matched {
                if let Ok(c) = Client::connect([servers.clients[i].to_string()]).await {
                    if let Ok(op) = c.invoke("kv.mget", vec![keys.clone()], Levels::Weak).await {
                        match op.preliminary().await.map(|v| v.outcome) {
                            Ok(Ok(v)) => match balances_of(&v) {
                                Ok(held) if held == want => matched = true,
                                Ok(held) => last = format!("holds {held:?}"),
                                Err(e) => last = e,
                            },
                            Ok(Err(a)) => last = a,
                            Err(e) => last = e.to_string(),
                        }
                    }
                }
                if !matched {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            if !matched {
                violations.push(format!(
                    "replica {} (shard {}) did not come to hold {want:?}: {last}",
                    i + 1,
                    s.0
                ));
            }
        }
    }
    check("converged", violations, None)
}

/// The strong ops as the clients saw them, over the opening balances. A
/// history without a linearization is written out (its path in the
/// check's note), one op per line.
fn linearizable_check(ops: &[LinOp], accounts: &[String], seed: u64) -> Check {
    let initial = accounts
        .iter()
        .map(|a| {
            (
                Bytes::copy_from_slice(a.as_bytes()),
                Bytes::from(OPENING.to_string()),
            )
        })
        .collect();
    let all: Vec<Bytes> = accounts
        .iter()
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect();
    let keys = |c: &ProcCall| -> Vec<Bytes> {
        if c.name.as_ref() == "kv.mget" {
            return all.clone();
        }
        creek_types::value::decode_args(&c.args)
            .map(|a| {
                a.iter()
                    .take(2)
                    .filter_map(|v| v.as_bytes().cloned())
                    .collect()
            })
            .unwrap_or_default()
    };
    match linearizable::check(
        ops,
        &keys,
        &creek_procs::Registry::with_builtins(),
        creek_exec::TxnLimits::default(),
        &initial,
        LIN_BUDGET,
    ) {
        LinResult::Ok { partitions, ops } => check(
            "linearizable",
            Vec::new(),
            Some(format!("{ops} ops in {partitions} partitions")),
        ),
        LinResult::Violation(v) => {
            let path = std::env::temp_dir().join(format!("creek-chaos-{seed}-history.jsonl"));
            let lines: String = ops
                .iter()
                .map(|op| {
                    let args = creek_types::value::decode_args(&op.call.args)
                        .map(|a| Value::List(a).to_string())
                        .unwrap_or_default();
                    let (at, outcome) = match &op.completed {
                        Some((at, Ok(r))) => (
                            Some(*at),
                            Value::decode(r).map_or_else(|e| e.to_string(), |v| v.to_string()),
                        ),
                        Some((at, Err(a))) => (Some(*at), format!("abort: {a}")),
                        None => (None, "unknown".into()),
                    };
                    let line = json!({
                        "index": op.index,
                        "call": op.call.name.as_ref(),
                        "args": args,
                        "invoked_us": op.invoked_at_us,
                        "completed_us": at,
                        "outcome": outcome,
                    });
                    format!("{line}\n")
                })
                .collect();
            let note = match std::fs::write(&path, lines) {
                Ok(()) => format!("the history is in {}", path.display()),
                Err(e) => format!("writing the history to {}: {e}", path.display()),
            };
            check("linearizable", vec![v.reason], Some(note))
        }
        LinResult::Inconclusive { reason } => check(
            "linearizable",
            vec![format!("the search ran out of steps: {reason}")],
            None,
        ),
    }
}

/// The nemesis of a sharded run: one fault at a time, on one group.
struct Nemesis {
    rng: Rng,
    layout: Layout,
    /// Whether it injects faults (`--no-nemesis`: it only takes the
    /// resharding on).
    faults_on: bool,
    /// Replicas stopped with `SIGSTOP`.
    paused: Vec<usize>,
    /// Processes that exited by themselves.
    exits: Vec<String>,
    /// Faults injected, by kind and group.
    faults: std::collections::BTreeMap<String, u64>,
    /// Faults that could not be injected, and why.
    skipped: std::collections::BTreeMap<String, u64>,
}

impl Nemesis {
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.rng.range(lo, hi))
    }

    /// Inject faults until `until`, taking `resharder`'s steps on between
    /// them (a step's command runs on while faults come and go).
    async fn run(
        &mut self,
        servers: &mut Servers,
        until: Instant,
        mut resharder: Option<&mut Resharder>,
        cluster: &Cluster,
    ) {
        while Instant::now() < until {
            if let Some(r) = resharder.as_deref_mut() {
                r.poll(servers, &mut self.layout, cluster).await;
            }
            let gap = self.ms(300, 1500);
            tokio::time::sleep(gap).await;
            self.note_exits(servers);
            if !self.faults_on {
                continue;
            }
            let kind = super::nemesis::pick_weighted(&mut self.rng, FAULTS);
            let g = self.rng.index(self.layout.groups());
            let what = format!("{kind} ({})", self.layout.name(g));
            match self.inject(kind, g, servers).await {
                Ok(true) => *self.faults.entry(what).or_default() += 1,
                Ok(false) => {}
                Err(e) => *self.skipped.entry(format!("{what}: {e}")).or_default() += 1,
            }
        }
    }

    /// Record and restart processes that exited by themselves (a crash is
    /// a finding).
    fn note_exits(&mut self, servers: &mut Servers) {
        for i in self.layout.all() {
            if let Some(why) = servers.take_exited(i) {
                let tail = servers.log_tail(i);
                self.exits.push(format!("replica {}: {why}; {tail}", i + 1));
                let _ = servers.spawn(i);
            }
        }
    }

    /// Inject one fault on group `g` and heal it; `Ok(false)`: it did not
    /// apply now (no leader known).
    async fn inject(
        &mut self,
        kind: &str,
        g: usize,
        servers: &mut Servers,
    ) -> Result<bool, String> {
        let group = self.layout.group(g).to_vec();
        let target = if kind.ends_with("-leader") {
            match leader(servers, &group).await {
                Some(l) => l,
                None => return Ok(false),
            }
        } else {
            group[self.rng.index(group.len())]
        };
        match kind {
            "kill" | "kill-leader" => {
                servers.kill(target)?;
                tokio::time::sleep(self.ms(500, 3000)).await;
                servers.spawn(target)?;
            }
            "pause" => {
                servers.signal(target, Signal::Stop)?;
                self.paused.push(target);
                tokio::time::sleep(self.ms(500, 3000)).await;
                servers.signal(target, Signal::Cont)?;
                self.paused.retain(|p| *p != target);
            }
            "partition" | "partition-leader" => {
                // Cut off from every other replica of the cluster: its own
                // group's and the other groups' (operations across shards
                // talk between groups).
                let all = self.layout.all();
                set_faults(servers, &all, |a, b| {
                    (a == target || b == target).then_some(CUT)
                })
                .await;
                tokio::time::sleep(self.ms(1000, 5000)).await;
                set_faults(servers, &all, |_, _| None).await;
            }
            "slow" => {
                let slow = pb::LinkFault {
                    delay_us: self.rng.range(2_000, 40_000),
                    loss: self.rng.range(0, 10) as f64 / 100.0,
                    ..Default::default()
                };
                set_faults(servers, &group, |_, _| Some(slow)).await;
                tokio::time::sleep(self.ms(1000, 5000)).await;
                set_faults(servers, &group, |_, _| None).await;
            }
            "wipe" => {
                servers.kill(target)?;
                servers.wipe(target)?;
                tokio::time::sleep(self.ms(200, 1000)).await;
                servers.spawn(target)?;
                // Rebuilt from a peer's checkpoint before the next fault.
                answers(servers, target, Duration::from_secs(30)).await;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Undo every fault: stopped replicas continued, killed ones
    /// restarted, links healed.
    async fn heal(&mut self, servers: &mut Servers) -> Result<(), String> {
        self.note_exits(servers);
        for i in std::mem::take(&mut self.paused) {
            servers.signal(i, Signal::Cont)?;
        }
        for i in self.layout.all() {
            if !servers.is_running(i) {
                servers.spawn(i)?;
            }
        }
        set_faults(servers, &self.layout.all(), |_, _| None).await;
        Ok(())
    }
}

/// A cut link.
const CUT: pb::LinkFault = pb::LinkFault {
    peer: 0,
    delay_us: 0,
    loss: 0.0,
    partitioned: true,
};

/// Set the link from each replica of `among` to each other one to
/// `fault(a, b)` (0-based; `None` heals it), on every replica that answers.
async fn set_faults(
    servers: &Servers,
    among: &[usize],
    fault: impl Fn(usize, usize) -> Option<pb::LinkFault>,
) {
    for &a in among {
        let links = among
            .iter()
            .filter(|&&b| b != a)
            .filter_map(|&b| {
                fault(a, b).map(|f| pb::LinkFault {
                    peer: (b + 1) as u32,
                    ..f
                })
            })
            .collect();
        let Ok(channel) =
            tonic::transport::Channel::from_shared(format!("http://{}", servers.clients[a]))
        else {
            continue;
        };
        let channel = channel
            .connect_timeout(Duration::from_millis(500))
            .connect_lazy();
        let mut admin = pb::admin_client::AdminClient::new(channel);
        let call = admin.set_faults(pb::SetFaultsRequest { links });
        let _ = tokio::time::timeout(Duration::from_secs(1), call).await;
    }
}

/// The leader of `group` as one of its running replicas says.
async fn leader(servers: &Servers, group: &[usize]) -> Option<usize> {
    for &i in group {
        if !servers.is_running(i) {
            continue;
        }
        let Ok(c) = Client::connect([servers.clients[i].to_string()]).await else {
            continue;
        };
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(1), c.status()).await {
            let l = s.leader as usize;
            if l > 0 && group.contains(&(l - 1)) {
                return Some(l - 1);
            }
        }
    }
    None
}

/// Wait (at most `within`) until replica `i` answers a status request.
async fn answers(servers: &Servers, i: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(c) = Client::connect([servers.clients[i].to_string()]).await {
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), c.status()).await {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
