//! Watchers of changes (`Creek.Watch`), driven by the node loop.
//!
//! Where changes come from: the replica records the writes of each
//! committed op's final execution, in the committed order, with the op's
//! position (`Replica::record_changes`); the node loop hands them to the
//! [`WatchHub`] every turn. The hub keeps a bounded history of them (the
//! positions a watcher can resume from) and moves each watcher's cursor
//! through it as fast as the watcher's bounded channel drains: a slow
//! watcher costs a cursor, not a queue. One that falls behind the history
//! (or asks for a position before it) gets `OUT_OF_RANGE` naming the oldest
//! position it can resume from. Tentative changes are not kept: they go to
//! watchers that asked for them and are caught up, and are dropped for one
//! whose channel is full (the committed ones that follow are not).

// The hub answers with tonic's `Status` by value, as the handlers do.
#![allow(clippy::result_large_err)]

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_core::{Change, OpId};
use creek_exec::txn::Write;
use creek_proto::pb;
use tokio::sync::mpsc;
use tonic::Status;

/// Messages queued toward one watcher (the hub keeps one slot free for the
/// error that ends a stream).
pub const WATCH_CHANNEL: usize = 256;
/// Watchers one replica serves at most.
pub const WATCHERS_MAX: usize = 1024;
/// Longest prefix accepted.
pub const WATCH_PREFIX_MAX: usize = 4096;
/// Bytes counted per kept change beyond its key and value.
const CHANGE_OVERHEAD: usize = 64;
/// A watcher with nothing to receive gets a progress mark at most this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// The metadata naming the oldest position a replica can resume from.
pub const COMPACTED_HEADER: &str = "creek-compacted";

/// The messages of one watcher's stream.
pub type WatchSender = mpsc::Sender<Result<pb::WatchEvent, Status>>;

/// A watch request the service checked.
pub struct WatchRequest {
    /// Stored keys starting with it (a keyspace's data prefix first, for a
    /// watch of a keyspace).
    pub prefix: Bytes,
    /// How many bytes of each stored key the changes leave out (a
    /// keyspace's data prefix: they name the keys as its procedures do).
    pub strip: usize,
    /// The first committed position wanted (`None`: from now).
    pub from: Option<u64>,
    /// Tentative changes too.
    pub tentative: bool,
    /// Where its messages go.
    pub tx: WatchSender,
}

/// One committed op's changes outside Creek's own tables.
struct Entry {
    position: u64,
    op: OpId,
    writes: Arc<[Write]>,
    bytes: usize,
}

struct Watcher {
    prefix: Bytes,
    strip: usize,
    tentative: bool,
    /// Every committed position before it has been dealt with.
    cursor: u64,
    /// The position of the last progress mark sent, and when (none yet: the
    /// first goes out as soon as the watcher is caught up, so that a watch
    /// from now learns where it stands).
    progress: Option<(u64, Instant)>,
    tx: WatchSender,
}

/// The oldest position a replica can resume a watch from, as an error.
pub fn compacted(asked: u64, oldest: u64) -> Status {
    let mut s = Status::out_of_range(format!(
        "position {asked} is compacted: the oldest position this replica can resume a watch \
         from is {oldest}"
    ));
    s.metadata_mut().insert(COMPACTED_HEADER, oldest.into());
    s
}

/// The changes of `writes` under `prefix`, their keys without their first
/// `strip` bytes: a watch of the built-in data (`strip` 0) sees no key
/// starting with 0x00, a watch of a keyspace (its data prefix stripped)
/// only that keyspace's.
fn matching(prefix: &[u8], strip: usize, writes: &[Write]) -> Vec<pb::Change> {
    let user_key = |k: &[u8]| k.first() != Some(&creek_procs::registry::INTERNAL_KEY_PREFIX);
    writes
        .iter()
        .filter(|(k, _)| k.starts_with(prefix) && (strip > 0 || user_key(k)))
        .map(|(k, v)| pb::Change {
            key: k.slice(strip..),
            deleted: v.is_none(),
            value: v.clone().unwrap_or_default(),
        })
        .collect()
}

/// A key of Creek's own tables (sessions, procedures, definitions, users)
/// — not a keyspace's data, which users write.
fn internal(key: &[u8]) -> bool {
    key.first() == Some(&creek_procs::registry::INTERNAL_KEY_PREFIX)
        && !key.starts_with(creek_procs::keyspace::DATA_PREFIX)
}

fn op_ref(op: OpId) -> pb::OpRef {
    pb::OpRef {
        origin: u32::from(op.origin.0),
        seq: op.seq,
        client_id: 0,
        request_seq: 0,
    }
}

/// Every watcher of one replica and the committed changes they may still
/// need.
pub struct WatchHub {
    history: VecDeque<Entry>,
    /// The history holds every change from this position on.
    start: u64,
    /// The next committed position expected.
    next: u64,
    /// `next` when the watchers were last moved on: a watcher whose cursor
    /// reached it is caught up.
    pumped: u64,
    bytes: usize,
    limit: usize,
    watchers: Vec<Watcher>,
}

impl WatchHub {
    /// A hub whose history starts at committed position `finalized` (the
    /// replica's finalized length when it started recording), keeping at
    /// most `limit` bytes of changes.
    pub fn new(finalized: u64, limit: usize) -> Self {
        WatchHub {
            history: VecDeque::new(),
            start: finalized,
            next: finalized,
            pumped: finalized,
            bytes: 0,
            limit,
            watchers: Vec::new(),
        }
    }

    /// Add a watcher, or say why not.
    pub fn watch(&mut self, req: WatchRequest) -> Result<(), Status> {
        self.watchers.retain(|w| !w.tx.is_closed());
        if self.watchers.len() >= WATCHERS_MAX {
            return Err(Status::resource_exhausted(format!(
                "this replica serves {WATCHERS_MAX} watchers already; watch another replica"
            )));
        }
        let cursor = match req.from {
            None => self.next,
            Some(from) if from < self.start => return Err(compacted(from, self.start)),
            Some(from) => from,
        };
        self.watchers.push(Watcher {
            prefix: req.prefix,
            strip: req.strip,
            tentative: req.tentative,
            cursor,
            progress: None,
            tx: req.tx,
        });
        Ok(())
    }

    /// Whether a watcher wants tentative changes.
    pub fn wants_tentative(&self) -> bool {
        self.watchers.iter().any(|w| w.tentative)
    }

    /// Watchers connected.
    pub fn watchers(&self) -> usize {
        self.watchers.len()
    }

    /// The oldest position a watch can resume from, and the next committed
    /// position.
    pub fn bounds(&self) -> (u64, u64) {
        (self.start, self.next)
    }

    /// Take in the replica's recorded changes; `finalized` is its
    /// finalized length after them (a jump with no change in between is a
    /// rebuild from a checkpoint: the history restarts there).
    pub fn on_changes(&mut self, changes: Vec<Change>, finalized: u64) {
        for c in changes {
            match c.position {
                Some(p) => self.on_committed(p, c.op, c.writes),
                None => self.on_tentative(c.op, &c.writes),
            }
        }
        if finalized != self.next {
            self.restart_at(finalized);
        }
    }

    fn restart_at(&mut self, position: u64) {
        tracing::info!(
            from = self.next,
            to = position,
            "committed positions jumped (rebuilt from a checkpoint): the watch history restarts"
        );
        self.history.clear();
        self.bytes = 0;
        self.start = position;
        self.next = position;
        self.pumped = self.pumped.min(position);
    }

    fn on_committed(&mut self, position: u64, op: OpId, writes: Vec<Write>) {
        if position != self.next {
            self.restart_at(position);
        }
        self.next = position + 1;
        let writes: Vec<Write> = writes.into_iter().filter(|(k, _)| !internal(k)).collect();
        if writes.is_empty() {
            return;
        }
        let bytes = writes
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len) + CHANGE_OVERHEAD)
            .sum();
        self.bytes += bytes;
        self.history.push_back(Entry {
            position,
            op,
            writes: writes.into(),
            bytes,
        });
        while self.bytes > self.limit {
            let Some(e) = self.history.pop_front() else {
                break;
            };
            self.bytes -= e.bytes;
            self.start = e.position + 1;
        }
    }

    fn on_tentative(&mut self, op: OpId, writes: &[Write]) {
        for w in &mut self.watchers {
            if !w.tentative || w.cursor < self.pumped || w.tx.capacity() <= 1 {
                continue;
            }
            let changes = matching(&w.prefix, w.strip, writes);
            if changes.is_empty() {
                continue;
            }
            let _ = w.tx.try_send(Ok(pb::WatchEvent {
                kind: pb::watch_event::Kind::Tentative as i32,
                position: self.next,
                op: Some(op_ref(op)),
                changes,
            }));
        }
    }

    /// Move every watcher on as far as its channel allows; end the streams
    /// of those behind the history.
    pub fn pump(&mut self) {
        self.pumped = self.next;
        let (history, start, next) = (&self.history, self.start, self.next);
        self.watchers.retain_mut(|w| {
            if w.tx.is_closed() {
                return false;
            }
            if w.cursor < start {
                // Fell behind what is kept: the error takes the free slot.
                let _ = w.tx.try_send(Err(compacted(w.cursor, start)));
                return false;
            }
            let first = history.partition_point(|e| e.position < w.cursor);
            for e in history.range(first..) {
                let changes = matching(&w.prefix, w.strip, &e.writes);
                if !changes.is_empty() {
                    if w.tx.capacity() <= 1 {
                        return true;
                    }
                    let sent = w.tx.try_send(Ok(pb::WatchEvent {
                        kind: pb::watch_event::Kind::Committed as i32,
                        position: e.position,
                        op: Some(op_ref(e.op)),
                        changes,
                    }));
                    if sent.is_err() {
                        return true;
                    }
                }
                w.cursor = e.position + 1;
            }
            w.cursor = w.cursor.max(next);
            let due = w
                .progress
                .is_none_or(|(at, when)| w.cursor > at && when.elapsed() >= PROGRESS_EVERY);
            if due && w.tx.capacity() > 1 {
                let _ = w.tx.try_send(Ok(pb::WatchEvent {
                    kind: pb::watch_event::Kind::Progress as i32,
                    position: w.cursor,
                    op: None,
                    changes: Vec::new(),
                }));
                w.progress = Some((w.cursor, Instant::now()));
            }
            true
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use creek_core::ReplicaId;

    fn op(seq: u64) -> OpId {
        OpId {
            origin: ReplicaId(1),
            seq,
        }
    }

    fn put(key: &str, value: &str) -> Write {
        (
            Bytes::copy_from_slice(key.as_bytes()),
            Some(Bytes::copy_from_slice(value.as_bytes())),
        )
    }

    fn committed(position: u64, writes: Vec<Write>) -> Change {
        Change {
            op: op(position + 1),
            position: Some(position),
            writes,
        }
    }

    fn drain(rx: &mut mpsc::Receiver<Result<pb::WatchEvent, Status>>) -> Vec<(i32, u64, usize)> {
        let mut out = Vec::new();
        while let Ok(m) = rx.try_recv() {
            match m {
                Ok(e) => out.push((e.kind, e.position, e.changes.len())),
                Err(s) => out.push((-(s.code() as i32), 0, 0)),
            }
        }
        out
    }

    const C: i32 = pb::watch_event::Kind::Committed as i32;
    const P: i32 = pb::watch_event::Kind::Progress as i32;

    #[test]
    fn a_watcher_gets_each_committed_change_under_its_prefix_once_in_order() {
        let mut hub = WatchHub::new(0, 1 << 20);
        let (tx, mut rx) = mpsc::channel(WATCH_CHANNEL);
        hub.watch(WatchRequest {
            prefix: Bytes::from_static(b"a/"),
            strip: 0,
            from: Some(0),
            tentative: false,
            tx,
        })
        .expect("watch");
        hub.on_changes(
            vec![
                committed(0, vec![put("a/1", "x")]),
                committed(1, vec![put("b/1", "y")]),
                committed(2, vec![]),
                committed(3, vec![put("a/2", "z"), put("b/2", "w")]),
            ],
            4,
        );
        hub.pump();
        hub.pump();
        assert_eq!(drain(&mut rx), vec![(C, 0, 1), (C, 3, 1), (P, 4, 0)]);
    }

    #[test]
    fn a_slow_watcher_is_held_by_its_cursor_then_told_it_fell_behind() {
        let mut hub = WatchHub::new(0, 10 * (CHANGE_OVERHEAD + 4));
        let (tx, mut rx) = mpsc::channel(4);
        hub.watch(WatchRequest {
            prefix: Bytes::new(),
            strip: 0,
            from: Some(0),
            tentative: false,
            tx,
        })
        .expect("watch");
        hub.on_changes(
            (0..6).map(|p| committed(p, vec![put("k", "v")])).collect(),
            6,
        );
        hub.pump();
        // Three sent, one slot kept free.
        assert_eq!(drain(&mut rx).len(), 3);
        hub.pump();
        // Three more and nothing else: a progress mark waits for room.
        assert_eq!(drain(&mut rx).len(), 3);
        hub.on_changes(
            (6..30).map(|p| committed(p, vec![put("k", "v")])).collect(),
            30,
        );
        hub.pump();
        hub.pump();
        let got = drain(&mut rx);
        assert_eq!(got.last(), Some(&(-(tonic::Code::OutOfRange as i32), 0, 0)));
        assert_eq!(hub.watchers(), 0);
    }

    #[test]
    fn resuming_before_the_history_is_refused_with_the_oldest_position() {
        let mut hub = WatchHub::new(10, 1 << 20);
        let (tx, _rx) = mpsc::channel(4);
        let e = hub
            .watch(WatchRequest {
                prefix: Bytes::new(),
                strip: 0,
                from: Some(3),
                tentative: false,
                tx,
            })
            .expect_err("compacted");
        assert_eq!(e.code(), tonic::Code::OutOfRange);
        assert_eq!(
            e.metadata()
                .get(COMPACTED_HEADER)
                .and_then(|v| v.to_str().ok()),
            Some("10")
        );
    }

    #[test]
    fn a_jump_in_positions_restarts_the_history() {
        let mut hub = WatchHub::new(0, 1 << 20);
        hub.on_changes(vec![committed(0, vec![put("k", "v")])], 1);
        hub.on_changes(vec![], 50);
        assert_eq!(hub.bounds(), (50, 50));
    }

    #[test]
    fn internal_keys_are_never_sent() {
        let mut hub = WatchHub::new(0, 1 << 20);
        let (tx, mut rx) = mpsc::channel(8);
        hub.watch(WatchRequest {
            prefix: Bytes::new(),
            strip: 0,
            from: Some(0),
            tentative: false,
            tx,
        })
        .expect("watch");
        let secret = (Bytes::from_static(b"\0sessions"), Some(Bytes::new()));
        let keyspace = put("\0ks/orders\0o1", "x");
        hub.on_changes(vec![committed(0, vec![secret, keyspace])], 1);
        hub.pump();
        assert_eq!(drain(&mut rx), vec![(P, 1, 0)]);
    }

    #[test]
    fn a_keyspace_watcher_gets_its_keyspace_keys_as_its_procedures_name_them() {
        let mut hub = WatchHub::new(0, 1 << 20);
        let (tx, mut rx) = mpsc::channel(8);
        let prefix = creek_procs::keyspace::data_key("orders", b"o");
        hub.watch(WatchRequest {
            strip: prefix.len() - 1,
            prefix,
            from: Some(0),
            tentative: false,
            tx,
        })
        .expect("watch");
        hub.on_changes(
            vec![committed(
                0,
                vec![
                    put("\0ks/orders\0o1", "x"),
                    put("\0ks/orders\0p1", "y"),
                    put("\0ks/other\0o1", "z"),
                    put("o1", "plain"),
                ],
            )],
            1,
        );
        hub.pump();
        let got = rx.try_recv().expect("an event").expect("not an error");
        let keys: Vec<&[u8]> = got.changes.iter().map(|c| c.key.as_ref()).collect();
        assert_eq!(keys, [&b"o1"[..]]);
    }
}
