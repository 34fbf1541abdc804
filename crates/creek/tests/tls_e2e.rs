//! End-to-end: TLS on real `creek serve` processes over loopback, with
//! certificates made by `creek certs` (docs/security.md). Each test bounds
//! its waits; processes and directories are cleaned up on drop.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use creek_proto::pb::{self, Level};
use creek_server::tls::{provider, read_certs, read_key, read_roots};
use creek_server::TlsConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

const WEAK: &[Level] = &[Level::Weak];
const STRONG: &[Level] = &[Level::Strong];
const T: Duration = Duration::from_secs(20);

/// `creek ARGS`, which must succeed.
fn creek(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(args)
        .output()
        .expect("run creek");
    assert!(
        out.status.success(),
        "creek {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// The test's TLS client options: the CA and the client `root`.
fn client_tls(certs: &Path) -> tonic::transport::ClientTlsConfig {
    let read = |f: &str| std::fs::read(certs.join(f)).expect("read a certificate file");
    tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(read("ca.crt")))
        .identity(tonic::transport::Identity::from_pem(
            read("client-root.crt"),
            read("client-root.key"),
        ))
}

/// A 3-replica cluster whose replicas `run` are started with TLS, with
/// certificates `creek certs create-local` made in `<dir>/certs`.
async fn tls_cluster(run: &[usize]) -> (Cluster, PathBuf) {
    let mut c = Cluster::prepare_with(3, |_| {});
    let certs = c.dir.join("certs");
    creek(&[
        "certs",
        "create-local",
        "--replicas",
        "3",
        "--dir",
        path_str(&certs),
    ]);
    for i in 0..3 {
        c.configure(i, |cfg| cfg.tls = Some(TlsConfig::in_dir(&certs, cfg.id)));
    }
    c.tls = Some(client_tls(&certs));
    for &i in run {
        c.restart(i).await;
    }
    c.wait_for_leader(T).await;
    (c, certs)
}

fn log_of(c: &Cluster, i: usize) -> String {
    std::fs::read_to_string(c.dir.join(format!("r{}.log", i + 1))).unwrap_or_default()
}

/// Wait until replica `i`'s log contains `text`.
async fn wait_for_log(c: &Cluster, i: usize, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if log_of(c, i).contains(text) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("replica {} never logged {text:?}:\n{}", i + 1, log_of(c, i));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_tls_clients_and_refuses_plaintext_ones() {
    let (mut cluster, certs) = tls_cluster(&[0, 1, 2]).await;
    let mut c1 = cluster.client(0).await;
    let mut c2 = cluster.client(1).await;
    let v = call(&mut c1, req("kv.put", &[b("k"), b("v1")], WEAK), T)
        .await
        .expect("weak put over TLS");
    assert_eq!(result(&v), Ok(Value::Nil));
    // A strong op needs the peer links (mutual TLS) to order it; once it
    // answered, a strong read at another replica sees it (a weak write
    // need not have reached the other replica yet).
    let v = call(&mut c1, req("kv.put", &[b("k"), b("v2")], STRONG), T)
        .await
        .expect("strong put over TLS");
    assert_eq!(v, vec![Got::Final(Ok(Value::Nil))]);
    let v = call(&mut c2, req("kv.get", &[b("k")], STRONG), T)
        .await
        .expect("strong get over TLS");
    assert_eq!(v, vec![Got::Final(Ok(b("v2")))]);

    // Plaintext to a TLS port: no answer.
    let plain = format!("http://{}", cluster.clients[0]);
    let got = async {
        let mut c = pb::creek_client::CreekClient::connect(plain).await?;
        c.status(pb::StatusRequest {}).await.map_err(Into::into)
    };
    let got: Result<_, Box<dyn std::error::Error>> = tokio::time::timeout(T, got)
        .await
        .expect("a plaintext client is answered at once");
    assert!(got.is_err(), "a plaintext client was served: {got:?}");

    // TLS without a client certificate: refused (client certificates are
    // required by default).
    let ca = std::fs::read(certs.join("ca.crt")).expect("ca");
    cluster.tls = Some(
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca)),
    );
    let got = async {
        let mut c = pb::creek_client::CreekClient::new(cluster.channel(0).await?);
        c.status(pb::StatusRequest {}).await.map_err(Into::into)
    };
    let got: Result<_, Box<dyn std::error::Error>> = tokio::time::timeout(T, got)
        .await
        .expect("answered at once");
    assert!(
        got.is_err(),
        "a client without a certificate was served: {got:?}"
    );
    cluster.tls = Some(client_tls(&certs));
    assert!(
        cluster.status(0).await.is_some(),
        "the client root is still served"
    );
}

/// rustls configurations for a test that plays a rogue replica with the
/// certificate files `node-<as_id>`.
fn rogue(certs: &Path, as_id: u16) -> (Arc<rustls::ClientConfig>, Arc<rustls::ServerConfig>) {
    let roots = Arc::new(read_roots(&certs.join("ca.crt")).expect("ca"));
    let chain = read_certs(&certs.join(format!("node-{as_id}.crt"))).expect("cert");
    let key = read_key(&certs.join(format!("node-{as_id}.key"))).expect("key");
    let client = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots.clone())
        .with_client_auth_cert(chain.clone(), key.clone_key())
        .expect("client config");
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
        .build()
        .expect("verifier");
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .expect("server config");
    (Arc::new(client), Arc::new(server))
}

/// Dial replica `i`'s peer port as replica `claim`, with `config`'s
/// certificate, send the handshake and one frame, and say whether the
/// connection is still open a second later.
async fn joins_as(
    cluster: &Cluster,
    i: usize,
    claim: u16,
    config: Arc<rustls::ClientConfig>,
) -> bool {
    let tcp = tokio::net::TcpStream::connect(cluster.peers[i])
        .await
        .expect("peer port");
    let name =
        rustls::pki_types::ServerName::try_from(format!("replica-{}.creek", i + 1)).expect("name");
    let mut s = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .expect("the TLS handshake itself succeeds: the certificate is the CA's");
    let mut h = Vec::from(*b"CRK");
    h.push(creek_wire::WIRE_VERSION);
    h.extend_from_slice(&claim.to_be_bytes());
    h.extend_from_slice(&((i + 1) as u16).to_be_bytes());
    // A frame the replica would take to its node if it accepted us.
    h.extend_from_slice(&3u32.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0]);
    if s.write_all(&h).await.is_err() || s.flush().await.is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
        Err(_) => true,              // nothing to read, not closed: accepted
        Ok(Ok(0) | Err(_)) => false, // closed
        Ok(Ok(_)) => true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_replica_cannot_join() {
    // A new cluster forms once every member started; then replica 3
    // stops, 1 and 2 keep a majority, and the test plays replica 3.
    let (mut cluster, certs) = tls_cluster(&[0, 1, 2]).await;
    cluster.kill(2);
    cluster.wait_for_leader(T).await;

    // Inbound: claiming to be replica 3 with replica 2's certificate is
    // refused at the handshake; with replica 3's it is not.
    let (as_two, _) = rogue(&certs, 2);
    assert!(
        !joins_as(&cluster, 0, 3, as_two).await,
        "replica 1 kept a connection from 'replica 3' holding replica 2's certificate"
    );
    wait_for_log(
        &cluster,
        0,
        "claims to be replica 3 but its certificate does not name replica-3.creek",
    )
    .await;
    let (as_three, _) = rogue(&certs, 3);
    assert!(
        joins_as(&cluster, 0, 3, as_three).await,
        "replica 3's own certificate must be accepted"
    );

    // Outbound: whoever listens on replica 3's address with replica 2's
    // certificate is refused by the replicas that dial it.
    let listener = tokio::net::TcpListener::bind(cluster.peers[2])
        .await
        .expect("replica 3's peer address");
    let (_, server) = rogue(&certs, 2);
    let acceptor = tokio_rustls::TlsAcceptor::from(server);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut refused = false;
    while !refused && Instant::now() < deadline {
        let Ok(Ok((tcp, _))) =
            tokio::time::timeout(Duration::from_secs(2), listener.accept()).await
        else {
            continue;
        };
        // The dialer checks our certificate after we sent it: the
        // handshake fails with its alert, or the socket closes unused.
        refused = match acceptor.accept(tcp).await {
            Err(_) => true,
            Ok(mut s) => {
                let mut h = [0u8; 8];
                tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut h))
                    .await
                    .is_ok_and(|r| r.is_err())
            }
        };
    }
    assert!(
        refused,
        "a replica sent its handshake to the wrong certificate"
    );
    drop(listener);

    // The others still serve, strong ops included.
    let mut c1 = cluster.client(0).await;
    let v = call(&mut c1, req("kv.put", &[b("k"), b("v")], STRONG), T)
        .await
        .expect("strong put");
    assert!(matches!(v.last(), Some(Got::Final(Ok(_)))), "{v:?}");

    // And `creek serve` itself refuses to start as replica 3 with replica
    // 2's files.
    cluster.configure(2, |cfg| {
        let mut files = TlsConfig::in_dir(&certs, 3);
        files.cert = certs.join("node-2.crt");
        files.key = certs.join("node-2.key");
        cfg.tls = Some(files);
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(["serve", "--config"])
        .arg(cluster.config_path(2))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run creek serve");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("replica 3 started with replica 2's certificate");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut stderr).expect("stderr");
    }
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("does not name replica-3.creek"), "{stderr}");
}

#[test]
fn plaintext_on_a_public_address_is_refused_at_start() {
    let dir = std::env::temp_dir().join(format!("creek-insecure-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args([
            "serve",
            "--id",
            "1",
            "--replica",
            "1=127.0.0.1:1,0.0.0.0:7999",
            "--data-dir",
        ])
        .arg(&dir)
        .output()
        .expect("run creek serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it started: {stderr}");
    for needed in ["0.0.0.0:7999", "without TLS", "[tls]", "--insecure"] {
        assert!(stderr.contains(needed), "{needed:?} missing from: {stderr}");
    }
    assert!(!dir.exists(), "nothing is created before the refusal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_on_sighup_without_dropping_ops() {
    let (cluster, certs) = tls_cluster(&[0, 1, 2]).await;
    let cluster = Arc::new(cluster);
    // Ops run all along on connections opened before the rotation.
    let load = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            let mut c = cluster.client(0).await;
            let mut done = 0u32;
            let until = Instant::now() + Duration::from_secs(4);
            while Instant::now() < until {
                let level = [STRONG, WEAK][(done & 1) as usize];
                let v = call(&mut c, req("kv.incr", &[b("n"), Value::Int(1)], level), T)
                    .await
                    .expect("no op fails during the rotation");
                assert!(result(&v).is_ok(), "{v:?}");
                done += 1;
            }
            done
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = read_certs(&certs.join("node-1.crt")).expect("cert");
    for id in 1..=3u16 {
        creek(&[
            "certs",
            "create-node",
            "--id",
            &id.to_string(),
            "--dir",
            path_str(&certs),
            "--overwrite",
        ]);
    }
    let after = read_certs(&certs.join("node-1.crt")).expect("cert");
    assert_ne!(before, after, "a new certificate was written");
    for i in 0..3 {
        let pid = cluster.pid(i).expect("running");
        let ok = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .expect("kill -HUP");
        assert!(ok.success());
    }
    for i in 0..3 {
        wait_for_log(&cluster, i, "reloaded the TLS certificates").await;
    }
    // A new connection is served with the new certificate.
    let (client, _) = rogue(&certs, 2);
    let mut client = (*client).clone();
    client.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(cluster.clients[0])
        .await
        .expect("client port");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("ip");
    let s = tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(name, tcp)
        .await
        .expect("TLS with the rotated certificate");
    let served = s.get_ref().1.peer_certificates().expect("a certificate")[0].clone();
    assert_eq!(served, after[0], "new connections get the new certificate");

    let done = load.await.expect("the load ran");
    assert!(done >= 4, "only {done} ops ran");
    // New clients and the peer links keep working.
    let v = call(
        &mut cluster.client(2).await,
        req("kv.get", &[b("n")], STRONG),
        T,
    )
    .await
    .expect("strong get after the rotation");
    assert_eq!(
        result(&v),
        Ok(Value::Bytes(done.to_string().into())),
        "every op counted once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_and_the_rust_client_take_tls_options() {
    let (cluster, certs) = tls_cluster(&[0, 1, 2]).await;
    let addrs: Vec<String> = cluster.clients.iter().map(|a| a.to_string()).collect();
    let f = |name: &str| path_str(&certs.join(name)).to_owned();

    // The CLI: flags for one call, the environment for the next.
    let out = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(["call", "--addr", &addrs.join(","), "--ca", &f("ca.crt")])
        .args([
            "--cert",
            &f("client-root.crt"),
            "--key",
            &f("client-root.key"),
        ])
        .args(["-o", "value", "kv.put", "tls-key", "over-tls"])
        .output()
        .expect("creek call");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args([
            "call",
            "--addr",
            &addrs.join(","),
            "-o",
            "value",
            "kv.get",
            "tls-key",
        ])
        .env("CREEK_CA", f("ca.crt"))
        .env("CREEK_CERT", f("client-root.crt"))
        .env("CREEK_KEY", f("client-root.key"))
        .output()
        .expect("creek call");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "over-tls");
    // Without the options the CLI is refused, and says so.
    let out = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(["status", "--addr", &addrs[0]])
        .env_remove("CREEK_CA")
        .output()
        .expect("creek status");
    assert!(!out.status.success(), "a plaintext CLI was served");
    // Each wrong TLS setting is named as what it is.
    let other = certs.join("other");
    creek(&["certs", "create-ca", "--dir", path_str(&other)]);
    creek(&["certs", "create-client", "eve", "--dir", path_str(&other)]);
    let o = |name: &str| path_str(&other.join(name)).to_owned();
    let refused = |tls: &[(&str, String)], says: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_creek"));
        c.args(["status", "--addr", &addrs[0]]);
        for var in ["CREEK_CA", "CREEK_CERT", "CREEK_KEY"] {
            c.env_remove(var);
        }
        for (var, value) in tls {
            c.env(var, value);
        }
        let out = c.output().expect("creek status");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "served with {tls:?}");
        assert!(
            stderr.contains(says),
            "{tls:?}: {says:?} missing from {stderr}"
        );
    };
    refused(&[], "give its CA (--ca or CREEK_CA)");
    refused(
        &[("CREEK_CA", f("ca.crt"))],
        "requires a client certificate",
    );
    refused(
        &[
            ("CREEK_CA", f("ca.crt")),
            ("CREEK_CERT", o("client-eve.crt")),
            ("CREEK_KEY", o("client-eve.key")),
        ],
        "did not accept the client certificate",
    );
    refused(
        &[
            ("CREEK_CA", f("ca.crt")),
            ("CREEK_CERT", f("client-root.crt")),
            ("CREEK_KEY", f("node-1.key")),
        ],
        "the key is not the certificate's",
    );
    refused(
        &[
            ("CREEK_CA", o("ca.crt")),
            ("CREEK_CERT", f("client-root.crt")),
            ("CREEK_KEY", f("client-root.key")),
        ],
        "did not sign",
    );
    // A certificate without a CA is a usage error, named.
    let out = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args([
            "call",
            "--addr",
            &addrs[0],
            "--cert",
            &f("client-root.crt"),
            "kv.get",
            "k",
        ])
        .env_remove("CREEK_CA")
        .output()
        .expect("creek call");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("without a CA"),
        "{stderr}"
    );

    // The Rust client.
    let tls = creek_client::TlsOptions::from_files(
        &certs.join("ca.crt"),
        Some(&certs.join("client-root.crt")),
        Some(&certs.join("client-root.key")),
    )
    .expect("tls options");
    let client = creek_client::Client::connect_with(addrs.clone(), Some(tls))
        .await
        .expect("connect with TLS");
    let got = client
        .kv_get("tls-key")
        .await
        .expect("invoke")
        .final_view()
        .await
        .expect("final view");
    assert_eq!(got.outcome, Ok(b("over-tls")));
    let plain = creek_client::Client::connect(addrs[..1].to_vec()).await;
    let refused = match plain {
        Err(_) => true,
        Ok(c) => c.status().await.is_err(),
    };
    assert!(refused, "a plaintext Rust client was served");
}

/// Whether `s`, a connection the replica accepted, is still open a second
/// later: a connection past a cap is closed as soon as it is accepted,
/// one under the caps waits for its TLS handshake (up to ten seconds).
async fn held_open(s: &mut tokio::net::TcpStream) -> bool {
    let mut byte = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(1), s.read(&mut byte))
        .await
        .is_err()
}

/// docs/security.md, "Limits": TLS connections count under the connection
/// caps like plaintext ones, from the moment they are accepted, before
/// their handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_connections_count_under_the_connection_caps() {
    let (mut cluster, certs) = tls_cluster(&[0, 1, 2]).await;
    cluster.configure(0, |cfg| {
        cfg.tls = Some(TlsConfig::in_dir(&certs, cfg.id));
        cfg.connections_per_client_max = 2;
        cfg.connections_max = 2;
    });
    cluster.restart(0).await;

    // Two TLS clients hold both slots; a third is closed at once. (Each is
    // retried until it is served, so the connection `restart` checked
    // with has let go of its slot.)
    let deadline = Instant::now() + T;
    let mut held = Vec::new();
    while held.len() < 2 {
        assert!(Instant::now() < deadline, "two TLS clients never served");
        let Ok(ch) = cluster.channel(0).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let mut c = pb::creek_client::CreekClient::new(ch);
        if c.status(pb::StatusRequest {}).await.is_ok() {
            held.push(c);
        }
    }
    let third = tokio::time::timeout(T, cluster.status(0))
        .await
        .expect("a third TLS client is answered at once");
    assert!(third.is_none(), "a TLS client past the caps was served");
    // The held clients are still served.
    for c in &mut held {
        c.status(pb::StatusRequest {})
            .await
            .expect("a held client is still served");
    }

    // Connections that never start their handshake hold slots too.
    drop(held);
    let deadline = Instant::now() + T;
    let mut raw = Vec::new();
    while raw.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the held clients' slots never came back"
        );
        let mut s = tokio::net::TcpStream::connect(cluster.clients[0])
            .await
            .expect("connect");
        if held_open(&mut s).await {
            raw.push(s);
        }
    }
    assert!(
        cluster.status(0).await.is_none(),
        "a TLS client was served while handshake-less connections held the slots"
    );
    // Closing one gives its slot back.
    drop(raw.pop());
    let deadline = Instant::now() + T;
    while cluster.status(0).await.is_none() {
        assert!(
            Instant::now() < deadline,
            "a closed connection's slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
