//! Redis: a primary and two replicas (`replicaof`) on loopback, in memory
//! (no RDB snapshots, no append-only file: nothing is fsynced). Two
//! writes: `SET`, acknowledged by the primary alone, and `SET` followed
//! by `WAIT 2 <timeout>` in one pipeline, acknowledged once both replicas
//! have received it. Every client writes to the primary (replicas are
//! read-only).

use std::path::Path;
use std::process::Command;

use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;
use serde_json::json;

use super::driver::{self, Conn};
use super::procs::{self, Procs};
use super::Settings;
use creek_harness::ports::reserve_one as free_addr;

/// Replicas of the primary.
const REPLICAS: usize = 2;

struct RedisConn {
    conn: MultiplexedConnection,
    /// `Some(timeout_ms)`: each `SET` is followed by `WAIT 2 timeout_ms`.
    wait_ms: Option<u64>,
}

impl Conn for RedisConn {
    async fn write(&mut self, n: u64, value: &[u8]) -> Result<(), String> {
        match self.wait_ms {
            None => redis::cmd("SET")
                .arg(driver::key(n))
                .arg(value)
                .query_async::<()>(&mut self.conn)
                .await
                .map_err(|e| e.to_string()),
            Some(ms) => {
                let (acked,): (i64,) = redis::pipe()
                    .cmd("SET")
                    .arg(driver::key(n))
                    .arg(value)
                    .ignore()
                    .cmd("WAIT")
                    .arg(REPLICAS)
                    .arg(ms)
                    .query_async(&mut self.conn)
                    .await
                    .map_err(|e| e.to_string())?;
                if acked < REPLICAS as i64 {
                    return Err(format!("WAIT {REPLICAS} {ms} saw {acked} replicas"));
                }
                Ok(())
            }
        }
    }
}

async fn connect(port: u16, wait_ms: Option<u64>) -> Result<RedisConn, String> {
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{port}/")).map_err(|e| e.to_string())?;
    // No response timeout of the client's own (500 ms by default): the
    // driver bounds each write, and WAIT may take its timeout.
    let config = AsyncConnectionConfig::new().set_response_timeout(None);
    let conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| format!("connecting to Redis on port {port}: {e}"))?;
    Ok(RedisConn { conn, wait_ms })
}

/// `Some` once the primary has every replica online.
async fn replicas_online(port: u16) -> Result<Option<()>, String> {
    let mut c = connect(port, None).await?;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut c.conn)
        .await
        .map_err(|e| e.to_string())?;
    let online = info.lines().filter(|l| l.contains("state=online")).count();
    Ok((online == REPLICAS).then_some(()))
}

/// Start the primary and replicas, measure both writes, stop them: the
/// report's `redis` object.
pub(crate) async fn measure(
    settings: &Settings,
    redis_server: &Path,
    wait_timeout_ms: u64,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let version = procs::version_of(redis_server).map_err(|e| {
        format!("{e} (scripts/bench-peers-setup.sh installs redis-server; or pass --redis-bin)")
    })?;
    let mut procs = Procs::new("redis", "KILL")?;
    let port = free_addr()?.port();
    for i in 0..=REPLICAS {
        let name = if i == 0 {
            "primary".to_owned()
        } else {
            format!("replica{i}")
        };
        let data = procs.dir.join(&name);
        std::fs::create_dir_all(&data).map_err(|e| format!("creating {}: {e}", data.display()))?;
        let own = if i == 0 { port } else { free_addr()?.port() };
        let mut cmd = Command::new(redis_server);
        cmd.args(["--port", &own.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&data)
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            // The replicas' first full sync at once, not after 5 s.
            .args(["--repl-diskless-sync-delay", "0"]);
        if i > 0 {
            cmd.args(["--replicaof", "127.0.0.1", &port.to_string()]);
        }
        procs.spawn(&name, cmd)?;
    }
    procs::wait_for(&mut procs, "the Redis replicas did not come online", || {
        replicas_online(port)
    })
    .await?;
    eprintln!("bench peers: {version} up, primary on port {port}, {REPLICAS} replicas");
    let mut out = serde_json::Map::new();
    out.insert("version".into(), json!(version));
    out.insert("replicas".into(), json!(1 + REPLICAS));
    for (name, wait_ms) in [("set", None), ("set_wait2", Some(wait_timeout_ms))] {
        let label = match wait_ms {
            None => "redis SET".to_owned(),
            Some(ms) => format!("redis SET+WAIT {REPLICAS} {ms}"),
        };
        let m = driver::measure(&label, settings, connect(port, wait_ms).await?, |_| {
            connect(port, wait_ms)
        })
        .await?;
        out.insert(name.into(), m);
        procs.check_alive()?;
    }
    out.insert("wait_timeout_ms".into(), json!(wait_timeout_ms));
    drop(procs);
    Ok(out)
}
