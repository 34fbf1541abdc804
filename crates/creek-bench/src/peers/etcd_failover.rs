//! etcd's side of `creek bench peers --failover`: the same rounds as
//! `creek bench failover` (docs/bench/failover.md) on three etcd members
//! with etcd's defaults, so the two systems' failover times come from one
//! run on one machine.
//!
//! At every member a put is invoked every [`PROBE_EVERY`] (open loop, each
//! in a task of its own, [`OP_TIMEOUT`] each), beside `load_clients`
//! closed-loop clients putting their own keys. The rounds are
//! `failover::run_rounds`'s, with the fault at the leader: `kill` (`SIGKILL`,
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
use crate::failover::{self, lock, Kind, ProbeOp, Probed, Target, OP_TIMEOUT, PROBE_EVERY};

// The rounds' bookkeeping counts the replicas of Creek's cluster.
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

/// etcd's members as the rounds fail them.
struct Etcd<'a> {
    procs: &'a mut Procs,
    members: &'a Members,
    endpoints: Vec<String>,
}

impl Target for Etcd<'_> {
    const NAME: &'static str = "etcd";
    const WEAK: bool = false;

    async fn agreed_leader(&self, among: &[usize]) -> Option<usize> {
        let asked: Vec<String> = among.iter().map(|&i| self.endpoints[i].clone()).collect();
        let at = tokio::time::timeout(Duration::from_secs(1), etcd::leader(&asked))
            .await
            .ok()?
            .ok()??;
        among.get(at).copied()
    }

    async fn inject(&mut self, kind: Kind, leader: usize) -> Result<(), String> {
        let signal = match kind {
            Kind::Kill => "KILL",
            Kind::Pause => "STOP",
            Kind::Stop => "TERM",
            Kind::Partition => return Err("etcd has no fault injection to partition".into()),
        };
        self.procs.signal(&Members::name(leader), signal)
    }

    async fn heal(&mut self, kind: Kind, leader: usize) -> Result<(), String> {
        let name = Members::name(leader);
        match kind {
            Kind::Kill | Kind::Stop => {
                self.procs.reap(&name, STOP_WITHIN)?;
                self.procs.spawn(&name, self.members.command(leader))
            }
            Kind::Pause => self.procs.signal(&name, "CONT"),
            Kind::Partition => Ok(()),
        }
    }
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
    let mut target = Etcd {
        procs: &mut procs,
        members: &members,
        endpoints,
    };
    let (mut lines, failed) = failover::run_rounds(&mut target, args, &kinds, &probed).await;
    for t in tasks {
        t.abort();
    }
    if let Some(summary) = lines.last_mut() {
        summary["system"] = json!("etcd");
        summary["version"] = json!(version);
    }
    Ok((lines, failed))
}
