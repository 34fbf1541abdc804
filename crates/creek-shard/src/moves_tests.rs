//! Moves as map changes (`moves.rs`): each step checked by `check_next`,
//! the switch giving exactly the moving keys to their new shard, what may
//! not begin, a shard dropped only once it owns nothing, and the byte
//! format carrying a move.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use proptest::prelude::*;

use crate::*;

fn s(n: u16) -> ShardId {
    ShardId(n)
}

/// Three shards, hashed by default; keyspace `orders` by ranges (shard 0
/// below "m", shard 1 from it), `config` pinned on shard 1; shard 2 owns
/// slots 2730.. of the default.
fn three_shards() -> ShardMap {
    crate::tests::with_keyspaces(ShardMap::hashed(42, &[s(0), s(1), s(2)]))
}

fn slots(first: u16, end: u16, from: u16, to: u16) -> Move {
    Move {
        keyspace: None,
        keys: MoveKeys::Slots { first, end },
        from: s(from),
        to: s(to),
    }
}

/// A move through all of its steps: every step follows the one before
/// (`check_next`), and after the switch exactly the moving keys have the
/// new owner.
fn walk(map: &ShardMap, m: Move, keyspace: Option<&str>, keys: &[&[u8]]) -> ShardMap {
    let begun = map.begin_move(map.epoch, m.clone()).unwrap();
    map.check_next(&begun).unwrap();
    assert_eq!(begun.moving.as_ref(), Some(&m));
    for key in keys {
        assert_eq!(
            begun.owner(keyspace, key),
            map.owner(keyspace, key),
            "owned until the switch"
        );
    }
    let switched = begun.switch_move(begun.epoch).unwrap();
    begun.check_next(&switched).unwrap();
    map.check_later(&switched).unwrap();
    assert_eq!(
        (switched.moving.as_ref(), switched.finishing.as_ref()),
        (None, Some(&m))
    );
    assert_eq!(switched.moved, map.moved + 1);
    // No move begins while it finishes.
    assert!(matches!(
        switched.begin_move(switched.epoch, m.clone()),
        Err(MapError::BadMove { why, .. }) if why.contains("finishing")
    ));
    assert_eq!(decode(&encode(&switched)).unwrap(), switched);
    for key in keys {
        let want = if m.keys.contains(key) {
            m.to
        } else {
            map.owner(keyspace, key)
        };
        assert_eq!(switched.owner(keyspace, key), want, "{key:?}");
    }
    assert_eq!(decode(&encode(&begun)).unwrap(), begun);
    let finished = switched.finish_move(switched.epoch).unwrap();
    switched.check_next(&finished).unwrap();
    assert_eq!(finished.finishing, None);
    assert!(switched.drop_shard(switched.epoch, m.from).is_err());
    finished
}

/// `map` with `m` begun and switched: the move finishing.
fn walk_to_finishing(map: &ShardMap, m: Move) -> ShardMap {
    let begun = map.begin_move(map.epoch, m).unwrap();
    begun.switch_move(begun.epoch).unwrap()
}

fn some_keys() -> Vec<Vec<u8>> {
    (0..2000).map(|i| format!("k{i}").into_bytes()).collect()
}

#[test]
fn slots_move_and_only_they_change_owner() {
    let map = three_shards();
    let keys = some_keys();
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let moved = walk(&map, slots(100, 200, 0, 2), None, &keys);
    // Back again: the slots rejoin their neighbours in one range.
    let back = walk(&moved, slots(100, 200, 2, 0), None, &keys);
    assert_eq!(back.default, map.default);
    assert_eq!(back.moved, 2);
}

#[test]
fn key_ranges_and_pinned_keyspaces_move() {
    let map = three_shards();
    let keys: Vec<&[u8]> = vec![b"", b"a", b"f", b"g", b"gz", b"l", b"m", b"z"];
    let range = Move {
        keyspace: Some("orders".into()),
        keys: MoveKeys::Range {
            first: Bytes::from_static(b"f"),
            end: Some(Bytes::from_static(b"h")),
        },
        from: s(0),
        to: s(2),
    };
    let moved = walk(&map, range, Some("orders"), &keys);
    assert_eq!(
        moved.keyspaces["orders"],
        Placement::Ranges(vec![
            (Bytes::new(), s(0)),
            (Bytes::from_static(b"f"), s(2)),
            (Bytes::from_static(b"h"), s(0)),
            (Bytes::from_static(b"m"), s(1)),
        ])
    );
    // To the end of the key space.
    let tail = Move {
        keyspace: Some("orders".into()),
        keys: MoveKeys::Range {
            first: Bytes::from_static(b"m"),
            end: None,
        },
        from: s(1),
        to: s(2),
    };
    walk(&map, tail, Some("orders"), &keys);
    let pinned = Move {
        keyspace: Some("config".into()),
        keys: MoveKeys::All,
        from: s(1),
        to: s(0),
    };
    let moved = walk(&map, pinned, Some("config"), &keys);
    assert_eq!(moved.keyspaces["config"], Placement::Pinned(s(0)));
}

#[test]
fn a_move_that_cannot_be_is_refused_and_the_map_is_unchanged() {
    let map = three_shards();
    let bad = |m: Move| match map.begin_move(map.epoch, m) {
        Err(MapError::BadMove { why, .. }) => why,
        other => panic!("refused as a bad move, got {other:?}"),
    };
    assert!(bad(slots(100, 200, 1, 2)).contains("shard 1 does not own all of them"));
    assert!(bad(slots(200, 100, 0, 2)).contains("a range within"));
    assert!(bad(slots(0, 5000, 0, 2)).contains("a range within"));
    assert!(bad(slots(100, 200, 0, 0)).contains("stay where they are"));
    assert!(bad(slots(100, 200, 0, 7)).contains("does not list shard 7"));
    let of = |keyspace: &str, keys: MoveKeys| Move {
        keyspace: Some(keyspace.into()),
        keys,
        from: s(1),
        to: s(0),
    };
    assert!(bad(of("config", MoveKeys::Slots { first: 0, end: 1 })).contains("kind"));
    assert!(bad(of("nowhere", MoveKeys::All)).contains("no placement of its own"));
    assert!(
        map.begin_move(map.epoch + 1, slots(0, 1, 0, 1)).is_err(),
        "stale epoch"
    );
    // One move at a time; a switch or cancel needs one.
    let begun = map.begin_move(map.epoch, slots(0, 10, 0, 1)).unwrap();
    let second = begun.begin_move(begun.epoch, slots(10, 20, 0, 1));
    assert!(matches!(second, Err(MapError::BadMove { why, .. }) if why.contains("in flight")));
    assert_eq!(map.switch_move(map.epoch), Err(MapError::NoMove));
    assert_eq!(map.cancel_move(map.epoch), Err(MapError::NoMove));
    // Cancelled: nothing changed owner.
    let cancelled = begun.cancel_move(begun.epoch).unwrap();
    begun.check_next(&cancelled).unwrap();
    assert_eq!(
        (cancelled.default.clone(), cancelled.moved),
        (map.default.clone(), 0)
    );
}

#[test]
fn keys_change_owner_only_through_a_switch() {
    let map = three_shards();
    let begun = map.begin_move(map.epoch, slots(0, 10, 0, 1)).unwrap();
    // A switch that gives away more than the moving slots.
    let mut greedy = begun.switch_move(begun.epoch).unwrap();
    greedy.default = Placement::Pinned(s(1));
    assert!(matches!(
        begun.check_next(&greedy),
        Err(MapError::MovesKeys { .. })
    ));
    // Keys given away with no move, counted as a move or not.
    let mut sneaky = map.clone();
    sneaky.epoch += 1;
    sneaky.default = Placement::even_slots(&[s(1), s(0), s(2)]);
    assert!(matches!(
        map.check_next(&sneaky),
        Err(MapError::MovesKeys { .. })
    ));
    sneaky.moved = 1;
    assert!(matches!(
        map.check_next(&sneaky),
        Err(MapError::MovesKeys { .. })
    ));
    // A move that begins while keys change owner.
    let mut both = begun.clone();
    both.keyspaces
        .insert("config".into(), Placement::Pinned(s(0)));
    assert!(matches!(
        map.check_next(&both),
        Err(MapError::MovesKeys { .. })
    ));
    // A map that skipped epochs over a switch is taken; one counting fewer
    // switches is not.
    let switched = begun.switch_move(begun.epoch).unwrap();
    let mut later = switched.clone();
    later.epoch += 5;
    map.check_later(&later).unwrap();
    assert!(matches!(
        later.check_later(&{
            let mut older = map.clone();
            older.epoch = later.epoch + 1;
            older
        }),
        Err(MapError::MovesKeys { .. })
    ));
}

#[test]
fn a_shard_is_dropped_only_once_it_owns_nothing() {
    let map = three_shards();
    let refused = map.drop_shard(map.epoch, s(2));
    assert!(matches!(refused, Err(MapError::ShardNotEmpty { why, .. }) if why.contains("default")));
    let empty = walk(&map, slots(2730, 4096, 2, 0), None, &[]);
    assert!(!empty.default.shards().contains(&s(2)));
    let dropped = empty.drop_shard(empty.epoch, s(2)).unwrap();
    empty.check_next(&dropped).unwrap();
    assert!(!dropped.shards.contains_key(&s(2)));
    assert!(matches!(
        dropped.drop_shard(dropped.epoch, s(2)),
        Err(MapError::ShardNotEmpty { .. })
    ));
    // A holder of the map in which the last move out of the shard is
    // finishing takes the map that dropped it after the finish (an epoch
    // skipped).
    let draining = walk_to_finishing(&map, slots(2730, 4096, 2, 0));
    let finished = draining.finish_move(draining.epoch).unwrap();
    let gone = finished.drop_shard(finished.epoch, s(2)).unwrap();
    draining.check_later(&gone).unwrap();
    assert!(draining.drop_shard(draining.epoch, s(2)).is_err());
    // A new shard, added empty, may take part in a move at once.
    let mut grown = dropped.clone();
    grown.shards.insert(s(3), Shard::default());
    grown.epoch += 1;
    dropped.check_next(&grown).unwrap();
    walk(&grown, slots(0, 100, 0, 3), None, &[b"a"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any slot range of one owner moves to any other shard and back, and
    /// every key's owner after the switch is the move's or the old one.
    #[test]
    fn any_slot_range_moves(first in 0u16..4095, len in 1u16..600, to in 0u16..3) {
        let map = three_shards();
        let end = (first + len).min(SLOTS);
        let Placement::Hashed(ranges) = &map.default else { unreachable!() };
        let at = ranges.partition_point(|(f, _)| *f <= first) - 1;
        let from = ranges[at].1;
        let owned_to = ranges.get(at + 1).map_or(SLOTS, |(f, _)| *f);
        let m = Move { keyspace: None, keys: MoveKeys::Slots { first, end }, from, to: s(to) };
        let begun = map.begin_move(map.epoch, m.clone());
        if end <= owned_to && from != s(to) {
            prop_assert!(begun.is_ok(), "{begun:?}");
            let keys = some_keys();
            let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            walk(&map, m, None, &keys);
        } else {
            prop_assert!(matches!(begun, Err(MapError::BadMove { .. })), "{begun:?}");
        }
    }
}

/// The bytes of a map with a move in flight, as the Python client's test
/// decodes them (clients/python/tests/test_shards.py).
#[test]
fn the_byte_format_of_a_move_is_the_one_other_clients_read() {
    let mut map = ShardMap::hashed(7, &[s(0), s(1)]);
    map.epoch = 2;
    map.moved = 1;
    map.moving = Some(slots(10, 20, 0, 1));
    let want = [
        3, 7, 2, 2, 0, 0, 1, 0, 1, 2, 0, 0, 0x80, 0x10, 1, 0, 0, 1, 1, 0, 0, 10, 20, 0, 1,
    ];
    assert_eq!(&encode(&map)[..], &want[..]);
}
