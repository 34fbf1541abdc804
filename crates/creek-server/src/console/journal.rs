//! The node loop's journal of recent ops for the console's strip: the ops
//! invoked at this replica, the views each one got, and where it landed in
//! the committed order. It lives on the node loop's thread (no locks) and is
//! read through [`Event::Strip`](crate::node_loop::Event::Strip) once per
//! console sample; it is bounded ([`JOURNAL_OPS_MAX`]), so it costs nothing
//! that grows with the load.
//!
//! It is not a log: ops roll out as new ones come, and ops invoked at other
//! replicas appear in the strip only by id (the committed and tentative
//! lists), without their procedure or views.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use creek_core::{OpId, ViewKind};
use serde::Serialize;

/// Ops of this replica the journal remembers.
pub const JOURNAL_OPS_MAX: usize = 64;
/// Ops shown in each lane of the strip.
pub const STRIP_LANE_MAX: usize = 40;
/// Committed ids looked at per sample to place the journal's ops (a longer
/// jump is skipped; those ops stay without a position).
const COMMIT_SCAN_MAX: u64 = 8192;
/// Characters of an outcome kept for display.
const OUTCOME_CHARS_MAX: usize = 48;

/// `v` in its display form (ids and names are formatted only when a
/// strip is serialized, not on the node loop's path of every op).
fn display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// One op invoked at this replica and what became of it.
#[derive(Clone, Debug, Serialize)]
pub struct OpTrace {
    /// The op's id (`r1.17`).
    #[serde(serialize_with = "display")]
    pub id: OpId,
    /// The procedure it ran.
    #[serde(serialize_with = "display")]
    pub procedure: Arc<str>,
    /// `weak` or `strong`.
    pub level: &'static str,
    /// Milliseconds since the replica started, at receipt.
    pub received_ms: u64,
    /// Preliminary (tentative) views sent; more than one means the
    /// speculation was rerun and its result changed before the final view.
    pub preliminary_views: u32,
    /// Milliseconds from receipt to the first preliminary view.
    pub preliminary_ms: Option<f64>,
    /// The first preliminary result, shortened.
    pub preliminary: Option<String>,
    /// The snapshot result (read at a commit time this replica applied),
    /// shortened, if one was asked for.
    pub snapshot: Option<String>,
    /// Milliseconds from receipt to the snapshot view.
    pub snapshot_ms: Option<f64>,
    /// `confirmed` (the final view equals the last preliminary one),
    /// `corrected` (it differs: the speculation was wrong) or `final` (no
    /// preliminary view was asked for); none before the final view or when
    /// the client asked for none.
    pub final_kind: Option<&'static str>,
    /// The final result, shortened (a confirmation repeats the preliminary).
    pub final_outcome: Option<String>,
    /// Milliseconds from receipt to the final view.
    pub final_ms: Option<f64>,
    /// Its position in the committed order (0-based), once seen there.
    pub committed_at: Option<u64>,
    #[serde(skip)]
    received: Instant,
}

impl OpTrace {
    /// Whether the op's speculation was corrected: its final view differed
    /// from a preliminary one, or a later preliminary view revised an
    /// earlier one.
    pub fn corrected(&self) -> bool {
        self.final_kind == Some("corrected") || self.preliminary_views > 1
    }
}

/// An op in a lane of the strip.
#[derive(Clone, Debug, Serialize)]
pub struct Chip {
    /// The op's id.
    #[serde(serialize_with = "display")]
    pub id: OpId,
    /// Its position in the order (committed ops: in the committed list;
    /// tentative ops: committed length + place in the tentative list).
    pub position: u64,
    /// The procedure, for ops invoked at this replica.
    pub procedure: Option<String>,
    /// `weak` or `strong`, for ops invoked at this replica.
    pub level: Option<&'static str>,
    /// The op was invoked at this replica and its speculation was
    /// corrected ([`OpTrace::corrected`]).
    pub corrected: bool,
}

/// The strip at one moment: the end of the committed list beside the head
/// of the tentative list (the ops next in line to commit), with the recent
/// ops of this replica.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Strip {
    /// Length of the committed list.
    pub committed_len: u64,
    /// Length of the tentative list.
    pub tentative_len: u64,
    /// The last committed ops, oldest first.
    pub committed: Vec<Chip>,
    /// The first tentative ops, in order.
    pub tentative: Vec<Chip>,
    /// Ops invoked at this replica, newest last.
    pub recent: Vec<OpTrace>,
}

/// The journal (owned by the node loop).
#[derive(Debug)]
pub struct Journal {
    ops: VecDeque<OpTrace>,
    epoch: Instant,
    /// The committed length placed so far.
    scanned: u64,
}

impl Default for Journal {
    fn default() -> Self {
        Journal {
            ops: VecDeque::new(),
            epoch: Instant::now(),
            scanned: 0,
        }
    }
}

fn short(outcome: &creek_exec::Outcome) -> String {
    let mut s = match outcome {
        Ok(bytes) => match creek_types::value::Value::decode(bytes) {
            Ok(v) => super::values::display(&v),
            Err(_) => format!("{} bytes", bytes.len()),
        },
        Err(abort) => format!("abort: {}", abort.0),
    };
    if s.chars().count() > OUTCOME_CHARS_MAX {
        s = s.chars().take(OUTCOME_CHARS_MAX - 1).collect::<String>() + "…";
    }
    s
}

impl Journal {
    /// An op was accepted into the order under `id`.
    pub fn invoked(&mut self, id: OpId, procedure: Arc<str>, strong: bool, received: Instant) {
        if self.ops.len() >= JOURNAL_OPS_MAX {
            self.ops.pop_front();
        }
        let received_ms = received.saturating_duration_since(self.epoch).as_millis() as u64;
        self.ops.push_back(OpTrace {
            id,
            procedure,
            level: if strong { "strong" } else { "weak" },
            received_ms,
            preliminary_views: 0,
            preliminary_ms: None,
            preliminary: None,
            snapshot: None,
            snapshot_ms: None,
            final_kind: None,
            final_outcome: None,
            final_ms: None,
            committed_at: None,
            received,
        });
    }

    fn find(&mut self, id: OpId) -> Option<&mut OpTrace> {
        self.ops.iter_mut().rev().find(|t| t.id == id)
    }

    /// A view of op `id` was routed to its client.
    pub fn view(&mut self, id: OpId, kind: ViewKind, outcome: &creek_exec::Outcome) {
        let Some(t) = self.find(id) else {
            return;
        };
        let ms = t.received.elapsed().as_secs_f64() * 1000.0;
        match kind {
            ViewKind::Tentative => {
                t.preliminary_views += 1;
                if t.preliminary.is_none() {
                    t.preliminary = Some(short(outcome));
                    t.preliminary_ms = Some(ms);
                }
            }
            ViewKind::Snapshot => {
                if t.snapshot.is_none() {
                    t.snapshot = Some(short(outcome));
                    t.snapshot_ms = Some(ms);
                }
            }
            ViewKind::Confirmation | ViewKind::Stable => {
                t.final_kind = Some(match kind {
                    ViewKind::Confirmation => "confirmed",
                    _ if t.preliminary_views > 0 => "corrected",
                    _ => "final",
                });
                t.final_outcome = Some(if kind == ViewKind::Confirmation {
                    t.preliminary.clone().unwrap_or_default()
                } else {
                    short(outcome)
                });
                t.final_ms = Some(ms);
            }
        }
    }

    /// The strip now, given the replica's committed list (`committed`, the
    /// ids from position `committed_len - committed.len()` on) and its
    /// tentative list.
    pub fn strip(&mut self, committed: &[OpId], committed_len: u64, tentative: &[OpId]) -> Strip {
        let base = committed_len.saturating_sub(committed.len() as u64);
        // Place this replica's ops that committed since the last look.
        let from = self
            .scanned
            .max(base)
            .max(committed_len.saturating_sub(COMMIT_SCAN_MAX));
        for pos in from..committed_len {
            let Some(id) = usize::try_from(pos - base)
                .ok()
                .and_then(|i| committed.get(i))
            else {
                break;
            };
            if let Some(t) = self.find(*id) {
                t.committed_at = Some(pos);
            }
        }
        self.scanned = committed_len;
        let chip = |j: &Journal, id: &OpId, position: u64| {
            let mine = j.ops.iter().rev().find(|t| t.id == *id);
            Chip {
                id: *id,
                position,
                procedure: mine.map(|t| t.procedure.to_string()),
                level: mine.map(|t| t.level),
                corrected: mine.is_some_and(OpTrace::corrected),
            }
        };
        let tail = committed.len().saturating_sub(STRIP_LANE_MAX);
        Strip {
            committed_len,
            tentative_len: tentative.len() as u64,
            committed: committed[tail..]
                .iter()
                .enumerate()
                .map(|(i, id)| chip(self, id, base + (tail + i) as u64))
                .collect(),
            tentative: tentative
                .iter()
                .take(STRIP_LANE_MAX)
                .enumerate()
                .map(|(i, id)| chip(self, id, committed_len + i as u64))
                .collect(),
            recent: self.ops.iter().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use creek_core::ReplicaId;

    fn id(seq: u64) -> OpId {
        OpId {
            origin: ReplicaId(1),
            seq,
        }
    }

    fn val(v: i64) -> creek_exec::Outcome {
        Ok(creek_types::value::Value::Int(v).encode())
    }

    #[test]
    fn a_final_view_that_differs_is_a_correction() {
        let mut j = Journal::default();
        let now = Instant::now();
        j.invoked(id(1), "kv.incr".into(), true, now);
        j.invoked(id(2), "kv.incr".into(), true, now);
        j.view(id(1), ViewKind::Tentative, &val(1));
        j.view(id(1), ViewKind::Confirmation, &val(1));
        j.view(id(2), ViewKind::Tentative, &val(1));
        j.view(id(2), ViewKind::Stable, &val(2));
        let s = j.strip(&[id(2), id(1)], 2, &[]);
        assert_eq!(s.recent.len(), 2);
        assert_eq!(s.recent[0].final_kind, Some("confirmed"));
        assert!(!s.recent[0].corrected());
        assert_eq!(s.recent[0].committed_at, Some(1));
        assert_eq!(s.recent[1].final_kind, Some("corrected"));
        assert!(s.recent[1].corrected());
        assert!(s.committed[0].corrected && !s.committed[1].corrected);
        assert_eq!(s.committed[0].procedure.as_deref(), Some("kv.incr"));
        let json = serde_json::to_value(&s).expect("serializable");
        assert_eq!(json["recent"][0]["id"], "r1.1");
        assert_eq!(json["recent"][0]["procedure"], "kv.incr");
        assert_eq!(json["committed"][0]["id"], "r1.2");
    }

    #[test]
    fn the_journal_and_the_lanes_stay_bounded() {
        let mut j = Journal::default();
        let now = Instant::now();
        for s in 0..(JOURNAL_OPS_MAX as u64 * 3) {
            j.invoked(id(s), "kv.put".into(), false, now);
        }
        let committed: Vec<OpId> = (0..100).map(id).collect();
        let tentative: Vec<OpId> = (100..300).map(id).collect();
        // Only the last 10 committed ids are still in memory (trimmed list).
        let s = j.strip(&committed[90..], 100, &tentative);
        assert_eq!(s.recent.len(), JOURNAL_OPS_MAX);
        assert_eq!(s.committed.len(), 10);
        assert_eq!(s.committed[0].position, 90);
        assert_eq!(s.tentative.len(), STRIP_LANE_MAX);
        assert_eq!(s.tentative[0].position, 100);
        assert_eq!(s.tentative_len, 200);
    }
}
