//! What a client knows of its own causal past, shared by its clones and by
//! every shard's client of a [`crate::Cluster`]: its **read time** (the
//! largest snapshot time, or commit time of a read, it saw), its
//! **dependency time** (that, and the commit times of its own writes), and
//! the client cache of its writes (docs/snapshot-reads.md, "The client
//! cache"). Snapshot reads are sent at the read time and see the client's
//! writes through the cache; every other request is sent at the
//! dependency time, so the client's later ops commit after its earlier
//! ones on any shard.
//!
//! [`Track`] is one call's part: what each of its views tells the client,
//! and what the client lays over a snapshot view.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use creek_types::value::Value;

use crate::cache::{CachedWrite, WriteCache};
use crate::known::{KeyEffect, Known};
use crate::view::{Levels, View, ViewKind};

/// A client's times and cache.
#[derive(Debug)]
pub(crate) struct Causal {
    read_time: AtomicU64,
    dep_time: AtomicU64,
    /// The largest commit time of the client's own writes the cache does
    /// not hold (did not fit, opaque, or the cache is off): snapshot reads
    /// are sent at least at it, so they include those writes.
    uncached_time: AtomicU64,
    next_write: AtomicU64,
    /// `None`: the cache is off.
    cache: Option<Mutex<WriteCache>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a request's snapshot reads a time other than the client's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadAt {
    /// Exactly this time (`read_exact`): a part of a read across shards.
    pub(crate) exact: Option<u64>,
    /// At a past revision: the state of the past, which no own write of
    /// the client's cache is laid over.
    pub(crate) past: bool,
}

impl Causal {
    /// A client's times, with a cache bounded to `cache_bytes_max` bytes
    /// (`None`: no cache).
    pub(crate) fn new(cache_bytes_max: Option<usize>) -> Arc<Causal> {
        Arc::new(Causal {
            read_time: AtomicU64::new(0),
            dep_time: AtomicU64::new(0),
            uncached_time: AtomicU64::new(0),
            next_write: AtomicU64::new(1),
            cache: cache_bytes_max.map(|max| Mutex::new(WriteCache::new(max))),
        })
    }

    pub(crate) fn read_time(&self) -> u64 {
        self.read_time.load(Ordering::Acquire)
    }

    pub(crate) fn dep_time(&self) -> u64 {
        self.dep_time.load(Ordering::Acquire).max(self.read_time())
    }

    /// The read time a snapshot read is sent with: the read time, or the
    /// commit time of a write of the client's the cache does not hold.
    pub(crate) fn snapshot_time(&self) -> u64 {
        self.read_time()
            .max(self.uncached_time.load(Ordering::Acquire))
    }

    /// A snapshot, or a read's final view, at `time`: later snapshot reads
    /// are at or after it, so the writes it includes leave the cache.
    pub(crate) fn observe_read(&self, time: u64) {
        let before = self.read_time.fetch_max(time, Ordering::AcqRel);
        self.dep_time.fetch_max(time, Ordering::AcqRel);
        if time > before {
            if let Some(cache) = &self.cache {
                lock(cache).evict(self.read_time());
            }
        }
    }

    /// The client's own write committed at `time`; `cached`: the cache
    /// holds its effect.
    fn observe_write(&self, time: u64, cached: bool) {
        self.dep_time.fetch_max(time, Ordering::AcqRel);
        if !cached {
            self.uncached_time.fetch_max(time, Ordering::AcqRel);
        }
    }

    pub(crate) fn cache_on(&self) -> bool {
        self.cache.is_some()
    }

    pub(crate) fn cache_entries(&self) -> Vec<CachedWrite> {
        self.cache
            .as_ref()
            .map_or_else(Vec::new, |c| lock(c).entries())
    }

    pub(crate) fn cache_bytes(&self) -> usize {
        self.cache.as_ref().map_or(0, |c| lock(c).bytes())
    }

    /// The tracking of a call of `procedure(args)` at `levels`, and the
    /// read time to send it with.
    pub(crate) fn track(
        self: &Arc<Self>,
        procedure: &str,
        args: &[Value],
        levels: Levels,
        at: ReadAt,
    ) -> (Track, u64) {
        let snapshot = levels.has_snapshot();
        let known = Known::of(procedure, args);
        let read = snapshot || known.is_read();
        let time = match (snapshot, at.exact) {
            (true, Some(t)) => t,
            (true, None) => self.snapshot_time(),
            (false, _) => self.dep_time(),
        };
        let kind = match known {
            Known::KeyRead { .. } if at.past => Kind::Read,
            Known::KeyRead { keys, list } => Kind::KeyRead { keys, list },
            _ if read => Kind::Read,
            Known::Write(effect) if self.cache_on() => Kind::Write {
                write: self.next_write.fetch_add(1, Ordering::Relaxed),
                effect: Effect::Args(effect),
            },
            Known::WriteByOutcome(by) if self.cache_on() => Kind::Write {
                write: self.next_write.fetch_add(1, Ordering::Relaxed),
                effect: Effect::Outcome(by),
            },
            _ => Kind::Opaque,
        };
        let in_flight = match (&self.cache, snapshot) {
            (Some(cache), true) => {
                lock(cache).read_started(time);
                Some(time)
            }
            _ => None,
        };
        let track = Track {
            causal: self.clone(),
            kind,
            acked_by_preliminary: levels == Levels::Weak,
            acknowledged: false,
            in_flight,
            recorded: false,
            cached: false,
            settled: false,
        };
        (track, time)
    }
}

/// What a call is, for the client's times and cache.
#[derive(Debug)]
enum Kind {
    /// A read of plain keys: the cache is laid over its snapshot views.
    KeyRead { keys: Vec<Bytes>, list: bool },
    /// Another read-only call.
    Read,
    /// A write the cache can hold (number `write` of the client's).
    Write { write: u64, effect: Effect },
    /// A call the client cannot see into (its final view counts as a
    /// write the cache does not hold).
    Opaque,
}

#[derive(Debug)]
enum Effect {
    Args(Vec<KeyEffect>),
    Outcome(crate::known::ByOutcome),
}

/// One call's effect on the client's times and cache, applied view by
/// view.
#[derive(Debug)]
pub(crate) struct Track {
    causal: Arc<Causal>,
    kind: Kind,
    /// Whether the call's one view acknowledges it (a weak op); otherwise
    /// its stable view does.
    acked_by_preliminary: bool,
    /// Whether the caller was told the call was applied: until then an
    /// error drops its write from the cache.
    acknowledged: bool,
    /// The read time its snapshot read was sent with, while in flight.
    in_flight: Option<u64>,
    /// Whether its write was recorded in the cache (held or not).
    recorded: bool,
    /// Whether the cache holds the write's effect.
    cached: bool,
    /// Whether its stable view was seen.
    settled: bool,
}

impl Track {
    /// Whether the call is a write the cache may hold: its commit time
    /// matters to the client even when the call closes at its preliminary
    /// view. (Not an opaque call: a weak read-only one is never ordered,
    /// and the client cannot tell it from a write.)
    pub(crate) fn wants_final(&self) -> bool {
        matches!(self.kind, Kind::Write { .. })
    }

    /// Whether the stable view was seen.
    pub(crate) fn settled(&self) -> bool {
        self.settled
    }

    /// Whether a lost final view is asked for again (the request sent
    /// once more under its id): the cache holds a write of unknown commit
    /// time, or the call waits for its commit.
    pub(crate) fn resend_on_loss(&self) -> bool {
        matches!(self.kind, Kind::Write { .. }) && self.recorded && !self.settled
    }

    /// Whether the call's write was acknowledged without the cache holding
    /// it: the call must wait for its final view (acknowledged at commit)
    /// so later snapshot reads are sent at its commit time.
    pub(crate) fn must_settle(&self) -> bool {
        matches!(self.kind, Kind::Write { .. }) && self.recorded && !self.cached && !self.settled
    }

    /// Apply `view` (as the server sent it) to the client's times and
    /// cache, and lay the cache over it if it is a snapshot view of a key
    /// read. Returns the view the caller is shown.
    pub(crate) fn on_view(&mut self, mut view: View) -> View {
        match view.kind {
            ViewKind::Snapshot => {
                self.causal.observe_read(view.time);
                if let Kind::KeyRead { keys, list } = &self.kind {
                    view.outcome = self.overlay(keys, *list, view.time, view.outcome);
                }
                self.read_ended();
            }
            ViewKind::Preliminary => {
                self.acknowledged |= self.acked_by_preliminary;
                if !self.recorded {
                    self.record(&view, None);
                }
            }
            ViewKind::Final | ViewKind::Confirmed => {
                self.settled = true;
                self.acknowledged = true;
                self.read_ended();
                match &self.kind {
                    Kind::KeyRead { .. } | Kind::Read => self.causal.observe_read(view.time),
                    Kind::Opaque => self.causal.observe_write(view.time, false),
                    Kind::Write { .. } => {
                        self.record(&view, Some(view.time));
                        self.causal.observe_write(view.time, self.cached);
                        if let Some(cache) = &self.causal.cache {
                            lock(cache).evict(self.causal.read_time());
                        }
                    }
                }
            }
        }
        view
    }

    /// The call failed. A write acknowledged only at its stable view is
    /// dropped from the cache (its outcome is unknown to the caller); one
    /// acknowledged at its preliminary view stays.
    pub(crate) fn on_failed(&mut self) {
        self.read_ended();
        if let (Kind::Write { write, .. }, false) = (&self.kind, self.acknowledged) {
            if let Some(cache) = &self.causal.cache {
                lock(cache).forget(*write);
            }
        }
    }

    /// Record the write's effect as `view` tells it, with its commit time
    /// if this is its final view.
    fn record(&mut self, view: &View, commit_time: Option<u64>) {
        let (Kind::Write { write, effect }, Some(cache)) = (&self.kind, &self.causal.cache) else {
            return;
        };
        let mut cache = lock(cache);
        let effect = match effect {
            Effect::Args(effect) if view.outcome.is_ok() => Some(effect.clone()),
            // An abort writes nothing.
            Effect::Args(_) => Some(Vec::new()),
            Effect::Outcome(by) => by.effect(&view.outcome),
        };
        // A final view's effect replaces what the preliminary one said.
        cache.forget(*write);
        self.recorded = true;
        self.cached = match effect {
            Some(effect) => cache.record(*write, &effect, commit_time),
            None => false,
        };
    }

    fn overlay(
        &self,
        keys: &[Bytes],
        list: bool,
        time: u64,
        outcome: crate::Outcome,
    ) -> crate::Outcome {
        let (Some(cache), Ok(value)) = (&self.causal.cache, &outcome) else {
            return outcome;
        };
        let cache = lock(cache);
        let shown = |v: Option<Bytes>| v.map_or(Value::Nil, Value::Bytes);
        match (list, value) {
            (false, _) => match keys.first().and_then(|k| cache.overlay(k, time)) {
                Some(mine) => Ok(shown(mine)),
                None => outcome,
            },
            (true, Value::List(values)) if values.len() == keys.len() => Ok(Value::List(
                keys.iter()
                    .zip(values)
                    .map(|(k, v)| cache.overlay(k, time).map_or_else(|| v.clone(), shown))
                    .collect(),
            )),
            _ => outcome,
        }
    }

    fn read_ended(&mut self) {
        if let (Some(time), Some(cache)) = (self.in_flight.take(), &self.causal.cache) {
            let mut cache = lock(cache);
            cache.read_ended(time);
            cache.evict(self.causal.read_time());
        }
    }

    /// This call's write was superseded by a resend under the same request
    /// id: the resend's tracking goes on from where this one is.
    pub(crate) fn resume(&self) -> Track {
        let kind = match &self.kind {
            Kind::KeyRead { keys, list } => Kind::KeyRead {
                keys: keys.clone(),
                list: *list,
            },
            Kind::Read => Kind::Read,
            Kind::Opaque => Kind::Opaque,
            Kind::Write { write, effect } => Kind::Write {
                write: *write,
                effect: match effect {
                    Effect::Args(e) => Effect::Args(e.clone()),
                    Effect::Outcome(by) => Effect::Outcome(by.clone()),
                },
            },
        };
        Track {
            causal: self.causal.clone(),
            kind,
            acked_by_preliminary: false,
            acknowledged: true,
            in_flight: None,
            recorded: self.recorded,
            cached: self.cached,
            settled: false,
        }
    }
}

impl Drop for Track {
    fn drop(&mut self) {
        self.read_ended();
    }
}
