//! Stable times (docs/snapshot-reads.md, "Stable times"): how far every
//! shard's committed order is applied, as two scalars per message.
//!
//! * A replica tells its group's peers its **applied time** (the commit
//!   time of its last final entry) and the global stable time it knows
//!   ([`creek_wire::Stable`]) as soon as its applied time moved, at most
//!   every quarter of [`StableConfig::every_us`], and at least every
//!   interval.
//! * A group's **stable time** is the largest time a majority of its
//!   voters has applied, from their last reports (stale reports only make
//!   it lower); it never goes backwards here.
//! * In a cluster of shards, a shard's leader sends its shard's stable
//!   time to the replicas of every other shard ([`MpoMessage::Stable`]),
//!   as soon as it moved (at most every quarter interval) and at least
//!   every interval;
//!   each keeps the largest it heard from each shard. The **global stable
//!   time** is the least of every shard's (its own included), once every
//!   shard has been heard from; a replica also takes the largest a peer of
//!   its group reports. Every shard has applied it at a majority. In a
//!   cluster of one group it is the group's stable time.
//! * An idle leader commits a clock no-op when its group's last commit
//!   time is older than the interval, so the times move while nothing is
//!   written.
//!
//! Invariants (asserted at every tick where they are computed): neither the group's
//! nor the global stable time decreases, and the global one is never
//! above the group's.

use std::collections::BTreeMap;

use creek_cab::CabStorage;
use creek_core::{ReplicaId, SnapshotHistory};
use creek_wire::{PeerMessage, Stable};

use crate::mpo::MpoMessage;
use crate::Node;

/// Stable-time settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StableConfig {
    /// How often a replica reports its applied time, a shard's leader
    /// publishes its shard's stable time, and an idle leader commits a
    /// clock no-op (µs); 0: stable times off.
    pub every_us: u64,
    /// This replica's shard in a cluster of shards (`None`: a cluster of
    /// one group, or the directory group).
    pub shard: Option<u32>,
    /// Every shard of the cluster (this one included).
    pub shards: Vec<u32>,
    /// No clock no-ops (the simulator's settling phase, which needs a
    /// cluster that stops committing once its clients stop).
    pub no_clock_noops: bool,
    /// The committed versions kept for snapshot reads at the global stable
    /// time (with stable times on).
    pub history: SnapshotHistory,
}

/// What one replica knows of the stable times.
#[derive(Debug, Default)]
pub struct StableTimes {
    config: StableConfig,
    /// When this replica last reported, and the applied time it reported.
    reported: (u64, u64),
    /// When this replica (leading) last published, and the time it did.
    published: (u64, u64),
    /// Each peer's last report: (applied, global).
    peers: BTreeMap<ReplicaId, (u64, u64)>,
    /// The cluster's other shards (none: a cluster of one group, or the
    /// directory group), each with the largest stable time heard from it.
    others: BTreeMap<u32, u64>,
    group: u64,
    global: u64,
    /// Clock no-ops this replica issued.
    clock_noops: u64,
    /// The planted bug `StableTimeRegresses`: the global time is the last
    /// one a peer reported, not the largest known.
    regress: bool,
    /// The global time in the last report heard.
    last_heard: u64,
}

impl StableTimes {
    pub(crate) fn new(config: &StableConfig) -> Self {
        let others = match config.shard {
            Some(me) => config
                .shards
                .iter()
                .filter(|s| **s != me)
                .map(|s| (*s, 0))
                .collect(),
            None => BTreeMap::new(),
        };
        StableTimes {
            config: config.clone(),
            others,
            ..StableTimes::default()
        }
    }

    /// The group's stable time known here.
    pub fn group(&self) -> u64 {
        self.group
    }

    /// The global stable time known here.
    pub fn global(&self) -> u64 {
        self.global
    }

    /// Clock no-ops this replica issued.
    pub fn clock_noops(&self) -> u64 {
        self.clock_noops
    }

    /// The stable time each other shard published, as heard here (0: not
    /// yet).
    pub fn others(&self) -> &BTreeMap<u32, u64> {
        &self.others
    }

    /// Follow the cluster's shards (see [`Node::set_stable_shards`]).
    fn set_shards(&mut self, shards: &[u32]) {
        let Some(me) = self.config.shard else {
            return;
        };
        self.config.shards = shards.to_vec();
        self.others.retain(|s, _| shards.contains(s));
        for s in shards.iter().filter(|s| **s != me) {
            self.others.entry(*s).or_insert(0);
        }
    }

    fn on_report(&mut self, from: ReplicaId, report: Stable) {
        self.last_heard = report.global_us;
        let seen = self.peers.entry(from).or_default();
        seen.0 = seen.0.max(report.applied_us);
        seen.1 = seen.1.max(report.global_us);
    }

    /// Recompute the group's and the global stable time from `applied`
    /// (this replica's) and the voters' reports.
    fn update(&mut self, me: ReplicaId, applied: u64, voters: &[ReplicaId]) {
        let mut times: Vec<u64> = voters
            .iter()
            .map(|v| {
                if *v == me {
                    applied
                } else {
                    self.peers.get(v).map_or(0, |p| p.0)
                }
            })
            .collect();
        if !times.is_empty() {
            times.sort_unstable_by(|a, b| b.cmp(a));
            let majority = times.len() / 2;
            self.group = self.group.max(times[majority]);
        }
        let heard = self.peers.values().map(|p| p.1).max().unwrap_or(0);
        let mine = if self.config.shard.is_none() {
            self.group
        } else if self.others.values().all(|t| *t > 0) {
            self.others.values().copied().fold(self.group, u64::min)
        } else {
            0
        };
        let global = mine.max(heard.min(self.group));
        self.global = if self.regress && self.last_heard > 0 {
            self.last_heard.min(self.group)
        } else {
            self.global.max(global)
        };
    }

    /// The invariants: see the module's text.
    pub(crate) fn check(&self, before: (u64, u64)) -> Result<(), String> {
        if self.group < before.0 || self.global < before.1 {
            return Err(format!(
                "stable times went back: group {} → {}, global {} → {}",
                before.0, self.group, before.1, self.global
            ));
        }
        if self.global > self.group {
            return Err(format!(
                "the global stable time {} is above the group's {}",
                self.global, self.group
            ));
        }
        Ok(())
    }
}

impl<S: CabStorage> Node<S> {
    /// Start keeping stable times as `config` says; with them on, snapshot
    /// reads are served at the global stable time.
    pub(crate) fn start_stable(&mut self, config: &StableConfig) {
        self.stable = StableTimes::new(config);
        self.stable.regress = self
            .replica
            .config()
            .planted
            .has(creek_types::planted::Bug::StableTimeRegresses);
        if config.every_us > 0 {
            self.replica.keep_snapshot_history(config.history);
        }
    }

    /// The replica was rebuilt from a checkpoint: it keeps versions for
    /// snapshot reads as the old one did, from the checkpoint on.
    pub(crate) fn keep_history_again(&mut self) {
        if self.stable.config.every_us > 0 {
            self.replica
                .keep_snapshot_history(self.stable.config.history);
            self.replica.set_stable_time(self.stable.global);
        }
    }

    /// The cluster's shards are `shards` now (a shard added or dropped by
    /// a move of keys): a dropped shard no longer holds the global stable
    /// time back; an added one holds it (where it is, it never goes back)
    /// until it publishes, as every shard does at the start.
    pub fn set_stable_shards(&mut self, shards: &[u32]) {
        self.stable.set_shards(shards);
    }

    /// Shard `shard` published stable time `time` (a message from another
    /// group).
    pub fn stable_from(&mut self, shard: u32, time: u64) {
        if let Some(t) = self.stable.others.get_mut(&shard) {
            *t = (*t).max(time);
        }
    }

    /// Commit no more clock no-ops (see [`StableConfig::no_clock_noops`]).
    pub fn stop_clock_noops(&mut self) {
        self.stable.config.no_clock_noops = true;
    }

    /// The stable times known here.
    pub fn stable_times(&self) -> &StableTimes {
        &self.stable
    }

    pub(crate) fn on_stable(&mut self, from: ReplicaId, report: Stable) {
        self.stable.on_report(from, report);
    }

    /// A tick: recompute, report to the group's peers and publish to the
    /// other shards when due, and commit a clock no-op if this replica
    /// leads an idle group.
    pub(crate) fn stable_tick(&mut self, now_us: u64) {
        let every = self.stable.config.every_us;
        if every == 0 {
            return;
        }
        let before = (self.stable.group, self.stable.global);
        let me = self.id();
        let group = self.group();
        let applied = self.replica.applied_time();
        self.stable.update(me, applied, &group.voters);
        if let Err(e) = self.stable.check(before) {
            debug_assert!(self.stable.regress, "{e}");
        }
        self.replica.set_stable_time(self.stable.global);
        let report_due = due(self.stable.reported, (now_us, applied), every);
        if report_due {
            self.stable.reported = (now_us, applied);
            let report = Stable {
                applied_us: applied,
                global_us: self.stable.global,
            };
            for peer in group.voters.iter().chain(&group.learners) {
                if *peer != me {
                    self.early.push((*peer, PeerMessage::Stable(report)));
                }
            }
        }
        if !self.cab.is_leader() {
            return;
        }
        let time = self.stable.group;
        let publish_due = due(self.stable.published, (now_us, time), every);
        if let (Some(shard), false, true) = (
            self.stable.config.shard,
            self.stable.others.is_empty(),
            publish_due,
        ) {
            self.stable.published = (now_us, time);
            self.mpo_out.push(MpoMessage::Stable {
                from: shard,
                to: self.stable.others.keys().copied().collect(),
                time,
            });
        }
        if !report_due {
            return;
        }
        if self.stable.config.no_clock_noops {
            return;
        }
        if self.replica.clock_tick(now_us, every) {
            self.stable.clock_noops += 1;
        }
    }
}

/// Whether a report or publication last sent as `last` (when, what time)
/// is due again at `now` (when, the time now): once a quarter interval has
/// passed and the time moved, or once an interval has.
fn due(last: (u64, u64), now: (u64, u64), every: u64) -> bool {
    let since = now.0.saturating_sub(last.0);
    since >= every || (since >= every / 4 && now.1 != last.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shard 0 of shards 0 and 1, one voter (itself), applied at 100.
    fn times() -> StableTimes {
        StableTimes::new(&StableConfig {
            every_us: 5_000,
            shard: Some(0),
            shards: vec![0, 1],
            ..StableConfig::default()
        })
    }

    #[test]
    fn the_global_time_follows_shards_added_and_dropped_and_never_goes_back() {
        let me = ReplicaId(1);
        let mut t = times();
        t.others.insert(1, 80);
        t.update(me, 100, &[me]);
        assert_eq!(t.global(), 80);
        // A shard added: not heard from yet, it holds the global time
        // where it is.
        t.set_shards(&[0, 1, 2]);
        t.update(me, 120, &[me]);
        assert_eq!(t.global(), 80);
        t.others.insert(2, 90);
        t.others.insert(1, 110);
        t.update(me, 130, &[me]);
        assert_eq!(t.global(), 90);
        // Shard 2 dropped (it owns nothing any more): it no longer holds
        // the global time back.
        t.set_shards(&[0, 1]);
        t.update(me, 140, &[me]);
        assert_eq!((t.global(), t.others().len()), (110, 1));
        // A replica outside any shard follows nothing.
        let mut dir = StableTimes::new(&StableConfig::default());
        dir.set_shards(&[0, 1]);
        assert!(dir.others().is_empty());
    }
}
