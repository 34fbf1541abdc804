//! A compact set of [`OpId`]s in the style of a dotted version vector.
//!
//! Per origin replica, a [`Dvv`] stores a contiguous counter `n` (all seqs
//! `1..=n` are present) plus a sorted set of *exception* seqs `> n + 1` that
//! are present out of order. Because seqs issued by one replica are mostly
//! delivered in order, the exception sets stay small and the whole structure
//! is roughly one counter per replica.
//!
//! The representation is kept normalized at all times (exceptions that
//! become contiguous are absorbed into the counter, empty origins are not
//! stored), so `==` compares the sets of ids. Iteration is deterministic, in
//! `(origin, seq)` order. Deserialization normalizes untrusted input.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Unbounded};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::id::{OpId, ReplicaId};

/// The seqs of `next..=last` not in `held` (ascending, all `>= next`
/// after the first step), walking `held` in order.
struct Gaps<I: Iterator> {
    next: u64,
    last: u64,
    held: std::iter::Peekable<I>,
}

impl<'a, I: Iterator<Item = &'a u64>> Iterator for Gaps<I> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        while self.next <= self.last && self.next != 0 {
            match self.held.peek() {
                Some(&&h) if h < self.next => {
                    self.held.next();
                }
                Some(&&h) if h == self.next => {
                    self.held.next();
                    self.next = self.next.checked_add(1).unwrap_or(0);
                }
                _ => {
                    let seq = self.next;
                    self.next = seq.checked_add(1).unwrap_or(0);
                    return Some(seq);
                }
            }
        }
        None
    }
}

/// The ids of one origin: `1..=counter` plus `exceptions` (all `> counter`).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
struct Entry {
    counter: u64,
    exceptions: BTreeSet<u64>,
}

static EMPTY_ENTRY: Entry = Entry {
    counter: 0,
    exceptions: BTreeSet::new(),
};

impl Entry {
    fn is_empty(&self) -> bool {
        self.counter == 0 && self.exceptions.is_empty()
    }

    fn contains(&self, seq: u64) -> bool {
        seq != 0 && (seq <= self.counter || self.exceptions.contains(&seq))
    }

    fn len(&self) -> u64 {
        self.counter.saturating_add(self.exceptions.len() as u64)
    }

    /// Moves exceptions that continue the contiguous range into the counter.
    fn absorb(&mut self) {
        while let Some(&first) = self.exceptions.first() {
            if Some(first) != self.counter.checked_add(1) {
                break;
            }
            self.exceptions.pop_first();
            self.counter = first;
        }
    }

    /// Drops exceptions covered by the counter (and seq 0), then absorbs.
    fn normalize(&mut self) {
        match self.counter.checked_add(1) {
            Some(next) => self.exceptions = self.exceptions.split_off(&next),
            None => self.exceptions.clear(),
        }
        self.absorb();
    }
}

/// A set of [`OpId`]s: per origin, a contiguous counter plus exceptions.
/// See the [module docs](self).
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
        if id.seq <= e.counter {
            return false;
        }
        // Here e.counter < id.seq <= u64::MAX, so the +1 cannot overflow.
        if id.seq == e.counter + 1 {
            e.counter = id.seq;
            e.absorb();
            true
        } else {
            e.exceptions.insert(id.seq)
        }
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: OpId) -> bool {
        self.entry(id.origin).contains(id.seq)
    }

    /// Removes `id`; returns `true` if it was present.
    ///
    /// Removing a seq inside the contiguous range lowers the counter to
    /// `seq - 1` and turns the seqs above it (up to the old counter) into
    /// exceptions, costing O(old counter - seq): meant for rare use on
    /// recent ids.
    pub fn remove(&mut self, id: OpId) -> bool {
        let Some(e) = self.entries.get_mut(&id.origin) else {
            return false;
        };
        let removed = if id.seq == 0 {
            false
        } else if id.seq <= e.counter {
            if id.seq < e.counter {
                e.exceptions.extend(id.seq + 1..=e.counter);
            }
            e.counter = id.seq - 1;
            true
        } else {
            e.exceptions.remove(&id.seq)
        };
        if e.is_empty() {
            self.entries.remove(&id.origin);
        }
        removed
    }

    /// Whether every id of `self` is in `other`.
    ///
    /// Per origin, compares the counters, then looks only at the exceptions
    /// of `self` beyond `other`'s counter. (Normalization guarantees that
    /// `other` lacks seq `counter + 1`, so a larger counter in `self` means
    /// `self` is not a subset.)
    pub fn is_subset(&self, other: &Dvv) -> bool {
        self.entries.iter().all(|(&origin, e)| {
            let o = other.entry(origin);
            e.counter <= o.counter
                && e.exceptions
                    .range((Excluded(o.counter), Unbounded))
                    .all(|s| o.exceptions.contains(s))
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
    /// peer (a huge counter is a huge range). Within `self`'s contiguous
    /// range the walk steps over runs of `other`'s exceptions in order
    /// rather than looking each seq up, so a range `other` mostly holds
    /// beyond a gap costs one pass over those exceptions.
    pub fn difference_iter<'a>(&'a self, other: &'a Dvv) -> impl Iterator<Item = OpId> + 'a {
        self.entries.iter().flat_map(move |(&origin, e)| {
            let o = other.entry(origin);
            let contiguous = Gaps {
                next: o.counter.checked_add(1).unwrap_or(0),
                last: e.counter,
                held: o
                    .exceptions
                    .range((Excluded(o.counter), Unbounded))
                    .peekable(),
            };
            let exceptions = e
                .exceptions
                .range((Excluded(o.counter), Unbounded))
                .copied()
                .filter(move |s| !o.exceptions.contains(s));
            contiguous
                .chain(exceptions)
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
            (1..=e.counter)
                .chain(e.exceptions.iter().copied())
                .map(move |seq| OpId { origin, seq })
        })
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
    /// over all origins.
    pub fn exceptions(&self) -> usize {
        self.entries.values().map(|e| e.exceptions.len()).sum()
    }

    /// Adds every id of `other` to `self`.
    pub fn union_with(&mut self, other: &Dvv) {
        for (&origin, o) in &other.entries {
            let e = self.entries.entry(origin).or_default();
            e.counter = e.counter.max(o.counter);
            e.exceptions.extend(o.exceptions.iter().copied());
            e.normalize();
        }
    }

    /// The set as `(origin, contiguous counter, sorted exception seqs)`
    /// records, one per origin with any id, in origin order.
    ///
    /// The records are normalized: every counter or exception list is
    /// non-empty, and every exception is `> counter + 1`, strictly
    /// increasing. [`Dvv::from_records`] rebuilds an equal set.
    pub fn to_records(&self) -> Vec<(ReplicaId, u64, Vec<u64>)> {
        self.entries
            .iter()
            .map(|(&origin, e)| (origin, e.counter, e.exceptions.iter().copied().collect()))
            .collect()
    }

    /// Builds a normalized set from `(origin, counter, exceptions)` records,
    /// each meaning the seqs `1..=counter` plus `exceptions` of `origin`.
    ///
    /// Accepts untrusted input: duplicated origins (their ids are merged),
    /// unsorted, duplicated, zero or counter-covered exception seqs and empty
    /// records are all accepted and normalized. Memory stays proportional to
    /// the input (a counter is never expanded into seqs).
    pub fn from_records(records: impl IntoIterator<Item = (ReplicaId, u64, Vec<u64>)>) -> Dvv {
        let mut dvv = Dvv::new();
        for (origin, counter, exceptions) in records {
            let e = dvv.entries.entry(origin).or_default();
            e.counter = e.counter.max(counter);
            e.exceptions.extend(exceptions);
        }
        dvv.entries.retain(|_, e| {
            e.normalize();
            !e.is_empty()
        });
        dvv
    }
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

/// Serialized form of one origin's entry.
#[derive(Serialize)]
struct WireEntryRef<'a> {
    origin: ReplicaId,
    counter: u64,
    exceptions: &'a BTreeSet<u64>,
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
        serializer.collect_seq(self.entries.iter().map(|(&origin, e)| WireEntryRef {
            origin,
            counter: e.counter,
            exceptions: &e.exceptions,
        }))
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
            assert!(e.exceptions.iter().all(|&s| s > e.counter + 1));
        }
    }

    #[test]
    fn insert_with_gaps_then_fill() {
        let mut d = set(&[(1, 1), (1, 2), (1, 4), (1, 5)]);
        assert_eq!((d.counter(ReplicaId(1)), d.exceptions()), (2, 2));
        assert_eq!(d.entries[&ReplicaId(1)].exceptions, BTreeSet::from([4, 5]));
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
        assert_eq!(
            d.entries[&ReplicaId(1)].exceptions,
            BTreeSet::from([4, 5, 8])
        );
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
