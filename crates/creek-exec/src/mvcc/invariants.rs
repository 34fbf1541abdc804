//! The executor's invariant, checked after every step by the tests and the
//! simulator: every installed execution's recorded reads are the versions
//! visible at its position; the kept history of final versions matches its
//! counters and pruning list (`history.rs`).

use super::*;

impl<K: OpKey, P: Position> MvccExecutor<K, P> {
    /// Check the executor's invariants; `Err` describes the first violation.
    /// Used by tests and the simulator.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.order.len() != self.ops.len() {
            return Err(format!(
                "order has {} ops, table has {}",
                self.order.len(),
                self.ops.len()
            ));
        }
        let versions: u64 = self.keys.values().map(|ks| ks.version_count()).sum();
        if versions != self.counters.versions_alive {
            return Err(format!(
                "versions_alive {} but {} stored",
                self.counters.versions_alive, versions
            ));
        }
        for (pos, key) in &self.order {
            let op = self
                .ops
                .get(key)
                .ok_or_else(|| format!("{key:?} in order but not in table"))?;
            if op.pos != *pos {
                return Err(format!("{key:?} at {pos:?} but records {:?}", op.pos));
            }
            let installed = op.state == OpState::Installed;
            if installed == self.not_installed.contains(pos) {
                return Err(format!("{key:?}: not_installed out of sync"));
            }
            if self.runnable.contains(pos) != (op.state == OpState::Pending) {
                return Err(format!("{key:?}: runnable out of sync"));
            }
            if self.fresh.contains(pos) != (op.state == OpState::Pending && op.executions == 0) {
                return Err(format!("{key:?}: fresh out of sync"));
            }
            if self.running_at.contains(pos) != (op.state == OpState::Running) {
                return Err(format!("{key:?}: running_at out of sync"));
            }
            match (op.state, op.blocked_by) {
                (OpState::Waiting, Some(b)) => {
                    let running = self.ops.get(&b).map(|o| o.state) == Some(OpState::Running);
                    let listed = self.waiters.get(&b).is_some_and(|w| w.contains(key));
                    if !(running && listed) {
                        return Err(format!(
                            "{key:?} waits for {b:?}, not running or not listed"
                        ));
                    }
                }
                (OpState::Waiting, None) | (_, Some(_)) => {
                    return Err(format!("{key:?}: waiting out of sync"));
                }
                _ => {}
            }
            if !installed {
                continue;
            }
            for (k, recorded) in &op.reads {
                let now = self.visible_no(k, *pos);
                if now != *recorded {
                    return Err(format!(
                        "{key:?} read {k:?} as {recorded:?} but {now:?} is visible at {pos:?}"
                    ));
                }
                if self.keys.get(k).and_then(|ks| ks.readers.get(pos)) != Some(key) {
                    return Err(format!("{key:?} missing from reader index of {k:?}"));
                }
            }
            for k in &op.writes {
                if !self
                    .keys
                    .get(k)
                    .is_some_and(|ks| ks.versions.contains_key(pos))
                {
                    return Err(format!("{key:?} lost its version of {k:?}"));
                }
            }
            self.check_scans(*key, *pos, &op.scans)?;
        }
        self.check_scanner_index()?;
        self.check_history()?;
        Ok(())
    }
}
