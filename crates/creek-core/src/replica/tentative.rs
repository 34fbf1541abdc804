//! The tentative list (Algorithm 1's `tentative`), sorted by
//! `(timestamp, id)`, with an index by id.
//!
//! Line 49 moves the tentative ops in a committed strong op's causal
//! context to the committed list. A context is a few runs of seqs per
//! origin ([`Dvv::intervals`]), so the index finds those ops by a range
//! lookup per run, in time proportional to the ops moved: scanning the
//! whole list per committed op made a replica that caught up with a long
//! tentative list (after a restart, tens of thousands of gossiped ops)
//! spend seconds per node-loop turn.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;

use rustc_hash::FxHashMap;

use crate::dvv::Dvv;
use crate::id::{OpId, ReplicaId, Timestamp};

/// The tentative list: read like the sorted set it is, changed only
/// through [`insert`](Tentative::insert) and
/// [`remove`](Tentative::remove), which keep the index.
#[derive(Default)]
pub(super) struct Tentative {
    order: BTreeSet<(Timestamp, OpId)>,
    by_id: BTreeMap<OpId, Timestamp>,
    /// Entries of each origin.
    per_origin: FxHashMap<ReplicaId, usize>,
}

impl Deref for Tentative {
    type Target = BTreeSet<(Timestamp, OpId)>;

    fn deref(&self) -> &Self::Target {
        &self.order
    }
}

impl Tentative {
    /// Add an entry; whether it was new.
    pub(super) fn insert(&mut self, entry: (Timestamp, OpId)) -> bool {
        let new = self.order.insert(entry);
        if new {
            let earlier = self.by_id.insert(entry.1, entry.0);
            debug_assert!(earlier.is_none(), "{} is tentative twice", entry.1);
            *self.per_origin.entry(entry.1.origin).or_default() += 1;
        }
        new
    }

    /// Remove an entry; whether it was there.
    pub(super) fn remove(&mut self, entry: &(Timestamp, OpId)) -> bool {
        let removed = self.order.remove(entry);
        if removed {
            self.by_id.remove(&entry.1);
            if let Some(n) = self.per_origin.get_mut(&entry.1.origin) {
                *n -= 1;
            }
        }
        removed
    }

    /// The index names every entry of the list and nothing else.
    pub(super) fn check(&self) -> Result<(), String> {
        if self.by_id.len() != self.order.len()
            || self
                .order
                .iter()
                .any(|(ts, id)| self.by_id.get(id) != Some(ts))
        {
            return Err(format!(
                "the tentative list's index ({} ids) does not match the list ({} entries)",
                self.by_id.len(),
                self.order.len()
            ));
        }
        let counted: usize = self.per_origin.values().sum();
        if counted != self.order.len() {
            return Err(format!(
                "the tentative list's counts per origin ({counted}) do not match the list ({})",
                self.order.len()
            ));
        }
        Ok(())
    }

    /// How many entries are ops of `origin`.
    pub(super) fn of_origin(&self, origin: ReplicaId) -> usize {
        self.per_origin.get(&origin).copied().unwrap_or(0)
    }

    /// The entries whose ids are in `ctx`, but `except`, in list order.
    pub(super) fn in_context(&self, ctx: &Dvv, except: OpId) -> Vec<(Timestamp, OpId)> {
        let mut found: Vec<(Timestamp, OpId)> = ctx
            .intervals()
            .flat_map(|(origin, start, end)| {
                self.by_id
                    .range(OpId::new(origin, start)..=OpId::new(origin, end))
                    .map(|(&id, &ts)| (ts, id))
            })
            .filter(|&(_, id)| id != except)
            .collect();
        found.sort_unstable();
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ReplicaId;

    fn id(origin: u16, seq: u64) -> OpId {
        OpId::new(ReplicaId(origin), seq)
    }

    fn ts(t: u64) -> Timestamp {
        Timestamp::new(t, 0)
    }

    /// The ops found through the index are those a scan of the whole list
    /// finds, in the same order.
    #[test]
    fn in_context_is_the_scan_of_the_whole_list() {
        let mut list = Tentative::default();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for origin in 1..=3 {
            for seq in 1..=200 {
                if next() % 3 != 0 {
                    assert!(list.insert((ts(next() % 1000), id(origin, seq))));
                }
            }
        }
        let removed = *list
            .iter()
            .nth(17)
            .expect("the list holds more than 17 ops");
        assert!(list.remove(&removed));
        assert!(!list.remove(&removed));
        list.check().expect("the index matches the list");
        for _ in 0..50 {
            let mut ctx = Dvv::new();
            for origin in 1..=4 {
                for seq in 1..=220 {
                    if next() % 4 != 0 || seq < next() % 150 {
                        ctx.insert(id(origin, seq));
                    }
                }
            }
            let except = id(2, next() % 200 + 1);
            let scan: Vec<_> = list
                .iter()
                .filter(|(_, i)| *i != except && ctx.contains(*i))
                .copied()
                .collect();
            assert_eq!(list.in_context(&ctx, except), scan);
        }
    }
}
