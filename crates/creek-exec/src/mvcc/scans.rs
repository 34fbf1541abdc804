//! Phantom protection: how the executor keeps scanned ranges valid
//! (DESIGN §14).
//!
//! A scan is recorded twice ([`crate::Txn::scan`]): each key it returned
//! from the snapshot is a point read, handled like any other read, and the
//! range is a [`ScanRead`] holding the keys that were live in it. The point
//! reads catch a returned key's value changing; the range catches the set of
//! live keys changing — a key appearing (a phantom), or a returned key
//! vanishing. So for the range only *liveness* matters: when the visible
//! version of key `k` may have changed for readers after position `lo`, every
//! installed scanner in that window whose range holds `k` is stale exactly
//! when `k` is live at its position now but was not then, or the reverse.
//!
//! The candidates are those of a point read of `k`: scanners after the
//! change and up to the next version of `k` (readers past that version see
//! it, whatever changed before). The range-reader index is keyed by position
//! (`MvccExecutor::scanners`), so finding the candidates costs a walk over
//! the scanners in that window; in a workload that never scans it is empty
//! and costs one check per write.
//!
//! This module is not where scans are executed (that is
//! [`super::SnapshotAt`] through [`crate::Txn::scan`]) nor where they are
//! recorded (`install`); it answers "is this scan still what a reader at `pos`
//! would see".

use std::ops::Bound;

use super::store::SnapshotAt;
use super::{MvccExecutor, OpState};
use crate::engine::{OpKey, Position};
use crate::txn::{ScanRead, SnapshotRead};

impl<K: OpKey, P: Position> MvccExecutor<K, P> {
    /// Whether a reader at `pos` would see exactly the live keys `scan`
    /// recorded. Costs a rescan of the range (bounded by the recorded keys
    /// plus one).
    pub(super) fn scan_current(&self, scan: &ScanRead, pos: P) -> bool {
        let snapshot = SnapshotAt {
            keys: &self.keys,
            pos,
        };
        let mut now = Vec::with_capacity(scan.keys.len() + 1);
        snapshot.scan(&scan.from, &scan.to, scan.keys.len() + 1, &mut now);
        now.len() == scan.keys.len() && now.iter().zip(&scan.keys).all(|((k, _, _), r)| k == r)
    }

    /// [`Self::scan_current`] for every scan of an execution.
    pub(super) fn scans_current(&self, scans: &[ScanRead], pos: P) -> bool {
        scans.iter().all(|s| self.scan_current(s, pos))
    }

    /// Push onto `out` the installed scanners (other than `except`) whose
    /// range holds `key` and for which `key`'s liveness now differs from
    /// what they recorded, among those a change of `key`'s versions between
    /// `lo` and `hi` (inclusive) can affect.
    pub(super) fn stale_scanners(&self, key: &[u8], lo: P, hi: P, except: K, out: &mut Vec<K>) {
        if self.scanners.is_empty() {
            return;
        }
        let state = self.keys.get(key);
        let next_writer = state.and_then(|ks| ks.versions.first_after(hi));
        let upper = next_writer.map_or(Bound::Unbounded, Bound::Included);
        for (rpos, rkey) in self.scanners.range((Bound::Excluded(lo), upper)) {
            if *rkey == except {
                continue;
            }
            let Some(op) = self.ops.get(rkey) else {
                debug_assert!(false, "scanner index out of sync for {rkey:?}");
                continue;
            };
            let live_now = state.is_some_and(|ks| ks.visible(*rpos).0.is_some());
            let stale = op
                .scans
                .iter()
                .any(|s| s.contains(key) && s.saw_live(key) != live_now);
            if stale {
                out.push(*rkey);
            }
        }
    }

    /// The scans of the installed op `key` at `pos` are what is visible
    /// there, and the range-reader index lists it exactly when it scanned
    /// (the pair of the registration in `install`).
    pub(super) fn check_scans(&self, key: K, pos: P, scans: &[ScanRead]) -> Result<(), String> {
        for scan in scans {
            let ordered = scan.keys.windows(2).all(|w| w[0] < w[1]);
            if !ordered || !scan.keys.iter().all(|k| scan.contains(k)) {
                return Err(format!("{key:?} recorded a malformed scan {scan:?}"));
            }
            if !self.scan_current(scan, pos) {
                return Err(format!(
                    "{key:?} scanned [{:?}, {:?}) as {:?} but other keys are live at {pos:?}",
                    scan.from, scan.to, scan.keys
                ));
            }
        }
        if self.scanners.get(&pos).is_some_and(|k| *k == key) == scans.is_empty() {
            return Err(format!("{key:?}: scanner index out of sync"));
        }
        Ok(())
    }

    /// Every entry of the range-reader index is an installed op with scans
    /// at that position; the ordered key index matches the key map.
    pub(super) fn check_scanner_index(&self) -> Result<(), String> {
        for (pos, key) in &self.scanners {
            let listed = self.ops.get(key).is_some_and(|op| {
                op.pos == *pos && op.state == OpState::Installed && !op.scans.is_empty()
            });
            if !listed {
                return Err(format!("scanner index lists {key:?} at {pos:?} wrongly"));
            }
        }
        if !self.keys.order_in_sync() {
            return Err("ordered key index out of sync with the key map".to_owned());
        }
        Ok(())
    }
}
