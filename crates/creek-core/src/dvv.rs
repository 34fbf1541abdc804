//! A compact set of [`OpId`]s in the style of a dotted version vector.
//!
//! Per origin replica, a [`Dvv`] stores a contiguous counter `n` (all seqs
//! `1..=n` are present) plus the *exception* seqs `> n + 1` present out of
//! order, kept as maximal runs of consecutive seqs. Seqs issued by one
//! replica are mostly delivered in order, so there are few exceptions; and
//! where an origin's seqs have a gap that is never filled (ids lost with a
//! replica's data and not voided, ids never issued), everything the origin
//! issues after it is one run, not one exception per id. The whole
//! structure stays about one counter per replica either way, and so does
//! every operation on it.
//!
//! The representation is kept normalized at all times (runs that become
//! contiguous with the counter are absorbed into it, adjacent runs are
//! merged, empty origins are not stored), so `==` compares the sets of ids.
//! Iteration is deterministic, in `(origin, seq)` order. Deserialization
//! normalizes untrusted input.

use std::collections::BTreeMap;

use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::id::{OpId, ReplicaId};

/// The ids of one origin: `1..=counter` plus the runs `start..=end` of
/// `runs` (keyed by start; every start `> counter + 1`; runs disjoint and
/// separated by at least one missing seq).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
struct Entry {
    counter: u64,
    runs: BTreeMap<u64, u64>,
}

static EMPTY_ENTRY: Entry = Entry {
    counter: 0,
    runs: BTreeMap::new(),
};

impl Entry {
    fn is_empty(&self) -> bool {
        self.counter == 0 && self.runs.is_empty()
    }

    /// The run holding `seq`, if any.
    fn run_of(&self, seq: u64) -> Option<(u64, u64)> {
        self.runs
            .range(..=seq)
            .next_back()
            .filter(|(_, &end)| seq <= end)
            .map(|(&start, &end)| (start, end))
    }

    fn contains(&self, seq: u64) -> bool {
        seq != 0 && (seq <= self.counter || self.run_of(seq).is_some())
    }

    /// Exception seqs (saturating).
    fn exceptions(&self) -> u64 {
        self.runs
            .iter()
            .fold(0u64, |acc, (&s, &e)| acc.saturating_add(e - s + 1))
    }

    fn len(&self) -> u64 {
        self.counter.saturating_add(self.exceptions())
    }

    /// Every seq as runs, the contiguous range first.
    fn intervals(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (self.counter > 0)
            .then_some((1, self.counter))
            .into_iter()
            .chain(self.runs.iter().map(|(&s, &e)| (s, e)))
    }

    /// Adds the seqs `start..=end` (`1 <= start <= end`) above the counter
    /// as a run, merging with the runs it touches, then absorbs.
    fn add_run(&mut self, start: u64, end: u64) {
        let start = start.max(self.counter.saturating_add(1));
        if start > end || self.counter == u64::MAX {
            return;
        }
        // The common case, a run past every run held and not touching the
        // last: no merging to look for.
        let past_last = match self.runs.last_key_value() {
            Some((_, &last_end)) => last_end.saturating_add(1) < start,
            None => true,
        };
        if past_last {
            self.runs.insert(start, end);
            self.absorb();
            return;
        }
        let (mut lo, mut hi) = (start, end);
        // A run ending at or after `start - 1` that starts at or before
        // `end + 1` touches the new one.
        let touching: Vec<(u64, u64)> = self
            .runs
            .range(..=end.saturating_add(1))
            .rev()
            .take_while(|(_, &e)| e.saturating_add(1) >= start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.runs.remove(&s);
            lo = lo.min(s);
            hi = hi.max(e);
        }
        self.runs.insert(lo, hi);
        self.absorb();
    }

    /// Moves a run that continues the contiguous range into the counter.
    fn absorb(&mut self) {
        if let Some((&start, &end)) = self.runs.first_key_value() {
            if Some(start) == self.counter.checked_add(1) {
                self.runs.pop_first();
                self.counter = end;
            }
        }
    }

    /// Drops the seqs of runs covered by the counter, then absorbs.
    fn normalize(&mut self) {
        let Some(next) = self.counter.checked_add(1) else {
            self.runs.clear();
            return;
        };
        let below: Vec<(u64, u64)> = self.runs.range(..next).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in below {
            self.runs.remove(&s);
            if e >= next {
                self.runs.insert(next, e);
            }
        }
        self.absorb();
    }

    /// The seqs of `self` not in `other`, as runs in order.
    fn minus(&self, other: &Entry) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for (mut s, e) in self.intervals() {
            // `other`'s intervals that may overlap `s..=e`, in order.
            let first = (other.counter >= s).then_some((1, other.counter));
            let from = other.run_of(s).map_or(s, |(start, _)| start);
            let runs = other.runs.range(from..=e).map(|(&a, &b)| (a, b));
            for (a, b) in first.into_iter().chain(runs) {
                if a > s {
                    out.push((s, (a - 1).min(e)));
                }
                if b >= e {
                    s = 0;
                    break;
                }
                s = s.max(b + 1);
            }
            if s != 0 {
                out.push((s, e));
            }
        }
        out
    }
}

/// One origin of a [`Dvv`] as its contiguous counter and its runs of
/// exception seqs, `(start, end)` inclusive (see [`Dvv::to_runs`]).
pub type RunRecord = (ReplicaId, u64, Vec<(u64, u64)>);

/// Whether `runs` are as [`Dvv::to_runs`] gives them after `counter`:
/// each non-empty, past the counter, increasing with a missing seq
/// between each two (one that starts right after the counter is absorbed
/// by [`Entry::absorb`]).
fn are_normal(counter: u64, runs: &[(u64, u64)]) -> bool {
    let mut after = counter; // the least seq a run may start at, minus one
    for &(s, e) in runs {
        if s <= after || s > e {
            return false;
        }
        after = e.saturating_add(1);
    }
    true
}

/// A set of [`OpId`]s: per origin, a contiguous counter plus runs of
/// exceptions. See the [module docs](self).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Dvv {
    entries: BTreeMap<ReplicaId, Entry>,
}

impl Dvv {
    /// The empty set.
    pub const fn new() -> Dvv {
        Dvv {
            entries: BTreeMap::new(),
        }
    }

    fn entry(&self, origin: ReplicaId) -> &Entry {
        self.entries.get(&origin).unwrap_or(&EMPTY_ENTRY)
    }

    /// Adds `id`. Returns `true` if it was not present before; returns
    /// `false` (and changes nothing) for an id already present or with
    /// `seq == 0`, which is not a valid seq.
    pub fn insert(&mut self, id: OpId) -> bool {
        if id.seq == 0 {
            return false;
        }
        let e = self.entries.entry(id.origin).or_default();
        if e.contains(id.seq) {
            return false;
        }
        e.add_run(id.seq, id.seq);
        true
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: OpId) -> bool {
        self.entry(id.origin).contains(id.seq)
    }

    /// Removes `id`; returns `true` if it was present.
    ///
    /// Removing a seq inside the contiguous range lowers the counter to
    /// `seq - 1` and turns the seqs above it (up to the old counter) into
    /// one run.
    pub fn remove(&mut self, id: OpId) -> bool {
        let Some(e) = self.entries.get_mut(&id.origin) else {
            return false;
        };
        let removed = if id.seq == 0 {
            false
        } else if id.seq <= e.counter {
            if id.seq < e.counter {
                // The first run starts above counter + 1: no merge.
                e.runs.insert(id.seq + 1, e.counter);
            }
            e.counter = id.seq - 1;
            true
        } else if let Some((start, end)) = e.run_of(id.seq) {
            e.runs.remove(&start);
            if start < id.seq {
                e.runs.insert(start, id.seq - 1);
            }
            if id.seq < end {
                e.runs.insert(id.seq + 1, end);
            }
            true
        } else {
            false
        };
        if e.is_empty() {
            self.entries.remove(&id.origin);
        }
        removed
    }

    /// Whether every id of `self` is in `other`.
    ///
    /// Per origin, compares the counters, then checks that each of
    /// `self`'s runs beyond `other`'s counter lies within one of `other`'s
    /// runs (they are maximal, so a run split over two is not covered).
    pub fn is_subset(&self, other: &Dvv) -> bool {
        self.entries.iter().all(|(&origin, e)| {
            let o = other.entry(origin);
            e.counter <= o.counter
                && e.runs.iter().all(|(&s, &end)| {
                    end <= o.counter
                        || o.run_of(s.max(o.counter + 1))
                            .is_some_and(|(_, oe)| end <= oe)
                })
        })
    }

    /// The ids in `self` that are not in `other`, in `(origin, seq)` order.
    ///
    /// Allocates one entry per id of the result; meant for differences that
    /// are known to be small (e.g. between replicas that are nearly in sync).
    pub fn difference(&self, other: &Dvv) -> Vec<OpId> {
        self.difference_iter(other).collect()
    }

    /// The ids in `self` that are not in `other`, lazily, in `(origin, seq)`
    /// order. Stop early to bound the work on a context from an untrusted
    /// peer (a huge counter is a huge range): the work before the first id
    /// is proportional to the runs of the two sets, not to their ids.
    pub fn difference_iter<'a>(&'a self, other: &'a Dvv) -> impl Iterator<Item = OpId> + 'a {
        self.entries.iter().flat_map(move |(&origin, e)| {
            e.minus(other.entry(origin))
                .into_iter()
                .flat_map(|(s, end)| s..=end)
                .map(move |seq| OpId { origin, seq })
        })
    }

    /// Number of ids in the set (saturating at `u64::MAX`).
    pub fn len(&self) -> u64 {
        self.entries
            .values()
            .fold(0u64, |acc, e| acc.saturating_add(e.len()))
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All ids, in `(origin, seq)` order.
    pub fn iter(&self) -> impl Iterator<Item = OpId> + '_ {
        self.entries.iter().flat_map(|(&origin, e)| {
            e.intervals()
                .flat_map(|(s, end)| s..=end)
                .map(move |seq| OpId { origin, seq })
        })
    }

    /// The set as `(origin, start, end)` runs of seqs (inclusive), the
    /// contiguous range of each origin first: about one per origin, so
    /// walking another collection by them costs per run, not per id.
    pub fn intervals(&self) -> impl Iterator<Item = (ReplicaId, u64, u64)> + '_ {
        self.entries
            .iter()
            .flat_map(|(&origin, e)| e.intervals().map(move |(s, end)| (origin, s, end)))
    }

    /// The contiguous part for `origin`: the largest `n` such that all seqs
    /// `1..=n` of `origin` are present (0 if seq 1 is absent).
    pub fn counter(&self, origin: ReplicaId) -> u64 {
        self.entry(origin).counter
    }

    /// Number of origins with a record.
    pub fn origins(&self) -> usize {
        self.entries.len()
    }

    /// Total number of exception seqs (ids not covered by the counters),
    /// over all origins (saturating).
    pub fn exceptions(&self) -> usize {
        self.entries.values().fold(0usize, |acc, e| {
            acc.saturating_add(usize::try_from(e.exceptions()).unwrap_or(usize::MAX))
        })
    }

    /// Adds every id of `other` to `self`.
    pub fn union_with(&mut self, other: &Dvv) {
        for (&origin, o) in &other.entries {
            let e = self.entries.entry(origin).or_default();
            if o.counter > e.counter {
                e.counter = o.counter;
                e.normalize();
            }
            for (&s, &end) in &o.runs {
                e.add_run(s, end);
            }
        }
    }

    /// The set as `(origin, contiguous counter, runs of exception seqs)`
    /// records, one per origin with any id, in origin order.
    ///
    /// The records are normalized: every counter or run list is non-empty,
    /// every run `(start, end)` has `counter + 1 < start <= end`, and runs
    /// are increasing with at least one missing seq between them.
    /// [`Dvv::from_runs`] rebuilds an equal set.
    pub fn to_runs(&self) -> Vec<RunRecord> {
        self.entries
            .iter()
            .map(|(&origin, e)| {
                let runs = e.runs.iter().map(|(&s, &end)| (s, end)).collect();
                (origin, e.counter, runs)
            })
            .collect()
    }

    /// Builds a normalized set from `(origin, counter, runs)` records, each
    /// meaning the seqs `1..=counter` plus every `start..=end` of `origin`.
    ///
    /// Accepts untrusted input: duplicated origins (their ids are merged),
    /// unsorted, overlapping, empty (`start > end`), zero or counter-covered
    /// runs and empty records are all accepted and normalized. Memory stays
    /// proportional to the input (a run is never expanded into seqs).
    pub fn from_runs(records: impl IntoIterator<Item = RunRecord>) -> Dvv {
        let mut dvv = Dvv::new();
        for (origin, counter, runs) in records {
            let e = dvv.entries.entry(origin).or_default();
            if counter > e.counter {
                e.counter = counter;
                e.normalize();
            }
            if e.runs.is_empty() && are_normal(e.counter, &runs) {
                // What the encoders produce: built in one pass, without a
                // search per run (a context can hold thousands of runs).
                e.runs = runs.into_iter().collect();
                e.absorb();
                continue;
            }
            for (s, end) in runs {
                if s <= end {
                    e.add_run(s.max(1), end);
                }
            }
        }
        dvv.entries.retain(|_, e| !e.is_empty());
        dvv
    }

    /// The set as `(origin, contiguous counter, sorted exception seqs)`
    /// records: [`Dvv::to_runs`] with the runs expanded into their seqs
    /// (for small sets and tests; the encodings use the runs).
    pub fn to_records(&self) -> Vec<(ReplicaId, u64, Vec<u64>)> {
        self.to_runs()
            .into_iter()
            .map(|(origin, counter, runs)| {
                let seqs = runs.into_iter().flat_map(|(s, e)| s..=e).collect();
                (origin, counter, seqs)
            })
            .collect()
    }

    /// Builds a normalized set from `(origin, counter, exceptions)` records,
    /// each meaning the seqs `1..=counter` plus `exceptions` of `origin`
    /// (untrusted input is normalized, as by [`Dvv::from_runs`]).
    pub fn from_records(records: impl IntoIterator<Item = (ReplicaId, u64, Vec<u64>)>) -> Dvv {
        Dvv::from_runs(records.into_iter().map(|(origin, counter, mut seqs)| {
            seqs.sort_unstable();
            seqs.dedup();
            (origin, counter, runs_of(&seqs))
        }))
    }
}

/// Sorted, distinct seqs as maximal runs.
fn runs_of(seqs: &[u64]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &x in seqs {
        match runs.last_mut() {
            Some((_, end)) if end.checked_add(1) == Some(x) => *end = x,
            _ => runs.push((x, x)),
        }
    }
    runs
}

impl FromIterator<OpId> for Dvv {
    fn from_iter<I: IntoIterator<Item = OpId>>(iter: I) -> Dvv {
        let mut dvv = Dvv::new();
        dvv.extend(iter);
        dvv
    }
}

impl Extend<OpId> for Dvv {
    fn extend<I: IntoIterator<Item = OpId>>(&mut self, iter: I) {
        for id in iter {
            self.insert(id);
        }
    }
}

/// Serialized form of one origin's entry: its exceptions as seqs.
struct WireEntryRef<'a> {
    origin: ReplicaId,
    entry: &'a Entry,
}

/// The exception seqs of an entry, serialized as a sequence.
struct ExceptionSeqs<'a>(&'a Entry);

impl Serialize for ExceptionSeqs<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        for (&s, &e) in &self.0.runs {
            for x in s..=e {
                seq.serialize_element(&x)?;
            }
        }
        seq.end()
    }
}

impl Serialize for WireEntryRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = serializer.serialize_struct("WireEntry", 3)?;
        st.serialize_field("origin", &self.origin)?;
        st.serialize_field("counter", &self.entry.counter)?;
        st.serialize_field("exceptions", &ExceptionSeqs(self.entry))?;
        st.end()
    }
}

/// Deserialized form of one origin's entry (same layout as [`WireEntryRef`]).
#[derive(Deserialize)]
struct WireEntry {
    origin: ReplicaId,
    counter: u64,
    exceptions: Vec<u64>,
}

/// Serialized as a sequence of `{origin, counter, exceptions}` records in
/// origin order.
impl Serialize for Dvv {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(
            self.entries
                .iter()
                .map(|(&origin, entry)| WireEntryRef { origin, entry }),
        )
    }
}

/// Accepts any sequence of records and normalizes it.
impl<'de> Deserialize<'de> for Dvv {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Dvv, D::Error> {
        let wire = Vec::<WireEntry>::deserialize(deserializer)?;
        Ok(Dvv::from_records(
            wire.into_iter()
                .map(|w| (w.origin, w.counter, w.exceptions)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use proptest::prelude::*;

    fn id(origin: u16, seq: u64) -> OpId {
        OpId::new(ReplicaId(origin), seq)
    }

    fn set(ids: &[(u16, u64)]) -> Dvv {
        ids.iter().map(|&(o, s)| id(o, s)).collect()
    }

    /// Checks the representation invariants that make `==` a set equality.
    fn assert_normalized(d: &Dvv) {
        for e in d.entries.values() {
            assert!(!e.is_empty());
            let mut floor = e.counter.saturating_add(1);
            for (&s, &end) in &e.runs {
                assert!(
                    s > floor && s <= end,
                    "runs {:?} over {}",
                    e.runs,
                    e.counter
                );
                floor = end.saturating_add(1);
            }
        }
    }

    fn exception_seqs(d: &Dvv, origin: u16) -> Vec<u64> {
        let e = &d.entries[&ReplicaId(origin)];
        e.runs.iter().flat_map(|(&s, &end)| s..=end).collect()
    }

    fn runs(d: &Dvv) -> usize {
        d.entries.values().map(|e| e.runs.len()).sum()
    }

    #[test]
    fn a_gap_never_filled_keeps_the_set_small() {
        // Seqs 101..=200 never arrive; the 100,000 after them are one run.
        let mut d: Dvv = (1..=100).map(|s| id(1, s)).collect();
        d.extend((201..=100_200).map(|s| id(1, s)));
        assert_eq!(
            (d.counter(ReplicaId(1)), d.exceptions(), runs(&d)),
            (100, 100_000, 1)
        );
        assert_eq!(d.to_runs(), vec![(ReplicaId(1), 100, vec![(201, 100_200)])]);
        let mut e = d.clone();
        assert!(e.remove(id(1, 5000)) && runs(&e) == 2 && !e.contains(id(1, 5000)));
        assert!(e.is_subset(&d) && !d.is_subset(&e));
        assert_eq!(d.difference(&e), vec![id(1, 5000)]);
        assert_eq!(e.difference_iter(&d).next(), None);
        // The gap filled: everything is contiguous.
        d.extend((101..=200).map(|s| id(1, s)));
        assert_eq!((d.counter(ReplicaId(1)), runs(&d)), (100_200, 0));
    }

    #[test]
    fn from_runs_normalizes_untrusted_runs() {
        let d = Dvv::from_runs(vec![
            (
                ReplicaId(1),
                3,
                vec![(9, 7), (0, 2), (5, 6), (6, 8), (12, 12)],
            ),
            (ReplicaId(1), 0, vec![(4, 4), (13, 20)]),
            (ReplicaId(2), 0, vec![(0, 0)]),
        ]);
        assert_normalized(&d);
        assert_eq!(d.to_runs(), vec![(ReplicaId(1), 8, vec![(12, 20)])]);
        assert_eq!(Dvv::from_runs(d.to_runs()), d);
    }

    /// Runs as encoders give them are built in one pass; the result is the
    /// set of their seqs, as inserting them one by one gives it, also when
    /// the first run continues the counter (it is absorbed) or two runs
    /// touch (that input takes the merging path).
    #[test]
    fn from_runs_in_encoder_order_equals_the_seqs_inserted() {
        let cases: Vec<(u64, Vec<(u64, u64)>)> = vec![
            (3, vec![(5, 6), (8, 8), (10, 2000)]),
            (3, vec![(4, 6), (8, 9)]),
            (0, vec![(1, 1), (3, 3), (5, 5)]),
            (3, vec![(5, 6), (7, 9)]),
            (0, (1..=500).map(|k| (2 * k, 2 * k)).collect()),
        ];
        for (counter, runs) in cases {
            let fast = Dvv::from_runs(vec![(ReplicaId(1), counter, runs.clone())]);
            assert_normalized(&fast);
            let seqs = (1..=counter).chain(runs.iter().flat_map(|&(s, e)| s..=e));
            let slow: Dvv = seqs.map(|q| id(1, q)).collect();
            assert_eq!(fast, slow, "counter {counter}, runs {runs:?}");
        }
    }

    #[test]
    fn insert_with_gaps_then_fill() {
        let mut d = set(&[(1, 1), (1, 2), (1, 4), (1, 5)]);
        assert_eq!((d.counter(ReplicaId(1)), d.exceptions()), (2, 2));
        assert_eq!(exception_seqs(&d, 1), vec![4, 5]);
        assert!(d.insert(id(1, 3)));
        assert_eq!((d.counter(ReplicaId(1)), d.exceptions()), (5, 0));
        assert!(!d.insert(id(1, 3)) && !d.insert(id(1, 0)));
        assert!(d.insert(id(1, 7)) && !d.insert(id(1, 7)));
        assert_eq!((d.len(), d.counter(ReplicaId(9))), (6, 0));
        assert!(d.contains(id(1, 3)) && d.contains(id(1, 7)));
        assert!(!d.contains(id(1, 6)) && !d.contains(id(1, 0)) && !d.contains(id(2, 1)));
        assert_normalized(&d);
    }

    #[test]
    fn remove_inside_contiguous_range() {
        let mut d = set(&[(1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (1, 8)]);
        assert!(d.remove(id(1, 3)));
        assert_eq!(d.counter(ReplicaId(1)), 2);
        assert_eq!(exception_seqs(&d, 1), vec![4, 5, 8]);
        assert!(!d.remove(id(1, 3)) && !d.remove(id(1, 0)) && !d.remove(id(2, 1)));
        assert!(d.remove(id(1, 8)) && d.remove(id(1, 5)));
        assert!(d.insert(id(1, 3)));
        assert_eq!(d, set(&[(1, 1), (1, 2), (1, 3), (1, 4)]));
        for s in 1..=4 {
            assert!(d.remove(id(1, s)));
        }
        assert!(d.is_empty() && d.entries.is_empty());
        assert_eq!(d, Dvv::new());
    }

    #[test]
    fn subset_with_exceptions_on_both_sides() {
        let a = set(&[(1, 1), (1, 2), (1, 5), (2, 3)]);
        let b = set(&[(1, 1), (1, 2), (1, 3), (1, 5), (1, 6), (2, 1), (2, 3)]);
        assert!(a.is_subset(&b) && !b.is_subset(&a) && a.is_subset(&a));
        let c = set(&[(1, 1), (1, 2), (1, 3)]);
        let d = set(&[(1, 1), (1, 3), (1, 4), (1, 9)]);
        assert!(!c.is_subset(&d) && !d.is_subset(&c));
        assert!(Dvv::new().is_subset(&a) && !a.is_subset(&Dvv::new()));
    }

    #[test]
    fn difference_len_iter_union() {
        let a = set(&[(1, 1), (1, 2), (1, 3), (1, 7), (2, 2)]);
        let b = set(&[(1, 1), (1, 3), (2, 1)]);
        assert_eq!(a.difference(&b), vec![id(1, 2), id(1, 7), id(2, 2)]);
        assert_eq!(b.difference(&a), vec![id(2, 1)]);
        assert_eq!(a.len(), 5);
        assert!(!a.is_empty() && Dvv::new().is_empty());
        let ids: Vec<OpId> = a.iter().collect();
        assert_eq!(ids, vec![id(1, 1), id(1, 2), id(1, 3), id(1, 7), id(2, 2)]);
        let mut u = b.clone();
        u.union_with(&a);
        assert_eq!(u, a.iter().chain(b.iter()).collect::<Dvv>());
        assert_eq!((u.counter(ReplicaId(2)), u.exceptions()), (2, 1));
        assert_normalized(&u);
    }

    #[test]
    fn from_records_normalizes_untrusted_input() {
        let w = |origin, counter, exceptions: Vec<u64>| (ReplicaId(origin), counter, exceptions);
        let d = Dvv::from_records(vec![
            w(1, 2, vec![0, 1, 3, 4, 9]),
            w(2, 0, vec![]),
            w(1, 1, vec![6]),
            w(3, u64::MAX, vec![5, u64::MAX]),
        ]);
        assert_normalized(&d);
        assert_eq!(d.counter(ReplicaId(1)), 4);
        assert_eq!(d.exceptions(), 2);
        assert_eq!(d.len(), u64::MAX);
        assert!(!d.entries.contains_key(&ReplicaId(2)));
        assert_eq!(
            d.to_records(),
            vec![w(1, 4, vec![6, 9]), w(3, u64::MAX, vec![])]
        );
        assert_eq!(Dvv::from_records(d.to_records()), d);
        assert_eq!(Dvv::new().to_records(), vec![]);
    }

    type Model = BTreeSet<OpId>;

    /// Random insert (mostly) / remove steps; small seqs are favoured so
    /// that counters grow beyond 0 and sets often nest.
    fn ops() -> impl Strategy<Value = Vec<(bool, u16, u64)>> {
        let seq = prop_oneof![0u64..6, 0u64..40];
        prop::collection::vec((prop::bool::weighted(0.7), 0u16..3, seq), 0..150)
    }

    /// Applies `ops` to both representations, checking every step.
    fn build(ops: &[(bool, u16, u64)]) -> Result<(Dvv, Model), TestCaseError> {
        let (mut d, mut m) = (Dvv::new(), Model::new());
        for &(ins, o, s) in ops {
            let i = id(o, s);
            if ins {
                prop_assert_eq!(d.insert(i), s != 0 && m.insert(i));
            } else {
                prop_assert_eq!(d.remove(i), m.remove(&i));
            }
        }
        check(&d, &m)?;
        Ok((d, m))
    }

    fn check(d: &Dvv, m: &Model) -> Result<(), TestCaseError> {
        assert_normalized(d);
        prop_assert_eq!(d.len(), m.len() as u64);
        prop_assert_eq!(d.is_empty(), m.is_empty());
        prop_assert_eq!(
            d.iter().collect::<Vec<_>>(),
            m.iter().copied().collect::<Vec<_>>()
        );
        let mut counters = 0;
        for o in 0..4 {
            for s in 0..42 {
                prop_assert_eq!(d.contains(id(o, s)), m.contains(&id(o, s)));
            }
            let c = (1..).take_while(|&s| m.contains(&id(o, s))).count() as u64;
            prop_assert_eq!(d.counter(ReplicaId(o)), c);
            counters += c;
        }
        prop_assert_eq!(d.exceptions() as u64, m.len() as u64 - counters);
        // Records round-trip and are normalized.
        let records = d.to_records();
        for (_, counter, exceptions) in &records {
            prop_assert!(*counter > 0 || !exceptions.is_empty());
            prop_assert!(exceptions.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(exceptions.iter().all(|&s| s > counter + 1));
        }
        prop_assert_eq!(&Dvv::from_records(records), d);
        prop_assert_eq!(&Dvv::from_runs(d.to_runs()), d);
        // Normalization: any construction of the same set is `==`.
        prop_assert_eq!(d, &m.iter().rev().copied().collect::<Dvv>());
        Ok(())
    }

    proptest! {
        #[test]
        fn matches_btreeset_model(
            a_ops in ops(),
            b_ops in ops(),
            drops in prop::collection::vec((0u16..3, 0u64..40), 0..6),
        ) {
            let (a, ma) = build(&a_ops)?;
            let (b, mb) = build(&b_ops)?;
            // `c` is a subset of `a` built by removals from a copy of it.
            let (mut c, mut mc) = (a.clone(), ma.clone());
            for &(o, s) in &drops {
                prop_assert_eq!(c.remove(id(o, s)), mc.remove(&id(o, s)));
            }
            check(&c, &mc)?;
            let sets = [(&a, &ma), (&b, &mb), (&c, &mc)];
            for (x, mx) in sets {
                for (y, my) in sets {
                    prop_assert_eq!(x.is_subset(y), mx.is_subset(my));
                    let diff: Vec<OpId> = mx.difference(my).copied().collect();
                    prop_assert_eq!(x.difference(y), diff);
                    let mut u = x.clone();
                    u.union_with(y);
                    check(&u, &mx.union(my).copied().collect())?;
                    prop_assert_eq!(x == y, mx == my);
                }
            }
        }
    }
}
