//! End-to-end: the HTTP port (console, its API, `/metrics`) of real
//! `creek serve` processes with a `[tls]` table and `[auth] enabled`, as
//! `creek dev --secure` runs them (docs/security.md, "Safe defaults";
//! docs/console.md, "Security"). The port is HTTPS with the replica's
//! certificate and asks for no client certificate; a plaintext request
//! gets no answer; the console reaches every other member over TLS, so
//! none shows up `unreachable` and no replica logs a failed handshake from
//! its polls; on a sharded cluster it forwards an invocation to the owning
//! shard over TLS with the caller's token. Waits are bounded; the
//! processes are killed by pid and the directory removed when the cluster
//! is dropped.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::sharded::{Sharded, REPLICAS, SHARDS};
use common::*;
use creek_server::auth::{to_hex, Token};
use creek_server::tls::{provider, read_roots};
use creek_server::{AuthConfig, TlsConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;

const T: Duration = Duration::from_secs(20);

fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// Read what `s` sends until it closes (or 5 s pass), as text.
async fn read_all(mut s: impl tokio::io::AsyncRead + Unpin) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn request(addr: SocketAddr, path: &str, token: Option<&str>) -> String {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n")
}

/// `GET path` over TLS, trusting only the CA and presenting no client
/// certificate (as a browser or a scraper): the status and the body.
async fn https_get(
    ca: &Path,
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, String)> {
    https(ca, addr, request(addr, path, token)).await
}

/// `POST path` of a JSON `body` over TLS, as [`https_get`].
async fn https_post(
    ca: &Path,
    addr: SocketAddr,
    path: &str,
    token: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    https(ca, addr, request).await
}

/// Send `request` over TLS and read the answer to the end.
async fn https(ca: &Path, addr: SocketAddr, request: String) -> std::io::Result<(u16, String)> {
    let roots = read_roots(ca).map_err(std::io::Error::other)?;
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::from(addr.ip());
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    s.write_all(request.as_bytes()).await?;
    let answer = read_all(&mut s).await;
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, answer.clone());
    let code = answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    let body = answer.split_once("\r\n\r\n").ok_or_else(bad)?.1.to_owned();
    Ok((code, body))
}

fn log_of(c: &Cluster, i: usize) -> String {
    std::fs::read_to_string(c.dir.join(format!("r{}.log", i + 1))).unwrap_or_default()
}

/// Three replicas as `creek dev --secure` runs them: `[tls]` with
/// certificates `creek certs create-local` made in `<dir>/certs`, `[auth]`
/// with a root token (the cluster's client uses it and the root client
/// certificate), an HTTP port each (returned, with the root token's text).
async fn secure_cluster() -> (Cluster, std::path::PathBuf, Vec<SocketAddr>, String) {
    let root = Token::generate(true).expect("rng");
    let root_text = root.to_string();
    let mut cluster = Cluster::prepare_with(3, |_| {});
    let certs = cluster.dir.join("certs");
    let out = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(["certs", "create-local", "--replicas", "3", "--dir"])
        .arg(path_str(&certs))
        .output()
        .expect("run creek certs");
    assert!(out.status.success(), "{out:?}");
    let http: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    for (i, addr) in http.iter().enumerate() {
        cluster.configure(i, |cfg| {
            cfg.tls = Some(TlsConfig::in_dir(&certs, cfg.id));
            cfg.auth = AuthConfig {
                enabled: true,
                root_token_sha256: Some(to_hex(&root.hash())),
            };
            cfg.metrics_addr = Some(*addr);
        });
    }
    let read = |f: &str| std::fs::read(certs.join(f)).expect("read a certificate file");
    cluster.tls = Some(
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(read("ca.crt")))
            .identity(tonic::transport::Identity::from_pem(
                read("client-root.crt"),
                read("client-root.key"),
            )),
    );
    cluster.token = Some(root_text.clone());
    cluster.spawn_all();
    cluster.wait_for_leader(T).await;
    (cluster, certs, http, root_text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_port_is_https_and_the_console_reaches_every_member_over_tls() {
    let started = Instant::now();
    let (cluster, certs, http, root_text) = secure_cluster().await;
    let ca = certs.join("ca.crt");

    // Every replica's console, over HTTPS with the root token, shows the
    // three members up: it asked each other one for its Status over TLS.
    for (i, addr) in http.iter().enumerate() {
        let deadline = Instant::now() + T;
        loop {
            let got = https_get(&ca, *addr, "/api/console", Some(&root_text)).await;
            let report: Option<serde_json::Value> = match &got {
                Ok((200, body)) => serde_json::from_str(body).ok(),
                _ => None,
            };
            let health: Vec<String> = report
                .as_ref()
                .and_then(|r| r["members"].as_array())
                .map(|ms| {
                    ms.iter()
                        .map(|m| m["health"].as_str().unwrap_or("").to_owned())
                        .collect()
                })
                .unwrap_or_default();
            if health.len() == 3 && health.iter().all(|h| h == "up") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {}'s console never showed every member up: {health:?} {got:?}",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    // /metrics over HTTPS: with the token, the metrics; without, 401.
    let (code, body) = https_get(&ca, http[0], "/metrics", Some(&root_text))
        .await
        .expect("/metrics over HTTPS");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("creek_http_connections_refused_total 0"),
        "{body}"
    );
    let (code, _) = https_get(&ca, http[0], "/metrics", None)
        .await
        .expect("/metrics over HTTPS");
    assert_eq!(code, 401);

    // Plaintext HTTP to the port: no HTTP answer, nothing served.
    for path in ["/metrics", "/api/console", "/"] {
        let mut plain = tokio::net::TcpStream::connect(http[0])
            .await
            .expect("connect");
        plain
            .write_all(request(http[0], path, Some(&root_text)).as_bytes())
            .await
            .expect("write");
        let answer = read_all(&mut plain).await;
        assert!(!answer.contains("HTTP/1"), "{path}: {answer:?}");
        assert!(!answer.contains("creek"), "{path}: {answer:?}");
    }

    // Counted, and logged once (the three failures fall in one interval).
    let deadline = Instant::now() + T;
    let logged = "refused an HTTP connection: TLS handshake failed";
    while !log_of(&cluster, 0).contains(logged) {
        assert!(Instant::now() < deadline, "{}", log_of(&cluster, 0));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, body) = https_get(&ca, http[0], "/metrics", Some(&root_text))
        .await
        .expect("/metrics over HTTPS");
    assert!(
        body.contains("creek_http_connections_refused_total 3"),
        "{body}"
    );
    assert_eq!(log_of(&cluster, 0).matches(logged).count(), 1);

    // The consoles polled each other every second all along: no replica
    // logged a failed handshake from them, and the other two none at all.
    for i in 0..3 {
        let log = log_of(&cluster, i);
        assert!(
            !log.contains("refused a client connection"),
            "replica {}:\n{log}",
            i + 1
        );
        if i > 0 {
            assert!(
                !log.contains("TLS handshake failed"),
                "replica {}:\n{log}",
                i + 1
            );
        }
    }
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// The replica's `creek_native_connections` gauge, read over HTTPS once
/// it settles.
async fn native_connections(ca: &Path, http: SocketAddr, token: &str) -> f64 {
    common::native_connections(|| async move {
        let (_, body) = https_get(ca, http, "/metrics", Some(token))
            .await
            .expect("/metrics over HTTPS");
        body
    })
    .await
}

/// docs/protocol.md, "The native client protocol": a client with TLS
/// invokes over the native protocol inside TLS (the replica sniffs its
/// first bytes after the handshake), with the same checks as gRPC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_invokes_natively_inside_tls() {
    let (cluster, certs, http, root_text) = secure_cluster().await;
    let ca = certs.join("ca.crt");
    let addrs: Vec<String> = cluster.clients.iter().map(|a| a.to_string()).collect();
    let options = |token: &str| creek_client::ConnectOptions {
        tls: Some(
            creek_client::TlsOptions::from_files(
                &ca,
                Some(&certs.join("client-root.crt")),
                Some(&certs.join("client-root.key")),
            )
            .expect("tls options"),
        ),
        token: Some(token.to_owned()),
        ..Default::default()
    };
    assert_eq!(native_connections(&ca, http[0], &root_text).await, 0.0);
    let client = creek_client::Client::connect_with_options(addrs.clone(), options(&root_text))
        .await
        .expect("connect with TLS");
    // A value larger than one TLS record (16 KiB) each way.
    let big = "v".repeat(100 << 10);
    let put = client.kv_put("native-tls", big.clone()).await.expect("put");
    put.final_view().await.expect("committed");
    let got = client.kv_get("native-tls").await.expect("get");
    let got = got.final_view().await.expect("final view");
    assert_eq!(got.outcome, Ok(b(&big)));
    assert_eq!(native_connections(&ca, http[0], &root_text).await, 1.0);

    // A token the cluster does not know is refused on the native path as
    // on gRPC.
    let forged = Token::generate(false).expect("rng").to_string();
    let stranger =
        creek_client::Client::connect_with_options(addrs[..1].to_vec(), options(&forged))
            .await
            .expect("connect with TLS");
    let refused = stranger.kv_get("native-tls").await;
    assert!(
        matches!(refused, Err(creek_client::Error::Unauthenticated(_))),
        "{:?}",
        refused.err()
    );
    assert_eq!(native_connections(&ca, http[0], &root_text).await, 2.0);
    drop((client, stranger));
    assert_eq!(native_connections(&ca, http[0], &root_text).await, 0.0);

    // The native hello in plaintext to the TLS port gets no `Ready`.
    let mut plain = tokio::net::TcpStream::connect(cluster.clients[0])
        .await
        .expect("connect");
    let mut hello = creek_proto::native::MAGIC.to_vec();
    hello.extend_from_slice(&[0; 16]);
    plain.write_all(&hello).await.expect("write");
    let answer = read_all(&mut plain).await;
    assert!(!answer.contains("creek"), "{answer:?}");
    assert_eq!(native_connections(&ca, http[0], &root_text).await, 0.0);
}

/// On a sharded cluster with TLS and users, replica 1's console (shard 0)
/// sends an invocation on shard 1's key to a replica of shard 1, over TLS
/// with the caller's token (shard 1 checks users too: without the token it
/// would refuse it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_forwards_to_another_shard_over_tls_with_the_token() {
    let started = Instant::now();
    let certs = std::env::temp_dir().join(format!(
        "creek-http-tls-certs-{}-{}",
        std::process::id(),
        free_addr().port()
    ));
    let n = SHARDS * REPLICAS;
    let out = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args([
            "certs",
            "create-local",
            "--replicas",
            &n.to_string(),
            "--dir",
        ])
        .arg(path_str(&certs))
        .output()
        .expect("run creek certs");
    assert!(out.status.success(), "{out:?}");
    let root = Token::generate(true).expect("rng");
    let token = root.to_string();
    let console = free_addr();
    let cluster = Sharded::start("http-tls", 0x7157, false, |i, c| {
        c.tls = Some(TlsConfig::in_dir(&certs, c.id));
        c.auth = AuthConfig {
            enabled: true,
            root_token_sha256: Some(to_hex(&root.hash())),
        };
        if i == 0 {
            c.metrics_addr = Some(console);
        }
    });
    let ca = certs.join("ca.crt");
    let key = cluster.key_of(1, "far");
    let body =
        serde_json::json!({ "procedure": "kv.put", "args": [key, "forwarded"], "level": "strong" })
            .to_string();
    // Until shard 1 has a leader the forwarded call may be refused.
    let deadline = Instant::now() + T;
    let answer = loop {
        let got = https_post(&ca, console, "/api/invoke", &token, &body).await;
        if let Ok((200, answer)) = &got {
            if answer.contains(r#""kind":"final""#) {
                break answer.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no forwarded invocation answered: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(answer.contains(r#""shard":1"#), "{answer}");
    assert!(!answer.contains(r#""event":"error""#), "{answer}");
    // Read back at shard 1 through the same console.
    let body =
        serde_json::json!({ "procedure": "kv.get", "args": [key], "level": "strong" }).to_string();
    let (code, answer) = https_post(&ca, console, "/api/invoke", &token, &body)
        .await
        .expect("a forwarded read");
    assert_eq!(code, 200, "{answer}");
    assert!(answer.contains("forwarded"), "{answer}");
    assert!(answer.contains(r#""shard":1"#), "{answer}");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&certs);
    assert!(started.elapsed() < Duration::from_secs(60));
}
