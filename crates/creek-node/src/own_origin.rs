//! Ops under this replica's origin that it never issued.
//!
//! Gossip refuses an op of this replica's origin that it never issued (or
//! a different op under a seq it issued) and a digest that claims a peer
//! holds its ops past the last one it issued ([`creek_gossip::refusal`]).
//! No correct peer sends either, outside the ranges a replica takes back
//! after it lost its data or crashed; something that speaks the peer
//! protocol as another replica does (docs/security.md, "The peer port").
//! The node acts on a refusal only while it is a member and only when the
//! claimed seq is past the last one its replica issued; the rest is a
//! replica rebuilding, which gossip's loose range already lets through.
//!
//! A forged op may already be held by the peers it reached: they deliver
//! it in this replica's place. So the replica never issues the forged seqs
//! itself (its next op would be dropped by those peers as a duplicate and
//! the group would diverge), and has the committed order void them, as it
//! voids own ops lost with a disk: where the void commits first, the forged
//! op is void at every replica; where the forged op committed first, this
//! replica cannot execute past it (it never takes the payload) and its
//! committed order stops there rather than differ — its stall is logged.
//! Each refusal is counted and handed to the driver to log.

use std::collections::BTreeSet;

use creek_cab::CabStorage;
use creek_gossip::refusal::{Refusal, RefusalKind};
use creek_procs::void::VOID_BATCH_MAX;

use crate::Node;

/// Refusals kept for the driver's log between two
/// [`Node::take_own_origin_refusals`]; more are only counted.
pub const OWN_ORIGIN_REFUSALS_KEPT_MAX: usize = 64;

/// Forged seqs this replica skips and voids past the last one it issued;
/// a claim further ahead is refused and counted only (peers buffer an op
/// that far ahead until its origin's seqs reach it, and the replica's own
/// void of its seqs clears it then).
pub const FORGED_SKIP_MAX: u64 = VOID_BATCH_MAX as u64;

/// The node's record of refused own-origin claims.
#[derive(Debug, Default)]
pub(crate) struct OwnOrigin {
    /// Refusals acted on (see the module docs).
    refused: u64,
    /// Refusals for the driver's log, at most
    /// [`OWN_ORIGIN_REFUSALS_KEPT_MAX`].
    kept: Vec<Refusal>,
    /// Forged seqs skipped and not yet in a void op.
    to_void: BTreeSet<u64>,
}

impl OwnOrigin {
    /// Whether forged seqs wait to be put in a void op.
    pub(crate) fn voids_pending(&self) -> bool {
        !self.to_void.is_empty()
    }
}

impl<S: CabStorage> Node<S> {
    /// Gossip refused these claims about this replica's own ops.
    pub(crate) fn on_own_origin_refusals(&mut self, refused: Vec<Refusal>) {
        if refused.is_empty() || !self.membership.is_member() {
            return;
        }
        for r in refused {
            let issued = self.replica.last_issued_seq();
            let forged = match r.kind {
                RefusalKind::SeqReused => false,
                // Gossip's counter may trail the replica's (after an
                // installed checkpoint): only past what the replica issued
                // is a claim never made.
                _ if r.id.seq <= issued => continue,
                _ => true,
            };
            self.own_origin.refused += 1;
            if self.own_origin.kept.len() < OWN_ORIGIN_REFUSALS_KEPT_MAX {
                self.own_origin.kept.push(r);
            }
            if forged && r.id.seq - issued <= FORGED_SKIP_MAX {
                self.replica.reclaim_own(r.id.seq);
                self.own_origin.to_void.extend(issued + 1..=r.id.seq);
            }
        }
    }

    /// Order the void of the forged seqs skipped since the last tick.
    pub(crate) fn void_forged(&mut self, now_us: u64) {
        if self.own_origin.to_void.is_empty() {
            return;
        }
        let seqs: Vec<u64> = std::mem::take(&mut self.own_origin.to_void)
            .into_iter()
            .collect();
        self.void_own_seqs(&seqs, now_us);
    }

    /// Have the committed order void these own seqs, in void ops of at
    /// most [`VOID_BATCH_MAX`] seqs each.
    pub(crate) fn void_own_seqs(&mut self, seqs: &[u64], now_us: u64) {
        for chunk in seqs.chunks(VOID_BATCH_MAX) {
            self.replica.void_own(chunk, now_us);
        }
    }

    /// Claims about this replica's own ops refused since the last call (at
    /// most [`OWN_ORIGIN_REFUSALS_KEPT_MAX`]), for the driver's log.
    pub fn take_own_origin_refusals(&mut self) -> Vec<Refusal> {
        std::mem::take(&mut self.own_origin.kept)
    }

    /// Claims about this replica's own ops refused so far: ops of its
    /// origin it never issued or issued to another op, and digests
    /// claiming its ops past the last one it issued.
    pub fn own_origin_refused(&self) -> u64 {
        self.own_origin.refused
    }
}
