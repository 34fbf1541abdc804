//! `creek bench failover`: how long a 3-replica cluster on loopback goes
//! without strong operations when its leader fails, and which weak
//! operations go unanswered meanwhile (docs/bench/failover.md).
//!
//! Three `creek serve` processes with the server defaults. At every
//! replica, a strong `kv.put` and a weak one are invoked every
//! [`PROBE_EVERY`] each (open loop: an op does not wait for the one
//! before), for the whole run, beside `--load-clients` closed-loop
//! clients (spread over the replicas, each putting its own keys, strong
//! and weak in turn, back to back) that keep the machine busy. Then, `--rounds` times for each fault kind,
//! once the cluster is healthy (every replica names the same leader and
//! has just completed a strong op) and has settled for [`SETTLE`]:
//!
//! - `kill`: the leader is killed (`SIGKILL`) and restarted with its data
//!   after `--hold-secs`;
//! - `pause`: the leader is stopped (`SIGSTOP`) and continued after
//!   `--hold-secs`;
//! - `partition`: every link between the leader and the others is cut
//!   (`Admin.SetFaults`, both ways) and healed after `--hold-secs`;
//! - `stop`: the leader is stopped as an operator stops it before an
//!   upgrade (`SIGTERM`: it hands its leadership over first) and started
//!   again after `--hold-secs`.
//!
//! A round's **failover time** is from the fault to the first completed
//! strong op — its stable view — among those invoked at the other
//! replicas once the fault was in place (the signal delivered, every
//! link cut): the first op a new leader ordered. It is timed from when
//! the injection began, so the injection's own few milliseconds count. A round whose
//! hold passed without one counts as not failed over (its time is the
//! hold, a lower bound). A weak op at a replica the fault did not touch
//! is **unanswered** when its one view did not come within
//! [`WEAK_ANSWER_WITHIN`]; weak ops at a leader cut off by a partition
//! (which still runs and should still answer them) are counted apart.
//!
//! One JSON line per round, then a summary whose last line holds, for each
//! kind, `failover_ms_p50`, `failover_ms_p99` and `failover_ms_max`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use creek_client::{CallOptions, Client, Levels};
use creek_harness::launcher::Signal;
use creek_proto::pb;
use creek_sim::bench::percentile;
use creek_types::value::Value;
use serde_json::{json, Value as Json};
use tonic::transport::Channel;

use crate::servers::{self, Servers};

/// Replicas in the cluster.
pub(crate) const REPLICAS: usize = 3;
/// Each replica's probes invoke a strong and a weak op this often.
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(10);
/// A probe op's deadline.
pub(crate) const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// A weak op answered later than this counts as unanswered.
const WEAK_ANSWER_WITHIN: Duration = Duration::from_secs(1);
/// Quiet time before each fault, once the cluster is healthy.
const SETTLE: Duration = Duration::from_secs(2);
/// How long the cluster may take to be healthy again after a heal.
const HEAL_WITHIN: Duration = Duration::from_secs(60);

/// The faults a round injects at the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// `SIGKILL`, restarted with its data after the hold.
    Kill,
    /// `SIGSTOP`, continued after the hold.
    Pause,
    /// Cut off from the other replicas, healed after the hold.
    Partition,
    /// `SIGTERM`, a planned stop (the leader hands its leadership over
    /// first), started again after the hold.
    Stop,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Kill => "kill",
            Kind::Pause => "pause",
            Kind::Partition => "partition",
            Kind::Stop => "stop",
        }
    }
}

/// Arguments of `creek bench failover`.
#[derive(clap::Args)]
pub struct Args {
    /// Rounds of each fault kind.
    #[arg(long, default_value_t = 5)]
    pub(crate) rounds: usize,
    /// The fault kinds, in this order, each `--rounds` times.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kill,pause,partition,stop"
    )]
    pub(crate) kinds: Vec<Kind>,
    /// Closed-loop clients putting beside the probes (0: none).
    #[arg(long, default_value_t = 8)]
    pub(crate) load_clients: usize,
    /// How long each fault lasts before it is healed.
    #[arg(long, default_value_t = 4.0)]
    pub(crate) hold_secs: f64,
    /// Keep the replicas' directory (configurations, logs, data) after the
    /// run, and print where it is.
    #[arg(long)]
    pub(crate) keep: bool,
    /// One JSON line per round and for the summary (else indented).
    #[arg(long)]
    pub(crate) json: bool,
}

impl Args {
    pub(crate) fn validate(&self) -> Result<(), String> {
        if !(1..=100).contains(&self.rounds) {
            return Err(format!("--rounds {} must be within 1..=100", self.rounds));
        }
        if self.load_clients > 256 {
            return Err(format!(
                "--load-clients {} must be at most 256",
                self.load_clients
            ));
        }
        if self.kinds.is_empty() {
            return Err("--kinds names no fault kind".into());
        }
        if !(0.5..=60.0).contains(&self.hold_secs) {
            return Err(format!(
                "--hold-secs {} must be within 0.5..=60",
                self.hold_secs
            ));
        }
        Ok(())
    }

    pub(crate) fn hold(&self) -> Duration {
        Duration::from_secs_f64(self.hold_secs)
    }
}

/// Run `creek bench failover`.
pub fn run(args: &Args) -> Result<(), String> {
    args.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (lines, failed) = runtime.block_on(measure(args))?;
    for line in &lines {
        crate::print_report(line, args.json)?;
    }
    failed.map_or(Ok(()), Err)
}

/// One probe op: where and when it was invoked, and when its closing view
/// came (`None`: it failed or timed out).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProbeOp {
    pub(crate) replica: usize,
    pub(crate) strong: bool,
    pub(crate) invoked: Instant,
    pub(crate) done: Option<Instant>,
}

pub(crate) type Probed = Arc<Mutex<Vec<ProbeOp>>>;

pub(crate) fn lock(probed: &Probed) -> std::sync::MutexGuard<'_, Vec<ProbeOp>> {
    probed.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Invoke a strong and a weak `kv.put` at replica `replica` every
/// [`PROBE_EVERY`] until the task is aborted, each op in a task of its
/// own, recorded in `probed` when it closes.
async fn probe(replica: usize, client: Client, probed: Probed) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u64.. {
        tick.tick().await;
        for strong in [true, false] {
            let (client, probed) = (client.clone(), probed.clone());
            tokio::spawn(async move {
                let key = format!("failover-{}-{}", replica + 1, u8::from(strong));
                let args = vec![
                    Value::Bytes(key.into_bytes().into()),
                    Value::Bytes(n.to_string().into_bytes().into()),
                ];
                let options = CallOptions {
                    timeout: Some(OP_TIMEOUT),
                    ..Default::default()
                };
                let invoked = Instant::now();
                let levels = if strong { Levels::Strong } else { Levels::Weak };
                let op = client.invoke_with("kv.put", args, levels, options).await;
                let done = match op {
                    Ok(op) if strong => op.final_view().await.ok().map(|_| Instant::now()),
                    Ok(_) => Some(Instant::now()),
                    Err(_) => None,
                };
                lock(&probed).push(ProbeOp {
                    replica,
                    strong,
                    invoked,
                    done,
                });
            });
        }
    }
}

/// Put keys of client `n`, strong and weak in turn, back to back, until
/// the task is aborted; a failed op (its replica down) is followed by a
/// pause.
async fn load(n: usize, client: Client) {
    let options = CallOptions {
        timeout: Some(OP_TIMEOUT),
        ..Default::default()
    };
    for i in 0u64.. {
        let levels = if i % 2 == 0 {
            Levels::Strong
        } else {
            Levels::Weak
        };
        let args = vec![
            Value::Bytes(format!("load-{n}-{}", i % 1000).into_bytes().into()),
            Value::Bytes(i.to_string().into_bytes().into()),
        ];
        let ok = match client.invoke_with("kv.put", args, levels, options).await {
            Ok(op) if levels == Levels::Strong => op.final_view().await.is_ok(),
            Ok(_) => true,
            Err(_) => false,
        };
        if !ok {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The leader every replica in `among` names, if they agree on one in it.
async fn agreed_leader(clients: &[Client], among: &[usize]) -> Option<usize> {
    let mut named = None;
    for &i in among {
        let status = tokio::time::timeout(Duration::from_secs(1), clients[i].status())
            .await
            .ok()?
            .ok()?;
        let leader = (status.leader as usize).checked_sub(1)?;
        if named.is_some_and(|l| l != leader) || !among.contains(&leader) {
            return None;
        }
        named = Some(leader);
    }
    named
}

/// Wait until `leader` names the leader the [`REPLICAS`] replicas agree
/// on and each of them completed a strong op invoked after the wait
/// began; the leader. `what` names the system in the error.
async fn wait_healthy<F, Fut>(probed: &Probed, what: &str, leader: F) -> Result<usize, String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<usize>>,
{
    let from = Instant::now();
    while from.elapsed() < HEAL_WITHIN {
        if let Some(leader) = leader().await {
            let served = lock(probed)
                .iter()
                .filter(|p| p.strong && p.invoked >= from && p.done.is_some())
                .fold([false; REPLICAS], |mut seen, p| {
                    seen[p.replica] = true;
                    seen
                });
            if served.iter().all(|&s| s) {
                return Ok(leader);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "{what} was not healthy again within {} s",
        HEAL_WITHIN.as_secs()
    ))
}

/// Cut (or heal, `cut` false) every link between `victim` and the other
/// replicas, on both sides.
async fn set_cut(channels: &[Channel], victim: usize, cut: bool) -> Result<(), String> {
    for (a, channel) in channels.iter().enumerate() {
        let links = (0..REPLICAS)
            .filter(|&b| b != a && cut && (a == victim || b == victim))
            .map(|b| pb::LinkFault {
                peer: (b + 1) as u32,
                partitioned: true,
                ..Default::default()
            })
            .collect();
        let mut admin = pb::admin_client::AdminClient::new(channel.clone());
        tokio::time::timeout(
            Duration::from_secs(2),
            admin.set_faults(pb::SetFaultsRequest { links }),
        )
        .await
        .map_err(|_| format!("replica {}: SetFaults timed out", a + 1))?
        .map_err(|e| format!("replica {}: SetFaults: {}", a + 1, e.message()))?;
    }
    Ok(())
}

/// What one round measured.
struct Round {
    kind: Kind,
    /// Milliseconds from the fault to the first stable view at another
    /// replica; `None`: none within the hold.
    failover_ms: Option<f64>,
    weak_at_others: usize,
    weak_unanswered_at_others: usize,
    weak_at_cut_leader: usize,
    weak_unanswered_at_cut_leader: usize,
}

/// Measure a `kind` fault at `leader`, whose injection began at `at` and
/// was in place at `injected`, from what the probes recorded once the
/// hold (and the answer window of its last weak ops) passed.
fn judge(
    kind: Kind,
    leader: usize,
    (at, injected): (Instant, Instant),
    hold: Duration,
    ops: &[ProbeOp],
) -> Round {
    let until = at + hold;
    let failover = ops
        .iter()
        .filter(|p| p.strong && p.replica != leader && p.invoked >= injected)
        .filter_map(|p| p.done)
        .filter(|&d| d <= until)
        .min();
    let in_hold = |p: &&ProbeOp| !p.strong && (at..until).contains(&p.invoked);
    let unanswered = |p: &&&ProbeOp| {
        p.done
            .is_none_or(|d| d.duration_since(p.invoked) > WEAK_ANSWER_WITHIN)
    };
    let others: Vec<&ProbeOp> = ops
        .iter()
        .filter(in_hold)
        .filter(|p| p.replica != leader)
        .collect();
    let at_leader: Vec<&ProbeOp> = ops
        .iter()
        .filter(in_hold)
        .filter(|p| p.replica == leader && kind == Kind::Partition)
        .collect();
    Round {
        kind,
        failover_ms: failover.map(|d| d.duration_since(at).as_secs_f64() * 1e3),
        weak_at_others: others.len(),
        weak_unanswered_at_others: others.iter().filter(unanswered).count(),
        weak_at_cut_leader: at_leader.len(),
        weak_unanswered_at_cut_leader: at_leader.iter().filter(unanswered).count(),
    }
}

/// The rounds' lines and the summary; with the error that stopped the
/// run early, if one did (the rounds before it are reported all the same,
/// and the summary says why it is short).
pub(crate) async fn measure(args: &Args) -> Result<(Vec<Json>, Option<String>), String> {
    let mut servers = servers::start(REPLICAS, "failover", "warn", false, |c| {
        c.allow_fault_injection = true;
    })?;
    servers.keep = args.keep;
    servers.wait_accepting(Duration::from_secs(60))?;
    let mut clients = Vec::new();
    let mut channels = Vec::new();
    for addr in servers.clients.clone() {
        clients.push(connect(addr).await?);
        channels.push(
            Channel::from_shared(format!("http://{addr}"))
                .map_err(|e| format!("replica address {addr}: {e}"))?
                .connect_timeout(Duration::from_millis(500))
                .connect_lazy(),
        );
    }
    let probed: Probed = Arc::default();
    let mut probes: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| tokio::spawn(probe(i, c.clone(), probed.clone())))
        .collect();
    for n in 0..args.load_clients {
        let c = connect(servers.clients[n % REPLICAS]).await?;
        probes.push(tokio::spawn(load(n, c)));
    }
    let mut target = Creek {
        servers: &mut servers,
        clients: &clients,
        channels: &channels,
    };
    let (mut lines, failed) = run_rounds(&mut target, args, &args.kinds, &probed).await;
    for p in probes {
        p.abort();
    }
    if args.keep {
        eprintln!("bench failover: kept {}", servers.dir.display());
    }
    if let Some(summary) = lines.last_mut() {
        summary["system"] = json!("creek");
    }
    Ok((lines, failed))
}

/// A system whose leader the rounds fail: how to learn its leader, inject
/// a fault at it and heal it.
pub(crate) trait Target {
    /// The system's name in progress lines and errors.
    const NAME: &'static str;
    /// Whether it has weak operations (their counts go in the lines).
    const WEAK: bool;
    /// The leader the replicas in `among` agree on, if they agree on one
    /// of them.
    async fn agreed_leader(&self, among: &[usize]) -> Option<usize>;
    /// Inject `kind` at `leader`.
    async fn inject(&mut self, kind: Kind, leader: usize) -> Result<(), String>;
    /// Heal the fault `kind` at `leader` once the hold passed.
    async fn heal(&mut self, kind: Kind, leader: usize) -> Result<(), String>;
}

/// Creek's cluster as the rounds fail it.
struct Creek<'a> {
    servers: &'a mut Servers,
    clients: &'a [Client],
    channels: &'a [Channel],
}

impl Target for Creek<'_> {
    const NAME: &'static str = "creek";
    const WEAK: bool = true;

    async fn agreed_leader(&self, among: &[usize]) -> Option<usize> {
        agreed_leader(self.clients, among).await
    }

    async fn inject(&mut self, kind: Kind, leader: usize) -> Result<(), String> {
        match kind {
            Kind::Kill => self.servers.kill(leader).map(drop),
            Kind::Pause => self.servers.signal(leader, Signal::Stop),
            Kind::Partition => set_cut(self.channels, leader, true).await,
            Kind::Stop => self.servers.signal(leader, Signal::Term),
        }
    }

    async fn heal(&mut self, kind: Kind, leader: usize) -> Result<(), String> {
        match kind {
            Kind::Kill => self.servers.spawn(leader),
            Kind::Pause => self.servers.signal(leader, Signal::Cont),
            Kind::Partition => set_cut(self.channels, leader, false).await,
            Kind::Stop => {
                // Stopped by now, unless it hangs: then it is killed.
                self.servers.wait_exit(leader, Duration::from_secs(10))?;
                self.servers.spawn(leader)
            }
        }
    }
}

/// Every round of every kind in `kinds` on `target`, whose probes record
/// in `probed`: one line per round, then the summary (with
/// `stopped_early` and the error when a round could not go on).
pub(crate) async fn run_rounds<T: Target>(
    target: &mut T,
    args: &Args,
    kinds: &[Kind],
    probed: &Probed,
) -> (Vec<Json>, Option<String>) {
    let mut done = Vec::new();
    let mut lines = Vec::new();
    let failed = rounds(target, args, kinds, probed, &mut done, &mut lines)
        .await
        .err();
    let mut summary = summary(kinds, args.hold(), &done);
    if let Some(e) = &failed {
        summary["stopped_early"] = json!(e);
    }
    lines.push(summary);
    (lines, failed)
}

async fn connect(addr: SocketAddr) -> Result<Client, String> {
    Client::connect([addr.to_string()])
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))
}

/// Every round of every kind, each pushed to `done` and `lines` as it
/// ends.
async fn rounds<T: Target>(
    target: &mut T,
    args: &Args,
    kinds: &[Kind],
    probed: &Probed,
    done: &mut Vec<Round>,
    lines: &mut Vec<Json>,
) -> Result<(), String> {
    let hold = args.hold();
    let all: Vec<usize> = (0..REPLICAS).collect();
    for &kind in kinds {
        for round in 1..=args.rounds {
            let healthy = || wait_healthy(probed, T::NAME, || target.agreed_leader(&all));
            healthy().await?;
            tokio::time::sleep(SETTLE).await;
            let leader = healthy().await?;
            let at = Instant::now();
            target.inject(kind, leader).await?;
            let injected = Instant::now();
            tokio::time::sleep(hold.saturating_sub(injected - at)).await;
            let others: Vec<usize> = (0..REPLICAS).filter(|&i| i != leader).collect();
            let new_leader = target.agreed_leader(&others).await;
            target.heal(kind, leader).await?;
            // The hold's last weak ops have their answer window, its
            // strong ops their deadline.
            tokio::time::sleep(WEAK_ANSWER_WITHIN).await;
            let r = judge(kind, leader, (at, injected), hold, &lock(probed));
            eprintln!(
                "bench failover: {} {} round {round}: leader {} -> {}, strong ops again after {}",
                T::NAME,
                kind.name(),
                leader + 1,
                new_leader.map_or("none".into(), |l| (l + 1).to_string()),
                r.failover_ms
                    .map_or_else(|| "none within the hold".into(), |ms| format!("{ms:.0} ms")),
            );
            let mut line = json!({
                "system": T::NAME,
                "kind": kind.name(),
                "round": round,
                "leader": leader + 1,
                "new_leader": new_leader.map(|l| l + 1),
                "failover_ms": r.failover_ms,
                "hold_ms": hold.as_millis() as u64,
            });
            if T::WEAK {
                line["weak_at_others"] = json!(r.weak_at_others);
                line["weak_unanswered_at_others"] = json!(r.weak_unanswered_at_others);
                line["weak_at_cut_leader"] = json!(r.weak_at_cut_leader);
                line["weak_unanswered_at_cut_leader"] = json!(r.weak_unanswered_at_cut_leader);
            }
            lines.push(line);
            done.push(r);
        }
    }
    Ok(())
}

/// Per kind: failover percentiles (a round without failover counts as the
/// hold; `null` for a kind no round of which ran) and the weak ops
/// unanswered.
fn summary(kinds: &[Kind], hold: Duration, done: &[Round]) -> Json {
    let mut out = serde_json::Map::new();
    out.insert("summary".into(), json!("failover"));
    out.insert("hold_ms".into(), json!(hold.as_millis() as u64));
    for &kind in kinds {
        let rounds: Vec<&Round> = done.iter().filter(|r| r.kind == kind).collect();
        let hold_ms = hold.as_secs_f64() * 1e3;
        let mut ms: Vec<u64> = rounds
            .iter()
            .map(|r| r.failover_ms.unwrap_or(hold_ms).round() as u64)
            .collect();
        ms.sort_unstable();
        let sum = |f: fn(&Round) -> usize| rounds.iter().map(|r| f(r)).sum::<usize>();
        out.insert(
            kind.name().into(),
            json!({
                "rounds": rounds.len(),
                "not_failed_over": rounds.iter().filter(|r| r.failover_ms.is_none()).count(),
                "failover_ms_p50": (!ms.is_empty()).then(|| percentile(&ms, 0.5)),
                "failover_ms_p99": (!ms.is_empty()).then(|| percentile(&ms, 0.99)),
                "failover_ms_max": ms.last(),
                "weak_at_others": sum(|r| r.weak_at_others),
                "weak_unanswered_at_others": sum(|r| r.weak_unanswered_at_others),
                "weak_at_cut_leader": sum(|r| r.weak_at_cut_leader),
                "weak_unanswered_at_cut_leader": sum(|r| r.weak_unanswered_at_cut_leader),
            }),
        );
    }
    Json::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(
        replica: usize,
        strong: bool,
        at: Instant,
        invoked_ms: u64,
        done_ms: Option<u64>,
    ) -> ProbeOp {
        ProbeOp {
            replica,
            strong,
            invoked: at + Duration::from_millis(invoked_ms),
            done: done_ms.map(|d| at + Duration::from_millis(d)),
        }
    }

    /// The failover is the first stable view among strong ops invoked
    /// after the fault at the other replicas: ops invoked before it, at
    /// the leader, or done after the hold do not count.
    #[test]
    fn failover_is_the_first_stable_view_after_the_fault_elsewhere() {
        let at = Instant::now() + Duration::from_secs(1);
        let hold = Duration::from_secs(4);
        let before = ProbeOp {
            invoked: at - Duration::from_millis(5),
            ..op(1, true, at, 0, Some(100))
        };
        let ops = [
            before,
            op(0, true, at, 10, Some(200)),
            op(1, true, at, 10, Some(900)),
            op(2, true, at, 20, Some(700)),
            op(2, true, at, 30, None),
            op(2, false, at, 30, Some(31)),
            op(2, false, at, 40, None),
            op(1, false, at, 50, Some(1_600)),
        ];
        let r = judge(Kind::Kill, 0, (at, at), hold, &ops);
        assert_eq!(r.failover_ms.map(|ms| ms.round() as u64), Some(700));
        assert_eq!((r.weak_at_others, r.weak_unanswered_at_others), (3, 2));
        assert_eq!(r.weak_at_cut_leader, 0);

        let late = [op(1, true, at, 10, Some(4_500))];
        assert_eq!(
            judge(Kind::Pause, 0, (at, at), hold, &late).failover_ms,
            None
        );
        // Ops invoked before the fault was in place do not count, and the
        // time runs from when the injection began.
        let slow_signal = [op(1, true, at, 3, Some(5)), op(1, true, at, 20, Some(300))];
        let injected = at + Duration::from_millis(10);
        let r = judge(Kind::Pause, 0, (at, injected), hold, &slow_signal);
        assert_eq!(r.failover_ms.map(|ms| ms.round() as u64), Some(300));

        let cut = [op(0, false, at, 10, Some(11)), op(0, false, at, 20, None)];
        let r = judge(Kind::Partition, 0, (at, at), hold, &cut);
        assert_eq!(
            (r.weak_at_cut_leader, r.weak_unanswered_at_cut_leader),
            (2, 1)
        );
    }

    #[test]
    fn a_round_without_failover_counts_as_the_hold() {
        let hold = Duration::from_secs(3);
        let rounds = [
            Round {
                kind: Kind::Kill,
                failover_ms: Some(400.0),
                weak_at_others: 10,
                weak_unanswered_at_others: 1,
                weak_at_cut_leader: 0,
                weak_unanswered_at_cut_leader: 0,
            },
            Round {
                kind: Kind::Kill,
                failover_ms: None,
                weak_at_others: 5,
                weak_unanswered_at_others: 0,
                weak_at_cut_leader: 0,
                weak_unanswered_at_cut_leader: 0,
            },
        ];
        let s = summary(&[Kind::Kill], hold, &rounds);
        assert_eq!(s["kill"]["failover_ms_max"], 3000);
        assert_eq!(s["kill"]["not_failed_over"], 1);
        assert_eq!(s["kill"]["weak_unanswered_at_others"], 1);
    }
}
