//! The HTTP port's connections (the console, its API, `/metrics`,
//! `/health`, `/ready`): plaintext HTTP on a replica without a `[tls]`
//! table, HTTPS on one with it.
//!
//! Over TLS the port presents the replica's own certificate, from the same
//! files and reloaded by the same SIGHUP as the client port's
//! ([`Tls::http_acceptor`]), and asks for no client certificate: browsers
//! and scrapers prove themselves with a bearer token (`crate::http_guard`),
//! not a certificate. A plaintext request to a TLS port fails its
//! handshake and gets no answer. Anyone who reaches the port can make
//! handshakes fail as often as they like, so each kind of failure is logged
//! at most once per [`crate::throttle::LOGGED_EVERY`] and all are counted
//! (`creek_http_connections_refused_total`).
//!
//! Not here: what a request must carry to be served (`crate::http_guard`)
//! and the routes (`crate::metrics::serve`, `crate::console`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::throttle::{unlogged, Throttle};
use crate::tls::Tls;

/// How long an accepted connection may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The metric counting connections refused (its name as exposed).
const REFUSED_METRIC: &str = "creek_http_connections_refused_total";

/// Serve `app` on `listener` until `shutdown` says `true` (or its sender
/// goes away): over TLS with `tls`, plaintext without. Connections closed
/// before they were served are counted in `refused`.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    tls: Option<Arc<Tls>>,
    refused: Counter,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let Some(tls) = tls else {
        let mut stop = shutdown;
        return axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
    };
    let refusals = Arc::new(Refusals {
        counted: refused,
        handshake_failed: Throttle::default(),
        handshake_timed_out: Throttle::default(),
    });
    let mut stop = shutdown.clone();
    let stopping = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::pin!(stopping);
    loop {
        let accepted = tokio::select! {
            () = &mut stopping => return Ok(()),
            accepted = listener.accept() => accepted,
        };
        let (stream, remote) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accepting an HTTP connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let acceptor = tls.http_acceptor();
        let (app, refusals, shutdown) = (app.clone(), refusals.clone(), shutdown.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => serve_connection(stream, app, shutdown).await,
                Ok(Err(e)) => refusals.refused(
                    &refusals.handshake_failed,
                    remote,
                    &format!("TLS handshake failed: {e}"),
                ),
                Err(_) => refusals.refused(
                    &refusals.handshake_timed_out,
                    remote,
                    "TLS handshake timed out",
                ),
            }
        });
    }
}

/// Serve HTTP/1.1 on one connection until it closes, or, at shutdown,
/// until the request in progress is answered.
async fn serve_connection<S>(stream: S, app: axum::Router, mut shutdown: watch::Receiver<bool>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The timer makes hyper's bound on reading a request's head (30 s)
    // take effect: a connection that sends half a head is closed.
    builder.timer(TokioTimer::new());
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    tokio::pin!(conn);
    let stopping = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    let served = tokio::select! {
        served = conn.as_mut() => served,
        () = stopping => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = served {
        tracing::debug!(error = %e, "an HTTP connection ended with an error");
    }
}

/// HTTP connections closed before they were served, by why: each kind
/// logged at most once per interval, all counted.
struct Refusals {
    counted: Counter,
    handshake_failed: Throttle,
    handshake_timed_out: Throttle,
}

impl Refusals {
    fn refused(&self, kind: &Throttle, remote: SocketAddr, why: &str) {
        self.counted.inc();
        if let Some(n) = kind.admit(Instant::now()) {
            tracing::info!(
                %remote,
                "refused an HTTP connection: {why}{}",
                unlogged(n, REFUSED_METRIC)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::testing::certs;
    use creek_core::ReplicaId;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A TLS session to `addr` trusting `roots`, presenting no certificate.
    async fn dial(
        addr: SocketAddr,
        roots: &rustls::RootCertStore,
    ) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let client = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots.clone())
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = ServerName::try_from("localhost").expect("name");
        tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(name, tcp)
            .await
            .expect("a handshake without a client certificate")
    }

    /// The certificate the server presented on `s`.
    fn presented(s: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> Vec<u8> {
        let (_, session) = s.get_ref();
        let chain = session.peer_certificates().expect("a certificate");
        chain.first().expect("one").to_vec()
    }

    async fn read_all(mut s: impl tokio::io::AsyncRead + Unpin) -> String {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Over TLS the port answers a client that presents no certificate;
    /// a plaintext request gets no HTTP answer, and is counted.
    #[tokio::test]
    async fn a_tls_port_serves_https_and_refuses_plaintext() {
        let dir = std::env::temp_dir().join(format!("creek-http-port-{}", std::process::id()));
        let (files, roots, _) = certs(&dir);
        let tls = Arc::new(Tls::load(ReplicaId(1), files).expect("TLS"));
        let _ = std::fs::remove_dir_all(&dir);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = axum::Router::new().route("/x", axum::routing::get(|| async { "served" }));
        let refused = Counter::default();
        let (stop, stopped) = watch::channel(false);
        let server = tokio::spawn(serve(listener, app, Some(tls), refused.clone(), stopped));

        let mut plain = tokio::net::TcpStream::connect(addr).await.expect("connect");
        plain
            .write_all(b"GET /x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let answer = read_all(&mut plain).await;
        assert!(!answer.contains("HTTP/1.1"), "{answer:?}");
        assert!(!answer.contains("served"), "{answer:?}");
        // Counted as the handshake's failure is seen, which may be just
        // after the socket closed.
        for _ in 0..100 {
            if refused.get() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(refused.get(), 1);

        let mut s = dial(addr, &roots).await;
        s.write_all(b"GET /x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let answer = read_all(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
        assert!(answer.ends_with("served"), "{answer:?}");
        assert_eq!(refused.get(), 1);

        let _ = stop.send(true);
        let ended = tokio::time::timeout(Duration::from_secs(5), server).await;
        assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
    }

    /// A reload (SIGHUP) reaches the HTTP port: connections made after it
    /// get the new certificate, and one open across it is still served.
    #[tokio::test]
    async fn a_reload_gives_new_connections_the_new_certificate() {
        let dir = std::env::temp_dir().join(format!("creek-http-reload-{}", std::process::id()));
        let (files, roots, renew) = certs(&dir);
        let tls = Arc::new(Tls::load(ReplicaId(1), files).expect("TLS"));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = axum::Router::new().route("/x", axum::routing::get(|| async { "served" }));
        let (_stop, stopped) = watch::channel(false);
        let port = serve(
            listener,
            app,
            Some(tls.clone()),
            Counter::default(),
            stopped,
        );
        tokio::spawn(port);

        let mut before = dial(addr, &roots).await;
        renew();
        tls.reload().expect("reload");
        let _ = std::fs::remove_dir_all(&dir);
        let after = dial(addr, &roots).await;
        assert_ne!(presented(&before), presented(&after));
        assert_eq!(presented(&after), presented(&dial(addr, &roots).await));
        before
            .write_all(b"GET /x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let answer = read_all(&mut before).await;
        assert!(answer.ends_with("served"), "{answer:?}");
    }
}
