//! The `snapshot` level at one replica (docs/snapshot-reads.md): commit
//! times along the committed list, reads of the committed state only, a
//! client's read time parking a read until it is applied, and the three
//! views of `[weak, snapshot, strong]` in order.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use creek_core::{
    Config, Effect, ExecKey, InvokeError, OpId, Replica, ReplicaId, Request, View, ViewKind, Views,
};
use creek_exec::ProcCall;
use creek_procs::Registry;
use creek_types::value::{encode_args, Value};

fn call(name: &str, args: &[Value]) -> ProcCall {
    ProcCall::new(name, encode_args(args))
}

fn put(key: &str, value: &str) -> ProcCall {
    call("kv.put", &[Value::from(key), Value::from(value)])
}

fn get(key: &str) -> ProcCall {
    call("kv.get", &[Value::from(key)])
}

fn replica() -> Replica {
    replica_keeping(creek_core::REVISIONS_KEPT_DEFAULT)
}

/// A replica serving reads at the last `revisions` revisions (0: none
/// older than its applied state, so versions are kept only for stable
/// reads).
fn replica_keeping(revisions: u64) -> Replica {
    let registry = Arc::new(Registry::with_builtins());
    let config = Config {
        revisions_kept: revisions,
        ..Config::for_replica(ReplicaId(1))
    };
    Replica::new(config, registry).unwrap()
}

/// Run every execution; the views and the ids cast to CAB so far.
fn settle(r: &mut Replica) -> (Vec<View>, Vec<OpId>) {
    r.execute_all();
    let (mut views, mut cast) = (Vec::new(), Vec::new());
    for e in r.take_effects() {
        match e {
            Effect::View(v) => views.push(v),
            Effect::CabCast(id) => cast.push(id),
            _ => {}
        }
    }
    (views, cast)
}

/// Commit every id in `ids` (as CAB would decide them) and settle.
fn commit(r: &mut Replica, ids: &[OpId]) -> Vec<View> {
    for id in ids {
        r.cab_deliver(*id);
    }
    settle(r).0
}

fn value(v: &View) -> Value {
    Value::decode(v.outcome.as_ref().unwrap()).unwrap()
}

#[test]
fn a_snapshot_read_sees_the_committed_state_and_never_a_tentative_op() {
    let mut r = replica();
    let (_, cast) = {
        r.invoke(Request::strong(put("k", "1")), 1_000).unwrap();
        settle(&mut r)
    };
    commit(&mut r, &cast);
    let t1 = r.applied_time();
    assert!(t1 >= 1_000, "the commit time follows the op's clock: {t1}");
    // A weak write, tentative: a weak read sees it, a snapshot read does not.
    r.invoke(Request::weak(put("k", "2")), 2_000).unwrap();
    settle(&mut r);
    let key = r.invoke(Request::snapshot(get("k"), 0), 3_000).unwrap();
    assert!(matches!(key, ExecKey::Local(_)));
    let (views, cast) = settle(&mut r);
    assert!(cast.is_empty(), "a snapshot read is never ordered");
    assert_eq!(views.len(), 1);
    assert_eq!(views[0].kind, ViewKind::Snapshot);
    assert_eq!(value(&views[0]), Value::from("1"));
    assert_eq!(views[0].time, t1);
    assert_eq!(r.counters().snapshot_reads, 1);
}

#[test]
fn a_snapshot_view_is_refused_for_an_op_that_may_write() {
    let mut r = replica();
    let e = r
        .invoke(Request::snapshot(put("k", "v"), 0), 1_000)
        .unwrap_err();
    assert!(
        matches!(e, InvokeError::SnapshotWrites(ref n) if n == "kv.put"),
        "{e}"
    );
    let (views, cast) = settle(&mut r);
    assert!(views.is_empty() && cast.is_empty(), "nothing ran");
    let e = r
        .invoke(Request::snapshot(get("k"), 1_000 + 61_000_000), 1_000)
        .unwrap_err();
    assert!(matches!(e, InvokeError::ReadTimeAhead { .. }), "{e}");
}

#[test]
fn a_read_time_above_the_applied_time_waits_until_it_is_applied() {
    let mut r = replica();
    r.invoke(Request::strong(put("k", "1")), 1_000).unwrap();
    let (_, first) = settle(&mut r);
    r.invoke(Request::strong(put("k", "2")), 2_000).unwrap();
    let (_, second) = settle(&mut r);
    let views = commit(&mut r, &first);
    let t1 = views.iter().find(|v| v.kind.is_final()).unwrap().time;
    assert_eq!(t1, r.applied_time());
    // The client saw a later time elsewhere (the second op commits at
    // its clock's 2,000 µs).
    let seen = t1 + 500;
    r.invoke(Request::snapshot(get("k"), seen), 3_000).unwrap();
    let (views, _) = settle(&mut r);
    assert!(views.is_empty(), "parked: {views:?}");
    assert_eq!(r.snapshot_reads_parked(), 1);
    let views = commit(&mut r, &second);
    let snap = views.iter().find(|v| v.kind == ViewKind::Snapshot).unwrap();
    assert_eq!(value(snap), Value::from("2"));
    assert!(snap.time >= 2_000 && snap.time == r.applied_time());
    assert_eq!(r.snapshot_reads_parked(), 0);
    r.check_invariants().unwrap();
}

#[test]
fn an_op_is_stamped_after_the_read_time_its_client_sent() {
    let mut r = replica();
    let mut request = Request::strong(put("k", "1"));
    request.read_time = 50_000;
    r.invoke(request, 1_000).unwrap();
    let (_, cast) = settle(&mut r);
    let views = commit(&mut r, &cast);
    let fin = views.iter().find(|v| v.kind.is_final()).unwrap();
    assert!(
        fin.time > 50_000,
        "commit time {} after the read time",
        fin.time
    );
}

#[test]
fn three_views_come_in_order_and_the_final_one_confirms_the_snapshot() {
    let mut r = replica();
    r.invoke(Request::strong(put("k", "1")), 1_000).unwrap();
    let (_, cast) = settle(&mut r);
    commit(&mut r, &cast);
    let mut request = Request::strong(get("k"));
    request.views = Views::ALL;
    let key = r.invoke(request, 2_000).unwrap();
    let (views, cast) = settle(&mut r);
    let kinds: Vec<ViewKind> = views.iter().map(|v| v.kind).collect();
    assert_eq!(kinds, [ViewKind::Tentative, ViewKind::Snapshot]);
    let views = commit(&mut r, &cast);
    let fin: Vec<&View> = views.iter().filter(|v| v.handle == key).collect();
    assert_eq!(fin.len(), 1);
    assert_eq!(fin[0].kind, ViewKind::Confirmation);
    assert!(fin[0].time > 0);
    assert!(Views::ALL.closes_with(ViewKind::Confirmation));
    assert!(!Views::ALL.closes_with(ViewKind::Snapshot));
}

#[test]
fn commit_times_increase_and_survive_a_checkpoint() {
    let mut r = replica();
    // Three ops stamped at the same clock reading: times still increase.
    let mut ids = Vec::new();
    for i in 0..3 {
        r.invoke(Request::strong(put("k", &i.to_string())), 1_000)
            .unwrap();
        ids.extend(settle(&mut r).1);
    }
    commit(&mut r, &ids);
    let times = r.commit_times().to_vec();
    assert_eq!(times.len(), 3);
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    let cp = r.checkpoint().unwrap();
    assert_eq!(cp.commit_time, times[2]);
    let registry = Arc::new(Registry::with_builtins());
    let restored = Replica::restore(
        Config::for_replica(ReplicaId(1)),
        registry,
        Some(cp),
        Vec::new(),
    )
    .unwrap();
    assert_eq!(restored.applied_time(), times[2]);
    assert_eq!(restored.last_commit_time(), times[2]);
}

#[test]
fn reads_waiting_for_a_replica_behind_are_bounded() {
    let mut r = replica();
    let ahead = r.applied_time() + 1_000;
    for _ in 0..creek_core::replica::SNAPSHOT_PARKED_MAX {
        r.invoke(Request::snapshot(get("k"), ahead), 1_000).unwrap();
    }
    assert_eq!(
        r.snapshot_reads_parked(),
        creek_core::replica::SNAPSHOT_PARKED_MAX
    );
    let e = r
        .invoke(Request::snapshot(get("k"), ahead), 1_000)
        .unwrap_err();
    assert!(matches!(e, InvokeError::SnapshotBehind(_)), "{e}");
    // A read this replica has applied far enough for still answers.
    r.invoke(Request::snapshot(get("k"), 0), 1_000).unwrap();
    let (views, _) = settle(&mut r);
    assert_eq!(views.len(), 1);
    r.check_invariants().unwrap();
}

/// A strong write of `key` = `value` at clock `now`, committed; its commit
/// time.
fn write(r: &mut Replica, key: &str, value: &str, now: u64) -> u64 {
    r.invoke(Request::strong(put(key, value)), now).unwrap();
    let (_, cast) = settle(r);
    commit(r, &cast);
    r.applied_time()
}

/// The one snapshot view a read of `key` asking for `read_time` gets.
fn snapshot_read(r: &mut Replica, key: &str, read_time: u64, exact: bool, now: u64) -> View {
    let mut request = Request::snapshot(get(key), read_time);
    request.read_exact = exact;
    r.invoke(request, now).unwrap();
    let (views, _) = settle(r);
    assert_eq!(views.len(), 1, "{views:?}");
    views.into_iter().next().unwrap()
}

#[test]
fn with_stable_times_a_read_is_at_the_global_stable_time_from_kept_versions() {
    let mut r = replica_keeping(0);
    r.keep_snapshot_history(creek_core::SnapshotHistory {
        grace_us: 500,
        versions_max_bytes: 1 << 20,
    });
    let t1 = write(&mut r, "k", "1", 1_000);
    let t2 = write(&mut r, "k", "2", 2_000);
    let t3 = write(&mut r, "k", "3", 3_000);
    // No global stable time yet: the applied state.
    let v = snapshot_read(&mut r, "k", 0, false, 3_500);
    assert_eq!((value(&v), v.time), (Value::from("3"), t3));
    // At the global stable time, below the applied one: the kept version.
    r.set_stable_time(t2);
    let v = snapshot_read(&mut r, "k", 0, false, 3_600);
    assert_eq!((value(&v), v.time), (Value::from("2"), t2));
    // A client that saw t3 reads at t3; one asking for exactly t1 (a read
    // across shards) gets t1's state.
    let v = snapshot_read(&mut r, "k", t3, false, 3_700);
    assert_eq!((value(&v), v.time), (Value::from("3"), t3));
    let v = snapshot_read(&mut r, "k", t1, true, 3_800);
    assert_eq!((value(&v), v.time), (Value::from("1"), t1));
    // A time between two commits reads the earlier one's state.
    let v = snapshot_read(&mut r, "k", t1 + 1, true, 3_900);
    assert_eq!((value(&v), v.time), (Value::from("1"), t1 + 1));
    // The stable time moves on: versions older than it less the grace go,
    // and an exact read below them is refused with how stale it is.
    r.set_stable_time(t3 + 1_000);
    assert!(r.snapshot_kept_from().unwrap() > t1);
    let mut request = Request::snapshot(get("k"), t1);
    request.read_exact = true;
    let e = r.invoke(request, 10_000).unwrap_err();
    assert!(
        matches!(e, InvokeError::SnapshotNotKept { time, .. } if time == t1),
        "{e}"
    );
    assert!(e.to_string().contains("no longer kept"), "{e}");
    // The stable time never goes back.
    r.set_stable_time(t1);
    assert_eq!(r.stable_time(), t3 + 1_000);
    r.check_invariants().unwrap();
}

#[test]
fn kept_versions_are_bounded_and_reads_below_the_bound_are_refused() {
    let mut r = replica();
    r.keep_snapshot_history(creek_core::SnapshotHistory {
        grace_us: 0,
        versions_max_bytes: 64,
    });
    let t1 = write(&mut r, "k", "1", 1_000);
    r.set_stable_time(t1);
    // The global stable time stops at t1 (a shard stopped publishing)
    // while writes go on: the kept versions grow past the bound and are
    // dropped, and a read at t1 is refused rather than kept forever.
    let mut last = t1;
    for i in 0..20 {
        last = write(&mut r, "k", &format!("value-{i:04}"), 2_000 + i * 100);
    }
    assert!(r.exec_counters().history_bytes > 64);
    r.set_stable_time(t1);
    assert_eq!(r.counters().snapshot_history_cuts, 1);
    assert!(r.exec_counters().history_bytes <= 64);
    assert_eq!(r.snapshot_kept_from(), Some(last));
    let e = r.invoke(Request::snapshot(get("k"), 0), 9_000).unwrap_err();
    match e {
        InvokeError::SnapshotNotKept {
            time,
            kept_from,
            stable_age_ms,
        } => {
            assert_eq!((time, kept_from), (t1, last));
            assert_eq!(stable_age_ms, Some((9_000 - t1) / 1_000));
        }
        e => panic!("refused as not kept, got {e}"),
    }
    // A client that read at the applied time still reads there.
    let v = snapshot_read(&mut r, "k", last, false, 9_100);
    assert_eq!(v.time, last);
    r.check_invariants().unwrap();
}

/// A part of a read across shards asks for exactly a time this replica
/// has not applied yet, before its first entry: it waits, and reads the
/// state it started from (empty, or a bulk load) at exactly that time.
#[test]
fn an_exact_read_before_the_first_entry_reads_the_starting_state() {
    for loaded in [None, Some("0")] {
        let checkpoint = creek_core::Checkpoint {
            state: loaded
                .map(|v| (bytes::Bytes::from("k"), bytes::Bytes::from(v)))
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let registry = Arc::new(Registry::with_builtins());
        let config = Config::for_replica(ReplicaId(1));
        let mut r = Replica::restore(config, registry, Some(checkpoint), Vec::new()).unwrap();
        r.keep_snapshot_history(creek_core::SnapshotHistory::default());
        let mut request = Request::snapshot(get("k"), 500);
        request.read_exact = true;
        r.invoke(request, 100).unwrap();
        assert_eq!(settle(&mut r).0, Vec::new(), "waits for time 500");
        assert_eq!(r.snapshot_reads_parked(), 1);
        r.invoke(Request::strong(put("k", "1")), 1_000).unwrap();
        let (_, cast) = settle(&mut r);
        let views = commit(&mut r, &cast);
        let read = views.iter().find(|v| v.kind == ViewKind::Snapshot).unwrap();
        assert_eq!(read.time, 500);
        let want = loaded.map_or(Value::Nil, Value::from);
        assert_eq!(value(read), want, "loaded {loaded:?}");
        r.check_invariants().unwrap();
    }
}

/// Without stable times or revisions kept a replica keeps no older
/// versions: a read at exactly a time other than its applied one is
/// refused, never answered at another time.
#[test]
fn an_exact_read_without_kept_versions_is_refused() {
    let mut r = replica_keeping(0);
    let t1 = write(&mut r, "k", "1", 1_000);
    let v = snapshot_read(&mut r, "k", t1, true, 1_500);
    assert_eq!((value(&v), v.time), (Value::from("1"), t1));
    for time in [t1 - 1, t1 + 1] {
        let mut request = Request::snapshot(get("k"), time);
        request.read_exact = true;
        let e = r.invoke(request, 2_000).unwrap_err();
        assert!(
            matches!(e, InvokeError::SnapshotExactUnavailable { time: t, applied } if t == time && applied == t1),
            "{e}"
        );
    }
    r.check_invariants().unwrap();
}

/// The snapshot read of `key` at `revision`.
fn read_at_revision(r: &mut Replica, key: &str, revision: u64) -> Result<View, InvokeError> {
    let mut request = Request::snapshot(get(key), 0);
    request.read_revision = Some(revision);
    r.invoke(request, 100_000)?;
    let (views, _) = settle(r);
    assert_eq!(views.len(), 1, "{views:?}");
    Ok(views.into_iter().next().unwrap())
}

/// A read at a revision sees the state right after the op at that place
/// of the committed order, for each revision kept; older ones (past the
/// revisions kept) and ones not committed yet are out of range, and a
/// read at a revision with other views is refused.
#[test]
fn a_read_at_a_revision_sees_the_state_right_after_that_op() {
    let mut r = replica_keeping(3);
    for (i, v) in ["1", "2", "3", "4", "5", "6"].iter().enumerate() {
        write(&mut r, "k", v, 1_000 * (i as u64 + 1));
    }
    // Revisions 1..=6 wrote k = 1..=6. A trim runs every 64 final ops:
    // before one, every revision is still read.
    assert_eq!(
        value(&read_at_revision(&mut r, "k", 2).unwrap()),
        Value::from("2")
    );
    assert_eq!(
        value(&read_at_revision(&mut r, "k", 6).unwrap()),
        Value::from("6")
    );
    let e = read_at_revision(&mut r, "k", 7).unwrap_err();
    assert!(
        matches!(
            e,
            InvokeError::RevisionOutOfRange {
                revision: 7,
                newest: 6,
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        read_at_revision(&mut r, "k", 0),
        Err(InvokeError::RevisionOutOfRange { .. })
    ));
    let mut both = Request::strong(get("k"));
    both.read_revision = Some(3);
    assert!(matches!(
        r.invoke(both, 100_000),
        Err(InvokeError::RevisionLevels)
    ));
    // Past a trim (every 64 final ops) the last three revisions before
    // the newest are kept at least, and those before the trim's are gone.
    for i in 0..64 {
        write(&mut r, "other", &i.to_string(), 10_000 + i);
    }
    let newest = r.committed_len();
    assert_eq!(newest, 70);
    assert_eq!(
        value(&read_at_revision(&mut r, "k", 70).unwrap()),
        Value::from("6")
    );
    assert_eq!(
        value(&read_at_revision(&mut r, "k", 67).unwrap()),
        Value::from("6")
    );
    let e = read_at_revision(&mut r, "k", 6).unwrap_err();
    assert!(
        matches!(e, InvokeError::RevisionOutOfRange { revision: 6, oldest, newest: 70 }
            if oldest > 6 && oldest <= 67),
        "{e}"
    );
    assert!(e.to_string().contains("compacted"), "{e}");
    r.check_invariants().unwrap();
}
