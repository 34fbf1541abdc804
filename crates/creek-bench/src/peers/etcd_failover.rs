//! etcd's side of `creek bench peers --failover`: the same rounds as
//! `creek bench failover` (docs/bench/failover.md) on three etcd members
//! with etcd's defaults, so the two systems' failover times come from one
//! run on one machine.
//!
//! At every member a put is invoked every [`PROBE_EVERY`] (open loop, each
//! in a task of its own, [`OP_TIMEOUT`] each), beside `load_clients`
//! closed-loop clients putting their own keys. Each round waits until the
//! members agree on a leader and every member completed a put since, then
//! [`SETTLE`], and injects the fault at the leader: `kill` (`SIGKILL`,
//! started again with its data after the hold), `pause` (`SIGSTOP`,
//! continued after the hold) or `stop` (`SIGTERM`: etcd hands its
//! leadership over before it exits; started again after the hold). A
//! round's failover time is from the fault to the first put completed
//! among those invoked at the other members once it was in place — what
//! `creek bench failover` measures with strong ops. etcd has no weak
//! operations, and no fault injection for `partition`.

use std::time::{Duration, Instant};

use serde_json::{json, Value as Json};

use super::etcd::{self, Members, MEMBERS};
use super::procs::Procs;
use crate::failover::{
    self, judge, lock, Kind, ProbeOp, Probed, OP_TIMEOUT, PROBE_EVERY, SETTLE, WEAK_ANSWER_WITHIN,
};

// The probes' bookkeeping (`failover::wait_healthy`) counts the replicas
// of Creek's cluster.
const _: () = assert!(MEMBERS == failover::REPLICAS);

/// How long a member stopped with `SIGTERM` may take to exit.
const STOP_WITHIN: Duration = Duration::from_secs(10);

/// Put at member `member` every [`PROBE_EVERY`] until aborted, each put
/// recorded in `probed` when it ends.
async fn probe(member: usize, client: etcd_client::Client, probed: Probed) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u64.. {
        tick.tick().await;
        let (mut client, probed) = (client.clone(), probed.clone());
        tokio::spawn(async move {
            let key = format!("failover-{}", member + 1);
            let invoked = Instant::now();
            let put = tokio::time::timeout(OP_TIMEOUT, client.put(key, n.to_string(), None)).await;
            lock(&probed).push(ProbeOp {
                replica: member,
                strong: true,
                invoked,
                done: matches!(put, Ok(Ok(_))).then(Instant::now),
            });
        });
    }
}

/// Put keys of client `n` back to back until aborted; a failed put is
/// followed by a pause.
async fn load(n: usize, mut client: etcd_client::Client) {
    for i in 0u64.. {
        let key = format!("load-{n}-{}", i % 1000);
        let put = tokio::time::timeout(OP_TIMEOUT, client.put(key, i.to_string(), None)).await;
        if !matches!(put, Ok(Ok(_))) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The leader the members of `among` name, if they agree on one of them.
async fn agreed_leader(endpoints: &[String], among: &[usize]) -> Option<usize> {
    let asked: Vec<String> = among.iter().map(|&i| endpoints[i].clone()).collect();
    let at = tokio::time::timeout(Duration::from_secs(1), etcd::leader(&asked))
        .await
        .ok()?
        .ok()??;
    among.get(at).copied()
}

/// Wait until the members agree on a leader and each completed a put
/// invoked after the wait began; the leader.
async fn healthy(endpoints: &[String], probed: &Probed) -> Result<usize, String> {
    let all: Vec<usize> = (0..MEMBERS).collect();
    failover::wait_healthy(probed, "etcd", || agreed_leader(endpoints, &all)).await
}

/// The rounds' lines and the summary of etcd's failover, as `creek bench
/// failover` reports Creek's (`args.kinds` but `partition`); with the
/// error that stopped the run early, if one did.
pub(crate) async fn measure(
    etcd: &std::path::Path,
    args: &failover::Args,
) -> Result<(Vec<Json>, Option<String>), String> {
    let version = etcd::version(etcd)?;
    let (mut procs, members) = etcd::start(etcd)?;
    let endpoints = members.endpoints();
    let probed: Probed = Probed::default();
    let mut tasks = Vec::new();
    for (i, ep) in endpoints.iter().enumerate() {
        tasks.push(tokio::spawn(probe(
            i,
            etcd::connect(ep).await?,
            probed.clone(),
        )));
    }
    for n in 0..args.load_clients {
        let c = etcd::connect(&endpoints[n % MEMBERS]).await?;
        tasks.push(tokio::spawn(load(n, c)));
    }
    let kinds: Vec<Kind> = args
        .kinds
        .iter()
        .copied()
        .filter(|k| *k != Kind::Partition)
        .collect();
    let mut done = Vec::new();
    let mut lines = Vec::new();
    let failed = rounds(
        args,
        &kinds,
        (&mut procs, &members),
        &probed,
        &mut done,
        &mut lines,
    )
    .await
    .err();
    for t in tasks {
        t.abort();
    }
    let mut summary = failover::summary(&kinds, args.hold(), &done);
    summary["system"] = json!("etcd");
    summary["version"] = json!(version);
    if let Some(e) = &failed {
        summary["stopped_early"] = json!(e);
    }
    lines.push(summary);
    Ok((lines, failed))
}

/// Every round of every kind, each pushed to `done` and `lines` as it
/// ends.
async fn rounds(
    args: &failover::Args,
    kinds: &[Kind],
    (procs, members): (&mut Procs, &Members),
    probed: &Probed,
    done: &mut Vec<failover::Round>,
    lines: &mut Vec<Json>,
) -> Result<(), String> {
    let endpoints = members.endpoints();
    let hold = args.hold();
    for &kind in kinds {
        for round in 1..=args.rounds {
            healthy(&endpoints, probed).await?;
            tokio::time::sleep(SETTLE).await;
            let leader = healthy(&endpoints, probed).await?;
            let name = Members::name(leader);
            let at = Instant::now();
            match kind {
                Kind::Kill => procs.signal(&name, "KILL")?,
                Kind::Pause => procs.signal(&name, "STOP")?,
                Kind::Stop => procs.signal(&name, "TERM")?,
                Kind::Partition => unreachable!("etcd has no fault injection"),
            }
            let injected = Instant::now();
            tokio::time::sleep(hold.saturating_sub(injected - at)).await;
            let others: Vec<usize> = (0..MEMBERS).filter(|&i| i != leader).collect();
            let new_leader = agreed_leader(&endpoints, &others).await;
            match kind {
                Kind::Kill | Kind::Stop => {
                    procs.reap(&name, STOP_WITHIN)?;
                    procs.spawn(&name, members.command(leader))?;
                }
                Kind::Pause => procs.signal(&name, "CONT")?,
                Kind::Partition => {}
            }
            tokio::time::sleep(WEAK_ANSWER_WITHIN).await;
            let r = judge(kind, leader, (at, injected), hold, &lock(probed));
            eprintln!(
                "bench peers --failover: etcd {} round {round}: leader m{} -> {}, puts again after {}",
                kind.name(),
                leader + 1,
                new_leader.map_or("none".into(), |l| format!("m{}", l + 1)),
                r.failover_ms
                    .map_or_else(|| "none within the hold".into(), |ms| format!("{ms:.0} ms")),
            );
            lines.push(json!({
                "system": "etcd",
                "kind": kind.name(),
                "round": round,
                "leader": leader + 1,
                "new_leader": new_leader.map(|l| l + 1),
                "failover_ms": r.failover_ms,
                "hold_ms": hold.as_millis() as u64,
            }));
            done.push(r);
        }
    }
    Ok(())
}
