//! End-to-end: users, roles and tokens on real `creek serve` processes with
//! `[auth] enabled` (docs/security.md, "Users, roles and tokens"). Users
//! are made with the `creek user` command, as an operator would; calls go
//! through the Rust client and raw gRPC. Each wait is bounded; processes
//! and directories are cleaned up on drop.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use creek_client::{Client, ConnectOptions, Error};
use creek_proto::pb::Level;
use creek_server::auth::{to_hex, Token};
use creek_server::{AuthConfig, TlsConfig};

const T: Duration = Duration::from_secs(20);

/// A 3-replica cluster checking users, and its root token.
async fn auth_cluster() -> (Cluster, Token) {
    let root = Token::generate(true).expect("rng");
    let c = Cluster::start_with(3, |cfg| cfg.auth = auth_config(&root)).await;
    (c, root)
}

fn auth_config(root: &Token) -> AuthConfig {
    AuthConfig {
        enabled: true,
        root_token_sha256: Some(to_hex(&root.hash())),
    }
}

/// The test's TLS client options with client NAME's certificate.
fn client_tls(certs: &std::path::Path, name: &str) -> tonic::transport::ClientTlsConfig {
    let read = |f: String| std::fs::read(certs.join(f)).expect("read a certificate file");
    tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(read(
            "ca.crt".into(),
        )))
        .identity(tonic::transport::Identity::from_pem(
            read(format!("client-{name}.crt")),
            read(format!("client-{name}.key")),
        ))
}

/// `creek ARGS` against the cluster with `token` (and, if the cluster has
/// certificates, the client `root`'s): (success, stdout, stderr).
fn creek(c: &Cluster, token: &Token, args: &[&str]) -> (bool, String, String) {
    let all: Vec<usize> = (0..c.len()).collect();
    creek_at(c, &all, token, args)
}

/// [`creek`] against replicas `which` only.
fn creek_at(c: &Cluster, which: &[usize], token: &Token, args: &[&str]) -> (bool, String, String) {
    let endpoints: Vec<String> = which.iter().map(|&i| c.clients[i].to_string()).collect();
    let mut command = Command::new(env!("CARGO_BIN_EXE_creek"));
    command
        .args(args)
        .env("CREEK_ENDPOINTS", endpoints.join(","))
        .env("CREEK_TOKEN", token.to_string());
    let certs = c.dir.join("certs");
    if certs.exists() {
        command
            .env("CREEK_CA", certs.join("ca.crt"))
            .env("CREEK_CERT", certs.join("client-root.crt"))
            .env("CREEK_KEY", certs.join("client-root.key"));
    }
    let out = command.output().expect("run creek");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `creek user add NAME --role ROLE` as root: the token it prints.
fn add_user(c: &Cluster, root: &Token, name: &str, role: &str) -> Token {
    let (ok, out, err) = creek(
        c,
        root,
        &["user", "add", name, "--role", role, "-o", "value"],
    );
    assert!(ok, "creek user add {name}: {err}");
    Token::parse(out.trim()).expect("creek user add prints a token")
}

/// A client of replicas `which` sending `token`.
async fn client(c: &Cluster, which: &[usize], token: Option<&Token>) -> Client {
    let addrs = which.iter().map(|&i| c.clients[i].to_string());
    let options = ConnectOptions {
        tls: None,
        token: token.map(Token::to_string),
        ..ConnectOptions::default()
    };
    Client::connect_with_options(addrs, options)
        .await
        .expect("connect")
}

/// `procedure(args)` as a strong op: its final outcome, or the error.
async fn strong(
    cl: &Client,
    procedure: &str,
    args: Vec<creek_types::value::Value>,
) -> Result<Result<creek_types::value::Value, String>, Error> {
    let op = cl.invoke_strong(procedure, args).await?;
    Ok(op.final_view().await?.outcome)
}

/// Wait (at most [`T`]) until `cl`'s token is refused as unauthenticated:
/// a revocation takes effect at a replica once it applied it.
async fn refused_soon(cl: &Client, what: &str) {
    let deadline = Instant::now() + T;
    loop {
        match strong(cl, "kv.get", vec![b("k")]).await {
            Err(Error::Unauthenticated(_)) => return,
            other if Instant::now() > deadline => panic!("{what} still works: {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Wait (at most [`T`]) until `cl`'s new token is known where it connects:
/// the user's op is committed when `creek user` returns, and applied at each
/// replica soon after.
async fn known_soon(cl: &Client) {
    let deadline = Instant::now() + T;
    while let Err(Error::Unauthenticated(m)) = strong(cl, "kv.get", vec![b("k")]).await {
        assert!(
            Instant::now() < deadline,
            "a new token is still unknown: {m}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_authenticate_and_roles_limit_what_users_do() {
    let (c, root) = auth_cluster().await;

    // No token, a malformed one, an unknown one: UNAUTHENTICATED, nothing applied.
    let mut raw = c.client(0).await;
    let put = req("kv.put", &[b("k"), b("anonymous")], &[Level::Strong]);
    let refused = call(&mut raw, put.clone(), T).await.expect_err("no token");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    let mut bad = tonic::Request::new(put.clone());
    bad.metadata_mut()
        .insert("authorization", "Bearer nonsense".parse().expect("ascii"));
    let refused = raw.invoke(bad).await.expect_err("malformed token");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    let stranger = client(&c, &[0], Some(&Token::generate(false).expect("rng"))).await;
    match strong(&stranger, "kv.put", vec![b("k"), b("stranger")]).await {
        Err(Error::Unauthenticated(m)) => assert!(m.contains("unknown or revoked"), "{m}"),
        other => panic!("an unknown token was not refused: {other:?}"),
    }

    // The root token makes users over the CLI; bad input changes nothing.
    let reader = add_user(&c, &root, "reader", "readonly");
    let writer = add_user(&c, &root, "writer", "readwrite");
    let (ok, _, err) = creek(&c, &root, &["user", "add", "reader", "--role", "readonly"]);
    assert!(!ok && err.contains("user reader exists"), "{err}");
    let (ok, _, err) = creek(&c, &root, &["user", "add", "carol", "--role", "nosuch"]);
    assert!(!ok && err.contains("no role named \"nosuch\""), "{err}");
    let (ok, out, err) = creek(&c, &root, &["user", "list", "-o", "json"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("\"reader\"") && out.contains("\"writer\"") && !out.contains("carol"),
        "{out}"
    );

    // The writer writes; the reader reads but cannot write, and its
    // attempt changes nothing.
    let w = client(&c, &[1], Some(&writer)).await;
    known_soon(&w).await;
    assert_eq!(
        strong(&w, "kv.put", vec![b("k"), b("v1")]).await,
        Ok(Ok(creek_types::value::Value::Nil))
    );
    let r = client(&c, &[2], Some(&reader)).await;
    known_soon(&r).await;
    assert_eq!(strong(&r, "kv.get", vec![b("k")]).await, Ok(Ok(b("v1"))));
    match strong(&r, "kv.put", vec![b("k"), b("reader was here")]).await {
        Err(Error::PermissionDenied(m)) => {
            assert_eq!(m, "user reader lacks write on keyspace default")
        }
        other => panic!("a read-only user wrote: {other:?}"),
    }
    let admin = client(&c, &[0], Some(&root)).await;
    assert_eq!(
        strong(&admin, "kv.get", vec![b("k")]).await,
        Ok(Ok(b("v1")))
    );

    // Admin.* needs admin; a user cannot make users either.
    match r.dump().await {
        Err(Error::PermissionDenied(m)) => assert!(m.contains("user reader lacks admin"), "{m}"),
        other => panic!("a read-only user dumped the state: {other:?}"),
    }
    known_soon(&client(&c, &[0], Some(&writer)).await).await;
    let (ok, _, err) = creek(&c, &writer, &["user", "add", "mallory", "--role", "admin"]);
    assert!(!ok && err.contains("user writer lacks admin"), "{err}");
    // `creek backup` (Admin.Backup over the CLI's own channel) carries the
    // token too: an admin's is taken, a writer's refused.
    let to = c.dir.join("backup");
    let to = to.to_str().expect("a UTF-8 path");
    let (ok, _, err) = creek(&c, &writer, &["backup", "--to", to]);
    assert!(!ok && err.contains("user writer lacks admin"), "{err}");
    let (ok, _, err) = creek(&c, &root, &["backup", "--to", to]);
    assert!(ok, "{err}");
    let (_, state) = admin.dump().await.expect("root dumps");
    assert!(state.keys().all(|k| !k.starts_with(b"\0auth/user/mallory")));

    // A revoked token stops working on every replica.
    let (ok, _, err) = creek(&c, &root, &["user", "revoke", &writer.to_string()]);
    assert!(ok, "{err}");
    for i in 0..c.len() {
        let at = client(&c, &[i], Some(&writer)).await;
        refused_soon(&at, &format!("a revoked token at replica {}", i + 1)).await;
    }
    // The reader's token still works; a second one works too, until its
    // user is removed, which revokes every token of theirs.
    assert_eq!(strong(&r, "kv.get", vec![b("k")]).await, Ok(Ok(b("v1"))));
    let (ok, out, err) = creek(&c, &root, &["user", "token", "reader", "-o", "value"]);
    assert!(ok, "{err}");
    let second = Token::parse(out.trim()).expect("creek user token prints a token");
    let r2 = client(&c, &[0], Some(&second)).await;
    known_soon(&r2).await;
    assert_eq!(strong(&r2, "kv.get", vec![b("k")]).await, Ok(Ok(b("v1"))));
    // A token made with a TTL works until then, and is refused after,
    // saying it expired.
    let (ok, out, err) = creek(
        &c,
        &root,
        &["user", "token", "reader", "--ttl", "3s", "-o", "json"],
    );
    assert!(ok, "{err}");
    let made: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON");
    assert!(
        made["expires"].as_str().is_some_and(|at| at.ends_with('Z')),
        "{made}"
    );
    let brief = Token::parse(made["token"].as_str().expect("a token")).expect("a token");
    let r3 = client(&c, &[1], Some(&brief)).await;
    known_soon(&r3).await;
    assert_eq!(strong(&r3, "kv.get", vec![b("k")]).await, Ok(Ok(b("v1"))));
    tokio::time::sleep(Duration::from_secs(4)).await;
    match strong(&r3, "kv.get", vec![b("k")]).await {
        Err(Error::Unauthenticated(m)) => assert!(m.contains("expired at"), "{m}"),
        other => panic!("an expired token still works: {other:?}"),
    }
    let (ok, _, err) = creek(&c, &root, &["user", "token", "reader", "--ttl", "2w"]);
    assert!(!ok && err.contains("unit s, m, h or d"), "{err}");
    let (ok, _, err) = creek(&c, &root, &["user", "remove", "reader"]);
    assert!(ok, "{err}");
    refused_soon(&r2, "the second token of a removed user").await;
    refused_soon(&r, "the first token of a removed user").await;
    let (ok, out, err) = creek(&c, &root, &["role", "list", "-o", "value"]);
    assert!(
        ok && out.lines().collect::<Vec<_>>() == ["admin", "readwrite", "readonly"],
        "{out}{err}"
    );
}

/// A right is checked again where the op is ordered, not only where it is
/// accepted: a replica cut off from the others accepts the ops of a user
/// the others have removed meanwhile, and once healed those ops are
/// refused when they execute after the removal, on every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_op_accepted_before_its_user_was_removed_is_refused_in_the_order() {
    let (mut c, root) = auth_cluster().await;
    c.token = Some(root.to_string());
    let cut = (c.wait_for_leader(T).await + 1) % 3;
    let rest: Vec<usize> = (0..3).filter(|&i| i != cut).collect();
    let alice = add_user(&c, &root, "alice", "readwrite");
    let a = client(&c, &[cut], Some(&alice)).await;
    known_soon(&a).await;
    let root_at_cut = client(&c, &[cut], Some(&root)).await;
    let weak_get = |key: &'static str| {
        let cl = &root_at_cut;
        async move {
            let op = cl
                .invoke_weak("kv.get", vec![b(key)])
                .await
                .expect("weak get");
            op.final_view().await.expect("its view").outcome
        }
    };

    c.isolate(cut, true).await;
    let (ok, _, err) = creek_at(&c, &rest, &root, &["user", "remove", "alice"]);
    assert!(ok, "creek user remove through the majority: {err}");
    // Replica `cut` has not applied the removal: it takes alice's ops and
    // executes them tentatively.
    let weak = a
        .invoke_weak("kv.put", vec![b("w"), b("alice")])
        .await
        .expect("a weak put is accepted in the minority");
    assert_eq!(
        weak.final_view().await.expect("view").outcome,
        Ok(Value::Nil)
    );
    assert_eq!(weak_get("w").await, Ok(b("alice")));
    let both = a
        .invoke(
            "kv.put",
            vec![b("s"), b("alice")],
            creek_client::Levels::Both,
        )
        .await
        .expect("a strong put is accepted in the minority");
    assert_eq!(
        both.preliminary().await.expect("view").outcome,
        Ok(Value::Nil)
    );

    // Healed, both ops are ordered after the removal and refused there.
    c.isolate(cut, false).await;
    let last = tokio::time::timeout(T, both.final_view())
        .await
        .expect("a final view once healed")
        .expect("its view");
    assert_eq!(
        last.outcome,
        Err("permission denied: user alice lacks write on keyspace default".into())
    );
    let deadline = Instant::now() + T;
    while weak_get("w").await != Ok(Value::Nil) {
        assert!(
            Instant::now() < deadline,
            "alice's weak put still holds in the minority's tentative state"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 0..c.len() {
        let at = client(&c, &[i], Some(&root)).await;
        for key in ["w", "s"] {
            assert_eq!(
                strong(&at, "kv.get", vec![b(key)]).await,
                Ok(Ok(Value::Nil)),
                "replica {} holds {key}",
                i + 1
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_grant_rights_on_keyspaces_and_procedures() {
    let (c, root) = auth_cluster().await;
    let admin = client(&c, &[0], Some(&root)).await;
    let source = "keyspace accounts: strong\n\
                  proc deposit(who: bytes, n: int) -> int {\n    let v = get(accounts, who)\n    let t = n\n    if v != nil { t = t + int(v) }\n    put(accounts, who, str(t))\n    return t\n}\n\
                  proc balance(who: bytes) -> int {\n    let v = get(accounts, who)\n    if v == nil { return 0 }\n    return int(v)\n}\n";
    admin
        .register_procedures(source)
        .await
        .expect("register as root");
    let (ok, _, err) = creek(
        &c,
        &root,
        &["role", "set", "auditor", "read:keyspace:accounts"],
    );
    assert!(ok, "{err}");
    let (ok, _, err) = creek(&c, &root, &["role", "set", "bad", "own:everything"]);
    assert!(!ok && err.contains("grant"), "{err}");
    let auditor = add_user(&c, &root, "auditor", "auditor");
    let a = client(&c, &[1], Some(&auditor)).await;
    known_soon(&a).await;
    assert_eq!(
        strong(&a, "balance", vec![b("ann")]).await,
        Ok(Ok(creek_types::value::Value::Int(0)))
    );
    match strong(
        &a,
        "deposit",
        vec![b("ann"), creek_types::value::Value::Int(5)],
    )
    .await
    {
        Err(Error::PermissionDenied(m)) => assert!(
            m.contains(
                "user auditor lacks write on procedure deposit, and write on keyspace accounts"
            ),
            "{m}"
        ),
        other => panic!("an auditor deposited: {other:?}"),
    }
    // Nor the default keyspace.
    assert!(matches!(
        strong(&a, "kv.get", vec![b("k")]).await,
        Err(Error::PermissionDenied(_))
    ));

    // Watches need the same rights: the auditor watches the keyspace it
    // reads, not the built-in data.
    use tokio_stream::StreamExt as _;
    let mut denied = Box::pin(a.watch("", creek_client::WatchOptions::default()));
    match tokio::time::timeout(Duration::from_secs(20), denied.next()).await {
        Ok(Some(Err(Error::PermissionDenied(m)))) => {
            assert!(m.contains("lacks read on keyspace default"), "{m}")
        }
        other => panic!("an auditor watched the built-in data: {other:?}"),
    }
    let options = creek_client::WatchOptions {
        from: Some(0),
        keyspace: Some("accounts".into()),
        ..Default::default()
    };
    let mut events = Box::pin(a.watch("", options));
    assert_eq!(
        strong(
            &admin,
            "deposit",
            vec![b("bob"), creek_types::value::Value::Int(3)]
        )
        .await,
        Ok(Ok(creek_types::value::Value::Int(3)))
    );
    match tokio::time::timeout(Duration::from_secs(20), events.next()).await {
        Ok(Some(Ok(e))) => assert_eq!(
            (e.key.as_ref(), e.value.as_deref()),
            (&b"bob"[..], Some(&b"3"[..]))
        ),
        other => panic!("no change of accounts: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_names_its_user() {
    let root = Token::generate(true).expect("rng");
    let mut c = Cluster::prepare_with(3, |cfg| cfg.auth = auth_config(&root));
    let certs = c.dir.join("certs");
    let dir = certs.to_str().expect("a UTF-8 path");
    for args in [
        &["certs", "create-local", "--replicas", "3", "--dir", dir][..],
        &["certs", "create-client", "alice", "--dir", dir],
    ] {
        let (ok, _, err) = creek(&c, &root, args);
        assert!(ok, "creek {args:?}: {err}");
    }
    for i in 0..3 {
        // `configure` starts from the defaults: both tables again.
        c.configure(i, |cfg| {
            cfg.tls = Some(TlsConfig::in_dir(&certs, cfg.id));
            cfg.auth = auth_config(&root);
        });
    }
    c.tls = Some(client_tls(&certs, "alice"));
    c.spawn_all();
    c.wait_for_leader(T).await;

    // Before a user alice exists, alice's certificate alone is refused.
    let mut alice = c.client(0).await;
    let get = req("kv.get", &[b("k")], &[Level::Strong]);
    let refused = call(&mut alice, get.clone(), T)
        .await
        .expect_err("no user yet");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("names \"alice\", which is no user"),
        "{refused:?}"
    );

    add_user(&c, &root, "alice", "readonly");
    let deadline = Instant::now() + T;
    loop {
        match call(&mut alice, get.clone(), T).await {
            Ok(views) => {
                assert_eq!(result(&views), Ok(creek_types::value::Value::Nil));
                break;
            }
            Err(s) if s.code() == tonic::Code::Unauthenticated && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(s) => panic!("alice's certificate was refused: {s:?}"),
        }
    }
    let put = req("kv.put", &[b("k"), b("v")], &[Level::Strong]);
    let denied = call(&mut alice, put, T).await.expect_err("read-only");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    assert_eq!(
        denied.message(),
        "user alice lacks write on keyspace default"
    );
    // The client `root`'s certificate names no user: root is only a token.
    c.tls = Some(client_tls(&certs, "root"));
    let mut other = c.client(1).await;
    let refused = call(&mut other, get, T).await.expect_err("root is no user");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
}

/// A call's credentials are checked before its message is decoded: a
/// request too large to decode, sent without a token, is refused as
/// unauthenticated (the decoder would say it is too large), and the same
/// request with the root token meets the size limit; `Status` stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_checked_before_the_message_is_decoded() {
    let (c, root) = auth_cluster().await;
    let huge = req("kv.put", &[b("k"), b(&"v".repeat(3 << 20))], &[Level::Weak]);
    let mut anonymous = c.client(0).await;
    let refused = anonymous.invoke(huge.clone()).await.expect_err("no token");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    assert!(anonymous
        .status(creek_proto::pb::StatusRequest {})
        .await
        .is_ok());
    let mut with_token = tonic::Request::new(huge);
    with_token.metadata_mut().insert(
        "authorization",
        format!("Bearer {root}").parse().expect("ascii"),
    );
    let too_large = anonymous.invoke(with_token).await.expect_err("too large");
    assert_eq!(
        too_large.code(),
        tonic::Code::ResourceExhausted,
        "{too_large:?}"
    );
}

/// One switch per cluster: replicas 1 and 2 have `[auth]` on, replica 3
/// off. The switch they propose commits, replica 3 then refuses a call
/// without a token like the others, and restarted with `[auth]` still off
/// it refuses to start, saying why; `creek auth enable` again with the
/// same root changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_auth_off_follows_the_clusters_switch_and_refuses_to_start() {
    let root = Token::generate(true).expect("rng");
    let mut c = Cluster::prepare_with(3, |cfg| cfg.auth = auth_config(&root));
    c.configure(2, |cfg| cfg.auth = AuthConfig::default());
    c.spawn_all();
    c.wait_for_leader(T).await;
    let anonymous = client(&c, &[2], None).await;
    let deadline = Instant::now() + T;
    loop {
        let put = anonymous.kv_put("k", "v").await;
        match put {
            Err(Error::Unauthenticated(_)) => break,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "replica 3 still serves a caller without a token: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert!(
        std::fs::read_to_string(c.log_path(2))
            .unwrap_or_default()
            .contains("this replica checks users as the cluster does"),
        "replica 3 says it follows the switch:\n{}",
        c.log_tail(2)
    );
    let hex = to_hex(&root.hash());
    let (ok, out, err) = creek(&c, &root, &["auth", "enable", "--root-token-sha256", &hex]);
    assert!(ok, "{out} {err}");
    assert!(
        err.contains("already checked users with this root token"),
        "{err}"
    );

    // A start reads the switch from what the replica holds on disk: let a
    // checkpoint (every second here) take it in first. (A replica that
    // learns of it only from its peers after it started follows it, as
    // above.)
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.kill(2);
    let mut serve = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(["serve", "--config"])
        .arg(c.config_path(2))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run creek serve");
    let deadline = Instant::now() + T;
    let status = loop {
        if let Some(status) = serve.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = serve.kill();
            let _ = serve.wait();
            panic!("replica 3 started with [auth] off in a cluster that checks users");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(serve.stderr.as_mut().expect("piped"), &mut stderr)
        .expect("read stderr");
    assert!(!status.success(), "it started: {stderr}");
    assert!(
        stderr.contains("refusing to start") && stderr.contains("[auth] enabled = false"),
        "{stderr}"
    );
}

/// `creek auth enable` on a running cluster without `[auth]`: it prints a
/// new root token, and from then on every replica refuses callers without
/// a token and serves the root token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_is_enabled_on_a_running_cluster_by_one_strong_op() {
    let c = Cluster::start(3).await;
    let endpoints: Vec<String> = c.clients.iter().map(|a| a.to_string()).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_creek"))
        .args(["auth", "enable", "-o", "value"])
        .env("CREEK_ENDPOINTS", endpoints.join(","))
        .output()
        .expect("run creek auth enable");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let root = Token::parse(String::from_utf8_lossy(&out.stdout).trim()).expect("a root token");
    for i in 0..3 {
        let deadline = Instant::now() + T;
        let anonymous = client(&c, &[i], None).await;
        while !matches!(
            anonymous.kv_put("k", "v").await,
            Err(Error::Unauthenticated(_))
        ) {
            assert!(
                Instant::now() < deadline,
                "replica {} serves anonymous calls",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let served = strong(
            &client(&c, &[i], Some(&root)).await,
            "kv.put",
            vec![b("k"), b("v")],
        )
        .await
        .expect("the root token is served");
        assert!(served.is_ok(), "{served:?}");
    }
}
