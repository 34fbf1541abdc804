//! The receive side: per-origin delivered counters and the bounded buffer of
//! ops that arrived before an earlier op of their origin.

use std::collections::BTreeMap;
use std::sync::Arc;

use creek_core::{Op, OpId, ReplicaId};

/// What became of one received op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Received {
    /// Delivered, possibly with buffered successors after it.
    Delivered,
    /// Kept until the ops before it arrive.
    Buffered,
    /// Already delivered or already buffered.
    Duplicate,
    /// Refused: seq 0 is never valid.
    Invalid,
    /// Dropped to keep the buffer bounded (the incoming op, or, when the
    /// incoming op is older, the newest buffered op of its origin).
    Overflow,
}

/// Per-origin FIFO delivery. Invariants: every buffered `(o, s)` has
/// `s > counter(o) + 1` (an op that becomes next is delivered at once), and
/// the buffer holds at most `buffer_max` ops.
///
/// An origin may have a *loose range* (`open`): ops of it in
/// `base + 1 ..= through` arrive in any order and are delivered at once,
/// each once. An origin rebuilt from a peer's checkpoint opens one for the
/// ops it issued before it lost its data: some of them may never come (no
/// replica kept them), and the FIFO must not wait for them.
#[derive(Debug)]
pub(crate) struct Fifo {
    /// Per origin, every seq `1..=counter` is delivered (outside a loose
    /// range).
    delivered: BTreeMap<ReplicaId, u64>,
    /// Per origin, a loose range `(base, through]` and the seqs delivered
    /// in it.
    loose: BTreeMap<ReplicaId, Loose>,
    /// Ops waiting for an earlier op of their origin.
    buffer: BTreeMap<OpId, Arc<Op>>,
    /// Ids past their origin's counter (outside a loose range) that need
    /// not come: voided by the committed order, or held here already (a
    /// restart found them past a gap). Delivery goes past them.
    skip: std::collections::BTreeSet<OpId>,
    /// The bound on `buffer`.
    buffer_max: usize,
}

/// A loose range of one origin.
#[derive(Debug, Default)]
struct Loose {
    base: u64,
    through: u64,
    got: std::collections::BTreeSet<u64>,
    /// No more of the range is expected: it counts as held in digests.
    closed: bool,
}

impl Loose {
    fn covers(&self, seq: u64) -> bool {
        seq > self.base && seq <= self.through
    }
}

impl Fifo {
    pub(crate) fn new(buffer_max: usize) -> Self {
        Fifo {
            loose: BTreeMap::new(),
            delivered: BTreeMap::new(),
            buffer: BTreeMap::new(),
            skip: std::collections::BTreeSet::new(),
            buffer_max,
        }
    }

    /// The contiguous delivered counter of `origin`.
    pub(crate) fn counter(&self, origin: ReplicaId) -> u64 {
        self.delivered.get(&origin).copied().unwrap_or(0)
    }

    /// `(origin, counter)` for every origin with a delivered op, by origin.
    pub(crate) fn counters(&self) -> impl Iterator<Item = (ReplicaId, u64)> + '_ {
        self.delivered.iter().map(|(&o, &c)| (o, c))
    }

    pub(crate) fn has_delivered(&self, id: OpId) -> bool {
        match self.loose.get(&id.origin) {
            Some(l) if l.covers(id.seq) => l.got.contains(&id.seq),
            _ => id.seq != 0 && id.seq <= self.counter(id.origin),
        }
    }

    /// Whether `id` needs not come: delivered, or held past a gap (voided,
    /// or found held at a restart or in an installed checkpoint).
    pub(crate) fn counts_held(&self, id: OpId) -> bool {
        self.has_delivered(id) || self.skip.contains(&id)
    }

    /// The counter a digest reports for `origin`: while a loose range is
    /// open, only up to its first missing op (peers keep what lies above
    /// for this replica); else the counter.
    pub(crate) fn held_counter(&self, origin: ReplicaId) -> u64 {
        match self.loose.get(&origin) {
            Some(l) if !l.closed => {
                let mut c = l.base;
                while c < l.through && l.got.contains(&(c + 1)) {
                    c += 1;
                }
                if c == l.through {
                    self.counter(origin)
                } else {
                    c
                }
            }
            _ => self.counter(origin),
        }
    }

    /// The seqs of `origin`'s open loose range not received, at most `max`.
    pub(crate) fn loose_missing(&self, origin: ReplicaId, max: usize) -> Vec<OpId> {
        match self.loose.get(&origin) {
            Some(l) if !l.closed => ((l.base + 1)..=l.through)
                .filter(|s| !l.got.contains(s))
                .take(max)
                .map(|s| OpId::new(origin, s))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Stop expecting the rest of `origin`'s loose range (late arrivals are
    /// still taken).
    pub(crate) fn close(&mut self, origin: ReplicaId) {
        if let Some(l) = self.loose.get_mut(&origin) {
            l.closed = true;
        }
    }

    /// Count `id` as delivered without its payload (it was voided): in its
    /// origin's loose range, as got; past its origin's counter (a replica
    /// that restarted before its peers' checkpoints covered the void, so
    /// its counter stops at the gap), as skipped — ops buffered after it
    /// are delivered into `deliver`. One at or below the counter is
    /// delivered already.
    pub(crate) fn void(&mut self, id: OpId, deliver: &mut Vec<Arc<Op>>) {
        if let Some(l) = self.loose.get_mut(&id.origin) {
            if l.covers(id.seq) {
                l.got.insert(id.seq);
                return;
            }
        }
        if id.seq > self.counter(id.origin) {
            self.buffer.remove(&id);
            self.skip.insert(id);
            self.drain(id.origin, deliver);
        }
    }

    /// `id`, past its origin's counter, is held here already (found at a
    /// restart past a gap): it need not come again. A copy buffered is
    /// delivered into `deliver` once the gap before it fills.
    pub(crate) fn held_ahead(&mut self, id: OpId, deliver: &mut Vec<Arc<Op>>) {
        if id.seq > self.counter(id.origin) && !self.is_loose(id) {
            self.skip.insert(id);
            self.drain(id.origin, deliver);
        }
    }

    /// Whether `id` lies in its origin's loose range.
    pub(crate) fn is_loose(&self, id: OpId) -> bool {
        self.loose.get(&id.origin).is_some_and(|l| l.covers(id.seq))
    }

    /// Ops of `origin` after `base` and up to `through` may arrive in any
    /// order from now on (see the type's docs): those buffered are
    /// delivered now, into `deliver`, and the counter moves to `through` if
    /// it was below. `held` says which of them are delivered already.
    /// Opening again extends the range.
    pub(crate) fn open(
        &mut self,
        origin: ReplicaId,
        base: u64,
        through: u64,
        held: impl Fn(u64) -> bool,
        deliver: &mut Vec<Arc<Op>>,
    ) {
        let counter = self.counter(origin);
        let base = base.min(counter);
        if through <= base {
            return;
        }
        let extended = self.loose.contains_key(&origin);
        // Ids held ahead (or voided) in the range count as got.
        let skipped: Vec<OpId> = self
            .skip
            .range(OpId::new(origin, base + 1)..=OpId::new(origin, through))
            .copied()
            .collect();
        for k in &skipped {
            self.skip.remove(k);
        }
        let l = self.loose.entry(origin).or_insert_with(|| Loose {
            base,
            ..Loose::default()
        });
        l.got.extend(skipped.iter().map(|k| k.seq));
        if through <= l.through {
            return;
        }
        let already = (l.through.max(l.base) + 1)..=through.min(counter);
        if extended {
            // Past the old range, up to the counter: delivered in order
            // (held, or committed and collected since).
            l.got.extend(already);
        } else {
            l.got.extend(already.filter(|seq| held(*seq)));
        }
        l.through = through;
        let waiting: Vec<OpId> = self
            .buffer
            .range(OpId::new(origin, 0)..=OpId::new(origin, through))
            .map(|(&k, _)| k)
            .collect();
        for k in waiting {
            if let Some(op) = self.buffer.remove(&k) {
                l.got.insert(k.seq);
                deliver.push(op);
            }
        }
        self.delivered.insert(origin, through.max(counter));
        self.drain(origin, deliver);
    }

    pub(crate) fn buffered(&self, id: OpId) -> Option<&Arc<Op>> {
        self.buffer.get(&id)
    }

    pub(crate) fn buffered_ids(&self) -> impl Iterator<Item = OpId> + '_ {
        self.buffer.keys().copied()
    }

    pub(crate) fn buffered_len(&self) -> usize {
        self.buffer.len()
    }

    /// Resumes `origin` at `counter` after a restart (the counter only
    /// increases).
    pub(crate) fn resume(&mut self, origin: ReplicaId, counter: u64) {
        if counter > self.counter(origin) {
            self.delivered.insert(origin, counter);
        }
    }

    /// Marks this replica's own op as delivered. Own seqs are contiguous by
    /// contract; a gap is jumped over (the counter only increases). Returns
    /// `false` for an op at or below the counter.
    pub(crate) fn deliver_own(&mut self, id: OpId) -> bool {
        if id.seq <= self.counter(id.origin) {
            return false;
        }
        self.delivered.insert(id.origin, id.seq);
        // A remote copy buffered earlier (there should be none) is obsolete.
        let stale: Vec<OpId> = self
            .buffer
            .range(OpId::new(id.origin, 0)..=id)
            .map(|(&k, _)| k)
            .collect();
        for k in stale {
            self.buffer.remove(&k);
        }
        true
    }

    /// Receives a remote op. Ops that become deliverable are appended to
    /// `deliver` in order (the op itself, then buffered successors).
    pub(crate) fn receive(&mut self, op: Arc<Op>, deliver: &mut Vec<Arc<Op>>) -> Received {
        let id = op.id;
        if id.seq == 0 {
            return Received::Invalid;
        }
        if let Some(l) = self.loose.get_mut(&id.origin) {
            if l.covers(id.seq) {
                if !l.got.insert(id.seq) {
                    return Received::Duplicate;
                }
                deliver.push(op);
                return Received::Delivered;
            }
        }
        let counter = self.counter(id.origin);
        if id.seq <= counter || self.buffer.contains_key(&id) || self.skip.contains(&id) {
            return Received::Duplicate;
        }
        if id.seq - 1 == counter {
            self.delivered.insert(id.origin, id.seq);
            deliver.push(op);
            self.drain(id.origin, deliver);
            return Received::Delivered;
        }
        // Out of order: seq >= counter + 2. The ops from counter + 2 up to
        // this one would all have to be buffered before it can be delivered.
        let needed = id.seq - counter - 1;
        if usize::try_from(needed).map_or(true, |n| n > self.buffer_max) {
            return Received::Overflow;
        }
        if self.buffer.len() >= self.buffer_max {
            // Full: keep the older of the incoming op and the newest buffered
            // op of the same origin; drop the incoming op otherwise.
            let newest = self
                .buffer
                .range(id..=OpId::new(id.origin, u64::MAX))
                .next_back()
                .map(|(&k, _)| k);
            match newest {
                Some(k) => {
                    self.buffer.remove(&k);
                }
                None => return Received::Overflow,
            }
            self.buffer.insert(id, op);
            return Received::Overflow;
        }
        self.buffer.insert(id, op);
        Received::Buffered
    }

    /// Delivers the buffered ops of `origin` that now follow its counter.
    fn drain(&mut self, origin: ReplicaId, deliver: &mut Vec<Arc<Op>>) {
        loop {
            let c = self.counter(origin);
            let Some(next) = c.checked_add(1) else { return };
            let id = OpId::new(origin, next);
            if self.skip.remove(&id) {
                self.delivered.insert(origin, next);
                deliver.extend(self.buffer.remove(&id));
                continue;
            }
            let Some(op) = self.buffer.remove(&id) else {
                return;
            };
            self.delivered.insert(origin, next);
            deliver.push(op);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::op;

    fn seqs(ops: &[Arc<Op>]) -> Vec<u64> {
        ops.iter().map(|o| o.id.seq).collect()
    }

    #[test]
    fn delivers_in_order_and_drains_the_buffer() {
        let mut f = Fifo::new(10);
        let mut d = Vec::new();
        assert_eq!(f.receive(op(1, 3), &mut d), Received::Buffered);
        assert_eq!(f.receive(op(1, 2), &mut d), Received::Buffered);
        assert_eq!(f.receive(op(1, 2), &mut d), Received::Duplicate);
        assert!(d.is_empty());
        assert_eq!(f.receive(op(1, 1), &mut d), Received::Delivered);
        assert_eq!(seqs(&d), [1, 2, 3]);
        assert_eq!(f.counter(ReplicaId(1)), 3);
        assert_eq!(f.buffered_len(), 0);
        assert_eq!(f.receive(op(1, 2), &mut d), Received::Duplicate);
        assert_eq!(f.receive(op(1, 0), &mut d), Received::Invalid);
    }

    #[test]
    fn buffer_is_bounded_and_prefers_older_ops() {
        let mut f = Fifo::new(2);
        let mut d = Vec::new();
        assert_eq!(f.receive(op(1, 2), &mut d), Received::Buffered);
        // Beyond the distance bound.
        assert_eq!(f.receive(op(1, 4), &mut d), Received::Overflow);
        assert_eq!(f.receive(op(1, u64::MAX), &mut d), Received::Overflow);
        assert_eq!(f.receive(op(2, 3), &mut d), Received::Buffered);
        // Full; origin 3 has nothing buffered: the incoming op is dropped.
        assert_eq!(f.receive(op(3, 2), &mut d), Received::Overflow);
        assert_eq!(f.buffered_len(), 2);
        assert!(f.buffered(OpId::new(ReplicaId(3), 2)).is_none());
        // Full; origin 2 has a newer op buffered: it makes room.
        assert_eq!(f.receive(op(2, 2), &mut d), Received::Overflow);
        assert!(f.buffered(OpId::new(ReplicaId(2), 3)).is_none());
        assert!(f.buffered(OpId::new(ReplicaId(2), 2)).is_some());
        assert_eq!(f.buffered_len(), 2);
        assert_eq!(f.receive(op(2, 1), &mut d), Received::Delivered);
        assert_eq!(seqs(&d), [1, 2]);
    }

    #[test]
    fn own_ops_advance_the_counter() {
        let mut f = Fifo::new(4);
        let mut d = Vec::new();
        assert!(f.deliver_own(OpId::new(ReplicaId(0), 1)));
        assert!(!f.deliver_own(OpId::new(ReplicaId(0), 1)));
        assert_eq!(f.receive(op(0, 3), &mut d), Received::Buffered);
        assert!(f.deliver_own(OpId::new(ReplicaId(0), 3)));
        assert_eq!(f.buffered_len(), 0);
        assert!(f.has_delivered(OpId::new(ReplicaId(0), 3)));
        assert!(!f.has_delivered(OpId::new(ReplicaId(0), 0)));
    }
}
