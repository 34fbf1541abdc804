//! Stable times on a running replica (docs/snapshot-reads.md, "Stable
//! times"; the protocol is [`creek_node::stable`]'s): the node's settings,
//! made from `[snapshot]` and the shard map the replica starts with, and
//! what the replica's status says of the times. Shard leaders' publications
//! travel to the other shards with the messages of operations across
//! shards ([`crate::mpo::Link::push_stable`]); reports within a group are
//! peer messages like any other.
//!
//! Not for deciding anything about the times: the node computes them.

use creek_node::stable::{StableConfig, StableTimes};

use crate::config::ServerConfig;
use crate::shards::{Role, ShardGate};

/// The node's stable-time settings for `config`'s replica, whose shard
/// map (if any) `gate` holds.
///
/// The shard list is the map's when the replica starts: a shard added to
/// the map later is not waited for (and its publications are ignored)
/// until the replica restarts (docs/operations.md, "Stable times"). A
/// directory replica keeps no stable times: the global stable time is the
/// least over the shards only.
pub(crate) fn config(config: &ServerConfig, gate: Option<&ShardGate>) -> StableConfig {
    let every_ms = config.snapshot.stable_every_ms;
    match gate.map(|g| (g.role(), g.map())) {
        None => StableConfig {
            every_us: every_ms.unwrap_or(0) * 1000,
            ..StableConfig::default()
        },
        Some((Role::Directory, _)) => StableConfig::default(),
        Some((Role::Shard(me), map)) => StableConfig {
            every_us: every_ms.unwrap_or(crate::config::STABLE_EVERY_MS_SHARDS) * 1000,
            shard: Some(u32::from(me.0)),
            shards: map.shards.keys().map(|s| u32::from(s.0)).collect(),
            ..StableConfig::default()
        },
    }
}

/// The stable-time figures of a replica's status (its counters): the
/// group's and the global stable time (µs since the Unix epoch, 0: not
/// known yet), how old each is at `now_us` (ms; only once known), and the
/// clock no-ops this replica committed as an idle leader.
pub(crate) fn counters(times: &StableTimes, now_us: u64, mut put: impl FnMut(&str, u64)) {
    put("stable_group_us", times.group());
    put("stable_global_us", times.global());
    put("clock_noops", times.clock_noops());
    for (name, t) in [
        ("stable_group_age_ms", times.group()),
        ("stable_global_age_ms", times.global()),
    ] {
        if t > 0 {
            put(name, now_us.saturating_sub(t) / 1000);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::path::PathBuf;
    use std::sync::Arc;

    #[test]
    fn a_shard_waits_for_every_shard_of_its_map_and_the_directory_for_none() {
        let d = std::env::temp_dir().join(format!("creek-stable-config-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let (configs, map) = crate::shards::local_shards(3, 1, 1, 22001, 22101, &d, 7).unwrap();
        crate::shards::write_map_files(&configs, &map).unwrap();
        let registry = Arc::new(creek_procs::Registry::with_builtins());
        let gate = |i: usize| {
            ShardGate::load(&configs[i], registry.clone())
                .unwrap()
                .unwrap()
        };
        let second = config(&configs[1], Some(&gate(1)));
        assert_eq!(
            (second.every_us, second.shard, second.shards),
            (5_000, Some(1), vec![0, 1, 2])
        );
        let directory = config(&configs[3], Some(&gate(3)));
        assert_eq!(directory, StableConfig::default(), "off: {directory:?}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_group_of_its_own_keeps_stable_times_only_when_asked() {
        let c = ServerConfig::new(1, Vec::new(), PathBuf::from("/tmp/x"));
        let s = config(&c, None);
        assert_eq!(s.every_us, 0, "off by default");
        assert_eq!((s.shard, s.shards.len()), (None, 0));
        let mut on = c.clone();
        on.snapshot.stable_every_ms = Some(5);
        assert_eq!(config(&on, None).every_us, 5_000);
    }
}
