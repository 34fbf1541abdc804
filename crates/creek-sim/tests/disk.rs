//! The simulator's Creek replica keeps exactly what its disk synced: a crash
//! loses every write whose fsync had not completed, and a restart runs
//! `Node::recover` on what is left (not a model that keeps memory).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use creek_core::{ReplicaId, Request};
use creek_node::NodeConfig;
use creek_procs::Registry;
use creek_sim::replica::{CreekReplica, DiskPoll, DiskSetup, SimReplica};
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;

fn replica() -> CreekReplica {
    let ids: Vec<ReplicaId> = (1..=3).map(ReplicaId).collect();
    let setup = DiskSetup { linger_us: 1_000 };
    let registry = Arc::new(Registry::with_builtins());
    CreekReplica::new(
        NodeConfig::for_group(ids[0], &ids),
        registry,
        setup,
        None,
        false,
    )
    .unwrap()
}

/// Invoke a weak put and start the sync of its write (after the linger).
fn put_and_start_sync(r: &mut CreekReplica, key: &str, now_us: u64) {
    let call = ProcCall::new("kv.put", encode_args(&[Value::from(key), Value::from("v")]));
    r.invoke(Request::weak(call), now_us).unwrap();
    assert_eq!(r.poll_disk(now_us), DiskPoll::LingerUntil(now_us + 1_000));
    assert_eq!(r.poll_disk(now_us + 1_000), DiskPoll::SyncStarted);
    assert!(r.has_unsynced());
}

#[test]
fn a_crash_loses_the_unsynced_write_and_keeps_the_synced_one() {
    let mut r = replica();
    put_and_start_sync(&mut r, "a", 1_000_000);
    r.sync_done();
    assert!(!r.has_unsynced());
    // The second op's write is being synced when the power goes.
    put_and_start_sync(&mut r, "b", 1_010_000);
    assert_eq!(r.pending_len(), 2);
    r.crash(&mut |_| 0);
    assert!(!r.is_up());
    r.restart().unwrap();
    assert_eq!(r.disk_counts().recoveries, 1);
    assert_eq!(r.disk_counts().unsynced_writes_lost, 1);
    // The first op came back from the disk; the second is gone. Its id lay
    // within the seqs the first write reserved (its payload may have
    // reached a peer before its write was durable): new ids resume past
    // them.
    assert_eq!(r.pending_len(), 1);
    assert_eq!(r.last_issued_seq(), Some(1 + creek_node::RESERVE_AHEAD));
}

#[test]
fn a_completed_sync_survives_a_crash() {
    let mut r = replica();
    put_and_start_sync(&mut r, "a", 1_000_000);
    r.sync_done();
    r.crash(&mut |_| 0);
    r.restart().unwrap();
    assert_eq!(r.pending_len(), 1);
    assert_eq!(r.last_issued_seq(), Some(1 + creek_node::RESERVE_AHEAD));
    assert_eq!(r.disk_counts().unsynced_writes_lost, 0);
}
