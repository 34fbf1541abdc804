//! End-to-end over real `creek serve` processes: the replica group changes
//! online. Under a load of strong increments, a fourth replica is added (it
//! joins as a learner, installs a member's checkpoint, and is promoted to a
//! voter), then the old leader is removed (leadership is handed over
//! first); an old replica loses its disk and is rebuilt with the
//! configuration it started with, which names neither the new group nor
//! the new replica; then a replica that is down is removed. Nothing
//! acknowledged is lost, the new group serves, and its replicas converge.
//! Every refused change is refused with a clear error and changes nothing.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use creek_client::{pb as cpb, Client, Error};
use creek_proto::pb::Level;
use tonic::Code;

const STRONG: &[Level] = &[Level::Strong];
const T: Duration = Duration::from_secs(20);

/// The members a replica reports: (id, role).
fn roles(m: &cpb::MembersReply) -> Vec<(u32, String)> {
    m.members
        .iter()
        .map(|x| (x.replica, x.role.clone()))
        .collect()
}

/// Wait until replica `i` reports members satisfying `ok`.
async fn wait_members(
    cluster: &Cluster,
    i: usize,
    what: &str,
    ok: impl Fn(&cpb::MembersReply) -> bool,
) -> cpb::MembersReply {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    while Instant::now() < deadline {
        if let Ok(c) = Client::connect([cluster.clients[i].to_string()]).await {
            if let Ok(m) = c.members().await {
                if ok(&m) {
                    return m;
                }
                last = Some(roles(&m));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "replica {} never reported {what} (last: {last:?}); logs in {}",
        i + 1,
        cluster.dir.display()
    );
}

fn code(e: &Error) -> Option<Code> {
    match e {
        Error::InvalidArgument(_) => Some(Code::InvalidArgument),
        Error::Rpc { code, .. } => Some(*code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_joins_and_the_old_leader_leaves_under_load_losing_nothing() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(T).await;

    // Strong increments, round-robin over the replicas in `targets`.
    let addr = |i: usize, c: &Cluster| c.clients[i].to_string();
    let targets = Arc::new(Mutex::new(
        (0..3).map(|i| addr(i, &cluster)).collect::<Vec<_>>(),
    ));
    let acked = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (targets, acked, sent, stop) =
            (targets.clone(), acked.clone(), sent.clone(), stop.clone());
        tokio::spawn(async move {
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let target = {
                    let t = targets.lock().expect("targets");
                    t[k % t.len()].clone()
                };
                k += 1;
                let Ok(mut c) =
                    creek_proto::pb::creek_client::CreekClient::connect(format!("http://{target}"))
                        .await
                else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                sent.fetch_add(1, Ordering::Relaxed);
                let views = call(&mut c, req("kv.incr", &[b("n"), Value::Int(1)], STRONG), T).await;
                if views.is_ok_and(|v| v.iter().any(|v| matches!(v, Got::Final(Ok(_))))) {
                    acked.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The new replica starts, configured with the members and itself; it
    // waits (not a member) until it is added.
    let new = cluster.spawn_new(&[0, 1, 2]);
    let admin = Client::connect(cluster.clients[..3].iter().map(|a| a.to_string()))
        .await
        .expect("connect");
    let peer_addr = cluster.peers[new].to_string();
    let client_addr = cluster.clients[new].to_string();

    // Refused changes change nothing.
    let e = admin
        .add_replica(2, &peer_addr, &client_addr)
        .await
        .expect_err("refused");
    assert_eq!(code(&e), Some(Code::AlreadyExists), "{e}");
    let e = admin
        .add_replica(4, "no-such-host.invalid:1", &client_addr)
        .await
        .expect_err("refused");
    assert_eq!(code(&e), Some(Code::InvalidArgument), "{e}");
    let e = admin.remove_replica(9).await.expect_err("refused");
    assert_eq!(code(&e), Some(Code::NotFound), "{e}");
    let m = admin.members().await.expect("members");
    assert_eq!(
        roles(&m),
        vec![
            (1, "voter".into()),
            (2, "voter".into()),
            (3, "voter".into())
        ]
    );

    let m = admin
        .add_replica(4, &peer_addr, &client_addr)
        .await
        .expect("add replica 4");
    assert!(m.members.iter().any(|x| x.replica == 4), "{m:?}");
    // It installs a checkpoint, catches up and is promoted.
    wait_members(&cluster, new, "itself as a voter", |m| {
        m.members
            .iter()
            .any(|x| x.replica == 4 && x.role == "voter")
            && m.members.iter().all(|x| x.role == "voter")
    })
    .await;
    targets.lock().expect("targets").push(addr(new, &cluster));
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The old leader leaves: it hands leadership over, then is removed.
    let old = leader + 1;
    *targets.lock().expect("targets") = (0..4)
        .filter(|i| *i != leader)
        .map(|i| addr(i, &cluster))
        .collect();
    let m = admin
        .remove_replica(old as u16)
        .await
        .expect("remove the old leader");
    assert!(m.members.iter().all(|x| x.replica != old as u32), "{m:?}");
    assert_eq!(m.members.len(), 3, "{m:?}");
    cluster.kill(leader);
    // Its id never returns.
    let e = admin
        .add_replica(old as u16, &peer_addr, &client_addr)
        .await
        .expect_err("refused");
    assert_eq!(code(&e), Some(Code::InvalidArgument), "{e}");
    tokio::time::sleep(Duration::from_secs(2)).await;

    stop.store(true, Ordering::Relaxed);
    load.await.expect("the load task");
    let acked = acked.load(Ordering::Relaxed);
    let sent = sent.load(Ordering::Relaxed);
    assert!(acked > 0, "no increment was acknowledged");

    // The new group serves, and has everything acknowledged.
    let n = match strong_get(&cluster, new, "n").await {
        Value::Bytes(s) => std::str::from_utf8(&s)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .expect("a number"),
        Value::Int(n) => n as u64,
        other => panic!("n is {other:?}"),
    };
    assert!(
        acked <= n && n <= sent,
        "n = {n}, but {acked} increments were acknowledged and {sent} sent"
    );
    // An old replica loses its disk and is started again with the
    // configuration it was first given, which names the removed leader and
    // not replica 4: the members name the current group (and replica 4's
    // address), and it is rebuilt from it.
    let down = (0..3).find(|i| *i != leader).expect("another old replica");
    cluster.kill(down);
    std::fs::remove_dir_all(cluster.dir.join(format!("r{}", down + 1)))
        .expect("delete the data directory");
    cluster.restart(down).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = std::fs::read_to_string(cluster.dir.join(format!("r{}.log", down + 1)))
            .unwrap_or_default();
        if log.contains("rebuilt from a member's checkpoint: a member of the cluster again") {
            break;
        }
        let role = cluster.status(down).await.map(|s| s.role);
        assert!(
            Instant::now() < deadline,
            "replica {} was not rebuilt (role {role:?}); logs in {}",
            down + 1,
            cluster.dir.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A replica that is down is removed too (the two left are a quorum of
    // both the old and the new configuration).
    cluster.kill(down);
    let survivors: Vec<usize> = (0..4).filter(|i| *i != leader && *i != down).collect();
    let admin = Client::connect(survivors.iter().map(|i| cluster.clients[*i].to_string()))
        .await
        .expect("connect");
    // The rebuilt replica may have led: the others elect a leader first.
    let deadline = Instant::now() + T;
    let m = loop {
        match admin.remove_replica(down as u16 + 1).await {
            Err(e) if code(&e) == Some(Code::FailedPrecondition) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            result => break result.expect("remove a replica that is down"),
        }
    };
    assert_eq!(m.members.len(), 2, "{m:?}");
    let mut c = cluster.client(new).await;
    let views = call(&mut c, req("kv.incr", &[b("n"), Value::Int(1)], STRONG), T)
        .await
        .expect("the two-replica group serves strong ops");
    assert!(
        views.iter().any(|v| matches!(v, Got::Final(Ok(_)))),
        "{views:?}"
    );

    // The remaining replicas converge on the same committed state.
    let deadline = Instant::now() + T;
    loop {
        let mut dumps = Vec::new();
        for &i in &survivors {
            let c = Client::connect([cluster.clients[i].to_string()])
                .await
                .expect("connect");
            dumps.push(c.dump().await.expect("dump"));
        }
        if dumps.windows(2).all(|w| w[0] == w[1]) {
            break;
        }
        assert!(Instant::now() < deadline, "replicas did not converge");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
