//! The files under `deploy/` against a live replica: every metric the
//! Grafana dashboard and the Prometheus alert rules name exists in a real
//! `creek serve`'s `/metrics` (so they cannot drift from the code), the
//! dashboard is well-formed, and `promtool check rules` passes on the rules
//! (`promtool` from `CREEK_PROMTOOL` or the PATH; without it the check
//! says so and passes, unless `CREEK_TEST_PROMTOOL=required`, as in CI).

mod common;
#[path = "console_e2e/webdriver.rs"]
#[allow(dead_code)]
mod webdriver;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use creek_proto::pb::Level;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The names a scraper sees for the families in `text`'s `# TYPE` lines.
fn exposed(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::from(["up".to_owned()]);
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        names.insert(name.to_owned());
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[],
        };
        for s in suffixes {
            names.insert(format!("{name}{s}"));
        }
    }
    names
}

/// Every `creek_…` name in `text`.
fn named(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("creek_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alert_rules_name_only_metrics_a_replica_exports() {
    let addr = free_addr();
    let mut cluster = Cluster::prepare_with(1, |cfg| cfg.metrics_addr = Some(addr));
    cluster.spawn_all();
    cluster.wait_for_leader(Duration::from_secs(20)).await;
    let mut c = cluster.client(0).await;
    let put = req("kv.put", &[b("k"), b("v")], &[Level::Weak, Level::Strong]);
    call(&mut c, put, Duration::from_secs(20))
        .await
        .expect("put");
    let deadline = Instant::now() + Duration::from_secs(20);
    let metrics = loop {
        let got = webdriver::http("GET", addr, "/metrics", None);
        if let Ok((200, body)) = got {
            break body;
        }
        assert!(Instant::now() < deadline, "GET /metrics: {got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let exported = exposed(&metrics);
    assert!(
        exported.contains("creek_procedure_calls_total"),
        "{exported:?}"
    );

    let dashboard =
        std::fs::read_to_string(repo().join("deploy/grafana/creek.json")).expect("dashboard");
    let rules =
        std::fs::read_to_string(repo().join("deploy/prometheus/creek-alerts.yml")).expect("rules");
    let json: serde_json::Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    let panels = json["panels"].as_array().expect("panels");
    let queries = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter(|t| t["expr"].as_str().is_some_and(|e| !e.is_empty()))
        .count();
    assert!(queries >= 15, "{queries} queries");
    for (file, text) in [("creek.json", &dashboard), ("creek-alerts.yml", &rules)] {
        let missing: Vec<String> = named(text)
            .into_iter()
            .filter(|n| !exported.contains(n))
            .collect();
        assert!(
            missing.is_empty(),
            "{file} names metrics no replica exports: {missing:?}"
        );
    }

    let promtool = std::env::var_os("CREEK_PROMTOOL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("promtool"));
    match std::process::Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .arg(repo().join("deploy/prometheus/creek-alerts.yml"))
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "promtool check rules: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => {
            let required = std::env::var("CREEK_TEST_PROMTOOL").is_ok_and(|v| v == "required");
            assert!(
                !required,
                "CREEK_TEST_PROMTOOL=required but {} cannot run: {e}",
                promtool.display()
            );
            eprintln!(
                "SKIPPED promtool check rules: {} cannot run ({e}); set CREEK_PROMTOOL to \
                 Debian's promtool (apt-get download prometheus; dpkg -x)",
                promtool.display()
            );
        }
    }
}

/// Replica processes started from the systemd unit's command line, killed
/// (by process id) when dropped.
struct Replicas(Vec<std::process::Child>);

impl Drop for Replicas {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `creek call` as a client of the templated cluster; its stdout, or its
/// stderr as the error.
fn creek_call(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_creek"))
        .arg("call")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(format!("{}{}", text(&out.stdout), text(&out.stderr)))
    }
}

/// The configuration template with its fields filled in, started the way
/// the systemd unit starts it (its `ExecStart`, with this build's binary
/// and the test's paths), serves calls over TLS with users checked: a
/// call with the root token runs, one without a token is refused.
#[test]
fn the_service_template_starts_a_cluster_with_tls_and_users() {
    let dir = std::env::temp_dir().join(format!(
        "creek-deploy-{}-{}",
        std::process::id(),
        free_addr().port()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let certs = dir.join("certs");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(["certs", "create-local", "--replicas", "3", "--dir"])
        .arg(&certs)
        .output()
        .expect("creek certs");
    assert!(status.status.success(), "{status:?}");
    let root = creek_server::auth::Token::generate(true).expect("rng");
    let hash = creek_server::auth::to_hex(&root.hash());

    let template = std::fs::read_to_string(repo().join("deploy/config/creek.toml.template"))
        .expect("template");
    let unit = std::fs::read_to_string(repo().join("deploy/systemd/creek@.service")).expect("unit");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let peers: Vec<_> = (0..3).map(|_| free_addr()).collect();
    let clients: Vec<_> = (0..3).map(|_| free_addr()).collect();
    let mut procs = Replicas(Vec::new());
    for id in 1..=3usize {
        let mut config = template
            .replace("@ID@", &id.to_string())
            .replace(
                "@DATA_DIR@",
                &dir.join(format!("r{id}")).display().to_string(),
            )
            .replace("@METRICS_ADDR@", &free_addr().to_string())
            .replace("@CERTS_DIR@", &certs.display().to_string())
            .replace("@ROOT_TOKEN_SHA256@", &hash);
        for n in 1..=3 {
            config = config
                .replace(&format!("@PEER_{n}@"), &peers[n - 1].to_string())
                .replace(&format!("@CLIENT_{n}@"), &clients[n - 1].to_string());
        }
        let unfilled = config.match_indices('@').find_map(|(at, _)| {
            let rest = &config[at + 1..];
            let end = rest
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(rest.len());
            (end > 0 && rest[end..].starts_with('@')).then(|| &rest[..end])
        });
        assert!(
            unfilled.is_none(),
            "@{unfilled:?}@ left unfilled:\n{config}"
        );
        let file = dir.join(format!("replica-{id}.toml"));
        std::fs::write(&file, config).expect("config");
        let command = exec
            .replace("/usr/local/bin/creek", env!("CARGO_BIN_EXE_creek"))
            .replace("/etc/creek/replica-%i.toml", &file.display().to_string())
            .replace("%i", &id.to_string());
        let mut words = command.split_whitespace();
        let program = words.next().expect("a program");
        let log = std::fs::File::create(dir.join(format!("r{id}.log"))).expect("log");
        let child = std::process::Command::new(program)
            .args(words)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("creek serve");
        procs.0.push(child);
    }

    let ca = certs.join("ca.crt").display().to_string();
    let cert = certs.join("client-root.crt").display().to_string();
    let key = certs.join("client-root.key").display().to_string();
    let token = root.to_string();
    let addr = clients[0].to_string();
    let tls = ["--addr", &addr, "--ca", &ca, "--cert", &cert, "--key", &key];
    let put = |token: Option<&str>| {
        let mut args: Vec<&str> = tls.to_vec();
        if let Some(t) = token {
            args.extend(["--token", t]);
        }
        args.extend([
            "--level",
            "strong",
            "--timeout",
            "5s",
            "kv.put",
            "deployed",
            "yes",
        ]);
        creek_call(&args)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match put(Some(&token)) {
            Ok(_) => break,
            Err(e) => assert!(
                Instant::now() < deadline,
                "no cluster from the template within 60 s: {e}; logs in {}",
                dir.display()
            ),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut get: Vec<&str> = tls.to_vec();
    get.extend(["--token", &token, "--level", "strong", "kv.get", "deployed"]);
    let read = creek_call(&get).expect("get");
    assert!(read.contains("yes"), "{read}");
    let refused = put(None).expect_err("no token");
    assert!(
        refused.to_lowercase().contains("unauthenticated"),
        "{refused}"
    );
    drop(procs);
    let _ = std::fs::remove_dir_all(&dir);
}
