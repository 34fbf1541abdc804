#![allow(clippy::unwrap_used)]

use super::*;
use crate::codec::MapDecodeError;
use bytes::Bytes;
use creek_types::DecodeError;
use proptest::prelude::*;

fn s(n: u16) -> ShardId {
    ShardId(n)
}

fn endpoint(port: u16) -> Endpoint {
    Endpoint {
        client: format!("127.0.0.1:{port}"),
        peer: format!("127.0.0.1:{}", port + 100),
    }
}

/// Two shards of three replicas (ids 1-3 and 4-6), hashed by default, one
/// keyspace by ranges and one pinned.
fn two_shards() -> ShardMap {
    let mut map = ShardMap::hashed(42, &[s(0), s(1)]);
    for (shard, ids) in [(s(0), 1..=3u16), (s(1), 4..=6)] {
        let replicas = ids.map(|r| (r, endpoint(7000 + r))).collect();
        map.shards.insert(shard, Shard { replicas });
    }
    with_keyspaces(map)
}

/// `map` with keyspace `orders` by ranges (shard 0 below "m", shard 1
/// from it) and `config` pinned on shard 1; checked.
pub(crate) fn with_keyspaces(mut map: ShardMap) -> ShardMap {
    map.keyspaces.insert(
        "orders".into(),
        Placement::Ranges(vec![(Bytes::new(), s(0)), (Bytes::from_static(b"m"), s(1))]),
    );
    map.keyspaces
        .insert("config".into(), Placement::Pinned(s(1)));
    map.validate().unwrap();
    map
}

#[test]
fn slots_follow_crc32_mixed_and_tags() {
    // The rule clients write again (Python: fmix32(zlib.crc32(key)) % 4096,
    // fmix32 being MurmurHash3's finalizer).
    assert_eq!(slot_of(b"user1"), 3027);
    assert_eq!(slot_of(b"acct/0"), 1003);
    assert_eq!(slot_of(b"{user1}.name"), slot_of(b"user1"));
    assert_eq!(slot_of(b"x{user1}y{z}"), slot_of(b"user1"));
    // An empty tag is no tag; an unclosed brace neither.
    assert_eq!(slot_of(b"{}user1"), 4063);
    assert_eq!(slot_of(b"{user1"), 3731);
}

/// Keys that differ only in their last characters spread over the
/// shards (a bare CRC would put all eight of each on one of two).
#[test]
fn sequential_keys_spread() {
    let map = ShardMap::hashed(1, &[s(0), s(1)]);
    for stem in ["r", "n", "acct/"] {
        let on_first = (0..8)
            .filter(|i| map.owner(None, format!("{stem}{i}").as_bytes()) == s(0))
            .count();
        assert!(
            (1..8).contains(&on_first),
            "{stem}: {on_first} of 8 on shard 0"
        );
    }
}

#[test]
fn owners_by_placement() {
    let map = two_shards();
    assert_eq!(map.owner(Some("orders"), b""), s(0));
    assert_eq!(map.owner(Some("orders"), b"apple"), s(0));
    assert_eq!(map.owner(Some("orders"), b"m"), s(1));
    assert_eq!(map.owner(Some("orders"), b"zebra"), s(1));
    assert_eq!(map.owner(Some("config"), b"anything"), s(1));
    // A keyspace without its own placement follows the default.
    assert_eq!(map.owner(Some("other"), b"k"), map.owner(None, b"k"));
}

#[test]
fn the_default_hash_spreads_keys_evenly() {
    let map = ShardMap::hashed(1, &[s(0), s(1), s(2), s(3)]);
    let mut count = [0u32; 4];
    for i in 0..40_000 {
        count[usize::from(map.owner(None, format!("user{i}").as_bytes()).0)] += 1;
    }
    for c in count {
        assert!((9_000..11_000).contains(&c), "{count:?}");
    }
}

#[test]
fn a_prefix_has_one_owner_only_where_the_placement_keeps_its_keys_together() {
    let map = two_shards();
    // Pinned: always its shard.
    assert_eq!(map.placement(Some("config")).owners_of_prefix(b""), [s(1)]);
    // Ranges ("orders": [.., "m") on s0, ["m", ..) on s1): a prefix inside
    // one range, one that straddles the boundary, the empty prefix.
    let orders = map.placement(Some("orders"));
    assert_eq!(orders.owners_of_prefix(b"apple/"), [s(0)]);
    assert_eq!(orders.owners_of_prefix(b"m"), [s(1)]);
    assert_eq!(orders.owners_of_prefix(b"zz"), [s(1)]);
    assert_eq!(orders.owners_of_prefix(b""), [s(0), s(1)]);
    // Hashed: a whole {tag} in the prefix keeps every key with it on its
    // slot's shard; without one, keys may be anywhere.
    let hashed = ShardMap::hashed(1, &[s(0), s(1), s(2)]);
    let placement = hashed.placement(None);
    let tagged = placement.owners_of_prefix(b"{user7}/");
    assert_eq!(tagged, [hashed.owner(None, b"{user7}/anything")]);
    assert_eq!(placement.owners_of_prefix(b"user7/"), [s(0), s(1), s(2)]);
    assert_eq!(placement.owners_of_prefix(b"{user7"), [s(0), s(1), s(2)]);
    assert_eq!(placement.owners_of_prefix(b"{}x"), [s(0), s(1), s(2)]);
    // Routing by keys and prefixes together.
    let a = KeyRef::Key(b"apple");
    let p = KeyRef::Prefix(b"apple/");
    assert_eq!(
        map.route_declared([(Some("orders"), a), (Some("orders"), p)]),
        Ok(s(0))
    );
    assert_eq!(
        map.route_declared([(Some("orders"), a), (Some("orders"), KeyRef::Prefix(b""))]),
        Err(RouteError::Spans {
            shards: vec![s(0), s(1)]
        })
    );
}

#[test]
fn prefix_ends() {
    assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
    assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
    assert_eq!(prefix_end(b"\xff\xff"), None);
    assert_eq!(prefix_end(b""), None);
}

#[test]
fn routes_one_shard_or_names_the_shards() {
    let map = two_shards();
    let a: &[u8] = b"apple";
    let z: &[u8] = b"zebra";
    assert_eq!(map.route([(Some("orders"), a)]), Ok(s(0)));
    assert_eq!(
        map.route([(Some("orders"), a), (Some("orders"), a)]),
        Ok(s(0))
    );
    let spans = map.route([(Some("orders"), z), (Some("orders"), a)]);
    assert_eq!(
        spans,
        Err(RouteError::Spans {
            shards: vec![s(0), s(1)]
        })
    );
    assert_eq!(
        spans.unwrap_err().to_string(),
        "the operation's keys live on shards s0, s1"
    );
    assert_eq!(map.route(std::iter::empty()), Err(RouteError::NoKeys));
    assert_eq!(map.shard_of_replica(5), Some(s(1)));
    assert_eq!(map.shard_of_replica(9), None);
}

#[test]
fn invalid_maps_are_refused_with_the_reason() {
    let mut map = two_shards();
    map.keyspaces.insert("lost".into(), Placement::Pinned(s(7)));
    assert_eq!(
        map.validate(),
        Err(MapError::UnknownShard {
            what: "keyspace lost".into(),
            shard: s(7)
        })
    );
    let mut map = two_shards();
    map.shards
        .get_mut(&s(1))
        .unwrap()
        .replicas
        .insert(2, endpoint(1));
    assert_eq!(
        map.validate(),
        Err(MapError::ReplicaTwice {
            replica: 2,
            first: s(0),
            second: s(1)
        })
    );
    let bad = [
        Placement::Hashed(vec![(1, s(0))]),
        Placement::Hashed(vec![(0, s(0)), (0, s(1))]),
        Placement::Hashed(vec![(0, s(0)), (SLOTS, s(1))]),
        Placement::Ranges(vec![(Bytes::from_static(b"a"), s(0))]),
        Placement::Ranges(vec![
            (Bytes::new(), s(0)),
            (Bytes::from_static(b"m"), s(1)),
            (Bytes::from_static(b"c"), s(0)),
        ]),
        Placement::Ranges(Vec::new()),
    ];
    for p in bad {
        let map = two_shards();
        let err = map.place(map.epoch, None, p.clone()).unwrap_err();
        assert!(matches!(err, MapError::BadRanges { .. }), "{p:?}: {err}");
    }
    let empty = ShardMap {
        shards: BTreeMap::new(),
        ..ShardMap::hashed(1, &[])
    };
    assert_eq!(empty.validate(), Err(MapError::NoShards));
}

#[test]
fn a_change_makes_the_next_epoch_and_a_stale_one_is_refused() {
    let map = two_shards();
    let next = map
        .place(map.epoch, Some("config"), Placement::Pinned(s(0)))
        .unwrap();
    assert_eq!(next.epoch, map.epoch + 1);
    assert_eq!(next.owner(Some("config"), b"k"), s(0));
    assert_eq!(
        map.owner(Some("config"), b"k"),
        s(1),
        "the old map is unchanged"
    );
    assert_eq!(
        next.place(map.epoch, None, Placement::Pinned(s(0))),
        Err(MapError::StaleEpoch {
            expected: map.epoch,
            actual: next.epoch
        })
    );
}

#[test]
fn encodes_and_decodes() {
    let map = two_shards();
    let bytes = encode(&map);
    assert_eq!(decode(&bytes).unwrap(), map);
    let single = ShardMap::single(9, Shard::default());
    assert_eq!(decode(&encode(&single)).unwrap(), single);
    let mut directed = two_shards();
    directed.directory = group(&[7, 8, 9]);
    assert_eq!(decode(&encode(&directed)).unwrap(), directed);
}

#[test]
fn the_first_format_decodes_without_a_directory() {
    let map = two_shards();
    // Version 2 is version 3 without the moves (a count and a flag) at
    // the end; version 1 is version 2 without the directory's count.
    let mut v2 = encode(&map).to_vec();
    v2[0] = 2;
    v2.truncate(v2.len() - 2);
    assert_eq!(decode(&Bytes::from(v2.clone())).unwrap(), map);
    let mut v1 = v2;
    v1[0] = 1;
    v1.pop();
    assert_eq!(decode(&Bytes::from(v1)).unwrap(), map);
}

fn group(ids: &[u16]) -> Shard {
    Shard {
        replicas: ids
            .iter()
            .map(|id| {
                let e = Endpoint {
                    client: format!("127.0.0.1:{}", 7000 + id),
                    peer: format!("127.0.0.1:{}", 7100 + id),
                };
                (*id, e)
            })
            .collect(),
    }
}

#[test]
fn a_directory_replica_is_in_no_shard() {
    let mut map = two_shards();
    map.shards.get_mut(&s(1)).unwrap().replicas = group(&[4]).replicas;
    map.directory = group(&[4, 5, 6]);
    assert_eq!(
        map.validate(),
        Err(MapError::DirectoryReplica {
            replica: 4,
            shard: s(1)
        })
    );
}

#[test]
fn a_next_map_keeps_every_owner() {
    let map = two_shards();
    let next = |f: &dyn Fn(&mut ShardMap)| {
        let mut n = map.clone();
        n.epoch += 1;
        f(&mut n);
        map.check_next(&n)
    };
    // Members, addresses, new keyspaces, new shards: fine.
    assert_eq!(next(&|n| n.directory = group(&[7, 8, 9])), Ok(()));
    assert_eq!(
        next(&|n| {
            n.keyspaces.insert("fresh".into(), Placement::Pinned(s(1)));
        }),
        Ok(())
    );
    assert_eq!(
        next(&|n| {
            n.shards.insert(s(2), Shard::default());
        }),
        Ok(())
    );
    // Another cluster, an epoch that is not the next, moved keys.
    assert!(matches!(
        next(&|n| n.cluster += 1),
        Err(MapError::OtherCluster { .. })
    ));
    assert_eq!(
        next(&|n| n.epoch += 1),
        Err(MapError::EpochNotNext {
            expected: map.epoch + 1,
            actual: map.epoch + 2
        })
    );
    assert!(matches!(
        next(&|n| n.default = Placement::Pinned(s(0))),
        Err(MapError::MovesKeys { .. })
    ));
    assert!(matches!(
        next(&|n| {
            n.keyspaces.clear();
        }),
        Err(MapError::MovesKeys { .. })
    ));
    assert!(matches!(
        next(&|n| {
            n.shards.remove(&s(1));
            n.default = map.default.clone();
        }),
        Err(MapError::UnknownShard { .. }) | Err(MapError::MovesKeys { .. })
    ));
}

#[test]
fn a_later_map_may_skip_epochs_but_not_move_keys() {
    let map = two_shards();
    let later = |epoch: u64, f: &dyn Fn(&mut ShardMap)| {
        let mut n = map.clone();
        n.epoch = epoch;
        f(&mut n);
        map.check_later(&n)
    };
    assert_eq!(
        later(map.epoch + 3, &|n| n.directory = group(&[7, 8])),
        Ok(())
    );
    assert_eq!(
        later(map.epoch, &|_| {}),
        Err(MapError::EpochNotLater {
            current: map.epoch,
            actual: map.epoch
        })
    );
    assert!(matches!(
        later(map.epoch + 2, &|n| n.default = Placement::Pinned(s(0))),
        Err(MapError::MovesKeys { .. })
    ));
    assert!(matches!(
        later(map.epoch + 2, &|n| n.cluster += 1),
        Err(MapError::OtherCluster { .. })
    ));
}

#[test]
fn malformed_bytes_are_refused_with_the_reason() {
    let map = two_shards();
    let good = encode(&map).to_vec();
    let mut v = good.clone();
    v[0] = 9;
    assert_eq!(decode(&Bytes::from(v)), Err(MapDecodeError::Version(9)));
    let mut v = good.clone();
    v.push(0);
    assert!(matches!(
        decode(&Bytes::from(v)),
        Err(MapDecodeError::Decode(DecodeError::TrailingBytes { .. }))
    ));
    // Valid bytes of an invalid map: a placement on a shard not listed.
    let mut bad = map.clone();
    bad.default = Placement::Pinned(s(3));
    assert!(matches!(
        decode(&encode(&bad)),
        Err(MapDecodeError::Invalid(MapError::UnknownShard { .. }))
    ));
    // A keyspace listed twice (the encoding of a map is canonical: each
    // once, in order).
    // The encoding ends with the keyspace count, the keyspaces, the
    // directory's (empty) replica count and the moves (none).
    let base = encode(&ShardMap {
        keyspaces: BTreeMap::new(),
        ..map.clone()
    });
    let full = encode(&map);
    let one = encode(&ShardMap {
        keyspaces: [("config".to_owned(), Placement::Pinned(s(1)))].into(),
        ..map.clone()
    });
    let tail = [0, 0, 0];
    let head = base.len() - 1 - tail.len();
    // The keyspace count from 2 to 3, "config" again after the others.
    let mut twice = base[..head].to_vec();
    twice.push(3);
    twice.extend_from_slice(&full[head + 1..full.len() - tail.len()]);
    twice.extend_from_slice(&one[head + 1..one.len() - tail.len()]);
    twice.extend_from_slice(&tail);
    assert!(matches!(
        decode(&Bytes::from(twice)),
        Err(MapDecodeError::Repeated {
            what: "a keyspace name",
            ..
        })
    ));
    for cut in 0..good.len() {
        assert!(decode(&Bytes::copy_from_slice(&good[..cut])).is_err());
    }
}

proptest! {
    /// Whatever the bytes, decoding returns (a valid map or an error) and
    /// never panics; what decodes encodes back to the same bytes.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let bytes = Bytes::from(bytes);
        if let Ok(map) = decode(&bytes) {
            prop_assert!(map.validate().is_ok());
            prop_assert_eq!(decode(&encode(&map)).unwrap(), map);
        }
    }

    /// Every key starting with a prefix is owned by one of the shards
    /// `owners_of_prefix` names.
    #[test]
    fn a_prefix_names_every_owner_of_its_keys(
        prefix in proptest::collection::vec(prop_oneof![Just(b'{'), Just(b'}'), Just(b'm'), any::<u8>()], 0..4),
        rest in proptest::collection::vec(prop_oneof![Just(b'{'), Just(b'}'), any::<u8>()], 0..4),
    ) {
        let key = [prefix.as_slice(), rest.as_slice()].concat();
        let hashed = ShardMap::hashed(1, &[s(0), s(1), s(2)]);
        let ranges = two_shards();
        for (map, ks) in [(&hashed, None), (&ranges, Some("orders"))] {
            let owners = map.placement(ks).owners_of_prefix(&prefix);
            prop_assert!(owners.contains(&map.owner(ks, &key)), "{:?} {:?}", prefix, key);
        }
    }

    /// Every key has exactly the owner its placement's entries say.
    #[test]
    fn range_owner_is_the_last_range_at_or_below(key in proptest::collection::vec(any::<u8>(), 0..8)) {
        let map = two_shards();
        let want = if key.as_slice() < b"m".as_slice() { s(0) } else { s(1) };
        prop_assert_eq!(map.owner(Some("orders"), &key), want);
    }
}
