//! Planted bugs: faults put into the protocol on purpose, so the simulator
//! swarm and `creek chaos` can show that their checkers catch each one
//! (docs/reliability.md).
//!
//! [`PlantedBugs`] is the one set of them every configuration carries. A
//! bug can be planted only in a build with this crate's `planted-bugs`
//! cargo feature (the `planted-bugs` features of the protocol crates
//! forward to it); without it [`PlantedBugs::plant`] refuses, and
//! [`PlantedBugs::has`] is a constant `false`, so every check of a planted
//! bug compiles away in production builds.
//!
//! ```
//! use creek_types::planted::{Bug, PlantedBugs, BUILT};
//!
//! let mut planted = PlantedBugs::NONE;
//! assert_eq!(planted.plant(Bug::SendBeforeDurable).is_ok(), BUILT);
//! assert_eq!(planted.has(Bug::SendBeforeDurable), BUILT);
//! assert!(!planted.has(Bug::AmnesiacVoter));
//! ```
//!
//! This module is not for faults of the environment (lost messages,
//! crashes, slow disks): those are the simulator's and the server's fault
//! injection, and production builds keep them.

/// Whether this build can plant bugs (the `planted-bugs` cargo feature).
/// Production builds cannot.
pub const BUILT: bool = cfg!(feature = "planted-bugs");

/// Why a bug cannot be planted in a build without the `planted-bugs`
/// cargo feature (every configuration that refuses one says the same).
pub const PLANTED_BUGS_OFF: &str = "planted bugs are compiled out of this build (cargo feature \
     `planted-bugs`, for validating the simulator's checkers only)";

/// A protocol bug that can be planted on purpose to show the checkers can
/// fail. Never for production.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bug {
    /// The executor does not invalidate readers when it installs a version.
    SkipInvalidation,
    /// An origin commits its own strong op without waiting for CAB.
    DeliverWithoutCab,
    /// Strong ops carry an empty causal context.
    IgnoreCausalContext,
    /// The CAB leader delivers ids when it proposes them, before a majority
    /// has them (the server's `plant_bug = "deliver-on-propose"`).
    StableBeforeDurable,
    /// Peer messages leave before the write they depend on is synced.
    SendBeforeDurable,
    /// The disk reports a write durable when it is issued, not when its
    /// fsync completes: recovery then trusts writes a crash took.
    ForgetUnsyncedTail,
    /// A replica that lost its disk joins again, empty, as a voter.
    AmnesiacVoter,
    /// A restarted replica does not take back the own ops it sent before
    /// their write was durable, and issues their ids again.
    ForgetSentOps,
    /// A shard commits an operation across shards without the other
    /// shards' confirmations (their reads), as if they had read nothing.
    MpoSkipConfirmation,
    /// Shard 0's replicas commit an operation across shards when CAB
    /// decides it, not at its turn in the directory's sequence.
    MpoOutOfSequence,
    /// A shard installs an operation across shards' writes to other
    /// shards' keys too.
    MpoInstallRemoteWrite,
    /// A snapshot read runs on the replica's latest state, tentative ops
    /// included, instead of its committed state.
    SnapshotServesTentative,
    /// A snapshot read is served at once at the replica's applied time,
    /// even below the time the client read at before.
    SnapshotIgnoresReadTime,
    /// The clients' cache of their own writes is never laid over a
    /// snapshot read (the simulator's clients).
    SnapshotDropsClientCache,
    /// A replica's stable times follow the last reports and publications
    /// it heard, not the largest: they may go back.
    StableTimeRegresses,
    /// A move of keys switches ownership before its copy caught up: the
    /// target takes the keys with the copy of the last round before the
    /// switch, missing what the source committed since.
    MoveSwitchBeforeCaughtUp,
    /// The shard a move takes keys from keeps executing ops on them after
    /// the switch (it never adopts the switched map).
    MoveSourceKeepsServing,
    /// Installing a version never invalidates the scans whose range holds
    /// its key (phantoms: a scan misses a key put into its range by an op
    /// before it); point reads are still invalidated.
    SkipScanInvalidation,
    /// The leader orders the expiry of leases 0.7 s before their deadline
    /// by its clock, and the expiry op does not check deadlines again.
    LeaseEarlyExpiry,
    /// A key's version record advancing as a write becomes final never
    /// sends the executions that read the old record back: they keep the
    /// record of the write before.
    StaleVersionRecords,
}

impl Bug {
    /// Every planted bug with its command-line name (`--plant-bug`).
    pub const ALL: [(&'static str, Bug); 20] = [
        ("skip-invalidation", Bug::SkipInvalidation),
        ("deliver-without-cab", Bug::DeliverWithoutCab),
        ("ignore-causal-context", Bug::IgnoreCausalContext),
        ("stable-before-durable", Bug::StableBeforeDurable),
        ("send-before-durable", Bug::SendBeforeDurable),
        ("forget-unsynced-tail", Bug::ForgetUnsyncedTail),
        ("amnesiac-voter", Bug::AmnesiacVoter),
        ("forget-sent-ops", Bug::ForgetSentOps),
        ("mpo-skip-confirmation", Bug::MpoSkipConfirmation),
        ("mpo-out-of-sequence", Bug::MpoOutOfSequence),
        ("mpo-install-remote-write", Bug::MpoInstallRemoteWrite),
        ("snapshot-serves-tentative", Bug::SnapshotServesTentative),
        ("snapshot-ignores-read-time", Bug::SnapshotIgnoresReadTime),
        ("snapshot-drops-client-cache", Bug::SnapshotDropsClientCache),
        ("stable-time-regresses", Bug::StableTimeRegresses),
        (
            "move-switch-before-caught-up",
            Bug::MoveSwitchBeforeCaughtUp,
        ),
        ("move-source-keeps-serving", Bug::MoveSourceKeepsServing),
        ("skip-scan-invalidation", Bug::SkipScanInvalidation),
        ("lease-early-expiry", Bug::LeaseEarlyExpiry),
        ("stale-version-records", Bug::StaleVersionRecords),
    ];

    /// Parse a command-line name.
    pub fn parse(s: &str) -> Result<Bug, String> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, b)| *b)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                format!("unknown bug {s:?}; one of {}", names.join(", "))
            })
    }

    /// The bug's bit in a [`PlantedBugs`].
    const fn bit(self) -> u32 {
        1 << self as u32
    }
}

/// A bug was to be planted in a build without the `planted-bugs` feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{PLANTED_BUGS_OFF}")]
pub struct NotBuilt;

/// The planted bugs of a configuration: a set of [`Bug`]s, empty by
/// default and in every production build.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlantedBugs {
    /// One bit per [`Bug`] planted.
    bits: u32,
}

impl PlantedBugs {
    /// No bug planted.
    pub const NONE: PlantedBugs = PlantedBugs { bits: 0 };

    /// Plant `bug`; refused by a build without the `planted-bugs` feature.
    pub fn plant(&mut self, bug: Bug) -> Result<(), NotBuilt> {
        if !BUILT {
            return Err(NotBuilt);
        }
        self.bits |= bug.bit();
        Ok(())
    }

    /// Whether `bug` is planted: always `false` in a build without the
    /// `planted-bugs` feature, so the code behind the check compiles away.
    #[inline]
    pub fn has(self, bug: Bug) -> bool {
        BUILT && self.bits & bug.bit() != 0
    }

    /// Whether no bug is planted.
    pub fn is_empty(self) -> bool {
        self.bits == 0
    }

    /// The bugs planted in `self` or in `other`: how a configuration hands
    /// its planted bugs down to the rooms it configures.
    #[must_use]
    pub fn union(self, other: PlantedBugs) -> PlantedBugs {
        PlantedBugs {
            bits: self.bits | other.bits,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bug_has_its_own_bit_and_name() {
        let mut seen = 0u32;
        for (name, bug) in Bug::ALL {
            assert_eq!(seen & bug.bit(), 0, "{name} shares a bit");
            seen |= bug.bit();
            assert_eq!(Bug::parse(name), Ok(bug));
        }
        assert!(Bug::parse("no-such-bug").is_err());
    }

    #[test]
    fn a_bug_is_planted_only_in_a_build_with_the_feature() {
        let mut planted = PlantedBugs::NONE;
        let r = planted.plant(Bug::AmnesiacVoter);
        assert_eq!(r.is_ok(), BUILT);
        if !BUILT {
            assert_eq!(r, Err(NotBuilt));
            assert!(r.err().is_some_and(|e| e.to_string() == PLANTED_BUGS_OFF));
            assert!(planted.is_empty());
        }
        assert_eq!(planted.has(Bug::AmnesiacVoter), BUILT);
        assert!(!planted.has(Bug::ForgetSentOps));
        let both = planted.union(PlantedBugs::NONE);
        assert_eq!(both, planted);
    }
}
