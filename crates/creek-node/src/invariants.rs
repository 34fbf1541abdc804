//! The node's self-checks: every room's invariants and the node's own (the
//! simulator samples them), and a one-line report of what a stalled commit
//! path waits on.

use creek_cab::CabStorage;
use creek_core::OpId;

use crate::Node;

impl<S: CabStorage> Node<S> {
    /// Check every room's invariants and the node's own (the simulator
    /// samples this; it walks the replica's state, so it is not for the
    /// hot path): the replica core and its executor, CAB, gossip, and
    /// durability (nothing durable that was not written; gossip told of no
    /// more than was committed).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.membership.check_invariants()?;
        // A removed replica was a member (and keeps what it committed).
        if !self.membership.is_member()
            && !self.membership.is_removed()
            && self.replica.committed_len() > 0
        {
            return Err("a replica that is not a member committed ops".into());
        }
        self.replica.check_invariants()?;
        self.replica.engine().check_invariants()?;
        self.cab
            .check_invariants()
            .map_err(|e| format!("cab: {e}"))?;
        self.gossip
            .check_invariants()
            .map_err(|e| format!("gossip: {e}"))?;
        // Gossip does not wait for an id the replica holds (delivered,
        // voided, or committed by a checkpoint): ops after it would wait
        // for a payload no replica keeps.
        for (origin, counter, past_gap) in self.replica.causal_context().to_records() {
            let ids = std::iter::once(counter)
                .chain(past_gap)
                .filter(|seq| *seq > 0)
                .map(|seq| OpId::new(origin, seq));
            if let Some(id) = ids.into_iter().find(|id| !self.gossip.counts_held(*id)) {
                return Err(format!(
                    "{id} is in the causal context, and gossip still waits for it \
                     (its counter for {origin}: {})",
                    self.gossip.counter(origin)
                ));
            }
        }
        let d = &self.durability;
        if d.durable > d.written {
            return Err(format!(
                "write {} durable, only {} written",
                d.durable, d.written
            ));
        }
        if self.committed_told > self.replica.committed_len() {
            return Err("gossip was told of more committed ops than there are".into());
        }
        Ok(())
    }

    /// One line on what this replica's commit path is waiting for: held
    /// appends and the ids they wait on (with the missing context ops),
    /// its own newest seqs (in the replica, in gossip), gossip's counters,
    /// CAB's log and the replica's lengths. For an operator's log when
    /// commits stall, and for a failed simulator seed.
    pub fn stall_report(&self) -> String {
        let cab = &self.cab;
        let r = &self.replica;
        let waiting = cab.waiting_for(&|id| r.holds_payloads(id), &|id| r.check_dep(id));
        let missing: Vec<OpId> = waiting
            .iter()
            .flat_map(|id| match r.op(*id) {
                None => vec![*id],
                Some(_) => r.missing_context(*id).take(5).collect(),
            })
            .take(10)
            .collect();
        let me = r.id();
        let last = r.last_issued_seq();
        let own: Vec<(u64, bool, bool)> = (last.saturating_sub(6)..=last)
            .map(|seq| {
                let id = OpId { origin: me, seq };
                (seq, r.op(id).is_some(), self.gossip_holds(id))
            })
            .collect();
        format!(
            "own(seq,replica,gossip)={own:?} held_appends={} waiting={waiting:?} \
             missing={missing:?} gossip={:?} lost_peers={:?} foreign={:?} delivered={:?} \
             {:?} role={} term={} leader={:?} log={:?} cab_delivered={} decided_waiting={} \
             wanted={:?} held_wait={:?} fetch={:?} transfers={:?} timing_scale={} committed_len={} \
             tentative={} unconfirmed={} mpo_waiting={:?} mpo_last={} finalized={}",
            cab.held_appends(),
            self.gossip_stats(),
            self.lost_peers(),
            self.foreign_peers(),
            self.gossip_delivered(),
            self.standing(),
            cab.role(),
            cab.term(),
            cab.leader(),
            cab.log_mark(),
            cab.delivered_through(),
            cab.decided_waiting(),
            cab.wanted_snapshot(),
            self.held_wait,
            self.fetch_status(),
            self.transfer_stats(),
            self.timing.scale(),
            r.committed_len(),
            r.tentative_len(),
            cab.unconfirmed(),
            r.mpo_waiting(),
            r.mpo_last_index(),
            r.counters().finalized,
        )
    }
}
