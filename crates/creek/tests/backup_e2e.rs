//! End-to-end over real processes: `creek backup` streams a consistent
//! checkpoint of a loaded cluster into a directory, and `creek restore`
//! makes a new cluster's replicas from it, whose state equals the backup's.
//! A damaged backup, or a data directory that is not empty, is refused and
//! nothing is written.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use creek_client::Client;
use creek_proto::pb::Level;

const T: Duration = Duration::from_secs(20);

/// Run the `creek` binary; (success, stdout + stderr).
fn creek(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(args)
        .output()
        .expect("run creek");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

async fn state_of(cluster: &Cluster, i: usize) -> BTreeMap<Bytes, Bytes> {
    let c = Client::connect([cluster.clients[i].to_string()])
        .await
        .expect("connect");
    c.dump().await.expect("dump").1
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_of_a_loaded_cluster_restores_to_a_cluster_with_its_state() {
    let cluster = Cluster::start(3).await;
    for i in 0..200 {
        let mut c = cluster.client(i % 3).await;
        let key = format!("k{i}");
        let value = format!("v{i}");
        let level: &[Level] = if i % 2 == 0 {
            &[Level::Strong]
        } else {
            &[Level::Weak, Level::Strong]
        };
        call(&mut c, req("kv.put", &[b(&key), b(&value)], level), T)
            .await
            .expect("put");
    }
    // Replica 0 may not be in the majority that committed the last puts:
    // wait until it applied them all.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let source = loop {
        let state = state_of(&cluster, 0).await;
        if state.len() >= 200 {
            break state;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replica 1 holds {} keys",
            state.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let dir = cluster.dir.join("backup");
    let addrs: Vec<String> = cluster
        .clients
        .iter()
        .flat_map(|a| ["--addr".to_owned(), a.to_string()])
        .collect();
    let mut args = vec!["backup", "--to", path(&dir)];
    args.extend(addrs.iter().map(String::as_str));
    let (ok, out) = creek(&args);
    assert!(ok, "{out}");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest"))
            .expect("json");
    assert!(
        manifest["committed"].as_u64().expect("committed") >= 200,
        "{manifest}"
    );
    assert_eq!(manifest["keys"].as_u64(), Some(source.len() as u64));
    // A second backup into the same directory is refused.
    let (ok, out) = creek(&args);
    assert!(!ok && out.contains("already holds a backup"), "{out}");

    // The new cluster, restored replica by replica.
    let mut restored = Cluster::prepare_with(3, |_| {});
    // A damaged copy is refused before anything is written.
    let damaged = cluster.dir.join("damaged");
    std::fs::create_dir_all(&damaged).expect("mkdir");
    std::fs::copy(dir.join("manifest.json"), damaged.join("manifest.json")).expect("copy");
    let mut bytes = std::fs::read(dir.join("checkpoint.bin")).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(damaged.join("checkpoint.bin"), bytes).expect("write");
    let config = restored.config_path(0);
    let (ok, out) = creek(&[
        "restore",
        "--from",
        path(&damaged),
        "--config",
        path(&config),
    ]);
    assert!(!ok && out.contains("is damaged"), "{out}");
    assert!(!restored.dir.join("r1").exists(), "nothing was written");

    for i in 0..3 {
        let config = restored.config_path(i);
        let (ok, out) = creek(&["restore", "--from", path(&dir), "--config", path(&config)]);
        assert!(ok, "{out}");
    }
    // A data directory that holds something is not overwritten.
    let config = restored.config_path(0);
    let (ok, out) = creek(&["restore", "--from", path(&dir), "--config", path(&config)]);
    assert!(!ok && out.contains("is not empty"), "{out}");

    restored.spawn_all();
    restored.wait_for_leader(T).await;
    for i in 0..3 {
        assert_eq!(state_of(&restored, i).await, source, "replica {}", i + 1);
    }
    // It serves: a strong read of a restored key, and a new write.
    assert_eq!(strong_get(&restored, 1, "k7").await, b("v7"));
    let mut c = restored.client(2).await;
    let views = call(
        &mut c,
        req("kv.put", &[b("new"), b("x")], &[Level::Strong]),
        T,
    )
    .await
    .expect("put");
    assert!(
        views.iter().any(|v| matches!(v, Got::Final(Ok(_)))),
        "{views:?}"
    );
}

/// A backup taken while clients keep writing, strong and weak, without a
/// pause, completes (the replica answers at the first turn of its loop
/// that ends at a clean point of the committed order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_sustained_writes_completes() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let cluster = Cluster::start(3).await;
    let stop = Arc::new(AtomicBool::new(false));
    let stable = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for w in 0..8 {
        let addr = cluster.clients[w % 3].to_string();
        let (stop, stable) = (stop.clone(), stable.clone());
        writers.push(tokio::spawn(async move {
            let c = Client::connect([addr]).await.expect("connect");
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let args = vec![b(&format!("w{w}")), b(&n.to_string())];
                let strong = n.is_multiple_of(2);
                if strong {
                    let op = c.invoke_strong("kv.put", args).await;
                    if let Ok(op) = op {
                        if op.final_view().await.is_ok() {
                            stable.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                } else {
                    let _ = c.invoke_weak("kv.put", args).await;
                }
                n += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let dir = cluster.dir.join("backup-busy");
    let mut args = vec![
        "backup".to_owned(),
        "--to".to_owned(),
        path(&dir).to_owned(),
    ];
    for a in &cluster.clients {
        args.extend(["--addr".to_owned(), a.to_string()]);
    }
    let before = stable.load(Ordering::Relaxed);
    let out = tokio::task::spawn_blocking(move || {
        creek(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .expect("backup");
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    let (ok, out) = out;
    assert!(ok, "a backup under load: {out}");
    assert!(before > 0, "the writers wrote");
    let after = stable.load(Ordering::Relaxed);
    assert!(after > before, "the writers kept writing during the backup");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest"))
            .expect("json");
    assert!(manifest["keys"].as_u64().expect("keys") >= 1, "{manifest}");
}
