//! PostgreSQL: a primary and two synchronous standbys on loopback
//! (`synchronous_standby_names = 'FIRST 2 (s1, s2)'`,
//! `synchronous_commit = on`, fsync on), the standbys made by
//! `pg_basebackup` and streaming from the primary. The write is a
//! single-row upsert, committed when both standbys have flushed it; every
//! client writes to the primary (the standbys are read-only).
//!
//! PostgreSQL refuses to run as root: as root, every PostgreSQL program
//! runs as the user `postgres` (Debian's package makes it), through
//! `setpriv`, and the temporary directory is handed to that user.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use tokio_postgres::{Client, NoTls, Statement};

use super::driver::{self, Conn};
use super::procs::{self, Procs};
use super::Settings;
use creek_harness::ports::reserve_one as free_addr;

/// The standbys' `application_name`s, as `synchronous_standby_names`
/// lists them.
const STANDBYS: [&str; 2] = ["s1", "s2"];
/// The role the benchmark connects as (initdb's superuser).
const USER: &str = "bench";
const UPSERT: &str =
    "INSERT INTO kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v";

struct PgConn {
    client: Client,
    upsert: Statement,
}

impl Conn for PgConn {
    async fn write(&mut self, n: u64, value: &[u8]) -> Result<(), String> {
        self.client
            .execute(&self.upsert, &[&driver::key(n), &value])
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

async fn connect(port: u16) -> Result<Client, String> {
    let (client, connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user={USER} dbname=postgres"),
        NoTls,
    )
    .await
    .map_err(|e| format!("connecting to PostgreSQL on port {port}: {e}"))?;
    // The connection does the I/O; it ends when the client is dropped.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

async fn conn(port: u16) -> Result<PgConn, String> {
    let client = connect(port).await?;
    let upsert = client.prepare(UPSERT).await.map_err(|e| e.to_string())?;
    Ok(PgConn { client, upsert })
}

/// Whom PostgreSQL runs as: `None` as ourselves, `Some("postgres")`
/// when we are root.
fn run_as() -> Result<Option<&'static str>, String> {
    let out = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| format!("running id -u: {e}"))?;
    if String::from_utf8_lossy(&out.stdout).trim() != "0" {
        return Ok(None);
    }
    let known = Command::new("id")
        .arg("postgres")
        .output()
        .map_err(|e| format!("running id postgres: {e}"))?;
    if !known.status.success() {
        return Err("PostgreSQL refuses to run as root and there is no user 'postgres' to run it as (scripts/bench-peers-setup.sh installs Debian's package, which makes one)".into());
    }
    Ok(Some("postgres"))
}

/// A command running `tool` of `bin`, as `user` if given.
fn pg_command(bin: &Path, tool: &str, user: Option<&str>) -> Command {
    match user {
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", u, "--regid", u, "--init-groups", "--"])
                .arg(bin.join(tool));
            c
        }
        None => Command::new(bin.join(tool)),
    }
}

/// A `postgres` server on `port` over `data`, its socket in `sockets`.
fn server(bin: &Path, user: Option<&str>, data: &Path, sockets: &Path, port: u16) -> Command {
    let mut c = pg_command(bin, "postgres", user);
    c.arg("-D").arg(data).arg("-k").arg(sockets).args([
        "-p",
        &port.to_string(),
        "-c",
        "listen_addresses=127.0.0.1",
    ]);
    c
}

/// `-c name=value` for each setting.
fn settings_args(c: &mut Command, settings: &[(&str, String)]) {
    for (name, value) in settings {
        c.arg("-c").arg(format!("{name}={value}"));
    }
}

/// `Some` once every standby streams synchronously from the primary.
async fn sync_standbys(port: u16) -> Result<Option<()>, String> {
    let c = connect(port).await?;
    let row = c
        .query_one(
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    let n: i64 = row.try_get(0).map_err(|e| e.to_string())?;
    Ok((n == STANDBYS.len() as i64).then_some(()))
}

/// Start the primary and standbys, measure, stop them: the report's
/// `postgres` object.
pub(crate) async fn measure(
    settings: &Settings,
    bin: &Path,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    for tool in ["initdb", "postgres", "pg_basebackup"] {
        if !bin.join(tool).exists() {
            return Err(format!(
                "no {tool} in {} (scripts/bench-peers-setup.sh installs PostgreSQL and exports CREEK_BENCH_PG_BIN; or pass --pg-bin)",
                bin.display()
            ));
        }
    }
    let version = procs::version_of(&bin.join("postgres"))?;
    let user = run_as()?;
    // Immediate shutdown: the data is thrown away, and a fast one would
    // wait on standbys that are stopping too.
    let mut procs = Procs::new("postgres", "QUIT")?;
    if let Some(u) = user {
        let status = Command::new("chown")
            .arg(format!("{u}:"))
            .arg(&procs.dir)
            .status()
            .map_err(|e| format!("running chown: {e}"))?;
        if !status.success() {
            return Err(format!("chown {u}: {} failed", procs.dir.display()));
        }
    }
    let dir = procs.dir.clone();
    let primary_dir = dir.join("primary");
    let mut initdb = pg_command(bin, "initdb", user);
    initdb.arg("-D").arg(&primary_dir).args([
        "-U",
        USER,
        "--auth=trust",
        "--no-locale",
        "-E",
        "UTF8",
        "--no-sync",
    ]);
    procs::run_to_end("initdb", initdb, dir.join("initdb.log")).await?;

    let port = free_addr()?.port();
    let max_connections = settings.clients.iter().max().copied().unwrap_or(1) + 20;
    let mut primary = server(bin, user, &primary_dir, &dir, port);
    settings_args(
        &mut primary,
        &[
            (
                "synchronous_standby_names",
                format!("FIRST {} ({})", STANDBYS.len(), STANDBYS.join(", ")),
            ),
            ("synchronous_commit", "on".into()),
            ("fsync", "on".into()),
            ("wal_level", "replica".into()),
            ("max_wal_senders", "10".into()),
            ("max_connections", max_connections.to_string()),
        ],
    );
    procs.spawn("primary", primary)?;
    procs::wait_for(&mut procs, "the primary did not start", || async {
        connect(port).await.map(|_| Some(()))
    })
    .await?;

    for name in STANDBYS {
        let data: PathBuf = dir.join(name);
        let mut backup = pg_command(bin, "pg_basebackup", user);
        backup
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", USER, "-D"])
            .arg(&data)
            .args(["-X", "stream", "-c", "fast", "-R", "--no-sync"]);
        procs::run_to_end(
            "pg_basebackup",
            backup,
            dir.join(format!("{name}-basebackup.log")),
        )
        .await?;
        let mut standby = server(bin, user, &data, &dir, free_addr()?.port());
        settings_args(
            &mut standby,
            &[
                (
                    "primary_conninfo",
                    format!("host=127.0.0.1 port={port} user={USER} application_name={name}"),
                ),
                ("fsync", "on".into()),
                ("hot_standby", "on".into()),
            ],
        );
        procs.spawn(name, standby)?;
    }
    procs::wait_for(
        &mut procs,
        "the standbys did not stream synchronously",
        || sync_standbys(port),
    )
    .await?;
    connect(port)
        .await?
        .batch_execute("CREATE TABLE kv (k text PRIMARY KEY, v bytea NOT NULL)")
        .await
        .map_err(|e| format!("creating the table: {e}"))?;
    eprintln!("bench peers: {version} up, primary on port {port}, 2 synchronous standbys");
    let write = driver::measure("postgres upsert", settings, conn(port).await?, |_| {
        conn(port)
    })
    .await?;
    procs.check_alive()?;
    drop(procs);
    let mut out = serde_json::Map::new();
    out.insert("version".into(), json!(version));
    out.insert("replicas".into(), json!(1 + STANDBYS.len()));
    out.insert(
        "synchronous_standby_names".into(),
        json!(format!(
            "FIRST {} ({})",
            STANDBYS.len(),
            STANDBYS.join(", ")
        )),
    );
    out.insert("write".into(), write);
    Ok(out)
}
