//! End-to-end: the HTTP port (console, its API, `/metrics`, `/health`,
//! `/ready`) of real `creek serve` processes. It refuses what an attacker
//! tries (docs/security.md, "The HTTP port"): a DNS-rebinding request
//! naming another host, and, on a cluster that checks users, the API and
//! the metrics without a token. Health and readiness answer without one,
//! and readiness follows a replica that loses its quorum and gets it back
//! (docs/operations.md, "Health and readiness").

mod common;
#[path = "console_e2e/webdriver.rs"]
#[allow(dead_code)]
mod webdriver;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use creek_server::auth::{to_hex, Token};
use creek_server::AuthConfig;
use webdriver::http_with;

/// Wait until the console answers `GET path` with `want` (it samples the
/// node loop once a second).
async fn answers(addr: SocketAddr, path: &str, headers: &[(&str, &str)], want: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = http_with("GET", addr, path, headers, None);
        if let Ok((code, body)) = &got {
            if *code == want {
                return body.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "GET {path}: {got:?}, wanted {want}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_port_refuses_rebound_hosts_and_callers_without_a_token() {
    let root = Token::generate(true).expect("rng");
    let console = free_addr();
    let mut cluster = Cluster::prepare_with(1, |cfg| {
        cfg.auth = AuthConfig {
            enabled: true,
            root_token_sha256: Some(to_hex(&root.hash())),
        };
        cfg.metrics_addr = Some(console);
    });
    cluster.spawn_all();
    cluster.wait_for_leader(Duration::from_secs(20)).await;
    let bearer = format!("Bearer {root}");
    let auth = [("Authorization", bearer.as_str())];

    // The API and the metrics need a token: 401 without one or with a bad
    // one, the answer with the root's.
    for path in ["/api/console", "/api/procedures", "/metrics"] {
        let body = answers(console, path, &[], 401).await;
        assert!(body.contains("unauthenticated"), "{path}: {body}");
        answers(console, path, &[("Authorization", "Bearer nonsense")], 401).await;
    }
    let report = answers(console, "/api/console", &auth, 200).await;
    assert!(report.contains("\"replica\":1"), "{report}");
    let metrics = answers(console, "/metrics", &auth, 200).await;
    assert!(metrics.contains("creek_"), "{metrics}");
    // The page carries no data: served to anyone. So do health and
    // readiness, for load balancers that send no token.
    answers(console, "/", &[], 200).await;
    let health = answers(console, "/health", &[], 200).await;
    assert!(health.contains("\"status\":\"ok\""), "{health}");
    let ready = answers(console, "/ready", &[], 200).await;
    assert!(ready.contains("\"leader\":1"), "{ready}");

    // The console's invoke form, with the token as a Bearer header: the op
    // runs; without it, 401 and nothing applied.
    let body = br#"{"procedure":"kv.put","args":["door","open"],"level":"strong"}"#;
    let json = Some(("application/json", &body[..]));
    let (code, answer) = http_with("POST", console, "/api/invoke", &auth, json).expect("invoke");
    assert_eq!(code, 200, "{answer}");
    assert!(answer.contains("\"event\":\"end\""), "{answer}");
    let other = br#"{"procedure":"kv.put","args":["door","forced"],"level":"strong"}"#;
    let json = Some(("application/json", &other[..]));
    let (code, answer) = http_with("POST", console, "/api/invoke", &[], json).expect("invoke");
    assert_eq!(code, 401, "{answer}");

    // DNS rebinding: a page of evil.example whose name now points here
    // sends its own name as Host (and as Origin); refused before anything
    // else, token or not.
    let evil = format!("evil.example:{}", console.port());
    let origin = format!("http://{evil}");
    let rebound = [
        ("Host", evil.as_str()),
        ("Origin", origin.as_str()),
        ("Authorization", bearer.as_str()),
    ];
    let json = Some(("application/json", &other[..]));
    let (code, answer) = http_with("POST", console, "/api/invoke", &rebound, json).expect("invoke");
    assert_eq!(code, 403, "{answer}");
    assert!(answer.contains("host_not_allowed"), "{answer}");
    let (code, _) = http_with("GET", console, "/api/console", &rebound, None).expect("get");
    assert_eq!(code, 403);
    let (code, _) = http_with("GET", console, "/metrics", &rebound, None).expect("get");
    assert_eq!(code, 403);
    // The loopback names pass.
    let local = format!("localhost:{}", console.port());
    answers(console, "/api/console", &[("Host", &local), auth[0]], 200).await;

    // Nothing the refused calls sent was applied.
    let (code, answer) = http_with(
        "POST",
        console,
        "/api/invoke",
        &auth,
        Some((
            "application/json",
            br#"{"procedure":"kv.get","args":["door"],"level":"strong"}"#,
        )),
    )
    .expect("invoke");
    assert_eq!(code, 200, "{answer}");
    assert!(answer.contains("\"value\":\"open\""), "{answer}");
}

/// `GET /ready` on a replica cut off from the other two: 503 naming the
/// lost leader within a few election timeouts, while `/health` stays 200
/// (the process serves); back to 200 once the links heal. The others stay
/// ready throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_a_replica_that_loses_its_quorum_and_gets_it_back() {
    let ports: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    let mut cluster = Cluster::prepare_with(3, |_| {});
    for (i, addr) in ports.iter().enumerate() {
        cluster.configure(i, |c| c.metrics_addr = Some(*addr));
    }
    cluster.spawn_all();
    let leader = cluster.wait_for_leader(Duration::from_secs(20)).await;
    for addr in &ports {
        answers(*addr, "/ready", &[], 200).await;
        answers(*addr, "/health", &[], 200).await;
    }
    // A follower, so the other two keep their leader.
    let cut = (leader + 1) % 3;
    cluster.isolate(cut, true).await;
    let why = answers(ports[cut], "/ready", &[], 503).await;
    assert!(why.contains("no known leader"), "{why}");
    answers(ports[cut], "/health", &[], 200).await;
    for i in (0..3).filter(|i| *i != cut) {
        answers(ports[i], "/ready", &[], 200).await;
    }
    cluster.isolate(cut, false).await;
    let ready = answers(ports[cut], "/ready", &[], 200).await;
    assert!(ready.contains("\"status\":\"ready\""), "{ready}");
}

/// Speculation telemetry by procedure on a live replica: after strong
/// calls with both views and a transfer that aborts, `/metrics` carries
/// `creek_procedure_*` lines labelled with each procedure, and the
/// console's report a row per procedure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_the_console_break_speculation_down_by_procedure() {
    use creek_proto::pb::Level;
    let console = free_addr();
    let mut cluster = Cluster::prepare_with(1, |cfg| cfg.metrics_addr = Some(console));
    cluster.spawn_all();
    cluster.wait_for_leader(Duration::from_secs(20)).await;
    let mut c = cluster.client(0).await;
    let t = Duration::from_secs(20);
    for i in 0..5 {
        let put = req(
            "kv.put",
            &[b("k"), b(&i.to_string())],
            &[Level::Weak, Level::Strong],
        );
        call(&mut c, put, t).await.expect("put");
    }
    let poor = req(
        "kv.transfer",
        &[b("empty"), b("k2"), creek_types::value::Value::Int(5)],
        &[Level::Strong],
    );
    let views = call(&mut c, poor, t).await.expect("transfer");
    assert!(result(&views).is_err(), "{views:?}");

    let metrics = answers(console, "/metrics", &[], 200).await;
    for line in [
        r#"creek_procedure_calls_total{procedure="kv.put",level="strong",outcome="ok"} 5"#,
        r#"creek_procedure_calls_total{procedure="kv.transfer",level="strong",outcome="abort"} 1"#,
        r#"creek_procedure_aborts_total{procedure="kv.transfer",kind="procedure"} 1"#,
        r#"creek_procedure_preliminary_views_total{procedure="kv.put",kind="held"} 5"#,
        r#"creek_procedure_final_views_total{procedure="kv.put",kind="confirmed"} 5"#,
        r#"creek_procedure_view_latency_seconds_count{procedure="kv.put",kind="final"} 5"#,
    ] {
        assert!(metrics.contains(line), "{line} is not in\n{metrics}");
    }
    // The console samples once a second.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let report = answers(console, "/api/console", &[], 200).await;
        let r: serde_json::Value = serde_json::from_str(&report).expect("JSON");
        let rows = r["procedures"].as_array().cloned().unwrap_or_default();
        if let Some(put) = rows.iter().find(|p| p["procedure"] == "kv.put") {
            assert_eq!(put["strong"], 5, "{put}");
            assert_eq!(put["accuracy"], 1.0, "{put}");
            assert!(rows
                .iter()
                .any(|p| p["procedure"] == "kv.transfer" && p["aborts"] == 1));
            break;
        }
        assert!(Instant::now() < deadline, "no procedures table: {report}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
