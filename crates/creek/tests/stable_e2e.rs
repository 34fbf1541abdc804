//! End-to-end: stable times on a cluster of two shards of three `creek
//! serve` processes each and the directory's three (docs/snapshot-reads.md,
//! "Stable times"; docs/operations.md). Commit times are Unix times; every
//! shard replica's global stable time moves and stays within a second of
//! the wall clock while the cluster is healthy; a shard without a leader
//! holds it back (its age grows, and the status says so) but not a
//! snapshot read of another shard's key, and once the shard is back the
//! age drops again.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use creek_client::{CallOptions, Client, Cluster, Levels, ViewKind};
use creek_harness::launcher::Signal;
use creek_proto::pb;
use creek_types::value::Value;

mod common;
use common::sharded::{Sharded, DIRECTORY, REPLICAS, SHARDS};

const T: Duration = Duration::from_secs(20);
/// What "near the wall clock" means here: a healthy cluster's global
/// stable time lags by about an interval plus a commit (milliseconds).
const NEAR_MS: u64 = 1_000;

/// One cluster at a time: nine processes each on a machine of two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn b(s: &str) -> Value {
    Value::Bytes(bytes::Bytes::copy_from_slice(s.as_bytes()))
}

/// Now, in µs since the Unix epoch, as the test's clock says.
fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_micros() as u64
}

impl Sharded {
    /// Replica `i`'s status, if it answers within a second.
    async fn status(&self, i: usize) -> Option<pb::StatusReply> {
        let ask = async {
            let c = Client::connect([self.addr(i)]).await.ok()?;
            c.status().await.ok()
        };
        tokio::time::timeout(Duration::from_secs(1), ask)
            .await
            .ok()
            .flatten()
    }

    /// The stable times replica `i`'s status shows: (group, global, the
    /// global one's age in ms), 0 where not known yet.
    async fn stable(&self, i: usize) -> Option<Stable> {
        let s = self.status(i).await?;
        let get = |k: &str| s.counters.get(k).copied();
        Some(Stable {
            group_us: get("stable_group_us")?,
            global_us: get("stable_global_us")?,
            global_age_ms: get("stable_global_age_ms").unwrap_or(u64::MAX),
            clock_noops: get("clock_noops")?,
        })
    }

    /// Wait until every replica of `shards` shows stable times for which
    /// `ok` holds; their last readings otherwise (a panic naming `what`).
    async fn wait_stable(
        &self,
        what: &str,
        shards: &[usize],
        ok: impl Fn(&Stable) -> bool,
    ) -> Vec<Stable> {
        let deadline = Instant::now() + T;
        loop {
            let mut all = Vec::new();
            for s in shards {
                for i in s * REPLICAS..(s + 1) * REPLICAS {
                    all.push((i, self.stable(i).await));
                }
            }
            if all.iter().all(|(_, st)| st.as_ref().is_some_and(&ok)) {
                return all.into_iter().filter_map(|(_, st)| st).collect();
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {T:?}; by replica index: {all:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A replica's stable times, from its status.
#[derive(Clone, Copy, Debug)]
struct Stable {
    group_us: u64,
    global_us: u64,
    global_age_ms: u64,
    clock_noops: u64,
}

impl Stable {
    /// Known, and within [`NEAR_MS`] of the replica's clock and the test's.
    fn near_now(&self) -> bool {
        let age_ms = wall_us().saturating_sub(self.global_us) / 1000;
        self.global_us > 0 && self.global_age_ms < NEAR_MS && age_ms < NEAR_MS
    }
}

/// A strong put through the routing client: the final view's commit time.
async fn put(c: &Cluster, key: &str, value: &str) -> u64 {
    let op = c
        .invoke_with(
            "kv.put",
            vec![b(key), b(value)],
            Levels::Strong,
            CallOptions {
                timeout: Some(T),
                ..CallOptions::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
    let view = op.final_view().await.expect("final view");
    assert_eq!(view.outcome, Ok(Value::Nil), "put {key}");
    view.time
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_stable_time_moves_on_every_shard_replica_near_the_wall_clock() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Sharded::start("stable-e2e", 0x57ab, true, |_, _| {});
    let client = Cluster::connect([cluster.addr(0)]).await.expect("connect");

    // Commit times are Unix times: a client subtracts them from its own
    // clock.
    for s in 0..SHARDS {
        let key = cluster.key_of(s as u16, "at");
        let before = wall_us();
        let time = put(&client, &key, "v").await;
        let after = wall_us();
        assert!(
            time + NEAR_MS * 1000 > before && time < after + NEAR_MS * 1000,
            "shard {s}'s commit time {time} is not a Unix time near [{before}, {after}]"
        );
    }

    // Every shard replica learns a global stable time near the wall clock,
    // and it keeps moving with nothing written (idle leaders' clock
    // no-ops).
    let first = cluster
        .wait_stable("a global stable time near now", &[0, 1], Stable::near_now)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = cluster
        .wait_stable("the global stable time still near now", &[0, 1], |s| {
            s.near_now()
        })
        .await;
    for (i, (a, b)) in first.iter().zip(&second).enumerate() {
        assert!(
            b.global_us > a.global_us,
            "replica index {i}: the global stable time stood still over a second: {a:?} then {b:?}"
        );
        assert!(
            b.group_us >= b.global_us,
            "replica index {i}: its group's stable time is below the global one: {b:?}"
        );
    }
    for s in 0..SHARDS {
        let noops: u64 = second[s * REPLICAS..(s + 1) * REPLICAS]
            .iter()
            .map(|st| st.clock_noops)
            .sum();
        assert!(
            noops > 0,
            "shard {s}'s idle leader committed no clock no-op"
        );
    }

    // The directory keeps none: the global time is the shards'.
    for i in SHARDS * REPLICAS..SHARDS * REPLICAS + DIRECTORY {
        let s = cluster.status(i).await.expect("directory status");
        assert!(
            !s.counters.contains_key("stable_global_us"),
            "directory replica {} shows stable times: {:?}",
            i + 1,
            s.counters
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_without_a_leader_holds_back_the_global_stable_time_not_snapshot_reads() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = Sharded::start("stable-e2e", 0x57ab, true, |_, _| {});
    let client = Cluster::connect([cluster.addr(0)]).await.expect("connect");
    let key = cluster.key_of(0, "left");
    let written = put(&client, &key, "1").await;
    cluster
        .wait_stable("a healthy global stable time", &[0, 1], Stable::near_now)
        .await;

    // Two of shard 1's three replicas stop: it has no majority, so no
    // leader and no stable time that moves.
    let stopped = [REPLICAS, REPLICAS + 1];
    for i in stopped {
        cluster.procs.signal(i, Signal::Stop).expect("SIGSTOP");
    }
    let shard0: Vec<String> = (0..REPLICAS).map(|i| cluster.addr(i)).collect();
    let reader = Client::connect(shard0).await.expect("connect to shard 0");
    let snapshot_read = || async {
        let started = Instant::now();
        let read = async {
            let op = reader
                .invoke_with(
                    "kv.get",
                    vec![b(&key)],
                    Levels::Snapshot,
                    CallOptions {
                        timeout: Some(Duration::from_secs(2)),
                        ..CallOptions::default()
                    },
                )
                .await?;
            op.final_view().await
        };
        let view = tokio::time::timeout(Duration::from_secs(2), read)
            .await
            .expect("a snapshot read of shard 0 answers within 2 s while shard 1 is down")
            .expect("snapshot read");
        assert_eq!(view.kind, ViewKind::Snapshot);
        assert_eq!(view.outcome, Ok(b("1")));
        assert!(
            view.time >= written,
            "{view:?} before the write at {written}"
        );
        (started.elapsed(), view)
    };
    let (took, _) = snapshot_read().await;
    eprintln!("snapshot read with shard 1 down: {took:?}");

    // Shard 0's replicas see the global stable time fall behind, by more
    // than a second, while their own group's stays current.
    let held = cluster
        .wait_stable("the global stable time held back", &[0], |s| {
            s.global_age_ms > NEAR_MS
                && s.group_us > 0
                && wall_us().saturating_sub(s.group_us) < NEAR_MS * 1000
        })
        .await;
    eprintln!("held back: {held:?}");
    // Snapshot reads still answer at once, at the global stable time:
    // stale by as much, and their views say so.
    let (took, view) = snapshot_read().await;
    let stale = view.staleness().expect("a snapshot view's staleness");
    eprintln!("snapshot read with the global stable time held back: {took:?}, {stale:?} stale");
    assert!(
        stale > Duration::from_millis(NEAR_MS),
        "the read is at the held-back global stable time: {view:?}, {stale:?} stale"
    );

    // Shard 1 back: it elects a leader, publishes again, and the global
    // stable time is near the wall clock on every shard replica.
    for i in stopped {
        cluster.procs.signal(i, Signal::Cont).expect("SIGCONT");
    }
    let back = cluster
        .wait_stable(
            "the global stable time caught up",
            &[0, 1],
            Stable::near_now,
        )
        .await;
    for (a, b) in held.iter().zip(&back) {
        assert!(b.global_us > a.global_us, "{a:?} then {b:?}");
    }
    // And snapshot reads are fresh again.
    let (_, view) = snapshot_read().await;
    let stale = view.staleness().expect("a snapshot view's staleness");
    assert!(
        stale < Duration::from_millis(NEAR_MS),
        "fresh again: {view:?}, {stale:?} stale"
    );
}
