//! A plan that evens out the hash slots of the built-in data over the
//! shards a map lists (`creek shards rebalance`): the moves to make, one
//! after another, each the tail of one range of the shard with the most
//! slots over its share to the shard with the most under it. Keys are
//! hashed evenly over the slots, so even slots are even keys (and, with a
//! uniform load, even load).

use crate::{MapError, Move, MoveKeys, Placement, ShardId, ShardMap, SLOTS};

/// Each listed shard's slots of the default placement (0 for a shard that
/// owns none), by shard.
fn slots_owned(map: &ShardMap) -> Option<std::collections::BTreeMap<ShardId, u32>> {
    let Placement::Hashed(ranges) = &map.default else {
        return None;
    };
    let mut owned: std::collections::BTreeMap<ShardId, u32> =
        map.shards.keys().map(|s| (*s, 0)).collect();
    for (i, (first, shard)) in ranges.iter().enumerate() {
        let end = ranges.get(i + 1).map_or(SLOTS, |(f, _)| *f);
        *owned.entry(*shard).or_default() += u32::from(end - first);
    }
    Some(owned)
}

/// The moves that give every listed shard its even share of the slots
/// (`SLOTS / n`, the first `SLOTS % n` shards by id one more), in order,
/// each valid in the map the ones before it leave; empty if the slots are
/// even already, or the built-in data is not hashed. Refused while a move
/// is in flight or finishing.
pub fn rebalance_slots(map: &ShardMap) -> Result<Vec<Move>, MapError> {
    if let Some(m) = map.moving.as_ref().or(map.finishing.as_ref()) {
        return Err(MapError::BadMove {
            what: m.to_string(),
            why: "a move is under way: rebalance once it is over".into(),
        });
    }
    let mut map = map.clone();
    let mut moves = Vec::new();
    while let Some(owned) = slots_owned(&map) {
        let n = owned.len() as u32;
        if n == 0 {
            break;
        }
        let (base, extra) = (u32::from(SLOTS) / n, u32::from(SLOTS) % n);
        let share = |i: usize| base + u32::from((i as u32) < extra);
        let off: Vec<(ShardId, i64)> = owned
            .iter()
            .enumerate()
            .map(|(i, (s, have))| (*s, i64::from(*have) - i64::from(share(i))))
            .collect();
        let Some(&(donor, surplus)) = off.iter().max_by_key(|(s, d)| (*d, std::cmp::Reverse(*s)))
        else {
            break;
        };
        let Some(&(taker, deficit)) = off.iter().min_by_key(|(s, d)| (*d, *s)) else {
            break;
        };
        if surplus <= 0 || deficit >= 0 {
            break;
        }
        // The tail of the donor's last range.
        let Placement::Hashed(ranges) = &map.default else {
            break;
        };
        let Some(at) = ranges.iter().rposition(|(_, s)| *s == donor) else {
            break;
        };
        let first = ranges[at].0;
        let end = ranges.get(at + 1).map_or(SLOTS, |(f, _)| *f);
        let take = surplus.min(-deficit).min(i64::from(end - first));
        let take = u16::try_from(take).unwrap_or(end - first);
        let m = Move {
            keyspace: None,
            keys: MoveKeys::Slots {
                first: end - take,
                end,
            },
            from: donor,
            to: taker,
        };
        let begun = map.begin_move(map.epoch, m.clone())?;
        let switched = begun.switch_move(begun.epoch)?;
        map = switched.finish_move(switched.epoch)?;
        moves.push(m);
        if moves.len() > 4 * usize::from(SLOTS) {
            break; // cannot happen: each move settles a donor's or taker's gap
        }
    }
    Ok(moves)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Shard;

    fn apply(map: &ShardMap, moves: &[Move]) -> ShardMap {
        let mut map = map.clone();
        for m in moves {
            let begun = map.begin_move(map.epoch, m.clone()).unwrap();
            let switched = begun.switch_move(begun.epoch).unwrap();
            map = switched.finish_move(switched.epoch).unwrap();
        }
        map
    }

    #[test]
    fn an_even_map_needs_no_move_and_a_new_shard_gets_its_share() {
        let ids: Vec<ShardId> = (0..2).map(ShardId).collect();
        let map = ShardMap::hashed(1, &ids);
        assert!(rebalance_slots(&map).unwrap().is_empty());
        for added in 1..=3u16 {
            let mut grown = map.clone();
            for s in 0..added {
                grown.shards.insert(ShardId(2 + s), Shard::default());
            }
            let plan = rebalance_slots(&grown).unwrap();
            assert!(!plan.is_empty());
            let after = apply(&grown, &plan);
            let owned = slots_owned(&after).unwrap();
            let n = owned.len() as u32;
            for (i, have) in owned.values().enumerate() {
                let want = u32::from(SLOTS) / n + u32::from((i as u32) < u32::from(SLOTS) % n);
                assert_eq!(*have, want, "{owned:?}");
            }
            assert!(rebalance_slots(&after).unwrap().is_empty());
        }
        // A shard drained by hand gets its share back.
        let mut lopsided = map.clone();
        lopsided.default = Placement::Hashed(vec![(0, ShardId(0)), (4000, ShardId(1))]);
        let plan = rebalance_slots(&lopsided).unwrap();
        assert_eq!(plan.len(), 1);
        assert_eq!(
            plan[0].keys,
            MoveKeys::Slots {
                first: 2048,
                end: 4000
            }
        );
    }

    #[test]
    fn no_plan_while_a_move_is_under_way() {
        let ids: Vec<ShardId> = (0..2).map(ShardId).collect();
        let map = ShardMap::hashed(1, &ids);
        let m = Move {
            keyspace: None,
            keys: MoveKeys::Slots { first: 0, end: 10 },
            from: ShardId(0),
            to: ShardId(1),
        };
        let begun = map.begin_move(map.epoch, m).unwrap();
        assert!(rebalance_slots(&begun).is_err());
    }
}
