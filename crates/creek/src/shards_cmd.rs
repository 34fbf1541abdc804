//! `creek shards`: the cluster's shard map as a replica serves it — its
//! epoch, each shard's replicas and leader, and where keys go.

use creek_client::{Cluster, ShardMap};
use creek_shard::Placement;

use crate::cli::{self, exit, Endpoints, Failure, Format, Output};

/// Arguments of `creek shards`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(flatten)]
    output: Output,
}

/// One shard as printed: its id, replicas (id, client address) and the
/// leader its replicas know (0: none answered or none elected).
struct Row {
    shard: u16,
    replicas: Vec<(u16, String)>,
    leader: u32,
}

/// Run `creek shards`.
pub fn run(args: &Args) -> Result<(), Failure> {
    let addrs = args.endpoints.list();
    let (map, rows) = cli::runtime()?.block_on(async {
        let cluster = cli::connect_cluster(&args.endpoints, &addrs).await?;
        let map = cluster.map().await;
        let rows = survey(&cluster, &map).await;
        Ok::<_, Failure>((map, rows))
    })?;
    match args.output.output {
        Format::Json => println!("{}", to_json(&map, &rows)),
        Format::Value => println!("{}", map.epoch),
        Format::Table => print_table(&map, &rows),
    }
    if rows.iter().any(|r| r.leader == 0) {
        return Err(Failure::new(
            exit::DEGRADED,
            "a shard has no leader known: its strong ops cannot finish".to_owned(),
        ));
    }
    Ok(())
}

async fn survey(cluster: &Cluster, map: &ShardMap) -> Vec<Row> {
    let mut rows = Vec::new();
    for (id, shard) in &map.shards {
        let leader = match cluster.shard(*id).await {
            Some(client) => client.status().await.map_or(0, |s| s.leader),
            None => 0,
        };
        rows.push(Row {
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

fn print_table(map: &ShardMap, rows: &[Row]) {
    println!(
        "cluster {:016x}  epoch {}  {} shards",
        map.cluster,
        map.epoch,
        map.shards.len()
    );
    println!("keys: {}", describe(&map.default));
    for (name, p) in &map.keyspaces {
        println!("keyspace {name}: {}", describe(p));
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
        println!(
            "shard {}  leader {leader}  replicas {}",
            r.shard,
            replicas.join(" ")
        );
    }
}

fn to_json(map: &ShardMap, rows: &[Row]) -> serde_json::Value {
    serde_json::json!({
        "cluster": format!("{:016x}", map.cluster),
        "epoch": map.epoch,
        "placement": describe(&map.default),
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
                "replicas": r.replicas.iter().map(|(id, addr)| serde_json::json!({
                    "id": id, "client": addr,
                })).collect::<Vec<_>>(),
            }))
            .collect::<Vec<_>>(),
    })
}
