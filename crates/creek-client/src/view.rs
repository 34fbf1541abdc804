//! Views: what a [`crate::Correctable`] learns about an op, one at a time.

use std::time::Duration;

use creek_proto::{from_wire, pb};
use creek_types::value::Value;

use crate::Error;

/// The outcome of a procedure: its result, or the message it aborted with.
/// An abort is deterministic (every replica aborts the same way), so it is
/// an outcome like a result, not an [`Error`].
pub type Outcome = Result<Value, String>;

/// The consistency level a view was produced at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// From the replica's tentative execution: fast, may still change.
    Weak,
    /// From the committed state at one commit time the replica applied:
    /// never a tentative op, never older than what this client saw
    /// (docs/snapshot-reads.md).
    Snapshot,
    /// From the op's committed position: stable.
    Strong,
}

/// Which levels a request asks for (DESIGN §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Levels {
    /// A weak op: one preliminary view, which also closes the Correctable
    /// (unless [`crate::CallOptions::weak_final`] asks for its final view).
    Weak,
    /// A strong op, final view only.
    Strong,
    /// A strong op: preliminary view(s), then the final view.
    #[default]
    Both,
    /// A read-only op, snapshot view only: answered from the committed
    /// state, never waiting for consensus.
    Snapshot,
    /// A read-only weak op: its preliminary view, then its snapshot view.
    WeakSnapshot,
    /// A read-only strong op: its snapshot view, then its final view.
    SnapshotStrong,
    /// A read-only strong op with all three views: preliminary, snapshot,
    /// final.
    All,
}

impl Levels {
    /// The wire form (`InvokeRequest.levels`).
    pub fn to_wire(self) -> Vec<i32> {
        let (w, s, f) = (
            pb::Level::Weak as i32,
            pb::Level::Snapshot as i32,
            pb::Level::Strong as i32,
        );
        match self {
            Levels::Weak => vec![w],
            Levels::Strong => vec![f],
            Levels::Both => vec![w, f],
            Levels::Snapshot => vec![s],
            Levels::WeakSnapshot => vec![w, s],
            Levels::SnapshotStrong => vec![s, f],
            Levels::All => vec![w, s, f],
        }
    }

    /// Whether the op is strong (a final view comes).
    pub fn is_strong(self) -> bool {
        matches!(
            self,
            Levels::Strong | Levels::Both | Levels::SnapshotStrong | Levels::All
        )
    }

    /// Whether a preliminary view is asked for.
    pub fn has_weak(self) -> bool {
        matches!(
            self,
            Levels::Weak | Levels::Both | Levels::WeakSnapshot | Levels::All
        )
    }

    /// Whether a snapshot view is asked for.
    pub fn has_snapshot(self) -> bool {
        matches!(
            self,
            Levels::Snapshot | Levels::WeakSnapshot | Levels::SnapshotStrong | Levels::All
        )
    }

    /// The levels named by `weak`, `snapshot` and `strong` (`None`: none).
    pub fn of(weak: bool, snapshot: bool, strong: bool) -> Option<Levels> {
        Some(match (weak, snapshot, strong) {
            (true, false, false) => Levels::Weak,
            (false, false, true) => Levels::Strong,
            (true, false, true) => Levels::Both,
            (false, true, false) => Levels::Snapshot,
            (true, true, false) => Levels::WeakSnapshot,
            (false, true, true) => Levels::SnapshotStrong,
            (true, true, true) => Levels::All,
            (false, false, false) => return None,
        })
    }
}

/// What kind of view this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ViewKind {
    /// A tentative response.
    Preliminary,
    /// The stable response, differing from the last preliminary view (or
    /// with none before it).
    Final,
    /// The stable response, equal to the last view before it
    /// (preliminary or snapshot).
    Confirmed,
    /// The result on the committed state at commit time [`View::time`].
    Snapshot,
}

impl ViewKind {
    /// Whether this is a stable view (final or confirmed).
    pub fn is_stable(self) -> bool {
        matches!(self, ViewKind::Final | ViewKind::Confirmed)
    }
}

/// One view of an op's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The level the view was produced at.
    pub level: Level,
    /// Preliminary, final or confirmed.
    pub kind: ViewKind,
    /// The result or abort message. For a [`ViewKind::Confirmed`] view the
    /// server does not repeat it; the client fills it in from the last
    /// preliminary view.
    pub outcome: Outcome,
    /// Time from the invocation to this view's arrival.
    pub latency: Duration,
    /// A preliminary view of an operation across shards (a strong call
    /// whose keys span shards): computed on the origin shard's tentative
    /// state, where the other shards' keys read as absent. The final view
    /// has their values.
    pub across_shards: bool,
    /// A snapshot view's commit time, or a final view's (the op's commit
    /// time), in microseconds; 0 on a preliminary view.
    pub time: u64,
}

impl View {
    /// How old a snapshot view's state is: now less its commit time
    /// ([`View::time`], wall-clock microseconds). `None` for any other
    /// view, or one without a time. Zero if the replica's clock is ahead
    /// of this machine's.
    pub fn staleness(&self) -> Option<Duration> {
        if self.kind != ViewKind::Snapshot || self.time == 0 {
            return None;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        Some(now.saturating_sub(Duration::from_micros(self.time)))
    }

    /// Convert a view from the wire (for callers of the generated stubs
    /// in [`crate::pb`]). `last_preliminary` (the last view before it,
    /// preliminary or snapshot) supplies the outcome of a CONFIRMED view,
    /// which the server omits.
    pub fn from_wire(
        v: pb::View,
        last_preliminary: Option<&Outcome>,
        latency: Duration,
    ) -> Result<View, Error> {
        let kind = match pb::view::Kind::try_from(v.kind) {
            Ok(pb::view::Kind::Preliminary) => ViewKind::Preliminary,
            Ok(pb::view::Kind::Final) => ViewKind::Final,
            Ok(pb::view::Kind::Confirmed) => ViewKind::Confirmed,
            Ok(pb::view::Kind::Snapshot) => ViewKind::Snapshot,
            Ok(pb::view::Kind::Unspecified) | Err(_) => {
                return Err(Error::Protocol(format!(
                    "a view of unknown kind {}",
                    v.kind
                )))
            }
        };
        let outcome = match (v.outcome, kind) {
            (Some(pb::view::Outcome::Value(value)), _) => Ok(from_wire(&value)
                .map_err(|e| Error::Protocol(format!("a view with a bad value: {e}")))?),
            (Some(pb::view::Outcome::Abort(message)), _) => Err(message),
            (None, ViewKind::Confirmed) => last_preliminary.cloned().ok_or_else(|| {
                Error::Protocol("a confirmed view with no preliminary view before it".into())
            })?,
            (None, _) => return Err(Error::Protocol(format!("a {kind:?} view with no outcome"))),
        };
        let level = match kind {
            ViewKind::Final | ViewKind::Confirmed => Level::Strong,
            ViewKind::Snapshot => Level::Snapshot,
            ViewKind::Preliminary => Level::Weak,
        };
        Ok(View {
            level,
            kind,
            outcome,
            latency,
            across_shards: v.across_shards && kind == ViewKind::Preliminary,
            time: v.time,
        })
    }
}
