//! A sharded cluster of real `creek serve` processes on loopback for
//! end-to-end tests: two shards of three replicas (ids 1-3 shard 0, 4-6
//! shard 1), with or without the directory's three (7-9), every one naming
//! the map file. Killed and removed when dropped (the directory kept if the
//! test panicked).

use std::path::PathBuf;
use std::time::Duration;

use creek_client::{pb, Client, ShardId, ShardMap};
use creek_harness::launcher::{Cluster as Procs, Launch, OnDrop};
use creek_server::ServerConfig;
use creek_shard::Endpoint;

/// How long the processes get to accept clients.
const START_LIMIT: Duration = Duration::from_secs(20);
/// Replicas of each shard.
pub const REPLICAS: usize = 3;
/// Shards.
pub const SHARDS: usize = 2;
/// The directory group's replicas (ids 7-9, after the shards').
pub const DIRECTORY: usize = 3;

/// The cluster's processes and the map they were formed with.
pub struct Sharded {
    pub procs: Procs,
    pub map: ShardMap,
}

impl Sharded {
    /// Form and start the cluster (`name` names its directory, `cluster`
    /// is the map's cluster id); `directory`: with the directory group.
    /// Every replica runs one worker; `configure(i, config)` sets the rest
    /// of replica `i`'s configuration.
    pub fn start(
        name: &str,
        cluster: u64,
        directory: bool,
        configure: impl Fn(usize, &mut ServerConfig),
    ) -> Sharded {
        let dir = std::env::temp_dir().join(format!(
            "creek-{name}-{}-{}",
            std::process::id(),
            creek_harness::ports::reserve_one().expect("port").port()
        ));
        let launch = Launch {
            on_drop: OnDrop::RemoveDirUnlessPanicking,
            ..Launch::new(env!("CARGO_BIN_EXE_creek").into(), dir).log_filter("info")
        };
        let n = SHARDS * REPLICAS + if directory { DIRECTORY } else { 0 };
        let mut procs = Procs::on_loopback(launch, n).expect("ports");
        let ids: Vec<ShardId> = (0..SHARDS as u16).map(ShardId).collect();
        let mut map = ShardMap::hashed(cluster, &ids);
        for i in 0..n {
            let endpoint = Endpoint {
                client: procs.clients[i].to_string(),
                peer: procs.peers[i].to_string(),
            };
            let group = if i < SHARDS * REPLICAS {
                map.shards
                    .get_mut(&ShardId((i / REPLICAS) as u16))
                    .expect("shard")
            } else {
                &mut map.directory
            };
            group.replicas.insert((i + 1) as u16, endpoint);
        }
        let map_path: PathBuf = procs.dir.join("shard-map.bin");
        std::fs::write(&map_path, creek_shard::encode(&map)).expect("map file");
        for i in 0..n {
            let first = i / REPLICAS * REPLICAS;
            let members: Vec<usize> = (first..first + REPLICAS).collect();
            procs
                .configure_valid(i, &members, |c| {
                    c.workers = 1;
                    c.shard_map = Some(map_path.clone());
                    c.directory = i >= SHARDS * REPLICAS;
                    configure(i, c);
                })
                .expect("config");
            procs.spawn(i).expect("spawn");
        }
        procs
            .wait_accepting(START_LIMIT)
            .expect("replicas accept clients");
        Sharded { procs, map }
    }

    /// Replica `i`'s client address.
    pub fn addr(&self, i: usize) -> String {
        self.procs.clients[i].to_string()
    }

    /// A key shard `s` owns, made from `stem`.
    pub fn key_of(&self, s: u16, stem: &str) -> String {
        (0..)
            .map(|n| format!("{stem}{n}"))
            .find(|k| self.map.owner(None, k.as_bytes()) == ShardId(s))
            .expect("a key")
    }

    /// A plain client of shard `s`'s replicas (no routing).
    pub async fn shard_client(&self, s: usize) -> Client {
        let addrs: Vec<String> = (s * REPLICAS..(s + 1) * REPLICAS)
            .map(|i| self.addr(i))
            .collect();
        Client::connect(addrs).await.expect("connect")
    }

    /// Cut replica `i` off from the other replicas of its shard (the
    /// replica must allow fault injection).
    pub async fn isolate(&self, i: usize) {
        let first = i / REPLICAS * REPLICAS;
        let links = (first..first + REPLICAS)
            .filter(|j| *j != i)
            .map(|j| pb::LinkFault {
                peer: (j + 1) as u32,
                partitioned: true,
                ..Default::default()
            })
            .collect();
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr(i)))
            .expect("address")
            .connect()
            .await
            .expect("admin channel");
        pb::admin_client::AdminClient::new(channel)
            .set_faults(pb::SetFaultsRequest { links })
            .await
            .expect("set faults");
    }
}
