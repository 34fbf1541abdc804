//! Identifiers shared by every Creek component: replica ids, operation ids
//! (the paper's `(origin, seq)` event identifiers) and hybrid-logical-clock
//! timestamps.
//!
//! All types here are small `Copy` values with a total order, a compact
//! `Display` form for logs, and serde support for the wire.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Identifier of one replica in the cluster.
///
/// Displayed as `r{n}`, e.g. `r3`.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default, Serialize, Deserialize,
)]
pub struct ReplicaId(pub u16);

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// Identifier of one operation (event): the replica that issued it and that
/// replica's event counter, which starts at 1 (0 is never a valid `seq`).
///
/// Ordered lexicographically by `(origin, seq)`, as the paper compares id
/// pairs. Displayed as `r{origin}.{seq}`, e.g. `r3.17`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct OpId {
    /// Replica that issued the operation.
    pub origin: ReplicaId,
    /// The origin's event counter for this operation, starting at 1.
    pub seq: u64,
}

impl OpId {
    /// Builds the id of the `seq`-th event of replica `origin`.
    pub const fn new(origin: ReplicaId, seq: u64) -> OpId {
        OpId { origin, seq }
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.origin, self.seq)
    }
}

/// The `Display` form back: `r3.17`.
impl std::str::FromStr for OpId {
    type Err = String;

    fn from_str(s: &str) -> Result<OpId, String> {
        let bad = || format!("{s:?} is not an op id (r<replica>.<seq>)");
        let (origin, seq) = s
            .strip_prefix('r')
            .and_then(|r| r.split_once('.'))
            .ok_or_else(bad)?;
        Ok(OpId::new(
            ReplicaId(origin.parse().map_err(|_| bad())?),
            seq.parse().map_err(|_| bad())?,
        ))
    }
}

/// A hybrid-logical-clock value: physical microseconds in the upper 52 bits
/// and a logical counter in the lower 12 bits of one `u64`.
///
/// Ordered by the raw `u64`, i.e. by physical time, then by logical counter.
/// Displayed as `{physical_us}+{logical}`, e.g. `1700000000000000+3`.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default, Serialize, Deserialize,
)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// Number of low bits holding the logical counter.
    pub const LOGICAL_BITS: u32 = 12;
    /// Largest logical counter value (4095).
    pub const MAX_LOGICAL: u16 = (1 << Self::LOGICAL_BITS) - 1;
    /// Largest representable physical time in microseconds (2^52 - 1,
    /// about 142 years after the epoch).
    pub const MAX_PHYSICAL_US: u64 = (1 << (64 - Self::LOGICAL_BITS)) - 1;
    /// The smallest timestamp; every clock reading is greater than it.
    pub const ZERO: Timestamp = Timestamp(0);
    /// The largest timestamp.
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// Packs a physical time and a logical counter.
    ///
    /// Each component is clamped to its range independently:
    /// `physical_us` to [`Self::MAX_PHYSICAL_US`] and `logical` to
    /// [`Self::MAX_LOGICAL`]. Never panics.
    pub const fn new(physical_us: u64, logical: u16) -> Timestamp {
        let p = if physical_us > Self::MAX_PHYSICAL_US {
            Self::MAX_PHYSICAL_US
        } else {
            physical_us
        };
        let l = if logical > Self::MAX_LOGICAL {
            Self::MAX_LOGICAL
        } else {
            logical
        };
        Timestamp((p << Self::LOGICAL_BITS) | l as u64)
    }

    /// The physical part, in microseconds.
    pub const fn physical_us(self) -> u64 {
        self.0 >> Self::LOGICAL_BITS
    }

    /// The logical counter (always `<= MAX_LOGICAL`).
    pub const fn logical(self) -> u16 {
        (self.0 & Self::MAX_LOGICAL as u64) as u16
    }

    /// The next timestamp: logical counter plus one, carrying into the
    /// physical part (+1 µs, logical reset to 0) on overflow. Saturates at
    /// [`Self::MAX`].
    pub const fn successor(self) -> Timestamp {
        Timestamp(self.0.saturating_add(1))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.physical_us(), self.logical())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_and_op_display() {
        assert_eq!(ReplicaId(3).to_string(), "r3");
        assert_eq!(OpId::new(ReplicaId(3), 17).to_string(), "r3.17");
    }

    #[test]
    fn op_id_parses_its_display_form_only() {
        let id = OpId::new(ReplicaId(3), 17);
        assert_eq!(id.to_string().parse::<OpId>(), Ok(id));
        for bad in ["3.17", "r3", "r3.x", "rx.17", "r70000.1", ""] {
            assert!(bad.parse::<OpId>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn op_id_orders_by_origin_then_seq() {
        let a = OpId::new(ReplicaId(1), 9);
        let b = OpId::new(ReplicaId(2), 1);
        let c = OpId::new(ReplicaId(2), 2);
        assert!(a < b && b < c);
    }

    #[test]
    fn timestamp_packs_and_unpacks() {
        let t = Timestamp::new(1_700_000_000_000_000, 42);
        assert_eq!(t.physical_us(), 1_700_000_000_000_000);
        assert_eq!(t.logical(), 42);
        assert_eq!(t.to_string(), "1700000000000000+42");
        assert_eq!(Timestamp::ZERO, Timestamp::new(0, 0));
        assert_eq!(Timestamp::MAX, Timestamp::new(u64::MAX, u16::MAX));
    }

    #[test]
    fn timestamp_clamps_components() {
        let t = Timestamp::new(5, u16::MAX);
        assert_eq!((t.physical_us(), t.logical()), (5, Timestamp::MAX_LOGICAL));
        let t = Timestamp::new(u64::MAX, 1);
        assert_eq!(
            (t.physical_us(), t.logical()),
            (Timestamp::MAX_PHYSICAL_US, 1)
        );
    }

    #[test]
    fn timestamp_orders_physical_first() {
        assert!(Timestamp::new(1, 4095) < Timestamp::new(2, 0));
        assert!(Timestamp::new(2, 0) < Timestamp::new(2, 1));
    }

    #[test]
    fn successor_carries_and_saturates() {
        assert_eq!(Timestamp::new(7, 3).successor(), Timestamp::new(7, 4));
        assert_eq!(Timestamp::new(7, 4095).successor(), Timestamp::new(8, 0));
        assert_eq!(Timestamp::MAX.successor(), Timestamp::MAX);
    }
}
