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
