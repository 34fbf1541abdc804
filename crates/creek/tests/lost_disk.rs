//! End-to-end over real `creek serve` processes: a replica whose data
//! directory was lost never costs acknowledged data. It comes back empty
//! under its old id, learns from its peers that the cluster exists without
//! it, takes no part until it is rebuilt from a member's checkpoint (state
//! transfer), and then rejoins — under load, a follower and then the
//! leader, one at a time, with strong ops linearizable throughout (the
//! simulator's checker, from `creek_check`, on the recorded history). When
//! a majority is lost at once, nothing is rebuilt from the minority left:
//! strong ops are refused with "quorum lost data" and nothing acknowledged
//! is lost.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use creek_check::linearizable::{self, LinOp, LinResult};
use creek_exec::{Abort, ProcCall, TxnLimits};
use creek_procs::Registry;
use creek_proto::pb::Level;
use tonic::Code;

const STRONG: &[Level] = &[Level::Strong];
const WEAK: &[Level] = &[Level::Weak];
const T: Duration = Duration::from_secs(20);

/// A strong increment of `n` at replica `i`, with its final view.
async fn strong_incr(cluster: &Cluster, i: usize) -> Result<(), tonic::Status> {
    let mut c = cluster.client(i).await;
    let views = call(&mut c, req("kv.incr", &[b("n"), Value::Int(1)], STRONG), T).await?;
    assert!(
        views.iter().any(|v| matches!(v, Got::Final(Ok(_)))),
        "{views:?}"
    );
    Ok(())
}

/// `n` read weakly at replica `i` (0 when absent).
async fn weak_n(cluster: &Cluster, i: usize) -> i64 {
    let mut c = cluster.client(i).await;
    let views = call(&mut c, req("kv.get", &[b("n")], WEAK), T)
        .await
        .expect("weak get");
    as_int(&result(&views).expect("get never aborts"))
}

fn as_int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        Value::Nil => 0,
        Value::Bytes(s) => std::str::from_utf8(s)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("n is {s:?}")),
        other => panic!("n is {other:?}"),
    }
}

/// Wait until replica `i`'s status satisfies `ok`.
async fn wait_status(
    cluster: &Cluster,
    i: usize,
    what: &str,
    within: Duration,
    ok: impl Fn(&creek_proto::pb::StatusReply) -> bool,
) -> creek_proto::pb::StatusReply {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = cluster.status(i).await {
            if ok(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!("replica {}: {what} not reached: {s:?}", i + 1);
            }
        } else if Instant::now() > deadline {
            panic!("replica {} does not answer", i + 1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Kill replica `i` and delete its data directory.
fn wipe(cluster: &mut Cluster, i: usize) {
    cluster.kill(i);
    std::fs::remove_dir_all(cluster.dir.join(format!("r{}", i + 1)))
        .expect("delete the data directory");
}

fn log_of(cluster: &Cluster, i: usize) -> String {
    std::fs::read_to_string(cluster.dir.join(format!("r{}.log", i + 1))).unwrap_or_default()
}

/// Wait until replica `i` was rebuilt (a member again) and has caught up
/// with replica `with`'s committed count as it was when the wait began.
async fn wait_rebuilt(cluster: &Cluster, i: usize, with: usize) {
    let target = cluster.status(with).await.map_or(0, |s| s.committed);
    wait_status(
        cluster,
        i,
        "rebuilt and caught up",
        Duration::from_secs(60),
        |s| (s.role == "follower" || s.role == "leader") && s.committed >= target,
    )
    .await;
    assert!(
        log_of(cluster, i).lines().any(
            |l| l.contains("rebuilt from a member's checkpoint: a member of the cluster again")
        ),
        "replica {} logged no rebuild",
        i + 1
    );
}

/// One strong op of the load, as the linearizability checker sees it.
struct Recorded {
    call: ProcCall,
    invoked_us: u64,
    /// The final view's time and outcome; `None` when unknown (a timeout or
    /// a broken connection: it may or may not have taken effect).
    completed: Option<(u64, Result<Bytes, Abort>)>,
}

/// Strong increments and reads of `n` and puts and reads of four keys,
/// from four clients spread over the replicas, until `stop`.
async fn load(
    clients: Vec<std::net::SocketAddr>,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<Vec<Recorded>>>,
    start: Instant,
) {
    let mut tasks = Vec::new();
    for client in 0..4usize {
        let (clients, stop, history) = (clients.clone(), stop.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                let at = clients[(client + k as usize) % clients.len()];
                let key = format!("k{}", k % 4);
                let (name, args) = match k % 4 {
                    0 => ("kv.get", vec![b("n")]),
                    1 => ("kv.put", vec![b(&key), b(&format!("{client}.{k}"))]),
                    2 => ("kv.get", vec![b(&key)]),
                    _ => ("kv.incr", vec![b("n"), Value::Int(1)]),
                };
                let Ok(mut c) =
                    creek_proto::pb::creek_client::CreekClient::connect(format!("http://{at}"))
                        .await
                else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                let invoked_us = start.elapsed().as_micros() as u64;
                let outcome = call(&mut c, req(name, &args, STRONG), Duration::from_secs(5)).await;
                let done_us = start.elapsed().as_micros() as u64;
                let completed = match &outcome {
                    Ok(views) => views.iter().find_map(|v| match v {
                        Got::Final(Ok(v)) => Some((done_us, Ok(v.encode()))),
                        Got::Final(Err(a)) => Some((done_us, Err(Abort(a.clone())))),
                        _ => None,
                    }),
                    // Refused before it was accepted: it never took effect.
                    Err(s)
                        if matches!(s.code(), Code::Unavailable | Code::FailedPrecondition)
                            && (s.message().contains("lost its data")
                                || s.message().contains("joining")
                                || s.message().contains("quorum lost")) =>
                    {
                        continue
                    }
                    Err(_) => None,
                };
                let unknown = completed.is_none();
                history.lock().expect("history").push(Recorded {
                    call: ProcCall::new(name, creek_types::value::encode_args(&args)),
                    invoked_us,
                    completed,
                });
                if unknown {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

fn check_linearizable(history: &[Recorded]) -> String {
    let ops: Vec<LinOp> = history
        .iter()
        .enumerate()
        .map(|(index, r)| LinOp {
            index,
            call: r.call.clone(),
            invoked_at_us: r.invoked_us,
            completed: r.completed.clone(),
        })
        .collect();
    let keys = |c: &ProcCall| -> Vec<Bytes> {
        creek_types::value::decode_args(&c.args)
            .ok()
            .and_then(|a| match a.first() {
                Some(Value::Bytes(k)) => Some(vec![k.clone()]),
                _ => None,
            })
            .unwrap_or_default()
    };
    match linearizable::check(
        &ops,
        &keys,
        &Registry::with_builtins(),
        TxnLimits::default(),
        &Default::default(),
        50_000_000,
    ) {
        LinResult::Ok { partitions, ops } => format!("{ops} strong ops in {partitions} keys"),
        other => panic!("strong ops not linearizable: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_replicas_are_rebuilt_under_load_and_nothing_acknowledged_is_lost() {
    let mut cluster = Cluster::start(3).await;
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(Vec::new()));
    let load = tokio::spawn(load(
        cluster.clients.clone(),
        stop.clone(),
        history.clone(),
        start,
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;

    // A follower loses its disk, then the leader: each is rebuilt from a
    // peer's checkpoint, under load, before the next.
    let leader = cluster.wait_for_leader(T).await;
    let follower = (leader + 1) % 3;
    for victim in [follower, leader] {
        let peer = (victim + 2) % 3;
        wipe(&mut cluster, victim);
        tokio::time::sleep(Duration::from_secs(1)).await;
        cluster.restart(victim).await;
        wait_rebuilt(&cluster, victim, peer).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    stop.store(true, Ordering::Relaxed);
    load.await.expect("load");

    // Every replica converges on the same committed state.
    let deadline = Instant::now() + T;
    loop {
        let counts: Vec<Option<u64>> = futures_counts(&cluster).await;
        let ns = [
            weak_n(&cluster, 0).await,
            weak_n(&cluster, 1).await,
            weak_n(&cluster, 2).await,
        ];
        if counts.iter().all(|c| c.is_some() && *c == counts[0]) && ns.iter().all(|n| *n == ns[0]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no convergence: {counts:?} {ns:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Kill everyone and restart: every acknowledged increment is there.
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.restart(i).await;
    }
    cluster.wait_for_leader(T).await;
    let history = std::mem::take(&mut *history.lock().expect("history"));
    let incr = |r: &&Recorded| r.call.name.as_ref() == "kv.incr";
    let acked = history
        .iter()
        .filter(incr)
        .filter(|r| r.completed.is_some())
        .count() as i64;
    let tried = history.iter().filter(incr).count() as i64;
    let n = as_int(&strong_get(&cluster, 0, "n").await);
    assert!(
        (acked..=tried).contains(&n),
        "n = {n}, but {acked} increments were acknowledged and {tried} tried"
    );
    assert!(
        acked > 20,
        "too little load got through: {acked} increments"
    );
    let verdict = check_linearizable(&history);
    eprintln!("{verdict}; n = {n}, {acked} increments acknowledged");
}

/// The committed counts of every replica (`None`: not answering).
async fn futures_counts(cluster: &Cluster) -> Vec<Option<u64>> {
    let mut out = Vec::new();
    for i in 0..cluster.len() {
        out.push(cluster.status(i).await.map(|s| s.committed));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_lost_at_once_is_refused_not_rebuilt_from_the_minority() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(T).await;
    let mut acked = 0;
    for k in 0..30 {
        strong_incr(&cluster, k % 3).await.expect("strong incr");
        acked += 1;
    }
    let first = (leader + 1) % 3;
    let second = (leader + 2) % 3;
    let last = leader;
    wipe(&mut cluster, first);
    wipe(&mut cluster, second);
    cluster.restart(first).await;
    cluster.restart(second).await;
    for i in [first, second] {
        let s = wait_status(&cluster, i, "lost", T, |s| s.role == "lost").await;
        assert!(s.standing_detail.contains("lost its data"), "{s:?}");
        let err = strong_incr(&cluster, i)
            .await
            .expect_err("a lost replica serves nothing");
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        let mut c = cluster.client(i).await;
        let err = call(&mut c, req("kv.get", &[b("n")], WEAK), T)
            .await
            .expect_err("no weak views from an empty state either");
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    }
    wait_status(&cluster, last, "quorum lost", T, |s| s.quorum_lost).await;
    let err = strong_incr(&cluster, last)
        .await
        .expect_err("no strong op without a majority holding data");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("quorum lost data"), "{err:?}");
    assert_eq!(weak_n(&cluster, last).await, acked);

    // The lost pair does not rebuild from the one replica left, nor elect
    // anyone, however long it waits; a full restart changes nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.restart(i).await;
    }
    for i in [first, second] {
        let s = wait_status(&cluster, i, "lost after a restart", T, |s| s.role == "lost").await;
        assert_eq!(s.committed, 0);
        assert_eq!(s.term, 0, "a lost replica took part in an election: {s:?}");
    }
    wait_status(&cluster, last, "quorum lost after a restart", T, |s| {
        s.quorum_lost
    })
    .await;
    assert_eq!(weak_n(&cluster, last).await, acked);
    let s = cluster.status(last).await.expect("status");
    assert_ne!(s.role, "leader", "{s:?}");

    // The operator accepts the loss: the lost pair, restarted with
    // `rebuild_despite_data_loss`, is rebuilt from the replica left, and
    // the cluster serves strong ops again with everything it held.
    for i in [first, second] {
        cluster.configure(i, |c| c.rebuild_despite_data_loss = true);
        cluster.restart(i).await;
    }
    for i in [first, second] {
        wait_rebuilt(&cluster, i, last).await;
    }
    // The replica left learns that the pair holds data again when it next
    // hears from them, which may come after they caught up.
    wait_status(&cluster, last, "quorum regained", T, |s| !s.quorum_lost).await;
    strong_incr(&cluster, last).await.expect("strong ops again");
    acked += 1;
    for i in 0..3 {
        assert_eq!(as_int(&strong_get(&cluster, i, "n").await), acked);
    }
}

/// A replica whose write-ahead log was removed from beside its database
/// would forget votes and entries it acknowledged: `creek serve` refuses
/// to start it, with the reason, and creates nothing; with its own log put
/// back it starts and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_missing_its_write_ahead_log_refuses_to_start() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(T).await;
    for k in 0..20 {
        strong_incr(&cluster, k % 3).await.expect("strong incr");
    }
    let f = (leader + 1) % 3;
    cluster.kill(f);
    let wal = cluster.data_dir(f).join("creek.wal");
    let aside = cluster.dir.join("creek.wal.aside");
    std::fs::rename(&wal, &aside).expect("move the log aside");
    cluster.spawn_all();
    let status = cluster
        .wait_exit(f, Duration::from_secs(30))
        .expect("wait")
        .expect("it was started");
    assert_eq!(status.code(), Some(1), "refused: {}", log_of(&cluster, f));
    let log = log_of(&cluster, f);
    assert!(
        log.contains("creek.wal is missing beside creek.redb"),
        "the reason is logged: {log}"
    );
    assert!(!wal.exists(), "the refusal created a log");
    // The others serve meanwhile.
    strong_incr(&cluster, leader).await.expect("strong incr");
    std::fs::rename(&aside, &wal).expect("put the log back");
    cluster.restart(f).await;
    let deadline = Instant::now() + T;
    while weak_n(&cluster, f).await != 21 {
        assert!(
            Instant::now() < deadline,
            "replica {} did not catch up",
            f + 1
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
