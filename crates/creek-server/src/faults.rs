//! Fault injection in the peer transport: added latency, loss and
//! partitions per link, set at run time through `Admin.SetFaults` (only when
//! the server allows it). Off by default: an empty table costs one read lock
//! per frame.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;

use creek_core::ReplicaId;
use creek_rng::Rng;

/// Faults on this replica's side of one link (both directions).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkFault {
    /// Added one-way latency on frames this replica sends.
    pub delay: Duration,
    /// Probability of dropping a frame.
    pub loss: f64,
    /// Drop every frame.
    pub partitioned: bool,
}

/// What to do with one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send (or accept) it after this extra delay.
    Pass(Duration),
    /// Drop it.
    Drop,
}

/// The fault table of one replica.
#[derive(Debug)]
pub struct Faults {
    links: RwLock<HashMap<ReplicaId, LinkFault>>,
    rng: std::sync::Mutex<Rng>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            links: RwLock::new(HashMap::new()),
            rng: std::sync::Mutex::new(Rng::new(0x0063_7265_656b)),
        }
    }
}

impl Faults {
    /// Replace the whole table.
    pub fn set(&self, links: HashMap<ReplicaId, LinkFault>) {
        if let Ok(mut t) = self.links.write() {
            *t = links;
        }
    }

    /// The fault on the link to `peer`.
    pub fn get(&self, peer: ReplicaId) -> LinkFault {
        self.links
            .read()
            .ok()
            .and_then(|t| t.get(&peer).copied())
            .unwrap_or_default()
    }

    /// Decide the fate of one frame to or from `peer`.
    pub fn judge(&self, peer: ReplicaId) -> Verdict {
        let f = self.get(peer);
        if f.partitioned {
            return Verdict::Drop;
        }
        if f.loss > 0.0 {
            let dropped = self
                .rng
                .lock()
                .map(|mut r| r.chance(f.loss))
                .unwrap_or(false);
            if dropped {
                return Verdict::Drop;
            }
        }
        Verdict::Pass(f.delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_table() {
        let f = Faults::default();
        let (a, b) = (ReplicaId(1), ReplicaId(2));
        assert_eq!(f.judge(a), Verdict::Pass(Duration::ZERO));
        let mut t = HashMap::new();
        t.insert(
            a,
            LinkFault {
                partitioned: true,
                ..LinkFault::default()
            },
        );
        t.insert(
            b,
            LinkFault {
                delay: Duration::from_millis(3),
                loss: 0.5,
                partitioned: false,
            },
        );
        f.set(t);
        assert_eq!(f.judge(a), Verdict::Drop);
        let dropped = (0..1000).filter(|_| f.judge(b) == Verdict::Drop).count();
        assert!(
            (350..650).contains(&dropped),
            "{dropped} of 1000 dropped at 50% loss"
        );
        assert!((0..10).any(|_| f.judge(b) == Verdict::Pass(Duration::from_millis(3))));
        f.set(HashMap::new());
        assert_eq!(f.judge(a), Verdict::Pass(Duration::ZERO));
    }
}
