//! A small ordered map on a sorted `VecDeque`, for the per-key version and
//! reader sets. These are almost always tiny, grow at the back (ops arrive
//! mostly in order) and shrink at the front (ops become final in order), so a
//! deque beats a B-tree: no allocation when empty, one contiguous buffer
//! otherwise, O(1) at both ends.

use std::collections::VecDeque;

/// Entries sorted by position, positions unique.
#[derive(Debug)]
pub(crate) struct SortedDeque<P, V> {
    items: VecDeque<(P, V)>,
}

impl<P, V> Default for SortedDeque<P, V> {
    fn default() -> Self {
        SortedDeque {
            items: VecDeque::new(),
        }
    }
}

impl<P: Ord + Copy, V> SortedDeque<P, V> {
    fn find(&self, pos: &P) -> Result<usize, usize> {
        self.items.binary_search_by(|(p, _)| p.cmp(pos))
    }

    /// Insert, returning the value previously at `pos`.
    pub(crate) fn insert(&mut self, pos: P, value: V) -> Option<V> {
        match self.find(&pos) {
            Ok(i) => self
                .items
                .get_mut(i)
                .map(|slot| std::mem::replace(&mut slot.1, value)),
            Err(i) if i == self.items.len() => {
                self.items.push_back((pos, value));
                None
            }
            Err(0) => {
                self.items.push_front((pos, value));
                None
            }
            Err(i) => {
                self.items.insert(i, (pos, value));
                None
            }
        }
    }

    /// Remove the entry at `pos`. An emptied deque gives its buffer back:
    /// most keys are written once or rarely, and an empty buffer kept per key
    /// would cost hundreds of bytes for every key ever written.
    pub(crate) fn remove(&mut self, pos: &P) -> Option<V> {
        let removed = match self.find(pos) {
            Ok(0) => self.items.pop_front().map(|(_, v)| v),
            Ok(i) => self.items.remove(i).map(|(_, v)| v),
            Err(_) => None,
        };
        if self.items.is_empty() && self.items.capacity() > 0 {
            self.items = VecDeque::new();
        }
        removed
    }

    /// Remove the first entry (giving an emptied buffer back, as
    /// [`Self::remove`] does).
    pub(crate) fn pop_first(&mut self) -> Option<(P, V)> {
        let first = self.items.pop_front();
        if self.items.is_empty() && self.items.capacity() > 0 {
            self.items = VecDeque::new();
        }
        first
    }

    /// The position of the first entry.
    pub(crate) fn first_key(&self) -> Option<P> {
        self.items.front().map(|(p, _)| *p)
    }

    /// The position of the last entry.
    pub(crate) fn last_key(&self) -> Option<P> {
        self.items.back().map(|(p, _)| *p)
    }

    /// Every entry, in position order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &(P, V)> {
        self.items.iter()
    }

    /// The value at `pos`.
    pub(crate) fn get(&self, pos: &P) -> Option<&V> {
        self.find(pos)
            .ok()
            .and_then(|i| self.items.get(i))
            .map(|(_, v)| v)
    }

    /// Whether `pos` holds an entry.
    pub(crate) fn contains_key(&self, pos: &P) -> bool {
        self.find(pos).is_ok()
    }

    /// The last entry strictly before `pos`.
    pub(crate) fn last_before(&self, pos: P) -> Option<&V> {
        let i = self.items.partition_point(|(p, _)| *p < pos);
        i.checked_sub(1)
            .and_then(|i| self.items.get(i))
            .map(|(_, v)| v)
    }

    /// The last entry.
    pub(crate) fn last(&self) -> Option<&V> {
        self.items.back().map(|(_, v)| v)
    }

    /// The position of the first entry strictly after `pos`.
    pub(crate) fn first_after(&self, pos: P) -> Option<P> {
        let i = self.items.partition_point(|(p, _)| *p <= pos);
        self.items.get(i).map(|(p, _)| *p)
    }

    /// Entries strictly after `lo` and, when `hi` is given, up to and
    /// including `hi`.
    pub(crate) fn after_up_to(&self, lo: P, hi: Option<P>) -> impl Iterator<Item = &(P, V)> {
        let start = self.items.partition_point(|(p, _)| *p <= lo);
        let end = match hi {
            Some(h) => self.items.partition_point(|(p, _)| *p <= h),
            None => self.items.len(),
        };
        self.items.range(start..end.max(start))
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::SortedDeque;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        #[test]
        fn behaves_like_a_btreemap(ops in proptest::collection::vec((0u8..4, 0u16..50, 0u16..50), 0..200)) {
            let mut d: SortedDeque<u16, u16> = SortedDeque::default();
            let mut m: BTreeMap<u16, u16> = BTreeMap::new();
            for (kind, a, b) in ops {
                match kind {
                    0 => prop_assert_eq!(d.insert(a, b), m.insert(a, b)),
                    1 => prop_assert_eq!(d.remove(&a), m.remove(&a)),
                    2 => prop_assert_eq!(d.pop_first(), m.pop_first()),
                    _ => {
                        prop_assert_eq!(d.get(&a), m.get(&a));
                        prop_assert_eq!(d.last_before(a), m.range(..a).next_back().map(|(_, v)| v));
                        prop_assert_eq!(d.first_after(a), m.range(a + 1..).next().map(|(k, _)| *k));
                        let got: Vec<(u16, u16)> = d.after_up_to(a, Some(b)).copied().collect();
                        let want: Vec<(u16, u16)> = if b > a { m.range(a + 1..=b).map(|(k, v)| (*k, *v)).collect() } else { vec![] };
                        prop_assert_eq!(got, want);
                        let all: Vec<(u16, u16)> = d.after_up_to(a, None).copied().collect();
                        let want_all: Vec<(u16, u16)> = m.range(a + 1..).map(|(k, v)| (*k, *v)).collect();
                        prop_assert_eq!(all, want_all);
                    }
                }
                prop_assert_eq!(d.first_key(), m.keys().next().copied());
                prop_assert_eq!(d.last_key(), m.keys().next_back().copied());
                let all: Vec<(u16, u16)> = d.iter().copied().collect();
                prop_assert_eq!(all, m.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
                prop_assert_eq!(d.len(), m.len());
                prop_assert_eq!(d.is_empty(), m.is_empty());
                if d.is_empty() {
                    prop_assert_eq!(d.items.capacity(), 0);
                }
            }
        }
    }
}
