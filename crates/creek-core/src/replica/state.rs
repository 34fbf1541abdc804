//! An engine's state as a [`SnapshotRead`] outside any execution: its
//! latest state (the end of the current order, for invoke-time checks of
//! user procedures), its committed state (final executions only, for
//! snapshot reads and an MPO's reads at its turn), or its committed state
//! before a committed position (snapshot reads at a time below the applied
//! one). Reads are never recorded: every version reads as
//! [`VersionNo::ABSENT`].

use bytes::Bytes;
use creek_exec::{Engine, SnapshotRead, VersionNo};

use crate::op::{ExecKey, Pos};

/// Which state of the engine is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Latest,
    Committed,
    /// The final state before this position, which the engine's history
    /// covers (the caller checked).
    Before(Pos),
}

/// An engine's latest or committed state as a snapshot.
pub(super) struct EngineState<'a, E> {
    engine: &'a E,
    which: Which,
}

impl<'a, E> EngineState<'a, E> {
    /// The end of the current order, tentative ops included.
    pub(super) fn latest(engine: &'a E) -> Self {
        EngineState {
            engine,
            which: Which::Latest,
        }
    }

    /// The final executions' state.
    pub(super) fn committed(engine: &'a E) -> Self {
        EngineState {
            engine,
            which: Which::Committed,
        }
    }

    /// The final state before committed position `before`.
    pub(super) fn before(engine: &'a E, before: Pos) -> Self {
        EngineState {
            engine,
            which: Which::Before(before),
        }
    }
}

/// A history read the caller promised is covered.
fn covered<T: Default>(read: Result<T, creek_exec::BelowHorizon>) -> T {
    read.unwrap_or_else(|e| {
        debug_assert!(false, "a snapshot read below the versions kept: {e:?}");
        T::default()
    })
}

impl<E: Engine<ExecKey, Pos>> SnapshotRead for EngineState<'_, E> {
    fn read(&self, key: &[u8]) -> (Option<Bytes>, VersionNo) {
        let value = match self.which {
            Which::Latest => self.engine.read_latest(key),
            Which::Committed => self.engine.read_committed(key),
            Which::Before(before) => covered(self.engine.read_final_before(key, before)),
        };
        (value, VersionNo::ABSENT)
    }

    fn scan(&self, from: &[u8], to: &[u8], limit: usize, out: &mut Vec<(Bytes, Bytes, VersionNo)>) {
        let mut found = Vec::new();
        match self.which {
            Which::Latest => self.engine.scan_latest(from, to, limit, &mut found),
            Which::Committed => self.engine.scan_committed(from, to, limit, &mut found),
            Which::Before(before) => covered(
                self.engine
                    .scan_final_before(from, to, limit, before, &mut found),
            ),
        }
        out.extend(found.into_iter().map(|(k, v)| (k, v, VersionNo::ABSENT)));
    }
}
