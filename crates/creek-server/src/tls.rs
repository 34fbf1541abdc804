//! TLS on the client and peer links: rustls with the `ring` provider.
//!
//! One set of files per replica ([`TlsConfig`]): the CA every replica and
//! client trusts, this replica's certificate and its key. They serve three
//! purposes:
//!
//! * **clients** connect to a server that presents this certificate; with
//!   `require_client_cert` (the default) a client must present one the CA
//!   signed;
//! * **peers, inbound**: a replica that dials us presents its certificate,
//!   which must chain to the CA *and* be bound to the replica id it claims
//!   in the transport's handshake;
//! * **peers, outbound**: the replica we dial must present a certificate
//!   bound to the id we dialed;
//! * **the HTTP port** (console, its API, `/metrics`, `/health`, `/ready`)
//!   presents this certificate too, and asks browsers and scrapers for no
//!   certificate: a bearer token is their credential (`crate::http_guard`);
//! * **the console, outbound**: it asks the other replicas for their
//!   `Status` at their client ports, presenting this certificate (the
//!   client port wants one of the CA by default) and checking that the
//!   replica reached is bound to the id it dialed, as a peer link does.
//!
//! **Identity binding.** Replica N's certificate carries the DNS name
//! `replica-N.creek` ([`replica_name`]) among its subject alternative
//! names, beside the hosts it serves clients on. Outbound, rustls checks it
//! as the server name; inbound, [`names_replica`] checks it against the
//! handshake's sender id once the TLS handshake has proved the peer holds
//! the key. A client certificate names no replica, so a client cannot pose
//! as one. A replica refuses to start with a certificate that does not
//! name its own id.
//!
//! **Rotation.** [`Tls::reload`] reads the files again and swaps the
//! configurations; connections made afterwards use the new ones, open
//! ones keep theirs. A reload that fails changes nothing.
//!
//! Not here: authentication of users beyond "the CA signed the client's
//! certificate" (`crate::auth`), and the HTTP port's serving
//! (`crate::http_port`).

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use creek_core::ReplicaId;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::TlsConfig;

/// Why TLS files could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no usable PEM item of the kind expected.
    #[error("{path}: {why}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// This replica's certificate is not bound to its id.
    #[error(
        "{path} is not replica {id}'s certificate: it does not name {name} (create one with \
         `creek certs create-node --id {id}`, docs/security.md)"
    )]
    NotBound {
        /// The certificate file.
        path: PathBuf,
        /// This replica's id.
        id: u16,
        /// The DNS name it should carry.
        name: String,
    },
    /// rustls refused the certificate, key or CA (for instance a key that
    /// does not match the certificate).
    #[error("{what}: {source}")]
    Rustls {
        /// What was being built.
        what: &'static str,
        /// rustls's reason.
        source: rustls::Error,
    },
}

/// The DNS name that binds a certificate to replica `id`.
pub fn replica_name(id: ReplicaId) -> String {
    format!("replica-{}.creek", id.0)
}

/// The crypto provider of every TLS configuration of Creek.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Whether `cert` (an end-entity certificate) names replica `id`.
pub fn names_replica(cert: &CertificateDer<'_>, id: ReplicaId) -> bool {
    let Ok(ee) = webpki::EndEntityCert::try_from(cert) else {
        return false;
    };
    let Ok(name) = ServerName::try_from(replica_name(id)) else {
        return false;
    };
    ee.verify_is_valid_for_subject_name(&name).is_ok()
}

/// The certificates of a PEM file (at least one).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file = std::fs::File::open(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    let certs = rustls_pemfile::certs(&mut BufReader::new(file))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_owned(),
            why: format!("not a PEM file of certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_owned(),
            why: "holds no certificate (expected -----BEGIN CERTIFICATE-----)".into(),
        });
    }
    Ok(certs)
}

/// The first private key of a PEM file.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let file = std::fs::File::open(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    match rustls_pemfile::private_key(&mut BufReader::new(file)) {
        Ok(Some(key)) => Ok(key),
        Ok(None) => Err(TlsError::Pem {
            path: path.to_owned(),
            why: "holds no private key (expected -----BEGIN PRIVATE KEY-----)".into(),
        }),
        Err(e) => Err(TlsError::Pem {
            path: path.to_owned(),
            why: format!("not a PEM file with a private key: {e}"),
        }),
    }
}

/// A root store of the CA file's certificates.
pub fn read_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots.add(cert).map_err(|e| TlsError::Pem {
            path: path.to_owned(),
            why: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// The rustls configurations one set of files makes.
struct Configs {
    clients: Arc<rustls::ServerConfig>,
    peers_in: Arc<rustls::ServerConfig>,
    peers_out: Arc<rustls::ClientConfig>,
    http: Arc<rustls::ServerConfig>,
    replicas_out: Arc<rustls::ClientConfig>,
}

/// The TLS state of one replica: its files and the configurations last
/// loaded from them.
pub struct Tls {
    me: ReplicaId,
    files: TlsConfig,
    current: RwLock<Arc<Configs>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("me", &self.me)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Load replica `me`'s files.
    pub fn load(me: ReplicaId, files: TlsConfig) -> Result<Tls, TlsError> {
        let configs = build(me, &files)?;
        Ok(Tls {
            me,
            files,
            current: RwLock::new(Arc::new(configs)),
        })
    }

    /// Read the files again; new connections use them from now on. On an
    /// error nothing changes.
    pub fn reload(&self) -> Result<(), TlsError> {
        let configs = build(self.me, &self.files)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(configs);
        Ok(())
    }

    fn configs(&self) -> Arc<Configs> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Accepts client connections (HTTP/2 by ALPN).
    pub fn client_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.configs().clients.clone())
    }

    /// Accepts peer connections: the peer must present a certificate of
    /// the CA (which replica it is bound to is checked after the
    /// transport's handshake, [`names_replica`]).
    pub fn peer_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.configs().peers_in.clone())
    }

    /// Dials peers, presenting this replica's certificate and checking
    /// that the peer's is bound to the id dialed.
    pub fn peer_connector(&self) -> TlsConnector {
        TlsConnector::from(self.configs().peers_out.clone())
    }

    /// Accepts connections to the HTTP port (HTTP/1.1 by ALPN), asking for
    /// no client certificate.
    pub fn http_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.configs().http.clone())
    }

    /// Dials other replicas' client ports (gRPC, HTTP/2 by ALPN) as a
    /// client, presenting this replica's certificate and checking that
    /// the replica reached is bound to the id dialed ([`replica_name`] is
    /// the server name).
    pub fn replica_connector(&self) -> TlsConnector {
        TlsConnector::from(self.configs().replicas_out.clone())
    }
}

fn build(me: ReplicaId, files: &TlsConfig) -> Result<Configs, TlsError> {
    let rustls_err = |what| move |source| TlsError::Rustls { what, source };
    let roots = Arc::new(read_roots(&files.ca)?);
    let chain = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    if !chain.first().is_some_and(|c| names_replica(c, me)) {
        return Err(TlsError::NotBound {
            path: files.cert.clone(),
            id: me.0,
            name: replica_name(me),
        });
    }
    let provider = provider();
    let verifier = |optional: bool| {
        let b = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
        let b = if optional {
            b.allow_unauthenticated()
        } else {
            b
        };
        b.build().map_err(|e| TlsError::Pem {
            path: files.ca.clone(),
            why: format!("cannot verify certificates with it: {e}"),
        })
    };
    let server = |optional: bool| -> Result<rustls::ServerConfig, TlsError> {
        rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(rustls_err("the TLS protocol versions"))?
            .with_client_cert_verifier(verifier(optional)?)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(rustls_err("this replica's certificate and key"))
    };
    let mut clients = server(!files.require_client_cert)?;
    // gRPC runs on HTTP/2; grpc-core clients insist on ALPN saying so.
    clients.alpn_protocols = vec![b"h2".to_vec()];
    let mut peers_in = server(false)?;
    // Peer links are long-lived and never resumed.
    peers_in.send_tls13_tickets = 0;
    let mut http = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(rustls_err("the TLS protocol versions"))?
        .with_no_client_auth()
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(rustls_err("this replica's certificate and key"))?;
    http.alpn_protocols = vec![b"http/1.1".to_vec()];
    let peers_out = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(rustls_err("the TLS protocol versions"))?
        .with_root_certificates(roots.clone())
        .with_client_auth_cert(chain, key)
        .map_err(rustls_err("this replica's certificate and key"))?;
    let mut replicas_out = peers_out.clone();
    replicas_out.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Configs {
        clients: Arc::new(clients),
        peers_in: Arc::new(peers_in),
        peers_out: Arc::new(peers_out),
        http: Arc::new(http),
        replicas_out: Arc::new(replicas_out),
    })
}

/// Certificates for tests, made with rcgen.
#[cfg(test)]
pub(crate) mod testing {
    use crate::config::TlsConfig;

    /// A CA and replica 1's certificate (`replica-1.creek`, `localhost`)
    /// in `dir`, the CA's roots, and a function that writes a new
    /// certificate of the CA for replica 1 in place.
    pub(crate) fn certs(dir: &std::path::Path) -> (TlsConfig, rustls::RootCertStore, impl Fn()) {
        std::fs::create_dir_all(dir).expect("temp dir");
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).expect("CA");
        let files = TlsConfig::in_dir(dir, 1);
        std::fs::write(&files.ca, ca_cert.pem()).expect("write");
        let roots = crate::tls::read_roots(&files.ca).expect("roots");
        let (cert, key) = (files.cert.clone(), files.key.clone());
        let renew = move || {
            let node_key = rcgen::KeyPair::generate().expect("key");
            let names = vec!["replica-1.creek".into(), "localhost".into()];
            let node = rcgen::CertificateParams::new(names)
                .expect("params")
                .signed_by(&node_key, &ca_cert, &ca_key)
                .expect("node");
            std::fs::write(&cert, node.pem()).expect("write");
            std::fs::write(&key, node_key.serialize_pem()).expect("write");
        };
        renew();
        (files, roots, renew)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The console's connector presents this replica's certificate, which
    /// a client port that requires client certificates takes, and reaches
    /// only the replica whose id it dials.
    #[tokio::test]
    async fn the_replica_connector_is_a_client_bound_to_the_id_dialed() {
        let dir = std::env::temp_dir().join(format!("creek-tls-dial-{}", std::process::id()));
        let (files, _, _) = testing::certs(&dir);
        let tls = Arc::new(Tls::load(ReplicaId(1), files).expect("TLS"));
        let _ = std::fs::remove_dir_all(&dir);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let acceptor = tls.client_acceptor();
        // What the server saw of each session: the client's certificate.
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, seen_tx) = (acceptor.clone(), seen_tx.clone());
                tokio::spawn(async move {
                    if let Ok(s) = acceptor.accept(tcp).await {
                        let (_, session) = s.get_ref();
                        let cert = session.peer_certificates().and_then(|c| c.first());
                        let _ = seen_tx.send(cert.is_some_and(|c| names_replica(c, ReplicaId(1))));
                    }
                });
            }
        });
        let dial = |id: u16| {
            let connector = tls.replica_connector();
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
                let name = ServerName::try_from(replica_name(ReplicaId(id))).expect("name");
                connector.connect(name, tcp).await
            }
        };
        let s = dial(1).await.expect("replica 1 reached as replica 1");
        assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        assert_eq!(
            seen.recv().await,
            Some(true),
            "replica 1's certificate presented"
        );
        let e = dial(2).await.expect_err("replica 1 is not replica 2");
        assert!(e.to_string().contains("certificate"), "{e}");
    }
}
