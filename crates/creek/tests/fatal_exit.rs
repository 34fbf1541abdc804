//! End-to-end: a replica that fails does not stay up as a shell refusing
//! every request. The `creek serve` process logs an ERROR line naming the
//! cause and exits non-zero, so that a supervisor restarts it or alerts
//! (docs/operations.md, "When a replica fails"). Each test bounds its waits
//! and kills its processes; data directories are removed unless it fails.

mod common;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use creek_proto::pb::Level;
use creek_server::ServerConfig;

const STRONG: &[Level] = &[Level::Strong];
const T: Duration = Duration::from_secs(20);

/// A `creek serve` process started by a test, with its stderr collected as
/// it comes; killed when dropped.
struct Serve {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Serve {
    /// Run `command` (which runs `creek serve`) with info logs.
    fn spawn(mut command: Command) -> Serve {
        let mut child = command
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn creek serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().expect("stderr is piped");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { return };
                let mut s = sink.lock().expect("stderr buffer");
                s.push_str(&strip_ansi(&line));
                s.push('\n');
            }
        });
        Serve { child, stderr }
    }

    /// `creek serve --config <config>`.
    fn with_config(config: &Path) -> Serve {
        let mut command = Command::new(env!("CARGO_BIN_EXE_creek"));
        command.arg("serve").arg("--config").arg(config);
        Serve::spawn(command)
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr buffer").clone()
    }

    /// The ERROR lines logged so far.
    fn errors(&self) -> Vec<String> {
        self.stderr()
            .lines()
            .filter(|l| l.contains(" ERROR "))
            .map(str::to_owned)
            .collect()
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Wait for the process to exit, at most `within`; then give its reader
    /// a moment to take the last lines.
    async fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.exited() {
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Drop the terminal colour codes a log line may carry.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A directory removed when dropped (kept if the test fails, for its
/// logs).
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "creek-{what}-{}-{}",
            std::process::id(),
            free_addr().port()
        ));
        std::fs::create_dir_all(&dir).expect("mkdir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

/// A strong put at replica `i`, committed.
async fn strong_put(cluster: &Cluster, i: usize, key: &str, value: &str) {
    let mut c = cluster.client(i).await;
    let views = call(&mut c, req("kv.put", &[b(key), b(value)], STRONG), T)
        .await
        .unwrap_or_else(|e| panic!("strong put at replica {}: {e}", i + 1));
    assert_eq!(result(&views), Ok(Value::Nil), "{views:?}");
}

/// The bug report: a follower's data directory is deleted and the replica
/// restarted with the same configuration. The leader's heartbeat says
/// entries the follower acknowledged are committed there, which its empty
/// log cannot hold; the consensus library used to panic on it and leave a
/// process that refused everything and logged nothing. The process must
/// never be silent: it exits non-zero with an ERROR line, or it says it
/// lost its data and is rebuilt from a member's checkpoint, after which it
/// serves what the cluster committed; the two healthy replicas keep
/// committing strong ops throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_restarted_without_its_data_says_so_and_the_others_serve_on() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_for_leader(T).await;
    let wiped = (leader + 1) % 3;
    for i in 0..3 {
        for k in 0..5 {
            strong_put(&cluster, i, &format!("k{i}-{k}"), "v").await;
        }
    }
    // The follower committed them too, so the leader counts them as held
    // there.
    assert_eq!(strong_get(&cluster, wiped, "k2-4").await, b("v"));

    cluster.kill(wiped);
    let data = cluster.dir.join(format!("r{}", wiped + 1));
    std::fs::remove_dir_all(&data).expect("delete the data directory");
    let mut serve = Serve::with_config(&cluster.dir.join(format!("r{}.toml", wiped + 1)));

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = serve.wait_exit(Duration::from_millis(100)).await {
            assert!(
                !status.success(),
                "the wiped replica exited with success:\n{}",
                serve.stderr()
            );
            assert!(
                !serve.errors().is_empty(),
                "the wiped replica exited ({status}) without an ERROR line:\n{}",
                serve.stderr()
            );
            break;
        }
        let log = serve.stderr();
        if log.contains("lost its data directory")
            && log.contains("rebuilt from a member's checkpoint: a member of the cluster again")
        {
            // Still up: it said it lost its data, and was rebuilt.
            assert_eq!(strong_get(&cluster, wiped, "k2-4").await, b("v"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the wiped replica neither exited with an ERROR nor was rebuilt within 10 s:\n{log}"
        );
    }

    for i in (0..3).filter(|i| *i != wiped) {
        strong_put(&cluster, i, &format!("after-{i}"), "w").await;
    }
    for i in (0..3).filter(|i| *i != wiped) {
        for j in (0..3).filter(|j| *j != wiped) {
            assert_eq!(strong_get(&cluster, i, &format!("after-{j}")).await, b("w"));
        }
    }
}

/// A write to the data directory fails (the file size limit stands in for
/// a full or failing disk: it works without privileges, even as root, for
/// whom a read-only directory is no obstacle): the replica must not guess
/// after a failed write, and the process ends with the disk failure named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_ends_the_process_naming_the_disk_failure() {
    let dir = TempDir::new("fatal-disk");
    let client_addr = free_addr();
    let mut config = ServerConfig::group_on(&[free_addr()], &[client_addr], &dir.0)
        .expect("group")
        .remove(0);
    config.workers = 1;
    let config_path = dir.0.join("r1.toml");
    std::fs::write(&config_path, config.to_toml().expect("toml")).expect("config");

    // 4 MiB: room for the new database (about 1.5 MiB), not for the
    // values below. An ignored SIGXFSZ stays ignored across exec, so the
    // write that passes the limit fails with EFBIG instead of killing the
    // process. (`ulimit -f` counts 512-byte blocks in a POSIX shell.)
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(r#"ulimit -f 8192 && trap '' XFSZ && exec "$0" serve --config "$1""#)
        .arg(env!("CARGO_BIN_EXE_creek"))
        .arg(&config_path);
    let mut serve = Serve::spawn(command);

    let client = {
        let deadline = Instant::now() + T;
        loop {
            let addr = format!("http://{client_addr}");
            match creek_proto::pb::creek_client::CreekClient::connect(addr).await {
                Ok(c) => break c,
                Err(e) => {
                    assert!(
                        serve.exited().is_none() && Instant::now() < deadline,
                        "the replica did not start: {e}\n{}",
                        serve.stderr()
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    };

    // 100 KB values until a write fails (about 25 fit under the limit).
    let value = "x".repeat(100_000);
    let mut status = None;
    for k in 0..200 {
        let mut c = client.clone();
        let r = req("kv.put", &[b(&format!("k{k}")), b(&value)], STRONG);
        let _ = call(&mut c, r, Duration::from_secs(5)).await;
        if let Some(s) = serve.wait_exit(Duration::ZERO).await {
            status = Some(s);
            break;
        }
    }
    let status = match status {
        Some(s) => s,
        None => serve
            .wait_exit(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("the replica did not exit:\n{}", serve.stderr())),
    };
    assert!(
        !status.success(),
        "exited with success:\n{}",
        serve.stderr()
    );
    let errors = serve.errors();
    assert!(
        errors.iter().any(|l| l.contains("disk failure")),
        "no ERROR line names the disk failure:\n{}",
        serve.stderr()
    );
}
