//! `creek shards`: the cluster's shard map as the directory holds it —
//! its epoch, each shard's replicas and leader, the directory's, and
//! where keys go — and `creek shards place`, which places a keyspace by a
//! strong change of the map in the directory.

use std::time::{Duration, Instant};

use bytes::Bytes;
use creek_client::{Client, Cluster, ConnectOptions, Levels, ShardId, ShardMap};
use creek_shard::Placement;
use creek_types::value::Value;

use crate::cli::{self, exit, Endpoints, Failure, Format, Output};

/// Arguments of `creek shards`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    /// Also write the map (its bytes, as a replica's `shard_map` file
    /// holds them) to this file: what a new shard's replicas start with.
    #[arg(long)]
    save: Option<std::path::PathBuf>,
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(flatten)]
    output: Output,
}

/// What `creek shards` does besides printing the map.
#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Place a keyspace that does not exist yet on its own: pinned to one
    /// shard, by key ranges, or hashed over every shard. The change is a
    /// strong op of the directory, made against the epoch read; the
    /// command then waits until every replica of every shard serves under
    /// the new map (exit 3 if some do not within --wait-secs). Create the
    /// keyspace after this.
    Place {
        /// The keyspace.
        keyspace: String,
        /// Keep every key of the keyspace on this shard.
        #[arg(long, conflicts_with_all = ["ranges", "hashed"])]
        pin: Option<u16>,
        /// Ordered key ranges: the first range's shard, then KEY=SHARD for
        /// each split point in increasing order (`0,m=1,t=2`: keys before
        /// "m" on shard 0, from "m" on shard 1, from "t" on shard 2).
        #[arg(long, conflicts_with = "hashed")]
        ranges: Option<String>,
        /// Hash the keyspace's keys evenly over every shard.
        #[arg(long)]
        hashed: bool,
        /// How long to wait for every replica to serve under the new map.
        #[arg(long, default_value_t = 10)]
        wait_secs: u64,
    },
    /// List a new replica in a shard's map entry, before it is started and
    /// added to its group (`creek admin add-replica` against a replica of
    /// that shard), so that it starts and clients reach it.
    AddReplica {
        /// Its shard.
        #[arg(long)]
        shard: u16,
        /// Its replica id: unused in the whole cluster.
        id: u16,
        /// Its client address (host:port).
        client: String,
        /// Its peer address (host:port).
        peer: String,
        /// How long to wait for every replica to serve under the new map.
        #[arg(long, default_value_t = 10)]
        wait_secs: u64,
    },
    /// Move keys from one shard to another while both serve: hash slots
    /// of the built-in data (`--slots 100..200`), a key range of a
    /// keyspace placed by ranges (`--keyspace K --range a..m`, `a..` to the
    /// end), or every key of a pinned keyspace (`--keyspace K`). Begins
    /// the move in the directory; the leader of the target shard copies
    /// the keys, switches them and cleans the source up. Waits until the
    /// move is over (exit 3 if it is not within --wait-secs: it goes on,
    /// and `creek shards` shows it). `--cancel` cancels a move that has
    /// not switched yet.
    Move {
        /// The shard the keys leave.
        #[arg(long, required_unless_present = "cancel")]
        from: Option<u16>,
        /// The shard they go to.
        #[arg(long, required_unless_present = "cancel")]
        to: Option<u16>,
        /// Hash slots FIRST..END (END excluded, at most 4096).
        #[arg(long, conflicts_with_all = ["range", "cancel"])]
        slots: Option<String>,
        /// A keyspace's keys (with --range, those of the range).
        #[arg(long, conflicts_with = "cancel")]
        keyspace: Option<String>,
        /// Keys FIRST..END of the keyspace (END excluded; empty: to the
        /// end).
        #[arg(long, requires = "keyspace")]
        range: Option<String>,
        /// Cancel the move in flight instead (before its switch).
        #[arg(long)]
        cancel: bool,
        /// How long to wait for the move to be over.
        #[arg(long, default_value_t = 120)]
        wait_secs: u64,
    },
    /// Even out the hash slots of the built-in data over the shards the map
    /// lists (a shard just added gets its share): prints the moves, then
    /// makes them one after another with `creek shards move` (not with
    /// --dry-run). Keys are hashed evenly over the slots, so even slots are
    /// even keys.
    Rebalance {
        /// Print the plan only.
        #[arg(long)]
        dry_run: bool,
        /// How long to wait for each move to be over.
        #[arg(long, default_value_t = 120)]
        wait_secs: u64,
    },
    /// List a new shard in the map, owning no key yet: its replicas (ID,
    /// client address, peer address; started as a group of their own with
    /// the map `creek shards --save FILE` writes after this) take keys with
    /// `creek shards move` or `rebalance`.
    AddShard {
        /// The new shard's id: unused in the map.
        shard: u16,
        /// A replica: ID=CLIENT_ADDR,PEER_ADDR (ids unused in the whole
        /// cluster). Once per replica.
        #[arg(long = "replica", required = true)]
        replicas: Vec<String>,
        /// How long to wait for every replica to serve under the new map.
        #[arg(long, default_value_t = 10)]
        wait_secs: u64,
    },
    /// Drop a shard that owns no key any more (its keys moved away with
    /// `creek shards move`) from the map; its replicas can be stopped
    /// after.
    RemoveShard {
        /// The shard.
        shard: u16,
        /// How long to wait for every replica to serve under the new map.
        #[arg(long, default_value_t = 10)]
        wait_secs: u64,
    },
    /// Drop a replica from the map, after it was removed from its group
    /// (`creek admin remove-replica`).
    RemoveReplica {
        /// Its replica id.
        id: u16,
        /// How long to wait for every replica to serve under the new map.
        #[arg(long, default_value_t = 10)]
        wait_secs: u64,
    },
}

/// One shard as printed: its id, replicas (id, client address) and the
/// leader its replicas know (0: none answered or none elected), with what
/// the replica asked said: its stored versions (about its keys: a size),
/// ops committed (a load, since it started) and the progress of a move of
/// keys it drives (`move_*` counters).
struct Row {
    shard: u16,
    replicas: Vec<(u16, String)>,
    leader: u32,
    counters: std::collections::BTreeMap<String, u64>,
}

/// Run `creek shards`.
pub fn run(args: &Args) -> Result<(), Failure> {
    let addrs = args.endpoints.list();
    if let Some(action) = &args.action {
        let options = args.endpoints.options()?;
        return cli::runtime()?.block_on(async {
            let cluster = cli::connect_cluster(&args.endpoints, &addrs).await?;
            match action {
                Action::Place {
                    keyspace,
                    pin,
                    ranges,
                    hashed,
                    wait_secs,
                } => {
                    let placement = placement_of(*pin, ranges.as_deref(), *hashed)?;
                    let wait = Duration::from_secs(*wait_secs);
                    place(&cluster, &options, &addrs, keyspace, placement, wait).await
                }
                Action::AddReplica {
                    shard,
                    id,
                    client,
                    peer,
                    wait_secs,
                } => {
                    let endpoint = creek_shard::Endpoint {
                        client: client.clone(),
                        peer: peer.clone(),
                    };
                    let listing = Some((ShardId(*shard), endpoint));
                    let wait = Duration::from_secs(*wait_secs);
                    member(&cluster, &options, *id, listing, wait).await
                }
                Action::Move {
                    from,
                    to,
                    slots,
                    keyspace,
                    range,
                    cancel,
                    wait_secs,
                } => {
                    let wait = Duration::from_secs(*wait_secs);
                    if *cancel {
                        return step(&cluster, wait, |map| {
                            let next = map
                                .cancel_move(map.epoch)
                                .map_err(|e| Failure::new(exit::FAILED, e.to_string()))?;
                            Ok((next, "the move in flight is cancelled".to_owned()))
                        })
                        .await
                        .map(drop);
                    }
                    let (Some(from), Some(to)) = (from, to) else {
                        return Err(Failure::new(
                            exit::FAILED,
                            "--from and --to name the shards",
                        ));
                    };
                    let m = move_of(
                        *from,
                        *to,
                        slots.as_deref(),
                        keyspace.as_deref(),
                        range.as_deref(),
                    )?;
                    move_keys(&cluster, m, wait).await
                }
                Action::Rebalance { dry_run, wait_secs } => {
                    rebalance(&cluster, *dry_run, Duration::from_secs(*wait_secs)).await
                }
                Action::AddShard {
                    shard,
                    replicas,
                    wait_secs,
                } => {
                    let listed = replicas
                        .iter()
                        .map(|r| replica_of(r))
                        .collect::<Result<Vec<_>, _>>()?;
                    let wait = Duration::from_secs(*wait_secs);
                    change(&cluster, &options, wait, |map| {
                        let id = ShardId(*shard);
                        if map.shards.contains_key(&id) {
                            return Err(Failure::new(
                                exit::FAILED,
                                format!("the map lists shard {shard} already"),
                            ));
                        }
                        let mut next = map.clone();
                        next.shards.insert(
                            id,
                            creek_shard::Shard {
                                replicas: listed.into_iter().collect(),
                            },
                        );
                        next.epoch += 1;
                        Ok((next, format!("shard {shard} is listed, owning no key yet")))
                    })
                    .await
                }
                Action::RemoveShard { shard, wait_secs } => {
                    let wait = Duration::from_secs(*wait_secs);
                    step(&cluster, wait, |map| {
                        let next = map
                            .drop_shard(map.epoch, ShardId(*shard))
                            .map_err(|e| Failure::new(exit::FAILED, e.to_string()))?;
                        Ok((next, format!("shard {shard} is dropped from the map")))
                    })
                    .await
                    .map(drop)
                }
                Action::RemoveReplica { id, wait_secs } => {
                    member(
                        &cluster,
                        &options,
                        *id,
                        None,
                        Duration::from_secs(*wait_secs),
                    )
                    .await
                }
            }
        });
    }
    let (map, rows, directory) = cli::runtime()?.block_on(async {
        let cluster = cli::connect_cluster(&args.endpoints, &addrs).await?;
        // The directory's map is the newest; a replica's may lag it.
        let _ = cluster.refresh().await;
        let map = cluster.map().await;
        let rows = survey(&cluster, &map).await;
        let directory = match cluster.directory().await {
            Ok(Some(client)) => Some(client.status().await.map_or(0, |s| s.leader)),
            Ok(None) => None,
            Err(_) => Some(0),
        };
        Ok::<_, Failure>((map, rows, directory))
    })?;
    if let Some(path) = &args.save {
        std::fs::write(path, creek_shard::encode(&map))
            .map_err(|e| Failure::new(exit::FAILED, format!("writing {}: {e}", path.display())))?;
    }
    match args.output.output {
        Format::Json => out!("{}", to_json(&map, &rows, directory)),
        Format::Value => out!("{}", map.epoch),
        Format::Table => print_table(&map, &rows, directory),
    }
    if rows.iter().any(|r| r.leader == 0) {
        return Err(Failure::new(
            exit::DEGRADED,
            "a shard has no leader known: its strong ops cannot finish".to_owned(),
        ));
    }
    if directory == Some(0) {
        return Err(Failure::new(
            exit::DEGRADED,
            "the directory has no leader known: the map cannot change (operations keep \
             working with the map the replicas have)"
                .to_owned(),
        ));
    }
    Ok(())
}

/// The placement the flags of `creek shards place` name.
fn placement_of(
    pin: Option<u16>,
    ranges: Option<&str>,
    hashed: bool,
) -> Result<Placement, Failure> {
    let usage = |m: String| Failure::new(2, m);
    let shard = |t: &str| {
        t.trim()
            .parse::<u16>()
            .map(ShardId)
            .map_err(|_| usage(format!("{t:?} is not a shard number")))
    };
    match (pin, ranges, hashed) {
        (Some(s), None, false) => Ok(Placement::Pinned(ShardId(s))),
        (None, Some(text), false) => {
            let mut parts = text.split(',');
            let first = shard(parts.next().unwrap_or_default())?;
            let mut list = vec![(Bytes::new(), first)];
            for part in parts {
                let (key, s) = part
                    .rsplit_once('=')
                    .ok_or_else(|| usage(format!("--ranges: {part:?} is not KEY=SHARD")))?;
                list.push((Bytes::copy_from_slice(key.as_bytes()), shard(s)?));
            }
            Ok(Placement::Ranges(list))
        }
        // The shards are known only from the map: an empty list stands
        // for "every shard" until then.
        (None, None, true) => Ok(Placement::Hashed(Vec::new())),
        _ => Err(usage(
            "say where the keyspace goes: --pin SHARD, --ranges FIRST,KEY=SHARD,… or --hashed"
                .into(),
        )),
    }
}

/// The directory's client and its replicas' addresses.
async fn directory_of(cluster: &Cluster) -> Result<(Client, Vec<String>), Failure> {
    let directory = cluster.directory().await.map_err(|e| {
        Failure::new(
            exit::FAILED,
            format!("the directory does not answer, so the map cannot change now: {e}"),
        )
    })?;
    let Some(directory) = directory else {
        return Err(Failure::new(
            exit::FAILED,
            "this cluster has no directory (its map is a file every replica is given): its \
             map does not change",
        ));
    };
    let addrs = cluster
        .map()
        .await
        .directory
        .replicas
        .values()
        .map(|e| e.client.clone())
        .collect();
    Ok((directory, addrs))
}

/// The map the directory holds (a strong read), waiting up to `wait` for
/// a directory that is still forming.
async fn held_map(
    directory: &Client,
    addrs: &[String],
    wait: Duration,
) -> Result<ShardMap, Failure> {
    let formed_by = Instant::now() + wait;
    let bytes = loop {
        let held = cli::call_closing(
            directory,
            addrs,
            "directory.map",
            Vec::new(),
            Levels::Strong,
        )
        .await?
        .map_err(|abort| Failure::new(exit::ABORTED, abort))?;
        match held {
            Value::Bytes(bytes) => break bytes,
            _ if Instant::now() < formed_by => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            _ => {
                return Err(Failure::new(
                    exit::FAILED,
                    "the directory holds no map yet (it forms with its map file's once a \
                     majority of it runs): try again",
                ))
            }
        }
    };
    creek_shard::decode(&bytes)
        .map_err(|e| Failure::new(exit::FAILED, format!("the directory's map: {e}")))
}

/// Change the map: read the directory's (strong), make the next one with
/// `next`, install it (a strong `directory.set` against the epoch read),
/// print `what` it did, then wait for every replica to serve under it.
async fn change(
    cluster: &Cluster,
    options: &ConnectOptions,
    wait: Duration,
    next: impl FnOnce(&ShardMap) -> Result<(ShardMap, String), Failure>,
) -> Result<(), Failure> {
    let (map, next) = install(cluster, wait, "directory.set", |map| {
        let (next, what) = next(map)?;
        map.check_next(&next)
            .map_err(|e| Failure::new(exit::FAILED, e.to_string()))?;
        Ok((next, what))
    })
    .await?;
    let lagging = wait_for_epoch(&map, &next, options, wait).await;
    if lagging.is_empty() {
        out!("every replica serves under epoch {}", next.epoch);
        Ok(())
    } else {
        Err(Failure::new(
            exit::DEGRADED,
            format!(
                "replicas {} do not serve under epoch {} yet (down, or cut off from the \
                 directory); they learn it when they reach it",
                lagging
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                next.epoch
            ),
        ))
    }
}

/// A replica as `creek shards add-shard --replica` names it:
/// `ID=CLIENT,PEER`.
fn replica_of(spec: &str) -> Result<(u16, creek_shard::Endpoint), Failure> {
    let bad = || {
        Failure::new(
            exit::FAILED,
            format!("{spec:?}: write a replica as ID=CLIENT_ADDR,PEER_ADDR"),
        )
    };
    let (id, addrs) = spec.split_once('=').ok_or_else(bad)?;
    let (client, peer) = addrs.split_once(',').ok_or_else(bad)?;
    let id = id.trim().parse::<u16>().map_err(|_| bad())?;
    Ok((
        id,
        creek_shard::Endpoint {
            client: client.trim().to_owned(),
            peer: peer.trim().to_owned(),
        },
    ))
}

/// Plan the moves that even out the slots, print them, and (unless
/// `dry_run`) make them one after another.
async fn rebalance(cluster: &Cluster, dry_run: bool, wait: Duration) -> Result<(), Failure> {
    let (directory, dir_addrs) = directory_of(cluster).await?;
    let map = held_map(&directory, &dir_addrs, wait).await?;
    let plan = creek_shard::rebalance_slots(&map)
        .map_err(|e| Failure::new(exit::FAILED, e.to_string()))?;
    if plan.is_empty() {
        out!(
            "the slots are even over the {} shards: nothing to move",
            map.shards.len()
        );
        return Ok(());
    }
    out!("{} moves:", plan.len());
    for m in &plan {
        out!("  {m}");
    }
    if dry_run {
        return Ok(());
    }
    for m in plan {
        move_keys(cluster, m, wait).await?;
    }
    Ok(())
}

/// The move the flags of `creek shards move` name.
fn move_of(
    from: u16,
    to: u16,
    slots: Option<&str>,
    keyspace: Option<&str>,
    range: Option<&str>,
) -> Result<creek_shard::Move, Failure> {
    let usage = |why: String| Failure::new(exit::FAILED, why);
    let split = |s: &str| -> Result<(String, String), Failure> {
        s.split_once("..")
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .ok_or_else(|| usage(format!("{s:?}: write FIRST..END")))
    };
    let keys = match (slots, keyspace, range) {
        (Some(slots), None, None) => {
            let (a, b) = split(slots)?;
            let slot = |v: &str| {
                v.trim()
                    .parse::<u16>()
                    .map_err(|_| usage(format!("{v:?} is not a slot (0..4096)")))
            };
            creek_shard::MoveKeys::Slots {
                first: slot(&a)?,
                end: slot(&b)?,
            }
        }
        (None, Some(_), Some(range)) => {
            let (a, b) = split(range)?;
            creek_shard::MoveKeys::Range {
                first: Bytes::from(a),
                end: (!b.is_empty()).then(|| Bytes::from(b)),
            }
        }
        (None, Some(_), None) => creek_shard::MoveKeys::All,
        _ => {
            return Err(usage(
                "name the keys: --slots FIRST..END, --keyspace K --range FIRST..END, or \
                 --keyspace K"
                    .to_owned(),
            ))
        }
    };
    Ok(creek_shard::Move {
        keyspace: keyspace.map(str::to_owned),
        keys,
        from: ShardId(from),
        to: ShardId(to),
    })
}

/// Read the directory's map (strong), make the next one with `next`,
/// install it with `procedure` (`directory.set`, or `directory.move` for a
/// step of a move) against the epoch read, and print `what` it did. The
/// map read and the new one.
async fn install(
    cluster: &Cluster,
    wait: Duration,
    procedure: &str,
    next: impl FnOnce(&ShardMap) -> Result<(ShardMap, String), Failure>,
) -> Result<(ShardMap, ShardMap), Failure> {
    let (directory, dir_addrs) = directory_of(cluster).await?;
    let map = held_map(&directory, &dir_addrs, wait).await?;
    let (next, what) = next(&map)?;
    let epoch = i64::try_from(map.epoch).unwrap_or(i64::MAX);
    cli::call_closing(
        &directory,
        &dir_addrs,
        procedure,
        vec![Value::Int(epoch), Value::Bytes(creek_shard::encode(&next))],
        Levels::Strong,
    )
    .await?
    .map_err(|abort| Failure::new(exit::ABORTED, abort))?;
    out!("epoch {}: {what}", next.epoch);
    Ok((map, next))
}

/// Take a step of a move in the directory ([`install`] with
/// `directory.move`): the new map.
async fn step(
    cluster: &Cluster,
    wait: Duration,
    next: impl FnOnce(&ShardMap) -> Result<(ShardMap, String), Failure>,
) -> Result<ShardMap, Failure> {
    install(cluster, wait, "directory.move", next)
        .await
        .map(|(_, next)| next)
}

/// Begin move `m` and wait up to `wait` for it to be over, saying when it
/// switches.
async fn move_keys(cluster: &Cluster, m: creek_shard::Move, wait: Duration) -> Result<(), Failure> {
    let what = m.to_string();
    step(cluster, wait, |map| {
        let next = map
            .begin_move(map.epoch, m.clone())
            .map_err(|e| Failure::new(exit::FAILED, e.to_string()))?;
        Ok((next, format!("{what}: begun")))
    })
    .await?;
    let (directory, dir_addrs) = directory_of(cluster).await?;
    let until = Instant::now() + wait;
    let mut switched = false;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Ok(map) = held_map(&directory, &dir_addrs, wait).await else {
            continue;
        };
        let ours = |x: &Option<creek_shard::Move>| x.as_ref() == Some(&m);
        if ours(&map.finishing) && !switched {
            switched = true;
            out!(
                "epoch {}: {what}: switched (the target serves the keys)",
                map.epoch
            );
        } else if !ours(&map.moving) && !ours(&map.finishing) {
            let given = map.moving.is_none() && map.finishing.is_none();
            out!(
                "epoch {}: {what}: {}",
                map.epoch,
                if switched || given {
                    "over"
                } else {
                    "no longer in the map (cancelled?)"
                }
            );
            return Ok(());
        }
    }
    Err(Failure::new(
        exit::DEGRADED,
        format!(
            "{what} is not over after {} s; it goes on (the target shard's leader drives it): \
             `creek shards` shows it",
            wait.as_secs()
        ),
    ))
}

/// Place `keyspace` by `placement`, if no shard holds it yet.
async fn place(
    cluster: &Cluster,
    options: &ConnectOptions,
    addrs: &[String],
    keyspace: &str,
    placement: Placement,
    wait: Duration,
) -> Result<(), Failure> {
    // A keyspace with data keeps its owners: placing it would move keys.
    if let Some(shard) = holding(cluster, addrs, keyspace).await? {
        return Err(Failure::new(
            exit::FAILED,
            format!(
                "keyspace {keyspace} already exists (shard {} holds it): a keyspace is placed \
                 before it is created, since placing it now would move its keys",
                shard.0
            ),
        ));
    }
    change(cluster, options, wait, |map| {
        let placement = match placement {
            Placement::Hashed(v) if v.is_empty() => Placement::even_slots(&map.shard_ids()),
            p => p,
        };
        let next = map
            .place(map.epoch, Some(keyspace), placement)
            .map_err(|e| Failure::new(exit::FAILED, e.to_string()))?;
        let what = format!(
            "keyspace {keyspace} {}",
            describe(next.placement(Some(keyspace)))
        );
        Ok((next, what))
    })
    .await
}

/// List replica `id` in `shard` with its addresses (`Some`), or drop it
/// from the map (`None`).
async fn member(
    cluster: &Cluster,
    options: &ConnectOptions,
    id: u16,
    listing: Option<(ShardId, creek_shard::Endpoint)>,
    wait: Duration,
) -> Result<(), Failure> {
    change(cluster, options, wait, |map| {
        let mut next = map.clone();
        next.epoch += 1;
        let what = match listing {
            Some((shard, endpoint)) => {
                if map.shard_of_replica(id).is_some() || map.is_directory_replica(id) {
                    return Err(Failure::new(
                        exit::FAILED,
                        format!("replica {id} is in the map already: pick an unused id"),
                    ));
                }
                let group = next.shards.get_mut(&shard).ok_or_else(|| {
                    Failure::new(exit::FAILED, format!("the map lists no shard {}", shard.0))
                })?;
                let what = format!(
                    "replica {id} ({}) listed in shard {}",
                    endpoint.client, shard.0
                );
                group.replicas.insert(id, endpoint);
                what
            }
            None => {
                let shard = map.shard_of_replica(id).ok_or_else(|| {
                    Failure::new(exit::FAILED, format!("no shard lists replica {id}"))
                })?;
                let group = next.shards.get_mut(&shard).map(|g| &mut g.replicas);
                if let Some(group) = group {
                    group.remove(&id);
                    if group.is_empty() {
                        return Err(Failure::new(
                            exit::FAILED,
                            format!("replica {id} is shard {}'s last", shard.0),
                        ));
                    }
                }
                format!("replica {id} dropped from shard {}", shard.0)
            }
        };
        Ok((next, what))
    })
    .await
}

/// The first shard that holds `keyspace`, if any does.
async fn holding(
    cluster: &Cluster,
    addrs: &[String],
    keyspace: &str,
) -> Result<Option<ShardId>, Failure> {
    for shard in cluster.map().await.shard_ids() {
        let Some(client) = cluster.shard(shard).await else {
            continue;
        };
        let listed = cli::call_closing(&client, addrs, "keyspace.list", Vec::new(), Levels::Strong)
            .await?
            .map_err(|abort| Failure::new(exit::ABORTED, abort))?;
        for item in cli::list_items("keyspace.list", listed)? {
            if let Value::List(pair) = &item {
                if pair.first().map(cli::text_of).as_deref() == Some(keyspace) {
                    return Ok(Some(shard));
                }
            }
        }
    }
    Ok(None)
}

/// Wait up to `wait` for every replica of every shard to serve under
/// `next` — those both maps list: a replica just listed is not started
/// yet, one just dropped is gone; the ones that did not. Each replica is
/// asked over one connection of its own, made with `options`.
async fn wait_for_epoch(
    map: &ShardMap,
    next: &ShardMap,
    options: &ConnectOptions,
    wait: Duration,
) -> Vec<u16> {
    let until = Instant::now() + wait;
    let mut left: Vec<(u16, String, Option<Client>)> = next
        .shards
        .values()
        .flat_map(|s| {
            s.replicas
                .iter()
                .map(|(id, e)| (*id, e.client.clone(), None))
        })
        .filter(|(id, _, _)| map.shard_of_replica(*id).is_some())
        .collect();
    while !left.is_empty() && Instant::now() < until {
        let mut still = Vec::new();
        for (id, addr, mut client) in left {
            if client.is_none() {
                client = Client::connect_with_options([addr.clone()], options.clone())
                    .await
                    .ok();
            }
            if served_epoch(client.as_ref()).await < Some(next.epoch) {
                still.push((id, addr, client));
            }
        }
        left = still;
        if !left.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    left.into_iter().map(|(id, _, _)| id).collect()
}

/// The epoch of the map the replica behind `client` serves under.
async fn served_epoch(client: Option<&Client>) -> Option<u64> {
    let status = client?.status().await.ok()?;
    creek_shard::decode(&status.shard_map).ok().map(|m| m.epoch)
}

async fn survey(cluster: &Cluster, map: &ShardMap) -> Vec<Row> {
    let mut rows = Vec::new();
    for (id, shard) in &map.shards {
        let status = match cluster.shard(*id).await {
            Some(client) => client.status().await.ok(),
            None => None,
        };
        let leader = status.as_ref().map_or(0, |s| s.leader);
        let counters = status
            .map(|s| {
                let mut c: std::collections::BTreeMap<String, u64> =
                    s.counters.into_iter().collect();
                c.insert("committed".into(), s.committed);
                c
            })
            .unwrap_or_default();
        rows.push(Row {
            counters,
            shard: id.0,
            replicas: shard
                .replicas
                .iter()
                .map(|(r, e)| (*r, e.client.clone()))
                .collect(),
            leader,
        });
    }
    rows
}

/// How a placement is written: `hashed (4096 slots: 0-2047 → 0, …)`.
fn describe(p: &Placement) -> String {
    match p {
        Placement::Pinned(s) => format!("pinned to shard {}", s.0),
        Placement::Hashed(slots) => {
            let parts: Vec<String> = slots
                .iter()
                .enumerate()
                .map(|(i, (first, s))| {
                    let last = slots
                        .get(i + 1)
                        .map_or(creek_shard::SLOTS - 1, |(next, _)| next - 1);
                    format!("{first}-{last} → {}", s.0)
                })
                .collect();
            format!(
                "hashed ({} slots: {})",
                creek_shard::SLOTS,
                parts.join(", ")
            )
        }
        Placement::Ranges(ranges) => {
            let parts: Vec<String> = ranges
                .iter()
                .map(|(first, s)| format!("{:?}.. → {}", String::from_utf8_lossy(first), s.0))
                .collect();
            format!("ranges ({})", parts.join(", "))
        }
    }
}

fn print_table(map: &ShardMap, rows: &[Row], directory: Option<u32>) {
    out!(
        "cluster {:016x}  epoch {}  {} shards",
        map.cluster,
        map.epoch,
        map.shards.len()
    );
    out!("keys: {}", describe(&map.default));
    for (name, p) in &map.keyspaces {
        out!("keyspace {name}: {}", describe(p));
    }
    if let Some(m) = &map.moving {
        out!("moving: {m} (copying)");
    }
    if let Some(m) = &map.finishing {
        out!("moving: {m} (switched, cleaning up)");
    }
    for r in rows {
        let replicas: Vec<String> = r
            .replicas
            .iter()
            .map(|(id, addr)| format!("{id}@{addr}"))
            .collect();
        let leader = if r.leader == 0 {
            "none known".to_owned()
        } else {
            r.leader.to_string()
        };
        let get = |k: &str| r.counters.get(k).copied().unwrap_or(0);
        out!(
            "shard {}  leader {leader}  versions {}  committed {}  replicas {}",
            r.shard,
            get("exec_versions_alive"),
            get("committed"),
            replicas.join(" ")
        );
        if get("move_active") == 1 {
            out!(
                "  moving keys here: round {}, {} keys ({} bytes) copied",
                get("move_rounds") + 1,
                get("move_keys_copied"),
                get("move_bytes_copied")
            );
        }
    }
    if let Some(leader) = directory {
        let replicas: Vec<String> = map
            .directory
            .replicas
            .iter()
            .map(|(id, e)| format!("{id}@{}", e.client))
            .collect();
        let leader = if leader == 0 {
            "none known".to_owned()
        } else {
            leader.to_string()
        };
        out!(
            "directory  leader {leader}  replicas {}",
            replicas.join(" ")
        );
    }
}

fn to_json(map: &ShardMap, rows: &[Row], directory: Option<u32>) -> serde_json::Value {
    serde_json::json!({
        "directory": directory.map(|leader| serde_json::json!({
            "leader": leader,
            "replicas": map.directory.replicas.iter().map(|(id, e)| serde_json::json!({
                "id": id, "client": e.client,
            })).collect::<Vec<_>>(),
        })),
        "cluster": format!("{:016x}", map.cluster),
        "epoch": map.epoch,
        "placement": describe(&map.default),
        "moving": map.moving.as_ref().map(|m| m.to_string()),
        "finishing": map.finishing.as_ref().map(|m| m.to_string()),
        "moves_switched": map.moved,
        "keyspaces": map
            .keyspaces
            .iter()
            .map(|(k, p)| (k.clone(), serde_json::Value::String(describe(p))))
            .collect::<serde_json::Map<_, _>>(),
        "shards": rows
            .iter()
            .map(|r| serde_json::json!({
                "shard": r.shard,
                "leader": r.leader,
                "versions": r.counters.get("exec_versions_alive"),
                "committed": r.counters.get("committed"),
                "move": r.counters.get("move_active").map(|active| serde_json::json!({
                    "active": *active == 1,
                    "rounds": r.counters.get("move_rounds"),
                    "keys_copied": r.counters.get("move_keys_copied"),
                    "bytes_copied": r.counters.get("move_bytes_copied"),
                    "keys_cleaned": r.counters.get("move_keys_cleaned"),
                })),
                "replicas": r.replicas.iter().map(|(id, addr)| serde_json::json!({
                    "id": id, "client": addr,
                })).collect::<Vec<_>>(),
            }))
            .collect::<Vec<_>>(),
    })
}
