#![allow(clippy::unwrap_used)]

use super::*;
use creek_types::value::encode_args;

/// A directory of its own under the system's temporary one.
fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("creek-shard-gate-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A test's directory, removed when the test ends.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Two shards of three and a directory of three on loopback, the map
/// files written; with the first replica's map file, and the directory
/// holding them (removed when it is dropped).
fn cluster(name: &str) -> (Vec<ServerConfig>, ShardMap, std::path::PathBuf, Scratch) {
    let d = dir(name);
    let _ = std::fs::remove_dir_all(&d);
    let (configs, map) = local_shards(2, 3, 3, 21001, 21101, &d, 7).unwrap();
    write_map_files(&configs, &map).unwrap();
    let path = configs[0].shard_map.clone().unwrap();
    (configs, map, path, Scratch(d))
}

fn registry() -> Arc<Registry> {
    Arc::new(Registry::with_builtins())
}

fn call(name: &str, key: &str) -> ProcCall {
    ProcCall::new(name, encode_args(&[Value::from(key), Value::from("v")]))
}

#[test]
fn a_replica_accepts_its_keys_and_refuses_the_others() {
    let (configs, map, _, _scratch) = cluster("route");
    let gate = ShardGate::load(&configs[0], registry()).unwrap().unwrap();
    assert_eq!(gate.shard(), ShardId(0));
    let key_of = |s: u16| {
        (0..)
            .map(|n| format!("k{n}"))
            .find(|k| map.owner(None, k.as_bytes()) == ShardId(s))
            .unwrap()
    };
    assert!(gate.check(&call("kv.put", &key_of(0)), false).is_ok());
    let refused = gate.check(&call("kv.put", &key_of(1)), false).unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().starts_with(WRONG_SHARD),
        "{}",
        refused.message()
    );
    assert!(refused.message().contains("shard 1 owns it (map epoch 1)"));
    // Definitions go everywhere; a registered procedure whose keys are
    // unknown nowhere.
    assert!(gate
        .check(&ProcCall::new("proc.list", encode_args(&[])), false)
        .is_ok());
    let mut with_unknown = Registry::with_builtins();
    with_unknown.register_fn("bench.load", false, |_| Ok(()), |_, _| Ok(Bytes::new()));
    let gate = ShardGate::load(&configs[0], Arc::new(with_unknown))
        .unwrap()
        .unwrap();
    let unknown = gate
        .check(&ProcCall::new("bench.load", encode_args(&[])), false)
        .unwrap_err();
    assert!(unknown.message().contains("known only as it runs"));
    // A name no built-in has is a user procedure's: the node loop
    // checks its declared keys.
    assert!(gate.check(&call("transfer", &key_of(1)), false).is_ok());
}

/// A strong call whose keys span shards becomes an operation across
/// shards with this replica's shard as its origin; a weak one, or one
/// whose shards this replica's is not among, is refused.
#[test]
fn a_strong_call_across_shards_becomes_an_mpo() {
    let (configs, map, _, _scratch) = cluster("across");
    let gate = ShardGate::load(&configs[0], registry()).unwrap().unwrap();
    let key_of = |s: u16, skip: usize| {
        (0..)
            .map(|n| format!("k{n}"))
            .filter(|k| map.owner(None, k.as_bytes()) == ShardId(s))
            .nth(skip)
            .unwrap()
    };
    let (a, b) = (key_of(0, 0), key_of(1, 0));
    let transfer = ProcCall::new(
        "kv.transfer",
        encode_args(&[
            Value::from(a.as_str()),
            Value::from(b.as_str()),
            Value::Int(5),
        ]),
    );
    let mpo = gate.check(&transfer, true).unwrap().unwrap();
    assert_eq!((mpo.id, mpo.me), (MpoId::UNSET, 0));
    assert_eq!(mpo.keys_of(0), &[Bytes::from(a.clone())]);
    assert_eq!(mpo.keys_of(1), &[Bytes::from(b.clone())]);
    let weak = gate.check(&transfer, false).unwrap_err();
    assert!(weak
        .message()
        .contains("a weak operation never spans shards"));
    // A replica of shard 1 is among its shards too: it may be the
    // origin.
    let other = ShardGate::load(&configs[3], registry()).unwrap().unwrap();
    assert_eq!(other.check(&transfer, true).unwrap().unwrap().me, 1);
    // Keys on one shard stay a single-shard call.
    let local = ProcCall::new(
        "kv.transfer",
        encode_args(&[
            Value::from(a.as_str()),
            Value::from(key_of(0, 1).as_str()),
            Value::Int(5),
        ]),
    );
    assert_eq!(gate.check(&local, true).unwrap(), None);
}

/// A user procedure runs where every key it declares lives: a key of
/// another shard is WRONG_SHARD; keys spanning shards make a strong
/// call an operation across shards (its keyspace's keys as stored)
/// and a weak one is refused naming them; prefixes spanning shards are
/// refused; no declaration at all cannot be routed.
#[test]
fn a_user_procedure_is_checked_against_its_declared_keys() {
    let (configs, map, _, _scratch) = cluster("declared");
    let gate = ShardGate::load(&configs[0], registry()).unwrap().unwrap();
    let key_of = |s: u16| {
        (0..)
            .map(|n| format!("a{n}"))
            .find(|k| map.owner(Some("accounts"), k.as_bytes()) == ShardId(s))
            .unwrap()
    };
    let declared = |prefix: bool| creek_procs::lang::KeyParam {
        keyspace: "accounts".into(),
        prefix,
    };
    let two = [(0, declared(false)), (1, declared(false))];
    let args = |a: &str, b: &str| encode_args(&[Value::from(a), Value::from(b)]);
    let call = |name: &str, a: &str, b: &str| ProcCall::new(name, args(a, b));
    let check = |name: &str, declared: &[(usize, creek_procs::lang::KeyParam)], a, b, strong| {
        gate.check_user(&call(name, a, b), strong, declared)
    };
    let (k0, k1) = (key_of(0), key_of(1));
    assert_eq!(check("transfer", &two, &k0, &k0, true).unwrap(), None);
    let refused = check("transfer", &two, &k1, &k1, true).unwrap_err();
    assert!(
        refused.message().starts_with(WRONG_SHARD)
            && refused
                .message()
                .contains("its 2 declared keys goes to another shard: shard 1"),
        "{}",
        refused.message()
    );
    let spans = check("transfer", &two, &k0, &k1, false).unwrap_err();
    assert!(
        spans.message().contains("its keys span shards 0, 1")
            && spans
                .message()
                .contains("a weak operation never spans shards"),
        "{}",
        spans.message()
    );
    let mpo = check("transfer", &two, &k0, &k1, true).unwrap().unwrap();
    assert_eq!((mpo.me, mpo.name.as_ref()), (0, "transfer"));
    let stored = |k: &str| creek_procs::keyspace::data_key("accounts", k.as_bytes());
    assert_eq!(mpo.keys_of(0), [stored(&k0)]);
    assert_eq!(mpo.keys_of(1), [stored(&k1)]);
    let one = [(0, declared(true))];
    let refused = check("notes", &one, "a", "", true).unwrap_err();
    assert!(
        refused
            .message()
            .contains("span shards, and it declares a prefix"),
        "{}",
        refused.message()
    );
    let tagged = (0..)
        .map(|n| format!("{{t{n}}}/"))
        .find(|k| map.owner(Some("accounts"), k.as_bytes()) == ShardId(0))
        .unwrap();
    assert!(check("notes", &one, &tagged, "", true).is_ok());
    let none = check("loose", &[], "a", "b", true).unwrap_err();
    assert!(
        none.message().contains("declares no key parameters"),
        "{}",
        none.message()
    );
}

#[test]
fn newer_maps_are_adopted_and_saved_others_refused() {
    let (configs, map, path, _scratch) = cluster("adopt");
    let gate = ShardGate::load(&configs[0], registry()).unwrap().unwrap();
    // The same epoch: nothing to do.
    assert_eq!(gate.adopt(&creek_shard::encode(&map)), Ok(None));
    // The next one: served and saved.
    let next = map
        .place(
            1,
            Some("config"),
            creek_shard::Placement::Pinned(ShardId(1)),
        )
        .unwrap();
    assert_eq!(gate.adopt(&creek_shard::encode(&next)), Ok(Some(2)));
    assert_eq!(gate.map(), next);
    assert_eq!(
        creek_shard::decode(&read(&path).unwrap()).unwrap(),
        next,
        "a restart starts from the newest map"
    );
    // An older one is not newer.
    assert_eq!(gate.adopt(&creek_shard::encode(&map)), Ok(None));
    // Another cluster's, a map that moved this replica, junk: refused,
    // the map unchanged.
    let mut other = next.clone();
    other.cluster = 8;
    other.epoch = 3;
    let e = gate.adopt(&creek_shard::encode(&other)).unwrap_err();
    assert!(e.contains("cluster 0000000000000008"), "{e}");
    let mut moved = next.clone();
    moved.epoch = 3;
    let r1 = moved
        .shards
        .get_mut(&ShardId(0))
        .unwrap()
        .replicas
        .remove(&1);
    moved
        .shards
        .get_mut(&ShardId(1))
        .unwrap()
        .replicas
        .insert(1, r1.unwrap());
    let e = gate.adopt(&creek_shard::encode(&moved)).unwrap_err();
    assert!(e.contains("does not list replica 1"), "{e}");
    assert!(gate.adopt(&Bytes::from_static(b"junk")).is_err());
    assert_eq!(gate.map(), next);
}

#[test]
fn directory_replicas_serve_the_map_and_check_nothing() {
    let (configs, map, _, _scratch) = cluster("directory");
    let d = configs.iter().find(|c| c.directory).unwrap();
    assert_eq!(d.id, 7, "the directory's ids follow the shards'");
    let gate = ShardGate::load(d, registry()).unwrap().unwrap();
    assert_eq!(gate.role(), Role::Directory);
    assert_eq!(gate.map(), map);
    assert!(gate.check(&call("kv.put", "anything"), false).is_ok());
    // A directory replica configured as a shard's, and the reverse.
    let mut plain = d.clone();
    plain.directory = false;
    let e = ShardGate::load(&plain, registry()).unwrap_err().to_string();
    assert!(e.contains("configure it with directory = true"), "{e}");
    let mut claims = configs[0].clone();
    claims.directory = true;
    let e = ShardGate::load(&claims, registry())
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not list it in the directory"), "{e}");
}

#[test]
fn maps_that_do_not_fit_the_replica_are_refused() {
    let (configs, _, path, _scratch) = cluster("refuse");
    // A replica the map does not list.
    let mut stranger = configs[0].clone();
    stranger.id = 9;
    stranger.replicas[0].id = 9;
    let e = ShardGate::load(&stranger, registry())
        .unwrap_err()
        .to_string();
    assert!(e.contains("replica 9 is not in the shard map"), "{e}");
    // A replica configured with a group the map's shard does not match.
    let mut mixed = configs[0].clone();
    mixed.replicas = vec![
        configs[0].replicas[0].clone(),
        configs[3].replicas[0].clone(),
    ];
    let e = ShardGate::load(&mixed, registry()).unwrap_err().to_string();
    assert!(e.contains("lists replicas [1, 2, 3] in shard 0"), "{e}");
    // A file that is not a map.
    std::fs::write(&path, b"not a map").unwrap();
    let e = ShardGate::load(&configs[0], registry())
        .unwrap_err()
        .to_string();
    assert!(e.contains("shard map"), "{e}");
    // No file.
    std::fs::remove_file(&path).unwrap();
    let e = ShardGate::load(&configs[0], registry())
        .unwrap_err()
        .to_string();
    assert!(e.contains("reading"), "{e}");
    // No map configured: no gate.
    let mut plain = configs[0].clone();
    plain.shard_map = None;
    assert!(ShardGate::load(&plain, registry()).unwrap().is_none());
}
